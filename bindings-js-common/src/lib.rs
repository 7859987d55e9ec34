//! The half of fencepost's two JavaScript addons that does not depend on the JS engine
//! binding: the napi-rs addon (`bindings-node`) and the wasm-bindgen module
//! (`bindings-wasm`) read their arguments into the plain Rust values taken here, and
//! turn the [`JsError`]s and [`JsOut`] trees returned here into JavaScript values. Each
//! addon keeps only that glue, so both expose one low-level interface by construction.
//!
//! Conventions of that interface (the shared JavaScript layer in `js/` builds the public
//! API on it):
//! * Times are milliseconds as `number` on the host's monotonic clock
//!   (`performance.now()`), converted here once to the core's nanoseconds:
//!   `round(ms × 1e6)`, saturating. A time that is not finite or is negative is refused.
//! * Lock and request ids are `number`s (integers below 2^53).
//! * Fencing tokens, etcd lease ids and etcd revisions are `bigint`, never a lossy
//!   `number` (etcd request bodies carry them as decimal strings, as the JSON gateway does).
//! * Lock options are an object in the JavaScript spelling (`ttlMs`, `acquireTimeoutMs`,
//!   `autoRenew`, …: an option `fooBarMs` is the core's `foo_bar` in milliseconds, any
//!   other `fooBar` is `foo_bar` as is), decoded by the core's serde type
//!   [`LockOptions`]: an unknown option is an error naming it.
//! * A machine speaks one backend's protocol, chosen at construction: `"redis"` (default),
//!   `"etcd"` or `"redlock"` (with its masters' names), as the core's [`Backend`]; both
//!   addons add `"kubernetes"` and the Node addon `"postgres"` and `"zookeeper"` (features
//!   of the same names, each with a settings object: modules `postgres`, `zookeeper`,
//!   `kubernetes`).
//! * Errors are thrown as `Error`s with `code` `"ERR_CONFIG"` (the caller's input or
//!   usage, `kind` = the core's [`UsageError::kind`] or `"invalid_argument"`, `option` =
//!   the option's JavaScript name; the core's messages say durations in milliseconds and
//!   option names the JavaScript way, [`Host::Js`]), `"ERR_CLOCK"`
//!   (time went backwards) or `"ERR_BACKEND"` (no secure randomness for owner ids).
//!   Fence refusals and unreadable replies are *returned* as data.
//!
//! Nothing here panics on any input.

use std::borrow::Cow;
use std::fmt;

use fencepost_core::backends::etcd::{
    self as etcd, EtcdBackend as EtcdSettings, EtcdFenced, EtcdOp, EtcdRequest,
};
use fencepost_core::backends::redis::{self, RedisBackend as RedisSettings};
use fencepost_core::backends::RedlockBackend as RedlockSettings;
use fencepost_core::fence::{self, ParamStyle};
use fencepost_core::js_outputs::{self, ns_to_ms, FlatValue};
use fencepost_core::text::{js_name, number, Host};
use fencepost_core::{
    AcquireFailedReason, Backend, FencingToken, Field, Input, Instant, LockId, LockOptions,
    LostReason, Machine, ObserveOptions, Operation, Output, OwnerId, Purpose, RedisCommand,
    RedisScript, RedisValue, Reply, RequestBody, RequestId, StaleReason, StaleToken, UsageError,
};
use serde::de::{self, value::MapDeserializer, IntoDeserializer, Visitor};
use serde::Deserialize;

#[cfg(feature = "kubernetes")]
pub mod kubernetes;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "zookeeper")]
pub mod zookeeper;

// ---- errors -----------------------------------------------------------------------------

/// An error for the addon to throw: a JS `Error` with `message`, `code` and the string
/// properties `kind` and `option` when set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsError {
    /// `"ERR_CONFIG"`, `"ERR_CLOCK"` or `"ERR_BACKEND"`.
    pub code: &'static str,
    /// The message.
    pub message: String,
    /// The error's kind: the core's [`UsageError::kind`], or `"invalid_argument"` for a
    /// value of the wrong type or shape.
    pub kind: Option<&'static str>,
    /// The option the error is about, as JavaScript spells it (`retryBaseMs`; for a
    /// value that could not be decoded, the name it was given under).
    pub option: Option<String>,
}

impl JsError {
    /// `ERR_CONFIG` of kind `invalid_argument`: a value of the wrong type or shape.
    pub fn config(message: impl Into<String>) -> Self {
        JsError {
            code: "ERR_CONFIG",
            message: message.into(),
            kind: Some("invalid_argument"),
            option: None,
        }
    }

    /// `ERR_BACKEND`: the host cannot provide what the core needs (secure randomness).
    pub fn backend(message: impl Into<String>) -> Self {
        JsError {
            code: "ERR_BACKEND",
            message: message.into(),
            kind: None,
            option: None,
        }
    }

    /// The string properties to set on the `Error` besides `code` (`kind`, `option`),
    /// those that are set.
    pub fn properties(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [("kind", self.kind), ("option", self.option.as_deref())]
            .into_iter()
            .filter_map(|(key, value)| value.map(|v| (key, v)))
    }
}

impl From<UsageError> for JsError {
    fn from(err: UsageError) -> Self {
        let message = err.render(Host::Js);
        let option = match &err {
            UsageError::InvalidOption { option, .. } => {
                Some(Host::Js.option_name(option).into_owned())
            }
            UsageError::UnsafePurpose { .. } => Some("purpose".to_owned()),
            _ => None,
        };
        JsError {
            code: match err {
                UsageError::TimeWentBackwards { .. } | UsageError::TimeOutOfRange { .. } => {
                    "ERR_CLOCK"
                }
                _ => "ERR_CONFIG",
            },
            message,
            kind: Some(err.kind()),
            option,
        }
    }
}

/// The addons' result type.
pub type Result<T, E = JsError> = core::result::Result<T, E>;

// ---- output values ------------------------------------------------------------------------

/// A JavaScript value to build: what the addon returns for a non-primitive result.
#[derive(Clone, Debug, PartialEq)]
pub enum JsOut<'a> {
    /// `null`.
    Null,
    /// A boolean.
    Bool(bool),
    /// A number.
    Number(f64),
    /// A string.
    Text(Cow<'a, str>),
    /// A bigint in 0 ..= 2^64 − 1 (fencing tokens).
    Token(u64),
    /// A bigint in −2^63 ..< 2^63 (etcd revisions and lease ids, Redis integers past 2^53).
    Int(i64),
    /// An array of strings.
    Strings(&'a [String]),
    /// An array.
    Array(Vec<JsOut<'a>>),
    /// A plain object with these properties, in this order.
    Object(Vec<(&'a str, JsOut<'a>)>),
    /// An `Error` value (returned, not thrown) with `code` and `message`.
    Error {
        /// The `code` property.
        code: &'static str,
        /// The message.
        message: Cow<'a, str>,
    },
}

impl<'a> JsOut<'a> {
    fn text(s: &'a str) -> Self {
        JsOut::Text(Cow::Borrowed(s))
    }

    fn names(names: &'static [&'static str]) -> JsOut<'static> {
        JsOut::Array(names.iter().map(|n| JsOut::text(n)).collect())
    }
}

impl<'a> From<FlatValue<'a>> for JsOut<'a> {
    fn from(value: FlatValue<'a>) -> Self {
        match value {
            FlatValue::Number(n) => JsOut::Number(n),
            FlatValue::Text(t) => JsOut::Text(t),
            FlatValue::Token(t) => JsOut::Token(t),
            FlatValue::Null => JsOut::Null,
        }
    }
}

// ---- arguments: times, ids, tokens, names -------------------------------------------------

/// The largest integer a `number` holds exactly.
pub const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// Milliseconds (finite, ≥ 0, possibly fractional) to whole nanoseconds:
/// `round(ms × 1e6)`, saturating at `u64::MAX`.
pub fn ms_to_ns(ms: f64, name: &str) -> Result<u64> {
    if !ms.is_finite() || ms < 0.0 {
        return Err(JsError::config(format!(
            "{name} must be a finite number of milliseconds ≥ 0, got {}",
            number(ms)
        )));
    }
    // `as` saturates: values past u64::MAX become u64::MAX.
    Ok((ms * 1e6).round() as u64)
}

/// A `nowMs` argument as the core's instant.
pub fn instant(now_ms: f64) -> Result<Instant> {
    ms_to_ns(now_ms, "nowMs").map(Instant::from_nanos)
}

