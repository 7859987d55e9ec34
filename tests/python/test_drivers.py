"""The drivers' fast paths: a waiting caller runs its lock's requests itself (asyncio:
in its own coroutine; threads: on its own thread), and what must not change with it —
request deadlines, loss decided by the machine's timer alone, renewals and parked waits
never held up, cancellation."""

from __future__ import annotations

import _thread
import asyncio
import gc
import sys
import threading
import time
from typing import Any, List, Set

import pytest

import fencepost
from fencepost import _core, _driver
from fencepost.errors import AcquireTimeout, BackendError, LockLost

from conftest import wait_until

Command = _core.Request | _core.Command


class HangingBackend(fencepost.MemoryBackend):
    """Requests whose script is in ``hang`` never get an answer (asyncio: until
    cancelled; threads: until ``unblock`` is set); every other request runs at once.
    Records which scripts were cancelled and on which threads requests ran."""

    def __init__(self, hang: Set[str], **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.hang = hang
        self.cancelled: List[str] = []
        self.threads: List[str] = []
        self.unblock = threading.Event()

    async def _execute_async(self, command: Command) -> object:
        if getattr(command, "script", None) in self.hang:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled.append(command.script)
                raise
        return await super()._execute_async(command)

    def _execute_sync(self, command: Command) -> object:
        self.threads.append(threading.current_thread().name)
        if getattr(command, "script", None) in self.hang:
            self.unblock.wait(10)
            raise ConnectionError("hung request given up")
        return super()._execute_sync(command)


# ---- asyncio ----------------------------------------------------------------------------


async def test_an_uncontended_cycle_runs_in_the_caller_without_tasks(backend: fencepost.MemoryBackend) -> None:
    lock = fencepost.Lock(backend, "inline", ttl=5.0)
    await lock.acquire()
    driver = backend._async_driver()
    assert not driver._tasks  # the acquire ran in this coroutine
    await lock.release()
    assert not driver._tasks  # and the release
    assert backend.server.lock_owner("inline") is None


async def test_an_inline_acquire_is_cancelled_at_its_deadline() -> None:
    backend = HangingBackend({"acquire"})
    started = time.monotonic()
    with pytest.raises(AcquireTimeout):
        await fencepost.Lock(backend, "deadline", ttl=5.0, acquire_timeout=0.2).acquire()
    # the attempt's deadline is the acquire deadline (0.2 s); the hung call is cancelled
    assert 0.15 < time.monotonic() - started < 0.5
    assert "acquire" in backend.cancelled


async def test_a_hung_inline_release_ends_at_its_deadline() -> None:
    backend = HangingBackend({"release"})
    lock = fencepost.Lock(backend, "hung-release", ttl=0.3)
    await lock.acquire()
    started = time.monotonic()
    await lock.release()  # the release deadline is one ttl; the key expires by then
    assert 0.2 < time.monotonic() - started < 0.6
    assert "release" in backend.cancelled


async def test_closing_the_backend_abandons_a_hung_inline_acquire_at_once() -> None:
    backend = HangingBackend({"acquire"})
    waiting = asyncio.ensure_future(fencepost.Lock(backend, "closed", ttl=5.0).acquire())
    await asyncio.sleep(0.05)
    started = time.monotonic()
    backend.close()
    with pytest.raises(BackendError):
        await asyncio.wait_for(waiting, 1.0)
    assert time.monotonic() - started < 0.1  # not the acquire's deadline (~5 s)
    await asyncio.sleep(0.01)
    assert "acquire" in backend.cancelled  # abandoned, not left running


async def test_a_hung_renewal_runs_on_its_own_task_and_does_not_delay_loss() -> None:
    backend = HangingBackend({"renew"})
    started = time.monotonic()
    with pytest.raises(LockLost) as info:
        async with fencepost.Lock(backend, "hung-renew", ttl=0.3):
            await asyncio.sleep(5)
    assert time.monotonic() - started < 0.45  # valid until 0.3 · 0.99 − 0.002 s
    assert info.value.reason == "expired"
    await asyncio.sleep(0.05)
    assert "renew" in backend.cancelled  # at the renewal's deadline (its validity)


async def test_cancelling_a_release_in_flight_still_releases() -> None:
    backend = HangingBackend(set())
    lock = fencepost.Lock(backend, "cancel-release", ttl=5.0, retry_base=0.005)
    await lock.acquire()
    backend.hang = {"release"}
    task = asyncio.ensure_future(lock.release())
    await asyncio.sleep(0.02)
    backend.hang = set()  # the machine's retry gets through
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert backend.cancelled == ["release"]
    await asyncio.sleep(0.1)
    assert backend.server.lock_owner("cancel-release") is None


async def test_a_waiting_caller_runs_its_retries_and_others_are_not_held_up() -> None:
    backend = fencepost.MemoryBackend()
    holder = fencepost.Lock(backend, "contended", ttl=0.3)
    await holder.acquire()
    waiter = asyncio.ensure_future(
        fencepost.Lock(backend, "contended", ttl=5.0, retry_base=0.01, retry_max=0.02).acquire()
    )
    for _ in range(3):  # the holder renews (on tasks) while the waiter retries
        await asyncio.sleep(0.1)
        assert not waiter.done()
    assert holder.lease is not None and holder.lease.lost_reason is None
    await holder.release()
    lease = await asyncio.wait_for(waiter, 1.0)
    assert lease.token == 2


async def test_fair_waiter_parks_in_its_own_coroutine_and_gets_the_lock() -> None:
    backend = fencepost.MemoryBackend(fair=True)
    holder = fencepost.Lock(backend, "fair-inline", ttl=5.0)
    await holder.acquire()
    waiter = asyncio.ensure_future(fencepost.Lock(backend, "fair-inline", ttl=5.0).acquire())
    await asyncio.sleep(0.05)
    assert not waiter.done()
    started = time.monotonic()
    await holder.release()
    lease = await asyncio.wait_for(waiter, 1.0)
    assert time.monotonic() - started < 0.1  # woken by the release, not by a backoff
    assert lease.token == 2


# ---- threads ----------------------------------------------------------------------------


class BoundedHangingBackend(HangingBackend):
    """A HangingBackend whose blocking calls are declared to end within ``limit_s``."""

    def __init__(self, hang: Set[str], limit_s: float | None = 0.0, **kwargs: object) -> None:
        super().__init__(hang, **kwargs)
        self.limit_s = limit_s

    def _sync_call_limit_s(self) -> float | None:
        return self.limit_s


def test_a_blocked_caller_runs_its_requests_on_its_own_thread() -> None:
    backend = BoundedHangingBackend(set())
    lock = fencepost.Lock(backend, "sync-inline", ttl=5.0)
    lock.acquire_sync()
    lock.release_sync()
    me = threading.current_thread().name
    assert backend.threads == [me, me]  # acquire, release: no hand-off to a worker
    assert backend.server.lock_owner("sync-inline") is None


def test_requests_go_to_workers_when_the_backend_may_block_past_their_deadline() -> None:
    for limit in (None, 10.0):  # unbounded, or longer than the 5 s deadlines
        backend = BoundedHangingBackend(set(), limit_s=limit)
        lock = fencepost.Lock(backend, "sync-pool", ttl=5.0)
        lock.acquire_sync()
        lock.release_sync()
        assert len(backend.threads) == 2
        assert all(name.startswith("fencepost-request") for name in backend.threads)


def test_sync_hung_renewal_runs_on_a_worker_and_does_not_delay_loss() -> None:
    backend = BoundedHangingBackend({"renew"})
    try:
        lock = fencepost.Lock(backend, "sync-hung-renew", ttl=0.3)
        lease = lock.acquire_sync()
        started = time.monotonic()
        assert lease.lost.wait(1.0)
        assert time.monotonic() - started < 0.35  # valid until 0.3 · 0.99 − 0.002 s
        assert lease.lost_reason == "expired"
        renewers = [name for name in backend.threads[1:2]]
        assert renewers and renewers[0].startswith("fencepost-request")
        with pytest.raises(LockLost):
            lock.release_sync()
    finally:
        backend.unblock.set()


def test_sync_inline_acquire_keeps_the_machine_s_acquire_timeout() -> None:
    # The backend may block 0.3 s; with a 0.2 s acquire timeout the attempt's deadline
    # is closer than that, so the request goes to a worker and the caller returns on
    # time even though the request hangs.
    backend = BoundedHangingBackend({"acquire"}, limit_s=0.3)
    try:
        started = time.monotonic()
        with pytest.raises(AcquireTimeout):
            fencepost.Lock(backend, "sync-deadline", ttl=5.0, acquire_timeout=0.2).acquire_sync()
        assert time.monotonic() - started < 0.5
        assert backend.threads[0].startswith("fencepost-request")
    finally:
        backend.unblock.set()


def test_a_sync_fair_waiter_parks_on_its_own_thread() -> None:
    # The backend says when a blocking pop ends: the caller blocked in acquire_sync
    # runs its BLPOP itself, and the grant it brings needs no thread hand-off.
    backend = BoundedHangingBackend(set(), fair=True)
    holder = fencepost.Lock(backend, "sync-fair", ttl=5.0)
    holder.acquire_sync()
    # the waiter's lease is kept: a lease collected while held is released, on a worker
    got: List[Any] = []
    waiter = threading.Thread(
        target=lambda: got.append(fencepost.Lock(backend, "sync-fair", ttl=5.0).acquire_sync()),
        name="waiter",
    )
    waiter.start()
    # its acquire, then its parked BLPOP
    assert wait_until(lambda: backend.threads.count("waiter") >= 2, timeout=2.0)
    holder.release_sync()
    waiter.join(2.0)
    assert [lease.token for lease in got] == [2]
    assert not any(n.startswith(("fencepost-request", "fencepost-wait")) for n in backend.threads), backend.threads


def test_a_sync_fair_wait_that_could_outlast_the_acquire_timeout_parks_on_the_wait_pool() -> None:
    # Blocking calls may take 1 s here, longer than the waiter's 0.8 s acquire
    # timeout: parked on its own thread it could miss it, so the wait pool parks.
    backend = BoundedHangingBackend(set(), limit_s=1.0, fair=True)
    holder = fencepost.Lock(backend, "sync-fair-deadline", ttl=5.0)
    holder.acquire_sync()
    got: List[int] = []
    waiter = threading.Thread(
        target=lambda: got.append(
            fencepost.Lock(backend, "sync-fair-deadline", ttl=5.0, acquire_timeout=0.8).acquire_sync().token
        ),
        name="waiter",
    )
    waiter.start()
    assert wait_until(lambda: any(n.startswith("fencepost-wait") for n in backend.threads), timeout=2.0)
    holder.release_sync()
    waiter.join(2.0)
    assert got == [2]


def test_close_under_a_waiter_parked_on_its_own_thread_cleans_up_at_once() -> None:
    # The parked caller cannot be woken inside its BLPOP; the cleanup release close()
    # sends must not wait behind it: it runs on the pool at once, and the caller gets
    # BackendError when its wait ends.
    holder_backend = BoundedHangingBackend(set(), fair=True)
    backend = BoundedHangingBackend(set(), fair=True, server=holder_backend.server)
    held = fencepost.Lock(holder_backend, "sync-fair-close", ttl=5.0).acquire_sync()  # kept: a dropped lease is released
    errors: List[BaseException] = []

    def wait() -> None:
        try:
            fencepost.Lock(backend, "sync-fair-close", ttl=5.0, retry_max=1.0).acquire_sync()
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            errors.append(exc)

    waiter = threading.Thread(target=wait, name="waiter")
    waiter.start()
    assert wait_until(lambda: backend.threads.count("waiter") >= 2, timeout=2.0)  # parked
    backend.close()
    assert wait_until(lambda: any(n.startswith("fencepost-request") for n in backend.threads), timeout=0.3)
    waiter.join(2.0)
    assert not waiter.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], BackendError)
    holder_backend.close()


