//! The runtime's clock: the only place Motet reads the time. The core takes `now` as an argument
//! and counts nanoseconds from an arbitrary epoch; here the epoch is the runtime's start.

#![allow(clippy::disallowed_types)] // the runtime is the one place that reads the real clock

use motet_core::Instant;

/// Real time as the core counts it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    epoch: std::time::Instant,
}

impl Clock {
    pub(crate) fn new() -> Clock {
        Clock { epoch: std::time::Instant::now() }
    }

    /// Nanoseconds since the runtime started.
    pub(crate) fn now(&self) -> Instant {
        Instant(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// How long from now until `at` (zero if it has passed).
    pub(crate) fn until(&self, at: Instant) -> std::time::Duration {
        between(self.now(), at)
    }
}

/// How long from `now` until `at` (zero if it has passed): for a loop turn that read the clock
/// once.
pub(crate) fn between(now: Instant, at: Instant) -> std::time::Duration {
    std::time::Duration::from_nanos(at.0.saturating_sub(now.0))
}

/// A point in the runtime's time (for the runtime's own periodic work, such as DNS).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Deadline(Instant);

impl Deadline {
    pub(crate) fn after(clock: &Clock, after: std::time::Duration) -> Deadline {
        let ns = u64::try_from(after.as_nanos()).unwrap_or(u64::MAX);
        Deadline(Instant(clock.now().0.saturating_add(ns)))
    }

    pub(crate) fn until(self, clock: &Clock) -> std::time::Duration {
        clock.until(self.0)
    }

    /// [`Deadline::until`] from a time already read.
    pub(crate) fn from(self, now: Instant) -> std::time::Duration {
        between(now, self.0)
    }
}
