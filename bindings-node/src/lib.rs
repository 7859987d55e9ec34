//! The native half of the `fencepost` npm package: `fencepost-core` as a napi-rs addon.
//!
//! This file converts types and reports errors; it makes no lock decision. The
//! JavaScript half (`bindings-node/js/`, shared word for word with the WASM package)
//! checks the types of user input, runs the driver loop on the event loop and turns
//! these plain objects into the public API.
//!
//! Conventions of this low-level interface (the WASM addon exposes the same one):
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
//!   name, `detail` = the message without the option name) or `"ERR_CLOCK"` (time went
//!   backwards). Fence refusals and unreadable replies are *returned* as data, and the
//!   JavaScript half throws its own error classes.
//!
//! Nothing here panics on any input: every conversion is checked and reported.

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
use napi::bindgen_prelude::{Array, BigInt, BufferSlice, Env, Object, Unknown};
use napi::{JsValue, Status, ValueType};
use napi_derive::napi;

// ---- errors -----------------------------------------------------------------------------

/// Builds a JS `Error` with `code` and extra string properties, throws it, and returns the
/// napi error that tells napi-rs an exception is already pending. If the error object
/// cannot be built (the environment is shutting down), a plain error is returned instead.
fn throw(env: &Env, code: &str, message: &str, props: &[(&str, Option<&str>)]) -> napi::Error {
    let thrown = (|| -> napi::Result<()> {
        let mut error = env.create_error(napi::Error::new(Status::GenericFailure, message))?;
        error.set("code", code)?;
        for (key, value) in props {
            if let Some(value) = value {
                error.set(*key, *value)?;
            }
        }
        env.throw(error)
    })();
    match thrown {
        Ok(()) => napi::Error::from_status(Status::PendingException),
        Err(_) => napi::Error::new(Status::InvalidArg, format!("{code}: {message}")),
    }
}

fn config_error(env: &Env, message: &str) -> napi::Error {
    throw(
        env,
        "ERR_CONFIG",
        message,
        &[("kind", Some("invalid_argument"))],
    )
}

fn usage_error(env: &Env, err: &UsageError) -> napi::Error {
    let message = err.to_string();
    match err {
        UsageError::TimeWentBackwards { .. } => throw(
            env,
            "ERR_CLOCK",
            &message,
            &[("kind", Some("time_went_backwards"))],
        ),
        UsageError::InvalidOption {
            option,
            message: detail,
        } => throw(
            env,
            "ERR_CONFIG",
            &message,
            &[
                ("kind", Some("invalid_option")),
                ("option", Some(option)),
                ("detail", Some(detail)),
            ],
        ),
        UsageError::UnsafePurpose { .. } => throw(
            env,
            "ERR_CONFIG",
            &message,
            &[
                ("kind", Some("unsafe_purpose")),
                ("option", Some("purpose")),
            ],
        ),
        UsageError::InvalidName { .. } => throw(
            env,
            "ERR_CONFIG",
            &message,
            &[("kind", Some("invalid_name"))],
        ),
        UsageError::UnknownLock { .. } => throw(
            env,
            "ERR_CONFIG",
            &message,
            &[("kind", Some("unknown_lock"))],
        ),
    }
}

// ---- argument conversion ------------------------------------------------------------------

/// The largest integer a `number` holds exactly.
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// Milliseconds (finite, ≥ 0, possibly fractional) to whole nanoseconds:
/// `round(ms × 1e6)`, saturating at `u64::MAX`.
fn ms_to_ns(env: &Env, ms: f64, name: &str) -> napi::Result<u64> {
    if !ms.is_finite() || ms < 0.0 {
        return Err(config_error(
            env,
            &format!("{name} must be a finite number of milliseconds ≥ 0, got {ms}"),
        ));
    }
    // `as` saturates: values past u64::MAX become u64::MAX.
    Ok((ms * 1e6).round() as u64)
}

fn duration(env: &Env, ms: f64, name: &str) -> napi::Result<Duration> {
    ms_to_ns(env, ms, name).map(Duration::from_nanos)
}

fn instant(env: &Env, ms: f64) -> napi::Result<Instant> {
    ms_to_ns(env, ms, "nowMs").map(Instant::from_nanos)
}

/// A lock or request id: an integer in 0 ..= 2^53 − 1.
fn id(env: &Env, value: f64, name: &str) -> napi::Result<u64> {
    if value.is_finite() && value >= 0.0 && value.fract() == 0.0 && value <= MAX_SAFE_INTEGER {
        Ok(value as u64)
    } else {
        Err(config_error(
            env,
            &format!("{name} must be an integer id ≥ 0, got {value}"),
        ))
    }
}

/// A bigint in 0 ..= 2^64 − 1.
fn bigint_u64(env: &Env, value: &BigInt, name: &str) -> napi::Result<u64> {
    match (value.sign_bit, value.words.as_slice()) {
        (_, []) => Ok(0),
        (false, [word]) => Ok(*word),
        (true, [0]) => Ok(0),
        _ => Err(config_error(
            env,
            &format!("{name} must be a bigint in 0n ..= 2n ** 64n - 1n"),
        )),
    }
}

