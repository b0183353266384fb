//! The trace of a run as the oracles read it (messages, views, deliveries, state transfers), and
//! the violations they report.

use bytes::Bytes;
use motet_core::Instant;
use serde::Serialize;

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
pub(super) const TAG_LEN: usize = 12;

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
    /// Whether it is a state-transfer view (`ViewState::xfer_view`).
    pub xfer: bool,
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
    /// The stack cannot merge partitions (it lacks `Heal`): with `membership`, the correct
    /// members may end split, each in a final view of correct members only that each of them
    /// ends in too, instead of all in one.
    pub splits: bool,
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
    /// the tag, see [`encode_clock`](super::encode_clock)).
    pub causal: bool,
    /// Check safe delivery (uniform agreement) in every view (likewise).
    pub safe: bool,
    /// State transfers, in the order they happened.
    pub transfers: Vec<Transfer>,
    /// Endpoint migrations asked for, in order: (node, the address it moved to).
    pub migrations: Vec<(usize, u32)>,
    /// For each node, whether its application discards its own casts (`Action::Loopback(false)`;
    /// a node missing here takes them back): it must never deliver one, and is held to every
    /// other guarantee on the rest.
    pub no_loopback: Vec<bool>,
}

impl Trace {
    /// How long each delivery of a workload message took from its acceptance by the sender's
    /// endpoint, in virtual nanoseconds (deliveries of messages not in `sent` are left out).
    /// Repair and flow control show here first: a lost cast's delivery waits for its NAK and
    /// the retransmission.
    pub fn delivery_latencies(&self) -> Vec<u64> {
        let accepted: std::collections::BTreeMap<MsgId, Instant> =
            self.sent.iter().map(|sent| (sent.id, sent.time)).collect();
        self.deliveries
            .iter()
            .filter_map(|d| {
                let sent = accepted.get(&MsgId::parse(&d.payload)?)?;
                Some(d.time.0.saturating_sub(sent.0))
            })
            .collect()
    }

    /// Whether `id` is a cast of `node`'s own that its application discards: not delivered
    /// there, by design, so left out of what `node` is held to.
    pub fn discarded(&self, node: usize, id: MsgId) -> bool {
        id.origin == node && id.channel == Channel::Cast && self.no_loopback.get(node).copied().unwrap_or(false)
    }

    /// The pairs of `nodes` whose deliveries a check compares: each with the next, which covers
    /// them all while equality carries from pair to pair; every pair once one of them discards
    /// its own casts, since each comparison then leaves out that member's casts and no longer
    /// carries (a member between two others would hide their disagreeing on its casts).
    pub fn pairs(&self, nodes: &[usize]) -> Vec<(usize, usize)> {
        let discards = nodes.iter().any(|&n| self.no_loopback.get(n).copied().unwrap_or(false));
        match discards {
            false => nodes.windows(2).map(|w| (w[0], w[1])).collect(),
            true => Trace::every_pair(nodes),
        }
    }

    /// Every pair of `nodes`, once: for a relation that does not carry from pair to pair (one
    /// sequence a prefix of the other: `[m1]` and `[m2]` are each a prefix of `[]`).
    pub fn every_pair(nodes: &[usize]) -> Vec<(usize, usize)> {
        nodes.iter().enumerate().flat_map(|(i, &a)| nodes[i + 1..].iter().map(move |&b| (a, b))).collect()
    }
}

/// A broken guarantee.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind")]
pub enum Violation {
    /// A node whose application discards its own casts delivered one.
    OwnCast {
        /// Which message.
        id: MsgId,
        /// The node (its origin).
        node: usize,
    },
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
    /// A primary view that holds a majority of none of the primary views it follows.
    PrimaryWithoutMajority {
        /// The view.
        view: ViewKey,
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
    /// A state-transfer view broke a rule of the transfer (docs/ordering.md, "State transfer"):
    /// a provider other than its rank 0, two providers, an application cast delivered in it, or a
    /// receiver that went on to a normal view with others without having installed the state.
    TransferRule {
        /// The state-transfer view.
        view: ViewKey,
        /// The node concerned.
        node: usize,
        /// Which rule.
        broke: &'static str,
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
