//! `mnak`: reliable FIFO multicast by negative acknowledgements (thesis §5.6 pp.87-88, Figs 5.2
//! and 5.4).
//!
//! Provides: [`Service::ReliableCast`] and [`Service::CastCounts`]. Requires below:
//! [`Service::Transport`]; above: [`Service::Stability`], which frees the buffers and reveals lost
//! tails. Header: `Data { seqno }` on casts, `Unrel` on unreliable casts, `Nak { origin, lo, hi }`
//! (inclusive), `Retrans { origin, seqno }`, and `NoHdr` on sends, which pass untouched.
//!
//! Every member keeps every cast it has delivered, from every origin, until the `stable` layer
//! reports it held by all live members, so any member can repair any other. A receiver that sees a
//! gap buffers what is ahead (at most `recv_window_max` casts, and with flow control twice the
//! largest window in bytes: `gaps::ahead_bytes_max`) and NAKs the origin once; if the origin
//! has failed the NAK is cast to the view and whoever holds the messages answers. The fast path is
//! Fig 5.2: a cast with the next expected seqno is stored and passed up; on the bypass, a cast
//! ahead of a gap from a live origin is also held there, with its NAK as the trace's reply. A
//! periodic sweep, armed only while a gap is open, re-NAKs. Every `report_every` casts it buffers,
//! it reports its counts to `stable` unasked, so stability keeps up with a fast stream. Stability
//! gossip also carries the most any member holds, so a lost *last* cast (which no later cast
//! reveals) is NAKed too. Casts of a failed origin that no live member can supply (beyond a gap
//! every survivor shares) are forgotten once stability settles, so the group goes quiet.

use super::gaps::Hold;
use crate::event::{Counter, Dn, DropReason, Msg, Qos, Stability, Up};
use crate::fast::{self, DnStep, Down, UpStep};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::time::{Duration, Instant};
use crate::view::{RankSet, ViewState};
use crate::Rank;
use motet_wire::hdr::mnak::Header;
use motet_wire::Seqno;
use std::collections::VecDeque;
use std::sync::Arc;

/// `mnak` parameters.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Period of the re-NAK sweep while a gap is open. Default 50 ms.
    #[serde(
        rename = "sweep_interval_ms",
        deserialize_with = "crate::time::millis",
        serialize_with = "crate::time::ser_millis"
    )]
    pub sweep_interval: Duration,
    /// Casts buffered ahead of a gap, per origin; further-ahead ones are dropped. Default 16,384:
    /// what the largest `mflow` window (1 MiB) lets out of empty casts, each counted as 64 bytes
    /// (`StackConfig::validate` checks that it holds the window configured). A window bounds
    /// these casts' bytes too, so the count costs nothing until a gap holds them.
    pub recv_window_max: u64,
    /// Casts retransmitted in answer to one NAK. Default 256.
    pub retransmit_max: usize,
    /// Most casts retransmitted to one member a second, in answer to its NAKs, with a burst of a
    /// `sweep_interval`'s worth, and at least what one sweep may ask (32 holes of
    /// `retransmit_max`: 8,192 by default). Default 100,000. A NAK that asks
    /// for more is answered in part (counted as `OverBudget`), and the rest comes at the
    /// requester's re-ask: a member that repeats NAKs cannot spend the others' send capacity
    /// without bound (`gaps::Budget`).
    pub retransmit_rate: u64,
    /// How long a gap must stay open before it is NAKed. Default 2 ms. A network that reorders
    /// (multipath, jitter, a busy receive queue) opens gaps that close by themselves a moment
    /// later; NAKing at once would have the origin retransmit what is already on its way. Zero
    /// NAKs at once, as Ensemble's `mnak` does (thesis Fig 5.4). PGM and Aeron hold NAKs back the
    /// same way; the cost is that much more recovery latency after a real loss.
    #[serde(
        rename = "nak_delay_ms",
        deserialize_with = "crate::time::millis",
        serialize_with = "crate::time::ser_millis"
    )]
    pub nak_delay: Duration,
    /// Casts that enter the retransmission buffers (its own and every origin's, counted together)
    /// after which `mnak` reports its receive counts to `stable` at once (`NumCasts`), instead of
    /// waiting for the next stability sweep. Stability, and with it the release of the buffers,
    /// then keeps up with a fast stream: each member's buffers hold about this many casts (all
    /// origins together, while every member is live and keeping up), not a sweep period's worth
    /// (100 ms of a million casts a second is a hundred thousand). JGroups' `STABLE` has the same
    /// trigger by bytes (`max_bytes`). Default 1,024; 0 reports at the sweep only.
    pub report_every: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            sweep_interval: Duration::from_millis(50),
            recv_window_max: 16_384,
            retransmit_max: 256,
            retransmit_rate: 100_000,
            nak_delay: Duration::from_millis(2),
            report_every: 1024,
        }
    }
}