fn token(env: &Env, value: &BigInt) -> napi::Result<FencingToken> {
    bigint_u64(env, value, "token").map(FencingToken)
}

/// Lock options in the JavaScript shape (milliseconds, camelCase). A missing field (or
/// `null`/`undefined`) takes the core's default; `acquireTimeoutMs` and `renewEveryMs`
/// default to "wait forever" and "ttl / 3". Only types are converted here: every range
/// is the core's to check (`Machine::check_acquire`).
#[napi(object)]
pub struct LockOptionsMs {
    pub ttl_ms: Option<f64>,
    /// `"efficiency"` or `"correctness"`.
    pub purpose: Option<String>,
    pub accept_failover_risk: Option<bool>,
    pub acquire_timeout_ms: Option<f64>,
    pub retry_base_ms: Option<f64>,
    pub retry_max_ms: Option<f64>,
    pub renew_every_ms: Option<f64>,
    pub auto_renew: Option<bool>,
    pub drift_factor: Option<f64>,
    pub clock_margin_ms: Option<f64>,
}

fn lock_options(env: &Env, o: &LockOptionsMs) -> napi::Result<LockOptions> {
    let mut options = LockOptions::default();
    if let Some(ms) = o.ttl_ms {
        options.ttl = duration(env, ms, "ttlMs")?;
    }
    if let Some(purpose) = o.purpose.as_deref() {
        options.purpose = match purpose {
            "efficiency" => Purpose::Efficiency,
            "correctness" => Purpose::Correctness,
            other => {
                return Err(config_error(
                    env,
                    &format!("purpose must be 'efficiency' or 'correctness', got {other:?}"),
                ))
            }
        };
    }
    if let Some(risk) = o.accept_failover_risk {
        options.accept_failover_risk = risk;
    }
    if let Some(ms) = o.acquire_timeout_ms {
        options.acquire_timeout = Some(duration(env, ms, "acquireTimeoutMs")?);
    }
    if let Some(ms) = o.retry_base_ms {
        options.retry_base = duration(env, ms, "retryBaseMs")?;
    }
    if let Some(ms) = o.retry_max_ms {
        options.retry_max = duration(env, ms, "retryMaxMs")?;
    }
    if let Some(ms) = o.renew_every_ms {
        options.renew_every = Some(duration(env, ms, "renewEveryMs")?);
    }
    if let Some(auto) = o.auto_renew {
        options.auto_renew = auto;
    }
    if let Some(drift) = o.drift_factor {
        // NaN and out-of-range values are the core's to refuse, naming the range.
        options.drift_factor = drift;
    }
    if let Some(ms) = o.clock_margin_ms {
        options.clock_margin = duration(env, ms, "clockMarginMs")?;
    }
    Ok(options)
}

/// The backend a machine speaks: `kind` `"redis"` (default) or `"etcd"`. `fair` is a Redis
/// option (etcd locks are always FIFO): `fair: true` on etcd is refused.
fn backend(
    env: &Env,
    kind: Option<&str>,
    key_prefix: Option<String>,
    fair: Option<bool>,
) -> napi::Result<Backend> {
    match kind.unwrap_or("redis") {
        "redis" => {
            let defaults = RedisSettings::default();
            Ok(Backend::Redis(RedisSettings {
                key_prefix: key_prefix.unwrap_or(defaults.key_prefix),
                fair: fair.unwrap_or(defaults.fair),
            }))
        }
        "etcd" if fair == Some(true) => Err(config_error(
            env,
            "fair applies to Redis machines only: etcd locks are always granted in FIFO order",
        )),
        "etcd" => Ok(Backend::Etcd(EtcdSettings {
            key_prefix: key_prefix.unwrap_or_else(|| EtcdSettings::default().key_prefix),
        })),
        other => Err(config_error(
            env,
            &format!("kind must be 'redis' or 'etcd', got {other:?}"),
        )),
    }
}

// ---- replies: JS value -> RedisValue -> JS value -------------------------------------------

/// Deepest nesting of reply arrays accepted; deeper input becomes an error value.
const MAX_REPLY_DEPTH: usize = 32;

/// Converts what a Redis client returned into a `RedisValue`. Never fails: a value that
/// cannot be read becomes `RedisValue::Error` describing it, which the core reads as a
/// protocol error.
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
fn to_redis_value(env: &Env, value: Unknown<'_>, depth: usize) -> RedisValue {
    match read_redis_value(env, value, depth) {
        Ok(v) => v,
        Err(e) => {
            // A getter or proxy trap of the value threw: that exception is the reply's
            // fault, not the caller's. Clear it so it does not escape this call.
            clear_pending_exception(env);
            RedisValue::Error(format!(
                "fencepost: unreadable reply value: {}",
                if e.reason.is_empty() {
                    "reading it threw"
                } else {
                    &e.reason
                }
            ))
        }
    }
}

