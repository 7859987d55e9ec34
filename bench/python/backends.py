"""What the other backends' Python scripts of scripts/bench share (bench/python/etcd.py,
postgres.py, kubernetes.py): the uncontended and contended measurements, and the table they write.

A script names its cases and gives ``make(lib, target, key) -> (acquire, release, close)``,
a module-level function (the contended workers are spawned processes and import it);
``acquire``/``release`` return coroutines when ``lib`` ends in ``-async``.

uncontended: one process, 20 warm-up then ``cycles`` acquire+release cycles, each timed
with ``perf_counter_ns``: p50 / p99 in µs.

contended: ``workers`` spawned processes on one lock for ``seconds``, each in a loop:
acquire; t_acq; occupancy counter (a shared ``multiprocessing.Value``) up, and it must
read 1; hold 1 ms (``time.sleep``, also under asyncio: the hold stands for work that
keeps the process busy); counter down; t_rel; release. Timestamps are
``time.monotonic_ns()`` (CLOCK_MONOTONIC, one clock for every process). From the
grants: grants per second, hand-offs (a grant to another worker than the previous
holder) and their p50 (previous holder calls release → next holder's acquire returns),
grants per worker min / max, and the two exclusion checks: occupancy (two holders at
once) and overlapping client-side intervals [t_acq, t_rel]. Each run is bounded: a
worker still in acquire ``GRACE_S`` (10 s) after the round reports the grants it had
and leaves (the table counts it: no release woke it), and one that has
not reported ``seconds + 60`` s after the start is killed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing
import os
import threading
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

Case = Tuple[Callable[[], Any], Callable[[], Any], Callable[[], Any]]
Maker = Callable[[str, str, str], Case]


def percentile(xs: Sequence[float], q: float) -> Optional[float]:
    """The q-quantile of xs (nearest rank below), or None for no data."""
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(len(s) * q))]


def _run(is_async: bool, fn: Callable[[], Any]) -> Any:
    return asyncio.run(fn()) if is_async else fn()


def uncontended(make: Maker, lib: str, target: str, key: str, cycles: int, warmup: int = 20) -> List[float]:
    """µs per acquire+release cycle, `cycles` of them after `warmup`."""
    is_async = lib.endswith("-async")
    clock = time.perf_counter_ns

    async def run_async() -> List[float]:
        acquire, release, close = make(lib, target, key)
        times: List[float] = []
        try:
            for i in range(warmup + cycles):
                t0 = clock()
                await acquire()
                await release()
                if i >= warmup:
                    times.append((clock() - t0) / 1e3)
        finally:
            res = close()
            if asyncio.iscoroutine(res):
                await res
        return times

    def run_sync() -> List[float]:
        acquire, release, close = make(lib, target, key)
        times: List[float] = []
        try:
            for i in range(warmup + cycles):
                t0 = clock()
                acquire()
                release()
                if i >= warmup:
                    times.append((clock() - t0) / 1e3)
        finally:
            close()
        return times

    return asyncio.run(run_async()) if is_async else run_sync()


def _hold(occupancy: Any, hold_s: float) -> bool:
    """One hold: True when the counter showed another holder."""
    with occupancy.get_lock():
        occupancy.value += 1
        clash = occupancy.value != 1
    time.sleep(hold_s)
    with occupancy.get_lock():
        occupancy.value -= 1
    return clash


#: How long after the end of a round a worker still waiting in acquire is given before it
#: reports what it has (no release woke it: the others have stopped).
GRACE_S = 10.0


def _worker(occupancy: Any, make: Maker, lib: str, target: str, key: str, seconds: float, hold_s: float,
            ready: Any, start_ns: Any, go: Any, out: Any, index: int) -> None:
    reported = threading.Lock()

    def report(rep: Dict[str, Any]) -> bool:
        """Puts this worker's one report; False when it was put already."""
        if not reported.acquire(blocking=False):
            return False
        out.put(rep)
        return True

    try:
        # a contended benchmark is the hot lock fencepost warns about: the records are
        # still made (the logger stays enabled for WARNING, as by default), then dropped
        log = logging.getLogger("fencepost")
        log.addHandler(logging.NullHandler())
        log.propagate = False
        is_async = lib.endswith("-async")
        acquire, release, close = make(lib, target, key)
        ready.put(index)
        go.wait(120)
        start = start_ns.value
        stop = start + int(seconds * 1e9)
        clock = time.monotonic_ns
        grants: List[Tuple[int, int]] = []
        clashes = 0

        def still_waiting() -> None:
            # the round ended GRACE_S ago and this worker is still in acquire: report
            # its grants so far (flushed), then leave without waiting for that acquire
            if report({"worker": index, "grants": list(grants), "clashes": clashes, "stuck": True}):
                out.close()
                out.join_thread()
                os._exit(0)

        watchdog = threading.Timer(max(0.0, (stop - clock()) / 1e9) + GRACE_S, still_waiting)
        watchdog.daemon = True
        watchdog.start()
        while clock() < start:
            time.sleep(0.0005)

        async def run_async() -> None:
            nonlocal clashes
            try:
                while clock() < stop:
                    await acquire()
                    t_acq = clock()
                    clashes += _hold(occupancy, hold_s)
                    t_rel = clock()
                    await release()
                    grants.append((t_acq, t_rel))
            finally:
                res = close()
                if asyncio.iscoroutine(res):
                    await res

        def run_sync() -> None:
            nonlocal clashes
            try:
                while clock() < stop:
                    acquire()
                    t_acq = clock()
                    clashes += _hold(occupancy, hold_s)
                    t_rel = clock()
                    release()
                    grants.append((t_acq, t_rel))
            finally:
                close()

        asyncio.run(run_async()) if is_async else run_sync()
        watchdog.cancel()
        report({"worker": index, "grants": grants, "clashes": clashes})
    except BaseException as exc:  # report, never hang the parent
        report({"worker": index, "crash": "".join(traceback.format_exception(exc))[-1500:]})


