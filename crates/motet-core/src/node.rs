//! A `Node`: the sans-IO endpoint host of one process. It owns the stacks of its endpoints, routes
//! datagrams to them by connection identifier (thesis §2.3.1, §2.3.4), and encodes what they send
//! with the central codec.
//!
//! # Call-order contract (for drivers: the runtime and the simulator)
//! 1. Feed inputs with `handle_*` (`handle_datagram`, `handle_timeout`, `handle_action`,
//!    `handle_fail`), each with the current time.
//! 2. Then drain `poll_transmit` until `None` and send each datagram.
//! 3. Then drain `poll_event` until `None` and give each event to the application.
//! 4. Then sleep until `poll_timeout` (or the next datagram) and call `handle_timeout`.
//!
//! Every `handle_*` call does bounded work and leaves every stack's queue empty (drain-first).
//! The outgoing and application queues grow only with the inputs fed; a driver applies
//! back-pressure by not reading datagrams while `pending_events()` is above its bound.

use crate::error::{ApiError, StackSpecError};
use crate::event::{Action, AppEvent, DropReason, Msg};
use crate::layer::Stats;
use crate::stack::{Stack, TopOutput};
use crate::time::Instant;
use crate::view::{Address, RankSet, ViewState};
use crate::Rank;
use bytes::Bytes;
use motet_wire::{datagram, ConnId, Mux, Payload, DATAGRAM_SIZE_MAX};
use smallvec::SmallVec;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// A handle naming one stack of a node: the stack's slot and the slot's generation. A node
/// reuses the slot of a stack that exited (every view change builds a stack, and a process may
/// live through millions), so a handle kept after its stack exited, or an event of that stack
/// still queued, never names the stack that took the slot next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StackId {
    index: u32,
    generation: u32,
}

impl StackId {
    /// A handle that names no stack (a placeholder for drivers).
    pub const NONE: StackId = StackId { index: u32::MAX, generation: u32::MAX };

    /// The stack's slot in its node: small and dense (slots are reused), for drivers that keep a
    /// table by stack. A later stack may take the same slot: compare the whole id.
    pub fn slot(self) -> usize {
        self.index as usize
    }
}

/// One slot of `Node::stacks`: its live stack, if any, and how many stacks it has held before.
#[derive(Debug, Default)]
struct Slot {
    generation: u32,
    entry: Option<Entry>,
}

/// Where a datagram goes.
#[derive(Clone, Debug)]
pub enum Destination {
    /// Every member of `view` but `except` (the sender); a runtime may use IP multicast instead.
    Cast {
        /// The view whose members receive it.
        view: Arc<ViewState>,
        /// The sender's own rank.
        except: Rank,
    },
    /// One address.
    Send(Address),
    /// Every known peer address of the group (group gossip to other partitions).
    Peers(Arc<[Address]>),
}

impl Destination {
    /// The unicast addresses to send to.
    pub fn addresses(&self) -> impl Iterator<Item = Address> + '_ {
        let (all, except, single): (&[Address], Option<usize>, Option<Address>) = match self {
            Destination::Cast { view, except } => (&view.addresses, Some(usize::from(*except)), None),
            Destination::Send(address) => (&[], None, Some(*address)),
            Destination::Peers(peers) => (peers, None, None),
        };
        all.iter().enumerate().filter(move |(i, _)| Some(*i) != except).map(|(_, a)| *a).chain(single)
    }
}

/// An encoded datagram ready to send: `head` (version, connection id, addressing, headers) then
/// the payload chunks, for scatter-gather I/O without copying the payload.
#[derive(Clone, Debug)]
pub struct Outgoing {
    /// The stack that sent it.
    pub stack: StackId,
    /// Where to.
    pub to: Destination,
    /// Encoded head: inline, so that a datagram of the common path allocates nothing.
    pub head: DatagramHead,
    /// Payload, sent after the head.
    pub payload: Payload,
}

impl Outgoing {
    /// The whole datagram in one buffer (copies; for the simulator and tests).
    pub fn to_bytes(&self) -> Bytes {
        datagram_bytes(&self.head, &self.payload)
    }
}

