//! `MemoryEtcd` against a real etcd, reply for reply: three contenders' whole lock
//! cycles and the error paths run on both servers side by side, and every reply text
//! must be the same. Ignored without a server; run with
//! `FENCEPOST_ETCD_URL=http://127.0.0.1:PORT cargo test -p fencepost-core --test
//! etcd_conformance -- --ignored` (an etcd 3.4 with nothing else writing to it, e.g.
//! from `scripts/services/etcd.sh start`).

mod support;

use fencepost_core::backends::etcd::{EtcdCompare, EtcdOp, EtcdRequest};
use fencepost_core::memory::MemoryEtcd;
use fencepost_core::{Event, FencingToken, Operation, Reply};
use support::etcd::*;
use support::*;

use Operation::Wait;

/// POSTs `body` to a real etcd's JSON gateway with `curl` and returns the reply text (a
/// watch: the first response carrying events, or `{}` if none came within 1 s).
fn real_etcd(url: &str, req: &EtcdRequest) -> String {
    let watch = matches!(req, EtcdRequest::Watch(_));
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-s", "-N", "--max-time", if watch { "1" } else { "5" }]);
    cmd.arg(format!("{url}{}", req.gateway_path()));
    cmd.args(["-d", &req.gateway_body()]);
    let out = cmd.output().expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if watch {
        return text
            .lines()
            .find(|l| l.contains("\"events\""))
            .unwrap_or("{}")
            .to_owned();
    }
    text.trim().to_owned()
}

/// A real reply in the in-memory server's terms: its revisions shifted by `offset`
/// (the real server's revision before the run, minus 1) and its header's cluster,
/// member and term replaced by `mem`'s.
fn normalize(real: &str, offset: i64, mem: &str) -> String {
    let field = |text: &str, name: &str| -> Option<String> {
        let pat = format!("\"{name}\":\"");
        let start = text.find(&pat)? + pat.len();
        let end = start + text[start..].find('"')?;
        Some(text[start..end].to_owned())
    };
    let mut out = real.to_owned();
    for name in ["cluster_id", "member_id", "raft_term"] {
        if let (Some(r), Some(m)) = (field(real, name), field(mem, name)) {
            out = out.replace(
                &format!("\"{name}\":\"{r}\""),
                &format!("\"{name}\":\"{m}\""),
            );
        }
    }
    // every `…revision":"N"` (revision, create_revision, mod_revision)
    let pat = "revision\":\"";
    let mut result = String::new();
    let mut rest = out.as_str();
    while let Some(i) = rest.find(pat) {
        let (head, tail) = rest.split_at(i + pat.len());
        result.push_str(head);
        let digits: String = tail.chars().take_while(char::is_ascii_digit).collect();
        match digits.parse::<i64>() {
            Ok(n) => result.push_str(&(n - offset).to_string()),
            Err(_) => result.push_str(&digits),
        }
        rest = &tail[digits.len()..];
    }
    result.push_str(rest);
    result
}

/// `req` with its revisions (compares, range filters, watch start) moved by `offset`,
/// from the in-memory server's numbering to the real one's.
fn shift(req: &EtcdRequest, offset: i64) -> EtcdRequest {
    use fencepost_core::backends::etcd::EtcdRange;
    let range = |r: &EtcdRange| EtcdRange {
        max_create_revision: match r.max_create_revision {
            0 => 0,
            n => n + offset,
        },
        ..r.clone()
    };
    let op = |o: &EtcdOp| match o {
        EtcdOp::Range(r) => EtcdOp::Range(range(r)),
        other => other.clone(),
    };
    match req {
        EtcdRequest::Txn(t) => EtcdRequest::Txn(fencepost_core::backends::etcd::EtcdTxn {
            compare: t
                .compare
                .iter()
                .map(|c| EtcdCompare {
                    key: c.key.clone(),
                    create_revision: match c.create_revision {
                        0 => 0,
                        n => n + offset,
                    },
                })
                .collect(),
            success: t.success.iter().map(op).collect(),
            failure: t.failure.iter().map(op).collect(),
        }),
        EtcdRequest::Range(r) => EtcdRequest::Range(range(r)),
        EtcdRequest::Watch(w) => {
            let mut w = w.clone();
            w.start_revision += offset;
            EtcdRequest::Watch(w)
        }
        other => other.clone(),
    }
}

struct Diff {
    url: String,
    offset: i64,
    compared: usize,
}

impl Diff {
    /// Runs `req` on both servers; the texts must match. Returns the in-memory reply.
    fn check(&mut self, t: &mut Timeline<MemoryEtcd>, req: &EtcdRequest) -> String {
        let mem = t.server.call(t.now, req);
        let real = normalize(
            &real_etcd(&self.url, &shift(req, self.offset)),
            self.offset,
            &mem,
        );
        assert_eq!(
            real, mem,
            "real etcd (left) and MemoryEtcd (right) differ on {req:?}"
        );
        self.compared += 1;
        mem
    }

