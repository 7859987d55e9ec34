//! The native half of the `fencepost` npm package: `fencepost-core` as a napi-rs addon.
//!
//! This file is napi glue only: it reads JavaScript arguments into the plain values of
//! `fencepost-js-common` (the half shared with the WASM module, where the conventions of
//! this low-level interface are written down: milliseconds, ids, bigint tokens, option
//! spelling, error codes) and turns its results and errors into JavaScript values. It
//! makes no lock decision. The JavaScript half (`js/`, shared word for word with the WASM
//! package) checks the types of user input, runs the driver loop on the event loop and
//! turns these plain objects into the public API.
//!
//! Nothing here panics on any input: every conversion is checked and reported.

use fencepost_core::backends::SqlValue;
use fencepost_core::js_outputs::FlatValue;
use fencepost_core::{RedisCommand, RedisValue, Reply};
use fencepost_js_common::{self as common, JsError, JsMachine, JsOut, Primitive};
use napi::bindgen_prelude::{Array, BigInt, BufferSlice, Env, Object, ToNapiValue, Unknown};
use napi::{JsValue, Status, ValueType};
use napi_derive::napi;

// ---- errors and values --------------------------------------------------------------------

/// Throws `error` as a JS `Error` with `code` and its string properties, and returns the
/// napi error that tells napi-rs an exception is already pending. If the error object
/// cannot be built (the environment is shutting down), a plain error is returned instead.
fn throw(env: &Env, error: JsError) -> napi::Error {
    let thrown = (|| -> napi::Result<()> {
        let mut e = env.create_error(napi::Error::new(Status::GenericFailure, &error.message))?;
        e.set("code", error.code)?;
        for (key, value) in error.properties() {
            e.set(key, value)?;
        }
        env.throw(e)
    })();
    match thrown {
        Ok(()) => napi::Error::from_status(Status::PendingException),
        Err(_) => napi::Error::new(
            Status::InvalidArg,
            format!("{}: {}", error.code, error.message),
        ),
    }
}

/// `result`, its error thrown.
fn js<T>(env: &Env, result: common::Result<T>) -> napi::Result<T> {
    result.map_err(|e| throw(env, e))
}

/// Builds the JavaScript value `out` describes.
fn to_js<'env>(env: &'env Env, out: &JsOut<'_>) -> napi::Result<Unknown<'env>> {
    let raw = unsafe {
        match out {
            JsOut::Null => ToNapiValue::to_napi_value(env.raw(), napi::bindgen_prelude::Null)?,
            JsOut::Bool(b) => ToNapiValue::to_napi_value(env.raw(), *b)?,
            JsOut::Number(n) => ToNapiValue::to_napi_value(env.raw(), *n)?,
            JsOut::Text(s) => ToNapiValue::to_napi_value(env.raw(), s.as_ref())?,
            JsOut::Token(t) => ToNapiValue::to_napi_value(env.raw(), BigInt::from(*t))?,
            JsOut::Int(n) => ToNapiValue::to_napi_value(env.raw(), BigInt::from(*n))?,
            JsOut::Strings(items) => ToNapiValue::to_napi_value(env.raw(), items.to_vec())?,
            JsOut::Array(items) => {
                let mut array = env.create_array(u32::try_from(items.len()).unwrap_or(u32::MAX))?;
                for (i, item) in items.iter().enumerate() {
                    array.set(u32::try_from(i).unwrap_or(u32::MAX), to_js(env, item)?)?;
                }
                ToNapiValue::to_napi_value(env.raw(), array)?
            }
            JsOut::Object(props) => {
                let mut o = Object::new(env)?;
                for (key, value) in props {
                    o.set(*key, to_js(env, value)?)?;
                }
                ToNapiValue::to_napi_value(env.raw(), o)?
            }
            JsOut::Error { code, message } => {
                let mut error =
                    env.create_error(napi::Error::new(Status::GenericFailure, message.as_ref()))?;
                error.set("code", *code)?;
                ToNapiValue::to_napi_value(env.raw(), error)?
            }
        }
    };
    Ok(unsafe { Unknown::from_raw_unchecked(env.raw(), raw) })
}

// ---- arguments ------------------------------------------------------------------------------

/// A bigint in 0 ..= 2^64 − 1.
fn bigint_u64(env: &Env, value: &BigInt, name: &str) -> napi::Result<u64> {
    match (value.sign_bit, value.words.as_slice()) {
        (_, []) => Ok(0),
        (false, [word]) => Ok(*word),
        (true, [0]) => Ok(0),
        _ => Err(throw(env, common::bigint_out_of_range(name))),
    }
}

/// A bigint in −2^63 ..< 2^63, `None` outside.
fn bigint_i64(b: &BigInt) -> Option<i64> {
    match (b.sign_bit, b.words.as_slice()) {
        (_, []) => Some(0),
        (false, [w]) => i64::try_from(*w).ok(),
        (true, [w]) if *w == i64::MIN.unsigned_abs() => Some(i64::MIN),
        (true, [w]) => i64::try_from(*w).ok().map(|n| -n),
        _ => None,
    }
}

fn token(env: &Env, value: &BigInt) -> napi::Result<u64> {
    bigint_u64(env, value, "token")
}

/// An options object's own enumerable properties with primitive values (`null` and
/// `undefined` left out), for `fencepost_js_common::lock_options`.
fn primitives(env: &Env, value: Unknown<'_>) -> napi::Result<Vec<(String, Primitive)>> {
    primitives_of(env, value, "lock options")
}

/// [`primitives`] of an object the messages call `what`.
fn primitives_of(
    env: &Env,
    value: Unknown<'_>,
    what: &str,
) -> napi::Result<Vec<(String, Primitive)>> {
    if value.get_type()? != ValueType::Object || value.is_array()? {
        return Err(throw(
            env,
            JsError::config(format!(
                "{what} must be an object, got {}",
                value.get_type()?
            )),
        ));
    }
    let object = unsafe { value.cast::<Object>()? };
    let mut out = Vec::new();
    for key in Object::keys(&object)? {
        let Some(v) = object.get::<Unknown>(&key)? else {
            continue;
        };
        let v = match v.get_type()? {
            ValueType::Undefined | ValueType::Null => continue,
            ValueType::Number => Primitive::Number(unsafe { v.cast::<f64>()? }),
            ValueType::String => Primitive::Text(unsafe { v.cast::<String>()? }),
            ValueType::Boolean => Primitive::Bool(unsafe { v.cast::<bool>()? }),
            other => {
                let what = format!("a value of type {other}");
                return Err(throw(env, common::not_a_primitive(&key, &what)));
            }
        };
        out.push((key, v));
    }
    Ok(out)
}

fn lock_options(env: &Env, value: Unknown<'_>) -> napi::Result<fencepost_core::LockOptions> {
    let fields = primitives(env, value)?;
    js(env, common::lock_options(fields))
}

// ---- replies: JS value -> RedisValue ------------------------------------------------------

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
            common::unreadable(&e.reason)
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

