"""Leader election (fencepost.Election): terms, their callbacks exactly once and in
order under resign, loss, cancel and close, on the in-memory backend; followers reading
the leader on etcd (and interoperating with etcdctl's ``concurrency.Election``); and 8
candidates in separate processes on each correctness backend, plus a leader stopped
past its lease, against the real servers ``scripts/test`` starts on 127.0.0.1."""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator, List, Tuple

import pytest

import fencepost
from fencepost.errors import AcquireTimeout, ConfigError, LockLost, StaleToken

sys.path.insert(0, os.path.dirname(__file__))
import election_contender  # noqa: E402
import kube_contender  # noqa: E402
from conftest import wait_until  # noqa: E402

ETCD_URL = os.environ.get("FENCEPOST_ETCD_URL")
PG_URL = os.environ.get("FENCEPOST_PG_URL")
ZK_HOSTS = os.environ.get("FENCEPOST_ZK_HOSTS")
KUBE_URL = os.environ.get("FENCEPOST_KUBE_URL")
KUBE_TOKEN = os.environ.get("FENCEPOST_KUBE_TOKEN", "")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class Calls:
    """Records the callbacks of an election, in order."""

    def __init__(self) -> None:
        self.seen: List[Tuple[Any, ...]] = []

    def started(self, leadership: Any) -> None:
        self.seen.append(("started", leadership.token))

    def stopped(self, leadership: Any, reason: str) -> None:
        self.seen.append(("stopped", leadership.token, reason))

    def options(self) -> dict[str, Any]:
        return dict(on_started_leading=self.started, on_stopped_leading=self.stopped)


# ---- one term's callbacks: exactly once, in order, whatever ends it ------------------------


def test_resign_ends_the_term_once_and_frees_the_lock_at_once(backend: fencepost.MemoryBackend) -> None:
    calls = Calls()

    async def main() -> None:
        a = fencepost.Election(backend, "jobs", "pod-a", value="10.0.0.1", ttl=30, **calls.options())
        b = fencepost.Election(backend, "jobs", "pod-b", ttl=30)
        leadership = await a.campaign()
        assert (leadership.identity, leadership.value, leadership.token) == ("pod-a", "10.0.0.1", 1)
        assert calls.seen == [("started", 1)]
        with pytest.raises(AcquireTimeout):
            await b.campaign(timeout=0)  # one leader at a time
        await leadership.resign()
        await leadership.resign()  # a second resign does nothing
        assert leadership.ended.is_set() and leadership.stop_reason == "resigned"
        with pytest.raises(ConfigError, match="ended"):
            leadership.check()
        # released, not left to expire: the next candidate leads at once, a later token
        start = time.monotonic()
        other = await b.campaign(timeout=1)
        assert time.monotonic() - start < 0.5 and other.token == 2
        await other.resign()

    asyncio.run(main())
    assert calls.seen == [("started", 1), ("stopped", 1, "resigned")]


def test_a_lost_lease_ends_the_term_and_cancels_the_work(backend: fencepost.MemoryBackend) -> None:
    calls = Calls()
    cancelled = []

    async def main() -> None:
        election = fencepost.Election(backend, "jobs", "pod-a", ttl=0.3, **calls.options())

        async def work(leadership: fencepost.Leadership) -> None:
            assert backend.server.delete_lock("jobs")  # someone deleted the key
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                cancelled.append(leadership.stop_reason)
                raise

        with pytest.raises(LockLost) as e:
            await asyncio.wait_for(election.run(work), 5)
        assert e.value.reason == "renew_rejected"

    asyncio.run(main())
    assert cancelled == ["renew_rejected"]
    assert calls.seen == [("started", 1), ("stopped", 1, "renew_rejected")]


