//! The WebAssembly half of the `fencepost-wasm` npm package: `fencepost-core` through
//! wasm-bindgen, for browsers, edge workers (workerd / Cloudflare Workers), Deno, bundlers
//! and Node.
//!
//! This file converts types and reports errors; it makes no lock decision. It exposes the
//! same low-level interface as the napi-rs addon (`bindings-node/src/lib.rs`), so the
//! shared JavaScript half (`bindings-node/js/`, `createFencepost(native, 'wasm')`) gives the
//! same public API and the same `fencepost.d.ts`:
//! * Times are milliseconds as `number` on the host's monotonic clock
//!   (`performance.now()`), converted here once to the core's nanoseconds:
//!   `round(ms × 1e6)`, saturating. A time that is not finite or is negative is refused.
//! * Lock and request ids are `number`s (integers below 2^53).
//! * Fencing tokens, etcd lease ids and etcd revisions are `bigint`, never a lossy
//!   `number` (etcd request bodies carry them as decimal strings, as the JSON gateway does).
//! * A machine speaks one backend's protocol, chosen at construction: `"redis"` (default)
//!   or `"etcd"`. Its requests carry `backend: "redis"` (a script call), `"redis_blpop"` (a
//!   fair waiter's blocking pop) or `"etcd"` (a JSON gateway call), and `reply` reads a
//!   Redis client's value or, on an etcd machine, the gateway's JSON text.
//! * Errors are thrown as `Error`s with `code` `"ERR_CONFIG"` (the caller's input or
//!   usage, `kind` = the core's `UsageError` serde tag, `option` = the core's option
//!   name, `detail` = the message without the option name), `"ERR_CLOCK"` (time went
//!   backwards) or `"ERR_BACKEND"` (no secure randomness for owner ids). Fence refusals
//!   and unreadable replies are *returned* as data.
//!
//! Where the two addons differ, by necessity:
//! * Every argument arrives as a `JsValue` and is checked here, so a value of the wrong
//!   type is an `ERR_CONFIG` error with `kind: "invalid_argument"` (napi-rs throws its own
//!   `NumberExpected`-style codes, which the JavaScript half maps to the same ConfigError).
//! * Owner ids come from Web Crypto (`crypto.getRandomValues`, getrandom's `wasm_js`
//!   backend), read once when a machine is created. Workers expose Web Crypto only while
//!   handling a request: create machines (backends, locks) inside a handler.
//!
//! Nothing here panics on any input, and the release profile aborts on panic, so this is
//! load-bearing: every conversion is checked and reported, every JavaScript call that can
//! run user code (getters, proxy traps) is made through a `catch` import, and an exception
//! never unwinds through a Rust frame.

use core::time::Duration;

