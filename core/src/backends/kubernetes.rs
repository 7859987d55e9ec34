//! Kubernetes: a `coordination.k8s.io/v1` Lease per lock, every change a
//! compare-and-set on `metadata.resourceVersion`, and `spec.leaseTransitions` as the
//! fencing token.
//!
//! The Lease's fields mean what client-go's `leaderelection` makes them mean, so a
//! fencepost lock and a client-go elector on the same Lease exclude each other:
//!
//! | field | written by fencepost |
//! | --- | --- |
//! | `holderIdentity` | the owner id (32 hex digits) while held; `""` once released |
//! | `leaseDurationSeconds` | the lock's TTL in whole seconds (1 on release, as client-go) |
//! | `acquireTime` | the host's wall clock at the grant (kept by renewals) |
//! | `renewTime` | the host's wall clock at every grant, renewal and release |
//! | `leaseTransitions` | the previous value + 1 on **every** grant (1 on create): the token |
//!
//! The recipe, step by step:
//!
//! 1. **Acquire.** GET the Lease. Missing (404): POST it with this owner as holder.
//!    Free (empty holder) or judged expired (below): PUT it back with this owner as
//!    holder and `leaseTransitions + 1`, carrying the read `resourceVersion`. Already
//!    this owner's (an earlier attempt whose reply was lost landed): PUT a renewal, the
//!    token unchanged. Held by another: `Contended` with its time left. A 409 on the
//!    write (`Conflict`, `AlreadyExists`) means another candidate won that round: the
//!    next attempt reads again.
//! 2. **Expiry is judged by observation**, never by comparing `renewTime` with a
//!    local clock: a record is expired once it has stayed unchanged (same
//!    `resourceVersion`) for its own `leaseDurationSeconds` since this candidate's
//!    reply first showed it (client-go's `observedTime`), stretched by the declared
//!    drift bound (`× (1 + drift_factor)` on the candidate's clock, which may run that
//!    much fast while the holder's runs that much slow). The holder wrote that version
//!    before the server answered the first read, so its validity (measured from the
//!    send of that write, rule 1) ended before the takeover is sent.
//! 3. **Renew** PUTs `renewTime` with the last `resourceVersion` this owner wrote. A
//!    409 (the version moved: a renewal whose reply was lost landed, or someone else
//!    wrote) reads the Lease again (`Continue`) and, if it is still this owner's with
//!    the same token, PUTs again; another holder or token, or a 404, is `NotHeld`.
//! 4. **Release** clears `holderIdentity` as client-go's `ReleaseOnCancel` does (PUT
//!    with the version, a 409 re-read as for renewals). A cancellation or a cleanup,
//!    which knows no version, is one JSON Patch that `test`s `holderIdentity` against
//!    the owner id before clearing it: owner-checked and atomic on the server.
//!
//! Wall-clock fields are stamped by the host: a write lists the `spec` fields the
//! adapter sets to its wall clock, in `MicroTime` format (RFC 3339 UTC with six
//! fractional digits), just before sending ([`KubeRequest::stamp`]). The core reads
//! no clock, and no decision reads those fields.
//!
//! Requests are data ([`KubeRequest`]: method, path, JSON body); a reply is the
//! response body as the API server sent it (a Lease, or a `Status` for an error).
//! Tokens are `leaseTransitions`, an `int32` counted in one object under
//! compare-and-set: they rise with every fencepost grant and never go back while the
//! Lease object lives. Deleting the Lease restarts the count (recover with
//! `token_floor`).

use core::mem;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{
    payload, Ending, Phrased, Progress, Read, ReadError, Recipe, Reply, RequestBody, Step, StepCx,
};
use crate::error::ProtocolError;
use crate::{FencingToken, Instant, OwnerId};

/// Settings of the Kubernetes Lease backend. A lock's name is its Lease's name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KubernetesBackend {
    /// The namespace of every Lease (a DNS-1123 label); default `default`.
    pub namespace: String,
}

impl Default for KubernetesBackend {
    fn default() -> Self {
        KubernetesBackend {
            namespace: "default".to_owned(),
        }
    }
}

/// One call to the API server. The adapter sends `body` (when there is one) with
/// `content_type`, after setting each `spec` field named in `stamp` to its wall
/// clock as a `MicroTime` (`2026-12-01T16:02:29.123456Z`), and answers with the
/// response body whatever the status (a Lease, or a `Status` document). A response
/// without a JSON body is a transport failure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct KubeRequest {
    /// `GET`, `POST`, `PUT` or `PATCH`.
    pub method: String,
    /// The path under the server URL: `/apis/coordination.k8s.io/v1/namespaces/{ns}/leases[/{name}]`.
    pub path: String,
    /// The JSON body, if any.
    pub body: Option<String>,
    /// `application/json`, or `application/json-patch+json` for a PATCH.
    pub content_type: String,
    /// The `spec` fields to stamp with the host's wall clock (`acquireTime`, `renewTime`).
    pub stamp: Vec<String>,
}

