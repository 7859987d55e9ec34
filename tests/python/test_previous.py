"""How the previous holder ended, on every grant (``lease.previous``): the first grant of a
name hears ``"none"``; after its holder's own release ``"released"``; after a holder whose
lease ran out (it stopped renewing, as a paused or killed process does, and its machine's
cleanup freed the key) or an operator's ``force_release``, ``"expired"``. On the in-memory
backend (always), real Redis ($FENCEPOST_REDIS_URL, plain and fair), PostgreSQL lease rows
($FENCEPOST_PG_URL), etcd ($FENCEPOST_ETCD_URL: its release and contender records) and
the Kubernetes Lease test server ($FENCEPOST_KUBE_URL), which ``scripts/test`` starts."""

from __future__ import annotations

import os
import threading
import time
import uuid
from typing import Any, Iterator, List

import pytest

import fencepost

REDIS_URL = os.environ.get("FENCEPOST_REDIS_URL")
PG_URL = os.environ.get("FENCEPOST_PG_URL")
ETCD_URL = os.environ.get("FENCEPOST_ETCD_URL")
KUBE_URL = os.environ.get("FENCEPOST_KUBE_URL")


def kinds() -> List[Any]:
    params = [pytest.param(("memory://", False), id="memory"), pytest.param(("memory://", True), id="memory-fair")]
    if REDIS_URL:
        params += [pytest.param((REDIS_URL, False), id="redis"), pytest.param((REDIS_URL, True), id="redis-fair")]
    if PG_URL:
        params += [pytest.param((PG_URL, None), id="postgres")]
    if ETCD_URL:
        params += [pytest.param((ETCD_URL, None), id="etcd")]
    return params


@pytest.fixture(params=kinds())
def backend(request: Any) -> Iterator[fencepost.Backend]:
    url, fair = request.param
    b = fencepost.backend_from_url(url) if fair is None else fencepost.backend_from_url(url, fair=fair)
    migrate = getattr(b, "migrate_sync", None)
    if migrate is not None:
        migrate()
    yield b
    b.close()


@pytest.fixture
def name() -> str:
    return f"prev-{uuid.uuid4().hex[:12]}"


def test_none_then_released_then_expired_then_reset(backend: fencepost.Backend, name: str) -> None:
    with fencepost.Lock(backend, name, ttl=5.0) as first:
        assert first.previous == "none"
    with fencepost.Lock(backend, name, ttl=5.0) as second:
        assert second.previous == "released"
        assert second.token > first.token
    # a holder that stops renewing: its machine declares the lease lost at the validity
    # deadline and frees the key at once with a cleanup, which is no clean release
    stalled = fencepost.Lock(backend, name, ttl=0.3, auto_renew=False).acquire_sync()
    assert stalled.previous == "released"
    time.sleep(0.5)
    with pytest.raises(fencepost.LockLost):
        stalled.check()
    heir = fencepost.Lock(backend, name, ttl=5.0, acquire_timeout=2.0).acquire_sync()
    assert heir.previous == "expired"
    assert heir.token > stalled.token
    # an operator frees it behind the holder's back
    assert backend.force_release_sync(name) is True
    with pytest.raises(fencepost.LockLost):
        heir.release()
    with fencepost.Lock(backend, name, ttl=5.0) as after_reset:
        assert after_reset.previous == "expired"


def test_a_fair_hand_off_tells_the_waiter(name: str) -> None:
    backend = fencepost.backend_from_url(REDIS_URL or "memory://", fair=True)
    try:
        holder = fencepost.Lock(backend, name, ttl=5.0).acquire_sync()
        waiting = fencepost.Lock(backend, name, ttl=5.0, acquire_timeout=5.0)
        got: List[Any] = []
        t = threading.Thread(target=lambda: got.append(waiting.acquire_sync()))
        t.start()
        time.sleep(0.3)  # the waiter is queued and parked
        holder.release()
        t.join(5.0)
        assert got and got[0].previous == "released"
        got[0].release()
    finally:
        backend.close()


