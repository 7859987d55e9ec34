//! Property tests: random schedules of inputs, honest or garbage, never panic the
//! machine, never break the event grammar, and on an honest network never let a
//! client believe it holds a lease the server does not hold for it.

mod support;

use std::collections::HashMap;

use fencepost_core::{Event, LockId, Operation, RedisValue, Reply};
use proptest::prelude::*;
use support::*;

#[derive(Clone, Debug)]
enum Step {
    Acquire {
        client: usize,
        timeout_ms: Option<u64>,
    },
    Release {
        client: usize,
        pick: usize,
    },
    Deliver {
        client: usize,
        pick: usize,
        twice: bool,
    },
    ApplyOnly {
        client: usize,
        pick: usize,
    },
    Fail {
        client: usize,
        pick: usize,
    },
    Drop {
        client: usize,
        pick: usize,
    },
    Garbage {
        client: usize,
        pick: usize,
        value: RedisValue,
    },
    Advance {
        ms: u64,
    },
}

fn redis_value() -> impl Strategy<Value = RedisValue> {
    let leaf = prop_oneof![
        Just(RedisValue::Nil),
        any::<i64>().prop_map(RedisValue::Int),
        (-2i64..3).prop_map(RedisValue::Int),
        ".{0,8}".prop_map(RedisValue::Data),
        ".{0,8}".prop_map(RedisValue::Status),
        prop_oneof![
            Just("LOADING x"),
            Just("WRONGTYPE y"),
            Just(""),
            Just("NOSCRIPT")
        ]
        .prop_map(|s| RedisValue::Error(s.to_owned())),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop::collection::vec(inner, 0..3).prop_map(RedisValue::Array)
    })
}

fn step(garbage: bool) -> impl Strategy<Value = Step> {
    let c = 0usize..2;
    let p = 0usize..8;
    let honest = prop_oneof![
        2 => (c.clone(), prop::option::of(0u64..2_000)).prop_map(|(client, timeout_ms)| Step::Acquire { client, timeout_ms }),
        1 => (c.clone(), p.clone()).prop_map(|(client, pick)| Step::Release { client, pick }),
        6 => (c.clone(), p.clone(), prop::bool::weighted(0.1)).prop_map(|(client, pick, twice)| Step::Deliver { client, pick, twice }),
        1 => (c.clone(), p.clone()).prop_map(|(client, pick)| Step::ApplyOnly { client, pick }),
        1 => (c.clone(), p.clone()).prop_map(|(client, pick)| Step::Fail { client, pick }),
        1 => (c.clone(), p.clone()).prop_map(|(client, pick)| Step::Drop { client, pick }),
        4 => (0u64..700).prop_map(|ms| Step::Advance { ms }),
    ];
    if garbage {
        prop_oneof![
            4 => honest,
            1 => (c, p, redis_value()).prop_map(|(client, pick, value)| Step::Garbage { client, pick, value }),
        ]
        .boxed()
    } else {
        honest.boxed()
    }
}

/// Per lock: Acquired at most once and first; nothing after a final event.
#[derive(Default)]
struct Grammar {
    acquired: bool,
    finished: bool,
}

