//! The names the core's enums carry in serde, as `&'static str` and back, so bindings
//! never type their own tables of them.
//!
//! Each enum here gets `as_str()`, a `NAMES` list in declaration order and
//! [`core::str::FromStr`], spelled exactly as its serde form (`snake_case`).

use core::fmt;

use thiserror::Error;

/// A string that names none of an enum's variants.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("unknown {what} {got:?}; expected one of: {}", expected.join(", "))]
pub struct UnknownName {
    /// What was being named, e.g. `"lost reason"`.
    pub what: &'static str,
    /// The string given.
    pub got: String,
    /// Every accepted name.
    pub expected: &'static [&'static str],
}

/// Implements `as_str`, `NAMES`, `Display` and `FromStr` for a field-less enum (or one
/// whose serde form is its variant name alone).
macro_rules! names {
    ($what:literal, $ty:ty { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            /// Every name, in declaration order (the serde spelling).
            pub const NAMES: &'static [&'static str] = &[$($name),+];

            /// The name, as serde spells it.
            pub fn as_str(&self) -> &'static str {
                match self {
                    $(<$ty>::$variant => $name),+
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl core::str::FromStr for $ty {
            type Err = UnknownName;

            fn from_str(s: &str) -> Result<Self, UnknownName> {
                match s {
                    $($name => Ok(<$ty>::$variant),)+
                    _ => Err(UnknownName {
                        what: $what,
                        got: s.to_owned(),
                        expected: <$ty>::NAMES,
                    }),
                }
            }
        }
    };
}

use crate::backends::{Operation, RedisScript};
#[cfg(feature = "postgres")]
use crate::backends::{PgConnection, PgMode};
use crate::fence::ParamStyle;
use crate::{LostReason, Previous, Purpose};

names!("operation", Operation {
    Acquire => "acquire",
    Renew => "renew",
    Release => "release",
    Wait => "wait",
});

names!("Redis script", RedisScript {
    Acquire => "acquire",
    Renew => "renew",
    Release => "release",
    FencedSet => "fenced_set",
    AcquireFair => "acquire_fair",
    ReleaseFair => "release_fair",
    IsLocked => "is_locked",
    ForceRelease => "force_release",
    Inspect => "inspect",
    List => "list",
    RenewMany => "renew_many",
});

names!("purpose", Purpose {
    Efficiency => "efficiency",
    Correctness => "correctness",
});

#[cfg(feature = "postgres")]
names!("PostgreSQL mode", PgMode {
    Lease => "lease",
    Session => "session",
});

#[cfg(feature = "postgres")]
names!("PostgreSQL connection", PgConnection {
    Any => "any",
    Dedicated => "dedicated",
    Listen => "listen",
});

names!("parameter style", ParamStyle {
    Dollar => "dollar",
    Pyformat => "pyformat",
});

names!("previous holder", Previous {
    Released => "released",
    Expired => "expired",
    None => "none",
    Unknown => "unknown",
});

names!("lost reason", LostReason {
    Expired => "expired",
    RenewRejected => "renew_rejected",
    NotHeldAtRelease => "not_held_at_release",
    Closed => "closed",
});

#[cfg(test)]
mod tests {
    use super::*;
    use core::str::FromStr;

    /// The names here are the serde names: a variant renamed in one place only fails.
    fn agrees_with_serde<T>(all: &[T])
    where
        T: serde::Serialize + FromStr<Err = UnknownName> + PartialEq + fmt::Debug + fmt::Display,
    {
        for v in all {
            let json = serde_json::to_value(v).unwrap();
            let serde_name = json
                .as_str()
                .map(str::to_owned)
                .or_else(|| json["kind"].as_str().map(str::to_owned))
                .unwrap();
            assert_eq!(v.to_string(), serde_name);
            assert_eq!(&T::from_str(&serde_name).unwrap(), v);
        }
    }

    #[test]
    fn names_are_the_serde_names() {
        agrees_with_serde(&[
            Previous::Released,
            Previous::Expired,
            Previous::None,
            Previous::Unknown,
        ]);
        agrees_with_serde(&[
            Operation::Acquire,
            Operation::Renew,
            Operation::Release,
            Operation::Wait,
        ]);
        agrees_with_serde(&RedisScript::ALL);
        agrees_with_serde(&[Purpose::Efficiency, Purpose::Correctness]);
        agrees_with_serde(&[PgMode::Lease, PgMode::Session]);
        agrees_with_serde(&[
            PgConnection::Any,
            PgConnection::Dedicated,
            PgConnection::Listen,
        ]);
        agrees_with_serde(&[ParamStyle::Dollar, ParamStyle::Pyformat]);
        agrees_with_serde(&[
            LostReason::Expired,
            LostReason::RenewRejected,
            LostReason::NotHeldAtRelease,
            LostReason::Closed,
        ]);
    }

    #[test]
    fn kinds_are_the_serde_tags() {
        use crate::backends::{RedisBlpop, RequestBody};
        use crate::{AcquireFailedReason, Event, FencingToken, Instant, UsageError};
        let tag = |v: serde_json::Value, key: &str| v[key].as_str().unwrap().to_owned();
        let events = [
            Event::Acquired {
                token: FencingToken(1),
                valid_until: Instant::ZERO,
                previous: crate::Previous::Unknown,
            },
            Event::Renewed {
                valid_until: Instant::ZERO,
            },
            Event::Lost {
                reason: LostReason::Closed,
            },
            Event::Released,
            Event::AcquireFailed {
                reason: AcquireFailedReason::Timeout { last_error: None },
            },
        ];
        for e in &events {
            assert_eq!(e.kind(), tag(serde_json::to_value(e).unwrap(), "type"));
        }
        let reasons = [
            AcquireFailedReason::Timeout { last_error: None },
            AcquireFailedReason::Protocol {
                error: crate::ProtocolError {
                    backend: "redis".into(),
                    message: "m".into(),
                },
            },
        ];
        for (r, name) in reasons.iter().zip(AcquireFailedReason::NAMES) {
            assert_eq!(r.kind(), tag(serde_json::to_value(r).unwrap(), "kind"));
            assert_eq!(r.kind(), *name);
        }
        let errors = [
            UsageError::TimeWentBackwards {
                now: Instant::ZERO,
                last: Instant::ZERO,
            },
            UsageError::option("ttl", "m"),
            UsageError::UnsafePurpose {
                backend: "redis".into(),
            },
            UsageError::InvalidName { len: 0, nul: false },
            UsageError::UnknownLock {
                lock: crate::LockId(1),
            },
        ];
        for e in &errors {
            assert_eq!(e.kind(), tag(serde_json::to_value(e).unwrap(), "kind"));
        }
        let body = RequestBody::RedisBlpop(RedisBlpop {
            key: "k".into(),
            timeout_ms: 1,
        });
        assert_eq!(
            body.kind(),
            tag(serde_json::to_value(&body).unwrap(), "backend")
        );
    }

    #[test]
    fn an_unknown_name_lists_the_known_ones() {
        let e = LostReason::from_str("gone").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown lost reason \"gone\"; expected one of: expired, renew_rejected, not_held_at_release, closed"
        );
    }
}
