//! A protocol stack: a linear composition of layers with an event-queue scheduler (thesis
//! §2.1.9, the default "event queue" composition; HvR §2).
//!
//! The scheduler keeps the layering model's invariants:
//! 1. events pass between adjacent layers in FIFO order (one global FIFO queue);
//! 2. each layer runs one event at a time (handlers run to completion, outputs are queued);
//! 3. every event is eventually run (each `handle_*` drains the queue before returning);
//! 4. drain-first: an external input is admitted only when the queue is empty, so a later bypass
//!    can be substituted for the layered path whenever no event is queued (thesis §3.3.1).

use crate::error::ApiError;
use crate::event::{Action, AppEvent, Dn, Msg, Up};
use crate::layer::{Ev, Stats};
use crate::layers::{AnyLayer, LayerKind};
use crate::time::Instant;
use crate::view::{RankSet, ViewState};
use crate::{Rank, StackSpecError};
use motet_wire::Mux;
use std::collections::VecDeque;
use std::sync::Arc;

/// An outbox over stack `$stack`'s queues for a handler or action at `$now`, its alarm request
/// going into `$alarm` (a macro rather than a method, so that the stack's other fields, a layer
/// and the alarms, stay free to borrow beside it).
macro_rules! outbox {
    ($stack:expr, $now:expr, $alarm:expr) => {
        crate::layer::Outbox {
            now: $now,
            rank: $stack.rank,
            events: &mut $stack.scratch,
            alarm: $alarm,
            app: &mut $stack.app,
            stats: &mut $stack.stats,
        }
    };
}

mod bypass;
mod delayed;

use delayed::{Delayed, DelayedQueue, DELAYED_MAX};

#[cfg(any(test, feature = "fault-injection"))]
thread_local! {
    /// Testing the checker: inputs do not settle delayed processing first (a seeded bug).
    static SETTLE_LATE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Testing the credit deadline: (the withholding rank, the origin it starves), in first views
    /// (`crate::faults::withhold_credit`).
    static WITHHOLD_CREDIT: std::cell::Cell<Option<(Rank, Rank)>> = const { std::cell::Cell::new(None) };
}

/// Sets the seeded fault of `WITHHOLD_CREDIT` on this thread (`crate::faults`).
#[cfg(feature = "fault-injection")]
pub(crate) fn set_withhold_credit(fault: Option<(Rank, Rank)>) {
    WITHHOLD_CREDIT.with(|w| w.set(fault));
}

#[cfg(feature = "fault-injection")]
pub(crate) use bypass::set_skip_action;

/// Whether a stack runs its common traces through the bypass ([`crate::fast`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Bypass {
    /// Every event takes the layered path.
    Off,
    /// Common traces run through the bypass; the rest take the layered path.
    #[default]
    On,
    /// Every input runs through the bypass and, on a twin stack, through the layered path; any
    /// difference in outputs or layer states panics (the simulator reports it as a violation).
    Diff,
}

/// How often the application's messages took the bypass: its casts and sends going down, and
/// its casts and sends arriving (the layers' own traffic, such as acknowledgements and gossip,
/// is not counted).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BypassStats {
    /// Messages that took the bypass.
    pub hits: u64,
    /// Messages that took the layered path because some layer's condition did not hold.
    pub misses: u64,
    /// Per layer, the misses it caused (the first condition that failed).
    pub refused_by: std::collections::BTreeMap<&'static str, u64>,
    /// Of the hits, those that ran a compiled trace (the layers' inert declarations leaving out
    /// the layers with nothing to do); the others were interpreted layer by layer.
    pub compiled: u64,
    /// The layers' own messages (credit reports, acknowledgements, and in principle a layer's own
    /// cast that `mnak` keeps out of order) that took the bypass up to the layer that keeps them.
    /// Not in `hits`: the hit rate is the application's.
    pub absorbed: u64,
}