fn run(steps: Vec<Step>, check_validity: bool) {
    let mut t = Timeline::redis(2);
    let mut now = 0u64;
    let mut locks: [Vec<LockId>; 2] = [Vec::new(), Vec::new()];
    let mut grammar: HashMap<(usize, LockId), Grammar> = HashMap::new();
    let mut held: HashMap<(usize, LockId), fencepost_core::Instant> = HashMap::new();
    let mut last_token = 0u64;
    t.at(0);
    for s in steps {
        match s {
            Step::Acquire { client, timeout_ms } => {
                let mut o = opts(1_000);
                o.acquire_timeout = timeout_ms.map(ms);
                locks[client].push(t.acquire(client, "r", o));
            }
            Step::Release { client, pick } => {
                if let Some(&l) = locks[client].get(pick % locks[client].len().max(1)) {
                    let _ = t.clients[client].machine.release(t.now, l);
                    t.at(now);
                }
            }
            Step::Deliver {
                client,
                pick,
                twice,
            } => {
                let n = t.clients[client].pending.len();
                if n > 0 {
                    let req = t.clients[client].pending.remove(pick % n);
                    let reply = t.apply(&req);
                    t.reply(client, &req, reply.clone());
                    if twice {
                        t.apply(&req);
                        t.reply(client, &req, reply);
                    }
                }
            }
            Step::ApplyOnly { client, pick } => {
                let n = t.clients[client].pending.len();
                if n > 0 {
                    let req = t.clients[client].pending.remove(pick % n);
                    t.apply(&req);
                    t.fail(client, &req);
                }
            }
            Step::Fail { client, pick } => {
                let n = t.clients[client].pending.len();
                if n > 0 {
                    let req = t.clients[client].pending.remove(pick % n);
                    t.fail(client, &req);
                }
            }
            Step::Drop { client, pick } => {
                let n = t.clients[client].pending.len();
                if n > 0 {
                    t.clients[client].pending.remove(pick % n);
                }
            }
            Step::Garbage {
                client,
                pick,
                value,
            } => {
                let n = t.clients[client].pending.len();
                if n > 0 {
                    let req = t.clients[client].pending.remove(pick % n);
                    t.reply(client, &req, Reply::Redis(value));
                }
            }
            Step::Advance { ms } => {
                now += ms;
                t.at(now);
            }
        }
        for c in 0..2 {
            for (lock, event) in t.clients[c].events.drain(..) {
                let g = grammar.entry((c, lock)).or_default();
                assert!(!g.finished, "event after the final one: {event:?}");
                match event {
                    Event::Acquired {
                        token, valid_until, ..
                    } => {
                        assert!(!g.acquired, "acquired twice");
                        g.acquired = true;
                        if check_validity {
                            assert!(token.get() > last_token, "token {token} after {last_token}");
                            last_token = token.get();
                        }
                        held.insert((c, lock), valid_until);
                    }
                    Event::Renewed { valid_until } => {
                        assert!(g.acquired, "renewed before acquired");
                        held.insert((c, lock), valid_until);
                    }
                    Event::Lost { .. } | Event::Released | Event::AcquireFailed { .. } => {
                        g.finished = true;
                        held.remove(&(c, lock));
                    }
                }
            }
        }
        if check_validity {
            // S2: while a client believes it holds a lease, the server holds it for it.
            for &(c, lock) in held.keys() {
                // the machine's own belief (none while releasing)
                let Some(valid_until) = t.clients[c].machine.valid_until(lock) else {
                    continue;
                };
                if t.now < valid_until {
                    let Some(owner) = t.clients[c].machine.owner(lock) else {
                        continue;
                    };
                    assert_eq!(
                        t.holder("r"),
                        Some(owner.to_string()),
                        "client {c} lock {lock} believes it holds until {valid_until}, now {}",
                        t.now
                    );
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn honest_network_keeps_local_validity_conservative(steps in prop::collection::vec(step(false), 1..120)) {
        run(steps, true);
    }

    #[test]
    fn garbage_replies_never_panic_or_break_the_event_grammar(steps in prop::collection::vec(step(true), 1..120)) {
        run(steps, false);
    }
}

#[test]
fn cancelling_a_waiter_leaves_the_holder_alone() {
    // Sanity for the property: a renew or release for a stranger's owner changes nothing.
    let mut t = Timeline::redis(2);
    t.at(0);
    t.acquire(0, "r", opts(1_000));
    t.serve(0, Operation::Acquire);
    let b = t.acquire(1, "r", opts(1_000));
    t.serve(1, Operation::Acquire);
    t.release(1, b); // B was only waiting: released without a request
    t.expect_event(1, Event::Released);
    t.expect_no_request(1);
    let a_owner = t.clients[0].machine.owner(LockId(1)).unwrap();
    assert_eq!(t.holder("r"), Some(a_owner.to_string()));
}
