//! The Rust API against the in-memory backend and, when their URLs are set, the real
//! servers scripts/test starts: FENCEPOST_REDIS_URL, FENCEPOST_PG_URL and
//! FENCEPOST_ETCD_URL (a gateway URL, `http://127.0.0.1:2379`). A test whose server is
//! not configured prints why and passes.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencepost::core::backends::etcd::{read_etcd_fenced_txn, EtcdFenced, EtcdOp};
use fencepost::core::fence::{read_redis_fenced_set, redis_fenced_set};
use fencepost::core::{Reply, RequestBody};
use fencepost::{Backend, Client, Error, LockOptions, LostReason, Previous, Purpose};

mod common;
use common::{evict, servers, unique};

fn ttl(ms: u64) -> LockOptions {
    LockOptions::ttl(Duration::from_millis(ms))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_extend_release_and_the_next_token_is_higher() {
    for (label, url) in servers() {
        let client = Client::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        let name = unique("cycle");
        let lease = client.acquire(&name, ttl(3_000)).await.unwrap();
        assert_eq!(lease.name(), name);
        // etcd's records cannot tell after the try-once contender below: it joined behind
        // the holder and left before the release, and whether it held in between is not
        // recorded (docs/DESIGN.md, "The previous holder's fate")
        let (first_grant, after_release) = match label {
            "etcd" => (Previous::None, Previous::Unknown),
            _ => (Previous::None, Previous::Released),
        };
        assert_eq!(lease.previous(), first_grant, "{label}");
        let first = lease.token();
        let holder = client.status(&name).await.unwrap().expect("held");
        assert_eq!(holder.token, Some(first), "{label}");
        if label != "etcd" {
            assert_eq!(holder.owner, Some(lease.owner_id().to_string()), "{label}");
        }
        assert!(
            holder.ttl_left.unwrap() <= Duration::from_secs(3),
            "{label}: {holder:?}"
        );
        lease.extend().await.unwrap();
        // held: a second contender that tries once is refused
        let err = client
            .acquire(
                &name,
                LockOptions {
                    acquire_timeout: Some(Duration::ZERO),
                    ..ttl(3_000)
                },
            )
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::AcquireTimeout { .. }),
            "{label}: {err:?}"
        );
        lease.release().await.unwrap();
        assert_eq!(
            client.status(&name).await.unwrap(),
            None,
            "{label}: released"
        );
        let again = client.acquire(&name, ttl(3_000)).await.unwrap();
        assert_eq!(again.previous(), after_release, "{label}");
        assert!(
            again.token() > first,
            "{label}: {} after {first}",
            again.token()
        );
        let listed = client.list(&name, 10).await.unwrap();
        assert_eq!(listed.len(), 1, "{label}: {listed:?}");
        assert_eq!(listed[0].name, name);
        again.release().await.unwrap();
        println!("{label}: tokens {first} then higher, status and list agree");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_renews_past_its_ttl() {
    // every server at once: each waits 2.5 TTLs
    let checks = servers()
        .into_iter()
        .filter(|(label, _)| *label != "etcd")
        .map(
            // etcd's whole-second leases: covered by the CLI tests with longer TTLs
            |(label, url)| async move {
                let client = Client::connect(&url).await.unwrap();
                let name = unique("renew");
                // Renewed every second: a lease of a few seconds outlives a stalled CI
                // machine (a VM paused past a short TTL loses its lease, rightly).
                let lease = client.acquire(&name, ttl(3_000)).await.unwrap();
                tokio::time::sleep(Duration::from_millis(7_500)).await;
                // a lost lease says why, so that a failure here explains itself
                let lost = futures::FutureExt::now_or_never(lease.lost());
                assert_eq!(lost, None, "{label}: lost while held");
                assert!(
                    client.status(&name).await.unwrap().is_some(),
                    "{label}: the server still holds it"
                );
                lease.release().await.unwrap();
            },
        );
    futures::future::join_all(checks).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_resolves_lost_and_cancels_the_work_of_with_lock() {
    for (label, url) in servers() {
        if label == "memory" {
            continue; // nothing outside the client can reach its server
        }
        let client = Client::connect(&url).await.unwrap();
        let name = unique("loss");
        // lost(): a lease whose key is deleted learns it at its next renewal (ttl / 3)
        let lease = client.acquire(&name, ttl(2_000)).await.unwrap();
        evict(&client, &name).await;
        let started = Instant::now();
        let reason = tokio::time::timeout(Duration::from_secs(3), lease.lost())
            .await
            .expect("lost in time");
        assert_eq!(reason, LostReason::RenewRejected, "{label}");
        assert!(
            started.elapsed() < Duration::from_millis(2_000),
            "{label}: {:?}",
            started.elapsed()
        );
        assert!(matches!(
            lease.release().await,
            Ok(()) | Err(Error::Lost { .. })
        ));

        // with_lock: the work stops at its next await once the lease is lost
        let finished = Arc::new(AtomicBool::new(false));
        let (c, n, f) = (client.clone(), name.clone(), finished.clone());
        let evictor = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            evict(&c, &n).await;
        });
        let outcome = client
            .with_lock(&name, ttl(2_000), |lease| async move {
                assert!(lease.token().get() > 0);
                tokio::time::sleep(Duration::from_secs(10)).await;
                f.store(true, Ordering::SeqCst);
            })
            .await;
        evictor.await.unwrap();
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
            !finished.load(Ordering::SeqCst),
            "{label}: the work was cancelled"
        );
        println!("{label}: eviction seen as RenewRejected, work cancelled");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_set_writes_the_newest_token_and_refuses_the_rest() {
    let client = Client::memory();
    let old = client.acquire("fence", ttl(3_000)).await.unwrap();
    let (old_token, old_owner) = (old.token(), old.owner_id());
    old.release().await.unwrap();
    let new = client.acquire("fence", ttl(3_000)).await.unwrap();
    let (data, fence) = ("{fence}:data", "{fence}:fence");
    client
        .fenced_set(data, fence, new.token(), "new", Some(new.owner_id()))
        .await
        .unwrap();
    let Err(Error::StaleToken(stale)) = client
        .fenced_set(data, fence, old_token, "old", Some(old_owner))
        .await
    else {
        panic!("the older token wrote");
    };
    assert_eq!((stale.token, stale.highest), (old_token, new.token()));
    // owner-bound: the newest token from another owner is refused too
    let other = fencepost::OwnerId([7; 16]);
    let Err(Error::StaleToken(_)) = client
        .fenced_set(data, fence, new.token(), "dup", Some(other))
        .await
    else {
        panic!("a second owner wrote with the same token");
    };
    let Err(Error::Config(message)) = client.fenced_set(data, data, new.token(), "x", None).await
    else {
        panic!("one key for both was accepted");
    };
    assert!(message.contains(data), "{message}");
    new.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_writes_refuse_a_stale_token() {
    for (label, url) in servers() {
        let client = Client::connect(&url).await.unwrap();
        let name = unique("fence");
        let old = client.acquire(&name, ttl(3_000)).await.unwrap();
        let (old_token, old_owner) = (old.token(), old.owner_id());
        old.release().await.unwrap();
        let new = client.acquire(&name, ttl(3_000)).await.unwrap();
        match client.backend().clone() {
            Backend::Redis(_) => {
                let (data, fence) = (format!("{{{name}}}:data"), format!("{{{name}}}:fence"));
                for (token, value, ok) in [(new.token(), "new", true), (old_token, "old", false)] {
                    let reply = client
                        .execute(RequestBody::Redis(redis_fenced_set(
                            &data, &fence, token, value,
                        )))
                        .await
                        .unwrap();
                    let Reply::Redis(v) = reply else {
                        panic!("{reply:?}")
                    };
                    let written = read_redis_fenced_set(&data, token, &v).unwrap();
                    assert_eq!(written.is_ok(), ok, "{label}: token {token}: {written:?}");
                    if let Err(stale) = written {
                        assert_eq!(stale.highest, new.token());
                    }
                }
            }
            Backend::Postgres(_) => {
                let table = format!("fenced_{}", name.replace('-', "_"));
                let sql = |s: String| {
                    RequestBody::Sql(fencepost::core::SqlStatement {
                        sql: s,
                        params: vec![],
                        connection: fencepost::core::PgConnection::Any,
                    })
                };
                client.execute(sql(format!("CREATE TABLE {table} (id int PRIMARY KEY, v text, last_token bigint NOT NULL DEFAULT 0)"))).await.unwrap();
                client
                    .execute(sql(format!("INSERT INTO {table} (id) VALUES (1)")))
                    .await
                    .unwrap();
                let update = fencepost::core::fence::sql_fenced_update(
                    &table,
                    "id",
                    "last_token",
                    &["v"],
                    fencepost::core::fence::ParamStyle::Dollar,
                )
                .unwrap();
                for (token, value, rows) in [(new.token(), "new", 1), (old_token, "old", 0)] {
                    let stmt = fencepost::core::SqlStatement {
                        sql: format!("{update} RETURNING id"),
                        params: vec![
                            fencepost::core::SqlValue::Int(1),
                            fencepost::core::SqlValue::Int(token.get() as i64),
                            fencepost::core::SqlValue::Text(value.into()),
                        ],
                        connection: fencepost::core::PgConnection::Any,
                    };
                    let reply = client.execute(RequestBody::Sql(stmt)).await.unwrap();
                    let Reply::Sql(fencepost::core::SqlReply::Rows { rows: got }) = reply else {
                        panic!("{reply:?}")
                    };
                    assert_eq!(got.len(), rows, "{label}: token {token}");
                }
                client
                    .execute(sql(format!("DROP TABLE {table}")))
                    .await
                    .unwrap();
            }
            Backend::Etcd(b) => {
                let put = |v: &str| {
                    vec![EtcdOp::Put {
                        key: format!("data/{name}"),
                        value: v.into(),
                        lease: 0,
                        ignore_lease: false,
                    }]
                };
                let fresh = b.fenced_txn(
                    &name,
                    &b.holder_key(&name, &new.owner_id()),
                    new.token(),
                    put("new"),
                );
                let stale = b.fenced_txn(
                    &name,
                    &b.holder_key(&name, &old_owner),
                    old_token,
                    put("old"),
                );
                for (req, ok) in [(fresh, true), (stale, false)] {
                    let Reply::Etcd(text) = client.execute(RequestBody::Etcd(req)).await.unwrap()
                    else {
                        panic!()
                    };
                    let read = read_etcd_fenced_txn(&text).unwrap();
                    assert_eq!(
                        matches!(read, EtcdFenced::Applied { .. }),
                        ok,
                        "{label}: {read:?}"
                    );
                }
            }
            other => panic!("{other:?}"),
        }
        new.release().await.unwrap();
        println!("{label}: the stale token {old_token} was refused");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_take_turns_with_increasing_tokens() {
    for (label, url) in servers() {
        let client = Client::connect(&url).await.unwrap();
        let name = unique("turns");
        let inside = Arc::new(AtomicU32::new(0));
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let (client, name, inside) = (client.clone(), name.clone(), inside.clone());
            tasks.push(tokio::spawn(async move {
                let options = LockOptions {
                    acquire_timeout: Some(Duration::from_secs(15)),
                    retry_max: Duration::from_millis(100),
                    ..ttl(3_000)
                };
                client
                    .with_lock(&name, options, |lease| async move {
                        assert_eq!(
                            inside.fetch_add(1, Ordering::SeqCst),
                            0,
                            "two holders at once"
                        );
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                        lease.token()
                    })
                    .await
                    .unwrap()
            }));
        }
        let mut tokens = Vec::new();
        for t in tasks {
            tokens.push(t.await.unwrap());
        }
        tokens.sort();
        tokens.dedup();
        assert_eq!(tokens.len(), 4, "{label}: four distinct tokens {tokens:?}");
    }
}

#[tokio::test]
async fn bad_input_is_a_typed_error() {
    let client = Client::memory();
    let err = client.acquire("", ttl(1_000)).await.unwrap_err();
    assert!(matches!(err, Error::Usage(_)), "{err:?}");
    let err = client
        .acquire(
            "x",
            LockOptions {
                purpose: Purpose::Correctness,
                ..ttl(1_000)
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Usage(_)),
        "a correctness lock on Redis needs the opt-in: {err:?}"
    );
    for bad in [
        "mysql://x",
        "etcd+http://",
        "nope",
        "redis://x?key_prefix=",
        "redis://x?shared_lease=true",
        "etcd+http://127.0.0.1:1?shared_lease=yes",
    ] {
        let err = Client::connect(bad).await.err().expect(bad);
        assert!(matches!(err, Error::Config(_)), "{bad}: {err:?}");
    }
    // fencepost builds these clients' requests itself: a parameter it does not read
    // would end up in every request's URL
    for unknown in [
        "etcd+http://127.0.0.1:1?bogus=1",
        "etcd+http://127.0.0.1:1,127.0.0.1:2?key_prefix=a/&bogus=1",
        "upstash+http://127.0.0.1:1?bogus=1",
    ] {
        let Err(err) = fencepost::BackendUrl::parse(unknown) else {
            panic!("{unknown} was accepted");
        };
        assert!(
            err.to_string().contains("unknown parameter"),
            "{unknown}: {err}"
        );
    }
    let shared = fencepost::BackendUrl::parse("etcd+http://127.0.0.1:2379?shared_lease=true")
        .expect("an etcd URL with a shared lease");
    assert!(shared.etcd_shared_lease);
    assert!(
        !fencepost::BackendUrl::parse("etcd+http://127.0.0.1:2379")
            .unwrap()
            .etcd_shared_lease
    );
    let msg = Client::connect("mysql://user:secret@h")
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(!msg.contains("secret"), "{msg}");
    #[cfg(not(feature = "tls"))]
    for tls in [
        "rediss://127.0.0.1:1",
        "etcd+https://127.0.0.1:1",
        "upstash+https://127.0.0.1:1",
        "postgres://u@127.0.0.1:1/db?sslmode=verify-full",
    ] {
        let err = Client::connect(tls).await.err().expect(tls);
        assert!(
            matches!(&err, Error::Config(m) if m.contains("`tls`")),
            "{tls} needs the tls feature: {err:?}"
        );
    }
    // a CA for a connection without TLS is a mistake to say, not to ignore
    for plain in [
        "redis://127.0.0.1:1?ca=/ca.pem",
        "postgres://u@127.0.0.1:1/db?sslrootcert=/ca.pem",
        "postgres://u@127.0.0.1:1/db?sslmode=prefer&sslrootcert=/ca.pem",
        "postgres://u@127.0.0.1:1/db?sslmode=verify-everything",
    ] {
        let err = Client::connect(plain).await.err().expect(plain);
        assert!(matches!(err, Error::Config(_)), "{plain}: {err:?}");
    }
}

/// The Upstash adapter through the project's Upstash-protocol proxy in front of the
/// test Redis (tests/js/rest-proxy.js, which the JavaScript suite uses too): needs
/// FENCEPOST_REDIS_URL, node, and bindings-node's node_modules (ioredis).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstash_rest_protocol_through_the_proxy() {
    use tokio::io::AsyncBufReadExt;
    let Some(redis) = std::env::var("FENCEPOST_REDIS_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        println!("skipped upstash: FENCEPOST_REDIS_URL is not set");
        return;
    };
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    if !repo.join("bindings-node/node_modules/ioredis").is_dir() {
        println!(
            "skipped upstash: bindings-node/node_modules has no ioredis (npm ci in bindings-node)"
        );
        return;
    }
    let mut proxy = match tokio::process::Command::new("node")
        .arg(repo.join("tests/js/rest-proxy.js"))
        .args([redis.as_str(), "sesame"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(p) => p,
        Err(e) => {
            println!("skipped upstash: cannot run node: {e}");
            return;
        }
    };
    let mut lines = tokio::io::BufReader::new(proxy.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("the proxy printed its URL")
        .unwrap()
        .expect("a URL line");
    let rest = url.trim().trim_start_matches("http://");
    // wrong token: every call is refused, so the acquisition cannot succeed
    let wrong = Client::connect(&format!("upstash+http://:nope@{rest}"))
        .await
        .unwrap();
    let err = wrong
        .acquire(
            &unique("upstash"),
            LockOptions {
                acquire_timeout: Some(Duration::from_millis(300)),
                ..ttl(1_000)
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::AcquireTimeout { .. } | Error::Protocol(_)),
        "{err:?}"
    );

    let client = Client::connect(&format!("upstash+http://:sesame@{rest}"))
        .await
        .unwrap();
    let name = unique("upstash");
    let lease = client.acquire(&name, ttl(2_000)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2_600)).await; // renewed past its TTL
    let holder = client.status(&name).await.unwrap().expect("held");
    assert_eq!(holder.token, Some(lease.token()));
    assert_eq!(client.list(&name, 5).await.unwrap().len(), 1);
    let first = lease.token();
    lease.release().await.unwrap();
    assert_eq!(client.status(&name).await.unwrap(), None);
    let again = client.acquire(&name, ttl(2_000)).await.unwrap();
    assert!(again.token() > first);
    evict(&client, &name).await;
    let reason = tokio::time::timeout(Duration::from_secs(5), again.lost())
        .await
        .expect("lost");
    assert_eq!(reason, LostReason::RenewRejected);
    let _ = proxy.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_status_counts_the_queued_contenders() {
    let Some(url) = std::env::var("FENCEPOST_ETCD_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        println!("skipped etcd: FENCEPOST_ETCD_URL is not set");
        return;
    };
    let client = Client::connect(&format!("etcd+{url}")).await.unwrap();
    let name = unique("queue");
    let first = client.acquire(&name, ttl(3_000)).await.unwrap();
    assert_eq!(
        client.status(&name).await.unwrap().unwrap().waiters,
        Some(0)
    );
    let (c, n) = (client.clone(), name.clone());
    let second = tokio::spawn(async move {
        let options = LockOptions {
            acquire_timeout: Some(Duration::from_secs(8)),
            ..ttl(3_000)
        };
        c.acquire(&n, options).await.unwrap()
    });
    let started = Instant::now();
    while client.status(&name).await.unwrap().unwrap().waiters != Some(1) {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the contender queued"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    first.release().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(5), second)
        .await
        .unwrap()
        .unwrap();
    let holder = client.status(&name).await.unwrap().unwrap();
    assert_eq!(
        (holder.token, holder.waiters),
        (Some(second.token()), Some(0))
    );
    second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_waiter_is_granted_within_milliseconds_of_the_release() {
    let Ok(url) = std::env::var("FENCEPOST_PG_URL") else {
        println!("skipped: FENCEPOST_PG_URL is not set (scripts/services/postgres.sh start)");
        return;
    };
    // two clients: the release's notification crosses connections, as between processes
    let (holder, waiter) = (
        Client::connect(&url).await.unwrap(),
        Client::connect(&url).await.unwrap(),
    );
    let name = unique("notify");
    let held = holder.acquire(&name, ttl(30_000)).await.unwrap();
    // a backoff of 8 s: far above what the notification takes
    let options = LockOptions {
        acquire_timeout: Some(Duration::from_secs(25)),
        retry_base: Duration::from_secs(8),
        retry_max: Duration::from_secs(8),
        ..ttl(30_000)
    };
    let (name2, waiter2) = (name.clone(), waiter.clone());
    let task = tokio::spawn(async move {
        let lease = waiter2.acquire(&name2, options).await.unwrap();
        let at = Instant::now();
        (lease, at)
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!task.is_finished());
    let token = held.token();
    held.release().await.unwrap();
    let released = Instant::now();
    let (lease, at) = task.await.unwrap();
    let delay = at.saturating_duration_since(released);
    assert!(
        delay < Duration::from_millis(250),
        "granted {delay:?} after the release"
    );
    assert_eq!(lease.token().get(), token.get() + 1);
    lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_connecting_at_once_to_a_new_database_all_get_its_tables() {
    let Ok(url) = std::env::var("FENCEPOST_PG_URL") else {
        println!("skipped: FENCEPOST_PG_URL is not set (scripts/services/postgres.sh start)");
        return;
    };
    let admin = Client::connect(&url).await.unwrap();
    let sql = |s: String| {
        RequestBody::Sql(fencepost::core::SqlStatement {
            sql: s,
            params: vec![],
            connection: fencepost::core::PgConnection::Any,
        })
    };
    let (base, _) = url.rsplit_once('/').expect("a database in the URL");
    for round in 0..4 {
        let db = format!("fresh_{}_{round}", std::process::id());
        admin
            .execute(sql(format!("CREATE DATABASE {db}")))
            .await
            .unwrap();
        let fresh = format!("{base}/{db}");
        // each creates the tables if missing: at once, on a database that has none
        let clients = futures::future::join_all((0..8).map(|_| Client::connect(&fresh))).await;
        for client in clients {
            let client = client.unwrap_or_else(|e| panic!("round {round}: {e}"));
            client.close(Duration::from_secs(2)).await;
        }
        admin
            .execute(sql(format!("DROP DATABASE {db} WITH (FORCE)")))
            .await
            .unwrap();
    }
}
