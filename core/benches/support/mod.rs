//! Workloads shared by the criterion bench (`benches/machine.rs`) and the measuring
//! examples (`examples/lease_memory.rs`, `examples/cycle_count.rs`, which include this
//! file with `#[path]`).
//!
//! Everything goes through the public contract only — `handle_input` / `poll_output`
//! and the in-memory server — so whatever the machine does when the bench runs is what
//! gets measured (extra requests, new reply shapes: the drain loop serves them all).
//!
//! Virtual time: every workload keeps its own monotonic `now` and moves it forward to
//! the instant the machine asks for; nothing here reads a clock.

#![allow(dead_code)]

use core::time::Duration;
use std::collections::HashMap;

use fencepost_core::memory::MemoryRedis;
use fencepost_core::{
    Backend, Event, Input, Instant, LockOptions, Machine, Operation, Output, RedisBackend,
    RedisScript, RedisValue, Reply, Request, RequestBody,
};

/// Lease length of every bench lock: 30 s, renewed every 10 s (`ttl / 3`).
pub const TTL: Duration = Duration::from_secs(30);

pub fn options() -> LockOptions {
    LockOptions::ttl(TTL)
}

/// Events seen, to check afterwards that a workload did what it claims.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub requests: u64,
    pub acquired: u64,
    pub renewed: u64,
    pub released: u64,
    pub other: u64,
    /// Observations drained (an observing machine only).
    pub observed: u64,
}

/// Who answers the machine's requests.
pub enum Server {
    /// The in-memory Redis executing fencepost's scripts (the embedded backend).
    Memory(MemoryRedis),
    /// Replies recorded from the in-memory server once, replayed by operation: no
    /// server work at all, so the time is the machine's (and the host's reply clone).
    Canned(HashMap<Operation, Reply>),
}

impl Server {
    fn answer(&mut self, now: Instant, request: &Request) -> Reply {
        match self {
            Server::Memory(server) => server.execute(now, &request.body),
            Server::Canned(replies) => match (replies.get(&request.operation), &request.body) {
                // a batched renewal (`RenewMany`): the one renewal's reply for each key
                (Some(Reply::Redis(one)), RequestBody::Redis(cmd))
                    if cmd.script == RedisScript::RenewMany =>
                {
                    Reply::Redis(RedisValue::Array(vec![one.clone(); cmd.keys.len()]))
                }
                (Some(reply), _) => reply.clone(),
                (None, _) => panic!("no canned reply for {:?}", request.operation),
            },
        }
    }
}

/// Feeds replies until the machine has nothing more to do now; returns its next
/// wakeup (`None` when idle).
pub fn drain(
    machine: &mut Machine,
    server: &mut Server,
    now: Instant,
    tally: &mut Tally,
) -> Option<Instant> {
    loop {
        match machine.poll_output() {
            Output::Request(request) => {
                tally.requests += 1;
                let reply = server.answer(now, &request);
                machine
                    .handle_input(Input::Reply {
                        now,
                        request: request.id,
                        reply,
                    })
                    .expect("a reply is never a usage error");
            }
            Output::Event { event, .. } => match event {
                Event::Acquired { .. } => tally.acquired += 1,
                Event::Renewed { .. } => tally.renewed += 1,
                Event::Released => tally.released += 1,
                _ => tally.other += 1,
            },
            Output::Timeout(at) => return Some(at),
            Output::Idle => return None,
        }
    }
}

/// Runs one uncontended cycle on the in-memory server and records the reply of each
/// operation: the canned replies, as the current core phrases them.
pub fn record_replies() -> HashMap<Operation, Reply> {
    let mut machine = Machine::with_seed(Backend::default(), 1);
    let mut server = MemoryRedis::new();
    let mut replies = HashMap::new();
    let mut now = Instant::from_millis(1);
    let lock = machine
        .acquire(now, "bench", options())
        .expect("valid options");
    let mut released = false;
    for _ in 0..64 {
        match machine.poll_output() {
            Output::Request(request) => {
                let reply = server.execute(now, &request.body);
                replies
                    .entry(request.operation)
                    .or_insert_with(|| reply.clone());
                let input = Input::Reply {
                    now,
                    request: request.id,
                    reply,
                };
                machine.handle_input(input).expect("reply");
            }
            Output::Event {
                event: Event::Renewed { .. },
                ..
            } => {
                machine.release(now, lock).expect("known lock");
                released = true;
            }
            Output::Event { .. } => {}
            Output::Timeout(at) => {
                now = at;
                machine
                    .handle_input(Input::Timeout { now })
                    .expect("time moves on");
            }
            Output::Idle if released => break,
            Output::Idle => panic!("machine idle before the cycle finished"),
        }
    }
    for op in [Operation::Acquire, Operation::Renew, Operation::Release] {
        assert!(
            replies.contains_key(&op),
            "the cycle sent no {op:?} request"
        );
    }
    replies
}

/// One lock, acquired → held until its renewal is due → renewed → released, over and
/// over on one machine.
pub struct Cycle {
    pub machine: Machine,
    pub server: Server,
    pub now: Instant,
    pub tally: Tally,
    options: LockOptions,
}