def contended(make: Maker, lib: str, target: str, key: str, workers: int, seconds: float, hold_ms: float = 1.0) -> Dict[str, Any]:
    """One contended run of `lib`: rates, hand-offs and the exclusion checks."""
    ctx = multiprocessing.get_context("spawn")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    start_ns, occupancy = ctx.Value("q", 0), ctx.Value("i", 0)
    procs = [
        ctx.Process(target=_worker, args=(occupancy, make, lib, target, key, seconds, hold_ms / 1e3, ready, start_ns, go, out, i), daemon=True)
        for i in range(workers)
    ]
    for p in procs:
        p.start()
    reports: List[Dict[str, Any]] = []
    try:
        for _ in procs:
            ready.get(timeout=60)  # imports and connections
        start_ns.value = time.monotonic_ns() + 200_000_000  # everyone starts together
        go.set()
        deadline = time.monotonic() + 0.2 + seconds + 60
        for _ in procs:
            reports.append(out.get(timeout=max(0.1, deadline - time.monotonic())))
    except Exception as exc:  # a worker never got ready or never reported
        reports.append({"worker": -1, "crash": f"{type(exc).__name__}: {exc}"})
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()  # only our own children, by handle
            p.join()
    crashes = [r["crash"] for r in reports if "crash" in r]
    start, stop = start_ns.value, start_ns.value + int(seconds * 1e9)
    grants = sorted((a, r, rep["worker"]) for rep in reports if "grants" in rep for a, r in rep["grants"])
    window = [g for g in grants if start <= g[0] < stop]
    per_worker = [sum(1 for g in window if g[2] == w) for w in range(workers)]
    handoffs = [(b[0] - a[1]) / 1e3 for a, b in zip(window, window[1:]) if a[2] != b[2]]
    return {
        "grants_per_s": len(window) / seconds,
        "handoffs_per_s": len(handoffs) / seconds,
        "handoff_p50_us": percentile(handoffs, 0.5),
        "min_grants": min(per_worker),
        "max_grants": max(per_worker),
        "occupancy_clashes": sum(r.get("clashes", 0) for r in reports),
        "stuck_workers": sum(1 for r in reports if r.get("stuck")),
        "interval_overlaps": sum(1 for a, b in zip(grants, grants[1:]) if b[0] < a[1]),
        "crashes": crashes,
    }


