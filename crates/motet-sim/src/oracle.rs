//! Oracles: the guarantees of the stack, checked globally over the trace of a run (STYLE
//! principle 11). They know nothing of the protocol's internals: they read what the application
//! saw and what the layers still hold at the end.
//!
//! - **exactly once at every correct destination**: every cast from a correct (never crashed)
//!   sender is delivered once at every correct node, the sender included; every send from a
//!   correct sender to a correct destination is delivered once there;
//! - **per-sender FIFO**: on each channel (origin → node, casts; origin → dest, sends) the
//!   delivered messages are exactly the first k sent, in order, for some k;
//! - **no creation**: everything delivered was sent, by the origin it is attributed to, on the
//!   channel it arrived on;
//! - **integrity**: delivered bytes equal sent bytes;
//! - **quiescence**: the run went quiet before its time limit, and then every retransmission,
//!   reordering and flow-control buffer of every live node is empty.

use bytes::Bytes;
use motet_core::Instant;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// A cast, or a send to a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Channel {
    /// A multicast.
    Cast,
    /// A point-to-point message to `dest`.
    Send {
        /// Destination node.
        dest: usize,
    },
}

/// Identifies a message of the workload: who sent it, how, and its index on that channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct MsgId {
    /// Sending node.
    pub origin: usize,
    /// Cast or send.
    pub channel: Channel,
    /// Position on the channel, from 0.
    pub index: u32,
}

const MAGIC: u8 = 0x4d;
const TAG_LEN: usize = 12;

impl MsgId {
    /// The payload tag that identifies the message inside its own bytes.
    pub fn tag(&self) -> [u8; TAG_LEN] {
        let mut tag = [0u8; TAG_LEN];
        tag[0] = MAGIC;
        tag[1..3].copy_from_slice(&(self.origin as u16).to_le_bytes());
        let (kind, dest) = match self.channel {
            Channel::Cast => (0u8, 0u16),
            Channel::Send { dest } => (1, dest as u16),
        };
        tag[3] = kind;
        tag[4..6].copy_from_slice(&dest.to_le_bytes());
        tag[6..10].copy_from_slice(&self.index.to_le_bytes());
        tag
    }

    /// Reads the tag back from a payload.
    pub fn parse(payload: &[u8]) -> Option<MsgId> {
        if payload.len() < TAG_LEN || payload[0] != MAGIC {
            return None;
        }
        let origin = usize::from(u16::from_le_bytes([payload[1], payload[2]]));
        let dest = usize::from(u16::from_le_bytes([payload[4], payload[5]]));
        let channel = match payload[3] {
            0 => Channel::Cast,
            1 => Channel::Send { dest },
            _ => return None,
        };
        let index = u32::from_le_bytes([payload[6], payload[7], payload[8], payload[9]]);
        Some(MsgId { origin, channel, index })
    }
}

/// A view's identity in the trace: (logical time, coordinator endpoint).
pub type ViewKey = (u64, u64);

/// The delivery guarantees a view's stack gives beyond virtual synchrony (the oracles that apply).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Guarantees {
    /// Total order of casts.
    pub total: bool,
    /// Causal order of casts.
    pub causal: bool,
    /// Safe delivery of casts.
    pub safe: bool,
}

/// A view installed by a node.
#[derive(Clone, Debug)]
pub struct Installed {
    /// When.
    pub time: Instant,
    /// Which node.
    pub node: usize,
    /// The view.
    pub view: ViewKey,
    /// Its members, as node indices, in rank order.
    pub members: Vec<usize>,
    /// Whether it is a primary view.
    pub primary: bool,
    /// What its stack guarantees (a group may switch stacks from view to view).
    pub guarantees: Guarantees,
    /// Its stack, as a layer list.
    pub stack: String,
    /// Its members' addresses, in rank order (simulated addresses).
    pub addresses: Vec<u32>,
}

/// One message accepted by a sender's endpoint.
#[derive(Clone, Debug)]
pub struct Sent {
    /// Which message.
    pub id: MsgId,
    /// When the endpoint accepted it.
    pub time: Instant,
    /// Hash of its bytes.
    pub digest: u64,
    /// The view it was sent in.
    pub view: ViewKey,
}

/// One delivery to an application.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// When.
    pub time: Instant,
    /// At which node.
    pub node: usize,
    /// The origin rank the stack reported.
    pub origin: usize,
    /// Whether it arrived as a cast (else a send).
    pub cast: bool,
    /// The bytes delivered.
    pub payload: Bytes,
    /// The view it was delivered in.
    pub view: ViewKey,
    /// Whether the application had already been told `Block` in that view (the view change had
    /// begun).
    pub blocked: bool,
}

/// One side of a state transfer: what the provider streamed, or what a receiver installed.
#[derive(Clone, Debug)]
pub struct Transfer {
    /// The state-transfer view.
    pub view: ViewKey,
    /// The node.
    pub node: usize,
    /// The provider (else a receiver).
    pub provided: bool,
    /// Digest of the state's bytes.
    pub digest: u64,
}

