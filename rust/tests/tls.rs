//! The crate and the `fencepost` command over TLS (cargo feature `tls`), against the
//! TLS-only servers `TLS=1 scripts/services/{redis,postgres,etcd}.sh start` runs with
//! the throwaway CA of scripts/services/tls-certs.sh: FENCEPOST_REDIS_TLS_URL
//! (`rediss://…`), FENCEPOST_PG_TLS_URL (`postgresql://…?sslmode=verify-full`),
//! FENCEPOST_ETCD_TLS_URL (a gateway URL, `https://127.0.0.1:PORT`) and FENCEPOST_TLS_CA
//! (the CA's `ca.pem`; `other-ca.pem` beside it signed nothing). A test whose server is
//! not configured prints why and passes.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use fencepost::core::backends::etcd::{read_etcd_fenced_txn, EtcdFenced, EtcdOp};
use fencepost::core::fence::{read_redis_fenced_set, redis_fenced_set};
use fencepost::core::{PgConnection, Reply, RequestBody, SqlReply, SqlStatement, SqlValue};
use fencepost::{Backend, Client, Error, LockOptions};

mod common;
use common::{evict, unique};

fn ttl(ms: u64) -> LockOptions {
    LockOptions::ttl(Duration::from_millis(ms))
}

/// The test CA (`ca.pem`) and the CA that signed nothing (`other-ca.pem`).
fn cas() -> Option<(PathBuf, PathBuf)> {
    match std::env::var("FENCEPOST_TLS_CA") {
        Ok(ca) if !ca.is_empty() => {
            let ca = PathBuf::from(ca);
            let other = ca.with_file_name("other-ca.pem");
            Some((ca, other))
        }
        _ => {
            println!("skipped: FENCEPOST_TLS_CA is not set (TLS=1 scripts/services/redis.sh start writes it to $FENCEPOST_STATE/redis-tls/ca)");
            None
        }
    }
}

