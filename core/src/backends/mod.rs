//! Backends: how to phrase each request for one kind of lock server and how to read
//! its reply. A backend never decides *when* to send or whether a lease is valid.

pub mod etcd;
#[cfg(feature = "kubernetes")]
pub mod kubernetes;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod redis;
pub mod redlock;
#[cfg(feature = "zookeeper")]
pub mod zookeeper;

use core::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ProtocolError;
use crate::{FencingToken, Instant, OwnerId};

pub use etcd::{EtcdBackend, EtcdRequest};

#[cfg(feature = "kubernetes")]
pub use kubernetes::{
    read_kube_inspect, read_kube_list, KubeRequest, KubernetesBackend, KUBE_LIST_PAGE,
    KUBE_LIST_PAGES, KUBE_METADATA_ANNOTATION,
};
#[cfg(feature = "postgres")]
pub use postgres::{PgConnection, PgMode, PostgresBackend, SqlReply, SqlStatement, SqlValue};
pub use redis::{
    read_redis_inspect, read_redis_list, redis_cluster_slot, RedisBackend, RedisBlpop,
    RedisCommand, RedisScript, RedisValue, RedisWait, REDIS_LIST_STEPS, REDIS_SCAN_COUNT,
    RENEW_BATCH_LIMIT,
};
pub use redlock::{RedlockBackend, RedlockPart};
#[cfg(feature = "zookeeper")]
pub use zookeeper::{
    read_zk_contenders, read_zk_holder, read_zk_list, ZkHolderNode, ZkNaming, ZkRequest,
    ZooKeeperBackend, ZK_INSPECT_TRIES,
};

/// Checks a lock name: 1 to 1024 bytes of UTF-8 with no NUL (PostgreSQL `text` cannot
/// hold one, and a name must mean one lock on every backend).
///
/// Errors: [`crate::UsageError::InvalidName`].
pub fn check_lock_name(name: &str) -> Result<(), crate::UsageError> {
    let nul = name.contains('\0');
    if name.is_empty() || name.len() > 1024 || nul {
        return Err(crate::UsageError::InvalidName {
            len: name.len(),
            nul,
        });
    }
    Ok(())
}

/// Which server the machine talks to, with that backend's settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Backend {
    /// A single Redis (or Redis-compatible) server.
    Redis(RedisBackend),
    /// PostgreSQL: lease rows or session-level advisory locks.
    #[cfg(feature = "postgres")]
    Postgres(PostgresBackend),
    /// etcd v3: leases, one key per contender, create revisions as tokens.
    Etcd(EtcdBackend),
    /// Redlock: N independent Redis masters (N odd, at least 3), granted by a majority;
    /// an efficiency lock only ([`redlock`]).
    Redlock(RedlockBackend),
    /// ZooKeeper: ephemeral sequential nodes, the session as the lease, czxids as tokens.
    #[cfg(feature = "zookeeper")]
    #[serde(rename = "zookeeper")]
    ZooKeeper(ZooKeeperBackend),
    /// Kubernetes: a `coordination.k8s.io/v1` Lease per lock, compare-and-set on its
    /// `resourceVersion`, `leaseTransitions` as tokens ([`kubernetes`]).
    #[cfg(feature = "kubernetes")]
    Kubernetes(KubernetesBackend),
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
    #[cfg(feature = "postgres")]
    Sql(SqlStatement),
    /// Block on a Redis list (`BLPOP`) until a release wakes this waiter or the
    /// timeout passes (fair hand-off).
    RedisBlpop(RedisBlpop),
    /// An etcd v3 call (JSON gateway or gRPC); a `Watch` is a blocking wait.
    Etcd(EtcdRequest),
    /// A Redis script call on one master of a Redlock (`EVALSHA`, falling back to
    /// `EVAL` on `NOSCRIPT`, as [`RequestBody::Redis`]).
    RedlockPart(RedlockPart),
    /// A ZooKeeper call; a `Watch` is a blocking wait.
    #[cfg(feature = "zookeeper")]
    #[serde(rename = "zookeeper")]
    ZooKeeper(ZkRequest),
    /// A call to the Kubernetes API server ([`KubeRequest`]).
    #[cfg(feature = "kubernetes")]
    Kubernetes(KubeRequest),
}

