//! The machine contract, checked after every input by the fuzz targets (`fuzz_targets/`).
//!
//! Checked (docs/DESIGN.md, "The machine contract" and the safety rules):
//! - no `Acquired` or `Renewed` whose validity has already passed (rule 1);
//! - per lock, the event grammar: at most one `Acquired`, `Renewed` only while held,
//!   `Lost` only after `Acquired`, nothing after the final event;
//! - after `Lost`, `Released` or `AcquireFailed` the machine sends nothing for that lock
//!   but an owner-checked release (cleanup);
//! - every request has a deadline, not before the instant it was emitted (rule 10);
//! - an input whose time went backwards is a `TimeWentBackwards` usage error and changes
//!   nothing; so is any other rejected input;
//! - the flat output encoding (`js_outputs`) of every output reads back as the output.

use std::collections::HashMap;

use fencepost_core::js_outputs::{encode_output, FlatValue};
use fencepost_core::{
    Event, Input, Instant, LockId, Machine, Operation, Output, Request, UsageError,
};

#[derive(Default)]
struct Grammar {
    acquired: bool,
    finished: bool,
}

/// A machine under the contract: feed it with [`Contract::feed`], which checks every
/// output it drains; the requests it emitted wait in [`Contract::pending`].
pub struct Contract {
    pub machine: Machine,
    /// The host's clock, in nanoseconds, for generators that keep one ([`Contract::at`]).
    pub now: u64,
    /// The time of the last accepted input: an input before it must be refused.
    last: Instant,
    /// Requests emitted and not yet answered, in emission order.
    pub pending: Vec<Request>,
    grammar: HashMap<LockId, Grammar>,
}

impl Contract {
    pub fn new(machine: Machine, now: u64) -> Self {
        Contract {
            machine,
            now,
            last: Instant::ZERO,
            pending: Vec::new(),
            grammar: HashMap::new(),
        }
    }

    pub fn at(&self) -> Instant {
        Instant::from_nanos(self.now)
    }

    /// Feeds `input` (whether it was accepted); a rejected input must change nothing.
    pub fn feed(&mut self, input: Input) -> bool {
        let before = (self.machine.lock_count(), self.machine.requests_in_flight());
        let at = input.now();
        let backwards = at < self.last;
        let accepted = match self.machine.handle_input(input) {
            Ok(()) => {
                assert!(!backwards, "an input from the past was accepted");
                self.last = at;
                true
            }
            Err(e) => {
                if backwards {
                    assert!(
                        matches!(e, UsageError::TimeWentBackwards { .. }),
                        "time went backwards, but: {e:?}"
                    );
                }
                let after = (self.machine.lock_count(), self.machine.requests_in_flight());
                assert_eq!(
                    before, after,
                    "a rejected input ({e:?}) changed the machine"
                );
                assert!(
                    matches!(
                        self.machine.poll_output(),
                        Output::Timeout(_) | Output::Idle
                    ),
                    "a rejected input ({e:?}) emitted an output"
                );
                false
            }
        };
        self.drain();
        accepted
    }

    pub fn drain(&mut self) {
        loop {
            let output = self.machine.poll_output();
            check_flat(&output);
            match output {
                Output::Request(req) => {
                    assert!(
                        req.deadline >= self.last && req.deadline < Instant::MAX,
                        "request {req:?} without a deadline after now {}",
                        self.last
                    );
                    if let Some(g) = self.grammar.get(&req.lock) {
                        if g.finished {
                            assert_eq!(
                                req.operation,
                                Operation::Release,
                                "after the final event only an owner-checked release: {req:?}"
                            );
                        }
                    }
                    self.pending.push(req);
                }
                Output::Event { lock, event } => self.event(lock, event),
                Output::Timeout(_) | Output::Idle => break,
            }
        }
        // an observing machine's observations: their rendering never panics
        while let Some(o) = self.machine.poll_observation() {
            let _ = (
                o.observation.level(),
                o.observation.fields(),
                o.observation.message(&o.name),
            );
        }
    }

    fn event(&mut self, lock: LockId, event: Event) {
        let now = self.last;
        let g = self.grammar.entry(lock).or_default();
        assert!(!g.finished, "{lock}: {event:?} after the final event");
        match event {
            Event::Acquired { valid_until, .. } => {
                assert!(!g.acquired, "{lock}: acquired twice");
                assert!(
                    valid_until > now,
                    "{lock}: acquired with its validity passed"
                );
                g.acquired = true;
            }
            Event::Renewed { valid_until } => {
                assert!(g.acquired, "{lock}: renewed before acquired");
                assert!(
                    valid_until > now,
                    "{lock}: renewed with its validity passed"
                );
            }
            Event::Lost { .. } => {
                assert!(g.acquired, "{lock}: lost before acquired");
                g.finished = true;
            }
            Event::Released | Event::AcquireFailed { .. } => g.finished = true,
        }
    }
}

/// The flat record of `output` read back, as `js/machine.js` reads it.
pub fn check_flat(output: &Output) {
    let mut slots: Vec<FlatValue> = Vec::new();
    let ok: std::result::Result<(), ()> = encode_output(output, &mut |v| {
        slots.push(v);
        Ok(())
    });
    assert!(ok.is_ok());
    let num = |i: usize| match slots.get(i) {
        Some(FlatValue::Number(n)) => *n,
        other => panic!("slot {i} of {output:?} is {other:?}, not a number"),
    };
    let ns = |ms: f64| (ms * 1e6).round() as u64;
    match output {
        Output::Timeout(_) | Output::Idle => assert!(slots.is_empty()),
        Output::Request(req) => {
            assert_eq!(num(0), 0.0);
            assert_eq!(num(1), req.id.0 as f64);
            assert_eq!(num(2), req.lock.0 as f64);
            assert_eq!(
                ns(num(4)).abs_diff(req.deadline.as_nanos()) <= 1,
                true,
                "{req:?}"
            );
            for slot in &slots {
                if let FlatValue::Number(n) = slot {
                    assert!(n.is_finite(), "{output:?}: a slot is {n}");
                }
            }
        }
        Output::Event { lock, event } => {
            assert_eq!(num(1), lock.0 as f64);
            match event {
                Event::Acquired {
                    token, valid_until, ..
                } => {
                    assert_eq!(num(0), 1.0);
                    assert_eq!(slots.get(2), Some(&FlatValue::Token(token.get())));
                    assert!(ns(num(3)).abs_diff(valid_until.as_nanos()) <= 1);
                }
                Event::Renewed { valid_until } => {
                    assert_eq!(num(0), 2.0);
                    assert!(ns(num(2)).abs_diff(valid_until.as_nanos()) <= 1);
                }
                Event::Lost { .. } => assert_eq!(num(0), 3.0),
                Event::Released => assert_eq!(num(0), 4.0),
                Event::AcquireFailed { .. } => assert_eq!(num(0), 5.0),
            }
        }
    }
}
