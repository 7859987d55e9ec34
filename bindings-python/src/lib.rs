//! `fencepost._core`: the pyo3 face of `fencepost-core`.
//!
//! This module converts types and maps errors; it makes no lock decision. Times are
//! integer nanoseconds on the host's monotonic clock (`time.monotonic_ns()`); the
//! Python package above it (`fencepost`) converts the user's seconds and runs the
//! driver loop.
//!
//! Errors raised here are the classes of `fencepost.errors` (looked up at raise time):
//! `ConfigError` for bad input and `UsageError`s, `ClockError` for time going
//! backwards, `StaleToken` for fence refusals, `ProtocolError` for replies of the
//! wrong shape. No function panics on user input.
//!
//! One `Machine` drives one backend, given as a settings dict (`{"kind": "redis", …}`,
//! `{"kind": "postgres", …}` or `{"kind": "etcd", …}`); its requests carry a Redis
//! script call, a Redis blocking pop, a SQL statement or an etcd call, and `reply`
//! reads a Redis, SQL or etcd (JSON text) reply according to the machine's backend.
//!
//! Lock options and backend settings are the core's serde types (`LockOptions`,
//! `Backend`), read from Python dicts with pythonize; every name this module hands out
//! (scripts, operations, event kinds, loss reasons…) is the core's own spelling.

use std::collections::BTreeMap;

use fencepost_core::backends::etcd::{
    self as etcd, EtcdBackend as EtcdSettings, EtcdFenced, EtcdOp, EtcdRequest,
};
use fencepost_core::backends::postgres::{
    self as pg, PostgresBackend as PgSettings, SqlReply, SqlStatement, SqlValue,
};
use fencepost_core::backends::redis::{self, RedisBackend as RedisSettings, RedisBlpop};
use fencepost_core::fence::{self, ParamStyle};
use fencepost_core::text::Host;
use fencepost_core::{
    AcquireFailedReason, Backend, Event as CoreEvent, FencingToken, Field, Instant, LockId,
    LockOptions, LostReason, Machine as CoreMachine, ObserveOptions, Observed, Output, OwnerId,
    ProtocolError as CoreProtocolError, RedisCommand, RedisScript, RedisValue, Reply, RequestBody,
    RequestId, UsageError,
};
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyDict, PyInt, PyList, PyString, PyTuple};
use serde::de::DeserializeOwned;
use serde_value::{DeserializerError, Value, ValueDeserializer};

pyo3::create_exception!(
    fencepost._core,
    RedisErrorReply,
    PyException,
    "An error reply of a Redis server (`-ERR …`, `-LOADING …`) carried as a value.\n\n\
     Adapters return (not raise) an instance with the full message, code word first, and\n\
     pass it to `Machine.reply`; `MemoryRedis.execute` returns one for error replies."
);

// ---- errors ----------------------------------------------------------------------------

/// An instance of `fencepost.errors.<class>` built with `args` and `kwargs`, as a `PyErr`.
/// Falls back to `ValueError` if the Python package cannot be imported (never panics).
fn fp_error<'py>(
    py: Python<'py>,
    class: &str,
    message: String,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyErr {
    let built = py
        .import("fencepost.errors")
        .and_then(|m| m.getattr(class))
        .and_then(|cls| cls.call((message.clone(),), kwargs));
    match built {
        Ok(instance) => PyErr::from_value(instance),
        Err(_) => PyValueError::new_err(message),
    }
}

fn config_error(py: Python<'_>, message: impl Into<String>) -> PyErr {
    fp_error(py, "ConfigError", message.into(), None)
}

/// A `ConfigError` (kind `invalid_argument`) naming the lock option it refused.
fn option_error(py: Python<'_>, message: String, option: &str) -> PyErr {
    let kwargs = PyDict::new(py);
    match kwargs.set_item("option", option) {
        Ok(()) => fp_error(py, "ConfigError", message, Some(&kwargs)),
        Err(e) => e,
    }
}

/// A `UsageError` as `ConfigError` (`ClockError` for time going backwards) with the
/// attributes `kind` (the core's serde tag) and `option` (for `invalid_option`).
fn usage_error(py: Python<'_>, err: UsageError) -> PyErr {
    let (class, option) = match &err {
        UsageError::TimeWentBackwards { .. } | UsageError::TimeOutOfRange { .. } => {
            ("ClockError", None)
        }
        UsageError::InvalidOption { option, .. } => ("ConfigError", Some(option.as_str())),
        UsageError::UnsafePurpose { .. } => ("ConfigError", Some("purpose")),
        _ => ("ConfigError", None),
    };
    // durations in seconds, option names as Python's keyword arguments
    let message = err.render(Host::Python);
    let kwargs = PyDict::new(py);
    match kwargs
        .set_item("kind", err.kind())
        .and_then(|()| kwargs.set_item("option", option))
    {
        Ok(()) => fp_error(py, class, message, Some(&kwargs)),
        Err(e) => e,
    }
}

fn protocol_error(py: Python<'_>, err: &CoreProtocolError) -> PyErr {
    fp_error(py, "ProtocolError", err.to_string(), None)
}

fn stale_token_error(py: Python<'_>, err: fencepost_core::StaleToken) -> PyErr {
    let kwargs = PyDict::new(py);
    let filled = kwargs
        .set_item("resource", &err.resource)
        .and_then(|()| kwargs.set_item("token", err.token.get()))
        .and_then(|()| kwargs.set_item("highest", err.highest.get()))
        .and_then(|()| kwargs.set_item("reason", reason_name(err.reason)));
    if let Err(e) = filled {
        return e;
    }
    if err.reason == fence::StaleReason::DuplicateGrant {
        if let Err(e) = warn_duplicate_grant(py, &err.to_string()) {
            return e; // the warnings filter turned it into an error
        }
    }
    fp_error(py, "StaleToken", err.to_string(), Some(&kwargs))
}

fn reason_name(reason: fence::StaleReason) -> &'static str {
    match reason {
        fence::StaleReason::Superseded => "superseded",
        fence::StaleReason::DuplicateGrant => "duplicate_grant",
    }
}

/// `warnings.warn(message, fencepost.errors.DuplicateGrantWarning)`: a fence refused the
/// same token from a second owner, so the lock server granted it twice.
fn warn_duplicate_grant(py: Python<'_>, message: &str) -> PyResult<()> {
    let category = py
        .import("fencepost.errors")?
        .getattr("DuplicateGrantWarning")?;
    let text = std::ffi::CString::new(message).unwrap_or_default();
    PyErr::warn(py, &category, &text, 1)
}

fn arg_owner(
    py: Python<'_>,
    owner_id: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<fencepost_core::OwnerId>> {
    owner_id
        .filter(|o| !o.is_none())
        .map(|o| owner_from_hex(py, o))
        .transpose()
}

// ---- argument conversion ----------------------------------------------------------------

fn describe(value: &Bound<'_, PyAny>) -> String {
    let type_name = value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned());
    let repr = value
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "<unrepresentable>".to_owned());
    format!("{repr} ({type_name})")
}

/// A non-negative integer below 2^64; `bool`, `float` and anything else are refused.
fn arg_u64(value: &Bound<'_, PyAny>, name: &str) -> PyResult<u64> {
    let py = value.py();
    if value.is_instance_of::<PyBool>() || !value.is_instance_of::<PyInt>() {
        return Err(config_error(
            py,
            format!("{name} must be an int, got {}", describe(value)),
        ));
    }
    value.extract::<u64>().map_err(|_| {
        config_error(
            py,
            format!(
                "{name} must be an integer in 0 ..= 2**64 - 1, got {}",
                describe(value)
            ),
        )
    })
}

/// A fencing token to write with: an int in 1 ..= 2^64 - 1. Leases' tokens start at 1,
/// and 0 is what a fresh fence (or an absent etcd key) holds, so a write with 0 would be
/// refused by the Redis script or, on etcd, pass without any holder.
fn arg_token(value: &Bound<'_, PyAny>) -> PyResult<FencingToken> {
    let py = value.py();
    if value.is_instance_of::<PyBool>() || !value.is_instance_of::<PyInt>() {
        return Err(config_error(
            py,
            format!("token must be an int, got {}", describe(value)),
        ));
    }
    match value.extract::<u64>() {
        Ok(n) if n >= 1 => Ok(FencingToken(n)),
        _ => Err(config_error(
            py,
            format!(
                "token must be a fencing token of a lease (an int in 1 ..= 2**64 - 1), got {}",
                describe(value)
            ),
        )),
    }
}

/// A `str` as UTF-8; other types and strings with lone surrogates (which UTF-8 cannot
/// hold) are `ConfigError`s naming the parameter.
fn arg_str(value: &Bound<'_, PyAny>, name: &str) -> PyResult<String> {
    let s = value.cast::<PyString>().map_err(|_| {
        config_error(
            value.py(),
            format!("{name} must be a str, got {}", describe(value)),
        )
    })?;
    utf8(s, name)
}

fn utf8(s: &Bound<'_, PyString>, name: &str) -> PyResult<String> {
    match s.to_cow() {
        Ok(text) => Ok(text.into_owned()),
        Err(_) => {
            let repr = s
                .repr()
                .map(|r| r.to_string())
                .unwrap_or_else(|_| "<unrepresentable>".to_owned());
            Err(config_error(
                s.py(),
                format!("{name} must be valid UTF-8 (no lone surrogates), got {repr}"),
            ))
        }
    }
}

