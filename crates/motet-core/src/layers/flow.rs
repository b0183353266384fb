//! Shared window bookkeeping of the flow-control layers `pt2ptw` and `mflow` (not a layer).
//!
//! A sender may have at most `window` messages that its receiver(s) have not yet reported as
//! consumed. Beyond that, messages wait in a bounded pending queue and the layer reports
//! `FlowBlock` upward; `appl` then refuses new actions until the release, so the queue never
//! exceeds one message's fragments (checked by `StackConfig::validate`). Receivers report
//! cumulative counts every `window / 2` messages, which keeps the protocol live: a blocked sender
//! has `window` messages outstanding, so each receiver eventually crosses a report boundary.

use crate::event::Msg;
use std::collections::VecDeque;

/// The sending side of one flow-controlled channel.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Window {
    /// Messages passed down so far.
    pub(crate) sent: u64,
    pending: VecDeque<Msg>,
}

/// What to do with an offered message.
pub(crate) enum Offer {
    /// Send it now.
    Send(Msg),
    /// Queued; the channel just became blocked (report `FlowBlock { blocked: true }`).
    Blocked,
    /// Queued behind others.
    Queued,
}

impl Window {
    /// Offers a message given the receiver-reported `consumed` count.
    pub(crate) fn offer(&mut self, msg: Msg, consumed: u64, window: u64, pending_max: usize) -> Offer {
        if self.pending.is_empty() && self.sent - consumed < window {
            self.sent += 1;
            return Offer::Send(msg);
        }
        assert!(self.pending.len() < pending_max, "appl must respect FlowBlock: pending queue full");
        self.pending.push_back(msg);
        if self.pending.len() == 1 {
            Offer::Blocked
        } else {
            Offer::Queued
        }
    }

    /// Whether [`Window::offer`] would send a message now (the fast path's condition).
    pub(crate) fn admits(&self, consumed: u64, window: u64) -> bool {
        self.pending.is_empty() && self.sent - consumed < window
    }

    /// Releases queued messages the window now admits, handing each to `emit`. Returns true when
    /// the channel was blocked and is now clear (report `FlowBlock { blocked: false }`).
    pub(crate) fn release(&mut self, consumed: u64, window: u64, mut emit: impl FnMut(Msg)) -> bool {
        let was_blocked = !self.pending.is_empty();
        while !self.pending.is_empty() && self.sent - consumed < window {
            self.sent += 1;
            emit(self.pending.pop_front().expect("non-empty"));
        }
        was_blocked && self.pending.is_empty()
    }

    /// Drops everything queued (the receiver failed). Returns true if the channel was blocked.
    pub(crate) fn clear(&mut self) -> bool {
        let was_blocked = !self.pending.is_empty();
        self.pending.clear();
        was_blocked
    }

    /// Messages waiting.
    pub(crate) fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Asserts the window's invariant.
    pub(crate) fn check(&self, consumed: u64, window: u64, pending_max: usize) {
        assert!(consumed <= self.sent, "consumed {consumed} > sent {}", self.sent);
        assert!(self.pending.len() <= pending_max);
        if !self.pending.is_empty() {
            assert!(self.sent - consumed >= window, "pending messages while the window is open");
        }
    }
}

/// The receiving side: counts consumed messages and says when to report.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct Consumer {
    pub(crate) consumed: u64,
    reported: u64,
}

impl Consumer {
    /// Counts one message; returns the cumulative count to report, if a report is due.
    pub(crate) fn consume(&mut self, window: u64) -> Option<u64> {
        self.consumed += 1;
        if self.consumed - self.reported >= (window / 2).max(1) {
            self.reported = self.consumed;
            return Some(self.consumed);
        }
        None
    }

    /// Counts one message without reporting it (the application lags: `Dn::Lagging`).
    pub(crate) fn withhold(&mut self) {
        self.consumed += 1;
    }

    /// The cumulative count to report now if any message is unreported (the application caught
    /// up, or a flush began), marked reported.
    pub(crate) fn owed(&mut self) -> Option<u64> {
        (self.consumed > self.reported).then(|| {
            self.reported = self.consumed;
            self.consumed
        })
    }

    /// What [`Consumer::consume`] would return, without counting (the fast path's condition).
    pub(crate) fn peek(&self, window: u64) -> Option<u64> {
        let consumed = self.consumed + 1;
        (consumed - self.reported >= (window / 2).max(1)).then_some(consumed)
    }
}
