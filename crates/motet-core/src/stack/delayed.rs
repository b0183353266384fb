//! Delayed processing (thesis §3.4.3, §5.4.5; HvR §4.3: emit first, then update): the copies of
//! messages the bypass transmitted or delivered that layers keep for retransmission, filed in
//! batches when the driver is idle, by a deadline no later than any alarm filing sets, or before
//! any input that needs them (docs/bypass.md, "Delayed processing").

#[cfg(any(test, feature = "fault-injection"))]
use super::SETTLE_LATE;
use super::{merge_alarm, Stack};
use crate::event::Msg;
use crate::time::Instant;
use std::collections::VecDeque;

/// A copy of a message a layer keeps, handed over after the transmit or delivery (thesis §3.4.3,
/// §5.4.5: emit first, then update).
#[derive(Debug)]
pub(crate) struct Delayed {
    pub(crate) layer: u8,
    pub(crate) kept: crate::fast::Kept,
    /// The time of the input that carried the message.
    pub(crate) now: Instant,
    pub(crate) msg: Msg,
}

/// The copies waiting for delayed processing, in order, and when they must be filed by.
#[derive(Debug)]
pub(crate) struct DelayedQueue {
    copies: VecDeque<Delayed>,
    /// Each layer's [`Layer::fast_keep_wait`](crate::layer::Layer::fast_keep_wait), by index.
    pub(super) waits: Box<[crate::Duration]>,
    /// The earliest of the copies' inputs' times plus their layers' waits: when they must be
    /// filed even if their batch has not filled (`None`: they may wait for the next input).
    by: Option<Instant>,
    /// Copies that make a batch: [`SETTLE_BATCH`], or 1 in half the views under `Bypass::Diff`
    /// (see `Stack::with_bypass`), which compares the layers with its twin's only when the stack
    /// has settled, so that those views settle whenever idle.
    batch: usize,
    /// A copy of a layer that declares no wait is queued: the copies are due at the driver's next
    /// idle moment, as if the batch were full (not at a deadline of its input's time, which a
    /// driver's end of turn would meet before it sends).
    urgent: bool,
}

impl DelayedQueue {
    /// An empty queue for layers that declare `waits` ([`Layer::fast_keep_wait`](crate::layer::Layer::fast_keep_wait), by
    /// index), settled in batches of [`SETTLE_BATCH`] or (not `batched`) whenever idle.
    pub(super) fn new(waits: Box<[crate::Duration]>, batched: bool) -> DelayedQueue {
        let batch = if batched { SETTLE_BATCH } else { 1 };
        DelayedQueue { copies: VecDeque::new(), waits, by: None, batch, urgent: false }
    }

    #[inline]
    pub(super) fn push_back(&mut self, copy: Delayed) {
        let wait = self.waits[usize::from(copy.layer)];
        if wait.is_zero() {
            self.urgent = true;
        } else if wait != crate::Duration::MAX {
            let at = copy.now + wait;
            self.by = Some(self.by.map_or(at, |by| by.min(at)));
        }
        self.copies.push_back(copy);
    }

    /// Every copy, in order, and the layers' waits: the queue is empty, with no deadline, once
    /// the copies are taken (cleared first, so that a filing that panics leaves no deadline
    /// behind for a queue the drain emptied).
    pub(super) fn take_all(&mut self) -> (std::collections::vec_deque::Drain<'_, Delayed>, &[crate::Duration]) {
        (self.by, self.urgent) = (None, false);
        (self.copies.drain(..), &self.waits)
    }

    pub(super) fn front(&self) -> Option<&Delayed> {
        self.copies.front()
    }

    pub(super) fn len(&self) -> usize {
        self.copies.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.copies.is_empty()
    }
}

/// Copies a stack holds for delayed processing before it settles on its own: a bound on its
/// memory when a driver never idles (the runtime settles full batches once per loop turn).
pub(super) const DELAYED_MAX: usize = 32;

/// Copies a stack holds before it asks its driver to settle them ([`Stack::settle_due`]):
/// delayed processing goes in batches, so that what settling costs in itself (the driver's visit,
/// the stack's queue and alarms) is paid once per batch, not once per message. A batch that does
/// not fill is filed by the stack's deadline ([`Stack::settle_deadline`]). Below [`DELAYED_MAX`],
/// so a busy driver's idle moments file the copies before the stack must file them in the path
/// of a message; small, since a stack's queue keeps the room it has grown to.
pub(super) const SETTLE_BATCH: usize = 8;

