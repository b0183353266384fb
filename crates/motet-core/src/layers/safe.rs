//! `safe`: safe (agreed, stable) delivery of application casts (Ensemble property `Agree`, its
//! `tops` layer; digest §2.1, §2.5 "delivered only once known to be received by all", item 40).
//! Placed just below the application layer; membership traffic is exempt.
//!
//! Provides: [`Service::SafeDelivery`]. Requires below: [`Service::ReliableCast`] and
//! [`Service::LocalDelivery`]; above: [`Service::Flush`] (the view's cut settles what the failed
//! members will never acknowledge). Header: `Data` on application casts, `Ack(counts)`, `NoHdr`.
//!
//! Every member counts, per origin, the application casts it holds, and casts those counts
//! (`Ack`) at the end of each turn in which it received new casts (an alarm `ack_delay` from now,
//! 0 by default). A cast is delivered, in its origin's FIFO order, once every member of the view
//! not known to have failed has acknowledged holding it; a member's own acknowledgements reach it
//! through `local` like everyone's. The acknowledgements stop when the view-change flush passes
//! this layer (they would fall outside the agreed cut); the cut then holds the same casts at every
//! survivor, and each delivers what it still holds.
//!
//! A member that beats (so the failure detector keeps it) but never acknowledges would hold every
//! cast of the view, at every member, for ever. So the members that have not acknowledged a cast
//! between one and two `ack_timeout`s after its arrival here are suspected (counter `AckOverdue`),
//! once each, and the view change excludes them. It is checked against a snapshot of the counts
//! received, taken when the watch starts and again at each deadline while casts are held, at no
//! cost per cast. An alarm that comes half a timeout late (this process stalled, and the
//! acknowledgements may be waiting unread) waits half a timeout more.
//!
//! What survives which failure: a cast delivered anywhere was held by every member that had not
//! failed at that time, so every survivor of the view delivers it, even if the member that
//! delivered it crashes at once or is partitioned away (uniform agreement). A cast held only by
//! members that all fail is delivered nowhere.

use crate::event::{Dn, DropReason, Msg, Qos, Up};
use crate::fast::{self, DnStep, Down, UpStep};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::time::Duration;
use crate::view::{RankSet, ViewState};
use crate::Rank;
use motet_wire::hdr::safe::Header;
use std::collections::VecDeque;
use std::sync::Arc;

/// `safe` parameters.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// How long a member collects casts before acknowledging them. Default 0: at the end of the
    /// current turn of the driver.
    #[serde(
        rename = "ack_delay_ms",
        deserialize_with = "crate::time::millis",
        serialize_with = "crate::time::ser_millis"
    )]
    pub ack_delay: Duration,
    /// How long a member may take to acknowledge a cast before it is suspected. Default 10 s;
    /// longer than `suspect.timeout` (a failed member is the failure detector's to find) and than
    /// `ack_delay` (checked).
    #[serde(
        rename = "ack_timeout_ms",
        deserialize_with = "crate::time::millis",
        serialize_with = "crate::time::ser_millis"
    )]
    pub ack_timeout: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config { ack_delay: Duration::from_millis(0), ack_timeout: Duration::from_millis(10_000) }
    }
}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "safe",
    summary: "safe delivery: a cast is delivered once every member of the view holds it",
    provides: &[Service::SafeDelivery],
    requires_below: &[Service::ReliableCast, Service::LocalDelivery],
    requires_above: &[Service::Flush],
    above_every: &[],
    below_every: &[],
};

