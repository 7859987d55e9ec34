//! Deterministic fault simulation: client machines, a reference server and a fenced
//! resource over a simulated network, in virtual time. One seed decides everything;
//! the same seed replays the same schedule exactly.
//!
//! Every holder writes to the fenced resource inside its critical section (the writes
//! travel over the network too, so they can arrive late), and [`Checker`] verifies
//! the properties S1–S4 after every step (see [`Property`]).
//!
//! The server is a [`MemoryRedis`] or, with [`SimBackend::Etcd`], a [`MemoryEtcd`]:
//! contenders queue with one key each and park on watches of their predecessors
//! (answered by the server when the predecessor is deleted, or by the host when the
//! watch's timeout passes); leases expire at their exact instant, waking watchers. For
//! etcd a "server restart" is a leader failover: the cluster answers `leader changed`
//! (gRPC 14) until a new leader is elected, which resets every lease's remaining TTL
//! to its full TTL and keeps all data — etcd's documented behaviour, so it is inside
//! the fault model.
//!
//! With [`SimBackend::Kubernetes`] the server is a [`MemoryKubernetes`]: one Lease
//! under `resourceVersion` compare-and-set that never expires; candidates judge a
//! holder's expiry from their own observation, so a takeover while the holder still
//! believes in its lease is what S2 catches. Its "server restart" is an API server
//! restart: `503 ServiceUnavailable` for up to one TTL, the Leases kept (they live in
//! etcd), inside the model.
//!
//! With [`SimBackend::PostgresLease`] the server is a [`MemoryPostgres`] running the
//! lease-rows statements on its clock (the true time): contenders park on `LISTEN`
//! waits woken by a release's notification, or ended by the host at their timeout; a
//! restart makes the server refuse connections (SQLSTATE `57P03`) for up to one TTL and
//! keeps every committed row — inside the model.
//!
//! With [`SimBackend::Redlock`] the server is N independent [`MemoryRedis`] masters
//! ([`MemoryRedlock`]): each request part goes to its master over its own link
//! (partitions cut single client–master links), masters pause (a stopped process whose
//! requests wait) and restart as the mix says: with persistence (data kept), without
//! persistence but kept down for longer than a TTL (the delayed restart Redis' Redlock
//! page asks for: inside the model), or without persistence and back at once (outside
//! the model: a restarted master may vote for a second holder).

use core::fmt;
use core::time::Duration;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use crate::backends::etcd::{lease_id, EtcdRequest, EtcdWatch};
use crate::backends::{EtcdBackend, Operation, RedisBackend, RedisValue, Reply};
#[cfg(all(doc, feature = "postgres"))]
use crate::memory::MemoryPostgres;
use crate::memory::{etcd_error, WATCH_TIMEOUT_REPLY};
use crate::memory::{MemoryEtcd, MemoryRedis, MemoryRedlock};
#[cfg(feature = "kubernetes")]
use crate::{backends::KubernetesBackend, memory::MemoryKubernetes};
#[cfg(feature = "zookeeper")]
use crate::{backends::ZkRequest, backends::ZooKeeperBackend, memory::MemoryZooKeeper};
use crate::{
    Backend, Event, Fence, FencingToken, Input, Instant, LockId, LockOptions, Machine, Output,
    OwnerId, RedlockBackend, Request, RequestId,
};

#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "model")]
pub(crate) use postgres::{listen_timeout, new_grant, s2_postgres, statement_owner, wait_over};

/// The lock every client contends for.
pub const LOCK_NAME: &str = "r";

/// The faults a schedule may contain, each with a probability drawn from the seed.
#[derive(Clone, Debug, PartialEq)]
pub struct Faults {
    /// Every message takes a uniform delay in `0 ..= delay_max`.
    pub delay_max: Duration,
    /// Probability that a message is delayed much longer, up to `long_delay_max`.
    pub p_long_delay: f64,
    /// Upper bound of a long delay (several TTLs).
    pub long_delay_max: Duration,
    /// Probability that a message is lost.
    pub p_drop: f64,
    /// Probability that a message is delivered twice (the copy with its own delay, so
    /// duplicates also reorder).
    pub p_duplicate: f64,
    /// Probability, at each step of a client's own work, that its process stops (GC,
    /// VM suspend) for up to `pause_max`.
    pub p_pause: f64,
    /// Longest pause.
    pub pause_max: Duration,
    /// Each client's clock runs at a rate drawn from `1 ± clock_drift`.
    pub clock_drift: f64,
    /// Probability, per second of virtual time and client, of a partition cutting the
    /// client off from the server (both ways) for up to `partition_max`.
    pub p_partition: f64,
    /// Longest partition.
    pub partition_max: Duration,
    /// Probability, per second of virtual time, that the server restarts and loses all
    /// state (Redis without persistence; outside the declared model), or, on etcd, that
    /// the leader fails over (inside the model: data kept, lease TTLs reset).
    pub p_server_restart: f64,
}

impl Faults {
    /// No faults: a short, fixed-bound delay. The liveness property S4 is checked.
    pub fn none() -> Self {
        Faults {
            delay_max: Duration::from_micros(500),
            p_long_delay: 0.0,
            long_delay_max: Duration::ZERO,
            p_drop: 0.0,
            p_duplicate: 0.0,
            p_pause: 0.0,
            pause_max: Duration::ZERO,
            clock_drift: 0.0,
            p_partition: 0.0,
            partition_max: Duration::ZERO,
            p_server_restart: 0.0,
        }
    }

    /// Delay up to three TTLs, drops, duplicates, reordering.
    pub fn network(ttl: Duration) -> Self {
        Faults {
            delay_max: Duration::from_millis(5),
            p_long_delay: 0.05,
            long_delay_max: ttl * 3,
            p_drop: 0.05,
            p_duplicate: 0.05,
            ..Faults::none()
        }
    }

    /// Process pauses of any length up to three TTLs.
    pub fn pauses(ttl: Duration) -> Self {
        Faults {
            delay_max: Duration::from_millis(2),
            p_pause: 0.15,
            pause_max: ttl * 3,
            ..Faults::none()
        }
    }

    /// Clock rates within the drift bound the options declare.
    pub fn drift(options: &LockOptions) -> Self {
        Faults {
            delay_max: Duration::from_millis(2),
            clock_drift: options.drift_factor,
            ..Faults::none()
        }
    }

    /// Partitions between clients and the server.
    pub fn partitions(ttl: Duration) -> Self {
        Faults {
            delay_max: Duration::from_millis(2),
            p_partition: 0.3,
            partition_max: ttl * 2,
            ..Faults::none()
        }
    }

    /// Every in-model fault at once.
    pub fn all(options: &LockOptions) -> Self {
        Faults {
            clock_drift: options.drift_factor,
            p_pause: 0.1,
            pause_max: options.ttl * 3,
            p_partition: 0.2,
            partition_max: options.ttl * 2,
            ..Faults::network(options.ttl)
        }
    }

    /// Outside the model: clocks running up to 10 × the declared drift slow or fast.
    pub fn drift_beyond(options: &LockOptions) -> Self {
        Faults {
            clock_drift: (options.drift_factor * 10.0).min(0.5),
            ..Faults::drift(options)
        }
    }

    /// Outside the model on Redis: the server restarts and forgets every key. On etcd:
    /// leader failovers, inside the model.
    pub fn server_restarts() -> Self {
        Faults {
            delay_max: Duration::from_millis(2),
            p_server_restart: 0.3,
            ..Faults::none()
        }
    }

    /// Whether these faults stay inside what `options` declare (drift within the bound,
    /// a server that keeps its state) on Redis. Violations of S2 and S3 outside the
    /// model are reported as explained by the breach. See [`SimConfig::within_model`]
    /// for etcd, whose failovers keep the data.
    pub fn within_model(&self, options: &LockOptions) -> bool {
        self.clock_drift <= options.drift_factor && self.p_server_restart == 0.0
    }

    /// No fault at all: liveness (S4) is checked.
    fn fault_free(&self) -> bool {
        self.p_long_delay == 0.0
            && self.p_drop == 0.0
            && self.p_duplicate == 0.0
            && self.p_pause == 0.0
            && self.clock_drift == 0.0
            && self.p_partition == 0.0
            && self.p_server_restart == 0.0
    }
}

/// One simulated schedule's configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// How many client processes contend.
    pub clients: usize,
    /// How long the schedule runs, in virtual time.
    pub run_for: Duration,
    /// Lock options of every acquisition (an acquire timeout is drawn per attempt).
    pub options: LockOptions,
    /// Lock cycles each client performs before it stops contending; `None` contends
    /// until the end. With faults off, every client must finish them (S4).
    pub cycles_per_client: Option<u32>,
    /// The fault mix.
    pub faults: Faults,
    /// Fair hand-off on the Redis backend (queued waiters parked on `BLPOP`).
    pub fair: bool,
    /// Which server the clients lock on.
    pub backend: SimBackend,
    /// On etcd: each client's locks share one lease ([`EtcdBackend::shared_lease`]).
    pub etcd_shared_lease: bool,
    /// The rule the fenced resource applies to each write.
    pub fence: FenceRule,
    /// A second fence with this rule sees the same writes and decides nothing (writers
    /// never learn its answer), so one run measures two rules on the same schedules.
    pub compare_fence: Option<FenceRule>,
    /// Writers follow the token-floor recovery (`docs/DESIGN.md`, "Decisions about
    /// fencing"): a write the resource refuses tells its writer the highest token the
    /// fence saw; the writer stops writing, releases, and its next acquire asks for a
    /// token above that (`LockOptions::token_floor`).
    pub floor_recovery: bool,
    /// Break a rule on purpose (tests of the checker).
    #[cfg(feature = "sabotage")]
    pub sabotage: crate::sabotage::Sabotage,
}

impl SimConfig {
    /// Three clients, five virtual seconds, 1 s TTL, with `faults`. Without faults,
    /// each client performs three lock cycles and the run lasts until all are done (at
    /// most 30 virtual seconds).
    pub fn new(faults: impl FnOnce(&LockOptions) -> Faults) -> Self {
        let mut options = LockOptions::ttl(Duration::from_secs(1));
        options.retry_base = Duration::from_millis(10);
        options.retry_max = Duration::from_millis(200);
        let faults = faults(&options);
        let fault_free = faults.fault_free();
        SimConfig {
            clients: 3,
            run_for: Duration::from_secs(if fault_free { 30 } else { 5 }),
            cycles_per_client: fault_free.then_some(3),
            fair: false,
            backend: SimBackend::Redis,
            etcd_shared_lease: false,
            fence: FenceRule::TokenOnly,
            compare_fence: None,
            floor_recovery: false,
            options,
            faults,
            #[cfg(feature = "sabotage")]
            sabotage: crate::sabotage::Sabotage::default(),
        }
    }
}

impl SimConfig {
    /// The same schedule shape on etcd.
    pub fn etcd(mut self) -> Self {
        self.backend = SimBackend::Etcd;
        self
    }

    /// The same schedule shape on etcd, each client's locks on one shared lease
    /// ([`EtcdBackend::shared_lease`]): its successive acquisitions reuse the session,
    /// retire it when found gone, and start a new one.
    pub fn etcd_shared(mut self) -> Self {
        self.backend = SimBackend::Etcd;
        self.etcd_shared_lease = true;
        self
    }

