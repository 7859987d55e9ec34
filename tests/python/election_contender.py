"""Processes that campaign in one election (run by test_election.py with the spawn
start method, like separate services), on any correctness backend.

Each term writes a fenced log entry (kube_contender's ``fenced_append``: a file guarded
by ``flock`` that refuses a token below the highest logged), holds for ``HOLD_S`` and
reports ``(start_ns, end_ns, token, pid, events)`` on a queue, where ``events`` are the
callbacks the term saw. Times are ``time.monotonic_ns()`` (one clock for every process
on Linux). Odd workers use asyncio.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, List, Tuple

from kube_contender import fenced_append

HOLD_S = 0.005


def make_backend(kind: str, conn: str, use_async: bool) -> Any:
    """The backend ``kind`` on ``conn`` (a URL, or ZooKeeper hosts; Kubernetes:
    ``url token``), with a client this process owns."""
    if kind == "etcd":
        import httpx

        from fencepost.etcd import EtcdBackend

        client = httpx.AsyncClient(timeout=5.0) if use_async else httpx.Client(timeout=5.0)
        return EtcdBackend(client, [conn])
    if kind == "postgres":
        import psycopg

        from fencepost.postgres import PostgresBackend

        if use_async:
            raise RuntimeError("opened in main() on the running loop")
        return PostgresBackend(psycopg.connect(conn, autocommit=True))
    if kind == "zookeeper":
        from kazoo.client import KazooClient

        from fencepost.zookeeper import ZooKeeperBackend

        return ZooKeeperBackend(KazooClient(hosts=conn, timeout=4.0), root="/elections")
    if kind == "kubernetes":
        import kube_contender

        url, token = conn.split(" ")
        return kube_contender.backend(url, token, use_async)
    raise ValueError(kind)


async def make_async_backend(kind: str, conn: str) -> Any:
    if kind == "postgres":
        import psycopg

        from fencepost.postgres import PostgresBackend

        return PostgresBackend(await psycopg.AsyncConnection.connect(conn, autocommit=True))
    return make_backend(kind, conn, True)


def run(kind: str, conn: str, name: str, log: str, terms: int, go: Any, out: Any, use_async: bool) -> None:
    """Leads election ``name`` ``terms`` times through ``Election.run`` / ``run_sync``,
    writing the fenced log in each term; raises (non-zero exit) on any failure."""
    import fencepost

    ident = f"pid-{os.getpid()}"
    events: List[Tuple[Any, ...]] = []
    options: dict[str, Any] = dict(
        ttl=3, acquire_timeout=90.0, purpose="correctness", retry_max=0.05,
        on_started_leading=lambda l: events.append(("started", l.token)),
        on_stopped_leading=lambda l, r: events.append(("stopped", l.token, r)),
    )

    def section(leadership: Any, i: int) -> int:
        start = time.monotonic_ns()
        if not fenced_append(log, leadership.token, leadership.owner_id, f"{ident}:{i}"):
            raise AssertionError(f"fenced write of a live term refused: {leadership!r}")
        return start

    if not use_async:
        backend = make_backend(kind, conn, False)
        election = fencepost.Election(backend, name, ident, value=str(os.getpid()), **options)
        go.wait(60)
        for i in range(terms):
            def work(leadership: Any) -> Tuple[int, int, int]:
                start = section(leadership, i)
                time.sleep(HOLD_S)
                leadership.check()
                return start, time.monotonic_ns(), leadership.token

            start, end, token = election.run_sync(work)
            out.put((start, end, token, os.getpid(), list(events)))
            events.clear()
        backend.close()
        return

    async def main() -> None:
        backend = await make_async_backend(kind, conn)
        election = fencepost.Election(backend, name, ident, value=str(os.getpid()), **options)
        await asyncio.get_running_loop().run_in_executor(None, go.wait, 60)
        for i in range(terms):
            async def work(leadership: Any) -> Tuple[int, int, int]:
                start = section(leadership, i)
                await asyncio.sleep(HOLD_S)
                leadership.check()
                return start, time.monotonic_ns(), leadership.token

            start, end, token = await election.run(work)
            out.put((start, end, token, os.getpid(), list(events)))
            events.clear()
        await backend.aclose()

    asyncio.run(main())


def lead_then_write(kind: str, conn: str, name: str, log: str, leading: Any, out: Any) -> None:
    """Leads (ttl 2 s) with work that writes the fenced log once, reports ``leading``,
    and keeps working (the test SIGSTOPs this process past its lease). On resume the
    term has ended: the work task was cancelled; a fenced write with the old token is
    tried. Reports ``(work cancelled?, stop reason, write refused?, token)``."""
    import fencepost

    async def main() -> None:
        backend = await make_async_backend(kind, conn)
        stopped: List[str] = []
        election = fencepost.Election(
            backend, name, "old", ttl=2, purpose="correctness",
            on_stopped_leading=lambda l, r: stopped.append(r),
        )
        cancelled = False
        term: List[Any] = []

        async def work(leadership: Any) -> None:
            nonlocal cancelled
            term.append(leadership)
            fenced_append(log, leadership.token, leadership.owner_id, "first")
            leading.set()
            try:
                while True:
                    await asyncio.sleep(0.05)  # stopped in here
            except asyncio.CancelledError:
                cancelled = True
                raise

        try:
            await election.run(work)
        except fencepost.LockLost:
            pass
        leadership = term[0]
        refused = not fenced_append(log, leadership.token, leadership.owner_id, "stale")
        out.put((cancelled, stopped, refused, leadership.token))
        await backend.aclose()

    asyncio.run(main())
