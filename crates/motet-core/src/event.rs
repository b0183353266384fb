//! Events: intra-stack communication between adjacent layers (thesis §2.1.6). Typed and split by
//! direction ([`Up`], [`Dn`]); each variant carries exactly the fields it needs, instead of
//! Ensemble's record of optional fields (STYLE principle 4). Application actions ([`Action`]) and
//! upcalls ([`AppEvent`]) are separate types again: an action, an event and a header are three
//! distinct things (thesis §2.3.3).

use crate::view::{RankSet, ViewState};
use crate::Rank;
use motet_wire::{Header, HeaderStack, Payload};
use std::sync::Arc;

/// A message in flight through a stack: typed headers pushed by the layers above plus a zero-copy
/// payload (thesis §2.1.5).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Msg {
    /// Headers, in push order (the highest layer's first).
    pub hdrs: HeaderStack,
    /// The application bytes.
    pub payload: Payload,
}

impl Msg {
    /// A message with no header yet.
    pub fn new(payload: Payload) -> Msg {
        Msg { hdrs: HeaderStack::with_capacity(motet_wire::hdr::HEADER_CAPACITY), payload }
    }
    /// A copy with only the first `len` headers: the message as it reached the layer below which
    /// the others were pushed (the bypass builds a message whole before the actions that keep
    /// copies of it run).
    pub(crate) fn reached(&self, len: usize) -> Msg {
        let mut copy = self.clone();
        copy.hdrs.truncate(len);
        copy
    }
    /// Pushes this layer's header (on the way down).
    pub fn push(&mut self, header: impl Into<Header>) {
        self.hdrs.push(header.into());
    }
    /// Pops the header of the layer below's peer (on the way up).
    pub fn pop(&mut self) -> Option<Header> {
        self.hdrs.pop()
    }
    /// Pops a header that must belong to the layer whose header type is `H`; `None` when the
    /// stack is empty or the top header is another layer's (the caller drops the message).
    pub fn pop_as<H: TryFrom<Header>>(&mut self) -> Option<H> {
        self.hdrs.pop().and_then(|h| H::try_from(h).ok())
    }
    /// This message with `header` pushed.
    pub fn with(mut self, header: impl Into<Header>) -> Msg {
        self.push(header);
        self
    }
}

/// Per-message quality of service for casts. Room for RMP's delivery levels (unreliable, reliable,
/// source-ordered, total, K-resilient, majority, safe) in a later issue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Qos {
    /// Delivered at most once, possibly not at all; never retransmitted nor flow controlled.
    Unreliable,
    /// Reliable FIFO (the stack's guarantee).
    Reliable,
    /// Totally ordered (asked by `appl` in a stack with a total-order layer, which turns it
    /// back into `Reliable` below itself).
    Total,
    /// Causally ordered (likewise, by a causal-order layer).
    Causal,
    /// Delivered only once every member holds it (likewise, by a safe-delivery layer).
    Safe,
}

/// What the `stable` layer tells the layers below: per origin rank, how many casts every live
/// member has received (`stable`) and the most any live member is known to have received (`max`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stability {
    /// Casts `0..stable[o]` of origin `o` are held by every live member.
    pub stable: Vec<u64>,
    /// Some live member holds casts `0..max[o]` of origin `o`.
    pub max: Vec<u64>,
}

