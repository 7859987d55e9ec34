//! ZooKeeper: ephemeral sequential nodes, the session as the lease, and the holder
//! node's `czxid` as the fencing token.
//!
//! The recipe is ZooKeeper's documented lock recipe, as kazoo's `Lock` and Curator's
//! `InterProcessMutex` implement it, driven step by step by the lock machine:
//!
//! 1. **Node.** Create an ephemeral sequential node `{root}/{name}/{prefix}` (the server
//!    appends a 10-digit sequence), parents made as needed. The prefix carries the owner
//!    id ([`ZooKeeperBackend::node_prefix`]): kazoo's naming `{owner hex}__lock__` by
//!    default, Curator's `_c_{owner as a UUID}-lock-` with [`ZkNaming::Curator`]. After
//!    an ambiguous create (its reply lost) the next step lists the children and adopts
//!    the node with the owner's prefix, instead of queueing a second node behind it.
//! 2. **Hold or wait.** List the children; the contenders are the nodes whose name ends
//!    in a lock marker and a sequence (`__lock__`/`__rlock__` + sequence for kazoo,
//!    `lock-` + sequence for Curator), sorted by that sequence as those libraries sort
//!    them. The lowest holds. A waiter watches only its immediate predecessor (no herd,
//!    no polling) and lists again when the watch fires.
//! 3. **Token**: the holder node's `czxid`, the zxid of the transaction that created it
//!    (64 bits, ensemble-wide, only rises), never the sequence number, which is a signed
//!    32-bit counter per parent and wraps.
//! 4. **Session = lease.** The node lives as long as the client's session, which the
//!    client library keeps alive with pings. The lock's TTL is the session timeout the
//!    server negotiated ([`ZooKeeperBackend::session_timeout_ms`]); the machine measures
//!    validity from the send of the last request of the lock the server answered, and
//!    renews by asking whether the node still exists for this session (`exists`). Every
//!    reply names the session it was received on: a node whose `ephemeralOwner` is
//!    another session is never ours, and an expired session (`session_expired`) is a
//!    loss at once.
//! 5. **Release** deletes the node; a cancellation or a cleanup deletes every child
//!    with the owner's prefix ([`ZkRequest::DeleteOwned`]).
//!
//! Requests are data ([`ZkRequest`], serialized as JSON with a `call` tag) for the
//! host's ZooKeeper client; replies are JSON documents the adapter writes (see
//! [`ZkRequest`] for each shape; every reply carries `"session"`, the client's session
//! id when it was received, and an error is `{"error": kind, "message", "session"}`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    payload, Ending, Phrased, Progress, Read, ReadError, Recipe, Reply, RequestBody, Step, StepCx,
    Unconfirmed, Waiting,
};
use crate::error::ProtocolError;
use crate::{FencingToken, Instant, OwnerId};

/// Settings of the ZooKeeper backend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ZooKeeperBackend {
    /// Parent of every lock path; default `/fencepost`. Lock `name` lives at
    /// `{root}/{name}`: to share a lock with kazoo's `Lock("/locks/report")`, use root
    /// `/locks` and name `report`.
    pub root: String,
    /// Whose node names fencepost uses, so that it and that library exclude each other
    /// on one path.
    pub naming: ZkNaming,
    /// The session timeout the server negotiated, in milliseconds (`None`: not known
    /// yet). A lock's TTL must not exceed it: the node can vanish one session timeout
    /// after the server last heard from the client.
    pub session_timeout_ms: Option<u64>,
}

impl Default for ZooKeeperBackend {
    fn default() -> Self {
        ZooKeeperBackend {
            root: "/fencepost".to_owned(),
            naming: ZkNaming::Kazoo,
            session_timeout_ms: None,
        }
    }
}

/// The node names of one lock library.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ZkNaming {
    /// kazoo's `Lock`: `{32 hex digits}__lock__{sequence}`.
    #[default]
    Kazoo,
    /// Curator's `InterProcessMutex` (protected mode): `_c_{UUID}-lock-{sequence}`.
    Curator,
}

