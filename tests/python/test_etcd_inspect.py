"""Holder metadata and inspection on etcd, against the real etcd 3.4 at
$FENCEPOST_ETCD_URL (``scripts/test`` starts it): the metadata is the contender key's
value, which etcd's own ``etcdctl lock`` (``concurrency.Mutex``) ignores, so it still
excludes fencepost and is excluded by it; ``inspect`` reads holder, token, waiters and
the lease's time to live; ``list`` pages over the key prefix, bounded by ``limit``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from typing import Any, Iterator

import pytest

import fencepost
from fencepost.errors import AcquireTimeout, ConfigError

from conftest import wait_until

ETCD_URL = os.environ.get("FENCEPOST_ETCD_URL")
pytestmark = pytest.mark.skipif(
    not ETCD_URL, reason="FENCEPOST_ETCD_URL is not set (scripts/test starts etcd and sets it)"
)
httpx = pytest.importorskip("httpx")

from fencepost.etcd import EtcdBackend  # noqa: E402  (needs httpx)


@pytest.fixture
def name() -> str:
    return f"ei-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def etcd() -> Iterator[Any]:
    with httpx.Client(timeout=5.0) as client:
        b = EtcdBackend(client, [ETCD_URL])  # type: ignore[list-item]
        yield b
        b.close()


def raw_value(backend: Any, name: str) -> str:
    """The holder key's value, read with etcdctl (etcd's own view)."""
    out = subprocess.run(
        ["etcdctl", f"--endpoints={ETCD_URL}", "get", "--prefix", f"{backend.key_prefix}{name}/",
         "--sort-by=CREATE", "--order=ASCEND", "--print-value-only"],
        env=dict(os.environ, ETCDCTL_API="3"), capture_output=True, text=True, timeout=10, check=True,
    ).stdout
    return out.split("\n")[0]


def test_metadata_is_the_key_s_value_and_inspect_reads_it(etcd: Any, name: str) -> None:
    meta = {"host": "h1", "pid": "7"}
    assert etcd.inspect_sync(name) is None
    with fencepost.Lock(etcd, name, ttl=5.0, metadata=meta) as lease:
        found = etcd.inspect_sync(name)
        assert found is not None
        assert found.name == name and found.token == lease.token
        assert found.owner == f"lease:{fencepost._core.etcd_lease_id(lease.owner_id):016x}"
        assert found.metadata == meta and found.waiters == 0
        assert found.ttl_left is not None and 3.0 <= found.ttl_left <= 5.0
        assert json.loads(raw_value(etcd, name)) == meta
        # a waiter is one more key under the prefix
        waiter = fencepost.Lock(etcd, name, ttl=5.0)
        with pytest.raises(AcquireTimeout):
            waiter.acquire_sync(timeout=0.3)
    assert etcd.inspect_sync(name) is None
    # without metadata the value stays the owner id, and inspect shows no metadata
    with fencepost.Lock(etcd, name, ttl=5.0) as plain:
        bare = etcd.inspect_sync(name)
        assert bare is not None and bare.metadata is None and bare.token == plain.token
        assert raw_value(etcd, name) == plain.owner_id


def test_waiters_count_the_other_contender_keys(etcd: Any, name: str) -> None:
    with fencepost.Lock(etcd, name, ttl=5.0, metadata={"who": "holder"}) as lease:
        env = dict(os.environ, ETCDCTL_API="3")
        # etcdctl lock (etcd's concurrency.Mutex) queues behind it: one more key
        proc = subprocess.Popen(
            ["etcdctl", f"--endpoints={ETCD_URL}", "lock", f"{etcd.key_prefix}{name}", "--", "true"],
            env=env, stdout=subprocess.PIPE, text=True,
        )
        try:
            assert wait_until(lambda: (h := etcd.inspect_sync(name)) is not None and h.waiters == 1)
            found = etcd.inspect_sync(name)
            assert found is not None and found.token == lease.token and found.metadata == {"who": "holder"}
            assert proc.poll() is None, "etcdctl lock still waits: it reads keys, not values"
        finally:
            lease.release()
        assert proc.wait(10) == 0, "etcdctl lock got the lock once released"
    proc.stdout.close()  # type: ignore[union-attr]


def test_fencepost_with_metadata_waits_while_etcdctl_holds(etcd: Any, name: str) -> None:
    env = dict(os.environ, ETCDCTL_API="3")
    proc = subprocess.Popen(
        ["etcdctl", f"--endpoints={ETCD_URL}", "lock", f"{etcd.key_prefix}{name}"],
        env=env, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()  # etcdctl prints its key once it holds
        assert line.startswith(f"{etcd.key_prefix}{name}/"), line
        found = etcd.inspect_sync(name)
        assert found is not None and found.metadata is None, "etcdctl's key has an empty value"
        assert found.ttl_left is not None and found.ttl_left > 0
        with pytest.raises(AcquireTimeout):
            fencepost.Lock(etcd, name, ttl=3.0, metadata={"a": "b"}).acquire_sync(timeout=0.5)
    finally:
        proc.send_signal(signal.SIGINT)  # etcdctl unlocks on interrupt
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
    lease = fencepost.Lock(etcd, name, ttl=3.0, metadata={"a": "b"}).acquire_sync(timeout=10)
    try:
        found = etcd.inspect_sync(name)
        assert found is not None and found.metadata == {"a": "b"} and found.token == lease.token
    finally:
        lease.release()


def test_list_pages_the_prefix_and_is_bounded(etcd: Any, name: str) -> None:
    # `name` first: its prefix "name/" also covers the keys of "name/sub" (as etcd's own
    # Mutex prefixes do), so a later "name" would queue behind "name/sub"
    names = [name, f"{name}/sub", f"{name}-a", f"{name}b", f"{name}c"]
    held = [fencepost.Lock(etcd, n, ttl=5.0, metadata={"n": n}).acquire_sync() for n in names]
    other = fencepost.Lock(etcd, f"x{name}", ttl=5.0).acquire_sync()
    try:
        every = etcd.list_sync(name)
        assert [h.name for h in every] == sorted(names)
        assert all(h.metadata == {"n": h.name} for h in every)
        # the key of "name/sub" counts as a contender under "name/" (etcd's prefix rule)
        assert [h.waiters for h in every] == [1 if h.name == name else 0 for h in every]
        assert len(etcd.list_sync(name, limit=2)) == 2
        # the keys of lock `name` lie in the range of prefix "name/": not a name under it
        assert [h.name for h in etcd.list_sync(f"{name}/")] == [f"{name}/sub"]
        held[2].release()
        assert f"{name}-a" not in [h.name for h in etcd.list_sync(name)]
        with pytest.raises(ConfigError):
            etcd.list_sync(name, limit=0)
    finally:
        for lease in held[:2] + held[3:] + [other]:
            lease.release()


async def test_async_inspect_and_list(name: str) -> None:
    async with httpx.AsyncClient(timeout=5.0) as client:
        backend = EtcdBackend(client, [ETCD_URL])  # type: ignore[list-item]
        lease = await fencepost.Lock(backend, name, ttl=5.0, metadata={"k": "v"}).acquire()
        try:
            found = await backend.inspect(name)
            assert found is not None and found.metadata == {"k": "v"} and found.token == lease.token
            assert [h.name for h in await backend.list(name)] == [name]
        finally:
            await lease.release()
        assert await backend.inspect(name) is None
        assert await backend.list(name) == []


def test_a_revoked_holder_is_not_reported(etcd: Any, name: str) -> None:
    lease = fencepost.Lock(etcd, name, ttl=5.0).acquire_sync()
    assert etcd.force_release_sync(name)
    assert wait_until(lambda: etcd.inspect_sync(name) is None, timeout=2.0)
    del lease