class Interrupt(BaseException):
    """Stands for KeyboardInterrupt arriving while a caller runs its request."""


class InterruptedBackend(BoundedHangingBackend):
    def _execute_sync(self, command: Command) -> object:
        reply = super()._execute_sync(command)
        if getattr(command, "script", None) == "acquire" and not self.unblock.is_set():
            self.unblock.set()
            raise Interrupt()  # after the server granted it
        return reply


def test_an_interrupted_inline_acquire_releases_what_the_server_granted() -> None:
    backend = InterruptedBackend(set())
    with pytest.raises(Interrupt):
        fencepost.Lock(backend, "interrupted", ttl=5.0).acquire_sync()
    assert wait_until(lambda: backend.server.lock_owner("interrupted") is None, timeout=1.0)
    lease = fencepost.Lock(backend, "interrupted", ttl=5.0, acquire_timeout=0).acquire_sync()
    assert lease.token == 2


def test_a_poke_after_the_loop_closed_with_a_caller_mid_request_is_harmless() -> None:
    backend = HangingBackend(set())
    loop = asyncio.new_event_loop()
    held = fencepost.Lock(backend, "held", ttl=30.0)
    lease = loop.run_until_complete(held.acquire())

    async def start_stuck_acquire() -> None:
        backend.hang = {"acquire"}
        stuck = fencepost.Lock(backend, "stuck", ttl=30.0, acquire_timeout=0.05)
        asyncio.ensure_future(stuck.acquire())
        await asyncio.sleep(0.01)  # its caller is now inside the hung request

    loop.run_until_complete(start_stuck_acquire())
    loop.close()  # the stuck caller never resumes
    time.sleep(0.1)  # its acquire deadline passes: the machine fails it on the next poke
    lease.check()  # fed on this thread (the loop is closed): must not raise
    assert lease.lost_reason is None


