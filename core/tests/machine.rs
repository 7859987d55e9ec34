//! Timeline tests of the machine: one per safety rule of docs/DESIGN.md and per named
//! failure case (GC pause, lost acquire reply, 100 contenders, ...). Numbers are the
//! story's; arithmetic in comments.

mod support;

use std::collections::HashSet;

use fencepost_core::{
    AcquireFailedReason, Backend, Event, FencingToken, Input, Instant, LockOptions, LostReason,
    Machine, Operation, Output, Purpose, RedisValue, UsageError,
};
use support::*;

use Operation::{Acquire, Release, Renew};

#[test]
fn acquire_renew_release_happy_path() {
    let mut t = Timeline::redis(1);
    t.at(0);
    let lock = t.acquire(0, "report", opts(1_000));
    t.at(2).serve(0, Acquire);
    // valid from the send: 0 + 1000·0.99 − 2 = 988
    t.expect_event(
        0,
        Event::Acquired {
            token: FencingToken(1),
            valid_until: at(988),
            previous: fencepost_core::Previous::None,
        },
    );
    t.at(332);
    assert!(!t.has_pending(0, Renew));
    t.at(334); // renew at 0 + 1000/3 = 333.3
    let renew = t.take(0, Renew);
    t.at(336);
    let reply = t.apply(&renew);
    t.reply(0, &renew, reply);
    // sent at 334 (the first timeout after 333.3): 334 + 988 = 1322
    t.expect_event(
        0,
        Event::Renewed {
            valid_until: at(1_322),
        },
    );
    t.release(0, lock);
    t.serve(0, Release);
    t.expect_event(0, Event::Released);
    assert_eq!(t.holder("report"), None);
    assert_eq!(
        t.clients[0].machine.lock_count(),
        0,
        "finished locks are forgotten"
    );
}

#[test]
fn rule1_validity_is_measured_from_the_send_not_the_reply() {
    let mut t = Timeline::redis(1);
    t.at(0);
    t.acquire(0, "report", opts(1_000));
    let req = t.take(0, Acquire);
    let reply = t.apply(&req);
    t.at(500).reply(0, &req, reply);
    // 0 + 988, not 500 + 988
    t.expect_event(
        0,
        Event::Acquired {
            token: FencingToken(1),
            valid_until: at(988),
            previous: fencepost_core::Previous::None,
        },
    );
}

#[test]
fn rule2_lost_fires_from_the_timer_when_no_reply_ever_comes() {
    let mut t = Timeline::redis(1);
    t.at(0);
    t.acquire(0, "report", opts(1_000));
    t.at(2).serve(0, Acquire);
    t.events(0);
    t.at(334);
    let _renew = t.take(0, Renew); // black-holed
    assert_eq!(t.clients[0].next_timeout, Some(at(988)));
    t.at(987).expect_no_event(0);
    t.at(988); // 0 + 1000·0.99 − 2
    t.expect_event(
        0,
        Event::Lost {
            reason: LostReason::Expired,
        },
    );
}

#[test]
fn rule3_rejected_renewal_is_lost_at_once_and_never_recreates_the_key() {
    let mut t = Timeline::redis(1);
    t.at(0);
    t.acquire(0, "report", opts(1_000));
    t.at(1).serve(0, Acquire);
    t.events(0);
    t.server.delete(&t.lock_key("report")); // an operator deletes the key
    t.at(334).serve(0, Renew);
    t.expect_event(
        0,
        Event::Lost {
            reason: LostReason::RenewRejected,
        },
    );
    assert_eq!(
        t.holder("report"),
        None,
        "the renewal did not re-create the key"
    );
    t.expect_no_request(0);
}