pub use motet_wire::chunks::datagram_bytes;

/// The entry of stack `id` in `stacks`, if it is live (a function of the slots alone, so that
/// the node's other fields stay free to borrow).
fn live_mut(stacks: &mut [Slot], id: StackId) -> Option<&mut Entry> {
    let slot = stacks.get_mut(id.index as usize)?;
    slot.entry.as_mut().filter(|_| slot.generation == id.generation)
}

/// [`live_mut`], shared.
fn live_in(stacks: &[Slot], id: StackId) -> Option<&Entry> {
    let slot = stacks.get(id.index as usize)?;
    slot.entry.as_ref().filter(|_| slot.generation == id.generation)
}

#[derive(Debug)]
struct Entry {
    stack: Stack,
    conn: ConnId,
    /// Its group's gossip id ([`gossip_conn_id`]).
    gossip: ConnId,
    /// The stack passed out its successor view and is lingering.
    replaced: bool,
    /// The stack built for that view here.
    successor: Option<StackId>,
    /// Listed in `Node::unsettled`.
    unsettled: bool,
    /// The time this stack has in `Node::alarms` ([`Stack::poll_wake`]).
    armed: Option<Instant>,
}

/// The endpoints of one process and their stacks.
#[derive(Debug, Default)]
pub struct Node {
    stacks: Vec<Slot>,
    /// Slots whose stack exited, reused last-freed first.
    free: Vec<u32>,
    /// Stacks by key ([`ConnId::key`]): of their view, their group's gossip, and their sends
    /// ([`datagram::send_conn`]). Keys may be shared; full ids tell stacks apart.
    routes: BTreeMap<u32, SmallVec<[StackId; 1]>>,
    /// The route found last, when it names one stack: datagrams come in runs for one group, and
    /// the map's search costs more than the rest of the route (about 50 instructions a datagram).
    /// Cleared whenever a route changes.
    last_route: Option<(u32, StackId)>,
    /// Keys of stacks removed lately, with their ids: a compressed datagram of that view still on
    /// its way, under a key a live stack of another view has, is dropped (`SharedKey`) instead
    /// of taken by that stack.
    gone: keys::Removed,
    transmits: VecDeque<Outgoing>,
    events: VecDeque<(StackId, AppEvent)>,
    stats: Stats,
    /// The time of the input being handled (stacks built for new views start at it).
    now: Instant,
    /// Known peer addresses per group, for gossip to other partitions (set by the driver from its
    /// discovery: seed lists, DNS, multicast).
    peers: BTreeMap<crate::view::GroupName, Arc<[Address]>>,
    /// Whether stacks built from now on run the bypass.
    bypass: crate::stack::Bypass,
    /// Bypass counts of stacks that have exited.
    bypass_done: crate::stack::BypassStats,
    /// While [`Node::handle_datagrams`] runs: the stack whose outputs wait to be collected until
    /// an input for another stack, or the end of the batch (`Some(None)`: batching, none waits).
    batched: Option<Option<StackId>>,
    /// Where heads are encoded before they are copied into their (inline) `DatagramHead`.
    head_buf: Vec<u8>,
    /// Stacks holding a full batch of delayed processing ([`Stack::settle_due`]), each once
    /// ([`Node::settle`] visits only these).
    unsettled: Vec<StackId>,
    /// Every stack's next alarm or deadline of delayed processing ([`Stack::poll_wake`]), kept up
    /// to date after each input, so the driver's questions (when next, what is due) cost a
    /// lookup, not a visit of every stack: a process may run many groups, and live through many
    /// views.
    alarms: std::collections::BTreeSet<(Instant, StackId)>,
    /// What this node's alarms are put off by, from outside the seed (a seeded bug for the
    /// determinism check, `crate::faults::unseeded_alarms`; 0 unless switched on).
    #[cfg(feature = "fault-injection")]
    unseeded: crate::time::Duration,
}

