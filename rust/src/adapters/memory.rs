//! The in-memory backend (`memory://`): the core's `MemoryRedis` behind a mutex, on the
//! driver's clock, with no network between.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use fencepost_core::driver::Clock;
use fencepost_core::memory::MemoryRedis;
use fencepost_core::{FencingToken, RedisBackend, Reply, RequestBody};
use futures::future::{BoxFuture, FutureExt};

use super::Adapter;
use crate::client::TokioClock;
use crate::{Error, Holder};

#[derive(Default)]
struct State {
    server: MemoryRedis,
    /// Every lease key a script touched, for listing (the server keeps no key index).
    lock_keys: BTreeSet<String>,
}

pub(crate) struct Memory {
    state: Arc<Mutex<State>>,
    clock: TokioClock,
    backend: RedisBackend,
}

impl Memory {
    pub(crate) fn new(clock: TokioClock) -> Memory {
        Memory {
            state: Arc::default(),
            clock,
            backend: RedisBackend::default(),
        }
    }

    fn holder_now(&self, state: &State, name: &str) -> Option<Holder> {
        let now = self.clock.now();
        let owner = state.server.get(now, &self.backend.lock_key(name))?;
        Some(Holder {
            name: name.to_owned(),
            owner: Some(owner.trim_start_matches("r:").to_owned()),
            token: state
                .server
                .get(now, &self.backend.token_key(name))
                .and_then(|t| t.parse().ok())
                .map(FencingToken),
            ttl_left: state
                .server
                .pttl(now, &self.backend.lock_key(name))
                .and_then(super::ms),
            waiters: None,
        })
    }
}

impl Adapter for Memory {
    fn execute(&self, body: RequestBody) -> BoxFuture<'static, Result<Reply, String>> {
        let now = self.clock.now();
        let reply = match self.state.lock() {
            Ok(mut state) => {
                if let RequestBody::Redis(cmd) = &body {
                    if let Some(key) = cmd.keys.first().filter(|k| k.ends_with(":lock")) {
                        state.lock_keys.insert(key.clone());
                    }
                }
                Ok(state.server.execute(now, &body))
            }
            Err(_) => Err("the in-memory server's lock is poisoned".to_owned()),
        };
        futures::future::ready(reply).boxed()
    }

    fn holder(&self, name: String) -> BoxFuture<'static, Result<Option<Holder>, Error>> {
        let holder = match self.state.lock() {
            Ok(state) => Ok(self.holder_now(&state, &name)),
            Err(_) => Err(Error::Backend(
                "the in-memory server's lock is poisoned".into(),
            )),
        };
        futures::future::ready(holder).boxed()
    }

    fn list(&self, prefix: String, limit: usize) -> BoxFuture<'static, Result<Vec<Holder>, Error>> {
        let list = match self.state.lock() {
            Ok(state) => Ok(state
                .lock_keys
                .iter()
                .filter_map(|k| self.backend.lock_name(k))
                .filter(|n| n.starts_with(&prefix))
                .filter_map(|n| self.holder_now(&state, &n))
                .take(limit)
                .collect()),
            Err(_) => Err(Error::Backend(
                "the in-memory server's lock is poisoned".into(),
            )),
        };
        futures::future::ready(list).boxed()
    }
}
