//! The timeline harness: client machines against one in-memory server, every request
//! held until the test decides to deliver, fail or drop it. One [`Timeline`] serves
//! every backend; what a server must provide is the [`Server`] trait, implemented for
//! Redis ([`fencepost_core::memory::MemoryRedis`], in `redis.rs`), etcd
//! ([`fencepost_core::memory::MemoryEtcd`], in `etcd.rs`) and PostgreSQL (a server whose
//! replies the test scripts, in `postgres.rs`), each with its own constructors and
//! inspectors.

#![allow(dead_code)]

pub mod etcd;
pub mod postgres;
pub mod redis;
pub mod redlock;

use std::collections::HashMap;

use core::time::Duration;

use fencepost_core::{
    Backend, Event, Input, Instant, LockId, LockOptions, Machine, Observation, Operation, Output,
    Reply, Request, RequestBody, RequestId,
};

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub fn at(n: u64) -> Instant {
    Instant::from_millis(n)
}

pub fn opts(ttl_ms: u64) -> LockOptions {
    LockOptions::ttl(ms(ttl_ms))
}

pub fn acquired_token(events: &[Event]) -> Option<u64> {
    events.iter().find_map(|e| match e {
        Event::Acquired { token, .. } => Some(token.get()),
        _ => None,
    })
}

/// What the timeline needs from an in-memory server.
pub trait Server: Default {
    /// The backend settings the clients' machines are built with.
    type Backend: Clone + Default;

    /// The machine's view of `backend`.
    fn backend(backend: Self::Backend) -> Backend;

    /// Executes a request body at `now` and returns the server's reply (a request that
    /// would block on a real server is answered as if it returned at once).
    fn execute(&mut self, now: Instant, body: &RequestBody) -> Reply;

    /// The reply `req`, sent at `sent_at`, gets at `now` on an ideal network, or `None`
    /// while it stays blocked on the server. Unless a server parks requests, that is
    /// [`Server::execute`] now.
    fn answer(&mut self, now: Instant, sent_at: Option<Instant>, req: &Request) -> Option<Reply> {
        let _ = sent_at;
        Some(self.execute(now, &req.body))
    }

    /// When `req`, blocked since `sent_at`, returns by itself (its timeout), if it
    /// blocks at all.
    fn unblocks_at(&self, sent_at: Instant, req: &Request) -> Option<Instant> {
        let _ = (sent_at, req);
        None
    }

    /// The next instant the server changes by itself (a lease expiry), if any.
    fn next_change(&self) -> Option<Instant> {
        None
    }
}

pub struct Client {
    pub machine: Machine,
    /// Requests emitted and not yet delivered, failed or dropped.
    pub pending: Vec<Request>,
    pub events: Vec<(LockId, Event)>,
    pub next_timeout: Option<Instant>,
    /// Every request ever emitted, with the time it was emitted.
    pub sent: Vec<(Instant, Request)>,
    /// When each request not yet answered or failed was emitted.
    pub pending_since: HashMap<RequestId, Instant>,
    /// Observations, when the machine observes (`Machine::observe`).
    pub observed: Vec<fencepost_core::Observed>,
}

/// The attempts the `acquire_timed_out` observation among `seen` counted, if any.
pub fn timed_out_attempts(seen: &[Observation]) -> Option<u32> {
    seen.iter().find_map(|o| match o {
        Observation::AcquireTimedOut { attempts, .. } => Some(*attempts),
        _ => None,
    })
}

/// The `found_held` of each `hot_lock` observation among `seen` (None: the waiters' kind).
pub fn hot_lock_found(seen: &[Observation]) -> Vec<Option<u32>> {
    seen.iter()
        .filter_map(|o| match o {
            Observation::HotLock { found_held, .. } => Some(*found_held),
            _ => None,
        })
        .collect()
}

impl Client {
    /// The observations made since the last call, taken.
    pub fn take_observations(&mut self) -> Vec<Observation> {
        self.observed.drain(..).map(|o| o.observation).collect()
    }

