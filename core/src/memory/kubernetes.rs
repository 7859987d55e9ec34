//! An in-memory Kubernetes API server for the simulator and the tests: the
//! `coordination.k8s.io/v1` Lease resource with injected time, every update a
//! compare-and-set on `metadata.resourceVersion`, answering each [`KubeRequest`] with
//! the response body the project's test server (`tests/kube/lease_server.py`) and the
//! real API server send: the stored Lease, or a `Status` document (404 `NotFound`, 409
//! `Conflict` / `AlreadyExists`, 422 `Invalid`, 400, 405, 415).
//!
//! Like the Lease API it keeps no expiry: a Lease lives until it is deleted, and
//! candidates judge a holder's expiry from their own observation of it
//! (`core/src/backends/kubernetes.rs`).

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::backends::kubernetes::{dns_label, dns_subdomain, KubeRequest};
use crate::Instant;

const GROUP: &str = "coordination.k8s.io";
const PREFIX: &str = "/apis/coordination.k8s.io/v1/namespaces/";

/// An in-memory API server holding Leases (one logical cluster).
#[derive(Clone, Debug, Default)]
pub struct MemoryKubernetes {
    /// The last `resourceVersion` handed out (etcd's revision in a real server: one
    /// counter for every object, sent as an opaque string).
    revision: u64,
    /// The stored Leases by namespace and name.
    leases: BTreeMap<(String, String), Value>,
    /// Objects created so far (their `uid`s count them).
    created: u64,
}

/// A `Status` document of the API server's shape ("Response Status Kind": kind
/// `Status`, status `Failure`, a machine-readable `reason`, the HTTP `code` repeated,
/// details naming the Lease when there is one), as JSON text.
pub fn kube_status(code: u16, reason: &str, message: &str, name: &str) -> String {
    status(code, reason, message, name, "leases", None).to_string()
}

fn status(
    code: u16,
    reason: &str,
    message: &str,
    name: &str,
    kind: &str,
    causes: Option<Value>,
) -> Value {
    let mut details = Map::new();
    if !name.is_empty() {
        details.insert("name".into(), json!(name));
        details.insert("group".into(), json!(GROUP));
        details.insert("kind".into(), json!(kind));
    }
    if let Some(causes) = causes {
        details.insert("causes".into(), causes);
    }
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "details": details, "code": code,
    })
}

fn not_found(name: &str) -> Value {
    let message = format!("leases.{GROUP} \"{name}\" not found");
    status(404, "NotFound", &message, name, "leases", None)
}

fn conflict(name: &str) -> Value {
    let message = format!(
        "Operation cannot be fulfilled on leases.{GROUP} \"{name}\": the object has been \
         modified; please apply your changes to the latest version and try again"
    );
    status(409, "Conflict", &message, name, "leases", None)
}

fn bad_request(message: &str) -> Value {
    status(400, "BadRequest", message, "", "leases", None)
}

fn invalid(name: &str, field: &str, value: &Value, detail: &str) -> Value {
    let cause = format!("Invalid value: {value}: {detail}");
    let message = format!("Lease.{GROUP} \"{name}\" is invalid: {field}: {cause}");
    let causes = json!([{"reason": "FieldValueInvalid", "message": cause, "field": field}]);
    status(422, "Invalid", &message, name, "Lease", Some(causes))
}

fn method_not_allowed() -> Value {
    status(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        "",
        "leases",
        None,
    )
}

/// `now` as a wall-clock `MicroTime` (RFC 3339 UTC, six fractional digits), the
/// injected time counted from the Unix epoch: what a host adapter stamps into the
/// fields a request lists in [`KubeRequest::stamp`].
pub fn micro_time(now: Instant) -> String {
    let nanos = now.as_nanos();
    let secs = nanos / 1_000_000_000;
    let micros = (nanos % 1_000_000_000) / 1_000;
    format!("{}.{micros:06}Z", civil(secs))
}

/// Seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SS` (UTC), by Howard Hinnant's
/// `civil_from_days`.
fn civil(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

/// Whether `v` is an `int32` in `min..2^31`.
fn int32_from(v: &Value, min: i64) -> bool {
    v.as_i64().is_some_and(|n| n >= min && n < 1 << 31)
}

impl MemoryKubernetes {
    /// An empty cluster.
    pub fn new() -> Self {
        MemoryKubernetes::default()
    }

    /// The stored Lease `name` in `namespace`, as the API server would return it.
    pub fn lease(&self, namespace: &str, name: &str) -> Option<&Value> {
        self.leases.get(&(namespace.to_owned(), name.to_owned()))
    }

    /// Deletes Lease `name` (what `kubectl delete lease` does). Whether it existed.
    pub fn delete(&mut self, namespace: &str, name: &str) -> bool {
        let gone = (self.leases)
            .remove(&(namespace.to_owned(), name.to_owned()))
            .is_some();
        if gone {
            self.revision += 1;
        }
        gone
    }

    /// Runs `req` at `now` and returns the response body the API server sends (the
    /// HTTP status is the `code` of a `Status`, 200 or 201 for a Lease). The fields
    /// `req.stamp` names are set to [`micro_time`]`(now)` first, as the host adapter
    /// does with its wall clock just before sending.
    pub fn call(&mut self, now: Instant, req: &KubeRequest) -> String {
        match self.handle(now, req) {
            Ok(v) | Err(v) => v.to_string(),
        }
    }

    fn handle(&mut self, now: Instant, req: &KubeRequest) -> Result<Value, Value> {
        let mut body = match req.body.as_deref() {
            None | Some("") => Value::Null,
            Some(text) => serde_json::from_str(text)
                .map_err(|_| bad_request("the body of the request could not be decoded as JSON"))?,
        };
        if !req.stamp.is_empty() && body.is_object() {
            let wall = micro_time(now);
            if !body.get("spec").is_some_and(Value::is_object) {
                body["spec"] = json!({});
            }
            for field in &req.stamp {
                body["spec"][field.as_str()] = json!(wall);
            }
        }
        let path = req.path.split('?').next().unwrap_or_default();
        let not_served = || {
            status(
                404,
                "NotFound",
                "the server could not find the requested resource",
                "",
                "leases",
                None,
            )
        };
        let rest: Vec<&str> = path
            .strip_prefix(PREFIX)
            .ok_or_else(not_served)?
            .split('/')
            .collect();
        let (ns, name) = match rest.as_slice() {
            [ns, "leases"] => (*ns, None),
            [ns, "leases", name] if !name.is_empty() => (*ns, Some(*name)),
            _ => return Err(not_served()),
        };
        if !dns_label(ns) {
            return Err(bad_request(&format!("invalid namespace {ns:?}")));
        }
        let Some(name) = name else {
            return match req.method.as_str() {
                "GET" => Ok(self.list(ns)),
                "POST" => self.create(now, ns, body),
                _ => Err(method_not_allowed()),
            };
        };
        let key = (ns.to_owned(), name.to_owned());
        let old = self.leases.get(&key).cloned();
        match (req.method.as_str(), old) {
            ("GET" | "PUT" | "PATCH" | "DELETE", None) => Err(not_found(name)),
            ("GET", Some(old)) => Ok(old),
            ("PUT", Some(old)) => {
                let obj = validate(ns, name, body)?;
                if obj.pointer("/metadata/name").and_then(Value::as_str) != Some(name) {
                    return Err(bad_request(&format!(
                        "the name of the object ({}) does not match the name on the URL ({name})",
                        obj.pointer("/metadata/name").unwrap_or(&Value::Null)
                    )));
                }
                // with a resourceVersion an update is a compare-and-set; without, it is
                // unconditional (Leases allow unconditional updates)
                let rv = obj
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .filter(|rv| !rv.is_empty());
                if rv.is_some_and(|rv| Some(rv) != resource_version(&old)) {
                    return Err(conflict(name));
                }
                Ok(self.store(now, ns, obj, Some(&old)))
            }
            ("PATCH", Some(old)) => {
                if req.content_type != "application/json-patch+json" {
                    return Err(status(
                        415,
                        "UnsupportedMediaType",
                        &format!(
                            "the body of the request was in an unknown format: {}",
                            req.content_type
                        ),
                        "",
                        "leases",
                        None,
                    ));
                }
                let patched = json_patch(&old, &body)?;
                let obj = validate(ns, name, patched)?;
                Ok(self.store(now, ns, obj, Some(&old)))
            }
            ("DELETE", Some(old)) => {
                let pre = body.pointer("/preconditions/resourceVersion");
                if pre
                    .and_then(Value::as_str)
                    .is_some_and(|rv| Some(rv) != resource_version(&old))
                {
                    return Err(conflict(name));
                }
                self.delete(ns, name);
                Ok(json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                    "details": {"name": name, "group": GROUP, "kind": "leases",
                                "uid": old.pointer("/metadata/uid").cloned().unwrap_or(Value::Null)},
                }))
            }
            _ => Err(method_not_allowed()),
        }
    }

    fn list(&self, ns: &str) -> Value {
        let items: Vec<&Value> = (self.leases.iter())
            .filter(|((n, _), _)| n == ns)
            .map(|(_, v)| v)
            .collect();
        json!({
            "kind": "LeaseList", "apiVersion": format!("{GROUP}/v1"),
            "metadata": {"resourceVersion": self.revision.to_string()},
            "items": items,
        })
    }

    fn create(&mut self, now: Instant, ns: &str, body: Value) -> Result<Value, Value> {
        let obj = validate(ns, "", body)?;
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if self.leases.contains_key(&(ns.to_owned(), name.clone())) {
            let message = format!("leases.{GROUP} \"{name}\" already exists");
            return Err(status(
                409,
                "AlreadyExists",
                &message,
                &name,
                "leases",
                None,
            ));
        }
        if resource_version(&obj).is_some_and(|rv| !rv.is_empty()) {
            return Err(bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        Ok(self.store(now, ns, obj, None))
    }

    /// Stores `obj` with the next `resourceVersion`, keeping the `uid` and
    /// `creationTimestamp` of the object it replaces.
    fn store(&mut self, now: Instant, ns: &str, obj: Value, old: Option<&Value>) -> Value {
        self.revision += 1;
        // `validate` let only an object with an object `metadata` through
        let mut meta = obj.get("metadata").cloned().unwrap_or_else(|| json!({}));
        let name = meta
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        meta["namespace"] = json!(ns);
        meta["resourceVersion"] = json!(self.revision.to_string());
        match old {
            Some(old) => {
                meta["uid"] = old.pointer("/metadata/uid").cloned().unwrap_or_default();
                meta["creationTimestamp"] = old
                    .pointer("/metadata/creationTimestamp")
                    .cloned()
                    .unwrap_or_default();
            }
            None => {
                self.created += 1;
                // a version-4-shaped uid, deterministic (the simulator replays by seed)
                meta["uid"] = json!(format!("00000000-0000-4000-8000-{:012x}", self.created));
                meta["creationTimestamp"] =
                    json!(format!("{}Z", civil(now.as_nanos() / 1_000_000_000)));
            }
        }
        let spec = obj.get("spec").cloned().unwrap_or_else(|| json!({}));
        let stored = json!({
            "kind": "Lease", "apiVersion": format!("{GROUP}/v1"), "metadata": meta, "spec": spec,
        });
        self.leases.insert((ns.to_owned(), name), stored.clone());
        stored
    }
}

fn resource_version(lease: &Value) -> Option<&str> {
    lease
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
}

/// The Lease validation of the API server (and `tests/kube/lease_server.py`): a
/// `coordination.k8s.io/v1` Lease in the URL's namespace with a DNS-1123 subdomain
/// name, `int32` durations above 0 and transitions from 0, a string holder, and
/// `MicroTime` strings for the times.
fn validate(ns: &str, name: &str, obj: Value) -> Result<Value, Value> {
    if !obj.is_object() {
        return Err(bad_request("the body of the request was not a Lease"));
    }
    let kind_ok = obj.get("kind").is_none_or(|k| k == "Lease");
    let api_ok = (obj.get("apiVersion")).is_none_or(|a| *a == json!(format!("{GROUP}/v1")));
    if !kind_ok || !api_ok {
        return Err(bad_request(&format!(
            "the object is not a {GROUP}/v1 Lease"
        )));
    }
    let Some(meta) = obj.get("metadata").filter(|m| m.is_object()) else {
        return Err(invalid(
            name,
            "metadata.name",
            &Value::Null,
            "name or generateName is required",
        ));
    };
    if meta.get("namespace").is_some_and(|n| n != ns) {
        return Err(bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let object_name = meta.get("name").cloned().unwrap_or(Value::Null);
    if !object_name.as_str().is_some_and(dns_subdomain) {
        return Err(invalid(
            name,
            "metadata.name",
            &object_name,
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
             characters, '-' or '.', and must start and end with an alphanumeric character",
        ));
    }
    let spec = obj.get("spec").cloned().unwrap_or_else(|| json!({}));
    if !spec.is_object() {
        return Err(bad_request("spec must be an object"));
    }
    if let Some(d) = spec.get("leaseDurationSeconds").filter(|d| !d.is_null()) {
        if !int32_from(d, 1) {
            return Err(invalid(
                name,
                "spec.leaseDurationSeconds",
                d,
                "must be greater than 0",
            ));
        }
    }
    if let Some(t) = spec.get("leaseTransitions").filter(|t| !t.is_null()) {
        if !int32_from(t, 0) {
            return Err(invalid(
                name,
                "spec.leaseTransitions",
                t,
                "must be greater than or equal to 0",
            ));
        }
    }
    if spec
        .get("holderIdentity")
        .is_some_and(|h| !h.is_null() && !h.is_string())
    {
        return Err(bad_request("spec.holderIdentity must be a string"));
    }
    for f in ["acquireTime", "renewTime"] {
        if let Some(v) = spec.get(f).filter(|v| !v.is_null()) {
            if !v.as_str().is_some_and(micro_time_ok) {
                return Err(bad_request(&format!(
                    "spec.{f}: parsing time {v} as RFC 3339 failed"
                )));
            }
        }
    }
    Ok(obj)
}

/// Whether `s` reads as a `MicroTime`: `YYYY-MM-DDTHH:MM:SS`, optionally 1–9
/// fractional digits, then `Z` or an offset `±HH:MM`.
fn micro_time_ok(s: &str) -> bool {
    let b = s.as_bytes();
    let digits =
        |r: core::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let fixed = b.len() >= 19
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    if !fixed {
        return false;
    }
    let mut i = 19;
    if b.get(i) == Some(&b'.') {
        let n = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if !(1..=9).contains(&n) {
            return false;
        }
        i += 1 + n;
    }
    match &b[i..] {
        [b'Z'] => true,
        [s, h1, h2, b':', m1, m2] if *s == b'+' || *s == b'-' => {
            [h1, h2, m1, m2].iter().all(|c| c.is_ascii_digit())
        }
        _ => false,
    }
}

/// RFC 6902 `test`, `replace`, `add` and `remove` on object members, as
/// `tests/kube/lease_server.py` applies them: a failed `test`, a missing path or an
/// operation it does not know leaves the object unchanged and is answered 422
/// `Invalid`, as the API server answers a JSON Patch it cannot apply.
fn json_patch(obj: &Value, patch: &Value) -> Result<Value, Value> {
    let rejected = |why: &str| {
        status(
            422,
            "Invalid",
            &format!("the server rejected our request due to an error in our request: {why}"),
            "",
            "leases",
            None,
        )
    };
    let Some(ops) = patch.as_array() else {
        return Err(bad_request("a JSON Patch must be a list of operations"));
    };
    let mut doc = obj.clone();
    for op in ops {
        let (Some(kind), Some(path)) = (
            op.get("op").and_then(Value::as_str),
            op.get("path").and_then(Value::as_str),
        ) else {
            return Err(rejected("an operation needs \"op\" and \"path\""));
        };
        let Some((parent, key)) = path.rsplit_once('/') else {
            return Err(rejected(&format!("invalid path {path:?}")));
        };
        let key = key.replace("~1", "/").replace("~0", "~");
        let Some(parent) = (if parent.is_empty() {
            Some(&mut doc)
        } else {
            doc.pointer_mut(parent)
        })
        .and_then(Value::as_object_mut) else {
            return Err(rejected(&format!("no object at {parent:?}")));
        };
        match kind {
            "test" => {
                if parent.get(&key) != op.get("value") {
                    return Err(rejected(&format!(
                        "testing value {path} failed: test failed"
                    )));
                }
            }
            "replace" | "remove" if !parent.contains_key(&key) => {
                return Err(rejected(&format!("no member at {path:?}")));
            }
            "replace" | "add" => {
                parent.insert(key, op.get("value").cloned().unwrap_or(Value::Null));
            }
            "remove" => {
                parent.remove(&key);
            }
            other => {
                return Err(rejected(&format!(
                    "unsupported JSON Patch operation {other:?}"
                )))
            }
        }
    }
    Ok(doc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::KubernetesBackend;

    const PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases/r";

    fn t(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    fn req(method: &str, path: &str, body: Option<Value>, stamp: &[&str]) -> KubeRequest {
        KubeRequest {
            method: method.into(),
            path: path.into(),
            body: body.map(|b| b.to_string()),
            content_type: if method == "PATCH" {
                "application/json-patch+json".into()
            } else {
                "application/json".into()
            },
            stamp: stamp.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn call(k: &mut MemoryKubernetes, ms: u64, r: &KubeRequest) -> Value {
        serde_json::from_str(&k.call(t(ms), r)).unwrap()
    }

    fn lease(holder: &str, transitions: i64) -> Value {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "r", "namespace": "default"},
               "spec": {"holderIdentity": holder, "leaseDurationSeconds": 1,
                        "leaseTransitions": transitions}})
    }

    #[test]
    fn leases_are_created_read_and_updated_under_resource_version_cas() {
        let mut k = MemoryKubernetes::new();
        let collection = KubernetesBackend::default().collection_path();
        let got = call(&mut k, 0, &req("GET", PATH, None, &[]));
        assert_eq!(
            (
                got["kind"].clone(),
                got["code"].clone(),
                got["reason"].clone()
            ),
            (json!("Status"), json!(404), json!("NotFound"))
        );
        assert_eq!(got["message"], "leases.coordination.k8s.io \"r\" not found");
        let create = req(
            "POST",
            &collection,
            Some(lease("a", 1)),
            &["acquireTime", "renewTime"],
        );
        let made = call(&mut k, 1_500, &create);
        assert_eq!(made["kind"], "Lease");
        assert_eq!(made["metadata"]["resourceVersion"], "1");
        assert_eq!(
            made["metadata"]["creationTimestamp"],
            "1970-01-01T00:00:01Z"
        );
        assert_eq!(made["spec"]["renewTime"], "1970-01-01T00:00:01.500000Z");
        assert_eq!(made["spec"]["holderIdentity"], "a");
        let again = call(&mut k, 2_000, &create);
        assert_eq!(
            (again["code"].clone(), again["reason"].clone()),
            (json!(409), json!("AlreadyExists"))
        );
        assert_eq!(call(&mut k, 2_000, &req("GET", PATH, None, &[])), made);
        // an update with the stored version lands, one with an old version is a conflict
        let mut take = made.clone();
        take["spec"] = lease("b", 2)["spec"].clone();
        let taken = call(
            &mut k,
            3_000,
            &req("PUT", PATH, Some(take.clone()), &["renewTime"]),
        );
        assert_eq!(taken["metadata"]["resourceVersion"], "2");
        assert_eq!(taken["metadata"]["uid"], made["metadata"]["uid"]);
        assert_eq!(taken["spec"]["leaseTransitions"], 2);
        let stale = call(&mut k, 3_001, &req("PUT", PATH, Some(take), &[]));
        assert_eq!(
            (stale["code"].clone(), stale["reason"].clone()),
            (json!(409), json!("Conflict"))
        );
        assert_eq!(k.lease("default", "r"), Some(&taken));
        // no expiry: the Lease is still there, unchanged, long after its duration
        assert_eq!(call(&mut k, 3_600_000, &req("GET", PATH, None, &[])), taken);
        let list = call(&mut k, 0, &req("GET", &collection, None, &[]));
        assert_eq!(list["items"], json!([taken]));
        assert_eq!(list["metadata"]["resourceVersion"], "2");
    }

    #[test]
    fn a_json_patch_test_guards_the_holder_and_a_failed_one_is_422() {
        let mut k = MemoryKubernetes::new();
        let collection = KubernetesBackend::default().collection_path();
        call(
            &mut k,
            0,
            &req("POST", &collection, Some(lease("a", 1)), &[]),
        );
        let clear = |who: &str| {
            json!([{"op": "test", "path": "/spec/holderIdentity", "value": who},
                   {"op": "replace", "path": "/spec/holderIdentity", "value": ""},
                   {"op": "replace", "path": "/spec/leaseDurationSeconds", "value": 1}])
        };
        let refused = call(&mut k, 1, &req("PATCH", PATH, Some(clear("b")), &[]));
        assert_eq!(
            (refused["code"].clone(), refused["reason"].clone()),
            (json!(422), json!("Invalid"))
        );
        assert_eq!(
            k.lease("default", "r").unwrap()["metadata"]["resourceVersion"],
            "1"
        );
        let cleared = call(&mut k, 2, &req("PATCH", PATH, Some(clear("a")), &[]));
        assert_eq!(cleared["spec"]["holderIdentity"], "");
        assert_eq!(cleared["metadata"]["resourceVersion"], "2");
        let mut wrong = req("PATCH", PATH, Some(clear("")), &[]);
        wrong.content_type = "application/json".into();
        assert_eq!(call(&mut k, 3, &wrong)["code"], 415);
        assert_eq!(
            call(
                &mut k,
                3,
                &req("PATCH", &format!("{PATH}x"), Some(clear("")), &[])
            )["code"],
            404
        );
    }

    #[test]
    fn invalid_leases_are_refused_as_the_api_server_refuses_them() {
        let mut k = MemoryKubernetes::new();
        let collection = KubernetesBackend::default().collection_path();
        let mut bad = lease("a", 1);
        bad["spec"]["leaseDurationSeconds"] = json!(0);
        let r = call(&mut k, 0, &req("POST", &collection, Some(bad), &[]));
        assert_eq!(
            (r["code"].clone(), r["reason"].clone()),
            (json!(422), json!("Invalid"))
        );
        assert_eq!(
            r["details"]["causes"][0]["field"],
            "spec.leaseDurationSeconds"
        );
        let mut bad = lease("a", -1);
        bad["metadata"]["name"] = json!("R");
        assert_eq!(
            call(&mut k, 0, &req("POST", &collection, Some(bad), &[]))["details"]["causes"][0]
                ["field"],
            "metadata.name"
        );
        let mut other_ns = lease("a", 1);
        other_ns["metadata"]["namespace"] = json!("kube-system");
        assert_eq!(
            call(&mut k, 0, &req("POST", &collection, Some(other_ns), &[]))["code"],
            400
        );
        let mut versioned = lease("a", 1);
        versioned["metadata"]["resourceVersion"] = json!("7");
        assert_eq!(
            call(&mut k, 0, &req("POST", &collection, Some(versioned), &[]))["code"],
            400
        );
        assert_eq!(
            call(&mut k, 0, &req("PUT", PATH, Some(lease("a", 1)), &[]))["code"],
            404
        );
        assert_eq!(
            call(&mut k, 0, &req("POST", PATH, Some(lease("a", 1)), &[]))["code"],
            405
        );
        assert_eq!(
            call(&mut k, 0, &req("GET", "/api/v1/pods", None, &[]))["code"],
            404
        );
        assert!(k.lease("default", "r").is_none());
    }

    #[test]
    fn micro_times_are_rfc_3339_utc_with_six_digits() {
        assert_eq!(micro_time(Instant::ZERO), "1970-01-01T00:00:00.000000Z");
        // 2026-12-01T16:02:29.123456Z is 1,796,140,949 s after the epoch
        let at = Instant::from_nanos(1_796_140_949_123_456_789);
        assert_eq!(micro_time(at), "2026-12-01T16:02:29.123456Z");
        assert!(micro_time_ok("2026-12-01T16:02:29Z"));
        assert!(micro_time_ok("2026-12-01T16:02:29.1+01:00"));
        assert!(!micro_time_ok("2026-12-01 16:02:29Z"));
        assert!(!micro_time_ok("2026-12-01T16:02:29."));
    }

    #[test]
    fn a_lease_body_whose_metadata_or_spec_is_no_object_is_refused() {
        let mut k = MemoryKubernetes::new();
        let collection = KubernetesBackend::default().collection_path();
        let made = call(
            &mut k,
            0,
            &req("POST", &collection, Some(lease("a", 1)), &[]),
        );
        assert_eq!(made["kind"], "Lease");
        let mut bad_meta = lease("b", 2);
        bad_meta["metadata"] = json!("r");
        let mut bad_spec = lease("b", 2);
        bad_spec["spec"] = json!([1]);
        for body in [bad_meta, bad_spec, json!([1]), json!("lease")] {
            for (method, path) in [("POST", collection.as_str()), ("PUT", PATH)] {
                let got = call(&mut k, 10, &req(method, path, Some(body.clone()), &[]));
                assert_eq!(got["kind"], "Status", "{method} {body}");
                assert!(
                    got["code"] == 400 || got["code"] == 422,
                    "{method} {body}: {got}"
                );
            }
        }
    }
}
