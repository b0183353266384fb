//! The bypass: the common event traces of any stack run as one fused pass over the layers'
//! fast-path declarations ([`crate::fast`]), with no event queue (thesis §3.3; SOSP'99 §4, where
//! the bypass is synthesized from the layers; HvR §4).
//!
//! Traces: a cast or send going down from `appl` to the network (a cast also loops back up through
//! `local`, a branching trace), and a cast or send coming up from the network to `appl` (which may
//! also send an acknowledgement, a credit report or a NAK down from the layer that owes it, another
//! branch; or end at a layer that keeps it, `absorb`: an ordering layer's queue, `mnak`'s
//! out-of-order buffer). Such a report, arriving, goes up the same way to the layer it is for,
//! which keeps it.
//! The trace runs in two phases. **Conditions**: every layer on the trace is asked, in the order
//! the layered path would reach it, whether the event is its common case and what it would do;
//! nothing changes, and the first `None` sends the event down the layered path. **Actions**: each
//! layer applies its common case to its own state, the messages are assembled with the headers the
//! conditions named, and the outputs are queued exactly as the layered path queues them.
//!
//! **Compiled traces.** A stack compiles each trace into the set of its layers that are not
//! inert on it ([`crate::Layer::fast_inert`]) and recompiles only after the layered path has run.
//! A message then asks only those layers; the inert ones cost nothing: their headers are the
//! template's, filled in (going down) or dropped (going up) without being built. A message outside
//! the compiled trace's reach (not in its template's compact form, or larger than an inert layer
//! passes) is interpreted: every layer on the trace is asked, as before.
//!
//! Nothing here knows any layer: a stack whose trace crosses a layer without a declaration simply
//! has no bypass for that trace. Drain-first scheduling makes the substitution safe: inputs arrive
//! only when the event queue is empty (thesis §3.3.1), and a layer's own queues (flow-control
//! backlogs, out-of-order buffers) are part of its condition.

use super::{Delayed, Plan, Stack, Transmit, DELAYED_MAX};
use crate::event::{Dn, Msg, Qos};
use crate::fast::{Down, Kept, Trace, Up};
use crate::layer::{Ev, Outbox};
use crate::time::Instant;
use crate::{Payload, Rank};
use motet_wire::{Header, HeaderStack, Mux};
use smallvec::SmallVec;
use std::sync::Arc;

/// Layers on one trace (the deepest preset has fewer).
type Steps<T> = SmallVec<[T; 16]>;

/// A layer asked on a trace going down, as its action needs it. Its header is already on the
/// message: the conditions build the message as they go, since no action reads it (thesis §3.3.2:
/// the trace handler writes each header once).
#[derive(Clone, Copy, Debug)]
struct DnAsked {
    layer: u8,
    /// The guarantee that reached the layer (its action sees it in `Down::qos`).
    qos: Qos,
    /// Headers on the message as it reached the layer: the copy it keeps has this many.
    depth: u8,
    /// The layer keeps a copy ([`crate::fast::DnStep::keep`]).
    keep: bool,
}

/// A layer asked on a trace going up, bottom up, as its action needs it.
#[derive(Clone, Copy, Debug)]
struct UpAsked {
    layer: u8,
    /// The guarantee that reached the layer.
    qos: Qos,
    /// [`crate::fast::UpStep::keep`] and [`crate::fast::UpStep::join`].
    keep: bool,
    join: bool,
}

/// What a layer that splits a message going down declared: (the layer, its parts, the guarantee
/// it passes on).
type Split = (usize, u32, Qos);

/// The loop-back branch of a cast going down: (the layer it leaves from, the headers on the
/// message there, the guarantee that reached it).
type Loopback = (usize, usize, Qos);

/// A reply branch, assembled by the conditions: (its destination, the header-only message, the
/// layers asked on its way down).
type Reply = (Rank, Msg, Steps<DnAsked>);

/// How an input that took the bypass ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub(super) enum Took {
    /// An application message, entirely on the bypass.
    Hit,
    /// A layer's own message (a credit report, an acknowledgement), kept by its layer.
    Absorbed,
    /// An application message that began on the bypass and ended on the layered path: a part of
    /// a split message, or the message a join completed, failed a condition of this layer. What
    /// the bypass had done is what the layers' handlers would have done up to there.
    Finished(usize),
}

impl Took {
    /// The outcome of an input whose trace went on with `next`: finished on the layered path if
    /// either part was; else a hit if either carried application data (a layer's own message,
    /// the sequencer's `Order`, that releases application casts on the bypass counts as a hit).
    fn then(self, next: Took) -> Took {
        match (self, next) {
            (Took::Finished(layer), _) | (_, Took::Finished(layer)) => Took::Finished(layer),
            (Took::Hit, _) | (_, Took::Hit) => Took::Hit,
            _ => Took::Absorbed,
        }
    }
}

