"""The lock API beside the peers' (redis-py Lock, python-redis-lock, node-redlock): manual
extend, the local "still mine?" view, try-once and per-call timeouts, a retry count, a
shared Lock object, dropped leases, and a release whose reply was lost. In-memory backend."""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any, List

import pytest

import fencepost
from fencepost import _core
from fencepost.errors import AcquireTimeout, ConfigError, LockLost



async def eventually(predicate: Any, timeout: float) -> None:
    """Awaits until ``predicate()`` holds (bounded), letting the loop run."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)


class LostReleaseReply(fencepost.MemoryBackend):
    """Runs every request, but the first release's reply is lost on the way back."""

    lost = 0

    async def _execute_async(self, command: Any) -> object:
        value = await super()._execute_async(command)
        if isinstance(command, _core.Request) and command.operation == "release" and self.lost == 0:
            self.lost += 1
            raise ConnectionError("connection reset after the release ran")
        return value

    def _execute_sync(self, command: Any) -> object:
        value = super()._execute_sync(command)
        if isinstance(command, _core.Request) and command.operation == "release" and self.lost == 0:
            self.lost += 1
            raise ConnectionError("connection reset after the release ran")
        return value


class SlowReleaseReply(fencepost.MemoryBackend):
    """Releases run on the server at once; their reply takes 50 ms."""

    async def _execute_async(self, command: Any) -> object:
        value = await super()._execute_async(command)
        if isinstance(command, _core.Request) and command.operation == "release":
            await asyncio.sleep(0.05)
        return value


async def test_a_release_whose_reply_was_lost_is_a_release_not_a_loss() -> None:
    backend = LostReleaseReply()
    async with fencepost.Lock(backend, "job", ttl=5.0) as lease:
        pass  # the exit's release runs, its reply is lost, the retry finds the key gone
    assert backend.lost == 1 and lease.lost_reason is None
    assert backend.server.lock_owner("job") is None


def test_a_sync_release_whose_reply_was_lost_is_a_release_not_a_loss() -> None:
    backend = LostReleaseReply()
    with fencepost.Lock(backend, "job", ttl=5.0) as lease:
        pass
    assert backend.lost == 1 and lease.lost_reason is None
    backend.close()


