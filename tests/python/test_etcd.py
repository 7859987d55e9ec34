"""Integration tests against real etcd 3.4 on 127.0.0.1: one member at $FENCEPOST_ETCD_URL
(``scripts/test`` starts it with scripts/services/etcd.sh) and, for the failover test, a
3-member cluster this module starts itself with scripts/services/etcd-cluster.sh. Every
test uses lock names of its own."""

from __future__ import annotations

import asyncio
import base64
import json
import multiprocessing
import os
import queue
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest

import fencepost
from fencepost import _core
from fencepost.errors import ConfigError, LockLost, StaleToken

import etcd_contender
from conftest import wait_until

httpx = pytest.importorskip("httpx")
from fencepost.etcd import EtcdBackend  # noqa: E402  (needs httpx)

ETCD_URL = os.environ.get("FENCEPOST_ETCD_URL")
REPO = Path(__file__).resolve().parents[2]
SERVICES = REPO / "scripts" / "services"
needs_etcd = pytest.mark.skipif(
    not ETCD_URL,
    reason="FENCEPOST_ETCD_URL is not set (scripts/test starts etcd and sets it; or run "
    "scripts/services/etcd.sh start and export FENCEPOST_ETCD_URL=$(cat .state/etcd/url))",
)


@pytest.fixture
def name() -> str:
    return f"fp-{uuid.uuid4().hex[:12]}"


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def gateway(path: str, body: Dict[str, Any], url: str = "") -> Dict[str, Any]:
    """One raw JSON gateway call (the tests' own view of etcd)."""
    reply = httpx.post((url or ETCD_URL or "") + path, json=body, timeout=5.0)
    doc: Dict[str, Any] = json.loads(reply.text.split("\n", 1)[0])
    return doc.get("result", doc)


def keys_under(prefix: str, url: str = "") -> List[Tuple[str, int, int, int]]:
    """(key, create_revision, mod_revision, lease) of every key under ``prefix``, by key."""
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    doc = gateway("/v3/kv/range", {"key": b64(prefix), "range_end": b64(end)}, url)
    return [
        (
            base64.b64decode(kv["key"]).decode(),
            int(kv["create_revision"]),
            int(kv["mod_revision"]),
            int(kv.get("lease", "0")),
        )
        for kv in doc.get("kvs", [])
    ]


def lease_ttl(lease_id: int, url: str = "") -> int:
    return int(gateway("/v3/lease/timetolive", {"ID": str(lease_id)}, url).get("TTL", "-1"))