impl BypassStats {
    /// Counts an input that took the bypass (`layers`: the stack's, for a refusing layer's name).
    fn took(&mut self, took: bypass::Took, layers: &[LayerKind]) {
        match took {
            bypass::Took::Hit => self.hits += 1,
            bypass::Took::Absorbed => self.absorbed += 1,
            bypass::Took::Finished(layer) => self.miss(layers[layer]),
        }
    }

    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &BypassStats) {
        self.hits += other.hits;
        self.misses += other.misses;
        self.compiled += other.compiled;
        self.absorbed += other.absorbed;
        for (layer, n) in &other.refused_by {
            *self.refused_by.entry(layer).or_default() += n;
        }
    }

    fn miss(&mut self, layer: LayerKind) {
        self.misses += 1;
        *self.refused_by.entry(layer.name()).or_default() += 1;
    }

    /// Hits over hits and misses (`None` before any eligible input).
    pub fn hit_rate(&self) -> Option<f64> {
        let all = self.hits + self.misses;
        (all > 0).then(|| self.hits as f64 / all as f64)
    }
}

/// A message leaving the bottom of a stack, to be encoded and transmitted by the driver.
#[derive(Debug, Clone)]
pub struct Transmit {
    /// Cast, send to a rank, or group gossip.
    pub mux: Mux,
    /// Headers and payload.
    pub msg: Msg,
    /// For gossip: one address, or `None` for every known peer of the group.
    pub to: Option<crate::view::Address>,
}

/// What leaves the top of a stack (thesis §2.1.9: only `NewView` and `Exit`).
#[derive(Debug, Clone, PartialEq)]
pub enum TopOutput {
    /// Build the stack of the next view from this `ViewState`.
    NewView(Arc<ViewState>),
    /// This stack is done: remove its routes and free it.
    Exit,
}

/// One endpoint's protocol stack for one view.
#[derive(Debug)]
pub struct Stack {
    view: Arc<ViewState>,
    rank: Rank,
    layers: Vec<AnyLayer>,
    appl: usize,
    queue: VecDeque<(usize, Ev)>,
    scratch: Vec<Ev>,
    alarms: Vec<Option<Instant>>,
    /// The earliest of `alarms`, kept so that [`Stack::poll_timeout`] (asked on every turn of a
    /// driver's loop, for every stack) does not scan the layers.
    next_alarm: Option<Instant>,
    app: VecDeque<AppEvent>,
    transmits: VecDeque<Transmit>,
    top: VecDeque<TopOutput>,
    stats: Stats,
    bypass: Bypass,
    bypass_stats: BypassStats,
    /// `Bypass::Diff`: the same stack on the layered path, fed the same inputs.
    twin: Option<Box<Stack>>,
    /// Header compression: the headers of the common cast and send traces (index 0 and 1).
    templates: [Option<Template>; 2],
    /// Flow control bounds how far this stack's casts and sends (index 0 and 1) run ahead of
    /// their receivers (`mflow`, `pt2ptw`): only then do they go compressed ([`Stack::compress`]).
    bounded: [bool; 2],
    /// A member's node shares this view's key: everything goes in the full form (`bottom`'s
    /// `Full`). Read from `bottom` after the layered path runs, the only path that sets it, so
    /// that compressing a transmit costs no visit of the layer.
    full_form: bool,
    /// Where `mflow` is, if the stack has it ([`Stack::compress`]).
    mflow: Option<usize>,
    /// The compiled traces, by `Trace as usize`: `None` for a trace without a template.
    plans: [Option<Plan>; 4],
    /// The compiled traces' fused handlers, by `Trace as usize`, where their shape has one.
    fused: [Option<bypass::Fused>; 4],
    /// The layered path has run since the traces were compiled: recompile before the next
    /// bypass (a layer's inertness holds only until its next layered-path handler).
    plans_stale: bool,
    /// Delayed processing: copies of messages the bypass transmitted or delivered that layers
    /// keep, not yet handed over ([`Stack::settle`]). At most [`DELAYED_MAX`] (and one trace's).
    delayed: DelayedQueue,
}

/// A compiled trace (thesis §3.3.2): the layers a message of the trace asks, the others having
/// declared themselves inert ([`crate::Layer::fast_inert`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Bit `i` set: layer `i` is asked per message. A stack has at most 32 layers (the registry
    /// has fewer, and a layer appears once).
    pub(crate) active: u32,
    /// The largest payload every inert layer passes; a larger one is interpreted.
    pub(crate) len_max: usize,
    /// An inert layer that loops the trace's messages back up from its place
    /// ([`crate::Layer::fast_loopback`]): the compiled trace takes the branch there.
    pub(crate) loopback: Option<u8>,
}

