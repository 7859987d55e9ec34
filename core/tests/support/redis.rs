//! The timeline on the in-memory Redis ([`MemoryRedis`]): every request, a blocking pop
//! included, is answered at once when served.

use fencepost_core::memory::MemoryRedis;
use fencepost_core::{
    Backend, Instant, Operation, RedisBackend, RedisValue, Reply, Request, RequestBody,
};

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

    /// Delivers client `c`'s pending blocking pop if its wake-up is there (the server
    /// pops it), else leaves it parked; returns whether it was delivered.
    pub fn wake_if_ready(&mut self, c: usize) -> bool {
        let Some(i) = self.clients[c]
            .pending
            .iter()
            .position(|r| r.operation == Operation::Wait)
        else {
            return false;
        };
        let RequestBody::RedisBlpop(b) = &self.clients[c].pending[i].body else {
            unreachable!()
        };
        if !self.server.has_list_item(self.now, &b.key) {
            return false;
        }
        let req = self.clients[c].pending.remove(i);
        let reply = self.apply(&req);
        assert!(
            matches!(reply, Reply::Redis(RedisValue::Array(_))),
            "woken: {reply:?}"
        );
        self.reply(c, &req, reply);
        true
    }
}