impl RequestBody {
    /// The body's name, as serde spells its `backend` tag: `"redis"`, `"sql"`,
    /// `"redis_blpop"`, `"etcd"`, `"redlock_part"`, `"zookeeper"` or `"kubernetes"`.
    pub fn kind(&self) -> &'static str {
        match self {
            RequestBody::Redis(_) => "redis",
            #[cfg(feature = "postgres")]
            RequestBody::Sql(_) => "sql",
            RequestBody::RedisBlpop(_) => "redis_blpop",
            RequestBody::Etcd(_) => "etcd",
            RequestBody::RedlockPart(_) => "redlock_part",
            #[cfg(feature = "zookeeper")]
            RequestBody::ZooKeeper(_) => "zookeeper",
            #[cfg(feature = "kubernetes")]
            RequestBody::Kubernetes(_) => "kubernetes",
        }
    }
}

/// Who holds a lock, as an operator query found it on the server
/// (`RedisBackend::inspect`, `RedisBackend::list_step`, [`postgres::inspect_statement`],
/// [`postgres::list_statement`], [`etcd::read_etcd_inspect`]; ZooKeeper's
/// `read_zk_holder`; Kubernetes' `read_kube_inspect`, `read_kube_list`). Reads only: no
/// lock decision is taken from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// The lock name.
    pub name: String,
    /// The holder's owner id (32 hex digits), when the server stores it (Redis,
    /// PostgreSQL, ZooKeeper nodes fencepost made; etcd keys name the lease instead,
    /// given here as `lease:<hex>`).
    pub owner: Option<String>,
    /// The holder's fencing token, when the server knows it.
    pub token: Option<crate::FencingToken>,
    /// Time left on the holder's lease as the server counts it (`PTTL`, the row's
    /// expiry, the lease's TTL); on Kubernetes the record's `leaseDurationSeconds`, an
    /// upper bound (the last renewal cannot be dated without comparing wall clocks);
    /// `None` when unknown (ZooKeeper: the session, not the node, has a deadline, and
    /// the server does not tell it).
    pub ttl_left: Option<core::time::Duration>,
    /// Contenders queued behind the holder, where the server keeps a queue (fair Redis:
    /// its queue; etcd: the other keys under the lock's prefix; ZooKeeper: the other
    /// contender nodes); `None` where it does not (Redis polling waiters and PostgreSQL
    /// lease rows leave no trace until they win).
    pub waiters: Option<u64>,
    /// The metadata the holder acquired with ([`crate::LockOptions::metadata`]);
    /// `None` when it gave none.
    pub metadata: Option<std::collections::BTreeMap<String, String>>,
}

