//! Timeline tests of the machine on the etcd backend, against the in-memory etcd
//! (`MemoryEtcd`, whose replies are the JSON gateway's texts). Numbers are the story's;
//! arithmetic in comments. TTL 1000 ms → lease TTL 1 s, validity `sent + 988`, renew
//! (keep-alive) every 333.333 ms.

mod support;

use fencepost_core::backends::etcd::{EtcdCompare, EtcdOp, EtcdRequest};
use fencepost_core::memory::etcd_error;
use fencepost_core::{AcquireFailedReason, Event, FencingToken, LostReason, Operation};
use support::etcd::*;
use support::*;

use Operation::{Acquire, Release, Renew, Wait};

/// `n` renew intervals of a 1000 ms TTL (333.333333 ms each), as an instant.
fn third(n: u64) -> fencepost_core::Instant {
    fencepost_core::Instant::from_nanos(n * 333_333_333)
}

#[test]
fn grant_then_txn_holds_with_the_create_revision_valid_from_the_grant_send() {
    let mut t = Timeline::etcd(1);
    t.at(0);
    let lock = t.acquire(0, "report", opts(1_000));
    let grant = t.take_only(0);
    assert_eq!(grant.operation, Acquire);
    assert_eq!(
        call(&grant),
        &EtcdRequest::LeaseGrant {
            id: t.lease_of(0, lock),
            ttl_s: 1
        }
    );
    t.at(5);
    let reply = t.apply(&grant);
    t.reply(0, &grant, reply);
    let txn = t.take_only(0);
    assert!(
        is_acquire_txn(&txn),
        "the key transaction follows at once: {txn:?}"
    );
    t.at(10);
    let reply = t.apply(&txn);
    t.reply(0, &txn, reply);
    // the first write of a fresh etcd is revision 2; valid from the grant's send at 0
    // (the lease's clock), not the transaction's at 5: 0 + 1000·0.99 − 2 = 988
    t.expect_event(
        0,
        Event::Acquired {
            token: FencingToken(2),
            valid_until: at(988),
            // a fresh etcd: no contender ever joined this name
            previous: fencepost_core::Previous::None,
        },
    );
    assert_eq!(t.holder("report"), Some((t.key_of(0, "report", lock), 2)));
    // keep-alive at 0 + 333.333, from the lease's base too
    t.at(333).expect_no_request(0);
    t.at(334);
    let ka = t.take_only(0);
    assert_eq!(
        (ka.operation, call(&ka)),
        (
            Renew,
            &EtcdRequest::LeaseKeepAlive {
                id: t.lease_of(0, lock)
            }
        )
    );
    t.at(336);
    let reply = t.apply(&ka);
    t.reply(0, &ka, reply);
    // sent at 334: 334 + 988
    t.expect_event(
        0,
        Event::Renewed {
            valid_until: at(1_322),
        },
    );
    assert_eq!(
        t.server.lease_expires_at(t.lease_of(0, lock)),
        Some(at(1_336))
    );
}

#[test]
fn release_deletes_the_key_by_create_revision_then_revokes_the_lease() {
    let mut t = Timeline::etcd(1);
    t.at(0);
    let lock = t.acquire(0, "report", opts(1_000));
    t.serve_all();
    assert_eq!(acquired(&t.events(0)).map(|a| a.0), Some(2));
    let (key, lease) = (t.key_of(0, "report", lock), t.lease_of(0, lock));
    t.at(100).release(0, lock);
    let rel = t.take_only(0);
    assert_eq!(rel.operation, Release);
    let tx = txn(&rel);
    assert_eq!(
        tx.compare,
        vec![EtcdCompare {
            key: key.clone(),
            create_revision: 2
        }]
    );
    assert_eq!(
        tx.success,
        vec![
            EtcdOp::Delete { key: key.clone() },
            EtcdOp::Put {
                key: "fencepost/\0released/report".to_owned(),
                value: "2".to_owned(),
                lease: 0,
                ignore_lease: false,
            }
        ],
        "the delete records the clean release for the next holder"
    );
    let reply = t.apply(&rel);
    t.reply(0, &rel, reply);
    // the key is gone; the lease is revoked before the release is reported, so
    // nothing of this lock is left on the server when `Released` comes
    t.expect_no_event(0);
    let revoke = t.take_only(0);
    assert_eq!(
        (revoke.operation, call(&revoke)),
        (Release, &EtcdRequest::LeaseRevoke { id: lease })
    );
    let reply = t.apply(&revoke);
    t.reply(0, &revoke, reply);
    t.expect_event(0, Event::Released);
    assert_eq!(t.holder("report"), None);
    assert_eq!(
        t.server.lease_expires_at(lease),
        None,
        "the lease is revoked, not left to expire"
    );
    t.expect_no_request(0);
    assert_eq!(t.clients[0].machine.lock_count(), 0);
}

