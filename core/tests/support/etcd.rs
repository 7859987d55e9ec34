//! The etcd timeline harness: client machines with the etcd backend against one
//! [`MemoryEtcd`], requests held until the test decides to deliver, fail or drop them.
//! A parked `Watch` is answered by [`EtcdTimeline::serve_all`] when it would fire, or
//! with `{}` once its timeout has passed (as a host cancelling the watch does).

use std::collections::HashMap;

use fencepost_core::backends::etcd::{EtcdOp, EtcdRequest, EtcdTxn};
use fencepost_core::backends::{EtcdBackend, Operation};
use fencepost_core::memory::{MemoryEtcd, WATCH_TIMEOUT_REPLY};
use fencepost_core::{
    Backend, Input, Instant, LockId, LockOptions, Machine, Reply, Request, RequestBody,
};

use super::{at, Client};

pub struct EtcdTimeline {
    pub now: Instant,
    pub server: MemoryEtcd,
    pub clients: Vec<Client>,
    pub backend: EtcdBackend,
    /// When each watch was sent, by (client, request id), for its timeout.
    watch_sent: HashMap<(usize, u64), Instant>,
}

/// The etcd call of a request (panics on another backend's request).
pub fn call(req: &Request) -> &EtcdRequest {
    match &req.body {
        RequestBody::Etcd(e) => e,
        other => panic!("not an etcd request: {other:?}"),
    }
}

/// The transaction of a request (panics on anything else).
pub fn txn(req: &Request) -> &EtcdTxn {
    match call(req) {
        EtcdRequest::Txn(t) => t,
        other => panic!("not a transaction: {other:?}"),
    }
}

/// Whether the request is a transaction whose success branch puts a key (an acquire
/// transaction).
pub fn is_acquire_txn(req: &Request) -> bool {
    matches!(call(req), EtcdRequest::Txn(t) if matches!(t.success.first(), Some(EtcdOp::Put { .. })))
}

impl EtcdTimeline {
    /// `n` clients (machines seeded 1..=n) against one in-memory etcd.
    pub fn new(n: usize) -> Self {
        let backend = EtcdBackend::default();
        let clients = (1..=n as u64)
            .map(|seed| Client {
                machine: Machine::with_seed(Backend::Etcd(backend.clone()), seed),
                pending: Vec::new(),
                events: Vec::new(),
                next_timeout: None,
                sent: Vec::new(),
            })
            .collect();
        EtcdTimeline {
            now: Instant::ZERO,
            server: MemoryEtcd::new(),
            clients,
            backend,
            watch_sent: HashMap::new(),
        }
    }

