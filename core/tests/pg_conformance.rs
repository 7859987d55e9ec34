//! `MemoryPostgres` against a real PostgreSQL, statement for statement: the lease-rows
//! statements of three owners' lock cycles (grants, contention, a retry, renewals,
//! releases with and without `pg_notify`, an expiry, a cleanup, a token floor, the token
//! table, the operator's query and reset) run on both, and every reply must be the
//! same — the remaining milliseconds within a tolerance, since the real server's clock
//! is the wall clock and the in-memory one is given the time elapsed since the start.
//! Ignored without a server; run with `FENCEPOST_PG_URL=postgres://…
//! cargo test -p fencepost-core --test pg_conformance -- --ignored` (e.g. from
//! `scripts/services/postgres.sh start`). The tables get names of their own, dropped at
//! the end.

use std::time::{Duration, Instant as WallClock};

use fencepost_core::backends::postgres::lock_state_statement;
use fencepost_core::backends::{PostgresBackend, SqlReply, SqlStatement, SqlValue};
use fencepost_core::memory::MemoryPostgres;
use fencepost_core::{FencingToken, Instant, OwnerId};
use tokio_postgres::types::{ToSql, Type};

/// Runs `s` on the real server, converting the rows as the Rust adapter does.
async fn real(client: &tokio_postgres::Client, s: &SqlStatement) -> SqlReply {
    let params: Vec<(Box<dyn ToSql + Sync + Send>, Type)> = (s.params.iter())
        .map(|p| -> (Box<dyn ToSql + Sync + Send>, Type) {
            match p {
                SqlValue::Null => (Box::new(Option::<String>::None), Type::TEXT),
                SqlValue::Bool(b) => (Box::new(*b), Type::BOOL),
                SqlValue::Int(n) => (Box::new(*n), Type::INT8),
                SqlValue::Text(t) => (Box::new(t.clone()), Type::TEXT),
            }
        })
        .collect();
    let refs: Vec<(&(dyn ToSql + Sync), Type)> = (params.iter())
        .map(|(v, t)| (v.as_ref() as &(dyn ToSql + Sync), t.clone()))
        .collect();
    match client.query_typed(&s.sql, &refs).await {
        Ok(rows) => SqlReply::Rows {
            rows: rows
                .iter()
                .map(|r| {
                    (0..r.len())
                        .map(|i| {
                            let ty = r.columns()[i].type_().clone();
                            let v = if ty == Type::INT8 {
                                r.get::<_, Option<i64>>(i).map(SqlValue::Int)
                            } else if ty == Type::BOOL {
                                r.get::<_, Option<bool>>(i).map(SqlValue::Bool)
                            } else {
                                r.get::<_, Option<String>>(i).map(SqlValue::Text)
                            };
                            v.unwrap_or(SqlValue::Null)
                        })
                        .collect()
                })
                .collect(),
        },
        Err(e) => match e.as_db_error() {
            Some(db) => SqlReply::Error {
                sqlstate: db.code().code().to_owned(),
                message: db.message().to_owned(),
            },
            None => panic!("transport error: {e}"),
        },
    }
}

/// Equal, except an acquire's remaining milliseconds (its second column) may differ by
/// the clocks' skew.
fn same(what: &str, real: &SqlReply, mem: &SqlReply) {
    const SKEW_MS: i64 = 150;
    let ok = match (real, mem) {
        (SqlReply::Rows { rows: r }, SqlReply::Rows { rows: m }) => {
            r.len() == m.len()
                && r.iter().zip(m).all(|(r, m)| {
                    r.len() == m.len()
                        && r.iter().zip(m).enumerate().all(|(i, (a, b))| match (a, b) {
                            // an acquire's row: (token, remaining ms, previous, holder)
                            (SqlValue::Int(a), SqlValue::Int(b)) if i == 1 && r.len() == 4 => {
                                (a - b).abs() <= SKEW_MS
                            }
                            _ => a == b,
                        })
                })
        }
        (a, b) => a == b,
    };
    assert!(ok, "{what}:\n  real:   {real:?}\n  memory: {mem:?}");
    eprintln!("{what}: {real:?}");
}

