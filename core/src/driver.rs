//! A runtime-agnostic async driver (feature `driver`): runs a [`Machine`] on any
//! executor — tokio, async-std, smol, `futures::executor` — given a [`Transport`] that
//! executes requests and a [`Clock`] that reads monotonic time and sleeps.
//!
//! ```ignore
//! let (locks, run) = fencepost_core::driver::driver(Backend::default(), transport, clock)?;
//! spawn(run);                              // on your runtime; ends when `locks` is dropped
//! let lease = locks.acquire("report", LockOptions::ttl(Duration::from_secs(30))).await?;
//! write_report(lease.token()).await;        // carry the token on every write
//! futures::select! { _ = lease.lost().fuse() => {}, _ = work.fuse() => {} }
//! lease.release().await?;
//! ```
//!
//! Like every binding, the driver only translates: requests go to the transport with
//! their deadline, replies and transport errors go back to the machine in arrival
//! order, and the machine's events resolve the futures below. It makes no lock
//! decision of its own.

use core::future::Future;
use core::pin::Pin;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures::channel::{mpsc, oneshot};
use futures::future::{select, Either, FutureExt, Shared};
use futures::stream::{FuturesUnordered, StreamExt};
use thiserror::Error;

use crate::{
    AcquireFailedReason, Backend, EntropyError, Event, FencingToken, Input, Instant, LockId,
    LockOptions, LostReason, Machine, Output, OwnerId, Reply, Request, RequestId, UsageError,
};

/// Executes backend requests with a real client library (redis-rs, fred, …).
pub trait Transport: Clone + 'static {
    /// The future of one request.
    type Execute: Future<Output = Result<Reply, String>> + 'static;
    /// Sends `request` and resolves to the server's reply as data, or to a transport
    /// error message (connection reset, timeout). The driver cancels (drops) the
    /// future at `request.deadline`. On a Redlock, a
    /// [`RequestBody::RedlockPart`](crate::RequestBody::RedlockPart) goes to the master
    /// it names; the driver runs a step's parts at once.
    fn execute(&self, request: &Request) -> Self::Execute;
}

/// Monotonic time and sleeping, from the host runtime.
pub trait Clock: Clone + 'static {
    /// The future of one sleep.
    type Sleep: Future<Output = ()> + 'static;
    /// The current monotonic time, in nanoseconds since an origin fixed for the clock's
    /// life (for example `origin.elapsed()` of a `std::time::Instant` taken once).
    fn now(&self) -> Instant;
    /// Resolves at (or after) `at` on this clock.
    fn sleep_until(&self, at: Instant) -> Self::Sleep;
}

/// Why a lock operation of the driver failed.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum LockError {
    /// Bad options or name: the caller's fault.
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// Acquiring gave up (timeout, or a reply retrying cannot fix).
    #[error("acquire failed: {0:?}")]
    AcquireFailed(AcquireFailedReason),
    /// The lease was lost (see [`LostReason`]); at release this means it ended on the
    /// server while this process still believed it held it.
    #[error("lease lost: {0:?}")]
    Lost(LostReason),
    /// The driver's run future was dropped or finished.
    #[error("the fencepost driver is not running")]
    DriverGone,
}

enum Command {
    Acquire {
        name: String,
        options: LockOptions,
        reply: oneshot::Sender<Result<Lease, LockError>>,
        /// The caller's handle, handed on to the lease (the run loop holds none, so it
        /// ends once every handle and lease is gone).
        handle: Locks,
    },
    Extend {
        lock: LockId,
        reply: oneshot::Sender<Result<(), LockError>>,
    },
    Release {
        lock: LockId,
        reply: oneshot::Sender<Result<(), LockError>>,
    },
}

/// A handle to a running driver: cheap to clone, one per task if you like.
#[derive(Clone)]
pub struct Locks {
    commands: mpsc::UnboundedSender<Command>,
}

/// A held lease. Call [`Lease::release`] when done; a lease dropped without it is
/// released then (best effort, nobody told), so a forgotten lease is not renewed for
/// the driver's whole life.
pub struct Lease {
    /// Whether [`Lease::release`] took it over (then dropping it sends nothing).
    released: bool,
    lock: LockId,
    token: FencingToken,
    previous: crate::Previous,
    owner: OwnerId,
    valid_until: Arc<AtomicU64>,
    lost: Shared<oneshot::Receiver<LostReason>>,
    locks: Locks,
}