#[test]
fn rule3_transient_renew_failures_retry_then_lost_exactly_at_the_deadline() {
    // A failover: every renew times out or answers READONLY until the deadline.
    let mut t = Timeline::redis(1);
    t.at(0);
    t.acquire(0, "report", opts(1_000));
    t.at(1).serve(0, Acquire);
    t.events(0);
    let mut renews = 0;
    let mut now = 334;
    while now < 988 {
        t.at(now);
        while t.has_pending(0, Renew) {
            let r = t.take(0, Renew);
            renews += 1;
            if renews % 2 == 0 {
                t.fail(0, &r);
            } else {
                t.reply_value(
                    0,
                    &r,
                    RedisValue::Error(
                        "READONLY You can't write against a read only replica.".into(),
                    ),
                );
            }
        }
        assert_eq!(t.events(0), vec![], "no loss before the deadline (t={now})");
        now += 10;
    }
    assert!(renews >= 5, "renewal was retried, got {renews} attempts");
    t.at(988);
    assert_eq!(
        t.events(0),
        vec![Event::Lost {
            reason: LostReason::Expired
        }]
    );
}

#[test]
fn rule4_renew_reply_after_deadline_does_not_resurrect_the_lease() {
    let mut t = Timeline::redis(1);
    t.at(0);
    t.acquire(0, "report", opts(1_000));
    t.at(2).serve(0, Acquire);
    t.events(0);
    t.at(334);
    let renew = t.take(0, Renew);
    let applied = t.apply(&renew); // the server renewed: key held until 1334
    t.at(988).expect_event(
        0,
        Event::Lost {
            reason: LostReason::Expired,
        },
    );
    let cleanup = t.take(0, Release); // sent at the loss, before any reply
    t.at(1_300).reply(0, &renew, applied); // too late
    assert_eq!(t.events(0), vec![], "never Renewed after Lost");
    // the renewal landed before the cleanup release already in flight (a renewal
    // cannot create the key), so that release is enough: no second one
    t.expect_no_request(0);
    let reply = t.apply(&cleanup);
    t.reply(0, &cleanup, reply);
    assert_eq!(
        t.holder("report"),
        None,
        "the renewed key was released, not left until 1334"
    );
}

#[test]
fn refresh_after_expiry_finds_no_key_and_creates_none() {
    // t=0 A acquires (ttl 1000, renew every 800); A's renew is delayed; t=1000 the key
    // expires; t=1100 B acquires; t=1300 B releases; t=1400 A's renew arrives.
    let mut t = Timeline::redis(2);
    let mut o = opts(1_000);
    o.renew_every = Some(ms(800));
    t.at(0);
    t.acquire(0, "report", o.clone());
    t.serve(0, Acquire);
    t.events(0);
    t.at(800);
    let renew = t.take(0, Renew); // delayed in the network
    t.at(988);
    assert_eq!(
        t.events(0),
        vec![Event::Lost {
            reason: LostReason::Expired
        }]
    );
    let _cleanup = t.take(0, Release); // lost in the network too
    t.at(1_000);
    assert_eq!(t.holder("report"), None, "the key expired");
    t.at(1_100);
    let b = t.acquire(1, "report", o);
    t.serve(1, Acquire);
    assert_eq!(acquired_token(&t.events(1)), Some(2));
    t.at(1_300).release(1, b);
    t.serve(1, Release);
    t.at(1_400);
    let reply = t.apply(&renew);
    assert_eq!(
        reply,
        fencepost_core::Reply::Redis(RedisValue::Int(0)),
        "no key of A's"
    );
    t.reply(0, &renew, reply);
    t.expect_no_event(0);
    assert_eq!(t.holder("report"), None, "no key was created for A");
}

#[test]
fn rule4_release_after_expiry_leaves_the_new_holder_alone() {
    let mut t = Timeline::redis(2);
    let mut o = opts(1_000);
    o.auto_renew = false;
    t.at(0);
    let a = t.acquire(0, "report", o.clone());
    t.serve(0, Acquire);
    t.at(988);
    assert!(t.events(0).contains(&Event::Lost {
        reason: LostReason::Expired
    }));
    let cleanup = t.take(0, Release); // delayed
    t.at(1_001);
    t.acquire(1, "report", o);
    t.serve(1, Acquire);
    let b_owner = t.clients[1]
        .machine
        .owner(fencepost_core::LockId(1))
        .unwrap();
    t.at(1_100);
    let reply = t.apply(&cleanup);
    t.reply(0, &cleanup, reply);
    assert_eq!(
        t.holder("report"),
        Some(b_owner.to_string()),
        "B's key survives A's release"
    );
    // a release of a lost lock is a no-op or, once forgotten, an unknown lock
    let r = t.clients[0].machine.release(t.now, a);
    assert!(matches!(r, Ok(()) | Err(UsageError::UnknownLock { .. })));
    t.expect_no_request(0);
}