/// A lock or request id: an integer in 0 ..= 2^53 − 1.
pub fn id(value: f64, name: &str) -> Result<u64> {
    if value.is_finite() && value >= 0.0 && value.fract() == 0.0 && value <= MAX_SAFE_INTEGER {
        Ok(value as u64)
    } else {
        Err(JsError::config(format!(
            "{name} must be an integer id ≥ 0, got {}",
            number(value)
        )))
    }
}

/// A bigint argument that is not in 0 ..= 2^64 − 1.
pub fn bigint_out_of_range(name: &str) -> JsError {
    JsError::config(format!("{name} must be a bigint in 0n ..= 2n ** 64n - 1n"))
}

/// An owner id: 32 hex digits (the form `Machine.owner` returns).
pub fn owner_id(hex: &str) -> Result<OwnerId> {
    OwnerId::from_hex(hex).ok_or_else(|| {
        let shown: String = hex.chars().take(40).collect();
        JsError::config(format!(
            "ownerId must be 32 hex digits (lease.ownerId), got {shown:?}"
        ))
    })
}

/// `'a', 'b' or 'c'`, for "must be one of" messages.
fn quoted(names: &[&str], last: &str) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
    match quoted.split_last() {
        Some((end, [])) => end.clone(),
        Some((end, rest)) => format!("{} {last} {end}", rest.join(", ")),
        None => String::new(),
    }
}

