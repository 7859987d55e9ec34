"""Replays the fence vectors ``tests/scenarios/fence/*.json`` (format in
``tests/scenarios/README.md``, "Fence vectors") through every fence Python has: the
in-memory :class:`fencepost.Fence`, the fenced-SET script on a real Redis
($FENCEPOST_REDIS_URL) and the SQL guard on a real PostgreSQL ($FENCEPOST_PG_URL). A write
with an ``owner`` uses the owner-bound rule, one without it the token-only rule."""

from __future__ import annotations

import json
import os
import uuid
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Union

import pytest

import fencepost
from fencepost.errors import DuplicateGrantWarning, StaleToken

VECTORS = sorted((Path(__file__).resolve().parents[1] / "scenarios" / "fence").glob("*.json"))
REDIS_URL = os.environ.get("FENCEPOST_REDIS_URL")
PG_URL = os.environ.get("FENCEPOST_PG_URL")

Outcome = Union[str, Dict[str, Any]]


def outcome(write: Callable[[], None]) -> Outcome:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            write()
        except StaleToken as e:
            warned = [w for w in caught if issubclass(w.category, DuplicateGrantWarning)]
            # a duplicate-grant refusal is told by a warning too, and only that one
            assert len(warned) == (1 if e.reason == "duplicate_grant" else 0), caught
            return {"refused": e.reason, "highest": e.highest}
    return "accepted"


def load(path: Path) -> List[Dict[str, Any]]:
    vector = json.loads(path.read_text())
    assert vector["name"] == path.stem
    writes: List[Dict[str, Any]] = vector["writes"]
    return writes


def test_there_are_fence_vectors() -> None:
    assert len(VECTORS) >= 3


@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
def test_fence_vector_in_memory(path: Path) -> None:
    fence = fencepost.Fence()
    for i, w in enumerate(load(path)):
        got = outcome(lambda: fence.check(w["resource"], w["token"], w.get("owner")))
        assert got == w["expect"], f"{path.stem} write {i}"


@pytest.mark.skipif(not REDIS_URL, reason="FENCEPOST_REDIS_URL is not set (scripts/test starts Redis)")
@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
def test_fence_vector_on_redis(path: Path) -> None:
    import redis

    from fencepost.redis import RedisBackend

    client = redis.Redis.from_url(REDIS_URL or "", socket_timeout=5)
    backend = RedisBackend(client)
    run = uuid.uuid4().hex
    try:
        for i, w in enumerate(load(path)):
            key = f"fv:{run}:{w['resource']}"
            got = outcome(
                lambda: backend.fenced_set_sync(
                    key, f"{key}:fence", w["token"], f"write {i}", owner_id=w.get("owner")
                )
            )
            assert got == w["expect"], f"{path.stem} write {i}"
            if got == "accepted":
                assert client.get(key) == f"write {i}".encode()
    finally:
        for key in client.scan_iter(f"fv:{run}:*"):
            client.delete(key)
        client.close()


@pytest.mark.skipif(not PG_URL, reason="FENCEPOST_PG_URL is not set (scripts/test starts PostgreSQL)")
@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
def test_fence_vector_on_postgres(path: Path) -> None:
    import psycopg

    from fencepost.postgres import fenced_update_sync

    table = f"fv_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_URL or "", autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE {table} (id text PRIMARY KEY, body text, "
            "last_token bigint NOT NULL DEFAULT 0, last_owner text NOT NULL DEFAULT '')"
        )
        try:
            for i, w in enumerate(load(path)):
                conn.execute(
                    f"INSERT INTO {table} (id) VALUES (%s) ON CONFLICT DO NOTHING", (w["resource"],)
                )
                owner = w.get("owner")
                got = outcome(
                    lambda: fenced_update_sync(
                        conn,
                        table,
                        id_column="id",
                        token_column="last_token",
                        row_id=w["resource"],
                        token=w["token"],
                        values={"body": f"write {i}"},
                        owner_column="last_owner" if owner else None,
                        owner_id=owner,
                    )
                )
                assert got == w["expect"], f"{path.stem} write {i}"
        finally:
            conn.execute(f"DROP TABLE {table}")
