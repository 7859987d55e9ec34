//! etcd v3: leases, per-contender keys, and create revisions as fencing tokens.
//!
//! The recipe is etcd's own (`clientv3/concurrency.Mutex`), driven step by step by the
//! lock machine:
//!
//! 1. **Lease.** `LeaseGrant` with a lease id derived from the owner id (so a retried
//!    grant is recognisable: etcd answers *lease already exists*) and the TTL rounded up
//!    to whole seconds (etcd leases have one-second granularity).
//! 2. **Key.** One transaction: if the contender's own key
//!    `{key_prefix}{name}/{lease id as 16 hex digits}` does not exist (create revision
//!    0), put it attached to the lease; in both branches read the key with the lowest
//!    create revision under `{key_prefix}{name}/` (the holder) and the contender's
//!    immediate predecessor. The contender's key's create revision is its **fencing
//!    token**: etcd revisions increase across the whole cluster, through leader changes.
//! 3. **Hold or wait.** A contender holds the lock when no key with a lower create
//!    revision remains. Otherwise it watches its immediate predecessor's key for a
//!    delete (no polling), keeping its lease alive while it waits; the watch returns
//!    at the latest when the next keep-alive is due. After a wake-up it runs step 2
//!    again: the put is skipped (its key exists), so the same transaction re-checks.
//!    If its lease expired while it waited, etcd deleted its key and the transaction's
//!    put fails with *lease not found*: it never becomes the holder; it starts again
//!    with a fresh lease, at the back of the queue.
//! 4. **Keep-alive** (`LeaseKeepAlive`) every renew interval (TTL/3 by default). A
//!    reply without a positive `TTL` means the lease is gone: the lock is lost. The
//!    validity is measured from the send of the last confirmed grant or keep-alive
//!    (DESIGN.md rule 1), never from the transaction that found the key first.
//! 5. **Release**: delete the key in a transaction comparing its create revision with
//!    the token (a retried release whose first reply was lost cannot delete a newer
//!    key), then revoke the lease.
//!
//! Requests are data ([`EtcdRequest`]) in a shape that maps field by field onto etcd's
//! protobuf messages (for gRPC clients) and renders, with
//! [`EtcdRequest::gateway_path`] and [`EtcdRequest::gateway_body`], as the v3 JSON
//! gateway's HTTP calls (for hosts with nothing but `fetch`). Replies are the JSON
//! documents the gateway returns (a gRPC client serializes its response message with
//! the proto3 JSON mapping, which is the same shape): keys base64, every int64 a string,
//! zero and false fields omitted, errors as `{"error", "message", "code"}`.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{
    payload, BatchKey, Ending, Phrased, Progress, Read, ReadError, Recipe, Reply, RequestBody,
    Shared, Step, StepCx, Unconfirmed, Waiting,
};
use crate::error::ProtocolError;
use crate::{FencingToken, Instant, OwnerId};

/// Settings of the etcd backend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EtcdBackend {
    /// Prefix of every key fencepost writes; default `fencepost/`. The keys of lock
    /// `name` are `{key_prefix}{name}/{16 hex digits}` (see [`EtcdBackend::holder_key`]).
    pub key_prefix: String,
    /// One lease for many locks (etcd's `concurrency.Session`): the locks of a machine
    /// whose TTLs round up to the same whole seconds attach their keys to one shared
    /// lease, and one `LeaseKeepAlive` a renew period renews them all (the machine
    /// merges their renewals). Off (the default): each lock grants, keeps alive and
    /// revokes a lease of its own.
    ///
    /// The trade: the locks sharing a lease share its fate. When the keep-alives stop
    /// reaching etcd for a TTL (a paused process, a partition), etcd ends the lease and
    /// every lock on it is lost at once; a lock's release deletes its key and leaves
    /// the lease to the others. Each lock still has its own key, create revision
    /// (fencing token) and validity, measured from the send of the last grant or
    /// keep-alive a reply confirmed (DESIGN.md rule 1). A lease that lapsed is never
    /// granted again: the next lock to need one grants a new lease id.
    pub shared_lease: bool,
}

impl Default for EtcdBackend {
    fn default() -> Self {
        EtcdBackend {
            key_prefix: "fencepost/".to_owned(),
            shared_lease: false,
        }
    }
}

/// The shared session leases of one machine ([`EtcdBackend::shared_lease`]), one per
/// lease TTL in whole seconds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct EtcdSessions {
    sessions: Vec<EtcdSession>,
    /// How many sessions this machine has started: each new one's lease id is drawn
    /// from the owner id of the lock that starts it and this count, so a lapsed lease's
    /// id is never granted again.
    started: u64,
}

/// One shared lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct EtcdSession {
    ttl_s: i64,
    id: i64,
    /// The send of the newest grant or keep-alive of the lease that a reply confirmed;
    /// `None` until one did. A grant may be sent only while it is `None`: no lock can
    /// have a key on a lease this machine never saw alive, so a grant then revives
    /// nobody's lost lease.
    confirmed: Option<Instant>,
}

impl EtcdSessions {
    /// The session for leases of `ttl_s` seconds, started for `owner` when there is
    /// none.
    fn session(&mut self, ttl_s: i64, owner: &OwnerId) -> EtcdSession {
        if let Some(s) = self.sessions.iter().find(|s| s.ttl_s == ttl_s) {
            return *s;
        }
        let session = EtcdSession {
            ttl_s,
            id: session_lease_id(owner, self.started),
            confirmed: None,
        };
        self.started += 1;
        self.sessions.push(session);
        session
    }

    /// A reply confirmed lease `id` alive as of `sent_at`.
    fn confirm(&mut self, id: i64, sent_at: Instant) {
        if let Some(s) = self.sessions.iter_mut().find(|s| s.id == id) {
            s.confirmed = Some(s.confirmed.map_or(sent_at, |c| c.max(sent_at)));
        }
    }

    /// Lease `id` is gone on the server: locks that need a lease from now on start a
    /// new session.
    fn retire(&mut self, id: i64) {
        self.sessions.retain(|s| s.id != id);
    }
}

/// The lease id of the `n`-th session a machine starts, for the lock with `owner`: the
/// owner id's lease id ([`lease_id`], 63 random bits) mixed with `n` by a bijection, so
/// the ids of one owner's sessions differ and stay as unguessable as the owner id.
fn session_lease_id(owner: &OwnerId, n: u64) -> i64 {
    let mixed = (lease_id(owner) as u64) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    match (mixed & i64::MAX as u64) as i64 {
        0 => 1,
        id => id,
    }
}

/// One etcd call. Field names follow etcd's protobuf messages (`etcdserverpb`);
/// [`EtcdRequest::gateway_path`] and [`EtcdRequest::gateway_body`] give the JSON
/// gateway form.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EtcdRequest {
    /// `Lease.LeaseGrant{ID, TTL}`; the id is chosen by the client.
    LeaseGrant {
        /// The lease id (positive).
        id: i64,
        /// Whole seconds (the lock's TTL rounded up).
        ttl_s: i64,
    },
    /// One `Lease.LeaseKeepAlive{ID}` message; the reply is the first response.
    LeaseKeepAlive {
        /// The lease id.
        id: i64,
    },
    /// `Lease.LeaseRevoke{ID}`: deletes every key attached to the lease.
    LeaseRevoke {
        /// The lease id.
        id: i64,
    },
    /// `Lease.LeaseTimeToLive{ID}`: the lease's remaining seconds (`TTL`, `-1` once
    /// it is gone); an operator query ([`read_etcd_time_to_live`]), never sent by the
    /// machine.
    LeaseTimeToLive {
        /// The lease id.
        id: i64,
    },
    /// `KV.Txn`.
    Txn(EtcdTxn),
    /// `KV.Range`.
    Range(EtcdRange),
    /// `Watch.Watch` with one `create_request` (filter `NOPUT`: deletes only). Reply
    /// with the first response that carries `events` (or is canceled / compacted), or
    /// with `{}` when `timeout_ms` passes first; then cancel the watch. A blocking
    /// wait: it must not hold up the renewals of other locks.
    Watch(EtcdWatch),
}

/// A transaction: if every comparison holds, run `success`, else `failure`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EtcdTxn {
    /// All must hold.
    pub compare: Vec<EtcdCompare>,
    /// Run when every comparison holds.
    pub success: Vec<EtcdOp>,
    /// Run otherwise.
    pub failure: Vec<EtcdOp>,
}

/// `Compare{target: CREATE, result: EQUAL}`: `key`'s create revision equals
/// `create_revision` (0: the key does not exist).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EtcdCompare {
    /// The key (UTF-8).
    pub key: String,
    /// The expected create revision.
    pub create_revision: i64,
}

/// One operation of a transaction (`RequestOp`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum EtcdOp {
    /// `request_put`.
    Put {
        /// The key.
        key: String,
        /// The value.
        value: String,
        /// Attach to this lease (0: none).
        lease: i64,
        /// Keep the key's current lease (`ignore_lease`; `lease` must then be 0, and
        /// the key must exist). Left out of the serde form when false.
        #[serde(default, skip_serializing_if = "core::ops::Not::not")]
        ignore_lease: bool,
    },
    /// `request_range`.
    Range(EtcdRange),
    /// `request_delete_range` of one key.
    Delete {
        /// The key.
        key: String,
    },
}

/// `RangeRequest`: `key`, or `[key, range_end)` when `range_end` is set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EtcdRange {
    /// The key, or the start of the range.
    pub key: String,
    /// The end of the range (exclusive); `None` for a single key.
    pub range_end: Option<String>,
    /// At most this many keys (0: no limit).
    pub limit: i64,
    /// Sort by create revision, if set.
    pub sort: Option<EtcdSort>,
    /// Keys and revisions only, no values.
    pub keys_only: bool,
    /// Only keys created at or before this revision (0: no filter).
    pub max_create_revision: i64,
}

/// `sort_target: CREATE` with `sort_order`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EtcdSort {
    /// Oldest first.
    CreateAscend,
    /// Newest first.
    CreateDescend,
}

