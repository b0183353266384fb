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
use crate::fast::{DnStep, Down, Kept, Trace, Up, UpStep};
use crate::layer::{Ev, Outbox};
use crate::time::Instant;
use crate::{Payload, Rank};
use motet_wire::{Header, HeaderStack, Mux};
use smallvec::SmallVec;
use std::sync::Arc;

/// Layers on one trace (the deepest preset has fewer).
type Steps<T> = SmallVec<[T; 16]>;
/// What each layer asked on a trace going down does: (its index, what reached it, its step).
type DnSteps = Steps<(usize, Down, DnStep)>;
/// What each layer asked on a trace going up does: (its index, the guarantee that reached it, its
/// step), bottom up.
type UpSteps = Steps<(usize, Qos, UpStep)>;

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
        if self.plans_stale {
            self.compile();
        }
        if self.delayed.len() >= DELAYED_MAX {
            self.settle_for_input();
        }
        let plan = self.plans[trace as usize]?;
        Some((plan, Arc::clone(&self.templates[usize::from(!trace.is_cast())].as_ref()?.hdrs)))
    }

    /// Compiles every trace that has a template: the layers below `appl` that are not inert on it
    /// in their current state. The layer that numbers the trace is always asked.
    pub(super) fn compile(&mut self) {
        for trace in Trace::ALL {
            let Some(template) = &self.templates[usize::from(!trace.is_cast())] else {
                self.plans[trace as usize] = None;
                continue;
            };
            let mut plan = Plan { active: 0, len_max: usize::MAX };
            for (i, layer) in self.layers.iter().enumerate().skip(self.appl) {
                #[cfg(test)]
                if FORCE_INERT.with(std::cell::Cell::get) == Some(self.view.stack.layers()[i]) && i != template.layer {
                    continue;
                }
                match layer.fast_inert(trace) {
                    Some(len_max) if i != template.layer => plan.len_max = plan.len_max.min(len_max),
                    _ => plan.active |= 1 << i,
                }
            }
            self.plans[trace as usize] = Some(plan);
        }
        self.plans_stale = false;
    }

    /// Runs an application cast (`dest` `None`) or send down the bypass: compiled when it can,
    /// else interpreted. Gives the payload back with the layer whose condition did not hold (the
    /// caller takes the layered path).
    pub(super) fn bypass_dn(
        &mut self,
        now: Instant,
        dest: Option<Rank>,
        payload: Payload,
    ) -> Result<Took, (Payload, usize)> {
        let trace = Trace::down(dest);
        match self.compiled(trace) {
            Some((plan, template)) if payload.len() <= plan.len_max => {
                // The loop-back branch, if any, is a cast going up: its compiled trace, if the
                // payload is within its reach.
                let back = self.plans[Trace::CastUp as usize].filter(|p| payload.len() <= p.len_max).map(|p| p.active);
                let took = self.trace_dn(now, dest, payload, plan.active, back, Some(template))?;
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
                self.trace_dn(now, dest, payload, all, Some(all), template)
            }
        }
    }

    /// A trace going down that asks the layers of `active` (every other one is inert on it and
    /// gets its header from `template`). `back`: the layers to ask on the loop-back branch, if
    /// one is allowed.
    fn trace_dn(
        &mut self,
        now: Instant,
        dest: Option<Rank>,
        payload: Payload,
        active: u32,
        back: Option<u32>,
        template: Option<Arc<motet_wire::Template>>,
    ) -> Result<Took, (Payload, usize)> {
        let top = self.appl;
        let mut down = Down { dest, qos: Qos::Reliable, len: payload.len() };
        // Conditions, top down: (the layer, what reached it, what it does). A layer that splits
        // the message ends this phase: each part is asked about below it, once it exists.
        let mut steps = DnSteps::new();
        let mut loopback = None;
        for i in top_down(active) {
            let Some(step) = self.layers[i].fast_dn(&down) else { return Err((payload, i)) };
            if step.loopback {
                if loopback.is_some() {
                    return Err((payload, i));
                }
                loopback = Some(i);
            }
            let next = Down { qos: step.qos, ..down };
            let split = step.parts > 1;
            steps.push((i, down, step));
            down = next;
            if split {
                break;
            }
        }
        // The loop-back branch: the message as it reached `local` goes up through the layers
        // between `appl` and `local` as this endpoint's own cast; the headers they see are those
        // pushed on the way down.
        let mut up_steps = UpSteps::new();
        if let Some(at) = loopback {
            let Some(back) = back else { return Err((payload, at)) };
            let mut qos = steps.iter().find(|s| s.0 == at).expect("local was asked").1.qos;
            for i in bottom_up(back & span(top, at)) {
                let header = match (steps.iter().find(|s| s.0 == i), &template) {
                    (Some((_, _, step)), _) => &step.header,
                    (None, Some(template)) => template.header(i - top).expect("a layer of the trace"),
                    (None, None) => unreachable!("only a compiled trace leaves layers out"),
                };
                let up = Up { origin: self.rank, cast: true, qos, header };
                match self.layers[i].fast_up(&up) {
                    // A reply, a join or a release on the loop-back branch: the layered path's.
                    Some(step) if step.reply.is_none() && !step.join && !step.release => {
                        qos = step.qos;
                        let absorb = step.absorb;
                        up_steps.push((i, up.qos, step));
                        if absorb {
                            break;
                        }
                    }
                    _ => return Err((payload, i)),
                }
            }
        }
        // In the compact form of the template (no allocation; a header it does not predict
        // reformats it).
        let hdrs = match &template {
            Some(template) => HeaderStack::compact(template),
            None => HeaderStack::with_capacity(steps.len()),
        };
        Ok(self.act_dn(now, dest, Msg { hdrs, payload }, template.as_ref(), &mut steps, loopback, &up_steps))
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
            // Each part may leave a copy to keep: the bound on delayed work holds within a trace.
            if self.delayed.len() >= DELAYED_MAX {
                self.settle_for_input();
            }
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
    fn part_dn(
        &mut self,
        now: Instant,
        dest: Option<Rank>,
        msg: Msg,
        qos: Qos,
        active: u32,
    ) -> Result<(), (Msg, usize)> {
        let mut down = Down { dest, qos, len: msg.payload.len() };
        let mut steps = DnSteps::new();
        for i in top_down(active) {
            match self.layers[i].fast_dn(&down) {
                Some(step) if !step.loopback && step.parts <= 1 => {
                    let next = Down { qos: step.qos, ..down };
                    steps.push((i, down, step));
                    down = next;
                }
                _ => return Err((msg, i)),
            }
        }
        let took = self.act_dn(now, dest, msg, None, &mut steps, None, &[]);
        debug_assert_eq!(took, Took::Hit, "the conditions refused a second split");
        Ok(())
    }

    /// The actions of a trace going down, top down, assembling the message as the layers would:
    /// the headers of the layers not asked come from `template`. At a layer that splits the
    /// message, the parts go on from there ([`Stack::parts_dn`]).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)] // into the trace handlers: a call would move the message and the steps
    fn act_dn(
        &mut self,
        now: Instant,
        dest: Option<Rank>,
        mut msg: Msg,
        template: Option<&Arc<motet_wire::Template>>,
        steps: &mut DnSteps,
        loopback: Option<usize>,
        back: &[(usize, Qos, UpStep)],
    ) -> Took {
        let top = self.appl;
        // Drained in place: a move of the steps would copy their whole inline array.
        for (i, down, step) in steps.drain(..) {
            if let Some(template) = template {
                msg.hdrs.push_template(template, i - top);
            }
            self.apply(i, now, |layer, out| layer.fast_dn_apply(&down, &msg, out));
            if step.parts > 1 {
                return self.parts_dn(now, dest, i, step.parts, step.qos, &msg);
            }
            if step.keep {
                let kept = Kept { trace: Trace::down(dest), peer: dest.unwrap_or(self.rank) };
                self.keep(i, kept, now, msg.clone());
            }
            if loopback == Some(i) {
                self.act_up(now, self.rank, true, msg.clone(), self.appl, back);
            }
            msg.push(step.header);
        }
        if let Some(template) = template {
            msg.hdrs.push_template(template, self.layers.len() - top);
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
    ) -> Result<Took, (Msg, Option<usize>)> {
        let trace = Trace::up(cast);
        let qos = if cast { Qos::Unreliable } else { Qos::Reliable };
        let took = self.trace_up_from_network(now, origin, cast, msg, qos, trace)?;
        // What went on up on the layered path, mid-trace (`go_on_up`), runs now.
        if !self.queue.is_empty() {
            self.settle_for_input();
            self.run(now);
        }
        Ok(took)
    }

    /// [`Stack::bypass_up`]'s trace: compiled or interpreted.
    fn trace_up_from_network(
        &mut self,
        now: Instant,
        origin: Rank,
        cast: bool,
        msg: Msg,
        qos: Qos,
        trace: Trace,
    ) -> Result<Took, (Msg, Option<usize>)> {
        let (top, n) = (self.appl, self.layers.len());
        match self.compiled(trace) {
            Some((plan, template))
                if msg.payload.len() <= plan.len_max && msg.hdrs.compact_seqno(&template).is_some() =>
            {
                // A whole message of the template: every inert layer's header is its template
                // header. A reply branch is a send going down: its compiled trace.
                let Some(send) = self.plans[Trace::SendDn as usize].map(|p| p.active) else {
                    return self.trace_up(now, origin, cast, msg, qos, top, span(top, n), span(top, n), true);
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
        let mut steps = UpSteps::new();
        let mut reply: Option<(usize, Rank, Header)> = None;
        #[allow(unused_mut)] // the test hook `SKIP_RELEASE` clears it
        let mut release: Option<(usize, Qos, bool)> = None;
        for i in bottom_up(active) {
            let header = msg.hdrs.get(i - first).expect("one header per layer from the first");
            let up = Up { origin, cast, qos, header: &header };
            let Some(step) = self.layers[i].fast_up(&up) else { return Err((msg, refused(i))) };
            if let Some((dest, header)) = &step.reply {
                if reply.is_some() {
                    // Two replies in one trace: rare, left to the layered path.
                    return Err((msg, refused(i)));
                }
                reply = Some((i, *dest, header.clone()));
            }
            if step.release {
                if release.is_some() {
                    return Err((msg, refused(i)));
                }
                release = Some((i, step.qos, step.keep));
            }
            qos = step.qos;
            let ends = step.absorb || step.join;
            steps.push((i, up.qos, step));
            if ends {
                break;
            }
        }
        if !application && !steps.last().is_some_and(|(_, _, step)| step.absorb) {
            return Err((msg, None));
        }
        // The reply branch: a header-only send from the replying layer down.
        let mut reply_steps = DnSteps::new();
        if let Some((at, dest, _)) = &reply {
            let mut down = Down { dest: Some(*dest), qos: Qos::Reliable, len: 0 };
            for i in top_down(send & below(*at)) {
                match self.layers[i].fast_dn(&down) {
                    Some(step) if !step.loopback => {
                        let next = Down { qos: step.qos, ..down };
                        reply_steps.push((i, down, step));
                        down = next;
                    }
                    _ => return Err((msg, refused(i))),
                }
            }
        }
        let joined = self.act_up(now, origin, cast, msg, first, &steps);
        if let Some(reply) = reply {
            self.act_reply(now, reply, &mut reply_steps);
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
            loop {
                // A run may be long (up to a receive window): the bound on delayed work holds
                // within a trace. What was kept so far is filed in order.
                if self.delayed.len() >= DELAYED_MAX {
                    self.settle_for_input();
                }
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
        steps: &[(usize, Qos, UpStep)],
    ) -> Option<(usize, Msg)> {
        let trace = Trace::up(cast);
        // A layer that keeps the message (a receiver's retransmission buffer) takes the message
        // itself after the delivery, when its headers are in the compact form: the delivery has
        // its own reference to the payload, and the popped headers grow back from the template.
        // That saves the copy and its release on the path to the delivery.
        let mut keep_whole = None;
        // A compact message's headers are its template's: borrowed from it, not popped as copies
        // (only the sequence number's header is built).
        let template = msg.hdrs.template().map(Arc::clone);
        for (i, qos, step) in steps {
            let at = i - first;
            let popped;
            let header = match &template {
                Some(template) if at != template.slot() => {
                    msg.hdrs.truncate(at);
                    template.header(at).expect("one header per layer, checked")
                }
                _ => {
                    msg.hdrs.truncate(at + 1);
                    popped = msg.hdrs.pop().expect("one header per layer, checked");
                    &popped
                }
            };
            let up = Up { origin, cast, qos: *qos, header };
            if step.join {
                debug_assert!(keep_whole.is_none(), "a part of a split message is never compact");
                let mut whole = None;
                let part = std::mem::take(&mut msg);
                self.apply(*i, now, |layer, out| whole = Some(layer.fast_join(&up, part, out)));
                return Some((*i, whole.expect("the joining layer gives the message back")));
            }
            self.apply(*i, now, |layer, out| layer.fast_up_apply(&up, &msg, out));
            if step.keep {
                let kept = Kept { trace, peer: origin };
                if keep_whole.is_none() && msg.hdrs.is_compact() {
                    keep_whole = Some((*i, kept, msg.hdrs.len()));
                } else {
                    self.keep(*i, kept, now, msg.clone());
                }
            }
        }
        if let Some((layer, kept, len)) = keep_whole {
            let regrown = msg.hdrs.regrow(len);
            debug_assert!(regrown, "a compact stack grows back");
            self.keep(layer, kept, now, msg);
        }
        None
    }

    /// The reply branch's actions: the header-only send from the layer at `reply.0`, assembled
    /// down to the bottom (the headers of the layers not asked come from the send template).
    fn act_reply(&mut self, now: Instant, (at, dest, header): (usize, Rank, Header), steps: &mut DnSteps) {
        let n = self.layers.len();
        let mut ack = Msg { hdrs: HeaderStack::with_capacity(n - at), payload: Payload::new() };
        ack.push(header);
        let mut next = at + 1;
        for (i, down, step) in steps.drain(..) {
            self.push_send_template(&mut ack, next..i);
            self.apply(i, now, |layer, out| layer.fast_dn_apply(&down, &ack, out));
            if step.keep {
                let kept = Kept { trace: Trace::SendDn, peer: dest };
                self.keep(i, kept, now, ack.clone());
            }
            ack.push(step.header);
            next = i + 1;
        }
        self.push_send_template(&mut ack, next..n);
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
        self.delayed.push(Delayed { layer, kept, now, msg });
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
        let mut out = Outbox {
            now,
            rank: self.rank,
            events: &mut self.scratch,
            alarm: &mut alarm,
            app: &mut self.app,
            stats: &mut self.stats,
        };
        f(&mut self.layers[index], &mut out);
        debug_assert!(self.scratch.is_empty(), "a fast-path action emitted events");
        self.merge_alarm(index, alarm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Action;
    use crate::stack::Bypass;
    use crate::LayerKind;

    fn cast(bypass: Bypass) -> Result<Stack, String> {
        let view = crate::testing::view_of("vsync", 3);
        let mut stack = Stack::with_bypass(view, 1, Instant::ZERO, bypass).unwrap();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            stack.handle_action(Instant::ZERO, Action::Cast(b"x".as_slice().into())).unwrap();
            // The layers' states are compared once delayed processing is done.
            stack.settle();
        }));
        match result {
            Ok(()) => Ok(stack),
            Err(panic) => Err(panic.downcast_ref::<String>().cloned().unwrap_or_default()),
        }
    }

    #[test]
    fn a_cast_takes_the_bypass_and_equals_the_layered_path() {
        let stack = cast(Bypass::Diff).unwrap();
        assert_eq!((stack.bypass_stats().hits, stack.bypass_stats().misses), (1, 0));
        let transmit = &stack.transmits[0];
        assert_eq!(transmit.mux, Mux::Cast);
        assert_eq!(transmit.msg.hdrs.len(), stack.layers.len() - stack.appl);
        assert!(matches!(stack.app.back(), Some(crate::AppEvent::Cast { origin: 1, .. })), "looped back");
    }

    #[test]
    fn the_diff_catches_a_bypass_that_skips_a_layers_bookkeeping() {
        for layer in [LayerKind::Mnak, LayerKind::Mflow, LayerKind::Local] {
            SKIP_ACTION.with(|s| s.set(Some(layer)));
            let caught = cast(Bypass::Diff).err();
            SKIP_ACTION.with(|s| s.set(None));
            let message = caught.unwrap_or_else(|| panic!("a skipped {layer:?} action went unnoticed"));
            assert!(message.contains(&format!("layer {} differs", layer.name())), "{message}");
        }
        // The same bug with the bypass on and no check: nothing notices.
        SKIP_ACTION.with(|s| s.set(Some(LayerKind::Mnak)));
        assert!(cast(Bypass::On).is_ok());
        SKIP_ACTION.with(|s| s.set(None));
    }
}

#[cfg(test)]
mod compiled_tests {
    use super::*;
    use crate::event::Action;
    use crate::stack::Bypass;
    use crate::testkit::Group;
    use crate::view::RankSet;
    use crate::LayerKind;

    fn names(stack: &Stack, trace: Trace) -> Vec<&'static str> {
        let plan = stack.plans[trace as usize].expect("compiled");
        top_down(plan.active).map(|i| stack.view.stack.layers()[i].name()).collect()
    }

    #[test]
    fn vsync_compiles_each_trace_to_the_layers_with_work() {
        let mut stack = Stack::new(crate::testing::view_of("vsync", 3), 1, Instant::ZERO).unwrap();
        stack.compile();
        assert_eq!(names(&stack, Trace::CastDn), ["appl", "local", "mflow", "mnak"]);
        assert_eq!(names(&stack, Trace::SendDn), ["appl", "pt2ptw", "pt2pt"]);
        assert_eq!(names(&stack, Trace::CastUp), ["appl", "mflow", "mnak"]);
        assert_eq!(names(&stack, Trace::SendUp), ["appl", "pt2ptw", "pt2pt"]);
        assert_eq!(stack.plans[Trace::CastDn as usize].unwrap().len_max, 1024, "frag passes one fragment");
        assert_eq!(stack.plans[Trace::CastUp as usize].unwrap().len_max, usize::MAX);
        // The layered path runs (a failure notice): the traces recompile, and `bottom` now checks
        // each arrival's origin.
        let mut failed = RankSet::new();
        failed.insert(2);
        stack.handle_fail(Instant::ZERO, failed);
        assert!(stack.plans_stale);
        stack.compile();
        assert!(names(&stack, Trace::CastUp).contains(&"bottom"), "{:?}", names(&stack, Trace::CastUp));
        assert!(!names(&stack, Trace::CastDn).contains(&"bottom"));
    }

    #[test]
    fn common_traces_run_compiled_and_equal_the_layered_path() {
        let mut group = Group::with_bypass(3, "vsync", Bypass::Diff);
        for k in 0..100u8 {
            group.act(0, Action::Cast(vec![k; 8].into())).unwrap();
            group.act(1, Action::Send(vec![2], vec![k; 8].into())).unwrap();
        }
        let stats: Vec<_> = group.nodes.iter().map(|(node, _)| node.bypass_stats()).collect();
        assert!(stats.iter().all(|s| s.hits > 0 && s.compiled == s.hits), "{stats:?}");
        // A fragmented cast and send (4,000 B: 4 parts of 1,024 B at most) are interpreted: split
        // going down, each part kept by `frag` going up and the last one joined, all on the bypass.
        group.act(2, Action::Cast(vec![1; 4000].into())).unwrap();
        group.act(0, Action::Send(vec![1], vec![2; 4000].into())).unwrap();
        let after: Vec<_> = group.nodes.iter().map(|(node, _)| node.bypass_stats()).collect();
        let new = |r: usize| (after[r].hits - stats[r].hits, after[r].misses - stats[r].misses);
        assert_eq!([new(0), new(1), new(2)], [(1 + 4, 0), (4 + 4, 0), (1, 0)], "{after:?}");
        assert!(after.iter().zip(&stats).all(|(a, s)| a.compiled == s.compiled), "interpreted");
        assert_eq!(group.delivered, [101, 102, 201], "casts everywhere, sends at ranks 1 and 2");
    }

    #[test]
    fn credit_reports_and_acknowledgements_are_absorbed_on_the_bypass() {
        let mut group = Group::with_bypass(2, "vsync", Bypass::Diff);
        for k in 0..256u16 {
            group.act(1, Action::Cast(k.to_be_bytes().to_vec().into())).unwrap();
            group.act(1, Action::Send(vec![0], k.to_be_bytes().to_vec().into())).unwrap();
        }
        assert_eq!(group.delivered, [512, 256]);
        // Rank 0 reported credit every 32 casts and acknowledged sends in batches; rank 1 kept
        // both on the bypass, compared with the layered path at every step.
        let sender = group.nodes[1].0.bypass_stats();
        assert!(sender.absorbed >= 256 / 32, "{sender:?}");
        let (_, stack) = group.nodes[1].0.stacks().next().expect("one stack");
        assert!(stack.buffered() < 512, "acknowledgements freed the send buffer: {}", stack.buffered());
    }

    /// Rank 1 casts five times; the network hands rank 0 casts 0, 2, 3, 2 again, then 1. With
    /// `nak_delay` zero the gap is NAKed at once, as the trace's reply; with a delay, when the
    /// timer finds it still open.
    fn a_cast_ahead_of_a_gap_is_kept_on_the_bypass(nak_delay: crate::Duration) {
        let mut config = crate::StackConfig::default();
        config.mnak.nak_delay = nak_delay;
        let mut group = Group::with_config(2, "vsync", Bypass::Diff, config);
        let (sender, id) = &mut group.nodes[1];
        let mut datagrams = Vec::new();
        for k in 0..5u8 {
            sender.handle_action(group.now, *id, Action::Cast(vec![k; 8].into())).unwrap();
            while let Some(out) = sender.poll_transmit() {
                datagrams.push(out.to_bytes());
            }
        }
        assert_eq!(datagrams.len(), 5);
        let now = group.now;
        let receiver = &mut group.nodes[0].0;
        let deliver = |receiver: &mut crate::Node, k: usize| {
            let before = receiver.bypass_stats();
            receiver.handle_datagram(now, datagrams[k].clone());
            let after = receiver.bypass_stats();
            let transmits: Vec<_> = std::iter::from_fn(|| receiver.poll_transmit()).collect();
            (after.hits - before.hits, after.misses - before.misses, transmits)
        };
        let the_nak = |transmits: &[crate::Outgoing]| {
            assert_eq!(transmits.len(), 1, "one NAK");
            let nak = motet_wire::datagram::decode(transmits[0].to_bytes()).unwrap();
            assert_eq!(nak.head.mux, Mux::Send { dest: 1 });
            let expected = motet_wire::hdr::mnak::Header::Nak { origin: 1, lo: 1, hi: 1 };
            assert!(nak.hdrs.iter().any(|h| *h == expected), "{:?}", nak.hdrs);
        };
        assert_eq!(deliver(receiver, 0).0, 1, "in order: the bypass");
        // Ahead of the gap: kept on the bypass, and the gap (cast 1) is NAKed to the origin, at
        // once or later.
        let (hits, _, transmits) = deliver(receiver, 2);
        assert_eq!(hits, 1);
        match nak_delay.is_zero() {
            true => the_nak(&transmits),
            false => assert!(transmits.is_empty(), "the NAK waits for the gap to last"),
        }
        // Further ahead: kept on the bypass, nothing new to NAK.
        let (hits, _, transmits) = deliver(receiver, 3);
        assert_eq!((hits, transmits.len()), (1, 0));
        // A duplicate of a held cast is the layered path's (dropped there).
        let (hits, misses, _) = deliver(receiver, 2);
        assert_eq!((hits, misses), (0, 1));
        if !nak_delay.is_zero() {
            let due = receiver.poll_alarm().expect("the NAK's alarm");
            assert_eq!(due, now + nak_delay);
            receiver.handle_timeout(due);
            the_nak(&std::iter::from_fn(|| receiver.poll_transmit()).collect::<Vec<_>>());
        }
        // The cast that fills the gap takes the bypass too, and releases the run held behind it
        // (casts 2 and 3, each going on up on the bypass); the diff compares every step with the
        // layered twin.
        let (hits, misses, _) = deliver(receiver, 1);
        assert_eq!((hits, misses), (1, 0));
        receiver.settle();
        let delivered =
            std::iter::from_fn(|| receiver.poll_event()).filter(|(_, e)| matches!(e, crate::AppEvent::Cast { .. }));
        assert_eq!(delivered.count(), 4);
        receiver.check_invariants();
    }

    #[test]
    fn a_cast_ahead_of_a_gap_is_kept_on_the_bypass_and_nak_ed_when_the_gap_lasts() {
        a_cast_ahead_of_a_gap_is_kept_on_the_bypass(crate::StackConfig::default().mnak.nak_delay);
    }

    #[test]
    fn a_cast_ahead_of_a_gap_is_kept_on_the_bypass_with_its_nak() {
        a_cast_ahead_of_a_gap_is_kept_on_the_bypass(crate::Duration(0));
    }

    /// `pt2pt` on the bypass, as `mnak` above: rank 0 gets sends 0, 2, 3, 2 again, then 1 (of 0-4).
    #[test]
    fn a_send_ahead_of_a_gap_is_kept_on_the_bypass_and_the_send_that_fills_it_releases_the_run() {
        let mut group = Group::with_bypass(2, "vsync", Bypass::Diff);
        let (sender, id) = &mut group.nodes[1];
        let mut datagrams = Vec::new();
        for k in 0..5u8 {
            sender.handle_action(group.now, *id, Action::Send(vec![0], vec![k; 8].into())).unwrap();
            datagrams.extend(std::iter::from_fn(|| sender.poll_transmit()).map(|out| out.to_bytes()));
        }
        assert_eq!(datagrams.len(), 5);
        let receiver = &mut group.nodes[0].0;
        let outcomes: Vec<_> = [0, 2, 3, 2, 1]
            .into_iter()
            .map(|k| {
                let before = receiver.bypass_stats();
                receiver.handle_datagram(group.now, datagrams[k].clone());
                let after = receiver.bypass_stats();
                (after.hits - before.hits, after.misses - before.misses)
            })
            .collect();
        // The duplicate is the layered path's (dropped and answered with an ack there).
        assert_eq!(outcomes, [(1, 0), (1, 0), (1, 0), (0, 1), (1, 0)]);
        receiver.settle();
        let delivered: Vec<u8> = std::iter::from_fn(|| receiver.poll_event())
            .filter_map(|(_, e)| match e {
                crate::AppEvent::Send { payload, .. } => Some(payload.to_bytes()[0]),
                _ => None,
            })
            .collect();
        assert_eq!(delivered, [0, 1, 2, 3]);
        receiver.check_invariants();
    }

    /// The seeded bugs: a split that loses its last part, a release that is forgotten. The diff
    /// names what differs; with the bypass on and no check, nothing notices at once.
    #[test]
    fn the_diff_catches_a_lost_part_and_a_forgotten_release() {
        let caught = |hook: &'static std::thread::LocalKey<std::cell::Cell<bool>>, run: fn(Bypass)| {
            hook.with(|h| h.set(true));
            let result = std::panic::catch_unwind(|| run(Bypass::Diff));
            let quiet = std::panic::catch_unwind(|| run(Bypass::On)).is_ok();
            hook.with(|h| h.set(false));
            let message = result.err().and_then(|p| p.downcast_ref::<String>().cloned()).expect("the diff catches it");
            (message, quiet)
        };
        let split = |bypass| {
            let mut group = Group::with_bypass(2, "vsync", bypass);
            group.act(1, Action::Cast(vec![7; 4000].into())).unwrap();
        };
        let (message, quiet) = caught(&SKIP_LAST_PART, split);
        assert!(message.contains("transmits differ"), "{message}");
        assert!(quiet);
        let release = |bypass| {
            let mut group = Group::with_bypass(2, "vsync", bypass);
            let (sender, id) = &mut group.nodes[1];
            let mut datagrams = Vec::new();
            for k in 0..3u8 {
                sender.handle_action(group.now, *id, Action::Cast(vec![k; 8].into())).unwrap();
                datagrams.extend(std::iter::from_fn(|| sender.poll_transmit()).map(|out| out.to_bytes()));
            }
            for k in [0, 2, 1] {
                group.nodes[0].0.handle_datagram(group.now, datagrams[k].clone());
            }
        };
        let (message, quiet) = caught(&SKIP_RELEASE, release);
        assert!(message.contains("differ"), "{message}");
        assert!(quiet);
    }

    #[test]
    fn the_diff_catches_a_false_inert_declaration() {
        for layer in [LayerKind::Mflow, LayerKind::Local, LayerKind::Pt2ptw] {
            FORCE_INERT.with(|f| f.set(Some(layer)));
            let caught = std::panic::catch_unwind(|| {
                let mut group = Group::with_bypass(2, "vsync", Bypass::Diff);
                for k in 0..40u8 {
                    group.act(0, Action::Cast(vec![k; 8].into())).unwrap();
                    group.act(1, Action::Send(vec![0], vec![k; 8].into())).unwrap();
                }
            });
            FORCE_INERT.with(|f| f.set(None));
            let message = caught.expect_err("a false inert declaration went unnoticed");
            let message = message.downcast_ref::<String>().cloned().unwrap_or_default();
            assert!(message.contains("bypass diff"), "{layer:?}: {message}");
        }
    }
}

#[cfg(test)]
mod delayed_tests {
    use super::*;
    use crate::event::Action;
    use crate::stack::{Bypass, SETTLE_LATE};
    use crate::testkit::Group;
    use crate::time::Duration;

    fn buffered_at(stack: &Stack, layer: &str) -> usize {
        stack.buffered_by_layer().into_iter().find(|(name, _)| *name == layer).map_or(0, |(_, n)| n)
    }

    /// A split into more parts than delayed processing may hold, and the long run a gap-filling
    /// cast releases, keep the bound (`Stack::check_invariants`) without the driver settling.
    #[test]
    fn a_long_split_and_a_long_release_keep_delayed_work_bounded() {
        let mut group = Group::with_bypass(2, "vsync", Bypass::Diff);
        group.settle = false;
        // 60 parts of 1,024 B: all within `mflow`'s window, each keeping a copy at `mnak`.
        group.act(1, Action::Cast(vec![3; 60 * 1024].into())).unwrap();
        for (node, _) in &group.nodes {
            node.check_invariants();
        }
        assert_eq!(group.delivered, [1, 1]);
        // Rank 0 gets 60 casts with the first last: 59 are held, then one input releases them.
        let mut group = Group::with_bypass(2, "vsync", Bypass::Diff);
        group.settle = false;
        let (sender, id) = &mut group.nodes[1];
        let mut datagrams = Vec::new();
        for k in 0..60u8 {
            sender.handle_action(group.now, *id, Action::Cast(vec![k; 8].into())).unwrap();
            datagrams.extend(std::iter::from_fn(|| sender.poll_transmit()).map(|out| out.to_bytes()));
        }
        let receiver = &mut group.nodes[0].0;
        for datagram in datagrams[1..].iter().chain(&datagrams[..1]) {
            receiver.handle_datagram(group.now, datagram.clone());
            receiver.check_invariants();
        }
        let casts =
            std::iter::from_fn(|| receiver.poll_event()).filter(|(_, e)| matches!(e, crate::AppEvent::Cast { .. }));
        assert_eq!(casts.count(), 60);
    }

    #[test]
    fn a_kept_copy_is_filed_after_the_transmit_and_before_any_other_input() {
        let view = crate::testing::view_of("vsync", 3);
        let mut stack = Stack::with_bypass(view, 1, Instant::ZERO, Bypass::Diff).unwrap();
        stack.handle_action(Instant::ZERO, Action::Cast(b"x".as_slice().into())).unwrap();
        assert_eq!(stack.bypass_stats().compiled, 1);
        // Transmitted and looped back; mnak's copy for retransmission waits.
        assert_eq!(stack.transmits.len(), 1);
        assert!(stack.unsettled());
        assert_eq!(buffered_at(&stack, "mnak"), 0);
        assert_eq!(stack.buffered(), 1, "a copy waiting to be filed still counts as buffered");
        assert_eq!(stack.poll_timeout(), Some(Instant::ZERO), "the driver is asked to come back at once");
        // A send: pt2pt's copy and its retransmission alarm wait too, behind the cast's.
        let pt2pt = stack.view.stack.layers().iter().position(|&k| k == crate::LayerKind::Pt2pt).unwrap();
        stack.handle_action(Instant::ZERO, Action::Send(vec![2], b"y".as_slice().into())).unwrap();
        assert_eq!(stack.delayed.len(), 2);
        assert_eq!(stack.alarms[pt2pt], None);
        // The driver is idle: the copies are filed (and `Diff` compares every layer).
        stack.settle();
        assert!(!stack.unsettled());
        assert_eq!((buffered_at(&stack, "mnak"), buffered_at(&stack, "pt2pt")), (1, 1));
        assert!(stack.alarms[pt2pt].is_some(), "pt2pt's sweep is armed");
        // An input off the compiled traces settles first: a failure notice finds the buffers
        // filled.
        stack.handle_action(Instant::ZERO, Action::Cast(b"z".as_slice().into())).unwrap();
        assert!(stack.unsettled());
        let mut failed = crate::view::RankSet::new();
        failed.insert(0);
        stack.handle_fail(Instant::ZERO, failed);
        assert!(!stack.unsettled());
        stack.check_invariants();
    }

    #[test]
    fn compiled_traces_run_ahead_of_delayed_processing_and_equal_the_layered_path() {
        // The pump never settles: only the inputs that need it do, and the end of the test. Every
        // input is compared with the layered path; the layers' states at each settling.
        let mut group = Group::with_bypass(3, "vsync", Bypass::Diff);
        group.settle = false;
        for k in 0..200u8 {
            group.act(usize::from(k % 3), Action::Cast(vec![k; 8].into())).unwrap();
            group.act(1, Action::Send(vec![2], vec![k; 8].into())).unwrap();
            if k % 50 == 0 {
                group.tick(Duration::from_millis(60)); // sweeps and NAK timers: settle first
            }
        }
        let compiled: u64 = group.nodes.iter().map(|(node, _)| node.bypass_stats().compiled).sum();
        assert!(compiled > 600, "{compiled}");
        assert!(group.nodes.iter().any(|(node, _)| node.stacks().any(|(_, s)| s.unsettled())));
        for (node, _) in &mut group.nodes {
            node.settle();
            node.check_invariants();
        }
        assert_eq!(group.delivered, [200, 200, 400]);
    }

    #[test]
    fn the_diff_catches_an_input_that_does_not_settle_first() {
        let view = crate::testing::view_of("vsync", 3);
        let late = |settle_late: bool| {
            let mut stack = Stack::with_bypass(Arc::clone(&view), 1, Instant::ZERO, Bypass::Diff).unwrap();
            stack.handle_action(Instant::ZERO, Action::Send(vec![0], b"x".as_slice().into())).unwrap();
            SETTLE_LATE.with(|s| s.set(settle_late));
            // pt2pt's sweep retransmits the unacknowledged send: only if its copy was filed.
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                stack.handle_timeout(Instant::ZERO + Duration::from_millis(1_000));
            }));
            SETTLE_LATE.with(|s| s.set(false));
            result.err().and_then(|e| e.downcast_ref::<String>().cloned())
        };
        assert_eq!(late(false), None);
        let caught = late(true).expect("a retransmission buffer filed late went unnoticed");
        assert!(caught.contains("bypass diff after a timeout"), "{caught}");
    }
}
