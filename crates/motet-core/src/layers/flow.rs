//! Shared window bookkeeping of the flow-control layers `pt2ptw` and `mflow` (not a layer).
//!
//! Windows count bytes, as TCP's, JGroups' `MFC` and Aeron's do, not messages: a message costs
//! its payload plus [`MESSAGE_CHARGE`] ([`cost`]). So a window bounds what a sender can make a
//! receiver hold in bytes whatever the messages' size, and a window that lets small messages
//! through fast does not let large ones pile up (a window of 256 messages was 16 KiB of 64 B
//! messages, too little to keep three members casting on loopback busy, and 256 KiB of 1 KiB
//! fragments; docs/PERFORMANCE.md, "Windows in bytes"). The charge also bounds the number of
//! messages outstanding (at most `window / MESSAGE_CHARGE` + 1), which header compression relies
//! on (`WINDOW_BYTES_MAX`).
//!
//! A sender may have at most `window` bytes that its receiver(s) have not yet reported as
//! consumed: it sends while less than that is outstanding, so one message may take it past the
//! window. Beyond that, messages wait in a pending queue and the layer reports `FlowBlock`
//! upward; `appl` then refuses new actions until the release, so the application's part of the
//! queue never exceeds one message's fragments, which `StackConfig::validate` checks against
//! `pending_max` (a count of messages: what the queue holds). The layers' own casts (a
//! sequencer's orders, `safe`'s acknowledgements, a flush) still queue behind them: few, and
//! bounded by the casts they answer, but not by `pending_max`, so a queue past it is counted
//! (`Counter::FlowQueueOver`), not a panic (it was one until the fourteenth session: a sequencer
//! behind a member that lags for long orders the casts of every sender, and the trickle lets it
//! send `lag_trickle_bytes` per interval; `motet-sim/tests/lag.rs` shows it with a `pending_max`
//! of 16).
//!
//! Receivers report cumulative bytes every `window / 2` bytes, which keeps the protocol live: a
//! blocked sender has at least `window` bytes outstanding, so each receiver eventually crosses a
//! report boundary.

use super::LayerKind;
use crate::event::{Counter, Dn, Msg};
use crate::layer::Outbox;
use crate::time::{Duration, Instant};
use crate::view::RankSet;
use crate::Rank;
use motet_wire::Header;
use std::collections::VecDeque;

/// What a message costs against a window beyond its payload: about what holding it costs a
/// receiver besides its bytes (its record in a queue and its headers). An empty message costs
/// this, so a window of `w` bytes has at most `w / MESSAGE_CHARGE` + 1 messages outstanding.
pub const MESSAGE_CHARGE: u64 = 64;

/// What a message of `len` payload bytes costs against a window.
#[inline]
pub(crate) fn cost(len: usize) -> u64 {
    len as u64 + MESSAGE_CHARGE
}

/// The sending side of one flow-controlled channel.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Window {
    /// Bytes passed down so far (each message's [`cost`]).
    pub(crate) sent: u64,
    pending: VecDeque<Msg>,
}

/// What to do with an offered message.
pub(crate) enum Offer {
    /// Send it now.
    Send(Msg),
    /// Queued; the channel just became blocked (report `FlowBlock { blocked: true }`).
    Blocked,
    /// Queued behind others.
    Queued,
}

impl Window {
    /// Offers a message given the receiver-reported `consumed` count. A message queued beyond
    /// `pending_max` is counted in `out`, as `layer`'s (see the module documentation).
    pub(crate) fn offer(
        &mut self,
        msg: Msg,
        consumed: u64,
        window: u64,
        pending_max: usize,
        out: &mut Outbox<'_>,
        layer: LayerKind,
    ) -> Offer {
        if self.pending.is_empty() && self.sent - consumed < window {
            self.sent += cost(msg.payload.len());
            return Offer::Send(msg);
        }
        if self.pending.len() >= pending_max {
            out.count(layer, Counter::FlowQueueOver);
        }
        self.pending.push_back(msg);
        if self.pending.len() == 1 {
            Offer::Blocked
        } else {
            Offer::Queued
        }
    }

