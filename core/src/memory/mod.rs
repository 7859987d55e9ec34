//! In-memory lock servers with injected time: the embedded backend of the demo, the
//! tests and the bindings' `MemoryBackend`, and the reference servers of the fault
//! simulator ([`crate::sim`]).
//!
//! * [`MemoryRedis`] — executes fencepost's Redis scripts (plain and fair) on a map of
//!   keys with millisecond expiry.
//! * [`MemoryEtcd`] — an etcd v3 answering the etcd backend's requests with the JSON
//!   gateway's exact reply texts, leases expiring at injected time.
//! * [`MemoryZooKeeper`] — a ZooKeeper answering the ZooKeeper backend's requests with
//!   the adapters' JSON replies, sessions expiring at injected time.
//! * [`MemoryKubernetes`] — a Kubernetes API server's `coordination.k8s.io/v1` Leases
//!   answering the Kubernetes backend's requests with the API server's response bodies
//!   (a Lease, or a `Status`), every update a `resourceVersion` compare-and-set; like
//!   the Lease API it expires nothing.
//! * [`MemoryPostgres`] — a PostgreSQL running the lease-rows mode's statements
//!   (recognised by their exact text) on a lease table, expiry at injected time.
//! * [`MemoryRedlock`] — N independent [`MemoryRedis`] masters, each request part
//!   executed on the master it names.

mod etcd;
#[cfg(feature = "kubernetes")]
mod kubernetes;
#[cfg(feature = "postgres")]
mod postgres;
mod redis;
mod redlock;
#[cfg(feature = "zookeeper")]
mod zookeeper;

pub use etcd::{etcd_error, EtcdKv, MemoryEtcd, WATCH_TIMEOUT_REPLY};
#[cfg(feature = "kubernetes")]
pub use kubernetes::{kube_status, micro_time, MemoryKubernetes};
#[cfg(feature = "postgres")]
pub use postgres::{MemoryPostgres, PgExpiry, PgLeaseRow};
pub use redis::MemoryRedis;
pub use redlock::MemoryRedlock;
#[cfg(feature = "zookeeper")]
pub use zookeeper::{zk_error, MemoryZooKeeper, ZNode};
