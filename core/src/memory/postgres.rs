//! [`MemoryPostgres`]: an in-memory PostgreSQL that runs the statements of the lease-rows
//! mode ([`PgMode::Lease`]) against the tables of
//! [`PostgresBackend::migration`], with an injected virtual `now` standing for
//! `clock_timestamp()`.
//!
//! A statement is recognised by its exact text, compared with the texts the backend's
//! own functions build for the same settings (so the two cannot drift apart), and its
//! SQL is executed as PostgreSQL executes it:
//!
//! * **acquire** — the `old` snapshot, the advisory gate (always free here: no advisory
//!   lock is ever held, session mode is not modelled), the upsert (a free, expired or
//!   own row is taken; a new grant's token is `greatest(row + 1, floor + 1, $5)`, a
//!   retry of the same owner keeps it), the remaining milliseconds of the row *as the
//!   statement's snapshot saw it* (`ceil((expires_at − now) / 1 ms)`; a data-modifying
//!   CTE's changes are invisible to the rest of its statement), and the previous
//!   holder's column;
//! * **renew**, **release** and **cleanup** — owner-conditional `UPDATE`s of a row
//!   unexpired at `now`, with or without the `pg_notify` wrapper (a release that freed
//!   something records a notification on its channel, at once: the statement is its
//!   own transaction);
//! * the operator's [`lock_state_statement`] (query and reset; no advisory holder), the
//!   migration (a no-op), and a contender's `LISTEN` wait, which does not block here:
//!   it answers with no rows at once (a host or simulator emulating the blocking wait
//!   parks the caller itself, asking [`MemoryPostgres::last_notify`]).
//!
//! Anything else (session or transaction advisory statements, a statement of other
//! table names, parameters of the wrong type or count) is an [`SqlReply::Error`]: SQLSTATE
//! `XX000` for an unknown statement, `08P01` for wrong parameters, `22008` for a
//! timestamp out of range; never a panic.
//!
//! Time: `timestamptz` has microsecond resolution, so `now` is truncated to whole
//! microseconds. PostgreSQL reads `clock_timestamp()` anew at each call within one
//! statement; here one statement sees one instant (the calls are microseconds apart
//! on a real server).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::backends::postgres::{lock_state_statement, PgConnection, PgMode, PostgresBackend};
use crate::backends::{Reply, RequestBody, SqlReply, SqlStatement, SqlValue};
use crate::{Instant, OwnerId};

/// A lease row's `expires_at` (a nullable `timestamptz`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PgExpiry {
    /// `NULL`: a row bumped by an advisory grant (never written by the lease mode).
    Null,
    /// `'-infinity'`: freed by its holder's own release.
    NegInfinity,
    /// A finite instant, in microseconds of the server's clock (the injected time).
    At(i64),
}

impl PgExpiry {
    /// `expires_at <= now` as SQL evaluates it: `NULL` is not true.
    fn passed(self, now_us: i64) -> bool {
        match self {
            PgExpiry::Null => false,
            PgExpiry::NegInfinity => true,
            PgExpiry::At(t) => t <= now_us,
        }
    }

    /// `expires_at > now` as SQL evaluates it.
    fn ahead(self, now_us: i64) -> bool {
        matches!(self, PgExpiry::At(t) if t > now_us)
    }

    /// The instant it stands for, if finite.
    pub fn instant(self) -> Option<Instant> {
        match self {
            PgExpiry::At(t) => Some(Instant::from_nanos((t.max(0) as u64).saturating_mul(1_000))),
            _ => None,
        }
    }
}

/// One row of the lease table (`name` is its key in [`MemoryPostgres::row`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PgLeaseRow {
    /// The holder's owner id (32 hex digits), `NULL` when free.
    pub owner: Option<String>,
    /// The name's token counter: the fencing token of the latest grant.
    pub token: i64,
    /// When the lease ends on the server's clock (`NULL` for a row only an advisory
    /// grant bumped, `'-infinity'` once released).
    pub expires_at: PgExpiry,
    /// The holder's metadata (the `metadata` column), `NULL` when none or free.
    pub metadata: Option<String>,
}

impl PgLeaseRow {
    /// Whether the row holds a live lease at `now` (an owner, unexpired).
    pub fn live(&self, now: Instant) -> bool {
        self.owner.is_some() && self.expires_at.ahead(micros(now))
    }
}

