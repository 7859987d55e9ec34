//! Replays the cross-language scenario vectors `tests/scenarios/*.json` through the
//! machine. The format, the reply shorthand and the matching rules are in
//! `tests/scenarios/README.md`; the Python (and later Node and WASM) runners mirror this
//! file, so it stays small: read a vector, turn each step into an [`Input`], render what
//! the machine says in the vector's vocabulary, match it against the expectation.
//!
//! Only the public API is used: `Machine::with_seed`, `handle_input`, `poll_output`.
//!
//! etcd vectors live in `tests/scenarios/etcd/` (the JavaScript runner replays them too,
//! the Python runner not yet): requests render as the core's `EtcdRequest` serde form
//! under `"etcd"`, replies are the JSON gateway's documents (README: "etcd vectors").
//! Redlock vectors live in `tests/scenarios/redlock/`: requests carry the `master` they
//! go to (README: "Redlock vectors").

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use fencepost_core::{
    AcquireFailedReason, Event, Instant, LockId, Machine, Output, RedisValue, RequestBody,
    UsageError,
};
use serde_json::{json, Value};

mod vectors;
use vectors::*;

/// The suite must not shrink silently.
const MIN_VECTORS: usize = 25;

// ---- machine → JSON ------------------------------------------------------------------

/// Nanoseconds as a millisecond JSON number (an integer when whole).
fn ns_to_ms(ns: u64) -> Value {
    if ns % 1_000_000 == 0 {
        json!(ns / 1_000_000)
    } else {
        json!(ns as f64 / 1e6)
    }
}

/// The serde name of a unit-like enum value (`"acquire"`, `"renew"`, …).
fn serde_name<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("serializable")
}

fn render_usage_error(e: &UsageError) -> Value {
    let mut out = json!({ "kind": serde_json::to_value(e).expect("serializable")["kind"] });
    if let UsageError::InvalidOption { option, .. } = e {
        out["option"] = json!(option);
    }
    json!({ "usage_error": out })
}

fn render_event(lock: LockId, event: &Event) -> Value {
    let mut e = json!({ "lock": lock.0 });
    match event {
        Event::Acquired {
            token,
            valid_until,
            previous,
        } => {
            e["type"] = json!("acquired");
            e["token"] = json!(token.get());
            e["valid_until_ms"] = ns_to_ms(valid_until.as_nanos());
            e["previous"] = json!(previous.as_str());
        }
        Event::Renewed { valid_until } => {
            e["type"] = json!("renewed");
            e["valid_until_ms"] = ns_to_ms(valid_until.as_nanos());
        }
        Event::Lost { reason } => {
            e["type"] = json!("lost");
            e["reason"] = serde_name(reason)["kind"].clone();
        }
        Event::Released => e["type"] = json!("released"),
        Event::AcquireFailed { reason } => {
            e["type"] = json!("acquire_failed");
            match reason {
                AcquireFailedReason::Timeout { last_error } => {
                    e["reason"] = json!("timeout");
                    e["last_error"] = json!(last_error);
                }
                AcquireFailedReason::Protocol { error } => {
                    e["reason"] = json!("protocol");
                    e["error"] = json!(error.message);
                }
            }
        }
    }
    json!({ "event": e })
}

