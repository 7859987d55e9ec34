//! Fair, instant hand-off on Redis: contended acquirers queue in FIFO order and park on a
//! blocking pop; a release grants the lock to the first live waiter and pushes its token
//! to that waiter's wake list, so the waiter's pop is its grant (one round trip per
//! hand-off) and the releasing process cannot take the lock straight back.

mod support;

use fencepost_core::memory::MemoryRedis;
use fencepost_core::{Event, Operation, RedisBackend, RequestBody};
use support::*;

use Operation::{Acquire, Release, Wait};

fn fair() -> Timeline<MemoryRedis> {
    Timeline::with_backend(
        3,
        RedisBackend {
            fair: true,
            ..RedisBackend::default()
        },
    )
}

#[test]
fn waiters_are_served_in_order_and_the_releaser_cannot_barge() {
    let mut t = fair();
    let mut o = opts(10_000);
    o.retry_max = ms(500);
    t.at(0);
    let a = t.acquire(0, "r", o.clone());
    t.serve(0, Acquire);
    assert_eq!(acquired_token(&t.events(0)), Some(1));
    t.at(1);
    t.acquire(1, "r", o.clone()); // B queues first
    t.serve(1, Acquire);
    assert!(t.has_pending(1, Wait), "B parks on a blocking pop");
    t.at(2);
    t.acquire(2, "r", o.clone()); // then C
    t.serve(2, Acquire);
    assert!(t.has_pending(2, Wait));

    // A releases and at once asks again
    t.at(3).release(0, a);
    t.serve(0, Release);
    assert_eq!(
        t.holder("r"),
        Some(
            t.clients[1]
                .machine
                .owner(fencepost_core::LockId(1))
                .unwrap()
                .to_string()
        ),
        "the release granted the lock to B, the first waiter"
    );
    let a2 = t.acquire(0, "r", o.clone());
    t.serve(0, Acquire);
    assert!(
        t.events(0)
            .iter()
            .all(|e| !matches!(e, Event::Acquired { .. })),
        "no barging"
    );
    assert!(!t.wake_if_ready(2), "C is not woken: B is first");
    assert!(t.wake_if_ready(1), "B is woken at once");
    assert!(
        !t.has_pending(1, Acquire),
        "the wake-up is the grant: no second round trip"
    );
    assert_eq!(acquired_token(&t.events(1)), Some(2));

    // B releases: C (queued before A's second attempt) is next, then A
    t.at(4).release(1, fencepost_core::LockId(1));
    t.serve(1, Release);
    assert!(!t.wake_if_ready(0));
    assert!(t.wake_if_ready(2));
    assert_eq!(acquired_token(&t.events(2)), Some(3));
    t.at(5).release(2, fencepost_core::LockId(1));
    t.serve(2, Release);
    assert!(t.wake_if_ready(0));
    assert_eq!(acquired_token(&t.events(0)), Some(4));
    t.release(0, a2);
    t.serve(0, Release);
    assert_eq!(t.holder("r"), None, "nobody waiting: the lock is free");
}

#[test]
fn a_waiter_that_gives_up_leaves_the_queue_and_is_skipped() {
    let mut t = fair();
    let mut o = opts(10_000);
    o.retry_max = ms(500);
    t.at(0);
    let a = t.acquire(0, "r", o.clone());
    t.serve(0, Acquire);
    t.acquire(1, "r", o.clone());
    t.serve(1, Acquire); // B queued
    t.acquire(2, "r", o.clone());
    t.serve(2, Acquire); // C queued
    t.at(10).release(1, fencepost_core::LockId(1)); // B gives up (cancels)
    t.serve(1, Release); // leaves the queue
    t.expect_event(1, Event::Released);
    t.at(20).release(0, a);
    t.serve(0, Release);
    assert!(t.wake_if_ready(2), "C, not the departed B, is woken");
    assert_eq!(acquired_token(&t.events(2)), Some(2));
}

#[test]
fn a_missed_wake_up_falls_back_on_the_backoff() {
    let mut t = fair();
    let mut o = opts(10_000);
    o.retry_base = ms(100);
    o.retry_max = ms(100);
    t.at(0);
    let a = t.acquire(0, "r", o.clone());
    t.serve(0, Acquire);
    t.acquire(1, "r", o.clone());
    t.serve(1, Acquire);
    let wait = t.take(1, Wait); // the blocking pop is lost on the way
    let RequestBody::RedisBlpop(b) = &wait.body else {
        unreachable!()
    };
    assert!(b.timeout_ms <= 100, "the wait is one backoff step at most");
    t.at(5).release(0, a);
    t.serve(0, Release);
    // B retries after its backoff (the wait's deadline) and finds the lock granted to it
    t.run_until(400);
    assert_eq!(acquired_token(&t.events(1)), Some(2));
}

#[test]
fn a_queued_waiter_parks_for_retry_max_not_a_short_backoff() {
    // The wake-up ends the wait; its timeout is only the fallback for a missed one.
    // Short parks (a polling backoff starting at retry_base) would send a queued waiter
    // back to the server again and again while it waits its turn.
    let mut t = fair();
    let mut o = opts(10_000);
    o.retry_base = ms(10);
    o.retry_max = ms(500);
    t.at(0);
    t.acquire(0, "r", o.clone());
    t.serve(0, Acquire);
    for c in 1..3 {
        t.acquire(c, "r", o.clone());
        t.serve(c, Acquire);
        let wait = t.take(c, Wait);
        let RequestBody::RedisBlpop(b) = &wait.body else {
            unreachable!()
        };
        assert!(
            (250..=500).contains(&b.timeout_ms),
            "parks between retry_max / 2 and retry_max: {}",
            b.timeout_ms
        );
    }
}
