"""Python side of scripts/bench: one case per run, one JSON line on stdout.

usage: harness.py uncontended --lib LIB --redis URL --key KEY --cycles N [--warmup N]
       harness.py contended   --lib LIB --redis URL --key KEY --workers W --seconds S [--hold-ms H]
       harness.py libs         (prints the library names, one a line)

Every library is used as its documentation shows, with its default retry behaviour
(that is what users get), a 10 s lease and no acquire timeout (each waits until it
gets the lock). What each row runs:

  fencepost-sync     fencepost.Lock(RedisBackend(redis.Redis)) .acquire_sync() / .release_sync()
  fencepost-async    fencepost.Lock(RedisBackend(redis.asyncio.Redis)) await .acquire() / .release()
                     (the blocking client with socket_timeout=2, as fencepost's docs ask
                     for blocking use: with it a request runs on the caller's thread)
  fencepost-*-fair   the same with fair hand-off on (fair=True), listed by `libs` only once
                     the binding offers the option
  raw                redis-py SET key owner NX PX 10000, retried at once while taken;
                     release: owner-checked DEL script (EVALSHA) — the floor: 2 round trips
  raw-async          the same on redis.asyncio (the floor for asyncio code)
  fencepost-scripts  fencepost's acquire/release Lua scripts by hand (EVALSHA), no machine, no
                     driver: the protocol's floor
  fencepost-scripts-async  the same on redis.asyncio: the protocol's floor for asyncio code
  redis-py           redis.lock.Lock(client, key, timeout=10) (sleep=0.1 between tries)
  redis-py-async     redis.asyncio.lock.Lock(client, key, timeout=10) on redis.asyncio.Redis
                     (await acquire() / release(); the same commands and sleep=0.1): the
                     lock an asyncio program on redis-py would pick
  python-redis-lock  redis_lock.Lock(client, key, expire=10) (waiters BLPOP a signal list)
  pottery            pottery.Redlock(key=key, masters={client}, auto_release_time=10)
  fencepost-redlock3 fencepost.Lock(RedlockBackend([redis.Redis] × 3)) .acquire_sync() / .release_sync()
  fencepost-redlock5 the same on five masters (the masters: $FENCEPOST_BENCH_MASTERS, the
                     URLs of five independent Redis servers, comma-separated; the rows are
                     listed by `libs` only when it is set)
  pottery-redlock3   pottery.Redlock(key=key, masters={3 clients}, auto_release_time=10)
  pottery-redlock5   the same on five masters
  baton              not a lock, contended runs only: one baton passed round robin (RPUSH onto
                     the next worker's list, which it BLPOPs) — the wake-up floor of a
                     notified hand-off on this machine (one round trip, no lock logic)

uncontended: one process, `warmup` then `cycles` acquire+release cycles, each timed
with perf_counter_ns. Prints per-cycle times (µs).

contended: `workers` forked processes, each in a loop for `seconds`: acquire; t_acq;
INCR an occupancy counter (must return 1: else two holders overlap); hold until
t_acq + hold (time.sleep, also for asyncio: the hold stands for work that keeps the
process busy); DECR; t_rel; release. Timestamps are time.monotonic_ns()
(CLOCK_MONOTONIC, one clock for every process on Linux). Prints every grant
(worker, t_acq, t_rel) and the exclusion counters; the orchestrator computes rates,
hand-offs and latencies the same way for Python and Node.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Tuple

LEASE_S = 10
LEASE_MS = LEASE_S * 1000
#: fencepost's blocking client: its docs ask for a socket timeout (above retry_max, 0.5 s)
SOCKET_TIMEOUT_S = 2.0

RELEASE_LUA = """if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


# ---- the libraries ----------------------------------------------------------------------


class Lib:
    """acquire()/release() in the library's own idiom; `is_async` says which worker
    loop runs it."""

    is_async = False

    def __init__(self, url: str, key: str) -> None:
        self.url, self.key = url, key

    def close(self) -> None:
        pass