/// What a run did, as far as the oracles care.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// Number of nodes.
    pub nodes: usize,
    /// Messages accepted by their senders, in acceptance order.
    pub sent: Vec<Sent>,
    /// Deliveries, in the order they happened.
    pub deliveries: Vec<Delivery>,
    /// For each node, when it crashed (None: correct).
    pub crashed: Vec<Option<Instant>>,
    /// Whether the run went quiet before its time limit.
    pub quiesced: bool,
    /// For each node alive at the end: messages still held, per layer.
    pub buffered: Vec<Vec<(&'static str, usize)>>,
    /// Views installed, in the order they were installed.
    pub views: Vec<Installed>,
    /// Whether the oracle should require the live members to end in one common view.
    pub membership: bool,
    /// For each node, whether it left the group (it need not be in the final view).
    pub left: Vec<bool>,
    /// For each node, whether its endpoint's stack ended (`Exit`): every correct member that
    /// asked to leave must get there (a node missing here counts as ended, for traces built by
    /// hand).
    pub exited: Vec<bool>,
    /// Check total order in every view (else only in views whose [`Installed::guarantees`] say
    /// so).
    pub total: bool,
    /// Check causal order in every view (likewise; casts carry their sender's vector clock after
    /// the tag, see [`encode_clock`]).
    pub causal: bool,
    /// Check safe delivery (uniform agreement) in every view (likewise).
    pub safe: bool,
    /// State transfers, in the order they happened.
    pub transfers: Vec<Transfer>,
    /// Endpoint migrations asked for, in order: (node, the address it moved to).
    pub migrations: Vec<(usize, u32)>,
}

/// A broken guarantee.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind")]
pub enum Violation {
    /// A message a correct node should have delivered was not.
    Lost {
        /// Which message.
        id: MsgId,
        /// Where it is missing.
        node: usize,
    },
    /// Delivered more than once.
    Duplicate {
        /// Which message.
        id: MsgId,
        /// Where.
        node: usize,
    },
    /// Delivered out of order or after a gap (within the view it was sent in).
    Fifo {
        /// Which message.
        id: MsgId,
        /// Where.
        node: usize,
        /// The index that should have come next (`u32::MAX`: nothing more was sent in that view).
        expected: u32,
    },
    /// Delivered but never sent, or attributed to the wrong origin or channel.
    Created {
        /// Where.
        node: usize,
        /// What was wrong.
        detail: String,
    },
    /// Bytes differ from what was sent.
    Corrupt {
        /// Which message.
        id: MsgId,
        /// Where.
        node: usize,
    },
    /// A live node still holds messages after quiescence.
    NotQuiescent {
        /// Where.
        node: usize,
        /// Layer and count.
        layer: &'static str,
        /// Messages held.
        held: usize,
    },
    /// The run did not go quiet within its time limit.
    Liveness {
        /// What was still going on.
        detail: String,
    },
    /// A layer's invariant check or the stack's scheduler failed (a panic inside the core).
    Invariant {
        /// The panic message.
        detail: String,
    },
    /// Two members installed views with the same id but different members.
    ViewAgreement {
        /// The view.
        view: ViewKey,
    },
    /// A member's view ids did not increase, or two members installed two views in opposite orders.
    ViewOrder {
        /// Where.
        node: usize,
        /// What was wrong.
        detail: String,
    },
    /// Two members moved from one view to the same next view having delivered different casts.
    VirtualSynchrony {
        /// The view they left.
        view: ViewKey,
        /// The two members.
        nodes: (usize, usize),
    },
    /// Two concurrent views (neither descends from the other) were both primary.
    Primary {
        /// The two views.
        views: (ViewKey, ViewKey),
    },
    /// Two members that went on together from a view (or stayed in it to the end) delivered its
    /// casts in different orders.
    TotalOrder {
        /// The view.
        view: ViewKey,
        /// The two members.
        nodes: (usize, usize),
        /// The first position where their sequences differ.
        position: usize,
    },
    /// A cast was delivered before a cast of the same view that its sender had delivered before
    /// casting it.
    Causal {
        /// The cast delivered too early.
        id: MsgId,
        /// Where.
        node: usize,
        /// The cast it depends on, not delivered there before it.
        missing: MsgId,
    },
    /// A cast delivered by some member of a view (even one that crashed right after) was not
    /// delivered in that view by a correct member that went on from it: delivery was not safe.
    Safe {
        /// The cast.
        id: MsgId,
        /// The view.
        view: ViewKey,
        /// The correct member that did not deliver it.
        node: usize,
    },
    /// A receiver installed a state other than the one its view's provider streamed.
    StateTransfer {
        /// The state-transfer view.
        view: ViewKey,
        /// The receiver.
        node: usize,
    },
    /// A node that moved to a new address ended the run in a view that does not have it there
    /// (the others would keep sending to an address it has left).
    Migration {
        /// The node.
        node: usize,
        /// The address it moved to.
        address: u32,
    },
    /// A message was delivered in another view than the one it was sent in.
    SendingView {
        /// Which message.
        id: MsgId,
        /// Where.
        node: usize,
    },
}

/// For each (node, view it installed): the view it installed next, if any.
fn successors(trace: &Trace) -> BTreeMap<(usize, ViewKey), ViewKey> {
    let mut last: BTreeMap<usize, ViewKey> = BTreeMap::new();
    let mut next = BTreeMap::new();
    for v in &trace.views {
        if let Some(previous) = last.insert(v.node, v.view) {
            next.insert((v.node, previous), v.view);
        }
    }
    next
}

