//! Runs the deterministic fault simulator at scale and reports schedules/s, violations
//! by property and violations explained by a breach of the fault model.
//!
//! usage: cargo run --release -p fencepost-core --example sim -- \
//!            [--schedules N] [--seed S] [--mix NAME|every] [--threads T] [--trace]
//!            [--fence token|owner|both] [--floor]
//!
//! Schedule `i` of a run uses seed `S + i`; `--trace --schedules 1 --seed X` prints the
//! timeline of seed X. Mixes: none network pauses drift partitions all drift-beyond
//! server-restarts, and each of them on etcd: etcd-none … etcd-all, etcd-failovers,
//! etcd-drift-beyond, with shared leases etcd-shared-none, etcd-shared-all,
//! etcd-shared-failovers (`--mix etcd` runs every etcd mix), and on ZooKeeper: zk-none …
//! zk-all, zk-failovers, zk-drift-beyond (`--mix zk`), on a Kubernetes Lease: kube-none …
//! kube-all, kube-restarts, kube-drift-beyond (`--mix kube`), on PostgreSQL lease rows:
//! pg-none … pg-all, pg-restarts, pg-drift-beyond (`--mix pg`), and on a Redlock of five masters:
//! redlock-none, redlock-network, redlock-pauses (clients and masters), redlock-partitions
//! (client–master links), redlock-all, redlock-restarts-persistent, redlock-restarts-delayed,
//! redlock-restarts-amnesiac (outside the model) (`--mix redlock`). `--fence` picks the resource's
//! rule: `token` (the highest token from anyone, the default), `owner` (the owner-bound
//! rule), `both` (token-only, with an owner-bound fence beside it on the same writes,
//! printed as a second line `MIX/owner`). Columns: writes the fence refused, accepted with
//! a token another owner had written with ("shared"), accepted out of grant order (with
//! the same token as the later grant's / a higher one), and refused writes of the newest
//! grant ("newest": the new holder locked out because the fence saw a token at or above
//! its own). `--floor`: writers follow the token-floor recovery (a refused writer
//! releases and asks for a token above the fence's highest next time).

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant as WallClock;

use fencepost_core::sim::{
    Faults, FenceCounts, FenceRule, MasterRestart, Property, RedlockMix, SimConfig, Simulation,
};