    /// The same schedule with the resource fenced by `rule`.
    pub fn fenced(mut self, rule: FenceRule) -> Self {
        self.fence = rule;
        self
    }

    /// The same schedule with a comparison fence under `rule` beside the resource's.
    pub fn compared_with(mut self, rule: FenceRule) -> Self {
        self.compare_fence = Some(rule);
        self
    }

    /// The same schedule with writers that recover with a token floor when refused.
    pub fn with_floor_recovery(mut self) -> Self {
        self.floor_recovery = true;
        self
    }

    /// The same schedule shape on ZooKeeper (session timeout = the TTL).
    #[cfg(feature = "zookeeper")]
    pub fn zookeeper(mut self) -> Self {
        self.backend = SimBackend::ZooKeeper;
        self
    }

    /// The same schedule shape on a Kubernetes Lease (`leaseDurationSeconds` = the TTL).
    #[cfg(feature = "kubernetes")]
    pub fn kubernetes(mut self) -> Self {
        self.backend = SimBackend::Kubernetes;
        self
    }

    /// The same schedule shape on PostgreSQL lease rows (notify on).
    #[cfg(feature = "postgres")]
    pub fn postgres(mut self) -> Self {
        self.backend = SimBackend::PostgresLease;
        self
    }

    /// The same schedule shape on a Redlock of independent masters.
    pub fn redlock(mut self, mix: RedlockMix) -> Self {
        self.backend = SimBackend::Redlock(mix);
        self
    }

    /// Whether the faults stay inside the declared model: drift within the bound, and
    /// a server that keeps its state (Redis without restarts; etcd, whose failovers
    /// keep the data and only lengthen leases).
    pub fn within_model(&self) -> bool {
        match self.backend {
            SimBackend::Redis => self.faults.within_model(&self.options),
            SimBackend::Etcd => self.faults.clock_drift <= self.options.drift_factor,
            // restarts keep every committed row; expiry is on the server's clock
            #[cfg(feature = "postgres")]
            SimBackend::PostgresLease => self.faults.clock_drift <= self.options.drift_factor,
            // failovers keep the data and only lengthen sessions
            #[cfg(feature = "zookeeper")]
            SimBackend::ZooKeeper => self.faults.clock_drift <= self.options.drift_factor,
            // an API server restart keeps the Leases (they live in etcd)
            #[cfg(feature = "kubernetes")]
            SimBackend::Kubernetes => self.faults.clock_drift <= self.options.drift_factor,
            SimBackend::Redlock(mix) => {
                self.faults.clock_drift <= self.options.drift_factor
                    && (self.faults.p_server_restart == 0.0
                        || mix.restarts != MasterRestart::Amnesiac)
            }
        }
    }
}

/// The server of a simulation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SimBackend {
    /// [`MemoryRedis`] (with [`SimConfig::fair`] hand-off if set).
    #[default]
    Redis,
    /// [`MemoryEtcd`], the etcd backend's recipe: per-contender keys, watches, leases.
    Etcd,
    /// [`MemoryZooKeeper`]: one session per client kept alive by pings (the client
    /// library's, every TTL/3 over the same network), ephemeral sequential nodes,
    /// watches of the predecessor, session expiry, leader failover.
    #[cfg(feature = "zookeeper")]
    ZooKeeper,
    /// [`MemoryKubernetes`]: one `coordination.k8s.io/v1` Lease per lock, taken over by
    /// a candidate that saw it unchanged for its `leaseDurationSeconds`; API server
    /// restarts answer 503 for a while and keep the Leases.
    #[cfg(feature = "kubernetes")]
    Kubernetes,
    /// [`MemoryPostgres`]: the lease-rows recipe (one row per name, server-clock
    /// expiry, `LISTEN`/`NOTIFY` wake-ups), restarts keeping the data.
    #[cfg(feature = "postgres")]
    PostgresLease,
    /// [`MemoryRedlock`]: the Redlock recipe on independent masters.
    Redlock(RedlockMix),
}

/// The rule of the simulated resource's fence (`docs/DESIGN.md`, "Decisions about
/// fencing").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FenceRule {
    /// [`Fence::check`]: the highest token is accepted from anyone.
    #[default]
    TokenOnly,
    /// [`Fence::check_owned`]: the highest token is accepted again only from the owner
    /// that first wrote with it.
    OwnerBound,
}

/// What one fence did with a schedule's writes, judged by grant order (the order in
/// which the server made the grants).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FenceCounts {
    /// Writes the fence accepted.
    pub accepted: u64,
    /// Writes the fence refused ([`crate::StaleToken`]).
    pub refused: u64,
    /// Accepted writes carrying a token another owner had written with.
    pub shared_token_accepted: u64,
    /// Writes accepted although a write of a *later* grant had been accepted before,
    /// with the same token as that later grant's (the server granted one token to two
    /// owners).
    pub out_of_order_same_token: u64,
    /// Writes accepted although a write of a *later* grant had been accepted before,
    /// with a token above that later grant's (a stale holder's token above the new
    /// holder's, after the counter went back).
    pub out_of_order_higher_token: u64,
    /// Refused writes of the newest grant: the fence had seen a token at or above the
    /// one the server just granted (tokens went back), so the new holder cannot write.
    pub newest_grant_refused: u64,
}

/// A fence with its rule and what it saw, in grant order.
#[derive(Clone, Debug)]
pub(crate) struct Resource {
    rule: FenceRule,
    fence: Fence,
    /// The first owner that wrote with each token.
    writers: BTreeMap<FencingToken, OwnerId>,
    /// The latest grant (in grant order) whose write was accepted, and its token.
    newest_accepted: Option<(u64, FencingToken)>,
    counts: FenceCounts,
}

impl Resource {
    pub(crate) fn new(rule: FenceRule) -> Self {
        Resource {
            rule,
            fence: Fence::new(),
            writers: BTreeMap::new(),
            newest_accepted: None,
            counts: FenceCounts::default(),
        }
    }

    /// Decides a write whose grant stands at `place` in grant order (`None`: unknown);
    /// `Ok(Some(first))` when `first`, another owner, wrote with the same token before.
    pub(crate) fn write(
        &mut self,
        token: FencingToken,
        owner: OwnerId,
        place: Option<u64>,
        newest_grant: bool,
    ) -> Result<Option<OwnerId>, crate::StaleToken> {
        let decided = match self.rule {
            FenceRule::TokenOnly => self.fence.check("resource", token),
            FenceRule::OwnerBound => self.fence.check_owned("resource", token, owner),
        };
        if let Err(stale) = decided {
            self.counts.refused += 1;
            if newest_grant {
                self.counts.newest_grant_refused += 1;
            }
            return Err(stale);
        }
        self.counts.accepted += 1;
        if let Some(place) = place {
            match self.newest_accepted {
                Some((newest, newest_token)) if place < newest && token == newest_token => {
                    self.counts.out_of_order_same_token += 1
                }
                Some((newest, _)) if place < newest => self.counts.out_of_order_higher_token += 1,
                _ => self.newest_accepted = Some((place, token)),
            }
        }
        match self.writers.get(&token) {
            Some(first) if *first != owner => {
                self.counts.shared_token_accepted += 1;
                Ok(Some(*first))
            }
            Some(_) => Ok(None),
            None => {
                self.writers.insert(token, owner);
                Ok(None)
            }
        }
    }
}

/// The masters of a Redlock simulation and the faults only they have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedlockMix {
    /// How many masters (odd, at least 3).
    pub masters: u8,
    /// What a master restart (at [`Faults::p_server_restart`], one master at a time)
    /// does to its data.
    pub restarts: MasterRestart,
    /// Masters stop (SIGSTOP) for up to two TTLs at 0.3 per second and master; the
    /// requests they receive wait until they resume.
    pub pauses: bool,
}

impl RedlockMix {
    /// `masters` masters that restart with persistence and never pause.
    pub fn new(masters: u8) -> Self {
        RedlockMix {
            masters,
            restarts: MasterRestart::Persistent,
            pauses: false,
        }
    }
}

/// What a Redlock master's restart keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MasterRestart {
    /// Persistence (`appendfsync always`): the data survives; down up to half a TTL.
    Persistent,
    /// No persistence, but the master stays down for longer than the TTL, so every
    /// key it held has expired before it votes again (inside the model).
    Delayed,
    /// No persistence and back at once: it forgets the keys it held and may grant
    /// them again (outside the model).
    Amnesiac,
}

/// The properties the checker verifies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Property {
    /// Tokens and fencing: every grant gets a token higher than all earlier grants, and
    /// the resource never accepts a write carrying a lower token than one it accepted.
    S1,
    /// Local validity is conservative: while a client's clock has not passed its
    /// `valid_until`, the server holds the lock for that owner, until at least then.
    S2,
    /// No orphans: a lock that finished (released, lost, failed) sends no request that
    /// could set or extend the lease again.
    S3,
    /// Liveness without faults: every contender acquires, and the lock is never idle
    /// longer than the longest backoff step plus one round trip while someone waits.
    S4,
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A broken property, with the virtual time and what was seen.
#[derive(Clone, Debug, PartialEq)]
pub struct Violation {
    /// The property broken.
    pub property: Property,
    /// Virtual (true) time of the check that failed.
    pub at: Instant,
    /// What was seen, as a sentence for people (the clients, tokens or error involved).
    pub detail: String,
    /// The schedule left the declared fault model; the violation is explained by it.
    pub explained_by_breach: bool,
}

/// What one schedule did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// Violations, first first (the run stops at the first unexplained one).
    pub violations: Vec<Violation>,
    /// Grants the server made.
    pub grants: u64,
    /// Writes the resource accepted.
    pub writes_accepted: u64,
    /// Writes the resource refused as stale.
    pub writes_refused: u64,
    /// The resource's fence, by grant order ([`SimConfig::fence`]).
    pub fence: FenceCounts,
    /// The comparison fence's ([`SimConfig::compare_fence`]).
    pub compared: Option<(FenceRule, FenceCounts)>,
    /// Steps the simulation took.
    pub steps: u64,
    /// The readable timeline, when tracing was on.
    pub trace: Vec<String>,
}

impl Outcome {
    /// The violations not explained by a breach of the fault model.
    pub fn unexplained(&self) -> impl Iterator<Item = &Violation> {
        self.violations.iter().filter(|v| !v.explained_by_breach)
    }
}

// ---- the world -------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Msg {
    /// Client → server.
    Request { client: usize, request: Request },
    /// Server → client.
    Reply {
        client: usize,
        request: RequestId,
        reply: Reply,
    },
    /// Client → resource: a fenced write.
    Write {
        client: usize,
        token: FencingToken,
        owner: OwnerId,
    },
    /// Client library → ZooKeeper: a session ping.
    #[cfg(feature = "zookeeper")]
    Ping { client: usize, session: i64 },
}