/// Text given as `str` or as UTF-8 `bytes` / `bytearray` (what Redis clients hand
/// around). Redis commands carry UTF-8 strings, so other bytes are a `ConfigError`.
fn arg_text(value: &Bound<'_, PyAny>, name: &str) -> PyResult<String> {
    let py = value.py();
    let bytes: Vec<u8> = if let Ok(s) = value.cast::<PyString>() {
        return utf8(s, name);
    } else if let Ok(b) = value.cast::<PyBytes>() {
        b.as_bytes().to_vec()
    } else if let Ok(b) = value.cast::<PyByteArray>() {
        b.to_vec()
    } else {
        return Err(config_error(
            py,
            format!("{name} must be a str or bytes, got {}", describe(value)),
        ));
    };
    String::from_utf8(bytes).map_err(|e| {
        config_error(
            py,
            format!(
                "{name} must be str or UTF-8 bytes (fenced writes carry text), got bytes that \
                 are not UTF-8 at byte {}",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

fn instant(value: &Bound<'_, PyAny>, name: &str) -> PyResult<Instant> {
    arg_u64(value, name).map(Instant::from_nanos)
}

fn lock_id(value: &Bound<'_, PyAny>) -> PyResult<LockId> {
    arg_u64(value, "lock").map(LockId)
}

fn request_id(value: &Bound<'_, PyAny>) -> PyResult<RequestId> {
    arg_u64(value, "request_id").map(RequestId)
}

// ---- options and backend settings: dicts -> the core's serde types ----------------------

/// How a dict's keys are named in error messages.
struct Keys<'a> {
    /// The dict's own name as an argument, e.g. `backend` (keys show as
    /// `backend['fair']`); None for options named by their key alone (`ttl`).
    argument: Option<&'a str>,
    /// What one key is, for an unknown one: `"lock option"`, `"redis backend setting"`.
    noun: &'a str,
}

impl Keys<'_> {
    fn show(&self, key: &str) -> String {
        match self.argument {
            Some(argument) => format!("{argument}['{key}']"),
            None => key.to_owned(),
        }
    }
}

/// A dict of scalars as a serde value tree: values keep their Python types (a bool
/// stays a bool), so the core's types refuse what does not fit. Keys must be str (serde
/// would read an int key as a field's index).
fn value_tree(dict: &Bound<'_, PyDict>, what: &str) -> PyResult<Value> {
    let py = dict.py();
    let mut tree = BTreeMap::new();
    // Item by item: pythonize probes every mapping for dataclass fields, an
    // AttributeError raised and dropped per dict (several µs, on every acquire).
    for (key, value) in dict.iter() {
        let key = match key.cast::<PyString>() {
            Ok(key) => utf8(key, "a key")?,
            Err(_) => {
                return Err(config_error(
                    py,
                    format!("{what} keys must be str, got {}", describe(&key)),
                ))
            }
        };
        // pythonize reads an int as 128 bits first, slow through the abi3 API: the
        // durations (u64 nanoseconds) take the direct way.
        let int = match value.is_exact_instance_of::<PyInt>() {
            true => value.extract::<u64>().ok(),
            false => None,
        };
        let value = match int {
            Some(n) => Value::U64(n),
            None => pythonize::depythonize::<Value>(&value)
                .map_err(|e| config_error(py, format!("{what}['{key}'] cannot be read: {e}")))?,
        };
        tree.insert(Value::String(key), value);
    }
    Ok(Value::Map(tree))
}

/// Reads the tree `tree()` makes (from `dict`) as the core's `T`. Left-out keys take
/// the core's defaults; an unknown key, a value of the wrong type or an unknown name is
/// a `ConfigError` naming the key, what it must be and what it was.
fn from_tree<T: DeserializeOwned>(
    dict: &Bound<'_, PyDict>,
    tree: impl Fn() -> PyResult<Value>,
    keys: &Keys<'_>,
) -> PyResult<T> {
    if let Ok(value) = T::deserialize(ValueDeserializer::<DeserializerError>::new(tree()?)) {
        return Ok(value);
    }
    // Something is wrong: read it again, tracking the key at fault (the tracking costs
    // an allocation per key, too much for every acquire).
    serde_path_to_error::deserialize(ValueDeserializer::<DeserializerError>::new(tree()?))
        .map_err(|e| serde_error(dict, keys, e))
}

/// A serde error as a `ConfigError` in Python's terms ("must be True or False", "a str").
fn serde_error(
    dict: &Bound<'_, PyDict>,
    keys: &Keys<'_>,
    err: serde_path_to_error::Error<DeserializerError>,
) -> PyErr {
    let py = dict.py();
    let key = err.path().to_string();
    let got = || match dict.get_item(&key) {
        Ok(Some(value)) => describe(&value),
        _ => "?".to_owned(),
    };
    let one_of = |names: &[&str]| {
        let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
        match quoted.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => "nothing".to_owned(),
        }
    };
    let inner = err.into_inner();
    // the lock option refused: the path's key, or the unknown field itself
    let option = match (&inner, keys.noun) {
        (DeserializerError::UnknownField(field, _), "lock option") => Some(field.clone()),
        (_, "lock option") if !key.is_empty() && !key.contains('.') => Some(key.clone()),
        _ => None,
    };
    let message = match inner {
        DeserializerError::UnknownField(field, expected) => format!(
            "unknown {} '{field}': use {}",
            keys.noun,
            if expected.is_empty() {
                "none".to_owned()
            } else {
                expected.join(", ")
            }
        ),
        DeserializerError::UnknownVariant(_, expected) => {
            format!(
                "{} must be {}, got {}",
                keys.show(&key),
                one_of(expected),
                got()
            )
        }
        DeserializerError::InvalidType(_, expected)
        | DeserializerError::InvalidValue(_, expected) => {
            let wanted = match expected.as_str() {
                "a boolean" => "True or False".to_owned(),
                "a string" => "a str".to_owned(),
                "f64" => "a number".to_owned(),
                "u64" => "an int in 0 ..= 2**64 - 1".to_owned(),
                other => other.to_owned(),
            };
            format!("{} must be {wanted}, got {}", keys.show(&key), got())
        }
        DeserializerError::MissingField(field) => match keys.argument {
            Some(argument) => format!("{argument} must have a '{field}'"),
            None => format!("'{field}' is required"),
        },
        other => format!("{}: {other}", keys.show(&key)),
    };
    match option {
        Some(option) => option_error(py, message, &option),
        None => config_error(py, message),
    }
}

/// Lock options from a dict of the core's `LockOptions` fields (durations in integer
/// nanoseconds: `{"ttl": 30_000_000_000, "purpose": "efficiency", …}`). Types only:
/// every range is checked by the core (`Backend::check_acquire`).
fn lock_options(options: &Bound<'_, PyAny>) -> PyResult<LockOptions> {
    let py = options.py();
    let dict = options.cast::<PyDict>().map_err(|_| {
        config_error(
            py,
            format!(
                "options must be a dict of lock options, got {}",
                describe(options)
            ),
        )
    })?;
    let keys = Keys {
        argument: None,
        noun: "lock option",
    };
    from_tree(dict, || value_tree(dict, "options"), &keys)
}

/// A lock options dict read once (`PreparedOptions(options)`, the dict
/// `Machine.acquire` takes), for `Machine.acquire` in its place: a lock acquired again
/// and again skips reading the dict each time. Immutable; checked against a backend
/// only when acquiring, as the dict is.
///
/// Errors: `ConfigError` naming the bad option (an unknown key, a value of the wrong
/// type), as `Machine.acquire` raises it.
#[pyclass(frozen, module = "fencepost._core")]
struct PreparedOptions {
    options: LockOptions,
}

#[pymethods]
impl PreparedOptions {
    #[new]
    fn new(options: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(PreparedOptions {
            options: lock_options(options)?,
        })
    }

    /// The acquire timeout in nanoseconds (int), or None (wait until granted).
    #[getter]
    fn acquire_timeout(&self) -> Option<u64> {
        self.options
            .acquire_timeout
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    fn __repr__(&self) -> String {
        format!("PreparedOptions({:?})", self.options)
    }
}

/// The observation options dict (the core's `ObserveOptions`, durations in integer
/// nanoseconds), or None.
fn observe_options(options: &Bound<'_, PyAny>) -> PyResult<Option<ObserveOptions>> {
    if options.is_none() {
        return Ok(None);
    }
    let py = options.py();
    let dict = options.cast::<PyDict>().map_err(|_| {
        config_error(
            py,
            format!(
                "observe options must be a dict or None, got {}",
                describe(options)
            ),
        )
    })?;
    let keys = Keys {
        argument: None,
        noun: "observe option",
    };
    let o: ObserveOptions = from_tree(dict, || value_tree(dict, "options"), &keys)?;
    o.validate().map_err(|e| usage_error(py, e))?;
    Ok(Some(o))
}

/// One observation as Python sees it: `(lock_id, lock_name, event, level, fields,
/// message)`; durations in the fields are float seconds.
fn observed(py: Python<'_>, o: Observed) -> PyResult<Py<PyAny>> {
    let fields = PyDict::new(py);
    for (name, value) in o.observation.fields() {
        match value {
            Field::Duration(d) => fields.set_item(name, d.as_secs_f64())?,
            Field::Count(n) => fields.set_item(name, n)?,
            Field::Token(t) => fields.set_item(name, t.get())?,
            Field::Text(s) => fields.set_item(name, s)?,
        }
    }
    let message = o.observation.message(&o.name);
    let tuple = (
        o.lock.0,
        o.name,
        o.observation.name(),
        o.observation.level(),
        fields,
        message,
    );
    Ok(tuple.into_pyobject(py)?.into_any().unbind())
}

/// The backend described by a settings dict, the core's `Backend` in serde form:
/// `{"kind": "redis" | "postgres" | "etcd", …settings}`. Every setting is optional (the
/// core's defaults); unknown keys, wrong types and table names that are not plain SQL
/// identifiers are `ConfigError`s naming them.
fn backend_spec(spec: &Bound<'_, PyAny>) -> PyResult<Backend> {
    let py = spec.py();
    let dict = spec.cast::<PyDict>().map_err(|_| {
        config_error(
            py,
            format!(
                "backend must be a dict such as {{'kind': 'redis'}}, {{'kind': 'postgres', \
                 'mode': 'lease'}} or {{'kind': 'etcd'}}, got {}",
                describe(spec)
            ),
        )
    })?;
    if let Ok(Some(kind)) = dict.get_item("kind") {
        arg_str(&kind, "backend['kind']")?;
    }
    // The kind first, alone: serde names the kinds it knows; then the settings of that
    // kind, so that an error names the setting at fault.
    let tag = || Value::String("kind".to_owned());
    let split = |kind: bool| -> PyResult<Value> {
        let Value::Map(mut tree) = value_tree(dict, "backend")? else {
            return Ok(Value::Unit); // never: value_tree makes maps
        };
        let kind_of = tree.remove(&tag());
        Ok(Value::Map(match kind {
            true => kind_of
                .map(|k| BTreeMap::from([(tag(), k)]))
                .unwrap_or_default(),
            false => tree,
        }))
    };
    let kind_keys = Keys {
        argument: Some("backend"),
        noun: "backend setting",
    };
    let backend: Backend = from_tree(dict, || split(true), &kind_keys)?;
    let noun = format!("{} backend setting", backend.name());
    let keys = Keys {
        argument: Some("backend"),
        noun: &noun,
    };
    let settings = || split(false);
    Ok(match backend {
        Backend::Redis(_) => Backend::Redis(from_tree(dict, settings, &keys)?),
        Backend::Etcd(_) => Backend::Etcd(from_tree(dict, settings, &keys)?),
        Backend::Postgres(_) => {
            let settings: PgSettings = from_tree(dict, settings, &keys)?;
            settings.check().map_err(|e| config_error(py, e))?;
            Backend::Postgres(settings)
        }
        _ => from_tree(dict, || value_tree(dict, "backend"), &keys)?,
    })
}

/// The backend of `backend` (a settings dict) or, for the older keyword, a Redis backend
/// with `key_prefix`; the default Redis backend when neither is given.
fn backend_from_args(
    py: Python<'_>,
    backend: Option<&Bound<'_, PyAny>>,
    key_prefix: Option<&Bound<'_, PyAny>>,
) -> PyResult<Backend> {
    let backend = backend.filter(|b| !b.is_none());
    let key_prefix = key_prefix.filter(|p| !p.is_none());
    match (backend, key_prefix) {
        (Some(_), Some(_)) => Err(config_error(
            py,
            "pass either backend or key_prefix, not both (put 'key_prefix' in the backend dict)",
        )),
        (Some(spec), None) => backend_spec(spec),
        (None, Some(prefix)) => Ok(Backend::Redis(RedisSettings {
            key_prefix: arg_str(prefix, "key_prefix")?,
            ..RedisSettings::default()
        })),
        (None, None) => Ok(Backend::default()),
    }
}

/// Postgres settings from keyword arguments of the module functions.
fn pg_settings(
    py: Python<'_>,
    lease_table: Option<&Bound<'_, PyAny>>,
    token_table: Option<&Bound<'_, PyAny>>,
    namespace: Option<&Bound<'_, PyAny>>,
) -> PyResult<PgSettings> {
    let mut settings = PgSettings::default();
    if let Some(t) = lease_table {
        settings.lease_table = arg_str(t, "lease_table")?;
    }
    if let Some(t) = token_table {
        settings.token_table = arg_str(t, "token_table")?;
    }
    if let Some(n) = namespace {
        settings.namespace = arg_str(n, "namespace")?;
    }
    settings.check().map_err(|e| config_error(py, e))?;
    Ok(settings)
}

// ---- replies: Python -> SqlReply --------------------------------------------------------

/// An error reply of PostgreSQL carried as a value: its SQLSTATE (five characters,
/// e.g. "40001", "57P01", "42P01") and message. Adapters pass one to `Machine.reply`
/// when the server refused a statement (psycopg: an error with a `sqlstate`).
#[pyclass(frozen, module = "fencepost._core")]
struct SqlErrorReply {
    #[pyo3(get)]
    sqlstate: String,
    #[pyo3(get)]
    message: String,
}

#[pymethods]
impl SqlErrorReply {
    #[new]
    fn new(sqlstate: &Bound<'_, PyAny>, message: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(SqlErrorReply {
            sqlstate: arg_str(sqlstate, "sqlstate")?,
            message: arg_str(message, "message")?,
        })
    }
    fn __repr__(&self) -> String {
        format!("SqlErrorReply({:?}, {:?})", self.sqlstate, self.message)
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<SqlErrorReply>()
            .is_ok_and(|o| o.get().sqlstate == self.sqlstate && o.get().message == self.message)
    }
}

/// A reply the adapter got wrong. `SqlReply` has no variant for "not a reply": an
/// error with an empty SQLSTATE (never a real one, so never read as transient) makes
/// the core report a protocol error, whatever the statement was.
fn bad_sql_reply(message: String) -> SqlReply {
    SqlReply::Error {
        sqlstate: String::new(),
        message: format!("fencepost: {message}"),
    }
}

fn to_sql_value(value: &Bound<'_, PyAny>) -> Result<SqlValue, String> {
    if value.is_none() {
        Ok(SqlValue::Null)
    } else if value.is_instance_of::<PyBool>() {
        Ok(SqlValue::Bool(value.is_truthy().unwrap_or(false)))
    } else if value.is_instance_of::<PyInt>() {
        value
            .extract::<i64>()
            .map(SqlValue::Int)
            .map_err(|_| format!("integer out of the 64-bit range: {}", describe(value)))
    } else if let Ok(s) = value.cast::<PyString>() {
        Ok(SqlValue::Text(s.to_string_lossy().into_owned()))
    } else {
        Err(format!(
            "unsupported value in a row (None, bool, int or str): {}",
            describe(value)
        ))
    }
}

fn items<'py>(value: &Bound<'py, PyAny>) -> Option<Vec<Bound<'py, PyAny>>> {
    if let Ok(list) = value.cast::<PyList>() {
        Some(list.iter().collect())
    } else if let Ok(tuple) = value.cast::<PyTuple>() {
        Some(tuple.iter().collect())
    } else {
        None
    }
}

/// Converts what a SQL adapter returned: rows (a list of tuples or lists of None, bool,
/// int, str) or a `SqlErrorReply`. Never fails: anything else becomes an error reply
/// the core reads as a protocol error.
fn to_sql_reply(value: &Bound<'_, PyAny>) -> SqlReply {
    if let Ok(err) = value.cast::<SqlErrorReply>() {
        let err = err.get();
        return SqlReply::Error {
            sqlstate: err.sqlstate.clone(),
            message: err.message.clone(),
        };
    }
    let Some(rows) = items(value) else {
        return bad_sql_reply(format!(
            "a SQL reply must be a list of rows or a SqlErrorReply, got {}",
            describe(value)
        ));
    };
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let Some(cells) = items(&row) else {
            return bad_sql_reply(format!(
                "a row must be a tuple or list, got {}",
                describe(&row)
            ));
        };
        match cells
            .iter()
            .map(to_sql_value)
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(row) => out.push(row),
            Err(e) => return bad_sql_reply(e),
        }
    }
    SqlReply::Rows { rows: out }
}

fn from_sql_value(py: Python<'_>, value: &SqlValue) -> PyResult<Py<PyAny>> {
    Ok(match value {
        SqlValue::Null => py.None(),
        SqlValue::Bool(b) => PyBool::new(py, *b).to_owned().into_any().unbind(),
        SqlValue::Int(n) => n.into_pyobject(py)?.into_any().unbind(),
        SqlValue::Text(s) => s.into_pyobject(py)?.into_any().unbind(),
    })
}

// ---- replies: Python -> RedisValue -> Python --------------------------------------------

/// Deepest nesting of reply arrays accepted; deeper input becomes an error value.
const MAX_REPLY_DEPTH: usize = 32;

/// Converts what a Redis client returned into a `RedisValue`. Never fails: a value of an
/// unknown type becomes `RedisValue::Error` describing it, which the core reads as a
/// protocol error.
fn to_redis_value(value: &Bound<'_, PyAny>, depth: usize) -> RedisValue {
    if depth > MAX_REPLY_DEPTH {
        return RedisValue::Error(format!(
            "fencepost: reply nested deeper than {MAX_REPLY_DEPTH} arrays"
        ));
    }
    if value.is_none() {
        return RedisValue::Nil;
    }
    if value.is_instance_of::<PyBool>() {
        // RESP3 booleans (Lua true/false); RESP2 gives 1 / nil.
        return RedisValue::Int(i64::from(value.is_truthy().unwrap_or(false)));
    }
    if value.is_instance_of::<PyInt>() {
        return match value.extract::<i64>() {
            Ok(n) => RedisValue::Int(n),
            Err(_) => RedisValue::Error(format!(
                "fencepost: integer reply out of the 64-bit range: {}",
                describe(value)
            )),
        };
    }
    if let Ok(b) = value.cast::<PyBytes>() {
        return RedisValue::Data(String::from_utf8_lossy(b.as_bytes()).into_owned());
    }
    if let Ok(s) = value.cast::<PyString>() {
        return match s.to_cow() {
            Ok(s) => RedisValue::Data(s.into_owned()),
            Err(_) => RedisValue::Data(s.to_string_lossy().into_owned()),
        };
    }
    if let Ok(list) = value.cast::<PyList>() {
        return RedisValue::Array(
            list.iter()
                .map(|item| to_redis_value(&item, depth + 1))
                .collect(),
        );
    }
    if let Ok(tuple) = value.cast::<PyTuple>() {
        return RedisValue::Array(
            tuple
                .iter()
                .map(|item| to_redis_value(&item, depth + 1))
                .collect(),
        );
    }
    if value.is_instance_of::<pyo3::exceptions::PyBaseException>() {
        return RedisValue::Error(
            value
                .str()
                .map(|s| s.to_string())
                .unwrap_or_else(|_| "ERR unprintable error reply".to_owned()),
        );
    }
    RedisValue::Error(format!(
        "fencepost: unsupported reply value from the adapter: {}",
        describe(value)
    ))
}