impl KubeRequest {
    /// The request as JSON (`{"method", "path", "body", "content_type", "stamp"}`).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

const JSON: &str = "application/json";
const JSON_PATCH: &str = "application/json-patch+json";

/// Whether `s` is a DNS-1123 label: 1..=63 of `[a-z0-9-]`, alphanumeric at both ends.
pub(crate) fn dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| alnum(c) || *c == b'-')
        && alnum(&b[0])
        && alnum(&b[b.len() - 1])
}

/// Whether `s` is a DNS-1123 subdomain (what a Lease name must be): at most 253
/// characters, dot-separated labels.
pub(crate) fn dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(dns_label)
}

impl KubernetesBackend {
    /// The path of the Leases collection of the namespace.
    pub fn collection_path(&self) -> String {
        format!(
            "/apis/coordination.k8s.io/v1/namespaces/{}/leases",
            self.namespace
        )
    }

    /// The path of Lease `name`.
    pub fn lease_path(&self, name: &str) -> String {
        format!("{}/{name}", self.collection_path())
    }

    /// Checks a lock name and options for this backend: the name must be a DNS-1123
    /// subdomain (the Lease's name), the namespace a DNS-1123 label, the TTL whole
    /// seconds from 1 (`leaseDurationSeconds` is an integer number of seconds), and a
    /// token floor an `int32` (`leaseTransitions`).
    ///
    /// Errors: [`crate::UsageError::InvalidOption`] naming `name`, `namespace`, `ttl`
    /// or `token_floor`.
    pub fn check(&self, name: &str, options: &crate::LockOptions) -> Result<(), crate::UsageError> {
        if !dns_label(&self.namespace) {
            return Err(crate::UsageError::option(
                "namespace",
                format!(
                    "must be a DNS-1123 label (1 to 63 of a-z, 0-9 and '-', starting and ending \
                     with a letter or digit), got {:?}",
                    self.namespace
                ),
            ));
        }
        if !dns_subdomain(name) {
            return Err(crate::UsageError::option(
                "name",
                format!(
                    "a Kubernetes Lease name must be a DNS-1123 subdomain (at most 253 of a-z, \
                     0-9, '-' and '.', each dot-separated part starting and ending with a \
                     letter or digit), got {name:?}"
                ),
            ));
        }
        let ttl = options.ttl;
        if ttl.subsec_nanos() != 0 || ttl.as_secs() == 0 {
            return Err(crate::UsageError::option(
                "ttl",
                crate::text![
                    "must be whole seconds, at least 1 s, on Kubernetes (leaseDurationSeconds), got ",
                    ttl,
                ],
            ));
        }
        if let Some(floor) = options.token_floor {
            if floor.0 > i32::MAX as u64 {
                return Err(crate::UsageError::option(
                    "token_floor",
                    format!(
                        "must be at most 2147483647 on Kubernetes (leaseTransitions is an int32), got {}",
                        floor.0
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The JSON Patch that clears `holderIdentity` only while it is `owner`'s.
    /// Frees `owner`'s Lease if it still holds it. `clean` (a release): the holder is
    /// cleared, as client-go's release does, and the next taker hears `released`; a
    /// cleanup (a lease its holder no longer believes in) only shortens the lease to 1 s
    /// and keeps the holder, so the next taker hears `expired`.
    fn clear_if_owned(&self, name: &str, owner: &OwnerId, clean: bool) -> KubeRequest {
        let test =
            json!({"op": "test", "path": "/spec/holderIdentity", "value": owner.to_string()});
        let shorten = json!({"op": "replace", "path": "/spec/leaseDurationSeconds", "value": 1});
        let patch = if clean {
            json!([test, {"op": "replace", "path": "/spec/holderIdentity", "value": ""}, shorten])
        } else {
            json!([test, shorten])
        };
        KubeRequest {
            method: "PATCH".to_owned(),
            path: self.lease_path(name),
            body: Some(patch.to_string()),
            content_type: JSON_PATCH.to_owned(),
            stamp: Vec::new(),
        }
    }
}

// ---- per-lock progress ------------------------------------------------------------

/// The write an acquire or release step sends next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Write {
    /// POST a new Lease held by this owner.
    Create,
    /// PUT it back held by this owner with `leaseTransitions + 1`.
    Take,
    /// PUT it back with a new `renewTime` (this owner's already).
    Renew,
    /// PUT it back with no holder.
    Clear,
}

/// What the request in flight was.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Sent {
    #[default]
    Get,
    Write(Write),
}

/// One lock's progress for its current owner id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KubeProgress {
    owner: OwnerId,
    /// The Lease as last read or written (its `resourceVersion` is the next write's
    /// precondition).
    lease: Option<Value>,
    /// The `resourceVersion` a candidate watches for a change, and when its reply
    /// first showed it.
    observed: Option<(String, Instant)>,
    /// The write the next step sends (else it reads).
    next: Option<Write>,
    /// A renewal or release met a 409: its next step reads the Lease first.
    reread: bool,
    sent: Sent,
    /// Consecutive 409s of renewals and releases: the third is retried after the delay.
    conflicts: u8,
}

fn progress_of<'a>(progress: &'a mut Progress, owner: &OwnerId) -> &'a mut KubeProgress {
    if progress
        .kubernetes
        .as_ref()
        .is_some_and(|p| p.owner != *owner)
    {
        progress.kubernetes = None;
    }
    progress.kubernetes.get_or_insert_with(|| {
        Box::new(KubeProgress {
            owner: *owner,
            lease: None,
            observed: None,
            next: None,
            reread: false,
            sent: Sent::Get,
            conflicts: 0,
        })
    })
}

// ---- reading replies --------------------------------------------------------------

/// A reply as the recipe sees it.
enum Answer {
    Lease(Value),
    /// A `Status` document: its HTTP code and reason.
    Status(u16, String),
}

fn protocol(message: String) -> ProtocolError {
    ProtocolError {
        backend: "kubernetes".to_owned(),
        message,
    }
}

fn shape(reply: &str) -> ReadError {
    ReadError::Protocol(protocol(format!("unexpected reply {reply:.300}")))
}

fn answer(reply: &str) -> Result<Answer, ReadError> {
    let v: Value = serde_json::from_str(reply).map_err(|e| {
        ReadError::Protocol(protocol(format!("reply is not JSON ({e}): {reply:.200}")))
    })?;
    match v.get("kind").and_then(Value::as_str) {
        Some("Lease") if v.get("metadata").is_some_and(Value::is_object) => Ok(Answer::Lease(v)),
        Some("Status") => {
            let code = v
                .get("code")
                .and_then(Value::as_u64)
                .ok_or_else(|| shape(reply))?;
            let reason = v.get("reason").and_then(Value::as_str).unwrap_or_default();
            Ok(Answer::Status(
                u16::try_from(code).unwrap_or(0),
                reason.to_owned(),
            ))
        }
        _ => Err(shape(reply)),
    }
}

/// A `Status` that no outcome covers: the server may have applied the request when it
/// is one retrying may fix (429, 5xx: `TooManyRequests`, `InternalError`,
/// `ServiceUnavailable`, `Timeout`, `ServerTimeout`); anything else (401, 403, 422, …)
/// retrying will not fix.
fn status_error(code: u16, reason: &str, reply: &str) -> ReadError {
    if code == 429 || code >= 500 {
        ReadError::Ambiguous(format!("kubernetes: HTTP {code} {reason}"))
    } else {
        ReadError::Protocol(protocol(format!("HTTP {code} {reason}: {reply:.300}")))
    }
}

fn spec_str<'a>(lease: &'a Value, field: &str) -> Option<&'a str> {
    lease
        .pointer(&format!("/spec/{field}"))
        .and_then(Value::as_str)
}

