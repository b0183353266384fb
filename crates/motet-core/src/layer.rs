//! The layer model (thesis §2.1.8-2.1.9; HvR §2). A layer is a deterministic state machine: state
//! built from the [`ViewState`](crate::ViewState), a header type (in `motet_wire::hdr`), and
//! handlers. Handlers never call their neighbours and never touch clocks, sockets, threads or
//! randomness: they push outputs into an [`Outbox`] and the [`Stack`](crate::Stack) dispatches
//! them (STYLE principle 2; Ensemble's functional composition, thesis §5.2).

use crate::event::{AppEvent, Counter, Dn, DropReason, Msg, Up};
use crate::fast::{DnStep, Down, UpStep};
use crate::layers::LayerKind;
use crate::time::Instant;
use crate::Rank;
use motet_wire::Header;
use std::collections::VecDeque;

/// A micro-protocol layer.
pub trait Layer: core::fmt::Debug {
    /// Handles an event coming from the layer below (or the network, for `bottom`).
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>);
    /// Handles an event coming from the layer above.
    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>);
    /// Handles an alarm this layer requested with [`Outbox::alarm`] (thesis §2.3.2: timers are
    /// events). `out.now()` is the current time.
    fn handle_timer(&mut self, out: &mut Outbox<'_>) {
        let _ = out;
    }
    /// Asserts the layer's internal invariants (called by the simulator after every step).
    fn check_invariants(&self);
    /// Messages this layer holds for retransmission or reordering (zero after quiescence).
    fn buffered(&self) -> usize {
        0
    }

    /// Fast path ([`crate::fast`]): the condition of the common case of a message going down,
    /// and what the layer does to it then; `None` (the default: no declaration) sends the
    /// message down the layered path. Must not depend on anything but the state and `down`.
    fn fast_dn(&self, down: &Down) -> Option<DnStep> {
        let _ = down;
        None
    }
    /// The common case's action on this layer's state, when every condition of the trace held.
    /// It sees `down` as the condition did, not the message: the bypass builds the message while
    /// it asks the conditions (each header is pushed as its layer declares it), so an action that
    /// needed the bytes would have to run before the conditions below it. A layer that keeps a
    /// copy says so in its step (`keep`). May count, set the alarm and deliver, never emit events.
    fn fast_dn_apply(&mut self, down: &Down, out: &mut Outbox<'_>) {
        let _ = (down, out);
    }
    /// Fast path: the condition of the common case of a message going up (its header not yet
    /// popped), and what the layer does to it then; `None` (the default) takes the layered path.
    fn fast_up(&self, up: &crate::fast::Up<'_>) -> Option<UpStep> {
        let _ = up;
        None
    }
    /// The common case's action on this layer's state; `msg` has this layer's header popped.
    fn fast_up_apply(&mut self, up: &crate::fast::Up<'_>, msg: &Msg, out: &mut Outbox<'_>) {
        let _ = (up, msg, out);
    }
    /// Delayed processing ([`crate::fast`]): takes the copy of a message this layer's condition
    /// asked to keep (`keep` in its step), after the message was transmitted or delivered. `msg`
    /// is the message as the action saw it; `out.now()` is the time of the input that carried it.
    /// Runs before any input that is not an application message on a compiled trace, so only the
    /// conditions and actions of such traces may run before it: they must not read what it writes.
    /// May set the alarm; never counts (`Bypass::Diff` compares counters at every input) and never
    /// emits events.
    fn fast_keep(&mut self, kept: &crate::fast::Kept, msg: Msg, out: &mut Outbox<'_>) {
        let _ = (kept, msg, out);
        unreachable!("a layer whose step asks to keep a message takes it in fast_keep")
    }
    /// How long a copy this layer keeps may wait for [`Layer::fast_keep`] after the input that
    /// carried it without changing what the layer does: no alarm that `fast_keep` sets falls
    /// earlier than this after the input (what else reads the copies, any input but an
    /// application message on a compiled trace, finds them filed anyway). Delayed processing goes
    /// in batches, and a stack files a batch that has not filled at the latest this long after
    /// its first copy (docs/bypass.md, "Delayed processing"; `Duration::MAX`: for ever, until the
    /// stack's next input that needs it). Default: no wait, the driver's next idle moment (the
    /// copies are then due as a full batch is).
    /// Checked in debug builds: an alarm `fast_keep` sets sooner than this after the copy's input
    /// fails an assertion.
    fn fast_keep_wait(&self) -> crate::Duration {
        crate::Duration::ZERO
    }
    /// A splitting layer's parts ([`crate::fast::DnStep::parts`]): part `index` of `msg` (the
    /// message as it reached this layer), with this layer's header pushed, exactly as its
    /// handler would emit it. Called only for a layer whose step declared parts, after its action.
    fn fast_split(&self, msg: &Msg, index: u32) -> Msg {
        let _ = (msg, index);
        unreachable!("a layer whose step declares parts makes them in fast_split")
    }
    /// A joining layer's action ([`crate::fast::UpStep::join`]): takes the part that completes a
    /// message (this layer's header popped) and gives back the whole message, as its handler
    /// would pass it up. Same rules as an action: may count, never emits events.
    fn fast_join(&mut self, up: &crate::fast::Up<'_>, msg: Msg, out: &mut Outbox<'_>) -> Msg {
        let _ = (up, msg, out);
        unreachable!("a layer whose step declares a join completes the message in fast_join")
    }
    /// A releasing layer's held messages ([`crate::fast::UpStep::release`]): the next message
    /// that may now go on up after the trace's message from `origin`, and its own origin (the same
    /// for a FIFO layer's run; another member's for an ordering layer's), with the layer's state
    /// moved past it as its handler moves it; `None` when the run ends. Same rules as an action.
    fn fast_release(&mut self, origin: Rank, cast: bool, out: &mut Outbox<'_>) -> Option<(Rank, Msg)> {
        let _ = (origin, cast, out);
        unreachable!("a layer whose step declares a release hands the messages over in fast_release")
    }
    /// Whether a message whose first header is this layer's `header` carries application data
    /// (`appl`'s data header; `frag`'s later parts, which carry only the headers from `frag` down).
    /// The bypass counts such messages in its hit rate; the layers' own messages (credit,
    /// acknowledgements) are counted apart. Default: no.
    fn fast_data(&self, header: &Header) -> bool {
        let _ = header;
        false
    }
    /// Trace compilation ([`crate::fast`]): `Some(len_max)` when this layer is *inert* on `trace`
    /// in its current state: every message of the trace with at most `len_max` payload bytes
    /// meets its condition, gets (going down) or has (going up) its template header, keeps its
    /// guarantee, and needs no action and no reply here, until this layer next runs a layered-path
    /// handler. Its own fast-path actions on other traces must not end this. The stack then
    /// leaves the layer out of the compiled trace. `None` (the default): the layer is asked per
    /// message. `Bypass::Diff` checks a declaration like any other.
    fn fast_inert(&self, trace: crate::fast::Trace) -> Option<usize> {
        let _ = trace;
        None
    }
    /// Trace compilation: the layer loops a message of `trace` back up from its place, as this
    /// endpoint's own cast (`local` on a cast going down). A layer that says so and is inert on
    /// the trace ([`Layer::fast_inert`]) is not asked per message: the compiled trace takes the
    /// loop-back branch at its place. Default: no.
    fn fast_loopback(&self, trace: crate::fast::Trace) -> bool {
        let _ = trace;
        false
    }
    /// Fast path: whether, in its current state, this layer has nothing to do with this
    /// endpoint's own casts coming back up the loop-back branch (no action, no delivery, the
    /// guarantee unchanged) until its next layered-path handler. A compiled cast going down whose
    /// branch crosses only such layers takes no branch at all. Default: no.
    fn fast_loopback_inert(&self) -> bool {
        false
    }
    /// Header compression: for the layer whose header carries a trace's sequence number, the
    /// number the next cast (or send) from `origin` is expected to carry, from which a compressed
    /// datagram's low 24 bits are expanded. `None` (the default): the layer numbers nothing.
    fn fast_expected(&self, origin: crate::Rank, cast: bool) -> Option<motet_wire::Seqno> {
        let _ = (origin, cast);
        None
    }
    /// Header compression: whether the header this layer's declaration pushes on a cast (or
    /// send) going down, in the initial state, is the same at every member, so that it may be
    /// part of the trace's template. A layer whose common case depends on its rank (a token that
    /// only rank 0 holds at first) says no for that trace: the stack then has no template for it
    /// at any member, since every member would otherwise expand what it cannot. Default: yes.
    fn fast_templated(&self, cast: bool) -> bool {
        let _ = cast;
        true
    }
}

