//! The flat output encoding (`fencepost_core::js_outputs::encode_output`, the layout the
//! napi and wasm bindings write and `js/machine.js` decodes) under the `machine` target's
//! runs (`fencepost_core_fuzz::drive`: every backend, arbitrary inputs), with every body
//! kind compiled in (`js-sql`, `zookeeper`, `kubernetes`). Every output is encoded and
//! read back by a decoder written here from the layout in `js_outputs`'s module docs,
//! which must find exactly that output: its tag, ids and lock (whole numbers below 2^53),
//! times (`ns_to_ms`), each enum code an index into the core's `NAMES` naming the
//! output's own variant, each body kind's fields, and no slot left over or missing.
//! `Timeout` and `Idle` push nothing.
#![no_main]

use arbitrary::Unstructured;
use fencepost_core::backends::{
    KubeRequest, Operation, PgConnection, RedisCommand, RedisScript, RequestBody, SqlStatement,
    SqlValue, ZkRequest,
};
use fencepost_core::js_outputs::{encode_output, ns_to_ms, push_json, FlatValue};
use fencepost_core::{
    AcquireFailedReason, Event, LockId, LostReason, Output, OwnerId, Previous, Request,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = fencepost_core_fuzz::drive::run(
        &mut Unstructured::new(data),
        &mut |contract, requests, events| {
            for req in requests {
                check(&Output::Request(req.clone()));
            }
            for (lock, event) in events {
                check(&Output::Event {
                    lock: *lock,
                    event: event.clone(),
                });
            }
            check(&match contract.next_timeout {
                Some(at) => Output::Timeout(at),
                None => Output::Idle,
            });
        },
    );
});

/// JavaScript numbers are exact up to 2^53.
const EXACT: f64 = 9_007_199_254_740_992.0;

/// The owner id handed over with a lock's grant: every other lock has none (a machine
/// that forgot the lock), which the record carries as null.
fn owner_of(lock: LockId) -> Option<OwnerId> {
    (lock.0 % 2 == 0).then(|| OwnerId(lock.0.to_le_bytes().repeat(2).try_into().unwrap_or([0; 16])))
}

/// Encodes `output` and reads its record back; panics where the record is not `output`.
fn check(output: &Output) {
    let mut slots = Vec::new();
    let owner = match output {
        Output::Event { lock, .. } => owner_of(*lock),
        _ => None,
    };
    let pushed: Result<(), ()> = encode_output(output, owner, &mut |v| {
        slots.push(v);
        Ok(())
    });
    assert!(pushed.is_ok(), "{output:?}: a push that cannot fail failed");
    json_form(output, &slots);
    let mut r = Reader {
        slots: &slots,
        at: 0,
        output,
    };
    match output {
        Output::Timeout(_) | Output::Idle => {}
        Output::Request(req) => request(&mut r, req),
        Output::Event { lock, event } => self::event(&mut r, *lock, event),
    }
    assert_eq!(
        r.at,
        slots.len(),
        "{output:?}: {} slots pushed, the record is {}: {slots:?}",
        slots.len(),
        r.at
    );
}