fn clear_pending_exception(env: &Env) {
    let mut pending = false;
    // SAFETY: `env` is the live environment of the current call.
    unsafe {
        if napi::sys::napi_is_exception_pending(env.raw(), &mut pending)
            == napi::sys::Status::napi_ok
            && pending
        {
            let mut exception = std::ptr::null_mut();
            napi::sys::napi_get_and_clear_last_exception(env.raw(), &mut exception);
        }
    }
}

fn unsupported(what: &str) -> RedisValue {
    RedisValue::Error(format!(
        "fencepost: unsupported reply value from the adapter: {what}"
    ))
}

fn read_redis_value(env: &Env, value: Unknown<'_>, depth: usize) -> napi::Result<RedisValue> {
    if depth > MAX_REPLY_DEPTH {
        return Ok(RedisValue::Error(format!(
            "fencepost: reply nested deeper than {MAX_REPLY_DEPTH} arrays"
        )));
    }
    Ok(match value.get_type()? {
        ValueType::Undefined | ValueType::Null => RedisValue::Nil,
        ValueType::Boolean => RedisValue::Int(i64::from(unsafe { value.cast::<bool>()? })),
        ValueType::Number => {
            let n = unsafe { value.cast::<f64>()? };
            // ±2^63 are exact doubles; an integral value in -2^63 ..< 2^63 fits in i64.
            const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
            if n.fract() == 0.0 && (-TWO_POW_63..TWO_POW_63).contains(&n) {
                RedisValue::Int(n as i64)
            } else {
                unsupported(&format!("the number {n} (not a 64-bit integer)"))
            }
        }
        ValueType::BigInt => {
            let b = unsafe { value.cast::<BigInt>()? };
            match (b.sign_bit, b.words.as_slice()) {
                (_, []) => RedisValue::Int(0),
                (false, [w]) => match i64::try_from(*w) {
                    Ok(n) => RedisValue::Int(n),
                    Err(_) => unsupported("a bigint outside the 64-bit range"),
                },
                (true, [w]) => match i64::try_from(*w) {
                    Ok(n) => RedisValue::Int(-n),
                    Err(_) if *w == i64::MIN.unsigned_abs() => RedisValue::Int(i64::MIN),
                    Err(_) => unsupported("a bigint outside the 64-bit range"),
                },
                _ => unsupported("a bigint outside the 64-bit range"),
            }
        }
        ValueType::String => RedisValue::Data(unsafe { value.cast::<String>()? }),
        ValueType::Object => {
            if value.is_error()? {
                let object = unsafe { value.cast::<Object>()? };
                let message = object
                    .get::<Unknown>("message")?
                    .map(|m| {
                        m.coerce_to_string()
                            .and_then(|s| s.into_utf8()?.into_owned())
                    })
                    .transpose()?
                    .unwrap_or_default();
                RedisValue::Error(if message.is_empty() {
                    "ERR error reply without a message".to_owned()
                } else {
                    message
                })
            } else if value.is_array()? {
                let array = unsafe { value.cast::<Array>()? };
                let mut items = Vec::with_capacity(array.len() as usize);
                for i in 0..array.len() {
                    let item = array.get::<Unknown>(i)?;
                    items.push(match item {
                        Some(item) => to_redis_value(env, item, depth + 1),
                        None => RedisValue::Nil,
                    });
                }
                RedisValue::Array(items)
            } else if value.is_buffer()? {
                let bytes = unsafe { value.cast::<BufferSlice>()? };
                RedisValue::Data(String::from_utf8_lossy(&bytes).into_owned())
            } else {
                let object = unsafe { value.cast::<Object>()? };
                let keys = Object::keys(&object)?;
                match keys.as_slice() {
                    [key] if key == "status" || key == "error" => {
                        match object.get::<Unknown>(key)? {
                            Some(text) if text.get_type()? == ValueType::String => {
                                let text = unsafe { text.cast::<String>()? };
                                if key == "status" {
                                    RedisValue::Status(text)
                                } else {
                                    RedisValue::Error(text)
                                }
                            }
                            _ => unsupported(&format!("{{ {key}: <not a string> }}")),
                        }
                    }
                    _ => unsupported(&format!("an object with keys {keys:?}")),
                }
            }
        }
        other => unsupported(&format!("a value of type {other}")),
    })
}