/// One ZooKeeper call, with the JSON reply the adapter answers. Every reply also
/// carries `"session"` (the client's session id, int64, when the reply came); a failed
/// call answers `{"error": kind, "message": …, "session": …}` with kind `no_node`,
/// `node_exists`, `bad_version`, `not_empty`, `connection_loss`, `operation_timeout`,
/// `session_expired`, `session_moved` or another snake_case name of the server's code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ZkRequest {
    /// Create the ephemeral sequential node `{path}` + sequence with `data` (UTF-8),
    /// making missing parents (persistent, empty). Reply `{"path": created path,
    /// "stat": Stat, "children": [names]}` (ZooKeeper's `create2`). `children` is
    /// optional: the parent's children as a `getChildren` sent on the same session
    /// right behind the create lists them (a session's requests run in order, so it
    /// sees the new node; one round trip for both). Without it, or when it lacks the
    /// created node (a listing that failed or ran before a retried create), the recipe
    /// lists the children in a step of its own.
    Create {
        /// The node path before the sequence.
        path: String,
        /// The node's data: the holder metadata's canonical JSON when the lock has
        /// [`crate::LockOptions::metadata`], else the owner id.
        data: String,
    },
    /// `getChildren(path)`. Reply `{"children": [names]}`; `no_node` when `path` does
    /// not exist.
    Children {
        /// The parent.
        path: String,
    },
    /// `exists(path)`. Reply `{"stat": Stat}`, or `{"stat": null}` when there is none.
    Exists {
        /// The node.
        path: String,
    },
    /// `exists(path, watch)`, then block until the watch fires, the session changes
    /// state, or `timeout_ms` passes. Reply `{"event": "deleted" | "changed" |
    /// "no_node" | "session" | "timeout"}`. A blocking wait: it must not hold up other
    /// locks' requests.
    Watch {
        /// The predecessor node.
        path: String,
        /// Reply `"timeout"` after this long without an event.
        timeout_ms: u64,
    },
    /// `getData(path)`. Reply `{"data": text, "stat": Stat}` (`data` the node's data as
    /// UTF-8, `null` for none or bytes that are not UTF-8); `no_node` when gone.
    Get {
        /// The node.
        path: String,
    },
    /// `delete(path, version = -1)`. Reply `{"deleted": true}`; `no_node` when gone.
    Delete {
        /// The node.
        path: String,
    },
    /// Delete every child of `path` whose name starts with `prefix` (list, then delete
    /// each; a child already gone counts as deleted). Reply `{"deleted": count}`; a
    /// missing `path` is `{"deleted": 0}`.
    DeleteOwned {
        /// The parent.
        path: String,
        /// The owner's node prefix.
        prefix: String,
    },
    /// A multi-op transaction: `check(check_path, check_version)`, then `ops`, all or
    /// nothing. Reply `{"results": [...]}`, one entry per operation, the check's first:
    /// `true` for an operation that ran, or the error kind (`"no_node"`,
    /// `"bad_version"`, `"rolled_back"`, …) for one that did not.
    Multi {
        /// The node that must exist…
        check_path: String,
        /// …with this data version.
        check_version: i32,
        /// What runs when it does.
        ops: Vec<ZkOp>,
    },
}

/// One write of a [`ZkRequest::Multi`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ZkOp {
    /// Create a persistent node with `data`.
    Create {
        /// The node.
        path: String,
        /// Its data (UTF-8).
        data: String,
    },
    /// Set a node's data; `version` -1 for any.
    SetData {
        /// The node.
        path: String,
        /// The new data (UTF-8).
        data: String,
        /// The expected version, or -1.
        version: i32,
    },
    /// Delete a node; `version` -1 for any.
    Delete {
        /// The node.
        path: String,
        /// The expected version, or -1.
        version: i32,
    },
}

impl ZkRequest {
    /// The call's name: `"create"`, `"children"`, `"exists"`, `"watch"`, `"get"`,
    /// `"delete"`, `"delete_owned"` or `"multi"`.
    pub fn call_name(&self) -> &'static str {
        match self {
            ZkRequest::Create { .. } => "create",
            ZkRequest::Children { .. } => "children",
            ZkRequest::Exists { .. } => "exists",
            ZkRequest::Watch { .. } => "watch",
            ZkRequest::Get { .. } => "get",
            ZkRequest::Delete { .. } => "delete",
            ZkRequest::DeleteOwned { .. } => "delete_owned",
            ZkRequest::Multi { .. } => "multi",
        }
    }

    /// The call as JSON (`{"call": …, fields}`), what adapters execute.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The watch timeout, for a [`ZkRequest::Watch`].
    pub fn watch_timeout_ms(&self) -> Option<u64> {
        match self {
            ZkRequest::Watch { timeout_ms, .. } => Some(*timeout_ms),
            _ => None,
        }
    }
}

impl ZooKeeperBackend {
    /// The path of lock `name`: `{root}/{name}` (a root of `/` gives `/{name}`).
    pub fn lock_path(&self, name: &str) -> String {
        format!("{}/{}", self.root.trim_end_matches('/'), name)
    }

    /// The name `owner`'s node starts with, before the server's sequence: kazoo's
    /// `{owner hex}__lock__` or Curator's `_c_{owner as a UUID}-lock-`.
    pub fn node_prefix(&self, owner: &OwnerId) -> String {
        // always 32 ASCII hex digits, so the slices below are in bounds
        let hex = owner.to_string();
        match self.naming {
            ZkNaming::Kazoo => format!("{hex}__lock__"),
            ZkNaming::Curator => format!(
                "_c_{}-{}-{}-{}-{}-lock-",
                &hex[0..8],
                &hex[8..12],
                &hex[12..16],
                &hex[16..20],
                &hex[20..32]
            ),
        }
    }

    /// The multi-op transaction that runs `ops` only while `holder_node` (the full path
    /// of the lease's own node, which exists exactly while it holds the lock) exists
    /// with data version 0: ZooKeeper's counterpart of etcd's `IsOwner` comparison.
    /// Read the reply with [`read_zk_fenced`].
    pub fn fenced_multi(&self, holder_node: &str, ops: Vec<ZkOp>) -> ZkRequest {
        ZkRequest::Multi {
            check_path: holder_node.to_owned(),
            check_version: 0,
            ops,
        }
    }
}

/// The outcome of a [`ZooKeeperBackend::fenced_multi`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ZkFenced {
    /// The holder node was there: every operation ran.
    Applied,
    /// The holder node is gone (or changed): nothing was written.
    Refused,
}