/// The membership oracles: view agreement, consistent order, virtual synchrony, and (when the run
/// quiesced) that the live members end in one common view.
fn check_views(trace: &Trace, successor: &BTreeMap<(usize, ViewKey), ViewKey>, violations: &mut Vec<Violation>) {
    // View agreement: one membership, one stack and one address per member, per view id.
    let mut membership: BTreeMap<ViewKey, &Vec<usize>> = BTreeMap::new();
    let mut stacks: BTreeMap<ViewKey, (&String, &Vec<u32>)> = BTreeMap::new();
    for v in &trace.views {
        let members_differ = membership.insert(v.view, &v.members).is_some_and(|previous| previous != &v.members);
        let config = (&v.stack, &v.addresses);
        let stacks_differ = stacks.insert(v.view, config).is_some_and(|previous| previous != config);
        if members_differ || stacks_differ {
            violations.push(Violation::ViewAgreement { view: v.view });
        }
    }
    // Consistent order: increasing logical time per member; no two members install two views in
    // opposite orders.
    let mut order: BTreeMap<usize, Vec<ViewKey>> = BTreeMap::new();
    for v in &trace.views {
        let seq = order.entry(v.node).or_default();
        if seq.last().is_some_and(|last| last.0 >= v.view.0) {
            violations
                .push(Violation::ViewOrder { node: v.node, detail: format!("{:?} after {:?}", v.view, seq.last()) });
        }
        seq.push(v.view);
    }
    let position: BTreeMap<(usize, ViewKey), usize> =
        order.iter().flat_map(|(&node, seq)| seq.iter().enumerate().map(move |(i, &v)| ((node, v), i))).collect();
    for (&(p, v1), &i1) in &position {
        for (&(q, v2), &j2) in position.range((p + 1, (0, 0))..) {
            let (Some(&i2), Some(&j1)) = (position.get(&(p, v2)), position.get(&(q, v1))) else { continue };
            if v1 < v2 && (i1 < i2) != (j1 < j2) {
                violations.push(Violation::ViewOrder {
                    node: q,
                    detail: format!("{v1:?} and {v2:?} in the opposite order to node {p}"),
                });
            }
        }
    }
    // Virtual synchrony: members moving from V to the same V' delivered the same casts in V.
    let mut casts_in: BTreeMap<(usize, ViewKey), BTreeSet<MsgId>> = BTreeMap::new();
    for d in trace.deliveries.iter().filter(|d| d.cast) {
        if let Some(id) = MsgId::parse(&d.payload) {
            casts_in.entry((d.node, d.view)).or_default().insert(id);
        }
    }
    let empty = BTreeSet::new();
    let mut groups: BTreeMap<(ViewKey, ViewKey), Vec<usize>> = BTreeMap::new();
    for (&(node, from), &to) in successor {
        groups.entry((from, to)).or_default().push(node);
    }
    // A leaver (its stack ended in its last view, with no next view) is not checked here: which
    // next view its round led to (its partition's) is not in the trace, and with partitions a
    // leaver may rightly have delivered what no member that went on did. Recording it (the next
    // view id a leaver's round cast) would let this check hold leavers to their round.
    for ((from, _), nodes) in groups {
        for pair in nodes.windows(2) {
            let a = casts_in.get(&(pair[0], from)).unwrap_or(&empty);
            let b = casts_in.get(&(pair[1], from)).unwrap_or(&empty);
            if a != b {
                violations.push(Violation::VirtualSynchrony { view: from, nodes: (pair[0], pair[1]) });
            }
        }
    }
    // Primary partition: the primary views form one chain of descent (no two concurrent primaries).
    let mut descendants: BTreeMap<ViewKey, BTreeSet<ViewKey>> = BTreeMap::new();
    for (&(_, from), &to) in successor {
        descendants.entry(from).or_default().insert(to);
    }
    let reaches = |a: ViewKey, b: ViewKey| {
        let mut stack = vec![a];
        let mut seen = BTreeSet::new();
        while let Some(v) = stack.pop() {
            if v == b {
                return true;
            }
            if seen.insert(v) {
                stack.extend(descendants.get(&v).into_iter().flatten().copied());
            }
        }
        false
    };
    let primaries: BTreeSet<ViewKey> = trace.views.iter().filter(|v| v.primary).map(|v| v.view).collect();
    for &a in &primaries {
        for &b in primaries.range((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded)) {
            if !reaches(a, b) && !reaches(b, a) {
                violations.push(Violation::Primary { views: (a, b) });
            }
        }
    }
    // Liveness of membership: a quiet run ends with the correct members in one view of exactly
    // them, and every correct member that asked to leave has left (its stack ended).
    if trace.membership && trace.quiesced {
        let asked = |n: usize| trace.left.get(n).copied().unwrap_or(false);
        for n in (0..trace.nodes).filter(|&n| trace.crashed[n].is_none() && asked(n)) {
            if !trace.exited.get(n).copied().unwrap_or(true) {
                violations.push(Violation::Liveness { detail: format!("node {n} asked to leave and never left") });
            }
        }
        let stayed = |n: usize| trace.crashed[n].is_none() && !asked(n);
        let correct: Vec<usize> = (0..trace.nodes).filter(|&n| stayed(n)).collect();
        let finals: BTreeSet<ViewKey> =
            correct.iter().filter_map(|n| order.get(n).and_then(|s| s.last().copied())).collect();
        let same_members = |m: &Vec<usize>| {
            let mut m = m.clone();
            m.sort_unstable();
            m == correct
        };
        // Nothing to agree on when every member left or crashed.
        let agreed = correct.is_empty()
            || finals.len() == 1 && membership.get(finals.iter().next().unwrap()).is_some_and(|m| same_members(m));
        if !agreed {
            violations
                .push(Violation::Liveness { detail: format!("correct members {correct:?} end in views {finals:?}") });
        }
        // Migration: a member that moved ends in a view that has it at its new address.
        let mut moved: BTreeMap<usize, u32> = BTreeMap::new();
        moved.extend(trace.migrations.iter().copied());
        for (node, address) in moved.into_iter().filter(|&(n, _)| stayed(n)) {
            let last = trace.views.iter().rev().find(|v| v.node == node);
            let at = last.and_then(|v| v.members.iter().position(|&m| m == node).map(|r| v.addresses[r]));
            if at != Some(address) {
                violations.push(Violation::Migration { node, address });
            }
        }
    }
}