fn mixes() -> Vec<(&'static str, SimConfig)> {
    vec![
        ("none", SimConfig::new(|_| Faults::none())),
        ("network", SimConfig::new(|o| Faults::network(o.ttl))),
        ("pauses", SimConfig::new(|o| Faults::pauses(o.ttl))),
        ("drift", SimConfig::new(Faults::drift)),
        ("partitions", SimConfig::new(|o| Faults::partitions(o.ttl))),
        ("all", SimConfig::new(Faults::all)),
        ("drift-beyond", SimConfig::new(Faults::drift_beyond)),
        (
            "server-restarts",
            SimConfig::new(|_| Faults::server_restarts()),
        ),
        // the same mixes against the in-memory etcd; its "server restart" is a leader
        // failover (data kept, lease TTLs reset), inside the model
        ("etcd-none", SimConfig::new(|_| Faults::none()).etcd()),
        (
            "etcd-network",
            SimConfig::new(|o| Faults::network(o.ttl)).etcd(),
        ),
        (
            "etcd-pauses",
            SimConfig::new(|o| Faults::pauses(o.ttl)).etcd(),
        ),
        ("etcd-drift", SimConfig::new(Faults::drift).etcd()),
        (
            "etcd-partitions",
            SimConfig::new(|o| Faults::partitions(o.ttl)).etcd(),
        ),
        ("etcd-all", SimConfig::new(Faults::all).etcd()),
        (
            "etcd-failovers",
            SimConfig::new(|_| Faults::server_restarts()).etcd(),
        ),
        (
            "etcd-drift-beyond",
            SimConfig::new(Faults::drift_beyond).etcd(),
        ),
        // each client's locks on one shared lease (EtcdBackend::shared_lease)
        (
            "etcd-shared-none",
            SimConfig::new(|_| Faults::none()).etcd_shared(),
        ),
        ("etcd-shared-all", SimConfig::new(Faults::all).etcd_shared()),
        (
            "etcd-shared-failovers",
            SimConfig::new(|_| Faults::server_restarts()).etcd_shared(),
        ),
        // and on the in-memory ZooKeeper: sessions kept by pings over the same network;
        // its "server restart" is a leader failover (data kept, sessions' timeouts reset)
        ("zk-none", SimConfig::new(|_| Faults::none()).zookeeper()),
        (
            "zk-network",
            SimConfig::new(|o| Faults::network(o.ttl)).zookeeper(),
        ),
        (
            "zk-pauses",
            SimConfig::new(|o| Faults::pauses(o.ttl)).zookeeper(),
        ),
        ("zk-drift", SimConfig::new(Faults::drift).zookeeper()),
        (
            "zk-partitions",
            SimConfig::new(|o| Faults::partitions(o.ttl)).zookeeper(),
        ),
        ("zk-all", SimConfig::new(Faults::all).zookeeper()),
        (
            "zk-failovers",
            SimConfig::new(|_| Faults::server_restarts()).zookeeper(),
        ),
        (
            "zk-drift-beyond",
            SimConfig::new(Faults::drift_beyond).zookeeper(),
        ),
        // and on the in-memory Kubernetes Lease API: no server-side expiry, candidates
        // judge it by observation; its "server restart" is an API server restart (503s
        // for a while, Leases kept)
        ("kube-none", SimConfig::new(|_| Faults::none()).kubernetes()),
        (
            "kube-network",
            SimConfig::new(|o| Faults::network(o.ttl)).kubernetes(),
        ),
        (
            "kube-pauses",
            SimConfig::new(|o| Faults::pauses(o.ttl)).kubernetes(),
        ),
        ("kube-drift", SimConfig::new(Faults::drift).kubernetes()),
        (
            "kube-partitions",
            SimConfig::new(|o| Faults::partitions(o.ttl)).kubernetes(),
        ),
        ("kube-all", SimConfig::new(Faults::all).kubernetes()),
        (
            "kube-restarts",
            SimConfig::new(|_| Faults::server_restarts()).kubernetes(),
        ),
        (
            "kube-drift-beyond",
            SimConfig::new(Faults::drift_beyond).kubernetes(),
        ),
        // PostgreSQL lease rows; a restart refuses connections for a while, rows kept
        ("pg-none", SimConfig::new(|_| Faults::none()).postgres()),
        (
            "pg-network",
            SimConfig::new(|o| Faults::network(o.ttl)).postgres(),
        ),
        (
            "pg-pauses",
            SimConfig::new(|o| Faults::pauses(o.ttl)).postgres(),
        ),
        ("pg-drift", SimConfig::new(Faults::drift).postgres()),
        (
            "pg-partitions",
            SimConfig::new(|o| Faults::partitions(o.ttl)).postgres(),
        ),
        ("pg-all", SimConfig::new(Faults::all).postgres()),
        (
            "pg-restarts",
            SimConfig::new(|_| Faults::server_restarts()).postgres(),
        ),
        (
            "pg-drift-beyond",
            SimConfig::new(Faults::drift_beyond).postgres(),
        ),
        // five Redlock masters; restarts hit one master at a time
        (
            "redlock-none",
            redlock(|_| Faults::none(), RedlockMix::new(5)),
        ),
        (
            "redlock-network",
            redlock(|o| Faults::network(o.ttl), RedlockMix::new(5)),
        ),
        (
            "redlock-pauses",
            redlock(
                |o| Faults::pauses(o.ttl),
                RedlockMix {
                    pauses: true,
                    ..RedlockMix::new(5)
                },
            ),
        ),
        (
            "redlock-partitions",
            redlock(|o| Faults::partitions(o.ttl), RedlockMix::new(5)),
        ),
        (
            "redlock-all",
            redlock(
                |o| Faults {
                    p_server_restart: 0.3,
                    ..Faults::all(o)
                },
                RedlockMix {
                    pauses: true,
                    ..RedlockMix::new(5)
                },
            ),
        ),
        (
            "redlock-restarts-persistent",
            redlock(|_| Faults::server_restarts(), RedlockMix::new(5)),
        ),
        (
            "redlock-restarts-delayed",
            redlock(
                |_| Faults::server_restarts(),
                RedlockMix {
                    restarts: MasterRestart::Delayed,
                    ..RedlockMix::new(5)
                },
            ),
        ),
        (
            "redlock-restarts-amnesiac",
            redlock(
                |_| Faults::server_restarts(),
                RedlockMix {
                    restarts: MasterRestart::Amnesiac,
                    ..RedlockMix::new(5)
                },
            ),
        ),
    ]
}

