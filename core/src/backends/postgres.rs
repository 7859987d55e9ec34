//! PostgreSQL: SQL statements with `$n` parameters (never interpolated), run by the
//! host with its own client (psycopg, asyncpg, node-postgres). Two modes go through
//! the machine:
//!
//! * **Lease rows** ([`PgMode::Lease`]): a row per lock name in a table (see
//!   [`PostgresBackend::migration`]) holding owner, token and expiry. Acquire is one
//!   `INSERT … ON CONFLICT DO UPDATE` that takes a free or expired row and increments
//!   the token; expiry is decided by the *server's* clock (`clock_timestamp()`); renew
//!   and release are owner-conditional `UPDATE`s. Works through any pooler; tokens are
//!   durable and never go backwards, so correctness locks are allowed.
//! * **Advisory, session-level** ([`PgMode::Session`]): `pg_try_advisory_lock` on a
//!   connection the host dedicates to the lock, plus a bump of a per-name token row in
//!   the same statement. The lock lives as long as the connection; "renew" is a
//!   heartbeat on that connection, and a failed heartbeat is `Lost` — but the server
//!   may have handed the lock on as soon as the connection dropped, before the
//!   heartbeat noticed. Unreliable behind a transaction-pooling pooler (PgBouncer in
//!   `pool_mode = transaction`): successive statements may run on different server
//!   sessions.
//!
//! Transaction-level advisory locks (`pg_try_advisory_xact_lock`) are taken inside the
//! user's own transaction, outside the machine: see [`xact_lock_statement`] and
//! [`read_xact_lock`].
//!
//! Advisory keys: [`advisory_key`] maps a namespace and a lock name to a stable signed
//! 64-bit key (the first 8 bytes, big-endian, of SHA-1 over
//! `"fencepost\0" + namespace + "\0" + name`): the same on every platform and version.

use core::time::Duration;

use serde::{Deserialize, Serialize};

use super::{
    payload, Phrased, Progress, Read, ReadError, Recipe, Reply, RequestBody, Step, StepCx,
};
use crate::error::ProtocolError;
use crate::{FencingToken, OwnerId};

/// Which PostgreSQL locking mode the machine drives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PgMode {
    /// Lease rows with fencing tokens; works through poolers.
    #[default]
    Lease,
    /// Session-level advisory lock on a dedicated connection, with a heartbeat.
    Session,
}

/// Settings of the PostgreSQL backend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PostgresBackend {
    /// The locking mode.
    pub mode: PgMode,
    /// Schema-qualified or plain name of the lease table (lease mode); a plain SQL
    /// identifier, optionally `schema.table`. Default `fencepost_leases`.
    pub lease_table: String,
    /// Name of the per-name token table of advisory modes. Default `fencepost_tokens`.
    pub token_table: String,
    /// Namespace of advisory keys, so two applications sharing a database do not
    /// collide. Default `fencepost`.
    pub namespace: String,
}

impl Default for PostgresBackend {
    fn default() -> Self {
        PostgresBackend {
            mode: PgMode::Lease,
            lease_table: "fencepost_leases".to_owned(),
            token_table: "fencepost_tokens".to_owned(),
            namespace: "fencepost".to_owned(),
        }
    }
}

/// Which connection a statement must run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PgConnection {
    /// Any connection (a pool is fine), in autocommit mode.
    Any,
    /// The connection dedicated to this lock: open it for the lock's first statement,
    /// run every later statement of the same lock on it, and close it once the lock's
    /// final event (released, lost, acquire failed) has come. Never a pooled,
    /// transaction-mode connection.
    Dedicated,
}

/// One SQL statement: `sql` with `$1…$n` placeholders and `params` in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SqlStatement {
    pub sql: String,
    pub params: Vec<SqlValue>,
    pub connection: PgConnection,
}

/// A SQL value as plain data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
pub enum SqlValue {
    Null,
    Bool(bool),
    Int(i64),
    Text(String),
}

/// A SQL reply as plain data, converted by the adapter from its client library.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SqlReply {
    /// The rows the statement returned (none for a statement that matched nothing).
    Rows { rows: Vec<Vec<SqlValue>> },
    /// The server refused the statement: its SQLSTATE (five characters) and message.
    Error { sqlstate: String, message: String },
}