/// Total order: members that leave a view for the same next view delivered its casts in the same
/// sequence (virtual synchrony makes the sets equal; this checks the order); correct members that
/// stay in a view to the end delivered sequences of which one is a prefix of the other (equal once
/// the run went quiet). Across views this is the same order for members that survive together.
/// A member that crashed or was partitioned away is not held to the others' order (Ensemble's
/// total order is not uniform).
fn check_total(
    trace: &Trace,
    checked: &BTreeSet<ViewKey>,
    successor: &BTreeMap<(usize, ViewKey), ViewKey>,
    correct: &dyn Fn(usize) -> bool,
    violations: &mut Vec<Violation>,
) {
    let mut sequences: BTreeMap<(usize, ViewKey), Vec<MsgId>> = BTreeMap::new();
    for d in trace.deliveries.iter().filter(|d| d.cast) {
        if let Some(id) = MsgId::parse(&d.payload) {
            sequences.entry((d.node, d.view)).or_default().push(id);
        }
    }
    let installed: BTreeSet<(usize, ViewKey)> = trace.views.iter().map(|v| (v.node, v.view)).collect();
    // Members grouped by (view, where they went next): `None` for correct members still in it. A
    // member that left the group (its stack ended) went nowhere and is not compared (see the
    // leaver note in `check_views`).
    let exited = |n: usize| trace.exited.get(n).copied().unwrap_or(false);
    let mut groups: BTreeMap<(ViewKey, Option<ViewKey>), Vec<usize>> = BTreeMap::new();
    let mut keys: BTreeSet<(usize, ViewKey)> = installed;
    keys.extend(sequences.keys().copied());
    for &(node, view) in &keys {
        match successor.get(&(node, view)) {
            Some(&next) => groups.entry((view, Some(next))).or_default().push(node),
            None if exited(node) => {}
            None if correct(node) => groups.entry((view, None)).or_default().push(node),
            None => {}
        }
    }
    let empty = Vec::new();
    for ((view, next), nodes) in groups {
        if !checked.contains(&view) {
            continue;
        }
        for pair in nodes.windows(2) {
            let a = sequences.get(&(pair[0], view)).unwrap_or(&empty);
            let b = sequences.get(&(pair[1], view)).unwrap_or(&empty);
            let common = a.len().min(b.len());
            let differs = (0..common).find(|&i| a[i] != b[i]);
            let unequal = next.is_some() || trace.quiesced;
            let position = differs.or((unequal && a.len() != b.len()).then_some(common));
            if let Some(position) = position {
                violations.push(Violation::TotalOrder { view, nodes: (pair[0], pair[1]), position });
            }
        }
    }
}

/// The vector clock a simulated sender writes after a cast's tag: per origin node, how many of its
/// casts (index of the last delivered + 1) the sender had delivered: `u16` count, then `u32`s, LE.
pub fn encode_clock(clock: &[u32]) -> Vec<u8> {
    let mut out = (clock.len() as u16).to_le_bytes().to_vec();
    out.extend(clock.iter().flat_map(|c| c.to_le_bytes()));
    out
}