/// A `RedisValue` as a Redis client would return it: `null`, a `number` (a `bigint` past
/// 2^53), a `string`, an `Array`, or an `Error` whose message is the error reply.
fn from_redis_value<'env>(env: &'env Env, value: &RedisValue) -> napi::Result<Unknown<'env>> {
    use napi::bindgen_prelude::ToNapiValue;
    let raw = unsafe {
        match value {
            RedisValue::Nil => ToNapiValue::to_napi_value(env.raw(), napi::bindgen_prelude::Null)?,
            RedisValue::Int(n) if (n.unsigned_abs() as f64) <= MAX_SAFE_INTEGER => {
                ToNapiValue::to_napi_value(env.raw(), *n as f64)?
            }
            RedisValue::Int(n) => ToNapiValue::to_napi_value(env.raw(), BigInt::from(*n))?,
            RedisValue::Data(s) | RedisValue::Status(s) => {
                ToNapiValue::to_napi_value(env.raw(), s.as_str())?
            }
            RedisValue::Array(items) => {
                let mut array = env.create_array(u32::try_from(items.len()).unwrap_or(u32::MAX))?;
                for (i, item) in items.iter().enumerate() {
                    let i = u32::try_from(i).unwrap_or(u32::MAX);
                    array.set(i, from_redis_value(env, item)?)?;
                }
                ToNapiValue::to_napi_value(env.raw(), array)?
            }
            RedisValue::Error(message) => {
                let mut error =
                    env.create_error(napi::Error::new(Status::GenericFailure, message))?;
                error.set("code", "ERR_REDIS_REPLY")?;
                ToNapiValue::to_napi_value(env.raw(), error)?
            }
        }
    };
    Ok(unsafe { Unknown::from_raw_unchecked(env.raw(), raw) })
}

// ---- etcd: replies as JSON text, requests as gateway calls ---------------------------------

/// An etcd reply as the JSON text the gateway returned: a `string` (or UTF-8 bytes in a
/// `Buffer` / `Uint8Array`). Never fails: anything else becomes text naming what it was,
/// which the core reads as a protocol error.
fn etcd_reply_text(value: Unknown<'_>) -> String {
    let text = (|| -> napi::Result<Result<String, String>> {
        Ok(match value.get_type()? {
            ValueType::String => Ok(unsafe { value.cast::<String>()? }),
            ValueType::Object if value.is_buffer()? => {
                let bytes = unsafe { value.cast::<BufferSlice>()? };
                String::from_utf8(bytes.to_vec()).map_err(|_| "bytes that are not UTF-8".to_owned())
            }
            other => Err(format!("a value of type {other}")),
        })
    })();
    match text {
        Ok(Ok(text)) => text,
        Ok(Err(what)) => format!("<not an etcd JSON reply: {what}>"),
        Err(_) => "<not an etcd JSON reply: reading it threw>".to_owned(),
    }
}

/// Sets `backend: "etcd"`, `call`, `path`, `body` and, for a watch, `timeoutMs` on `o`.
fn set_etcd_call(o: &mut Object<'_>, req: &EtcdRequest) -> napi::Result<()> {
    o.set("backend", "etcd")?;
    o.set("call", req.call_name())?;
    o.set("path", req.gateway_path())?;
    o.set("body", req.gateway_body())?;
    if let Some(ms) = req.watch_timeout_ms() {
        // whole milliseconds; exact as a number below 2^53 (a TTL is at most 2^31 ms)
        o.set("timeoutMs", ms as f64)?;
    }
    Ok(())
}

