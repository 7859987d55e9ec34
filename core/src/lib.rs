//! # fencepost-core
//!
//! The sans-IO lock state machine behind every fencepost binding. It performs no I/O
//! and reads no clock: the host feeds it [`Input`]s stamped with its own monotonic
//! time and drains [`Output`]s — backend requests to execute, events to act on, and
//! the instant at which to call back.
//!
//! ```
//! use core::time::Duration;
//! use fencepost_core::{Backend, Event, Input, Instant, LockOptions, Machine, Output};
//! use fencepost_core::memory::MemoryRedis;
//!
//! let mut machine = Machine::with_seed(Backend::default(), 7);
//! let mut server = MemoryRedis::default();
//! let now = Instant::from_millis(0);
//! let lock = machine.acquire(now, "report", LockOptions::ttl(Duration::from_secs(10))).unwrap();
//! loop {
//!     match machine.poll_output() {
//!         Output::Request(req) => {
//!             let reply = server.execute(now, &req.body);
//!             machine.handle_input(Input::Reply { now, request: req.id, reply }).unwrap();
//!         }
//!         Output::Event { event: Event::Acquired { token, .. }, .. } => {
//!             assert_eq!(token.get(), 1);
//!             break;
//!         }
//!         other => panic!("unexpected {other:?}"),
//!     }
//! }
//! machine.release(now, lock).unwrap();
//! ```
//!
//! ## Driving the machine
//!
//! The machine is a value you call; the host owns the sockets, the clock and the
//! timer. A binding's driver (Python's `_driver.py`, the JavaScript `driver.js`, or
//! `fencepost_core::driver` with feature `driver`) is this loop, and nothing more:
//!
//! 1. **Make one machine per backend.** [`Machine::new`] with a [`Backend`] (its
//!    settings as data); it may hold any number of locks. [`Machine::with_seed`] is
//!    for tests and simulation only.
//! 2. **Feed inputs, each stamped with `now`.** An [`Input`] is something that
//!    happened: the user wants a lock ([`Input::Acquire`], or [`Machine::acquire`]) or
//!    is done with it ([`Input::Release`]), the server answered ([`Input::Reply`]), a
//!    request failed in transport ([`Input::TransportError`]), or time passed
//!    ([`Input::Timeout`]). Every input carries the host's monotonic `now`
//!    ([`Instant`], nanoseconds since an origin the host picks once); read the clock
//!    when the thing happened, never reuse an older reading after a newer one.
//! 3. **Drain [`Machine::poll_output`] after every input** until it returns
//!    [`Output::Timeout`] or [`Output::Idle`], and act on the outputs in the order
//!    they come. A request left in the queue is a request nobody is executing.
//! 4. **Execute each [`Request`].** Its `body` ([`RequestBody`]) says what to send:
//!    * [`RequestBody::Redis`] — a Redis script call ([`RedisCommand`]): `EVALSHA`,
//!      falling back to `EVAL` on `NOSCRIPT`.
//!    * [`RequestBody::RedisBlpop`] — a blocking pop ([`RedisBlpop`]), on a connection
//!      of its own.
//!    * [`RequestBody::Sql`] — a SQL statement ([`SqlStatement`]), on the connection it
//!      names.
//!    * [`RequestBody::Etcd`] — an etcd v3 call ([`backends::etcd::EtcdRequest`]).
//!    * [`RequestBody::RedlockPart`] — one master's share of a Redlock step
//!      ([`RedlockPart`]): the same script call as `Redis`, on master `master` (an index
//!      into [`RedlockBackend::masters`]); each part is a request of its own.
//!    * [`RequestBody::ZooKeeper`] (feature `zookeeper`) — a ZooKeeper call on the
//!      host's session ([`backends::zookeeper::ZkRequest`]), answered with the JSON
//!      document its variant names, `"session"` included.
//!    * [`RequestBody::Kubernetes`] (feature `kubernetes`) — an HTTP call to the API
//!      server ([`backends::kubernetes::KubeRequest`]): `method` on `path` with `body`
//!      (if any), after setting the body's `spec` fields named in `stamp` to the host's
//!      wall clock; answered with the response body whatever the status.
//!
//!    Run requests concurrently; one slow request must not hold up the others. Convert
//!    the server's answer to data and feed it as [`Input::Reply`] with the request's
//!    `id`: error replies too ([`RedisValue::Error`], [`SqlReply::Error`], etcd's and
//!    ZooKeeper's error documents, Kubernetes' `Status` documents), since the machine
//!    decides which are transient. Report a failure to get an answer (connection
//!    refused or reset, client timeout) as [`Input::TransportError`].
//! 5. **Cancel every request at its `deadline`.** After [`Request::deadline`] the
//!    outcome no longer matters: cancel the call and feed [`Input::TransportError`]
//!    (for example "no reply before the request deadline"). The machine treats it as
//!    ambiguous — the request may have reached the server — and resolves it safely.
//! 6. **Call back with [`Input::Timeout`]** at the instant of the last
//!    [`Output::Timeout`], or earlier if another input comes first; keep one timer and
//!    move it when a later drain names another instant. Early and spurious timeouts are
//!    harmless. On [`Output::Idle`] no timer is needed until the next input. Nothing
//!    else wakes the machine: a lease is lost at its validity deadline only if the host
//!    calls back then.
//! 7. **Act on each [`Event`]** (every one names its lock in [`Output::Event`]):
//!    * [`Event::Acquired`] — hand the lease to the caller with its `token`; the
//!      caller carries the token on every write to the protected resource.
//!    * [`Event::Renewed`] — the validity deadline moved; nothing to do.
//!    * [`Event::Lost`] — cancel the protected work now (cancel the task, abort the
//!      signal), not just a log line: another holder may already have the lock. The
//!      lock is finished; a later [`Input::Release`] of it is a no-op.
//!    * [`Event::Released`] — the release (or cancellation) is done.
//!    * [`Event::AcquireFailed`] — the acquisition gave up: a timeout (with the last
//!      error seen) or a [`ProtocolError`]; the lock was never held.
//! 8. **Late and unknown replies are harmless.** A reply or transport error for a
//!    request the machine no longer waits for (given up at its deadline, duplicated,
//!    never issued) is ignored, or answered with an owner-checked release if it shows
//!    the server still holds a lease the machine gave up on. Feed what arrives; there
//!    is no need to filter.
//! 9. **Treat `Err` from [`Machine::handle_input`] as the caller's bug.** A
//!    [`UsageError`] (bad options, an unknown lock, time going backwards) rejects that
//!    input and changes nothing. What the servers and the network do never returns an
//!    error: it arrives as an event.
//!
//! In outline:
//!
//! ```text
//! loop {
//!     input = the next of: a reply, a request's deadline passing, a user call, the timer
//!     machine.handle_input(input stamped with now)       // Err: the caller's bug
//!     loop match machine.poll_output() {
//!         Request(r)  => start r.body on the client; cancel it at r.deadline
//!         Event(e)    => act on e (Lost: cancel the protected work)
//!         Timeout(at) => set the timer to at; break
//!         Idle        => clear the timer; break
//!     }
//! }
//! ```
//!
//! ## Time
//! [`Instant`] is nanoseconds on the host's monotonic clock. A `now` earlier than one
//! given before is rejected ([`UsageError::TimeWentBackwards`], rule 6), and so is one
//! past [`Instant::LATEST`] ([`UsageError::TimeOutOfRange`]). Timers due at
//! an input's `now` fire before the input is handled, so a reply that comes after a
//! deadline is already late when it is read.
//!
//! ## Safety rules kept here
//! The numbers are those of `docs/DESIGN.md` in the repository, which also says where
//! each rule is kept and which tests check it.
//! 1. Validity is measured from when a request was sent:
//!    `valid_until = sent_at + ttl × (1 − drift) − margin`.
//! 2. `Lost` comes from the machine's timer at `valid_until`, reply or not.
//! 3. A rejected renewal is `Lost` at once; transient failures retry until the deadline;
//!    a renewal never re-creates a missing key.
//! 4. Renew and release are owner-checked; late replies never resurrect a lease, and a
//!    late reply showing the server still holds a lease this machine gave up on is
//!    answered with an owner-checked release.
//! 5. An ambiguous acquire is retried with the same owner id (idempotent) or released.
//! 6. Backwards time is a usage error, and so is time out of range.
//! 7. Fencing tokens come from the server and are on every [`Event::Acquired`].
//! 8. A `correctness` lock on a backend whose tokens can regress needs an opt-in.
//! 9. Waiting uses bounded exponential backoff with jitter, or the server's wake-up
//!    where the backend has one; timeout 0 tries once.
//! 10. Every request carries a deadline; loss never waits for a hung request.

