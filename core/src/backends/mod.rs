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

// ---- the recipe seam ----------------------------------------------------------------
//
// The lock (`lock.rs`) decides *when*: validity, renew schedule, backoff, deadlines,
// loss, cleanup. A backend's recipe decides *how*: it phrases each [`Step`] as request
// bodies and reads each reply into a [`Read`]. `Backend` dispatches to the recipe of
// each server kind; nothing outside this module matches on it.

/// What the lock asks a recipe to phrase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The next step of an acquire attempt (one request for most servers; etcd's
    /// recipe walks lease, key and predecessor steps, asking for [`Read::Continue`]).
    Acquire,
    /// Extend the held lease, only if this owner still holds it.
    Renew,
    /// End the acquisition: of a held lease, or cancelling one not (known to be)
    /// granted. May take several steps (etcd: delete the key, then revoke the lease).
    Release(Ending),
    /// Free whatever the server may hold for an owner id the lock gave up on.
    Cleanup,
    /// Block until the server wakes this queued waiter, or `timeout_ms` passes.
    Wait { timeout_ms: u64 },
}

/// What a release ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ending {
    /// A lease that was granted: finding it gone on the server is a loss.
    Held,
    /// An acquisition not granted yet (or whose grant is unknown): whatever the server
    /// holds for the owner id is freed, and nothing is lost.
    Cancel,
}

impl Step {
    /// The operation the host sees on the request.
    pub(crate) fn operation(self) -> Operation {
        match self {
            Step::Acquire => Operation::Acquire,
            Step::Renew => Operation::Renew,
            Step::Release(_) | Step::Cleanup => Operation::Release,
            Step::Wait { .. } => Operation::Wait,
        }
    }
}

/// What a recipe may read when phrasing or reading a step.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StepCx<'a> {
    pub name: &'a str,
    /// The owner id the step is for (a cleanup's can differ from the lock's current).
    pub owner: &'a OwnerId,
    /// The lease length the server enforces, whole milliseconds rounded up.
    pub ttl_ms: u64,
    /// How long a queued waiter may go without asking again (fair Redis sizes its
    /// queue presence and a release's hand-off window from it).
    pub retry_max_ms: u64,
    /// The lock's decision that the session carrying this contender's queue place
    /// (etcd: its lease) needs renewing in this acquire step (see
    /// [`Backend::session_since`]).
    pub renew_session: bool,
    /// When the request being read was sent.
    pub sent_at: Instant,
    /// Which request of a fanned-out step a reply answers, from 0.
    #[allow(dead_code)] // read by the first quorum recipe (Redlock)
    pub part: u16,
}

/// A step as requests: one, several at once (a quorum recipe sends one per server
/// and reads their replies into one outcome, answering [`Read::Pending`] until it can
/// decide), or none (a wait with nothing to wait on).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Phrased {
    One(RequestBody),
    #[allow(dead_code)] // built by the first quorum recipe (Redlock)
    FanOut(Vec<RequestBody>),
    Nothing,
}

impl Phrased {
    pub(crate) fn is_nothing(&self) -> bool {
        match self {
            Phrased::Nothing => true,
            Phrased::FanOut(bodies) => bodies.is_empty(),
            Phrased::One(_) => false,
        }
    }
}

/// A reply read into what the lock acts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Read {
    /// This owner holds the lock with `token`. Validity runs from `base` when the
    /// recipe knows an earlier one (etcd: its lease's last confirmed grant or
    /// keep-alive), else from the send of the request that brought the grant.
    Granted {
        token: FencingToken,
        base: Option<Instant>,
    },
    /// The step succeeded and the operation has another: phrase and send it now.
    Continue,
    /// Another owner holds the lock; it expires in about `remaining` if not renewed.
    /// `queued`: this owner now holds a place in a server-side queue, which giving up
    /// must free.
    Contended {
        remaining: Option<Duration>,
        queued: bool,
    },
    /// A renew or release took effect; a wait ended without a grant (try now).
    Done,
    /// The server does not hold the lease for this owner (a renewal rejected, a
    /// release that found it gone); nothing was changed.
    NotHeld,
    /// A step fanned out to several servers still awaits replies to decide.
    Pending,
}

/// A reply that is not an outcome: the request may or may not have taken effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReadError {
    /// A transport failure, or a server error that retrying may fix (loading,
    /// failover in progress, busy).
    Ambiguous(String),
    /// A reply retrying will not fix.
    Protocol(ProtocolError),
}

/// How a contender that found the lock held waits for its next attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Waiting {
    /// Nothing on the server wakes it: the next attempt follows the acquire backoff.
    Poll,
    /// The releasing holder hands the lock to the first queued waiter and wakes it;
    /// the wait's reply carries the grant and its timeout is only the fallback.
    Handoff,
    /// The server notifies the waiter when its turn may have come (a watch on its
    /// predecessor); the wait lasts the backoff, or until its session needs renewing.
    Notify,
}

