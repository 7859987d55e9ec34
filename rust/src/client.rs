//! The tokio client: a core driver task per backend, with its locks, leases and
//! operator queries.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fencepost_core::driver::{self, Clock, Transport};
use fencepost_core::{
    Backend, FencingToken, Instant, LockOptions, LostReason, ObserveOptions, OwnerId, Reply,
    Request, RequestBody,
};
use futures::future::{BoxFuture, FutureExt, Shared};

use crate::adapters::Adapter;
use crate::{BackendUrl, Error};

/// Monotonic time for the driver: tokio's clock, in ns since the client was made (so
/// `tokio::time::pause` in tests moves it too).
#[derive(Clone)]
pub(crate) struct TokioClock(pub(crate) tokio::time::Instant);

impl Clock for TokioClock {
    type Sleep = tokio::time::Sleep;
    fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }
    fn sleep_until(&self, at: Instant) -> Self::Sleep {
        tokio::time::sleep_until(self.0 + Duration::from_nanos(at.as_nanos()))
    }
}

/// The driver's transport: every request goes to the backend's adapter.
#[derive(Clone)]
struct Dispatch(Arc<dyn Adapter>);

impl Transport for Dispatch {
    type Execute = BoxFuture<'static, Result<Reply, String>>;
    fn execute(&self, request: &Request) -> Self::Execute {
        self.0.execute_request(request)
    }
}

/// Who holds a lock, as an operator query found it on the server (the core's type;
/// `metadata` is what the holder acquired with, see [`LockOptions`](fencepost_core::LockOptions)).
pub use fencepost_core::Holder;

/// A client for one backend: acquire leases, run work under a lock, query who holds
/// what. Cheap to clone (one driver task serves every clone); must be made inside a
/// tokio runtime, whose task runs the core's driver.
///
/// Every lock decision (validity, renewal schedule, backoff, loss) is the core's
/// (`fencepost_core`, see DESIGN.md); this crate executes its requests.
#[derive(Clone)]
pub struct Client {
    locks: driver::Locks,
    adapter: Arc<dyn Adapter>,
    backend: Arc<Backend>,
    task: Arc<std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>>,
}

impl Client {
    /// Connects to the backend `url` names (see [`BackendUrl`] for the schemes).
    /// PostgreSQL's tables are created if missing (idempotent).
    ///
    /// Errors: [`Error::Config`] for a bad URL or a scheme whose cargo feature is off;
    /// [`Error::Backend`] when the server cannot be reached (Redis, PostgreSQL and
    /// ZooKeeper connect here, ZooKeeper opening its session and learning the
    /// negotiated session timeout; etcd, Upstash and Kubernetes on the first request).
    pub async fn connect(url: &str) -> Result<Client, Error> {
        Client::from_url(&BackendUrl::parse(url)?).await
    }

    /// [`Client::connect`] with a parsed URL (whose settings, such as the key prefix,
    /// you may have changed).
    pub async fn from_url(url: &BackendUrl) -> Result<Client, Error> {
        Client::from_url_observed(url, ObserveOptions::default()).await
    }

    /// [`Client::from_url`] with the warnings' thresholds of your choice
    /// (`late_renewal_fraction`, `held_long_ttls`, `hot_lock_attempts`,
    /// `hot_lock_waiters`, `unreachable_every`; see [`ObserveOptions`]). As with
    /// `from_url`, the client observes only while a `tracing` subscriber listens to the
    /// target `fencepost` when it is made (events at INFO, warnings at WARN); `events:
    /// false` or `warnings: false` in `observe` turn those off whatever it listens to.
    ///
    /// Errors: as [`Client::from_url`]; [`Error::Config`] for a threshold out of range.
    pub async fn from_url_observed(
        url: &BackendUrl,
        observe: ObserveOptions,
    ) -> Result<Client, Error> {
        // refused before connecting, whether or not anything listens now
        observe
            .validate()
            .map_err(|e| Error::Config(e.to_string()))?;
        let clock = TokioClock(tokio::time::Instant::now());
        let (adapter, backend) = crate::url::open(url, clock.clone()).await?;
        Client::with_adapter(adapter, backend, clock, observe)
    }