/// The statement texts of one set of settings, built by the backend's own functions.
#[derive(Debug)]
struct Texts {
    acquire: String,
    acquire_floored: String,
    renew: String,
    renew_many: String,
    /// `[clean, cleanup]`, without and with the `pg_notify` wrapper.
    release: [String; 2],
    release_notify: [String; 2],
    state_query: String,
    state_reset: String,
    migration: String,
}

impl Texts {
    fn new(settings: &PostgresBackend) -> Self {
        let lease = PostgresBackend {
            mode: PgMode::Lease,
            notify: false,
            ..settings.clone()
        };
        let notify = PostgresBackend {
            notify: true,
            ..lease.clone()
        };
        let owner = OwnerId([0; 16]);
        let floor = Some(crate::FencingToken(1));
        Texts {
            acquire: lease.acquire("", &owner, 1, None, None).sql,
            acquire_floored: lease.acquire("", &owner, 1, floor, None).sql,
            renew: lease.renew("", &owner, 1).sql,
            renew_many: lease.renew_many(&[]).sql,
            release: [true, false].map(|clean| lease.release("", &owner, clean).sql),
            release_notify: [true, false].map(|clean| notify.release("", &owner, clean).sql),
            state_query: lock_state_statement(&lease, "", false).sql,
            state_reset: lock_state_statement(&lease, "", true).sql,
            migration: lease.migration(),
        }
    }
}

/// An in-memory PostgreSQL with fencepost's lease and token tables, driven by injected
/// time. See the module docs for what it runs.
#[derive(Clone, Debug)]
pub struct MemoryPostgres {
    texts: Arc<Texts>,
    rows: BTreeMap<String, PgLeaseRow>,
    /// The token table: per name, a floor every grant's token stays above.
    floors: BTreeMap<String, i64>,
    /// Per channel, the instant of its latest notification.
    notified: BTreeMap<String, Instant>,
    /// Notifications not taken yet by [`MemoryPostgres::take_notifications`].
    pending: Vec<String>,
}

impl Default for MemoryPostgres {
    fn default() -> Self {
        Self::new(&PostgresBackend::default())
    }
}

/// The server clock of `now`: whole microseconds.
fn micros(now: Instant) -> i64 {
    i64::try_from(now.as_nanos() / 1_000).unwrap_or(i64::MAX)
}

fn error(sqlstate: &str, message: impl Into<String>) -> SqlReply {
    SqlReply::Error {
        sqlstate: sqlstate.to_owned(),
        message: message.into(),
    }
}

fn rows(rows: Vec<Vec<SqlValue>>) -> SqlReply {
    SqlReply::Rows { rows }
}

/// `ceil(extract(epoch FROM d) * 1000)` of an interval of `d` microseconds.
fn ceil_ms(d: i64) -> i64 {
    -((-d).div_euclid(1_000))
}

impl MemoryPostgres {
    /// An empty database with the tables of `settings` (its `lease_table`,
    /// `token_table` and `namespace`; both `notify` variants of the releases run).
    pub fn new(settings: &PostgresBackend) -> Self {
        MemoryPostgres {
            texts: Arc::new(Texts::new(settings)),
            rows: BTreeMap::new(),
            floors: BTreeMap::new(),
            notified: BTreeMap::new(),
            pending: Vec::new(),
        }
    }

    /// Writes the whole database state in a canonical order. Test-only (feature
    /// `model`): the model checker's state hash.
    #[cfg(feature = "model")]
    pub(crate) fn fingerprint(&self, out: &mut impl core::fmt::Write) -> core::fmt::Result {
        write!(
            out,
            "{:?}{:?}{:?}{:?}",
            self.rows, self.floors, self.notified, self.pending
        )
    }

    /// The lease row of `name`, if it has one.
    pub fn row(&self, name: &str) -> Option<&PgLeaseRow> {
        self.rows.get(name)
    }

    /// Sets the token table's row of `name` (what an operator's recovery writes): every
    /// later grant's token is above `token`.
    pub fn set_token_floor(&mut self, name: &str, token: i64) {
        self.floors.insert(name.to_owned(), token);
    }

    /// The instant of the latest notification on `channel`, if any.
    pub fn last_notify(&self, channel: &str) -> Option<Instant> {
        self.notified.get(channel).copied()
    }

    /// The channels notified since the last call, in order.
    pub fn take_notifications(&mut self) -> Vec<String> {
        core::mem::take(&mut self.pending)
    }