// No unsafe code: memory safety comes from the compiler alone (and the fuzz targets in
// core/fuzz run without a memory sanitizer, which would have nothing to find).
#![forbid(unsafe_code)]

pub mod backends;
#[cfg(feature = "contract")]
pub mod contract;
#[cfg(feature = "driver")]
pub mod driver;
mod error;
mod event;
pub mod fence;
pub mod js_outputs;
mod lock;
mod machine;
pub mod memory;
#[cfg(feature = "model")]
pub mod model;
pub mod names;
mod observe;
mod options;
mod retry;
#[cfg(feature = "sabotage")]
pub mod sabotage;
pub mod sim;
pub mod text;
mod time;

use core::fmt;

use serde::{Deserialize, Serialize};

pub use backends::{
    Backend, Holder, Operation, RedisBackend, RedisBlpop, RedisCommand, RedisScript, RedisValue,
    RedisWait, RedlockBackend, RedlockPart, Reply, RequestBody,
};
#[cfg(feature = "postgres")]
pub use backends::{PgConnection, PgMode, PostgresBackend, SqlReply, SqlStatement, SqlValue};
pub use error::{EntropyError, ProtocolError, UsageError};
pub use event::{AcquireFailedReason, Event, LostReason, Previous};
pub use fence::{Fence, StaleReason, StaleToken};
pub use machine::{Input, Machine, Output, Request};
pub use observe::{Field, Observation, ObserveOptions, Observed};
pub use options::{decode_metadata, encode_metadata, LockOptions, Purpose, MAX_METADATA, MAX_TTL};
pub use time::Instant;