/// The headers of a common trace, the same at every member (all run the same stack): constant
/// but for one sequence number, so a datagram of the trace carries only that number.
#[derive(Clone, Debug)]
struct Template {
    /// The headers; messages of the bypass are built in its compact form.
    hdrs: Arc<motet_wire::Template>,
    /// The layer that pushes the sequence number.
    layer: usize,
}

impl Stack {
    /// Builds the stack named by `view.stack` with `view.params`, for the member at `rank`, and
    /// runs `Init` up from the bottom (thesis §2.3.4).
    pub fn new(view: Arc<ViewState>, rank: Rank, now: Instant) -> Result<Stack, StackSpecError> {
        Stack::with_bypass(view, rank, now, Bypass::default())
    }

    /// [`Stack::new`] with the bypass `Off`, `On`, or checked against the layered path (`Diff`).
    pub fn with_bypass(
        view: Arc<ViewState>,
        rank: Rank,
        now: Instant,
        bypass: Bypass,
    ) -> Result<Stack, StackSpecError> {
        let mut twin = match bypass {
            Bypass::Diff => Some(Box::new(Stack::with_bypass(Arc::clone(&view), rank, now, Bypass::Off)?)),
            _ => None,
        };
        assert!(usize::from(rank) < view.len(), "rank {rank} outside a view of {}", view.len());
        view.params.validate()?;
        let kinds = view.stack.layers();
        assert!(kinds.len() <= 32, "a compiled trace names its layers in a u32");
        #[allow(unused_mut)]
        let mut layers: Vec<AnyLayer> =
            kinds.iter().map(|&kind| AnyLayer::new(kind, &view.params, &view, rank)).collect();
        // The seeded fault of a member that never reports credit to one origin: in a first view
        // only (no predecessor), so that once the group has excluded it and merged it back it
        // behaves.
        #[cfg(any(test, feature = "fault-injection"))]
        if let Some((withholder, origin)) = WITHHOLD_CREDIT.with(std::cell::Cell::get) {
            if withholder == rank && view.prev_ids.is_empty() && usize::from(origin) < view.len() {
                layers.iter_mut().for_each(|layer| layer.withhold_credit(origin));
            }
        }
        let appl = kinds.iter().position(|&k| k == LayerKind::Appl).expect("StackSpec guarantees one appl");
        let bounded = [LayerKind::Mflow, LayerKind::Pt2ptw].map(|kind| kinds.contains(&kind));
        let mflow = kinds.iter().position(|&k| k == LayerKind::Mflow);
        // `Diff` settles after every input in views of even logical time, so the layers are
        // compared with the twin's at every input; in views of odd logical time it settles in
        // batches with deadlines, as `On` does, so that compiled traces run ahead of the copies
        // they leave waiting, as in production (a condition that read a kept buffer would pass a
        // `Diff` that settles at once; test `in_views_of_odd_logical_time_the_diff_settles_in_batches`).
        let batched = bypass == Bypass::On || view.view_id.ltime % 2 == 1;
        let delayed = DelayedQueue::new(layers.iter().map(AnyLayer::fast_keep_wait).collect(), batched);
        let mut stack = Stack {
            alarms: vec![None; layers.len()],
            next_alarm: None,
            view,
            rank,
            layers,
            appl,
            queue: VecDeque::new(),
            scratch: Vec::new(),
            app: VecDeque::new(),
            transmits: VecDeque::new(),
            top: VecDeque::new(),
            stats: Stats::default(),
            bypass,
            bypass_stats: BypassStats::default(),
            twin: None,
            templates: [None, None],
            bounded,
            full_form: false,
            mflow,
            plans: [None; 4],
            fused: [None; 4],
            plans_stale: true,
            delayed,
        };
        let bottom = stack.layers.len() - 1;
        stack.queue.push_back((bottom, Ev::Up(Up::Init)));
        stack.run(now);
        // Templates come from the layers' declarations in their initial state, which is the
        // same at every member.
        let other = (usize::from(rank) + 1) % stack.view.len();
        stack.templates =
            [stack.template(None), (other != usize::from(rank)).then(|| stack.template(Some(other as Rank))).flatten()];
        if let Some(twin) = &mut twin {
            stack.diff(twin, [0; 3], "initialisation");
        }
        stack.twin = twin;
        Ok(stack)
    }

