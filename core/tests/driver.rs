//! The async driver on a virtual clock and a single-threaded executor, against the
//! in-memory server with a 1 ms network each way: no real time passes.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use fencepost_core::driver::{driver_with_machine, Clock, LockError, Transport};
use fencepost_core::memory::{MemoryRedis, MemoryRedlock};
use fencepost_core::{
    AcquireFailedReason, Backend, Instant, LockOptions, LostReason, Machine, RedlockBackend, Reply,
    Request,
};
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;

#[derive(Default)]
struct World {
    now: Instant,
    sleepers: Vec<(Instant, Waker)>,
    server: MemoryRedis,
    /// Five Redlock masters, for request parts.
    masters: MemoryRedlock,
}

#[derive(Clone, Default)]
struct Virtual(Rc<RefCell<World>>);

struct Sleep {
    world: Virtual,
    at: Instant,
}

impl Future for Sleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut w = self.world.0.borrow_mut();
        if w.now >= self.at {
            Poll::Ready(())
        } else {
            w.sleepers.push((self.at, cx.waker().clone()));
            Poll::Pending
        }
    }
}

impl Clock for Virtual {
    type Sleep = Sleep;
    fn now(&self) -> Instant {
        self.0.borrow().now
    }
    fn sleep_until(&self, at: Instant) -> Sleep {
        Sleep {
            world: self.clone(),
            at,
        }
    }
}

impl Transport for Virtual {
    type Execute = Pin<Box<dyn Future<Output = Result<Reply, String>>>>;
    fn execute(&self, request: &Request) -> Self::Execute {
        let world = self.clone();
        let body = request.body.clone();
        Box::pin(async move {
            let there = world.now() + Duration::from_millis(1);
            world.sleep_until(there).await;
            let reply = {
                let mut w = world.0.borrow_mut();
                let now = w.now;
                if MemoryRedlock::master_of(&body).is_some() {
                    w.masters.execute(now, &body)
                } else {
                    w.server.execute(now, &body)
                }
            };
            let back = world.now() + Duration::from_millis(1);
            world.sleep_until(back).await;
            Ok(reply)
        })
    }
}

impl Virtual {
    /// Runs the executor, advancing virtual time from sleeper to sleeper, until `done`
    /// or `limit`.
    fn run_until(&self, pool: &mut LocalPool, limit: Duration, done: impl Fn() -> bool) {
        let end = Instant::ZERO + limit;
        loop {
            pool.run_until_stalled();
            if done() {
                return;
            }
            let mut w = self.0.borrow_mut();
            let Some(next) = w.sleepers.iter().map(|(at, _)| *at).min() else {
                return;
            };
            if next > end {
                return;
            }
            w.now = w.now.max(next);
            let now = w.now;
            let (due, rest): (Vec<_>, Vec<_>) =
                w.sleepers.drain(..).partition(|(at, _)| *at <= now);
            w.sleepers = rest;
            drop(w);
            for (_, waker) in due {
                waker.wake();
            }
        }
    }
}

fn setup() -> (Virtual, LocalPool, fencepost_core::driver::Locks) {
    setup_on(Backend::default())
}

fn setup_on(backend: Backend) -> (Virtual, LocalPool, fencepost_core::driver::Locks) {
    let world = Virtual::default();
    let machine = Machine::with_seed(backend, 1);
    let (locks, run) = driver_with_machine(machine, world.clone(), world.clone());
    let pool = LocalPool::new();
    pool.spawner().spawn_local(run).unwrap();
    (world, pool, locks)
}

fn opts(ttl_ms: u64) -> LockOptions {
    LockOptions::ttl(Duration::from_millis(ttl_ms))
}

