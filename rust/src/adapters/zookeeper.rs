//! ZooKeeper with zookeeper-client (async, on tokio), as the Python kazoo adapter
//! does: each core call runs on the client's session and its reply names that
//! session (`"session"`), so the machine sees a reconnect within the session (same id)
//! and an expiry (a `session_expired` error, then a new id) in the replies themselves.
//! A watch wakes on the predecessor's deletion or change, on any session state change
//! (disconnected, reconnected, expired), or at its timeout. A lost connection or a
//! call without an answer is a transport error (outcome unknown); every other server
//! error goes back to the machine as data.
//!
//! zookeeper-client's session never reconnects after it expired: the next call opens
//! a new session (whose nodes the machine finds are not its old ones).

use std::sync::Arc;
use std::time::Duration;

use fencepost_core::backends::zookeeper::ZkOp;
use fencepost_core::backends::{
    read_zk_contenders, read_zk_holder, read_zk_list, ZkNaming, ZkRequest, ZooKeeperBackend,
    ZK_INSPECT_TRIES,
};
use fencepost_core::{Reply, RequestBody};
use futures::future::{BoxFuture, FutureExt};
use serde_json::{json, Value};
use zookeeper_client as zk;

use super::Adapter;
use crate::{Error, Holder};

/// The session timeout asked for when the URL names none (the server may negotiate
/// another, within its `minSessionTimeout ..= maxSessionTimeout`).
pub(crate) const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// At most this many locks examined by one `list`.
const LIST_LOCKS: usize = 10_000;

pub(crate) struct ZkAdapter {
    inner: Arc<Inner>,
}

struct Inner {
    hosts: String,
    asked: Duration,
    /// The current session's client; replaced once its session expired.
    client: tokio::sync::Mutex<zk::Client>,
    backend: ZooKeeperBackend,
}

/// How a call failed: the server's answer (for the machine) or no answer.
enum Failure {
    /// A server error kind (`no_node`, `session_expired`, …) and its message.
    Server(String, String),
    /// The connection was lost or the call timed out: the outcome is unknown.
    Transport(String),
}

fn failure(e: zk::Error) -> Failure {
    use zk::Error as E;
    let kind = match &e {
        E::ConnectionLoss | E::Timeout | E::ClientClosed | E::NoHosts => {
            return Failure::Transport(format!("zookeeper: {e}"))
        }
        E::NoNode => "no_node",
        E::NodeExists => "node_exists",
        E::BadVersion => "bad_version",
        E::NotEmpty => "not_empty",
        E::SessionExpired => "session_expired",
        E::SessionMoved => "session_moved",
        E::AuthFailed => "auth_failed",
        E::NoAuth => "no_auth",
        E::NoChildrenForEphemerals => "no_children_for_ephemerals",
        E::InvalidAcl => "invalid_acl",
        E::NotReadOnly => "not_read_only",
        E::Throttled => "throttled",
        E::QuotaExceeded => "quota_exceeded",
        E::BadArguments(_) => "bad_arguments",
        E::Unimplemented => "unimplemented",
        _ => "system_error",
    };
    Failure::Server(kind.to_owned(), e.to_string())
}

fn stat_json(s: &zk::Stat) -> Value {
    json!({"czxid": s.czxid, "version": s.version, "ephemeral_owner": s.ephemeral_owner})
}

fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

/// `Some(version)`, or `None` (any version) for ZooKeeper's -1.
fn version(v: i32) -> Option<i32> {
    (v >= 0).then_some(v)
}

impl ZkAdapter {
    /// Opens a session on `hosts` (a connect string, `h1:2181,h2:2181`), asking for
    /// `session_timeout`, and returns the adapter with the core's settings, whose
    /// `session_timeout_ms` is the timeout the server negotiated.
    pub(crate) async fn connect(
        hosts: &str,
        session_timeout: Duration,
        root: String,
        naming: ZkNaming,
    ) -> Result<(Self, ZooKeeperBackend), Error> {
        let client = open(hosts, session_timeout).await?;
        let negotiated = u64::try_from(client.session_timeout().as_millis()).unwrap_or(u64::MAX);
        let backend = ZooKeeperBackend {
            root,
            naming,
            session_timeout_ms: Some(negotiated),
        };
        let inner = Arc::new(Inner {
            hosts: hosts.to_owned(),
            asked: session_timeout,
            client: tokio::sync::Mutex::new(client),
            backend: backend.clone(),
        });
        Ok((ZkAdapter { inner }, backend))
    }
}

