"""Turns a results JSON of bench/run.py into the printed tables, docs/BENCHMARKS.md and
the plot docs/benchmarks-contended.png.

usage: report.py RESULTS.json [--doc docs/BENCHMARKS.md] [--png docs/benchmarks-contended.png]
                 [--backend FILE.json ...] [--many FILE.json ...]
                 [--wasm-build bindings-wasm/dist/build.json]

--backend: the tables of the other backends' scripts of the same run (bench/python/zookeeper.py,
etcd.py, postgres.py, bench/node/postgres.mjs, each with --json FILE): their markdown goes in
after the Redis tables and their rows into the performance goals. --many: the many-held-leases
figures (bench/python/many_leases.py, bench/node/many_leases.mjs --json FILE): one table, and
the batched-renewals goal. --wasm-build: the WASM
package's build report (sizes), read for the module-size goal when the file exists.

The analysis in bench/NOTES.md (written by people, dated) is copied in verbatim under
the generated tables; everything else in BENCHMARKS.md is generated: rerun, don't edit.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent

LABELS = {
    "python:fencepost-sync": "fencepost (threads: acquire_sync/release_sync)",
    "python:fencepost-async": "fencepost (asyncio: await acquire/release)",
    "python:fencepost-sync-fair": "fencepost, fair hand-off (threads)",
    "python:fencepost-async-fair": "fencepost, fair hand-off (asyncio)",
    "python:raw": "raw floor: redis-py SET NX PX + owner-checked release script",
    "python:raw-async": "raw floor on redis.asyncio (same two commands)",
    "python:fencepost-scripts": "fencepost's two scripts by hand, no machine (protocol floor)",
    "python:fencepost-scripts-async": "fencepost's two scripts by hand on redis.asyncio (protocol floor, asyncio)",
    "python:redis-py": "redis-py `Lock`",
    "python:redis-py-async": "redis-py asyncio `Lock` (`redis.asyncio.lock.Lock`)",
    "python:python-redis-lock": "python-redis-lock",
    "python:pottery": "pottery `Redlock` (one master)",
    "python:fencepost-redlock3": "fencepost Redlock, 3 masters (threads)",
    "python:fencepost-redlock5": "fencepost Redlock, 5 masters (threads)",
    "python:pottery-redlock3": "pottery `Redlock`, 3 masters",
    "python:pottery-redlock5": "pottery `Redlock`, 5 masters",
    "python:baton": "wake-up floor, not a lock: a baton passed round robin (RPUSH → the next worker's BLPOP, one round trip)",
    "node:fencepost": "fencepost (await lock.acquire / lease.release)",
    "node:fencepost-fair": "fencepost, fair hand-off",
    "node:raw-ioredis": "raw floor: ioredis SET NX PX + owner-checked release script",
    "node:fencepost-scripts": "fencepost's two scripts by hand, no machine (protocol floor)",
    "node:redlock": "redlock 5.0.0-beta.2 (retryCount −1)",
    "node:redis-semaphore": "redis-semaphore `Mutex`",
    "node:fencepost-redlock3": "fencepost Redlock, 3 masters",
    "node:fencepost-redlock5": "fencepost Redlock, 5 masters",
    "node:redlock-redlock3": "redlock 5.0.0-beta.2, 3 masters (retryCount −1)",
    "node:redlock-redlock5": "redlock 5.0.0-beta.2, 5 masters (retryCount −1)",
    "node:baton": "wake-up floor, not a lock: a baton passed round robin (RPUSH → the next worker's BLPOP, one round trip)",
}
RAW = {"python": "python:raw", "node": "node:raw-ioredis"}


def fmt(x: Optional[float], digits: int = 0) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if digits == 0:
        return f"{x:,.0f}"
    return f"{x:,.{digits}f}"


def ratio(a: Optional[float], b: Optional[float]) -> str:
    if a is None or b is None:
        return "–"
    if b == 0:
        return "∞" if a > 0 else "–"
    r = a / b
    return f"{r:.2f}×" if r < 10 else f"{r:.0f}×"


def load(avg: Optional[List[float]]) -> str:
    return "?" if not avg else " / ".join(f"{x:.1f}" for x in avg)


def table(header: List[str], rows: List[List[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def fencepost_keys(section: Dict[str, Any], lang: str) -> List[str]:
    """fencepost's own rows (not the protocol-floor rows, which run no fencepost code)."""
    return [k for k in section if k.startswith(f"{lang}:fencepost") and not k.startswith(f"{lang}:fencepost-scripts")]


def best_fencepost(section: Dict[str, Any], lang: str, metric: str, lower_is_better: bool) -> Optional[str]:
    keys = [k for k in fencepost_keys(section, lang) if section[k].get(metric) is not None]
    if not keys:
        return None
    pick = min if lower_is_better else max
    return pick(keys, key=lambda k: section[k][metric])