#[cfg(test)]
thread_local! {
    /// Testing the checker: the bypass skips this layer's action (a seeded bug).
    static SKIP_ACTION: std::cell::Cell<Option<crate::LayerKind>> = const { std::cell::Cell::new(None) };
    /// Testing the checker: the compiled traces take this layer for inert (a false declaration).
    static FORCE_INERT: std::cell::Cell<Option<crate::LayerKind>> = const { std::cell::Cell::new(None) };
    /// Testing the checker: a split message loses its last part on the bypass.
    static SKIP_LAST_PART: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Testing the checker: the bypass forgets what a layer releases.
    static SKIP_RELEASE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Testing the checker: the bypass passes a released run up in reverse order.
    static REVERSE_RELEASE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Loop-back branches the fused trace going down ran by `appl`'s type (a test sees the path
    /// it checks was taken).
    static APPL_BRANCHES: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// The layers of `mask`, top down.
fn top_down(mut mask: u32) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let i = mask.trailing_zeros();
            mask &= mask - 1;
            i as usize
        })
    })
}

/// The layers of `mask`, bottom up.
fn bottom_up(mut mask: u32) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let i = 31 - mask.leading_zeros();
            mask &= !(1 << i);
            i as usize
        })
    })
}

/// Cuts a message going up to the headers below layer `at`'s, and gives that layer's header when
/// it has to be built: `None` when the compact form predicts it, to be borrowed from the template
/// with [`HeaderStack::predicted`] (a compact message's constant headers are never copied; only
/// the sequence number's header is built).
#[inline]
fn pop_unpredicted(hdrs: &mut HeaderStack, at: usize) -> Option<Header> {
    if hdrs.predicted(at).is_some() {
        hdrs.truncate(at);
        None
    } else {
        hdrs.truncate(at + 1);
        Some(hdrs.pop().expect("one header per layer, checked"))
    }
}

/// The bits of the layers below `index`.
fn below(index: usize) -> u32 {
    u32::MAX.checked_shl(index as u32 + 1).unwrap_or(0)
}

/// The bits of the layers `from..to`.
fn span(from: usize, to: usize) -> u32 {
    let upto = u32::MAX.checked_shr(32 - to as u32).unwrap_or(0);
    upto & u32::MAX.checked_shl(from as u32).unwrap_or(0)
}

impl Stack {
    /// The compiled form of `trace` and its template, compiling the traces first if the layered
    /// path has run since they last were.
    fn compiled(&mut self, trace: Trace) -> Option<(Plan, Arc<motet_wire::Template>)> {
        let plan = self.plan(trace)?;
        Some((plan, Arc::clone(&self.templates[usize::from(!trace.is_cast())].as_ref()?.hdrs)))
    }

    /// The compiled form of `trace` (see [`Stack::compiled`]), without its template.
    fn plan(&mut self, trace: Trace) -> Option<Plan> {
        if self.plans_stale {
            self.compile();
        }
        self.settle_at_bound();
        self.plans[trace as usize]
    }

    /// Files the delayed copies once `DELAYED_MAX` wait: the bound holds between inputs and within
    /// a long trace (a split, a release), and what was kept so far is filed in order.
    #[inline]
    fn settle_at_bound(&mut self) {
        if self.delayed.len() >= DELAYED_MAX {
            self.settle_for_input();
        }
    }

    /// Compiles every trace that has a template: the layers below `appl` that are not inert on it
    /// in their current state. The layer that numbers the trace is always asked.
    pub(super) fn compile(&mut self) {
        for trace in Trace::ALL {
            let Some(template) = &self.templates[usize::from(!trace.is_cast())] else {
                self.plans[trace as usize] = None;
                continue;
            };
            let mut plan = Plan { active: 0, len_max: usize::MAX, loopback: None };
            let mut loops = false;
            for (i, layer) in self.layers.iter().enumerate().skip(self.appl) {
                #[cfg(test)]
                if FORCE_INERT.with(std::cell::Cell::get) == Some(self.view.stack.layers()[i]) && i != template.layer {
                    continue;
                }
                match layer.fast_inert(trace) {
                    Some(len_max) if i != template.layer => {
                        plan.len_max = plan.len_max.min(len_max);
                        if !loops && layer.fast_loopback(trace) {
                            plan.loopback = u8::try_from(i).ok();
                        }
                    }
                    _ => plan.active |= 1 << i,
                }
                // Only the first layer that loops back is where the branch leaves (an asked one
                // declares it in its step).
                loops |= layer.fast_loopback(trace);
            }
            self.plans[trace as usize] = Some(plan);
        }
        self.fuse();
        self.plans_stale = false;
    }

    /// Picks the compiled traces' fused handlers, where their shapes have one. Going down, a
    /// loop-back must leave from an inert layer above every asked one (the branch then comes
    /// first).
    fn fuse(&mut self) {
        for trace in Trace::ALL {
            self.fused[trace as usize] = self.plans[trace as usize].and_then(|plan| {
                let mut at = [0; fused::FUSED_MAX];
                let mut kinds = [crate::LayerKind::Top; fused::FUSED_MAX];
                let mut n = 0;
                let order: &mut dyn Iterator<Item = usize> =
                    if trace.is_down() { &mut top_down(plan.active) } else { &mut bottom_up(plan.active) };
                for i in order {
                    if n == fused::FUSED_MAX {
                        return None;
                    }
                    (at[n], kinds[n]) = (i as u8, self.view.stack.layers()[i]);
                    n += 1;
                }
                let handler = match trace.is_down() {
                    true if plan.loopback.is_some_and(|l| n > 0 && l >= at[0]) => return None,
                    true => fused::Handler::Dn(fused::dn_for(&kinds[..n])?),
                    false => fused::Handler::Up(fused::up_for(&kinds[..n])?),
                };
                Some(Fused { handler, at })
            });
        }
    }

