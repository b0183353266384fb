//! `sequencer`: total order of application casts by a sequencer (property `Total`; Ensemble
//! `sequencer`, digest §2.3 `Total` and Appendix A.2, where it sits just below the application
//! layer; membership traffic is exempt, Ensemble's `NoTotal`).
//!
//! Provides: [`Service::TotalOrder`]. Requires below: [`Service::ReliableCast`] (per-origin FIFO
//! casts) and [`Service::LocalDelivery`] (every member, the sequencer included, hears its own
//! casts, so all follow one path); above: [`Service::Flush`] (when the sequencer fails, only the
//! view change's cut lets the survivors finish the view in one order). Header: `Data` on application casts, `Order(runs)` from the
//! sequencer, `NoHdr` on everything else.
//!
//! The view's rank 0 is the sequencer. Every member holds the application casts it receives in a
//! queue per origin. The sequencer records the order in which casts reach it and, at the end of
//! the turn (an alarm `order_delay` from now; 0 by default, so one `Order` carries all the casts
//! of one turn), casts that order as runs "the next `count` casts of `origin`". Because casts of
//! one origin arrive in FIFO order everywhere, a run needs no sequence numbers. Every member
//! delivers in the order the `Order` casts give, which is the same everywhere: they come from one
//! origin, in FIFO order.
//!
//! View changes: the sequencer orders nothing after the flush has passed it (`Block`), so the
//! `Order` casts all fall inside the agreed cut. When the cut is delivered (`CutReached`), every
//! survivor holds the same casts and the same `Order` prefix, and completes the view the same
//! deterministic way: the rest of the announced order (skipping runs whose casts never arrived:
//! they are missing at every survivor), then the unordered remainder by origin rank and FIFO
//! position. So survivors of a view deliver identical sequences, even when the sequencer failed,
//! and the next view has a new sequencer. The guarantee is non-uniform, as in Ensemble: a member
//! that crashes or is partitioned away may have delivered casts in an order the others never
//! learned.

use crate::event::{Dn, DropReason, Msg, Qos, Up};
use crate::fast::{self, DnStep, Down, UpStep};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::time::Duration;
use crate::view::ViewState;
use crate::Rank;
use motet_wire::hdr::sequencer::Header;
use std::collections::VecDeque;

/// `sequencer` parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// How long the sequencer collects casts before announcing their order. Default 0: at the end
    /// of the current turn of the driver, which batches what one receive batch brought.
    #[serde(
        rename = "order_delay_ms",
        deserialize_with = "crate::time::millis",
        serialize_with = "crate::time::ser_millis"
    )]
    pub order_delay: Duration,
}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "sequencer",
    summary: "total order of application casts: rank 0 announces the order, all deliver in it",
    provides: &[Service::TotalOrder],
    requires_below: &[Service::ReliableCast, Service::LocalDelivery],
    // If the sequencer fails, only a view change lets the others complete the view together.
    requires_above: &[Service::Flush],
    above_every: &[],
    below_every: &[],
};

/// The most runs one `Order` names (each at most 8 bytes): an order that interleaved more
/// origins in one `order_delay` is announced in several. Unbounded, about 21,000 runs made an
/// `Order` larger than a datagram, dropped at every send and retransmission, and total order
/// stopped at every member but the sequencer (a review's finding). Within the room kept for
/// headers, as `causal`'s entries are (`motet_wire::hdr::causal::ENTRIES_BYTES_MAX`).
pub const ORDER_RUNS_MAX: usize = 256;

/// `sequencer` state.
#[derive(Debug, PartialEq)]
pub struct Sequencer {
    config: Config,
    rank: Rank,
    /// Application casts received and not yet delivered, per origin, in FIFO order.
    queues: Vec<VecDeque<Msg>>,
    /// The announced order not yet delivered: runs of (origin, count).
    order: VecDeque<(Rank, u32)>,
    /// Per origin, the casts `order` names (its runs' counts summed): what an `Order` may add is
    /// bounded by it (see [`Sequencer::too_far`]).
    in_order: Vec<u64>,
    /// How many casts of one origin an `Order` may name beyond those this member holds
    /// ([`super::casts_ahead_max`]: 2^15 with `mflow` in the stack, no bound without it).
    ahead_max: u64,
    /// At the sequencer: the order of casts received and not yet announced.
    pending: Vec<(Rank, u32)>,
    /// An alarm is set to announce `pending`.
    armed: bool,
    /// The flush has passed this layer: the sequencer announces nothing more.
    blocked: bool,
    /// The view's cut is delivered: anything more is delivered at once (completion is done).
    completed: bool,
    /// Casts delivered, for invariants.
    delivered: u64,
}