/// Events travelling down the stack (towards the network).
#[derive(Clone, Debug)]
pub enum Dn {
    /// A multicast to the view.
    Cast {
        /// The message.
        msg: Msg,
        /// Its guarantee.
        qos: Qos,
    },
    /// A point-to-point message.
    Send {
        /// Destination rank.
        dest: Rank,
        /// The message.
        msg: Msg,
    },
    /// These members have failed: stop talking to them and drop what they send (thesis Table 2.1
    /// `Fail`). Emitted by membership layers; with static membership, by the failure detector of the
    /// driver.
    Fail(RankSet),
    /// The `stable` layer asks for the per-origin receive counts (answered by [`Up::NumCasts`]).
    StableReq,
    /// A new stability vector (thesis Table 2.2 `Stability`).
    Stable(Arc<Stability>),
    /// This endpoint leaves: the stack stops sending.
    Leave,
    /// (`top` → every layer) the stack is replaced by the next view's and lingers only to finish
    /// retransmissions (`top.linger`): `suspect` suspects no one any more.
    Replaced,
    /// (node → `bottom`) This node shares this view's key with a stack of another view and
    /// drops what comes compressed under it: `bottom` asks the members for the full form.
    KeyShared,
    /// The application is (`true`) or is no longer (`false`) behind on its events
    /// ([`Action::Lagging`]): the flow-control layers withhold credit meanwhile, so senders wait
    /// for it (Ensemble test 26, "slow receiver: bounded buffering, sender throttled").
    Lagging(bool),
    /// View-change flush (thesis Table 2.1 `Block`): stop the application and drain what is in
    /// flight; every layer passes it down once its own pending sends are out and acknowledged, and
    /// `bottom` reflects it as [`Up::BlockOk`].
    Block,
    /// Deliver casts up to this cut (per origin counts) before the view ends, and none of a failed
    /// origin's casts beyond it. Answered by [`Up::CutReached`].
    Cut(Arc<[u64]>),
    /// (`sync` → `mnak`) This member delivered the cut of `coord`'s round and is committed to its
    /// view, which `coord` casts next, once: `mnak` expects one more cast of `coord`, so that a
    /// lost view is NAKed (and asked of the other members if `coord` does not answer: a
    /// coordinator that leaves exits as it casts its view) instead of waited for until the commit
    /// timeout.
    AwaitView {
        /// The round's coordinator.
        coord: Rank,
    },
    /// The coordinator's membership layer asks `sync` to start flush round `round`, excluding
    /// `failed`.
    SyncFlush {
        /// Round number, increasing per coordinator.
        round: u64,
        /// Members being excluded.
        failed: RankSet,
    },
    /// Group-level gossip to another partition (leaves the bottom on the group's gossip channel):
    /// to one address, or to every known peer of the group.
    Gossip {
        /// The destination, or `None` for every peer.
        to: Option<crate::view::Address>,
        /// The message.
        msg: Msg,
    },
    /// (`inter` → `intra`, at a coordinator) flush this view for a merge: run a round, and report
    /// `MergeReady` instead of installing a view.
    MergeFlush,
    /// (`inter` → `merge`, at a flushed coordinator) ask `contact`'s partition to merge ours in;
    /// `merge` repeats the request until it is answered (`MergeGranted`, `MergeDenied`) or times
    /// out (`MergeFailed`).
    MergeRequest {
        /// The other partition's coordinator.
        contact: crate::view::Address,
        /// Our partition after its flush.
        view: Box<motet_wire::hdr::intra::FullView>,
        /// When the merge flush began: `merge_timeout` counts from here, so a flush that took
        /// long leaves the request less time, and the round ends before its members' own
        /// `commit_timeout` (which counts from their cut, after this).
        since: crate::time::Instant,
    },
    /// (`inter` → `merge`, at the granter) send the merged view to the requester, and answer its
    /// repeated requests with it.
    MergeGrant {
        /// The requester's coordinator.
        contact: crate::view::Address,
        /// The requester's view id, as (ltime, coordinator).
        request: (u64, u64),
        /// The merged view.
        view: Box<motet_wire::hdr::intra::FullView>,
    },
    /// (`inter` → `merge`, at a member that is not its partition's coordinator) pass a request,
    /// and its repeats, on to our coordinator at `to`: the requester had the address of an earlier
    /// coordinator (the contact it learnt merged into another partition meanwhile).
    MergeForward {
        /// Our coordinator's address.
        to: crate::view::Address,
        /// The requesting partition's view.
        view: Box<motet_wire::hdr::intra::FullView>,
    },
    /// (`inter` → `merge`) refuse a request: we are busy with another view change.
    MergeDeny {
        /// The requester's coordinator.
        contact: crate::view::Address,
        /// The requester's view id, as (ltime, coordinator).
        request: (u64, u64),
    },
    /// (`inter` → `intra`) cast this view, concluding merge round `round`.
    CastFull {
        /// The round the view concludes.
        round: u64,
        /// The view.
        view: Arc<ViewState>,
    },
    /// The coordinator's membership layer asks `sync` to announce the cut of round `round`.
    SyncCut {
        /// Round number.
        round: u64,
        /// Per origin, casts every survivor must deliver in this view.
        cut: Arc<[u64]>,
    },
}

