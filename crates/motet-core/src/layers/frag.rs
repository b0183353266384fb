//! `frag`: fragmentation and reassembly of messages larger than a datagram (thesis Fig 2.3, §5.6;
//! Ensemble `frag`).
//!
//! Provides: [`Service::Fragmentation`]. Requires below: [`Service::ReliableCast`] and
//! [`Service::ReliableSend`], because reassembly relies on fragments of one origin arriving once
//! and in order. Header: `Whole` (the common case, one byte before compression) or
//! `Part { index, count }`. The headers of the layers above travel on the first fragment only.
//! Unreliable casts are never fragmented.
//!
//! A member that fails mid-message leaves a partial reassembly behind. The partial is kept while
//! the survivors may still relay the rest (`mnak` repairs a failed origin's casts from any
//! holder); once stability shows that every live member holds the same prefix of the failed
//! origin's casts (`stable == max`), nothing more can come, so the partial is discarded and
//! everything later from that origin is dropped as an orphan. Delivery from a failed origin thus
//! stays a FIFO prefix. In a stack with a view-change flush (`sync`) this is not done: the flush's
//! agreed cut decides what of a failed member is delivered, identically at every survivor, and an
//! unfinished message simply ends with the view's stack.

use crate::event::{Counter, Dn, DropReason, Msg, Up};
use crate::fast::{self, DnStep, Down, UpStep};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::view::{RankSet, ViewState};
use crate::Rank;
use motet_wire::hdr::frag::Header;
use motet_wire::{HeaderStack, Payload};

/// `frag` parameters.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Largest payload carried by one datagram, in bytes; larger messages are split. Default 1024,
    /// which with headers keeps datagrams under a 1500-byte Ethernet MTU.
    pub frag_size: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config { frag_size: 1024 }
    }
}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "frag",
    summary: "splits messages larger than frag_size and reassembles them",
    provides: &[Service::Fragmentation],
    requires_below: &[Service::ReliableCast, Service::ReliableSend],
    requires_above: &[],
    above_every: &[],
    below_every: &[],
};

/// A message being reassembled.
#[derive(Debug, PartialEq)]
struct Partial {
    hdrs: HeaderStack,
    payload: Payload,
    next: u32,
    count: u32,
}

/// `frag` state.
#[derive(Debug, PartialEq)]
pub struct Frag {
    frag_size: usize,
    count_max: u32,
    /// Per origin rank: the cast being reassembled. Boxed: a reassembly under way is rare, and an
    /// empty slot then costs 8 bytes, not 72 (at 64 members, about 8 KB less per stack).
    casts: Vec<Option<Box<Partial>>>,
    /// Per origin rank: the send being reassembled.
    sends: Vec<Option<Box<Partial>>>,
    /// Ranks reported failed.
    failed: RankSet,
    /// Failed origins whose unfinished message was discarded: nothing more is accepted from them.
    cut: RankSet,
    /// Whether to discard a failed origin's unfinished casts once stability settles (only in
    /// stacks without a flush, which would otherwise decide differently at different members).
    orphans_on_stability: bool,
}

impl Frag {
    /// A `frag` for `view`.
    pub fn new(config: &Config, view: &ViewState, _rank: Rank) -> Frag {
        let fragments = view.params.appl.message_size_max.div_ceil(config.frag_size.max(1)).max(2);
        Frag {
            frag_size: config.frag_size.max(1),
            count_max: u32::try_from(fragments).unwrap_or(u32::MAX),
            casts: (0..view.len()).map(|_| None).collect(),
            sends: (0..view.len()).map(|_| None).collect(),
            failed: RankSet::new(),
            cut: RankSet::new(),
            orphans_on_stability: !view.stack.layers().contains(&super::LayerKind::Sync),
        }
    }

