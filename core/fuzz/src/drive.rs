//! The `machine` target's input decoding, shared with `flat_outputs`: one machine per
//! run, on one backend the input picks; its requests are answered honestly by the
//! in-memory servers (Redis, fair Redis, Redlock, etcd) or with arbitrary replies of
//! every backend's shape (PostgreSQL, ZooKeeper and Kubernetes get only those), failed in
//! transport (before or after reaching the server), answered twice, or dropped; lock
//! options include invalid ones; time steps forwards and backwards. Every input goes
//! through a [`Contract`]; [`run`] shows each input's outputs to a [`Watch`].

use std::time::Duration;

use arbitrary::{Result, Unstructured};
use fencepost_core::backends::{EtcdBackend, KubernetesBackend, ZooKeeperBackend};
use fencepost_core::contract::Contract;
use fencepost_core::memory::{MemoryEtcd, MemoryRedis, MemoryRedlock};
use fencepost_core::{
    Backend, Event, FencingToken, Input, Instant, LockId, LockOptions, Machine, PgMode,
    PostgresBackend, Purpose, RedisBackend, RedisValue, RedlockBackend, Reply, Request, SqlReply,
    SqlValue,
};

enum Server {
    Redis(MemoryRedis),
    Redlock(MemoryRedlock),
    Etcd(MemoryEtcd),
    /// No in-memory server here (PostgreSQL, ZooKeeper): arbitrary replies only.
    None,
}

impl Server {
    fn execute(&mut self, now: Instant, req: &Request) -> Option<Reply> {
        match self {
            Server::Redis(s) => Some(s.execute(now, &req.body)),
            Server::Redlock(s) => Some(s.execute(now, &req.body)),
            Server::Etcd(s) => Some(s.execute(now, &req.body)),
            Server::None => None,
        }
    }
}

/// What a run shows of each input fed: the requests and events it made the machine
/// emit (in the order of each kind), and the machine's timer after it
/// (`contract.next_timeout`, `None` when idle).
pub type Watch<'a> = dyn FnMut(&Contract, &[Request], &[(LockId, Event)]) + 'a;

struct Run<'w> {
    contract: Contract,
    server: Server,
    locks: Vec<LockId>,
    watch: &'w mut Watch<'w>,
}

fn backend(u: &mut Unstructured) -> Result<(Backend, Server)> {
    Ok(match u.int_in_range(0..=7u8)? {
        0 => (
            Backend::Redis(RedisBackend::default()),
            Server::Redis(MemoryRedis::new()),
        ),
        1 => {
            let b = RedisBackend {
                fair: true,
                ..RedisBackend::default()
            };
            (Backend::Redis(b), Server::Redis(MemoryRedis::new()))
        }
        2 => {
            let n = if u.arbitrary()? { 3 } else { 5 };
            let b = RedlockBackend {
                masters: (0..n)
                    .map(|i| format!("127.0.0.1:{}/0", 6379 + i))
                    .collect(),
                ..RedlockBackend::default()
            };
            (Backend::Redlock(b), Server::Redlock(MemoryRedlock::new(n)))
        }
        3 => (
            Backend::Etcd(EtcdBackend::default()),
            Server::Etcd(MemoryEtcd::new()),
        ),
        4 => (Backend::Postgres(PostgresBackend::default()), Server::None),
        5 => {
            let b = PostgresBackend {
                mode: PgMode::Session,
                ..PostgresBackend::default()
            };
            (Backend::Postgres(b), Server::None)
        }
        6 => (
            Backend::ZooKeeper(ZooKeeperBackend::default()),
            Server::None,
        ),
        _ => (
            Backend::Kubernetes(KubernetesBackend::default()),
            Server::None,
        ),
    })
}

fn millis(u: &mut Unstructured, max: u64) -> Result<Duration> {
    Ok(Duration::from_millis(u.int_in_range(0..=max)?))
}

fn options(u: &mut Unstructured) -> Result<LockOptions> {
    let mut o = LockOptions::ttl(Duration::from_millis(u.int_in_range(1..=5_000)?));
    if u.ratio(1, 8)? {
        o.ttl = Duration::from_nanos(u.arbitrary()?); // zero, huge: refused or not
    }
    if u.ratio(1, 4)? {
        o.purpose = Purpose::Correctness;
    }
    o.accept_failover_risk = u.ratio(1, 4)?;
    if u.arbitrary()? {
        o.acquire_timeout = Some(millis(u, 3_000)?);
    }
    if u.ratio(1, 4)? {
        o.retry_count = Some(u.int_in_range(0..=5)?);
    }
    if u.ratio(1, 4)? {
        o.renew_every = Some(millis(u, 3_000)?);
    }
    o.auto_renew = !u.ratio(1, 4)?;
    if u.ratio(1, 8)? {
        o.drift_factor = u.arbitrary()?; // NaN, negative, huge: refused
    }
    if u.ratio(1, 8)? {
        o.token_floor = Some(FencingToken(u.arbitrary()?));
    }
    if u.ratio(1, 8)? {
        o.min_replicas = u.int_in_range(0..=3)?;
    }
    Ok(o)
}

