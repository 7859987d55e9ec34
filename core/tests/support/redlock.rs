//! The timeline on five in-memory Redis masters ([`MemoryRedlock`]): each request
//! part is answered by the master it names, at once when served.

use fencepost_core::memory::MemoryRedlock;
use fencepost_core::{Backend, Instant, RedlockBackend, Reply, Request, RequestBody};

use super::{Server, Timeline};

impl Server for MemoryRedlock {
    type Backend = RedlockBackend;

    fn backend(backend: RedlockBackend) -> Backend {
        Backend::Redlock(backend)
    }

    fn execute(&mut self, now: Instant, body: &RequestBody) -> Reply {
        MemoryRedlock::execute(self, now, body)
    }
}

/// Five masters named as a host would name them.
pub fn five_masters() -> RedlockBackend {
    RedlockBackend {
        masters: (0..5)
            .map(|i| format!("127.0.0.1:{}/0", 7000 + i))
            .collect(),
        ..RedlockBackend::default()
    }
}

/// The master a request part goes to.
pub fn master(req: &Request) -> usize {
    MemoryRedlock::master_of(&req.body).expect("a Redlock request part")
}

impl Timeline<MemoryRedlock> {
    /// `n` clients (machines seeded 1..=n) of a five-master Redlock.
    pub fn redlock(n: usize) -> Self {
        Self::with_backend(n, five_masters())
    }

    /// The owner id holding `name` on master `m` now.
    pub fn holder_on(&self, m: usize, name: &str) -> Option<String> {
        self.server.masters[m]
            .get(self.now, &self.backend.lock_key(name))
            .map(str::to_owned)
    }

    /// Client `c`'s pending requests, taken.
    pub fn take_all(&mut self, c: usize) -> Vec<Request> {
        std::mem::take(&mut self.clients[c].pending)
    }
}
