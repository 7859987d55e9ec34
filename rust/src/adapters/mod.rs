//! Adapters: each executes the core's request bodies with one real client library and
//! converts the server's answer to the core's reply data. An adapter makes no lock
//! decision: error replies go back to the machine as data, which decides what is
//! transient; a failure to get an answer is a transport error (`Err(message)`).

use fencepost_core::{Reply, RequestBody};
use futures::future::BoxFuture;

use crate::{Error, Holder};

#[cfg(feature = "etcd")]
pub(crate) mod etcd;
#[cfg(feature = "kubernetes")]
pub(crate) mod kubernetes;
pub(crate) mod memory;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(feature = "redis")]
pub(crate) mod redis;
pub(crate) mod redis_inspect;
#[cfg(feature = "redis")]
pub(crate) mod redlock;
#[cfg(feature = "upstash")]
pub(crate) mod upstash;
#[cfg(feature = "zookeeper")]
pub(crate) mod zookeeper;

/// One backend's client, shared by the driver and the operator queries.
pub(crate) trait Adapter: Send + Sync + 'static {
    /// Runs one request body; `Ok` is the server's answer as data (error replies
    /// included), `Err` a transport failure with its message. The driver drops the
    /// future at the request's deadline.
    fn execute(&self, body: RequestBody) -> BoxFuture<'static, Result<Reply, String>>;

    /// Runs one of the machine's requests: [`Adapter::execute`] of its body, unless the
    /// adapter needs to know what the request is for (PostgreSQL marks each acquire's
    /// send for the waits that follow it).
    fn execute_request(
        &self,
        request: &fencepost_core::Request,
    ) -> BoxFuture<'static, Result<Reply, String>> {
        self.execute(request.body.clone())
    }

    /// Whether the adapter keeps state per lock and needs [`Adapter::lock_finished`]
    /// (PostgreSQL session mode: a connection per lock).
    fn tracks_locks(&self) -> bool {
        false
    }

    /// Lock `lock`'s final event (released, lost, acquire failed) has come: what the
    /// adapter keeps for it can go once its requests in flight are done.
    fn lock_finished(&self, _lock: fencepost_core::LockId) {}

    /// Who holds `name` now, as the server sees it (`None`: nobody).
    fn holder(&self, name: String) -> BoxFuture<'static, Result<Option<Holder>, Error>>;

    /// The held locks whose names start with `prefix`, at most `limit`, in the
    /// server's order; scans in bounded steps (never a full-keyspace command).
    fn list(&self, prefix: String, limit: usize) -> BoxFuture<'static, Result<Vec<Holder>, Error>>;
}

/// The reqwest client of an HTTP adapter (etcd, Upstash, Kubernetes; `what` names it in
/// errors): a 1 s connect timeout and, with the cargo feature `tls` and a CA file given
/// (`ca`), only that CA trusted for `https://`.
///
/// Errors: [`Error::Config`] for a CA file that cannot be read or is not PEM
/// certificates, or a client reqwest cannot build.
#[cfg(any(feature = "etcd", feature = "upstash", feature = "kubernetes"))]
pub(crate) fn http_client(
    ca: Option<&std::path::Path>,
    what: &str,
) -> Result<reqwest::Client, Error> {
    #[allow(unused_mut)]
    let mut builder = reqwest::Client::builder().connect_timeout(std::time::Duration::from_secs(1));
    #[cfg(feature = "tls")]
    if let Some(path) = ca {
        let (pem, _) = crate::tls::read_ca(path)?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
            Error::Config(format!(
                "the CA certificate file {} is refused: {e}",
                path.display()
            ))
        })?;
        builder = builder.tls_certs_only(certs);
    }
    #[cfg(not(feature = "tls"))]
    let _ = ca; // the URL parser refuses a CA without the feature
    builder
        .build()
        .map_err(|e| Error::Config(format!("cannot build the HTTP client for {what}: {e}")))
}