#[test]
fn acquire_contend_release_reacquire() {
    let (world, mut pool, locks) = setup();
    let out = Rc::new(RefCell::new(Vec::new()));
    let (o, l) = (out.clone(), locks.clone());
    pool.spawner()
        .spawn_local(async move {
            let lease = l.acquire("report", opts(1_000)).await.unwrap();
            o.borrow_mut().push(format!("token {}", lease.token()));
            let mut once = opts(1_000);
            once.acquire_timeout = Some(Duration::ZERO);
            match l.acquire("report", once).await {
                Err(LockError::AcquireFailed(AcquireFailedReason::Timeout { .. })) => {
                    o.borrow_mut().push("busy".into())
                }
                other => o
                    .borrow_mut()
                    .push(format!("unexpected {:?}", other.map(|l| l.token()))),
            }
            lease.release().await.unwrap();
            let again = l.acquire("report", opts(1_000)).await.unwrap();
            o.borrow_mut().push(format!("token {}", again.token()));
            again.release().await.unwrap();
            o.borrow_mut().push("done".into());
        })
        .unwrap();
    world.run_until(&mut pool, Duration::from_secs(10), || {
        out.borrow().last().is_some_and(|s| s == "done")
    });
    assert_eq!(*out.borrow(), ["token 1", "busy", "token 2", "done"]);
}

#[test]
fn a_redlock_lease_through_the_driver_is_held_on_every_master_then_released() {
    let masters = (0..5).map(|i| format!("m{i}")).collect();
    let backend = Backend::Redlock(RedlockBackend {
        masters,
        ..RedlockBackend::default()
    });
    let (world, mut pool, locks) = setup_on(backend);
    let out = Rc::new(RefCell::new(Vec::new()));
    let (o, w2) = (out.clone(), world.clone());
    pool.spawner()
        .spawn_local(async move {
            let lease = locks.acquire("report", opts(1_000)).await.unwrap();
            let owner = lease.owner().to_string();
            let held = {
                let w = w2.0.borrow();
                w.masters
                    .masters
                    .iter()
                    .filter(|m| m.get(w.now, "fencepost:{report}:lock") == Some(owner.as_str()))
                    .count()
            };
            o.borrow_mut()
                .push(format!("token {} on {held} masters", lease.token()));
            lease.release().await.unwrap();
            o.borrow_mut().push("done".into());
        })
        .unwrap();
    world.run_until(&mut pool, Duration::from_secs(10), || {
        out.borrow().last().is_some_and(|s| s == "done")
    });
    // every master answers in 2 ms here, so all five granted before the grant was read
    assert_eq!(*out.borrow(), ["token 1 on 5 masters", "done"]);
    let w = world.0.borrow();
    assert!(w
        .masters
        .masters
        .iter()
        .all(|m| m.get(w.now, "fencepost:{report}:lock").is_none()));
}

#[test]
fn a_held_lease_is_renewed_and_a_deleted_key_is_reported_lost() {
    let (world, mut pool, locks) = setup();
    let lost = Rc::new(RefCell::new(None));
    let l2 = lost.clone();
    let w2 = world.clone();
    pool.spawner()
        .spawn_local(async move {
            let lease = locks.acquire("report", opts(1_000)).await.unwrap();
            // renewed at ~333, ~667, …: still valid long after one TTL
            w2.sleep_until(Instant::from_millis(2_500)).await;
            assert!(lease.valid_until() > Instant::from_millis(2_500), "renewed");
            w2.0.borrow_mut().server.delete("fencepost:{report}:lock");
            let reason = lease.lost().await;
            *l2.borrow_mut() = Some((reason, w2.now()));
        })
        .unwrap();
    world.run_until(&mut pool, Duration::from_secs(10), || {
        lost.borrow().is_some()
    });
    let (reason, at) = lost.borrow().clone().expect("lost");
    assert_eq!(reason, LostReason::RenewRejected);
    assert!(
        at <= Instant::from_millis(2_500 + 340),
        "reported at the next renewal, got {at}"
    );
}