fn request(r: &mut Reader, req: &Request) {
    assert_eq!(r.whole(), 0, "request tag");
    assert_eq!(r.whole(), req.id.0, "request id");
    assert_eq!(r.whole(), req.lock.0, "lock");
    let op = r.code(Operation::NAMES);
    assert_eq!(op, req.operation.as_str(), "operation");
    assert_eq!(r.number(), ns_to_ms(req.deadline.as_nanos()), "deadlineMs");
    let body = r.whole();
    match (body, &req.body) {
        (0 | 4, RequestBody::Redis(cmd)) => {
            assert_eq!(
                body == 4,
                cmd.wait.is_some(),
                "body 4 is a script with WAIT"
            );
            redis(r, cmd);
        }
        (5, RequestBody::RedlockPart(p)) => {
            assert_eq!(r.whole(), u64::from(p.master), "master");
            // the layout has no WAIT on a Redlock part: a decoder reads none
            assert!(
                p.command.wait.is_none(),
                "a Redlock part with WAIT: {req:?}"
            );
            redis(r, &p.command);
        }
        (1, RequestBody::RedisBlpop(b)) => {
            assert_eq!(r.text(), b.key, "BLPOP key");
            assert_eq!(r.whole(), b.timeout_ms, "BLPOP timeoutMs");
        }
        (2, RequestBody::Etcd(e)) => {
            assert_eq!(r.text(), e.call_name(), "etcd call");
            let path = r.text();
            assert_eq!(path, e.gateway_path(), "etcd path");
            assert!(path.starts_with("/v3/"), "etcd path {path:?}");
            let body = r.text();
            assert_eq!(body, e.gateway_body(), "etcd body");
            json(body);
            assert_eq!(r.whole_or_null(), e.watch_timeout_ms(), "etcd timeoutMs");
        }
        (6, RequestBody::ZooKeeper(z)) => {
            let call = r.text();
            assert_eq!(call, z.call_name(), "ZooKeeper call");
            let spec = json(r.text());
            assert_eq!(spec["call"].as_str(), Some(call), "the spec's call");
            let back: ZkRequest = serde_json::from_value(spec).expect("the spec reads back");
            assert_eq!(&back, z, "ZooKeeper spec");
            assert_eq!(
                r.whole_or_null(),
                z.watch_timeout_ms(),
                "ZooKeeper timeoutMs"
            );
        }
        (7, RequestBody::Sql(stmt)) => sql(r, stmt),
        (8, RequestBody::Kubernetes(k)) => kubernetes(r, k),
        (code, body) => panic!("body code {code} for a {} body: {req:?}", body.kind()),
    }
}

/// Bodies 0, 4 and 5 after their prefix: script, keys, args, then WAIT's two for body 4.
fn redis(r: &mut Reader, cmd: &RedisCommand) {
    let script = r.code(RedisScript::NAMES);
    assert_eq!(script, cmd.script.as_str(), "script");
    assert_eq!(r.texts(), cmd.keys, "keys");
    assert_eq!(r.texts(), cmd.args, "args");
    if let Some(w) = cmd.wait {
        assert_eq!(r.whole(), u64::from(w.replicas), "WAIT replicas");
        assert_eq!(r.whole(), w.timeout_ms, "WAIT timeoutMs");
    }
}

/// Body 7: sql, connection, params.length, then a type code and a value per param.
fn sql(r: &mut Reader, stmt: &SqlStatement) {
    assert_eq!(r.text(), stmt.sql, "sql");
    assert_eq!(
        r.code(PgConnection::NAMES),
        stmt.connection.as_str(),
        "connection"
    );
    let n = r.whole();
    let params: Vec<SqlValue> = (0..n)
        .map(|_| match r.whole() {
            0 => SqlValue::Null,
            1 => match r.whole() {
                0 => SqlValue::Bool(false),
                1 => SqlValue::Bool(true),
                b => panic!("a bool param is {b}"),
            },
            2 => {
                let t = r.text();
                SqlValue::Int(t.parse().unwrap_or_else(|_| panic!("int param {t:?}")))
            }
            3 => SqlValue::Text(r.text().to_owned()),
            t => panic!("param type code {t}"),
        })
        .collect();
    assert_eq!(params, stmt.params, "params");
}

/// Body 8: method, path, body | null, contentType, stamp.length, ...stamp.
fn kubernetes(r: &mut Reader, k: &KubeRequest) {
    assert_eq!(r.text(), k.method, "method");
    assert_eq!(r.text(), k.path, "path");
    let body = r.text_or_null();
    assert_eq!(body, k.body.as_deref(), "body");
    if let Some(body) = body {
        json(body);
    }
    assert_eq!(r.text(), k.content_type, "contentType");
    assert_eq!(r.texts(), k.stamp, "stamp");
}

fn event(r: &mut Reader, lock: LockId, event: &Event) {
    let tag = r.whole();
    assert_eq!(r.whole(), lock.0, "lock");
    match (tag, event) {
        (
            1,
            Event::Acquired {
                token,
                valid_until,
                previous,
            },
        ) => {
            assert_eq!(r.token(), token.get(), "token");
            assert_eq!(r.number(), ns_to_ms(valid_until.as_nanos()), "validUntilMs");
            assert_eq!(r.code(Previous::NAMES), previous.as_str(), "previous");
            let hex = owner_of(lock).map(|o| o.to_string());
            assert_eq!(r.text_or_null(), hex.as_deref(), "ownerId");
        }
        (2, Event::Renewed { valid_until }) => {
            assert_eq!(r.number(), ns_to_ms(valid_until.as_nanos()), "validUntilMs");
        }
        (3, Event::Lost { reason }) => {
            assert_eq!(r.code(LostReason::NAMES), reason.as_str(), "lost reason");
        }
        (4, Event::Released) => {}
        (5, Event::AcquireFailed { reason }) => {
            let kind = r.code(AcquireFailedReason::NAMES);
            assert_eq!(kind, reason.kind(), "acquire_failed reason");
            match reason {
                AcquireFailedReason::Timeout { last_error } => {
                    assert_eq!(r.text_or_null(), last_error.as_deref(), "last error");
                }
                AcquireFailedReason::Protocol { error } => {
                    assert_eq!(r.text(), error.to_string(), "protocol error");
                }
            }
        }
        (code, event) => panic!("event tag {code} for a {} event", event.kind()),
    }
}

