//! Reference servers with injected time, and the deterministic fault simulator.
//!
//! * [`MemoryRedis`] — an in-memory server executing fencepost's Redis scripts; the
//!   embedded backend of the demo and the tests.
//! * [`MemoryEtcd`] — an in-memory etcd v3 answering the etcd backend's requests with
//!   the JSON gateway's exact reply texts, leases expiring at injected time.
//! * [`Simulation`] — client machines, a reference server and a fenced resource over
//!   a simulated network in virtual time, with faults drawn from one seed, checked
//!   against the properties S1–S4 ([`Property`]).

mod etcd;
mod redis;
mod world;

pub use etcd::{etcd_error, EtcdKv, MemoryEtcd, WATCH_TIMEOUT_REPLY};
pub use redis::MemoryRedis;
pub use world::{
    Faults, Outcome, Property, SimBackend, SimConfig, Simulation, Violation, LOCK_NAME,
};
