//! The traces going down: an application cast or send from `appl` to the network, the parts of a
//! message a layer splits, and the conditions of a cast's loop-back branch up through the layers
//! between `appl` and `local` (thesis §3.3.2: conditions first, then actions; SOSP'99 §4).
//!
//! Apart from the traces going up ([`super::up`]): the two directions share only the step records
//! and helpers of [`super`] (`keep`, `apply`, the layer masks), and meet only at the loop-back
//! branch, whose actions are a trace going up's ([`Stack::loop_back`]).

#[cfg(any(test, feature = "fault-injection"))]
use super::SKIP_LAST_PART;
use super::{bottom_up, fused, span, top_down, DnAsked, Fused, Loopback, Split, Steps, Took, UpAsked};
use crate::event::{Dn, Msg, Qos};
use crate::fast::{Down, Kept, Trace, Up};
use crate::layer::Ev;
use crate::stack::{Stack, Transmit};
use crate::time::Instant;
use crate::{Payload, Rank};
use motet_wire::{HeaderStack, Mux};
use std::sync::Arc;

impl Stack {
    /// Runs an application cast (`dest` `None`) or send down the bypass: compiled when it can,
    /// else interpreted. Gives the payload back with the layer whose condition did not hold (the
    /// caller takes the layered path).
    pub(in crate::stack) fn bypass_dn(
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
    pub(super) fn loopback_branch(
        &self,
        msg: &Msg,
        at: usize,
        back: u32,
        mut qos: Qos,
    ) -> Result<Option<Steps<UpAsked>>, usize> {
        let (top, branch) = (self.appl, back & span(self.appl, at));
        if bottom_up(branch).all(|i| self.layers[i].fast_loopback_inert()) {
            return Ok(None);
        }
        let mut steps = Steps::<UpAsked>::new();
        for i in bottom_up(branch) {
            let header = msg.hdrs.get(i - top).expect("one header per layer above the loop-back");
            let up = Up { origin: self.rank, cast: true, qos, header: &header, len: msg.payload.len() };
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
            #[cfg(any(test, feature = "fault-injection"))]
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
            if !self.ask_dn(i, &mut down, &mut msg, &mut steps) {
                msg.hdrs.truncate(len);
                return Err((msg, i));
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
}
