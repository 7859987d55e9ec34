//! Redlock through the Rust API on three real Redis masters on 127.0.0.1, which this
//! test starts itself with scripts/services/redis-masters.sh (in a state directory of
//! its own, stopped at the end). Masters are stopped with SIGSTOP and always resumed.
//! Skipped, saying why, when redis-server is not installed.

#![cfg(feature = "redis")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fencepost::{Client, Error, LockOptions, Purpose};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Three masters; stops them when dropped.
struct Masters {
    state: PathBuf,
    urls: Vec<String>,
    pids: Vec<String>,
}

impl Masters {
    fn start() -> Option<Masters> {
        if Command::new("redis-server")
            .arg("--version")
            .output()
            .is_err()
        {
            println!("skipped: redis-server is not installed (scripts/services/redis.sh install)");
            return None;
        }
        // one directory per instance: the tests of this file run in parallel, in one process
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let state =
            std::env::temp_dir().join(format!("fencepost-rust-redlock-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&state).unwrap();
        let script = repo().join("scripts/services/redis-masters.sh");
        let run = |args: &[&str]| {
            let out = Command::new(&script)
                .args(args)
                .env("FENCEPOST_STATE", &state)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap()
        };
        let urls = run(&["start", "3"])
            .trim()
            .split(',')
            .map(str::to_owned)
            .collect();
        let pids = run(&["pids"])
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        Some(Masters { state, urls, pids })
    }

    /// `redlock://h1:p1,h2:p2,h3:p3/0` from the masters' `redis://h:p/0` URLs.
    fn url(&self) -> String {
        let hosts: Vec<&str> = self
            .urls
            .iter()
            .map(|u| u.trim_start_matches("redis://").trim_end_matches("/0"))
            .collect();
        format!("redlock://{}/0", hosts.join(","))
    }

    fn signal(&self, which: &[usize], sig: &str) {
        for &i in which {
            let ok = Command::new("kill")
                .args([sig, &self.pids[i]])
                .status()
                .unwrap();
            assert!(ok.success());
        }
    }
}

impl Drop for Masters {
    fn drop(&mut self) {
        self.signal(&[0, 1, 2], "-CONT");
        let _ = Command::new(repo().join("scripts/services/redis-masters.sh"))
            .arg("stop")
            .env("FENCEPOST_STATE", &self.state)
            .status();
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

/// A TTL, and an acquire timeout so that no test can wait forever.
fn ttl(ms: u64) -> LockOptions {
    LockOptions {
        acquire_timeout: Some(Duration::from_secs(5)),
        ..LockOptions::ttl(Duration::from_millis(ms))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_grants_renews_and_releases_and_a_minority_cannot() {
    let Some(masters) = Masters::start() else {
        return;
    };
    let client = Client::connect(&masters.url()).await.unwrap();
    let name = format!("rust-redlock-{}", std::process::id());

    // all three: granted; status reports the majority's holder
    let lease = client.acquire(&name, ttl(2_000)).await.unwrap();
    let first = lease.token();
    let holder = client
        .status(&name)
        .await
        .unwrap()
        .expect("held by a majority");
    assert_eq!(holder.owner, Some(lease.owner_id().to_string()));
    assert_eq!(holder.token, Some(first));
    assert_eq!(client.list("rust-redlock-", 10).await.unwrap().len(), 1);
    lease.release().await.unwrap();
    assert_eq!(client.status(&name).await.unwrap(), None);

    // one of three stopped: a majority still grants, renews past the TTL, releases
    masters.signal(&[2], "-STOP");
    let started = Instant::now();
    let lease = client.acquire(&name, ttl(1_500)).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert!(lease.token() > first);
    tokio::time::sleep(Duration::from_millis(2_000)).await; // renewals on the two running
    client
        .status(&name)
        .await
        .unwrap()
        .expect("still held after the TTL");
    lease.release().await.unwrap();

    // two of three stopped: no majority, not acquired within the timeout
    masters.signal(&[1], "-STOP");
    let started = Instant::now();
    let err = client
        .acquire(
            &name,
            LockOptions {
                acquire_timeout: Some(Duration::from_millis(500)),
                ..ttl(1_500)
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::AcquireTimeout { .. }), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_millis(500 + 700),
        "{:?}",
        started.elapsed()
    );
    masters.signal(&[1, 2], "-CONT");
    client.close(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn bad_master_lists_and_correctness_are_typed_errors() {
    // an even count, a duplicate: refused before anything connects
    for bad in [
        "redlock://127.0.0.1:1,127.0.0.1:2",
        "redlock://127.0.0.1:1,127.0.0.1:1,127.0.0.1:2",
        "redlock://",
    ] {
        let err = Client::connect(bad).await.err().expect(bad);
        assert!(
            matches!(err, Error::Usage(_) | Error::Config(_)),
            "{bad}: {err:?}"
        );
    }
    // no master reachable: fewer than a majority answer
    let err = Client::connect("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3")
        .await
        .err()
        .expect("unreachable");
    assert!(matches!(err, Error::Backend(_)), "{err:?}");
    let Some(masters) = Masters::start() else {
        return;
    };
    let client = Client::connect(&masters.url()).await.unwrap();
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
        "Redlock is an efficiency lock: {err:?}"
    );
    client.close(Duration::from_secs(2)).await;
}