fn from_redis_value(py: Python<'_>, value: &RedisValue) -> PyResult<Py<PyAny>> {
    Ok(match value {
        RedisValue::Nil => py.None(),
        RedisValue::Int(n) => n.into_pyobject(py)?.into_any().unbind(),
        RedisValue::Data(s) | RedisValue::Status(s) => s.into_pyobject(py)?.into_any().unbind(),
        RedisValue::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(from_redis_value(py, item)?)?;
            }
            list.into_any().unbind()
        }
        RedisValue::Error(message) => RedisErrorReply::new_err(message.clone())
            .into_value(py)
            .into_any(),
    })
}

// ---- outputs ----------------------------------------------------------------------------

/// One Redis script call: `EVALSHA script_sha len(keys) *keys *args`, or `EVAL
/// script_source …` when the server answers `NOSCRIPT`.
#[pyclass(frozen, module = "fencepost._core")]
struct Command {
    cmd: RedisCommand,
}

#[pymethods]
impl Command {
    /// Which script: "acquire", "renew", "renew_many" (a batched renewal), "release",
    /// "fenced_set", "acquire_fair", "release_fair", or an operator query's "is_locked",
    /// "force_release", "inspect", "list".
    #[getter]
    fn script(&self) -> &'static str {
        self.cmd.script.as_str()
    }
    /// SHA-1 of the script source, 40 lowercase hex digits (for `EVALSHA`).
    #[getter]
    fn script_sha(&self) -> &'static str {
        self.cmd.script.sha1()
    }
    /// The Lua source (for `EVAL` and `SCRIPT LOAD`).
    #[getter]
    fn script_source(&self) -> &'static str {
        self.cmd.script.source()
    }
    /// `KEYS`, in order.
    #[getter]
    fn keys(&self) -> Vec<String> {
        self.cmd.keys.clone()
    }
    /// `ARGV`, in order.
    #[getter]
    fn args(&self) -> Vec<String> {
        self.cmd.args.clone()
    }
    /// `(replicas, timeout_ms)` of a `WAIT` to send right after the script, or None.
    #[getter]
    fn wait(&self) -> Option<(u32, u64)> {
        self.cmd.wait.map(|w| (w.replicas, w.timeout_ms))
    }
    fn __repr__(&self) -> String {
        format!(
            "Command(script={:?}, keys={:?}, args={:?})",
            self.script(),
            self.cmd.keys,
            self.cmd.args
        )
    }
}

/// A blocking pop a parked fair waiter waits on: `BLPOP key timeout_ms / 1000`
/// (fractional seconds, Redis >= 6; never 0, which would block forever). It blocks the
/// connection it runs on. Pass the reply (None at the timeout, or `[key, value]`) to
/// `Machine.reply`.
#[pyclass(frozen, module = "fencepost._core")]
struct BlockingPop {
    pop: RedisBlpop,
}

#[pymethods]
impl BlockingPop {
    /// The list to pop from (this waiter's wake-up list).
    #[getter]
    fn key(&self) -> String {
        self.pop.key.clone()
    }
    /// How long to block, in milliseconds (at least 1).
    #[getter]
    fn timeout_ms(&self) -> u64 {
        self.pop.timeout_ms
    }
    /// The `BLPOP` timeout argument: `timeout_ms / 1000` seconds.
    #[getter]
    fn timeout_s(&self) -> f64 {
        self.pop.timeout_ms as f64 / 1000.0
    }
    fn __repr__(&self) -> String {
        format!(
            "BlockingPop(key={:?}, timeout_ms={})",
            self.pop.key, self.pop.timeout_ms
        )
    }
}

/// One etcd v3 call, for the JSON gateway (`POST {endpoint}{path}` with `body`) or a
/// gRPC client (`call` names the RPC; `spec_json` gives the fields, which map one to
/// one onto etcd's protobuf messages). Answer with the JSON document the gateway
/// returned (error documents included). A `watch` is a blocking wait: answer with the
/// first response line that has `events` (or is canceled or compacted), or `"{}"`
/// after `timeout_s`; then cancel the watch.
#[pyclass(frozen, module = "fencepost._core")]
struct EtcdCall {
    req: EtcdRequest,
}

#[pymethods]
impl EtcdCall {
    /// "lease_grant", "lease_keep_alive", "lease_revoke", "lease_time_to_live", "txn",
    /// "range" or "watch".
    #[getter]
    fn call(&self) -> &'static str {
        self.req.call_name()
    }
    /// The JSON gateway path, e.g. "/v3/kv/txn".
    #[getter]
    fn path(&self) -> &'static str {
        self.req.gateway_path()
    }
    /// The JSON gateway request body (keys base64, int64 as strings).
    #[getter]
    fn body(&self) -> String {
        self.req.gateway_body()
    }
    /// The call's fields as JSON, in the core's protobuf-shaped form (for gRPC clients).
    #[getter]
    fn spec_json(&self) -> String {
        serde_json::to_string(&self.req).unwrap_or_default()
    }
    /// Whether this is a blocking watch.
    #[getter]
    fn is_watch(&self) -> bool {
        matches!(self.req, EtcdRequest::Watch(_))
    }
    /// A watch's timeout in seconds (None for other calls).
    #[getter]
    fn timeout_s(&self) -> Option<f64> {
        self.req.watch_timeout_ms().map(|ms| ms as f64 / 1000.0)
    }
    fn __repr__(&self) -> String {
        format!("EtcdCall(path={:?}, body={})", self.path(), self.body())
    }
}

/// One ZooKeeper call for the host's client (kazoo): `spec_json` is the call as JSON
/// (`{"call": "create" | "children" | "exists" | "watch" | "get" | "delete" |
/// "delete_owned" | "multi", …}`); answer with the JSON reply document the core's
/// `fencepost_core::backends::zookeeper::ZkRequest` describes for it, with `"session"`
/// (the client's session id) in every reply and `{"error": kind, …}` for a failed call.
/// A `watch` is a blocking wait of at most `timeout_s`.
#[pyclass(frozen, module = "fencepost._core")]
struct ZooKeeperCall {
    req: fencepost_core::backends::ZkRequest,
}

#[pymethods]
impl ZooKeeperCall {
    /// The call's name: "create", "children", "exists", "watch", "get", "delete",
    /// "delete_owned" or "multi".
    #[getter]
    fn call(&self) -> &'static str {
        self.req.call_name()
    }
    /// The call and its fields as JSON.
    #[getter]
    fn spec_json(&self) -> String {
        self.req.to_json()
    }
    /// Whether this is a blocking watch.
    #[getter]
    fn is_watch(&self) -> bool {
        self.req.watch_timeout_ms().is_some()
    }
    /// A watch's timeout in seconds (None for other calls).
    #[getter]
    fn timeout_s(&self) -> Option<f64> {
        self.req.watch_timeout_ms().map(|ms| ms as f64 / 1000.0)
    }
    fn __repr__(&self) -> String {
        format!("ZooKeeperCall({})", self.req.to_json())
    }
}

/// The path of lock `name` under `root` and the node-name prefix of `owner_id` under
/// `naming` ("kazoo" or "curator"), as the ZooKeeper recipe writes them.
///
/// Errors: `ConfigError` for arguments that are not str, an unknown naming or an owner id
/// that is not 32 hex digits.
#[pyfunction]
fn zookeeper_node_prefix(
    py: Python<'_>,
    root: &Bound<'_, PyAny>,
    naming: &Bound<'_, PyAny>,
    name: &Bound<'_, PyAny>,
    owner_id: &Bound<'_, PyAny>,
) -> PyResult<(String, String)> {
    use fencepost_core::backends::{ZkNaming, ZooKeeperBackend};
    let naming = match arg_str(naming, "naming")?.as_str() {
        "kazoo" => ZkNaming::Kazoo,
        "curator" => ZkNaming::Curator,
        other => {
            return Err(config_error(
                py,
                format!("naming must be \"kazoo\" or \"curator\", got {other:?}"),
            ))
        }
    };
    let settings = ZooKeeperBackend {
        root: arg_str(root, "root")?,
        naming,
        session_timeout_ms: None,
    };
    let owner = owner_from_hex(py, owner_id)?;
    Ok((
        settings.lock_path(&arg_str(name, "name")?),
        settings.node_prefix(&owner),
    ))
}

/// The ZooKeeper settings of `root` and `naming` ("kazoo" or "curator").
fn zk_settings(
    py: Python<'_>,
    root: &Bound<'_, PyAny>,
    naming: &Bound<'_, PyAny>,
) -> PyResult<fencepost_core::backends::ZooKeeperBackend> {
    use fencepost_core::backends::{ZkNaming, ZooKeeperBackend};
    let naming = match arg_str(naming, "naming")?.as_str() {
        "kazoo" => ZkNaming::Kazoo,
        "curator" => ZkNaming::Curator,
        other => {
            return Err(config_error(
                py,
                format!("naming must be \"kazoo\" or \"curator\", got {other:?}"),
            ))
        }
    };
    Ok(ZooKeeperBackend {
        root: arg_str(root, "root")?,
        naming,
        session_timeout_ms: None,
    })
}

/// The reply text of a ZooKeeper call (str or UTF-8 bytes).
fn zk_reply_text(reply: &Bound<'_, PyAny>) -> String {
    etcd_reply_text(reply)
}

/// The first call of the operator query "who holds lock `name`?" on ZooKeeper: the
/// children of the lock path. Read its reply with `read_zookeeper_contenders`.
///
/// Errors: `ConfigError` for arguments that are not str or an unknown naming.
#[pyfunction]
fn zookeeper_inspect(
    py: Python<'_>,
    root: &Bound<'_, PyAny>,
    naming: &Bound<'_, PyAny>,
    name: &Bound<'_, PyAny>,
) -> PyResult<ZooKeeperCall> {
    let settings = zk_settings(py, root, naming)?;
    Ok(ZooKeeperCall {
        req: settings.inspect(&arg_str(name, "name")?),
    })
}

/// Reads the reply of `zookeeper_inspect`: `(get, node_path, waiters)` (the `getData`
/// call of the holder node, its path and the contenders behind it), or None when
/// nobody holds lock `name`.
///
/// Errors: `ProtocolError` for an error reply or a reply of another shape.
#[pyfunction]
fn read_zookeeper_contenders(
    py: Python<'_>,
    root: &Bound<'_, PyAny>,
    naming: &Bound<'_, PyAny>,
    name: &Bound<'_, PyAny>,
    reply: &Bound<'_, PyAny>,
) -> PyResult<Option<(ZooKeeperCall, String, u64)>> {
    let settings = zk_settings(py, root, naming)?;
    let name = arg_str(name, "name")?;
    match fencepost_core::backends::read_zk_contenders(&settings, &name, &zk_reply_text(reply)) {
        Ok(Some(node)) => Ok(Some((
            ZooKeeperCall { req: node.get() },
            node.path,
            node.waiters,
        ))),
        Ok(None) => Ok(None),
        Err(e) => Err(protocol_error(py, &e)),
    }
}

/// Reads the reply of the holder node's `getData` (from `read_zookeeper_contenders`):
/// the holder's dict (see `Holder`), or None when the node is gone (list again, at
/// most `ZK_INSPECT_TRIES` times).
///
/// Errors: `ProtocolError` for an error reply or a reply of another shape.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn read_zookeeper_holder<'py>(
    py: Python<'py>,
    root: &Bound<'py, PyAny>,
    naming: &Bound<'py, PyAny>,
    name: &Bound<'py, PyAny>,
    node_path: &Bound<'py, PyAny>,
    waiters: u64,
    reply: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let settings = zk_settings(py, root, naming)?;
    let node = fencepost_core::backends::ZkHolderNode {
        path: arg_str(node_path, "node_path")?,
        waiters,
    };
    let name = arg_str(name, "name")?;
    match fencepost_core::backends::read_zk_holder(&settings, &name, &node, &zk_reply_text(reply)) {
        Ok(Some(h)) => holder_dict(py, &h).map(Some),
        Ok(None) => Ok(None),
        Err(e) => Err(protocol_error(py, &e)),
    }
}

/// The children of the ZooKeeper root: the lock names an operator listing inspects.
/// Read its reply with `read_zookeeper_list`.
///
/// Errors: `ConfigError` for arguments that are not str or an unknown naming.
#[pyfunction]
fn zookeeper_list_names(
    py: Python<'_>,
    root: &Bound<'_, PyAny>,
    naming: &Bound<'_, PyAny>,
) -> PyResult<ZooKeeperCall> {
    Ok(ZooKeeperCall {
        req: zk_settings(py, root, naming)?.list_names(),
    })
}

/// Reads the reply of `zookeeper_list_names`: the names starting with `prefix`, sorted.
///
/// Errors: `ProtocolError` for an error reply or a reply of another shape.
#[pyfunction]
fn read_zookeeper_list(
    py: Python<'_>,
    prefix: &Bound<'_, PyAny>,
    reply: &Bound<'_, PyAny>,
) -> PyResult<Vec<String>> {
    fencepost_core::backends::read_zk_list(&arg_str(prefix, "prefix")?, &zk_reply_text(reply))
        .map_err(|e| protocol_error(py, &e))
}

/// Reads the reply of a Lease GET (`KubernetesCall.get`) as an inspection: the holder's
/// dict (see `Holder`; `ttl_left_ns` is the record's `leaseDurationSeconds`, an upper
/// bound), or None when there is no Lease or no holder.
///
/// Errors: `ProtocolError` for a `Status` other than 404 or a reply of another shape.
#[pyfunction]
fn read_kubernetes_inspect<'py>(
    py: Python<'py>,
    name: &Bound<'py, PyAny>,
    reply: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let name = arg_str(name, "name")?;
    match fencepost_core::backends::read_kube_inspect(&name, &etcd_reply_text(reply)) {
        Ok(Some(h)) => holder_dict(py, &h).map(Some),
        Ok(None) => Ok(None),
        Err(e) => Err(protocol_error(py, &e)),
    }
}

/// Reads one page of `KubernetesCall.list_page`: `(continue token or None on the last
/// page, the held Leases of the page whose names start with `prefix`)`.
///
/// Errors: `ProtocolError` for a `Status` or a reply that is no LeaseList.
#[pyfunction]
fn read_kubernetes_list<'py>(
    py: Python<'py>,
    prefix: &Bound<'py, PyAny>,
    reply: &Bound<'py, PyAny>,
) -> PyResult<(Option<String>, Vec<Bound<'py, PyDict>>)> {
    match fencepost_core::backends::read_kube_list(
        &arg_str(prefix, "prefix")?,
        &etcd_reply_text(reply),
    ) {
        Ok((next, holders)) => Ok((
            next,
            holders
                .iter()
                .map(|h| holder_dict(py, h))
                .collect::<PyResult<_>>()?,
        )),
        Err(e) => Err(protocol_error(py, &e)),
    }
}