#[test]
fn fifo_each_waiter_watches_its_predecessor_and_is_woken_by_its_release() {
    let mut t = Timeline::etcd(3);
    let o = opts(1_000);
    t.at(0);
    let a = t.acquire(0, "r", o.clone());
    t.serve_all();
    assert_eq!(acquired(&t.events(0)), Some((2, at(988))));
    t.at(1);
    let b = t.acquire(1, "r", o.clone());
    t.serve_all(); // grant, then the put at revision 3: behind A
    t.at(2);
    let c = t.acquire(2, "r", o.clone());
    t.serve_all(); // the put at revision 4: behind B
    let (ka, kb) = (t.key_of(0, "r", a), t.key_of(1, "r", b));
    // each waiter parks on a watch of its immediate predecessor, from just after the
    // revision it read; the watch ends when its lease's keep-alive is due:
    // granted at 1 → due at 1 + 333.333 → 333 ms from 1 (whole ms)
    let EtcdRequest::Watch(wb) = call(&t.clients[1].pending[0]).clone() else {
        panic!("B parks on a watch: {:?}", t.clients[1].pending)
    };
    assert_eq!(
        (wb.key.as_str(), wb.start_revision, wb.timeout_ms),
        (ka.as_str(), 4, 333)
    );
    let EtcdRequest::Watch(wc) = call(&t.clients[2].pending[0]).clone() else {
        panic!("C parks on a watch: {:?}", t.clients[2].pending)
    };
    assert_eq!(
        (wc.key.as_str(), wc.start_revision, wc.timeout_ms),
        (kb.as_str(), 5, 333)
    );
    assert_eq!(
        t.clients[1].pending.len() + t.clients[2].pending.len(),
        2,
        "nothing but the watches"
    );
    // no polling while parked: nothing new until A releases at 100
    t.at(100);
    t.serve_all();
    assert_eq!(t.clients[1].sent.len(), 3, "B: grant, txn, watch");
    assert_eq!(t.clients[2].sent.len(), 3, "C: grant, txn, watch");
    t.release(0, a);
    t.serve_all(); // A's key deleted at 5: B's watch fires, B's txn finds itself first
    t.expect_event(0, Event::Released);
    // B's lease was granted by the request sent at 1: 1 + 988
    assert_eq!(acquired(&t.events(1)), Some((3, at(989))));
    assert_eq!(t.events(2), vec![], "C still waits, on B");
    assert!(t.has_pending(2, Wait));
    t.at(200).release(1, b);
    t.serve_all();
    assert_eq!(t.events(1), vec![Event::Released]);
    // granted in create-revision order: 2, 3, 4; C's lease from its grant at 2
    assert_eq!(acquired(&t.events(2)), Some((4, at(990))));
    assert_eq!(t.holder("r"), Some((t.key_of(2, "r", c), 4)));
}

