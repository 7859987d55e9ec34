//! The timeline on the in-memory etcd ([`MemoryEtcd`], whose replies are the JSON
//! gateway's texts). A parked `Watch` is answered when it would fire, or with `{}` once
//! its timeout has passed (as a host cancelling the watch does); lease expiries are
//! steps of [`Timeline::run_until`].

use core::time::Duration;

use fencepost_core::backends::etcd::{lease_id, EtcdOp, EtcdRequest, EtcdTxn};
use fencepost_core::backends::{EtcdBackend, Operation};
use fencepost_core::memory::{MemoryEtcd, WATCH_TIMEOUT_REPLY};
use fencepost_core::{Backend, Event, Instant, LockId, Reply, Request, RequestBody};

use super::{Server, Timeline};

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

/// The JSON text of an etcd reply (panics on another backend's reply).
pub fn text(reply: Reply) -> String {
    match reply {
        Reply::Etcd(s) => s,
        other => panic!("not an etcd reply: {other:?}"),
    }
}

/// The token and validity of the first `Acquired` among `events`.
pub fn acquired(events: &[Event]) -> Option<(u64, Instant)> {
    events.iter().find_map(|e| match e {
        Event::Acquired {
            token, valid_until, ..
        } => Some((token.get(), *valid_until)),
        _ => None,
    })
}

/// How the previous holder ended, as the first `Acquired` among `events` says.
pub fn previous(events: &[Event]) -> Option<fencepost_core::Previous> {
    events.iter().find_map(|e| match e {
        Event::Acquired { previous, .. } => Some(*previous),
        _ => None,
    })
}

/// The watch of a parked request (a `Wait` carrying a `Watch`), if it is one.
fn parked_watch(req: &Request) -> Option<&fencepost_core::backends::etcd::EtcdWatch> {
    match call(req) {
        EtcdRequest::Watch(w) if req.operation == Operation::Wait => Some(w),
        _ => None,
    }
}

impl Server for MemoryEtcd {
    type Backend = EtcdBackend;

    fn backend(backend: EtcdBackend) -> Backend {
        Backend::Etcd(backend)
    }

    fn execute(&mut self, now: Instant, body: &RequestBody) -> Reply {
        MemoryEtcd::execute(self, now, body)
    }

    /// A watch gets its events if it fires, `{}` if its timeout has passed, else
    /// nothing (it stays blocked); any other call its reply at once.
    fn answer(&mut self, now: Instant, sent_at: Option<Instant>, req: &Request) -> Option<Reply> {
        if req.operation != Operation::Wait {
            return Some(self.execute(now, &req.body));
        }
        let w = parked_watch(req)?;
        if let Some(events) = self.watch(now, w) {
            return Some(Reply::Etcd(events));
        }
        let timeout = sent_at? + Duration::from_millis(w.timeout_ms);
        (now >= timeout).then(|| Reply::Etcd(WATCH_TIMEOUT_REPLY.to_owned()))
    }

    fn unblocks_at(&self, sent_at: Instant, req: &Request) -> Option<Instant> {
        parked_watch(req).map(|w| sent_at + Duration::from_millis(w.timeout_ms))
    }

    fn next_change(&self) -> Option<Instant> {
        self.next_expiry()
    }
}

impl Timeline<MemoryEtcd> {
    /// `n` clients (machines seeded 1..=n) of the default etcd backend against one
    /// in-memory etcd.
    pub fn etcd(n: usize) -> Self {
        Self::with_backend(n, EtcdBackend::default())
    }

    /// The pending requests of client `c`, as etcd calls.
    pub fn pending_calls(&self, c: usize) -> Vec<EtcdRequest> {
        self.clients[c]
            .pending
            .iter()
            .map(|r| call(r).clone())
            .collect()
    }

    /// Delivers `text` as the JSON gateway's reply to `req`.
    pub fn reply_text(&mut self, c: usize, req: &Request, text: &str) {
        self.reply(c, req, Reply::Etcd(text.to_owned()));
    }

    /// The key of `lock`'s current owner on client `c`.
    pub fn key_of(&self, c: usize, name: &str, lock: LockId) -> String {
        let owner = self.clients[c].machine.owner(lock).expect("lock known");
        self.backend.holder_key(name, &owner)
    }

    /// The lease id of `lock`'s current owner on client `c`.
    pub fn lease_of(&self, c: usize, lock: LockId) -> i64 {
        let owner = self.clients[c].machine.owner(lock).expect("lock known");
        lease_id(&owner)
    }

    /// The key holding `name` now (lowest create revision), with its create revision.
    pub fn holder(&mut self, name: &str) -> Option<(String, i64)> {
        let prefix = self.backend.lock_prefix(name);
        self.server
            .first_under(self.now, &prefix)
            .map(|(k, kv)| (k, kv.create_revision))
    }
}