fn read_redis_value(env: &Env, value: Unknown<'_>, depth: usize) -> napi::Result<RedisValue> {
    if depth > common::MAX_REPLY_DEPTH {
        return Ok(common::too_deep());
    }
    Ok(match value.get_type()? {
        ValueType::Undefined | ValueType::Null => RedisValue::Nil,
        ValueType::Boolean => RedisValue::Int(i64::from(unsafe { value.cast::<bool>()? })),
        ValueType::Number => common::redis_number(unsafe { value.cast::<f64>()? }),
        ValueType::BigInt => {
            let b = unsafe { value.cast::<BigInt>()? };
            common::redis_bigint(bigint_i64(&b))
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
                common::redis_error(message)
            } else if value.is_array()? {
                let array = unsafe { value.cast::<Array>()? };
                let mut items = Vec::with_capacity(array.len() as usize);
                for i in 0..array.len() {
                    items.push(match array.get::<Unknown>(i)? {
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
                let mut text = None;
                if let [key] = keys.as_slice() {
                    if let Some(v) = object.get::<Unknown>(key)? {
                        if v.get_type()? == ValueType::String {
                            text = Some(unsafe { v.cast::<String>()? });
                        }
                    }
                }
                common::redis_object(&keys, |_| text)
            }
        }
        other => common::unsupported(&format!("a value of type {other}")),
    })
}

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
        Ok(Err(what)) => common::not_etcd_text(&what),
        Err(_) => common::not_etcd_text("reading it threw"),
    }
}

// ---- PostgreSQL: settings, replies ----------------------------------------------------------

/// The backend of a machine: `kind` `"postgres"` decodes `settings` (`{ mode, leaseTable,
/// tokenTable, namespace }`), any other kind is the shared crate's.
fn machine_backend(
    env: &Env,
    kind: Option<String>,
    key_prefix: Option<String>,
    fair: Option<bool>,
    masters: Option<Vec<String>>,
    settings: Option<Unknown<'_>>,
) -> napi::Result<fencepost_core::Backend> {
    let with_settings = matches!(
        kind.as_deref(),
        Some("postgres") | Some("zookeeper") | Some("kubernetes")
    );
    if with_settings {
        let kind = kind.as_deref().unwrap_or_default();
        if key_prefix.is_some() || fair == Some(true) || masters.is_some() {
            return Err(throw(
                env,
                JsError::config(format!(
                    "keyPrefix, fair and masters apply to Redis, etcd and Redlock machines, not to kind {kind:?}"
                )),
            ));
        }
        let fields = pg_fields(env, settings)?;
        return js(
            env,
            match kind {
                "zookeeper" => common::zookeeper::backend(fields),
                "kubernetes" => common::kubernetes::backend(fields),
                _ => common::postgres::backend(fields),
            },
        );
    }
    let fields = pg_fields(env, settings)?;
    js(
        env,
        common::backend(kind.as_deref(), key_prefix, fair, masters, fields),
    )
}

/// A settings object's fields (none for `undefined` / `null`): a PostgreSQL,
/// ZooKeeper or Kubernetes machine's, or a Redis machine's `cluster`.
fn pg_fields(env: &Env, settings: Option<Unknown<'_>>) -> napi::Result<Vec<(String, Primitive)>> {
    match settings {
        Some(v) if !matches!(v.get_type()?, ValueType::Undefined | ValueType::Null) => {
            primitives_of(env, v, "backend settings")
        }
        _ => Ok(Vec::new()),
    }
}

/// Converts what a PostgreSQL adapter returned into a `SqlReply`. Never fails: a value
/// that cannot be read becomes an error reply without SQLSTATE describing it, which the
/// core reads as a protocol error.
///
/// | JavaScript | SqlReply |
/// | --- | --- |
/// | an `Array` of rows, each an `Array` of cells | `Rows` |
/// | `{ sqlstate: string, message: string }` | `Error` (a server error) |
///
/// | cell | SqlValue |
/// | --- | --- |
/// | `null`, `undefined` | `Null` |
/// | `true` / `false` | `Bool` |
/// | integer `number`, `bigint` (64-bit) | `Int` |
/// | `string` | `Text` |
fn to_sql_reply(env: &Env, value: Unknown<'_>) -> fencepost_core::backends::SqlReply {
    match read_sql_reply(value) {
        Ok(Ok(reply)) => reply,
        Ok(Err(what)) => common::postgres::bad_reply(&what),
        Err(e) => {
            clear_pending_exception(env);
            common::postgres::bad_reply(&format!("unreadable reply value: {}", e.reason))
        }
    }
}

fn read_sql_reply(
    value: Unknown<'_>,
) -> napi::Result<Result<fencepost_core::backends::SqlReply, String>> {
    use fencepost_core::backends::SqlReply;
    if value.get_type()? != ValueType::Object {
        return Ok(Err(format!(
            "a SQL reply must be an array of rows or {{ sqlstate, message }}, got a value of type {}",
            value.get_type()?
        )));
    }
    if !value.is_array()? {
        let object = unsafe { value.cast::<Object>()? };
        let text = |key: &str| -> napi::Result<Option<String>> {
            match object.get::<Unknown>(key)? {
                Some(v) if v.get_type()? == ValueType::String => {
                    Ok(Some(unsafe { v.cast::<String>()? }))
                }
                _ => Ok(None),
            }
        };
        return Ok(match (text("sqlstate")?, text("message")?) {
            (Some(sqlstate), Some(message)) => Ok(SqlReply::Error { sqlstate, message }),
            _ => Err("a SQL error reply must be { sqlstate: string, message: string }".to_owned()),
        });
    }
    let rows = unsafe { value.cast::<Array>()? };
    let mut out = Vec::with_capacity(rows.len() as usize);
    for i in 0..rows.len() {
        let Some(row) = rows.get::<Unknown>(i)? else {
            return Ok(Err(format!("row {i} is missing")));
        };
        if row.get_type()? != ValueType::Object || !row.is_array()? {
            return Ok(Err(format!("row {i} must be an array of cells")));
        }
        let cells = unsafe { row.cast::<Array>()? };
        let mut values = Vec::with_capacity(cells.len() as usize);
        for j in 0..cells.len() {
            let cell = match cells.get::<Unknown>(j)? {
                Some(cell) => cell,
                None => {
                    values.push(SqlValue::Null);
                    continue;
                }
            };
            values.push(match cell.get_type()? {
                ValueType::Undefined | ValueType::Null => SqlValue::Null,
                ValueType::Boolean => SqlValue::Bool(unsafe { cell.cast::<bool>()? }),
                ValueType::Number => {
                    match common::postgres::sql_number(unsafe { cell.cast::<f64>()? }) {
                        Ok(v) => v,
                        Err(what) => return Ok(Err(what)),
                    }
                }
                ValueType::BigInt => {
                    let b = unsafe { cell.cast::<BigInt>()? };
                    match bigint_i64(&b) {
                        Some(n) => SqlValue::Int(n),
                        None => {
                            let what = "a cell holds a bigint outside the 64-bit range";
                            return Ok(Err(what.to_owned()));
                        }
                    }
                }
                ValueType::String => SqlValue::Text(unsafe { cell.cast::<String>()? }),
                other => return Ok(Err(format!("a cell holds a value of type {other}"))),
            });
        }
        out.push(values);
    }
    Ok(Ok(SqlReply::Rows { rows: out }))
}

