//! Timeline tests of the observations (`Machine::observe`): each event's fields, and
//! each warning's trigger. Numbers are the story's; arithmetic in comments.

mod support;

use core::time::Duration;

use fencepost_core::memory::MemoryRedis;
use fencepost_core::{
    Event, FencingToken, LostReason, Observation, ObserveOptions, Operation, UsageError,
};
use support::*;

use Operation::{Acquire, Release, Renew};

/// A Redis timeline whose clients observe with `options`.
fn observing(n: usize, options: ObserveOptions) -> Timeline<MemoryRedis> {
    let mut t = Timeline::redis(n);
    for c in &mut t.clients {
        c.machine.observe(Some(options)).expect("valid options");
    }
    t
}

/// Drains client `c`'s observations (the lock names must all be `name`).
fn observed(t: &mut Timeline<MemoryRedis>, c: usize) -> Vec<Observation> {
    t.clients[c]
        .observed
        .drain(..)
        .map(|o| o.observation)
        .collect()
}

/// Fails every `op` request client 0 sends until `end` ms, the `n`-th with `error(n)`,
/// following its timers; returns how many failed.
fn fail_until(
    t: &mut Timeline<MemoryRedis>,
    op: Operation,
    end: u64,
    error: impl Fn(usize) -> &'static str,
) -> usize {
    let mut failed = 0;
    while t.now < at(end) {
        while let Some(r) = t.clients[0].pending.iter().position(|r| r.operation == op) {
            let r = t.clients[0].pending.remove(r);
            t.fail_with(0, &r, error(failed));
            failed += 1;
        }
        let Some(next) = t.clients[0].next_timeout else {
            break;
        };
        t.at_instant(next);
    }
    failed
}

fn warnings(t: &mut Timeline<MemoryRedis>, c: usize) -> Vec<Observation> {
    observed(t, c)
        .into_iter()
        .filter(Observation::is_warning)
        .collect()
}

#[test]
fn a_cycle_reports_acquiring_acquired_renewed_and_released_with_their_numbers() {
    let mut t = observing(1, ObserveOptions::default());
    t.at(0);
    t.acquire(0, "report", opts(1_000));
    t.at(2).serve(0, Acquire);
    t.at(334).serve(0, Renew); // renew at 333.3; sent and confirmed at 334
    t.at(400);
    let lock = fencepost_core::LockId(1);
    t.release(0, lock);
    t.serve(0, Release);
    assert_eq!(
        observed(&mut t, 0),
        vec![
            Observation::Acquiring,
            Observation::Acquired {
                token: FencingToken(1),
                waited: ms(2),
                attempts: 1,
            },
            // valid until 334 + 988 = 1322, confirmed at 334
            Observation::Renewed {
                validity_left: ms(988),
            },
            // granted at 2, released at 400
            Observation::Released {
                held_for: Some(ms(398)),
            },
        ]
    );
    assert_eq!(t.clients[0].observed.len(), 0);
}

#[test]
fn observations_carry_the_lock_name_fields_and_a_message() {
    let mut t = observing(1, ObserveOptions::default());
    t.at(0);
    t.acquire(0, "report", opts(1_000));
    t.at(2).serve(0, Acquire);
    let o = t.clients[0].observed.pop().expect("acquired");
    assert_eq!((o.lock.0, o.name.as_str()), (1, "report"));
    assert_eq!(o.observation.name(), "acquired");
    assert_eq!(
        o.observation.fields(),
        vec![
            ("token", fencepost_core::Field::Token(FencingToken(1))),
            ("waited", fencepost_core::Field::Duration(ms(2))),
            ("attempts", fencepost_core::Field::Count(1)),
        ]
    );
    assert_eq!(
        o.observation.message("report"),
        "lock \"report\": acquired with token 1 after 2ms (1 attempt)"
    );
}

#[test]
fn a_machine_that_does_not_observe_builds_no_observation() {
    let mut t = Timeline::redis(1);
    t.at(0);
    t.acquire(0, "report", opts(1_000));
    t.at(2).serve(0, Acquire);
    let renew = t.at(334).take(0, Renew);
    t.fail(0, &renew);
    t.at(988); // lost
    assert!(t.clients[0].observed.is_empty());
    // and one that stops observing builds none from then on
    let mut t = observing(1, ObserveOptions::default());
    t.at(0);
    t.acquire(0, "a", opts(1_000));
    t.clients[0].machine.observe(None).unwrap();
    t.at(2).serve(0, Acquire);
    assert_eq!(observed(&mut t, 0), vec![Observation::Acquiring]);
}

