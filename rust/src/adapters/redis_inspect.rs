//! Redis operator queries shared by the redis-rs, Upstash and in-memory adapters: the
//! core phrases them (`RedisBackend::inspect`, `RedisBackend::list_step`) and reads
//! their replies (`read_redis_inspect`, `read_redis_list`); this runs them through the
//! adapter's own script execution.

use std::sync::Arc;

use fencepost_core::backends::redis::{read_redis_inspect, read_redis_list, REDIS_LIST_STEPS};
use fencepost_core::{RedisBackend, RedisValue, Reply, RequestBody};
use futures::future::BoxFuture;

use crate::{Error, Holder};

/// Runs one request body, as [`super::Adapter::execute`] does.
pub(crate) type Exec =
    Arc<dyn Fn(RequestBody) -> BoxFuture<'static, Result<Reply, String>> + Send + Sync>;

async fn call(exec: &Exec, body: RequestBody, what: &str) -> Result<RedisValue, Error> {
    match exec(body).await {
        Ok(Reply::Redis(v)) => Ok(v),
        Ok(other) => Err(Error::Backend(format!(
            "Redis {what}: a reply of another backend: {other:?}"
        ))),
        Err(e) => Err(Error::Backend(format!("Redis {what}: {e}"))),
    }
}

/// The holder of `name`, or `None` when nobody holds it.
pub(crate) async fn holder(
    exec: Exec,
    backend: RedisBackend,
    name: String,
) -> Result<Option<Holder>, Error> {
    let body = RequestBody::Redis(backend.inspect(&name));
    let v = call(&exec, body, &format!("status of {name:?}")).await?;
    Ok(read_redis_inspect(&name, &v)?)
}

/// The held locks whose names start with `prefix`, at most `limit`, in name order of
/// those found; at most `REDIS_LIST_STEPS` bounded `SCAN` steps.
pub(crate) async fn list(
    exec: Exec,
    backend: RedisBackend,
    prefix: String,
    limit: usize,
) -> Result<Vec<Holder>, Error> {
    let mut cursor = "0".to_owned();
    let mut found: Vec<Holder> = Vec::new();
    for _ in 0..REDIS_LIST_STEPS {
        let body = RequestBody::Redis(backend.list_step(&prefix, &cursor));
        let v = call(&exec, body, "list").await?;
        let (next, holders) = read_redis_list(&backend, &v)?;
        found.extend(holders);
        match next {
            Some(next) if found.len() < limit => cursor = next,
            _ => break,
        }
    }
    // SCAN may return a key twice
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found.dedup_by(|a, b| a.name == b.name);
    found.truncate(limit);
    Ok(found)
}
