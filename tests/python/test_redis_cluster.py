"""Locks on a real Redis Cluster: three masters on 127.0.0.1, which this module starts itself
with scripts/services/redis-cluster.sh, reached with redis-py's RedisCluster (blocking and
asyncio). Runs where scripts/test runs the Redis tests ($FENCEPOST_REDIS_URL set)."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator, List

import pytest

import fencepost
from fencepost.errors import AcquireTimeout, ConfigError, StaleToken
from fencepost.redis import RedisBackend

import contender
from conftest import wait_until

redis = pytest.importorskip("redis")
import redis.asyncio.cluster  # noqa: E402
import redis.cluster  # noqa: E402

SCRIPT = str(Path(__file__).resolve().parents[2] / "scripts" / "services" / "redis-cluster.sh")
pytestmark = pytest.mark.skipif(
    not os.environ.get("FENCEPOST_REDIS_URL"),
    reason="FENCEPOST_REDIS_URL is not set (scripts/test starts Redis; this module starts its own cluster)",
)


@pytest.fixture(scope="module")
def nodes() -> Iterator[List[str]]:
    out = subprocess.run([SCRIPT, "start"], check=True, capture_output=True, text=True, timeout=120).stdout
    try:
        yield out.strip().split(",")
    finally:
        subprocess.run([SCRIPT, "stop"], check=False, timeout=60)


@pytest.fixture
def prefix() -> str:
    return f"fpc:{uuid.uuid4().hex[:8]}:"


@pytest.fixture
def client(nodes: List[str]) -> Iterator[redis.cluster.RedisCluster]:
    c = redis.cluster.RedisCluster.from_url(f"redis://{nodes[0]}", socket_timeout=5)
    yield c
    c.close()


def node_of(c: redis.cluster.RedisCluster, key: str) -> str:
    node = c.get_node_from_key(key)
    return f"{node.host}:{node.port}"


@pytest.mark.parametrize("fair", [False, True])
def test_locks_on_a_cluster_acquire_renew_release_and_fence(
    client: redis.cluster.RedisCluster, prefix: str, fair: bool
) -> None:
    backend = RedisBackend(client, key_prefix=prefix, fair=fair)
    names = [f"n{i}" for i in range(6)]  # several names: several slots, on different masters
    assert len({node_of(client, backend.lock_key(n)) for n in names}) > 1
    tokens = []
    for name in names:
        with fencepost.Lock(backend, name, ttl=1.0) as lease:
            if name == names[0]:
                time.sleep(1.3)  # longer than the ttl: renewals keep it
            lease.check()
            assert client.get(backend.lock_key(name)) == lease.owner_id.encode()
            data, fence = f"{prefix}{{{name}}}:data", f"{prefix}{{{name}}}:fence"
            backend.fenced_set_sync(data, fence, lease.token, "v", owner_id=lease.owner_id)
            tokens.append(lease.token)
        assert client.exists(backend.lock_key(name)) == 0
        backend.fenced_set_sync(data, fence, 7, "seven")
        with pytest.raises(StaleToken):
            backend.fenced_set_sync(data, fence, 6, "six")
    assert tokens == [1] * len(names)  # one counter per name
    with pytest.raises(ConfigError, match="RedisCluster client routes WAIT"):
        fencepost.Lock(backend, "w", min_replicas=1)


def test_batched_renewals_carry_one_hash_slot_each(nodes: List[str], client: redis.cluster.RedisCluster, prefix: str) -> None:
    """Leases renewing together on a cluster client renew by slot: 'job:244' and
    'job:1000' share a hash slot (with any prefix: the slot is the tag's), so they renew in
    one renew_many call; the others each in their own. All stay held."""
    scripts = {sha: name for name, (sha, _) in fencepost.redis_scripts().items()}
    scripts.update({source: name for name, (_, source) in fencepost.redis_scripts().items()})
    calls: List[tuple] = []  # type: ignore[type-arg]

    class Logging(redis.cluster.RedisCluster):  # type: ignore[type-arg]
        def evalsha(self, sha: str, numkeys: int, *keys_and_args: object) -> object:  # type: ignore[override]
            calls.append((scripts.get(sha), [k.decode() if isinstance(k, bytes) else k for k in keys_and_args[:numkeys]]))
            return super().evalsha(sha, numkeys, *keys_and_args)

        def eval(self, script: str, numkeys: int, *keys_and_args: object) -> object:  # type: ignore[override]
            calls.append((scripts.get(script), [k.decode() if isinstance(k, bytes) else k for k in keys_and_args[:numkeys]]))
            return super().eval(script, numkeys, *keys_and_args)

    logging = Logging.from_url(f"redis://{nodes[0]}", socket_timeout=5)
    backend = RedisBackend(logging, key_prefix=prefix)
    names = ["job:244", "job:1000"] + [f"n{i}" for i in range(6)]
    assert client.keyslot(backend.lock_key("job:244")) == client.keyslot(backend.lock_key("job:1000"))
    leases = [fencepost.Lock(backend, name, ttl=0.6).acquire_sync() for name in names]
    time.sleep(1.5)
    for lease in leases:
        lease.check()
        assert client.get(backend.lock_key(lease.name)) == lease.owner_id.encode()
    batches = [keys for name, keys in calls if name == "renew_many"]
    assert batches, calls
    for keys in batches:
        assert len({client.keyslot(k) for k in keys}) == 1, keys
    assert [backend.lock_key("job:244"), backend.lock_key("job:1000")] in batches
    for lease in leases:
        lease.release()
    logging.close()


@pytest.mark.parametrize("fair", [False, True])
def test_a_name_starting_with_a_closing_brace_keeps_its_keys_in_one_slot(
    client: redis.cluster.RedisCluster, prefix: str, fair: bool
) -> None:
    # "{}x}" would be an empty hash tag: Cluster would hash each key to its own slot
    backend = RedisBackend(client, key_prefix=prefix, fair=fair)
    name = "}x"
    assert client.keyslot(backend.lock_key(name)) == client.keyslot(backend.token_key(name))
    assert backend.lock_key(name) != backend.lock_key("x")
    with fencepost.Lock(backend, name, ttl=5.0) as lease:
        assert client.get(backend.lock_key(name)) == lease.owner_id.encode()
        waiter = fencepost.Lock(backend, name, ttl=5.0, acquire_timeout=0)
        with pytest.raises(AcquireTimeout):
            waiter.acquire_sync()
    with fencepost.Lock(backend, name, ttl=5.0) as again:
        assert again.token == lease.token + 1
    assert client.exists(backend.lock_key(name)) == 0


def test_a_fair_waiter_is_handed_the_lock_on_a_cluster(client: redis.cluster.RedisCluster, prefix: str) -> None:
    # the release script writes the chosen waiter's wake list and presence key, which it
    # cannot declare in KEYS: they share the declared keys' hash tag, so their slot's node
    # runs it
    backend = RedisBackend(client, key_prefix=prefix, fair=True)
    holder = fencepost.Lock(backend, "ff", ttl=5.0).acquire_sync()
    got: List[int] = []
    waiter = fencepost.Lock(RedisBackend(client, key_prefix=prefix, fair=True), "ff", ttl=5.0)
    t = threading.Thread(target=lambda: got.append(waiter.acquire_sync().token))
    t.start()
    assert wait_until(lambda: client.zcard(f"{prefix}{{ff}}:queue") == 1, timeout=3.0)
    holder.release()
    t.join(5.0)
    assert got == [holder.token + 1]
    waiter.release_sync()


async def test_asyncio_cluster_clients(nodes: List[str], prefix: str) -> None:
    c = redis.asyncio.cluster.RedisCluster.from_url(f"redis://{nodes[1]}", socket_timeout=5)
    for fair in (False, True):
        backend = RedisBackend(c, key_prefix=prefix, fair=fair)
        tokens = []
        for _ in range(3):
            async with fencepost.Lock(backend, f"a{fair}", ttl=2.0) as lease:
                await backend.fenced_set(f"{prefix}{{a}}:d", f"{prefix}{{a}}:f{fair}", lease.token, "v")
                tokens.append(lease.token)
        assert tokens == [1, 2, 3]
    await c.aclose()


@pytest.mark.parametrize("fair", [False, True])
def test_eight_processes_on_a_cluster_never_overlap_and_tokens_increase(
    nodes: List[str], client: redis.cluster.RedisCluster, prefix: str, fair: bool
) -> None:
    processes, rounds = 8, 6
    url = f"redis://{nodes[0]}"
    ctx = multiprocessing.get_context("spawn")
    go = ctx.Event()
    workers = [
        ctx.Process(target=contender.run, args=(url, prefix, "contended", rounds, go, i % 2 == 1, fair),
                    kwargs={"cluster": True}, name=f"contender-{i}")
        for i in range(processes)
    ]
    started = time.monotonic()
    for w in workers:
        w.start()
    go.set()
    for w in workers:
        w.join(timeout=max(1.0, 60 - (time.monotonic() - started)))
    stuck = [w.name for w in workers if w.is_alive()]
    for w in workers:
        if w.is_alive():
            w.kill()
            w.join(5)
    assert not stuck, f"contenders still running after 60 s: {stuck}"
    assert [w.exitcode for w in workers] == [0] * processes
    records = sorted((json.loads(r) for r in client.lrange(prefix + "log", 0, -1)), key=lambda r: r[0])
    assert len(records) == processes * rounds
    for before, after in zip(records, records[1:]):
        assert before[1] < after[0], f"critical sections overlap: {before} and {after}"
        assert before[2] < after[2], f"tokens do not increase in order of start: {before}, {after}"
    assert int(client.get(prefix + "{fenced}fence")) == records[-1][2]


@pytest.mark.parametrize("fair", [False, True])
def test_a_held_lease_survives_the_migration_of_its_slot(
    client: redis.cluster.RedisCluster, prefix: str, fair: bool
) -> None:
    """The lease's slot moves to another master while the lease is held (CLUSTER SETSLOT
    IMPORTING / MIGRATING, MIGRATE of its keys, SETSLOT NODE): renewals follow the
    redirections, the release frees it there, and the next grant's token is the next."""
    backend = RedisBackend(client, key_prefix=prefix, fair=fair)
    name = "moving"
    keys = [backend.lock_key(name), backend.token_key(name)]
    slot = client.keyslot(keys[0])
    lease = fencepost.Lock(backend, name, ttl=0.6).acquire_sync()
    source = client.get_node_from_key(keys[0])
    target = next(n for n in client.get_primaries() if n.name != source.name)
    src = redis.Redis(host=source.host, port=source.port, socket_timeout=5)
    dst = redis.Redis(host=target.host, port=target.port, socket_timeout=5)
    src_id, dst_id = src.execute_command("CLUSTER MYID").decode(), dst.execute_command("CLUSTER MYID").decode()
    dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", src_id)
    src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", dst_id)
    time.sleep(0.3)  # renewals run while the slot is migrating, keys still on the source
    lease.check()
    # every key of the slot, as a reshard moves them (not only the two we know of)
    in_slot = src.execute_command("CLUSTER GETKEYSINSLOT", slot, 1000)
    assert set(keys) <= {k.decode() if isinstance(k, bytes) else k for k in in_slot}, in_slot
    src.execute_command("MIGRATE", target.host, target.port, "", 0, 5000, "KEYS", *in_slot)
    time.sleep(0.3)  # keys on the target, slot still migrating: ASK redirections
    lease.check()
    for node in (dst, src):
        node.execute_command("CLUSTER SETSLOT", slot, "NODE", dst_id)
    time.sleep(0.5)  # slot moved: MOVED, then the client's new slot map
    lease.check()
    assert dst.get(keys[0]) == lease.owner_id.encode()
    token = lease.token
    lease.release()
    assert dst.exists(keys[0]) == 0
    with fencepost.Lock(backend, name, ttl=1.0) as again:
        assert again.token == token + 1
    src.close()
    dst.close()