fn spec_int(lease: &Value, field: &str) -> Option<i64> {
    lease
        .pointer(&format!("/spec/{field}"))
        .and_then(Value::as_i64)
}

fn resource_version(lease: &Value) -> Option<&str> {
    lease
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
}

fn holder(lease: &Value) -> &str {
    spec_str(lease, "holderIdentity").unwrap_or_default()
}

/// The token a Lease held by this owner carries: its `leaseTransitions`, at least 1.
fn token_of(lease: &Value, reply: &str) -> Result<FencingToken, ReadError> {
    spec_int(lease, "leaseTransitions")
        .and_then(|t| u64::try_from(t).ok())
        .filter(|t| *t > 0)
        .map(FencingToken)
        .ok_or_else(|| shape(reply))
}

impl KubernetesBackend {
    /// The GET of Lease `name` (what observers of a lock read).
    pub fn get(&self, name: &str) -> KubeRequest {
        KubeRequest {
            method: "GET".to_owned(),
            path: self.lease_path(name),
            body: None,
            content_type: JSON.to_owned(),
            stamp: Vec::new(),
        }
    }

    /// The write `w` for `owner`, from the Lease last read (`lease`).
    fn write(&self, w: Write, cx: &StepCx<'_>, lease: Option<&Value>) -> KubeRequest {
        let owner = cx.owner.to_string();
        let duration = cx.ttl_ms.div_ceil(1000).max(1);
        let old = lease.cloned().unwrap_or(Value::Null);
        let transitions = spec_int(&old, "leaseTransitions").unwrap_or(0);
        let (spec, stamp): (Value, Vec<&'static str>) = match w {
            Write::Create | Write::Take => {
                let next = if w == Write::Create {
                    1
                } else {
                    transitions.saturating_add(1)
                };
                let floor = cx.token_floor.map_or(0, |f| f.0 as i64);
                let spec = json!({
                    "holderIdentity": owner,
                    "leaseDurationSeconds": duration,
                    "leaseTransitions": next.max(floor),
                });
                (spec, vec!["acquireTime", "renewTime"])
            }
            Write::Renew => {
                let mut spec = json!({
                    "holderIdentity": owner,
                    "leaseDurationSeconds": duration,
                    "leaseTransitions": transitions,
                });
                match old.pointer("/spec/acquireTime") {
                    Some(at) if !at.is_null() => {
                        spec["acquireTime"] = at.clone();
                        (spec, vec!["renewTime"])
                    }
                    _ => (spec, vec!["acquireTime", "renewTime"]),
                }
            }
            // client-go's release: no holder, a duration of 1 s, the count kept
            Write::Clear => (
                json!({
                    "holderIdentity": "",
                    "leaseDurationSeconds": 1,
                    "leaseTransitions": transitions,
                }),
                vec!["acquireTime", "renewTime"],
            ),
        };
        if w == Write::Create {
            let mut body = json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": cx.name, "namespace": self.namespace},
                "spec": spec,
            });
            set_metadata_annotation(&mut body, &owner, cx.metadata);
            return KubeRequest {
                method: "POST".to_owned(),
                path: self.collection_path(),
                body: Some(body.to_string()),
                content_type: JSON.to_owned(),
                stamp: stamp.iter().map(|f| (*f).to_owned()).collect(),
            };
        }
        // the object as read, so labels and annotations others set are kept, with
        // its resourceVersion as the update's precondition. `answer` admits a Lease
        // only as an object whose metadata is an object: the writes below cannot meet
        // a value that is not one.
        let mut body = old;
        body["spec"] = spec;
        if matches!(w, Write::Take) {
            set_metadata_annotation(&mut body, &owner, cx.metadata);
        }
        KubeRequest {
            method: "PUT".to_owned(),
            path: self.lease_path(cx.name),
            body: Some(body.to_string()),
            content_type: JSON.to_owned(),
            stamp: stamp.iter().map(|f| (*f).to_owned()).collect(),
        }
    }

    fn read_acquire(
        &self,
        cx: &StepCx<'_>,
        p: &mut KubeProgress,
        reply: &str,
    ) -> Result<Read, ReadError> {
        let owner = cx.owner.to_string();
        let sent = p.sent;
        // whatever this reply says, the next step reads again unless told otherwise
        p.next = None;
        let lease = match answer(reply)? {
            Answer::Lease(lease) => lease,
            Answer::Status(404, _) if sent == Sent::Get => {
                p.lease = None;
                p.next = Some(Write::Create);
                return Ok(Read::Continue);
            }
            // the namespace does not exist (a read found no Lease, a create no namespace)
            Answer::Status(404, _) if sent == Sent::Write(Write::Create) => {
                return Err(ReadError::Protocol(protocol(format!(
                    "cannot create Lease {:?} in namespace {:?} (does the namespace exist?): {reply:.300}",
                    cx.name, self.namespace
                ))))
            }
            // deleted between the read and the write: read again
            Answer::Status(404, _) => return Ok(Read::Continue),
            // another candidate's write won this round (Conflict, AlreadyExists)
            Answer::Status(409, _) => {
                return Ok(Read::Contended {
                    remaining: None,
                    queued: false,
                    holder: None,
                })
            }
            Answer::Status(code, reason) => return Err(status_error(code, &reason, reply)),
        };
        let version = resource_version(&lease)
            .ok_or_else(|| shape(reply))?
            .to_owned();
        if let Sent::Write(_) = sent {
            // the server's answer to our write: held by us, with its token
            if holder(&lease) != owner {
                return Err(shape(reply));
            }
            let token = token_of(&lease, reply)?;
            // how the previous holder ended, from the Lease this write replaced:
            // client-go's release clears holderIdentity, a takeover finds it set
            let previous = match sent {
                Sent::Write(Write::Create) => crate::Previous::None,
                Sent::Write(Write::Take) => match p.lease.as_ref().map(holder) {
                    Some("") => crate::Previous::Released,
                    Some(_) => crate::Previous::Expired,
                    None => crate::Previous::Unknown,
                },
                _ => crate::Previous::Unknown,
            };
            p.lease = Some(lease);
            p.observed = None;
            return Ok(Read::Granted {
                token,
                base: None,
                previous,
            });
        }
        let who = holder(&lease).to_owned();
        let next = if who == owner {
            Write::Renew
        } else if who.is_empty() {
            Write::Take
        } else {
            // held by another: expired only once unchanged for its own duration since
            // this candidate first saw that version
            let duration_s = spec_int(&lease, "leaseDurationSeconds")
                .and_then(|d| u64::try_from(d).ok())
                .filter(|d| *d > 0)
                .unwrap_or(cx.ttl_ms.div_ceil(1000));
            // the holder's clock may run slow and this one fast by the drift bound: waited
            // out on this clock, duration × (1 + drift) covers the holder's validity
            // (at most duration × (1 − drift) on a clock that slow, i.e. under duration)
            let drift = cx.drift_factor.clamp(0.0, 0.5);
            let extra_ns = (duration_s as f64 * 1e9 * drift) as u64; // saturates
            let duration = core::time::Duration::from_secs(duration_s)
                .saturating_add(core::time::Duration::from_nanos(extra_ns));
            let since = match &p.observed {
                Some((v, at)) if *v == version => *at,
                _ => {
                    p.observed = Some((version, cx.now));
                    cx.now
                }
            };
            let expires = since + duration;
            if cx.now < expires {
                // the holder's grant: leaseTransitions changes with every holder
                // (client-go's) or grant (fencepost's), never while one holder renews
                let grant =
                    spec_int(&lease, "leaseTransitions").and_then(|t| u64::try_from(t).ok());
                p.lease = Some(lease);
                return Ok(Read::Contended {
                    remaining: Some(expires.saturating_duration_since(cx.now)),
                    queued: false,
                    holder: grant,
                });
            }
            Write::Take
        };
        p.lease = Some(lease);
        p.next = Some(next);
        Ok(Read::Continue)
    }

    /// Reads a renewal's or a held release's reply: the write `w` took effect (`Done`),
    /// or a 409 made it read the Lease, which is still this owner's with `token` (the
    /// write again, `Continue`) or not (`NotHeld`).
    fn read_owned_write(
        &self,
        w: Write,
        cx: &StepCx<'_>,
        p: &mut KubeProgress,
        reply: &str,
    ) -> Result<Read, ReadError> {
        let owner = cx.owner.to_string();
        let sent = p.sent;
        p.next = None;
        let lease = match answer(reply)? {
            Answer::Lease(lease) => lease,
            Answer::Status(404, _) => return Ok(Read::NotHeld),
            Answer::Status(409, _) if sent == Sent::Write(w) => {
                p.conflicts = p.conflicts.saturating_add(1);
                if p.conflicts > 2 {
                    // a storm of writers: try again after the retry delay
                    p.conflicts = 0;
                    return Err(ReadError::Ambiguous(
                        "kubernetes: HTTP 409 Conflict".to_owned(),
                    ));
                }
                p.reread = true;
                return Ok(Read::Continue);
            }
            Answer::Status(code, reason) => return Err(status_error(code, &reason, reply)),
        };
        resource_version(&lease).ok_or_else(|| shape(reply))?;
        let ours = holder(&lease) == owner;
        let same_token = match p
            .lease
            .as_ref()
            .and_then(|l| spec_int(l, "leaseTransitions"))
        {
            Some(t) => spec_int(&lease, "leaseTransitions") == Some(t),
            None => true,
        };
        match sent {
            Sent::Write(_) => {
                // a release's answer shows no holder; a renewal's shows us
                if w == Write::Renew && !ours {
                    return Err(shape(reply));
                }
                p.conflicts = 0;
                p.lease = Some(lease);
                Ok(Read::Done)
            }
            Sent::Get if ours && same_token => {
                p.lease = Some(lease);
                p.next = Some(w);
                Ok(Read::Continue)
            }
            Sent::Get => Ok(Read::NotHeld),
        }
    }
}

