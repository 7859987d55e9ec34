//! Errors: [`UsageError`] is the caller's fault, [`ProtocolError`] the server's.
//!
//! Losing a lock is never an error return: it is [`crate::Event::Lost`].

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::text::{Host, Text};
use crate::{Instant, LockId};

/// The caller misused the machine: bad options, an unknown lock, time going backwards.
/// The input was rejected and nothing changed.
#[derive(Clone, Debug, Error, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum UsageError {
    /// An input carried a `now` earlier than one given before (DESIGN.md rule 6).
    #[error(
        "time went backwards: now is {now}, but {last} was given before; pass a monotonic clock"
    )]
    TimeWentBackwards {
        /// The rejected input's `now`.
        now: Instant,
        /// The latest `now` the machine had been given before it.
        last: Instant,
    },
    /// An input carried a `now` past [`Instant::LATEST`] (about 146 years after the
    /// host's origin): not a monotonic clock's reading (DESIGN.md rule 6).
    #[error(
        "time out of range: now is {now}, past the latest instant a machine accepts \
         (2^62 ns, about 146 years after the origin); pass a monotonic clock's reading"
    )]
    TimeOutOfRange {
        /// The rejected input's `now`, above [`Instant::LATEST`].
        now: Instant,
    },
    /// A lock option is out of range; the message names the value and the allowed range,
    /// its durations and option names said each host's way ([`UsageError::render`]).
    #[error("{option}: {message}")]
    InvalidOption {
        /// The option's name as the core spells it: a [`crate::LockOptions`] or
        /// [`crate::ObserveOptions`] field (`ttl`, `retry_base`), a backend setting
        /// (`masters`, `namespace`), or `name` (a lock name Kubernetes cannot take).
        /// [`UsageError::render`] spells it each host's way.
        option: String,
        /// What is wrong and what would be right, without the option's name; its
        /// durations and option names render in the host's units and spelling.
        message: Text,
    },
    /// A `correctness` lock on a backend whose fencing tokens can go backwards on
    /// failover (DESIGN.md rule 8), without the explicit opt-in.
    #[error("{}", unsafe_purpose(.backend, Host::Rust))]
    UnsafePurpose {
        /// The backend's name as [`crate::Backend::name`] spells it (`"redis"`: a
        /// Redlock refuses `correctness` with [`UsageError::InvalidOption`] instead).
        backend: String,
    },
    /// The lock name is empty, too long, or holds a NUL character (which PostgreSQL
    /// `text` cannot store: a name must mean the same lock on every backend).
    #[error("lock name must be 1 to 1024 bytes of UTF-8 with no NUL character, got {len} bytes{}", nul_note(.nul))]
    InvalidName {
        /// The name's length in bytes of UTF-8 (0 for an empty name).
        len: usize,
        /// Whether the name holds a NUL character. Omitted from JSON when `false`.
        #[serde(default, skip_serializing_if = "core::ops::Not::not")]
        nul: bool,
    },
    /// This machine never issued a lock with this id.
    #[error("unknown lock {lock}")]
    UnknownLock {
        /// The id given, which this machine never issued.
        lock: LockId,
    },
}

fn unsafe_purpose(backend: &str, host: Host) -> String {
    format!(
        "a correctness lock on {backend} is unsafe: {backend} fencing tokens can go backwards \
         when a replica is promoted after a failover, so two holders may carry the same token. \
         Use etcd or a PostgreSQL lease for correctness locks, use purpose 'efficiency', \
         or set {} if you accept that risk",
        host.setting("accept_failover_risk", true)
    )
}

fn nul_note(nul: &bool) -> &'static str {
    if *nul {
        " with a NUL"
    } else {
        ""
    }
}

impl UsageError {
    /// The error's name, as serde spells its `kind`: `"time_went_backwards"`,
    /// `"time_out_of_range"`,
    /// `"invalid_option"`, `"unsafe_purpose"`, `"invalid_name"` or `"unknown_lock"`.
    pub fn kind(&self) -> &'static str {
        match self {
            UsageError::TimeWentBackwards { .. } => "time_went_backwards",
            UsageError::TimeOutOfRange { .. } => "time_out_of_range",
            UsageError::InvalidOption { .. } => "invalid_option",
            UsageError::UnsafePurpose { .. } => "unsafe_purpose",
            UsageError::InvalidName { .. } => "invalid_name",
            UsageError::UnknownLock { .. } => "unknown_lock",
        }
    }

    /// The message as `host`'s users read it: an invalid option's name, the option names
    /// and the durations it mentions in that host's spelling and units (`Display` is
    /// [`Host::Rust`]'s).
    pub fn render(&self, host: Host) -> String {
        match self {
            UsageError::InvalidOption { option, message } => {
                let mut out = host.option_name(option).into_owned();
                out.push_str(": ");
                message.push_to(&mut out, host);
                out
            }
            UsageError::UnsafePurpose { backend } => unsafe_purpose(backend, host),
            other => other.to_string(),
        }
    }

    pub(crate) fn option(option: &str, message: impl Into<Text>) -> Self {
        UsageError::InvalidOption {
            option: option.to_owned(),
            message: message.into(),
        }
    }
}

/// The server's reply made no sense for the request it answers (wrong shape, an error
/// reply that retrying cannot fix). The machine treats the outcome of that request as
/// unknown and acts safely; the error is reported in the event that follows.
#[derive(Clone, Debug, Error, PartialEq, Eq, Serialize, Deserialize)]
#[error("{backend} protocol error: {message}")]
pub struct ProtocolError {
    /// The backend whose reply it was.
    pub backend: String,
    /// What was expected and what came instead.
    pub message: String,
}

/// The operating system could not supply randomness for owner ids.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("no secure randomness available for owner ids: {0}")]
pub struct EntropyError(pub String);
