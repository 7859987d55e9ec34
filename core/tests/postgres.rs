//! Timeline tests of PostgreSQL waiters: a contender parks on a `LISTEN` wait for the
//! release's notification, for as long as the backoff it stands in for; with `notify`
//! off it polls. Numbers are the story's; arithmetic in comments.

mod support;

use fencepost_core::backends::postgres::notify_channel;
use fencepost_core::{
    Event, FencingToken, Operation, PgConnection, PgMode, PostgresBackend, SqlReply, SqlValue,
};
use support::*;

use Operation::{Acquire, Release, Wait};

fn rows(r: Vec<Vec<SqlValue>>) -> SqlReply {
    SqlReply::Rows { rows: r }
}

/// The acquire's reply when another owner holds the row for `ms` more.
fn held(ms: i64) -> SqlReply {
    rows(vec![vec![SqlValue::Null, SqlValue::Int(ms)]])
}

fn granted(token: i64) -> SqlReply {
    rows(vec![vec![SqlValue::Int(token), SqlValue::Null]])
}

fn waiting_options() -> fencepost_core::LockOptions {
    let mut o = opts(20_000);
    o.retry_base = ms(8_000);
    o.retry_max = ms(8_000);
    o
}

#[test]
fn a_contender_listens_for_the_release_and_tries_again_when_notified() {
    for mode in [PgMode::Lease, PgMode::Session] {
        let backend = PostgresBackend {
            mode,
            ..PostgresBackend::default()
        };
        let mut t = Timeline::postgres(1, backend);
        t.at(0);
        t.acquire(0, "report", waiting_options());
        t.server.script(held(15_000));
        t.at(1).serve(0, Acquire);
        // parked on the name's channel, for the backoff: full jitter over
        // min(retry_max 8000, 8000 · 2^0), at most half the validity after the send
        let wait = t.take_only(0);
        assert_eq!(wait.operation, Wait, "{mode:?}");
        let fencepost_core::RequestBody::Sql(listen) = &wait.body else {
            panic!("{wait:?}")
        };
        let channel = notify_channel("fencepost", "report");
        assert_eq!(listen.connection, PgConnection::Listen);
        assert_eq!(listen.sql, format!("LISTEN {channel}"));
        assert_eq!(listen.params[0], SqlValue::Text(channel.clone()));
        let SqlValue::Int(timeout_ms) = listen.params[1] else {
            panic!("{listen:?}")
        };
        assert!((1..=8_000).contains(&timeout_ms), "{timeout_ms}");
        // deadline: the park's end (1 + timeout, whole ms rounded down) plus retry_max 8000
        let end = at(1 + timeout_ms as u64 + 8_000);
        assert!(
            wait.deadline >= end && wait.deadline < end + ms(1),
            "{wait:?}"
        );
        // notified 3 ms after parking: the next attempt goes out at once
        t.at(4);
        t.reply_sql(0, &wait, rows(vec![]));
        t.server.script(granted(8));
        let again = t.take_only(0);
        assert_eq!(again.operation, Acquire);
        let reply = t.apply(&again);
        t.reply(0, &again, reply);
        // valid from that attempt's send: 4 + 20000·0.99 − 2
        t.expect_event(
            0,
            Event::Acquired {
                token: FencingToken(8),
                valid_until: at(4 + 19_798),
                previous: fencepost_core::Previous::Unknown,
            },
        );
    }
}

#[test]
fn the_release_notifies_the_names_channel_in_its_own_statement() {
    for mode in [PgMode::Lease, PgMode::Session] {
        let mut t = Timeline::postgres(
            1,
            PostgresBackend {
                mode,
                ..PostgresBackend::default()
            },
        );
        t.at(0);
        let lock = t.acquire(0, "report", opts(3_000));
        t.server.script(granted(1));
        t.at(1).serve(0, Acquire);
        t.at(10).release(0, lock);
        let release = t.take(0, Release);
        let fencepost_core::RequestBody::Sql(stmt) = &release.body else {
            panic!("{release:?}")
        };
        assert!(
            stmt.sql.contains("pg_notify($3::text"),
            "{mode:?}: {}",
            stmt.sql
        );
        assert_eq!(
            stmt.params.last(),
            Some(&SqlValue::Text(notify_channel("fencepost", "report")))
        );
        // one row: released, whatever column the notification added
        t.reply_sql(
            0,
            &release,
            rows(vec![vec![SqlValue::Int(1), SqlValue::Text(String::new())]]),
        );
        assert_eq!(t.events(0).last(), Some(&Event::Released), "{mode:?}");
    }
}