/// The stable advisory-lock key of `name` in `namespace`.
pub fn advisory_key(namespace: &str, name: &str) -> i64 {
    let mut h = sha1_smol::Sha1::new();
    h.update(b"fencepost\0");
    h.update(namespace.as_bytes());
    h.update(b"\0");
    h.update(name.as_bytes());
    let d = h.digest().bytes();
    i64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

/// Whether `name` is a plain identifier, optionally schema-qualified (`a.b`).
fn is_table_name(name: &str) -> bool {
    let parts: Vec<&str> = name.split('.').collect();
    parts.len() <= 2
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.len() <= 63
                && !p.starts_with(|c: char| c.is_ascii_digit())
                && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}

impl PostgresBackend {
    /// Checks the table names (they are written into statements, so they must be plain
    /// identifiers). Returns the name of the first bad one.
    pub fn check(&self) -> Result<(), String> {
        for t in [&self.lease_table, &self.token_table] {
            if !is_table_name(t) {
                return Err(format!(
                    "invalid table name {t:?}: use a plain SQL identifier, optionally schema-qualified"
                ));
            }
        }
        Ok(())
    }

    /// The migration creating the tables fencepost uses; idempotent (`IF NOT EXISTS`).
    /// Run it once, with any client, before the first lock: tokens must survive, so
    /// never truncate these tables.
    pub fn migration(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {lease} (\n\
             \x20   name text PRIMARY KEY,\n\
             \x20   owner text,\n\
             \x20   token bigint NOT NULL,\n\
             \x20   expires_at timestamptz\n\
             );\n\
             CREATE TABLE IF NOT EXISTS {tokens} (\n\
             \x20   name text PRIMARY KEY,\n\
             \x20   token bigint NOT NULL\n\
             );\n",
            lease = self.lease_table,
            tokens = self.token_table
        )
    }

    pub(crate) fn acquire(&self, name: &str, owner: &OwnerId, ttl_ms: u64) -> SqlStatement {
        match self.mode {
            PgMode::Lease => SqlStatement {
                // One statement: take a free, expired or already-ours row; a new grant
                // increments the token, an idempotent retry keeps it. The second column
                // is the current holder's remaining time, for the backoff.
                sql: format!(
                    "WITH attempt AS (\
                     INSERT INTO {t} AS l (name, owner, token, expires_at) \
                     VALUES ($1::text, $2::text, 1, clock_timestamp() + $3::bigint * interval '1 millisecond') \
                     ON CONFLICT (name) DO UPDATE SET \
                     owner = EXCLUDED.owner, \
                     token = CASE WHEN l.owner = EXCLUDED.owner THEN l.token ELSE l.token + 1 END, \
                     expires_at = EXCLUDED.expires_at \
                     WHERE l.owner IS NULL OR l.owner = EXCLUDED.owner OR l.expires_at <= clock_timestamp() \
                     RETURNING token) \
                     SELECT (SELECT token FROM attempt), \
                     (SELECT ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint \
                     FROM {t} WHERE name = $1::text)",
                    t = self.lease_table
                ),
                params: vec![
                    SqlValue::Text(name.to_owned()),
                    SqlValue::Text(owner.to_string()),
                    SqlValue::Int(ms_param(ttl_ms)),
                ],
                connection: PgConnection::Any,
            },
            PgMode::Session => SqlStatement {
                // Advisory locks stack per session: a retry on a session that already
                // holds the lock must not take it twice, nor bump the token again
                // (idempotent, DESIGN.md rule 5). A new grant bumps the token row in
                // the same statement.
                sql: advisory_acquire_sql("pg_try_advisory_lock", &self.token_table),
                params: vec![
                    SqlValue::Int(advisory_key(&self.namespace, name)),
                    SqlValue::Text(name.to_owned()),
                ],
                connection: PgConnection::Dedicated,
            },
        }
    }

    pub(crate) fn renew(&self, name: &str, owner: &OwnerId, ttl_ms: u64) -> SqlStatement {
        match self.mode {
            // Only a lease still unexpired on the server's clock is extended: a renewal
            // never revives a lock (DESIGN.md rule 3).
            PgMode::Lease => SqlStatement {
                sql: format!(
                    "UPDATE {t} SET expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond' \
                     WHERE name = $1::text AND owner = $2::text AND expires_at > clock_timestamp() \
                     RETURNING token",
                    t = self.lease_table
                ),
                params: vec![
                    SqlValue::Text(name.to_owned()),
                    SqlValue::Text(owner.to_string()),
                    SqlValue::Int(ms_param(ttl_ms)),
                ],
                connection: PgConnection::Any,
            },
            // The heartbeat: does this session still hold the advisory lock?
            PgMode::Session => SqlStatement {
                sql: HELD.to_string(),
                params: vec![SqlValue::Int(advisory_key(&self.namespace, name))],
                connection: PgConnection::Dedicated,
            },
        }
    }

    pub(crate) fn release(&self, name: &str, owner: &OwnerId) -> SqlStatement {
        match self.mode {
            PgMode::Lease => SqlStatement {
                sql: format!(
                    "UPDATE {t} SET owner = NULL, expires_at = NULL \
                     WHERE name = $1::text AND owner = $2::text AND expires_at > clock_timestamp() \
                     RETURNING token",
                    t = self.lease_table
                ),
                params: vec![
                    SqlValue::Text(name.to_owned()),
                    SqlValue::Text(owner.to_string()),
                ],
                connection: PgConnection::Any,
            },
            PgMode::Session => SqlStatement {
                sql: "SELECT 1 WHERE pg_advisory_unlock($1::bigint)".to_owned(),
                params: vec![SqlValue::Int(advisory_key(&self.namespace, name))],
                connection: PgConnection::Dedicated,
            },
        }
    }
}

