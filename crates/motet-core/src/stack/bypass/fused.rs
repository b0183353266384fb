//! Fused traces: a compiled trace's layers called by their types, so that the compiler inlines
//! their declarations into one handler per trace shape (SOSP'99 §4: the optimizer emits one trace
//! handler per stack, the layers' common-case code inlined and partially evaluated; HvR §4).
//!
//! A compiled trace asks a few layers (`vsync`'s application cast going up asks `mnak`, `mflow`
//! and `appl`). The express trace ([`super::express`]) asks them through the registry's enum: a
//! dispatch per call, and each step handed back through memory. Here the trace's *shape*, the
//! kinds of the layers it asks in order, picks a handler instantiated for exactly those types
//! ([`UpChain`] over a list of them): every call is static, and the compiler sees the layers'
//! conditions and actions together with the code around them. The handler is the same code for
//! every shape, generated from the layers' declarations; what a shape adds is one entry in
//! [`up_for`] or [`dn_for`]. A trace whose shape has no entry takes the express trace going up,
//! the general handler going down, as before.
//!
//! Semantics are the express trace's exactly: the same conditions in the same order, the same
//! refusals (anything but a plain step gives the message back untouched, for the general handler),
//! the same actions, alarms and delayed copies. `Bypass::Diff` checks it like every other path.

use super::{span, Hdrs, Took};
use crate::event::{Msg, Qos};
use crate::fast::{Down, Kept, Trace, Up};
use crate::layer::Outbox;
use crate::layers::appl::Appl;
use crate::layers::mflow::Mflow;
use crate::layers::mnak::Mnak;
use crate::layers::pt2pt::Pt2pt;
use crate::layers::pt2ptw::Pt2ptw;
use crate::layers::{AnyLayer, LayerKind, Typed};
use crate::stack::Transmit;
use crate::stack::{merge_alarm, Delayed, Stack};
use crate::time::Instant;
use crate::{Payload, Rank};
use motet_wire::{HeaderStack, Mux, Template};
use std::sync::Arc;

/// Layers a fused trace asks at most.
pub(crate) const FUSED_MAX: usize = 4;

/// A fused trace going up: the stack, the asked layers' indices bottom up, and the message (an
/// application cast or send from `origin` in the compact form of its template, with the guarantee
/// the network gave it). The message comes back untouched when a condition is not a plain step.
pub(crate) type FusedUp = fn(&mut Stack, &[u8; FUSED_MAX], Instant, Rank, bool, Msg, Qos) -> Result<Took, Msg>;

/// A fused trace going down: the stack, the asked layers' indices top down, and an application
/// cast (`None`) or send with its payload; the inert layer the cast loops back from, above every
/// asked layer, and the layers to ask on the loop-back branch. The payload comes back when a
/// condition is not a plain step.
pub(crate) type FusedDn = fn(
    &mut Stack,
    &[u8; FUSED_MAX],
    Instant,
    Option<Rank>,
    Payload,
    Option<usize>,
    Option<u32>,
) -> Result<Took, Payload>;

/// A fused handler, going up or down.
#[derive(Clone, Copy)]
pub(crate) enum Handler {
    Up(FusedUp),
    Dn(FusedDn),
}

/// A compiled trace's fused handler, with the layers it asks.
#[derive(Clone, Copy)]
pub(crate) struct Fused {
    pub(crate) handler: Handler,
    /// The asked layers' indices, in the trace's order (bottom up going up, top down going down).
    pub(crate) at: [u8; FUSED_MAX],
}

impl std::fmt::Debug for Fused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fused").field("at", &self.at).finish_non_exhaustive()
    }
}

/// What the actions of a fused trace share: the outbox, where alarms and delayed copies go.
struct Act<'a> {
    out: Outbox<'a>,
    alarms: &'a mut [Option<Instant>],
    next_alarm: &'a mut Option<Instant>,
    delayed: &'a mut crate::stack::DelayedQueue,
    kept: Kept,
    now: Instant,
    /// Going up: the first layer that keeps a message in the compact form takes the message
    /// itself, after the delivery (as `act_up` does): its index, and the headers it had there.
    keep_whole: Option<(u8, usize)>,
    /// Going down: the destination and the payload's length (what each layer's `Down` says).
    dest: Option<Rank>,
    len: usize,
    /// Testing the checker: a layer whose action is skipped (`SKIP_ACTION`).
    skip: Option<LayerKind>,
}

