"""Holder metadata, inspection and election followers on PostgreSQL lease rows, against
the real PostgreSQL 15 at $FENCEPOST_PG_URL (and the transaction-pooling PgBouncer at
$FENCEPOST_PGBOUNCER_URL; ``scripts/test`` starts both): the grant writes the lease row's
``metadata`` column, a renewal keeps it, a release clears it; ``inspect``/``list`` read
live rows with the time left on the server's clock; the migration upgrades a table made
by the migration before the column; advisory modes refuse with kind ``unsupported``."""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any, Iterator, List

import pytest

import fencepost
from fencepost import standard_metadata
from fencepost.errors import ConfigError, ProtocolError

PG_URL = os.environ.get("FENCEPOST_PG_URL")
BOUNCER_URL = os.environ.get("FENCEPOST_PGBOUNCER_URL")

pytestmark = pytest.mark.skipif(
    not PG_URL, reason="FENCEPOST_PG_URL is not set (scripts/test starts PostgreSQL and sets it)"
)
psycopg = pytest.importorskip("psycopg")

from fencepost.postgres import PostgresBackend  # noqa: E402

# The lease table as the migration made it before holder metadata.
OLD_MIGRATION = """CREATE TABLE {lease} (
    name text PRIMARY KEY,
    owner text,
    token bigint NOT NULL,
    expires_at timestamptz
)"""


@pytest.fixture
def name() -> str:
    return f"pgi-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def migrated() -> Iterator[None]:
    assert PG_URL
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        PostgresBackend(conn).migrate_sync()
    yield


@pytest.fixture
def conn(migrated: None) -> Iterator[Any]:
    assert PG_URL
    with psycopg.connect(PG_URL, autocommit=True) as c:
        yield c


def test_metadata_round_trips_renewal_keeps_it_release_clears_it(conn: Any, name: str) -> None:
    backend = PostgresBackend(conn)
    meta = standard_metadata("nightly report")
    assert backend.inspect_sync(name) is None
    with fencepost.Lock(backend, name, ttl=3.0, metadata=meta) as lease:
        found = backend.inspect_sync(name)
        assert found is not None
        assert (found.name, found.owner, found.token) == (name, lease.owner_id, lease.token)
        assert found.metadata == meta
        assert found.waiters is None  # lease-row contenders leave no trace
        assert found.ttl_left is not None and 2.0 < found.ttl_left <= 3.0
        lease.extend()
        again = backend.inspect_sync(name)
        assert again is not None and again.metadata == meta and again.token == lease.token
    assert backend.inspect_sync(name) is None
    row = conn.execute("SELECT owner, metadata FROM fencepost_leases WHERE name = %s", (name,)).fetchone()
    assert row == (None, None), "the release cleared owner and metadata"
    # a grant without metadata shows none (nor the previous holder's)
    with fencepost.Lock(backend, name, ttl=3.0) as plain:
        bare = backend.inspect_sync(name)
        assert bare is not None and bare.metadata is None and bare.token == plain.token


def test_an_expired_holder_s_metadata_is_replaced_by_the_next_grant(conn: Any, name: str) -> None:
    backend = PostgresBackend(conn)
    first = fencepost.Lock(backend, name, ttl=3.0, metadata={"who": "first"}).acquire_sync()
    # the holder stops renewing and its row expires on the server's clock
    conn.execute("UPDATE fencepost_leases SET expires_at = clock_timestamp() WHERE name = %s", (name,))
    assert backend.inspect_sync(name) is None, "an expired row is nobody's"
    with fencepost.Lock(backend, name, ttl=3.0) as second:
        found = backend.inspect_sync(name)
        assert found is not None and found.token == second.token > first.token
        assert found.metadata is None
    del first


async def test_async_inspect_and_list(migrated: None, name: str) -> None:
    assert PG_URL
    async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as aconn:
        backend = PostgresBackend(aconn)
        lease = await fencepost.Lock(backend, name, ttl=3.0, metadata={"k": "v"}).acquire()
        found = await backend.inspect(name)
        assert found is not None and found.metadata == {"k": "v"} and found.token == lease.token
        listed = await backend.list(name)
        assert [h.name for h in listed] == [name]
        await lease.release()
        assert await backend.inspect(name) is None
        assert await backend.list(name) == []


def test_list_is_prefix_filtered_escaped_ordered_and_bounded(conn: Any, name: str) -> None:
    backend = PostgresBackend(conn)
    names = [f"{name}%a", f"{name}_b", f"{name}\\c", f"{name}d", f"{name}e"]
    held = [fencepost.Lock(backend, n, ttl=5.0, metadata={"n": n}).acquire_sync() for n in names]
    other = fencepost.Lock(backend, f"x{name}", ttl=5.0).acquire_sync()
    try:
        every = backend.list_sync(name)
        assert [h.name for h in every] == sorted(names)
        assert all(h.metadata == {"n": h.name} for h in every)
        assert [h.name for h in backend.list_sync(name, limit=2)] == sorted(names)[:2]
        # LIKE metacharacters of the prefix are literal: "%" and "_" match only themselves
        assert [h.name for h in backend.list_sync(f"{name}%")] == [f"{name}%a"]
        assert [h.name for h in backend.list_sync(f"{name}_")] == [f"{name}_b"]
        assert [h.name for h in backend.list_sync(f"{name}\\")] == [f"{name}\\c"]
        held[0].release()
        assert f"{name}%a" not in [h.name for h in backend.list_sync(name)]
        with pytest.raises(ConfigError):
            backend.list_sync(name, limit=0)
        with pytest.raises(ConfigError):
            backend.list_sync(7)  # type: ignore[arg-type]
    finally:
        for lease in held[1:] + [other]:
            lease.release()


