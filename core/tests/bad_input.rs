//! The shared bad-input table (`tests/bad_input/table.json`), replayed on the core's own
//! checks: every row Rust can express is refused with the kind and option the other
//! bindings report. Rows about types (a string where a duration goes, NaN durations,
//! lone surrogates) cannot be written in Rust: the compiler refuses them, and they are
//! counted as skipped.

use std::time::Duration;

use fencepost_core::fence::{sql_fenced_update, ParamStyle};
use fencepost_core::{Backend, Fence, FencingToken, LockOptions, Purpose, UsageError};
use serde_json::Value;

/// What Rust reports for a row: the error class as the bindings name it, its kind and
/// the option it names.
#[derive(Debug, PartialEq)]
struct Refusal {
    class: &'static str,
    kind: String,
    option: Option<String>,
}

fn usage(e: UsageError) -> Refusal {
    let option = match &e {
        UsageError::InvalidOption { option, .. } => Some(option.clone()),
        UsageError::UnsafePurpose { .. } => Some("purpose".to_owned()),
        _ => None,
    };
    Refusal {
        class: "ConfigError",
        kind: e.kind().to_owned(),
        option,
    }
}

fn argument(option: Option<&str>) -> Refusal {
    Refusal {
        class: "ConfigError",
        kind: "invalid_argument".to_owned(),
        option: option.map(str::to_owned),
    }
}

/// A plain string of the table (with `$repeat`), or None when Rust cannot hold it.
fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => {
            let [text, times] = o.get("$repeat")?.as_array()?.as_slice() else {
                return None;
            };
            Some(text.as_str()?.repeat(times.as_u64()? as usize))
        }
        _ => None,
    }
}

fn millis(v: &Value) -> Option<Duration> {
    let ms = v.as_f64()?;
    (ms.is_finite() && (0.0..1e15).contains(&ms)).then(|| Duration::from_secs_f64(ms / 1000.0))
}

/// Applies one table option to `o`; `Err` when the binding-level check (a Rust type or
/// a parse) refuses it, `Ok(false)` when Rust cannot express the value at all.
fn apply(o: &mut LockOptions, key: &str, v: &Value) -> Result<bool, Refusal> {
    let duration = || millis(v);
    match key {
        "ttl" => duration().map(|d| o.ttl = d),
        "acquire_timeout" => duration().map(|d| o.acquire_timeout = Some(d)),
        "retry_base" => duration().map(|d| o.retry_base = d),
        "retry_max" => duration().map(|d| o.retry_max = d),
        "renew_every" => duration().map(|d| o.renew_every = Some(d)),
        "clock_margin" => duration().map(|d| o.clock_margin = d),
        "drift_factor" => match v {
            Value::Number(n) => n.as_f64().map(|f| o.drift_factor = f),
            Value::Object(t) if t.contains_key("$nan") => {
                o.drift_factor = f64::NAN;
                Some(())
            }
            _ => None,
        },
        "purpose" => match v.as_str() {
            Some(p) => {
                o.purpose = p.parse::<Purpose>().map_err(|_| argument(Some(key)))?;
                Some(())
            }
            None => None,
        },
        _ => None,
    }
    .map_or(Ok(false), |()| Ok(true))
}

/// The core's answer for a row, or None when Rust cannot express it.
fn run(row: &Value) -> Option<Result<(), Refusal>> {
    let s = |k: &str, default: &str| row.get(k).map_or(Some(default.to_owned()), text);
    match row["call"].as_str()? {
        "lock" => {
            let name = s("name", "job")?;
            let mut o = LockOptions::ttl(Duration::from_secs(30));
            for (key, v) in row
                .get("options")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                match apply(&mut o, key, v) {
                    Ok(true) => {}
                    Ok(false) => return None,
                    Err(refusal) => return Some(Err(refusal)),
                }
            }
            Some(Backend::default().check_acquire(&name, &o).map_err(usage))
        }
        "fence_check" => {
            let resource = s("resource", "")?;
            let token = row["token"].as_u64()?;
            if row.get("owner_id").is_some() {
                return None; // an OwnerId is 16 bytes in Rust: nothing to parse
            }
            Some(
                Fence::new()
                    .check(&resource, FencingToken(token))
                    .map_err(|_| Refusal {
                        class: "StaleToken",
                        kind: String::new(),
                        option: None,
                    }),
            )
        }
        "sql_fenced_update" => {
            let columns: Vec<String> = match row.get("columns") {
                None => vec!["body".to_owned()],
                Some(Value::Array(items)) => items.iter().map(text).collect::<Option<_>>()?,
                Some(_) => return None,
            };
            let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
            let sql = sql_fenced_update(
                &s("table", "jobs")?,
                &s("id_column", "id")?,
                &s("token_column", "last_token")?,
                &columns,
                ParamStyle::Dollar,
            );
            Some(sql.map(drop).map_err(|_| argument(None)))
        }
        _ => None, // backend_from_url: a host function, no Rust counterpart yet
    }
}

#[test]
fn every_row_rust_can_express_is_refused_as_the_bindings_refuse_it() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/bad_input/table.json");
    let table: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("table"))
        .expect("table.json parses");
    let (mut ran, mut skipped) = (0, 0);
    for row in table["rows"].as_array().expect("rows") {
        let id = row["id"].as_str().unwrap_or("?");
        if row.pointer("/skip/rust").is_some() {
            skipped += 1;
            continue;
        }
        let Some(outcome) = run(row) else {
            skipped += 1;
            continue;
        };
        ran += 1;
        let refusal = outcome.expect_err(id);
        match row.pointer("/rust/error").and_then(Value::as_str) {
            Some(class) => assert_eq!(refusal.class, class, "{id}"),
            None => {
                assert_eq!(refusal.class, "ConfigError", "{id}");
                assert_eq!(
                    Some(refusal.kind.as_str()),
                    row["expect"]["kind"].as_str(),
                    "{id}"
                );
                if let Some(option) = row["expect"].get("option") {
                    assert_eq!(refusal.option.as_deref(), option.as_str(), "{id}");
                }
            }
        }
    }
    eprintln!("bad-input table: {ran} rows refused, {skipped} not expressible in Rust");
    assert!(ran >= 19, "only {ran} rows ran");
}