impl Sequencer {
    /// A `sequencer` for `view`.
    pub fn new(config: &Config, view: &ViewState, rank: Rank) -> Sequencer {
        Sequencer {
            config: config.clone(),
            rank,
            queues: vec![VecDeque::new(); view.len()],
            order: VecDeque::new(),
            in_order: vec![0; view.len()],
            ahead_max: super::casts_ahead_max(view),
            pending: Vec::new(),
            armed: false,
            blocked: false,
            completed: false,
            delivered: 0,
        }
    }

    fn is_sequencer(&self) -> bool {
        self.rank == 0
    }

    /// At the sequencer: an arrival of `origin` would start a run past [`ORDER_RUNS_MAX`], so
    /// the pending order goes out first (the layered path; the fast path refuses such arrivals).
    fn order_full(&self, origin: Rank) -> bool {
        self.is_sequencer()
            && !self.blocked
            && self.pending.len() >= ORDER_RUNS_MAX
            && self.pending.last().is_none_or(|&(last, _)| last != origin)
    }

    /// At the sequencer, before the flush: a cast of `origin` arrived, so it joins the order to
    /// announce at the end of the turn.
    fn note_arrival(&mut self, origin: Rank, out: &mut Outbox<'_>) {
        if self.order_full(origin) {
            self.announce(out);
        }
        if self.is_sequencer() && !self.blocked {
            match self.pending.last_mut() {
                Some((last, count)) if *last == origin => *count += 1,
                _ => self.pending.push((origin, 1)),
            }
            if !self.armed {
                self.armed = true;
                out.alarm(out.now() + self.config.order_delay);
            }
        }
    }

    /// Casts the pending order (the sequencer only, before the flush).
    fn announce(&mut self, out: &mut Outbox<'_>) {
        if self.pending.is_empty() || self.blocked {
            return;
        }
        let runs: Vec<(Rank, u32)> = std::mem::take(&mut self.pending);
        let msg = Msg::default().with(Header::Order(runs.into()));
        out.dn(Dn::Cast { msg, qos: Qos::Reliable });
    }

    /// Whether an `Order` names more casts of some origin than it can have sent and this member
    /// not received yet: the casts an order names were received by the sequencer, so those not
    /// here are on their way, at most a flow-control window of them (twice the largest, here; in
    /// a stack without flow control, any number). One forged or corrupt run of millions would
    /// otherwise hold every later cast here for the view, `queues` growing at the group's rate.
    /// Each origin's runs in the order are summed, with what `order` names already: 16,000 runs
    /// of 2^15 each passed one by one (a review's finding).
    fn too_far(&self, runs: &[(Rank, u32)]) -> bool {
        let over = |origin: Rank, count: u64| {
            let named = self.in_order[usize::from(origin)].saturating_add(count);
            named.saturating_sub(self.queues[usize::from(origin)].len() as u64) > self.ahead_max
        };
        // An order holds a few runs in the common case (the bypass asks this of each): summed in
        // place; a long one in a table by origin.
        if runs.len() <= 8 {
            return runs
                .iter()
                .any(|&(origin, _)| over(origin, runs.iter().filter(|r| r.0 == origin).map(|r| u64::from(r.1)).sum()));
        }
        let mut named = vec![0u64; self.queues.len()];
        runs.iter().any(|&(origin, count)| {
            let total = &mut named[usize::from(origin)];
            *total = total.saturating_add(u64::from(count));
            over(origin, *total)
        })
    }