    /// Serves every pending request on both servers; watches only when they fire.
    fn serve(&mut self, t: &mut Timeline<MemoryEtcd>) {
        t.serve_all_by(|t, _, req| {
            let e = call(req).clone();
            if let EtcdRequest::Watch(w) = &e {
                t.server.watch(t.now, w)?; // stays parked until it fires
            }
            Some(Reply::Etcd(self.check(t, &e)))
        });
    }
}

/// With `FENCEPOST_ETCD_URL` (e.g. `http://127.0.0.1:2379`, an etcd 3.4 with nothing
/// else writing to it), three contenders run through grant, queueing, watches,
/// keep-alives, release transactions and revokes, plus the error paths (a duplicate
/// grant, a revoke of a missing lease, a put on a revoked lease, a retried release),
/// against `MemoryEtcd` and the real server side by side: every reply text must be
/// the same, revisions shifted to the in-memory server's start.
#[test]
#[ignore = "needs a real etcd: FENCEPOST_ETCD_URL=http://127.0.0.1:2379"]
fn memory_etcd_replies_exactly_like_a_real_etcd() {
    let url = std::env::var("FENCEPOST_ETCD_URL").expect("FENCEPOST_ETCD_URL");
    let probe = EtcdRequest::Range(fencepost_core::backends::etcd::EtcdRange {
        key: "fencepost-probe".into(),
        range_end: None,
        limit: 0,
        sort: None,
        keys_only: false,
        max_create_revision: 0,
    });
    let first = real_etcd(&url, &probe);
    let base: i64 = first
        .split("\"revision\":\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .and_then(|s| s.parse().ok())
        .expect("a revision in the probe's header");
    let offset = base - 1;
    // fresh lease ids each run: seeds from the wall clock, a fresh key prefix
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let mut t = Timeline::etcd(0);
    t.backend.key_prefix = format!("fencepost-diff-{nanos}/");
    for seed in 0..3 {
        t.add_client(nanos.wrapping_add(seed));
    }
    let mut d = Diff {
        url,
        offset,
        compared: 0,
    };
    let o = opts(10_000);
    t.at(0);
    let a = t.acquire(0, "r", o.clone());
    d.serve(&mut t);
    t.at(1);
    let b = t.acquire(1, "r", o.clone());
    d.serve(&mut t);
    t.at(2);
    let c = t.acquire(2, "r", o.clone());
    d.serve(&mut t);
    assert!(t.has_pending(1, Wait) && t.has_pending(2, Wait));
    // a keep-alive of the holder (renew interval 3.333 s)
    t.at(3_334);
    d.serve(&mut t);
    assert!(matches!(t.events(0).last(), Some(Event::Renewed { .. })));
    t.release(0, a);
    d.serve(&mut t);
    // the machines get the in-memory replies: its revisions
    assert_eq!(acquired(&t.events(1)).map(|x| x.0), Some(3));
    t.release(1, b);
    d.serve(&mut t);
    assert!(acquired(&t.events(2)).is_some());
    // error paths and shapes the machine does not reach here
    let lease_c = t.lease_of(2, c);
    let key_c = t.key_of(2, "r", c);
    let rev_c = t.server.get(t.now, &key_c).unwrap().create_revision;
    let stale_release = t
        .backend
        .fenced_txn("r", &key_c, FencingToken(rev_c as u64 - 1), vec![]);
    for req in [
        EtcdRequest::LeaseGrant {
            id: lease_c,
            ttl_s: 10,
        },
        stale_release,
        EtcdRequest::LeaseRevoke { id: 1 },
        EtcdRequest::LeaseKeepAlive { id: 1 },
    ] {
        d.check(&mut t, &req);
    }
    t.release(2, c);
    d.serve(&mut t);
    // a put on the revoked lease, then the same transaction without lease
    let lone = t.backend.holder_key("r", &fencepost_core::OwnerId([7; 16]));
    let put = |lease| {
        EtcdRequest::Txn(fencepost_core::backends::etcd::EtcdTxn {
            compare: vec![EtcdCompare {
                key: lone.clone(),
                create_revision: 0,
            }],
            success: vec![EtcdOp::Put {
                key: lone.clone(),
                value: "v".into(),
                lease,
                ignore_lease: false,
            }],
            failure: vec![],
        })
    };
    d.check(&mut t, &put(lease_c));
    d.check(&mut t, &put(0));
    d.check(
        &mut t,
        &EtcdRequest::Txn(fencepost_core::backends::etcd::EtcdTxn {
            compare: vec![],
            success: vec![EtcdOp::Delete { key: lone.clone() }],
            failure: vec![],
        }),
    );
    eprintln!(
        "{} replies compared with the real etcd at {}",
        d.compared, d.url
    );
    assert!(d.compared >= 25, "{}", d.compared);
}
