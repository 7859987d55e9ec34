//! A bounded model checker of the real [`Machine`] (feature `model`, test-only).
//!
//! Where the fault simulator ([`crate::sim`]) samples schedules at random, this explores
//! *every* schedule of a small world up to a depth bound, breadth first: 2–3 client
//! machines (each under the machine [`Contract`]) against an in-memory server
//! ([`crate::memory`]: Redis, etcd, ZooKeeper, a Kubernetes Lease, a Redlock of
//! masters, PostgreSQL lease rows), a fenced resource, and a
//! network that delivers any message in flight in any order, drops and duplicates
//! within a budget, and processes that pause within a budget (between the validity
//! check and the write, the seed story, or anywhere).
//!
//! **Time is part of the state.** It advances only to the next instant at which
//! something is due (a machine timer, a host's request deadline or watch timeout, a
//! key or lease expiring on the server), or to just before it ([`ModelConfig::epsilon`]
//! earlier), so every ordering of deliveries, pauses and resumes relative to every
//! deadline is explored. Clocks may drift within the declared bound
//! ([`ModelConfig::drift`]: the first client's clock slow by `drift_factor`, the others'
//! fast).
//!
//! **Checked in every reachable state**: the simulator's S1 (grant tokens rise; the
//! fence never accepts a lower token, nor one token from two owners), S2 (while a
//! client's clock has not passed its validity, the server holds the lock for it until
//! then) and S3 with the machine contract ([`Contract`]: nothing but an owner-checked
//! release after `Released`/`Lost`/`AcquireFailed`, every request with a deadline, the
//! event grammar), and that the tokens of the `Acquired` events of the lock never go
//! down. S4 (liveness) is not: an adversary that may delay any message for as long as
//! it likes starves any lock.
//!
//! **Why a purpose-built explorer**: the machine is not `Hash`, and a framework such as
//! `stateright` wants states that are; a breadth-first search over cloned worlds,
//! deduplicated by a 128-bit hash of each world's canonical encoding
//! ([`Machine::fingerprint`]), needs no dependency and gives the shortest counterexample.
//! Cloning a world is cheaper than replaying its path from the initial state (measured
//! in `docs/SIMULATION.md`), but a world is about 9 KB: the frontier keeps up to
//! [`ModelConfig::clones`] clones and rebuilds the rest by replay. Paths are kept as
//! parent links, and the counterexample is replayed once, traced.

use core::fmt::Write as _;
use core::hash::{Hash, Hasher};
use core::time::Duration;
use std::collections::{BTreeMap, HashSet};

use crate::backends::etcd::{EtcdRequest, EtcdWatch};
use crate::backends::{EtcdBackend, Operation, RedisBackend, RedisValue, Reply, RequestBody};
use crate::contract::Contract;
use crate::memory::{MemoryEtcd, MemoryRedis, MemoryRedlock, WATCH_TIMEOUT_REPLY};
use crate::sim::{
    request_owner, s2_etcd, s2_redis, s2_redlock, Belief, Checker, FenceRule, Property, Resource,
    SimBackend, SimConfig,
};
use crate::{
    Backend, Event, FencingToken, Input, Instant, LockId, LockOptions, Machine, OwnerId,
    RedlockBackend, Request, RequestId,
};

mod postgres;

/// The lock every client contends for.
const LOCK_NAME: &str = crate::sim::LOCK_NAME;

/// The server the clients lock on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelBackend {
    /// One [`MemoryRedis`], the plain (not fair) recipe.
    Redis,
    /// [`MemoryEtcd`]: per-contender keys, leases, watches of the predecessor.
    Etcd,
    /// [`MemoryRedlock`] with this many masters (odd, at least 3).
    Redlock(u8),
    /// [`crate::memory::MemoryZooKeeper`]: one session per client (timeout = the TTL)
    /// kept alive by its client library's pings every TTL/3 on the client's clock,
    /// which cross the network like any message; ephemeral sequential nodes, watches
    /// of the predecessor, session expiry as a due instant.
    #[cfg(feature = "zookeeper")]
    ZooKeeper,
    /// [`crate::memory::MemoryKubernetes`]: one Lease under `resourceVersion`
    /// compare-and-set, no server-side expiry; candidates take over after seeing it
    /// unchanged for its `leaseDurationSeconds`.
    #[cfg(feature = "kubernetes")]
    Kubernetes,
    /// [`crate::memory::MemoryPostgres`]: the lease-rows recipe, a row per name with
    /// server-clock expiry, contenders waiting on `LISTEN` for a release's `NOTIFY`.
    PostgresLease,
}

/// The bounds of one exploration.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    /// The reference server the clients share.
    pub backend: ModelBackend,
    /// Client processes (2–3).
    pub clients: usize,
    /// Lock cycles (acquire, write, release) each client performs.
    pub cycles: u32,
    /// The longest schedule explored, in steps (actions).
    pub depth: usize,
    /// Messages the network may drop in one schedule.
    pub drops: u8,
    /// Messages the network may duplicate in one schedule.
    pub duplicates: u8,
    /// Process pauses in one schedule.
    pub pauses: u8,
    /// Acquisitions a host may cancel in one schedule.
    pub cancels: u8,
    /// Clocks drift within the declared bound: the first client's runs slow by
    /// `drift_factor`, the others' fast by as much.
    pub drift: bool,
    /// How much earlier than a due instant the "just before" step lands.
    pub epsilon: Duration,
    /// Options of every acquisition.
    pub options: LockOptions,
    /// Stop after this many distinct states (the report says the search was cut).
    pub max_states: usize,
    /// At most this many states of the next level are kept as clones (about 9 KB
    /// each with 2 clients); the rest are rebuilt by replaying their path from the
    /// initial world when expanded: less memory, about 4 times the time at depth 9
    /// (docs/SIMULATION.md). 0 replays every state.
    pub clones: usize,
    /// Break a rule on purpose (tests of the checker).
    #[cfg(feature = "sabotage")]
    pub sabotage: crate::sabotage::Sabotage,
}

impl ModelConfig {
    /// Two clients, one cycle each, 1 s TTL, the given depth; no faults beyond
    /// reordering and timing (enable them with the budget fields).
    pub fn new(backend: ModelBackend, depth: usize) -> Self {
        let mut options = LockOptions::ttl(Duration::from_secs(1));
        options.retry_base = Duration::from_millis(10);
        options.retry_max = Duration::from_millis(200);
        ModelConfig {
            backend,
            clients: 2,
            cycles: 1,
            depth,
            drops: 0,
            duplicates: 0,
            pauses: 0,
            cancels: 0,
            drift: false,
            epsilon: Duration::from_micros(1),
            options,
            max_states: 2_000_000,
            clones: 50_000,
            #[cfg(feature = "sabotage")]
            sabotage: crate::sabotage::Sabotage::default(),
        }
    }
}