// ---- holder metadata and operator queries -------------------------------------------

/// The annotation that carries a holder's metadata
/// ([`crate::LockOptions::metadata`]): `{"owner": owner id, "metadata": {…}}` as
/// compact JSON. client-go electors keep annotations and never read this one; a reader
/// shows the metadata only while `owner` is the Lease's `holderIdentity`, so a record
/// left by an earlier holder (a client-go elector took over, or a grant without
/// metadata) reads as none.
pub const KUBE_METADATA_ANNOTATION: &str = "fencepost.dev/holder-metadata";

/// The page size of an operator listing's `GET …/leases?limit=`.
pub const KUBE_LIST_PAGE: u32 = 500;

/// The most pages an operator listing reads (so at most 50 000 Leases looked at).
pub const KUBE_LIST_PAGES: u32 = 100;

/// Writes (with `metadata`) or removes (without, when present) the metadata
/// annotation of a grant's body. A grant without metadata and no annotation sends
/// exactly the body it always did.
fn set_metadata_annotation(body: &mut Value, owner: &str, metadata: Option<&str>) {
    match metadata {
        Some(m) => {
            let doc = match crate::decode_metadata(m) {
                Some(map) => json!({"owner": owner, "metadata": map}),
                None => json!({"owner": owner, "metadata": m}),
            };
            let meta = &mut body["metadata"];
            if !meta.get("annotations").is_some_and(Value::is_object) {
                meta["annotations"] = json!({});
            }
            meta["annotations"][KUBE_METADATA_ANNOTATION] = Value::String(doc.to_string());
        }
        None => {
            if let Some(a) = body
                .pointer_mut("/metadata/annotations")
                .and_then(Value::as_object_mut)
            {
                a.remove(KUBE_METADATA_ANNOTATION);
            }
        }
    }
}