/// `safe` state.
#[derive(Debug, PartialEq)]
pub struct Safe {
    config: Config,
    /// Per origin: application casts received.
    received: Vec<u64>,
    /// Per origin: application casts delivered.
    delivered: Vec<u64>,
    /// Per origin: received and not yet delivered, in FIFO order.
    held: Vec<VecDeque<Msg>>,
    /// Per member, per origin: the casts it acknowledged holding.
    acked: Vec<Vec<u64>>,
    /// Per origin: the casts every member not known to have failed holds (the least of their
    /// `acked`), and how many of them hold only that many. Kept as acknowledgements arrive, so
    /// that one costs O(n), not O(n²): the minimum is recomputed only when the last member at it
    /// moves past it (once a round of acknowledgements), or a member fails (a review's finding:
    /// every acknowledgement recomputed every origin's minimum over every member, O(n³) a turn
    /// at every member with everyone casting).
    stable: Vec<u64>,
    at_min: Vec<u32>,
    failed: RankSet,
    /// What this member last acknowledged.
    sent_ack: Vec<u64>,
    armed: bool,
    /// `mflow` holds this member's casts (a receiver lags, or credit is short): acknowledgements
    /// wait, and one cumulative acknowledgement goes when it lets casts go again. Cast meanwhile,
    /// each turn's would queue behind the others in `mflow`, all but the newest useless, growing
    /// for as long as the lag lasted and holding a flush behind them.
    flow_blocked: bool,
    /// The flush has passed: no more acknowledgements.
    blocked: bool,
    completed: bool,
    /// While casts are held: when every member must have acknowledged `watched`.
    watch: Option<crate::time::Instant>,
    /// Per origin, the casts received when the watch started (kept, so a new watch allocates
    /// nothing on the common path).
    watched: Vec<u64>,
    /// Members this layer suspected already (the view change that excludes them is under way).
    overdue: RankSet,
    rank: Rank,
}

impl Safe {
    /// A `safe` for `view`.
    pub fn new(config: &Config, view: &ViewState, rank: Rank) -> Safe {
        let n = view.len();
        Safe {
            config: config.clone(),
            received: vec![0; n],
            delivered: vec![0; n],
            held: vec![VecDeque::new(); n],
            acked: vec![vec![0; n]; n],
            stable: vec![0; n],
            at_min: vec![n as u32; n],
            failed: RankSet::new(),
            sent_ack: vec![0; n],
            armed: false,
            flow_blocked: false,
            blocked: false,
            completed: false,
            watch: None,
            watched: vec![0; n],
            overdue: RankSet::new(),
            rank,
        }
    }

    /// Starts watching what is received so far, unless a watch runs or the flush has passed.
    fn watch(&mut self, out: &mut Outbox<'_>) {
        if self.watch.is_none() && !self.blocked {
            // `copy_from_slice` of n counts: once a timeout, not per cast.
            self.watched.copy_from_slice(&self.received);
            let deadline = out.now() + self.config.ack_timeout;
            self.watch = Some(deadline);
            out.alarm(deadline);
        }
    }

    /// At a watch's deadline: suspects every member, not known to have failed, that has not
    /// acknowledged all that was watched; watches again while casts are held.
    fn check_watch(&mut self, out: &mut Outbox<'_>) {
        let Some(deadline) = self.watch else { return };
        if out.now() < deadline {
            return out.alarm(deadline);
        }
        // Half a timeout or more late: this process did not run, and the acknowledgements may be
        // waiting unread. The time missed counts against no member (as `suspect`'s sweeps).
        let half = crate::time::Duration(self.config.ack_timeout.0 / 2);
        if out.now().saturating_since(deadline) >= half && !self.blocked {
            let deadline = out.now() + half;
            self.watch = Some(deadline);
            return out.alarm(deadline);
        }
        self.watch = None;
        if self.blocked {
            return; // acknowledgements have stopped: the cut settles what is held
        }
        let overdue: RankSet = (0..self.acked.len() as Rank)
            .filter(|&m| m != self.rank && !self.failed.contains(m) && !self.overdue.contains(m))
            .filter(|&m| self.acked[usize::from(m)].iter().zip(&self.watched).any(|(a, w)| a < w))
            .collect();
        if !overdue.is_empty() {
            tracing::warn!(?overdue, "members did not acknowledge casts within ack_timeout: suspected");
            for _ in overdue.iter() {
                out.count(super::LayerKind::Safe, crate::event::Counter::AckOverdue);
            }
            self.overdue.union_with(&overdue);
            out.up(Up::Suspect(overdue));
        }
        if self.buffered() > 0 {
            self.watch(out);
        }
    }

