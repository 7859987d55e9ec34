//! An in-memory ZooKeeper for the simulator and the tests: sessions that expire at
//! injected time (taking their ephemeral nodes with them), sequential nodes, czxids
//! from one zxid counter, and the JSON replies the ZooKeeper adapters write for each
//! [`ZkRequest`].

use core::time::Duration;
use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::backends::zookeeper::{ZkOp, ZkRequest};
use crate::Instant;

/// One node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZNode {
    /// The zxid of the transaction that created it.
    pub czxid: i64,
    /// The data version.
    pub version: i32,
    /// The session that owns it (0: persistent).
    pub ephemeral_owner: i64,
    /// Its data.
    pub data: String,
}

#[derive(Clone, Debug)]
struct Session {
    timeout: Duration,
    expires_at: Instant,
}

/// An in-memory ZooKeeper (one logical ensemble).
#[derive(Clone, Debug, Default)]
pub struct MemoryZooKeeper {
    zxid: i64,
    nodes: BTreeMap<String, ZNode>,
    /// The next sequence number of each parent.
    sequences: BTreeMap<String, i32>,
    sessions: BTreeMap<i64, Session>,
    next_session: i64,
}

impl MemoryZooKeeper {
    /// An empty ensemble.
    pub fn new() -> Self {
        MemoryZooKeeper {
            next_session: 0x100,
            ..MemoryZooKeeper::default()
        }
    }

    /// A new session with `timeout` (taken as negotiated), alive until `now + timeout`
    /// unless touched. Returns its id.
    pub fn connect(&mut self, now: Instant, timeout: Duration) -> i64 {
        self.next_session += 1;
        self.sessions.insert(
            self.next_session,
            Session {
                timeout,
                expires_at: now + timeout,
            },
        );
        self.next_session
    }

    /// Whether `session` is alive at `now` (expiring what is due first).
    pub fn alive(&mut self, now: Instant, session: i64) -> bool {
        self.expire(now);
        self.sessions.contains_key(&session)
    }

    /// The server heard from `session` at `now` (a ping or a request): it lives another
    /// timeout. Returns false when it had expired.
    pub fn touch(&mut self, now: Instant, session: i64) -> bool {
        self.expire(now);
        match self.sessions.get_mut(&session) {
            Some(s) => {
                s.expires_at = s.expires_at.max(now + s.timeout);
                true
            }
            None => false,
        }
    }

    /// When `session` expires unless touched again.
    pub fn session_expires_at(&self, session: i64) -> Option<Instant> {
        self.sessions.get(&session).map(|s| s.expires_at)
    }