#[test]
fn a_failing_renewal_reports_the_error_the_retry_and_the_deadline_then_the_loss() {
    let mut t = observing(1, ObserveOptions::default());
    t.at(0);
    t.acquire(0, "report", opts(1_000));
    t.at(2).serve(0, Acquire);
    observed(&mut t, 0);
    let renew = t.at(336).take(0, Renew);
    t.fail(0, &renew);
    assert_eq!(
        observed(&mut t, 0),
        vec![
            Observation::BackendError {
                operation: Renew,
                error: "connection reset".into(),
            },
            Observation::RenewalFailing {
                error: "connection reset".into(),
                // a quarter of the renew interval: 333.3 / 4
                retry_in: Duration::from_nanos(83_333_333),
                // valid until 988
                deadline_in: ms(652),
            },
        ]
    );
    while t.now < at(988) {
        let next = t.clients[0].next_timeout.expect("a timer");
        t.at_instant(next);
        while t.has_pending(0, Renew) {
            let r = t.take(0, Renew);
            t.fail(0, &r);
        }
    }
    let last = observed(&mut t, 0).pop();
    assert_eq!(
        last,
        Some(Observation::Lost {
            reason: LostReason::Expired,
            held_for: Some(ms(986)), // granted at 2, lost at 988
        })
    );
}

#[test]
fn an_acquire_timeout_reports_the_wait_the_attempts_and_the_last_error() {
    let mut t = observing(2, ObserveOptions::default());
    t.at(0);
    t.acquire(1, "report", opts(10_000));
    t.serve(1, Acquire);
    let mut o = opts(1_000);
    o.acquire_timeout = Some(ms(0));
    t.at(5);
    t.acquire(0, "report", o);
    t.at(7).serve(0, Acquire);
    assert_eq!(
        observed(&mut t, 0),
        vec![
            Observation::Acquiring,
            Observation::AcquireTimedOut {
                waited: ms(2),
                attempts: 1,
                last_error: None,
            },
        ]
    );
}

#[test]
fn acquired_after_contention_counts_every_attempt_and_the_whole_wait() {
    let mut t = observing(2, ObserveOptions::default());
    t.at(0);
    let holder = t.acquire(1, "report", opts(10_000));
    t.serve(1, Acquire);
    t.acquire(0, "report", opts(1_000));
    t.serve(0, Acquire); // found held
    t.at(500);
    t.release(1, holder);
    t.serve(1, Release);
    t.run_until(2_000);
    let acquired = observed(&mut t, 0)
        .into_iter()
        .find(|o| matches!(o, Observation::Acquired { .. }))
        .expect("acquired once the holder released");
    let granted_at = t.clients[0]
        .sent
        .iter()
        .filter(|(_, r)| r.operation == Acquire)
        .map(|(at, _)| *at)
        .next_back()
        .unwrap();
    let attempts = t.clients[0]
        .sent
        .iter()
        .filter(|(_, r)| r.operation == Acquire)
        .count() as u32;
    assert!(attempts >= 2);
    assert_eq!(
        acquired,
        Observation::Acquired {
            token: FencingToken(2),
            waited: granted_at.saturating_duration_since(at(0)),
            attempts,
        }
    );
}

#[test]
fn a_release_that_finds_the_key_gone_reports_the_loss_with_the_hold_time() {
    let mut t = observing(1, ObserveOptions::default());
    t.at(0);
    let lock = t.acquire(0, "report", opts(1_000));
    t.at(1).serve(0, Acquire);
    t.server.delete(&t.lock_key("report"));
    t.at(101).release(0, lock);
    t.serve(0, Release);
    assert_eq!(
        observed(&mut t, 0).pop(),
        Some(Observation::Lost {
            reason: LostReason::NotHeldAtRelease,
            held_for: Some(ms(100)),
        })
    );
}

#[test]
fn cancelling_before_a_grant_reports_released_without_a_hold_time() {
    let mut t = observing(2, ObserveOptions::default());
    t.at(0);
    t.acquire(1, "report", opts(10_000));
    t.serve(1, Acquire);
    let lock = t.acquire(0, "report", opts(1_000));
    t.serve(0, Acquire); // found held: backing off
    t.release(0, lock);
    assert_eq!(
        observed(&mut t, 0).pop(),
        Some(Observation::Released { held_for: None })
    );
}

