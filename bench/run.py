"""Runs every benchmark case of scripts/bench and writes one results JSON.

usage: run.py --redis URL --out FILE [--quick] [--node-skip REASON] [--core-skip REASON]
              [--target-dir DIR]

Order: the core (criterion, lease memory, callgrind: Redis idle), then the uncontended
rounds, then the contended rounds. Rounds are interleaved — round r runs every library
once (Python and Node alike) before round r + 1 starts, the order rotated by one each
round — so a slow minute of this shared machine hits every library alike (A/B/A/B…).
Each case is its own process (bench/python/harness.py, bench/node/harness.mjs) on its
own keys; every case is bounded in time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
PY_HARNESS = BENCH / "python" / "harness.py"
NODE_HARNESS = BENCH / "node" / "harness.mjs"



#: Rows that only make sense with several workers (the baton floor: not a lock).
CONTENDED_ONLY = {"baton"}


def list_libs(lang: str) -> List[str]:
    """What the harness can run with this build (the fair-hand-off rows of fencepost
    appear once its binding offers the option)."""
    cmd = [sys.executable, str(PY_HARNESS), "libs"] if lang == "python" else ["node", str(NODE_HARNESS), "libs"]
    p = sh(cmd, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"{lang} harness cannot list its libraries: {(p.stderr or p.stdout).strip()[-500:]}")
    return [line.strip() for line in p.stdout.splitlines() if line.strip()]


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sh(cmd: Sequence[str], *, timeout: float, env: Optional[Dict[str, str]] = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


def percentile(xs: Sequence[float], q: float) -> Optional[float]:
    if not xs:
        return None
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


# ---- core ---------------------------------------------------------------------------------


def core(args: argparse.Namespace) -> Dict[str, Any]:
    env = dict(os.environ, CARGO_TARGET_DIR=str(args.target_dir), CRITERION_HOME=str(args.work / "criterion"))
    out: Dict[str, Any] = {}
    timing = ["--warm-up-time", "0.5", "--measurement-time", "1"] if args.quick else ["--warm-up-time", "2", "--measurement-time", "5"]
    log("core: cargo bench (criterion: cycle, timer_step)")
    p = sh(["cargo", "bench", "-p", "fencepost-core", "--bench", "machine", "--locked", "--", *timing], timeout=1800, env=env)
    if p.returncode != 0:
        out["criterion_error"] = (p.stderr or p.stdout)[-2000:]
    else:
        crit: Dict[str, Any] = {}
        for group, names in [("cycle", ["memory_redis", "memory_redis_fair", "memory_redis_observed", "canned"]), ("timer_step", ["1000", "10000", "100000"])]:
            for name in names:
                f = args.work / "criterion" / group / name / "new" / "estimates.json"
                if f.exists():
                    e = json.loads(f.read_text())
                    crit[f"{group}/{name}"] = {
                        "median_ns": e["median"]["point_estimate"],
                        "mean_ns": e["mean"]["point_estimate"],
                        "ci_ns": [e["mean"]["confidence_interval"]["lower_bound"], e["mean"]["confidence_interval"]["upper_bound"]],
                    }
        out["criterion"] = crit
    log("core: examples (lease_memory, cycle_count)")
    p = sh(["cargo", "build", "--release", "--locked", "-p", "fencepost-core", "--example", "lease_memory", "--example", "cycle_count"], timeout=1800, env=env)
    if p.returncode != 0:
        out["examples_error"] = p.stderr[-2000:]
        return out
    examples = args.target_dir / "release" / "examples"
    p = sh([str(examples / "lease_memory"), "--json"], timeout=300)
    out["lease_memory"] = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    if shutil.which("valgrind") is None:
        out["callgrind_error"] = "valgrind is not installed"
        return out
    log("core: callgrind instruction counts")

    def instructions(*argv: str, renewals: bool = False) -> Any:
        f = args.work / "callgrind.out"
        p = sh(["valgrind", "--tool=callgrind", f"--callgrind-out-file={f}", str(examples / "cycle_count"), *argv], timeout=900)
        if p.returncode != 0:
            raise RuntimeError(p.stderr[-1000:])
        m = re.search(r"^summary:\s*(\d+)", f.read_text(), re.M)
        f.unlink()
        if not m:
            raise RuntimeError("no summary line in the callgrind output")
        if not renewals:
            return int(m.group(1))
        r = re.search(r"(\d+) renewals", p.stdout)
        if not r:
            raise RuntimeError(f"no renewal count in {p.stdout!r}")
        return int(m.group(1)), int(r.group(1))

    calls: Dict[str, Any] = {}
    try:
        lo, hi = 1_000, 11_000
        for mode, name in [("memory", "memory_redis"), ("memory-fair", "memory_redis_fair"), ("memory-observed", "memory_redis_observed"), ("canned", "canned")]:
            calls[f"cycle/{name}"] = (instructions(mode, str(hi)) - instructions(mode, str(lo))) / (hi - lo)
        # fleet rounds renew every lease once (batched steps): per renewal, from the renewal counts printed
        for n in [1_000, 10_000, 100_000]:
            (i1, r1), (i3, r3) = (instructions("fleet", str(n), str(k), renewals=True) for k in (1, 3))
            calls[f"timer_step/{n}"] = (i3 - i1) / (r3 - r1)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        out["callgrind_error"] = str(exc)
    out["callgrind"] = calls
    p = sh(["valgrind", "--version"], timeout=30)
    out["valgrind"] = p.stdout.strip()
    return out


# ---- host-language cases ---------------------------------------------------------------------


def harness_cmd(lang: str, mode: str, lib: str, key: str, args: argparse.Namespace, extra: List[str]) -> List[str]:
    if lang == "python":
        base = [sys.executable, str(PY_HARNESS)]
    else:
        base = ["node", str(NODE_HARNESS)]
    return [*base, mode, "--lib", lib, "--redis", args.redis, "--key", key, *extra]


def run_case(lang: str, mode: str, lib: str, key: str, args: argparse.Namespace, extra: List[str], timeout: float) -> Dict[str, Any]:
    cmd = harness_cmd(lang, mode, lib, key, args, extra)
    try:
        p = sh(cmd, timeout=timeout, env=args.env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = (p.stderr.strip() or p.stdout.strip())[-1500:]
        return {"error": f"exit {p.returncode}: {tail}"}
    return json.loads(lines[-1])


def uncontended_summary(rounds: List[Dict[str, Any]]) -> Dict[str, Any]:
    ok = [r for r in rounds if "cycle_us" in r]
    errors = [r["error"] for r in rounds if "error" in r]
    if not ok:
        return {"error": errors[0] if errors else "no rounds ran"}
    medians = [statistics.median(r["cycle_us"]) for r in ok]
    pooled = [t for r in ok for t in r["cycle_us"]]
    return {
        "median_us": statistics.median(medians),
        "round_medians_us": medians,
        "p99_us": percentile(pooled, 0.99),
        "cycles": len(pooled),
        "errors": errors,
    }


def contended_metrics(case: Dict[str, Any]) -> Dict[str, Any]:
    """Rates, hand-offs and exclusion from the raw grants of one contended run."""
    start, stop, workers = int(case["start_ns"]), int(case["stop_ns"]), int(case["workers"])
    seconds = (stop - start) / 1e9
    grants = []  # (t_acq, t_rel, worker)
    overlaps = errors = 0
    crashes, first_errors = [], []
    for rep in case["reports"]:
        if "crash" in rep:
            crashes.append(f"worker {rep.get('worker')}: {rep['crash'][-300:]}")
            continue
        overlaps += rep["overlaps"]
        errors += rep["errors"]
        if rep.get("first_error"):
            first_errors.append(rep["first_error"])
        for t_acq, t_rel in rep["grants"]:
            grants.append((int(t_acq), int(t_rel), rep["worker"]))
    grants.sort()
    # client-side check: the intervals [acquire returned, release called] of a working
    # lock are inside the server-side holds, which never overlap
    interval_overlaps = sum(1 for a, b in zip(grants, grants[1:]) if b[0] < a[1])
    window = [g for g in grants if start <= g[0] < stop]
    per_worker = [0] * workers
    for g in window:
        per_worker[g[2]] += 1
    latencies = [(b[0] - a[1]) / 1e3 for a, b in zip(window, window[1:]) if a[2] != b[2]]
    mean = len(window) / workers if workers else 0
    return {
        "seconds": seconds,
        "grants": len(window),
        "grants_per_s": len(window) / seconds,
        "handoffs": len(latencies),
        "handoffs_per_s": len(latencies) / seconds,
        "handoff_us": latencies,
        "per_worker": per_worker,
        "min_grants": min(per_worker) if per_worker else 0,
        "max_grants": max(per_worker) if per_worker else 0,
        "fairness": (min(per_worker) / mean) if mean else 0.0,
        "occupancy_violations": overlaps,
        "interval_overlaps": interval_overlaps,
        "errors": errors,
        "first_error": first_errors[0] if first_errors else None,
        "crashes": crashes,
    }


def contended_summary(rounds: List[Dict[str, Any]]) -> Dict[str, Any]:
    errors = [r["error"] for r in rounds if "error" in r]
    ok = [contended_metrics(r) for r in rounds if "reports" in r]
    if not ok:
        return {"error": errors[0] if errors else "no rounds ran"}
    med = lambda k: statistics.median(m[k] for m in ok)  # noqa: E731
    pooled = [x for m in ok for x in m["handoff_us"]]
    rng = random.Random(0)
    sample = pooled if len(pooled) <= 5000 else rng.sample(pooled, 5000)
    return {
        "rounds": len(ok),
        "grants_per_s": med("grants_per_s"),
        "handoffs_per_s": med("handoffs_per_s"),
        "handoff_p50_us": percentile(pooled, 0.50),
        "handoff_p99_us": percentile(pooled, 0.99),
        "handoff_count": len(pooled),
        "handoff_sample_us": sorted(sample),
        "min_grants": med("min_grants"),
        "max_grants": med("max_grants"),
        "fairness": med("fairness"),
        "per_worker_last_round": ok[-1]["per_worker"],
        "seconds": ok[-1]["seconds"],
        "occupancy_violations": sum(m["occupancy_violations"] for m in ok),
        "interval_overlaps": sum(m["interval_overlaps"] for m in ok),
        "lib_errors": sum(m["errors"] for m in ok),
        "first_error": next((m["first_error"] for m in ok if m["first_error"]), None),
        "crashes": [c for m in ok for c in m["crashes"]],
        "errors": errors,
    }


def versions(args: argparse.Namespace) -> Dict[str, str]:
    v: Dict[str, str] = {}
    try:
        from importlib.metadata import version

        for d in ["redis", "python-redis-lock", "pottery", "fencepost", "matplotlib"]:
            try:
                v[f"py:{d}"] = version(d)
            except Exception:
                pass
    except ImportError:
        pass
    if args.node_libs:
        for d in ["ioredis", "redlock", "redis-semaphore"]:
            f = BENCH / "node" / "node_modules" / d / "package.json"
            if f.exists():
                v[f"node:{d}"] = json.loads(f.read_text())["version"]
    for name, cmd in [
        ("python", [sys.executable, "--version"]),
        ("node", ["node", "--version"]),
        ("redis-server", ["redis-server", "--version"]),
        ("rustc", ["rustc", "--version"]),
    ]:
        try:
            p = sh(cmd, timeout=30)
            v[name] = (p.stdout or p.stderr).strip()
        except (OSError, subprocess.TimeoutExpired):
            pass
    return v


def source() -> str:
    """The commit fencepost was built from, and whether its sources had local changes."""
    try:
        head = sh(["git", "rev-parse", "--short", "HEAD"], timeout=30).stdout.strip()
        dirty = sh(["git", "status", "--porcelain", "--", "core", "bindings-python", "bindings-node"], timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return head + (" + uncommitted changes in core/ or bindings-*/" if dirty else "")


def machine() -> Dict[str, Any]:
    info: Dict[str, Any] = {"platform": platform.platform(), "cpus": os.cpu_count()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["memory_gib"] = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--redis", required=True)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--node-skip", default="")
    ap.add_argument("--core-skip", default="")
    ap.add_argument("--target-dir", type=Path, default=REPO / "target" / "bench")
    ap.add_argument("--command", default="scripts/bench")
    args = ap.parse_args()
    if not args.redis.startswith("redis://127.0.0.1:"):
        ap.error("benchmarks talk to a Redis on 127.0.0.1 only")
    args.work = args.out.parent
    args.work.mkdir(parents=True, exist_ok=True)
    args.env = dict(os.environ)
    python_libs = list_libs("python")
    args.node_libs = []
    if not args.node_skip:
        try:
            args.node_libs = list_libs("node")
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            args.node_skip = str(exc)
            print(f"skipped: Node benchmarks: {exc}", flush=True)
    q = args.quick
    plan = {
        # many short rounds: this machine's speed drifts between two levels for
        # seconds at a time, and every library must see both as often
        "uncontended_rounds": 2 if q else 10,
        "uncontended_cycles": 300 if q else 1000,
        "uncontended_warmup": 50 if q else 200,
        "contended_workers": [8, 32],
        "contended_rounds": 1 if q else 2,
        "contended_seconds": 1.5 if q else 5.0,
        "hold_ms": 1.0,
    }
    results: Dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": args.command + (" --quick" if q else ""),
        "quick": q,
        "plan": plan,
        "machine": machine(),
        "source": source(),
        "versions": versions(args),
        "node_skipped": args.node_skip or None,
        "libs": {"python": python_libs, "node": args.node_libs},
        "core_skipped": args.core_skip or None,
    }
    t0 = time.monotonic()
    results["loadavg_start"] = os.getloadavg()
    results["core"] = {} if args.core_skip else core(args)

    libs = [("python", lib) for lib in python_libs] + [("node", lib) for lib in args.node_libs]
    case = 0
    unc: Dict[str, List[Dict[str, Any]]] = {f"{lang}:{lib}": [] for lang, lib in libs if lib not in CONTENDED_ONLY}
    for r in range(plan["uncontended_rounds"]):
        order = libs[r % len(libs):] + libs[: r % len(libs)]
        log(f"uncontended round {r + 1}/{plan['uncontended_rounds']}")
        for lang, lib in order:
            if lib in CONTENDED_ONLY:
                continue
            case += 1
            extra = ["--cycles", str(plan["uncontended_cycles"]), "--warmup", str(plan["uncontended_warmup"])]
            res = run_case(lang, "uncontended", lib, f"bench{case}:{lib}", args, extra, timeout=300)
            if "error" in res:
                log(f"  {lang} {lib}: FAILED {res['error'][:300]}")
            unc[f"{lang}:{lib}"].append(res)
    results["uncontended"] = {k: uncontended_summary(v) for k, v in unc.items()}

    results["contended"] = {}
    for workers in plan["contended_workers"]:
        runs: Dict[str, List[Dict[str, Any]]] = {f"{lang}:{lib}": [] for lang, lib in libs}
        for r in range(plan["contended_rounds"]):
            order = libs[r % len(libs):] + libs[: r % len(libs)]
            log(f"contended, {workers} workers, round {r + 1}/{plan['contended_rounds']}")
            for lang, lib in order:
                case += 1
                extra = ["--workers", str(workers), "--seconds", str(plan["contended_seconds"]), "--hold-ms", str(plan["hold_ms"])]
                res = run_case(lang, "contended", lib, f"bench{case}:{lib}", args, extra, timeout=plan["contended_seconds"] + 120)
                if "error" in res:
                    log(f"  {lang} {lib}: FAILED {res['error'][:300]}")
                runs[f"{lang}:{lib}"].append(res)
        results["contended"][str(workers)] = {k: contended_summary(v) for k, v in runs.items()}
    results["elapsed_s"] = round(time.monotonic() - t0, 1)
    results["loadavg_end"] = os.getloadavg()
    args.out.write_text(json.dumps(results, indent=1))
    log(f"results: {args.out} ({results['elapsed_s']} s)")


if __name__ == "__main__":
    main()
