"""Operator calls beside the lock machine: ``backend.is_locked(name)`` asks the server
whether any holder's lease lives; ``backend.force_release(name)`` frees the lock whoever
holds it, keeps the token counter (the next grant's token is higher) and, on fair Redis,
grants it to the first live waiter as a release does. The freed holder finds out at its
next renewal (``LockLost``, ``renew_rejected``). On the in-memory backend (always), real
Redis ($FENCEPOST_REDIS_URL), PostgreSQL ($FENCEPOST_PG_URL) and etcd
($FENCEPOST_ETCD_URL), which ``scripts/test`` starts."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import Any, List

import pytest

import fencepost
from fencepost import Backend, MemoryBackend, MemoryServer
from fencepost.errors import ConfigError, LockLost

REDIS_URL = os.environ.get("FENCEPOST_REDIS_URL")
PG_URL = os.environ.get("FENCEPOST_PG_URL")
ETCD_URL = os.environ.get("FENCEPOST_ETCD_URL")

# A slow backoff: a waiter that acquires within it was woken, not polling.
SLOW = dict(ttl=5.0, retry_base=1.5, retry_max=3.0)


@pytest.fixture
def name() -> str:
    return f"op-{uuid.uuid4().hex[:12]}"


def all_kinds() -> List[Any]:
    params = [pytest.param((False, "memory"), id="memory"), pytest.param((True, "memory"), id="memory-fair")]
    if REDIS_URL:
        params += [pytest.param((False, "redis"), id="redis"), pytest.param((True, "redis"), id="redis-fair")]
    return params


def make(kind: str, fair: bool, server: MemoryServer) -> Backend:
    if kind == "memory":
        return MemoryBackend(server=server, fair=fair)
    import redis.asyncio

    from fencepost.redis import RedisBackend

    return RedisBackend(redis.asyncio.Redis.from_url(REDIS_URL or ""), fair=fair)


@pytest.mark.parametrize("spec", all_kinds())
async def test_is_locked_and_force_release_on_redis(spec: Any, name: str) -> None:
    fair, kind = spec
    server = MemoryServer()
    holder_backend, operator = make(kind, fair, server), make(kind, fair, server)
    try:
        assert await operator.is_locked(name) is False
        assert await operator.force_release(name) is False  # nobody to free
        lease = await fencepost.Lock(holder_backend, name, ttl=3.0).acquire()
        assert await operator.is_locked(name) is True
        assert await operator.force_release(name) is True
        assert await operator.is_locked(name) is False
        # the counter was kept: the next grant is above the freed one
        second = await fencepost.Lock(operator, name, ttl=3.0).acquire()
        assert second.token > lease.token
        # the freed holder learns it at its next renewal, as a missing key
        with pytest.raises(LockLost) as info:
            await lease.extend()
        assert info.value.reason == "renew_rejected"
        await second.release()
        assert await operator.is_locked(name) is False
    finally:
        await holder_backend.aclose()
        await operator.aclose()


@pytest.mark.parametrize("spec", [p for p in all_kinds() if p.values[0][0]])
async def test_force_release_wakes_a_parked_fair_waiter_with_a_higher_token(spec: Any, name: str) -> None:
    _, kind = spec
    server = MemoryServer()
    holder_backend, waiter_backend, operator = (make(kind, True, server) for _ in range(3))
    try:
        held = await fencepost.Lock(holder_backend, name, **SLOW).acquire()
        waiter = asyncio.ensure_future(fencepost.Lock(waiter_backend, name, **SLOW).acquire())
        await asyncio.sleep(0.2)  # queued and parked on its wake-up list
        assert not waiter.done()
        freed_at = time.monotonic()
        assert await operator.force_release(name) is True
        granted = await asyncio.wait_for(waiter, 5)
        woken_in = time.monotonic() - freed_at
        assert woken_in < 1.0, f"the waiter took {woken_in:.2f} s: it polled (backoff 1.5 s) instead of being woken"
        assert granted.token > held.token
        assert await operator.is_locked(name) is True  # the waiter holds it now
        with pytest.raises(LockLost):
            await held.extend()
        await granted.release()
    finally:
        for b in (holder_backend, waiter_backend, operator):
            await b.aclose()


def test_blocking_forms_on_the_in_memory_backend(name: str) -> None:
    backend = MemoryBackend()
    lease = fencepost.Lock(backend, name, ttl=3.0).acquire_sync()
    assert backend.is_locked_sync(name) is True
    assert backend.force_release_sync(name) is True
    assert backend.is_locked_sync(name) is False
    with pytest.raises(LockLost):
        lease.extend()
    with pytest.raises(ConfigError):
        backend.is_locked_sync(42)  # type: ignore[arg-type]
    backend.close()


# ---- PostgreSQL ---------------------------------------------------------------------------


@pytest.mark.skipif(not PG_URL, reason="FENCEPOST_PG_URL is not set (scripts/test sets it)")
def test_postgres_lease_rows_and_advisory_locks(name: str) -> None:
    psycopg = pytest.importorskip("psycopg")
    from fencepost.postgres import PostgresBackend, xact_lock

    with psycopg.connect(PG_URL or "", autocommit=True) as conn:
        backend = PostgresBackend(conn)
        backend.migrate_sync()
        assert backend.is_locked_sync(name) is False
        assert backend.force_release_sync(name) is False
        lease = fencepost.Lock(backend, name, ttl=3.0).acquire_sync()
        assert backend.is_locked_sync(name) is True
        assert backend.force_release_sync(name) is True
        assert backend.is_locked_sync(name) is False
        second = fencepost.Lock(backend, name, ttl=3.0).acquire_sync()
        assert second.token > lease.token
        with pytest.raises(LockLost) as info:
            lease.extend()
        assert info.value.reason == "renew_rejected"
        second.release()

        # an advisory lock (here a transaction lock) is seen in pg_locks, and only its
        # session can free it
        session = PostgresBackend(mode="session", conninfo=PG_URL)
        with psycopg.connect(PG_URL or "", autocommit=True) as other:
            with other.transaction(), xact_lock(other, name):
                pid = other.info.backend_pid
                assert backend.is_locked_sync(name) is True
                assert session.is_locked_sync(name) is True  # opens a connection of its own
                with pytest.raises(ConfigError, match=rf"pg_terminate_backend\({pid}\)") as err:
                    session.force_release_sync(name)
                assert err.value.kind == "unsupported"
            assert backend.is_locked_sync(name) is False
        session.close()
        backend.close()


@pytest.mark.skipif(not PG_URL, reason="FENCEPOST_PG_URL is not set (scripts/test sets it)")
async def test_postgres_async_forms(name: str) -> None:
    psycopg = pytest.importorskip("psycopg")
    from fencepost.postgres import PostgresBackend

    conn = await psycopg.AsyncConnection.connect(PG_URL or "", autocommit=True)
    backend = PostgresBackend(conn)
    await backend.migrate()
    lease = await fencepost.Lock(backend, name, ttl=3.0).acquire()
    assert await backend.is_locked(name) is True
    assert await backend.force_release(name) is True
    assert await backend.is_locked(name) is False
    with pytest.raises(LockLost):
        await lease.extend()
    await backend.aclose()
    await conn.close()


# ---- etcd ---------------------------------------------------------------------------------


@pytest.mark.skipif(not ETCD_URL, reason="FENCEPOST_ETCD_URL is not set (scripts/test sets it)")
async def test_etcd_revokes_the_holders_lease_and_the_watcher_acquires(name: str) -> None:
    httpx = pytest.importorskip("httpx")
    from fencepost.etcd import EtcdBackend

    backends = [EtcdBackend(httpx.AsyncClient(), endpoints=[ETCD_URL or ""]) for _ in range(3)]
    holder_backend, waiter_backend, operator = backends
    try:
        assert await operator.is_locked(name) is False
        assert await operator.force_release(name) is False
        held = await fencepost.Lock(holder_backend, name, ttl=6.0).acquire()
        assert await operator.is_locked(name) is True
        waiter = asyncio.ensure_future(fencepost.Lock(waiter_backend, name, ttl=6.0).acquire())
        await asyncio.sleep(0.3)  # its key is queued behind the holder's, watching it
        assert not waiter.done()
        assert await operator.force_release(name) is True
        granted = await asyncio.wait_for(waiter, 5)
        assert granted.token > held.token
        with pytest.raises(LockLost) as info:
            await held.extend()
        assert info.value.reason == "renew_rejected"
        await granted.release()
        assert await operator.is_locked(name) is False
    finally:
        for b in backends:
            await b.aclose()


@pytest.mark.skipif(not ETCD_URL, reason="FENCEPOST_ETCD_URL is not set (scripts/test sets it)")
def test_etcd_blocking_forms(name: str) -> None:
    httpx = pytest.importorskip("httpx")
    from fencepost.etcd import EtcdBackend

    backend = EtcdBackend(httpx.Client(), endpoints=[ETCD_URL or ""])
    lease = fencepost.Lock(backend, name, ttl=6.0).acquire_sync()
    assert backend.is_locked_sync(name) is True
    assert backend.force_release_sync(name) is True
    assert backend.is_locked_sync(name) is False
    with pytest.raises(LockLost):
        lease.extend()
    backend.close()
