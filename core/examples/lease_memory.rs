//! Bytes of heap per held lease: a counting global allocator around the system one,
//! and a machine holding n leases (n = 1 000, 10 000, 100 000 by default).
//!
//! usage: cargo run --release -p fencepost-core --example lease_memory -- [--json] [N…]
//!
//! For each n: live heap bytes of the machine after n leases were granted, divided by
//! n; then again after every lease was renewed once (stale timer entries included), the
//! steady state of a long-running host. Replies are canned (recorded from the in-memory
//! server before counting starts), so only the machine's own allocations are counted.
//! `--json` prints one JSON object per line for `scripts/bench`.

#[path = "../benches/support/mod.rs"]
mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use support::{record_replies, Fleet, Server};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to `System` unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Relaxed);
            grew(new_size);
        }
        p
    }
}

fn grew(size: usize) {
    ALLOCATIONS.fetch_add(1, Relaxed);
    let live = LIVE.fetch_add(size, Relaxed) + size;
    PEAK.fetch_max(live, Relaxed);
}

#[global_allocator]
static GLOBAL: Counting = Counting;

struct Measure {
    n: u64,
    held: usize,
    held_allocations: usize,
    renewed: usize,
    peak: usize,
}

fn measure(n: u64) -> Measure {
    let server = Server::Canned(record_replies());
    let base = LIVE.load(Relaxed);
    let base_allocations = ALLOCATIONS.load(Relaxed);
    PEAK.store(base, Relaxed);
    let mut fleet = Fleet::with_server(n, server);
    let held = LIVE.load(Relaxed) - base;
    let held_allocations = ALLOCATIONS.load(Relaxed) - base_allocations;
    fleet.renew_each_once();
    let renewed = LIVE.load(Relaxed) - base;
    let peak = PEAK.load(Relaxed) - base;
    assert_eq!(fleet.machine.lock_count() as u64, n);
    drop(fleet);
    Measure {
        n,
        held,
        held_allocations,
        renewed,
        peak,
    }
}

fn main() {
    let mut json = false;
    let mut sizes = Vec::new();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--json" => json = true,
            n => sizes.push(n.parse::<u64>().unwrap_or_else(|_| {
                eprintln!("usage: lease_memory [--json] [N…]  (bad N: {n:?})");
                std::process::exit(2)
            })),
        }
    }
    if sizes.is_empty() {
        sizes = vec![1_000, 10_000, 100_000];
    }
    if !json {
        println!("leases  bytes/lease held  allocs/lease  bytes/lease after one renewal each  peak bytes/lease");
    }
    for n in sizes {
        let m = measure(n);
        let per = |b: usize| b as f64 / m.n as f64;
        if json {
            println!(
                "{{\"n\": {}, \"bytes_per_lease\": {:.1}, \"allocations_per_lease\": {:.2}, \"bytes_per_lease_after_renewal\": {:.1}, \"peak_bytes_per_lease\": {:.1}}}",
                m.n,
                per(m.held),
                per(m.held_allocations),
                per(m.renewed),
                per(m.peak)
            );
        } else {
            println!(
                "{:>6}  {:>16.1}  {:>12.2}  {:>35.1}  {:>16.1}",
                m.n,
                per(m.held),
                per(m.held_allocations),
                per(m.renewed),
                per(m.peak)
            );
        }
    }
}