    /// Whether [`Window::offer`] would send a message now (the fast path's condition; the
    /// message's size does not enter it: what is outstanding is compared, before the message).
    pub(crate) fn admits(&self, consumed: u64, window: u64) -> bool {
        self.pending.is_empty() && self.sent - consumed < window
    }

    /// Releases queued messages the window now admits, handing each to `emit`. Returns true when
    /// the channel was blocked and is now clear (report `FlowBlock { blocked: false }`).
    pub(crate) fn release(&mut self, consumed: u64, window: u64, mut emit: impl FnMut(Msg)) -> bool {
        let was_blocked = !self.pending.is_empty();
        while !self.pending.is_empty() && self.sent - consumed < window {
            let msg = self.pending.pop_front().expect("non-empty");
            self.sent += cost(msg.payload.len());
            emit(msg);
        }
        was_blocked && self.pending.is_empty()
    }

    /// Drops everything queued (the receiver failed). Returns true if the channel was blocked.
    pub(crate) fn clear(&mut self) -> bool {
        let was_blocked = !self.pending.is_empty();
        self.pending.clear();
        was_blocked
    }

    /// Messages waiting.
    pub(crate) fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Asserts the window's invariant.
    pub(crate) fn check(&self, consumed: u64, window: u64) {
        assert!(consumed <= self.sent, "consumed {consumed} > sent {}", self.sent);
        if !self.pending.is_empty() {
            assert!(self.sent - consumed >= window, "pending messages while the window is open");
        }
    }
}

/// The receiving side of one origin: counts the bytes consumed ([`cost`]) and says when to
/// report.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Consumer {
    consumed: u64,
    reported: u64,
}

impl Consumer {
    /// Counts one message of `len` bytes; returns the cumulative count to report, if a report
    /// is due.
    fn consume(&mut self, window: u64, len: usize) -> Option<u64> {
        self.consumed += cost(len);
        if self.consumed - self.reported >= (window / 2).max(1) {
            self.reported = self.consumed;
            return Some(self.consumed);
        }
        None
    }

    /// The cumulative count to report now if any message is unreported, at most `cap` beyond
    /// the last report, marked reported.
    fn owed(&mut self, cap: u64) -> Option<u64> {
        (self.consumed > self.reported).then(|| {
            self.reported = self.consumed.min(self.reported.saturating_add(cap));
            self.reported
        })
    }

    /// What [`Consumer::consume`] would return, without counting (the fast path's condition).
    fn peek(&self, window: u64, len: usize) -> Option<u64> {
        let consumed = self.consumed + cost(len);
        (consumed - self.reported >= (window / 2).max(1)).then_some(consumed)
    }
}

/// The receiving side of a flow-control layer: what this member consumed of each origin, and
/// whether its application lags its events (`Dn::Lagging`). While it lags, counts are withheld,
/// and reported only at the layer's timer (every `lag_report_interval`: the layers' own messages
/// held at the senders behind the application's must get out), at most `lag_trickle_bytes` beyond
/// the last report each time, so the senders wait for it. The trickle is its own parameter rather
/// than the window: reporting all that is owed would let a full window through per interval,
/// which would tie a lagging member's intake to the window that throughput wants large. A
/// flush (`Block`) lifts the lag for the rest of the view: the others' flushes wait for their
/// held messages, which need this member's reports.
#[derive(Debug, PartialEq)]
pub(crate) struct Receivers {
    consumers: Vec<Consumer>,
    /// The application lags and no flush has begun in this view.
    lagging: bool,
    /// A flush has begun in this view: a lag no longer withholds reports.
    flushed: bool,
    /// The layer whose reports these are (`mflow` or `pt2ptw`), which counts them.
    layer: LayerKind,
    /// Testing the credit deadline: the origin this member never reports to (a faulty member,
    /// `crate::faults::withhold_credit`; always `None` otherwise).
    withheld: Option<Rank>,
}

