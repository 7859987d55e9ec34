"""ZooKeeper rows of scripts/bench: fencepost's ZooKeeperBackend beside kazoo's Lock.

usage: zookeeper.py --hosts HOST:PORT [--cycles N] [--workers W] [--seconds S] [--md FILE] [--json FILE]

  fencepost-zk-sync   fencepost.Lock(ZooKeeperBackend(KazooClient)) .acquire_sync(), lease.release()
  fencepost-zk-async  the same with await .acquire(), await lease.release() (kazoo calls on worker threads)
  kazoo               kazoo.recipe.lock.Lock(client, path) .acquire() / .release()

Each with a 10 s session (the lock's ttl is the negotiated session timeout).
uncontended: one process, 20 warm-up then `cycles` acquire+release cycles, timed with
perf_counter_ns: p50 / p99 in µs. contended: `workers` processes on one lock for
`seconds`, each holding 1 ms per grant: grants per second (all workers), and an
occupancy check in a shared counter (two holders at once fail the run). --json: the
markdown and the rows for bench/report.py's --backend (the performance goals).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import time
import uuid
from typing import Any, Callable, List, Tuple

LIBS = ("fencepost-zk-sync", "fencepost-zk-async", "kazoo")
SESSION_S = 10.0


def _make(lib: str, hosts: str, path: str) -> Tuple[Callable[[], Any], Callable[[], Any], Callable[[], None]]:
    """(acquire, release, close) for `lib` on lock `path`; async libs return coroutines."""
    from kazoo.client import KazooClient

    if lib == "kazoo":
        zk = KazooClient(hosts=hosts, timeout=SESSION_S)
        zk.start(timeout=15)
        lock = zk.Lock(path)

        def close() -> None:
            zk.stop()
            zk.close()

        return lock.acquire, lock.release, close

    import fencepost
    from fencepost.zookeeper import ZooKeeperBackend

    root, name = path.rsplit("/", 1)
    backend = ZooKeeperBackend(KazooClient(hosts=hosts, timeout=SESSION_S), root=root)
    lock = fencepost.Lock(backend, name, ttl=backend.session_timeout)
    held: List[Any] = []

    def close_backend() -> None:
        backend.close()
        backend.client.stop()
        backend.client.close()

    if lib == "fencepost-zk-sync":
        return (lambda: held.append(lock.acquire_sync())), (lambda: held.pop().release()), close_backend

    async def acquire() -> None:
        held.append(await lock.acquire())

    async def release() -> None:
        await held.pop().release()

    return acquire, release, close_backend


def uncontended(lib: str, hosts: str, cycles: int) -> List[float]:
    acquire, release, close = _make(lib, hosts, f"/bench/u-{uuid.uuid4().hex[:8]}")
    times: List[float] = []

    async def run_async() -> None:
        for i in range(20 + cycles):
            t0 = time.perf_counter_ns()
            await acquire()
            await release()
            if i >= 20:
                times.append((time.perf_counter_ns() - t0) / 1000)

    try:
        if lib.endswith("async"):
            asyncio.run(run_async())
        else:
            for i in range(20 + cycles):
                t0 = time.perf_counter_ns()
                acquire()
                release()
                if i >= 20:
                    times.append((time.perf_counter_ns() - t0) / 1000)
    finally:
        close()
    return times


def _worker(lib: str, hosts: str, path: str, seconds: float, go: Any, occupancy: Any, out: Any) -> None:
    acquire, release, close = _make(lib, hosts, path)
    grants = overlaps = 0

    def hold() -> None:
        nonlocal overlaps
        with occupancy.get_lock():
            occupancy.value += 1
            if occupancy.value != 1:
                overlaps += 1
        time.sleep(0.001)
        with occupancy.get_lock():
            occupancy.value -= 1

    async def run_async(end: float) -> None:
        nonlocal grants
        while time.monotonic() < end:
            await acquire()
            hold()
            await release()
            grants += 1

    go.wait(60)
    end = time.monotonic() + seconds
    try:
        if lib.endswith("async"):
            asyncio.run(run_async(end))
        else:
            while time.monotonic() < end:
                acquire()
                hold()
                release()
                grants += 1
    finally:
        close()
    out.put((grants, overlaps))


def contended(lib: str, hosts: str, workers: int, seconds: float) -> Tuple[float, int]:
    ctx = multiprocessing.get_context("spawn")
    go, out, occupancy = ctx.Event(), ctx.Queue(), ctx.Value("i", 0)
    path = f"/bench/c-{uuid.uuid4().hex[:8]}"
    procs = [ctx.Process(target=_worker, args=(lib, hosts, path, seconds, go, occupancy, out)) for _ in range(workers)]
    for p in procs:
        p.start()
    time.sleep(2.0)  # imports and sessions
    go.set()
    results = [out.get(timeout=seconds + 60) for _ in procs]
    for p in procs:
        p.join(30)
    return sum(g for g, _ in results) / seconds, sum(o for _, o in results)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", required=True)
    ap.add_argument("--cycles", type=int, default=500)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--md")
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    lines = [
        "| library | uncontended p50 (µs) | uncontended p99 (µs) | 8 workers, grants/s | overlaps |",
        "| --- | --- | --- | --- | --- |",
    ]
    for lib in LIBS:
        t = sorted(uncontended(lib, args.hosts, args.cycles))
        p50, p99 = t[len(t) // 2], t[min(len(t) - 1, int(len(t) * 0.99))]
        rate, overlaps = contended(lib, args.hosts, args.workers, args.seconds)
        lines.append(f"| {lib} | {p50:.0f} | {p99:.0f} | {rate:.0f} | {overlaps} |")
        kind = "peer" if lib == "kazoo" else "fencepost"
        rows.append({"lib": lib, "kind": kind, "uncontended_p50_us": p50, "uncontended_p99_us": p99, "grants_per_s": rate, "overlaps": overlaps})
        print(lines[-1], flush=True)
    table = "\n".join(lines)
    text = (
        "## ZooKeeper\n\nOne ZooKeeper 3.8 server on 127.0.0.1 (scripts/services/zookeeper.sh), "
        f"{args.cycles} uncontended cycles; {args.workers} processes on one lock for "
        f"{args.seconds:g} s, each holding 1 ms (bench/python/zookeeper.py).\n\n{table}\n"
    )
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"backend": "zookeeper", "lang": "python", "title": "ZooKeeper", "markdown": text, "rows": rows, "absent": [], "workers": args.workers}, f, indent=1)


if __name__ == "__main__":
    main()