/// The encoded head of an outgoing datagram. Inline up to 24 bytes (every compressed head and
/// most full ones), so the common path allocates nothing per datagram.
pub type DatagramHead = SmallVec<[u8; HEAD_INLINE]>;

/// Head bytes a [`DatagramHead`] holds without allocating.
const HEAD_INLINE: usize = 24;
const _: () = assert!(datagram::COMPRESSED_HEAD_MAX <= HEAD_INLINE, "a compressed head is inline");

impl Node {
    /// A node with no stack.
    pub fn new() -> Node {
        #[cfg(feature = "fault-injection")]
        return Node { unseeded: unseeded_delay(), ..Node::default() };
        #[cfg(not(feature = "fault-injection"))]
        Node::default()
    }

    /// Builds the stack for the member at `rank` of `view` and installs its connection id.
    pub fn join(&mut self, now: Instant, view: Arc<ViewState>, rank: Rank) -> Result<StackId, StackSpecError> {
        self.now = now;
        let conn = conn_id(&view);
        let stack = Stack::with_bypass(view, rank, now, self.bypass)?;
        let gossip = gossip_conn_id(&stack.view().group);
        let index = self.free.pop().unwrap_or_else(|| {
            self.stacks.push(Slot::default());
            u32::try_from(self.stacks.len() - 1).expect("fewer than 2^32 live stacks")
        });
        let slot = &mut self.stacks[index as usize];
        slot.entry =
            Some(Entry { stack, conn, gossip, replaced: false, successor: None, unsettled: false, armed: None });
        let id = StackId { index, generation: slot.generation };
        // Routed by key, the low 32 bits: another view's stack may have one of ours already
        // (about one chance in 2^32 / (9 x stacks here) per view). Full-form datagrams still
        // reach exactly their stack (their 64-bit id); a compressed one under a key two ids
        // share is dropped (`handle_compressed`). Counted and said, once per stack.
        let (cast_key, send_key) = (conn.key(), datagram::send_conn(conn, rank));
        for key in [cast_key, gossip.key(), send_key] {
            let route = self.routes.entry(key).or_default();
            // Once per key: a stack's own keys may coincide (its gossip's and its view's).
            if !route.contains(&id) {
                route.push(id);
            }
        }
        // Counted when it matters: a key of the kind that goes compressed (its view's, for
        // casts; its own, for sends) that a stack of another view here has, or had lately.
        // Gossip never goes compressed, and a key of another kind is told apart by the kind.
        self.gone.forget(self.now);
        let collides = [(cast_key, true), (send_key, false)].into_iter().any(|(key, cast)| {
            let ids = self.routes.get(&key).map_or(&[][..], |r| &r[..]);
            self.ids_under(ids, key, cast).any(|other| other != conn)
        });
        if collides {
            self.stats.count(crate::Counter::ConnCollision);
            let group = &self.stacks[index as usize].entry.as_ref().expect("just built").stack.view().group;
            tracing::warn!(?group, "a connection key is another view's at this node: its compressed datagrams are dropped, and repaired in full");
        }
        self.last_route = None;
        self.collect(id);
        Ok(id)
    }

    /// Sets the addresses where other partitions of `group` may be found.
    pub fn set_peers(&mut self, group: crate::view::GroupName, peers: Vec<Address>) {
        self.peers.insert(group, peers.into());
    }

    /// Forgets `group`'s seeds: its last endpoint here is gone (a process that joins and leaves
    /// groups all its life keeps no entry per group it was ever in).
    pub fn forget_peers(&mut self, group: &crate::view::GroupName) {
        self.peers.remove(group);
    }

    /// How many groups have seeds set (entries of [`Node::set_peers`] not forgotten).
    pub fn peer_groups(&self) -> usize {
        self.peers.len()
    }

