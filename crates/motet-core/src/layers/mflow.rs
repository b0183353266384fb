//! `mflow`: credit flow control for multicasts (thesis Fig 2.3; SOSP Table 2b).
//!
//! Provides: [`Service::CastFlow`]. Requires below: [`Service::ReliableCast`] (it counts casts
//! delivered in order) and [`Service::ReliableSend`] (credit goes back point-to-point). Header:
//! `NoHdr` on casts, `Credit { count }` on feedback (cumulative bytes consumed). A sender may be
//! at most `window_bytes` ahead of its slowest live receiver (each cast costs its payload and
//! `MESSAGE_CHARGE`, see `flow.rs`); beyond that casts queue (bounded) and
//! `FlowBlock { dest: None }` goes up. Unreliable casts (gossip) are not flow controlled.
//!
//! While the application lags its events (`Dn::Lagging`), credit is counted but reported only
//! every `lag_report_interval`, at most `lag_trickle_bytes` beyond the last report each time (not
//! all that is owed: that would let a whole window through per interval, and the window is sized
//! for throughput), so the senders' windows close and their casts wait at them
//! (Ensemble test 26: a slow receiver throttles its senders, with bounded buffering); `appl`
//! refuses the member's own application casts meanwhile, since they come back to it. The trickle
//! exists for the layers' own casts, which queue behind the application's at a sender (a flush's
//! cast among them, a sequencer's order, an acknowledgement of `safe`). A flush (`Block`) lifts
//! the lag for the rest of the view: the others' held flushes wait for their pending casts to go
//! out, which needs this member's credit.

use super::flow::{send_report, CreditWatch, Offer, Receivers, Window};
use crate::event::{Counter, Dn, DropReason, Msg, Qos, Up};
use crate::fast::{self, DnStep, Down, UpStep};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::time::Duration;
use crate::view::{RankSet, ViewState};
use crate::Rank;
use motet_wire::hdr::mflow::Header;

/// `mflow` parameters.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Bytes a sender may be ahead of its slowest live receiver, each cast (fragment) counted as
    /// its payload and `MESSAGE_CHARGE`. Default 512 KiB: 4,096 casts of 64 B, 481
    /// fragments of 1 KiB. A receiver buffers at most about a window per live sender. With a
    /// window of 256 casts whatever their size (until the twenty-sixth session), three members
    /// casting 64 B messages on loopback were idle 15% of the time, waiting for credit
    /// (docs/PERFORMANCE.md, "Windows in bytes"). At most `WINDOW_BYTES_MAX`.
    pub window_bytes: u64,
    /// Casts queued while blocked. Default 2048; must hold the fragments of the largest message.
    pub pending_max: usize,
    /// While the application lags ([`Dn::Lagging`]), credit is still reported this often, so
    /// the layers' own messages held at their senders behind the application's (a view change's
    /// flush among them) get out at the next report, and an application that stopped reading
    /// receives at most `lag_trickle_bytes` from each sender per interval. Default 500 ms.
    #[serde(
        rename = "lag_report_interval_ms",
        deserialize_with = "crate::time::millis",
        serialize_with = "crate::time::ser_millis"
    )]
    pub lag_report_interval: Duration,
    /// While the application lags, the bytes (counted as the window counts them) each sender may
    /// send it per `lag_report_interval`, beyond the window that was in flight when the lag
    /// began. Default 64 KiB: a stopped application takes in little. A view change's flush,
    /// queued at a sender behind at most one message's fragments, waits up to
    /// `ceil(cost of the fragments / lag_trickle_bytes)` intervals: 17 (8.5 s) behind a 1 MiB
    /// message in 1 KiB fragments, none behind small ones. (Before the fourteenth session the
    /// trickle was the window; a deployment that raises its window to send large messages
    /// through lags faster raises this too.)
    pub lag_trickle_bytes: u64,
    /// How long a live receiver may hold this sender's window shut (casts waiting) without its
    /// credit moving before it is suspected (counter `CreditOverdue`; `flow::CreditWatch`).
    /// Default 10 s, as `pt2pt.ack_timeout_ms`: an honest receiver that holds the window has
    /// half a window unreported once it has received what was sent, so it reports then, and
    /// every `lag_report_interval` while its application lags. Longer than
    /// `suspect.timeout_ms` and twice `lag_report_interval_ms`.
    #[serde(
        rename = "credit_timeout_ms",
        deserialize_with = "crate::time::millis",
        serialize_with = "crate::time::ser_millis"
    )]
    pub credit_timeout: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            window_bytes: 512 * 1024,
            pending_max: 2048,
            lag_report_interval: Duration::from_millis(500),
            lag_trickle_bytes: 64 * 1024,
            credit_timeout: Duration::from_millis(10_000),
        }
    }
}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "mflow",
    summary: "multicast credit flow control with back-pressure",
    provides: &[Service::CastFlow],
    requires_below: &[Service::ReliableCast, Service::ReliableSend],
    requires_above: &[],
    above_every: &[],
    // Below `appl`, so that every application message passes the window, and below `frag`, so
    // that the window counts what the reliable layer numbers (each fragment): header
    // compression sends 24 bits of a sequence number and relies on a sender never being
    // 2^15 ahead, which the window bounds only then (`Stack::compress`).
    below_every: &[Service::Application, Service::Fragmentation],
};

