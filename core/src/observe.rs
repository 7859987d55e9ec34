//! What a host may observe of its locks: [`Observation`]s (events with the numbers an
//! operator asks for after an incident, and warnings of the pitfalls the machine can
//! see happening), and the [`ObserveOptions`] that switch them on and set the
//! warnings' thresholds.
//!
//! Observations are a second output beside [`crate::Output`], drained with
//! [`crate::Machine::poll_observation`]. A machine without [`crate::Machine::observe`]
//! builds none: no allocation, no formatting, one branch per decision.

use core::fmt::Write as _;
use core::time::Duration;

use serde::{Deserialize, Serialize};

use crate::backends::Operation;
use crate::error::UsageError;
use crate::event::LostReason;
use crate::time::serde_nanos;
use crate::{FencingToken, LockId};

/// Whether events and warnings are observed, and the warnings' thresholds.
///
/// In serde form (the bindings' options) durations are nanoseconds and every field is
/// optional; the defaults are [`ObserveOptions::default`]'s.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ObserveOptions {
    /// Report the events (`acquiring`, `acquired`, `renewed`, …). Default true.
    pub events: bool,
    /// Report the warnings (`renewal_late`, `held_long`, `hot_lock`,
    /// `server_unreachable`), and with `events` off the events logged at warning level
    /// too (`renewal_failing`, `lost`, `acquire_failed`). Default true.
    pub warnings: bool,
    /// `renewal_late` when a renewal is confirmed with less than this fraction of the
    /// validity left before the deadline it extends; 0 ..= 1, default 1/3 (0: never).
    pub late_renewal_fraction: f64,
    /// `held_long` once a lease has been held this many TTLs; default 10 (0: never).
    pub held_long_ttls: u32,
    /// `hot_lock` when one acquisition found the lock held by others this many times
    /// before it was granted or timed out; default 10 (0: never). A time counts only
    /// when the holder is another than the attempt before found (the reply names the
    /// holder's grant, on Redlock its owner, on ZooKeeper its node), so one long hold is
    /// never hot; where a reply names no holder (a foreign holder on Redlock), every
    /// attempt that finds the lock held counts. A Redlock attempt that no master refused
    /// is an outage, not one.
    pub hot_lock_attempts: u32,
    /// `hot_lock` when this many acquisitions of one name are pending in this machine
    /// at once; default 10 (0: never).
    pub hot_lock_waiters: u32,
    /// `server_unreachable` every this long while an acquisition with no
    /// `acquire_timeout` and no `retry_count` cannot reach the server; default 30 s,
    /// at least 1 ms.
    #[serde(with = "serde_nanos")]
    pub unreachable_every: Duration,
}

impl Default for ObserveOptions {
    fn default() -> Self {
        ObserveOptions {
            events: true,
            warnings: true,
            late_renewal_fraction: 1.0 / 3.0,
            held_long_ttls: 10,
            hot_lock_attempts: 10,
            hot_lock_waiters: 10,
            unreachable_every: Duration::from_secs(30),
        }
    }
}

impl ObserveOptions {
    /// Checks the ranges. Errors: [`UsageError::InvalidOption`] naming the option.
    pub fn validate(&self) -> Result<(), UsageError> {
        if !(0.0..=1.0).contains(&self.late_renewal_fraction) {
            return Err(UsageError::option(
                "late_renewal_fraction",
                format!(
                    "must be in 0 ..= 1, got {}",
                    crate::text::number(self.late_renewal_fraction)
                ),
            ));
        }
        if self.unreachable_every < Duration::from_millis(1) {
            return Err(UsageError::option(
                "unreachable_every",
                crate::text!["must be at least 1 ms, got ", self.unreachable_every],
            ));
        }
        Ok(())
    }
}