use fencepost_core::backends::etcd::{
    self as etcd, EtcdBackend as EtcdSettings, EtcdFenced, EtcdOp, EtcdRequest,
};
use fencepost_core::backends::redis::RedisBackend as RedisSettings;
use fencepost_core::fence::{self, ParamStyle};
use fencepost_core::js_outputs::{self, ns_to_ms, FlatValue};
use fencepost_core::{
    Backend, FencingToken, Input, Instant, LockId, LockOptions, Machine as CoreMachine, Output,
    Purpose, RedisCommand, RedisScript, RedisValue, Reply, RequestId, UsageError,
};
use js_sys::{Array, Object, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

// ---- JavaScript calls that may run user code: always caught ---------------------------------

#[wasm_bindgen]
extern "C" {
    /// `Array.isArray(value)` (throws for a revoked proxy).
    #[wasm_bindgen(catch, js_namespace = Array, js_name = isArray)]
    fn is_array(value: &JsValue) -> Result<bool, JsValue>;

    /// `Object.keys(value)` (runs a proxy's `ownKeys` trap).
    #[wasm_bindgen(catch, js_namespace = Object, js_name = keys)]
    fn object_keys(value: &JsValue) -> Result<Array, JsValue>;

    /// `Reflect.get(target, key)` (runs getters and proxy traps).
    #[wasm_bindgen(catch, js_namespace = Reflect, js_name = get)]
    fn get(target: &JsValue, key: &JsValue) -> Result<JsValue, JsValue>;

    /// `Reflect.set(target, key, value)` (runs setters inherited from `Object.prototype`).
    #[wasm_bindgen(catch, js_namespace = Reflect, js_name = set)]
    fn set(target: &JsValue, key: &JsValue, value: &JsValue) -> Result<bool, JsValue>;

    /// `String(value)` (runs `toString`; throws for a symbol).
    #[wasm_bindgen(catch, js_name = String)]
    fn to_js_string(value: &JsValue) -> Result<JsValue, JsValue>;
}

/// Sets `object[key] = value`.
fn put(object: &JsValue, key: &str, value: impl Into<JsValue>) -> Result<(), JsValue> {
    set(object, &JsValue::from_str(key), &value.into()).map(drop)
}

/// `Some(v)` as `v`, `None` as `null` (wasm-bindgen's own `Option` return is `undefined`;
/// the napi addon, and so the JavaScript half, says `null`).
fn or_null<T: Into<JsValue>>(value: Option<T>) -> JsValue {
    value.map_or(JsValue::NULL, Into::into)
}

/// Reads `object[key]`; `undefined` and `null` are `None`.
fn field(object: &JsValue, key: &str) -> Result<Option<JsValue>, JsValue> {
    let value = get(object, &JsValue::from_str(key))?;
    Ok(if value.is_undefined() || value.is_null() {
        None
    } else {
        Some(value)
    })
}

// ---- errors -----------------------------------------------------------------------------

/// A JS `Error` with `code` and extra string properties, to be thrown (returned as `Err`).
fn error(code: &str, message: &str, props: &[(&str, Option<&str>)]) -> JsValue {
    let error: JsValue = js_sys::Error::new(message).into();
    // Setting a property on a fresh Error can only fail if a setter on the prototype chain
    // throws; the Error still says what went wrong.
    let _ = put(&error, "code", code);
    for (key, value) in props {
        if let Some(value) = value {
            let _ = put(&error, key, *value);
        }
    }
    error
}

fn config_error(message: &str) -> JsValue {
    error("ERR_CONFIG", message, &[("kind", Some("invalid_argument"))])
}

fn usage_error(err: &UsageError) -> JsValue {
    let message = err.to_string();
    match err {
        UsageError::TimeWentBackwards { .. } => error(
            "ERR_CLOCK",
            &message,
            &[("kind", Some("time_went_backwards"))],
        ),
        UsageError::InvalidOption {
            option,
            message: detail,
        } => error(
            "ERR_CONFIG",
            &message,
            &[
                ("kind", Some("invalid_option")),
                ("option", Some(option)),
                ("detail", Some(detail)),
            ],
        ),
        UsageError::UnsafePurpose { .. } => error(
            "ERR_CONFIG",
            &message,
            &[
                ("kind", Some("unsafe_purpose")),
                ("option", Some("purpose")),
            ],
        ),
        UsageError::InvalidName { .. } => {
            error("ERR_CONFIG", &message, &[("kind", Some("invalid_name"))])
        }
        UsageError::UnknownLock { .. } => {
            error("ERR_CONFIG", &message, &[("kind", Some("unknown_lock"))])
        }
    }
}

/// What a thrown value says about itself, for error messages (never throws).
fn describe_thrown(thrown: &JsValue) -> String {
    if let Some(error) = thrown.dyn_ref::<js_sys::Error>() {
        if let Ok(message) = get(error, &JsValue::from_str("message")) {
            if let Some(message) = message.as_string() {
                if !message.is_empty() {
                    return message;
                }
            }
        }
    }
    "reading it threw".to_owned()
}

// ---- argument conversion ----------------------------------------------------------------

/// The largest integer a `number` holds exactly.
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// What a value is, for "must be …, got …" messages (never runs user code).
fn type_name(value: &JsValue) -> String {
    if value.is_null() {
        return "null".to_owned();
    }
    value
        .js_typeof()
        .as_string()
        .unwrap_or_else(|| "a value".to_owned())
}

fn string(value: &JsValue, name: &str) -> Result<String, JsValue> {
    value.as_string().ok_or_else(|| {
        config_error(&format!(
            "{name} must be a string, got {}",
            type_name(value)
        ))
    })
}

fn optional_string(value: &JsValue, name: &str) -> Result<Option<String>, JsValue> {
    if value.is_undefined() || value.is_null() {
        Ok(None)
    } else {
        string(value, name).map(Some)
    }
}

fn number(value: &JsValue, name: &str) -> Result<f64, JsValue> {
    value.as_f64().ok_or_else(|| {
        config_error(&format!(
            "{name} must be a number, got {}",
            type_name(value)
        ))
    })
}

fn boolean(value: &JsValue, name: &str) -> Result<bool, JsValue> {
    value.as_bool().ok_or_else(|| {
        config_error(&format!(
            "{name} must be true or false, got {}",
            type_name(value)
        ))
    })
}

/// Milliseconds (finite, ≥ 0, possibly fractional) to whole nanoseconds:
/// `round(ms × 1e6)`, saturating at `u64::MAX`.
fn ms_to_ns(value: &JsValue, name: &str) -> Result<u64, JsValue> {
    let ms = number(value, name)?;
    if !ms.is_finite() || ms < 0.0 {
        return Err(config_error(&format!(
            "{name} must be a finite number of milliseconds ≥ 0, got {ms}"
        )));
    }
    // `as` saturates: values past u64::MAX become u64::MAX.
    Ok((ms * 1e6).round() as u64)
}

fn duration(value: &JsValue, name: &str) -> Result<Duration, JsValue> {
    ms_to_ns(value, name).map(Duration::from_nanos)
}

fn instant(value: &JsValue) -> Result<Instant, JsValue> {
    ms_to_ns(value, "nowMs").map(Instant::from_nanos)
}

/// A lock or request id: an integer in 0 ..= 2^53 − 1.
fn id(value: &JsValue, name: &str) -> Result<u64, JsValue> {
    match value.as_f64() {
        Some(n) if n.is_finite() && n >= 0.0 && n.fract() == 0.0 && n <= MAX_SAFE_INTEGER => {
            Ok(n as u64)
        }
        _ => Err(config_error(&format!(
            "{name} must be an integer id ≥ 0, got {}",
            value
                .as_f64()
                .map_or_else(|| type_name(value), |n| n.to_string())
        ))),
    }
}

/// A bigint in 0 ..= 2^64 − 1.
fn bigint_u64(value: &JsValue, name: &str) -> Result<u64, JsValue> {
    if value.is_bigint() {
        if let Ok(n) = u64::try_from(value.clone()) {
            return Ok(n);
        }
    }
    Err(config_error(&format!(
        "{name} must be a bigint in 0n ..= 2n ** 64n - 1n"
    )))
}

fn token(value: &JsValue) -> Result<FencingToken, JsValue> {
    bigint_u64(value, "token").map(FencingToken)
}

fn string_array(value: &JsValue, name: &str) -> Result<Vec<String>, JsValue> {
    if !is_array(value).unwrap_or(false) {
        return Err(config_error(&format!(
            "{name} must be an array of strings, got {}",
            type_name(value)
        )));
    }
    let length = field(value, "length")?
        .and_then(|n| n.as_f64())
        .unwrap_or(0.0);
    let mut out = Vec::new();
    let mut i = 0.0;
    while i < length {
        let item = get(value, &JsValue::from_f64(i))?;
        out.push(string(&item, &format!("{name}[{i}]"))?);
        i += 1.0;
    }
    Ok(out)
}

/// Lock options in the JavaScript shape (milliseconds, camelCase). A missing field (or
/// `null`/`undefined`) takes the core's default; `acquireTimeoutMs` and `renewEveryMs`
/// default to "wait forever" and "ttl / 3". Only types are converted here: every range
/// is the core's to check (`Machine::check_acquire`).
fn lock_options(o: &JsValue) -> Result<LockOptions, JsValue> {
    if !o.is_object() {
        return Err(config_error(&format!(
            "lock options must be an object, got {}",
            type_name(o)
        )));
    }
    let mut options = LockOptions::default();
    if let Some(ms) = field(o, "ttlMs")? {
        options.ttl = duration(&ms, "ttlMs")?;
    }
    if let Some(purpose) = field(o, "purpose")? {
        options.purpose = match string(&purpose, "purpose")?.as_str() {
            "efficiency" => Purpose::Efficiency,
            "correctness" => Purpose::Correctness,
            other => {
                return Err(config_error(&format!(
                    "purpose must be 'efficiency' or 'correctness', got {other:?}"
                )))
            }
        };
    }
    if let Some(risk) = field(o, "acceptFailoverRisk")? {
        options.accept_failover_risk = boolean(&risk, "acceptFailoverRisk")?;
    }
    if let Some(ms) = field(o, "acquireTimeoutMs")? {
        options.acquire_timeout = Some(duration(&ms, "acquireTimeoutMs")?);
    }
    if let Some(ms) = field(o, "retryBaseMs")? {
        options.retry_base = duration(&ms, "retryBaseMs")?;
    }
    if let Some(ms) = field(o, "retryMaxMs")? {
        options.retry_max = duration(&ms, "retryMaxMs")?;
    }
    if let Some(ms) = field(o, "renewEveryMs")? {
        options.renew_every = Some(duration(&ms, "renewEveryMs")?);
    }
    if let Some(auto) = field(o, "autoRenew")? {
        options.auto_renew = boolean(&auto, "autoRenew")?;
    }
    if let Some(drift) = field(o, "driftFactor")? {
        // NaN and out-of-range values are the core's to refuse, naming the range.
        options.drift_factor = number(&drift, "driftFactor")?;
    }
    if let Some(ms) = field(o, "clockMarginMs")? {
        options.clock_margin = duration(&ms, "clockMarginMs")?;
    }
    Ok(options)
}

/// The backend a machine speaks: `kind` `"redis"` (default) or `"etcd"`. `fair` is a Redis
/// option (etcd locks are always FIFO): `fair: true` on etcd is refused.
fn backend(
    kind: Option<&str>,
    key_prefix: Option<String>,
    fair: Option<bool>,
) -> Result<Backend, JsValue> {
    match kind.unwrap_or("redis") {
        "redis" => {
            let defaults = RedisSettings::default();
            Ok(Backend::Redis(RedisSettings {
                key_prefix: key_prefix.unwrap_or(defaults.key_prefix),
                fair: fair.unwrap_or(defaults.fair),
            }))
        }
        "etcd" if fair == Some(true) => Err(config_error(
            "fair applies to Redis machines only: etcd locks are always granted in FIFO order",
        )),
        "etcd" => Ok(Backend::Etcd(EtcdSettings {
            key_prefix: key_prefix.unwrap_or_else(|| EtcdSettings::default().key_prefix),
        })),
        other => Err(config_error(&format!(
            "kind must be 'redis' or 'etcd', got {other:?}"
        ))),
    }
}

// ---- replies: JS value -> RedisValue -> JS value -------------------------------------------

/// Deepest nesting of reply arrays accepted; deeper input becomes an error value.
const MAX_REPLY_DEPTH: usize = 32;

/// Converts what a Redis client returned into a `RedisValue`. Never fails: a value that
/// cannot be read becomes `RedisValue::Error` describing it, which the core reads as a
/// protocol error. The same table as the napi addon:
///
/// | JavaScript | RedisValue |
/// | --- | --- |
/// | `null`, `undefined` | `Nil` |
/// | integer `number`, `bigint` (64-bit) | `Int` |
/// | `true` / `false` (RESP3 booleans) | `Int(1)` / `Int(0)` |
/// | `string`; `Buffer` / `Uint8Array` (UTF-8, lossy) | `Data` |
/// | `Array` | `Array` |
/// | an `Error` (its `message`, code word first) or `{ error: string }` | `Error` |
/// | `{ status: string }` | `Status` |
fn to_redis_value(value: &JsValue, depth: usize) -> RedisValue {
    match read_redis_value(value, depth) {
        Ok(v) => v,
        // A getter or proxy trap of the value threw: the reply's fault, not the caller's.
        Err(thrown) => RedisValue::Error(format!(
            "fencepost: unreadable reply value: {}",
            describe_thrown(&thrown)
        )),
    }
}

fn unsupported(what: &str) -> RedisValue {
    RedisValue::Error(format!(
        "fencepost: unsupported reply value from the adapter: {what}"
    ))
}

fn read_redis_value(value: &JsValue, depth: usize) -> Result<RedisValue, JsValue> {
    if depth > MAX_REPLY_DEPTH {
        return Ok(RedisValue::Error(format!(
            "fencepost: reply nested deeper than {MAX_REPLY_DEPTH} arrays"
        )));
    }
    if value.is_undefined() || value.is_null() {
        return Ok(RedisValue::Nil);
    }
    if let Some(b) = value.as_bool() {
        return Ok(RedisValue::Int(i64::from(b)));
    }
    if let Some(n) = value.as_f64() {
        // ±2^63 are exact doubles; an integral value in -2^63 ..< 2^63 fits in i64.
        const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
        return Ok(
            if n.fract() == 0.0 && (-TWO_POW_63..TWO_POW_63).contains(&n) {
                RedisValue::Int(n as i64)
            } else {
                unsupported(&format!("the number {n} (not a 64-bit integer)"))
            },
        );
    }
    if value.is_bigint() {
        return Ok(match i64::try_from(value.clone()) {
            Ok(n) => RedisValue::Int(n),
            Err(_) => unsupported("a bigint outside the 64-bit range"),
        });
    }
    if let Some(s) = value.as_string() {
        return Ok(RedisValue::Data(s));
    }
    if !value.is_object() {
        // functions, symbols
        return Ok(unsupported(&format!(
            "a value of type {}",
            type_name(value)
        )));
    }
    if value.is_instance_of::<js_sys::Error>() {
        let message = match field(value, "message")? {
            Some(m) => to_js_string(&m)?.as_string().unwrap_or_default(),
            None => String::new(),
        };
        return Ok(RedisValue::Error(if message.is_empty() {
            "ERR error reply without a message".to_owned()
        } else {
            message
        }));
    }
    if is_array(value)? {
        let length = field(value, "length")?
            .and_then(|n| n.as_f64())
            .unwrap_or(0.0);
        let mut items = Vec::new();
        let mut i = 0.0;
        while i < length {
            let item = get(value, &JsValue::from_f64(i))?;
            items.push(to_redis_value(&item, depth + 1));
            i += 1.0;
        }
        return Ok(RedisValue::Array(items));
    }
    if let Some(bytes) = value.dyn_ref::<Uint8Array>() {
        return Ok(RedisValue::Data(
            String::from_utf8_lossy(&bytes.to_vec()).into_owned(),
        ));
    }
    let keys = object_keys(value)?;
    if keys.length() == 1 {
        if let Some(key) = keys.get(0).as_string() {
            if key == "status" || key == "error" {
                let text = get(value, &JsValue::from_str(&key))?;
                return Ok(match text.as_string() {
                    Some(text) if key == "status" => RedisValue::Status(text),
                    Some(text) => RedisValue::Error(text),
                    None => unsupported(&format!("{{ {key}: <not a string> }}")),
                });
            }
        }
    }
    let names: Vec<String> = keys.iter().filter_map(|k| k.as_string()).collect();
    Ok(unsupported(&format!("an object with keys {names:?}")))
}

/// A `RedisValue` as a Redis client would return it: `null`, a `number` (a `bigint` past
/// 2^53), a `string`, an `Array`, or an `Error` whose message is the error reply.
fn from_redis_value(value: &RedisValue) -> JsValue {
    match value {
        RedisValue::Nil => JsValue::NULL,
        RedisValue::Int(n) if (n.unsigned_abs() as f64) <= MAX_SAFE_INTEGER => {
            JsValue::from_f64(*n as f64)
        }
        RedisValue::Int(n) => JsValue::from(*n),
        RedisValue::Data(s) | RedisValue::Status(s) => JsValue::from_str(s),
        RedisValue::Array(items) => items.iter().map(from_redis_value).collect::<Array>().into(),
        RedisValue::Error(message) => error("ERR_REDIS_REPLY", message, &[]),
    }
}

// ---- etcd: replies as JSON text, requests as gateway calls ---------------------------------

/// An etcd reply as the JSON text the gateway returned: a `string` (or UTF-8 bytes in a
/// `Uint8Array`). Never fails and runs no user code: anything else becomes text naming
/// what it was, which the core reads as a protocol error.
fn etcd_reply_text(value: &JsValue) -> String {
    if let Some(text) = value.as_string() {
        return text;
    }
    let what = if let Some(bytes) = value.dyn_ref::<Uint8Array>() {
        match String::from_utf8(bytes.to_vec()) {
            Ok(text) => return text,
            Err(_) => "bytes that are not UTF-8".to_owned(),
        }
    } else {
        format!("a value of type {}", type_name(value))
    };
    format!("<not an etcd JSON reply: {what}>")
}

/// Sets `backend: "etcd"`, `call`, `path`, `body` and, for a watch, `timeoutMs` on `o`.
fn set_etcd_call(o: &JsValue, req: &EtcdRequest) -> Result<(), JsValue> {
    put(o, "backend", "etcd")?;
    put(o, "call", req.call_name())?;
    put(o, "path", req.gateway_path())?;
    put(o, "body", req.gateway_body())?;
    if let Some(ms) = req.watch_timeout_ms() {
        // whole milliseconds; exact as a number below 2^53 (a TTL is at most 2^31 ms)
        put(o, "timeoutMs", ms as f64)?;
    }
    Ok(())
}

/// An owner id: 32 hex digits (the form `Machine.owner` returns).
fn owner_id(value: &JsValue) -> Result<fencepost_core::OwnerId, JsValue> {
    let hex = string(value, "ownerId")?;
    let bad = || {
        let shown: String = hex.chars().take(40).collect();
        config_error(&format!(
            "ownerId must be 32 hex digits (lease.ownerId), got {shown:?}"
        ))
    };
    fencepost_core::OwnerId::from_hex(&hex).ok_or_else(bad)
}

// ---- outputs --------------------------------------------------------------------------------

fn script_name(script: RedisScript) -> &'static str {
    match script {
        RedisScript::Acquire => "acquire",
        RedisScript::Renew => "renew",
        RedisScript::Release => "release",
        RedisScript::FencedSet => "fenced_set",
        RedisScript::AcquireFair => "acquire_fair",
        RedisScript::ReleaseFair => "release_fair",
    }
}