fn render(output: &Output) -> Value {
    match output {
        Output::Request(r) => {
            if let RequestBody::RedisBlpop(b) = &r.body {
                // fair hand-off: a blocking pop (README: `wait_key` / `wait_timeout_ms`)
                return json!({ "request": {
                    "id": r.id.0,
                    "lock": r.lock.0,
                    "operation": serde_name(&r.operation),
                    "deadline_ms": ns_to_ms(r.deadline.as_nanos()),
                    "wait_key": b.key,
                    "wait_timeout_ms": b.timeout_ms,
                }});
            }
            if let RequestBody::Etcd(call) = &r.body {
                // etcd: the core's `EtcdRequest` serde form; a watch's timeout also as
                // `wait_timeout_ms`
                let mut out = json!({
                    "id": r.id.0,
                    "lock": r.lock.0,
                    "operation": serde_name(&r.operation),
                    "deadline_ms": ns_to_ms(r.deadline.as_nanos()),
                    "etcd": serde_json::to_value(call).expect("serializable"),
                });
                if let Some(ms) = call.watch_timeout_ms() {
                    out["wait_timeout_ms"] = json!(ms);
                }
                return json!({ "request": out });
            }
            if let RequestBody::ZooKeeper(call) = &r.body {
                // ZooKeeper: the core's `ZkRequest` serde form; a watch's timeout also as
                // `wait_timeout_ms`
                let mut out = json!({
                    "id": r.id.0,
                    "lock": r.lock.0,
                    "operation": serde_name(&r.operation),
                    "deadline_ms": ns_to_ms(r.deadline.as_nanos()),
                    "zookeeper": serde_json::to_value(call).expect("serializable"),
                });
                if let Some(ms) = call.watch_timeout_ms() {
                    out["wait_timeout_ms"] = json!(ms);
                }
                return json!({ "request": out });
            }
            if let RequestBody::Kubernetes(call) = &r.body {
                // Kubernetes: the core's `KubeRequest` serde form, its body parsed so a
                // vector spells it as JSON
                let mut call = serde_json::to_value(call).expect("serializable");
                if let Some(body) = call["body"].as_str() {
                    call["body"] = serde_json::from_str(body).expect("a JSON body");
                }
                return json!({ "request": {
                    "id": r.id.0,
                    "lock": r.lock.0,
                    "operation": serde_name(&r.operation),
                    "deadline_ms": ns_to_ms(r.deadline.as_nanos()),
                    "kubernetes": call,
                }});
            }
            if let RequestBody::RedlockPart(part) = &r.body {
                // Redlock: one master's script call, with the master it goes to
                let cmd = &part.command;
                return json!({ "request": {
                    "id": r.id.0,
                    "lock": r.lock.0,
                    "operation": serde_name(&r.operation),
                    "deadline_ms": ns_to_ms(r.deadline.as_nanos()),
                    "master": part.master,
                    "script": serde_name(&cmd.script),
                    "keys": cmd.keys,
                    "args": cmd.args,
                }});
            }
            let RequestBody::Redis(cmd) = &r.body else {
                panic!(
                    "scenario vectors cover the Redis backend only, got {:?}",
                    r.body
                )
            };
            let mut request = json!({
                "id": r.id.0,
                "lock": r.lock.0,
                "operation": serde_name(&r.operation),
                "deadline_ms": ns_to_ms(r.deadline.as_nanos()),
                "script": serde_name(&cmd.script),
                "keys": cmd.keys,
                "args": cmd.args,
            });
            if let Some(w) = cmd.wait {
                request["wait"] = json!({ "replicas": w.replicas, "timeout_ms": w.timeout_ms });
            }
            json!({ "request": request })
        }
        Output::Event { lock, event } => render_event(*lock, event),
        Output::Timeout(at) => json!({ "next_timeout_ms": ns_to_ms(at.as_nanos()) }),
        Output::Idle => json!({ "idle": true }),
    }
}

// ---- matching ------------------------------------------------------------------------

/// Keys an expectation may leave out (then they are not checked).
/// Keys a vector may leave out (then they are not checked): `previous` came after
/// most vectors were written.
const OPTIONAL_KEYS: [&str; 3] = ["last_error", "error", "previous"];

/// Owner-id placeholders: `"$name"` binds to the first value it meets; a name always
/// means the same value and two names never mean the same value.
#[derive(Clone, Default)]
struct Owners {
    by_name: HashMap<String, String>,
}

impl Owners {
    fn check(&mut self, name: &str, actual: &str) -> bool {
        let is_owner_id = actual.len() == 32
            && actual
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !is_owner_id {
            return false;
        }
        if let Some(bound) = self.by_name.get(name) {
            return bound == actual;
        }
        if self.by_name.values().any(|v| v == actual) {
            return false; // that owner id already has another name
        }
        self.by_name.insert(name.to_owned(), actual.to_owned());
        true
    }