    pub fn new(machine: Machine) -> Self {
        Client {
            machine,
            pending: Vec::new(),
            events: Vec::new(),
            next_timeout: None,
            sent: Vec::new(),
            pending_since: HashMap::new(),
            observed: Vec::new(),
        }
    }
}

pub struct Timeline<S: Server> {
    pub now: Instant,
    pub server: S,
    pub clients: Vec<Client>,
    /// The backend settings of the clients added from now on.
    pub backend: S::Backend,
}

impl<S: Server> Timeline<S> {
    /// `n` clients (machines seeded 1..=n) of a backend configured as `backend`, against
    /// one fresh server.
    pub fn with_backend(n: usize, backend: S::Backend) -> Self {
        let mut t = Timeline {
            now: Instant::ZERO,
            server: S::default(),
            clients: Vec::new(),
            backend,
        };
        for seed in 1..=n as u64 {
            t.add_client(seed);
        }
        t
    }

    /// Adds a client whose machine is seeded with `seed`; returns its index.
    pub fn add_client(&mut self, seed: u64) -> usize {
        let machine = Machine::with_seed(S::backend(self.backend.clone()), seed);
        self.clients.push(Client::new(machine));
        self.clients.len() - 1
    }

    fn drain(&mut self, c: usize) {
        let now = self.now;
        let client = &mut self.clients[c];
        loop {
            match client.machine.poll_output() {
                Output::Request(r) => {
                    client.pending_since.insert(r.id, now);
                    client.sent.push((now, r.clone()));
                    client.pending.push(r);
                }
                Output::Event { lock, event } => client.events.push((lock, event)),
                Output::Timeout(t) => {
                    client.next_timeout = Some(t);
                    break;
                }
                Output::Idle => {
                    client.next_timeout = None;
                    break;
                }
            }
        }
        while let Some(o) = client.machine.poll_observation() {
            client.observed.push(o);
        }
    }

    pub fn input(&mut self, c: usize, input: Input) {
        self.clients[c]
            .machine
            .handle_input(input)
            .expect("input accepted");
        self.drain(c);
    }

    /// Moves time to `t` ms, firing due timers of every client.
    pub fn at(&mut self, t: u64) -> &mut Self {
        self.at_instant(at(t))
    }

    /// Moves time to `t`, firing due timers of every client.
    pub fn at_instant(&mut self, t: Instant) -> &mut Self {
        self.now = t;
        for c in 0..self.clients.len() {
            let now = self.now;
            self.input(c, Input::Timeout { now });
        }
        self
    }

    pub fn acquire(&mut self, c: usize, name: &str, options: LockOptions) -> LockId {
        let id = self.clients[c]
            .machine
            .acquire(self.now, name, options)
            .expect("acquire accepted");
        self.drain(c);
        id
    }

    pub fn release(&mut self, c: usize, lock: LockId) {
        let now = self.now;
        self.input(c, Input::Release { now, lock });
    }

    /// Takes the oldest pending request of client `c` for operation `op`.
    pub fn take(&mut self, c: usize, op: Operation) -> Request {
        let pending = &mut self.clients[c].pending;
        let i = pending
            .iter()
            .position(|r| r.operation == op)
            .unwrap_or_else(|| panic!("no pending {op:?} request; pending: {pending:?}"));
        pending.remove(i)
    }

    /// Takes the only pending request of client `c` (panics unless exactly one).
    pub fn take_only(&mut self, c: usize) -> Request {
        let pending = &mut self.clients[c].pending;
        assert_eq!(
            pending.len(),
            1,
            "expected one pending request: {pending:?}"
        );
        pending.remove(0)
    }

    pub fn has_pending(&self, c: usize, op: Operation) -> bool {
        self.clients[c].pending.iter().any(|r| r.operation == op)
    }

    /// Executes the request on the server now, without delivering the reply.
    pub fn apply(&mut self, req: &Request) -> Reply {
        self.server.execute(self.now, &req.body)
    }

    pub fn reply(&mut self, c: usize, req: &Request, reply: Reply) {
        let now = self.now;
        self.clients[c].pending_since.remove(&req.id);
        self.input(
            c,
            Input::Reply {
                now,
                request: req.id,
                reply,
            },
        );
    }

