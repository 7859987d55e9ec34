//! The etcd reply readers on arbitrary text: the fenced-transaction, holder and revoke
//! readers, and the machine reading the text as the reply to each step of an acquire
//! (after the steps before it were answered by the in-memory etcd). A reader returns a
//! `ProtocolError` for what it cannot read; the machine never grants on a reply it could
//! not read as a grant, and never panics.
#![no_main]

use std::time::Duration;

use fencepost_core::backends::etcd::{read_etcd_fenced_txn, read_etcd_holder, read_etcd_revoke};
use fencepost_core::backends::EtcdBackend;
use fencepost_core::memory::MemoryEtcd;
use fencepost_core::{Backend, Event, Input, Instant, LockOptions, Machine, Output, Reply};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = read_etcd_fenced_txn(&text);
    let _ = read_etcd_holder(&text);
    let _ = read_etcd_revoke(&text);
    for stage in 0..4 {
        acquire_with(&text, stage);
    }
});

/// Acquires on an honest in-memory etcd, answering the first `stage` requests honestly
/// and the next one with `text`.
fn acquire_with(text: &str, stage: usize) {
    let mut etcd = MemoryEtcd::new();
    let mut m = Machine::with_seed(Backend::Etcd(EtcdBackend::default()), 7);
    let now = Instant::from_millis(1_000);
    let options = LockOptions::ttl(Duration::from_secs(5));
    m.acquire(now, "a", options).expect("valid acquire");
    let mut answered = 0;
    loop {
        let req = loop {
            match m.poll_output() {
                Output::Request(req) => break req,
                Output::Event {
                    event: Event::Acquired { valid_until, .. },
                    ..
                } => {
                    assert!(valid_until > now, "acquired with its validity passed");
                }
                Output::Event { .. } => {}
                Output::Timeout(_) | Output::Idle => return,
            }
        };
        let reply = if answered == stage {
            Reply::Etcd(text.to_owned())
        } else {
            etcd.execute(now, &req.body)
        };
        m.handle_input(Input::Reply {
            now,
            request: req.id,
            reply,
        })
        .expect("a reply in time");
        answered += 1;
        if answered > stage + 8 {
            return; // bounded: the text was read (or refused) long ago
        }
    }
}