def fmt(x: Optional[float]) -> str:
    return "–" if x is None else f"{x:,.0f}"


def measure(make: Maker, cases: Sequence[Tuple[str, str, str]], target: str, cycles: int, workers: int, seconds: float) -> List[Dict[str, Any]]:
    """Every case (lib, kind, what) uncontended then contended, one after the other;
    prints each row as it is measured. kind: fencepost, peer or floor."""
    rows = []
    for lib, kind, what in cases:
        row: Dict[str, Any] = {"lib": lib, "kind": kind, "what": what}
        try:
            t = uncontended(make, lib, target, f"bench-u-{lib}-{time.time_ns() % 10**9}", cycles)
            row["uncontended_p50_us"], row["uncontended_p99_us"] = percentile(t, 0.5), percentile(t, 0.99)
            c = contended(make, lib, target, f"bench-c-{lib}-{time.time_ns() % 10**9}", workers, seconds)
            row.update(c)
            row["overlaps"] = c["occupancy_clashes"] + c["interval_overlaps"]
            if c["crashes"]:
                row["error"] = c["crashes"][0][-300:]
        except Exception as exc:  # one failing library must not lose the others' rows
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        print(json.dumps({k: v for k, v in row.items() if k != "crashes"}), flush=True)
        rows.append(row)
    return rows


def markdown(title: str, intro: str, rows: List[Dict[str, Any]], absent: List[Dict[str, str]], workers: int) -> str:
    """The section's markdown: one row per case, then the cases that could not run."""
    lines = [
        f"| library | what it runs | uncontended p50 µs | uncontended p99 µs | {workers} workers: grants/s | hand-offs/s | hand-off p50 µs | grants per worker min / max | mutual exclusion |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        if r.get("error") and r.get("grants_per_s") is None:
            excl = f"failed: {r['error'][:160]}"
        elif r.get("note"):  # a row without a contended run says what stands in for the check
            excl = r["note"]
        elif r.get("overlaps") or r.get("error"):
            excl = f"**FAIL** ({r.get('occupancy_clashes', 0)} occupancy, {r.get('interval_overlaps', 0)} overlaps{'; ' + r['error'][:120] if r.get('error') else ''})"
        else:
            excl = "ok"
        if r.get("stuck_workers"):
            excl += f"; {r['stuck_workers']} worker(s) still waiting in acquire {GRACE_S:g} s after the round ended"
        lines.append(
            f"| {'**' + r['lib'] + '**' if r['kind'] == 'fencepost' else r['lib']} | {r['what']} | {fmt(r.get('uncontended_p50_us'))} | "
            f"{fmt(r.get('uncontended_p99_us'))} | {fmt(r.get('grants_per_s'))} | {fmt(r.get('handoffs_per_s'))} | "
            f"{fmt(r.get('handoff_p50_us'))} | {fmt(r.get('min_grants'))} / {fmt(r.get('max_grants'))} | {excl} |"
        )
    for a in absent:
        lines.append(f"| {a['lib']} | absent: {a['why']} | – | – | – | – | – | – | – |")
    return f"## {title}\n\n{intro}\n\n" + "\n".join(lines) + "\n"


def write(path: Optional[str], md_path: Optional[str], backend: str, lang: str, title: str, intro: str,
          rows: List[Dict[str, Any]], absent: List[Dict[str, str]], workers: int) -> None:
    """The JSON report.py reads (--backend) and/or the markdown alone."""
    text = markdown(title, intro, rows, absent, workers)
    if md_path:
        with open(md_path, "w") as f:
            f.write(text)
    if path:
        with open(path, "w") as f:
            json.dump({"backend": backend, "lang": lang, "title": title, "markdown": text, "rows": rows, "absent": absent, "workers": workers}, f, indent=1)


def arguments(description: Optional[str]) -> argparse.ArgumentParser:
    """The options every backend script takes: ``--cycles`` (uncontended cycles),
    ``--workers`` and ``--seconds`` (the contended run), ``--json`` and ``--md`` (where
    the table goes); each script adds its own server's."""
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=int, default=500)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--json")
    ap.add_argument("--md")
    return ap