    /// For messages: show bound owner ids by their names.
    fn disguise(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => match self.by_name.iter().find(|(_, hex)| *hex == s) {
                Some((name, _)) => json!(name),
                None => v.clone(),
            },
            Value::Array(a) => Value::Array(a.iter().map(|x| self.disguise(x)).collect()),
            Value::Object(o) => Value::Object(
                o.iter()
                    .map(|(k, x)| (k.clone(), self.disguise(x)))
                    .collect(),
            ),
            _ => v.clone(),
        }
    }
}

fn matches(key: &str, expected: &Value, actual: &Value, owners: &mut Owners) -> bool {
    match (expected, actual) {
        // times: at nanosecond precision, or within an inclusive range
        (Value::Object(range), Value::Number(a)) if key.ends_with("_ms") => {
            let ns = |k: &str| range.get(k).and_then(Value::as_f64).map(ms_to_ns);
            let a = ms_to_ns(a.as_f64().unwrap_or(f64::NAN));
            range.keys().all(|k| k == "at_least" || k == "at_most")
                && ns("at_least").is_none_or(|lo| lo <= a)
                && ns("at_most").is_none_or(|hi| a <= hi)
        }
        (Value::Number(e), Value::Number(a)) if key.ends_with("_ms") => {
            e.as_f64().map(ms_to_ns) == a.as_f64().map(ms_to_ns)
        }
        (Value::String(e), Value::String(a)) if e.starts_with('$') => owners.check(e, a),
        (Value::String(e), Value::String(a)) if OPTIONAL_KEYS.contains(&key) => a.contains(e),
        (Value::Array(e), Value::Array(a)) => {
            e.len() == a.len() && e.iter().zip(a).all(|(e, a)| matches(key, e, a, owners))
        }
        (Value::Object(e), Value::Object(a)) => {
            e.keys()
                .all(|k| a.contains_key(k) || OPTIONAL_KEYS.contains(&k.as_str()))
                && a.keys()
                    .all(|k| e.contains_key(k) || OPTIONAL_KEYS.contains(&k.as_str()))
                && e.iter().all(|(k, ev)| match a.get(k) {
                    Some(av) => matches(k, ev, av, owners),
                    None => false,
                })
        }
        _ => expected == actual,
    }
}

// ---- replay --------------------------------------------------------------------------

/// The repository root (this crate lives in `core/`).
fn repo_root() -> &'static Path {
    let core = Path::new(env!("CARGO_MANIFEST_DIR"));
    core.parent().unwrap_or(core)
}

fn scenario_dir() -> PathBuf {
    repo_root().join("tests/scenarios")
}

fn vectors_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

/// Replays one vector; `Err` carries a readable account of the first failing step.
fn replay(path: &Path) -> Result<usize, String> {
    let file = path.strip_prefix(repo_root()).unwrap_or(path).display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{file}: {e}"))?;
    let scenario: Scenario =
        serde_json::from_str(&text).map_err(|e| format!("{file}: not a scenario: {e}"))?;
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    if scenario.name != stem {
        return Err(format!(
            "{file}: name {:?} differs from the file name",
            scenario.name
        ));
    }
    if scenario.rules.is_empty() {
        return Err(format!("{file}: say which rules it covers in \"rules\""));
    }
    let backend = scenario.backend.clone().unwrap_or_default();
    let replies = replies_for(&backend);
    let mut machine = Machine::with_seed(backend, scenario.seed);
    let mut owners = Owners::default();
    for (index, step) in scenario.steps.iter().enumerate() {
        let now = Instant::from_nanos(ms_to_ns(step.at_ms));
        let input = to_input(&step.input, now, &scenario.options, replies)
            .map_err(|e| format!("{file}: step {index}: {e}"))?;
        let mut actual = Vec::new();
        if let Err(e) = machine.handle_input(input) {
            actual.push(render_usage_error(&e));
        }
        loop {
            let output = machine.poll_output();
            actual.push(render(&output));
            if matches!(output, Output::Timeout(_) | Output::Idle) {
                break;
            }
        }
        let expected = Value::Array(step.expect.clone());
        let actual = Value::Array(actual);
        if !matches("", &expected, &actual, &mut owners) {
            return Err(mismatch(
                &format!("{file} ({})", scenario.name),
                index,
                step,
                &expected,
                &actual,
                &owners,
            ));
        }
    }
    Ok(scenario.steps.len())
}