#[derive(Clone, Debug)]
enum Ev {
    Deliver(Msg),
    /// A client's machine timer (scheduled for its local instant).
    Timer {
        client: usize,
        local: Instant,
    },
    /// A client's own work: start acquiring, write, release.
    Work {
        client: usize,
        gen: u64,
    },
    /// A request reached its deadline on the client (the host cancels it).
    Deadline {
        client: usize,
        request: RequestId,
    },
    Resume {
        client: usize,
    },
    Partition {
        client: usize,
        until: Instant,
    },
    ServerRestart,
    /// A lease on the etcd server runs out (its keys go, watchers wake).
    LeaseExpiry,
    /// A client's watch reached its timeout: the host cancels it and answers `{}`.
    WatchTimeout {
        client: usize,
        request: RequestId,
    },
    /// A blocked `BLPOP` reached its timeout.
    BlpopTimeout {
        client: usize,
        request: RequestId,
    },
    /// A client library's ping is due (ZooKeeper).
    #[cfg(feature = "zookeeper")]
    ZkPing {
        client: usize,
    },
    /// A Redlock master stops (SIGSTOP) for a while.
    MasterPause {
        master: usize,
    },
}

/// How often a Redlock master stops, in mixes with master pauses.
const MASTER_PAUSES_PER_S: f64 = 0.3;

/// A `BLPOP` blocked on the server.
#[derive(Clone, Debug)]
struct Blocked {
    client: usize,
    request: RequestId,
    key: String,
}

#[derive(Clone, Debug, PartialEq)]
enum Work {
    /// Thinking until the next `Work` event.
    Idle,
    Acquiring {
        lock: LockId,
    },
    Holding {
        lock: LockId,
        token: FencingToken,
        writes_left: u32,
    },
    Releasing {
        lock: LockId,
    },
}

struct Client {
    machine: Machine,
    /// Local clock rate relative to true time.
    rate: f64,
    paused_until: Option<Instant>,
    /// Inputs that arrived while paused, in arrival order.
    inbox: VecDeque<Msg>,
    work: Work,
    work_gen: u64,
    /// A write checked valid before a pause, sent when the process resumes.
    write_after_pause: Option<(FencingToken, OwnerId)>,
    partitioned_until: Instant,
    /// Requests in flight and their deadlines (the host cancels at the deadline).
    in_flight: HashMap<RequestId, Request>,
    /// Locks that emitted their final event.
    finished: Vec<LockId>,
    /// Lock cycles completed (acquired, then released or lost).
    cycles: u32,
    /// Since when this client has been waiting for the lock (for S4).
    waiting_since: Option<Instant>,
    timer_local: Option<Instant>,
    /// Token-floor recovery ([`SimConfig::floor_recovery`]): the floor its next acquire
    /// asks for, and the token of the last write the resource refused.
    floor: Option<FencingToken>,
    refused: Option<FencingToken>,
}

impl Client {
    fn local(&self, now: Instant) -> Instant {
        Instant::from_nanos((now.as_nanos() as f64 * self.rate) as u64)
    }

    /// The first true instant at which the local clock reads at least `local`.
    fn true_of(&self, local: Instant) -> Instant {
        Instant::from_nanos((local.as_nanos() as f64 / self.rate).ceil() as u64)
    }
}

/// One schedule: build with [`Simulation::new`] and [`Simulation::run`].
pub struct Simulation {
    cfg: SimConfig,
    rng: ChaCha8Rng,
    now: Instant,
    end: Instant,
    seq: u64,
    queue: BinaryHeap<Reverse<(Instant, u64)>>,
    events: HashMap<u64, Ev>,
    server: MemoryRedis,
    etcd: MemoryEtcd,
    /// The etcd cluster has no leader until then (after a failover).
    etcd_unavailable_until: Instant,
    /// The lease expiry an `Ev::LeaseExpiry` is queued for.
    expiry_scheduled: Option<Instant>,
    /// Watches registered on the etcd server, in the order they arrived.
    watches: Vec<(usize, RequestId, EtcdWatch)>,
    /// The create revision of the etcd key that held the lock at the last check.
    etcd_holder: Option<i64>,
    server_epoch: u32,
    resource: Resource,
    compared: Option<Resource>,
    /// Blocked `BLPOP`s in the order they blocked (Redis serves them FIFO).
    blocked: Vec<Blocked>,
    clients: Vec<Client>,
    checker: Checker,
    tracing: bool,
    outcome: Outcome,
    lock_key: String,
    /// The etcd key prefix of the lock.
    etcd_prefix: String,
    /// Redlock: the masters, and until when each is down (restarting) or stopped.
    masters: MemoryRedlock,
    master_down_until: Vec<Instant>,
    master_paused_until: Vec<Instant>,
    /// Redlock: per client, per master, until when their link is cut.
    master_cut_until: Vec<Vec<Instant>>,
    #[cfg(feature = "zookeeper")]
    zk: ZkSim,
    #[cfg(feature = "postgres")]
    pg: postgres::PgSim,
    #[cfg(feature = "kubernetes")]
    kube: KubeSim,
}

/// The Kubernetes side of a simulation.
#[cfg(feature = "kubernetes")]
#[derive(Default)]
struct KubeSim {
    server: MemoryKubernetes,
    settings: KubernetesBackend,
    /// The holder and `leaseTransitions` of the Lease at the last check.
    holder: Option<(String, i64)>,
    /// The API server answers 503 until then (a restart).
    unavailable_until: Instant,
}

/// The ZooKeeper side of a simulation.
#[cfg(feature = "zookeeper")]
struct ZkSim {
    server: MemoryZooKeeper,
    settings: ZooKeeperBackend,
    /// Each client's current session.
    sessions: Vec<i64>,
    /// The session each request was sent on.
    sent_on: HashMap<(usize, RequestId), i64>,
    /// Watches registered on the server: client, request, watched path, session.
    watches: Vec<(usize, RequestId, String, i64)>,
    /// The czxid of the node that held the lock at the last check.
    holder: Option<i64>,
    unavailable_until: Instant,
}

impl Simulation {
    /// A schedule decided entirely by `seed`.
    pub fn new(cfg: SimConfig, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let clients = (0..cfg.clients)
            .map(|_| {
                let drift = cfg.faults.clock_drift;
                let rate = 1.0 + drift * (2.0 * unit(&mut rng) - 1.0);
                let backend = match cfg.backend {
                    SimBackend::Redis => Backend::Redis(RedisBackend {
                        fair: cfg.fair,
                        ..RedisBackend::default()
                    }),
                    SimBackend::Etcd => Backend::Etcd(EtcdBackend {
                        shared_lease: cfg.etcd_shared_lease,
                        ..EtcdBackend::default()
                    }),
                    #[cfg(feature = "postgres")]
                    SimBackend::PostgresLease => {
                        Backend::Postgres(crate::backends::PostgresBackend::default())
                    }
                    #[cfg(feature = "zookeeper")]
                    SimBackend::ZooKeeper => Backend::ZooKeeper(ZooKeeperBackend {
                        session_timeout_ms: Some(cfg.options.ttl_ms()),
                        ..ZooKeeperBackend::default()
                    }),
                    #[cfg(feature = "kubernetes")]
                    SimBackend::Kubernetes => Backend::Kubernetes(KubernetesBackend::default()),
                    SimBackend::Redlock(mix) => Backend::Redlock(RedlockBackend {
                        masters: (0..mix.masters).map(|m| format!("m{m}")).collect(),
                        ..RedlockBackend::default()
                    }),
                };
                #[allow(unused_mut)]
                let mut machine = Machine::with_seed(backend, rng.next_u64());
                #[cfg(feature = "sabotage")]
                machine.sabotage(cfg.sabotage);
                Client {
                    machine,
                    rate,
                    paused_until: None,
                    inbox: VecDeque::new(),
                    work: Work::Idle,
                    work_gen: 0,
                    write_after_pause: None,
                    partitioned_until: Instant::ZERO,
                    in_flight: HashMap::new(),
                    finished: Vec::new(),
                    cycles: 0,
                    waiting_since: None,
                    timer_local: None,
                    floor: None,
                    refused: None,
                }
            })
            .collect();
        let within = cfg.within_model();
        // etcd revokes an expired lease up to ~500 ms late (its lessor's check
        // interval): drawn per schedule (only on etcd: Redis schedules stay as they were)
        let mut etcd = MemoryEtcd::new();
        if cfg.backend == SimBackend::Etcd {
            etcd.revoke_lag = Duration::from_millis(rng.next_u64() % 501);
        }
        let end = Instant::ZERO + cfg.run_for;
        let (fence, compare_fence) = (cfg.fence, cfg.compare_fence);
        #[cfg(feature = "zookeeper")]
        let zk = {
            let mut server = MemoryZooKeeper::new();
            let sessions = (0..cfg.clients)
                .map(|_| server.connect(Instant::ZERO, cfg.options.ttl))
                .collect();
            ZkSim {
                server,
                settings: ZooKeeperBackend::default(),
                sessions,
                sent_on: HashMap::new(),
                watches: Vec::new(),
                holder: None,
                unavailable_until: Instant::ZERO,
            }
        };
        let masters = match cfg.backend {
            SimBackend::Redlock(mix) => usize::from(mix.masters),
            _ => 0,
        };
        let n_clients = cfg.clients;
        Simulation {
            checker: Checker::new(within, cfg.faults.fault_free(), &cfg),
            cfg,
            rng,
            now: Instant::ZERO,
            end,
            seq: 0,
            queue: BinaryHeap::new(),
            events: HashMap::new(),
            server: MemoryRedis::new(),
            etcd,
            etcd_unavailable_until: Instant::ZERO,
            expiry_scheduled: None,
            watches: Vec::new(),
            etcd_holder: None,
            server_epoch: 0,
            resource: Resource::new(fence),
            compared: compare_fence.map(Resource::new),
            blocked: Vec::new(),
            clients,
            tracing: false,
            outcome: Outcome::default(),
            lock_key: RedisBackend::default().lock_key(LOCK_NAME),
            etcd_prefix: EtcdBackend::default().lock_prefix(LOCK_NAME),
            #[cfg(feature = "zookeeper")]
            zk,
            #[cfg(feature = "kubernetes")]
            kube: KubeSim::default(),
            #[cfg(feature = "postgres")]
            pg: postgres::PgSim::new(n_clients),
            masters: MemoryRedlock::new(masters),
            master_down_until: vec![Instant::ZERO; masters],
            master_paused_until: vec![Instant::ZERO; masters],
            master_cut_until: vec![vec![Instant::ZERO; masters]; n_clients],
        }
    }

    /// Records a readable timeline in [`Outcome::trace`].
    pub fn with_trace(mut self) -> Self {
        self.tracing = true;
        self
    }

    /// Runs the schedule to its end (or its first unexplained violation).
    pub fn run(mut self) -> Outcome {
        for c in 0..self.clients.len() {
            let think = self.uniform(Duration::from_millis(50));
            self.schedule_work(c, think);
        }
        if self.cfg.faults.p_server_restart > 0.0 {
            let at = self.exp_interval(self.cfg.faults.p_server_restart);
            self.push(at, Ev::ServerRestart);
        }
        #[cfg(feature = "zookeeper")]
        if self.cfg.backend == SimBackend::ZooKeeper {
            for c in 0..self.clients.len() {
                let first = self.uniform(self.cfg.options.ttl / 3);
                self.push(Instant::ZERO + first, Ev::ZkPing { client: c });
            }
        }
        if let SimBackend::Redlock(mix) = self.cfg.backend {
            for master in 0..self.masters.masters.len() {
                if mix.pauses {
                    let at = self.exp_interval(MASTER_PAUSES_PER_S);
                    self.push(at, Ev::MasterPause { master });
                }
            }
        }
        for c in 0..self.clients.len() {
            if self.cfg.faults.p_partition > 0.0 {
                let at = self.exp_interval(self.cfg.faults.p_partition);
                let len = self.uniform(self.cfg.faults.partition_max);
                self.push(
                    at,
                    Ev::Partition {
                        client: c,
                        until: at + len,
                    },
                );
            }
        }
        while let Some(Reverse((at, seq))) = self.queue.pop() {
            if at > self.end {
                break;
            }
            self.now = at;
            let Some(ev) = self.events.remove(&seq) else {
                continue;
            };
            self.outcome.steps += 1;
            self.step(ev);
            self.schedule_expiry();
            self.check();
            if self.outcome.unexplained().next().is_some() || self.all_done() {
                break;
            }
        }
        if self.outcome.unexplained().next().is_none() {
            self.checker
                .at_end(&self.clients, self.now, &mut self.outcome);
        }
        self.outcome.fence = self.resource.counts;
        self.outcome.compared = self.compared.map(|r| (r.rule, r.counts));
        self.outcome
    }