impl Stack {
    /// When the stack next needs [`Stack::handle_timeout`]: its earliest alarm, or the time its
    /// delayed processing is due (`handle_timeout` settles first, like [`Stack::settle`]): now
    /// for a full batch ([`Stack::settle_due`]), else its deadline ([`Stack::settle_deadline`]).
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.delayed.front().filter(|_| self.settle_due()) {
            Some(first) => Some(self.poll_alarm().map_or(first.now, |alarm| alarm.min(first.now))),
            None => self.poll_wake(),
        }
    }

    /// When the copies waiting for delayed processing must be filed even if their batch has not
    /// filled: the earliest of their inputs' times plus their layers' [`Layer::fast_keep_wait`](crate::layer::Layer::fast_keep_wait)
    /// (so no alarm that filing them sets is late). `None` when none waits, or when they may wait
    /// for the stack's next input.
    pub fn settle_deadline(&self) -> Option<Instant> {
        self.delayed.by
    }

    /// The earliest of [`Stack::poll_alarm`] and [`Stack::settle_deadline`]: when the stack needs
    /// [`Stack::handle_timeout`] unless a driver settles it first (a full batch, which
    /// [`Stack::poll_timeout`] counts as due now, is the driver's to settle when idle).
    #[inline]
    pub fn poll_wake(&self) -> Option<Instant> {
        // Asked after every input (the node's index of alarms): written out, since a chain of
        // options cost about 40 instructions a call.
        match (self.next_alarm, self.delayed.by) {
            (Some(alarm), Some(by)) => Some(alarm.min(by)),
            (alarm, by) => alarm.or(by),
        }
    }

    /// Delayed processing (thesis §3.4.3; HvR §4.3): hands the layers the copies of messages
    /// they keep (retransmission buffers), for the messages the bypass has transmitted or
    /// delivered since the stack last settled. A driver calls it when idle, after sending what
    /// the inputs produced, so this bookkeeping is off the path from a receive to the next send.
    /// Every input that is not an application message on a compiled trace settles first, so no
    /// observer (a layered handler, a timer, a NAK) can tell: it finds the buffers filled.
    /// Produces no output but alarms.
    #[inline(never)]
    pub fn settle(&mut self) {
        if self.delayed.is_empty() {
            return;
        }
        // One outbox serves the whole batch; each copy goes with the time of the input that
        // carried it. The queue keeps its capacity (no allocation per message).
        let mut alarm = None;
        let mut out = outbox!(self, Instant::ZERO, &mut alarm);
        // The whole queue in one pass (filing queues nothing new: it has no access to it).
        let (copies, waits) = self.delayed.take_all();
        for Delayed { layer, kept, now, msg } in copies {
            let layer = usize::from(layer);
            out.now = now;
            self.layers[layer].fast_keep(&kept, msg, &mut out);
            if let Some(at) = out.alarm.take() {
                // A copy may have waited this long: an alarm its filing sets must not be due
                // before, or it fired late (`Layer::fast_keep_wait`).
                debug_assert!(
                    at >= now + waits[layer],
                    "{:?}'s fast_keep set an alarm sooner than its fast_keep_wait",
                    self.view.stack.layers()[layer]
                );
                merge_alarm(&mut self.alarms, &mut self.next_alarm, layer, at);
            }
        }
        debug_assert!(out.events.is_empty(), "delayed processing emitted events");
        // `Bypass::Diff`: outside an input (a driver settling), the layers must now equal the
        // layered twin's. Within one, the input's own check follows.
        if let Some(mut twin) = self.twin.take() {
            self.diff(&mut twin, self.mark(), "delayed processing");
            self.twin = Some(twin);
        }
    }

    /// Settles before an input that is not an application message on a compiled trace: only
    /// those may run ahead of delayed processing (their conditions and actions do not read it).
    pub(super) fn settle_for_input(&mut self) {
        #[cfg(any(test, feature = "fault-injection"))]
        if SETTLE_LATE.with(std::cell::Cell::get) {
            return;
        }
        self.settle();
    }

    /// Delayed work is pending ([`Stack::settle`] has something to do).
    pub fn unsettled(&self) -> bool {
        !self.delayed.is_empty()
    }

    /// A batch of delayed work is pending: a driver should settle it when next idle
    /// ([`Node::settle`](crate::Node::settle) settles these stacks).
    pub fn settle_due(&self) -> bool {
        self.delayed.len() >= self.delayed.batch || self.delayed.urgent
    }
}
