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
//!   sessions, and several clients' statements on the same one. The session records
//!   the owner of its lock in a `fencepost.*` setting, so an acquire landing on a
//!   session that holds the lock for another owner is refused (a `ProtocolError`
//!   naming lease rows and `xact_lock`) instead of sharing the lock and its token.
//!
//! Transaction-level advisory locks (`pg_try_advisory_xact_lock`) are taken inside the
//! user's own transaction, outside the machine: see [`xact_lock_statement`] and
//! [`read_xact_lock`].
//!
//! The three modes are one lock per name: a lease grant takes the name's advisory key
//! for its own statement's transaction, and an advisory grant is undone when the
//! name's lease row is live; every grant counts its token on the lease row, above the
//! name's row in the token table (see `advisory_acquire_sql`).
//!
//! Advisory keys: [`advisory_key`] maps a namespace and a lock name to a stable signed
//! 64-bit key (the first 8 bytes, big-endian, of SHA-1 over
//! `"fencepost\0" + namespace + "\0" + name`): the same on every platform and version.

use core::time::Duration;

use serde::{Deserialize, Serialize};

use super::{
    payload, BatchKey, Holder, Phrased, Progress, Read, ReadError, Recipe, Reply, RequestBody,
    Step, StepCx, Waiting,
};
use crate::error::ProtocolError;
use crate::{FencingToken, OwnerId, Previous};

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
    /// Name of the per-name token table: every grant's token is above the name's row
    /// there, if it has one. Default `fencepost_tokens`.
    pub token_table: String,
    /// Namespace of advisory keys, so two applications sharing a database do not
    /// collide. Default `fencepost`.
    pub namespace: String,
    /// Wake waiters on release with `LISTEN`/`NOTIFY` (default on): every release
    /// statement sends `pg_notify` on the name's channel ([`notify_channel`]) in its own
    /// transaction, so waiters hear of it only once it committed, and a contender parks
    /// on a [`PgConnection::Listen`] wait for the notification instead of sleeping
    /// through its backoff. The wait lasts that backoff, so a lost notification, a
    /// dead listening connection or a pooler that cannot carry `LISTEN` (PgBouncer in
    /// transaction mode) costs what polling costs, never more. Off: contenders poll,
    /// and releases notify nobody.
    pub notify: bool,
}

impl Default for PostgresBackend {
    fn default() -> Self {
        PostgresBackend {
            mode: PgMode::Lease,
            lease_table: "fencepost_leases".to_owned(),
            token_table: "fencepost_tokens".to_owned(),
            namespace: "fencepost".to_owned(),
            notify: true,
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
    /// A wait for a notification (operation `wait`, [`PostgresBackend::notify`]): `sql`
    /// is the `LISTEN` statement, `params` the channel (text) and how long to wait in
    /// milliseconds (int). Run the `LISTEN` on a connection that listens for the host's
    /// waiters (one per backend is enough; not through a transaction-mode pooler, where
    /// notifications do not come back), then answer with no rows once a notification
    /// on the channel arrives, or once the time has passed. A notification that came
    /// after the acquire this wait follows was sent, or a channel that was not listened
    /// to yet when it was sent, answers at once: its release may have come in between.
    Listen,
}

/// One SQL statement: `sql` with `$1…$n` placeholders and `params` in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SqlStatement {
    /// One statement, with `$1…$n` placeholders for `params`; no value is interpolated
    /// into it. A [`PgConnection::Listen`] wait's is `LISTEN {channel}`, with no
    /// placeholders.
    pub sql: String,
    /// The values of `$1…$n`, in order. A [`PgConnection::Listen`] wait's are the
    /// channel ([`SqlValue::Text`]) and how long to wait in milliseconds
    /// ([`SqlValue::Int`]), for the host to read, not to bind.
    pub params: Vec<SqlValue>,
    /// Which connection to run it on.
    pub connection: PgConnection,
}

/// A SQL value as plain data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
pub enum SqlValue {
    /// SQL `NULL`: a parameter with no value (bound as a `text` null), or a null column
    /// of any type.
    Null,
    /// A `boolean`.
    Bool(bool),
    /// An integer: a parameter bound as `bigint` (`int8`); a `smallint`, `integer` or
    /// `bigint` column.
    Int(i64),
    /// A `text` value (UTF-8), as a parameter or a column.
    Text(String),
}

/// A SQL reply as plain data, converted by the adapter from its client library.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SqlReply {
    /// The rows the statement returned (none for a statement that matched nothing).
    Rows {
        /// One entry per row, each with the columns in the statement's order; empty
        /// when it returned none.
        rows: Vec<Vec<SqlValue>>,
    },
    /// The server refused the statement: its SQLSTATE (five characters) and message.
    Error {
        /// The SQLSTATE code, five characters (`40001`, `57P01`).
        sqlstate: String,
        /// The server's primary error message.
        message: String,
    },
}