// ---- Machine --------------------------------------------------------------------------------

/// Lock options read once (`new PreparedOptions(options)`, the object `acquire` takes),
/// for `acquirePreparedPoll`: a lock acquired again and again skips reading the object's
/// properties each time. Immutable; checked against a backend only when acquiring.
/// Throws `ERR_CONFIG` naming a bad option, as `acquire` does.
#[napi]
pub struct PreparedOptions {
    inner: fencepost_core::LockOptions,
}

#[napi]
impl PreparedOptions {
    #[napi(constructor)]
    pub fn new(
        env: Env,
        #[napi(ts_arg_type = "object")] options: Unknown<'_>,
    ) -> napi::Result<Self> {
        Ok(PreparedOptions {
            inner: lock_options(&env, options)?,
        })
    }
}

/// The sans-IO lock machine for a Redis or etcd backend: many locks, no I/O, no clock.
///
/// Every `nowMs` is the host's monotonic time in milliseconds (`performance.now()`); an
/// earlier one than given before throws `ERR_CLOCK`. After every input call `pollJson()`.
#[napi(js_name = "Machine")]
pub struct Machine {
    inner: JsMachine,
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
    /// "wait"`), `"redlock"` (requests with `backend: "redlock_part"`, one per master;
    /// `masters` names each master, `host:port/db`, in the order of their clients) or
    /// `"postgres"` (requests with `backend: "sql"`; `settings` is then `{ mode,
    /// leaseTable, tokenTable, namespace }`, each optional: see `PostgresBackend`),
    /// `"zookeeper"` (requests with `backend: "zookeeper"`, replies the adapter's JSON
    /// documents; `settings` `{ root, naming, sessionTimeoutMs }`) or `"kubernetes"`
    /// (requests with `backend: "kubernetes"`, replies the API server's response bodies;
    /// `settings` `{ namespace }`). A Redis machine's `settings` may be `{ cluster: true }`:
    /// the adapter's client is a Redis Cluster client, so a batched renewal carries the
    /// keys of one hash slot.
    #[napi(constructor)]
    pub fn new(
        env: Env,
        key_prefix: Option<String>,
        seed: Option<BigInt>,
        fair: Option<bool>,
        kind: Option<String>,
        masters: Option<Vec<String>>,
        #[napi(ts_arg_type = "object | undefined | null")] settings: Option<Unknown<'_>>,
    ) -> napi::Result<Self> {
        let backend = machine_backend(&env, kind, key_prefix, fair, masters, settings)?;
        let seed = seed.map(|s| bigint_u64(&env, &s, "seed")).transpose()?;
        let inner = js(&env, JsMachine::new(backend, seed, ""))?;
        Ok(Machine { inner })
    }

    /// Checks a lock name and options exactly as `acquire` would, without acquiring.
    #[napi]
    pub fn check(
        &self,
        env: Env,
        name: String,
        #[napi(ts_arg_type = "object")] options: Unknown<'_>,
    ) -> napi::Result<()> {
        let options = lock_options(&env, options)?;
        js(&env, self.inner.check(&name, &options))
    }

    /// Starts acquiring `name`; returns the new lock id.
    #[napi]
    pub fn acquire(
        &mut self,
        env: Env,
        now_ms: f64,
        name: String,
        #[napi(ts_arg_type = "object")] options: Unknown<'_>,
    ) -> napi::Result<f64> {
        let options = lock_options(&env, options)?;
        js(&env, self.inner.acquire(now_ms, &name, options))
    }

    /// `acquire` with options read beforehand (`PreparedOptions`), then `pollJson()`, in
    /// one call (the driver's path): the poll's JSON text with the new lock id in front,
    /// `[lock, nextTimeoutMs | null, observationsPending, ...records]`.
    #[napi]
    pub fn acquire_prepared_poll(
        &mut self,
        env: Env,
        now_ms: f64,
        name: String,
        options: &PreparedOptions,
    ) -> napi::Result<String> {
        js(
            &env,
            self.inner
                .acquire_poll_json(now_ms, &name, options.inner.clone()),
        )
    }

    /// Releases `lock`, or cancels its acquisition. A finished lock ignores it.
    #[napi]
    pub fn release(&mut self, env: Env, now_ms: f64, lock: f64) -> napi::Result<()> {
        js(&env, self.inner.release(now_ms, lock))
    }

    /// Renews `lock` now if it is held (a manual extend); the outcome is its next
    /// `renewed` or `lost` event. A lock not held ignores it.
    #[napi]
    pub fn extend(&mut self, env: Env, now_ms: f64, lock: f64) -> napi::Result<()> {
        js(&env, self.inner.extend(now_ms, lock))
    }

    /// The server's reply to request `request`: on a Redis machine, as the Redis client
    /// returned it (see the conversion table in `to_redis_value`); on an etcd machine, the
    /// JSON text the gateway answered (error documents included; for a watch, the first
    /// line with events, or `"{}"` at its timeout); a value that is not text is read as a
    /// protocol error. On a PostgreSQL machine, the rows (see `to_sql_reply`) or
    /// `{ sqlstate, message }` for a server error. Replies to unknown requests are ignored.
    #[napi]
    pub fn reply(
        &mut self,
        env: Env,
        now_ms: f64,
        request: f64,
        value: Unknown<'_>,
    ) -> napi::Result<()> {
        let reply = if self.inner.reads_text() {
            self.inner.text_reply(etcd_reply_text(value))
        } else if self.inner.reads_sql() {
            Reply::Sql(to_sql_reply(&env, value))
        } else {
            Reply::Redis(to_redis_value(&env, value, 0))
        };
        js(&env, self.inner.reply(now_ms, request, reply))
    }

    /// `reply`, then `pollJson()`, in one call (the driver's path: a call across the
    /// addon boundary costs more here than the machine's decision).
    #[napi]
    pub fn reply_poll(
        &mut self,
        env: Env,
        now_ms: f64,
        request: f64,
        value: Unknown<'_>,
    ) -> napi::Result<String> {
        self.reply(env, now_ms, request, value)?;
        Ok(self.inner.poll_json())
    }

    /// `release`, then `pollJson()`, in one call.
    #[napi]
    pub fn release_poll(&mut self, env: Env, now_ms: f64, lock: f64) -> napi::Result<String> {
        js(&env, self.inner.release(now_ms, lock))?;
        Ok(self.inner.poll_json())
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
        js(&env, self.inner.transport_error(now_ms, request, message))
    }