#[test]
fn rule5_ambiguous_acquire_is_retried_with_the_same_owner_and_gets_the_same_token() {
    let mut t = Timeline::redis(1);
    t.at(0);
    let lock = t.acquire(0, "report", opts(1_000));
    let first = t.take(0, Acquire);
    t.apply(&first); // applied on the server, reply lost
    t.at(5).fail(0, &first);
    t.expect_no_event(0);
    t.run_until(600);
    let events = t.events(0);
    assert_eq!(
        acquired_token(&events),
        Some(1),
        "idempotent: same token, no second grant"
    );
    let owner = t.clients[0].machine.owner(lock).unwrap();
    assert_eq!(t.holder("report"), Some(owner.to_string()));
}

#[test]
fn rule5_ambiguous_acquire_that_gives_up_releases_instead_of_orphaning() {
    let mut t = Timeline::redis(1);
    let mut o = opts(10_000);
    o.acquire_timeout = Some(ms(0));
    t.at(0);
    t.acquire(0, "report", o);
    let first = t.take(0, Acquire);
    t.apply(&first); // applied, reply lost
    t.at(5).fail(0, &first);
    assert!(matches!(
        t.events(0).as_slice(),
        [Event::AcquireFailed {
            reason: AcquireFailedReason::Timeout {
                last_error: Some(_)
            }
        }]
    ));
    t.serve(0, Release);
    assert_eq!(t.holder("report"), None, "not orphaned until its TTL");
}

#[test]
fn rule5_giving_up_after_an_ambiguous_attempt_and_refusals_still_releases_it() {
    let mut t = Timeline::redis(2);
    // the refusals prove nothing about the stuck attempt: its owner id is released
    let cleanup = t.give_up_then_stuck_attempt_lands("report");
    assert!(t.holder("report").is_some()); // the stuck attempt landed after the release
    let released = t.apply(&cleanup);
    t.reply(0, &cleanup, released);
    assert_eq!(t.holder("report"), None, "not orphaned until its TTL");
}

#[test]
fn rule5_cancelling_after_an_ambiguous_attempt_and_a_refusal_still_releases_it() {
    let mut t = Timeline::redis(2);
    let mut o = opts(10_000);
    o.retry_base = ms(200);
    o.retry_max = ms(200);
    let (other, lock, stuck) = t.stuck_attempt_then_refusals("report", o, 1);
    t.release(0, lock);
    t.release(1, other);
    t.serve(1, Release);
    t.apply(&stuck);
    assert!(t.holder("report").is_some());
    t.serve(0, Release);
    assert_eq!(t.events(0), vec![Event::Released]);
    assert_eq!(t.holder("report"), None, "not orphaned until its TTL");
}

#[test]
fn grant_arriving_after_its_validity_is_released_not_used() {
    // A GC pause between the send and reading the reply.
    let mut t = Timeline::redis(1);
    let mut o = opts(1_000);
    o.retry_base = ms(100); // the retry is not yet sent when the reply comes
    t.at(0);
    let lock = t.acquire(0, "report", o);
    let owner_before = t.clients[0].machine.owner(lock).unwrap();
    let req = t.take(0, Acquire);
    let granted = t.apply(&req);
    t.at(990).reply(0, &req, granted); // 990 > 0 + 988: the deadline timer fired first
    let events = t.events(0);
    assert!(acquired_token(&events).is_none(), "{events:?}");
    t.serve(0, Release);
    assert_eq!(t.holder("report"), None);
    // the next attempt uses a fresh owner id, so the release cannot race it
    t.run_until(1_600);
    assert_eq!(acquired_token(&t.events(0)), Some(2));
    assert_ne!(t.clients[0].machine.owner(lock).unwrap(), owner_before);
}

