"""Holder metadata, inspection and election followers on ZooKeeper (kazoo, against the
real ZooKeeper of ``FENCEPOST_ZK_HOSTS``) and the Kubernetes Lease backend (httpx,
against the project's Lease API server of ``FENCEPOST_KUBE_URL``): ``Lock(metadata=)``
round-trips through ``inspect``, a free lock inspects as None, ``list`` keeps to its
prefix and limit (on Kubernetes across ``limit``/``continue`` pages), and a follower
sees each leader in order. scripts/test starts both servers."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import uuid
from typing import Any, Dict, Iterator, List

import pytest

import fencepost
from fencepost import standard_metadata
from fencepost.errors import AcquireTimeout

HOSTS = os.environ.get("FENCEPOST_ZK_HOSTS")
KUBE_URL = os.environ.get("FENCEPOST_KUBE_URL")
KUBE_TOKEN = os.environ.get("FENCEPOST_KUBE_TOKEN", "")
needs_zk = pytest.mark.skipif(not HOSTS, reason="FENCEPOST_ZK_HOSTS not set (scripts/test sets it)")
needs_kube = pytest.mark.skipif(not KUBE_URL, reason="FENCEPOST_KUBE_URL not set (scripts/test sets it)")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def zk_backend(**kw: Any) -> Any:
    from kazoo.client import KazooClient

    from fencepost.zookeeper import ZooKeeperBackend

    return ZooKeeperBackend(KazooClient(hosts=HOSTS or "", timeout=4.0), **kw)


def zk_close(b: Any) -> None:
    b.close()
    b.client.stop()
    b.client.close()


def kube_backend(use_async: bool = False) -> Any:
    import httpx

    from fencepost.kubernetes import KubernetesLeaseBackend

    client = httpx.AsyncClient(timeout=2.0) if use_async else httpx.Client(timeout=2.0)
    return KubernetesLeaseBackend(client, KUBE_URL or "", token=KUBE_TOKEN)


def kube_api(method: str, path: str, body: Any = None) -> Any:
    """A raw call to the test server, as another client (client-go, kubectl) makes it."""
    import httpx

    r = httpx.request(method, f"{KUBE_URL}{path}", headers={"Authorization": f"Bearer {KUBE_TOKEN}",
                      "Content-Type": "application/json"},
                      content=None if body is None else json.dumps(body), timeout=5.0)
    return r.json()


@pytest.fixture
def zk() -> Iterator[Any]:
    b = zk_backend()
    yield b
    zk_close(b)


@pytest.fixture
def kb() -> Iterator[Any]:
    b = kube_backend()
    yield b
    b.close()
    b.client.close()


# ---- ZooKeeper --------------------------------------------------------------------------


@needs_zk
def test_zookeeper_metadata_round_trips_and_waiters_are_the_contenders_behind(zk: Any) -> None:
    name = unique("zkinsp")
    operator = zk_backend()
    meta = standard_metadata("nightly report")
    try:
        assert operator.inspect_sync(name) is None  # no lock path yet
        lock = fencepost.Lock(zk, name, ttl=zk.session_timeout, metadata=meta)
        with lock as lease:
            found = operator.inspect_sync(name)
            assert found is not None
            assert (found.name, found.owner, found.token) == (name, lease.owner_id, lease.token)
            assert found.metadata == meta
            assert (found.ttl_left, found.waiters) == (None, 0)
            # the node's data is the metadata, as kazoo's contenders() shows it
            assert zk.client.Lock(zk.lock_path(name)).contenders() == [
                json.dumps(meta, separators=(",", ":"), sort_keys=True)
            ]
            failed: List[BaseException] = []

            def wait() -> None:
                try:
                    fencepost.Lock(operator, name, ttl=zk.session_timeout, acquire_timeout=1.0).acquire_sync()
                except AcquireTimeout as exc:
                    failed.append(exc)

            waiter = threading.Thread(target=wait)
            waiter.start()
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                found = operator.inspect_sync(name)
                if found is not None and found.waiters == 1:
                    break
                time.sleep(0.02)
            assert found is not None and found.waiters == 1 and found.owner == lease.owner_id
            waiter.join()
            assert len(failed) == 1
        # released, and the timed-out waiter's node deleted: that cleanup runs on the
        # request pool after AcquireTimeout reached its caller, so it may still be going
        deadline = time.monotonic() + 2.0
        while operator.inspect_sync(name) is not None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert operator.inspect_sync(name) is None  # the path has no contender
    finally:
        zk_close(operator)


@needs_zk
def test_zookeeper_a_kazoo_holder_is_inspected_without_metadata(zk: Any) -> None:
    name = unique("zkkazoo")
    kazoo_lock = zk.client.Lock(zk.lock_path(name), identifier="worker-1")
    assert kazoo_lock.acquire(timeout=5)
    try:
        found = zk.inspect_sync(name)
        assert found is not None
        node = kazoo_lock.node.rsplit("/", 1)[-1]
        assert found.owner == node.split("__")[0]  # kazoo's uuid, as fencepost names nodes
        assert found.metadata is None  # "worker-1" is no JSON object of strings
        assert found.token is not None and found.token > 0
    finally:
        kazoo_lock.release()


@needs_zk
async def test_zookeeper_list_keeps_to_the_prefix_and_the_limit() -> None:
    b = zk_backend(root=f"/{unique('zkroot')}")
    prefix = unique("job")
    try:
        names = [f"{prefix}-{i}" for i in "abc"]
        leases = [await fencepost.Lock(b, n, ttl=b.session_timeout, metadata={"i": n}).acquire() for n in names]
        other = await fencepost.Lock(b, unique("other"), ttl=b.session_timeout).acquire()
        free = await fencepost.Lock(b, f"{prefix}-free", ttl=b.session_timeout).acquire()
        await free.release()  # its path stays, with no contender: not listed
        found = await b.list(prefix)
        assert [h.name for h in found] == names
        assert [h.metadata for h in found] == [{"i": n} for n in names]
        assert [h.token for h in found] == [lease.token for lease in leases]
        assert [h.name for h in await b.list(prefix, limit=2)] == names[:2]
        assert [h.name for h in b.list_sync("", limit=100)] == sorted(names + [other.name])
        assert await b.list("nothing-") == []
        with pytest.raises(fencepost.errors.ConfigError):
            await b.list(prefix, limit=0)
        for lease in leases + [other]:
            await lease.release()
        assert await b.list(prefix) == []
    finally:
        await b.aclose()
        zk_close(b)


@needs_zk
def test_zookeeper_a_missing_root_lists_nothing() -> None:
    b = zk_backend(root=f"/{unique('absent')}")
    try:
        assert b.list_sync() == []
    finally:
        zk_close(b)


# ---- Kubernetes Lease ---------------------------------------------------------------------


@needs_kube
def test_kubernetes_metadata_round_trips_in_an_annotation(kb: Any) -> None:
    name = unique("kinsp")
    meta = standard_metadata("nightly report")
    assert kb.inspect_sync(name) is None  # no Lease
    with fencepost.Lock(kb, name, ttl=5, metadata=meta) as lease:
        found = kb.inspect_sync(name)
        assert found is not None
        assert (found.name, found.owner, found.token) == (name, lease.owner_id, lease.token)
        assert found.metadata == meta
        assert found.ttl_left == 5.0  # the record's leaseDurationSeconds, an upper bound
        assert found.waiters is None
        stored = kube_api("GET", f"/apis/coordination.k8s.io/v1/namespaces/default/leases/{name}")
        note = json.loads(stored["metadata"]["annotations"]["fencepost.dev/holder-metadata"])
        assert note == {"owner": lease.owner_id, "metadata": meta}
        assert stored["spec"]["holderIdentity"] == lease.owner_id  # what client-go reads
        time.sleep(1.8)  # a renewal (every ttl / 3) keeps the annotation
        renewed = kb.inspect_sync(name)
        assert renewed is not None and renewed.metadata == meta and renewed.token == lease.token
    assert kb.inspect_sync(name) is None  # released: no holderIdentity
    # the next holder without metadata shows none (the annotation is dropped)
    with fencepost.Lock(kb, name, ttl=5) as lease:
        found = kb.inspect_sync(name)
        assert found is not None and found.owner == lease.owner_id and found.metadata is None


@needs_kube
def test_kubernetes_a_client_go_holder_shows_its_identity_and_no_stale_metadata(kb: Any) -> None:
    name = unique("kgo")
    with fencepost.Lock(kb, name, ttl=5, metadata={"pod": "a"}):
        pass
    path = f"/apis/coordination.k8s.io/v1/namespaces/default/leases/{name}"
    lease = kube_api("GET", path)
    # a client-go elector takes the released Lease over, keeping its annotations
    lease["spec"].update(holderIdentity="pod-7_1234", leaseDurationSeconds=15,
                         leaseTransitions=lease["spec"]["leaseTransitions"] + 1)
    kube_api("PUT", path, lease)
    found = kb.inspect_sync(name)
    assert found is not None
    assert (found.owner, found.metadata, found.ttl_left) == ("pod-7_1234", None, 15.0)


@needs_kube
async def test_kubernetes_list_pages_with_limit_and_continue(monkeypatch: pytest.MonkeyPatch) -> None:
    b = kube_backend(use_async=True)
    prefix = unique("kjob")
    try:
        names = [f"{prefix}-{i}" for i in "abcde"]
        leases = [await fencepost.Lock(b, n, ttl=5, metadata={"i": n}).acquire() for n in names]
        free = await fencepost.Lock(b, f"{prefix}-free", ttl=5).acquire()
        await free.release()
        # pages of 2 Leases: the listing follows the server's continue tokens
        monkeypatch.setattr(fencepost._core, "KUBE_LIST_PAGE", 2)
        before = kube_api("GET", "/_control/state")["counts"].get("GET", 0)
        found = await b.list(prefix)
        pages = kube_api("GET", "/_control/state")["counts"].get("GET", 0) - before - 1
        assert [h.name for h in found] == names
        assert [h.metadata for h in found] == [{"i": n} for n in names]
        assert [h.token for h in found] == [lease.token for lease in leases]
        assert pages >= 3  # six Leases of this prefix alone need three pages of two
        assert [h.name for h in await b.list(prefix, limit=3)] == names[:3]
        assert await b.list(unique("none")) == []
        for lease in leases:
            await lease.release()
        assert await b.list(prefix) == []
    finally:
        await b.aclose()
        await b.client.aclose()


# ---- election followers on both -----------------------------------------------------------


def _follow(make: Any, name: str, ttl: float) -> List[Any]:
    async def main() -> List[Any]:
        backend = make()
        follower = fencepost.Election(backend, name, "follower", ttl=ttl)
        assert await follower.leader() is None
        seen: List[Any] = []

        async def watch() -> None:
            async for leader in follower.observe(interval=0.02):
                seen.append(leader)

        watcher = asyncio.ensure_future(watch())
        await asyncio.sleep(0.2)  # the watcher has seen nobody leading
        tokens = []
        for who in ("pod-a", "pod-b", "pod-c"):
            e = fencepost.Election(backend, name, who, value=f"addr-{who}", ttl=ttl)
            leadership = await e.campaign()
            tokens.append(leadership.token)
            assert await follower.leader() == fencepost.Leader(who, f"addr-{who}", leadership.token)
            await asyncio.sleep(0.3)  # terms longer than the observation interval
            await leadership.resign()
            await asyncio.sleep(0.3)
        watcher.cancel()
        await backend.aclose()
        return [seen, tokens, backend]

    seen, tokens, backend = asyncio.run(main())
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
    return [backend]


@needs_zk
def test_zookeeper_a_follower_observes_each_leader_in_order() -> None:
    made: Dict[str, Any] = {}

    def make() -> Any:
        made["b"] = zk_backend()
        return made["b"]

    _follow(make, unique("zkelect"), ttl=3.0)
    made["b"].client.stop()
    made["b"].client.close()


@needs_kube
def test_kubernetes_a_follower_observes_each_leader_in_order() -> None:
    made: Dict[str, Any] = {}

    def make() -> Any:
        made["b"] = kube_backend(use_async=True)
        return made["b"]

    _follow(make, unique("kelect"), ttl=3)


@needs_zk
def test_zookeeper_blocking_leader_reads_the_record(zk: Any) -> None:
    name = unique("zksync")
    e = fencepost.Election(zk, name, "pod-a", value="10.0.0.1", ttl=zk.session_timeout)
    follower = fencepost.Election(zk, name, "follower", ttl=zk.session_timeout)
    assert follower.leader_sync() is None
    leadership = e.campaign_sync()
    try:
        assert follower.leader_sync() == fencepost.Leader("pod-a", "10.0.0.1", leadership.token)
    finally:
        leadership.resign()
    assert follower.leader_sync() is None