    /// The addresses where other partitions of `group` may be found ([`Node::set_peers`]).
    pub fn peers(&self, group: &crate::view::GroupName) -> &[Address] {
        self.peers.get(group).map_or(&[], |p| &p[..])
    }

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
    fn ids_under<'a>(&'a self, ids: &'a [StackId], key: u32, cast: bool) -> impl Iterator<Item = ConnId> + 'a {
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

    /// Fires due alarms of every stack (and its delayed processing, if a full batch or its
    /// deadline is due: [`Stack::poll_timeout`]), in the order of the stacks' slots (not of their
    /// creation: a slot is reused). Stacks built meanwhile (a new view's) wait for the next call.
    #[inline(never)] // an entry point, counted by name (`motet bench stack`)
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
        let alarms = self.alarms.range(..=(now, StackId::NONE)).map(|&(_, id)| id);
        let delayed = self
            .unsettled
            .iter()
            .copied()
            .filter(|&id| self.live(id).is_some_and(|e| e.stack.poll_timeout().is_some_and(|at| at <= now)));
        let mut due: SmallVec<[StackId; 8]> = alarms.chain(delayed).collect();
        due.sort_unstable();
        due.dedup();
        // By handle, not by slot: a stack built meanwhile in the slot of one that exited is not due.
        for id in due {
            let Some(entry) = live_mut(&mut self.stacks, id) else { continue };
            if entry.stack.poll_timeout().is_some_and(|at| at <= now) {
                entry.stack.handle_timeout(now);
                self.collect(id);
            }
        }
    }

    /// Files the next alarm of stack `id` (in `entry`) in `alarms`, if it moved (rarely: on most
    /// inputs it stays).
    #[inline]
    fn rearm(alarms: &mut std::collections::BTreeSet<(Instant, StackId)>, entry: &mut Entry, id: StackId) {
        let at = entry.stack.poll_wake();
        if at != entry.armed {
            let old = std::mem::replace(&mut entry.armed, at);
            Self::refile(alarms, id, old, at);
        }
    }

    /// Moves stack `id`'s entry in `alarms` from `old` to `at`. Out of line: the ordered index's
    /// code would make every caller save registers it seldom needs.
    #[cold]
    #[inline(never)]
    fn refile(
        alarms: &mut std::collections::BTreeSet<(Instant, StackId)>,
        id: StackId,
        old: Option<Instant>,
        at: Option<Instant>,
    ) {
        if let Some(old) = old {
            alarms.remove(&(old, id));
        }
        if let Some(at) = at {
            alarms.insert((at, id));
        }
    }

    /// An application action on stack `id`.
    #[inline(never)] // an entry point, counted by name (`motet bench stack`)
    pub fn handle_action(&mut self, now: Instant, id: StackId, action: Action) -> Result<(), ApiError> {
        self.now = now;
        // A leave or a loop-back setting is the member's, not one view's: given to a stack that
        // was just replaced (a driver that had not yet taken the new view's event), it goes to
        // the stack of the view the member is in now. The lingering stack took it, and the
        // request was lost: the member stayed in the group for good (found by a review).
        let id = match action {
            Action::Leave | Action::Loopback(_) => self.carrying_on(id),
            _ => id,
        };
        let entry = self.entry(id)?;
        let result = entry.stack.handle_action(now, action);
        self.collect(id);
        result
    }

    /// Tells stack `id` that `ranks` have failed (static membership: the driver's failure
    /// detector stands in for the membership layers of a later release).
    pub fn handle_fail(&mut self, now: Instant, id: StackId, ranks: RankSet) -> Result<(), ApiError> {
        self.now = now;
        self.entry(id)?.stack.handle_fail(now, ranks);
        self.collect(id);
        Ok(())
    }