/// Below this many other live members, a failed origin's casts are NAKed to the whole view at
/// once ([`Mnak::nak_to`]): each NAK is then answered fewer times than this.
const NAK_CAST_MAX: usize = 8;

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "mnak",
    summary: "reliable FIFO multicast: sequence numbers, NAKs, retransmission by any holder",
    provides: &[Service::ReliableCast, Service::CastCounts],
    requires_below: &[Service::Transport],
    requires_above: &[Service::Stability],
    above_every: &[],
    below_every: &[],
};

/// What this member knows of one origin's casts.
#[derive(Debug, Default, PartialEq)]
struct Origin {
    /// Seqno of `buf[0]`: casts below it are stable and freed.
    buf_lo: Seqno,
    /// Delivered casts `buf_lo..received`, kept for retransmission (with the headers from above).
    buf: VecDeque<Msg>,
    /// Next seqno expected (= casts delivered in order).
    received: Seqno,
    /// Casts received ahead of a gap.
    ooo: super::gaps::Ahead,
    /// What was asked for of the gaps.
    asked: super::gaps::Asked,
    /// What the member of this rank, as a requester, may still have retransmitted to it.
    budget: super::gaps::Budget,
    /// Some live member holds casts below this (from stability gossip).
    max_known: Seqno,
    /// Sweeps in a row that asked for the origin's first hole where it was (`received` then),
    /// which choose whom its re-NAK goes to ([`Mnak::repairer`]): the first ask goes to the
    /// origin, the first re-ask (an eighth of a sweep interval later, or when the answer was due)
    /// to the next member, and so on; `None` before the first sweep that asked for one. (It began at `(0, 0)`, so a first
    /// sweep for a hole at 0, an origin's first cast lost, counted as the second and asked
    /// another member first: the origin itself only after one sweep per other member, about 5 s
    /// in a view of 100. Found by a review.)
    stalled: Option<(Seqno, u32)>,
    /// Sweeps that asked for the holes of this origin since it failed: how many live members the
    /// next NAK goes to ([`Mnak::nak_to`]). Not restarted when a hole fills, nor per hole: every
    /// hole of a failed origin is asked of the same, growing, batch.
    failed_asks: u32,
}

impl Origin {
    /// The holes in what is held: `received` up to the first cast held out of order, between held
    /// casts, and up to `max_known`; each `(lo, hi)`, inclusive.
    fn holes(&self) -> impl Iterator<Item = (Seqno, Seqno)> + '_ {
        super::gaps::holes(self.received, self.ooo.keys().copied(), self.max_known)
    }

    /// Where the first hole begins, if there is one: usually at `received`, but casts held there
    /// wait for a cut (`limit`).
    fn first_hole(&self) -> Option<Seqno> {
        self.holes().next().map(|(lo, _)| lo)
    }

    /// The open gap `received..=hi`, if any.
    fn gap(&self) -> Option<(Seqno, Seqno)> {
        let end = match self.ooo.first_key_value() {
            Some((&first, _)) => first,
            None => self.max_known,
        };
        (end > self.received).then(|| (self.received, end - 1))
    }
}

/// `mnak` state.
#[derive(Debug, PartialEq)]
pub struct Mnak {
    config: Config,
    rank: Rank,
    failed: RankSet,
    origins: Vec<Origin>,
    /// The view-change cut, once announced: deliver up to it, and nothing of a failed origin
    /// beyond it (so every survivor delivers exactly the same casts in this view).
    cut: Option<Arc<[u64]>>,
    /// `CutReached` has not been reported for the current cut yet.
    cut_pending: bool,
    /// The stack has a view-change flush: a failed origin's casts wait for its cut.
    freeze_failed: bool,
    /// Bytes of one origin's casts kept ahead of a gap ([`super::gaps::ahead_bytes_max`]); a cast
    /// that would pass it is dropped like one beyond `recv_window_max`, and asked for again.
    ahead_bytes_max: u64,
    /// Casts buffered since the counts were last reported ([`Config::report_every`]).
    reporting: Reporting,
    /// When the repair sweep (`handle_timer`'s NAKs) is next due: the earliest `nak_delay`,
    /// re-ask (`gaps::Asked::due`) or `sweep_interval` asked for since it last ran. An early
    /// report's timer fires before it and must not NAK a gap whose delay is not over (it may be
    /// a reordering) nor re-NAK the first hole every `report_every` casts.
    sweep_at: Option<Instant>,
}

/// Records that the repair sweep is due at `at`, and asks for the timer that runs it.
fn sweep_due(sweep_at: &mut Option<Instant>, at: Instant, out: &mut Outbox<'_>) {
    *sweep_at = Some(sweep_at.map_or(at, |current| current.min(at)));
    out.alarm(at);
}

/// When `mnak` reports its counts before the stability sweep asks ([`Config::report_every`]).
#[derive(Debug, Default, PartialEq)]
struct Reporting {
    /// Casts that entered the buffers since the last report.
    unreported: u64,
    /// A report is due at the timer this layer asked for at once.
    due: bool,
}