fn mismatch(
    file: &str,
    index: usize,
    step: &Step,
    expected: &Value,
    actual: &Value,
    owners: &Owners,
) -> String {
    let empty = Vec::new();
    let expected = expected.as_array().unwrap_or(&empty);
    let actual = actual.as_array().unwrap_or(&empty);
    let mut out = format!(
        "{file}\n  step {index} at {} ms, input {}\n",
        step.at_ms,
        show(&input_json(&step.input))
    );
    let mut trial = owners.clone();
    for i in 0..expected.len().max(actual.len()) {
        let (e, a) = (expected.get(i), actual.get(i));
        let same = matches!((e, a), (Some(e), Some(a)) if matches("", e, a, &mut trial));
        let shown =
            |v: Option<&Value>| v.map_or("(nothing)".to_owned(), |v| show(&owners.disguise(v)));
        if same {
            let _ = writeln!(out, "      [{i}] {}", shown(e));
        } else {
            let _ = writeln!(out, "  >>> [{i}] expected {}", shown(e));
            let _ = writeln!(out, "  >>> [{i}] actual   {}", shown(a));
        }
    }
    let mut names: Vec<_> = owners.by_name.iter().collect();
    names.sort();
    let _ = writeln!(out, "  owner ids so far: {names:?}");
    out
}