/// A service a layer provides to the layers above it, or requires from the layers below.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Service {
    /// Unreliable datagrams to one rank or the whole view.
    Transport,
    /// Reliable FIFO multicast.
    ReliableCast,
    /// Reliable FIFO point-to-point.
    ReliableSend,
    /// Per-origin receive counts for stability ([`Up::NumCasts`]).
    CastCounts,
    /// Stability vectors ([`Dn::Stable`]), so retransmission buffers are freed.
    Stability,
    /// Messages larger than a datagram.
    Fragmentation,
    /// Multicast flow control with back-pressure.
    CastFlow,
    /// Point-to-point flow control with back-pressure.
    SendFlow,
    /// A sender delivers its own casts.
    LocalDelivery,
    /// The application interface.
    Application,
    /// Suspicion of failed members (heartbeats).
    FailureDetection,
    /// Suspicions shared with the whole view.
    SuspicionSharing,
    /// An agreed coordinator.
    Election,
    /// The view-change flush (block, drain, cut).
    Flush,
    /// View changes: the group membership service.
    Membership,
    /// Reliable leave requests.
    Leave,
    /// Discovery of other partitions.
    Healing,
    /// Merging of partitions.
    Merging,
    /// The reliable merge protocol between coordinators (request, grant, deny, fail).
    MergeProtocol,
    /// Primary-partition views.
    PrimaryPartition,
    /// The same delivery order of application casts at every member.
    TotalOrder,
    /// Application casts delivered after every cast their sender had delivered.
    CausalOrder,
    /// Application casts delivered only once every member of the view holds them.
    SafeDelivery,
    /// Switching the group to another stack at the next view.
    Switching,
    /// Moving an endpoint to another address at the next view.
    Migration,
    /// Transfer of the application's state to the members of a merged view.
    StateTransfer,
}

