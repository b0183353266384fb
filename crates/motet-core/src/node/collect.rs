//! Output collection: after an input, a stack's outputs move into the node's queues, its
//! datagrams encoded and their destinations resolved, its alarm filed; what leaves its top builds
//! the stack of a new view or removes one that exits.

use super::{live_mut, DatagramHead, Destination, Entry, Node, Outgoing, StackId, HEAD_INLINE};
use crate::event::{Action, AppEvent, DropReason};
use crate::layer::Stats;
use crate::stack::TopOutput;
use crate::view::Address;
use motet_wire::{datagram, Mux, DATAGRAM_SIZE_MAX};
use std::collections::BTreeMap;
use std::sync::Arc;

impl Node {
    /// After an input to stack `id`: its outputs moved into the node's queues now, or, while a
    /// batch of datagrams runs ([`Node::handle_datagrams`]), once the batch moves on to another
    /// stack or ends (unless it left its view: then at once).
    #[inline]
    pub(super) fn collect(&mut self, id: StackId) {
        let Some(batched) = &mut self.batched else { return self.collect_now(id) };
        let previous = batched.replace(id);
        let leaving = self.live(id).is_some_and(|e| e.stack.has_top_output());
        match previous {
            Some(previous) if previous != id => self.collect_now(previous),
            _ => {}
        }
        if leaving {
            self.batched = Some(None);
            self.collect_now(id);
        }
    }

    /// Moves stack `id`'s outputs into the node's queues, encoding datagrams; builds the stack of
    /// a new view (thesis §2.3.4) and removes a stack that exits.
    pub(super) fn collect_now(&mut self, id: StackId) {
        let Some(entry) = live_mut(&mut self.stacks, id) else { return };
        if entry.stack.settle_due() && !entry.unsettled {
            entry.unsettled = true;
            self.unsettled.push(id);
        }
        while let Some(transmit) = entry.stack.poll_transmit() {
            let out = outgoing(entry, id, transmit, &mut self.head_buf, &mut self.stats, &self.peers);
            if let Some(out) = out {
                self.transmits.push_back(out);
            }
        }
        while let Some(event) = entry.stack.poll_event() {
            self.events.push_back((id, event));
        }
        let top = entry.stack.has_top_output();
        Self::rearm(&mut self.alarms, entry, id);
        if top {
            self.collect_top(id);
        }
    }

    /// What left the top of stack `id` (rarely anything): builds the stack of a new view (thesis
    /// §2.3.4) and removes a stack that exits.
    #[cold]
    #[inline(never)]
    fn collect_top(&mut self, id: StackId) {
        let Some(entry) = live_mut(&mut self.stacks, id) else { return };
        let mut exited = false;
        let mut next_view = None;
        while let Some(output) = entry.stack.poll_top() {
            match output {
                TopOutput::NewView(view) => {
                    entry.replaced = true;
                    let endpoint = entry.stack.view().members[usize::from(entry.stack.rank())];
                    next_view = Some((view, endpoint, entry.stack.leaving(), entry.stack.loopback()));
                }
                TopOutput::Exit => exited = true,
            }
        }
        if exited {
            // A stack that was replaced by its successor just finished lingering; any other exit
            // is the endpoint leaving the group.
            if !self.live(id).is_some_and(|e| e.replaced) {
                self.events.push_back((id, AppEvent::Exit));
            }
            self.remove(id);
        }
        if let Some((view, endpoint, leaving, loopback)) = next_view {
            match view.rank_of(endpoint) {
                Some(rank) => {
                    let now = self.now;
                    // The successor stack uses the same, already validated, spec and parameters,
                    // and this member's own setting of the loop-back.
                    let joined = self.join(now, view, rank);
                    if let (Ok(next), Some(entry)) = (&joined, live_mut(&mut self.stacks, id)) {
                        entry.successor = Some(*next);
                    }
                    if let (Ok(next), false) = (&joined, loopback) {
                        let set = self.handle_action(now, *next, Action::Loopback(false));
                        debug_assert!(set.is_ok(), "a new stack takes the loop-back setting: {set:?}");
                    }
                    match joined {
                        // The application asked to leave, and the view changed before the request
                        // was granted (it reached the coordinator after its round's cut, or the
                        // round was a merge): it goes on in the new view, or the member would stay
                        // in the group for good and never see `Exit`.
                        Ok(next) if leaving => {
                            let left = self.handle_action(now, next, Action::Leave);
                            debug_assert!(left.is_ok(), "a new stack takes a leave request: {left:?}");
                        }
                        Ok(_) => {}
                        Err(_) => self.stats.drop_one(DropReason::Disabled),
                    }
                }
                None => self.stats.drop_one(DropReason::NotForMe),
            }
        }
    }
}

/// A transmit of the stack in `entry` (`id`) as a datagram to send: its head inline (compressed
/// for the common traces, built in place: 8 bytes; in full otherwise, encoded into `buf` then
/// copied), its destination resolved. `None` when it is too
/// large to send (dropped and counted).
fn outgoing(
    entry: &mut Entry,
    id: StackId,
    transmit: crate::stack::Transmit,
    buf: &mut Vec<u8>,
    stats: &mut Stats,
    peers: &BTreeMap<crate::view::GroupName, Arc<[Address]>>,
) -> Option<Outgoing> {
    let view = entry.stack.view();
    let (conn, origin) = match transmit.mux {
        Mux::Gossip => (entry.gossip, 0),
        _ => (entry.conn, entry.stack.rank()),
    };
    // The common trace's datagrams go compressed (8 bytes of head, built in place), the rest in
    // full (encoded into `buf`, then copied).
    let compressed = entry
        .stack
        .compress(&transmit)
        .and_then(|seqno| datagram::compressed_head(&datagram::Compressed { conn, mux: transmit.mux, origin, seqno }));
    let head = match compressed {
        Some((bytes, len)) => {
            stats.count(crate::Counter::CompressedOut);
            let mut inline = [0u8; HEAD_INLINE];
            inline[..datagram::COMPRESSED_HEAD_MAX].copy_from_slice(&bytes);
            DatagramHead::from_buf_and_len(inline, len)
        }
        None => {
            buf.clear();
            datagram::encode_head(&datagram::Head { conn, mux: transmit.mux, origin }, &transmit.msg.hdrs, buf);
            DatagramHead::from_slice(buf)
        }
    };
    if head.len() + transmit.msg.payload.len() > DATAGRAM_SIZE_MAX {
        entry.stack.count_drop(DropReason::Oversized);
        return None;
    }
    let to = match (transmit.mux, transmit.to) {
        (Mux::Cast, _) => Destination::Cast { view: Arc::clone(view), except: entry.stack.rank() },
        (Mux::Send { dest }, _) => Destination::Send(view.addresses[usize::from(dest)]),
        (Mux::Gossip, Some(address)) => Destination::Send(address),
        (Mux::Gossip, None) => {
            let own = view.addresses[usize::from(entry.stack.rank())];
            let known = peers.get(&view.group).map(|p| p.iter().copied().filter(|&a| a != own).collect());
            Destination::Peers(known.unwrap_or_else(|| Arc::from(Vec::new())))
        }
    };
    Some(Outgoing { stack: id, to, head, payload: transmit.msg.payload })
}