/// A Redis script by its name (`RedisScript::NAMES`).
pub fn script(name: &str) -> Result<RedisScript> {
    name.parse().map_err(|_| {
        JsError::config(format!(
            "script must be one of {}, got {name:?}",
            RedisScript::NAMES
                .iter()
                .map(|n| format!("'{n}'"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}

/// A SQL parameter style by its name (`ParamStyle::NAMES`).
pub fn param_style(name: &str) -> Result<ParamStyle> {
    name.parse().map_err(|_| {
        JsError::config(format!(
            "style must be {}, got {name:?}",
            quoted(ParamStyle::NAMES, "or")
        ))
    })
}

// ---- lock options and backend specs: the core's serde types ------------------------------

/// A primitive value of an options object, as the addon read it (`null` and `undefined`
/// are left out: absent options take the core's defaults).
#[derive(Clone, Debug, PartialEq)]
pub enum Primitive {
    /// A number.
    Number(f64),
    /// A string.
    Text(String),
    /// A boolean.
    Bool(bool),
}

/// A value of another type in an options object (`bigint`, object, function, …): `type`
/// is what the value is.
pub fn not_a_primitive(key: &str, what: &str) -> JsError {
    JsError {
        option: Some(key.to_owned()),
        ..JsError::config(format!(
            "{key} must be a number, a string or a boolean, got {what}"
        ))
    }
}

/// A decoding error: serde's message, and the option it is about once known.
#[derive(Debug)]
struct DecodeError {
    message: String,
    field: Option<String>,
    unknown: bool,
    /// The message continues the option's name ("purpose must be …").
    predicate: bool,
}

impl DecodeError {
    /// The error, about option `given` unless it names one already.
    #[inline(never)]
    fn about(mut self, given: &str) -> Self {
        self.field.get_or_insert_with(|| given.to_owned());
        self
    }

    /// A name that is none of `expected`, said with the core's names.
    fn not_one_of(got: &str, expected: &[&str]) -> Self {
        DecodeError {
            message: format!("must be {}, got {got}", quoted(expected, "or")),
            field: None,
            unknown: false,
            predicate: true,
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DecodeError {}

impl de::Error for DecodeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DecodeError {
            message: msg.to_string(),
            field: None,
            unknown: false,
            predicate: false,
        }
    }

    fn invalid_type(unexpected: de::Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        Self::custom(format_args!(
            "invalid type: {}, expected {expected}",
            Unexpected(unexpected)
        ))
    }

    fn invalid_value(unexpected: de::Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        Self::custom(format_args!(
            "invalid value: {}, expected {expected}",
            Unexpected(unexpected)
        ))
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        DecodeError::not_one_of(&format!("{variant:?}"), expected)
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        DecodeError {
            message: format!(
                "unknown field `{field}`, expected one of {}",
                expected.join(", ")
            ),
            field: Some(field.to_owned()),
            unknown: true,
            predicate: false,
        }
    }
}

/// serde's `Unexpected` in serde's words, numbers as [`number`] shows them: serde's own
/// `Display` would bring `core::fmt`'s float formatting into the WebAssembly module.
struct Unexpected<'a>(de::Unexpected<'a>);

impl fmt::Display for Unexpected<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use de::Unexpected as U;
        match self.0 {
            U::Bool(b) => write!(f, "boolean `{b}`"),
            U::Unsigned(n) => write!(f, "integer `{n}`"),
            U::Signed(n) => write!(f, "integer `{n}`"),
            U::Float(n) => write!(f, "floating point `{}`", number(n)),
            U::Char(c) => write!(f, "character `{c}`"),
            U::Str(s) => write!(f, "string \"{s}\""),
            U::Bytes(_) => f.write_str("byte array"),
            U::Unit => f.write_str("unit value"),
            U::Option => f.write_str("Option value"),
            U::NewtypeStruct => f.write_str("newtype struct"),
            U::Seq => f.write_str("sequence"),
            U::Map => f.write_str("map"),
            U::Enum => f.write_str("enum"),
            U::UnitVariant => f.write_str("unit variant"),
            U::NewtypeVariant => f.write_str("newtype variant"),
            U::TupleVariant => f.write_str("tuple variant"),
            U::StructVariant => f.write_str("struct variant"),
            U::Other(other) => f.write_str(other),
        }
    }
}

/// One option value in the core's shape (durations as nanoseconds), deserialized by the
/// core's types; errors name the option as it was given.
struct OptionValue<'k> {
    given: &'k str,
    value: CoreValue,
}

enum CoreValue {
    Number(f64),
    Nanos(u64),
    Text(String),
    Bool(bool),
}

impl<'de, 'k> IntoDeserializer<'de, DecodeError> for OptionValue<'k> {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

impl OptionValue<'_> {
    /// A value of another type than `expected` asked for: serde's "invalid type" error.
    /// Not generic: every visitor shares it.
    #[inline(never)]
    fn wrong_type(&self, expected: &dyn de::Expected) -> DecodeError {
        let unexpected = match &self.value {
            CoreValue::Number(n) => de::Unexpected::Float(*n),
            CoreValue::Nanos(n) => de::Unexpected::Unsigned(*n),
            CoreValue::Text(s) => de::Unexpected::Str(s),
            CoreValue::Bool(b) => de::Unexpected::Bool(*b),
        };
        <DecodeError as de::Error>::invalid_type(unexpected, expected).about(self.given)
    }
}

// Each `deserialize_*` the core's field types call hands its visitor only the one value
// type that visitor takes (a duration's `u64`, a `bool`, …), and every other value to the
// shared `wrong_type`: serde's errors, without a copy of each `visit_*` fallback per
// field type in the module.
impl<'de, 'k> de::Deserializer<'de> for OptionValue<'k> {
    type Error = DecodeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        let given = self.given;
        match self.value {
            CoreValue::Number(n) => visitor.visit_f64(n),
            CoreValue::Nanos(n) => visitor.visit_u64(n),
            CoreValue::Text(s) => visitor.visit_string(s),
            CoreValue::Bool(b) => visitor.visit_bool(b),
        }
        .map_err(|e: DecodeError| e.about(given))
    }

    /// A duration in nanoseconds, or a token (`tokenFloor`) as its decimal string.
    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        let n = match &self.value {
            CoreValue::Nanos(n) => Some(*n),
            CoreValue::Text(s) => s.parse().ok(),
            _ => None,
        };
        match n {
            Some(n) => visitor
                .visit_u64(n)
                .map_err(|e: DecodeError| e.about(self.given)),
            None => Err(self.wrong_type(&visitor)),
        }
    }

    /// A count (`retryCount`): a JavaScript number that is a whole u32.
    fn deserialize_u32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        match self.value {
            CoreValue::Number(n)
                if n.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&n) =>
            {
                visitor
                    .visit_u64(n as u64)
                    .map_err(|e: DecodeError| e.about(self.given))
            }
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        let n = match self.value {
            CoreValue::Number(n) => n,
            // what serde's f64 visitor makes of an integer
            CoreValue::Nanos(n) => n as f64,
            _ => return Err(self.wrong_type(&visitor)),
        };
        visitor
            .visit_f64(n)
            .map_err(|e: DecodeError| e.about(self.given))
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        match self.value {
            CoreValue::Bool(b) => visitor
                .visit_bool(b)
                .map_err(|e: DecodeError| e.about(self.given)),
            _ => Err(self.wrong_type(&visitor)),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        match self.value {
            CoreValue::Text(s) => visitor
                .visit_string(s)
                .map_err(|e: DecodeError| e.about(self.given)),
            _ => Err(self.wrong_type(&visitor)),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.deserialize_string(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        visitor.visit_some(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        let given = self.given;
        match self.value {
            CoreValue::Text(s) => visitor.visit_enum(s.into_deserializer()),
            CoreValue::Number(n) => Err(DecodeError::not_one_of(&number(n), variants)),
            CoreValue::Nanos(n) => Err(DecodeError::not_one_of(&format!("{n}"), variants)),
            CoreValue::Bool(b) => Err(DecodeError::not_one_of(&format!("{b}"), variants)),
        }
        .map_err(|e: DecodeError| e.about(given))
    }

    serde::forward_to_deserialize_any! {
        i8 i16 i32 i64 i128 u8 u16 u128 f32 char
        bytes byte_buf unit unit_struct newtype_struct seq tuple
        tuple_struct map struct identifier ignored_any
    }
}

/// `fooBar` → `foo_bar`.
fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Decodes `fields` (JavaScript spelling) into the core's serde type `T`: `fooBarMs`
/// (milliseconds) is the core's `foo_bar` (nanoseconds), any other `fooBar` is `foo_bar`.
#[inline(never)]
fn decode<T: for<'de> Deserialize<'de>>(fields: Vec<(String, Primitive)>) -> Result<T> {
    // Only the serde call is generic: the module is built for size, and this runs once per
    // type (lock options and two backends' settings).
    let core = core_fields(&fields)?;
    T::deserialize(MapDeserializer::new(core.into_iter())).map_err(|e| decode_error(&fields, e))
}

/// `fields` in the core's spelling, durations in nanoseconds.
#[inline(never)]
fn core_fields(fields: &[(String, Primitive)]) -> Result<Vec<(String, OptionValue<'_>)>> {
    let mut core = Vec::with_capacity(fields.len());
    for (given, value) in fields {
        let (name, value) = match (given.strip_suffix("Ms"), value) {
            (Some(stem), Primitive::Number(ms)) => {
                let nanos = ms_to_ns(*ms, given).map_err(|e| JsError {
                    option: Some(given.clone()),
                    ..e
                })?;
                if nanos == u64::MAX {
                    // Saturated: the core's range errors would quote u64::MAX ns, not the value given.
                    return Err(JsError {
                        option: Some(given.clone()),
                        ..JsError::config(format!(
                            "{given} is too long: durations must be below 2^64 ns (about 584 years), got {} ms",
                            number(*ms)
                        ))
                    });
                }
                (snake_case(stem), CoreValue::Nanos(nanos))
            }
            (Some(_), other) => {
                let what = match other {
                    Primitive::Text(_) => "a string",
                    _ => "a boolean",
                };
                return Err(JsError {
                    option: Some(given.clone()),
                    ..JsError::config(format!(
                        "{given} must be a finite number of milliseconds ≥ 0, got {what}"
                    ))
                });
            }
            (_, Primitive::Number(n)) => (snake_case(given), CoreValue::Number(*n)),
            (_, Primitive::Text(s)) => (snake_case(given), CoreValue::Text(s.clone())),
            (_, Primitive::Bool(b)) => (snake_case(given), CoreValue::Bool(*b)),
        };
        core.push((name, OptionValue { given, value }));
    }
    Ok(core)
}

/// A serde error as the addon's error, naming the option as it was given.
#[inline(never)]
fn decode_error(fields: &[(String, Primitive)], e: DecodeError) -> JsError {
    let given_name = |core_name: &str| {
        fields
            .iter()
            .map(|(g, _)| g.as_str())
            .find(|g| {
                let stem = g.strip_suffix("Ms").unwrap_or(g);
                snake_case(stem) == core_name || snake_case(g) == core_name
            })
            .unwrap_or(core_name)
            .to_owned()
    };
    let option = e.field.as_deref().map(given_name);
    let message = match (&option, e.unknown, e.predicate) {
        (Some(option), true, _) => format!("unknown option {option:?}"),
        (Some(option), false, true) => format!("{option} {}", e.message),
        (Some(option), false, false) => format!("{option}: {}", e.message),
        (None, _, _) => e.message,
    };
    JsError {
        option,
        ..JsError::config(message)
    }
}

/// Lock options in the JavaScript spelling (`ttlMs`, `purpose`, `acceptFailoverRisk`,
/// `acquireTimeoutMs`, `retryBaseMs`, `retryMaxMs`, `renewEveryMs`, `autoRenew`,
/// `driftFactor`, `clockMarginMs`, `tokenFloor` as a decimal string) as the core's
/// [`LockOptions`]; absent ones take the
/// core's defaults (`acquireTimeoutMs`: wait forever, `renewEveryMs`: ttl / 3). Only
/// types are checked here: every range is the core's ([`Backend::check_acquire`]).
pub fn lock_options(fields: Vec<(String, Primitive)>) -> Result<LockOptions> {
    decode(fields)
}

/// The backends the JavaScript bindings carry (their adapters speak Redis, etcd, and
/// Redis on each of a Redlock's masters).
fn carried() -> [Backend; 3] {
    [
        Backend::Redis(RedisSettings::default()),
        Backend::Etcd(EtcdSettings::default()),
        Backend::Redlock(RedlockSettings::default()),
    ]
}

/// The backend a machine speaks, as the core's [`Backend`]: `kind` `"redis"` (default),
/// `"etcd"` or `"redlock"`, `keyPrefix` (default the backend's), `fair` (Redis only; etcd
/// locks are always FIFO, so `fair: true` on etcd is refused, and on a Redlock too),
/// `masters` (Redlock only, and required there: one name per master, `host:port/db`,
/// in the order request parts name them; counted and compared by
/// [`RedlockSettings::check`] when a lock is checked or acquired), and `settings`: a
/// Redis or etcd machine's other fields by their JavaScript names (Redis `cluster`: the
/// client is a Redis Cluster client; etcd `sharedLease`: one lease per TTL for the
/// machine's locks; unknown names are a `ConfigError`), none for a Redlock's.
pub fn backend(
    kind: Option<&str>,
    key_prefix: Option<String>,
    fair: Option<bool>,
    masters: Option<Vec<String>>,
    settings: Vec<(String, Primitive)>,
) -> Result<Backend> {
    let kinds = carried();
    let kind = kind.unwrap_or(Backend::default().name());
    if !kinds.iter().any(|b| b.name() == kind) {
        let names: Vec<&str> = kinds.iter().map(Backend::name).collect();
        if kind == "zookeeper" {
            // ZooKeeper speaks its own binary protocol over TCP: `fetch` cannot carry it.
            // The Node addon builds zookeeper machines itself (feature `zookeeper`).
            return Err(JsError::config(format!(
                "kind \"zookeeper\" is not available in the WebAssembly package (workers have \
                 no sockets to reach ZooKeeper): use the Node package, fencepost; kind must \
                 be {}",
                quoted(&names, "or")
            )));
        }
        return Err(JsError::config(format!(
            "kind must be {}, got {kind:?}",
            quoted(&names, "or")
        )));
    }
    let fifo = || {
        JsError::config(format!(
            "fair applies to Redis machines only: {kind} locks are always granted in FIFO order"
        ))
    };
    if let (Some((name, _)), "redlock") = (settings.first(), kind) {
        return Err(JsError {
            option: Some(name.clone()),
            ..JsError::config(format!(
                "{name} applies to single-server Redis and etcd machines only, not to kind {kind:?}"
            ))
        });
    }
    if kind == "redlock" {
        // Built by hand rather than by serde: a list is no primitive field, and one more
        // decoder costs the WASM module more than these lines.
        if fair == Some(true) {
            return Err(JsError {
                option: Some("fair".to_owned()),
                ..JsError::config(
                    "fair applies to single-server Redis machines only: a Redlock's \
                     contenders poll (no server queue spans its masters)",
                )
            });
        }
        let defaults = RedlockSettings::default();
        return Ok(Backend::Redlock(RedlockSettings {
            key_prefix: key_prefix.unwrap_or(defaults.key_prefix),
            masters: masters.unwrap_or_default(),
        }));
    }
    if masters.is_some() {
        return Err(JsError {
            option: Some("masters".to_owned()),
            ..JsError::config(format!(
                "masters applies to Redlock machines only, not to kind {kind:?}"
            ))
        });
    }
    let mut fields = settings;
    if let Some(prefix) = key_prefix {
        fields.push(("keyPrefix".to_owned(), Primitive::Text(prefix)));
    }
    // `fair: false` is every backend's default: only `true` is a setting.
    if fair == Some(true) {
        fields.push(("fair".to_owned(), Primitive::Bool(true)));
    }
    // The variant's settings by their own serde type (the `kind` tag is read above):
    // decoding the tagged enum itself buffers every value, which costs the WASM module
    // more code than the rest of this file.
    let settings = match kinds.into_iter().find(|b| b.name() == kind) {
        Some(Backend::Etcd(_)) => decode(fields).map(Backend::Etcd),
        _ => decode(fields).map(Backend::Redis),
    };
    settings.map_err(|e| match e.option.as_deref() {
        Some("fair") => fifo(),
        _ => e,
    })
}

// ---- the machine ----------------------------------------------------------------------------

/// The core's machine with the addons' argument conventions; each addon wraps one.
pub struct JsMachine {
    inner: Machine,
}

impl JsMachine {
    /// A machine for `backend`; `seed` makes owner ids and jitter deterministic (tests
    /// only). Without it the machine seeds itself from the host's secure randomness;
    /// `entropy_hint` is added to the `ERR_BACKEND` message when there is none.
    pub fn new(backend: Backend, seed: Option<u64>, entropy_hint: &str) -> Result<Self> {
        let inner = match seed {
            Some(seed) => Machine::with_seed(backend, seed),
            None => {
                Machine::new(backend).map_err(|e| JsError::backend(format!("{e}{entropy_hint}")))?
            }
        };
        Ok(JsMachine { inner })
    }

    /// Whether replies are text: etcd gateway JSON, a ZooKeeper adapter's JSON document,
    /// a Kubernetes response body (else Redis client values or SQL rows).
    pub fn reads_text(&self) -> bool {
        match self.inner.backend() {
            Backend::Etcd(_) => true,
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(_) => true,
            #[cfg(feature = "kubernetes")]
            Backend::Kubernetes(_) => true,
            _ => false,
        }
    }

    /// A text reply (see [`JsMachine::reads_text`]) as this machine's [`Reply`].
    pub fn text_reply(&self, text: String) -> Reply {
        match self.inner.backend() {
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(_) => Reply::ZooKeeper(text),
            #[cfg(feature = "kubernetes")]
            Backend::Kubernetes(_) => Reply::Kubernetes(text),
            _ => Reply::Etcd(text),
        }
    }

    /// Whether replies are SQL rows or error replies (a PostgreSQL machine).
    #[cfg(feature = "postgres")]
    pub fn reads_sql(&self) -> bool {
        matches!(self.inner.backend(), Backend::Postgres(_))
    }

    /// Checks a lock name and options exactly as `acquire` would.
    pub fn check(&self, name: &str, options: &LockOptions) -> Result<()> {
        Ok(self.inner.backend().check_acquire(name, options)?)
    }

    /// Starts acquiring `name`; the new lock id.
    pub fn acquire(&mut self, now_ms: f64, name: &str, options: LockOptions) -> Result<f64> {
        let lock = self.inner.acquire(instant(now_ms)?, name, options)?;
        Ok(lock.0 as f64)
    }

    /// [`Self::acquire`], then [`Self::poll_json`], for the drivers' one call across the
    /// addon boundary: the poll's JSON text with the new lock id in front, `[lock,
    /// nextTimeoutMs | null, observationsPending, ...records]`.
    pub fn acquire_poll_json(
        &mut self,
        now_ms: f64,
        name: &str,
        options: LockOptions,
    ) -> Result<String> {
        let lock = self.acquire(now_ms, name, options)?;
        Ok(self.poll_json_after(Some(lock)))
    }

    /// Releases `lock`, or cancels its acquisition.
    pub fn release(&mut self, now_ms: f64, lock: f64) -> Result<()> {
        let input = Input::Release {
            now: instant(now_ms)?,
            lock: LockId(id(lock, "lock")?),
        };
        self.feed(input)
    }

    /// Renews `lock` now if it is held (a manual extend).
    pub fn extend(&mut self, now_ms: f64, lock: f64) -> Result<()> {
        let input = Input::Extend {
            now: instant(now_ms)?,
            lock: LockId(id(lock, "lock")?),
        };
        self.feed(input)
    }

    /// The server's reply to `request`.
    pub fn reply(&mut self, now_ms: f64, request: f64, reply: Reply) -> Result<()> {
        let input = Input::Reply {
            now: instant(now_ms)?,
            request: RequestId(id(request, "request")?),
            reply,
        };
        self.feed(input)
    }

    /// `request` failed in transport.
    pub fn transport_error(&mut self, now_ms: f64, request: f64, message: String) -> Result<()> {
        let input = Input::TransportError {
            now: instant(now_ms)?,
            request: RequestId(id(request, "request")?),
            message,
        };
        self.feed(input)
    }

    /// Time passed.
    pub fn timeout(&mut self, now_ms: f64) -> Result<()> {
        let input = Input::Timeout {
            now: instant(now_ms)?,
        };
        self.feed(input)
    }

    fn feed(&mut self, input: Input) -> Result<()> {
        Ok(self.inner.handle_input(input)?)
    }

    /// Drains every pending output into `push`, record after record in the layout of
    /// [`fencepost_core::js_outputs`]; returns the next timeout (monotonic ms), or `None`
    /// when no timer is set: the host writes it into the first slot.
    pub fn poll<E>(
        &mut self,
        push: &mut impl FnMut(FlatValue<'_>) -> core::result::Result<(), E>,
    ) -> core::result::Result<Option<f64>, E> {
        loop {
            match self.inner.poll_output() {
                Output::Timeout(at) => return Ok(Some(ns_to_ms(at.as_nanos()))),
                Output::Idle => return Ok(None),
                output => {
                    let owner = match output {
                        Output::Event {
                            lock,
                            event: fencepost_core::Event::Acquired { .. },
                        } => self.inner.owner(lock),
                        _ => None,
                    };
                    js_outputs::encode_output(&output, owner, push)?
                }
            }
        }
    }

    /// Drains every pending output as the text of one JSON array in the layout of
    /// [`fencepost_core::js_outputs`] with a second host slot, `[nextTimeoutMs | null,
    /// observationsPending, ...records]`, tokens as decimal strings
    /// ([`js_outputs::push_json`]): the count tells the host whether to drain
    /// observations, without a call to ask.
    pub fn poll_json(&mut self) -> String {
        self.poll_json_after(None)
    }

    /// [`Self::poll_json`], with `head` (a lock id) as the array's first slot when given.
    fn poll_json_after(&mut self, head: Option<f64>) -> String {
        let mut records = String::new();
        let next = self.poll(&mut |value| {
            js_outputs::push_json(&mut records, &value);
            Ok::<(), core::convert::Infallible>(())
        });
        let mut out = String::with_capacity(records.len() + 24);
        out.push('[');
        if let Some(lock) = head {
            out.push_str(&number(lock));
            out.push(',');
        }
        match next {
            Ok(Some(ms)) if ms.is_finite() => out.push_str(&number(ms)),
            _ => out.push_str("null"),
        }
        out.push(',');
        out.push_str(&self.inner.observations_pending().to_string());
        out.push_str(&records);
        out.push(']');
        out
    }

    /// Starts observing with `options`, `[events, warnings, lateRenewalFraction,
    /// heldLongTtls, hotLockAttempts, hotLockWaiters, unreachableEveryMs]` (booleans as
    /// 0 or 1), or stops with `None`. Counts must be integers in 0 ..= 2^32 − 1; the
    /// ranges are the core's ([`ObserveOptions::validate`]).
    pub fn observe(&mut self, options: Option<&[f64]>) -> Result<()> {
        let Some(o) = options else {
            return Ok(self.inner.observe(None)?);
        };
        let [events, warnings, fraction, held_long, attempts, waiters, every] = o else {
            return Err(JsError::config(
                "observe options must be 7 numbers (a JavaScript half and an addon of different versions?)",
            ));
        };
        let count = |n: f64, option: &str| {
            if n.fract() == 0.0 && (0.0..=u32::MAX as f64).contains(&n) {
                Ok(n as u32)
            } else {
                Err(JsError {
                    option: Some(option.to_owned()),
                    ..JsError::config(format!(
                        "{option} must be an integer in 0 ..= 2^32 − 1, got {}",
                        number(n)
                    ))
                })
            }
        };
        let every = ms_to_ns(*every, "unreachableEveryMs").map_err(|e| JsError {
            option: Some("unreachableEveryMs".to_owned()),
            ..e
        })?;
        let options = ObserveOptions {
            events: *events != 0.0,
            warnings: *warnings != 0.0,
            late_renewal_fraction: *fraction,
            held_long_ttls: count(*held_long, "heldLongTtls")?,
            hot_lock_attempts: count(*attempts, "hotLockAttempts")?,
            hot_lock_waiters: count(*waiters, "hotLockWaiters")?,
            unreachable_every: core::time::Duration::from_nanos(every),
        };
        Ok(self.inner.observe(Some(options))?)
    }

    /// Drains the observations into `push`, each as `lockId, name, event, level,
    /// message, fieldCount`, then `fieldCount` pairs of a name in the JavaScript
    /// spelling (`validityLeftMs`, `heldForMs`, `foundHeld`) and its value (durations
    /// in ms, counts numbers, tokens bigints, the rest strings).
    pub fn poll_observations<E>(
        &mut self,
        push: &mut impl FnMut(FlatValue<'_>) -> core::result::Result<(), E>,
    ) -> core::result::Result<(), E> {
        while let Some(o) = self.inner.poll_observation() {
            let fields = o.observation.fields();
            push(FlatValue::Number(o.lock.0 as f64))?;
            push(FlatValue::Text(Cow::Borrowed(&o.name)))?;
            push(FlatValue::Text(Cow::Borrowed(o.observation.name())))?;
            push(FlatValue::Text(Cow::Borrowed(o.observation.level())))?;
            push(FlatValue::Text(Cow::Owned(o.observation.message(&o.name))))?;
            push(FlatValue::Number(fields.len() as f64))?;
            for (name, value) in fields {
                let duration = matches!(value, Field::Duration(_));
                push(FlatValue::Text(Cow::Owned(js_name(name, duration))))?;
                push(match value {
                    Field::Duration(d) => FlatValue::Number(d.as_nanos() as f64 / 1e6),
                    Field::Count(n) => FlatValue::Number(n as f64),
                    Field::Token(t) => FlatValue::Token(t.get()),
                    Field::Text(s) => FlatValue::Text(Cow::Borrowed(s)),
                })?;
            }
        }
        Ok(())
    }

    /// The owner id of `lock` (32 lowercase hex digits), `None` once forgotten.
    pub fn owner(&self, lock: f64) -> Result<Option<String>> {
        let lock = LockId(id(lock, "lock")?);
        Ok(self.inner.owner(lock).map(|o| o.to_string()))
    }

    /// The validity deadline of `lock` (monotonic ms) while it is held.
    pub fn valid_until_ms(&self, lock: f64) -> Result<Option<f64>> {
        let lock = LockId(id(lock, "lock")?);
        Ok(self
            .inner
            .valid_until(lock)
            .map(|at| ns_to_ms(at.as_nanos())))
    }

    /// How many locks the machine tracks.
    pub fn lock_count(&self) -> u32 {
        u32::try_from(self.inner.lock_count()).unwrap_or(u32::MAX)
    }

    /// How many requests await a reply or transport error.
    pub fn requests_in_flight(&self) -> u32 {
        u32::try_from(self.inner.requests_in_flight()).unwrap_or(u32::MAX)
    }

    /// How many observations wait for `poll_observations`.
    pub fn observations_pending(&self) -> u32 {
        u32::try_from(self.inner.observations_pending()).unwrap_or(u32::MAX)
    }
}

/// `checkAcquire`: a lock name and options checked as a machine of this backend would
/// check them, without one (no entropy needed: Workers lack it outside handlers).
pub fn check_acquire(backend: &Backend, name: &str, options: &LockOptions) -> Result<()> {
    Ok(backend.check_acquire(name, options)?)
}

// ---- Redis replies ---------------------------------------------------------------------------

/// Deepest nesting of reply arrays accepted; deeper input becomes an error value.
pub const MAX_REPLY_DEPTH: usize = 32;

/// A reply value the adapter returned that fencepost cannot read.
pub fn unsupported(what: &str) -> RedisValue {
    RedisValue::Error(format!(
        "fencepost: unsupported reply value from the adapter: {what}"
    ))
}

/// Reading a reply value threw (a getter or proxy trap): the reply's fault.
pub fn unreadable(reason: &str) -> RedisValue {
    let reason = if reason.is_empty() {
        "reading it threw"
    } else {
        reason
    };
    RedisValue::Error(format!("fencepost: unreadable reply value: {reason}"))
}

/// A reply nested deeper than [`MAX_REPLY_DEPTH`].
pub fn too_deep() -> RedisValue {
    RedisValue::Error(format!(
        "fencepost: reply nested deeper than {MAX_REPLY_DEPTH} arrays"
    ))
}

/// A `number` reply: an integer in −2^63 ..< 2^63 (±2^63 are exact doubles).
pub fn redis_number(n: f64) -> RedisValue {
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    if n.fract() == 0.0 && (-TWO_POW_63..TWO_POW_63).contains(&n) {
        RedisValue::Int(n as i64)
    } else {
        unsupported(&format!("the number {} (not a 64-bit integer)", number(n)))
    }
}

/// A `bigint` reply, `None` when outside the 64-bit range.
pub fn redis_bigint(n: Option<i64>) -> RedisValue {
    n.map_or_else(
        || unsupported("a bigint outside the 64-bit range"),
        RedisValue::Int,
    )
}

/// An `Error` reply with this message.
pub fn redis_error(message: String) -> RedisValue {
    RedisValue::Error(if message.is_empty() {
        "ERR error reply without a message".to_owned()
    } else {
        message
    })
}

/// A plain object reply: `{ status: string }` or `{ error: string }`; `text` is the one
/// property's value when it is a string.
pub fn redis_object(keys: &[String], text: impl FnOnce(&str) -> Option<String>) -> RedisValue {
    match keys {
        [key] if key == "status" || key == "error" => match text(key) {
            Some(text) if key == "status" => RedisValue::Status(text),
            Some(text) => RedisValue::Error(text),
            None => unsupported(&format!("{{ {key}: <not a string> }}")),
        },
        _ => unsupported(&format!("an object with keys {keys:?}")),
    }
}

/// An etcd reply that is not text: what it was, as the text the core reads as a protocol
/// error.
pub fn not_etcd_text(what: &str) -> String {
    format!("<not an etcd JSON reply: {what}>")
}

/// A `RedisValue` as a Redis client returns it: `null`, a `number` (a `bigint` past 2^53),
/// a `string`, an array, or an `Error` (`code` `"ERR_REDIS_REPLY"`) for an error reply.
pub fn redis_value(value: &RedisValue) -> JsOut<'_> {
    match value {
        RedisValue::Nil => JsOut::Null,
        RedisValue::Int(n) if (n.unsigned_abs() as f64) <= MAX_SAFE_INTEGER => {
            JsOut::Number(*n as f64)
        }
        RedisValue::Int(n) => JsOut::Int(*n),
        RedisValue::Data(s) | RedisValue::Status(s) => JsOut::text(s),
        RedisValue::Array(items) => JsOut::Array(items.iter().map(redis_value).collect()),
        RedisValue::Error(message) => JsOut::Error {
            code: "ERR_REDIS_REPLY",
            message: Cow::Borrowed(message),
        },
    }
}

// ---- requests and fence outcomes as objects ---------------------------------------------------

/// A script call `{ script, sha1, keys, args }`.
pub fn script_call(cmd: &RedisCommand) -> JsOut<'_> {
    JsOut::Object(vec![
        ("script", JsOut::text(cmd.script.as_str())),
        ("sha1", JsOut::text(cmd.script.sha1())),
        ("keys", JsOut::Strings(&cmd.keys)),
        ("args", JsOut::Strings(&cmd.args)),
    ])
}

/// An etcd gateway call `{ backend: "etcd", call, path, body }`, with `timeoutMs` for a
/// watch.
fn etcd_call(body: RequestBody) -> JsOut<'static> {
    let RequestBody::Etcd(req) = &body else {
        return JsOut::Null;
    };
    let mut o = vec![
        ("backend", JsOut::text(body.kind())),
        ("call", JsOut::text(req.call_name())),
        (
            "path",
            JsOut::Text(Cow::Owned(req.gateway_path().to_owned())),
        ),
        ("body", JsOut::Text(Cow::Owned(req.gateway_body()))),
    ];
    if let Some(ms) = req.watch_timeout_ms() {
        // whole milliseconds; exact as a number below 2^53 (a TTL is at most 2^31 ms)
        o.push(("timeoutMs", JsOut::Number(ms as f64)));
    }
    JsOut::Object(o)
}

/// A stale write `{ resource, token, highest, reason, message }` (`reason`
/// `"superseded"` or `"duplicate_grant"`).
pub fn stale(stale: &StaleToken) -> JsOut<'static> {
    let reason = match stale.reason {
        StaleReason::Superseded => "superseded",
        StaleReason::DuplicateGrant => "duplicate_grant",
    };
    JsOut::Object(vec![
        ("resource", JsOut::Text(Cow::Owned(stale.resource.clone()))),
        ("token", JsOut::Token(stale.token.get())),
        ("highest", JsOut::Token(stale.highest.get())),
        ("reason", JsOut::Text(Cow::Borrowed(reason))),
        ("message", JsOut::Text(Cow::Owned(stale.to_string()))),
    ])
}

/// `Fence.check`: `null` when accepted, the [`stale`] object when refused; with `owner`
/// (32 hex digits) the owner-bound rule, without it the token-only rule.
pub fn fence_check(
    fence: &mut fence::Fence,
    resource: &str,
    token: u64,
    owner: Option<&str>,
) -> Result<JsOut<'static>> {
    let checked = match owner.map(owner_id).transpose()? {
        Some(o) => fence.check_owned(resource, FencingToken(token), o),
        None => fence.check(resource, FencingToken(token)),
    };
    Ok(checked.err().map_or(JsOut::Null, |e| stale(&e)))
}

fn refused(stale_token: &StaleToken) -> JsOut<'static> {
    JsOut::Object(vec![
        ("ok", JsOut::Bool(false)),
        ("stale", stale(stale_token)),
    ])
}