/// `s` with every byte outside RFC 3986's unreserved set percent-encoded, for a query
/// parameter (a `continue` token is base64).
fn query_escape(s: &str) -> String {
    s.bytes().fold(String::new(), |mut out, b| {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
        out
    })
}

impl KubernetesBackend {
    /// The operator query "who holds `name`?": the GET of its Lease
    /// ([`KubernetesBackend::get`]). Read its reply with [`read_kube_inspect`].
    pub fn inspect(&self, name: &str) -> KubeRequest {
        self.get(name)
    }

    /// One page of the operator listing: `GET …/leases?limit={limit}` from the
    /// `continue` token of the previous page (`None` for the first). Read its reply
    /// with [`read_kube_list`]; at most [`KUBE_LIST_PAGES`] pages per listing. The API
    /// has no name-prefix selector, so the prefix is applied to each page.
    pub fn list_page(&self, limit: u32, continue_token: Option<&str>) -> KubeRequest {
        let mut path = format!("{}?limit={}", self.collection_path(), limit.max(1));
        if let Some(token) = continue_token {
            path.push_str("&continue=");
            path.push_str(&query_escape(token));
        }
        KubeRequest {
            method: "GET".to_owned(),
            path,
            body: None,
            content_type: JSON.to_owned(),
            stamp: Vec::new(),
        }
    }
}