def test_run_again_campaigns_after_a_loss_and_returns_the_work_s_result(backend: fencepost.MemoryBackend) -> None:
    calls = Calls()

    async def main() -> int:
        election = fencepost.Election(backend, "jobs", "pod-a", ttl=0.3, **calls.options())

        async def work(leadership: fencepost.Leadership) -> int:
            if leadership.token == 1:
                backend.server.delete_lock("jobs")
                await asyncio.sleep(10)  # cancelled by the loss
            return leadership.token * 10

        return await asyncio.wait_for(election.run(work, again=True), 5)

    assert asyncio.run(main()) == 20
    assert calls.seen == [
        ("started", 1), ("stopped", 1, "renew_rejected"), ("started", 2), ("stopped", 2, "resigned"),
    ]


def test_cancelling_the_leading_task_resigns_at_once(backend: fencepost.MemoryBackend) -> None:
    calls = Calls()

    async def main() -> None:
        election = fencepost.Election(backend, "jobs", "pod-a", ttl=30, **calls.options())
        started = asyncio.Event()

        async def work(leadership: fencepost.Leadership) -> None:
            started.set()
            await asyncio.sleep(60)

        task = asyncio.ensure_future(election.run(work))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # the lock was released, not left for its 30 s TTL
        assert not await backend.is_locked("jobs")

    asyncio.run(main())
    assert calls.seen == [("started", 1), ("stopped", 1, "cancelled")]


def test_a_cancelled_campaign_calls_nothing_and_leaves_nothing_held(backend: fencepost.MemoryBackend) -> None:
    calls = Calls()

    async def main() -> None:
        holder = await fencepost.Election(backend, "jobs", "pod-a", ttl=30).campaign()
        waiting = asyncio.ensure_future(
            fencepost.Election(backend, "jobs", "pod-b", ttl=30, **calls.options()).campaign()
        )
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await holder.resign()
        assert not await backend.is_locked("jobs")

    asyncio.run(main())
    assert calls.seen == []


class SlowReleases(fencepost.MemoryBackend):
    """Releases answer after ``delay_s``; the first ``stale`` proclaims raise StaleToken
    (etcd's "the key went between the grant and the record")."""

    def __init__(self, delay_s: float = 0.3, stale: int = 0) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.stale = stale

    async def _proclaim_async(self, lease: fencepost.Lease, record: Any) -> None:
        if self.stale > 0:
            self.stale -= 1
            raise StaleToken("the key went", resource="k", token=lease.token, highest=lease.token + 1)
        await super()._proclaim_async(lease, record)

    async def _execute_async(self, command: Any) -> object:
        if getattr(command, "operation", None) == "release":
            await asyncio.sleep(self.delay_s)
        return await super()._execute_async(command)


def test_a_term_whose_leadership_nobody_keeps_goes_on_leading() -> None:
    calls = Calls()
    backend = fencepost.MemoryBackend()

    async def main() -> None:
        election = fencepost.Election(backend, "jobs", "pod-a", ttl=1.0, **calls.options())
        await election.campaign()  # the callbacks drive the application: no reference kept
        gc.collect()
        await asyncio.sleep(0.5)  # renewals keep it past half its TTL
        gc.collect()
        assert backend.server.lock_owner("jobs") is not None
        assert calls.seen == [("started", 1)]
        await backend.aclose()

    asyncio.run(asyncio.wait_for(main(), 10))
    assert calls.seen == [("started", 1), ("stopped", 1, "closed")]


def test_a_resign_whose_await_is_cancelled_still_ends_the_term() -> None:
    calls = Calls()
    backend = SlowReleases()

    async def main() -> None:
        leadership = await fencepost.Election(backend, "jobs", "pod-a", ttl=30, **calls.options()).campaign()
        resigning = asyncio.ensure_future(leadership.resign())
        await asyncio.sleep(0.05)  # the release is in flight
        resigning.cancel()
        with pytest.raises(asyncio.CancelledError):
            await resigning
        assert leadership.ended.is_set() and leadership.stop_reason == "resigned"
        await asyncio.sleep(0.5)
        assert backend.server.lock_owner("jobs") is None  # the release completed
        await backend.aclose()

    asyncio.run(asyncio.wait_for(main(), 10))
    assert calls.seen == [("started", 1), ("stopped", 1, "resigned")]