#[test]
fn a_notification_that_never_comes_costs_one_backoff_then_the_attempt_polls() {
    let mut t = Timeline::postgres(1, PostgresBackend::default());
    t.at(0);
    t.acquire(0, "report", waiting_options());
    t.server.script(held(15_000));
    t.at(1).serve(0, Acquire);
    let wait = t.take(0, Wait);
    let timeout_ms = match &wait.body {
        fencepost_core::RequestBody::Sql(s) => match s.params[1] {
            SqlValue::Int(ms) => ms,
            ref other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    // the listener answers at the wait's end (its timeout), with nothing heard
    let end = 1 + timeout_ms as u64;
    t.at(end);
    t.reply_sql(0, &wait, rows(vec![]));
    t.expect_request(0, Acquire);
}

#[test]
fn a_failed_listen_falls_back_on_the_backoff() {
    let mut t = Timeline::postgres(1, PostgresBackend::default());
    t.at(0);
    t.acquire(0, "report", waiting_options());
    t.server.script(held(15_000));
    t.at(1).serve(0, Acquire);
    let wait = t.take(0, Wait);
    // the listening connection was terminated (pg_terminate_backend)
    t.at(2)
        .fail_with(0, &wait, "server closed the connection unexpectedly");
    t.expect_no_request(0);
    // the next attempt comes from the backoff: within retry_max 8000 of the failure
    t.server.script(granted(2));
    t.at(2 + 8_000);
    t.expect_request(0, Acquire);
}

#[test]
fn with_notify_off_contenders_poll_and_releases_notify_nobody() {
    let backend = PostgresBackend {
        notify: false,
        ..PostgresBackend::default()
    };
    let mut t = Timeline::postgres(1, backend);
    t.at(0);
    t.acquire(0, "report", waiting_options());
    t.server.script(held(15_000));
    t.at(1).serve(0, Acquire);
    t.expect_no_request(0);
    t.server.script(granted(2));
    t.at(1 + 8_000);
    t.serve(0, Acquire);
    assert!(matches!(t.events(0).as_slice(), [Event::Acquired { .. }]));
}

#[test]
fn channels_are_short_stable_identifiers() {
    let c = notify_channel("fencepost", "report");
    assert_eq!(c.len(), 26);
    assert!(
        c.len() <= 63,
        "PostgreSQL truncates channel names at 63 bytes"
    );
    assert!(c
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'));
    // pinned: the advisory key of ("fencepost", "report") as u64 hex
    assert_eq!(
        c,
        format!("fencepost_{:016x}", -2364901989615549545i64 as u64)
    );
    assert_ne!(c, notify_channel("app", "report"));
    let long = "x".repeat(1024);
    assert_eq!(notify_channel("fencepost", &long).len(), 26);
}

#[test]
fn a_waiter_behind_one_long_lease_counts_one_holder_however_often_it_looks() {
    // the refusals name the holder's token: one holder, however many attempts
    let polling = PostgresBackend {
        notify: false,
        ..PostgresBackend::default()
    };
    Timeline::memory_postgres(2, polling).assert_one_long_hold_is_never_hot();
}

#[test]
fn rule5_lease_rows_giving_up_after_an_ambiguous_statement_and_refusals_still_release_it() {
    // a statement that failed in transport may commit later, whatever later ones find
    let polling = PostgresBackend {
        notify: false,
        ..PostgresBackend::default()
    };
    let mut t = Timeline::memory_postgres(2, polling);
    let cleanup = t.give_up_then_stuck_attempt_lands("report");
    // committed after the other holder's release: client 0's owner id holds the row
    assert!(t.server.row("report").is_some_and(|r| r.owner.is_some()));
    let released = t.apply(&cleanup);
    t.reply(0, &cleanup, released);
    assert!(
        t.server.row("report").is_some_and(|r| r.owner.is_none()),
        "not orphaned until its TTL"
    );
}
