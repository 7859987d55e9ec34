"""Integration tests against a real PostgreSQL 15 at $FENCEPOST_PG_URL and a PgBouncer in
``pool_mode = transaction`` in front of it at $FENCEPOST_PGBOUNCER_URL (``scripts/test``
starts both on 127.0.0.1 with scripts/services/postgres.sh and pgbouncer.sh). Every test
uses lock names of its own; the tables are fencepost's (created by the migration) plus
``fp_jobs`` (the protected resource) and one log table per contention run."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import subprocess
import threading
import time
import uuid
import warnings
from pathlib import Path
from typing import Any, Iterator, List, Optional, Tuple

import pytest

import fencepost
from fencepost import _core
from fencepost.errors import (
    AcquireTimeout,
    ConfigError,
    DuplicateGrantWarning,
    LockLost,
    ProtocolError,
    StaleToken,
)
from fencepost.postgres import (
    PostgresBackend,
    advisory_key,
    fenced_update,
    fenced_update_sync,
    to_pyformat,
    xact_lock,
)

import pg_contender
from conftest import wait_until

PG_URL = os.environ.get("FENCEPOST_PG_URL")
BOUNCER_URL = os.environ.get("FENCEPOST_PGBOUNCER_URL")
REPO = Path(__file__).resolve().parents[2]
needs_pg = pytest.mark.skipif(
    not PG_URL,
    reason="FENCEPOST_PG_URL is not set (scripts/test starts PostgreSQL and sets it; or run "
    "scripts/services/postgres.sh start and export FENCEPOST_PG_URL=$(cat .state/postgres/url))",
)
needs_bouncer = pytest.mark.skipif(not BOUNCER_URL, reason="FENCEPOST_PGBOUNCER_URL is not set")

psycopg = pytest.importorskip("psycopg")
psycopg_pool = pytest.importorskip("psycopg_pool")


def single_session_url() -> str:
    """The PgBouncer database served by one server connection (pgbouncer.sh)."""
    assert BOUNCER_URL
    return BOUNCER_URL.rsplit("/", 1)[0] + "/locks_single"


@pytest.fixture(scope="module")
def migrated() -> Iterator[None]:
    assert PG_URL
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        PostgresBackend(conn).migrate_sync()
        conn.execute(
            "CREATE TABLE IF NOT EXISTS fp_jobs (id bigint PRIMARY KEY, body text, "
            "last_token bigint NOT NULL DEFAULT 0)"
        )
    yield


@pytest.fixture
def name() -> str:
    return f"fp-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def job(migrated: None) -> int:
    """A fresh row of fp_jobs (token 0)."""
    assert PG_URL
    job_id = uuid.uuid4().int % 2**62
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute("INSERT INTO fp_jobs (id, body) VALUES (%s, 'new')", (job_id,))
    return job_id


def sql(query: str, *params: Any, url: Optional[str] = None) -> List[Tuple[Any, ...]]:
    with psycopg.connect(url or PG_URL, autocommit=True) as conn:
        cur = conn.execute(query, params or None, prepare=False)
        return list(cur.fetchall()) if cur.description else []


def advisory_holders(key: int) -> List[int]:
    """Backend pids holding the session/xact advisory lock ``key``."""
    return [
        r[0]
        for r in sql(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
            "AND ((classid::bigint << 32) | objid::bigint) = %s",
            key,
        )
    ]


# ---- no server ---------------------------------------------------------------------------


def test_dollar_placeholders_become_named_pyformat_parameters() -> None:
    query, params = to_pyformat("SELECT $1::text, $2, $1 WHERE x = '$3 100%' AND y LIKE 'a%'", ["a", 7])
    assert query == "SELECT %(p1)s::text, %(p2)s, %(p1)s WHERE x = '$3 100%%' AND y LIKE 'a%%'"
    assert params == {"p1": "a", "p2": 7}
    assert to_pyformat("SELECT $10, $1", list(range(10)))[0] == "SELECT %(p10)s, %(p1)s"
    assert to_pyformat('SELECT "a$1", $$x$$', [])[0] == 'SELECT "a$1", $$x$$'
    with pytest.raises(ConfigError, match=r"\$3 but has 2"):
        to_pyformat("SELECT $3", [1, 2])


def test_the_core_statements_convert_cleanly() -> None:
    for spec in ({"kind": "postgres"}, {"kind": "postgres", "mode": "session"}):
        m = _core.Machine(spec, seed=1)  # type: ignore[arg-type]
        m.acquire(
            0,
            "n",
            {
                "ttl": 10**9,
                "purpose": "efficiency",
                "accept_failover_risk": False,
                "acquire_timeout": None,
                "retry_base": 10**7,
                "retry_max": 5 * 10**8,
                "renew_every": None,
                "auto_renew": True,
                "drift_factor": 0.01,
                "clock_margin": 2 * 10**6,
            },
        )
        (req,) = [o for o in m.poll()[0] if isinstance(o, _core.Request)]
        body = req.body
        assert isinstance(body, _core.SqlStatement)
        query, params = to_pyformat(body.sql, body.params)
        assert "$" not in query.replace("$$", "") and len(params) == len(body.params)


def test_configuration_errors() -> None:
    with pytest.raises(ConfigError, match="lease mode needs conn_or_pool"):
        PostgresBackend()
    with pytest.raises(ConfigError, match="conn_or_pool must be a psycopg 3"):
        PostgresBackend(object())
    with pytest.raises(ConfigError, match="'lease' or 'session'"):
        PostgresBackend(mode="advisory")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="invalid table name"):
        PostgresBackend(mode="session", conninfo="", lease_table="x; DROP TABLE y")
    pool = psycopg_pool.ConnectionPool("", open=False)
    with pytest.raises(ConfigError, match="session mode needs a dedicated connection per lock.*got a pool"):
        PostgresBackend(pool, mode="session")
    with pytest.raises(ConfigError, match="conninfo or connect, not both"):
        PostgresBackend(mode="session", conninfo="", connect=lambda: None)
    backend = PostgresBackend(mode="session", conninfo="")
    assert backend.supports_sync and backend.supports_async
    assert backend.advisory_key("report") == advisory_key("fencepost", "report") == -2364901989615549545
    assert PostgresBackend(mode="session", conninfo="", namespace="app").advisory_key("report") == -6065654635645092017
    # PostgreSQL tokens are durable: correctness locks need no opt-in (Redis's do)
    fencepost.Lock(backend, "money", purpose="correctness")


# ---- contention: 8 processes per mode ------------------------------------------------------


def contend(url: str, mode: str, name: str, job: int, processes: int = 8, rounds: int = 6) -> List[Tuple[Any, ...]]:
    log_table = f"fp_log_{uuid.uuid4().hex[:10]}"
    sql(f"CREATE TABLE {log_table} (start_ns bigint, end_ns bigint, token bigint, pid int, mode text)")
    ctx = multiprocessing.get_context("spawn")
    go = ctx.Barrier(processes + 1)
    modes = mode.split("+")
    workers = [
        ctx.Process(
            target=pg_contender.run,
            args=(url, modes[i % len(modes)], name, job, log_table, rounds, go, i // len(modes) % 2 == 1),
            name=f"{modes[i % len(modes)]}-{i}",
        )
        for i in range(processes)
    ]
    for w in workers:
        w.start()
    go.wait(30)
    deadline = time.monotonic() + 60
    for w in workers:
        w.join(timeout=max(1.0, deadline - time.monotonic()))
    stuck = [w.name for w in workers if w.is_alive()]
    for w in workers:
        if w.is_alive():
            w.kill()
            w.join(5)
    assert not stuck, f"contenders still running after 60 s: {stuck}"
    assert [w.exitcode for w in workers] == [0] * processes
    records = sql(f"SELECT start_ns, end_ns, token, pid, mode FROM {log_table} ORDER BY start_ns")
    sql(f"DROP TABLE {log_table}")
    assert len(records) == processes * rounds
    assert len({r[3] for r in records}) == processes
    for before, after in zip(records, records[1:]):
        assert before[1] < after[0], f"critical sections overlap: {before} and {after}"
        assert before[2] < after[2], f"tokens do not increase in order of start: {before}, {after}"
    # every fenced write was accepted: the row carries the last token and its write
    (last_token, body) = sql("SELECT last_token, body FROM fp_jobs WHERE id = %s", job)[0]
    assert last_token == records[-1][2]
    assert body.startswith(f"{records[-1][3]}:")
    return records


@needs_pg
@pytest.mark.parametrize(
    "mode,via",
    [
        ("lease", "postgres"),
        ("session", "postgres"),
        ("xact", "postgres"),
        ("lease+session+xact", "postgres"),
        ("lease", "pgbouncer"),
        ("xact", "pgbouncer"),
        ("lease+xact", "pgbouncer"),
    ],
)
def test_eight_processes_never_overlap_and_tokens_increase(mode: str, via: str, name: str, job: int) -> None:
    """8 spawned processes × 6 sections on one lock, half asyncio (lease, session): no
    overlap on CLOCK_MONOTONIC, tokens strictly increase, every fenced write accepted.
    ``a+b``: the workers take turns in those modes, on the same name. Lease rows and
    xact locks are also correct through PgBouncer in transaction mode."""
    if via == "pgbouncer" and not BOUNCER_URL:
        pytest.skip("FENCEPOST_PGBOUNCER_URL is not set")
    url = BOUNCER_URL if via == "pgbouncer" else PG_URL
    assert url
    contend(url, mode, name, job)


# ---- the seed's example: a stale holder's write is refused ------------------------------------


@needs_pg
def test_stale_holder_update_affects_zero_rows_and_raises_stale_token(name: str, job: int) -> None:
    assert PG_URL
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        backend = PostgresBackend(conn)
        a = fencepost.Lock(backend, name, ttl=0.3, auto_renew=False, purpose="correctness")
        a_lease = a.acquire_sync()
        fenced_update_sync(conn, "fp_jobs", id_column="id", token_column="last_token", row_id=job,
                           token=a_lease.token, values={"body": "A: draft"})
        time.sleep(0.35)  # A is paused past its lease (no renewals): the server expires it
        b = fencepost.Lock(PostgresBackend(conn), name, ttl=5.0, acquire_timeout=0)
        with b as b_lease:
            assert b_lease.token == a_lease.token + 1
            fenced_update_sync(conn, "fp_jobs", id_column="id", token_column="last_token", row_id=job,
                               token=b_lease.token, values={"body": "B: final"})
        with pytest.raises(StaleToken) as info:  # A wakes up and writes with its old token
            fenced_update_sync(conn, "fp_jobs", id_column="id", token_column="last_token", row_id=job,
                               token=a_lease.token, values={"body": "A: stale"})
        assert (info.value.token, info.value.highest) == (a_lease.token, b_lease.token)
        assert info.value.resource == f"fp_jobs:{job}"
        assert sql("SELECT body, last_token FROM fp_jobs WHERE id = %s", job) == [("B: final", b_lease.token)]
        with pytest.raises(LockLost):
            a.release_sync()
        with pytest.raises(LookupError):
            fenced_update_sync(conn, "fp_jobs", id_column="id", token_column="last_token", row_id=-1,
                               token=99, values={"body": "x"})


@needs_pg
async def test_async_fenced_update(job: int) -> None:
    assert PG_URL
    conn = await psycopg.AsyncConnection.connect(PG_URL, autocommit=True)
    try:
        await fenced_update(conn, "fp_jobs", id_column="id", token_column="last_token", row_id=job, token=5, values={"body": "five"})
        await fenced_update(conn, "fp_jobs", id_column="id", token_column="last_token", row_id=job, token=5, values={"body": "again"})
        with pytest.raises(StaleToken):
            await fenced_update(conn, "fp_jobs", id_column="id", token_column="last_token", row_id=job, token=4, values={"body": "four"})
        assert sql("SELECT body FROM fp_jobs WHERE id = %s", job) == [("again",)]
    finally:
        await conn.close()


# ---- modes, one process -------------------------------------------------------------------------


@needs_pg
def test_lease_rows_renew_on_the_server_clock_and_release(name: str, migrated: None) -> None:
    assert PG_URL
    with psycopg_pool.ConnectionPool(PG_URL, min_size=1, max_size=4, kwargs={"autocommit": True}) as pool:
        backend = PostgresBackend(pool)
        with fencepost.Lock(backend, name, ttl=0.3, purpose="correctness") as lease:
            time.sleep(0.5)  # longer than the ttl: renewals keep it
            lease.check()
            ((owner, token, remaining_ms),) = sql(
                "SELECT owner, token, extract(epoch FROM expires_at - clock_timestamp()) * 1000 "
                "FROM fencepost_leases WHERE name = %s", name)
            assert (owner, token) == (lease.owner_id, lease.token) and 0 < remaining_ms <= 300
            with pytest.raises(AcquireTimeout):
                fencepost.Lock(PostgresBackend(pool), name, ttl=1.0, acquire_timeout=0).acquire_sync()
        assert sql("SELECT owner FROM fencepost_leases WHERE name = %s", name) == [(None,)]


@needs_pg
async def test_session_lock_holds_the_advisory_key_on_its_own_connection(name: str, migrated: None) -> None:
    assert PG_URL
    backend = PostgresBackend(mode="session", conninfo=PG_URL + "?application_name=fp-session")
    key = backend.advisory_key(name)
    async with fencepost.Lock(backend, name, ttl=0.3) as lease:
        holders = advisory_holders(key)
        assert len(holders) == 1
        await asyncio.sleep(0.5)  # heartbeats every 0.1 s on that connection
        lease.check()
        assert advisory_holders(key) == holders
        # the token is counted on the name's lease row, which no lease holds
        assert sql("SELECT token, owner FROM fencepost_leases WHERE name = %s", name) == [(lease.token, None)]
        with pytest.raises(AcquireTimeout):
            await fencepost.Lock(PostgresBackend(mode="session", conninfo=PG_URL), name, ttl=1.0, acquire_timeout=0).acquire()
    assert advisory_holders(key) == []
    # the dedicated connection is closed after the lock's final event (on the event
    # loop: poll without blocking it)
    for _ in range(200):
        if sql("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'fp-session'") == [(0,)]:
            break
        await asyncio.sleep(0.01)
    assert sql("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'fp-session'") == [(0,)]


@needs_pg
def test_xact_lock_tries_once_and_commits_the_token_with_the_work(name: str, job: int) -> None:
    assert PG_URL
    with psycopg.connect(PG_URL, autocommit=True) as a, psycopg.connect(PG_URL, autocommit=True) as b:
        with xact_lock(a, name) as token:
            assert advisory_holders(advisory_key("fencepost", name)) == [a.info.backend_pid]
            with pytest.raises(AcquireTimeout, match="tries exactly once"):
                with xact_lock(b, name):
                    pass
            fenced_update_sync(a, "fp_jobs", id_column="id", token_column="last_token", row_id=job,
                               token=token, values={"body": "in the lock's transaction"})
        assert advisory_holders(advisory_key("fencepost", name)) == []  # ended with the commit
        with pytest.raises(RuntimeError):
            with xact_lock(b, name) as rolled_back:
                raise RuntimeError("the work failed")
        assert rolled_back == token + 1
        with xact_lock(b, name) as again:  # the rolled-back token is handed out again
            assert again == token + 1
        with pytest.raises(ConfigError, match="async with"):
            with xact_lock(object(), name):
                pass
    # a session lock and an xact lock of the same name exclude each other
    backend = PostgresBackend(mode="session", conninfo=PG_URL)
    with fencepost.Lock(backend, name, ttl=5.0):
        with psycopg.connect(PG_URL, autocommit=True) as c:
            with pytest.raises(AcquireTimeout):
                with xact_lock(c, name):
                    pass


@needs_pg
def test_missing_tables_are_a_protocol_error_naming_the_migration(name: str) -> None:
    assert PG_URL
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        backend = PostgresBackend(conn, lease_table="fp_no_such_table")
        with pytest.raises(ProtocolError, match="migration") as missing:
            fencepost.Lock(backend, name, ttl=1.0, acquire_timeout=1.0).acquire_sync()
        # the message says what to call in Python, and names no Rust function
        assert "backend.migrate_sync()" in str(missing.value) and "::" not in str(missing.value)
    # (a connection of its own: the backend's cleanup release may still be running on
    # `conn`, and a statement of the backend's would land inside this transaction)
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        with pytest.raises(ProtocolError, match="migration"):
            with xact_lock(conn, name, token_table="fp_no_such_tokens"):
                pass


@needs_pg
def test_migrate_on_blocking_clients_raises_at_once_naming_migrate_sync(name: str) -> None:
    assert PG_URL
    table = f"fp_m_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        backend = PostgresBackend(conn, lease_table=table, token_table=table + "_t")
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no "coroutine was never awaited"
            with pytest.raises(ConfigError, match=r"migrate_sync\(\)"):
                backend.migrate()
        assert sql("SELECT to_regclass(%s) IS NULL", table) == [(True,)]
        backend.migrate_sync()
        with fencepost.Lock(backend, name, ttl=1.0, acquire_timeout=1.0) as lease:
            assert sql(f"SELECT owner FROM {table} WHERE name = %s", name) == [(lease.owner_id,)]
        backend.close()
        sql(f"DROP TABLE {table}, {table}_t")


@needs_pg
async def test_migrate_sync_on_asyncio_clients_names_migrate(name: str) -> None:
    assert PG_URL
    table = f"fp_m_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
        backend = PostgresBackend(conn, lease_table=table, token_table=table + "_t")
        with pytest.raises(ConfigError, match=r"await backend\.migrate\(\)"):
            backend.migrate_sync()
        await backend.migrate()
        async with fencepost.Lock(backend, name, ttl=1.0, acquire_timeout=1.0) as lease:
            assert lease.token == 1
        backend.close()
    sql(f"DROP TABLE {table}, {table}_t")


# ---- the holder's backend is terminated -------------------------------------------------------------


@needs_pg
def test_session_lock_is_lost_when_its_backend_is_terminated(name: str, migrated: None) -> None:
    assert PG_URL
    backend = PostgresBackend(mode="session", conninfo=PG_URL)
    lock = fencepost.Lock(backend, name, ttl=0.6)  # heartbeat every 0.2 s
    lease = lock.acquire_sync()
    (pid,) = advisory_holders(backend.advisory_key(name))
    assert sql("SELECT pg_terminate_backend(%s)", pid) == [(True,)]
    killed = time.monotonic()
    # the server frees the lock at once: another session gets it before the heartbeat
    # of the first notices (the documented window)
    other = fencepost.Lock(PostgresBackend(mode="session", conninfo=PG_URL), name, ttl=5.0, acquire_timeout=1.0)
    other_lease = other.acquire_sync()
    assert other_lease.token == lease.token + 1
    assert lease.lost.wait(0.6 + 0.2), "the terminated session's lease was not reported lost"
    assert time.monotonic() - killed < 0.6 + 0.1
    assert lease.lost_reason in ("renew_rejected", "expired")
    with pytest.raises(LockLost):
        lock.release_sync()
    other.release_sync()


@needs_pg
def test_lease_survives_a_terminated_connection_when_renewals_get_a_new_one(name: str, migrated: None) -> None:
    assert PG_URL
    app = f"fp-{uuid.uuid4().hex[:8]}"
    with psycopg_pool.ConnectionPool(
        PG_URL, min_size=2, max_size=4, kwargs={"autocommit": True, "application_name": app}
    ) as pool:
        pool.wait()
        backend = PostgresBackend(pool)
        with fencepost.Lock(backend, name, ttl=0.6, purpose="correctness") as lease:
            killed = sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", app)
            assert killed and all(k == (True,) for k in killed)
            time.sleep(1.0)  # longer than the ttl: renewals ran on new connections
            lease.check()
            assert sql("SELECT owner FROM fencepost_leases WHERE name = %s", name) == [(lease.owner_id,)]


@needs_pg
def test_lease_on_a_terminated_single_connection_survives_on_a_new_connection(
    name: str, migrated: None, caplog: pytest.LogCaptureFixture
) -> None:
    """One psycopg.connect(...) connection, terminated by the server under a held lease:
    the backend connects again with its parameters, renewals go on, the lease lives
    past its ttl, and the release frees the row."""
    assert PG_URL
    conn = psycopg.connect(PG_URL, autocommit=True)
    backend = PostgresBackend(conn)
    lock = fencepost.Lock(backend, name, ttl=0.6, purpose="correctness")  # renew every 0.2 s
    lease = lock.acquire_sync()
    assert sql("SELECT pg_terminate_backend(%s)", conn.info.backend_pid) == [(True,)]
    time.sleep(1.2)  # two ttls: only renewals on a new connection keep it
    lease.check()
    assert sql("SELECT owner FROM fencepost_leases WHERE name = %s", name) == [(lease.owner_id,)]
    assert "connected again" in caplog.text
    lock.release_sync()
    assert sql("SELECT owner FROM fencepost_leases WHERE name = %s", name) == [(None,)]
    backend.close()
    conn.close()


@needs_pg
def test_release_right_after_the_connection_is_terminated_frees_the_row_and_warns(
    name: str, migrated: None, caplog: pytest.LogCaptureFixture
) -> None:
    """The body ends before any renewal noticed the dropped connection: the first release
    attempt fails (a warning says so), the retry runs on a new connection and frees the
    row at once, not at its TTL."""
    assert PG_URL
    conn = psycopg.connect(PG_URL, autocommit=True)
    backend = PostgresBackend(conn)
    lock = fencepost.Lock(backend, name, ttl=30.0)
    lock.acquire_sync()
    assert sql("SELECT pg_terminate_backend(%s)", conn.info.backend_pid) == [(True,)]
    started = time.monotonic()
    lock.release_sync()
    assert time.monotonic() - started < 5.0
    assert sql("SELECT owner FROM fencepost_leases WHERE name = %s", name) == [(None,)]
    warned = [r.getMessage() for r in caplog.records if r.name == "fencepost"]
    # the logger's name already says fencepost: the message does not repeat it
    assert any(m.startswith(f"releasing PostgreSQL lock {name!r} failed") for m in warned), warned
    backend.close()
    conn.close()


@needs_pg
async def test_async_lease_on_a_terminated_single_connection_survives_and_releases(
    name: str, migrated: None
) -> None:
    assert PG_URL
    conn = await psycopg.AsyncConnection.connect(PG_URL, autocommit=True)
    backend = PostgresBackend(conn)
    async with fencepost.Lock(backend, name, ttl=0.6) as lease:
        assert sql("SELECT pg_terminate_backend(%s)", conn.info.backend_pid) == [(True,)]
        await asyncio.sleep(1.2)
        lease.check()
    assert sql("SELECT owner FROM fencepost_leases WHERE name = %s", name) == [(None,)]
    backend.close()
    await conn.close()


# ---- PostgreSQL restarted under a held lease --------------------------------------------------------


def pg_service(action: str) -> None:
    subprocess.run([str(REPO / "scripts" / "services" / "postgres.sh"), action], check=True,
                   capture_output=True, timeout=60)


@needs_pg
def test_restart_while_a_lease_is_held(name: str, migrated: None) -> None:
    """PostgreSQL stopped under a held lease: the holder reports Lost no later than its
    validity deadline (the last confirmed renewal's send + ttl·(1 − drift) − margin);
    after the restart (same data dir) tokens go on from where they were. A restart
    shorter than the validity is ridden out by renewals on new connections."""
    state = os.environ.get("FENCEPOST_STATE")
    if not state or not (Path(state) / "postgres" / "data").is_dir():
        pytest.skip("needs the PostgreSQL of scripts/services/postgres.sh (FENCEPOST_STATE)")
    assert PG_URL
    check = psycopg_pool.ConnectionPool.check_connection
    with psycopg_pool.ConnectionPool(PG_URL, min_size=1, max_size=4, kwargs={"autocommit": True}, check=check) as pool:
        backend = PostgresBackend(pool)
        lock = fencepost.Lock(backend, name, ttl=0.8, purpose="correctness", retry_max=0.05)
        lease = lock.acquire_sync()
        try:
            pg_service("stop")
            deadline = lease.valid_until_ns  # moves with each confirmed renewal, never after
            assert lease.lost.wait(2.0), "no Lost while the server was down"
            lost_at = time.monotonic_ns()
            deadline = max(deadline, lease.valid_until_ns)
            assert lease.lost_reason == "expired"
            assert lost_at <= deadline + 50_000_000, f"lost {(lost_at - deadline) / 1e6:.0f} ms after the deadline"
        finally:
            pg_service("start")
        with pytest.raises(LockLost):
            lock.release_sync()
        # durable tokens: the next grant is higher, even across the restart
        with fencepost.Lock(backend, name, ttl=2.0, acquire_timeout=5.0) as after:
            assert after.token > lease.token
            # a restart shorter than the validity: renewals resume on new connections
            pg_service("stop")
            pg_service("start")
            time.sleep(1.0)
            after.check()


# ---- PgBouncer in transaction mode ----------------------------------------------------------------------


@needs_bouncer
def test_session_locks_through_transaction_pooling_are_refused_not_shared(name: str, migrated: None) -> None:
    """Through PgBouncer (pool_mode = transaction, one server connection) every client's
    statements run on the same server session, where a session advisory lock "succeeds"
    again for anyone. The session records its lock's owner, so a second and third client
    are refused with a ProtocolError naming lease rows and xact_lock, instead of holding
    the lock at once with the same token; the first holder is untouched, and another
    client's cleanup cannot unlock it. Lease rows and xact locks stay exclusive there
    (and in the 8-process test)."""
    url = single_session_url()
    a = fencepost.Lock(PostgresBackend(mode="session", conninfo=url), name, ttl=5.0, acquire_timeout=0)
    a_lease = a.acquire_sync()
    key = advisory_key("fencepost", name)
    (holder,) = advisory_holders(key)
    for _ in range(2):
        other = fencepost.Lock(PostgresBackend(mode="session", conninfo=url), name, ttl=5.0, acquire_timeout=1.0)
        with pytest.raises(ProtocolError, match="transaction-pooling") as refused:
            other.acquire_sync()
        assert "lease rows" in str(refused.value) and "xact_lock" in str(refused.value)
    # the same server session holds it, for A only; a transaction lock landing on that
    # session is refused too, and a lease waits for it
    with psycopg.connect(url, autocommit=True) as c:
        with pytest.raises(ProtocolError, match="transaction-pooling"):
            with xact_lock(c, name):
                pass
        with pytest.raises(AcquireTimeout):
            fencepost.Lock(PostgresBackend(c), name, ttl=5.0, acquire_timeout=0).acquire_sync()
    assert advisory_holders(key) == [holder]
    a_lease.check()
    a.release_sync()
    assert advisory_holders(key) == []
    # the same two clients with lease rows, and with xact locks: exclusive
    with psycopg.connect(url, autocommit=True) as c1, psycopg.connect(url, autocommit=True) as c2:
        with fencepost.Lock(PostgresBackend(c1), name, ttl=5.0, acquire_timeout=0):
            with pytest.raises(AcquireTimeout):
                fencepost.Lock(PostgresBackend(c2), name, ttl=5.0, acquire_timeout=0).acquire_sync()
    with psycopg.connect(BOUNCER_URL or "", autocommit=True) as c1, psycopg.connect(BOUNCER_URL or "", autocommit=True) as c2:
        with xact_lock(c1, name):
            with pytest.raises(AcquireTimeout):
                with xact_lock(c2, name):
                    pass


@needs_bouncer
def test_a_duplicate_grant_behind_a_pooler_writes_once_through_an_owner_bound_fence(name: str, migrated: None) -> None:
    """The hazard fencepost's session mode refuses, produced on purpose: a plain session
    advisory lock (``pg_try_advisory_lock``, as a lock without a per-session owner record
    takes it) through PgBouncer in transaction mode "succeeds" for three clients on one
    server session, and all three read the same token. The token-only fenced update lets
    all three write; the owner-bound one lets the first owner write and refuses the other
    two as a duplicate grant, with a DuplicateGrantWarning."""
    url = single_session_url()
    key = advisory_key("fencepost", name)
    owners = [uuid.uuid4().hex for _ in range(3)]
    sql(
        "CREATE TABLE IF NOT EXISTS fp_owned_jobs (id bigint PRIMARY KEY, body text, "
        "last_token bigint NOT NULL DEFAULT 0, last_owner text NOT NULL DEFAULT '')"
    )
    token_only_row, owner_bound_row = (uuid.uuid4().int % 2**62 for _ in range(2))
    sql("INSERT INTO fp_owned_jobs (id, body) VALUES (%s, 'new'), (%s, 'new')", token_only_row, owner_bound_row)
    sql("INSERT INTO fencepost_tokens (name, token) VALUES (%s, 7)", name)
    holders = [psycopg.connect(url, autocommit=True) for _ in owners]
    try:
        tokens = []
        for conn in holders:
            # transaction pooling: every client's statement lands on the one server session
            assert conn.execute("SELECT pg_try_advisory_lock(%s)", (key,), prepare=False).fetchone() == (True,)
            row = conn.execute("SELECT token FROM fencepost_tokens WHERE name = %s", (name,), prepare=False).fetchone()
            tokens.append(row[0] if row else None)
        assert tokens == [7, 7, 7]
        for conn, owner in zip(holders, owners):
            fenced_update_sync(conn, "fp_owned_jobs", id_column="id", token_column="last_token",
                               row_id=token_only_row, token=7, values={"body": owner})
        assert sql("SELECT body FROM fp_owned_jobs WHERE id = %s", token_only_row) == [(owners[2],)]
        refused = []
        for conn, owner in zip(holders, owners):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    fenced_update_sync(conn, "fp_owned_jobs", id_column="id", token_column="last_token",
                                       owner_column="last_owner", owner_id=owner,
                                       row_id=owner_bound_row, token=7, values={"body": owner})
                except StaleToken as e:
                    assert (e.token, e.highest) == (7, 7)
                    assert any(issubclass(w.category, DuplicateGrantWarning) for w in caught), caught
                    refused.append(e.reason)
        assert refused == ["duplicate_grant", "duplicate_grant"]
        assert sql("SELECT body, last_owner FROM fp_owned_jobs WHERE id = %s", owner_bound_row) == [(owners[0], owners[0])]
    finally:
        holders[0].execute("SELECT pg_advisory_unlock_all()", prepare=False)
        for conn in holders:
            conn.close()
    assert advisory_holders(key) == []


@needs_pg
def test_xact_lock_with_a_timeout_waits_on_the_server_for_the_holder(name: str, migrated: None) -> None:
    assert PG_URL
    with psycopg.connect(PG_URL, autocommit=True) as a, psycopg.connect(PG_URL, autocommit=True) as b:
        default = b.execute("SHOW lock_timeout").fetchone()
        held = threading.Event()

        def hold(seconds: float) -> None:
            with xact_lock(a, name) as token:
                tokens.append(token)
                held.set()
                time.sleep(seconds)

        # granted once the holder commits, with the next token; the block runs under the
        # caller's own lock_timeout again
        tokens: List[int] = []
        holder = threading.Thread(target=hold, args=(0.5,))
        holder.start()
        assert held.wait(5)
        started = time.monotonic()
        with xact_lock(b, name, timeout=5.0) as token:
            waited = time.monotonic() - started
            assert b.execute("SHOW lock_timeout").fetchone() == default
        holder.join()
        assert token == tokens[0] + 1 and 0.3 < waited < 4.0, (token, tokens, waited)
        # held for longer than the timeout: AcquireTimeout after the timeout, not before
        held.clear()
        holder = threading.Thread(target=hold, args=(2.0,))
        holder.start()
        assert held.wait(5)
        started = time.monotonic()
        with pytest.raises(AcquireTimeout, match="within the timeout") as info:
            with xact_lock(b, name, timeout=0.3):
                pass
        waited = time.monotonic() - started
        holder.join()
        assert 0.25 < waited < 1.8 and "lock timeout" in str(info.value.last_error), (waited, info.value)
        assert b.execute("SHOW lock_timeout").fetchone() == default  # rolled back with the wait
        # timeout=0 tries once; a live lease row is not waited for
        with fencepost.Lock(PostgresBackend(a), name, ttl=5.0) as lease:
            started = time.monotonic()
            with pytest.raises(AcquireTimeout, match="lease row"):
                with xact_lock(b, name, timeout=5.0):
                    pass
            assert time.monotonic() - started < 1.0
            assert lease.token == tokens[-1] + 1
        for bad in (-1.0, float("nan"), "1"):
            with pytest.raises(ConfigError, match="timeout"):
                xact_lock(b, name, timeout=bad)  # type: ignore[arg-type]


@needs_pg
async def test_async_xact_lock_with_a_timeout_waits_for_the_holder(name: str, migrated: None) -> None:
    assert PG_URL
    aconn = await psycopg.AsyncConnection.connect(PG_URL, autocommit=True)
    try:
        with psycopg.connect(PG_URL, autocommit=True) as a:
            with xact_lock(a, name) as first:
                waiter = asyncio.ensure_future(_async_xact(aconn, name, 5.0))
                await asyncio.sleep(0.3)
                assert not waiter.done()
            assert await asyncio.wait_for(waiter, 5) == first + 1
    finally:
        await aconn.close()


async def _async_xact(aconn: Any, name: str, timeout: float) -> int:
    async with xact_lock(aconn, name, timeout=timeout) as token:
        return token


# ---- one lock per name across the three modes ------------------------------------------------------


@needs_pg
def test_the_three_modes_exclude_each_other_and_count_one_token_per_name(name: str, migrated: None) -> None:
    assert PG_URL
    with psycopg.connect(PG_URL, autocommit=True) as conn, psycopg.connect(PG_URL, autocommit=True) as other:
        lease_backend = PostgresBackend(conn)
        session_backend = PostgresBackend(mode="session", conninfo=PG_URL)

        def lease_lock() -> fencepost.Lock:
            return fencepost.Lock(lease_backend, name, ttl=5.0, acquire_timeout=0)

        def session_lock() -> fencepost.Lock:
            return fencepost.Lock(session_backend, name, ttl=5.0, acquire_timeout=0)

        tokens = []
        with lease_lock() as lease:
            tokens.append(lease.token)
            with pytest.raises(AcquireTimeout):
                session_lock().acquire_sync()
            with pytest.raises(AcquireTimeout):
                with xact_lock(other, name):
                    pass
        with session_lock() as session:
            tokens.append(session.token)
            with pytest.raises(AcquireTimeout):
                lease_lock().acquire_sync()
            with pytest.raises(AcquireTimeout):
                with xact_lock(other, name):
                    pass
        with xact_lock(other, name) as token:
            tokens.append(token)
            with pytest.raises(AcquireTimeout):
                lease_lock().acquire_sync()
            with pytest.raises(AcquireTimeout):
                session_lock().acquire_sync()
        with lease_lock() as lease:
            tokens.append(lease.token)
        with xact_lock(other, name) as token:
            tokens.append(token)
        # one counter per name: every grant, in any mode, is the next token
        first = tokens[0]
        assert tokens == [first, first + 1, first + 2, first + 3, first + 4]
        session_backend.close()
        lease_backend.close()


@needs_pg
def test_grants_go_above_the_token_table_row_of_the_name(name: str, migrated: None) -> None:
    """A name whose tokens were counted in the token table: every mode's next grant is
    above that row, so tokens never go backwards."""
    assert PG_URL
    sql("INSERT INTO fencepost_tokens (name, token) VALUES (%s, 100)", name)
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        backend = PostgresBackend(conn)
        with fencepost.Lock(backend, name, ttl=5.0, acquire_timeout=0) as lease:
            assert lease.token == 101
        backend.close()
    other = f"{name}-x"
    sql("INSERT INTO fencepost_tokens (name, token) VALUES (%s, 200)", other)
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        with xact_lock(conn, other) as token:
            assert token == 201
    with fencepost.Lock(PostgresBackend(mode="session", conninfo=PG_URL), other, ttl=5.0) as lease:
        assert lease.token == 202


@needs_pg
async def test_fenced_update_refuses_token_0_before_anything_is_sent(job: int) -> None:
    # a fresh row holds token 0: an update with it would pass without any lease
    assert PG_URL
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        for token in (0, -1, True):
            with pytest.raises(ConfigError, match=r"an int >= 1"):
                fenced_update_sync(conn, "fp_jobs", id_column="id", token_column="last_token",
                                   row_id=job, token=token, values={"body": "no lease"})
    aconn = await psycopg.AsyncConnection.connect(PG_URL, autocommit=True)
    try:
        with pytest.raises(ConfigError, match=r"an int >= 1"):
            await fenced_update(aconn, "fp_jobs", id_column="id", token_column="last_token",
                                row_id=job, token=0, values={"body": "no lease"})
    finally:
        await aconn.close()
    assert sql("SELECT body, last_token FROM fp_jobs WHERE id = %s", job) == [("new", 0)]


@needs_pg
@pytest.mark.parametrize("mode", ["lease", "session"])
def test_token_floor_is_greatest_of_next_token_and_floor(name: str, migrated: None, mode: str) -> None:
    assert PG_URL
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        backend = PostgresBackend(conn) if mode == "lease" else PostgresBackend(mode="session", conninfo=PG_URL)
        tokens = []
        for floor in (None, 40, 3):
            with fencepost.Lock(backend, name, ttl=5.0, acquire_timeout=2.0, token_floor=floor) as lease:
                tokens.append(lease.token)
        first = tokens[0]
        assert tokens == [first, max(first + 1, 40), max(first + 1, 40) + 1]
        ((row,),) = sql("SELECT token FROM fencepost_leases WHERE name = %s", name)
        assert row == tokens[-1]
        backend.close()


# ---- waiters woken by the release's notification ---------------------------------------------

#: The backoff of the waiters below (seconds): far above what a notification takes.
SLOW_POLL = 8.0


def _wait_for_grant(
    backend: PostgresBackend, name: str, holder: fencepost.Lock, *, release_after: float, poll: float = SLOW_POLL
) -> Tuple[float, int]:
    """Holds ``name`` with ``holder``, starts a waiter on ``backend`` whose backoff is
    ``poll`` (SLOW_POLL), releases after ``release_after`` seconds; returns (seconds from the
    release's return to the waiter's grant, the waiter's token)."""
    holder.acquire_sync()
    waiter = fencepost.Lock(backend, name, ttl=30.0, acquire_timeout=25.0, retry_base=poll, retry_max=poll)
    got: List[Tuple[float, int]] = []

    def wait() -> None:
        lease = waiter.acquire_sync()
        got.append((time.monotonic(), lease.token))
        waiter.release_sync()

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(release_after)
    holder.release_sync()
    released = time.monotonic()
    thread.join(timeout=30)
    assert got, "the waiter got nothing"
    return got[0][0] - released, got[0][1]


@needs_pg
@pytest.mark.parametrize("mode", ["lease", "session"])
def test_a_waiter_is_granted_within_milliseconds_of_the_release(name: str, migrated: None, mode: str) -> None:
    """The release notifies the name's channel; the parked waiter tries at once instead
    of sleeping through its 8 s backoff."""
    assert PG_URL
    args: Any = {"mode": "session", "conninfo": PG_URL} if mode == "session" else {}
    with psycopg.connect(PG_URL, autocommit=True) as c1, psycopg.connect(PG_URL, autocommit=True) as c2:
        holder = fencepost.Lock(PostgresBackend(None if mode == "session" else c1, **args), name, ttl=30.0)
        delay, token = _wait_for_grant(PostgresBackend(None if mode == "session" else c2, **args), name, holder, release_after=1.0)
    assert delay < 0.25, f"granted {delay * 1000:.1f} ms after the release"
    assert token >= 2


@needs_pg
async def test_an_async_waiter_on_a_pool_is_granted_within_milliseconds_of_the_release(name: str, migrated: None) -> None:
    assert PG_URL
    async with psycopg_pool.AsyncConnectionPool(PG_URL, kwargs={"autocommit": True}, min_size=1, open=False) as pool:
        backend = PostgresBackend(pool)
        holder = await fencepost.Lock(backend, name, ttl=30.0).acquire()
        waiter = fencepost.Lock(backend, name, ttl=30.0, acquire_timeout=25.0, retry_base=SLOW_POLL, retry_max=SLOW_POLL)
        task = asyncio.create_task(waiter.acquire())
        await asyncio.sleep(1.0)
        assert not task.done()
        await holder.release()
        released = time.monotonic()
        lease = await asyncio.wait_for(task, 25)
        delay = time.monotonic() - released
        await lease.release()
    assert delay < 0.25, f"granted {delay * 1000:.1f} ms after the release"


@needs_pg
def test_with_the_listener_terminated_the_waiter_still_gets_the_lock(name: str, migrated: None) -> None:
    """pg_terminate_backend on the listening connection: the listener connects and
    listens again (which answers its waiters: a release may have come meanwhile), or the
    wait lasts its backoff (here 1.5 s); either way the waiter gets the lock."""
    assert PG_URL
    with psycopg.connect(PG_URL, autocommit=True) as c1, psycopg.connect(PG_URL, autocommit=True) as c2:
        holder = fencepost.Lock(PostgresBackend(c1), name, ttl=30.0)
        holder.acquire_sync()
        backend = PostgresBackend(c2)
        waiter = fencepost.Lock(backend, name, ttl=30.0, acquire_timeout=20.0, retry_base=1.5, retry_max=1.5)
        got: List[int] = []
        thread = threading.Thread(target=lambda: got.append(waiter.acquire_sync().token))
        thread.start()
        channel = _core.notify_channel("fencepost", name)
        wait_until(lambda: bool(sql("SELECT pid FROM pg_stat_activity WHERE query = %s", f"LISTEN {channel}")), 5)
        # the notification is sent to a listener that is gone
        killed = sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = %s", f"LISTEN {channel}")
        assert killed and all(k[0] for k in killed)
        holder.release_sync()
        released = time.monotonic()
        thread.join(timeout=20)
        assert got, "the waiter never got the lock"
        assert time.monotonic() - released < 5.0
        waiter.release_sync()


@needs_pg
def test_with_no_listening_connection_the_waiter_gets_the_lock_by_polling(name: str, migrated: None) -> None:
    """A listener that cannot connect (listen_conninfo names a closed port): every wait
    lasts its backoff (1 s here), and the waiter gets the lock by polling."""
    assert PG_URL
    with psycopg.connect(PG_URL, autocommit=True) as c1, psycopg.connect(PG_URL, autocommit=True) as c2:
        holder = fencepost.Lock(PostgresBackend(c1), name, ttl=30.0)
        backend = PostgresBackend(c2, listen_conninfo="host=127.0.0.1 port=1 connect_timeout=1")
        delay, _ = _wait_for_grant(backend, name, holder, release_after=0.5, poll=1.0)
    assert delay < 3.0, f"granted {delay:.2f} s after the release"


@needs_bouncer
def test_behind_transaction_pooling_waiters_fall_back_on_polling(name: str, migrated: None) -> None:
    """PgBouncer in transaction mode cannot carry LISTEN (the listening server session
    goes back to the pool): the notification never arrives, and the waiter gets the lock
    at its backoff (1.5 s here) all the same."""
    assert BOUNCER_URL
    with psycopg.connect(BOUNCER_URL, autocommit=True) as c1, psycopg.connect(BOUNCER_URL, autocommit=True) as c2:
        holder = fencepost.Lock(PostgresBackend(c1), name, ttl=30.0)
        holder.acquire_sync()
        waiter = fencepost.Lock(PostgresBackend(c2), name, ttl=30.0, acquire_timeout=20.0, retry_base=1.5, retry_max=1.5)
        got: List[int] = []
        thread = threading.Thread(target=lambda: got.append(waiter.acquire_sync().token))
        thread.start()
        time.sleep(0.5)
        holder.release_sync()
        thread.join(timeout=20)
        assert got, "the waiter never got the lock"
        waiter.release_sync()


@needs_pg
def test_with_notify_off_the_release_notifies_nobody(name: str, migrated: None) -> None:
    assert PG_URL
    channel = _core.notify_channel("fencepost", name)
    with psycopg.connect(PG_URL, autocommit=True) as listen, psycopg.connect(PG_URL, autocommit=True) as c:
        listen.execute(f"LISTEN {channel}")
        for notify in (False, True):
            with fencepost.Lock(PostgresBackend(c, notify=notify), name, ttl=5.0):
                pass
            heard = [n.channel for n in listen.notifies(timeout=0.5)]
            assert heard == ([channel] if notify else []), notify


@needs_pg
def test_a_waiter_behind_one_long_lease_is_never_told_the_lock_is_hot(name: str, migrated: None) -> None:
    """The refused acquire returns the holder's token: one holder found on every attempt
    is a long hold, not contention (hot_lock counts holders, not attempts)."""
    assert PG_URL
    seen: List[fencepost.Observation] = []
    with psycopg.connect(PG_URL, autocommit=True) as c1, psycopg.connect(PG_URL, autocommit=True) as c2:
        holder = fencepost.Lock(PostgresBackend(c1), name, ttl=30.0)
        holder.acquire_sync()
        backend = PostgresBackend(c2, notify=False)
        backend.observe(seen.append, hot_lock_attempts=4)
        waiter = fencepost.Lock(backend, name, ttl=30.0, acquire_timeout=1.0, retry_max=0.05)
        with pytest.raises(AcquireTimeout):
            waiter.acquire_sync()
        holder.release_sync()
    timed_out = [o for o in seen if o.event == "acquire_timed_out"]
    assert len(timed_out) == 1 and timed_out[0].fields["attempts"] >= 8, timed_out  # type: ignore[operator]
    assert [o for o in seen if o.event == "hot_lock"] == []


@needs_pg
def test_a_waiter_behind_one_long_session_lock_is_never_told_the_lock_is_hot(name: str, migrated: None) -> None:
    """Session advisory locks too: a refusal returns the token the holder's grant bumped,
    so one holder found on every attempt is a long hold, not contention."""
    assert PG_URL
    seen: List[fencepost.Observation] = []
    holder_backend = PostgresBackend(mode="session", conninfo=PG_URL)
    backend = PostgresBackend(mode="session", conninfo=PG_URL)
    try:
        holder = fencepost.Lock(holder_backend, name, ttl=30.0)
        holder.acquire_sync()
        backend.observe(seen.append, hot_lock_attempts=4)
        waiter = fencepost.Lock(backend, name, ttl=30.0, acquire_timeout=1.0, retry_max=0.05)
        with pytest.raises(AcquireTimeout):
            waiter.acquire_sync()
        holder.release_sync()
    finally:
        backend.close()
        holder_backend.close()
    timed_out = [o for o in seen if o.event == "acquire_timed_out"]
    assert len(timed_out) == 1 and timed_out[0].fields["attempts"] >= 8, timed_out  # type: ignore[operator]
    assert [o for o in seen if o.event == "hot_lock"] == []