/// The configured TLS servers as backend URLs trusting the CA file `ca` (by the URL's
/// own parameter: `ca=`, PostgreSQL's `sslrootcert=`); prints the ones skipped.
fn servers(ca: &std::path::Path) -> Vec<(&'static str, String)> {
    let ca = ca.display();
    let mut out = Vec::new();
    for (label, var) in [
        ("redis", "FENCEPOST_REDIS_TLS_URL"),
        ("postgres", "FENCEPOST_PG_TLS_URL"),
        ("etcd", "FENCEPOST_ETCD_TLS_URL"),
    ] {
        match std::env::var(var) {
            Ok(url) if !url.is_empty() => out.push((
                label,
                match label {
                    "etcd" => format!("etcd+{url}?ca={ca}"),
                    "postgres" => format!("{url}&sslrootcert={ca}"),
                    _ => format!("{url}?ca={ca}"),
                },
            )),
            _ => println!(
                "skipped {label} over TLS: {var} is not set (TLS=1 scripts/services/{label}.sh start)"
            ),
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_renew_release_and_a_fenced_cycle_over_tls() {
    let Some((ca, _)) = cas() else { return };
    for (label, url) in servers(&ca) {
        let client = Client::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("{label} over TLS: {e}"));
        let name = unique("tls");
        // etcd leases are whole seconds: 2 s there, 600 ms elsewhere
        let ms = if label == "etcd" { 2_000 } else { 600 };
        let old = client.acquire(&name, ttl(ms)).await.unwrap();
        let holder = client.status(&name).await.unwrap().expect("held");
        assert_eq!(holder.token, Some(old.token()), "{label}");
        // renewed every ttl / 3 over the TLS connection: still held after 2.5 TTLs
        tokio::time::sleep(Duration::from_millis(ms * 5 / 2)).await;
        assert!(old.extend().await.is_ok(), "{label}: still held");
        assert!(client.status(&name).await.unwrap().is_some(), "{label}");
        let (old_token, old_owner) = (old.token(), old.owner_id());
        old.release().await.unwrap();
        assert_eq!(client.status(&name).await.unwrap(), None, "{label}");
        let new = client.acquire(&name, ttl(ms)).await.unwrap();
        assert!(new.token() > old_token, "{label}");
        fenced_write_refuses(&client, &name, &new, old_token, old_owner).await;
        let new_token = new.token();
        new.release().await.unwrap();
        // an operator's eviction is seen as a loss over TLS too
        let lease = client.acquire(&name, ttl(ms)).await.unwrap();
        evict(&client, &name).await;
        let reason = tokio::time::timeout(Duration::from_millis(ms * 2), lease.lost())
            .await
            .unwrap_or_else(|_| panic!("{label}: lost in time"));
        println!("{label} over TLS: tokens {old_token} < {new_token}, stale write refused, eviction lost as {reason:?}");
        if label == "postgres" {
            // session mode: each lock's dedicated connection over TLS too
            let session = Client::connect(&format!("{url}&mode=session"))
                .await
                .unwrap();
            let lease = session.acquire(&name, ttl(ms)).await.unwrap();
            assert!(lease.token() > new_token, "postgres session over TLS");
            lease.release().await.unwrap();
        }
    }
}

/// A write fenced with `new`'s token is applied and one with `old_token` refused.
async fn fenced_write_refuses(
    client: &Client,
    name: &str,
    new: &fencepost::Lease,
    old_token: fencepost::core::FencingToken,
    old_owner: fencepost::core::OwnerId,
) {
    match client.backend().clone() {
        Backend::Redis(_) => {
            let (data, fence) = (format!("{{{name}}}:data"), format!("{{{name}}}:fence"));
            for (token, ok) in [(new.token(), true), (old_token, false)] {
                let body = RequestBody::Redis(redis_fenced_set(&data, &fence, token, "v"));
                let Reply::Redis(v) = client.execute(body).await.unwrap() else {
                    panic!("not a Redis reply")
                };
                let written = read_redis_fenced_set(&data, token, &v).unwrap();
                assert_eq!(written.is_ok(), ok, "redis: token {token}: {written:?}");
            }
        }
        Backend::Postgres(_) => {
            let table = format!("fenced_{}", name.replace('-', "_"));
            let sql = |s: String, params: Vec<SqlValue>| {
                RequestBody::Sql(SqlStatement {
                    sql: s,
                    params,
                    connection: PgConnection::Any,
                })
            };
            let create = format!("CREATE TABLE {table} (id int PRIMARY KEY, v text, last_token bigint NOT NULL DEFAULT 0)");
            client.execute(sql(create, vec![])).await.unwrap();
            let insert = format!("INSERT INTO {table} (id) VALUES (1)");
            client.execute(sql(insert, vec![])).await.unwrap();
            let update = fencepost::core::fence::sql_fenced_update(
                &table,
                "id",
                "last_token",
                &["v"],
                fencepost::core::fence::ParamStyle::Dollar,
            )
            .unwrap();
            for (token, rows) in [(new.token(), 1), (old_token, 0)] {
                let params = vec![
                    SqlValue::Int(1),
                    SqlValue::Int(token.get() as i64),
                    SqlValue::Text("v".into()),
                ];
                let reply = client
                    .execute(sql(format!("{update} RETURNING id"), params))
                    .await
                    .unwrap();
                let Reply::Sql(SqlReply::Rows { rows: got }) = reply else {
                    panic!("{reply:?}")
                };
                assert_eq!(got.len(), rows, "postgres: token {token}");
            }
            // the statements ran over TLS: the server's own view of this connection
            let ssl = "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()";
            let reply = client.execute(sql(ssl.into(), vec![])).await.unwrap();
            assert!(
                matches!(&reply, Reply::Sql(SqlReply::Rows { rows }) if rows == &vec![vec![SqlValue::Bool(true)]]),
                "postgres: pg_stat_ssl says {reply:?}"
            );
            client
                .execute(sql(format!("DROP TABLE {table}"), vec![]))
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
                name,
                &b.holder_key(name, &new.owner_id()),
                new.token(),
                put("new"),
            );
            let stale = b.fenced_txn(name, &b.holder_key(name, &old_owner), old_token, put("old"));
            for (req, ok) in [(fresh, true), (stale, false)] {
                let Reply::Etcd(text) = client.execute(RequestBody::Etcd(req)).await.unwrap()
                else {
                    panic!("not an etcd reply")
                };
                let read = read_etcd_fenced_txn(&text).unwrap();
                assert_eq!(
                    matches!(read, EtcdFenced::Applied { .. }),
                    ok,
                    "etcd: {read:?}"
                );
            }
        }
        other => panic!("{other:?}"),
    }
}

/// The certificate check's failure as the caller sees it: Redis and PostgreSQL connect
/// at once and refuse with `Error::Backend`; etcd's gateway client connects on its
/// first request, so the acquire gives up with the failure as its last error.
async fn refusal(label: &str, url: &str) -> String {
    match Client::connect(url).await {
        Err(Error::Backend(m)) => m,
        Err(other) => panic!("{label}: {other:?}"),
        Ok(client) => {
            assert_eq!(
                label, "etcd",
                "{label} connected with a CA that did not sign it"
            );
            let options = LockOptions {
                acquire_timeout: Some(Duration::from_millis(300)),
                ..ttl(2_000)
            };
            match client.acquire(&unique("wrong-ca"), options).await {
                Err(Error::AcquireTimeout {
                    last_error: Some(m),
                    ..
                }) => m,
                other => panic!("{label}: {other:?}"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_from_another_ca_is_refused_with_a_clear_error() {
    let Some((ca, other)) = cas() else { return };
    for (label, url) in servers(&ca) {
        let ca = ca.display().to_string();
        // the CA that signed nothing, then no CA at all (the webpki roots)
        let wrong = url.replace(&ca, &other.display().to_string());
        let none = url
            .replace(&format!("?ca={ca}"), "")
            .replace(&format!("&sslrootcert={ca}"), "");
        for url in [wrong, none] {
            let message = refusal(label, &url).await;
            assert!(
                message.contains("UnknownIssuer") && message.contains("FENCEPOST_CA_FILE"),
                "{label}: {message}"
            );
            println!("{label}: {message}");
        }
    }
    // sslmode=prefer connects without TLS, which the TLS-only server refuses
    if let Ok(url) = std::env::var("FENCEPOST_PG_TLS_URL") {
        let plain = url.replace("sslmode=verify-full", "sslmode=prefer");
        let err = Client::connect(&plain).await.err().expect("refused");
        assert!(
            matches!(&err, Error::Backend(m) if m.contains("no encryption")),
            "{err:?}"
        );
    }
    // a CA file that is not there, or not PEM: the caller's mistake, before any connection
    let url = format!(
        "rediss://127.0.0.1:1/0?ca={}",
        ca.with_file_name("missing.pem").display()
    );
    let err = Client::connect(&url).await.err().unwrap();
    assert!(
        matches!(&err, Error::Config(m) if m.contains("missing.pem")),
        "{err:?}"
    );
    let not_pem = ca.with_file_name("server.key");
    let url = format!("etcd+https://127.0.0.1:1?ca={}", not_pem.display());
    let err = Client::connect(&url).await.err().unwrap();
    assert!(
        matches!(&err, Error::Config(m) if m.contains("server.key")),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencepost_run_over_rediss_sees_its_token() {
    let Some((ca, _)) = cas() else { return };
    let Some(url) = std::env::var("FENCEPOST_REDIS_TLS_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        println!(
            "skipped: FENCEPOST_REDIS_TLS_URL is not set (TLS=1 scripts/services/redis.sh start)"
        );
        return;
    };
    let name = unique("tls-run");
    // the CA by the environment this time: the URL is the plain rediss:// one
    let out = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_fencepost"))
            .args([
                "run",
                "--backend",
                &url,
                "--name",
                &name,
                "--ttl",
                "1s",
                "--",
            ])
            .args([
                "sh",
                "-c",
                r#"echo "$FENCEPOST_TOKEN $FENCEPOST_LOCK"; exit 3"#,
            ])
            .env("FENCEPOST_CA_FILE", &ca)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("fencepost finished in time")
    .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let parts: Vec<&str> = stdout.split_whitespace().collect();
    assert_eq!(parts.len(), 2, "{stdout:?}");
    assert!(parts[0].parse::<u64>().unwrap() > 0, "token {stdout}");
    assert_eq!(parts[1], name);
    let client = Client::connect(&format!("{url}?ca={}", ca.display()))
        .await
        .unwrap();
    assert_eq!(
        client.status(&name).await.unwrap(),
        None,
        "released at exit"
    );

    // without the CA the command is not run: exit 125, the backend error, and why
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_fencepost"))
        .args(["run", "--backend", &url, "--name", &name, "--", "true"])
        .env_remove("FENCEPOST_CA_FILE")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(stderr.contains("UnknownIssuer"), "{stderr}");
}
