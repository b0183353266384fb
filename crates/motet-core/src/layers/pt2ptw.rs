//! `pt2ptw`: window flow control for point-to-point messages (thesis Fig 2.3; SOSP Table 2b).
//!
//! Provides: [`Service::SendFlow`]. Requires below: [`Service::ReliableSend`] (its acknowledgements
//! are cumulative counts sent point-to-point). Header: `NoHdr` on data, `Ack { count }` on
//! feedback (cumulative bytes consumed). At most `window_bytes` to one destination are unconsumed
//! (each message costs its payload and `MESSAGE_CHARGE`); more wait in a bounded
//! queue and `FlowBlock { dest: Some(rank) }` goes up to `appl` (see `flow.rs`). While the
//! application lags its events (`Dn::Lagging`), acknowledgements are counted but not sent, but for
//! a trickle every `lag_report_interval`, until it catches up or a flush begins (as in `mflow`).

use super::flow::{send_report, CreditWatch, Offer, Receivers, Window};
use crate::event::{Counter, Dn, DropReason, Msg, Up};
use crate::fast::{self, DnStep, Down, UpStep};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::time::Duration;
use crate::view::{RankSet, ViewState};
use crate::Rank;
use motet_wire::hdr::pt2ptw::Header;

/// `pt2ptw` parameters.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Bytes in flight to one destination before the sender blocks, each message (fragment)
    /// counted as its payload and `MESSAGE_CHARGE`. Default 64 KiB (about the 64 fragments
    /// of 1 KiB that were the window until the twenty-sixth session, when windows counted
    /// messages). At most `WINDOW_BYTES_MAX`.
    pub window_bytes: u64,
    /// Messages queued per destination while blocked. Default 2048; must hold the fragments of
    /// the largest message (`StackConfig::validate`).
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
    /// began. Default 64 KiB, as `mflow`'s (see there).
    pub lag_trickle_bytes: u64,
    /// How long a live destination may hold this sender's window to it shut (sends waiting)
    /// without acknowledging before it is suspected (counter `CreditOverdue`), as `mflow`'s (see
    /// there). Default 10 s.
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
            window_bytes: 64 * 1024,
            pending_max: 2048,
            lag_report_interval: Duration::from_millis(500),
            lag_trickle_bytes: 64 * 1024,
            credit_timeout: Duration::from_millis(10_000),
        }
    }
}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "pt2ptw",
    summary: "point-to-point window flow control with back-pressure",
    provides: &[Service::SendFlow],
    requires_below: &[Service::ReliableSend],
    requires_above: &[],
    above_every: &[],
    // Below `appl`, so that every application message passes the window, and below `frag`, so
    // that the window counts what the reliable layer numbers (each fragment): header
    // compression sends 24 bits of a sequence number and relies on a sender never being
    // 2^15 ahead, which the window bounds only then (`Stack::compress`).
    below_every: &[Service::Application, Service::Fragmentation],
};

/// `pt2ptw` state.
#[derive(Debug, PartialEq)]
pub struct Pt2ptw {
    config: Config,
    failed: RankSet,
    /// Per destination: what we sent.
    windows: Vec<Window>,
    /// Per destination: how many it reported consumed.
    acked: Vec<u64>,
    /// Per origin: how many we consumed.
    receivers: Receivers,
    /// A flush (`Block`) waits here until every pending message is out, and a `Cut` behind it.
    block: super::HeldBlock,
    /// The destinations whose window is shut with sends waiting, and since when
    /// (`Config::credit_timeout`).
    watch: CreditWatch,
}

impl Pt2ptw {
    /// A `pt2ptw` for `view`.
    pub fn new(config: &Config, view: &ViewState, _rank: Rank) -> Pt2ptw {
        Pt2ptw {
            config: config.clone(),
            failed: RankSet::new(),
            windows: (0..view.len()).map(|_| Window::default()).collect(),
            acked: vec![0; view.len()],
            receivers: Receivers::new(view.len(), super::LayerKind::Pt2ptw),
            block: super::HeldBlock::default(),
            watch: CreditWatch::default(),
        }
    }

