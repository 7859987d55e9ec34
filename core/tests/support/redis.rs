//! The timeline on the in-memory Redis ([`MemoryRedis`]): every request, a blocking pop
//! included, is answered at once when served.

use fencepost_core::memory::MemoryRedis;
use fencepost_core::{Backend, Instant, RedisBackend, RedisValue, Reply, Request, RequestBody};

use super::{Server, Timeline};

impl Server for MemoryRedis {
    type Backend = RedisBackend;

    fn backend(backend: RedisBackend) -> Backend {
        Backend::Redis(backend)
    }

    fn execute(&mut self, now: Instant, body: &RequestBody) -> Reply {
        MemoryRedis::execute(self, now, body)
    }
}

impl Timeline<MemoryRedis> {
    /// `n` clients (machines seeded 1..=n) of the default Redis backend against one
    /// in-memory Redis.
    pub fn redis(n: usize) -> Self {
        Self::with_backend(n, RedisBackend::default())
    }

    /// The key holding `name`'s lock.
    pub fn lock_key(&self, name: &str) -> String {
        self.backend.lock_key(name)
    }

    /// The owner id holding `name` now, as the server stores it.
    pub fn holder(&self, name: &str) -> Option<String> {
        self.server
            .get(self.now, &self.lock_key(name))
            .map(str::to_owned)
    }

    /// Delivers `value` as the server's reply to `req`.
    pub fn reply_value(&mut self, c: usize, req: &Request, value: RedisValue) {
        self.reply(c, req, Reply::Redis(value));
    }
}