impl Receivers {
    /// For a view of `members`, in `layer`.
    pub(crate) fn new(members: usize, layer: LayerKind) -> Receivers {
        Receivers {
            consumers: vec![Consumer::default(); members],
            lagging: false,
            flushed: false,
            layer,
            withheld: None,
        }
    }

    /// The seeded fault (`crate::faults::withhold_credit`, set by the stack as it builds its
    /// layers): this member never reports to `origin`.
    #[cfg(any(test, feature = "fault-injection"))]
    pub(crate) fn withhold(&mut self, origin: Rank) {
        self.withheld = Some(origin);
    }

    /// The seeded fault: `origin` never hears from this member.
    #[inline(always)]
    fn withholds(&self, origin: Rank) -> bool {
        #[cfg(any(test, feature = "fault-injection"))]
        return self.withheld == Some(origin);
        #[cfg(not(any(test, feature = "fault-injection")))]
        {
            let _ = origin;
            false
        }
    }

    /// Origins counted (the view's size).
    pub(crate) fn len(&self) -> usize {
        self.consumers.len()
    }

    /// Whether reports are withheld (the fast paths leave such messages to the layered path).
    /// Counts one message of `origin` of `len` payload bytes; the cumulative count to report,
    /// if a report is due now (never while the application lags).
    pub(crate) fn consume(&mut self, origin: Rank, window: u64, len: usize) -> Option<u64> {
        let withheld = self.withholds(origin);
        let consumer = &mut self.consumers[usize::from(origin)];
        if self.lagging || withheld {
            consumer.consumed += cost(len);
            return None;
        }
        consumer.consume(window, len)
    }

    /// What [`Receivers::consume`] would return, without counting (the fast path's condition):
    /// no report while the application lags, so the fast path counts silently as the layered
    /// path does.
    pub(crate) fn peek(&self, origin: Rank, window: u64, len: usize) -> Option<u64> {
        if self.lagging || self.withholds(origin) {
            return None;
        }
        self.consumers[usize::from(origin)].peek(window, len)
    }

    /// `Dn::Lagging`: a lag that begins arms the layer's timer, one that ends reports what is
    /// owed. `report` makes the layer's header of a report.
    pub(crate) fn lag<H: Into<Header>>(
        &mut self,
        lagging: bool,
        interval: Duration,
        failed: &RankSet,
        out: &mut Outbox<'_>,
        report: impl Fn(u64) -> H,
    ) {
        let was = std::mem::replace(&mut self.lagging, lagging && !self.flushed);
        match (was, self.lagging) {
            (false, true) => out.alarm(out.now() + interval),
            (true, false) => self.report_owed(u64::MAX, failed, out, report),
            _ => {}
        }
    }

    /// `Dn::Block`: the lag ends for the rest of the view, and what is owed is reported.
    pub(crate) fn flush<H: Into<Header>>(&mut self, failed: &RankSet, out: &mut Outbox<'_>, report: impl Fn(u64) -> H) {
        self.flushed = true;
        if std::mem::take(&mut self.lagging) {
            self.report_owed(u64::MAX, failed, out, report);
        }
    }

    /// The layer's timer: while the application lags, what it owes trickles out, at most
    /// `trickle` bytes per origin, and again an `interval` later.
    pub(crate) fn tick<H: Into<Header>>(
        &mut self,
        interval: Duration,
        trickle: u64,
        failed: &RankSet,
        out: &mut Outbox<'_>,
        report: impl Fn(u64) -> H,
    ) {
        if self.lagging {
            self.report_owed(trickle, failed, out, report);
            out.alarm(out.now() + interval);
        }
    }