#[test]
fn rule6_time_going_backwards_is_a_usage_error_and_changes_nothing() {
    let mut m = Machine::with_seed(Backend::default(), 1);
    m.acquire(at(100), "report", opts(1_000)).unwrap();
    let err = m.handle_input(Input::Timeout { now: at(50) }).unwrap_err();
    assert_eq!(
        err,
        UsageError::TimeWentBackwards {
            now: at(50),
            last: at(100)
        }
    );
    assert!(err.to_string().contains("monotonic"));
}

#[test]
fn rule6_time_out_of_range_is_a_usage_error_and_changes_nothing() {
    let mut m = Machine::with_seed(Backend::default(), 1);
    m.acquire(at(0), "report", opts(1_000)).unwrap();
    let Output::Request(acquire) = m.poll_output() else {
        panic!("the acquire is sent")
    };
    assert_eq!(m.poll_output(), Output::Timeout(acquire.deadline));
    // a reading past LATEST (a host that saturated a huge or broken clock value) would
    // leave no room for a finite deadline: refused, whatever the input
    let late = Instant::from_nanos(Instant::LATEST.as_nanos() + 1);
    for input in [
        Input::Timeout { now: late },
        Input::Release {
            now: Instant::MAX,
            lock: acquire.lock,
        },
    ] {
        let err = m.handle_input(input).unwrap_err();
        assert!(matches!(err, UsageError::TimeOutOfRange { .. }), "{err:?}");
        assert_eq!(err.kind(), "time_out_of_range");
        assert!(err.to_string().contains("monotonic"), "{err}");
        assert_eq!(
            m.poll_output(),
            Output::Timeout(acquire.deadline),
            "nothing changed"
        );
    }
    let err = m.acquire(Instant::MAX, "other", opts(1_000)).unwrap_err();
    assert!(matches!(err, UsageError::TimeOutOfRange { .. }));
    // LATEST itself is accepted, and a lock taken then still gets finite deadlines
    let mut m = Machine::with_seed(Backend::default(), 1);
    m.acquire(Instant::LATEST, "report", opts(1_000)).unwrap();
    let Output::Request(req) = m.poll_output() else {
        panic!("the acquire is sent")
    };
    assert!(req.deadline > Instant::LATEST && req.deadline < Instant::MAX);
}

#[test]
fn rule7_tokens_strictly_increase_across_holders() {
    let mut t = Timeline::redis(3);
    let mut tokens = Vec::new();
    for round in 0..6u64 {
        let c = (round % 3) as usize;
        t.at(round * 10);
        let l = t.acquire(c, "report", opts(1_000));
        t.serve(c, Acquire);
        tokens.push(acquired_token(&t.events(c)).unwrap());
        t.release(c, l);
        t.serve(c, Release);
        t.events(c);
    }
    assert_eq!(tokens, vec![1, 2, 3, 4, 5, 6]);
}

#[test]
fn rule8_correctness_on_redis_is_refused_without_the_opt_in() {
    let mut m = Machine::with_seed(Backend::default(), 1);
    let mut o = opts(1_000);
    o.purpose = Purpose::Correctness;
    let err = m.acquire(at(0), "report", o.clone()).unwrap_err();
    assert!(matches!(err, UsageError::UnsafePurpose { .. }));
    assert!(err.to_string().contains("etcd"));
    assert_eq!(m.poll_output(), Output::Idle, "nothing was sent");
    o.accept_failover_risk = true;
    assert!(m.acquire(at(0), "report", o).is_ok());
}

#[test]
fn rule9_timeout_zero_tries_exactly_once() {
    let mut t = Timeline::redis(2);
    t.at(0);
    t.acquire(0, "report", opts(1_000));
    t.serve(0, Acquire);
    let mut o = opts(1_000);
    o.acquire_timeout = Some(ms(0));
    t.acquire(1, "report", o);
    t.serve(1, Acquire);
    t.expect_event(
        1,
        Event::AcquireFailed {
            reason: AcquireFailedReason::Timeout { last_error: None },
        },
    );
    t.run_until(5_000);
    let acquires = t.clients[1]
        .sent
        .iter()
        .filter(|(_, r)| r.operation == Acquire)
        .count();
    assert_eq!(acquires, 1);
}

