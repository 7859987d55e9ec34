//! The Kubernetes Lease adapter against the project's Lease API server
//! (`tests/kube/lease_server.py`, started by `scripts/services/kube-lease.sh start`; no
//! kube-apiserver can run here), whose URL and bearer token scripts/test exports as
//! FENCEPOST_KUBE_URL (`http://127.0.0.1:PORT`) and FENCEPOST_KUBE_TOKEN; a test without
//! them prints why and passes. The stored Leases are read back with plain GETs through
//! the client. Every acquire and command is bounded.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use fencepost::core::backends::KubernetesBackend;
use fencepost::core::{Reply, RequestBody};
use fencepost::{Backend, BackendKind, BackendUrl, Client, Error, LockOptions};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(15);
const BIN: &str = env!("CARGO_BIN_EXE_fencepost");

mod common;
use common::unique;

/// The server's URL and token, or `None` (printed) when not configured.
fn server() -> Option<(String, String)> {
    let url = std::env::var("FENCEPOST_KUBE_URL")
        .ok()
        .filter(|u| !u.is_empty());
    let token = std::env::var("FENCEPOST_KUBE_TOKEN")
        .ok()
        .filter(|t| !t.is_empty());
    match (url, token) {
        (Some(u), Some(t)) => Some((u, t)),
        _ => {
            println!(
                "skipped: FENCEPOST_KUBE_URL and FENCEPOST_KUBE_TOKEN are not set \
                 (scripts/services/kube-lease.sh start, then $FENCEPOST_STATE/kube-lease/url and token)"
            );
            None
        }
    }
}

/// `kubernetes+http://…?namespace=…&token=…` for the configured server.
fn backend_url(url: &str, token: &str, namespace: &str) -> String {
    format!("kubernetes+{url}?namespace={namespace}&token={token}")
}

/// A TTL of `secs` whole seconds (leaseDurationSeconds), waiting at most [`LIMIT`].
fn ttl(secs: u64) -> LockOptions {
    LockOptions {
        acquire_timeout: Some(LIMIT),
        ..LockOptions::ttl(Duration::from_secs(secs))
    }
}

async fn acquire(client: &Client, name: &str, options: LockOptions) -> fencepost::Lease {
    tokio::time::timeout(
        LIMIT + Duration::from_secs(2),
        client.acquire(name, options),
    )
    .await
    .expect("acquire bounded")
    .unwrap()
}

fn kube_backend(client: &Client) -> KubernetesBackend {
    match client.backend() {
        Backend::Kubernetes(b) => b.clone(),
        other => panic!("not Kubernetes: {other:?}"),
    }
}

/// The Lease `name` as the API server stores it (a `Status` document when missing).
async fn lease_doc(client: &Client, name: &str) -> Value {
    let reply = client
        .execute(RequestBody::Kubernetes(kube_backend(client).get(name)))
        .await
        .unwrap();
    let Reply::Kubernetes(text) = reply else {
        panic!("not a Kubernetes reply: {reply:?}")
    };
    serde_json::from_str(&text).unwrap()
}

/// Whether `t` is a `MicroTime`: `2026-12-01T16:02:29.123456Z`.
fn is_micro_time(t: &Value) -> bool {
    let Some(t) = t.as_str() else { return false };
    let b = t.as_bytes();
    b.len() == 27
        && b[4] == b'-'
        && b[10] == b'T'
        && b[19] == b'.'
        && b[20..26].iter().all(u8::is_ascii_digit)
        && b[26] == b'Z'
}

