//! The traces going up: a cast or send from the network to `appl`, the reply branch a layer sends
//! down on the way (an acknowledgement, a credit report), the message a layer completes or releases
//! going on up, and the actions of a cast's loop-back branch (thesis §3.3.2: conditions first,
//! then actions; SOSP'99 §4).
//!
//! Apart from the traces going down ([`super::down`]): the two directions share only the step
//! records and helpers of [`super`] (`keep`, `apply`, the layer masks), and meet only at the
//! loop-back branch, whose conditions a trace going down asks ([`Stack::loopback_branch`]).

use super::{below, bottom_up, fused, pop_unpredicted, span, top_down, DnAsked, Fused, Reply, Steps, Took, UpAsked};
#[cfg(any(test, feature = "fault-injection"))]
use super::{REVERSE_RELEASE, SKIP_RELEASE};
use crate::event::{Msg, Qos};
use crate::fast::{Down, Kept, Trace, Up};
use crate::layer::Ev;
use crate::stack::{Bypass, Plan, Stack, Transmit};
use crate::time::Instant;
use crate::{Payload, Rank};
use motet_wire::{Header, HeaderStack, Mux};

impl Stack {
    /// Runs a cast or send from the network up the bypass: compiled when the message is in the
    /// compact form of its trace's template, else interpreted. Gives the message back with the
    /// layer whose condition did not hold (for an application message), or with `None` when no
    /// trace fits it (gossip, heartbeats, NAKs).
    pub(in crate::stack) fn bypass_up(
        &mut self,
        now: Instant,
        origin: Rank,
        cast: bool,
        msg: Msg,
        fast: bool,
    ) -> Result<Took, (Msg, Option<usize>)> {
        let trace = Trace::up(cast);
        let qos = if cast { Qos::Unreliable } else { Qos::Reliable };
        let took = self.trace_up_from_network(now, origin, cast, msg, qos, trace, fast);
        #[cfg(any(test, feature = "fault-injection"))]
        if took.is_err() {
            super::TO_LAYERED.with(|n| n.set(n.get() + 1));
        }
        let took = took?;
        // What went on up on the layered path, mid-trace (`go_on_up`), runs now.
        if !self.queue.is_empty() {
            self.settle_for_input();
            self.run(now);
        }
        Ok(took)
    }

    /// [`Stack::handle_recv_compressed`] past the expansion: the fused handler first, then the
    /// rest of the receive path without asking it again. The message was just rebuilt from the
    /// trace's template, so it is a whole message of the template whenever it is compact (what
    /// `Stack::compiled_up` checks of any other message): the fused handler is asked here, with
    /// the conditions `bypass_up` would ask it under, and nothing else first.
    #[inline]
    pub(in crate::stack) fn recv_compressed(&mut self, now: Instant, origin: Rank, mux: Mux, msg: Msg) {
        if self.bypass == Bypass::Off {
            return self.recv(now, origin, mux, msg, true);
        }
        let cast = mux == Mux::Cast;
        let trace = Trace::up(cast);
        // The plan first: it compiles the traces, and picks their fused handlers, if stale. As
        // the general path: only with a compiled trace for a reply branch, as `bypass_up` asks.
        let within = self.plan(trace).is_some_and(|plan| msg.payload.len() <= plan.len_max);
        let fused = match self.fused[trace as usize] {
            Some(Fused { handler: fused::Handler::Up(up), at })
                if within && msg.hdrs.is_compact() && self.plans[Trace::SendDn as usize].is_some() =>
            {
                (up, at)
            }
            _ => return self.recv(now, origin, mux, msg, true),
        };
        let qos = if cast { Qos::Unreliable } else { Qos::Reliable };
        match (fused.0)(self, &fused.1, now, origin, cast, msg, qos) {
            Ok(took) => {
                self.bypass_stats.compiled += 1;
                self.bypass_stats.took(took, self.view.stack.layers());
            }
            Err(msg) => self.recv(now, origin, mux, msg, false),
        }
    }

    /// The compiled trace of a message going up, if the message is within its reach (a whole
    /// message in the compact form of the trace's template, no larger than every inert layer
    /// passes), with the layers a reply branch asks (a send going down's compiled trace, if
    /// there is one).
    #[inline]
    fn compiled_up(&mut self, trace: Trace, msg: &Msg) -> Option<(Plan, Option<u32>)> {
        // The template first (compared by reference: no copy of its handle), then the plan: a
        // message no compiled trace can take (a layer's own: a heartbeat, a row, a NAK) does not
        // compile the plans, which the layered path it then takes makes stale again. At 64
        // members a member receives 4.6 such messages per cast, and compiling for each cost
        // about 6,200 instructions per cast (`bench worker bypass vsync 64 4 N`).
        let template = self.templates[usize::from(!trace.is_cast())].as_ref();
        if template.is_none_or(|t| msg.hdrs.compact_seqno(&t.hdrs).is_none()) {
            return None;
        }
        let plan = self.plan(trace).filter(|plan| msg.payload.len() <= plan.len_max)?;
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
                self.layers[i].fast_up(&Up { origin, cast, qos, header: &header, len: msg.payload.len() })
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
        #[cfg(any(test, feature = "fault-injection"))]
        if SKIP_RELEASE.with(std::cell::Cell::get) {
            release = None;
        }
        if let Some((at, qos, keep)) = release {
            let trace = Trace::up(cast);
            #[cfg(any(test, feature = "fault-injection"))]
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
            if !self.ask_dn(i, &mut down, &mut ack, &mut steps) {
                return Err(i);
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
                let up = Up { origin, cast, qos: asked.qos, header: &header, len: msg.payload.len() };
                let part = std::mem::take(&mut msg);
                let mut whole = None;
                self.apply(i, now, |layer, out| whole = Some(layer.fast_join(&up, part, out)));
                return Some((i, whole.expect("the joining layer gives the message back")));
            }
            let popped = pop_unpredicted(&mut msg.hdrs, at);
            let header = popped.as_ref().unwrap_or_else(|| msg.hdrs.predicted(at).expect("compact"));
            let up = Up { origin, cast, qos: asked.qos, header, len: msg.payload.len() };
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
    pub(super) fn loop_back(&mut self, now: Instant, msg: &mut Msg, depth: usize, back: &[UpAsked]) {
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
            let up = Up { origin, cast: true, qos: asked.qos, header, len: msg.payload.len() };
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
}
