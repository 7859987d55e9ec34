//! etcd v3 through its JSON gateway with reqwest, as the Python httpx adapter does:
//! each call a POST of the core's gateway body to `/v3/…`; any JSON body (error
//! documents included) goes to the machine; a refused connection moves on to the next
//! member at once, any other transport failure is reported (outcome unknown) and the
//! next call starts at the next member. A watch streams until a line with events (or
//! a cancel, compaction or error) arrives, or answers `{}` at its timeout.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use fencepost_core::backends::etcd::{read_etcd_holder, EtcdBackend, EtcdRange, EtcdRequest};
use fencepost_core::{Reply, RequestBody};
use futures::future::{BoxFuture, FutureExt};
use serde_json::Value;

use super::Adapter;
use crate::{Error, Holder};

/// At most this many keys per listing range (one contender key per waiter).
const LIST_KEYS: i64 = 10_000;

pub(crate) struct EtcdAdapter {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    members: Vec<String>,
    next: AtomicUsize,
    backend: EtcdBackend,
}

impl EtcdAdapter {
    pub(crate) fn new(
        members: Vec<String>,
        ca: Option<&std::path::Path>,
        backend: EtcdBackend,
    ) -> Result<Self, Error> {
        let http = super::http_client(ca, "etcd")?;
        Ok(EtcdAdapter {
            inner: Arc::new(Inner {
                http,
                members,
                next: AtomicUsize::new(0),
                backend,
            }),
        })
    }
}

/// Whether a watch stream line ends the wait.
fn watch_done(line: &str) -> bool {
    let Ok(doc) = serde_json::from_str::<Value>(line) else {
        return true; // the machine reads it as a protocol error
    };
    if doc.get("error").is_some() {
        return true;
    }
    let result = doc.get("result").unwrap_or(&doc);
    let set = |k: &str| match result.get(k) {
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => !s.is_empty() && s != "0",
        Some(Value::Null) | None => false,
        Some(_) => true,
    };
    set("events") || set("canceled") || set("compact_revision")
}

impl Inner {
    fn order(&self) -> Vec<String> {
        let start = self.next.load(Ordering::Relaxed);
        let n = self.members.len();
        (0..n)
            .map(|i| self.members[(start + i) % n].clone())
            .collect()
    }

    fn rotate(&self, failed: &str) {
        let n = self.members.len();
        let cur = self.next.load(Ordering::Relaxed);
        if self.members[cur % n] == failed {
            self.next.store((cur + 1) % n, Ordering::Relaxed);
        }
    }

    async fn call(&self, req: &EtcdRequest) -> Result<String, String> {
        if let Some(timeout_ms) = req.watch_timeout_ms() {
            return self.watch(req, Duration::from_millis(timeout_ms)).await;
        }
        let mut last = String::new();
        for url in self.order() {
            let sent = self
                .http
                .post(format!("{url}{}", req.gateway_path()))
                .header("content-type", "application/json")
                .body(req.gateway_body())
                .send()
                .await;
            let response = match sent {
                Ok(r) => r,
                Err(e) if e.is_connect() => {
                    last = crate::error::tls_hint(crate::error::chain(&e), "?ca=/path/ca.pem");
                    self.rotate(&url);
                    continue;
                }
                Err(e) => {
                    self.rotate(&url);
                    return Err(crate::error::chain(&e));
                }
            };
            let status = response.status();
            let text = response.text().await.map_err(|e| {
                self.rotate(&url);
                crate::error::chain(&e)
            })?;
            let line = text.lines().next().unwrap_or("").trim().to_owned();
            if !line.starts_with('{') {
                return Err(format!(
                    "etcd gateway answered HTTP {status} without a JSON body: {:.200}",
                    text
                ));
            }
            if line.replace(' ', "").contains("\"code\":14") {
                self.rotate(&url); // unavailable on this member: the next may not be
            }
            return Ok(line);
        }
        Err(format!(
            "no etcd endpoint reachable ({}): {last}",
            self.members.join(", ")
        ))
    }