    /// Expires the sessions due at `now`, deleting their ephemeral nodes.
    pub fn expire(&mut self, now: Instant) {
        let due: Vec<i64> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.expires_at <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            self.sessions.remove(&id);
            self.nodes.retain(|_, n| n.ephemeral_owner != id);
            self.zxid += 1; // the closeSession transaction
        }
    }

    /// The next instant a session expires, if any.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.sessions.values().map(|s| s.expires_at).min()
    }

    /// A leader failover with a new leader `election` from now: every session gets its
    /// full timeout again, counted from the election (ZooKeeper's behaviour: later,
    /// never earlier); data kept.
    pub fn failover(&mut self, now: Instant, election: Duration) {
        for s in self.sessions.values_mut() {
            s.expires_at = s.expires_at.max(now + election + s.timeout);
        }
    }

    /// The node at `path`.
    pub fn get(&self, path: &str) -> Option<&ZNode> {
        self.nodes.get(path)
    }

    /// The names of `path`'s children.
    pub fn children(&self, path: &str) -> Vec<String> {
        let prefix = format!("{path}/");
        self.nodes
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter(|(k, _)| !k[prefix.len()..].contains('/'))
            .map(|(k, _)| k[prefix.len()..].to_string())
            .collect()
    }

    fn ensure(&mut self, path: &str) {
        let mut at = String::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            at.push('/');
            at.push_str(part);
            if !self.nodes.contains_key(&at) {
                self.zxid += 1;
                self.nodes.insert(
                    at.clone(),
                    ZNode {
                        czxid: self.zxid,
                        version: 0,
                        ephemeral_owner: 0,
                        data: String::new(),
                    },
                );
            }
        }
    }

    fn create(&mut self, path: &str, data: &str, owner: i64, sequential: bool) -> String {
        let parent = path.rsplit_once('/').map_or("", |(p, _)| p).to_string();
        self.ensure(&parent);
        let name = if sequential {
            let seq = self.sequences.entry(parent).or_insert(0);
            let name = format!("{path}{:010}", *seq);
            *seq = seq.wrapping_add(1);
            name
        } else {
            path.to_string()
        };
        self.zxid += 1;
        self.nodes.insert(
            name.clone(),
            ZNode {
                czxid: self.zxid,
                version: 0,
                ephemeral_owner: owner,
                data: data.to_string(),
            },
        );
        name
    }

    fn delete(&mut self, path: &str) -> bool {
        let gone = self.nodes.remove(path).is_some();
        if gone {
            self.zxid += 1;
        }
        gone
    }

    /// Runs `req` for `session` at `now` and returns the adapter's JSON reply. A
    /// [`ZkRequest::Watch`] is answered at once with its current state (`no_node`, or
    /// `timeout` when the node exists: a host blocking on it asks
    /// [`MemoryZooKeeper::get`] again when something changes).
    pub fn call(&mut self, now: Instant, session: i64, req: &ZkRequest) -> String {
        if !self.touch(now, session) {
            return error("session_expired", session);
        }
        let stat = |n: &ZNode| json!({ "czxid": n.czxid, "version": n.version, "ephemeral_owner": n.ephemeral_owner });
        let mut v = match req {
            ZkRequest::Create { path, data } => {
                let name = self.create(path, data, session, true);
                // `create` has just inserted it
                let node = &self.nodes[&name];
                // with the listing an adapter sends right behind the create
                let parent = name.rsplit_once('/').map_or("", |(p, _)| p);
                json!({ "path": name, "stat": stat(node), "children": self.children(parent) })
            }
            ZkRequest::Children { path } => {
                if !self.nodes.contains_key(path) {
                    return error("no_node", session);
                }
                json!({ "children": self.children(path) })
            }
            ZkRequest::Exists { path } => match self.nodes.get(path) {
                Some(n) => json!({ "stat": stat(n) }),
                None => json!({ "stat": null }),
            },
            ZkRequest::Watch { path, .. } => match self.nodes.get(path) {
                Some(_) => json!({ "event": "timeout" }),
                None => json!({ "event": "no_node" }),
            },
            ZkRequest::Get { path } => match self.nodes.get(path) {
                Some(n) => json!({ "data": n.data, "stat": stat(n) }),
                None => return error("no_node", session),
            },
            ZkRequest::Delete { path } => {
                if !self.delete(path) {
                    return error("no_node", session);
                }
                json!({ "deleted": true })
            }
            ZkRequest::DeleteOwned { path, prefix } => {
                let mine: Vec<String> = self
                    .children(path)
                    .into_iter()
                    .filter(|c| c.starts_with(prefix.as_str()))
                    .collect();
                for c in &mine {
                    self.delete(&format!("{path}/{c}"));
                }
                json!({ "deleted": mine.len() })
            }
            ZkRequest::Multi {
                check_path,
                check_version,
                ops,
            } => {
                let check = match self.nodes.get(check_path) {
                    None => Some("no_node"),
                    Some(n) if n.version != *check_version => Some("bad_version"),
                    Some(_) => None,
                };
                let results: Vec<Value> = match check {
                    Some(kind) => core::iter::once(json!(kind))
                        .chain(ops.iter().map(|_| json!("rolled_back")))
                        .collect(),
                    None => {
                        for op in ops {
                            match op {
                                ZkOp::Create { path, data } => {
                                    self.create(path, data, 0, false);
                                }
                                ZkOp::SetData { path, data, .. } => {
                                    if let Some(n) = self.nodes.get_mut(path) {
                                        n.data = data.clone();
                                        n.version += 1;
                                    }
                                }
                                ZkOp::Delete { path, .. } => {
                                    self.delete(path);
                                }
                            }
                        }
                        core::iter::repeat_n(json!(true), ops.len() + 1).collect()
                    }
                };
                json!({ "results": results })
            }
        };
        v["session"] = json!(session);
        v.to_string()
    }
}

/// An error reply of the adapters' shape.
pub fn zk_error(kind: &str, session: i64) -> String {
    error(kind, session)
}

fn error(kind: &str, session: i64) -> String {
    json!({ "error": kind, "message": kind, "session": session }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ephemeral_nodes_go_with_their_session_and_czxids_rise() {
        let mut zk = MemoryZooKeeper::new();
        let t = |ms| Instant::from_millis(ms);
        let s = zk.connect(t(0), Duration::from_millis(1_000));
        let create = ZkRequest::Create {
            path: "/l/r/a__lock__".into(),
            data: "a".into(),
        };
        let r: Value = serde_json::from_str(&zk.call(t(1), s, &create)).unwrap();
        assert_eq!(r["path"], "/l/r/a__lock__0000000000");
        let first = r["stat"]["czxid"].as_i64().unwrap();
        let r: Value = serde_json::from_str(&zk.call(t(2), s, &create)).unwrap();
        assert_eq!(r["path"], "/l/r/a__lock__0000000001");
        assert!(r["stat"]["czxid"].as_i64().unwrap() > first);
        assert_eq!(zk.children("/l/r").len(), 2);
        // touched at 2: expires at 1002
        zk.expire(t(1_001));
        assert_eq!(zk.children("/l/r").len(), 2);
        zk.expire(t(1_002));
        assert!(zk.children("/l/r").is_empty());
        assert!(zk.call(t(1_003), s, &create).contains("session_expired"));
    }
}