/// Events travelling up the stack (towards the application and the membership layers).
#[derive(Clone, Debug)]
pub enum Up {
    /// First event of a stack, injected at the bottom (thesis §2.3.4).
    Init,
    /// A multicast received from `origin`.
    Cast {
        /// Sender's rank.
        origin: Rank,
        /// The message.
        msg: Msg,
        /// The guarantee it was sent with.
        qos: Qos,
    },
    /// A point-to-point message received from `origin`.
    Send {
        /// Sender's rank.
        origin: Rank,
        /// The message.
        msg: Msg,
    },
    /// Per origin, how many casts this member has received in order (thesis Table 2.2 `NumCasts`).
    NumCasts(Arc<[u64]>),
    /// Flow control changed: casts (`dest == None`) or sends to `dest` are blocked or released.
    FlowBlock {
        /// `None` for casts, `Some(rank)` for sends to `rank`.
        dest: Option<Rank>,
        /// Blocked (true) or released (false).
        blocked: bool,
    },
    /// These members are suspected of having failed (thesis Table 2.1 `Suspect`).
    Suspect(RankSet),
    /// The coordinator is now `rank` (thesis Table 2.1 `Elect`).
    Elect(Rank),
    /// The flush reached the bottom: nothing of ours is pending; per origin, casts received.
    BlockOk(Arc<[u64]>),
    /// Every cast up to the cut has been delivered.
    CutReached,
    /// (At the coordinator) member `from` is flushed for round `round`, with its cast counts.
    FlushOk {
        /// The member.
        from: Rank,
        /// The round.
        round: u64,
        /// Its per-origin cast counts.
        counts: Arc<[u64]>,
        /// The ranks it failed in the rounds it followed in this view: it hears nothing from
        /// them, so a round they survive cannot finish.
        failed: RankSet,
    },
    /// (At the coordinator) member `from` delivered the cut of round `round`.
    CutOk {
        /// The member.
        from: Rank,
        /// The round.
        round: u64,
    },
    /// (At members) `sync` acknowledged the cut of `round` announced by `coord`: only a view from
    /// that round may be installed.
    CutDone {
        /// The coordinator of the round.
        coord: Rank,
        /// The round.
        round: u64,
    },
    /// (At members) `sync` follows round `round` of `coord` (its `Flush` came): a coordinator
    /// whose cut a member delivered may start a later round (a member suspected in the cut
    /// phase), and is then still concluding the view change for it.
    Flushing {
        /// The coordinator of the round.
        coord: Rank,
        /// The round.
        round: u64,
    },
    /// (At members, `sync` → `intra`) round `round` of `coord`, the coordinator whose cut this
    /// member delivered in an earlier round, excludes this member: the view it committed to will
    /// never come, and it goes on alone now instead of at its commit timeout.
    Excluded {
        /// The coordinator of the round.
        coord: Rank,
        /// The round that excludes this member.
        round: u64,
    },
    /// Group-level gossip from another partition.
    Gossip(Msg),
    /// (`heal` → `inter`) another partition of the group was found; its view id is larger, so we
    /// ask to merge into it.
    MergeWith {
        /// Its coordinator's address.
        contact: crate::view::Address,
        /// Its view.
        view: crate::view::ViewId,
    },
    /// (`merge` → `inter`) another partition's coordinator asks to merge into ours (raised once
    /// per request; `merge` answers repeats of a request already granted).
    MergeRequest(Box<motet_wire::hdr::intra::FullView>),
    /// (`merge` → `inter`) our request was granted: this is the merged view.
    MergeGranted(Box<motet_wire::hdr::intra::FullView>),
    /// (`merge` → `inter`) our request was refused (the other coordinator was busy).
    MergeDenied,
    /// (`merge` → `inter`) our request went unanswered for `merge_timeout`.
    MergeFailed,
    /// (`intra` → `inter`) the merge flush of `round` is complete; these ranks survive it.
    MergeReady {
        /// The round.
        round: u64,
        /// Surviving ranks of the current view.
        survivors: Vec<Rank>,
    },
    /// A member asks to leave (membership layers exclude it at the next view).
    LeaveReq(Rank),
    /// (`appl` → `switch`) our application asks the group to run `spec` from the next view.
    SwitchReq(crate::spec::StackSpec),
    /// (`appl` → `migrate`) our endpoint moves to this address from the next view on.
    MigrateReq(crate::view::Address),
    /// (`appl` → `xfer`) a chunk of our application's state, to stream to the others.
    XferChunk {
        /// The bytes.
        payload: Payload,
        /// The last chunk.
        last: bool,
    },
    /// (`appl` → `xfer`) our application is done with this view's state transfer.
    XferDone,
    /// (`xfer` → `intra`) every member is done: end the transfer view.
    XferComplete,
    /// (`switch` → `intra`) a switch request from `origin`, delivered in this view.
    Switch {
        /// Who asked.
        origin: Rank,
        /// The stack asked for.
        spec: crate::spec::StackSpec,
    },
    /// (`migrate` → `intra`) member `origin` moves to `address`: the next view has it there.
    Migrate {
        /// Who moves.
        origin: Rank,
        /// Its new address.
        address: crate::view::Address,
    },
    /// The next view is agreed: leaves the top of the stack so the driver builds its stack
    /// (thesis §2.1.9, `NewView`).
    NewView(Arc<ViewState>),
    /// This stack has nothing left to do (thesis §2.1.9, `Exit`).
    Exit,
}