/// Reads the reply of a fenced multi (see [`ZooKeeperBackend::fenced_multi`]).
///
/// Errors: [`ProtocolError`] for an error reply other than a failed check, or a reply
/// of another shape (a `connection_loss` is one: the caller retries the write).
pub fn read_zk_fenced(reply: &str) -> Result<ZkFenced, ProtocolError> {
    let v: Value = serde_json::from_str(reply).map_err(|e| {
        protocol(format!(
            "fenced multi: reply is not JSON ({e}): {reply:.200}"
        ))
    })?;
    let shape = || protocol(format!("fenced multi: unexpected reply {reply:.200}"));
    let results = v
        .get("results")
        .and_then(Value::as_array)
        .ok_or_else(shape)?;
    match results.first() {
        Some(Value::Bool(true)) if results.iter().all(|r| r == &Value::Bool(true)) => {
            Ok(ZkFenced::Applied)
        }
        Some(Value::String(kind)) if kind == "no_node" || kind == "bad_version" => {
            Ok(ZkFenced::Refused)
        }
        _ => Err(shape()),
    }
}

/// The sequence key of a contender's node name, if it is one under `naming`: the
/// sequence as the library sorts it (kazoo and Curator compare the digit strings).
fn contender_key(naming: ZkNaming, child: &str) -> Option<&str> {
    let digits = child.len().checked_sub(10)?;
    if !child.is_char_boundary(digits) || !child[digits..].bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let marked = |end: usize| match naming {
        ZkNaming::Kazoo => {
            child[..end].ends_with("__lock__") || child[..end].ends_with("__rlock__")
        }
        ZkNaming::Curator => child[..end].ends_with("lock-"),
    };
    // a wrapped (negative) sequence is printed with its sign; that byte is an ASCII
    // `-`, so `digits - 1` is a char boundary too
    if digits > 0 && child.as_bytes()[digits - 1] == b'-' && marked(digits - 1) {
        return Some(&child[digits - 1..]);
    }
    marked(digits).then(|| &child[digits..])
}

/// The contenders among `children`, lowest sequence first.
pub(crate) fn sorted_contenders(naming: ZkNaming, children: &[String]) -> Vec<&str> {
    let mut c: Vec<(&str, &str)> = children
        .iter()
        .filter_map(|n| contender_key(naming, n).map(|k| (k, n.as_str())))
        .collect();
    c.sort_unstable();
    c.into_iter().map(|(_, n)| n).collect()
}

// ---- per-lock progress ------------------------------------------------------------

/// Which request an acquire or release step was.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum ZkStep {
    #[default]
    Create,
    /// Children, looking for the own node after an ambiguous create.
    Find,
    /// Exists of the own node: its czxid and session.
    Stat,
    /// Children, to see who holds.
    Children,
}

/// One lock's progress through the recipe, for its current owner id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ZkProgress {
    owner: OwnerId,
    /// A create was sent for this owner (its outcome may be unknown).
    create_tried: bool,
    /// The own node's name (the last path segment), once known.
    node: Option<String>,
    /// The own node's czxid and ephemeral owner (session), once read.
    czxid: Option<i64>,
    session: Option<i64>,
    /// A node with the own prefix that belongs to another session: never ours.
    foreign: Option<String>,
    /// The predecessor to watch (full path).
    predecessor: Option<String>,
    /// The send of the last acquire step the server answered on the node's session:
    /// a waiter checks its place again a renew interval later (its watch lasts until
    /// then), so a node lost with its session is noticed without polling.
    since: Option<Instant>,
    pending: ZkStep,
}

impl ZkProgress {
    fn new(owner: OwnerId) -> Self {
        ZkProgress {
            owner,
            create_tried: false,
            node: None,
            czxid: None,
            session: None,
            foreign: None,
            predecessor: None,
            since: None,
            pending: ZkStep::Create,
        }
    }

    /// The node (and anything of its session) is gone: create a new one.
    fn forget_node(&mut self) {
        self.create_tried = false;
        self.node = None;
        self.czxid = None;
        self.session = None;
        self.predecessor = None;
        self.since = None;
    }
}

/// The progress of `owner`, fresh when the owner id changed (or none was kept).
fn progress_of<'a>(progress: &'a mut Progress, owner: &OwnerId) -> &'a mut ZkProgress {
    if progress
        .zookeeper
        .as_ref()
        .is_some_and(|p| p.owner != *owner)
    {
        progress.zookeeper = None;
    }
    progress
        .zookeeper
        .get_or_insert_with(|| Box::new(ZkProgress::new(*owner)))
}

impl ZooKeeperBackend {
    /// Checks that a lock's TTL fits in the negotiated session: the node may vanish
    /// one session timeout after the server last heard from the client.
    ///
    /// Errors: [`crate::UsageError::InvalidOption`] for `ttl` over
    /// [`ZooKeeperBackend::session_timeout_ms`].
    pub fn check_ttl(&self, options: &crate::LockOptions) -> Result<(), crate::UsageError> {
        match self.session_timeout_ms {
            Some(session) if options.ttl_ms() > session => Err(crate::UsageError::option(
                "ttl",
                crate::text![
                    "must be at most the ZooKeeper session timeout the server negotiated (",
                    core::time::Duration::from_millis(session),
                    "), got ",
                    options.ttl,
                ],
            )),
            _ => Ok(()),
        }
    }

