//! The `fencepost` binary end to end, against the real servers scripts/test starts
//! (FENCEPOST_REDIS_URL, FENCEPOST_PG_URL, FENCEPOST_ETCD_URL — a gateway URL); a test
//! whose server is not configured prints why and passes. Each test is bounded (a
//! timeout around every wait, well under 20 s).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use fencepost::core::backends::etcd::EtcdRequest;
use fencepost::core::backends::postgres::lock_state_statement;
use fencepost::core::RequestBody;
use fencepost::{Backend, Client, LockOptions};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fencepost");

fn unique(label: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "cli-{label}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A fresh directory for a test's files.
fn scratch(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique(label));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The configured servers as backend URLs, with the TTL their tests use (etcd leases
/// are whole seconds); prints the ones skipped.
fn servers() -> Vec<(&'static str, String, &'static str)> {
    let mut out = Vec::new();
    for (label, var, scheme, ttl) in [
        ("redis", "FENCEPOST_REDIS_URL", "", "1s"),
        ("postgres", "FENCEPOST_PG_URL", "", "1s"),
        ("etcd", "FENCEPOST_ETCD_URL", "etcd+", "2s"),
    ] {
        match std::env::var(var) {
            Ok(url) if !url.is_empty() => out.push((label, format!("{scheme}{url}"), ttl)),
            _ => println!("skipped {label}: {var} is not set (scripts/services/{label}.sh start)"),
        }
    }
    out
}

/// Redis only, for the tests of exit codes that need one real server.
fn redis() -> Option<String> {
    let url = std::env::var("FENCEPOST_REDIS_URL")
        .ok()
        .filter(|u| !u.is_empty());
    if url.is_none() {
        println!("skipped: FENCEPOST_REDIS_URL is not set (scripts/services/redis.sh start)");
    }
    url
}

fn run(backend: &str, name: &str, extra: &[&str], command: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(["run", "--backend", backend, "--name", name])
        .args(extra)
        .arg("--")
        .args(command)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    c
}

/// Runs to completion within `limit`: (exit code, stdout, stderr).
async fn finish(mut c: Command, limit: Duration) -> (i32, String, String) {
    let out = tokio::time::timeout(limit, c.output())
        .await
        .expect("fencepost finished in time")
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Waits until `path` holds a line (a pid the command wrote).
async fn read_pid(path: &std::path::Path) -> Pid {
    let started = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            if let Ok(pid) = s.trim().parse::<i32>() {
                return Pid::from_raw(pid);
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the command started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Frees `name` behind its holder's back, as an operator would (see tests/api.rs).
async fn evict(client: &Client, name: &str) {
    let started = Instant::now();
    while client.status(name).await.unwrap().is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{name} acquired"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let body = match client.backend() {
        Backend::Redis(b) => RequestBody::Redis(b.force_release(name)),
        Backend::Postgres(b) => RequestBody::Sql(lock_state_statement(b, name, true)),
        Backend::Etcd(_) => {
            let holder = client.status(name).await.unwrap().unwrap();
            let hex = holder.owner.unwrap();
            let id = i64::from_str_radix(hex.trim_start_matches("lease:"), 16).unwrap();
            RequestBody::Etcd(EtcdRequest::LeaseRevoke { id })
        }
        other => panic!("{other:?}"),
    };
    client.execute(body).await.unwrap();
}

/// Whether any process of group `pgid` still runs (zombies waiting for init to reap
/// them do not count), from /proc.
fn group_alive(pgid: Pid) -> bool {
    if killpg(pgid, None).is_err() {
        return false;
    }
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            return false;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            return false;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        f.len() > 2 && f[0] != "Z" && f[2].parse::<i32>() == Ok(pgid.as_raw())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_sees_its_token_lock_and_owner_and_its_exit_code_passes_through() {
    for (label, url, ttl) in servers() {
        let name = unique("env");
        let script = r#"echo "$FENCEPOST_TOKEN $FENCEPOST_LOCK $FENCEPOST_OWNER"; exit 7"#;
        let (code, out, err) = finish(
            run(&url, &name, &["--ttl", ttl], &["sh", "-c", script]),
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(code, 7, "{label}: {err}");
        let parts: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(parts.len(), 3, "{label}: {out:?}");
        assert!(parts[0].parse::<u64>().unwrap() > 0, "{label}: token {out}");
        assert_eq!(parts[1], name);
        assert_eq!(parts[2].len(), 32, "{label}: owner id {out}");
        let client = Client::connect(&url).await.unwrap();
        assert_eq!(
            client.status(&name).await.unwrap(),
            None,
            "{label}: released at exit"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_on_one_name_never_overlap() {
    for (label, url, ttl) in servers() {
        let (name, dir) = (unique("overlap"), scratch("overlap"));
        let log = dir.join("log");
        let script = format!(
            r#"echo "start $FENCEPOST_TOKEN" >> {log}; sleep 0.3; echo "end $FENCEPOST_TOKEN" >> {log}"#,
            log = log.display()
        );
        let runs: Vec<_> = (0..3)
            .map(|_| {
                let mut c = run(
                    &url,
                    &name,
                    &["--ttl", ttl, "--wait", "15s"],
                    &["sh", "-c", &script],
                );
                tokio::spawn(async move { finish(c_take(&mut c), Duration::from_secs(18)).await })
            })
            .collect();
        for r in runs {
            let (code, _, err) = r.await.unwrap();
            assert_eq!(code, 0, "{label}: {err}");
        }
        let text = std::fs::read_to_string(&log).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 6, "{label}: {text}");
        let mut last = 0u64;
        for pair in lines.chunks(2) {
            let start = pair[0].strip_prefix("start ").expect("a start line first");
            let end = pair[1].strip_prefix("end ").expect("then its end line");
            assert_eq!(
                start, end,
                "{label}: another run started inside {start}'s: {text}"
            );
            let token: u64 = start.parse().unwrap();
            assert!(token > last, "{label}: tokens in order: {text}");
            last = token;
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}

/// Moves a configured command out (spawned tasks need it by value).
fn c_take(c: &mut Command) -> Command {
    std::mem::replace(c, Command::new(BIN))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_stops_the_whole_process_group_within_the_grace() {
    for (label, url, ttl) in servers() {
        let (name, dir) = (unique("loss"), scratch("loss"));
        let pidfile = dir.join("pid");
        // the command leaves a grandchild in its group: both must go
        let script = format!("sleep 30 & echo $$ > {}; wait", pidfile.display());
        let child = run(
            &url,
            &name,
            &["--ttl", ttl, "--grace", "1s"],
            &["sh", "-c", &script],
        )
        .spawn()
        .unwrap();
        let pgid = read_pid(&pidfile).await;
        let client = Client::connect(&url).await.unwrap();
        evict(&client, &name).await;
        let evicted = Instant::now();
        let out = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
            .await
            .expect("fencepost exited")
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(123), "{label}: {stderr}");
        assert!(stderr.contains("lost"), "{label}: {stderr}");
        assert!(!group_alive(pgid), "{label}: the group is gone");
        // found at the next renewal (ttl / 3), then SIGTERM ends `sh` and `sleep` at once
        assert!(
            evicted.elapsed() < Duration::from_secs(4),
            "{label}: {:?}",
            evicted.elapsed()
        );
        std::fs::remove_dir_all(dir).unwrap();
        println!(
            "{label}: lost lease, group stopped {:?} after the eviction",
            evicted.elapsed()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_ignores_sigterm_is_killed_after_the_grace() {
    for (label, url, ttl) in servers() {
        let (name, dir) = (unique("stubborn"), scratch("stubborn"));
        let pidfile = dir.join("pid");
        let script = format!(
            r#"trap "" TERM; echo $$ > {}; while :; do sleep 0.1; done"#,
            pidfile.display()
        );
        let child = run(
            &url,
            &name,
            &["--ttl", ttl, "--grace", "1s"],
            &["sh", "-c", &script],
        )
        .spawn()
        .unwrap();
        let pgid = read_pid(&pidfile).await;
        let client = Client::connect(&url).await.unwrap();
        evict(&client, &name).await;
        let evicted = Instant::now();
        let out = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
            .await
            .expect("fencepost exited")
            .unwrap();
        let took = evicted.elapsed();
        assert_eq!(
            out.status.code(),
            Some(123),
            "{label}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!group_alive(pgid), "{label}: SIGKILL ended the group");
        assert!(
            took >= Duration::from_secs(1),
            "{label}: the grace was given: {took:?}"
        );
        assert!(took < Duration::from_secs(5), "{label}: {took:?}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_acquired_in_time_is_124() {
    let Some(url) = redis() else { return };
    let name = unique("busy");
    let client = Client::connect(&url).await.unwrap();
    let held = client
        .acquire(&name, LockOptions::ttl(Duration::from_secs(10)))
        .await
        .unwrap();
    for wait in ["0", "300ms"] {
        let started = Instant::now();
        let (code, out, err) = finish(
            run(&url, &name, &["--wait", wait], &["echo", "ran"]),
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(code, 124, "--wait {wait}: {err}");
        assert_eq!(out, "", "the command did not run");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    held.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_backend_and_command_errors_have_their_codes() {
    let unreachable = "redis://127.0.0.1:1";
    let cases: Vec<(Vec<&str>, i32)> = vec![
        (vec!["run", "--backend", "memory://", "--", "true"], 122), // no --name
        (
            vec![
                "run",
                "--backend",
                "memory://",
                "--name",
                "x",
                "--ttl",
                "soon",
                "--",
                "true",
            ],
            122,
        ),
        (
            vec!["run", "--backend", "mysql://h", "--name", "x", "--", "true"],
            122,
        ),
        (
            vec!["run", "--backend", "memory://", "--name", "", "--", "true"],
            122,
        ),
        (
            vec![
                "run",
                "--backend",
                "memory://",
                "--name",
                "x",
                "--purpose",
                "correctness",
                "--",
                "true",
            ],
            122,
        ),
        (
            vec!["run", "--backend", unreachable, "--name", "x", "--", "true"],
            125,
        ),
        (
            vec![
                "run",
                "--backend",
                "memory://",
                "--name",
                "x",
                "--",
                "/nonexistent/cmd",
            ],
            127,
        ),
        (
            vec!["run", "--backend", "memory://", "--name", "x", "--", "/"],
            126,
        ),
        (
            vec![
                "run",
                "--backend",
                "memory://",
                "--name",
                "x",
                "--",
                "sh",
                "-c",
                "kill -9 $$",
            ],
            137,
        ),
        (
            vec!["run", "--backend", "memory://", "--name", "x", "--", "true"],
            0,
        ),
        (vec!["--help"], 0),
    ];
    for (args, want) in cases {
        let mut c = Command::new(BIN);
        c.args(&args).env_remove("FENCEPOST_BACKEND_URL");
        let out = tokio::time::timeout(Duration::from_secs(10), c.output())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(want),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_to_fencepost_goes_to_the_command_and_the_lock_is_released() {
    let Some(url) = redis() else { return };
    let (name, dir) = (unique("forward"), scratch("forward"));
    let pidfile = dir.join("pid");
    let script = format!(
        r#"trap "echo got-term; exit 3" TERM; echo $$ > {}; while :; do sleep 0.1; done"#,
        pidfile.display()
    );
    let child = run(&url, &name, &[], &["sh", "-c", &script])
        .spawn()
        .unwrap();
    read_pid(&pidfile).await;
    let fencepost = Pid::from_raw(child.id().unwrap() as i32);
    kill(fencepost, Signal::SIGTERM).unwrap();
    let out = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "got-term");
    let client = Client::connect(&url).await.unwrap();
    assert_eq!(client.status(&name).await.unwrap(), None, "released");
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_list_show_the_holder() {
    for (label, url, _) in servers() {
        let name = unique("status");
        let client = Client::connect(&url).await.unwrap();
        let lease = client
            .acquire(&name, LockOptions::ttl(Duration::from_secs(10)))
            .await
            .unwrap();
        let out = Command::new(BIN)
            .args(["status", "--backend", &url, &name, "--json"])
            .output()
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{label}");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["held"], true, "{label}: {doc}");
        assert_eq!(doc["token"], lease.token().get(), "{label}: {doc}");
        assert!(
            doc["ttl_left_ms"].as_u64().unwrap() <= 10_000,
            "{label}: {doc}"
        );
        let out = Command::new(BIN)
            .args(["list", "--backend", &url, &name])
            .output()
            .await
            .unwrap();
        let table = String::from_utf8_lossy(&out.stdout);
        assert!(table.starts_with("NAME"), "{label}: {table}");
        assert!(
            table.contains(&name) && table.contains(&lease.token().to_string()),
            "{label}: {table}"
        );
        lease.release().await.unwrap();
        let out = Command::new(BIN)
            .args(["status", "--backend", &url, &name])
            .output()
            .await
            .unwrap();
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("not held"),
            "{label}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_stopped_past_the_ttl_ends_the_command() {
    // a Redis of this test's own (scripts/services/redis.sh), so stopping it pauses no
    // other test
    if redis().is_none() {
        return;
    }
    let server = OwnRedis::start();
    let (state, url) = (server.state.clone(), server.url.clone());
    let (name, pidfile) = (unique("stopped"), state.join("cmd.pid"));
    let command = format!("echo $$ > {}; sleep 30", pidfile.display());
    let child = run(
        &url,
        &name,
        &["--ttl", "1s", "--grace", "1s"],
        &["sh", "-c", &command],
    )
    .spawn()
    .unwrap();
    let pgid = read_pid(&pidfile).await;
    kill(server.pid, Signal::SIGSTOP).unwrap();
    let stopped = Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output()).await;
    kill(server.pid, Signal::SIGCONT).unwrap();
    let out = out.expect("fencepost exited").unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(123), "{stderr}");
    assert!(
        stderr.contains("Expired"),
        "no renewal confirmed before the validity ended: {stderr}"
    );
    assert!(!group_alive(pgid), "the group is gone");
    // lost by ~1 s (the validity), the group gone at once, the release given up at its deadline
    assert!(
        stopped.elapsed() < Duration::from_secs(5),
        "{:?}",
        stopped.elapsed()
    );
    println!(
        "server stopped: fencepost exited {:?} later",
        stopped.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_while_waiting_gives_up_without_running_the_command() {
    let Some(url) = redis() else { return };
    let name = unique("waiting");
    let client = Client::connect(&url).await.unwrap();
    let held = client
        .acquire(&name, LockOptions::ttl(Duration::from_secs(10)))
        .await
        .unwrap();
    let child = run(&url, &name, &["--wait", "forever"], &["echo", "ran"])
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    kill(Pid::from_raw(child.id().unwrap() as i32), Signal::SIGINT).unwrap();
    let out = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    let holder = client.status(&name).await.unwrap().unwrap();
    assert_eq!(
        holder.owner,
        Some(held.owner_id().to_string()),
        "the first holder keeps it"
    );
    held.release().await.unwrap();
}

#[tokio::test]
async fn a_wait_on_a_server_that_cannot_be_reached_is_reported_on_stderr() {
    // port 1 on loopback: nothing listens, every attempt is refused at once
    let child = run(
        "etcd+http://127.0.0.1:1",
        "unreachable",
        &[],
        &["echo", "ran"],
    )
    .spawn()
    .unwrap();
    tokio::time::sleep(Duration::from_millis(6_500)).await; // the first report is at 5 s
    kill(Pid::from_raw(child.id().unwrap() as i32), Signal::SIGINT).unwrap();
    let out = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        stderr
            .contains("fencepost: warning: lock \"unreachable\": the server has been unreachable"),
        "{stderr}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
}

/// A Redis of one test's own, started by scripts/services/redis.sh in a scratch state
/// directory; stopped (and resumed first, if stopped) when dropped, even by a panic.
struct OwnRedis {
    state: PathBuf,
    url: String,
    pid: Pid,
}

impl OwnRedis {
    fn script() -> PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/services/redis.sh")
    }

    fn start() -> OwnRedis {
        let state = scratch("own-redis");
        let out = std::process::Command::new(Self::script())
            .arg("start")
            .env("FENCEPOST_STATE", &state)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let read = |f: &str| {
            std::fs::read_to_string(state.join("redis").join(f))
                .unwrap()
                .trim()
                .to_owned()
        };
        let (url, pid) = (
            read("url"),
            Pid::from_raw(read("redis.pid").parse().unwrap()),
        );
        OwnRedis { state, url, pid }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = kill(self.pid, Signal::SIGCONT);
        let _ = std::process::Command::new(Self::script())
            .arg("stop")
            .env("FENCEPOST_STATE", &self.state)
            .output();
        let _ = std::fs::remove_dir_all(&self.state);
    }
}