/// A watch for the deletion of one key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EtcdWatch {
    /// The key.
    pub key: String,
    /// Watch from this revision (so a delete between the read and the watch is seen).
    pub start_revision: i64,
    /// Reply `{}` after this long without an event.
    pub timeout_ms: u64,
}

fn b64(s: &str) -> String {
    B64.encode(s.as_bytes())
}

impl EtcdRange {
    fn gateway(&self) -> Value {
        let mut v = json!({ "key": b64(&self.key) });
        if let Some(end) = &self.range_end {
            v["range_end"] = json!(b64(end));
        }
        if self.limit != 0 {
            v["limit"] = json!(self.limit.to_string());
        }
        if let Some(sort) = self.sort {
            v["sort_target"] = json!("CREATE");
            v["sort_order"] = json!(match sort {
                EtcdSort::CreateAscend => "ASCEND",
                EtcdSort::CreateDescend => "DESCEND",
            });
        }
        if self.keys_only {
            v["keys_only"] = json!(true);
        }
        if self.max_create_revision != 0 {
            v["max_create_revision"] = json!(self.max_create_revision.to_string());
        }
        v
    }
}

impl EtcdOp {
    fn gateway(&self) -> Value {
        match self {
            EtcdOp::Put {
                key,
                value,
                lease,
                ignore_lease,
            } => {
                let mut put = json!({ "key": b64(key), "value": b64(value) });
                if *lease != 0 {
                    put["lease"] = json!(lease.to_string());
                }
                if *ignore_lease {
                    put["ignore_lease"] = json!(true);
                }
                json!({ "request_put": put })
            }
            EtcdOp::Range(r) => json!({ "request_range": r.gateway() }),
            EtcdOp::Delete { key } => json!({ "request_delete_range": { "key": b64(key) } }),
        }
    }
}

impl EtcdRequest {
    /// The call's name as hosts label it: `"lease_grant"`, `"lease_keep_alive"`,
    /// `"lease_revoke"`, `"lease_time_to_live"`, `"txn"`, `"range"` or `"watch"`.
    pub fn call_name(&self) -> &'static str {
        match self {
            EtcdRequest::LeaseGrant { .. } => "lease_grant",
            EtcdRequest::LeaseKeepAlive { .. } => "lease_keep_alive",
            EtcdRequest::LeaseRevoke { .. } => "lease_revoke",
            EtcdRequest::LeaseTimeToLive { .. } => "lease_time_to_live",
            EtcdRequest::Txn(_) => "txn",
            EtcdRequest::Range(_) => "range",
            EtcdRequest::Watch(_) => "watch",
        }
    }

    /// The JSON gateway path to POST to, e.g. `/v3/kv/txn`.
    pub fn gateway_path(&self) -> &'static str {
        match self {
            EtcdRequest::LeaseGrant { .. } => "/v3/lease/grant",
            EtcdRequest::LeaseKeepAlive { .. } => "/v3/lease/keepalive",
            EtcdRequest::LeaseRevoke { .. } => "/v3/lease/revoke",
            EtcdRequest::LeaseTimeToLive { .. } => "/v3/lease/timetolive",
            EtcdRequest::Txn(_) => "/v3/kv/txn",
            EtcdRequest::Range(_) => "/v3/kv/range",
            EtcdRequest::Watch(_) => "/v3/watch",
        }
    }

    /// The JSON gateway request body: keys base64, int64 as decimal strings.
    pub fn gateway_body(&self) -> String {
        let v = match self {
            EtcdRequest::LeaseGrant { id, ttl_s } => {
                json!({ "ID": id.to_string(), "TTL": ttl_s.to_string() })
            }
            EtcdRequest::LeaseKeepAlive { id }
            | EtcdRequest::LeaseRevoke { id }
            | EtcdRequest::LeaseTimeToLive { id } => {
                json!({ "ID": id.to_string() })
            }
            EtcdRequest::Txn(t) => json!({
                "compare": t.compare.iter().map(|c| json!({
                    "key": b64(&c.key),
                    "target": "CREATE",
                    "result": "EQUAL",
                    "create_revision": c.create_revision.to_string(),
                })).collect::<Vec<_>>(),
                "success": t.success.iter().map(EtcdOp::gateway).collect::<Vec<_>>(),
                "failure": t.failure.iter().map(EtcdOp::gateway).collect::<Vec<_>>(),
            }),
            EtcdRequest::Range(r) => r.gateway(),
            EtcdRequest::Watch(w) => json!({ "create_request": {
                "key": b64(&w.key),
                "start_revision": w.start_revision.to_string(),
                "filters": ["NOPUT"],
            }}),
        };
        v.to_string()
    }

    /// The watch timeout, for a [`EtcdRequest::Watch`].
    pub fn watch_timeout_ms(&self) -> Option<u64> {
        match self {
            EtcdRequest::Watch(w) => Some(w.timeout_ms),
            _ => None,
        }
    }
}

/// The lease id fencepost uses for `owner`: its first 8 bytes, big-endian, as a
/// positive int64 (never 0, which asks etcd to choose).
pub fn lease_id(owner: &OwnerId) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&owner.0[..8]);
    let id = i64::from_be_bytes(b) & i64::MAX;
    if id == 0 {
        1
    } else {
        id
    }
}

/// A range of the single key `key`.
fn one_key(key: &str, keys_only: bool) -> EtcdRange {
    EtcdRange {
        key: key.to_owned(),
        range_end: None,
        limit: 0,
        sort: None,
        keys_only,
        max_create_revision: 0,
    }
}

/// The lease TTL etcd is asked for: whole seconds, rounded up, at least 1.
pub fn lease_ttl_s(ttl_ms: u64) -> i64 {
    i64::try_from(ttl_ms.div_ceil(1000).max(1)).unwrap_or(i64::MAX)
}

impl EtcdBackend {
    /// The prefix under which every contender for `name` puts its key.
    pub fn lock_prefix(&self, name: &str) -> String {
        format!("{}{}/", self.key_prefix, name)
    }

    /// The key `owner` puts when contending for `name`:
    /// `{key_prefix}{name}/{lease_id(owner) as 16 hex digits}`, attached to that lease
    /// (or, with [`EtcdBackend::shared_lease`], to the shared one). While `owner` holds
    /// the lock, its create revision is the fencing token.
    pub fn holder_key(&self, name: &str, owner: &OwnerId) -> String {
        format!("{}{:016x}", self.lock_prefix(name), lease_id(owner))
    }

    /// The key the owner-checked release of a `name` holder writes, in the same
    /// transaction as its delete: the released token (decimal). Its mod revision is the
    /// release's revision. A NUL after the key prefix keeps it outside every lock's
    /// contender range (lock names have no NUL), so `etcdctl lock` and etcd's
    /// `concurrency.Mutex` never see it as a contender.
    pub fn released_key(&self, name: &str) -> String {
        format!("{}\0released/{}", self.key_prefix, name)
    }

    /// The key every contender's put of its own key for `name` rewrites, in the same
    /// transaction: its mod revision is the create revision of the newest fencepost
    /// contender key (value: that contender's owner id). Outside every contender range,
    /// like [`EtcdBackend::released_key`].
    pub fn joined_key(&self, name: &str) -> String {
        format!("{}\0joined/{}", self.key_prefix, name)
    }

    fn prefix_range(&self, name: &str, limit: i64, sort: EtcdSort, max_create: i64) -> EtcdRange {
        let prefix = self.lock_prefix(name);
        // '/' + 1 == '0': the range [prefix, end) is every key under the prefix.
        let end = format!("{}{}0", self.key_prefix, name);
        EtcdRange {
            key: prefix,
            range_end: Some(end),
            limit,
            sort: Some(sort),
            keys_only: true,
            max_create_revision: max_create,
        }
    }

    /// Builds a transaction that runs `success` only while `key` (see
    /// [`EtcdBackend::holder_key`]) still has create revision `token`, i.e. while the
    /// lease that got `token` still holds the lock (etcd's `IsOwner` comparison). The
    /// failure branch reads the current holder, so [`read_etcd_fenced_txn`] can say
    /// who holds the lock now. Token 0, which no lease carries, never passes.
    pub fn fenced_txn(
        &self,
        name: &str,
        key: &str,
        token: FencingToken,
        success: Vec<EtcdOp>,
    ) -> EtcdRequest {
        // Create revision 0 is how etcd compares a key that does not exist: token 0 (no
        // lease has it) must not pass when nobody holds the lock, so it compares with a
        // revision no key has.
        let create_revision = match i64::try_from(token.get()) {
            Ok(0) | Err(_) => i64::MAX,
            Ok(revision) => revision,
        };
        EtcdRequest::Txn(EtcdTxn {
            compare: vec![EtcdCompare {
                key: key.to_owned(),
                create_revision,
            }],
            success,
            failure: vec![EtcdOp::Range(self.prefix_range(
                name,
                1,
                EtcdSort::CreateAscend,
                0,
            ))],
        })
    }
}

/// The outcome of a fenced etcd transaction (see [`EtcdBackend::fenced_txn`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EtcdFenced {
    /// The comparison held: the operations ran. Carries the transaction's revision.
    Applied {
        /// The revision the transaction produced (or read at).
        revision: i64,
    },
    /// The lease no longer holds the lock; nothing was written. `holder` is the
    /// current holder's token, if anyone holds the lock.
    Refused {
        /// The current holder's fencing token.
        holder: Option<FencingToken>,
    },
}