    async fn watch(&self, req: &EtcdRequest, timeout: Duration) -> Result<String, String> {
        let url = self.order().remove(0);
        let stream = async {
            let mut response = self
                .http
                .post(format!("{url}{}", req.gateway_path()))
                .header("content-type", "application/json")
                .body(req.gateway_body())
                .send()
                .await
                .map_err(|e| crate::error::chain(&e))?;
            let mut buf = Vec::new();
            while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
                buf.extend_from_slice(&chunk);
                while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=nl).collect();
                    let line = String::from_utf8_lossy(&line).trim().to_owned();
                    if !line.is_empty() && watch_done(&line) {
                        return Ok(line);
                    }
                }
            }
            // ended early without an event: a transport failure, so the machine backs off
            Err(format!(
                "the etcd watch stream from {url} ended without an event"
            ))
        };
        match tokio::time::timeout(timeout, stream).await {
            Ok(Ok(line)) => Ok(line),
            Ok(Err(e)) => {
                self.rotate(&url);
                Err(e)
            }
            Err(_) => Ok("{}".to_owned()),
        }
    }

    async fn holder(&self, name: &str) -> Result<Option<Holder>, Error> {
        let reply = self
            .call(&self.backend.holder_range(name))
            .await
            .map_err(Error::Backend)?;
        let Some(h) = read_etcd_holder(&reply)? else {
            return Ok(None);
        };
        // the range is limited to the holder, but its `count` is every key under the
        // prefix: one per contender
        let count = serde_json::from_str::<Value>(&reply)
            .ok()
            .and_then(|v| v.get("count")?.as_str()?.parse::<u64>().ok());
        let ttl = self
            .http_json(
                "/v3/lease/timetolive",
                &format!("{{\"ID\":\"{}\"}}", h.lease),
            )
            .await?;
        let ttl_left = ttl
            .get("TTL")
            .and_then(|t| {
                t.as_str()
                    .and_then(|s| s.parse::<i64>().ok())
                    .or(t.as_i64())
            })
            .and_then(|s| u64::try_from(s).ok())
            .map(Duration::from_secs);
        Ok(Some(Holder {
            name: name.to_owned(),
            owner: Some(format!("lease:{:016x}", h.lease)),
            token: Some(h.token),
            ttl_left,
            waiters: count.map(|c| c.saturating_sub(1)),
            metadata: None,
        }))
    }

    async fn http_json(&self, path: &str, body: &str) -> Result<Value, Error> {
        let url = self.order().remove(0);
        let text = self
            .http
            .post(format!("{url}{path}"))
            .body(body.to_owned())
            .send()
            .await
            .map_err(|e| Error::Backend(format!("etcd {path}: {e}")))?
            .text()
            .await
            .map_err(|e| Error::Backend(format!("etcd {path}: {e}")))?;
        serde_json::from_str(&text)
            .map_err(|e| Error::Backend(format!("etcd {path}: {e}: {text:.200}")))
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<Holder>, Error> {
        let start = format!("{}{prefix}", self.backend.key_prefix);
        let end = prefix_end(&start);
        let range = EtcdRequest::Range(EtcdRange {
            key: start,
            range_end: Some(end),
            limit: LIST_KEYS,
            sort: None,
            keys_only: true,
            max_create_revision: 0,
        });
        let reply = self.call(&range).await.map_err(Error::Backend)?;
        let doc: Value = serde_json::from_str(&reply)
            .map_err(|e| Error::Backend(format!("etcd range: {e}: {reply:.200}")))?;
        if let Some(err) = doc.get("error").or(doc.get("message")) {
            return Err(Error::Backend(format!("etcd range refused: {err}")));
        }
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut names: Vec<String> = doc
            .get("kvs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|kv| kv.get("key")?.as_str())
            .filter_map(|k| String::from_utf8(b64.decode(k).ok()?).ok())
            .filter_map(|k| {
                let rest = k.strip_prefix(&self.backend.key_prefix)?;
                rest.rsplit_once('/').map(|(name, _)| name.to_owned())
            })
            .collect();
        names.dedup();
        names.truncate(limit);
        let mut out = Vec::new();
        for name in names {
            if let Some(h) = self.holder(&name).await? {
                out.push(h);
            }
        }
        Ok(out)
    }
}

/// The end of the range of every key starting with `prefix` (etcd's `GetPrefixRangeEnd`).
fn prefix_end(prefix: &str) -> String {
    let mut bytes = prefix.as_bytes().to_vec();
    while let Some(last) = bytes.pop() {
        if last < 0xff {
            bytes.push(last + 1);
            // keys are UTF-8 here; an incremented byte past ASCII is left lossy
            return String::from_utf8_lossy(&bytes).into_owned();
        }
    }
    "\0".to_owned()
}

impl Adapter for EtcdAdapter {
    fn execute(&self, body: RequestBody) -> BoxFuture<'static, Result<Reply, String>> {
        let inner = self.inner.clone();
        async move {
            match body {
                RequestBody::Etcd(req) => inner.call(&req).await.map(Reply::Etcd),
                other => Err(format!(
                    "the etcd adapter cannot run a {} request",
                    other.kind()
                )),
            }
        }
        .boxed()
    }

    fn holder(&self, name: String) -> BoxFuture<'static, Result<Option<Holder>, Error>> {
        let inner = self.inner.clone();
        async move { inner.holder(&name).await }.boxed()
    }

    fn list(&self, prefix: String, limit: usize) -> BoxFuture<'static, Result<Vec<Holder>, Error>> {
        let inner = self.inner.clone();
        async move { inner.list(&prefix, limit).await }.boxed()
    }
}