/// The holder of a Lease, or `None` when it has no `holderIdentity` (released, or
/// never held). `ttl_left` is the record's own `leaseDurationSeconds`: the most the
/// holder has left, counted from its last renewal. When that renewal was cannot be
/// told without comparing the holder's wall-clock `renewTime` with the reader's
/// clock, which this project never does (see the module docs); a holder that died
/// without releasing shows as holding until a candidate observes the record
/// unchanged for its duration and takes it over.
fn lease_holder(lease: &Value) -> Option<super::Holder> {
    let who = holder(lease);
    if who.is_empty() {
        return None;
    }
    let name = lease
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut h = super::Holder::new(name.to_owned());
    h.owner = Some(who.to_owned());
    h.token = spec_int(lease, "leaseTransitions")
        .and_then(|t| u64::try_from(t).ok())
        .map(FencingToken);
    h.ttl_left = spec_int(lease, "leaseDurationSeconds")
        .and_then(|d| u64::try_from(d).ok())
        .map(core::time::Duration::from_secs);
    h.metadata = lease
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(KUBE_METADATA_ANNOTATION))
        .and_then(Value::as_str)
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
        .filter(|doc| doc.get("owner").and_then(Value::as_str) == Some(who))
        .and_then(|doc| serde_json::from_value(doc.get("metadata")?.clone()).ok());
    Some(h)
}

/// Reads the reply of [`KubernetesBackend::inspect`]: the holder of `name` (owner =
/// `holderIdentity`, token = `leaseTransitions`, `ttl_left` = `leaseDurationSeconds`
/// as an upper bound, no waiters: candidates leave no trace, metadata from
/// [`KUBE_METADATA_ANNOTATION`]), or `None` when there is no Lease or no holder.
///
/// Errors: [`ProtocolError`] for a `Status` other than 404 or a reply of another shape.
pub fn read_kube_inspect(name: &str, reply: &str) -> Result<Option<super::Holder>, ProtocolError> {
    let failed = |e: ReadError| match e {
        ReadError::Protocol(p) => p,
        ReadError::Ambiguous(m) => protocol(format!("inspect {name:?}: {m}")),
    };
    match answer(reply).map_err(failed)? {
        Answer::Lease(lease) => Ok(lease_holder(&lease).map(|mut h| {
            h.name = name.to_owned();
            h
        })),
        Answer::Status(404, _) => Ok(None),
        Answer::Status(code, reason) => Err(failed(status_error(code, &reason, reply))),
    }
}

/// Reads one page of [`KubernetesBackend::list_page`]: the next page's `continue`
/// token (`None`: the last page) and the held Leases of this page whose names start
/// with `prefix`, read as [`read_kube_inspect`] reads one.
///
/// Errors: [`ProtocolError`] for a `Status` or a reply that is no `LeaseList`.
pub fn read_kube_list(
    prefix: &str,
    reply: &str,
) -> Result<(Option<String>, Vec<super::Holder>), ProtocolError> {
    let v: Value = serde_json::from_str(reply)
        .map_err(|e| protocol(format!("list: reply is not JSON ({e}): {reply:.200}")))?;
    if v.get("kind").and_then(Value::as_str) == Some("Status") {
        return Err(protocol(format!("list: {reply:.300}")));
    }
    let items = v
        .get("items")
        .and_then(Value::as_array)
        .ok_or_else(|| protocol(format!("list: expected a LeaseList, got {reply:.200}")))?;
    let next = v
        .pointer("/metadata/continue")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .map(str::to_owned);
    let holders = items
        .iter()
        .filter(|l| {
            l.pointer("/metadata/name")
                .and_then(Value::as_str)
                .is_some_and(|n| n.starts_with(prefix))
        })
        .filter_map(lease_holder)
        .collect();
    Ok((next, holders))
}