fn text(u: &mut Unstructured) -> Result<String> {
    Ok(match u.int_in_range(0..=3u8)? {
        0 => String::new(),
        1 => u.arbitrary::<String>()?,
        2 => u.int_in_range(-3i64..=40)?.to_string(),
        _ => u.arbitrary::<u64>()?.to_string(),
    })
}

fn redis_value(u: &mut Unstructured, depth: u32) -> Result<RedisValue> {
    Ok(match u.int_in_range(0..=6u8)? {
        0 => RedisValue::Nil,
        1 => RedisValue::Int(u.int_in_range(-3..=3)?),
        2 => RedisValue::Int(u.arbitrary()?),
        3 => RedisValue::Data(text(u)?),
        4 => RedisValue::Status(text(u)?),
        5 => RedisValue::Error(
            u.choose(&[
                "NOSCRIPT No matching script",
                "LOADING",
                "WRONGTYPE",
                "ERR x",
                "",
            ])?
            .to_string(),
        ),
        _ if depth < 3 => {
            let n = u.int_in_range(0..=3)?;
            RedisValue::Array(
                (0..n)
                    .map(|_| redis_value(u, depth + 1))
                    .collect::<Result<_>>()?,
            )
        }
        _ => RedisValue::Nil,
    })
}

fn json_text(u: &mut Unstructured) -> Result<String> {
    let fragments = [
        r#"{"header":{"revision":"7"}}"#,
        r#"{"result":{"header":{},"ID":"1","TTL":"5"}}"#,
        r#"{"header":{"revision":"3"},"succeeded":true,"responses":[]}"#,
        r#"{"header":{"revision":"3"},"succeeded":false,"responses":[{"response_range":{"header":{},"kvs":[{"key":"eA==","create_revision":"2","mod_revision":"2","lease":"1"}]}}]}"#,
        r#"{"error":"etcdserver: requested lease not found","code":5}"#,
        r#"{"ok":true,"path":"/fencepost/a/n-0000000001","czxid":5}"#,
        r#"{"error":"no_node"}"#,
        r#"{"error":"connection_loss"}"#,
        r#"{"event":"deleted","session":1}"#,
        r#"{"children":["n-0000000001","n-0000000002"]}"#,
        r#"{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"a","namespace":"default","resourceVersion":"7"},"spec":{"holderIdentity":"05b7ba35fb5f850fadbb9dd190d956dc","leaseDurationSeconds":5,"leaseTransitions":3}}"#,
        r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409}"#,
        r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#,
        "null",
        "[]",
    ];
    let mut s = u.choose(&fragments)?.to_string();
    if u.arbitrary()? {
        // a byte of it changed, or cut short
        let at = u.choose_index(s.len().max(1))?.min(s.len());
        s.truncate(at);
        s.push_str(&text(u)?);
    }
    Ok(s)
}

fn arbitrary_reply(u: &mut Unstructured) -> Result<Reply> {
    Ok(match u.int_in_range(0..=4u8)? {
        0 => Reply::Redis(redis_value(u, 0)?),
        1 => {
            if u.ratio(1, 4)? {
                Reply::Sql(SqlReply::Error {
                    sqlstate: u
                        .choose(&["40001", "55P03", "57014", "08006", "XXXXX"])?
                        .to_string(),
                    message: text(u)?,
                })
            } else {
                let rows = u.int_in_range(0..=2)?;
                let mut out = Vec::new();
                for _ in 0..rows {
                    let cols = u.int_in_range(0..=4)?;
                    let mut row = Vec::new();
                    for _ in 0..cols {
                        row.push(match u.int_in_range(0..=3u8)? {
                            0 => SqlValue::Null,
                            1 => SqlValue::Bool(u.arbitrary()?),
                            2 => SqlValue::Int(u.int_in_range(-2..=1_000_000)?),
                            _ => SqlValue::Text(text(u)?),
                        });
                    }
                    out.push(row);
                }
                Reply::Sql(SqlReply::Rows { rows: out })
            }
        }
        2 => Reply::Etcd(json_text(u)?),
        3 => Reply::ZooKeeper(json_text(u)?),
        _ => Reply::Kubernetes(json_text(u)?),
    })
}

