//! The bypass: the common event traces of any stack run as one fused pass over the layers'
//! fast-path declarations ([`crate::fast`]), with no event queue (thesis §3.3; SOSP'99 §4, where
//! the bypass is synthesized from the layers; HvR §4).
//!
//! Traces: a cast or send going down from `appl` to the network (a cast also loops back up through
//! `local`, a branching trace), and a cast or send coming up from the network to `appl` (which may
//! also send an acknowledgement or credit report down from the layer that owes it, another branch).
//! The trace runs in two phases. **Conditions**: every layer on the trace is asked, in the order
//! the layered path would reach it, whether the event is its common case and what it would do;
//! nothing changes, and the first `None` sends the event down the layered path. **Actions**: each
//! layer applies its common case to its own state, the messages are assembled with the headers the
//! conditions named, and the outputs are queued exactly as the layered path queues them.
//!
//! Nothing here knows any layer: a stack whose trace crosses a layer without a declaration simply
//! has no bypass for that trace. Drain-first scheduling makes the substitution safe: inputs arrive
//! only when the event queue is empty (thesis §3.3.1), and a layer's own queues (flow-control
//! backlogs, out-of-order buffers) are part of its condition.

use super::{Stack, Transmit};
use crate::event::{Msg, Qos};
use crate::fast::{DnStep, Down, Up, UpStep};
use crate::layer::Outbox;
use crate::time::Instant;
use crate::{Payload, Rank};
use motet_wire::{Header, Mux};
use smallvec::SmallVec;

/// Layers on one trace (the deepest preset has fewer).
type Steps<T> = SmallVec<[T; 16]>;

#[cfg(test)]
thread_local! {
    /// Testing the checker: the bypass skips this layer's action (a seeded bug).
    static SKIP_ACTION: std::cell::Cell<Option<crate::LayerKind>> = const { std::cell::Cell::new(None) };
}

impl Stack {
    /// Runs an application cast (`dest` `None`) or send down the bypass. Gives the payload back
    /// when some layer's condition does not hold (the caller takes the layered path).
    pub(super) fn bypass_dn(
        &mut self,
        now: Instant,
        dest: Option<Rank>,
        payload: Payload,
    ) -> Result<(), (Payload, usize)> {
        let top = self.appl;
        let mut down = Down { dest, qos: Qos::Reliable, len: payload.len() };
        // Conditions, top down: (what reached the layer, what it does).
        let mut steps: Steps<(Down, DnStep)> = SmallVec::new();
        let mut loopback = None;
        for (i, layer) in self.layers.iter().enumerate().skip(top) {
            let Some(step) = layer.fast_dn(&down) else { return Err((payload, i)) };
            if step.loopback {
                if loopback.is_some() {
                    return Err((payload, i));
                }
                loopback = Some(i);
            }
            let next = Down { qos: step.qos, ..down };
            steps.push((down, step));
            down = next;
        }
        // The loop-back branch: the message as it reached `local` goes up through the layers
        // between `appl` and `local` as this endpoint's own cast.
        let mut back: Steps<(Qos, UpStep)> = SmallVec::new();
        if let Some(at) = loopback {
            let mut qos = steps[at - top].0.qos;
            for i in (top..at).rev() {
                let header = &steps[i - top].1.header;
                let up = Up { origin: self.rank, cast: true, qos, header };
                match self.layers[i].fast_up(&up) {
                    Some(step) if step.reply.is_none() => {
                        qos = step.qos;
                        let absorb = step.absorb;
                        back.push((up.qos, step));
                        if absorb {
                            break;
                        }
                    }
                    _ => return Err((payload, i)),
                }
            }
        }
        // Actions, top down, assembling the message as the layers would, in the compact form of
        // the trace's template (no allocation; a header it does not predict reformats it).
        let hdrs = match &self.templates[usize::from(dest.is_some())] {
            Some(template) => motet_wire::HeaderStack::compact(&template.hdrs),
            None => motet_wire::HeaderStack::with_capacity(steps.len()),
        };
        let mut msg = Msg { hdrs, payload };
        for (k, (down, step)) in steps.into_iter().enumerate() {
            let i = top + k;
            self.apply(i, now, |layer, out| layer.fast_dn_apply(&down, &msg, out));
            if loopback == Some(i) {
                self.apply_up_branch(now, &msg, i, &back);
            }
            msg.push(step.header);
        }
        let mux = match dest {
            None => Mux::Cast,
            Some(dest) => Mux::Send { dest },
        };
        self.transmits.push_back(Transmit { mux, msg, to: None });
        Ok(())
    }

