"""The ZooKeeper adapter (kazoo) against a real ZooKeeper 3.8 on 127.0.0.1
(``FENCEPOST_ZK_HOSTS``, started by scripts/test with scripts/services/zookeeper.sh);
the failover test starts its own 3-member ensemble
(scripts/services/zookeeper-ensemble.sh)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator, List, Tuple

import pytest

import fencepost
import zk_contender

HOSTS = os.environ.get("FENCEPOST_ZK_HOSTS")
REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not HOSTS, reason="FENCEPOST_ZK_HOSTS not set (scripts/test sets it)")


def backend(hosts: str = "", timeout: float = 4.0, **kw: Any) -> Any:
    from kazoo.client import KazooClient

    from fencepost.zookeeper import ZooKeeperBackend

    return ZooKeeperBackend(KazooClient(hosts=hosts or HOSTS, timeout=timeout), **kw)


@pytest.fixture
def zk() -> Iterator[Any]:
    b = backend()
    yield b
    b.close()
    b.client.stop()
    b.client.close()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def no_overlap(spans: List[Tuple[int, int, int, int]]) -> None:
    spans = sorted(spans)
    for a, b in zip(spans, spans[1:]):
        assert a[1] <= b[0], f"critical sections overlap: {a} and {b}"


def test_the_negotiated_session_timeout_bounds_the_ttl(zk: Any) -> None:
    # the server's minSessionTimeout is 1 s, max 30 s: 4 s is granted as asked
    assert zk.session_timeout == 4.0
    with pytest.raises(fencepost.ConfigError, match="session timeout the server negotiated"):
        fencepost.Lock(zk, "r", ttl=5.0)
    b = backend(timeout=0.2)  # below the server's minimum: it negotiates 1 s
    try:
        assert b.session_timeout == 1.0
    finally:
        b.close()
        b.client.stop()


def test_token_is_the_czxid_and_release_deletes_the_node(zk: Any) -> None:
    name = unique("tok")
    lock = fencepost.Lock(zk, name, ttl=zk.session_timeout, purpose="correctness")
    with lock as lease:
        (child,) = zk.client.get_children(zk.lock_path(name))
        assert child.startswith(zk.node_prefix(name, lease.owner_id))
        stat = zk.client.exists(f"{zk.lock_path(name)}/{child}")
        assert lease.token == stat.czxid
        assert stat.ephemeralOwner == zk.session_id
    assert zk.client.get_children(zk.lock_path(name)) == []
    with lock as second:
        assert second.token > lease.token


def test_fifo_hand_off_of_three_waiters_without_polling(zk: Any) -> None:
    name = unique("fifo")
    opts = dict(ttl=zk.session_timeout, acquire_timeout=20.0)
    calls: List[str] = []
    run = zk._calls

    def counting(spec: Any) -> Any:
        calls.append(spec["call"])
        return run(spec)

    zk._calls = counting
    holder = fencepost.Lock(zk, name, **opts).acquire_sync()
    order: List[int] = []
    threads = []
    for i in range(3):
        def wait(i: int = i) -> None:
            with fencepost.Lock(zk, name, **opts):
                order.append(i)
                time.sleep(0.05)

        t = threading.Thread(target=wait)
        t.start()
        threads.append(t)
        # queued in this order: its node exists before the next starts
        deadline = time.monotonic() + 5
        while len(zk.client.get_children(zk.lock_path(name))) < i + 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    time.sleep(1.0)
    before = calls.count("children")
    time.sleep(1.0)
    # a second of waiting: watches, not polls; a waiter checks its place once per renew
    # interval (4 s / 3), so at most once each in the second
    assert calls.count("children") - before <= 3, calls
    holder.release()
    for t in threads:
        t.join(20)
    assert order == [0, 1, 2]
    # each waiter: one listing when queued, one per wake-up of its predecessor
    assert calls.count("watch") <= 3 * 2, calls


def test_close_wakes_a_waiter_parked_on_its_watch_at_once() -> None:
    b = backend(timeout=10.0)  # a waiter's watch lasts up to a renew interval: 10 s / 3
    other = backend()  # the holder, on a session of its own: b's close does not free it
    name = unique("close")
    try:
        holder = fencepost.Lock(other, name, ttl=other.session_timeout).acquire_sync()
        failed: List[BaseException] = []

        def wait() -> None:
            try:
                fencepost.Lock(b, name, ttl=b.session_timeout, acquire_timeout=20.0).acquire_sync()
            except fencepost.BackendError as exc:
                failed.append(exc)

        t = threading.Thread(target=wait)
        t.start()
        deadline = time.monotonic() + 5
        while len(b.client.get_children(b.lock_path(name))) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.2)  # parked on the watch of the holder's node
        closed = time.monotonic()
        b.close()
        t.join(5)
        assert failed and time.monotonic() - closed < 1.0, (failed, time.monotonic() - closed)
        holder.release()
    finally:
        for x in (b, other):
            x.close()
            x.client.stop()
            x.client.close()


def test_kazoo_lock_and_fencepost_on_one_path_never_overlap() -> None:
    name = unique("mix")
    log = f"/log/{name}"
    b = backend()
    try:
        b.client.ensure_path(log)
    finally:
        b.close()
        b.client.stop()
    spans = _contend([("kazoo", False), ("fencepost", False), ("kazoo", False), ("fencepost", True)], name, 15, log)
    no_overlap(spans)
    assert len(spans) == 60


def test_eight_processes_with_a_fenced_log_never_overlap_and_log_tokens_in_grant_order(zk: Any) -> None:
    name = unique("eight")
    log = f"/log/{name}"
    zk.client.ensure_path(log)
    spans = _contend([("fencepost", i % 2 == 1) for i in range(8)], name, 10, log)
    no_overlap(spans)
    assert len(spans) == 80
    entries = sorted(zk.client.get_children(log))
    tokens = [int(zk.client.get(f"{log}/{e}")[0]) for e in entries]
    assert len(tokens) == 80
    assert tokens == sorted(tokens) and len(set(tokens)) == 80, "the log is in token order"
    assert [s[2] for s in sorted(spans)] == tokens


def _contend(kinds: List[Tuple[str, bool]], name: str, rounds: int, log: str) -> List[Tuple[int, int, int, int]]:
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=zk_contender.run, args=(HOSTS, kind, name, log, rounds, go, out, use_async))
        for kind, use_async in kinds
    ]
    for p in procs:
        p.start()
    time.sleep(1.5)  # imports and sessions
    go.set()
    spans = [out.get(timeout=90) for _ in range(len(kinds) * rounds)]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    return spans


def test_a_holder_stopped_past_its_session_is_replaced_and_its_work_cancelled_and_refused() -> None:
    zk = backend(root="/locks")
    name = unique("stop")
    log = f"/log/{name}"
    zk.client.ensure_path(log)
    ctx = multiprocessing.get_context("spawn")
    held, out = ctx.Event(), ctx.Queue()
    p = ctx.Process(target=zk_contender.hold_then_write, args=(HOSTS, name, log, held, out))
    p.start()
    assert held.wait(30)
    os.kill(p.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        # the paused holder's session (2 s) expires on the server; another takes over
        with fencepost.Lock(zk, name, ttl=zk.session_timeout, acquire_timeout=15.0) as lease:
            took = time.monotonic() - t0
            assert 1.5 < took < 8.0, took
            os.kill(p.pid, signal.SIGCONT)
            outcome, refused = out.get(timeout=20)
            lease.check()
        assert zk.client.get_children(log) == [], "the stale write was refused"
    finally:
        os.kill(p.pid, signal.SIGCONT)
        p.join(20)
        zk.close()
        zk.client.stop()
    assert outcome == "lost" and refused


def _server_pid() -> int:
    state = Path(os.environ.get("FENCEPOST_STATE", REPO / ".state")) / "zookeeper" / "zk.pid"
    return int(state.read_text())


def test_a_short_disconnection_keeps_the_lock_and_a_long_one_loses_it_on_time() -> None:
    b = backend(timeout=4.0)
    pid = _server_pid()
    try:
        lock = fencepost.Lock(b, unique("cut"), ttl=b.session_timeout)
        lease = lock.acquire_sync()
        os.kill(pid, signal.SIGSTOP)
        time.sleep(1.0)  # a quarter of the session
        os.kill(pid, signal.SIGCONT)
        time.sleep(2.0)
        assert not lease.lost.is_set(), "a short disconnection keeps the lock"
        lease.check()
        os.kill(pid, signal.SIGSTOP)
        t0 = time.monotonic()
        assert lease.lost.wait(8.0)
        took = time.monotonic() - t0
        # lost by the validity deadline: at most ttl × 0.99 after the last answered send
        assert took < 4.0 * 0.99, took
        with pytest.raises(fencepost.LockLost):
            lease.check()
    finally:
        os.kill(pid, signal.SIGCONT)
        b.close()
        b.client.stop()


def _ensemble(*args: str) -> str:
    return subprocess.run(
        [str(REPO / "scripts/services/zookeeper-ensemble.sh"), *args],
        check=True, capture_output=True, text=True, timeout=90,
    ).stdout.strip()


def test_killing_the_ensemble_leader_repeatedly_never_grants_twice_and_tokens_rise() -> None:
    hosts = _ensemble("start")
    try:
        name = unique("failover")
        spans: List[Tuple[int, int, int, int]] = []
        stop = threading.Event()
        errors: List[BaseException] = []

        def contend() -> None:
            b = backend(hosts, timeout=6.0)
            lock = fencepost.Lock(b, name, ttl=b.session_timeout, acquire_timeout=60.0, purpose="correctness")
            try:
                while not stop.is_set():
                    try:
                        with lock as lease:
                            start = time.monotonic_ns()
                            time.sleep(0.2)
                            lease.check()
                            spans.append((start, time.monotonic_ns(), lease.token, 0))
                    except fencepost.LockLost:
                        pass  # a loss during a failover: the next round takes it again
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
            finally:
                b.close()
                b.client.stop()

        workers = [threading.Thread(target=contend) for _ in range(2)]
        for w in workers:
            w.start()
        kills = int(os.environ.get("FENCEPOST_ZK_KILLS", "5"))
        for _ in range(kills):
            time.sleep(1.5)
            killed = _ensemble("kill-leader").split()[0]
            time.sleep(1.0)
            _ensemble("restart", killed)
        time.sleep(2.0)
        stop.set()
        for w in workers:
            w.join(60)
        assert not errors, errors
        no_overlap(spans)
        tokens = [s[2] for s in sorted(spans)]
        assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
        assert len(spans) >= kills, spans
    finally:
        _ensemble("stop")