    /// An in-memory Redis in this process (`memory://`): for trying things out and
    /// tests; locks are shared by the clones of this client only.
    ///
    /// # Panics
    ///
    /// * Outside the context of a tokio runtime: it spawns the driver task with
    ///   `tokio::spawn` ("there is no reactor running, must be called from the context
    ///   of a Tokio 1.x runtime").
    /// * When the operating system cannot supply secure randomness to seed the owner
    ///   ids ("the platform has secure randomness"); [`Client::connect`] returns
    ///   [`Error::Backend`] instead.
    pub fn memory() -> Client {
        let clock = TokioClock(tokio::time::Instant::now());
        let adapter = Arc::new(crate::adapters::memory::Memory::new(clock.clone()));
        Client::with_adapter(
            adapter,
            Backend::default(),
            clock,
            ObserveOptions::default(),
        )
        .expect("the platform has secure randomness")
    }

    fn with_adapter(
        adapter: Arc<dyn Adapter>,
        backend: Backend,
        clock: TokioClock,
        observe: ObserveOptions,
    ) -> Result<Client, Error> {
        let mut machine = fencepost_core::Machine::new(backend.clone())
            .map_err(|e| Error::Backend(format!("cannot make owner ids: {e}")))?;
        let transport = Dispatch(adapter.clone());
        // observed only while a tracing subscriber listens to target "fencepost", or
        // when the adapter needs each lock's final event (observations carry it)
        let wanted = crate::observe::wanted(observe);
        let tracks = adapter.tracks_locks();
        let options = match wanted {
            Some(options) => Some(options),
            None if tracks => Some(ObserveOptions {
                events: true,
                warnings: false,
                ..observe
            }),
            None => None,
        };
        let (locks, run) = match options {
            Some(options) => {
                machine
                    .observe(Some(options))
                    .map_err(|e| Error::Config(e.to_string()))?;
                let mut traced = wanted.map(|_| crate::observe::observer());
                let finished = adapter.clone();
                let observer: driver::Observer = Box::new(move |o| {
                    if tracks && crate::observe::is_final(&o.observation) {
                        finished.lock_finished(o.lock);
                    }
                    if let Some(traced) = traced.as_mut() {
                        traced(o);
                    }
                });
                let (locks, run) = driver::driver_observed(machine, transport, clock, observer);
                (locks, run.left_future())
            }
            None => {
                let (locks, run) = driver::driver_with_machine(machine, transport, clock);
                (locks, run.right_future())
            }
        };
        // ends by itself once every handle and lease is gone
        let task = tokio::spawn(run);
        Ok(Client {
            locks,
            adapter,
            backend: Arc::new(backend),
            task: Arc::new(std::sync::Mutex::new(Some(task))),
        })
    }

    /// Drops this handle and waits, at most `timeout`, for the driver task to finish:
    /// it finishes once every clone of the client (an [`Election`](crate::Election)
    /// holds one) and every lease is gone and the last releases got their answers (or
    /// their deadlines passed). Returns whether it finished in time: `false` after the
    /// whole `timeout` while a lease or an election is still alive (release or drop
    /// them first; nothing is released for you). Call it before a process exits, so a
    /// release just sent is not cut off.
    pub async fn close(self, timeout: Duration) -> bool {
        let task = self.task.lock().ok().and_then(|mut t| t.take());
        drop(self);
        match task {
            Some(task) => tokio::time::timeout(timeout, task).await.is_ok(),
            None => true,
        }
    }

    /// The core's backend settings this client locks with.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// Acquires `name`, waiting as `options.acquire_timeout` allows (`None`: forever,
    /// zero: one try). The lease renews itself until released or lost.
    ///
    /// Errors: [`Error::Usage`] (bad name or options, e.g. `Purpose::Correctness` on
    /// Redis without `accept_failover_risk`); [`Error::AcquireTimeout`];
    /// [`Error::Protocol`]; [`Error::DriverGone`]. Dropping the future cancels the
    /// acquisition (whatever the server may have granted is released).
    pub async fn acquire(&self, name: &str, options: LockOptions) -> Result<Lease, Error> {
        let inner = self
            .locks
            .acquire(name, options)
            .await
            .map_err(|e| Error::from_driver(name, e))?;
        let lost = inner.lost().boxed().shared();
        Ok(Lease {
            inner,
            name: name.into(),
            lost,
        })
    }