class Raw(Lib):
    def __init__(self, url: str, key: str) -> None:
        super().__init__(url, key)
        import redis

        self.r = redis.Redis.from_url(url)
        self.release_script = self.r.register_script(RELEASE_LUA)
        self.owner = b""

    def acquire(self) -> None:
        owner = os.urandom(16).hex()
        while not self.r.set(self.key, owner, nx=True, px=LEASE_MS):
            pass  # busy retry: the floor of what polling can do
        self.owner = owner.encode()

    def release(self) -> None:
        if self.release_script(keys=[self.key], args=[self.owner]) != 1:
            raise RuntimeError("raw release: not the owner")


class RawAsync(Lib):
    """The raw floor on redis.asyncio: what two round trips cost an asyncio program."""

    is_async = True

    def __init__(self, url: str, key: str) -> None:
        super().__init__(url, key)
        import redis.asyncio

        self.r = redis.asyncio.Redis.from_url(url)
        self.release_script = self.r.register_script(RELEASE_LUA)
        self.owner = b""

    async def acquire(self) -> None:  # type: ignore[override]
        owner = os.urandom(16).hex()
        while not await self.r.set(self.key, owner, nx=True, px=LEASE_MS):
            pass
        self.owner = owner.encode()

    async def release(self) -> None:  # type: ignore[override]
        if await self.release_script(keys=[self.key], args=[self.owner]) != 1:
            raise RuntimeError("raw release: not the owner")


class Scripts(Lib):
    """fencepost's own acquire and release scripts sent by hand (EVALSHA), no lock
    machine and no driver: the floor of fencepost's protocol. The gap between this row
    and the raw floor is the protocol (Lua, the token INCR); between fencepost's rows
    and this one, the binding and its driver."""

    def __init__(self, url: str, key: str) -> None:
        super().__init__(url, key)
        import redis

        import fencepost
        from fencepost._core import lock_key, token_key

        scripts = fencepost.redis_scripts()
        self.r = redis.Redis.from_url(url)
        self.acquire_script = self.r.register_script(scripts["acquire"][1])
        self.release_script = self.r.register_script(scripts["release"][1])
        self.keys = [lock_key("fencepost:", key), token_key("fencepost:", key)]
        self.owner = ""

    def acquire(self) -> None:
        owner = os.urandom(16).hex()
        while True:
            granted = self.acquire_script(keys=self.keys, args=[owner, LEASE_MS])
            if int(granted[0]) == 1:
                break  # busy retry otherwise, like the raw floor
        self.owner = owner

    def release(self) -> None:
        if self.release_script(keys=self.keys[:1], args=[self.owner]) != 1:
            raise RuntimeError("scripts release: not the owner")


class ScriptsAsync(Lib):
    """fencepost's two scripts by hand on redis.asyncio: the protocol floor of the
    asyncio rows (the binding's share under asyncio is fencepost-async minus this)."""

    is_async = True

    def __init__(self, url: str, key: str) -> None:
        super().__init__(url, key)
        import redis.asyncio

        import fencepost
        from fencepost._core import lock_key, token_key

        scripts = fencepost.redis_scripts()
        self.r = redis.asyncio.Redis.from_url(url)
        self.acquire_script = self.r.register_script(scripts["acquire"][1])
        self.release_script = self.r.register_script(scripts["release"][1])
        self.keys = [lock_key("fencepost:", key), token_key("fencepost:", key)]
        self.owner = ""

    async def acquire(self) -> None:  # type: ignore[override]
        owner = os.urandom(16).hex()
        while True:
            granted = await self.acquire_script(keys=self.keys, args=[owner, LEASE_MS])
            if int(granted[0]) == 1:
                break
        self.owner = owner

    async def release(self) -> None:  # type: ignore[override]
        if await self.release_script(keys=self.keys[:1], args=[self.owner]) != 1:
            raise RuntimeError("scripts release: not the owner")


