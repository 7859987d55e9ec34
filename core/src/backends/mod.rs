//! Backends: how to phrase each request for one kind of lock server and how to read
//! its reply. A backend never decides *when* to send or whether a lease is valid.

pub mod etcd;
pub mod postgres;
pub mod redis;

use core::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ProtocolError;
use crate::{FencingToken, Instant, OwnerId};

pub use etcd::{EtcdBackend, EtcdRequest};

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
    /// etcd v3: leases, one key per contender, create revisions as tokens.
    Etcd(EtcdBackend),
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
    /// An etcd v3 call (JSON gateway or gRPC); a `Watch` is a blocking wait.
    Etcd(EtcdRequest),
}

impl RequestBody {
    /// The body's name, as serde spells its `backend` tag: `"redis"`, `"sql"`,
    /// `"redis_blpop"` or `"etcd"`.
    pub fn kind(&self) -> &'static str {
        match self {
            RequestBody::Redis(_) => "redis",
            RequestBody::Sql(_) => "sql",
            RequestBody::RedisBlpop(_) => "redis_blpop",
            RequestBody::Etcd(_) => "etcd",
        }
    }
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
    /// An etcd reply: the JSON document the v3 JSON gateway returned (or a gRPC
    /// response in the proto3 JSON mapping), error documents included.
    Etcd(String),
}

/// The outcome of an acquire request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AcquireOutcome {
    /// This owner holds the lock, with this fencing token.
    Granted(FencingToken),
    /// Another owner holds it; it expires in about `remaining` if not renewed.
    Contended { remaining: Option<Duration> },
    /// A step of a multi-step acquire succeeded: send the next step now.
    Continue,
}

/// A lock's progress through a multi-step backend protocol (etcd), for its current
/// owner id. Single-request backends keep none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Progress {
    /// Boxed: ~130 bytes that every Redis or PostgreSQL lease would carry otherwise.
    etcd: Option<Box<etcd::EtcdProgress>>,
}