fn redlock(
    faults: impl FnOnce(&fencepost_core::LockOptions) -> Faults,
    mix: RedlockMix,
) -> SimConfig {
    SimConfig::new(faults).redlock(mix)
}

struct Args {
    schedules: u64,
    seed: u64,
    mix: String,
    threads: u64,
    trace: bool,
    fence: FenceRule,
    compare: Option<FenceRule>,
    floor: bool,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        schedules: 100_000,
        seed: 0,
        mix: "every".into(),
        threads: std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
        trace: false,
        fence: FenceRule::TokenOnly,
        compare: None,
        floor: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match flag.as_str() {
            "--schedules" => {
                a.schedules = value("--schedules")?
                    .parse()
                    .map_err(|e| format!("--schedules: {e}"))?
            }
            "--seed" => {
                a.seed = value("--seed")?
                    .parse()
                    .map_err(|e| format!("--seed: {e}"))?
            }
            "--mix" => a.mix = value("--mix")?,
            "--threads" => {
                a.threads = value("--threads")?
                    .parse()
                    .map_err(|e| format!("--threads: {e}"))?
            }
            "--trace" => a.trace = true,
            "--floor" => a.floor = true,
            "--fence" => {
                (a.fence, a.compare) = match value("--fence")?.as_str() {
                    "token" => (FenceRule::TokenOnly, None),
                    "owner" => (FenceRule::OwnerBound, None),
                    "both" => (FenceRule::TokenOnly, Some(FenceRule::OwnerBound)),
                    other => return Err(format!("--fence: {other:?} is not token, owner or both")),
                }
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(a)
}

#[derive(Default)]
struct Writes {
    refused: u64,
    shared: u64,
    same_token: u64,
    higher_token: u64,
    newest_refused: u64,
}

impl Writes {
    fn add(&mut self, c: &FenceCounts) {
        self.refused += c.refused;
        self.shared += c.shared_token_accepted;
        self.same_token += c.out_of_order_same_token;
        self.higher_token += c.out_of_order_higher_token;
        self.newest_refused += c.newest_grant_refused;
    }

    fn merge(&mut self, o: &Writes) {
        self.refused += o.refused;
        self.shared += o.shared;
        self.same_token += o.same_token;
        self.higher_token += o.higher_token;
        self.newest_refused += o.newest_refused;
    }

    fn columns(&self) -> String {
        format!(
            "{:>9} {:>8} {:>13} {:>8}",
            self.refused,
            self.shared,
            format!("{}/{}", self.same_token, self.higher_token),
            self.newest_refused
        )
    }
}

#[derive(Default)]
struct Tally {
    schedules: u64,
    steps: u64,
    grants: u64,
    fence: Writes,
    compared: Writes,
    violations: BTreeMap<Property, (u64, u64)>, // (unexplained, explained)
    first_unexplained: Option<(u64, String)>,
    /// Seeds whose resource accepted a stale holder's higher token out of grant order.
    higher_token_seeds: Vec<u64>,
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}\nusage: sim [--schedules N] [--seed S] [--mix NAME|every] [--threads T] [--trace] [--fence token|owner|both] [--floor]");
            return ExitCode::from(2);
        }
    };
    let selected: Vec<_> = mixes()
        .into_iter()
        .filter(|(name, _)| {
            args.mix == "every"
                || args.mix == *name
                || (args.mix == "etcd" && name.starts_with("etcd-"))
                || (args.mix == "redlock" && name.starts_with("redlock-"))
                || (args.mix == "zk" && name.starts_with("zk-"))
                || (args.mix == "kube" && name.starts_with("kube-"))
                || (args.mix == "pg" && name.starts_with("pg-"))
        })
        .map(|(name, cfg)| {
            let cfg = cfg.fenced(args.fence);
            let cfg = if args.floor {
                cfg.with_floor_recovery()
            } else {
                cfg
            };
            match args.compare {
                Some(rule) => (name, cfg.compared_with(rule)),
                None => (name, cfg),
            }
        })
        .collect();
    if selected.is_empty() {
        eprintln!("unknown mix {:?}", args.mix);
        return ExitCode::from(2);
    }
    if args.trace {
        for (name, cfg) in &selected {
            let out = Simulation::new(cfg.clone(), args.seed).with_trace().run();
            println!("== {name}, seed {}", args.seed);
            for line in &out.trace {
                println!("{line}");
            }
            for v in &out.violations {
                println!(
                    "VIOLATION {} at {}: {} (explained: {})",
                    v.property, v.at, v.detail, v.explained_by_breach
                );
            }
        }
        return ExitCode::SUCCESS;
    }
    println!(
        "{:<22} {:>10} {:>9} {:>11} {:>9} {:>9} {:>8} {:>13} {:>8}  violations (unexplained / explained by model breach)",
        "mix", "schedules", "sched/s", "steps/s", "grants", "refused", "shared", "out-of-order", "newest"
    );
    let mut failed = false;
    for (name, cfg) in selected {
        let started = WallClock::now();
        let per = args.schedules.div_ceil(args.threads.max(1));
        let tallies: Vec<Tally> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..args.threads.max(1))
                .map(|t| {
                    let cfg = cfg.clone();
                    let (from, to) = (t * per, ((t + 1) * per).min(args.schedules));
                    s.spawn(move || {
                        let mut tally = Tally::default();
                        for i in from..to {
                            let seed = args.seed + i;
                            let out = Simulation::new(cfg.clone(), seed).run();
                            tally.schedules += 1;
                            tally.steps += out.steps;
                            tally.grants += out.grants;
                            tally.fence.add(&out.fence);
                            if out.fence.out_of_order_higher_token > 0 {
                                tally.higher_token_seeds.push(seed);
                            }
                            if let Some((_, c)) = &out.compared {
                                tally.compared.add(c);
                            }
                            for v in &out.violations {
                                let e = tally.violations.entry(v.property).or_default();
                                if v.explained_by_breach {
                                    e.1 += 1;
                                } else {
                                    e.0 += 1;
                                    tally.first_unexplained.get_or_insert((
                                        seed,
                                        format!("{}: {}", v.property, v.detail),
                                    ));
                                }
                            }
                        }
                        tally
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("simulation thread"))
                .collect()
        });
        let secs = started.elapsed().as_secs_f64();
        let mut total = Tally::default();
        for t in tallies {
            total.schedules += t.schedules;
            total.steps += t.steps;
            total.grants += t.grants;
            total.fence.merge(&t.fence);
            total.compared.merge(&t.compared);
            for (p, (u, e)) in t.violations {
                let x = total.violations.entry(p).or_default();
                x.0 += u;
                x.1 += e;
            }
            total.higher_token_seeds.extend(t.higher_token_seeds);
            if total.first_unexplained.is_none() {
                total.first_unexplained = t.first_unexplained;
            }
        }
        let v: Vec<String> = [Property::S1, Property::S2, Property::S3, Property::S4]
            .iter()
            .map(|p| {
                let (u, e) = total.violations.get(p).copied().unwrap_or_default();
                format!("{p} {u}/{e}")
            })
            .collect();
        println!(
            "{:<22} {:>10} {:>9.0} {:>11.0} {:>9} {}  {}",
            match (args.fence, args.compare) {
                (FenceRule::OwnerBound, None) if args.floor => format!("{name}/owner+floor"),
                (FenceRule::OwnerBound, None) => format!("{name}/owner"),
                _ if args.floor => format!("{name}/floor"),
                _ => name.to_owned(),
            },
            total.schedules,
            total.schedules as f64 / secs,
            total.steps as f64 / secs,
            total.grants,
            total.fence.columns(),
            v.join("  ")
        );
        if args.compare.is_some() {
            // the same schedules and writes, judged by the comparison fence
            println!(
                "{:<22} {:>10} {:>9} {:>11} {:>9} {}",
                format!("{name}/owner"),
                total.schedules,
                "",
                "",
                total.grants,
                total.compared.columns()
            );
        }
        if !total.higher_token_seeds.is_empty() {
            let seeds: Vec<String> = total
                .higher_token_seeds
                .iter()
                .take(10)
                .map(u64::to_string)
                .collect();
            println!("  higher-token writes out of grant order at seeds {} (replay with --trace --seed S)", seeds.join(", "));
        }
        if let Some((seed, what)) = total.first_unexplained {
            failed = true;
            println!("  first unexplained violation: seed {seed}: {what}\n  replay: scripts/sim --mix {name} --seed {seed} --trace");
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
