"""Replica-confirmed grants against a real Redis primary and replica on 127.0.0.1, which
this module starts itself with scripts/services/redis-replica.sh (its link proxy can hold
replication back). Runs where scripts/test runs the Redis tests ($FENCEPOST_REDIS_URL set)."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Iterator, Tuple

import pytest

import fencepost
from fencepost.errors import AcquireTimeout, ConfigError
from fencepost.redis import RedisBackend

from conftest import wait_until

redis = pytest.importorskip("redis")
import redis.asyncio  # noqa: E402

SCRIPT = str(Path(__file__).resolve().parents[2] / "scripts" / "services" / "redis-replica.sh")
pytestmark = pytest.mark.skipif(
    not os.environ.get("FENCEPOST_REDIS_URL"),
    reason="FENCEPOST_REDIS_URL is not set (scripts/test starts Redis; this module starts its own pair)",
)


def service(*args: str) -> str:
    return subprocess.run([SCRIPT, *args], check=True, capture_output=True, text=True, timeout=60).stdout.strip()


@pytest.fixture(scope="module")
def pair() -> Iterator[Tuple[str, str]]:
    primary, replica = service("start").split()
    try:
        yield primary, replica
    finally:
        subprocess.run([SCRIPT, "stop"], check=False, timeout=60)


@pytest.fixture
def name() -> str:
    return f"replica-{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True)
def link_resumed(pair: Tuple[str, str]) -> Iterator[None]:
    yield
    service("resume")


def test_a_confirmed_grant_is_on_the_replica_when_acquired(pair: Tuple[str, str], name: str) -> None:
    primary, replica = (redis.Redis.from_url(u, socket_timeout=5) for u in pair)
    backend = RedisBackend(primary)
    with fencepost.Lock(backend, name, ttl=5.0, min_replicas=1, replica_timeout=0.5) as lease:
        # WAIT returned only once the replica had the lease key and the counter
        assert replica.get(backend.lock_key(name)) == lease.owner_id.encode()
        assert int(replica.get(backend.token_key(name))) == lease.token
    primary.close()
    replica.close()


def test_an_unconfirmed_grant_is_not_acquired_and_is_released(pair: Tuple[str, str], name: str) -> None:
    primary = redis.Redis.from_url(pair[0], socket_timeout=5)
    backend = RedisBackend(primary)
    service("hold")
    started = time.monotonic()
    with pytest.raises(AcquireTimeout, match="WAIT confirmed the grant on 0 of 1 replicas"):
        fencepost.Lock(backend, name, ttl=5.0, min_replicas=1, replica_timeout=0.05, acquire_timeout=0.4).acquire_sync()
    assert time.monotonic() - started < 2.0
    # the attempt's lease key was released on the primary, not left for its TTL
    assert wait_until(lambda: primary.exists(backend.lock_key(name)) == 0, timeout=2.0)
    primary.close()


def test_unconfirmed_renewals_are_retried_until_the_validity_deadline(pair: Tuple[str, str], name: str) -> None:
    primary = redis.Redis.from_url(pair[0], socket_timeout=5)
    backend = RedisBackend(primary)
    lease = fencepost.Lock(backend, name, ttl=0.6, min_replicas=1, replica_timeout=0.05).acquire_sync()
    deadline = lease.valid_until_ns
    service("hold")
    assert lease.lost.wait(3.0), "a lease whose renewals no replica confirms is lost"
    assert lease.lost_reason == "expired"
    # lost at its validity deadline, not before (each renewal was retried until then)
    assert time.monotonic_ns() >= deadline
    primary.close()


async def test_asyncio_clients_confirm_with_one_pipeline(pair: Tuple[str, str], name: str) -> None:
    primary = redis.asyncio.Redis.from_url(pair[0], socket_timeout=5)
    replica = redis.Redis.from_url(pair[1], socket_timeout=5)
    backend = RedisBackend(primary)
    async with fencepost.Lock(backend, name, ttl=5.0, min_replicas=1, replica_timeout=0.5) as lease:
        assert replica.get(backend.lock_key(name)) == lease.owner_id.encode()
    await primary.aclose()
    replica.close()


def test_min_replicas_is_refused_where_wait_cannot_confirm_the_script(name: str) -> None:
    with pytest.raises(ConfigError, match="min_replicas: MemoryBackend has no replicas"):
        fencepost.Lock(fencepost.MemoryBackend(), name, min_replicas=1)
    with pytest.raises(ConfigError, match="min_replicas must be an int"):
        fencepost.Lock(fencepost.MemoryBackend(), name, min_replicas=-1)


def test_a_fair_hand_off_is_confirmed_by_the_waiters_next_acquire(pair: Tuple[str, str], name: str) -> None:
    """The releaser's script grants the lock to the parked waiter; the waiter counts it
    only after its own acquire (the lock already its own) and WAIT confirm it."""
    import threading

    primary, replica = (redis.Redis.from_url(u, socket_timeout=5) for u in pair)
    backend = RedisBackend(primary, fair=True)
    options = dict(ttl=5.0, min_replicas=1, replica_timeout=0.5)
    holder = fencepost.Lock(backend, name, **options).acquire_sync()  # type: ignore[arg-type]
    got = []
    waiter = fencepost.Lock(RedisBackend(primary, fair=True), name, **options)  # type: ignore[arg-type]
    t = threading.Thread(target=lambda: got.append(waiter.acquire_sync()))
    t.start()
    assert wait_until(lambda: primary.zcard(f"fencepost:{{{name}}}:queue") == 1, timeout=3.0)
    holder.release()
    t.join(5.0)
    (lease,) = got
    assert lease.token == holder.token + 1
    assert replica.get(backend.lock_key(name)) == lease.owner_id.encode()
    lease.release()
    primary.close()
    replica.close()


def test_after_a_failover_a_confirmed_lease_holds_and_the_token_rises(pair: Tuple[str, str], name: str) -> None:
    """Last in the module: it kills the primary. A's confirmed grant is on the promoted
    replica, so B is refused until A's lease runs out, then gets a higher token."""
    primary = redis.Redis.from_url(pair[0], socket_timeout=1)
    a = fencepost.Lock(RedisBackend(primary), name, ttl=1.5, min_replicas=1, auto_renew=False).acquire_sync()
    service("hold")
    service("kill-primary")
    service("promote")
    promoted = RedisBackend(redis.Redis.from_url(pair[1], socket_timeout=5))
    with pytest.raises(AcquireTimeout):
        fencepost.Lock(promoted, name, ttl=1.5, acquire_timeout=0).acquire_sync()
    b = fencepost.Lock(promoted, name, ttl=1.5, acquire_timeout=5.0).acquire_sync()
    assert b.token > a.token
    b.release()
    promoted.close()
