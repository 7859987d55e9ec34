//! The bounded model checker from the command line (`scripts/model`): explores every
//! schedule of a small world up to a depth and prints states, time and any
//! counterexample. `--help` lists the bounds.

use std::time::Duration;

use fencepost_core::model::{explore, ModelBackend, ModelConfig};

const USAGE: &str = "usage: model [--backend redis|etcd|redlock|postgres|zookeeper|kubernetes|every] [--depth N] [--clients N] \
[--cycles N] [--drops N] [--duplicates N] [--pauses N] [--cancels N] [--drift] \
[--max-states N] [--clones N] [--sabotage-rule1 [--expect PROPERTY]]";

fn main() {
    let mut args = std::env::args().skip(1);
    let mut backends = vec![ModelBackend::Redis];
    let mut cfg = ModelConfig::new(ModelBackend::Redis, 12);
    // with --expect, success is finding a violation of that property (a sabotage run)
    let mut expect: Option<String> = None;
    let num = |v: Option<String>| -> u64 {
        v.and_then(|v| v.replace('_', "").parse().ok())
            .unwrap_or_else(|| {
                eprintln!("{USAGE}");
                std::process::exit(2)
            })
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--backend" => {
                backends = match args.next().as_deref() {
                    Some("redis") => vec![ModelBackend::Redis],
                    Some("etcd") => vec![ModelBackend::Etcd],
                    Some("redlock") => vec![ModelBackend::Redlock(3)],
                    Some("zookeeper") => vec![ModelBackend::ZooKeeper],
                    Some("kubernetes") => vec![ModelBackend::Kubernetes],
                    Some("postgres") => vec![ModelBackend::PostgresLease],
                    Some("every") => vec![
                        ModelBackend::Redis,
                        ModelBackend::Etcd,
                        ModelBackend::Redlock(3),
                        ModelBackend::ZooKeeper,
                        ModelBackend::Kubernetes,
                        ModelBackend::PostgresLease,
                    ],
                    _ => {
                        eprintln!("{USAGE}");
                        std::process::exit(2)
                    }
                }
            }
            "--depth" => cfg.depth = num(args.next()) as usize,
            "--clients" => cfg.clients = num(args.next()) as usize,
            "--cycles" => cfg.cycles = num(args.next()) as u32,
            "--drops" => cfg.drops = num(args.next()) as u8,
            "--duplicates" => cfg.duplicates = num(args.next()) as u8,
            "--pauses" => cfg.pauses = num(args.next()) as u8,
            "--cancels" => cfg.cancels = num(args.next()) as u8,
            "--drift" => cfg.drift = true,
            "--clones" => cfg.clones = num(args.next()) as usize,
            "--max-states" => cfg.max_states = num(args.next()) as usize,
            "--sabotage-rule1" => cfg.sabotage.validity_from_reply = true,
            "--expect" => expect = args.next(),
            _ => {
                eprintln!("{USAGE}");
                std::process::exit(2)
            }
        }
    }
    let mut failed = false;
    for backend in backends {
        let cfg = ModelConfig {
            backend,
            ..cfg.clone()
        };
        // the core reads no clock: the runner times the exploration
        let started = std::time::Instant::now();
        let r = explore(&cfg);
        let elapsed = started.elapsed();
        println!(
            "{backend:?}: clients {} cycles {} depth {} drops {} duplicates {} pauses {} cancels {} drift {}: \
             {} states, {} transitions, depth reached {}{}, {:.1} s",
            cfg.clients,
            cfg.cycles,
            cfg.depth,
            cfg.drops,
            cfg.duplicates,
            cfg.pauses,
            cfg.cancels,
            cfg.drift,
            r.states,
            r.transitions,
            r.depth,
            if r.exhausted {
                " (state space exhausted)"
            } else if r.complete {
                ""
            } else {
                " (cut at --max-states)"
            },
            elapsed.as_secs_f64().max(Duration::from_millis(1).as_secs_f64()),
        );
        match (r.violation, &expect) {
            (Some(v), Some(p)) if v.property == *p => {
                println!(
                    "found as expected, the shortest counterexample ({} steps):\n{v}",
                    v.length
                )
            }
            (Some(v), _) => {
                failed = true;
                println!("{v}");
            }
            (None, Some(p)) => {
                failed = true;
                println!("expected a violation of {p}, found none");
            }
            (None, None) => {}
        }
    }
    if failed {
        std::process::exit(1);
    }
}
