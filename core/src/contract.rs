//! The machine contract as an oracle, checked after every input (feature `contract`,
//! test-only): the fuzz targets (`core/fuzz/`) and the model checker ([`crate::model`])
//! feed machines through a [`Contract`].
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

use crate::js_outputs::{encode_output, FlatValue};
use crate::{Event, Input, Instant, LockId, Machine, Operation, Output, Request, UsageError};

#[derive(Clone, Debug, Default)]
struct Grammar {
    acquired: bool,
    finished: bool,
}

/// A machine under the contract: feed it with [`Contract::feed`] (which panics at a
/// breach, for the fuzzer) or [`Contract::try_feed`] (which returns it); both check
/// every output drained. The requests it emitted wait in [`Contract::pending`], the
/// events in [`Contract::events`].
#[derive(Clone)]
pub struct Contract {
    /// The machine under test. Inputs fed to it directly bypass the contract's checks.
    pub machine: Machine,
    /// The host's clock, in nanoseconds, for generators that keep one ([`Contract::at`]).
    pub now: u64,
    /// The time of the last accepted input: an input before it must be refused.
    last: Instant,
    /// Requests emitted and not yet taken, in emission order.
    pub pending: Vec<Request>,
    /// Events emitted and not yet taken, in emission order.
    pub events: Vec<(LockId, Event)>,
    /// The machine's timer after the last drain (`None`: idle), on the host's clock.
    pub next_timeout: Option<Instant>,
    grammar: HashMap<LockId, Grammar>,
}

impl Contract {
    /// `machine` under the contract, the host's clock at `now` nanoseconds.
    pub fn new(machine: Machine, now: u64) -> Self {
        Contract {
            machine,
            now,
            last: Instant::ZERO,
            pending: Vec::new(),
            events: Vec::new(),
            next_timeout: None,
            grammar: HashMap::new(),
        }
    }

    /// The host's clock as an [`Instant`].
    pub fn at(&self) -> Instant {
        Instant::from_nanos(self.now)
    }

    /// Feeds `input` and drains the outputs; whether it was accepted. Panics with the
    /// breach of the contract, if any.
    pub fn feed(&mut self, input: Input) -> bool {
        self.try_feed(input)
            .unwrap_or_else(|breach| panic!("{breach}"))
    }

    /// Drains the outputs, checking each. Panics with the breach of the contract, if any.
    pub fn drain(&mut self) {
        self.try_drain().unwrap_or_else(|breach| panic!("{breach}"))
    }

    /// [`Contract::feed`] returning the breach (a sentence) instead of panicking.
    pub fn try_feed(&mut self, input: Input) -> Result<bool, String> {
        let before = (self.machine.lock_count(), self.machine.requests_in_flight());
        let at = input.now();
        let backwards = at < self.last;
        let accepted = match self.machine.handle_input(input) {
            Ok(()) => {
                if backwards {
                    return Err("an input from the past was accepted".into());
                }
                self.last = at;
                true
            }
            Err(e) => {
                if backwards && !matches!(e, UsageError::TimeWentBackwards { .. }) {
                    return Err(format!("time went backwards, but: {e:?}"));
                }
                let after = (self.machine.lock_count(), self.machine.requests_in_flight());
                if before != after {
                    return Err(format!("a rejected input ({e:?}) changed the machine"));
                }
                if !matches!(
                    self.machine.poll_output(),
                    Output::Timeout(_) | Output::Idle
                ) {
                    return Err(format!("a rejected input ({e:?}) emitted an output"));
                }
                false
            }
        };
        self.try_drain()?;
        Ok(accepted)
    }

    /// [`Contract::drain`] returning the breach instead of panicking.
    pub fn try_drain(&mut self) -> Result<(), String> {
        loop {
            let output = self.machine.poll_output();
            check_flat(&output);
            match output {
                Output::Request(req) => {
                    if !(req.deadline >= self.last && req.deadline < Instant::MAX) {
                        return Err(format!(
                            "request {req:?} without a deadline after now {}",
                            self.last
                        ));
                    }
                    if let Some(g) = self.grammar.get(&req.lock) {
                        if g.finished && req.operation != Operation::Release {
                            return Err(format!(
                                "after the final event only an owner-checked release: {req:?}"
                            ));
                        }
                    }
                    self.pending.push(req);
                }
                Output::Event { lock, event } => {
                    self.event(lock, &event)?;
                    self.events.push((lock, event));
                }
                Output::Timeout(at) => {
                    self.next_timeout = Some(at);
                    break;
                }
                Output::Idle => {
                    self.next_timeout = None;
                    break;
                }
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
        Ok(())
    }

    fn event(&mut self, lock: LockId, event: &Event) -> Result<(), String> {
        let now = self.last;
        let g = self.grammar.entry(lock).or_default();
        if g.finished {
            return Err(format!("{lock}: {event:?} after the final event"));
        }
        match event {
            Event::Acquired { valid_until, .. } => {
                if g.acquired {
                    return Err(format!("{lock}: acquired twice"));
                }
                if *valid_until <= now {
                    return Err(format!("{lock}: acquired with its validity passed"));
                }
                g.acquired = true;
            }
            Event::Renewed { valid_until } => {
                if !g.acquired {
                    return Err(format!("{lock}: renewed before acquired"));
                }
                if *valid_until <= now {
                    return Err(format!("{lock}: renewed with its validity passed"));
                }
            }
            Event::Lost { .. } => {
                if !g.acquired {
                    return Err(format!("{lock}: lost before acquired"));
                }
                g.finished = true;
            }
            Event::Released | Event::AcquireFailed { .. } => g.finished = true,
        }
        Ok(())
    }

    /// Feeds the contract's own state (the machine's, the grammar per lock, the last
    /// input's time) to `h` canonically; the pending requests and events are not
    /// included (their taker keeps them). For the model checker's state hash.
    #[cfg(feature = "model")]
    pub(crate) fn fingerprint(&self, h: &mut impl core::hash::Hasher) {
        use core::hash::Hash;
        self.machine.fingerprint(h);
        self.last.hash(h);
        let mut grammar: Vec<_> = (self.grammar.iter())
            .map(|(l, g)| (*l, g.acquired, g.finished))
            .collect();
        grammar.sort();
        grammar.hash(h);
    }
}

/// The flat record of `output` read back, as `js/machine.js` reads it. Panics where it
/// does not read back (the encoding is the core's own, not a host's input).
pub fn check_flat(output: &Output) {
    let mut slots: Vec<FlatValue> = Vec::new();
    let owner = crate::OwnerId([0x5a; 16]);
    let ok: std::result::Result<(), ()> = encode_output(output, Some(owner), &mut |v| {
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
            assert!(ns(num(4)).abs_diff(req.deadline.as_nanos()) <= 1, "{req:?}");
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
                    let hex = owner.to_string();
                    assert_eq!(slots.get(5), Some(&FlatValue::Text(hex.as_str().into())));
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
