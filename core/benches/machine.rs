//! Criterion benchmarks of the lock machine (run by `cargo bench -p fencepost-core`, or
//! by `scripts/bench`; never by `cargo test`).
//!
//! * `cycle/memory_redis` — one acquire → held → renew → release cycle through
//!   `handle_input` / `poll_output` against the in-memory Redis (`memory::MemoryRedis`).
//! * `cycle/memory_redis_fair` — the same with fair hand-off on (`RedisBackend::fair`):
//!   the queue-aware acquire and release scripts, nobody waiting.
//! * `cycle/memory_redis_observed` — `cycle/memory_redis` with an observer attached
//!   (`Machine::observe`, events and warnings, every observation drained): beside
//!   `cycle/memory_redis` (none attached) it is the A/B of the observations' cost.
//! * `cycle/canned` — the same cycle with replies recorded once and replayed: the
//!   machine alone.
//! * `timer_step/{1000,10000,100000}` — a machine holding n leases; one timer step
//!   (one renewal due: timer fires, renew request, reply, `Renewed`, next wakeup).
//!   Flat or logarithmic in n is the contract (DESIGN.md: timers O(log n) or better).
//!
//! Instruction counts (callgrind) and bytes per lease are separate binaries:
//! `examples/cycle_count.rs`, `examples/lease_memory.rs`.

mod support;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;

use support::{Cycle, Fleet};

fn cycle(c: &mut Criterion) {
    let mut group = c.benchmark_group("cycle");
    group.throughput(Throughput::Elements(1));
    for (label, make) in [
        ("memory_redis", Cycle::memory as fn() -> Cycle),
        ("memory_redis_fair", Cycle::memory_fair),
        ("memory_redis_observed", Cycle::memory_observed),
        ("canned", Cycle::canned as fn() -> Cycle),
    ] {
        let mut cycle = make();
        let mut runs = 0u64;
        group.bench_function(label, |b| {
            b.iter(|| {
                cycle.run();
                runs += 1;
            })
        });
        cycle.check(runs);
        black_box(&cycle.machine);
    }
    group.finish();
}

fn timer_step(c: &mut Criterion) {
    let mut group = c.benchmark_group("timer_step");
    group.throughput(Throughput::Elements(1));
    for n in [1_000u64, 10_000, 100_000] {
        let mut fleet = Fleet::new(n);
        let renewed_before = fleet.tally.renewed;
        let mut steps = 0u64;
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| {
                fleet.step();
                steps += 1;
            })
        });
        assert_eq!(
            fleet.tally.renewed - renewed_before,
            steps,
            "every step renews exactly one lease"
        );
        assert_eq!(
            fleet.machine.lock_count() as u64,
            n,
            "all {n} leases still held"
        );
    }
    group.finish();
}

criterion_group!(benches, cycle, timer_step);
criterion_main!(benches);
