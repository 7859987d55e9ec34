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
//! * `timer_step/{1000,10000,100000}` — a machine holding n leases; the cost of one
//!   lease's renewal in its timer steps (timer fires, the leases due within half a
//!   renew interval join, one batched request per 500, reply, `Renewed` each, next
//!   wakeup). Flat or logarithmic in n is the contract (DESIGN.md: timers O(log n) or
//!   better; the joiners' scan is O(n) per step, shared by the step's renewals).
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

/// One lease's renewal in a fleet of n held leases: batched timer steps, timed until
/// at least as many renewals as criterion asks for, the time scaled to exactly that many.
fn timer_step(c: &mut Criterion) {
    let mut group = c.benchmark_group("timer_step");
    group.throughput(Throughput::Elements(1));
    for n in [1_000u64, 10_000, 100_000] {
        let mut fleet = Fleet::new(n);
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter_custom(|renewals| {
                let before = fleet.tally.renewed;
                let started = std::time::Instant::now();
                while fleet.tally.renewed - before < renewals {
                    fleet.step();
                }
                let took = started.elapsed();
                let done = fleet.tally.renewed - before;
                took.mul_f64(renewals as f64 / done as f64)
            })
        });
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