    /// Time passed: fires due timers. Early and spurious calls are harmless.
    #[napi]
    pub fn timeout(&mut self, env: Env, now_ms: f64) -> napi::Result<()> {
        js(&env, self.inner.timeout(now_ms))
    }

    /// Drains every pending output as the text of one JSON array, in the layout of
    /// `fencepost_core::js_outputs` with a second host slot: `[nextTimeoutMs | null,
    /// observationsPending, ...records]`, tokens as decimal strings. Requests and events come in order; `nextTimeoutMs` is when to
    /// call `timeout`, or `null` when no timer is set. js/machine.js decodes it
    /// (`LockMachine.poll()` returns `{ outputs, nextTimeoutMs }`).
    // One string: napi builds an array slot by slot (a call per slot, and one per
    // string), which cost more than the core's whole decision; `JSON.parse` reads the
    // text in a fraction of that.
    #[napi]
    pub fn poll_json(&mut self) -> String {
        self.inner.poll_json()
    }

    /// Starts observing with `options`, `[events, warnings, lateRenewalFraction,
    /// heldLongTtls, hotLockAttempts, hotLockWaiters, unreachableEveryMs]` (booleans as 0
    /// or 1), or stops with `null`. Throws `ERR_CONFIG` naming a bad option.
    #[napi]
    pub fn observe(&mut self, env: Env, options: Option<Vec<f64>>) -> napi::Result<()> {
        js(&env, self.inner.observe(options.as_deref()))
    }

    /// Drains the observations as one flat array: per observation `lockId, name,
    /// event, level, message, fieldCount`, then `fieldCount` name/value pairs
    /// (js/observe.js decodes it).
    #[napi]
    pub fn observe_flat<'env>(&mut self, env: &'env Env) -> napi::Result<Array<'env>> {
        let mut out = env.create_array(0)?;
        self.inner.poll_observations(&mut |value| match value {
            FlatValue::Number(n) => out.insert(n),
            FlatValue::Text(t) => out.insert(t.as_ref()),
            FlatValue::Token(t) => out.insert(BigInt::from(t)),
            FlatValue::Null => out.insert(Option::<f64>::None),
        })?;
        Ok(out)
    }

    /// The owner id of `lock` (32 lowercase hex digits, the value in the lock key), or
    /// `null` once the machine has forgotten the lock.
    #[napi]
    pub fn owner(&self, env: Env, lock: f64) -> napi::Result<Option<String>> {
        js(&env, self.inner.owner(lock))
    }

    /// The validity deadline of `lock` (monotonic ms) while it is held, else `null`.
    #[napi]
    pub fn valid_until_ms(&self, env: Env, lock: f64) -> napi::Result<Option<f64>> {
        js(&env, self.inner.valid_until_ms(lock))
    }

    /// How many locks the machine tracks (pending, held, or finished with requests out).
    #[napi(getter)]
    pub fn lock_count(&self) -> u32 {
        self.inner.lock_count()
    }

    /// How many requests await a reply or transport error.
    #[napi(getter)]
    pub fn requests_in_flight(&self) -> u32 {
        self.inner.requests_in_flight()
    }
}

/// Checks a lock name and options as a machine built with the same `keyPrefix`, `fair`,
/// `kind` and `masters` would (`Machine.check`), without building one: no owner-id
/// randomness is needed.
#[napi]
// one argument per machine setting, as JavaScript passes them (js/check.js)
#[allow(clippy::too_many_arguments)]
pub fn check_acquire(
    env: Env,
    key_prefix: Option<String>,
    fair: Option<bool>,
    kind: Option<String>,
    name: String,
    #[napi(ts_arg_type = "object")] options: Unknown<'_>,
    masters: Option<Vec<String>>,
    #[napi(ts_arg_type = "object | undefined | null")] settings: Option<Unknown<'_>>,
) -> napi::Result<()> {
    let backend = machine_backend(&env, kind, key_prefix, fair, masters, settings)?;
    let options = lock_options(&env, options)?;
    js(&env, common::check_acquire(&backend, &name, &options))
}

// ---- MemoryRedis ----------------------------------------------------------------------------

/// The core's in-memory Redis (`fencepost_core::memory::MemoryRedis`): runs fencepost's
/// scripts with TTLs on the host's monotonic time.
#[napi(js_name = "MemoryRedis")]
pub struct MemoryRedis {
    inner: fencepost_core::memory::MemoryRedis,
}

/// A Redis script call as data: what an adapter needs to run
/// `EVALSHA sha1 keys.length ...keys ...args` (and `EVAL` with the source on `NOSCRIPT`).
#[napi(object)]
pub struct ScriptCall {
    /// One of `redisScripts()`'s names: `"acquire"`, `"renew"`, `"renew_many"` (a batched
    /// renewal), `"release"`, `"fenced_set"`, `"acquire_fair"`, `"release_fair"`, or an
    /// operator query's `"is_locked"`, `"force_release"`, `"inspect"`, `"list"`.
    pub script: String,
    pub keys: Vec<String>,
    pub args: Vec<String>,
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
        let now = js(env, common::instant(now_ms))?;
        let cmd = RedisCommand {
            script: js(env, common::script(&command.script))?,
            keys: command.keys,
            args: command.args,
            wait: None,
        };
        to_js(env, &common::redis_value(&self.inner.eval(now, &cmd)))
    }

    /// `GET key` at `nowMs` (expired keys are gone).
    #[napi]
    pub fn get(&self, env: Env, now_ms: f64, key: String) -> napi::Result<Option<String>> {
        let now = js(&env, common::instant(now_ms))?;
        Ok(self.inner.get(now, &key).map(str::to_owned))
    }

    /// `PTTL key` in ms at `nowMs`: `null` when missing, -1 when it has no expiry.
    #[napi]
    pub fn pttl(&self, env: Env, now_ms: f64, key: String) -> napi::Result<Option<f64>> {
        let now = js(&env, common::instant(now_ms))?;
        Ok(self.inner.pttl(now, &key).map(|ms| ms as f64))
    }

    /// `LPOP key` at `nowMs`: the head of a list (a fair waiter's wake-up), or `null`
    /// when the list is missing, empty or expired. Never blocks: hosts emulating `BLPOP`
    /// park the caller themselves until this yields or the timeout passes.
    #[napi]
    pub fn lpop(&mut self, env: Env, now_ms: f64, key: String) -> napi::Result<Option<String>> {
        let now = js(&env, common::instant(now_ms))?;
        Ok(self.inner.lpop(now, &key))
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

/// An in-memory fence: the highest fencing token accepted per resource.
#[napi(js_name = "Fence")]
pub struct Fence {
    inner: fencepost_core::Fence,
}

#[napi]
impl Fence {
    /// An empty fence.
    #[napi(constructor)]
    pub fn new() -> Self {
        Fence {
            inner: fencepost_core::Fence::new(),
        }
    }

    /// Accepts a write to `resource` carrying `token` (and remembers it): returns `null`.
    /// Refuses a token lower than one accepted before or, with `owner` (owner-bound
    /// rule), the same token from another owner: returns
    /// `{ resource, token, highest, reason, message }`.
    #[napi(
        ts_return_type = "{ resource: string, token: bigint, highest: bigint, reason: string, message: string } | null"
    )]
    pub fn check<'env>(
        &mut self,
        env: &'env Env,
        resource: String,
        token: BigInt,
        owner: Option<String>,
    ) -> napi::Result<Unknown<'env>> {
        let token = self::token(env, &token)?;
        let out = common::fence_check(&mut self.inner, &resource, token, owner.as_deref());
        to_js(env, &js(env, out)?)
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
/// `$2` token, `$3` owner with `ownerColumn`, then the columns) or `"pyformat"`. Zero
/// rows updated means a refusal.
#[napi]
pub fn sql_fenced_update(
    env: Env,
    table: String,
    id_column: String,
    token_column: String,
    columns: Vec<String>,
    style: String,
    owner_column: Option<String>,
) -> napi::Result<String> {
    let sql = common::sql_fenced_update(
        &table,
        &id_column,
        &token_column,
        &columns,
        &style,
        owner_column.as_deref(),
    );
    js(&env, sql)
}