class Counting(EtcdBackend):
    """An EtcdBackend that counts the calls it runs, by path (blocking client)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: Dict[str, int] = {}
        self._count_lock = threading.Lock()

    def _execute_sync(self, command: Any) -> object:
        call = command.body if isinstance(command, _core.Request) else command
        with self._count_lock:
            self.calls[call.path] = self.calls.get(call.path, 0) + 1
        return super()._execute_sync(command)


# ---- without a server ---------------------------------------------------------------------


def test_configuration_errors() -> None:
    with pytest.raises(ConfigError, match="httpx.Client or httpx.AsyncClient"):
        EtcdBackend(object(), "http://127.0.0.1:2379")
    with httpx.Client() as client:
        with pytest.raises(ConfigError, match="http:// or https://"):
            EtcdBackend(client, "127.0.0.1:2379")
        with pytest.raises(ConfigError, match="at least one"):
            EtcdBackend(client, [])
        with pytest.raises(ConfigError, match="key_prefix"):
            EtcdBackend(client, "http://127.0.0.1:2379", key_prefix=3)  # type: ignore[arg-type]
        backend = EtcdBackend(client, ["http://127.0.0.1:2379/", "http://127.0.0.1:2381"])
        assert backend.endpoints == ("http://127.0.0.1:2379", "http://127.0.0.1:2381")
        assert backend.supports_sync and not backend.supports_async
        # etcd revisions never go backwards: correctness locks need no opt-in
        fencepost.Lock(backend, "money", purpose="correctness")
        # its tokens are create revisions the server alone assigns: no floor, never ignored
        with pytest.raises(ConfigError, match="token_floor: not supported on etcd") as info:
            fencepost.Lock(backend, "money", token_floor=42)
        assert info.value.option == "token_floor"
        with pytest.raises(ConfigError, match="fenced_txn"):
            backend.fenced_set_sync("k", "f", 1, "v")
        owner = "00" * 8 + "ff" * 8
        assert backend.holder_key("report", owner) == "fencepost/report/" + "0" * 15 + "1"
        assert _core.etcd_lease_id("80" + "00" * 15) == 1  # the sign bit is dropped, 0 → 1
        with pytest.raises(ConfigError, match="32 hex digits"):
            backend.holder_key("report", "xyz")


async def test_fenced_txn_refuses_a_lease_of_another_backend_before_sending() -> None:
    # port 9 (discard) on loopback: a request reaching it would fail in transport, not
    # with the ConfigError expected here
    memory = fencepost.MemoryBackend()
    with httpx.Client() as client:
        backend = EtcdBackend(client, "http://127.0.0.1:9")
        with fencepost.Lock(memory, "report", ttl=5.0) as sync_lease:
            with pytest.raises(ConfigError, match=r"^lease of lock 'report' was acquired on another backend"):
                backend.fenced_txn_sync(sync_lease, puts=[("k", "v")])
            with pytest.raises(ConfigError, match=r"^lease must be a Lease"):
                backend.fenced_txn_sync(object(), puts=[("k", "v")])  # type: ignore[arg-type]
    async with httpx.AsyncClient() as aclient:
        abackend = EtcdBackend(aclient, "http://127.0.0.1:9")
        async with fencepost.Lock(memory, "report", ttl=5.0) as lease:
            with pytest.raises(ConfigError, match="acquired on another backend"):
                await abackend.fenced_txn(lease, puts=[("k", "v")])


def test_requests_render_as_json_gateway_calls() -> None:
    machine = _core.Machine({"kind": "etcd", "key_prefix": "app/"}, seed=7)
    # ttl 2.5 s, efficiency, no timeout, retry 10-500 ms, renew ttl/3, drift 1 %, margin 2 ms
    lock = machine.acquire(
        0,
        "report",
        {
            "ttl": 2_500_000_000,
            "purpose": "efficiency",
            "accept_failover_risk": False,
            "acquire_timeout": None,
            "retry_base": 10_000_000,
            "retry_max": 500_000_000,
            "renew_every": None,
            "auto_renew": True,
            "drift_factor": 0.01,
            "clock_margin": 2_000_000,
        },
    )
    outputs, _ = machine.poll()
    (grant,) = [o for o in outputs if isinstance(o, _core.Request)]
    assert grant.kind == "etcd" and grant.operation == "acquire"
    call = grant.body
    assert isinstance(call, _core.EtcdCall)
    assert (call.call, call.path) == ("lease_grant", "/v3/lease/grant")
    body = json.loads(call.body)
    assert body["TTL"] == "3"  # 2.5 s rounded up to whole seconds
    assert int(body["ID"]) == _core.etcd_lease_id(machine.owner(lock) or "")
    assert json.loads(call.spec_json)["call"] == "lease_grant"
    machine.reply(1_000_000, grant.id, json.dumps({"header": {"revision": "1"}, "ID": body["ID"], "TTL": "3"}))
    outputs, _ = machine.poll()
    (txn,) = [o for o in outputs if isinstance(o, _core.Request)]
    assert txn.body.path == "/v3/kv/txn"
    put = json.loads(txn.body.body)["success"][0]["request_put"]
    assert base64.b64decode(put["key"]).decode().startswith("app/report/")
    # replies that are not JSON text are a protocol error, never a crash
    machine.reply(2_000_000, txn.id, 42)
    outputs, _ = machine.poll()
    assert any(getattr(o, "kind", None) == "acquire_failed" for o in outputs)


# ---- one member ---------------------------------------------------------------------------


@needs_etcd
async def test_acquire_renew_release_asyncio(name: str) -> None:
    """Held with token = the key's create revision; renewed by keep-alives past its TTL;
    release deletes the key and revokes the lease."""
    assert ETCD_URL
    async with httpx.AsyncClient(timeout=5.0) as client:
        backend = EtcdBackend(client, ETCD_URL)
        prefix = backend.lock_key(name)
        async with fencepost.Lock(backend, name, ttl=1.2, purpose="correctness") as lease:
            ((key, create_rev, _, lease_id),) = keys_under(prefix)
            assert key == backend.holder_key(name, lease.owner_id)
            assert lease.token == create_rev
            assert lease_id == _core.etcd_lease_id(lease.owner_id)
            assert 0 < lease.valid_for() <= 1.2
            await asyncio.sleep(2.5)  # > the 2 s lease: only keep-alives keep it
            lease.check()
            assert keys_under(prefix) == [(key, create_rev, create_rev, lease_id)]
        assert keys_under(prefix) == []
        assert wait_until(lambda: lease_ttl(lease_id) == -1, timeout=2.0), "lease not revoked"
        backend.close()


@needs_etcd
def test_waiters_are_granted_in_fifo_order_without_polling(name: str) -> None:
    """Three waiters queue behind a holder in arrival order; each watches its
    predecessor (a few calls while parked, not a poll loop) and is granted in turn."""
    assert ETCD_URL
    order: List[Tuple[str, int]] = []
    clients = [httpx.Client(timeout=5.0) for _ in range(4)]
    backends = [Counting(c, ETCD_URL) for c in clients]
    prefix = backends[0].lock_key(name)
    holder = fencepost.Lock(backends[0], name, ttl=3.0)
    first = holder.acquire_sync()
    threads = []

    def wait_turn(label: str, backend: EtcdBackend) -> None:
        with fencepost.Lock(backend, name, ttl=3.0, acquire_timeout=20.0) as lease:
            order.append((label, lease.token))
            time.sleep(0.05)

    for i, label in enumerate("BCD", start=1):
        t = threading.Thread(target=wait_turn, args=(label, backends[i]))
        t.start()
        threads.append(t)
        assert wait_until(lambda: len(keys_under(prefix)) == i + 1, timeout=5.0)
    parked = time.monotonic()
    time.sleep(1.5)
    for b in backends[1:]:
        # grant, txn (queued), watch; then per keep-alive interval (1 s): keep-alive,
        # txn, watch — never a retry loop
        assert sum(b.calls.values()) <= 9, b.calls
    assert time.monotonic() - parked < 3.0
    holder.release_sync()
    for t in threads:
        t.join(20)
    assert [label for label, _ in order] == ["B", "C", "D"]
    tokens = [first.token] + [token for _, token in order]
    assert tokens == sorted(tokens) and len(set(tokens)) == 4
    assert keys_under(prefix) == []
    for b, c in zip(backends, clients):
        b.close()
        c.close()


@needs_etcd
def test_eight_processes_never_overlap_and_the_fenced_log_is_in_token_order(name: str) -> None:
    """8 spawned processes × 4 sections (half asyncio): no overlap on CLOCK_MONOTONIC,
    tokens increase in order of start (FIFO by key creation), every fenced log entry
    applied, and in etcd's revision order the entries' tokens never go back."""
    assert ETCD_URL
    processes, rounds = 8, 4
    log_prefix = f"fplog/{name}/"
    ctx = multiprocessing.get_context("spawn")
    go = ctx.Barrier(processes + 1)
    out = ctx.Queue()
    workers = [
        ctx.Process(
            target=etcd_contender.run,
            args=([ETCD_URL], name, log_prefix, rounds, go, out, i % 2 == 1),
            name=f"etcd-{i}",
        )
        for i in range(processes)
    ]
    for w in workers:
        w.start()
    go.wait(60)
    records = []
    deadline = time.monotonic() + 90
    while len(records) < processes * rounds and time.monotonic() < deadline:
        try:
            records.append(out.get(timeout=1.0))
        except queue.Empty:
            if not any(w.is_alive() for w in workers):
                break
    for w in workers:
        w.join(timeout=max(1.0, deadline - time.monotonic()))
        if w.is_alive():
            w.kill()
            w.join(5)
    assert [w.exitcode for w in workers] == [0] * processes
    assert len(records) == processes * rounds
    records.sort()
    for before, after in zip(records, records[1:]):
        assert before[1] < after[0], f"critical sections overlap: {before} and {after}"
        assert before[2] < after[2], f"tokens do not increase in order of start: {before}, {after}"
    log = sorted(keys_under(log_prefix), key=lambda k: k[2])
    assert len(log) == processes * rounds
    tokens = [int(key[len(log_prefix):].split("-")[0]) for key, *_ in log]
    assert tokens == sorted(tokens)


@needs_etcd
def test_a_released_lease_cannot_write_through_the_fence(name: str) -> None:
    assert ETCD_URL
    with httpx.Client(timeout=5.0) as client:
        backend = EtcdBackend(client, ETCD_URL)
        old = fencepost.Lock(backend, name, ttl=2.0)
        with old as stale:
            backend.fenced_txn_sync(stale, puts=[(f"data/{name}", "old")])
        with fencepost.Lock(backend, name, ttl=2.0) as fresh:
            with pytest.raises(StaleToken) as refused:
                backend.fenced_txn_sync(stale, puts=[(f"data/{name}", "stale write")])
            assert refused.value.highest == fresh.token > stale.token
            backend.fenced_txn_sync(fresh, puts=[(f"data/{name}", "new")])
        with pytest.raises(StaleToken) as refused:
            backend.fenced_txn_sync(fresh, deletes=[f"data/{name}"])
        assert refused.value.highest == 0  # nobody holds it now
        value = gateway("/v3/kv/range", {"key": b64(f"data/{name}")})["kvs"][0]["value"]
        assert base64.b64decode(value) == b"new"
        backend.close()


class LoseFirstReleaseReply(EtcdBackend):
    """Runs the first release transaction, then holds its reply back until ``resume``
    is set and reports a transport error instead (the reply was lost)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.released = threading.Event()
        self.resume = threading.Event()
        self.dropped = False

    def _execute_sync(self, command: Any) -> object:
        reply = super()._execute_sync(command)
        is_release = isinstance(command, _core.Request) and command.operation == "release"
        if is_release and command.body.call == "txn" and not self.dropped:
            self.dropped = True
            self.released.set()
            self.resume.wait(10)
            raise httpx.ReadTimeout("reply lost (test)")
        return reply