    /// The next instant after `now` at which a live lease row expires.
    pub fn next_expiry(&self, now: Instant) -> Option<Instant> {
        self.rows
            .values()
            .filter(|r| r.owner.is_some())
            .filter_map(|r| r.expires_at.instant())
            .filter(|&t| t > now)
            .min()
    }

    /// Executes a request body at `now`: an [`SqlReply::Error`] for anything but a
    /// statement.
    pub fn execute(&mut self, now: Instant, body: &RequestBody) -> Reply {
        Reply::Sql(match body {
            RequestBody::Sql(statement) => self.run(now, statement),
            _ => error("XX000", "the in-memory PostgreSQL runs SQL statements only"),
        })
    }

    /// Runs one statement at `now` and returns its reply as the adapters convert it
    /// (bigint as `Int`, text as `Text`, boolean as `Bool`).
    pub fn run(&mut self, now: Instant, s: &SqlStatement) -> SqlReply {
        let t = Arc::clone(&self.texts);
        let sql = s.sql.as_str();
        let now_us = micros(now);
        if s.connection == PgConnection::Listen {
            return match s.params.as_slice() {
                [SqlValue::Text(channel), SqlValue::Int(_)]
                    if sql.strip_prefix("LISTEN ") == Some(channel.as_str())
                        && channel.starts_with("fencepost_") =>
                {
                    rows(vec![])
                }
                _ => error("XX000", format!("not a fencepost wait: {sql:?}")),
            };
        }
        if sql == t.acquire || sql == t.acquire_floored {
            let floored = sql == t.acquire_floored;
            match (s.params.as_slice(), floored) {
                (
                    [SqlValue::Text(name), SqlValue::Text(owner), SqlValue::Int(ttl), SqlValue::Int(_), meta],
                    false,
                ) => self.acquire(now_us, name, owner, *ttl, None, meta),
                (
                    [SqlValue::Text(name), SqlValue::Text(owner), SqlValue::Int(ttl), SqlValue::Int(_), SqlValue::Int(floor), meta],
                    true,
                ) => self.acquire(now_us, name, owner, *ttl, Some(*floor), meta),
                _ => bad_params("acquire", s),
            }
        } else if sql == t.renew {
            match s.params.as_slice() {
                [SqlValue::Text(name), SqlValue::Text(owner), SqlValue::Int(ttl)] => {
                    let Some(until) = expiry_after(now_us, *ttl) else {
                        return out_of_range();
                    };
                    match self.owned_row(now_us, name, owner) {
                        Some(row) => {
                            row.expires_at = PgExpiry::At(until);
                            rows(vec![vec![SqlValue::Int(row.token)]])
                        }
                        None => rows(vec![]),
                    }
                }
                _ => bad_params("renew", s),
            }
        } else if sql == t.renew_many {
            #[derive(serde::Deserialize)]
            struct Renewal {
                i: i64,
                name: String,
                owner: String,
                ttl_ms: i64,
            }
            let renewals = match s.params.as_slice() {
                [SqlValue::Text(json)] => serde_json::from_str::<Vec<Renewal>>(json),
                _ => return bad_params("renew_many", s),
            };
            let Ok(renewals) = renewals else {
                return error("22P02", "invalid input syntax for type json");
            };
            let mut renewed = Vec::new();
            for r in renewals {
                let Some(until) = expiry_after(now_us, r.ttl_ms) else {
                    return out_of_range();
                };
                if let Some(row) = self.owned_row(now_us, &r.name, &r.owner) {
                    row.expires_at = PgExpiry::At(until);
                    renewed.push(vec![SqlValue::Int(r.i), SqlValue::Int(row.token)]);
                }
            }
            rows(renewed)
        } else if let Some(i) = t.release.iter().position(|r| r == sql) {
            match s.params.as_slice() {
                [SqlValue::Text(name), SqlValue::Text(owner)] => {
                    self.release(now_us, name, owner, i == 0, None)
                }
                _ => bad_params("release", s),
            }
        } else if let Some(i) = t.release_notify.iter().position(|r| r == sql) {
            match s.params.as_slice() {
                [SqlValue::Text(name), SqlValue::Text(owner), SqlValue::Text(channel)] => {
                    self.release(now_us, name, owner, i == 0, Some((now, channel)))
                }
                _ => bad_params("release", s),
            }
        } else if sql == t.state_query || sql == t.state_reset {
            match s.params.as_slice() {
                [SqlValue::Text(name), SqlValue::Int(_)] => {
                    let reset = sql == t.state_reset;
                    let live = match self.rows.get_mut(name.as_str()) {
                        Some(row) if row.owner.is_some() && row.expires_at.ahead(now_us) => {
                            if reset {
                                // freed at this instant, not by its holder
                                row.owner = None;
                                row.expires_at = PgExpiry::At(now_us);
                                row.metadata = None;
                            }
                            true
                        }
                        _ => false,
                    };
                    // no session here holds an advisory lock
                    rows(vec![vec![SqlValue::Bool(live), SqlValue::Null]])
                }
                _ => bad_params("lock state", s),
            }
        } else if sql == t.migration && s.params.is_empty() {
            rows(vec![])
        } else {
            error(
                "XX000",
                format!("the in-memory PostgreSQL does not run this statement: {sql:?}"),
            )
        }
    }