    /// etcd: queues an `Ev::LeaseExpiry` for the next lease to run out, so its keys go
    /// and its watchers wake at that instant, not at the next unrelated event.
    fn schedule_expiry(&mut self) {
        #[cfg(feature = "zookeeper")]
        if self.cfg.backend == SimBackend::ZooKeeper {
            self.zk.server.expire(self.now);
            if let Some(at) = self.zk.server.next_expiry() {
                if self.expiry_scheduled.is_none_or(|s| at < s || s < self.now) {
                    self.expiry_scheduled = Some(at);
                    self.push(at.max(self.now), Ev::LeaseExpiry);
                }
            }
            return;
        }
        if self.cfg.backend != SimBackend::Etcd {
            return;
        }
        self.etcd.expire(self.now);
        if let Some(at) = self.etcd.next_expiry() {
            if self.expiry_scheduled.is_none_or(|s| at < s || s < self.now) {
                self.expiry_scheduled = Some(at);
                self.push(at.max(self.now), Ev::LeaseExpiry);
            }
        }
    }

    fn all_done(&self) -> bool {
        self.cfg.cycles_per_client.is_some_and(|n| {
            self.clients
                .iter()
                .all(|c| c.cycles >= n && c.work == Work::Idle)
        })
    }

    // ---- scheduling helpers ----

