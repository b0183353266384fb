//! Express traces: the compiled traces of the bypass when every layer asked takes its plain common
//! case (thesis §3.3.2, the trace handler of the *common* trace; SOSP'99 §4: the handler the
//! optimizer emits covers one trace, and everything else leaves it at once).
//!
//! The general trace handlers ([`Stack::trace_dn`], [`Stack::trace_up`]) serve every shape a
//! trace may take: a split, a join, a reply, a release, a layer that absorbs the message. Most
//! messages of a busy group take none of these, and for them the generality costs more than the
//! layers' own work: step records in a growable list, a branch per step kind, an outbox built per
//! layer. An express trace asks the same conditions in the same order, and as soon as one of them
//! declares anything but a plain step it gives the message back untouched; the caller then runs the
//! general handler, which asks the conditions again (they are pure functions of the layers' state,
//! so asking twice changes nothing). Otherwise it runs the same actions, in the same order, with
//! the same delayed copies, as the general handler would: `Bypass::Diff` checks the two against the
//! layered path on every input like any other bypass.

use super::{bottom_up, Hdrs, Took};
use crate::event::{Msg, Qos};
use crate::fast::{Kept, Trace, Up};
use crate::stack::{merge_alarm, Delayed, Stack};
use crate::time::Instant;
use crate::Rank;

/// Layers an express trace asks at most (the deepest preset asks four); a longer trace takes the
/// general handler.
const EXPRESS_MAX: usize = 6;

/// A layer asked on an express trace: its index, the guarantee that reached it, whether it keeps a
/// copy.
#[derive(Clone, Copy)]
struct Asked {
    layer: u8,
    qos: Qos,
    keep: bool,
}

const NOBODY: Asked = Asked { layer: 0, qos: Qos::Reliable, keep: false };

impl Stack {
    /// A compiled trace going up with an application message in the compact form of its template
    /// (whose first header is `appl`'s): the layers of `active`, bottom up, each in its plain
    /// common case. The
    /// message comes back untouched if any condition refuses it or declares more than a plain
    /// step (see the module documentation).
    pub(super) fn express_up(
        &mut self,
        now: Instant,
        origin: Rank,
        cast: bool,
        mut msg: Msg,
        qos: Qos,
        active: u32,
    ) -> Result<Took, Msg> {
        let top = self.appl;
        let mut asked = [NOBODY; EXPRESS_MAX];
        let mut n = 0;
        let mut q = qos;
        let len = msg.payload.len();
        // The caller hands over a whole message in the compact form of the trace's template:
        // each layer's header by reference, as the fused traces read them.
        let Some(hdrs) = self.templates[usize::from(!cast)].as_ref().and_then(|t| Hdrs::of(&t.hdrs, &msg.hdrs, top))
        else {
            return Err(msg);
        };
        for i in bottom_up(active) {
            if n == EXPRESS_MAX {
                return Err(msg);
            }
            let step = self.layers[i].fast_up(&Up { origin, cast, qos: q, header: hdrs.at(i), len });
            // The step by reference (see `fused`: moving it out copies its room for a header).
            match &step {
                Some(step) if step.reply.is_none() && !step.absorb && !step.join && !step.release => {
                    asked[n] = Asked { layer: i as u8, qos: q, keep: step.keep };
                    n += 1;
                    q = step.qos;
                }
                _ => return Err(msg),
            }
        }
        // The actions, bottom up, as `act_up` runs them: each layer gets the message with its own
        // header popped; one outbox serves them all, its alarm filed per layer.
        let kept = Kept { trace: Trace::up(cast), peer: origin };
        let mut keep_whole = None;
        let mut alarm = None;
        {
            let mut out = outbox!(self, now, &mut alarm);
            for a in &asked[..n] {
                let (i, at) = (usize::from(a.layer), usize::from(a.layer) - top);
                // The layer's header popped, and those of the inert layers below it (in the
                // compact form, a new length).
                msg.hdrs.truncate(at);
                let header = hdrs.at(i);
                #[cfg(any(test, feature = "fault-injection"))]
                let skip = super::SKIP_ACTION.with(std::cell::Cell::get) == Some(self.view.stack.layers()[i]);
                #[cfg(not(any(test, feature = "fault-injection")))]
                let skip = false;
                if !skip {
                    let up = Up { origin, cast, qos: a.qos, header, len };
                    self.layers[i].fast_up_apply(&up, &msg, &mut out);
                    if let Some(at) = out.alarm.take() {
                        merge_alarm(&mut self.alarms, &mut self.next_alarm, i, at);
                    }
                }
                if a.keep {
                    if keep_whole.is_none() {
                        keep_whole = Some((a.layer, at));
                    } else {
                        self.delayed.push_back(Delayed { layer: a.layer, kept, now, msg: msg.clone() });
                    }
                }
            }
            debug_assert!(out.events.is_empty(), "a fast-path action emitted events");
        }
        // The whole message, kept by the first layer that keeps one, is filed last, as `act_up`
        // files it.
        if let Some((layer, len)) = keep_whole {
            let regrown = msg.hdrs.regrow(len);
            debug_assert!(regrown, "a compact stack grows back");
            self.delayed.push_back(Delayed { layer, kept, now, msg });
        }
        Ok(Took::Hit)
    }
}