/// The fenced Redis SET as a script call `{ script, sha1, keys, args }`.
#[napi(ts_return_type = "{ script: string, sha1: string, keys: string[], args: string[] }")]
pub fn redis_fenced_set<'env>(
    env: &'env Env,
    data_key: String,
    fence_key: String,
    token: BigInt,
    value: String,
    owner: Option<String>,
) -> napi::Result<Unknown<'env>> {
    let token = self::token(env, &token)?;
    let cmd = common::redis_fenced_set(&data_key, &fence_key, token, &value, owner.as_deref());
    to_js(env, &common::script_call(&js(env, cmd)?))
}

/// Reads the reply of `redisFencedSet` for `resource`: `{ ok: true }` when written,
/// `{ ok: false, stale: { resource, token, highest, message } }` when refused,
/// `{ ok: false, protocol: message }` for a reply of another shape (an error reply too).
#[napi(
    ts_return_type = "{ ok: boolean, stale?: { resource: string, token: bigint, highest: bigint, reason: string, message: string }, protocol?: string }"
)]
pub fn read_redis_fenced_set<'env>(
    env: &'env Env,
    resource: String,
    token: BigInt,
    reply: Unknown<'_>,
) -> napi::Result<Unknown<'env>> {
    let token = self::token(env, &token)?;
    let reply = to_redis_value(env, reply, 0);
    to_js(
        env,
        &common::read_redis_fenced_set(&resource, token, &reply),
    )
}

/// Every script fencepost runs on Redis: `{ acquire: { sha1, source }, renew, release,
/// fenced_set, acquire_fair, release_fair, is_locked, force_release, inspect, list,
/// renew_many }`.
#[napi(ts_return_type = "Record<string, { sha1: string, source: string }>")]
pub fn redis_scripts(env: &Env) -> napi::Result<Unknown<'_>> {
    to_js(env, &common::redis_scripts())
}

/// The names of the codes in `pollJson()`'s records, each list in code order, and the
/// loss reason hosts report when a backend is closed: `{ operation, lostReason,
/// acquireFailedReason, redisScript, purpose, closed }`.
#[napi(
    ts_return_type = "{ operation: string[], lostReason: string[], acquireFailedReason: string[], redisScript: string[], purpose: string[], closed: string }"
)]
pub fn core_names(env: &Env) -> napi::Result<Unknown<'_>> {
    to_js(env, &common::core_names())
}

/// The lease key of lock `name` under `keyPrefix` (`{prefix}{{name}}:lock`).
#[napi]
pub fn lock_key(key_prefix: String, name: String) -> String {
    common::lock_key(key_prefix, &name)
}

/// The fencing-token counter key of lock `name` under `keyPrefix`.
#[napi]
pub fn token_key(key_prefix: String, name: String) -> String {
    common::token_key(key_prefix, &name)
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
    js(&env, common::etcd_holder_key(key_prefix, &name, &owner_id))
}

/// The etcd lease id of the acquisition `ownerId` (its first 8 bytes, big-endian, as a
/// positive int64), as a bigint.
#[napi]
pub fn etcd_lease_id(env: Env, owner_id: String) -> napi::Result<BigInt> {
    js(&env, common::etcd_lease_id(&owner_id)).map(BigInt::from)
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
) -> napi::Result<Unknown<'env>> {
    let token = self::token(env, &token)?;
    let deletes = deletes.unwrap_or_default();
    let call = common::etcd_fenced_txn(key_prefix, &name, &owner_id, token, puts, deletes);
    to_js(env, &js(env, call)?)
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
) -> napi::Result<Unknown<'env>> {
    let token = self::token(env, &token)?;
    let outcome = common::read_etcd_fenced_txn(&name, token, &etcd_reply_text(reply));
    to_js(env, &outcome)
}

/// The operator script call `{ script, sha1, keys, args }` for lock `name`: with
/// `force` false "is it locked?" (`is_locked`), with `force` true the reset
/// (`force_release`: frees the lock whoever holds it, keeps the token counter and, with
/// `fair`, grants the lock to the first live waiter). Read the reply with `readRedisFlag`.
#[napi(ts_return_type = "{ script: string, sha1: string, keys: string[], args: string[] }")]
pub fn redis_operator<'env>(
    env: &'env Env,
    key_prefix: String,
    name: String,
    fair: bool,
    force: bool,
) -> napi::Result<Unknown<'env>> {
    let cmd = common::redis_operator(key_prefix, &name, fair, force);
    to_js(env, &common::script_call(&cmd))
}

/// Reads the reply of `redisOperator`: `{ ok: true, value }` (1 → true, 0 → false) or
/// `{ ok: false, protocol: message }` for any other reply (an error reply too).
#[napi(ts_return_type = "{ ok: boolean, value?: boolean, protocol?: string }")]
pub fn read_redis_flag<'env>(env: &'env Env, reply: Unknown<'_>) -> napi::Result<Unknown<'env>> {
    let reply = to_redis_value(env, reply, 0);
    to_js(env, &common::read_redis_flag(&reply))
}

/// The operator query "who holds lock `name`?" as a script call `{ script, sha1, keys,
/// args }` (script `inspect`: owner, PTTL, token, metadata, and with `fair` the queue
/// length, in one atomic read). Read the reply with `readRedisInspect`.
#[napi(ts_return_type = "{ script: string, sha1: string, keys: string[], args: string[] }")]
pub fn redis_inspect<'env>(
    env: &'env Env,
    key_prefix: String,
    name: String,
    fair: bool,
) -> napi::Result<Unknown<'env>> {
    let cmd = common::redis_inspect(key_prefix, &name, fair);
    to_js(env, &common::script_call(&cmd))
}