impl Holder {
    /// A holder of `name` with nothing known yet, for adapters that fill in fields.
    pub fn new(name: String) -> Self {
        Holder {
            name,
            owner: None,
            token: None,
            ttl_left: None,
            waiters: None,
            metadata: None,
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
    #[cfg(feature = "postgres")]
    Sql(SqlReply),
    /// An etcd reply: the JSON document the v3 JSON gateway returned (or a gRPC
    /// response in the proto3 JSON mapping), error documents included.
    Etcd(String),
    /// A ZooKeeper reply: the JSON document the adapter wrote for the call (see
    /// [`ZkRequest`]), error documents included.
    #[cfg(feature = "zookeeper")]
    #[serde(rename = "zookeeper")]
    ZooKeeper(String),
    /// A Kubernetes reply: the response body the API server sent (a Lease, or a
    /// `Status` document for an error), whatever its HTTP status.
    #[cfg(feature = "kubernetes")]
    Kubernetes(String),
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
    /// [`Recipe::session_since`]).
    pub renew_session: bool,
    /// When the request being read was sent.
    pub sent_at: Instant,
    /// The host's time of the input being handled (a reply's arrival when reading).
    pub now: Instant,
    /// The lowest token a grant may carry ([`crate::LockOptions::token_floor`]).
    pub token_floor: Option<FencingToken>,
    /// Replicas that must confirm a grant or renewal (0: none) and how long their `WAIT`
    /// may block ([`crate::LockOptions::min_replicas`]).
    pub min_replicas: u32,
    pub replica_timeout_ms: u64,
    /// Which request of a fanned-out step a reply answers, from 0.
    pub part: u16,
    /// The holder metadata to store with a grant ([`crate::LockOptions::metadata`]).
    pub metadata: Option<&'a str>,
    /// The declared bound on clock rate error ([`crate::LockOptions::drift_factor`],
    /// validated to `[0, 0.5)`): a recipe that judges expiry on this host's clock
    /// (Kubernetes) waits that much longer.
    #[cfg_attr(not(feature = "kubernetes"), allow(dead_code))]
    pub drift_factor: f64,
}

/// A step as requests: one, several at once (a quorum recipe sends one per server
/// and reads their replies into one outcome, answering [`Read::Pending`] until it can
/// decide), or none (a wait with nothing to wait on).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Phrased {
    One(RequestBody),
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

/// What a recipe keeps across the locks of one machine, beside each lock's
/// [`Progress`]: etcd's shared session leases ([`EtcdBackend::shared_lease`]). Every
/// other recipe keeps nothing here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Shared {
    pub(crate) etcd: etcd::EtcdSessions,
}

/// A reply read into what the lock acts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Read {
    /// This owner holds the lock with `token`. Validity runs from `base` when the
    /// recipe knows an earlier one (etcd: its lease's last confirmed grant or
    /// keep-alive), else from the send of the request that brought the grant.
    /// `previous`: how the previous holder ended, if the reply tells.
    Granted {
        token: FencingToken,
        base: Option<Instant>,
        previous: crate::Previous,
    },
    /// The step succeeded and the operation has another: phrase and send it now.
    Continue,
    /// Another owner holds the lock; it expires in about `remaining` if not renewed.
    /// `queued`: this owner now holds a place in a server-side queue, which giving up
    /// must free. `holder`: a mark of the current grant that changes whenever the lock
    /// changes hands (Redis: the token counter), where the backend reports one; it
    /// tells a lock passed among many holders from one held long.
    Contended {
        remaining: Option<Duration>,
        queued: bool,
        holder: Option<u64>,
    },
    /// A renew or release took effect; a wait ended without a grant (try now).
    Done,
    /// The server does not hold the lease for this owner (a renewal rejected, a
    /// release that found it gone); nothing was changed.
    NotHeld,
    /// A step fanned out to several servers still awaits replies to decide.
    Pending,
    /// A quorum step failed: a majority can no longer grant (acquire) or confirm
    /// (renew). A minority may hold the lock for this owner id, so the lock releases
    /// it on every server (a cleanup) before anything else: an acquire retries under a
    /// fresh owner id, a renewal is lost at once. `remaining`: the earliest a refusing
    /// server frees the lock, if known; `error`: what failed, for `last_error`;
    /// `refused`: whether any server refused (none did when the others failed, an
    /// outage rather than contention); `holder`: a mark of the owner the refusing
    /// servers all named, as `Contended::holder`, when they agree.
    NoQuorum {
        remaining: Option<Duration>,
        error: Option<String>,
        refused: bool,
        holder: Option<u64>,
    },
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

/// One lock's progress through a multi-step recipe, for its current owner id: a slot
/// per recipe that keeps any, which only that recipe reads. Single-request recipes
/// keep none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Progress {
    /// Boxed: ~130 bytes that every Redis or PostgreSQL lease would carry otherwise.
    pub(crate) etcd: Option<Box<etcd::EtcdProgress>>,
    /// The open tallies of a Redlock lock's fanned-out steps.
    pub(crate) redlock: Option<Box<redlock::RedlockProgress>>,
    #[cfg(feature = "zookeeper")]
    pub(crate) zookeeper: Option<Box<zookeeper::ZkProgress>>,
    #[cfg(feature = "kubernetes")]
    pub(crate) kubernetes: Option<Box<kubernetes::KubeProgress>>,
}