// ---- warnings ------------------------------------------------------------------------

#[test]
fn renewal_late_when_less_than_a_third_of_the_validity_is_left() {
    let mut t = observing(1, ObserveOptions::default());
    let mut o = opts(1_000);
    o.renew_every = Some(ms(700)); // validity 988: a third is 329.3
    t.at(0);
    t.acquire(0, "report", o);
    t.serve(0, Acquire);
    let renew = t.at(700).take(0, Renew);
    let reply = t.apply(&renew);
    t.at(710).reply(0, &renew, reply); // 988 − 710 = 278 left
    assert_eq!(
        warnings(&mut t, 0),
        vec![Observation::RenewalLate {
            validity_left: ms(278),
            validity: ms(988),
        }]
    );
    // the next renewal, sent at 1400 and confirmed at once, had 1688 − 1400 = 288 left
    // (still late: renew_every is what to change)
    t.at(1_400).serve(0, Renew);
    assert_eq!(warnings(&mut t, 0).len(), 1);
}

#[test]
fn no_renewal_late_with_the_default_schedule() {
    let mut t = observing(1, ObserveOptions::default());
    t.at(0);
    t.acquire(0, "report", opts(1_000));
    t.serve(0, Acquire);
    let renew = t.at(334).take(0, Renew);
    let reply = t.apply(&renew);
    t.at(600).reply(0, &renew, reply); // 988 − 600 = 388 left, above 329.3
    assert_eq!(warnings(&mut t, 0), vec![]);
    let strict = ObserveOptions {
        late_renewal_fraction: 0.5, // 494: 388 is late now
        ..ObserveOptions::default()
    };
    t.clients[0].machine.observe(Some(strict)).unwrap();
    let renew = t.at(934).take(0, Renew);
    let reply = t.apply(&renew);
    t.at(1_300).reply(0, &renew, reply); // valid until 334 + 988 = 1322: 22 left
    assert_eq!(
        warnings(&mut t, 0),
        vec![Observation::RenewalLate {
            validity_left: ms(22),
            validity: ms(988),
        }]
    );
}

#[test]
fn held_long_once_a_lease_is_held_ten_ttls() {
    let mut t = observing(1, ObserveOptions::default());
    t.at(0);
    t.acquire(0, "report", opts(1_000));
    t.run_until(9_900);
    assert_eq!(warnings(&mut t, 0), vec![]);
    t.run_until(30_000);
    let w = warnings(&mut t, 0);
    assert_eq!(w.len(), 1, "once per lease: {w:?}");
    let Observation::HeldLong { held_for, ttl } = w[0] else {
        panic!("{w:?}")
    };
    // the first renewal confirmed at or after 10 000
    assert!(
        held_for >= ms(10_000) && held_for < ms(10_400),
        "{held_for:?}"
    );
    assert_eq!(ttl, ms(1_000));
}

#[test]
fn held_long_follows_its_threshold_and_zero_turns_it_off() {
    let three = ObserveOptions {
        held_long_ttls: 3,
        ..ObserveOptions::default()
    };
    let mut t = observing(1, three);
    t.at(0);
    t.acquire(0, "report", opts(1_000));
    t.run_until(3_500);
    assert!(matches!(
        warnings(&mut t, 0).as_slice(),
        [Observation::HeldLong { .. }]
    ));
    let off = ObserveOptions {
        held_long_ttls: 0,
        ..ObserveOptions::default()
    };
    let mut t = observing(1, off);
    t.at(0);
    t.acquire(0, "report", opts(1_000));
    t.run_until(20_000);
    assert_eq!(warnings(&mut t, 0), vec![]);
}

