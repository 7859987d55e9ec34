//! The WebAssembly half of the `fencepost-wasm` npm package: `fencepost-core` through
//! wasm-bindgen, for browsers, edge workers (workerd / Cloudflare Workers), Deno, bundlers
//! and Node.
//!
//! This file is wasm-bindgen glue only: it reads JavaScript arguments into the plain
//! values of `fencepost-js-common` (the half shared with the napi-rs addon, where the
//! conventions of this low-level interface are written down) and turns its results and
//! errors into JavaScript values. It makes no lock decision. It exposes the same interface
//! as the napi-rs addon (`bindings-node/src/lib.rs`), so the shared JavaScript half (`js/`,
//! `createFencepost(native, 'wasm')`) gives the same public API and the same
//! `fencepost.d.ts`.
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

use fencepost_core::js_outputs::FlatValue;
use fencepost_core::{LockOptions, RedisCommand, RedisValue, Reply};
use fencepost_js_common::{self as common, JsError, JsMachine, JsOut, Primitive};
use js_sys::{Array, Object, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

// Talc, not the standard library's dlmalloc: the same job in fewer bytes of module.
#[cfg(all(target_family = "wasm", not(target_feature = "atomics")))]
#[global_allocator]
static ALLOCATOR: talc::wasm::WasmDynamicTalc = talc::wasm::new_wasm_dynamic_allocator();

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

// ---- errors and values ----------------------------------------------------------------------

/// A JS `Error` with `code` and its string properties, to be thrown (returned as `Err`).
fn error(e: JsError) -> JsValue {
    let error: JsValue = js_sys::Error::new(&e.message).into();
    // Setting a property on a fresh Error can only fail if a setter on the prototype chain
    // throws; the Error still says what went wrong.
    let _ = put(&error, "code", e.code);
    for (key, value) in e.properties() {
        let _ = put(&error, key, value);
    }
    error
}

/// `result`, its error as a JS `Error`.
fn js<T>(result: common::Result<T>) -> Result<T, JsValue> {
    result.map_err(error)
}

fn config_error(message: String) -> JsValue {
    error(JsError::config(message))
}

/// Builds the JavaScript value `out` describes.
fn to_js(out: &JsOut<'_>) -> Result<JsValue, JsValue> {
    Ok(match out {
        JsOut::Null => JsValue::NULL,
        JsOut::Bool(b) => JsValue::from_bool(*b),
        JsOut::Number(n) => JsValue::from_f64(*n),
        JsOut::Text(s) => JsValue::from_str(s),
        JsOut::Token(t) => JsValue::from(*t),
        JsOut::Int(n) => JsValue::from(*n),
        JsOut::Strings(items) => items
            .iter()
            .map(|s| JsValue::from_str(s))
            .collect::<Array>()
            .into(),
        JsOut::Array(items) => {
            let array = Array::new();
            for item in items {
                array.push(&to_js(item)?);
            }
            array.into()
        }
        JsOut::Object(props) => {
            let o: JsValue = Object::new().into();
            for (key, value) in props {
                put(&o, key, to_js(value)?)?;
            }
            o
        }
        JsOut::Error { code, message } => {
            let e: JsValue = js_sys::Error::new(message).into();
            put(&e, "code", *code)?;
            e
        }
    })
}

/// What a thrown value says about itself, for error messages (never throws).
fn describe_thrown(thrown: &JsValue) -> String {
    if let Some(error) = thrown.dyn_ref::<js_sys::Error>() {
        if let Ok(message) = get(error, &JsValue::from_str("message")) {
            if let Some(message) = message.as_string() {
                return message;
            }
        }
    }
    String::new()
}

// ---- arguments --------------------------------------------------------------------------------

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
    value
        .as_string()
        .ok_or_else(|| config_error(format!("{name} must be a string, got {}", type_name(value))))
}

fn optional_string(value: &JsValue, name: &str) -> Result<Option<String>, JsValue> {
    if value.is_undefined() || value.is_null() {
        Ok(None)
    } else {
        string(value, name).map(Some)
    }
}

fn number(value: &JsValue, name: &str) -> Result<f64, JsValue> {
    value
        .as_f64()
        .ok_or_else(|| config_error(format!("{name} must be a number, got {}", type_name(value))))
}

fn optional_boolean(value: &JsValue, name: &str) -> Result<Option<bool>, JsValue> {
    if value.is_undefined() || value.is_null() {
        return Ok(None);
    }
    value.as_bool().map(Some).ok_or_else(|| {
        config_error(format!(
            "{name} must be true or false, got {}",
            type_name(value)
        ))
    })
}