    fn node_path(&self, name: &str, node: &str) -> String {
        format!("{}/{}", self.lock_path(name), node)
    }

    fn acquire(&self, name: &str, metadata: Option<&str>, p: &mut ZkProgress) -> ZkRequest {
        let path = self.lock_path(name);
        match (&p.node, p.czxid) {
            (None, _) if !p.create_tried => {
                p.pending = ZkStep::Create;
                p.create_tried = true;
                // the node's data is a free-form label to kazoo (its `identifier`, what
                // `Lock.contenders()` returns) and Curator (the client's address by
                // default): the metadata goes there, re-encoded canonically
                let data = metadata
                    .map(|m| {
                        crate::decode_metadata(m)
                            .map_or_else(|| m.to_owned(), |d| crate::encode_metadata(&d))
                    })
                    .unwrap_or_else(|| p.owner.to_string());
                ZkRequest::Create {
                    path: format!("{path}/{}", self.node_prefix(&p.owner)),
                    data,
                }
            }
            (None, _) => {
                p.pending = ZkStep::Find;
                ZkRequest::Children { path }
            }
            (Some(node), None) => {
                p.pending = ZkStep::Stat;
                ZkRequest::Exists {
                    path: self.node_path(name, node),
                }
            }
            (Some(_), Some(_)) => {
                p.pending = ZkStep::Children;
                ZkRequest::Children { path }
            }
        }
    }

    fn read_acquire(
        &self,
        name: &str,
        p: &mut ZkProgress,
        sent_at: Instant,
        reply: &str,
    ) -> Result<Read, ReadError> {
        let v = match parse(reply) {
            Ok(v) => v,
            Err(Failed::Session) => {
                // the session ended: every node of it is gone with it
                p.forget_node();
                return Err(ReadError::Ambiguous(format!("zookeeper: {reply:.200}")));
            }
            Err(Failed::NoNode) if p.pending == ZkStep::Find => {
                // no lock path: our create never landed
                p.forget_node();
                return Ok(Read::Continue);
            }
            Err(e) => return Err(e.into_read(reply)),
        };
        let session = int(&v, "session");
        match p.pending {
            ZkStep::Create => {
                let created = v.get("path").and_then(Value::as_str);
                let node = created.and_then(|c| c.rsplit('/').next());
                let stat = stat(&v);
                match (node, stat) {
                    (Some(node), Some(stat)) if node.starts_with(&self.node_prefix(&p.owner)) => {
                        p.node = Some(node.to_owned());
                        p.czxid = Some(stat.czxid);
                        p.session = Some(stat.ephemeral_owner);
                        p.since = Some(sent_at);
                        // a listing sent behind the create that saw the node is the
                        // children step's reply, sent when the create was
                        if children(&v).is_some_and(|c| c.iter().any(|c| c == node)) {
                            p.pending = ZkStep::Children;
                            return self.read_acquire(name, p, sent_at, reply);
                        }
                        Ok(Read::Continue)
                    }
                    _ => Err(shape(reply)),
                }
            }
            ZkStep::Find => {
                let children = children(&v).ok_or_else(|| shape(reply))?;
                let prefix = self.node_prefix(&p.owner);
                let found = children
                    .iter()
                    .find(|c| c.starts_with(&prefix) && p.foreign.as_ref() != Some(*c));
                match found {
                    // adopt it; its stat says whether it is this session's
                    Some(node) => p.node = Some(node.clone()),
                    None => p.forget_node(),
                }
                Ok(Read::Continue)
            }
            ZkStep::Stat => match (stat(&v), session) {
                (Some(stat), Some(session)) if stat.ephemeral_owner == session => {
                    p.czxid = Some(stat.czxid);
                    p.session = Some(session);
                    p.since = Some(sent_at);
                    Ok(Read::Continue)
                }
                (Some(_), Some(_)) => {
                    // another session's node (an earlier, expired session of ours
                    // that the server has not removed yet): not ours
                    p.foreign = p.node.take();
                    p.forget_node();
                    Ok(Read::Continue)
                }
                (None, Some(_)) if v.get("stat") == Some(&Value::Null) => {
                    p.forget_node();
                    Ok(Read::Continue)
                }
                _ => Err(shape(reply)),
            },
            ZkStep::Children => {
                let children = children(&v).ok_or_else(|| shape(reply))?;
                if session.is_none() || session != p.session {
                    // our node belonged to an earlier session: it is gone
                    p.forget_node();
                    return Ok(Read::Continue);
                }
                p.since = Some(sent_at);
                let contenders = sorted_contenders(self.naming, &children);
                let node = p.node.as_deref().unwrap_or_default();
                match contenders.iter().position(|c| *c == node) {
                    None => {
                        p.forget_node();
                        Ok(Read::Continue)
                    }
                    Some(0) => {
                        p.predecessor = None;
                        let czxid = p.czxid.unwrap_or_default();
                        let token = u64::try_from(czxid)
                            .ok()
                            .filter(|t| *t > 0)
                            .ok_or_else(|| shape(reply))?;
                        Ok(Read::Granted {
                            token: FencingToken(token),
                            base: None,
                            // the predecessor's node is gone either way
                            previous: crate::Previous::Unknown,
                        })
                    }
                    Some(i) => {
                        p.predecessor = Some(self.node_path(name, contenders[i - 1]));
                        // the lowest node's sequence marks the holder: a new holder is
                        // a new node
                        let holder = contenders
                            .first()
                            .and_then(|lowest| contender_key(self.naming, lowest))
                            .and_then(|seq| seq.parse::<i64>().ok())
                            .map(|seq| seq as u64);
                        Ok(Read::Contended {
                            remaining: None,
                            queued: true,
                            holder,
                        })
                    }
                }
            }
        }
    }

