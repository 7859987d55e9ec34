"""Processes that contend for one Kubernetes Lease lock (run by test_kubernetes.py with
the spawn start method, like separate services), and the fenced log they write.

The fenced log is a file guarded by ``flock``: a write carries the lease's token and
owner id and is appended only if the token is above the highest one logged, or equal
from the same owner (the owner-bound fence rule of DESIGN.md); otherwise it is refused.
Times are ``time.monotonic_ns()``: CLOCK_MONOTONIC, one clock for every process on Linux.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import time
from typing import Any, List, Tuple

HOLD_S = 0.002


def fenced_append(path: str, token: int, owner: str, what: str) -> bool:
    """Appends ``(token, owner, what)`` to the log at ``path`` unless a higher token,
    or the same token of another owner, was logged; returns whether it was written."""
    with open(path, "a+", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        lines = [json.loads(line) for line in f if line.strip()]
        if lines:
            top, top_owner = lines[-1][0], lines[-1][1]
            if token < top or (token == top and owner != top_owner):
                return False
        f.write(json.dumps([token, owner, what]) + "\n")
        f.flush()
        return True


def read_log(path: str) -> List[Tuple[int, str, str]]:
    with open(path, encoding="utf-8") as f:
        return [tuple(json.loads(line)) for line in f if line.strip()]  # type: ignore[misc]


def backend(url: str, token: str, use_async: bool = False, timeout: float = 1.0) -> Any:
    import httpx

    from fencepost.kubernetes import KubernetesLeaseBackend

    client = httpx.AsyncClient(timeout=timeout) if use_async else httpx.Client(timeout=timeout)
    return KubernetesLeaseBackend(client, url, token=token)


def run(url: str, token: str, name: str, log: str, rounds: int, go: Any, out: Any, use_async: bool) -> None:
    """Takes lock ``name`` ``rounds`` times, writing the fenced log in each critical
    section; raises (non-zero exit) on any failure."""
    import fencepost

    b = backend(url, token, use_async)
    lock = fencepost.Lock(b, name, ttl=3, acquire_timeout=60.0, purpose="correctness", retry_max=0.05)

    def section(lease: Any, i: int) -> None:
        if not fenced_append(log, lease.token, lease.owner_id, f"{os.getpid()}:{i}"):
            raise AssertionError(f"fenced write of a live lease refused: {lease!r}")

    if not use_async:
        go.wait(60)
        for i in range(rounds):
            with lock as lease:
                start = time.monotonic_ns()
                section(lease, i)
                time.sleep(HOLD_S)
                lease.check()
                end = time.monotonic_ns()
            out.put((start, end, lease.token, os.getpid()))
        b.close()
        b.client.close()
        return

    async def main() -> None:
        await asyncio.get_running_loop().run_in_executor(None, go.wait, 60)
        for i in range(rounds):
            async with lock as lease:
                start = time.monotonic_ns()
                section(lease, i)
                await asyncio.sleep(HOLD_S)
                lease.check()
                end = time.monotonic_ns()
            out.put((start, end, lease.token, os.getpid()))
        await b.aclose()
        await b.client.aclose()

    asyncio.run(main())


def hold_then_write(url: str, token: str, name: str, log: str, held: Any, out: Any) -> None:
    """Takes the lock (ttl 2 s), writes once, reports ``held``, sleeps (the test
    SIGSTOPs this process past its lease), then tries a fenced write; reports
    ``(lost?, write refused?)`` on ``out``."""
    import fencepost

    b = backend(url, token)
    lock = fencepost.Lock(b, name, ttl=2, purpose="correctness")
    lease = lock.acquire_sync()
    fenced_append(log, lease.token, lease.owner_id, "first")
    held.set()
    time.sleep(1.0)  # stopped in here
    lost = lease.lost.wait(10)
    refused = not fenced_append(log, lease.token, lease.owner_id, "stale")
    out.put((lost, refused, lease.token))


def hold(url: str, token: str, name: str, ttl: int, held: Any) -> None:
    """Takes lock ``name`` with ``ttl`` seconds, reports ``held`` and keeps renewing
    until the test kills the process (a holder that crashes)."""
    import fencepost

    lease = fencepost.Lock(backend(url, token), name, ttl=ttl).acquire_sync()
    held.set()
    lease.lost.wait(600)