/// Identifies one acquisition within a machine. Never reused by that machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LockId(pub u64);

impl fmt::Display for LockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Identifies one request within a machine. Never reused by that machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RequestId(pub u64);

/// A fencing token: strictly increases each time the server grants the lock. Carry it
/// on every write to the protected resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FencingToken(pub u64);

impl FencingToken {
    /// The token as an integer.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A random 128-bit value identifying one acquisition; shown as 32 lowercase hex digits
/// (the value stored in the server's lock key).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OwnerId(pub [u8; 16]);

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One write of the 32 digits: the id is formatted into every request a lock
        // sends, and a write per byte through the formatter costs ~7,000 instructions.
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut hex = [0u8; 32];
        for (pair, b) in hex.chunks_exact_mut(2).zip(self.0) {
            pair[0] = DIGITS[usize::from(b >> 4)];
            pair[1] = DIGITS[usize::from(b & 0x0f)];
        }
        match core::str::from_utf8(&hex) {
            Ok(text) => f.write_str(text),
            Err(_) => Err(fmt::Error),
        }
    }
}

impl OwnerId {
    /// Parses the 32-hex-digit form [`OwnerId`]'s `Display` writes (either case).
    /// `None` for anything else: another length, a non-hex character.
    pub fn from_hex(hex: &str) -> Option<Self> {
        // `from_str_radix` alone would also take a sign: "+f" reads as 15
        if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut bytes = [0u8; 16];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(OwnerId(bytes))
    }
}

impl fmt::Debug for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerId({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::OwnerId;

    #[test]
    fn owner_ids_round_trip_through_hex() {
        let owner = OwnerId([0xab, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0x10]);
        assert_eq!(owner.to_string(), "ab01000000000000000000000000ff10");
        assert_eq!(OwnerId::from_hex(&owner.to_string()), Some(owner));
        assert_eq!(
            OwnerId::from_hex(&owner.to_string().to_uppercase()),
            Some(owner)
        );
        for bad in [
            "",
            "ab",
            &"0".repeat(31),
            &"0".repeat(33),
            &"g".repeat(32),
            &"é".repeat(16),
            &"+f".repeat(16),
            &format!("-{}", "0".repeat(31)),
        ] {
            assert_eq!(OwnerId::from_hex(bad), None, "{bad:?}");
        }
    }
}