/// The destinations of a send.
pub type Ranks = smallvec::SmallVec<[Rank; 4]>;

/// What the application asks of its endpoint (thesis §2.1.10 "actions").
#[derive(Clone, Debug)]
pub enum Action {
    /// Multicast to the view.
    Cast(Payload),
    /// Send to each of these ranks (inline up to four: a send to one member allocates nothing;
    /// [`Action::send`] builds that one).
    Send(Ranks, Payload),
    /// A cast for these ranks only (a subcast): it is ordered with the stack's guarantee among all
    /// casts (FIFO, total, causal, safe) and delivered as a cast at the named members only.
    Subcast(Vec<Rank>, Payload),
    /// Leave the group.
    Leave,
    /// The application is (`true`) or is no longer (`false`) behind on its events: a driver says
    /// so when the application's event queue is full, and again once it has caught up. Meanwhile
    /// the flow-control layers (`mflow`, `pt2ptw`) report credit only every `lag_report_interval`,
    /// `lag_trickle_bytes` at a time, so the other members' casts and sends to this member wait at their senders instead of
    /// piling up here, and `appl` refuses this member's own casts (`FlowBlocked`: they would be
    /// delivered back to it) until it catches up; the layers' own casts still go. A flush lifts the
    /// withheld credit (not the refusal) for the rest of the view. No effect on the credit of a
    /// stack without flow control.
    Lagging(bool),
    /// Whether this member's application gets its own casts back (`true`, the default) or not:
    /// RMP's Message Bus `loop-back` flag, JGroups' `discardOwnMessages`, Spread's
    /// `SELF_DISCARD`. Off, `appl` delivers every cast but this member's own; its own still take
    /// their place in the order below `appl` (a sequencer orders them, the flush counts them),
    /// so the other members see no difference. A setting of this member, not of the group: the
    /// node carries it to the stacks of its later views.
    Loopback(bool),
    /// Ask the whole group to run this stack from the next view on (protocol switching; the stack
    /// must have the `Switch` property, and so must the new one).
    Switch(crate::spec::StackSpec),
    /// Move this endpoint to a new address (endpoint migration; the stack needs the `Migrate`
    /// property). Members keep using the old address until the next view, which has the new one:
    /// the driver keeps receiving at both until then.
    Migrate(crate::view::Address),
    /// (The provider, after `AppEvent::XferProvide`) a chunk of the application's state.
    XferChunk {
        /// The bytes.
        payload: Payload,
        /// The last chunk.
        last: bool,
    },
    /// This member is done with the state transfer of the current view (the provider after its
    /// last chunk, a receiver after installing the state).
    XferDone,
}

impl Action {
    /// A send of `payload` to the member at `rank`.
    pub fn send(rank: Rank, payload: Payload) -> Action {
        Action::Send(smallvec::smallvec![rank], payload)
    }
}