impl Cycle {
    /// Against the in-memory Redis.
    pub fn memory() -> Self {
        Self::with_server(Backend::default(), Server::Memory(MemoryRedis::new()))
    }

    /// Against the in-memory Redis, with fair hand-off on (its queue-aware scripts run
    /// even when nobody waits).
    pub fn memory_fair() -> Self {
        let fair = Backend::Redis(RedisBackend {
            fair: true,
            ..RedisBackend::default()
        });
        Self::with_server(fair, Server::Memory(MemoryRedis::new()))
    }

    /// Against the in-memory Redis, observing events and warnings (`Machine::observe`),
    /// every observation drained: the cost of an attached observer.
    pub fn memory_observed() -> Self {
        let mut cycle = Self::memory();
        cycle
            .machine
            .observe(Some(fencepost_core::ObserveOptions::default()))
            .expect("default options");
        cycle
    }

    /// Against canned replies (no server).
    pub fn canned() -> Self {
        Self::with_server(Backend::default(), Server::Canned(record_replies()))
    }

    fn with_server(backend: Backend, server: Server) -> Self {
        Cycle {
            machine: Machine::with_seed(backend, 7),
            server,
            now: Instant::from_millis(1),
            tally: Tally::default(),
            options: options(),
        }
    }

    /// One full cycle: acquire, hold until the renew timer, renew, release.
    pub fn run(&mut self) {
        let lock = self
            .machine
            .acquire(self.now, "bench", self.options.clone())
            .expect("valid options");
        // acquire → Acquired; the next wakeup is the renewal (ttl / 3 later)
        let renew_at = drain(
            &mut self.machine,
            &mut self.server,
            self.now,
            &mut self.tally,
        )
        .expect("a held lease has a timer");
        self.now = renew_at;
        self.machine
            .handle_input(Input::Timeout { now: self.now })
            .expect("time moves on");
        // renew → Renewed
        drain(
            &mut self.machine,
            &mut self.server,
            self.now,
            &mut self.tally,
        );
        self.machine.release(self.now, lock).expect("known lock");
        // release → Released
        drain(
            &mut self.machine,
            &mut self.server,
            self.now,
            &mut self.tally,
        );
        while let Some(o) = self.machine.poll_observation() {
            std::hint::black_box(o);
            self.tally.observed += 1;
        }
        self.now = self.now + Duration::from_micros(1);
    }

    /// Panics unless `cycles` cycles ran as acquire → renew → release, each once.
    pub fn check(&self, cycles: u64) {
        let t = self.tally;
        assert_eq!(
            (t.acquired, t.renewed, t.released, t.other),
            (cycles, cycles, cycles, 0),
            "unexpected events over {cycles} cycles: {t:?}"
        );
    }
}

/// A machine holding `n` leases whose renewals are spread evenly over one renew
/// interval (steady state). A timer step renews the lease due and, batched with it,
/// every lease due within half a renew interval (`Machine` batching, docs/DESIGN.md
/// "Batched renewals"): so per-renewal costs come from [`Fleet::renew_each_once`].
pub struct Fleet {
    pub machine: Machine,
    pub server: Server,
    pub now: Instant,
    pub next: Instant,
    pub tally: Tally,
}

impl Fleet {
    /// Acquires `n` leases (`lease-0` … `lease-{n-1}`) with canned replies.
    pub fn new(n: u64) -> Self {
        Self::with_server(n, Server::Canned(record_replies()))
    }

    pub fn with_server(n: u64, mut server: Server) -> Self {
        let mut machine = Machine::with_seed(Backend::default(), 11);
        let mut tally = Tally::default();
        let spacing = options().renew_interval() / u32::try_from(n.max(1)).expect("n fits u32");
        let start = Instant::from_millis(1);
        let mut now = start;
        let mut next = None;
        for i in 0..n {
            now = start + spacing * u32::try_from(i).expect("n fits u32");
            machine
                .acquire(now, &format!("lease-{i}"), options())
                .expect("valid options");
            next = drain(&mut machine, &mut server, now, &mut tally);
        }
        assert_eq!(tally.acquired, n, "every lease granted: {tally:?}");
        Fleet {
            machine,
            server,
            now,
            next: next.unwrap_or(now),
            tally,
        }
    }

    /// Moves time to the next wakeup and serves it: the renewals due then, batched.
    pub fn step(&mut self) {
        self.now = self.next;
        self.machine
            .handle_input(Input::Timeout { now: self.now })
            .expect("time moves on");
        self.next = drain(
            &mut self.machine,
            &mut self.server,
            self.now,
            &mut self.tally,
        )
        .expect("held leases keep a timer");
    }

    /// Steps until every lease has renewed once more (at least `n` renewals); returns
    /// how many renewals that took (a step's batch may renew some leases early).
    pub fn renew_each_once(&mut self) -> u64 {
        let (before, n) = (self.tally.renewed, self.machine.lock_count() as u64);
        while self.tally.renewed - before < n {
            self.step();
        }
        self.tally.renewed - before
    }
}