#[test]
fn rule9_hundred_contenders_retry_at_jittered_instants_within_the_bound() {
    let mut t = Timeline::redis(1);
    t.at(0);
    t.acquire(0, "report", opts(60_000));
    t.serve(0, Acquire);
    let mut o = opts(60_000);
    o.retry_base = ms(100);
    o.retry_max = ms(100);
    for _ in 0..100 {
        t.acquire(0, "report", o.clone());
    }
    t.at(1);
    t.serve_all(); // all 100 fail at once
    let mut retry_times = HashSet::new();
    for step in 2..=102 {
        t.at(step);
        for (sent_at, _) in t.clients[0].pending.drain(..).map(|r| (step, r)) {
            retry_times.insert(sent_at);
        }
    }
    let retried = t.clients[0]
        .sent
        .iter()
        .filter(|(s, r)| r.operation == Acquire && *s > at(1))
        .count();
    assert_eq!(
        retried, 100,
        "every contender retried within retry_max (100 ms)"
    );
    let distinct: HashSet<_> = t.clients[0]
        .sent
        .iter()
        .filter(|(s, r)| r.operation == Acquire && *s > at(1))
        .map(|(s, _)| *s)
        .collect();
    assert!(
        distinct.len() >= 40,
        "retries spread over {} instants only",
        distinct.len()
    );
}

#[test]
fn rule9_waiters_acquire_when_the_holder_releases() {
    let mut t = Timeline::redis(2);
    t.at(0);
    let a = t.acquire(0, "report", opts(1_000));
    t.serve(0, Acquire);
    t.acquire(1, "report", opts(1_000));
    t.serve(1, Acquire); // contended
    t.at(50).release(0, a);
    t.serve(0, Release);
    t.run_until(700); // backoff steps 10, 20, 40, … ms capped at 500
    assert_eq!(acquired_token(&t.events(1)), Some(2));
}

#[test]
fn rule10_every_request_carries_a_deadline() {
    let mut t = Timeline::redis(1);
    t.at(0);
    let l = t.acquire(0, "report", opts(1_000));
    let acquire = t.take(0, Acquire);
    assert_eq!(acquire.deadline, at(988));
    let reply = t.apply(&acquire);
    t.reply(0, &acquire, reply);
    t.at(334);
    let renew = t.take(0, Renew);
    assert_eq!(
        renew.deadline,
        at(988),
        "a renew matters until the validity deadline"
    );
    t.release(0, l);
    let release = t.take(0, Release);
    assert_eq!(release.deadline, at(1_334), "a release matters for one TTL");
}

#[test]
fn acquire_without_reply_within_validity_is_treated_as_ambiguous() {
    let mut t = Timeline::redis(1);
    t.at(0);
    t.acquire(0, "report", opts(1_000));
    let hung = t.take(0, Acquire);
    t.apply(&hung); // applied, but the reply never comes
    t.run_until(1_500);
    // retried with the same owner id: granted the token the hung request got
    assert_eq!(acquired_token(&t.events(0)), Some(1));
}

#[test]
fn cancelling_an_acquire_in_flight_frees_the_lock_even_if_it_lands_late() {
    let mut t = Timeline::redis(1);
    t.at(0);
    let l = t.acquire(0, "report", opts(1_000));
    let acquire = t.take(0, Acquire);
    t.at(1).release(0, l);
    t.serve(0, Release); // reaches the server first: nothing to delete
    t.expect_event(0, Event::Released);
    t.at(2);
    let granted = t.apply(&acquire); // the acquire lands afterwards
    t.reply(0, &acquire, granted);
    assert_eq!(t.events(0), vec![], "no Acquired after cancellation");
    t.serve(0, Release);
    assert_eq!(t.holder("report"), None, "the late grant was released");
    assert_eq!(t.clients[0].machine.lock_count(), 0);
}

#[test]
fn release_that_finds_the_key_gone_reports_the_loss() {
    let mut t = Timeline::redis(1);
    let mut o = opts(10_000);
    o.auto_renew = false;
    t.at(0);
    let l = t.acquire(0, "report", o);
    t.serve(0, Acquire);
    t.events(0);
    t.server.flush(); // restart without persistence
    t.at(100).release(0, l);
    t.serve(0, Release);
    assert_eq!(
        t.events(0),
        vec![Event::Lost {
            reason: LostReason::NotHeldAtRelease
        }]
    );
}

