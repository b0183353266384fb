//! `pt2pt`: reliable FIFO point-to-point messages (thesis §2.3.3 p.25, §5.6 p.87).
//!
//! Provides: [`Service::ReliableSend`]. Requires below: [`Service::Transport`].
//! Header: `Data { seqno }` on sends, `Ack { next }` (cumulative: everything below `next` was
//! received), `Nak { lo, hi }` (inclusive range), `NoHdr` on casts, which pass untouched.
//!
//! Sender: numbers each message per destination and keeps it until acknowledged. Receiver:
//! delivers in order; on a gap it buffers (at most `recv_window_max` ahead, and with flow control twice the largest
//! window in bytes: `gaps::ahead_bytes_max`) and NAKs the missing
//! range once, when it has lasted `nak_delay` (receiver-driven repair, thesis §2.3.3; at once with
//! a zero delay). A periodic sweep, armed only while something is outstanding, sends delayed
//! cumulative acks (within half a sweep), re-NAKs open gaps and retransmits what is still
//! unacknowledged a sweep later ("similar to TCP", thesis §5.6). A duplicate is answered
//! with an immediate ack, since it means our ack was lost.

use super::gaps::Hold;
use crate::event::{Counter, Dn, DropReason, Msg, Up};
use crate::fast::{self, DnStep, Down, UpStep};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::time::{Duration, Instant};
use crate::view::{RankSet, ViewState};
use crate::Rank;
use motet_wire::hdr::pt2pt::Header;
use motet_wire::Seqno;
use std::collections::VecDeque;

/// `pt2pt` parameters.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Period of the ack/retransmit/re-NAK sweep, and the retransmission timeout. Default 50 ms.
    #[serde(
        rename = "sweep_interval_ms",
        deserialize_with = "crate::time::millis",
        serialize_with = "crate::time::ser_millis"
    )]
    pub sweep_interval: Duration,
    /// Messages received before an ack is sent at once instead of at the next sweep. Default 16.
    pub ack_batch: u64,
    /// Out-of-order messages buffered per sender; further-ahead ones are dropped. Default 16,384:
    /// what the largest `pt2ptw` window (1 MiB) lets out of empty messages, each counted as 64
    /// bytes (`StackConfig::validate` checks that it holds the window configured).
    pub recv_window_max: u64,
    /// Messages retransmitted per peer per NAK or sweep. Default 64.
    pub retransmit_max: usize,
    /// Most messages retransmitted to one peer a second in answer to its NAKs, with a burst of a
    /// `sweep_interval`'s worth, and at least what one sweep may ask (32 holes of
    /// `retransmit_max`: 5,000 by default, the interval's worth). Default 100,000. As `mnak`'s:
    /// a NAK that asks for more is answered in part (`OverBudget`), the rest at its re-ask. The
    /// sweep's own retransmissions, of sends unacknowledged for an interval, are not counted.
    pub retransmit_rate: u64,
    /// How long a gap must stay open before it is NAKed. Default 2 ms; zero NAKs at once. As
    /// `mnak`'s: a reordering network closes most gaps by itself a moment later.
    #[serde(
        rename = "nak_delay_ms",
        deserialize_with = "crate::time::millis",
        serialize_with = "crate::time::ser_millis"
    )]
    pub nak_delay: Duration,
    /// How long a peer may leave this member's sends unacknowledged, while they are
    /// retransmitted every sweep, before it is suspected. Default 10 s; longer than
    /// `suspect.timeout` (checked): it is for a peer that stays audible (so the failure detector
    /// keeps it) but does not acknowledge, which held the next flush for good (`Block` waits here
    /// for the acknowledgements): a faulty member, or a link down one way between two members
    /// that each talk to the coordinator (a review's finding). As `safe.ack_timeout`.
    #[serde(
        rename = "ack_timeout_ms",
        deserialize_with = "crate::time::millis",
        serialize_with = "crate::time::ser_millis"
    )]
    pub ack_timeout: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            sweep_interval: Duration::from_millis(50),
            ack_batch: 16,
            recv_window_max: 16_384,
            retransmit_max: 64,
            retransmit_rate: 100_000,
            nak_delay: Duration::from_millis(2),
            ack_timeout: Duration::from_millis(10_000),
        }
    }
}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "pt2pt",
    summary: "reliable FIFO point-to-point: sequence numbers, acks, NAKs, retransmission",
    provides: &[Service::ReliableSend],
    requires_below: &[Service::Transport],
    requires_above: &[],
    above_every: &[],
    below_every: &[],
};

