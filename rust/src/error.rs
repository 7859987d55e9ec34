//! The crate's one error type.

use fencepost_core::{AcquireFailedReason, LostReason, ProtocolError, StaleToken, UsageError};
use thiserror::Error;

/// Why a fencepost operation failed. The variants follow the table every binding uses
/// (Python `fencepost.errors`, JS `code`): the caller's fault ([`Error::Usage`],
/// [`Error::Config`]), the lock's outcome ([`Error::AcquireTimeout`], [`Error::Lost`],
/// [`Error::StaleToken`]) and the servers' ([`Error::Backend`], [`Error::Protocol`]).
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A bad lock name or bad options, as the core checks them (`ERR_CONFIG`).
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// A bad backend URL or setting, or a backend built without its cargo feature
    /// (`ERR_CONFIG`). The message names the value and what would be right.
    #[error("{0}")]
    Config(String),
    /// Acquiring `name` gave up: the acquire timeout passed while another owner held
    /// the lock or the server could not be reached (`ERR_ACQUIRE_TIMEOUT`).
    #[error("could not acquire lock {name:?} in time{}", .last_error.as_deref().map(|e| format!(" (last error: {e})")).unwrap_or_default())]
    AcquireTimeout {
        /// The lock name.
        name: String,
        /// The last transport or server error seen while trying, if any.
        last_error: Option<String>,
    },
    /// The lease of `name` was lost: stop the protected work (`ERR_LOCK_LOST`). At
    /// release it means the lease ended on the server while this process believed it
    /// held it ([`LostReason::NotHeldAtRelease`]).
    #[error("lease of lock {name:?} lost: {}", lost_text(.reason))]
    Lost {
        /// The lock name.
        name: String,
        /// Why (from the core's `Event::Lost`).
        reason: LostReason,
    },
    /// A fenced write was refused: a newer token has written (`ERR_STALE_TOKEN`).
    #[error(transparent)]
    StaleToken(#[from] StaleToken),
    /// The server answered in a way retrying cannot fix (`ERR_PROTOCOL`).
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// The server could not be reached or a call failed in transport; for an
    /// operator query or a fenced write the outcome is unknown (`ERR_BACKEND`).
    #[error("{0}")]
    Backend(String),
    /// The client's driver task stopped (its runtime shut down).
    #[error("the fencepost driver is not running (its tokio runtime shut down)")]
    DriverGone,
}

/// `e` and its sources as one line, `outer: inner: …`, each message once (reqwest's
/// own text leaves out the cause, which is where a TLS failure is named).
#[cfg(any(
    feature = "redis",
    feature = "postgres",
    feature = "etcd",
    feature = "upstash",
    feature = "kubernetes"
))]
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        source = s.source();
    }
    text
}

/// `message` of a failed connection, with a hint when the failure is the server's
/// certificate (`how`: how this backend is given a CA, e.g. `?ca=/path/ca.pem`).
#[cfg(any(
    feature = "redis",
    feature = "postgres",
    feature = "etcd",
    feature = "kubernetes"
))]
pub(crate) fn tls_hint(message: String, how: &str) -> String {
    let lower = message.to_ascii_lowercase();
    if lower.contains("certificate") || lower.contains("unknownissuer") {
        format!(
            "{message} (the server's TLS certificate was refused: trust the CA that signed it \
             with {how} or FENCEPOST_CA_FILE=/path/ca.pem)"
        )
    } else {
        message
    }
}

fn lost_text(reason: &LostReason) -> &'static str {
    match reason {
        LostReason::Expired => "its validity ended without a confirmed renewal",
        LostReason::RenewRejected => {
            "the server refused the renewal (the key is gone or another owner holds it)"
        }
        LostReason::NotHeldAtRelease => "the release found it gone on the server",
        LostReason::Closed => "the client was closed while the lease was held",
    }
}

impl Error {
    /// Translates the core driver's error for lock `name`.
    pub(crate) fn from_driver(name: &str, e: fencepost_core::driver::LockError) -> Self {
        use fencepost_core::driver::LockError;
        match e {
            LockError::Usage(u) => Error::Usage(u),
            LockError::AcquireFailed(AcquireFailedReason::Timeout { last_error }) => {
                Error::AcquireTimeout {
                    name: name.to_owned(),
                    last_error,
                }
            }
            LockError::AcquireFailed(AcquireFailedReason::Protocol { error }) => {
                Error::Protocol(error)
            }
            LockError::Lost(reason) => Error::Lost {
                name: name.to_owned(),
                reason,
            },
            LockError::DriverGone => Error::DriverGone,
        }
    }
}
