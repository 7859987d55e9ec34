"""Many held leases in one process (scripts/bench): the requests their renewals send to
Redis and the client CPU they cost, fencepost beside the libraries users would pick.

usage: many_leases.py --redis redis://127.0.0.1:PORT [--leases N] [--ttl S] [--seconds S]
                      [--case NAME] [--json FILE]

Each case runs in a process of its own: it takes N leases (TTL --ttl seconds) on
distinct names, then holds them --seconds while they renew, and counts what reached the
server in that window from Redis' own `INFO commandstats` (before and after):

  requests   script calls (EVAL, EVALSHA and their _RO forms): every library here renews
             with a Lua script, so these are its renewal requests
  commands   every command the server ran, those inside scripts included (its work)
  cpu        the case process's CPU time (user + system, all threads) over the window

  fencepost-sync        fencepost.Lock(RedisBackend(redis.Redis)).acquire_sync() × N: the
                        lock machine renews on its own (every ttl/3), batching leases due
                        together into renew_many script calls
  fencepost-async       the same on redis.asyncio: await Lock(...).acquire() × N
  redis-py              redis-py `Lock(timeout=ttl)` × N, and the loop a user writes: every
                        ttl/3, `extend(ttl, replace_ttl=True)` on each lock, one request a lock
  python-redis-lock     python-redis-lock `Lock(expire=ttl, auto_renewal=True)` × N: one
                        renewal thread a lock, renewing every 2/3 of the expiry

At the end each case checks that every lease is still held on the server (its key holds
the owner's value), then releases them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Optional

CASES = [
    ("fencepost-sync", "fencepost", "`Lock(RedisBackend(redis.Redis))`, `acquire_sync()`: renewals by the lock machine"),
    ("fencepost-async", "fencepost", "the same on `redis.asyncio`: `await acquire()`"),
    ("redis-py", "peer", "redis-py `Lock` + a renewal loop: `extend(ttl, replace_ttl=True)` on each lock every ttl/3"),
    ("python-redis-lock", "peer", "python-redis-lock `Lock(auto_renewal=True)`: a renewal thread a lock, every 2/3 of the expiry"),
]
SCRIPT_CALLS = ("eval", "evalsha", "eval_ro", "evalsha_ro")


def command_counts(client: Any) -> Dict[str, int]:
    """`INFO commandstats` as {command: calls}."""
    stats = client.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}


def held_on_server(client: Any, keys_and_owners: List[tuple]) -> int:  # type: ignore[type-arg]
    """How many of (key, owner) still hold that owner, by GET in pipelines."""
    held = 0
    for i in range(0, len(keys_and_owners), 1000):
        chunk = keys_and_owners[i : i + 1000]
        pipe = client.pipeline(transaction=False)
        for key, _ in chunk:
            pipe.get(key)
        for (_, owner), value in zip(chunk, pipe.execute()):
            held += value is not None and value.decode() == owner
    return held


def hold(url: str, case: str, leases: int, ttl: float, seconds: float) -> Dict[str, Any]:
    """Runs one case in this process; returns its figures."""
    import redis

    admin = redis.Redis.from_url(url)
    prefix = f"fpbench:many:{uuid.uuid4().hex[:8]}:"
    names = [f"job:{i}" for i in range(leases)]
    release: Callable[[], None]
    started = time.monotonic()

    if case in ("fencepost-sync", "fencepost-async"):
        import fencepost
        from fencepost.redis import RedisBackend

        if case == "fencepost-sync":
            backend = RedisBackend(redis.Redis.from_url(url), key_prefix=prefix)
            held = [fencepost.Lock(backend, n, ttl=ttl).acquire_sync() for n in names]

            def release() -> None:
                for lease in held:
                    lease.release()
                backend.close()

            acquired = time.monotonic()
            window = measure(admin, seconds, lambda: time.sleep(seconds))
        else:
            loop = asyncio.new_event_loop()
            backend = RedisBackend(redis.asyncio.Redis.from_url(url), key_prefix=prefix)

            async def take() -> List[Any]:
                return [await fencepost.Lock(backend, n, ttl=ttl).acquire() for n in names]

            held = loop.run_until_complete(take())
            acquired = time.monotonic()
            window = measure(admin, seconds, lambda: loop.run_until_complete(asyncio.sleep(seconds)))

            def release() -> None:
                async def go() -> None:
                    for lease in held:
                        await lease.release()

                loop.run_until_complete(go())
                backend.close()

        owners = [(backend.lock_key(n), lease.owner_id) for n, lease in zip(names, held)]
    elif case == "redis-py":
        client = redis.Redis.from_url(url)
        locks = [client.lock(prefix + n, timeout=ttl, thread_local=False) for n in names]
        for lock in locks:
            assert lock.acquire(blocking=False)
        acquired = time.monotonic()
        stop = threading.Event()

        def renew() -> None:
            # what a redis-py user writes: every ttl/3, extend each lock back to the full ttl
            while not stop.wait(ttl / 3):
                for lock in locks:
                    lock.extend(ttl, replace_ttl=True)

        renewer = threading.Thread(target=renew, daemon=True)
        renewer.start()
        window = measure(admin, seconds, lambda: time.sleep(seconds))
        stop.set()
        renewer.join()

        def release() -> None:
            for lock in locks:
                lock.release()

        owners = [(prefix + n, lock.local.token.decode()) for n, lock in zip(names, locks)]
    elif case == "python-redis-lock":
        import redis_lock

        threading.stack_size(256 * 1024)  # one renewal thread a lock
        # a renewal thread that finds its lock expired dies with NotAcquired: counted by
        # held_at_end, not printed 10,000 times
        threading.excepthook = lambda hook: None
        client = redis.Redis.from_url(url)
        plocks = [redis_lock.Lock(client, prefix + n, expire=int(ttl), auto_renewal=True) for n in names]
        for plock in plocks:
            assert plock.acquire(blocking=False)
        acquired = time.monotonic()
        window = measure(admin, seconds, lambda: time.sleep(seconds))

        def release() -> None:
            for plock in plocks:
                try:
                    plock.release()
                except redis_lock.NotAcquired:  # expired: its renewal thread fell behind
                    pass

        owners = [("lock:" + prefix + n, plock.id.decode() if isinstance(plock.id, bytes) else plock.id) for n, plock in zip(names, plocks)]
    else:
        raise SystemExit(f"unknown case {case!r}")

    window["held_at_end"] = held_on_server(admin, owners)
    release()
    window.update(case=case, leases=leases, ttl_s=ttl, acquire_s=round(acquired - started, 2))
    return window


def measure(admin: Any, seconds: float, wait: Callable[[], None]) -> Dict[str, Any]:
    """The server's command counts and this process's CPU over `wait()`."""
    before, cpu0, t0 = command_counts(admin), time.process_time(), time.monotonic()
    wait()
    after, cpu1, t1 = command_counts(admin), time.process_time(), time.monotonic()
    elapsed = t1 - t0
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    delta["info"] = delta.get("info", 0) - 1  # the INFO that read `before`
    requests = sum(delta.get(k, 0) for k in SCRIPT_CALLS)
    return {
        "seconds": round(elapsed, 2),
        "requests_per_s": requests / elapsed,
        "commands_per_s": sum(v for k, v in delta.items() if k != "info") / elapsed,
        "cpu_ms_per_s": (cpu1 - cpu0) * 1000 / elapsed,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--redis", required=True)
    ap.add_argument("--leases", type=int, default=10_000)
    ap.add_argument("--ttl", type=float, default=30.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--case", help="run one case in this process and print its JSON")
    ap.add_argument("--json", help="write every case's figures here")
    args = ap.parse_args()
    if args.case:
        print(json.dumps(hold(args.redis, args.case, args.leases, args.ttl, args.seconds)))
        return
    rows: List[Dict[str, Any]] = []
    absent: List[Dict[str, str]] = []
    for case, kind, what in CASES:
        cmd = [sys.executable, __file__, "--redis", args.redis, "--case", case, "--leases", str(args.leases), "--ttl", str(args.ttl), "--seconds", str(args.seconds)]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=args.seconds * 3 + 600)
        if run.returncode != 0:
            absent.append({"lib": case, "why": (run.stderr.strip().splitlines() or ["failed"])[-1][:200]})
            print(f"many_leases.py: {case} failed:\n{run.stderr}", file=sys.stderr)
            continue
        row = json.loads(run.stdout.strip().splitlines()[-1])
        row.update(lib=case, kind=kind, what=what)
        rows.append(row)
        print(f"{case:18} {row['leases']} leases, ttl {row['ttl_s']:g} s, {row['seconds']:g} s: {row['requests_per_s']:9.1f} requests/s, "
              f"{row['commands_per_s']:9.1f} commands/s, cpu {row['cpu_ms_per_s']:6.1f} ms/s, held at end {row['held_at_end']}", flush=True)
    doc: Dict[str, Any] = {"lang": "python", "leases": args.leases, "ttl_s": args.ttl, "seconds": args.seconds, "rows": rows, "absent": absent}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