/// One observation of one lock. Durations are measured on the host's monotonic clock
/// (the inputs' `now`).
#[derive(Clone, Debug, PartialEq)]
pub enum Observation {
    /// An acquisition started (`Input::Acquire`).
    Acquiring,
    /// The lease is held: `waited` since the acquisition started, after `attempts`
    /// attempts (1 when the first one got it), with fencing token `token`.
    Acquired {
        /// The grant's fencing token, as in [`crate::Event::Acquired`].
        token: FencingToken,
        /// From the `Acquire` input to the reply that granted the lease.
        waited: Duration,
        /// Attempts made, the granting one included; from 1.
        attempts: u32,
    },
    /// A renewal was confirmed; `validity_left` until the new validity deadline.
    Renewed {
        /// From the confirming reply's `now` to the new validity deadline.
        validity_left: Duration,
    },
    /// A renewal failed transiently (`error`); the next try is in `retry_in`, and the
    /// lease is lost in `deadline_in` unless one is confirmed by then.
    RenewalFailing {
        /// The transport error or retryable server error, as text.
        error: String,
        /// Until the renewal is sent again: a quarter of the renew interval
        /// ([`crate::LockOptions::renew_interval`]), at least 1 ms.
        retry_in: Duration,
        /// Until the current validity deadline, where the lease is lost without a
        /// confirmed renewal.
        deadline_in: Duration,
    },
    /// The lease is gone (`Event::Lost`), after being held for `held_for` (none when
    /// it was never confirmed held, e.g. a loss reported by the host).
    Lost {
        /// Why, as in [`crate::Event::Lost`].
        reason: LostReason,
        /// From the grant's reply to the loss; `None` when no grant was seen.
        held_for: Option<Duration>,
    },
    /// The lock is done with (`Event::Released`); `held_for` is none when the
    /// acquisition was cancelled before a grant.
    Released {
        /// From the grant's reply to the release's end; `None` for a cancelled
        /// acquisition.
        held_for: Option<Duration>,
    },
    /// Acquiring gave up at its `acquire_timeout` or `retry_count` after `waited` and
    /// `attempts` attempts; `last_error` as in `AcquireFailed { Timeout }`.
    AcquireTimedOut {
        /// From the `Acquire` input to giving up.
        waited: Duration,
        /// Attempts made, none of which got the lock.
        attempts: u32,
        /// The last transport or server error seen, if any.
        last_error: Option<String>,
    },
    /// Acquiring ended on a reply retrying cannot fix (`AcquireFailed { Protocol }`).
    AcquireFailed {
        /// From the `Acquire` input to the reply that ended it.
        waited: Duration,
        /// The [`crate::ProtocolError`], as text.
        error: String,
    },
    /// A request of this lock failed: a transport error, a retryable server error, or
    /// a reply that made no sense. The machine retries as its rules say.
    BackendError {
        /// What the failed request was for.
        operation: Operation,
        /// The transport error, server error or [`crate::ProtocolError`], as text.
        error: String,
    },
    /// Warning: a renewal was confirmed with only `validity_left` of the `validity`
    /// left (less than `late_renewal_fraction`): the TTL is too close to the round
    /// trip, or the host is starved.
    RenewalLate {
        /// From the confirming reply's `now` to the deadline the renewal extended.
        validity_left: Duration,
        /// A full validity: `ttl × (1 − drift_factor) − clock_margin`
        /// ([`crate::LockOptions::validity`]).
        validity: Duration,
    },
    /// Warning: one lease has been held for `held_for`, `held_long_ttls` TTLs of `ttl`
    /// or more (once per lease): the lock is held across slow calls.
    HeldLong {
        /// From the grant's reply to the confirmed renewal that noticed.
        held_for: Duration,
        /// The lock's [`crate::LockOptions::ttl`].
        ttl: Duration,
    },
    /// Warning: the lock is contended. `found_held`: times this acquisition found it
    /// held by another before its grant or timeout, a new holder each time where the
    /// backend names the holder's grant (`hot_lock_attempts`); `waiters`: acquisitions
    /// of the name pending in this machine (`hot_lock_waiters`).
    HotLock {
        /// Set when raised at a grant or a failed acquisition: the count, at least
        /// `hot_lock_attempts`. `None` when raised by `waiters`.
        found_held: Option<u32>,
        /// Set when raised by an `Acquire` that brought the pending acquisitions of the
        /// name to `hot_lock_waiters`: that number. `None` when raised by `found_held`.
        waiters: Option<u32>,
    },
    /// Warning: with no `acquire_timeout`, the server has not been reached for
    /// `unreachable_for` (`attempts` attempts failed; `last_error`), and retries go on.
    /// Repeated every `unreachable_every`.
    ServerUnreachable {
        /// Since the first of the attempts in a row that ended without an answer.
        unreachable_for: Duration,
        /// Attempts of this acquisition so far that did not get the lock.
        attempts: u32,
        /// The last transport or server error seen, if any.
        last_error: Option<String>,
    },
}

/// A field's value, for hosts that turn observations into their own records.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Field<'a> {
    /// A duration; Python and the Rust crate's `tracing` events report it in seconds
    /// (`f64`), JavaScript in milliseconds (`…Ms`).
    Duration(Duration),
    /// A count (`attempts`, `found_held`, `waiters`).
    Count(u64),
    /// A fencing token (`token`).
    Token(FencingToken),
    /// Text: an error message, a reason or an operation's snake_case name.
    Text(&'a str),
}

