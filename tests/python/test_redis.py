"""Integration tests against a real Redis server at $FENCEPOST_REDIS_URL
(``scripts/test`` starts one on 127.0.0.1 and sets it). Each test uses its own key
prefix, so tests never see each other's keys."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import socket
import threading
import time
import uuid
from typing import AsyncIterator, Iterator

import pytest

import fencepost
from fencepost.errors import AcquireTimeout, BackendError, ConfigError, LockLost, ProtocolError, StaleToken
from fencepost.redis import RedisBackend

import contender
from conftest import wait_until

URL = os.environ.get("FENCEPOST_REDIS_URL")
pytestmark = pytest.mark.skipif(
    not URL,
    reason="FENCEPOST_REDIS_URL is not set (scripts/test starts Redis and sets it; or run "
    "scripts/services/redis.sh start and export FENCEPOST_REDIS_URL=$(cat .state/redis/url))",
)

redis = pytest.importorskip("redis")
import redis.asyncio  # noqa: E402
import redis.backoff  # noqa: E402
import redis.retry  # noqa: E402


@pytest.fixture
def prefix() -> str:
    return f"fptest:{uuid.uuid4().hex[:12]}:"


@pytest.fixture
def client(prefix: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(URL, socket_timeout=5)
    yield c
    keys = list(c.scan_iter(match=prefix + "*"))
    if keys:
        c.delete(*keys)
    c.close()


@pytest.fixture
async def aclient() -> AsyncIterator[redis.asyncio.Redis]:
    c = redis.asyncio.Redis.from_url(URL, socket_timeout=5)
    yield c
    await c.aclose()


def lock_value(client: redis.Redis, backend: fencepost.Backend, name: str) -> str | None:
    value = client.get(backend.lock_key(name))
    return value.decode() if isinstance(value, bytes) else value


# ---- many processes, one lock ------------------------------------------------------------


def test_eight_processes_never_overlap_and_tokens_increase(client: redis.Redis, prefix: str) -> None:
    """8 spawned processes × 10 critical sections on one lock: no two sections overlap on
    CLOCK_MONOTONIC, tokens strictly increase in order of start, every fenced write is
    accepted. Half the processes use the blocking API, half asyncio."""
    processes, rounds = 8, 10
    ctx = multiprocessing.get_context("spawn")
    go = ctx.Event()
    workers = [
        ctx.Process(
            target=contender.run,
            args=(URL, prefix, "contended", rounds, go, i % 2 == 1),
            name=f"contender-{i}",
        )
        for i in range(processes)
    ]
    started = time.monotonic()
    for w in workers:
        w.start()
    go.set()
    for w in workers:
        w.join(timeout=max(1.0, 50 - (time.monotonic() - started)))
    stuck = [w.name for w in workers if w.is_alive()]
    for w in workers:
        if w.is_alive():
            w.kill()
            w.join(5)
    assert not stuck, f"contenders still running after 50 s: {stuck}"
    assert [w.exitcode for w in workers] == [0] * processes

    records = [json.loads(r) for r in client.lrange(prefix + "log", 0, -1)]
    assert len(records) == processes * rounds
    records.sort(key=lambda r: r[0])
    assert {r[4] for r in records} == {"sync", "async"}
    assert len({r[3] for r in records}) == processes
    for before, after in zip(records, records[1:]):
        assert before[1] < after[0], f"critical sections overlap: {before} and {after}"
        assert before[2] < after[2], f"tokens do not increase in order of start: {before}, {after}"
    # every fenced write was accepted: the fence holds the last token, the data its write
    last = records[-1]
    assert int(client.get(prefix + "fence")) == last[2]
    assert client.get(prefix + "data").decode().startswith(f"{last[3]}:")
    assert time.monotonic() - started < 50


# ---- loss --------------------------------------------------------------------------------


async def test_async_lease_whose_key_is_deleted_is_lost_and_the_body_cancelled(
    client: redis.Redis, aclient: redis.asyncio.Redis, prefix: str
) -> None:
    backend = RedisBackend(aclient, key_prefix=prefix)
    lock = fencepost.Lock(backend, "victim", ttl=0.3)  # renews every 0.1 s
    cancelled = False
    deleted_at = 0.0
    with pytest.raises(LockLost) as info:
        async with lock as lease:
            assert lock_value(client, backend, "victim") == lease.owner_id
            assert client.delete(backend.lock_key("victim")) == 1
            deleted_at = time.monotonic()
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                cancelled = True
                raise
    assert cancelled
    assert time.monotonic() - deleted_at < 0.1 + 0.1
    assert info.value.reason == "renew_rejected" and info.value.token == lease.token
    assert lease.lost.is_set()
    assert client.get(backend.lock_key("victim")) is None  # a renewal never re-creates it


def test_sync_lease_whose_key_is_deleted_is_lost(client: redis.Redis, prefix: str) -> None:
    backend = RedisBackend(client, key_prefix=prefix)
    with pytest.raises(LockLost) as info:
        with fencepost.Lock(backend, "victim", ttl=0.3) as lease:
            client.delete(backend.lock_key("victim"))
            assert lease.lost.wait(0.1 + 0.2)
            with pytest.raises(LockLost):
                lease.check()
    assert info.value.reason == "renew_rejected"
    with pytest.raises(LockLost):  # the exit reports it when the body does not look
        with fencepost.Lock(backend, "victim", ttl=0.3) as lease:
            client.delete(backend.lock_key("victim"))
            lease.lost.wait(1.0)
    assert client.get(backend.lock_key("victim")) is None


async def test_release_after_expiry_leaves_the_next_holders_key_intact(
    client: redis.Redis, aclient: redis.asyncio.Redis, prefix: str
) -> None:
    a_backend = RedisBackend(aclient, key_prefix=prefix)
    b_backend = RedisBackend(redis.asyncio.Redis.from_url(URL), key_prefix=prefix)
    a = fencepost.Lock(a_backend, "shared", ttl=0.3, auto_renew=False)
    a_lease = await a.acquire()
    await asyncio.sleep(0.35)  # A's lease expires on the server
    b = fencepost.Lock(b_backend, "shared", ttl=5.0, acquire_timeout=0)
    b_lease = await b.acquire()
    assert b_lease.token == a_lease.token + 1
    with pytest.raises(LockLost) as info:
        await a.release()
    assert info.value.reason == "expired"  # A's machine knew before it released
    await asyncio.sleep(0.05)  # let any release A might (wrongly) send land
    assert lock_value(client, b_backend, "shared") == b_lease.owner_id
    await b.release()
    await b_backend.client.aclose()


def test_release_of_a_reowned_key_is_refused_by_the_server(client: redis.Redis, prefix: str) -> None:
    backend = RedisBackend(client, key_prefix=prefix)
    lock = fencepost.Lock(backend, "stolen", ttl=5.0, auto_renew=False)
    lock.acquire_sync()
    client.set(backend.lock_key("stolen"), "someone-else", px=5000)  # behind A's back
    with pytest.raises(LockLost) as info:
        lock.release_sync()
    assert info.value.reason == "not_held_at_release"
    assert lock_value(client, backend, "stolen") == "someone-else"


# ---- scripts and replies -----------------------------------------------------------------


def test_noscript_falls_back_to_eval_then_evalsha_works_again(client: redis.Redis, prefix: str) -> None:
    backend = RedisBackend(client, key_prefix=prefix)
    acquire_sha = fencepost.redis_scripts()["acquire"][0]
    client.script_flush()
    assert client.script_exists(acquire_sha) == [False]
    with fencepost.Lock(backend, "ns", ttl=5.0) as lease:
        assert lease.token == 1
    assert client.script_exists(acquire_sha) == [True]  # EVAL cached it
    with fencepost.Lock(backend, "ns", ttl=5.0) as lease:
        assert lease.token == 2


async def test_async_noscript_fallback(client: redis.Redis, aclient: redis.asyncio.Redis, prefix: str) -> None:
    client.script_flush()
    async with fencepost.Lock(RedisBackend(aclient, key_prefix=prefix), "ns", ttl=5.0) as lease:
        assert lease.token == 1


def test_wrong_type_at_the_lock_key_is_a_protocol_error(client: redis.Redis, prefix: str) -> None:
    backend = RedisBackend(client, key_prefix=prefix)
    client.rpush(backend.lock_key("typed"), "not a string")
    with pytest.raises(ProtocolError, match="WRONGTYPE"):
        fencepost.Lock(backend, "typed", ttl=5.0, acquire_timeout=1.0).acquire_sync()


def test_unreachable_server_times_out_with_the_transport_error(prefix: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    # no client-side retries (redis-py >= 6 retries connection errors with backoff by default)
    no_retry = redis.retry.Retry(redis.backoff.NoBackoff(), 0)
    dead = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.5, retry=no_retry)
    backend = RedisBackend(dead, key_prefix=prefix)
    started = time.monotonic()
    with pytest.raises(AcquireTimeout) as info:
        fencepost.Lock(backend, "x", ttl=1.0, acquire_timeout=0).acquire_sync()
    assert info.value.last_error is not None and "ConnectionError" in info.value.last_error
    with pytest.raises(AcquireTimeout):  # retried until the timeout, then given up
        fencepost.Lock(backend, "x", ttl=1.0, acquire_timeout=0.2, retry_base=0.01, retry_max=0.05).acquire_sync()
    assert time.monotonic() - started < 2.0
    with pytest.raises(BackendError, match="fenced SET"):
        backend.fenced_set_sync(prefix + "d", prefix + "f", 1, "v")


# ---- the blocking API, modes, fenced writes ----------------------------------------------


def test_sync_with_against_redis(client: redis.Redis, prefix: str) -> None:
    backend = RedisBackend(client, key_prefix=prefix)
    lock = fencepost.Lock(backend, "sync", ttl=0.3, acquire_timeout=1.0)
    with lock as lease:
        assert lock_value(client, backend, "sync") == lease.owner_id
        assert 0 < client.pttl(backend.lock_key("sync")) <= 300
        time.sleep(0.5)  # longer than the ttl: renewals keep it
        lease.check()
        assert lock_value(client, backend, "sync") == lease.owner_id
    assert client.get(backend.lock_key("sync")) is None
    assert int(client.get(backend.token_key("sync"))) == lease.token
    other = fencepost.Lock(RedisBackend(client, key_prefix=prefix), "sync", ttl=1.0, acquire_timeout=0)
    with lock:
        with pytest.raises(AcquireTimeout):
            other.acquire_sync()


async def test_async_with_against_redis(client: redis.Redis, aclient: redis.asyncio.Redis, prefix: str) -> None:
    backend = RedisBackend(aclient, key_prefix=prefix)
    async with fencepost.Lock(backend, "a", ttl=0.3) as lease:
        await asyncio.sleep(0.5)
        lease.check()
        assert lock_value(client, backend, "a") == lease.owner_id
        await backend.fenced_set(prefix + "doc", prefix + "doc:fence", lease.token, "v1")
    assert client.get(backend.lock_key("a")) is None
    assert client.get(prefix + "doc") == b"v1"


def test_twenty_threads_renew_and_release_every_lease(client: redis.Redis, prefix: str) -> None:
    """20 threads, one lock each, held 0.8 s with ttl=0.5: every renewal and release of a
    poll() that yields several runs exactly once (no spurious LockLost, no orphaned
    lock keys). The margins are wider than on the memory backend: real round trips on
    a busy machine can delay a release past a 0.3 s lease."""
    backend = RedisBackend(client, key_prefix=prefix)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            with fencepost.Lock(backend, f"t{i}", ttl=0.5):
                time.sleep(0.8)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not [t for t in threads if t.is_alive()]
    assert errors == []
    machine = backend._sync_driver()._machine
    assert wait_until(lambda: machine.lock_count() == 0, timeout=0.5), machine.lock_count()
    assert list(client.scan_iter(match=prefix + "*:lock")) == []


class _ScriptLog:
    """The scripts a client ran, by name, with the keys of each call."""

    def __init__(self) -> None:
        names = {sha: name for name, (sha, _) in fencepost.redis_scripts().items()}
        names.update({source: name for name, (_, source) in fencepost.redis_scripts().items()})
        self._names = names
        self.calls: list[tuple[str, list[str]]] = []

    def record(self, script: str, numkeys: int, keys_and_args: tuple) -> None:  # type: ignore[type-arg]
        keys = [k.decode() if isinstance(k, bytes) else str(k) for k in keys_and_args[:numkeys]]
        self.calls.append((self._names.get(script, "?"), keys))

    def renewals(self) -> list[list[str]]:
        return [keys for name, keys in self.calls if name in ("renew", "renew_many")]


class _LoggingRedis(redis.Redis):  # type: ignore[type-arg]
    log: _ScriptLog

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: object) -> object:  # type: ignore[override]
        self.log.record(sha, numkeys, keys_and_args)
        return super().evalsha(sha, numkeys, *keys_and_args)

    def eval(self, script: str, numkeys: int, *keys_and_args: object) -> object:  # type: ignore[override]
        self.log.record(script, numkeys, keys_and_args)
        return super().eval(script, numkeys, *keys_and_args)


class _AsyncLoggingRedis(redis.asyncio.Redis):  # type: ignore[type-arg]
    log: _ScriptLog

    async def evalsha(self, sha: str, numkeys: int, *keys_and_args: object) -> object:  # type: ignore[override]
        self.log.record(sha, numkeys, keys_and_args)
        return await super().evalsha(sha, numkeys, *keys_and_args)

    async def eval(self, script: str, numkeys: int, *keys_and_args: object) -> object:  # type: ignore[override]
        self.log.record(script, numkeys, keys_and_args)
        return await super().eval(script, numkeys, *keys_and_args)


def test_forty_leases_renew_in_batches_and_stay_held(client: redis.Redis, prefix: str) -> None:
    """40 leases of one backend, ttl=0.6 (renewed every 0.2 s), held 1.5 s: every one
    stays held, and their renewals go as a few renew_many calls, not one call a lease."""
    logging = _LoggingRedis.from_url(URL, socket_timeout=5)
    logging.log = log = _ScriptLog()
    backend = RedisBackend(logging, key_prefix=prefix)
    leases = [fencepost.Lock(backend, f"b{i}", ttl=0.6).acquire_sync() for i in range(40)]
    time.sleep(1.5)
    for lease in leases:
        lease.check()
        assert lock_value(client, backend, lease.name) == lease.owner_id
    renewals = log.renewals()
    carried = sum(len(keys) for keys in renewals)
    assert carried >= 40 * 5, carried
    assert len(renewals) <= carried / 10, [len(keys) for keys in renewals]
    assert max(len(keys) for keys in renewals) == 40
    for lease in leases:
        lease.release()
    assert list(client.scan_iter(match=prefix + "*:lock")) == []
    logging.close()


async def test_asyncio_leases_renew_in_batches(client: redis.Redis, prefix: str) -> None:
    logging = _AsyncLoggingRedis.from_url(URL, socket_timeout=5)
    logging.log = log = _ScriptLog()
    backend = RedisBackend(logging, key_prefix=prefix)
    leases = [await fencepost.Lock(backend, f"a{i}", ttl=0.6).acquire() for i in range(20)]
    await asyncio.sleep(1.0)
    for lease in leases:
        lease.check()
        assert lock_value(client, backend, lease.name) == lease.owner_id
    renewals = log.renewals()
    assert max(len(keys) for keys in renewals) == 20
    assert len(renewals) <= sum(len(keys) for keys in renewals) / 5
    # one lease taken by an operator: only that one is lost at the next batch
    client.delete(backend.lock_key("a3"))
    await asyncio.wait_for(leases[3].lost.wait(), 2.0)
    assert leases[3].lost_reason == "renew_rejected"
    await asyncio.sleep(0.5)
    assert [lease.name for lease in leases if lease.lost_reason is not None] == ["a3"]
    for lease in leases[:3] + leases[4:]:
        await lease.release()
    await logging.aclose()


def test_close_releases_every_held_lock_on_redis(client: redis.Redis, prefix: str) -> None:
    backend = RedisBackend(client, key_prefix=prefix)
    # kept: a lease collected while held is released on its own
    leases = [fencepost.Lock(backend, f"c{i}", ttl=30.0).acquire_sync() for i in range(5)]
    assert len(list(client.scan_iter(match=prefix + "*:lock"))) == 5
    backend.close()
    assert all(lease.lost_reason == "closed" for lease in leases)
    assert wait_until(lambda: list(client.scan_iter(match=prefix + "*:lock")) == [], timeout=2.0), list(
        client.scan_iter(match=prefix + "*:lock")
    )


async def test_mismatched_client_modes_raise_config_error(client: redis.Redis, aclient: redis.asyncio.Redis, prefix: str) -> None:
    with pytest.raises(ConfigError, match="redis.asyncio.Redis client"):
        with fencepost.Lock(RedisBackend(aclient, key_prefix=prefix), "m"):
            pass
    with pytest.raises(ConfigError, match="blocking redis.Redis client"):
        async with fencepost.Lock(RedisBackend(client, key_prefix=prefix), "m"):
            pass
    with pytest.raises(ConfigError, match="must be a redis-py client"):
        RedisBackend(object())


def test_fenced_set_rejects_stale_tokens(client: redis.Redis, prefix: str) -> None:
    backend = RedisBackend(client, key_prefix=prefix)
    data, fence = prefix + "row", prefix + "row:fence"
    backend.fenced_set_sync(data, fence, 5, "five")
    backend.fenced_set_sync(data, fence, 5, "five again")  # same token: same lease
    backend.fenced_set_sync(data, fence, 7, "seven")
    with pytest.raises(StaleToken) as info:
        backend.fenced_set_sync(data, fence, 6, "six")
    assert (info.value.resource, info.value.token, info.value.highest) == (data, 6, 7)
    assert client.get(data) == b"seven"


def test_fenced_set_stores_bytes_values(client: redis.Redis, prefix: str) -> None:
    backend = RedisBackend(client, key_prefix=prefix)
    backend.fenced_set_sync(prefix + "row", prefix + "row:fence", 1, b"caf\xc3\xa9")
    assert client.get(prefix + "row") == "café".encode()
    with pytest.raises(ConfigError, match="value must be a str or bytes"):
        backend.fenced_set_sync(prefix + "row", prefix + "row:fence", 2, 2)  # type: ignore[arg-type]


def test_decode_responses_clients_work(prefix: str) -> None:
    c = redis.Redis.from_url(URL, decode_responses=True)
    backend = RedisBackend(c, key_prefix=prefix)
    with fencepost.Lock(backend, "dec", ttl=5.0) as lease:
        assert c.get(backend.lock_key("dec")) == lease.owner_id
        backend.fenced_set_sync(prefix + "d", prefix + "f", lease.token, "v")
    c.delete(backend.token_key("dec"), prefix + "d", prefix + "f")
    c.close()


def test_bad_options_are_refused_before_any_redis_traffic(client: redis.Redis, prefix: str) -> None:
    def script_calls() -> int:
        stats = client.info("commandstats")
        return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("evalsha", "eval"))

    backend = RedisBackend(client, key_prefix=prefix)
    before = script_calls()
    for kwargs in ({"ttl": 0}, {"ttl": -1.0}, {"ttl": float("nan")}, {"ttl": "30"}, {"ttl": 1.0, "renew_every": 2.0}):
        with pytest.raises(ConfigError):
            fencepost.Lock(backend, "cfg", **kwargs)  # type: ignore[arg-type]
    assert script_calls() == before
    assert client.exists(backend.lock_key("cfg"), backend.token_key("cfg")) == 0


@pytest.mark.parametrize("fair", [False, True])
def test_tokens_above_2_pow_53_come_back_exact(client: redis.Redis, prefix: str, fair: bool) -> None:
    # A token counter seeded from a clock (or long use) passes 2^53 and 10^14: the
    # scripts return the counter's string, never a Lua number (a double, which would
    # round, and print as 1e+17 in a fair grant).
    seed = 123_456_789_012_345_678
    client.set(f"{prefix}{{big}}:token", seed)
    backend = RedisBackend(client, key_prefix=prefix, fair=fair)
    lock = fencepost.Lock(backend, "big", ttl=5.0)
    assert lock.acquire_sync().token == seed + 1
    if fair:
        waiter = fencepost.Lock(RedisBackend(client, key_prefix=prefix, fair=True), "big", ttl=5.0)
        got = []
        t = threading.Thread(target=lambda: got.append(waiter.acquire_sync().token))
        t.start()
        assert wait_until(lambda: client.zcard(f"{prefix}{{big}}:queue") == 1, timeout=2.0)
        lock.release_sync()  # grants the lock to the waiter: its BLPOP brings the token
        t.join(5.0)
        assert got == [seed + 2]
        waiter.release_sync()
    else:
        lock.release_sync()
    backend.close()


# ---- token floor: liveness after tokens went backwards ----------------------------------


@pytest.mark.parametrize("fair", [False, True])
def test_token_floor_recovers_a_holder_the_fence_refused_after_a_regression(
    client: redis.Redis, prefix: str, fair: bool
) -> None:
    """A writes with token 5; the counter is lost (a restart without persistence); B is
    granted 1, which the fence refuses with highest 5; B acquires again with
    token_floor=highest + 1 and gets 6, which the fence accepts."""
    backend = RedisBackend(client, key_prefix=prefix, fair=fair)
    data, fence = prefix + "row", prefix + "row:fence"
    client.set(backend.token_key("floor"), 4)
    with fencepost.Lock(backend, "floor", ttl=5.0) as a:
        assert a.token == 5
        backend.fenced_set_sync(data, fence, a.token, "a", owner_id=a.owner_id)
    client.delete(backend.token_key("floor"))
    with fencepost.Lock(backend, "floor", ttl=5.0) as b:
        assert b.token == 1
        with pytest.raises(StaleToken) as refused:
            backend.fenced_set_sync(data, fence, b.token, "b", owner_id=b.owner_id)
    highest = refused.value.highest
    assert highest == 5
    with fencepost.Lock(backend, "floor", ttl=5.0, token_floor=highest + 1) as b:
        assert b.token == 6
        backend.fenced_set_sync(data, fence, b.token, "b", owner_id=b.owner_id)
    # a floor below the counter changes nothing: max(counter + 1, floor)
    with fencepost.Lock(backend, "floor", ttl=5.0, token_floor=2) as c:
        assert c.token == 7
    assert client.get(data) == b"b"


def test_a_fair_waiter_with_a_token_floor_is_handed_the_floor(client: redis.Redis, prefix: str) -> None:
    backend = RedisBackend(client, key_prefix=prefix, fair=True)
    holder = fencepost.Lock(backend, "ff", ttl=5.0)
    assert holder.acquire_sync().token == 1
    waiter = fencepost.Lock(RedisBackend(client, key_prefix=prefix, fair=True), "ff", ttl=5.0, token_floor=100)
    got = []
    t = threading.Thread(target=lambda: got.append(waiter.acquire_sync().token))
    t.start()
    assert wait_until(lambda: client.zcard(f"{prefix}{{ff}}:queue") == 1, timeout=2.0)
    holder.release_sync()  # the hand-off's INCR reaches the floor the waiter raised to
    t.join(5.0)
    assert got == [100]
    waiter.release_sync()


def test_the_memory_backend_counts_a_token_floor_as_real_redis_does(client: redis.Redis, prefix: str) -> None:
    real, memory = RedisBackend(client, key_prefix=prefix), fencepost.MemoryBackend()
    tokens = {}
    for name, backend in (("real", real), ("memory", memory)):
        got = []
        for floor in (None, 10, 3, 12):
            with fencepost.Lock(backend, "same", ttl=5.0, token_floor=floor) as lease:
                got.append(lease.token)
        tokens[name] = got
    assert tokens["real"] == tokens["memory"] == [1, 10, 11, 12]


def test_a_bad_token_floor_is_a_config_error_before_any_traffic(client: redis.Redis, prefix: str) -> None:
    backend = RedisBackend(client, key_prefix=prefix)
    for floor, match in ((0, "token_floor: must be in 1 ..= 2\\^63 - 1, got 0"), (2**63, "2\\^63 - 1"),
                         (-1, "token_floor must be None or an int"), (True, "token_floor must be None"),
                         ("5", "token_floor must be None")):
        with pytest.raises(ConfigError, match=match) as info:
            fencepost.Lock(backend, "cfg", token_floor=floor)  # type: ignore[arg-type]
        if floor == 0:
            assert info.value.option == "token_floor"
    assert client.exists(backend.lock_key("cfg"), backend.token_key("cfg")) == 0



def _wrong_password_url() -> str:
    admin = redis.Redis.from_url(URL)
    admin.acl_setuser("fencepost-test-login", enabled=True, passwords=["+right"], keys=["*"], commands=["+@all"])
    admin.close()
    return (URL or "").replace("redis://", "redis://fencepost-test-login:wrong@", 1)


def test_a_refused_login_fails_the_acquire_at_once() -> None:
    # redis-py raises the server's WRONGPASS as a ConnectionError: retried as an outage,
    # the lock would wait out its acquire timeout (forever without one)
    backend = fencepost.backend_from_url(_wrong_password_url())
    started = time.monotonic()
    try:
        with pytest.raises(ProtocolError, match="invalid username-password pair"):
            fencepost.Lock(backend, f"login-{uuid.uuid4().hex[:8]}", ttl=5.0, acquire_timeout=30.0).acquire_sync()
    finally:
        backend.close()
    assert time.monotonic() - started < 5.0


async def test_a_refused_login_fails_the_async_acquire_at_once() -> None:
    backend = fencepost.backend_from_url(_wrong_password_url(), asyncio=True)
    started = time.monotonic()
    try:
        with pytest.raises(ProtocolError, match="invalid username-password pair"):
            await fencepost.Lock(backend, f"login-{uuid.uuid4().hex[:8]}", ttl=5.0, acquire_timeout=30.0).acquire()
    finally:
        await backend.aclose()
    assert time.monotonic() - started < 5.0