    /// The row of `name` held by `owner` and unexpired at `now`: the `WHERE` of renew
    /// and release.
    fn owned_row(&mut self, now_us: i64, name: &str, owner: &str) -> Option<&mut PgLeaseRow> {
        self.rows
            .get_mut(name)
            .filter(|r| r.owner.as_deref() == Some(owner) && r.expires_at.ahead(now_us))
    }

    fn release(
        &mut self,
        now_us: i64,
        name: &str,
        owner: &str,
        clean: bool,
        notify: Option<(Instant, &String)>,
    ) -> SqlReply {
        let Some(row) = self.owned_row(now_us, name, owner) else {
            return rows(vec![]);
        };
        row.owner = None;
        row.metadata = None;
        row.expires_at = if clean {
            PgExpiry::NegInfinity
        } else {
            PgExpiry::At(now_us)
        };
        let token = SqlValue::Int(row.token);
        match notify {
            None => rows(vec![vec![token]]),
            Some((now, channel)) => {
                self.notified.insert(channel.clone(), now);
                self.pending.push(channel.clone());
                // `pg_notify(…)::text`: void's text is empty
                rows(vec![vec![token, SqlValue::Text(String::new())]])
            }
        }
    }

    fn acquire(
        &mut self,
        now_us: i64,
        name: &str,
        owner: &str,
        ttl_ms: i64,
        floor: Option<i64>,
        metadata: &SqlValue,
    ) -> SqlReply {
        let metadata = match metadata {
            SqlValue::Null => None,
            SqlValue::Text(text) => Some(text.clone()),
            other => {
                return error(
                    "08P01",
                    format!("acquire: metadata must be text or NULL, got {other:?}"),
                )
            }
        };
        let Some(until) = expiry_after(now_us, ttl_ms) else {
            return out_of_range();
        };
        let old = self.rows.get(name).cloned();
        let table_floor = self.floors.get(name).copied();
        // `{next}`: one above the token table's floor, or the caller's if higher
        let Some(next) = table_floor.unwrap_or(0).checked_add(1) else {
            return bigint_out_of_range();
        };
        let next = floor.map_or(next, |f| next.max(f));
        let granted = match &old {
            None => Some(next),
            Some(row) => {
                let takeable = row.owner.is_none()
                    || row.owner.as_deref() == Some(owner)
                    || row.expires_at.passed(now_us);
                if !takeable {
                    None
                } else if row.owner.as_deref() == Some(owner) {
                    Some(row.token)
                } else {
                    match row.token.checked_add(1) {
                        Some(bumped) => Some(bumped.max(next)),
                        None => return bigint_out_of_range(),
                    }
                }
            }
        };
        // the remaining time of the row as the statement's snapshot saw it
        let remaining = match &old {
            Some(PgLeaseRow {
                owner: Some(_),
                expires_at,
                ..
            }) => match expires_at {
                PgExpiry::Null => SqlValue::Null,
                PgExpiry::At(t) => SqlValue::Int(ceil_ms(t.saturating_sub(now_us))),
                PgExpiry::NegInfinity => {
                    return error("22008", "cannot subtract infinite timestamps")
                }
            },
            _ => SqlValue::Null,
        };
        // the holder's token as the statement's snapshot saw it (`old` with an owner)
        let holder = match &old {
            Some(PgLeaseRow {
                owner: Some(_),
                token,
                ..
            }) => SqlValue::Int(*token),
            _ => SqlValue::Null,
        };
        let Some(token) = granted else {
            return rows(vec![vec![
                SqlValue::Null,
                remaining,
                SqlValue::Null,
                holder,
            ]]);
        };
        let previous = match &old {
            None if table_floor.is_some() => "unknown",
            None => "none",
            Some(row) if row.token.checked_add(1) != Some(token) => "unknown",
            Some(row) if row.owner.is_some() => "expired",
            Some(row) if row.expires_at == PgExpiry::NegInfinity => "released",
            Some(row) if row.expires_at != PgExpiry::Null => "expired",
            Some(_) => "unknown",
        };
        self.rows.insert(
            name.to_owned(),
            PgLeaseRow {
                owner: Some(owner.to_owned()),
                token,
                expires_at: PgExpiry::At(until),
                metadata,
            },
        );
        rows(vec![vec![
            SqlValue::Int(token),
            remaining,
            SqlValue::Text(previous.to_owned()),
            holder,
        ]])
    }
}