# ---- several callers on one lease ---------------------------------------------------------


class SlowBackend(BoundedHangingBackend):
    """Requests of the operations in ``slow`` run on the server at once and answer
    ``delay_s`` later (threads: on the caller's thread where the driver lets it run
    them; asyncio: in the caller's coroutine or on a task)."""

    def __init__(self, slow: Set[str], delay_s: float = 0.3, limit_s: float | None = 0.0) -> None:
        super().__init__(set(), limit_s=limit_s)
        self.slow = slow
        self.delay_s = delay_s

    async def _execute_async(self, command: Command) -> object:
        reply = await super()._execute_async(command)
        if getattr(command, "operation", None) in self.slow:
            await asyncio.sleep(self.delay_s)
        return reply

    def _execute_sync(self, command: Command) -> object:
        reply = super()._execute_sync(command)
        if getattr(command, "operation", None) in self.slow:
            time.sleep(self.delay_s)
        return reply


def _in_threads(*calls: Any) -> List[Any]:
    """Runs each call on a thread of its own, at once; returns each one's result or
    exception, or "blocked" for a call still running after 3 s."""
    results: List[Any] = ["blocked"] * len(calls)

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(3.0)
    return results


@pytest.mark.parametrize("limit_s", [None, 0.0], ids=["on-the-pool", "on-the-callers"])
def test_two_threads_extending_one_lease_both_return(limit_s: float | None) -> None:
    backend = SlowBackend({"renew"}, limit_s=limit_s)
    lease = fencepost.Lock(backend, "shared", ttl=3.0).acquire_sync()
    started = time.monotonic()
    assert _in_threads(lease.extend, lease.extend) == [None, None]
    assert time.monotonic() - started < 1.0  # one renewal or two, not a wait on nothing
    lease.release()