impl Run<'_> {
    fn at(&self) -> Instant {
        self.contract.at()
    }

    fn feed(&mut self, input: Input) -> bool {
        // feeding only appends to both lists; taking happens between feeds
        let (requests, events) = (self.contract.pending.len(), self.contract.events.len());
        let accepted = self.contract.feed(input);
        let c = &self.contract;
        (self.watch)(c, &c.pending[requests..], &c.events[events..]);
        accepted
    }

    fn take(&mut self, u: &mut Unstructured) -> Result<Option<Request>> {
        let pending = &mut self.contract.pending;
        if pending.is_empty() {
            return Ok(None);
        }
        let i = u.choose_index(pending.len())?;
        Ok(Some(pending.swap_remove(i)))
    }

    fn reply(&mut self, req: &Request, reply: Reply) {
        let now = self.at();
        self.feed(Input::Reply {
            now,
            request: req.id,
            reply,
        });
    }

    fn step(&mut self, u: &mut Unstructured) -> Result<()> {
        match u.int_in_range(0..=11u8)? {
            0 | 1 => {
                let name = u.choose(&["a", "b", "}c", ""])?.to_string();
                let options = options(u)?;
                let now = self.at();
                if self.feed(Input::Acquire { now, name, options }) {
                    // the n-th accepted acquire is LockId(n)
                    self.locks.push(LockId(self.locks.len() as u64 + 1));
                }
            }
            2 => {
                let lock = match self.locks.is_empty() || u.ratio(1, 16)? {
                    true => LockId(u.int_in_range(0..=9)?), // unknown ids too
                    false => *u.choose(&self.locks)?,
                };
                let now = self.at();
                if u.ratio(1, 3)? {
                    self.feed(Input::Extend { now, lock });
                } else {
                    self.feed(Input::Release { now, lock });
                }
            }
            3..=5 => {
                if let Some(req) = self.take(u)? {
                    let now = self.at();
                    if let Some(reply) = self.server.execute(now, &req) {
                        self.reply(&req, reply.clone());
                        if u.ratio(1, 10)? {
                            self.reply(&req, reply); // a duplicate: ignored
                        }
                    } else {
                        let reply = arbitrary_reply(u)?;
                        self.reply(&req, reply);
                    }
                }
            }
            6 => {
                // reached the server, the reply lost: ambiguous
                if let Some(req) = self.take(u)? {
                    let now = self.at();
                    let _ = self.server.execute(now, &req);
                    self.feed(Input::TransportError {
                        now,
                        request: req.id,
                        message: "reset".to_owned(),
                    });
                }
            }
            7 => {
                if let Some(req) = self.take(u)? {
                    let now = self.at();
                    self.feed(Input::TransportError {
                        now,
                        request: req.id,
                        message: text(u)?,
                    });
                }
            }
            8 => {
                let _ = self.take(u)?; // never answered
            }
            9 => {
                if let Some(req) = self.take(u)? {
                    let reply = arbitrary_reply(u)?;
                    self.reply(&req, reply);
                }
            }
            10 => {
                let back = u.int_in_range(1..=1_000_000_000u64)?;
                let now = Instant::from_nanos(self.contract.now.saturating_sub(back));
                if now < self.at() {
                    if u.arbitrary()? {
                        self.feed(Input::Timeout { now });
                    } else {
                        self.feed(Input::Release {
                            now,
                            lock: LockId(1),
                        });
                    }
                }
            }
            _ => {
                let ms = u.int_in_range(0..=2_000u64)?;
                let ns = u.int_in_range(0..=999_999u64)?;
                self.contract.now += ms * 1_000_000 + ns;
                let now = self.at();
                self.feed(Input::Timeout { now });
            }
        }
        Ok(())
    }
}

/// Decodes one run from `u` and plays it under the contract (which panics at a breach),
/// showing every input's outputs to `watch`. `Err` only when `u` ran out early.
pub fn run<'w>(u: &mut Unstructured, watch: &'w mut Watch<'w>) -> Result<()> {
    let seed = u.arbitrary()?;
    let (backend, server) = backend(u)?;
    let start = u.int_in_range(0..=1_000_000_000u64)?;
    let mut machine = Machine::with_seed(backend, seed);
    if u.arbitrary()? {
        // observing must change no decision, and its code must not panic either
        machine
            .observe(Some(fencepost_core::ObserveOptions::default()))
            .expect("default options");
    }
    let mut run = Run {
        contract: Contract::new(machine, start),
        server,
        locks: Vec::new(),
        watch,
    };
    let steps = u.int_in_range(1..=200u16)?;
    for _ in 0..steps {
        if u.is_empty() {
            break;
        }
        run.step(u)?;
    }
    Ok(())
}