/// One bounded step (`SCAN cursor MATCH … COUNT 500`, never `KEYS`) of the listing of
/// locks whose names start with `prefix`, as a script call. Read it with `readRedisList`.
#[napi(ts_return_type = "{ script: string, sha1: string, keys: string[], args: string[] }")]
pub fn redis_list_step<'env>(
    env: &'env Env,
    key_prefix: String,
    prefix: String,
    cursor: String,
    fair: bool,
) -> napi::Result<Unknown<'env>> {
    let cmd = common::redis_list_step(key_prefix, &prefix, &cursor, fair);
    to_js(env, &common::script_call(&cmd))
}

/// Reads the reply of `redisInspect`: `{ ok: true, holder }` (null: nobody holds it) or
/// `{ ok: false, protocol }`.
#[napi(
    ts_return_type = "{ ok: boolean, holder?: { name: string, owner: string | null, token: bigint | null, ttlLeftMs: number | null, waiters: number | null, metadata: string | null } | null, protocol?: string }"
)]
pub fn read_redis_inspect<'env>(
    env: &'env Env,
    name: String,
    reply: Unknown<'_>,
) -> napi::Result<Unknown<'env>> {
    let reply = to_redis_value(env, reply, 0);
    to_js(env, &common::read_redis_inspect(&name, &reply))
}

/// Reads the reply of `redisListStep`: `{ ok: true, cursor, holders }` (cursor null once
/// the scan is complete) or `{ ok: false, protocol }`.
#[napi(
    ts_return_type = "{ ok: boolean, cursor?: string | null, holders?: Array<{ name: string, owner: string | null, token: bigint | null, ttlLeftMs: number | null, waiters: number | null, metadata: string | null }>, protocol?: string }"
)]
pub fn read_redis_list<'env>(
    env: &'env Env,
    key_prefix: String,
    reply: Unknown<'_>,
) -> napi::Result<Unknown<'env>> {
    let reply = to_redis_value(env, reply, 0);
    to_js(env, &common::read_redis_list(key_prefix, &reply))
}

/// The etcd range finding who holds lock `name` (the key with the lowest create
/// revision under its prefix), as a gateway call. Read it with `readEtcdHolder`.
#[napi(ts_return_type = "{ backend: 'etcd', call: 'range', path: string, body: string }")]
pub fn etcd_holder_range(env: &Env, key_prefix: String, name: String) -> napi::Result<Unknown<'_>> {
    to_js(env, &common::etcd_holder_range(key_prefix, &name))
}

/// Reads the reply of `etcdHolderRange`: `{ ok: true, token, lease }` (bigints; `token`
/// null when nobody holds the lock) or `{ ok: false, protocol: message }`.
#[napi(
    ts_return_type = "{ ok: boolean, token?: bigint | null, lease?: bigint, protocol?: string }"
)]
pub fn read_etcd_holder<'env>(env: &'env Env, reply: Unknown<'_>) -> napi::Result<Unknown<'env>> {
    to_js(env, &common::read_etcd_holder(&etcd_reply_text(reply)))
}

/// The etcd range finding who leads election `name` (the lowest create revision under
/// its prefix, with the key's value), as a gateway call. Read it with `readEtcdLeader`.
#[napi(ts_return_type = "{ backend: 'etcd', call: 'range', path: string, body: string }")]
pub fn etcd_leader_range(env: &Env, key_prefix: String, name: String) -> napi::Result<Unknown<'_>> {
    to_js(env, &common::etcd_leader_range(key_prefix, &name))
}

/// Reads the reply of `etcdLeaderRange`: `{ ok: true, token, lease, value }` (`token`
/// null when nobody leads) or `{ ok: false, protocol: message }`.
#[napi(
    ts_return_type = "{ ok: boolean, token?: bigint | null, lease?: bigint, value?: string, protocol?: string }"
)]
pub fn read_etcd_leader<'env>(env: &'env Env, reply: Unknown<'_>) -> napi::Result<Unknown<'env>> {
    to_js(env, &common::read_etcd_leader(&etcd_reply_text(reply)))
}

/// A leader's publication of `value` in its own key, on its lease, while the key's create
/// revision is still `token` (etcd's `Election.Proclaim`), as a gateway call. Read the
/// reply with `readEtcdFencedTxn`.
#[napi(ts_return_type = "{ backend: 'etcd', call: 'txn', path: string, body: string }")]
pub fn etcd_proclaim<'env>(
    env: &'env Env,
    key_prefix: String,
    name: String,
    owner_id: String,
    token: BigInt,
    value: String,
) -> napi::Result<Unknown<'env>> {
    let token = self::token(env, &token)?;
    let call = common::etcd_proclaim(key_prefix, &name, &owner_id, token, &value);
    to_js(env, &js(env, call)?)
}

/// The revoke of etcd lease `lease` (a bigint from `readEtcdHolder`) as a gateway call.
#[napi(ts_return_type = "{ backend: 'etcd', call: 'lease_revoke', path: string, body: string }")]
pub fn etcd_lease_revoke<'env>(env: &'env Env, lease: BigInt) -> napi::Result<Unknown<'env>> {
    let id = i64::try_from(self::token(env, &lease)?).unwrap_or(i64::MAX);
    to_js(env, &common::etcd_lease_revoke(id))
}

/// Reads the reply of `etcdLeaseRevoke`: `{ ok: true, value }` (false: the lease was gone
/// already) or `{ ok: false, protocol: message }`.
#[napi(ts_return_type = "{ ok: boolean, value?: boolean, protocol?: string }")]
pub fn read_etcd_revoke<'env>(env: &'env Env, reply: Unknown<'_>) -> napi::Result<Unknown<'env>> {
    to_js(env, &common::read_etcd_revoke(&etcd_reply_text(reply)))
}

/// The SQL creating fencepost's PostgreSQL tables (idempotent, `CREATE TABLE IF NOT
/// EXISTS`) for `settings` (`{ leaseTable, tokenTable }`, both optional).
#[napi]
pub fn postgres_migration(
    env: Env,
    #[napi(ts_arg_type = "object | undefined | null")] settings: Option<Unknown<'_>>,
) -> napi::Result<String> {
    let fields = pg_fields(&env, settings)?;
    js(&env, common::postgres::migration(fields))
}

/// `[lock path, node prefix]` of lock `name` on a ZooKeeper backend with `settings`
/// (`{ root, naming }`) for the acquisition `ownerId` (32 hex digits): `{root}/{name}`,
/// and the name the owner's node starts with before the server's sequence.
#[napi(ts_return_type = "[string, string]")]
pub fn zookeeper_node_prefix<'env>(
    env: &'env Env,
    #[napi(ts_arg_type = "object | undefined | null")] settings: Option<Unknown<'_>>,
    name: String,
    owner_id: String,
) -> napi::Result<Unknown<'env>> {
    let fields = pg_fields(env, settings)?;
    let out = js(
        env,
        common::zookeeper::node_prefix(fields, &name, &owner_id),
    )?;
    to_js(env, &out)
}

