//! etcd with one lease for many locks (`EtcdBackend::shared_lease`, etcd's
//! `concurrency.Session`), against the in-memory etcd: one grant, one keep-alive a renew
//! period for every lock of a machine, their shared fate, and releases that leave the
//! lease to the others.

mod support;

use fencepost_core::backends::etcd::{EtcdBackend, EtcdRequest};
use fencepost_core::memory::MemoryEtcd;
use fencepost_core::{Event, LockId, LostReason, Operation, Request};
use support::etcd::*;
use support::*;

use Operation::{Acquire, Release, Renew};

fn shared(n: usize) -> Timeline<MemoryEtcd> {
    Timeline::with_backend(
        n,
        EtcdBackend {
            shared_lease: true,
            ..EtcdBackend::default()
        },
    )
}

/// Every pending request of client `c`, taken.
fn take_all(t: &mut Timeline<MemoryEtcd>, c: usize) -> Vec<Request> {
    std::mem::take(&mut t.clients[c].pending)
}

/// The lease the key of `lock` on client 0 is attached to, on the server.
fn attached(t: &mut Timeline<MemoryEtcd>, name: &str, lock: LockId) -> Option<i64> {
    let key = t.key_of(0, name, lock);
    let now = t.now;
    t.server.get(now, &key).map(|kv| kv.lease)
}

fn count(events: &[Event], f: impl Fn(&Event) -> bool) -> usize {
    events.iter().filter(|e| f(e)).count()
}

#[test]
fn locks_share_one_grant_and_one_keep_alive_a_renew_period() {
    let mut t = shared(1);
    t.at(0);
    let a = t.acquire(0, "a", opts(3_000));
    let grant = t.take_only(0);
    let EtcdRequest::LeaseGrant { id, ttl_s: 3 } = *call(&grant) else {
        panic!("a grant first: {grant:?}");
    };
    let reply = t.apply(&grant);
    t.reply(0, &grant, reply);
    t.serve_all();
    assert!(acquired(&t.events(0)).is_some());
    // the next locks ride on the lease a reply confirmed a moment ago: their first
    // request is the key's transaction, no grant, no keep-alive
    t.at(10);
    let b = t.acquire(0, "b", opts(3_000));
    let c = t.acquire(0, "c", opts(2_500)); // 2.5 s rounds up to the same 3 s lease
    for req in take_all(&mut t, 0) {
        assert!(is_acquire_txn(&req), "{req:?}");
        let reply = t.apply(&req);
        t.reply(0, &req, reply);
    }
    assert_eq!(
        count(&t.events(0), |e| matches!(e, Event::Acquired { .. })),
        2
    );
    for (name, lock) in [("a", a), ("b", b), ("c", c)] {
        assert_eq!(attached(&mut t, name, lock), Some(id), "{name}");
    }
    // a renews at 1000 (its base 0 + 3000/3); b and c, based on the same grant, join it:
    // one keep-alive of the shared lease renews all three
    t.at(1_000);
    let renewal = t.take_only(0);
    assert_eq!(renewal.operation, Renew);
    assert_eq!(call(&renewal), &EtcdRequest::LeaseKeepAlive { id });
    assert_eq!(t.clients[0].machine.requests_in_flight(), 1);
    let reply = t.apply(&renewal);
    t.reply(0, &renewal, reply);
    let events = t.events(0);
    assert_eq!(
        count(&events, |e| matches!(e, Event::Renewed { .. })),
        3,
        "{events:?}"
    );
}

#[test]
fn ten_thousand_locks_renew_with_one_keep_alive_a_renew_interval() {
    // TTL 30 s, acquired one a millisecond over 10 s, held 60 s more
    let mut t = shared(1);
    let n = 10_000u64;
    for i in 0..n {
        t.at(i);
        t.acquire(0, &format!("job/{i}"), opts(30_000));
        t.serve_all();
    }
    let events = t.events(0);
    assert_eq!(
        count(&events, |e| matches!(e, Event::Acquired { .. })),
        n as usize
    );
    let (mut requests, mut grants) = (0usize, 0usize);
    let mut next = 0u64;
    loop {
        t.serve_all_by(|t, c, req| {
            match call(req) {
                EtcdRequest::LeaseKeepAlive { .. } => requests += 1,
                EtcdRequest::LeaseGrant { .. } => grants += 1,
                _ => {}
            }
            t.answer(c, req)
        });
        let due = (t.clients.iter())
            .filter_map(|c| c.next_timeout)
            .filter(|at| *at > t.now)
            .min();
        match due {
            Some(due) if due <= at(70_000) => {
                t.at_instant(due);
            }
            _ => break,
        }
        next += 1;
        assert!(next < 100_000, "runaway timeline");
    }
    let events = t.events(0);
    assert_eq!(count(&events, |e| matches!(e, Event::Lost { .. })), 0);
    let renewed = count(&events, |e| matches!(e, Event::Renewed { .. }));
    assert!(renewed >= 6 * n as usize, "renewed {renewed}");
    assert_eq!(grants, 0, "the one lease was granted before the run");
    // two groups per renew interval at most, 7 intervals: against 60,000+ keep-alives
    assert!(requests <= 2 * 7, "{requests} keep-alives");
    println!("{n} locks on one shared lease, TTL 30 s, 60 s: {requests} keep-alives for {renewed} renewals");
}