fn protocol(message: String) -> JsOut<'static> {
    JsOut::Object(vec![
        ("ok", JsOut::Bool(false)),
        ("protocol", JsOut::Text(Cow::Owned(message))),
    ])
}

/// `sqlFencedUpdate`.
pub fn sql_fenced_update(
    table: &str,
    id_column: &str,
    token_column: &str,
    columns: &[String],
    style: &str,
    owner_column: Option<&str>,
) -> Result<String> {
    let style = param_style(style)?;
    let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
    match owner_column {
        Some(o) => {
            fence::sql_fenced_update_owned(table, id_column, token_column, o, &columns, style)
        }
        None => fence::sql_fenced_update(table, id_column, token_column, &columns, style),
    }
    .map_err(|e| JsError::config(e.to_string()))
}

/// `redisFencedSet`: the command, for [`script_call`]; with `owner` (32 hex digits) the
/// owner-bound rule.
pub fn redis_fenced_set(
    data_key: &str,
    fence_key: &str,
    token: u64,
    value: &str,
    owner: Option<&str>,
) -> Result<RedisCommand> {
    fence::check_redis_fenced_set_keys(data_key, fence_key)
        .map_err(|e| JsError::config(e.render(Host::Js)))?;
    let token = FencingToken(token);
    Ok(match owner.map(owner_id).transpose()? {
        Some(o) => fence::redis_fenced_set_owned(data_key, fence_key, token, o, value),
        None => fence::redis_fenced_set(data_key, fence_key, token, value),
    })
}

