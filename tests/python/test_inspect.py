"""Holder inspection: ``backend.inspect(name)`` and ``backend.list(prefix, limit=)``
read the holder's owner id, token, time left, waiters and the ``metadata`` it acquired
with (``Lock(metadata=...)``, stored in the ``…:meta`` key beside the lease); and
``force_release`` evicts a holder whose later fenced write is refused. On the in-memory
backend (always) and real Redis ($FENCEPOST_REDIS_URL, which ``scripts/test`` starts)."""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any, List

import pytest

import fencepost
from fencepost import Backend, MemoryBackend, MemoryServer, standard_metadata
from fencepost.errors import ConfigError, StaleToken

REDIS_URL = os.environ.get("FENCEPOST_REDIS_URL")
PG_URL = os.environ.get("FENCEPOST_PG_URL")


@pytest.fixture
def name() -> str:
    return f"insp-{uuid.uuid4().hex[:12]}"


def kinds(fair: bool = False) -> List[Any]:
    params = [pytest.param("memory", id="memory")]
    if REDIS_URL:
        params.append(pytest.param("redis", id="redis"))
    return params


def make(kind: str, server: MemoryServer, fair: bool = False) -> Backend:
    if kind == "memory":
        return MemoryBackend(server=server, fair=fair)
    import redis.asyncio

    from fencepost.redis import RedisBackend

    return RedisBackend(redis.asyncio.Redis.from_url(REDIS_URL or ""), fair=fair)


@pytest.mark.parametrize("kind", kinds())
async def test_metadata_round_trips_through_inspect(kind: str, name: str) -> None:
    server = MemoryServer()
    holder_backend, operator = make(kind, server), make(kind, server)
    meta = standard_metadata("nightly report")
    assert set(meta) == {"host", "pid", "process", "acquired_at", "label"}
    try:
        assert await operator.inspect(name) is None
        lease = await fencepost.Lock(holder_backend, name, ttl=3.0, metadata=meta).acquire()
        found = await operator.inspect(name)
        assert found is not None
        assert (found.name, found.owner, found.token) == (name, lease.owner_id, lease.token)
        assert found.metadata == meta
        assert found.ttl_left is not None and 2.0 < found.ttl_left <= 3.0
        assert found.waiters is None  # plain Redis keeps no queue
        await asyncio.sleep(0.3)
        await lease.extend()  # the renewal extends the metadata key with the lease
        again = await operator.inspect(name)
        assert again is not None and again.metadata == meta
        assert again.ttl_left is not None and again.ttl_left > 2.5
        await lease.release()
        assert await operator.inspect(name) is None
        # the release deleted the metadata: a holder without metadata shows none
        plain = await fencepost.Lock(holder_backend, name, ttl=3.0).acquire()
        bare = await operator.inspect(name)
        assert bare is not None and bare.metadata is None and bare.token == plain.token
        await plain.release()
    finally:
        await holder_backend.aclose()
        await operator.aclose()


@pytest.mark.parametrize("kind", kinds())
async def test_list_is_prefix_filtered_and_bounded(kind: str, name: str) -> None:
    server = MemoryServer()
    backend = make(kind, server)
    try:
        names = [f"{name}:job-{i}" for i in range(3)]
        leases = [
            await fencepost.Lock(backend, n, ttl=3.0, metadata={"i": str(i)}).acquire() for i, n in enumerate(names)
        ]
        other = await fencepost.Lock(backend, f"x{name}", ttl=3.0).acquire()
        listed = await backend.list(f"{name}:")
        assert [h.name for h in listed] == names
        assert [h.metadata for h in listed] == [{"i": "0"}, {"i": "1"}, {"i": "2"}]
        assert [h.token for h in listed] == [lease.token for lease in leases]
        assert len(await backend.list(f"{name}:", limit=2)) == 2
        assert await backend.list(f"{name}:none") == []
        # glob characters in a prefix are literal
        assert await backend.list(f"{name}*") == []
        await leases[0].release()
        assert [h.name for h in await backend.list(f"{name}:")] == names[1:]
        for lease in [*leases[1:], other]:
            await lease.release()
        with pytest.raises(ConfigError):
            await backend.list(name, limit=0)
    finally:
        await backend.aclose()