/// Reads a fenced multi's reply (`{"results": [...]}`, the check first): True when every
/// operation ran, False when the holder node was gone or changed (nothing was written).
///
/// Errors: `ProtocolError` for a reply of another shape.
#[pyfunction]
fn read_zookeeper_fenced(py: Python<'_>, reply: &Bound<'_, PyAny>) -> PyResult<bool> {
    use fencepost_core::backends::zookeeper::{read_zk_fenced, ZkFenced};
    match read_zk_fenced(&etcd_reply_text(reply)) {
        Ok(ZkFenced::Refused) => Ok(false),
        Ok(_) => Ok(true),
        Err(e) => Err(protocol_error(py, &e)),
    }
}

/// One call to the Kubernetes API server for the host's HTTP client (httpx): send
/// `method` to `{server}{path}` with `body` (None: no body) as `content_type`, after
/// setting each `spec` field named in `stamp` to the wall clock as a MicroTime
/// (RFC 3339 UTC with six fractional digits: `2026-12-01T16:02:29.123456Z`); answer
/// with the response body (a Lease, or a `Status` document), whatever the HTTP status.
#[pyclass(frozen, module = "fencepost._core")]
struct KubernetesCall {
    req: fencepost_core::backends::KubeRequest,
}

#[pymethods]
impl KubernetesCall {
    /// The GET of Lease `name` in `namespace` (for observers; names are checked by the
    /// caller).
    #[staticmethod]
    fn get(namespace: &str, name: &str) -> Self {
        let settings = fencepost_core::backends::KubernetesBackend {
            namespace: namespace.to_owned(),
        };
        KubernetesCall {
            req: settings.get(name),
        }
    }
    /// One page of the Lease listing of `namespace`: `GET …/leases?limit=` from the
    /// `continue` token of the previous page (None first). Read it with
    /// `read_kubernetes_list`.
    #[staticmethod]
    #[pyo3(signature = (namespace, limit, continue_token=None))]
    fn list_page(namespace: &str, limit: u32, continue_token: Option<&str>) -> Self {
        let settings = fencepost_core::backends::KubernetesBackend {
            namespace: namespace.to_owned(),
        };
        KubernetesCall {
            req: settings.list_page(limit, continue_token),
        }
    }
    /// "GET", "POST", "PUT" or "PATCH".
    #[getter]
    fn method(&self) -> &str {
        &self.req.method
    }
    /// The path under the server URL.
    #[getter]
    fn path(&self) -> &str {
        &self.req.path
    }
    /// The JSON body, or None.
    #[getter]
    fn body(&self) -> Option<&str> {
        self.req.body.as_deref()
    }
    /// "application/json", or "application/json-patch+json" for a PATCH.
    #[getter]
    fn content_type(&self) -> &str {
        &self.req.content_type
    }
    /// The `spec` fields to stamp with the wall clock before sending.
    #[getter]
    fn stamp(&self) -> Vec<String> {
        self.req.stamp.clone()
    }
    fn __repr__(&self) -> String {
        format!("KubernetesCall({})", self.req.to_json())
    }
}

/// An etcd reply as JSON text: str or UTF-8 bytes; anything else becomes text the core
/// reads as a protocol error (naming the type).
fn etcd_reply_text(value: &Bound<'_, PyAny>) -> String {
    if let Ok(s) = value.cast::<PyString>() {
        if let Ok(s) = utf8(s, "reply") {
            return s;
        }
    }
    if let Ok(b) = value.cast::<PyBytes>() {
        if let Ok(s) = std::str::from_utf8(b.as_bytes()) {
            return s.to_owned();
        }
    }
    format!("<not an etcd JSON reply: {}>", describe(value))
}

fn owner_from_hex(
    py: Python<'_>,
    owner_id: &Bound<'_, PyAny>,
) -> PyResult<fencepost_core::OwnerId> {
    let hex = arg_str(owner_id, "owner_id")?;
    fencepost_core::OwnerId::from_hex(&hex)
        .ok_or_else(|| config_error(py, format!("owner_id must be 32 hex digits, got {hex:?}")))
}

/// The etcd key the acquisition `owner_id` puts for lock `name`
/// (`{key_prefix}{name}/{lease id, 16 hex digits}`); while it holds the lock, the key's
/// create revision is its fencing token.
///
/// Errors: `ConfigError` for arguments that are not str or an owner id that is not 32
/// hex digits.
#[pyfunction]
fn etcd_holder_key(
    py: Python<'_>,
    key_prefix: &Bound<'_, PyAny>,
    name: &Bound<'_, PyAny>,
    owner_id: &Bound<'_, PyAny>,
) -> PyResult<String> {
    let settings = EtcdSettings {
        key_prefix: arg_str(key_prefix, "key_prefix")?,
        ..EtcdSettings::default()
    };
    let owner = owner_from_hex(py, owner_id)?;
    Ok(settings.holder_key(&arg_str(name, "name")?, &owner))
}

/// The lease id fencepost uses on etcd for `owner_id` (its first 8 bytes, big-endian,
/// as a positive int64).
///
/// Errors: `ConfigError` for an owner id that is not 32 hex digits.
#[pyfunction]
fn etcd_lease_id(py: Python<'_>, owner_id: &Bound<'_, PyAny>) -> PyResult<i64> {
    Ok(etcd::lease_id(&owner_from_hex(py, owner_id)?))
}

/// A fenced etcd transaction: puts every `(key, value)` of `puts` and deletes every key
/// of `deletes` only while the key of `owner_id` for lock `name` still has create
/// revision `token` (the lease that got `token` still holds the lock: etcd's
/// `IsOwner` comparison). Read the reply with `read_etcd_fenced_txn`.
///
/// Errors: `ConfigError` naming an argument of the wrong type.
#[pyfunction]
#[pyo3(signature = (key_prefix, name, owner_id, token, puts, deletes = None))]
fn etcd_fenced_txn(
    py: Python<'_>,
    key_prefix: &Bound<'_, PyAny>,
    name: &Bound<'_, PyAny>,
    owner_id: &Bound<'_, PyAny>,
    token: &Bound<'_, PyAny>,
    puts: &Bound<'_, PyAny>,
    deletes: Option<&Bound<'_, PyAny>>,
) -> PyResult<EtcdCall> {
    let settings = EtcdSettings {
        key_prefix: arg_str(key_prefix, "key_prefix")?,
        ..EtcdSettings::default()
    };
    let name = arg_str(name, "name")?;
    let owner = owner_from_hex(py, owner_id)?;
    let token = arg_token(token)?;
    let bad_puts = || {
        config_error(
            py,
            format!(
                "puts must be a list of (key, value) str pairs, got {}",
                describe(puts)
            ),
        )
    };
    let mut ops = Vec::new();
    for item in puts.try_iter().map_err(|_| bad_puts())? {
        let item = item?;
        let pair = item.cast::<PyTuple>().map_err(|_| bad_puts())?;
        if pair.len() != 2 {
            return Err(bad_puts());
        }
        ops.push(EtcdOp::Put {
            key: arg_str(&pair.get_item(0)?, "puts[][0]")?,
            value: arg_text(&pair.get_item(1)?, "puts[][1]")?,
            lease: 0,
            ignore_lease: false,
        });
    }
    if let Some(deletes) = deletes.filter(|d| !d.is_none()) {
        if deletes.is_instance_of::<PyString>() {
            return Err(config_error(py, "deletes must be a list of str, not a str"));
        }
        for key in deletes.try_iter()? {
            ops.push(EtcdOp::Delete {
                key: arg_str(&key?, "deletes[]")?,
            });
        }
    }
    let key = settings.holder_key(&name, &owner);
    Ok(EtcdCall {
        req: settings.fenced_txn(&name, &key, token, ops),
    })
}

/// Reads the reply of `etcd_fenced_txn`: returns the transaction's revision when it
/// was applied.
///
/// Errors: `StaleToken` (`resource` = `name`, `highest` = the current holder's token,
/// or 0 when nobody holds the lock) when the lease no longer holds the lock;
/// `ProtocolError` for an error reply or a reply of another shape.
#[pyfunction]
fn read_etcd_fenced_txn(
    py: Python<'_>,
    name: &Bound<'_, PyAny>,
    token: &Bound<'_, PyAny>,
    reply: &Bound<'_, PyAny>,
) -> PyResult<i64> {
    let name = arg_str(name, "name")?;
    let token = FencingToken(arg_u64(token, "token")?);
    match etcd::read_etcd_fenced_txn(&etcd_reply_text(reply)) {
        Ok(EtcdFenced::Applied { revision }) => Ok(revision),
        Ok(EtcdFenced::Refused { holder }) => {
            let now = match holder {
                Some(h) => format!("held now by token {h}"),
                None => "nobody holds it now".to_owned(),
            };
            let message = format!(
                "fenced etcd transaction refused: the lease with token {token} no longer \
                 holds lock {name:?} ({now}); nothing was written"
            );
            let kwargs = PyDict::new(py);
            kwargs.set_item("resource", &name)?;
            kwargs.set_item("token", token.get())?;
            kwargs.set_item("highest", holder.unwrap_or(FencingToken(0)).get())?;
            Err(fp_error(py, "StaleToken", message, Some(&kwargs)))
        }
        Ok(_) => Err(config_error(py, "unknown fenced transaction outcome")),
        Err(e) => Err(protocol_error(py, &e)),
    }
}

/// One SQL statement for PostgreSQL: `sql` with `$1…$n` placeholders (a placeholder may
/// appear more than once) and `params` in order, to run on the connection `connection`
/// names: "any" (any connection, autocommit; a pool is fine) or "dedicated" (the
/// connection this lock alone uses: open it for the lock's first statement, run every
/// later statement of the lock on it, close it after the lock's final event) or "listen"
/// (a wait: the `LISTEN` on the listening connection, then no rows once a notification
/// on channel `params[0]` arrives or `params[1]` milliseconds have passed).
#[pyclass(frozen, module = "fencepost._core", name = "SqlStatement")]
struct Sql {
    stmt: SqlStatement,
}

#[pymethods]
impl Sql {
    /// The statement text, with `$n` placeholders.
    #[getter]
    fn sql(&self) -> String {
        self.stmt.sql.clone()
    }
    /// The parameters in order: None, bool, int or str.
    #[getter]
    fn params(&self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        self.stmt
            .params
            .iter()
            .map(|v| from_sql_value(py, v))
            .collect()
    }
    /// "any", "dedicated" or "listen".
    #[getter]
    fn connection(&self) -> &'static str {
        self.stmt.connection.as_str()
    }
    fn __repr__(&self) -> String {
        format!(
            "SqlStatement(connection={:?}, params={:?}, sql={:?})",
            self.connection(),
            self.stmt.params,
            self.stmt.sql
        )
    }
}

/// A backend request the machine wants executed; answer it with `Machine.reply` or
/// `Machine.transport_error` quoting `id`. After `deadline_ns` its outcome no longer
/// matters: cancel it and report a transport error.
#[pyclass(frozen, module = "fencepost._core")]
struct Request {
    /// Request id, unique within its machine.
    #[pyo3(get)]
    id: u64,
    /// The lock id it is for.
    #[pyo3(get)]
    lock: u64,
    /// "acquire", "renew", "release" or "wait".
    #[pyo3(get)]
    operation: &'static str,
    /// Monotonic nanoseconds after which to give up on it.
    #[pyo3(get)]
    deadline_ns: u64,
    body: RequestBody,
}

impl Request {
    fn redis(&self) -> PyResult<&RedisCommand> {
        match &self.body {
            RequestBody::Redis(cmd) => Ok(cmd),
            RequestBody::RedlockPart(part) => Ok(&part.command),
            other => Err(pyo3::exceptions::PyAttributeError::new_err(format!(
                "request {} is a {:?} request, not a Redis script call: read request.body",
                self.id,
                other.kind()
            ))),
        }
    }
}

#[pymethods]
impl Request {
    /// "redis" (a script call: `body` is a `Command`), "redis_blpop" (a blocking pop:
    /// `BlockingPop`), "sql" (a statement: `SqlStatement`), "etcd" (an `EtcdCall`) or
    /// "redlock_part" (a script call on one Redlock master: `body` is a `Command`,
    /// `master` says which).
    #[getter]
    fn kind(&self) -> &'static str {
        self.body.kind()
    }
    /// What to send: a `Command`, a `BlockingPop`, a `SqlStatement` or an `EtcdCall`.
    #[getter]
    fn body(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match &self.body {
            RequestBody::Redis(cmd) => Ok(Py::new(py, Command { cmd: cmd.clone() })?.into_any()),
            RequestBody::RedlockPart(part) => Ok(Py::new(
                py,
                Command {
                    cmd: part.command.clone(),
                },
            )?
            .into_any()),
            RequestBody::RedisBlpop(pop) => {
                Ok(Py::new(py, BlockingPop { pop: pop.clone() })?.into_any())
            }
            RequestBody::Sql(stmt) => Ok(Py::new(py, Sql { stmt: stmt.clone() })?.into_any()),
            RequestBody::Etcd(req) => Ok(Py::new(py, EtcdCall { req: req.clone() })?.into_any()),
            RequestBody::ZooKeeper(req) => {
                Ok(Py::new(py, ZooKeeperCall { req: req.clone() })?.into_any())
            }
            RequestBody::Kubernetes(req) => {
                Ok(Py::new(py, KubernetesCall { req: req.clone() })?.into_any())
            }
            other => Err(config_error(
                py,
                format!("this build of fencepost cannot run the request body {other:?}"),
            )),
        }
    }
    /// Which Redlock master runs it, from 0 (the index into the backend's `masters`);
    /// None for a request of any other kind.
    #[getter]
    fn master(&self) -> Option<u16> {
        match &self.body {
            RequestBody::RedlockPart(part) => Some(part.master),
            _ => None,
        }
    }
    /// Which script (Redis script calls only; AttributeError otherwise).
    #[getter]
    fn script(&self) -> PyResult<&'static str> {
        Ok(self.redis()?.script.as_str())
    }
    /// SHA-1 of the script source, 40 lowercase hex digits (for `EVALSHA`).
    #[getter]
    fn script_sha(&self) -> PyResult<&'static str> {
        Ok(self.redis()?.script.sha1())
    }
    /// The Lua source (for `EVAL` after `NOSCRIPT`).
    #[getter]
    fn script_source(&self) -> PyResult<&'static str> {
        Ok(self.redis()?.script.source())
    }
    /// `KEYS`, in order.
    #[getter]
    fn keys(&self) -> PyResult<Vec<String>> {
        Ok(self.redis()?.keys.clone())
    }
    /// `ARGV`, in order.
    #[getter]
    fn args(&self) -> PyResult<Vec<String>> {
        Ok(self.redis()?.args.clone())
    }
    /// Replica confirmation: `(replicas, timeout_ms)` for a `WAIT replicas timeout_ms`
    /// to send right after the script on the same connection (a pipeline, not
    /// `MULTI`), replying `[script reply, WAIT reply]`; None when the script runs alone.
    #[getter]
    fn wait(&self) -> PyResult<Option<(u32, u64)>> {
        Ok(self.redis()?.wait.map(|w| (w.replicas, w.timeout_ms)))
    }
    fn __repr__(&self) -> String {
        let what = match &self.body {
            RequestBody::Redis(cmd) => {
                format!("script={:?}, keys={:?}", cmd.script.as_str(), cmd.keys)
            }
            RequestBody::RedisBlpop(pop) => {
                format!("blpop={:?}, timeout_ms={}", pop.key, pop.timeout_ms)
            }
            RequestBody::Sql(stmt) => format!(
                "sql on {:?} connection, params={:?}",
                stmt.connection.as_str(),
                stmt.params
            ),
            RequestBody::Etcd(req) => format!("etcd={}", req.gateway_path()),
            RequestBody::RedlockPart(part) => format!(
                "master={}, script={:?}, keys={:?}",
                part.master,
                part.command.script.as_str(),
                part.command.keys
            ),
            other => format!("{other:?}"),
        };
        format!(
            "Request(id={}, lock={}, operation={:?}, deadline_ns={}, {what})",
            self.id, self.lock, self.operation, self.deadline_ns
        )
    }
}