async def test_a_release_cancelled_in_flight_completes_without_a_loss_or_a_log() -> None:
    backend = SlowReleaseReply()
    lease = await fencepost.Lock(backend, "job", ttl=5.0).acquire()
    loop = asyncio.get_running_loop()
    reported: List[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    task = asyncio.ensure_future(lease.release())
    await asyncio.sleep(0.01)  # the release ran on the server; its reply is on the way
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await eventually(lambda: not backend._async_driver().tracks(lease._acquisition), 2.0)
    del task
    gc.collect()
    assert lease.lost_reason is None
    assert backend.server.lock_owner("job") is None
    assert reported == []
    backend.close()


async def test_extend_renews_now_and_moves_the_validity() -> None:
    backend = fencepost.MemoryBackend()
    lock = fencepost.Lock(backend, "job", ttl=1.0, auto_renew=False)
    lease = await lock.acquire()
    first = lease.valid_until_ns
    await asyncio.sleep(0.2)
    await lease.extend()
    # sent about 200 ms later: the validity moved by about that much
    assert lease.valid_until_ns - first > 150_000_000
    assert lease.held
    backend.server.delete_lock("job")  # an operator deletes the key
    with pytest.raises(LockLost) as info:
        await lease.extend()
    assert info.value.reason == "renew_rejected"
    assert not lease.held
    with pytest.raises(LockLost):
        await lease.extend()  # lost stays lost


async def test_extend_of_a_released_lease_is_a_config_error() -> None:
    backend = fencepost.MemoryBackend()
    lease = await fencepost.Lock(backend, "job", ttl=5.0).acquire()
    await lease.release()
    await lease.release()  # a second release does nothing
    assert not lease.held
    with pytest.raises(ConfigError, match="released"):
        await lease.extend()


async def test_a_released_lease_fails_its_check_and_says_it_was_released() -> None:
    # work that goes on after the release must not take check() for a yes
    backend = fencepost.MemoryBackend()
    lock = fencepost.Lock(backend, "job", ttl=5.0)
    async with lock as lease:
        lease.check()
        assert not lease.released and repr(lease) == "<Lease 'job' token=1 held>"
    assert lease.released and repr(lease) == "<Lease 'job' token=1 released>"
    with pytest.raises(ConfigError, match=r"^check\(\): the lease of 'job' \(token 1\) was released"):
        lease.check()
    sync = lock.acquire_sync()
    sync.release()
    assert sync.released and repr(sync) == "<SyncLease 'job' token=2 released>"
    with pytest.raises(ConfigError, match="was released"):
        sync.check()
    # lost first, released after: the loss is what check() reports
    lost = lock.acquire_sync()
    backend.close()
    with pytest.raises(LockLost):
        lost.release()
    with pytest.raises(LockLost):
        lost.check()
    assert repr(lost) == "<SyncLease 'job' token=3 lost='closed'>"


def test_sync_extend_and_held() -> None:
    backend = fencepost.MemoryBackend()
    with fencepost.Lock(backend, "job", ttl=1.0, auto_renew=False) as lease:
        first = lease.valid_until_ns
        time.sleep(0.1)
        lease.extend()
        assert lease.valid_until_ns - first > 50_000_000
        assert lease.held
    assert not lease.held
    backend.close()


async def test_try_acquire_returns_none_while_held_and_a_per_call_timeout_applies() -> None:
    backend = fencepost.MemoryBackend()
    lock = fencepost.Lock(backend, "job", ttl=5.0)  # waits forever by default
    held = await lock.acquire()
    started = time.monotonic()
    assert await lock.try_acquire() is None
    with pytest.raises(AcquireTimeout):
        await lock.acquire(timeout=0.05)
    assert time.monotonic() - started < 1.0
    with pytest.raises(ConfigError, match="timeout"):
        await lock.acquire(timeout=-1)
    await held.release()
    again = await lock.try_acquire()
    assert again is not None and again.token == held.token + 1
    await again.release()


def test_sync_try_acquire_and_timeout() -> None:
    backend = fencepost.MemoryBackend()
    lock = fencepost.Lock(backend, "job", ttl=5.0)
    with lock:
        assert lock.try_acquire_sync() is None
        with pytest.raises(AcquireTimeout):
            lock.acquire_sync(timeout=0.02)
    lease = lock.try_acquire_sync()
    assert lease is not None
    lease.release()
    backend.close()


async def test_retry_count_bounds_the_attempts() -> None:
    backend = fencepost.MemoryBackend()
    held = await fencepost.Lock(backend, "job", ttl=5.0).acquire()
    calls = 0
    original = backend._execute_async

    async def counting(command: Any) -> object:
        nonlocal calls
        if isinstance(command, _core.Request) and command.operation == "acquire":
            calls += 1
        return await original(command)

    backend._execute_async = counting  # type: ignore[method-assign]
    lock = fencepost.Lock(backend, "job", ttl=5.0, retry_count=2, retry_base=0.001, retry_max=0.002)
    with pytest.raises(AcquireTimeout):
        await lock.acquire()
    assert calls == 3  # the first attempt and 2 retries
    with pytest.raises(ConfigError, match="retry_count"):
        fencepost.Lock(backend, "job", retry_count=-1)
    await held.release()


async def test_one_lock_object_serves_concurrent_async_with_blocks() -> None:
    backend = fencepost.MemoryBackend()
    lock = fencepost.Lock(backend, "job", ttl=5.0)
    tokens: List[int] = []
    inside = 0

    async def worker() -> None:
        nonlocal inside
        async with lock as lease:
            inside += 1
            assert inside == 1  # exclusive, whoever shares the object
            await asyncio.sleep(0.01)
            tokens.append(lease.token)
            assert lock.lease is lease  # this task's own
            inside -= 1

    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(3))), 5.0)
    assert sorted(tokens) == [1, 2, 3]
    assert lock.lease is None


async def test_a_dropped_lease_warns_and_is_released() -> None:
    backend = fencepost.MemoryBackend()
    with pytest.warns(ResourceWarning, match="garbage-collected while held"):
        await fencepost.Lock(backend, "job", ttl=5.0).acquire()  # neither kept nor released
        await asyncio.sleep(0)  # the acquire's own callbacks run
        gc.collect()
    await eventually(lambda: backend.server.lock_owner("job") is None, 2.0)
    lease = await fencepost.Lock(backend, "job", ttl=5.0, acquire_timeout=0).acquire()
    assert lease.token == 2
    await lease.release()
    # a released lease dropped says nothing
    with warnings_as_errors():
        del lease
        gc.collect()


def test_a_dropped_sync_lease_warns_and_is_released() -> None:
    backend = fencepost.MemoryBackend()
    with pytest.warns(ResourceWarning, match="garbage-collected while held"):
        fencepost.Lock(backend, "job", ttl=5.0).acquire_sync()
        gc.collect()
    deadline = time.monotonic() + 2.0
    while backend.server.lock_owner("job") is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert backend.server.lock_owner("job") is None
    backend.close()


