//! The core's observations as `tracing` spans and events (target `"fencepost"`).
//!
//! Each acquisition is a span `fencepost.lock` (fields `lock`, `lock_id`) from its
//! `acquiring` to its end (`released`, `lost`, `acquire_timed_out`, `acquire_failed`);
//! each observation is an event in it, at the core's level (`debug`, `info`, `warn`),
//! with the field `event` (the core's name), the core's fields under the core's names
//! (durations as `f64` seconds, tokens and counts as `u64`, the rest as strings) and the
//! core's message. A client observes while a subscriber is interested in the target
//! `fencepost` at INFO (events) or WARN (warnings) when it is made.

use std::collections::HashMap;

use fencepost_core::{Field, LockId, Observation, ObserveOptions, Observed};
use tracing::{Level, Span};

/// What a client made now should observe: `base` (the thresholds, and whether events
/// and warnings are wanted at all) narrowed to the subscriber's interest; `None` for
/// nothing.
pub(crate) fn wanted(base: ObserveOptions) -> Option<ObserveOptions> {
    let events = base.events && tracing::enabled!(target: "fencepost", Level::INFO);
    let warnings = base.warnings
        && (tracing::enabled!(target: "fencepost", Level::INFO)
            || tracing::enabled!(target: "fencepost", Level::WARN));
    (events || warnings).then_some(ObserveOptions {
        events,
        warnings,
        ..base
    })
}

/// The driver's observer: a span per acquisition, an event per observation.
pub(crate) fn observer() -> fencepost_core::driver::Observer {
    let mut spans: HashMap<LockId, Span> = HashMap::new();
    Box::new(move |o: Observed| {
        let span = spans
            .entry(o.lock)
            .or_insert_with(|| {
                tracing::info_span!(target: "fencepost", "fencepost.lock", lock = %o.name, lock_id = o.lock.0)
            })
            .clone();
        span.in_scope(|| emit(&o));
        if is_final(&o.observation) {
            spans.remove(&o.lock);
        }
    })
}

/// Whether `o` is a lock's last observation (released, lost, acquire failed).
pub(crate) fn is_final(o: &Observation) -> bool {
    matches!(
        o,
        Observation::Released { .. }
            | Observation::Lost { .. }
            | Observation::AcquireTimedOut { .. }
            | Observation::AcquireFailed { .. }
    )
}

/// One field's value as `tracing` records it.
enum Value<'a> {
    Seconds(f64),
    Number(u64),
    Text(&'a str),
}

fn value<'a>(field: Option<&Field<'a>>) -> Option<Value<'a>> {
    field.map(|f| match *f {
        Field::Duration(d) => Value::Seconds(d.as_secs_f64()),
        Field::Count(n) => Value::Number(n),
        Field::Token(t) => Value::Number(t.get()),
        Field::Text(s) => Value::Text(s),
    })
}

/// `tracing` needs field names at compile time: every name any observation has is a
/// field of the event, recorded when the observation has it.
fn emit(o: &Observed) {
    let fields = o.observation.fields();
    let get = |name: &str| value(fields.iter().find(|(n, _)| *n == name).map(|(_, f)| f));
    let seconds = |name| match get(name) {
        Some(Value::Seconds(s)) => Some(s),
        _ => None,
    };
    let number = |name| match get(name) {
        Some(Value::Number(n)) => Some(n),
        _ => None,
    };
    let text = |name| match get(name) {
        Some(Value::Text(s)) => Some(s),
        _ => None,
    };
    let message = o.observation.message(&o.name);
    macro_rules! at {
        ($level:expr) => {
            tracing::event!(
                target: "fencepost",
                $level,
                event = o.observation.name(),
                warning = o.observation.is_warning(),
                token = number("token"),
                attempts = number("attempts"),
                found_held = number("found_held"),
                waiters = number("waiters"),
                waited = seconds("waited"),
                validity_left = seconds("validity_left"),
                validity = seconds("validity"),
                retry_in = seconds("retry_in"),
                deadline_in = seconds("deadline_in"),
                held_for = seconds("held_for"),
                ttl = seconds("ttl"),
                unreachable_for = seconds("unreachable_for"),
                reason = text("reason"),
                operation = text("operation"),
                error = text("error"),
                last_error = text("last_error"),
                "{message}"
            )
        };
    }
    match o.observation.level() {
        "debug" => at!(Level::DEBUG),
        "info" => at!(Level::INFO),
        _ => at!(Level::WARN),
    }
}
