//! The ZooKeeper adapter against a real ZooKeeper (3.8), whose connect string
//! scripts/test exports as FENCEPOST_ZK_HOSTS (`127.0.0.1:PORT`, from
//! `scripts/services/zookeeper.sh start`); a test without it prints why and passes.
//! The nodes are checked with a second, independent zookeeper-client session. Every
//! acquire and wait is bounded.

use std::process::Stdio;
use std::time::Duration;

use fencepost::core::backends::zookeeper::{read_zk_fenced, ZkFenced, ZkOp};
use fencepost::core::backends::{ZkNaming, ZkRequest, ZooKeeperBackend};
use fencepost::core::{Reply, RequestBody};
use fencepost::{Backend, BackendKind, BackendUrl, Client, Error, LockOptions, LostReason};
use zookeeper_client as zk;

const LIMIT: Duration = Duration::from_secs(15);

mod common;
use common::unique;

fn hosts() -> Option<String> {
    let hosts = std::env::var("FENCEPOST_ZK_HOSTS")
        .ok()
        .filter(|h| !h.is_empty());
    if hosts.is_none() {
        println!(
            "skipped: FENCEPOST_ZK_HOSTS is not set (scripts/services/zookeeper.sh start, then \
             the contents of $FENCEPOST_STATE/zookeeper/hosts)"
        );
    }
    hosts
}

/// `ttl`, waiting at most [`LIMIT`].
fn ttl(ms: u64) -> LockOptions {
    LockOptions {
        acquire_timeout: Some(LIMIT),
        ..LockOptions::ttl(Duration::from_millis(ms))
    }
}

