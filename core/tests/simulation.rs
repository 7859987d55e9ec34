//! The deterministic fault simulator's CI budget: many random schedules per fault mix,
//! zero violations of S1–S4 inside the declared model, and the checker catching a rule
//! broken on purpose — on Redis, and (smaller budgets) on etcd, ZooKeeper, a Kubernetes
//! Lease, PostgreSQL lease rows and Redlock.

use std::time::Instant as WallClock;

use fencepost_core::sim::{
    Faults, FenceRule, MasterRestart, Outcome, Property, RedlockMix, SimConfig, Simulation,
};

/// Schedules per fault mix in `cargo test` (`FENCEPOST_SIM_SCHEDULES` overrides).
fn budget() -> u64 {
    std::env::var("FENCEPOST_SIM_SCHEDULES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

struct Totals {
    schedules: u64,
    grants: u64,
    refused: u64,
    explained: u64,
}

fn run_mix(name: &str, cfg: SimConfig, expect_clean: bool) -> Totals {
    run_mix_n(name, cfg, expect_clean, budget())
}

fn run_mix_n(name: &str, cfg: SimConfig, expect_clean: bool, schedules: u64) -> Totals {
    let started = WallClock::now();
    let mut t = Totals {
        schedules: 0,
        grants: 0,
        refused: 0,
        explained: 0,
    };
    for seed in 0..schedules {
        let out = Simulation::new(cfg.clone(), seed).run();
        t.schedules += 1;
        t.grants += out.grants;
        t.refused += out.writes_refused;
        t.explained += out
            .violations
            .iter()
            .filter(|v| v.explained_by_breach)
            .count() as u64;
        if expect_clean {
            if let Some(v) = out.unexplained().next() {
                let replay = Simulation::new(cfg.clone(), seed).with_trace().run();
                let tail: Vec<_> = replay.trace.iter().rev().take(60).rev().cloned().collect();
                panic!(
                    "{name}: seed {seed}: {} violated at {}: {}\n\nlast steps of the timeline (replay: Simulation::new(cfg, {seed}).with_trace().run()):\n{}",
                    v.property,
                    v.at,
                    v.detail,
                    tail.join("\n")
                );
            }
        }
    }
    eprintln!(
        "{name}: {} schedules in {:.2?} ({:.0}/s), {} grants, {} stale writes refused, {} violations explained by model breach",
        t.schedules,
        started.elapsed(),
        t.schedules as f64 / started.elapsed().as_secs_f64(),
        t.grants,
        t.refused,
        t.explained
    );
    t
}

/// Redis without persistence hands tokens out again. Under the token-only rule the
/// resource then accepts writes with one token from two owners, some after a later
/// grant's write; the owner-bound rule accepts none of them (`docs/SIMULATION.md`,
/// "Owner-bound fences").
#[test]
fn owner_bound_fence_accepts_no_token_from_two_owners_after_restarts() {
    let cfg = SimConfig::new(|_| Faults::server_restarts()).compared_with(FenceRule::OwnerBound);
    let schedules = budget().min(2_000);
    let (mut token_only, mut owner_bound) = ((0, 0), (0, 0));
    for seed in 0..schedules {
        let out = Simulation::new(cfg.clone(), seed).run();
        let Some((FenceRule::OwnerBound, owned)) = out.compared else {
            panic!("seed {seed}: no comparison fence in {:?}", out.compared);
        };
        token_only.0 += out.fence.shared_token_accepted;
        token_only.1 += out.fence.out_of_order_same_token;
        owner_bound.0 += owned.shared_token_accepted;
        owner_bound.1 += owned.out_of_order_same_token;
        assert_eq!(
            out.fence.accepted + out.fence.refused,
            owned.accepted + owned.refused
        );
    }
    eprintln!("server-restarts, {schedules} schedules: shared-token writes accepted, out of grant order: token-only {token_only:?}, owner-bound {owner_bound:?}");
    assert!(token_only.0 > 0 && token_only.1 > 0, "{token_only:?}");
    assert_eq!(owner_bound, (0, 0));
}

/// The token-floor recovery after restarts: a refused writer releases and comes back
/// above the fence's highest token, so far fewer writes of the newest grant are refused,
/// and the owner-bound fence still accepts no token from two owners.
#[test]
fn the_token_floor_lets_new_holders_write_again_after_restarts() {
    let cfg = SimConfig::new(|_| Faults::server_restarts()).fenced(FenceRule::OwnerBound);
    let schedules = budget().min(2_000);
    let (mut without, mut with) = (FenceCountsSum::default(), FenceCountsSum::default());
    for seed in 0..schedules {
        without.add(&Simulation::new(cfg.clone(), seed).run());
        with.add(&Simulation::new(cfg.clone().with_floor_recovery(), seed).run());
    }
    eprintln!("server-restarts, owner-bound, {schedules} schedules: newest-grant writes refused {} without the floor, {} with it", without.newest_refused, with.newest_refused);
    assert_eq!((with.shared, with.out_of_order), (0, 0));
    assert!(
        with.newest_refused * 2 < without.newest_refused,
        "{with:?} vs {without:?}"
    );
}

#[derive(Debug, Default)]
struct FenceCountsSum {
    shared: u64,
    out_of_order: u64,
    newest_refused: u64,
}

impl FenceCountsSum {
    fn add(&mut self, out: &Outcome) {
        self.shared += out.fence.shared_token_accepted;
        self.out_of_order +=
            out.fence.out_of_order_same_token + out.fence.out_of_order_higher_token;
        self.newest_refused += out.fence.newest_grant_refused;
    }
}

#[test]
fn no_faults_all_properties_including_liveness() {
    run_mix("none", SimConfig::new(|_| Faults::none()), true);
}

#[test]
fn network_delay_drop_duplicate_reorder() {
    run_mix("network", SimConfig::new(|o| Faults::network(o.ttl)), true);
}

#[test]
fn process_pauses_are_caught_by_the_fence() {
    let t = run_mix("pauses", SimConfig::new(|o| Faults::pauses(o.ttl)), true);
    assert!(
        t.refused > 0,
        "pauses past the TTL produced stale writes, and the fence refused them"
    );
}

#[test]
fn clock_drift_within_the_declared_bound() {
    run_mix("drift", SimConfig::new(Faults::drift), true);
}

#[test]
fn partitions() {
    run_mix(
        "partitions",
        SimConfig::new(|o| Faults::partitions(o.ttl)),
        true,
    );
}

#[test]
fn every_in_model_fault_at_once() {
    run_mix("all", SimConfig::new(Faults::all), true);
}

#[test]
fn beyond_the_model_violations_are_explained_and_the_fence_holds() {
    for (name, cfg) in [
        ("drift-beyond", SimConfig::new(Faults::drift_beyond)),
        (
            "server-restarts",
            SimConfig::new(|_| Faults::server_restarts()),
        ),
    ] {
        // expect_clean: only unexplained violations fail — S1 at the fence never is explained
        let t = run_mix(name, cfg, true);
        assert!(
            t.explained > 0,
            "{name}: the breach should show up as explained violations"
        );
    }
}

fn fair(mut cfg: SimConfig) -> SimConfig {
    cfg.fair = true;
    cfg
}

#[test]
fn fair_hand_off_without_faults_keeps_liveness() {
    run_mix("fair-none", fair(SimConfig::new(|_| Faults::none())), true);
}

#[test]
fn fair_hand_off_under_every_in_model_fault() {
    run_mix("fair-all", fair(SimConfig::new(Faults::all)), true);
}

#[test]
fn the_same_seed_replays_the_same_schedule() {
    let cfg = SimConfig::new(Faults::all);
    let a: Outcome = Simulation::new(cfg.clone(), 42).with_trace().run();
    let b: Outcome = Simulation::new(cfg, 42).with_trace().run();
    assert!(a.trace.len() > 20);
    assert_eq!(a, b);
}

#[test]
fn the_checker_catches_validity_measured_from_the_reply() {
    let mut cfg = SimConfig::new(|o| Faults::network(o.ttl));
    cfg.sabotage.validity_from_reply = true;
    let found = (0..10_000u64).find_map(|seed| {
        let out = Simulation::new(cfg.clone(), seed).run();
        let first = out.unexplained().next().map(|v| (seed, v.property));
        first
    });
    let (seed, property) = found.expect("a broken rule 1 must be caught within 10,000 schedules");
    assert_eq!(property, Property::S2, "seed {seed}");
    eprintln!("rule 1 sabotaged: caught at seed {seed} as {property}");
}

// ---- etcd ------------------------------------------------------------------------------

/// Schedules per etcd mix: a tenth of the Redis budget (1,000 by default). An etcd
/// schedule costs several Redis ones in the dev profile (the backend parses JSON replies
/// with serde_json, which the dev profile builds unoptimized), so this keeps the etcd
/// mixes to about 10 s of `cargo test`; `scripts/sim --mix etcd` runs them at scale.
fn etcd_budget() -> u64 {
    (budget() / 10).max(1)
}

fn run_etcd_mix(name: &str, cfg: SimConfig) -> Totals {
    run_mix_n(name, cfg.etcd(), true, etcd_budget())
}

#[test]
fn etcd_without_faults_all_properties_including_liveness() {
    let t = run_etcd_mix("etcd-none", SimConfig::new(|_| Faults::none()));
    // three clients, three cycles each, every schedule
    assert_eq!(t.grants, 9 * t.schedules);
}

#[test]
fn etcd_process_pauses_are_caught_by_the_fence() {
    let t = run_etcd_mix("etcd-pauses", SimConfig::new(|o| Faults::pauses(o.ttl)));
    assert!(
        t.refused > 0,
        "pauses past the TTL produced stale writes, refused"
    );
}

#[test]
fn etcd_every_in_model_fault_at_once() {
    run_etcd_mix("etcd-all", SimConfig::new(Faults::all));
}

#[test]
fn etcd_leader_failovers_are_inside_the_model() {
    let cfg = SimConfig::new(|_| Faults::server_restarts());
    assert!(cfg.clone().etcd().within_model());
    let t = run_etcd_mix("etcd-failovers", cfg);
    assert_eq!(
        t.explained, 0,
        "a failover keeps the data: nothing to explain away"
    );
    assert!(t.grants > 0);
}

#[test]
fn etcd_drift_beyond_the_bound_is_explained() {
    let t = run_etcd_mix("etcd-drift-beyond", SimConfig::new(Faults::drift_beyond));
    assert!(
        t.explained > 0,
        "the breach should show up as explained violations"
    );
}

#[test]
fn etcd_shared_lease_without_faults_all_properties_including_liveness() {
    let t = run_mix_n(
        "etcd-shared-none",
        SimConfig::new(|_| Faults::none()).etcd_shared(),
        true,
        etcd_budget(),
    );
    assert_eq!(t.grants, 9 * t.schedules);
}

#[test]
fn etcd_shared_lease_every_in_model_fault_at_once() {
    // successive acquisitions of a client reuse its session, find it gone after pauses
    // and partitions, and start new ones: never a holder the server does not back
    let t = run_mix_n(
        "etcd-shared-all",
        SimConfig::new(Faults::all).etcd_shared(),
        true,
        etcd_budget(),
    );
    assert!(t.grants > 0);
}

#[test]
fn etcd_the_checker_catches_validity_measured_from_the_reply() {
    let mut cfg = SimConfig::new(|o| Faults::network(o.ttl)).etcd();
    cfg.sabotage.validity_from_reply = true;
    let found = (0..10_000u64).find_map(|seed| {
        let out = Simulation::new(cfg.clone(), seed).run();
        let first = out.unexplained().next().map(|v| (seed, v.property));
        first
    });
    let (seed, property) = found.expect("a broken rule 1 must be caught within 10,000 schedules");
    assert_eq!(property, Property::S2, "seed {seed}");
    eprintln!("etcd, rule 1 sabotaged: caught at seed {seed} as {property}");
}

// ---- ZooKeeper -------------------------------------------------------------------------

/// Schedules per ZooKeeper mix: the etcd budget (the replies are JSON too).
#[cfg(feature = "zookeeper")]
fn run_zk_mix(name: &str, cfg: SimConfig) -> Totals {
    run_mix_n(name, cfg.zookeeper(), true, etcd_budget())
}

#[test]
#[cfg(feature = "zookeeper")]
fn zk_without_faults_all_properties_including_liveness() {
    let t = run_zk_mix("zk-none", SimConfig::new(|_| Faults::none()));
    assert_eq!(t.grants, 9 * t.schedules);
}

#[test]
#[cfg(feature = "zookeeper")]
fn zk_process_pauses_expire_the_session_and_are_caught_by_the_fence() {
    let t = run_zk_mix("zk-pauses", SimConfig::new(|o| Faults::pauses(o.ttl)));
    assert!(
        t.refused > 0,
        "pauses past the session produced stale writes, refused"
    );
}

#[test]
#[cfg(feature = "zookeeper")]
fn zk_every_in_model_fault_at_once() {
    run_zk_mix("zk-all", SimConfig::new(Faults::all));
}

#[test]
#[cfg(feature = "zookeeper")]
fn zk_leader_failovers_are_inside_the_model() {
    let cfg = SimConfig::new(|_| Faults::server_restarts());
    assert!(cfg.clone().zookeeper().within_model());
    let t = run_zk_mix("zk-failovers", cfg);
    assert_eq!(
        t.explained, 0,
        "a failover keeps the data: nothing to explain away"
    );
    assert!(t.grants > 0);
}

#[test]
#[cfg(feature = "zookeeper")]
fn zk_drift_beyond_the_bound_is_explained() {
    let t = run_zk_mix("zk-drift-beyond", SimConfig::new(Faults::drift_beyond));
    assert!(
        t.explained > 0,
        "the breach should show up as explained violations"
    );
}

// ---- Kubernetes Lease ------------------------------------------------------------------

/// Schedules per Kubernetes mix: the etcd budget (the replies are JSON too).
#[cfg(feature = "kubernetes")]
fn run_kube_mix(name: &str, cfg: SimConfig) -> Totals {
    run_mix_n(name, cfg.kubernetes(), true, etcd_budget())
}

#[test]
#[cfg(feature = "kubernetes")]
fn kube_without_faults_all_properties_including_liveness() {
    let t = run_kube_mix("kube-none", SimConfig::new(|_| Faults::none()));
    assert_eq!(t.grants, 9 * t.schedules);
}

#[test]
#[cfg(feature = "kubernetes")]
fn kube_process_pauses_are_taken_over_and_caught_by_the_fence() {
    let t = run_kube_mix("kube-pauses", SimConfig::new(|o| Faults::pauses(o.ttl)));
    assert!(
        t.refused > 0,
        "pauses past the lease duration produced stale writes, refused"
    );
}

#[test]
#[cfg(feature = "kubernetes")]
fn kube_network_faults_and_partitions() {
    run_kube_mix("kube-network", SimConfig::new(|o| Faults::network(o.ttl)));
    run_kube_mix(
        "kube-partitions",
        SimConfig::new(|o| Faults::partitions(o.ttl)),
    );
}

#[test]
#[cfg(feature = "kubernetes")]
fn kube_clock_drift_within_the_declared_bound() {
    run_kube_mix("kube-drift", SimConfig::new(Faults::drift));
}

#[test]
#[cfg(feature = "kubernetes")]
fn kube_every_in_model_fault_at_once() {
    run_kube_mix("kube-all", SimConfig::new(Faults::all));
}

#[test]
#[cfg(feature = "kubernetes")]
fn kube_api_server_restarts_are_inside_the_model() {
    let cfg = SimConfig::new(|_| Faults::server_restarts());
    assert!(cfg.clone().kubernetes().within_model());
    let t = run_kube_mix("kube-restarts", cfg);
    assert_eq!(
        t.explained, 0,
        "a restart keeps the Leases: nothing to explain away"
    );
    assert!(t.grants > 0);
}

#[test]
#[cfg(feature = "kubernetes")]
fn kube_the_checker_catches_validity_measured_from_the_reply() {
    let mut cfg = SimConfig::new(|o| Faults::network(o.ttl)).kubernetes();
    cfg.sabotage.validity_from_reply = true;
    let found = (0..10_000u64).find_map(|seed| {
        let out = Simulation::new(cfg.clone(), seed).run();
        let first = out.unexplained().next().map(|v| (seed, v.property));
        first
    });
    let (seed, property) = found.expect("a broken rule 1 must be caught within 10,000 schedules");
    assert_eq!(property, Property::S2, "seed {seed}");
    eprintln!("kubernetes, rule 1 sabotaged: caught at seed {seed} as {property}");
}

// ---- PostgreSQL lease rows -------------------------------------------------------------

/// Schedules per PostgreSQL mix: the etcd budget (1,000 by default).
fn run_pg_mix(name: &str, cfg: SimConfig) -> Totals {
    run_mix_n(name, cfg.postgres(), true, etcd_budget())
}

#[test]
fn pg_without_faults_all_properties_including_liveness() {
    let t = run_pg_mix("pg-none", SimConfig::new(|_| Faults::none()));
    // three clients, three cycles each, every schedule
    assert_eq!(t.grants, 9 * t.schedules);
}

#[test]
fn pg_network_delay_drop_duplicate_reorder() {
    run_pg_mix("pg-network", SimConfig::new(|o| Faults::network(o.ttl)));
}

#[test]
fn pg_process_pauses_are_caught_by_the_fence() {
    let t = run_pg_mix("pg-pauses", SimConfig::new(|o| Faults::pauses(o.ttl)));
    assert!(
        t.refused > 0,
        "pauses past the TTL produced stale writes, refused"
    );
}

#[test]
fn pg_every_in_model_fault_at_once() {
    run_pg_mix("pg-all", SimConfig::new(Faults::all));
}

#[test]
fn pg_restarts_keep_the_rows_and_are_inside_the_model() {
    let cfg = SimConfig::new(|_| Faults::server_restarts());
    assert!(cfg.clone().postgres().within_model());
    let t = run_pg_mix("pg-restarts", cfg);
    assert_eq!(
        t.explained, 0,
        "a restart keeps the rows: nothing to explain away"
    );
    assert!(t.grants > 0);
}

#[test]
fn pg_drift_beyond_the_bound_is_explained() {
    let t = run_pg_mix("pg-drift-beyond", SimConfig::new(Faults::drift_beyond));
    assert!(
        t.explained > 0,
        "the breach should show up as explained violations"
    );
}

#[test]
fn pg_the_checker_catches_validity_measured_from_the_reply() {
    let mut cfg = SimConfig::new(|o| Faults::network(o.ttl)).postgres();
    cfg.sabotage.validity_from_reply = true;
    let found = (0..10_000u64).find_map(|seed| {
        let out = Simulation::new(cfg.clone(), seed).run();
        let first = out.unexplained().next().map(|v| (seed, v.property));
        first
    });
    let (seed, property) = found.expect("a broken rule 1 must be caught within 10,000 schedules");
    assert_eq!(property, Property::S2, "seed {seed}");
    eprintln!("postgres, rule 1 sabotaged: caught at seed {seed} as {property}");
}

// ---- Redlock: five in-memory masters -----------------------------------------------

/// Schedules per Redlock mix: a twentieth of the Redis budget (500 by default; each
/// schedule runs five masters and five times the requests, about 20 s per mix in the
/// dev profile); `scripts/sim --mix redlock` runs them at scale.
fn redlock_budget() -> u64 {
    (budget() / 20).max(1)
}

fn run_redlock_mix(name: &str, cfg: SimConfig, mix: RedlockMix) -> Totals {
    run_mix_n(name, cfg.redlock(mix), true, redlock_budget())
}

#[test]
fn redlock_without_faults_all_properties_including_liveness() {
    let t = run_redlock_mix(
        "redlock-none",
        SimConfig::new(|_| Faults::none()),
        RedlockMix::new(5),
    );
    // three clients, three cycles each, every schedule
    assert_eq!(t.grants, 9 * t.schedules);
}

#[test]
fn redlock_under_every_in_model_fault_at_once() {
    let faults = |o: &fencepost_core::LockOptions| Faults {
        p_server_restart: 0.3,
        ..Faults::all(o)
    };
    let mix = RedlockMix {
        pauses: true,
        restarts: MasterRestart::Delayed,
        ..RedlockMix::new(5)
    };
    let t = run_redlock_mix("redlock-all", SimConfig::new(faults), mix);
    assert_eq!(t.explained, 0);
    assert!(t.grants > 0);
}

#[test]
fn redlock_restarts_with_persistence_or_delayed_are_inside_the_model() {
    for restarts in [MasterRestart::Persistent, MasterRestart::Delayed] {
        let mix = RedlockMix {
            restarts,
            ..RedlockMix::new(5)
        };
        let cfg = SimConfig::new(|_| Faults::server_restarts());
        assert!(cfg.clone().redlock(mix).within_model());
        let t = run_redlock_mix("redlock-restarts", cfg, mix);
        assert_eq!(t.explained, 0, "{restarts:?}");
        assert!(t.grants > 0);
    }
}

#[test]
fn redlock_masters_restarting_without_persistence_at_once_are_explained() {
    let mix = RedlockMix {
        restarts: MasterRestart::Amnesiac,
        ..RedlockMix::new(5)
    };
    let cfg = SimConfig::new(|_| Faults::server_restarts());
    assert!(!cfg.clone().redlock(mix).within_model());
    let t = run_redlock_mix("redlock-restarts-amnesiac", cfg, mix);
    assert!(
        t.explained > 0,
        "a master that forgets its keys and votes again must show up as explained violations"
    );
}

#[test]
fn redlock_the_checker_catches_validity_measured_from_the_reply() {
    let mut cfg = SimConfig::new(|o| Faults::network(o.ttl)).redlock(RedlockMix::new(5));
    cfg.sabotage.validity_from_reply = true;
    let found = (0..10_000u64).find_map(|seed| {
        let out = Simulation::new(cfg.clone(), seed).run();
        let first = out.unexplained().next().map(|v| (seed, v.property));
        first
    });
    let (seed, property) = found.expect("a broken rule 1 must be caught within 10,000 schedules");
    assert_eq!(property, Property::S2, "seed {seed}");
    eprintln!("redlock, rule 1 sabotaged: caught at seed {seed} as {property}");
}