/// `readRedisFencedSet`: `{ ok: true }`, `{ ok: false, stale }` or `{ ok: false, protocol }`.
pub fn read_redis_fenced_set(resource: &str, token: u64, reply: &RedisValue) -> JsOut<'static> {
    match fence::read_redis_fenced_set(resource, FencingToken(token), reply) {
        Ok(Ok(())) => JsOut::Object(vec![("ok", JsOut::Bool(true))]),
        Ok(Err(stale_token)) => refused(&stale_token),
        Err(e) => protocol(e.to_string()),
    }
}

/// `redisScripts`: `{ [name]: { sha1, source } }` in `RedisScript::ALL` order.
pub fn redis_scripts() -> JsOut<'static> {
    JsOut::Object(
        RedisScript::ALL
            .iter()
            .map(|s| {
                let entry = JsOut::Object(vec![
                    ("sha1", JsOut::text(s.sha1())),
                    ("source", JsOut::text(s.source())),
                ]);
                (s.as_str(), entry)
            })
            .collect(),
    )
}

/// The etcd settings the helpers below phrase requests with: `key_prefix`, the rest
/// default (no helper's request depends on `shared_lease`).
fn etcd_settings(key_prefix: String) -> EtcdSettings {
    EtcdSettings {
        key_prefix,
        ..EtcdSettings::default()
    }
}