    /// Runs an application cast (`dest` `None`) or send down the bypass: compiled when it can,
    /// else interpreted. Gives the payload back with the layer whose condition did not hold (the
    /// caller takes the layered path).
    pub(super) fn bypass_dn(
        &mut self,
        now: Instant,
        dest: Option<Rank>,
        mut payload: Payload,
    ) -> Result<Took, (Payload, usize)> {
        // A send to a rank outside the view, or to this endpoint (delivered without the
        // network), is `appl`'s to refuse or handle: the layered path's, whether or not `appl`
        // is asked on the compiled trace.
        if dest.is_some_and(|d| usize::from(d) >= self.view.len() || d == self.rank) {
            return Err((payload, self.appl));
        }
        let trace = Trace::down(dest);
        if let Some(plan) = self.plan(trace).filter(|plan| payload.len() <= plan.len_max) {
            if let Some(Fused { handler: fused::Handler::Dn(dn), at }) = self.fused[trace as usize] {
                let back = self.plans[Trace::CastUp as usize].filter(|p| payload.len() <= p.len_max).map(|p| p.active);
                match dn(self, &at, now, dest, payload, plan.loopback.map(usize::from), back) {
                    Ok(took) => {
                        self.bypass_stats.compiled += 1;
                        return Ok(took);
                    }
                    Err(back) => payload = back,
                }
            }
        }
        match self.compiled(trace) {
            Some((plan, template)) if payload.len() <= plan.len_max => {
                // The loop-back branch, if any, is a cast going up: its compiled trace, if the
                // payload is within its reach.
                let back = self.plans[Trace::CastUp as usize].filter(|p| payload.len() <= p.len_max).map(|p| p.active);
                let inert_loopback = plan.loopback.map(usize::from);
                let took = self.trace_dn(now, dest, payload, plan.active, back, inert_loopback, Some(template))?;
                self.bypass_stats.compiled += u64::from(took == Took::Hit);
                Ok(took)
            }
            _ => {
                // Interpreted: every layer from `appl` down is asked, and the message is built in
                // the compact form of the trace's template when there is one. Delayed processing
                // may run ahead of compiled traces only.
                self.settle_for_input();
                let all = span(self.appl, self.layers.len());
                let template = self.templates[usize::from(dest.is_some())].as_ref().map(|t| Arc::clone(&t.hdrs));
                self.trace_dn(now, dest, payload, all, Some(all), None, template)
            }
        }
    }

    /// A trace going down that asks the layers of `active` (every other one is inert on it and
    /// gets its header from `template`). `back`: the layers to ask on the loop-back branch, if
    /// one is allowed; `inert_loopback`: an inert layer the branch leaves from.
    #[allow(clippy::too_many_arguments)]
    fn trace_dn(
        &mut self,
        now: Instant,
        dest: Option<Rank>,
        payload: Payload,
        active: u32,
        back: Option<u32>,
        inert_loopback: Option<usize>,
        template: Option<Arc<motet_wire::Template>>,
    ) -> Result<Took, (Payload, usize)> {
        let top = self.appl;
        let mut down = Down { dest, qos: Qos::Reliable, len: payload.len() };
        // The message is built while the conditions are asked, in the compact form of the
        // template (no allocation; a header it does not predict reformats it).
        let hdrs = match &template {
            Some(template) => HeaderStack::compact(template),
            None => HeaderStack::with_capacity(self.layers.len() - top),
        };
        let mut msg = Msg { hdrs, payload };
        // Conditions, top down. A layer that splits the message ends this phase: each part is
        // asked about below it, once it exists.
        let mut steps = Steps::<DnAsked>::new();
        let mut loopback: Option<Loopback> = None;
        let mut split: Option<Split> = None;
        for i in top_down(active) {
            // An inert layer above this one loops the message back: as it reached that layer.
            if let Some(at) = inert_loopback.filter(|&at| at < i && loopback.is_none()) {
                loopback = Some((at, at - top, down.qos));
            }
            if let Some(template) = &template {
                msg.hdrs.push_template(template, i - top);
            }
            let Some(step) = self.layers[i].fast_dn(&down) else { return Err((msg.payload, i)) };
            let depth = msg.hdrs.len();
            if step.loopback {
                if loopback.is_some() {
                    return Err((msg.payload, i));
                }
                loopback = Some((i, depth, down.qos));
            }
            steps.push(DnAsked { layer: i as u8, qos: down.qos, depth: depth as u8, keep: step.keep });
            down.qos = step.qos;
            if step.parts > 1 {
                split = Some((i, step.parts, step.qos));
                break;
            }
            msg.push(step.header);
        }
        if let Some(at) = inert_loopback.filter(|_| loopback.is_none() && split.is_none()) {
            loopback = Some((at, at - top, down.qos));
        }
        // The loop-back branch: the message as it reached `local` goes up through the layers
        // between `appl` and `local` as this endpoint's own cast; the headers they see are those
        // pushed on the way down (a compiled trace fills in those of the inert layers).
        let mut up_steps = Steps::<UpAsked>::new();
        if let (Some((_, depth, _)), Some(template)) = (loopback, &template) {
            if msg.hdrs.len() < depth {
                msg.hdrs.push_template(template, depth);
            }
        }
        if let Some((at, _, qos)) = loopback {
            let Some(back) = back else { return Err((msg.payload, at)) };
            match self.loopback_branch(&msg, at, back, qos) {
                Ok(Some(steps)) => up_steps = steps,
                Ok(None) => loopback = None,
                Err(i) => return Err((msg.payload, i)),
            }
        }
        Ok(self.act_dn(now, dest, msg, template.as_ref(), &steps, loopback, &up_steps, split))
    }

