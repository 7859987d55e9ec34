//! Holder inspection through the Rust API: `Client::status` / `Client::list` read the
//! metadata an acquisition stored (`LockOptions::with_metadata`), the time left and the
//! token, and a forced release fences the evicted holder. On the in-memory backend and,
//! when their variables are set, real Redis, PostgreSQL lease rows and etcd (the backends
//! that store metadata; the forced-release test on the Redis-like ones).

use std::collections::BTreeMap;
use std::time::Duration;

use fencepost::core::fence::{read_redis_fenced_set, redis_fenced_set};
use fencepost::core::{Reply, RequestBody};
use fencepost::{Client, Error, LockOptions};

mod common;
use common::{evict, servers, unique};

fn with_meta(pairs: &[(&str, &str)]) -> LockOptions {
    let meta: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    LockOptions::ttl(Duration::from_millis(3_000)).with_metadata(&meta)
}

fn redis_like() -> Vec<(&'static str, String)> {
    servers()
        .into_iter()
        .filter(|(label, _)| matches!(*label, "memory" | "redis"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_round_trips_and_list_is_prefix_filtered() {
    let storing: Vec<_> = servers()
        .into_iter()
        .filter(|(label, _)| matches!(*label, "memory" | "redis" | "postgres" | "etcd"))
        .collect();
    for (label, url) in storing {
        let client = Client::connect(&url).await.unwrap();
        let name = unique("meta");
        let lease = client
            .acquire(&name, with_meta(&[("host", "web-1"), ("label", "nightly")]))
            .await
            .unwrap();
        let holder = client.status(&name).await.unwrap().expect("held");
        assert_eq!(holder.token, Some(lease.token()), "{label}");
        if label == "etcd" {
            // the key names its lease, not the owner id
            assert!(
                holder.owner.as_deref().unwrap().starts_with("lease:"),
                "{holder:?}"
            );
        } else {
            assert_eq!(holder.owner, Some(lease.owner_id().to_string()), "{label}");
        }
        let meta = holder.metadata.expect("metadata");
        assert_eq!(meta["host"], "web-1");
        assert_eq!(meta["label"], "nightly");
        let left = holder.ttl_left.expect("ttl left");
        // etcd counts whole seconds, rounded down
        let least = Duration::from_secs(2) - Duration::from_millis(u64::from(label == "etcd"));
        assert!(left > least && left <= Duration::from_secs(3), "{left:?}");

        let other = client
            .acquire(&format!("{name}:b"), with_meta(&[("i", "1")]))
            .await
            .unwrap();
        let outside = client
            .acquire(
                &format!("x{name}"),
                LockOptions::ttl(Duration::from_secs(3)),
            )
            .await
            .unwrap();
        let standard = fencepost::standard_metadata(Some("nightly"));
        for key in ["pid", "process", "acquired_at", "label"] {
            assert!(standard.contains_key(key), "{key}: {standard:?}");
        }
        let listed = client.list(&name, 10).await.unwrap();
        let names: Vec<_> = listed.iter().map(|h| h.name.clone()).collect();
        assert_eq!(names, vec![name.clone(), format!("{name}:b")], "{label}");
        assert_eq!(client.list(&name, 1).await.unwrap().len(), 1);
        assert!(client
            .list(&format!("{name}*"), 10)
            .await
            .unwrap()
            .is_empty());
        lease.release().await.unwrap();
        assert_eq!(client.status(&name).await.unwrap(), None);
        other.release().await.unwrap();
        outside.release().await.unwrap();
        println!("{label}: metadata round-tripped, list bounded and prefix-filtered");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_release_fences_the_evicted_holder() {
    for (label, url) in redis_like() {
        let client = Client::connect(&url).await.unwrap();
        let name = unique("evict");
        let (data, fence) = (format!("{name}:data"), format!("{name}:fence"));
        let write = |token, value: &'static str| {
            let (client, data, fence) = (client.clone(), data.clone(), fence.clone());
            async move {
                let body = RequestBody::Redis(redis_fenced_set(&data, &fence, token, value));
                let Reply::Redis(v) = client.execute(body).await.unwrap() else {
                    panic!("a Redis reply")
                };
                read_redis_fenced_set(&data, token, &v).unwrap()
            }
        };
        let evicted = client
            .acquire(&name, with_meta(&[("who", "a")]))
            .await
            .unwrap();
        assert!(write(evicted.token(), "a").await.is_ok());
        evict(&client, &name).await;
        assert_eq!(client.status(&name).await.unwrap(), None, "{label}");
        let next = client
            .acquire(&name, with_meta(&[("who", "b")]))
            .await
            .unwrap();
        assert!(next.token() > evicted.token());
        let holder = client.status(&name).await.unwrap().expect("held");
        assert_eq!(holder.metadata.expect("metadata")["who"], "b");
        assert!(write(next.token(), "b").await.is_ok());
        let stale = write(evicted.token(), "late a").await.unwrap_err();
        assert_eq!(stale.highest, next.token(), "{label}");
        next.release().await.unwrap();
        let err = evicted.release().await.unwrap_err();
        assert!(matches!(err, Error::Lost { .. }), "{label}: {err:?}");
    }
}