impl Lease {
    /// The fencing token: carry it on every write to the protected resource.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// How the lock's previous holder ended, as the server saw it at this grant
    /// ([`crate::Previous`]): `Expired` means it may have left its work half done.
    pub fn previous(&self) -> crate::Previous {
        self.previous
    }

    /// The owner id of this acquisition (the value in the server's lock key).
    pub fn owner(&self) -> OwnerId {
        self.owner
    }

    /// The validity deadline on the driver's clock; moves on each confirmed renewal.
    pub fn valid_until(&self) -> Instant {
        Instant::from_nanos(self.valid_until.load(Ordering::Acquire))
    }

    /// Resolves with the reason when the lease is lost ([`LostReason::Closed`] when the
    /// driver stops while it is held, or while its release is still unconfirmed);
    /// pends forever while it is held or after it was released. Race your work
    /// against it.
    pub fn lost(&self) -> impl Future<Output = LostReason> + 'static {
        let lost = self.lost.clone();
        async move {
            match lost.await {
                Ok(reason) => reason,
                Err(_) => futures::future::pending().await,
            }
        }
    }

    /// Releases the lease (owner-checked) and waits for the outcome.
    ///
    /// Errors: [`LockError::Lost`] when the lease had already been lost, or the server
    /// no longer held it; [`LockError::DriverGone`].
    pub async fn release(mut self) -> Result<(), LockError> {
        self.released = true;
        self.locks.release(self.lock).await
    }

    /// Renews the lease now (a manual extend, auto-renew on or off) and waits for the
    /// renewal's outcome: `Ok` once the server confirmed it ([`Lease::valid_until`]
    /// has moved), [`LockError::Lost`] if the lease is lost meanwhile (a refused
    /// renewal, or its validity ended while the renewal was retried). A renewal
    /// already in flight answers for this one.
    ///
    /// Errors: [`LockError::Lost`]; [`LockError::DriverGone`].
    pub async fn extend(&self) -> Result<(), LockError> {
        let (reply, rx) = oneshot::channel();
        self.locks
            .commands
            .unbounded_send(Command::Extend {
                lock: self.lock,
                reply,
            })
            .map_err(|_| LockError::DriverGone)?;
        rx.await.map_err(|_| LockError::DriverGone)?
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.released {
            // nobody waits for the outcome: the reply channel is dropped with it
            let (reply, _) = oneshot::channel();
            let lock = self.lock;
            let _ = self
                .locks
                .commands
                .unbounded_send(Command::Release { lock, reply });
        }
    }
}

impl Locks {
    /// Acquires `name`, waiting as `options.acquire_timeout` allows.
    ///
    /// Errors: [`LockError::Usage`] for bad options; [`LockError::AcquireFailed`];
    /// [`LockError::DriverGone`]. Dropping the future cancels the acquisition (the
    /// machine releases whatever the server may have granted).
    pub async fn acquire(&self, name: &str, options: LockOptions) -> Result<Lease, LockError> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .unbounded_send(Command::Acquire {
                name: name.to_owned(),
                options,
                reply,
                handle: self.clone(),
            })
            .map_err(|_| LockError::DriverGone)?;
        rx.await.map_err(|_| LockError::DriverGone)?
    }

    async fn release(&self, lock: LockId) -> Result<(), LockError> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .unbounded_send(Command::Release { lock, reply })
            .map_err(|_| LockError::DriverGone)?;
        rx.await.map_err(|_| LockError::DriverGone)?
    }
}

/// What the driver keeps per lock: who waits for what.
#[derive(Default)]
struct Slot {
    acquired: Option<(oneshot::Sender<Result<Lease, LockError>>, Locks)>,
    lost: Option<oneshot::Sender<LostReason>>,
    released: Option<oneshot::Sender<Result<(), LockError>>>,
    /// Callers of [`Lease::extend`] waiting for the next renewal's outcome.
    extended: Vec<oneshot::Sender<Result<(), LockError>>>,
    valid_until: Arc<AtomicU64>,
}