    /// Appends an announced order's runs.
    fn extend_order(&mut self, runs: &[(Rank, u32)]) {
        for &(origin, count) in runs.iter().filter(|&&(_, count)| count > 0) {
            self.order.push_back((origin, count));
            self.in_order[usize::from(origin)] += u64::from(count);
        }
    }

    /// The front run's next cast is delivered: one fewer named.
    fn take_front(&mut self) {
        let Some(&(origin, count)) = self.order.front() else { return };
        match count {
            1 => drop(self.order.pop_front()),
            _ => self.order[0].1 = count - 1,
        }
        self.in_order[usize::from(origin)] -= 1;
    }

    fn deliver(&mut self, origin: Rank, msg: Msg, out: &mut Outbox<'_>) {
        self.delivered += 1;
        out.up(Up::Cast { origin, msg, qos: Qos::Reliable });
    }

    /// Delivers what the announced order allows.
    fn deliver_ordered(&mut self, out: &mut Outbox<'_>) {
        while let Some(&(origin, _)) = self.order.front() {
            let Some(msg) = self.queues[usize::from(origin)].pop_front() else { return };
            self.take_front();
            self.deliver(origin, msg, out);
        }
    }

    /// The view's cut is delivered: every survivor holds the same casts and the same announced
    /// order, and finishes the view identically (see the module documentation).
    fn complete(&mut self, out: &mut Outbox<'_>) {
        while let Some((origin, count)) = self.order.pop_front() {
            for _ in 0..count {
                // A missing cast is missing at every survivor, and so are the later ones of its
                // origin: the rest of this run is skipped everywhere.
                let Some(msg) = self.queues[usize::from(origin)].pop_front() else { break };
                self.deliver(origin, msg, out);
            }
        }
        self.in_order.iter_mut().for_each(|named| *named = 0);
        for origin in 0..self.queues.len() {
            while let Some(msg) = self.queues[origin].pop_front() {
                self.deliver(origin as Rank, msg, out);
            }
        }
        self.pending.clear();
        self.completed = true;
    }
}

