//! Kubernetes `coordination.k8s.io/v1` Leases with reqwest, as the JavaScript
//! `KubernetesLeaseBackend` does over `fetch`: each call the core's method, path and
//! body, with the `spec` fields the request lists in `stamp` set to this host's wall
//! clock (`MicroTime`) just before sending, `Accept: application/json` and the bearer
//! token; any JSON body (a Lease, a LeaseList or a `Status`, whatever the HTTP status)
//! goes to the machine, which reads the status from it; a failed request or a body that
//! is not a JSON object (a proxy's error page) is a transport failure.

use std::path::PathBuf;
use std::sync::Arc;

use fencepost_core::backends::{
    read_kube_inspect, read_kube_list, KubeRequest, KubernetesBackend, KUBE_LIST_PAGE,
    KUBE_LIST_PAGES,
};
use fencepost_core::{Reply, RequestBody};
use futures::future::{BoxFuture, FutureExt};
use serde_json::Value;

use super::Adapter;
use crate::{Error, Holder};

/// Where the bearer token comes from.
#[derive(Clone, Debug)]
pub(crate) enum KubeToken {
    /// None: the API server must accept the call unauthenticated (or by client cert).
    None,
    /// A fixed token (the URL's `token=` or `$FENCEPOST_KUBE_TOKEN`).
    Fixed(String),
    /// A file read before every call, so a rotated service-account token is picked up
    /// (the kubelet rewrites projected tokens in place).
    File(PathBuf),
}

pub(crate) struct KubernetesAdapter {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    server: String,
    token: KubeToken,
    backend: KubernetesBackend,
}

impl KubernetesAdapter {
    /// An adapter for the API server at `server` (`http(s)://host:port`, no trailing
    /// slash).
    ///
    /// Errors: [`Error::Config`] for a token file that cannot be read or is empty, or
    /// a CA file [`super::http_client`] refuses.
    pub(crate) fn new(
        server: String,
        token: KubeToken,
        ca: Option<&std::path::Path>,
        backend: KubernetesBackend,
    ) -> Result<Self, Error> {
        if let KubeToken::File(path) = &token {
            read_token_file(path).map_err(Error::Config)?;
        }
        let http = super::http_client(ca, "the Kubernetes API server")?;
        Ok(KubernetesAdapter {
            inner: Arc::new(Inner {
                http,
                server,
                token,
                backend,
            }),
        })
    }
}

/// The token in `path`, trimmed. Errors: a message naming the file.
fn read_token_file(path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!("the token file {} is empty", path.display()));
    }
    Ok(token.to_owned())
}

/// The wall clock now as a Kubernetes `MicroTime` (RFC 3339 UTC, six fractional
/// digits: `2026-12-01T16:02:29.123456Z`).
fn micro_time() -> String {
    humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string()
}

/// `body` with each `spec` field in `stamp` set to `now`.
///
/// Errors: a message when the body is not a JSON object with a `spec` object (the
/// core never builds one, so this is a transport-side refusal, not a lock decision).
fn stamped(body: &str, stamp: &[String], now: &str) -> Result<String, String> {
    let mut doc: Value =
        serde_json::from_str(body).map_err(|e| format!("a Lease body that is not JSON: {e}"))?;
    let spec = doc
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| "a Lease body without a spec object to stamp".to_owned())?;
    for field in stamp {
        spec.insert(field.clone(), Value::String(now.to_owned()));
    }
    Ok(doc.to_string())
}

