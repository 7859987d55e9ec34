//! The in-memory backend (`memory://`): the core's `MemoryRedis` behind a mutex, on the
//! driver's clock, with no network between.

use std::sync::{Arc, Mutex};

use fencepost_core::driver::Clock;
use fencepost_core::memory::MemoryRedis;
use fencepost_core::{RedisBackend, Reply, RequestBody};
use futures::future::{BoxFuture, FutureExt};

use super::{redis_inspect, Adapter};
use crate::client::TokioClock;
use crate::{Error, Holder};

pub(crate) struct Memory {
    server: Arc<Mutex<MemoryRedis>>,
    clock: TokioClock,
    backend: RedisBackend,
}

impl Memory {
    pub(crate) fn new(clock: TokioClock) -> Memory {
        Memory {
            server: Arc::default(),
            clock,
            backend: RedisBackend::default(),
        }
    }

    /// The operator queries' script runner: the same server, at the clock's time.
    fn exec(&self) -> redis_inspect::Exec {
        let (server, clock) = (self.server.clone(), self.clock.clone());
        Arc::new(move |body| futures::future::ready(run(&server, &clock, &body)).boxed())
    }
}

fn run(
    server: &Mutex<MemoryRedis>,
    clock: &TokioClock,
    body: &RequestBody,
) -> Result<Reply, String> {
    let now = clock.now();
    match server.lock() {
        Ok(mut server) => Ok(server.execute(now, body)),
        Err(_) => Err("the in-memory server's lock is poisoned".to_owned()),
    }
}

impl Adapter for Memory {
    fn execute(&self, body: RequestBody) -> BoxFuture<'static, Result<Reply, String>> {
        futures::future::ready(run(&self.server, &self.clock, &body)).boxed()
    }

    fn holder(&self, name: String) -> BoxFuture<'static, Result<Option<Holder>, Error>> {
        redis_inspect::holder(self.exec(), self.backend.clone(), name).boxed()
    }

    fn list(&self, prefix: String, limit: usize) -> BoxFuture<'static, Result<Vec<Holder>, Error>> {
        redis_inspect::list(self.exec(), self.backend.clone(), prefix, limit).boxed()
    }
}
