"""A short smoke test of fencepost's redis-py adapter on one installed redis-py version.

Run by ``scripts/test-clients`` once per supported major version (each installed into a
directory of its own that goes first on ``PYTHONPATH``), against the real Redis at
``$FENCEPOST_REDIS_URL``:

    python tests/clients/smoke_redis_py.py EXPECTED_MAJOR

For a blocking client and an asyncio client it acquires, lets the lease renew past its
TTL, writes through the fence (a stale token is refused), releases, and hands a contended
fair lock from one holder to a parked ``BLPOP`` waiter. It also prints the adapter's bound
on one blocking request for ``redis.Redis(host=…, socket_timeout=1)``, which depends on
the client's default retry policy (the README quotes it per version), and for
``redis.Redis.from_url(url, socket_timeout=2)``, and checks them against the figures
expected for that major version.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
import uuid
from urllib.parse import urlparse

import redis
import redis.asyncio

import fencepost
from fencepost.errors import StaleToken
from fencepost.redis import RedisBackend

# The adapter's bound on one blocking request, seconds, for redis.Redis(host=…,
# socket_timeout=1) with the client's defaults (fencepost/redis.py, _sync_call_limit_s):
# 2 × ((retries + 1) × max(socket_timeout, socket_connect_timeout) + retries × backoff cap).
# redis-py 5: no retries, 2 × 1 s; 6 and 7: 3 retries, 10 s cap, 2 × (4 × 1 + 3 × 10);
# 8: 10 retries, 1 s cap, a 5 s connect timeout, 2 × (11 × 5 + 10 × 1). The README quotes these.
BOUND_S = {5: 2.0, 6: 68.0, 7: 68.0, 8: 130.0}


def check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


def sync_smoke(url: str, prefix: str) -> None:
    client = redis.Redis.from_url(url, socket_timeout=2)
    backend = RedisBackend(client, key_prefix=prefix)
    try:
        lock = fencepost.Lock(backend, "smoke", ttl=0.6, acquire_timeout=5.0)
        with lock as lease:
            check(lease.token >= 1, f"token {lease.token}")
            time.sleep(0.8)  # past the 0.6 s TTL: only renewals keep it
            lease.check()
            check(client.get(f"{prefix}{{smoke}}:lock") is not None, "renewed: the key is still there")
            backend.fenced_set_sync(f"{prefix}data", f"{prefix}fence", lease.token, "sync")
            # a newer holder's write (token + 1) makes this lease's token stale
            backend.fenced_set_sync(f"{prefix}other", f"{prefix}fence", lease.token + 1, "newer")
            try:
                backend.fenced_set_sync(f"{prefix}data", f"{prefix}fence", lease.token, "stale")
            except StaleToken:
                pass
            else:
                raise AssertionError("a token below the fence's passed")
        check(client.get(f"{prefix}{{smoke}}:lock") is None, "released")
        check(client.get(f"{prefix}data") == b"sync", "the fenced write landed")
    finally:
        backend.close()
        client.close()


def sync_fair_handoff(url: str, prefix: str) -> None:
    client = redis.Redis.from_url(url, socket_timeout=2)
    backend = RedisBackend(client, key_prefix=prefix, fair=True)
    try:
        holder = fencepost.Lock(backend, "fair", ttl=5.0, acquire_timeout=5.0, retry_max=1.0)
        waiter = fencepost.Lock(backend, "fair", ttl=5.0, acquire_timeout=5.0, retry_max=1.0)
        got: "list[fencepost.SyncLease]" = []
        first = holder.acquire_sync()
        thread = threading.Thread(target=lambda: got.append(waiter.acquire_sync()))
        thread.start()
        time.sleep(0.2)  # the waiter queues and parks in BLPOP
        released = time.monotonic()
        holder.release_sync()
        thread.join(5.0)
        check(len(got) == 1, "the waiter got the lock")
        # woken by the hand-off, not by its 1 s park timeout
        check(time.monotonic() - released < 0.5, "handed off at once")
        check(got[0].token > first.token, "tokens rise")
        waiter.release_sync()
    finally:
        backend.close()
        client.close()


async def async_smoke(url: str, prefix: str) -> None:
    client = redis.asyncio.Redis.from_url(url, socket_timeout=2)
    backend = RedisBackend(client, key_prefix=prefix)
    try:
        async with fencepost.Lock(backend, "smoke", ttl=0.6, acquire_timeout=5.0) as lease:
            await asyncio.sleep(0.8)
            lease.check()
            check(await client.get(f"{prefix}{{smoke}}:lock") is not None, "renewed")
            await backend.fenced_set(f"{prefix}data", f"{prefix}fence", lease.token, "async")
            await backend.fenced_set(f"{prefix}other", f"{prefix}fence", lease.token + 1, "newer")
            try:
                await backend.fenced_set(f"{prefix}data", f"{prefix}fence", lease.token, "stale")
            except StaleToken:
                pass
            else:
                raise AssertionError("a token below the fence's passed")
        check(await client.get(f"{prefix}{{smoke}}:lock") is None, "released")
        check(await client.get(f"{prefix}data") == b"async", "the fenced write landed")
        # fair: a parked asyncio waiter is woken by the release
        fair = RedisBackend(client, key_prefix=f"{prefix}fair:", fair=True)
        try:
            a = fencepost.Lock(fair, "fair", ttl=5.0, acquire_timeout=5.0, retry_max=1.0)
            b = fencepost.Lock(fair, "fair", ttl=5.0, acquire_timeout=5.0, retry_max=1.0)
            first = await a.acquire()
            waiting = asyncio.ensure_future(b.acquire())
            await asyncio.sleep(0.2)
            released = time.monotonic()
            await a.release()
            second = await asyncio.wait_for(waiting, 5.0)
            check(time.monotonic() - released < 0.5, "handed off at once")
            check(second.token > first.token, "tokens rise")
            await b.release()
        finally:
            fair.close()
    finally:
        backend.close()
        await client.aclose() if hasattr(client, "aclose") else await client.close()


def wait_smoke(url: str, prefix: str) -> None:
    """WAIT in one pipeline after the script, blocking and asyncio: a lone server has no
    replica, so min_replicas=1 is never confirmed, and the unconfirmed grant is released."""
    from fencepost.errors import AcquireTimeout

    plain = redis.Redis.from_url(url, socket_timeout=2)
    options = dict(ttl=5.0, min_replicas=1, replica_timeout=0.01, acquire_timeout=1.0)

    def refused(exc: AcquireTimeout) -> None:
        check("WAIT confirmed the grant on 0 of 1" in str(exc), f"the timeout names WAIT: {exc}")

    def released(name: str) -> bool:
        return plain.get(f"{prefix}{{{name}}}:lock") is None

    backend = RedisBackend(redis.Redis.from_url(url, socket_timeout=2), key_prefix=prefix)
    try:
        fencepost.Lock(backend, "wait", **options).acquire_sync()  # type: ignore[arg-type]
        raise AssertionError("a grant no replica confirmed was acquired")
    except AcquireTimeout as exc:
        refused(exc)
    for _ in range(100):
        if released("wait"):
            break
        time.sleep(0.01)
    check(released("wait"), "the unconfirmed grant was released (blocking client)")
    backend.close()

    async def in_loop() -> None:  # the cleanup release runs on the loop: keep it running
        backend = RedisBackend(redis.asyncio.Redis.from_url(url, socket_timeout=2), key_prefix=prefix)
        try:
            await fencepost.Lock(backend, "await", **options).acquire()  # type: ignore[arg-type]
            raise AssertionError("a grant no replica confirmed was acquired")
        except AcquireTimeout as exc:
            refused(exc)
        for _ in range(100):
            if released("await"):
                break
            await asyncio.sleep(0.01)
        check(released("await"), "the unconfirmed grant was released (asyncio client)")
        await backend.aclose()

    asyncio.run(in_loop())
    plain.close()


def main() -> None:
    major = int(sys.argv[1])
    have = int(redis.__version__.split(".")[0])
    check(have == major, f"expected redis-py {major}.x on PYTHONPATH, got {redis.__version__}")
    url = os.environ["FENCEPOST_REDIS_URL"]
    prefix = f"fpclients:{uuid.uuid4().hex[:8]}:"
    started = time.monotonic()
    sync_smoke(url, prefix + "s:")
    sync_fair_handoff(url, prefix + "sf:")
    asyncio.run(async_smoke(url, prefix + "a:"))
    wait_smoke(url, prefix + "w:")
    parsed = urlparse(url)
    probe = RedisBackend(redis.Redis(host=parsed.hostname or "127.0.0.1", port=parsed.port or 6379, socket_timeout=1))
    bound = probe._sync_call_limit_s()
    probe.close()
    check(bound == BOUND_S[major], f"bound on one blocking request: {bound} s, expected {BOUND_S[major]} s")
    # from_url builds a pool without the constructor's default retries, in every version
    probe = RedisBackend(redis.Redis.from_url(url, socket_timeout=2))
    from_url = probe._sync_call_limit_s()
    probe.close()
    check(from_url == 4.0, f"bound for from_url(url, socket_timeout=2): {from_url} s, expected 4.0 s")
    print(
        f"redis-py {redis.__version__}: acquire, renew, fenced write, release, fair hand-off, WAIT "
        f"(threads and asyncio) ok in {time.monotonic() - started:.1f} s; "
        f"bound for redis.Redis(host=…, socket_timeout=1): {bound} s, for from_url(url, socket_timeout=2): {from_url} s"
    )


if __name__ == "__main__":
    main()
