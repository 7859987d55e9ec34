//! Backends: how to phrase each request for one kind of lock server and how to read
//! its reply. A backend never decides *when* to send or whether a lease is valid.

pub mod postgres;
pub mod redis;

use core::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ProtocolError;
use crate::{FencingToken, OwnerId};

pub use postgres::{PgConnection, PgMode, PostgresBackend, SqlReply, SqlStatement, SqlValue};
pub use redis::{RedisBackend, RedisBlpop, RedisCommand, RedisScript, RedisValue};

/// Which server the machine talks to, with that backend's settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Backend {
    /// A single Redis (or Redis-compatible) server.
    Redis(RedisBackend),
    /// PostgreSQL: lease rows or session-level advisory locks.
    Postgres(PostgresBackend),
}

impl Default for Backend {
    fn default() -> Self {
        Backend::Redis(RedisBackend::default())
    }
}

/// What a request is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// Take the lock (idempotent for the same owner id).
    Acquire,
    /// Extend the lease, only if this owner still holds it.
    Renew,
    /// Free the lock, only if this owner still holds it.
    Release,
    /// Park until woken by a release or a timeout (fair hand-off); any reply is
    /// answered with the next acquire attempt.
    Wait,
}

/// A backend request as data, for the host's adapter to execute.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "backend", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RequestBody {
    /// Run a Lua script on Redis (`EVALSHA`, falling back to `EVAL` on `NOSCRIPT`).
    Redis(RedisCommand),
    /// Run a SQL statement on PostgreSQL, on the connection it names.
    Sql(SqlStatement),
    /// Block on a Redis list (`BLPOP`) until a release wakes this waiter or the
    /// timeout passes (fair hand-off).
    RedisBlpop(RedisBlpop),
}

/// A backend reply as data, converted by the host's adapter from its client library.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "backend", content = "value", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reply {
    /// A Redis reply.
    Redis(RedisValue),
    /// A SQL reply.
    Sql(SqlReply),
}

/// The outcome of an acquire request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AcquireOutcome {
    /// This owner holds the lock, with this fencing token.
    Granted(FencingToken),
    /// Another owner holds it; it expires in about `remaining` if not renewed.
    Contended { remaining: Option<Duration> },
}

/// The outcome of a renew or release request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OwnerCheck {
    /// This owner held the lock and the request took effect.
    Done,
    /// The key is gone or has another owner; nothing was changed.
    NotHeld,
}

/// A reply that is not an outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReplyError {
    /// A server error that retrying may fix (loading, failover in progress, busy).
    /// The request may or may not have taken effect.
    Transient(String),
    /// A reply retrying will not fix. The request may or may not have taken effect.
    Protocol(ProtocolError),
}

impl Backend {
    /// The name used in errors and docs.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Redis(_) => "redis",
            Backend::Postgres(_) => "postgres",
        }
    }

    /// Whether fencing tokens can go backwards on failover (DESIGN.md rule 8).
    pub fn tokens_may_regress(&self) -> bool {
        match self {
            Backend::Redis(_) => true,
            // Lease rows and token rows are durable, transactional state.
            Backend::Postgres(_) => false,
        }
    }

    /// `retry_max_ms` sizes how long a fair waiter stays queued without asking again.
    pub(crate) fn acquire(
        &self,
        name: &str,
        owner: &OwnerId,
        ttl_ms: u64,
        retry_max_ms: u64,
    ) -> RequestBody {
        match self {
            Backend::Redis(b) => RequestBody::Redis(b.acquire(name, owner, ttl_ms, retry_max_ms)),
            Backend::Postgres(b) => RequestBody::Sql(b.acquire(name, owner, ttl_ms)),
        }
    }

    pub(crate) fn renew(&self, name: &str, owner: &OwnerId, ttl_ms: u64) -> RequestBody {
        match self {
            Backend::Redis(b) => RequestBody::Redis(b.renew(name, owner, ttl_ms)),
            Backend::Postgres(b) => RequestBody::Sql(b.renew(name, owner, ttl_ms)),
        }
    }

    /// `claim_ms` is how long a fair release reserves the lock for the woken waiter.
    pub(crate) fn release(&self, name: &str, owner: &OwnerId, claim_ms: u64) -> RequestBody {
        match self {
            Backend::Redis(b) => RequestBody::Redis(b.release(name, owner, claim_ms)),
            Backend::Postgres(b) => RequestBody::Sql(b.release(name, owner)),
        }
    }

    /// Whether the lock lives and dies with one connection (PostgreSQL session-level
    /// advisory locks): a failed renewal (heartbeat) is then a loss, not a retry.
    pub(crate) fn connection_bound(&self) -> bool {
        matches!(self, Backend::Postgres(b) if b.mode == PgMode::Session)
    }

    /// Whether contended acquirers are queued on the server and woken by releases.
    pub(crate) fn notifies_waiters(&self) -> bool {
        matches!(self, Backend::Redis(b) if b.fair)
    }

    /// The blocking wait of a contended acquirer, when the backend notifies waiters.
    pub(crate) fn wait(&self, name: &str, owner: &OwnerId, timeout_ms: u64) -> Option<RequestBody> {
        match self {
            Backend::Redis(b) => b.wait(name, owner, timeout_ms).map(RequestBody::RedisBlpop),
            Backend::Postgres(_) => None,
        }
    }

    pub(crate) fn read_wait(&self, reply: &Reply) -> Result<(), ReplyError> {
        match (self, reply) {
            (Backend::Redis(_), Reply::Redis(v)) => redis::read_wait(v),
            (b, r) => Err(wrong_reply(b, r)),
        }
    }

    pub(crate) fn read_acquire(&self, reply: &Reply) -> Result<AcquireOutcome, ReplyError> {
        match (self, reply) {
            (Backend::Redis(_), Reply::Redis(v)) => redis::read_acquire(v),
            (Backend::Postgres(_), Reply::Sql(v)) => postgres::read_acquire(v),
            (b, r) => Err(wrong_reply(b, r)),
        }
    }

    pub(crate) fn read_owner_check(&self, reply: &Reply) -> Result<OwnerCheck, ReplyError> {
        match (self, reply) {
            (Backend::Redis(_), Reply::Redis(v)) => redis::read_owner_check(v),
            (Backend::Postgres(_), Reply::Sql(v)) => postgres::read_owner_check(v),
            (b, r) => Err(wrong_reply(b, r)),
        }
    }
}

/// A reply of another backend's kind: the host's adapter is miswired.
fn wrong_reply(backend: &Backend, reply: &Reply) -> ReplyError {
    ReplyError::Protocol(ProtocolError {
        backend: backend.name().to_owned(),
        message: format!("got a reply for another backend: {reply:?}"),
    })
}