    /// The view this stack was built for.
    pub fn view(&self) -> &Arc<ViewState> {
        &self.view
    }

    /// This endpoint's rank in the view.
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// Whether the application asked to leave through this stack (the request holds in the next
    /// view if this one ends before it was granted).
    pub(crate) fn leaving(&self) -> bool {
        let AnyLayer::Appl(appl) = &self.layers[self.appl] else { unreachable!("appl index") };
        appl.has_left()
    }

    /// Whether the application takes its own casts back (`Action::Loopback`; carried to the
    /// stack of the next view).
    pub(crate) fn loopback(&self) -> bool {
        let AnyLayer::Appl(appl) = &self.layers[self.appl] else { unreachable!("appl index") };
        appl.loopback()
    }

    /// The context of what the layers report through `tracing` while this stack handles an
    /// input on the layered path or a timer: the group, the view (logical time and coordinator)
    /// and this member's rank. A `debug` span: without a subscriber listening at that level for
    /// `motet_core` it is a check of a cached level, and the layers' `info`/`warn` events still
    /// carry their own fields.
    #[inline]
    fn span(&self) -> tracing::span::EnteredSpan {
        let view = &self.view;
        tracing::debug_span!("stack", group = &*view.group.0, view = view.view_id.ltime, coord = %view.view_id.coord, rank = self.rank)
            .entered()
    }

    /// An application action, injected at `appl` (which may sit mid-stack, thesis §2.1.10).
    #[inline(never)] // an entry point, counted by name (`motet bench stack`)
    pub fn handle_action(&mut self, now: Instant, action: Action) -> Result<(), ApiError> {
        let Some(mut twin) = self.twin.take() else { return self.action(now, action) };
        let mark = self.mark();
        let expected = twin.action(now, action.clone());
        let result = self.action(now, action);
        assert_eq!(format!("{result:?}"), format!("{expected:?}"), "bypass diff: the action's result");
        self.diff(&mut twin, mark, "an action");
        self.twin = Some(twin);
        result
    }

    fn action(&mut self, now: Instant, action: Action) -> Result<(), ApiError> {
        debug_assert!(self.queue.is_empty(), "drain-first: the queue is empty between inputs");
        let action = match action {
            Action::Cast(payload) if self.bypass != Bypass::Off => match self.bypass_dn(now, None, payload) {
                Ok(took) => {
                    self.bypass_stats.took(took, self.view.stack.layers());
                    return Ok(());
                }
                Err((payload, layer)) => {
                    self.bypass_stats.miss(self.view.stack.layers()[layer]);
                    Action::Cast(payload)
                }
            },
            Action::Send(dests, payload) if self.bypass != Bypass::Off && dests.len() == 1 => {
                match self.bypass_dn(now, Some(dests[0]), payload) {
                    Ok(took) => {
                        self.bypass_stats.took(took, self.view.stack.layers());
                        return Ok(());
                    }
                    Err((payload, layer)) => {
                        self.bypass_stats.miss(self.view.stack.layers()[layer]);
                        Action::Send(dests, payload)
                    }
                }
            }
            other => other,
        };
        self.settle_for_input();
        self.plans_stale = true;
        let AnyLayer::Appl(appl) = &mut self.layers[self.appl] else { unreachable!("appl index") };
        let mut alarm = None;
        let mut out = outbox!(self, now, &mut alarm);
        let result = appl.handle_action(action, &mut out);
        self.after_handler(self.appl, alarm);
        self.run(now);
        result
    }

    /// A message from the network, injected at the bottom.
    #[inline(never)] // an entry point, counted by name (`motet bench stack`)
    pub fn handle_recv(&mut self, now: Instant, origin: Rank, mux: Mux, msg: Msg) {
        let Some(mut twin) = self.twin.take() else { return self.recv(now, origin, mux, msg, true) };
        let mark = self.mark();
        twin.recv(now, origin, mux, msg.clone(), true);
        self.recv(now, origin, mux, msg, true);
        self.diff(&mut twin, mark, "a received message");
        self.twin = Some(twin);
    }

