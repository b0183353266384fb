//! Motet-owned time. The core never reads a clock: every entry point takes `now` from its driver
//! (the runtime's monotonic clock or the simulator's virtual clock). STYLE principle 1; thesis
//! §2.3.2 (timers are events).

use core::fmt;
use core::ops::{Add, Sub};

/// A point in time, in nanoseconds since an arbitrary, driver-chosen origin.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(pub u64);

/// A span of time in nanoseconds.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Duration(pub u64);

impl Duration {
    /// No time at all.
    pub const ZERO: Duration = Duration(0);
    /// Longer than any wait: for ever.
    pub const MAX: Duration = Duration(u64::MAX);
    /// `ms` milliseconds.
    pub const fn from_millis(ms: u64) -> Duration {
        Duration(ms * 1_000_000)
    }
    /// `us` microseconds.
    pub const fn from_micros(us: u64) -> Duration {
        Duration(us * 1_000)
    }
    /// Whole milliseconds.
    pub const fn as_millis(self) -> u64 {
        self.0 / 1_000_000
    }
    /// No time at all.
    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }
    /// `self - other`, or zero if `other` is longer.
    pub const fn saturating_sub(self, other: Duration) -> Duration {
        Duration(self.0.saturating_sub(other.0))
    }
}

/// Reads a [`Duration`] given in whole milliseconds (configuration files: `nak_delay_ms = 2`),
/// or in nanoseconds from a binary form (the parameters a view carries on the wire,
/// [`crate::StackConfig::to_wire`]), which must be exact.
pub(crate) fn millis<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    if !deserializer.is_human_readable() {
        return <u64 as serde::Deserialize>::deserialize(deserializer).map(Duration);
    }
    let ms = <u64 as serde::Deserialize>::deserialize(deserializer)?;
    if ms > u64::MAX / 1_000_000 {
        return Err(serde::de::Error::custom(format!("{ms} ms is longer than Motet's clock can count")));
    }
    Ok(Duration::from_millis(ms))
}

/// Writes a [`Duration`] as [`millis`] reads it: whole milliseconds in a human-readable form
/// (rounded down), nanoseconds in a binary one.
pub(crate) fn ser_millis<S: serde::Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    match serializer.is_human_readable() {
        true => serializer.serialize_u64(duration.as_millis()),
        false => serializer.serialize_u64(duration.0),
    }
}

impl Instant {
    /// The origin.
    pub const ZERO: Instant = Instant(0);
    /// Time elapsed since `earlier` (zero if `earlier` is later).
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, rhs: Duration) -> Instant {
        Instant(self.0.saturating_add(rhs.0))
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_since(rhs)
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:06}ms", self.0 / 1_000_000, self.0 % 1_000_000)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl fmt::Debug for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0 as f64 / 1e6)
    }
}
