//! Lock options, their defaults and their validation (the only place they are checked).

use core::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::UsageError;
use crate::text;
use crate::text::{Opt, Piece};
use crate::time::serde_nanos;

/// Why the lock is taken; decides which backends are acceptable (DESIGN.md rule 8).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Purpose {
    /// Two holders at once merely waste work (a cron job run twice).
    #[default]
    Efficiency,
    /// Two holders at once corrupt data: fencing tokens must never go backwards.
    Correctness,
}

/// Options of one lock acquisition. Build with [`LockOptions::ttl`] and adjust fields.
///
/// Durations are `core::time::Duration`; in scenario vectors they are nanoseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LockOptions {
    /// Lease length the server enforces; 1 ms ..= 2^31 ms. Sent rounded up to whole ms.
    #[serde(with = "serde_nanos")]
    pub ttl: Duration,
    /// Efficiency or correctness.
    pub purpose: Purpose,
    /// Opt-in for a correctness lock on a backend whose tokens can regress on failover.
    pub accept_failover_risk: bool,
    /// How long to keep trying: `None` waits forever, `Some(0)` tries exactly once.
    #[serde(with = "serde_nanos::option")]
    pub acquire_timeout: Option<Duration>,
    /// How many times to retry after the first attempt failed (node-redlock's
    /// `retryCount`): `None` is no limit, `Some(0)` tries exactly once. Whichever of it
    /// and `acquire_timeout` runs out first ends the acquisition (`AcquireFailed`
    /// with reason `Timeout`). A parked wait on a fair backend counts as a retry.
    pub retry_count: Option<u32>,
    /// First retry backoff step; step `n` is `min(retry_max, retry_base · 2^n)`, and each
    /// wait is drawn uniformly from `0 ..= step` ("full jitter").
    #[serde(with = "serde_nanos")]
    pub retry_base: Duration,
    /// Largest backoff step.
    #[serde(with = "serde_nanos")]
    pub retry_max: Duration,
    /// Renew this long after the last renewal was sent; `None` means `ttl / 3`.
    /// Must be shorter than the validity (`ttl · (1 − drift) − margin`).
    #[serde(with = "serde_nanos::option")]
    pub renew_every: Option<Duration>,
    /// Renew automatically (default). When off, the lease ends at its validity deadline.
    pub auto_renew: bool,
    /// Bound on the rate difference between this host's clock and the server's, as a
    /// fraction (0.01 = 1 %, Redlock's default); 0 ..< 0.5.
    pub drift_factor: f64,
    /// Safety margin subtracted from every validity (Redlock's default 2 ms).
    #[serde(with = "serde_nanos")]
    pub clock_margin: Duration,
    /// The lowest fencing token a grant of this acquisition may carry: Redis raises its
    /// counter to `max(counter + 1, floor)`, PostgreSQL takes `greatest(…, floor)`;
    /// `None` (default) asks for no floor. 1 ..= 2^63 − 1 (the servers' signed 64-bit
    /// counters). For recovery after tokens went backwards: a fence refused the new
    /// holder with `StaleToken { highest }`, so acquire again with `highest + 1`.
    /// Safe on any grant: a counter only moves up. etcd assigns its revisions itself
    /// and refuses a floor ([`crate::Backend::check_acquire`]).
    pub token_floor: Option<crate::FencingToken>,
    /// Replica-confirmed grants (Redis only): when above 0, every acquire and renew
    /// script is followed, on the same connection, by `WAIT min_replicas
    /// replica_timeout`, and its outcome counts only once that many replicas
    /// acknowledged it. Unconfirmed is ambiguous: an acquire is retried under the same
    /// owner id (and released if it never is), a renewal is retried until the validity
    /// deadline. Default 0 (no `WAIT`). What this does and does not protect: DESIGN.md,
    /// "Decisions about Redis".
    pub min_replicas: u32,
    /// How long each `WAIT` may block: 1 ms ..< the validity; sent rounded up to whole
    /// ms. Default 100 ms. Only read when `min_replicas` is above 0.
    #[serde(with = "serde_nanos")]
    pub replica_timeout: Duration,
    /// Holder metadata stored with the lock, for operators to read back
    /// (`RedisBackend::inspect`, `postgres::inspect_statement`, `etcd::read_etcd_inspect`,
    /// `read_zk_holder`, `read_kube_inspect`): the JSON text of an object whose keys and
    /// values are strings, at most [`MAX_METADATA`] bytes (build it with
    /// [`encode_metadata`]). Display only: no decision reads it. Default `None`, which
    /// sends exactly the requests of a lock without metadata on Redis, etcd, ZooKeeper and
    /// Kubernetes (a PostgreSQL lease grant carries NULL). Stored on plain Redis (a key
    /// beside the lease), PostgreSQL lease rows (the row's `metadata` column), etcd (the
    /// contender key's value), ZooKeeper (the holder node's data) and Kubernetes (an
    /// annotation of the Lease); [`crate::Backend::check_acquire`] refuses it elsewhere
    /// ([`crate::Backend::stores_metadata`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<String>,
}