/// The group of renewals one request may carry together ([`Recipe::renew_batch_key`]):
/// renewals phrased alike (Redis: the same replica confirmation and, on Cluster, the same
/// hash slot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct BatchKey(pub u64, pub u64);

/// A backend's recipe: how each step is phrased and how its replies read. It never
/// decides *when* to send, or whether a lease is valid: that is `lock.rs`'s.
pub(crate) trait Recipe {
    /// How many renewals one request may carry; 1 (the default): each goes alone. Above
    /// 1 the machine merges the renewals sent by one input whose bodies share a
    /// [`Recipe::renew_batch_key`], and held leases due soon renew early to join them.
    fn renew_batch_limit(&self) -> usize {
        1
    }

    /// The group a renewal's body belongs to, or `None` when it goes alone.
    fn renew_batch_key(&self, _body: &RequestBody) -> Option<BatchKey> {
        None
    }

    /// One request carrying `bodies` (renewals of one group, at least two, in order), or
    /// `None` when they cannot go together after all.
    fn phrase_renew_batch(&self, _bodies: &[&RequestBody]) -> Option<RequestBody> {
        None
    }

    /// The reply to a batched renewal of `n` leases as each one's own reply, in order;
    /// `None` when it is not split (an error reply, a malformed one): each renewal then
    /// reads it whole, as if it had been its own.
    fn split_renew_batch(&self, _reply: &Reply, _n: usize) -> Option<Vec<Reply>> {
        None
    }

    /// How a contender waits after finding the lock held.
    fn waiting(&self) -> Waiting {
        Waiting::Poll
    }

    /// For recipes whose contenders hold a session while queued (a lease their key is
    /// attached to): the send of its last confirmed grant or renewal. The lock
    /// schedules the session's renewal from it (a renew interval later) and asks for it
    /// with [`StepCx::renew_session`].
    fn session_since(&self, _owner: &OwnerId, _progress: &mut Progress) -> Option<Instant> {
        None
    }

    /// Phrases `step`. Only a wait may be [`Phrased::Nothing`] (a backend that wakes
    /// nobody, or nothing known to wait on).
    fn phrase(
        &self,
        step: Step,
        cx: &StepCx<'_>,
        progress: &mut Progress,
        shared: &mut Shared,
    ) -> Phrased;

    /// Reads the reply to `step` (`Err`: its transport failed, with the message),
    /// advancing `progress`. A transport failure is [`ReadError::Ambiguous`] unless the
    /// recipe knows better (a lock bound to its connection is gone with it; a quorum
    /// recipe counts it as one part and may still answer [`Read::Pending`]).
    fn read(
        &self,
        step: Step,
        cx: &StepCx<'_>,
        progress: &mut Progress,
        shared: &mut Shared,
        reply: Result<&Reply, &str>,
    ) -> Result<Read, ReadError>;

    /// For a reply the lock no longer waits for (`Err`: its transport failed): might
    /// the server hold the lock, or a queue place, for its owner id? Only what the
    /// reply itself shows counts; the lock decides what to do about it. The default
    /// reads the reply alone; a recipe whose replies need their step's progress (a
    /// quorum recipe's parts) overrides it.
    fn late_may_hold(&self, step: Step, reply: Result<&Reply, &str>) -> bool {
        let (mut scratch, mut shared) = (Progress::default(), Shared::default());
        let mut read = |step, r| self.read(step, &LATE_CX, &mut scratch, &mut shared, Ok(r));
        match (step.operation(), reply) {
            (Operation::Release, _) => false,
            // a wake-up may carry a grant; a lost one might have
            (Operation::Wait, Ok(r)) => matches!(read(step, r), Ok(Read::Granted { .. })),
            (Operation::Wait, Err(_)) => self.waiting() == Waiting::Handoff,
            (_, Err(_)) => true,
            (Operation::Acquire, Ok(r)) => {
                !matches!(read(Step::Acquire, r), Ok(Read::Contended { .. }))
            }
            (Operation::Renew, Ok(r)) => !matches!(read(Step::Renew, r), Ok(Read::NotHeld)),
        }
    }