/// Every step is one statement; contenders poll. In session mode the lock lives and
/// dies with its dedicated connection: a failed heartbeat means the session, and the
/// lock with it, is gone.
impl Recipe for PostgresBackend {
    fn phrase(&self, step: Step, cx: &StepCx<'_>, _progress: &mut Progress) -> Phrased {
        let (name, owner) = (cx.name, cx.owner);
        Phrased::One(RequestBody::Sql(match step {
            Step::Acquire => self.acquire(name, owner, cx.ttl_ms),
            Step::Renew => self.renew(name, owner, cx.ttl_ms),
            Step::Release(_) | Step::Cleanup => self.release(name, owner),
            Step::Wait { .. } => return Phrased::Nothing,
        }))
    }

    fn read(
        &self,
        step: Step,
        _cx: &StepCx<'_>,
        _progress: &mut Progress,
        reply: Result<&Reply, &str>,
    ) -> Result<Read, ReadError> {
        let sql = payload(reply, "postgres", |r| match r {
            Reply::Sql(v) => Some(v),
            _ => None,
        });
        let read = sql.and_then(|v| match step {
            Step::Acquire => read_acquire(v),
            Step::Wait { .. } => Ok(Read::Done),
            Step::Renew | Step::Release(_) | Step::Cleanup => read_owner_check(v),
        });
        match read {
            // a heartbeat that failed in any way: the session, and the lock, is gone
            Err(_) if step == Step::Renew && self.mode == PgMode::Session => Ok(Read::NotHeld),
            read => read,
        }
    }

    fn late_may_hold(&self, step: Step, reply: Result<&Reply, &str>) -> bool {
        match (step, reply) {
            // what the reply shows, not the session-mode reading of a failed heartbeat
            (Step::Renew, Ok(Reply::Sql(v))) => !matches!(read_owner_check(v), Ok(Read::NotHeld)),
            (Step::Acquire, Ok(Reply::Sql(v))) => {
                !matches!(read_acquire(v), Ok(Read::Contended { .. }))
            }
            (Step::Release(_) | Step::Cleanup | Step::Wait { .. }, _) => false,
            _ => true,
        }
    }
}

/// The statement for a transaction-level advisory lock, to run as the first statement
/// of the user's transaction (on the connection running it): tries
/// `pg_try_advisory_xact_lock` and, if granted, bumps the name's token row in the same
/// transaction. Read the reply with [`read_xact_lock`]. The lock is released by the
/// transaction's commit or rollback; there is nothing to renew or release.
pub fn xact_lock_statement(backend: &PostgresBackend, name: &str) -> SqlStatement {
    SqlStatement {
        sql: advisory_acquire_sql("pg_try_advisory_xact_lock", &backend.token_table),
        params: vec![
            SqlValue::Int(advisory_key(&backend.namespace, name)),
            SqlValue::Text(name.to_owned()),
        ],
        connection: PgConnection::Dedicated,
    }
}