/// Reads the reply of [`EtcdBackend::fenced_txn`].
///
/// Errors: [`ProtocolError`] for an error reply or a reply of another shape.
pub fn read_etcd_fenced_txn(reply: &str) -> Result<EtcdFenced, ProtocolError> {
    let v = parse(reply).map_err(|e| match e {
        ReadError::Protocol(p) => p,
        ReadError::Ambiguous(m) => protocol(m),
    })?;
    let shape = || {
        protocol(format!(
            "fenced transaction: expected a txn reply, got {reply:.200}"
        ))
    };
    // every txn reply has a header with the revision
    let revision = header_revision(&v).ok_or_else(shape)?;
    if v.get("succeeded").and_then(Value::as_bool) == Some(true) {
        return Ok(EtcdFenced::Applied { revision });
    }
    // refused: the failure branch read the lock's holder (`kvs` omitted when nobody)
    let kvs = response_kvs(&v, 0, "response_range").ok_or_else(shape)?;
    let holder = match kvs.first() {
        None => None,
        Some(kv) => Some(
            int_field(kv, "create_revision")
                .and_then(|r| u64::try_from(r).ok())
                .map(FencingToken)
                .ok_or_else(shape)?,
        ),
    };
    Ok(EtcdFenced::Refused { holder })
}

/// Who holds a lock, as [`EtcdBackend::holder_range`] found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EtcdHolder {
    /// The holder's fencing token (its key's create revision).
    pub token: FencingToken,
    /// The holder's lease id (the key's `lease`; from its name when the reply omits
    /// it, see [`EtcdBackend::holder_key`]): [`EtcdRequest::LeaseRevoke`] of it is the
    /// operator's reset, which with [`EtcdBackend::shared_lease`] ends every lock on
    /// that lease.
    pub lease: i64,
}

impl EtcdBackend {
    /// The operator query "who holds `name`?": the key with the lowest create
    /// revision under [`EtcdBackend::lock_prefix`] (the holder; any key there is a
    /// live lease). Read it with [`read_etcd_holder`]. To free the lock whoever holds
    /// it, revoke the holder's lease ([`EtcdRequest::LeaseRevoke`], read with
    /// [`read_etcd_revoke`]): etcd deletes its key, the next contender's watch fires,
    /// and its token (a later revision) is above every earlier one; the freed holder
    /// learns it at its next keep-alive (`Lost { RenewRejected }`).
    pub fn holder_range(&self, name: &str) -> EtcdRequest {
        EtcdRequest::Range(self.prefix_range(name, 1, EtcdSort::CreateAscend, 0))
    }

    /// The election query "who leads `name`?": [`EtcdBackend::holder_range`] with the
    /// key's value, which is how etcd's `concurrency.Election.Leader` reads it. Read the
    /// reply with [`read_etcd_leader`].
    pub fn leader_range(&self, name: &str) -> EtcdRequest {
        let mut range = self.prefix_range(name, 1, EtcdSort::CreateAscend, 0);
        range.keys_only = false;
        EtcdRequest::Range(range)
    }

    /// A leader's publication of `value` in its own key (etcd's
    /// `concurrency.Election.Proclaim`): a [`EtcdBackend::fenced_txn`] that puts
    /// `value` into the key of `owner`, keeping the key's lease (`ignore_lease`: its own
    /// or, with [`EtcdBackend::shared_lease`], the shared one), only while that key's
    /// create revision is `token`. Read the reply with [`read_etcd_fenced_txn`].
    pub fn proclaim(
        &self,
        name: &str,
        owner: &OwnerId,
        token: FencingToken,
        value: &str,
    ) -> EtcdRequest {
        let key = self.holder_key(name, owner);
        let put = EtcdOp::Put {
            key: key.clone(),
            value: value.to_owned(),
            lease: 0,
            ignore_lease: true,
        };
        self.fenced_txn(name, &key, token, vec![put])
    }
}

/// Reads the reply of [`EtcdBackend::leader_range`]: the holder and its key's value
/// (UTF-8, lossy; empty when the key has none), or `None` when no key lives under the
/// election's prefix.
///
/// Errors: [`ProtocolError`] for an error reply or a reply of another shape.
pub fn read_etcd_leader(reply: &str) -> Result<Option<(EtcdHolder, String)>, ProtocolError> {
    let Some(holder) = read_etcd_holder(reply)? else {
        return Ok(None);
    };
    let v = parse(reply).map_err(|e| match e {
        ReadError::Protocol(p) => p,
        ReadError::Ambiguous(m) => protocol(m),
    })?;
    let kv = v
        .get("kvs")
        .and_then(Value::as_array)
        .and_then(|k| k.first());
    // the gateway omits an empty value
    let value = match kv.and_then(|kv| kv.get("value")) {
        None => String::new(),
        Some(raw) => {
            let bytes = raw
                .as_str()
                .and_then(|r| B64.decode(r).ok())
                .ok_or_else(|| {
                    protocol(format!(
                        "leader range: a value that is not base64: {raw:.200}"
                    ))
                })?;
            String::from_utf8_lossy(&bytes).into_owned()
        }
    };
    Ok(Some((holder, value)))
}

/// Reads the reply of [`EtcdBackend::holder_range`]: the holder, or `None` when no key
/// lives under the lock's prefix.
///
/// Errors: [`ProtocolError`] for an error reply or a reply of another shape.
pub fn read_etcd_holder(reply: &str) -> Result<Option<EtcdHolder>, ProtocolError> {
    let v = parse(reply).map_err(|e| match e {
        ReadError::Protocol(p) => p,
        ReadError::Ambiguous(m) => protocol(m),
    })?;
    let shape = || {
        protocol(format!(
            "holder range: expected a range reply, got {reply:.200}"
        ))
    };
    header_revision(&v).ok_or_else(shape)?;
    let Some(kv) = v
        .get("kvs")
        .and_then(Value::as_array)
        .and_then(|k| k.first())
    else {
        return Ok(None);
    };
    let token = int_field(kv, "create_revision").and_then(|r| u64::try_from(r).ok());
    // the lease the key is attached to (a shared one is not the one its name gives)
    let lease = int_field(kv, "lease").filter(|l| *l != 0).or_else(|| {
        kv_key(kv)
            .and_then(|k| k.rsplit('/').next().map(str::to_owned))
            .and_then(|hex| i64::from_str_radix(&hex, 16).ok())
    });
    match (token, lease) {
        (Some(t), Some(lease)) => Ok(Some(EtcdHolder {
            token: FencingToken(t),
            lease,
        })),
        _ => Err(shape()),
    }
}

/// Reads the reply of [`EtcdBackend::leader_range`] as an inspection of lock `name`:
/// the holder (owner `lease:<16 hex digits>`, the key naming the lease rather than the
/// owner id; token its create revision; waiters the other contender keys, from the
/// reply's `count` of every key under the prefix; metadata the key's value when it is
/// a JSON object of strings, [`crate::LockOptions::metadata`]; `ttl_left` not yet
/// known) and its lease id, for [`EtcdRequest::LeaseTimeToLive`]. `None` when no key
/// lives under the lock's prefix.
///
/// Errors: [`ProtocolError`] for an error reply or a reply of another shape.
pub fn read_etcd_inspect(
    name: &str,
    reply: &str,
) -> Result<Option<(super::Holder, i64)>, ProtocolError> {
    let Some((holder, value)) = read_etcd_leader(reply)? else {
        return Ok(None);
    };
    let count = parse(reply)
        .ok()
        .as_ref()
        .and_then(|v| int_field(v, "count"))
        .and_then(|c| u64::try_from(c).ok());
    let mut found = super::Holder::new(name.to_owned());
    found.owner = Some(format!("lease:{:016x}", holder.lease));
    found.token = Some(holder.token);
    // at least the holder's key is counted
    found.waiters = Some(count.unwrap_or(1).saturating_sub(1));
    found.metadata = crate::decode_metadata(&value);
    Ok(Some((found, holder.lease)))
}

/// Reads the reply of [`EtcdRequest::LeaseTimeToLive`]: the seconds left on the lease,
/// or `None` when it is gone (`TTL` -1, or a lease-not-found error).
///
/// Errors: [`ProtocolError`] for another error reply or a reply of another shape.
pub fn read_etcd_time_to_live(reply: &str) -> Result<Option<core::time::Duration>, ProtocolError> {
    if grpc_code(reply) == Some(NOT_FOUND) {
        return Ok(None);
    }
    let v = parse(reply).map_err(|e| match e {
        ReadError::Protocol(p) => p,
        ReadError::Ambiguous(m) => protocol(m),
    })?;
    header_revision(&v).ok_or_else(|| {
        protocol(format!(
            "lease time-to-live: expected a lease reply, got {reply:.200}"
        ))
    })?;
    // the gateway omits a zero TTL: the lease ends within the second
    let ttl = int_field(&v, "TTL").unwrap_or(0);
    Ok(u64::try_from(ttl).ok().map(core::time::Duration::from_secs))
}

/// At most this many keys per page of an etcd listing ([`EtcdBackend::list_page`]).
pub const ETCD_LIST_PAGE: i64 = 1_000;

/// At most this many pages per etcd listing, so a huge keyspace costs a bounded time.
pub const ETCD_LIST_PAGES: usize = 100;

/// The end of the range of every UTF-8 key starting with `prefix` (etcd's
/// `GetPrefixRangeEnd`, kept within UTF-8): the prefix up to its last character that
/// has a successor, which is replaced by it; `"\0"` (every key from the start) when
/// none has.
fn utf8_prefix_end(prefix: &str) -> String {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = match last {
            '\u{D7FF}' => Some('\u{E000}'),
            c => char::from_u32(c as u32 + 1),
        };
        if let Some(next) = next {
            chars.push(next);
            return chars.into_iter().collect();
        }
    }
    "\0".to_owned()
}

