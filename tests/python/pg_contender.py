"""A process that contends for one PostgreSQL lock (run by test_postgres.py with the
spawn start method, like a separate service).

Each critical section updates the job row through the fenced conditional update with the
lease's token, then inserts ``(start_ns, end_ns, token, pid, mode)`` into the log table.
Times are ``time.monotonic_ns()``: CLOCK_MONOTONIC, one clock for every process on Linux.

Modes: ``lease`` and ``session`` go through :class:`fencepost.postgres.PostgresBackend`
(odd workers use asyncio); ``xact`` runs each section inside one transaction with
:func:`fencepost.postgres.xact_lock`, retrying the transaction when the lock is taken
(xact_lock tries once).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from typing import Any

HOLD_S = 0.001
PAUSE_S = 0.003


def _log(conn: Any, table: str, start: int, end: int, token: int, mode: str) -> None:
    conn.execute(
        f"INSERT INTO {table} (start_ns, end_ns, token, pid, mode) VALUES (%s, %s, %s, %s, %s)",
        (start, end, token, os.getpid(), mode),
        prepare=False,
    )


def run(url: str, mode: str, name: str, job: int, log_table: str, rounds: int, go: Any, use_async: bool) -> None:
    """Takes lock ``name`` ``rounds`` times; raises (non-zero exit) on any failure."""
    import psycopg

    import fencepost
    from fencepost.errors import AcquireTimeout
    from fencepost.postgres import PostgresBackend, fenced_update, fenced_update_sync, xact_lock

    go.wait(30)
    options: dict[str, Any] = dict(ttl=2.0, acquire_timeout=30.0, retry_base=0.002, retry_max=0.02)
    fence = dict(id_column="id", token_column="last_token", row_id=job)

    if mode == "xact":
        with psycopg.connect(url, autocommit=True) as conn:
            done, deadline = 0, time.monotonic() + 30
            while done < rounds:
                assert time.monotonic() < deadline, "xact contender starved for 30 s"
                try:
                    with xact_lock(conn, name) as token:
                        start = time.monotonic_ns()
                        fenced_update_sync(conn, "fp_jobs", token=token, values={"body": f"{os.getpid()}:{done}"}, **fence)
                        time.sleep(HOLD_S)
                        end = time.monotonic_ns()
                        _log(conn, log_table, start, end, token, "xact")
                except AcquireTimeout:
                    time.sleep(random.uniform(0.001, 0.005))
                    continue
                done += 1
                time.sleep(random.uniform(0, PAUSE_S))
        return

    if not use_async:
        with psycopg.connect(url, autocommit=True) as conn:
            backend = (
                PostgresBackend(conn)
                if mode == "lease"
                else PostgresBackend(mode="session", conninfo=url)
            )
            lock = fencepost.Lock(backend, name, purpose="correctness", **options)
            for i in range(rounds):
                with lock as lease:
                    start = time.monotonic_ns()
                    fenced_update_sync(conn, "fp_jobs", token=lease.token, values={"body": f"{os.getpid()}:{i}"}, **fence)
                    time.sleep(HOLD_S)
                    lease.check()
                    end = time.monotonic_ns()
                    _log(conn, log_table, start, end, lease.token, mode)
                time.sleep(random.uniform(0, PAUSE_S))
            backend.close()
        return

    async def main() -> None:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        log = psycopg.connect(url, autocommit=True)
        backend = (
            PostgresBackend(conn)
            if mode == "lease"  # a connection factory (not a conninfo) for session mode here
            else PostgresBackend(mode="session", connect=lambda: psycopg.AsyncConnection.connect(url))
        )
        lock = fencepost.Lock(backend, name, purpose="correctness", **options)
        for i in range(rounds):
            async with lock as lease:
                start = time.monotonic_ns()
                await fenced_update(conn, "fp_jobs", token=lease.token, values={"body": f"{os.getpid()}:{i}"}, **fence)
                await asyncio.sleep(HOLD_S)
                lease.check()
                end = time.monotonic_ns()
                _log(log, log_table, start, end, lease.token, mode + "-async")
            await asyncio.sleep(random.uniform(0, PAUSE_S))
        backend.close()
        await conn.close()
        log.close()

    asyncio.run(main())