# ---- sections -----------------------------------------------------------------------------


def core_section(res: Dict[str, Any]) -> str:
    core = res.get("core") or {}
    if res.get("core_skipped"):
        return f"_Core benchmarks skipped: {res['core_skipped']}._"
    crit, calls = core.get("criterion", {}), core.get("callgrind", {})
    rows = []
    for key, what in [
        ("cycle/memory_redis", "one cycle acquire → held → renew → release, against `sim::MemoryRedis`"),
        ("cycle/memory_redis_fair", "the same cycle with fair hand-off on (queue-aware scripts, nobody waiting)"),
        ("cycle/memory_redis_observed", "the first cycle with an observer attached (`Machine::observe`, every observation drained); the first row has none"),
        ("cycle/canned", "the same cycle, replies canned (the machine alone)"),
        ("timer_step/1000", "one lease's renewal in batched timer steps, machine holding 1,000 leases"),
        ("timer_step/10000", "… holding 10,000 leases"),
        ("timer_step/100000", "… holding 100,000 leases"),
    ]:
        c = crit.get(key, {})
        rows.append([what, fmt(c.get("median_ns")), fmt(c.get("mean_ns")), fmt(calls.get(key))])
    out = [table(["workload", "ns (criterion median)", "ns (mean)", "instructions (callgrind)"], rows)]
    mem = core.get("lease_memory") or []
    if mem:
        out.append("")
        out.append(
            table(
                ["leases held", "heap bytes per held lease", "after one renewal each", "peak during setup", "allocations per acquire"],
                [
                    [
                        fmt(m["n"]),
                        fmt(m["bytes_per_lease"]),
                        fmt(m["bytes_per_lease_after_renewal"]),
                        fmt(m["peak_bytes_per_lease"]),
                        fmt(m["allocations_per_lease"], 1),
                    ]
                    for m in mem
                ],
            )
        )
    t1, t100 = calls.get("timer_step/1000"), calls.get("timer_step/100000")
    w1, w100 = (crit.get(f"timer_step/{n}", {}).get("median_ns") for n in (1000, 100000))
    if t1 and t100:
        out.append("")
        line = (
            f"From 1,000 to 100,000 leases (log₂ n grows {math.log2(1e5) / math.log2(1e3):.2f}×) the instructions per "
            f"renewal grow {t100 / t1:.2f}×: the timer heap and the lock map are O(log n) or better."
        )
        if w1 and w100:
            line += (
                f" Wall time grows {w100 / w1:.2f}×: with more instructions flat, that is memory latency "
                "(a larger working set than the CPU caches), not more work."
            )
        out.append(line)
    for k in ["criterion_error", "examples_error", "callgrind_error"]:
        if core.get(k):
            out.append(f"\n**{k}:** `{core[k][-500:]}`")
    return "\n".join(out)


def uncontended_section(res: Dict[str, Any], lang: str) -> str:
    sec = {k: v for k, v in res.get("uncontended", {}).items() if k.startswith(lang + ":")}
    if not sec:
        return ""
    fp = best_fencepost(sec, lang, "median_us", lower_is_better=True)
    fp_us = sec[fp]["median_us"] if fp else None
    raw_us = sec.get(RAW[lang], {}).get("median_us")
    rows = []
    for key, s in sec.items():
        if "error" in s:
            rows.append([LABELS.get(key, key), f"failed: {s['error'][:120]}", "", "", "", ""])
            continue
        meds = s["round_medians_us"]
        rows.append(
            [
                ("**" + LABELS.get(key, key) + "**") if key == fp else LABELS.get(key, key),
                fmt(s["median_us"]),
                f"{fmt(min(meds))}–{fmt(max(meds))}",
                fmt(s["p99_us"]),
                ratio(s["median_us"], raw_us),
                "–" if key == fp else ratio(fp_us, s["median_us"]),
            ]
        )
    head = ["library", "µs per cycle (median)", "round medians", "p99 µs", "÷ raw floor", "fencepost ÷ this (< 1: fencepost faster)"]
    note = f"\n\nfencepost row used for the ratios (the faster mode): **{LABELS.get(fp, fp)}**." if fp else ""
    return table(head, rows) + note