#[test]
fn duplicate_and_unknown_replies_are_harmless() {
    let mut t = Timeline::redis(1);
    t.at(0);
    t.acquire(0, "report", opts(1_000));
    let req = t.take(0, Acquire);
    let reply = t.apply(&req);
    t.reply(0, &req, reply.clone());
    t.reply(0, &req, reply.clone());
    t.input(
        0,
        Input::Reply {
            now: at(0),
            request: fencepost_core::RequestId(999),
            reply,
        },
    );
    assert_eq!(t.events(0).len(), 1);
    t.expect_no_request(0);
}

#[test]
fn owner_ids_are_128_bit_and_never_repeat() {
    let mut m = Machine::new(Backend::default()).expect("getrandom works here");
    let mut m2 = Machine::new(Backend::default()).unwrap();
    let mut seen = HashSet::new();
    for i in 0..1_000u64 {
        let l = m.acquire(at(i), "a", opts(1_000)).unwrap();
        let l2 = m2.acquire(at(i), "a", opts(1_000)).unwrap();
        assert!(seen.insert(m.owner(l).unwrap()));
        assert!(seen.insert(m2.owner(l2).unwrap()));
    }
    assert_eq!(
        m.owner(fencepost_core::LockId(1))
            .unwrap()
            .to_string()
            .len(),
        32
    );
}

#[test]
fn many_locks_share_one_timer_heap() {
    let mut t = Timeline::redis(1);
    t.at(0);
    let n = 10_000;
    let locks: Vec<_> = (0..n)
        .map(|i| t.acquire(0, &format!("job:{i}"), opts(3_000)))
        .collect();
    t.serve_all();
    assert_eq!(t.events(0).len(), n);
    t.run_until(10_000); // about 10 renewals each
    let renewed = t
        .events(0)
        .iter()
        .filter(|e| matches!(e, Event::Renewed { .. }))
        .count();
    assert!(renewed >= 9 * n, "renewed {renewed}");
    for l in locks {
        t.release(0, l);
    }
    t.serve_all();
    assert_eq!(t.clients[0].machine.lock_count(), 0);
    assert_eq!(t.clients[0].machine.poll_output(), Output::Idle);
}

#[test]
fn invalid_input_is_rejected_before_anything_changes() {
    let mut m = Machine::with_seed(Backend::default(), 1);
    assert!(matches!(
        m.acquire(at(0), "", opts(1_000)),
        Err(UsageError::InvalidName { len: 0, nul: false })
    ));
    // NUL: PostgreSQL text cannot hold it, so no backend takes it
    assert!(matches!(
        m.acquire(at(0), "a\0b", opts(1_000)),
        Err(UsageError::InvalidName { len: 3, nul: true })
    ));
    assert!(matches!(
        m.acquire(at(0), "x", opts(0)),
        Err(UsageError::InvalidOption { .. })
    ));
    assert!(matches!(
        m.release(at(0), fencepost_core::LockId(7)),
        Err(UsageError::UnknownLock { .. })
    ));
    assert_eq!(m.poll_output(), Output::Idle);
    let o = LockOptions {
        retry_max: ms(1),
        retry_base: ms(2),
        ..opts(1_000)
    };
    let err = m.acquire(at(0), "x", o).unwrap_err();
    assert!(err.to_string().starts_with("retry_max"), "{err}");
}

#[test]
fn rule10_a_hung_acquire_gives_up_at_the_acquire_timeout_and_releases() {
    let mut t = Timeline::redis(1);
    let mut o = opts(30_000);
    o.acquire_timeout = Some(ms(500));
    t.at(0);
    t.acquire(0, "report", o);
    let hung = t.take(0, Acquire);
    assert_eq!(
        hung.deadline,
        at(500),
        "cancel the request at the acquire timeout"
    );
    t.apply(&hung); // it did reach the server
    t.at(499).expect_no_event(0);
    t.at(500);
    assert!(matches!(
        t.events(0).as_slice(),
        [Event::AcquireFailed {
            reason: AcquireFailedReason::Timeout {
                last_error: Some(_)
            }
        }]
    ));
    t.serve(0, Release); // owner-checked release of the ambiguous grant
    assert_eq!(t.holder("report"), None);
}