/// Reads the reply of [`xact_lock_statement`]: `Ok(Some(token))` granted,
/// `Ok(None)` held by another transaction; `Err` for a server error or a reply of
/// another shape (with the SQLSTATE, so the caller can tell a missing table).
pub fn read_xact_lock(reply: &SqlReply) -> Result<Option<FencingToken>, ProtocolError> {
    match read_acquire(reply) {
        Ok(Read::Granted { token, .. }) => Ok(Some(token)),
        Ok(Read::Contended { .. }) => Ok(None),
        // never produced by the single-statement PostgreSQL acquire
        Ok(other) => Err(ProtocolError {
            backend: "postgres".to_owned(),
            message: format!("xact lock: unexpected outcome {other:?}"),
        }),
        Err(ReadError::Ambiguous(message)) => Err(ProtocolError {
            backend: "postgres".to_owned(),
            message,
        }),
        Err(ReadError::Protocol(e)) => Err(e),
    }
}

/// Rows if this session holds the advisory lock `$1` (pg_locks shows a bigint key as
/// classid = high 32 bits, objid = low 32 bits, objsubid = 1).
const HELD: &str = "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() \
     AND granted AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = $1::bigint";

/// Takes advisory lock `$1` with `try_fn` (session or transaction level) and, on a
/// new grant, bumps the token row of name `$2` in the same statement. Advisory locks
/// stack: when this session already holds the lock, it is not taken twice and the
/// token is not bumped again — the current token is returned (idempotent retry,
/// DESIGN.md rule 5). Returns one row: (token or NULL when held elsewhere, NULL).
fn advisory_acquire_sql(try_fn: &str, token_table: &str) -> String {
    format!(
        "WITH held AS (SELECT EXISTS ({HELD}) AS yes), \
         got AS (SELECT CASE WHEN (SELECT yes FROM held) THEN true \
         ELSE {try_fn}($1::bigint) END AS ok, (SELECT yes FROM held) AS again), \
         bump AS (INSERT INTO {t} (name, token) SELECT $2::text, 1 FROM got WHERE ok AND NOT again \
         ON CONFLICT (name) DO UPDATE SET token = {t}.token + 1 RETURNING token) \
         SELECT coalesce((SELECT token FROM bump), \
         (SELECT t.token FROM {t} t, got WHERE t.name = $2::text AND got.again)), NULL::bigint",
        t = token_table
    )
}

