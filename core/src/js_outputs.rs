//! Machine outputs as one flat sequence of primitives, for hosts where building an
//! object per output costs more than the machine's whole decision: JavaScript, through
//! napi-rs (`bindings-node`) and wasm-bindgen (`bindings-wasm`), whose `pollJson()` both
//! write this layout and whose shared JavaScript half (`js/machine.js`,
//! `decodeOutputs`) turns it back into output objects.
//!
//! ```text
//! [nextTimeoutMs | null, ...records]            (the host writes the first slot)
//! request         0, id, lock, operation, deadlineMs, body...
//!   operation     0 acquire, 1 renew, 2 release, 3 wait
//!   body          0 (redis), script (index in RedisScript::ALL, the order of
//!                   redisScripts()), keys.length, ...keys, args.length, ...args
//!                 1 (redis_blpop), key, timeoutMs
//!                 2 (etcd), call, path, body, timeoutMs | null
//!                 3 (a backend the JavaScript bindings do not carry: SQL without the
//!                   `js-sql` feature, as in the WebAssembly module, which carries no
//!                   PostgreSQL)
//!                 4 (redis, then WAIT on the same connection), as 0, then
//!                   replicas, timeoutMs
//!                 5 (redlock_part), master, then as 0: script, keys…, args…
//!                 6 (zookeeper, with the `zookeeper` feature), call, JSON, timeoutMs | null
//!                 7 (sql, with the `js-sql` feature), sql, connection (0 any,
//!                   1 dedicated, 2 listen), params.length, ...params; each param is a type
//!                   code and a value: 0 null (no value), 1 bool (0 | 1), 2 int
//!                   (decimal text: a signed 64-bit value, read as a bigint), 3 text
//!                 8 (kubernetes, with the `kubernetes` feature), method, path,
//!                   body (JSON) | null, contentType, stamp.length, ...stamp
//! acquired        1, lock, token (a u64: bigint), validUntilMs, previous (0 released,
//!                 1 expired, 2 none, 3 unknown), ownerId (32 hex digits) | null
//! renewed         2, lock, validUntilMs
//! lost            3, lock, reason (0 expired, 1 renew_rejected, 2 not_held_at_release,
//!                 3 closed)
//! released        4, lock
//! acquire_failed  5, lock, reason (0 timeout, 1 protocol), message | null
//! ```
//!
//! The addons hand the layout over as the text of one JSON array (`pollJson()`,
//! [`push_json`]), tokens as decimal strings, with a second host slot after the first:
//! how many observations wait to be drained.
//!
//! Every code of a named enum is its index in that enum's `NAMES`
//! ([`Operation::NAMES`], [`LostReason::NAMES`], [`AcquireFailedReason::NAMES`],
//! [`RedisScript::NAMES`]), so a decoder reads the names from the core.
//!
//! Times are milliseconds on the host's monotonic clock ([`ns_to_ms`]); ids are below
//! 2^53, exact as JavaScript numbers.

use std::borrow::Cow;

use crate::backends::{Operation, RedisScript, RequestBody};
use crate::{AcquireFailedReason, Event, LostReason, Output, OwnerId};

/// One slot of the flat layout.
#[derive(Clone, Debug, PartialEq)]
pub enum FlatValue<'a> {
    /// A JavaScript number.
    Number(f64),
    /// A string.
    Text(Cow<'a, str>),
    /// A fencing token: a JavaScript bigint.
    Token(u64),
    /// `null`.
    Null,
}

/// Appends `value` to `out`, the text of a JSON array being written (a comma first, as
/// the host writes the first slot itself): the form `pollJson()` hands over, one string
/// for the whole drain, which `JSON.parse` reads faster than an addon builds an array
/// slot by slot. A token is a decimal string (JSON numbers are doubles; the decoder makes
/// it a bigint), a number that is not finite is `null` (the layout has none).
pub fn push_json(out: &mut String, value: &FlatValue<'_>) {
    use core::fmt::Write;
    out.push(',');
    // Writing to a String cannot fail.
    let _ = match value {
        FlatValue::Number(n) if n.is_finite() => {
            // zmij's digits, as everywhere in the module: one float formatter in it
            out.push_str(&crate::text::number(*n));
            Ok(())
        }
        FlatValue::Number(_) | FlatValue::Null => {
            out.push_str("null");
            Ok(())
        }
        FlatValue::Token(t) => write!(out, "\"{t}\""),
        FlatValue::Text(t) => match serde_json::to_string(t.as_ref()) {
            Ok(quoted) => {
                out.push_str(&quoted);
                Ok(())
            }
            Err(_) => {
                out.push_str("null");
                Ok(())
            }
        },
    };
}