    /// The conditions of a cast's loop-back branch: the message going down `msg`, as it reached
    /// the layer at `at` that loops it back with the guarantee `qos`, up the layers of `back`
    /// between `appl` and there, as this endpoint's own cast. `None` when every one of them has
    /// nothing to do with it (its application does not take its casts back,
    /// `Action::Loopback`): then no branch is taken at all. The layer that refuses it (a
    /// reply, a join or a release on the branch is the layered path's), if one does.
    #[inline]
    fn loopback_branch(&self, msg: &Msg, at: usize, back: u32, mut qos: Qos) -> Result<Option<Steps<UpAsked>>, usize> {
        let (top, branch) = (self.appl, back & span(self.appl, at));
        if bottom_up(branch).all(|i| self.layers[i].fast_loopback_inert()) {
            return Ok(None);
        }
        let mut steps = Steps::<UpAsked>::new();
        for i in bottom_up(branch) {
            let header = msg.hdrs.get(i - top).expect("one header per layer above the loop-back");
            let up = Up { origin: self.rank, cast: true, qos, header: &header };
            match self.layers[i].fast_up(&up) {
                Some(step) if step.reply.is_none() && !step.join && !step.release => {
                    steps.push(UpAsked { layer: i as u8, qos, keep: step.keep, join: false });
                    qos = step.qos;
                    if step.absorb {
                        break;
                    }
                }
                _ => return Err(i),
            }
        }
        Ok(Some(steps))
    }

    /// The parts of a message that layer `at` split (a one-to-many trace, `frag`), each asked
    /// about and sent on down the layers below it in turn, since each part's conditions read what
    /// the previous part's actions did (a window, a sequence number). The first part a condition
    /// refuses, and every part after it, take the layered path from `at`'s output on, queued as
    /// its handler queues them.
    fn parts_dn(&mut self, now: Instant, dest: Option<Rank>, at: usize, parts: u32, qos: Qos, whole: &Msg) -> Took {
        let below = span(at + 1, self.layers.len());
        for index in 0..parts {
            #[cfg(test)]
            if SKIP_LAST_PART.with(std::cell::Cell::get) && index + 1 == parts {
                break;
            }
            // Each part may leave a copy to keep.
            self.settle_at_bound();
            let part = self.layers[at].fast_split(whole, index);
            let Err((part, refused)) = self.part_dn(now, dest, part, qos, below) else { continue };
            self.settle_for_input();
            let rest: Vec<Msg> = (index + 1..parts).map(|k| self.layers[at].fast_split(whole, k)).collect();
            for msg in std::iter::once(part).chain(rest) {
                let ev = match dest {
                    None => Dn::Cast { msg, qos },
                    Some(dest) => Dn::Send { dest, msg },
                };
                self.queue.push_back((at + 1, Ev::Dn(ev)));
            }
            self.run(now);
            return Took::Finished(refused);
        }
        Took::Hit
    }

    /// One part of a split message down the layers of `active` (all of them, in its full form).
    /// Gives the part back as it came when a condition refuses it.
    fn part_dn(
        &mut self,
        now: Instant,
        dest: Option<Rank>,
        mut msg: Msg,
        qos: Qos,
        active: u32,
    ) -> Result<(), (Msg, usize)> {
        let mut down = Down { dest, qos, len: msg.payload.len() };
        let mut steps = Steps::<DnAsked>::new();
        let len = msg.hdrs.len();
        for i in top_down(active) {
            match self.layers[i].fast_dn(&down) {
                Some(step) if !step.loopback && step.parts <= 1 => {
                    let depth = msg.hdrs.len() as u8;
                    steps.push(DnAsked { layer: i as u8, qos: down.qos, depth, keep: step.keep });
                    down.qos = step.qos;
                    msg.push(step.header);
                }
                _ => {
                    msg.hdrs.truncate(len);
                    return Err((msg, i));
                }
            }
        }
        let took = self.act_dn(now, dest, msg, None, &steps, None, &[], None);
        debug_assert_eq!(took, Took::Hit, "the conditions refused a second split");
        Ok(())
    }