/// Reads a cancellation's or cleanup's JSON Patch: cleared, or not this owner's
/// (the `test` failed: 422), or no Lease at all: nothing of this owner's is left.
fn read_clear_if_owned(reply: &str) -> Result<Read, ReadError> {
    match answer(reply)? {
        Answer::Lease(_) | Answer::Status(404 | 422, _) => Ok(Read::Done),
        Answer::Status(code, reason) => Err(status_error(code, &reason, reply)),
    }
}

/// The Kubernetes Lease recipe (see the module docs).
impl Recipe for KubernetesBackend {
    fn phrase(
        &self,
        step: Step,
        cx: &StepCx<'_>,
        progress: &mut Progress,
        _shared: &mut super::Shared,
    ) -> Phrased {
        let request = match step {
            Step::Acquire | Step::Renew | Step::Release(Ending::Held) => {
                let p = progress_of(progress, cx.owner);
                // a renewal or release writes with the version it knows, and reads
                // first only after a conflict
                let default = match step {
                    Step::Renew => Some(Write::Renew),
                    Step::Release(_) => Some(Write::Clear),
                    _ => None,
                };
                let next = match p.next.take() {
                    Some(w) => Some(w),
                    None if mem::take(&mut p.reread) => None,
                    None => default,
                };
                match next {
                    Some(w) if w == Write::Create || p.lease.is_some() => {
                        p.sent = Sent::Write(w);
                        self.write(w, cx, p.lease.as_ref())
                    }
                    _ => {
                        p.sent = Sent::Get;
                        self.get(cx.name)
                    }
                }
            }
            // a cleanup's owner may not be the lock's current one: its progress is left
            // alone
            Step::Release(Ending::Cancel) => self.clear_if_owned(cx.name, cx.owner, true),
            Step::Cleanup => self.clear_if_owned(cx.name, cx.owner, false),
            Step::Wait { .. } => return Phrased::Nothing,
        };
        Phrased::One(RequestBody::Kubernetes(request))
    }

    fn read(
        &self,
        step: Step,
        cx: &StepCx<'_>,
        progress: &mut Progress,
        _shared: &mut super::Shared,
        reply: Result<&Reply, &str>,
    ) -> Result<Read, ReadError> {
        let text = payload(reply, "kubernetes", |r| match r {
            Reply::Kubernetes(v) => Some(v.as_str()),
            #[allow(unreachable_patterns)]
            _ => None,
        });
        if matches!(step, Step::Release(Ending::Cancel) | Step::Cleanup) {
            return read_clear_if_owned(text?);
        }
        let p = progress_of(progress, cx.owner);
        let text = match text {
            Ok(t) => t,
            Err(e) => {
                // the write may have landed: its version is unknown, so the next step
                // reads first (a renewal or release finds out through its 409)
                if step == Step::Acquire {
                    p.next = None;
                }
                return Err(e);
            }
        };
        match step {
            Step::Acquire => self.read_acquire(cx, p, text),
            Step::Renew => self.read_owned_write(Write::Renew, cx, p, text),
            _ => self.read_owned_write(Write::Clear, cx, p, text),
        }
    }