impl Service {
    /// Human name used in errors and `stack explain`.
    pub fn describe(self) -> &'static str {
        match self {
            Service::Transport => "unreliable transport",
            Service::ReliableCast => "reliable FIFO multicast",
            Service::ReliableSend => "reliable FIFO point-to-point",
            Service::CastCounts => "per-origin cast counts",
            Service::Stability => "stability detection",
            Service::Fragmentation => "fragmentation",
            Service::CastFlow => "multicast flow control",
            Service::SendFlow => "point-to-point flow control",
            Service::LocalDelivery => "local delivery of own casts",
            Service::Application => "application interface",
            Service::FailureDetection => "failure detection",
            Service::SuspicionSharing => "suspicion sharing",
            Service::Election => "coordinator election",
            Service::Flush => "view-change flush",
            Service::Membership => "group membership",
            Service::Leave => "reliable leave",
            Service::Healing => "partition discovery",
            Service::Merging => "partition merging",
            Service::MergeProtocol => "reliable merge requests",
            Service::PrimaryPartition => "primary-partition views",
            Service::TotalOrder => "total order of casts",
            Service::CausalOrder => "causal order of casts",
            Service::SafeDelivery => "safe delivery of casts",
            Service::Switching => "protocol switching",
            Service::Migration => "endpoint migration",
            Service::StateTransfer => "state transfer",
        }
    }
}

/// Static description of a layer: what it provides and needs, for stack validation and
/// `motet stack explain` (STYLE principle 12).
#[derive(Debug)]
pub struct LayerSpec {
    /// The layer's name, as in Ensemble.
    pub name: &'static str,
    /// One line: what the layer does.
    pub summary: &'static str,
    /// Services offered to the layers above.
    pub provides: &'static [Service],
    /// Services that some layer below must provide.
    pub requires_below: &'static [Service],
    /// Services that some layer above must provide (e.g. `mnak` frees buffers only on stability).
    pub requires_above: &'static [Service],
    /// Services whose providers, if the stack has any, must all sit below this layer (`local`
    /// loops casts back above every layer that keeps per-origin receive state for casts).
    pub above_every: &'static [Service],
    /// Services whose providers, if the stack has any, must all sit above this layer (`local`
    /// sits below `appl`, which must see the casts it loops back).
    pub below_every: &'static [Service],
}

/// An event in a stack's scheduler queue.
#[derive(Debug)]
pub(crate) enum Ev {
    Up(Up),
    Dn(Dn),
    Timer,
}