    /// Client 1 holds `name` from 0 ms; client 0 acquires it at 10 ms with `options`;
    /// that first attempt fails in transport at 20 ms but stays on its way to the
    /// server (returned, for the test to apply late); client 0's retries are served at
    /// once, each finding client 1 holding the lock, until `refusals` were served or
    /// client 0 sends a release. Returns client 1's lock, client 0's and the attempt.
    pub fn stuck_attempt_then_refusals(
        &mut self,
        name: &str,
        options: LockOptions,
        refusals: usize,
    ) -> (LockId, LockId, Request) {
        self.at(0);
        let other = self.acquire(1, name, opts(10_000));
        self.serve(1, Operation::Acquire);
        assert!(acquired_token(&self.events(1)).is_some());
        self.at(10);
        let lock = self.acquire(0, name, options);
        let stuck = self.take(0, Operation::Acquire);
        self.at(20).fail(0, &stuck);
        let (mut now, mut refused) = (20, 0);
        while refused < refusals && !self.has_pending(0, Operation::Release) {
            now += 1;
            self.at(now);
            if self.has_pending(0, Operation::Acquire) {
                self.serve(0, Operation::Acquire);
                refused += 1;
            }
            assert!(now < 2_000, "no retry");
        }
        (other, lock, stuck)
    }

    /// [`Timeline::stuck_attempt_then_refusals`] with an acquire timeout of 300 ms and
    /// retries every 50 ms, until client 0 gives up (asserted); then client 1 releases
    /// and the stuck attempt lands. Returns client 0's cleanup release, not yet run.
    pub fn give_up_then_stuck_attempt_lands(&mut self, name: &str) -> Request {
        let mut o = opts(10_000);
        o.acquire_timeout = Some(ms(300));
        o.retry_base = ms(50);
        o.retry_max = ms(50);
        let (other, _, stuck) = self.stuck_attempt_then_refusals(name, o, usize::MAX);
        assert!(matches!(
            self.events(0).as_slice(),
            [Event::AcquireFailed { .. }]
        ));
        let cleanup = self.take(0, Operation::Release);
        self.release(1, other);
        self.serve(1, Operation::Release);
        self.apply(&stuck);
        cleanup
    }

    /// Executes on the server and delivers the reply, both now; returns the reply.
    pub fn serve(&mut self, c: usize, op: Operation) -> Reply {
        let req = self.take(c, op);
        let reply = self.apply(&req);
        self.reply(c, &req, reply.clone());
        reply
    }

    /// Fails the request as a reset connection would.
    pub fn fail(&mut self, c: usize, req: &Request) {
        self.fail_with(c, req, "connection reset");
    }

    /// Fails the request with a transport error saying `message`.
    pub fn fail_with(&mut self, c: usize, req: &Request, message: &str) {
        let now = self.now;
        self.clients[c].pending_since.remove(&req.id);
        self.input(
            c,
            Input::TransportError {
                now,
                request: req.id,
                message: message.to_owned(),
            },
        );
    }

    /// The reply an ideal network delivers to client `c`'s pending `req` now, or `None`
    /// while it stays blocked on the server.
    pub fn answer(&mut self, c: usize, req: &Request) -> Option<Reply> {
        let sent_at = self.clients[c].pending_since.get(&req.id).copied();
        self.server.answer(self.now, sent_at, req)
    }

    /// Answers every pending request of every client at once, repeatedly, until none
    /// remain but blocked ones (an ideal network).
    pub fn serve_all(&mut self) {
        self.serve_all_with(|_, _| None);
    }

    /// [`Timeline::serve_all`], but `intercept(client, request)` may answer a request
    /// with a reply of its own instead (the server never sees it).
    pub fn serve_all_with(&mut self, mut intercept: impl FnMut(usize, &Request) -> Option<Reply>) {
        self.serve_all_by(|t, c, req| intercept(c, req).or_else(|| t.answer(c, req)));
    }