    /// Acquires `name`, runs `work` with a handle on the lease, and releases. If the
    /// lease is lost while `work` runs, `work` is cancelled (its future dropped at
    /// its next `.await`) and the result is [`Error::Lost`].
    ///
    /// Errors: as [`Client::acquire`]; [`Error::Lost`] when the lease was lost during
    /// `work` or found gone at release (then `work`'s result is discarded: it ran
    /// without the lock for some time).
    pub async fn with_lock<T, F, Fut>(
        &self,
        name: &str,
        options: LockOptions,
        work: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let lease = self.acquire(name, options).await?;
        let handle = lease.handle();
        let outcome = tokio::select! {
            reason = lease.lost() => Err(reason),
            value = work(handle) => Ok(value),
        };
        match outcome {
            Ok(value) => lease.release().await.map(|()| value),
            Err(reason) => {
                drop(lease);
                Err(Error::Lost {
                    name: name.to_owned(),
                    reason,
                })
            }
        }
    }

    /// Runs one request body on this backend's client and returns the server's
    /// answer as data: for fenced writes built with `fencepost_core::fence` (e.g.
    /// `redis_fenced_set`, read with `read_redis_fenced_set`) or the core's operator
    /// queries.
    ///
    /// Errors: [`Error::Backend`] for a transport failure (the outcome is unknown).
    pub async fn execute(&self, body: RequestBody) -> Result<Reply, Error> {
        self.adapter.execute(body).await.map_err(Error::Backend)
    }

    /// Writes `value` to `data_key` unless `token` is lower than the highest token
    /// `fence_key` has seen, checked and written atomically by the core's `fenced_set`
    /// script (the fence then remembers `token`): Python's and JavaScript's
    /// `fenced_set`. With `owner` (`lease.owner_id()`) the owner-bound rule: the fence
    /// records the owner with its highest token and refuses that token from any other
    /// owner, so a token granted twice (a failover) writes once; without it the
    /// token-only rule, under which two holders of one token both write. For Redis
    /// backends (`redis://`, `rediss://`, `upstash+…`, `memory://`); put both keys in
    /// one hash slot (`{tag}`) on Redis Cluster.
    ///
    /// Errors: [`Error::StaleToken`] refused (a newer token wrote; with `owner`, or
    /// another owner wrote with this token); [`Error::Config`] for one key used as both
    /// (before anything is sent) or a backend other than Redis; [`Error::Backend`] when
    /// the server could not be reached (the write may or may not have happened);
    /// [`Error::Protocol`] for an error reply or one of another shape.
    pub async fn fenced_set(
        &self,
        data_key: &str,
        fence_key: &str,
        token: FencingToken,
        value: &str,
        owner: Option<OwnerId>,
    ) -> Result<(), Error> {
        use fencepost_core::fence;
        fence::check_redis_fenced_set_keys(data_key, fence_key)
            .map_err(|e| Error::Config(e.to_string()))?;
        if !matches!(*self.backend, Backend::Redis(_)) {
            return Err(Error::Config(format!(
                "fenced_set runs on Redis; this client's backend is {}: build the fenced \
                 write with fencepost::core::fence for it and run it with Client::execute",
                self.backend.name()
            )));
        }
        let command = match owner {
            Some(owner) => fence::redis_fenced_set_owned(data_key, fence_key, token, owner, value),
            None => fence::redis_fenced_set(data_key, fence_key, token, value),
        };
        let reply = self
            .adapter
            .execute(RequestBody::Redis(command))
            .await
            .map_err(|e| Error::Backend(format!("fenced SET of {data_key:?} failed: {e}")))?;
        let Reply::Redis(value) = reply else {
            return Err(Error::Protocol(fencepost_core::ProtocolError {
                backend: "redis".to_owned(),
                message: format!(
                    "fenced SET of {data_key:?}: a reply that is not Redis's: {reply:?}"
                ),
            }));
        };
        fence::read_redis_fenced_set(data_key, token, &value)??;
        Ok(())
    }

    /// Who holds `name` now (`None`: nobody), as the server sees it.
    ///
    /// Errors: [`Error::Backend`]; [`Error::Protocol`] for a reply of an unexpected
    /// shape; [`Error::Config`] on a backend that cannot be queried.
    pub async fn status(&self, name: &str) -> Result<Option<Holder>, Error> {
        fencepost_core::backends::check_lock_name(name)?;
        self.adapter.holder(name.to_owned()).await
    }