impl Inner {
    /// Sends one call; the response body when it is a JSON object, whatever the status.
    async fn call(&self, req: &KubeRequest) -> Result<String, String> {
        let method = reqwest::Method::from_bytes(req.method.as_bytes())
            .map_err(|_| format!("not an HTTP method: {:?}", req.method))?;
        let mut builder = self
            .http
            .request(method, format!("{}{}", self.server, req.path))
            .header("accept", "application/json");
        if let Some(body) = &req.body {
            let body = if req.stamp.is_empty() {
                body.clone()
            } else {
                // the core reads no clock: the wall-clock fields are the host's, for
                // people and client-go; no lock decision reads them
                stamped(body, &req.stamp, &micro_time())?
            };
            builder = builder.header("content-type", &req.content_type).body(body);
        }
        let token = match &self.token {
            KubeToken::None => None,
            KubeToken::Fixed(t) => Some(t.clone()),
            KubeToken::File(path) => Some(read_token_file(path)?),
        };
        if let Some(t) = token {
            builder = builder.bearer_auth(t);
        }
        let response = builder
            .send()
            .await
            .map_err(|e| crate::error::tls_hint(crate::error::chain(&e), "?ca=/path/ca.pem"))?;
        let status = response.status();
        let text = response.text().await.map_err(|e| crate::error::chain(&e))?;
        if !text.trim_start().starts_with('{') {
            return Err(format!(
                "HTTP {status} from the API server at {} without a JSON body: {:.200}",
                self.server,
                text.trim()
            ));
        }
        Ok(text)
    }

    /// The holder of `name`: one GET of its Lease, read by the core's
    /// `read_kube_inspect`.
    async fn holder(&self, name: &str) -> Result<Option<Holder>, Error> {
        let reply = self
            .call(&self.backend.inspect(name))
            .await
            .map_err(Error::Backend)?;
        Ok(read_kube_inspect(name, &reply)?)
    }

    /// The held Leases of the namespace under `prefix`: the core's pages
    /// (`list_page`, [`KUBE_LIST_PAGE`] each, at most [`KUBE_LIST_PAGES`]), stopping
    /// once `limit` are found; sorted by name.
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<Holder>, Error> {
        let mut found = std::collections::BTreeMap::new();
        let mut next: Option<String> = None;
        for _ in 0..KUBE_LIST_PAGES {
            let page = self.backend.list_page(KUBE_LIST_PAGE, next.as_deref());
            let reply = self.call(&page).await.map_err(Error::Backend)?;
            let (more, holders) = read_kube_list(prefix, &reply)?;
            for h in holders {
                found.insert(h.name.clone(), h);
            }
            next = more;
            if next.is_none() || found.len() >= limit {
                break;
            }
        }
        Ok(found.into_values().take(limit).collect())
    }
}

impl Adapter for KubernetesAdapter {
    fn execute(&self, body: RequestBody) -> BoxFuture<'static, Result<Reply, String>> {
        let inner = self.inner.clone();
        async move {
            match body {
                RequestBody::Kubernetes(req) => inner.call(&req).await.map(Reply::Kubernetes),
                other => Err(format!(
                    "the Kubernetes adapter cannot run a {} request",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamping_sets_each_listed_spec_field_and_keeps_the_rest() {
        let body = r#"{"metadata":{"name":"a"},"spec":{"holderIdentity":"x","renewTime":null}}"#;
        let stamp = ["acquireTime".to_owned(), "renewTime".to_owned()];
        let out: Value =
            serde_json::from_str(&stamped(body, &stamp, "2026-12-01T16:02:29.123456Z").unwrap())
                .unwrap();
        assert_eq!(out["spec"]["holderIdentity"], "x");
        assert_eq!(out["spec"]["acquireTime"], "2026-12-01T16:02:29.123456Z");
        assert_eq!(out["spec"]["renewTime"], "2026-12-01T16:02:29.123456Z");
        assert!(stamped("[]", &stamp, "t").is_err());
    }

    #[test]
    fn micro_time_has_six_fractional_digits_in_utc() {
        let t = micro_time();
        // 2026-12-01T16:02:29.123456Z: 19 + '.' + 6 + 'Z'
        assert_eq!(t.len(), 27, "{t}");
        assert_eq!(&t[19..20], ".");
        assert!(t.ends_with('Z'));
    }
}