    /// Runs an application cast or send from the network up the bypass. Gives the message back
    /// with the layer whose condition did not hold, or with `None` when it is not the
    /// application's (the layers' own traffic: acknowledgements, gossip, heartbeats).
    pub(super) fn bypass_up(
        &mut self,
        now: Instant,
        origin: Rank,
        cast: bool,
        mut msg: Msg,
    ) -> Result<(), (Msg, Option<usize>)> {
        let top = self.appl;
        let n = self.layers.len();
        let application = msg.hdrs.len() == n - top
            && matches!(msg.hdrs.get(0).as_deref(), Some(Header::Appl(h)) if *h != motet_wire::hdr::appl::Header::NoHdr);
        if !application {
            return Err((msg, None));
        }
        // Conditions, bottom up: (the guarantee that reached the layer, what it does).
        let mut steps: Steps<(Qos, UpStep)> = SmallVec::new();
        let mut qos = if cast { Qos::Unreliable } else { Qos::Reliable };
        let mut reply: Option<(usize, Rank, Header)> = None;
        for i in (top..n).rev() {
            let header = msg.hdrs.get(i - top).expect("one header per layer, checked");
            let up = Up { origin, cast, qos, header: &header };
            let Some(step) = self.layers[i].fast_up(&up) else { return Err((msg, Some(i))) };
            if let Some((dest, header)) = &step.reply {
                if reply.is_some() {
                    return Err((msg, Some(i))); // two replies in one trace: rare, left to the layered path
                }
                reply = Some((i, *dest, header.clone()));
            }
            qos = step.qos;
            let absorb = step.absorb;
            steps.push((up.qos, step));
            if absorb {
                break;
            }
        }
        // The reply branch: a header-only send from the replying layer down.
        let mut reply_steps: Steps<(Down, DnStep)> = SmallVec::new();
        if let Some((at, dest, _)) = &reply {
            let mut down = Down { dest: Some(*dest), qos: Qos::Reliable, len: 0 };
            for (i, layer) in self.layers.iter().enumerate().skip(at + 1) {
                match layer.fast_dn(&down) {
                    Some(step) if !step.loopback => {
                        let next = Down { qos: step.qos, ..down };
                        reply_steps.push((down, step));
                        down = next;
                    }
                    _ => return Err((msg, Some(i))),
                }
            }
        }
        // Actions, bottom up.
        for (k, (qos, _)) in steps.iter().enumerate() {
            let i = n - 1 - k;
            let header = msg.hdrs.pop().expect("one header per layer, checked");
            let up = Up { origin, cast, qos: *qos, header: &header };
            self.apply(i, now, |layer, out| layer.fast_up_apply(&up, &msg, out));
            if let Some((at, dest, header)) = reply.as_ref().filter(|(at, ..)| *at == i) {
                let mut ack = Msg { hdrs: motet_wire::HeaderStack::with_capacity(n - at), payload: Payload::new() };
                ack.push(header.clone());
                for (j, (down, step)) in reply_steps.iter().enumerate() {
                    self.apply(at + 1 + j, now, |layer, out| layer.fast_dn_apply(down, &ack, out));
                    ack.push(step.header.clone());
                }
                self.transmits.push_back(Transmit { mux: Mux::Send { dest: *dest }, msg: ack, to: None });
            }
        }
        Ok(())
    }

    /// The loop-back branch's actions: `msg` (as it reached `local`, at index `at`) up to `appl`
    /// or the layer that absorbs it.
    fn apply_up_branch(&mut self, now: Instant, msg: &Msg, at: usize, back: &[(Qos, UpStep)]) {
        let mut up_msg = msg.clone();
        let origin = self.rank;
        for (k, (qos, _)) in back.iter().enumerate() {
            let i = at - 1 - k;
            let header = up_msg.hdrs.pop().expect("one header per layer, checked");
            let up = Up { origin, cast: true, qos: *qos, header: &header };
            self.apply(i, now, |layer, out| layer.fast_up_apply(&up, &up_msg, out));
        }
    }

    /// Runs one layer's fast-path action with an outbox like its handlers get (alarms, counters
    /// and deliveries; no events).
    fn apply(&mut self, index: usize, now: Instant, f: impl FnOnce(&mut crate::layers::AnyLayer, &mut Outbox<'_>)) {
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
