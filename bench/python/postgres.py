"""PostgreSQL rows of scripts/bench, Python side: fencepost's PostgresBackend on psycopg
beside a raw pg_advisory_lock floor.

usage: postgres.py --pg postgresql://…@127.0.0.1:PORT/DB [--cycles N] [--workers W]
                   [--seconds S] [--json FILE] [--md FILE]

  fencepost-pg-lease          fencepost.Lock(PostgresBackend(ConnectionPool(url)), name, ttl=10)
                              .acquire_sync() / lease.release() (lease rows; waiters
                              LISTEN for the release's NOTIFY)
  fencepost-pg-lease-async    the same on AsyncConnectionPool: await .acquire() / lease.release()
  fencepost-pg-session        PostgresBackend(mode="session", conninfo=url): a session
                              advisory lock on a connection each acquisition opens (its
                              connect is in the row), .acquire_sync() / lease.release()
  raw-pg-advisory             SELECT pg_advisory_lock(key) / pg_advisory_unlock(key) on one
                              psycopg connection per worker — the floor: 2 round trips, the
                              server queues the waiters, no token, no lease

The measurement is bench/python/backends.py's (uncontended cycles; 8 spawned workers
holding 1 ms each, checked for mutual exclusion).
"""

from __future__ import annotations

from typing import Any, List

import backends

LEASE_S = 10
CASES = [
    ("fencepost-pg-lease", "fencepost", "lease rows on `psycopg_pool.ConnectionPool`: `acquire_sync` / `release`"),
    ("fencepost-pg-lease-async", "fencepost", "the same on `AsyncConnectionPool`: `await acquire()` / `release()`"),
    ("fencepost-pg-session", "fencepost", "session advisory lock, `mode=\"session\"`, a connection per acquisition (connect included)"),
    ("raw-pg-advisory", "floor", "raw floor: `pg_advisory_lock` / `pg_advisory_unlock` on one psycopg connection"),
]


def make(lib: str, url: str, key: str) -> backends.Case:
    """(acquire, release, close) of `lib` on lock `key`."""
    import psycopg

    import fencepost
    from fencepost.postgres import PostgresBackend, advisory_key

    if lib == "raw-pg-advisory":
        conn = psycopg.connect(url, autocommit=True)
        k = advisory_key("fencepost", key)

        def acquire_raw() -> None:
            conn.execute("SELECT pg_advisory_lock(%s)", (k,))

        def release_raw() -> None:
            row = conn.execute("SELECT pg_advisory_unlock(%s)", (k,)).fetchone()
            if not row or not row[0]:
                raise RuntimeError("raw release: not held")

        return acquire_raw, release_raw, conn.close

    held: List[Any] = []
    if lib == "fencepost-pg-lease-async":
        from psycopg_pool import AsyncConnectionPool

        pool = AsyncConnectionPool(url, min_size=1, max_size=2, open=False, kwargs={"autocommit": True})
        box: List[Any] = []

        async def acquire() -> None:
            if not box:  # the pool and the backend belong to the running loop
                await pool.open()
                box.append(fencepost.Lock(PostgresBackend(pool), key, ttl=LEASE_S))
            held.append(await box[0].acquire())

        async def release() -> None:
            await held.pop().release()

        async def close() -> None:
            await pool.close()

        return acquire, release, close

    if lib == "fencepost-pg-session":
        backend = PostgresBackend(mode="session", conninfo=url + ("&" if "?" in url else "?") + "connect_timeout=5")
        lock = fencepost.Lock(backend, key, ttl=LEASE_S)
        return (lambda: held.append(lock.acquire_sync())), (lambda: held.pop().release()), backend.close

    from psycopg_pool import ConnectionPool

    sync_pool = ConnectionPool(url, min_size=1, max_size=2, kwargs={"autocommit": True})
    backend = PostgresBackend(sync_pool)
    lock = fencepost.Lock(backend, key, ttl=LEASE_S)

    def close_sync() -> None:
        backend.close()
        sync_pool.close()

    return (lambda: held.append(lock.acquire_sync())), (lambda: held.pop().release()), close_sync


def main() -> None:
    ap = backends.arguments(__doc__)
    ap.add_argument("--pg", required=True, help="a PostgreSQL URL on 127.0.0.1")
    args = ap.parse_args()
    if "@127.0.0.1:" not in args.pg and "//127.0.0.1:" not in args.pg:
        ap.error("benchmarks talk to a PostgreSQL on 127.0.0.1 only")
    import psycopg

    from fencepost.postgres import PostgresBackend

    with psycopg.connect(args.pg, autocommit=True) as conn:
        PostgresBackend(conn).migrate_sync()
    rows = backends.measure(make, CASES, args.pg, args.cycles, args.workers, args.seconds)
    versions = []
    from importlib.metadata import version

    for d in ["fencepost", "psycopg", "psycopg-pool"]:
        try:
            versions.append(f"{d} {version(d)}")
        except Exception:
            pass
    intro = (
        "One PostgreSQL 15 on 127.0.0.1 (scripts/services/postgres.sh, with `fsync=off` and `synchronous_commit=off` "
        "like the test servers: on a real disk every committed write costs more; the advisory floor writes nothing), "
        "fencepost's Python `PostgresBackend` on psycopg 3 "
        f"(bench/python/postgres.py): {args.cycles} uncontended cycles after 20 warm-up; {args.workers} spawned processes "
        f"on one lock for {args.seconds:g} s, each holding 1 ms per grant, checked for mutual exclusion by a shared "
        "occupancy counter and by the grants' client-side intervals. The raw floor is a bare session advisory lock "
        f"(the server queues its waiters): no token, no lease. Versions: {', '.join(versions)}."
    )
    backends.write(args.json, args.md, "postgres", "python", "PostgreSQL from Python", intro, rows, [], args.workers)


if __name__ == "__main__":
    main()