    fn renew(&self, name: &str, p: &ZkProgress) -> ZkRequest {
        let node = p.node.clone().unwrap_or_else(|| self.node_prefix(&p.owner));
        ZkRequest::Exists {
            path: self.node_path(name, &node),
        }
    }

    fn delete_owned(&self, name: &str, owner: &OwnerId) -> ZkRequest {
        ZkRequest::DeleteOwned {
            path: self.lock_path(name),
            prefix: self.node_prefix(owner),
        }
    }
}

/// A renewal reply: the own node still exists, created by the same transaction, for
/// the session the reply came on.
fn read_renew(p: &ZkProgress, reply: &str) -> Result<Read, ReadError> {
    let v = match parse(reply) {
        Ok(v) => v,
        Err(Failed::Session) | Err(Failed::NoNode) => return Ok(Read::NotHeld),
        Err(e) => return Err(e.into_read(reply)),
    };
    match (stat(&v), int(&v, "session")) {
        (Some(stat), Some(session)) => Ok(
            if Some(stat.czxid) == p.czxid
                && stat.ephemeral_owner == session
                && Some(session) == p.session
            {
                Read::Done
            } else {
                Read::NotHeld
            },
        ),
        (None, _) if v.get("stat") == Some(&Value::Null) => Ok(Read::NotHeld),
        _ => Err(shape(reply)),
    }
}

/// A release reply: the own node was deleted (`Done`) or was gone (`NotHeld`). A
/// cancellation's or cleanup's prefix delete is `Done` however many it deleted.
fn read_release(ending: Option<Ending>, reply: &str) -> Result<Read, ReadError> {
    let v = match parse(reply) {
        Ok(v) => v,
        // gone with its session, or already
        Err(Failed::Session) | Err(Failed::NoNode) => {
            return Ok(if ending == Some(Ending::Held) {
                Read::NotHeld
            } else {
                Read::Done
            })
        }
        Err(e) => return Err(e.into_read(reply)),
    };
    match v.get("deleted") {
        Some(Value::Bool(true)) | Some(Value::Number(_)) => Ok(Read::Done),
        _ => Err(shape(reply)),
    }
}

/// ZooKeeper's lock recipe (see the module docs).
impl Recipe for ZooKeeperBackend {
    fn waiting(&self) -> Waiting {
        Waiting::Notify
    }

    // The client library keeps the session alive; re-listing the children at this
    // schedule (`StepCx::renew_session` needs nothing more) confirms the node is still
    // this session's.
    fn session_since(&self, owner: &OwnerId, progress: &mut Progress) -> Option<Instant> {
        progress_of(progress, owner).since
    }

    fn phrase(
        &self,
        step: Step,
        cx: &StepCx<'_>,
        progress: &mut Progress,
        _shared: &mut super::Shared,
    ) -> Phrased {
        let (name, owner) = (cx.name, cx.owner);
        let p = progress_of(progress, owner);
        Phrased::One(RequestBody::ZooKeeper(match step {
            Step::Acquire => self.acquire(name, cx.metadata, p),
            Step::Renew => self.renew(name, p),
            Step::Release(Ending::Held) if p.node.is_some() => ZkRequest::Delete {
                path: self.node_path(name, p.node.as_deref().unwrap_or_default()),
            },
            Step::Release(_) | Step::Cleanup => self.delete_owned(name, owner),
            Step::Wait { timeout_ms } => match &p.predecessor {
                Some(path) => ZkRequest::Watch {
                    path: path.clone(),
                    timeout_ms,
                },
                None => return Phrased::Nothing,
            },
        }))
    }

    fn read(
        &self,
        step: Step,
        cx: &StepCx<'_>,
        progress: &mut Progress,
        _shared: &mut super::Shared,
        reply: Result<&Reply, &str>,
    ) -> Result<Read, ReadError> {
        let v = payload(reply, "zookeeper", |r| match r {
            Reply::ZooKeeper(v) => Some(v.as_str()),
            _ => None,
        })?;
        match step {
            Step::Acquire => {
                self.read_acquire(cx.name, progress_of(progress, cx.owner), cx.sent_at, v)
            }
            Step::Renew => read_renew(progress_of(progress, cx.owner), v),
            Step::Release(ending) => read_release(Some(ending), v),
            Step::Cleanup => read_release(None, v),
            // any event, or the timeout: list again
            Step::Wait { .. } => match parse(v) {
                Ok(_) | Err(Failed::NoNode) => Ok(Read::Done),
                Err(Failed::Session) => Ok(Read::Done),
                Err(e) => Err(e.into_read(v)),
            },
        }
    }

    fn late_may_hold(&self, step: Step, reply: Result<&Reply, &str>) -> bool {
        match (step, reply) {
            // a node of an ended session is gone with it
            (Step::Acquire, Ok(Reply::ZooKeeper(v))) => !matches!(parse(v), Err(Failed::Session)),
            (Step::Renew, Ok(Reply::ZooKeeper(v))) => {
                matches!(parse(v), Ok(ref s) if stat(s).is_some())
            }
            (Step::Release(_) | Step::Cleanup | Step::Wait { .. }, _) => false,
            _ => true,
        }
    }