def contended_section(res: Dict[str, Any], lang: str, workers: str) -> str:
    sec = {k: v for k, v in res.get("contended", {}).get(workers, {}).items() if k.startswith(lang + ":")}
    if not sec:
        return ""
    fp = best_fencepost(sec, lang, "handoffs_per_s", lower_is_better=False)
    fp_h = sec[fp]["handoffs_per_s"] if fp else None
    raw_h = sec.get(RAW[lang], {}).get("handoffs_per_s")
    rows = []
    for key, s in sec.items():
        label = ("**" + LABELS.get(key, key) + "**") if key == fp else LABELS.get(key, key)
        if "error" in s:
            rows.append([label, f"failed: {s['error'][:120]}"] + [""] * 7)
            continue
        bad = s["occupancy_violations"] + s["interval_overlaps"]
        excl = "ok" if bad == 0 and not s["crashes"] else f"**FAIL** ({s['occupancy_violations']} occupancy, {s['interval_overlaps']} overlaps{', crashes' if s['crashes'] else ''})"
        if s.get("lib_errors"):
            excl += f"; {s['lib_errors']} acquire/release errors"
        rows.append(
            [
                label,
                fmt(s["grants_per_s"]),
                fmt(s["handoffs_per_s"]),
                fmt(s["handoff_p50_us"]),
                fmt(s["handoff_p99_us"]),
                f"{fmt(s['min_grants'])} / {fmt(s['max_grants'])}",
                excl,
                ratio(s["handoffs_per_s"], raw_h),
                "–" if key == fp else ratio(fp_h, s["handoffs_per_s"]),
            ]
        )
    head = [
        "library",
        "grants/s",
        "hand-offs/s",
        "hand-off p50 µs",
        "hand-off p99 µs",
        "grants per worker min / max",
        "mutual exclusion",
        "hand-offs ÷ raw floor",
        "fencepost hand-offs ÷ this (> 1: fencepost hands off more)",
    ]
    note = f"\n\nfencepost row used for the ratios (the mode with more hand-offs): **{LABELS.get(fp, fp)}**." if fp else ""
    return table(head, rows) + note


def targets_section(res: Dict[str, Any]) -> str:
    """The benchmark targets, checked against this run (information, not a test)."""
    rows = []
    unc = res.get("uncontended", {})
    c8 = res.get("contended", {}).get("8", {})

    def check(what: str, value: Optional[float], ok: Optional[bool], shown: str) -> None:
        rows.append([what, shown if value is not None else "–", "–" if ok is None else ("met" if ok else "**not met**")])

    for lang in ["python", "node"]:
        fp = best_fencepost(unc, lang, "median_us", True)
        raw = unc.get(RAW[lang], {}).get("median_us")
        if fp and raw:
            r = unc[fp]["median_us"] / raw
            check(f"{lang}: uncontended ≤ 1.05× the raw floor (row: {LABELS.get(fp, fp)})", r, r <= 1.05, f"{r:.2f}×")
        fp = best_fencepost(c8, lang, "handoffs_per_s", False)
        if not fp:
            continue
        s = c8[fp]
        check(f"{lang}: 8 workers, ≥ 500 hand-offs/s", s["handoffs_per_s"], s["handoffs_per_s"] >= 500, fmt(s["handoffs_per_s"]))
        if lang == "python":
            for other, k in [("python:python-redis-lock", 2.5), ("python:redis-py", 80.0)]:
                o = c8.get(other, {}).get("handoffs_per_s")
                if o is not None:
                    r = s["handoffs_per_s"] / o if o else math.inf
                    check(f"python: 8 workers, ≥ {k:g}× the hand-offs/s of {LABELS[other]}", r, r >= k, f"{r:.2f}×" if r < 10 else f"{r:.0f}×")
        p50, p99 = s.get("handoff_p50_us"), s.get("handoff_p99_us")
        check(f"{lang}: 8 workers, hand-off p50 ≤ 300 µs", p50, p50 is not None and p50 <= 300, f"{fmt(p50)} µs")
        floor = c8.get(f"{lang}:baton", {}).get("handoff_p50_us")
        if floor is not None:
            check(f"(context, not a target) {lang}: the wake-up floor's hand-off p50, same run", floor, None, f"{fmt(floor)} µs")
        check(f"{lang}: 8 workers, hand-off p99 ≤ 2 ms", p99, p99 is not None and p99 <= 2000, f"{fmt(p99)} µs")
        check(f"{lang}: 8 workers, every worker ≥ 0.8× the mean grants", s["fairness"], s["fairness"] >= 0.8, f"min = {s['fairness']:.2f}× mean")
    return table(["target", "this run", ""], rows)


# ---- performance goals ----------------------------------------------------------------------

#: The WASM module's size goal (gzipped bytes of the web target's optimised module).
WASM_GOAL_BYTES = 80 * 1024
#: Every backend of the project and what its rows must stand beside: (backend, [(lang,
#: [required comparison rows, by lib name])]). Redis and Redlock come from run.py's
#: results; the others from the backend scripts' JSON (`--backend`).
BACKENDS: List[Tuple[str, str]] = [
    ("redis", "Python beside redis-py `Lock` (threads and asyncio), python-redis-lock, pottery and the raw floors; Node beside redlock, redis-semaphore and the raw floor"),
    ("redlock", "fencepost's Redlock on 3 and 5 masters beside pottery `Redlock` (Python) and redlock (Node)"),
    ("postgres", "beside a raw `pg_advisory_lock` floor (Python and Node)"),
    ("etcd", "beside the `etcd3` client's `Lock` (if it installs) and a raw txn floor (Python)"),
    ("zookeeper", "beside kazoo's `Lock` (Python)"),
    ("kubernetes", "beside the `kubernetes` client's leader election and a raw Lease floor (Python; the project's Lease API server)"),
]