class RedisPy(Lib):
    def __init__(self, url: str, key: str) -> None:
        super().__init__(url, key)
        import redis

        self.r = redis.Redis.from_url(url)
        self.lock = self.r.lock(key, timeout=LEASE_S)

    def acquire(self) -> None:
        if not self.lock.acquire():
            raise RuntimeError("redis-py Lock.acquire returned False")

    def release(self) -> None:
        self.lock.release()


class RedisPyAsync(Lib):
    """redis-py's asyncio Lock (redis.asyncio.lock.Lock): the peer of fencepost-async."""

    is_async = True

    def __init__(self, url: str, key: str) -> None:
        super().__init__(url, key)
        import redis.asyncio

        self.r = redis.asyncio.Redis.from_url(url)
        self.lock = self.r.lock(key, timeout=LEASE_S)

    async def acquire(self) -> None:  # type: ignore[override]
        if not await self.lock.acquire():
            raise RuntimeError("redis.asyncio Lock.acquire returned False")

    async def release(self) -> None:  # type: ignore[override]
        await self.lock.release()


class PythonRedisLock(Lib):
    def __init__(self, url: str, key: str) -> None:
        super().__init__(url, key)
        import redis
        import redis_lock

        self.r = redis.Redis.from_url(url)
        self.lock = redis_lock.Lock(self.r, key, expire=LEASE_S)

    def acquire(self) -> None:
        if not self.lock.acquire():
            raise RuntimeError("python-redis-lock acquire returned False")

    def release(self) -> None:
        self.lock.release()


class Pottery(Lib):
    def __init__(self, url: str, key: str) -> None:
        super().__init__(url, key)
        import logging

        import redis
        from pottery import Redlock

        logging.getLogger("pottery").setLevel(logging.WARNING)
        self.r = redis.Redis.from_url(url)
        self.lock = Redlock(key=key, masters={self.r}, auto_release_time=LEASE_S)

    def acquire(self) -> None:
        if not self.lock.acquire():
            raise RuntimeError("pottery Redlock.acquire returned False")

    def release(self) -> None:
        self.lock.release()


def bench_masters(n: int) -> List[str]:
    """The first ``n`` Redlock master URLs of $FENCEPOST_BENCH_MASTERS."""
    urls = [u for u in os.environ.get("FENCEPOST_BENCH_MASTERS", "").split(",") if u]
    if len(urls) < n:
        raise RuntimeError(f"FENCEPOST_BENCH_MASTERS names {len(urls)} masters, {n} needed")
    return urls[:n]


class FencepostRedlock(Lib):
    masters = 3

    def __init__(self, url: str, key: str) -> None:
        super().__init__(url, key)
        import redis

        import fencepost
        from fencepost.redlock import RedlockBackend

        self.clients = [redis.Redis.from_url(u, socket_timeout=SOCKET_TIMEOUT_S) for u in bench_masters(self.masters)]
        self.backend = RedlockBackend(self.clients)
        self.lock = fencepost.Lock(self.backend, key, ttl=LEASE_S)

    def acquire(self) -> None:
        self.lock.acquire_sync()

    def release(self) -> None:
        self.lock.release_sync()

    def close(self) -> None:
        self.backend.close()


class FencepostRedlock5(FencepostRedlock):
    masters = 5


class PotteryRedlock(Lib):
    masters = 3

    def __init__(self, url: str, key: str) -> None:
        super().__init__(url, key)
        import logging

        import redis
        from pottery import Redlock

        logging.getLogger("pottery").setLevel(logging.WARNING)
        clients = {redis.Redis.from_url(u) for u in bench_masters(self.masters)}
        self.lock = Redlock(key=key, masters=clients, auto_release_time=LEASE_S)

    def acquire(self) -> None:
        if not self.lock.acquire():
            raise RuntimeError("pottery Redlock.acquire returned False")

    def release(self) -> None:
        self.lock.release()