def test_a_campaign_cancelled_while_it_releases_a_stale_grant_is_cancelled() -> None:
    calls = Calls()
    backend = SlowReleases(stale=1)

    async def main() -> None:
        election = fencepost.Election(backend, "jobs", "pod-a", ttl=30, **calls.options())
        campaign = asyncio.ensure_future(election.campaign())
        await asyncio.sleep(0.1)  # the first grant's record failed: its release is in flight
        campaign.cancel()
        with pytest.raises(asyncio.CancelledError):
            await campaign
        await asyncio.sleep(0.5)
        assert backend.server.lock_owner("jobs") is None
        await backend.aclose()

    asyncio.run(asyncio.wait_for(main(), 10))
    assert calls.seen == []


def test_closing_the_backend_ends_the_term_with_closed(backend: fencepost.MemoryBackend) -> None:
    calls = Calls()

    async def main() -> None:
        leadership = await fencepost.Election(backend, "jobs", "pod-a", ttl=30, **calls.options()).campaign()
        backend.close()
        await asyncio.wait_for(leadership.ended.wait(), 2)
        assert leadership.stop_reason == "closed"
        await leadership.resign()  # after the end: nothing, and no error

    asyncio.run(main())
    assert calls.seen == [("started", 1), ("stopped", 1, "closed")]


def test_threads_get_the_same_terms_with_a_threading_event(backend: fencepost.MemoryBackend) -> None:
    calls = Calls()
    election = fencepost.Election(backend, "jobs", "pod-a", ttl=0.3, **calls.options())
    # resign
    leadership = election.campaign_sync()
    assert isinstance(leadership.ended, threading.Event) and not leadership.ended.is_set()
    leadership.resign()
    assert leadership.ended.is_set()
    # loss: the watcher thread ends the term within the lease's renew interval
    leadership = election.campaign_sync()
    backend.server.delete_lock("jobs")
    assert leadership.ended.wait(2) and leadership.stop_reason == "renew_rejected"
    with pytest.raises(LockLost):
        leadership.check()
    # run_sync: the work's result, resigned after it
    assert election.run_sync(lambda l: l.token) == 3
    # close
    leadership = election.campaign_sync()
    backend.close()
    assert leadership.ended.wait(2) and leadership.stop_reason == "closed"
    assert wait_until(lambda: len(calls.seen) == 8)
    assert calls.seen == [
        ("started", 1), ("stopped", 1, "resigned"),
        ("started", 2), ("stopped", 2, "renew_rejected"),
        ("started", 3), ("stopped", 3, "resigned"),
        ("started", 4), ("stopped", 4, "closed"),
    ]


def test_run_sync_campaigns_again_after_a_lost_term_or_raises_lock_lost(backend: fencepost.MemoryBackend) -> None:
    calls = Calls()
    election = fencepost.Election(backend, "jobs", "pod-a", ttl=0.3, **calls.options())

    def work(leadership: fencepost.SyncLeadership) -> int:
        if leadership.token == 1:
            backend.server.delete_lock("jobs")
            assert leadership.ended.wait(2)  # a thread sees the end by the event
            with pytest.raises(LockLost):
                leadership.check()
        return leadership.token

    assert election.run_sync(work, again=True) == 2
    backend.server.delete_lock("jobs")  # nobody holds it: the next term is 3

    def lose(leadership: fencepost.SyncLeadership) -> None:
        backend.server.delete_lock("jobs")
        assert leadership.ended.wait(2)

    with pytest.raises(LockLost) as e:
        election.run_sync(lose)
    assert e.value.reason == "renew_rejected"
    assert wait_until(lambda: len(calls.seen) == 6)
    assert calls.seen == [
        ("started", 1), ("stopped", 1, "renew_rejected"),
        ("started", 2), ("stopped", 2, "resigned"),
        ("started", 3), ("stopped", 3, "renew_rejected"),
    ]