/// The largest encoded [`LockOptions::metadata`], in bytes: it is stored beside every
/// lease and read back by every inspection.
pub const MAX_METADATA: usize = 4096;

/// `metadata` as [`LockOptions::metadata`] takes it: compact JSON, keys in order.
pub fn encode_metadata(metadata: &std::collections::BTreeMap<String, String>) -> String {
    serde_json::to_string(metadata).unwrap_or_default()
}

/// Reads [`LockOptions::metadata`] text back into its map; `None` for text that is not
/// a JSON object of strings.
pub fn decode_metadata(text: &str) -> Option<std::collections::BTreeMap<String, String>> {
    serde_json::from_str(text).ok()
}

impl LockOptions {
    /// These options with `metadata` stored with each grant ([`LockOptions::metadata`]).
    pub fn with_metadata(mut self, metadata: &std::collections::BTreeMap<String, String>) -> Self {
        self.metadata = Some(encode_metadata(metadata));
        self
    }
}

/// The longest TTL accepted: 2^31 ms (about 24.8 days).
pub const MAX_TTL: Duration = Duration::from_millis(1 << 31);

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            ttl: Duration::from_secs(30),
            purpose: Purpose::Efficiency,
            accept_failover_risk: false,
            acquire_timeout: None,
            retry_count: None,
            retry_base: Duration::from_millis(10),
            retry_max: Duration::from_millis(500),
            renew_every: None,
            auto_renew: true,
            drift_factor: 0.01,
            clock_margin: Duration::from_millis(2),
            token_floor: None,
            min_replicas: 0,
            replica_timeout: Duration::from_millis(100),
            metadata: None,
        }
    }
}

impl LockOptions {
    /// Default options with the given TTL.
    pub fn ttl(ttl: Duration) -> Self {
        LockOptions {
            ttl,
            ..LockOptions::default()
        }
    }

    /// How long after a request is *sent* the holder may believe the lease it asked for
    /// is held: `ttl · (1 − drift) − margin` (the Redlock validity analysis).
    pub fn validity(&self) -> Duration {
        // `f64::max`/`min` drop NaN (unlike `clamp`, whose NaN would make `mul_f64`
        // panic): never a panic, even unvalidated.
        #[allow(clippy::manual_clamp)]
        let drift = self.ttl.mul_f64(self.drift_factor.max(0.0).min(0.5));
        self.ttl
            .saturating_sub(drift)
            .saturating_sub(self.clock_margin)
    }

    /// The renew interval in effect: `renew_every`, or `ttl / 3`.
    pub fn renew_interval(&self) -> Duration {
        self.renew_every.unwrap_or(self.ttl / 3)
    }

