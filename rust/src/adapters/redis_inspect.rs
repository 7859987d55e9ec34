//! Redis operator queries shared by the redis-rs and Upstash adapters: the holder is
//! the lease key's value (owner id) and `PTTL`, the token the counter's value. The key
//! layout is the core's (`RedisBackend::lock_key`, `token_key`).

use fencepost_core::{FencingToken, RedisBackend, RedisValue};

use crate::{Error, Holder};

/// How many keys one `SCAN` step asks for.
pub(crate) const SCAN_COUNT: usize = 500;
/// At most this many `SCAN` steps per listing, so a huge keyspace costs a bounded time.
pub(crate) const SCAN_STEPS: usize = 1_000;

fn text(v: &RedisValue) -> Option<String> {
    match v {
        RedisValue::Data(s) | RedisValue::Status(s) => Some(s.clone()),
        RedisValue::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Reads `GET lock`, `PTTL lock`, `GET token` into a holder (`None`: the lease key is
/// gone). A fair reservation (`r:<owner>`) is shown as its owner.
pub(crate) fn holder(
    name: &str,
    owner: &RedisValue,
    pttl: &RedisValue,
    token: &RedisValue,
) -> Result<Option<Holder>, Error> {
    if let RedisValue::Error(e) = owner {
        return Err(Error::Backend(format!(
            "Redis refused GET for lock {name:?}: {e}"
        )));
    }
    let Some(owner) = text(owner) else {
        return Ok(None);
    };
    let ttl_left = match pttl {
        RedisValue::Int(n) => crate::adapters::ms(*n),
        _ => None,
    };
    let token = text(token)
        .and_then(|t| t.parse::<u64>().ok())
        .map(FencingToken);
    Ok(Some(Holder {
        name: name.to_owned(),
        owner: Some(owner.trim_start_matches("r:").to_owned()),
        token,
        ttl_left,
        waiters: None,
    }))
}

/// The `SCAN … MATCH` pattern of the lease keys of names starting with `prefix`.
pub(crate) fn pattern(backend: &RedisBackend, prefix: &str) -> String {
    let escape = |s: &str| {
        s.chars().fold(String::new(), |mut out, c| {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                out.push('\\');
            }
            out.push(c);
            out
        })
    };
    // a name that starts with '}' has a NUL before it inside the braces
    // (`RedisBackend::lock_key`)
    let pad = if prefix.starts_with('}') { "\0" } else { "" };
    format!(
        "{}{{{pad}{}*}}:lock",
        escape(&backend.key_prefix),
        escape(prefix)
    )
}

/// The keys of one `SCAN` reply and its next cursor.
pub(crate) fn scan_reply(v: &RedisValue) -> Result<(String, Vec<String>), Error> {
    if let RedisValue::Array(parts) = v {
        if let [cursor, RedisValue::Array(keys)] = parts.as_slice() {
            if let Some(cursor) = text(cursor) {
                return Ok((cursor, keys.iter().filter_map(text).collect()));
            }
        }
    }
    Err(Error::Backend(format!(
        "SCAN: expected [cursor, keys], got {v:?}"
    )))
}