    /// Splits `msg` into fragments and hands each to `emit`.
    fn split(&self, msg: Msg, out: &mut Outbox<'_>, mut emit: impl FnMut(Msg, &mut Outbox<'_>)) {
        if msg.payload.len() <= self.frag_size {
            emit(msg.with(Header::Whole), out);
            return;
        }
        out.count(super::LayerKind::Frag, Counter::Fragmented);
        let len = msg.payload.len();
        let count = len.div_ceil(self.frag_size) as u32;
        let mut hdrs = Some(msg.hdrs);
        for index in 0..count {
            let start = index as usize * self.frag_size;
            let part = msg.payload.slice(start, self.frag_size.min(len - start));
            let fragment = Msg { hdrs: hdrs.take().unwrap_or_default(), payload: part };
            emit(fragment.with(Header::Part { index, count }), out);
        }
    }

    /// Adds a fragment; returns the whole message when it is complete. `(count_max, frag_size)`:
    /// the most fragments a message may have and the largest fragment (the view's parameters,
    /// the same at every member); a fragment past either is no member's, and dropped, so a
    /// partial message holds at most the largest message's bytes.
    fn reassemble(
        slot: &mut Option<Box<Partial>>,
        (count_max, frag_size): (u32, usize),
        index: u32,
        count: u32,
        msg: Msg,
        out: &mut Outbox<'_>,
    ) -> Option<Msg> {
        if count < 2 || count > count_max || index >= count || msg.payload.len() > frag_size {
            out.drop_input(super::LayerKind::Frag, DropReason::FragViolation);
            return None;
        }
        if index == 0 {
            if slot.is_some() {
                out.drop_input(super::LayerKind::Frag, DropReason::FragViolation);
            }
            *slot = Some(Box::new(Partial { hdrs: msg.hdrs, payload: msg.payload, next: 1, count }));
            return None;
        }
        match slot {
            Some(partial) if partial.next == index && partial.count == count => {
                partial.payload.append(msg.payload);
                partial.next += 1;
                if partial.next < count {
                    return None;
                }
                let partial = slot.take().expect("checked above");
                Some(Msg { hdrs: partial.hdrs, payload: partial.payload })
            }
            _ => {
                *slot = None;
                out.drop_input(super::LayerKind::Frag, DropReason::FragViolation);
                None
            }
        }
    }
}

