//! The datagram path of a node: decoding what arrives, in full or compressed, and routing it by
//! connection key to the stacks it is for (thesis §2.3.1, §2.3.4; docs/bypass.md, "Header
//! compression" and "Connection ids").

use super::{live_mut, Node, StackId};
use crate::event::{DropReason, Msg};
use crate::time::Instant;
use bytes::Bytes;
use motet_wire::{datagram, ConnId, Mux};
use smallvec::SmallVec;

impl Node {
    /// Decodes and routes a datagram. Malformed or misaddressed datagrams are dropped and counted.
    #[inline(never)] // an entry point, counted by name (`motet bench stack`)
    pub fn handle_datagram(&mut self, now: Instant, datagram: Bytes) {
        self.now = now;
        if datagram::is_compressed(&datagram) {
            return self.handle_compressed(now, datagram);
        }
        let len = datagram.len();
        let decoded = match datagram::decode(datagram) {
            Ok(decoded) => decoded,
            Err(e) => return self.drop_undecodable(e, len),
        };
        let Some((ids, _)) = self.route(decoded.head.conn.key()) else {
            return self.stats.drop_one(DropReason::UnknownConn);
        };
        let head = decoded.head;
        let mut msg = Some(Msg { hdrs: decoded.hdrs, payload: decoded.payload });
        for (i, &id) in ids.iter().enumerate() {
            let Some(entry) = live_mut(&mut self.stacks, id) else { continue };
            let stack = &mut entry.stack;
            let in_view = head.mux == Mux::Gossip
                || (usize::from(head.origin) < stack.view().len() && head.origin != stack.rank());
            // The full form carries the whole 64-bit id: the view's, or the group's gossip id.
            // Others' keys may coincide with ours, not their ids.
            let own = match head.mux {
                Mux::Gossip => head.conn == entry.gossip,
                _ => head.conn == entry.conn,
            };
            let for_me = own
                && match head.mux {
                    Mux::Cast | Mux::Gossip => true,
                    Mux::Send { dest } => dest == stack.rank(),
                };
            if !in_view || !for_me {
                stack.count_drop(DropReason::NotForMe);
                continue;
            }
            let msg = if i + 1 == ids.len() { msg.take().expect("last use") } else { msg.clone().expect("present") };
            stack.handle_recv(now, head.origin, head.mux, msg);
            self.collect(id);
        }
    }