#[test]
fn releasing_a_lost_lease_says_it_was_lost_and_extending_says_why() {
    let (world, mut pool, locks) = setup();
    let out = Rc::new(RefCell::new(None));
    let o = out.clone();
    let w2 = world.clone();
    pool.spawner()
        .spawn_local(async move {
            let lease = locks.acquire("report", opts(1_000)).await.unwrap();
            w2.0.borrow_mut().server.delete("fencepost:{report}:lock");
            let reason = lease.lost().await;
            let extended = lease.extend().await;
            let released = lease.release().await;
            *o.borrow_mut() = Some((reason, extended, released));
        })
        .unwrap();
    world.run_until(&mut pool, Duration::from_secs(5), || out.borrow().is_some());
    let (reason, extended, released) = out.borrow_mut().take().expect("done");
    assert_eq!(reason, LostReason::RenewRejected);
    assert!(
        matches!(extended, Err(LockError::Lost(LostReason::RenewRejected))),
        "{extended:?}"
    );
    assert!(
        matches!(released, Err(LockError::Lost(LostReason::RenewRejected))),
        "{released:?}"
    );
}

/// Starts acquiring `report` and gives up at `at`: the future is dropped, as by a
/// caller that stopped waiting.
async fn give_up_at(locks: &fencepost_core::driver::Locks, world: &Virtual, at: Instant) {
    let acquire = Box::pin(locks.acquire("report", opts(1_000)));
    let _ = futures::future::select(acquire, world.sleep_until(at)).await;
}

/// One try at `report` (acquire timeout zero): the token granted, or why not.
async fn one_try(locks: &fencepost_core::driver::Locks) -> Result<u64, LockError> {
    let mut once = opts(1_000);
    once.acquire_timeout = Some(Duration::ZERO);
    locks.acquire("report", once).await.map(|l| l.token().get())
}

#[test]
fn dropping_the_acquire_future_gives_the_lock_back() {
    let (world, mut pool, locks) = setup();
    let done = Rc::new(RefCell::new(None));
    let d = done.clone();
    let w2 = world.clone();
    pool.spawner()
        .spawn_local(async move {
            // give up after 0.5 ms, while the request is on the wire
            give_up_at(&locks, &w2, Instant::from_nanos(500_000)).await;
            w2.sleep_until(Instant::from_millis(50)).await;
            *d.borrow_mut() = Some(one_try(&locks).await);
        })
        .unwrap();
    world.run_until(&mut pool, Duration::from_secs(5), || {
        done.borrow().is_some()
    });
    assert_eq!(
        *done.borrow(),
        Some(Ok(2)),
        "the abandoned grant (token 1) was released"
    );
}

#[test]
fn a_waiter_whose_acquire_future_is_dropped_stops_contending_at_once() {
    let (world, mut pool, locks) = setup();
    let done = Rc::new(RefCell::new(None));
    let d = done.clone();
    let w2 = world.clone();
    pool.spawner()
        .spawn_local(async move {
            let held = locks.acquire("report", opts(1_000)).await.unwrap();
            // a waiter that gives up after 20 ms of contention
            give_up_at(&locks, &w2, Instant::from_millis(20)).await;
            w2.sleep_until(Instant::from_millis(100)).await;
            held.release().await.unwrap();
            // long past any retry the waiter would have made (at most retry_max, 500 ms)
            w2.sleep_until(Instant::from_millis(2_000)).await;
            *d.borrow_mut() = Some(one_try(&locks).await);
        })
        .unwrap();
    world.run_until(&mut pool, Duration::from_secs(10), || {
        done.borrow().is_some()
    });
    assert_eq!(
        *done.borrow(),
        Some(Ok(2)),
        "the abandoned waiter took no grant (token 2 would have been its)"
    );
}

#[test]
fn the_run_future_ends_when_every_handle_is_gone() {
    let (world, mut pool, locks) = setup();
    drop(locks);
    world.run_until(&mut pool, Duration::from_secs(1), || false);
    pool.run_until_stalled();
    assert!(world.0.borrow().sleepers.is_empty());
    // a LocalPool with no live tasks: run() returns at once
    pool.run();
}