/// Reads the vector clock written by [`encode_clock`] after the tag.
pub fn decode_clock(payload: &[u8]) -> Option<Vec<u32>> {
    let rest = payload.get(TAG_LEN..)?;
    let n = usize::from(u16::from_le_bytes([*rest.first()?, *rest.get(1)?]));
    let entries = rest.get(2..2 + 4 * n)?;
    Some(entries.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// Causal order: when a node delivers cast `m` sent in view V, it has already delivered every
/// cast of V that `m`'s sender had delivered before casting `m` (read from the clock `m`
/// carries). Casts of earlier views are virtual synchrony's business (a member that joined later
/// never sees them).
fn check_causal(
    trace: &Trace,
    checked: &BTreeSet<ViewKey>,
    sent_view: &BTreeMap<MsgId, ViewKey>,
    violations: &mut Vec<Violation>,
) {
    let mut delivered: BTreeSet<(usize, MsgId)> = BTreeSet::new();
    for d in trace.deliveries.iter().filter(|d| d.cast) {
        let Some(id) = MsgId::parse(&d.payload) else { continue };
        if let Some(clock) = decode_clock(&d.payload).filter(|_| checked.contains(&d.view)) {
            for (origin, &count) in clock.iter().enumerate() {
                let Some(index) = count.checked_sub(1) else { continue };
                let missing = MsgId { origin, channel: Channel::Cast, index };
                // Casts of one origin are delivered in FIFO order (checked elsewhere), so the
                // latest dependency on each origin stands for the earlier ones.
                if sent_view.get(&missing) == Some(&d.view) && !delivered.contains(&(d.node, missing)) {
                    violations.push(Violation::Causal { id, node: d.node, missing });
                }
            }
        }
        delivered.insert((d.node, id));
    }
}

/// Safe delivery, as the application can observe it (extended virtual synchrony's "safe"): a cast
/// delivered before the view change begins (before `Block`) was held by every member of the view,
/// so if any member delivers it so in view V (and then crashes, or is cut off) every correct member
/// of V that goes on to a next view, or stays in V to the quiet end, delivers it in V too (uniform
/// agreement). Casts delivered during the view change are safe only among the members going on
/// together, which virtual synchrony already checks. Plain virtual synchrony does not give this: a
/// sender delivers its own cast at once and may crash before anyone else receives it.
fn check_safe(
    trace: &Trace,
    checked: &BTreeSet<ViewKey>,
    successor: &BTreeMap<(usize, ViewKey), ViewKey>,
    correct: &dyn Fn(usize) -> bool,
    violations: &mut Vec<Violation>,
) {
    let mut anywhere: BTreeMap<ViewKey, BTreeSet<MsgId>> = BTreeMap::new();
    let mut at: BTreeSet<(usize, ViewKey, MsgId)> = BTreeSet::new();
    for d in trace.deliveries.iter().filter(|d| d.cast) {
        if let Some(id) = MsgId::parse(&d.payload) {
            if !d.blocked {
                anywhere.entry(d.view).or_default().insert(id);
            }
            at.insert((d.node, d.view, id));
        }
    }
    let stayed = |n: usize| correct(n) && !trace.left.get(n).copied().unwrap_or(false);
    let installed: BTreeSet<(usize, ViewKey)> = trace.views.iter().map(|v| (v.node, v.view)).collect();
    for &(node, view) in &installed {
        let went_on = successor.contains_key(&(node, view)) || trace.quiesced;
        if !stayed(node) || !went_on || !checked.contains(&view) {
            continue;
        }
        for &id in anywhere.get(&view).into_iter().flatten() {
            if !at.contains(&(node, view, id)) {
                violations.push(Violation::Safe { id, view, node });
            }
        }
    }
}

/// A stable 64-bit digest of bytes (BLAKE3, truncated).
pub fn digest(bytes: &[u8]) -> u64 {
    let hash = blake3::hash(bytes);
    u64::from_le_bytes(hash.as_bytes()[..8].try_into().expect("8 bytes"))
}

/// Runs every oracle over `trace`.
pub fn check(trace: &Trace) -> Vec<Violation> {
    let mut violations = Vec::new();
    let sent: BTreeMap<MsgId, u64> = trace.sent.iter().map(|s| (s.id, s.digest)).collect();
    let sent_view: BTreeMap<MsgId, ViewKey> = trace.sent.iter().map(|s| (s.id, s.view)).collect();
    let correct = |node: usize| trace.crashed.get(node).is_some_and(Option::is_none);

    // No creation, integrity, no duplication, FIFO: one pass over the deliveries.
    // FIFO per view: what a member delivers from a sender in view V is a prefix, in order, of what
    // the sender sent in V (with one static view: of everything it sent).
    let mut sent_in_view: BTreeMap<(usize, Channel, ViewKey), Vec<u32>> = BTreeMap::new();
    for s in &trace.sent {
        sent_in_view.entry((s.id.origin, s.id.channel, s.view)).or_default().push(s.id.index);
    }
    let mut next: BTreeMap<(usize, usize, Channel, ViewKey), usize> = BTreeMap::new();
    let mut delivered: BTreeSet<(usize, MsgId)> = BTreeSet::new();
    for d in &trace.deliveries {
        let Some(id) = MsgId::parse(&d.payload) else {
            violations.push(Violation::Created {
                node: d.node,
                detail: format!("untagged payload of {} B", d.payload.len()),
            });
            continue;
        };
        let Some(&expected_digest) = sent.get(&id) else {
            violations.push(Violation::Created { node: d.node, detail: format!("{id:?} was never sent") });
            continue;
        };
        let channel_ok = match id.channel {
            Channel::Cast => d.cast,
            Channel::Send { dest } => !d.cast && dest == d.node,
        };
        if id.origin != d.origin || !channel_ok {
            let detail = format!("{id:?} delivered as {} from {}", if d.cast { "cast" } else { "send" }, d.origin);
            violations.push(Violation::Created { node: d.node, detail });
            continue;
        }
        if digest(&d.payload) != expected_digest {
            violations.push(Violation::Corrupt { id, node: d.node });
        }
        if sent_view.get(&id) != Some(&d.view) {
            violations.push(Violation::SendingView { id, node: d.node });
        }
        if !delivered.insert((d.node, id)) {
            violations.push(Violation::Duplicate { id, node: d.node });
            continue;
        }
        let position = next.entry((d.node, id.origin, id.channel, d.view)).or_insert(0);
        let in_view = sent_in_view.get(&(id.origin, id.channel, d.view)).map(Vec::as_slice).unwrap_or(&[]);
        match in_view.get(*position) {
            Some(&expected) if expected == id.index => *position += 1,
            Some(&expected) => {
                violations.push(Violation::Fifo { id, node: d.node, expected });
                *position = in_view.iter().position(|&i| i == id.index).map_or(*position, |p| p + 1);
            }
            None => violations.push(Violation::Fifo { id, node: d.node, expected: u32::MAX }),
        }
    }

    // Exactly once at every correct destination that goes on with the sender (at-most-once was
    // checked above): a message sent in view V must reach every correct member of V that leaves V
    // for the same next view as the sender, or stays in V to the end with it.
    let successor = successors(trace);
    let members: BTreeMap<ViewKey, &Vec<usize>> = trace.views.iter().map(|v| (v.view, &v.members)).collect();
    for s in &trace.sent {
        if !correct(s.id.origin) {
            continue;
        }
        let next = successor.get(&(s.id.origin, s.view));
        // Leaving the view by exiting (a leaver) is not going on together: the leaver's deliveries
        // are held to those of the members of its round's next view (`check_views`).
        let exited = |n: usize| trace.exited.get(n).copied().unwrap_or(false);
        let mut check_at = |node: usize| {
            let in_view = members.get(&s.view).is_none_or(|m| m.contains(&node));
            let together =
                successor.get(&(node, s.view)) == next && (next.is_some() || !exited(node) && !exited(s.id.origin));
            if correct(node) && in_view && together && !delivered.contains(&(node, s.id)) {
                violations.push(Violation::Lost { id: s.id, node });
            }
        };
        match s.id.channel {
            Channel::Cast => (0..trace.nodes).for_each(&mut check_at),
            Channel::Send { dest } => check_at(dest),
        }
    }
    check_views(trace, &successor, &mut violations);
    let mut guarantees: BTreeMap<ViewKey, Guarantees> = BTreeMap::new();
    for v in &trace.views {
        let g = guarantees.entry(v.view).or_default();
        g.total |= trace.total || v.guarantees.total;
        g.causal |= trace.causal || v.guarantees.causal;
        g.safe |= trace.safe || v.guarantees.safe;
    }
    let views = |f: fn(&Guarantees) -> bool| -> BTreeSet<ViewKey> {
        guarantees.iter().filter(|(_, g)| f(g)).map(|(&v, _)| v).collect()
    };
    check_total(trace, &views(|g| g.total), &successor, &correct, &mut violations);
    check_causal(trace, &views(|g| g.causal), &sent_view, &mut violations);
    check_safe(trace, &views(|g| g.safe), &successor, &correct, &mut violations);
    // State transfer: what a receiver installed is exactly what its view's provider streamed (its
    // state at the view's start, after the previous views' cuts).
    let provided: BTreeMap<ViewKey, u64> =
        trace.transfers.iter().filter(|t| t.provided).map(|t| (t.view, t.digest)).collect();
    for t in trace.transfers.iter().filter(|t| !t.provided) {
        if provided.get(&t.view) != Some(&t.digest) {
            violations.push(Violation::StateTransfer { view: t.view, node: t.node });
        }
    }

    // Quiescence.
    if !trace.quiesced {
        violations.push(Violation::Liveness { detail: "the run did not go quiet before its time limit".into() });
    }
    for (node, layers) in trace.buffered.iter().enumerate() {
        for &(layer, held) in layers {
            if held > 0 {
                violations.push(Violation::NotQuiescent { node, layer, held });
            }
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A correct trace of 3 nodes: each casts twice, node 0 sends once to node 1.
    fn good() -> Trace {
        let mut trace = Trace {
            nodes: 3,
            crashed: vec![None; 3],
            quiesced: true,
            buffered: vec![vec![("mnak", 0)]; 3],
            ..Trace::default()
        };
        let mut ids = Vec::new();
        for origin in 0..3 {
            for index in 0..2 {
                ids.push(MsgId { origin, channel: Channel::Cast, index });
            }
        }
        ids.push(MsgId { origin: 0, channel: Channel::Send { dest: 1 }, index: 0 });
        for id in ids {
            let mut bytes = id.tag().to_vec();
            bytes.extend_from_slice(b"payload");
            let payload = Bytes::from(bytes);
            trace.sent.push(Sent { id, time: Instant::ZERO, digest: digest(&payload), view: (0, 0) });
            let nodes: Vec<usize> = match id.channel {
                Channel::Cast => (0..3).collect(),
                Channel::Send { dest } => vec![dest],
            };
            for node in nodes {
                let cast = id.channel == Channel::Cast;
                trace.deliveries.push(Delivery {
                    time: Instant::ZERO,
                    node,
                    origin: id.origin,
                    cast,
                    payload: payload.clone(),
                    view: (0, 0),
                    blocked: false,
                });
            }
        }
        for node in 0..3 {
            trace.views.push(installed(node, (0, 0), vec![0, 1, 2]));
        }
        trace
    }

    fn installed(node: usize, view: ViewKey, members: Vec<usize>) -> Installed {
        Installed {
            time: Instant::ZERO,
            node,
            view,
            primary: true,
            guarantees: Guarantees::default(),
            stack: String::new(),
            addresses: members.iter().map(|&m| m as u32).collect(),
            members,
        }
    }

    #[test]
    fn a_migration_the_final_view_lacks_is_caught() {
        let mut trace = with_view_change();
        trace.quiesced = true;
        trace.migrations.push((1, 1 << 20));
        assert_eq!(check(&trace), vec![Violation::Migration { node: 1, address: 1 << 20 }]);
        // The same when the final view has it.
        for v in trace.views.iter_mut().filter(|v| v.view == (1, 7)) {
            v.addresses[1] = 1 << 20;
        }
        assert_eq!(check(&trace), vec![]);
        // Two members disagreeing on an address in one view break view agreement.
        trace.views.last_mut().unwrap().addresses[0] = 5;
        assert_eq!(check(&trace), vec![Violation::ViewAgreement { view: (1, 7) }]);
    }

    /// `good()` plus a second view (1, 7) of members 0 and 1, after node 2 crashed.
    fn with_view_change() -> Trace {
        let mut trace = good();
        trace.membership = true;
        trace.crashed[2] = Some(Instant::ZERO);
        trace.views.push(installed(0, (1, 7), vec![0, 1]));
        trace.views.push(installed(1, (1, 7), vec![0, 1]));
        trace
    }

    #[test]
    fn a_correct_view_change_passes() {
        assert_eq!(check(&with_view_change()), vec![]);
    }

    #[test]
    fn catches_disagreement_on_a_views_members() {
        let mut trace = with_view_change();
        trace.views[4].members = vec![0, 1, 2];
        assert!(check(&trace).iter().any(|v| matches!(v, Violation::ViewAgreement { view: (1, 7) })));
    }

    #[test]
    fn catches_members_of_one_view_running_different_stacks() {
        let mut trace = with_view_change();
        trace.views.iter_mut().filter(|v| v.view == (1, 7)).for_each(|v| v.stack = "vsync".into());
        assert_eq!(check(&trace), vec![]);
        trace.views.iter_mut().find(|v| v.view == (1, 7)).unwrap().stack = "total".into();
        assert!(check(&trace).contains(&Violation::ViewAgreement { view: (1, 7) }));
    }

    #[test]
    fn catches_views_installed_out_of_order() {
        let mut trace = with_view_change();
        trace.views.push(installed(1, (1, 3), vec![1]));
        assert!(check(&trace).iter().any(|v| matches!(v, Violation::ViewOrder { node: 1, .. })));
        // Two members installing the same two views in opposite orders.
        let mut trace = good();
        trace.views.push(installed(0, (1, 1), vec![0, 1]));
        trace.views.push(installed(0, (2, 2), vec![0, 1]));
        trace.views.push(installed(1, (2, 2), vec![0, 1]));
        trace.views.push(installed(1, (1, 1), vec![0, 1]));
        assert!(check(&trace).iter().any(|v| matches!(v, Violation::ViewOrder { .. })));
    }

    #[test]
    fn catches_a_virtual_synchrony_violation() {
        let mut trace = with_view_change();
        // Node 1 moves on to the next view without a cast that node 0 delivered in the old one.
        trace.deliveries.retain(|d| !(d.node == 1 && d.origin == 2 && d.cast));
        let violations = check(&trace);
        assert!(violations.contains(&Violation::VirtualSynchrony { view: (0, 0), nodes: (0, 1) }), "{violations:?}");
    }

    #[test]
    fn catches_delivery_outside_the_sending_view() {
        let mut trace = with_view_change();
        trace.deliveries[0].view = (1, 7);
        assert!(check(&trace).iter().any(|v| matches!(v, Violation::SendingView { node: 0, .. })));
    }

    #[test]
    fn catches_two_concurrent_primary_views() {
        let mut trace = good();
        // A partition: {0, 1} and {2} both claim to be primary.
        trace.views.push(installed(0, (1, 0), vec![0, 1]));
        trace.views.push(installed(1, (1, 0), vec![0, 1]));
        trace.views.push(installed(2, (1, 2), vec![2]));
        let violations = check(&trace);
        assert!(violations.contains(&Violation::Primary { views: ((1, 0), (1, 2)) }), "{violations:?}");
        // The minority marked non-primary is fine.
        trace.views.last_mut().unwrap().primary = false;
        assert!(!check(&trace).iter().any(|v| matches!(v, Violation::Primary { .. })));
    }

    #[test]
    fn catches_members_that_never_converge() {
        let mut trace = with_view_change();
        trace.views.pop(); // node 1 never installs the common view
        let violations = check(&trace);
        assert!(violations.iter().any(|v| matches!(v, Violation::Liveness { .. })), "{violations:?}");
    }

    /// Swaps, at `node`, its delivery of origin 0's last cast with origin 1's first cast (each
    /// origin's FIFO order is kept; only the total order changes, from position 1).
    fn swap_first_casts(trace: &mut Trace, node: usize) {
        let is = |d: &Delivery, origin| d.node == node && d.cast && d.origin == origin;
        let i = trace.deliveries.iter().rposition(|d| is(d, 0)).unwrap();
        let j = trace.deliveries.iter().position(|d| is(d, 1)).unwrap();
        trace.deliveries.swap(i, j);
    }

    #[test]
    fn catches_casts_delivered_in_different_orders() {
        let mut trace = good();
        trace.total = true;
        assert_eq!(check(&trace), vec![]);
        swap_first_casts(&mut trace, 1);
        assert_eq!(
            check(&trace),
            vec![
                Violation::TotalOrder { view: (0, 0), nodes: (0, 1), position: 1 },
                Violation::TotalOrder { view: (0, 0), nodes: (1, 2), position: 1 }
            ]
        );
        // Without total order asked for, FIFO alone holds and nothing is reported.
        trace.total = false;
        assert_eq!(check(&trace), vec![]);
        // Members that go on together to the next view are held to one order too.
        let mut trace = with_view_change();
        trace.total = true;
        swap_first_casts(&mut trace, 0);
        assert!(check(&trace).iter().any(|v| matches!(v, Violation::TotalOrder { nodes: (0, 1), .. })));
        // A member that crashed is not (the order is not uniform).
        let mut trace = with_view_change();
        trace.total = true;
        swap_first_casts(&mut trace, 2);
        assert!(!check(&trace).iter().any(|v| matches!(v, Violation::TotalOrder { .. })));
        // A member that stopped short of the others (a prefix) is caught once the run is quiet.
        let mut trace = good();
        trace.total = true;
        let last = trace.deliveries.iter().rposition(|d| d.node == 2 && d.cast).unwrap();
        trace.deliveries.remove(last);
        assert!(check(&trace).iter().any(|v| matches!(v, Violation::TotalOrder { nodes: (1, 2), position: 5, .. })));
    }

    /// Node 0 casts a question; node 1 delivers it and casts an answer (its clock says so); node
    /// 2 delivers both, in `order`.
    fn question_and_answer(order: [usize; 2]) -> Trace {
        let mut trace = Trace {
            nodes: 3,
            crashed: vec![None; 3],
            quiesced: true,
            causal: true,
            views: (0..3).map(|n| installed(n, (0, 0), vec![0, 1, 2])).collect(),
            ..Trace::default()
        };
        let question = MsgId { origin: 0, channel: Channel::Cast, index: 0 };
        let answer = MsgId { origin: 1, channel: Channel::Cast, index: 0 };
        let payload = |id: MsgId, clock: &[u32]| {
            let mut bytes = id.tag().to_vec();
            bytes.extend(encode_clock(clock));
            Bytes::from(bytes)
        };
        let msgs = [(question, payload(question, &[])), (answer, payload(answer, &[1, 0, 0]))];
        for (id, bytes) in &msgs {
            trace.sent.push(Sent { id: *id, time: Instant::ZERO, digest: digest(bytes), view: (0, 0) });
        }
        let deliver = |node, (id, payload): &(MsgId, Bytes)| Delivery {
            time: Instant::ZERO,
            node,
            origin: id.origin,
            cast: true,
            payload: payload.clone(),
            view: (0, 0),
            blocked: false,
        };
        trace.deliveries.push(deliver(0, &msgs[0]));
        trace.deliveries.push(deliver(1, &msgs[0]));
        trace.deliveries.push(deliver(1, &msgs[1]));
        trace.deliveries.push(deliver(0, &msgs[1]));
        for i in order {
            trace.deliveries.push(deliver(2, &msgs[i]));
        }
        trace
    }

    #[test]
    fn catches_an_answer_delivered_before_its_question() {
        assert_eq!(check(&question_and_answer([0, 1])), vec![]);
        let question = MsgId { origin: 0, channel: Channel::Cast, index: 0 };
        let answer = MsgId { origin: 1, channel: Channel::Cast, index: 0 };
        assert_eq!(
            check(&question_and_answer([1, 0])),
            vec![Violation::Causal { id: answer, node: 2, missing: question }]
        );
        // Without causal order asked for, nothing is reported.
        let mut trace = question_and_answer([1, 0]);
        trace.causal = false;
        assert_eq!(check(&trace), vec![]);
        let mut bytes = question.tag().to_vec();
        bytes.extend(encode_clock(&[3, 0, 7]));
        assert_eq!(decode_clock(&bytes), Some(vec![3, 0, 7]));
    }

    #[test]
    fn catches_a_cast_delivered_by_a_crashed_member_only() {
        let mut trace = with_view_change();
        trace.safe = true;
        assert_eq!(check(&trace), vec![]);
        // Node 2 delivered its own last cast and crashed; no survivor ever delivers it. Virtual
        // synchrony and exactly-once allow this (the sender crashed); safe delivery does not.
        let last = MsgId { origin: 2, channel: Channel::Cast, index: 1 };
        trace.deliveries.retain(|d| d.node == 2 || MsgId::parse(&d.payload) != Some(last));
        let violations = check(&trace);
        assert_eq!(
            violations,
            vec![
                Violation::Safe { id: last, view: (0, 0), node: 0 },
                Violation::Safe { id: last, view: (0, 0), node: 1 }
            ]
        );
        // Delivered during the view change (after `Block`), it is safe only among the survivors.
        trace.safe = true;
        trace.deliveries.iter_mut().filter(|d| d.node == 2).for_each(|d| d.blocked = true);
        assert_eq!(check(&trace), vec![]);
        trace.safe = false;
        trace.deliveries.iter_mut().for_each(|d| d.blocked = false);
        assert_eq!(check(&trace), vec![]);
    }

    #[test]
    fn catches_a_state_transfer_that_installs_other_bytes() {
        let mut trace = good();
        let t = |node, provided, digest| Transfer { view: (1, 9), node, provided, digest };
        trace.transfers = vec![t(0, true, 7), t(1, false, 7), t(2, false, 7)];
        assert_eq!(check(&trace), vec![]);
        trace.transfers[2].digest = 8;
        assert_eq!(check(&trace), vec![Violation::StateTransfer { view: (1, 9), node: 2 }]);
        // A receiver in a view whose provider streamed nothing installed something from nowhere.
        trace.transfers.remove(0);
        assert_eq!(check(&trace).len(), 2);
    }

    #[test]
    fn a_correct_trace_passes() {
        assert_eq!(check(&good()), vec![]);
    }

    #[test]
    fn catches_a_lost_delivery() {
        let mut trace = good();
        trace.deliveries.remove(4); // origin 0 index 1 at node 1
        assert!(matches!(check(&trace)[..], [Violation::Lost { node: 1, .. }]), "{:?}", check(&trace));
    }

    #[test]
    fn a_crashed_sender_need_not_be_delivered_but_a_crashed_receiver_is_excused_too() {
        let mut trace = good();
        trace.deliveries.retain(|d| !(d.origin == 2 && d.node == 0));
        trace.crashed[2] = Some(Instant::ZERO);
        assert_eq!(check(&trace), vec![]);
    }

    #[test]
    fn catches_a_duplicate() {
        let mut trace = good();
        let again = trace.deliveries[0].clone();
        trace.deliveries.push(again);
        assert!(matches!(check(&trace)[..], [Violation::Duplicate { node: 0, .. }]));
    }

    #[test]
    fn catches_reordering() {
        let mut trace = good();
        // Deliveries 0..3 are origin 0 index 0 at nodes 0,1,2; 3..6 are index 1.
        trace.deliveries.swap(0, 3);
        let violations = check(&trace);
        assert!(violations.iter().any(|v| matches!(v, Violation::Fifo { node: 0, expected: 0, .. })), "{violations:?}");
    }

    #[test]
    fn catches_creation_and_misattribution() {
        let mut trace = good();
        let mut forged = trace.deliveries[0].clone();
        forged.payload = Bytes::from_static(b"never sent by anyone");
        trace.deliveries.push(forged);
        let mut misattributed = trace.deliveries[0].clone();
        misattributed.origin = 2;
        trace.deliveries[0] = misattributed;
        let violations = check(&trace);
        assert_eq!(violations.iter().filter(|v| matches!(v, Violation::Created { .. })).count(), 2, "{violations:?}");
    }

    #[test]
    fn catches_a_send_delivered_at_the_wrong_node_or_as_a_cast() {
        let mut trace = good();
        let send = trace.deliveries.iter_mut().find(|d| !d.cast).expect("one send");
        send.node = 2;
        assert!(check(&trace).iter().any(|v| matches!(v, Violation::Created { node: 2, .. })));
    }

    #[test]
    fn catches_corruption() {
        let mut trace = good();
        let mut bytes = trace.deliveries[1].payload.to_vec();
        *bytes.last_mut().unwrap() ^= 1;
        trace.deliveries[1].payload = Bytes::from(bytes);
        assert!(matches!(check(&trace)[..], [Violation::Corrupt { node: 1, .. }]));
    }

    #[test]
    fn catches_buffers_left_after_quiescence_and_lack_of_quiescence() {
        let mut trace = good();
        trace.buffered[2] = vec![("pt2pt", 3)];
        trace.quiesced = false;
        let violations = check(&trace);
        assert!(violations.contains(&Violation::NotQuiescent { node: 2, layer: "pt2pt", held: 3 }));
        assert!(violations.iter().any(|v| matches!(v, Violation::Liveness { .. })));
    }
}