/// What the endpoint tells the application (thesis §2.1.10 "callbacks").
#[derive(Clone, Debug, PartialEq)]
pub enum AppEvent {
    /// A view was installed; `rank` is this endpoint's rank in it.
    View {
        /// The view.
        view: Arc<ViewState>,
        /// This endpoint's rank.
        rank: Rank,
    },
    /// A multicast.
    Cast {
        /// Sender's rank in the current view.
        origin: Rank,
        /// The bytes.
        payload: Payload,
    },
    /// A point-to-point message.
    Send {
        /// Sender's rank in the current view.
        origin: Rank,
        /// The bytes.
        payload: Payload,
    },
    /// The group is about to change view: stop sending until the next view (membership issue).
    Block,
    /// Flow control: casts (`dest == None`) or sends to `dest` are blocked or released. While
    /// blocked, the matching actions fail with [`crate::ApiError::FlowBlocked`].
    FlowBlock {
        /// `None` for casts, `Some(rank)` for sends to `rank`.
        dest: Option<Rank>,
        /// Blocked (true) or released (false).
        blocked: bool,
    },
    /// This member provides the state in this state-transfer view: stream it with
    /// `Action::XferChunk` (the last one marked), then `Action::XferDone`.
    XferProvide,
    /// A chunk of the provider's state (in order); install the state when `last`, then
    /// `Action::XferDone`.
    XferChunk {
        /// The bytes.
        payload: Payload,
        /// The last chunk.
        last: bool,
    },
    /// The endpoint has left the group; no more events follow from it.
    Exit,
}

