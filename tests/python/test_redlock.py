"""Redlock against five real Redis masters on 127.0.0.1, which this module starts
itself with scripts/services/redis-masters.sh (and stops; scripts/test's trap stops
them too). Masters are stopped with SIGSTOP and always resumed with SIGCONT in a
``finally``. Each test uses its own key prefix."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, List, Sequence, Tuple

import pytest

import fencepost
from fencepost.errors import AcquireTimeout, ConfigError, LockLost
from fencepost.redlock import RedlockBackend

import redlock_contender

redis = pytest.importorskip("redis")
import redis.asyncio  # noqa: E402

SERVICES = Path(__file__).resolve().parents[2] / "scripts" / "services"
pytestmark = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="redis-server is not installed (scripts/services/redis.sh install)"
)


@pytest.fixture(scope="module")
def masters() -> Iterator[Tuple[List[str], List[int]]]:
    """Five masters: their URLs and PIDs, in the same order."""
    script = str(SERVICES / "redis-masters.sh")
    urls = subprocess.run([script, "start", "5"], check=True, capture_output=True, text=True).stdout
    try:
        pids = subprocess.run([script, "pids"], check=True, capture_output=True, text=True).stdout
        yield urls.strip().split(","), [int(p) for p in pids.split()]
    finally:
        subprocess.run([script, "stop"], check=False)


@pytest.fixture
def prefix() -> str:
    return f"fptest:{uuid.uuid4().hex[:12]}:"


@contextmanager
def stopped(pids: Sequence[int]) -> Iterator[None]:
    """The masters with these PIDs are stopped (SIGSTOP) inside the block, and always
    resumed (SIGCONT) after it."""
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def probes(urls: Sequence[str]) -> List[Any]:
    return [redis.Redis.from_url(u, socket_timeout=5) for u in urls]


def holders(clients: Sequence[Any], key: str) -> List[Any]:
    return [c.get(key) for c in clients]


async def eventually(predicate: Callable[[], bool], timeout: float = 2.0) -> bool:
    """Polls ``predicate`` without blocking the loop (the releases run on it) until it
    holds or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.01)
    return predicate()


def aclients(urls: Sequence[str]) -> List[Any]:
    return [redis.asyncio.Redis.from_url(u, socket_timeout=5) for u in urls]


# ---- bad input ---------------------------------------------------------------------------


def test_bad_master_lists_and_correctness_are_config_errors(masters: Tuple[List[str], List[int]]) -> None:
    urls, _ = masters
    sync = [redis.Redis.from_url(u) for u in urls]
    with pytest.raises(ConfigError, match="got none"):
        RedlockBackend([])
    with pytest.raises(ConfigError, match="at least 3; got 1"):
        RedlockBackend(sync[:1])
    with pytest.raises(ConfigError, match="odd number of masters, got 4"):
        RedlockBackend(sync[:4])
    with pytest.raises(ConfigError, match="are the same server"):
        RedlockBackend([sync[0], sync[1], redis.Redis.from_url(urls[0])])
    with pytest.raises(ConfigError, match="are the same server"):
        RedlockBackend([sync[0], sync[1], sync[0]])
    with pytest.raises(ConfigError, match="mix blocking"):
        RedlockBackend([sync[0], sync[1], redis.asyncio.Redis.from_url(urls[2])])
    with pytest.raises(ConfigError, match="redis-py client"):
        RedlockBackend([sync[0], sync[1], object()])
    backend = RedlockBackend(sync[:3])
    for risk in (False, True):
        with pytest.raises(ConfigError) as info:
            fencepost.Lock(backend, "x", purpose="correctness", accept_failover_risk=risk)
        assert info.value.option == "purpose"
        for name in ("etcd", "ZooKeeper", "PostgreSQL lease rows"):
            assert name in str(info.value)
    assert backend.masters[0].startswith("127.0.0.1:")
    with pytest.raises(ConfigError, match="use `with lock`"):
        asyncio.run(fencepost.Lock(backend, "x").acquire())
    with pytest.raises(ConfigError, match="runs lock requests only"):
        backend.is_locked_sync("x")


# ---- a majority, and none --------------------------------------------------------------


async def test_two_of_five_stopped_acquire_renew_and_release(
    masters: Tuple[List[str], List[int]], prefix: str
) -> None:
    urls, pids = masters
    clients = aclients(urls)
    probe = probes(urls)
    backend = RedlockBackend(clients, key_prefix=prefix)
    lock = fencepost.Lock(backend, "job", ttl=1.0, acquire_timeout=2.0)
    key = backend.lock_key("job")
    try:
        with stopped(pids[3:]):
            started = time.monotonic()
            async with lock as lease:
                assert time.monotonic() - started < 0.5
                assert lease.token >= 1
                owner = lease.owner_id.encode()
                assert holders(probe[:3], key) == [owner] * 3
                await asyncio.sleep(0.8)  # two renewals on the three running masters
                lease.check()
                assert all(probe[m].pttl(key) > 500 for m in range(3))
            assert holders(probe[:3], key) == [None] * 3
        # resumed: the releases of the two stopped masters are still in flight, and
        # aclose() waits for them, so the loop can close with nothing of ours left
        await backend.aclose()
        assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []
        assert holders(probe, key) == [None] * 5
    finally:
        await backend.aclose()
        for c in clients:
            await c.aclose()


