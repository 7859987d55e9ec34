//! Timeline tests of the Redlock recipe on five in-memory masters: one per rule of
//! the recipe (majority, no majority, a majority too late, renewal without a majority,
//! cleanup of every master). Masters that are "stopped" simply never answer, or
//! answer with a transport error at the request's deadline, as a host reports them.

mod support;

use fencepost_core::memory::MemoryRedlock;
use fencepost_core::{
    AcquireFailedReason, Event, FencingToken, Instant, LockOptions, LostReason, Operation, Request,
    UsageError,
};
use support::redlock::*;
use support::*;

use Operation::{Acquire, Release, Renew};

type Redlock = Timeline<MemoryRedlock>;

/// Serves the parts of `reqs` addressed to `masters` (executed now, replied now) and
/// returns the others, still unanswered.
fn serve_masters(t: &mut Redlock, c: usize, reqs: Vec<Request>, masters: &[usize]) -> Vec<Request> {
    let mut rest = Vec::new();
    for req in reqs {
        if masters.contains(&master(&req)) {
            let reply = t.apply(&req);
            t.reply(c, &req, reply);
        } else {
            rest.push(req);
        }
    }
    rest
}

fn owner_arg(req: &Request) -> String {
    let fencepost_core::RequestBody::RedlockPart(p) = &req.body else {
        panic!("a Redlock part: {req:?}")
    };
    p.command.args[0].clone()
}