/// Per-stack statistics: drops by reason, each with the layer that dropped (or the node around the
/// stacks), and protocol counters, each counter by the layer that counted it (a slot per layer
/// that counts it: [`Counter::layers`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    /// Every drop by reason, whoever dropped.
    drops: [u64; DropReason::ALL.len()],
    /// The layers' share of `drops`, one entry per layer and reason that has dropped anything.
    /// Sparse, because drops are rare and any of some 30 layers may drop for any of 13 reasons: a
    /// dense table would be 3 KiB per stack, against the 10^5 groups a process is meant to hold;
    /// an empty list allocates nothing.
    layer_drops: Vec<(LayerKind, DropReason, u64)>,
    counters: [u64; crate::event::COUNTER_SLOTS],
}

// Written out: arrays derive `Default` only up to 32 entries, which the slots may pass.
impl Default for Stats {
    fn default() -> Stats {
        Stats { drops: [0; DropReason::ALL.len()], layer_drops: Vec::new(), counters: [0; crate::event::COUNTER_SLOTS] }
    }
}

impl Stats {
    /// Drops for `reason`.
    pub fn drops(&self, reason: DropReason) -> u64 {
        self.drops[reason as usize]
    }
    /// Value of `counter`: its total over the layers that count it.
    pub fn counter(&self, counter: Counter) -> u64 {
        self.slots(counter).iter().sum()
    }
    /// What each layer that counts `counter` counted, in the order of [`Counter::layers`]; the
    /// node's own counters (no layer counts them) come as one entry of `None`.
    pub fn by_layer(&self, counter: Counter) -> impl Iterator<Item = (Option<LayerKind>, u64)> + '_ {
        let layers = counter.layers();
        let node = layers.is_empty().then_some(None);
        layers.iter().map(|&l| Some(l)).chain(node).zip(self.slots(counter).iter().copied())
    }
    fn slots(&self, counter: Counter) -> &[u64] {
        let at = crate::event::COUNTER_SLOT[counter as usize];
        &self.counters[at..at + counter.layers().len().max(1)]
    }
    /// Counts one of the node's counters (one no layer counts: [`Counter::layers`] is empty).
    pub fn count(&mut self, counter: Counter) {
        debug_assert!(counter.layers().is_empty(), "{counter:?} is counted by a layer: count_by");
        self.counters[crate::event::COUNTER_SLOT[counter as usize]] += 1;
    }
    /// Counts protocol activity of `layer`, which must be one of `counter`'s
    /// ([`Counter::layers`]; another is a mistake in the declaration, counted in the counter's
    /// first slot outside debug builds).
    pub fn count_by(&mut self, layer: LayerKind, counter: Counter) {
        let position = counter.layers().iter().position(|&l| l == layer);
        debug_assert!(position.is_some(), "{layer:?} counts {counter:?}: declare it in `counters!`");
        self.counters[crate::event::COUNTER_SLOT[counter as usize] + position.unwrap_or(0)] += 1;
    }
    /// Drops by who dropped and why: each layer that dropped for a reason (`Some(layer)`), then
    /// the node's share of each reason (`None`: the node's router, decoding and encoding) in the
    /// reasons' declaration order, each with a count above zero. The counts of one reason sum to [`Stats::drops`].
    pub fn drops_by_layer(&self) -> impl Iterator<Item = (Option<LayerKind>, DropReason, u64)> + '_ {
        let layers = self.layer_drops.iter().map(|&(layer, reason, n)| (Some(layer), reason, n));
        let node = DropReason::ALL.iter().filter_map(|&reason| {
            let by_layers: u64 = self.layer_drops.iter().filter(|d| d.1 == reason).map(|d| d.2).sum();
            let rest = self.drops(reason) - by_layers;
            (rest > 0).then_some((None, reason, rest))
        });
        layers.chain(node)
    }
    /// Counts a drop by the node around the stacks (no layer).
    pub fn drop_one(&mut self, reason: DropReason) {
        self.drops[reason as usize] += 1;
    }
    /// Counts a drop by `layer`.
    pub fn drop_by(&mut self, layer: LayerKind, reason: DropReason) {
        self.drops[reason as usize] += 1;
        self.add_layer_share(layer, reason, 1);
    }
    /// Adds `n` to `layer`'s share of `reason`'s drops (not to the total).
    fn add_layer_share(&mut self, layer: LayerKind, reason: DropReason, n: u64) {
        match self.layer_drops.iter_mut().find(|d| d.0 == layer && d.1 == reason) {
            Some(entry) => entry.2 += n,
            None => self.layer_drops.push((layer, reason, n)),
        }
    }
    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &Stats) {
        for (a, b) in self.drops.iter_mut().zip(&other.drops) {
            *a += b;
        }
        for &(layer, reason, n) in &other.layer_drops {
            self.add_layer_share(layer, reason, n);
        }
        for (a, b) in self.counters.iter_mut().zip(&other.counters) {
            *a += b;
        }
    }
}