impl Reporting {
    /// A cast entered the buffers: once `every` did, a report is due, from a timer at once (the
    /// fast path's actions, which count here too, emit no events).
    fn entered(&mut self, every: u64, out: &mut Outbox<'_>) {
        self.unreported += 1;
        if self.unreported == every && !self.due {
            self.due = true;
            out.alarm(out.now());
        }
    }

    /// The counts were reported.
    fn reported(&mut self) {
        self.unreported = 0;
        self.due = false;
    }
}

impl Mnak {
    /// An `mnak` for `view`.
    pub fn new(config: &Config, view: &ViewState, rank: Rank) -> Mnak {
        Mnak {
            config: config.clone(),
            rank,
            failed: RankSet::new(),
            origins: (0..view.len()).map(|_| Origin::default()).collect(),
            cut: None,
            cut_pending: false,
            freeze_failed: view.stack.layers().contains(&super::LayerKind::Sync),
            ahead_bytes_max: super::gaps::ahead_bytes_max(view, super::LayerKind::Mflow),
            reporting: Reporting::default(),
            sweep_at: None,
        }
    }

    /// Whether a cast of a failed origin lies beyond the announced cut.
    fn beyond_cut(&self, origin: Rank, seqno: Seqno) -> bool {
        self.failed.contains(origin) && self.cut.as_ref().is_some_and(|cut| seqno >= cut[usize::from(origin)])
    }

    /// Reports `CutReached` once every origin is delivered up to the cut.
    fn check_cut(&mut self, out: &mut Outbox<'_>) {
        let Some(cut) = &self.cut else { return };
        if self.cut_pending && self.origins.iter().zip(cut.iter()).all(|(o, &c)| o.received >= c) {
            self.cut_pending = false;
            out.up(Up::CutReached);
        }
    }

    fn set_cut(&mut self, cut: Arc<[u64]>, out: &mut Outbox<'_>) {
        if cut.len() != self.origins.len() {
            out.drop_input(super::LayerKind::Mnak, DropReason::Gossip);
            return;
        }
        for (rank, (o, &c)) in self.origins.iter_mut().zip(cut.iter()).enumerate() {
            o.max_known = o.max_known.max(c);
            if self.failed.contains(rank as Rank) {
                // Nothing of a failed origin beyond the cut is ever delivered in this view.
                o.ooo.retain(|seqno| seqno < c);
            }
        }
        self.cut = Some(cut);
        self.cut_pending = true;
        // Deliver what the freeze held back, up to the cut.
        for origin in 0..self.origins.len() as Rank {
            let limit = self.limit(origin);
            self.drain(origin, limit, out);
        }
        for origin in 0..self.origins.len() as Rank {
            if origin == self.rank {
                continue;
            }
            if let Some((lo, hi)) = self.origins[usize::from(origin)].gap() {
                self.nak(origin, lo, hi, out);
            }
        }
        self.check_cut(out);
    }

    /// NAKs `lo..=hi` of `origin`: to the origin while it lives, else to the whole view.
    fn nak(&mut self, origin: Rank, lo: Seqno, hi: Seqno, out: &mut Outbox<'_>) {
        self.nak_to(origin, lo, hi, origin, out);
    }

    /// NAKs `lo..=hi` of `origin` to `dest`. If the origin has failed, the live members are asked
    /// instead: in a small view (fewer than [`NAK_CAST_MAX`] others live) all at once, by a cast,
    /// since any holder answers; in a larger one, 1, 2, 4 ... more of them at each sweep since it
    /// failed (`Origin::failed_asks`), in ring order from the origin, and all at once by a cast
    /// when the next batch would reach them all (at 300 members, about 9 sweeps). Cast to all at once, every holder answered: at 64 members, with 31 lacking 256
    /// casts of a failed origin that 32 hold, about 250,000 retransmissions at once, during the
    /// flush, 31 of every 32 of them duplicates. One member a sweep (the first version of this)
    /// took n sweeps to reach a holder, past the flush's timeout in a large view (a review's
    /// finding).
    fn nak_to(&mut self, origin: Rank, lo: Seqno, hi: Seqno, dest: Rank, out: &mut Outbox<'_>) {
        let o = &mut self.origins[usize::from(origin)];
        let first = o.first_hole();
        let rearm = o.asked.asked(lo, hi, first, out.now(), self.config.sweep_interval);
        out.count(super::LayerKind::Mnak, Counter::NakSent);
        let msg = Msg::default().with(Header::Nak { origin, lo, hi });
        if !self.failed.contains(origin) {
            out.dn(Dn::Send { dest, msg });
            return sweep_due(&mut self.sweep_at, rearm, out);
        }
        let n = self.origins.len() as u32;
        let live = |r: &Rank| *r != self.rank && !self.failed.contains(*r);
        let ring = || (0..n).map(|i| ((u32::from(origin) + i) % n) as Rank).filter(live);
        let others = ring().count();
        let asks = self.origins[usize::from(origin)].failed_asks;
        let batch = 1usize.checked_shl(asks.min(31)).unwrap_or(usize::MAX);
        if others < NAK_CAST_MAX || batch.saturating_mul(2) > others {
            out.dn(Dn::Cast { msg, qos: Qos::Unreliable });
        } else {
            for dest in ring().skip(batch - 1).take(batch) {
                out.dn(Dn::Send { dest, msg: msg.clone() });
            }
        }
        sweep_due(&mut self.sweep_at, rearm, out);
    }