def _met(ok: Optional[bool]) -> str:
    return "not measured" if ok is None else ("**met**" if ok else "**not met**")


def _us(x: Optional[float]) -> str:
    return f"{fmt(x)} µs"


def _backend_rows(res: Dict[str, Any], extras: List[Dict[str, Any]], backend: str) -> Tuple[Optional[bool], str]:
    """(met?, what this run has) for the "every backend benchmarked" goal of `backend`."""
    unc, c8 = res.get("uncontended", {}), res.get("contended", {}).get("8", {})

    def have(key: str) -> bool:
        return "median_us" in unc.get(key, {}) and "handoffs_per_s" in c8.get(key, {})

    if backend in ("redis", "redlock"):
        want = {
            "redis": ["python:fencepost-sync", "python:fencepost-async", "python:redis-py", "python:redis-py-async", "python:raw", "node:fencepost", "node:redlock", "node:redis-semaphore", "node:raw-ioredis"],
            "redlock": ["python:fencepost-redlock3", "python:pottery-redlock3", "node:fencepost-redlock3", "node:redlock-redlock3"],
        }[backend]
        missing = [k for k in want if not have(k)]
        if backend == "redis" and res.get("node_skipped"):
            return False, f"Node skipped ({res['node_skipped']}); " + ("missing: " + ", ".join(missing) if missing else "")
        if missing:
            return False, "missing uncontended or 8-worker rows: " + ", ".join(missing)
        return True, "uncontended and 8- and 32-worker tables above (" + ", ".join(want) + ")"
    mine = [e for e in extras if e.get("backend") == backend]
    if not mine:
        return False, "no table in this run"
    parts, ok = [], True
    for e in mine:
        rows = e.get("rows", [])
        fp = [r for r in rows if r.get("kind") == "fencepost"]
        other = [r for r in rows if r.get("kind") in ("peer", "floor")]
        complete = lambda r: r.get("uncontended_p50_us") is not None and r.get("grants_per_s") is not None  # noqa: E731
        bad = [r["lib"] for r in rows if r.get("overlaps")]
        good = bool(fp) and all(complete(r) for r in fp) and any(complete(r) for r in other) and not bad
        if e.get("error"):
            good = False
        ok = ok and good
        what = f"{e.get('lang', '?')}: " + ", ".join(r["lib"] for r in rows)
        if e.get("error"):
            what += f" — failed: {e['error'][:200]}"
        for a in e.get("absent", []):
            what += f"; {a['lib']} absent ({a['why']})"
        if bad:
            what += "; overlaps in " + ", ".join(bad)
        parts.append(what)
    return ok, "; ".join(parts)


def many_section(many: List[Dict[str, Any]]) -> str:
    """The many-held-leases table: requests reaching Redis and client CPU per second."""
    rows: List[List[str]] = []
    notes: List[str] = []
    for doc in many:
        lang = doc.get("lang", "?")
        for r in doc.get("rows", []):
            rows.append([
                lang, f"`{r['lib']}`", r.get("what", ""), f"{r['leases']:,}", f"{r['ttl_s']:g} s", f"{r['seconds']:g} s",
                fmt(r["requests_per_s"], 1), fmt(r["commands_per_s"]), fmt(r["cpu_ms_per_s"], 1),
                f"{r['held_at_end']:,} of {r['leases']:,}",
            ])
        for a in doc.get("absent", []):
            notes.append(f"{lang} `{a['lib']}` absent: {a['why']}")
    if not rows:
        return ""
    intro = (
        "One process holds the leases on distinct names and lets them renew for the window; what reached the server "
        "in it comes from Redis' own `INFO commandstats` before and after: *requests* are script calls (`EVAL`, "
        "`EVALSHA`; every library here renews with a Lua script), *commands* every command the server ran, those "
        "inside scripts included. CPU: the client process's user + system time over the window. fencepost renews "
        "every TTL/3; redis-py's loop also every TTL/3; python-redis-lock every 2/3 of the expiry; node-redlock once "
        "less than 500 ms is left."
    )
    body = table(["lang", "library", "how", "leases", "TTL", "window", "requests/s", "commands/s", "client CPU ms/s", "held at the end"], rows)
    return intro + "\n\n" + body + ("\n\n" + "\n".join(f"- {n}" for n in notes) if notes else "")