impl Drop for Slot {
    /// A slot dropped with its lease still held is a driver that stopped (its run
    /// future dropped or finished) under the lease: nothing renews it any more, so the
    /// lease is lost, with the reason every binding uses for a closed backend.
    fn drop(&mut self) {
        if let Some(tx) = self.lost.take() {
            let _ = tx.send(LostReason::Closed);
        }
    }
}

/// One request in flight, cancelled at its deadline. A named future (not a boxed
/// `dyn`) so the run future is `Send` whenever the transport's and clock's are.
struct InFlight<E, S> {
    id: RequestId,
    execute: Pin<Box<E>>,
    deadline: Pin<Box<S>>,
}

impl<E, S> Future for InFlight<E, S>
where
    E: Future<Output = Result<Reply, String>>,
    S: Future<Output = ()>,
{
    type Output = (RequestId, Result<Reply, String>);

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut core::task::Context<'_>,
    ) -> core::task::Poll<Self::Output> {
        use core::task::Poll;
        let id = self.id;
        if let Poll::Ready(result) = self.execute.as_mut().poll(cx) {
            return Poll::Ready((id, result));
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready((id, Err("cancelled at its deadline".to_owned()))),
            Poll::Pending => Poll::Pending,
        }
    }
}

type Pending<T, C> = InFlight<<T as Transport>::Execute, <C as Clock>::Sleep>;

/// Builds a driver: the [`Locks`] handle, and the future that runs the machine. Spawn
/// the future on your runtime; it finishes when every `Locks` handle is dropped and no
/// lock remains.
///
/// Errors: [`EntropyError`] when the platform has no secure randomness for owner ids.
pub fn driver<T: Transport, C: Clock>(
    backend: Backend,
    transport: T,
    clock: C,
) -> Result<(Locks, impl Future<Output = ()>), EntropyError> {
    let machine = Machine::new(backend)?;
    Ok(driver_with_machine(machine, transport, clock))
}

/// [`driver`] with a machine you built (a seeded one, for deterministic tests).
pub fn driver_with_machine<T: Transport, C: Clock>(
    machine: Machine,
    transport: T,
    clock: C,
) -> (Locks, impl Future<Output = ()>) {
    let (tx, rx) = mpsc::unbounded();
    (
        Locks { commands: tx },
        run(machine, transport, clock, rx, None),
    )
}

/// A host's receiver of the machine's observations (see [`crate::Observation`]).
pub type Observer = Box<dyn FnMut(crate::Observed) + Send>;

/// [`driver_with_machine`] whose machine's observations (switch them on with
/// [`Machine::observe`] first) go to `observer`, on the driver's task, after each
/// input and before the outputs it caused are handled.
pub fn driver_observed<T: Transport, C: Clock>(
    machine: Machine,
    transport: T,
    clock: C,
    observer: Observer,
) -> (Locks, impl Future<Output = ()>) {
    let (tx, rx) = mpsc::unbounded();
    (
        Locks { commands: tx },
        run(machine, transport, clock, rx, Some(observer)),
    )
}