/// Where a handler puts what it emits. Outputs are dispatched by the stack after the handler
/// returns, preserving FIFO order between adjacent layers.
pub struct Outbox<'a> {
    pub(crate) now: Instant,
    pub(crate) rank: Rank,
    pub(crate) events: &'a mut Vec<Ev>,
    pub(crate) alarm: &'a mut Option<Instant>,
    pub(crate) app: &'a mut VecDeque<AppEvent>,
    pub(crate) stats: &'a mut Stats,
}

impl Outbox<'_> {
    /// The current time, as given by the driver.
    pub fn now(&self) -> Instant {
        self.now
    }
    /// This endpoint's rank.
    pub fn rank(&self) -> Rank {
        self.rank
    }
    /// Emits an event to the layer above.
    pub fn up(&mut self, ev: Up) {
        self.events.push(Ev::Up(ev));
    }
    /// Emits an event to the layer below.
    pub fn dn(&mut self, ev: Dn) {
        self.events.push(Ev::Dn(ev));
    }
    /// Requests a timer event at or after `at` (the earliest request wins until it fires).
    pub fn alarm(&mut self, at: Instant) {
        *self.alarm = Some(self.alarm.map_or(at, |current| current.min(at)));
    }
    /// Delivers an upcall to the application (only `appl` does this).
    pub fn deliver(&mut self, ev: AppEvent) {
        self.app.push_back(ev);
    }
    /// Drops the input being handled, counting why and by which layer (the layer calling: drops
    /// are kept per layer, as counters are).
    pub fn drop_input(&mut self, layer: LayerKind, reason: DropReason) {
        self.stats.drop_by(layer, reason);
    }
    /// Counts protocol activity of `layer` (the layer calling: each counter is kept per layer).
    pub fn count(&mut self, layer: LayerKind, counter: Counter) {
        self.stats.count_by(layer, counter);
    }

    /// The common case of a layer whose header on this message is the trivial `expected`: pops it
    /// from a cast or send and passes the event up (a different header is dropped as a mismatch);
    /// any other event passes up untouched.
    pub fn pass_up<H>(&mut self, layer: LayerKind, ev: Up, expected: H)
    where
        H: TryFrom<Header> + PartialEq,
    {
        match ev {
            Up::Cast { origin, mut msg, qos } => match msg.pop_as::<H>() {
                Some(h) if h == expected => self.up(Up::Cast { origin, msg, qos }),
                _ => self.drop_input(layer, DropReason::HeaderMismatch),
            },
            Up::Send { origin, mut msg } => match msg.pop_as::<H>() {
                Some(h) if h == expected => self.up(Up::Send { origin, msg }),
                _ => self.drop_input(layer, DropReason::HeaderMismatch),
            },
            other => self.up(other),
        }
    }

    /// The common case going down: pushes `header` on a cast or send and passes the event down;
    /// any other event passes down untouched.
    pub fn pass_dn(&mut self, ev: Dn, header: impl Into<Header>) {
        match ev {
            Dn::Cast { msg, qos } => self.dn(Dn::Cast { msg: msg.with(header), qos }),
            Dn::Send { dest, msg } => self.dn(Dn::Send { dest, msg: msg.with(header) }),
            other => self.dn(other),
        }
    }
}

#[cfg(test)]
mod stats_tests {
    use super::*;