    /// Lets a held `Block` continue down once nothing is pending.
    fn release_block(&mut self, out: &mut Outbox<'_>) {
        if self.windows.iter().all(|w| w.pending() == 0) {
            self.block.release(out);
        }
    }
}

/// An acknowledgement's header.
fn ack(count: u64) -> Header {
    Header::Ack { count }
}

impl Pt2ptw {
    /// The seeded fault of a member that never reports its credit to `origin`
    /// (`crate::faults::withhold_credit`).
    #[cfg(any(test, feature = "fault-injection"))]
    pub(crate) fn withhold_credit(&mut self, origin: Rank) {
        self.receivers.withhold(origin);
    }
}

impl Layer for Pt2ptw {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Send { origin, mut msg } => match msg.pop_as::<Header>() {
                Some(Header::NoHdr) => {
                    if let Some(count) = self.receivers.consume(origin, self.config.window_bytes, msg.payload.len()) {
                        send_report(out, super::LayerKind::Pt2ptw, origin, ack(count));
                    }
                    out.up(Up::Send { origin, msg });
                }
                // More than we sent to it: no correct member reports that. Dropped and counted
                // (it was clamped until the thirty-ninth session).
                Some(Header::Ack { count })
                    if usize::from(origin) >= self.windows.len() || count > self.windows[usize::from(origin)].sent =>
                {
                    out.drop_input(super::LayerKind::Pt2ptw, DropReason::Malformed)
                }
                Some(Header::Ack { count }) => {
                    let o = usize::from(origin);
                    let before = self.acked[o];
                    self.acked[o] = before.max(count);
                    if self.acked[o] != before {
                        self.watch.moved(origin, out.now());
                    }
                    let released = self.windows[o]
                        .release(self.acked[o], self.config.window_bytes, |msg| out.dn(Dn::Send { dest: origin, msg }));
                    if released {
                        out.up(Up::FlowBlock { dest: Some(origin), blocked: false });
                        self.watch.hold(self.windows.len(), origin, false, out.now());
                    }
                    self.release_block(out);
                }
                None => out.drop_input(super::LayerKind::Pt2ptw, DropReason::HeaderMismatch),
            },
            other => out.pass_up(super::LayerKind::Pt2ptw, other, Header::NoHdr),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        match ev {
            Dn::Send { dest, msg } if self.failed.contains(dest) => {
                let _ = msg;
                out.drop_input(super::LayerKind::Pt2ptw, DropReason::FromFailed);
            }
            Dn::Send { dest, msg } => {
                let d = usize::from(dest);
                let (window, pending_max) = (self.config.window_bytes, self.config.pending_max);
                match self.windows[d].offer(
                    msg.with(Header::NoHdr),
                    self.acked[d],
                    window,
                    pending_max,
                    out,
                    super::LayerKind::Pt2ptw,
                ) {
                    Offer::Send(msg) => out.dn(Dn::Send { dest, msg }),
                    Offer::Blocked => {
                        out.count(super::LayerKind::Pt2ptw, Counter::FlowBlocked);
                        out.up(Up::FlowBlock { dest: Some(dest), blocked: true });
                        let was_running = self.watch.running();
                        self.watch.hold(self.windows.len(), dest, true, out.now());
                        self.watch.arm(was_running, out, self.config.credit_timeout);
                    }
                    Offer::Queued => {}
                }
            }
            Dn::Fail(ranks) => {
                let n = self.windows.len();
                for rank in ranks.iter().filter(|&r| usize::from(r) < n) {
                    self.failed.insert(rank);
                    if self.windows[usize::from(rank)].clear() {
                        out.up(Up::FlowBlock { dest: Some(rank), blocked: false });
                        self.watch.hold(n, rank, false, out.now());
                    }
                }
                out.dn(Dn::Fail(ranks));
                self.release_block(out);
            }
            Dn::Block => {
                // Senders' flushes wait for their pending sends, which need this member's
                // acknowledgements: a lag ends here for the rest of the view.
                self.receivers.flush(&self.failed, out, ack);
                self.block.hold();
                self.release_block(out);
            }
            Dn::Lagging(lagging) => {
                self.receivers.lag(lagging, self.config.lag_report_interval, &self.failed, out, ack);
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
        self.receivers.tick(self.config.lag_report_interval, self.config.lag_trickle_bytes, &self.failed, out, ack);
        // While sends wait, a destination that holds its window shut and acknowledges nothing is
        // suspected after `credit_timeout`.
        // (The suspicion leaves as a cast, which this layer does not hold.)
        if self.watch.running() {
            self.watch.look(self.config.credit_timeout, &self.failed, out, super::LayerKind::Pt2ptw);
        }
    }

    // Fast path: a send the window admits (counted); a send received (consumed, with an `Ack`
    // reply when a report is due); casts pass.
    fn fast_dn(&self, down: &Down) -> Option<DnStep> {
        match down.dest {
            None => DnStep::pass(Header::NoHdr, down),
            Some(dest) if self.failed.contains(dest) => None,
            Some(dest) => {
                let d = usize::from(dest);
                self.windows[d]
                    .admits(self.acked[d], self.config.window_bytes)
                    .then(|| DnStep::pass(Header::NoHdr, down))?
            }
        }
    }

    fn fast_dn_apply(&mut self, down: &Down, _out: &mut Outbox<'_>) {
        if let Some(dest) = down.dest {
            self.windows[usize::from(dest)].sent += super::flow::cost(down.len);
        }
    }

    fn fast_up(&self, up: &fast::Up<'_>) -> Option<UpStep> {
        if !fast::is(up.header, Header::NoHdr) {
            return None;
        }
        let reply = match up.cast {
            true => None,
            false => self
                .receivers
                .peek(up.origin, self.config.window_bytes, up.len)
                .map(|count| (up.origin, Header::Ack { count }.into())),
        };
        Some(UpStep { reply, ..UpStep::to(up.qos) })
    }

    fn fast_up_apply(&mut self, up: &fast::Up<'_>, _msg: &Msg, out: &mut Outbox<'_>) {
        if !up.cast && self.receivers.consume(up.origin, self.config.window_bytes, up.len).is_some() {
            out.count(super::LayerKind::Pt2ptw, Counter::AckSent);
        }
    }

    fn fast_inert(&self, trace: fast::Trace) -> Option<usize> {
        // Window and credit are per destination: only sends have work here.
        trace.is_cast().then_some(usize::MAX)
    }

    fn check_invariants(&self) {
        for (window, &acked) in self.windows.iter().zip(&self.acked) {
            window.check(acked, self.config.window_bytes);
        }
        assert!(self.buffered() > 0 || !self.watch.running(), "a clock runs while no send waits");
    }

    fn buffered(&self) -> usize {
        self.windows.iter().map(Window::pending).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::harness::{sent, Harness, Out};
    use crate::time::Instant;

    fn acks(out: &[Out]) -> Vec<(Rank, u64)> {
        let sends = sent::<Header>(out).into_iter();
        sends
            .filter_map(|(dest, h)| match h {
                Header::Ack { count } => Some((dest, count)),
                _ => None,
            })
            .collect()
    }

    fn send() -> Up {
        Up::Send { origin: 0, msg: Msg::default().with(Header::NoHdr) }
    }

    /// A destination that beats but never acknowledges the sends that shut its window is
    /// suspected about a credit timeout after the window shut, once (counter `CreditOverdue`);
    /// one that acknowledges in time is not, and its clock stops when its sends go. Before, a
    /// `pt2pt` acknowledgement without `pt2ptw`'s held the sends to it, and the next flush, for
    /// good (a review's finding, thirty-eighth session).
    #[test]
    fn a_destination_that_never_acknowledges_a_shut_window_is_suspected_after_the_credit_timeout() {
        let view = crate::testing::view(3);
        let c = crate::layers::MESSAGE_CHARGE;
        let config = Config { window_bytes: 2 * c, ..Config::default() };
        let mut h = Harness::new(Pt2ptw::new(&config, &view, 0), 0);
        for dest in [1, 2] {
            (0..3).for_each(|_| drop(h.dn(Dn::Send { dest, msg: Msg::default() })));
        }
        assert_eq!(h.layer.buffered(), 2, "one send waits for each destination");
        let look = crate::layers::flow::CreditWatch::interval(config.credit_timeout);
        // Rank 1 acknowledges after a second: its send goes and its clock stops.
        h.now = Instant::ZERO + crate::time::Duration::from_millis(1_000);
        let out = h.up(Up::Send { origin: 1, msg: Msg::default().with(Header::Ack { count: 2 * c }) });
        assert!(out.iter().any(|o| matches!(o, Out::Dn(Dn::Send { dest: 1, .. }))));
        let mut suspected = Vec::new();
        while let Some(at) = h.alarm.filter(|&at| at <= Instant::ZERO + config.credit_timeout + look) {
            let out = h.timer(at);
            if !crate::layer::harness::suspected(&out).is_empty() {
                assert!(at >= Instant::ZERO + config.credit_timeout, "suspected at {at:?}, before the timeout");
            }
            suspected.extend(crate::layer::harness::suspected(&out));
        }
        assert_eq!(suspected, vec![vec![2]]);
        assert_eq!(h.stats.counter(Counter::CreditOverdue), 1);
        h.dn(Dn::Fail([2].into_iter().collect()));
        assert!(!h.layer.watch.running(), "no send waits: no clock runs");
        let at = h.alarm.expect("the look armed before the failure");
        h.timer(at);
        assert_eq!(h.alarm, None, "and no look is armed again");
    }

    #[test]
    fn a_lag_withholds_acknowledgements_which_trickle_and_a_flush_lifts_it() {
        let view = crate::testing::view(2);
        let config = Config::default();
        let mut h = Harness::new(Pt2ptw::new(&config, &view, 1), 1);
        h.dn(Dn::Lagging(true));
        let at = h.alarm.expect("the lag's timer");
        // Empty sends, each costing the charge alone.
        let (c, per) = (crate::layers::MESSAGE_CHARGE, config.window_bytes / crate::layers::MESSAGE_CHARGE);
        let sent: Vec<_> = (0..per).flat_map(|_| acks(&h.up(send()))).collect();
        assert!(sent.is_empty(), "{sent:?}");
        // The sends are delivered all the same: only the acknowledgement waits.
        assert!(matches!(h.up(send())[..], [Out::Up(Up::Send { origin: 0, .. })]));
        let fast = crate::fast::Up {
            origin: 0,
            cast: false,
            qos: crate::event::Qos::Reliable,
            header: &Header::NoHdr.into(),
            len: 0,
        };
        let step = h.layer.fast_up(&fast).expect("the fast path takes a send during a lag");
        assert_eq!(step.reply, None, "and, as the layered path, counts it with no acknowledgement");
        let trickle = config.lag_trickle_bytes.min((per + 1) * c);
        assert_eq!(acks(&h.timer(at)), vec![(0, trickle)], "what is owed trickles out, a trickle at a time");
        h.up(send());
        assert_eq!(acks(&h.dn(Dn::Block)), vec![(0, (per + 2) * c)], "a flush reports the rest");
        h.dn(Dn::Lagging(true));
        let sent: Vec<_> = (0..per).flat_map(|_| acks(&h.up(send()))).collect();
        assert_eq!(sent.len(), 2, "after the flush, every half window as usual");
    }
}