    /// Delivers pending requests, client by client and oldest first, repeatedly, until
    /// `answer(timeline, client, request)` leaves every remaining one pending (`None`).
    pub fn serve_all_by(
        &mut self,
        mut answer: impl FnMut(&mut Self, usize, &Request) -> Option<Reply>,
    ) {
        loop {
            let mut any = false;
            for c in 0..self.clients.len() {
                let mut i = 0;
                while i < self.clients[c].pending.len() {
                    let req = self.clients[c].pending[i].clone();
                    let Some(reply) = answer(self, c, &req) else {
                        i += 1;
                        continue;
                    };
                    self.clients[c].pending.remove(i);
                    self.reply(c, &req, reply);
                    any = true;
                    i = 0;
                }
            }
            if !any {
                break;
            }
        }
    }

    /// When the earliest blocked request returns by itself.
    fn next_unblock(&self) -> Option<Instant> {
        self.clients
            .iter()
            .flat_map(|client| {
                client.pending.iter().filter_map(|r| {
                    let sent = client.pending_since.get(&r.id)?;
                    self.server.unblocks_at(*sent, r)
                })
            })
            .min()
    }

    /// Runs an ideal network, stepping from timer to timer (machine timers, blocked
    /// requests' timeouts, the server's own changes), until `end` ms.
    pub fn run_until(&mut self, end: u64) {
        self.serve_all();
        loop {
            let next = self
                .clients
                .iter()
                .filter_map(|c| c.next_timeout)
                .chain(self.next_unblock())
                .chain(self.server.next_change())
                .filter(|t| *t > self.now)
                .min();
            match next {
                Some(t) if t <= at(end) => {
                    self.at_instant(t);
                    self.serve_all();
                }
                _ => break,
            }
        }
        self.at(end);
        self.serve_all();
    }

    /// Drains the events client `c` has emitted since the last call.
    pub fn events(&mut self, c: usize) -> Vec<Event> {
        self.clients[c].events.drain(..).map(|(_, e)| e).collect()
    }

    /// Client `c` emitted exactly `expected` since the last drain of its events.
    pub fn expect_events(&mut self, c: usize, expected: &[Event]) -> &mut Self {
        assert_eq!(self.events(c), expected, "events of client {c}");
        self
    }

    /// Client `c` emitted exactly `expected` since the last drain of its events.
    pub fn expect_event(&mut self, c: usize, expected: Event) -> &mut Self {
        self.expect_events(c, &[expected])
    }

    /// Client `c` emitted nothing since the last drain of its events.
    pub fn expect_no_event(&mut self, c: usize) -> &mut Self {
        self.expect_events(c, &[])
    }

    /// Takes client `c`'s oldest pending request for `op` (panics if it has none).
    pub fn expect_request(&mut self, c: usize, op: Operation) -> Request {
        self.take(c, op)
    }

    /// Client `c` has no request pending.
    pub fn expect_no_request(&mut self, c: usize) -> &mut Self {
        let pending = &self.clients[c].pending;
        assert!(pending.is_empty(), "client {c} has pending: {pending:?}");
        self
    }
}

impl<S: Server> Timeline<S> {
    /// One long hold and a waiter, both observed: client 1 holds `report` for 60 s from
    /// 0; client 0 asks at 100 ms with a 20 s acquire timeout, retrying every 200 ms at
    /// most. Asserts that the waiter timed out after 10 attempts or more without any
    /// warning: one holder found again and again is a long hold, never a hot lock.
    pub fn assert_one_long_hold_is_never_hot(&mut self) {
        use fencepost_core::ObserveOptions;
        for c in &mut self.clients {
            c.machine.observe(Some(ObserveOptions::default())).unwrap();
        }
        self.at(0);
        self.acquire(1, "report", opts(60_000));
        self.run_until(100);
        let mut waiting = opts(1_000);
        waiting.acquire_timeout = Some(ms(20_000));
        waiting.retry_max = ms(200);
        self.acquire(0, "report", waiting);
        self.run_until(21_000);
        let seen = self.clients[0].take_observations();
        let attempts = timed_out_attempts(&seen);
        assert!(attempts.is_some_and(|n| n >= 10), "{seen:?}");
        assert!(!seen.iter().any(Observation::is_warning), "{seen:?}");
    }
}