    fn push(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq)));
        self.events.insert(self.seq, ev);
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && unit(&mut self.rng) < p
    }

    fn uniform(&mut self, max: Duration) -> Duration {
        let n = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        if n == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.rng.next_u64() % n.saturating_add(1))
    }

    /// An exponentially distributed time from now for a process of `rate_per_s`.
    fn exp_interval(&mut self, rate_per_s: f64) -> Instant {
        let u = unit(&mut self.rng).max(1e-12);
        self.now + Duration::from_secs_f64((-u.ln() / rate_per_s).min(1e6))
    }

    fn trace(&mut self, text: impl FnOnce() -> String) {
        if self.tracing {
            let line = format!("{:>12} {}", self.now.to_string(), text());
            self.outcome.trace.push(line);
        }
    }

    /// Sends a message over the network with the configured faults.
    fn send(&mut self, msg: Msg) {
        let client = match &msg {
            Msg::Request { client, .. } | Msg::Reply { client, .. } | Msg::Write { client, .. } => {
                *client
            }
            #[cfg(feature = "zookeeper")]
            Msg::Ping { client, .. } => *client,
        };
        let server_link = !matches!(msg, Msg::Write { .. });
        let master = match &msg {
            Msg::Request { request, .. } => MemoryRedlock::master_of(&request.body),
            Msg::Reply { request, .. } => self.clients[client]
                .in_flight
                .get(request)
                .and_then(|r| MemoryRedlock::master_of(&r.body)),
            Msg::Write { .. } => None,
            #[cfg(feature = "zookeeper")]
            Msg::Ping { .. } => None,
        };
        if let Some(m) = master {
            if self.master_cut_until[client]
                .get(m)
                .is_some_and(|&t| t > self.now)
            {
                self.trace(|| format!("net: partition from m{m} drops {}", describe(&msg)));
                return;
            }
        } else if server_link && self.clients[client].partitioned_until > self.now {
            self.trace(|| format!("net: partition drops {}", describe(&msg)));
            return;
        }
        if self.chance(self.cfg.faults.p_drop) {
            self.trace(|| format!("net: drops {}", describe(&msg)));
            return;
        }
        let copies = if self.chance(self.cfg.faults.p_duplicate) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut delay = self.uniform(self.cfg.faults.delay_max);
            if self.chance(self.cfg.faults.p_long_delay) {
                delay += self.uniform(self.cfg.faults.long_delay_max);
            }
            let at = self.now + delay;
            self.push(at, Ev::Deliver(msg.clone()));
        }
    }

    fn schedule_work(&mut self, c: usize, after: Duration) {
        self.clients[c].work_gen += 1;
        let gen = self.clients[c].work_gen;
        let at = self.now + after;
        self.push(at, Ev::Work { client: c, gen });
    }

    fn paused(&self, c: usize) -> bool {
        self.clients[c].paused_until.is_some_and(|t| t > self.now)
    }

    // ---- the step ----

    fn step(&mut self, ev: Ev) {
        match ev {
            Ev::Deliver(msg) => self.deliver(msg),
            Ev::Timer { client, local } => {
                if self.clients[client].timer_local == Some(local) {
                    self.clients[client].timer_local = None;
                    // a paused process misses it; resuming feeds a timeout anyway
                    if !self.paused(client) {
                        let now = self.clients[client].local(self.now);
                        self.input(client, Input::Timeout { now });
                    }
                }
            }
            Ev::Work { client, gen } => {
                if gen == self.clients[client].work_gen {
                    if self.paused(client) {
                        // the process is stopped: its work waits for it
                        let until = self.clients[client].paused_until.unwrap_or(self.now);
                        self.push(until, Ev::Work { client, gen });
                    } else {
                        self.work(client);
                    }
                }
            }
            Ev::Deadline { client, request } => {
                if self.clients[client].in_flight.contains_key(&request) {
                    if self.paused(client) {
                        let until = self.clients[client].paused_until.unwrap_or(self.now);
                        self.push(until, Ev::Deadline { client, request });
                    } else {
                        self.clients[client].in_flight.remove(&request);
                        let now = self.clients[client].local(self.now);
                        self.trace(|| {
                            format!("c{client}: request {} cancelled at its deadline", request.0)
                        });
                        self.input(
                            client,
                            Input::TransportError {
                                now,
                                request,
                                message: "deadline".into(),
                            },
                        );
                    }
                }
            }
            Ev::Resume { client } => self.resume(client),
            Ev::Partition { client, until } => {
                let n = self.masters.masters.len();
                if n > 0 {
                    // a Redlock partition cuts the client off from a random set of masters
                    // (the 64 bits repeat over more masters: a shift by 64 would overflow)
                    let mask = self.rng.next_u64();
                    for m in (0..n).filter(|m| mask.rotate_right(*m as u32) & 1 == 1) {
                        self.trace(|| format!("c{client}: cut off from m{m} until {until}"));
                        self.master_cut_until[client][m] = until;
                    }
                } else {
                    self.trace(|| format!("c{client}: partitioned from the server until {until}"));
                    self.clients[client].partitioned_until = until;
                }
                let next = self.exp_interval(self.cfg.faults.p_partition).max(until);
                let len = self.uniform(self.cfg.faults.partition_max);
                self.push(
                    next,
                    Ev::Partition {
                        client,
                        until: next + len,
                    },
                );
            }
            Ev::BlpopTimeout { client, request } => {
                if let Some(i) = self
                    .blocked
                    .iter()
                    .position(|b| b.client == client && b.request == request)
                {
                    self.blocked.remove(i);
                    self.send(Msg::Reply {
                        client,
                        request,
                        reply: Reply::Redis(RedisValue::Nil),
                    });
                }
            }
            Ev::LeaseExpiry => {
                if self.expiry_scheduled.is_some_and(|s| s <= self.now) {
                    self.expiry_scheduled = None;
                }
                #[cfg(feature = "zookeeper")]
                if self.cfg.backend == SimBackend::ZooKeeper {
                    self.zk.server.expire(self.now);
                    self.serve_zk_watches();
                    return;
                }
                self.etcd.expire(self.now);
                self.serve_watches();
            }
            #[cfg(feature = "zookeeper")]
            Ev::ZkPing { client } => {
                if !self.paused(client) {
                    let session = self.zk.sessions[client];
                    self.send(Msg::Ping { client, session });
                }
                // the library's ping period, on the client's clock
                let period = self.cfg.options.ttl / 3;
                let next = self.clients[client].local(self.now) + period;
                let at = self.clients[client].true_of(next).max(self.now);
                self.push(at, Ev::ZkPing { client });
            }
            #[cfg(feature = "zookeeper")]
            Ev::WatchTimeout { client, request } if self.cfg.backend == SimBackend::ZooKeeper => {
                if self.clients[client].in_flight.contains_key(&request) {
                    self.zk
                        .watches
                        .retain(|(c, r, ..)| !(*c == client && *r == request));
                    self.trace(|| format!("c{client}: watch {} timed out", request.0));
                    let session = self.zk.sessions[client];
                    self.deliver(Msg::Reply {
                        client,
                        request,
                        reply: Reply::ZooKeeper(format!(
                            r#"{{"event":"timeout","session":{session}}}"#
                        )),
                    });
                }
            }
            #[cfg(feature = "postgres")]
            Ev::WatchTimeout { client, request }
                if self.cfg.backend == SimBackend::PostgresLease =>
            {
                self.pg_wait_timeout(client, request)
            }
            Ev::WatchTimeout { client, request } => {
                if self.clients[client].in_flight.contains_key(&request) {
                    self.watches
                        .retain(|(c, r, _)| !(*c == client && *r == request));
                    self.trace(|| format!("c{client}: watch {} timed out", request.0));
                    // the host's own timer: no network in between
                    self.deliver(Msg::Reply {
                        client,
                        request,
                        reply: Reply::Etcd(WATCH_TIMEOUT_REPLY.to_owned()),
                    });
                }
            }
            #[cfg(feature = "zookeeper")]
            Ev::ServerRestart if self.cfg.backend == SimBackend::ZooKeeper => {
                // leader failover: no quorum for up to one TTL; sessions get their full
                // timeout again from the election; data kept
                let election = self.uniform(self.cfg.options.ttl);
                self.trace(|| {
                    format!("server: zookeeper leader fails over, a new one in {election:?}")
                });
                self.zk.server.failover(self.now, election);
                self.zk.unavailable_until = self.now + election;
                for (client, request, _, session) in std::mem::take(&mut self.zk.watches) {
                    self.send(Msg::Reply {
                        client,
                        request,
                        reply: Reply::ZooKeeper(crate::memory::zk_error(
                            "connection_loss",
                            session,
                        )),
                    });
                }
                self.server_epoch += 1;
                self.checker.server_restarted();
                let next = self.exp_interval(self.cfg.faults.p_server_restart);
                self.push(next, Ev::ServerRestart);
            }
            #[cfg(feature = "kubernetes")]
            Ev::ServerRestart if self.cfg.backend == SimBackend::Kubernetes => self.kube_restart(),
            Ev::MasterPause { master } => {
                let len = self.uniform(self.cfg.options.ttl * 2);
                let until = self.now + len;
                self.trace(|| format!("m{master}: stopped for {len:?}"));
                let paused = &mut self.master_paused_until[master];
                *paused = (*paused).max(until);
                let next = self.exp_interval(MASTER_PAUSES_PER_S).max(until);
                self.push(next, Ev::MasterPause { master });
            }
            Ev::ServerRestart if matches!(self.cfg.backend, SimBackend::Redlock(_)) => {
                let SimBackend::Redlock(mix) = self.cfg.backend else {
                    return;
                };
                let n = self.masters.masters.len() as u64;
                let master = (self.rng.next_u64() % n.max(1)) as usize;
                let ttl = self.cfg.options.ttl;
                let down = match mix.restarts {
                    MasterRestart::Persistent => self.uniform(ttl / 2),
                    MasterRestart::Delayed => {
                        ttl + Duration::from_millis(1) + self.uniform(ttl / 2)
                    }
                    MasterRestart::Amnesiac => Duration::ZERO,
                };
                if mix.restarts != MasterRestart::Persistent {
                    self.masters.masters[master].flush();
                }
                self.trace(|| {
                    format!(
                        "m{master}: restarts ({:?}), down for {down:?}",
                        mix.restarts
                    )
                });
                self.master_down_until[master] = self.now + down;
                self.server_epoch += 1;
                self.checker.server_restarted();
                let next = self.exp_interval(self.cfg.faults.p_server_restart);
                self.push(next, Ev::ServerRestart);
            }
            #[cfg(feature = "postgres")]
            Ev::ServerRestart if self.cfg.backend == SimBackend::PostgresLease => self.pg_restart(),
            Ev::ServerRestart if self.cfg.backend == SimBackend::Etcd => {
                // leader failover: no leader for up to one TTL, then every lease gets
                // its full TTL again, counted from the election; data kept
                let election = self.uniform(self.cfg.options.ttl);
                self.trace(|| format!("server: etcd leader fails over, a new one in {election:?}"));
                self.etcd.failover(self.now, election);
                self.etcd_unavailable_until = self.now + election;
                // watch streams on the old leader break
                for (client, request, _) in std::mem::take(&mut self.watches) {
                    self.send(Msg::Reply {
                        client,
                        request,
                        reply: Reply::Etcd(etcd_error(14, "etcdserver: leader changed")),
                    });
                }
                self.server_epoch += 1;
                self.checker.server_restarted();
                let next = self.exp_interval(self.cfg.faults.p_server_restart);
                self.push(next, Ev::ServerRestart);
            }
            Ev::ServerRestart => {
                self.trace(|| "server: restarts and loses every key".to_owned());
                self.server.flush();
                // blocked clients see their connections drop
                for b in std::mem::take(&mut self.blocked) {
                    self.send(Msg::Reply {
                        client: b.client,
                        request: b.request,
                        reply: Reply::Redis(RedisValue::Error("LOADING server restarted".into())),
                    });
                }
                self.server_epoch += 1;
                self.checker.server_restarted();
                let next = self.exp_interval(self.cfg.faults.p_server_restart);
                self.push(next, Ev::ServerRestart);
            }
        }
    }

    fn deliver(&mut self, msg: Msg) {
        match msg {
            Msg::Request { client, request } if self.cfg.backend == SimBackend::Etcd => {
                self.deliver_etcd(client, request)
            }
            #[cfg(feature = "postgres")]
            Msg::Request { client, request } if self.cfg.backend == SimBackend::PostgresLease => {
                self.deliver_pg(client, request)
            }
            Msg::Request { client, request } if !self.masters.masters.is_empty() => {
                self.deliver_redlock(client, request)
            }
            #[cfg(feature = "zookeeper")]
            Msg::Request { client, request } if self.cfg.backend == SimBackend::ZooKeeper => {
                self.deliver_zk(client, request)
            }
            #[cfg(feature = "kubernetes")]
            Msg::Request { client, request } if self.cfg.backend == SimBackend::Kubernetes => {
                self.deliver_kube(client, request)
            }
            #[cfg(feature = "zookeeper")]
            Msg::Ping { client, session } => {
                if self.now >= self.zk.unavailable_until
                    && session == self.zk.sessions[client]
                    && !self.zk.server.touch(self.now, session)
                {
                    self.zk_reconnect(client);
                }
            }
            Msg::Request { client, request }
                if matches!(request.body, crate::RequestBody::RedisBlpop(_)) =>
            {
                let crate::RequestBody::RedisBlpop(b) = &request.body else {
                    return;
                };
                if self.server.has_list_item(self.now, &b.key) {
                    let reply = self.server.execute(self.now, &request.body);
                    self.send(Msg::Reply {
                        client,
                        request: request.id,
                        reply,
                    });
                } else {
                    let until = self.now + Duration::from_millis(b.timeout_ms);
                    self.blocked.push(Blocked {
                        client,
                        request: request.id,
                        key: b.key.clone(),
                    });
                    self.push(
                        until,
                        Ev::BlpopTimeout {
                            client,
                            request: request.id,
                        },
                    );
                }
            }
            Msg::Request { client, request } => {
                let before = self.server.get(self.now, &self.lock_key).map(str::to_owned);
                let reply = self.server.execute(self.now, &request.body);
                if request.operation == Operation::Acquire {
                    if let Reply::Redis(RedisValue::Array(items)) = &reply {
                        if let [RedisValue::Int(1), RedisValue::Int(token), ..] = items.as_slice() {
                            let owner = request_owner(&request);
                            if before.as_deref() != Some(owner.as_str()) {
                                self.outcome.grants += 1;
                                self.checker.grant(
                                    self.now,
                                    FencingToken(*token as u64),
                                    OwnerId::from_hex(&owner),
                                    &mut self.outcome,
                                );
                                self.trace(|| format!("server: grants token {token} to c{client}"));
                            }
                        }
                    }
                }
                self.trace(|| {
                    format!("server: {:?} from c{client} → {reply:?}", request.operation)
                });
                self.send(Msg::Reply {
                    client,
                    request: request.id,
                    reply,
                });
                self.serve_blocked();
            }
            Msg::Reply { client, .. } if self.paused(client) => {
                self.clients[client].inbox.push_back(msg);
            }
            Msg::Reply {
                client,
                request,
                reply,
            } => {
                if self.clients[client].in_flight.remove(&request).is_some() {
                    let now = self.clients[client].local(self.now);
                    self.input(
                        client,
                        Input::Reply {
                            now,
                            request,
                            reply,
                        },
                    );
                }
                // else: cancelled at its deadline or a duplicate — the host drops it
            }
            Msg::Write {
                client,
                token,
                owner,
            } => {
                let place = self.checker.grant_place(token, owner);
                let newest = self.checker.is_newest_grant(place);
                if let Some(compared) = &mut self.compared {
                    let _ = compared.write(token, owner, place, newest);
                }
                match self.resource.write(token, owner, place, newest) {
                    Ok(shared_with) => {
                        self.outcome.writes_accepted += 1;
                        self.trace(|| {
                            format!("resource: accepts c{client}'s write with token {token}")
                        });
                        self.checker.accepted(
                            self.now,
                            token,
                            owner,
                            shared_with,
                            &mut self.outcome,
                        );
                    }
                    Err(stale) => {
                        self.outcome.writes_refused += 1;
                        self.trace(|| format!("resource: refuses c{client}'s write: {stale}"));
                        if self.cfg.floor_recovery {
                            // the refusal names the fence's highest token (StaleToken.highest)
                            let c = &mut self.clients[client];
                            let floor = FencingToken(stale.highest.0.saturating_add(1));
                            c.floor = Some(c.floor.map_or(floor, |f| f.max(floor)));
                            c.refused = Some(token);
                        }
                    }
                }
            }
        }
    }

    /// A request part reaches its Redlock master: it waits while the master is stopped
    /// and is refused while it restarts.
    fn deliver_redlock(&mut self, client: usize, request: Request) {
        let Some(m) = MemoryRedlock::master_of(&request.body) else {
            return;
        };
        let paused_until = self.master_paused_until[m];
        if paused_until > self.now {
            self.push(paused_until, Ev::Deliver(Msg::Request { client, request }));
            return;
        }
        let reply = if self.master_down_until[m] > self.now {
            Reply::Redis(RedisValue::Error("LOADING master restarting".into()))
        } else {
            self.masters.execute(self.now, &request.body)
        };
        self.trace(|| format!("m{m}: {:?} from c{client} → {reply:?}", request.operation));
        self.send(Msg::Reply {
            client,
            request: request.id,
            reply,
        });
    }

    /// A request reaches the etcd server.
    fn deliver_etcd(&mut self, client: usize, request: Request) {
        let crate::RequestBody::Etcd(call) = &request.body else {
            return;
        };
        let reply = if self.now < self.etcd_unavailable_until {
            etcd_error(14, "etcdserver: leader changed")
        } else if let EtcdRequest::Watch(w) = call {
            match self.etcd.watch(self.now, w) {
                Some(events) => events,
                None => {
                    self.trace(|| {
                        format!(
                            "server: c{client} watches {} from {}",
                            w.key, w.start_revision
                        )
                    });
                    self.watches.push((client, request.id, w.clone()));
                    return;
                }
            }
        } else {
            self.etcd.call(self.now, call)
        };
        self.trace(|| {
            let name = match call {
                EtcdRequest::LeaseGrant { .. } => "lease grant",
                EtcdRequest::LeaseKeepAlive { .. } => "keep-alive",
                EtcdRequest::LeaseRevoke { .. } => "revoke",
                EtcdRequest::Txn(_) => "txn",
                EtcdRequest::Range(_) => "range",
                _ => "call",
            };
            format!(
                "server: {:?} {name} from c{client} → {reply}",
                request.operation
            )
        });
        self.send(Msg::Reply {
            client,
            request: request.id,
            reply: Reply::Etcd(reply),
        });
        self.serve_watches();
    }

    /// Answers the registered watches that fire now, first registered first.
    fn serve_watches(&mut self) {
        let mut i = 0;
        while i < self.watches.len() {
            let fired = self.etcd.watch(self.now, &self.watches[i].2);
            match fired {
                Some(events) => {
                    let (client, request, _) = self.watches.remove(i);
                    self.trace(|| format!("server: wakes c{client}"));
                    self.send(Msg::Reply {
                        client,
                        request,
                        reply: Reply::Etcd(events),
                    });
                }
                None => i += 1,
            }
        }
    }

    /// Serves blocked `BLPOP`s whose list now has an item, first blocked first.
    fn serve_blocked(&mut self) {
        let mut i = 0;
        while i < self.blocked.len() {
            if let Some(v) = self.server.lpop(self.now, &self.blocked[i].key) {
                let b = self.blocked.remove(i);
                self.trace(|| format!("server: wakes c{}", b.client));
                self.send(Msg::Reply {
                    client: b.client,
                    request: b.request,
                    reply: Reply::Redis(RedisValue::Array(vec![
                        RedisValue::Data(b.key),
                        RedisValue::Data(v),
                    ])),
                });
            } else {
                i += 1;
            }
        }
    }

    fn resume(&mut self, c: usize) {
        if self.clients[c].paused_until.is_some_and(|t| t > self.now) {
            return; // extended by a later pause
        }
        self.clients[c].paused_until = None;
        self.trace(|| format!("c{c}: resumes"));
        // The seed story: a write checked before the pause goes out now, unchecked.
        if let Some((token, owner)) = self.clients[c].write_after_pause.take() {
            self.trace(|| {
                format!("c{c}: sends the write it checked before pausing (token {token})")
            });
            self.send(Msg::Write {
                client: c,
                token,
                owner,
            });
        }
        // Timers first (the machine fires them before any input anyway), then messages.
        let now = self.clients[c].local(self.now);
        self.input(c, Input::Timeout { now });
        while let Some(msg) = self.clients[c].inbox.pop_front() {
            self.deliver(msg);
        }
    }

    fn pause(&mut self, c: usize) -> bool {
        if !self.chance(self.cfg.faults.p_pause) {
            return false;
        }
        let len = self.uniform(self.cfg.faults.pause_max);
        let until = self.now + len;
        self.trace(|| format!("c{c}: process paused for {len:?}"));
        self.clients[c].paused_until = Some(until);
        self.push(until, Ev::Resume { client: c });
        true
    }

    /// The client's own work: acquire after thinking, write while holding, release.
    fn work(&mut self, c: usize) {
        match self.clients[c].work.clone() {
            Work::Idle => {
                if self
                    .cfg
                    .cycles_per_client
                    .is_some_and(|n| self.clients[c].cycles >= n)
                {
                    return; // done contending
                }
                let mut options = self.cfg.options.clone();
                // the floor is the Redis and PostgreSQL recipes'; servers that assign
                // tokens refuse it
                let floor = self.clients[c].floor.take();
                let takes_floor = match self.cfg.backend {
                    SimBackend::Redis => true,
                    #[cfg(feature = "postgres")]
                    SimBackend::PostgresLease => true,
                    _ => false,
                };
                if takes_floor {
                    options.token_floor = floor;
                }
                options.acquire_timeout = match self.rng.next_u64() % 4 {
                    0 => Some(Duration::ZERO),
                    1 => Some(self.cfg.options.ttl * 2),
                    _ => None,
                };
                if self.checker.fault_free {
                    options.acquire_timeout = None;
                }
                let now = self.clients[c].local(self.now);
                match self.clients[c].machine.acquire(now, LOCK_NAME, options) {
                    Ok(lock) => {
                        self.trace(|| format!("c{c}: acquire (lock {lock})"));
                        self.clients[c].work = Work::Acquiring { lock };
                        self.clients[c].waiting_since = Some(self.now);
                        self.drain(c);
                        if !self.checker.fault_free {
                            // maybe an impatient host cancels before it is granted
                            let patience = self.uniform(self.cfg.options.ttl * 2);
                            self.schedule_work(c, patience);
                        }
                    }
                    Err(e) => self.outcome.violations.push(Violation {
                        property: Property::S1,
                        at: self.now,
                        detail: format!("the machine refused a valid acquire: {e}"),
                        explained_by_breach: false,
                    }),
                }
            }
            Work::Holding {
                lock,
                token,
                writes_left,
            } => {
                let local = self.clients[c].local(self.now);
                let valid = self.clients[c]
                    .machine
                    .valid_until(lock)
                    .is_some_and(|v| local < v);
                if !valid {
                    return; // the event telling us is on its way
                }
                // refused: this lease cannot write; release and come back above the floor
                if writes_left == 0 || self.clients[c].refused.take() == Some(token) {
                    self.trace(|| format!("c{c}: release (lock {lock})"));
                    self.clients[c].work = Work::Releasing { lock };
                    self.input(c, Input::Release { now: local, lock });
                    return;
                }
                let owner = self.clients[c]
                    .machine
                    .owner(lock)
                    .unwrap_or(OwnerId([0; 16]));
                // checked valid; a pause may strike between the check and the send
                if self.pause(c) {
                    self.clients[c].write_after_pause = Some((token, owner));
                } else {
                    self.send(Msg::Write {
                        client: c,
                        token,
                        owner,
                    });
                }
                self.clients[c].work = Work::Holding {
                    lock,
                    token,
                    writes_left: writes_left - 1,
                };
                let step = self.uniform(self.cfg.options.ttl / 3);
                self.schedule_work(c, step);
            }
            Work::Acquiring { lock } => {
                if self.rng.next_u64() % 4 == 0 {
                    let now = self.clients[c].local(self.now);
                    self.trace(|| format!("c{c}: cancels acquiring (lock {lock})"));
                    self.clients[c].work = Work::Releasing { lock };
                    self.input(c, Input::Release { now, lock });
                }
            }
            Work::Releasing { .. } => {}
        }
    }

    fn input(&mut self, c: usize, input: Input) {
        if let Err(e) = self.clients[c].machine.handle_input(input) {
            // Releasing a lock the machine already forgot is fine; anything else is a bug.
            if !matches!(e, crate::UsageError::UnknownLock { .. }) {
                self.outcome.violations.push(Violation {
                    property: Property::S1,
                    at: self.now,
                    detail: format!("c{c}: input rejected: {e}"),
                    explained_by_breach: false,
                });
            }
        }
        self.drain(c);
    }

    fn drain(&mut self, c: usize) {
        loop {
            match self.clients[c].machine.poll_output() {
                Output::Request(request) => {
                    if self.clients[c].finished.contains(&request.lock)
                        && request.operation != Operation::Release
                    {
                        let detail = format!(
                            "c{c}: lock {} finished, then sent {:?}",
                            request.lock, request.operation
                        );
                        self.checker
                            .violate(Property::S3, self.now, detail, &mut self.outcome);
                    }
                    let deadline = self.clients[c].true_of(request.deadline);
                    self.push(
                        deadline.max(self.now),
                        Ev::Deadline {
                            client: c,
                            request: request.id,
                        },
                    );
                    self.trace(|| {
                        format!(
                            "c{c}: sends {:?} (request {})",
                            request.operation, request.id.0
                        )
                    });
                    #[cfg(feature = "zookeeper")]
                    if self.cfg.backend == SimBackend::ZooKeeper {
                        let session = self.zk.sessions[c];
                        self.zk.sent_on.insert((c, request.id), session);
                        if let crate::RequestBody::ZooKeeper(ZkRequest::Watch {
                            timeout_ms, ..
                        }) = &request.body
                        {
                            let local = self.clients[c].local(self.now)
                                + Duration::from_millis(*timeout_ms);
                            let at = self.clients[c].true_of(local).max(self.now);
                            self.push(
                                at,
                                Ev::WatchTimeout {
                                    client: c,
                                    request: request.id,
                                },
                            );
                        }
                    }
                    #[cfg(feature = "postgres")]
                    if self.cfg.backend == SimBackend::PostgresLease {
                        self.pg_sent(c, &request);
                    }
                    if let crate::RequestBody::Etcd(EtcdRequest::Watch(w)) = &request.body {
                        // the host cancels the watch at its timeout, on its own clock
                        let local =
                            self.clients[c].local(self.now) + Duration::from_millis(w.timeout_ms);
                        let at = self.clients[c].true_of(local).max(self.now);
                        self.push(
                            at,
                            Ev::WatchTimeout {
                                client: c,
                                request: request.id,
                            },
                        );
                    }
                    self.clients[c]
                        .in_flight
                        .insert(request.id, request.clone());
                    self.send(Msg::Request { client: c, request });
                }
                Output::Event { lock, event } => self.on_event(c, lock, event),
                Output::Timeout(local) => {
                    if self.clients[c].timer_local != Some(local) {
                        self.clients[c].timer_local = Some(local);
                        let at = self.clients[c].true_of(local).max(self.now);
                        self.push(at, Ev::Timer { client: c, local });
                    }
                    break;
                }
                Output::Idle => break,
            }
        }
    }

    fn on_event(&mut self, c: usize, lock: LockId, event: Event) {
        self.trace(|| format!("c{c}: event {event:?} (lock {lock})"));
        match event {
            Event::Acquired { token, .. } => {
                if !self.masters.masters.is_empty() {
                    // a Redlock grant is the majority's, seen by the client only
                    self.outcome.grants += 1;
                }
                if let Some(since) = self.clients[c].waiting_since.take() {
                    self.checker.waited(c, since, self.now);
                }
                let writes = 1 + (self.rng.next_u64() % 5) as u32;
                self.clients[c].work = Work::Holding {
                    lock,
                    token,
                    writes_left: writes,
                };
                self.schedule_work(c, Duration::ZERO);
            }
            Event::Renewed { .. } => {}
            Event::Lost { .. } | Event::Released | Event::AcquireFailed { .. } => {
                if matches!(
                    self.clients[c].work,
                    Work::Holding { .. } | Work::Releasing { .. }
                ) {
                    self.clients[c].cycles += 1;
                }
                self.clients[c].finished.push(lock);
                self.clients[c].waiting_since = None;
                self.clients[c].work = Work::Idle;
                let think = self.uniform(Duration::from_millis(200));
                self.schedule_work(c, think);
            }
        }
    }

    fn check(&mut self) {
        if self.cfg.backend == SimBackend::Etcd {
            return self.check_etcd();
        }
        #[cfg(feature = "zookeeper")]
        if self.cfg.backend == SimBackend::ZooKeeper {
            return self.check_zk();
        }
        #[cfg(feature = "kubernetes")]
        if self.cfg.backend == SimBackend::Kubernetes {
            return self.check_kube();
        }
        #[cfg(feature = "postgres")]
        if self.cfg.backend == SimBackend::PostgresLease {
            return self.check_pg();
        }
        if !self.masters.masters.is_empty() {
            return self.check_redlock();
        }
        let held = self.server.get(self.now, &self.lock_key).is_some();
        self.checker
            .idle_check(self.now, held, &self.clients, &mut self.outcome);
        if let Some(detail) = s2_redis(&self.server, self.now, &self.lock_key, self.beliefs()) {
            self.checker
                .violate(Property::S2, self.now, detail, &mut self.outcome);
        }
    }

    /// What each client believes about its lease now (the clients whose clock has not
    /// passed their lock's validity).
    fn beliefs(&self) -> impl Iterator<Item = Belief> + '_ {
        let now = self.now;
        self.clients
            .iter()
            .enumerate()
            .filter_map(move |(c, client)| {
                let (lock, token) = match client.work {
                    Work::Holding { lock, token, .. } => (lock, Some(token)),
                    Work::Releasing { lock } | Work::Acquiring { lock } => (lock, None),
                    Work::Idle => return None,
                };
                let valid_until = client.machine.valid_until(lock)?;
                if client.local(now) >= valid_until {
                    return None;
                }
                Some(Belief {
                    client: c,
                    lock,
                    token,
                    owner: client.machine.owner(lock)?,
                    valid_until,
                    believed_until: client.true_of(valid_until),
                })
            })
    }
}