@pytest.mark.skipif(not REDIS_URL, reason="FENCEPOST_REDIS_URL is not set (scripts/test sets it)")
def test_a_grant_that_left_no_record_makes_the_next_one_unknown(name: str) -> None:
    import redis

    backend = fencepost.backend_from_url(REDIS_URL or "")
    raw = redis.Redis.from_url(REDIS_URL or "")
    try:
        with fencepost.Lock(backend, name, ttl=5.0) as first:
            assert first.previous == "none"
        # a grant by a client that keeps no record (an older fencepost): the counter moves
        raw.incr(f"fencepost:{{{name}}}:token")
        with fencepost.Lock(backend, name, ttl=5.0) as lease:
            assert lease.previous == "unknown"
        with fencepost.Lock(backend, name, ttl=5.0) as lease:
            assert lease.previous == "released"
    finally:
        backend.close()
        raw.close()


@pytest.mark.skipif(not REDIS_URL, reason="FENCEPOST_REDIS_URL is not set (scripts/test sets it)")
def test_a_fair_release_past_dead_waiters_records_the_release(name: str) -> None:
    import redis

    backend = fencepost.backend_from_url(REDIS_URL or "", fair=True)
    raw = redis.Redis.from_url(REDIS_URL or "")
    try:
        first = fencepost.Lock(backend, name, ttl=5.0).acquire_sync()
        # waiters that vanished: queued, with no presence key left, so the release
        # pops them all and grants nobody
        raw.zadd(f"fencepost:{{{name}}}:queue", {"a" * 32: 1, "b" * 32: 2})
        first.release()
        assert raw.zcard(f"fencepost:{{{name}}}:queue") == 0
        with fencepost.Lock(backend, name, ttl=5.0) as lease:
            assert lease.previous == "released"
            assert lease.token == first.token + 1
    finally:
        backend.close()
        raw.close()


@pytest.mark.skipif(not ETCD_URL, reason="FENCEPOST_ETCD_URL is not set (scripts/test sets it)")
def test_etcd_waiters_hear_it_from_the_holder_they_queued_behind(name: str) -> None:
    backend = fencepost.backend_from_url(ETCD_URL or "")

    def queue_behind_and_wait() -> Any:
        got: List[Any] = []
        waiting = fencepost.Lock(backend, name, ttl=5.0, acquire_timeout=5.0)
        t = threading.Thread(target=lambda: got.append(waiting.acquire_sync()))
        t.start()
        time.sleep(0.3)  # queued: its key is behind the holder's, its watch parked
        return t, got

    try:
        holder = fencepost.Lock(backend, name, ttl=5.0).acquire_sync()
        assert holder.previous == "none"
        t, got = queue_behind_and_wait()
        holder.release()
        t.join(5.0)
        assert got and got[0].previous == "released"
        got[0].release()
        # a holder that stops renewing while another waits behind it: lost at its
        # validity, its machine revokes the lease (no clean release)
        stalled = fencepost.Lock(backend, name, ttl=1.0, auto_renew=False).acquire_sync()
        assert stalled.previous == "released"
        t, got = queue_behind_and_wait()
        t.join(5.0)
        assert got and got[0].previous == "expired"
        assert got[0].token > stalled.token
        got[0].release()
    finally:
        backend.close()


@pytest.mark.skipif(not KUBE_URL, reason="FENCEPOST_KUBE_URL is not set (scripts/test sets it)")
def test_kubernetes_reads_it_from_the_lease_record(name: str) -> None:
    import kube_contender

    backend = kube_contender.backend(KUBE_URL or "", os.environ.get("FENCEPOST_KUBE_TOKEN", ""))
    try:
        with fencepost.Lock(backend, name, ttl=1) as first:
            assert first.previous == "none"
        with fencepost.Lock(backend, name, ttl=1) as second:
            assert second.previous == "released"
        stalled = fencepost.Lock(backend, name, ttl=1, auto_renew=False).acquire_sync()
        time.sleep(1.2)  # lost at its validity; the cleanup keeps the holder, shortened
        with fencepost.Lock(backend, name, ttl=1, acquire_timeout=5.0) as heir:
            assert heir.previous == "expired"
            assert heir.token > stalled.token
    finally:
        backend.close()
        backend.client.close()