/// Something the host must act on, for lock `lock`: the base class of one class per
/// kind (`Acquired`, `Renewed`, `Lost`, `Released`, `AcquireFailed`), each with the
/// fields of its kind only. `kind` is the core's name of the event.
#[pyclass(subclass, frozen, module = "fencepost._core")]
struct Event {
    /// The lock id the event is for.
    #[pyo3(get)]
    lock: u64,
    /// "acquired", "renewed", "lost", "released" or "acquire_failed".
    #[pyo3(get)]
    kind: &'static str,
}

/// The lock is held: `token` is its fencing token, `valid_until_ns` the monotonic
/// instant until which the holder may believe it holds the lease, `previous` how the
/// previous holder ended ("released", "expired", "none" or "unknown"), `owner_id` the
/// acquisition's owner id (32 lowercase hex digits, the value in the server's lock key).
#[pyclass(extends = Event, frozen, module = "fencepost._core")]
struct Acquired {
    #[pyo3(get)]
    token: u64,
    #[pyo3(get)]
    valid_until_ns: u64,
    #[pyo3(get)]
    previous: &'static str,
    owner: Option<OwnerId>,
}

#[pymethods]
impl Acquired {
    /// The owner id of the acquisition granted (formatted on first read; "" if the
    /// machine no longer knew the lock when the event was polled).
    #[getter]
    fn owner_id(&self) -> String {
        self.owner.map(|o| o.to_string()).unwrap_or_default()
    }
}

/// A renewal was confirmed: the lease is valid until `valid_until_ns`.
#[pyclass(extends = Event, frozen, module = "fencepost._core")]
struct Renewed {
    #[pyo3(get)]
    valid_until_ns: u64,
}

/// The lease was lost; `reason` is one of `LOST_REASONS` (never "closed": hosts report
/// that one themselves).
#[pyclass(extends = Event, frozen, module = "fencepost._core")]
struct Lost {
    #[pyo3(get)]
    reason: &'static str,
}

/// The lock was released (or its acquisition cancelled).
#[pyclass(extends = Event, frozen, module = "fencepost._core")]
struct Released {}

/// Acquiring gave up: `reason` "timeout" (`message`: the last error seen, or None when
/// the lock was simply held by another owner) or "protocol" (`message`: the protocol
/// error).
#[pyclass(extends = Event, frozen, module = "fencepost._core")]
struct AcquireFailed {
    #[pyo3(get)]
    reason: &'static str,
    #[pyo3(get)]
    message: Option<String>,
}

#[pymethods]
impl Event {
    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let base = slf.get();
        let class = slf.get_type().name()?.to_string();
        let fields = if let Ok(e) = slf.cast::<Acquired>() {
            let e = e.get();
            format!(
                ", token={}, valid_until_ns={}, previous={:?}",
                e.token, e.valid_until_ns, e.previous
            )
        } else if let Ok(e) = slf.cast::<Renewed>() {
            format!(", valid_until_ns={}", e.get().valid_until_ns)
        } else if let Ok(e) = slf.cast::<Lost>() {
            format!(", reason={:?}", e.get().reason)
        } else if let Ok(e) = slf.cast::<AcquireFailed>() {
            let e = e.get();
            format!(", reason={:?}, message={:?}", e.reason, e.message)
        } else {
            String::new()
        };
        Ok(format!("{class}(lock={}{fields})", base.lock))
    }
}

/// The Python object of one core event: an instance of its kind's class.
/// `owner`: the lock's owner id, given to an `Acquired` event.
fn event(
    py: Python<'_>,
    lock: LockId,
    owner: Option<OwnerId>,
    event: CoreEvent,
) -> PyResult<Py<PyAny>> {
    fn new<T: pyo3::PyClass<BaseType = Event>>(
        py: Python<'_>,
        base: PyClassInitializer<Event>,
        fields: T,
    ) -> PyResult<Py<PyAny>> {
        Ok(Py::new(py, base.add_subclass(fields))?.into_any())
    }
    let base = PyClassInitializer::from(Event {
        lock: lock.0,
        kind: event.kind(),
    });
    match event {
        CoreEvent::Acquired {
            token,
            valid_until,
            previous,
        } => {
            let (token, valid_until_ns) = (token.get(), valid_until.as_nanos());
            new(
                py,
                base,
                Acquired {
                    token,
                    valid_until_ns,
                    previous: previous.as_str(),
                    owner,
                },
            )
        }
        CoreEvent::Renewed { valid_until } => {
            let valid_until_ns = valid_until.as_nanos();
            new(py, base, Renewed { valid_until_ns })
        }
        CoreEvent::Lost { reason } => new(
            py,
            base,
            Lost {
                reason: reason.as_str(),
            },
        ),
        CoreEvent::Released => new(py, base, Released {}),
        CoreEvent::AcquireFailed { reason } => {
            let kind = reason.kind();
            let message = match reason {
                AcquireFailedReason::Timeout { last_error } => last_error,
                AcquireFailedReason::Protocol { error } => Some(error.to_string()),
            };
            new(
                py,
                base,
                AcquireFailed {
                    reason: kind,
                    message,
                },
            )
        }
    }
}

// ---- Machine ----------------------------------------------------------------------------

/// The sans-IO lock machine for a Redis backend: many locks, no I/O, no clock.
///
/// Every method taking `now_ns` wants `time.monotonic_ns()`; a value earlier than one
/// given before raises `ClockError`. After every input drain `poll()`.
#[pyclass(module = "fencepost._core")]
struct Machine {
    inner: CoreMachine,
}

impl Machine {
    fn input(&mut self, py: Python<'_>, result: Result<(), UsageError>) -> PyResult<()> {
        result.map_err(|e| usage_error(py, e))
    }
}

#[pymethods]
impl Machine {
    /// A machine for `backend`, a settings dict (default `{"kind": "redis"}`):
    ///
    /// * `{"kind": "redis", "key_prefix": "fencepost:", "fair": False}`
    /// * `{"kind": "postgres", "mode": "lease" | "session", "lease_table":
    ///   "fencepost_leases", "token_table": "fencepost_tokens", "namespace": "fencepost"}`
    ///
    /// Settings left out take the core's defaults. `key_prefix=` alone is the older
    /// spelling of a Redis backend with that prefix. `seed` makes owner ids and jitter
    /// deterministic (tests only); without it the machine seeds from the operating
    /// system.
    ///
    /// Errors: `ConfigError` for an unknown kind or setting, a value of the wrong type,
    /// a table name that is not a plain SQL identifier, both `backend` and `key_prefix`,
    /// or a bad seed; `FencepostError` when the OS has no secure randomness.
    #[new]
    #[pyo3(signature = (backend = None, seed = None, *, key_prefix = None))]
    fn new(
        py: Python<'_>,
        backend: Option<&Bound<'_, PyAny>>,
        seed: Option<&Bound<'_, PyAny>>,
        key_prefix: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let backend = backend_from_args(py, backend, key_prefix)?;
        let inner = match seed {
            Some(seed) if !seed.is_none() => {
                CoreMachine::with_seed(backend, arg_u64(seed, "seed")?)
            }
            _ => CoreMachine::new(backend)
                .map_err(|e| fp_error(py, "FencepostError", e.to_string(), None))?,
        };
        Ok(Machine { inner })
    }

    /// The backend this machine phrases requests for: "redis", "postgres" or "etcd".
    #[getter]
    fn backend_kind(&self) -> &'static str {
        self.inner.backend().name()
    }

    /// Starts acquiring `name`; returns the new lock id (int). `options` is a dict of
    /// the core's lock options, durations in integer nanoseconds; keys left out take
    /// the core's defaults: `ttl` (30 s), `purpose` ("efficiency" or "correctness"),
    /// `accept_failover_risk`, `acquire_timeout` (None waits forever, 0 tries once),
    /// `retry_base`, `retry_max`, `renew_every` (None: every ttl/3), `auto_renew`,
    /// `drift_factor`, `clock_margin`, `token_floor` (None, or the lowest token a grant
    /// may carry: an int in 1 ..= 2**63 - 1; refused on etcd), `min_replicas` (0, or the
    /// replicas whose `WAIT` must confirm each grant and renewal; Redis only),
    /// `replica_timeout` (each `WAIT`'s bound, 100 ms). A [`PreparedOptions`] made from
    /// such a dict may stand in for it (read once, for a lock acquired many times).
    ///
    /// Errors: `ConfigError` naming the bad option (an unknown key, a wrong type, or out
    /// of the range the core accepts), or an unsafe purpose; `ClockError`.
    fn acquire(
        &mut self,
        py: Python<'_>,
        now_ns: &Bound<'_, PyAny>,
        name: &Bound<'_, PyAny>,
        options: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let now = instant(now_ns, "now_ns")?;
        let name = arg_str(name, "name")?;
        let options = match options.cast::<PreparedOptions>() {
            Ok(prepared) => prepared.get().options.clone(),
            Err(_) => lock_options(options)?,
        };
        self.inner
            .acquire(now, &name, options)
            .map(|id| id.0)
            .map_err(|e| usage_error(py, e))
    }

    /// Releases `lock`, or cancels its acquisition. Finished locks that still have
    /// requests in flight ignore it.
    ///
    /// Errors: `ConfigError` for an unknown lock id; `ClockError`.
    fn release(
        &mut self,
        py: Python<'_>,
        now_ns: &Bound<'_, PyAny>,
        lock: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (now, lock) = (instant(now_ns, "now_ns")?, lock_id(lock)?);
        let result = self.inner.release(now, lock);
        self.input(py, result)
    }

    /// Renews `lock` now if it is held (a manual extend); its outcome is the lock's
    /// next `Renewed` or `Lost` event. A lock not held ignores it.
    ///
    /// Errors: `ConfigError` for an unknown lock id; `ClockError`.
    fn extend(
        &mut self,
        py: Python<'_>,
        now_ns: &Bound<'_, PyAny>,
        lock: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (now, lock) = (instant(now_ns, "now_ns")?, lock_id(lock)?);
        let result = self.inner.extend(now, lock);
        self.input(py, result)
    }

    /// The server's reply to request `request_id`.
    ///
    /// * Redis machines: what the Redis client returned: int, bytes, str, None, bool,
    ///   list/tuple (nested), or an exception instance for an error reply (its `str()`
    ///   must start with the error code, e.g. "LOADING …"). A blocking pop's reply is
    ///   None (timeout) or `[key, value]`.
    /// * PostgreSQL machines: the rows the statement returned, a list of tuples or lists
    ///   of None, bool, int and str (empty when it matched nothing), or a
    ///   `SqlErrorReply(sqlstate, message)` when the server refused it.
    /// * etcd machines: the JSON document the v3 JSON gateway answered (str or UTF-8
    ///   bytes), error documents (`{"error", "message", "code"}`) included; for a watch,
    ///   the first response line with `events`, or `"{}"` at its timeout.
    /// * ZooKeeper machines: the adapter's JSON document for the call.
    /// * Kubernetes machines: the API server's response body (a Lease, or a `Status`
    ///   document), str or UTF-8 bytes, whatever the HTTP status.
    ///
    /// Values of other types are read as a protocol error. Unknown ids are ignored.
    ///
    /// Errors: `ConfigError` for a non-int id; `ClockError`.
    fn reply(
        &mut self,
        py: Python<'_>,
        now_ns: &Bound<'_, PyAny>,
        request_id: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (now, request) = (instant(now_ns, "now_ns")?, self::request_id(request_id)?);
        let reply = match self.inner.backend() {
            Backend::Postgres(_) => Reply::Sql(to_sql_reply(value)),
            Backend::Etcd(_) => Reply::Etcd(etcd_reply_text(value)),
            Backend::ZooKeeper(_) => Reply::ZooKeeper(etcd_reply_text(value)),
            Backend::Kubernetes(_) => Reply::Kubernetes(etcd_reply_text(value)),
            _ => Reply::Redis(to_redis_value(value, 0)),
        };
        let result = self.inner.handle_input(fencepost_core::Input::Reply {
            now,
            request,
            reply,
        });
        self.input(py, result)
    }

    /// Request `request_id` failed in transport (connection error, client timeout,
    /// cancelled at its deadline): it may or may not have reached the server.
    ///
    /// Errors: `ConfigError` for a non-int id or non-str message; `ClockError`.
    fn transport_error(
        &mut self,
        py: Python<'_>,
        now_ns: &Bound<'_, PyAny>,
        request_id: &Bound<'_, PyAny>,
        message: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (now, request) = (instant(now_ns, "now_ns")?, self::request_id(request_id)?);
        let message = arg_str(message, "message")?;
        let result = self
            .inner
            .handle_input(fencepost_core::Input::TransportError {
                now,
                request,
                message,
            });
        self.input(py, result)
    }

    /// Time passed: fires due timers. Early and spurious calls are harmless.
    ///
    /// Errors: `ClockError`.
    fn timeout(&mut self, py: Python<'_>, now_ns: &Bound<'_, PyAny>) -> PyResult<()> {
        let now = instant(now_ns, "now_ns")?;
        let result = self
            .inner
            .handle_input(fencepost_core::Input::Timeout { now });
        self.input(py, result)
    }

    /// Drains every pending output: returns `(outputs, next_timeout_ns)` where outputs
    /// is a list of `Request` and `Event` in order, and `next_timeout_ns` is the
    /// monotonic instant at which to call `timeout`, or None when no timer is set.
    fn poll(&mut self, py: Python<'_>) -> PyResult<(Vec<Py<PyAny>>, Option<u64>)> {
        let mut outputs = Vec::new();
        loop {
            match self.inner.poll_output() {
                Output::Request(req) => {
                    let request = Request {
                        id: req.id.0,
                        lock: req.lock.0,
                        operation: req.operation.as_str(),
                        deadline_ns: req.deadline.as_nanos(),
                        body: req.body,
                    };
                    outputs.push(Py::new(py, request)?.into_any());
                }
                Output::Event { lock, event: e } => {
                    let owner = match e {
                        CoreEvent::Acquired { .. } => self.inner.owner(lock),
                        _ => None,
                    };
                    outputs.push(event(py, lock, owner, e)?)
                }
                Output::Timeout(at) => return Ok((outputs, Some(at.as_nanos()))),
                Output::Idle => return Ok((outputs, None)),
            }
        }
    }

    /// Starts observing with `options`, a dict of the core's observation options (keys
    /// left out take the defaults: `events` True, `warnings` True,
    /// `late_renewal_fraction` 1/3, `held_long_ttls` 10, `hot_lock_attempts` 10,
    /// `hot_lock_waiters` 10, `unreachable_every` 30 s in integer nanoseconds), or
    /// stops with None. Until it is called the machine builds no observation.
    ///
    /// Errors: `ConfigError` naming the bad option.
    fn observe(&mut self, py: Python<'_>, options: &Bound<'_, PyAny>) -> PyResult<()> {
        let options = observe_options(options)?;
        self.inner.observe(options).map_err(|e| usage_error(py, e))
    }

    /// Drains the observations: a list of `(lock_id, lock_name, event, level, fields,
    /// message)` tuples, oldest first. `event` is the core's name (`"acquired"`, …,
    /// `"server_unreachable"`), `level` `"debug"`, `"info"` or `"warning"`, `fields` a
    /// dict (durations in float seconds, tokens and counts int, the rest str).
    fn observations(&mut self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        let mut out = Vec::new();
        while let Some(o) = self.inner.poll_observation() {
            out.push(observed(py, o)?);
        }
        Ok(out)
    }

    /// How many observations wait for [`observations`](Self::observations): a driver
    /// skips the drain, and the list it builds, when there are none.
    fn observations_pending(&self) -> usize {
        self.inner.observations_pending()
    }

    /// The owner id of `lock` (32 lowercase hex digits, the value in the lock key), or
    /// None once the machine has forgotten the lock.
    fn owner(&self, lock: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
        Ok(self.inner.owner(lock_id(lock)?).map(|o| o.to_string()))
    }

    /// The validity deadline of `lock` (monotonic ns) while it is held, else None.
    fn valid_until_ns(&self, lock: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
        Ok(self
            .inner
            .valid_until(lock_id(lock)?)
            .map(Instant::as_nanos))
    }

    /// How many locks the machine tracks (pending, held, or finished with requests in
    /// flight). Zero means the machine has nothing left to do.
    fn lock_count(&self) -> usize {
        self.inner.lock_count()
    }

    /// How many requests await a reply or transport error.
    fn requests_in_flight(&self) -> usize {
        self.inner.requests_in_flight()
    }
}