/// The same slots as `pollJson()` writes them (`push_json`) parse back as JSON, slot for
/// slot: numbers as the same double, strings the same, tokens as their decimal string.
fn json_form(output: &Output, slots: &[FlatValue<'_>]) {
    let mut text = String::from("[null");
    for slot in slots {
        push_json(&mut text, slot);
    }
    text.push(']');
    let back = json(&text);
    let back = back.as_array().expect("an array");
    assert_eq!(back.len(), slots.len() + 1, "{output:?}: {text}");
    for (slot, value) in slots.iter().zip(&back[1..]) {
        let same = match slot {
            FlatValue::Number(n) => value.as_f64() == Some(*n),
            FlatValue::Text(t) => value.as_str() == Some(t.as_ref()),
            FlatValue::Token(t) => value.as_str() == Some(t.to_string().as_str()),
            FlatValue::Null => value.is_null(),
        };
        assert!(same, "{output:?}: slot {slot:?} reads back as {value}");
    }
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"))
}

/// Reads one record's slots in order; every read panics, naming the slot and the
/// output, where the slot is missing or of another kind.
struct Reader<'s, 'a> {
    slots: &'s [FlatValue<'a>],
    at: usize,
    output: &'s Output,
}

impl<'s> Reader<'s, '_> {
    fn next(&mut self) -> &'s FlatValue<'s> {
        let slot = self.slots.get(self.at).unwrap_or_else(|| {
            panic!(
                "{:?}: the record ends at slot {}, more expected",
                self.output, self.at
            )
        });
        self.at += 1;
        slot
    }

    fn bad(&self, want: &str) -> ! {
        panic!(
            "{:?}: slot {} is {:?}, not {want}",
            self.output,
            self.at - 1,
            self.slots[self.at - 1]
        )
    }

    /// A finite number.
    fn number(&mut self) -> f64 {
        match self.next() {
            FlatValue::Number(n) if n.is_finite() => *n,
            _ => self.bad("a finite number"),
        }
    }

    /// A whole number in 0 ..< 2^53 (exact in JavaScript).
    fn whole(&mut self) -> u64 {
        let n = self.number();
        if !(n >= 0.0 && n < EXACT && n.fract() == 0.0) {
            self.bad("a whole number below 2^53");
        }
        n as u64
    }

    fn whole_or_null(&mut self) -> Option<u64> {
        if let Some(FlatValue::Null) = self.slots.get(self.at) {
            self.at += 1;
            return None;
        }
        Some(self.whole())
    }

    /// A code: an index into `names`, read as the name.
    fn code(&mut self, names: &'static [&'static str]) -> &'static str {
        let i = self.whole();
        match usize::try_from(i).ok().and_then(|i| names.get(i)) {
            Some(name) => name,
            None => self.bad(&format!("an index into {names:?}")),
        }
    }

    fn text(&mut self) -> &'s str {
        match self.next() {
            FlatValue::Text(t) => t,
            _ => self.bad("a string"),
        }
    }

    fn text_or_null(&mut self) -> Option<&'s str> {
        match self.next() {
            FlatValue::Text(t) => Some(t),
            FlatValue::Null => None,
            _ => self.bad("a string or null"),
        }
    }

    fn token(&mut self) -> u64 {
        match self.next() {
            FlatValue::Token(t) => *t,
            _ => self.bad("a token (bigint)"),
        }
    }

    /// A count, then that many strings.
    fn texts(&mut self) -> Vec<&'s str> {
        let n = self.whole();
        (0..n).map(|_| self.text()).collect()
    }
}