/// `mflow` state.
#[derive(Debug, PartialEq)]
pub struct Mflow {
    config: Config,
    rank: Rank,
    failed: RankSet,
    window: Window,
    /// Per receiver: how many bytes of our casts it reported consumed.
    credit: Vec<u64>,
    /// The least of `credit` over the live receivers (`u64::MAX`: none is live, so what was sent
    /// bounds it: not an `Option`, whose tag took the layer's slot in every stack past its bound,
    /// `a_layer_slot_stays_small`), kept as credit and failures change: every cast asks it, and
    /// the minimum over the view cost a pass over every member per cast (about 30 instructions
    /// with two members, 300 with 64).
    slowest: u64,
    /// Per origin: how many bytes of its casts we consumed (and whether the application lags).
    receivers: Receivers,
    /// A flush (`Block`) waits here until every pending cast is out, and a `Cut` behind it.
    block: super::HeldBlock,
    /// The receivers holding the window shut while casts wait, and since when
    /// (`Config::credit_timeout`).
    watch: CreditWatch,
    /// The stack shares suspicions with the coordinator (`slander`), whose membership layer
    /// (`intra`) excludes the suspected, so a receiver the watch suspects is taken out of the
    /// window at once (see `handle_timer`).
    takes_out: bool,
}

impl Mflow {
    /// An `mflow` for `view`.
    pub fn new(config: &Config, view: &ViewState, rank: Rank) -> Mflow {
        Mflow {
            config: config.clone(),
            rank,
            failed: RankSet::new(),
            window: Window::default(),
            credit: vec![0; view.len()],
            slowest: if view.len() > 1 { 0 } else { u64::MAX },
            receivers: Receivers::new(view.len(), super::LayerKind::Mflow),
            block: super::HeldBlock::default(),
            watch: CreditWatch::default(),
            // `slander` carries the suspicion to the coordinator and `intra` acts on it; either
            // alone excludes nobody (`Frag+Flow+Local+Suspect+Slander` is a valid stack without
            // membership: a review's finding).
            takes_out: [super::LayerKind::Slander, super::LayerKind::Intra]
                .iter()
                .all(|k| view.stack.layers().contains(k)),
        }
    }

    /// Whether `r` no longer holds the window: failed, or suspected by the credit watch in a stack
    /// whose view change will exclude it.
    #[inline]
    fn out_of_window(&self, r: Rank) -> bool {
        self.failed.contains(r) || (self.takes_out && self.watch.suspected(r))
    }

    /// Every receiver of the view is within the window of this sender: none is marked failed or
    /// taken out by the credit watch (such a member no longer holds the window back, so the gap
    /// to it is unbounded until the view change excludes it). `Stack::compress` relies on the
    /// bound.
    pub(crate) fn bounds_every_receiver(&self) -> bool {
        self.failed.is_empty() && !(self.takes_out && self.watch.suspected_any())
    }

    /// What the slowest live receiver consumed (everything we sent, if we are alone).
    #[inline]
    fn consumed(&self) -> u64 {
        // Credit never exceeds what was sent, so this is the slowest's when one is live.
        self.slowest.min(self.window.sent)
    }

    /// The least credit of a live receiver, counted over the view (what `slowest` keeps).
    fn slowest_live(&self) -> u64 {
        let live = (0..self.credit.len() as Rank).filter(|&r| r != self.rank && !self.out_of_window(r));
        live.map(|r| self.credit[usize::from(r)]).min().unwrap_or(u64::MAX)
    }

    /// Records a credit report from `origin` (cumulative bytes it consumed, never more than we
    /// sent: a report of more is dropped before this). The layered handler and the fast path
    /// share it. Credit only grows, so the slowest receiver's changes only when it was
    /// `origin`'s. Whether the credit moved.
    fn take_credit(&mut self, origin: Rank, count: u64) -> bool {
        let o = usize::from(origin);
        let before = self.credit[o];
        debug_assert!(count <= self.window.sent, "both callers drop a report of more than was sent");
        self.credit[o] = before.max(count);
        if self.slowest == before && self.credit[o] != before {
            self.slowest = self.slowest_live();
        }
        self.credit[o] != before
    }