impl EtcdBackend {
    /// One page of the operator listing of the locks whose names start with `prefix`:
    /// a keys-only range over `{key_prefix}{prefix}…` in key order, at most
    /// [`ETCD_LIST_PAGE`] keys, after key `after` (exclusive; `None` for the first
    /// page). Read it with [`EtcdBackend::read_list_page`], then inspect each name
    /// ([`EtcdBackend::leader_range`], [`read_etcd_inspect`]); at most
    /// [`ETCD_LIST_PAGES`] pages per listing.
    pub fn list_page(&self, prefix: &str, after: Option<&str>) -> EtcdRequest {
        let start = format!("{}{prefix}", self.key_prefix);
        let end = utf8_prefix_end(&start);
        EtcdRequest::Range(EtcdRange {
            key: match after {
                // the smallest key above `after`
                Some(a) => format!("{a}\0"),
                // past the previous-holder records (`{key_prefix}\0…`), which sort first
                None if prefix.is_empty() => format!("{start}\u{1}"),
                None => start,
            },
            range_end: Some(end),
            limit: ETCD_LIST_PAGE,
            sort: None,
            keys_only: true,
            max_create_revision: 0,
        })
    }

    /// Reads the reply of [`EtcdBackend::list_page`] for `prefix`: the names starting
    /// with `prefix` of the locks its contender keys belong to (the range also holds the
    /// keys of lock `a` when the prefix is `a/`; in the order of their first key, each once per page: a name's keys
    /// may span pages, and interleave with those of names under it, `name/…`), and the
    /// last key, to ask for the next page after, or `None` when the range is exhausted.
    /// Keys not of the form `{key_prefix}{name}/{16 hex digits}` are skipped, and so are
    /// the previous-holder records ([`EtcdBackend::released_key`], `joined_key`).
    ///
    /// Errors: [`ProtocolError`] for an error reply or a reply of another shape.
    pub fn read_list_page(
        &self,
        prefix: &str,
        reply: &str,
    ) -> Result<(Vec<String>, Option<String>), ProtocolError> {
        let v = parse(reply).map_err(|e| match e {
            ReadError::Protocol(p) => p,
            ReadError::Ambiguous(m) => protocol(m),
        })?;
        header_revision(&v)
            .ok_or_else(|| protocol(format!("list: expected a range reply, got {reply:.200}")))?;
        let kvs = v.get("kvs").and_then(Value::as_array);
        let keys: Vec<String> = kvs.into_iter().flatten().filter_map(kv_key).collect();
        let mut names: Vec<String> = Vec::new();
        for key in &keys {
            let Some((name, lease)) = key
                .strip_prefix(&self.key_prefix)
                .and_then(|rest| rest.rsplit_once('/'))
            else {
                continue;
            };
            let is_lease = lease.len() == 16 && lease.bytes().all(|b| b.is_ascii_hexdigit());
            // the previous-holder records sit under `{key_prefix}\0…`: no lock name has a NUL
            let wanted =
                is_lease && !name.is_empty() && !name.contains('\0') && name.starts_with(prefix);
            if wanted && !names.iter().any(|n| n == name) {
                names.push(name.to_owned());
            }
        }
        let more = v.get("more").and_then(Value::as_bool) == Some(true);
        let next = if more { keys.last().cloned() } else { None };
        Ok((names, next))
    }
}

/// Reads the reply of a [`EtcdRequest::LeaseRevoke`]: `true` when the lease was
/// revoked, `false` when it was gone already.
///
/// Errors: [`ProtocolError`] for another error reply or a reply of another shape.
pub fn read_etcd_revoke(reply: &str) -> Result<bool, ProtocolError> {
    match read_owner_check(reply) {
        Ok(Read::NotHeld) => Ok(false),
        Ok(_) => Ok(true),
        Err(ReadError::Protocol(p)) => Err(p),
        Err(ReadError::Ambiguous(m)) => Err(protocol(m)),
    }
}

// ---- per-lock progress ------------------------------------------------------------

/// What a release's delete transaction found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Deleted {
    /// The key was still this owner's, and is gone now.
    Ours,
    /// The key was gone or another's: the lease had ended before the release.
    NotHeld,
}

impl Deleted {
    fn read(self) -> Read {
        match self {
            Deleted::Ours => Read::Done,
            Deleted::NotHeld => Read::NotHeld,
        }
    }
}

/// Where the lease of the current owner stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LeaseState {
    /// Not granted (or lost): grant it.
    None,
    /// etcd says it exists, but not since when (a retried grant): keep it alive first.
    Exists,
    /// Confirmed alive by the grant or keep-alive sent at `base`.
    Live { base: Instant },
}

/// Which step an acquire request was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EtcdStep {
    Grant,
    KeepAlive,
    Txn,
    Predecessor,
    /// The release's delete transaction.
    Delete,
    /// A shared-lease release's (or cancellation's) delete of the own key, whatever
    /// its revision: it leaves the lease to the other locks.
    Drop,
    /// The release's (or a cancellation's) lease revoke.
    Revoke,
}

/// One lock's progress through the recipe, for its current owner id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EtcdProgress {
    owner: OwnerId,
    /// The lease this owner's key is (to be) attached to: [`lease_id`] of the owner,
    /// or a shared session's ([`EtcdBackend::shared_lease`]).
    lease_id: i64,
    lease: LeaseState,
    /// The create revision of this owner's key, once seen.
    key_rev: Option<i64>,
    /// The predecessor's key and the revision to watch it from.
    predecessor: Option<(String, i64)>,
    /// What the release's delete transaction found, once read.
    release_found: Option<Deleted>,
    /// The create revision of the immediate predecessor, when the last transaction saw
    /// it as the first key (the holder): its delete is what grants this contender.
    holder_ahead: Option<i64>,
    /// What the transaction that put this owner's key read before writing, when its
    /// reply was seen (see [`Fate`]).
    at_put: Option<Fate>,
    pending: EtcdStep,
}

/// The records a grant judges the previous holder's fate by (see
/// [`EtcdBackend::released_key`] and [`EtcdBackend::joined_key`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fate {
    /// The last clean release: `Some((token, revision))`, `None` when there was none;
    /// `Err` for a record fencepost cannot read.
    released: Result<Option<(i64, i64)>, ()>,
    /// The create revision of the newest fencepost contender key before this one.
    joined: Option<i64>,
}

impl Fate {
    fn read(v: &Value, released_at: usize, joined_at: Option<usize>) -> Option<Fate> {
        let released = response_kvs(v, released_at, "response_range")?;
        let released = match released.first() {
            None => Ok(None),
            Some(kv) => kv
                .get("value")
                .and_then(Value::as_str)
                .and_then(|raw| B64.decode(raw).ok())
                .and_then(|bytes| String::from_utf8(bytes).ok())
                .and_then(|text| text.parse::<i64>().ok())
                .zip(int_field(kv, "mod_revision"))
                .map(Some)
                .ok_or(()),
        };
        let joined = match joined_at {
            Some(i) => response_kvs(v, i, "response_range")?
                .first()
                .and_then(|kv| int_field(kv, "mod_revision")),
            None => None,
        };
        Some(Fate { released, joined })
    }
}

/// How the holder before a grant ended, from the records (docs/DESIGN.md, "The
/// previous holder's fate"). `holder_ahead`: the predecessor last seen holding, whose
/// delete granted this contender; `at_put`: what the put's own transaction read;
/// `now`: what the granting transaction read; `immediate`: the put's own transaction
/// granted.
fn previous_of(
    holder_ahead: Option<i64>,
    at_put: Option<Fate>,
    now: Option<Fate>,
    immediate: bool,
) -> crate::Previous {
    use crate::Previous;
    if let Some(ahead) = holder_ahead {
        // the predecessor held; only its own release writes its token
        return match now.map(|f| f.released) {
            Some(Ok(Some((token, _)))) if token == ahead => Previous::Released,
            Some(Ok(_)) => Previous::Expired,
            _ => Previous::Unknown,
        };
    }
    let Some(Fate { released, joined }) = at_put.filter(|_| immediate) else {
        // a retried put, or a predecessor never seen holding: no record tells
        return Previous::Unknown;
    };
    match (released, joined) {
        (Ok(None), None) => Previous::None,
        // contenders joined, and none ever released cleanly
        (Ok(None), Some(_)) => Previous::Expired,
        // no contender joined after the released holder: the lock was free since
        (Ok(Some((token, _))), Some(joined)) if joined == token => Previous::Released,
        // one joined after that release and is gone: a holder after it did not
        // release cleanly
        (Ok(Some((_, at))), Some(joined)) if joined > at => Previous::Expired,
        _ => Previous::Unknown,
    }
}

impl EtcdProgress {
    pub(crate) fn new(owner: OwnerId) -> Self {
        EtcdProgress {
            owner,
            lease_id: lease_id(&owner),
            lease: LeaseState::None,
            key_rev: None,
            predecessor: None,
            release_found: None,
            holder_ahead: None,
            at_put: None,
            pending: EtcdStep::Grant,
        }
    }

    pub(crate) fn owner(&self) -> OwnerId {
        self.owner
    }

    /// What the release's delete transaction found, once read.
    pub(crate) fn release_found(&self) -> Option<Read> {
        self.release_found.map(Deleted::read)
    }

    /// The validity base: the send of the last confirmed grant or keep-alive.
    pub(crate) fn lease_base(&self) -> Option<Instant> {
        match self.lease {
            LeaseState::Live { base } => Some(base),
            _ => None,
        }
    }

    fn lose_lease(&mut self) {
        self.lease = LeaseState::None;
        self.key_rev = None;
        self.predecessor = None;
        self.holder_ahead = None;
        self.at_put = None;
    }
}