#[test]
fn a_lapsed_shared_lease_loses_every_lock_on_it_and_is_never_granted_again() {
    let mut t = shared(1);
    t.at(0);
    let a = t.acquire(0, "a", opts(3_000));
    t.serve_all();
    t.acquire(0, "b", opts(3_000));
    t.serve_all();
    t.events(0);
    let first = attached(&mut t, "a", a).expect("a's key");
    // the keep-alives from 1000 on never reach etcd (a partition): both locks are lost
    // at their validity, and etcd ends the lease at its TTL
    for ms in (1_000..=3_000).step_by(100) {
        t.at(ms);
        take_all(&mut t, 0);
    }
    let events = t.events(0);
    assert_eq!(
        count(&events, |e| matches!(e, Event::Lost { .. })),
        2,
        "{events:?}"
    );
    t.at(3_100);
    t.server.expire(t.now);
    // a new lock first keeps the session alive (it was confirmed, long ago), finds it
    // gone, and grants a fresh lease id: a late keep-alive of the lapsed one can never
    // revive it under someone's key
    let c = t.acquire(0, "c", opts(3_000));
    let keep_alive = t.take_only(0);
    assert_eq!(
        call(&keep_alive),
        &EtcdRequest::LeaseKeepAlive { id: first }
    );
    let reply = t.apply(&keep_alive);
    t.reply(0, &keep_alive, reply);
    let req = t.take_only(0);
    let EtcdRequest::LeaseGrant { id: second, .. } = *call(&req) else {
        panic!("the session is not known alive: {req:?}");
    };
    assert_ne!(second, first);
    let reply = t.apply(&req);
    t.reply(0, &req, reply);
    t.serve_all();
    assert!(acquired(&t.events(0)).is_some());
    assert_eq!(attached(&mut t, "c", c), Some(second));
}

#[test]
fn a_keep_alive_finding_the_lease_gone_loses_its_locks_and_retires_it() {
    let mut t = shared(1);
    t.at(0);
    let a = t.acquire(0, "a", opts(3_000));
    t.serve_all();
    t.acquire(0, "b", opts(3_000));
    t.serve_all();
    t.events(0);
    let id = attached(&mut t, "a", a).expect("a's key");
    // an operator revokes the lease: etcd deletes both keys
    assert!(t.server.revoke(id));
    t.at(1_000);
    t.serve_all();
    let events = t.events(0);
    let lost = |e: &Event| {
        matches!(
            e,
            Event::Lost {
                reason: LostReason::RenewRejected,
                ..
            }
        )
    };
    assert_eq!(count(&events, lost), 2, "{events:?}");
    take_all(&mut t, 0);
    t.at(1_100);
    t.acquire(0, "c", opts(3_000));
    match call(&t.take_only(0)) {
        EtcdRequest::LeaseGrant { id: fresh, .. } => assert_ne!(*fresh, id),
        other => panic!("a fresh lease: {other:?}"),
    }
}