    /// The actions of a trace going down, top down, on the message the conditions built (the
    /// headers of the layers below the last one asked come from `template`). A layer that keeps
    /// a copy gets the message as it reached it; so does the loop-back branch. At a layer that
    /// splits the message, the parts go on from there ([`Stack::parts_dn`]).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)] // into the trace handlers: a call would move the message
    fn act_dn(
        &mut self,
        now: Instant,
        dest: Option<Rank>,
        mut msg: Msg,
        template: Option<&Arc<motet_wire::Template>>,
        steps: &[DnAsked],
        loopback: Option<Loopback>,
        back: &[UpAsked],
        split: Option<Split>,
    ) -> Took {
        let kept = Kept { trace: Trace::down(dest), peer: dest.unwrap_or(self.rank) };
        // The loop-back goes up where it leaves: after the actions of the layers above it (and
        // its own, an asked layer's), before those below.
        let mut loopback = loopback;
        for asked in steps {
            let i = usize::from(asked.layer);
            if let Some(branch) = loopback.filter(|l| l.0 < i) {
                loopback = None;
                self.loop_back(now, &mut msg, branch.1, back);
            }
            let down = Down { dest, qos: asked.qos, len: msg.payload.len() };
            self.apply(i, now, |layer, out| layer.fast_dn_apply(&down, out));
            if asked.keep {
                self.keep(i, kept, now, msg.reached(usize::from(asked.depth)));
            }
            if let Some(branch) = loopback.filter(|l| l.0 == i) {
                loopback = None;
                self.loop_back(now, &mut msg, branch.1, back);
            }
        }
        if let Some(branch) = loopback {
            self.loop_back(now, &mut msg, branch.1, back);
        }
        if let Some((at, parts, qos)) = split {
            return self.parts_dn(now, dest, at, parts, qos, &msg);
        }
        if let Some(template) = template {
            msg.hdrs.push_template(template, self.layers.len() - self.appl);
        }
        let mux = match dest {
            None => Mux::Cast,
            Some(dest) => Mux::Send { dest },
        };
        self.transmits.push_back(Transmit { mux, msg, to: None });
        Took::Hit
    }

    /// Runs a cast or send from the network up the bypass: compiled when the message is in the
    /// compact form of its trace's template, else interpreted. Gives the message back with the
    /// layer whose condition did not hold (for an application message), or with `None` when no
    /// trace fits it (gossip, heartbeats, NAKs).
    pub(super) fn bypass_up(
        &mut self,
        now: Instant,
        origin: Rank,
        cast: bool,
        msg: Msg,
        fast: bool,
    ) -> Result<Took, (Msg, Option<usize>)> {
        let trace = Trace::up(cast);
        let qos = if cast { Qos::Unreliable } else { Qos::Reliable };
        let took = self.trace_up_from_network(now, origin, cast, msg, qos, trace, fast)?;
        // What went on up on the layered path, mid-trace (`go_on_up`), runs now.
        if !self.queue.is_empty() {
            self.settle_for_input();
            self.run(now);
        }
        Ok(took)
    }

    /// A received application cast or send on its compiled trace's fused handler, if the trace
    /// has one and the message is within the compiled trace's reach, as [`Stack::bypass_up`]
    /// would first run it. Else the message comes back untouched, saying whether the fused
    /// handler refused it (then the rest of the path need not ask it again).
    pub(super) fn recv_fused(&mut self, now: Instant, origin: Rank, cast: bool, msg: Msg) -> Result<(), (Msg, bool)> {
        let trace = Trace::up(cast);
        // The plan first: it compiles the traces, and picks their fused handlers, if stale.
        let Some((_, Some(_))) = self.compiled_up(trace, &msg) else { return Err((msg, false)) };
        let Some(Fused { handler: fused::Handler::Up(up), at }) = self.fused[trace as usize] else {
            return Err((msg, false));
        };
        let qos = if cast { Qos::Unreliable } else { Qos::Reliable };
        let took = up(self, &at, now, origin, cast, msg, qos).map_err(|msg| (msg, true))?;
        self.bypass_stats.compiled += 1;
        self.bypass_stats.took(took, self.view.stack.layers());
        Ok(())
    }

    /// The compiled trace of a message going up, if the message is within its reach (a whole
    /// message in the compact form of the trace's template, no larger than every inert layer
    /// passes), with the layers a reply branch asks (a send going down's compiled trace, if
    /// there is one).
    #[inline]
    fn compiled_up(&mut self, trace: Trace, msg: &Msg) -> Option<(Plan, Option<u32>)> {
        // Compared by reference: no copy of the template's handle.
        let plan = self.plan(trace).filter(|plan| {
            let template = self.templates[usize::from(!trace.is_cast())].as_ref();
            msg.payload.len() <= plan.len_max && template.is_some_and(|t| msg.hdrs.compact_seqno(&t.hdrs).is_some())
        })?;
        Some((plan, self.plans[Trace::SendDn as usize].map(|p| p.active)))
    }