#[test]
fn kubernetes_urls_parse_with_their_defaults_and_refuse_what_does_not_apply() {
    let u =
        BackendUrl::parse("kubernetes+http://127.0.0.1:6443?namespace=locks&token=s3cret").unwrap();
    assert_eq!(
        u.kind,
        BackendKind::Kubernetes {
            server: "http://127.0.0.1:6443".into(),
            namespace: Some("locks".into()),
            token: Some("s3cret".into()),
            token_file: None,
        }
    );
    assert_eq!(u.ca_file, None);
    let u =
        BackendUrl::parse("kubernetes+http://kube.example:8080/?token_file=/var/run/t").unwrap();
    match u.kind {
        BackendKind::Kubernetes {
            server,
            namespace,
            token_file,
            ..
        } => {
            assert_eq!(server, "http://kube.example:8080");
            assert_eq!(namespace, None, "default");
            assert_eq!(token_file, Some("/var/run/t".into()));
        }
        other => panic!("{other:?}"),
    }
    let https = BackendUrl::parse("kubernetes+https://kube.example:443?token=x");
    if cfg!(feature = "tls") {
        assert!(https.is_ok(), "{https:?}");
    } else {
        let Err(Error::Config(message)) = https else {
            panic!("https without the tls feature: {https:?}")
        };
        assert!(message.contains("cargo feature `tls`"), "{message}");
    }
    for (bad, says) in [
        (
            "kubernetes+http://h:1?token=a&token_file=/t",
            "both token and token_file",
        ),
        (
            "kubernetes+http://h:1?namespace=Bad_NS&token=x",
            "DNS-1123 label",
        ),
        (
            "kubernetes+http://h:1?labels=x&token=hidden",
            "unknown parameter",
        ),
        (
            "kubernetes+http://h:1/api?token=x",
            "must name the API server",
        ),
        ("kubernetes+http://h:1?ca=/ca.pem", "without TLS"),
    ] {
        let Err(Error::Config(message)) = BackendUrl::parse(bad) else {
            panic!("{bad} parsed")
        };
        assert!(message.contains(says), "{bad}: {message}");
        assert!(!message.contains("hidden"), "token shown: {message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_renew_release_with_lease_transitions_as_token() {
    let Some((url, token)) = server() else { return };
    let client = Client::connect(&backend_url(&url, &token, "rust-kube"))
        .await
        .unwrap();
    assert_eq!(kube_backend(&client).namespace, "rust-kube");
    let name = unique("cycle");

    let lease = acquire(&client, &name, ttl(2)).await;
    let doc = lease_doc(&client, &name).await;
    assert_eq!(doc["kind"], "Lease", "{doc}");
    let spec = &doc["spec"];
    assert_eq!(spec["holderIdentity"], lease.owner_id().to_string());
    assert_eq!(
        spec["leaseTransitions"],
        lease.token().get(),
        "token = leaseTransitions"
    );
    assert_eq!(spec["leaseDurationSeconds"], 2);
    assert!(is_micro_time(&spec["acquireTime"]), "{spec}");
    assert!(is_micro_time(&spec["renewTime"]), "{spec}");
    let first_renew = spec["renewTime"].clone();
    let first_version = doc["metadata"]["resourceVersion"].clone();

    // renewals at ttl/3 (667 ms) keep it through two TTLs: 4 s is about 6 renew intervals
    tokio::time::sleep(Duration::from_secs(4)).await;
    lease.extend().await.unwrap();
    let doc = lease_doc(&client, &name).await;
    assert_eq!(doc["spec"]["holderIdentity"], lease.owner_id().to_string());
    assert_eq!(
        doc["spec"]["leaseTransitions"],
        lease.token().get(),
        "renewals keep the token"
    );
    assert_ne!(
        doc["spec"]["renewTime"], first_renew,
        "renewTime stamped again"
    );
    assert_ne!(doc["metadata"]["resourceVersion"], first_version);
    let first = lease.token();
    lease.release().await.unwrap();
    let doc = lease_doc(&client, &name).await;
    assert_eq!(
        doc["spec"]["holderIdentity"], "",
        "released as client-go does: {doc}"
    );
    assert_eq!(client.status(&name).await.unwrap(), None);

    let again = acquire(&client, &name, ttl(2)).await;
    assert_eq!(again.token().get(), first.get() + 1, "+1 on every grant");
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_list_read_holders_with_their_metadata() {
    let Some((url, token)) = server() else { return };
    let namespace = "rust-kube-list";
    let backend = backend_url(&url, &token, namespace);
    let client = Client::connect(&backend).await.unwrap();
    let prefix = unique("meta");
    let meta: BTreeMap<String, String> = [
        ("host".to_owned(), "web-3".to_owned()),
        ("pid".to_owned(), "7".to_owned()),
    ]
    .into();
    let mut leases = Vec::new();
    for i in ["a", "b", "c"] {
        let name = format!("{prefix}-{i}");
        leases.push(acquire(&client, &name, ttl(10).with_metadata(&meta)).await);
    }
    let holder = client
        .status(&format!("{prefix}-a"))
        .await
        .unwrap()
        .expect("held");
    assert_eq!(holder.owner, Some(leases[0].owner_id().to_string()));
    assert_eq!(holder.token, Some(leases[0].token()));
    assert_eq!(holder.metadata.as_ref(), Some(&meta));
    assert_eq!(
        holder.ttl_left,
        Some(Duration::from_secs(10)),
        "leaseDurationSeconds"
    );
    assert_eq!(holder.waiters, None, "candidates leave no trace");
    let listed = client.list(&prefix, 2).await.unwrap();
    let names: Vec<&str> = listed.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, [format!("{prefix}-a"), format!("{prefix}-b")]);
    assert!(listed.iter().all(|h| h.metadata.as_ref() == Some(&meta)));
    assert_eq!(client.list(&prefix, 10).await.unwrap().len(), 3);

    // the command line shows the same holder, metadata included
    let out = tokio::process::Command::new(BIN)
        .args([
            "status",
            "--backend",
            &backend,
            &format!("{prefix}-a"),
            "--json",
        ])
        .output()
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["held"], true, "{doc}");
    assert_eq!(doc["token"], leases[0].token().get());
    assert_eq!(
        doc["metadata"],
        serde_json::json!({"host": "web-3", "pid": "7"})
    );
    let out = tokio::process::Command::new(BIN)
        .args(["list", "--backend", &backend, &prefix])
        .output()
        .await
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.starts_with("NAME"), "{table}");
    assert!(table.contains(&format!("{prefix}-c")), "{table}");

    for lease in leases {
        lease.release().await.unwrap();
    }
    assert_eq!(client.list(&prefix, 10).await.unwrap(), vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_file_authenticates_and_a_wrong_token_is_refused() {
    let Some((url, token)) = server() else { return };
    let dir = std::env::temp_dir().join(unique("kubetoken"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    std::fs::write(&file, format!("{token}\n")).unwrap();
    let client = Client::connect(&format!(
        "kubernetes+{url}?namespace=rust-kube&token_file={}",
        file.display()
    ))
    .await
    .unwrap();
    let name = unique("tokenfile");
    let lease = acquire(&client, &name, ttl(2)).await;
    lease.release().await.unwrap();

    // a missing file is refused when connecting, naming the file
    let missing = dir.join("nope");
    let Err(Error::Config(message)) = Client::connect(&format!(
        "kubernetes+{url}?token_file={}",
        missing.display()
    ))
    .await
    else {
        panic!("a missing token file was accepted")
    };
    assert!(message.contains("nope"), "{message}");

    // the API server's 401 Status reaches the machine as a reply it cannot use
    let client = Client::connect(&backend_url(&url, "wrong", "rust-kube"))
        .await
        .unwrap();
    let Err(error) = client.status(&name).await else {
        panic!("a wrong token was accepted")
    };
    assert!(matches!(error, Error::Protocol(_)), "{error:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_runs_a_command_under_a_kubernetes_lock() {
    let Some((url, token)) = server() else { return };
    // the token from $FENCEPOST_KUBE_TOKEN, as a deployment would give it
    let backend = format!("kubernetes+{url}?namespace=rust-kube");
    let name = unique("cli");
    let out = tokio::time::timeout(
        LIMIT,
        tokio::process::Command::new(BIN)
            .args([
                "run",
                "--backend",
                &backend,
                "--name",
                &name,
                "--ttl",
                "3s",
                "--",
            ])
            .args([
                "sh",
                "-c",
                r#"echo "$FENCEPOST_TOKEN $FENCEPOST_LOCK"; exit 7"#,
            ])
            .env("FENCEPOST_KUBE_TOKEN", &token)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("fencepost finished in time")
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let parts: Vec<&str> = stdout.split_whitespace().collect();
    assert_eq!(parts.len(), 2, "{stdout}");
    assert_eq!(parts[1], name);
    let client = Client::connect(&backend_url(&url, &token, "rust-kube"))
        .await
        .unwrap();
    let doc = lease_doc(&client, &name).await;
    assert_eq!(
        doc["spec"]["leaseTransitions"].as_u64(),
        Some(parts[0].parse::<u64>().unwrap()),
        "the command saw the Lease's token: {doc}"
    );
    assert_eq!(
        client.status(&name).await.unwrap(),
        None,
        "released at exit"
    );
}

/// A Lease API server of the test's own, whose test controls (`/_control/…`: injected
/// 409s and 5xx) disturb no other test.
struct OwnKube {
    state: std::path::PathBuf,
    url: String,
    token: String,
}

impl OwnKube {
    fn script(command: &str, state: &std::path::Path) -> std::process::Output {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../scripts/services/kube-lease.sh");
        std::process::Command::new(script)
            .arg(command)
            .env("FENCEPOST_STATE", state)
            .output()
            .unwrap()
    }

    fn start() -> OwnKube {
        let state = std::env::temp_dir().join(unique("own-kube"));
        std::fs::create_dir_all(&state).unwrap();
        let out = Self::script("start", &state);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let read = |f: &str| {
            std::fs::read_to_string(state.join("kube-lease").join(f))
                .unwrap()
                .trim()
                .to_owned()
        };
        let (url, token) = (read("url"), read("token"));
        OwnKube { state, url, token }
    }

    /// `POST /_control/{what}` with `body`.
    async fn control(&self, what: &str, body: Value) {
        let response = reqwest::Client::new()
            .post(format!("{}/_control/{what}", self.url))
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_success(),
            "{what}: {}",
            response.status()
        );
    }
}

impl Drop for OwnKube {
    fn drop(&mut self) {
        let _ = Self::script("stop", &self.state);
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_statuses_and_conflicts_reach_the_machine_which_retries_them() {
    // the project's server, started here (it needs python3); skipped as the others are
    if server().is_none() {
        return;
    }
    let own = OwnKube::start();
    let client = Client::connect(&backend_url(&own.url, &own.token, "rust-kube"))
        .await
        .unwrap();
    let name = unique("faults");

    // three 503 Status replies, then two 409s on the writes: transient, retried with backoff
    own.control("errors", serde_json::json!({"count": 3, "code": 503}))
        .await;
    own.control("conflicts", serde_json::json!({"count": 2}))
        .await;
    let lease = acquire(&client, &name, ttl(3)).await;
    assert_eq!(lease.token().get(), 1, "the first grant of a new Lease");

    // a renewal answered 409: read again, still this owner's with this token, PUT again
    own.control("conflicts", serde_json::json!({"count": 1}))
        .await;
    lease.extend().await.unwrap();
    let doc = lease_doc(&client, &name).await;
    assert_eq!(doc["spec"]["holderIdentity"], lease.owner_id().to_string());
    assert_eq!(doc["spec"]["leaseTransitions"], 1);
    lease.release().await.unwrap();
    assert_eq!(client.status(&name).await.unwrap(), None);
}