    /// When the node next needs [`Node::handle_timeout`]: the earliest alarm or deadline of
    /// delayed processing of any stack ([`Node::poll_alarm`]), or now while a stack holds a full
    /// batch of delayed processing.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let delayed = self.unsettled.iter().filter_map(|&id| self.live(id)?.stack.poll_timeout());
        delayed.chain(self.poll_alarm()).min()
    }

    /// The earliest alarm of any stack, or deadline of delayed processing whose batch has not
    /// filled ([`Stack::poll_wake`]), not counting full batches: what a driver that calls
    /// [`Node::settle`] itself waits for.
    pub fn poll_alarm(&self) -> Option<Instant> {
        let at = self.alarms.first().map(|&(at, _)| at);
        #[cfg(feature = "fault-injection")]
        let at = at.map(|at| at + self.unseeded);
        at
    }

    /// Delayed processing ([`Stack::settle`]), in batches: the bookkeeping of the messages the
    /// bypass has transmitted or delivered (filing copies for retransmission), for the stacks
    /// that hold a full batch ([`Stack::settle_due`]). A driver calls it when idle, after sending
    /// what the inputs produced and handing the application its events. A batch that has not
    /// filled waits for more, for the stack's next input that needs it (every input but an
    /// application message on a compiled trace files what waits first), or for its deadline
    /// ([`Stack::settle_deadline`]), which [`Node::poll_alarm`] counts: it is never needed for
    /// correctness, and [`Node::poll_timeout`] asks for a timeout at once while a full batch
    /// waits.
    #[inline(never)] // an entry point, counted by name (`motet bench stack`)
    pub fn settle(&mut self) {
        for i in 0..self.unsettled.len() {
            let id = self.unsettled[i];
            if let Some(entry) = live_mut(&mut self.stacks, id) {
                entry.stack.settle();
                entry.unsettled = false;
                // Filing a copy may arm a retransmission sweep.
                Self::rearm(&mut self.alarms, entry, id);
            }
        }
        self.unsettled.clear();
    }

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Outgoing> {
        self.transmits.pop_front()
    }

    /// The next application event.
    pub fn poll_event(&mut self) -> Option<(StackId, AppEvent)> {
        self.events.pop_front()
    }

    /// Whether datagrams or application events wait to be polled.
    pub fn has_output(&self) -> bool {
        !self.transmits.is_empty() || !self.events.is_empty()
    }

    /// Application events not yet polled.
    pub fn pending_events(&self) -> usize {
        self.events.len()
    }

    /// The stack `id`, if it is live.
    pub fn stack(&self, id: StackId) -> Option<&Stack> {
        self.live(id).map(|e| &e.stack)
    }

    /// Live stacks.
    pub fn stacks(&self) -> impl Iterator<Item = (StackId, &Stack)> {
        self.stacks.iter().zip(0..).filter_map(|(slot, index)| {
            slot.entry.as_ref().map(|e| (StackId { index, generation: slot.generation }, &e.stack))
        })
    }

    /// Slots in use or free: the most stacks this node has held at once.
    pub fn slots(&self) -> usize {
        self.stacks.len()
    }

    /// The stack that carries on for stack `id`'s member: `id`, or the successor built for its
    /// next view, and so on, while they are live.
    fn carrying_on(&self, mut id: StackId) -> StackId {
        while let Some(next) = self.live(id).and_then(|e| e.successor).filter(|&next| self.live(next).is_some()) {
            id = next;
        }
        id
    }

    /// The entry of stack `id`, if it is live.
    fn live(&self, id: StackId) -> Option<&Entry> {
        live_in(&self.stacks, id)
    }

    /// Sets whether stacks built from now on run their common traces through the bypass (`On`,
    /// the default), only the layered path (`Off`), or both, compared (`Diff`, for testing).
    pub fn set_bypass(&mut self, bypass: crate::stack::Bypass) {
        self.bypass = bypass;
    }

    /// How the inputs of every stack this node has run took the bypass.
    pub fn bypass_stats(&self) -> crate::stack::BypassStats {
        let mut total = self.bypass_done.clone();
        for (_, stack) in self.stacks() {
            total.merge(stack.bypass_stats());
        }
        total
    }

    /// Node-level drops plus every live stack's statistics.
    pub fn stats(&self) -> Stats {
        let mut total = self.stats.clone();
        for (_, stack) in self.stacks() {
            total.merge(stack.stats());
        }
        total
    }

    /// Removes stack `id` and its route: it has exited (thesis §2.3.4, `Exit`).
    pub fn remove(&mut self, id: StackId) {
        let Some(slot) = self.stacks.get_mut(id.index as usize).filter(|s| s.generation == id.generation) else {
            return;
        };
        let Some(entry) = slot.entry.take() else { return };
        // The next stack in this slot gets a new handle. Wrapping: a stale handle could name a
        // stack again only after 2^32 stacks in this one slot, and removal has cleared every
        // reference the node holds; drivers look handles up only for live members.
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(id.index);
        if let Some(at) = entry.armed {
            self.alarms.remove(&(at, id));
        }
        self.unsettled.retain(|&other| other != id);
        self.bypass_done.merge(entry.stack.bypass_stats());
        // Its counts stay the node's: every view change replaces a stack, and the counters the
        // runtime exports must never go down (Prometheus counters are monotonic).
        self.stats.merge(entry.stack.stats());
        self.last_route = None;
        let own = datagram::send_conn(entry.conn, entry.stack.rank());
        // Its view's datagrams may still be on their way: its keys are remembered a while, so
        // that another view's stack with one of them does not take them (`shared`). Not the
        // gossip's: gossip never goes compressed.
        self.gone.forget(self.now);
        let until = self.now + keys::held(&entry.stack.view().params);
        self.gone.remember(entry.conn, [(entry.conn.key(), true), (own, false)], until);
        for key in [entry.conn.key(), entry.gossip.key(), own] {
            if let Some(ids) = self.routes.get_mut(&key) {
                ids.retain(|&mut other| other != id);
                if ids.is_empty() {
                    self.routes.remove(&key);
                }
            }
        }
    }

    /// Asserts the invariants of every live stack (the simulator calls this after every step).
    pub fn check_invariants(&self) {
        for (_, stack) in self.stacks() {
            stack.check_invariants();
        }
    }

    /// Whether any stack is routed under `conn` (its key).
    pub fn routes(&self, conn: ConnId) -> bool {
        self.routes.contains_key(&conn.key())
    }

    fn entry(&mut self, id: StackId) -> Result<&mut Entry, ApiError> {
        live_mut(&mut self.stacks, id).ok_or(ApiError::NoSuchStack)
    }

    /// After an input to stack `id`: its outputs moved into the node's queues now, or, while a
    /// batch of datagrams runs ([`Node::handle_datagrams`]), once the batch moves on to another
    /// stack or ends (unless it left its view: then at once).
    #[inline]
    fn collect(&mut self, id: StackId) {
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
    fn collect_now(&mut self, id: StackId) {
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
/// for the common traces, built in place: 8 bytes; in full
/// otherwise, encoded into `buf` then copied), its destination resolved. `None` when it is too
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

mod keys;
#[cfg(feature = "fault-injection")]
pub(crate) use keys::set_short_keys;
pub use keys::{conn_id, gossip_conn_id};

#[cfg(test)]
mod tests;

#[cfg(feature = "fault-injection")]
thread_local! {
    /// Testing the determinism check: alarms are put off by an amount that comes from outside the
    /// seed (a seeded bug, `crate::faults::unseeded_alarms`).
    static UNSEEDED_ALARMS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Sets the seeded bug of `UNSEEDED_ALARMS` on this thread (`crate::faults`).
#[cfg(feature = "fault-injection")]
pub(crate) fn set_unseeded_alarms(on: bool) {
    UNSEEDED_ALARMS.with(|u| u.set(on));
}

/// With the seeded bug on, 1 to 1,000 ns from the standard library's per-process, per-instance
/// hash keys, as a layer that read a clock or iterated a `HashMap` would get: the same seed no
/// longer gives the same run. Nothing otherwise.
#[cfg(feature = "fault-injection")]
fn unseeded_delay() -> crate::time::Duration {
    use std::hash::BuildHasher;
    match UNSEEDED_ALARMS.with(std::cell::Cell::get) {
        true => crate::time::Duration(std::collections::hash_map::RandomState::new().hash_one(0u8) % 1_000 + 1),
        false => crate::time::Duration(0),
    }
}