/// Nanoseconds on the host's monotonic clock as the milliseconds JavaScript hosts use,
/// as a `number` (exact for whole milliseconds; otherwise the nearest double, from which
/// `round(ms × 1e6)` gives the nanoseconds back).
pub fn ns_to_ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Appends `output`'s record (see the module docs) through `push`; `Timeout` and
/// `Idle` append nothing (the host writes the next timeout into the first slot).
/// `owner` is the granted lock's owner id, for an `Acquired` record (the lease shows
/// it; handing it over here saves the host a call per grant). Stops at the first error
/// `push` returns.
pub fn encode_output<'a, E>(
    output: &'a Output,
    owner: Option<OwnerId>,
    push: &mut impl FnMut(FlatValue<'a>) -> Result<(), E>,
) -> Result<(), E> {
    use FlatValue::{Null, Number, Text, Token};
    let text = |s: &'a str| Text(Cow::Borrowed(s));
    match output {
        Output::Request(req) => {
            push(Number(0.0))?;
            push(Number(req.id.0 as f64))?;
            push(Number(req.lock.0 as f64))?;
            push(Number(operation_code(req.operation)))?;
            push(Number(ns_to_ms(req.deadline.as_nanos())))?;
            let redis = match &req.body {
                RequestBody::Redis(cmd) => Some((None, cmd)),
                RequestBody::RedlockPart(p) => Some((Some(p.master), &p.command)),
                _ => None,
            };
            match &req.body {
                RequestBody::Redis(_) | RequestBody::RedlockPart(_) => {
                    let Some((master, cmd)) = redis else {
                        return Ok(()); // never: both kinds are script calls
                    };
                    match master {
                        None => push(Number(if cmd.wait.is_some() { 4.0 } else { 0.0 }))?,
                        Some(m) => {
                            push(Number(5.0))?;
                            push(Number(f64::from(m)))?;
                        }
                    }
                    push(Number(script_index(cmd.script)))?;
                    for list in [&cmd.keys, &cmd.args] {
                        push(Number(list.len() as f64))?;
                        for item in list {
                            push(text(item))?;
                        }
                    }
                    if let Some(w) = cmd.wait {
                        push(Number(f64::from(w.replicas)))?;
                        push(Number(w.timeout_ms as f64))?;
                    }
                }
                // Fair hand-off: `BLPOP key timeoutMs/1000` on a connection of its own;
                // whole milliseconds, ≥ 1, exact as a number below 2^53.
                RequestBody::RedisBlpop(b) => {
                    push(Number(1.0))?;
                    push(text(&b.key))?;
                    push(Number(b.timeout_ms as f64))?;
                }
                // etcd: POST `body` to `{endpoint}{path}`; a watch streams until an
                // event or `timeoutMs` (whole milliseconds: a TTL is at most 2^31 ms).
                RequestBody::Etcd(e) => {
                    push(Number(2.0))?;
                    push(text(e.call_name()))?;
                    push(text(e.gateway_path()))?;
                    push(Text(Cow::Owned(e.gateway_body())))?;
                    push(e.watch_timeout_ms().map_or(Null, |ms| Number(ms as f64)))?;
                }
                #[cfg(all(feature = "postgres", not(feature = "js-sql")))]
                RequestBody::Sql(_) => push(Number(3.0))?,
                #[cfg(feature = "js-sql")]
                RequestBody::Sql(stmt) => encode_sql(stmt, push)?,
                // Kubernetes: one HTTP call; the host stamps the `stamp` fields of the
                // body's `spec` with its wall clock just before sending
                #[cfg(feature = "kubernetes")]
                RequestBody::Kubernetes(k) => {
                    push(Number(8.0))?;
                    push(text(&k.method))?;
                    push(text(&k.path))?;
                    push(k.body.as_deref().map_or(Null, text))?;
                    push(text(&k.content_type))?;
                    push(Number(k.stamp.len() as f64))?;
                    for field in &k.stamp {
                        push(text(field))?;
                    }
                }
                #[cfg(feature = "zookeeper")]
                // ZooKeeper: the call as JSON; a watch blocks for `timeoutMs` at most
                RequestBody::ZooKeeper(z) => {
                    push(Number(6.0))?;
                    push(text(z.call_name()))?;
                    push(Text(Cow::Owned(z.to_json())))?;
                    push(z.watch_timeout_ms().map_or(Null, |ms| Number(ms as f64)))?;
                }
            }
        }
        Output::Event { lock, event } => {
            let lock = Number(lock.0 as f64);
            match event {
                Event::Acquired {
                    token,
                    valid_until,
                    previous,
                } => {
                    push(Number(1.0))?;
                    push(lock)?;
                    push(Token(token.get()))?;
                    push(Number(ns_to_ms(valid_until.as_nanos())))?;
                    push(Number(match previous {
                        crate::Previous::Released => 0.0,
                        crate::Previous::Expired => 1.0,
                        crate::Previous::None => 2.0,
                        crate::Previous::Unknown => 3.0,
                    }))?;
                    push(owner.map_or(Null, |o| Text(Cow::Owned(o.to_string()))))?;
                }
                Event::Renewed { valid_until } => {
                    push(Number(2.0))?;
                    push(lock)?;
                    push(Number(ns_to_ms(valid_until.as_nanos())))?;
                }
                Event::Lost { reason } => {
                    push(Number(3.0))?;
                    push(lock)?;
                    push(Number(match reason {
                        LostReason::Expired => 0.0,
                        LostReason::RenewRejected => 1.0,
                        LostReason::NotHeldAtRelease => 2.0,
                        LostReason::Closed => 3.0,
                    }))?;
                }
                Event::Released => {
                    push(Number(4.0))?;
                    push(lock)?;
                }
                Event::AcquireFailed { reason } => {
                    push(Number(5.0))?;
                    push(lock)?;
                    match reason {
                        AcquireFailedReason::Timeout { last_error } => {
                            push(Number(0.0))?;
                            push(last_error.as_deref().map_or(Null, text))?;
                        }
                        AcquireFailedReason::Protocol { error } => {
                            push(Number(1.0))?;
                            push(Text(Cow::Owned(error.to_string())))?;
                        }
                    }
                }
            }
        }
        Output::Timeout(_) | Output::Idle => {}
    }
    Ok(())
}