    /// Decodes and routes several datagrams, in order, as [`Node::handle_datagram`] does each
    /// (the parts of one bundle): a run of them to one stack has that stack's outputs moved into
    /// the node's queues once, after the run, instead of after each (their order is the same).
    /// A stack that leaves its view (a new view to build, an exit) is collected at once, so the
    /// datagrams after it find the new view's stack routed.
    pub fn handle_datagrams(&mut self, now: Instant, datagrams: impl IntoIterator<Item = Bytes>) {
        self.batched = Some(None);
        // However the batch ends, it is closed and the stack it was deferring is collected (its
        // outputs moved, its alarm and its deadline of delayed processing filed). A caller's
        // iterator that panicked, and a caller that caught it, left the batch open, and from then
        // on a node of one stack held every output of that stack back; and a stack left
        // uncollected had its outputs wait for its next input, its alarm unfiled meanwhile.
        // Not when the node itself panicked in the middle of an input (a failed check): that
        // stack's state is half done, and a second panic while unwinding would abort.
        struct Open<'a> {
            node: &'a mut Node,
            handling: bool,
        }
        impl Drop for Open<'_> {
            fn drop(&mut self) {
                match self.node.batched.take() {
                    Some(Some(id)) if !self.handling => self.node.collect_now(id),
                    _ => {}
                }
                self.node.batched = None;
            }
        }
        let mut batch = Open { node: self, handling: false };
        for datagram in datagrams {
            batch.handling = true;
            batch.node.handle_datagram(now, datagram);
            batch.handling = false;
        }
    }

    /// Counts a datagram of `len` bytes that did not decode. One of another wire version comes
    /// from a member running another release, which can never be in a view with this one (a
    /// rolling upgrade splits the group until every member runs the new release): said once, so
    /// an operator sees why. Only a version near ours, on a datagram long enough for a head,
    /// counts as one: anything else is noise, `Malformed`.
    #[cold]
    fn drop_undecodable(&mut self, error: motet_wire::WireError, len: usize) {
        let version = match error.kind {
            motet_wire::WireErrorKind::Version(v)
                if (1..=motet_wire::VERSION.saturating_add(4)).contains(&v) && len >= 8 =>
            {
                v
            }
            _ => return self.stats.drop_one(DropReason::Malformed),
        };
        if self.stats.drops(DropReason::OtherVersion) == 0 {
            tracing::warn!(
                version,
                ours = motet_wire::VERSION,
                "dropping datagrams of another wire version: every member of a group must run the same release"
            );
        }
        self.stats.drop_one(DropReason::OtherVersion);
    }

    /// The stacks under `key`, copied out, since the caller's loop over them changes the node
    /// (`from_slice` copies the ids at once, where `clone` would push them one by one); and
    /// whether they are known to be one view's alone: one stack, and no removed stack's key.
    #[inline]
    fn route(&mut self, key: u32) -> Option<(SmallVec<[StackId; 1]>, bool)> {
        if let Some((last, id)) = self.last_route {
            if last == key {
                return Some((SmallVec::from_buf([id]), true));
            }
        }
        let ids = SmallVec::from_slice(self.routes.get(&key)?);
        if let [id] = ids[..] {
            if !self.gone.contains(key) {
                self.last_route = Some((key, id));
                return Some((ids, true));
            }
        }
        Some((ids, false))
    }

    /// The ids of stacks whose `cast` key (their view's; else their send key) is `key`: live
    /// ones among `ids`, and removed ones still remembered.
    pub(super) fn ids_under<'a>(
        &'a self,
        ids: &'a [StackId],
        key: u32,
        cast: bool,
    ) -> impl Iterator<Item = ConnId> + 'a {
        let live = ids.iter().filter_map(|&id| self.live(id)).filter_map(move |e| {
            let theirs = match cast {
                true => e.conn.key(),
                false => datagram::send_conn(e.conn, e.stack.rank()),
            };
            (theirs == key).then_some(e.conn)
        });
        live.chain(self.gone.ids(key, cast, self.now))
    }

    /// Whether a compressed datagram under `key` (a cast, or else a send) may be for stacks of
    /// two views, here or lately removed: their keys coincide, and their full ids, which it
    /// does not carry, differ.
    #[cold]
    fn shared(&mut self, ids: &[StackId], key: u32, cast: bool) -> bool {
        self.gone.forget(self.now);
        let mut conns = self.ids_under(ids, key, cast);
        let first = conns.next();
        conns.any(|conn| Some(conn) != first)
    }

    /// A compressed datagram: its headers are rebuilt from the destination stack's template of
    /// the trace, then it is handled like any other.
    fn handle_compressed(&mut self, now: Instant, datagram: Bytes) {
        let (head, payload) = match datagram::decode_compressed(datagram) {
            Ok(decoded) => decoded,
            Err(_) => return self.stats.drop_one(DropReason::Malformed),
        };
        let Some((ids, alone)) = self.route(head.key) else { return self.stats.drop_one(DropReason::UnknownConn) };
        // A key two views share here (or a view of a stack removed lately): which one it is for
        // cannot be told. Dropped, as the network might have: the layers repair it in full
        // (`mnak`'s `Retrans`, `pt2pt`'s), whose 64-bit id routes exactly. Taken by every stack
        // under the key, it would reach a group it was not cast in.
        if !alone && self.shared(&ids, head.key, head.cast) {
            self.stats.drop_one(DropReason::SharedKey);
            // Each live stack under the key asks its members for the full form: after the first
            // drops, their datagrams route exactly instead of arriving only by repair.
            for &id in &ids {
                if let Some(entry) = live_mut(&mut self.stacks, id) {
                    entry.stack.key_shared(now);
                    self.collect(id);
                }
            }
            return;
        }
        let mut payload = Some(payload);
        for (i, &id) in ids.iter().enumerate() {
            let Some(entry) = live_mut(&mut self.stacks, id) else { continue };
            let stack = &mut entry.stack;
            let in_view = usize::from(head.origin) < stack.view().len() && head.origin != stack.rank();
            // A cast comes under the view's connection id, a send under its destination's: the
            // kind must match the id it came under (ids of other stacks may coincide).
            let (mux, key) = match head.cast {
                true => (Mux::Cast, entry.conn.key()),
                false => (Mux::Send { dest: stack.rank() }, datagram::send_conn(entry.conn, stack.rank())),
            };
            let for_me = head.key == key;
            if !in_view || !for_me {
                stack.count_drop(DropReason::NotForMe);
                continue;
            }
            // The last stack takes the payload itself (no reference-count traffic).
            let payload = if i + 1 == ids.len() { payload.take() } else { payload.clone() }.expect("present");
            match stack.handle_recv_compressed(now, head.origin, mux, head.seqno(entry.conn), payload) {
                Ok(()) => self.stats.count(crate::Counter::CompressedIn),
                Err(_) => {
                    stack.count_drop(DropReason::Malformed);
                    continue;
                }
            }
            self.collect(id);
        }
    }
}