def _batched_goal(many: List[Dict[str, Any]]) -> List[str]:
    goal = (
        "Batched renewals: 10,000 held leases (TTL 30 s, 60 s) with ≥ 100× fewer requests than the best of redis-py "
        "`Lock` (extend per lock), python-redis-lock `auto_renewal`, node-redlock `using()`"
    )
    rows = [dict(r, lang=d.get("lang", "?")) for d in many for r in d.get("rows", [])]
    fp = [r for r in rows if r.get("kind") == "fencepost" and r["held_at_end"] == r["leases"]]
    peers = [r for r in rows if r.get("kind") == "peer" and r["held_at_end"] == r["leases"]]
    if not fp or not peers:
        return [goal, "–", "no many-leases rows with every lease held in this run", "not measured"]
    worst = max(fp, key=lambda r: r["requests_per_s"])
    best = min(peers, key=lambda r: r["requests_per_s"])
    leases = min(r["leases"] for r in fp + peers)
    ratio = best["requests_per_s"] / worst["requests_per_s"] if worst["requests_per_s"] > 0 else math.inf
    shown = (
        f"{best['lang']} `{best['lib']}` {fmt(best['requests_per_s'], 1)} requests/s ÷ {worst['lang']} `{worst['lib']}` "
        f"{fmt(worst['requests_per_s'], 1)} (fencepost's most) = {ratio:.0f}× (goal ≥ 100×), {leases:,} leases"
    )
    return [goal, "the many-held-leases table above", shown, _met(ratio >= 100 and leases >= 10_000)]


def goals_section(
    res: Dict[str, Any],
    extras: List[Dict[str, Any]],
    wasm: Optional[Dict[str, Any]],
    wasm_path: Optional[Path],
    many: Optional[List[Dict[str, Any]]] = None,
) -> str:
    """The performance goals, each stated met / not met from this run's own figures."""
    unc, c8 = res.get("uncontended", {}), res.get("contended", {}).get("8", {})
    rows: List[List[str]] = []

    def med(key: str) -> Optional[float]:
        return unc.get(key, {}).get("median_us")

    def label(key: str) -> str:
        return LABELS.get(key, key)

    rows.append(_batched_goal(many or []))

    def at_or_below(goal: str, fp_key: str, peer_key: str, factor: float = 1.0, why: str = "") -> None:
        a, b = med(fp_key), med(peer_key)
        if a is None or b is None:
            missing = " and ".join(label(k) for k, v in [(fp_key, a), (peer_key, b)] if v is None)
            rows.append([goal, f"{label(fp_key)} vs {label(peer_key)}{why}", f"no figure for {missing}", "not measured"])
            return
        r = a / b
        rows.append([goal, f"{label(fp_key)} vs {label(peer_key)}{why}", f"{_us(a)} ÷ {_us(b)} = {r:.2f}× (goal ≤ {factor:.2f}×)", _met(r <= factor)])

    at_or_below("Uncontended, Python threads at or below redis-py `Lock`", "python:fencepost-sync", "python:redis-py")
    at_or_below(
        "Uncontended, asyncio at or below redis.asyncio + 5 %", "python:fencepost-async", "python:redis-py-async", 1.05,
        why=" (¹)",
    )
    a, raw = med("python:fencepost-async"), med("python:raw-async")
    if a is not None and raw is not None:
        rows.append([
            "(context, not a target) asyncio beside the raw floor on redis.asyncio",
            f"{label('python:fencepost-async')} vs {label('python:raw-async')}",
            f"{_us(a)} ÷ {_us(raw)} = {a / raw:.2f}×", "–",
        ])
    at_or_below("Uncontended, Node at or below redis-semaphore `Mutex`", "node:fencepost", "node:redis-semaphore")
    at_or_below("Uncontended, Node at or below redlock", "node:fencepost", "node:redlock")

    for what, fp_key, floor_key, raw_key in [
        ("Python threads", "python:fencepost-sync", "python:fencepost-scripts", "python:raw"),
        ("asyncio", "python:fencepost-async", "python:fencepost-scripts-async", "python:raw-async"),
        ("Node", "node:fencepost", "node:fencepost-scripts", "node:raw-ioredis"),
    ]:
        a, f, raw = med(fp_key), med(floor_key), med(raw_key)
        goal = f"Binding share of the uncontended cycle under 5 %, {what}"
        compared = f"{label(fp_key)} minus {label(floor_key)}"
        if a is None or f is None:
            rows.append([goal, compared, "no protocol-floor or fencepost row in this run", "not measured"])
            continue
        share = (a - f) / a * 100
        shown = f"{fmt(a)} − {fmt(f)} = {fmt(a - f)} µs = {share:.1f} % of the cycle"
        if raw is not None:
            shown += f"; protocol (floor − {label(raw_key)}): {fmt(f)} − {fmt(raw)} = {fmt(f - raw)} µs = {(f - raw) / a * 100:.1f} %"
        rows.append([goal, compared, shown, _met(share < 5)])

    for lang, title in [("python", "Python"), ("node", "Node")]:
        goal = f"Hand-off p50 within 1.5× the wake-up floor, {title} (8 workers)"
        fp = best_fencepost(c8, lang, "handoffs_per_s", lower_is_better=False)
        floor = c8.get(f"{lang}:baton", {}).get("handoff_p50_us")
        p50 = c8[fp].get("handoff_p50_us") if fp else None
        if p50 is None or floor is None:
            rows.append([goal, f"{label(fp) if fp else 'fencepost'} vs the wake-up floor", "no fencepost or wake-up-floor row in this run", "not measured"])
            continue
        r = p50 / floor
        rows.append([goal, f"{label(fp)} (the mode with most hand-offs) vs the wake-up floor", f"{_us(p50)} ÷ {_us(floor)} = {r:.2f}× (goal ≤ 1.50×)", _met(r <= 1.5)])

    goal = "WASM module ≤ 80 KB gzipped (80 × 1,024 B) with every backend in it"
    gz = (((wasm or {}).get("targets") or {}).get("web") or {}).get("wasmOptGzip")
    if gz is None:
        rows.append([goal, "bindings-wasm/dist/build.json", "not measured: build the WASM package (`node bindings-wasm/build.mjs --locked`)", "not measured"])
    else:
        where = f"`{wasm_path.relative_to(REPO).as_posix() if wasm_path and wasm_path.is_relative_to(REPO) else wasm_path}`"
        if wasm and wasm.get("_mtime"):
            where += f", built {wasm['_mtime']}"
        rows.append([goal, f"the web target's optimised module, as `build.mjs` builds it ({where})", f"{gz:,} B = {gz / 1024:.1f} KiB ({gz / WASM_GOAL_BYTES:.2f}× the goal)", _met(gz <= WASM_GOAL_BYTES)])

    all_ok = True
    for backend, beside in BACKENDS:
        ok, what = _backend_rows(res, extras, backend)
        all_ok = all_ok and bool(ok)
        rows.append([f"Every backend benchmarked: {backend}, uncontended and 8 workers, {beside}", f"the {backend} rows above", what, _met(ok)])
    rows.append(["Every backend benchmarked (all of the above)", "–", f"{sum(1 for r in rows[-len(BACKENDS):] if r[3] == '**met**')} of {len(BACKENDS)} backends", _met(all_ok)])
    intro = (
        "Each goal, checked against this run's own figures (uncontended: the median µs per cycle of the rows named; "
        "hand-offs: the pooled p50 of the 8-worker table). Information, not a test: compare within this run only."
    )
    notes = (
        "(¹) The asyncio goal is checked against redis-py's asyncio `Lock` (`redis.asyncio.lock.Lock`, the lock an "
        "asyncio program on redis.asyncio would pick); the row after it sets fencepost beside the raw floor on "
        "redis.asyncio (the same two commands as that `Lock`, `SET NX PX` and the owner-checked release script, "
        "without its Python): the least any redis.asyncio lock costs in this run. "
        "The binding share is the fencepost row minus the protocol floor of the same host API (fencepost's own two "
        "scripts sent by hand, no lock machine), as a share of the fencepost row's cycle; the protocol's share is "
        "that floor minus the raw floor (a bare `SET NX PX`: no token)."
    )
    return intro + "\n\n" + table(["performance goal", "rows compared", "this run", ""], rows) + "\n\n" + notes


