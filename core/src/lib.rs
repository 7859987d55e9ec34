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
//! ## Time
//! [`Instant`] is nanoseconds on the host's monotonic clock. A `now` earlier than one
//! given before is rejected ([`UsageError::TimeWentBackwards`], DESIGN.md rule 6).
//! Timers due at an input's `now` fire before the input is handled.
//!
//! ## Safety rules kept here (numbers as in DESIGN.md)
//! 1. Validity is measured from when a request was sent:
//!    `valid_until = sent_at + ttl × (1 − drift) − margin`.
//! 2. `Lost` comes from the machine's timer at `valid_until`, reply or not.
//! 3. A rejected renewal is `Lost` at once; transient failures retry until the deadline;
//!    a renewal never re-creates a missing key.
//! 4. Renew and release are owner-checked; late replies never resurrect a lease, and a
//!    late reply showing the server still holds a lease this machine gave up on is
//!    answered with an owner-checked release.
//! 5. An ambiguous acquire is retried with the same owner id (idempotent) or released.
//! 6. Backwards time is a usage error.
//! 7. Fencing tokens come from the server and are on every [`Event::Acquired`].
//! 8. A `correctness` lock on a backend whose tokens can regress needs an opt-in.
//! 9. Waiting uses bounded exponential backoff with full jitter; timeout 0 tries once.
//! 10. Every request carries a deadline; loss never waits for a hung request.

pub mod backends;
#[cfg(feature = "driver")]
pub mod driver;
mod error;
mod event;
pub mod fence;
pub mod js_outputs;
mod lock;
mod machine;
pub mod memory;
pub mod names;
mod options;
mod retry;
#[cfg(feature = "sabotage")]
pub mod sabotage;
pub mod sim;
mod time;

use core::fmt;

use serde::{Deserialize, Serialize};

pub use backends::{
    Backend, Operation, PgConnection, PgMode, PostgresBackend, RedisBackend, RedisBlpop,
    RedisCommand, RedisScript, RedisValue, Reply, RequestBody, SqlReply, SqlStatement, SqlValue,
};
pub use error::{EntropyError, ProtocolError, UsageError};
pub use event::{AcquireFailedReason, Event, LostReason};
pub use fence::{Fence, StaleToken};
pub use machine::{Input, Machine, Output, Request};
pub use options::{LockOptions, Purpose, MAX_TTL};
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
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl OwnerId {
    /// Parses the 32-hex-digit form [`OwnerId`]'s `Display` writes (either case).
    /// `None` for anything else: another length, a non-hex character.
    pub fn from_hex(hex: &str) -> Option<Self> {
        if hex.len() != 32 || !hex.is_ascii() {
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
        ] {
            assert_eq!(OwnerId::from_hex(bad), None, "{bad:?}");
        }
    }
}