/// An owner id: 32 hex digits (the form `Machine.owner` returns).
fn owner_id(env: &Env, hex: &str) -> napi::Result<fencepost_core::OwnerId> {
    let bad = || {
        let shown: String = hex.chars().take(40).collect();
        config_error(
            env,
            &format!("ownerId must be 32 hex digits (lease.ownerId), got {shown:?}"),
        )
    };
    fencepost_core::OwnerId::from_hex(hex).ok_or_else(bad)
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

fn script_by_name(env: &Env, name: &str) -> napi::Result<RedisScript> {
    RedisScript::ALL
        .into_iter()
        .find(|s| script_name(*s) == name)
        .ok_or_else(|| {
            config_error(
                env,
                &format!(
                    "script must be one of {}, got {name:?}",
                    RedisScript::ALL
                        .iter()
                        .map(|s| format!("'{}'", script_name(*s)))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })
}

/// A Redis script call as data: what an adapter needs to run
/// `EVALSHA sha1 keys.length ...keys ...args` (and `EVAL` with the source on `NOSCRIPT`).
#[napi(object)]
pub struct ScriptCall {
    /// `"acquire"`, `"renew"`, `"release"`, `"fenced_set"`, `"acquire_fair"` or
    /// `"release_fair"`.
    pub script: String,
    pub keys: Vec<String>,
    pub args: Vec<String>,
}

fn command_object<'env>(env: &'env Env, cmd: &RedisCommand) -> napi::Result<Object<'env>> {
    let mut o = Object::new(env)?;
    o.set("script", script_name(cmd.script))?;
    o.set("sha1", cmd.script.sha1())?;
    o.set("keys", cmd.keys.clone())?;
    o.set("args", cmd.args.clone())?;
    Ok(o)
}

// Outputs cross to JavaScript as ONE flat array of primitives (`Machine.pollFlat`):
// building an object per output through napi (a named-property set per field) cost more
// than the core's whole decision, and this flat form takes a fraction of it. The layout
// is the core's (`fencepost_core::js_outputs`, shared with the WASM addon); the JavaScript half
// (js/machine.js, `decodeOutputs`) turns it into the output objects.

/// Appends one output's flat record to `out`.
fn push_output(out: &mut Array<'_>, output: &Output) -> napi::Result<()> {
    js_outputs::encode_output(output, &mut |value| match value {
        FlatValue::Number(n) => out.insert(n),
        FlatValue::Text(t) => out.insert(t.as_ref()),
        FlatValue::Token(t) => out.insert(BigInt::from(t)),
        FlatValue::Null => out.insert(Option::<f64>::None),
    })
}

// ---- Machine --------------------------------------------------------------------------------

/// The sans-IO lock machine for a Redis or etcd backend: many locks, no I/O, no clock.
///
/// Every `nowMs` is the host's monotonic time in milliseconds (`performance.now()`); an
/// earlier one than given before throws `ERR_CLOCK`. After every input call `pollFlat()`.
#[napi(js_name = "Machine")]
pub struct Machine {
    inner: CoreMachine,
}

#[napi]
impl Machine {
    /// `keyPrefix` prefixes every key (default `"fencepost:"` on Redis, `"fencepost/"` on
    /// etcd). `seed` (a bigint) makes owner ids and jitter deterministic, for tests only;
    /// without it the machine seeds itself from the operating system's secure randomness.
    /// `fair` (default false, Redis only) turns on fair, instant hand-off: contended
    /// acquirers queue on the server and park on a blocking pop (requests with
    /// `backend: "redis_blpop"`, `operation: "wait"`). `kind` is `"redis"` (default) or
    /// `"etcd"` (requests with `backend: "etcd"`; a waiter parks on a watch, `operation:
    /// "wait"`).
    #[napi(constructor)]
    pub fn new(
        env: Env,
        key_prefix: Option<String>,
        seed: Option<BigInt>,
        fair: Option<bool>,
        kind: Option<String>,
    ) -> napi::Result<Self> {
        let backend = backend(&env, kind.as_deref(), key_prefix, fair)?;
        let inner = match seed {
            Some(seed) => CoreMachine::with_seed(backend, bigint_u64(&env, &seed, "seed")?),
            None => CoreMachine::new(backend)
                .map_err(|e| throw(&env, "ERR_BACKEND", &e.to_string(), &[]))?,
        };
        Ok(Machine { inner })
    }

    /// Checks a lock name and options exactly as `acquire` would, without acquiring.
    #[napi]
    pub fn check(&self, env: Env, name: String, options: LockOptionsMs) -> napi::Result<()> {
        let options = lock_options(&env, &options)?;
        self.inner
            .check_acquire(&name, &options)
            .map_err(|e| usage_error(&env, &e))
    }

    /// Starts acquiring `name`; returns the new lock id.
    #[napi]
    pub fn acquire(
        &mut self,
        env: Env,
        now_ms: f64,
        name: String,
        options: LockOptionsMs,
    ) -> napi::Result<f64> {
        let now = instant(&env, now_ms)?;
        let options = lock_options(&env, &options)?;
        self.inner
            .acquire(now, &name, options)
            .map(|lock| lock.0 as f64)
            .map_err(|e| usage_error(&env, &e))
    }

    /// Releases `lock`, or cancels its acquisition. A finished lock ignores it.
    #[napi]
    pub fn release(&mut self, env: Env, now_ms: f64, lock: f64) -> napi::Result<()> {
        let input = Input::Release {
            now: instant(&env, now_ms)?,
            lock: LockId(id(&env, lock, "lock")?),
        };
        self.feed(&env, input)
    }

    /// The server's reply to request `request`: on a Redis machine, as the Redis client
    /// returned it (see the conversion table in `to_redis_value`); on an etcd machine, the
    /// JSON text the gateway answered (error documents included; for a watch, the first
    /// line with events, or `"{}"` at its timeout); a value that is not text is read as a
    /// protocol error. Replies to unknown requests are ignored.
    #[napi]
    pub fn reply(
        &mut self,
        env: Env,
        now_ms: f64,
        request: f64,
        value: Unknown<'_>,
    ) -> napi::Result<()> {
        let now = instant(&env, now_ms)?;
        let request = RequestId(id(&env, request, "request")?);
        let reply = match self.inner.backend() {
            Backend::Etcd(_) => Reply::Etcd(etcd_reply_text(value)),
            _ => Reply::Redis(to_redis_value(&env, value, 0)),
        };
        let input = Input::Reply {
            now,
            request,
            reply,
        };
        self.feed(&env, input)
    }

    /// Request `request` failed in transport (connection error, client timeout, no reply
    /// by its deadline): it may or may not have reached the server.
    #[napi]
    pub fn transport_error(
        &mut self,
        env: Env,
        now_ms: f64,
        request: f64,
        message: String,
    ) -> napi::Result<()> {
        let input = Input::TransportError {
            now: instant(&env, now_ms)?,
            request: RequestId(id(&env, request, "request")?),
            message,
        };
        self.feed(&env, input)
    }

    /// Time passed: fires due timers. Early and spurious calls are harmless.
    #[napi]
    pub fn timeout(&mut self, env: Env, now_ms: f64) -> napi::Result<()> {
        let input = Input::Timeout {
            now: instant(&env, now_ms)?,
        };
        self.feed(&env, input)
    }

    /// Drains every pending output as one flat array of primitives (the layout is above
    /// `push_output`): `[nextTimeoutMs | null, ...records]`. Requests and events come in
    /// order; `nextTimeoutMs` is when to call `timeout`, or `null` when no timer is set.
    /// js/machine.js decodes it (`LockMachine.poll()` returns `{ outputs, nextTimeoutMs }`).
    #[napi(ts_return_type = "Array<unknown>")]
    pub fn poll_flat<'env>(&mut self, env: &'env Env) -> napi::Result<Array<'env>> {
        let mut out = env.create_array(1)?;
        let mut next: Option<f64> = None;
        loop {
            match self.inner.poll_output() {
                Output::Timeout(at) => {
                    next = Some(ns_to_ms(at.as_nanos()));
                    break;
                }
                Output::Idle => break,
                output => push_output(&mut out, &output)?,
            }
        }
        out.set(0, next)?;
        Ok(out)
    }

    /// The owner id of `lock` (32 lowercase hex digits, the value in the lock key), or
    /// `null` once the machine has forgotten the lock.
    #[napi]
    pub fn owner(&self, env: Env, lock: f64) -> napi::Result<Option<String>> {
        let lock = LockId(id(&env, lock, "lock")?);
        Ok(self.inner.owner(lock).map(|o| o.to_string()))
    }

    /// The validity deadline of `lock` (monotonic ms) while it is held, else `null`.
    #[napi]
    pub fn valid_until_ms(&self, env: Env, lock: f64) -> napi::Result<Option<f64>> {
        let lock = LockId(id(&env, lock, "lock")?);
        Ok(self
            .inner
            .valid_until(lock)
            .map(|at| ns_to_ms(at.as_nanos())))
    }

    /// How many locks the machine tracks (pending, held, or finished with requests out).
    #[napi(getter)]
    pub fn lock_count(&self) -> u32 {
        u32::try_from(self.inner.lock_count()).unwrap_or(u32::MAX)
    }

    /// How many requests await a reply or transport error.
    #[napi(getter)]
    pub fn requests_in_flight(&self) -> u32 {
        u32::try_from(self.inner.requests_in_flight()).unwrap_or(u32::MAX)
    }
}