    fn release(&mut self, out: &mut Outbox<'_>) {
        let consumed = self.consumed();
        if self.window.release(consumed, self.config.window_bytes, |msg| out.dn(Dn::Cast { msg, qos: Qos::Reliable })) {
            out.up(Up::FlowBlock { dest: None, blocked: false });
        }
        // A held flush continues once nothing is pending.
        if self.window.pending() == 0 {
            self.block.release(out);
        }
        self.rewatch(out);
    }

    /// Which live receivers hold the window shut while casts wait (each that has not reported
    /// within a window of what was sent): their clocks run (`CreditWatch`), the others' stop.
    /// Only while blocked, so never on the fast path (whose casts need an open window).
    fn rewatch(&mut self, out: &mut Outbox<'_>) {
        let was_running = self.watch.running();
        if self.window.pending() == 0 {
            if was_running {
                self.watch.clear();
            }
            return;
        }
        let (n, now, sent, window) = (self.credit.len(), out.now(), self.window.sent, self.config.window_bytes);
        for r in 0..n as Rank {
            let holds = r != self.rank && !self.out_of_window(r) && sent - self.credit[usize::from(r)] >= window;
            self.watch.hold(n, r, holds, now);
        }
        self.watch.arm(was_running, out, self.config.credit_timeout);
    }
}

/// A credit report's header.
fn credit(count: u64) -> Header {
    Header::Credit { count }
}

impl Mflow {
    /// The seeded fault of a member that never reports its credit to `origin`
    /// (`crate::faults::withhold_credit`).
    #[cfg(any(test, feature = "fault-injection"))]
    pub(crate) fn withhold_credit(&mut self, origin: Rank) {
        self.receivers.withhold(origin);
    }
}