fn ms_param(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// SQLSTATE classes and codes a retry may fix: connection trouble, serialization
/// failures and deadlocks, the server shutting down or starting, resource shortages.
fn is_transient(sqlstate: &str) -> bool {
    matches!(
        sqlstate.get(..2),
        Some("08") | Some("53") | Some("57") | Some("58")
    ) || matches!(sqlstate, "40001" | "40P01" | "55P03")
}

fn protocol(message: String) -> ReadError {
    ReadError::Protocol(ProtocolError {
        backend: "postgres".to_owned(),
        message,
    })
}

fn server_error(sqlstate: &str, message: &str) -> ReadError {
    if is_transient(sqlstate) {
        ReadError::Ambiguous(format!("postgres {sqlstate}: {message}"))
    } else if sqlstate == "42P01" {
        protocol(format!(
            "{sqlstate}: {message} — run the fencepost migration first (PostgresBackend::migration)"
        ))
    } else {
        protocol(format!("server error {sqlstate}: {message}"))
    }
}

pub(crate) fn read_acquire(reply: &SqlReply) -> Result<Read, ReadError> {
    match reply {
        SqlReply::Error { sqlstate, message } => Err(server_error(sqlstate, message)),
        SqlReply::Rows { rows } => match rows.as_slice() {
            [row] => match row.as_slice() {
                [SqlValue::Int(token), _] if *token > 0 => Ok(Read::Granted {
                    token: FencingToken(*token as u64),
                    base: None,
                }),
                [SqlValue::Null, SqlValue::Int(ms)] => Ok(Read::Contended {
                    queued: false,
                    remaining: u64::try_from(*ms)
                        .ok()
                        .filter(|&m| m > 0)
                        .map(Duration::from_millis),
                }),
                [SqlValue::Null, SqlValue::Null] => Ok(Read::Contended {
                    remaining: None,
                    queued: false,
                }),
                _ => Err(protocol(format!(
                    "acquire: expected one row (token or NULL, remaining ms or NULL), got {row:?}"
                ))),
            },
            _ => Err(protocol(format!(
                "acquire: expected exactly one row, got {}",
                rows.len()
            ))),
        },
    }
}

pub(crate) fn read_owner_check(reply: &SqlReply) -> Result<Read, ReadError> {
    match reply {
        SqlReply::Error { sqlstate, message } => Err(server_error(sqlstate, message)),
        SqlReply::Rows { rows } => match rows.len() {
            1 => Ok(Read::Done),
            0 => Ok(Read::NotHeld),
            n => Err(protocol(format!(
                "owner-checked statement: expected 0 or 1 row, got {n}"
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advisory_keys_are_pinned() {
        // Test vectors: these values must never change (locks taken by one version
        // must exclude those taken by another).
        assert_eq!(
            advisory_key("fencepost", "report"),
            advisory_key("fencepost", "report")
        );
        let pinned = [
            ("fencepost", "report"),
            ("fencepost", ""),
            ("app", "report"),
            ("fencepost", "ünïcødé/🔒"),
        ]
        .map(|(ns, n)| advisory_key(ns, n));
        assert_eq!(
            pinned,
            [
                PINNED_REPORT,
                PINNED_EMPTY,
                PINNED_APP_REPORT,
                PINNED_UNICODE
            ],
            "{pinned:?}"
        );
        assert_ne!(
            advisory_key("a", "bc"),
            advisory_key("ab", "c"),
            "the separator matters"
        );
    }

    // Computed independently: struct.unpack(">q", hashlib.sha1(b"fencepost\0" + ns + b"\0" + name).digest()[:8])
    const PINNED_REPORT: i64 = -2364901989615549545;
    const PINNED_EMPTY: i64 = -4722990151070816524;
    const PINNED_APP_REPORT: i64 = -6065654635645092017;
    const PINNED_UNICODE: i64 = -2301606991453087764;

    #[test]
    fn statements_carry_values_as_parameters_only() {
        let b = PostgresBackend::default();
        let evil = "x'; DROP TABLE fencepost_leases; --";
        let s = b.acquire(evil, &OwnerId([1; 16]), 1_000);
        assert!(!s.sql.contains(evil));
        assert_eq!(s.params[0], SqlValue::Text(evil.to_owned()));
        assert_eq!(s.connection, PgConnection::Any);
        let session = PostgresBackend {
            mode: PgMode::Session,
            ..PostgresBackend::default()
        };
        assert_eq!(
            session.acquire("r", &OwnerId([1; 16]), 1_000).connection,
            PgConnection::Dedicated
        );
        assert!(PostgresBackend {
            lease_table: "x; DROP".into(),
            ..PostgresBackend::default()
        }
        .check()
        .is_err());
        assert!(PostgresBackend {
            lease_table: "locks.leases".into(),
            ..PostgresBackend::default()
        }
        .check()
        .is_ok());
    }

    #[test]
    fn replies_are_read_strictly() {
        let rows = |r: Vec<Vec<SqlValue>>| SqlReply::Rows { rows: r };
        use SqlValue::*;
        assert_eq!(
            read_acquire(&rows(vec![vec![Int(7), Int(900)]])),
            Ok(Read::Granted {
                token: FencingToken(7),
                base: None
            })
        );
        assert_eq!(
            read_acquire(&rows(vec![vec![Null, Int(250)]])),
            Ok(Read::Contended {
                queued: false,
                remaining: Some(Duration::from_millis(250))
            })
        );
        assert!(read_acquire(&rows(vec![])).is_err());
        assert!(read_acquire(&rows(vec![vec![Text("7".into()), Null]])).is_err());
        let err = |s: &str| SqlReply::Error {
            sqlstate: s.into(),
            message: "m".into(),
        };
        assert!(matches!(
            read_acquire(&err("40001")),
            Err(ReadError::Ambiguous(_))
        ));
        assert!(matches!(
            read_acquire(&err("57P01")),
            Err(ReadError::Ambiguous(_))
        ));
        match read_acquire(&err("42P01")) {
            Err(ReadError::Protocol(e)) => assert!(e.message.contains("migration"), "{e}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(read_owner_check(&rows(vec![vec![Int(1)]])), Ok(Read::Done));
        assert_eq!(read_owner_check(&rows(vec![])), Ok(Read::NotHeld));
        assert!(read_owner_check(&rows(vec![vec![], vec![]])).is_err());
    }
}