    /// [`Stack::bypass_up`]'s trace: compiled or interpreted. `fast`: the compiled trace's
    /// fused or express handler may be asked first.
    #[allow(clippy::too_many_arguments)]
    fn trace_up_from_network(
        &mut self,
        now: Instant,
        origin: Rank,
        cast: bool,
        msg: Msg,
        qos: Qos,
        trace: Trace,
        fast: bool,
    ) -> Result<Took, (Msg, Option<usize>)> {
        let (top, n) = (self.appl, self.layers.len());
        match self.compiled_up(trace, &msg) {
            Some((plan, send)) => {
                // A whole message of the template: every inert layer's header is its template
                // header. A reply branch is a send going down: its compiled trace.
                let Some(send) = send else {
                    return self.trace_up(now, origin, cast, msg, qos, top, span(top, n), span(top, n), true);
                };
                // Most messages take the fused or express trace; the rest the general one.
                let msg = match fast {
                    false => msg,
                    true => {
                        let taken = match self.fused[trace as usize] {
                            Some(Fused { handler: fused::Handler::Up(up), at }) => {
                                up(self, &at, now, origin, cast, msg, qos)
                            }
                            _ => self.express_up(now, origin, cast, msg, qos, plan.active),
                        };
                        match taken {
                            Ok(took) => {
                                self.bypass_stats.compiled += 1;
                                return Ok(took);
                            }
                            Err(msg) => msg,
                        }
                    }
                };
                let took = self.trace_up(now, origin, cast, msg, qos, top, plan.active, send, true)?;
                self.bypass_stats.compiled += u64::from(took == Took::Hit);
                Ok(took)
            }
            _ => {
                // Interpreted: every layer from the bottom up to the one whose header is the
                // message's first (`appl` for the application's messages; a layer's own messages
                // and the later parts of a split message have fewer headers). Delayed processing
                // may run ahead of compiled traces only.
                self.settle_for_input();
                let Some(first) = n.checked_sub(msg.hdrs.len()).filter(|&first| first >= top && first < n) else {
                    return Err((msg, None));
                };
                let application = msg.hdrs.get(0).is_some_and(|h| self.layers[first].fast_data(&h));
                self.trace_up(now, origin, cast, msg, qos, first, span(first, n), span(top, n), application)
            }
        }
    }

    /// A trace going up that asks the layers of `active`, bottom up, starting with the guarantee
    /// `qos`; `first` is the layer whose header is the message's first. A layer's own message
    /// (not `application`) takes the bypass only if that layer absorbs it: above it the message
    /// would have no header left. A reply branch asks the layers of `send` below the replying
    /// layer. A layer that joins the message to others (the last part of a split message) ends the
    /// conditions; the message it completes then goes on up, asked about in turn.
    #[allow(clippy::too_many_arguments)]
    fn trace_up(
        &mut self,
        now: Instant,
        origin: Rank,
        cast: bool,
        msg: Msg,
        mut qos: Qos,
        first: usize,
        active: u32,
        send: u32,
        application: bool,
    ) -> Result<Took, (Msg, Option<usize>)> {
        // Misses are counted for the application's messages only.
        let refused = |i: usize| application.then_some(i);
        // Conditions, bottom up.
        let mut steps = Steps::<UpAsked>::new();
        let mut reply: Option<(usize, Rank, Header)> = None;
        #[allow(unused_mut)] // the test hook `SKIP_RELEASE` clears it
        let mut release: Option<(usize, Qos, bool)> = None;
        let mut absorbed = false;
        for i in bottom_up(active) {
            let step = {
                let header = msg.hdrs.get(i - first).expect("one header per layer from the first");
                self.layers[i].fast_up(&Up { origin, cast, qos, header: &header })
            };
            let Some(step) = step else { return Err((msg, refused(i))) };
            if let Some((dest, header)) = step.reply {
                if reply.is_some() {
                    // Two replies in one trace: rare, left to the layered path.
                    return Err((msg, refused(i)));
                }
                reply = Some((i, dest, header));
            }
            if step.release {
                if release.is_some() {
                    return Err((msg, refused(i)));
                }
                release = Some((i, step.qos, step.keep));
            }
            steps.push(UpAsked { layer: i as u8, qos, keep: step.keep, join: step.join });
            qos = step.qos;
            absorbed = step.absorb;
            if step.absorb || step.join {
                break;
            }
        }
        if !application && !absorbed {
            return Err((msg, None));
        }
        // The reply branch: a header-only send from the replying layer down, built as its
        // conditions are asked.
        let reply = match reply {
            Some((at, dest, header)) => match self.reply_dn(dest, at, header, send) {
                Ok(reply) => Some(reply),
                Err(i) => return Err((msg, refused(i))),
            },
            None => None,
        };
        let joined = self.act_up(now, origin, cast, msg, first, &steps);
        if let Some(reply) = reply {
            self.act_reply(now, reply);
        }
        let mut took = if application { Took::Hit } else { Took::Absorbed };
        // The whole message a layer completed goes on up from there.
        if let Some((at, whole)) = joined {
            took = took.then(self.go_on_up(now, origin, cast, whole, qos, at));
        }
        // Then what a layer held behind this message, in order, as its handler would pass it up
        // right after this one.
        #[cfg(test)]
        if SKIP_RELEASE.with(std::cell::Cell::get) {
            release = None;
        }
        if let Some((at, qos, keep)) = release {
            let trace = Trace::up(cast);
            #[cfg(test)]
            if REVERSE_RELEASE.with(std::cell::Cell::get) {
                let mut run = Vec::new();
                self.apply(at, now, |layer, out| {
                    run.extend(std::iter::from_fn(|| layer.fast_release(origin, cast, out)))
                });
                for (origin, next) in run.into_iter().rev() {
                    took = took.then(self.go_on_up(now, origin, cast, next, qos, at));
                }
                return Ok(took);
            }
            loop {
                // A run may be long (up to a receive window).
                self.settle_at_bound();
                let mut next = None;
                self.apply(at, now, |layer, out| next = layer.fast_release(origin, cast, out));
                let Some((origin, next)) = next else { break };
                if keep {
                    self.keep(at, Kept { trace, peer: origin }, now, next.clone());
                }
                took = took.then(self.go_on_up(now, origin, cast, next, qos, at));
            }
        }
        Ok(took)
    }