impl Machine {
    fn feed(&mut self, env: &Env, input: Input) -> napi::Result<()> {
        self.inner
            .handle_input(input)
            .map_err(|e| usage_error(env, &e))
    }
}

// ---- MemoryRedis ----------------------------------------------------------------------------

/// The core's in-memory Redis (`fencepost_core::memory::MemoryRedis`): runs fencepost's
/// scripts with TTLs on the host's monotonic time.
#[napi(js_name = "MemoryRedis")]
pub struct MemoryRedis {
    inner: fencepost_core::memory::MemoryRedis,
}

#[napi]
impl MemoryRedis {
    /// An empty key space.
    #[napi(constructor)]
    pub fn new() -> Self {
        MemoryRedis {
            inner: fencepost_core::memory::MemoryRedis::new(),
        }
    }

    /// Runs a script call (a request from `poll`, or a command from `redisFencedSet`) at
    /// `nowMs` and returns what a Redis client would: `number`, `string`, `null`, an
    /// array, or (returned, not thrown) an `Error` for an error reply.
    #[napi(ts_return_type = "unknown")]
    pub fn execute<'env>(
        &mut self,
        env: &'env Env,
        now_ms: f64,
        command: ScriptCall,
    ) -> napi::Result<Unknown<'env>> {
        let now = instant(env, now_ms)?;
        let cmd = RedisCommand {
            script: script_by_name(env, &command.script)?,
            keys: command.keys,
            args: command.args,
        };
        let value = self.inner.eval(now, &cmd);
        from_redis_value(env, &value)
    }

    /// `GET key` at `nowMs` (expired keys are gone).
    #[napi]
    pub fn get(&self, env: Env, now_ms: f64, key: String) -> napi::Result<Option<String>> {
        Ok(self
            .inner
            .get(instant(&env, now_ms)?, &key)
            .map(str::to_owned))
    }

    /// `PTTL key` in ms at `nowMs`: `null` when missing, -1 when it has no expiry.
    #[napi]
    pub fn pttl(&self, env: Env, now_ms: f64, key: String) -> napi::Result<Option<f64>> {
        Ok(self
            .inner
            .pttl(instant(&env, now_ms)?, &key)
            .map(|ms| ms as f64))
    }

    /// `LPOP key` at `nowMs`: the head of a list (a fair waiter's wake-up), or `null`
    /// when the list is missing, empty or expired. Never blocks: hosts emulating `BLPOP`
    /// park the caller themselves until this yields or the timeout passes.
    #[napi]
    pub fn lpop(&mut self, env: Env, now_ms: f64, key: String) -> napi::Result<Option<String>> {
        Ok(self.inner.lpop(instant(&env, now_ms)?, &key))
    }

    /// `DEL key`; `true` if it existed.
    #[napi]
    pub fn delete(&mut self, key: String) -> bool {
        self.inner.delete(&key)
    }

    /// Forgets every key, as a restart without persistence does.
    #[napi]
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
fn stale_object<'env>(
    env: &'env Env,
    stale: &fencepost_core::StaleToken,
) -> napi::Result<Object<'env>> {
    let mut o = Object::new(env)?;
    o.set("resource", stale.resource.as_str())?;
    o.set("token", BigInt::from(stale.token.get()))?;
    o.set("highest", BigInt::from(stale.highest.get()))?;
    o.set("message", stale.to_string())?;
    Ok(o)
}