/// `clock_timestamp() + ttl * interval '1 millisecond'`, or `None` out of range.
fn expiry_after(now_us: i64, ttl_ms: i64) -> Option<i64> {
    ttl_ms
        .checked_mul(1_000)
        .and_then(|d| now_us.checked_add(d))
}

fn out_of_range() -> SqlReply {
    error("22008", "timestamp out of range")
}

fn bigint_out_of_range() -> SqlReply {
    error("22003", "bigint out of range")
}

fn bad_params(what: &str, s: &SqlStatement) -> SqlReply {
    error(
        "08P01",
        format!("{what}: unexpected parameters {:?}", s.params),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FencingToken;

    const A: OwnerId = OwnerId([0xa; 16]);
    const B: OwnerId = OwnerId([0xb; 16]);

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    fn row(v: &[SqlValue]) -> SqlReply {
        rows(vec![v.to_vec()])
    }

    use SqlValue::{Int, Null, Text};

    #[test]
    fn a_lease_cycle_reads_like_the_sql() {
        let b = PostgresBackend::default();
        let mut pg = MemoryPostgres::new(&b);
        let text = |s: &str| Text(s.to_owned());
        // first grant of the name: token 1, nobody before
        let r = pg.run(ms(0), &b.acquire("r", &A, 1_000, None, None));
        assert_eq!(r, row(&[Int(1), Null, text("none"), Null]));
        // held: B gets the remaining time, 1000 − 250.5 ms rounded up
        let r = pg.run(
            Instant::from_nanos(250_500_000),
            &b.acquire("r", &B, 1_000, None, None),
        );
        // … and the holder's token, which marks its grant
        assert_eq!(r, row(&[Null, Int(750), Null, Int(1)]));
        // A's idempotent retry keeps its token; the snapshot's remaining time comes along
        let r = pg.run(ms(300), &b.acquire("r", &A, 1_000, None, None));
        assert_eq!(r, row(&[Int(1), Int(700), text("unknown"), Int(1)]));
        // renew from 400 ms: until 1400
        assert_eq!(pg.run(ms(400), &b.renew("r", &A, 1_000)), row(&[Int(1)]));
        assert_eq!(
            pg.row("r").map(|r| r.expires_at),
            Some(PgExpiry::At(1_400_000))
        );
        assert_eq!(pg.run(ms(500), &b.renew("r", &B, 1_000)), rows(vec![]));
        // release notifies its channel; B's grant then reads `released`
        let r = pg.run(ms(600), &b.release("r", &A, true));
        assert_eq!(r, row(&[Int(1), text("")]));
        let channel = crate::backends::postgres::notify_channel("fencepost", "r");
        assert_eq!(pg.take_notifications(), std::slice::from_ref(&channel));
        assert_eq!(pg.last_notify(&channel), Some(ms(600)));
        assert_eq!(pg.run(ms(601), &b.release("r", &A, true)), rows(vec![]));
        let r = pg.run(ms(700), &b.acquire("r", &B, 1_000, None, None));
        assert_eq!(r, row(&[Int(2), Null, text("released"), Null]));
        // B's lease runs out at 1700: no renewal at its end, A takes it (`expired`)
        assert_eq!(pg.run(ms(1_700), &b.renew("r", &B, 1_000)), rows(vec![]));
        let r = pg.run(ms(1_700), &b.acquire("r", &A, 1_000, None, None));
        assert_eq!(r, row(&[Int(3), Int(0), text("expired"), Int(2)]));
        // a cleanup frees it at this instant: the next grant reads `expired`
        let r = pg.run(ms(1_800), &b.release("r", &A, false));
        assert_eq!(r, row(&[Int(3), text("")]));
        let r = pg.run(
            ms(1_900),
            &b.acquire("r", &B, 1_000, Some(FencingToken(10)), None),
        );
        assert_eq!(
            r,
            row(&[Int(10), Null, text("unknown"), Null]),
            "the floor: unknown"
        );
        assert_eq!(pg.next_expiry(ms(1_900)), Some(ms(2_900)));
    }

    #[test]
    fn the_token_table_and_the_operator_statements() {
        let b = PostgresBackend {
            notify: false,
            ..PostgresBackend::default()
        };
        let mut pg = MemoryPostgres::new(&b);
        pg.set_token_floor("r", 41);
        let r = pg.run(ms(0), &b.acquire("r", &A, 1_000, None, None));
        assert_eq!(r, row(&[Int(42), Null, Text("unknown".into()), Null]));
        let query = lock_state_statement(&b, "r", false);
        let reset = lock_state_statement(&b, "r", true);
        assert_eq!(pg.run(ms(1), &query), row(&[SqlValue::Bool(true), Null]));
        assert_eq!(pg.run(ms(2), &reset), row(&[SqlValue::Bool(true), Null]));
        assert_eq!(pg.run(ms(3), &query), row(&[SqlValue::Bool(false), Null]));
        // A's renewal finds it gone; without notify the release is the bare UPDATE
        assert_eq!(pg.run(ms(4), &b.renew("r", &A, 1_000)), rows(vec![]));
        let r = pg.run(ms(5), &b.acquire("r", &B, 1_000, None, None));
        assert_eq!(r, row(&[Int(43), Null, Text("expired".into()), Null]));
        assert_eq!(pg.run(ms(6), &b.release("r", &B, true)), row(&[Int(43)]));
        assert!(pg.take_notifications().is_empty());
        let migration = SqlStatement {
            sql: b.migration(),
            params: vec![],
            connection: PgConnection::Any,
        };
        assert_eq!(pg.run(ms(7), &migration), rows(vec![]));
    }

    #[test]
    fn unknown_statements_and_bad_parameters_are_errors() {
        let b = PostgresBackend::default();
        let mut pg = MemoryPostgres::new(&b);
        let sqlstate = |r: SqlReply| match r {
            SqlReply::Error { sqlstate, .. } => sqlstate,
            other => panic!("{other:?}"),
        };
        let session = PostgresBackend {
            mode: PgMode::Session,
            ..b.clone()
        };
        let stmt = session.acquire("r", &A, 1_000, None, None);
        assert_eq!(sqlstate(pg.run(ms(0), &stmt)), "XX000");
        let other_table = PostgresBackend {
            lease_table: "other".into(),
            ..b.clone()
        };
        let stmt = other_table.acquire("r", &A, 1_000, None, None);
        assert_eq!(sqlstate(pg.run(ms(0), &stmt)), "XX000");
        let mut stmt = b.acquire("r", &A, 1_000, None, None);
        stmt.params[2] = Text("1000".into());
        assert_eq!(sqlstate(pg.run(ms(0), &stmt)), "08P01");
        stmt.params.pop();
        assert_eq!(sqlstate(pg.run(ms(0), &stmt)), "08P01");
        let stmt = SqlStatement {
            sql: "LISTEN x; DROP TABLE t".into(),
            params: vec![Text("x".into()), Int(1)],
            connection: PgConnection::Listen,
        };
        assert_eq!(sqlstate(pg.run(ms(0), &stmt)), "XX000");
        let mut stmt = b.renew("r", &A, 1_000);
        stmt.params[2] = Int(i64::MAX);
        assert_eq!(sqlstate(pg.run(ms(0), &stmt)), "22008");
        let r = pg.execute(
            ms(0),
            &RequestBody::Etcd(crate::backends::etcd::EtcdRequest::LeaseRevoke { id: 1 }),
        );
        assert!(matches!(r, Reply::Sql(SqlReply::Error { .. })));
    }

    #[test]
    fn remaining_time_rounds_up_like_ceil() {
        assert_eq!(ceil_ms(1_500), 2);
        assert_eq!(ceil_ms(1_000), 1);
        assert_eq!(ceil_ms(0), 0);
        assert_eq!(ceil_ms(-1_500), -1);
    }
}