class _InFlight:
    """Counts the script calls in flight across the masters' clients and the most at once."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self.guard = threading.Lock()

    def enter(self) -> None:
        with self.guard:
            self.now += 1
            self.most = max(self.most, self.now)

    def leave(self) -> None:
        with self.guard:
            self.now -= 1


def _slow_clients(urls: Sequence[str], flight: _InFlight, blocking: bool) -> List[Any]:
    """Clients whose script calls take at least 20 ms each and are counted in ``flight``."""
    if blocking:

        class Slow(redis.Redis):  # type: ignore[misc]
            def evalsha(self, *args: Any) -> Any:
                flight.enter()
                try:
                    time.sleep(0.02)
                    return super().evalsha(*args)
                finally:
                    flight.leave()

        return [Slow.from_url(u, socket_timeout=5) for u in urls]

    class ASlow(redis.asyncio.Redis):  # type: ignore[misc]
        async def evalsha(self, *args: Any) -> Any:
            flight.enter()
            try:
                await asyncio.sleep(0.02)
                return await super().evalsha(*args)
            finally:
                flight.leave()

    return [ASlow.from_url(u, socket_timeout=5) for u in urls]


@pytest.mark.parametrize("blocking", [False, True], ids=["asyncio", "threads"])
def test_a_steps_parts_go_to_every_master_at_once(
    masters: Tuple[List[str], List[int]], prefix: str, blocking: bool
) -> None:
    # the caller waiting for an acquire or a release runs one request itself; the
    # other masters' parts must not queue behind it, one round trip after another
    urls, _ = masters
    flight = _InFlight()
    clients = _slow_clients(urls, flight, blocking)
    backend = RedlockBackend(clients, key_prefix=prefix)
    lock = fencepost.Lock(backend, "job", ttl=5.0, acquire_timeout=5.0, auto_renew=False)
    try:
        if blocking:
            with lock:
                acquired = flight.most
                flight.most = 0
        else:

            async def cycle() -> int:
                async with lock:
                    most = flight.most
                    flight.most = 0
                await backend.aclose()
                return most

            acquired = asyncio.run(cycle())
        # (more than five: a late acquire part or a cleanup of one still on its way)
        assert acquired >= 5, f"the acquire reached at most {acquired} masters at once"
        assert flight.most >= 5, f"the release reached at most {flight.most} masters at once"
        # the release returned on a majority: the other parts may still be on their way
        probe, key = probes(urls), backend.lock_key("job")
        deadline = time.monotonic() + 2.0
        while holders(probe, key) != [None] * 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert holders(probe, key) == [None] * 5
    finally:
        backend.close()


def test_two_of_five_stopped_blocking_clients(masters: Tuple[List[str], List[int]], prefix: str) -> None:
    urls, pids = masters
    clients = [redis.Redis.from_url(u, socket_timeout=2) for u in urls]
    backend = RedlockBackend(clients, key_prefix=prefix)
    lock = fencepost.Lock(backend, "job", ttl=1.0, acquire_timeout=2.0)
    try:
        with stopped(pids[:2]):
            with lock as lease:
                assert holders(probes(urls)[2:], backend.lock_key("job")) == [lease.owner_id.encode()] * 3
                lease.check()
    finally:
        backend.close()


async def test_three_of_five_stopped_fail_within_the_timeout_and_leave_no_key(
    masters: Tuple[List[str], List[int]], prefix: str
) -> None:
    urls, pids = masters
    clients = aclients(urls)
    probe = probes(urls)
    backend = RedlockBackend(clients, key_prefix=prefix)
    # a TTL far beyond the test: a key gone afterwards was released, not expired
    lock = fencepost.Lock(backend, "job", ttl=30.0, acquire_timeout=0.5)
    key = backend.lock_key("job")
    try:
        with stopped(pids[2:]):
            started = time.monotonic()
            with pytest.raises(AcquireTimeout):
                await lock.acquire()
            assert time.monotonic() - started < 0.5 + 0.3
            # the release of every master went out with the failure; the two running
            # masters answer it at once
            for _ in range(40):
                if holders(probe[:2], key) == [None, None]:
                    break
                await asyncio.sleep(0.025)
            assert holders(probe[:2], key) == [None, None], "the two running masters were released"
        # resumed: the hung acquires run on the three masters, then the releases sent
        # to every master after them
        for _ in range(100):
            if holders(probe, key) == [None] * 5:
                break
            await asyncio.sleep(0.05)
        assert holders(probe, key) == [None] * 5
    finally:
        await backend.aclose()
        for c in clients:
            await c.aclose()


async def test_a_majority_answering_after_the_validity_is_not_acquired(
    masters: Tuple[List[str], List[int]], prefix: str
) -> None:
    urls, pids = masters
    clients = aclients(urls)
    probe = probes(urls)
    backend = RedlockBackend(clients, key_prefix=prefix)
    # one try (acquire_timeout=0) with all its validity: 0.3 × 0.99 − 0.002 s
    lock = fencepost.Lock(backend, "job", ttl=0.3, acquire_timeout=0, auto_renew=False)
    key = backend.lock_key("job")
    try:
        with stopped(pids[2:]):
            task = asyncio.ensure_future(lock.acquire())
            await asyncio.sleep(0.5)  # past the validity: the majority answers too late
        with pytest.raises(AcquireTimeout):
            await task
        assert await eventually(lambda: holders(probe, key) == [None] * 5)
    finally:
        await backend.aclose()
        for c in clients:
            await c.aclose()


# ---- renewal -------------------------------------------------------------------------------


async def test_a_renewal_losing_its_majority_is_lost_at_once_and_the_work_cancelled(
    masters: Tuple[List[str], List[int]], prefix: str
) -> None:
    urls, _ = masters
    clients = aclients(urls)
    probe = probes(urls)
    backend = RedlockBackend(clients, key_prefix=prefix)
    lock = fencepost.Lock(backend, "job", ttl=3.0, renew_every=0.2)
    key = backend.lock_key("job")
    cancelled = False
    deleted_at = 0.0
    try:
        with pytest.raises(LockLost) as info:
            async with lock as lease:
                # granted by the first three to answer: wait for all five
                for _ in range(40):
                    if holders(probe, key) == [lease.owner_id.encode()] * 5:
                        break
                    await asyncio.sleep(0.01)
                # three masters restart without persistence
                for c in probe[2:]:
                    assert c.delete(key) == 1
                deleted_at = time.monotonic()
                try:
                    await asyncio.sleep(5)
                except asyncio.CancelledError:
                    cancelled = True
                    raise
        assert cancelled, "the body was cancelled"
        assert info.value.reason == "renew_rejected"
        # at the next renewal (0.2 s), long before the validity deadline (~2.97 s)
        assert time.monotonic() - deleted_at < 0.2 + 0.3
        # the two masters that renewed are released
        assert await eventually(lambda: holders(probe, key) == [None] * 5)
    finally:
        await backend.aclose()
        for c in clients:
            await c.aclose()


# ---- eight processes ---------------------------------------------------------------------


def test_eight_processes_never_overlap(masters: Tuple[List[str], List[int]], prefix: str) -> None:
    """8 spawned processes × 8 critical sections on one Redlock over five masters: no two
    sections overlap on CLOCK_MONOTONIC. Half the processes use the blocking API, half
    asyncio. The log lives on a Redis of its own (a sixth server)."""
    urls, _ = masters
    log_url = os.environ.get("FENCEPOST_REDIS_URL")
    if not log_url:
        pytest.skip("FENCEPOST_REDIS_URL is not set (the log server)")
    processes, rounds = 8, 8
    ctx = multiprocessing.get_context("spawn")
    go = ctx.Event()
    workers = [
        ctx.Process(
            target=redlock_contender.run,
            args=(urls, log_url, prefix, "contended", rounds, go, i % 2 == 1),
            name=f"redlock-contender-{i}",
        )
        for i in range(processes)
    ]
    started = time.monotonic()
    for w in workers:
        w.start()
    go.set()
    for w in workers:
        w.join(timeout=max(1.0, 60 - (time.monotonic() - started)))
    stuck = [w.name for w in workers if w.is_alive()]
    for w in workers:
        if w.is_alive():
            w.kill()
            w.join(5)
    assert not stuck, f"contenders still running after 60 s: {stuck}"
    assert [w.exitcode for w in workers] == [0] * processes
    log = redis.Redis.from_url(log_url, socket_timeout=5)
    records = [json.loads(r) for r in log.lrange(prefix + "log", 0, -1)]
    log.delete(prefix + "log")
    assert len(records) == processes * rounds
    records.sort(key=lambda r: r[0])
    assert {r[4] for r in records} == {"sync", "async"}
    for before, after in zip(records, records[1:]):
        assert before[1] < after[0], f"critical sections overlap: {before} and {after}"