    /// The conditions of a reply branch: a header-only send to `dest` from the layer at `at`
    /// (which declared `header`) down the layers of `send` below it, assembled as they are asked
    /// (the headers of the layers not asked come from the send template). The layer that refuses
    /// it, if one does.
    fn reply_dn(&self, dest: Rank, at: usize, header: Header, send: u32) -> Result<Reply, usize> {
        let n = self.layers.len();
        let mut ack = Msg { hdrs: HeaderStack::with_capacity(n - at), payload: Payload::new() };
        ack.push(header);
        let mut steps = Steps::<DnAsked>::new();
        let mut down = Down { dest: Some(dest), qos: Qos::Reliable, len: 0 };
        let mut next = at + 1;
        for i in top_down(send & below(at)) {
            self.push_send_template(&mut ack, next..i);
            match self.layers[i].fast_dn(&down) {
                Some(step) if !step.loopback && step.parts <= 1 => {
                    let depth = ack.hdrs.len() as u8;
                    steps.push(DnAsked { layer: i as u8, qos: down.qos, depth, keep: step.keep });
                    down.qos = step.qos;
                    ack.push(step.header);
                }
                _ => return Err(i),
            }
            next = i + 1;
        }
        self.push_send_template(&mut ack, next..n);
        Ok((dest, ack, steps))
    }

    /// A message that layer `at` passes up in the middle of a trace (one it completed, or held)
    /// goes on up from there: on the bypass if every layer above takes it (the headers it carries
    /// tell which layer's is first), else queued for the layered path from `at`'s output on, as
    /// its handler would have queued it. Once one message is queued, the ones after it follow it
    /// there. The queue runs when the input's trace is over ([`Stack::bypass_up`]): a layer's
    /// handler passes a whole run up before any layer above sees any of it, so no layered handler
    /// may run while a layer is still releasing.
    fn go_on_up(&mut self, now: Instant, origin: Rank, cast: bool, msg: Msg, qos: Qos, at: usize) -> Took {
        let (top, n) = (self.appl, self.layers.len());
        let result = match at.checked_sub(msg.hdrs.len()).filter(|&first| first >= top && first < at) {
            Some(first) if self.queue.is_empty() => {
                let application = msg.hdrs.get(0).is_some_and(|h| self.layers[first].fast_data(&h));
                self.trace_up(now, origin, cast, msg, qos, first, span(first, at), span(top, n), application)
            }
            _ => Err((msg, None)),
        };
        match result {
            Ok(took) => took,
            Err((msg, refused)) => {
                self.queue.push_back((at - 1, Ev::Up(Self::up_event(origin, cast, msg, qos))));
                Took::Finished(refused.unwrap_or(at))
            }
        }
    }

    /// The event a layer's handler passes up with a message from `origin`.
    fn up_event(origin: Rank, cast: bool, msg: Msg, qos: Qos) -> crate::event::Up {
        match cast {
            true => crate::event::Up::Cast { origin, msg, qos },
            false => crate::event::Up::Send { origin, msg },
        }
    }

    /// The actions of a trace going up, bottom up: each asked layer gets `msg` with its own header
    /// popped (and those of the inert layers below it dropped). `first` is the layer whose header
    /// is the message's first (`appl`, for the application's). A joining layer, last, takes the
    /// message: then gives back that layer and the whole message it completed.
    fn act_up(
        &mut self,
        now: Instant,
        origin: Rank,
        cast: bool,
        mut msg: Msg,
        first: usize,
        steps: &[UpAsked],
    ) -> Option<(usize, Msg)> {
        let kept = Kept { trace: Trace::up(cast), peer: origin };
        // A layer that keeps the message (a receiver's retransmission buffer) takes the message
        // itself after the delivery, when its headers are in the compact form: the delivery has
        // its own reference to the payload, and the popped headers grow back from the template.
        // That saves the copy and its release on the path to the delivery.
        let mut keep_whole = None;
        for asked in steps {
            let (i, at) = (usize::from(asked.layer), usize::from(asked.layer) - first);
            if asked.join {
                debug_assert!(keep_whole.is_none(), "a part of a split message is never compact");
                msg.hdrs.truncate(at + 1);
                let header = msg.hdrs.pop().expect("one header per layer, checked");
                let up = Up { origin, cast, qos: asked.qos, header: &header };
                let part = std::mem::take(&mut msg);
                let mut whole = None;
                self.apply(i, now, |layer, out| whole = Some(layer.fast_join(&up, part, out)));
                return Some((i, whole.expect("the joining layer gives the message back")));
            }
            let popped = pop_unpredicted(&mut msg.hdrs, at);
            let header = popped.as_ref().unwrap_or_else(|| msg.hdrs.predicted(at).expect("compact"));
            let up = Up { origin, cast, qos: asked.qos, header };
            self.apply(i, now, |layer, out| layer.fast_up_apply(&up, &msg, out));
            if asked.keep {
                if keep_whole.is_none() && msg.hdrs.is_compact() {
                    keep_whole = Some((i, msg.hdrs.len()));
                } else {
                    self.keep(i, kept, now, msg.clone());
                }
            }
        }
        if let Some((layer, len)) = keep_whole {
            let regrown = msg.hdrs.regrow(len);
            debug_assert!(regrown, "a compact stack grows back");
            self.keep(layer, kept, now, msg);
        }
        None
    }