impl EtcdBackend {
    /// The next acquire step for `progress`. `keepalive_due`: the lock decided the
    /// waiter's lease needs its keep-alive in this step.
    ///
    /// With [`EtcdBackend::shared_lease`], a contender without a lease takes its
    /// session's: granted by the first lock that needs it (while no reply has confirmed
    /// it alive), then only kept alive. A keep-alive another lock sent less than a
    /// third of the TTL before `now` and a reply confirmed serves as this contender's
    /// too: its key's put fails (*lease not found*) if the lease ended since.
    pub(crate) fn acquire(
        &self,
        name: &str,
        progress: &mut EtcdProgress,
        sessions: &mut EtcdSessions,
        cx: &StepCx<'_>,
    ) -> EtcdRequest {
        let (ttl_ms, keepalive_due, metadata) = (cx.ttl_ms, cx.renew_session, cx.metadata);
        if self.shared_lease && progress.lease == LeaseState::None {
            let session = sessions.session(lease_ttl_s(ttl_ms), &progress.owner);
            progress.lease_id = session.id;
            let fresh = core::time::Duration::from_millis(ttl_ms / 3);
            progress.lease = match session.confirmed {
                None => LeaseState::None,
                Some(base) if cx.now.saturating_duration_since(base) < fresh => {
                    LeaseState::Live { base }
                }
                Some(_) => LeaseState::Exists,
            };
        }
        let id = progress.lease_id;
        match progress.lease {
            LeaseState::None => {
                progress.pending = EtcdStep::Grant;
                EtcdRequest::LeaseGrant {
                    id,
                    ttl_s: lease_ttl_s(ttl_ms),
                }
            }
            LeaseState::Exists => {
                progress.pending = EtcdStep::KeepAlive;
                EtcdRequest::LeaseKeepAlive { id }
            }
            LeaseState::Live { .. } if keepalive_due => {
                progress.pending = EtcdStep::KeepAlive;
                EtcdRequest::LeaseKeepAlive { id }
            }
            LeaseState::Live { .. } => match (progress.key_rev, &progress.predecessor) {
                // Our key is known but its predecessor is not (first seen in a failure
                // branch without a known revision): find the predecessor.
                (Some(rev), None) if progress.pending == EtcdStep::Txn => {
                    progress.pending = EtcdStep::Predecessor;
                    EtcdRequest::Range(self.prefix_range(
                        name,
                        1,
                        EtcdSort::CreateDescend,
                        rev.saturating_sub(1),
                    ))
                }
                _ => {
                    progress.pending = EtcdStep::Txn;
                    EtcdRequest::Txn(self.acquire_txn(
                        name,
                        &progress.owner,
                        id,
                        progress.key_rev,
                        metadata,
                    ))
                }
            },
        }
    }

    /// The key's value is the holder metadata when there is some (canonical JSON, see
    /// [`crate::LockOptions::metadata`]), else the owner id: etcd's own tools
    /// (`concurrency.Mutex`, `etcdctl lock`) read only keys and create revisions, never
    /// values, so either leaves them reading the lock as before.
    fn acquire_txn(
        &self,
        name: &str,
        owner: &OwnerId,
        lease: i64,
        key_rev: Option<i64>,
        metadata: Option<&str>,
    ) -> EtcdTxn {
        let value = match metadata {
            Some(m) => crate::decode_metadata(m)
                .map(|m| crate::encode_metadata(&m))
                .unwrap_or_else(|| m.to_owned()),
            None => owner.to_string(),
        };
        let key = self.holder_key(name, owner);
        let mut failure = vec![
            EtcdOp::Range(one_key(&key, true)),
            EtcdOp::Range(self.prefix_range(name, 1, EtcdSort::CreateAscend, 0)),
            EtcdOp::Range(one_key(&self.released_key(name), false)),
        ];
        if let Some(rev) = key_rev {
            failure.push(EtcdOp::Range(self.prefix_range(
                name,
                1,
                EtcdSort::CreateDescend,
                rev.saturating_sub(1),
            )));
        }
        EtcdTxn {
            compare: vec![EtcdCompare {
                key: key.clone(),
                create_revision: 0,
            }],
            success: vec![
                EtcdOp::Put {
                    key,
                    value,
                    lease,
                    ignore_lease: false,
                },
                EtcdOp::Range(self.prefix_range(name, 1, EtcdSort::CreateAscend, 0)),
                // ours (the newest) and the one before it
                EtcdOp::Range(self.prefix_range(name, 2, EtcdSort::CreateDescend, 0)),
                // the previous holder's fate (see `previous`): the last clean release,
                // and the newest contender before ours, read before ours replaces it
                EtcdOp::Range(one_key(&self.released_key(name), false)),
                EtcdOp::Range(one_key(&self.joined_key(name), true)),
                EtcdOp::Put {
                    key: self.joined_key(name),
                    value: owner.to_string(),
                    lease: 0,
                    ignore_lease: false,
                },
            ],
            failure,
        }
    }

    /// Reads the reply to the acquire step in `progress.pending`, updating `progress`
    /// (and the shared session the reply confirms or finds gone).
    /// `Granted` carries the validity base (the lease's last confirmed send).
    pub(crate) fn read_acquire(
        &self,
        name: &str,
        progress: &mut EtcdProgress,
        sessions: &mut EtcdSessions,
        sent_at: Instant,
        reply: &str,
    ) -> Result<Read, ReadError> {
        let v = match parse(reply) {
            Ok(v) => v,
            // A put whose lease has expired: our key is gone; start over.
            Err(ReadError::Protocol(_)) if grpc_code(reply) == Some(NOT_FOUND) => {
                sessions.retire(progress.lease_id);
                progress.lose_lease();
                return Ok(Read::Continue);
            }
            Err(ReadError::Protocol(_))
                if grpc_code(reply) == Some(FAILED_PRECONDITION)
                    && progress.pending == EtcdStep::Grant =>
            {
                // "lease already exists": an earlier grant of ours landed.
                progress.lease = LeaseState::Exists;
                return Ok(Read::Continue);
            }
            Err(e) => return Err(e),
        };
        match progress.pending {
            EtcdStep::Grant => {
                if int_field(&v, "TTL").is_some_and(|t| t > 0) {
                    progress.lease = LeaseState::Live { base: sent_at };
                    sessions.confirm(progress.lease_id, sent_at);
                    Ok(Read::Continue)
                } else {
                    Err(ReadError::Protocol(protocol(format!(
                        "lease grant: expected a positive TTL, got {reply}"
                    ))))
                }
            }
            EtcdStep::KeepAlive => {
                if keepalive_ttl(&v).is_some_and(|t| t > 0) {
                    progress.lease = LeaseState::Live { base: sent_at };
                    sessions.confirm(progress.lease_id, sent_at);
                } else {
                    // The lease expired while we waited: so did our key.
                    sessions.retire(progress.lease_id);
                    progress.lose_lease();
                }
                Ok(Read::Continue)
            }
            EtcdStep::Predecessor => {
                let kvs = v.get("kvs").and_then(Value::as_array);
                match kvs.and_then(|k| k.first()) {
                    Some(kv) => {
                        self.check_not_nested(name, kv)?;
                        progress.predecessor = Some(watch_target(kv, &v)?);
                        // the holder is not in this reply: the next acquire txn says
                        Ok(Read::Contended {
                            remaining: None,
                            queued: true,
                            holder: None,
                        })
                    }
                    // No predecessor left: check again.
                    None => Ok(Read::Continue),
                }
            }
            EtcdStep::Txn => self.read_acquire_txn(name, progress, &v),
            // an acquire reply is never read for a release step
            EtcdStep::Delete | EtcdStep::Drop | EtcdStep::Revoke => {
                Err(ReadError::Protocol(protocol(format!(
                    "acquire: a reply read while a release step was pending: {reply:.200}"
                ))))
            }
        }
    }

    fn read_acquire_txn(
        &self,
        name: &str,
        progress: &mut EtcdProgress,
        v: &Value,
    ) -> Result<Read, ReadError> {
        let key = self.holder_key(name, &progress.owner);
        let shape = || {
            ReadError::Protocol(protocol(format!(
                "acquire transaction: unexpected reply {v}"
            )))
        };
        let succeeded = v.get("succeeded").and_then(Value::as_bool) == Some(true);
        let now;
        let (my_rev, first, before) = if succeeded {
            let put_rev = v
                .pointer("/responses/0/response_put/header/revision")
                .and_then(as_int)
                .ok_or_else(shape)?;
            let first = response_kvs(v, 1, "response_range").ok_or_else(shape)?;
            let newest = response_kvs(v, 2, "response_range").ok_or_else(shape)?;
            // newest-first: [ours, predecessor]
            let before = newest
                .iter()
                .find(|kv| kv_key(kv).as_deref() != Some(key.as_str()));
            now = Fate::read(v, 3, Some(4));
            progress.at_put = now;
            progress.holder_ahead = None;
            (put_rev, first, before.cloned())
        } else {
            let mine = response_kvs(v, 0, "response_range").ok_or_else(shape)?;
            let mine = mine.first().ok_or_else(shape)?;
            let on = int_field(mine, "lease");
            if self.shared_lease && on.is_some_and(|l| l != progress.lease_id) {
                // our key, still on a shared lease found gone: etcd deletes an expired
                // lease's keys a moment later; the retried put then lands
                return Err(ReadError::Ambiguous(format!(
                    "acquire transaction: own key {key} is still on lapsed lease {}",
                    on.unwrap_or_default()
                )));
            }
            if on != Some(progress.lease_id) {
                return Err(ReadError::Protocol(protocol(format!(
                    "acquire transaction: key {key} is attached to another lease: {mine}"
                ))));
            }
            let rev = int_field(mine, "create_revision").ok_or_else(shape)?;
            let first = response_kvs(v, 1, "response_range").ok_or_else(shape)?;
            let before = if progress.key_rev == Some(rev) {
                response_kvs(v, 3, "response_range").and_then(|k| k.first().cloned())
            } else {
                None
            };
            now = Fate::read(v, 2, None);
            (rev, first, before)
        };
        progress.key_rev = Some(my_rev);
        for kv in first.first().into_iter().chain(before.as_ref()) {
            self.check_not_nested(name, kv)?;
        }
        let holder_rev = first
            .first()
            .and_then(|kv| int_field(kv, "create_revision"));
        if holder_rev == Some(my_rev) {
            let base = progress.lease_base().ok_or_else(shape)?;
            let token = u64::try_from(my_rev).map_err(|_| shape())?;
            progress.predecessor = None;
            let previous = previous_of(progress.holder_ahead, progress.at_put, now, succeeded);
            return Ok(Read::Granted {
                token: FencingToken(token),
                base: Some(base),
                previous,
            });
        }
        if holder_rev.is_none_or(|h| h > my_rev) {
            // Our key is not in the prefix range: it cannot be (the reply is
            // inconsistent); read again.
            return Err(ReadError::Ambiguous(format!(
                "acquire transaction: own key {key} (revision {my_rev}) not seen first or after the holder"
            )));
        }
        match before {
            Some(kv) => {
                progress.predecessor = Some(watch_target(&kv, v)?);
                let ahead = int_field(&kv, "create_revision");
                progress.holder_ahead = ahead.filter(|a| holder_rev == Some(*a));
            }
            None => {
                // First sight of our revision (a retried put), or an inconsistent read:
                // the next step looks the predecessor up by revision.
                progress.predecessor = None;
                progress.holder_ahead = None;
                return Ok(Read::Continue);
            }
        }
        Ok(Read::Contended {
            remaining: None,
            queued: true,
            // the holder's key's create revision: its fencing token
            holder: holder_rev.and_then(|r| u64::try_from(r).ok()),
        })
    }