    /// A message from the network: on the bypass if it takes it, else the layered path. `fast`:
    /// its compiled trace's fused or express handler may be asked (false when the fused handler
    /// has just refused it).
    fn recv(&mut self, now: Instant, origin: Rank, mux: Mux, msg: Msg, fast: bool) {
        let msg = match mux {
            Mux::Cast | Mux::Send { .. } if self.bypass != Bypass::Off => {
                match self.bypass_up(now, origin, matches!(mux, Mux::Cast), msg, fast) {
                    Ok(took) => {
                        self.bypass_stats.took(took, self.view.stack.layers());
                        return;
                    }
                    Err((msg, refused)) => {
                        if let Some(layer) = refused {
                            self.bypass_stats.miss(self.view.stack.layers()[layer]);
                        }
                        msg
                    }
                }
            }
            _ => msg,
        };
        self.settle_for_input();
        let ev = match mux {
            Mux::Gossip => Up::Gossip(msg),
            // The network is unreliable: `mnak` upgrades the guarantee when it sequences the cast.
            Mux::Cast => Up::Cast { origin, msg, qos: crate::event::Qos::Unreliable },
            Mux::Send { .. } => Up::Send { origin, msg },
        };
        self.queue.push_back((self.layers.len() - 1, Ev::Up(ev)));
        self.run(now);
    }

    /// A compressed cast or send from the network: the low 24 bits `low` of its sequence number
    /// and its payload, whose headers are this stack's template of the trace. Its headers are
    /// rebuilt in the template's compact form, and it takes the trace's fused handler when that
    /// takes it, with no hop through the general entry points; else it goes on as any other
    /// message does ([`Stack::handle_recv`]). With `Bypass::Diff` this very path is checked
    /// against the layered twin. The payload comes back when this stack has no template for it,
    /// or no expected sequence number to expand it with (the node counts the datagram as
    /// malformed).
    #[inline(never)] // an entry point, counted by name (`motet bench stack`)
    pub(crate) fn handle_recv_compressed(
        &mut self,
        now: Instant,
        origin: Rank,
        mux: Mux,
        low: u32,
        payload: crate::Payload,
    ) -> Result<(), crate::Payload> {
        let cast = mux == Mux::Cast;
        let Some(hdrs) = self.expand(origin, cast, low) else { return Err(payload) };
        let msg = Msg { hdrs, payload };
        let Some(mut twin) = self.twin.take() else {
            self.recv_compressed(now, origin, mux, msg);
            return Ok(());
        };
        let mark = self.mark();
        twin.recv(now, origin, mux, msg.clone(), true);
        self.recv_compressed(now, origin, mux, msg);
        self.diff(&mut twin, mark, "a received message");
        self.twin = Some(twin);
        Ok(())
    }

    /// Marks `ranks` failed, from the top down (as a membership layer would).
    pub fn handle_fail(&mut self, now: Instant, ranks: RankSet) {
        self.inject(now, 0, Dn::Fail(ranks), "a failure notice");
    }

    /// Tells `bottom` that this node shares this view's key with another view's stack and drops
    /// what comes compressed under it: it asks the members for the full form (docs/bypass.md,
    /// "Connection ids").
    pub(crate) fn key_shared(&mut self, now: Instant) {
        self.inject(now, self.layers.len() - 1, Dn::KeyShared, "a shared key");
    }

    /// Hands `dn` to the layer at `index` and runs the layered path (`what` names the input in a
    /// `Bypass::Diff` report, whose twin gets the same).
    fn inject(&mut self, now: Instant, index: usize, dn: Dn, what: &str) {
        let _span = self.span();
        let twin = self.twin.take().map(|mut twin| {
            let mark = self.mark();
            twin.inject(now, index, dn.clone(), what);
            (twin, mark)
        });
        self.settle_for_input();
        self.queue.push_back((index, Ev::Dn(dn)));
        self.run(now);
        if let Some((mut twin, mark)) = twin {
            self.diff(&mut twin, mark, what);
            self.twin = Some(twin);
        }
    }

