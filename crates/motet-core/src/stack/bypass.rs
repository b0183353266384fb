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

use super::{Delayed, Plan, Stack, DELAYED_MAX};
use crate::event::{Msg, Qos};
use crate::fast::{Down, Kept, Trace};
use crate::layer::Outbox;
use crate::time::Instant;
use crate::Rank;
use motet_wire::{Header, HeaderStack, Template};
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

#[cfg(any(test, feature = "fault-injection"))]
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
    /// Compilations of the traces (a test sees when they happen).
    static COMPILES: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    /// Casts and sends from the network that the bypass left to the layered path.
    static TO_LAYERED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Sets the seeded bug of `SKIP_ACTION` on this thread (`crate::faults`).
#[cfg(feature = "fault-injection")]
pub(crate) fn set_skip_action(layer: Option<crate::LayerKind>) {
    SKIP_ACTION.with(|skip| skip.set(layer));
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

/// The headers of a whole message in the compact form of its trace's template, by reference:
/// the template's constant headers, and the sequence number's header, built once per message.
/// The conditions and actions of a fused or express trace going up read their layer's header
/// here, in place of a `HeaderStack::get` per condition (a header built, compared and dropped for
/// the sequence number's layer) and a pop per action: 120 instructions per cast on `vsync`'s
/// fused trace, 180 on `causal`'s express one (`bench worker bypass STACK 2 4 N`).
pub(super) struct Hdrs<'a> {
    template: &'a Template,
    seqno: Header,
    /// The index of `appl`, whose header is the template's first.
    pub(super) top: usize,
}

impl<'a> Hdrs<'a> {
    /// The headers of `hdrs`, if it is a whole message in the compact form of `template`, whose
    /// first header is the layer `top`'s.
    #[inline(always)]
    pub(super) fn of(template: &'a Arc<Template>, hdrs: &HeaderStack, top: usize) -> Option<Hdrs<'a>> {
        let seqno = hdrs.compact_seqno(template)?;
        Some(Hdrs { template, seqno: template.header(template.slot())?.with_seqno(seqno)?, top })
    }

    /// The header of the layer at index `layer` of the stack.
    #[inline(always)]
    pub(super) fn at(&self, layer: usize) -> &Header {
        let pos = layer - self.top;
        match pos == self.template.slot() {
            true => &self.seqno,
            false => self.template.header(pos).expect("one header per layer of the template"),
        }
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

    /// The compiled form of `trace` (see [`Stack::compiled`]), without its template. Inline,
    /// with compiling out of line: every message of the bypass asks, and compiling is seldom.
    #[inline]
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
    #[cold]
    #[inline(never)]
    pub(super) fn compile(&mut self) {
        #[cfg(any(test, feature = "fault-injection"))]
        COMPILES.with(|n| n.set(n.get() + 1));
        let before = self.plans;
        for trace in Trace::ALL {
            let Some(template) = &self.templates[usize::from(!trace.is_cast())] else {
                self.plans[trace as usize] = None;
                continue;
            };
            let mut plan = Plan { active: 0, len_max: usize::MAX, loopback: None };
            let mut loops = false;
            for (i, layer) in self.layers.iter().enumerate().skip(self.appl) {
                #[cfg(any(test, feature = "fault-injection"))]
                if FORCE_INERT.with(std::cell::Cell::get) == Some(self.view.stack.layers()[i]) && i != template.layer {
                    continue;
                }
                let loopback = layer.fast_loopback(trace);
                match layer.fast_inert(trace) {
                    Some(len_max) if i != template.layer => {
                        plan.len_max = plan.len_max.min(len_max);
                        if !loops && loopback {
                            plan.loopback = u8::try_from(i).ok();
                        }
                    }
                    _ => plan.active |= 1 << i,
                }
                // Only the first layer that loops back is where the branch leaves (an asked one
                // declares it in its step).
                loops |= loopback;
            }
            self.plans[trace as usize] = Some(plan);
        }
        // Most recompiles follow a layered input that changed nothing the plans read (stability
        // gossip passing up through the data layers): the fused handlers, which depend on the
        // plans alone (and the stack's layers), stay as they were.
        if self.plans != before {
            self.fuse();
        }
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

    /// Asks the layer at `index` its condition going down, on the interpreted paths (a split's
    /// part, a reply branch): a plain step (no loop-back, at most one part) is recorded in
    /// `steps` with the headers `msg` had when it reached the layer, passes its guarantee on in
    /// `down` and pushes its header. False for anything else, with nothing changed.
    fn ask_dn(&self, index: usize, down: &mut Down, msg: &mut Msg, steps: &mut Steps<DnAsked>) -> bool {
        match self.layers[index].fast_dn(down) {
            Some(step) if !step.loopback && step.parts <= 1 => {
                let depth = msg.hdrs.len() as u8;
                steps.push(DnAsked { layer: index as u8, qos: down.qos, depth, keep: step.keep });
                down.qos = step.qos;
                msg.push(step.header);
                true
            }
            _ => false,
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
        #[cfg(any(test, feature = "fault-injection"))]
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

mod down;
mod express;
mod fused;
mod up;

pub(crate) use fused::Fused;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod compiled_tests;

#[cfg(test)]
mod delayed_tests;