    /// Whom the sweep asks for `origin`'s first hole, after `stalled` sweeps asked for it where
    /// it was: the origin first, then each other live member in turn (any member answers from what
    /// it holds, `answer`). An origin that stays silent though not (yet) failed cannot repair: a
    /// coordinator that left casts its last view once and its stack exits at once, and a
    /// survivor that lost that cast would wait out the commit timeout and go on alone (found by
    /// reading `intra` and `top`; `tests/leave.rs`). One member at a time, not the view: a NAK
    /// cast to all is answered by all.
    fn repairer(&self, origin: Rank, stalled: u32) -> Rank {
        let n = self.origins.len() as u32;
        let live = |r: &Rank| *r != self.rank && !self.failed.contains(*r);
        let ring = || (0..n).map(|i| ((u32::from(origin) + i) % n) as Rank).filter(live);
        let count = ring().count() as u32;
        match count {
            0 => origin,
            _ => ring().nth((stalled % count) as usize).unwrap_or(origin),
        }
    }

    /// Reports what this member has received of each origin to `stable` (asked by its sweep, or
    /// early, [`Config::report_every`]).
    fn report(&mut self, out: &mut Outbox<'_>) {
        self.reporting.reported();
        let counts: Arc<[u64]> = self.origins.iter().map(|o| o.received).collect();
        out.up(Up::NumCasts(counts));
    }

    /// Answers a NAK from `to` with what this member holds of `origin`'s `lo..=hi`, as far as
    /// `to`'s budget goes ([`Config::retransmit_rate`]).
    fn answer(&mut self, origin: Rank, lo: Seqno, hi: Seqno, to: Rank, out: &mut Outbox<'_>) {
        if usize::from(origin) >= self.origins.len() || usize::from(to) >= self.origins.len() {
            out.drop_input(super::LayerKind::Mnak, DropReason::NotForMe);
            return;
        }
        if to == self.rank {
            return;
        }
        let o = &self.origins[usize::from(origin)];
        let lo = lo.max(o.buf_lo);
        let end = hi.saturating_add(1).min(o.received);
        let want = end.saturating_sub(lo).min(self.config.retransmit_max as u64);
        let c = &self.config;
        let burst = super::gaps::burst(c.retransmit_rate, c.sweep_interval, c.retransmit_max);
        let granted = self.origins[usize::from(to)].budget.take(want, c.retransmit_rate, burst, out.now());
        if granted < want {
            out.drop_input(super::LayerKind::Mnak, DropReason::OverBudget);
        }
        let o = &self.origins[usize::from(origin)];
        for seqno in (lo..end).take(granted as usize) {
            let msg = o.buf[(seqno - o.buf_lo) as usize].clone().with(Header::Retrans { origin, seqno });
            out.count(super::LayerKind::Mnak, Counter::Retransmit);
            out.dn(Dn::Send { dest: to, msg });
        }
    }

    /// How far a failed origin's casts may be delivered: up to the cut once it is announced; in a
    /// stack with a flush, not beyond what was delivered when the failure was declared until then
    /// (what each member reported is what the cut is computed from, so delivering more before the
    /// cut would let members end the view with different casts); without a flush, no limit.
    fn limit(&self, origin: Rank) -> Seqno {
        if !self.failed.contains(origin) {
            return Seqno::MAX;
        }
        match &self.cut {
            Some(cut) => cut[usize::from(origin)],
            None if self.freeze_failed => self.origins[usize::from(origin)].received,
            None => Seqno::MAX,
        }
    }

    /// Delivers what waits in order behind `received`, up to `limit`.
    fn drain(&mut self, origin: Rank, limit: Seqno, out: &mut Outbox<'_>) {
        let o = &mut self.origins[usize::from(origin)];
        while o.received < limit {
            let Some(next) = o.ooo.remove(&o.received) else { break };
            o.buf.push_back(next.clone());
            o.received += 1;
            self.reporting.entered(self.config.report_every, out);
            out.up(Up::Cast { origin, msg: next, qos: Qos::Reliable });
        }
    }