/// Record body 7: a SQL statement with its parameters (see the module docs).
#[cfg(feature = "js-sql")]
fn encode_sql<'a, E>(
    stmt: &'a crate::backends::SqlStatement,
    push: &mut impl FnMut(FlatValue<'a>) -> Result<(), E>,
) -> Result<(), E> {
    use crate::backends::{PgConnection, SqlValue};
    use FlatValue::{Number, Text};
    push(Number(7.0))?;
    push(Text(Cow::Borrowed(&stmt.sql)))?;
    push(Number(match stmt.connection {
        PgConnection::Any => 0.0,
        PgConnection::Dedicated => 1.0,
        PgConnection::Listen => 2.0,
    }))?;
    push(Number(stmt.params.len() as f64))?;
    for param in &stmt.params {
        match param {
            SqlValue::Null => push(Number(0.0))?,
            SqlValue::Bool(b) => {
                push(Number(1.0))?;
                push(Number(if *b { 1.0 } else { 0.0 }))?;
            }
            // advisory keys use all 64 bits: a number would round them
            SqlValue::Int(n) => {
                push(Number(2.0))?;
                push(Text(Cow::Owned(n.to_string())))?;
            }
            SqlValue::Text(t) => {
                push(Number(3.0))?;
                push(Text(Cow::Borrowed(t)))?;
            }
        }
    }
    Ok(())
}

fn script_index(script: RedisScript) -> f64 {
    RedisScript::ALL
        .iter()
        .position(|s| *s == script)
        .unwrap_or(usize::MAX) as f64
}