/// `d` as a message shows it: rounded to the microsecond below a second (`250µs`,
/// `988.123ms`), to the millisecond from one on (`1.501s`); a host reads `Debug`'s units.
fn shown(d: Duration) -> Duration {
    let us = d.as_nanos().saturating_add(500) / 1_000;
    let us = if us >= 1_000_000 {
        (us + 500) / 1_000 * 1_000
    } else {
        us
    };
    Duration::from_micros(u64::try_from(us).unwrap_or(u64::MAX))
}

impl Observation {
    /// Every observation's name, events first, then warnings.
    pub const NAMES: &'static [&'static str] = &[
        "acquiring",
        "acquired",
        "renewed",
        "renewal_failing",
        "lost",
        "released",
        "acquire_timed_out",
        "acquire_failed",
        "backend_error",
        "renewal_late",
        "held_long",
        "hot_lock",
        "server_unreachable",
    ];

    /// The observation's name, one of [`Observation::NAMES`].
    pub fn name(&self) -> &'static str {
        Self::NAMES[self.index()]
    }

    fn index(&self) -> usize {
        match self {
            Observation::Acquiring => 0,
            Observation::Acquired { .. } => 1,
            Observation::Renewed { .. } => 2,
            Observation::RenewalFailing { .. } => 3,
            Observation::Lost { .. } => 4,
            Observation::Released { .. } => 5,
            Observation::AcquireTimedOut { .. } => 6,
            Observation::AcquireFailed { .. } => 7,
            Observation::BackendError { .. } => 8,
            Observation::RenewalLate { .. } => 9,
            Observation::HeldLong { .. } => 10,
            Observation::HotLock { .. } => 11,
            Observation::ServerUnreachable { .. } => 12,
        }
    }

    /// Whether it is a warning (a pitfall to fix) rather than an event.
    pub fn is_warning(&self) -> bool {
        self.index() >= 9
    }

    /// How loud the bindings log it: `"debug"` (`acquiring`, `renewed`), `"info"`
    /// (`acquired`, `released`, `acquire_timed_out`, `backend_error`) or `"warning"`
    /// (`renewal_failing`, `lost`, `acquire_failed`, and every warning).
    pub fn level(&self) -> &'static str {
        match self.index() {
            0 | 2 => "debug",
            1 | 5 | 6 | 8 => "info",
            _ => "warning",
        }
    }

    /// The fields in a fixed order, names in snake_case; fields that are `None` are
    /// left out.
    pub fn fields(&self) -> Vec<(&'static str, Field<'_>)> {
        use Field::{Count, Duration as D, Text, Token};
        let opt = |name, d: &Option<Duration>| d.map(|d| (name, D(d)));
        fn text<'a>(
            name: &'static str,
            s: &'a Option<String>,
        ) -> Option<(&'static str, Field<'a>)> {
            s.as_deref().map(|s| (name, Field::Text(s)))
        }
        let count = |name, n: &Option<u32>| n.map(|n| (name, Count(n.into())));
        match self {
            Observation::Acquiring => vec![],
            Observation::Acquired {
                token,
                waited,
                attempts,
            } => vec![
                ("token", Token(*token)),
                ("waited", D(*waited)),
                ("attempts", Count((*attempts).into())),
            ],
            Observation::Renewed { validity_left } => vec![("validity_left", D(*validity_left))],
            Observation::RenewalFailing {
                error,
                retry_in,
                deadline_in,
            } => vec![
                ("error", Text(error)),
                ("retry_in", D(*retry_in)),
                ("deadline_in", D(*deadline_in)),
            ],
            Observation::Lost { reason, held_for } => {
                core::iter::once(Some(("reason", Text(reason.as_str()))))
                    .chain([opt("held_for", held_for)])
                    .flatten()
                    .collect()
            }
            Observation::Released { held_for } => opt("held_for", held_for).into_iter().collect(),
            Observation::AcquireTimedOut {
                waited,
                attempts,
                last_error,
            } => [
                Some(("waited", D(*waited))),
                Some(("attempts", Count((*attempts).into()))),
                text("last_error", last_error),
            ]
            .into_iter()
            .flatten()
            .collect(),
            Observation::AcquireFailed { waited, error } => {
                vec![("waited", D(*waited)), ("error", Text(error))]
            }
            Observation::BackendError { operation, error } => vec![
                ("operation", Text(operation.as_str())),
                ("error", Text(error)),
            ],
            Observation::RenewalLate {
                validity_left,
                validity,
            } => vec![
                ("validity_left", D(*validity_left)),
                ("validity", D(*validity)),
            ],
            Observation::HeldLong { held_for, ttl } => {
                vec![("held_for", D(*held_for)), ("ttl", D(*ttl))]
            }
            Observation::HotLock {
                found_held,
                waiters,
            } => [count("found_held", found_held), count("waiters", waiters)]
                .into_iter()
                .flatten()
                .collect(),
            Observation::ServerUnreachable {
                unreachable_for,
                attempts,
                last_error,
            } => [
                Some(("unreachable_for", D(*unreachable_for))),
                Some(("attempts", Count((*attempts).into()))),
                text("last_error", last_error),
            ]
            .into_iter()
            .flatten()
            .collect(),
        }
    }

    /// A one-line message about lock `name`: what happened, and for a warning what to
    /// change. Option names are the core's (Python's) spelling; durations as Rust's
    /// `Debug` prints them (`1.5s`, `300ms`), to the microsecond below a second and to
    /// the millisecond from one on, not to the nanosecond.
    pub fn message(&self, name: &str) -> String {
        let mut m = format!("lock {name:?}: ");
        // `write!` into a String cannot fail.
        let _ = match self {
            Observation::Acquiring => write!(m, "acquiring"),
            Observation::Acquired {
                token,
                waited,
                attempts,
            } => write!(
                m,
                "acquired with token {} after {:?} ({attempts} attempt{})",
                token.0,
                shown(*waited),
                if *attempts == 1 { "" } else { "s" }
            ),
            Observation::Renewed { validity_left } => {
                write!(m, "renewed, valid for {:?}", shown(*validity_left))
            }
            Observation::RenewalFailing {
                error,
                retry_in,
                deadline_in,
            } => write!(
                m,
                "renewal failed ({error}); retrying in {:?}, lost in {:?} unless one succeeds",
                shown(*retry_in),
                shown(*deadline_in)
            ),
            Observation::Lost { reason, held_for } => {
                let _ = write!(m, "lost ({})", reason.as_str());
                match held_for {
                    Some(d) => write!(m, " after being held for {:?}", shown(*d)),
                    None => Ok(()),
                }
            }
            Observation::Released { held_for } => match held_for {
                Some(d) => write!(m, "released after being held for {:?}", shown(*d)),
                None => write!(m, "acquisition cancelled"),
            },
            Observation::AcquireTimedOut {
                waited,
                attempts,
                last_error,
            } => {
                let _ = write!(
                    m,
                    "acquire timed out after {:?} ({attempts} attempts)",
                    shown(*waited)
                );
                match last_error {
                    Some(e) => write!(m, "; last error: {e}"),
                    None => Ok(()),
                }
            }
            Observation::AcquireFailed { waited, error } => {
                write!(m, "acquire failed after {:?}: {error}", shown(*waited))
            }
            Observation::BackendError { operation, error } => {
                write!(m, "{} request failed: {error}", operation.as_str())
            }
            Observation::RenewalLate {
                validity_left,
                validity,
            } => write!(
                m,
                "renewal confirmed with only {:?} of its {:?} validity left: \
                 the round trip or a stalled host nearly lost the lease; raise ttl, renew earlier \
                 (renew_every), or find what blocks the event loop (late_renewal_fraction sets \
                 this warning)",
                shown(*validity_left),
                shown(*validity)
            ),
            Observation::HeldLong { held_for, ttl } => write!(
                m,
                "one lease held for {:?}, many TTLs of {:?}: the lock is held across \
                 slow calls; keep only the short protected step inside it (held_long_ttls sets \
                 this warning)",
                shown(*held_for),
                shown(*ttl)
            ),
            Observation::HotLock {
                found_held,
                waiters,
            } => {
                let _ = match (found_held, waiters) {
                    (Some(n), _) => write!(
                        m,
                        "found held by others {n} times before this acquisition ended"
                    ),
                    (None, Some(n)) => write!(m, "{n} acquisitions waiting in this process"),
                    (None, None) => write!(m, "contended"),
                };
                write!(
                    m,
                    ": a hot lock used as a queue; a work queue serves better (e.g. SELECT … FOR \
                     UPDATE SKIP LOCKED, one row per job) (hot_lock_attempts, hot_lock_waiters set \
                     this warning)"
                )
            }
            Observation::ServerUnreachable {
                unreachable_for,
                attempts,
                last_error,
            } => {
                let _ = write!(
                    m,
                    "the server has been unreachable for {:?} ({attempts} attempts",
                    shown(*unreachable_for)
                );
                let _ = match last_error {
                    Some(e) => write!(m, "; last error: {e})"),
                    None => write!(m, ")"),
                };
                write!(
                    m,
                    " and acquire_timeout is unlimited, so it keeps retrying; set acquire_timeout \
                     to fail instead, or check the server (unreachable_every sets this warning)"
                )
            }
        };
        m
    }
}

/// An observation with the lock it concerns, as [`crate::Machine::poll_observation`]
/// returns it.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    /// The lock it concerns, as [`crate::Output::Event`] names it.
    pub lock: LockId,
    /// The lock's name.
    pub name: String,
    /// What was observed.
    pub observation: Observation,
}
