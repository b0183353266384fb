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
use crate::time::Duration;
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
}

impl Receivers {
    /// For a view of `members`, in `layer`.
    pub(crate) fn new(members: usize, layer: LayerKind) -> Receivers {
        Receivers { consumers: vec![Consumer::default(); members], lagging: false, flushed: false, layer }
    }

    /// Origins counted (the view's size).
    pub(crate) fn len(&self) -> usize {
        self.consumers.len()
    }

    /// Whether reports are withheld (the fast paths leave such messages to the layered path).
    /// Counts one message of `origin` of `len` payload bytes; the cumulative count to report,
    /// if a report is due now (never while the application lags).
    pub(crate) fn consume(&mut self, origin: Rank, window: u64, len: usize) -> Option<u64> {
        let consumer = &mut self.consumers[usize::from(origin)];
        if self.lagging {
            consumer.consumed += cost(len);
            return None;
        }
        consumer.consume(window, len)
    }

    /// What [`Receivers::consume`] would return, without counting (the fast path's condition):
    /// no report while the application lags, so the fast path counts silently as the layered
    /// path does.
    pub(crate) fn peek(&self, origin: Rank, window: u64, len: usize) -> Option<u64> {
        if self.lagging {
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
            if failed.contains(origin) {
                continue;
            }
            if let Some(count) = consumer.owed(cap) {
                send_report(out, self.layer, origin, report(count));
            }
        }
    }
}

/// Sends `origin` a report of what this member consumed of its messages (`mflow`'s credit,
/// `pt2ptw`'s acknowledgement).
pub(crate) fn send_report(out: &mut Outbox<'_>, layer: LayerKind, origin: Rank, report: impl Into<Header>) {
    out.count(layer, Counter::AckSent);
    out.dn(Dn::Send { dest: origin, msg: Msg::default().with(report.into()) });
}