#[test]
fn hot_lock_when_an_acquisition_finds_the_lock_held_by_many_holders() {
    let mut waiting = opts(1_000);
    waiting.acquire_timeout = Some(ms(20_000));
    waiting.retry_max = ms(200);
    // one holder for the whole story, renewed: a long hold, however many attempts
    // find it, is no contention
    let mut t = observing(2, ObserveOptions::default());
    t.at(0);
    t.acquire(1, "report", opts(60_000));
    t.serve(1, Acquire);
    t.acquire(0, "report", waiting.clone());
    t.run_until(21_000);
    let all = observed(&mut t, 0);
    let Some(Observation::AcquireTimedOut { attempts, .. }) = all
        .iter()
        .find(|o| matches!(o, Observation::AcquireTimedOut { .. }))
        .cloned()
    else {
        panic!("{all:?}")
    };
    assert!(attempts >= 10, "{attempts}");
    assert_eq!(warnings(&mut t, 0), vec![]);
    assert!(!all.iter().any(Observation::is_warning), "{all:?}");
    // twelve holders in turn, each for a second, the lock handed from one to the next
    // between two attempts: twelve found
    let mut t = observing(2, ObserveOptions::default());
    t.at(0);
    let mut holder = t.acquire(1, "report", opts(60_000));
    t.serve(1, Acquire);
    t.acquire(0, "report", waiting);
    for i in 1..12 {
        t.run_until(i * 1_000);
        t.release(1, holder);
        t.serve(1, Release);
        holder = t.acquire(1, "report", opts(60_000));
        t.serve(1, Acquire);
    }
    t.run_until(21_000);
    let w: Vec<_> = observed(&mut t, 0)
        .into_iter()
        .filter(Observation::is_warning)
        .collect();
    assert_eq!(
        w,
        vec![Observation::HotLock {
            found_held: Some(12),
            waiters: None,
        }]
    );
    // a grant after a few contended attempts is not hot
    let mut t = observing(2, ObserveOptions::default());
    t.at(0);
    let holder = t.acquire(1, "report", opts(10_000));
    t.serve(1, Acquire);
    t.acquire(0, "report", opts(1_000));
    t.serve(0, Acquire);
    t.release(1, holder);
    t.run_until(5_000);
    assert_eq!(warnings(&mut t, 0), vec![]);
}

#[test]
fn hot_lock_when_ten_acquisitions_of_one_name_wait_in_one_machine() {
    let mut t = observing(1, ObserveOptions::default());
    t.at(0);
    for _ in 0..12 {
        t.acquire(0, "report", opts(1_000));
        t.acquire(0, "other", opts(1_000));
    }
    let w: Vec<_> = t.clients[0]
        .observed
        .drain(..)
        .filter(|o| o.observation.is_warning())
        .map(|o| (o.lock.0, o.name, o.observation))
        .collect();
    // the 10th acquisition of each name crosses the threshold, once
    let hot = |n: u32| Observation::HotLock {
        found_held: None,
        waiters: Some(n),
    };
    assert_eq!(
        w,
        vec![
            (19, "report".to_owned(), hot(10)),
            (20, "other".to_owned(), hot(10)),
        ]
    );
}

#[test]
fn server_unreachable_every_thirty_seconds_while_acquire_timeout_is_unlimited() {
    let mut t = observing(1, ObserveOptions::default());
    t.at(0);
    let mut o = opts(1_000);
    o.retry_max = ms(2_000);
    t.acquire(0, "report", o.clone());
    // with a timeout the same failures never warn
    o.acquire_timeout = Some(ms(100_000));
    t.acquire(0, "bounded", o);
    fail_until(&mut t, Acquire, 75_000, |_| "connection refused");
    let w: Vec<_> = t.clients[0]
        .observed
        .drain(..)
        .filter(|o| o.observation.is_warning())
        .collect();
    assert_eq!(w.len(), 2, "at 30 s and 60 s: {w:?}");
    for (i, o) in w.iter().enumerate() {
        assert_eq!(o.name, "report");
        let Observation::ServerUnreachable {
            unreachable_for,
            attempts,
            last_error,
        } = &o.observation
        else {
            panic!("{o:?}")
        };
        let since = ms(30_000 * (i as u64 + 1));
        // the first failure at 0; reported at the first failure 30 s after the last report
        assert!(
            *unreachable_for >= since && *unreachable_for < since + ms(2_100),
            "{unreachable_for:?}"
        );
        assert!(*attempts > 10);
        assert_eq!(last_error.as_deref(), Some("connection refused"));
        assert!(o
            .observation
            .message("report")
            .contains("set acquire_timeout"));
    }
}