#[test]
fn a_majority_with_two_of_five_stopped_acquires_renews_and_releases() {
    let mut t = Redlock::redlock(1);
    t.at(0);
    let lock = t.acquire(0, "report", opts(1_000));
    let parts = t.take_all(0);
    assert_eq!(parts.len(), 5, "one acquire per master, at once");
    assert_eq!(
        parts.iter().map(master).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    // a different counter on master 2, to show which token the lease gets
    for i in 0..4 {
        t.server.masters[2].eval(
            at(0),
            &fencepost_core::RedisCommand {
                script: fencepost_core::RedisScript::Acquire,
                keys: vec![format!("x{i}"), t.backend.token_key("report")],
                args: vec!["someone".into(), "1".into()],
                wait: None,
            },
        );
    }
    t.at(5);
    let stopped = serve_masters(&mut t, 0, parts, &[0, 1]);
    t.expect_no_event(0); // two of five: no majority yet
    let stopped = serve_masters(&mut t, 0, stopped, &[2]);
    // the highest of the majority's counters (1, 1, 5); valid from the send:
    // 0 + 1000·0.99 − 2 = 988
    t.expect_event(
        0,
        Event::Acquired {
            token: FencingToken(5),
            valid_until: at(988),
            previous: fencepost_core::Previous::Unknown,
        },
    );
    assert_eq!(stopped.len(), 2, "masters 3 and 4 never answered");
    t.at(334); // renew at 1000/3
    let renews = t.take_all(0);
    assert!(renews.iter().all(|r| r.operation == Renew) && renews.len() == 5);
    let _ = serve_masters(&mut t, 0, renews, &[0, 1, 2]);
    t.expect_event(
        0,
        Event::Renewed {
            valid_until: at(334 + 988),
        },
    );
    t.at(400).release(0, lock);
    let releases = t.take_all(0);
    assert!(releases.iter().all(|r| r.operation == Release) && releases.len() == 5);
    let _ = serve_masters(&mut t, 0, releases, &[0, 1, 2]);
    t.expect_event(0, Event::Released);
    for m in 0..3 {
        assert_eq!(t.holder_on(m, "report"), None);
    }
}

#[test]
fn no_majority_is_not_acquired_and_gives_up_at_the_acquire_timeout_releasing_every_master() {
    let mut t = Redlock::redlock(1);
    t.at(0);
    let options = LockOptions {
        acquire_timeout: Some(ms(300)),
        ..opts(1_000)
    };
    t.acquire(0, "report", options);
    let parts = t.take_all(0);
    let owner = owner_arg(&parts[0]);
    t.at(3);
    let stopped = serve_masters(&mut t, 0, parts, &[0, 1]);
    t.expect_no_event(0);
    // the host cancels the three hung parts at their deadline: the acquire deadline
    // (300, before the validity end 988)
    assert!(stopped.iter().all(|r| r.deadline == at(300)));
    t.at(300);
    for r in &stopped {
        t.fail_with(0, r, "no reply before the request deadline");
    }
    let events = t.events(0);
    assert!(
        matches!(
            events.as_slice(),
            [Event::AcquireFailed {
                reason: AcquireFailedReason::Timeout { .. }
            }]
        ),
        "{events:?}"
    );
    // giving up releases the attempt's owner id on all five masters, the three that
    // never answered included
    let cleanups: Vec<_> = t.take_all(0);
    let mut masters: Vec<usize> = cleanups
        .iter()
        .filter(|r| r.operation == Release && owner_arg(r) == owner)
        .map(master)
        .collect();
    masters.sort();
    masters.dedup();
    assert_eq!(masters, vec![0, 1, 2, 3, 4]);
    let _ = serve_masters(&mut t, 0, cleanups, &[0, 1, 2, 3, 4]);
    for m in 0..5 {
        assert_eq!(t.holder_on(m, "report"), None, "master {m}");
    }
}

#[test]
fn a_failed_attempt_releases_every_master_then_retries_under_a_fresh_owner() {
    let mut t = Redlock::redlock(2);
    t.at(0);
    // client 1 holds the lock on master 2 only (a leftover of its own failed attempt)
    t.server.masters[2].eval(
        at(0),
        &fencepost_core::RedisCommand {
            script: fencepost_core::RedisScript::Acquire,
            keys: vec![t.backend.lock_key("report"), t.backend.token_key("report")],
            args: vec!["another".into(), "600".into()],
            wait: None,
        },
    );
    t.acquire(0, "report", opts(1_000));
    let parts = t.take_all(0);
    let owner = owner_arg(&parts[0]);
    t.at(4);
    // masters 0 and 1 grant, 2 is held by another, 3 and 4 fail: no majority can be had
    let rest = serve_masters(&mut t, 0, parts, &[0, 1, 2]);
    t.expect_no_event(0);
    t.fail(0, &rest[0]);
    t.expect_no_event(0); // 2 granted, 1 failed, 1 still out: 3 still possible
    t.fail(0, &rest[1]);
    t.expect_no_event(0); // not acquired, and not given up
    let cleanups = t.take_all(0);
    assert_eq!(cleanups.len(), 5, "{cleanups:?}");
    assert!(cleanups
        .iter()
        .all(|r| r.operation == Release && owner_arg(r) == owner));
    let _ = serve_masters(&mut t, 0, cleanups, &[0, 1, 2, 3, 4]);
    assert_eq!(
        t.holder_on(0, "report"),
        None,
        "the minority grant is freed"
    );
    assert_eq!(t.holder_on(2, "report").as_deref(), Some("another"));
    // the retry comes after a backoff (at most the holder's 600 ms), under a new owner
    t.at(700);
    let retry = t.take_all(0);
    assert_eq!(retry.len(), 5);
    assert!(retry.iter().all(|r| r.operation == Acquire));
    assert_ne!(owner_arg(&retry[0]), owner);
}

#[test]
fn a_majority_answering_after_the_validity_is_not_acquired_and_is_released() {
    let mut t = Redlock::redlock(1);
    t.at(0);
    t.acquire(0, "report", opts(1_000));
    let parts = t.take_all(0);
    let owner = owner_arg(&parts[0]);
    // the masters grant at once, but the replies reach the client after 0 + 988
    let replies: Vec<_> = parts.iter().map(|r| t.apply(r)).collect();
    t.at(990);
    // the machine's timer gave up on the attempt at 988 already: the replies are late
    for (r, reply) in parts.iter().zip(replies).take(3) {
        t.reply(0, r, reply);
    }
    let events = t.events(0);
    assert!(
        !events.iter().any(|e| matches!(e, Event::Acquired { .. })),
        "{events:?}"
    );
    let sent = t.take_all(0);
    let cleaned: Vec<usize> = sent
        .iter()
        .filter(|r| r.operation == Release && owner_arg(r) == owner)
        .map(master)
        .collect();
    assert!(
        [0, 1, 2, 3, 4].iter().all(|m| cleaned.contains(m)),
        "the late grant is released on every master: {sent:?}"
    );
    let _ = serve_masters(&mut t, 0, sent, &[0, 1, 2, 3, 4]);
    for m in 0..5 {
        assert_ne!(t.holder_on(m, "report"), Some(owner.clone()), "master {m}");
    }
}

#[test]
fn a_majority_granting_just_after_its_validity_is_a_grant_too_late_to_use() {
    // The attempt deadline is the validity end; the majority is complete at 988 + 0.
    let mut t = Redlock::redlock(1);
    t.at(0);
    t.acquire(
        0,
        "report",
        LockOptions {
            acquire_timeout: Some(ms(2_000)),
            ..opts(1_000)
        },
    );
    let parts = t.take_all(0);
    let owner = owner_arg(&parts[0]);
    t.at(987);
    let rest = serve_masters(&mut t, 0, parts, &[0, 1]);
    t.expect_no_event(0);
    t.at(988);
    let _ = serve_masters(&mut t, 0, rest, &[2, 3, 4]);
    let events = t.events(0);
    assert!(
        !events.iter().any(|e| matches!(e, Event::Acquired { .. })),
        "{events:?}"
    );
    // each late part may have landed after any release sent before its reply: each
    // gets a release of the old owner id on every master
    let mut cleaned: Vec<usize> = t.clients[0]
        .pending
        .iter()
        .filter(|r| r.operation == Release && owner_arg(r) == owner)
        .map(master)
        .collect();
    cleaned.sort();
    cleaned.dedup();
    assert_eq!(cleaned, vec![0, 1, 2, 3, 4], "released on every master");
}

#[test]
fn a_renewal_losing_its_majority_is_lost_at_once_and_frees_the_minority() {
    let mut t = Redlock::redlock(1);
    t.at(0);
    t.acquire(0, "report", opts(1_000));
    let parts = t.take_all(0);
    let owner = owner_arg(&parts[0]);
    t.at(2);
    let _ = serve_masters(&mut t, 0, parts, &[0, 1, 2, 3, 4]);
    t.events(0);
    // masters 2, 3 and 4 restart without persistence
    for m in 2..5 {
        t.server.masters[m].flush();
    }
    t.at(334);
    let renews = t.take_all(0);
    let rest = serve_masters(&mut t, 0, renews, &[0, 1, 2]);
    t.expect_no_event(0); // 2 confirmed, 1 refused: a majority is still possible
    let rest = serve_masters(&mut t, 0, rest, &[3]);
    t.expect_no_event(0); // 2 confirmed, 2 refused
    let _ = serve_masters(&mut t, 0, rest, &[4]);
    // 3 of 5 refused: lost at once, not at the validity deadline (988)
    t.expect_event(
        0,
        Event::Lost {
            reason: LostReason::RenewRejected,
        },
    );
    let cleanups = t.take_all(0);
    assert!(cleanups
        .iter()
        .all(|r| r.operation == Release && owner_arg(r) == owner));
    let _ = serve_masters(&mut t, 0, cleanups, &[0, 1, 2, 3, 4]);
    assert_eq!(t.holder_on(0, "report"), None);
    assert_eq!(t.holder_on(1, "report"), None);
}

#[test]
fn renewal_failures_without_a_decision_are_retried_until_the_deadline() {
    let mut t = Redlock::redlock(1);
    t.at(0);
    t.acquire(0, "report", opts(1_000));
    let parts = t.take_all(0);
    t.at(1);
    let _ = serve_masters(&mut t, 0, parts, &[0, 1, 2, 3, 4]);
    t.events(0);
    t.at(334);
    let renews = t.take_all(0);
    // 2 confirm, 3 connections reset: no decision, retried (rule 3)
    let rest = serve_masters(&mut t, 0, renews, &[0, 1]);
    for r in &rest {
        t.fail(0, r);
    }
    t.expect_no_event(0);
    t.at(334 + 84); // renew_interval / 4
    let retry = t.take_all(0);
    assert_eq!(retry.len(), 5);
    let _ = serve_masters(&mut t, 0, retry, &[0, 1, 2]);
    t.expect_event(
        0,
        Event::Renewed {
            valid_until: at(418 + 988),
        },
    );
}

/// Acquires "report" on masters 0–2 while master 3 grants at once but its reply is slow
/// and master 4 never answers; releases at 10, then the late grant of master 3 arrives
/// at 11. Returns the release's parts and the cleanup that late grant gets.
fn a_late_grant_during_the_release(t: &mut Redlock) -> (Vec<Request>, Vec<Request>) {
    t.at(0);
    let lock = t.acquire(0, "report", opts(1_000));
    let parts = t.take_all(0);
    let slow = parts.iter().find(|r| master(r) == 3).cloned().unwrap();
    let slow_reply = t.apply(&slow);
    let _ = serve_masters(t, 0, parts, &[0, 1, 2]);
    assert!(matches!(t.events(0)[..], [Event::Acquired { .. }]));
    t.at(10).release(0, lock);
    let releases = t.take_all(0);
    assert!(releases.iter().all(|r| r.operation == Release) && releases.len() == 5);
    // the late grant is answered with a cleanup of every master (it may hold the key for
    // this owner id whatever the release finds there)
    t.at(11).reply(0, &slow, slow_reply);
    let cleanups = t.take_all(0);
    assert_eq!(cleanups.len(), 5);
    (releases, cleanups)
}

#[test]
fn a_late_grant_during_the_release_cleans_up_without_holding_the_release_back() {
    let mut t = Redlock::redlock(1);
    let (releases, cleanups) = a_late_grant_during_the_release(&mut t);
    // the release still completes on its own majority, at once
    let unanswered = serve_masters(&mut t, 0, releases, &[0, 1, 2]);
    t.expect_event(0, Event::Released);
    let _ = serve_masters(&mut t, 0, unanswered, &[3]);
    let _ = serve_masters(&mut t, 0, cleanups, &[0, 1, 2, 3, 4]);
    t.expect_no_event(0);
    for m in 0..5 {
        assert_eq!(t.holder_on(m, "report"), None, "master {m}");
    }
}

#[test]
fn a_cleanup_that_overtakes_the_release_of_the_same_owner_is_no_loss() {
    // a host with a connection pool may run the cleanup of a late grant before the
    // release sent earlier: the release then finds the key gone by this owner's own
    // cleanup, which is the release, not a lease that ended before it
    let mut t = Redlock::redlock(1);
    let (releases, cleanups) = a_late_grant_during_the_release(&mut t);
    let _ = serve_masters(&mut t, 0, cleanups, &[0, 1, 2, 3, 4]);
    let _ = serve_masters(&mut t, 0, releases, &[0, 1, 2, 3, 4]);
    t.expect_event(0, Event::Released);
    for m in 0..5 {
        assert_eq!(t.holder_on(m, "report"), None, "master {m}");
    }
}

#[test]
fn a_release_found_gone_on_a_majority_is_a_loss() {
    let mut t = Redlock::redlock(1);
    t.at(0);
    let lock = t.acquire(0, "report", opts(1_000));
    let parts = t.take_all(0);
    let _ = serve_masters(&mut t, 0, parts, &[0, 1, 2, 3, 4]);
    t.events(0);
    for m in 0..3 {
        t.server.masters[m].flush();
    }
    t.at(10).release(0, lock);
    let releases = t.take_all(0);
    let _ = serve_masters(&mut t, 0, releases, &[0, 1, 2]);
    t.expect_event(
        0,
        Event::Lost {
            reason: LostReason::NotHeldAtRelease,
        },
    );
}

#[test]
fn contenders_never_both_hold_a_majority() {
    let mut t = Redlock::redlock(3);
    t.at(0);
    for c in 0..3 {
        t.acquire(c, "report", opts(1_000));
    }
    // masters see the attempts in different orders
    let p: Vec<Vec<Request>> = (0..3).map(|c| t.take_all(c)).collect();
    let mut p = p.into_iter();
    let (a, b, c) = (p.next().unwrap(), p.next().unwrap(), p.next().unwrap());
    let a = serve_masters(&mut t, 0, a, &[0, 1]);
    let b = serve_masters(&mut t, 1, b, &[2, 3]);
    let c = serve_masters(&mut t, 2, c, &[4]);
    let _ = serve_masters(&mut t, 0, a, &[2, 3, 4]);
    let _ = serve_masters(&mut t, 1, b, &[0, 1, 4]);
    let _ = serve_masters(&mut t, 2, c, &[0, 1, 2, 3]);
    let acquired = (0..3)
        .filter(|&c| {
            t.events(c)
                .iter()
                .any(|e| matches!(e, Event::Acquired { .. }))
        })
        .count();
    assert_eq!(acquired, 0, "a split vote grants nobody");
    t.run_until(3_000);
    let holders: Vec<_> = (0..3)
        .filter(|&c| {
            t.events(c)
                .iter()
                .any(|e| matches!(e, Event::Acquired { .. }))
        })
        .collect();
    assert_eq!(
        holders.len(),
        1,
        "after the backoffs, one holder: {holders:?}"
    );
}

#[test]
fn bad_masters_and_correctness_are_refused_before_any_request() {
    let mut t = Redlock::redlock(0);
    t.backend.masters.pop();
    let c = t.add_client(9);
    let err = t.clients[c]
        .machine
        .acquire(Instant::ZERO, "report", opts(1_000))
        .unwrap_err();
    assert!(
        matches!(&err, UsageError::InvalidOption { option, message } if option == "masters" && message.to_string().contains("got 4")),
        "{err}"
    );
    assert!(t.clients[c].machine.poll_output() == fencepost_core::Output::Idle);
    let c = {
        t.backend = five_masters();
        t.add_client(10)
    };
    let correctness = LockOptions {
        purpose: fencepost_core::Purpose::Correctness,
        accept_failover_risk: true,
        ..opts(1_000)
    };
    let err = t.clients[c]
        .machine
        .acquire(Instant::ZERO, "report", correctness)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("etcd, ZooKeeper or PostgreSQL lease rows"),
        "{err}"
    );
}