    /// Receives cast `seqno` of `origin` (first transmission or retransmission).
    fn recv_cast(&mut self, origin: Rank, seqno: Seqno, msg: Msg, out: &mut Outbox<'_>) {
        if self.beyond_cut(origin, seqno) {
            out.drop_input(super::LayerKind::Mnak, DropReason::Orphan);
            return;
        }
        let limit = self.limit(origin);
        let (window, bytes_max) = (self.config.recv_window_max, self.ahead_bytes_max);
        let o = &mut self.origins[usize::from(origin)];
        if seqno < o.received || o.ooo.contains_key(&seqno) {
            out.drop_input(super::LayerKind::Mnak, DropReason::Duplicate);
            return;
        }
        if seqno == o.received && seqno < limit {
            // Fig 5.2 fast path: store for retransmission and pass up.
            o.buf.push_back(msg.clone());
            o.received += 1;
            self.reporting.entered(self.config.report_every, out);
            out.up(Up::Cast { origin, msg, qos: Qos::Reliable });
            self.drain(origin, limit, out);
            self.check_cut(out);
            return;
        }
        if seqno - o.received > window || !o.ooo.fits(msg.payload.len(), bytes_max) {
            out.drop_input(super::LayerKind::Mnak, DropReason::OutOfWindow);
            return;
        }
        o.ooo.insert(seqno, msg);
        o.max_known = o.max_known.max(seqno + 1);
        // NAKed now, or by the timer if the gap is still open then (`handle_timer`).
        match o.asked.hold(o.received, seqno, self.config.nak_delay, out.now()) {
            Hold::Nak(lo, hi) => self.nak(origin, lo, hi, out),
            Hold::Timer(at) => sweep_due(&mut self.sweep_at, at, out),
            Hold::Nothing => {}
        }
    }

    fn stable(&mut self, stability: &Stability, out: &mut Outbox<'_>) {
        assert_eq!(stability.stable.len(), self.origins.len(), "stability vector of the view's size");
        for (rank, o) in self.origins.iter_mut().enumerate() {
            let stable = stability.stable[rank].min(o.received);
            while o.buf_lo < stable {
                o.buf.pop_front();
                o.buf_lo += 1;
            }
            o.max_known = o.max_known.max(stability.max[rank]);
            // A failed origin whose casts every live member holds up to the same point: what lies
            // beyond a gap was seen by no one alive and cannot be repaired. Forget it (later
            // gossip can still reveal more, and then it is NAKed again).
            let settled = stability.stable[rank] == stability.max[rank] && o.received == stability.max[rank];
            if self.failed.contains(rank as Rank) && settled {
                o.ooo.clear();
                o.max_known = o.received;
                o.asked.naked_upto = o.received;
            }
        }
        // What the gossip reveals is NAKed like a gap an arrival reveals: once it has lasted
        // `nak_delay`, since with early reports (`report_every`) the gossip often names casts
        // still on their way.
        for origin in 0..self.origins.len() as Rank {
            self.nak_revealed(origin, out);
        }
    }

    /// NAKs a gap of `origin` that gossip or an expectation revealed (`max_known`), once it has
    /// lasted `nak_delay`. Never its own casts (a count from a cut or gossip that credits it with
    /// more than it sent is another member's error), as the sweep skips them too.
    fn nak_revealed(&mut self, origin: Rank, out: &mut Outbox<'_>) {
        if origin == self.rank {
            return;
        }
        let o = &self.origins[usize::from(origin)];
        if let Some((lo, hi)) = o.gap() {
            if hi >= o.asked.naked_upto {
                let lo = lo.max(o.asked.naked_upto);
                self.origins[usize::from(origin)].asked.naked_upto = hi + 1;
                if self.config.nak_delay.is_zero() {
                    self.nak(origin, lo, hi, out);
                } else {
                    sweep_due(&mut self.sweep_at, out.now() + self.config.nak_delay, out);
                }
            }
        }
    }

    /// `Dn::AwaitView`: `coord`'s next cast is the view this member committed to. Nothing else
    /// tells a member that it lost that cast: it is `coord`'s last in the view, no later cast
    /// reveals the gap, and stability gossip, which goes through the coordinator, stops with it.
    fn await_view(&mut self, coord: Rank, out: &mut Outbox<'_>) {
        if usize::from(coord) >= self.origins.len() || self.failed.contains(coord) {
            return;
        }
        let o = &mut self.origins[usize::from(coord)];
        o.max_known = o.max_known.max(o.received + 1);
        self.nak_revealed(coord, out);
    }
}