fn script_by_name(name: &str) -> Result<RedisScript, JsValue> {
    RedisScript::ALL
        .into_iter()
        .find(|s| script_name(*s) == name)
        .ok_or_else(|| {
            config_error(&format!(
                "script must be one of {}, got {name:?}",
                RedisScript::ALL
                    .iter()
                    .map(|s| format!("'{}'", script_name(*s)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}

fn strings(items: &[String]) -> Array {
    items.iter().map(|s| JsValue::from_str(s)).collect()
}

fn command_object(cmd: &RedisCommand) -> Result<JsValue, JsValue> {
    let o: JsValue = Object::new().into();
    put(&o, "script", script_name(cmd.script))?;
    put(&o, "sha1", cmd.script.sha1())?;
    put(&o, "keys", strings(&cmd.keys))?;
    put(&o, "args", strings(&cmd.args))?;
    Ok(o)
}

// Outputs cross to JavaScript as ONE flat array of primitives (`Machine.pollFlat`), in
// the core's layout (`fencepost_core::js_outputs`, shared with the napi addon); the JavaScript
// half (js/machine.js, `decodeOutputs`) turns it into the output objects.

/// Appends one output's flat record to `out`.
fn push_output(out: &Array, output: &Output) {
    let _ = js_outputs::encode_output(output, &mut |value| {
        out.push(&match value {
            FlatValue::Number(n) => JsValue::from_f64(n),
            FlatValue::Text(t) => JsValue::from_str(&t),
            FlatValue::Token(t) => JsValue::from(t),
            FlatValue::Null => JsValue::NULL,
        });
        Ok::<(), core::convert::Infallible>(())
    });
}

// ---- Machine --------------------------------------------------------------------------------

/// The sans-IO lock machine for a Redis or etcd backend: many locks, no I/O, no clock.
///
/// Every `nowMs` is the host's monotonic time in milliseconds (`performance.now()`); an
/// earlier one than given before throws `ERR_CLOCK`. After every input call `pollFlat()`.
#[wasm_bindgen(js_name = Machine)]
pub struct Machine {
    inner: CoreMachine,
}

#[wasm_bindgen(js_class = Machine)]
impl Machine {
    /// `keyPrefix` prefixes every key (default `"fencepost:"` on Redis, `"fencepost/"` on
    /// etcd). `seed` (a bigint) makes owner ids and jitter deterministic, for tests only;
    /// without it the machine seeds itself from Web Crypto (`crypto.getRandomValues`),
    /// which workers provide only inside a request handler (else `ERR_BACKEND`). `fair`
    /// (default false, Redis only) turns on fair, instant hand-off: contended acquirers
    /// queue on the server and park on a blocking pop (requests with `backend:
    /// "redis_blpop"`, `operation: "wait"`). `kind` is `"redis"` (default) or `"etcd"`
    /// (requests with `backend: "etcd"`; a waiter parks on a watch, `operation: "wait"`).
    #[wasm_bindgen(constructor)]
    pub fn new(
        key_prefix: JsValue,
        seed: JsValue,
        fair: JsValue,
        kind: JsValue,
    ) -> Result<Machine, JsValue> {
        let fair = if fair.is_undefined() || fair.is_null() {
            None
        } else {
            Some(boolean(&fair, "fair")?)
        };
        let kind = optional_string(&kind, "kind")?;
        let backend = backend(
            kind.as_deref(),
            optional_string(&key_prefix, "keyPrefix")?,
            fair,
        )?;
        let inner = if seed.is_undefined() || seed.is_null() {
            CoreMachine::new(backend).map_err(|e| {
                error(
                    "ERR_BACKEND",
                    &format!(
                        "{e} (Web Crypto's crypto.getRandomValues; edge workers provide it \
                         only inside a request handler: create backends and locks there)"
                    ),
                    &[],
                )
            })?
        } else {
            CoreMachine::with_seed(backend, bigint_u64(&seed, "seed")?)
        };
        Ok(Machine { inner })
    }

    /// Checks a lock name and options exactly as `acquire` would, without acquiring.
    pub fn check(&self, name: JsValue, options: JsValue) -> Result<(), JsValue> {
        let name = string(&name, "name")?;
        let options = lock_options(&options)?;
        self.inner
            .check_acquire(&name, &options)
            .map_err(|e| usage_error(&e))
    }

    /// Starts acquiring `name`; returns the new lock id.
    pub fn acquire(
        &mut self,
        now_ms: JsValue,
        name: JsValue,
        options: JsValue,
    ) -> Result<f64, JsValue> {
        let now = instant(&now_ms)?;
        let name = string(&name, "name")?;
        let options = lock_options(&options)?;
        self.inner
            .acquire(now, &name, options)
            .map(|lock| lock.0 as f64)
            .map_err(|e| usage_error(&e))
    }

    /// Releases `lock`, or cancels its acquisition. A finished lock ignores it.
    pub fn release(&mut self, now_ms: JsValue, lock: JsValue) -> Result<(), JsValue> {
        let input = Input::Release {
            now: instant(&now_ms)?,
            lock: LockId(id(&lock, "lock")?),
        };
        self.feed(input)
    }

    /// The server's reply to request `request`: on a Redis machine, as the Redis client
    /// returned it (see the conversion table in `to_redis_value`); on an etcd machine, the
    /// JSON text the gateway answered (error documents included; for a watch, the first
    /// line with events, or `"{}"` at its timeout); a value that is not text is read as a
    /// protocol error. Replies to unknown requests are ignored.
    pub fn reply(
        &mut self,
        now_ms: JsValue,
        request: JsValue,
        value: JsValue,
    ) -> Result<(), JsValue> {
        let now = instant(&now_ms)?;
        let request = RequestId(id(&request, "request")?);
        let reply = match self.inner.backend() {
            Backend::Etcd(_) => Reply::Etcd(etcd_reply_text(&value)),
            _ => Reply::Redis(to_redis_value(&value, 0)),
        };
        let input = Input::Reply {
            now,
            request,
            reply,
        };
        self.feed(input)
    }

    /// Request `request` failed in transport (connection error, client timeout, no reply
    /// by its deadline): it may or may not have reached the server.
    #[wasm_bindgen(js_name = transportError)]
    pub fn transport_error(
        &mut self,
        now_ms: JsValue,
        request: JsValue,
        message: JsValue,
    ) -> Result<(), JsValue> {
        let input = Input::TransportError {
            now: instant(&now_ms)?,
            request: RequestId(id(&request, "request")?),
            message: string(&message, "message")?,
        };
        self.feed(input)
    }

    /// Time passed: fires due timers. Early and spurious calls are harmless.
    pub fn timeout(&mut self, now_ms: JsValue) -> Result<(), JsValue> {
        let input = Input::Timeout {
            now: instant(&now_ms)?,
        };
        self.feed(input)
    }

    /// Drains every pending output as one flat array of primitives (the layout is above
    /// `push_output`): `[nextTimeoutMs | null, ...records]`. Requests and events come in
    /// order; `nextTimeoutMs` is when to call `timeout`, or `null` when no timer is set.
    /// js/machine.js decodes it (`LockMachine.poll()` returns `{ outputs, nextTimeoutMs }`).
    #[wasm_bindgen(js_name = pollFlat)]
    pub fn poll_flat(&mut self) -> Array {
        let out = Array::new();
        out.push(&JsValue::NULL);
        loop {
            match self.inner.poll_output() {
                Output::Timeout(at) => {
                    out.set(0, JsValue::from_f64(ns_to_ms(at.as_nanos())));
                    break;
                }
                Output::Idle => break,
                output => push_output(&out, &output),
            }
        }
        out
    }

    /// The owner id of `lock` (32 lowercase hex digits, the value in the lock key), or
    /// `null` once the machine has forgotten the lock.
    pub fn owner(&self, lock: JsValue) -> Result<JsValue, JsValue> {
        let lock = LockId(id(&lock, "lock")?);
        Ok(or_null(self.inner.owner(lock).map(|o| o.to_string())))
    }

    /// The validity deadline of `lock` (monotonic ms) while it is held, else `null`.
    #[wasm_bindgen(js_name = validUntilMs)]
    pub fn valid_until_ms(&self, lock: JsValue) -> Result<JsValue, JsValue> {
        let lock = LockId(id(&lock, "lock")?);
        Ok(or_null(
            self.inner
                .valid_until(lock)
                .map(|at| ns_to_ms(at.as_nanos())),
        ))
    }

    /// How many locks the machine tracks (pending, held, or finished with requests out).
    #[wasm_bindgen(getter = lockCount)]
    pub fn lock_count(&self) -> u32 {
        u32::try_from(self.inner.lock_count()).unwrap_or(u32::MAX)
    }

    /// How many requests await a reply or transport error.
    #[wasm_bindgen(getter = requestsInFlight)]
    pub fn requests_in_flight(&self) -> u32 {
        u32::try_from(self.inner.requests_in_flight()).unwrap_or(u32::MAX)
    }
}

impl Machine {
    fn feed(&mut self, input: Input) -> Result<(), JsValue> {
        self.inner.handle_input(input).map_err(|e| usage_error(&e))
    }
}

// ---- MemoryRedis ----------------------------------------------------------------------------

/// The core's in-memory Redis (`fencepost_core::memory::MemoryRedis`): runs fencepost's
/// scripts with TTLs on the host's monotonic time.
#[wasm_bindgen(js_name = MemoryRedis)]
pub struct MemoryRedis {
    inner: fencepost_core::memory::MemoryRedis,
}

#[wasm_bindgen(js_class = MemoryRedis)]
impl MemoryRedis {
    /// An empty key space.
    #[wasm_bindgen(constructor)]
    pub fn new() -> MemoryRedis {
        MemoryRedis {
            inner: fencepost_core::memory::MemoryRedis::new(),
        }
    }

    /// Runs a script call `{ script, keys, args }` (a request from `poll`, or a command from
    /// `redisFencedSet`) at `nowMs` and returns what a Redis client would: `number`,
    /// `string`, `null`, an array, or (returned, not thrown) an `Error` for an error reply.
    pub fn execute(&mut self, now_ms: JsValue, command: JsValue) -> Result<JsValue, JsValue> {
        let now = instant(&now_ms)?;
        if !command.is_object() {
            return Err(config_error(&format!(
                "command must be an object {{ script, keys, args }}, got {}",
                type_name(&command)
            )));
        }
        let script = field(&command, "script")?.unwrap_or(JsValue::UNDEFINED);
        let keys = field(&command, "keys")?.unwrap_or(JsValue::UNDEFINED);
        let args = field(&command, "args")?.unwrap_or(JsValue::UNDEFINED);
        let cmd = RedisCommand {
            script: script_by_name(&string(&script, "script")?)?,
            keys: string_array(&keys, "keys")?,
            args: string_array(&args, "args")?,
        };
        Ok(from_redis_value(&self.inner.eval(now, &cmd)))
    }

    /// `GET key` at `nowMs` (expired keys are gone).
    pub fn get(&self, now_ms: JsValue, key: JsValue) -> Result<JsValue, JsValue> {
        let now = instant(&now_ms)?;
        let key = string(&key, "key")?;
        Ok(or_null(self.inner.get(now, &key)))
    }

    /// `PTTL key` in ms at `nowMs`: `null` when missing, -1 when it has no expiry.
    pub fn pttl(&self, now_ms: JsValue, key: JsValue) -> Result<JsValue, JsValue> {
        let now = instant(&now_ms)?;
        let key = string(&key, "key")?;
        Ok(or_null(self.inner.pttl(now, &key).map(|ms| ms as f64)))
    }

    /// `LPOP key` at `nowMs`: the head of a list (a fair waiter's wake-up), or `null`
    /// when the list is missing, empty or expired. Never blocks: hosts emulating `BLPOP`
    /// park the caller themselves until this yields or the timeout passes.
    pub fn lpop(&mut self, now_ms: JsValue, key: JsValue) -> Result<JsValue, JsValue> {
        let now = instant(&now_ms)?;
        let key = string(&key, "key")?;
        Ok(or_null(self.inner.lpop(now, &key)))
    }

    /// `DEL key`; `true` if it existed.
    pub fn delete(&mut self, key: JsValue) -> Result<bool, JsValue> {
        let key = string(&key, "key")?;
        Ok(self.inner.delete(&key))
    }

    /// Forgets every key, as a restart without persistence does.
    pub fn flush(&mut self) {
        self.inner.flush()
    }
}

impl Default for MemoryRedis {
    fn default() -> Self {
        Self::new()
    }
}

// ---- fence ----------------------------------------------------------------------------------

/// A stale write, as data (the JavaScript half throws `StaleTokenError`).
fn stale_object(stale: &fencepost_core::StaleToken) -> Result<JsValue, JsValue> {
    let o: JsValue = Object::new().into();
    put(&o, "resource", stale.resource.as_str())?;
    put(&o, "token", JsValue::from(stale.token.get()))?;
    put(&o, "highest", JsValue::from(stale.highest.get()))?;
    put(&o, "message", stale.to_string())?;
    Ok(o)
}

/// An in-memory fence: the highest fencing token accepted per resource.
#[wasm_bindgen(js_name = Fence)]
pub struct Fence {
    inner: fence::Fence,
}

#[wasm_bindgen(js_class = Fence)]
impl Fence {
    /// An empty fence.
    #[wasm_bindgen(constructor)]
    pub fn new() -> Fence {
        Fence {
            inner: fence::Fence::new(),
        }
    }

    /// Accepts a write to `resource` carrying `token` (and remembers it): returns `null`.
    /// Refuses a token lower than one accepted before: returns
    /// `{ resource, token, highest, message }`.
    pub fn check(&mut self, resource: JsValue, token: JsValue) -> Result<JsValue, JsValue> {
        let resource = string(&resource, "resource")?;
        let token = self::token(&token)?;
        match self.inner.check(&resource, token) {
            Ok(()) => Ok(JsValue::NULL),
            Err(stale) => stale_object(&stale),
        }
    }

    /// The highest token accepted for `resource` (a bigint), or `null`.
    pub fn highest(&self, resource: JsValue) -> Result<JsValue, JsValue> {
        let resource = string(&resource, "resource")?;
        Ok(self
            .inner
            .highest(&resource)
            .map_or(JsValue::NULL, |t| JsValue::from(t.get())))
    }
}

impl Default for Fence {
    fn default() -> Self {
        Self::new()
    }
}

/// The SQL of a fenced conditional update. `style` `"dollar"` (node-postgres: `$1` id,
/// `$2` token, `$3…` columns) or `"pyformat"`. Zero rows updated means a stale token.
#[wasm_bindgen(js_name = sqlFencedUpdate)]
pub fn sql_fenced_update(
    table: JsValue,
    id_column: JsValue,
    token_column: JsValue,
    columns: JsValue,
    style: JsValue,
) -> Result<String, JsValue> {
    let table = string(&table, "table")?;
    let id_column = string(&id_column, "idColumn")?;
    let token_column = string(&token_column, "tokenColumn")?;
    let columns = string_array(&columns, "columns")?;
    let style = match string(&style, "style")?.as_str() {
        "dollar" => ParamStyle::Dollar,
        "pyformat" => ParamStyle::Pyformat,
        other => {
            return Err(config_error(&format!(
                "style must be 'dollar' or 'pyformat', got {other:?}"
            )))
        }
    };
    let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
    fence::sql_fenced_update(&table, &id_column, &token_column, &columns, style)
        .map_err(|e| config_error(&e.to_string()))
}

/// The fenced Redis SET as a script call `{ script, sha1, keys, args }`.
#[wasm_bindgen(js_name = redisFencedSet)]
pub fn redis_fenced_set(
    data_key: JsValue,
    fence_key: JsValue,
    token: JsValue,
    value: JsValue,
) -> Result<JsValue, JsValue> {
    let data_key = string(&data_key, "dataKey")?;
    let fence_key = string(&fence_key, "fenceKey")?;
    let token = self::token(&token)?;
    let value = string(&value, "value")?;
    command_object(&fence::redis_fenced_set(
        &data_key, &fence_key, token, &value,
    ))
}

/// Reads the reply of `redisFencedSet` for `resource`: `{ ok: true }` when written,
/// `{ ok: false, stale: { resource, token, highest, message } }` when refused,
/// `{ ok: false, protocol: message }` for a reply of another shape (an error reply too).
#[wasm_bindgen(js_name = readRedisFencedSet)]
pub fn read_redis_fenced_set(
    resource: JsValue,
    token: JsValue,
    reply: JsValue,
) -> Result<JsValue, JsValue> {
    let resource = string(&resource, "resource")?;
    let token = self::token(&token)?;
    let o: JsValue = Object::new().into();
    match fence::read_redis_fenced_set(&resource, token, &to_redis_value(&reply, 0)) {
        Ok(Ok(())) => put(&o, "ok", true)?,
        Ok(Err(stale)) => {
            put(&o, "ok", false)?;
            put(&o, "stale", stale_object(&stale)?)?;
        }
        Err(protocol) => {
            put(&o, "ok", false)?;
            put(&o, "protocol", protocol.to_string())?;
        }
    }
    Ok(o)
}

/// Every script fencepost runs on Redis: `{ acquire: { sha1, source }, renew, release,
/// fenced_set, acquire_fair, release_fair }`.
#[wasm_bindgen(js_name = redisScripts)]
pub fn redis_scripts() -> Result<JsValue, JsValue> {
    let scripts: JsValue = Object::new().into();
    for s in RedisScript::ALL {
        let entry: JsValue = Object::new().into();
        put(&entry, "sha1", s.sha1())?;
        put(&entry, "source", s.source())?;
        put(&scripts, script_name(s), entry)?;
    }
    Ok(scripts)
}

/// The lease key of lock `name` under `keyPrefix` (`{prefix}{{name}}:lock`).
#[wasm_bindgen(js_name = lockKey)]
pub fn lock_key(key_prefix: JsValue, name: JsValue) -> Result<String, JsValue> {
    Ok(RedisSettings {
        key_prefix: string(&key_prefix, "keyPrefix")?,
        ..RedisSettings::default()
    }
    .lock_key(&string(&name, "name")?))
}

/// The fencing-token counter key of lock `name` under `keyPrefix`.
#[wasm_bindgen(js_name = tokenKey)]
pub fn token_key(key_prefix: JsValue, name: JsValue) -> Result<String, JsValue> {
    Ok(RedisSettings {
        key_prefix: string(&key_prefix, "keyPrefix")?,
        ..RedisSettings::default()
    }
    .token_key(&string(&name, "name")?))
}

/// The etcd key the acquisition `ownerId` puts for lock `name` under `keyPrefix`
/// (`{keyPrefix}{name}/{lease id, 16 hex digits}`); while it holds the lock, the key's
/// create revision is its fencing token.
#[wasm_bindgen(js_name = etcdHolderKey)]
pub fn etcd_holder_key(
    key_prefix: JsValue,
    name: JsValue,
    owner_id: JsValue,
) -> Result<String, JsValue> {
    let key_prefix = string(&key_prefix, "keyPrefix")?;
    let name = string(&name, "name")?;
    let owner = self::owner_id(&owner_id)?;
    Ok(EtcdSettings { key_prefix }.holder_key(&name, &owner))
}

/// The etcd lease id of the acquisition `ownerId` (its first 8 bytes, big-endian, as a
/// positive int64), as a bigint.
#[wasm_bindgen(js_name = etcdLeaseId)]
pub fn etcd_lease_id(owner_id: JsValue) -> Result<JsValue, JsValue> {
    Ok(JsValue::from(etcd::lease_id(&self::owner_id(&owner_id)?)))
}

/// `[key, value]` pairs of strings.
fn string_pairs(value: &JsValue, name: &str) -> Result<Vec<(String, String)>, JsValue> {
    if !is_array(value).unwrap_or(false) {
        return Err(config_error(&format!(
            "{name} must be an array of [key, value] pairs, got {}",
            type_name(value)
        )));
    }
    let length = field(value, "length")?
        .and_then(|n| n.as_f64())
        .unwrap_or(0.0);
    let mut out = Vec::new();
    let mut i = 0.0;
    while i < length {
        let item = get(value, &JsValue::from_f64(i))?;
        let pair = string_array(&item, &format!("{name}[{i}]"))?;
        let [key, value]: [String; 2] = pair.try_into().map_err(|pair: Vec<String>| {
            config_error(&format!(
                "{name}[{i}] must be a [key, value] pair of strings, got {} items",
                pair.len()
            ))
        })?;
        out.push((key, value));
        i += 1.0;
    }
    Ok(out)
}

/// A fenced etcd transaction as a gateway call `{ backend: "etcd", call: "txn", path, body }`:
/// puts every `[key, value]` of `puts` and deletes every key of `deletes` only while the
/// key of `ownerId` for lock `name` still has create revision `token` (etcd's `IsOwner`
/// comparison). Read the reply with `readEtcdFencedTxn`.
#[wasm_bindgen(js_name = etcdFencedTxn)]
pub fn etcd_fenced_txn(
    key_prefix: JsValue,
    name: JsValue,
    owner_id: JsValue,
    token: JsValue,
    puts: JsValue,
    deletes: JsValue,
) -> Result<JsValue, JsValue> {
    let key_prefix = string(&key_prefix, "keyPrefix")?;
    let name = string(&name, "name")?;
    let owner = self::owner_id(&owner_id)?;
    let token = self::token(&token)?;
    let mut ops: Vec<EtcdOp> = string_pairs(&puts, "puts")?
        .into_iter()
        .map(|(key, value)| EtcdOp::Put {
            key,
            value,
            lease: 0,
        })
        .collect();
    if !deletes.is_undefined() && !deletes.is_null() {
        for key in string_array(&deletes, "deletes")? {
            ops.push(EtcdOp::Delete { key });
        }
    }
    let settings = EtcdSettings { key_prefix };
    let key = settings.holder_key(&name, &owner);
    let o: JsValue = Object::new().into();
    set_etcd_call(&o, &settings.fenced_txn(&name, &key, token, ops))?;
    Ok(o)
}

/// Reads the reply of `etcdFencedTxn` (the gateway's JSON text) for lock `name`:
/// `{ ok: true, revision }` (a bigint) when applied; `{ ok: false, stale: { resource,
/// token, highest, message } }` when the lease no longer holds the lock (`highest` = the
/// current holder's token, `0n` when nobody holds it); `{ ok: false, protocol: message }`
/// for an error document or a reply of another shape (a value that is not text too).
#[wasm_bindgen(js_name = readEtcdFencedTxn)]
pub fn read_etcd_fenced_txn(
    name: JsValue,
    token: JsValue,
    reply: JsValue,
) -> Result<JsValue, JsValue> {
    let name = string(&name, "name")?;
    let token = self::token(&token)?;
    let o: JsValue = Object::new().into();
    #[allow(unreachable_patterns)]
    match etcd::read_etcd_fenced_txn(&etcd_reply_text(&reply)) {
        Ok(EtcdFenced::Applied { revision }) => {
            put(&o, "ok", true)?;
            put(&o, "revision", JsValue::from(revision))?;
        }
        Ok(EtcdFenced::Refused { holder }) => {
            let stale = fencepost_core::StaleToken {
                resource: name,
                token,
                highest: holder.unwrap_or(FencingToken(0)),
            };
            put(&o, "ok", false)?;
            put(&o, "stale", stale_object(&stale)?)?;
        }
        Ok(_) => {
            put(&o, "ok", false)?;
            put(&o, "protocol", "unknown fenced transaction outcome")?;
        }
        Err(protocol) => {
            put(&o, "ok", false)?;
            put(&o, "protocol", protocol.to_string())?;
        }
    }
    Ok(o)
}

/// Version of the fencepost-core crate compiled into this module.
#[wasm_bindgen(js_name = coreVersion)]
pub fn core_version() -> String {
    env!("CARGO_PKG_VERSION").to_owned()
}
