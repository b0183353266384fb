//! The runtime's clock: the only place Motet reads the time. The core takes `now` as an argument
//! and counts nanoseconds from an arbitrary epoch; here the epoch is the runtime's start.

#![allow(clippy::disallowed_types)] // the runtime is the one place that reads the real clock

use motet_core::Instant;

/// Real time as the core counts it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    /// `CLOCK_MONOTONIC` at the runtime's start, in nanoseconds.
    epoch: u64,
}

impl Clock {
    pub(crate) fn new() -> Clock {
        Clock { epoch: monotonic() }
    }

    /// Nanoseconds since the runtime started. Read a few times per datagram, so straight from
    /// `CLOCK_MONOTONIC` (what `std::time::Instant` reads too, without its checked `Duration`
    /// arithmetic: half the instructions).
    pub(crate) fn now(&self) -> Instant {
        Instant(monotonic().saturating_sub(self.epoch))
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

/// `CLOCK_MONOTONIC` in nanoseconds. `clock_gettime` fails only for a clock the kernel lacks or
/// a bad pointer, neither possible here (`std::time::Instant::now` makes the same assumption).
fn monotonic() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is always there");
    let (secs, nanos) = (u64::try_from(t.tv_sec()).unwrap_or(0), u64::try_from(t.tv_nsec()).unwrap_or(0));
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}