/// Checks a lock's name and options exactly as `Machine.acquire` would, without a
/// machine or any I/O. `options` as for `Machine.acquire` (a dict, nanoseconds);
/// `backend` is the settings dict of `Machine(backend)` (default Redis), which decides
/// whether a correctness lock is safe.
///
/// Errors: `ConfigError` naming the bad option; the message comes from the core.
#[pyfunction]
#[pyo3(signature = (name, options, *, backend = None))]
fn check_lock_options(
    py: Python<'_>,
    name: &Bound<'_, PyAny>,
    options: &Bound<'_, PyAny>,
    backend: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let backend = backend_from_args(py, backend, None)?;
    let name = arg_str(name, "name")?;
    let options = lock_options(options)?;
    backend
        .check_acquire(&name, &options)
        .map_err(|e| usage_error(py, e))
}

/// Checks observation options (a dict, see `Machine.observe`) without a machine.
///
/// Errors: `ConfigError` naming the bad option.
#[pyfunction]
fn check_observe_options(options: &Bound<'_, PyAny>) -> PyResult<()> {
    observe_options(options).map(|_| ())
}

// ---- MemoryRedis --------------------------------------------------------------------

/// The core's in-memory Redis (`fencepost_core::memory::MemoryRedis`): executes
/// fencepost's scripts with TTLs on injected monotonic time (`now_ns`). Not
/// thread-safe by itself: the Python `MemoryServer` wraps it in a lock.
#[pyclass(module = "fencepost._core")]
struct MemoryRedis {
    inner: fencepost_core::memory::MemoryRedis,
}

#[derive(FromPyObject)]
enum AnyCommand<'py> {
    Request(Bound<'py, Request>),
    Command(Bound<'py, Command>),
    BlockingPop(Bound<'py, BlockingPop>),
}

#[pymethods]
impl MemoryRedis {
    /// An empty key space.
    #[new]
    fn new() -> Self {
        MemoryRedis {
            inner: fencepost_core::memory::MemoryRedis::new(),
        }
    }

    /// Runs a `Request`, `Command` or `BlockingPop` at `now_ns` and returns what redis-py
    /// would: int, str, None, list, or (returned, not raised) a `RedisErrorReply` for an
    /// error reply. A blocking pop does not block here: it pops (`[key, value]`) or
    /// returns None at once; the caller parks itself until a pop would yield or the
    /// timeout passes (`fencepost.MemoryServer` does). A SQL request gets an error reply.
    ///
    /// Errors: `ConfigError` for a `now_ns` that is not an int.
    fn execute(
        &mut self,
        py: Python<'_>,
        now_ns: &Bound<'_, PyAny>,
        request: AnyCommand<'_>,
    ) -> PyResult<Py<PyAny>> {
        let now = instant(now_ns, "now_ns")?;
        let reply = match request {
            AnyCommand::Request(r) => self.inner.execute(now, &r.get().body),
            AnyCommand::Command(c) => Reply::Redis(self.inner.eval(now, &c.get().cmd)),
            AnyCommand::BlockingPop(b) => self
                .inner
                .execute(now, &RequestBody::RedisBlpop(b.get().pop.clone())),
        };
        match reply {
            Reply::Redis(value) => from_redis_value(py, &value),
            other => from_redis_value(
                py,
                &RedisValue::Error(format!("ERR not a Redis reply: {other:?}")),
            ),
        }
    }

    /// `GET key` at `now_ns` (expired keys are gone): str or None.
    fn get(&self, now_ns: &Bound<'_, PyAny>, key: &str) -> PyResult<Option<String>> {
        Ok(self
            .inner
            .get(instant(now_ns, "now_ns")?, key)
            .map(str::to_owned))
    }

    /// `PTTL key` in ms at `now_ns`: None when missing, -1 when it has no expiry.
    fn pttl(&self, now_ns: &Bound<'_, PyAny>, key: &str) -> PyResult<Option<i64>> {
        Ok(self.inner.pttl(instant(now_ns, "now_ns")?, key))
    }

    /// `DEL key`; True if it existed.
    fn delete(&mut self, key: &str) -> bool {
        self.inner.delete(key)
    }

    /// Forgets every key, as a restart without persistence does.
    fn flush(&mut self) {
        self.inner.flush()
    }
}

// ---- fence --------------------------------------------------------------------------

/// An in-memory fence: keeps the highest fencing token accepted per resource, with the
/// owner id that wrote with it, and refuses lower ones. The highest token passes again
/// from its recorded owner (owner-bound rule, `check(..., owner_id)`), or from anyone
/// (token-only rule, `check(resource, token)`: weaker, a token granted twice passes).
#[pyclass(module = "fencepost._core")]
struct Fence {
    inner: fence::Fence,
}

#[pymethods]
impl Fence {
    /// An empty fence.
    #[new]
    fn new() -> Self {
        Fence {
            inner: fence::Fence::new(),
        }
    }

    /// Accepts a write to `resource` carrying `token` and remembers the token; with
    /// `owner_id` (the lease's, 32 hex digits) under the owner-bound rule: the token is
    /// recorded with the owner, and the same token from another owner is refused.
    ///
    /// Errors: `StaleToken` (attributes resource, token, highest, reason) when a higher
    /// token was accepted before (`reason` "superseded") or, with `owner_id`, the same
    /// token from another owner ("duplicate_grant", after a `DuplicateGrantWarning`);
    /// `ConfigError` for a resource that is not a str, a token that is not an int >= 1
    /// (0 is no lease's token) or an owner id that is not 32 hex digits.
    #[pyo3(signature = (resource, token, owner_id = None))]
    fn check(
        &mut self,
        py: Python<'_>,
        resource: &Bound<'_, PyAny>,
        token: &Bound<'_, PyAny>,
        owner_id: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let resource = arg_str(resource, "resource")?;
        let token = arg_token(token)?;
        let checked = match arg_owner(py, owner_id)? {
            Some(owner) => self.inner.check_owned(&resource, token, owner),
            None => self.inner.check(&resource, token),
        };
        checked.map_err(|e| stale_token_error(py, e))
    }

    /// The owner id recorded with the highest token of `resource`, or None (nothing
    /// accepted, or the highest token came from a token-only write).
    ///
    /// Errors: `ConfigError` for a resource that is not a str.
    fn owner(&self, resource: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
        let resource = arg_str(resource, "resource")?;
        Ok(self.inner.owner(&resource).map(|o| o.to_string()))
    }

    /// The highest token accepted for `resource`, or None.
    ///
    /// Errors: `ConfigError` for a resource that is not a str.
    fn highest(&self, resource: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
        let resource = arg_str(resource, "resource")?;
        Ok(self.inner.highest(&resource).map(FencingToken::get))
    }
}

/// The SQL text of a fenced conditional update. Token-only (no `owner_column`; weaker:
/// a token granted twice passes): `UPDATE "table" SET "c" = …, "token_column" = <token>
/// WHERE "id_column" = <id> AND "token_column" <= <token>`. Owner-bound (`owner_column`
/// given): also sets `"owner_column" = <owner>` and the condition is `("token_column" <
/// <token> OR ("token_column" = <token> AND "owner_column" = <owner>))`. With style
/// "pyformat" the parameters are `%(id)s`, `%(token)s`, `%(owner)s` and `%(<column>)s`
/// (the default); with "dollar", `$1` (id), `$2` (token), then `$3` (owner, owner-bound
/// only) and the columns in order. Zero rows updated means a refusal (or no such row).
///
/// Errors: `ConfigError` for a name that is not a plain SQL identifier, a column that
/// the guard sets itself or a bad style.
#[pyfunction]
#[pyo3(
    signature = (table, id_column, token_column, columns, style = None, owner_column = None),
    text_signature = "(table, id_column, token_column, columns, style='pyformat', owner_column=None)"
)]
fn sql_fenced_update(
    py: Python<'_>,
    table: &Bound<'_, PyAny>,
    id_column: &Bound<'_, PyAny>,
    token_column: &Bound<'_, PyAny>,
    columns: &Bound<'_, PyAny>,
    style: Option<&Bound<'_, PyAny>>,
    owner_column: Option<&Bound<'_, PyAny>>,
) -> PyResult<String> {
    let owner_column = owner_column
        .filter(|o| !o.is_none())
        .map(|o| arg_str(o, "owner_column"))
        .transpose()?;
    let table = arg_str(table, "table")?;
    let id_column = arg_str(id_column, "id_column")?;
    let token_column = arg_str(token_column, "token_column")?;
    if columns.is_instance_of::<PyString>() {
        return Err(config_error(
            py,
            format!("columns must be a list of str, got {}", describe(columns)),
        ));
    }
    let columns: Vec<String> = columns
        .try_iter()
        .map_err(|_| {
            config_error(
                py,
                format!("columns must be a list of str, got {}", describe(columns)),
            )
        })?
        .map(|item| item.and_then(|item| arg_str(&item, "columns[]")))
        .collect::<PyResult<_>>()?;
    let style = match style.map(|s| arg_str(s, "style")).transpose()?.as_deref() {
        None | Some("pyformat") => ParamStyle::Pyformat,
        Some("dollar") => ParamStyle::Dollar,
        Some(other) => {
            return Err(config_error(
                py,
                format!("style must be 'pyformat' or 'dollar', got {other:?}"),
            ))
        }
    };
    let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
    match owner_column {
        Some(owner_column) => fence::sql_fenced_update_owned(
            &table,
            &id_column,
            &token_column,
            &owner_column,
            &columns,
            style,
        ),
        None => fence::sql_fenced_update(&table, &id_column, &token_column, &columns, style),
    }
    .map_err(|e| config_error(py, e.to_string()))
}

/// The fenced Redis SET as a `Command`: writes `value` to `data_key` unless `token` is
/// lower than the highest token stored at `fence_key`; with `owner_id` (the lease's, 32
/// hex digits) under the owner-bound rule, also unless the same token was recorded with
/// another owner (without it, token-only: weaker). `value` is a str or UTF-8 bytes.
///
/// Errors: `ConfigError` naming the argument: keys that are not str or are one key, a
/// value that is neither str nor UTF-8 bytes, a token that is not an int >= 1, an owner
/// id that is not 32 hex digits.
#[pyfunction]
#[pyo3(signature = (data_key, fence_key, token, value, owner_id = None))]
fn redis_fenced_set(
    py: Python<'_>,
    data_key: &Bound<'_, PyAny>,
    fence_key: &Bound<'_, PyAny>,
    token: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
    owner_id: Option<&Bound<'_, PyAny>>,
) -> PyResult<Command> {
    let data_key = arg_str(data_key, "data_key")?;
    let fence_key = arg_str(fence_key, "fence_key")?;
    fence::check_redis_fenced_set_keys(&data_key, &fence_key)
        .map_err(|e| config_error(py, e.render(Host::Python)))?;
    let token = arg_token(token)?;
    let value = arg_text(value, "value")?;
    let cmd = match arg_owner(py, owner_id)? {
        Some(owner) => fence::redis_fenced_set_owned(&data_key, &fence_key, token, owner, &value),
        None => fence::redis_fenced_set(&data_key, &fence_key, token, &value),
    };
    Ok(Command { cmd })
}

/// Reads the reply of `redis_fenced_set` for `resource`: returns None when the write
/// was accepted.
///
/// Errors: `StaleToken` when refused (`reason` "superseded" or "duplicate_grant", the
/// latter after a `DuplicateGrantWarning`); `ProtocolError` for a reply of another
/// shape (including an error reply).
#[pyfunction]
fn read_redis_fenced_set(
    py: Python<'_>,
    resource: &Bound<'_, PyAny>,
    token: &Bound<'_, PyAny>,
    reply: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let resource = arg_str(resource, "resource")?;
    let token = FencingToken(arg_u64(token, "token")?);
    match fence::read_redis_fenced_set(&resource, token, &to_redis_value(reply, 0)) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(stale)) => Err(stale_token_error(py, stale)),
        Err(e) => Err(protocol_error(py, &e)),
    }
}