#[tokio::test]
#[ignore = "needs a PostgreSQL: FENCEPOST_PG_URL=postgres://..."]
async fn memory_postgres_replies_like_a_real_postgres() {
    let url = std::env::var("FENCEPOST_PG_URL").expect("FENCEPOST_PG_URL");
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connects");
    tokio::spawn(connection);
    let suffix = std::process::id();
    let b = PostgresBackend {
        lease_table: format!("fp_conformance_leases_{suffix}"),
        token_table: format!("fp_conformance_tokens_{suffix}"),
        ..PostgresBackend::default()
    };
    let quiet = PostgresBackend {
        notify: false,
        ..b.clone()
    };
    client
        .batch_execute(&b.migration())
        .await
        .expect("migration");
    let mut mem = MemoryPostgres::new(&b);
    let started = WallClock::now();
    let now = || Instant::from_nanos(started.elapsed().as_nanos() as u64);
    let (a, bo, c) = (OwnerId([1; 16]), OwnerId([2; 16]), OwnerId([3; 16]));
    let steps: Vec<(&str, SqlStatement)> = vec![
        ("A acquires", b.acquire_statement("r", &a, 2_000, None)),
        (
            "B finds it held",
            b.acquire_statement("r", &bo, 2_000, None),
        ),
        ("A retries", b.acquire_statement("r", &a, 2_000, None)),
        ("A renews", b.renew_statement("r", &a, 2_000)),
        ("B cannot renew", b.renew_statement("r", &bo, 2_000)),
        (
            "B and A renew in one statement: A's renewal only",
            b.renew_many_statement(&[("r", &bo, 2_000), ("r", &a, 2_000)]),
        ),
        ("A releases", b.release_statement("r", &a, true)),
        ("A releases again", b.release_statement("r", &a, true)),
        (
            "B acquires for 300 ms",
            b.acquire_statement("r", &bo, 300, None),
        ),
    ];
    for (what, s) in &steps {
        let r = real(&client, s).await;
        same(what, &r, &mem.run(now(), s));
    }
    tokio::time::sleep(Duration::from_millis(450)).await;
    let steps: Vec<(&str, SqlStatement)> = vec![
        (
            "B's lease ran out: no renewal",
            b.renew_statement("r", &bo, 2_000),
        ),
        (
            "C takes the expired row",
            b.acquire_statement("r", &c, 2_000, None),
        ),
        ("C's cleanup", b.release_statement("r", &c, false)),
        (
            "A acquires above a floor",
            b.acquire_statement("r", &a, 2_000, Some(FencingToken(10))),
        ),
        ("operator query", lock_state_statement(&b, "r", false)),
        ("operator reset", lock_state_statement(&b, "r", true)),
        ("operator query after", lock_state_statement(&b, "r", false)),
        (
            "A's renewal after the reset",
            b.renew_statement("r", &a, 2_000),
        ),
        (
            "B after the reset",
            quiet.acquire_statement("r", &bo, 2_000, None),
        ),
        (
            "B releases without notify",
            quiet.release_statement("r", &bo, true),
        ),
    ];
    for (what, s) in &steps {
        let r = real(&client, s).await;
        same(what, &r, &mem.run(now(), s));
    }
    // the token table: a floor every grant of the name stays above
    client
        .execute(
            &format!(
                "INSERT INTO {} (name, token) VALUES ('q', 41)",
                b.token_table
            ),
            &[],
        )
        .await
        .expect("token row");
    mem.set_token_floor("q", 41);
    let s = b.acquire_statement("q", &a, 2_000, None);
    let r = real(&client, &s).await;
    same(
        "A acquires q above the token table",
        &r,
        &mem.run(now(), &s),
    );
    let s = b.renew_many_statement(&[("q", &a, 2_000), ("r", &a, 2_000), ("q", &bo, 2_000)]);
    let r = real(&client, &s).await;
    same(
        "A's q renews in a batch, r and B's q not",
        &r,
        &mem.run(now(), &s),
    );
    client
        .batch_execute(&format!(
            "DROP TABLE {}; DROP TABLE {};",
            b.lease_table, b.token_table
        ))
        .await
        .expect("drop");
}
