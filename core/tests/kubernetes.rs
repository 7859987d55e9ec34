#![cfg(feature = "kubernetes")]
//! Timeline tests of the machine on the Kubernetes Lease recipe. A small Lease store
//! in the test answers as the API server does (resourceVersion compare-and-set, 404,
//! 409, JSON Patch `test`). TTL 3 s → validity `sent + 2968` (3000 × 0.99 − 2), renew
//! every 1000 ms; `leaseDurationSeconds` 3.

mod support;

use core::time::Duration;

use fencepost_core::backends::kubernetes::{KubeRequest, KubernetesBackend};
use fencepost_core::{
    Backend, Event, FencingToken, Input, Instant, LockId, LockOptions, LostReason, Machine,
    Operation, Output, Reply, Request, RequestBody, UsageError,
};
use serde_json::{json, Value};

use support::{hot_lock_found, timed_out_attempts};
use Operation::{Acquire, Release, Renew};

const PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases/report";

fn status(code: u16, reason: &str) -> String {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "reason": reason, "code": code})
    .to_string()
}

/// The Lease `report` as the API server keeps it.
#[derive(Default)]
struct Api {
    lease: Option<Value>,
    rv: u64,
}

impl Api {
    fn store(&mut self, mut lease: Value) -> String {
        self.rv += 1;
        lease["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        self.lease = Some(lease.clone());
        lease.to_string()
    }

    /// Someone else's write: holder `who`, `transitions`, `duration` seconds.
    fn write_other(&mut self, who: &str, transitions: i64, duration: i64) {
        let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "report", "namespace": "default"},
            "spec": {"holderIdentity": who, "leaseDurationSeconds": duration,
                     "leaseTransitions": transitions,
                     "acquireTime": "2026-12-01T10:00:00.000000Z",
                     "renewTime": "2026-12-01T10:00:00.000000Z"}});
        self.store(lease);
    }

    fn spec(&self) -> Value {
        self.lease.as_ref().unwrap()["spec"].clone()
    }

    fn handle(&mut self, req: &KubeRequest, wall: &str) -> String {
        let mut body: Value = req
            .body
            .as_deref()
            .map(|b| serde_json::from_str(b).unwrap())
            .unwrap_or(Value::Null);
        for field in &req.stamp {
            body["spec"][field.as_str()] = json!(wall);
        }
        match (req.method.as_str(), &self.lease) {
            ("GET", None) | ("PUT" | "PATCH", None) => status(404, "NotFound"),
            ("GET", Some(l)) => l.to_string(),
            ("POST", Some(_)) => status(409, "AlreadyExists"),
            ("POST", None) => self.store(body),
            ("PUT", Some(l)) => {
                if body["metadata"]["resourceVersion"] != l["metadata"]["resourceVersion"] {
                    return status(409, "Conflict");
                }
                self.store(body)
            }
            ("PATCH", Some(l)) => {
                let mut l = l.clone();
                for op in body.as_array().unwrap() {
                    let ptr = op["path"].as_str().unwrap();
                    match op["op"].as_str().unwrap() {
                        "test" if l.pointer(ptr) != Some(&op["value"]) => {
                            return status(422, "Invalid")
                        }
                        "test" => {}
                        _ => *l.pointer_mut(ptr).unwrap() = op["value"].clone(),
                    }
                }
                self.store(l)
            }
            other => panic!("{other:?}"),
        }
    }
}

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

struct T {
    m: Machine,
    now: Instant,
    api: Api,
    requests: Vec<Request>,
    events: Vec<Event>,
}