def test_a_resign_that_finds_the_lease_gone_is_a_lost_term_not_a_result(backend: fencepost.MemoryBackend) -> None:
    calls = Calls()

    async def main() -> None:
        election = fencepost.Election(backend, "jobs", "pod-a", ttl=30, **calls.options())

        async def work(leadership: fencepost.Leadership) -> str:
            backend.server.delete_lock("jobs")  # gone before any renewal noticed
            return "done"

        with pytest.raises(LockLost) as e:
            await election.run(work)
        assert e.value.reason == "not_held_at_release"

    asyncio.run(main())
    assert calls.seen == [("started", 1), ("stopped", 1, "not_held_at_release")]


def test_bad_arguments_are_refused_when_the_election_is_built(backend: fencepost.MemoryBackend) -> None:
    with pytest.raises(ConfigError, match="identity"):
        fencepost.Election(backend, "jobs", "")
    with pytest.raises(ConfigError, match="value"):
        fencepost.Election(backend, "jobs", "a", value=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="auto_renew"):
        fencepost.Election(backend, "jobs", "a", auto_renew=False)
    with pytest.raises(ConfigError, match="on_started_leading"):
        fencepost.Election(backend, "jobs", "a", on_started_leading=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unsafe"):
        fencepost.Election(backend, "jobs", "a", purpose="correctness")  # Redis semantics
    # a fair Redis hand-off stores no metadata, hence no leader's record
    with pytest.raises(ConfigError, match="cannot say who leads"):
        fencepost.Election(fencepost.MemoryBackend(fair=True), "jobs", "a").leader_sync()


@pytest.mark.parametrize("kind", ["memory", "redis"])
def test_followers_read_the_leader_from_its_metadata_on_plain_redis(kind: str) -> None:
    url = os.environ.get("FENCEPOST_REDIS_URL")
    if kind == "redis" and not url:
        pytest.skip("FENCEPOST_REDIS_URL is not set (scripts/test sets it)")
    name = unique("follow")

    async def main() -> List[Any]:
        if kind == "memory":
            backend: fencepost.Backend = fencepost.MemoryBackend()
        else:
            import redis.asyncio

            from fencepost.redis import RedisBackend

            backend = RedisBackend(redis.asyncio.Redis.from_url(url or ""))
        follower = fencepost.Election(backend, name, "follower", ttl=3)
        assert await follower.leader() is None
        seen: List[Any] = []

        async def watch() -> None:
            async for leader in follower.observe(interval=0.02):
                seen.append(leader)

        watcher = asyncio.ensure_future(watch())
        await asyncio.sleep(0.1)  # the watcher has seen nobody leading
        tokens = []
        for who in ("pod-a", "pod-b"):
            e = fencepost.Election(backend, name, who, value=f"addr-{who}", ttl=3)
            leadership = await e.campaign()
            tokens.append(leadership.token)
            assert await follower.leader() == fencepost.Leader(who, f"addr-{who}", leadership.token)
            await asyncio.sleep(0.2)  # terms longer than the observation interval
            await leadership.resign()
            await asyncio.sleep(0.2)
        watcher.cancel()
        await backend.aclose()
        return [seen, tokens]

    seen, tokens = asyncio.run(main())
    assert seen == [
        None,
        fencepost.Leader("pod-a", "addr-pod-a", tokens[0]),
        None,
        fencepost.Leader("pod-b", "addr-pod-b", tokens[1]),
        None,
    ]


# ---- followers on etcd ---------------------------------------------------------------------

needs_etcd = pytest.mark.skipif(not ETCD_URL, reason="FENCEPOST_ETCD_URL is not set")


@pytest.fixture
def etcd() -> Iterator[Any]:
    if not ETCD_URL:
        pytest.skip("FENCEPOST_ETCD_URL is not set")
    import httpx

    from fencepost.etcd import EtcdBackend

    with httpx.Client(timeout=5.0) as client:
        b = EtcdBackend(client, [ETCD_URL])
        yield b
        b.close()


@needs_etcd
def test_followers_observe_every_change_of_leader_in_order() -> None:
    import httpx

    from fencepost.etcd import EtcdBackend

    name = unique("observe")

    async def main() -> List[Any]:
        async with httpx.AsyncClient(timeout=5.0) as client:
            backend = EtcdBackend(client, [ETCD_URL])  # type: ignore[list-item]
            follower = fencepost.Election(backend, name, "follower", ttl=3)
            seen: List[Any] = []

            async def watch() -> None:
                async for leader in follower.observe(interval=0.02):
                    seen.append(leader)

            watcher = asyncio.ensure_future(watch())
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
            await backend.aclose()
            return [seen, tokens]

    seen, tokens = asyncio.run(main())
    expect: List[Any] = [None]
    for who, token in zip(("pod-a", "pod-b", "pod-c"), tokens):
        expect += [fencepost.Leader(who, f"addr-{who}", token), None]
    assert seen == expect


@needs_etcd
def test_etcdctl_elect_and_fencepost_exclude_each_other_and_see_each_other_s_leader(etcd: Any) -> None:
    # etcdctl elect is etcd's own concurrency.Election: keys {election}/{lease hex}, the
    # lowest create revision leads; fencepost's election "x" is etcd's "{key_prefix}x"
    name = unique("interop")
    election = f"{etcd.key_prefix}{name}"
    env = dict(os.environ, ETCDCTL_API="3")
    leadership = fencepost.Election(etcd, name, "pod-a", value="v1", ttl=3, purpose="correctness").campaign_sync()
    proc = subprocess.Popen(
        ["etcdctl", f"--endpoints={ETCD_URL}", "elect", election, "etcdctl-value"],
        env=env, stdout=subprocess.PIPE, text=True,
    )
    try:
        time.sleep(1.0)
        assert proc.poll() is None  # waiting: fencepost leads
        # etcd's Leader() reads the fencepost leader's key: its value is the record
        out = subprocess.run(
            ["etcdctl", f"--endpoints={ETCD_URL}", "get", "--prefix", f"{election}/",
             "--sort-by=CREATE", "--order=ASCEND", "--print-value-only"],
            env=env, capture_output=True, text=True, timeout=10, check=True,
        ).stdout.split("\n")
        assert out[0] == '{"identity":"pod-a","value":"v1"}'
        leadership.resign()
        # etcdctl leads next (it prints its key and value once elected)
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith(f"{election}/"), line
        leader = fencepost.Election(etcd, name, "follower").leader_sync()
        assert leader is not None and leader.identity is None and leader.value == "etcdctl-value"
        assert leader.token > leadership.token
        # and fencepost waits while etcdctl leads
        with pytest.raises(AcquireTimeout):
            fencepost.Election(etcd, name, "pod-b", ttl=3).campaign_sync(timeout=0.5)
    finally:
        proc.send_signal(signal.SIGINT)  # etcdctl resigns on interrupt
        proc.wait(10)
    leadership = fencepost.Election(etcd, name, "pod-b", ttl=3).campaign_sync(timeout=10)
    leadership.resign()


# ---- 8 candidates in separate processes, on each correctness backend -------------------------


def backends_available() -> List[Any]:
    kinds = []
    for kind, conn in (
        ("etcd", ETCD_URL),
        ("postgres", PG_URL),
        ("zookeeper", ZK_HOSTS),
        ("kubernetes", f"{KUBE_URL} {KUBE_TOKEN}" if KUBE_URL else None),
    ):
        kinds.append(pytest.param(kind, conn, marks=pytest.mark.skipif(not conn, reason=f"no {kind} server"), id=kind))
    return kinds


def prepare(kind: str, conn: str) -> None:
    if kind == "postgres":
        import psycopg

        from fencepost.postgres import PostgresBackend

        with psycopg.connect(conn, autocommit=True) as c:
            PostgresBackend(c).migrate_sync()


@pytest.mark.parametrize("kind,conn", backends_available())
def test_eight_candidate_processes_lead_one_at_a_time_with_a_fenced_log_in_token_order(
    kind: str, conn: str, tmp_path: Path
) -> None:
    prepare(kind, conn)
    name, log = unique("eight"), str(tmp_path / "fenced.log")
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    terms = 3
    procs = [
        ctx.Process(target=election_contender.run, args=(kind, conn, name, log, terms, go, out, i % 2 == 1))
        for i in range(8)
    ]
    for p in procs:
        p.start()
    go.set()
    spans = [out.get(timeout=180) for _ in range(8 * terms)]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    spans.sort()
    for a, b in zip(spans, spans[1:]):
        assert a[1] <= b[0], f"two leaders at once: {a[:4]} and {b[:4]}"
    tokens = [s[2] for s in spans]
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
    # each term's callbacks: started, then stopped (resigned), exactly once
    for s in spans:
        assert s[4] == [("started", s[2]), ("stopped", s[2], "resigned")], s
    assert [e[0] for e in kube_contender.read_log(log)] == tokens


@pytest.mark.parametrize("kind,conn", backends_available())
def test_a_leader_stopped_past_its_lease_is_replaced_its_work_cancelled_and_its_write_refused(
    kind: str, conn: str, tmp_path: Path
) -> None:
    prepare(kind, conn)
    name, log = unique("stopped"), str(tmp_path / "fenced.log")
    ctx = multiprocessing.get_context("spawn")
    leading, out = ctx.Event(), ctx.Queue()
    p = ctx.Process(target=election_contender.lead_then_write, args=(kind, conn, name, log, leading, out))
    p.start()
    backend = election_contender.make_backend(kind, conn, False)
    try:
        assert leading.wait(30)
        os.kill(p.pid, signal.SIGSTOP)  # a GC pause, a frozen VM
        calls = Calls()
        new = fencepost.Election(backend, name, "new", ttl=2, purpose="correctness", **calls.options())
        leadership = new.campaign_sync(timeout=20)
        assert kube_contender.fenced_append(log, leadership.token, leadership.owner_id, "new leader")
        os.kill(p.pid, signal.SIGCONT)
        cancelled, stopped, refused, old_token = out.get(timeout=30)
        assert cancelled and refused
        assert len(stopped) == 1 and stopped[0] in ("expired", "renew_rejected")
        assert leadership.token > old_token
        leadership.resign()
        assert calls.seen == [("started", leadership.token), ("stopped", leadership.token, "resigned")]
    finally:
        os.kill(p.pid, signal.SIGCONT)
        p.join(30)
        backend.close()
    assert [e[2] for e in kube_contender.read_log(log)] == ["first", "new leader"]


# ---- Kubernetes: an API server that hangs while the leader renews --------------------------


def kube_control(what: str, **body: Any) -> None:
    import json

    import httpx

    r = httpx.post(f"{KUBE_URL}/_control/{what}", headers={"Authorization": f"Bearer {KUBE_TOKEN}"},
                   content=json.dumps(body), timeout=5.0)
    assert r.status_code == 200, r.text


@pytest.mark.skipif(not KUBE_URL, reason="FENCEPOST_KUBE_URL is not set")
def test_a_kubernetes_api_server_hanging_while_the_leader_renews_ends_the_term_on_time() -> None:
    calls = Calls()
    cancelled = []

    async def main() -> None:
        b = kube_contender.backend(KUBE_URL or "", KUBE_TOKEN, use_async=True, timeout=5.0)
        election = fencepost.Election(b, unique("hang"), "pod-a", ttl=3, purpose="correctness", **calls.options())

        async def work(leadership: fencepost.Leadership) -> None:
            kube_control("hang_puts", on=True)  # every renewal hangs from now on
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append((time.monotonic_ns(), leadership.lease.valid_until_ns))
                raise

        start = time.monotonic_ns()
        try:
            with pytest.raises(LockLost) as e:
                await asyncio.wait_for(election.run(work), 10)
            assert e.value.reason == "expired"
        finally:
            kube_control("hang_puts", on=False)
        # cancelled at the validity of the last renewal that completed, never later
        (at, valid_until), = cancelled
        assert at <= valid_until + 150_000_000, (at - valid_until) / 1e6
        assert at - start < 3.2e9
        await b.aclose()
        await b.client.aclose()

    asyncio.run(main())
    token = calls.seen[0][1]
    assert calls.seen == [("started", token), ("stopped", token, "expired")]