impl Stack {
    /// The stack's layers, the context of a fused trace's actions over its other fields, and its
    /// templates.
    #[inline(always)]
    fn act<'a>(
        &'a mut self,
        now: Instant,
        kept: Kept,
        alarm: &'a mut Option<Instant>,
    ) -> (&'a mut [AnyLayer], Act<'a>, &'a [Option<crate::stack::Template>; 2]) {
        #[cfg(any(test, feature = "fault-injection"))]
        let skip = super::SKIP_ACTION.with(std::cell::Cell::get);
        #[cfg(not(any(test, feature = "fault-injection")))]
        let skip = None;
        let act = Act {
            out: outbox!(self, now, alarm),
            alarms: &mut self.alarms,
            next_alarm: &mut self.next_alarm,
            delayed: &mut self.delayed,
            kept,
            now,
            keep_whole: None,
            dest: None,
            len: 0,
            skip,
        };
        (&mut self.layers, act, &self.templates)
    }
}

impl Act<'_> {
    /// Files the alarm the action of the layer at `index` asked for, if any.
    #[inline(always)]
    fn alarm(&mut self, index: usize) {
        if let Some(at) = self.out.alarm.take() {
            merge_alarm(self.alarms, self.next_alarm, index, at);
        }
    }
}

/// A trace's layers as a list of types, bottom up: `(Mnak, (Mflow, (Appl, ())))`.
trait UpChain {
    /// The conditions from this layer on: false unless every one is a plain step (`steps` then
    /// holds each layer's guarantee in and whether it keeps a copy).
    fn cond(
        layers: &[AnyLayer],
        at: &[u8],
        up: (Rank, bool, Qos, usize),
        hdrs: &Hdrs<'_>,
        steps: &mut [(Qos, bool)],
    ) -> bool;

    /// The actions from this layer on, as `act_up` runs them.
    fn act(
        layers: &mut [AnyLayer],
        at: &[u8],
        origin: (Rank, bool),
        msg: &mut Msg,
        hdrs: &Hdrs<'_>,
        steps: &[(Qos, bool)],
        cx: &mut Act<'_>,
    );
}

impl UpChain for () {
    #[inline(always)]
    fn cond(_: &[AnyLayer], _: &[u8], _: (Rank, bool, Qos, usize), _: &Hdrs<'_>, _: &mut [(Qos, bool)]) -> bool {
        true
    }

    #[inline(always)]
    fn act(
        _: &mut [AnyLayer],
        _: &[u8],
        _: (Rank, bool),
        _: &mut Msg,
        _: &Hdrs<'_>,
        _: &[(Qos, bool)],
        _: &mut Act<'_>,
    ) {
    }
}

impl<H: Typed, T: UpChain> UpChain for (H, T) {
    #[inline(always)]
    fn cond(
        layers: &[AnyLayer],
        at: &[u8],
        (origin, cast, qos, len): (Rank, bool, Qos, usize),
        hdrs: &Hdrs<'_>,
        steps: &mut [(Qos, bool)],
    ) -> bool {
        let i = usize::from(at[0]);
        let header = hdrs.at(i);
        // The step by reference: moving it out (it has room for a reply's header) was a copy of
        // 64 bytes per layer.
        match &H::typed(&layers[i]).fast_up(&Up { origin, cast, qos, header, len }) {
            Some(step) if step.reply.is_none() && !step.absorb && !step.join && !step.release => {
                steps[0] = (qos, step.keep);
                T::cond(layers, &at[1..], (origin, cast, step.qos, len), hdrs, &mut steps[1..])
            }
            _ => false,
        }
    }