    /// The replica timeout as `WAIT` receives it: whole milliseconds, rounded up.
    pub fn replica_timeout_ms(&self) -> u64 {
        u64::try_from(self.replica_timeout.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
    }

    /// The TTL as the server receives it: whole milliseconds, rounded up.
    pub fn ttl_ms(&self) -> u64 {
        let nanos = self.ttl.as_nanos();
        u64::try_from(nanos.div_ceil(1_000_000)).unwrap_or(u64::MAX)
    }

    /// Checks every option. `tokens_may_regress` is the backend's answer to DESIGN.md
    /// rule 8; `backend` names it in the error.
    ///
    /// Errors: [`UsageError::InvalidOption`] naming the option, the value and the range;
    /// [`UsageError::UnsafePurpose`].
    pub fn validate(&self, backend: &str, tokens_may_regress: bool) -> Result<(), UsageError> {
        if self.ttl < Duration::from_millis(1) {
            return Err(UsageError::option(
                "ttl",
                text!["must be at least 1 ms, got ", self.ttl],
            ));
        }
        if self.ttl > MAX_TTL {
            return Err(UsageError::option(
                "ttl",
                text!["must be at most 2^31 ms (~24.8 days), got ", self.ttl],
            ));
        }
        if !(self.drift_factor >= 0.0 && self.drift_factor < 0.5) {
            return Err(UsageError::option(
                "drift_factor",
                format!(
                    "must be in 0 ..< 0.5, got {}",
                    crate::text::number(self.drift_factor)
                ),
            ));
        }
        let validity = self.validity();
        if validity.is_zero() {
            return Err(UsageError::option(
                "ttl",
                text![
                    self.ttl,
                    format!(
                        " leaves no validity after drift {} and clock margin ",
                        crate::text::number(self.drift_factor)
                    ),
                    self.clock_margin,
                    "; use a longer ",
                    Opt("ttl"),
                ],
            ));
        }
        if let Some(every) = self.renew_every {
            if every.is_zero() || every >= validity {
                return Err(UsageError::option(
                    "renew_every",
                    text![
                        "must be above 0 and below the validity ",
                        validity,
                        " (ttl ",
                        self.ttl,
                        " less drift and margin), got ",
                        every,
                    ],
                ));
            }
        } else if self.auto_renew && self.renew_interval() >= validity {
            return Err(UsageError::option(
                "ttl",
                text![
                    self.ttl,
                    " is too short to renew automatically: the default renew interval ttl/3 (",
                    self.renew_interval(),
                    ") is not below the validity ",
                    validity,
                    " (ttl less drift and margin); use a longer ",
                    Opt("ttl"),
                    ", a shorter ",
                    Opt("renew_every"),
                    ", or ",
                    Piece::Setting("auto_renew", false),
                ],
            ));
        }
        if self.retry_base.is_zero() {
            return Err(UsageError::option(
                "retry_base",
                text!["must be above 0, got ", self.retry_base],
            ));
        }
        if self.retry_max < self.retry_base {
            return Err(UsageError::option(
                "retry_max",
                text![
                    "must be at least ",
                    Opt("retry_base"),
                    " ",
                    self.retry_base,
                    ", got ",
                    self.retry_max,
                ],
            ));
        }
        if self.min_replicas > 0
            && (self.replica_timeout < Duration::from_millis(1) || self.replica_timeout >= validity)
        {
            // WAIT 0 blocks forever; a WAIT past the validity confirms a lease already gone
            return Err(UsageError::option(
                "replica_timeout",
                text![
                    "must be at least 1 ms and below the validity ",
                    validity,
                    " (ttl ",
                    self.ttl,
                    " less drift and margin), got ",
                    self.replica_timeout,
                ],
            ));
        }
        if let Some(text) = &self.metadata {
            if text.len() > MAX_METADATA {
                return Err(UsageError::option(
                    "metadata",
                    format!(
                        "must encode to at most {MAX_METADATA} bytes, got {} bytes",
                        text.len()
                    ),
                ));
            }
            if decode_metadata(text).is_none() {
                return Err(UsageError::option(
                    "metadata",
                    format!(
                        "must be a JSON object of string keys and string values, got {text:.80}"
                    ),
                ));
            }
        }
        if let Some(floor) = self.token_floor {
            if floor.0 == 0 || floor.0 > i64::MAX as u64 {
                return Err(UsageError::option(
                    "token_floor",
                    format!("must be in 1 ..= 2^63 - 1, got {floor}"),
                ));
            }
        }
        if self.purpose == Purpose::Correctness && tokens_may_regress && !self.accept_failover_risk
        {
            return Err(UsageError::UnsafePurpose {
                backend: backend.to_owned(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::Host;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn validity_follows_the_redlock_formula() {
        // 1000 · (1 − 0.01) − 2 = 988 ms
        assert_eq!(LockOptions::ttl(ms(1_000)).validity(), ms(988));
        assert_eq!(
            LockOptions::ttl(ms(1_000)).renew_interval(),
            Duration::from_nanos(333_333_333)
        );
    }

    #[test]
    fn ttl_is_sent_rounded_up_to_whole_milliseconds() {
        assert_eq!(LockOptions::ttl(Duration::from_micros(1_500)).ttl_ms(), 2);
        assert_eq!(LockOptions::ttl(ms(30_000)).ttl_ms(), 30_000);
    }

    #[test]
    fn bad_ttls_are_named_in_the_error() {
        let err = LockOptions::ttl(ms(0)).validate("redis", true).unwrap_err();
        assert_eq!(err.to_string(), "ttl: must be at least 1 ms, got 0ns");
        assert_eq!(
            err.render(Host::Python),
            "ttl: must be at least 1 ms, got 0 s"
        );
        assert_eq!(
            err.render(Host::Js),
            "ttlMs: must be at least 1 ms, got 0 ms"
        );
        assert!(LockOptions::ttl(MAX_TTL + ms(1))
            .validate("redis", true)
            .is_err());
        // 2 ms − 1 % − 2 ms margin leaves nothing
        let err = LockOptions::ttl(ms(2)).validate("redis", true).unwrap_err();
        assert!(err.to_string().contains("leaves no validity"), "{err}");
        // 3 ms: validity 0.97 ms, renew every 1 ms — never in time
        let err = LockOptions::ttl(ms(3)).validate("redis", true).unwrap_err();
        assert!(err.to_string().contains("too short to renew"), "{err}");
        let mut o = LockOptions::ttl(ms(3));
        o.auto_renew = false;
        assert_eq!(o.validate("redis", true), Ok(()));
    }

    #[test]
    fn renew_interval_must_fit_inside_the_validity() {
        let mut o = LockOptions::ttl(ms(1_000));
        o.renew_every = Some(ms(988));
        assert!(matches!(
            o.validate("redis", true),
            Err(UsageError::InvalidOption { .. })
        ));
        o.renew_every = Some(ms(987));
        assert_eq!(o.validate("redis", true), Ok(()));
    }

    #[test]
    fn each_host_reads_durations_in_its_unit_and_options_in_its_spelling() {
        let mut o = LockOptions::ttl(ms(1_000));
        o.retry_base = ms(500);
        o.retry_max = ms(100);
        let err = o.validate("redis", true).unwrap_err();
        assert_eq!(
            err.to_string(),
            "retry_max: must be at least retry_base 500ms, got 100ms"
        );
        assert_eq!(
            err.render(Host::Python),
            "retry_max: must be at least retry_base 0.5 s, got 0.1 s"
        );
        assert_eq!(
            err.render(Host::Js),
            "retryMaxMs: must be at least retryBaseMs 500 ms, got 100 ms"
        );
        // 3 ms: validity 3 · 0.99 − 2 = 0.97 ms, the renew interval 1 ms
        let err = LockOptions::ttl(ms(3)).validate("redis", true).unwrap_err();
        assert_eq!(
            err.render(Host::Python),
            "ttl: 0.003 s is too short to renew automatically: the default renew interval \
             ttl/3 (0.001 s) is not below the validity 0.00097 s (ttl less drift and margin); \
             use a longer ttl, a shorter renew_every, or auto_renew=False"
        );
        assert_eq!(
            err.render(Host::Js),
            "ttlMs: 3 ms is too short to renew automatically: the default renew interval \
             ttl/3 (1 ms) is not below the validity 0.97 ms (ttl less drift and margin); \
             use a longer ttlMs, a shorter renewEveryMs, or autoRenew: false"
        );
    }

    #[test]
    fn correctness_on_a_regressing_backend_needs_the_opt_in() {
        let mut o = LockOptions::ttl(ms(1_000));
        o.purpose = Purpose::Correctness;
        let err = o.validate("redis", true).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("a correctness lock on redis is unsafe: "),
            "{text}"
        );
        assert!(text.contains("etcd or a PostgreSQL lease"), "{text}");
        assert!(text.contains("accept_failover_risk=true"), "{text}");
        assert!(!text.contains("ZooKeeper"), "{text}"); // not a backend
        assert!(err
            .render(Host::Python)
            .contains("accept_failover_risk=True"));
        assert!(err.render(Host::Js).contains("acceptFailoverRisk: true"));
        assert_eq!(o.validate("etcd", false), Ok(()));
        o.accept_failover_risk = true;
        assert_eq!(o.validate("redis", true), Ok(()));
    }

    #[test]
    fn token_floor_fits_the_servers_signed_counters() {
        let mut o = LockOptions::ttl(ms(1_000));
        for bad in [0, 1 << 63] {
            o.token_floor = Some(crate::FencingToken(bad));
            let err = o.validate("redis", true).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("token_floor: must be in 1 ..= 2^63 - 1, got {bad}")
            );
        }
        o.token_floor = Some(crate::FencingToken(i64::MAX as u64));
        assert_eq!(o.validate("redis", true), Ok(()));
    }

    #[test]
    fn replica_timeout_must_be_positive_and_inside_the_validity() {
        let mut o = LockOptions::ttl(ms(1_000));
        o.min_replicas = 1;
        for bad in [ms(0), ms(988)] {
            o.replica_timeout = bad;
            let err = o.validate("redis", true).unwrap_err();
            assert!(err.to_string().starts_with("replica_timeout: "), "{err}");
        }
        o.replica_timeout = Duration::from_micros(1_500);
        assert_eq!(o.validate("redis", true), Ok(()));
        assert_eq!(o.replica_timeout_ms(), 2); // WAIT takes whole ms, rounded up
        o.min_replicas = 0; // no WAIT: the timeout is not read
        o.replica_timeout = ms(0);
        assert_eq!(o.validate("redis", true), Ok(()));
    }

    #[test]
    fn nan_drift_is_rejected_and_never_panics() {
        let mut o = LockOptions::ttl(ms(1_000));
        o.drift_factor = f64::NAN;
        assert!(o.validate("redis", true).is_err());
        let _ = o.validity(); // public: must not panic on unvalidated options
        o.drift_factor = f64::INFINITY;
        let _ = o.validity();
    }
}