#[test]
fn outputs_and_inputs_are_plain_data_in_json() {
    let mut m = Machine::with_seed(Backend::default(), 1);
    m.acquire(at(0), "report", opts(1_000)).unwrap();
    let mut outputs = Vec::new();
    loop {
        let o = m.poll_output();
        let done = matches!(o, Output::Timeout(_) | Output::Idle);
        outputs.push(o);
        if done {
            break;
        }
    }
    let json = serde_json::to_string(&outputs).expect("outputs serialize");
    let back: Vec<Output> = serde_json::from_str(&json).expect("and deserialize");
    assert_eq!(back, outputs);
    assert!(
        json.contains(r#""type":"timeout","data":988000000"#),
        "{json}"
    );
}

#[test]
fn releasing_a_finished_lock_is_a_no_op_whether_or_not_it_is_remembered() {
    let mut t = Timeline::redis(1);
    t.at(0);
    let l = t.acquire(0, "report", opts(1_000));
    t.serve(0, Acquire);
    t.release(0, l);
    t.serve(0, Release);
    assert_eq!(t.clients[0].machine.lock_count(), 0, "forgotten");
    t.release(0, l); // no error, nothing sent
    t.expect_no_request(0);
    assert!(matches!(
        t.clients[0]
            .machine
            .release(t.now, fencepost_core::LockId(99)),
        Err(UsageError::UnknownLock { .. })
    ));
}

#[test]
fn a_failed_heartbeat_loses_a_connection_bound_lock_at_once() {
    use fencepost_core::{PgMode, PostgresBackend, SqlReply, SqlValue};
    for (mode, expect_lost) in [(PgMode::Session, true), (PgMode::Lease, false)] {
        let mut t = Timeline::postgres(
            1,
            PostgresBackend {
                mode,
                ..PostgresBackend::default()
            },
        );
        t.at(0);
        t.acquire(0, "job", opts(3_000));
        t.server.script(SqlReply::Rows {
            rows: vec![vec![SqlValue::Int(7), SqlValue::Null]],
        });
        t.at(1).serve(0, Acquire);
        assert!(matches!(t.events(0).as_slice(), [Event::Acquired { .. }]));
        t.at(1_001); // heartbeat at ttl/3
        let heartbeat = t.take(0, Renew);
        t.at(1_002)
            .fail_with(0, &heartbeat, "server closed the connection unexpectedly");
        let lost = t.events(0).contains(&Event::Lost {
            reason: LostReason::RenewRejected,
        });
        assert_eq!(lost, expect_lost, "{mode:?}");
    }
}

#[test]
fn a_heartbeat_answered_with_garbage_loses_a_session_lock_at_once() {
    use fencepost_core::{PgMode, PostgresBackend, RedisValue, Reply, SqlReply, SqlValue};
    // a miswired adapter (another backend's reply) and an error reply: the heartbeat
    // failed either way, and the session holding the lock cannot be trusted
    let garbage = [
        Reply::Redis(RedisValue::Int(1)),
        Reply::Sql(SqlReply::Error {
            sqlstate: "57P01".to_owned(),
            message: "terminating connection due to administrator command".to_owned(),
        }),
    ];
    for reply in garbage {
        let mut t = Timeline::postgres(
            1,
            PostgresBackend {
                mode: PgMode::Session,
                ..PostgresBackend::default()
            },
        );
        t.at(0);
        t.acquire(0, "job", opts(3_000));
        t.server.script(SqlReply::Rows {
            rows: vec![vec![SqlValue::Int(7), SqlValue::Null]],
        });
        t.at(1).serve(0, Acquire);
        t.at(1_001); // heartbeat at ttl/3
        let heartbeat = t.take(0, Renew);
        t.at(1_002).reply(0, &heartbeat, reply.clone());
        assert!(
            t.events(0).contains(&Event::Lost {
                reason: LostReason::RenewRejected
            }),
            "{reply:?}: {:?}",
            t.events(0)
        );
    }
}