@pytest.mark.skipif(not BOUNCER_URL, reason="FENCEPOST_PGBOUNCER_URL is not set")
def test_inspect_and_list_behind_transaction_pooling(migrated: None, name: str) -> None:
    assert BOUNCER_URL
    with psycopg.connect(BOUNCER_URL, autocommit=True) as bconn:
        backend = PostgresBackend(bconn)
        with fencepost.Lock(backend, name, ttl=3.0, metadata={"via": "pgbouncer"}) as lease:
            found = backend.inspect_sync(name)
            assert found is not None and found.metadata == {"via": "pgbouncer"}
            assert found.token == lease.token
            assert [h.name for h in backend.list_sync(name)] == [name]


def test_the_migration_upgrades_a_table_made_before_metadata(name: str) -> None:
    assert PG_URL
    table = f"fp_old_{uuid.uuid4().hex[:8]}"
    # the backend's own connection: its cleanup after the refused grant may still run
    with psycopg.connect(PG_URL, autocommit=True) as conn, psycopg.connect(PG_URL, autocommit=True) as bconn:
        conn.execute(OLD_MIGRATION.format(lease=table))
        conn.execute(f"INSERT INTO {table} (name, owner, token, expires_at) VALUES (%s, NULL, 41, NULL)", (name,))
        try:
            backend = PostgresBackend(bconn, lease_table=table)
            # before the upgrade: a clear error naming the migration, nothing granted
            with pytest.raises(ProtocolError) as info:
                fencepost.Lock(backend, name, ttl=3.0, acquire_timeout=1.0).acquire_sync()
            assert "migration" in str(info.value) and "metadata" in str(info.value)
            upgraded = PostgresBackend(conn, lease_table=table)
            upgraded.migrate_sync()
            upgraded.migrate_sync()  # idempotent
            columns = [
                r[0]
                for r in conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                    "ORDER BY ordinal_position",
                    (table,),
                ).fetchall()
            ]
            assert columns == ["name", "owner", "token", "expires_at", "metadata"]
            with fencepost.Lock(upgraded, name, ttl=3.0, metadata={"a": "b"}) as lease:
                assert lease.token == 42, "the old row's token counts on"
                found = upgraded.inspect_sync(name)
                assert found is not None and found.metadata == {"a": "b"}
        finally:
            conn.execute(f"DROP TABLE {table}")


def test_advisory_modes_refuse_metadata_inspection_and_followers(migrated: None, name: str) -> None:
    assert PG_URL
    backend = PostgresBackend(mode="session", conninfo=PG_URL)
    try:
        for call in (lambda: backend.inspect_sync(name), lambda: backend.list_sync(name)):
            with pytest.raises(ConfigError) as info:
                call()
            assert info.value.kind == "unsupported" and "lease" in str(info.value)
        with pytest.raises(ConfigError) as meta:
            fencepost.Lock(backend, name, metadata={"a": "b"})
        assert "advisory" in str(meta.value)
        with pytest.raises(ConfigError) as leader:
            fencepost.Election(backend, name, "pod-a").leader_sync()
        assert leader.value.kind == "unsupported"
    finally:
        backend.close()


def test_followers_observe_every_change_of_leader_in_order(migrated: None, name: str) -> None:
    assert PG_URL

    async def main() -> List[Any]:
        async with await psycopg.AsyncConnection.connect(PG_URL or "", autocommit=True) as aconn:
            backend = PostgresBackend(aconn)
            follower = fencepost.Election(backend, name, "follower", ttl=3)
            assert await follower.leader() is None
            seen: List[Any] = []

            async def watch() -> None:
                async for leader in follower.observe(interval=0.02):
                    seen.append(leader)

            watcher = asyncio.ensure_future(watch())
            await asyncio.sleep(0.1)  # the watcher has seen nobody leading
            tokens = []
            for who in ("pod-a", "pod-b", "pod-c"):
                e = fencepost.Election(backend, name, who, value=f"addr-{who}", ttl=3, purpose="correctness")
                leadership = await e.campaign()
                tokens.append(leadership.token)
                assert await follower.leader() == fencepost.Leader(who, f"addr-{who}", leadership.token)
                await asyncio.sleep(0.2)  # terms longer than the observation interval
                await leadership.resign()
                await asyncio.sleep(0.2)
            watcher.cancel()
            return [seen, tokens]

    seen, tokens = asyncio.run(main())
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    assert seen == [
        None,
        fencepost.Leader("pod-a", "addr-pod-a", tokens[0]),
        None,
        fencepost.Leader("pod-b", "addr-pod-b", tokens[1]),
        None,
        fencepost.Leader("pod-c", "addr-pod-c", tokens[2]),
        None,
    ]


def test_blocking_follower_reads_the_leader(conn: Any, name: str) -> None:
    backend = PostgresBackend(conn)
    follower = fencepost.Election(backend, name, "follower", ttl=3)
    assert follower.leader_sync() is None
    leadership = fencepost.Election(backend, name, "pod-a", ttl=3).campaign_sync()
    try:
        assert follower.leader_sync() == fencepost.Leader("pod-a", None, leadership.token)
    finally:
        leadership.resign()
    assert follower.leader_sync() is None