    fn unconfirmed_release(
        &self,
        _ending: Ending,
        _owner: &OwnerId,
        _progress: &mut Progress,
    ) -> Unconfirmed {
        // the node outlives the release while the session lives (the client keeps
        // pinging): only a delete frees it
        Unconfirmed {
            cleanup: true,
            found: None,
        }
    }
}

// ---- operator queries: who holds it? which locks are held? ---------------------------

/// The most listings one inspection makes: when the holder it found leaves before its
/// node is read ([`read_zk_holder`] answers `None`), it lists again; a lock changing
/// hands that fast every time is reported by the host as a backend error.
pub const ZK_INSPECT_TRIES: u32 = 4;

/// The holder node an inspection found in a lock's listing: read it with
/// [`ZkHolderNode::get`], then [`read_zk_holder`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZkHolderNode {
    /// The holder node's full path (the lowest contender).
    pub path: String,
    /// The contenders queued behind it.
    pub waiters: u64,
}

impl ZkHolderNode {
    /// The `getData` of the holder node ([`ZkRequest::Get`]).
    pub fn get(&self) -> ZkRequest {
        ZkRequest::Get {
            path: self.path.clone(),
        }
    }
}

impl ZooKeeperBackend {
    /// The first request of the operator query "who holds `name`?": the lock path's
    /// children. Read its reply with [`read_zk_contenders`].
    pub fn inspect(&self, name: &str) -> ZkRequest {
        ZkRequest::Children {
            path: self.lock_path(name),
        }
    }

    /// The listing of the root's children, the lock names an operator listing inspects
    /// ([`read_zk_list`]). One call: ZooKeeper answers `getChildren` whole (no pages),
    /// so the listing's bound is the caller's `limit` on the locks it then inspects.
    pub fn list_names(&self) -> ZkRequest {
        let root = self.root.trim_end_matches('/');
        ZkRequest::Children {
            path: if root.is_empty() { "/" } else { root }.to_owned(),
        }
    }

    /// The owner id (32 hex digits) a contender node's name carries: the hex before
    /// kazoo's `__lock__`, or Curator's UUID without its dashes; `None` for a name of
    /// neither form.
    pub fn node_owner(&self, node: &str) -> Option<String> {
        let hex = |s: &str| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit());
        match self.naming {
            ZkNaming::Kazoo => {
                let (head, _) = node.split_once("__")?;
                hex(head).then(|| head.to_ascii_lowercase())
            }
            ZkNaming::Curator => {
                let uuid = node.strip_prefix("_c_")?.get(..36)?;
                let plain: String = uuid.chars().filter(|c| *c != '-').collect();
                (hex(&plain) && uuid.len() - plain.len() == 4).then(|| plain.to_ascii_lowercase())
            }
        }
    }
}

fn operator_reply(what: &str, reply: &str) -> Result<Option<Value>, ProtocolError> {
    match parse(reply) {
        Ok(v) => Ok(Some(v)),
        Err(Failed::NoNode) => Ok(None),
        Err(Failed::Session) => Err(protocol(format!("{what}: the session ended: {reply:.200}"))),
        Err(Failed::Transient(kind)) => Err(protocol(format!("{what}: {kind}"))),
        Err(Failed::Other(m)) => Err(protocol(format!("{what}: {m}"))),
    }
}

/// Reads the reply of [`ZooKeeperBackend::inspect`]: the holder node (the lowest
/// contender, as the lock recipe orders them) and the contenders behind it, or `None`
/// when nobody holds `name` (no lock path, or no contender node under it).
///
/// Errors: [`ProtocolError`] for an error reply or a reply of another shape.
pub fn read_zk_contenders(
    backend: &ZooKeeperBackend,
    name: &str,
    reply: &str,
) -> Result<Option<ZkHolderNode>, ProtocolError> {
    let Some(v) = operator_reply("inspect", reply)? else {
        return Ok(None);
    };
    let children =
        children(&v).ok_or_else(|| protocol(format!("inspect: unexpected reply {reply:.200}")))?;
    let contenders = sorted_contenders(backend.naming, &children);
    Ok(contenders.first().map(|lowest| ZkHolderNode {
        path: backend.node_path(name, lowest),
        waiters: (contenders.len() - 1) as u64,
    }))
}