#[test]
fn warnings_and_events_switch_off_separately_and_thresholds_are_checked() {
    let only_warnings = ObserveOptions {
        events: false,
        held_long_ttls: 2,
        ..ObserveOptions::default()
    };
    let mut t = observing(1, only_warnings);
    t.at(0);
    t.acquire(0, "report", opts(1_000));
    t.run_until(3_000);
    let all = observed(&mut t, 0);
    assert!(
        !all.is_empty() && all.iter().all(Observation::is_warning),
        "{all:?}"
    );
    // and the events logged at warning level: renewals failing, then the loss
    t.at(3_334);
    fail_until(&mut t, Renew, 5_000, |_| "connection reset");
    let levels: Vec<_> = observed(&mut t, 0)
        .iter()
        .map(|o| (o.name(), o.level()))
        .collect();
    assert!(
        levels.iter().all(|(_, level)| *level == "warning"),
        "{levels:?}"
    );
    assert!(
        levels.contains(&("renewal_failing", "warning")),
        "{levels:?}"
    );
    assert!(levels.contains(&("lost", "warning")), "{levels:?}");

    let mut t = Timeline::redis(1);
    let m = &mut t.clients[0].machine;
    let bad = ObserveOptions {
        late_renewal_fraction: 1.5,
        ..ObserveOptions::default()
    };
    let err = m.observe(Some(bad)).unwrap_err();
    assert!(
        matches!(&err, UsageError::InvalidOption { option, .. } if option == "late_renewal_fraction"),
        "{err}"
    );
    let bad = ObserveOptions {
        unreachable_every: Duration::ZERO,
        ..ObserveOptions::default()
    };
    assert!(m.observe(Some(bad)).is_err());
    // the events are the machine's own, observed or not
    t.at(0);
    t.acquire(0, "report", opts(1_000));
    t.at(2).serve(0, Acquire);
    assert!(matches!(t.events(0).as_slice(), [Event::Acquired { .. }]));
}

#[test]
fn an_outage_alternating_two_errors_reports_the_latest_and_the_first_only() {
    let mut t = observing(1, ObserveOptions::default());
    t.at(0);
    let mut o = opts(1_000);
    o.acquire_timeout = Some(ms(60_000));
    o.retry_max = ms(20);
    t.acquire(0, "report", o);
    let failures = fail_until(&mut t, Acquire, 61_000, |n| {
        if n % 2 == 0 {
            "connection refused"
        } else {
            "no reply in time"
        }
    });
    assert!(failures > 100, "{failures}");
    let last = observed(&mut t, 0).into_iter().find_map(|o| match o {
        Observation::AcquireTimedOut { last_error, .. } => last_error,
        _ => None,
    });
    let last = last.expect("timed out with the errors");
    // the latest, and the first: never the chain of every alternation
    assert!(
        last == "no reply in time (earlier: connection refused)" || last == "connection refused",
        "{last}"
    );
}

#[test]
fn an_error_that_quotes_an_earlier_one_is_reported_whole() {
    let mut t = observing(1, ObserveOptions::default());
    t.at(0);
    let mut o = opts(1_000);
    o.acquire_timeout = Some(ms(100));
    o.retry_max = ms(20);
    t.acquire(0, "report", o);
    // a client's own error may carry the words the report joins its errors with
    fail_until(&mut t, Acquire, 200, |n| {
        if n == 0 {
            "connection refused (earlier: no route to host)"
        } else {
            "no reply in time"
        }
    });
    let last = observed(&mut t, 0).into_iter().find_map(|o| match o {
        Observation::AcquireTimedOut { last_error, .. } => last_error,
        _ => None,
    });
    assert_eq!(
        last.as_deref(),
        Some("no reply in time (earlier: connection refused (earlier: no route to host))")
    );
}

#[test]
fn messages_show_durations_to_the_microsecond_or_from_a_second_on_the_millisecond() {
    let lost = Observation::Lost {
        reason: LostReason::Expired,
        held_for: Some(Duration::from_nanos(1_500_834_452)),
    };
    assert_eq!(
        lost.message("r"),
        "lock \"r\": lost (expired) after being held for 1.501s"
    );
    let acquired = |waited| Observation::Acquired {
        token: FencingToken(3),
        waited,
        attempts: 2,
    };
    for (waited, shown) in [
        (Duration::from_nanos(1_250_400), "1.25ms"),
        (Duration::from_nanos(250_400), "250µs"),
        (Duration::from_nanos(999_999_700), "1s"),
        (Duration::ZERO, "0ns"),
    ] {
        assert_eq!(
            acquired(waited).message("r"),
            format!("lock \"r\": acquired with token 3 after {shown} (2 attempts)")
        );
    }
    // the fields keep the exact duration
    assert_eq!(
        lost.fields(),
        vec![
            ("reason", fencepost_core::Field::Text("expired")),
            (
                "held_for",
                fencepost_core::Field::Duration(Duration::from_nanos(1_500_834_452))
            ),
        ]
    );
}