/// Per-peer state.
#[derive(Debug, Default, PartialEq)]
struct Peer {
    /// Sequence number of `unacked[0]`: everything below was acknowledged.
    acked: Seqno,
    /// Sent, not yet acknowledged: message (with the headers from above) and last send time.
    unacked: VecDeque<(Msg, Instant)>,
    /// Next sequence number to send: `acked + unacked.len()` once the bypass's delayed
    /// processing has filed every kept send (the fast path's condition reads this, not the
    /// buffer).
    sent: Seqno,
    /// Next sequence number expected from this peer.
    expected: Seqno,
    /// Received ahead of `expected`.
    ooo: super::gaps::Ahead,
    /// What was asked for of the gaps.
    asked: super::gaps::Asked,
    /// What this peer may still have retransmitted to it in answer to its NAKs.
    budget: super::gaps::Budget,
    /// The last cumulative ack we sent.
    ack_sent: Seqno,
    /// Since when sends to this peer have waited without any being acknowledged (`None` while
    /// none waits): the peer is suspected at `Config::ack_timeout` from it.
    waiting_since: Option<Instant>,
}

impl Peer {
    /// The holes before and between the sends held out of order, each `(lo, hi)`, inclusive.
    fn holes(&self) -> impl Iterator<Item = (Seqno, Seqno)> + '_ {
        super::gaps::holes(self.expected, self.ooo.keys().copied(), 0)
    }

    /// Where the first hole begins, if there is one.
    fn first_hole(&self) -> Option<Seqno> {
        self.holes().next().map(|(lo, _)| lo)
    }

    /// How many sends are held in order right behind the next expected one.
    fn run(&self) -> Seqno {
        self.ooo.keys().zip(self.expected + 1..).take_while(|(held, want)| **held == *want).count() as Seqno
    }
}

/// `pt2pt` state.
#[derive(Debug, PartialEq)]
pub struct Pt2pt {
    config: Config,
    rank: Rank,
    failed: RankSet,
    peers: Vec<Peer>,
    /// A flush (`Block`) waits here until every send to a live peer is acknowledged, and a `Cut`
    /// behind it.
    block: super::HeldBlock,
    /// Bytes of one peer's sends kept ahead of a gap ([`super::gaps::ahead_bytes_max`]); a send
    /// that would pass it is dropped like one beyond `recv_window_max`, and asked for again.
    ahead_bytes_max: u64,
    /// Peers this layer suspected already (`Config::ack_timeout`; the view change that excludes
    /// them is under way).
    overdue: RankSet,
    /// When the sweep last ran: one that comes more than a whole interval late means this
    /// process did not run (stopped, descheduled), and that time counts against no peer.
    last_sweep: Instant,
}

impl Pt2pt {
    /// A `pt2pt` for `view`.
    pub fn new(config: &Config, view: &ViewState, rank: Rank) -> Pt2pt {
        Pt2pt {
            config: config.clone(),
            rank,
            failed: RankSet::new(),
            peers: (0..view.len()).map(|_| Peer::default()).collect(),
            block: super::HeldBlock::default(),
            ahead_bytes_max: super::gaps::ahead_bytes_max(view, super::LayerKind::Pt2ptw),
            overdue: RankSet::new(),
            last_sweep: Instant::ZERO,
        }
    }

    /// Keeps `msg`, sent to `peer` at `now`, until it is acknowledged: the layered handler and
    /// the fast path's delayed filing share it.
    fn keep(&mut self, peer: Rank, msg: Msg, now: Instant) {
        let p = &mut self.peers[usize::from(peer)];
        if p.unacked.is_empty() {
            p.waiting_since = Some(now);
        }
        p.unacked.push_back((msg, now));
    }

    /// Lets a held `Block` continue down once every send is acknowledged.
    /// Frees what `peer` acknowledged: every send before `next` (never beyond what was sent). The
    /// layered handler and the fast path share it.
    fn acknowledge(&mut self, peer: Rank, next: Seqno, now: Instant) {
        let p = &mut self.peers[usize::from(peer)];
        let next = next.min(p.sent);
        if p.acked < next {
            // Progress: what still waits, waits from now.
            p.waiting_since = Some(now);
        }
        while p.acked < next {
            p.unacked.pop_front();
            p.acked += 1;
        }
        if p.unacked.is_empty() {
            p.waiting_since = None;
        }
    }

    fn release_block(&mut self, out: &mut Outbox<'_>) {
        if self.peers.iter().all(|p| p.unacked.is_empty()) {
            self.block.release(out);
        }
    }

    /// How long an ack may wait for more messages to cover: half a sweep, so that it reaches the
    /// sender before the sender's sweep, a whole sweep after the send, takes the message for lost
    /// (with both at one sweep, the two timers raced, and a fault-free run retransmitted sends that
    /// had arrived: TCP's delayed ack is likewise shorter than its retransmission timeout).
    fn ack_delay(&self) -> Duration {
        Duration(self.config.sweep_interval.0 / 2)
    }

    fn send_ack(&mut self, peer: Rank, out: &mut Outbox<'_>) {
        let p = &mut self.peers[usize::from(peer)];
        p.ack_sent = p.expected;
        out.count(super::LayerKind::Pt2pt, Counter::AckSent);
        out.dn(Dn::Send { dest: peer, msg: Msg::default().with(Header::Ack { next: p.expected }) });
    }

