//! PostgreSQL for the Node addon only (feature `postgres`): the WebAssembly module's hosts
//! cannot reach PostgreSQL (workers have no sockets), so it carries none of this.
//!
//! Conventions, in addition to the crate's:
//! * Settings are an object in the JavaScript spelling (`mode` `"lease"` or `"session"`,
//!   `leaseTable`, `tokenTable`, `namespace`), decoded by the core's serde type
//!   [`PostgresBackend`]; table names are checked by [`PostgresBackend::check`].
//! * A statement is `{ sql, params, connection }`: `sql` with `$1…$n` placeholders,
//!   `params` `null | boolean | bigint | string` in order (`bigint` for the core's
//!   integers: advisory keys use all 64 bits), `connection` `"any"`, `"dedicated"` or `"listen"` (a wait for a release's
//!   notification: `LISTEN` statement, params channel and timeout ms).
//! * A reply is built by the addon from the rows the client returned (a `number` cell
//!   through [`sql_number`]) or from a server error's SQLSTATE and message
//!   ([`SqlReply::Error`]); a value fencepost cannot read becomes [`bad_reply`], which the
//!   core reads as a protocol error.

use std::borrow::Cow;

use fencepost_core::backends::postgres::{self as pg, PgLockState};
use fencepost_core::backends::{
    check_lock_name, PostgresBackend, SqlReply, SqlStatement, SqlValue,
};
use fencepost_core::text::number;
use fencepost_core::{Backend, FencingToken};

use crate::{decode, protocol, JsError, JsOut, Primitive, Result};

/// The settings object as the core's [`PostgresBackend`], table names checked.
pub fn settings(fields: Vec<(String, Primitive)>) -> Result<PostgresBackend> {
    let settings: PostgresBackend = decode(fields)?;
    settings.check().map_err(JsError::config)?;
    Ok(settings)
}

/// The machine's backend for `kind: "postgres"`.
pub fn backend(fields: Vec<(String, Primitive)>) -> Result<Backend> {
    settings(fields).map(Backend::Postgres)
}

fn value(v: &SqlValue) -> JsOut<'_> {
    match v {
        SqlValue::Null => JsOut::Null,
        SqlValue::Bool(b) => JsOut::Bool(*b),
        SqlValue::Int(n) => JsOut::Int(*n),
        SqlValue::Text(s) => JsOut::Text(Cow::Borrowed(s)),
    }
}

/// A statement as `{ sql, params, connection }`.
pub fn statement(stmt: &SqlStatement) -> JsOut<'_> {
    JsOut::Object(vec![
        ("sql", JsOut::Text(Cow::Borrowed(&stmt.sql))),
        (
            "params",
            JsOut::Array(stmt.params.iter().map(value).collect()),
        ),
        (
            "connection",
            JsOut::Text(Cow::Borrowed(match stmt.connection {
                pg::PgConnection::Any => "any",
                pg::PgConnection::Dedicated => "dedicated",
                pg::PgConnection::Listen => "listen",
            })),
        ),
    ])
}

/// A reply fencepost cannot read, as an error reply without SQLSTATE: the core reads it
/// as a protocol error (and a session heartbeat as "not held").
pub fn bad_reply(message: &str) -> SqlReply {
    SqlReply::Error {
        sqlstate: String::new(),
        message: format!("fencepost: {message}"),
    }
}

/// A `number` cell: an integer in −2^63 ..< 2^63, else why not.
pub fn sql_number(n: f64) -> core::result::Result<SqlValue, String> {
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    if n.fract() == 0.0 && (-TWO_POW_63..TWO_POW_63).contains(&n) {
        Ok(SqlValue::Int(n as i64))
    } else {
        Err(format!(
            "a cell holds the number {} (not a 64-bit integer)",
            number(n)
        ))
    }
}

/// `postgresMigration`: the SQL creating fencepost's tables (idempotent).
pub fn migration(fields: Vec<(String, Primitive)>) -> Result<String> {
    Ok(settings(fields)?.migration())
}

/// `xactLockStatement`: the transaction-level advisory lock of `name`; `wait` waits on
/// the server (under the transaction's `lock_timeout`) instead of trying once.
pub fn xact_lock_statement(
    fields: Vec<(String, Primitive)>,
    name: &str,
    wait: bool,
) -> Result<SqlStatement> {
    let settings = settings(fields)?;
    check_lock_name(name)?;
    Ok(if wait {
        pg::xact_lock_wait_statement(&settings, name)
    } else {
        pg::xact_lock_statement(&settings, name)
    })
}