def plot(res: Dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    worker_counts = sorted(res.get("contended", {}), key=int)
    fig, axes = plt.subplots(2, max(1, len(worker_counts)), figsize=(15, 10.5), squeeze=False)
    # the diagnostic floors (fencepost's scripts by hand, raw redis.asyncio) stay in the tables only
    keys = [
        k
        for k in LABELS
        if any(k in res["contended"][w] for w in worker_counts) and not k.endswith(("-scripts", "-scripts-async", ":raw-async", ":baton"))
    ]
    short = {k: k.replace("python:", "py ").replace("node:", "node ") for k in keys}
    colors = {}
    palette = plt.get_cmap("tab20")
    order = [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19]  # dark shades first
    for i, k in enumerate(keys):
        colors[k] = palette(order[i % 20])
    for col, w in enumerate(worker_counts):
        sec = res["contended"][w]
        ax = axes[0][col]
        for k in keys:
            s = sec.get(k, {})
            xs = s.get("handoff_sample_us") or []
            if not xs:
                continue
            ys = [(i + 1) / len(xs) for i in range(len(xs))]
            bold = "fencepost" in k
            ax.step(xs, ys, where="post", color=colors[k], lw=2.6 if bold else 1.4, ls="-" if k.startswith("python") else "--",
                    label=f"{short[k]} (p50 {fmt(s.get('handoff_p50_us'))} µs, {fmt(s.get('handoffs_per_s'))}/s)")
        ax.set_xscale("log")
        ax.set_xlabel("hand-off latency, µs (previous holder calls release → next different holder's acquire returns)", fontsize=9)
        ax.set_ylabel("fraction of hand-offs ≤ x")
        ax.set_title(f"{w} workers × {res['plan']['hold_ms']:g} ms hold: hand-off latency (CDF)")
        for x, text in [(300, "300 µs"), (2000, "2 ms")]:  # the p50 / p99 targets
            ax.axvline(x, color="grey", lw=0.8, ls=":")
            ax.text(x, 0.99, f" {text}", fontsize=7, color="grey", ha="left", va="top", transform=ax.get_xaxis_transform())
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=7.5, loc="lower right")
        ax = axes[1][col]
        for row, k in enumerate(keys):
            s = sec.get(k, {})
            per = s.get("per_worker_last_round") or []
            if not per:
                continue
            seconds = s.get("seconds") or 1
            rates = [g / seconds for g in per]
            jitter = [row + (j - (len(per) - 1) / 2) * (0.5 / max(1, len(per))) for j in range(len(per))]
            ax.scatter(rates, jitter, s=22, color=colors[k], edgecolors="black" if "fencepost" in k else "none", linewidths=0.6, zorder=3)
        ax.set_yticks(range(len(keys)))
        ax.set_yticklabels([short[k] for k in keys], fontsize=8.5)
        ax.invert_yaxis()
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlim(left=-0.2)
        ax.set_xlabel("grants per second of each worker (one dot per worker; 0 = starved)")
        ax.set_title(f"{w} workers: grants per worker (last round)")
        ax.grid(True, axis="x", which="both", alpha=0.25)
    fig.suptitle(f"fencepost vs Redis lock libraries, contended — {res['date']}" + (" (--quick)" if res.get("quick") else ""), fontsize=12)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)


