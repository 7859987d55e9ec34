//! Redis over the Upstash REST protocol with reqwest, as the JavaScript
//! `UpstashRedisBackend` does: each command a POST of its JSON array with
//! `Authorization: Bearer <token>`; `{"result": …}` is the reply, `{"error": "…"}` the
//! server's error reply (for the machine to read); a failed request, an HTTP 5xx and a
//! body that is not JSON are transport failures. `EVALSHA`, falling back to `EVAL` on
//! `NOSCRIPT`; a fair waiter's `BLPOP` is one long request of its own.

use std::sync::Arc;

use fencepost_core::{RedisBackend, RedisCommand, RedisValue, Reply, RequestBody};
use futures::future::{BoxFuture, FutureExt};
use serde_json::Value;

use super::{redis_inspect, Adapter};
use crate::{Error, Holder};

pub(crate) struct UpstashAdapter {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    url: String,
    token: Option<String>,
    backend: RedisBackend,
}

impl UpstashAdapter {
    pub(crate) fn new(
        url: String,
        token: Option<String>,
        ca: Option<&std::path::Path>,
        backend: RedisBackend,
    ) -> Result<Self, Error> {
        let http = super::http_client(ca, "Upstash")?;
        Ok(UpstashAdapter {
            inner: Arc::new(Inner {
                http,
                url,
                token,
                backend,
            }),
        })
    }
}

/// A REST `result` as the core's data.
fn from_json(v: &Value) -> RedisValue {
    match v {
        Value::Null => RedisValue::Nil,
        Value::Number(n) => match n.as_i64() {
            Some(i) => RedisValue::Int(i),
            None => RedisValue::Data(n.to_string()),
        },
        Value::String(s) => RedisValue::Data(s.clone()),
        Value::Bool(b) => RedisValue::Int(i64::from(*b)),
        Value::Array(items) => RedisValue::Array(items.iter().map(from_json).collect()),
        Value::Object(_) => RedisValue::Error(format!("unexpected REST result {v}")),
    }
}

impl Inner {
    async fn command(&self, argv: &[String]) -> Result<RedisValue, String> {
        let mut req = self
            .http
            .post(&self.url)
            .header("content-type", "application/json");
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let body = serde_json::to_string(argv).map_err(|e| e.to_string())?;
        let response = req
            .body(body)
            .send()
            .await
            .map_err(|e| crate::error::chain(&e))?;
        let status = response.status();
        let text = response.text().await.map_err(|e| e.to_string())?;
        let doc: Value = serde_json::from_str(&text).map_err(|_| {
            format!("HTTP {status} from the REST endpoint, body not JSON: {text:.200}")
        })?;
        if status.is_server_error() {
            return Err(format!("HTTP {status} from the REST endpoint: {text:.200}"));
        }
        if let Some(e) = doc.get("error").and_then(Value::as_str) {
            if status == reqwest::StatusCode::UNAUTHORIZED {
                return Ok(RedisValue::Error(format!(
                    "{e} (HTTP 401: give the REST token as upstash+https://:TOKEN@host or in \
                     $UPSTASH_REDIS_REST_TOKEN)"
                )));
            }
            return Ok(RedisValue::Error(e.to_owned()));
        }
        match doc.get("result") {
            Some(r) => Ok(from_json(r)),
            None => Ok(RedisValue::Error(format!(
                "HTTP {status} from the REST endpoint without \"result\" or \"error\": {text:.200}"
            ))),
        }
    }

    async fn script(&self, cmd: &RedisCommand) -> Result<RedisValue, String> {
        if cmd.wait.is_some() {
            // refused here rather than confirming nothing: WAIT counts the writes of its
            // own connection, and each REST command may run on another
            return Ok(RedisValue::Error(
                "ERR min_replicas needs a direct Redis connection (redis://): the REST protocol cannot tie WAIT to the script".into(),
            ));
        }
        let tail = || {
            let mut t = vec![cmd.keys.len().to_string()];
            t.extend(cmd.keys.iter().cloned());
            t.extend(cmd.args.iter().cloned());
            t
        };
        let mut argv = vec!["EVALSHA".to_owned(), cmd.script.sha1().to_owned()];
        argv.extend(tail());
        let reply = self.command(&argv).await?;
        if matches!(&reply, RedisValue::Error(m) if m.starts_with("NOSCRIPT")) {
            let mut argv = vec!["EVAL".to_owned(), cmd.script.source().to_owned()];
            argv.extend(tail());
            return self.command(&argv).await;
        }
        Ok(reply)
    }
}

impl Adapter for UpstashAdapter {
    fn execute(&self, body: RequestBody) -> BoxFuture<'static, Result<Reply, String>> {
        let inner = self.inner.clone();
        async move {
            match body {
                RequestBody::Redis(cmd) => inner.script(&cmd).await.map(Reply::Redis),
                RequestBody::RedisBlpop(pop) => inner
                    .command(&[
                        "BLPOP".to_owned(),
                        pop.key.clone(),
                        (pop.timeout_ms as f64 / 1000.0).to_string(),
                    ])
                    .await
                    .map(Reply::Redis),
                other => Err(format!(
                    "the Upstash adapter cannot run a {} request",
                    other.kind()
                )),
            }
        }
        .boxed()
    }

    fn holder(&self, name: String) -> BoxFuture<'static, Result<Option<Holder>, Error>> {
        redis_inspect::holder(self.exec(), self.inner.backend.clone(), name).boxed()
    }

    fn list(&self, prefix: String, limit: usize) -> BoxFuture<'static, Result<Vec<Holder>, Error>> {
        redis_inspect::list(self.exec(), self.inner.backend.clone(), prefix, limit).boxed()
    }
}

impl UpstashAdapter {
    /// The operator queries' script runner, on this adapter's REST client.
    fn exec(&self) -> redis_inspect::Exec {
        let inner = self.inner.clone();
        std::sync::Arc::new(move |body| {
            let inner = inner.clone();
            async move {
                match body {
                    RequestBody::Redis(cmd) => inner.script(&cmd).await.map(Reply::Redis),
                    other => Err(format!(
                        "the Upstash adapter cannot run a {} request",
                        other.kind()
                    )),
                }
            }
            .boxed()
        })
    }
}