    /// The held locks whose names start with `prefix` (`""`: all), at most `limit`.
    /// Redis scans with `SCAN … MATCH` in bounded steps (never `KEYS`); PostgreSQL
    /// reads the lease table in name order; etcd ranges over the key prefix; ZooKeeper
    /// lists the root's children (the lock names) and reads each one's lowest contender;
    /// Kubernetes pages through the namespace's Leases (`?limit=500` and `continue`, at
    /// most 100 pages) and keeps the held ones under the prefix. `limit` 0 lists
    /// nothing, without a request.
    ///
    /// Errors: as [`Client::status`].
    pub async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<Holder>, Error> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.adapter.list(prefix.to_owned(), limit).await
    }
}

/// A held lease. It renews itself until [`Lease::release`]d or lost; race your work
/// against [`Lease::lost`]. Dropping it releases it (best effort, nobody told).
pub struct Lease {
    inner: driver::Lease,
    name: Arc<str>,
    lost: Shared<BoxFuture<'static, LostReason>>,
}

impl Lease {
    /// The fencing token the server granted: carry it on every write to the protected
    /// resource. Strictly increases from one grant of the lock to the next.
    pub fn token(&self) -> FencingToken {
        self.inner.token()
    }

    /// The owner id of this acquisition (the value in the server's lock key).
    pub fn owner_id(&self) -> OwnerId {
        self.inner.owner()
    }

    /// How the lock's previous holder ended, as the server saw it at this grant:
    /// `Released`, `Expired` (its lease ran out or was freed behind it: it may have left
    /// its work half done), `None` (the first grant of the name) or `Unknown`.
    ///
    /// Reported by Redis (plain, fair, Upstash and `memory://`), PostgreSQL lease rows,
    /// etcd and Kubernetes. `Unknown` always on ZooKeeper, Redlock and PostgreSQL
    /// advisory locks, which keep no record; and wherever the records cannot tell: a
    /// grant retried after its reply was lost, a token floor that moved the counter, an
    /// etcd waiter that never saw its predecessor holding.
    pub fn previous(&self) -> fencepost_core::Previous {
        self.inner.previous()
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Resolves with the reason once the lease is lost; pends forever while it is held
    /// or after it was released. `'static`: spawn it, or `select!` on it.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.lost.clone()
    }

    /// A cheap, cloneable view of this lease (token, owner, loss) for tasks.
    pub fn handle(&self) -> LeaseHandle {
        LeaseHandle {
            name: self.name.clone(),
            token: self.token(),
            owner: self.owner_id(),
            lost: self.lost.clone(),
        }
    }

    /// Renews now and waits for the server's confirmation.
    ///
    /// Errors: [`Error::Lost`]; [`Error::DriverGone`].
    pub async fn extend(&self) -> Result<(), Error> {
        self.inner
            .extend()
            .await
            .map_err(|e| Error::from_driver(&self.name, e))
    }

    /// Releases the lease (owner-checked) and waits for the outcome.
    ///
    /// Errors: [`Error::Lost`] when the lease had been lost or the server no longer
    /// held it; [`Error::DriverGone`].
    pub async fn release(self) -> Result<(), Error> {
        let name = self.name.clone();
        self.inner
            .release()
            .await
            .map_err(|e| Error::from_driver(&name, e))
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("name", &self.name)
            .field("token", &self.token())
            .field("owner_id", &self.owner_id())
            .finish()
    }
}

/// What [`Client::with_lock`] hands its work: the lease's name, token, owner id and
/// loss, cloneable into tasks. It does not keep the lease alive or release it.
#[derive(Clone)]
pub struct LeaseHandle {
    name: Arc<str>,
    token: FencingToken,
    owner: OwnerId,
    lost: Shared<BoxFuture<'static, LostReason>>,
}

impl LeaseHandle {
    /// The fencing token (see [`Lease::token`]).
    pub fn token(&self) -> FencingToken {
        self.token
    }
    /// The owner id (see [`Lease::owner_id`]).
    pub fn owner_id(&self) -> OwnerId {
        self.owner
    }
    /// The lock name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Resolves once the lease is lost (see [`Lease::lost`]).
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.lost.clone()
    }
}

impl std::fmt::Debug for LeaseHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseHandle")
            .field("name", &self.name)
            .field("token", &self.token)
            .finish()
    }
}