    /// Refuses a key in `name`'s contender range that belongs to another lock: one whose
    /// name is `name` followed by `/` (`a/b` under `a`'s prefix `{key_prefix}a/`). The
    /// recipe, as etcd's own `concurrency.Mutex`, takes every key under the prefix for
    /// a contender, so such a lock's holder would block `name` (a program holding `a/b`
    /// while taking `a` would wait on itself). Interoperating with `etcdctl lock` and
    /// `concurrency.Mutex` keeps the key layout; the overlap is an error instead of a
    /// silent wait.
    fn check_not_nested(&self, name: &str, kv: &Value) -> Result<(), ReadError> {
        let Some(key) = kv_key(kv) else {
            return Ok(()); // the readers say what is wrong with such a key
        };
        let prefix = self.lock_prefix(name);
        let Some(rest) = key.strip_prefix(prefix.as_str()) else {
            return Ok(());
        };
        let Some((nested, _)) = rest.rsplit_once('/') else {
            return Ok(()); // a contender's own key: {prefix}{lease id}
        };
        let other = format!("{name}/{nested}");
        Err(ReadError::Protocol(protocol(format!(
            "etcd lock names {name:?} and {other:?} overlap: the etcd lock recipe (as etcd's \
             concurrency.Mutex) takes every key under {prefix:?} for a contender of {name:?}, \
             so the key {key:?} of lock {other:?} would block it; use lock names none of \
             which is another followed by '/'"
        ))))
    }

    /// The watch a contended acquirer parks on: its predecessor's deletion, for at
    /// most `timeout_ms`.
    pub(crate) fn wait(&self, progress: &EtcdProgress, timeout_ms: u64) -> Option<EtcdRequest> {
        let (key, start_revision) = progress.predecessor.clone()?;
        Some(EtcdRequest::Watch(EtcdWatch {
            key,
            start_revision,
            timeout_ms,
        }))
    }

    /// Keep-alive of the lease the key of `progress` is attached to.
    pub(crate) fn renew(&self, progress: &EtcdProgress) -> EtcdRequest {
        EtcdRequest::LeaseKeepAlive {
            id: progress.lease_id,
        }
    }

    /// The next release step: for a held lock whose key is known, delete the key if
    /// its create revision is still the token (a retried release whose first reply was
    /// lost cannot delete a newer key); then, or when cancelling, revoke the lease. With
    /// [`EtcdBackend::shared_lease`] the lease stays (other locks ride on it): a
    /// cancellation deletes the own key instead ([`EtcdBackend::drop_key`]).
    pub(crate) fn release(
        &self,
        name: &str,
        progress: &mut EtcdProgress,
        ending: Ending,
    ) -> EtcdRequest {
        let owner = progress.owner;
        match progress.key_rev {
            Some(rev) if ending == Ending::Held && progress.release_found.is_none() => {
                progress.pending = EtcdStep::Delete;
                let key = self.holder_key(name, &owner);
                EtcdRequest::Txn(EtcdTxn {
                    compare: vec![EtcdCompare {
                        key: key.clone(),
                        create_revision: rev,
                    }],
                    success: vec![
                        EtcdOp::Delete { key: key.clone() },
                        // the next holder's grant reads how this one ended
                        EtcdOp::Put {
                            key: self.released_key(name),
                            value: rev.to_string(),
                            lease: 0,
                            ignore_lease: false,
                        },
                    ],
                    // never empty: a failed transaction then still has `responses`,
                    // which tells its reply from a revoke's bare header
                    failure: vec![EtcdOp::Range(one_key(&key, true))],
                })
            }
            _ if self.shared_lease => {
                progress.pending = EtcdStep::Drop;
                self.drop_key(name, &owner)
            }
            _ => {
                progress.pending = EtcdStep::Revoke;
                self.revoke(&owner)
            }
        }
    }

    /// Deletes `owner`'s key for `name`, whatever its revision: the key is this owner's
    /// alone, so deleting it frees only what this owner may hold. The shared-lease
    /// cancellation and cleanup, which must leave the shared lease alive.
    pub(crate) fn drop_key(&self, name: &str, owner: &OwnerId) -> EtcdRequest {
        let key = self.holder_key(name, owner);
        EtcdRequest::Txn(EtcdTxn {
            compare: Vec::new(),
            success: vec![EtcdOp::Delete { key: key.clone() }],
            // never empty, as the release's: the reply is read as a transaction's
            failure: vec![EtcdOp::Range(one_key(&key, true))],
        })
    }

    /// Revokes `owner`'s lease (and with it every key attached to it).
    pub(crate) fn revoke(&self, owner: &OwnerId) -> EtcdRequest {
        EtcdRequest::LeaseRevoke {
            id: lease_id(owner),
        }
    }
}

/// The progress of `owner`, fresh when the owner id changed (or none was kept).
fn progress_of<'a>(progress: &'a mut Progress, owner: &OwnerId) -> &'a mut EtcdProgress {
    if progress.etcd.as_ref().is_some_and(|p| p.owner() != *owner) {
        progress.etcd = None;
    }
    progress
        .etcd
        .get_or_insert_with(|| Box::new(EtcdProgress::new(*owner)))
}

/// etcd's mutex recipe (see the module docs): acquire walks lease, key and
/// predecessor steps; contenders watch their predecessor; the release deletes the key,
/// then revokes the lease.
impl Recipe for EtcdBackend {
    fn waiting(&self) -> Waiting {
        Waiting::Notify
    }

    fn session_since(&self, owner: &OwnerId, progress: &mut Progress) -> Option<Instant> {
        progress_of(progress, owner).lease_base()
    }

    /// With [`EtcdBackend::shared_lease`], the keep-alives of one shared lease due in
    /// one input go as one: any number of renewals read its one reply.
    fn renew_batch_limit(&self) -> usize {
        if self.shared_lease {
            usize::MAX
        } else {
            1
        }
    }

    fn renew_batch_key(&self, body: &RequestBody) -> Option<BatchKey> {
        match body {
            RequestBody::Etcd(EtcdRequest::LeaseKeepAlive { id }) if self.shared_lease => {
                Some(BatchKey(id.unsigned_abs(), 0))
            }
            _ => None,
        }
    }

    fn phrase_renew_batch(&self, bodies: &[&RequestBody]) -> Option<RequestBody> {
        let first = *bodies.first()?;
        bodies.iter().all(|b| *b == first).then(|| first.clone())
    }

    fn phrase(
        &self,
        step: Step,
        cx: &StepCx<'_>,
        progress: &mut Progress,
        shared: &mut Shared,
    ) -> Phrased {
        let (name, owner) = (cx.name, cx.owner);
        Phrased::One(RequestBody::Etcd(match step {
            Step::Acquire => self.acquire(name, progress_of(progress, owner), &mut shared.etcd, cx),
            Step::Renew => self.renew(progress_of(progress, owner)),
            Step::Release(ending) => self.release(name, progress_of(progress, owner), ending),
            Step::Cleanup if self.shared_lease => self.drop_key(name, owner),
            Step::Cleanup => self.revoke(owner),
            Step::Wait { timeout_ms } => {
                match self.wait(progress_of(progress, owner), timeout_ms) {
                    Some(watch) => watch,
                    None => return Phrased::Nothing,
                }
            }
        }))
    }

    fn read(
        &self,
        step: Step,
        cx: &StepCx<'_>,
        progress: &mut Progress,
        shared: &mut Shared,
        reply: Result<&Reply, &str>,
    ) -> Result<Read, ReadError> {
        let v = payload(reply, "etcd", |r| match r {
            Reply::Etcd(v) => Some(v.as_str()),
            _ => None,
        })?;
        let sessions = &mut shared.etcd;
        match step {
            Step::Acquire => self.read_acquire(
                cx.name,
                progress_of(progress, cx.owner),
                sessions,
                cx.sent_at,
                v,
            ),
            Step::Wait { .. } => read_wait(v),
            Step::Release(_) => read_release(progress_of(progress, cx.owner), self.shared_lease, v),
            Step::Renew => {
                let read = read_owner_check(v)?;
                let id = progress_of(progress, cx.owner).lease_id;
                match read {
                    Read::Done => sessions.confirm(id, cx.sent_at),
                    _ => sessions.retire(id),
                }
                Ok(read)
            }
            Step::Cleanup => read_owner_check(v),
        }
    }

    fn late_may_hold(&self, step: Step, reply: Result<&Reply, &str>) -> bool {
        match (step, reply) {
            // a lease or a queued key, which blocks those behind it until its TTL
            (Step::Acquire, Ok(Reply::Etcd(v))) => may_hold(v),
            (Step::Renew, Ok(Reply::Etcd(v))) => !matches!(read_owner_check(v), Ok(Read::NotHeld)),
            (Step::Release(_) | Step::Cleanup | Step::Wait { .. }, _) => false,
            _ => true,
        }
    }