/// What an exploration found.
#[derive(Clone, Debug)]
pub struct Report {
    /// Distinct states reached (the initial one included).
    pub states: u64,
    /// Transitions taken (actions applied), duplicates of known states included.
    pub transitions: u64,
    /// The deepest level explored.
    pub depth: usize,
    /// Whether every state within the depth bound was explored (not cut by
    /// `max_states`).
    pub complete: bool,
    /// No violation, `complete`, and no state left to expand: the state space ended
    /// before the depth bound.
    pub exhausted: bool,
    /// The first violation, with the shortest schedule leading to it.
    pub violation: Option<Counterexample>,
}

/// A violation and the shortest schedule that leads to it.
#[derive(Clone, Debug)]
pub struct Counterexample {
    /// `S1`, `S2`, `S3` (the contract's rule after the final event), `contract` (the
    /// rest of the contract) or `tokens` (`Acquired` tokens went down).
    pub property: String,
    /// What was seen, as a sentence for people.
    pub detail: String,
    /// The schedule's steps (actions).
    pub length: usize,
    /// The world's timeline, one line per happening, in true time.
    pub timeline: Vec<String>,
    /// Per client, its machine's inputs as scenario-vector steps
    /// (`tests/scenarios/README.md`), on that client's clock.
    pub vectors: Vec<Vec<String>>,
}

impl core::fmt::Display for Counterexample {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        writeln!(
            f,
            "{}: {} ({} steps)",
            self.property, self.detail, self.length
        )?;
        for line in &self.timeline {
            writeln!(f, "  {line}")?;
        }
        for (c, steps) in self.vectors.iter().enumerate() {
            writeln!(f, "c{c}'s inputs as vector steps:")?;
            for s in steps {
                writeln!(f, "    {s},")?;
            }
        }
        Ok(())
    }
}

/// One step of a schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Action {
    Acquire(usize),
    /// The host cancels an acquisition (`release()` before the grant).
    Cancel(usize),
    /// The host checks its lease is valid and writes to the resource.
    Write(usize),
    /// The host checks its lease is valid, then its process stops before the write
    /// goes out (sent on resume).
    PauseBeforeWrite(usize),
    Release(usize),
    Pause(usize),
    Resume(usize),
    Deliver(usize),
    Drop(usize),
    Duplicate(usize),
    AdvanceTo(Instant),
}