    /// Reports the counts not yet reported to each live origin, point-to-point, each at most
    /// `cap` beyond its last report.
    fn report_owed<H: Into<Header>>(
        &mut self,
        cap: u64,
        failed: &RankSet,
        out: &mut Outbox<'_>,
        report: impl Fn(u64) -> H,
    ) {
        for (origin, consumer) in self.consumers.iter_mut().enumerate() {
            let origin = origin as Rank;
            if failed.contains(origin) || self.withheld == Some(origin) {
                continue;
            }
            if let Some(count) = consumer.owed(cap) {
                send_report(out, self.layer, origin, report(count));
            }
        }
    }
}

/// The credit deadline of a flow-control layer's sending side (`credit_timeout_ms`): a receiver
/// that holds a blocked window shut and reports nothing for that long is suspected, once
/// (counter `CreditOverdue`), so the view change excludes it (in a stack with `slander` and
/// `intra`, `mflow` also takes it out of the window at once, or the suspicion, a cast, would wait
/// behind the casts it starved). Without it, a member that beats
/// (so the failure detector keeps it) but never reports its credit held its senders' casts or
/// sends for good, and with them their flushes: a coordinator starved so waited for its own
/// flush for ever, and in `total` a starved sequencer stopped ordering for the whole group (a
/// review's finding, thirty-eighth session). As `pt2pt.ack_timeout_ms` is for
/// acknowledgements.
///
/// An honest receiver never trips it: one that holds a window shut has not reported a window's
/// worth of what was sent, so it owes a report as soon as it has received them (`Consumer`
/// reports every half window), and while its application lags it still reports every
/// `lag_report_interval` (the trickle). So its credit moves well within the deadline unless it
/// cannot hear the sender at all, and then it is right to exclude it. The clock of a receiver
/// starts when it begins to hold the window (not when it last reported: a fast receiver that
/// had no reason to report for minutes may hold for a moment after the sender's window moved)
/// and starts again each time its credit moves.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct CreditWatch {
    /// `None` until the first block of the view: a stack that never blocks keeps nothing, and
    /// the layer's slot in every stack grows by a pointer only (`a_layer_slot_stays_small`).
    watched: Option<Box<Watched>>,
}

/// What a [`CreditWatch`] keeps once a window has blocked.
#[derive(Debug, PartialEq)]
struct Watched {
    /// Per peer: since when it holds a blocked window without its credit moving.
    since: Vec<Option<Instant>>,
    /// Peers suspected already (the view change that excludes them is under way).
    suspected: RankSet,
    /// When the watch last looked: a look more than an interval late means this process did not
    /// run, and that time counts against no peer (as `pt2pt`'s and `suspect`'s deadlines).
    last_look: Instant,
    /// The stack is replaced and lingers (`Dn::Replaced`): it suspects no one any more (as
    /// `suspect`), since the next view has settled who is in the group.
    stopped: bool,
}

impl CreditWatch {
    /// How often a blocked sender looks: a receiver is suspected between one and 1.25
    /// deadlines after it began to hold the window.
    pub(crate) fn interval(timeout: Duration) -> Duration {
        Duration((timeout.0 / 4).max(Duration::from_millis(1).0))
    }

    /// Peer `peer` of a view of `members` holds the window shut (`holds`) or not, at `now`: its
    /// clock starts, goes on, or stops.
    pub(crate) fn hold(&mut self, members: usize, peer: Rank, holds: bool, now: Instant) {
        let watched = match (&mut self.watched, holds) {
            (Some(watched), _) => watched,
            (None, false) => return,
            (None, true) => self.watched.insert(Box::new(Watched {
                since: vec![None; members],
                suspected: RankSet::new(),
                last_look: now,
                stopped: false,
            })),
        };
        if watched.stopped {
            return;
        }
        let since = &mut watched.since[usize::from(peer)];
        match holds {
            true => {
                since.get_or_insert(now);
            }
            false => *since = None,
        }
    }

