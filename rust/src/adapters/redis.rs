//! Redis with redis-rs: scripts on a `ConnectionManager` (one multiplexed connection,
//! reconnected by redis-rs), `EVAL` with the source until the connection has run the
//! script, then `EVALSHA` (falling back to `EVAL` on `NOSCRIPT`); `WAIT` pipelined after
//! the script on that same connection, and each `BLPOP` of a fair waiter on a
//! connection of its own (it blocks the connection).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fencepost_core::{
    RedisBackend, RedisBlpop, RedisCommand, RedisScript, RedisValue, Reply, RequestBody,
};
use futures::future::{BoxFuture, FutureExt};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::{redis_inspect, Adapter};
use crate::{Error, Holder};

pub(crate) struct RedisAdapter {
    client: redis::Client,
    conn: ConnectionManager,
    backend: RedisBackend,
    loaded: Loaded,
}

/// The scripts this adapter's connection has run, one bit per [`RedisScript`]. A script
/// goes by `EVAL` until then: the `EVAL` that follows a `NOSCRIPT` is sent after every
/// command issued behind the `EVALSHA`, so a release could run on the server before the
/// acquire it follows (a Redlock releases a master whose acquire part is still out).
#[derive(Clone, Default)]
struct Loaded(Arc<AtomicU32>);

impl Loaded {
    fn bit(script: RedisScript) -> u32 {
        1 << (script as u32)
    }
    fn has(&self, script: RedisScript) -> bool {
        self.0.load(Ordering::Relaxed) & Self::bit(script) != 0
    }
    fn set(&self, script: RedisScript, loaded: bool) {
        if loaded {
            self.0.fetch_or(Self::bit(script), Ordering::Relaxed);
        } else {
            self.0.fetch_and(!Self::bit(script), Ordering::Relaxed);
        }
    }
}

impl RedisAdapter {
    /// Connects to `url` (`redis://` or `rediss://`); a `rediss://` connection trusts
    /// only the CA file `ca` when given (redis-rs `TlsCertificates`), else the webpki
    /// roots.
    ///
    /// Errors: [`Error::Config`] for a bad URL or CA file; [`Error::Backend`] when the
    /// server cannot be reached or its certificate is refused.
    pub(crate) async fn connect(
        url: &str,
        ca: Option<&std::path::Path>,
        backend: RedisBackend,
    ) -> Result<Self, Error> {
        let bad_url = |e: redis::RedisError| {
            Error::Config(format!("bad Redis URL {}: {e}", crate::url::redact(url)))
        };
        let client = match ca {
            #[cfg(feature = "tls")]
            Some(path) => {
                let (pem, _) = crate::tls::read_ca(path)?;
                let certs = redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem),
                };
                redis::Client::build_with_tls(url, certs).map_err(bad_url)?
            }
            _ => redis::Client::open(url).map_err(bad_url)?,
        };
        // Short connect attempts and no response timeout of its own: the driver
        // cancels every call at its request's deadline.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(None)
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(200));
        let conn = ConnectionManager::new_with_config(client.clone(), config)
            .await
            .map_err(|e| {
                Error::Backend(crate::error::tls_hint(
                    format!(
                        "cannot connect to Redis at {}: {}",
                        crate::url::redact(url),
                        crate::error::chain(&e)
                    ),
                    "?ca=/path/ca.pem",
                ))
            })?;
        Ok(RedisAdapter {
            client,
            conn,
            backend,
            loaded: Loaded::default(),
        })
    }
}

/// A redis-rs value as the core's data: bulk strings UTF-8 (lossy), error replies with
/// their full message.
fn value(v: redis::Value) -> RedisValue {
    use redis::Value as V;
    match v {
        V::Nil => RedisValue::Nil,
        V::Int(n) => RedisValue::Int(n),
        V::BulkString(b) => RedisValue::Data(String::from_utf8_lossy(&b).into_owned()),
        V::SimpleString(s) => RedisValue::Status(s),
        V::Okay => RedisValue::Status("OK".into()),
        V::Array(items) | V::Set(items) => {
            RedisValue::Array(items.into_iter().map(value).collect())
        }
        V::Map(pairs) => RedisValue::Array(
            pairs
                .into_iter()
                .flat_map(|(k, v)| [value(k), value(v)])
                .collect(),
        ),
        V::Attribute { data, .. } => value(*data),
        V::Double(d) => RedisValue::Data(d.to_string()),
        V::Boolean(b) => RedisValue::Int(i64::from(b)),
        V::VerbatimString { text, .. } => RedisValue::Data(text),
        V::ServerError(e) => RedisValue::Error(match e.details() {
            Some(d) => format!("{} {d}", e.code()),
            None => e.code().to_owned(),
        }),
        other => RedisValue::Error(format!("unexpected Redis reply {other:?}")),
    }
}

