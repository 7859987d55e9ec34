//! # fencepost
//!
//! Distributed locks with fencing tokens for tokio, on Redis, PostgreSQL, etcd,
//! ZooKeeper, Kubernetes Leases and the Upstash REST protocol, and the `fencepost` command that runs a command under a
//! lock (`fencepost run --backend redis://… --name nightly -- ./job.sh`).
//!
//! ```no_run
//! use std::time::Duration;
//! use fencepost::{Client, LockOptions};
//!
//! # async fn demo() -> Result<(), fencepost::Error> {
//! let client = Client::connect("redis://127.0.0.1:6379").await?;
//! let options = LockOptions::ttl(Duration::from_secs(30));
//! let report = client
//!     .with_lock("nightly-report", options, |lease| async move {
//!         // carry lease.token() on every write to the protected resource
//!         lease.token().get()
//!     })
//!     .await?; // Err(Error::Lost { .. }) if the lease was lost: the work was cancelled
//! # let _ = report; Ok(()) }
//! ```
//!
//! ## Leader election
//! [`Client::election`] gives an [`Election`]: a lock held indefinitely, so a leader's
//! [`Leadership`] carries the lease's fencing token and its term ends when the lease is
//! lost; [`Election::run`] cancels the work then, and dropping a `Leadership` resigns.
//!
//! ```no_run
//! use std::time::Duration;
//! use fencepost::{Client, LockOptions};
//!
//! # async fn demo() -> Result<(), fencepost::Error> {
//! let client = Client::connect("redis://127.0.0.1:6379").await?;
//! let election = client
//!     .election("scheduler", "pod-a", LockOptions::ttl(Duration::from_secs(10)))?
//!     .on_stopped_leading(|term, reason| eprintln!("term {} ended: {reason:?}", term.token));
//! election.run(|term| async move { /* lead, writing with term.token */ }).await?;
//! # Ok(()) }
//! ```
//!
//! ## Layers
//! This crate is a *driver*: it makes no lock decision. Validity, the renewal schedule,
//! backoff, loss and cleanup are the sans-IO state machine's in
//! [`fencepost_core`], run by its runtime-agnostic driver
//! ([`fencepost_core::driver`]) on a tokio task; this crate supplies the clock (tokio's)
//! and the transport: adapters that execute the core's request bodies with real client
//! libraries and hand the replies back as data, error replies included.
//!
//! | cargo feature | backend | client library |
//! |---|---|---|
//! | (always) | `memory://`, the core's in-memory Redis | — |
//! | `redis` | `redis://` (`rediss://` with `tls`) | redis-rs, connection manager |
//! | `postgres` | `postgres://`, lease rows, or session advisory locks with `?mode=session` (`sslmode=require` with `tls`) | tokio-postgres |
//! | `etcd` | `etcd+http(s)://`, the v3 JSON gateway | reqwest |
//! | `upstash` | `upstash+http(s)://`, Redis over REST | reqwest |
//! | `zookeeper` | `zookeeper://`, ZooKeeper's lock recipe | zookeeper-client |
//! | `kubernetes` | `kubernetes+http(s)://`, `coordination.k8s.io/v1` Leases | reqwest |
//! | `cli` | the `fencepost` binary | clap, nix |
//! | `tls` | TLS for `rediss://`, `etcd+https://`, `upstash+https://`, `kubernetes+https://` and PostgreSQL's `sslmode=require`; the CA from `?ca=` (PostgreSQL: `?sslrootcert=`) or `$FENCEPOST_CA_FILE` ([`BackendUrl`]) | rustls (aws-lc-rs), tokio-postgres-rustls |
//!
//! ## Observability
//! With a `tracing` subscriber interested in the target `fencepost` (at INFO for the
//! events, WARN for the warnings) when a [`Client`] is made, every acquisition is a span
//! `fencepost.lock` (`lock`, `lock_id`) and each of the core's observations an event in
//! it: `acquiring`, `acquired` (`token`, `waited`, `attempts`), `renewed`
//! (`validity_left`), `renewal_failing` (`error`, `retry_in`, `deadline_in`), `lost`
//! (`reason`, `held_for`), `released` (`held_for`), `acquire_timed_out`, `acquire_failed`,
//! `backend_error` (`operation`, `error`), and the warnings `renewal_late`, `held_long`,
//! `hot_lock`, `server_unreachable` (field `warning = true`, at WARN, the message naming
//! what to change). Field `event` is the name; durations are `f64` seconds. Without a
//! subscriber the machine observes nothing. The warnings' thresholds are the
//! [`ObserveOptions`] given to [`Client::from_url_observed`] (defaults otherwise).
//!
//! Units: every duration is a [`std::time::Duration`]; tokens are
//! [`FencingToken`]s (server-assigned, strictly increasing per lock).

#![warn(missing_docs)]

mod adapters;
mod client;
mod election;
mod error;
mod observe;
#[cfg(feature = "tls")]
mod tls;
mod url;

pub use client::{Client, Holder, Lease, LeaseHandle};
pub use election::{Election, Leader, Leadership, StopReason, Term};
pub use error::Error;
pub use url::{BackendKind, BackendUrl};

/// The standard holder metadata of this process, for
/// [`LockOptions::with_metadata`]: `host` (the kernel's hostname, else `$HOSTNAME`, left
/// out when neither is known), `pid`, `process` (the program's file name),
/// `acquired_at` (this call's wall-clock time, RFC 3339 UTC with milliseconds: display
/// only, never used for a decision; call it when you build the options) and `label`
/// when given. The same keys as Python's `standard_metadata` and JavaScript's
/// `standardMetadata`.
pub fn standard_metadata(label: Option<&str>) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .filter(|h| !h.is_empty());
    if let Some(host) = host {
        out.insert("host".to_owned(), host);
    }
    out.insert("pid".to_owned(), std::process::id().to_string());
    let program = std::env::args_os().next().map(std::path::PathBuf::from);
    if let Some(name) = program.as_deref().and_then(std::path::Path::file_name) {
        out.insert("process".to_owned(), name.to_string_lossy().into_owned());
    }
    let now = humantime::format_rfc3339_millis(std::time::SystemTime::now());
    out.insert("acquired_at".to_owned(), now.to_string());
    if let Some(label) = label {
        out.insert("label".to_owned(), label.to_owned());
    }
    out
}

/// The core crate, for its fence builders (`fence`), backend settings and replies.
pub use fencepost_core as core;
pub use fencepost_core::{
    AcquireFailedReason, Backend, FencingToken, LockOptions, LostReason, ObserveOptions, OwnerId,
    Previous, Purpose, StaleToken,
};