impl Progress {
    /// The etcd progress for `owner`, fresh when the owner id changed.
    fn etcd(&mut self, owner: &OwnerId) -> &mut etcd::EtcdProgress {
        if self.etcd.as_ref().is_some_and(|p| p.owner() != *owner) {
            self.etcd = None;
        }
        self.etcd
            .get_or_insert_with(|| Box::new(etcd::EtcdProgress::new(*owner)))
    }
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
            Backend::Etcd(_) => "etcd",
        }
    }

    /// Checks a lock name and options as [`crate::Input::Acquire`] would, without a
    /// machine: hosts call it to report bad options when a lock object is built.
    ///
    /// Errors: [`crate::UsageError::InvalidName`] (empty or over 1024 bytes),
    /// [`crate::UsageError::InvalidOption`], [`crate::UsageError::UnsafePurpose`].
    pub fn check_acquire(
        &self,
        name: &str,
        options: &crate::LockOptions,
    ) -> Result<(), crate::UsageError> {
        if name.is_empty() || name.len() > 1024 {
            return Err(crate::UsageError::InvalidName { len: name.len() });
        }
        options.validate(self.name(), self.tokens_may_regress())
    }

    /// Whether fencing tokens can go backwards on failover (DESIGN.md rule 8).
    pub fn tokens_may_regress(&self) -> bool {
        match self {
            Backend::Redis(_) => true,
            // Lease rows and token rows are durable, transactional state; etcd
            // revisions are Raft-replicated and only grow.
            Backend::Postgres(_) | Backend::Etcd(_) => false,
        }
    }

    /// The next acquire request of `owner`. `retry_max_ms` sizes how long a fair Redis
    /// waiter stays queued without asking again; etcd phrases the next step of its
    /// recipe from `progress` (and needs the renew interval and `now` to know when its
    /// lease's keep-alive is due).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn acquire(
        &self,
        name: &str,
        owner: &OwnerId,
        ttl_ms: u64,
        retry_max_ms: u64,
        progress: &mut Progress,
        renew_interval: Duration,
        now: Instant,
    ) -> RequestBody {
        match self {
            Backend::Redis(b) => RequestBody::Redis(b.acquire(name, owner, ttl_ms, retry_max_ms)),
            Backend::Postgres(b) => RequestBody::Sql(b.acquire(name, owner, ttl_ms)),
            Backend::Etcd(b) => RequestBody::Etcd(b.acquire(
                name,
                progress.etcd(owner),
                ttl_ms,
                renew_interval,
                now,
            )),
        }
    }

    pub(crate) fn renew(&self, name: &str, owner: &OwnerId, ttl_ms: u64) -> RequestBody {
        match self {
            Backend::Redis(b) => RequestBody::Redis(b.renew(name, owner, ttl_ms)),
            Backend::Postgres(b) => RequestBody::Sql(b.renew(name, owner, ttl_ms)),
            Backend::Etcd(b) => RequestBody::Etcd(b.renew(owner)),
        }
    }

    /// The user's release (`was_held`) or cancellation of `owner`. `claim_ms` is how
    /// long a fair Redis release reserves the lock for the woken waiter; etcd deletes
    /// the held key by its create revision, or revokes the lease when cancelling.
    pub(crate) fn release(
        &self,
        name: &str,
        owner: &OwnerId,
        claim_ms: u64,
        progress: &mut Progress,
        was_held: bool,
    ) -> RequestBody {
        match self {
            Backend::Redis(b) => RequestBody::Redis(b.release(name, owner, claim_ms)),
            Backend::Postgres(b) => RequestBody::Sql(b.release(name, owner)),
            Backend::Etcd(b) => {
                let token = if was_held {
                    progress.etcd(owner).key_rev()
                } else {
                    None
                };
                RequestBody::Etcd(b.release(name, owner, token))
            }
        }
    }

    /// Frees whatever the server may hold for `owner`, an owner id this machine gave
    /// up on (or, on etcd, after a release: the lease itself).
    pub(crate) fn cleanup(&self, name: &str, owner: &OwnerId, claim_ms: u64) -> RequestBody {
        match self {
            Backend::Redis(b) => RequestBody::Redis(b.release(name, owner, claim_ms)),
            Backend::Postgres(b) => RequestBody::Sql(b.release(name, owner)),
            Backend::Etcd(b) => RequestBody::Etcd(b.revoke(owner)),
        }
    }

    /// Whether a release is followed by a cleanup of its owner (etcd revokes the lease
    /// after deleting the key).
    pub(crate) fn cleanup_after_release(&self) -> bool {
        matches!(self, Backend::Etcd(_))
    }

    /// Whether the lock lives and dies with one connection (PostgreSQL session-level
    /// advisory locks): a failed renewal (heartbeat) is then a loss, not a retry.
    pub(crate) fn connection_bound(&self) -> bool {
        matches!(self, Backend::Postgres(b) if b.mode == PgMode::Session)
    }

    /// Whether contended acquirers are queued on the server and woken by releases.
    pub(crate) fn notifies_waiters(&self) -> bool {
        match self {
            Backend::Redis(b) => b.fair,
            Backend::Etcd(_) => true,
            Backend::Postgres(_) => false,
        }
    }

    /// When a parked waiter must stop waiting regardless of its backoff: etcd keeps
    /// the waiter's lease alive, so the watch ends when the next keep-alive is due.
    pub(crate) fn park_until(
        &self,
        owner: &OwnerId,
        progress: &mut Progress,
        renew_interval: Duration,
    ) -> Option<Instant> {
        match self {
            Backend::Etcd(_) => progress.etcd(owner).keepalive_due(renew_interval),
            _ => None,
        }
    }

    /// The blocking wait of a contended acquirer, when the backend notifies waiters.
    pub(crate) fn wait(
        &self,
        name: &str,
        owner: &OwnerId,
        timeout_ms: u64,
        progress: &mut Progress,
    ) -> Option<RequestBody> {
        match self {
            Backend::Redis(b) => b.wait(name, owner, timeout_ms).map(RequestBody::RedisBlpop),
            Backend::Etcd(b) => b
                .wait(progress.etcd(owner), timeout_ms)
                .map(RequestBody::Etcd),
            Backend::Postgres(_) => None,
        }
    }

    /// Whether a wait's reply can carry a grant (fair Redis: the release grants the
    /// lock to the first waiter and pushes its token to that waiter's wake list).
    pub(crate) fn grants_in_wait(&self) -> bool {
        matches!(self, Backend::Redis(b) if b.fair)
    }

    /// Reads a wait's reply: `Some(token)` when it is a grant (a fair Redis release
    /// hands the lock to the first waiter), `None` for "try now".
    pub(crate) fn read_wait(&self, reply: &Reply) -> Result<Option<FencingToken>, ReplyError> {
        match (self, reply) {
            (Backend::Redis(_), Reply::Redis(v)) => redis::read_wait(v),
            (Backend::Etcd(_), Reply::Etcd(v)) => etcd::read_wait(v).map(|()| None),
            (b, r) => Err(wrong_reply(b, r)),
        }
    }

    /// Reads an acquire reply, advancing `progress` (etcd). A grant comes with its
    /// validity base when that is not the request's send (etcd: the lease's last
    /// confirmed grant or keep-alive).
    pub(crate) fn read_acquire(
        &self,
        name: &str,
        owner: &OwnerId,
        reply: &Reply,
        progress: &mut Progress,
        sent_at: Instant,
    ) -> Result<(AcquireOutcome, Option<Instant>), ReplyError> {
        match (self, reply) {
            (Backend::Redis(_), Reply::Redis(v)) => redis::read_acquire(v).map(|o| (o, None)),
            (Backend::Postgres(_), Reply::Sql(v)) => postgres::read_acquire(v).map(|o| (o, None)),
            (Backend::Etcd(b), Reply::Etcd(v)) => {
                b.read_acquire(name, progress.etcd(owner), sent_at, v)
            }
            (b, r) => Err(wrong_reply(b, r)),
        }
    }

    /// For a late acquire reply: might the server hold the lock (or a queue place)
    /// for its owner id?
    pub(crate) fn late_acquire_may_hold(&self, reply: &Reply) -> bool {
        match (self, reply) {
            (Backend::Redis(_), Reply::Redis(v)) => {
                !matches!(redis::read_acquire(v), Ok(AcquireOutcome::Contended { .. }))
            }
            (Backend::Postgres(_), Reply::Sql(v)) => !matches!(
                postgres::read_acquire(v),
                Ok(AcquireOutcome::Contended { .. })
            ),
            // a lease or a queued key, which blocks those behind it until its TTL
            (Backend::Etcd(_), Reply::Etcd(v)) => etcd::may_hold(v),
            _ => true,
        }
    }

    pub(crate) fn read_owner_check(&self, reply: &Reply) -> Result<OwnerCheck, ReplyError> {
        match (self, reply) {
            (Backend::Redis(_), Reply::Redis(v)) => redis::read_owner_check(v),
            (Backend::Postgres(_), Reply::Sql(v)) => postgres::read_owner_check(v),
            (Backend::Etcd(_), Reply::Etcd(v)) => etcd::read_owner_check(v),
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