/// The first call of "who holds lock `name`?" on a ZooKeeper backend with `settings`
/// (`{ root, naming }`): `{ backend: 'zookeeper', spec }`, the lock path's children.
/// Read its reply with `readZookeeperContenders`.
#[napi(ts_return_type = "{ backend: 'zookeeper', spec: string }")]
pub fn zookeeper_inspect<'env>(
    env: &'env Env,
    #[napi(ts_arg_type = "object | undefined | null")] settings: Option<Unknown<'_>>,
    name: String,
) -> napi::Result<Unknown<'env>> {
    let fields = pg_fields(env, settings)?;
    let out = js(env, common::zookeeper::inspect(fields, &name))?;
    to_js(env, &out)
}

/// Reads the reply of `zookeeperInspect`: `{ ok: true, node }` (`node` null when nobody
/// holds the lock, else `{ get, path, waiters }`: the holder node's `getData` call, its
/// path and the contenders behind it) or `{ ok: false, protocol }`.
#[napi(
    ts_return_type = "{ ok: boolean, node?: { get: { backend: 'zookeeper', spec: string }, path: string, waiters: number } | null, protocol?: string }"
)]
pub fn read_zookeeper_contenders<'env>(
    env: &'env Env,
    #[napi(ts_arg_type = "object | undefined | null")] settings: Option<Unknown<'_>>,
    name: String,
    reply: String,
) -> napi::Result<Unknown<'env>> {
    let fields = pg_fields(env, settings)?;
    let out = js(
        env,
        common::zookeeper::read_contenders(fields, &name, &reply),
    )?;
    to_js(env, &out)
}

/// Reads the reply of the holder node's `getData` (from `readZookeeperContenders`):
/// `{ ok: true, holder }` (`holder` null: the node is gone, list again) or `{ ok: false,
/// protocol }`.
#[napi(
    ts_return_type = "{ ok: boolean, holder?: { name: string, owner: string | null, token: bigint | null, ttlLeftMs: number | null, waiters: number | null, metadata: string | null } | null, protocol?: string }"
)]
pub fn read_zookeeper_holder<'env>(
    env: &'env Env,
    #[napi(ts_arg_type = "object | undefined | null")] settings: Option<Unknown<'_>>,
    name: String,
    path: String,
    waiters: u32,
    reply: String,
) -> napi::Result<Unknown<'env>> {
    let fields = pg_fields(env, settings)?;
    let out = js(
        env,
        common::zookeeper::read_holder(fields, &name, path, u64::from(waiters), &reply),
    )?;
    to_js(env, &out)
}

/// The children of the ZooKeeper root (the lock names a listing inspects) as `{ backend:
/// 'zookeeper', spec }`. Read its reply with `readZookeeperList`.
#[napi(ts_return_type = "{ backend: 'zookeeper', spec: string }")]
pub fn zookeeper_list_names<'env>(
    env: &'env Env,
    #[napi(ts_arg_type = "object | undefined | null")] settings: Option<Unknown<'_>>,
) -> napi::Result<Unknown<'env>> {
    let fields = pg_fields(env, settings)?;
    let out = js(env, common::zookeeper::list_names(fields))?;
    to_js(env, &out)
}

/// Reads the reply of `zookeeperListNames`: `{ ok: true, names }` (the names starting
/// with `prefix`, sorted) or `{ ok: false, protocol }`.
#[napi(ts_return_type = "{ ok: boolean, names?: string[], protocol?: string }")]
pub fn read_zookeeper_list(env: &Env, prefix: String, reply: String) -> napi::Result<Unknown<'_>> {
    to_js(env, &common::zookeeper::read_list(&prefix, &reply))
}

/// The path of one page of the Lease listing of `namespace`: `…/leases?limit={limit}`
/// from the previous page's `continue` token (null first).
#[napi]
pub fn kubernetes_list_page(
    namespace: String,
    limit: u32,
    continue_token: Option<String>,
) -> String {
    common::kubernetes::list_page(namespace, limit, continue_token.as_deref())
}

/// Reads a Lease GET's response body as an inspection: `{ ok: true, holder }` (null: no
/// Lease, or no holder; `ttlLeftMs` is the record's `leaseDurationSeconds`, an upper
/// bound) or `{ ok: false, protocol }`.
#[napi(
    ts_return_type = "{ ok: boolean, holder?: { name: string, owner: string | null, token: bigint | null, ttlLeftMs: number | null, waiters: number | null, metadata: string | null } | null, protocol?: string }"
)]
pub fn read_kubernetes_inspect(
    env: &Env,
    name: String,
    reply: String,
) -> napi::Result<Unknown<'_>> {
    to_js(env, &common::kubernetes::read_inspect(&name, &reply))
}

/// Reads one page of the Lease listing: `{ ok: true, continue, holders }` (`continue`
/// null on the last page; the held Leases whose names start with `prefix`) or `{ ok:
/// false, protocol }`.
#[napi(
    ts_return_type = "{ ok: boolean, continue?: string | null, holders?: Array<{ name: string, owner: string | null, token: bigint | null, ttlLeftMs: number | null, waiters: number | null, metadata: string | null }>, protocol?: string }"
)]
pub fn read_kubernetes_list(env: &Env, prefix: String, reply: String) -> napi::Result<Unknown<'_>> {
    to_js(env, &common::kubernetes::read_list(&prefix, &reply))
}

/// Reads the JSON `{"results": [...]}` of a fenced ZooKeeper multi (the holder check's
/// result first): `{ ok: true, applied }` (`applied` false: the holder node is gone,
/// nothing was written) or `{ ok: false, protocol }`.
#[napi(ts_return_type = "{ ok: boolean, applied?: boolean, protocol?: string }")]
pub fn read_zookeeper_fenced(env: &Env, reply: String) -> napi::Result<Unknown<'_>> {
    to_js(env, &common::zookeeper::read_fenced(&reply))
}

/// The stable signed 64-bit advisory-lock key of `name` in `namespace` (a bigint).
#[napi]
pub fn advisory_key(namespace: String, name: String) -> BigInt {
    BigInt::from(fencepost_core::backends::postgres::advisory_key(
        &namespace, &name,
    ))
}

/// The statement taking the transaction-level advisory lock `name` as the first
/// statement of the caller's transaction: `{ sql, params, connection }`. `wait` false
/// tries once; true waits on the server under the transaction's `lock_timeout`. Read the
/// reply with `readXactLock`.
#[napi(
    ts_return_type = "{ sql: string, params: Array<null | boolean | bigint | string>, connection: string }"
)]
pub fn xact_lock_statement<'env>(
    env: &'env Env,
    #[napi(ts_arg_type = "object | undefined | null")] settings: Option<Unknown<'_>>,
    name: String,
    wait: bool,
) -> napi::Result<Unknown<'env>> {
    let fields = pg_fields(env, settings)?;
    let stmt = js(
        env,
        common::postgres::xact_lock_statement(fields, &name, wait),
    )?;
    to_js(env, &common::postgres::statement(&stmt))
}