    /// Fires every alarm due at `now`, bottom layer first (thesis §2.3.2: the Timer event travels
    /// up the stack).
    #[inline(never)] // an entry point, counted by name (`motet bench stack`)
    pub fn handle_timeout(&mut self, now: Instant) {
        let _span = self.span();
        let twin = self.twin.take().map(|mut twin| {
            let mark = self.mark();
            twin.handle_timeout(now);
            (twin, mark)
        });
        self.settle_for_input();
        for index in (0..self.layers.len()).rev() {
            if self.alarms[index].is_some_and(|at| at <= now) {
                self.alarms[index] = None;
                self.queue.push_back((index, Ev::Timer));
            }
        }
        // The alarms that did not fire; those the timers set are merged in as they run.
        self.next_alarm = self.alarms.iter().flatten().min().copied();
        self.run(now);
        if let Some((mut twin, mark)) = twin {
            self.diff(&mut twin, mark, "a timeout");
            self.twin = Some(twin);
        }
    }

    /// How the inputs of this stack took the bypass.
    pub fn bypass_stats(&self) -> &BypassStats {
        &self.bypass_stats
    }

    /// The earliest alarm of the layers, not counting delayed processing ([`Stack::poll_wake`]
    /// adds its deadline).
    pub fn poll_alarm(&self) -> Option<Instant> {
        debug_assert_eq!(self.next_alarm, self.alarms.iter().flatten().min().copied());
        self.next_alarm
    }

    /// The next message to transmit.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// Whether an output from the top of the stack waits ([`Stack::poll_top`]).
    pub fn has_top_output(&self) -> bool {
        !self.top.is_empty()
    }

    /// The next output from the top of the stack.
    pub fn poll_top(&mut self) -> Option<TopOutput> {
        self.top.pop_front()
    }

    /// The next upcall for the application.
    pub fn poll_event(&mut self) -> Option<AppEvent> {
        self.app.pop_front()
    }

    /// Drop and protocol counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Counts a drop decided outside the layers (by the node's router).
    pub(crate) fn count_drop(&mut self, reason: crate::DropReason) {
        self.stats.drop_one(reason);
        if let Some(twin) = &mut self.twin {
            twin.stats.drop_one(reason);
        }
    }

    /// Messages held by all layers for retransmission or reordering (those waiting for delayed
    /// processing included).
    pub fn buffered(&self) -> usize {
        self.layers.iter().map(AnyLayer::buffered).sum::<usize>() + self.delayed.len()
    }

    /// Per layer (top to bottom): name and buffered messages; then, if any wait, `("delayed", n)`:
    /// copies the bypass made and delayed processing has not filed with their layers yet (so the
    /// list sums to [`Stack::buffered`], whichever path ran).
    pub fn buffered_by_layer(&self) -> Vec<(&'static str, usize)> {
        let layers = self.view.stack.layers().iter().zip(&self.layers).map(|(k, l)| (k.name(), l.buffered()));
        let delayed = (!self.delayed.is_empty()).then_some(("delayed", self.delayed.len()));
        layers.chain(delayed).collect()
    }

    /// Asserts the scheduler's invariants and, once the stack has settled (a retransmission
    /// buffer is whole only then), every layer's.
    pub fn check_invariants(&self) {
        assert!(self.queue.is_empty(), "the scheduler drains before returning");
        assert!(self.scratch.is_empty());
        assert!(self.delayed.len() <= DELAYED_MAX + self.layers.len(), "delayed processing is bounded");
        if self.delayed.is_empty() {
            for layer in &self.layers {
                layer.check_invariants();
            }
        }
    }

    /// The template of the common cast (`dest` `None`) or send trace, from the declarations.
    fn template(&self, dest: Option<Rank>) -> Option<Template> {
        let mut down = crate::fast::Down { dest, qos: crate::event::Qos::Reliable, len: 0 };
        let mut hdrs = Vec::with_capacity(self.layers.len() - self.appl);
        for layer in &self.layers[self.appl..] {
            if !layer.fast_templated(dest.is_none()) {
                return None;
            }
            let step = layer.fast_dn(&down)?;
            down.qos = step.qos;
            hdrs.push(step.header);
        }
        let hdrs = motet_wire::Template::new(hdrs)?;
        let layer = self.appl + hdrs.slot();
        self.layers[layer].fast_expected(self.rank, dest.is_none())?;
        Some(Template { hdrs: Arc::new(hdrs), layer })
    }