/// Compact JSON with keys in the README's order, for messages.
fn show(v: &Value) -> String {
    const ORDER: [&str; 21] = [
        "type",
        "request",
        "event",
        "id",
        "lock",
        "name",
        "operation",
        "deadline_ms",
        "master",
        "script",
        "keys",
        "args",
        "wait",
        "replicas",
        "timeout_ms",
        "token",
        "valid_until_ms",
        "previous",
        "reason",
        "kind",
        "option",
    ];
    match v {
        Value::Object(o) => {
            let rank = |k: &String| ORDER.iter().position(|x| x == k).unwrap_or(ORDER.len());
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort_by_key(|k| (rank(k), k.as_str()));
            let fields: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", Value::String((*k).clone()), show(&o[k.as_str()])))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(a) => format!("[{}]", a.iter().map(show).collect::<Vec<_>>().join(",")),
        _ => v.to_string(),
    }
}

fn input_json(input: &StepInput) -> Value {
    match input {
        StepInput::Acquire { name, options } => {
            json!({"type": "acquire", "name": name, "options": options})
        }
        StepInput::Release { lock } => json!({"type": "release", "lock": lock}),
        StepInput::Extend { lock } => json!({"type": "extend", "lock": lock}),
        StepInput::Reply { request, reply } => {
            json!({"type": "reply", "request": request, "reply": reply})
        }
        StepInput::TransportError { request, message } => {
            json!({"type": "transport_error", "request": request, "message": message})
        }
        StepInput::Timeout => json!({"type": "timeout"}),
    }
}

fn replay_all(dir: &Path) -> (usize, Vec<String>) {
    let files = vectors_in(dir);
    let failures: Vec<String> = files.iter().filter_map(|f| replay(f).err()).collect();
    (files.len(), failures)
}

#[test]
fn scenario_vectors_replay_exactly() {
    let (count, failures) = replay_all(&scenario_dir());
    assert!(
        failures.is_empty(),
        "{} of {count} scenario vectors failed:\n\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        count >= MIN_VECTORS,
        "only {count} scenario vectors in {}; expected at least {MIN_VECTORS}",
        scenario_dir().display()
    );
}

/// The etcd vectors, `tests/scenarios/etcd/*.json` (a directory of their own, which
/// the Python runner does not read until it speaks etcd).
#[test]
fn etcd_scenario_vectors_replay_exactly() {
    let dir = scenario_dir().join("etcd");
    let (count, failures) = replay_all(&dir);
    assert!(
        failures.is_empty(),
        "{} of {count} etcd vectors failed:\n\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(count >= 2, "only {count} etcd vectors in {}", dir.display());
}

/// The ZooKeeper vectors, `tests/scenarios/zookeeper/*.json` (replayed by this runner,
/// the Python one and the Node package's; the WebAssembly package has no ZooKeeper
/// backend).
#[test]
fn zookeeper_scenario_vectors_replay_exactly() {
    let dir = scenario_dir().join("zookeeper");
    let (count, failures) = replay_all(&dir);
    assert!(
        failures.is_empty(),
        "{} of {count} zookeeper vectors failed:\n\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        count >= 2,
        "only {count} zookeeper vectors in {}",
        dir.display()
    );
}

/// The Kubernetes Lease vectors, `tests/scenarios/kubernetes/*.json` (replayed by this
/// runner, the Python one and the Node package's; the WebAssembly package has no
/// Kubernetes backend).
#[test]
fn kubernetes_scenario_vectors_replay_exactly() {
    let dir = scenario_dir().join("kubernetes");
    let (count, failures) = replay_all(&dir);
    assert!(
        failures.is_empty(),
        "{} of {count} kubernetes vectors failed:\n\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        count >= 2,
        "only {count} kubernetes vectors in {}",
        dir.display()
    );
}

/// The Redlock vectors, `tests/scenarios/redlock/*.json`: requests carry the `master`
/// they go to; replies are Redis replies, one per master.
#[test]
fn redlock_scenario_vectors_replay_exactly() {
    let dir = scenario_dir().join("redlock");
    let (count, failures) = replay_all(&dir);
    assert!(
        failures.is_empty(),
        "{} of {count} Redlock vectors failed:\n\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        count >= 3,
        "only {count} Redlock vectors in {}",
        dir.display()
    );
}

/// Vectors that state what the safety rules demand where the machine disagrees today.
/// Run with `cargo test -p fencepost-core --test scenarios -- --ignored`.
#[test]
#[ignore = "pending vectors document known disagreements with the machine"]
fn pending_scenario_vectors() {
    let (count, failures) = replay_all(&scenario_dir().join("pending"));
    assert!(
        failures.is_empty(),
        "{} of {count} pending vectors still fail:\n\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn reply_shorthand_covers_every_redis_value() {
    let v = json!([null, 1, "x", {"status": "OK"}, {"error": "LOADING"}, [[]]]);
    assert_eq!(
        redis_value(&v),
        Ok(RedisValue::Array(vec![
            RedisValue::Nil,
            RedisValue::Int(1),
            RedisValue::Data("x".into()),
            RedisValue::Status("OK".into()),
            RedisValue::Error("LOADING".into()),
            RedisValue::Array(vec![RedisValue::Array(vec![])]),
        ]))
    );
    assert!(redis_value(&json!({"oops": 1})).is_err());
}

#[test]
fn fractional_milliseconds_round_to_the_nanosecond() {
    assert_eq!(ms_to_ns(333.333333), 333_333_333);
    assert_eq!(ms_to_ns(1321.333333), 1_321_333_333);
    assert_eq!(ns_to_ms(988_000_000), json!(988));
    let mut owners = Owners::default();
    assert!(matches(
        "deadline_ms",
        &json!(666.666666),
        &ns_to_ms(666_666_666),
        &mut owners
    ));
    assert!(matches(
        "next_timeout_ms",
        &json!({"at_least": 5, "at_most": 15}),
        &json!(15),
        &mut owners
    ));
    assert!(!matches(
        "next_timeout_ms",
        &json!({"at_least": 5, "at_most": 15}),
        &json!(15.000001),
        &mut owners
    ));
}

#[test]
fn owner_placeholders_bind_once_and_stay_distinct() {
    let mut owners = Owners::default();
    let (x, y) = ("0".repeat(32), "f".repeat(32));
    assert!(matches(
        "args",
        &json!(["$a", "$a"]),
        &json!([x, x]),
        &mut owners
    ));
    assert!(!matches("args", &json!(["$a"]), &json!([y]), &mut owners));
    assert!(!matches("args", &json!(["$b"]), &json!([x]), &mut owners));
    assert!(matches("args", &json!(["$b"]), &json!([y]), &mut owners));
    assert!(!matches(
        "args",
        &json!(["$c"]),
        &json!(["1000"]),
        &mut owners
    ));
}
