"""The seed scenario: a holder paused past its lease writes with a stale token.

Worker A takes a fenced lease on "report" and starts writing. A then stops dead for
longer than its TTL (a stop-the-world GC pause, a VM suspend: its event loop and its
renewals stop too). The lease expires on the server; worker B takes the lock with the
next fencing token and writes the report. A wakes up, unaware, and writes with its old
token — and the fence at the storage refuses it.

Run it with ``scripts/demo`` (embedded in-memory backend, no server needed) or
``scripts/demo --redis redis://127.0.0.1:6379/0`` (a real Redis server; the fence is
then a Lua script inside Redis).
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from typing import Optional

import fencepost
from fencepost.errors import LockLost, StaleToken

TTL = 1.0  # seconds: the lease the server enforces
PAUSE = 1.5  # seconds: how long A stops, longer than the TTL
LOCK_NAME = "report"

T0 = time.monotonic()
_print_lock = threading.Lock()


def say(who: str, text: str) -> None:
    """Prints one timeline line: seconds since start, the worker, what happened."""
    with _print_lock:
        print(f"[{time.monotonic() - T0:6.3f} s] {who:<7} {text}", flush=True)


class Storage:
    """The protected resource: a document store that checks fencing tokens.

    In memory it is a :class:`fencepost.Fence` beside a dict; on Redis it is the fenced
    SET script, so the check and the write are one atomic step inside Redis.
    """

    def __init__(self, redis_url: Optional[str], prefix: str) -> None:
        self._fence = fencepost.Fence()
        self._docs: dict[str, str] = {}
        self._mutex = threading.Lock()
        self._prefix = prefix
        self._redis = None
        if redis_url is not None:
            import redis

            from fencepost.redis import RedisBackend

            # a synchronous client: the write leaves at once, before A's event loop
            # runs again and notices anything
            self._redis = RedisBackend(redis.Redis.from_url(redis_url), key_prefix=prefix)

    def write(self, doc: str, token: int, text: str) -> None:
        """Writes ``text`` to ``doc`` with ``token``; raises StaleToken if refused."""
        if self._redis is not None:
            key = f"{self._prefix}doc:{{{doc}}}"
            self._redis.fenced_set_sync(key, key + ":fence", token, text)
            return
        with self._mutex:
            self._fence.check(doc, token)
            self._docs[doc] = text

    def read(self, doc: str) -> Optional[str]:
        """The document's current text."""
        if self._redis is not None:
            value = self._redis.client.get(f"{self._prefix}doc:{{{doc}}}")
            return value.decode() if isinstance(value, bytes) else value
        with self._mutex:
            return self._docs.get(doc)

    def close(self) -> None:
        """Deletes the run's keys (the documents, the fences, the lock's token counter
        and record: all under this run's prefix), then closes the Redis backend and its
        client (nothing to do in memory)."""
        if self._redis is not None:
            client = self._redis.client
            keys = list(client.scan_iter(match=f"{self._prefix}*", count=100))
            if keys:
                client.delete(*keys)
            self._redis.close()
            client.close()


def make_backend(redis_url: Optional[str], prefix: str, share: Optional[fencepost.MemoryBackend]):  # type: ignore[no-untyped-def]
    """One backend per worker: each worker is its own client with its own machine."""
    if redis_url is None:
        return fencepost.MemoryBackend(server=share.server) if share else fencepost.MemoryBackend()
    import redis.asyncio

    from fencepost.redis import RedisBackend

    return RedisBackend(redis.asyncio.Redis.from_url(redis_url), key_prefix=prefix)


async def close_backend(backend) -> None:  # type: ignore[no-untyped-def]
    """Closes a worker's backend on its own event loop, and a Redis backend's asyncio
    client with it (the worker made it)."""
    await backend.aclose()
    client = getattr(backend, "client", None)
    if client is not None:
        await client.aclose()


async def worker_a(backend, storage: Storage, outcome: dict[str, object]) -> None:  # type: ignore[no-untyped-def]
    try:
        await run_a(backend, storage, outcome)
    finally:
        await close_backend(backend)


async def run_a(backend, storage: Storage, outcome: dict[str, object]) -> None:  # type: ignore[no-untyped-def]
    lock = fencepost.Lock(backend, LOCK_NAME, ttl=TTL)
    try:
        async with lock as lease:
            say("A", f"acquired {LOCK_NAME!r}: fencing token {lease.token}, valid for {lease.valid_for():.3f} s")
            storage.write(LOCK_NAME, lease.token, "A: draft")
            say("A", f"wrote 'A: draft' with token {lease.token}: accepted")
            say("A", f"-- paused for {PAUSE} s (stop-the-world GC: no renewals, no timers) --")
            time.sleep(PAUSE)  # blocks A's whole event loop, renewals included
            say("A", f"woke up; still thinks it holds the lock; writing with token {lease.token}")
            try:
                storage.write(LOCK_NAME, lease.token, "A: final (stale!)")
                outcome["stale_write"] = "ACCEPTED"
                say("A", "stale write ACCEPTED")
            except StaleToken as e:
                outcome["stale_write"] = "REJECTED"
                outcome["highest"] = e.highest
                say("A", f"write REJECTED by the fence: {e}")
            await asyncio.sleep(0)  # A's loop runs again: its timers catch up
            await asyncio.sleep(1)  # never finishes: the lease is lost
    except LockLost as e:
        say("A", f"lease lost, body cancelled, LockLost raised: {e}")
        outcome["lost"] = True


async def worker_b(backend, storage: Storage) -> None:  # type: ignore[no-untyped-def]
    try:
        await run_b(backend, storage)
    finally:
        await close_backend(backend)


async def run_b(backend, storage: Storage) -> None:  # type: ignore[no-untyped-def]
    await asyncio.sleep(0.1)
    say("B", f"waiting for {LOCK_NAME!r}")
    lock = fencepost.Lock(backend, LOCK_NAME, ttl=TTL, acquire_timeout=10.0, retry_max=0.05)
    async with lock as lease:
        say("B", f"acquired {LOCK_NAME!r}: fencing token {lease.token}")
        storage.write(LOCK_NAME, lease.token, "B: final")
        say("B", f"wrote 'B: final' with token {lease.token}: accepted")
    say("B", "released")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--redis", metavar="URL", help="run against this Redis server instead of in memory")
    args = parser.parse_args()
    prefix = f"fencepost-demo:{time.time_ns()}:"

    where = f"Redis at {args.redis}" if args.redis else "the embedded in-memory backend"
    print(f"fencepost demo on {where}: ttl {TTL} s, A pauses {PAUSE} s\n")
    storage = Storage(args.redis, prefix)
    a_backend = make_backend(args.redis, prefix, None)
    b_backend = make_backend(args.redis, prefix, a_backend if args.redis is None else None)
    outcome: dict[str, object] = {}

    b_thread = threading.Thread(target=lambda: asyncio.run(worker_b(b_backend, storage)), name="worker-B")
    b_thread.start()
    asyncio.run(worker_a(a_backend, storage, outcome))
    b_thread.join()

    final = storage.read(LOCK_NAME)
    storage.close()
    print()
    print(f"document {LOCK_NAME!r} now reads: {final!r}")
    if outcome.get("stale_write") == "REJECTED" and final == "B: final":
        print(
            f"VERDICT: fenced. A's stale write was rejected (the fence had seen token "
            f"{outcome['highest']}); B's report is intact."
        )
        return 0
    print(f"VERDICT: NOT fenced: {outcome}")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