async def test_leases_released_by_hand_are_not_kept_by_their_lock() -> None:
    backend = fencepost.MemoryBackend()
    lock = fencepost.Lock(backend, "job", ttl=5.0)
    first = await lock.acquire()
    await first.release()
    for _ in range(200):  # the README's "leases by hand" loop
        lease = await lock.acquire()
        await lease.release()
    assert len(lock._explicit) <= 1  # at most the newest, released, until the next call
    assert lock.lease is None  # a released lease is nobody's current one
    with pytest.raises(ConfigError, match="holds no async lease"):
        await lock.release()  # nothing left to release: said, not silently skipped
    assert lock._explicit == []
    # a lease released by hand is collectable: the lock object keeps no reference
    import weakref

    gone = weakref.ref(first)
    del first
    gc.collect()
    assert gone() is None
    # lock.release() still ends the newest lease nobody released
    older = await lock.acquire()
    await older.release()
    newest = await lock.acquire()
    await lock.release()
    assert newest.released and backend.server.lock_owner("job") is None


def test_sync_leases_released_by_hand_are_not_kept_by_their_lock() -> None:
    backend = fencepost.MemoryBackend()
    lock = fencepost.Lock(backend, "job", ttl=5.0)
    for _ in range(200):
        lease = lock.acquire_sync()
        lease.release()
    assert len(lock._explicit) <= 1
    assert lock.lease is None
    with pytest.raises(ConfigError, match="holds no blocking lease"):
        lock.release_sync()
    backend.close()


def test_a_lease_released_on_another_event_loop_is_refused_and_nothing_changes() -> None:
    backend = fencepost.MemoryBackend()
    lock = fencepost.Lock(backend, "across", ttl=5.0)

    async def hold() -> fencepost.Lease:
        return await lock.acquire()

    async def release_it(lease: fencepost.Lease) -> None:
        with pytest.raises(ConfigError, match="acquired on an event loop that has ended"):
            await lease.release()
        with pytest.raises(ConfigError, match="acquired on an event loop that has ended"):
            await lease.extend()
        with pytest.raises(ConfigError, match="acquired on an event loop that has ended"):
            await lock.release()

    lease = asyncio.run(hold())
    asyncio.run(release_it(lease))
    assert not lease.released  # refused before anything changed
    assert lock.lease is lease  # still this object's to release
    assert backend.server.lock_owner("across") is not None


class warnings_as_errors:
    def __enter__(self) -> None:
        import warnings

        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc: object) -> None:
        self._catch.__exit__(*exc)



def test_a_lock_is_not_reentrant_in_the_thread_holding_it_in_a_with_block() -> None:
    import threading

    backend = fencepost.MemoryBackend()
    lock = fencepost.Lock(backend, "job", ttl=5.0)
    try:
        with lock as outer:
            # the same object, another object of the name, explicit or `with`: each would
            # wait for the outer lease, which only this block releases
            with pytest.raises(ConfigError, match=r"already held by this thread.*not re-entrant"):
                with lock:
                    pass
            with pytest.raises(ConfigError, match="not re-entrant"):
                fencepost.Lock(backend, "job", ttl=5.0).acquire_sync()
            # a bounded attempt ends, held by another, as anywhere
            assert lock.try_acquire_sync() is None
            with pytest.raises(AcquireTimeout):
                fencepost.Lock(backend, "job", ttl=5.0, acquire_timeout=0.05).acquire_sync()
            # another thread waits for it, as it should
            waited: List[Any] = []
            other = threading.Thread(
                target=lambda: waited.append(fencepost.Lock(backend, "job", ttl=5.0).try_acquire_sync())
            )
            other.start()
            other.join(5.0)
            assert waited == [None]
            # another name is another lock
            with fencepost.Lock(backend, "other", ttl=5.0) as inner:
                assert inner.token >= 1
            assert outer.held
        # after the block the name is free again for this thread
        with lock as again:
            assert again.token > outer.token
        # a lease lost inside its block holds nothing: acquiring the name there is allowed
        with pytest.raises(LockLost):
            with fencepost.Lock(backend, "short", ttl=0.2, auto_renew=False) as short:
                assert short.lost.wait(2.0)
                fencepost.Lock(backend, "short", ttl=5.0, acquire_timeout=2.0).acquire_sync().release()
        assert backend._scoped_holds == {}
    finally:
        backend.close()


async def test_a_lock_is_not_reentrant_in_the_task_holding_it_but_another_task_waits() -> None:
    backend = fencepost.MemoryBackend()
    lock = fencepost.Lock(backend, "job", ttl=5.0)
    try:
        async with lock as outer:
            with pytest.raises(ConfigError, match=r"already held by this task, in an `async with` block"):
                await lock.acquire()
            other = asyncio.ensure_future(lock.acquire(timeout=5.0))
            await asyncio.sleep(0.05)
            assert not other.done()  # another task waits for the outer lease
        lease = await asyncio.wait_for(other, 5.0)
        assert lease.token > outer.token
        await lease.release()
        assert backend._scoped_holds == {}
    finally:
        backend.close()
