//! Runs N uncontended lock cycles (acquire → held → renew → release) for an
//! instruction count under callgrind, which is stable where wall-clock time is not.
//!
//! usage: cargo run --release -p fencepost-core --example cycle_count -- memory|memory-fair|memory-observed|canned N
//!        cargo run --release -p fencepost-core --example cycle_count -- fleet LEASES ROUNDS
//!
//! `fleet LEASES ROUNDS`: a machine holding LEASES leases renews every one of them
//! ROUNDS times (batched timer steps), and prints how many renewals that took, for
//! instructions per renewal as the number of leases grows.
//!
//! `scripts/bench` runs it under `valgrind --tool=callgrind` with two values of N (or
//! ROUNDS) and divides the difference in instructions by the difference in cycles (or
//! renewals), so start-up and set-up (recording the canned replies, the fleet's
//! acquisitions) cancel out.

#[path = "../benches/support/mod.rs"]
mod support;

use std::hint::black_box;

use support::{Cycle, Fleet};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |s: &String| s.parse::<u64>().unwrap_or_else(|_| usage());
    match args.as_slice() {
        [mode, n]
            if ["memory", "memory-fair", "memory-observed", "canned"].contains(&mode.as_str()) =>
        {
            let n = number(n);
            let mut cycle = match mode.as_str() {
                "memory" => Cycle::memory(),
                "memory-fair" => Cycle::memory_fair(),
                "memory-observed" => Cycle::memory_observed(),
                _ => Cycle::canned(),
            };
            for _ in 0..n {
                cycle.run();
            }
            cycle.check(n);
            black_box(&cycle.machine);
            println!("{mode}: {n} cycles");
        }
        [mode, leases, rounds] if mode == "fleet" => {
            let (leases, rounds) = (number(leases), number(rounds));
            let mut fleet = Fleet::new(leases);
            let renewed: u64 = (0..rounds).map(|_| fleet.renew_each_once()).sum();
            assert_eq!(fleet.machine.lock_count() as u64, leases, "all still held");
            black_box(&fleet.machine);
            // bench/run.py reads the renewal count from this line
            println!("fleet of {leases}: {rounds} rounds, {renewed} renewals");
        }
        _ => usage(),
    }
}

fn usage() -> ! {
    eprintln!("usage: cycle_count memory|memory-fair|memory-observed|canned N | cycle_count fleet LEASES ROUNDS");
    std::process::exit(2)
}