async fn run<T: Transport, C: Clock>(
    mut machine: Machine,
    transport: T,
    clock: C,
    mut commands: mpsc::UnboundedReceiver<Command>,
    mut observer: Option<Observer>,
) {
    let mut slots: HashMap<LockId, Slot> = HashMap::new();
    // Leases lost while their holder still has the handle: its release (or drop)
    // answers with the reason, then forgets it.
    let mut gone: HashMap<LockId, LostReason> = HashMap::new();
    let mut pending: FuturesUnordered<Pending<T, C>> = FuturesUnordered::new();
    let mut commands_open = true;
    let mut acquiring: Vec<LockId> = Vec::new();
    loop {
        if let Some(observe) = observer.as_mut() {
            while let Some(o) = machine.poll_observation() {
                observe(o);
            }
        }
        let next = drain(
            &mut machine,
            &transport,
            &clock,
            &mut pending,
            &mut slots,
            &mut gone,
        );
        if !commands_open && slots.is_empty() && pending.is_empty() {
            return;
        }
        let sleep = match next {
            Some(at) => clock.sleep_until(at).left_future(),
            None => futures::future::pending::<()>().right_future(),
        };
        // An empty FuturesUnordered yields `None` at once: only wait on it when it
        // has requests in flight.
        let reply = if pending.is_empty() {
            futures::future::pending().right_future()
        } else {
            pending.next().left_future()
        };
        let wake = futures::future::select(Box::pin(sleep), reply);
        let command = if commands_open {
            commands.next().left_future()
        } else {
            futures::future::pending().right_future()
        };
        // a caller that stopped waiting for an acquisition (its future dropped) cancels
        // it now, not at its grant: a dropped waiter must not keep contending
        let abandoned = futures::future::poll_fn(|cx| abandoned(&mut slots, &mut acquiring, cx));
        let woke = match select(select(Box::pin(command), Box::pin(abandoned)), wake).await {
            Either::Left((Either::Left((cmd, _)), _)) => Woke::Command(cmd),
            Either::Left((Either::Right((lock, _)), _)) => Woke::Abandoned(lock),
            Either::Right((Either::Left(((), _)), _)) => Woke::Timeout,
            Either::Right((Either::Right((reply, _)), _)) => Woke::Reply(reply),
        };
        match woke {
            Woke::Command(Some(cmd)) => handle_command(
                &mut machine,
                &clock,
                &mut slots,
                &mut gone,
                &mut acquiring,
                cmd,
            ),
            Woke::Command(None) => commands_open = false,
            Woke::Abandoned(lock) => {
                // the acquisition ends with Released, which drops the slot
                let _ = machine.release(clock.now(), lock);
            }
            Woke::Timeout => {
                let _ = machine.handle_input(Input::Timeout { now: clock.now() });
            }
            Woke::Reply(Some((request, result))) => {
                let now = clock.now();
                let input = match result {
                    Ok(reply) => Input::Reply {
                        now,
                        request,
                        reply,
                    },
                    Err(message) => Input::TransportError {
                        now,
                        request,
                        message,
                    },
                };
                // Only a broken clock (backwards, out of range) can fail here; the next
                // acquire or release reports it.
                let _ = machine.handle_input(input);
            }
            Woke::Reply(None) => {}
        }
    }
}

/// What woke the driver's loop.
enum Woke {
    Command(Option<Command>),
    Abandoned(LockId),
    Timeout,
    Reply(Option<(RequestId, Result<Reply, String>)>),
}

/// Ready with a lock whose acquisition nobody waits for any more (the caller dropped
/// its future); its slot forgets the caller. `acquiring` lists the locks still
/// acquiring (few: held leases are not in it), pruned here as they finish.
fn abandoned(
    slots: &mut HashMap<LockId, Slot>,
    acquiring: &mut Vec<LockId>,
    cx: &mut core::task::Context<'_>,
) -> core::task::Poll<LockId> {
    let mut found = None;
    acquiring.retain(|lock| {
        let Some(slot) = slots.get_mut(lock) else {
            return false;
        };
        let Some((tx, _)) = slot.acquired.as_mut() else {
            return false;
        };
        if found.is_none() && tx.poll_canceled(cx).is_ready() {
            slot.acquired = None;
            found = Some(*lock);
            return false;
        }
        true
    });
    match found {
        Some(lock) => core::task::Poll::Ready(lock),
        None => core::task::Poll::Pending,
    }
}

