//! Leader election (`Client::election`) against the in-memory backend and, when their
//! URLs are set, the real Redis, PostgreSQL and etcd scripts/test starts: one leader at a
//! time, and the stop callback exactly once per term, in order, under resign, loss and
//! cancellation. A server that is not configured is printed and skipped.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencepost::{Client, Error, LockOptions, LostReason, StopReason};

mod common;
use common::{evict, servers, unique};

fn ttl(ms: u64) -> LockOptions {
    let mut o = LockOptions::ttl(Duration::from_millis(ms));
    o.acquire_timeout = Some(Duration::from_secs(10));
    o
}

type Seen = Arc<Mutex<Vec<(String, u64, Option<StopReason>)>>>;

fn recorded(client: &Client, name: &str, who: &str, ms: u64) -> (fencepost::Election, Seen) {
    let seen: Seen = Arc::default();
    let (a, b) = (seen.clone(), seen.clone());
    let election = client
        .election(name, who, ttl(ms))
        .unwrap()
        .with_value("10.0.0.1")
        .on_started_leading(move |t| {
            a.lock()
                .unwrap()
                .push(("started".into(), t.token.get(), None))
        })
        .on_stopped_leading(move |t, r| {
            b.lock()
                .unwrap()
                .push(("stopped".into(), t.token.get(), Some(r.clone())))
        });
    (election, seen)
}