def document(
    res: Dict[str, Any],
    png: Optional[Path],
    doc: Path,
    extras: Optional[List[Dict[str, Any]]] = None,
    wasm: Optional[Dict[str, Any]] = None,
    wasm_path: Optional[Path] = None,
    many: Optional[List[Dict[str, Any]]] = None,
) -> Tuple[str, str]:
    m, v, plan = res["machine"], res["versions"], res["plan"]
    extras = extras or []
    tables: List[str] = []
    tables.append("## Core: the lock machine alone (Rust)\n\n" + core_section(res))
    for lang, title in [("python", "Python"), ("node", "Node")]:
        part = uncontended_section(res, lang)
        if not part:
            if lang == "node" and res.get("node_skipped"):
                tables.append(f"## Node\n\nskipped: {res['node_skipped']}")
            continue
        tables.append(f"## {title}: uncontended acquire + release\n\n" + part)
        for w in sorted(res.get("contended", {}), key=int):
            part = contended_section(res, lang, w)
            if part:
                tables.append(
                    f"## {title}: contended, {w} worker processes, each holding {plan['hold_ms']:g} ms then asking again "
                    f"({plan['contended_rounds']} × {plan['contended_seconds']:g} s)\n\n" + part
                )
    for e in extras:
        if e.get("markdown"):
            tables.append(e["markdown"].strip())
        else:
            tables.append(f"## {e.get('title', e.get('backend', '?'))}\n\nfailed: {e.get('error', 'no table')}")
    part = many_section(many or [])
    if part:
        tables.append("## Many held leases: renewal requests and client CPU\n\n" + part)
    tables.append("## Performance goals, this run\n\n" + goals_section(res, extras, wasm, wasm_path, many))
    tables.append("## Targets, this run\n\n" + targets_section(res))
    printed = "\n\n".join(tables)
    ver = ", ".join(f"{k} {val}" for k, val in v.items())
    notes = BENCH / "NOTES.md"
    parts = [
        "# Benchmarks",
        "",
        f"_Generated by `{res['command']}` on {res['date']} — rerun it to refresh; edits here are overwritten. "
        "The analysis at the end is `bench/NOTES.md`, written by hand._",
        "",
        f"**Machine:** {m.get('cpu', '?')}, {m.get('cpus')} CPUs, {m.get('memory_gib', '?')} GiB, {m.get('platform')}.  ",
        f"**fencepost built from:** {res.get('source', '?')}.  ",
        f"**Versions:** {ver}.  ",
        f"**Plan:** uncontended {plan['uncontended_rounds']} rounds × {plan['uncontended_cycles']} cycles (after {plan['uncontended_warmup']} warm-up) per library; "
        f"contended {plan['contended_rounds']} rounds × {plan['contended_seconds']:g} s per library and worker count; rounds interleaved "
        f"across all libraries, Python and Node (A/B/A/B…), each case in fresh processes; one Redis on 127.0.0.1. Took {res.get('elapsed_s', '?')} s; "
        f"load average (1/5/15 min) {load(res.get('loadavg_start'))} at the start, {load(res.get('loadavg_end'))} at the end "
        "(other work on the machine shows up here: compare rows within this run only).",
        "",
        "How to read: µs per cycle is the median over rounds of each round's median; *hand-off* = a grant to a "
        "different worker than the previous holder, its latency = previous holder calls release → the next "
        "holder's acquire returns (`time.monotonic_ns` / `process.hrtime`, CLOCK_MONOTONIC, one clock for all "
        "processes); p50/p99 pool every hand-off of every round; rates and per-worker min/max are medians over "
        "rounds. *Mutual exclusion* is checked in every run twice: an INCR/DECR occupancy counter in Redis "
        "around each hold (INCR must return 1) and the client-side intervals [acquire returned, release "
        "called], which must not overlap.",
        "",
        printed,
    ]
    if png is not None:
        rel = Path("..") / png.relative_to(REPO) if doc.parent != png.parent else Path(png.name)
        parts += ["", "## Plot", "", f"![contended hand-off latency and grants per worker]({rel.as_posix()})"]
    parts += [
        "",
        "## Caveats",
        "",
        f"- {m.get('cpus')} CPUs run Redis, the orchestrator and every worker process: with 8 and 32 workers the contended "
        "figures measure CPU scheduling as much as the libraries (a busy-retry loop takes CPU from the holder it waits for). "
        "Figures are for comparison within one run, on one machine, not absolute capacity.",
        "- Loopback Redis: one round trip is tens of µs here; across a real network every round trip costs more and "
        "the libraries that need fewer round trips (or fewer polls) gain.",
        "- Each library runs with its default retry behaviour (redis-py `Lock` sleeps 0.1 s between tries, pottery up to 0.2 s, "
        "redlock 200 ± 100 ms, redis-semaphore 10 ms, fencepost full-jitter backoff from 10 ms up to 500 ms; fencepost's fair rows queue "
        "and park on BLPOP until the release grants them the lock (at most retry_max, 250–500 ms, as the fallback), python-redis-lock's waiters BLPOP a signal list); only the acquire timeouts are lifted so every worker waits until it is served "
        "(redlock: retryCount −1; redis-semaphore: acquireTimeout 600 s).",
        "- The hold is a blocking sleep (`time.sleep`, `Atomics.wait`), also under asyncio: it stands for work that "
        "keeps the process busy. The occupancy INCR happens inside the 1 ms hold, the DECR right after it "
        "(one round trip added to every grant, the same for every library).",
        "- The raw floors have no lease renewal, no fencing token and no fairness; they show what two round trips cost.",
        "- fencepost is built from the working tree when the script runs (`maturin develop --release`; the Node addon "
        "with `cargo build --release -p fencepost-node`), so a rerun measures whatever the core does then.",
        "- The criterion benches link fencepost-core with its test-only `sabotage` feature (the dev-dependency on itself); "
        "it adds one untaken branch per validity computation.",
    ]
    if notes.exists():
        parts += ["", notes.read_text().strip()]
    text = "\n".join(parts) + "\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)
    return printed, text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path)
    ap.add_argument("--doc", type=Path, default=REPO / "docs" / "BENCHMARKS.md")
    ap.add_argument("--png", type=Path, default=REPO / "docs" / "benchmarks-contended.png")
    ap.add_argument("--backend", type=Path, action="append", default=[], help="a backend script's --json output (repeatable)")
    ap.add_argument("--many", type=Path, action="append", default=[], help="a many_leases script's --json output (repeatable)")
    ap.add_argument("--wasm-build", type=Path, default=REPO / "bindings-wasm" / "dist" / "build.json")
    args = ap.parse_args()
    res = json.loads(args.results.read_text())
    extras = []
    for f in args.backend:
        try:
            extras.append(json.loads(f.read_text()))
        except (OSError, ValueError) as exc:  # a failed script: its goal says so
            extras.append({"backend": f.stem.split("-")[0], "title": f.stem, "error": f"{f.name}: {type(exc).__name__}: {exc}"})
    wasm: Optional[Dict[str, Any]] = None
    wasm_path: Optional[Path] = args.wasm_build.resolve()
    try:
        wasm = json.loads(wasm_path.read_text())
        wasm["_mtime"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(wasm_path.stat().st_mtime))
    except (OSError, ValueError):
        wasm, wasm_path = None, None
    png: Optional[Path] = args.png.resolve()
    try:
        plot(res, png)
    except Exception as exc:  # the tables matter more than the picture
        print(f"plot failed: {type(exc).__name__}: {exc}")
        png = None
    many = []
    for f in args.many:
        try:
            many.append(json.loads(f.read_text()))
        except (OSError, ValueError) as exc:  # a failed script: the goal says not measured
            print(f"report.py: {f}: {type(exc).__name__}: {exc}")
    printed, _ = document(res, png, args.doc.resolve(), extras, wasm, wasm_path, many)
    print(printed)
    print(f"\nwrote {args.doc}" + (f" and {args.png}" if png else ""))


if __name__ == "__main__":
    main()
