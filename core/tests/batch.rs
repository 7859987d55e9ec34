//! Batched renewals: a machine holding many leases on one Redis renews them with one
//! `renew_many` script call per batch, against the in-memory server.

mod support;

use fencepost_core::backends::{RedisBackend, RedisScript, RENEW_BATCH_LIMIT};
use fencepost_core::{Event, LostReason, Operation, Request, RequestBody};
use support::*;

/// What reached the server: renewal requests and the leases they carried.
#[derive(Default, Debug)]
struct Renewals {
    requests: usize,
    leases: usize,
    largest: usize,
}

fn leases_in(req: &Request) -> usize {
    match &req.body {
        RequestBody::Redis(cmd) if cmd.script == RedisScript::RenewMany => cmd.keys.len(),
        _ => 1,
    }
}

/// Runs the timeline on an ideal network until `end` ms, counting the renewals served.
fn run_counting(t: &mut Timeline<fencepost_core::memory::MemoryRedis>, end: u64) -> Renewals {
    let mut seen = Renewals::default();
    loop {
        t.serve_all_by(|t, c, req| {
            if req.operation == Operation::Renew {
                seen.requests += 1;
                seen.leases += leases_in(req);
                seen.largest = seen.largest.max(leases_in(req));
            }
            t.answer(c, req)
        });
        let next = (t.clients.iter())
            .filter_map(|c| c.next_timeout)
            .filter(|at| *at > t.now)
            .min();
        match next {
            Some(next) if next <= at(end) => {
                t.at_instant(next);
            }
            _ => break,
        }
    }
    t.at(end);
    seen
}

fn count(events: &[Event], f: impl Fn(&Event) -> bool) -> usize {
    events.iter().filter(|e| f(e)).count()
}

#[test]
fn ten_thousand_leases_renew_with_a_few_requests_a_renew_interval() {
    // TTL 30 s (renew every 10 s), acquired one a millisecond over 10 s: wider than
    // the half interval within which a lease joins a renewal going out
    let mut t = Timeline::redis(1);
    let n = 10_000u64;
    for i in 0..n {
        t.at(i);
        t.acquire(0, &format!("job:{i}"), opts(30_000));
        t.serve_all();
    }
    assert_eq!(
        count(&t.events(0), |e| matches!(e, Event::Acquired { .. })),
        n as usize
    );
    let seen = run_counting(&mut t, 70_000);
    let events = t.events(0);
    assert_eq!(count(&events, |e| matches!(e, Event::Lost { .. })), 0);
    // each lease renews about every 10 s over the ~60 s after its grant: 6 or 7 times
    let renewed = count(&events, |e| matches!(e, Event::Renewed { .. }));
    assert!(renewed >= 6 * n as usize, "renewed {renewed}");
    assert_eq!(seen.leases, renewed);
    assert!(seen.largest <= RENEW_BATCH_LIMIT, "{seen:?}");
    // the first round joins leases into two groups per interval at most: 20 requests
    // of 500 a group and round, 7 rounds, against 60,000+ renewals one by one
    assert!(seen.requests <= 2 * 20 * 7, "{seen:?}");
    println!(
        "{n} leases, TTL 30 s, 60 s: {} renewal requests carrying {} renewals (largest {})",
        seen.requests, seen.leases, seen.largest
    );
}

#[test]
fn one_input_s_renewals_split_at_the_batch_limit() {
    let mut t = Timeline::redis(1);
    t.at(0);
    let n = 2 * RENEW_BATCH_LIMIT + 1;
    for i in 0..n {
        t.acquire(0, &format!("job:{i}"), opts(3_000));
    }
    t.serve_all();
    t.events(0);
    t.at(1_000);
    let mut sizes = Vec::new();
    while t.has_pending(0, Operation::Renew) {
        sizes.push(leases_in(&t.take(0, Operation::Renew)));
    }
    assert_eq!(sizes, [RENEW_BATCH_LIMIT, RENEW_BATCH_LIMIT, 1]);
}

#[test]
fn a_lease_lost_on_the_server_leaves_the_batch_s_others_held() {
    let mut t = Timeline::redis(1);
    t.at(0);
    let a = t.acquire(0, "a", opts(3_000));
    let b = t.acquire(0, "b", opts(3_000));
    let c = t.acquire(0, "c", opts(3_000));
    t.serve_all();
    t.events(0);
    // an operator deletes b's lease key
    assert!(t.server.delete(&RedisBackend::default().lock_key("b")));
    t.at(1_000);
    let batch = t.take(0, Operation::Renew);
    assert_eq!(leases_in(&batch), 3);
    assert_eq!(t.clients[0].machine.requests_in_flight(), 1);
    let reply = t.apply(&batch);
    t.reply(0, &batch, reply);
    let events = t.clients[0].events.drain(..).collect::<Vec<_>>();
    let lost: Vec<_> = (events.iter())
        .filter(|(_, e)| matches!(e, Event::Lost { .. }))
        .collect();
    assert_eq!(
        lost,
        [&(
            b,
            Event::Lost {
                reason: LostReason::RenewRejected
            }
        )]
    );
    let renewed: Vec<_> = (events.iter())
        .filter(|(_, e)| matches!(e, Event::Renewed { .. }))
        .map(|(l, _)| *l)
        .collect();
    assert_eq!(renewed, [a, c]);
}