/// Reads the reply of `xactLockStatement` (rows, or `{ sqlstate, message }`):
/// `{ ok: true, token }` (a bigint; null when the lock is held) or `{ ok: false, protocol }`.
#[napi(ts_return_type = "{ ok: boolean, token?: bigint | null, protocol?: string }")]
pub fn read_xact_lock<'env>(env: &'env Env, reply: Unknown<'_>) -> napi::Result<Unknown<'env>> {
    let reply = to_sql_reply(env, reply);
    to_js(env, &common::postgres::read_xact_lock(&reply))
}

/// The operator statement of lock `name`: with `force` false "is it locked?", with
/// `force` true the reset (frees a live lease row whoever holds it, keeps the token).
/// Read the reply with `readLockState`.
#[napi(
    ts_return_type = "{ sql: string, params: Array<null | boolean | bigint | string>, connection: string }"
)]
pub fn lock_state_statement<'env>(
    env: &'env Env,
    #[napi(ts_arg_type = "object | undefined | null")] settings: Option<Unknown<'_>>,
    name: String,
    force: bool,
) -> napi::Result<Unknown<'env>> {
    let fields = pg_fields(env, settings)?;
    let stmt = js(
        env,
        common::postgres::lock_state_statement(fields, &name, force),
    )?;
    to_js(env, &common::postgres::statement(&stmt))
}

/// Reads the reply of `lockStateStatement`: `{ ok: true, lease, advisoryPid }` or
/// `{ ok: false, protocol }`.
#[napi(
    ts_return_type = "{ ok: boolean, lease?: boolean, advisoryPid?: number | null, protocol?: string }"
)]
pub fn read_lock_state<'env>(env: &'env Env, reply: Unknown<'_>) -> napi::Result<Unknown<'env>> {
    let reply = to_sql_reply(env, reply);
    to_js(env, &common::postgres::read_lock_state(&reply))
}

/// The operator query "who holds lock `name`?" on PostgreSQL lease rows: one statement
/// reading the live row (owner, token, ms left on the server's clock, metadata). Read
/// its reply with `readPgHolders`.
#[napi(
    ts_return_type = "{ sql: string, params: Array<null | boolean | bigint | string>, connection: string }"
)]
pub fn pg_inspect_statement<'env>(
    env: &'env Env,
    #[napi(ts_arg_type = "object | undefined | null")] settings: Option<Unknown<'_>>,
    name: String,
) -> napi::Result<Unknown<'env>> {
    let fields = pg_fields(env, settings)?;
    let stmt = js(env, common::postgres::inspect_statement(fields, &name))?;
    to_js(env, &common::postgres::statement(&stmt))
}

/// The operator listing on PostgreSQL lease rows: the live rows whose names start with
/// `prefix` (LIKE metacharacters escaped), in name order, at most `limit` (1 ..=
/// 10000). Read its reply with `readPgHolders`.
#[napi(
    ts_return_type = "{ sql: string, params: Array<null | boolean | bigint | string>, connection: string }"
)]
pub fn pg_list_statement<'env>(
    env: &'env Env,
    #[napi(ts_arg_type = "object | undefined | null")] settings: Option<Unknown<'_>>,
    prefix: String,
    limit: u32,
) -> napi::Result<Unknown<'env>> {
    let fields = pg_fields(env, settings)?;
    let stmt = js(
        env,
        common::postgres::list_statement(fields, &prefix, limit.into()),
    )?;
    to_js(env, &common::postgres::statement(&stmt))
}

/// Reads the reply of `pgInspectStatement` or `pgListStatement`: `{ ok: true, holders }`
/// (`{ name, owner, token, ttlLeftMs, waiters, metadata }`, metadata JSON text or null)
/// or `{ ok: false, protocol }`.
#[napi(ts_return_type = "{ ok: boolean, holders?: Array<object>, protocol?: string }")]
pub fn read_pg_holders<'env>(env: &'env Env, reply: Unknown<'_>) -> napi::Result<Unknown<'env>> {
    let reply = to_sql_reply(env, reply);
    to_js(env, &common::postgres::read_holders(&reply))
}

/// Reads the reply of `etcdLeaderRange` as an inspection of lock `name`: `{ ok: true,
/// holder, lease }` (`holder` null when nobody holds it; its `ttlLeftMs` null until
/// `readEtcdTimeToLive` says) or `{ ok: false, protocol }`.
#[napi(
    ts_return_type = "{ ok: boolean, holder?: object | null, lease?: bigint, protocol?: string }"
)]
pub fn read_etcd_inspect<'env>(
    env: &'env Env,
    name: String,
    reply: Unknown<'_>,
) -> napi::Result<Unknown<'env>> {
    to_js(
        env,
        &common::read_etcd_inspect(&name, &etcd_reply_text(reply)),
    )
}

/// The `LeaseTimeToLive` call of etcd lease `lease` (a bigint from `readEtcdInspect`).
#[napi(
    ts_return_type = "{ backend: 'etcd', call: 'lease_time_to_live', path: string, body: string }"
)]
pub fn etcd_lease_time_to_live<'env>(env: &'env Env, lease: BigInt) -> napi::Result<Unknown<'env>> {
    let id = i64::try_from(self::token(env, &lease)?).unwrap_or(i64::MAX);
    to_js(env, &common::etcd_lease_time_to_live(id))
}

/// Reads the reply of `etcdLeaseTimeToLive`: `{ ok: true, ttlLeftMs }` (null: the lease
/// is gone) or `{ ok: false, protocol }`.
#[napi(ts_return_type = "{ ok: boolean, ttlLeftMs?: number | null, protocol?: string }")]
pub fn read_etcd_time_to_live<'env>(
    env: &'env Env,
    reply: Unknown<'_>,
) -> napi::Result<Unknown<'env>> {
    to_js(
        env,
        &common::read_etcd_time_to_live(&etcd_reply_text(reply)),
    )
}

/// One page of the etcd listing of the locks whose names start with `prefix`, after key
/// `after` (null: the first page). Read it with `readEtcdListPage`.
#[napi(ts_return_type = "{ backend: 'etcd', call: 'range', path: string, body: string }")]
pub fn etcd_list_page(
    env: &Env,
    key_prefix: String,
    prefix: String,
    after: Option<String>,
) -> napi::Result<Unknown<'_>> {
    to_js(
        env,
        &common::etcd_list_page(key_prefix, &prefix, after.as_deref()),
    )
}

/// Reads the reply of `etcdListPage`: `{ ok: true, names, after }` or `{ ok: false,
/// protocol }`.
#[napi(
    ts_return_type = "{ ok: boolean, names?: string[], after?: string | null, protocol?: string }"
)]
pub fn read_etcd_list_page<'env>(
    env: &'env Env,
    key_prefix: String,
    prefix: String,
    reply: Unknown<'_>,
) -> napi::Result<Unknown<'env>> {
    to_js(
        env,
        &common::read_etcd_list_page(key_prefix, &prefix, &etcd_reply_text(reply)),
    )
}

/// Version of the fencepost-core crate compiled into this addon.
#[napi]
pub fn core_version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}
