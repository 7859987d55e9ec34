//! Host-supplied monotonic time.
//!
//! The core never reads a clock. Every input carries an [`Instant`] the host read from
//! its own monotonic clock (`time.monotonic_ns()`, `performance.now()`,
//! `std::time::Instant`), expressed as nanoseconds since an origin the host chooses
//! once and keeps. Only differences between instants mean anything.

use core::fmt;
use core::ops::{Add, Sub};
use core::time::Duration;

use serde::{Deserialize, Serialize};

/// A point on the host's monotonic clock, in nanoseconds since the host's origin.
///
/// Arithmetic saturates: adding a huge duration gives [`Instant::MAX`], never a wrap.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Instant(u64);

impl Instant {
    /// The host's origin.
    pub const ZERO: Instant = Instant(0);
    /// The far future (about 584 years after the origin).
    pub const MAX: Instant = Instant(u64::MAX);
    /// The latest `now` a machine accepts: 2^62 ns, about 146 years after the origin.
    /// No monotonic clock gets there; the room above it keeps every deadline the machine
    /// computes from `now` (at most the longest TTL, 2^31 ms) finite, below [`Instant::MAX`].
    pub const LATEST: Instant = Instant(1 << 62);

    /// An instant `nanos` nanoseconds after the origin.
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant(nanos)
    }

    /// An instant `millis` milliseconds after the origin.
    pub const fn from_millis(millis: u64) -> Self {
        Instant(millis.saturating_mul(1_000_000))
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time from `earlier` to `self`, or zero when `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, rhs: Duration) -> Instant {
        Instant(self.0.saturating_add(duration_nanos(rhs)))
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, rhs: Duration) -> Instant {
        Instant(self.0.saturating_sub(duration_nanos(rhs)))
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0 / 1_000_000;
        let frac = (self.0 % 1_000_000) / 1_000;
        write!(f, "{ms}.{frac:03} ms")
    }
}

/// Serde helper: a `Duration` as whole nanoseconds (`u64`), the unit of scenario vectors.
pub(crate) mod serde_nanos {
    use core::time::Duration;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(super::duration_nanos(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_nanos)
    }

    /// The same for `Option<Duration>`.
    pub mod option {
        use core::time::Duration;
        use serde::{Deserialize, Deserializer, Serializer};

        pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
            match d {
                Some(d) => s.serialize_some(&super::super::duration_nanos(*d)),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
            Ok(Option::<u64>::deserialize(d)?.map(Duration::from_nanos))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_wrapping() {
        assert_eq!(Instant::MAX + Duration::from_secs(1), Instant::MAX);
        assert_eq!(Instant::ZERO - Duration::from_secs(1), Instant::ZERO);
        assert_eq!(
            Instant::from_millis(5) + Duration::from_millis(3),
            Instant::from_millis(8)
        );
        assert_eq!(
            Instant::from_millis(5).saturating_duration_since(Instant::from_millis(8)),
            Duration::ZERO
        );
    }
}