#[test]
fn leases_due_later_or_renewed_by_hand_only_do_not_join() {
    let mut t = Timeline::redis(1);
    t.at(0);
    let first = t.acquire(0, "first", opts(3_000));
    t.serve_all();
    // due at 1000 + 600: more than half its renew interval (500) after 1000
    t.at(600);
    t.acquire(0, "later", opts(3_000));
    let mut by_hand = opts(3_000);
    by_hand.auto_renew = false;
    t.acquire(0, "by-hand", by_hand);
    t.serve_all();
    t.events(0);
    t.at(1_000);
    let renewal = t.take(0, Operation::Renew);
    assert_eq!(renewal.lock, first);
    assert_eq!(leases_in(&renewal), 1);
    assert!(!t.has_pending(0, Operation::Renew));
}

#[test]
fn a_lease_released_while_its_batch_is_out_ignores_its_part() {
    let mut t = Timeline::redis(1);
    t.at(0);
    let a = t.acquire(0, "a", opts(3_000));
    let b = t.acquire(0, "b", opts(3_000));
    t.serve_all();
    t.events(0);
    t.at(1_000);
    let batch = t.take(0, Operation::Renew);
    assert_eq!(batch.lock, a);
    t.release(0, a);
    let release = t.take(0, Operation::Release);
    let reply = t.apply(&release);
    t.reply(0, &release, reply);
    t.expect_event(0, Event::Released);
    // the batch's reply: a's part (0, its key is gone) is late, b's renews b
    let reply = t.apply(&batch);
    t.reply(0, &batch, reply);
    let events = t.clients[0].events.drain(..).collect::<Vec<_>>();
    assert!(
        matches!(events.as_slice(), [(l, Event::Renewed { .. })] if *l == b),
        "{events:?}"
    );
    assert_eq!(t.clients[0].machine.requests_in_flight(), 0);
}

#[test]
fn lease_rows_renew_in_one_update_and_each_reads_its_own_row() {
    use fencepost_core::backends::{PostgresBackend, RequestBody};
    use fencepost_core::memory::MemoryPostgres;
    use fencepost_core::{Backend, Input, Machine, Output, Reply};

    let settings = PostgresBackend::default();
    let mut pg = MemoryPostgres::new(&settings);
    let mut m = Machine::with_seed(Backend::Postgres(settings.clone()), 1);
    // answers every request on the in-memory server at `now`; returns the events
    let serve = |m: &mut Machine, pg: &mut MemoryPostgres, now: u64| {
        let (mut events, mut sent) = (Vec::new(), Vec::new());
        loop {
            match m.poll_output() {
                Output::Request(r) => sent.push(r),
                Output::Event { lock, event } => events.push((lock, event)),
                Output::Timeout(_) | Output::Idle => {
                    let Some(r) = sent.pop() else { break };
                    let reply: Reply = pg.execute(at(now), &r.body);
                    let input = Input::Reply {
                        now: at(now),
                        request: r.id,
                        reply,
                    };
                    m.handle_input(input).unwrap();
                }
            }
        }
        events
    };
    let locks: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|n| m.acquire(at(0), n, opts(3_000)).unwrap())
        .collect();
    assert_eq!(serve(&mut m, &mut pg, 0).len(), 3);
    // another owner takes b's row behind its holder's back: its renewal finds no row
    pg.run(
        at(1),
        &settings.release_statement("b", &m.owner(locks[1]).unwrap(), false),
    );
    pg.run(
        at(1),
        &settings.acquire_statement("b", &fencepost_core::OwnerId([9; 16]), 3_000, None),
    );
    m.handle_input(Input::Timeout { now: at(1_000) }).unwrap();
    let batch = match m.poll_output() {
        Output::Request(r) => r,
        other => panic!("{other:?}"),
    };
    let RequestBody::Sql(s) = &batch.body else {
        panic!("{batch:?}")
    };
    assert!(s.sql.contains("jsonb_to_recordset"), "{}", s.sql);
    assert!(
        !s.sql.contains("'a'"),
        "names travel as a parameter: {}",
        s.sql
    );
    assert_eq!(m.requests_in_flight(), 1);
    let reply = pg.execute(at(1_000), &batch.body);
    m.handle_input(Input::Reply {
        now: at(1_000),
        request: batch.id,
        reply,
    })
    .unwrap();
    let events = serve(&mut m, &mut pg, 1_000);
    assert!(
        matches!(events[0], (l, Event::Renewed { .. }) if l == locks[0]),
        "{events:?}"
    );
    assert_eq!(
        events[1],
        (
            locks[1],
            Event::Lost {
                reason: LostReason::RenewRejected
            }
        )
    );
    assert!(
        matches!(events[2], (l, Event::Renewed { .. }) if l == locks[2]),
        "{events:?}"
    );
    assert!(
        pg.row("a").unwrap().live(at(3_500)),
        "a renewed past its first TTL"
    );
}