    fn unconfirmed_release(
        &self,
        ending: Ending,
        owner: &OwnerId,
        progress: &mut Progress,
    ) -> Unconfirmed {
        let found = progress_of(progress, owner).release_found();
        Unconfirmed {
            // the key's fate is unknown: revoking the lease (deleting the key, on a
            // shared lease) frees it
            cleanup: ending == Ending::Held && found.is_none(),
            found,
        }
    }
}

/// A late acquire-step reply: might the server hold a key (or lease) for its owner?
fn may_hold(reply: &str) -> bool {
    // Any reply but "lease not found" may mean a lease or a queued key exists.
    grpc_code(reply) != Some(NOT_FOUND)
}

/// Reads a keep-alive, release-transaction or revoke reply.
pub(crate) fn read_owner_check(reply: &str) -> Result<Read, ReadError> {
    if grpc_code(reply) == Some(NOT_FOUND) {
        return Ok(Read::NotHeld);
    }
    let v = parse(reply)?;
    // a keep-alive: the gateway's stream wraps it in `result`; a gRPC client's response
    // in the proto3 JSON mapping is bare, with its `ID` (and no `TTL` once the lease is gone)
    if v.get("result").is_some() || v.get("ID").is_some() {
        return Ok(if keepalive_ttl(&v).is_some_and(|t| t > 0) {
            Read::Done
        } else {
            Read::NotHeld
        });
    }
    if v.get("responses").is_some() || v.get("succeeded").is_some() {
        return Ok(
            if v.get("succeeded").and_then(Value::as_bool) == Some(true) {
                Read::Done
            } else {
                Read::NotHeld
            },
        );
    }
    if v.get("header").is_some() {
        // a revoke: `{"header": …}` (release transactions always carry `responses`)
        return Ok(Read::Done);
    }
    Err(ReadError::Protocol(protocol(format!(
        "expected a keep-alive, transaction or revoke reply, got {reply}"
    ))))
}

/// Reads a watch reply: any non-error reply means "check again".
pub(crate) fn read_wait(reply: &str) -> Result<Read, ReadError> {
    parse(reply).map(|_| Read::Done)
}

/// Reads a release step's reply: the delete transaction's finding is kept and the
/// revoke follows ([`Read::Continue`]); the revoke's reply reports that finding (a
/// cancellation, which deleted nothing, reports `Done`). On a shared lease (`shared`)
/// nothing follows the delete: its finding is the release's outcome.
pub(crate) fn read_release(
    progress: &mut EtcdProgress,
    shared: bool,
    reply: &str,
) -> Result<Read, ReadError> {
    let read = read_owner_check(reply)?;
    if progress.pending == EtcdStep::Delete {
        let found = match read {
            Read::NotHeld => Deleted::NotHeld,
            _ => Deleted::Ours,
        };
        progress.release_found = Some(found);
        return Ok(if shared { found.read() } else { Read::Continue });
    }
    Ok(progress.release_found().unwrap_or(Read::Done))
}

// ---- JSON helpers ----------------------------------------------------------------

const NOT_FOUND: i64 = 5;
const FAILED_PRECONDITION: i64 = 9;

fn protocol(message: String) -> ProtocolError {
    ProtocolError {
        backend: "etcd".to_owned(),
        message,
    }
}

/// The gRPC status code of an error reply, if it is one.
fn grpc_code(reply: &str) -> Option<i64> {
    let v: Value = serde_json::from_str(reply).ok()?;
    error_code(&v).map(|(c, _)| c)
}

fn error_code(v: &Value) -> Option<(i64, String)> {
    // unary: {"error": "...", "message": "...", "code": 5}
    if let Some(code) = v.get("code").and_then(as_int) {
        if v.get("error").is_some() || v.get("message").is_some() {
            let msg = v
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            return Some((code, msg));
        }
    }
    // streams: {"error": {"grpc_code": 5, "http_code": 404, "message": "..."}}
    if let Some(e) = v.get("error").filter(|e| e.is_object()) {
        let code = e
            .get("grpc_code")
            .or_else(|| e.get("code"))
            .and_then(as_int)?;
        let msg = e
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        return Some((code, msg));
    }
    None
}

/// Parses a reply; error replies become `Transient` (codes retrying may fix) or
/// `Protocol`.
fn parse(reply: &str) -> Result<Value, ReadError> {
    let v: Value = serde_json::from_str(reply).map_err(|e| {
        ReadError::Protocol(protocol(format!("reply is not JSON ({e}): {reply:.200}")))
    })?;
    if let Some((code, message)) = error_code(&v) {
        // CANCELLED, UNKNOWN, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, INTERNAL,
        // UNAVAILABLE: leader changes, timeouts, overload.
        return Err(if matches!(code, 1 | 2 | 4 | 8 | 10 | 13 | 14) {
            ReadError::Ambiguous(format!("etcd error {code}: {message}"))
        } else {
            ReadError::Protocol(protocol(format!("etcd error {code}: {message}")))
        });
    }
    Ok(v)
}

