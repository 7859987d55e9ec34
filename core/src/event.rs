//! What the machine tells the host: [`Event`] and its reasons.

use serde::{Deserialize, Serialize};

use crate::error::ProtocolError;
use crate::{FencingToken, Instant};

/// Something the host must act on. Every event names the lock it concerns (see
/// [`crate::Output::Event`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// The lease is held. Carry `token` on every write to the protected resource; stop
    /// believing you hold the lease at `valid_until` (host monotonic time) unless a
    /// [`Event::Renewed`] moves it.
    ///
    /// `previous` says how the lock's previous holder ended, as the server saw it at
    /// this grant: a holder whose lease ran out may have left its work half done.
    Acquired {
        /// The server's fencing token for this grant.
        token: FencingToken,
        /// The validity deadline on the host's monotonic clock: the send of the request
        /// the grant rests on (etcd: its lease's last confirmed grant or keep-alive) plus
        /// [`crate::LockOptions::validity`] (DESIGN.md rule 1).
        valid_until: Instant,
        /// How the previous holder ended. Absent in JSON: [`Previous::Unknown`].
        #[serde(default)]
        previous: Previous,
    },
    /// A renewal was confirmed; the validity deadline moved to `valid_until`.
    Renewed {
        /// The new validity deadline on the host's monotonic clock: the confirmed
        /// renewal's send plus [`crate::LockOptions::validity`], never earlier than the
        /// deadline before.
        valid_until: Instant,
    },
    /// The lease is gone. Stop the protected work now: another holder may already
    /// have been granted the lock.
    Lost {
        /// Why the lease is gone.
        reason: LostReason,
    },
    /// The lock is done with: the server confirmed the owner-checked release, or the
    /// acquisition was cancelled before it was granted, or the release could not be
    /// confirmed (three transport failures, or its deadline of one TTL passed) — then
    /// the server frees the lock when the TTL runs out, as it would after a crash.
    Released,
    /// Acquiring gave up; the lock was never held by this acquisition.
    AcquireFailed {
        /// Why acquiring gave up.
        reason: AcquireFailedReason,
    },
}

/// How the previous holder of a lock ended, as the server saw it when it granted the
/// lock again (the robust-mutex idea: an heir that knows its predecessor died can check
/// for half-done work).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Previous {
    /// It released the lock cleanly (an owner-checked release, or a fair hand-off).
    Released,
    /// Its lease ran out, or it was freed behind its back: it may have left its work
    /// half done.
    Expired,
    /// Nobody held this lock before: the first grant of its name.
    None,
    /// The server keeps no record that tells (a backend that does not report it, a
    /// retried grant whose first reply was lost, an advisory-lock predecessor).
    #[default]
    Unknown,
}

/// Why a held lease was lost.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LostReason {
    /// The validity deadline passed without a confirmed renewal (DESIGN.md rule 2).
    Expired,
    /// The server refused a renewal: the key is gone or has another owner (rule 3).
    /// For a connection-bound lock (PostgreSQL session mode) also: the heartbeat on the
    /// lock's connection failed, so the session holding it is gone.
    RenewRejected,
    /// The release found the key gone or held by another owner: the lease had ended on
    /// the server while this host still believed it held it (external delete, server
    /// restart without persistence, failover).
    NotHeldAtRelease,
    /// The host closed the backend (or dropped its driver) while the lease was held:
    /// the machine's release was sent best effort, and the protected work must stop
    /// as for any other loss. Hosts report it; the machine never decides it.
    Closed,
}

impl Event {
    /// The event's name, as serde spells its `type`: `"acquired"`, `"renewed"`,
    /// `"lost"`, `"released"` or `"acquire_failed"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Acquired { .. } => "acquired",
            Event::Renewed { .. } => "renewed",
            Event::Lost { .. } => "lost",
            Event::Released => "released",
            Event::AcquireFailed { .. } => "acquire_failed",
        }
    }
}

/// Why acquiring gave up.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AcquireFailedReason {
    /// The acquire timeout passed while another owner held the lock, or while the
    /// server could not be reached.
    Timeout {
        /// The last error seen while trying, if any (a transport or server error).
        last_error: Option<String>,
    },
    /// The server answered in a way retrying cannot fix.
    Protocol {
        /// The reply that made no sense: the backend and what was wrong with it.
        error: ProtocolError,
    },
}

impl AcquireFailedReason {
    /// Every reason's name, in declaration order (the serde spelling of `kind`).
    pub const NAMES: &'static [&'static str] = &["timeout", "protocol"];

    /// The reason's name, as serde spells its `kind`: `"timeout"` or `"protocol"`.
    pub fn kind(&self) -> &'static str {
        match self {
            AcquireFailedReason::Timeout { .. } => "timeout",
            AcquireFailedReason::Protocol { .. } => "protocol",
        }
    }
}