impl Mnak {
    /// `fast_up_apply` for a cast ahead of a gap (see `fast_up_ahead`): the same bookkeeping as
    /// `recv_cast`; the NAK itself is the trace's reply. Out of line: inlined into
    /// `fast_up_apply`, it made the common case (the next expected cast) about 25 instructions
    /// dearer (callgrind, `motet bench worker`).
    #[inline(never)]
    fn fast_up_apply_ahead(&mut self, origin: Rank, seqno: Seqno, msg: &Msg, out: &mut Outbox<'_>) {
        let o = &mut self.origins[usize::from(origin)];
        o.ooo.insert(seqno, msg.clone());
        o.max_known = o.max_known.max(seqno + 1);
        match o.asked.hold(o.received, seqno, self.config.nak_delay, out.now()) {
            // The rest of what `nak` does.
            Hold::Nak(lo, hi) => {
                let first = o.first_hole();
                let rearm = o.asked.asked(lo, hi, first, out.now(), self.config.sweep_interval);
                out.count(super::LayerKind::Mnak, Counter::NakSent);
                sweep_due(&mut self.sweep_at, rearm, out);
            }
            Hold::Timer(at) => sweep_due(&mut self.sweep_at, at, out),
            Hold::Nothing => {}
        }
    }

    /// `fast_up` for a cast ahead of a gap (the network reordered or lost what comes before),
    /// from a live origin: kept out of order, as `recv_cast` does, with a NAK for the part of the
    /// gap not yet asked for, or (with a `nak_delay`) an alarm that NAKs the gap if it is still
    /// open then. The trace ends here; the cast that fills the gap releases the run
    /// (`fast_release`).
    fn fast_up_ahead(&self, up: &fast::Up<'_>, seqno: Seqno) -> Option<UpStep> {
        let o = &self.origins[usize::from(up.origin)];
        let ahead = !self.failed.contains(up.origin)
            && seqno > o.received
            && seqno - o.received <= self.config.recv_window_max
            && o.ooo.fits(up.len, self.ahead_bytes_max)
            && !o.ooo.contains_key(&seqno);
        ahead.then(|| {
            let now = o.asked.new_gap(o.received, seqno).filter(|_| self.config.nak_delay.is_zero());
            let reply = now.map(|(lo, hi)| (up.origin, Header::Nak { origin: up.origin, lo, hi }.into()));
            UpStep { reply, absorb: true, ..UpStep::to(up.qos) }
        })
    }
}