/// `lockKey`: the lease key of lock `name` under `key_prefix`.
pub fn lock_key(key_prefix: String, name: &str) -> String {
    RedisSettings {
        key_prefix,
        ..RedisSettings::default()
    }
    .lock_key(name)
}

/// `tokenKey`: the fencing-token counter key of lock `name` under `key_prefix`.
pub fn token_key(key_prefix: String, name: &str) -> String {
    RedisSettings {
        key_prefix,
        ..RedisSettings::default()
    }
    .token_key(name)
}

/// `etcdHolderKey`.
pub fn etcd_holder_key(key_prefix: String, name: &str, owner: &str) -> Result<String> {
    Ok(etcd_settings(key_prefix).holder_key(name, &owner_id(owner)?))
}

/// `etcdLeaseId`.
pub fn etcd_lease_id(owner: &str) -> Result<i64> {
    Ok(etcd::lease_id(&owner_id(owner)?))
}

/// `etcdFencedTxn`: `puts` are `[key, value]` pairs.
pub fn etcd_fenced_txn(
    key_prefix: String,
    name: &str,
    owner: &str,
    token: u64,
    puts: Vec<Vec<String>>,
    deletes: Vec<String>,
) -> Result<JsOut<'static>> {
    let owner = owner_id(owner)?;
    let mut ops = Vec::with_capacity(puts.len() + deletes.len());
    for (i, pair) in puts.into_iter().enumerate() {
        let [key, value]: [String; 2] = pair.try_into().map_err(|pair: Vec<String>| {
            JsError::config(format!(
                "puts[{i}] must be a [key, value] pair of strings, got {} items",
                pair.len()
            ))
        })?;
        ops.push(EtcdOp::Put {
            key,
            value,
            lease: 0,
            ignore_lease: false,
        });
    }
    ops.extend(deletes.into_iter().map(|key| EtcdOp::Delete { key }));
    let settings = etcd_settings(key_prefix);
    let key = settings.holder_key(name, &owner);
    let req: EtcdRequest = settings.fenced_txn(name, &key, FencingToken(token), ops);
    Ok(etcd_call(RequestBody::Etcd(req)))
}

/// `readEtcdFencedTxn`: `{ ok: true, revision }`, `{ ok: false, stale }` or
/// `{ ok: false, protocol }`.
pub fn read_etcd_fenced_txn(name: &str, token: u64, reply: &str) -> JsOut<'static> {
    #[allow(unreachable_patterns)]
    match etcd::read_etcd_fenced_txn(reply) {
        Ok(EtcdFenced::Applied { revision }) => JsOut::Object(vec![
            ("ok", JsOut::Bool(true)),
            ("revision", JsOut::Int(revision)),
        ]),
        Ok(EtcdFenced::Refused { holder }) => refused(&StaleToken {
            resource: name.to_owned(),
            token: FencingToken(token),
            highest: holder.unwrap_or(FencingToken(0)),
            reason: Default::default(),
        }),
        Ok(_) => protocol("unknown fenced transaction outcome".to_owned()),
        Err(e) => protocol(e.to_string()),
    }
}