#[derive(Clone, Debug)]
enum Msg {
    Request {
        client: usize,
        request: Request,
    },
    Reply {
        client: usize,
        request: RequestId,
        reply: Reply,
    },
    Write {
        client: usize,
        token: FencingToken,
        owner: OwnerId,
    },
    /// Client library → ZooKeeper: a session ping.
    #[cfg(feature = "zookeeper")]
    Ping {
        client: usize,
        session: i64,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Work {
    Idle,
    Acquiring {
        lock: LockId,
    },
    Holding {
        lock: LockId,
        token: FencingToken,
        written: bool,
    },
    Releasing {
        lock: LockId,
    },
}

/// A host request in flight: when the host cancels it (its deadline, or a watch's
/// timeout), in true time.
#[derive(Clone, Debug, Hash)]
struct HostRequest {
    deadline: Instant,
    watch_timeout: Option<Instant>,
}

#[derive(Clone)]
struct Client {
    contract: Contract,
    rate: f64,
    paused: bool,
    write_after_pause: Option<(FencingToken, OwnerId)>,
    work: Work,
    cycles_left: u32,
    /// Acquisitions started: the machine's lock ids count them.
    acquisitions: u64,
    in_flight: BTreeMap<RequestId, HostRequest>,
    /// The machine's next timer, on its own clock.
    timer: Option<Instant>,
    /// The hash of the contract's state, until the next input changes it (encoding a
    /// machine is most of the cost of a state).
    machine_hash: Option<u128>,
}

impl Client {
    fn machine_fingerprint(&self) -> u128 {
        let mut h = Fingerprint {
            buf: Vec::with_capacity(4096),
        };
        self.contract.fingerprint(&mut h);
        h.value()
    }

    fn local(&self, now: Instant) -> Instant {
        Instant::from_nanos((now.as_nanos() as f64 * self.rate) as u64)
    }

    fn true_of(&self, local: Instant) -> Instant {
        Instant::from_nanos((local.as_nanos() as f64 / self.rate).ceil() as u64)
    }
}

#[derive(Clone, Debug)]
enum Server {
    Redis(MemoryRedis),
    Etcd {
        etcd: MemoryEtcd,
        /// Watches registered, in arrival order: client, request, watch.
        watches: Vec<(usize, RequestId, EtcdWatch)>,
        /// The create revision of the key that held the lock at the last check.
        holder: Option<i64>,
    },
    Redlock(MemoryRedlock),
    Postgres(postgres::PgServer),
    #[cfg(feature = "zookeeper")]
    ZooKeeper(Box<ZkServer>),
    #[cfg(feature = "kubernetes")]
    Kubernetes {
        kube: crate::memory::MemoryKubernetes,
        /// The holder and `leaseTransitions` of the Lease at the last check.
        holder: Option<(String, i64)>,
    },
}

/// The ZooKeeper ensemble of a model world and the client libraries' sessions.
#[cfg(feature = "zookeeper")]
#[derive(Clone, Debug)]
struct ZkServer {
    zk: crate::memory::MemoryZooKeeper,
    /// Each client's current session.
    sessions: Vec<i64>,
    /// Each client library's next ping, in true time.
    next_ping: Vec<Instant>,
    /// The session each request in flight was sent on.
    sent_on: BTreeMap<(usize, RequestId), i64>,
    /// Watches registered: client, request, watched path, session.
    watches: Vec<(usize, RequestId, String, i64)>,
    /// The czxid of the node that held the lock at the last check.
    holder: Option<i64>,
}

#[derive(Clone)]
struct World {
    now: Instant,
    options: LockOptions,
    clients: Vec<Client>,
    net: Vec<Msg>,
    server: Server,
    resource: Resource,
    checker: Checker,
    drops: u8,
    duplicates: u8,
    pauses: u8,
    cancels: u8,
    /// The highest token of an `Acquired` event so far (not on Redlock).
    highest_acquired: Option<FencingToken>,
    /// The first violation: property and detail.
    violation: Option<(String, String)>,
    /// Traced replay only: the timeline, and each client's inputs as vector steps.
    trace: Option<(Vec<String>, Vec<Vec<String>>)>,
}

impl World {
    fn new(cfg: &ModelConfig) -> Self {
        let backend = match cfg.backend {
            ModelBackend::Redis => Backend::Redis(RedisBackend::default()),
            ModelBackend::Etcd => Backend::Etcd(EtcdBackend::default()),
            ModelBackend::PostgresLease => {
                Backend::Postgres(crate::backends::PostgresBackend::default())
            }
            ModelBackend::Redlock(n) => Backend::Redlock(RedlockBackend {
                masters: (0..n).map(|m| format!("m{m}")).collect(),
                ..RedlockBackend::default()
            }),
            #[cfg(feature = "zookeeper")]
            ModelBackend::ZooKeeper => Backend::ZooKeeper(crate::backends::ZooKeeperBackend {
                session_timeout_ms: Some(cfg.options.ttl_ms()),
                ..crate::backends::ZooKeeperBackend::default()
            }),
            #[cfg(feature = "kubernetes")]
            ModelBackend::Kubernetes => {
                Backend::Kubernetes(crate::backends::KubernetesBackend::default())
            }
        };
        let drift = cfg.options.drift_factor;
        let clients: Vec<Client> = (0..cfg.clients)
            .map(|c| {
                #[allow(unused_mut)]
                let mut machine = Machine::with_seed(backend.clone(), 1 + c as u64);
                #[cfg(feature = "sabotage")]
                machine.sabotage(cfg.sabotage);
                let rate = match (cfg.drift, c) {
                    (false, _) => 1.0,
                    (true, 0) => 1.0 - drift,
                    (true, _) => 1.0 + drift,
                };
                Client {
                    contract: Contract::new(machine, 0),
                    rate,
                    paused: false,
                    write_after_pause: None,
                    work: Work::Idle,
                    cycles_left: cfg.cycles,
                    acquisitions: 0,
                    in_flight: BTreeMap::new(),
                    timer: None,
                    machine_hash: None,
                }
            })
            .collect();
        let (server, sim_backend) = match cfg.backend {
            ModelBackend::Redis => (Server::Redis(MemoryRedis::new()), SimBackend::Redis),
            ModelBackend::Etcd => (
                Server::Etcd {
                    etcd: MemoryEtcd::new(),
                    watches: Vec::new(),
                    holder: None,
                },
                SimBackend::Etcd,
            ),
            ModelBackend::PostgresLease => (
                Server::Postgres(postgres::PgServer::new(cfg.clients)),
                SimBackend::PostgresLease,
            ),
            ModelBackend::Redlock(n) => (
                Server::Redlock(MemoryRedlock::new(usize::from(n))),
                SimBackend::Redlock(crate::sim::RedlockMix::new(n)),
            ),
            #[cfg(feature = "zookeeper")]
            ModelBackend::ZooKeeper => {
                let mut zk = crate::memory::MemoryZooKeeper::new();
                let sessions = (0..cfg.clients)
                    .map(|_| zk.connect(Instant::ZERO, cfg.options.ttl))
                    .collect();
                let server = ZkServer {
                    zk,
                    sessions,
                    // every library's first ping one period in, on its own clock
                    next_ping: (clients.iter())
                        .map(|c: &Client| c.true_of(Instant::ZERO + cfg.options.ttl / 3))
                        .collect(),
                    sent_on: BTreeMap::new(),
                    watches: Vec::new(),
                    holder: None,
                };
                (Server::ZooKeeper(Box::new(server)), SimBackend::ZooKeeper)
            }
            #[cfg(feature = "kubernetes")]
            ModelBackend::Kubernetes => (
                Server::Kubernetes {
                    kube: crate::memory::MemoryKubernetes::new(),
                    holder: None,
                },
                SimBackend::Kubernetes,
            ),
        };
        let mut sim = SimConfig::new(|_| crate::sim::Faults::network(cfg.options.ttl));
        sim.backend = sim_backend;
        sim.options = cfg.options.clone();
        World {
            now: Instant::ZERO,
            options: cfg.options.clone(),
            clients,
            net: Vec::new(),
            server,
            resource: Resource::new(FenceRule::TokenOnly),
            // inside the model, faults present: S1–S3 checked, S4 not
            checker: Checker::new(true, false, &sim),
            drops: cfg.drops,
            duplicates: cfg.duplicates,
            pauses: cfg.pauses,
            cancels: cfg.cancels,
            highest_acquired: None,
            violation: None,
            trace: None,
        }
    }

    fn lock_key() -> String {
        RedisBackend::default().lock_key(LOCK_NAME)
    }

    fn note(&mut self, text: impl FnOnce() -> String) {
        if let Some((lines, _)) = &mut self.trace {
            lines.push(format!("{:>14} {}", self.now.to_string(), text()));
        }
    }

    fn violate(&mut self, property: &str, detail: String) {
        if self.violation.is_none() {
            self.violation = Some((property.to_owned(), detail));
        }
    }

    // ---- the actions a state allows ----

    fn actions(&self, cfg: &ModelConfig) -> Vec<Action> {
        let mut out = Vec::new();
        for (c, client) in self.clients.iter().enumerate() {
            if client.paused {
                out.push(Action::Resume(c));
                continue;
            }
            match &client.work {
                Work::Idle if client.cycles_left > 0 => out.push(Action::Acquire(c)),
                Work::Acquiring { .. } if self.cancels > 0 => out.push(Action::Cancel(c)),
                Work::Holding { lock, written, .. } => {
                    let valid = (client.contract.machine.valid_until(*lock))
                        .is_some_and(|v| client.local(self.now) < v);
                    if valid && !written {
                        out.push(Action::Write(c));
                        if self.pauses > 0 {
                            out.push(Action::PauseBeforeWrite(c));
                        }
                    } else if valid {
                        out.push(Action::Release(c));
                    }
                }
                _ => {}
            }
            if self.pauses > 0 {
                out.push(Action::Pause(c));
            }
        }
        for (i, msg) in self.net.iter().enumerate() {
            let to_paused = match msg {
                Msg::Reply { client, .. } => self.clients[*client].paused,
                _ => false,
            };
            if !to_paused {
                out.push(Action::Deliver(i));
            }
            if self.drops > 0 {
                out.push(Action::Drop(i));
            }
            if self.duplicates > 0 {
                out.push(Action::Duplicate(i));
            }
        }
        if let Some(next) = self.next_due() {
            let before = Instant::from_nanos(
                next.as_nanos()
                    .saturating_sub(cfg.epsilon.as_nanos() as u64),
            );
            if before > self.now {
                out.push(Action::AdvanceTo(before));
            }
            out.push(Action::AdvanceTo(next));
        }
        out
    }

    /// The next instant after now at which something is due.
    fn next_due(&self) -> Option<Instant> {
        let mut due: Vec<Instant> = Vec::new();
        for c in self.clients.iter().filter(|c| !c.paused) {
            due.extend(c.timer.map(|t| c.true_of(t)));
            for r in c.in_flight.values() {
                due.push(r.deadline);
                due.extend(r.watch_timeout);
            }
        }
        let key = Self::lock_key();
        match &self.server {
            Server::Redis(r) => due.extend(r.expires_at(self.now, &key)),
            Server::Redlock(m) => due.extend(
                m.masters
                    .iter()
                    .filter_map(|r| r.expires_at(self.now, &key)),
            ),
            Server::Etcd { etcd, .. } => due.extend(etcd.next_expiry()),
            #[cfg(feature = "zookeeper")]
            Server::ZooKeeper(z) => {
                due.extend(z.zk.next_expiry());
                let running = (self.clients.iter()).zip(&z.next_ping);
                due.extend(running.filter(|(c, _)| !c.paused).map(|(_, at)| *at));
            }
            #[cfg(feature = "kubernetes")]
            Server::Kubernetes { .. } => {}
            Server::Postgres(pg) => due.extend(pg.db.next_expiry(self.now)),
        }
        due.into_iter().filter(|&t| t > self.now).min()
    }

    // ---- applying one ----

    fn apply(&mut self, action: &Action) {
        match *action {
            Action::Acquire(c) => {
                self.note(|| format!("c{c}: acquire"));
                let now = self.clients[c].local(self.now);
                let options = self.options.clone();
                self.input(
                    c,
                    Input::Acquire {
                        now,
                        name: LOCK_NAME.into(),
                        options,
                    },
                );
                self.clients[c].acquisitions += 1;
                let lock = LockId(self.clients[c].acquisitions);
                if self.clients[c].work == Work::Idle {
                    self.clients[c].work = Work::Acquiring { lock };
                }
                self.after_input(c);
            }
            Action::Cancel(c) => {
                if let Work::Acquiring { lock } = self.clients[c].work {
                    self.cancels -= 1;
                    self.note(|| format!("c{c}: cancels acquiring"));
                    self.clients[c].work = Work::Releasing { lock };
                    let now = self.clients[c].local(self.now);
                    self.input(c, Input::Release { now, lock });
                    self.after_input(c);
                }
            }
            Action::Write(c) | Action::PauseBeforeWrite(c) => {
                if let Work::Holding { lock, token, .. } = self.clients[c].work {
                    let owner =
                        (self.clients[c].contract.machine.owner(lock)).unwrap_or(OwnerId([0; 16]));
                    self.clients[c].work = Work::Holding {
                        lock,
                        token,
                        written: true,
                    };
                    if matches!(action, Action::PauseBeforeWrite(_)) {
                        self.pauses -= 1;
                        self.note(|| {
                            format!("c{c}: checks its lease valid, then its process stops")
                        });
                        self.clients[c].paused = true;
                        self.clients[c].write_after_pause = Some((token, owner));
                    } else {
                        self.note(|| format!("c{c}: writes with token {token}"));
                        self.net.push(Msg::Write {
                            client: c,
                            token,
                            owner,
                        });
                    }
                }
            }
            Action::Release(c) => {
                if let Work::Holding { lock, .. } = self.clients[c].work {
                    self.note(|| format!("c{c}: release"));
                    self.clients[c].work = Work::Releasing { lock };
                    let now = self.clients[c].local(self.now);
                    self.input(c, Input::Release { now, lock });
                    self.after_input(c);
                }
            }
            Action::Pause(c) => {
                self.pauses -= 1;
                self.note(|| format!("c{c}: process stops"));
                self.clients[c].paused = true;
            }
            Action::Resume(c) => {
                self.clients[c].paused = false;
                self.note(|| format!("c{c}: process resumes"));
                if let Some((token, owner)) = self.clients[c].write_after_pause.take() {
                    self.note(|| format!("c{c}: sends the write it checked (token {token})"));
                    self.net.push(Msg::Write {
                        client: c,
                        token,
                        owner,
                    });
                }
                self.due_at_client(c);
            }
            Action::Deliver(i) => {
                let msg = self.net.remove(i);
                self.deliver(msg);
            }
            Action::Drop(i) => {
                self.drops -= 1;
                let msg = self.net.remove(i);
                self.note(|| format!("net: drops {}", describe(&msg)));
            }
            Action::Duplicate(i) => {
                self.duplicates -= 1;
                let msg = self.net[i].clone();
                self.note(|| format!("net: duplicates {}", describe(&msg)));
                self.net.push(msg);
            }
            Action::AdvanceTo(to) => {
                self.now = to;
                self.note(|| "time passes".into());
                if let Server::Etcd { etcd, .. } = &mut self.server {
                    etcd.expire(to);
                }
                #[cfg(feature = "zookeeper")]
                if let Server::ZooKeeper(z) = &mut self.server {
                    z.zk.expire(to);
                }
                self.serve_watches();
                for c in 0..self.clients.len() {
                    if !self.clients[c].paused {
                        self.due_at_client(c);
                    }
                }
            }
        }
        self.purge();
        self.check();
    }

    /// What is due at a running client now: its machine's timer, then the host's
    /// cancellations at deadlines and watch timeouts.
    fn due_at_client(&mut self, c: usize) {
        #[cfg(feature = "zookeeper")]
        self.ping_if_due(c);
        let local = self.clients[c].local(self.now);
        if self.clients[c].timer.is_some_and(|t| t <= local) {
            self.input(c, Input::Timeout { now: local });
            self.after_input(c);
        }
        let due: Vec<(RequestId, bool)> = (self.clients[c].in_flight.iter())
            .filter_map(|(id, r)| {
                if r.watch_timeout.is_some_and(|t| t <= self.now) {
                    Some((*id, true))
                } else {
                    (r.deadline <= self.now).then_some((*id, false))
                }
            })
            .collect();
        for (request, watch) in due {
            if self.clients[c].in_flight.remove(&request).is_none() {
                continue;
            }
            let now = self.clients[c].local(self.now);
            if watch {
                let reply = match &mut self.server {
                    Server::Etcd { watches, .. } => {
                        watches.retain(|(wc, r, _)| !(*wc == c && *r == request));
                        Reply::Etcd(WATCH_TIMEOUT_REPLY.to_owned())
                    }
                    Server::Postgres(pg) => {
                        pg.forget(c, request);
                        crate::sim::wait_over()
                    }
                    #[cfg(feature = "zookeeper")]
                    Server::ZooKeeper(z) => {
                        z.watches.retain(|(wc, r, ..)| !(*wc == c && *r == request));
                        let session = z.sessions[c];
                        Reply::ZooKeeper(format!(r#"{{"event":"timeout","session":{session}}}"#))
                    }
                    _ => Reply::Etcd(WATCH_TIMEOUT_REPLY.to_owned()),
                };
                self.note(|| format!("c{c}: watch {} times out", request.0));
                self.input(
                    c,
                    Input::Reply {
                        now,
                        request,
                        reply,
                    },
                );
            } else {
                self.note(|| format!("c{c}: request {} cancelled at its deadline", request.0));
                let message = "deadline".to_owned();
                self.input(
                    c,
                    Input::TransportError {
                        now,
                        request,
                        message,
                    },
                );
            }
            self.after_input(c);
        }
    }

    fn input(&mut self, c: usize, input: Input) {
        self.clients[c].machine_hash = None;
        if let Some((_, vectors)) = &mut self.trace {
            vectors[c].push(vector_step(&input));
        }
        if let Err(breach) = self.clients[c].contract.try_feed(input) {
            let property = if breach.starts_with("after the final event") {
                "S3"
            } else {
                "contract"
            };
            self.violate(property, format!("c{c}: {breach}"));
        }
    }

    /// Takes the requests and events the client's machine emitted.
    fn after_input(&mut self, c: usize) {
        let requests = core::mem::take(&mut self.clients[c].contract.pending);
        for request in requests {
            let deadline = self.clients[c].true_of(request.deadline).max(self.now);
            let watch_timeout = match &request.body {
                RequestBody::Etcd(EtcdRequest::Watch(w)) => {
                    let local =
                        self.clients[c].local(self.now) + Duration::from_millis(w.timeout_ms);
                    Some(self.clients[c].true_of(local).max(self.now))
                }
                #[cfg(feature = "zookeeper")]
                RequestBody::ZooKeeper(crate::backends::ZkRequest::Watch {
                    timeout_ms, ..
                }) => {
                    let local =
                        self.clients[c].local(self.now) + Duration::from_millis(*timeout_ms);
                    Some(self.clients[c].true_of(local).max(self.now))
                }
                body => crate::sim::listen_timeout(body).map(|timeout| {
                    let local = self.clients[c].local(self.now) + timeout;
                    self.clients[c].true_of(local).max(self.now)
                }),
            };
            #[cfg(feature = "zookeeper")]
            if let Server::ZooKeeper(z) = &mut self.server {
                z.sent_on.insert((c, request.id), z.sessions[c]);
            }
            if let Server::Postgres(pg) = &mut self.server {
                pg.sent(c, self.now, &request);
            }
            self.note(|| {
                format!(
                    "c{c}: sends {:?} (request {})",
                    request.operation, request.id.0
                )
            });
            self.clients[c].in_flight.insert(
                request.id,
                HostRequest {
                    deadline,
                    watch_timeout,
                },
            );
            self.net.push(Msg::Request { client: c, request });
        }
        let events = core::mem::take(&mut self.clients[c].contract.events);
        for (lock, event) in events {
            self.on_event(c, lock, event);
        }
        self.clients[c].timer = self.clients[c].contract.next_timeout;
    }

    fn on_event(&mut self, c: usize, lock: LockId, event: Event) {
        self.note(|| format!("c{c}: event {event:?}"));
        match event {
            Event::Acquired { token, .. } => {
                if !matches!(self.server, Server::Redlock(_)) {
                    if let Some(h) = self.highest_acquired {
                        if token < h {
                            let detail =
                                format!("c{c} acquired with token {token} after token {h}");
                            self.violate("tokens", detail);
                        }
                    }
                    self.highest_acquired =
                        Some(self.highest_acquired.map_or(token, |h| h.max(token)));
                }
                self.clients[c].work = Work::Holding {
                    lock,
                    token,
                    written: false,
                };
            }
            Event::Renewed { .. } => {}
            Event::Lost { .. } | Event::Released | Event::AcquireFailed { .. } => {
                let client = &mut self.clients[c];
                if client.work != Work::Idle {
                    client.cycles_left = client.cycles_left.saturating_sub(1);
                }
                client.work = Work::Idle;
            }
        }
    }

    fn deliver(&mut self, msg: Msg) {
        match msg {
            Msg::Request { client, request } => self.serve(client, request),
            Msg::Reply {
                client,
                request,
                reply,
            } => {
                if self.clients[client].in_flight.remove(&request).is_some() {
                    self.note(|| format!("c{client}: reply to request {}: {reply:?}", request.0));
                    let now = self.clients[client].local(self.now);
                    self.input(
                        client,
                        Input::Reply {
                            now,
                            request,
                            reply,
                        },
                    );
                    self.after_input(client);
                }
            }
            Msg::Write {
                client,
                token,
                owner,
            } => {
                let place = self.checker.grant_place(token, owner);
                let newest = self.checker.is_newest_grant(place);
                let mut outcome = crate::sim::Outcome::default();
                match self.resource.write(token, owner, place, newest) {
                    Ok(shared_with) => {
                        self.note(|| format!("resource: accepts c{client}'s write, token {token}"));
                        (self.checker).accepted(self.now, token, owner, shared_with, &mut outcome);
                    }
                    Err(stale) => {
                        self.note(|| format!("resource: refuses c{client}'s write: {stale}"))
                    }
                }
                self.take_violations(outcome);
            }
            #[cfg(feature = "zookeeper")]
            Msg::Ping { client, session } => {
                let Server::ZooKeeper(z) = &mut self.server else {
                    return;
                };
                if session == z.sessions[client] && !z.zk.touch(self.now, session) {
                    // the library learns its session expired and opens a new one
                    z.sessions[client] = z.zk.connect(self.now, self.options.ttl);
                    self.note(|| format!("c{client}: session expired, a new one"));
                }
            }
        }
    }

    fn take_violations(&mut self, outcome: crate::sim::Outcome) {
        if let Some(v) = outcome.violations.into_iter().next() {
            self.violate(&v.property.to_string(), v.detail);
        }
    }

    /// A request reaches the server; its reply goes on the network.
    fn serve(&mut self, client: usize, request: Request) {
        let now = self.now;
        let mut outcome = crate::sim::Outcome::default();
        let reply = match &mut self.server {
            Server::Redis(server) => {
                let key = Self::lock_key();
                let before = server.get(now, &key).map(str::to_owned);
                let reply = server.execute(now, &request.body);
                if request.operation == Operation::Acquire {
                    if let Reply::Redis(RedisValue::Array(items)) = &reply {
                        if let [RedisValue::Int(1), RedisValue::Int(token)] = items.as_slice() {
                            let owner = request_owner(&request);
                            if before.as_deref() != Some(owner.as_str()) {
                                let token = FencingToken(*token as u64);
                                (self.checker).grant(
                                    now,
                                    token,
                                    OwnerId::from_hex(&owner),
                                    &mut outcome,
                                );
                            }
                        }
                    }
                }
                Some(reply)
            }
            Server::Redlock(masters) => Some(masters.execute(now, &request.body)),
            Server::Postgres(pg) => {
                let (reply, woken) =
                    pg.serve(now, client, &request, &mut self.checker, &mut outcome);
                for (c, r) in woken {
                    self.note(|| format!("server: notifies c{c}"));
                    self.net.push(Msg::Reply {
                        client: c,
                        request: r,
                        reply: crate::sim::wait_over(),
                    });
                }
                reply
            }
            Server::Etcd { etcd, watches, .. } => match &request.body {
                RequestBody::Etcd(EtcdRequest::Watch(w)) => match etcd.watch(now, w) {
                    Some(events) => Some(Reply::Etcd(events)),
                    None => {
                        watches.push((client, request.id, w.clone()));
                        None
                    }
                },
                RequestBody::Etcd(call) => Some(Reply::Etcd(etcd.call(now, call))),
                _ => None,
            },
            #[cfg(feature = "zookeeper")]
            Server::ZooKeeper(z) => z.serve(now, client, &request, &self.options),
            #[cfg(feature = "kubernetes")]
            Server::Kubernetes { kube, .. } => match &request.body {
                RequestBody::Kubernetes(call) => Some(Reply::Kubernetes(kube.call(now, call))),
                _ => None,
            },
        };
        self.take_violations(outcome);
        match reply {
            Some(reply) => {
                self.note(|| format!("server: {:?} from c{client} → {reply:?}", request.operation));
                self.net.push(Msg::Reply {
                    client,
                    request: request.id,
                    reply,
                });
            }
            None => self.note(|| format!("server: c{client} watches")),
        }
        self.serve_watches();
    }

    /// etcd and ZooKeeper: answers the registered watches that fire now, first
    /// registered first.
    fn serve_watches(&mut self) {
        #[cfg(feature = "zookeeper")]
        if let Server::ZooKeeper(z) = &mut self.server {
            for msg in z.fired() {
                self.note(|| format!("server: wakes with {}", describe(&msg)));
                self.net.push(msg);
            }
            return;
        }
        let Server::Etcd { etcd, watches, .. } = &mut self.server else {
            return;
        };
        let mut i = 0;
        let mut fired = Vec::new();
        while i < watches.len() {
            match etcd.watch(self.now, &watches[i].2) {
                Some(events) => {
                    let (client, request, _) = watches.remove(i);
                    fired.push(Msg::Reply {
                        client,
                        request,
                        reply: Reply::Etcd(events),
                    });
                }
                None => i += 1,
            }
        }
        for msg in fired {
            self.note(|| format!("server: wakes with {}", describe(&msg)));
            self.net.push(msg);
        }
    }

    /// Replies whose request the host no longer waits for are dropped on arrival: gone
    /// from the network at once (the same schedules, fewer states).
    fn purge(&mut self) {
        let clients = &self.clients;
        self.net.retain(|m| match m {
            Msg::Reply {
                client, request, ..
            } => clients[*client].in_flight.contains_key(request),
            _ => true,
        });
        // the session a request was sent on matters while it may still be served
        #[cfg(feature = "zookeeper")]
        if let Server::ZooKeeper(z) = &mut self.server {
            let net = &self.net;
            z.sent_on.retain(|(c, id), _| {
                net.iter().any(|m| {
                    matches!(m, Msg::Request { client, request } if client == c && request.id == *id)
                })
            });
        }
    }

    /// S1 at the server, S2, on the state reached.
    fn check(&mut self) {
        let now = self.now;
        let beliefs: Vec<Belief> = (self.clients.iter().enumerate())
            .filter_map(|(c, client)| {
                let (lock, token) = match client.work {
                    Work::Holding { lock, token, .. } => (lock, Some(token)),
                    Work::Releasing { lock } | Work::Acquiring { lock } => (lock, None),
                    Work::Idle => return None,
                };
                let machine = &client.contract.machine;
                let valid_until = machine.valid_until(lock)?;
                if client.local(now) >= valid_until {
                    return None;
                }
                Some(Belief {
                    client: c,
                    lock,
                    token,
                    owner: machine.owner(lock)?,
                    valid_until,
                    believed_until: client.true_of(valid_until),
                })
            })
            .collect();
        let key = Self::lock_key();
        let mut outcome = crate::sim::Outcome::default();
        let breach = match &mut self.server {
            Server::Redis(server) => s2_redis(server, now, &key, beliefs),
            Server::Redlock(masters) => {
                let down = vec![Instant::ZERO; masters.masters.len()];
                s2_redlock(masters, &down, now, &key, beliefs).1
            }
            Server::Etcd { etcd, holder, .. } => {
                let prefix = EtcdBackend::default().lock_prefix(LOCK_NAME);
                let first = etcd.first_under(now, &prefix);
                let rev = first.as_ref().map(|(_, kv)| kv.create_revision);
                if rev.is_some() && rev != *holder {
                    let token = FencingToken(rev.unwrap_or(0) as u64);
                    self.checker.grant(now, token, None, &mut outcome);
                }
                *holder = rev;
                s2_etcd(etcd, first.as_ref(), false, beliefs)
            }
            #[cfg(feature = "zookeeper")]
            Server::ZooKeeper(z) => {
                z.zk.expire(now);
                let settings = crate::backends::ZooKeeperBackend::default();
                let path = settings.lock_path(LOCK_NAME);
                let children = z.zk.children(&path);
                let first =
                    crate::backends::zookeeper::sorted_contenders(settings.naming, &children)
                        .first()
                        .and_then(|n| {
                            let node = z.zk.get(&format!("{path}/{n}")).cloned();
                            node.map(|node| ((*n).to_owned(), node))
                        });
                let czxid = first.as_ref().map(|(_, n)| n.czxid);
                if czxid.is_some() && czxid != z.holder {
                    let token = FencingToken(czxid.unwrap_or(0) as u64);
                    self.checker.grant(now, token, None, &mut outcome);
                }
                z.holder = czxid;
                let expires =
                    (first.as_ref()).and_then(|(_, n)| z.zk.session_expires_at(n.ephemeral_owner));
                crate::sim::s2_zk(&settings, first.as_ref(), expires, beliefs)
            }
            #[cfg(feature = "kubernetes")]
            Server::Kubernetes { kube, holder } => {
                let namespace = crate::backends::KubernetesBackend::default().namespace;
                let now_holder = kube
                    .lease(&namespace, LOCK_NAME)
                    .and_then(crate::sim::kube_holder);
                if let Some((who, transitions)) = &now_holder {
                    if holder.as_ref() != Some(&(who.clone(), *transitions)) {
                        let token = FencingToken(*transitions as u64);
                        let owner = OwnerId::from_hex(who);
                        self.checker.grant(now, token, owner, &mut outcome);
                    }
                }
                let breach = crate::sim::s2_kube(now_holder.as_ref(), beliefs);
                *holder = now_holder;
                breach
            }
            Server::Postgres(pg) => pg.s2(beliefs),
        };
        self.take_violations(outcome);
        if let Some(detail) = breach {
            self.violate(&Property::S2.to_string(), detail);
        }
    }

    /// A 128-bit hash of the world's canonical encoding (messages as a multiset).
    fn fingerprint(&mut self) -> u128 {
        for c in &mut self.clients {
            if c.machine_hash.is_none() {
                c.machine_hash = Some(c.machine_fingerprint());
            }
        }
        let mut h = Fingerprint {
            buf: Vec::with_capacity(8192),
        };
        self.now.hash(&mut h);
        for c in &self.clients {
            c.machine_hash
                .unwrap_or_else(|| c.machine_fingerprint())
                .hash(&mut h);
            (c.paused, &c.write_after_pause, &c.work, c.cycles_left).hash(&mut h);
            c.acquisitions.hash(&mut h);
            c.in_flight.hash(&mut h);
            c.timer.hash(&mut h);
        }
        let mut msgs: Vec<u128> = (self.net.iter())
            .map(|m| {
                let mut mh = Fingerprint::default();
                let _ = write!(mh, "{m:?}");
                mh.value()
            })
            .collect();
        msgs.sort_unstable();
        msgs.hash(&mut h);
        let _ = match &self.server {
            Server::Redis(r) => r.fingerprint(&mut h),
            Server::Redlock(m) => (m.masters.iter()).try_for_each(|r| r.fingerprint(&mut h)),
            Server::Etcd {
                etcd,
                watches,
                holder,
            } => etcd
                .fingerprint(&mut h)
                .and_then(|()| write!(h, "{watches:?}{holder:?}")),
            #[cfg(feature = "zookeeper")]
            Server::ZooKeeper(z) => write!(h, "{z:?}"),
            #[cfg(feature = "kubernetes")]
            Server::Kubernetes { kube, holder } => write!(h, "{kube:?}{holder:?}"),
            Server::Postgres(pg) => pg.fingerprint(&mut h),
        };
        // one resource name: the fence's map has one entry
        let _ = write!(h, "{:?}{:?}", self.resource, self.checker);
        (self.drops, self.duplicates, self.pauses, self.cancels).hash(&mut h);
        self.highest_acquired.hash(&mut h);
        h.value()
    }
}

#[cfg(feature = "zookeeper")]
impl World {
    /// A running client's library pings its session when the ping is due, and the
    /// next one is due a period (TTL/3) later on the client's clock.
    fn ping_if_due(&mut self, c: usize) {
        let Server::ZooKeeper(z) = &mut self.server else {
            return;
        };
        if z.next_ping[c] > self.now {
            return;
        }
        let session = z.sessions[c];
        let client = &self.clients[c];
        z.next_ping[c] = client
            .true_of(client.local(self.now) + self.options.ttl / 3)
            .max(self.now);
        self.note(|| format!("c{c}: the library pings session {session:#x}"));
        self.net.push(Msg::Ping { client: c, session });
    }
}

#[cfg(feature = "zookeeper")]
impl ZkServer {
    /// A request reaches the ensemble, as in the simulator: on a session that is no
    /// longer the client's it meets `connection_loss`, on an expired one
    /// `session_expired` (the library then opens a new one); a watch of a node that
    /// exists is registered (no reply yet).
    fn serve(
        &mut self,
        now: Instant,
        client: usize,
        request: &Request,
        options: &LockOptions,
    ) -> Option<Reply> {
        let RequestBody::ZooKeeper(call) = &request.body else {
            return None;
        };
        let current = self.sessions[client];
        let session = (self.sent_on.get(&(client, request.id)).copied()).unwrap_or(current);
        let reply = if session != current {
            crate::memory::zk_error("connection_loss", session)
        } else if !self.zk.alive(now, session) {
            self.sessions[client] = self.zk.connect(now, options.ttl);
            crate::memory::zk_error("session_expired", session)
        } else if let crate::backends::ZkRequest::Watch { path, .. } = call {
            self.zk.touch(now, session);
            if self.zk.get(path).is_some() {
                self.watches
                    .push((client, request.id, path.clone(), session));
                return None;
            }
            format!(r#"{{"event":"no_node","session":{session}}}"#)
        } else {
            self.zk.call(now, session, call)
        };
        Some(Reply::ZooKeeper(reply))
    }

    /// The replies of the watches whose node is gone, first registered first.
    fn fired(&mut self) -> Vec<Msg> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.watches.len() {
            if self.zk.get(&self.watches[i].2).is_none() {
                let (client, request, _, session) = self.watches.remove(i);
                out.push(Msg::Reply {
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
        out
    }
}

/// A fast 128-bit hash (two multiply-rotate lanes over 8-byte words) of the bytes
/// written, kept in a buffer and hashed at once (the encoding arrives in many small
/// pieces): the state hash of the explorer, which encodes every state it reaches. Not
/// keyed: nothing adversarial feeds it.
#[derive(Default)]
struct Fingerprint {
    buf: Vec<u8>,
}

impl Fingerprint {
    fn value(&self) -> u128 {
        let (mut a, mut b) = (0u64, 0x1656_67B1_9E37_79F9u64);
        let mut chunks = self.buf.chunks_exact(8);
        let mut word = |w: u64| {
            a = (a ^ w).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
            b = (b ^ w.rotate_left(17))
                .wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
                .rotate_left(31);
        };
        for c in &mut chunks {
            word(u64::from_le_bytes([
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7],
            ]));
        }
        let mut last = [0u8; 8];
        last[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        word(u64::from_le_bytes(last));
        let len = self.buf.len() as u64;
        let mix = |mut x: u64| {
            x ^= x >> 33;
            x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
            x ^= x >> 33;
            x = x.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
            x ^ (x >> 33)
        };
        (u128::from(mix(a ^ len)) << 64) | u128::from(mix(b ^ len.rotate_left(32)))
    }
}

impl Hasher for Fingerprint {
    fn write(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    fn finish(&self) -> u64 {
        self.value() as u64
    }
}

impl core::fmt::Write for Fingerprint {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.write(s.as_bytes());
        Ok(())
    }
}

fn describe(msg: &Msg) -> String {
    match msg {
        Msg::Request { client, request } => {
            format!(
                "c{client}'s {:?} request {}",
                request.operation, request.id.0
            )
        }
        Msg::Reply {
            client, request, ..
        } => format!("the reply to c{client}'s request {}", request.0),
        Msg::Write { client, token, .. } => format!("c{client}'s write with token {token}"),
        #[cfg(feature = "zookeeper")]
        Msg::Ping { client, session } => format!("c{client}'s ping of session {session:#x}"),
    }
}

/// An input as a scenario-vector step (`tests/scenarios/README.md`), without its
/// expectations.
fn vector_step(input: &Input) -> String {
    use serde_json::{json, Value};
    let ms = |t: Instant| t.as_nanos() as f64 / 1e6;
    fn redis(v: &RedisValue) -> Value {
        match v {
            RedisValue::Nil => Value::Null,
            RedisValue::Int(n) => json!(n),
            RedisValue::Data(s) => json!(s),
            RedisValue::Status(s) => json!({ "status": s }),
            RedisValue::Error(s) => json!({ "error": s }),
            RedisValue::Array(items) => Value::Array(items.iter().map(redis).collect()),
        }
    }
    let (at, input) = match input {
        Input::Acquire { now, name, .. } => (*now, json!({"type": "acquire", "name": name})),
        Input::Release { now, lock } => (*now, json!({"type": "release", "lock": lock.0})),
        Input::Extend { now, lock } => (*now, json!({"type": "extend", "lock": lock.0})),
        Input::Timeout { now } => (*now, json!({"type": "timeout"})),
        Input::TransportError {
            now,
            request,
            message,
        } => (
            *now,
            json!({"type": "transport_error", "request": request.0, "message": message}),
        ),
        Input::Reply {
            now,
            request,
            reply,
        } => {
            let reply = match reply {
                Reply::Redis(v) => redis(v),
                Reply::Etcd(text) => serde_json::from_str(text).unwrap_or_else(|_| json!(text)),
                #[cfg(feature = "zookeeper")]
                Reply::ZooKeeper(text) => {
                    serde_json::from_str(text).unwrap_or_else(|_| json!(text))
                }
                #[cfg(feature = "kubernetes")]
                Reply::Kubernetes(text) => {
                    serde_json::from_str(text).unwrap_or_else(|_| json!(text))
                }
                Reply::Sql(sql) => serde_json::to_value(sql).unwrap_or(Value::Null),
                #[allow(unreachable_patterns)]
                // reachable without the zookeeper or kubernetes features
                other => json!(format!("{other:?}")),
            };
            (
                *now,
                json!({"type": "reply", "request": request.0, "reply": reply}),
            )
        }
    };
    json!({"at_ms": ms(at), "input": input}).to_string()
}

/// Explores every schedule of `cfg`'s world up to its depth, breadth first, and
/// returns what it found: the first violation comes with the shortest schedule.
pub fn explore(cfg: &ModelConfig) -> Report {
    let mut root = World::new(cfg);
    let mut visited: HashSet<u128> = HashSet::new();
    visited.insert(root.fingerprint());
    // parent links: (parent node, action), node 0 the root
    let mut nodes: Vec<(u32, Option<Action>)> = vec![(0, None)];
    // boxed: a level of replayed states holds 8 bytes each, not a world's size
    let mut frontier: Vec<(u32, Option<Box<World>>)> = vec![(0, Some(Box::new(root)))];
    let mut transitions = 0u64;
    let mut depth = 0;
    let mut complete = true;
    let mut found: Option<u32> = None;
    'levels: while depth < cfg.depth && !frontier.is_empty() {
        let mut next = Vec::new();
        for (node, kept) in &frontier {
            let rebuilt;
            let world = match kept {
                Some(w) => w,
                None => {
                    let mut w = World::new(cfg);
                    for action in path_to(&nodes, *node) {
                        w.apply(&action);
                    }
                    rebuilt = w;
                    &rebuilt
                }
            };
            for action in world.actions(cfg) {
                let mut w = world.clone();
                w.apply(&action);
                transitions += 1;
                if !visited.insert(w.fingerprint()) {
                    continue;
                }
                nodes.push((*node, Some(action)));
                let id = (nodes.len() - 1) as u32;
                if w.violation.is_some() {
                    found = Some(id);
                    depth += 1;
                    break 'levels;
                }
                if nodes.len() >= cfg.max_states {
                    complete = false;
                    depth += 1;
                    break 'levels;
                }
                let keep = next.len() < cfg.clones;
                next.push((id, keep.then(|| Box::new(w))));
            }
        }
        frontier = next;
        depth += 1;
    }
    let exhausted = found.is_none() && complete && frontier.is_empty();
    let violation = found.map(|id| replay(cfg, &path_to(&nodes, id)));
    Report {
        states: nodes.len() as u64,
        transitions,
        depth,
        complete,
        exhausted,
        violation,
    }
}

/// The actions from the initial world to `node`, following the parent links.
fn path_to(nodes: &[(u32, Option<Action>)], node: u32) -> Vec<Action> {
    let mut path = Vec::new();
    let mut at = node;
    while at != 0 {
        let (parent, action) = &nodes[at as usize];
        path.extend(action.clone());
        at = *parent;
    }
    path.reverse();
    path
}

/// Replays `path` from the initial world, traced, into a counterexample.
fn replay(cfg: &ModelConfig, path: &[Action]) -> Counterexample {
    let mut w = World::new(cfg);
    w.trace = Some((Vec::new(), vec![Vec::new(); cfg.clients]));
    for action in path {
        w.apply(action);
    }
    let (property, detail) = w.violation.clone().unwrap_or_default();
    let (timeline, vectors) = w.trace.take().unwrap_or_default();
    Counterexample {
        property,
        detail,
        length: path.len(),
        timeline,
        vectors,
    }
}