@needs_etcd
def test_a_retried_release_after_a_lost_reply_does_not_delete_a_newer_key(name: str) -> None:
    assert ETCD_URL
    with httpx.Client(timeout=5.0) as c1, httpx.Client(timeout=5.0) as c2:
        first = LoseFirstReleaseReply(c1, ETCD_URL)
        second = EtcdBackend(c2, ETCD_URL)
        a = fencepost.Lock(first, name, ttl=3.0)
        lease_a = a.acquire_sync()
        outcome: List[BaseException] = []

        def release() -> None:
            try:
                a.release_sync()
            except BaseException as exc:  # the retry finds the key gone
                outcome.append(exc)

        releaser = threading.Thread(target=release)
        releaser.start()
        assert first.released.wait(5)  # A's key is deleted; its reply is "lost"
        with fencepost.Lock(second, name, ttl=3.0, acquire_timeout=5.0) as lease_b:
            assert lease_b.token > lease_a.token
            first.resume.set()  # now A retries its release
            releaser.join(10)
            assert not releaser.is_alive()
            ((key, rev, _, _),) = keys_under(first.lock_key(name))
            assert (key, rev) == (second.holder_key(name, lease_b.owner_id), lease_b.token)
            lease_b.check()
            second.fenced_txn_sync(lease_b, puts=[(f"data/{name}", "b")])
        assert all(isinstance(e, LockLost) for e in outcome), outcome
        first.close()
        second.close()