async fn open(hosts: &str, session_timeout: Duration) -> Result<zk::Client, Error> {
    let connect = zk::Client::connector()
        .with_session_timeout(session_timeout)
        .connect(hosts);
    // the library gives up after about one session timeout; this bounds it whatever
    match tokio::time::timeout(session_timeout + Duration::from_secs(5), connect).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(Error::Backend(format!(
            "cannot open a ZooKeeper session on {hosts}: {e}"
        ))),
        Err(_) => Err(Error::Backend(format!(
            "cannot open a ZooKeeper session on {hosts} within {session_timeout:?}"
        ))),
    }
}

impl Inner {
    /// The client of the live session, opening a new session after an expiry.
    async fn session(&self) -> Result<zk::Client, String> {
        let mut client = self.client.lock().await;
        if client.state().is_terminated() {
            *client = open(&self.hosts, self.asked)
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(client.clone())
    }

    async fn call(&self, req: &ZkRequest) -> Result<String, String> {
        let client = self.session().await?;
        let mut doc = match run(&client, req).await {
            Ok(doc) => doc,
            Err(Failure::Server(kind, message)) => json!({"error": kind, "message": message}),
            Err(Failure::Transport(message)) => return Err(message),
        };
        doc["session"] = json!(client.session_id().0);
        Ok(doc.to_string())
    }

    /// A core operator call's reply document; a transport failure is a backend error.
    async fn query(&self, req: &ZkRequest) -> Result<String, Error> {
        self.call(req)
            .await
            .map_err(|e| Error::Backend(format!("zookeeper {}: {e}", req.call_name())))
    }

    /// The holder of lock `name`, read as the core reads it (the lowest contender, its
    /// czxid, the contenders behind it, its data as the metadata); a holder that left
    /// before its node was read sends the listing again, at most `ZK_INSPECT_TRIES` times.
    async fn holder(&self, name: &str) -> Result<Option<Holder>, Error> {
        for _ in 0..ZK_INSPECT_TRIES {
            let listed = self.query(&self.backend.inspect(name)).await?;
            let Some(node) = read_zk_contenders(&self.backend, name, &listed)? else {
                return Ok(None);
            };
            let data = self.query(&node.get()).await?;
            if let Some(h) = read_zk_holder(&self.backend, name, &node, &data)? {
                return Ok(Some(h));
            }
        }
        Err(Error::Backend(format!(
            "zookeeper: the holder of {name:?} left before its node could be read, {ZK_INSPECT_TRIES} times in a row"
        )))
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<Holder>, Error> {
        let listed = self.query(&self.backend.list_names()).await?;
        let mut names = read_zk_list(prefix, &listed)?;
        names.truncate(LIST_LOCKS);
        let mut out = Vec::new();
        for name in names {
            if out.len() >= limit {
                break;
            }
            if let Some(h) = self.holder(&name).await? {
                out.push(h);
            }
        }
        Ok(out)
    }
}

/// Runs one core call on `client`: the reply document without its `"session"`.
async fn run(client: &zk::Client, req: &ZkRequest) -> Result<Value, Failure> {
    match req {
        ZkRequest::Create { path, data } => {
            let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
            let parent = path.rsplit_once('/').map_or("", |(p, _)| p);
            // the client sends each request when called: the listing, right behind the
            // create, sees the new node (a session's requests run in order), and both
            // take one round trip
            let creating = client.create(path, data.as_bytes(), &options);
            let mut listed = client.list_children(parent);
            let mut created = creating.await;
            if let Err(zk::Error::NoNode) = created {
                // the lock's parents are made on first use, as kazoo's ensure_path
                client.mkdir(parent, &persistent()).await.map_err(failure)?;
                let creating = client.create(path, data.as_bytes(), &options);
                listed = client.list_children(parent);
                created = creating.await;
            }
            let (stat, sequence) = created.map_err(failure)?;
            let mut doc = json!({"path": format!("{path}{sequence}"), "stat": stat_json(&stat)});
            // a failed listing is left out: the recipe lists the children itself
            if let Ok(children) = listed.await {
                doc["children"] = json!(children);
            }
            Ok(doc)
        }
        ZkRequest::Children { path } => {
            let children = client.list_children(path).await.map_err(failure)?;
            Ok(json!({ "children": children }))
        }
        ZkRequest::Exists { path } => {
            let stat = client.check_stat(path).await.map_err(failure)?;
            Ok(json!({"stat": stat.as_ref().map(stat_json)}))
        }
        ZkRequest::Watch { path, timeout_ms } => {
            let event = watch(client, path, Duration::from_millis(*timeout_ms)).await?;
            Ok(json!({ "event": event }))
        }
        ZkRequest::Get { path } => {
            let (data, stat) = client.get_data(path).await.map_err(failure)?;
            // data that is not UTF-8 is not fencepost's: no metadata
            Ok(json!({"data": String::from_utf8(data).ok(), "stat": stat_json(&stat)}))
        }
        ZkRequest::Delete { path } => {
            client.delete(path, None).await.map_err(failure)?;
            Ok(json!({"deleted": true}))
        }
        ZkRequest::DeleteOwned { path, prefix } => {
            let children = match client.list_children(path).await {
                Ok(c) => c,
                Err(zk::Error::NoNode) => return Ok(json!({"deleted": 0})),
                Err(e) => return Err(failure(e)),
            };
            let mut n = 0;
            for child in children.iter().filter(|c| c.starts_with(prefix.as_str())) {
                match client.delete(&format!("{path}/{child}"), None).await {
                    Ok(()) | Err(zk::Error::NoNode) => n += 1,
                    Err(e) => return Err(failure(e)),
                }
            }
            Ok(json!({ "deleted": n }))
        }
        ZkRequest::Multi {
            check_path,
            check_version,
            ops,
        } => multi(client, check_path, *check_version, ops).await,
        other => Err(Failure::Server(
            "unimplemented".to_owned(),
            format!(
                "the ZooKeeper adapter cannot run the call {:?}",
                other.call_name()
            ),
        )),
    }
}

/// Waits for `path`'s deletion or change, a session state change, or `timeout`.
async fn watch(
    client: &zk::Client,
    path: &str,
    timeout: Duration,
) -> Result<&'static str, Failure> {
    let mut states = client.state_watcher();
    let (stat, watcher) = client.check_and_watch_stat(path).await.map_err(failure)?;
    if stat.is_none() {
        return Ok("no_node");
    }
    Ok(tokio::select! {
        event = watcher.changed() => match event.event_type {
            zk::EventType::NodeDeleted => "deleted",
            zk::EventType::Session => "session",
            _ => "changed",
        },
        _ = states.changed() => "session",
        _ = tokio::time::sleep(timeout) => "timeout",
    })
}

/// A fenced transaction: the check, then `ops`; one result per operation, the
/// check's first (`true`, or the error kind; operations that did not run are
/// `"rolled_back"`, as the server reports them).
async fn multi(
    client: &zk::Client,
    check_path: &str,
    check_version: i32,
    ops: &[ZkOp],
) -> Result<Value, Failure> {
    let mut writer = client.new_multi_writer();
    writer
        .add_check_version(check_path, check_version)
        .map_err(failure)?;
    for op in ops {
        match op {
            ZkOp::Create { path, data } => writer.add_create(path, data.as_bytes(), &persistent()),
            ZkOp::SetData {
                path,
                data,
                version: v,
            } => writer.add_set_data(path, data.as_bytes(), version(*v)),
            ZkOp::Delete { path, version: v } => writer.add_delete(path, version(*v)),
        }
        .map_err(failure)?;
    }
    let n = ops.len() + 1;
    match writer.commit().await {
        Ok(_) => Ok(json!({ "results": vec![true; n] })),
        Err(zk::MultiWriteError::OperationFailed { index, source }) => {
            let kind = match failure(source) {
                Failure::Server(kind, _) => kind,
                Failure::Transport(m) => return Err(Failure::Transport(m)),
            };
            let results: Vec<Value> = (0..n)
                .map(|i| {
                    json!(if i == index {
                        kind.as_str()
                    } else {
                        "rolled_back"
                    })
                })
                .collect();
            Ok(json!({ "results": results }))
        }
        Err(zk::MultiWriteError::RequestFailed { source }) => Err(failure(source)),
    }
}

impl Adapter for ZkAdapter {
    fn execute(&self, body: RequestBody) -> BoxFuture<'static, Result<Reply, String>> {
        let inner = self.inner.clone();
        async move {
            match body {
                RequestBody::ZooKeeper(req) => inner.call(&req).await.map(Reply::ZooKeeper),
                other => Err(format!(
                    "the ZooKeeper adapter cannot run a {} request",
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