/// Reads the reply of [`ZkHolderNode::get`] into the holder of `name`: the owner id
/// from the node's name, the token (its `czxid`, the lock's token), the waiters, and
/// the metadata (the node's data when it is a JSON object of strings: what fencepost
/// writes with [`crate::LockOptions::metadata`]; a kazoo identifier or Curator's
/// address reads as none). `ttl_left` is `None`: the node lives as long as its
/// session, whose deadline the server does not tell. `Ok(None)`: the node is gone
/// (the holder left between the listing and this read): list again, at most
/// [`ZK_INSPECT_TRIES`] times.
///
/// Errors: [`ProtocolError`] for an error reply or a reply of another shape.
pub fn read_zk_holder(
    backend: &ZooKeeperBackend,
    name: &str,
    node: &ZkHolderNode,
    reply: &str,
) -> Result<Option<super::Holder>, ProtocolError> {
    let Some(v) = operator_reply("inspect", reply)? else {
        return Ok(None);
    };
    let czxid = v
        .pointer("/stat/czxid")
        .and_then(Value::as_i64)
        .ok_or_else(|| protocol(format!("inspect: unexpected reply {reply:.200}")))?;
    let leaf = node.path.rsplit('/').next().unwrap_or_default();
    let mut holder = super::Holder::new(name.to_owned());
    holder.owner = backend.node_owner(leaf);
    holder.token = u64::try_from(czxid)
        .ok()
        .filter(|t| *t > 0)
        .map(FencingToken);
    holder.waiters = Some(node.waiters);
    // display only: data that is no JSON object of strings reads as none
    holder.metadata = v
        .get("data")
        .and_then(Value::as_str)
        .and_then(crate::decode_metadata);
    Ok(Some(holder))
}

/// Reads the reply of [`ZooKeeperBackend::list_names`]: the names under the root that
/// start with `prefix`, sorted (a missing root has none). Each is a lock path to
/// inspect; names with a `/` (nested paths) are not listed.
///
/// Errors: [`ProtocolError`] for an error reply or a reply of another shape.
pub fn read_zk_list(prefix: &str, reply: &str) -> Result<Vec<String>, ProtocolError> {
    let Some(v) = operator_reply("list", reply)? else {
        return Ok(Vec::new());
    };
    let mut names: Vec<String> = children(&v)
        .ok_or_else(|| protocol(format!("list: unexpected reply {reply:.200}")))?
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .collect();
    names.sort_unstable();
    Ok(names)
}

// ---- reply helpers ----------------------------------------------------------------

/// What an error reply means to the recipe.
#[derive(Debug)]
enum Failed {
    /// `no_node`.
    NoNode,
    /// The session ended (`session_expired`, `session_moved`, `auth_failed`).
    Session,
    /// Retrying may fix it; the call may have taken effect.
    Transient(String),
    /// Not JSON, or another error.
    Other(String),
}

impl Failed {
    fn into_read(self, reply: &str) -> ReadError {
        match self {
            Failed::Transient(kind) => ReadError::Ambiguous(format!("zookeeper: {kind}")),
            Failed::Other(m) => ReadError::Protocol(protocol(m)),
            Failed::NoNode | Failed::Session => shape(reply),
        }
    }
}

fn parse(reply: &str) -> Result<Value, Failed> {
    let v: Value = serde_json::from_str(reply)
        .map_err(|e| Failed::Other(format!("reply is not JSON ({e}): {reply:.200}")))?;
    let Some(kind) = v.get("error") else {
        return if v.is_object() {
            Ok(v)
        } else {
            Err(Failed::Other(format!(
                "expected a JSON object, got {reply:.200}"
            )))
        };
    };
    let kind = kind.as_str().unwrap_or_default();
    Err(match kind {
        "no_node" => Failed::NoNode,
        "session_expired" | "session_moved" | "auth_failed" => Failed::Session,
        "connection_loss" | "operation_timeout" | "connection_closed" | "system_error" => {
            Failed::Transient(kind.to_owned())
        }
        _ => Failed::Other(format!("zookeeper error: {reply:.200}")),
    })
}

fn protocol(message: String) -> ProtocolError {
    ProtocolError {
        backend: "zookeeper".to_owned(),
        message,
    }
}

fn shape(reply: &str) -> ReadError {
    ReadError::Protocol(protocol(format!("unexpected reply {reply:.200}")))
}

fn int(v: &Value, field: &str) -> Option<i64> {
    v.get(field).and_then(Value::as_i64)
}

/// The fields of a `Stat` the recipe reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stat {
    czxid: i64,
    ephemeral_owner: i64,
}

fn stat(v: &Value) -> Option<Stat> {
    let s = v.get("stat")?;
    Some(Stat {
        czxid: int(s, "czxid")?,
        ephemeral_owner: int(s, "ephemeral_owner")?,
    })
}

