//! The yardstick: the `fifo` stack's common path written by hand as one monolithic routine,
//! with no layers, no events and no generic composition (the "HAND" column of Ensemble's SOSP'99
//! Table 2). It does the work the stack's common path does, so that the bypass can be measured
//! against the best a programmer could write for this one stack:
//!
//! - sender: flow-control window check (`mflow`), sequence number and retransmission buffer
//!   (`mnak`), loop-back delivery to itself (`local`), 8-byte compressed head (the same encoder);
//! - receiver: decode, connection and origin checks (`bottom`), next-expected check and receive
//!   buffer (`mnak`), delivery to the application queue (`appl`), and every `CREDIT_BATCH` bytes
//!   (each cast counted as `mflow` counts it) a credit report back to the origin (`mflow`'s
//!   reply);
//! - stability: buffers freed up to what every member has received (`stable`), which the
//!   driver runs every few messages, as the benchmark's timers do for the stacks.
//!
//! It is not a protocol: no NAKs, no retransmission, no view changes. Those are off the common
//! path, in the stack as here.

use bytes::Bytes;
use motet_core::layers::MESSAGE_CHARGE;
use motet_core::{DatagramHead, Payload, Rank};
use motet_wire::datagram::{self, Compressed};
use motet_wire::{ConnId, Mux};
use std::collections::VecDeque;

/// Bytes in flight a sender may have before it waits for credit, each cast counted as its payload
/// and `MESSAGE_CHARGE` (`mflow`'s default window; a test below keeps the two equal).
const WINDOW: u64 = 512 * 1024;
/// Bytes a receiver takes before it reports credit (`mflow` reports every half window).
const CREDIT_BATCH: u64 = WINDOW / 2;
/// A credit report carries the bytes consumed in units of this, in the compressed head's 24-bit
/// sequence-number field: 2^15 units are 2 MiB, more than a window, so the count expands right.
const CREDIT_UNIT: u64 = MESSAGE_CHARGE;

/// What a cast of `payload` costs against the window (as `mflow` counts it).
fn cost(payload: &Payload) -> u64 {
    payload.len() as u64 + MESSAGE_CHARGE
}

/// One member of a hand-written `fifo` group.
pub(crate) struct Member {
    rank: Rank,
    conn: ConnId,
    /// Own casts: the next sequence number, the bytes sent (as the window counts them), and those
    /// not yet stable (for retransmission).
    next: u64,
    sent_bytes: u64,
    sent: VecDeque<Payload>,
    /// Per origin: the next expected sequence number, and casts kept until stable.
    expected: Vec<u64>,
    kept: Vec<VecDeque<Payload>>,
    kept_lo: Vec<u64>,
    /// Per origin: bytes received, and as many reported in the last credit report.
    consumed: Vec<u64>,
    reported: Vec<u64>,
    /// Credit granted by each receiver (bytes it has consumed, in whole `CREDIT_UNIT`s).
    credit: Vec<u64>,
    /// Delivered, for the application to read.
    pub(crate) delivered: VecDeque<(Rank, Payload)>,
    head: Vec<u8>,
}

/// A datagram leaving a member: a cast to all, or a credit report to one.
pub(crate) struct Out {
    pub(crate) to: Option<Rank>,
    pub(crate) head: DatagramHead,
    pub(crate) payload: Payload,
}

impl Member {
    pub(crate) fn new(rank: Rank, members: usize) -> Member {
        Member {
            rank,
            conn: ConnId(0x4841_4e44),
            next: 0,
            sent_bytes: 0,
            sent: VecDeque::new(),
            expected: vec![0; members],
            kept: vec![VecDeque::new(); members],
            kept_lo: vec![0; members],
            consumed: vec![0; members],
            reported: vec![0; members],
            credit: vec![0; members],
            delivered: VecDeque::new(),
            head: Vec::with_capacity(16),
        }
    }

    /// A cast from the application: `None` when the window is full.
    #[inline(never)] // counted by name (`motet bench stack`, the breakdown)
    pub(crate) fn cast(&mut self, payload: Payload) -> Option<Out> {
        let slowest =
            self.credit.iter().enumerate().filter(|&(r, _)| r != usize::from(self.rank)).map(|(_, c)| *c).min();
        if slowest.is_some_and(|c| self.sent_bytes - c >= WINDOW) {
            return None;
        }
        let seqno = self.next;
        self.next += 1;
        self.sent_bytes += cost(&payload);
        self.sent.push_back(payload.clone());
        self.delivered.push_back((self.rank, payload.clone()));
        self.head.clear();
        let head = Compressed { conn: self.conn, mux: Mux::Cast, origin: self.rank, seqno };
        datagram::encode_compressed(&head, &mut self.head)?;
        Some(Out { to: None, head: DatagramHead::from_slice(&self.head), payload })
    }