impl Layer for Mflow {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Cast { origin, mut msg, qos } => match msg.pop_as::<Header>() {
                Some(Header::NoHdr) => {
                    if qos == Qos::Reliable {
                        if let Some(count) = self.receivers.consume(origin, self.config.window_bytes, msg.payload.len())
                        {
                            send_report(out, super::LayerKind::Mflow, origin, credit(count));
                        }
                    }
                    out.up(Up::Cast { origin, msg, qos });
                }
                _ => out.drop_input(super::LayerKind::Mflow, DropReason::HeaderMismatch),
            },
            Up::Send { origin, mut msg } => match msg.pop_as::<Header>() {
                Some(Header::NoHdr) => out.up(Up::Send { origin, msg }),
                // More than we sent: no correct member reports that (each counts what it
                // consumed of this view's casts, as we count them). Dropped and counted, not
                // clamped as until the thirty-ninth session, so a faulty peer shows in the drops.
                Some(Header::Credit { count }) if count > self.window.sent => {
                    out.drop_input(super::LayerKind::Mflow, DropReason::Malformed)
                }
                Some(Header::Credit { count }) => {
                    if self.take_credit(origin, count) {
                        self.watch.moved(origin, out.now());
                    }
                    self.release(out);
                }
                None => out.drop_input(super::LayerKind::Mflow, DropReason::HeaderMismatch),
            },
            other => out.up(other),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        match ev {
            Dn::Cast { msg, qos: Qos::Reliable } => {
                let consumed = self.consumed();
                let (window, pending_max) = (self.config.window_bytes, self.config.pending_max);
                match self.window.offer(
                    msg.with(Header::NoHdr),
                    consumed,
                    window,
                    pending_max,
                    out,
                    super::LayerKind::Mflow,
                ) {
                    Offer::Send(msg) => out.dn(Dn::Cast { msg, qos: Qos::Reliable }),
                    Offer::Blocked => {
                        out.count(super::LayerKind::Mflow, Counter::FlowBlocked);
                        out.up(Up::FlowBlock { dest: None, blocked: true });
                        self.rewatch(out);
                    }
                    Offer::Queued => {}
                }
            }
            Dn::Fail(ranks) => {
                self.failed.union_with(&ranks);
                self.slowest = self.slowest_live();
                out.dn(Dn::Fail(ranks));
                self.release(out);
            }
            Dn::Block => {
                // The others' flushes wait for their pending casts, which need this member's
                // credit: a lag ends here for the rest of the view.
                self.receivers.flush(&self.failed, out, credit);
                self.block.hold();
                self.release(out);
            }
            Dn::Lagging(lagging) => {
                self.receivers.lag(lagging, self.config.lag_report_interval, &self.failed, out, credit);
                out.dn(Dn::Lagging(lagging));
            }
            Dn::Cut(cut) => self.block.cut(cut, out),
            Dn::Replaced => {
                self.watch.stop();
                out.dn(Dn::Replaced);
            }
            other => out.pass_dn(other, Header::NoHdr),
        }
    }

    fn handle_timer(&mut self, out: &mut Outbox<'_>) {
        // While the application lags, what it owes trickles out (`Config::lag_report_interval`).
        self.receivers.tick(self.config.lag_report_interval, self.config.lag_trickle_bytes, &self.failed, out, credit);
        // While casts wait, receivers that hold the window shut and report nothing are
        // suspected after `credit_timeout`. In a stack that shares suspicions (`slander`), they
        // no longer hold the window: the suspicion leaves as a cast, to the coordinator, which
        // would otherwise wait here behind the casts they hold, for good at a member that is not
        // the coordinator (a review's finding). They are out of the window's count as a failure
        // would take them (the view change that excludes them is under way), which also stops
        // header compression, whose sequence numbers rely on every receiver being within the
        // window; this member still reports its own credit to them (`failed` is not touched),
        // in case the view change keeps them. In a stack without `slander` the suspicion reaches
        // the coordinator only if this member is it (its own flush then fails them), and without
        // membership it reaches no one: taking them out there would leave them out of flow
        // control for good (a review's finding), so the sender waits, as it did before.
        if self.watch.running() {
            let overdue = self.watch.look(self.config.credit_timeout, &self.failed, out, super::LayerKind::Mflow);
            if self.takes_out && !overdue.is_empty() {
                self.slowest = self.slowest_live();
                self.release(out);
            }
        }
    }

    // Fast path: a reliable cast the window admits (counted); a reliable cast received
    // (consumed, with a `Credit` reply when a report is due); the rest passes.
    fn fast_dn(&self, down: &Down) -> Option<DnStep> {
        if down.dest.is_none()
            && down.qos == Qos::Reliable
            && !self.window.admits(self.consumed(), self.config.window_bytes)
        {
            return None;
        }
        DnStep::pass(Header::NoHdr, down)
    }

    fn fast_dn_apply(&mut self, down: &Down, _out: &mut Outbox<'_>) {
        if down.dest.is_none() && down.qos == Qos::Reliable {
            self.window.sent += super::flow::cost(down.len);
        }
    }

    fn fast_up(&self, up: &fast::Up<'_>) -> Option<UpStep> {
        if let motet_wire::Header::Mflow(Header::Credit { count }) = up.header {
            // A credit report that releases nothing (no cast waits, no flush is held) only
            // raises a count: kept here, with no event. One of more than was sent is the layered
            // path's to drop.
            let quiet = !up.cast && self.window.pending() == 0 && !self.block.held && *count <= self.window.sent;
            return quiet.then_some(UpStep { absorb: true, ..UpStep::to(up.qos) });
        }
        if !fast::is(up.header, Header::NoHdr) {
            return None;
        }
        let reply = match up.cast && up.qos == Qos::Reliable {
            true => self
                .receivers
                .peek(up.origin, self.config.window_bytes, up.len)
                .map(|count| (up.origin, Header::Credit { count }.into())),
            false => None,
        };
        Some(UpStep { reply, ..UpStep::to(up.qos) })
    }

    fn fast_up_apply(&mut self, up: &fast::Up<'_>, _msg: &Msg, out: &mut Outbox<'_>) {
        if let motet_wire::Header::Mflow(Header::Credit { count }) = up.header {
            // Only while no cast waits (the condition), so no receiver's clock runs.
            self.take_credit(up.origin, *count);
            return;
        }
        if up.cast
            && up.qos == Qos::Reliable
            && self.receivers.consume(up.origin, self.config.window_bytes, up.len).is_some()
        {
            out.count(super::LayerKind::Mflow, Counter::AckSent);
        }
    }

    fn fast_inert(&self, trace: fast::Trace) -> Option<usize> {
        // Multicast flow control: only casts have work here.
        (!trace.is_cast()).then_some(usize::MAX)
    }

    fn check_invariants(&self) {
        assert_eq!(self.slowest, self.slowest_live(), "the slowest receiver's credit is kept");
        self.window.check(self.consumed(), self.config.window_bytes);
        assert_eq!(self.credit.len(), self.receivers.len());
        assert!(self.window.pending() > 0 || !self.watch.running(), "a clock runs while no cast waits");
    }

    fn buffered(&self) -> usize {
        self.window.pending()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::harness::{sent, Harness, Out};
    use crate::time::Instant;

    fn credits(out: &[Out]) -> Vec<(Rank, u64)> {
        let sends = sent::<Header>(out).into_iter();
        sends
            .filter_map(|(dest, h)| match h {
                Header::Credit { count } => Some((dest, count)),
                _ => None,
            })
            .collect()
    }

    /// An empty cast: it costs the charge alone.
    fn cast() -> Up {
        Up::Cast { origin: 0, msg: Msg::default().with(Header::NoHdr), qos: Qos::Reliable }
    }

    /// What an empty cast costs against the window.
    const C: u64 = crate::layers::MESSAGE_CHARGE;

    /// Empty casts in a window.
    fn per_window(config: &Config) -> u64 {
        config.window_bytes / C
    }

    /// What a cast of one byte costs.
    const ONE: u64 = 1 + C;

    /// Rank 1 of two, with the default parameters, whose application has just begun to lag.
    fn lagging() -> (Config, Harness<Mflow>) {
        let (view, config) = (crate::testing::view(2), Config::default());
        let mut h = Harness::new(Mflow::new(&config, &view, 1), 1);
        h.dn(Dn::Lagging(true));
        (config, h)
    }

    /// The window is held by the slowest live receiver, kept as credit comes in and as members
    /// fail (the harness checks the kept value against the view's minimum after every input).
    #[test]
    fn the_slowest_live_receiver_holds_the_window_as_credit_and_failures_change() {
        let view = crate::testing::view(3);
        let config = Config { window_bytes: 4 * ONE, ..Config::default() };
        let mut h = Harness::new(Mflow::new(&config, &view, 0), 0);
        let went = |out: Vec<Out>| out.iter().filter(|o| matches!(o, Out::Dn(Dn::Cast { .. }))).count();
        let sent: usize =
            (0..6u8).map(|k| went(h.dn(Dn::Cast { msg: Msg::new(vec![k].into()), qos: Qos::Reliable }))).sum();
        assert_eq!(sent, 4, "a window: four casts of one byte");
        let credit = |h: &mut Harness<Mflow>, origin: Rank, count: u64| {
            went(h.up(Up::Send { origin, msg: Msg::default().with(Header::Credit { count }) }))
        };
        assert_eq!(credit(&mut h, 1, 4 * ONE), 0, "rank 2 has consumed nothing yet");
        assert_eq!(credit(&mut h, 2, ONE), 1, "rank 2, now the slowest at one cast, lets one more go");
        assert_eq!(h.layer.consumed(), ONE);
        let mut failed = RankSet::new();
        failed.insert(2);
        assert_eq!(went(h.dn(Dn::Fail(failed))), 1, "with rank 2 failed, rank 1's credit holds it");
        assert_eq!(h.layer.consumed(), 4 * ONE);
    }

    /// Rank 0 of `n` in a `fifo` view, with a window of four casts of one byte and the default
    /// credit timeout.
    fn sender(n: usize) -> (Config, Harness<Mflow>) {
        sender_in("fifo", n)
    }

    /// As [`sender`], in a view of the stack `spec`.
    fn sender_in(spec: &str, n: usize) -> (Config, Harness<Mflow>) {
        let config = Config { window_bytes: 4 * ONE, ..Config::default() };
        (config.clone(), Harness::new(Mflow::new(&config, &crate::testing::view_of(spec, n), 0), 0))
    }

    fn times(d: Duration, k: u64) -> Duration {
        Duration(d.0 * k)
    }

    fn one_byte_cast(h: &mut Harness<Mflow>) -> Vec<Out> {
        h.dn(Dn::Cast { msg: Msg::new(vec![7].into()), qos: Qos::Reliable })
    }

    fn credit_from(h: &mut Harness<Mflow>, origin: Rank, count: u64) -> Vec<Out> {
        h.up(Up::Send { origin, msg: Msg::default().with(Header::Credit { count }) })
    }

    /// Fires the layer's alarms up to `until`, collecting the suspicions they raise.
    fn alarms_until(h: &mut Harness<Mflow>, until: Instant) -> Vec<Vec<Rank>> {
        let mut suspected = Vec::new();
        while let Some(at) = h.alarm.filter(|&at| at <= until) {
            suspected.extend(crate::layer::harness::suspected(&h.timer(at)));
        }
        suspected
    }

    /// A receiver that beats (so the failure detector keeps it) but never reports its credit
    /// held its sender's casts, and their flush, for good (a review's finding, thirty-eighth
    /// session). Now it is suspected between one and 1.25 credit timeouts after it began to hold
    /// the window shut, once; the receiver that reported is not. The clock starts at the block,
    /// not at the receiver's last report: receivers that had no reason to report for a long time
    /// are not suspected the moment the window shuts. In a stack that shares suspicions
    /// (`slander`) and acts on them (`intra`), the suspected receiver leaves the window at once;
    /// in one that does not (`fifo`, or `slander` without membership), where no view change would
    /// exclude it, it stays in (reviews' findings: it would have been out of flow control for
    /// good).
    #[test]
    fn a_receiver_that_holds_the_window_shut_without_reporting_is_suspected_after_the_credit_timeout() {
        for spec in ["vsync", "fifo", "Frag+Flow+Local+Suspect+Slander"] {
            suspected_after_the_credit_timeout(spec);
        }
    }

    fn suspected_after_the_credit_timeout(spec: &str) {
        let (config, mut h) = sender_in(spec, 3);
        (0..4).for_each(|_| drop(one_byte_cast(&mut h)));
        credit_from(&mut h, 1, 4 * ONE);
        credit_from(&mut h, 2, 4 * ONE);
        assert_eq!(h.alarm, None, "no cast waits: no clock runs");
        // Twenty seconds later, a burst shuts the window; both receivers hold it.
        let t0 = Instant::ZERO + Duration::from_millis(20_000);
        h.now = t0;
        (0..5).for_each(|_| drop(one_byte_cast(&mut h)));
        assert_eq!(h.layer.window.pending(), 1);
        assert!(h.alarm.is_some(), "a blocked sender looks at its receivers");
        // Rank 1 reports a second later; rank 2 never does.
        h.now = t0 + Duration::from_millis(1_000);
        credit_from(&mut h, 1, 8 * ONE);
        let quiet = alarms_until(&mut h, t0 + config.credit_timeout.saturating_sub(Duration::from_millis(1)));
        assert_eq!(quiet, Vec::<Vec<Rank>>::new(), "not before the timeout");
        let mut late = Vec::new();
        while let Some(at) =
            h.alarm.filter(|&at| at <= t0 + config.credit_timeout + CreditWatch::interval(config.credit_timeout))
        {
            late.extend(h.timer(at));
        }
        assert_eq!(crate::layer::harness::suspected(&late), vec![vec![2]], "rank 2, once");
        assert_eq!(h.stats.counter(Counter::CreditOverdue), 1);
        let casts = |out: &[Out]| out.iter().filter(|o| matches!(o, Out::Dn(Dn::Cast { .. }))).count();
        let taken_out = spec == "vsync";
        if taken_out {
            // Rank 2 no longer holds the window: the waiting cast goes, so the suspicion, which
            // leaves as a cast (`slander`'s), does not wait behind it (a review's finding: a
            // sender that is not the coordinator stayed stuck). Compression stops, as with a
            // failure, and credit is still reported to rank 2 (it is not marked failed).
            assert_eq!(casts(&late), 1);
            assert!(late.iter().any(|o| matches!(o, Out::Up(Up::FlowBlock { dest: None, blocked: false }))));
            assert!(!h.layer.bounds_every_receiver() && !h.layer.watch.running());
            assert!(!h.layer.failed.contains(2));
        } else {
            assert_eq!(casts(&late), 0, "without a view change to come, the sender waits");
            assert!(h.layer.bounds_every_receiver() && h.layer.watch.running());
        }
        assert_eq!(alarms_until(&mut h, t0 + times(config.credit_timeout, 3)), Vec::<Vec<Rank>>::new(), "not again");
        // The view change's failure releases what is left.
        assert_eq!(casts(&h.dn(Dn::Fail([2].into_iter().collect()))), usize::from(!taken_out));
    }

    /// A stack replaced by the next view's lingers to finish retransmissions: it suspects no one
    /// any more (as `suspect`), whatever waits in it.
    #[test]
    fn a_replaced_stack_suspects_no_receiver() {
        let (config, mut h) = sender(2);
        (0..5).for_each(|_| drop(one_byte_cast(&mut h)));
        assert!(h.layer.watch.running());
        assert!(matches!(&h.dn(Dn::Replaced)[..], [Out::Dn(Dn::Replaced)]));
        assert!(!h.layer.watch.running());
        drop(one_byte_cast(&mut h));
        assert_eq!(alarms_until(&mut h, Instant::ZERO + times(config.credit_timeout, 3)), Vec::<Vec<Rank>>::new());
        assert_eq!(h.stats.counter(Counter::CreditOverdue), 0);
    }

    /// A receiver whose credit keeps moving is never suspected, however long it holds the window:
    /// a lagging application's trickle (a report every `lag_report_interval`) is such a receiver.
    #[test]
    fn a_receiver_whose_credit_keeps_moving_is_not_suspected() {
        let (config, mut h) = sender(2);
        (0..200).for_each(|_| drop(one_byte_cast(&mut h)));
        for k in 1..=60u64 {
            let at = Instant::ZERO + times(config.lag_report_interval, k);
            assert_eq!(alarms_until(&mut h, at), Vec::<Vec<Rank>>::new(), "at {at:?}");
            h.now = at;
            credit_from(&mut h, 1, k * ONE);
            assert!(h.layer.window.pending() > 0 && h.layer.watch.running());
        }
        assert_eq!(h.stats.counter(Counter::CreditOverdue), 0);
    }

    /// A credit report of more than was sent (no correct member sends one) is dropped and
    /// counted, on both paths: the fast path leaves it to the layered one, which drops it and
    /// releases nothing. It was clamped to what was sent until the thirty-ninth session, which
    /// hid the faulty peer.
    #[test]
    fn a_credit_report_of_more_than_was_sent_is_dropped_and_counted() {
        let (_, mut h) = sender(2);
        (0..5).for_each(|_| drop(one_byte_cast(&mut h)));
        let header: motet_wire::Header = Header::Credit { count: 100 * ONE }.into();
        let up = fast::Up { origin: 1, cast: false, qos: Qos::Reliable, header: &header, len: 0 };
        assert!(h.layer.fast_up(&up).is_none());
        let out = credit_from(&mut h, 1, 100 * ONE);
        assert!(out.is_empty(), "{out:?}");
        assert_eq!(h.stats.drops(DropReason::Malformed), 1);
        assert_eq!(h.layer.consumed(), 0);
        assert_eq!(credit_from(&mut h, 1, 4 * ONE).len(), 2, "a true report releases the cast (and unblocks)");
    }

    /// A look that comes far later than it was armed means this process did not run: that time
    /// counts against no receiver (as `pt2pt`'s and `suspect`'s deadlines).
    #[test]
    fn time_this_process_did_not_run_counts_against_no_receiver() {
        let (config, mut h) = sender(2);
        (0..5).for_each(|_| drop(one_byte_cast(&mut h)));
        let paused = Instant::ZERO + times(config.credit_timeout, 3);
        assert_eq!(crate::layer::harness::suspected(&h.timer(paused)), Vec::<Vec<Rank>>::new());
        let interval = CreditWatch::interval(config.credit_timeout);
        let before = alarms_until(&mut h, paused + config.credit_timeout.saturating_sub(times(interval, 2)));
        assert_eq!(before, Vec::<Vec<Rank>>::new(), "its clock resumed where the pause began");
        assert_eq!(alarms_until(&mut h, paused + config.credit_timeout + interval), vec![vec![1]]);
    }

    #[test]
    fn a_lag_withholds_credit_until_the_application_catches_up() {
        let (config, mut h) = lagging();
        let per = per_window(&config);
        let reported: Vec<_> = (0..3 * per).flat_map(|_| credits(&h.up(cast()))).collect();
        assert!(reported.is_empty(), "{reported:?}");
        assert_eq!(credits(&h.dn(Dn::Lagging(false))), vec![(0, 3 * config.window_bytes)], "all of it, at once");
        let reported: Vec<_> = (0..per).flat_map(|_| credits(&h.up(cast()))).collect();
        assert_eq!(reported.len(), 2, "every half window again");
    }

    #[test]
    fn while_the_application_lags_credit_trickles_out_once_per_interval() {
        let (config, mut h) = lagging();
        let at = h.alarm.expect("the lag's timer");
        assert_eq!(at, h.now + config.lag_report_interval);
        (0..5).for_each(|_| drop(h.up(cast())));
        assert_eq!(credits(&h.timer(at)), vec![(0, 5 * C)], "what is owed, though the application still lags");
        assert_eq!(h.alarm, Some(at + config.lag_report_interval), "and again later");
        assert!(credits(&h.timer(at + config.lag_report_interval)).is_empty(), "nothing more owed");
        h.dn(Dn::Lagging(false));
        assert!(credits(&h.timer(at + config.lag_report_interval + config.lag_report_interval)).is_empty());
    }

    /// A sender held by a receiver's lag keeps queueing the layers' own casts (a sequencer's
    /// orders) once `appl` refuses the application's: past `pending_max` they are counted, not a
    /// panic, and go out in order with the credit.
    #[test]
    fn a_blocked_sender_queues_the_layers_casts_past_pending_max_and_counts_them() {
        let view = crate::testing::view(2);
        let config = Config { window_bytes: 2 * ONE, pending_max: 3, ..Config::default() };
        let mut h = Harness::new(Mflow::new(&config, &view, 0), 0);
        let cast = |k: u8| Dn::Cast { msg: Msg::new(vec![k].into()), qos: Qos::Reliable };
        let went: Vec<_> =
            (0..10u8).flat_map(|k| h.dn(cast(k))).filter(|o| matches!(o, Out::Dn(Dn::Cast { .. }))).collect();
        assert_eq!(went.len(), 2, "a window");
        assert_eq!(h.stats.counter(Counter::FlowQueueOver), 5, "8 queued, 5 of them past pending_max");
        // Credit, a window at a time: the rest goes, in order.
        let released: Vec<u8> = (1..=4u64)
            .flat_map(|k| h.up(Up::Send { origin: 1, msg: Msg::default().with(Header::Credit { count: 2 * k * ONE }) }))
            .filter_map(|o| match o {
                Out::Dn(Dn::Cast { msg, .. }) => Some(msg.payload.chunks()[0][0]),
                _ => None,
            })
            .collect();
        assert_eq!(released, (2..10).collect::<Vec<u8>>());
    }

    /// A flush's `Block` waits behind the pending casts, and a `Cut` that comes down meanwhile
    /// (a later round's, whose `Block` this is, when an earlier round's went on before) waits
    /// behind the `Block`: ahead of it, it reached `mnak` first, and the `Block` withdrew it
    /// (found by a review; the flush stalled until `flush_timeout` suspected a healthy member).
    #[test]
    fn a_cut_waits_behind_a_held_block() {
        let view = crate::testing::view(2);
        let config = Config { window_bytes: ONE, ..Config::default() };
        let mut h = Harness::new(Mflow::new(&config, &view, 0), 0);
        let cast = |k: u8| Dn::Cast { msg: Msg::new(vec![k].into()), qos: Qos::Reliable };
        h.dn(cast(0));
        h.dn(cast(1));
        assert!(h.dn(Dn::Block).is_empty(), "held behind the pending cast");
        assert!(h.dn(Dn::Cut(vec![1, 0].into())).is_empty(), "held behind the block");
        let out = h.up(Up::Send { origin: 1, msg: Msg::default().with(Header::Credit { count: ONE }) });
        let order: Vec<&str> = out
            .iter()
            .filter_map(|o| match o {
                Out::Dn(Dn::Cast { .. }) => Some("cast"),
                Out::Dn(Dn::Block) => Some("block"),
                Out::Dn(Dn::Cut(_)) => Some("cut"),
                _ => None,
            })
            .collect();
        assert_eq!(order, ["cast", "block", "cut"]);
        // With nothing held, a cut goes on at once.
        assert!(matches!(&h.dn(Dn::Cut(vec![2, 0].into()))[..], [Out::Dn(Dn::Cut(_))]));
        // A cut held behind a block is an earlier round's once another block comes: dropped.
        h.dn(cast(2));
        assert!(h.dn(Dn::Block).is_empty() && h.dn(Dn::Cut(vec![3, 0].into())).is_empty());
        assert!(h.dn(Dn::Block).is_empty());
        let out = h.up(Up::Send { origin: 1, msg: Msg::default().with(Header::Credit { count: 2 * ONE }) });
        assert!(out.iter().any(|o| matches!(o, Out::Dn(Dn::Block))), "{out:?}");
        assert!(!out.iter().any(|o| matches!(o, Out::Dn(Dn::Cut(_)))), "{out:?}");
    }

    #[test]
    fn each_interval_lets_through_at_most_a_trickle_not_a_window() {
        let (config, mut h) = lagging();
        assert!(config.lag_trickle_bytes < config.window_bytes, "the defaults decouple the two");
        let mut at = h.alarm.expect("the lag's timer");
        let per = per_window(&config);
        (0..per + 2).for_each(|_| drop(h.up(cast())));
        // Enough intervals for every trickle and then what is left of the debt, and then none.
        let owed = (per + 2) * C;
        let trickle = config.lag_trickle_bytes;
        let intervals = owed.div_ceil(trickle) + 2;
        let mut reported = Vec::new();
        for _ in 0..intervals {
            reported.extend(credits(&h.timer(at)));
            at = at + config.lag_report_interval;
        }
        let mut expected: Vec<_> = (1..=intervals).map(|k| (0, (k * trickle).min(owed))).collect();
        expected.dedup();
        assert!(
            expected.len() as u64 == owed.div_ceil(trickle) && !owed.is_multiple_of(trickle),
            "the last one is a remainder"
        );
        assert_eq!(reported, expected, "a trickle per interval, until all that is owed is reported");
        // A flush, or the lag's end, reports the rest at once.
        (0..3).for_each(|_| drop(h.up(cast())));
        assert_eq!(credits(&h.dn(Dn::Lagging(false))), vec![(0, (per + 5) * C)]);
    }

    #[test]
    fn a_flush_lifts_the_lag_for_the_rest_of_the_view() {
        let (config, mut h) = lagging();
        h.up(cast());
        // The layers' own casts (an order, a leave) pass while the application lags.
        let own = h.dn(Dn::Cast { msg: Msg::default(), qos: Qos::Reliable });
        assert!(matches!(own[..], [Out::Dn(Dn::Cast { .. })]), "{own:?}");
        // The others' flushes need this member's credit: the flush reports it.
        let flush = h.dn(Dn::Block);
        assert_eq!(credits(&flush), vec![(0, C)]);
        assert!(flush.iter().any(|o| matches!(o, Out::Dn(Dn::Block))), "{flush:?}");
        // A lag asked for during the view's flush is passed on but withholds nothing.
        h.dn(Dn::Lagging(true));
        let reported: Vec<_> = (0..per_window(&config)).flat_map(|_| credits(&h.up(cast()))).collect();
        assert_eq!(reported.len(), 2);
    }
}