fn handle_command<C: Clock>(
    machine: &mut Machine,
    clock: &C,
    slots: &mut HashMap<LockId, Slot>,
    gone: &mut HashMap<LockId, LostReason>,
    acquiring: &mut Vec<LockId>,
    cmd: Command,
) {
    let now = clock.now();
    match cmd {
        Command::Acquire {
            name,
            options,
            reply,
            handle,
        } => match machine.acquire(now, &name, options) {
            Ok(lock) => {
                slots.insert(
                    lock,
                    Slot {
                        acquired: Some((reply, handle)),
                        lost: None,
                        released: None,
                        extended: Vec::new(),
                        valid_until: Arc::default(),
                    },
                );
                acquiring.push(lock);
            }
            Err(e) => {
                let _ = reply.send(Err(e.into()));
            }
        },
        Command::Extend { lock, reply } => match slots.get_mut(&lock) {
            Some(slot) => match machine.extend(now, lock) {
                Ok(()) => slot.extended.push(reply),
                Err(e) => {
                    let _ = reply.send(Err(e.into()));
                }
            },
            // a lease exists only until its lock finishes: this one was lost
            None => {
                let reason = gone.get(&lock).cloned().unwrap_or(LostReason::Closed);
                let _ = reply.send(Err(LockError::Lost(reason)));
            }
        },
        Command::Release { lock, reply } => match slots.get_mut(&lock) {
            Some(slot) => match machine.release(now, lock) {
                Ok(()) => slot.released = Some(reply),
                Err(e) => {
                    let _ = reply.send(Err(e.into()));
                }
            },
            // already finished: lost (the reason, once) or released before
            None => {
                let result = gone
                    .remove(&lock)
                    .map_or(Ok(()), |r| Err(LockError::Lost(r)));
                let _ = reply.send(result);
            }
        },
    }
}

/// Drains the machine's outputs; returns the next timeout.
fn drain<T: Transport, C: Clock>(
    machine: &mut Machine,
    transport: &T,
    clock: &C,
    pending: &mut FuturesUnordered<Pending<T, C>>,
    slots: &mut HashMap<LockId, Slot>,
    gone: &mut HashMap<LockId, LostReason>,
) -> Option<Instant> {
    loop {
        match machine.poll_output() {
            Output::Request(request) => {
                pending.push(InFlight {
                    id: request.id,
                    execute: Box::pin(transport.execute(&request)),
                    deadline: Box::pin(clock.sleep_until(request.deadline)),
                });
            }
            Output::Event { lock, event } => on_event(machine, clock, slots, gone, lock, event),
            Output::Timeout(at) => return Some(at),
            Output::Idle => return None,
        }
    }
}

fn on_event<C: Clock>(
    machine: &mut Machine,
    clock: &C,
    slots: &mut HashMap<LockId, Slot>,
    gone: &mut HashMap<LockId, LostReason>,
    lock: LockId,
    event: Event,
) {
    let Some(slot) = slots.get_mut(&lock) else {
        return;
    };
    match event {
        Event::Acquired {
            token,
            valid_until,
            previous,
        } => {
            slot.valid_until
                .store(valid_until.as_nanos(), Ordering::Release);
            let (lost_tx, lost_rx) = oneshot::channel();
            slot.lost = Some(lost_tx);
            let delivered = slot.acquired.take().is_some_and(|(tx, handle)| {
                let lease = Lease {
                    released: false,
                    lock,
                    token,
                    previous,
                    owner: machine.owner(lock).unwrap_or(OwnerId([0; 16])),
                    valid_until: slot.valid_until.clone(),
                    lost: lost_rx.shared(),
                    locks: handle,
                };
                tx.send(Ok(lease)).is_ok()
            });
            if !delivered {
                // The caller stopped waiting: give the lock back.
                let _ = machine.release(clock.now(), lock);
            }
        }
        Event::Renewed { valid_until } => {
            slot.valid_until
                .store(valid_until.as_nanos(), Ordering::Release);
            for tx in slot.extended.drain(..) {
                let _ = tx.send(Ok(()));
            }
        }
        Event::Lost { reason } => {
            for tx in slot.extended.drain(..) {
                let _ = tx.send(Err(LockError::Lost(reason.clone())));
            }
            let held = slot.lost.take().map(|tx| tx.send(reason.clone()));
            match slot.released.take() {
                Some(tx) => {
                    let _ = tx.send(Err(LockError::Lost(reason)));
                }
                // a lease handle is out: its release says the lease was lost
                None if held.is_some() => {
                    gone.insert(lock, reason);
                }
                None => {}
            }
            slots.remove(&lock);
        }
        Event::Released => {
            // released, not lost: `Lease::lost` pends from now on
            drop(slot.lost.take());
            if let Some(tx) = slot.released.take() {
                let _ = tx.send(Ok(()));
            }
            slots.remove(&lock);
        }
        Event::AcquireFailed { reason } => {
            if let Some((tx, _)) = slot.acquired.take() {
                let _ = tx.send(Err(LockError::AcquireFailed(reason)));
            }
            slots.remove(&lock);
        }
    }
}
