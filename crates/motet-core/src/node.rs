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
use crate::event::{Action, AppEvent};
use crate::layer::Stats;
use crate::stack::Stack;
use crate::time::Instant;
use crate::view::{Address, RankSet, ViewState};
use crate::Rank;
use bytes::Bytes;
use motet_wire::{datagram, ConnId, Payload};
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
}

mod collect;
mod keys;
mod recv;
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