@needs_etcd
async def test_a_blackholed_keepalive_is_lost_at_the_validity_deadline(name: str) -> None:
    """SIGSTOP the member while a lease is held: no keep-alive is answered; the holder
    reports Lost at its validity deadline, not later, and its body is cancelled."""
    assert ETCD_URL
    async with httpx.AsyncClient(timeout=httpx.Timeout(5.0, connect=1.0)) as client:
        backend = EtcdBackend(client, ETCD_URL)
        lock = fencepost.Lock(backend, name, ttl=1.5, purpose="correctness")
        lost_at = 0
        deadline = 0
        with pytest.raises(LockLost) as raised:
            async with lock as lease:
                await asyncio.sleep(0.6)  # one renewal
                subprocess.run([str(SERVICES / "etcd.sh"), "pause"], check=True)
                try:
                    await asyncio.sleep(0.05)
                    deadline = lease.valid_until_ns
                    try:
                        await asyncio.wait_for(lease.lost.wait(), 5.0)
                    finally:
                        lost_at = time.monotonic_ns()
                    await asyncio.sleep(1)  # the body is cancelled here
                finally:
                    subprocess.run([str(SERVICES / "etcd.sh"), "resume"], check=True)
        assert raised.value.reason == "expired"
        late_ms = (lost_at - deadline) / 1e6
        assert 0 <= late_ms < 100, f"lost {late_ms:.1f} ms after the validity deadline"
        backend.close()
    assert wait_until(lambda: httpx.get(f"{ETCD_URL}/health").json().get("health") == "true", timeout=10)