    /// Header compression, at the sender: the sequence number of a transmit whose headers are
    /// its trace's template (its low 24 bits go on the wire), or `None` (it goes in the full form).
    pub(crate) fn compress(&self, transmit: &Transmit) -> Option<u64> {
        // A compressed datagram carries the low 24 bits of its sequence number, which the
        // receiver reads as at most 2^15 ahead of what it expects next (`expand_seqno`): right
        // only while the sender is that close. Flow control bounds that gap by its window (at
        // most 2^14, `StackConfig::validate`); without it (a stack without `mflow` for casts,
        // `pt2ptw` for sends), a receiver that missed 65,536 casts took the next for the first it
        // missed.
        let trace = match transmit.mux {
            Mux::Cast => 0,
            Mux::Send { .. } => 1,
            Mux::Gossip => return None,
        };
        let template = self.templates[trace].as_ref().filter(|_| self.bounded[trace])?;
        // A member's node shares this view's key with another view's stack: the full form, whose
        // 64-bit id reaches its stack there (`bottom`'s `Full`).
        if self.full_form {
            return None;
        }
        // A member this sender has marked failed is outside the window until the view change
        // excludes it, and still receives its casts meanwhile: the full form until then.
        if let Some(i) = self.mflow.filter(|_| trace == 0) {
            if !<crate::layers::mflow::Mflow as crate::layers::Typed>::typed(&self.layers[i]).bounds_every_receiver() {
                return None;
            }
        }
        // A message of the bypass is in the compact form of this template: nothing to compare.
        // The layered path builds the same headers in the full form.
        let hdrs = &transmit.msg.hdrs;
        if let Some(seqno) = hdrs.compact_seqno(&template.hdrs) {
            return Some(seqno);
        }
        let seqno = hdrs.get(template.hdrs.slot())?.seqno()?;
        (*hdrs == motet_wire::HeaderStack::expanded(&template.hdrs, seqno)?).then_some(seqno)
    }

    /// Header compression, at a receiver: the full headers of a compressed cast or send from
    /// `origin` whose sequence number ends in the 24 bits `low` (reformatted from the template, so
    /// a message in either form gives the same result). `None` if this stack has no such
    /// template.
    pub(crate) fn expand(&self, origin: Rank, cast: bool, low: u32) -> Option<motet_wire::HeaderStack> {
        let template = self.templates[usize::from(!cast)].as_ref()?;
        let expected = self.layers[template.layer].fast_expected(origin, cast)?;
        motet_wire::HeaderStack::expanded(&template.hdrs, motet_wire::datagram::expand_seqno(low, expected))
    }

    /// Lengths of the output queues before an input (`Bypass::Diff`).
    fn mark(&self) -> [usize; 3] {
        [self.transmits.len(), self.app.len(), self.top.len()]
    }

    /// `Bypass::Diff`: after one input to both, this stack's new outputs and its counters must
    /// equal the layered twin's; once it has settled (no delayed processing pending), every
    /// layer's state and alarm too. The twin's outputs are consumed here.
    fn diff(&self, twin: &mut Stack, mark: [usize; 3], input: &str) {
        let show = |items: &mut dyn Iterator<Item = String>| items.collect::<Vec<_>>().join("\n");
        let pairs = [
            (
                "transmits",
                show(&mut self.transmits.iter().skip(mark[0]).map(|t| format!("{t:?}"))),
                show(&mut twin.transmits.drain(..).map(|t| format!("{t:?}"))),
            ),
            (
                "application events",
                show(&mut self.app.iter().skip(mark[1]).map(|e| format!("{e:?}"))),
                show(&mut twin.app.drain(..).map(|e| format!("{e:?}"))),
            ),
            (
                "top outputs",
                show(&mut self.top.iter().skip(mark[2]).map(|e| format!("{e:?}"))),
                show(&mut twin.top.drain(..).map(|e| format!("{e:?}"))),
            ),
        ];
        for (what, bypass, layered) in pairs {
            assert!(
                bypass == layered,
                "bypass diff after {input}: {what} differ\nbypass:  {bypass}\nlayered: {layered}"
            );
        }
        // Delayed processing never counts (`Layer::fast_keep`): counters agree at every input.
        assert!(
            self.stats == twin.stats,
            "bypass diff after {input}: counters differ\nbypass:  {:?}\nlayered: {:?}",
            self.stats,
            twin.stats
        );
        let settled = self.delayed.is_empty();
        assert!(
            !settled || self.alarms == twin.alarms,
            "bypass diff after {input}: alarms differ\nbypass:  {:?}\nlayered: {:?}",
            self.alarms,
            twin.alarms
        );
        if !settled {
            return;
        }
        // Compared as values, printed only when they differ: a layer's state holds its buffers,
        // and printing them at every input made a long lossy run quadratic (40 s a seed).
        for (kind, (a, b)) in self.view.stack.layers().iter().zip(self.layers.iter().zip(&twin.layers)) {
            assert!(a == b, "bypass diff after {input}: layer {} differs\nbypass:  {a:?}\nlayered: {b:?}", kind.name());
        }
    }