fn zk_backend(client: &Client) -> ZooKeeperBackend {
    match client.backend() {
        Backend::ZooKeeper(b) => b.clone(),
        other => panic!("not ZooKeeper: {other:?}"),
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

/// The children of lock `name` as an independent session sees them.
async fn children(checker: &zk::Client, b: &ZooKeeperBackend, name: &str) -> Vec<String> {
    match checker.list_children(&b.lock_path(name)).await {
        Ok(c) => c,
        Err(zk::Error::NoNode) => Vec::new(),
        Err(e) => panic!("{e}"),
    }
}

/// The full path of `lease`'s own node.
async fn own_node(checker: &zk::Client, b: &ZooKeeperBackend, lease: &fencepost::Lease) -> String {
    let prefix = b.node_prefix(&lease.owner_id());
    let kids = children(checker, b, lease.name()).await;
    let node = kids
        .iter()
        .find(|c| c.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no node with {prefix} in {kids:?}"));
    format!("{}/{node}", b.lock_path(lease.name()))
}

#[test]
fn zookeeper_urls_parse_with_their_defaults() {
    let u = BackendUrl::parse("zookeeper://h1:2181,h2:2181").unwrap();
    assert_eq!(
        u.kind,
        BackendKind::ZooKeeper {
            hosts: "h1:2181,h2:2181".into(),
            root: "/locks".into(),
            naming: ZkNaming::Kazoo,
            session_timeout: None,
        }
    );
    let u = BackendUrl::parse("zookeeper://h:2181/app/locks/?naming=curator&session_timeout=500ms")
        .unwrap();
    assert_eq!(
        u.kind,
        BackendKind::ZooKeeper {
            hosts: "h:2181".into(),
            root: "/app/locks".into(),
            naming: ZkNaming::Curator,
            session_timeout: Some(Duration::from_millis(500)),
        }
    );
    let BackendKind::ZooKeeper {
        session_timeout, ..
    } = BackendUrl::parse("zookeeper://h:2181?session_timeout=4")
        .unwrap()
        .kind
    else {
        panic!()
    };
    assert_eq!(session_timeout, Some(Duration::from_secs(4)));
    for bad in [
        "zookeeper:///locks",
        "zookeeper://h:2181?naming=zk",
        "zookeeper://h:2181?session_timeout=0s",
        "zookeeper://h:2181?session_timeout=soon",
        "zookeeper://h:2181?chroot=/x",
    ] {
        let err = BackendUrl::parse(bad).unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{bad}: {err:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_renew_release_with_the_node_czxid_as_token() {
    let Some(hosts) = hosts() else { return };
    let client = Client::connect(&format!("zookeeper://{hosts}/fencepost-rust"))
        .await
        .unwrap();
    let b = zk_backend(&client);
    assert_eq!(b.root, "/fencepost-rust");
    assert_eq!(b.session_timeout_ms, Some(10_000), "negotiated as asked");
    let checker = zk::Client::connect(&hosts).await.unwrap();
    let name = unique("cycle");

    let lease = acquire(&client, &name, ttl(3_000)).await;
    let node = own_node(&checker, &b, &lease).await;
    let (data, stat) = checker.get_data(&node).await.unwrap();
    assert_eq!(lease.token().get(), stat.czxid as u64, "token = czxid");
    assert_eq!(
        String::from_utf8(data).unwrap(),
        lease.owner_id().to_string()
    );
    assert_ne!(stat.ephemeral_owner, 0, "ephemeral");

    let holder = client.status(&name).await.unwrap().expect("held");
    assert_eq!(holder.token, Some(lease.token()));
    assert_eq!(holder.owner, Some(lease.owner_id().to_string()));
    assert_eq!(holder.waiters, Some(0));
    let listed = client.list(&name, 10).await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");

    lease.extend().await.unwrap();
    // renewals at ttl/3 keep it through two TTLs
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    lease.extend().await.unwrap();
    let first = lease.token();
    lease.release().await.unwrap();
    assert!(
        children(&checker, &b, &name).await.is_empty(),
        "node deleted"
    );
    assert_eq!(client.status(&name).await.unwrap(), None);

    let again = acquire(&client, &name, ttl(3_000)).await;
    assert!(again.token() > first, "{} after {first}", again.token());
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_is_the_node_data_and_status_and_list_read_it_back() {
    let Some(hosts) = hosts() else { return };
    let client = Client::connect(&format!("zookeeper://{hosts}/{}", unique("rustroot")))
        .await
        .unwrap();
    let b = zk_backend(&client);
    let checker = zk::Client::connect(&hosts).await.unwrap();
    let prefix = unique("meta");
    let meta: std::collections::BTreeMap<String, String> = [
        ("host".to_owned(), "web-3".to_owned()),
        ("pid".to_owned(), "7".to_owned()),
    ]
    .into();
    let mut leases = Vec::new();
    for i in ["a", "b", "c"] {
        let name = format!("{prefix}-{i}");
        leases.push(acquire(&client, &name, ttl(3_000).with_metadata(&meta)).await);
    }
    let node = own_node(&checker, &b, &leases[0]).await;
    let (data, _) = checker.get_data(&node).await.unwrap();
    assert_eq!(
        String::from_utf8(data).unwrap(),
        r#"{"host":"web-3","pid":"7"}"#
    );

    let holder = client
        .status(&format!("{prefix}-a"))
        .await
        .unwrap()
        .expect("held");
    assert_eq!(holder.owner, Some(leases[0].owner_id().to_string()));
    assert_eq!(holder.token, Some(leases[0].token()));
    assert_eq!(holder.metadata.as_ref(), Some(&meta));
    assert_eq!((holder.ttl_left, holder.waiters), (None, Some(0)));
    let listed = client.list(&prefix, 2).await.unwrap();
    let names: Vec<&str> = listed.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, [format!("{prefix}-a"), format!("{prefix}-b")]);
    assert!(listed.iter().all(|h| h.metadata.as_ref() == Some(&meta)));
    #[cfg(feature = "cli")]
    {
        // the command line shows the same holder, metadata included
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_fencepost"))
            .args([
                "status",
                "--backend",
                &format!("zookeeper://{hosts}{}", b.root),
            ])
            .args([format!("{prefix}-a"), "--json".to_owned()])
            .output()
            .await
            .unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["held"], true, "{doc}");
        assert_eq!(doc["token"], leases[0].token().get());
        assert_eq!(
            doc["metadata"],
            serde_json::json!({"host": "web-3", "pid": "7"})
        );
    }
    for lease in leases {
        lease.release().await.unwrap();
    }
    assert_eq!(client.list(&prefix, 10).await.unwrap(), vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_contenders_are_served_in_order_without_polling() {
    let Some(hosts) = hosts() else { return };
    let url = format!("zookeeper://{hosts}/fencepost-rust");
    let (a, b) = (
        Client::connect(&url).await.unwrap(),
        Client::connect(&url).await.unwrap(),
    );
    let name = unique("fifo");
    let first = acquire(&a, &name, ttl(3_000)).await;
    let second = {
        let (b, name) = (b.clone(), name.clone());
        tokio::spawn(async move { acquire(&b, &name, ttl(3_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!second.is_finished(), "granted while held");
    let holder = a.status(&name).await.unwrap().expect("held");
    assert_eq!(holder.token, Some(first.token()));
    assert_eq!(holder.waiters, Some(1), "{holder:?}");

    let released = std::time::Instant::now();
    let token = first.token();
    first.release().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(5), second)
        .await
        .expect("granted after the release")
        .unwrap();
    // the predecessor's deletion wakes the waiter: far sooner than a renew interval
    assert!(
        released.elapsed() < Duration::from_millis(900),
        "{:?}",
        released.elapsed()
    );
    assert!(second.token() > token);
    second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_above_the_negotiated_session_timeout_is_refused() {
    let Some(hosts) = hosts() else { return };
    let client = Client::connect(&format!(
        "zookeeper://{hosts}/fencepost-rust?session_timeout=2s"
    ))
    .await
    .unwrap();
    assert_eq!(zk_backend(&client).session_timeout_ms, Some(2_000));
    let err = client
        .acquire(&unique("ttl"), ttl(5_000))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Usage(_)) && err.to_string().contains("session timeout"),
        "{err:?}: {err}"
    );
    // within it: granted
    let lease = acquire(&client, &unique("ttl"), ttl(2_000)).await;
    lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_write_is_refused_once_the_lease_is_lost() {
    let Some(hosts) = hosts() else { return };
    let client = Client::connect(&format!("zookeeper://{hosts}/fencepost-rust"))
        .await
        .unwrap();
    let b = zk_backend(&client);
    let checker = zk::Client::connect(&hosts).await.unwrap();
    let name = unique("fence");
    let lease = acquire(&client, &name, ttl(1_500)).await;
    let node = own_node(&checker, &b, &lease).await;
    let target = format!("/fencepost-rust/{name}-data");
    let write = |data: &str| {
        let op = ZkOp::Create {
            path: target.clone(),
            data: data.to_owned(),
        };
        RequestBody::ZooKeeper(b.fenced_multi(&node, vec![op]))
    };
    let fenced = |reply: Reply| match reply {
        Reply::ZooKeeper(doc) => read_zk_fenced(&doc).unwrap(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        fenced(client.execute(write("one")).await.unwrap()),
        ZkFenced::Applied
    );
    assert_eq!(checker.get_data(&target).await.unwrap().0, b"one");
    checker.delete(&target, None).await.unwrap();

    // an operator deletes the holder's node: the next renewal finds it gone
    let lost = lease.lost();
    checker.delete(&node, None).await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(3), lost)
        .await
        .expect("lost within a TTL");
    assert_eq!(reason, LostReason::RenewRejected);
    assert_eq!(
        fenced(client.execute(write("two")).await.unwrap()),
        ZkFenced::Refused
    );
    assert_eq!(
        checker.check_stat(&target).await.unwrap(),
        None,
        "nothing written"
    );
    drop(lease);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_name_their_session_and_a_foreign_request_is_a_transport_error() {
    let Some(hosts) = hosts() else { return };
    let client = Client::connect(&format!("zookeeper://{hosts}/fencepost-rust"))
        .await
        .unwrap();
    let reply = client
        .execute(RequestBody::ZooKeeper(ZkRequest::Exists {
            path: "/fencepost-rust/no-such-node".into(),
        }))
        .await
        .unwrap();
    let Reply::ZooKeeper(doc) = reply else {
        panic!("{reply:?}")
    };
    assert!(
        doc.contains(r#""stat":null"#) && doc.contains(r#""session":"#),
        "{doc}"
    );
    let err = client
        .execute(RequestBody::Etcd(
            fencepost::core::backends::EtcdRequest::LeaseRevoke { id: 1 },
        ))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Backend(_)), "{err:?}");
}

#[cfg(feature = "cli")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_runs_a_command_under_a_zookeeper_lock() {
    let Some(hosts) = hosts() else { return };
    let url = format!("zookeeper://{hosts}/fencepost-rust");
    let name = unique("cli");
    let out = tokio::time::timeout(
        LIMIT,
        tokio::process::Command::new(env!("CARGO_BIN_EXE_fencepost"))
            .args([
                "run",
                "--backend",
                &url,
                "--name",
                &name,
                // no --ttl: the default fits the negotiated session timeout (below 30 s)
                "--",
            ])
            .args([
                "sh",
                "-c",
                r#"echo "$FENCEPOST_TOKEN $FENCEPOST_LOCK"; exit 7"#,
            ])
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
    assert!(parts[0].parse::<u64>().unwrap() > 0, "{stdout}");
    assert_eq!(parts[1], name);
    let client = Client::connect(&url).await.unwrap();
    assert_eq!(
        client.status(&name).await.unwrap(),
        None,
        "released at exit"
    );
}

/// A ZooKeeper of the test's own, to pause (SIGSTOP) without disturbing the others.
struct OwnZk {
    state: std::path::PathBuf,
    hosts: String,
}

impl OwnZk {
    fn script(command: &str, state: &std::path::Path) -> std::process::Output {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../scripts/services/zookeeper.sh");
        std::process::Command::new(script)
            .arg(command)
            .env("FENCEPOST_STATE", state)
            .output()
            .unwrap()
    }

    fn start() -> OwnZk {
        let state = std::env::temp_dir().join(unique("own-zk"));
        std::fs::create_dir_all(&state).unwrap();
        let out = Self::script("start", &state);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let hosts = std::fs::read_to_string(state.join("zookeeper/hosts"))
            .unwrap()
            .trim()
            .to_owned();
        OwnZk { state, hosts }
    }
}

impl Drop for OwnZk {
    fn drop(&mut self) {
        let _ = Self::script("stop", &self.state);
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_paused_past_the_session_loses_the_lease_and_a_new_session_acquires() {
    if hosts().is_none() {
        return; // no ZooKeeper installed here either
    }
    let zk = OwnZk::start();
    let client = Client::connect(&format!(
        "zookeeper://{}/fencepost-rust?session_timeout=2s",
        zk.hosts
    ))
    .await
    .unwrap();
    let session = || async {
        let exists = ZkRequest::Exists { path: "/".into() };
        match client
            .execute(RequestBody::ZooKeeper(exists))
            .await
            .unwrap()
        {
            Reply::ZooKeeper(doc) => serde_json::from_str::<serde_json::Value>(&doc).unwrap()
                ["session"]
                .as_i64()
                .unwrap(),
            other => panic!("{other:?}"),
        }
    };
    let before = session().await;
    let name = unique("pause");
    let lease = acquire(&client, &name, ttl(2_000)).await;
    let first = lease.token();
    let lost = lease.lost();
    assert!(OwnZk::script("pause", &zk.state).status.success());
    // renewals go unanswered: lost at the validity deadline, within one TTL (2 s)
    let reason = tokio::time::timeout(Duration::from_secs(4), lost).await;
    // past the session timeout (2 s × 7/5 on the client's side): the session is over
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(OwnZk::script("resume", &zk.state).status.success());
    assert_eq!(reason.expect("lost while paused"), LostReason::Expired);
    drop(lease);
    // the expired session's node goes with it; a new session gets the lock
    let again = acquire(&client, &name, ttl(2_000)).await;
    assert!(again.token() > first, "{} after {first}", again.token());
    assert_ne!(session().await, before, "a new session");
    assert_ne!(session().await, before, "a new session");
    again.release().await.unwrap();
}