/// int64 fields come as strings from the gateway, as numbers from some clients.
fn as_int(v: &Value) -> Option<i64> {
    match v {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

fn int_field(v: &Value, field: &str) -> Option<i64> {
    v.get(field).and_then(as_int)
}

fn header_revision(v: &Value) -> Option<i64> {
    v.pointer("/header/revision").and_then(as_int)
}

/// The `TTL` of a keep-alive reply, with or without the stream's `result` wrapper.
/// Absent (the gateway omits zero fields) reads as 0: the lease is gone.
fn keepalive_ttl(v: &Value) -> Option<i64> {
    let r = v.get("result").unwrap_or(v);
    Some(int_field(r, "TTL").unwrap_or(0))
}

/// The `kvs` of response number `i` (an empty list when omitted).
fn response_kvs(v: &Value, i: usize, kind: &str) -> Option<Vec<Value>> {
    let r = v.get("responses")?.as_array()?.get(i)?.get(kind)?;
    Some(
        r.get("kvs")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
    )
}

fn kv_key(kv: &Value) -> Option<String> {
    let raw = kv.get("key")?.as_str()?;
    let bytes = B64.decode(raw).ok()?;
    String::from_utf8(bytes).ok()
}

/// The predecessor to watch and the revision to watch it from (just after the reply's
/// revision, so a delete in between is seen).
fn watch_target(kv: &Value, reply: &Value) -> Result<(String, i64), ReadError> {
    let key = kv_key(kv).ok_or_else(|| {
        ReadError::Protocol(protocol(format!("a key that is not base64 UTF-8: {kv}")))
    })?;
    let rev = header_revision(reply).unwrap_or(0);
    Ok((key, rev.saturating_add(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extreme_revisions_saturate_instead_of_overflowing() {
        let kv = json!({ "key": b64("fencepost/r/0000000000000001") });
        let top = json!({ "header": { "revision": i64::MAX.to_string() } });
        assert_eq!(watch_target(&kv, &top).unwrap().1, i64::MAX);
        // the predecessor lookup of a key at the lowest revision
        let b = EtcdBackend::default();
        let mut p = EtcdProgress::new(OwnerId([1; 16]));
        p.lease = LeaseState::Live {
            base: Instant::ZERO,
        };
        p.key_rev = Some(i64::MIN);
        p.pending = EtcdStep::Txn;
        let owner = OwnerId([1; 16]);
        let cx = StepCx {
            ttl_ms: 1_000,
            owner: &owner,
            ..super::super::LATE_CX
        };
        let step = b.acquire("r", &mut p, &mut EtcdSessions::default(), &cx);
        assert!(matches!(step, EtcdRequest::Range(r) if r.max_create_revision == i64::MIN));
    }

    #[test]
    fn metadata_is_the_key_s_value_and_inspection_reads_it_back() {
        let b = EtcdBackend::default();
        let owner = OwnerId([0xab; 16]);
        let value = |txn: EtcdTxn| match &txn.success[0] {
            EtcdOp::Put { value, .. } => value.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            value(b.acquire_txn("r", &owner, lease_id(&owner), None, None)),
            owner.to_string()
        );
        assert_eq!(
            value(b.acquire_txn(
                "r",
                &owner,
                lease_id(&owner),
                None,
                Some(r#"{"z":"1","a":"2"}"#)
            )),
            r#"{"a":"2","z":"1"}"#
        );
        let key = B64.encode("fencepost/r/2bababababababab");
        let meta = B64.encode(r#"{"a":"2"}"#);
        let reply = format!(
            r#"{{"header":{{"revision":"9"}},"kvs":[{{"key":"{key}","create_revision":"5","value":"{meta}"}}],"count":"3","more":true}}"#
        );
        let (h, lease) = read_etcd_inspect("r", &reply).unwrap().unwrap();
        assert_eq!(lease, 0x2bab_abab_abab_abab);
        assert_eq!(h.owner.as_deref(), Some("lease:2bababababababab"));
        assert_eq!((h.token, h.waiters), (Some(FencingToken(5)), Some(2)));
        assert_eq!(h.metadata.unwrap()["a"], "2");
        let owner_value = reply.replace(&meta, &B64.encode(owner.to_string()));
        assert_eq!(
            read_etcd_inspect("r", &owner_value)
                .unwrap()
                .unwrap()
                .0
                .metadata,
            None
        );
        assert_eq!(
            read_etcd_inspect("r", r#"{"header":{"revision":"9"}}"#),
            Ok(None)
        );
        assert_eq!(
            read_etcd_time_to_live(r#"{"header":{"revision":"9"},"ID":"1","TTL":"4"}"#),
            Ok(Some(core::time::Duration::from_secs(4)))
        );
        assert_eq!(
            read_etcd_time_to_live(r#"{"header":{"revision":"9"},"ID":"1","TTL":"-1"}"#),
            Ok(None)
        );
        assert_eq!(
            read_etcd_time_to_live(r#"{"error":"lease not found","code":5,"message":"x"}"#),
            Ok(None)
        );
        assert!(read_etcd_time_to_live("[]").is_err());
        let ttl = EtcdRequest::LeaseTimeToLive { id: 7 };
        assert_eq!(ttl.gateway_path(), "/v3/lease/timetolive");
        assert_eq!(ttl.gateway_body(), r#"{"ID":"7"}"#);
    }

    #[test]
    fn listing_pages_over_the_prefix_and_names_each_lock_once() {
        let b = EtcdBackend::default();
        let first = b.list_page("jo", None);
        let EtcdRequest::Range(r) = &first else {
            panic!("{first:?}")
        };
        assert_eq!(
            (r.key.as_str(), r.range_end.as_deref()),
            ("fencepost/jo", Some("fencepost/jp"))
        );
        assert!(r.keys_only && r.limit == ETCD_LIST_PAGE);
        let EtcdRequest::Range(next) = b.list_page("jo", Some("fencepost/job/00")) else {
            panic!()
        };
        assert_eq!(next.key, "fencepost/job/00\0");
        assert_eq!(utf8_prefix_end("aé"), "aê");
        assert_eq!(utf8_prefix_end("a\u{10FFFF}"), "b");
        assert_eq!(utf8_prefix_end(""), "\0");
        let keys = [
            "fencepost/job/0000000000000001",
            "fencepost/job/a/0000000000000003",
            "fencepost/job/0000000000000002",
            "fencepost/job/not-a-lease",
            "elsewhere/x/0000000000000001",
        ];
        let kvs: Vec<String> = keys
            .iter()
            .map(|k| format!(r#"{{"key":"{}"}}"#, B64.encode(k)))
            .collect();
        let reply = format!(
            r#"{{"header":{{"revision":"9"}},"kvs":[{}],"more":true}}"#,
            kvs.join(",")
        );
        let (names, after) = b.read_list_page("jo", &reply).unwrap();
        assert_eq!(names, ["job", "job/a"]);
        // the range of prefix "job/" holds lock "job"'s own keys: not a name under it
        assert_eq!(b.read_list_page("job/", &reply).unwrap().0, ["job/a"]);
        assert_eq!(after.as_deref(), Some("elsewhere/x/0000000000000001"));
        let done = reply.replace(r#","more":true"#, "");
        assert_eq!(b.read_list_page("jo", &done).unwrap().1, None);
        assert!(b
            .read_list_page("jo", r#"{"error":"x","code":3,"message":"m"}"#)
            .is_err());
    }

    #[test]
    fn gateway_bodies_use_base64_keys_and_string_int64() {
        let b = EtcdBackend::default();
        let owner = OwnerId([0xab; 16]);
        let key = b.holder_key("report", &owner);
        assert_eq!(key, "fencepost/report/2bababababababab");
        assert_eq!(lease_id(&owner), 0x2bab_abab_abab_abab);
        assert_eq!(lease_ttl_s(1), 1);
        assert_eq!(lease_ttl_s(1000), 1);
        assert_eq!(lease_ttl_s(1001), 2);
        let grant = EtcdRequest::LeaseGrant { id: 7, ttl_s: 2 };
        assert_eq!(grant.gateway_path(), "/v3/lease/grant");
        assert_eq!(grant.gateway_body(), r#"{"ID":"7","TTL":"2"}"#);
        let txn = EtcdRequest::Txn(b.acquire_txn("r", &owner, lease_id(&owner), None, None));
        let body: Value = serde_json::from_str(&txn.gateway_body()).unwrap();
        assert_eq!(body["compare"][0]["create_revision"], "0");
        assert_eq!(
            body["success"][0]["request_put"]["lease"],
            lease_id(&owner).to_string()
        );
        assert_eq!(
            body["success"][1]["request_range"]["range_end"],
            b64("fencepost/r0")
        );
        assert_eq!(body["success"][2]["request_range"]["sort_order"], "DESCEND");
    }

    #[test]
    fn error_codes_are_classified() {
        assert!(matches!(
            parse(
                r#"{"error":"etcdserver: leader changed","message":"etcdserver: leader changed","code":14}"#
            ),
            Err(ReadError::Ambiguous(_))
        ));
        assert!(matches!(
            parse(r#"{"error":{"grpc_code":5,"http_code":404,"message":"x"}}"#),
            Err(ReadError::Protocol(_))
        ));
        assert_eq!(
            read_owner_check(r#"{"result":{"header":{},"ID":"9"}}"#),
            Ok(Read::NotHeld)
        );
        assert_eq!(
            read_owner_check(r#"{"result":{"header":{},"ID":"9","TTL":"3"}}"#),
            Ok(Read::Done)
        );
        assert_eq!(
            read_owner_check(
                r#"{"error":"etcdserver: requested lease not found","message":"m","code":5}"#
            ),
            Ok(Read::NotHeld)
        );
        assert_eq!(
            read_owner_check(r#"{"header":{"revision":"4"},"succeeded":true}"#),
            Ok(Read::Done)
        );
        // bare keep-alive responses (gRPC clients): a lost lease has an ID but no TTL
        assert_eq!(
            read_owner_check(r#"{"header":{},"ID":"9","TTL":"3"}"#),
            Ok(Read::Done)
        );
        assert_eq!(
            read_owner_check(r#"{"header":{},"ID":"9"}"#),
            Ok(Read::NotHeld)
        );
        // a revoke's reply is a bare header
        assert_eq!(
            read_owner_check(r#"{"header":{"revision":"5"}}"#),
            Ok(Read::Done)
        );
        assert!(read_owner_check("nope").is_err());
    }

    #[test]
    fn fenced_txn_with_token_0_compares_a_revision_no_key_has() {
        // create revision 0 would match an absent key: a write with no holder at all
        let compared = |token| match EtcdBackend::default().fenced_txn("r", "k", token, vec![]) {
            EtcdRequest::Txn(txn) => txn.compare[0].create_revision,
            other => panic!("{other:?}"),
        };
        assert_eq!(compared(FencingToken(0)), i64::MAX);
        assert_eq!(compared(FencingToken(33)), 33);
    }

    #[test]
    fn proclaim_puts_the_value_into_the_own_key_keeping_its_lease_while_it_holds() {
        let owner = OwnerId([0xab; 16]);
        let settings = EtcdBackend::default();
        match settings.proclaim("jobs", &owner, FencingToken(33), "v") {
            EtcdRequest::Txn(txn) => {
                let key = settings.holder_key("jobs", &owner);
                assert_eq!(txn.compare[0].key, key);
                assert_eq!(txn.compare[0].create_revision, 33);
                assert_eq!(
                    txn.success,
                    vec![EtcdOp::Put {
                        key,
                        value: "v".into(),
                        lease: 0,
                        ignore_lease: true,
                    }]
                );
            }
            other => panic!("{other:?}"),
        }
        match settings.leader_range("jobs") {
            EtcdRequest::Range(r) => assert!(!r.keys_only && r.limit == 1),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn leader_replies_carry_the_lowest_keys_value() {
        // "fencepost:jobs/00000000000000ab" and "hi", base64
        let kv = r#"{"header":{"revision":"40"},"kvs":[{"key":"ZmVuY2Vwb3N0OmpvYnMvMDAwMDAwMDAwMDAwMDBhYg==","create_revision":"33","value":"aGk="}],"count":"2"}"#;
        let (holder, value) = read_etcd_leader(kv).unwrap().unwrap();
        assert_eq!(
            (holder.token, holder.lease, value.as_str()),
            (FencingToken(33), 0xab, "hi")
        );
        let empty = r#"{"header":{"revision":"40"},"kvs":[{"key":"ZmVuY2Vwb3N0OmpvYnMvMDAwMDAwMDAwMDAwMDBhYg==","create_revision":"33"}],"count":"1"}"#;
        assert_eq!(read_etcd_leader(empty).unwrap().unwrap().1, "");
        assert_eq!(
            read_etcd_leader(r#"{"header":{"revision":"40"}}"#),
            Ok(None)
        );
        assert!(read_etcd_leader(r#"{"error":"x","code":3}"#).is_err());
    }

    #[test]
    fn listing_skips_the_previous_holder_records() {
        let b = EtcdBackend::default();
        let EtcdRequest::Range(first) = b.list_page("", None) else {
            panic!("a range")
        };
        assert_eq!(first.key, "fencepost/\u{1}", "starts past the records");
        let kv = |k: &str| json!({ "key": b64(k), "create_revision": "2" });
        let reply = json!({
            "header": { "revision": "9" },
            "kvs": [
                kv("fencepost/\0joined/0123456789abcdef"),
                kv("fencepost/\0released/0123456789abcdef"),
                kv("fencepost/report/1a3744504560639e"),
            ],
        });
        let (names, next) = b.read_list_page("", &reply.to_string()).unwrap();
        assert_eq!((names, next), (vec!["report".to_owned()], None));
    }

    #[test]
    fn fenced_txn_replies_are_read_strictly() {
        let applied = r#"{"header":{"revision":"12"},"succeeded":true,"responses":[{"response_put":{"header":{"revision":"12"}}}]}"#;
        assert_eq!(
            read_etcd_fenced_txn(applied),
            Ok(EtcdFenced::Applied { revision: 12 })
        );
        let refused = r#"{"header":{"revision":"12"},"responses":[{"response_range":{"header":{"revision":"12"},"kvs":[{"key":"YQ==","create_revision":"9"}],"count":"1"}}]}"#;
        assert_eq!(
            read_etcd_fenced_txn(refused),
            Ok(EtcdFenced::Refused {
                holder: Some(FencingToken(9))
            })
        );
        let free = r#"{"header":{"revision":"12"},"responses":[{"response_range":{"header":{"revision":"12"}}}]}"#;
        assert_eq!(
            read_etcd_fenced_txn(free),
            Ok(EtcdFenced::Refused { holder: None })
        );
        for garbage in [
            "{}",
            "[]",
            "\"x\"",
            "null",
            r#"{"foo":1}"#,
            r#"{"succeeded":true}"#,
            r#"{"header":{"revision":"3"}}"#,
        ] {
            assert!(read_etcd_fenced_txn(garbage).is_err(), "{garbage}");
        }
    }
}