/// One client's belief at a check: it holds `lock` (with `token`, when its host has
/// seen the grant) until `valid_until` on its own clock, `believed_until` in true time.
/// The simulator's and the model checker's clients alike, for the S2 checks.
#[derive(Clone, Debug)]
pub(crate) struct Belief {
    pub client: usize,
    pub lock: LockId,
    pub token: Option<FencingToken>,
    pub owner: OwnerId,
    pub valid_until: Instant,
    pub believed_until: Instant,
}

/// S2 on one Redis: every believer's owner id holds the lock key, expiring no earlier
/// than the believed instant. The first breach, described.
pub(crate) fn s2_redis(
    server: &MemoryRedis,
    now: Instant,
    lock_key: &str,
    beliefs: impl IntoIterator<Item = Belief>,
) -> Option<String> {
    let holder = server.get(now, lock_key);
    let expires = server.expires_at(now, lock_key);
    beliefs.into_iter().find_map(|b| {
        let ok = holder.is_some_and(|h| is_hex_of(h, &b.owner))
            && expires.is_some_and(|e| e >= b.believed_until);
        (!ok).then(|| {
            format!(
                "c{} believes it holds lock {} until {} (its clock: {}), \
                 but the server's holder is {holder:?}, expiring at {expires:?}",
                b.client, b.lock, b.believed_until, b.valid_until
            )
        })
    })
}