    fn drain(&mut self, c: usize) {
        let now = self.now;
        let client = &mut self.clients[c];
        loop {
            match client.machine.poll_output() {
                fencepost_core::Output::Request(r) => {
                    if r.operation == Operation::Wait {
                        self.watch_sent.insert((c, r.id.0), now);
                    }
                    client.sent.push((now, r.clone()));
                    client.pending.push(r);
                }
                fencepost_core::Output::Event { lock, event } => client.events.push((lock, event)),
                fencepost_core::Output::Timeout(t) => {
                    client.next_timeout = Some(t);
                    break;
                }
                fencepost_core::Output::Idle => {
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
        self.at_instant(at(t))
    }

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

    /// The pending requests of client `c`, as etcd calls.
    pub fn pending_calls(&self, c: usize) -> Vec<EtcdRequest> {
        self.clients[c]
            .pending
            .iter()
            .map(|r| call(r).clone())
            .collect()
    }

    /// Executes the request on the server now, without delivering the reply (a watch
    /// is answered as if it timed out now, unless it fires).
    pub fn apply(&mut self, req: &Request) -> Reply {
        self.server.execute(self.now, &req.body)
    }

    pub fn reply(&mut self, c: usize, req: &Request, reply: Reply) {
        let now = self.now;
        self.watch_sent.remove(&(c, req.id.0));
        self.input(
            c,
            Input::Reply {
                now,
                request: req.id,
                reply,
            },
        );
    }

    /// Delivers `text` as the JSON gateway's reply to `req`.
    pub fn reply_text(&mut self, c: usize, req: &Request, text: &str) {
        self.reply(c, req, Reply::Etcd(text.to_owned()));
    }

    /// Executes on the server and delivers the reply, both now; returns the reply text.
    pub fn serve(&mut self, c: usize, op: Operation) -> String {
        let req = self.take(c, op);
        let reply = self.apply(&req);
        self.reply(c, &req, reply.clone());
        match reply {
            Reply::Etcd(s) => s,
            other => panic!("not an etcd reply: {other:?}"),
        }
    }

    pub fn fail(&mut self, c: usize, req: &Request) {
        let now = self.now;
        self.watch_sent.remove(&(c, req.id.0));
        self.input(
            c,
            Input::TransportError {
                now,
                request: req.id,
                message: "connection reset".to_owned(),
            },
        );
    }

    /// The reply a parked watch gets now, if it gets one: its events if it fires, `{}`
    /// if its timeout has passed, else none (it stays blocked).
    fn watch_reply(&mut self, c: usize, req: &Request) -> Option<String> {
        let EtcdRequest::Watch(w) = call(req) else {
            return None;
        };
        if let Some(events) = self.server.watch(self.now, w) {
            return Some(events);
        }
        let sent = self.watch_sent.get(&(c, req.id.0)).copied()?;
        let timeout = sent + core::time::Duration::from_millis(w.timeout_ms);
        (self.now >= timeout).then(|| WATCH_TIMEOUT_REPLY.to_owned())
    }

    /// Executes every pending request of every client at once, repeatedly, until none
    /// remain but blocked watches (an ideal network).
    pub fn serve_all(&mut self) {
        self.serve_all_with(|_, _| None);
    }

    /// [`EtcdTimeline::serve_all`], but `intercept(client, request)` may answer a
    /// request with a reply text of its own instead (the server never sees it).
    pub fn serve_all_with(&mut self, mut intercept: impl FnMut(usize, &Request) -> Option<String>) {
        loop {
            let mut any = false;
            for c in 0..self.clients.len() {
                let mut i = 0;
                while i < self.clients[c].pending.len() {
                    let req = self.clients[c].pending[i].clone();
                    let reply = if let Some(text) = intercept(c, &req) {
                        Reply::Etcd(text)
                    } else if req.operation == Operation::Wait {
                        match self.watch_reply(c, &req) {
                            Some(text) => Reply::Etcd(text),
                            None => {
                                i += 1;
                                continue;
                            }
                        }
                    } else {
                        self.apply(&req)
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

    /// When the earliest blocked watch times out.
    fn next_watch_timeout(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        for (c, client) in self.clients.iter().enumerate() {
            for r in client
                .pending
                .iter()
                .filter(|r| r.operation == Operation::Wait)
            {
                if let (EtcdRequest::Watch(w), Some(sent)) =
                    (call(r), self.watch_sent.get(&(c, r.id.0)))
                {
                    let t = *sent + core::time::Duration::from_millis(w.timeout_ms);
                    next = Some(next.map_or(t, |n| n.min(t)));
                }
            }
        }
        next
    }

    /// Runs an ideal network, stepping from timer to timer (machine timers, watch
    /// timeouts, lease expiries), until `end` ms.
    pub fn run_until(&mut self, end: u64) {
        self.serve_all();
        loop {
            let next = self
                .clients
                .iter()
                .filter_map(|c| c.next_timeout)
                .chain(self.next_watch_timeout())
                .chain(self.server.next_expiry())
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

    pub fn events(&mut self, c: usize) -> Vec<fencepost_core::Event> {
        self.clients[c].events.drain(..).map(|(_, e)| e).collect()
    }

    /// The key of `lock`'s current owner on client `c`.
    pub fn key_of(&self, c: usize, name: &str, lock: LockId) -> String {
        let owner = self.clients[c].machine.owner(lock).expect("lock known");
        self.backend.holder_key(name, &owner)
    }

    /// The lease id of `lock`'s current owner on client `c`.
    pub fn lease_of(&self, c: usize, lock: LockId) -> i64 {
        let owner = self.clients[c].machine.owner(lock).expect("lock known");
        fencepost_core::backends::etcd::lease_id(&owner)
    }

    /// The key holding `name` now (lowest create revision), with its create revision.
    pub fn holder(&mut self, name: &str) -> Option<(String, i64)> {
        let prefix = self.backend.lock_prefix(name);
        self.server
            .first_under(self.now, &prefix)
            .map(|(k, kv)| (k, kv.create_revision))
    }
}