    fn late_may_hold(&self, step: Step, reply: Result<&Reply, &str>) -> bool {
        match (step, reply) {
            (Step::Release(_) | Step::Cleanup | Step::Wait { .. }, _) => false,
            (_, Ok(Reply::Kubernetes(text))) => match answer(text) {
                // held by someone: perhaps us (the cleanup is owner-checked)
                Ok(Answer::Lease(lease)) => !holder(&lease).is_empty(),
                // a refused write changed nothing
                Ok(Answer::Status(code, _)) => code == 429 || code >= 500,
                Err(_) => true,
            },
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_namespaces_follow_dns_1123() {
        for ok in ["a", "report", "my-app.leader", "0-9", &"a".repeat(63)] {
            assert!(dns_subdomain(ok), "{ok}");
        }
        for bad in [
            "",
            "A",
            "-a",
            "a-",
            "a..b",
            "a_b",
            "a/b",
            ".a",
            &"a".repeat(64),
        ] {
            assert!(!dns_subdomain(bad), "{bad}");
        }
        assert!(dns_subdomain(&["a"; 127].join(".")));
        assert!(!dns_subdomain(&["a"; 128].join(".")));
        assert!(dns_label("kube-system"));
        assert!(!dns_label("kube.system"));
    }

    #[test]
    fn replies_read_as_leases_or_statuses() {
        let status = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409}"#;
        assert!(matches!(answer(status), Ok(Answer::Status(409, r)) if r == "Conflict"));
        assert!(answer(r#"{"kind":"Status"}"#).is_err());
        assert!(answer(r#"{"kind":"Pod","metadata":{}}"#).is_err());
        assert!(answer("<html>").is_err());
        assert!(matches!(
            status_error(503, "ServiceUnavailable", ""),
            ReadError::Ambiguous(_)
        ));
        assert!(matches!(
            status_error(403, "Forbidden", ""),
            ReadError::Protocol(_)
        ));
    }

    fn cx_with<'a>(owner: &'a OwnerId, metadata: Option<&'a str>) -> StepCx<'a> {
        StepCx {
            name: "report",
            owner,
            ttl_ms: 10_000,
            metadata,
            ..crate::backends::LATE_CX
        }
    }

    #[test]
    fn a_grant_with_metadata_annotates_the_lease_and_inspection_reads_it_back() {
        let b = KubernetesBackend::default();
        let owner = OwnerId([0xab; 16]);
        let cx = cx_with(&owner, Some(r#"{"pid":"7","host":"a"}"#));
        let create = b.write(Write::Create, &cx, None);
        let body: Value = serde_json::from_str(create.body.as_deref().unwrap()).unwrap();
        let note = body["metadata"]["annotations"][KUBE_METADATA_ANNOTATION]
            .as_str()
            .unwrap();
        assert_eq!(
            note,
            format!(r#"{{"metadata":{{"host":"a","pid":"7"}},"owner":"{owner}"}}"#)
        );
        // the server's copy, as a GET returns it
        let mut stored = body.clone();
        stored["metadata"]["resourceVersion"] = json!("5");
        stored["spec"]["leaseTransitions"] = json!(3);
        let h = read_kube_inspect("report", &stored.to_string())
            .unwrap()
            .unwrap();
        assert_eq!(h.owner, Some(owner.to_string()));
        assert_eq!(h.token, Some(FencingToken(3)));
        assert_eq!(h.ttl_left, Some(core::time::Duration::from_secs(10)));
        assert_eq!(h.waiters, None);
        assert_eq!(h.metadata.unwrap()["pid"], "7");
        // a takeover without metadata drops the annotation; another holder never
        // shows this owner's metadata
        let other = OwnerId([0xcd; 16]);
        let take = b.write(Write::Take, &cx_with(&other, None), Some(&stored));
        let taken: Value = serde_json::from_str(take.body.as_deref().unwrap()).unwrap();
        assert!(taken["metadata"]["annotations"]
            .get(KUBE_METADATA_ANNOTATION)
            .is_none());
        let mut foreign = stored.clone();
        foreign["spec"]["holderIdentity"] = json!("pod-7");
        let h = read_kube_inspect("report", &foreign.to_string())
            .unwrap()
            .unwrap();
        assert_eq!((h.owner.as_deref(), h.metadata), (Some("pod-7"), None));
        // a grant without metadata on a Lease without the annotation sends no annotations
        let plain = b.write(Write::Create, &cx_with(&owner, None), None);
        assert!(!plain.body.unwrap().contains("annotations"));
        let mut free = stored;
        free["spec"]["holderIdentity"] = json!("");
        assert_eq!(read_kube_inspect("report", &free.to_string()), Ok(None));
        let missing = r#"{"kind":"Status","apiVersion":"v1","reason":"NotFound","code":404}"#;
        assert_eq!(read_kube_inspect("report", missing), Ok(None));
        let forbidden = r#"{"kind":"Status","apiVersion":"v1","reason":"Forbidden","code":403}"#;
        assert!(read_kube_inspect("report", forbidden).is_err());
    }

    #[test]
    fn a_listing_pages_with_limit_and_continue_and_keeps_the_prefix() {
        let b = KubernetesBackend::default();
        assert_eq!(
            b.list_page(2, None).path,
            "/apis/coordination.k8s.io/v1/namespaces/default/leases?limit=2"
        );
        assert!(b
            .list_page(2, Some("eyJ2Ijo=+/"))
            .path
            .ends_with("?limit=2&continue=eyJ2Ijo%3D%2B%2F"));
        let lease = |name: &str, holder: &str| {
            json!({"kind": "Lease", "metadata": {"name": name, "resourceVersion": "1"},
                   "spec": {"holderIdentity": holder, "leaseTransitions": 1, "leaseDurationSeconds": 5}})
        };
        let page = json!({"kind": "LeaseList", "metadata": {"continue": "abc"},
            "items": [lease("job-a", "x"), lease("job-b", ""), lease("other", "y")]});
        let (next, found) = read_kube_list("job", &page.to_string()).unwrap();
        assert_eq!(next.as_deref(), Some("abc"));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].name, "job-a");
        let last = json!({"kind": "LeaseList", "metadata": {}, "items": []});
        assert_eq!(read_kube_list("", &last.to_string()), Ok((None, vec![])));
        assert!(read_kube_list("", r#"{"kind":"Status","code":500}"#).is_err());
    }

    #[test]
    fn a_lease_reply_whose_metadata_is_no_object_is_a_protocol_error() {
        for reply in [
            r#"{"kind":"Lease","metadata":"r","spec":{}}"#,
            r#"{"kind":"Lease","metadata":[1],"spec":{}}"#,
            r#"{"kind":"Lease","spec":{}}"#,
            r#"["kind","Lease"]"#,
        ] {
            assert!(
                matches!(answer(reply), Err(ReadError::Protocol(_))),
                "{reply}"
            );
        }
    }
}
