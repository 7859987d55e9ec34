#![cfg(feature = "kubernetes")]
//! A Kubernetes Lease takeover against a stopped holder, with both clocks at the edges
//! of the declared drift bound (`drift_factor` 1 %): the holder's 1 % slow, the
//! candidate's 1 % fast, every request answered at once by `MemoryKubernetes`.
//!
//! The holder's validity is `0 + 1000 × 0.99 − 2 = 988` ms on its clock, 988 / 0.99 =
//! 997.98 ms of true time. The candidate first sees the holder's version at true 0 and
//! takes over once it stayed unchanged for `leaseDurationSeconds` (1 s) on its own
//! clock: 1000 / 1.01 = 990.10 ms of true time, while the holder still believes in its
//! lease (S2) — unless the candidate waits `duration × (1 + drift_factor)`: 1010 ms
//! on its clock, 1000 ms of true time, after the holder's belief ended
//! (`docs/DESIGN.md`, "Decisions about Kubernetes Lease").

use core::time::Duration;

use fencepost_core::backends::KubernetesBackend;
use fencepost_core::memory::MemoryKubernetes;
use fencepost_core::{Backend, Input, Instant, LockOptions, Machine, Output, Reply, RequestBody};

fn options() -> LockOptions {
    let mut o = LockOptions::ttl(Duration::from_secs(1));
    o.retry_base = Duration::from_millis(10);
    o.retry_max = Duration::from_millis(200);
    o
}

/// Serves every request `m` emits at once, at `true_ms`, on a clock running at `rate`;
/// returns the methods sent and the machine's next timer.
fn pump(
    m: &mut Machine,
    k: &mut MemoryKubernetes,
    true_ms: f64,
    rate: f64,
) -> (Vec<String>, Option<Instant>) {
    let mut sent = Vec::new();
    loop {
        match m.poll_output() {
            Output::Request(r) => {
                let RequestBody::Kubernetes(call) = &r.body else {
                    panic!("{r:?}")
                };
                sent.push(call.method.clone());
                let reply = k.call(Instant::from_nanos((true_ms * 1e6) as u64), call);
                let now = Instant::from_nanos((true_ms * rate * 1e6) as u64);
                let reply = Reply::Kubernetes(reply);
                (m.handle_input(Input::Reply {
                    now,
                    request: r.id,
                    reply,
                }))
                .unwrap();
            }
            Output::Event { .. } => {}
            Output::Timeout(t) => return (sent, Some(t)),
            Output::Idle => return (sent, None),
        }
    }
}

#[test]
fn a_takeover_waits_out_the_holders_validity_with_clocks_at_the_drift_bound() {
    let (holder_rate, candidate_rate) = (0.99, 1.01);
    let mut k = MemoryKubernetes::new();
    let backend = Backend::Kubernetes(KubernetesBackend::default());
    let mut holder = Machine::with_seed(backend.clone(), 1);
    let lock = holder.acquire(Instant::ZERO, "r", options()).unwrap();
    pump(&mut holder, &mut k, 0.0, holder_rate);
    // then the holder's process stops: it renews no more
    let believed_ms = holder.valid_until(lock).unwrap().as_nanos() as f64 / 1e6 / holder_rate;
    let mut candidate = Machine::with_seed(backend, 2);
    candidate.acquire(Instant::ZERO, "r", options()).unwrap();
    let (_, mut timer) = pump(&mut candidate, &mut k, 0.0, candidate_rate);
    let mut takeover_ms = None;
    while let Some(local) = timer.filter(|_| takeover_ms.is_none()) {
        let true_ms = local.as_nanos() as f64 / 1e6 / candidate_rate;
        assert!(true_ms < 3_000.0, "no takeover within 3 s");
        candidate
            .handle_input(Input::Timeout { now: local })
            .unwrap();
        let (sent, next) = pump(&mut candidate, &mut k, true_ms, candidate_rate);
        if sent.iter().any(|m| m == "PUT") {
            takeover_ms = Some(true_ms);
        }
        timer = next;
    }
    let takeover_ms = takeover_ms.expect("the candidate takes over");
    assert!(
        takeover_ms >= believed_ms,
        "the takeover was sent at {takeover_ms:.3} ms, the holder believes until {believed_ms:.3} ms"
    );
}