#[test]
fn a_parked_waiter_keeps_its_lease_alive_and_never_polls() {
    let mut t = Timeline::etcd(2);
    let o = opts(1_000);
    t.at(0);
    t.acquire(0, "r", o.clone());
    t.serve_all();
    t.at(1);
    let b = t.acquire(1, "r", o.clone());
    // A holds (and keeps renewing) for 3 s; B waits behind it the whole time
    t.run_until(3_000);
    assert!(acquired(&t.events(1)).is_none());
    let lease = t.lease_of(1, b);
    let expires = t
        .server
        .lease_expires_at(lease)
        .expect("B's lease is alive");
    assert!(
        expires > at(3_000),
        "B's lease kept alive: expires at {expires}"
    );
    // B's requests: grant, then per renew interval: a watch that times out when the
    // keep-alive is due, the keep-alive, the transaction re-checking the queue
    let calls: Vec<&'static str> = t.clients[1]
        .sent
        .iter()
        .map(|(_, r)| match call(r) {
            EtcdRequest::LeaseGrant { .. } => "grant",
            EtcdRequest::LeaseKeepAlive { .. } => "keepalive",
            EtcdRequest::Txn(_) => "txn",
            EtcdRequest::Watch(_) => "watch",
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    let keepalives: Vec<_> = t.clients[1]
        .sent
        .iter()
        .filter(|(_, r)| matches!(call(r), EtcdRequest::LeaseKeepAlive { .. }))
        .map(|(at, _)| *at)
        .collect();
    // a keep-alive every 333.333 ms after the grant at 1: 8 of them by 3000
    // the watch times out 333 ms (333.333 rounded down) after it was sent, and the
    // keep-alive goes out then (within 1 ms of due counts as due): at 1 + 333·k, nine
    // of them by 3000
    let expected: Vec<_> = (1..=9).map(|k| at(1 + 333 * k)).collect();
    assert_eq!(keepalives, expected, "{calls:?}");
    // per interval: watch, keep-alive, one transaction re-checking the queue
    let mut cycle = vec!["grant", "txn", "watch"];
    for _ in 0..9 {
        cycle.extend(["keepalive", "txn", "watch"]);
    }
    assert_eq!(calls, cycle);
}

#[test]
fn a_waiter_whose_lease_expired_is_never_granted_and_requeues_at_the_back() {
    let mut t = Timeline::etcd(3);
    let mut o = opts(1_000);
    o.retry_max = ms(1_000);
    t.at(0);
    let a = t.acquire(0, "r", o.clone());
    t.serve_all();
    t.at(2);
    let c = t.acquire(2, "r", o.clone()); // C queues first: key at revision 3
    t.serve_all();
    let c_key = t.key_of(2, "r", c);
    // C's watch is lost (a partition): C stays parked until its wait gives up,
    // 2 + 333.333 (keep-alive due) + 1000 (retry_max) = 1335.333
    let _lost = t.take(2, Wait);
    t.at(3);
    let b = t.acquire(1, "r", o.clone()); // B queues behind C: revision 4
    t.serve_all();
    assert_eq!(
        t.pending_calls(1),
        vec![EtcdRequest::Watch(
            fencepost_core::backends::etcd::EtcdWatch {
                key: c_key.clone(),
                start_revision: 5,
                timeout_ms: 333
            }
        )]
    );
    // C's lease expires on the server at 2 + 1 s = 1002, and its key with it (revision
    // 5): B's watch fires and B now waits on A. At 1335.333 C's keep-alive finds the
    // lease gone (no TTL), and C starts again: a new grant and a new key, behind B.
    t.run_until(1_400);
    assert_eq!(t.events(2), vec![], "C is never granted on its expired key");
    let c_calls: Vec<_> = t.clients[2]
        .sent
        .iter()
        .map(|(at, r)| (*at, call(r).clone()))
        .collect();
    let ka = c_calls
        .iter()
        .position(|(at, r)| *at >= third(4) && matches!(r, EtcdRequest::LeaseKeepAlive { .. }))
        .expect("C keeps alive when its wait gives up");
    assert!(
        matches!(c_calls[ka + 1].1, EtcdRequest::LeaseGrant { ttl_s: 1, .. }),
        "then grants a new lease: {c_calls:?}"
    );
    let c_rev = t
        .server
        .get(t.now, &c_key)
        .map(|kv| kv.create_revision)
        .expect("C's new key");
    let b_rev = t
        .server
        .get(t.now, &t.key_of(1, "r", b))
        .map(|kv| kv.create_revision)
        .unwrap();
    assert!(
        c_rev > b_rev,
        "C's new key ({c_rev}) is behind B's ({b_rev})"
    );
    t.at(1_500).release(0, a);
    t.serve_all();
    assert_eq!(acquired(&t.events(1)).map(|a| a.0), Some(b_rev as u64));
    t.at(1_600).release(1, b);
    t.serve_all();
    assert_eq!(acquired(&t.events(2)).map(|a| a.0), Some(c_rev as u64));
}

#[test]
fn a_put_on_an_expired_lease_starts_again_with_a_fresh_lease() {
    // The grant's reply arrives, but the lease is gone before the transaction reaches
    // etcd (revoked by an operator, or expired behind a long delay): "requested lease
    // not found", so the machine grants again and retries.
    let mut t = Timeline::etcd(1);
    t.at(0);
    let lock = t.acquire(0, "r", opts(1_000));
    let grant = t.take_only(0);
    let reply = t.apply(&grant);
    t.at(1).reply(0, &grant, reply);
    let txn = t.take_only(0);
    assert!(t.server.revoke(t.lease_of(0, lock)));
    t.at(500);
    let reply = t.apply(&txn);
    assert_eq!(
        reply,
        fencepost_core::Reply::Etcd(etcd_error(5, "etcdserver: requested lease not found"))
    );
    t.reply(0, &txn, reply);
    assert_eq!(t.events(0), vec![]);
    let regrant = t.take_only(0);
    assert!(matches!(call(&regrant), EtcdRequest::LeaseGrant { .. }));
    let reply = t.apply(&regrant);
    t.reply(0, &regrant, reply);
    t.serve_all();
    // valid from the new grant's send at 500
    assert_eq!(acquired(&t.events(0)), Some((2, at(500 + 988))));
    assert!(t
        .holder("r")
        .is_some_and(|(k, _)| k == t.key_of(0, "r", lock)));
}

#[test]
fn a_keepalive_without_ttl_loses_the_held_lock_at_once() {
    let mut t = Timeline::etcd(1);
    t.at(0);
    let lock = t.acquire(0, "r", opts(1_000));
    t.serve_all();
    t.events(0);
    assert!(t.server.revoke(t.lease_of(0, lock))); // an operator revokes the lease
    t.at(334);
    let reply = text(t.serve(0, Renew));
    assert!(!reply.contains("TTL"), "{reply}");
    t.expect_event(
        0,
        Event::Lost {
            reason: LostReason::RenewRejected,
        },
    );
    assert_eq!(
        t.holder("r"),
        None,
        "the keep-alive did not re-create anything"
    );
    t.expect_no_request(0);
}

#[test]
fn keepalives_without_reply_lose_the_lock_exactly_at_the_deadline() {
    let mut t = Timeline::etcd(1);
    t.at(0);
    let lock = t.acquire(0, "r", opts(1_000));
    t.serve_all();
    t.events(0);
    t.at(334);
    let _ka = t.take(0, Renew); // black-holed
    assert_eq!(t.clients[0].next_timeout, Some(at(988)));
    t.at(987).expect_no_event(0);
    t.at(988); // 0 + 1000·0.99 − 2, from the grant's send
    t.expect_event(
        0,
        Event::Lost {
            reason: LostReason::Expired,
        },
    );
    // a revoke frees the key at once, in case a keep-alive landed
    let revoke = t.take_only(0);
    assert_eq!(
        call(&revoke),
        &EtcdRequest::LeaseRevoke {
            id: t.lease_of(0, lock)
        }
    );
}

#[test]
fn transient_keepalive_errors_are_retried_until_the_deadline() {
    let mut t = Timeline::etcd(1);
    t.at(0);
    t.acquire(0, "r", opts(1_000));
    t.serve_all();
    t.events(0);
    t.at(334);
    let ka = t.take(0, Renew);
    t.reply_text(0, &ka, &etcd_error(14, "etcdserver: leader changed"));
    t.expect_no_event(0);
    // retried after renew_interval / 4 = 83.333 ms: at 417.333
    t.at(417);
    assert!(!t.has_pending(0, Renew));
    t.at(418);
    t.serve(0, Renew);
    t.expect_event(
        0,
        Event::Renewed {
            valid_until: at(418 + 988),
        },
    );
}

#[test]
fn a_retried_release_after_a_lost_reply_does_not_delete_the_next_holders_key() {
    let mut t = Timeline::etcd(2);
    let o = opts(10_000);
    t.at(0);
    let a = t.acquire(0, "r", o.clone());
    t.serve_all();
    assert_eq!(acquired(&t.events(0)).map(|a| a.0), Some(2));
    t.at(1);
    let b = t.acquire(1, "r", o.clone());
    t.serve_all(); // B parked behind A, key at 3
    t.at(10).release(0, a);
    let rel = t.take(0, Release);
    let _applied = t.apply(&rel); // A's key deleted (revision 4), the reply lost
    t.fail(0, &rel);
    t.serve_all(); // B's watch fires; B holds with 3
    assert_eq!(acquired(&t.events(1)).map(|a| a.0), Some(3));
    // A retries after at most retry_base·2 = 20 ms: the same key, compared with its
    // create revision 2 — A's key is gone, so nothing is deleted
    t.at(40);
    let retry = t.take(0, Release);
    assert_eq!(txn(&retry).compare[0].create_revision, 2);
    let reply = t.apply(&retry);
    t.reply(0, &retry, reply);
    // then the revoke of A's lease, after which the verdict is told: the first
    // release was sent inside the validity and may have deleted the key (it did), so
    // the key found gone is that release, not a loss
    t.serve_all();
    t.expect_event(0, Event::Released);
    assert_eq!(
        t.holder("r"),
        Some((t.key_of(1, "r", b), 3)),
        "B's key untouched"
    );
    assert!(t.clients[1].machine.valid_until(b).is_some());
}

#[test]
fn a_retried_release_spares_a_key_recreated_under_the_same_name() {
    // A's release lands but its reply is lost; then a late duplicate of A's acquire
    // transaction re-creates A's key (revision 4). The retried release compares with 2
    // and leaves the new key alone; the revoke that follows removes it with the lease.
    let mut t = Timeline::etcd(1);
    t.at(0);
    let a = t.acquire(0, "r", opts(10_000));
    let grant = t.take_only(0);
    let reply = t.apply(&grant);
    t.reply(0, &grant, reply);
    let acquire_txn = t.take_only(0);
    let reply = t.apply(&acquire_txn);
    t.reply(0, &acquire_txn, reply);
    t.events(0);
    t.at(10).release(0, a);
    let rel = t.take(0, Release);
    t.apply(&rel); // deleted at 3
    t.fail(0, &rel);
    t.apply(&acquire_txn); // the late duplicate: put at 4
    let key = t.key_of(0, "r", a);
    assert_eq!(
        t.server.get(t.now, &key).map(|kv| kv.create_revision),
        Some(4)
    );
    t.at(40);
    let retry = t.take(0, Release);
    let reply = t.apply(&retry);
    assert_eq!(
        t.server.get(t.now, &key).map(|kv| kv.create_revision),
        Some(4),
        "not deleted by the retry"
    );
    t.reply(0, &retry, reply);
    t.serve_all(); // the revoke
    assert_eq!(t.holder("r"), None, "the revoke removed the orphan");
}

#[test]
fn a_retried_grant_after_a_lost_reply_keeps_the_lease_alive_first() {
    let mut t = Timeline::etcd(1);
    t.at(0);
    let lock = t.acquire(0, "r", opts(1_000));
    let grant = t.take_only(0);
    t.apply(&grant); // the lease exists on the server
    t.fail(0, &grant); // but the reply was lost
                       // retried after the first backoff step, at most retry_base = 10 ms
    t.at(10);
    let again = t.take_only(0);
    assert_eq!(call(&again), call(&grant), "the same lease id");
    let reply = t.apply(&again);
    assert_eq!(
        reply,
        fencepost_core::Reply::Etcd(etcd_error(9, "etcdserver: lease already exists"))
    );
    t.reply(0, &again, reply);
    // the lease exists, but since when is unknown: a keep-alive confirms it (and
    // restarts its TTL), and validity counts from that keep-alive's send
    let ka = t.take_only(0);
    assert_eq!(
        call(&ka),
        &EtcdRequest::LeaseKeepAlive {
            id: t.lease_of(0, lock)
        }
    );
    t.at(12);
    let reply = t.apply(&ka);
    t.reply(0, &ka, reply);
    t.at(14);
    t.serve_all();
    assert_eq!(acquired(&t.events(0)), Some((2, at(10 + 988))));
}

#[test]
fn transient_errors_on_acquire_steps_are_retried() {
    let mut t = Timeline::etcd(1);
    t.at(0);
    t.acquire(0, "r", opts(1_000));
    let grant = t.take_only(0);
    t.reply_text(0, &grant, &etcd_error(14, "etcdserver: no leader"));
    t.expect_no_event(0);
    t.at(10);
    let grant = t.take_only(0);
    assert!(matches!(call(&grant), EtcdRequest::LeaseGrant { .. }));
    let reply = t.apply(&grant);
    t.reply(0, &grant, reply);
    let txn = t.take_only(0);
    t.reply_text(0, &txn, &etcd_error(14, "etcdserver: leader changed"));
    // retried after at most retry_base·2 = 20 ms
    t.at(30);
    t.serve_all();
    assert_eq!(acquired(&t.events(0)), Some((2, at(10 + 988))));
}

#[test]
fn lease_ttl_is_rounded_up_to_whole_seconds_and_validity_uses_the_lock_ttl() {
    for (ttl_ms, ttl_s) in [(1_000, 1), (1_001, 2), (1_500, 2), (2_000, 2), (60_000, 60)] {
        let mut t = Timeline::etcd(1);
        t.at(0);
        t.acquire(0, "r", opts(ttl_ms));
        let grant = t.take_only(0);
        assert!(
            matches!(call(&grant), EtcdRequest::LeaseGrant { ttl_s: s, .. } if *s == ttl_s),
            "{ttl_ms} ms → {ttl_s} s: {grant:?}"
        );
        let reply = t.apply(&grant);
        t.reply(0, &grant, reply);
        t.serve_all();
        // ttl·0.99 − 2 from 0 (in ns: 1500 ms → 1483 ms)
        let validity = core::time::Duration::from_nanos(ttl_ms * 990_000) - ms(2);
        assert_eq!(
            acquired(&t.events(0)).map(|a| a.1),
            Some(at(0) + validity),
            "{ttl_ms} ms"
        );
    }
}

#[test]
fn garbage_replies_at_every_step_never_panic() {
    let garbage = [
        "",
        "nope",
        "{}",
        "[]",
        "null",
        "42",
        r#"{"header":{}}"#,
        r#"{"succeeded":true}"#,
        r#"{"succeeded":true,"responses":[]}"#,
        r#"{"succeeded":"yes","responses":[{"response_put":{}}]}"#,
        r#"{"responses":[{"response_range":{"kvs":[{"key":"!!","create_revision":"x"}]}}]}"#,
        r#"{"responses":[{"response_range":{"kvs":[{"key":"ZmVuY2Vwb3N0L3IvYQ==","lease":"1"}]}}]}"#,
        r#"{"header":{"revision":"99999999999999999999"},"ID":"1","TTL":"-3"}"#,
        r#"{"result":{"TTL":"9223372036854775807"}}"#,
        r#"{"result":{"events":[{"type":"DELETE"}]}}"#,
        r#"{"error":{"grpc_code":14,"http_code":503,"message":"x"}}"#,
        r#"{"error":"x","code":"5"}"#,
        r#"{"code":9}"#,
    ];
    for step in 0..10u64 {
        for g in garbage {
            let mut t = Timeline::etcd(2);
            let o = opts(1_000);
            t.at(0);
            let a = t.acquire(0, "r", o.clone());
            t.serve_all();
            t.at(1);
            t.acquire(1, "r", o.clone());
            // an honest server, but client 1's request number `step + 1` (ids count
            // from 1 per machine) is answered with garbage
            let mut garble = |c: usize, r: &fencepost_core::Request| {
                (c == 1 && r.id.0 == step + 1).then(|| fencepost_core::Reply::Etcd(g.to_owned()))
            };
            for now in (1..3_000).step_by(7) {
                t.at(now);
                if now == 1_500 {
                    t.release(0, a);
                }
                t.serve_all_with(&mut garble);
            }
            // whatever happened, tokens are create revisions the server handed out
            for c in 0..2 {
                for (_, e) in t.clients[c].events.clone() {
                    if let Event::Acquired { token, .. } = e {
                        let rev = t.server.revision() as u64;
                        assert!((2..=rev).contains(&token.get()), "{g:?} at step {step}");
                    }
                }
            }
        }
    }
}

#[test]
fn cancelling_a_parked_waiter_revokes_its_lease_and_wakes_the_one_behind() {
    let mut t = Timeline::etcd(3);
    let o = opts(1_000);
    t.at(0);
    let a = t.acquire(0, "r", o.clone());
    t.serve_all();
    t.at(1);
    let b = t.acquire(1, "r", o.clone()); // behind A: revision 3
    t.serve_all();
    t.at(2);
    t.acquire(2, "r", o.clone()); // behind B: revision 4, watching B's key
    t.serve_all();
    let lease_b = t.lease_of(1, b);
    // B gives up: its parked watch becomes moot, its lease (and key) are revoked
    t.at(50).release(1, b);
    let rel = t.take(1, Release);
    assert_eq!(call(&rel), &EtcdRequest::LeaseRevoke { id: lease_b });
    let reply = t.apply(&rel);
    t.reply(1, &rel, reply);
    t.expect_event(1, Event::Released);
    assert_eq!(t.server.lease_expires_at(lease_b), None);
    // C's watch on B's key fires (deleted at 5): C re-checks and now watches A
    t.serve_all();
    let EtcdRequest::Watch(w) = call(&t.clients[2].pending[0]).clone() else {
        panic!("C watches again: {:?}", t.clients[2].pending)
    };
    assert_eq!(
        (w.key, w.start_revision),
        (t.key_of(0, "r", a), 6),
        "C's predecessor is now A, watched from after revision 5"
    );
    t.at(100).release(0, a);
    t.serve_all();
    assert_eq!(acquired(&t.events(2)).map(|x| x.0), Some(4));
}

#[test]
fn a_leader_failover_is_ridden_out_by_retried_keepalives() {
    // t=200 the leader fails; a new one is elected 300 ms later, which gives every
    // lease its full TTL again from then. Keep-alives meanwhile fail with "leader
    // changed" (gRPC 14) and are retried every 83.333 ms; the first one after the
    // election succeeds, and the lock is never lost.
    let mut t = Timeline::etcd(1);
    t.at(0);
    let lock = t.acquire(0, "r", opts(1_000));
    t.serve_all();
    t.events(0);
    t.server
        .failover(at(200), core::time::Duration::from_millis(300));
    // 200 + 300 + 1 s
    assert_eq!(
        t.server.lease_expires_at(t.lease_of(0, lock)),
        Some(at(1_500))
    );
    let mut now = 334;
    while now < 500 {
        t.at(now);
        while t.has_pending(0, Renew) {
            let r = t.take(0, Renew);
            t.reply_text(0, &r, &etcd_error(14, "etcdserver: leader changed"));
        }
        now += 1;
    }
    assert_eq!(t.events(0), vec![], "nothing lost while the cluster elects");
    // keep-alives at 334 and 418 (417.333, seen at the next whole ms) failed; the
    // retry at 418 + 83.333 = 501.333 reaches the new leader: 501.333 + 988
    t.run_until(520);
    assert_eq!(
        t.events(0),
        vec![Event::Renewed {
            valid_until: fencepost_core::Instant::from_nanos(1_489_333_333)
        }]
    );
    assert!(t.server.lease_expires_at(t.lease_of(0, lock)) > Some(at(1_500)));
}

#[test]
fn timeout_zero_tries_once_and_leaves_the_queue() {
    let mut t = Timeline::etcd(2);
    t.at(0);
    t.acquire(0, "r", opts(1_000));
    t.serve_all();
    t.at(1);
    let mut o = opts(1_000);
    o.acquire_timeout = Some(ms(0));
    let b = t.acquire(1, "r", o);
    let b_key = t.key_of(1, "r", b);
    // grant, then one key transaction: contended, and the deadline (1) has passed
    t.serve_all();
    assert!(matches!(
        t.events(1).as_slice(),
        [Event::AcquireFailed { .. }]
    ));
    let calls: Vec<_> = t.clients[1]
        .sent
        .iter()
        .map(|(_, r)| call(r).clone())
        .collect();
    assert!(
        matches!(
            calls.as_slice(),
            [
                EtcdRequest::LeaseGrant { .. },
                EtcdRequest::Txn(_),
                EtcdRequest::LeaseRevoke { .. }
            ]
        ),
        "{calls:?}"
    );
    // the revoke took its queued key with it: only A's key is left
    assert_eq!(t.server.get(t.now, &b_key), None);
    assert_eq!(t.holder("r").map(|h| h.1), Some(2));
}

#[test]
fn an_acquire_timeout_while_parked_revokes_the_waiters_lease() {
    let mut t = Timeline::etcd(2);
    t.at(0);
    t.acquire(0, "r", opts(10_000));
    t.serve_all();
    t.at(1);
    let mut o = opts(10_000);
    o.acquire_timeout = Some(ms(500));
    let b = t.acquire(1, "r", o);
    let b_lease = t.lease_of(1, b);
    t.serve_all();
    // parked until the acquire deadline 1 + 500 (before its keep-alive, due at
    // 1 + 3333.333): the watch's timeout is 500 ms
    let EtcdRequest::Watch(w) = call(&t.clients[1].pending[0]).clone() else {
        panic!("B parks: {:?}", t.clients[1].pending)
    };
    assert_eq!(w.timeout_ms, 500);
    t.run_until(600);
    assert!(matches!(
        t.events(1).as_slice(),
        [Event::AcquireFailed { .. }]
    ));
    assert_eq!(t.server.lease_expires_at(b_lease), None, "revoked");
    assert_eq!(t.holder("r").map(|h| h.1), Some(2));
}

#[test]
fn each_grant_says_how_the_previous_holder_ended() {
    use fencepost_core::Previous;
    let mut t = Timeline::etcd(3);
    let o = opts(1_000);
    t.at(0);
    let a = t.acquire(0, "r", o.clone());
    t.serve_all();
    assert_eq!(previous(&t.events(0)), Some(Previous::None), "a fresh etcd");
    t.at(10).release(0, a);
    t.serve_all();
    // taken after a clean release, nobody in between
    t.at(20);
    let b = t.acquire(1, "r", o.clone());
    t.serve_all();
    assert_eq!(previous(&t.events(1)), Some(Previous::Released));
    // C waits behind B and is granted by B's release
    t.at(30);
    let c = t.acquire(2, "r", o.clone());
    t.serve_all();
    assert_eq!(t.events(2), vec![]);
    t.at(40).release(1, b);
    t.serve_all();
    assert_eq!(t.events(1), vec![Event::Released]);
    assert_eq!(previous(&t.events(2)), Some(Previous::Released));
    // A waits behind C, whose lease ends behind its back (as on expiry)
    t.at(50);
    let a2 = t.acquire(0, "r", o.clone());
    t.serve_all();
    assert!(t.events(0).iter().all(|e| matches!(e, Event::Released)));
    assert!(t.server.revoke(t.lease_of(2, c)));
    t.at(60);
    t.serve_all();
    assert_eq!(previous(&t.events(0)), Some(Previous::Expired));
    // A's lease ends too, with nobody waiting: the next taker finds the lock free, but
    // a contender joined after the last clean release and is gone
    assert!(t.server.revoke(t.lease_of(0, a2)));
    t.at(70);
    t.acquire(1, "r", o.clone());
    t.serve_all();
    assert_eq!(previous(&t.events(1)), Some(Previous::Expired));
}

#[test]
fn a_grant_whose_put_reply_was_lost_cannot_tell_the_previous_holders_fate() {
    let mut t = Timeline::etcd(1);
    t.at(0);
    t.acquire(0, "r", opts(1_000));
    let grant = t.take_only(0);
    let reply = t.apply(&grant);
    t.reply(0, &grant, reply);
    let put = t.take_only(0);
    t.apply(&put); // lands, but its reply is lost
    t.fail(0, &put);
    t.run_until(200); // the retry finds its key (the failure branch): granted
    assert_eq!(
        previous(&t.events(0)),
        Some(fencepost_core::Previous::Unknown),
        "what the put read before writing is gone with its reply"
    );
}

#[test]
fn a_waiter_behind_one_long_hold_counts_one_holder_however_often_it_looks() {
    Timeline::etcd(2).assert_one_long_hold_is_never_hot();
}

#[test]
fn a_lock_whose_name_nests_under_another_s_is_an_error_not_a_silent_wait() {
    // "a"'s contender range is every key under "fencepost/a/": the key of a holder of
    // "a/b" sits in it, and would hold "a" up although "a" is free
    let mut t = Timeline::etcd(2);
    t.at(0);
    t.acquire(1, "a/b", opts(10_000));
    t.run_until(50);
    assert!(acquired_token(&t.events(1)).is_some());
    let mut o = opts(10_000);
    o.acquire_timeout = Some(ms(2_000));
    let lock = t.acquire(0, "a", o);
    let own = t.key_of(0, "a", lock);
    t.run_until(100);
    let events = t.events(0);
    let [Event::AcquireFailed {
        reason: AcquireFailedReason::Protocol { error },
    }] = events.as_slice()
    else {
        panic!("expected a protocol error at once, got {events:?}");
    };
    let message = error.to_string();
    assert!(
        message.contains(r#"lock names "a" and "a/b" overlap"#),
        "{message}"
    );
    // nothing of "a" left behind, and "a/b" still held by its holder
    t.run_until(200);
    assert!(t.holder("a/b").is_some());
    assert!(t.server.get(t.now, &own).is_none(), "{own} left behind");
}

#[test]
fn a_lock_named_under_a_held_one_is_its_own_lock() {
    let mut t = Timeline::etcd(2);
    t.at(0);
    t.acquire(1, "a", opts(10_000));
    t.run_until(50);
    assert!(acquired_token(&t.events(1)).is_some());
    t.acquire(0, "a/b", opts(10_000));
    t.run_until(100);
    assert!(acquired_token(&t.events(0)).is_some());
}