/// The operator query "is lock `name` locked?" as a `Command` (script "is_locked").
/// Read its reply with `read_redis_flag`: True while a lease (or a fair reservation)
/// lives.
///
/// Errors: `ConfigError` for arguments that are not str.
#[pyfunction]
fn redis_is_locked(key_prefix: &Bound<'_, PyAny>, name: &Bound<'_, PyAny>) -> PyResult<Command> {
    let settings = RedisSettings {
        key_prefix: arg_str(key_prefix, "key_prefix")?,
        ..RedisSettings::default()
    };
    Ok(Command {
        cmd: settings.is_locked(&arg_str(name, "name")?),
    })
}

/// The operator reset of lock `name` as a `Command` (script "force_release"): frees
/// the lock whoever holds it, keeps the token counter and, with `fair`, grants the lock
/// to the first live waiter as a release does. Read its reply with `read_redis_flag`:
/// True if a lease was freed.
///
/// Errors: `ConfigError` for arguments of the wrong type.
#[pyfunction]
fn redis_force_release(
    key_prefix: &Bound<'_, PyAny>,
    name: &Bound<'_, PyAny>,
    fair: bool,
) -> PyResult<Command> {
    let settings = RedisSettings {
        key_prefix: arg_str(key_prefix, "key_prefix")?,
        fair,
        cluster: false,
    };
    Ok(Command {
        cmd: settings.force_release(&arg_str(name, "name")?),
    })
}

/// Reads the reply of `redis_is_locked` or `redis_force_release`: 1 → True, 0 → False.
///
/// Errors: `ProtocolError` for an error reply or any other reply.
#[pyfunction]
fn read_redis_flag(py: Python<'_>, reply: &Bound<'_, PyAny>) -> PyResult<bool> {
    redis::read_redis_flag(&to_redis_value(reply, 0)).map_err(|e| protocol_error(py, &e))
}

/// The operator query "who holds lock `name`?" on Redis as a `Command` (script
/// "inspect"): owner, time left, token and metadata in one atomic read, with `fair` the
/// queue length too. Read its reply with `read_redis_inspect`.
///
/// Errors: `ConfigError` for arguments of the wrong type.
#[pyfunction]
fn redis_inspect(
    key_prefix: &Bound<'_, PyAny>,
    name: &Bound<'_, PyAny>,
    fair: bool,
) -> PyResult<Command> {
    let settings = RedisSettings {
        key_prefix: arg_str(key_prefix, "key_prefix")?,
        fair,
        cluster: false,
    };
    Ok(Command {
        cmd: settings.inspect(&arg_str(name, "name")?),
    })
}

/// One step of the operator listing of the locks whose names start with `prefix`, from
/// `cursor` ("0" first), as a `Command` (script "list": one bounded `SCAN`, never
/// `KEYS`). Read its reply with `read_redis_list`; at most `REDIS_LIST_STEPS` steps.
///
/// Errors: `ConfigError` for arguments of the wrong type.
#[pyfunction]
fn redis_list_step(
    key_prefix: &Bound<'_, PyAny>,
    prefix: &Bound<'_, PyAny>,
    cursor: &Bound<'_, PyAny>,
    fair: bool,
) -> PyResult<Command> {
    let settings = RedisSettings {
        key_prefix: arg_str(key_prefix, "key_prefix")?,
        fair,
        cluster: false,
    };
    Ok(Command {
        cmd: settings.list_step(&arg_str(prefix, "prefix")?, &arg_str(cursor, "cursor")?),
    })
}

/// A holder as the dict `fencepost.Holder` is built from: `name`, `owner` (str or
/// None), `token` (int or None), `ttl_left_ns` (int or None), `waiters` (int or None),
/// `metadata` (dict of str or None).
fn holder_dict<'py>(py: Python<'py>, h: &fencepost_core::Holder) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", &h.name)?;
    d.set_item("owner", h.owner.as_deref())?;
    d.set_item("token", h.token.map(|t| t.0))?;
    d.set_item(
        "ttl_left_ns",
        h.ttl_left
            .map(|t| u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)),
    )?;
    d.set_item("waiters", h.waiters)?;
    d.set_item("metadata", h.metadata.as_ref())?;
    Ok(d)
}

/// Reads the reply of `redis_inspect`: the holder's dict (see `Holder`), or None when
/// nobody holds lock `name`.
///
/// Errors: `ProtocolError` for an error reply or a reply of another shape.
#[pyfunction]
fn read_redis_inspect<'py>(
    py: Python<'py>,
    name: &Bound<'py, PyAny>,
    reply: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let name = arg_str(name, "name")?;
    match redis::read_redis_inspect(&name, &to_redis_value(reply, 0)) {
        Ok(Some(h)) => holder_dict(py, &h).map(Some),
        Ok(None) => Ok(None),
        Err(e) => Err(protocol_error(py, &e)),
    }
}

/// Reads the reply of one `redis_list_step`: `(next_cursor, holders)`, `next_cursor`
/// None once the scan is complete, `holders` the dicts of the locks found in this step.
///
/// Errors: `ProtocolError` for an error reply or a reply of another shape.
#[pyfunction]
fn read_redis_list<'py>(
    py: Python<'py>,
    key_prefix: &Bound<'py, PyAny>,
    reply: &Bound<'py, PyAny>,
) -> PyResult<(Option<String>, Vec<Bound<'py, PyDict>>)> {
    let settings = RedisSettings {
        key_prefix: arg_str(key_prefix, "key_prefix")?,
        ..RedisSettings::default()
    };
    match redis::read_redis_list(&settings, &to_redis_value(reply, 0)) {
        Ok((next, holders)) => Ok((
            next,
            holders
                .iter()
                .map(|h| holder_dict(py, h))
                .collect::<PyResult<_>>()?,
        )),
        Err(e) => Err(protocol_error(py, &e)),
    }
}

/// The operator query "who holds lock `name`?" on etcd: a range read of the key with
/// the lowest create revision under the lock's prefix. Read it with `read_etcd_holder`.
///
/// Errors: `ConfigError` for arguments that are not str.
#[pyfunction]
fn etcd_holder_range(key_prefix: &Bound<'_, PyAny>, name: &Bound<'_, PyAny>) -> PyResult<EtcdCall> {
    let settings = EtcdSettings {
        key_prefix: arg_str(key_prefix, "key_prefix")?,
        ..EtcdSettings::default()
    };
    Ok(EtcdCall {
        req: settings.holder_range(&arg_str(name, "name")?),
    })
}

/// Reads the reply of `etcd_holder_range`: `(token, lease_id)` of the holder, or None
/// when nobody holds the lock.
///
/// Errors: `ProtocolError` for an error reply or a reply of another shape.
#[pyfunction]
fn read_etcd_holder(py: Python<'_>, reply: &Bound<'_, PyAny>) -> PyResult<Option<(u64, i64)>> {
    match etcd::read_etcd_holder(&etcd_reply_text(reply)) {
        Ok(holder) => Ok(holder.map(|h| (h.token.get(), h.lease))),
        Err(e) => Err(protocol_error(py, &e)),
    }
}

/// The election query "who leads `name`?": the key with the lowest create revision
/// under the election's prefix, with its value (etcd's `Election.Leader`). Read it with
/// `read_etcd_leader`.
///
/// Errors: `ConfigError` for arguments that are not str.
#[pyfunction]
fn etcd_leader_range(key_prefix: &Bound<'_, PyAny>, name: &Bound<'_, PyAny>) -> PyResult<EtcdCall> {
    let settings = EtcdSettings {
        key_prefix: arg_str(key_prefix, "key_prefix")?,
        ..EtcdSettings::default()
    };
    Ok(EtcdCall {
        req: settings.leader_range(&arg_str(name, "name")?),
    })
}

/// Reads the reply of `etcd_leader_range`: `(token, lease_id, value)` of the leader
/// (`value` "" when its key has none), or None when nobody leads.
///
/// Errors: `ProtocolError` for an error reply or a reply of another shape.
#[pyfunction]
fn read_etcd_leader(
    py: Python<'_>,
    reply: &Bound<'_, PyAny>,
) -> PyResult<Option<(u64, i64, String)>> {
    match etcd::read_etcd_leader(&etcd_reply_text(reply)) {
        Ok(leader) => Ok(leader.map(|(h, value)| (h.token.get(), h.lease, value))),
        Err(e) => Err(protocol_error(py, &e)),
    }
}

/// A leader's publication of `value` in its own key, on its lease, while its key's
/// create revision is still `token` (etcd's `Election.Proclaim`). Read the reply with
/// `read_etcd_fenced_txn`.
///
/// Errors: `ConfigError` naming an argument of the wrong type.
#[pyfunction]
fn etcd_proclaim(
    py: Python<'_>,
    key_prefix: &Bound<'_, PyAny>,
    name: &Bound<'_, PyAny>,
    owner_id: &Bound<'_, PyAny>,
    token: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
) -> PyResult<EtcdCall> {
    let settings = EtcdSettings {
        key_prefix: arg_str(key_prefix, "key_prefix")?,
        ..EtcdSettings::default()
    };
    let name = arg_str(name, "name")?;
    let owner = owner_from_hex(py, owner_id)?;
    Ok(EtcdCall {
        req: settings.proclaim(&name, &owner, arg_token(token)?, &arg_str(value, "value")?),
    })
}

/// The revoke of etcd lease `lease_id` (the operator's reset of the lock that lease
/// holds: etcd deletes its key). Read it with `read_etcd_revoke`.
#[pyfunction]
fn etcd_lease_revoke(lease_id: i64) -> EtcdCall {
    EtcdCall {
        req: EtcdRequest::LeaseRevoke { id: lease_id },
    }
}

/// Reads the reply of `etcd_lease_revoke`: True when revoked, False when the lease was
/// gone already.
///
/// Errors: `ProtocolError` for another error reply or a reply of another shape.
#[pyfunction]
fn read_etcd_revoke(py: Python<'_>, reply: &Bound<'_, PyAny>) -> PyResult<bool> {
    etcd::read_etcd_revoke(&etcd_reply_text(reply)).map_err(|e| protocol_error(py, &e))
}

/// The operator statement for lock `name` on PostgreSQL: with `force` False, "is it
/// locked?"; with `force` True, the reset of a live lease row (owner and expiry
/// cleared, the token kept). Both report a session holding the name's advisory lock.
/// Read the reply with `read_lock_state`.
///
/// Errors: `ConfigError` for a name that is not a str, or a table name that is not a
/// plain SQL identifier.
#[pyfunction]
#[pyo3(signature = (name, *, force, lease_table = None, token_table = None, namespace = None))]
fn lock_state_statement(
    py: Python<'_>,
    name: &Bound<'_, PyAny>,
    force: bool,
    lease_table: Option<&Bound<'_, PyAny>>,
    token_table: Option<&Bound<'_, PyAny>>,
    namespace: Option<&Bound<'_, PyAny>>,
) -> PyResult<Sql> {
    let settings = pg_settings(py, lease_table, token_table, namespace)?;
    Ok(Sql {
        stmt: pg::lock_state_statement(&settings, &arg_str(name, "name")?, force),
    })
}

/// Reads the reply of `lock_state_statement`: `(lease, advisory_pid)`: whether a live
/// lease row was found (or freed), and the server pid of a session holding the name's
/// advisory lock (None when none does).
///
/// Errors: `ProtocolError` for a server error (a missing table says to run the
/// migration) or rows of another shape.
#[pyfunction]
fn read_lock_state(py: Python<'_>, reply: &Bound<'_, PyAny>) -> PyResult<(bool, Option<i64>)> {
    match pg::read_lock_state(&to_sql_reply(reply)) {
        Ok(state) => Ok((state.lease, state.advisory_pid)),
        Err(e) => Err(protocol_error(py, &e)),
    }
}

/// The operator query "who holds lock `name`?" on PostgreSQL lease rows: one
/// statement reading the live row's owner, token, milliseconds left (the server's
/// clock) and metadata. Read the reply with `read_pg_holders` (no holder: nobody holds
/// it).
///
/// Errors: `ConfigError` for a name that is not a str, or a table name that is not a
/// plain SQL identifier.
#[pyfunction]
#[pyo3(signature = (name, *, lease_table = None))]
fn pg_inspect_statement(
    py: Python<'_>,
    name: &Bound<'_, PyAny>,
    lease_table: Option<&Bound<'_, PyAny>>,
) -> PyResult<Sql> {
    let settings = pg_settings(py, lease_table, None, None)?;
    Ok(Sql {
        stmt: pg::inspect_statement(&settings, &arg_str(name, "name")?),
    })
}

/// The operator listing on PostgreSQL lease rows: the live rows whose names start with
/// `prefix` (LIKE metacharacters escaped), in name order, at most `limit` (clamped to
/// 1 ..= `PG_LIST_MAX`), in one statement. Read the reply with `read_pg_holders`.
///
/// Errors: `ConfigError` for arguments of the wrong type, or a table name that is not
/// a plain SQL identifier.
#[pyfunction]
#[pyo3(signature = (prefix, limit, *, lease_table = None))]
fn pg_list_statement(
    py: Python<'_>,
    prefix: &Bound<'_, PyAny>,
    limit: u64,
    lease_table: Option<&Bound<'_, PyAny>>,
) -> PyResult<Sql> {
    let settings = pg_settings(py, lease_table, None, None)?;
    Ok(Sql {
        stmt: pg::list_statement(&settings, &arg_str(prefix, "prefix")?, limit),
    })
}

/// Reads the reply of `pg_inspect_statement` or `pg_list_statement`: the holders'
/// dicts (see `Holder`), in the rows' order.
///
/// Errors: `ProtocolError` for a server error (a missing table or metadata column says
/// to run the migration) or rows of another shape.
#[pyfunction]
fn read_pg_holders<'py>(
    py: Python<'py>,
    reply: &Bound<'py, PyAny>,
) -> PyResult<Vec<Bound<'py, PyDict>>> {
    match pg::read_pg_holders(&to_sql_reply(reply)) {
        Ok(holders) => holders.iter().map(|h| holder_dict(py, h)).collect(),
        Err(e) => Err(protocol_error(py, &e)),
    }
}

/// Reads the reply of `etcd_leader_range` as an inspection of lock `name`: `(holder,
/// lease_id)`, the holder's dict (see `Holder`; owner `lease:<hex>`, `ttl_left_ns`
/// None until `read_etcd_time_to_live` says) and its lease id, or None when nobody
/// holds the lock.
///
/// Errors: `ProtocolError` for an error reply or a reply of another shape.
#[pyfunction]
fn read_etcd_inspect<'py>(
    py: Python<'py>,
    name: &Bound<'py, PyAny>,
    reply: &Bound<'py, PyAny>,
) -> PyResult<Option<(Bound<'py, PyDict>, i64)>> {
    let name = arg_str(name, "name")?;
    match etcd::read_etcd_inspect(&name, &etcd_reply_text(reply)) {
        Ok(Some((h, lease))) => Ok(Some((holder_dict(py, &h)?, lease))),
        Ok(None) => Ok(None),
        Err(e) => Err(protocol_error(py, &e)),
    }
}