    #[inline(always)]
    fn act(
        layers: &mut [AnyLayer],
        at: &[u8],
        (origin, cast): (Rank, bool),
        msg: &mut Msg,
        hdrs: &Hdrs<'_>,
        steps: &[(Qos, bool)],
        cx: &mut Act<'_>,
    ) {
        let (i, (qos, keep)) = (usize::from(at[0]), steps[0]);
        let pos = i - hdrs.top;
        // The layer's header popped, and those of the inert layers below it: in the compact
        // form, a new length (the action sees the message as the layer's handler would).
        msg.hdrs.truncate(pos);
        if cx.skip != Some(H::KIND) {
            let up = Up { origin, cast, qos, header: hdrs.at(i), len: msg.payload.len() };
            H::typed_mut(&mut layers[i]).fast_up_apply(&up, msg, &mut cx.out);
            cx.alarm(i);
        }
        if keep {
            if cx.keep_whole.is_none() {
                cx.keep_whole = Some((at[0], pos));
            } else {
                cx.delayed.push_back(Delayed { layer: at[0], kept: cx.kept, now: cx.now, msg: msg.clone() });
            }
        }
        T::act(layers, &at[1..], (origin, cast), msg, hdrs, &steps[1..], cx);
    }
}

/// The fused trace going up of the shape `C` (see [`FusedUp`]).
fn fused_up<C: UpChain>(
    stack: &mut Stack,
    at: &[u8; FUSED_MAX],
    now: Instant,
    origin: Rank,
    cast: bool,
    mut msg: Msg,
    qos: Qos,
) -> Result<Took, Msg> {
    let top = stack.appl;
    let mut steps = [(Qos::Reliable, false); FUSED_MAX];
    let mut alarm = None;
    // The actions' context first (it changes nothing), so that the headers can be borrowed from
    // the template for both phases.
    let (layers, mut cx, templates) = stack.act(now, Kept { trace: Trace::up(cast), peer: origin }, &mut alarm);
    // Both callers hand over a whole message in the compact form of the trace's template (rebuilt
    // from a compressed datagram, or checked by `Stack::compiled_up`).
    let Some(hdrs) = templates[usize::from(!cast)].as_ref().and_then(|t| Hdrs::of(&t.hdrs, &msg.hdrs, top)) else {
        return Err(msg);
    };
    if !C::cond(layers, at, (origin, cast, qos, msg.payload.len()), &hdrs, &mut steps) {
        return Err(msg);
    }
    C::act(layers, at, (origin, cast), &mut msg, &hdrs, &steps, &mut cx);
    debug_assert!(cx.out.events.is_empty(), "a fast-path action emitted events");
    if let Some((layer, len)) = cx.keep_whole {
        let regrown = msg.hdrs.regrow(len);
        debug_assert!(regrown, "a compact stack grows back");
        cx.delayed.push_back(Delayed { layer, kept: cx.kept, now, msg });
    }
    Ok(Took::Hit)
}

/// A trace's layers as a list of types, top down: `(Mflow, (Mnak, ()))`.
trait DnChain {
    /// The conditions from this layer on, building the message as they go (the headers of the
    /// inert layers above each asked one from `template`): false unless every one is a plain
    /// step (`steps` then holds each layer's guarantee in, the headers the message had when it
    /// reached the layer, and whether it keeps a copy).
    fn cond(
        layers: &[AnyLayer],
        at: &[u8],
        top: usize,
        template: &Arc<Template>,
        down: Down,
        msg: &mut Msg,
        steps: &mut [(Qos, u8, bool)],
    ) -> bool;

    /// The actions from this layer on, as `act_dn` runs them.
    fn act(layers: &mut [AnyLayer], at: &[u8], msg: &Msg, steps: &[(Qos, u8, bool)], cx: &mut Act<'_>);
}

impl DnChain for () {
    #[inline(always)]
    fn cond(
        _: &[AnyLayer],
        _: &[u8],
        _: usize,
        _: &Arc<Template>,
        _: Down,
        _: &mut Msg,
        _: &mut [(Qos, u8, bool)],
    ) -> bool {
        true
    }

    #[inline(always)]
    fn act(_: &mut [AnyLayer], _: &[u8], _: &Msg, _: &[(Qos, u8, bool)], _: &mut Act<'_>) {}
}

impl<H: Typed, T: DnChain> DnChain for (H, T) {
    #[inline(always)]
    fn cond(
        layers: &[AnyLayer],
        at: &[u8],
        top: usize,
        template: &Arc<Template>,
        down: Down,
        msg: &mut Msg,
        steps: &mut [(Qos, u8, bool)],
    ) -> bool {
        let i = usize::from(at[0]);
        msg.hdrs.push_template(template, i - top);
        // The step by reference, as going up; a header the template does not predict (rare)
        // is copied into the full form.
        match &H::typed(&layers[i]).fast_dn(&down) {
            Some(step) if !step.loopback && step.parts <= 1 => {
                steps[0] = (down.qos, msg.hdrs.len() as u8, step.keep);
                if !msg.hdrs.push_predicted(&step.header) {
                    msg.push(step.header.clone());
                }
                T::cond(layers, &at[1..], top, template, Down { qos: step.qos, ..down }, msg, &mut steps[1..])
            }
            _ => false,
        }
    }