impl Simulation {
    /// S1 at the server (every new holder key has a higher create revision), S2 and S4
    /// against the etcd server: the holder is the key with the lowest create revision
    /// under the lock's prefix, and it holds until its lease expires.
    fn check_etcd(&mut self) {
        let holder = self.etcd.first_under(self.now, &self.etcd_prefix);
        let holder_rev = holder.as_ref().map(|(_, kv)| kv.create_revision);
        if holder_rev.is_some() && holder_rev != self.etcd_holder {
            let token = FencingToken(holder_rev.unwrap_or(0) as u64);
            self.outcome.grants += 1;
            self.checker.grant(self.now, token, None, &mut self.outcome);
            self.trace(|| format!("server: the key with revision {token} now holds the lock"));
        }
        self.etcd_holder = holder_rev;
        self.checker
            .idle_check(self.now, holder.is_some(), &self.clients, &mut self.outcome);
        if let Some(detail) = s2_etcd(
            &self.etcd,
            holder.as_ref(),
            self.cfg.etcd_shared_lease,
            self.beliefs(),
        ) {
            self.checker
                .violate(Property::S2, self.now, detail, &mut self.outcome);
        }
    }
}

/// S2 on etcd: every believer's key is the `holder` (the key with the lowest create
/// revision under the lock's prefix, [`MemoryEtcd::first_under`]), with the believer's
/// token as its create revision when known, its lease expiring no earlier than the
/// believed instant. The key's lease is the believer's own unless the lease is
/// `shared` (then any: the key's name says whose it is). The first breach, described.
pub(crate) fn s2_etcd(
    etcd: &MemoryEtcd,
    holder: Option<&(String, crate::memory::EtcdKv)>,
    shared: bool,
    beliefs: impl IntoIterator<Item = Belief>,
) -> Option<String> {
    let expires = holder.and_then(|(_, kv)| etcd.lease_expires_at(kv.lease));
    beliefs.into_iter().find_map(|b| {
        let ok = holder.is_some_and(|(key, kv)| {
            (shared || kv.lease == lease_id(&b.owner))
                && key.ends_with(&format!("{:016x}", lease_id(&b.owner)))
                && b.token.is_none_or(|t| t.get() == kv.create_revision as u64)
        }) && expires.is_some_and(|e| e >= b.believed_until);
        (!ok).then(|| {
            format!(
                "c{} believes it holds lock {} (token {:?}) until {} (its clock: {}), \
                 but the server's holder is {holder:?}, its lease expiring at {expires:?}",
                b.client, b.lock, b.token, b.believed_until, b.valid_until
            )
        })
    })
}

impl Simulation {
    /// S2 and S4 on the Redlock masters: while a client's clock has not passed its
    /// `valid_until`, a majority of masters hold the key for its owner until at least
    /// then, or are down until then (two majorities share a master, so that is mutual
    /// exclusion too). S1 is not
    /// checked: a Redlock token is the granting majority's highest counter, which can
    /// go backwards between grants (`core/src/backends/redlock.rs`).
    fn check_redlock(&mut self) {
        let (held, breach) = s2_redlock(
            &self.masters,
            &self.master_down_until,
            self.now,
            &self.lock_key,
            self.beliefs(),
        );
        self.checker
            .idle_check(self.now, held, &self.clients, &mut self.outcome);
        if let Some(detail) = breach {
            self.checker
                .violate(Property::S2, self.now, detail, &mut self.outcome);
        }
    }
}

/// S2 on Redlock masters: every believer's owner id holds the key on a majority until
/// the believed instant, a master down (restarting) until then counting for it. Whether
/// a majority holds the key for anyone, and the first breach, described.
pub(crate) fn s2_redlock(
    masters: &MemoryRedlock,
    down_until: &[Instant],
    now: Instant,
    lock_key: &str,
    beliefs: impl IntoIterator<Item = Belief>,
) -> (bool, Option<String>) {
    let n = masters.masters.len();
    let quorum = n / 2 + 1;
    let holders: Vec<Option<(String, Option<Instant>)>> = masters
        .masters
        .iter()
        .map(|m| {
            m.get(now, lock_key)
                .map(|h| (h.to_owned(), m.expires_at(now, lock_key)))
        })
        .collect();
    let held = holders
        .iter()
        .flatten()
        .any(|(h, _)| holders.iter().flatten().filter(|(o, _)| o == h).count() >= quorum);
    let breach = beliefs.into_iter().find_map(|b| {
        // A master restarted without persistence and still down cannot vote for
        // anyone: until it is back it stands for the key it forgot (the delayed
        // restart's point).
        let holding = holders
            .iter()
            .zip(down_until)
            .filter(|(h, &down)| {
                down >= b.believed_until
                    || h.as_ref().is_some_and(|(h, e)| {
                        is_hex_of(h, &b.owner) && e.is_some_and(|e| e >= b.believed_until)
                    })
            })
            .count();
        (holding < quorum).then(|| {
            format!(
                "c{} believes it holds lock {} until {} (its clock: {}), \
                 but only {holding} of {n} masters hold it for it that long: {holders:?}",
                b.client, b.lock, b.believed_until, b.valid_until
            )
        })
    });
    (held, breach)
}

/// Whether `s` is the 32-hex-digit form of `owner`, without allocating.
pub(crate) fn is_hex_of(s: &str, owner: &OwnerId) -> bool {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let b = s.as_bytes();
    b.len() == 32
        && owner.0.iter().enumerate().all(|(i, x)| {
            b[2 * i] == HEX[(x >> 4) as usize] && b[2 * i + 1] == HEX[(x & 15) as usize]
        })
}