@pytest.mark.parametrize("limit_s", [None, 0.0], ids=["on-the-pool", "on-the-callers"])
def test_a_release_racing_an_extend_on_another_thread_returns(limit_s: float | None) -> None:
    backend = SlowBackend({"renew"}, limit_s=limit_s)
    lease = fencepost.Lock(backend, "shared", ttl=3.0).acquire_sync()
    extended, released = _in_threads(lease.extend, lease.release)
    assert released is None
    assert extended is None or isinstance(extended, fencepost.ConfigError)  # released first
    assert backend.server.lock_owner("shared") is None


async def test_two_tasks_extending_during_a_renewal_in_flight_both_return() -> None:
    backend = SlowBackend({"renew"})
    lease = await fencepost.Lock(backend, "shared", ttl=3.0, renew_every=0.1).acquire()
    await asyncio.sleep(0.15)  # an automatic renewal is in flight on a task
    started = time.monotonic()
    await asyncio.wait_for(asyncio.gather(lease.extend(), lease.extend()), 3.0)
    assert time.monotonic() - started < 1.0
    await lease.release()


async def test_aclose_waits_for_a_caller_s_acquire_in_flight_and_releases_its_grant() -> None:
    backend = SlowBackend({"acquire"}, delay_s=0.5)  # granted on the server, answered late
    acquiring = asyncio.ensure_future(fencepost.Lock(backend, "job", ttl=30.0).acquire())
    await asyncio.sleep(0.1)
    assert backend.server.lock_owner("job") is not None
    await backend.aclose()
    # nothing of the backend left running: the grant it could not report is released
    assert backend.server.lock_owner("job") is None
    with pytest.raises(BackendError):
        await acquiring