    fn send_nak(&mut self, peer: Rank, lo: Seqno, hi: Seqno, out: &mut Outbox<'_>) {
        let p = &mut self.peers[usize::from(peer)];
        let rearm = p.asked.asked(lo, hi, p.first_hole(), out.now(), self.config.sweep_interval);
        out.alarm(rearm);
        out.count(super::LayerKind::Pt2pt, Counter::NakSent);
        out.dn(Dn::Send { dest: peer, msg: Msg::default().with(Header::Nak { lo, hi }) });
    }

    /// Answers a NAK of `lo..=hi` from `peer`, as far as its budget goes
    /// ([`Config::retransmit_rate`]).
    fn answer(&mut self, peer: Rank, lo: Seqno, hi: Seqno, out: &mut Outbox<'_>) {
        let c = &self.config;
        let p = &mut self.peers[usize::from(peer)];
        let lo = lo.max(p.acked);
        let end = hi.saturating_add(1).min(p.sent);
        let want = end.saturating_sub(lo).min(c.retransmit_max as u64);
        let burst = super::gaps::burst(c.retransmit_rate, c.sweep_interval, c.retransmit_max);
        let granted = p.budget.take(want, c.retransmit_rate, burst, out.now());
        if granted < want {
            out.drop_input(super::LayerKind::Pt2pt, DropReason::OverBudget);
        }
        if granted > 0 {
            self.retransmit(peer, lo, lo + granted - 1, out);
        }
    }

    fn retransmit(&mut self, peer: Rank, lo: Seqno, hi: Seqno, out: &mut Outbox<'_>) {
        let now = out.now();
        let p = &mut self.peers[usize::from(peer)];
        let lo = lo.max(p.acked);
        let hi = hi.min(p.sent.saturating_sub(1));
        for seqno in (lo..=hi).take(self.config.retransmit_max) {
            if seqno >= p.sent {
                break;
            }
            let entry = &mut p.unacked[(seqno - p.acked) as usize];
            entry.1 = now;
            out.count(super::LayerKind::Pt2pt, Counter::Retransmit);
            // Under `Retrans`, not `Data`: never compressed, so it reaches this peer's stack even
            // where its node drops the compressed form (a key two stacks share: `ConnId`).
            out.dn(Dn::Send { dest: peer, msg: entry.0.clone().with(Header::Retrans { seqno }) });
        }
    }

    fn recv_data(&mut self, origin: Rank, seqno: Seqno, msg: Msg, out: &mut Outbox<'_>) {
        let (window, bytes_max) = (self.config.recv_window_max, self.ahead_bytes_max);
        let p = &mut self.peers[usize::from(origin)];
        if seqno < p.expected || p.ooo.contains_key(&seqno) {
            out.drop_input(super::LayerKind::Pt2pt, DropReason::Duplicate);
            self.send_ack(origin, out);
            return;
        }
        if seqno > p.expected {
            if seqno - p.expected > window || !p.ooo.fits(msg.payload.len(), bytes_max) {
                out.drop_input(super::LayerKind::Pt2pt, DropReason::OutOfWindow);
                return;
            }
            p.ooo.insert(seqno, msg);
            // NAKed now, or by the sweep if the gap is still open then.
            match p.asked.hold(p.expected, seqno, self.config.nak_delay, out.now()) {
                Hold::Nak(lo, hi) => self.send_nak(origin, lo, hi, out),
                Hold::Timer(at) => out.alarm(at),
                Hold::Nothing => {}
            }
            out.alarm(out.now() + self.config.sweep_interval);
            return;
        }
        // The common case: the next expected message (thesis §5.6 fast path).
        out.up(Up::Send { origin, msg });
        p.expected += 1;
        while let Some(next) = p.ooo.remove(&p.expected) {
            out.up(Up::Send { origin, msg: next });
            p.expected += 1;
        }
        if p.expected - p.ack_sent >= self.config.ack_batch {
            self.send_ack(origin, out);
        } else {
            out.alarm(out.now() + self.ack_delay());
        }
    }
}