/// What is known after a release could not be confirmed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Unconfirmed {
    /// Send a cleanup: the server may keep state only the cleanup frees (etcd: the
    /// lease, when the key's delete was never confirmed).
    pub cleanup: bool,
    /// What an earlier step of the release found, if it got that far.
    pub found: Option<Read>,
}

/// One lock's progress through a multi-step recipe, for its current owner id.
/// Single-request recipes keep none.
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

    /// How a contender waits after finding the lock held.
    pub(crate) fn waiting(&self) -> Waiting {
        match self {
            Backend::Redis(b) if b.fair => Waiting::Handoff,
            Backend::Etcd(_) => Waiting::Notify,
            Backend::Redis(_) | Backend::Postgres(_) => Waiting::Poll,
        }
    }

    /// For recipes whose contenders hold a session while queued (etcd: the lease their
    /// key is attached to): the send of its last confirmed grant or renewal. The lock
    /// schedules the session's renewal from it (a renew interval later) and asks for it
    /// with [`StepCx::renew_session`].
    pub(crate) fn session_since(
        &self,
        owner: &OwnerId,
        progress: &mut Progress,
    ) -> Option<Instant> {
        match self {
            Backend::Etcd(_) => progress.etcd(owner).lease_base(),
            Backend::Redis(_) | Backend::Postgres(_) => None,
        }
    }

    /// Phrases `step`. Only a wait may be [`Phrased::Nothing`] (a backend that wakes
    /// nobody, or nothing known to wait on).
    pub(crate) fn phrase(&self, step: Step, cx: &StepCx<'_>, progress: &mut Progress) -> Phrased {
        let (name, owner) = (cx.name, cx.owner);
        let body = match (self, step) {
            (Backend::Redis(b), Step::Acquire) => {
                RequestBody::Redis(b.acquire(name, owner, cx.ttl_ms, cx.retry_max_ms))
            }
            (Backend::Redis(b), Step::Renew) => RequestBody::Redis(b.renew(name, owner, cx.ttl_ms)),
            // a fair release hands the lock to the first live waiter for one park
            (Backend::Redis(b), Step::Release(_) | Step::Cleanup) => {
                RequestBody::Redis(b.release(name, owner, cx.retry_max_ms))
            }
            (Backend::Redis(b), Step::Wait { timeout_ms }) => match b.wait(name, owner, timeout_ms)
            {
                Some(blpop) => RequestBody::RedisBlpop(blpop),
                None => return Phrased::Nothing,
            },
            (Backend::Postgres(b), Step::Acquire) => {
                RequestBody::Sql(b.acquire(name, owner, cx.ttl_ms))
            }
            (Backend::Postgres(b), Step::Renew) => {
                RequestBody::Sql(b.renew(name, owner, cx.ttl_ms))
            }
            (Backend::Postgres(b), Step::Release(_) | Step::Cleanup) => {
                RequestBody::Sql(b.release(name, owner))
            }
            (Backend::Postgres(_), Step::Wait { .. }) => return Phrased::Nothing,
            (Backend::Etcd(b), Step::Acquire) => RequestBody::Etcd(b.acquire(
                name,
                progress.etcd(owner),
                cx.ttl_ms,
                cx.renew_session,
            )),
            (Backend::Etcd(b), Step::Renew) => RequestBody::Etcd(b.renew(owner)),
            (Backend::Etcd(b), Step::Release(ending)) => {
                RequestBody::Etcd(b.release(name, progress.etcd(owner), ending))
            }
            (Backend::Etcd(b), Step::Cleanup) => RequestBody::Etcd(b.revoke(owner)),
            (Backend::Etcd(b), Step::Wait { timeout_ms }) => {
                match b.wait(progress.etcd(owner), timeout_ms) {
                    Some(watch) => RequestBody::Etcd(watch),
                    None => return Phrased::Nothing,
                }
            }
        };
        Phrased::One(body)
    }

    /// Reads the reply to `step` (`Err` with the message for a transport failure),
    /// advancing `progress`.
    pub(crate) fn read(
        &self,
        step: Step,
        cx: &StepCx<'_>,
        progress: &mut Progress,
        reply: Result<&Reply, &str>,
    ) -> Result<Read, ReadError> {
        let reply = match reply {
            Ok(reply) => reply,
            // A connection-bound lock (PostgreSQL session mode) lives and dies with its
            // connection: a failed heartbeat means the session, and the lock, is gone.
            Err(_) if step == Step::Renew && self.connection_bound() => return Ok(Read::NotHeld),
            Err(message) => return Err(ReadError::Ambiguous(message.to_owned())),
        };
        match (self, reply) {
            (Backend::Redis(b), Reply::Redis(v)) => match step {
                // a fair contender is queued by its acquire
                Step::Acquire => redis::read_acquire(v).map(|read| match read {
                    Read::Contended { remaining, .. } => Read::Contended {
                        remaining,
                        queued: b.fair,
                    },
                    other => other,
                }),
                Step::Wait { .. } => redis::read_wait(v),
                Step::Renew | Step::Release(_) | Step::Cleanup => redis::read_owner_check(v),
            },
            (Backend::Postgres(_), Reply::Sql(v)) => match step {
                Step::Acquire => postgres::read_acquire(v),
                Step::Wait { .. } => Ok(Read::Done),
                Step::Renew => match postgres::read_owner_check(v) {
                    Err(_) if self.connection_bound() => Ok(Read::NotHeld),
                    other => other,
                },
                Step::Release(_) | Step::Cleanup => postgres::read_owner_check(v),
            },
            (Backend::Etcd(b), Reply::Etcd(v)) => match step {
                Step::Acquire => b.read_acquire(cx.name, progress.etcd(cx.owner), cx.sent_at, v),
                Step::Wait { .. } => etcd::read_wait(v),
                Step::Release(_) => etcd::read_release(progress.etcd(cx.owner), v),
                Step::Renew | Step::Cleanup => etcd::read_owner_check(v),
            },
            (b, r) => Err(wrong_reply(b, r)),
        }
    }

    /// For a reply the lock no longer waits for (`Err`: its transport failed): might
    /// the server hold the lock, or a queue place, for its owner id? Only what the
    /// reply itself shows counts; the lock decides what to do about it.
    pub(crate) fn late_may_hold(&self, step: Step, reply: Result<&Reply, &str>) -> bool {
        match (step.operation(), reply) {
            (Operation::Release, _) => false,
            // a wake-up may carry a grant (fair Redis); a lost one might have
            (Operation::Wait, Ok(r)) => matches!(
                self.read(
                    Step::Wait { timeout_ms: 0 },
                    &LATE_CX,
                    &mut Progress::default(),
                    Ok(r)
                ),
                Ok(Read::Granted { .. })
            ),
            (Operation::Wait, Err(_)) => self.waiting() == Waiting::Handoff,
            (_, Err(_)) => true,
            (Operation::Acquire, Ok(r)) => match (self, r) {
                (Backend::Redis(_), Reply::Redis(v)) => {
                    !matches!(redis::read_acquire(v), Ok(Read::Contended { .. }))
                }
                (Backend::Postgres(_), Reply::Sql(v)) => {
                    !matches!(postgres::read_acquire(v), Ok(Read::Contended { .. }))
                }
                // a lease or a queued key, which blocks those behind it until its TTL
                (Backend::Etcd(_), Reply::Etcd(v)) => etcd::may_hold(v),
                _ => true,
            },
            (Operation::Renew, Ok(r)) => {
                let check = match (self, r) {
                    (Backend::Redis(_), Reply::Redis(v)) => redis::read_owner_check(v),
                    (Backend::Postgres(_), Reply::Sql(v)) => postgres::read_owner_check(v),
                    (Backend::Etcd(_), Reply::Etcd(v)) => etcd::read_owner_check(v),
                    (b, r) => Err(wrong_reply(b, r)),
                };
                !matches!(check, Ok(Read::NotHeld))
            }
        }
    }

    /// What is known when a release of `owner` is given up unconfirmed.
    pub(crate) fn unconfirmed_release(
        &self,
        ending: Ending,
        owner: &OwnerId,
        progress: &mut Progress,
    ) -> Unconfirmed {
        match self {
            Backend::Etcd(_) => {
                let found = progress.etcd(owner).release_found();
                Unconfirmed {
                    // the key's fate is unknown: revoking the lease frees it
                    cleanup: ending == Ending::Held && found.is_none(),
                    found,
                }
            }
            Backend::Redis(_) | Backend::Postgres(_) => Unconfirmed {
                cleanup: false,
                found: None,
            },
        }
    }

    /// Whether the lock lives and dies with one connection (PostgreSQL session-level
    /// advisory locks): a failed renewal (heartbeat) is then a loss, not a retry.
    fn connection_bound(&self) -> bool {
        matches!(self, Backend::Postgres(b) if b.mode == PgMode::Session)
    }
}

/// The context of reads that need none (late replies of single-request steps).
const LATE_CX: StepCx<'static> = StepCx {
    name: "",
    owner: &OwnerId([0; 16]),
    ttl_ms: 0,
    retry_max_ms: 0,
    renew_session: false,
    sent_at: Instant::ZERO,
    part: 0,
};

/// A reply of another backend's kind: the host's adapter is miswired.
fn wrong_reply(backend: &Backend, reply: &Reply) -> ReadError {
    ReadError::Protocol(ProtocolError {
        backend: backend.name().to_owned(),
        message: format!("got a reply for another backend: {reply:?}"),
    })
}
