//! Helpers the integration tests share: unique lock names, the configured servers, and
//! an operator's eviction of a holder.
#![allow(dead_code)] // each test file uses some of them

use std::sync::atomic::{AtomicU32, Ordering};

use fencepost::core::backends::etcd::EtcdRequest;
use fencepost::core::backends::postgres::{lock_state_statement, read_lock_state};
use fencepost::core::{Reply, RequestBody};
use fencepost::{Backend, Client};

/// A lock name no other test (or earlier run) uses.
pub fn unique(label: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "rust-{label}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The configured servers, as backend URLs; prints the ones skipped.
pub fn servers() -> Vec<(&'static str, String)> {
    let mut out = vec![("memory", "memory://".to_owned())];
    for (label, var, scheme) in [
        ("redis", "FENCEPOST_REDIS_URL", ""),
        ("postgres", "FENCEPOST_PG_URL", ""),
        ("etcd", "FENCEPOST_ETCD_URL", "etcd+"),
    ] {
        match std::env::var(var) {
            Ok(url) if !url.is_empty() => out.push((label, format!("{scheme}{url}"))),
            _ => println!("skipped {label}: {var} is not set (scripts/services/{label}.sh start)"),
        }
    }
    out
}

/// Frees `name` behind its holder's back, as an operator would, with the core's
/// operator statements: Redis deletes the lease key, PostgreSQL clears the row, etcd
/// revokes the holder's lease.
pub async fn evict(client: &Client, name: &str) {
    match client.backend() {
        Backend::Redis(b) => {
            let reply = client
                .execute(RequestBody::Redis(b.force_release(name)))
                .await
                .unwrap();
            assert!(
                matches!(reply, Reply::Redis(fencepost::core::RedisValue::Int(1))),
                "{reply:?}"
            );
        }
        Backend::Postgres(b) => {
            let reply = client
                .execute(RequestBody::Sql(lock_state_statement(b, name, true)))
                .await
                .unwrap();
            let Reply::Sql(sql) = reply else {
                panic!("{reply:?}")
            };
            assert!(read_lock_state(&sql).unwrap().lease, "a live row was freed");
        }
        Backend::Etcd(_) => {
            let holder = client.status(name).await.unwrap().expect("held");
            let lease = i64::from_str_radix(holder.owner.unwrap().trim_start_matches("lease:"), 16)
                .unwrap();
            client
                .execute(RequestBody::Etcd(EtcdRequest::LeaseRevoke { id: lease }))
                .await
                .unwrap();
        }
        other => panic!("no eviction for {other:?}"),
    }
}