impl Layer for Frag {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Cast { origin, .. } | Up::Send { origin, .. } if self.cut.contains(origin) => {
                out.drop_input(super::LayerKind::Frag, DropReason::Orphan);
            }
            Up::Cast { origin, mut msg, qos } => match msg.pop_as::<Header>() {
                Some(Header::Whole) => out.up(Up::Cast { origin, msg, qos }),
                // Unreliable casts are never fragmented: a part on one would wipe (or join) a
                // reliable message's reassembly.
                Some(Header::Part { .. }) if qos == crate::event::Qos::Unreliable => {
                    out.drop_input(super::LayerKind::Frag, DropReason::HeaderMismatch)
                }
                Some(Header::Part { index, count }) => {
                    let slot = &mut self.casts[usize::from(origin)];
                    if let Some(msg) = Frag::reassemble(slot, (self.count_max, self.frag_size), index, count, msg, out)
                    {
                        out.up(Up::Cast { origin, msg, qos });
                    }
                }
                None => out.drop_input(super::LayerKind::Frag, DropReason::HeaderMismatch),
            },
            Up::Send { origin, mut msg } => match msg.pop_as::<Header>() {
                Some(Header::Whole) => out.up(Up::Send { origin, msg }),
                Some(Header::Part { index, count }) => {
                    let slot = &mut self.sends[usize::from(origin)];
                    if let Some(msg) = Frag::reassemble(slot, (self.count_max, self.frag_size), index, count, msg, out)
                    {
                        out.up(Up::Send { origin, msg });
                    }
                }
                None => out.drop_input(super::LayerKind::Frag, DropReason::HeaderMismatch),
            },
            other => out.up(other),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        match ev {
            Dn::Cast { msg, qos: qos @ crate::event::Qos::Unreliable } => {
                out.dn(Dn::Cast { msg: msg.with(Header::Whole), qos })
            }
            Dn::Cast { msg, qos } => self.split(msg, out, |msg, out| out.dn(Dn::Cast { msg, qos })),
            Dn::Send { dest, msg } => self.split(msg, out, |msg, out| out.dn(Dn::Send { dest, msg })),
            Dn::Fail(ranks) => {
                // Sends are not relayed by others (`bottom` drops what the failed member still
                // sends), so an unfinished send can never complete.
                for rank in ranks.iter() {
                    if self.sends.get_mut(usize::from(rank)).and_then(Option::take).is_some() {
                        out.drop_input(super::LayerKind::Frag, DropReason::Orphan);
                    }
                }
                self.failed.union_with(&ranks);
                out.dn(Dn::Fail(ranks));
            }
            Dn::Stable(stability) if self.orphans_on_stability => {
                let failed: Vec<Rank> = self.failed.iter().filter(|&r| usize::from(r) < self.casts.len()).collect();
                for origin in failed {
                    let o = usize::from(origin);
                    if stability.stable[o] == stability.max[o] && self.casts[o].take().is_some() {
                        self.cut.insert(origin);
                        out.drop_input(super::LayerKind::Frag, DropReason::Orphan);
                    }
                }
                out.dn(Dn::Stable(stability));
            }
            other => out.dn(other),
        }
    }

    // Fast path: a message that fits one fragment (`Whole`), from an origin not cut off; and a
    // larger one, split going down (a one-to-many trace) and reassembled going up: each part but
    // the last is kept here (`absorb`), the last completes the message (`join`), which goes on up.
    fn fast_dn(&self, down: &Down) -> Option<DnStep> {
        if down.qos == crate::event::Qos::Unreliable || down.len <= self.frag_size {
            return DnStep::pass(Header::Whole, down);
        }
        let count = u32::try_from(down.len.div_ceil(self.frag_size)).ok()?;
        Some(DnStep { parts: count, ..DnStep::to(Header::Part { index: 0, count }, down.qos) })
    }

    fn fast_dn_apply(&mut self, down: &Down, out: &mut Outbox<'_>) {
        if down.qos != crate::event::Qos::Unreliable && down.len > self.frag_size {
            out.count(super::LayerKind::Frag, Counter::Fragmented);
        }
    }

    fn fast_split(&self, msg: &Msg, index: u32) -> Msg {
        // As `split`: the headers from above travel on the first part only.
        let len = msg.payload.len();
        let count = len.div_ceil(self.frag_size) as u32;
        let start = index as usize * self.frag_size;
        let hdrs = if index == 0 { msg.hdrs.clone() } else { HeaderStack::default() };
        let part = msg.payload.slice(start, self.frag_size.min(len - start));
        Msg { hdrs, payload: part }.with(Header::Part { index, count })
    }

    fn fast_up(&self, up: &fast::Up<'_>) -> Option<UpStep> {
        if self.cut.contains(up.origin) {
            return None;
        }
        let motet_wire::Header::Frag(header) = up.header else { return None };
        let Header::Part { index, count } = *header else { return UpStep::pass(up) };
        if up.qos == crate::event::Qos::Unreliable {
            return None; // dropped on the layered path
        }
        // The parts `reassemble` accepts without a violation: a first part with nothing pending,
        // or the next part of the message pending.
        let slot = if up.cast { &self.casts } else { &self.sends }.get(usize::from(up.origin))?;
        if count < 2 || count > self.count_max || index >= count || up.len > self.frag_size {
            return None;
        }
        let accepted = match slot {
            None => index == 0,
            Some(partial) => index != 0 && partial.next == index && partial.count == count,
        };
        let last = index + 1 == count;
        accepted.then_some(UpStep { absorb: !last, join: last, ..UpStep::to(up.qos) })
    }

    fn fast_up_apply(&mut self, up: &fast::Up<'_>, msg: &Msg, _out: &mut Outbox<'_>) {
        let motet_wire::Header::Frag(Header::Part { index, count }) = *up.header else { return };
        let slot = &mut if up.cast { &mut self.casts } else { &mut self.sends }[usize::from(up.origin)];
        match slot {
            Some(partial) => {
                partial.payload.append(msg.payload.clone());
                partial.next += 1;
            }
            None => {
                *slot = Some(Box::new(Partial { hdrs: msg.hdrs.clone(), payload: msg.payload.clone(), next: 1, count }))
            }
        }
        debug_assert!(index + 1 < count, "the last part joins");
    }

    fn fast_join(&mut self, up: &fast::Up<'_>, msg: Msg, _out: &mut Outbox<'_>) -> Msg {
        let slot = &mut if up.cast { &mut self.casts } else { &mut self.sends }[usize::from(up.origin)];
        let mut partial = slot.take().expect("the condition saw the message pending");
        partial.payload.append(msg.payload);
        Msg { hdrs: partial.hdrs, payload: partial.payload }
    }

    fn fast_data(&self, header: &motet_wire::Header) -> bool {
        matches!(header, motet_wire::Header::Frag(Header::Part { .. }))
    }

    fn fast_inert(&self, trace: fast::Trace) -> Option<usize> {
        match trace.is_down() {
            true => Some(self.frag_size),
            false => self.cut.is_empty().then_some(usize::MAX),
        }
    }

    fn check_invariants(&self) {
        for partial in self.casts.iter().chain(&self.sends).flatten() {
            assert!(partial.next >= 1 && partial.next < partial.count && partial.count <= self.count_max);
        }
    }

    fn buffered(&self) -> usize {
        self.casts.iter().chain(&self.sends).flatten().map(|p| p.next as usize).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Qos;
    use crate::layer::harness::{Harness, Out};

    /// A part on an unreliable cast is dropped: unreliable casts are never fragmented, and one
    /// taken wiped the reassembly of a reliable message under way.
    #[test]
    fn a_part_on_an_unreliable_cast_is_dropped() {
        let view = crate::testing::view(2);
        let mut sender = Harness::new(Frag::new(&Config { frag_size: 4 }, &view, 0), 0);
        let mut receiver = Harness::new(Frag::new(&Config { frag_size: 4 }, &view, 1), 1);
        let parts: Vec<Msg> = sender
            .dn(Dn::Cast { msg: Msg::new(b"0123456789".as_slice().into()), qos: Qos::Reliable })
            .into_iter()
            .map(|o| match o {
                Out::Dn(Dn::Cast { msg, .. }) => msg,
                other => panic!("{other:?}"),
            })
            .collect();
        assert!(receiver.up(Up::Cast { origin: 0, msg: parts[0].clone(), qos: Qos::Reliable }).is_empty());
        let forged = Msg::new(b"xxxx".as_slice().into()).with(Header::Part { index: 0, count: 3 });
        assert!(receiver.up(Up::Cast { origin: 0, msg: forged, qos: Qos::Unreliable }).is_empty());
        assert_eq!(receiver.stats.drops(DropReason::HeaderMismatch), 1);
        assert!(receiver.up(Up::Cast { origin: 0, msg: parts[1].clone(), qos: Qos::Reliable }).is_empty());
        let out = receiver.up(Up::Cast { origin: 0, msg: parts[2].clone(), qos: Qos::Reliable });
        assert!(matches!(&out[..], [Out::Up(Up::Cast { msg, .. })] if &msg.payload.to_bytes()[..] == b"0123456789"));
    }

    #[test]
    fn large_casts_are_split_and_reassembled_without_copy() {
        let view = crate::testing::view(2);
        let mut sender = Harness::new(Frag::new(&Config { frag_size: 4 }, &view, 0), 0);
        let mut receiver = Harness::new(Frag::new(&Config { frag_size: 4 }, &view, 1), 1);
        let mut msg = Msg::new(b"0123456789".as_slice().into());
        msg.push(motet_wire::hdr::appl::Header::Data);
        let fragments = sender.dn(Dn::Cast { msg, qos: Qos::Reliable });
        assert_eq!(fragments.len(), 3);
        let mut delivered = Vec::new();
        for fragment in fragments {
            let Out::Dn(Dn::Cast { msg, .. }) = fragment else { panic!() };
            delivered.extend(receiver.up(Up::Cast { origin: 0, msg, qos: Qos::Reliable }));
        }
        match &delivered[..] {
            [Out::Up(Up::Cast { msg, .. })] => {
                assert_eq!(&msg.payload.to_bytes()[..], b"0123456789");
                assert_eq!(msg.hdrs.len(), 1, "the headers from above arrive once");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(receiver.layer.buffered(), 0);
    }

    #[test]
    fn out_of_order_fragments_are_dropped_and_counted() {
        let view = crate::testing::view(2);
        let mut h = Harness::new(Frag::new(&Config { frag_size: 4 }, &view, 1), 1);
        let part = |index, count| Msg::default().with(Header::Part { index, count });
        assert!(h.up(Up::Send { origin: 0, msg: part(1, 3) }).is_empty());
        assert!(h.up(Up::Send { origin: 0, msg: part(0, 1) }).is_empty());
        assert!(h.up(Up::Send { origin: 0, msg: part(0, u32::MAX) }).is_empty());
        assert_eq!(h.stats.drops(DropReason::FragViolation), 3);
        // A fragment larger than the view's fragments: no member's, dropped, nothing held.
        let big = Msg::new(vec![0u8; 5].into()).with(Header::Part { index: 0, count: 2 });
        assert!(h.up(Up::Send { origin: 0, msg: big }).is_empty());
        assert_eq!(h.stats.drops(DropReason::FragViolation), 4);
        assert_eq!(h.layer.buffered(), 0);
        let fits = Msg::new(vec![0u8; 4].into()).with(Header::Part { index: 0, count: 2 });
        h.up(Up::Send { origin: 0, msg: fits });
        assert_eq!(h.stats.drops(DropReason::FragViolation), 4);
    }
}
