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

    /// The deadline at `now` (a time already read): whatever is due by then.
    pub(crate) fn at(now: Instant) -> Deadline {
        Deadline(now)
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

/// Tenths of a second from 2025-01-01 (UTC) that an endpoint id's high bits count: 2^36 of them
/// are 217 years.
const ID_EPOCH_SECS: u64 = 1_735_689_600;
const ID_TIME_BITS: u32 = 36;

/// A new endpoint's id: its high 36 bits count *down* with the wall-clock time it was made
/// (tenths of a second since 2025), its low 28 bits are random. Views compare by (primary,
/// logical time, coordinator id), so between partitions at the same logical time the one whose
/// coordinator was made first grants the merge, and its rank 0 provides the state. A replica
/// that has been alone with data (still at logical time 0, like any newcomer) is then not
/// overwritten by a newcomer's empty state: with random ids, it was half the time (a review's
/// finding in `motet kv`). Endpoints made in the same tenth of a second are ordered at random,
/// as before; two get the same id with odds of 2^-28 (a clock set before 2025 counts as 2025).
pub(crate) fn new_endpoint_id(random: u32) -> motet_core::EndpointId {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let tenths = since.as_millis().saturating_sub(u128::from(ID_EPOCH_SECS) * 1_000) / 100;
    let tenths = u64::try_from(tenths).unwrap_or(u64::MAX);
    let countdown = ((1u64 << ID_TIME_BITS) - 1).saturating_sub(tenths);
    let random_bits = 64 - ID_TIME_BITS;
    motet_core::EndpointId(countdown << random_bits | u64::from(random) & ((1 << random_bits) - 1))
}

#[cfg(test)]
mod tests {
    /// An endpoint made later has a smaller id, whatever its random bits; two made at once differ
    /// by their random bits.
    #[test]
    fn endpoints_made_later_have_smaller_ids() {
        let first = super::new_endpoint_id(0);
        std::thread::sleep(std::time::Duration::from_millis(120));
        let later = super::new_endpoint_id(u32::MAX);
        assert!(later < first, "{later:?} {first:?}");
        assert_ne!(super::new_endpoint_id(1), super::new_endpoint_id(2));
    }
}
