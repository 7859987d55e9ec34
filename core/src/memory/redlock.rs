//! [`MemoryRedlock`]: the masters of a Redlock, each an independent [`MemoryRedis`].

use super::MemoryRedis;
use crate::backends::{RedisValue, Reply, RequestBody};
use crate::Instant;

/// N independent in-memory Redis masters; a request part runs on the master it names.
#[derive(Clone, Debug)]
pub struct MemoryRedlock {
    /// The masters, in the order of [`crate::RedlockBackend::masters`].
    pub masters: Vec<MemoryRedis>,
}

impl Default for MemoryRedlock {
    /// Five masters, the count Redis' Redlock page uses.
    fn default() -> Self {
        Self::new(5)
    }
}

impl MemoryRedlock {
    /// `n` empty masters.
    pub fn new(n: usize) -> Self {
        MemoryRedlock {
            masters: vec![MemoryRedis::new(); n],
        }
    }

    /// The `master` a request body names (a [`RequestBody::RedlockPart`]), if any.
    pub fn master_of(body: &RequestBody) -> Option<usize> {
        match body {
            RequestBody::RedlockPart(p) => Some(usize::from(p.master)),
            _ => None,
        }
    }

    /// Executes `body` on the master it names; an error reply for any other body or
    /// a master that does not exist.
    pub fn execute(&mut self, now: Instant, body: &RequestBody) -> Reply {
        match Self::master_of(body).and_then(|m| self.masters.get_mut(m)) {
            Some(master) => master.execute(now, body),
            None => Reply::Redis(RedisValue::Error(
                "ERR the in-memory Redlock runs request parts for its masters only".to_owned(),
            )),
        }
    }
}