#[test]
fn one_long_hold_is_never_hot_on_redlock() {
    Timeline::redlock(2).assert_one_long_hold_is_never_hot();
}

/// Every master down: each attempt fails with no refusal. That is an outage, reported
/// as one (`server_unreachable` while it lasts), never contention (`hot_lock`).
#[test]
fn every_master_unreachable_is_an_outage_never_a_hot_lock() {
    use fencepost_core::{Observation, ObserveOptions};
    let mut t = Redlock::redlock(2);
    for c in &mut t.clients {
        c.machine.observe(Some(ObserveOptions::default())).unwrap();
    }
    t.at(0);
    let quick = |timeout: Option<u64>| LockOptions {
        acquire_timeout: timeout.map(ms),
        retry_max: ms(200),
        ..opts(1_000)
    };
    // client 0 gives up after 5 s; client 1 never does
    t.acquire(0, "report", quick(Some(5_000)));
    t.acquire(1, "report", quick(None));
    while t.now < at(31_000) {
        for c in 0..2 {
            for req in t.take_all(c) {
                t.fail_with(c, &req, "connect ECONNREFUSED");
            }
        }
        let next = t.clients.iter().filter_map(|c| c.next_timeout).min();
        t.at_instant(next.expect("an acquiring machine has a timer"));
    }
    let gave_up = t.clients[0].take_observations();
    let attempts = timed_out_attempts(&gave_up);
    assert!(attempts.is_some_and(|n| n >= 10), "{gave_up:?}");
    assert!(hot_lock_found(&gave_up).is_empty(), "{gave_up:?}");
    let waiting = t.clients[1].take_observations();
    assert!(
        waiting
            .iter()
            .any(|o| matches!(o, Observation::ServerUnreachable { .. })),
        "{waiting:?}"
    );
    assert!(hot_lock_found(&waiting).is_empty(), "{waiting:?}");
}