    /// Drops keep who dropped: each layer's count by reason, and the node's share (its router and
    /// decoding) as what the layers do not account for; merging two stacks' statistics adds them
    /// up entry by entry, as a node's total over its stacks does.
    #[test]
    fn drops_are_kept_by_layer_and_merge_by_layer() {
        let mut a = Stats::default();
        a.drop_by(LayerKind::Mnak, DropReason::Duplicate);
        a.drop_by(LayerKind::Mnak, DropReason::Duplicate);
        a.drop_by(LayerKind::Pt2pt, DropReason::Duplicate);
        a.drop_one(DropReason::Duplicate);
        a.drop_one(DropReason::UnknownConn);
        assert_eq!(a.drops(DropReason::Duplicate), 4);
        let by: Vec<_> = a.drops_by_layer().collect();
        assert_eq!(
            by,
            [
                (Some(LayerKind::Mnak), DropReason::Duplicate, 2),
                (Some(LayerKind::Pt2pt), DropReason::Duplicate, 1),
                (None, DropReason::UnknownConn, 1),
                (None, DropReason::Duplicate, 1),
            ]
        );
        let mut b = Stats::default();
        b.drop_by(LayerKind::Pt2pt, DropReason::Duplicate);
        b.drop_by(LayerKind::Frag, DropReason::Orphan);
        a.merge(&b);
        assert_eq!((a.drops(DropReason::Duplicate), a.drops(DropReason::Orphan)), (5, 1));
        let by: Vec<_> = a.drops_by_layer().collect();
        assert_eq!(
            by,
            [
                (Some(LayerKind::Mnak), DropReason::Duplicate, 2),
                (Some(LayerKind::Pt2pt), DropReason::Duplicate, 2),
                (Some(LayerKind::Frag), DropReason::Orphan, 1),
                (None, DropReason::UnknownConn, 1),
                (None, DropReason::Duplicate, 1),
            ]
        );
    }
}

/// A test harness driving one layer alone and recording exactly what it emits (STYLE
/// principle 14).
#[cfg(test)]
pub(crate) mod harness {
    use super::*;

    /// One recorded output.
    #[derive(Debug)]
    pub(crate) enum Out {
        Up(Up),
        Dn(Dn),
    }

    pub(crate) struct Harness<L: Layer> {
        pub(crate) layer: L,
        pub(crate) now: Instant,
        pub(crate) rank: Rank,
        pub(crate) alarm: Option<Instant>,
        pub(crate) app: VecDeque<AppEvent>,
        pub(crate) stats: Stats,
    }

    impl<L: Layer> Harness<L> {
        pub(crate) fn new(layer: L, rank: Rank) -> Harness<L> {
            Harness { layer, now: Instant::ZERO, rank, alarm: None, app: VecDeque::new(), stats: Stats::default() }
        }
        fn run(&mut self, f: impl FnOnce(&mut L, &mut Outbox<'_>)) -> Vec<Out> {
            let mut events = Vec::new();
            let mut out = Outbox {
                now: self.now,
                rank: self.rank,
                events: &mut events,
                alarm: &mut self.alarm,
                app: &mut self.app,
                stats: &mut self.stats,
            };
            f(&mut self.layer, &mut out);
            self.layer.check_invariants();
            events
                .into_iter()
                .map(|ev| match ev {
                    Ev::Up(up) => Out::Up(up),
                    Ev::Dn(dn) => Out::Dn(dn),
                    Ev::Timer => unreachable!("layers do not emit timer events"),
                })
                .collect()
        }
        pub(crate) fn up(&mut self, ev: Up) -> Vec<Out> {
            self.run(|layer, out| layer.handle_up(ev, out))
        }
        pub(crate) fn dn(&mut self, ev: Dn) -> Vec<Out> {
            self.run(|layer, out| layer.handle_dn(ev, out))
        }
        pub(crate) fn timer(&mut self, now: Instant) -> Vec<Out> {
            self.now = now;
            self.alarm = None;
            self.run(|layer, out| layer.handle_timer(out))
        }
    }

    /// The sends among `out` whose top header is an `H`: (destination, header).
    pub(crate) fn sent<H: TryFrom<motet_wire::Header>>(out: &[Out]) -> Vec<(Rank, H)> {
        out.iter()
            .filter_map(|o| match o {
                Out::Dn(Dn::Send { dest, msg }) => msg.clone().pop_as::<H>().map(|h| (*dest, h)),
                _ => None,
            })
            .collect()
    }

    /// The suspicions among `out`, each the ranks it names.
    pub(crate) fn suspected(out: &[Out]) -> Vec<Vec<Rank>> {
        out.iter()
            .filter_map(|o| match o {
                Out::Up(Up::Suspect(ranks)) => Some(ranks.iter().collect()),
                _ => None,
            })
            .collect()
    }
}