    #[inline(always)]
    fn act(layers: &mut [AnyLayer], at: &[u8], msg: &Msg, steps: &[(Qos, u8, bool)], cx: &mut Act<'_>) {
        let (i, (qos, depth, keep)) = (usize::from(at[0]), steps[0]);
        if cx.skip != Some(H::KIND) {
            let down = Down { dest: cx.dest, qos, len: cx.len };
            H::typed_mut(&mut layers[i]).fast_dn_apply(&down, &mut cx.out);
            cx.alarm(i);
        }
        if keep {
            cx.delayed.push_back(Delayed {
                layer: at[0],
                kept: cx.kept,
                now: cx.now,
                msg: msg.reached(usize::from(depth)),
            });
        }
        T::act(layers, &at[1..], msg, &steps[1..], cx);
    }
}

/// The fused trace going down of the shape `C` (see [`FusedDn`]), as `trace_dn` and `act_dn`
/// run a compiled trace whose only loop-back is an inert layer's above every asked one.
fn fused_dn<C: DnChain>(
    stack: &mut Stack,
    at: &[u8; FUSED_MAX],
    now: Instant,
    dest: Option<Rank>,
    payload: Payload,
    inert_loopback: Option<usize>,
    back: Option<u32>,
) -> Result<Took, Payload> {
    let top = stack.appl;
    let template = &stack.templates[usize::from(dest.is_some())].as_ref().expect("a compiled trace's").hdrs;
    let len = payload.len();
    let mut msg = Msg { hdrs: HeaderStack::compact(template), payload };
    let mut steps = [(Qos::Reliable, 0, false); FUSED_MAX];
    let down = Down { dest, qos: Qos::Reliable, len };
    if !C::cond(&stack.layers, at, top, template, down, &mut msg, &mut steps) {
        return Err(msg.payload);
    }
    // The loop-back branch: the message as it reached the inert layer (above every asked one,
    // so with the guarantee it started with).
    let mut branch = None;
    let mut own = None;
    if let Some(l) = inert_loopback {
        let Some(back) = back else { return Err(msg.payload) };
        if back & span(top, l) == 1 << top && msg.hdrs.is_compact() {
            // A branch that asks `appl` alone (every stack whose loop-back sits under it), on the
            // message itself: `appl` called by its type, as a fused trace going up calls it, in
            // place of `Stack::loopback_branch` and `Stack::loop_back`. A step that keeps a copy
            // (which those make from the message as it reached the branch) is theirs.
            let appl = Appl::typed(&stack.layers[top]);
            if !crate::layer::Layer::fast_loopback_inert(appl) {
                let header = msg.hdrs.get(0).expect("appl's header, first");
                let up = Up { origin: stack.rank, cast: true, qos: Qos::Reliable, header: &header, len };
                match &crate::layer::Layer::fast_up(appl, &up) {
                    Some(step) if *step == crate::fast::UpStep::to(Qos::Reliable) => own = Some(header),
                    _ => return Err(msg.payload),
                }
            }
        } else {
            match stack.loopback_branch(&msg, l, back, Qos::Reliable) {
                Ok(steps) => branch = steps.map(|steps| (l - top, steps)),
                Err(_) => return Err(msg.payload),
            }
        }
    }
    // The actions: the branch first (it leaves above every asked layer), then the asked layers'.
    if let Some(header) = own {
        #[cfg(any(test, feature = "fault-injection"))]
        super::APPL_BRANCHES.with(|n| n.set(n.get() + 1));
        own_cast_up(stack, now, &header, &msg);
    }
    if let Some((depth, up_steps)) = branch {
        stack.loop_back(now, &mut msg, depth, &up_steps);
    }
    let mut alarm = None;
    let kept = Kept { trace: Trace::down(dest), peer: dest.unwrap_or(stack.rank) };
    let (layers, mut cx, _) = stack.act(now, kept, &mut alarm);
    (cx.dest, cx.len) = (dest, len);
    C::act(layers, at, &msg, &steps, &mut cx);
    debug_assert!(cx.out.events.is_empty(), "a fast-path action emitted events");
    let template = &stack.templates[usize::from(dest.is_some())].as_ref().expect("a compiled trace's").hdrs;
    msg.hdrs.push_template(template, stack.layers.len() - top);
    let mux = match dest {
        None => Mux::Cast,
        Some(dest) => Mux::Send { dest },
    };
    stack.transmits.push_back(Transmit { mux, msg, to: None });
    Ok(Took::Hit)
}

/// The loop-back branch that asks `appl` alone: `appl`'s action on this endpoint's own cast (its
/// condition held on `header`, `appl`'s), called by its type, on the message going down. The
/// message is not cut to `appl`'s header and grown back, as `Stack::act_up_in_place` does for a
/// branch in general, because `appl`'s action reads only the origin and the payload (its comment
/// says so); nor is an action context built for it. (About 80 instructions of every cast with the
/// loop-back on: `motet bench worker bypass vsync 2 4 N`, 4,500 to 4,422; the simulator's
/// `--bypass diff` compares the outcome with the layered path's on every input.)
#[inline(always)]
fn own_cast_up(stack: &mut Stack, now: Instant, header: &motet_wire::Header, msg: &Msg) {
    let (rank, top) = (stack.rank, stack.appl);
    #[cfg(any(test, feature = "fault-injection"))]
    if super::SKIP_ACTION.with(std::cell::Cell::get) == Some(LayerKind::Appl) {
        return;
    }
    let up = Up { origin: rank, cast: true, qos: Qos::Reliable, header, len: msg.payload.len() };
    let mut alarm = None;
    let mut out = outbox!(stack, now, &mut alarm);
    crate::layer::Layer::fast_up_apply(Appl::typed_mut(&mut stack.layers[top]), &up, msg, &mut out);
    debug_assert!(out.events.is_empty(), "a fast-path action emitted events");
    // `appl` sets no alarm here today; one it set would be filed as every action's is.
    if let Some(at) = alarm {
        merge_alarm(&mut stack.alarms, &mut stack.next_alarm, top, at);
    }
}

/// A list of layer types, bottom up, as an [`UpChain`].
macro_rules! chain {
    () => { () };
    ($head:ty $(, $tail:ty)*) => { ($head, chain!($($tail),*)) };
}

/// The fused handler of a trace going up that asks layers of `kinds`, bottom up, if its shape has
/// one: the shapes of the application's casts and sends on the reliable stacks (`fifo`, `vsync`
/// and every property set without an ordering layer, with flow control or without). An ordering
/// layer's step is seldom plain (it holds a cast until its turn), so a shape with one would ask
/// its conditions twice as often as it saved a dispatch; those take the express trace.
pub(crate) fn up_for(kinds: &[LayerKind]) -> Option<FusedUp> {
    use LayerKind as K;
    Some(match kinds {
        [K::Mnak, K::Mflow, K::Appl] => fused_up::<chain!(Mnak, Mflow, Appl)>,
        [K::Pt2pt, K::Pt2ptw, K::Appl] => fused_up::<chain!(Pt2pt, Pt2ptw, Appl)>,
        // Without flow control (no `Flow` property).
        [K::Mnak, K::Appl] => fused_up::<chain!(Mnak, Appl)>,
        [K::Pt2pt, K::Appl] => fused_up::<chain!(Pt2pt, Appl)>,
        _ => return None,
    })
}

/// The fused handler of a trace going down that asks layers of `kinds`, top down, if its shape
/// has one: likewise the reliable stacks' casts and sends.
pub(crate) fn dn_for(kinds: &[LayerKind]) -> Option<FusedDn> {
    use LayerKind as K;
    Some(match kinds {
        [K::Mflow, K::Mnak] => fused_dn::<chain!(Mflow, Mnak)>,
        [K::Pt2ptw, K::Pt2pt] => fused_dn::<chain!(Pt2ptw, Pt2pt)>,
        [K::Mnak] => fused_dn::<chain!(Mnak)>,
        [K::Pt2pt] => fused_dn::<chain!(Pt2pt)>,
        _ => return None,
    })
}