impl Layer for Sequencer {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Cast { origin, mut msg, qos } => match msg.pop_as::<Header>() {
                Some(Header::NoHdr) => out.up(Up::Cast { origin, msg, qos }),
                // This layer casts its headers reliably only: one on an unreliable cast (it has no
                // sequence number, so a forger need not guess one) is forged.
                Some(_) if qos == Qos::Unreliable => {
                    out.drop_input(super::LayerKind::Sequencer, DropReason::HeaderMismatch)
                }
                Some(Header::Data) if self.completed => self.deliver(origin, msg, out),
                Some(Header::Data) => {
                    self.queues[usize::from(origin)].push_back(msg);
                    self.note_arrival(origin, out);
                    self.deliver_ordered(out);
                }
                Some(Header::Order(runs)) => {
                    if origin != 0 || runs.iter().any(|&(o, _)| usize::from(o) >= self.queues.len()) {
                        return out.drop_input(super::LayerKind::Sequencer, DropReason::NotForMe);
                    }
                    if self.completed {
                        return out.drop_input(super::LayerKind::Sequencer, DropReason::Disabled);
                    }
                    if self.too_far(&runs) {
                        return out.drop_input(super::LayerKind::Sequencer, DropReason::OutOfWindow);
                    }
                    self.extend_order(&runs);
                    self.deliver_ordered(out);
                }
                None => out.drop_input(super::LayerKind::Sequencer, DropReason::HeaderMismatch),
            },
            Up::CutReached => {
                self.complete(out);
                out.up(Up::CutReached);
            }
            other => out.pass_up(super::LayerKind::Sequencer, other, Header::NoHdr),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        match ev {
            Dn::Cast { msg, qos: Qos::Total } => out.dn(Dn::Cast { msg: msg.with(Header::Data), qos: Qos::Reliable }),
            Dn::Block => {
                // What reached the sequencer before the flush is announced inside the cut.
                self.announce(out);
                self.blocked = true;
                out.dn(Dn::Block);
            }
            other => out.pass_dn(other, Header::NoHdr),
        }
    }

    fn handle_timer(&mut self, out: &mut Outbox<'_>) {
        self.armed = false;
        self.announce(out);
    }

    // Fast path: a totally ordered cast goes down numbered by nobody (`Data`); one arriving, in
    // a view not yet completed and not the next the announced order waits for, is queued (the
    // trace ends here) and, at the sequencer, added to the order to announce; the next one is
    // delivered, then what the order names after it (released). An `Order` from the sequencer is
    // kept here and releases what it orders.
    fn fast_dn(&self, down: &Down) -> Option<DnStep> {
        match (down.dest, down.qos) {
            (None, Qos::Total) => Some(DnStep::to(Header::Data, Qos::Reliable)),
            _ => DnStep::pass(Header::NoHdr, down),
        }
    }

    fn fast_up(&self, up: &fast::Up<'_>) -> Option<UpStep> {
        if !up.cast {
            return fast::is(up.header, Header::NoHdr).then(|| UpStep::pass(up)).flatten();
        }
        if self.completed || up.qos == Qos::Unreliable {
            return None;
        }
        match up.header {
            motet_wire::Header::Sequencer(Header::Order(runs)) => {
                // What the layered handler accepts: from the sequencer, naming members of the view.
                let valid = up.origin == 0
                    && runs.iter().all(|&(o, _)| usize::from(o) < self.queues.len())
                    && !self.too_far(runs);
                valid.then_some(UpStep { absorb: true, release: true, ..UpStep::to(up.qos) })
            }
            // An arrival that would make the pending order too long: announced first, layered.
            motet_wire::Header::Sequencer(Header::Data) if self.order_full(up.origin) => None,
            motet_wire::Header::Sequencer(Header::Data) => match self.order.front() {
                // The order already names it: it is delivered now, then what the order names
                // next, if it has arrived (the run goes on with a later cast of its origin, or
                // the next run's casts).
                Some(&(origin, count)) if origin == up.origin => {
                    let alone =
                        count > 1 || self.order.get(1).is_none_or(|&(o, _)| self.queues[usize::from(o)].is_empty());
                    Some(UpStep { release: !alone, ..UpStep::to(Qos::Reliable) })
                }
                _ => Some(UpStep { absorb: true, ..UpStep::to(up.qos) }),
            },
            _ => None,
        }
    }

    fn fast_release(&mut self, _origin: Rank, _cast: bool, _out: &mut Outbox<'_>) -> Option<(Rank, Msg)> {
        // `deliver_ordered`, one cast at a time.
        let &(origin, _) = self.order.front()?;
        let msg = self.queues[usize::from(origin)].pop_front()?;
        self.take_front();
        self.delivered += 1;
        Some((origin, msg))
    }

    fn fast_inert(&self, trace: fast::Trace) -> Option<usize> {
        // Total order: only casts have work here.
        (!trace.is_cast()).then_some(usize::MAX)
    }

    fn fast_up_apply(&mut self, up: &fast::Up<'_>, msg: &Msg, out: &mut Outbox<'_>) {
        if !up.cast {
            return;
        }
        if let motet_wire::Header::Sequencer(Header::Order(runs)) = up.header {
            // The casts it orders are released next (`fast_release`).
            self.extend_order(runs);
            return;
        }
        if self.order.front().is_some_and(|&(origin, _)| origin == up.origin) {
            // Delivered at once (see `fast_up`), after the sequencer's bookkeeping.
            self.note_arrival(up.origin, out);
            self.take_front();
            self.delivered += 1;
            return;
        }
        self.queues[usize::from(up.origin)].push_back(msg.clone());
        self.note_arrival(up.origin, out);
    }

    fn check_invariants(&self) {
        assert!(self.rank == 0 || self.pending.is_empty(), "only the sequencer announces an order");
        assert!(!self.completed || self.queues.iter().all(VecDeque::is_empty) || self.order.is_empty());
        assert!(self.order.iter().all(|&(_, count)| count > 0), "no empty run is kept");
        for (origin, &named) in self.in_order.iter().enumerate() {
            let counted: u64 =
                self.order.iter().filter(|&&(o, _)| usize::from(o) == origin).map(|&(_, c)| u64::from(c)).sum();
            assert_eq!(named, counted, "in_order counts what order names, origin {origin}");
        }
    }

    fn buffered(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::harness::{Harness, Out};

    fn data(tag: u8) -> Msg {
        Msg::new(vec![tag].into()).with(Header::Data)
    }

    fn delivered(out: &[Out]) -> Vec<(Rank, u8)> {
        out.iter()
            .filter_map(|o| match o {
                Out::Up(Up::Cast { origin, msg, .. }) => Some((*origin, msg.payload.to_bytes()[0])),
                _ => None,
            })
            .collect()
    }

    fn order(runs: &[(Rank, u32)]) -> Msg {
        Msg::default().with(Header::Order(runs.to_vec().into()))
    }

    /// An order names at most `ORDER_RUNS_MAX` runs: arrivals that interleave more origins within
    /// one `order_delay` are announced in several orders. Before, one order named them all, and
    /// past about 21,000 runs it was larger than a datagram and could never be sent.
    #[test]
    fn an_order_names_at_most_order_runs_max_runs() {
        let view = crate::testing::view(3);
        let mut h = Harness::new(Sequencer::new(&Config::default(), &view, 0), 0);
        let orders = |out: &[Out]| -> Vec<Vec<(Rank, u32)>> {
            out.iter()
                .filter_map(|o| match o {
                    Out::Dn(Dn::Cast { msg, .. }) => match msg.hdrs.last().as_deref() {
                        Some(motet_wire::Header::Sequencer(Header::Order(runs))) => Some(runs.to_vec()),
                        _ => None,
                    },
                    _ => None,
                })
                .collect()
        };
        let mut sent = Vec::new();
        for k in 0..1000u32 {
            let origin = 1 + (k % 2) as Rank;
            sent.extend(orders(&h.up(Up::Cast { origin, msg: data(k as u8), qos: Qos::Reliable })));
        }
        sent.extend(orders(&h.timer(h.alarm.expect("the order's delay"))));
        assert!(sent.len() >= 4, "{} orders", sent.len());
        assert!(sent.iter().all(|runs| runs.len() <= ORDER_RUNS_MAX));
        let named: u32 = sent.iter().flatten().map(|&(_, count)| count).sum();
        assert_eq!(named, 1000, "every arrival named once, in order");
        let flat: Vec<Rank> = sent.iter().flatten().flat_map(|&(o, c)| std::iter::repeat_n(o, c as usize)).collect();
        assert!(flat.iter().enumerate().all(|(k, &o)| o == 1 + (k % 2) as Rank));
        // The fast path refuses the arrival that would start one run too many.
        let header = motet_wire::Header::from(Header::Data);
        for k in 0..ORDER_RUNS_MAX as u32 {
            h.up(Up::Cast { origin: 1 + (k % 2) as Rank, msg: data(0), qos: Qos::Reliable });
        }
        let up = fast::Up { origin: 1, cast: true, qos: Qos::Reliable, header: &header, len: 1 };
        assert!(h.layer.fast_up(&up).is_none());
    }

    #[test]
    fn members_deliver_in_the_announced_order_not_the_arrival_order() {
        let view = crate::testing::view(3);
        let mut h = Harness::new(Sequencer::new(&Config::default(), &view, 2), 2);
        assert!(delivered(&h.up(Up::Cast { origin: 2, msg: data(20), qos: Qos::Reliable })).is_empty());
        assert!(delivered(&h.up(Up::Cast { origin: 1, msg: data(10), qos: Qos::Reliable })).is_empty());
        let out = h.up(Up::Cast { origin: 0, msg: order(&[(1, 1), (2, 1)]), qos: Qos::Reliable });
        assert_eq!(delivered(&out), vec![(1, 10), (2, 20)]);
        // An order may run ahead of the casts it names.
        assert!(delivered(&h.up(Up::Cast { origin: 0, msg: order(&[(1, 2)]), qos: Qos::Reliable })).is_empty());
        let out = h.up(Up::Cast { origin: 1, msg: data(11), qos: Qos::Reliable });
        assert_eq!(delivered(&out), vec![(1, 11)]);
        let out = h.up(Up::Cast { origin: 1, msg: data(12), qos: Qos::Reliable });
        assert_eq!(delivered(&out), vec![(1, 12)]);
        assert_eq!(h.layer.buffered(), 0);
    }

    /// An order naming more casts of an origin than can be on their way is no sequencer's: it is
    /// dropped (`OutOfWindow`), and nothing waits behind it; the fast path refuses it too. One at
    /// the bound is taken, and casts held here count as arrived.
    #[test]
    fn an_order_naming_casts_that_cannot_be_on_their_way_is_dropped() {
        let view = crate::testing::view(3);
        let mut h = Harness::new(Sequencer::new(&Config::default(), &view, 2), 2);
        let max = h.layer.ahead_max as u32;
        assert_eq!(max, 1 << 15, "the stack has mflow");
        assert!(h.up(Up::Cast { origin: 0, msg: order(&[(1, u32::MAX)]), qos: Qos::Reliable }).is_empty());
        assert_eq!(h.stats.drops(DropReason::OutOfWindow), 1);
        let runs = motet_wire::Header::from(Header::Order(vec![(1, max + 1)].into()));
        let up = fast::Up { origin: 0, cast: true, qos: Qos::Reliable, header: &runs, len: 0 };
        assert!(h.layer.fast_up(&up).is_none(), "the fast path refuses it too");
        // A cast of 1 arrives first: then an order of max + 1 is at the bound, and is taken.
        h.up(Up::Cast { origin: 1, msg: data(10), qos: Qos::Reliable });
        let out = h.up(Up::Cast { origin: 0, msg: order(&[(1, max + 1)]), qos: Qos::Reliable });
        assert_eq!(delivered(&out), vec![(1, 10)]);
        assert_eq!(h.stats.drops(DropReason::OutOfWindow), 1);
        assert_eq!(h.layer.in_order[1], u64::from(max));
        // Beyond it, what it names already counts: one more is too far.
        h.up(Up::Cast { origin: 0, msg: order(&[(1, 1)]), qos: Qos::Reliable });
        assert_eq!(h.stats.drops(DropReason::OutOfWindow), 2);
        h.layer.check_invariants();
    }

    /// An order's runs of one origin are summed: many runs within the bound each, far past it
    /// together, are too far (short and long orders alike), and a genuine order is taken after.
    #[test]
    fn an_order_whose_runs_of_one_origin_pass_the_bound_together_is_dropped() {
        let view = crate::testing::view(3);
        let mut h = Harness::new(Sequencer::new(&Config::default(), &view, 2), 2);
        let max = h.layer.ahead_max as u32;
        for runs in [vec![(1, max), (0, 1), (1, max)], vec![(1, max / 2); 100]] {
            let header = motet_wire::Header::from(Header::Order(runs.clone().into()));
            let up = fast::Up { origin: 0, cast: true, qos: Qos::Reliable, header: &header, len: 0 };
            assert!(h.layer.fast_up(&up).is_none(), "the fast path refuses it");
            assert!(h.up(Up::Cast { origin: 0, msg: order(&runs), qos: Qos::Reliable }).is_empty());
        }
        assert_eq!(h.stats.drops(DropReason::OutOfWindow), 2);
        assert_eq!(h.layer.in_order[1], 0, "nothing named");
        h.up(Up::Cast { origin: 1, msg: data(10), qos: Qos::Reliable });
        let out = h.up(Up::Cast { origin: 0, msg: order(&[(1, 1), (0, 0)]), qos: Qos::Reliable });
        assert_eq!(delivered(&out), vec![(1, 10)]);
    }

    /// Without flow control a member may lag any number of casts behind the sequencer, so a
    /// long order is genuine and is kept: dropped, the casts it names (which `mnak` has already
    /// delivered here) would never be delivered at this member.
    #[test]
    fn without_flow_control_a_long_order_is_kept() {
        let view = crate::testing::view_of("Gmp+Sync+Suspect+Total", 3);
        let mut h = Harness::new(Sequencer::new(&Config::default(), &view, 2), 2);
        let long = (1u32 << 15) * 4;
        assert!(h.up(Up::Cast { origin: 0, msg: order(&[(1, long)]), qos: Qos::Reliable }).is_empty());
        assert_eq!(h.stats.drops(DropReason::OutOfWindow), 0);
        assert_eq!(h.layer.in_order[1], u64::from(long));
        let out = h.up(Up::Cast { origin: 1, msg: data(10), qos: Qos::Reliable });
        assert_eq!(delivered(&out), vec![(1, 10)]);
        h.layer.check_invariants();
    }

    #[test]
    fn the_sequencer_announces_one_batch_per_turn_and_stops_at_the_flush() {
        let view = crate::testing::view(3);
        let mut h = Harness::new(Sequencer::new(&Config::default(), &view, 0), 0);
        h.up(Up::Cast { origin: 1, msg: data(10), qos: Qos::Reliable });
        h.up(Up::Cast { origin: 1, msg: data(11), qos: Qos::Reliable });
        h.up(Up::Cast { origin: 2, msg: data(20), qos: Qos::Reliable });
        assert_eq!(h.alarm, Some(h.now), "announced at the end of this turn");
        let out = h.timer(h.now);
        match &out[..] {
            [Out::Dn(Dn::Cast { msg, qos: Qos::Reliable })] => {
                assert_eq!(msg.hdrs, vec![Header::Order(vec![(1, 2), (2, 1)].into()).into()]);
            }
            other => panic!("{other:?}"),
        }
        // Received before the flush: announced as the flush passes; after it, never.
        h.up(Up::Cast { origin: 2, msg: data(21), qos: Qos::Reliable });
        let out = h.dn(Dn::Block);
        assert!(matches!(&out[..], [Out::Dn(Dn::Cast { .. }), Out::Dn(Dn::Block)]), "{out:?}");
        h.up(Up::Cast { origin: 1, msg: data(12), qos: Qos::Reliable });
        assert!(h.timer(h.now).is_empty());
    }

    #[test]
    fn the_cut_completes_the_view_deterministically() {
        let view = crate::testing::view(3);
        let mut h = Harness::new(Sequencer::new(&Config::default(), &view, 1), 1);
        h.up(Up::Cast { origin: 0, msg: order(&[(2, 1), (0, 2), (1, 1)]), qos: Qos::Reliable });
        h.up(Up::Cast { origin: 1, msg: data(10), qos: Qos::Reliable });
        h.up(Up::Cast { origin: 1, msg: data(11), qos: Qos::Reliable });
        let out = h.up(Up::Cast { origin: 2, msg: data(20), qos: Qos::Reliable });
        // (2,1) is delivered; (0,2) waits for casts of 0 that never come (it failed).
        assert_eq!(delivered(&out), vec![(2, 20)]);
        let out = h.up(Up::CutReached);
        assert_eq!(delivered(&out), vec![(1, 10), (1, 11)], "the order's rest, then by origin");
        assert!(matches!(out.last(), Some(Out::Up(Up::CutReached))));
        assert_eq!(h.layer.buffered(), 0);
    }

    #[test]
    fn membership_traffic_and_sends_are_not_ordered() {
        let view = crate::testing::view(2);
        let mut h = Harness::new(Sequencer::new(&Config::default(), &view, 1), 1);
        let out = h.dn(Dn::Cast { msg: Msg::default(), qos: Qos::Reliable });
        assert!(matches!(&out[..], [Out::Dn(Dn::Cast { msg, .. })] if msg.hdrs == vec![Header::NoHdr.into()]));
        let out = h.up(Up::Cast { origin: 0, msg: Msg::default().with(Header::NoHdr), qos: Qos::Reliable });
        assert!(matches!(&out[..], [Out::Up(Up::Cast { .. })]));
        // An order from anyone but the sequencer is dropped.
        assert!(h.up(Up::Cast { origin: 1, msg: order(&[(0, 1)]), qos: Qos::Reliable }).is_empty());
        assert_eq!(h.stats.drops(DropReason::NotForMe), 1);
    }
}