    /// Runs queued events until none is left.
    fn run(&mut self, now: Instant) {
        if self.queue.is_empty() {
            return;
        }
        // The layers' reports come from here (and from timers): the bypass, which carries only
        // the common case, reports nothing and pays for no span.
        let _span = self.span();
        while let Some((index, ev)) = self.queue.pop_front() {
            self.plans_stale = true;
            let mut alarm = None;
            let mut out = outbox!(self, now, &mut alarm);
            let layer = &mut self.layers[index];
            match ev {
                Ev::Up(up) => layer.handle_up(up, &mut out),
                Ev::Dn(dn) => layer.handle_dn(dn, &mut out),
                Ev::Timer => layer.handle_timer(&mut out),
            }
            self.after_handler(index, alarm);
        }
        if !self.full_form {
            let bottom = self.layers.last().expect("a stack has layers");
            self.full_form = <crate::layers::bottom::Bottom as crate::layers::Typed>::typed(bottom).full_form();
        }
    }

    /// Records a layer's alarm request: the earliest pending one wins until it fires.
    fn merge_alarm(&mut self, index: usize, alarm: Option<Instant>) {
        if let Some(at) = alarm {
            merge_alarm(&mut self.alarms, &mut self.next_alarm, index, at);
        }
    }

    /// Records the handler's alarm request and queues its outputs for the adjacent layers.
    fn after_handler(&mut self, index: usize, alarm: Option<Instant>) {
        self.merge_alarm(index, alarm);
        let bottom = self.layers.len() - 1;
        for ev in self.scratch.drain(..) {
            match ev {
                Ev::Up(up) if index == 0 => match up {
                    // Only NewView and Exit may leave the top (thesis §2.1.9).
                    Up::NewView(view) => self.top.push_back(TopOutput::NewView(view)),
                    Up::Exit => self.top.push_back(TopOutput::Exit),
                    other => panic!("event {other:?} left the top of the stack"),
                },
                Ev::Up(up) => self.queue.push_back((index - 1, Ev::Up(up))),
                Ev::Dn(dn) if index == bottom => match dn {
                    Dn::Cast { msg, .. } => self.transmits.push_back(Transmit { mux: Mux::Cast, msg, to: None }),
                    Dn::Send { dest, msg } => {
                        self.transmits.push_back(Transmit { mux: Mux::Send { dest }, msg, to: None })
                    }
                    Dn::Gossip { to, msg } => self.transmits.push_back(Transmit { mux: Mux::Gossip, msg, to }),
                    other => panic!("bottom let a non-message event out: {other:?}"),
                },
                Ev::Dn(dn) => self.queue.push_back((index + 1, Ev::Dn(dn))),
                Ev::Timer => unreachable!("layers do not emit timer events"),
            }
        }
    }
}

/// Records layer `index`'s alarm request for `at` in a stack's `alarms` and their earliest,
/// `next` (a function of those two fields, so that an outbox may hold the others meanwhile).
#[inline]
fn merge_alarm(alarms: &mut [Option<Instant>], next: &mut Option<Instant>, index: usize, at: Instant) {
    alarms[index] = Some(alarms[index].map_or(at, |current| current.min(at)));
    *next = Some(next.map_or(at, |next| next.min(at)));
}
