//! A timeline harness: one or more client machines against one in-memory Redis, with
//! requests held until the test decides to deliver, fail or drop them.

#![allow(dead_code)]

pub mod etcd;

use core::time::Duration;

use fencepost_core::memory::MemoryRedis;
use fencepost_core::{
    Backend, Event, Input, Instant, LockId, LockOptions, Machine, Operation, Output, RedisBackend,
    RedisValue, Reply, Request,
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

pub struct Client {
    pub machine: Machine,
    /// Requests emitted and not yet delivered, failed or dropped.
    pub pending: Vec<Request>,
    pub events: Vec<(LockId, Event)>,
    pub next_timeout: Option<Instant>,
    /// Every request ever emitted, with the time it was emitted.
    pub sent: Vec<(Instant, Request)>,
}

pub struct Timeline {
    pub now: Instant,
    pub server: MemoryRedis,
    pub clients: Vec<Client>,
}

impl Timeline {
    /// `n` clients (machines seeded 1..=n) against one server.
    pub fn new(n: usize) -> Self {
        Self::with_backend(n, RedisBackend::default())
    }

    /// `n` clients of a Redis backend configured as `backend`.
    pub fn with_backend(n: usize, backend: RedisBackend) -> Self {
        let clients = (1..=n as u64)
            .map(|seed| Client {
                machine: Machine::with_seed(Backend::Redis(backend.clone()), seed),
                pending: Vec::new(),
                events: Vec::new(),
                next_timeout: None,
                sent: Vec::new(),
            })
            .collect();
        Timeline {
            now: Instant::ZERO,
            server: MemoryRedis::new(),
            clients,
        }
    }

    pub fn lock_key(name: &str) -> String {
        RedisBackend::default().lock_key(name)
    }

    fn drain(&mut self, c: usize) {
        let now = self.now;
        let client = &mut self.clients[c];
        loop {
            match client.machine.poll_output() {
                Output::Request(r) => {
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
        self.now = at(t);
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

    pub fn has_pending(&self, c: usize, op: Operation) -> bool {
        self.clients[c].pending.iter().any(|r| r.operation == op)
    }

    /// Executes the request on the server now, without delivering the reply.
    pub fn apply(&mut self, req: &Request) -> Reply {
        self.server.execute(self.now, &req.body)
    }

    pub fn reply(&mut self, c: usize, req: &Request, reply: Reply) {
        let now = self.now;
        self.input(
            c,
            Input::Reply {
                now,
                request: req.id,
                reply,
            },
        );
    }

    pub fn reply_value(&mut self, c: usize, req: &Request, value: RedisValue) {
        self.reply(c, req, Reply::Redis(value));
    }

    /// Executes on the server and delivers the reply, both now.
    pub fn serve(&mut self, c: usize, op: Operation) {
        let req = self.take(c, op);
        let reply = self.apply(&req);
        self.reply(c, &req, reply);
    }

    pub fn fail(&mut self, c: usize, req: &Request) {
        let now = self.now;
        self.input(
            c,
            Input::TransportError {
                now,
                request: req.id,
                message: "connection reset".to_owned(),
            },
        );
    }

    /// Executes every pending request of every client at once, repeatedly, until none
    /// remain (an ideal network).
    pub fn serve_all(&mut self) {
        loop {
            let mut any = false;
            for c in 0..self.clients.len() {
                while !self.clients[c].pending.is_empty() {
                    let req = self.clients[c].pending.remove(0);
                    let reply = self.apply(&req);
                    self.reply(c, &req, reply);
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
    }

    /// Runs an ideal network, stepping from timer to timer, until `end` ms.
    pub fn run_until(&mut self, end: u64) {
        self.serve_all();
        loop {
            let next = self.clients.iter().filter_map(|c| c.next_timeout).min();
            match next {
                Some(t) if t <= at(end) => {
                    self.now = t.max(self.now);
                    for c in 0..self.clients.len() {
                        let now = self.now;
                        self.input(c, Input::Timeout { now });
                    }
                    self.serve_all();
                }
                _ => break,
            }
        }
        self.at(end);
        self.serve_all();
    }

    pub fn events(&mut self, c: usize) -> Vec<Event> {
        self.clients[c].events.drain(..).map(|(_, e)| e).collect()
    }

    pub fn holder(&self, name: &str) -> Option<String> {
        self.server
            .get(self.now, &Self::lock_key(name))
            .map(str::to_owned)
    }
}

pub fn acquired_token(events: &[Event]) -> Option<u64> {
    events.iter().find_map(|e| match e {
        Event::Acquired { token, .. } => Some(token.get()),
        _ => None,
    })
}
