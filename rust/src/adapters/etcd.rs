//! etcd v3 through its JSON gateway with reqwest, as the Python httpx adapter does:
//! each call a POST of the core's gateway body to `/v3/…`; any JSON body (error
//! documents included) goes to the machine; a refused connection moves on to the next
//! member at once, any other transport failure is reported (outcome unknown) and the
//! next call starts at the next member. A watch streams until a line with events (or
//! a cancel, compaction or error) arrives, or answers `{}` at its timeout.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fencepost_core::backends::etcd::{
    read_etcd_inspect, read_etcd_time_to_live, EtcdBackend, EtcdRequest, ETCD_LIST_PAGES,
};
use fencepost_core::{Reply, RequestBody};
use futures::future::{BoxFuture, FutureExt};
use serde_json::Value;

use super::Adapter;
use crate::{Error, Holder};

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
                    text.trim()
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

    /// The holder of `name` (the core's `read_etcd_inspect` of the leader range: token,
    /// waiters, metadata) with the time left on its lease (`LeaseTimeToLive`); read
    /// again, at most 3 times, when the lease ended between the two calls.
    async fn holder(&self, name: &str) -> Result<Option<Holder>, Error> {
        for _ in 0..3 {
            let reply = self
                .call(&self.backend.leader_range(name))
                .await
                .map_err(Error::Backend)?;
            let Some((mut h, lease)) = read_etcd_inspect(name, &reply)? else {
                return Ok(None);
            };
            let ttl = self
                .call(&EtcdRequest::LeaseTimeToLive { id: lease })
                .await
                .map_err(Error::Backend)?;
            if let Some(left) = read_etcd_time_to_live(&ttl)? {
                h.ttl_left = Some(left);
                return Ok(Some(h));
            }
        }
        Ok(None)
    }

    /// The holders of the locks under `prefix`: the core's bounded pages over the key
    /// prefix (`list_page`), then one inspection per name, until `limit` are found.
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<Holder>, Error> {
        let mut out: Vec<Holder> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut after: Option<String> = None;
        'pages: for _ in 0..ETCD_LIST_PAGES {
            let page = self.backend.list_page(prefix, after.as_deref());
            let reply = self.call(&page).await.map_err(Error::Backend)?;
            let (names, next) = self.backend.read_list_page(prefix, &reply)?;
            for name in names {
                if !seen.insert(name.clone()) {
                    continue;
                }
                if let Some(h) = self.holder(&name).await? {
                    out.push(h);
                    if out.len() >= limit {
                        break 'pages;
                    }
                }
            }
            match next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
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