class PotteryRedlock5(PotteryRedlock):
    masters = 5


class RoundOver(Exception):
    """A contended worker's acquire found the round over (the baton floor only)."""


class Baton(Lib):
    """Not a lock: the wake-up floor of any notified hand-off on this machine. The
    workers pass one baton round robin: "acquire" is a BLPOP on the worker's own list,
    "release" an RPUSH onto the next worker's. One round trip per hand-off, perfectly
    fair, exclusive by construction (one baton). Contended runs only (run.py's
    CONTENDED_ONLY; `uncontended --lib baton` is refused)."""

    def __init__(self, url: str, key: str) -> None:
        super().__init__(url, key)
        import redis

        self.r = redis.Redis.from_url(url)
        self.index, self.workers, self.stop_ns = 0, 1, 0
        self.mine = f"{key}:baton:0"

    def bind(self, index: int, workers: int) -> None:
        """Called in each worker before the start: empties its list; worker 0 holds
        the baton first."""
        self.index, self.workers = index, workers
        self.mine = f"{self.key}:baton:{index}"
        self.r.delete(self.mine)
        if index == 0:
            self.r.rpush(self.mine, "baton")

    def acquire(self) -> None:
        while self.r.blpop([self.mine], timeout=0.05) is None:
            if time.monotonic_ns() >= self.stop_ns:
                raise RoundOver()

    def release(self) -> None:
        self.r.rpush(f"{self.key}:baton:{(self.index + 1) % self.workers}", "baton")


def fair_option() -> Optional[Tuple[str, Dict[str, Any]]]:
    """Where this build of fencepost takes the fair hand-off switch (the core's
    ``RedisBackend.fair``), or None while the binding does not offer it: the
    ``*-fair`` rows appear by themselves once it does."""
    import inspect

    import fencepost
    from fencepost.redis import RedisBackend

    for where, fn in [("backend", RedisBackend.__init__), ("lock", fencepost.Lock.__init__)]:
        try:
            if "fair" in inspect.signature(fn).parameters:
                return where, {"fair": True}
        except (TypeError, ValueError):
            pass
    return None


class FencepostSync(Lib):
    fair = False

    def __init__(self, url: str, key: str) -> None:
        super().__init__(url, key)
        import redis

        import fencepost
        from fencepost.redis import RedisBackend

        backend_kw, lock_kw = _fencepost_kwargs(self.fair)
        self.r = redis.Redis.from_url(url, socket_timeout=SOCKET_TIMEOUT_S)
        self.backend = RedisBackend(self.r, **backend_kw)
        self.lock = fencepost.Lock(self.backend, key, ttl=LEASE_S, **lock_kw)

    def acquire(self) -> None:
        self.lock.acquire_sync()

    def release(self) -> None:
        self.lock.release_sync()

    def close(self) -> None:
        self.backend.close()


class FencepostAsync(Lib):
    is_async = True
    fair = False

    def __init__(self, url: str, key: str) -> None:
        super().__init__(url, key)
        import redis.asyncio

        import fencepost
        from fencepost.redis import RedisBackend

        backend_kw, lock_kw = _fencepost_kwargs(self.fair)
        self.r = redis.asyncio.Redis.from_url(url)
        self.backend = RedisBackend(self.r, **backend_kw)
        self.lock = fencepost.Lock(self.backend, key, ttl=LEASE_S, **lock_kw)

    async def acquire(self) -> None:  # type: ignore[override]
        await self.lock.acquire()

    async def release(self) -> None:  # type: ignore[override]
        await self.lock.release()


class FencepostSyncFair(FencepostSync):
    fair = True


class FencepostAsyncFair(FencepostAsync):
    fair = True


def _fencepost_kwargs(fair: bool) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    if not fair:
        return {}, {}
    option = fair_option()
    if option is None:
        raise RuntimeError("this fencepost build has no fair hand-off option")
    where, kw = option
    return (kw, {}) if where == "backend" else ({}, kw)


