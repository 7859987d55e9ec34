"""A process that contends for one etcd lock (run by test_etcd.py with the spawn start
method, like a separate service).

Each critical section writes a fenced log entry into etcd (``fenced_txn``: applied only
while the lease still holds the lock), holds for ``HOLD_S``, and reports
``(start_ns, end_ns, token, pid)`` on a queue. Times are ``time.monotonic_ns()``:
CLOCK_MONOTONIC, one clock for every process on Linux. Odd workers use asyncio.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, List

HOLD_S = 0.002


def run(endpoints: List[str], name: str, log_prefix: str, rounds: int, go: Any, out: Any, use_async: bool) -> None:
    """Takes lock ``name`` ``rounds`` times; raises (non-zero exit) on any failure."""
    import httpx

    import fencepost
    from fencepost.etcd import EtcdBackend

    options: dict[str, Any] = dict(ttl=3.0, acquire_timeout=60.0, purpose="correctness")

    def entry(lease: Any, i: int) -> List[tuple[str, str]]:
        return [(f"{log_prefix}{lease.token:012d}-{os.getpid()}-{i}", f"{os.getpid()}:{i}")]

    if not use_async:
        with httpx.Client(timeout=5.0) as client:
            backend = EtcdBackend(client, endpoints)
            lock = fencepost.Lock(backend, name, **options)
            go.wait(60)
            for i in range(rounds):
                with lock as lease:
                    start = time.monotonic_ns()
                    backend.fenced_txn_sync(lease, puts=entry(lease, i))
                    time.sleep(HOLD_S)
                    lease.check()
                    end = time.monotonic_ns()
                out.put((start, end, lease.token, os.getpid()))
            backend.close()
        return

    async def main() -> None:
        async with httpx.AsyncClient(timeout=5.0) as client:
            backend = EtcdBackend(client, endpoints)
            lock = fencepost.Lock(backend, name, **options)
            await asyncio.get_running_loop().run_in_executor(None, go.wait, 60)
            for i in range(rounds):
                async with lock as lease:
                    start = time.monotonic_ns()
                    await backend.fenced_txn(lease, puts=entry(lease, i))
                    await asyncio.sleep(HOLD_S)
                    lease.check()
                    end = time.monotonic_ns()
                out.put((start, end, lease.token, os.getpid()))
            backend.close()

    asyncio.run(main())
