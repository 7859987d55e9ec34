//! The bounded model checker (`fencepost_core::model`) in `cargo test`: small bounds
//! per backend with no violation, and the checker finding the shortest counterexample
//! when rule 1 is broken on purpose. The larger bounds run in `scripts/model`
//! (`--smoke` in `scripts/test --only model`); figures in docs/SIMULATION.md.

use std::time::Duration;

use fencepost_core::model::{explore, ModelBackend, ModelConfig, Report};
use fencepost_core::sabotage::Sabotage;

fn clean(name: &str, cfg: &ModelConfig) -> Report {
    // the core reads no clock: the test times the exploration
    let started = std::time::Instant::now();
    let r = explore(cfg);
    eprintln!(
        "{name}: {} states, {} transitions, depth {}, {:?}",
        r.states,
        r.transitions,
        r.depth,
        started.elapsed()
    );
    if let Some(v) = &r.violation {
        panic!("{name}: {v}");
    }
    assert!(r.complete, "{name}: cut at {} states", cfg.max_states);
    r
}

#[test]
fn redis_two_clients_every_schedule_to_depth_8_is_safe() {
    let r = clean("redis", &ModelConfig::new(ModelBackend::Redis, 8));
    assert!(r.states > 1_000, "{r:?}");
}

#[test]
fn redis_with_a_drop_a_duplicate_a_pause_and_drift_to_depth_6_is_safe() {
    let cfg = ModelConfig {
        drops: 1,
        duplicates: 1,
        pauses: 1,
        cancels: 1,
        drift: true,
        ..ModelConfig::new(ModelBackend::Redis, 6)
    };
    clean("redis faults", &cfg);
}

#[test]
fn etcd_two_clients_every_schedule_to_depth_8_is_safe() {
    clean("etcd", &ModelConfig::new(ModelBackend::Etcd, 8));
}

#[test]
fn postgres_lease_two_clients_every_schedule_to_depth_8_is_safe() {
    clean(
        "postgres",
        &ModelConfig::new(ModelBackend::PostgresLease, 8),
    );
}

#[test]
fn postgres_lease_with_a_drop_a_duplicate_a_pause_and_drift_to_depth_6_is_safe() {
    let cfg = ModelConfig {
        drops: 1,
        duplicates: 1,
        pauses: 1,
        cancels: 1,
        drift: true,
        ..ModelConfig::new(ModelBackend::PostgresLease, 6)
    };
    clean("postgres faults", &cfg);
}

#[test]
fn redlock_two_clients_every_schedule_to_depth_5_is_safe() {
    clean("redlock", &ModelConfig::new(ModelBackend::Redlock(3), 5));
}

#[test]
#[cfg(feature = "zookeeper")]
fn zookeeper_two_clients_with_pinged_sessions_every_schedule_to_depth_7_is_safe() {
    clean("zookeeper", &ModelConfig::new(ModelBackend::ZooKeeper, 7));
}

#[test]
#[cfg(feature = "kubernetes")]
fn kubernetes_two_clients_every_schedule_to_depth_8_is_safe() {
    clean("kubernetes", &ModelConfig::new(ModelBackend::Kubernetes, 8));
}

/// With validity measured from the reply (rule 1 broken), the shortest schedule that
/// breaks S2 on every backend but Kubernetes (whose takeover needs a candidate to poll
/// for a whole lease duration, beyond these depths: `docs/SIMULATION.md`). On Redis:
/// acquire, the request reaches the server, time runs to just before the
/// acquire's deadline (988 ms), the grant arrives: the client believes it holds the
/// lock until 988 + 988 ms, the server's key expires at 1000 ms.
#[test]
fn the_checker_finds_the_shortest_counterexample_when_rule_1_is_broken() {
    for backend in [
        ModelBackend::Redis,
        ModelBackend::Etcd,
        ModelBackend::Redlock(3),
        #[cfg(feature = "zookeeper")]
        ModelBackend::ZooKeeper,
        ModelBackend::PostgresLease,
    ] {
        let cfg = ModelConfig {
            sabotage: Sabotage {
                validity_from_reply: true,
            },
            epsilon: Duration::from_micros(1),
            ..ModelConfig::new(backend, 12)
        };
        let r = explore(&cfg);
        let v = r
            .violation
            .unwrap_or_else(|| panic!("{backend:?}: no counterexample in {} states", r.states));
        eprintln!("{backend:?}: {v}");
        assert_eq!(v.property, "S2", "{backend:?}: {v}");
        // the create lands at 0 (the session touched until 1,000 ms), the reply arrives
        // 1 µs before the library's first ping (333.333 ms): believed until 1,321.332 ms
        #[cfg(feature = "zookeeper")]
        if backend == ModelBackend::ZooKeeper {
            assert_eq!(v.length, 4, "{v}");
        }
        if backend == ModelBackend::PostgresLease {
            // the same story: the upsert's row expires at 1,000 ms
            assert_eq!(v.length, 4, "{v}");
        }
        if backend == ModelBackend::Redis {
            assert_eq!(v.length, 4, "{v}");
            assert_eq!(
                v.vectors[0],
                [
                    r#"{"at_ms":0.0,"input":{"name":"r","type":"acquire"}}"#,
                    r#"{"at_ms":987.999,"input":{"reply":[1,1,"none"],"request":1,"type":"reply"}}"#,
                ]
            );
        }
    }
}