LIBS: Dict[str, Callable[[str, str], Lib]] = {
    "fencepost-sync": FencepostSync,
    "fencepost-async": FencepostAsync,
    "raw": Raw,
    "raw-async": RawAsync,
    "fencepost-scripts": Scripts,
    "fencepost-scripts-async": ScriptsAsync,
    "redis-py": RedisPy,
    "redis-py-async": RedisPyAsync,
    "python-redis-lock": PythonRedisLock,
    "pottery": Pottery,
    "baton": Baton,
    "fencepost-sync-fair": FencepostSyncFair,
    "fencepost-async-fair": FencepostAsyncFair,
    "fencepost-redlock3": FencepostRedlock,
    "fencepost-redlock5": FencepostRedlock5,
    "pottery-redlock3": PotteryRedlock,
    "pottery-redlock5": PotteryRedlock5,
}


def available() -> List[str]:
    """The libraries this build can run (the fair rows only when fencepost offers it,
    the Redlock rows only with $FENCEPOST_BENCH_MASTERS set)."""
    fair = fair_option() is not None
    masters = bool(os.environ.get("FENCEPOST_BENCH_MASTERS"))
    return [
        name
        for name in LIBS
        if (fair or not name.endswith("-fair")) and (masters or "redlock" not in name)
    ]


# ---- uncontended --------------------------------------------------------------------------


def uncontended(lib: Lib, cycles: int, warmup: int) -> List[float]:
    if lib.is_async:
        return asyncio.run(_uncontended_async(lib, cycles, warmup))
    clock = time.perf_counter_ns
    for _ in range(warmup):
        lib.acquire()
        lib.release()
    times = []
    for _ in range(cycles):
        t0 = clock()
        lib.acquire()
        lib.release()
        times.append((clock() - t0) / 1e3)
    return times


async def _uncontended_async(lib: Any, cycles: int, warmup: int) -> List[float]:
    clock = time.perf_counter_ns
    for _ in range(warmup):
        await lib.acquire()
        await lib.release()
    times = []
    for _ in range(cycles):
        t0 = clock()
        await lib.acquire()
        await lib.release()
        times.append((clock() - t0) / 1e3)
    return times


# ---- contended ----------------------------------------------------------------------------


class Outcome:
    def __init__(self) -> None:
        self.grants: List[Tuple[int, int]] = []
        self.overlaps = 0  # occupancy counter said someone else held it too
        self.errors = 0
        self.first_error: Optional[str] = None

    def error(self, exc: BaseException) -> None:
        self.errors += 1
        if self.first_error is None:
            self.first_error = f"{type(exc).__name__}: {exc}"


def _hold_until(t_ns: int) -> None:
    remaining = t_ns - time.monotonic_ns()
    if remaining > 0:
        time.sleep(remaining / 1e9)


def _sync_worker(lib: Lib, occ: Any, occ_key: str, start: int, stop: int, hold: int) -> Outcome:
    out = Outcome()
    clock = time.monotonic_ns
    _hold_until(start)
    while clock() < stop:
        try:
            lib.acquire()
        except RoundOver:
            break
        except Exception as exc:  # a library that gives up: count it, ask again
            out.error(exc)
            continue
        t_acq = clock()
        if occ.incr(occ_key) != 1:
            out.overlaps += 1
        if t_acq < stop:
            _hold_until(t_acq + hold)
        occ.decr(occ_key)
        t_rel = clock()
        try:
            lib.release()
        except Exception as exc:
            out.error(exc)
        out.grants.append((t_acq, t_rel))
    return out


async def _async_worker(lib: Any, occ: Any, occ_key: str, start: int, stop: int, hold: int) -> Outcome:
    out = Outcome()
    clock = time.monotonic_ns
    _hold_until(start)
    while clock() < stop:
        try:
            await lib.acquire()
        except Exception as exc:
            out.error(exc)
            continue
        t_acq = clock()
        if await occ.incr(occ_key) != 1:
            out.overlaps += 1
        if t_acq < stop:
            _hold_until(t_acq + hold)
        await occ.decr(occ_key)
        t_rel = clock()
        try:
            await lib.release()
        except Exception as exc:
            out.error(exc)
        out.grants.append((t_acq, t_rel))
    return out