/// `readXactLock`: `{ ok: true, token }` (`token` a bigint, or null when the lock is
/// held) or `{ ok: false, protocol }`.
pub fn read_xact_lock(reply: &SqlReply) -> JsOut<'static> {
    match pg::read_xact_lock(reply) {
        Ok(token) => JsOut::Object(vec![
            ("ok", JsOut::Bool(true)),
            (
                "token",
                token.map_or(JsOut::Null, |t: FencingToken| JsOut::Token(t.get())),
            ),
        ]),
        Err(e) => protocol(e.to_string()),
    }
}

/// `lockStateStatement`: the operator query (`force` false) or reset (`force` true).
pub fn lock_state_statement(
    fields: Vec<(String, Primitive)>,
    name: &str,
    force: bool,
) -> Result<SqlStatement> {
    let settings = settings(fields)?;
    check_lock_name(name)?;
    Ok(pg::lock_state_statement(&settings, name, force))
}

/// `readLockState`: `{ ok: true, lease, advisoryPid }` (`advisoryPid` a number or null)
/// or `{ ok: false, protocol }`.
pub fn read_lock_state(reply: &SqlReply) -> JsOut<'static> {
    match pg::read_lock_state(reply) {
        Ok(PgLockState {
            lease,
            advisory_pid,
        }) => JsOut::Object(vec![
            ("ok", JsOut::Bool(true)),
            ("lease", JsOut::Bool(lease)),
            (
                "advisoryPid",
                advisory_pid.map_or(JsOut::Null, |pid| JsOut::Number(pid as f64)),
            ),
        ]),
        Err(e) => protocol(e.to_string()),
    }
}

/// `pgInspectStatement`: the operator query "who holds `name`?" on lease rows.
pub fn inspect_statement(fields: Vec<(String, Primitive)>, name: &str) -> Result<SqlStatement> {
    let settings = settings(fields)?;
    check_lock_name(name)?;
    Ok(pg::inspect_statement(&settings, name))
}

/// `pgListStatement`: the live lease rows whose names start with `prefix`, at most
/// `limit`.
pub fn list_statement(
    fields: Vec<(String, Primitive)>,
    prefix: &str,
    limit: u64,
) -> Result<SqlStatement> {
    let settings = settings(fields)?;
    Ok(pg::list_statement(&settings, prefix, limit))
}

/// `readPgHolders`: `{ ok: true, holders }` or `{ ok: false, protocol }`.
pub fn read_holders(reply: &SqlReply) -> JsOut<'static> {
    match pg::read_pg_holders(reply) {
        Ok(holders) => JsOut::Object(vec![
            ("ok", JsOut::Bool(true)),
            (
                "holders",
                JsOut::Array(holders.into_iter().map(crate::holder).collect()),
            ),
        ]),
        Err(e) => protocol(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fencepost_core::backends::PgMode;

    fn text(k: &str, v: &str) -> (String, Primitive) {
        (k.to_owned(), Primitive::Text(v.to_owned()))
    }

    #[test]
    fn settings_in_the_javascript_spelling() {
        let s = settings(vec![
            text("mode", "session"),
            text("leaseTable", "locks.leases"),
            text("namespace", "app"),
        ])
        .unwrap();
        assert_eq!(s.mode, PgMode::Session);
        assert_eq!(s.lease_table, "locks.leases");
        assert_eq!(s.token_table, "fencepost_tokens");
        let e = settings(vec![text("tokenTable", "x; DROP")]).unwrap_err();
        assert!(e.message.contains("invalid table name"), "{}", e.message);
        let e = settings(vec![text("mode", "advisory")]).unwrap_err();
        assert_eq!(e.option.as_deref(), Some("mode"));
        let e = settings(vec![text("conninfo", "x")]).unwrap_err();
        assert_eq!(e.message, "unknown option \"conninfo\"");
    }

    #[test]
    fn statements_and_readers() {
        let stmt = xact_lock_statement(vec![], "r", false).unwrap();
        assert_eq!(
            stmt.params[0],
            SqlValue::Int(pg::advisory_key("fencepost", "r"))
        );
        assert!(xact_lock_statement(vec![], "", false).is_err());
        let granted = SqlReply::Rows {
            rows: vec![vec![
                SqlValue::Int(4),
                SqlValue::Null,
                SqlValue::Bool(false),
            ]],
        };
        assert_eq!(
            read_xact_lock(&granted),
            JsOut::Object(vec![("ok", JsOut::Bool(true)), ("token", JsOut::Token(4))])
        );
        assert!(sql_number(1.5).is_err());
        assert_eq!(sql_number(-3.0), Ok(SqlValue::Int(-3)));
    }
}
