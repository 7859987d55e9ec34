//! Reference servers with injected time, and the deterministic fault simulator.
//!
//! * [`MemoryRedis`] — an in-memory server executing fencepost's Redis scripts; the
//!   embedded backend of the demo and the tests.
//! * [`Simulation`] — client machines, a reference server and a fenced resource over
//!   a simulated network in virtual time, with faults drawn from one seed, checked
//!   against the properties S1–S4 ([`Property`]).

mod redis;
mod world;

pub use redis::MemoryRedis;
pub use world::{Faults, Outcome, Property, SimConfig, Simulation, Violation, LOCK_NAME};
