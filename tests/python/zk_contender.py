"""A process that contends for one ZooKeeper lock (run by test_zookeeper.py with the
spawn start method, like a separate service).

``kind="fencepost"``: each critical section writes a fenced log node (a persistent
sequential node under ``log_path`` holding the token, created only while the lease's
own node exists); odd workers use asyncio. ``kind="kazoo"``: kazoo's own ``Lock`` on the
same path. Each reports ``(start_ns, end_ns, token, pid)`` on a queue (token 0 for
kazoo). Times are ``time.monotonic_ns()``: CLOCK_MONOTONIC, one clock for every process
on Linux.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

HOLD_S = 0.002


def run(hosts: str, kind: str, name: str, log_path: str, rounds: int, go: Any, out: Any, use_async: bool) -> None:
    """Takes lock ``name`` (under root ``/locks``) ``rounds`` times; raises (non-zero
    exit) on any failure."""
    from kazoo.client import KazooClient

    if kind == "kazoo":
        zk = KazooClient(hosts=hosts, timeout=4.0)
        zk.start(timeout=15)
        lock = zk.Lock(f"/locks/{name}")
        go.wait(60)
        for _ in range(rounds):
            with lock:
                start = time.monotonic_ns()
                time.sleep(HOLD_S)
                end = time.monotonic_ns()
            out.put((start, end, 0, os.getpid()))
        zk.stop()
        zk.close()
        return

    import fencepost
    from fencepost.zookeeper import ZooKeeperBackend

    backend = ZooKeeperBackend(KazooClient(hosts=hosts, timeout=4.0), root="/locks")
    options: dict[str, Any] = dict(ttl=backend.session_timeout, acquire_timeout=60.0, purpose="correctness")
    lock = fencepost.Lock(backend, name, **options)

    def write(lease: Any) -> Any:
        return lambda txn: txn.create(f"{log_path}/e-", str(lease.token).encode(), sequence=True)

    if not use_async:
        go.wait(60)
        for _ in range(rounds):
            with lock as lease:
                start = time.monotonic_ns()
                backend.fenced_commit_sync(lease, write(lease))
                time.sleep(HOLD_S)
                lease.check()
                end = time.monotonic_ns()
            out.put((start, end, lease.token, os.getpid()))
        backend.close()
        backend.client.stop()
        return

    async def main() -> None:
        await asyncio.get_running_loop().run_in_executor(None, go.wait, 60)
        for _ in range(rounds):
            async with lock as lease:
                start = time.monotonic_ns()
                await backend.fenced_commit(lease, write(lease))
                await asyncio.sleep(HOLD_S)
                lease.check()
                end = time.monotonic_ns()
            out.put((start, end, lease.token, os.getpid()))
        await backend.aclose()
        backend.client.stop()

    asyncio.run(main())


def hold_then_write(hosts: str, name: str, log_path: str, held: Any, out: Any) -> None:
    """Takes the lock, reports ``held``, sleeps (the test SIGSTOPs this process past its
    session timeout), then tries a fenced write; reports what happened on ``out``:
    ``("lost", fenced write refused?)`` or ``("kept", token)``."""
    from kazoo.client import KazooClient

    import fencepost
    from fencepost.zookeeper import ZooKeeperBackend

    backend = ZooKeeperBackend(KazooClient(hosts=hosts, timeout=2.0), root="/locks")
    lock = fencepost.Lock(backend, name, ttl=backend.session_timeout, purpose="correctness")
    lease = lock.acquire_sync()
    held.set()
    time.sleep(1.0)  # stopped in here
    refused = False
    try:
        backend.fenced_commit_sync(lease, lambda t: t.create(f"{log_path}/stale-", b"x", sequence=True))
    except fencepost.StaleToken:
        refused = True
    except fencepost.BackendError as exc:
        out.put(("error", repr(exc)))
        return
    out.put(("lost" if lease.lost.wait(10) else "kept", refused))