#[test]
fn a_lease_held_when_the_driver_stops_is_lost_as_closed() {
    let world = Virtual::default();
    let machine = Machine::with_seed(Backend::default(), 1);
    let (locks, run) = driver_with_machine(machine, world.clone(), world.clone());
    let (run, stop) = futures::future::abortable(run);
    let mut pool = LocalPool::new();
    pool.spawner()
        .spawn_local(async move {
            let _ = run.await;
        })
        .unwrap();
    let lease = Rc::new(RefCell::new(None));
    let (l2, w2) = (lease.clone(), world.clone());
    pool.spawner()
        .spawn_local(async move {
            let held = locks.acquire("report", opts(1_000)).await.unwrap();
            w2.sleep_until(Instant::from_millis(100)).await;
            *l2.borrow_mut() = Some(held);
        })
        .unwrap();
    world.run_until(&mut pool, Duration::from_secs(1), || {
        lease.borrow().is_some()
    });
    let held = lease.borrow_mut().take().expect("acquired");
    stop.abort(); // the run future is dropped at its next poll
    pool.run_until_stalled();
    let reason = futures::executor::block_on(held.lost());
    assert_eq!(reason, LostReason::Closed);
}

#[test]
fn a_released_lease_is_not_reported_lost() {
    let (world, mut pool, locks) = setup();
    let out = Rc::new(RefCell::new(None));
    let o = out.clone();
    pool.spawner()
        .spawn_local(async move {
            let lease = locks.acquire("report", opts(1_000)).await.unwrap();
            let lost = lease.lost();
            lease.release().await.unwrap();
            drop(locks); // the driver ends: no slot is left to report anything
            let pending = futures::poll!(Box::pin(lost));
            *o.borrow_mut() = Some(pending.is_pending());
        })
        .unwrap();
    world.run_until(&mut pool, Duration::from_secs(5), || out.borrow().is_some());
    pool.run_until_stalled();
    assert_eq!(*out.borrow(), Some(true));
}

#[test]
fn a_dropped_lease_is_released_not_renewed_forever() {
    let (world, mut pool, locks) = setup();
    let done = Rc::new(RefCell::new(None));
    let (d, w2) = (done.clone(), world.clone());
    pool.spawner()
        .spawn_local(async move {
            let lease = locks.acquire("report", opts(1_000)).await.unwrap();
            assert_eq!(lease.token().get(), 1);
            drop(lease); // neither released nor kept
            w2.sleep_until(Instant::from_millis(50)).await;
            let mut once = opts(1_000);
            once.acquire_timeout = Some(Duration::ZERO);
            *d.borrow_mut() = Some(locks.acquire("report", once).await.map(|l| l.token().get()));
        })
        .unwrap();
    world.run_until(&mut pool, Duration::from_secs(5), || {
        done.borrow().is_some()
    });
    // well before the 1 s TTL: the drop released it
    assert_eq!(*done.borrow(), Some(Ok(2)));
}

#[test]
fn extend_renews_now_and_moves_the_validity() {
    let (world, mut pool, locks) = setup();
    let out = Rc::new(RefCell::new(None));
    let (o, w2) = (out.clone(), world.clone());
    pool.spawner()
        .spawn_local(async move {
            let mut manual = opts(1_000);
            manual.auto_renew = false;
            let lease = locks.acquire("report", manual).await.unwrap();
            let before = lease.valid_until();
            w2.sleep_until(Instant::from_millis(200)).await;
            lease.extend().await.unwrap();
            let after = lease.valid_until();
            lease.release().await.unwrap();
            *o.borrow_mut() = Some((before, after));
        })
        .unwrap();
    world.run_until(&mut pool, Duration::from_secs(5), || out.borrow().is_some());
    let (before, after) = out.borrow().expect("done");
    // the renewal was sent at 200 ms: valid until about 200 + 988 ms
    assert!(before < Instant::from_millis(990), "{before:?}");
    assert!(after >= Instant::from_millis(1_188), "{after:?}");
}