impl Layer for Mnak {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Cast { origin, mut msg, .. } => match msg.pop_as::<Header>() {
                Some(Header::Data { seqno }) => self.recv_cast(origin, seqno, msg, out),
                Some(Header::Unrel) => out.up(Up::Cast { origin, msg, qos: Qos::Unreliable }),
                Some(Header::Nak { origin: whose, lo, hi }) => self.answer(whose, lo, hi, origin, out),
                _ => out.drop_input(super::LayerKind::Mnak, DropReason::HeaderMismatch),
            },
            // The flush reached the bottom: report our counts with it (Ensemble's `collect`).
            Up::BlockOk(_) => out.up(Up::BlockOk(self.origins.iter().map(|o| o.received).collect())),
            Up::Send { origin, mut msg } => match msg.pop_as::<Header>() {
                Some(Header::NoHdr) => out.up(Up::Send { origin, msg }),
                Some(Header::Nak { origin: whose, lo, hi }) => self.answer(whose, lo, hi, origin, out),
                Some(Header::Retrans { origin: whose, seqno }) => {
                    if usize::from(whose) >= self.origins.len() || whose == self.rank {
                        out.drop_input(super::LayerKind::Mnak, DropReason::NotForMe);
                    } else if seqno >= self.origins[usize::from(whose)].asked.asked_upto {
                        // Every retransmission answers a NAK of ours (`nak_to` records what it
                        // asked for). One that answers none would take a place in `whose`'s
                        // out-of-order buffer, whose bounds are per origin: one member sending
                        // them for every origin filled all of them (n times `ahead_bytes_max`),
                        // and what it sent was delivered as `whose`'s once the gap closed (a
                        // review's finding).
                        out.drop_input(super::LayerKind::Mnak, DropReason::Unasked);
                    } else {
                        // The first answer to the first hole's NAK times the round trip, which
                        // paces the NAKs of this origin's holes (`gaps::RoundTrip`).
                        self.origins[usize::from(whose)].asked.answered(seqno, out.now());
                        self.recv_cast(whose, seqno, msg, out);
                    }
                }
                _ => out.drop_input(super::LayerKind::Mnak, DropReason::HeaderMismatch),
            },
            other => out.up(other),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        match ev {
            // Every ordered level is reliable underneath (ordering layers above lower it to `Reliable`).
            Dn::Cast { msg, qos: Qos::Reliable | Qos::Total | Qos::Causal | Qos::Safe } => {
                let o = &mut self.origins[usize::from(self.rank)];
                let seqno = o.received;
                o.buf.push_back(msg.clone());
                o.received += 1;
                self.reporting.entered(self.config.report_every, out);
                out.dn(Dn::Cast { msg: msg.with(Header::Data { seqno }), qos: Qos::Reliable });
            }
            Dn::Cast { msg, qos: Qos::Unreliable } => {
                out.dn(Dn::Cast { msg: msg.with(Header::Unrel), qos: Qos::Unreliable })
            }
            Dn::Send { dest, msg } => out.dn(Dn::Send { dest, msg: msg.with(Header::NoHdr) }),
            Dn::StableReq => self.report(out),
            Dn::Stable(stability) => self.stable(&stability, out),
            Dn::Fail(ranks) => {
                // A failed origin's open first hole is asked of the others at the next sweep, now,
                // not when the backoff of its NAKs to the origin would have asked again.
                let now = out.now();
                let mut ask = false;
                let (n, me) = (self.origins.len(), self.rank);
                for rank in ranks.iter().filter(|&r| usize::from(r) < n && r != me) {
                    let o = &mut self.origins[usize::from(rank)];
                    if !self.failed.contains(rank) && o.first_hole().is_some() {
                        o.asked.ask_first_by(now);
                        ask = true;
                    }
                }
                self.failed.union_with(&ranks);
                if ask {
                    sweep_due(&mut self.sweep_at, now, out);
                }
                out.dn(Dn::Fail(ranks));
            }
            Dn::Block => {
                // A (new) flush round: a cut of an earlier round no longer holds. Were it kept, this
                // member would go on delivering a failed origin's casts up to it while reporting
                // fewer to the new round, whose cut (the maximum over its survivors' reports) could
                // then be smaller: members of one next view would deliver different casts. Failed
                // origins freeze again at what was delivered, which the new report includes.
                self.cut = None;
                self.cut_pending = false;
                out.dn(Dn::Block);
            }
            Dn::Cut(cut) => self.set_cut(cut, out),
            Dn::AwaitView { coord } => self.await_view(coord, out),
            other @ (Dn::Leave
            | Dn::Replaced
            | Dn::KeyShared
            | Dn::Lagging(_)
            | Dn::SyncFlush { .. }
            | Dn::SyncCut { .. }
            | Dn::Gossip { .. }
            | Dn::MergeFlush
            | Dn::MergeRequest { .. }
            | Dn::MergeGrant { .. }
            | Dn::MergeForward { .. }
            | Dn::MergeDeny { .. }
            | Dn::CastFull { .. }) => out.dn(other),
        }
    }

    fn handle_timer(&mut self, out: &mut Outbox<'_>) {
        if self.reporting.due {
            self.report(out);
        }
        // A timer that fired before the sweep is due (an early report's) leaves the sweep for
        // its own time: the stack forgot that alarm when this one fired.
        match self.sweep_at {
            Some(at) if at > out.now() => {
                out.alarm(at);
                return;
            }
            Some(_) => self.sweep_at = None,
            None => return,
        }
        // The sweep asks again for the first hole when its re-ask is due (an eighth of a sweep
        // interval after its first NAK, or when its answer was due if that is later, backing off
        // to an interval: `gaps::Asked::first_wait`), and, a sweep interval or
        // more after the last full sweep, for every later one asked for before it (a NAK or its
        // answer may have been lost); the others are asked for once, when their `nak_delay` is
        // over, as they would have been at once without a delay (`gaps::to_ask`).
        let (now, interval) = (out.now(), self.config.sweep_interval);
        let mut due: Option<Instant> = None;
        for origin in 0..self.origins.len() as Rank {
            if origin == self.rank {
                continue;
            }
            // A failed origin's holes go to growing batches of members, then by a cast to all,
            // each answering from what it holds: asking again for every later hole there too
            // would multiply that by up to `HOLES_MAX` (a review's finding), so only its first
            // hole is asked for again, as before.
            let later = !self.failed.contains(origin);
            let o = &mut self.origins[usize::from(origin)];
            let full = o.asked.full_sweep(now, interval);
            let asks = super::gaps::to_ask(o.holes(), &o.asked, now, interval, later);
            if !asks.is_empty() {
                // A sweep that asks for the first hole where the last one found it asks someone
                // else this time.
                if Some(asks[0].0) == o.first_hole() {
                    let stalled = match o.stalled {
                        Some((at, sweeps)) if at == o.received => sweeps.wrapping_add(1),
                        _ => 0,
                    };
                    o.stalled = Some((o.received, stalled));
                }
                let stalled = o.stalled.filter(|&(at, _)| at == o.received).map_or(0, |(_, sweeps)| sweeps);
                let dest = self.repairer(origin, stalled);
                for (lo, hi) in asks {
                    self.nak_to(origin, lo, hi, dest, out);
                }
                if !later {
                    let o = &mut self.origins[usize::from(origin)];
                    o.failed_asks = o.failed_asks.saturating_add(1);
                }
            }
            // A full sweep marks what was asked until now even when it asked for nothing again
            // (the holes asked for since the last one are asked again at the next).
            let o = &mut self.origins[usize::from(origin)];
            if full {
                o.asked.swept(now);
            }
            if let Some(first) = o.first_hole() {
                let at = o.asked.due(first, now, interval);
                due = Some(due.map_or(at, |due| due.min(at)));
            }
        }
        // While holes are open the sweep goes on, at the next re-ask that is due: a sweep that
        // asked for nothing armed nothing (a NAK arms it), and would have left them unasked.
        if let Some(at) = due {
            sweep_due(&mut self.sweep_at, at, out);
        }
    }

    // Fast path (Fig 5.2): a reliable cast is numbered and kept; the next expected cast of an
    // origin, with no cut announced, is kept and passed up, and releases what was held behind it;
    // a cast ahead of
    // a gap is held out of order, with a NAK (`fast_up`); sends pass.
    fn fast_dn(&self, down: &Down) -> Option<DnStep> {
        let header = match (down.dest, down.qos) {
            (Some(_), _) => Header::NoHdr,
            (None, Qos::Unreliable) => Header::Unrel,
            (None, _) => Header::Data { seqno: self.origins[usize::from(self.rank)].received },
        };
        let reliable = down.dest.is_none() && down.qos != Qos::Unreliable;
        let qos = if reliable { Qos::Reliable } else { down.qos };
        // A reliable cast is kept for retransmission: after the transmit (delayed processing).
        Some(DnStep { keep: reliable, ..DnStep::to(header, qos) })
    }

    fn fast_dn_apply(&mut self, down: &Down, out: &mut Outbox<'_>) {
        // The sequence number, which the next cast's condition reads, moves at once.
        if down.dest.is_none() && down.qos != Qos::Unreliable {
            self.origins[usize::from(self.rank)].received += 1;
            self.reporting.entered(self.config.report_every, out);
        }
    }

    fn fast_up(&self, up: &fast::Up<'_>) -> Option<UpStep> {
        if !up.cast {
            return fast::is(up.header, Header::NoHdr).then(|| UpStep::pass(up)).flatten();
        }
        let motet_wire::Header::Mnak(Header::Data { seqno }) = up.header else { return None };
        let o = self.origins.get(usize::from(up.origin))?;
        let usual = self.cut.is_none() && up.origin != self.rank;
        if usual && *seqno == o.received && *seqno < self.limit(up.origin) {
            // Kept for retransmission to the others, after the delivery (delayed processing). A
            // cast that fills a gap also releases the run held behind it (`drain`).
            let release = !o.ooo.is_empty();
            return Some(UpStep { keep: true, release, ..UpStep::to(Qos::Reliable) });
        }
        if usual {
            self.fast_up_ahead(up, *seqno)
        } else {
            None
        }
    }

    fn fast_up_apply(&mut self, up: &fast::Up<'_>, msg: &Msg, out: &mut Outbox<'_>) {
        if !up.cast {
            return;
        }
        let motet_wire::Header::Mnak(Header::Data { seqno }) = up.header else { return };
        let o = &mut self.origins[usize::from(up.origin)];
        if *seqno == o.received {
            o.received += 1;
            self.reporting.entered(self.config.report_every, out);
            return;
        }
        self.fast_up_apply_ahead(up.origin, *seqno, msg, out);
    }

    fn fast_release(&mut self, origin: Rank, _cast: bool, out: &mut Outbox<'_>) -> Option<(Rank, Msg)> {
        // `drain`, one cast at a time; the copy for the buffer comes back through `fast_keep`.
        let limit = self.limit(origin);
        let o = &mut self.origins[usize::from(origin)];
        let next = (o.received < limit).then(|| o.ooo.remove(&o.received)).flatten()?;
        o.received += 1;
        self.reporting.entered(self.config.report_every, out);
        Some((origin, next))
    }

    fn fast_keep(&mut self, kept: &fast::Kept, msg: Msg, _out: &mut Outbox<'_>) {
        // Casts only (the conditions keep nothing else): the buffer `buf_lo..received` is whole
        // again once every kept cast is filed, in order.
        self.origins[usize::from(kept.peer)].buf.push_back(msg);
    }

    fn fast_keep_wait(&self) -> crate::Duration {
        // Filing sets no alarm: a copy is read only by a NAK, stability or a view change, each
        // an input that files what waits first.
        crate::Duration::MAX
    }

    fn fast_expected(&self, origin: Rank, cast: bool) -> Option<Seqno> {
        cast.then(|| self.origins.get(usize::from(origin)).map(|o| o.received)).flatten()
    }

    fn fast_inert(&self, trace: fast::Trace) -> Option<usize> {
        // Multicast reliability: only casts have work here.
        (!trace.is_cast()).then_some(usize::MAX)
    }

    fn check_invariants(&self) {
        for o in &self.origins {
            assert_eq!(o.buf_lo + o.buf.len() as Seqno, o.received, "buffer covers buf_lo..received");
            assert!(o.ooo.keys().all(|&s| s < o.asked.naked_upto), "every held cast's gap was scheduled");
            assert!(o.ooo.keys().all(|&s| s >= o.received), "ooo holds only what is not delivered");
            o.ooo.check();
        }
    }

    fn buffered(&self) -> usize {
        self.origins.iter().map(|o| o.buf.len() + o.ooo.len()).sum()
    }
}

#[cfg(test)]
mod tests;