# ---- one lease for many locks (shared_lease) ------------------------------------------------


@needs_etcd
def test_a_shared_lease_renews_fifty_locks_with_one_keep_alive_a_renew_period(name: str) -> None:
    """shared_lease=True: 50 locks of one TTL ride on one lease, granted once; holding them
    past the lease's TTL takes a few keep-alives, not 50 a renew period; a release deletes
    its key and leaves the lease to the others."""
    assert ETCD_URL
    with httpx.Client(timeout=2.0) as client:
        backend = Counting(client, ETCD_URL, shared_lease=True)
        assert backend.shared_lease
        names = [f"{name}-{i:02}" for i in range(50)]
        leases = [fencepost.Lock(backend, n, ttl=3, purpose="correctness").acquire_sync() for n in names]
        attached = {keys_under(backend.lock_key(n))[0][3] for n in names}
        assert len(attached) == 1, attached
        (lease_id,) = attached
        assert backend.calls.get("/v3/lease/grant") == 1, backend.calls
        kept = backend.calls.get("/v3/lease/keepalive", 0)
        time.sleep(4.5)  # > the 3 s lease: only keep-alives keep it; renew every 1 s
        for lease in leases:
            lease.check()
        renewals = backend.calls.get("/v3/lease/keepalive", 0) - kept
        # one or two groups a renew interval, over 4.5 intervals; 50 apiece would be 225
        assert 3 <= renewals <= 12, backend.calls
        first = leases[0]
        first.release()
        assert keys_under(backend.lock_key(names[0])) == []
        assert lease_ttl(lease_id) > 0, "the shared lease must outlive one lock's release"
        assert backend.calls.get("/v3/lease/revoke", 0) == 0
        for lease in leases[1:]:
            lease.check()
            lease.release()
        assert all(keys_under(backend.lock_key(n)) == [] for n in names)
        backend.close()