/// A redis-rs error as the core's data: an error reply of the server, or a transport
/// failure (`Err`).
pub(crate) fn error(e: redis::RedisError) -> Result<RedisValue, String> {
    if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() {
        return Err(e.to_string());
    }
    match e.code() {
        Some(code) => Ok(RedisValue::Error(match e.detail() {
            Some(d) => format!("{code} {d}"),
            None => code.to_owned(),
        })),
        None => Err(e.to_string()),
    }
}

fn script(cmd: &RedisCommand, by_sha: bool) -> redis::Cmd {
    let mut c = if by_sha {
        let mut c = redis::cmd("EVALSHA");
        c.arg(cmd.script.sha1());
        c
    } else {
        let mut c = redis::cmd("EVAL");
        c.arg(cmd.script.source());
        c
    };
    c.arg(cmd.keys.len()).arg(&cmd.keys).arg(&cmd.args);
    c
}

async fn run(
    conn: ConnectionManager,
    cmd: RedisCommand,
    loaded: Loaded,
) -> Result<RedisValue, String> {
    let once = |by_sha: bool, mut conn: ConnectionManager, cmd: &RedisCommand| {
        let c = script(cmd, by_sha);
        let wait = cmd.wait;
        async move {
            match wait {
                None => match c.query_async::<redis::Value>(&mut conn).await {
                    Ok(v) => Ok(value(v)),
                    Err(e) => error(e),
                },
                Some(w) => {
                    let mut pipe = redis::pipe();
                    pipe.add_command(c)
                        .cmd("WAIT")
                        .arg(w.replicas)
                        .arg(w.timeout_ms);
                    match pipe.query_async::<Vec<redis::Value>>(&mut conn).await {
                        Ok(vs) => Ok(RedisValue::Array(vs.into_iter().map(value).collect())),
                        Err(e) => error(e),
                    }
                }
            }
        }
    };
    // the script's own reply: the first item when WAIT was pipelined after it
    let script_reply = |v: &RedisValue| -> Option<RedisValue> {
        match (cmd.wait, v) {
            (Some(_), RedisValue::Array(items)) => items.first().cloned(),
            (Some(_), _) => None,
            (None, v) => Some(v.clone()),
        }
    };
    let by_source = || async {
        let reply = once(false, conn.clone(), &cmd).await?;
        if !matches!(script_reply(&reply), Some(RedisValue::Error(_)) | None) {
            loaded.set(cmd.script, true);
        }
        Ok(reply)
    };
    if !loaded.has(cmd.script) {
        return by_source().await;
    }
    let first = once(true, conn.clone(), &cmd).await?;
    if matches!(script_reply(&first), Some(RedisValue::Error(m)) if m.starts_with("NOSCRIPT")) {
        loaded.set(cmd.script, false);
        return by_source().await;
    }
    Ok(first)
}

async fn blpop(client: redis::Client, pop: RedisBlpop) -> Result<RedisValue, String> {
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    let mut c = redis::cmd("BLPOP");
    c.arg(&pop.key).arg(pop.timeout_ms as f64 / 1000.0);
    match c.query_async::<redis::Value>(&mut conn).await {
        Ok(v) => Ok(value(v)),
        Err(e) => error(e),
    }
}

impl Adapter for RedisAdapter {
    fn execute(&self, body: RequestBody) -> BoxFuture<'static, Result<Reply, String>> {
        match body {
            RequestBody::Redis(cmd) => run(self.conn.clone(), cmd, self.loaded.clone())
                .map(|r| r.map(Reply::Redis))
                .boxed(),
            RequestBody::RedisBlpop(pop) => blpop(self.client.clone(), pop)
                .map(|r| r.map(Reply::Redis))
                .boxed(),
            other => futures::future::ready(Err(format!(
                "the Redis adapter cannot run a {} request",
                other.kind()
            )))
            .boxed(),
        }
    }

    fn holder(&self, name: String) -> BoxFuture<'static, Result<Option<Holder>, Error>> {
        redis_inspect::holder(self.exec(), self.backend.clone(), name).boxed()
    }

    fn list(&self, prefix: String, limit: usize) -> BoxFuture<'static, Result<Vec<Holder>, Error>> {
        redis_inspect::list(self.exec(), self.backend.clone(), prefix, limit).boxed()
    }
}

impl RedisAdapter {
    /// The operator queries' script runner, on this adapter's connection.
    fn exec(&self) -> redis_inspect::Exec {
        let (conn, loaded) = (self.conn.clone(), self.loaded.clone());
        Arc::new(move |body| match body {
            RequestBody::Redis(cmd) => run(conn.clone(), cmd, loaded.clone())
                .map(|r| r.map(Reply::Redis))
                .boxed(),
            other => futures::future::ready(Err(format!(
                "the Redis adapter cannot run a {} request",
                other.kind()
            )))
            .boxed(),
        })
    }
}