fn children(v: &Value) -> Option<Vec<String>> {
    v.get("children")?
        .as_array()?
        .iter()
        .map(|c| c.as_str().map(str::to_owned))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_follow_kazoo_and_curator() {
        let owner = OwnerId([0xab; 16]);
        let kazoo = ZooKeeperBackend::default();
        assert_eq!(
            kazoo.node_prefix(&owner),
            "abababababababababababababababab__lock__"
        );
        assert_eq!(kazoo.lock_path("report"), "/fencepost/report");
        let curator = ZooKeeperBackend {
            root: "/".to_owned(),
            naming: ZkNaming::Curator,
            ..ZooKeeperBackend::default()
        };
        assert_eq!(
            curator.node_prefix(&owner),
            "_c_abababab-abab-abab-abab-abababababab-lock-"
        );
        assert_eq!(curator.lock_path("r"), "/r");
    }

    #[test]
    fn contenders_sort_by_sequence_not_by_prefix() {
        let children: Vec<String> = [
            "ffff__lock__0000000003",
            "0000__lock__0000000007",
            "aaaa__rlock__0000000001",
            "not-a-contender",
            "bbbb__lock__-2147483648", // wrapped: sorts first, as kazoo sorts it
            "_c_x-lock-0000000002",
        ]
        .map(str::to_owned)
        .to_vec();
        assert_eq!(
            sorted_contenders(ZkNaming::Kazoo, &children),
            [
                "bbbb__lock__-2147483648",
                "aaaa__rlock__0000000001",
                "ffff__lock__0000000003",
                "0000__lock__0000000007"
            ]
        );
        assert_eq!(
            sorted_contenders(ZkNaming::Curator, &children),
            ["_c_x-lock-0000000002"]
        );
    }

    #[test]
    fn fenced_multi_replies_are_read_strictly() {
        assert_eq!(
            read_zk_fenced(r#"{"results":[true,true]}"#),
            Ok(ZkFenced::Applied)
        );
        assert_eq!(
            read_zk_fenced(r#"{"results":["no_node","rolled_back"]}"#),
            Ok(ZkFenced::Refused)
        );
        assert_eq!(
            read_zk_fenced(r#"{"results":["bad_version","rolled_back"]}"#),
            Ok(ZkFenced::Refused)
        );
        for garbage in [
            "{}",
            "[]",
            r#"{"results":[]}"#,
            r#"{"results":[true,"rolled_back"]}"#,
            r#"{"error":"connection_loss"}"#,
        ] {
            assert!(read_zk_fenced(garbage).is_err(), "{garbage}");
        }
        let b = ZooKeeperBackend::default();
        let multi = b.fenced_multi("/fencepost/r/x__lock__0000000001", vec![]);
        assert!(multi
            .to_json()
            .starts_with(r#"{"call":"multi","check_path":"#));
    }

    #[test]
    fn metadata_rides_in_the_node_data_and_reads_back_from_an_inspection() {
        let b = ZooKeeperBackend::default();
        let owner = OwnerId([0xab; 16]);
        let mut p = ZkProgress::new(owner);
        let ZkRequest::Create { data, .. } =
            b.acquire("r", Some(r#"{"pid":"7", "host":"a"}"#), &mut p)
        else {
            panic!("expected a create");
        };
        assert_eq!(data, r#"{"host":"a","pid":"7"}"#);
        let mut p = ZkProgress::new(owner);
        let ZkRequest::Create { data, .. } = b.acquire("r", None, &mut p) else {
            panic!("expected a create");
        };
        assert_eq!(data, owner.to_string());

        assert_eq!(
            b.inspect("r"),
            ZkRequest::Children {
                path: "/fencepost/r".into()
            }
        );
        let holder_node = format!("{owner}__lock__0000000003");
        let listing =
            format!(r#"{{"children":["x__lock__0000000009","{holder_node}","junk"],"session":5}}"#);
        let node = read_zk_contenders(&b, "r", &listing).unwrap().unwrap();
        assert_eq!(node.path, format!("/fencepost/r/{holder_node}"));
        assert_eq!(node.waiters, 1);
        assert_eq!(
            read_zk_contenders(&b, "r", r#"{"children":[],"session":5}"#),
            Ok(None)
        );
        assert_eq!(
            read_zk_contenders(&b, "r", r#"{"error":"no_node","session":5}"#),
            Ok(None)
        );
        assert!(read_zk_contenders(&b, "r", r#"{"error":"connection_loss"}"#).is_err());
        let got = r#"{"data":"{\"host\":\"a\"}","stat":{"czxid":42,"version":0,"ephemeral_owner":5},"session":5}"#;
        let h = read_zk_holder(&b, "r", &node, got).unwrap().unwrap();
        assert_eq!(h.owner, Some(owner.to_string()));
        assert_eq!(h.token, Some(FencingToken(42)));
        assert_eq!(h.waiters, Some(1));
        assert_eq!(h.ttl_left, None);
        assert_eq!(h.metadata.unwrap()["host"], "a");
        // a kazoo identifier is no metadata
        let kazoo = r#"{"data":"worker-1","stat":{"czxid":42,"version":0,"ephemeral_owner":5}}"#;
        assert_eq!(
            read_zk_holder(&b, "r", &node, kazoo)
                .unwrap()
                .unwrap()
                .metadata,
            None
        );
        assert_eq!(
            read_zk_holder(&b, "r", &node, r#"{"error":"no_node"}"#),
            Ok(None)
        );
        assert!(read_zk_holder(&b, "r", &node, r#"{"data":null}"#).is_err());
    }

    #[test]
    fn a_listing_reads_the_root_names_with_the_prefix() {
        let b = ZooKeeperBackend {
            root: "/".into(),
            ..ZooKeeperBackend::default()
        };
        assert_eq!(b.list_names(), ZkRequest::Children { path: "/".into() });
        let names = read_zk_list("job", r#"{"children":["job-b","other","job-a"]}"#).unwrap();
        assert_eq!(names, ["job-a", "job-b"]);
        assert_eq!(read_zk_list("", r#"{"error":"no_node"}"#), Ok(vec![]));
        assert!(read_zk_list("", "[]").is_err());
        let curator = ZooKeeperBackend {
            naming: ZkNaming::Curator,
            ..ZooKeeperBackend::default()
        };
        let owner = OwnerId([0xcd; 16]);
        let node = format!("{}0000000001", curator.node_prefix(&owner));
        assert_eq!(curator.node_owner(&node), Some(owner.to_string()));
        assert_eq!(curator.node_owner("_c_short-lock-0000000001"), None);
        assert_eq!(b.node_owner("nothex__lock__0000000001"), None);
    }
}
