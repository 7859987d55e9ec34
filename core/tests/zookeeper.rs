#![cfg(feature = "zookeeper")]
//! Timeline tests of the machine on the ZooKeeper recipe, with the adapter's JSON
//! replies written out. TTL 1000 ms (the negotiated session timeout) → validity
//! `sent + 988`, renew (an `exists` of the own node) every 333.333 ms. Session 7 is
//! this client's; czxids are the tokens.

mod support;

use core::time::Duration;

use fencepost_core::backends::zookeeper::{ZkRequest, ZooKeeperBackend};
use fencepost_core::text::Host;
use fencepost_core::{
    Backend, Event, FencingToken, Input, Instant, LockId, LockOptions, LostReason, Machine,
    Operation, Output, Reply, Request, RequestBody, UsageError,
};

use support::hot_lock_found;
use Operation::{Acquire, Release, Renew, Wait};

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

struct T {
    m: Machine,
    now: Instant,
    requests: Vec<Request>,
    events: Vec<Event>,
}

impl T {
    fn new() -> Self {
        T {
            m: Machine::with_seed(Backend::ZooKeeper(ZooKeeperBackend::default()), 1),
            now: Instant::ZERO,
            requests: Vec::new(),
            events: Vec::new(),
        }
    }
    fn drain(&mut self) {
        loop {
            match self.m.poll_output() {
                Output::Request(r) => self.requests.push(r),
                Output::Event { event, .. } => self.events.push(event),
                _ => break,
            }
        }
    }
    fn at(&mut self, ms: u64) -> &mut Self {
        self.now = at(ms);
        self.m
            .handle_input(Input::Timeout { now: self.now })
            .unwrap();
        self.drain();
        self
    }
    fn acquire(&mut self) -> LockId {
        let lock = self
            .m
            .acquire(
                self.now,
                "report",
                LockOptions::ttl(Duration::from_millis(1_000)),
            )
            .unwrap();
        self.drain();
        lock
    }
    /// The only request out, with its call.
    fn take(&mut self, op: Operation) -> (Request, ZkRequest) {
        assert_eq!(self.requests.len(), 1, "{:?}", self.requests);
        let r = self.requests.remove(0);
        assert_eq!(r.operation, op, "{r:?}");
        let RequestBody::ZooKeeper(call) = r.body.clone() else {
            panic!("{r:?}")
        };
        (r, call)
    }
    fn reply(&mut self, r: &Request, json: &str) {
        self.m
            .handle_input(Input::Reply {
                now: self.now,
                request: r.id,
                reply: Reply::ZooKeeper(json.to_owned()),
            })
            .unwrap();
        self.drain();
    }
    fn fail(&mut self, r: &Request) {
        self.m
            .handle_input(Input::TransportError {
                now: self.now,
                request: r.id,
                message: "connection reset".to_owned(),
            })
            .unwrap();
        self.drain();
    }
    fn events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }
    /// Create (czxid 0x10, sequence `seq`) and the children read that follows.
    fn created(&mut self, seq: u32) -> String {
        let (r, call) = self.take(Acquire);
        let ZkRequest::Create { path, data } = call else {
            panic!("{call:?}")
        };
        assert!(path.starts_with("/fencepost/report/") && path.ends_with("__lock__"));
        assert_eq!(path.len(), "/fencepost/report/".len() + 32 + 8, "{path}");
        assert!(path.contains(&data), "the node name carries the owner id");
        let node = format!("{path}{seq:010}");
        self.reply(
            &r,
            &format!(r#"{{"path":"{node}","stat":{{"czxid":16,"version":0,"ephemeral_owner":7}},"session":7}}"#),
        );
        node.rsplit('/').next().unwrap().to_owned()
    }
    fn children(&mut self, names: &[&str]) {
        let (r, call) = self.take(Acquire);
        assert_eq!(
            call,
            ZkRequest::Children {
                path: "/fencepost/report".into()
            }
        );
        let list = serde_json::to_string(names).unwrap();
        self.reply(&r, &format!(r#"{{"children":{list},"session":7}}"#));
    }
}

#[test]
fn lowest_node_holds_with_its_czxid_valid_from_the_children_reads_send() {
    let mut t = T::new();
    t.acquire();
    let node = t.created(3);
    t.at(4);
    t.children(&[&node, "ffffffffffffffffffffffffffffffff__lock__0000000004"]);
    // token: the czxid (16), never the sequence (3); validity from the send of the
    // children read that found the node lowest (sent at 0, when the create's reply
    // came; answered at 4): 0 + 1000·0.99 − 2 = 988
    assert_eq!(
        t.events(),
        [Event::Acquired {
            token: FencingToken(16),
            valid_until: at(988),
            previous: fencepost_core::Previous::Unknown,
        }]
    );
    // renew at 0 + 333.333: does the node still exist for this session?
    t.at(333);
    assert!(t.requests.is_empty());
    t.at(338);
    let (r, call) = t.take(Renew);
    assert_eq!(
        call,
        ZkRequest::Exists {
            path: format!("/fencepost/report/{node}")
        }
    );
    t.at(340);
    t.reply(
        &r,
        r#"{"stat":{"czxid":16,"version":0,"ephemeral_owner":7},"session":7}"#,
    );
    assert_eq!(
        t.events(),
        [Event::Renewed {
            valid_until: at(1_326)
        }]
    ); // 338 + 988
}

/// The create's reply with the listing an adapter sends right behind it.
fn created_with_listing(t: &mut T, seq: u32, others: &[&str]) -> String {
    let (r, ZkRequest::Create { path, .. }) = t.take(Acquire) else {
        panic!()
    };
    let node = format!("{path}{seq:010}");
    let own = node.rsplit('/').next().unwrap().to_owned();
    let mut list = vec![own.as_str()];
    list.extend_from_slice(others);
    let list = serde_json::to_string(&list).unwrap();
    t.reply(
        &r,
        &format!(r#"{{"path":"{node}","stat":{{"czxid":16,"version":0,"ephemeral_owner":7}},"children":{list},"session":7}}"#),
    );
    own
}

#[test]
fn a_create_whose_listing_shows_it_lowest_holds_without_another_read() {
    let mut t = T::new();
    t.acquire();
    t.at(3);
    created_with_listing(
        &mut t,
        3,
        &["ffffffffffffffffffffffffffffffff__lock__0000000004"],
    );
    // one round trip: validity from the create's send, 0 + 1000·0.99 − 2 = 988
    assert_eq!(
        t.events(),
        [Event::Acquired {
            token: FencingToken(16),
            valid_until: at(988),
            previous: fencepost_core::Previous::Unknown,
        }]
    );
    assert!(t.requests.is_empty(), "{:?}", t.requests);
}

#[test]
fn a_create_whose_listing_shows_a_predecessor_watches_it_at_once() {
    let mut t = T::new();
    t.acquire();
    let a = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa__lock__0000000002";
    created_with_listing(&mut t, 5, &[a]);
    let (_, call) = t.take(Wait);
    assert!(matches!(call, ZkRequest::Watch { ref path, .. } if path.ends_with(a)));
    assert!(t.events().is_empty());
}

#[test]
fn a_create_whose_listing_lacks_the_node_lists_again() {
    // a listing that ran before the create landed (the adapter retried the create
    // after making the parents) says nothing about the node's place
    let mut t = T::new();
    t.acquire();
    let (r, ZkRequest::Create { path, .. }) = t.take(Acquire) else {
        panic!()
    };
    t.reply(
        &r,
        &format!(r#"{{"path":"{path}0000000000","stat":{{"czxid":16,"version":0,"ephemeral_owner":7}},"children":[],"session":7}}"#),
    );
    let node = format!("{}0000000000", path.rsplit('/').next().unwrap());
    t.children(&[&node]);
    assert!(matches!(
        t.events()[..],
        [Event::Acquired {
            token: FencingToken(16),
            ..
        }]
    ));
}

#[test]
fn a_waiter_watches_only_its_predecessor_and_lists_again_when_it_fires() {
    let mut t = T::new();
    t.acquire();
    let node = t.created(5);
    let a = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa__lock__0000000002";
    let b = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb__lock__0000000004";
    // the names sort by prefix the other way round: the sequence decides
    t.children(&[&node, b, a]);
    let (w, call) = t.take(Wait);
    let ZkRequest::Watch { path, .. } = call else {
        panic!("{call:?}")
    };
    assert_eq!(
        path,
        format!("/fencepost/report/{b}"),
        "the immediate predecessor"
    );
    t.at(50);
    t.reply(&w, r#"{"event":"deleted","session":7}"#);
    t.children(&[&node, a]);
    let (_, call) = t.take(Wait);
    assert!(matches!(call, ZkRequest::Watch { ref path, .. } if path.ends_with(a)));
    assert!(t.events().is_empty());
}

#[test]
fn an_ambiguous_create_adopts_the_own_node_instead_of_queueing_behind_it() {
    let mut t = T::new();
    t.acquire();
    let (r, ZkRequest::Create { path, .. }) = t.take(Acquire) else {
        panic!()
    };
    t.fail(&r); // the create may have landed
    t.at(200); // past the backoff
    let (r, call) = t.take(Acquire);
    assert_eq!(
        call,
        ZkRequest::Children {
            path: "/fencepost/report".into()
        }
    );
    let mine = format!("{}0000000001", path.rsplit('/').next().unwrap());
    t.reply(&r, &format!(r#"{{"children":["{mine}"],"session":7}}"#));
    // adopted: its stat says this session made it, and gives the czxid
    let (r, call) = t.take(Acquire);
    assert_eq!(
        call,
        ZkRequest::Exists {
            path: format!("/fencepost/report/{mine}")
        }
    );
    t.reply(
        &r,
        r#"{"stat":{"czxid":33,"version":0,"ephemeral_owner":7},"session":7}"#,
    );
    t.children(&[&mine]);
    assert!(matches!(
        t.events()[..],
        [Event::Acquired {
            token: FencingToken(33),
            ..
        }]
    ));
}

#[test]
fn a_node_of_another_session_is_never_ours() {
    let mut t = T::new();
    t.acquire();
    let (r, ZkRequest::Create { path, .. }) = t.take(Acquire) else {
        panic!()
    };
    t.fail(&r);
    t.at(200);
    let (r, _) = t.take(Acquire);
    let stale = format!("{}0000000001", path.rsplit('/').next().unwrap());
    t.reply(&r, &format!(r#"{{"children":["{stale}"],"session":8}}"#));
    let (r, _) = t.take(Acquire);
    // made by session 7, which expired; this client is on session 8 now
    t.reply(
        &r,
        r#"{"stat":{"czxid":33,"version":0,"ephemeral_owner":7},"session":8}"#,
    );
    let (_, call) = t.take(Acquire);
    assert!(
        matches!(call, ZkRequest::Create { .. }),
        "a new node: {call:?}"
    );
    assert!(t.events().is_empty());
}

#[test]
fn an_expired_session_is_lost_at_the_next_renewal_and_never_renewed() {
    let mut t = T::new();
    t.acquire();
    let node = t.created(1);
    t.children(&[&node]);
    assert_eq!(t.events().len(), 1);
    t.at(334);
    let (r, _) = t.take(Renew);
    t.reply(
        &r,
        r#"{"error":"session_expired","message":"","session":7}"#,
    );
    assert_eq!(
        t.events(),
        [Event::Lost {
            reason: LostReason::RenewRejected
        }]
    );
}

#[test]
fn a_disconnection_keeps_the_lock_until_the_deadline_and_a_reconnect_before_keeps_it() {
    let mut t = T::new();
    t.acquire();
    let node = t.created(1);
    t.children(&[&node]); // sent at 0: valid until 988
    t.events();
    t.at(334);
    let (r, _) = t.take(Renew);
    t.fail(&r); // connection loss: retried, still held
    assert!(t.events().is_empty());
    t.at(600);
    let (r, _) = t.take(Renew);
    t.reply(
        &r,
        r#"{"stat":{"czxid":16,"version":0,"ephemeral_owner":7},"session":7}"#,
    );
    // reconnected with the same session: valid from the retry's send
    assert!(matches!(t.events()[..], [Event::Renewed { .. }]));
    // then a disconnection longer than the session: renewals unanswered, lost from
    // the timer at 600 + 988 = 1588, without any reply
    for ms in (650..1_588).step_by(50) {
        t.at(ms);
        t.requests.clear();
    }
    t.at(1_587);
    assert!(t.events().is_empty());
    t.at(1_588);
    assert_eq!(
        t.events(),
        [Event::Lost {
            reason: LostReason::Expired
        }]
    );
}

#[test]
fn release_deletes_the_node_and_a_node_found_gone_is_a_loss() {
    let mut t = T::new();
    let lock = t.acquire();
    let node = t.created(1);
    t.children(&[&node]);
    t.events();
    t.at(100);
    t.m.release(t.now, lock).unwrap();
    t.drain();
    let (r, call) = t.take(Release);
    assert_eq!(
        call,
        ZkRequest::Delete {
            path: format!("/fencepost/report/{node}")
        }
    );
    t.reply(&r, r#"{"error":"no_node","message":"","session":7}"#);
    assert_eq!(
        t.events(),
        [Event::Lost {
            reason: LostReason::NotHeldAtRelease
        }]
    );
}

#[test]
fn a_cancelled_waiter_deletes_every_node_with_its_prefix() {
    let mut t = T::new();
    let lock = t.acquire();
    let node = t.created(5);
    t.children(&[&node, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa__lock__0000000002"]);
    let _wait = t.take(Wait);
    t.m.release(t.now, lock).unwrap();
    t.drain();
    let (r, call) = t.take(Release);
    let ZkRequest::DeleteOwned { path, prefix } = call else {
        panic!("{call:?}")
    };
    assert_eq!(path, "/fencepost/report");
    assert!(node.starts_with(&prefix));
    t.reply(&r, r#"{"deleted":1,"session":7}"#);
    assert_eq!(t.events(), [Event::Released]);
}

#[test]
fn a_ttl_over_the_negotiated_session_timeout_is_refused() {
    let backend = Backend::ZooKeeper(ZooKeeperBackend {
        session_timeout_ms: Some(4_000),
        ..ZooKeeperBackend::default()
    });
    let ok = LockOptions::ttl(Duration::from_millis(4_000));
    assert_eq!(backend.check_acquire("r", &ok), Ok(()));
    let err = backend
        .check_acquire("r", &LockOptions::ttl(Duration::from_millis(4_001)))
        .unwrap_err();
    assert!(
        matches!(&err, UsageError::InvalidOption { option, message } if option == "ttl" && message.to_string().contains("negotiated (4s), got 4.001s")),
        "{err:?}"
    );
    assert!(
        err.render(Host::Python)
            .contains("negotiated (4 s), got 4.001 s"),
        "{err:?}"
    );
    assert!(!backend.tokens_may_regress());
}

/// A waiter whose watch keeps timing out behind one long holder lists the same lowest
/// node again and again: one holder (its node's sequence marks it), never a hot lock.
/// A new lowest node at every listing is a new holder each time: hot.
#[test]
fn one_long_holder_is_found_once_however_often_the_waiter_lists() {
    use fencepost_core::ObserveOptions;
    for changing in [false, true] {
        let mut t = T::new();
        t.m.observe(Some(ObserveOptions::default())).unwrap();
        t.acquire();
        let node = t.created(99);
        let holder = |seq: u32| format!("{:032x}__lock__{seq:010}", seq);
        t.children(&[&node, &holder(2)]);
        let mut now = 0;
        for i in 0..12u32 {
            let (w, _) = t.take(Wait);
            now += 300;
            t.at(now);
            t.reply(&w, r#"{"event":"timeout","session":7}"#);
            // the session's renewal may go out first
            if let Some(i) = t.requests.iter().position(|r| r.operation == Renew) {
                let r = t.requests.remove(i);
                t.reply(
                    &r,
                    r#"{"stat":{"czxid":16,"version":0,"ephemeral_owner":7},"session":7}"#,
                );
            }
            let lowest = if changing { holder(3 + i) } else { holder(2) };
            t.children(&[&node, &lowest]);
        }
        // the holder leaves: granted, where hot_lock is judged
        let (w, _) = t.take(Wait);
        t.reply(&w, r#"{"event":"deleted","session":7}"#);
        t.children(&[&node]);
        assert!(
            matches!(t.events().as_slice(), [Event::Acquired { .. }]),
            "granted"
        );
        let seen: Vec<_> = std::iter::from_fn(|| t.m.poll_observation())
            .map(|o| o.observation)
            .collect();
        let hot = hot_lock_found(&seen);
        if changing {
            assert_eq!(hot, [Some(13)], "a new holder at each of 13 listings");
        } else {
            assert_eq!(hot, [], "one holder found at 13 listings");
        }
    }
}