def _worker_main(index: int, args: argparse.Namespace, ready: Any, go: Any, start_ns: Any, results: Any) -> None:
    try:
        import redis

        lib = LIBS[args.lib](args.redis, args.key)
        if isinstance(lib, Baton):
            lib.bind(index, args.workers)
        occ_key = args.key + ":occupancy"
        ready.put(index)
        go.wait()
        start = start_ns.value
        stop = start + int(args.seconds * 1e9)
        if isinstance(lib, Baton):
            lib.stop_ns = stop
        hold = int(args.hold_ms * 1e6)
        if lib.is_async:

            async def run() -> Outcome:
                occ = redis.asyncio.Redis.from_url(args.redis)
                await occ.ping()
                return await _async_worker(lib, occ, occ_key, start, stop, hold)

            out = asyncio.run(run())
        else:
            occ = redis.Redis.from_url(args.redis)
            occ.ping()
            out = _sync_worker(lib, occ, occ_key, start, stop, hold)
        lib.close()
        results.put(
            {
                "worker": index,
                "grants": out.grants,
                "overlaps": out.overlaps,
                "errors": out.errors,
                "first_error": out.first_error,
            }
        )
    except BaseException as exc:  # report, never hang the parent
        results.put({"worker": index, "crash": "".join(traceback.format_exception(exc))})


def contended(args: argparse.Namespace) -> Dict[str, Any]:
    ctx = multiprocessing.get_context("fork")
    ready, results = ctx.Queue(), ctx.Queue()
    go = ctx.Event()
    start_ns = ctx.Value("q", 0)
    procs = [
        ctx.Process(target=_worker_main, args=(i, args, ready, go, start_ns, results), daemon=True)
        for i in range(args.workers)
    ]
    for p in procs:
        p.start()
    bound = time.monotonic() + 60
    for _ in procs:
        ready.get(timeout=max(1.0, bound - time.monotonic()))
    start_ns.value = time.monotonic_ns() + 100_000_000  # everyone starts together, 0.1 s from now
    go.set()
    reports = []
    deadline = time.monotonic() + 0.1 + args.seconds + 30  # a waiter may still be in a retry sleep
    try:
        for _ in procs:
            reports.append(results.get(timeout=max(0.1, deadline - time.monotonic())))
    except Exception:
        pass  # missing workers are reported below
    for p in procs:
        p.join(timeout=max(0.1, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()  # only our own children, by handle
            p.join()
    return {
        "start_ns": start_ns.value,
        "stop_ns": start_ns.value + int(args.seconds * 1e9),
        "workers": args.workers,
        "reports": reports,
    }


# ---- main ---------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["uncontended", "contended", "libs"])
    parser.add_argument("--lib", choices=sorted(LIBS))
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--key", default="bench")
    parser.add_argument("--cycles", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--hold-ms", type=float, default=1.0)
    args = parser.parse_args()
    if args.mode == "libs":
        print("\n".join(available()))
        return
    if args.lib is None:
        parser.error("--lib is required")
    if not args.redis.startswith("redis://127.0.0.1:"):
        parser.error("benchmarks talk to a Redis on 127.0.0.1 only")
    if args.mode == "uncontended":
        if LIBS[args.lib] is Baton:
            parser.error("baton is a contended-only row (one worker passing a baton to itself measures nothing)")
        lib = LIBS[args.lib](args.redis, args.key)
        times = uncontended(lib, args.cycles, args.warmup)
        lib.close()
        print(json.dumps({"lib": args.lib, "cycle_us": times}))
    else:
        print(json.dumps({"lib": args.lib, **contended(args)}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
