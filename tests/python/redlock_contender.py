"""A process that contends for one Redlock lock on several real masters (run by
test_redlock.py with the spawn start method, like a separate service).

Each critical section appends ``[start_ns, end_ns, token, pid, mode]`` to a list on
the log server (a Redis of its own, not one of the masters). Times are
``time.monotonic_ns()``: CLOCK_MONOTONIC, one clock for every process on Linux.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from typing import Any, List

HOLD_S = 0.002  # inside the critical section
PAUSE_S = 0.005  # at most, between sections: lets the others in


def run(urls: List[str], log_url: str, prefix: str, name: str, rounds: int, go: Any, use_async: bool) -> None:
    """Takes lock ``name`` ``rounds`` times; raises (non-zero exit) on any failure."""
    import redis

    import fencepost
    from fencepost.redlock import RedlockBackend

    options: dict[str, Any] = dict(ttl=2.0, acquire_timeout=40.0, retry_base=0.002, retry_max=0.03)
    log_key = f"{prefix}log"
    log = redis.Redis.from_url(log_url, socket_timeout=5)
    if not go.wait(30):
        raise RuntimeError("no start signal")

    def record(start: int, end: int, token: int, mode: str) -> None:
        log.rpush(log_key, json.dumps([start, end, token, os.getpid(), mode]))

    if not use_async:
        clients = [redis.Redis.from_url(u, socket_timeout=5) for u in urls]
        backend = RedlockBackend(clients, key_prefix=prefix)
        lock = fencepost.Lock(backend, name, **options)
        for _ in range(rounds):
            with lock as lease:
                start = time.monotonic_ns()
                time.sleep(HOLD_S)
                lease.check()
                record(start, time.monotonic_ns(), lease.token, "sync")
            time.sleep(random.uniform(0, PAUSE_S))
        backend.close()
        for c in clients:
            c.close()
        return

    async def main() -> None:
        import redis.asyncio

        clients = [redis.asyncio.Redis.from_url(u, socket_timeout=5) for u in urls]
        backend = RedlockBackend(clients, key_prefix=prefix)
        lock = fencepost.Lock(backend, name, **options)
        for _ in range(rounds):
            async with lock as lease:
                start = time.monotonic_ns()
                await asyncio.sleep(HOLD_S)
                lease.check()
                record(start, time.monotonic_ns(), lease.token, "async")
            await asyncio.sleep(random.uniform(0, PAUSE_S))
        await backend.aclose()
        for c in clients:
            await c.aclose()

    asyncio.run(main())
