"""A process that contends for one Redis lock (run by test_redis.py with the spawn
start method, so it imports everything afresh, like a separate service would).

Each critical section writes through the Redis fenced-SET script with the lease's
token, then appends ``[start_ns, end_ns, token, pid, mode]`` to a Redis list. Times are
``time.monotonic_ns()``: CLOCK_MONOTONIC, one clock for every process on Linux.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from typing import Any

HOLD_S = 0.001  # inside the critical section
PAUSE_S = 0.004  # at most, between sections: lets the others in


def _record(client: Any, log_key: str, start: int, end: int, token: int, mode: str) -> None:
    client.rpush(log_key, json.dumps([start, end, token, os.getpid(), mode]))


def run(
    url: str,
    prefix: str,
    name: str,
    rounds: int,
    go: Any,
    use_async: bool,
    fair: bool = False,
    pause_s: float = PAUSE_S,
    cluster: bool = False,
) -> None:
    """Takes lock ``name`` ``rounds`` times; raises (non-zero exit) on any failure.
    ``fair`` turns on fair hand-off; ``pause_s`` bounds the random pause between
    sections (0: ask again at once, the hardest case for fairness). ``cluster``: ``url``
    is a Redis Cluster node, reached with ``RedisCluster`` clients; the fenced keys
    then share a hash tag (one script touches both)."""
    import redis
    import redis.cluster

    import fencepost
    from fencepost.redis import RedisBackend

    options: dict[str, Any] = dict(ttl=2.0, acquire_timeout=30.0, retry_base=0.002, retry_max=0.02)
    tag = "{fenced}" if cluster else ""
    data_key, fence_key, log_key = f"{prefix}{tag}data", f"{prefix}{tag}fence", f"{prefix}log"
    sync_client = redis.cluster.RedisCluster.from_url if cluster else redis.Redis.from_url
    if not go.wait(30):
        raise RuntimeError("no start signal")

    if not use_async:
        client = sync_client(url, socket_timeout=5)
        backend = RedisBackend(client, key_prefix=prefix, fair=fair)
        lock = fencepost.Lock(backend, name, **options)
        for i in range(rounds):
            with lock as lease:
                start = time.monotonic_ns()
                backend.fenced_set_sync(data_key, fence_key, lease.token, f"{os.getpid()}:{i}")
                time.sleep(HOLD_S)
                lease.check()
                end = time.monotonic_ns()
                _record(client, log_key, start, end, lease.token, "sync")
            time.sleep(random.uniform(0, pause_s))
        backend.close()
        client.close()
        return

    async def main() -> None:
        import redis.asyncio
        import redis.asyncio.cluster

        async_client = redis.asyncio.cluster.RedisCluster.from_url if cluster else redis.asyncio.Redis.from_url
        client = async_client(url, socket_timeout=5)
        log = sync_client(url, socket_timeout=5)
        backend = RedisBackend(client, key_prefix=prefix, fair=fair)
        lock = fencepost.Lock(backend, name, **options)
        for i in range(rounds):
            async with lock as lease:
                start = time.monotonic_ns()
                await backend.fenced_set(data_key, fence_key, lease.token, f"{os.getpid()}:{i}")
                await asyncio.sleep(HOLD_S)
                lease.check()
                end = time.monotonic_ns()
                _record(log, log_key, start, end, lease.token, "async")
            await asyncio.sleep(random.uniform(0, pause_s))
        backend.close()
        await client.aclose()
        log.close()

    asyncio.run(main())
