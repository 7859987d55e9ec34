//! Runs N uncontended lock cycles (acquire → held → renew → release) for an
//! instruction count under callgrind, which is stable where wall-clock time is not.
//!
//! usage: cargo run --release -p fencepost-core --example cycle_count -- memory|memory-fair|memory-observed|canned N
//!        cargo run --release -p fencepost-core --example cycle_count -- fleet LEASES N
//!
//! `fleet LEASES N`: a machine holding LEASES leases takes N timer steps (one renewal
//! each), for instructions per step as the number of leases grows.
//!
//! `scripts/bench` runs it under `valgrind --tool=callgrind` with two values of N and
//! divides the difference in instructions by the difference in N, so start-up and
//! set-up (recording the canned replies) cancel out.

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
        [mode, leases, n] if mode == "fleet" => {
            let (leases, n) = (number(leases), number(n));
            let mut fleet = Fleet::new(leases);
            let before = fleet.tally.renewed;
            for _ in 0..n {
                fleet.step();
            }
            assert_eq!(fleet.tally.renewed - before, n, "one renewal per step");
            black_box(&fleet.machine);
            println!("fleet of {leases}: {n} timer steps");
        }
        _ => usage(),
    }
}

fn usage() -> ! {
    eprintln!("usage: cycle_count memory|memory-fair|memory-observed|canned N | cycle_count fleet LEASES N");
    std::process::exit(2)
}