    /// `peer`'s credit moved at `now`: its clock starts again if it runs.
    pub(crate) fn moved(&mut self, peer: Rank, now: Instant) {
        if let Some(since @ Some(_)) = self.watched.as_mut().and_then(|w| w.since.get_mut(usize::from(peer))) {
            *since = Some(now);
        }
    }

    /// The stack is replaced (`Dn::Replaced`): every clock stops for good.
    pub(crate) fn stop(&mut self) {
        let watched = self.watched.get_or_insert_with(|| {
            Box::new(Watched { since: Vec::new(), suspected: RankSet::new(), last_look: Instant::ZERO, stopped: true })
        });
        watched.stopped = true;
        watched.since.iter_mut().for_each(|since| *since = None);
    }

    /// Whether the watch suspected `peer`.
    #[inline]
    pub(crate) fn suspected(&self, peer: Rank) -> bool {
        self.watched.as_ref().is_some_and(|w| w.suspected.contains(peer))
    }

    /// Whether the watch suspected anyone.
    #[inline]
    pub(crate) fn suspected_any(&self) -> bool {
        self.watched.as_ref().is_some_and(|w| !w.suspected.is_empty())
    }

    /// No window is blocked any more: every clock stops.
    pub(crate) fn clear(&mut self) {
        if let Some(watched) = &mut self.watched {
            watched.since.iter_mut().for_each(|since| *since = None);
        }
    }

    /// Whether any clock runs (the sender is blocked by someone).
    pub(crate) fn running(&self) -> bool {
        self.watched.as_ref().is_some_and(|w| w.since.iter().any(Option::is_some))
    }

    /// The layer's timer: the peers whose clock ran for `timeout`, not failed and not suspected
    /// yet, are suspected (`Up::Suspect`, counted as `layer`'s `CreditOverdue`), and returned; the
    /// next look is armed while any clock runs.
    pub(crate) fn look(
        &mut self,
        timeout: Duration,
        failed: &RankSet,
        out: &mut Outbox<'_>,
        layer: LayerKind,
    ) -> RankSet {
        let Some(watched) = &mut self.watched else { return RankSet::new() };
        let now = out.now();
        let interval = Self::interval(timeout);
        let late = now.saturating_since(watched.last_look + interval);
        if late > interval {
            for since in watched.since.iter_mut().flatten() {
                *since = (*since + late).min(now);
            }
        }
        watched.last_look = now;
        let overdue: RankSet = (0..watched.since.len() as Rank)
            .filter(|&r| !failed.contains(r) && !watched.suspected.contains(r))
            .filter(|&r| watched.since[usize::from(r)].is_some_and(|since| since + timeout <= now))
            .collect();
        if !overdue.is_empty() {
            tracing::warn!(
                ?overdue,
                ?layer,
                "receivers held a window shut without reporting credit within credit_timeout: suspected"
            );
            for _ in overdue.iter() {
                out.count(layer, Counter::CreditOverdue);
            }
            watched.suspected.union_with(&overdue);
            out.up(crate::event::Up::Suspect(overdue.clone()));
        }
        if self.running() {
            out.alarm(now + interval);
        }
        overdue
    }

    /// Arms the next look when a window has just blocked (no clock ran before, one runs now);
    /// the time since the last look counts against nobody.
    pub(crate) fn arm(&mut self, was_running: bool, out: &mut Outbox<'_>, timeout: Duration) {
        if !was_running && self.running() {
            if let Some(watched) = &mut self.watched {
                watched.last_look = out.now();
            }
            out.alarm(out.now() + Self::interval(timeout));
        }
    }
}

/// Sends `origin` a report of what this member consumed of its messages (`mflow`'s credit,
/// `pt2ptw`'s acknowledgement).
pub(crate) fn send_report(out: &mut Outbox<'_>, layer: LayerKind, origin: Rank, report: impl Into<Header>) {
    out.count(layer, Counter::AckSent);
    out.dn(Dn::Send { dest: origin, msg: Msg::default().with(report.into()) });
}