/// The `LeaseTimeToLive` call of etcd lease `lease_id` (an operator query: the seconds
/// left on it). Read it with `read_etcd_time_to_live`.
#[pyfunction]
fn etcd_lease_time_to_live(lease_id: i64) -> EtcdCall {
    EtcdCall {
        req: EtcdRequest::LeaseTimeToLive { id: lease_id },
    }
}

/// Reads the reply of `etcd_lease_time_to_live`: the nanoseconds left on the lease
/// (whole seconds, as etcd counts them), or None when it is gone.
///
/// Errors: `ProtocolError` for another error reply or a reply of another shape.
#[pyfunction]
fn read_etcd_time_to_live(py: Python<'_>, reply: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
    match etcd::read_etcd_time_to_live(&etcd_reply_text(reply)) {
        Ok(left) => Ok(left.map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))),
        Err(e) => Err(protocol_error(py, &e)),
    }
}

/// One page of the etcd listing of the locks whose names start with `prefix`: a
/// keys-only range of at most `ETCD_LIST_PAGE` keys after key `after` (None for the
/// first page). Read it with `read_etcd_list_page`; at most `ETCD_LIST_PAGES` pages.
///
/// Errors: `ConfigError` for arguments that are not str.
#[pyfunction]
#[pyo3(signature = (key_prefix, prefix, after = None))]
fn etcd_list_page(
    key_prefix: &Bound<'_, PyAny>,
    prefix: &Bound<'_, PyAny>,
    after: Option<&Bound<'_, PyAny>>,
) -> PyResult<EtcdCall> {
    let settings = EtcdSettings {
        key_prefix: arg_str(key_prefix, "key_prefix")?,
        ..EtcdSettings::default()
    };
    let after = after.map(|a| arg_str(a, "after")).transpose()?;
    Ok(EtcdCall {
        req: settings.list_page(&arg_str(prefix, "prefix")?, after.as_deref()),
    })
}

/// Reads the reply of `etcd_list_page` for `prefix`: `(names, after)`, the names
/// starting with `prefix` of the locks of the page's contender keys, in key order, and the key to ask the next page after (None: done).
///
/// Errors: `ProtocolError` for an error reply or a reply of another shape.
#[pyfunction]
fn read_etcd_list_page(
    py: Python<'_>,
    key_prefix: &Bound<'_, PyAny>,
    prefix: &Bound<'_, PyAny>,
    reply: &Bound<'_, PyAny>,
) -> PyResult<(Vec<String>, Option<String>)> {
    let settings = EtcdSettings {
        key_prefix: arg_str(key_prefix, "key_prefix")?,
        ..EtcdSettings::default()
    };
    settings
        .read_list_page(&arg_str(prefix, "prefix")?, &etcd_reply_text(reply))
        .map_err(|e| protocol_error(py, &e))
}

/// Every script fencepost runs on Redis: name → (sha1, source). Names: "acquire",
/// "renew", "release", "fenced_set", "acquire_fair", "release_fair", "is_locked",
/// "force_release", "inspect", "list", "renew_many".
#[pyfunction]
fn redis_scripts(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let scripts = PyDict::new(py);
    for s in RedisScript::ALL {
        scripts.set_item(s.as_str(), (s.sha1(), s.source()))?;
    }
    Ok(scripts)
}

/// The lease key of lock `name` under `key_prefix` (`{prefix}{{name}}:lock`).
///
/// Errors: `ConfigError` for arguments that are not str.
#[pyfunction]
fn lock_key(key_prefix: &Bound<'_, PyAny>, name: &Bound<'_, PyAny>) -> PyResult<String> {
    let settings = RedisSettings {
        key_prefix: arg_str(key_prefix, "key_prefix")?,
        ..RedisSettings::default()
    };
    Ok(settings.lock_key(&arg_str(name, "name")?))
}

/// The fencing-token counter key of lock `name` under `key_prefix`.
///
/// Errors: `ConfigError` for arguments that are not str.
#[pyfunction]
fn token_key(key_prefix: &Bound<'_, PyAny>, name: &Bound<'_, PyAny>) -> PyResult<String> {
    let settings = RedisSettings {
        key_prefix: arg_str(key_prefix, "key_prefix")?,
        ..RedisSettings::default()
    };
    Ok(settings.token_key(&arg_str(name, "name")?))
}

// ---- PostgreSQL ---------------------------------------------------------------------

/// The migration creating the tables fencepost uses (the lease table, whose rows count
/// every mode's tokens, and the token table, a per-name floor under them); idempotent
/// (`CREATE TABLE IF NOT EXISTS`).
/// Run it once before the first lock. Never truncate these tables: tokens must survive.
///
/// Errors: `ConfigError` for a table name that is not a plain SQL identifier
/// (optionally schema-qualified).
#[pyfunction]
#[pyo3(signature = (*, lease_table = None, token_table = None))]
fn postgres_migration(
    py: Python<'_>,
    lease_table: Option<&Bound<'_, PyAny>>,
    token_table: Option<&Bound<'_, PyAny>>,
) -> PyResult<String> {
    Ok(pg_settings(py, lease_table, token_table, None)?.migration())
}

/// The stable signed 64-bit advisory-lock key of `name` in `namespace`: the first 8
/// bytes, big-endian, of SHA-1 over `b"fencepost\0" + namespace + b"\0" + name` (UTF-8).
/// The same on every platform and version.
///
/// Errors: `ConfigError` for arguments that are not str.
#[pyfunction]
fn advisory_key(namespace: &Bound<'_, PyAny>, name: &Bound<'_, PyAny>) -> PyResult<i64> {
    Ok(pg::advisory_key(
        &arg_str(namespace, "namespace")?,
        &arg_str(name, "name")?,
    ))
}

/// The `LISTEN`/`NOTIFY` channel of `name` in `namespace` (a backend with `notify`):
/// `"fencepost_"` and the name's advisory key as 16 hex digits (unsigned), 26 bytes.
/// Releases notify it; waiters listen on it.
///
/// Errors: `ConfigError` for arguments that are not str.
#[pyfunction]
fn notify_channel(namespace: &Bound<'_, PyAny>, name: &Bound<'_, PyAny>) -> PyResult<String> {
    Ok(pg::notify_channel(
        &arg_str(namespace, "namespace")?,
        &arg_str(name, "name")?,
    ))
}

/// The statement taking a transaction-level advisory lock on `name`: run it as the
/// first statement of your transaction, on the connection running it. It tries
/// `pg_try_advisory_xact_lock` once and, if granted while no lease row of the name is
/// live, bumps the name's token (on its row of `lease_table`) in the same transaction.
/// Read its reply with `read_xact_lock`. The lock ends with the transaction (commit or
/// rollback): nothing to renew or release. With `wait`, `pg_advisory_xact_lock`
/// instead: it waits on the server while another transaction or session holds the
/// name's advisory lock, up to the transaction's `lock_timeout` (then the server
/// cancels it with SQLSTATE 55P03); a live lease row is not waited for.
///
/// Errors: `ConfigError` for a name that is not a str (kind `invalid_name` when it is
/// empty, over 1024 bytes or holds a NUL), or a table name that is not a plain SQL
/// identifier.
#[pyfunction]
#[pyo3(signature = (name, *, wait = false, lease_table = None, token_table = None, namespace = None))]
fn xact_lock_statement(
    py: Python<'_>,
    name: &Bound<'_, PyAny>,
    wait: bool,
    lease_table: Option<&Bound<'_, PyAny>>,
    token_table: Option<&Bound<'_, PyAny>>,
    namespace: Option<&Bound<'_, PyAny>>,
) -> PyResult<Sql> {
    let settings = pg_settings(py, lease_table, token_table, namespace)?;
    let name = arg_str(name, "name")?;
    fencepost_core::backends::check_lock_name(&name).map_err(|e| usage_error(py, e))?;
    let stmt = if wait {
        pg::xact_lock_wait_statement(&settings, &name)
    } else {
        pg::xact_lock_statement(&settings, &name)
    };
    Ok(Sql { stmt })
}

/// Reads the reply of `xact_lock_statement` (rows, or a `SqlErrorReply`): the fencing
/// token when the lock was granted, None when another transaction holds it.
///
/// Errors: `ProtocolError` for a server error (a missing table says to run the
/// migration), a server session another client holds the lock on (a transaction-pooling
/// proxy), or rows of another shape.
#[pyfunction]
fn read_xact_lock(py: Python<'_>, reply: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
    match pg::read_xact_lock(&to_sql_reply(reply)) {
        Ok(token) => Ok(token.map(FencingToken::get)),
        Err(e) => Err(protocol_error(py, &e)),
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Machine>()?;
    m.add_class::<PreparedOptions>()?;
    m.add_class::<Request>()?;
    m.add_class::<Command>()?;
    m.add_class::<BlockingPop>()?;
    m.add_class::<Sql>()?;
    m.add_class::<EtcdCall>()?;
    m.add_class::<ZooKeeperCall>()?;
    m.add_class::<KubernetesCall>()?;
    m.add_function(wrap_pyfunction!(zookeeper_node_prefix, m)?)?;
    m.add_function(wrap_pyfunction!(zookeeper_inspect, m)?)?;
    m.add_function(wrap_pyfunction!(read_zookeeper_contenders, m)?)?;
    m.add_function(wrap_pyfunction!(read_zookeeper_holder, m)?)?;
    m.add_function(wrap_pyfunction!(zookeeper_list_names, m)?)?;
    m.add_function(wrap_pyfunction!(read_zookeeper_list, m)?)?;
    m.add_function(wrap_pyfunction!(read_kubernetes_inspect, m)?)?;
    m.add_function(wrap_pyfunction!(read_kubernetes_list, m)?)?;
    m.add(
        "ZK_INSPECT_TRIES",
        fencepost_core::backends::ZK_INSPECT_TRIES,
    )?;
    m.add("KUBE_LIST_PAGE", fencepost_core::backends::KUBE_LIST_PAGE)?;
    m.add("KUBE_LIST_PAGES", fencepost_core::backends::KUBE_LIST_PAGES)?;
    m.add_function(wrap_pyfunction!(read_zookeeper_fenced, m)?)?;
    m.add_class::<SqlErrorReply>()?;
    m.add_class::<Event>()?;
    m.add_class::<Acquired>()?;
    m.add_class::<Renewed>()?;
    m.add_class::<Lost>()?;
    m.add_class::<Released>()?;
    m.add_class::<AcquireFailed>()?;
    m.add_class::<MemoryRedis>()?;
    m.add_class::<Fence>()?;
    m.add("RedisErrorReply", m.py().get_type::<RedisErrorReply>())?;
    m.add_function(wrap_pyfunction!(check_lock_options, m)?)?;
    m.add_function(wrap_pyfunction!(check_observe_options, m)?)?;
    m.add_function(wrap_pyfunction!(sql_fenced_update, m)?)?;
    m.add_function(wrap_pyfunction!(redis_fenced_set, m)?)?;
    m.add_function(wrap_pyfunction!(read_redis_fenced_set, m)?)?;
    m.add_function(wrap_pyfunction!(redis_is_locked, m)?)?;
    m.add_function(wrap_pyfunction!(redis_force_release, m)?)?;
    m.add_function(wrap_pyfunction!(read_redis_flag, m)?)?;
    m.add_function(wrap_pyfunction!(redis_inspect, m)?)?;
    m.add_function(wrap_pyfunction!(redis_list_step, m)?)?;
    m.add_function(wrap_pyfunction!(read_redis_inspect, m)?)?;
    m.add_function(wrap_pyfunction!(read_redis_list, m)?)?;
    m.add("REDIS_LIST_STEPS", redis::REDIS_LIST_STEPS)?;
    m.add_function(wrap_pyfunction!(etcd_holder_range, m)?)?;
    m.add_function(wrap_pyfunction!(read_etcd_holder, m)?)?;
    m.add_function(wrap_pyfunction!(etcd_leader_range, m)?)?;
    m.add_function(wrap_pyfunction!(read_etcd_leader, m)?)?;
    m.add_function(wrap_pyfunction!(etcd_proclaim, m)?)?;
    m.add_function(wrap_pyfunction!(etcd_lease_revoke, m)?)?;
    m.add_function(wrap_pyfunction!(read_etcd_revoke, m)?)?;
    m.add_function(wrap_pyfunction!(lock_state_statement, m)?)?;
    m.add_function(wrap_pyfunction!(read_lock_state, m)?)?;
    m.add_function(wrap_pyfunction!(pg_inspect_statement, m)?)?;
    m.add_function(wrap_pyfunction!(pg_list_statement, m)?)?;
    m.add_function(wrap_pyfunction!(read_pg_holders, m)?)?;
    m.add("PG_LIST_MAX", pg::PG_LIST_MAX)?;
    m.add_function(wrap_pyfunction!(read_etcd_inspect, m)?)?;
    m.add_function(wrap_pyfunction!(etcd_lease_time_to_live, m)?)?;
    m.add_function(wrap_pyfunction!(read_etcd_time_to_live, m)?)?;
    m.add_function(wrap_pyfunction!(etcd_list_page, m)?)?;
    m.add_function(wrap_pyfunction!(read_etcd_list_page, m)?)?;
    m.add("ETCD_LIST_PAGE", etcd::ETCD_LIST_PAGE)?;
    m.add("ETCD_LIST_PAGES", etcd::ETCD_LIST_PAGES)?;
    m.add_function(wrap_pyfunction!(redis_scripts, m)?)?;
    m.add_function(wrap_pyfunction!(lock_key, m)?)?;
    m.add_function(wrap_pyfunction!(token_key, m)?)?;
    m.add_function(wrap_pyfunction!(postgres_migration, m)?)?;
    m.add_function(wrap_pyfunction!(advisory_key, m)?)?;
    m.add_function(wrap_pyfunction!(notify_channel, m)?)?;
    m.add_function(wrap_pyfunction!(xact_lock_statement, m)?)?;
    m.add_function(wrap_pyfunction!(read_xact_lock, m)?)?;
    m.add_function(wrap_pyfunction!(etcd_holder_key, m)?)?;
    m.add_function(wrap_pyfunction!(etcd_lease_id, m)?)?;
    m.add_function(wrap_pyfunction!(etcd_fenced_txn, m)?)?;
    m.add_function(wrap_pyfunction!(read_etcd_fenced_txn, m)?)?;
    m.add("CORE_VERSION", env!("CARGO_PKG_VERSION"))?;
    m.add("LOST_REASONS", PyTuple::new(m.py(), LostReason::NAMES)?)?;
    m.add("LOST_CLOSED", LostReason::Closed.as_str())?;
    Ok(())
}