macro_rules! reasons {
    ($($name:ident: $doc:literal),* $(,)?) => {
        /// Why an input was dropped. Every drop is counted by reason (STYLE principle 6).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
        pub enum DropReason { $(#[doc = $doc] $name,)* }
        impl DropReason {
            /// Every reason, in declaration order.
            pub const ALL: &'static [DropReason] = &[$(DropReason::$name,)*];
            /// The reason's name.
            pub fn name(self) -> &'static str {
                match self { $(DropReason::$name => stringify!($name),)* }
            }
        }
    };
}

reasons! {
    Malformed: "the datagram did not decode, or a header holds what no correct member sends (a timestamp out of order, a switch request its sender's own member would have refused)",
    OtherVersion: "a datagram of another wire version: a member running another release (members of one group must run the same)",
    UnknownConn: "no stack has this connection id (an old view, another group, or noise)",
    SharedKey: "a compressed datagram under a 32-bit key that stacks of two views share at this node: which one it is for cannot be told, so neither gets it (the layers' NAKs bring it in full; docs/bypass.md, \"Connection ids\")",
    NotForMe: "a send addressed to another rank, or an origin outside the view",
    FromFailed: "the origin was marked failed",
    HeaderMismatch: "a layer popped a header that is not its own, or one its layer sends only reliably on an unreliable cast, or a message no layer claims",
    Duplicate: "already delivered",
    OutOfWindow: "a sequence number too far ahead to buffer",
    Oversized: "the encoded datagram exceeds the maximum size",
    FragViolation: "fragments arrived out of the expected order or count",
    Orphan: "part of a failed member's message that can never be completed",
    Disabled: "the stack has left or exited",
    AfterEnd: "a state-transfer chunk after its stream's last chunk, or after its provider said it was done",
    Gossip: "a stability row or columns of the wrong length, rank or order, a failure detector's ping from a rank outside the view, or gossip no layer of the stack takes (from a partition running another stack)",
    Unasked: "a retransmission of a cast this member never asked for (no NAK of it was sent): a faulty member's, which would have filled another origin's buffers",
    OverBudget: "a NAK that asked for more retransmissions than its requester may have for now (`mnak`/`pt2pt` `retransmit_rate`): answered in part, the rest at its re-ask",
}

macro_rules! counters {
    (@width) => { 1 };
    (@width $($layer:ident),+) => { 0 $(+ counters!(@one $layer))+ };
    (@one $layer:ident) => { 1 };
    ($($name:ident [$($layer:ident),*]: $doc:literal),* $(,)?) => {
        /// Protocol activity counters, kept per stack by the layer that counts (and by the
        /// simulator per run): [`crate::layer::Stats::counter`] gives a counter's total,
        /// [`crate::layer::Stats::by_layer`] what each layer that counts it counted.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
        pub enum Counter { $(#[doc = $doc] $name,)* }
        impl Counter {
            /// Every counter, in declaration order.
            pub const ALL: &'static [Counter] = &[$(Counter::$name,)*];
            /// The counter's name.
            pub fn name(self) -> &'static str {
                match self { $(Counter::$name => stringify!($name),)* }
            }
            /// The layers that count it; none for the node's own counters (around the stacks).
            pub fn layers(self) -> &'static [crate::layers::LayerKind] {
                match self { $(Counter::$name => &[$(crate::layers::LayerKind::$layer),*],)* }
            }
        }
        /// Where each counter's slots start in `Stats`: one slot per layer that counts it, one for
        /// a counter of the node's.
        pub(crate) const COUNTER_SLOT: [usize; Counter::ALL.len()] = {
            let widths = [$(counters!(@width $($layer),*)),*];
            let mut out = [0; Counter::ALL.len()];
            let (mut i, mut at) = (0, 0);
            while i < out.len() {
                out[i] = at;
                at += widths[i];
                i += 1;
            }
            out
        };
        /// Slots of all counters together.
        pub(crate) const COUNTER_SLOTS: usize = 0 $(+ counters!(@width $($layer),*))*;
    };
}

counters! {
    Retransmit [Mnak, Pt2pt]: "messages retransmitted (timer or NAK driven): casts by `mnak`, sends by `pt2pt`",
    NakSent [Mnak, Pt2pt]: "negative acknowledgements sent: for casts by `mnak`, for sends by `pt2pt`",
    AckSent [Mflow, Pt2pt, Pt2ptw]: "acknowledgements sent: `pt2pt`'s of sends received, and the flow-control layers' reports of what was consumed (`mflow`'s credit for casts, `pt2ptw`'s for sends)",
    FlowBlocked [Mflow, Pt2ptw]: "times a flow-control layer blocked its sender (`mflow` casts, `pt2ptw` sends)",
    FlowQueueOver [Mflow, Pt2ptw]: "messages a blocked flow-control layer queued past `pending_max` (the layers' own messages, such as a sequencer's orders, pass `appl`'s refusal; behind a lagging member they may exceed it)",
    Gossip [Stable]: "stability messages sent (rows to the coordinator, its columns cast back)",
    Fragmented [Frag]: "messages split into fragments",
    Suspected [Suspect]: "members newly suspected by the failure detector",
    DetectorWidened [Suspect]: "times the failure detector of a view went from watching through the coordinator to all-to-all heartbeats (a suspicion, a view change, or another member's heartbeat)",
    Stalled [Suspect]: "sweeps of the failure detector that came half a timeout or more late (this member did not run: stopped, descheduled, or its event loop not served); the time missed counts against no member",
    AckOverdue [Safe, Pt2pt]: "members suspected because they did not acknowledge within a deadline though audible (so the failure detector kept them): held casts within `safe.ack_timeout`, or this member's sends within `pt2pt.ack_timeout`",
    CreditOverdue [Mflow, Pt2ptw]: "receivers suspected because they held a blocked sender's window shut without reporting credit within `mflow.credit_timeout` (casts) or `pt2ptw.credit_timeout` (sends), though audible (so the failure detector kept them)",
    XferStalled [Xfer]: "members a state transfer suspected because it made no progress within `xfer.stall_timeout` while waiting for them (the provider's stream, or a member's `Done`)",
    FlushTimedOut [Intra]: "members a coordinator suspected because they did not answer its flush round within `intra.flush_timeout` (audible but never answering: the failure detector suspects the silent ones first)",
    MergeDenied [Merge]: "merge requests answered `busy` (the requester keeps asking)",
    MergeUnanswered [Merge]: "merge requests never answered within `merge_timeout` of the start of their merge flush (the requester's partition went on alone, blocked until then)",
    CompressedOut []: "datagrams sent with compressed headers (the common trace's template and a sequence number; counted by the node)",
    CompressedIn []: "compressed datagrams received and expanded (counted by the node)",
    ConnCollision []: "stacks built at this node whose 32-bit key (a view's, its gossip's or a member's sends') another stack of another view already has here: compressed datagrams under it are dropped, and the layers' repair brings them in full (counted by the node; docs/bypass.md, \"Connection ids\")",
}