/// A new holder on every master before each attempt: each refusal names another owner,
/// so each counts, and the waiter that gives up is told the lock is hot.
#[test]
fn a_lock_changing_hands_between_attempts_is_hot_on_redlock() {
    use fencepost_core::ObserveOptions;
    let mut t = Redlock::redlock(1);
    t.clients[0]
        .machine
        .observe(Some(ObserveOptions::default()))
        .unwrap();
    t.at(0);
    let waiting = LockOptions {
        acquire_timeout: Some(ms(5_000)),
        retry_max: ms(200),
        ..opts(1_000)
    };
    t.acquire(0, "report", waiting);
    let (lock_key, token_key) = (t.backend.lock_key("report"), t.backend.token_key("report"));
    for step in 0..22u64 {
        let now = t.now;
        for m in 0..5 {
            let master = &mut t.server.masters[m];
            master.delete(&lock_key);
            master.eval(
                now,
                &fencepost_core::RedisCommand {
                    script: fencepost_core::RedisScript::Acquire,
                    keys: vec![lock_key.clone(), token_key.clone()],
                    // an owner id's first 8 bytes differ from holder to holder
                    args: vec![format!("{:016x}{:016x}", step + 1, 0), "60000".into()],
                    wait: None,
                },
            );
        }
        t.run_until(250 * (step + 1));
    }
    let seen = t.clients[0].take_observations();
    let found = hot_lock_found(&seen).into_iter().flatten().next();
    assert!(found.is_some_and(|n| n >= 10), "{seen:?}");
}