    /// Holds an application cast from `origin` until it is stable, and makes sure this member
    /// acknowledges it.
    fn hold(&mut self, origin: usize, msg: Msg, out: &mut Outbox<'_>) {
        self.received[origin] += 1;
        self.held[origin].push_back(msg);
        self.watch(out);
        if !self.armed && !self.blocked {
            self.armed = true;
            out.alarm(out.now() + self.config.ack_delay);
        }
    }

    /// Raises what member `member` acknowledged to `counts`, which must have one entry per rank,
    /// and with it each origin's [`Safe::stable`] count.
    fn note_ack(&mut self, member: usize, counts: &[u64]) {
        let live = !self.failed.contains(member as Rank);
        for (origin, &c) in counts.iter().enumerate() {
            let old = self.acked[member][origin];
            if c <= old {
                continue;
            }
            self.acked[member][origin] = c;
            if live && old == self.stable[origin] {
                self.at_min[origin] -= 1;
                if self.at_min[origin] == 0 {
                    self.restable(origin);
                }
            }
        }
    }

    /// Recomputes `origin`'s stable count and how many live members are at it: O(n).
    fn restable(&mut self, origin: usize) {
        let live = (0..self.acked.len()).filter(|&m| !self.failed.contains(m as Rank));
        let (min, at) = live.map(|m| self.acked[m][origin]).fold((u64::MAX, 0u32), |(min, at), a| match a.cmp(&min) {
            std::cmp::Ordering::Less => (a, 1),
            std::cmp::Ordering::Equal => (min, at + 1),
            std::cmp::Ordering::Greater => (min, at),
        });
        (self.stable[origin], self.at_min[origin]) = (min, at);
    }

    fn deliver_stable(&mut self, out: &mut Outbox<'_>) {
        for origin in 0..self.held.len() {
            let stable = self.stable[origin];
            while self.delivered[origin] < stable {
                let Some(msg) = self.held[origin].pop_front() else { break };
                self.delivered[origin] += 1;
                out.up(Up::Cast { origin: origin as Rank, msg, qos: Qos::Reliable });
            }
        }
    }

    /// Acknowledges what arrived, unless `mflow` holds casts (see `flow_blocked`).
    fn ack(&mut self, out: &mut Outbox<'_>) {
        if !self.flow_blocked {
            self.ack_now(out);
        }
    }

    fn ack_now(&mut self, out: &mut Outbox<'_>) {
        if self.blocked || self.received == self.sent_ack {
            return;
        }
        self.sent_ack.clone_from(&self.received);
        let msg = Msg::default().with(Header::Ack(Arc::from(self.received.clone())));
        out.dn(Dn::Cast { msg, qos: Qos::Reliable });
    }
}