impl T {
    fn new() -> Self {
        T {
            m: Machine::with_seed(Backend::Kubernetes(KubernetesBackend::default()), 1),
            now: Instant::ZERO,
            api: Api::default(),
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
    fn acquire_with(&mut self, options: LockOptions) -> LockId {
        let lock = self.m.acquire(self.now, "report", options).unwrap();
        self.drain();
        lock
    }
    fn acquire(&mut self) -> LockId {
        self.acquire_with(LockOptions::ttl(Duration::from_secs(3)))
    }
    /// The only request out: its operation and method are the expected ones.
    fn take(&mut self, op: Operation, method: &str) -> (Request, KubeRequest) {
        assert_eq!(self.requests.len(), 1, "{:?}", self.requests);
        let r = self.requests.remove(0);
        assert_eq!(r.operation, op, "{r:?}");
        let RequestBody::Kubernetes(call) = r.body.clone() else {
            panic!("{r:?}")
        };
        assert_eq!(call.method, method, "{call:?}");
        (r, call)
    }
    fn reply(&mut self, r: &Request, text: &str) {
        self.m
            .handle_input(Input::Reply {
                now: self.now,
                request: r.id,
                reply: Reply::Kubernetes(text.to_owned()),
            })
            .unwrap();
        self.drain();
    }
    /// The store answers the only request out, at the current time.
    fn serve(&mut self, op: Operation, method: &str) -> KubeRequest {
        let (r, call) = self.take(op, method);
        let wall = format!(
            "2026-12-01T12:00:{:02}.000000Z",
            self.now.as_nanos() / 1_000_000_000
        );
        let text = self.api.handle(&call, &wall);
        self.reply(&r, &text);
        call
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
    fn owner(&self) -> String {
        self.api.spec()["holderIdentity"]
            .as_str()
            .unwrap()
            .to_owned()
    }
    /// Acquired at 0 on an empty server: GET 404, POST at 0 (token 1).
    fn held(&mut self) -> LockId {
        let lock = self.acquire();
        self.serve(Acquire, "GET");
        self.serve(Acquire, "POST");
        assert_eq!(
            self.events(),
            [Event::Acquired {
                token: FencingToken(1),
                valid_until: at(2_968),
                previous: fencepost_core::Previous::None,
            }]
        );
        lock
    }
}

#[test]
fn a_missing_lease_is_created_with_client_go_fields_and_token_1() {
    let mut t = T::new();
    t.acquire();
    let get = t.serve(Acquire, "GET");
    assert_eq!((get.path.as_str(), get.body), (PATH, None));
    let post = t.serve(Acquire, "POST");
    assert_eq!(
        post.path,
        "/apis/coordination.k8s.io/v1/namespaces/default/leases"
    );
    assert_eq!(post.stamp, ["acquireTime", "renewTime"]);
    let spec = t.api.spec();
    assert_eq!(spec["holderIdentity"].as_str().unwrap().len(), 32);
    assert_eq!(spec["leaseDurationSeconds"], 3);
    assert_eq!(spec["leaseTransitions"], 1);
    assert_eq!(spec["acquireTime"], "2026-12-01T12:00:00.000000Z");
    // validity from the POST's send at 0: 0 + 2968
    assert_eq!(
        t.events(),
        [Event::Acquired {
            token: FencingToken(1),
            valid_until: at(2_968),
            previous: fencepost_core::Previous::None,
        }]
    );
}

#[test]
fn rule1_renewals_put_renew_time_with_the_version_and_validity_runs_from_their_send() {
    let mut t = T::new();
    t.held();
    t.at(1_000);
    let (r, put) = t.take(Renew, "PUT");
    assert_eq!(put.stamp, ["renewTime"], "acquireTime is kept");
    let body: Value = serde_json::from_str(put.body.as_deref().unwrap()).unwrap();
    assert_eq!(body["metadata"]["resourceVersion"], "1");
    t.at(1_400);
    let text = t.api.handle(&put, "2026-12-01T12:00:01.000000Z");
    t.reply(&r, &text);
    // sent at 1000, answered at 1400: 1000 + 2968
    assert_eq!(
        t.events(),
        [Event::Renewed {
            valid_until: at(3_968)
        }]
    );
    let spec = t.api.spec();
    assert_eq!(spec["acquireTime"], "2026-12-01T12:00:00.000000Z");
    assert_eq!(spec["renewTime"], "2026-12-01T12:00:01.000000Z");
    assert_eq!(spec["leaseTransitions"], 1);
}

#[test]
fn rule2_rule10_a_hung_renewal_is_lost_at_the_deadline_and_its_late_success_released() {
    let mut t = T::new();
    t.held();
    t.at(1_000);
    let (r, put) = t.take(Renew, "PUT");
    assert_eq!(
        r.deadline,
        at(2_968),
        "a renewal's deadline is the validity's"
    );
    t.at(2_967);
    assert!(t.events().is_empty());
    t.at(2_968);
    assert_eq!(
        t.events(),
        [Event::Lost {
            reason: LostReason::Expired
        }]
    );
    // the cleanup sent at the loss shortens the lease only if it is still ours, and
    // keeps the holder: the next taker hears that its predecessor's lease ran out
    let patch = t.serve(Release, "PATCH");
    assert!(patch.body.unwrap().contains(r#""op":"test""#));
    let owner = t.owner();
    assert_eq!(owner.len(), 32);
    assert_eq!(t.api.spec()["leaseDurationSeconds"], 1);
    // the renewal that hung lands at last: its 409 changes nothing
    t.at(3_500);
    let text = t.api.handle(&put, "2026-12-01T12:00:03.000000Z");
    t.reply(&r, &text);
    assert!(t.events().is_empty());
    assert!(t.requests.is_empty());
}

#[test]
fn rule3_a_renewal_finding_another_holder_is_lost_at_once() {
    let mut t = T::new();
    t.held();
    t.api.write_other("client-go-b", 2, 15);
    t.at(1_000);
    t.serve(Renew, "PUT"); // 409: the version moved
    t.serve(Renew, "GET"); // another holder
    assert_eq!(
        t.events(),
        [Event::Lost {
            reason: LostReason::RenewRejected
        }]
    );
}

#[test]
fn a_renewal_whose_reply_was_lost_is_resolved_by_re_reading_the_lease() {
    let mut t = T::new();
    t.held();
    t.at(1_000);
    let (r, put) = t.take(Renew, "PUT");
    t.api.handle(&put, "2026-12-01T12:00:01.000000Z"); // it landed…
    t.fail(&r); // …but its reply was lost
    t.at(1_250); // renew retry: ttl / 12
    t.serve(Renew, "PUT"); // the old version: 409
    t.serve(Renew, "GET"); // still ours, same token
    t.serve(Renew, "PUT");
    // validity from the last PUT's send, at 1250
    assert_eq!(
        t.events(),
        [Event::Renewed {
            valid_until: at(4_218)
        }]
    );
    assert_eq!(t.api.spec()["leaseTransitions"], 1);
}

#[test]
fn release_clears_the_holder_as_client_go_does_and_keeps_the_count() {
    let mut t = T::new();
    let lock = t.held();
    t.at(500);
    t.m.release(t.now, lock).unwrap();
    t.drain();
    let put = t.serve(Release, "PUT");
    assert_eq!(put.stamp, ["acquireTime", "renewTime"]);
    let spec = t.api.spec();
    assert_eq!(spec["holderIdentity"], "");
    assert_eq!(spec["leaseDurationSeconds"], 1);
    assert_eq!(spec["leaseTransitions"], 1);
    assert_eq!(t.events(), [Event::Released]);
}

#[test]
fn a_release_finding_another_holder_reports_the_loss() {
    let mut t = T::new();
    let lock = t.held();
    t.api.write_other("someone", 5, 10);
    t.at(500);
    t.m.release(t.now, lock).unwrap();
    t.drain();
    t.serve(Release, "PUT"); // 409
    t.serve(Release, "GET");
    assert_eq!(
        t.events(),
        [Event::Lost {
            reason: LostReason::NotHeldAtRelease
        }]
    );
    assert_eq!(t.api.spec()["holderIdentity"], "someone");
}

#[test]
fn a_held_lease_is_taken_only_after_it_stayed_unchanged_for_its_own_duration() {
    let mut t = T::new();
    // a client-go elector holds with a 10 s lease, longer than our 3 s TTL
    t.api.write_other("client-go-a", 4, 10);
    t.acquire();
    t.serve(Acquire, "GET");
    assert!(t.events().is_empty());
    // first seen at 0: another 10 s, stretched by the drift bound (1 %): 10.1 s
    t.at(10_099);
    while !t.requests.is_empty() {
        t.serve(Acquire, "GET");
    }
    let mut now = 10_099;
    while t.requests.is_empty() {
        now += 50;
        t.at(now);
    }
    assert!(now >= 10_100, "backoff never passes the record's time left");
    t.serve(Acquire, "GET");
    let take = t.serve(Acquire, "PUT");
    assert_eq!(take.stamp, ["acquireTime", "renewTime"]);
    // client-go's count + 1
    assert!(matches!(
        t.events()[..],
        [Event::Acquired {
            token: FencingToken(5),
            ..
        }]
    ));
    assert_eq!(t.api.spec()["leaseDurationSeconds"], 3);
}

#[test]
fn a_renewed_record_restarts_the_observation() {
    let mut t = T::new();
    t.api.write_other("b", 1, 3);
    t.acquire();
    t.serve(Acquire, "GET"); // first seen at 0
    t.api.write_other("b", 1, 3); // renewed: a new version
    let (mut now, mut renewed) = (0, false);
    loop {
        now += 100;
        t.at(now);
        if !t.requests.is_empty() {
            let (r, call) = t.take(Acquire, "GET");
            if now >= 2_500 && !renewed {
                renewed = true;
                t.api.write_other("b", 1, 3); // renewed again at 2.5 s or later
            }
            let text = t.api.handle(&call, "");
            t.reply(&r, &text);
            if !t.requests.is_empty() {
                break;
            }
        }
    }
    // taken only 3 s after the last version was first seen (at or after 2.5 s)
    assert!(now >= 5_500, "taken at {now}");
    t.serve(Acquire, "PUT");
    assert!(matches!(
        t.events()[..],
        [Event::Acquired {
            token: FencingToken(2),
            ..
        }]
    ));
}

#[test]
fn a_free_lease_is_taken_at_once_with_the_count_plus_one() {
    let mut t = T::new();
    t.api.write_other("", 7, 1);
    t.acquire();
    t.serve(Acquire, "GET");
    t.serve(Acquire, "PUT");
    assert!(matches!(
        t.events()[..],
        [Event::Acquired {
            token: FencingToken(8),
            ..
        }]
    ));
}

#[test]
fn every_grant_raises_the_token_even_a_retake_after_a_lapse() {
    let mut t = T::new();
    let lock = t.held();
    t.at(500);
    t.m.release(t.now, lock).unwrap();
    t.drain();
    t.serve(Release, "PUT");
    t.events();
    // the same process takes the free lease again: 2, then 3
    for token in [2, 3] {
        let lock = t.acquire();
        t.serve(Acquire, "GET");
        t.serve(Acquire, "PUT");
        assert!(matches!(
            t.events()[..],
            [Event::Acquired { token: FencingToken(got), .. }] if got == token
        ));
        t.m.release(t.now, lock).unwrap();
        t.drain();
        t.serve(Release, "PUT");
        t.events();
    }
}

#[test]
fn a_409_on_the_write_means_another_candidate_won_the_round() {
    let mut t = T::new();
    t.api.write_other("", 2, 1);
    t.acquire();
    t.serve(Acquire, "GET");
    t.api.write_other("winner", 3, 3); // between our read and our write
    t.serve(Acquire, "PUT"); // 409
    assert!(t.events().is_empty());
    // the next attempt reads again and finds the winner holding
    let mut now = 0;
    while t.requests.is_empty() {
        now += 10;
        t.at(now);
    }
    t.serve(Acquire, "GET");
    assert!(t.requests.is_empty() && t.events().is_empty());
}

#[test]
fn rule5_a_create_whose_reply_was_lost_is_adopted_with_the_same_token() {
    let mut t = T::new();
    t.acquire();
    t.serve(Acquire, "GET");
    let (r, post) = t.take(Acquire, "POST");
    t.api.handle(&post, "2026-12-01T12:00:00.000000Z");
    t.fail(&r);
    let mut now = 0;
    while t.requests.is_empty() {
        now += 10;
        t.at(now);
    }
    t.serve(Acquire, "GET"); // ours already
    let put = t.serve(Acquire, "PUT"); // a renewal, the count unchanged
    assert_eq!(put.stamp, ["renewTime"]);
    assert!(matches!(
        t.events()[..],
        [Event::Acquired {
            token: FencingToken(1),
            ..
        }]
    ));
}

#[test]
fn server_errors_on_acquire_are_ambiguous_and_retried() {
    let mut t = T::new();
    t.acquire();
    let (r, _) = t.take(Acquire, "GET");
    t.reply(&r, &status(503, "ServiceUnavailable"));
    assert!(t.events().is_empty());
    let mut now = 0;
    while t.requests.is_empty() {
        now += 10;
        t.at(now);
    }
    t.serve(Acquire, "GET");
    t.serve(Acquire, "POST");
    assert_eq!(t.events().len(), 1);
}

#[test]
fn forbidden_is_a_protocol_failure_not_a_retry() {
    let mut t = T::new();
    t.acquire();
    let (r, _) = t.take(Acquire, "GET");
    t.reply(&r, &status(403, "Forbidden"));
    assert!(matches!(t.events()[..], [Event::AcquireFailed { .. }]));
}

#[test]
fn cancelling_an_acquisition_clears_the_lease_only_if_it_is_ours() {
    let mut t = T::new();
    let lock = t.acquire();
    t.serve(Acquire, "GET");
    let (r, post) = t.take(Acquire, "POST");
    t.api.handle(&post, "2026-12-01T12:00:00.000000Z");
    t.m.release(t.now, lock).unwrap();
    t.drain();
    let patch = t.serve(Release, "PATCH");
    assert_eq!(patch.content_type, "application/json-patch+json");
    assert_eq!(t.api.spec()["holderIdentity"], "");
    assert_eq!(t.events(), [Event::Released]);
    let _ = r;
    // after an ambiguous read, a cancellation's patch on another holder's lease
    // changes nothing
    let mut t = T::new();
    t.api.write_other("other", 1, 3);
    let lock = t.acquire();
    let (r, _) = t.take(Acquire, "GET");
    t.fail(&r);
    t.m.release(t.now, lock).unwrap();
    t.drain();
    t.serve(Release, "PATCH"); // the test fails: 422
    assert_eq!(t.owner(), "other");
    assert_eq!(t.events(), [Event::Released]);
}

#[test]
fn a_token_floor_raises_the_count() {
    let mut t = T::new();
    t.api.write_other("", 7, 1);
    let mut options = LockOptions::ttl(Duration::from_secs(3));
    options.token_floor = Some(FencingToken(100));
    t.acquire_with(options);
    t.serve(Acquire, "GET");
    t.serve(Acquire, "PUT");
    assert!(matches!(
        t.events()[..],
        [Event::Acquired {
            token: FencingToken(100),
            ..
        }]
    ));
}

#[test]
fn bad_names_namespaces_and_ttls_are_refused_naming_the_problem() {
    let m = Machine::with_seed(Backend::Kubernetes(KubernetesBackend::default()), 1);
    let ttl = |ms| LockOptions::ttl(Duration::from_millis(ms));
    let option = |e: UsageError| match e {
        UsageError::InvalidOption { option, message } => (option, message.to_string()),
        other => panic!("{other:?}"),
    };
    let (o, msg) = option(m.check_acquire("Report_1", &ttl(3_000)).unwrap_err());
    assert_eq!(o, "name");
    assert!(
        msg.contains("DNS-1123 subdomain") && msg.contains("\"Report_1\""),
        "{msg}"
    );
    let (o, msg) = option(m.check_acquire("report", &ttl(1_500)).unwrap_err());
    assert_eq!(o, "ttl");
    assert!(msg.contains("whole seconds"), "{msg}");
    assert_eq!(
        option(m.check_acquire("report", &ttl(500)).unwrap_err()).0,
        "ttl"
    );
    let mut floor = ttl(3_000);
    floor.token_floor = Some(FencingToken(1 << 31));
    assert_eq!(
        option(m.check_acquire("report", &floor).unwrap_err()).0,
        "token_floor"
    );
    let bad_ns = Machine::with_seed(
        Backend::Kubernetes(KubernetesBackend {
            namespace: "Kube_System".to_owned(),
        }),
        1,
    );
    let (o, msg) = option(bad_ns.check_acquire("report", &ttl(3_000)).unwrap_err());
    assert_eq!(o, "namespace");
    assert!(msg.contains("DNS-1123 label"), "{msg}");
    assert!(m.check_acquire("my-app.leader", &ttl(3_000)).is_ok());
    // correctness needs no opt-in
    let mut correctness = ttl(3_000);
    correctness.purpose = fencepost_core::Purpose::Correctness;
    assert!(m.check_acquire("report", &correctness).is_ok());
}

#[test]
fn hot_lock_counts_holders_by_lease_transitions_so_one_long_hold_is_never_hot() {
    use fencepost_core::{Observation, ObserveOptions};
    // another candidate holds for 60 s; this one polls every 200 ms at most, for 20 s
    for changing in [false, true] {
        let mut t = T::new();
        t.m.observe(Some(ObserveOptions::default())).unwrap();
        t.api.write_other("other-1", 1, 60);
        let mut options = LockOptions::ttl(Duration::from_secs(3));
        options.acquire_timeout = Some(Duration::from_secs(20));
        options.retry_max = Duration::from_millis(200);
        t.acquire_with(options);
        let mut transitions = 1;
        for step in 1..=420u64 {
            while !t.requests.is_empty() {
                t.serve(Acquire, "GET");
            }
            if changing && step % 20 == 0 {
                // a new holder every second, each a new grant
                transitions += 1;
                t.api
                    .write_other(&format!("other-{transitions}"), transitions, 60);
            }
            t.at(step * 50);
        }
        let seen: Vec<Observation> = std::iter::from_fn(|| t.m.poll_observation())
            .map(|o| o.observation)
            .collect();
        let attempts = timed_out_attempts(&seen);
        assert!(attempts.is_some_and(|n| n >= 50), "{seen:?}");
        let hot = hot_lock_found(&seen);
        if changing {
            // every holder found once (the first and the 20 after it), not the attempts
            assert_eq!(hot, [Some(21)], "{seen:?}");
        } else {
            assert_eq!(hot, [], "one holder for the whole wait: {seen:?}");
        }
    }
}