async def test_an_acquire_cancelled_after_close_leaves_no_unretrieved_exception() -> None:
    backend = SlowBackend({"acquire"})
    reported: List[str] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, ctx: reported.append(ctx["message"]))
    acquiring = asyncio.ensure_future(fencepost.Lock(backend, "job", ttl=5.0).acquire())
    await asyncio.sleep(0.05)
    backend.close()  # decides the acquisition (BackendError) while its caller is mid-request
    acquiring.cancel()
    with pytest.raises(asyncio.CancelledError):
        await acquiring
    del acquiring
    await asyncio.sleep(0.4)
    gc.collect()
    await asyncio.sleep(0)
    assert reported == []


def test_two_threads_releasing_one_lease_at_once_both_return() -> None:
    backend = SlowBackend({"release"}, delay_s=0.01)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # both threads between the check and the mark, often
    try:
        for i in range(60):
            lease = fencepost.Lock(backend, f"twice-{i}", ttl=5.0).acquire_sync()
            go = threading.Barrier(2)

            def release() -> None:
                go.wait()
                lease.release()

            assert _in_threads(release, release) == [None, None], f"round {i}"
            assert backend.server.lock_owner(f"twice-{i}") is None
    finally:
        sys.setswitchinterval(switch)


def test_an_interrupted_extend_is_reported_before_another_thread_serves_the_lease() -> None:
    # Ctrl-C lands while the main thread runs a renewal itself; another thread calls
    # extend() right after. The interrupted renewal must reach the machine (a transport
    # error, retried) before that thread becomes the one running the lease's requests.
    backend = SlowBackend({"renew"}, delay_s=0.5)
    lease = fencepost.Lock(backend, "interrupted-extend", ttl=2.0, auto_renew=False).acquire_sync()
    other: List[Any] = []
    serve = _driver.ThreadDriver._serve

    def then_another_caller(driver: Any, *args: Any) -> None:
        try:
            serve(driver, *args)
        except KeyboardInterrupt:
            # the moment the interrupted caller has left: another one takes over
            thread = threading.Thread(target=lambda: other.extend(_in_threads(lease.extend)))
            thread.start()
            time.sleep(0.1)  # the other caller is serving by now
            thread.join(3.0)
            raise

    threading.Timer(0.2, _thread.interrupt_main).start()
    try:
        _driver.ThreadDriver._serve = then_another_caller  # type: ignore[method-assign]
        with pytest.raises(KeyboardInterrupt):
            lease.extend()
    finally:
        _driver.ThreadDriver._serve = serve  # type: ignore[method-assign]
    assert other == [None]
    assert lease.lost_reason is None
    lease.release()