fn seen(s: &Seen) -> Vec<(String, u64, Option<StopReason>)> {
    s.lock().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terms_end_exactly_once_in_order_under_resign_loss_and_cancel() {
    for (label, url) in servers() {
        let client = Client::connect(&url).await.unwrap();
        let name = unique("terms");
        let (election, calls) = recorded(&client, &name, "pod-a", 600);

        // resign: released at once, the next candidate leads at once with a later token
        let first = election.campaign().await.unwrap();
        assert_eq!(
            (
                first.term().identity.as_str(),
                first.term().value.as_deref()
            ),
            ("pod-a", Some("10.0.0.1"))
        );
        let mut other_options = ttl(600);
        other_options.acquire_timeout = Some(Duration::ZERO);
        let other = client.election(&name, "pod-b", other_options).unwrap();
        assert!(
            matches!(other.campaign().await, Err(Error::AcquireTimeout { .. })),
            "{label}: one leader at a time"
        );
        let t1 = first.token().get();
        assert_eq!(first.resign().await.unwrap(), StopReason::Resigned);
        let started = std::time::Instant::now();
        let second = other.campaign().await.unwrap();
        assert!(
            started.elapsed() < Duration::from_millis(300),
            "{label}: {:?}",
            started.elapsed()
        );
        assert!(second.token().get() > t1);
        second.resign().await.unwrap();

        // loss: evicted, the term ends at the next renewal (ttl / 3) and run cancels work
        let (c, n) = (client.clone(), name.clone());
        let finished = Arc::new(Mutex::new(false));
        let f = finished.clone();
        let outcome = election
            .run(|term| async move {
                assert!(term.token.get() > 0);
                evict(&c, &n).await;
                tokio::time::sleep(Duration::from_secs(10)).await;
                *f.lock().unwrap() = true;
            })
            .await;
        assert!(
            matches!(
                outcome,
                Err(Error::Lost {
                    reason: LostReason::RenewRejected,
                    ..
                })
            ),
            "{label}: {outcome:?}"
        );
        assert!(
            !*finished.lock().unwrap(),
            "{label}: the work was cancelled"
        );

        // cancel: dropping the run's future resigns at once
        let running = tokio::spawn({
            let election = election.clone();
            async move {
                election
                    .run(|_| tokio::time::sleep(Duration::from_secs(60)))
                    .await
            }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        running.abort();
        let _ = running.await;
        let started = std::time::Instant::now();
        let third = other.campaign().await.unwrap();
        assert!(
            started.elapsed() < Duration::from_millis(300),
            "{label}: released at once"
        );
        third.resign().await.unwrap();

        // run: the work's result, resigned after it
        let token = election
            .run(|term| async move { term.token.get() })
            .await
            .unwrap();

        let calls = seen(&calls);
        let tokens: Vec<u64> = calls.iter().step_by(2).map(|c| c.1).collect();
        let expect: Vec<_> = [
            StopReason::Resigned,
            StopReason::Lost(LostReason::RenewRejected),
            StopReason::Cancelled,
            StopReason::Resigned,
        ]
        .iter()
        .zip(&tokens)
        .flat_map(|(r, t)| {
            [
                ("started".to_owned(), *t, None),
                ("stopped".to_owned(), *t, Some(r.clone())),
            ]
        })
        .collect();
        assert_eq!(calls, expect, "{label}");
        assert_eq!(tokens.last(), Some(&token));
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "{label}: {tokens:?}"
        );
        println!("{label}: terms {tokens:?}, callbacks once each, in order");
    }
}

#[tokio::test]
async fn bad_elections_are_typed_errors() {
    let client = Client::memory();
    assert!(matches!(
        client.election("jobs", "", ttl(1_000)),
        Err(Error::Config(_))
    ));
    let mut manual = ttl(1_000);
    manual.auto_renew = false;
    assert!(matches!(
        client.election("jobs", "a", manual),
        Err(Error::Config(_))
    ));
    assert!(matches!(
        client.election("", "a", ttl(1_000)),
        Err(Error::Usage(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resign_that_finds_the_lease_gone_is_a_lost_term_not_a_result() {
    let client = Client::memory();
    let name = unique("gone");
    let (election, calls) = recorded(&client, &name, "pod-a", 30_000);
    let c = client.clone();
    let n = name.clone();
    let outcome = election
        .run(|_| async move {
            evict(&c, &n).await; // gone before any renewal noticed
            "done"
        })
        .await;
    assert!(
        matches!(
            outcome,
            Err(Error::Lost {
                reason: LostReason::NotHeldAtRelease,
                ..
            })
        ),
        "{outcome:?}"
    );
    assert_eq!(
        seen(&calls),
        vec![
            ("started".to_owned(), 1, None),
            (
                "stopped".to_owned(),
                1,
                Some(StopReason::Lost(LostReason::NotHeldAtRelease))
            )
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_read_each_leader_and_observe_every_change_in_order() {
    use futures::StreamExt;
    for (label, url) in servers() {
        let client = Client::connect(&url).await.unwrap();
        let name = unique("follow");
        let follower = client.election(&name, "follower", ttl(5_000)).unwrap();
        assert_eq!(follower.leader().await.unwrap(), None, "{label}");
        let changes = follower.observe(Duration::from_millis(20));
        let mut changes = Box::pin(changes);
        assert_eq!(changes.next().await.unwrap().unwrap(), None, "{label}");

        let a = client
            .election(&name, "pod-a", ttl(5_000))
            .unwrap()
            .with_value("10.0.0.1:8080");
        let term = a.campaign().await.unwrap();
        let leader = follower.leader().await.unwrap().expect("a leads");
        assert_eq!(
            (
                leader.identity.as_deref(),
                leader.value.as_deref(),
                leader.token
            ),
            (Some("pod-a"), Some("10.0.0.1:8080"), term.token()),
            "{label}"
        );
        let seen = changes.next().await.unwrap().unwrap().expect("a leads");
        assert_eq!(seen.identity.as_deref(), Some("pod-a"), "{label}");

        term.resign().await.unwrap();
        assert_eq!(
            changes.next().await.unwrap().unwrap(),
            None,
            "{label}: nobody leads"
        );
        let b = client.election(&name, "pod-b", ttl(5_000)).unwrap();
        let term = b.campaign().await.unwrap();
        let seen = changes.next().await.unwrap().unwrap().expect("b leads");
        assert_eq!(
            (seen.identity.as_deref(), seen.value.as_deref(), seen.token),
            (Some("pod-b"), None, term.token()),
            "{label}"
        );
        term.resign().await.unwrap();
    }
}

#[tokio::test]
async fn a_backend_without_metadata_cannot_say_who_leads() {
    // PostgreSQL session locks keep nothing beside the lock
    let Some(url) = std::env::var("FENCEPOST_PG_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        println!("skipped: FENCEPOST_PG_URL is not set (scripts/services/postgres.sh start)");
        return;
    };
    let sep = if url.contains('?') { '&' } else { '?' };
    let client = Client::connect(&format!("{url}{sep}mode=session"))
        .await
        .unwrap();
    let election = client
        .election(&unique("nometa"), "pod-a", ttl(5_000))
        .unwrap();
    match election.leader().await {
        Err(Error::Config(message)) => {
            assert!(message.contains("cannot say who leads"), "{message}")
        }
        other => panic!("expected a ConfigError, got {other:?}"),
    }
}