impl Layer for Safe {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Cast { origin, mut msg, qos } => match msg.pop_as::<Header>() {
                Some(Header::NoHdr) => out.up(Up::Cast { origin, msg, qos }),
                // This layer casts its headers reliably: one on an unreliable cast would shift
                // the counts every acknowledgement is read against.
                Some(Header::Data | Header::Ack(_)) if qos == Qos::Unreliable => {
                    out.drop_input(super::LayerKind::Safe, DropReason::HeaderMismatch)
                }
                Some(Header::Data) if self.completed => {
                    // Nothing should arrive after the cut; if it does it is in the cut already.
                    self.received[usize::from(origin)] += 1;
                    self.delivered[usize::from(origin)] += 1;
                    out.up(Up::Cast { origin, msg, qos: Qos::Reliable });
                }
                Some(Header::Data) => self.hold(usize::from(origin), msg, out),
                Some(Header::Ack(counts)) => {
                    if counts.len() != self.acked.len() {
                        return out.drop_input(super::LayerKind::Safe, DropReason::Gossip);
                    }
                    self.note_ack(usize::from(origin), &counts);
                    self.deliver_stable(out);
                }
                None => out.drop_input(super::LayerKind::Safe, DropReason::HeaderMismatch),
            },
            Up::CutReached => {
                // Every survivor holds exactly the cut: what is held is held by all of them.
                for origin in 0..self.held.len() {
                    while let Some(msg) = self.held[origin].pop_front() {
                        self.delivered[origin] += 1;
                        out.up(Up::Cast { origin: origin as Rank, msg, qos: Qos::Reliable });
                    }
                }
                self.completed = true;
                out.up(Up::CutReached);
            }
            Up::FlowBlock { dest: None, blocked } => {
                self.flow_blocked = blocked;
                if !blocked {
                    self.ack(out);
                }
                out.up(Up::FlowBlock { dest: None, blocked });
            }
            other => out.pass_up(super::LayerKind::Safe, other, Header::NoHdr),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        match ev {
            Dn::Cast { msg, qos: Qos::Safe } => out.dn(Dn::Cast { msg: msg.with(Header::Data), qos: Qos::Reliable }),
            Dn::Fail(ranks) => {
                self.failed.union_with(&ranks);
                for origin in 0..self.stable.len() {
                    self.restable(origin);
                }
                self.deliver_stable(out);
                out.dn(Dn::Fail(ranks));
            }
            Dn::Block => {
                // What arrived before the flush is acknowledged inside the cut (behind whatever
                // `mflow` holds: the flush waits for that anyway).
                self.ack_now(out);
                self.blocked = true;
                out.dn(Dn::Block);
            }
            other => out.pass_dn(other, Header::NoHdr),
        }
    }

    fn handle_timer(&mut self, out: &mut Outbox<'_>) {
        // Each alarm fires for both: an early look at the other is harmless (an acknowledgement
        // sent a little sooner; a watch re-armed).
        if self.armed {
            self.armed = false;
            self.ack(out);
        }
        self.check_watch(out);
    }

    // The fast path (docs/bypass.md): a safe cast goes down as `Data`; an arriving one is held
    // (`absorb`) until stable; an acknowledgement is kept and releases the casts it made
    // stable, in `deliver_stable`'s order.

    fn fast_dn(&self, down: &Down) -> Option<DnStep> {
        match (down.dest, down.qos) {
            (None, Qos::Safe) => Some(DnStep::to(Header::Data, Qos::Reliable)),
            _ => DnStep::pass(Header::NoHdr, down),
        }
    }

    fn fast_up(&self, up: &fast::Up<'_>) -> Option<UpStep> {
        match up.header {
            motet_wire::Header::Safe(Header::NoHdr) => UpStep::pass(up),
            _ if up.qos == Qos::Unreliable => None, // dropped on the layered path
            motet_wire::Header::Safe(Header::Data) if up.cast && !self.completed => {
                Some(UpStep { absorb: true, ..UpStep::to(up.qos) })
            }
            motet_wire::Header::Safe(Header::Ack(counts)) if up.cast && counts.len() == self.acked.len() => {
                Some(UpStep { absorb: true, release: self.buffered() > 0, ..UpStep::to(Qos::Reliable) })
            }
            _ => None,
        }
    }

    fn fast_up_apply(&mut self, up: &fast::Up<'_>, msg: &Msg, out: &mut Outbox<'_>) {
        match up.header {
            motet_wire::Header::Safe(Header::Data) => self.hold(usize::from(up.origin), msg.clone(), out),
            motet_wire::Header::Safe(Header::Ack(counts)) => self.note_ack(usize::from(up.origin), counts),
            _ => {}
        }
    }

    fn fast_release(&mut self, _origin: Rank, _cast: bool, _out: &mut Outbox<'_>) -> Option<(Rank, Msg)> {
        // `deliver_stable`, one cast at a time: the acknowledgements do not change during a
        // release, so the origins it has passed stay done and each call may scan from the first.
        let origin = (0..self.held.len()).find(|&o| !self.held[o].is_empty() && self.delivered[o] < self.stable[o])?;
        let msg = self.held[origin].pop_front().expect("not empty");
        self.delivered[origin] += 1;
        Some((origin as Rank, msg))
    }

    fn fast_inert(&self, trace: fast::Trace) -> Option<usize> {
        // Safe delivery: only casts have work here.
        (!trace.is_cast()).then_some(usize::MAX)
    }

    fn check_invariants(&self) {
        for origin in 0..self.held.len() {
            assert_eq!(self.delivered[origin] + self.held[origin].len() as u64, self.received[origin]);
            let live = (0..self.acked.len()).filter(|&m| !self.failed.contains(m as Rank));
            let counts: Vec<u64> = live.map(|m| self.acked[m][origin]).collect();
            let min = counts.iter().copied().min().unwrap_or(u64::MAX);
            assert_eq!(self.stable[origin], min, "origin {origin}'s stable count");
            let at = counts.iter().filter(|&&c| c == min).count();
            assert_eq!(self.at_min[origin] as usize, at, "members at origin {origin}'s stable count");
        }
    }

    fn buffered(&self) -> usize {
        self.held.iter().map(VecDeque::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::harness::{Harness, Out};

    fn data(tag: u8) -> Msg {
        Msg::new(vec![tag].into()).with(Header::Data)
    }

    fn ack(counts: &[u64]) -> Msg {
        Msg::default().with(Header::Ack(Arc::from(counts.to_vec())))
    }

    fn casts(out: &[Out]) -> usize {
        out.iter().filter(|o| matches!(o, Out::Up(Up::Cast { .. }))).count()
    }

    /// Acknowledgements in any order, some stale, some from a member that then fails: the kept
    /// stable counts always equal the least count of the live members (the invariants recompute
    /// them), and a corrupted one is caught.
    #[test]
    fn the_stable_counts_follow_the_acknowledgements_and_a_corrupted_one_is_caught() {
        let view = crate::testing::view_of("vsync+Agree", 4);
        let mut h = Harness::new(Safe::new(&Config::default(), &view, 3), 3);
        let acks: [(Rank, [u64; 4]); 7] = [
            (0, [2, 0, 1, 0]),
            (1, [1, 0, 0, 0]),
            (0, [1, 0, 0, 0]), // stale
            (2, [3, 1, 1, 0]),
            (3, [2, 1, 1, 0]),
            (1, [2, 1, 1, 0]),
            (2, [4, 1, 2, 0]),
        ];
        for (member, counts) in acks {
            h.up(Up::Cast { origin: member, msg: ack(&counts), qos: Qos::Reliable });
            h.layer.check_invariants();
        }
        assert_eq!(h.layer.stable, vec![2, 0, 1, 0]);
        h.dn(Dn::Fail([1].into_iter().collect()));
        h.layer.check_invariants();
        h.up(Up::Cast { origin: 3, msg: ack(&[4, 1, 2, 0]), qos: Qos::Reliable });
        h.up(Up::Cast { origin: 0, msg: ack(&[4, 1, 2, 0]), qos: Qos::Reliable });
        h.layer.check_invariants();
        assert_eq!(h.layer.stable, vec![4, 1, 2, 0], "member 1 failed: not waited for");
        h.layer.stable[0] = 3;
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.layer.check_invariants()));
        assert!(caught.is_err(), "a wrong stable count passed the invariants");
    }

    #[test]
    fn a_cast_waits_for_every_members_acknowledgement() {
        let view = crate::testing::view_of("vsync+Agree", 3);
        let mut h = Harness::new(Safe::new(&Config::default(), &view, 2), 2);
        assert_eq!(casts(&h.up(Up::Cast { origin: 0, msg: data(1), qos: Qos::Reliable })), 0);
        // The end of the turn: this member acknowledges what it holds.
        let out = h.timer(h.now);
        assert!(
            matches!(&out[..], [Out::Dn(Dn::Cast { msg, .. })] if msg.hdrs == vec![Header::Ack(Arc::from(vec![1, 0, 0])).into()])
        );
        for member in [0, 2] {
            assert_eq!(casts(&h.up(Up::Cast { origin: member, msg: ack(&[1, 0, 0]), qos: Qos::Reliable })), 0);
        }
        // The last member's acknowledgement makes it safe.
        assert_eq!(casts(&h.up(Up::Cast { origin: 1, msg: ack(&[1, 0, 0]), qos: Qos::Reliable })), 1);
        assert_eq!(h.layer.buffered(), 0);
    }

    /// While `mflow` holds this member's casts, acknowledgements wait, and one cumulative one goes
    /// when it lets casts go again. Before, each turn with new casts queued one more behind the
    /// others in `mflow` (100 here), for as long as a receiver lagged.
    #[test]
    fn acknowledgements_wait_while_flow_control_holds_casts() {
        let view = crate::testing::view_of("vsync+Agree", 3);
        let mut h = Harness::new(Safe::new(&Config::default(), &view, 2), 2);
        let acks = |out: &[Out]| -> Vec<Msg> {
            out.iter()
                .filter_map(|o| match o {
                    Out::Dn(Dn::Cast { msg, .. }) => Some(msg.clone()),
                    _ => None,
                })
                .collect()
        };
        let out = h.up(Up::FlowBlock { dest: None, blocked: true });
        assert!(matches!(&out[..], [Out::Up(Up::FlowBlock { dest: None, blocked: true })]), "passed up: {out:?}");
        for i in 0..100 {
            h.up(Up::Cast { origin: 1, msg: data(i), qos: Qos::Reliable });
            assert!(acks(&h.timer(h.now)).is_empty(), "no acknowledgement while blocked");
        }
        let out = h.up(Up::FlowBlock { dest: None, blocked: false });
        let sent = acks(&out);
        assert_eq!(sent.len(), 1, "{out:?}");
        assert_eq!(sent[0].hdrs, vec![Header::Ack(Arc::from(vec![0, 100, 0])).into()]);
        assert!(matches!(out.last(), Some(Out::Up(Up::FlowBlock { dest: None, blocked: false }))));
        // Blocked again at the flush: what arrived is acknowledged inside the cut all the same.
        h.up(Up::FlowBlock { dest: None, blocked: true });
        h.up(Up::Cast { origin: 1, msg: data(7), qos: Qos::Reliable });
        let out = h.dn(Dn::Block);
        assert_eq!(acks(&out).len(), 1, "{out:?}");
    }

    /// `safe`'s headers on an unreliable cast are dropped: counted, they shifted the counts every
    /// acknowledgement is read against.
    #[test]
    fn safe_headers_on_an_unreliable_cast_are_dropped() {
        let view = crate::testing::view_of("vsync+Agree", 3);
        let mut h = Harness::new(Safe::new(&Config::default(), &view, 2), 2);
        assert!(h.up(Up::Cast { origin: 1, msg: data(1), qos: Qos::Unreliable }).is_empty());
        assert!(h.up(Up::Cast { origin: 0, msg: ack(&[0, 5, 0]), qos: Qos::Unreliable }).is_empty());
        assert_eq!(h.stats.drops(DropReason::HeaderMismatch), 2);
        assert_eq!((h.layer.received.clone(), h.layer.acked[0].clone()), (vec![0, 0, 0], vec![0, 0, 0]));
        h.up(Up::Cast { origin: 1, msg: data(2), qos: Qos::Reliable });
        for member in 0..3 {
            h.up(Up::Cast { origin: member, msg: ack(&[0, 1, 0]), qos: Qos::Reliable });
        }
        assert_eq!(h.layer.buffered(), 0, "the genuine cast is the first of its origin, and safe");
    }

    #[test]
    fn failed_members_are_not_waited_for_and_the_cut_delivers_the_rest() {
        let view = crate::testing::view_of("vsync+Agree", 3);
        let mut h = Harness::new(Safe::new(&Config::default(), &view, 0), 0);
        h.up(Up::Cast { origin: 1, msg: data(1), qos: Qos::Reliable });
        h.up(Up::Cast { origin: 1, msg: data(2), qos: Qos::Reliable });
        h.up(Up::Cast { origin: 0, msg: ack(&[0, 2, 0]), qos: Qos::Reliable });
        h.up(Up::Cast { origin: 1, msg: ack(&[0, 1, 0]), qos: Qos::Reliable });
        // Member 2 fails: members 0 and 1 hold the first cast.
        assert_eq!(casts(&h.dn(Dn::Fail([2].into_iter().collect()))), 1);
        // The flush acknowledges what arrived before it, then nothing more.
        let out = h.dn(Dn::Block);
        assert!(matches!(&out[..], [Out::Dn(Dn::Cast { .. }), Out::Dn(Dn::Block)]), "{out:?}");
        h.up(Up::Cast { origin: 1, msg: data(3), qos: Qos::Reliable });
        assert!(h.timer(h.now).is_empty());
        let out = h.up(Up::CutReached);
        assert_eq!(casts(&out), 2);
        assert_eq!(h.layer.buffered(), 0);
    }

    /// A member that stays audible but never acknowledges is suspected at the watch's deadline
    /// (one `ack_timeout` after the first held cast), the others are not; members that have
    /// acknowledged everything watched, failed members and a flushing member suspect no one.
    #[test]
    fn a_member_that_never_acknowledges_is_suspected_after_the_ack_timeout() {
        use crate::time::Instant;
        let view = crate::testing::view_of("vsync+Agree", 3);
        let config = Config::default();
        let deadline = Instant::ZERO + config.ack_timeout;
        let suspected = crate::layer::harness::suspected;
        let mut h = Harness::new(Safe::new(&config, &view, 0), 0);
        h.up(Up::Cast { origin: 1, msg: data(1), qos: Qos::Reliable });
        h.timer(h.now); // this member's own acknowledgement goes out
        h.up(Up::Cast { origin: 0, msg: ack(&[0, 1, 0]), qos: Qos::Reliable });
        h.up(Up::Cast { origin: 1, msg: ack(&[0, 1, 0]), qos: Qos::Reliable });
        assert_eq!(h.alarm, Some(deadline));
        assert!(suspected(
            &h.timer(Instant::ZERO + crate::time::Duration::from_millis(config.ack_timeout.as_millis() - 1))
        )
        .is_empty());
        assert_eq!(suspected(&h.timer(deadline)), [vec![2]]);
        assert_eq!(h.stats.counter(crate::event::Counter::AckOverdue), 1);
        // Still held: watched again, but 2 is not suspected twice.
        let next = h.alarm.expect("watched again");
        assert!(suspected(&h.timer(next)).is_empty());
        assert_eq!(h.stats.counter(crate::event::Counter::AckOverdue), 1);

        // The alarm came half a timeout late (this process stalled): it waits half a timeout
        // more, and suspects then only if the acknowledgement still has not come.
        let half = crate::time::Duration::from_millis(config.ack_timeout.as_millis() / 2);
        let mut h = Harness::new(Safe::new(&config, &view, 0), 0);
        h.up(Up::Cast { origin: 1, msg: data(1), qos: Qos::Reliable });
        h.timer(h.now);
        assert!(suspected(&h.timer(deadline + half)).is_empty());
        assert_eq!(h.alarm, Some(deadline + half + half));
        assert_eq!(suspected(&h.timer(deadline + half + half)), [vec![1, 2]]);

        // Everyone acknowledged: the cast is delivered and nobody is suspected.
        let mut h = Harness::new(Safe::new(&config, &view, 0), 0);
        h.up(Up::Cast { origin: 1, msg: data(1), qos: Qos::Reliable });
        for member in 0..3 {
            h.up(Up::Cast { origin: member, msg: ack(&[0, 1, 0]), qos: Qos::Reliable });
        }
        assert!(suspected(&h.timer(deadline)).is_empty());
        assert_eq!(h.alarm, None, "nothing held: no watch");

        // A failed member is not waited for; after the flush nobody is suspected.
        let mut h = Harness::new(Safe::new(&config, &view, 0), 0);
        h.up(Up::Cast { origin: 1, msg: data(1), qos: Qos::Reliable });
        for member in 0..2 {
            h.up(Up::Cast { origin: member, msg: ack(&[0, 1, 0]), qos: Qos::Reliable });
        }
        assert_eq!(casts(&h.dn(Dn::Fail([2].into_iter().collect()))), 1);
        assert!(suspected(&h.timer(deadline)).is_empty());
        let mut h = Harness::new(Safe::new(&config, &view, 0), 0);
        h.up(Up::Cast { origin: 1, msg: data(1), qos: Qos::Reliable });
        h.dn(Dn::Block);
        assert!(suspected(&h.timer(deadline)).is_empty());
    }
}