impl Layer for Pt2pt {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Send { origin, mut msg } => match msg.pop_as::<Header>() {
                Some(Header::Data { seqno } | Header::Retrans { seqno }) => self.recv_data(origin, seqno, msg, out),
                Some(Header::Ack { next }) => {
                    self.acknowledge(origin, next, out.now());
                    self.release_block(out);
                }
                Some(Header::Nak { lo, hi }) => self.answer(origin, lo, hi, out),
                Some(Header::NoHdr) | None => out.drop_input(super::LayerKind::Pt2pt, DropReason::HeaderMismatch),
            },
            other => out.pass_up(super::LayerKind::Pt2pt, other, Header::NoHdr),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        match ev {
            Dn::Send { dest, msg } => {
                assert_ne!(dest, self.rank, "appl delivers sends to self locally");
                if self.failed.contains(dest) {
                    out.drop_input(super::LayerKind::Pt2pt, DropReason::FromFailed);
                    return;
                }
                let p = &mut self.peers[usize::from(dest)];
                let seqno = p.sent;
                p.sent += 1;
                self.keep(dest, msg.clone(), out.now());
                out.dn(Dn::Send { dest, msg: msg.with(Header::Data { seqno }) });
                out.alarm(out.now() + self.config.sweep_interval);
            }
            Dn::Fail(ranks) => {
                let n = self.peers.len();
                for rank in ranks.iter().filter(|&r| usize::from(r) < n) {
                    self.failed.insert(rank);
                    let p = &mut self.peers[usize::from(rank)];
                    p.acked = p.sent;
                    p.unacked.clear();
                    p.waiting_since = None;
                    p.ooo.clear();
                }
                out.dn(Dn::Fail(ranks));
                self.release_block(out);
            }
            Dn::Block => {
                self.block.hold();
                self.release_block(out);
            }
            Dn::Cut(cut) => self.block.cut(cut, out),
            other => out.pass_dn(other, Header::NoHdr),
        }
    }

    fn handle_timer(&mut self, out: &mut Outbox<'_>) {
        let now = out.now();
        // A sweep more than a whole interval late: this process did not run meanwhile (as
        // `suspect`'s and `safe`'s deadlines, a stall counts against no peer). Found by the
        // simulator's test of a host paused past every timeout: the first version suspected
        // every peer when the host ran again. After a quiet spell (no sweep armed) the wait that
        // starts then is moved to now, which costs at most one sweep.
        let late = now.saturating_since(self.last_sweep + self.config.sweep_interval);
        if late > self.config.sweep_interval {
            for p in &mut self.peers {
                if let Some(since) = &mut p.waiting_since {
                    *since = (*since + late).min(now);
                }
            }
        }
        self.last_sweep = now;
        let mut busy = false;
        for peer in 0..self.peers.len() as Rank {
            if peer == self.rank || self.failed.contains(peer) {
                continue;
            }
            let p = &self.peers[usize::from(peer)];
            if p.expected > p.ack_sent {
                self.send_ack(peer, out);
            }
            // The first hole is asked for again when its re-ask is due (an eighth of a sweep
            // interval after its first NAK, backing off to an interval), and at a full sweep
            // every later one asked for before the last full sweep; the others once, when their
            // `nak_delay` is over (as `mnak`'s timer, `gaps::to_ask`).
            let p = &self.peers[usize::from(peer)];
            let interval = self.config.sweep_interval;
            let full = p.asked.full_sweep(now, interval);
            for (lo, hi) in super::gaps::to_ask(p.holes(), &p.asked, now, interval, true) {
                self.send_nak(peer, lo, hi, out);
            }
            let p = &mut self.peers[usize::from(peer)];
            if full {
                p.asked.swept(now);
            }
            if let Some(first) = p.first_hole() {
                out.alarm(p.asked.due(first, now, interval));
            }
            let p = &self.peers[usize::from(peer)];
            let due = p.unacked.iter().take_while(|(_, sent)| *sent + self.config.sweep_interval <= now).count();
            if due > 0 {
                let (lo, hi) = (p.acked, p.acked + due as Seqno - 1);
                self.retransmit(peer, lo, hi, out);
            }
            let p = &self.peers[usize::from(peer)];
            busy |= !p.unacked.is_empty() || !p.ooo.is_empty();
        }
        // Peers that acknowledged nothing of what waits for them within `ack_timeout`: suspected
        // once each (counter `AckOverdue`), so the view change excludes them instead of the next
        // flush waiting for them for good.
        let overdue: RankSet = (0..self.peers.len() as Rank)
            .filter(|&r| r != self.rank && !self.failed.contains(r) && !self.overdue.contains(r))
            .filter(|&r| self.peers[usize::from(r)].waiting_since.is_some_and(|t| t + self.config.ack_timeout <= now))
            .collect();
        if !overdue.is_empty() {
            tracing::warn!(?overdue, "peers did not acknowledge sends within pt2pt.ack_timeout: suspected");
            for _ in overdue.iter() {
                out.count(super::LayerKind::Pt2pt, Counter::AckOverdue);
            }
            self.overdue.union_with(&overdue);
            out.up(Up::Suspect(overdue));
        }
        if busy {
            out.alarm(now + self.config.sweep_interval);
        }
    }

    // Fast path (thesis §5.6): a send to a live peer (numbered, kept until acknowledged); the
    // next expected send from a peer (delivered, with an `Ack` reply when one is due, and the run
    // held behind it released); a send ahead of a gap (held); casts pass.
    fn fast_dn(&self, down: &Down) -> Option<DnStep> {
        match down.dest {
            None => DnStep::pass(Header::NoHdr, down),
            Some(dest) if dest == self.rank || self.failed.contains(dest) => None,
            // Kept until acknowledged: after the transmit (delayed processing).
            Some(dest) => DnStep::pass(Header::Data { seqno: self.peers[usize::from(dest)].sent }, down)
                .map(|step| DnStep { keep: true, ..step }),
        }
    }

    fn fast_dn_apply(&mut self, down: &Down, _out: &mut Outbox<'_>) {
        // The sequence number, which the next send's condition reads, moves at once.
        if let Some(dest) = down.dest {
            self.peers[usize::from(dest)].sent += 1;
        }
    }

    fn fast_keep(&mut self, kept: &fast::Kept, msg: Msg, out: &mut Outbox<'_>) {
        // Sends only (the conditions keep nothing else), with the time they were sent: the sweep
        // that retransmits them is armed here too.
        self.keep(kept.peer, msg, out.now());
        out.alarm(out.now() + self.config.sweep_interval);
    }

    fn fast_keep_wait(&self) -> crate::Duration {
        // The sweep that retransmits a kept send is due a sweep interval after the send's input.
        self.config.sweep_interval
    }

    fn fast_up(&self, up: &fast::Up<'_>) -> Option<UpStep> {
        if up.cast {
            return fast::is(up.header, Header::NoHdr).then(|| UpStep::pass(up)).flatten();
        }
        let p = self.peers.get(usize::from(up.origin))?;
        match up.header {
            // An acknowledgement frees the retransmission buffer; it is kept here, with no event,
            // unless a flush waits for it.
            motet_wire::Header::Pt2pt(Header::Ack { .. }) if !self.block.held => {
                Some(UpStep { absorb: true, ..UpStep::to(up.qos) })
            }
            // The next expected send; if it fills a gap, the run held behind it is released after
            // it, and the ack, when due, covers the run too (as `recv_data` acks after draining).
            motet_wire::Header::Pt2pt(Header::Data { seqno }) if *seqno == p.expected => {
                let run = p.run();
                let next = p.expected + 1 + run;
                let reply =
                    (next - p.ack_sent >= self.config.ack_batch).then(|| (up.origin, Header::Ack { next }.into()));
                Some(UpStep { reply, release: run > 0, ..UpStep::to(up.qos) })
            }
            // Ahead of a gap: held out of order, as `recv_data` does, the gap NAKed at once (the
            // trace's reply) or when it has lasted `nak_delay`.
            motet_wire::Header::Pt2pt(Header::Data { seqno })
                if *seqno > p.expected
                    && *seqno - p.expected <= self.config.recv_window_max
                    && p.ooo.fits(up.len, self.ahead_bytes_max)
                    && !p.ooo.contains_key(seqno) =>
            {
                let now = p.asked.new_gap(p.expected, *seqno).filter(|_| self.config.nak_delay.is_zero());
                let reply = now.map(|(lo, hi)| (up.origin, Header::Nak { lo, hi }.into()));
                Some(UpStep { reply, absorb: true, ..UpStep::to(up.qos) })
            }
            _ => None,
        }
    }

    fn fast_release(&mut self, origin: Rank, _cast: bool, _out: &mut Outbox<'_>) -> Option<(Rank, Msg)> {
        // `recv_data`'s drain, one send at a time.
        let p = &mut self.peers[usize::from(origin)];
        let next = p.ooo.remove(&p.expected)?;
        p.expected += 1;
        Some((origin, next))
    }

    fn fast_up_apply(&mut self, up: &fast::Up<'_>, msg: &Msg, out: &mut Outbox<'_>) {
        if up.cast {
            return;
        }
        if let motet_wire::Header::Pt2pt(Header::Ack { next }) = up.header {
            return self.acknowledge(up.origin, *next, out.now());
        }
        let motet_wire::Header::Pt2pt(Header::Data { seqno }) = up.header else { return };
        let p = &mut self.peers[usize::from(up.origin)];
        if *seqno > p.expected {
            // Ahead of a gap (see `fast_up`).
            p.ooo.insert(*seqno, msg.clone());
            match p.asked.hold(p.expected, *seqno, self.config.nak_delay, out.now()) {
                // The trace's reply is the NAK: the rest of what `send_nak` does.
                Hold::Nak(lo, hi) => {
                    let first = p.first_hole();
                    out.alarm(p.asked.asked(lo, hi, first, out.now(), self.config.sweep_interval));
                    out.count(super::LayerKind::Pt2pt, Counter::NakSent);
                }
                Hold::Timer(at) => out.alarm(at),
                Hold::Nothing => {}
            }
            out.alarm(out.now() + self.config.sweep_interval);
            return;
        }
        // The run behind it is released next (`fast_release`); the ack covers it.
        let next = p.expected + 1 + p.run();
        p.expected += 1;
        if next - p.ack_sent >= self.config.ack_batch {
            p.ack_sent = next;
            out.count(super::LayerKind::Pt2pt, Counter::AckSent);
        } else {
            out.alarm(out.now() + self.ack_delay());
        }
    }

    fn fast_expected(&self, origin: Rank, cast: bool) -> Option<Seqno> {
        (!cast).then(|| self.peers.get(usize::from(origin)).map(|p| p.expected)).flatten()
    }

    fn fast_inert(&self, trace: fast::Trace) -> Option<usize> {
        // Point-to-point reliability: only sends have work here.
        trace.is_cast().then_some(usize::MAX)
    }

    fn check_invariants(&self) {
        for p in &self.peers {
            assert!(p.ack_sent <= p.expected, "acked beyond what was received");
            assert_eq!(p.acked + p.unacked.len() as Seqno, p.sent, "unacked covers acked..sent");
            assert!(p.ooo.keys().all(|&s| s > p.expected && s - p.expected <= self.config.recv_window_max));
            p.ooo.check();
        }
    }

    fn buffered(&self) -> usize {
        self.peers.iter().map(|p| p.unacked.len() + p.ooo.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::harness::{Harness, Out};

    fn data(seqno: Seqno) -> Msg {
        Msg::new(vec![seqno as u8].into()).with(Header::Data { seqno })
    }

    fn sent_headers(out: &[Out]) -> Vec<Header> {
        out.iter()
            .filter_map(|o| match o {
                Out::Dn(Dn::Send { msg, .. }) => msg.clone().pop_as::<Header>(),
                _ => None,
            })
            .collect()
    }

    /// Sends ahead of a gap are kept up to twice the largest flow-control window in bytes, as
    /// `mnak`'s casts are: one that would pass it is dropped (`OutOfWindow`) on both paths and
    /// taken once it is next. Without flow control only the count bounds them.
    #[test]
    fn sends_ahead_of_a_gap_are_bounded_in_bytes() {
        const BIG: usize = 60 << 10;
        let big = |seqno: Seqno| Msg::new(vec![seqno as u8; BIG].into()).with(Header::Data { seqno });
        let fit = 2 * super::super::WINDOW_BYTES_MAX / (BIG as u64 + super::super::MESSAGE_CHARGE);
        let view = crate::testing::view(2);
        let mut h = Harness::new(Pt2pt::new(&Config::default(), &view, 1), 1);
        for seqno in 1..=fit + 1 {
            h.up(Up::Send { origin: 0, msg: big(seqno) });
        }
        assert_eq!((h.layer.peers[0].ooo.len() as u64, h.stats.drops(DropReason::OutOfWindow)), (fit, 1));
        let header = motet_wire::Header::from(Header::Data { seqno: fit + 1 });
        let up = fast::Up { origin: 0, cast: false, qos: crate::event::Qos::Reliable, header: &header, len: BIG };
        assert!(h.layer.fast_up(&up).is_none(), "the fast path leaves it to the layered one");
        h.layer.check_invariants();
        let out = h.up(Up::Send { origin: 0, msg: data(0) });
        assert_eq!(out.iter().filter(|o| matches!(o, Out::Up(Up::Send { .. }))).count() as u64, fit + 1);
        let out = h.up(Up::Send { origin: 0, msg: big(fit + 1) });
        assert!(out.iter().any(|o| matches!(o, Out::Up(Up::Send { origin: 0, .. }))), "{out:?}");
        assert_eq!(h.layer.peers[0].expected, fit + 2);
        h.layer.check_invariants();

        let view = crate::testing::view_of("Gmp+Sync+Suspect+Local", 2);
        let mut h = Harness::new(Pt2pt::new(&Config::default(), &view, 1), 1);
        for seqno in 1..=fit + 1 {
            h.up(Up::Send { origin: 0, msg: big(seqno) });
        }
        assert_eq!((h.layer.peers[0].ooo.len() as u64, h.stats.drops(DropReason::OutOfWindow)), (fit + 1, 0));
    }

    #[test]
    fn gap_is_naked_once_then_filled_in_order() {
        for nak_delay in [Duration(0), Config::default().nak_delay] {
            gap_is_naked_once_then_filled_in_order_with(Config { nak_delay, ..Config::default() });
        }
    }

    fn gap_is_naked_once_then_filled_in_order_with(config: Config) {
        let view = crate::testing::view(2);
        let mut h = Harness::new(Pt2pt::new(&config, &view, 1), 1);
        assert_eq!(h.up(Up::Send { origin: 0, msg: data(0) }).len(), 1);
        let out = h.up(Up::Send { origin: 0, msg: data(3) });
        if config.nak_delay.is_zero() {
            assert_eq!(sent_headers(&out), vec![Header::Nak { lo: 1, hi: 2 }]);
        } else {
            // Not at once: when the gap has lasted `nak_delay` (the sweep also acks what came).
            assert!(sent_headers(&out).is_empty());
            let due = h.alarm.expect("the NAK's alarm");
            assert_eq!(due, Instant::ZERO + config.nak_delay);
            let out = h.timer(due);
            assert_eq!(sent_headers(&out), vec![Header::Ack { next: 1 }, Header::Nak { lo: 1, hi: 2 }]);
        }
        // A later message does not NAK the same range again.
        let out = h.up(Up::Send { origin: 0, msg: data(4) });
        assert!(sent_headers(&out).is_empty());
        h.up(Up::Send { origin: 0, msg: data(1) });
        let out = h.up(Up::Send { origin: 0, msg: data(2) });
        let delivered: Vec<u8> = out
            .iter()
            .filter_map(|o| match o {
                Out::Up(Up::Send { msg, .. }) => Some(msg.payload.to_bytes()[0]),
                _ => None,
            })
            .collect();
        assert_eq!(delivered, vec![2, 3, 4]);
        assert_eq!(h.layer.buffered(), 0);
        // A duplicate is dropped and answered with an ack.
        let out = h.up(Up::Send { origin: 0, msg: data(1) });
        assert_eq!(sent_headers(&out), vec![Header::Ack { next: 5 }]);
        assert_eq!(h.stats.drops(DropReason::Duplicate), 1);
    }

    /// A gap that stays open is asked for again an eighth of a sweep after its NAK, then after
    /// twice as long each time up to a sweep, though sends arriving ahead of it keep firing the
    /// timer (before the fortieth session, at each of those firings: every 3 ms here).
    #[test]
    fn an_open_gap_is_asked_again_backing_off_to_the_sweep_interval() {
        let view = crate::testing::view(2);
        let config = Config::default();
        let mut h = Harness::new(Pt2pt::new(&config, &view, 1), 1);
        h.up(Up::Send { origin: 0, msg: data(0) });
        h.up(Up::Send { origin: 0, msg: data(3) });
        let mut asked = Vec::new();
        let mut next = 5;
        let until = h.now + Duration::from_millis(400);
        while let Some(at) = h.alarm.filter(|&at| at <= until) {
            if sent_headers(&h.timer(at)).contains(&Header::Nak { lo: 1, hi: 2 }) {
                asked.push(at);
            }
            h.now = at + Duration::from_millis(1);
            h.up(Up::Send { origin: 0, msg: data(next) });
            next += 2;
        }
        let gaps: Vec<u64> = asked.windows(2).map(|w| (w[1] - w[0]).as_millis()).collect();
        let interval = config.sweep_interval.as_millis();
        assert!(gaps.len() >= 6, "{gaps:?}");
        assert!(gaps.windows(2).all(|w| w[1] >= w[0]), "backing off: {gaps:?}");
        assert!((interval / 8..=interval / 8 + 3).contains(&gaps[0]), "{gaps:?}");
        assert!(gaps.iter().all(|&g| g <= interval + 3) && gaps[gaps.len() - 1] >= interval, "{gaps:?}");
    }

    /// The race the ack delay removes: with both timers at one sweep, the sender's sweep came
    /// first and retransmitted a send that had arrived.
    #[test]
    fn a_delayed_ack_reaches_the_sender_before_its_sweep_would_retransmit() {
        let view = crate::testing::view(2);
        let config = Config::default();
        let mut sender = Harness::new(Pt2pt::new(&config, &view, 0), 0);
        let mut receiver = Harness::new(Pt2pt::new(&config, &view, 1), 1);
        let out = sender.dn(Dn::Send { dest: 1, msg: Msg::new(b"a".as_slice().into()) });
        let [Out::Dn(Dn::Send { msg, .. })] = &out[..] else { panic!("{out:?}") };
        let sweep = sender.alarm.expect("the sender's sweep");
        receiver.now = Instant::ZERO + Duration::from_millis(1);
        receiver.up(Up::Send { origin: 0, msg: msg.clone() });
        let ack_at = receiver.alarm.expect("the receiver's delayed ack");
        assert!(ack_at < sweep, "the ack is due at {ack_at:?}, the sender's sweep at {sweep:?}");
        let acks = receiver.timer(ack_at);
        let [Out::Dn(Dn::Send { msg: ack, .. })] = &acks[..] else { panic!("{acks:?}") };
        assert_eq!(sent_headers(&acks), vec![Header::Ack { next: 1 }]);
        sender.now = ack_at + Duration::from_millis(1);
        sender.up(Up::Send { origin: 1, msg: ack.clone() });
        assert!(sent_headers(&sender.timer(sweep)).is_empty(), "nothing to retransmit");
        assert_eq!(sender.stats.counter(Counter::Retransmit), 0);
    }

    /// A flush's `Block` waits for the acknowledgements, and a `Cut` that comes down meanwhile
    /// waits behind it (`mflow`'s test says why).
    #[test]
    fn a_cut_waits_behind_a_held_block() {
        let view = crate::testing::view(2);
        let mut h = Harness::new(Pt2pt::new(&Config::default(), &view, 0), 0);
        h.dn(Dn::Send { dest: 1, msg: Msg::new(b"a".as_slice().into()) });
        assert!(h.dn(Dn::Block).is_empty(), "held until acknowledged");
        assert!(h.dn(Dn::Cut(vec![0, 0].into())).is_empty(), "held behind the block");
        let out = h.up(Up::Send { origin: 1, msg: Msg::default().with(Header::Ack { next: 1 }) });
        assert!(matches!(&out[..], [Out::Dn(Dn::Block), Out::Dn(Dn::Cut(_))]), "{out:?}");
    }

    #[test]
    fn unacked_messages_are_retransmitted_by_the_sweep_until_acked() {
        let view = crate::testing::view(2);
        let config = Config::default();
        let mut h = Harness::new(Pt2pt::new(&config, &view, 0), 0);
        h.dn(Dn::Send { dest: 1, msg: Msg::new(b"a".as_slice().into()) });
        h.dn(Dn::Send { dest: 1, msg: Msg::new(b"b".as_slice().into()) });
        let at = h.alarm.expect("a sweep is armed");
        let out = h.timer(at);
        // Under `Retrans`, so never compressed (`ConnId`: a compressed datagram under a key
        // two stacks share at the receiving node is dropped there).
        assert_eq!(sent_headers(&out), vec![Header::Retrans { seqno: 0 }, Header::Retrans { seqno: 1 }]);
        h.up(Up::Send { origin: 1, msg: Msg::default().with(Header::Ack { next: 1 }) });
        assert_eq!(h.layer.buffered(), 1);
        // A NAK for an acknowledged message retransmits only what is still held.
        let out = h.up(Up::Send { origin: 1, msg: Msg::default().with(Header::Nak { lo: 0, hi: 9 }) });
        assert_eq!(sent_headers(&out), vec![Header::Retrans { seqno: 1 }]);
        h.up(Up::Send { origin: 1, msg: Msg::default().with(Header::Ack { next: 2 }) });
        assert_eq!(h.layer.buffered(), 0);
        let out = h.timer(h.now + config.sweep_interval);
        assert!(sent_headers(&out).is_empty());
        assert_eq!(h.alarm, None, "the sweep stops when nothing is outstanding");
    }

    /// A peer that repeats a NAK gets what its budget allows (`retransmit_rate`), not
    /// `retransmit_max` sends each time; the sweep's own retransmissions of unacknowledged sends
    /// are not taken from it.
    #[test]
    fn a_repeated_nak_is_answered_within_the_peers_budget() {
        let view = crate::testing::view(2);
        let config = Config { retransmit_max: 3, retransmit_rate: 2_000, ..Config::default() };
        assert_eq!(super::super::gaps::burst(2_000, config.sweep_interval, 3), 100, "50 ms' worth");
        let mut h = Harness::new(Pt2pt::new(&config, &view, 0), 0);
        for _ in 0..100 {
            h.dn(Dn::Send { dest: 1, msg: Msg::new(b"a".as_slice().into()) });
        }
        let nak = || Up::Send { origin: 1, msg: Msg::default().with(Header::Nak { lo: 0, hi: 99 }) };
        let got: Vec<usize> = (0..35).map(|_| sent_headers(&h.up(nak())).len()).collect();
        assert_eq!(got[..33], [3; 33]);
        assert_eq!(got[33..], [1, 0], "the burst, then nothing at the same instant");
        assert_eq!(h.stats.drops(DropReason::OverBudget), 2);
        let at = h.alarm.expect("a sweep is armed");
        let resent = sent_headers(&h.timer(at)).iter().filter(|h| matches!(h, Header::Retrans { .. })).count();
        assert_eq!(resent, 3, "the sweep resends what waited an interval, budget or not");
        h.now = at + Duration::from_millis(10);
        assert_eq!(sent_headers(&h.up(nak())).len(), 3, "refilled since");
    }

    /// A peer that acknowledges nothing of what waits for it within `ack_timeout` is suspected,
    /// once; one whose acknowledgements come (each one starts the wait again) is not. Before, it
    /// was only retransmitted to, and the next flush waited here for it for good.
    #[test]
    fn a_peer_that_never_acknowledges_is_suspected_after_the_ack_timeout() {
        let view = crate::testing::view(3);
        let config = Config::default();
        let mut h = Harness::new(Pt2pt::new(&config, &view, 0), 0);
        let suspected = crate::layer::harness::suspected;
        let start = h.now;
        for dest in [1, 2] {
            h.dn(Dn::Send { dest, msg: Msg::new(b"a".as_slice().into()) });
        }
        // Peer 2 acknowledges halfway, then a new send waits from then; peer 1 never does.
        let mut all = Vec::new();
        while h.now < start + config.ack_timeout + config.ack_timeout {
            let at = h.alarm.expect("the sweep runs while sends wait");
            if at >= start + Duration::from_millis(config.ack_timeout.as_millis() / 2) && h.layer.peers[2].acked == 0 {
                h.up(Up::Send { origin: 2, msg: Msg::default().with(Header::Ack { next: 1 }) });
                h.dn(Dn::Send { dest: 2, msg: Msg::new(b"b".as_slice().into()) });
            }
            let out = h.timer(at);
            all.extend(suspected(&out));
        }
        assert_eq!(
            all,
            vec![vec![1], vec![2]],
            "1 at its timeout, 2 a timeout after its last acknowledgement, once each"
        );
        assert_eq!(h.stats.counter(Counter::AckOverdue), 2);

        // A sweep that comes long after its time (this process was paused): the pause counts
        // against no peer, and a peer that acknowledges within the timeout after it is kept.
        let mut h = Harness::new(Pt2pt::new(&config, &view, 0), 0);
        h.dn(Dn::Send { dest: 1, msg: Msg::new(b"a".as_slice().into()) });
        let at = h.alarm.expect("a sweep") + config.ack_timeout + config.ack_timeout;
        assert!(suspected(&h.timer(at)).is_empty(), "suspected for this process's own pause");
        h.up(Up::Send { origin: 1, msg: Msg::default().with(Header::Ack { next: 1 }) });
        assert_eq!(h.stats.counter(Counter::AckOverdue), 0);
    }
}