@needs_etcd
def test_a_revoked_shared_lease_loses_every_lock_on_it_and_the_next_lock_gets_a_new_one(name: str) -> None:
    assert ETCD_URL
    with httpx.Client(timeout=2.0) as client:
        backend = EtcdBackend(client, ETCD_URL, shared_lease=True)
        a = fencepost.Lock(backend, f"{name}-a", ttl=3).acquire_sync()
        b = fencepost.Lock(backend, f"{name}-b", ttl=3).acquire_sync()
        lease_id = keys_under(backend.lock_key(f"{name}-a"))[0][3]
        assert gateway("/v3/lease/revoke", {"ID": str(lease_id)}).get("header")
        # the next keep-alive (within a renew interval, 1 s) finds the lease gone
        assert wait_until(lambda: a.lost.is_set() and b.lost.is_set(), timeout=3.0)
        for lease in (a, b):
            with pytest.raises(LockLost):
                lease.check()
        c = fencepost.Lock(backend, f"{name}-c", ttl=3).acquire_sync()
        ((_, _, _, fresh),) = keys_under(backend.lock_key(f"{name}-c"))
        assert fresh not in (0, lease_id)
        c.release()
        backend.close()


@needs_etcd
async def test_a_leader_on_a_shared_lease_publishes_its_record_on_that_lease(name: str) -> None:
    """An election's record is a put with ignore_lease: the key stays on the shared
    lease, and followers read the record."""
    assert ETCD_URL
    async with httpx.AsyncClient(timeout=5.0) as client:
        backend = EtcdBackend(client, ETCD_URL, shared_lease=True)
        other = await fencepost.Lock(backend, f"{name}-other", ttl=3).acquire()
        election = fencepost.Election(backend, name, "pod-a", value="addr-a", ttl=3, purpose="correctness")
        leadership = await election.campaign()
        assert wait_until(
            lambda: bool(keys_under(backend.lock_key(name)))
            and keys_under(backend.lock_key(name))[0][2] > keys_under(backend.lock_key(name))[0][1],
            timeout=3.0,
        ), "the record was not published"
        ((_, _, _, lease_id),) = keys_under(backend.lock_key(name))
        assert lease_id == keys_under(backend.lock_key(f"{name}-other"))[0][3]
        follower = fencepost.Election(backend, name, "follower", ttl=3)
        assert await follower.leader() == fencepost.Leader("pod-a", "addr-a", leadership.token)
        await leadership.resign()
        await other.release()
        await backend.aclose()


# ---- three members: leader killed while the lock is held and waited for --------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[List[str]]:
    if not ETCD_URL:
        pytest.skip("FENCEPOST_ETCD_URL is not set (etcd is not installed or started)")
    script = str(SERVICES / "etcd-cluster.sh")
    urls = subprocess.run([script, "start"], check=True, capture_output=True, text=True).stdout
    try:
        yield urls.strip().split(",")
    finally:
        subprocess.run([script, "stop"], check=False)


async def _worker(
    urls: List[str], name: str, log_prefix: str, stop: asyncio.Event, sections: List[Tuple[int, int, int]]
) -> None:
    """Takes the lock again and again until ``stop``; each section writes two fenced
    log entries (start, end). Losing the lease (a failover can outlast a keep-alive) is
    allowed: the fence then refuses the stale holder's writes."""
    async with httpx.AsyncClient(timeout=httpx.Timeout(2.0, connect=0.5)) as client:
        backend = EtcdBackend(client, urls)
        lock = fencepost.Lock(backend, name, ttl=3.0, acquire_timeout=20.0, purpose="correctness")
        while not stop.is_set():
            try:
                async with lock as lease:
                    start = time.monotonic_ns()
                    await backend.fenced_txn(lease, puts=[(f"{log_prefix}{lease.token:012d}-a", "start")])
                    await asyncio.sleep(0.02)
                    await backend.fenced_txn(lease, puts=[(f"{log_prefix}{lease.token:012d}-b", "end")])
                    lease.check()
                    sections.append((start, time.monotonic_ns(), lease.token))
            except (LockLost, StaleToken, fencepost.BackendError, fencepost.ProtocolError):
                await asyncio.sleep(0.05)
        backend.close()