fn operation_code(operation: Operation) -> f64 {
    match operation {
        Operation::Acquire => 0.0,
        Operation::Renew => 1.0,
        Operation::Release => 2.0,
        Operation::Wait => 3.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::RedisBlpop;
    use crate::{FencingToken, Instant, LockId, Request, RequestId};

    fn flat(output: &Output) -> Vec<FlatValue<'_>> {
        let mut out = Vec::new();
        let _ = encode_output(output, Some(OwnerId([0xab; 16])), &mut |v| {
            out.push(v);
            Ok::<(), ()>(())
        });
        out
    }

    #[test]
    fn json_slots_parse_back_as_the_flat_values() {
        use FlatValue::{Null, Number, Text, Token};
        let mut text = String::from("[null");
        for v in [
            Number(988.0),
            Number(333.333333),
            Number(f64::NAN),
            Token(u64::MAX),
            Text("a \"quoted\" {name}\n\u{1}é".into()),
            Null,
        ] {
            push_json(&mut text, &v);
        }
        text.push(']');
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            back,
            serde_json::json!([
                null,
                988,
                333.333333,
                null,
                "18446744073709551615",
                "a \"quoted\" {name}\n\u{1}é",
                null
            ])
        );
    }

    /// A decoder names codes by their index in the enum's `NAMES`.
    #[test]
    fn codes_are_indices_in_names() {
        use crate::ProtocolError;
        for (i, name) in Operation::NAMES.iter().enumerate() {
            let op: Operation = name.parse().unwrap();
            assert_eq!(operation_code(op), i as f64);
        }
        for (i, name) in RedisScript::NAMES.iter().enumerate() {
            assert_eq!(script_index(name.parse().unwrap()), i as f64);
        }
        let code = |event: Event| {
            let out = Output::Event {
                lock: crate::LockId(1),
                event,
            };
            match flat(&out)[2] {
                FlatValue::Number(n) => n,
                _ => unreachable!(),
            }
        };
        for (i, name) in LostReason::NAMES.iter().enumerate() {
            let reason: LostReason = name.parse().unwrap();
            assert_eq!(code(Event::Lost { reason }), i as f64);
        }
        let failed = [
            AcquireFailedReason::Timeout { last_error: None },
            AcquireFailedReason::Protocol {
                error: ProtocolError {
                    backend: "redis".into(),
                    message: "m".into(),
                },
            },
        ];
        for reason in failed {
            let i = AcquireFailedReason::NAMES
                .iter()
                .position(|n| *n == reason.kind())
                .unwrap();
            assert_eq!(code(Event::AcquireFailed { reason }), i as f64);
        }
        assert_eq!(AcquireFailedReason::NAMES.len(), 2);
    }

    #[test]
    fn a_wait_request_and_a_grant_as_flat_records() {
        let wait = Output::Request(Request {
            id: RequestId(7),
            lock: LockId(2),
            operation: Operation::Wait,
            deadline: Instant::from_nanos(3_500_000),
            body: RequestBody::RedisBlpop(RedisBlpop {
                key: "k".into(),
                timeout_ms: 250,
            }),
        });
        use FlatValue::*;
        assert_eq!(
            flat(&wait),
            vec![
                Number(0.0),
                Number(7.0),
                Number(2.0),
                Number(3.0),
                Number(3.5),
                Number(1.0),
                Text("k".into()),
                Number(250.0)
            ]
        );
        let granted = Output::Event {
            lock: LockId(2),
            event: Event::Acquired {
                token: FencingToken(9),
                valid_until: Instant::from_nanos(1_000_000),
                previous: crate::Previous::Expired,
            },
        };
        assert_eq!(
            flat(&granted),
            vec![
                Number(1.0),
                Number(2.0),
                Token(9),
                Number(1.0),
                Number(1.0),
                Text("ab".repeat(16).into())
            ]
        );
        assert!(flat(&Output::Idle).is_empty());
    }

    #[cfg(feature = "kubernetes")]
    #[test]
    fn a_kubernetes_request_as_a_flat_record() {
        use crate::backends::KubeRequest;
        let request = Output::Request(Request {
            id: RequestId(4),
            lock: LockId(1),
            operation: Operation::Acquire,
            deadline: Instant::from_nanos(2_000_000),
            body: RequestBody::Kubernetes(KubeRequest {
                method: "PUT".into(),
                path: "/apis/coordination.k8s.io/v1/namespaces/default/leases/r".into(),
                body: Some("{}".into()),
                content_type: "application/json".into(),
                stamp: vec!["acquireTime".into(), "renewTime".into()],
            }),
        });
        use FlatValue::*;
        assert_eq!(
            flat(&request)[5..],
            [
                Number(8.0),
                Text("PUT".into()),
                Text("/apis/coordination.k8s.io/v1/namespaces/default/leases/r".into()),
                Text("{}".into()),
                Text("application/json".into()),
                Number(2.0),
                Text("acquireTime".into()),
                Text("renewTime".into()),
            ]
        );
    }

    #[cfg(feature = "js-sql")]
    #[test]
    fn a_sql_request_as_a_flat_record() {
        use crate::backends::{PgConnection, SqlStatement, SqlValue};
        let request = Output::Request(Request {
            id: RequestId(3),
            lock: LockId(1),
            operation: Operation::Renew,
            deadline: Instant::from_nanos(2_000_000),
            body: RequestBody::Sql(SqlStatement {
                sql: "SELECT $1, $2, $3, $4".into(),
                params: vec![
                    SqlValue::Int(i64::MIN),
                    SqlValue::Text("r".into()),
                    SqlValue::Bool(true),
                    SqlValue::Null,
                ],
                connection: PgConnection::Dedicated,
            }),
        });
        use FlatValue::*;
        assert_eq!(
            flat(&request)[5..],
            [
                Number(7.0),
                Text("SELECT $1, $2, $3, $4".into()),
                Number(1.0),
                Number(4.0),
                Number(2.0),
                Text("-9223372036854775808".into()),
                Number(3.0),
                Text("r".into()),
                Number(1.0),
                Number(1.0),
                Number(0.0),
            ]
        );
    }
}