/// An in-memory fence: the highest fencing token accepted per resource.
#[napi(js_name = "Fence")]
pub struct Fence {
    inner: fence::Fence,
}

#[napi]
impl Fence {
    /// An empty fence.
    #[napi(constructor)]
    pub fn new() -> Self {
        Fence {
            inner: fence::Fence::new(),
        }
    }

    /// Accepts a write to `resource` carrying `token` (and remembers it): returns `null`.
    /// Refuses a token lower than one accepted before: returns
    /// `{ resource, token, highest, message }`.
    #[napi(
        ts_return_type = "{ resource: string, token: bigint, highest: bigint, message: string } | null"
    )]
    pub fn check<'env>(
        &mut self,
        env: &'env Env,
        resource: String,
        token: BigInt,
    ) -> napi::Result<Option<Object<'env>>> {
        let token = self::token(env, &token)?;
        match self.inner.check(&resource, token) {
            Ok(()) => Ok(None),
            Err(stale) => stale_object(env, &stale).map(Some),
        }
    }

    /// The highest token accepted for `resource`, or `null`.
    #[napi]
    pub fn highest(&self, resource: String) -> Option<BigInt> {
        self.inner.highest(&resource).map(|t| BigInt::from(t.get()))
    }
}

impl Default for Fence {
    fn default() -> Self {
        Self::new()
    }
}

/// The SQL of a fenced conditional update. `style` `"dollar"` (node-postgres: `$1` id,
/// `$2` token, `$3…` columns) or `"pyformat"`. Zero rows updated means a stale token.
#[napi]
pub fn sql_fenced_update(
    env: Env,
    table: String,
    id_column: String,
    token_column: String,
    columns: Vec<String>,
    style: String,
) -> napi::Result<String> {
    let style = match style.as_str() {
        "dollar" => ParamStyle::Dollar,
        "pyformat" => ParamStyle::Pyformat,
        other => {
            return Err(config_error(
                &env,
                &format!("style must be 'dollar' or 'pyformat', got {other:?}"),
            ))
        }
    };
    let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
    fence::sql_fenced_update(&table, &id_column, &token_column, &columns, style)
        .map_err(|e| config_error(&env, &e.to_string()))
}

/// The fenced Redis SET as a script call `{ script, sha1, keys, args }`.
#[napi(ts_return_type = "{ script: string, sha1: string, keys: string[], args: string[] }")]
pub fn redis_fenced_set<'env>(
    env: &'env Env,
    data_key: String,
    fence_key: String,
    token: BigInt,
    value: String,
) -> napi::Result<Object<'env>> {
    let token = self::token(env, &token)?;
    command_object(
        env,
        &fence::redis_fenced_set(&data_key, &fence_key, token, &value),
    )
}

/// Reads the reply of `redisFencedSet` for `resource`: `{ ok: true }` when written,
/// `{ ok: false, stale: { resource, token, highest, message } }` when refused,
/// `{ ok: false, protocol: message }` for a reply of another shape (an error reply too).
#[napi(
    ts_return_type = "{ ok: boolean, stale?: { resource: string, token: bigint, highest: bigint, message: string }, protocol?: string }"
)]
pub fn read_redis_fenced_set<'env>(
    env: &'env Env,
    resource: String,
    token: BigInt,
    reply: Unknown<'_>,
) -> napi::Result<Object<'env>> {
    let token = self::token(env, &token)?;
    let mut o = Object::new(env)?;
    match fence::read_redis_fenced_set(&resource, token, &to_redis_value(env, reply, 0)) {
        Ok(Ok(())) => o.set("ok", true)?,
        Ok(Err(stale)) => {
            o.set("ok", false)?;
            o.set("stale", stale_object(env, &stale)?)?;
        }
        Err(protocol) => {
            o.set("ok", false)?;
            o.set("protocol", protocol.to_string())?;
        }
    }
    Ok(o)
}

/// Every script fencepost runs on Redis: `{ acquire: { sha1, source }, renew, release,
/// fenced_set, acquire_fair, release_fair }`.
#[napi(ts_return_type = "Record<string, { sha1: string, source: string }>")]
pub fn redis_scripts(env: &Env) -> napi::Result<Object<'_>> {
    let mut scripts = Object::new(env)?;
    for s in RedisScript::ALL {
        let mut entry = Object::new(env)?;
        entry.set("sha1", s.sha1())?;
        entry.set("source", s.source())?;
        scripts.set(script_name(s), entry)?;
    }
    Ok(scripts)
}