def test_leader_kill_while_held_and_waited_for_20_times(cluster: List[str], name: str) -> None:
    """20 rounds: three workers (one holding, two waiting) on every member's endpoint;
    SIGKILL the leader mid-section, let a new leader take over, bring the member back.
    Afterwards no two sections overlap, tokens increase, the fenced log is in token order
    and the lock is still usable."""
    script = str(SERVICES / "etcd-cluster.sh")
    log_prefix = f"fplog/{name}/"
    sections: List[Tuple[int, int, int]] = []

    async def rounds() -> None:
        stop = asyncio.Event()
        workers = [asyncio.create_task(_worker(cluster, name, log_prefix, stop, sections)) for _ in range(3)]
        for _ in range(20):
            before = len(sections)
            await asyncio.sleep(0.3)
            killed = await asyncio.to_thread(
                lambda: subprocess.run([script, "kill-leader"], check=True, capture_output=True, text=True).stdout
            )
            await asyncio.sleep(1.0)  # a new leader (0.7-1.3 s) with the member down
            await asyncio.to_thread(subprocess.run, [script, "restart", killed.split()[0]], check=True)
            deadline = time.monotonic() + 15
            while len(sections) < before + 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert len(sections) >= before + 2, f"lock not usable after killing {killed.strip()}"
        stop.set()
        await asyncio.wait_for(asyncio.gather(*workers), 30)

    asyncio.run(rounds())
    sections.sort()
    for before, after in zip(sections, sections[1:]):
        assert before[1] < after[0], f"sections overlap: {before} and {after}"
        assert before[2] < after[2], f"tokens do not increase: {before} and {after}"
    log = sorted(keys_under(log_prefix, cluster[0]), key=lambda k: k[2])
    tokens = [int(key[len(log_prefix):].split("-")[0]) for key, *_ in log]
    assert tokens == sorted(tokens), "a stale holder wrote after a newer one"
    with httpx.Client(timeout=5.0) as client:
        backend = EtcdBackend(client, cluster)
        with fencepost.Lock(backend, name, ttl=2.0, acquire_timeout=10.0) as lease:
            assert lease.token > sections[-1][2]
        backend.close()


class FreezableProxy:
    """A TCP forwarder to an etcd member on 127.0.0.1 that can stop forwarding while
    keeping its connections open: a member that hangs (stopped, partitioned)."""

    def __init__(self, target: str) -> None:
        import socket

        host, port = target.rsplit("//", 1)[1].rsplit(":", 1)
        self._target = (host, int(port))
        self.frozen = threading.Event()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket

        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._target)
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: Any, dst: Any) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                while self.frozen.is_set() and not self._closed:
                    time.sleep(0.01)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass

    def close(self) -> None:
        self._closed = True
        self._server.close()


@needs_etcd
def test_a_hung_member_fails_over_within_the_client_timeout(name: str) -> None:
    """The holder's member stops answering (connections stay open): each call ends at
    the client's timeout, the machine retries on the next member, the lease survives."""
    assert ETCD_URL
    proxy = FreezableProxy(ETCD_URL)
    try:
        with httpx.Client(timeout=0.4) as client:
            backend = EtcdBackend(client, [proxy.url, ETCD_URL])
            with fencepost.Lock(backend, name, ttl=3.0, purpose="correctness") as lease:
                proxy.frozen.set()  # renewals now go to a member that hangs
                time.sleep(4.0)  # > the 3 s ttl: only keep-alives on the other member keep it
                lease.check()
                ((key, rev, _, _),) = keys_under(backend.lock_key(name))
                assert rev == lease.token
            assert keys_under(backend.lock_key(name)) == []
            backend.close()
    finally:
        proxy.frozen.clear()
        proxy.close()