    /// The loop-back branch's actions: on the message going down itself when it can
    /// ([`Stack::act_up_in_place`]), else on a copy as it reached the branch (`depth` headers).
    fn loop_back(&mut self, now: Instant, msg: &mut Msg, depth: usize, back: &[UpAsked]) {
        if msg.hdrs.is_compact() && back.iter().all(|asked| !asked.keep && !asked.join) {
            self.act_up_in_place(now, msg, depth, back);
        } else {
            self.act_up(now, self.rank, true, msg.reached(depth), self.appl, back);
        }
    }

    /// The loop-back branch's actions on the message going down itself, when it is in the compact
    /// form and no layer of the branch keeps or joins it (its own delivery, the common case): as
    /// [`Stack::act_up`] on the message as it reached the branch (`depth` headers), whose length
    /// is then restored. A compact stack's headers are its template's and a length, so nothing is
    /// lost: this saves the copy of the message, and its release, on every cast.
    fn act_up_in_place(&mut self, now: Instant, msg: &mut Msg, depth: usize, steps: &[UpAsked]) {
        let (origin, first, len) = (self.rank, self.appl, msg.hdrs.len());
        msg.hdrs.truncate(depth);
        for asked in steps {
            let (i, at) = (usize::from(asked.layer), usize::from(asked.layer) - first);
            debug_assert!(!asked.keep && !asked.join, "only branches that keep nothing run in place");
            let popped = pop_unpredicted(&mut msg.hdrs, at);
            let header = popped.as_ref().unwrap_or_else(|| msg.hdrs.predicted(at).expect("compact"));
            let up = Up { origin, cast: true, qos: asked.qos, header };
            self.apply(i, now, |layer, out| layer.fast_up_apply(&up, msg, out));
        }
        let regrown = msg.hdrs.regrow(len);
        debug_assert!(regrown, "a compact stack grows back");
    }

    /// The reply branch's actions ([`Stack::reply_dn`] assembled it), then its transmit.
    fn act_reply(&mut self, now: Instant, (dest, ack, steps): Reply) {
        let kept = Kept { trace: Trace::SendDn, peer: dest };
        for asked in &steps {
            let i = usize::from(asked.layer);
            let down = Down { dest: Some(dest), qos: asked.qos, len: 0 };
            self.apply(i, now, |layer, out| layer.fast_dn_apply(&down, out));
            if asked.keep {
                self.keep(i, kept, now, ack.reached(usize::from(asked.depth)));
            }
        }
        self.transmits.push_back(Transmit { mux: Mux::Send { dest }, msg: ack, to: None });
    }

    /// Pushes the send template's headers of the layers `range` (inert on a send going down).
    fn push_send_template(&self, msg: &mut Msg, range: std::ops::Range<usize>) {
        for i in range {
            let template = self.templates[1].as_ref().expect("only a compiled trace leaves layers out");
            msg.push(template.hdrs.header(i - self.appl).expect("a layer of the trace").clone());
        }
    }

    /// Queues the copy of a message that layer `index` keeps, for delayed processing
    /// ([`Stack::settle`]).
    fn keep(&mut self, index: usize, kept: Kept, now: Instant, msg: Msg) {
        let layer = u8::try_from(index).expect("at most 32 layers");
        self.delayed.push_back(Delayed { layer, kept, now, msg });
    }

    /// Runs one layer's fast-path action with an outbox like its handlers get (alarms, counters
    /// and deliveries; no events).
    pub(super) fn apply(
        &mut self,
        index: usize,
        now: Instant,
        f: impl FnOnce(&mut crate::layers::AnyLayer, &mut Outbox<'_>),
    ) {
        #[cfg(test)]
        if SKIP_ACTION.with(std::cell::Cell::get) == Some(self.view.stack.layers()[index]) {
            return;
        }
        let mut alarm = None;
        let mut out = outbox!(self, now, &mut alarm);
        f(&mut self.layers[index], &mut out);
        debug_assert!(self.scratch.is_empty(), "a fast-path action emitted events");
        self.merge_alarm(index, alarm);
    }
}

mod express;
mod fused;

pub(crate) use fused::Fused;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod compiled_tests;

#[cfg(test)]
mod delayed_tests;