#[test]
fn a_release_deletes_its_key_and_leaves_the_lease_to_the_others() {
    let mut t = shared(1);
    t.at(0);
    let a = t.acquire(0, "a", opts(3_000));
    t.serve_all();
    let b = t.acquire(0, "b", opts(3_000));
    t.serve_all();
    t.events(0);
    let (a_key, b_key) = (t.key_of(0, "a", a), t.key_of(0, "b", b));
    let lease = attached(&mut t, "a", a).expect("a's key");
    t.at(100);
    t.release(0, a);
    let delete = t.take_only(0);
    assert_eq!(delete.operation, Release);
    assert!(
        matches!(call(&delete), EtcdRequest::Txn(_)),
        "a delete transaction: {delete:?}"
    );
    let reply = t.apply(&delete);
    t.reply(0, &delete, reply);
    let events = t.events(0);
    assert!(
        events.iter().any(|e| matches!(e, Event::Released)),
        "{events:?}"
    );
    t.expect_no_request(0);
    let now = t.now;
    assert!(t.server.get(now, &a_key).is_none());
    let now = t.now;
    assert_eq!(t.server.get(now, &b_key).map(|kv| kv.lease), Some(lease));
    assert!(t.server.lease_expires_at(lease).is_some());
    // b keeps renewing the lease
    t.run_until(10_000);
    let events = t.events(0);
    assert!(events.iter().all(|e| !matches!(e, Event::Lost { .. })));
    assert!(events.iter().any(|e| matches!(e, Event::Renewed { .. })));
}

#[test]
fn two_locks_of_one_name_on_one_lease_queue_on_their_own_keys() {
    let mut t = shared(1);
    t.at(0);
    let first = t.acquire(0, "report", opts(3_000));
    t.serve_all();
    assert!(acquired(&t.events(0)).is_some());
    t.at(10);
    let second = t.acquire(0, "report", opts(3_000));
    t.serve_all();
    assert_ne!(t.key_of(0, "report", first), t.key_of(0, "report", second));
    assert!(
        acquired(&t.events(0)).is_none(),
        "the second waits its turn"
    );
    assert!(t.has_pending(0, Operation::Wait));
    t.at(20);
    t.release(0, first);
    t.serve_all();
    let events = t.events(0);
    assert!(acquired(&events).is_some(), "{events:?}");
    assert_eq!(
        t.holder("report").map(|(k, _)| k),
        Some(t.key_of(0, "report", second))
    );
}

#[test]
fn a_cancelled_waiter_deletes_its_key_and_leaves_the_lease() {
    let mut t = shared(1);
    t.at(0);
    let holder = t.acquire(0, "report", opts(3_000));
    t.serve_all();
    t.events(0);
    t.at(10);
    let waiter = t.acquire(0, "report", opts(3_000));
    t.serve_all();
    let waiter_key = t.key_of(0, "report", waiter);
    let now = t.now;
    assert!(t.server.get(now, &waiter_key).is_some());
    let lease = attached(&mut t, "report", holder).expect("holder's key");
    t.at(20);
    t.release(0, waiter);
    t.serve_all();
    let now = t.now;
    assert!(t.server.get(now, &waiter_key).is_none());
    assert!(t.server.lease_expires_at(lease).is_some());
    assert_eq!(attached(&mut t, "report", holder), Some(lease));
}

#[test]
fn locks_of_other_ttls_get_leases_of_their_own() {
    let mut t = shared(1);
    t.at(0);
    let short = t.acquire(0, "a", opts(3_000));
    t.serve_all();
    let long = t.acquire(0, "b", opts(30_000));
    t.serve_all();
    let s = attached(&mut t, "a", short).expect("a's key");
    let l = attached(&mut t, "b", long).expect("b's key");
    assert_ne!(s, l);
    let ends = (t.server.lease_expires_at(s), t.server.lease_expires_at(l));
    assert_eq!(ends, (Some(at(3_000)), Some(at(30_000))));
}

#[test]
fn concurrent_first_acquires_agree_on_the_lease() {
    // three acquires before any reply: each asks for the same lease id; etcd grants
    // one and answers the others "lease already exists", which they then keep alive
    let mut t = shared(1);
    t.at(0);
    let locks = [
        t.acquire(0, "a", opts(3_000)),
        t.acquire(0, "b", opts(3_000)),
        t.acquire(0, "c", opts(3_000)),
    ];
    let grants = take_all(&mut t, 0);
    assert_eq!(grants.len(), 3);
    assert!(grants
        .iter()
        .all(|g| call(g) == call(&grants[0]) && g.operation == Acquire));
    for g in &grants {
        let reply = t.apply(g);
        t.reply(0, g, reply);
    }
    t.serve_all();
    assert_eq!(
        count(&t.events(0), |e| matches!(e, Event::Acquired { .. })),
        3
    );
    let leases: Vec<_> = [("a", locks[0]), ("b", locks[1]), ("c", locks[2])]
        .into_iter()
        .map(|(n, l)| attached(&mut t, n, l))
        .collect();
    assert!(leases.iter().all(|l| l.is_some() && *l == leases[0]));
}