@pytest.mark.parametrize("kind", kinds())
async def test_force_release_fences_the_evicted_holder(kind: str, name: str) -> None:
    server = MemoryServer()
    holder_backend, operator = make(kind, server), make(kind, server)
    data, fence = f"{name}:data", f"{name}:fence"
    try:
        evicted = await fencepost.Lock(holder_backend, name, ttl=3.0, metadata={"who": "a"}).acquire()
        await holder_backend.fenced_set(data, fence, evicted.token, "from a")
        assert await operator.force_release(name) is True
        assert await operator.inspect(name) is None  # metadata went with the lease
        successor = await fencepost.Lock(operator, name, ttl=3.0, metadata={"who": "b"}).acquire()
        assert successor.token > evicted.token
        found = await operator.inspect(name)
        assert found is not None and found.metadata == {"who": "b"}
        await operator.fenced_set(data, fence, successor.token, "from b")
        with pytest.raises(StaleToken) as info:
            await holder_backend.fenced_set(data, fence, evicted.token, "late write from a")
        assert info.value.highest == successor.token
        await successor.release()
    finally:
        await holder_backend.aclose()
        await operator.aclose()


@pytest.mark.parametrize("kind", kinds())
async def test_fair_inspect_counts_waiters_and_refuses_metadata(kind: str, name: str) -> None:
    server = MemoryServer()
    holder_backend, waiter_backend = make(kind, server, True), make(kind, server, True)
    try:
        with pytest.raises(ConfigError) as info:
            fencepost.Lock(holder_backend, name, ttl=3.0, metadata={"a": "b"})
        assert info.value.option == "metadata"
        held = await fencepost.Lock(holder_backend, name, ttl=3.0).acquire()
        waiter = asyncio.ensure_future(fencepost.Lock(waiter_backend, name, ttl=3.0).acquire())
        await asyncio.sleep(0.2)
        found = await holder_backend.inspect(name)
        assert found is not None and found.owner == held.owner_id and found.waiters == 1
        await held.release()
        granted = await asyncio.wait_for(waiter, 5)
        found = await holder_backend.inspect(name)
        assert found is not None and found.owner == granted.owner_id and found.waiters == 0
        await granted.release()
    finally:
        await holder_backend.aclose()
        await waiter_backend.aclose()


def test_bad_metadata_is_refused_before_anything_is_sent(name: str) -> None:
    backend = MemoryBackend()
    for bad in ({"pid": 7}, {1: "x"}, ["a"], {"big": "x" * 4096}):
        with pytest.raises(ConfigError) as info:
            fencepost.Lock(backend, name, metadata=bad)  # type: ignore[arg-type]
        assert info.value.option == "metadata", bad
    assert backend.inspect_sync(name) is None
    with pytest.raises(ConfigError):
        standard_metadata(label=3)  # type: ignore[arg-type]
    backend.close()


def test_blocking_forms_on_the_in_memory_backend(name: str) -> None:
    backend = MemoryBackend()
    lease = fencepost.Lock(backend, name, ttl=3.0, metadata={"k": "v"}).acquire_sync()
    found = backend.inspect_sync(name)
    assert found is not None and found.metadata == {"k": "v"} and found.token == lease.token
    assert [h.name for h in backend.list_sync(name)] == [name]
    lease.release()
    assert backend.inspect_sync(name) is None
    with pytest.raises(ConfigError):
        backend.inspect_sync(42)  # type: ignore[arg-type]
    backend.close()


@pytest.mark.skipif(not PG_URL, reason="FENCEPOST_PG_URL is not set (scripts/test sets it)")
def test_other_backends_refuse_inspection_by_name() -> None:
    from fencepost.postgres import PostgresBackend

    # lease rows keep metadata and can be inspected (test_pg_inspect.py); advisory
    # locks keep no row
    backend = PostgresBackend(mode="session", conninfo=PG_URL or "")
    try:
        with pytest.raises(ConfigError) as info:
            backend.inspect_sync("x")
        assert info.value.kind == "unsupported" and "lease" in str(info.value)
        with pytest.raises(ConfigError):
            fencepost.Lock(backend, "x", metadata={"a": "b"})
    finally:
        backend.close()