/// `redisOperator`: the operator query (`force` false: "is it locked?") or reset
/// (`force` true) of lock `name`, for [`script_call`].
pub fn redis_operator(key_prefix: String, name: &str, fair: bool, force: bool) -> RedisCommand {
    let settings = RedisSettings {
        key_prefix,
        fair,
        cluster: false,
    };
    if force {
        settings.force_release(name)
    } else {
        settings.is_locked(name)
    }
}

/// `redisInspect`: the operator query "who holds lock `name`?" (script `inspect`), for
/// [`script_call`].
pub fn redis_inspect(key_prefix: String, name: &str, fair: bool) -> RedisCommand {
    RedisSettings {
        key_prefix,
        fair,
        cluster: false,
    }
    .inspect(name)
}

/// `redisListStep`: one bounded step of the listing of locks whose names start with
/// `prefix`, from `cursor` (`"0"` first; script `list`), for [`script_call`].
pub fn redis_list_step(key_prefix: String, prefix: &str, cursor: &str, fair: bool) -> RedisCommand {
    RedisSettings {
        key_prefix,
        fair,
        cluster: false,
    }
    .list_step(prefix, cursor)
}

/// A holder as JavaScript reads it: `{ name, owner, token, ttlLeftMs, waiters,
/// metadata }`, `token` a bigint, `metadata` the JSON text of its object (the JS side
/// parses it), absent values `null`.
pub(crate) fn holder(h: fencepost_core::Holder) -> JsOut<'static> {
    let text = |s: String| JsOut::Text(Cow::Owned(s));
    let or_null = |v: Option<JsOut<'static>>| v.unwrap_or(JsOut::Null);
    JsOut::Object(vec![
        ("name", text(h.name)),
        ("owner", or_null(h.owner.map(text))),
        ("token", or_null(h.token.map(|t| JsOut::Token(t.0)))),
        (
            "ttlLeftMs",
            or_null(h.ttl_left.map(|d| JsOut::Number(d.as_secs_f64() * 1e3))),
        ),
        (
            "waiters",
            or_null(h.waiters.map(|n| JsOut::Number(n as f64))),
        ),
        (
            "metadata",
            or_null(
                h.metadata
                    .map(|m| text(fencepost_core::encode_metadata(&m))),
            ),
        ),
    ])
}

/// `readRedisInspect`: `{ ok: true, holder }` (`holder` null when nobody holds lock
/// `name`) or `{ ok: false, protocol }`.
pub fn read_redis_inspect(name: &str, reply: &RedisValue) -> JsOut<'static> {
    match redis::read_redis_inspect(name, reply) {
        Ok(found) => JsOut::Object(vec![
            ("ok", JsOut::Bool(true)),
            ("holder", found.map_or(JsOut::Null, holder)),
        ]),
        Err(e) => protocol(e.to_string()),
    }
}

/// `readRedisList`: `{ ok: true, cursor, holders }` (`cursor` null once the scan is
/// complete) or `{ ok: false, protocol }`.
pub fn read_redis_list(key_prefix: String, reply: &RedisValue) -> JsOut<'static> {
    let settings = RedisSettings {
        key_prefix,
        ..RedisSettings::default()
    };
    match redis::read_redis_list(&settings, reply) {
        Ok((cursor, holders)) => JsOut::Object(vec![
            ("ok", JsOut::Bool(true)),
            (
                "cursor",
                cursor.map_or(JsOut::Null, |c| JsOut::Text(Cow::Owned(c))),
            ),
            (
                "holders",
                JsOut::Array(holders.into_iter().map(holder).collect()),
            ),
        ]),
        Err(e) => protocol(e.to_string()),
    }
}

/// `readRedisFlag`: `{ ok: true, value }` or `{ ok: false, protocol }`.
pub fn read_redis_flag(reply: &RedisValue) -> JsOut<'static> {
    flag(redis::read_redis_flag(reply))
}

fn flag(read: core::result::Result<bool, fencepost_core::ProtocolError>) -> JsOut<'static> {
    match read {
        Ok(value) => JsOut::Object(vec![
            ("ok", JsOut::Bool(true)),
            ("value", JsOut::Bool(value)),
        ]),
        Err(e) => protocol(e.to_string()),
    }
}

/// `etcdHolderRange`: the range finding who holds lock `name`.
pub fn etcd_holder_range(key_prefix: String, name: &str) -> JsOut<'static> {
    etcd_call(RequestBody::Etcd(
        etcd_settings(key_prefix).holder_range(name),
    ))
}

/// `readEtcdHolder`: `{ ok: true, token, lease }` (`token` null when nobody holds the
/// lock) or `{ ok: false, protocol }`.
pub fn read_etcd_holder(reply: &str) -> JsOut<'static> {
    match etcd::read_etcd_holder(reply) {
        Ok(Some(h)) => JsOut::Object(vec![
            ("ok", JsOut::Bool(true)),
            ("token", JsOut::Token(h.token.get())),
            ("lease", JsOut::Int(h.lease)),
        ]),
        Ok(None) => JsOut::Object(vec![("ok", JsOut::Bool(true)), ("token", JsOut::Null)]),
        Err(e) => protocol(e.to_string()),
    }
}

/// `etcdLeaderRange`: the range finding who leads election `name`, with the key's value.
pub fn etcd_leader_range(key_prefix: String, name: &str) -> JsOut<'static> {
    etcd_call(RequestBody::Etcd(
        etcd_settings(key_prefix).leader_range(name),
    ))
}

/// `readEtcdLeader`: `{ ok: true, token, lease, value }` (`token` null when nobody
/// leads) or `{ ok: false, protocol }`.
pub fn read_etcd_leader(reply: &str) -> JsOut<'static> {
    match etcd::read_etcd_leader(reply) {
        Ok(Some((h, value))) => JsOut::Object(vec![
            ("ok", JsOut::Bool(true)),
            ("token", JsOut::Token(h.token.get())),
            ("lease", JsOut::Int(h.lease)),
            ("value", JsOut::Text(value.into())),
        ]),
        Ok(None) => JsOut::Object(vec![("ok", JsOut::Bool(true)), ("token", JsOut::Null)]),
        Err(e) => protocol(e.to_string()),
    }
}

/// `etcdProclaim`: a leader's fenced put of `value` into its own key, on its lease.
pub fn etcd_proclaim(
    key_prefix: String,
    name: &str,
    owner: &str,
    token: u64,
    value: &str,
) -> Result<JsOut<'static>> {
    let owner = owner_id(owner)?;
    let req = etcd_settings(key_prefix).proclaim(name, &owner, FencingToken(token), value);
    Ok(etcd_call(RequestBody::Etcd(req)))
}

/// `etcdLeaseRevoke`: the revoke of lease `id`.
pub fn etcd_lease_revoke(id: i64) -> JsOut<'static> {
    etcd_call(RequestBody::Etcd(EtcdRequest::LeaseRevoke { id }))
}

/// `readEtcdRevoke`: `{ ok: true, value }` (false: the lease was gone) or
/// `{ ok: false, protocol }`.
pub fn read_etcd_revoke(reply: &str) -> JsOut<'static> {
    flag(etcd::read_etcd_revoke(reply))
}

/// `readEtcdInspect`: `{ ok: true, holder, lease }` (`holder` null when nobody holds
/// lock `name`; its `ttlLeftMs` null until `readEtcdTimeToLive` says) or `{ ok: false,
/// protocol }`.
pub fn read_etcd_inspect(name: &str, reply: &str) -> JsOut<'static> {
    match etcd::read_etcd_inspect(name, reply) {
        Ok(Some((h, lease))) => JsOut::Object(vec![
            ("ok", JsOut::Bool(true)),
            ("holder", holder(h)),
            ("lease", JsOut::Int(lease)),
        ]),
        Ok(None) => JsOut::Object(vec![("ok", JsOut::Bool(true)), ("holder", JsOut::Null)]),
        Err(e) => protocol(e.to_string()),
    }
}

/// `etcdLeaseTimeToLive`: the `LeaseTimeToLive` call of lease `id`.
pub fn etcd_lease_time_to_live(id: i64) -> JsOut<'static> {
    etcd_call(RequestBody::Etcd(EtcdRequest::LeaseTimeToLive { id }))
}

