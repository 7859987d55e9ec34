//! The scenario-vector reader: a vector's JSON (`tests/scenarios/README.md`) into the
//! machine's inputs. Shared by the replay (`core/tests/scenarios.rs`) and the fuzz target
//! that feeds mutated vectors to the machine (`core/fuzz/fuzz_targets/scenario.rs`).

use fencepost_core::{Backend, Input, Instant, LockId, LockOptions, RedisValue, Reply, RequestId};
use serde::Deserialize;
use serde_json::{json, Map, Value};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    /// A string, or lines of one.
    #[allow(dead_code)]
    pub description: Value,
    pub rules: Vec<String>,
    #[serde(default)]
    pub backend: Option<Backend>,
    pub seed: u64,
    /// Lock options in milliseconds (see [`lock_options`]).
    #[serde(default)]
    pub options: Map<String, Value>,
    pub steps: Vec<Step>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub at_ms: f64,
    #[serde(default)]
    #[allow(dead_code)]
    pub note: Option<String>,
    pub input: StepInput,
    pub expect: Vec<Value>,
}

/// The core's `Input` minus `now`, with options in ms and replies in shorthand.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum StepInput {
    Acquire {
        name: String,
        #[serde(default)]
        options: Map<String, Value>,
    },
    Release {
        lock: u64,
    },
    Extend {
        lock: u64,
    },
    Reply {
        request: u64,
        reply: Value,
    },
    TransportError {
        request: u64,
        message: String,
    },
    Timeout,
}

// ---- JSON → machine ------------------------------------------------------------------

/// Milliseconds (possibly fractional) to nanoseconds: `round(ms × 1e6)`.
pub fn ms_to_ns(ms: f64) -> u64 {
    (ms * 1e6).round() as u64
}

/// Options are core `LockOptions` fields; `x_ms` stands for the duration field `x`.
/// The scenario's options apply over `LockOptions::default()`, a step's over those.
pub const OPTION_FIELDS: [&str; 15] = [
    "ttl_ms",
    "acquire_timeout_ms",
    "retry_count",
    "retry_base_ms",
    "retry_max_ms",
    "renew_every_ms",
    "auto_renew",
    "drift_factor",
    "clock_margin_ms",
    "purpose",
    "accept_failover_risk",
    "token_floor",
    "min_replicas",
    "replica_timeout_ms",
    "metadata",
];

pub fn lock_options(layers: &[&Map<String, Value>]) -> Result<LockOptions, String> {
    // Build the core's serde form (durations in ns) and let serde fill the defaults.
    let mut core = Map::new();
    for layer in layers {
        for (key, value) in *layer {
            if !OPTION_FIELDS.contains(&key.as_str()) {
                return Err(format!("unknown option {key:?}"));
            }
            match key.strip_suffix("_ms") {
                Some(field) => {
                    let ns = match value {
                        Value::Null => Value::Null,
                        v => json!(ms_to_ns(v.as_f64().ok_or(format!("{key}: not a number"))?)),
                    };
                    core.insert(field.to_owned(), ns)
                }
                // holder metadata: an object of strings in the vector, its JSON text in
                // the core
                None if key == "metadata" && value.is_object() => {
                    core.insert(key.clone(), Value::String(value.to_string()))
                }
                None => core.insert(key.clone(), value.clone()),
            };
        }
    }
    serde_json::from_value(Value::Object(core)).map_err(|e| format!("options: {e}"))
}

/// Reply shorthand: `null` nil, integer int, string bulk data, array array,
/// `{"status": s}` simple string, `{"error": s}` error reply.
pub fn redis_value(v: &Value) -> Result<RedisValue, String> {
    Ok(match v {
        Value::Null => RedisValue::Nil,
        Value::Number(n) => RedisValue::Int(n.as_i64().ok_or(format!("not an i64: {n}"))?),
        Value::String(s) => RedisValue::Data(s.clone()),
        Value::Array(items) => {
            RedisValue::Array(items.iter().map(redis_value).collect::<Result<_, _>>()?)
        }
        Value::Object(o) if o.len() == 1 => match o.iter().next() {
            Some((k, Value::String(s))) if k == "status" => RedisValue::Status(s.clone()),
            Some((k, Value::String(s))) if k == "error" => RedisValue::Error(s.clone()),
            _ => return Err(format!("bad reply shorthand {v}")),
        },
        _ => return Err(format!("bad reply shorthand {v}")),
    })
}

/// An etcd reply: the gateway's JSON document, as a JSON value (serialized to text here)
/// or as a string (the reply text verbatim, e.g. garbage).
pub fn etcd_reply(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Which kind of reply a vector's backend reads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Replies {
    Redis,
    Etcd,
    ZooKeeper,
    Kubernetes,
}

pub fn to_input(
    input: &StepInput,
    now: Instant,
    scenario_options: &Map<String, Value>,
    replies: Replies,
) -> Result<Input, String> {
    Ok(match input {
        StepInput::Acquire { name, options } => Input::Acquire {
            now,
            name: name.clone(),
            options: lock_options(&[scenario_options, options])?,
        },
        StepInput::Release { lock } => Input::Release {
            now,
            lock: LockId(*lock),
        },
        StepInput::Extend { lock } => Input::Extend {
            now,
            lock: LockId(*lock),
        },
        StepInput::Reply { request, reply } => Input::Reply {
            now,
            request: RequestId(*request),
            reply: match replies {
                Replies::Etcd => Reply::Etcd(etcd_reply(reply)),
                // the adapter's JSON document, written like an etcd reply
                Replies::ZooKeeper => Reply::ZooKeeper(etcd_reply(reply)),
                // the API server's response body, a Lease or a Status
                Replies::Kubernetes => Reply::Kubernetes(etcd_reply(reply)),
                Replies::Redis => Reply::Redis(redis_value(reply)?),
            },
        },
        StepInput::TransportError { request, message } => Input::TransportError {
            now,
            request: RequestId(*request),
            message: message.clone(),
        },
        StepInput::Timeout => Input::Timeout { now },
    })
}

/// Which kind of reply `backend` reads.
pub fn replies_for(backend: &Backend) -> Replies {
    match backend {
        Backend::Etcd(_) => Replies::Etcd,
        Backend::ZooKeeper(_) => Replies::ZooKeeper,
        Backend::Kubernetes(_) => Replies::Kubernetes,
        _ => Replies::Redis,
    }
}