/// A lock or request id: an integer in 0 ..= 2^53 − 1.
fn id(value: &JsValue, name: &str) -> Result<f64, JsValue> {
    match value.as_f64() {
        Some(n) => Ok(n),
        None => Err(config_error(format!(
            "{name} must be an integer id ≥ 0, got {}",
            type_name(value)
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
    Err(error(common::bigint_out_of_range(name)))
}

fn token(value: &JsValue) -> Result<u64, JsValue> {
    bigint_u64(value, "token")
}

fn string_array(value: &JsValue, name: &str) -> Result<Vec<String>, JsValue> {
    array_items(value, name, "strings", string)
}

/// Each item of the array `value` read by `read`, which gets the item's name (`name[i]`);
/// a value that is not an array is an error saying it must be one of `what`.
fn array_items<T>(
    value: &JsValue,
    name: &str,
    what: &str,
    read: impl Fn(&JsValue, &str) -> Result<T, JsValue>,
) -> Result<Vec<T>, JsValue> {
    if !is_array(value).unwrap_or(false) {
        return Err(config_error(format!(
            "{name} must be an array of {what}, got {}",
            type_name(value)
        )));
    }
    // An array's length is below 2^32.
    let length = field(value, "length")?
        .and_then(|n| n.as_f64())
        .unwrap_or(0.0) as u32;
    let mut out = Vec::new();
    for i in 0..length {
        let item = get(value, &JsValue::from(i))?;
        out.push(read(&item, &format!("{name}[{i}]"))?);
    }
    Ok(out)
}

/// An options object's own enumerable properties with primitive values (`null` and
/// `undefined` left out), read through caught calls, for
/// `fencepost_js_common::lock_options`.
fn lock_options(o: &JsValue) -> Result<LockOptions, JsValue> {
    js(common::lock_options(primitives(o, "lock options")?))
}

/// The own enumerable properties with primitive values of the object `o` (`null` and
/// `undefined` left out), read through caught calls; `what` names it in errors.
fn primitives(o: &JsValue, what: &str) -> Result<Vec<(String, Primitive)>, JsValue> {
    if !o.is_object() || is_array(o).unwrap_or(true) {
        return Err(config_error(format!(
            "{what} must be an object, got {}",
            type_name(o)
        )));
    }
    let mut fields = Vec::new();
    for key in object_keys(o)?.iter() {
        let Some(name) = key.as_string() else {
            continue;
        };
        let value = get(o, &key)?;
        let value = if value.is_undefined() || value.is_null() {
            continue;
        } else if let Some(n) = value.as_f64() {
            Primitive::Number(n)
        } else if let Some(s) = value.as_string() {
            Primitive::Text(s)
        } else if let Some(b) = value.as_bool() {
            Primitive::Bool(b)
        } else {
            let what = type_name(&value);
            return Err(error(common::not_a_primitive(&name, &what)));
        };
        fields.push((name, value));
    }
    Ok(fields)
}

/// The backend of a machine, from the constructor's arguments: `kind` `"kubernetes"`
/// decodes `settings` (`{ namespace }`), as the Node addon does; any other kind is the
/// shared crate's.
fn backend(
    key_prefix: &JsValue,
    fair: &JsValue,
    kind: &JsValue,
    masters: &JsValue,
    settings: &JsValue,
) -> Result<fencepost_core::Backend, JsValue> {
    let fair = optional_boolean(fair, "fair")?;
    let kind = optional_string(kind, "kind")?;
    let key_prefix = optional_string(key_prefix, "keyPrefix")?;
    if kind.as_deref() == Some("kubernetes") {
        if key_prefix.is_some()
            || fair == Some(true)
            || !(masters.is_undefined() || masters.is_null())
        {
            return Err(config_error(
                "keyPrefix, fair and masters apply to Redis, etcd and Redlock machines, not to kind \"kubernetes\""
                    .to_owned(),
            ));
        }
        let fields = if settings.is_undefined() || settings.is_null() {
            Vec::new()
        } else {
            primitives(settings, "backend settings")?
        };
        return js(common::kubernetes::backend(fields));
    }
    let masters = if masters.is_undefined() || masters.is_null() {
        None
    } else {
        Some(string_array(masters, "masters")?)
    };
    let fields = if settings.is_undefined() || settings.is_null() {
        Vec::new()
    } else {
        primitives(settings, "backend settings")?
    };
    js(common::backend(
        kind.as_deref(),
        key_prefix,
        fair,
        masters,
        fields,
    ))
}

// ---- replies: JS value -> RedisValue ----------------------------------------------------------

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
        Err(thrown) => common::unreadable(&describe_thrown(&thrown)),
    }
}

fn read_redis_value(value: &JsValue, depth: usize) -> Result<RedisValue, JsValue> {
    if depth > common::MAX_REPLY_DEPTH {
        return Ok(common::too_deep());
    }
    if value.is_undefined() || value.is_null() {
        return Ok(RedisValue::Nil);
    }
    if let Some(b) = value.as_bool() {
        return Ok(RedisValue::Int(i64::from(b)));
    }
    if let Some(n) = value.as_f64() {
        return Ok(common::redis_number(n));
    }
    if value.is_bigint() {
        return Ok(common::redis_bigint(i64::try_from(value.clone()).ok()));
    }
    if let Some(s) = value.as_string() {
        return Ok(RedisValue::Data(s));
    }
    if !value.is_object() {
        // functions, symbols
        let what = format!("a value of type {}", type_name(value));
        return Ok(common::unsupported(&what));
    }
    if value.is_instance_of::<js_sys::Error>() {
        let message = match field(value, "message")? {
            Some(m) => to_js_string(&m)?.as_string().unwrap_or_default(),
            None => String::new(),
        };
        return Ok(common::redis_error(message));
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
    let keys: Vec<String> = object_keys(value)?
        .iter()
        .filter_map(|k| k.as_string())
        .collect();
    let mut text = None;
    if let [key] = keys.as_slice() {
        text = get(value, &JsValue::from_str(key))?.as_string();
    }
    Ok(common::redis_object(&keys, |_| text))
}

/// An etcd reply as the JSON text the gateway returned: a `string` (or UTF-8 bytes in a
/// `Uint8Array`). Never fails and runs no user code: anything else becomes text naming
/// what it was, which the core reads as a protocol error.
fn etcd_reply_text(value: &JsValue) -> String {
    if let Some(text) = value.as_string() {
        return text;
    }
    if let Some(bytes) = value.dyn_ref::<Uint8Array>() {
        return String::from_utf8(bytes.to_vec())
            .unwrap_or_else(|_| common::not_etcd_text("bytes that are not UTF-8"));
    }
    common::not_etcd_text(&format!("a value of type {}", type_name(value)))
}

// ---- Machine --------------------------------------------------------------------------------

/// Lock options read once (`new PreparedOptions(options)`, the object `acquire` takes),
/// for `acquirePreparedPoll`: a lock acquired again and again skips reading the object's
/// properties each time. Immutable; checked against a backend only when acquiring.
/// Throws `ERR_CONFIG` naming a bad option, as `acquire` does.
#[wasm_bindgen]
pub struct PreparedOptions {
    inner: LockOptions,
}

#[wasm_bindgen]
impl PreparedOptions {
    #[wasm_bindgen(constructor)]
    pub fn new(options: JsValue) -> Result<PreparedOptions, JsValue> {
        Ok(PreparedOptions {
            inner: lock_options(&options)?,
        })
    }
}

/// The sans-IO lock machine for a Redis or etcd backend: many locks, no I/O, no clock.
///
/// Every `nowMs` is the host's monotonic time in milliseconds (`performance.now()`); an
/// earlier one than given before throws `ERR_CLOCK`. After every input call `pollJson()`.
#[wasm_bindgen(js_name = Machine)]
pub struct Machine {
    inner: JsMachine,
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
    /// (requests with `backend: "etcd"`; a waiter parks on a watch, `operation: "wait"`)
    /// or `"redlock"` (requests with `backend: "redlock_part"`, one per master; `masters`
    /// names each master, `host:port/db`, in the order of their endpoints) or
    /// `"kubernetes"` (requests with `backend: "kubernetes"`, replies the API server's
    /// response bodies as text; `settings` `{ namespace }`, default `"default"`).
    #[wasm_bindgen(constructor)]
    pub fn new(
        key_prefix: JsValue,
        seed: JsValue,
        fair: JsValue,
        kind: JsValue,
        masters: JsValue,
        settings: JsValue,
    ) -> Result<Machine, JsValue> {
        let backend = backend(&key_prefix, &fair, &kind, &masters, &settings)?;
        let seed = if seed.is_undefined() || seed.is_null() {
            None
        } else {
            Some(bigint_u64(&seed, "seed")?)
        };
        let hint = " (Web Crypto's crypto.getRandomValues; edge workers provide it only \
                    inside a request handler: create backends and locks there)";
        let inner = js(JsMachine::new(backend, seed, hint))?;
        Ok(Machine { inner })
    }

    /// Checks a lock name and options exactly as `acquire` would, without acquiring.
    pub fn check(&self, name: JsValue, options: JsValue) -> Result<(), JsValue> {
        let name = string(&name, "name")?;
        let options = lock_options(&options)?;
        js(self.inner.check(&name, &options))
    }

    /// Starts acquiring `name`; returns the new lock id.
    pub fn acquire(
        &mut self,
        now_ms: JsValue,
        name: JsValue,
        options: JsValue,
    ) -> Result<f64, JsValue> {
        let now_ms = number(&now_ms, "nowMs")?;
        let name = string(&name, "name")?;
        let options = lock_options(&options)?;
        js(self.inner.acquire(now_ms, &name, options))
    }

    /// `acquire` with options read beforehand (`PreparedOptions`), then `pollJson()`, in
    /// one call (the driver's path): the poll's JSON text with the new lock id in front,
    /// `[lock, nextTimeoutMs | null, observationsPending, ...records]`.
    #[wasm_bindgen(js_name = acquirePreparedPoll)]
    pub fn acquire_prepared_poll(
        &mut self,
        now_ms: f64,
        name: &str,
        options: &PreparedOptions,
    ) -> Result<String, JsValue> {
        js(self
            .inner
            .acquire_poll_json(now_ms, name, options.inner.clone()))
    }

    /// Releases `lock`, or cancels its acquisition. A finished lock ignores it.
    pub fn release(&mut self, now_ms: JsValue, lock: JsValue) -> Result<(), JsValue> {
        let now_ms = number(&now_ms, "nowMs")?;
        let lock = id(&lock, "lock")?;
        js(self.inner.release(now_ms, lock))
    }

    /// Renews `lock` now if it is held (a manual extend). A lock not held ignores it.
    pub fn extend(&mut self, now_ms: JsValue, lock: JsValue) -> Result<(), JsValue> {
        let now_ms = number(&now_ms, "nowMs")?;
        let lock = id(&lock, "lock")?;
        js(self.inner.extend(now_ms, lock))
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
        let now_ms = number(&now_ms, "nowMs")?;
        let request = id(&request, "request")?;
        let reply = if self.inner.reads_text() {
            self.inner.text_reply(etcd_reply_text(&value))
        } else {
            Reply::Redis(to_redis_value(&value, 0))
        };
        js(self.inner.reply(now_ms, request, reply))
    }

    /// `reply`, then `pollJson()`, in one call (the driver's path: a call across the
    /// module boundary costs more than the machine's decision).
    #[wasm_bindgen(js_name = replyPoll)]
    pub fn reply_poll(
        &mut self,
        now_ms: JsValue,
        request: JsValue,
        value: JsValue,
    ) -> Result<String, JsValue> {
        self.reply(now_ms, request, value)?;
        Ok(self.inner.poll_json())
    }

    /// `release`, then `pollJson()`, in one call.
    #[wasm_bindgen(js_name = releasePoll)]
    pub fn release_poll(&mut self, now_ms: JsValue, lock: JsValue) -> Result<String, JsValue> {
        self.release(now_ms, lock)?;
        Ok(self.inner.poll_json())
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
        let now_ms = number(&now_ms, "nowMs")?;
        let request = id(&request, "request")?;
        let message = string(&message, "message")?;
        js(self.inner.transport_error(now_ms, request, message))
    }

    /// Time passed: fires due timers. Early and spurious calls are harmless.
    pub fn timeout(&mut self, now_ms: JsValue) -> Result<(), JsValue> {
        let now_ms = number(&now_ms, "nowMs")?;
        js(self.inner.timeout(now_ms))
    }

    /// Drains every pending output as the text of one JSON array, in the layout of
    /// `fencepost_core::js_outputs` with a second host slot: `[nextTimeoutMs | null,
    /// observationsPending, ...records]`, tokens as decimal strings. Requests and events come in order; `nextTimeoutMs` is when to
    /// call `timeout`, or `null` when no timer is set. js/machine.js decodes it
    /// (`LockMachine.poll()` returns `{ outputs, nextTimeoutMs }`).
    // One string crosses (one UTF-8 decode) instead of a call per slot and per string.
    #[wasm_bindgen(js_name = pollJson)]
    pub fn poll_json(&mut self) -> String {
        self.inner.poll_json()
    }

    /// Starts observing with `options`, an array `[events, warnings,
    /// lateRenewalFraction, heldLongTtls, hotLockAttempts, hotLockWaiters,
    /// unreachableEveryMs]` of numbers (booleans as 0 or 1), or stops with `null`.
    /// Throws `ERR_CONFIG` naming a bad option.
    pub fn observe(&mut self, options: JsValue) -> Result<(), JsValue> {
        if options.is_null() || options.is_undefined() {
            return js(self.inner.observe(None));
        }
        let numbers: Vec<f64> = Array::from(&options)
            .iter()
            .map(|v| v.as_f64().unwrap_or(f64::NAN))
            .collect();
        js(self.inner.observe(Some(&numbers)))
    }

    /// Drains the observations as one flat array: per observation `lockId, name,
    /// event, level, message, fieldCount`, then `fieldCount` name/value pairs
    /// (js/observe.js decodes it).
    #[wasm_bindgen(js_name = observeFlat)]
    pub fn observe_flat(&mut self) -> Array {
        let out = Array::new();
        let _ = self.inner.poll_observations(&mut |value| {
            out.push(&match value {
                FlatValue::Number(n) => JsValue::from_f64(n),
                FlatValue::Text(t) => JsValue::from_str(&t),
                FlatValue::Token(t) => JsValue::from(t),
                FlatValue::Null => JsValue::NULL,
            });
            Ok::<(), core::convert::Infallible>(())
        });
        out
    }

    /// The owner id of `lock` (32 lowercase hex digits, the value in the lock key), or
    /// `null` once the machine has forgotten the lock.
    pub fn owner(&self, lock: JsValue) -> Result<JsValue, JsValue> {
        let lock = id(&lock, "lock")?;
        Ok(or_null(js(self.inner.owner(lock))?))
    }

    /// The validity deadline of `lock` (monotonic ms) while it is held, else `null`.
    #[wasm_bindgen(js_name = validUntilMs)]
    pub fn valid_until_ms(&self, lock: JsValue) -> Result<JsValue, JsValue> {
        let lock = id(&lock, "lock")?;
        Ok(or_null(js(self.inner.valid_until_ms(lock))?))
    }

    /// How many locks the machine tracks (pending, held, or finished with requests out).
    #[wasm_bindgen(getter = lockCount)]
    pub fn lock_count(&self) -> u32 {
        self.inner.lock_count()
    }

    /// How many requests await a reply or transport error.
    #[wasm_bindgen(getter = requestsInFlight)]
    pub fn requests_in_flight(&self) -> u32 {
        self.inner.requests_in_flight()
    }
}

/// Checks a lock name and options as a machine built with the same `keyPrefix`, `fair`,
/// `kind`, `masters` and `settings` would (`Machine.check`), without building one: no Web Crypto needed, so it
/// works outside a worker's request handler too.
#[wasm_bindgen(js_name = checkAcquire)]
pub fn check_acquire(
    key_prefix: JsValue,
    fair: JsValue,
    kind: JsValue,
    name: JsValue,
    options: JsValue,
    masters: JsValue,
    settings: JsValue,
) -> Result<(), JsValue> {
    let backend = backend(&key_prefix, &fair, &kind, &masters, &settings)?;
    let name = string(&name, "name")?;
    let options = lock_options(&options)?;
    js(common::check_acquire(&backend, &name, &options))
}

// ---- MemoryRedis ----------------------------------------------------------------------------

/// The core's in-memory Redis (`fencepost_core::memory::MemoryRedis`): runs fencepost's
/// scripts with TTLs on the host's monotonic time.
#[wasm_bindgen(js_name = MemoryRedis)]
pub struct MemoryRedis {
    inner: fencepost_core::memory::MemoryRedis,
}

fn now(now_ms: &JsValue) -> Result<fencepost_core::Instant, JsValue> {
    js(common::instant(number(now_ms, "nowMs")?))
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
        let now = now(&now_ms)?;
        if !command.is_object() {
            return Err(config_error(format!(
                "command must be an object {{ script, keys, args }}, got {}",
                type_name(&command)
            )));
        }
        let script = field(&command, "script")?.unwrap_or(JsValue::UNDEFINED);
        let keys = field(&command, "keys")?.unwrap_or(JsValue::UNDEFINED);
        let args = field(&command, "args")?.unwrap_or(JsValue::UNDEFINED);
        let cmd = RedisCommand {
            script: js(common::script(&string(&script, "script")?))?,
            keys: string_array(&keys, "keys")?,
            args: string_array(&args, "args")?,
            wait: None,
        };
        to_js(&common::redis_value(&self.inner.eval(now, &cmd)))
    }

    /// `GET key` at `nowMs` (expired keys are gone).
    pub fn get(&self, now_ms: JsValue, key: JsValue) -> Result<JsValue, JsValue> {
        let now = now(&now_ms)?;
        let key = string(&key, "key")?;
        Ok(or_null(self.inner.get(now, &key)))
    }

    /// `PTTL key` in ms at `nowMs`: `null` when missing, -1 when it has no expiry.
    pub fn pttl(&self, now_ms: JsValue, key: JsValue) -> Result<JsValue, JsValue> {
        let now = now(&now_ms)?;
        let key = string(&key, "key")?;
        Ok(or_null(self.inner.pttl(now, &key).map(|ms| ms as f64)))
    }

    /// `LPOP key` at `nowMs`: the head of a list (a fair waiter's wake-up), or `null`
    /// when the list is missing, empty or expired. Never blocks: hosts emulating `BLPOP`
    /// park the caller themselves until this yields or the timeout passes.
    pub fn lpop(&mut self, now_ms: JsValue, key: JsValue) -> Result<JsValue, JsValue> {
        let now = now(&now_ms)?;
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

/// An in-memory fence: the highest fencing token accepted per resource.
#[wasm_bindgen(js_name = Fence)]
pub struct Fence {
    inner: fencepost_core::Fence,
}

#[wasm_bindgen(js_class = Fence)]
impl Fence {
    /// An empty fence.
    #[wasm_bindgen(constructor)]
    pub fn new() -> Fence {
        Fence {
            inner: fencepost_core::Fence::new(),
        }
    }

    /// Accepts a write to `resource` carrying `token` (and remembers it): returns `null`.
    /// Refuses a token lower than one accepted before: returns
    /// `{ resource, token, highest, message }`.
    /// With `owner` (32 hex digits; `null`/`undefined` for none) the owner-bound rule:
    /// the same token from another owner is refused too (`reason` `"duplicate_grant"`).
    pub fn check(
        &mut self,
        resource: JsValue,
        token: JsValue,
        owner: JsValue,
    ) -> Result<JsValue, JsValue> {
        let resource = string(&resource, "resource")?;
        let token = self::token(&token)?;
        let owner = optional_string(&owner, "ownerId")?;
        let out = js(common::fence_check(
            &mut self.inner,
            &resource,
            token,
            owner.as_deref(),
        ))?;
        to_js(&out)
    }

    /// The highest token accepted for `resource` (a bigint), or `null`.
    pub fn highest(&self, resource: JsValue) -> Result<JsValue, JsValue> {
        let resource = string(&resource, "resource")?;
        Ok(or_null(self.inner.highest(&resource).map(|t| t.get())))
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
    owner_column: JsValue,
) -> Result<String, JsValue> {
    let table = string(&table, "table")?;
    let id_column = string(&id_column, "idColumn")?;
    let token_column = string(&token_column, "tokenColumn")?;
    let columns = string_array(&columns, "columns")?;
    let style = string(&style, "style")?;
    let owner_column = optional_string(&owner_column, "ownerColumn")?;
    js(common::sql_fenced_update(
        &table,
        &id_column,
        &token_column,
        &columns,
        &style,
        owner_column.as_deref(),
    ))
}

/// The fenced Redis SET as a script call `{ script, sha1, keys, args }`.
#[wasm_bindgen(js_name = redisFencedSet)]
pub fn redis_fenced_set(
    data_key: JsValue,
    fence_key: JsValue,
    token: JsValue,
    value: JsValue,
    owner: JsValue,
) -> Result<JsValue, JsValue> {
    let data_key = string(&data_key, "dataKey")?;
    let fence_key = string(&fence_key, "fenceKey")?;
    let token = self::token(&token)?;
    let value = string(&value, "value")?;
    let owner = optional_string(&owner, "ownerId")?;
    let cmd = js(common::redis_fenced_set(
        &data_key,
        &fence_key,
        token,
        &value,
        owner.as_deref(),
    ))?;
    to_js(&common::script_call(&cmd))
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
    let reply = to_redis_value(&reply, 0);
    to_js(&common::read_redis_fenced_set(&resource, token, &reply))
}

/// The operator script call for lock `name`: `force` false "is it locked?", true the
/// reset (frees the lock whoever holds it, keeps the token counter; `fair`: grants the
/// lock to the first live waiter). Read the reply with `readRedisFlag`.
#[wasm_bindgen(js_name = redisOperator)]
pub fn redis_operator(
    key_prefix: JsValue,
    name: JsValue,
    fair: bool,
    force: bool,
) -> Result<JsValue, JsValue> {
    let key_prefix = string(&key_prefix, "keyPrefix")?;
    let name = string(&name, "lock name")?;
    to_js(&common::script_call(&common::redis_operator(
        key_prefix, &name, fair, force,
    )))
}

/// Reads the reply of `redisOperator`: `{ ok: true, value }` or `{ ok: false, protocol }`.
#[wasm_bindgen(js_name = readRedisFlag)]
pub fn read_redis_flag(reply: JsValue) -> Result<JsValue, JsValue> {
    to_js(&common::read_redis_flag(&to_redis_value(&reply, 0)))
}

/// The operator query "who holds lock `name`?" as a script call (script `inspect`).
/// Read the reply with `readRedisInspect`.
#[wasm_bindgen(js_name = redisInspect)]
pub fn redis_inspect(key_prefix: JsValue, name: JsValue, fair: bool) -> Result<JsValue, JsValue> {
    let key_prefix = string(&key_prefix, "keyPrefix")?;
    let name = string(&name, "lock name")?;
    to_js(&common::script_call(&common::redis_inspect(
        key_prefix, &name, fair,
    )))
}

/// One bounded step of the listing of locks whose names start with `prefix`, from
/// `cursor`, as a script call (script `list`). Read it with `readRedisList`.
#[wasm_bindgen(js_name = redisListStep)]
pub fn redis_list_step(
    key_prefix: JsValue,
    prefix: JsValue,
    cursor: JsValue,
    fair: bool,
) -> Result<JsValue, JsValue> {
    let key_prefix = string(&key_prefix, "keyPrefix")?;
    let prefix = string(&prefix, "prefix")?;
    let cursor = string(&cursor, "cursor")?;
    to_js(&common::script_call(&common::redis_list_step(
        key_prefix, &prefix, &cursor, fair,
    )))
}

/// Reads the reply of `redisInspect`: `{ ok: true, holder }` or `{ ok: false, protocol }`.
#[wasm_bindgen(js_name = readRedisInspect)]
pub fn read_redis_inspect(name: JsValue, reply: JsValue) -> Result<JsValue, JsValue> {
    let name = string(&name, "lock name")?;
    to_js(&common::read_redis_inspect(
        &name,
        &to_redis_value(&reply, 0),
    ))
}

/// Reads the reply of `redisListStep`: `{ ok: true, cursor, holders }` or
/// `{ ok: false, protocol }`.
#[wasm_bindgen(js_name = readRedisList)]
pub fn read_redis_list(key_prefix: JsValue, reply: JsValue) -> Result<JsValue, JsValue> {
    let key_prefix = string(&key_prefix, "keyPrefix")?;
    to_js(&common::read_redis_list(
        key_prefix,
        &to_redis_value(&reply, 0),
    ))
}

/// The etcd range finding who holds lock `name`, as a gateway call (`readEtcdHolder`).
#[wasm_bindgen(js_name = etcdHolderRange)]
pub fn etcd_holder_range(key_prefix: JsValue, name: JsValue) -> Result<JsValue, JsValue> {
    let key_prefix = string(&key_prefix, "keyPrefix")?;
    to_js(&common::etcd_holder_range(
        key_prefix,
        &string(&name, "lock name")?,
    ))
}

/// Reads the reply of `etcdHolderRange`: `{ ok: true, token, lease }` (`token` null when
/// nobody holds the lock) or `{ ok: false, protocol }`.
#[wasm_bindgen(js_name = readEtcdHolder)]
pub fn read_etcd_holder(reply: JsValue) -> Result<JsValue, JsValue> {
    to_js(&common::read_etcd_holder(&etcd_reply_text(&reply)))
}

/// The etcd range finding who leads election `name`, with the key's value, as a gateway
/// call (`readEtcdLeader`).
#[wasm_bindgen(js_name = etcdLeaderRange)]
pub fn etcd_leader_range(key_prefix: JsValue, name: JsValue) -> Result<JsValue, JsValue> {
    let key_prefix = string(&key_prefix, "keyPrefix")?;
    to_js(&common::etcd_leader_range(
        key_prefix,
        &string(&name, "election name")?,
    ))
}

/// Reads the reply of `etcdLeaderRange`: `{ ok: true, token, lease, value }` (`token`
/// null when nobody leads) or `{ ok: false, protocol }`.
#[wasm_bindgen(js_name = readEtcdLeader)]
pub fn read_etcd_leader(reply: JsValue) -> Result<JsValue, JsValue> {
    to_js(&common::read_etcd_leader(&etcd_reply_text(&reply)))
}

/// A leader's publication of `value` in its own key, on its lease, while the key's create
/// revision is still `token` (etcd's `Election.Proclaim`), as a gateway call. Read the
/// reply with `readEtcdFencedTxn`.
#[wasm_bindgen(js_name = etcdProclaim)]
pub fn etcd_proclaim(
    key_prefix: JsValue,
    name: JsValue,
    owner_id: JsValue,
    token: JsValue,
    value: JsValue,
) -> Result<JsValue, JsValue> {
    let key_prefix = string(&key_prefix, "keyPrefix")?;
    let name = string(&name, "name")?;
    let owner = string(&owner_id, "ownerId")?;
    let token = self::token(&token)?;
    let value = string(&value, "value")?;
    to_js(&js(common::etcd_proclaim(
        key_prefix, &name, &owner, token, &value,
    ))?)
}

/// The revoke of etcd lease `lease` (a bigint from `readEtcdHolder`) as a gateway call.
#[wasm_bindgen(js_name = etcdLeaseRevoke)]
pub fn etcd_lease_revoke(lease: JsValue) -> Result<JsValue, JsValue> {
    let id = i64::try_from(self::token(&lease)?).unwrap_or(i64::MAX);
    to_js(&common::etcd_lease_revoke(id))
}

/// Reads the reply of `etcdLeaseRevoke`: `{ ok: true, value }` or `{ ok: false, protocol }`.
#[wasm_bindgen(js_name = readEtcdRevoke)]
pub fn read_etcd_revoke(reply: JsValue) -> Result<JsValue, JsValue> {
    to_js(&common::read_etcd_revoke(&etcd_reply_text(&reply)))
}

/// Reads the reply of `etcdLeaderRange` as an inspection of lock `name`: `{ ok: true,
/// holder, lease }` (`holder` null when nobody holds it; its `ttlLeftMs` null until
/// `readEtcdTimeToLive` says) or `{ ok: false, protocol }`.
#[wasm_bindgen(js_name = readEtcdInspect)]
pub fn read_etcd_inspect(name: JsValue, reply: JsValue) -> Result<JsValue, JsValue> {
    let name = string(&name, "lock name")?;
    to_js(&common::read_etcd_inspect(&name, &etcd_reply_text(&reply)))
}

/// The `LeaseTimeToLive` call of etcd lease `lease` (a bigint from `readEtcdInspect`).
#[wasm_bindgen(js_name = etcdLeaseTimeToLive)]
pub fn etcd_lease_time_to_live(lease: JsValue) -> Result<JsValue, JsValue> {
    let id = i64::try_from(self::token(&lease)?).unwrap_or(i64::MAX);
    to_js(&common::etcd_lease_time_to_live(id))
}

/// Reads the reply of `etcdLeaseTimeToLive`: `{ ok: true, ttlLeftMs }` (null: the lease
/// is gone) or `{ ok: false, protocol }`.
#[wasm_bindgen(js_name = readEtcdTimeToLive)]
pub fn read_etcd_time_to_live(reply: JsValue) -> Result<JsValue, JsValue> {
    to_js(&common::read_etcd_time_to_live(&etcd_reply_text(&reply)))
}

/// One page of the etcd listing of the locks whose names start with `prefix`, after key
/// `after` (null: the first page), as a gateway call (`readEtcdListPage`).
#[wasm_bindgen(js_name = etcdListPage)]
pub fn etcd_list_page(
    key_prefix: JsValue,
    prefix: JsValue,
    after: JsValue,
) -> Result<JsValue, JsValue> {
    let key_prefix = string(&key_prefix, "keyPrefix")?;
    let prefix = string(&prefix, "prefix")?;
    let after = if after.is_null() || after.is_undefined() {
        None
    } else {
        Some(string(&after, "after")?)
    };
    to_js(&common::etcd_list_page(
        key_prefix,
        &prefix,
        after.as_deref(),
    ))
}

/// Reads the reply of `etcdListPage`: `{ ok: true, names, after }` or `{ ok: false,
/// protocol }`.
#[wasm_bindgen(js_name = readEtcdListPage)]
pub fn read_etcd_list_page(
    key_prefix: JsValue,
    prefix: JsValue,
    reply: JsValue,
) -> Result<JsValue, JsValue> {
    let key_prefix = string(&key_prefix, "keyPrefix")?;
    let prefix = string(&prefix, "prefix")?;
    to_js(&common::read_etcd_list_page(
        key_prefix,
        &prefix,
        &etcd_reply_text(&reply),
    ))
}

/// Every script fencepost runs on Redis: `{ acquire: { sha1, source }, renew, release,
/// fenced_set, acquire_fair, release_fair, is_locked, force_release, inspect, list,
/// renew_many }`.
#[wasm_bindgen(js_name = redisScripts)]
pub fn redis_scripts() -> Result<JsValue, JsValue> {
    to_js(&common::redis_scripts())
}

/// The names of the codes in `pollJson()`'s records, each list in code order, and the
/// loss reason hosts report when a backend is closed: `{ operation, lostReason,
/// acquireFailedReason, redisScript, purpose, closed }`.
#[wasm_bindgen(js_name = coreNames)]
pub fn core_names() -> Result<JsValue, JsValue> {
    to_js(&common::core_names())
}

/// The lease key of lock `name` under `keyPrefix` (`{prefix}{{name}}:lock`).
#[wasm_bindgen(js_name = lockKey)]
pub fn lock_key(key_prefix: JsValue, name: JsValue) -> Result<String, JsValue> {
    let key_prefix = string(&key_prefix, "keyPrefix")?;
    Ok(common::lock_key(key_prefix, &string(&name, "name")?))
}

/// The fencing-token counter key of lock `name` under `keyPrefix`.
#[wasm_bindgen(js_name = tokenKey)]
pub fn token_key(key_prefix: JsValue, name: JsValue) -> Result<String, JsValue> {
    let key_prefix = string(&key_prefix, "keyPrefix")?;
    Ok(common::token_key(key_prefix, &string(&name, "name")?))
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
    let owner = string(&owner_id, "ownerId")?;
    js(common::etcd_holder_key(key_prefix, &name, &owner))
}

/// The etcd lease id of the acquisition `ownerId` (its first 8 bytes, big-endian, as a
/// positive int64), as a bigint.
#[wasm_bindgen(js_name = etcdLeaseId)]
pub fn etcd_lease_id(owner_id: JsValue) -> Result<JsValue, JsValue> {
    let owner = string(&owner_id, "ownerId")?;
    Ok(JsValue::from(js(common::etcd_lease_id(&owner))?))
}

/// `[key, value]` pairs of strings, as arrays (their length is checked by the shared half).
fn string_pairs(value: &JsValue, name: &str) -> Result<Vec<Vec<String>>, JsValue> {
    array_items(value, name, "[key, value] pairs", string_array)
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
    let owner = string(&owner_id, "ownerId")?;
    js(common::owner_id(&owner))?;
    let token = self::token(&token)?;
    let puts = string_pairs(&puts, "puts")?;
    let deletes = if deletes.is_undefined() || deletes.is_null() {
        Vec::new()
    } else {
        string_array(&deletes, "deletes")?
    };
    let call = common::etcd_fenced_txn(key_prefix, &name, &owner, token, puts, deletes);
    to_js(&js(call)?)
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
    to_js(&common::read_etcd_fenced_txn(
        &name,
        token,
        &etcd_reply_text(&reply),
    ))
}

/// The path of one page of the Lease listing of `namespace`: `…/leases?limit={limit}`
/// from the previous page's `continue` token (null first).
#[wasm_bindgen(js_name = kubernetesListPage)]
pub fn kubernetes_list_page(
    namespace: JsValue,
    limit: JsValue,
    continue_token: JsValue,
) -> Result<String, JsValue> {
    let namespace = string(&namespace, "namespace")?;
    let limit = number(&limit, "limit")?;
    if !(1.0..=f64::from(u32::MAX)).contains(&limit) || limit.fract() != 0.0 {
        return Err(config_error(format!(
            "limit must be an integer in 1 ..= 2^32 - 1, got {limit}"
        )));
    }
    let continue_token = optional_string(&continue_token, "continue")?;
    Ok(common::kubernetes::list_page(
        namespace,
        limit as u32,
        continue_token.as_deref(),
    ))
}

/// Reads a Lease GET's response body as an inspection: `{ ok: true, holder }` (null: no
/// Lease, or no holder; `ttlLeftMs` is the record's `leaseDurationSeconds`, an upper
/// bound) or `{ ok: false, protocol }`.
#[wasm_bindgen(js_name = readKubernetesInspect)]
pub fn read_kubernetes_inspect(name: JsValue, reply: JsValue) -> Result<JsValue, JsValue> {
    let name = string(&name, "lock name")?;
    let reply = string(&reply, "reply")?;
    to_js(&common::kubernetes::read_inspect(&name, &reply))
}

/// Reads one page of the Lease listing: `{ ok: true, continue, holders }` (`continue`
/// null on the last page; the held Leases whose names start with `prefix`) or `{ ok:
/// false, protocol }`.
#[wasm_bindgen(js_name = readKubernetesList)]
pub fn read_kubernetes_list(prefix: JsValue, reply: JsValue) -> Result<JsValue, JsValue> {
    let prefix = string(&prefix, "prefix")?;
    let reply = string(&reply, "reply")?;
    to_js(&common::kubernetes::read_list(&prefix, &reply))
}

/// Version of the fencepost-core crate compiled into this module.
#[wasm_bindgen(js_name = coreVersion)]
pub fn core_version() -> String {
    env!("CARGO_PKG_VERSION").to_owned()
}