/// The stable advisory-lock key of `name` in `namespace`.
pub fn advisory_key(namespace: &str, name: &str) -> i64 {
    let mut h = sha1_smol::Sha1::new();
    h.update(b"fencepost\0");
    h.update(namespace.as_bytes());
    h.update(b"\0");
    h.update(name.as_bytes());
    // a SHA-1 digest is 20 bytes
    let d = h.digest().bytes();
    i64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

/// The `LISTEN`/`NOTIFY` channel of `name` in `namespace`: `fencepost_` and the name's
/// advisory key ([`advisory_key`]) in 16 hex digits, 26 bytes (PostgreSQL truncates
/// channel names at 63). Names sharing a key would share a channel: a spurious
/// wake-up, which only costs an acquire attempt.
pub fn notify_channel(namespace: &str, name: &str) -> String {
    format!("fencepost_{:016x}", advisory_key(namespace, name) as u64)
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

    /// The migration creating the tables fencepost uses; idempotent (`IF NOT EXISTS`):
    /// the lease table, whose row per name counts the tokens of every mode and holds a
    /// lease's holder metadata ([`crate::LockOptions::metadata`], JSON text or NULL),
    /// and the token table, a per-name floor every grant stays above. A lease table
    /// made by an earlier version (without `metadata`) gains the column (`ALTER TABLE
    /// … ADD COLUMN IF NOT EXISTS`; a catalog change only, no table rewrite). Run it
    /// once, with any client, before the first lock and after upgrading: lease
    /// grants and releases write the column, and fail on a table without it (a
    /// [`ProtocolError`] naming the migration). Tokens must survive, so never
    /// truncate these tables.
    pub fn migration(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {lease} (\n\
             \x20   name text PRIMARY KEY,\n\
             \x20   owner text,\n\
             \x20   token bigint NOT NULL,\n\
             \x20   expires_at timestamptz,\n\
             \x20   metadata text\n\
             );\n\
             ALTER TABLE {lease} ADD COLUMN IF NOT EXISTS metadata text;\n\
             CREATE TABLE IF NOT EXISTS {tokens} (\n\
             \x20   name text PRIMARY KEY,\n\
             \x20   token bigint NOT NULL\n\
             );\n",
            lease = self.lease_table,
            tokens = self.token_table
        )
    }

    /// The statement of a lease acquire (lease-rows mode) as the machine sends it: owner
    /// `owner` takes `name` for `ttl_ms` milliseconds of the server's clock; with
    /// `floor`, a new grant's token is at least `floor`. One row back: (token or NULL,
    /// the live holder's remaining ms or NULL, how the previous holder ended or NULL,
    /// the token of the row's holder as the statement found it or NULL).
    /// For conformance tests and tools that replay the machine's statements; hosts run
    /// what the machine emits.
    pub fn acquire_statement(
        &self,
        name: &str,
        owner: &OwnerId,
        ttl_ms: u64,
        floor: Option<FencingToken>,
    ) -> SqlStatement {
        self.acquire(name, owner, ttl_ms, floor, None)
    }

    /// The statement of a renewal by `owner` for `ttl_ms` ms (one row, the token, if
    /// the owner's lease was still live; none otherwise). See
    /// [`PostgresBackend::acquire_statement`].
    pub fn renew_statement(&self, name: &str, owner: &OwnerId, ttl_ms: u64) -> SqlStatement {
        self.renew(name, owner, ttl_ms)
    }

    /// The statement of a batched renewal, as the machine sends when several lease rows
    /// renew at once: for each `(name, owner, ttl_ms)` what
    /// [`PostgresBackend::renew_statement`] does, in one `UPDATE`; a row `(i, token)`
    /// for each renewal `i` (from 0, in the order given) whose lease was still live.
    pub fn renew_many_statement(&self, renewals: &[(&str, &OwnerId, u64)]) -> SqlStatement {
        let owners: Vec<String> = renewals.iter().map(|(_, o, _)| o.to_string()).collect();
        let renewals: Vec<(&str, &str, i64)> = (renewals.iter().zip(&owners))
            .map(|((name, _, ttl_ms), owner)| (*name, owner.as_str(), ms_param(*ttl_ms)))
            .collect();
        self.renew_many(&renewals)
    }

    /// The statement of `owner`'s release; `clean`: its holder's own release (the next
    /// grant reads `released`), else a cleanup (it reads `expired`). One row if it freed
    /// a live lease, none otherwise. See [`PostgresBackend::acquire_statement`].
    pub fn release_statement(&self, name: &str, owner: &OwnerId, clean: bool) -> SqlStatement {
        self.release(name, owner, clean)
    }

    /// The grant statement; with `floor`, a new grant's token is at least `floor`
    /// (`greatest(…, floor)`, the floor as the next parameter). A lease grant's last
    /// parameter is its holder metadata (text, canonical JSON, or NULL without any:
    /// a grant replaces the previous holder's), after the floor when there is one.
    pub(crate) fn acquire(
        &self,
        name: &str,
        owner: &OwnerId,
        ttl_ms: u64,
        floor: Option<FencingToken>,
        metadata: Option<&str>,
    ) -> SqlStatement {
        let mut statement = self.acquire_without_floor(name, owner, ttl_ms, floor.is_some());
        if let Some(floor) = floor {
            statement.params.push(SqlValue::Int(floor.0 as i64)); // ≤ 2^63 − 1: validated
        }
        if self.mode == PgMode::Lease {
            // check_acquire keeps metadata off the advisory modes, which have no row
            statement.params.push(match metadata {
                Some(m) => SqlValue::Text(
                    crate::decode_metadata(m)
                        .map(|m| crate::encode_metadata(&m))
                        .unwrap_or_else(|| m.to_owned()),
                ),
                None => SqlValue::Null,
            });
        }
        statement
    }

    fn acquire_without_floor(
        &self,
        name: &str,
        owner: &OwnerId,
        ttl_ms: u64,
        floored: bool,
    ) -> SqlStatement {
        match self.mode {
            PgMode::Lease => SqlStatement {
                // One statement: take a free, expired or already-ours row; a new grant
                // increments the token, an idempotent retry keeps it. The gate takes
                // the name's advisory key for this statement's transaction only, so a
                // lease is never granted while a session or transaction advisory lock
                // of the same name is held (the modes exclude each other); a session
                // lock recorded on this very session is someone else's on a shared
                // session (the record, not pg_locks: every lease grant reads it, and
                // pg_locks takes the lock manager's locks). The second column is the
                // current holder's remaining time, for the backoff.
                // The fourth column is the live holder's token, which marks its grant
                // (a refused attempt tells a new holder from one held long).
                // The third column says how the previous holder ended, from the row as
                // the statement's snapshot saw it (`old`): released (the release's
                // -infinity expiry), expired (an owner), none (no row, no token floor),
                // unknown when another grant may have come between (the token moved by
                // more than one: a floor) or this owner's retry kept its token.
                sql: format!(
                    "WITH old AS (SELECT owner, token, expires_at FROM {l} WHERE name = $1::text), \
                     gate AS (SELECT CASE WHEN {held} IS NOT NULL THEN false \
                     ELSE pg_try_advisory_xact_lock($4::bigint) END AS free), \
                     attempt AS (\
                     INSERT INTO {l} AS l (name, owner, token, expires_at, metadata) \
                     SELECT $1::text, $2::text, {next}, clock_timestamp() + $3::bigint * interval '1 millisecond', {meta}::text \
                     FROM gate WHERE free \
                     ON CONFLICT (name) DO UPDATE SET \
                     owner = EXCLUDED.owner, \
                     token = CASE WHEN l.owner = EXCLUDED.owner THEN l.token ELSE greatest(l.token + 1, EXCLUDED.token) END, \
                     expires_at = EXCLUDED.expires_at, \
                     metadata = EXCLUDED.metadata \
                     WHERE l.owner IS NULL OR l.owner = EXCLUDED.owner OR l.expires_at <= clock_timestamp() \
                     RETURNING token) \
                     SELECT (SELECT token FROM attempt), {remaining}, \
                     CASE WHEN NOT EXISTS (SELECT 1 FROM attempt) THEN NULL \
                     WHEN NOT EXISTS (SELECT 1 FROM old) THEN \
                     CASE WHEN EXISTS (SELECT 1 FROM {tokens} WHERE name = $1::text) THEN 'unknown' ELSE 'none' END \
                     WHEN (SELECT token FROM attempt) <> (SELECT token FROM old) + 1 THEN 'unknown' \
                     WHEN (SELECT owner FROM old) IS NOT NULL THEN 'expired' \
                     WHEN (SELECT expires_at FROM old) = '-infinity' THEN 'released' \
                     WHEN (SELECT expires_at FROM old) IS NOT NULL THEN 'expired' \
                     ELSE 'unknown' END, \
                     (SELECT token FROM old WHERE owner IS NOT NULL)",
                    tokens = self.token_table,
                    held = session_owner("$4"),
                    l = self.lease_table,
                    next = next_token(token_floor(&self.token_table, "$1"), floored.then_some("$5")),
                    meta = if floored { "$6" } else { "$5" },
                    remaining = remaining_ms(&self.lease_table, "$1"),
                ),
                params: vec![
                    SqlValue::Text(name.to_owned()),
                    SqlValue::Text(owner.to_string()),
                    SqlValue::Int(ms_param(ttl_ms)),
                    SqlValue::Int(advisory_key(&self.namespace, name)),
                ],
                connection: PgConnection::Any,
            },
            PgMode::Session => SqlStatement {
                // Advisory locks stack per session: a retry on a session that already
                // holds the lock for this owner must not take it twice, nor bump the
                // token again (idempotent, DESIGN.md rule 5).
                sql: self.advisory_acquire_sql("pg_try_advisory_lock", floored.then_some("$4")),
                params: vec![
                    SqlValue::Int(advisory_key(&self.namespace, name)),
                    SqlValue::Text(name.to_owned()),
                    SqlValue::Text(owner.to_string()),
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
            // The heartbeat: does this session still hold the advisory lock, for
            // this owner?
            PgMode::Session => SqlStatement {
                sql: format!("{} AND {} = $2::text", held_sql("$1"), SESSION_OWNER),
                params: vec![
                    SqlValue::Int(advisory_key(&self.namespace, name)),
                    SqlValue::Text(owner.to_string()),
                ],
                connection: PgConnection::Dedicated,
            },
        }
    }

    /// A batched renewal of lease rows: `renewals` are `(name, owner, ttl_ms)`, sent as
    /// one JSON array parameter (`$1`: `[{"i": 0, "name": …, "owner": …, "ttl_ms": …}, …]`,
    /// so names never enter the SQL text); each row renewed as [`PostgresBackend::renew`]
    /// renews one returns `(i, token)`, `i` its place in the batch.
    pub(crate) fn renew_many(&self, renewals: &[(&str, &str, i64)]) -> SqlStatement {
        let items: Vec<serde_json::Value> = (renewals.iter().enumerate())
            .map(|(i, (name, owner, ttl_ms))| {
                serde_json::json!({"i": i, "name": name, "owner": owner, "ttl_ms": ttl_ms})
            })
            .collect();
        SqlStatement {
            sql: format!(
                "UPDATE {t} AS l SET expires_at = clock_timestamp() + r.ttl_ms * interval '1 millisecond' \
                 FROM jsonb_to_recordset($1::text::jsonb) AS r(i int, name text, owner text, ttl_ms bigint) \
                 WHERE l.name = r.name AND l.owner = r.owner AND l.expires_at > clock_timestamp() \
                 RETURNING r.i::bigint, l.token",
                t = self.lease_table
            ),
            params: vec![SqlValue::Text(serde_json::Value::Array(items).to_string())],
            connection: PgConnection::Any,
        }
    }

    /// The release of `owner`'s lease; `clean`: its holder's own release (the next
    /// grant reads `released`), else a cleanup (it reads `expired`).
    pub(crate) fn release(&self, name: &str, owner: &OwnerId, clean: bool) -> SqlStatement {
        let mut statement = match self.mode {
            PgMode::Lease => SqlStatement {
                // -infinity: freed by its holder's own release (the next grant reads
                // `released`); a cleanup frees it at this instant, as the lease's end
                // would have (`expired`), as does an operator's reset
                sql: format!(
                    "UPDATE {t} SET owner = NULL, expires_at = {freed}, metadata = NULL \
                     WHERE name = $1::text AND owner = $2::text AND expires_at > clock_timestamp() \
                     RETURNING token",
                    t = self.lease_table,
                    freed = if clean { "'-infinity'" } else { "clock_timestamp()" },
                ),
                params: vec![
                    SqlValue::Text(name.to_owned()),
                    SqlValue::Text(owner.to_string()),
                ],
                connection: PgConnection::Any,
            },
            // Only this owner's lock is unlocked (a session another client shares
            // must not free it), and the session forgets the owner.
            PgMode::Session => SqlStatement {
                sql: format!(
                    "SELECT set_config({var}, '', false) FROM (SELECT CASE WHEN {SESSION_OWNER} = $2::text \
                     THEN pg_advisory_unlock($1::bigint) ELSE false END AS ok) u WHERE ok",
                    var = SESSION_VAR
                ),
                params: vec![
                    SqlValue::Int(advisory_key(&self.namespace, name)),
                    SqlValue::Text(owner.to_string()),
                ],
                connection: PgConnection::Dedicated,
            },
        };
        if self.notify {
            // Only a release that freed something notifies (one call per row it
            // returns), and the statement's own transaction sends it at commit. The
            // reply keeps its row count, all its readers look at.
            statement.sql = format!(
                "WITH r AS ({}) SELECT r.*, pg_notify($3::text, '')::text FROM r",
                statement.sql
            );
            statement
                .params
                .push(SqlValue::Text(notify_channel(&self.namespace, name)));
        }
        statement
    }

    /// The wait of a contender for the release's notification ([`PgConnection::Listen`]).
    fn listen(&self, name: &str, timeout_ms: u64) -> SqlStatement {
        let channel = notify_channel(&self.namespace, name);
        SqlStatement {
            sql: format!("LISTEN {channel}"),
            params: vec![SqlValue::Text(channel), SqlValue::Int(ms_param(timeout_ms))],
            connection: PgConnection::Listen,
        }
    }
}

/// Every step is one statement; contenders wait for a release's notification (or
/// poll, with `notify` off). In session mode the lock lives and
/// dies with its dedicated connection: a failed heartbeat means the session, and the
/// lock with it, is gone.
impl Recipe for PostgresBackend {
    fn waiting(&self) -> Waiting {
        // the wait stands in for the backoff, and lasts as long (`Lock::park`)
        if self.notify {
            Waiting::Notify
        } else {
            Waiting::Poll
        }
    }

    fn phrase(
        &self,
        step: Step,
        cx: &StepCx<'_>,
        _progress: &mut Progress,
        _shared: &mut super::Shared,
    ) -> Phrased {
        let (name, owner) = (cx.name, cx.owner);
        Phrased::One(RequestBody::Sql(match step {
            Step::Acquire => self.acquire(name, owner, cx.ttl_ms, cx.token_floor, cx.metadata),
            Step::Renew => self.renew(name, owner, cx.ttl_ms),
            Step::Release(_) => self.release(name, owner, true),
            Step::Cleanup => self.release(name, owner, false),
            Step::Wait { timeout_ms } if self.notify => self.listen(name, timeout_ms),
            Step::Wait { .. } => return Phrased::Nothing,
        }))
    }

    fn read(
        &self,
        step: Step,
        _cx: &StepCx<'_>,
        _progress: &mut Progress,
        _shared: &mut super::Shared,
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

    fn renew_batch_limit(&self) -> usize {
        PG_RENEW_BATCH_LIMIT
    }

    /// Lease rows renew together; a session lock's heartbeat runs on its own connection.
    fn renew_batch_key(&self, body: &RequestBody) -> Option<BatchKey> {
        match body {
            RequestBody::Sql(s) if self.mode == PgMode::Lease && s.params.len() == 3 => {
                Some(BatchKey(0, 0))
            }
            _ => None,
        }
    }

    fn phrase_renew_batch(&self, bodies: &[&RequestBody]) -> Option<RequestBody> {
        let mut renewals = Vec::with_capacity(bodies.len());
        for body in bodies {
            match *body {
                RequestBody::Sql(SqlStatement { params, .. }) => match params.as_slice() {
                    [SqlValue::Text(name), SqlValue::Text(owner), SqlValue::Int(ttl_ms)] => {
                        renewals.push((name.as_str(), owner.as_str(), *ttl_ms))
                    }
                    _ => return None,
                },
                _ => return None,
            }
        }
        Some(RequestBody::Sql(self.renew_many(&renewals)))
    }

    /// `(i, token)` rows: renewal `i` reads its token (renewed), the others no row.
    fn split_renew_batch(&self, reply: &Reply, n: usize) -> Option<Vec<Reply>> {
        let Reply::Sql(SqlReply::Rows { rows }) = reply else {
            return None;
        };
        let mut own = vec![Vec::new(); n];
        for row in rows {
            match row.as_slice() {
                [SqlValue::Int(i), token @ SqlValue::Int(_)] => {
                    let slot = usize::try_from(*i).ok().and_then(|i| own.get_mut(i))?;
                    slot.push(vec![token.clone()]);
                }
                _ => return None,
            }
        }
        Some(
            own.into_iter()
                .map(|rows| Reply::Sql(SqlReply::Rows { rows }))
                .collect(),
        )
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
/// `pg_try_advisory_xact_lock` and, if granted and no lease row of the name is live,
/// bumps the name's token (on its lease row) in the same transaction. Read the reply
/// with [`read_xact_lock`]. The lock is released by the transaction's commit or
/// rollback; there is nothing to renew or release.
pub fn xact_lock_statement(backend: &PostgresBackend, name: &str) -> SqlStatement {
    xact_statement(backend, name, "pg_try_advisory_xact_lock")
}

/// [`xact_lock_statement`] that waits on the server: `pg_advisory_xact_lock` blocks
/// while another transaction or session holds the name's advisory lock, for as long as
/// the transaction's `lock_timeout` allows (then PostgreSQL cancels the statement with
/// SQLSTATE `55P03`, "lock timeout"; set it with `set_config('lock_timeout', …, true)`
/// first). A live lease row is not waited for: the reply reads as held, as the trying
/// statement's does. Read its reply with [`read_xact_lock`].
pub fn xact_lock_wait_statement(backend: &PostgresBackend, name: &str) -> SqlStatement {
    xact_statement(backend, name, "pg_advisory_xact_lock")
}

fn xact_statement(backend: &PostgresBackend, name: &str, lock_fn: &str) -> SqlStatement {
    SqlStatement {
        sql: backend.advisory_acquire_sql(lock_fn, None),
        params: vec![
            SqlValue::Int(advisory_key(&backend.namespace, name)),
            SqlValue::Text(name.to_owned()),
            // no owner: transaction locks leave nothing on the session
            SqlValue::Text(String::new()),
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

/// What an operator statement ([`lock_state_statement`]) found for a lock name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PgLockState {
    /// A live lease row: held (the query), or freed by this statement (the reset).
    pub lease: bool,
    /// The server process id of a session holding the name's advisory lock (session
    /// mode or `xact_lock`), if any.
    pub advisory_pid: Option<i64>,
}

/// The operator statement for `name`: with `force` false, "is it locked?"; with
/// `force` true, the reset: frees a live lease row whoever holds it (owner and expiry
/// cleared, the token kept, so the next grant's token is above every earlier one; the
/// holder's next renewal finds it gone: `Lost { RenewRejected }`). Either way the reply
/// also names a session holding the name's advisory lock, which only that session can
/// free. Read it with [`read_lock_state`].
pub fn lock_state_statement(backend: &PostgresBackend, name: &str, force: bool) -> SqlStatement {
    let live = "name = $1::text AND owner IS NOT NULL AND expires_at > clock_timestamp()";
    let l = &backend.lease_table;
    let lease = if force {
        format!(
            // freed at this instant, not by its holder: the next grant reads `expired`
            "WITH freed AS (UPDATE {l} SET owner = NULL, expires_at = clock_timestamp(), metadata = NULL WHERE {live} \
             RETURNING token) SELECT EXISTS (SELECT 1 FROM freed)"
        )
    } else {
        format!("SELECT EXISTS (SELECT 1 FROM {l} WHERE {live})")
    };
    SqlStatement {
        sql: format!(
            "{lease}, (SELECT pid::bigint FROM pg_locks WHERE locktype = 'advisory' AND granted \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = $2::bigint LIMIT 1)"
        ),
        params: vec![
            SqlValue::Text(name.to_owned()),
            SqlValue::Int(advisory_key(&backend.namespace, name)),
        ],
        connection: PgConnection::Any,
    }
}

/// Reads the reply of [`lock_state_statement`].
///
/// Errors: [`ProtocolError`] for a server error (with its SQLSTATE) or rows of
/// another shape.
pub fn read_lock_state(reply: &SqlReply) -> Result<PgLockState, ProtocolError> {
    let shape = |what: String| ProtocolError {
        backend: "postgres".to_owned(),
        message: what,
    };
    match reply {
        SqlReply::Rows { rows } => match rows.as_slice() {
            [row] => match row.as_slice() {
                [SqlValue::Bool(lease), SqlValue::Null] => Ok(PgLockState {
                    lease: *lease,
                    advisory_pid: None,
                }),
                [SqlValue::Bool(lease), SqlValue::Int(pid)] => Ok(PgLockState {
                    lease: *lease,
                    advisory_pid: Some(*pid),
                }),
                _ => Err(shape(format!(
                    "lock state: expected (bool, pid or NULL), got {row:?}"
                ))),
            },
            _ => Err(shape(format!("lock state: expected one row, got {rows:?}"))),
        },
        SqlReply::Error { sqlstate, message } => Err(match server_error(sqlstate, message) {
            ReadError::Protocol(p) => p,
            ReadError::Ambiguous(m) => shape(m),
        }),
    }
}

/// The live lease rows' columns an operator query reads: name, owner, token, the
/// milliseconds left on the server's clock (rounded up), metadata.
fn holder_columns(lease_table: &str, condition: &str) -> String {
    format!(
        "SELECT name, owner, token, \
         ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint, metadata \
         FROM {lease_table} WHERE {condition} AND owner IS NOT NULL \
         AND expires_at > clock_timestamp()"
    )
}

/// The operator query "who holds `name`?" on lease rows: one statement reading the
/// name's live row (owner, token, time left computed by the server from `expires_at -
/// clock_timestamp()`, metadata). Read its reply with [`read_pg_holders`] (no row:
/// nobody holds it). Advisory locks keep no row: hosts refuse inspection in the
/// advisory modes.
pub fn inspect_statement(backend: &PostgresBackend, name: &str) -> SqlStatement {
    SqlStatement {
        sql: holder_columns(&backend.lease_table, "name = $1::text"),
        params: vec![SqlValue::Text(name.to_owned())],
        connection: PgConnection::Any,
    }
}

/// At most this many rows per lease-row listing ([`list_statement`]'s limit is
/// clamped to it).
pub const PG_LIST_MAX: u64 = 10_000;

/// The most lease rows one batched renewal updates: one `UPDATE … FROM
/// jsonb_to_recordset(…)`, whose locks on the rows it renews are held until it ends.
pub const PG_RENEW_BATCH_LIMIT: usize = 500;

/// The operator listing on lease rows: the live rows whose names start with `prefix`
/// (`LIKE`, with `%`, `_` and `\` of the prefix escaped), in name order, at most
/// `limit` (1 ..= [`PG_LIST_MAX`]) in one bounded statement (`ORDER BY name LIMIT`,
/// which the primary key's index serves). Read its reply with [`read_pg_holders`].
pub fn list_statement(backend: &PostgresBackend, prefix: &str, limit: u64) -> SqlStatement {
    let escaped = prefix
        .replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_");
    SqlStatement {
        sql: format!(
            "{} ORDER BY name LIMIT $2::bigint",
            holder_columns(&backend.lease_table, "name LIKE $1::text ESCAPE '\\'")
        ),
        params: vec![
            SqlValue::Text(format!("{escaped}%")),
            SqlValue::Int(ms_param(limit.clamp(1, PG_LIST_MAX))),
        ],
        connection: PgConnection::Any,
    }
}

/// Reads the reply of [`inspect_statement`] or [`list_statement`]: one [`Holder`] per
/// row, in the rows' order (`waiters` is `None`: lease-row contenders leave no trace
/// until they win). Metadata that is not a JSON object of strings reads as `None`.
///
/// Errors: [`ProtocolError`] for a server error (a missing table or column names the
/// migration) or rows of another shape.
pub fn read_pg_holders(reply: &SqlReply) -> Result<Vec<Holder>, ProtocolError> {
    let rows = match reply {
        SqlReply::Rows { rows } => rows,
        SqlReply::Error { sqlstate, message } => {
            return Err(match server_error(sqlstate, message) {
                ReadError::Protocol(p) => p,
                ReadError::Ambiguous(m) => ProtocolError {
                    backend: "postgres".to_owned(),
                    message: m,
                },
            })
        }
    };
    rows.iter()
        .map(|row| match row.as_slice() {
            [SqlValue::Text(name), owner, SqlValue::Int(token), left, metadata] => Ok(Holder {
                name: name.clone(),
                owner: match owner {
                    SqlValue::Text(o) => Some(o.clone()),
                    _ => None,
                },
                token: u64::try_from(*token).ok().map(FencingToken),
                ttl_left: match left {
                    SqlValue::Int(ms) => u64::try_from(*ms).ok().map(Duration::from_millis),
                    _ => None,
                },
                waiters: None,
                metadata: match metadata {
                    SqlValue::Text(m) => crate::decode_metadata(m),
                    _ => None,
                },
            }),
            other => Err(ProtocolError {
                backend: "postgres".to_owned(),
                message: format!(
                    "inspect: expected (name, owner, token, ms left, metadata), got {other:?}"
                ),
            }),
        })
        .collect()
}

/// Rows if this session holds the advisory lock whose key is parameter `key` (pg_locks
/// shows a bigint key as classid = high 32 bits, objid = low 32 bits, objsubid = 1).
fn held_sql(key: &str) -> String {
    format!(
        "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() \
         AND granted AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = {key}::bigint"
    )
}

/// The session setting (a custom `fencepost.*` variable, one per advisory key `$1`)
/// where a session lock records `owner token` when granted: it tells a retry of the
/// same owner from another client sharing the server session.
const SESSION_VAR: &str = "'fencepost.k' || translate($1::bigint::text, '-', 'n')";

/// The owner recorded in [`SESSION_VAR`] (NULL when none).
const SESSION_OWNER: &str =
    "nullif(split_part(current_setting('fencepost.k' || translate($1::bigint::text, '-', 'n'), true), ' ', 1), '')";

/// [`SESSION_OWNER`] of the key in parameter `key`.
fn session_owner(key: &str) -> String {
    SESSION_OWNER.replace("$1", key)
}

/// The highest token of name `name_param` in the token table, or 0: every grant goes
/// above it.
fn token_floor(token_table: &str, name_param: &str) -> String {
    format!("coalesce((SELECT token FROM {token_table} WHERE name = {name_param}::text), 0)")
}

/// The token a new grant inserts: one above the token table's floor, or the caller's
/// floor (parameter `floor_param`) if that is higher. The upsert then takes
/// `greatest(row + 1, this)`: `max(counter + 1, floor)`.
fn next_token(table_floor: String, floor_param: Option<&str>) -> String {
    match floor_param {
        Some(p) => format!("greatest({table_floor} + 1, {p}::bigint)"),
        None => format!("{table_floor} + 1"),
    }
}

/// The remaining milliseconds of name `name_param`'s live lease row, or NULL.
fn remaining_ms(lease_table: &str, name_param: &str) -> String {
    format!(
        "(SELECT ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint \
         FROM {lease_table} WHERE name = {name_param}::text AND owner IS NOT NULL)"
    )
}

impl PostgresBackend {
    /// Takes advisory lock `$1` (name `$2`, owner `$3`, empty for a transaction lock)
    /// with `try_fn`, session or transaction level. A new grant counts its token on
    /// the name's lease row, in the same statement, unless that row holds a live
    /// lease: then the grant is undone (a session lock is unlocked; a transaction
    /// lock ends with the caller's rollback). `ON CONFLICT DO UPDATE` sees the row's
    /// latest committed version, so a lease granted concurrently is never missed,
    /// and lease grants take the key for their own transaction, so the three modes
    /// exclude each other and share one counter per name.
    ///
    /// Advisory locks stack per session: when this session already holds the key
    /// for the same owner (the session's record for a session lock; none for a
    /// nested transaction lock) it is not taken twice and the token is not bumped
    /// again: the current one is returned (idempotent retry, DESIGN.md rule 5). Held
    /// by this session for anyone else, the session is shared between clients (a
    /// transaction-pooling proxy): nothing is taken and the third column says so.
    ///
    /// Returns one row: (token or NULL, the live lease's remaining ms or NULL,
    /// shared session), and for the session statement a fourth column: the row's last
    /// committed token, which every session grant bumps at once (its statement commits
    /// by itself), so a refusal's marks the holder's grant (`hot_lock` counts holders,
    /// not attempts). A transaction holder's bump is not committed while it holds; the
    /// transaction statements, which no machine retries, have no fourth column.
    fn advisory_acquire_sql(&self, try_fn: &str, floor_param: Option<&str>) -> String {
        let session = try_fn == "pg_try_advisory_lock";
        format!(
            "WITH held AS (SELECT EXISTS ({held}) AS yes, {SESSION_OWNER} AS who), \
             state AS (SELECT yes AND coalesce(who, '') = $3::text AS again, \
             yes AND coalesce(who, '') <> $3::text AS shared FROM held), \
             got AS (SELECT CASE WHEN (SELECT yes FROM held) THEN false ELSE {take} END AS took), \
             bump AS (INSERT INTO {l} AS l (name, owner, token, expires_at) \
             SELECT $2::text, NULL, {next}, NULL FROM got WHERE took \
             ON CONFLICT (name) DO UPDATE SET owner = NULL, expires_at = NULL, \
             token = greatest(l.token + 1, EXCLUDED.token) \
             WHERE l.owner IS NULL OR l.expires_at <= clock_timestamp() RETURNING token), \
             mark AS (SELECT set_config({SESSION_VAR}, $3::text || ' ' || token::text, false) \
             FROM bump WHERE $3::text <> ''), \
             undo AS (SELECT {undo} FROM got WHERE took AND NOT EXISTS (SELECT 1 FROM bump)) \
             SELECT coalesce((SELECT token FROM bump), CASE WHEN state.again THEN {again} END), \
             {remaining}, state.shared{holder} \
             FROM state, (SELECT count(*) FROM mark) m, (SELECT count(*) FROM undo) u",
            held = held_sql("$1"),
            take = if try_fn == "pg_advisory_xact_lock" {
                // the blocking form returns void: taken once it returns
                "(SELECT true FROM (SELECT pg_advisory_xact_lock($1::bigint)) AS waited)".to_owned()
            } else {
                format!("{try_fn}($1::bigint)")
            },
            l = self.lease_table,
            next = next_token(token_floor(&self.token_table, "$2"), floor_param),
            undo = if session {
                "pg_advisory_unlock($1::bigint)"
            } else {
                "true"
            },
            again = if session {
                // the token the session recorded at its grant
                format!(
                    "nullif(split_part(current_setting({SESSION_VAR}, true), ' ', 2), '')::bigint"
                )
            } else {
                // this transaction bumped it, and holds the row
                format!(
                    "(SELECT token FROM {} WHERE name = $2::text)",
                    self.lease_table
                )
            },
            remaining = remaining_ms(&self.lease_table, "$2"),
            holder = if session {
                format!(
                    ", (SELECT token FROM {} WHERE name = $2::text)",
                    self.lease_table
                )
            } else {
                String::new()
            },
        )
    }
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
    } else if sqlstate == "42703" && message.contains("metadata") {
        protocol(format!(
            "{sqlstate}: {message} — the lease table predates holder metadata: run fencepost's \
             migration again, which adds the column (ALTER TABLE … ADD COLUMN IF NOT EXISTS \
             metadata text; Python: backend.migrate_sync() or await backend.migrate(); Node: \
             await backend.migrate(); or the SQL of the migration with any client)"
        ))
    } else if sqlstate == "42P01" {
        protocol(format!(
            "{sqlstate}: {message} — fencepost's tables are missing: run its migration once \
             (Python: backend.migrate_sync(), or await backend.migrate() with an asyncio \
             client; or run the SQL of fencepost.postgres.migration() with any client; Node: await \
             backend.migrate(), or the SQL of postgresMigration())"
        ))
    } else {
        protocol(format!("server error {sqlstate}: {message}"))
    }
}

pub(crate) fn read_acquire(reply: &SqlReply) -> Result<Read, ReadError> {
    match reply {
        SqlReply::Error { sqlstate, message } => Err(server_error(sqlstate, message)),
        SqlReply::Rows { rows } => match rows.as_slice() {
            [row] => read_acquire_columns(row),
            _ => Err(protocol(format!(
                "acquire: expected exactly one row, got {}",
                rows.len()
            ))),
        },
    }
}

/// The one row of an acquire statement, whichever mode's.
fn read_acquire_columns(row: &[SqlValue]) -> Result<Read, ReadError> {
    match row {
        // the advisory statements' third column: a session shared between clients
        [SqlValue::Null, _, SqlValue::Bool(true)] => Err(protocol(SHARED_SESSION.to_owned())),
        [token, remaining, SqlValue::Bool(false)] => {
            read_acquire_row(&[token.clone(), remaining.clone()])
        }
        // every acquire statement's fourth column: the holder's token, its grant's mark
        // for a refusal
        [first @ .., holder] if first.len() == 3 => {
            read_acquire_columns(first).map(|read| match (read, holder) {
                (
                    Read::Contended {
                        remaining, queued, ..
                    },
                    SqlValue::Int(t),
                ) => Read::Contended {
                    remaining,
                    queued,
                    holder: u64::try_from(*t).ok(),
                },
                (read, _) => read,
            })
        }
        // the lease grant's third column: how the previous holder ended
        [token, remaining, SqlValue::Text(previous)] => {
            read_acquire_row(&[token.clone(), remaining.clone()]).map(|read| match read {
                Read::Granted { token, base, .. } => Read::Granted {
                    token,
                    base,
                    previous: previous.parse().unwrap_or(Previous::Unknown),
                },
                other => other,
            })
        }
        [token, remaining, SqlValue::Null] => read_acquire_row(&[token.clone(), remaining.clone()]),
        row => read_acquire_row(row),
    }
}

/// Why an advisory lock is refused on a server session that holds it for another
/// client: the only way two clients share a session is a transaction-pooling proxy.
const SHARED_SESSION: &str = "this server session already holds the advisory lock for \
     another client: statements are going through a transaction-pooling proxy (such as \
     PgBouncer with pool_mode = transaction), where session advisory locks do not exclude \
     and every client would get the same token; use lease rows (mode=\"lease\"), which \
     work through any pooler, or a transaction lock (xact_lock) inside your transaction";

fn read_acquire_row(row: &[SqlValue]) -> Result<Read, ReadError> {
    match row {
        [SqlValue::Int(token), _] if *token > 0 => Ok(Read::Granted {
            token: FencingToken(*token as u64),
            base: None,
            previous: Previous::Unknown,
        }),
        [SqlValue::Null, SqlValue::Int(ms)] => Ok(Read::Contended {
            queued: false,
            remaining: u64::try_from(*ms)
                .ok()
                .filter(|&m| m > 0)
                .map(Duration::from_millis),
            holder: None,
        }),
        [SqlValue::Null, SqlValue::Null] => Ok(Read::Contended {
            remaining: None,
            queued: false,
            holder: None,
        }),
        _ => Err(protocol(format!(
            "acquire: expected one row (token or NULL, remaining ms or NULL), got {row:?}"
        ))),
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
        let s = b.acquire(evil, &OwnerId([1; 16]), 1_000, None, None);
        assert!(!s.sql.contains(evil));
        assert_eq!(s.params[0], SqlValue::Text(evil.to_owned()));
        assert_eq!(s.connection, PgConnection::Any);
        let session = PostgresBackend {
            mode: PgMode::Session,
            ..PostgresBackend::default()
        };
        assert_eq!(
            session
                .acquire("r", &OwnerId([1; 16]), 1_000, None, None)
                .connection,
            PgConnection::Dedicated
        );
        // every mode takes the name's advisory key, and the advisory modes its owner
        assert_eq!(
            s.params[3],
            SqlValue::Int(advisory_key("fencepost", evil)),
            "the lease grant's gate"
        );
        let owner = OwnerId([1; 16]);
        for stmt in [
            session.acquire("r", &owner, 1_000, None, None),
            session.renew("r", &owner, 1_000),
            session.release("r", &owner, true),
        ] {
            assert!(
                stmt.params.contains(&SqlValue::Text(owner.to_string())),
                "{stmt:?}"
            );
        }
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
    fn lease_grants_carry_metadata_last_and_operator_queries_escape_the_prefix() {
        let b = PostgresBackend::default();
        let owner = OwnerId([1; 16]);
        let meta = r#"{"pid":"7","host":"a"}"#;
        let plain = b.acquire("r", &owner, 1_000, None, None);
        assert_eq!(plain.params.len(), 5);
        assert_eq!(
            plain.params[4],
            SqlValue::Null,
            "a grant without metadata clears it"
        );
        assert!(
            plain.sql.contains("$5::text") && plain.sql.contains("metadata = EXCLUDED.metadata")
        );
        let floored = b.acquire("r", &owner, 1_000, Some(FencingToken(9)), Some(meta));
        assert_eq!(floored.params[4], SqlValue::Int(9));
        // canonical JSON: keys in order
        assert_eq!(
            floored.params[5],
            SqlValue::Text(r#"{"host":"a","pid":"7"}"#.to_owned())
        );
        assert!(floored.sql.contains("$6::text"));
        assert!(b.release("r", &owner, true).sql.contains("metadata = NULL"));
        assert!(lock_state_statement(&b, "r", true)
            .sql
            .contains("metadata = NULL"));
        let session = PostgresBackend {
            mode: PgMode::Session,
            ..PostgresBackend::default()
        };
        assert!(!session
            .acquire("r", &owner, 1_000, None, None)
            .params
            .contains(&SqlValue::Null));
        let m = b.migration();
        assert!(m.contains("metadata text\n"));
        assert!(m.contains("ALTER TABLE fencepost_leases ADD COLUMN IF NOT EXISTS metadata text;"));
        let list = list_statement(&b, r"a%b_c\d", 0);
        assert_eq!(
            list.params,
            vec![SqlValue::Text(r"a\%b\_c\\d%".to_owned()), SqlValue::Int(1)]
        );
        assert!(list.sql.ends_with("ORDER BY name LIMIT $2::bigint"));
        assert_eq!(
            list_statement(&b, "", u64::MAX).params[1],
            SqlValue::Int(PG_LIST_MAX as i64)
        );
        assert_eq!(
            inspect_statement(&b, "r").params,
            vec![SqlValue::Text("r".into())]
        );
    }

    #[test]
    fn holder_rows_are_read_strictly() {
        use SqlValue::*;
        let rows = |r: Vec<Vec<SqlValue>>| SqlReply::Rows { rows: r };
        let row = vec![
            Text("r".into()),
            Text("ab".repeat(16)),
            Int(7),
            Int(1_500),
            Text(r#"{"host":"a"}"#.into()),
        ];
        let found = read_pg_holders(&rows(vec![row.clone()])).unwrap();
        assert_eq!(found.len(), 1);
        let h = &found[0];
        assert_eq!(
            (h.name.as_str(), h.token, h.ttl_left, h.waiters),
            (
                "r",
                Some(FencingToken(7)),
                Some(Duration::from_millis(1_500)),
                None
            )
        );
        assert_eq!(h.metadata.as_ref().unwrap()["host"], "a");
        let mut bare = row.clone();
        bare[4] = Null;
        assert_eq!(
            read_pg_holders(&rows(vec![bare])).unwrap()[0].metadata,
            None
        );
        let mut not_json = row;
        not_json[4] = Text("[1]".into());
        assert_eq!(
            read_pg_holders(&rows(vec![not_json])).unwrap()[0].metadata,
            None
        );
        assert_eq!(read_pg_holders(&rows(vec![])), Ok(vec![]));
        assert!(read_pg_holders(&rows(vec![vec![Text("r".into())]])).is_err());
        let missing = SqlReply::Error {
            sqlstate: "42703".into(),
            message: "column \"metadata\" does not exist".into(),
        };
        let err = read_pg_holders(&missing).unwrap_err();
        assert!(err.message.contains("migration"), "{err}");
        match read_acquire(&missing) {
            Err(ReadError::Protocol(e)) => assert!(e.message.contains("ADD COLUMN"), "{e}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn replies_are_read_strictly() {
        let rows = |r: Vec<Vec<SqlValue>>| SqlReply::Rows { rows: r };
        use SqlValue::*;
        assert_eq!(
            read_acquire(&rows(vec![vec![Int(7), Int(900)]])),
            Ok(Read::Granted {
                token: FencingToken(7),
                base: None,
                previous: Previous::Unknown
            })
        );
        assert_eq!(
            read_acquire(&rows(vec![vec![Null, Int(250)]])),
            Ok(Read::Contended {
                queued: false,
                remaining: Some(Duration::from_millis(250)),
                holder: None,
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
            Err(ReadError::Protocol(e)) => {
                assert!(e.message.contains("migrate_sync()"), "{e}");
                assert!(!e.message.contains("::"), "names no Rust function: {e}");
            }
            other => panic!("{other:?}"),
        }
        // the advisory statements' third column
        assert_eq!(
            read_acquire(&rows(vec![vec![Int(7), Null, Bool(false)]])),
            Ok(Read::Granted {
                token: FencingToken(7),
                base: None,
                previous: Previous::Unknown
            })
        );
        assert_eq!(
            read_acquire(&rows(vec![vec![Null, Int(250), Bool(false)]])),
            Ok(Read::Contended {
                queued: false,
                remaining: Some(Duration::from_millis(250)),
                holder: None,
            })
        );
        // their fourth column: the row's token, the holder's grant's mark
        assert_eq!(
            read_acquire(&rows(vec![vec![Null, Null, Bool(false), Int(12)]])),
            Ok(Read::Contended {
                queued: false,
                remaining: None,
                holder: Some(12),
            })
        );
        assert!(matches!(
            read_acquire(&rows(vec![vec![Null, Null, Bool(true), Int(12)]])),
            Err(ReadError::Protocol(_))
        ));
        match read_acquire(&rows(vec![vec![Null, Null, Bool(true)]])) {
            Err(ReadError::Protocol(e)) => {
                assert!(e.message.contains("transaction-pooling"), "{e}");
                assert!(e.message.contains("lease rows") && e.message.contains("xact_lock"));
            }
            other => panic!("{other:?}"),
        }
        assert!(read_acquire(&rows(vec![vec![Int(7), Null, Bool(true)]])).is_err());
        assert_eq!(read_owner_check(&rows(vec![vec![Int(1)]])), Ok(Read::Done));
        assert_eq!(read_owner_check(&rows(vec![])), Ok(Read::NotHeld));
        assert!(read_owner_check(&rows(vec![vec![], vec![]])).is_err());
    }
}