/// The lease key of lock `name` under `keyPrefix` (`{prefix}{{name}}:lock`).
#[napi]
pub fn lock_key(key_prefix: String, name: String) -> String {
    RedisSettings {
        key_prefix,
        ..RedisSettings::default()
    }
    .lock_key(&name)
}

/// The fencing-token counter key of lock `name` under `keyPrefix`.
#[napi]
pub fn token_key(key_prefix: String, name: String) -> String {
    RedisSettings {
        key_prefix,
        ..RedisSettings::default()
    }
    .token_key(&name)
}

/// The etcd key the acquisition `ownerId` puts for lock `name` under `keyPrefix`
/// (`{keyPrefix}{name}/{lease id, 16 hex digits}`); while it holds the lock, the key's
/// create revision is its fencing token.
#[napi]
pub fn etcd_holder_key(
    env: Env,
    key_prefix: String,
    name: String,
    owner_id: String,
) -> napi::Result<String> {
    let owner = self::owner_id(&env, &owner_id)?;
    Ok(EtcdSettings { key_prefix }.holder_key(&name, &owner))
}

/// The etcd lease id of the acquisition `ownerId` (its first 8 bytes, big-endian, as a
/// positive int64), as a bigint.
#[napi]
pub fn etcd_lease_id(env: Env, owner_id: String) -> napi::Result<BigInt> {
    let owner = self::owner_id(&env, &owner_id)?;
    Ok(BigInt::from(etcd::lease_id(&owner)))
}

/// A fenced etcd transaction as a gateway call `{ backend: "etcd", call: "txn", path, body }`:
/// puts every `[key, value]` of `puts` and deletes every key of `deletes` only while the
/// key of `ownerId` for lock `name` still has create revision `token` (etcd's `IsOwner`
/// comparison). Read the reply with `readEtcdFencedTxn`.
#[napi(ts_return_type = "{ backend: 'etcd', call: 'txn', path: string, body: string }")]
pub fn etcd_fenced_txn<'env>(
    env: &'env Env,
    key_prefix: String,
    name: String,
    owner_id: String,
    token: BigInt,
    puts: Vec<Vec<String>>,
    deletes: Option<Vec<String>>,
) -> napi::Result<Object<'env>> {
    let owner = self::owner_id(env, &owner_id)?;
    let token = self::token(env, &token)?;
    let mut ops = Vec::with_capacity(puts.len());
    for (i, pair) in puts.into_iter().enumerate() {
        let [key, value]: [String; 2] = pair.try_into().map_err(|pair: Vec<String>| {
            config_error(
                env,
                &format!(
                    "puts[{i}] must be a [key, value] pair of strings, got {} items",
                    pair.len()
                ),
            )
        })?;
        ops.push(EtcdOp::Put {
            key,
            value,
            lease: 0,
        });
    }
    for key in deletes.unwrap_or_default() {
        ops.push(EtcdOp::Delete { key });
    }
    let settings = EtcdSettings { key_prefix };
    let key = settings.holder_key(&name, &owner);
    let mut o = Object::new(env)?;
    set_etcd_call(&mut o, &settings.fenced_txn(&name, &key, token, ops))?;
    Ok(o)
}

/// Reads the reply of `etcdFencedTxn` (the gateway's JSON text) for lock `name`:
/// `{ ok: true, revision }` (a bigint) when applied; `{ ok: false, stale: { resource,
/// token, highest, message } }` when the lease no longer holds the lock (`highest` = the
/// current holder's token, `0n` when nobody holds it); `{ ok: false, protocol: message }`
/// for an error document or a reply of another shape (a value that is not text too).
#[napi(
    ts_return_type = "{ ok: boolean, revision?: bigint, stale?: { resource: string, token: bigint, highest: bigint, message: string }, protocol?: string }"
)]
pub fn read_etcd_fenced_txn<'env>(
    env: &'env Env,
    name: String,
    token: BigInt,
    reply: Unknown<'_>,
) -> napi::Result<Object<'env>> {
    let token = self::token(env, &token)?;
    let mut o = Object::new(env)?;
    #[allow(unreachable_patterns)]
    match etcd::read_etcd_fenced_txn(&etcd_reply_text(reply)) {
        Ok(EtcdFenced::Applied { revision }) => {
            o.set("ok", true)?;
            o.set("revision", BigInt::from(revision))?;
        }
        Ok(EtcdFenced::Refused { holder }) => {
            let stale = fencepost_core::StaleToken {
                resource: name,
                token,
                highest: holder.unwrap_or(FencingToken(0)),
            };
            o.set("ok", false)?;
            o.set("stale", stale_object(env, &stale)?)?;
        }
        Ok(_) => {
            o.set("ok", false)?;
            o.set("protocol", "unknown fenced transaction outcome")?;
        }
        Err(protocol) => {
            o.set("ok", false)?;
            o.set("protocol", protocol.to_string())?;
        }
    }
    Ok(o)
}

/// Version of the fencepost-core crate compiled into this addon.
#[napi]
pub fn core_version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}