    /// What is known when a release of `owner` is given up unconfirmed.
    fn unconfirmed_release(
        &self,
        _ending: Ending,
        _owner: &OwnerId,
        _progress: &mut Progress,
    ) -> Unconfirmed {
        Unconfirmed {
            cleanup: false,
            found: None,
        }
    }
}

/// The context of late reads, which need none (single-request replies read alone).
pub(crate) const LATE_CX: StepCx<'static> = StepCx {
    name: "",
    owner: &OwnerId([0; 16]),
    ttl_ms: 0,
    retry_max_ms: 0,
    renew_session: false,
    sent_at: Instant::ZERO,
    now: Instant::ZERO,
    token_floor: None,
    min_replicas: 0,
    replica_timeout_ms: 0,
    part: 0,
    metadata: None,
    drift_factor: 0.0,
};

impl Backend {
    /// The name used in errors and docs.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Redis(_) => "redis",
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => "postgres",
            Backend::Etcd(_) => "etcd",
            Backend::Redlock(_) => "redlock",
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(_) => "zookeeper",
            #[cfg(feature = "kubernetes")]
            Backend::Kubernetes(_) => "kubernetes",
        }
    }

    /// Checks a lock name and options as [`crate::Input::Acquire`] would, without a
    /// machine: hosts call it to report bad options when a lock object is built.
    ///
    /// Errors: [`crate::UsageError::InvalidName`] (empty, over 1024 bytes, or with a NUL
    /// character), [`crate::UsageError::InvalidOption`] (also for a Redlock's `masters`, see
    /// [`RedlockBackend::check`]; for `purpose` `correctness` on a Redlock, which no opt-in
    /// allows; `token_floor` on etcd and ZooKeeper, whose tokens the server alone assigns;
    /// `min_replicas` on any server but Redis), [`crate::UsageError::UnsafePurpose`].
    pub fn check_acquire(
        &self,
        name: &str,
        options: &crate::LockOptions,
    ) -> Result<(), crate::UsageError> {
        check_lock_name(name)?;
        if let Backend::Redlock(b) = self {
            b.check()?;
            if options.token_floor.is_some() {
                return Err(crate::UsageError::option(
                    "token_floor",
                    "not supported on a Redlock: its token is the highest counter of the \
                     granting majority, no fencing token, and a floor would not make it one; \
                     leave it unset",
                ));
            }
            if options.purpose == crate::Purpose::Correctness {
                return Err(crate::UsageError::option(
                    "purpose",
                    crate::text![
                        "a Redlock is an efficiency lock only, with or without ",
                        crate::text::Opt("accept_failover_risk"),
                        ": its grants rest on timing assumptions and its tokens (the highest \
                         counter of the granting majority) can go backwards between grants. For \
                         a correctness lock use etcd, ZooKeeper or PostgreSQL lease rows",
                    ],
                ));
            }
        }
        options.validate(self.name(), self.tokens_may_regress())?;
        if options.min_replicas > 0 && !matches!(self, Backend::Redis(_)) {
            return Err(crate::UsageError::option(
                "min_replicas",
                format!(
                    "applies to Redis only (its WAIT command); {} replicates its grants itself: leave it 0",
                    self.name()
                ),
            ));
        }
        if options.metadata.is_some() && !self.stores_metadata() {
            return Err(crate::UsageError::option(
                "metadata",
                format!(
                    "not supported on {}{}: holder metadata is stored on plain Redis \
                     (fair: false), PostgreSQL lease rows, etcd, ZooKeeper and Kubernetes \
                     only; leave it unset",
                    self.name(),
                    match self {
                        Backend::Redis(_) => " with fair hand-off (a hand-off grant is written by the releasing holder's script, which has no waiter's metadata)",
                        #[cfg(feature = "postgres")]
                        Backend::Postgres(_) => " advisory locks (they keep no row to store it in)",
                        _ => "",
                    }
                ),
            ));
        }
        // tokens the server alone assigns, which never go backwards: nothing to raise
        let server_tokens = match self {
            Backend::Etcd(_) => Some("the key's create revision"),
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(_) => Some("the holder node's czxid"),
            _ => None,
        };
        if let (Some(token), Some(_)) = (server_tokens, options.token_floor) {
            return Err(crate::UsageError::option(
                "token_floor",
                format!(
                    "not supported on {}: its tokens are {token}, which the server alone \
                     assigns (and which never goes backwards); leave it unset",
                    self.name()
                ),
            ));
        }
        #[cfg(feature = "zookeeper")]
        if let Backend::ZooKeeper(zk) = self {
            zk.check_ttl(options)?;
        }
        #[cfg(feature = "kubernetes")]
        if let Backend::Kubernetes(k) = self {
            k.check(name, options)?;
        }
        Ok(())
    }

    /// Whether a grant stores [`crate::LockOptions::metadata`] for inspections to read
    /// back: plain Redis (its `…:meta` key), PostgreSQL lease rows (the row's `metadata`
    /// column), etcd (the contender key's value), ZooKeeper (the holder node's data) and
    /// Kubernetes (an annotation on the Lease).
    pub fn stores_metadata(&self) -> bool {
        match self {
            Backend::Redis(b) => !b.fair,
            #[cfg(feature = "postgres")]
            Backend::Postgres(b) => b.mode == PgMode::Lease,
            Backend::Etcd(_) => true,
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(_) => true,
            #[cfg(feature = "kubernetes")]
            Backend::Kubernetes(_) => true,
            _ => false,
        }
    }

    /// Whether fencing tokens can go backwards on failover (DESIGN.md rule 8).
    pub fn tokens_may_regress(&self) -> bool {
        match self {
            // Redlock: each master counts on its own (see `redlock`)
            Backend::Redis(_) | Backend::Redlock(_) => true,
            // Lease rows and token rows are durable, transactional state; etcd
            // revisions are Raft-replicated and only grow.
            // czxids are zxids: Zab-replicated, ensemble-wide, only rising.
            Backend::Etcd(_) => false,
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => false,
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(_) => false,
            // leaseTransitions: one counter in one object, changed only by
            // compare-and-set on its resourceVersion (etcd underneath); deleting the
            // object restarts it (see `kubernetes`)
            #[cfg(feature = "kubernetes")]
            Backend::Kubernetes(_) => false,
        }
    }

    /// The recipe of this backend.
    pub(crate) fn recipe(&self) -> &dyn Recipe {
        match self {
            Backend::Redis(b) => b,
            #[cfg(feature = "postgres")]
            Backend::Postgres(b) => b,
            Backend::Etcd(b) => b,
            Backend::Redlock(b) => b,
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(b) => b,
            #[cfg(feature = "kubernetes")]
            Backend::Kubernetes(b) => b,
        }
    }
}

/// What a recipe reads of a reply: the payload `pick` finds in a reply of its own
/// kind. A transport failure is ambiguous; another backend's kind of reply is a
/// protocol error (the host's adapter is miswired).
pub(crate) fn payload<'a, T: ?Sized>(
    reply: Result<&'a Reply, &str>,
    backend: &str,
    pick: impl FnOnce(&'a Reply) -> Option<&'a T>,
) -> Result<&'a T, ReadError> {
    match reply {
        Ok(r) => pick(r).ok_or_else(|| {
            ReadError::Protocol(ProtocolError {
                backend: backend.to_owned(),
                message: format!("got a reply for another backend: {r:?}"),
            })
        }),
        Err(message) => Err(ReadError::Ambiguous(message.to_owned())),
    }
}