fn unit(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

pub(crate) fn request_owner(request: &Request) -> String {
    match &request.body {
        crate::RequestBody::Redis(cmd) => cmd.args.first().cloned().unwrap_or_default(),
        _ => String::new(),
    }
}

fn describe(msg: &Msg) -> String {
    match msg {
        Msg::Request { client, request } => format!(
            "c{client}'s {:?} request {}",
            request.operation, request.id.0
        ),
        Msg::Reply {
            client, request, ..
        } => format!("the reply to c{client}'s request {}", request.0),
        Msg::Write { client, token, .. } => format!("c{client}'s write with token {token}"),
        #[cfg(feature = "zookeeper")]
        Msg::Ping { client, session } => format!("c{client}'s ping of session {session:#x}"),
    }
}

#[cfg(feature = "zookeeper")]
impl Simulation {
    /// The client library learns its session expired and opens a new one.
    fn zk_reconnect(&mut self, client: usize) {
        let session = self.zk.server.connect(self.now, self.cfg.options.ttl);
        self.trace(|| format!("c{client}: session expired, new session {session:#x}"));
        self.zk.sessions[client] = session;
    }

    /// A request reaches the ZooKeeper ensemble.
    fn deliver_zk(&mut self, client: usize, request: Request) {
        let crate::RequestBody::ZooKeeper(call) = &request.body else {
            return;
        };
        let current = self.zk.sessions[client];
        let session = self
            .zk
            .sent_on
            .get(&(client, request.id))
            .copied()
            .unwrap_or(current);
        let reply = if self.now < self.zk.unavailable_until || session != current {
            // no quorum, or the connection it was sent on is gone with its session
            crate::memory::zk_error("connection_loss", session)
        } else if !self.zk.server.alive(self.now, session) {
            self.zk_reconnect(client);
            crate::memory::zk_error("session_expired", session)
        } else if let ZkRequest::Watch { path, .. } = call {
            self.zk.server.touch(self.now, session);
            if self.zk.server.get(path).is_some() {
                self.trace(|| format!("server: c{client} watches {path}"));
                self.zk
                    .watches
                    .push((client, request.id, path.clone(), session));
                return;
            }
            format!(r#"{{"event":"no_node","session":{session}}}"#)
        } else {
            self.zk.server.call(self.now, session, call)
        };
        self.trace(|| {
            format!(
                "server: {:?} {} from c{client} → {reply}",
                request.operation,
                call.call_name()
            )
        });
        self.send(Msg::Reply {
            client,
            request: request.id,
            reply: Reply::ZooKeeper(reply),
        });
        self.serve_zk_watches();
    }

    /// Answers the watches whose node is gone, first registered first.
    fn serve_zk_watches(&mut self) {
        let mut i = 0;
        while i < self.zk.watches.len() {
            if self.zk.server.get(&self.zk.watches[i].2).is_none() {
                let (client, request, _, session) = self.zk.watches.remove(i);
                self.trace(|| format!("server: wakes c{client}"));
                self.send(Msg::Reply {
                    client,
                    request,
                    reply: Reply::ZooKeeper(format!(
                        r#"{{"event":"deleted","session":{session}}}"#
                    )),
                });
            } else {
                i += 1;
            }
        }
    }

    /// S1 at the server (every new holder node has a higher czxid), S2 and S4 against
    /// the ensemble: the holder is the lowest contender node under the lock's path, and
    /// it holds until its session expires.
    fn check_zk(&mut self) {
        self.zk.server.expire(self.now);
        let path = self.zk.settings.lock_path(LOCK_NAME);
        let children = self.zk.server.children(&path);
        let holder =
            crate::backends::zookeeper::sorted_contenders(self.zk.settings.naming, &children)
                .first()
                .map(|n| {
                    (
                        (*n).to_owned(),
                        self.zk.server.get(&format!("{path}/{n}")).cloned(),
                    )
                });
        let holder = holder.and_then(|(name, node)| node.map(|n| (name, n)));
        let czxid = holder.as_ref().map(|(_, n)| n.czxid);
        if czxid.is_some() && czxid != self.zk.holder {
            let token = FencingToken(czxid.unwrap_or(0) as u64);
            self.outcome.grants += 1;
            self.checker.grant(self.now, token, None, &mut self.outcome);
            self.trace(|| format!("server: the node with czxid {token} now holds the lock"));
        }
        self.zk.holder = czxid;
        let expires = holder
            .as_ref()
            .and_then(|(_, n)| self.zk.server.session_expires_at(n.ephemeral_owner));
        self.checker
            .idle_check(self.now, holder.is_some(), &self.clients, &mut self.outcome);
        let breach = s2_zk(&self.zk.settings, holder.as_ref(), expires, self.beliefs());
        if let Some(detail) = breach {
            self.checker
                .violate(Property::S2, self.now, detail, &mut self.outcome);
        }
    }
}

/// S2 on ZooKeeper: every believer's node is the `holder` (the lowest contender node
/// under the lock's path), with the believer's token as its czxid when known, its
/// session expiring (`expires`) no earlier than the believed instant. The first
/// breach, described.
#[cfg(feature = "zookeeper")]
pub(crate) fn s2_zk(
    settings: &ZooKeeperBackend,
    holder: Option<&(String, crate::memory::ZNode)>,
    expires: Option<Instant>,
    beliefs: impl IntoIterator<Item = Belief>,
) -> Option<String> {
    beliefs.into_iter().find_map(|b| {
        let prefix = settings.node_prefix(&b.owner);
        let ok = holder.is_some_and(|(name, n)| {
            name.starts_with(&prefix) && b.token.is_none_or(|t| t.get() == n.czxid as u64)
        }) && expires.is_some_and(|e| e >= b.believed_until);
        (!ok).then(|| {
            format!(
                "c{} believes it holds lock {} (token {:?}) until {} (its clock: {}), \
                 but the ensemble's holder is {holder:?}, its session expiring at {expires:?}",
                b.client, b.lock, b.token, b.believed_until, b.valid_until
            )
        })
    })
}

#[cfg(feature = "kubernetes")]
impl Simulation {
    /// The API server restarts: it answers `503 ServiceUnavailable` for up to one TTL,
    /// then serves again with every Lease kept (they live in etcd): inside the model.
    fn kube_restart(&mut self) {
        let down = self.uniform(self.cfg.options.ttl);
        self.trace(|| format!("server: the API server restarts, back in {down:?}"));
        self.kube.unavailable_until = self.now + down;
        self.server_epoch += 1;
        self.checker.server_restarted();
        let next = self.exp_interval(self.cfg.faults.p_server_restart);
        self.push(next, Ev::ServerRestart);
    }

    /// A request reaches the API server.
    fn deliver_kube(&mut self, client: usize, request: Request) {
        let crate::RequestBody::Kubernetes(call) = &request.body else {
            return;
        };
        let reply = if self.now < self.kube.unavailable_until {
            crate::memory::kube_status(
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
                "",
            )
        } else {
            self.kube.server.call(self.now, call)
        };
        self.trace(|| {
            format!(
                "server: {:?} {} from c{client} → {reply:.160}",
                request.operation, call.method
            )
        });
        self.send(Msg::Reply {
            client,
            request: request.id,
            reply: Reply::Kubernetes(reply),
        });
    }

    /// S1 at the server (every new holder of the Lease, or a new `leaseTransitions`
    /// under a holder, is a grant whose token must be higher than every earlier one),
    /// S2 and S4 against the Lease.
    fn check_kube(&mut self) {
        let lease = (self.kube.server).lease(&self.kube.settings.namespace, LOCK_NAME);
        let holder = lease.and_then(kube_holder);
        if let Some((who, transitions)) = &holder {
            if self.kube.holder.as_ref() != Some(&(who.clone(), *transitions)) {
                let token = FencingToken(*transitions as u64);
                self.outcome.grants += 1;
                let owner = OwnerId::from_hex(who);
                self.checker
                    .grant(self.now, token, owner, &mut self.outcome);
                self.trace(|| format!("server: {who} holds the Lease with token {token}"));
            }
        }
        let breach = s2_kube(holder.as_ref(), self.beliefs());
        self.kube.holder = holder;
        let held = self.kube.holder.is_some();
        self.checker
            .idle_check(self.now, held, &self.clients, &mut self.outcome);
        if let Some(detail) = breach {
            self.checker
                .violate(Property::S2, self.now, detail, &mut self.outcome);
        }
    }
}

/// The holder of a stored Lease and its `leaseTransitions`, when it has one.
#[cfg(feature = "kubernetes")]
pub(crate) fn kube_holder(lease: &serde_json::Value) -> Option<(String, i64)> {
    let holder = lease.pointer("/spec/holderIdentity")?.as_str()?;
    let transitions = lease.pointer("/spec/leaseTransitions")?.as_i64()?;
    (!holder.is_empty()).then(|| (holder.to_owned(), transitions))
}

/// S2 on a Kubernetes Lease: every believer's owner id is the Lease's holder, with the
/// believer's token as its `leaseTransitions` when known. The Lease never expires on
/// the server: what ends a holder's lease is another candidate's takeover, and a
/// takeover while a believer's clock has not passed its validity is the breach. The
/// first breach, described.
#[cfg(feature = "kubernetes")]
pub(crate) fn s2_kube(
    holder: Option<&(String, i64)>,
    beliefs: impl IntoIterator<Item = Belief>,
) -> Option<String> {
    beliefs.into_iter().find_map(|b| {
        let ok = holder.is_some_and(|(who, transitions)| {
            is_hex_of(who, &b.owner) && b.token.is_none_or(|t| t.get() == *transitions as u64)
        });
        (!ok).then(|| {
            format!(
                "c{} believes it holds lock {} (token {:?}) until {} (its clock: {}), \
                 but the Lease's holder and leaseTransitions are {holder:?}",
                b.client, b.lock, b.token, b.believed_until, b.valid_until
            )
        })
    })
}

// ---- the checker -----------------------------------------------------------------------

/// Verifies S1–S4 as the schedule runs.
#[derive(Clone, Debug)]
pub(crate) struct Checker {
    within_model: bool,
    /// Whether grants carry fencing tokens to check (not on Redlock, see
    /// `Simulation::check_redlock`).
    tokens: bool,
    fault_free: bool,
    last_grant: Option<FencingToken>,
    last_accepted: Option<(FencingToken, OwnerId)>,
    /// Grants so far, and the place of each in grant order by token and owner (`None`
    /// where the server's grant names no owner id: etcd, whose tokens are unique).
    grants_made: u64,
    grant_order: BTreeMap<(FencingToken, Option<[u8; 16]>), u64>,
    server_restarts: u32,
    idle_since: Option<Instant>,
    idle_bound: Duration,
    longest_wait: Duration,
    cycles: Option<u32>,
}

impl Checker {
    pub(crate) fn new(within_model: bool, fault_free: bool, cfg: &SimConfig) -> Self {
        Checker {
            within_model,
            tokens: !matches!(cfg.backend, SimBackend::Redlock(_)),
            fault_free,
            last_grant: None,
            last_accepted: None,
            grants_made: 0,
            grant_order: BTreeMap::new(),
            server_restarts: 0,
            idle_since: None,
            // the longest backoff step plus one round trip (two one-way delays)
            idle_bound: cfg.options.retry_max + cfg.faults.delay_max * 2,
            longest_wait: Duration::ZERO,
            cycles: cfg.cycles_per_client,
        }
    }

    /// Records the first violation of each property in a schedule.
    pub(crate) fn violate(
        &mut self,
        property: Property,
        at: Instant,
        detail: String,
        outcome: &mut Outcome,
    ) {
        if outcome.violations.iter().any(|v| v.property == property) {
            return;
        }
        outcome.violations.push(Violation {
            property,
            at,
            detail,
            explained_by_breach: !self.within_model,
        });
    }

    fn server_restarted(&mut self) {
        self.server_restarts += 1;
    }

    pub(crate) fn grant(
        &mut self,
        at: Instant,
        token: FencingToken,
        owner: Option<OwnerId>,
        outcome: &mut Outcome,
    ) {
        self.grants_made += 1;
        // a later grant of the same pair (the same owner given the same token again
        // after a restart) is the one its later writes belong to
        self.grant_order
            .insert((token, owner.map(|o| o.0)), self.grants_made);
        if let Some(last) = self.last_grant {
            if token <= last {
                let detail = format!("granted token {token} after token {last}");
                self.violate(Property::S1, at, detail, outcome);
            }
        }
        self.last_grant = Some(self.last_grant.map_or(token, |l| l.max(token)));
    }

    /// A write the resource accepted; `shared_with`: another owner that wrote with the
    /// same token before.
    pub(crate) fn accepted(
        &mut self,
        at: Instant,
        token: FencingToken,
        owner: OwnerId,
        shared_with: Option<OwnerId>,
        outcome: &mut Outcome,
    ) {
        if !self.tokens {
            return;
        }
        // The fence must survive whatever else happens: never explained by a breach.
        if let Some((last, _)) = self.last_accepted {
            if token < last {
                outcome.violations.push(Violation {
                    property: Property::S1,
                    at,
                    detail: format!("the resource accepted token {token} after token {last}"),
                    explained_by_breach: false,
                });
                return;
            }
        }
        if let Some(first) = shared_with {
            let detail = format!("token {token} was used by two owners ({first} and {owner})");
            self.violate(Property::S1, at, detail, outcome);
        }
        self.last_accepted = Some((token, owner));
    }

    /// Where the grant that gave `owner` its `token` stands in grant order.
    pub(crate) fn grant_place(&self, token: FencingToken, owner: OwnerId) -> Option<u64> {
        let by_owner = self.grant_order.get(&(token, Some(owner.0)));
        by_owner
            .or_else(|| self.grant_order.get(&(token, None)))
            .copied()
    }

    /// Whether a grant at `place` is the newest the server made.
    pub(crate) fn is_newest_grant(&self, place: Option<u64>) -> bool {
        self.grants_made > 0 && place == Some(self.grants_made)
    }

    fn waited(&mut self, _client: usize, since: Instant, now: Instant) {
        self.longest_wait = self.longest_wait.max(now.saturating_duration_since(since));
    }

    /// S4: while a contender waits and nobody holds the lock, the gap stays bounded.
    fn idle_check(&mut self, now: Instant, held: bool, clients: &[Client], outcome: &mut Outcome) {
        if !self.fault_free {
            return;
        }
        let waiting = clients
            .iter()
            .any(|c| matches!(c.work, Work::Acquiring { .. }));
        if held || !waiting {
            self.idle_since = None;
            return;
        }
        let since = *self.idle_since.get_or_insert(now);
        let idle = now.saturating_duration_since(since);
        if idle > self.idle_bound {
            let detail = format!(
                "the lock was free for {idle:?} while a contender waited (bound {:?})",
                self.idle_bound
            );
            self.idle_since = None;
            self.violate(Property::S4, now, detail, outcome);
        }
    }

    fn at_end(&mut self, clients: &[Client], now: Instant, outcome: &mut Outcome) {
        if !self.fault_free {
            return;
        }
        let Some(cycles) = self.cycles else { return };
        for (i, c) in clients.iter().enumerate() {
            if c.cycles < cycles {
                let detail = format!(
                    "c{i} completed {} of its {cycles} lock cycles in {now}",
                    c.cycles
                );
                self.violate(Property::S4, now, detail, outcome);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_on_a_redlock_of_more_than_64_masters_picks_masters_past_the_64th() {
        let cfg = SimConfig {
            clients: 1,
            run_for: Duration::from_secs(5),
            cycles_per_client: None,
            ..SimConfig::new(|o| Faults {
                p_partition: 20.0,
                ..Faults::partitions(o.ttl)
            })
        }
        .redlock(RedlockMix::new(65));
        // about 100 partitions, each cutting a random set of the 65 masters: the set is
        // drawn for master 64 too, without a shift by 64
        let outcome = Simulation::new(cfg, 1).run();
        assert!(outcome.steps > 0);
    }

    #[test]
    fn a_uniform_draw_up_to_the_longest_duration_does_not_overflow() {
        let mut sim = Simulation::new(SimConfig::new(|_| Faults::none()), 1);
        let _ = sim.uniform(Duration::MAX);
    }
}