/// `readEtcdTimeToLive`: `{ ok: true, ttlLeftMs }` (null: the lease is gone) or
/// `{ ok: false, protocol }`.
pub fn read_etcd_time_to_live(reply: &str) -> JsOut<'static> {
    match etcd::read_etcd_time_to_live(reply) {
        Ok(left) => JsOut::Object(vec![
            ("ok", JsOut::Bool(true)),
            (
                "ttlLeftMs",
                left.map_or(JsOut::Null, |d| JsOut::Number(d.as_secs_f64() * 1e3)),
            ),
        ]),
        Err(e) => protocol(e.to_string()),
    }
}

/// `etcdListPage`: one page of the listing of the locks whose names start with
/// `prefix`, after key `after` (`None`: the first page).
pub fn etcd_list_page(key_prefix: String, prefix: &str, after: Option<&str>) -> JsOut<'static> {
    etcd_call(RequestBody::Etcd(
        etcd_settings(key_prefix).list_page(prefix, after),
    ))
}

/// `readEtcdListPage`: `{ ok: true, names, after }` (`after` null once the range is
/// exhausted) or `{ ok: false, protocol }`.
pub fn read_etcd_list_page(key_prefix: String, prefix: &str, reply: &str) -> JsOut<'static> {
    match (etcd_settings(key_prefix)).read_list_page(prefix, reply) {
        Ok((names, after)) => JsOut::Object(vec![
            ("ok", JsOut::Bool(true)),
            (
                "names",
                JsOut::Array(
                    names
                        .into_iter()
                        .map(|n| JsOut::Text(Cow::Owned(n)))
                        .collect(),
                ),
            ),
            (
                "after",
                after.map_or(JsOut::Null, |a| JsOut::Text(Cow::Owned(a))),
            ),
        ]),
        Err(e) => protocol(e.to_string()),
    }
}

/// `coreNames`: the names the JavaScript layer shows for the codes of
/// [`fencepost_core::js_outputs`] (each list in code order) and the one it reports itself:
/// `{ operation, lostReason, acquireFailedReason, redisScript, purpose, closed }`.
pub fn core_names() -> JsOut<'static> {
    JsOut::Object(vec![
        ("operation", JsOut::names(Operation::NAMES)),
        ("lostReason", JsOut::names(LostReason::NAMES)),
        (
            "acquireFailedReason",
            JsOut::names(AcquireFailedReason::NAMES),
        ),
        ("redisScript", JsOut::names(RedisScript::NAMES)),
        ("purpose", JsOut::names(Purpose::NAMES)),
        ("closed", JsOut::text(LostReason::Closed.as_str())),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    fn fields(items: &[(&str, Primitive)]) -> Vec<(String, Primitive)> {
        items
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    #[test]
    fn options_in_the_javascript_spelling_are_the_core_options() {
        let o = lock_options(fields(&[
            ("ttlMs", Primitive::Number(1000.5)),
            ("purpose", Primitive::Text("correctness".into())),
            ("acceptFailoverRisk", Primitive::Bool(true)),
            ("acquireTimeoutMs", Primitive::Number(0.0)),
            ("driftFactor", Primitive::Number(f64::NAN)),
        ]))
        .unwrap();
        assert_eq!(o.ttl, Duration::from_nanos(1_000_500_000));
        assert_eq!(o.purpose, Purpose::Correctness);
        assert!(o.accept_failover_risk);
        assert_eq!(o.acquire_timeout, Some(Duration::ZERO));
        assert!(
            o.drift_factor.is_nan(),
            "the core refuses NaN, naming the range"
        );
        assert_eq!(o.renew_every, None);
        assert_eq!(lock_options(vec![]).unwrap(), LockOptions::default());
    }

    #[test]
    fn a_bad_option_is_named_as_given() {
        let e = lock_options(fields(&[("ttlMs", Primitive::Number(-1.0))])).unwrap_err();
        assert_eq!(
            (e.kind, e.option.as_deref()),
            (Some("invalid_argument"), Some("ttlMs"))
        );
        let e = lock_options(fields(&[("timeoutMs", Primitive::Number(1.0))])).unwrap_err();
        assert_eq!(e.option.as_deref(), Some("timeoutMs"));
        assert_eq!(e.message, "unknown option \"timeoutMs\"");
        let e = lock_options(fields(&[("purpose", Primitive::Text("speed".into()))])).unwrap_err();
        assert_eq!(e.option.as_deref(), Some("purpose"));
        assert_eq!(
            e.message,
            "purpose must be 'efficiency' or 'correctness', got \"speed\""
        );
        let e = lock_options(fields(&[("autoRenew", Primitive::Number(1.0))])).unwrap_err();
        assert_eq!(e.option.as_deref(), Some("autoRenew"));
    }

    #[test]
    fn backends_by_kind() {
        assert_eq!(
            backend(None, None, None, None, vec![]).unwrap(),
            Backend::default()
        );
        let etcd = backend(Some("etcd"), Some("app/".into()), Some(false), None, vec![]).unwrap();
        assert_eq!(etcd, Backend::Etcd(etcd_settings("app/".into())));
        let shared = vec![("sharedLease".to_owned(), Primitive::Bool(true))];
        match backend(Some("etcd"), None, None, None, shared).unwrap() {
            Backend::Etcd(e) => assert!(e.shared_lease && e.key_prefix == "fencepost/"),
            other => panic!("{other:?}"),
        }
        let cluster = vec![("cluster".to_owned(), Primitive::Bool(true))];
        let e = backend(Some("etcd"), None, None, None, cluster).unwrap_err();
        assert_eq!(e.option.as_deref(), Some("cluster"), "{}", e.message);
        let e = backend(Some("etcd"), None, Some(true), None, vec![]).unwrap_err();
        assert!(e.message.contains("FIFO"), "{}", e.message);
        // the Node addon builds these machines itself; the shared decoder (all the
        // WebAssembly module has) refuses them, saying why
        let e = backend(Some("zookeeper"), None, None, None, vec![]).unwrap_err();
        assert_eq!(
            e.message,
            "kind \"zookeeper\" is not available in the WebAssembly package (workers have no \
             sockets to reach ZooKeeper): use the Node package, fencepost; kind must be \
             'redis', 'etcd' or 'redlock'"
        );
        assert!(backend(Some("postgres"), None, None, None, vec![]).is_err());
        let masters: Vec<String> = ["a:1/0", "b:1/0", "c:1/0"].map(String::from).into();
        let redlock = backend(Some("redlock"), None, None, Some(masters.clone()), vec![]).unwrap();
        assert_eq!(
            redlock,
            Backend::Redlock(RedlockSettings {
                masters: masters.clone(),
                ..RedlockSettings::default()
            })
        );
        let e = backend(
            Some("redlock"),
            None,
            Some(true),
            Some(masters.clone()),
            vec![],
        )
        .unwrap_err();
        assert_eq!(e.option.as_deref(), Some("fair"));
        let e = backend(Some("redis"), None, None, Some(masters), vec![]).unwrap_err();
        assert_eq!(e.option.as_deref(), Some("masters"));
    }

    #[test]
    fn a_redis_machine_takes_cluster_and_no_other_kind_does() {
        let cluster = || vec![("cluster".to_owned(), Primitive::Bool(true))];
        match backend(None, None, None, None, cluster()).unwrap() {
            Backend::Redis(r) => assert!(r.cluster),
            other => panic!("{other:?}"),
        }
        let e = backend(Some("etcd"), None, None, None, cluster()).unwrap_err();
        assert_eq!(e.option.as_deref(), Some("cluster"));
        let unknown = vec![("clustre".to_owned(), Primitive::Bool(true))];
        assert!(backend(None, None, None, None, unknown).is_err());
    }

    #[test]
    fn usage_errors_keep_the_core_kind() {
        let e = JsError::from(UsageError::UnknownLock { lock: LockId(4) });
        assert_eq!((e.code, e.kind), ("ERR_CONFIG", Some("unknown_lock")));
    }

    #[test]
    fn option_errors_say_milliseconds_and_javascript_names() {
        let mut o = LockOptions::ttl(core::time::Duration::from_millis(1_000));
        o.retry_base = core::time::Duration::from_millis(500);
        o.retry_max = core::time::Duration::from_micros(100_500);
        let e = JsError::from(o.validate("redis", true).unwrap_err());
        assert_eq!(e.option.as_deref(), Some("retryMaxMs"));
        assert_eq!(
            e.message,
            "retryMaxMs: must be at least retryBaseMs 500 ms, got 100.5 ms"
        );
    }
}
