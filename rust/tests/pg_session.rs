//! PostgreSQL session mode (`postgres://…?mode=session`: session-level advisory locks,
//! a dedicated connection per lock) against the server scripts/test starts
//! (FENCEPOST_PG_URL). A test whose server is not configured prints why and passes.

use std::time::{Duration, Instant};

use fencepost::core::backends::postgres::{lock_state_statement, read_lock_state};
use fencepost::core::{PgConnection, Reply, RequestBody, SqlReply, SqlStatement, SqlValue};
use fencepost::{Backend, Client, Error, LockOptions, LostReason};

mod common;
use common::unique;

fn ttl(ms: u64) -> LockOptions {
    LockOptions::ttl(Duration::from_millis(ms))
}

/// The session-mode URL of the configured server and a lease-mode client of it.
async fn server() -> Option<(String, Client)> {
    match std::env::var("FENCEPOST_PG_URL") {
        Ok(url) if !url.is_empty() => {
            let sep = if url.contains('?') { '&' } else { '?' };
            let operator = Client::connect(&url).await.unwrap();
            Some((format!("{url}{sep}mode=session"), operator))
        }
        _ => {
            println!("skipped: FENCEPOST_PG_URL is not set (scripts/services/postgres.sh start)");
            None
        }
    }
}

/// The server process holding `name`'s advisory lock, if any.
async fn advisory_pid(operator: &Client, name: &str) -> Option<i64> {
    let Backend::Postgres(b) = operator.backend() else {
        panic!("not PostgreSQL")
    };
    let stmt = lock_state_statement(b, name, false);
    let Reply::Sql(reply) = operator.execute(RequestBody::Sql(stmt)).await.unwrap() else {
        panic!("not a SQL reply")
    };
    read_lock_state(&reply).unwrap().advisory_pid
}

/// Runs `sql` with one int parameter on the operator's connection; the first column
/// of the first row.
async fn scalar(operator: &Client, sql: &str, param: i64) -> SqlValue {
    let stmt = SqlStatement {
        sql: sql.into(),
        params: vec![SqlValue::Int(param)],
        connection: PgConnection::Any,
    };
    match operator.execute(RequestBody::Sql(stmt)).await.unwrap() {
        Reply::Sql(SqlReply::Rows { rows }) => rows[0][0].clone(),
        other => panic!("{other:?}"),
    }
}

/// Waits (at most 2 s) until the server process `pid` is gone.
async fn gone(operator: &Client, pid: i64) -> bool {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(2) {
        let n = scalar(
            operator,
            "SELECT count(*)::bigint FROM pg_stat_activity WHERE pid = $1::int",
            pid,
        )
        .await;
        if n == SqlValue::Int(0) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_lock_is_held_on_its_own_connection_and_closed_with_it() {
    let Some((url, operator)) = server().await else {
        return;
    };
    let client = Client::connect(&url).await.unwrap();
    let Backend::Postgres(b) = client.backend() else {
        panic!("{:?}", client.backend())
    };
    assert_eq!(b.mode, fencepost::core::PgMode::Session);
    let name = unique("session");
    let lease = client.acquire(&name, ttl(600)).await.unwrap();
    let first = lease.token();
    let pid = advisory_pid(&operator, &name)
        .await
        .expect("held by a session");
    let holder = client
        .status(&name)
        .await
        .unwrap()
        .expect("status sees the session");
    assert_eq!(holder.token, Some(first));
    assert_eq!(holder.ttl_left, None, "a session has no time left to tell");
    // the heartbeat (every ttl / 3) keeps it past its TTL, on the same session
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    lease.extend().await.unwrap();
    assert_eq!(advisory_pid(&operator, &name).await, Some(pid));
    // another contender that tries once is refused while it is held
    let other = Client::connect(&url).await.unwrap();
    let err = other
        .acquire(
            &name,
            LockOptions {
                acquire_timeout: Some(Duration::ZERO),
                ..ttl(600)
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::AcquireTimeout { .. }), "{err:?}");
    lease.release().await.unwrap();
    assert_eq!(advisory_pid(&operator, &name).await, None, "unlocked");
    assert_eq!(client.status(&name).await.unwrap(), None);
    assert!(
        gone(&operator, pid).await,
        "the dedicated connection closed"
    );
    // the next grant's token is higher, on a new session
    let again = other.acquire(&name, ttl(600)).await.unwrap();
    assert!(again.token() > first, "{} after {first}", again.token());
    let pid2 = advisory_pid(&operator, &name).await.expect("held");
    assert_ne!(pid2, pid);
    again.release().await.unwrap();
    assert!(gone(&operator, pid2).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_session_is_lost_at_the_next_heartbeat() {
    let Some((url, operator)) = server().await else {
        return;
    };
    let client = Client::connect(&url).await.unwrap();
    let name = unique("session-kill");
    let lease = client.acquire(&name, ttl(900)).await.unwrap();
    let pid = advisory_pid(&operator, &name).await.expect("held");
    let killed = scalar(
        &operator,
        "SELECT pg_terminate_backend($1::int)::int::bigint",
        pid,
    )
    .await;
    assert_eq!(killed, SqlValue::Int(1));
    let started = Instant::now();
    // the heartbeat reopens a connection, whose new session does not hold it
    let reason = tokio::time::timeout(Duration::from_secs(3), lease.lost())
        .await
        .expect("lost in time");
    assert_eq!(reason, LostReason::RenewRejected);
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    // the lost lock's connection is closed too; the name is free
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(advisory_pid(&operator, &name).await, None);
    let next = client
        .acquire(
            &name,
            LockOptions {
                acquire_timeout: Some(Duration::ZERO),
                ..ttl(900)
            },
        )
        .await
        .unwrap();
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencepost_run_in_session_mode_sees_its_token() {
    let Some((url, operator)) = server().await else {
        return;
    };
    let name = unique("session-run");
    let out = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_fencepost"))
            .args([
                "run",
                "--backend",
                &url,
                "--name",
                &name,
                "--ttl",
                "1s",
                "--",
            ])
            .args(["sh", "-c", r#"echo "$FENCEPOST_TOKEN"; sleep 0.5"#])
            .output(),
    )
    .await
    .expect("finished in time")
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(token > 0);
    assert_eq!(
        advisory_pid(&operator, &name).await,
        None,
        "released at exit"
    );
}

#[tokio::test]
async fn a_bad_mode_is_a_config_error() {
    for bad in [
        "postgres://u@127.0.0.1:1/db?mode=advisory",
        "postgres://u@127.0.0.1:1/db?mode=",
    ] {
        let err = Client::connect(bad).await.err().expect(bad);
        assert!(matches!(err, Error::Config(_)), "{bad}: {err:?}");
    }
}
