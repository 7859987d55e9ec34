//! The deterministic fault simulator: client machines, a reference server and a fenced
//! resource over a simulated network in virtual time, with faults drawn from one seed,
//! checked against the properties S1–S4 ([`Property`]).
//!
//! The reference servers live in [`crate::memory`]; they are re-exported here too.

mod world;

#[cfg(feature = "postgres")]
pub use crate::memory::MemoryPostgres;
pub use crate::memory::{
    etcd_error, EtcdKv, MemoryEtcd, MemoryRedis, MemoryRedlock, WATCH_TIMEOUT_REPLY,
};
#[cfg(all(feature = "model", feature = "zookeeper"))]
pub(crate) use world::s2_zk;
#[cfg(all(feature = "model", feature = "kubernetes"))]
pub(crate) use world::{kube_holder, s2_kube};
#[cfg(feature = "model")]
pub(crate) use world::{listen_timeout, new_grant, s2_postgres, statement_owner, wait_over};
#[cfg(feature = "model")]
pub(crate) use world::{request_owner, s2_etcd, s2_redis, s2_redlock, Belief, Checker, Resource};
pub use world::{
    Faults, FenceCounts, FenceRule, MasterRestart, Outcome, Property, RedlockMix, SimBackend,
    SimConfig, Simulation, Violation, LOCK_NAME,
};