    /// A datagram from the network: a cast to deliver, or a credit report.
    #[inline(never)] // counted by name (`motet bench stack`, the breakdown)
    pub(crate) fn receive(&mut self, datagram: Bytes) -> Option<Out> {
        let (head, payload) = datagram::decode_compressed(datagram).ok()?;
        let origin = usize::from(head.origin);
        let key = if head.cast { self.conn.key() } else { datagram::send_conn(self.conn, self.rank) };
        if head.key != key || origin >= self.expected.len() || head.origin == self.rank {
            return None;
        }
        if !head.cast {
            // A credit report: the count travels in the sequence-number field, in units.
            let units = datagram::expand_seqno(head.seqno(self.conn), self.credit[origin] / CREDIT_UNIT);
            self.credit[origin] = units * CREDIT_UNIT;
            return None;
        }
        let seqno = datagram::expand_seqno(head.seqno(self.conn), self.expected[origin]);
        if seqno != self.expected[origin] {
            return None; // out of order: the layered path's business
        }
        self.expected[origin] += 1;
        self.consumed[origin] += cost(&payload);
        self.kept[origin].push_back(payload.clone());
        self.delivered.push_back((head.origin, payload));
        if self.consumed[origin] - self.reported[origin] < CREDIT_BATCH {
            return None;
        }
        self.reported[origin] = self.consumed[origin];
        self.head.clear();
        let seqno = self.consumed[origin] / CREDIT_UNIT;
        let report = Compressed { conn: self.conn, mux: Mux::Send { dest: head.origin }, origin: self.rank, seqno };
        datagram::encode_compressed(&report, &mut self.head)?;
        Some(Out { to: Some(head.origin), head: DatagramHead::from_slice(&self.head), payload: Payload::new() })
    }

    /// Frees what every member holds: `stable[o]` casts of each origin `o`.
    #[inline(never)] // counted by name (`motet bench stack`, the breakdown)
    pub(crate) fn stable(&mut self, stable: &[u64]) {
        let own = usize::from(self.rank);
        let freed = stable[own].saturating_sub(self.next - self.sent.len() as u64);
        self.sent.drain(..(freed as usize).min(self.sent.len()));
        for (o, kept) in self.kept.iter_mut().enumerate() {
            let freed = stable[o].saturating_sub(self.kept_lo[o]).min(kept.len() as u64);
            kept.drain(..freed as usize);
            self.kept_lo[o] += freed;
        }
    }

    /// Per origin, what this member has received (its own casts: all it sent).
    pub(crate) fn received(&self) -> impl Iterator<Item = u64> + '_ {
        let own = usize::from(self.rank);
        self.expected.iter().enumerate().map(move |(o, &e)| if o == own { self.next } else { e })
    }
}

/// A hand-written `fifo` group of `members`, driven like the benchmark drives the stacks.
pub(crate) struct Group {
    pub(crate) members: Vec<Member>,
    stable: Vec<u64>,
    /// Messages delivered so far, all members together.
    pub(crate) delivered: u64,
    /// Where datagrams are put together (the stacks' network does the same, as the runtime's
    /// receive path).
    chunks: motet_wire::Chunks,
}

impl Group {
    pub(crate) fn new(members: usize) -> Group {
        Group {
            members: (0..members).map(|r| Member::new(r as Rank, members)).collect(),
            stable: vec![0; members],
            delivered: 0,
            chunks: motet_wire::Chunks::default(),
        }
    }

    /// One cast from `sender`, carried to every other member, and every delivery read; credit
    /// reports are carried back. Returns false when the window was full.
    pub(crate) fn cast(&mut self, sender: usize, payload: Payload) -> bool {
        let Some(out) = self.members[sender].cast(payload) else { return false };
        let datagram = self.chunks.datagram(&out.head, &out.payload);
        for to in 0..self.members.len() {
            if to == sender {
                continue;
            }
            if let Some(reply) = self.members[to].receive(datagram.clone()) {
                let dest = usize::from(reply.to.expect("a credit report has a destination"));
                let reply = self.chunks.datagram(&reply.head, &reply.payload);
                self.members[dest].receive(reply);
            }
        }
        for member in &mut self.members {
            while member.delivered.pop_front().is_some() {
                self.delivered += 1;
            }
        }
        true
    }

    /// The stability round the stacks' timers run: the minimum received, then buffers freed.
    pub(crate) fn stabilize(&mut self) {
        self.stable.iter_mut().for_each(|s| *s = u64::MAX);
        for member in &self.members {
            for (s, r) in self.stable.iter_mut().zip(member.received()) {
                *s = (*s).min(r);
            }
        }
        for member in &mut self.members {
            member.stable(&self.stable);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cast_is_delivered_everywhere_and_stability_frees_the_buffers() {
        let mut group = Group::new(3);
        let payload = Payload::from(vec![1u8; 4]);
        // More than a window's worth: the credit that comes back keeps it open.
        const CASTS: u64 = 20_000;
        const { assert!(CASTS * (4 + MESSAGE_CHARGE) > 2 * WINDOW) };
        for k in 0..CASTS {
            assert!(group.cast(2, payload.clone()), "cast {k} within the window");
            if k % 64 == 63 {
                group.stabilize();
            }
        }
        assert_eq!(group.delivered, 3 * CASTS);
        group.stabilize();
        assert!(group.members.iter().all(|m| m.sent.is_empty() && m.kept.iter().all(VecDeque::is_empty)));
        assert_eq!(group.members[0].credit[2], 0, "credit is granted to the sender, by the receivers");
        let sent = group.members[2].sent_bytes;
        assert_eq!(sent, CASTS * (4 + MESSAGE_CHARGE));
        assert!(group.members[2].credit[0] >= sent - CREDIT_BATCH - CREDIT_UNIT, "reported every half window");
    }

    #[test]
    fn without_credit_the_window_closes() {
        let mut a = Member::new(0, 2);
        let casts = WINDOW / MESSAGE_CHARGE;
        let sent = (0..casts + 10).take_while(|_| a.cast(Payload::new()).is_some()).count();
        assert_eq!(sent as u64, casts, "empty casts, each costing the charge");
        assert_eq!(
            WINDOW,
            motet_core::StackConfig::default().mflow.window_bytes,
            "the yardstick does the stack's work"
        );
    }
}
