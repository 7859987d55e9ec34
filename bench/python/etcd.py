"""etcd rows of scripts/bench: fencepost's EtcdBackend beside the etcd3 client's Lock and
a raw txn floor.

usage: etcd.py --etcd http://127.0.0.1:PORT [--cycles N] [--workers W] [--seconds S]
               [--json FILE] [--md FILE]

  fencepost-etcd-sync   fencepost.Lock(EtcdBackend.from_url(url), name, ttl=10)
                        .acquire_sync() / lease.release() (httpx.Client, the JSON gateway)
  fencepost-etcd-async  the same on httpx.AsyncClient: await .acquire() / lease.release()
  etcd3                 etcd3.client(host, port).lock(name, ttl=10) .acquire(timeout=None) /
                        .release() (gRPC; etcd's own recipe in Python, no fencing token)
  raw-etcd-txn          the floor, through httpx on the JSON gateway as fencepost's adapter:
                        one create-if-absent txn putting the key with a lease (granted once
                        per process, 60 s), retried at once while taken, and one delete —
                        two round trips, no token check, no keep-alive, no queue

fencepost's recipe is etcd's concurrency.Mutex: per acquisition a lease grant, a put of
its own key, and on release a compare-and-delete and a lease revoke; a waiter watches
its predecessor's key instead of polling. The measurement is bench/python/backends.py's.
"""

from __future__ import annotations

import base64
import threading
from typing import Any, Dict, List, Tuple
from urllib.parse import urlsplit

import backends

LEASE_S = 10
CASES = [
    ("fencepost-etcd-sync", "fencepost", "`Lock(EtcdBackend(httpx.Client))`: `acquire_sync` / `release`"),
    ("fencepost-etcd-async", "fencepost", "the same on `httpx.AsyncClient`: `await acquire()` / `release()`"),
    ("etcd3", "peer", "the `etcd3` client's `Lock` (gRPC), `acquire(timeout=None)` / `release()`"),
    ("raw-etcd-txn", "floor", "raw floor: create-if-absent txn with a lease + delete, httpx on the JSON gateway"),
]


def etcd3_absent() -> str:
    """Why the etcd3 row cannot run here, or "" when it can."""
    try:
        import etcd3  # noqa: F401
    except ModuleNotFoundError:
        return "not installed: `pip install -r bench/requirements-etcd3.txt` failed on this Python (see the scripts/bench log)"
    except Exception as exc:  # old generated protobuf code: fails to import on protobuf ≥ 4
        return f"`import etcd3` failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    return ""


_default_excepthook = threading.excepthook


def _quiet_etcd3_watch(hook: Any) -> None:
    """etcd3 starts its watch thread lazily; when the client closes while that thread
    starts, it dies with "Cannot invoke RPC: Channel closed!" after the measurement is
    over. Drop that one, print every other."""
    name = hook.thread.name if hook.thread is not None else ""
    if name.startswith("etcd3_watch") and isinstance(hook.exc_value, ValueError):
        return
    _default_excepthook(hook)


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def make(lib: str, url: str, key: str) -> backends.Case:
    """(acquire, release, close) of `lib` on lock `key`."""
    if lib == "etcd3":
        import etcd3

        threading.excepthook = _quiet_etcd3_watch

        parts = urlsplit(url)
        client = etcd3.client(host=parts.hostname, port=parts.port)
        lock = client.lock(key, ttl=LEASE_S)

        def acquire3() -> None:
            if not lock.acquire(timeout=None):
                raise RuntimeError("etcd3 Lock.acquire returned False")

        def release3() -> None:
            if not lock.release():
                raise RuntimeError("etcd3 Lock.release: not held")

        return acquire3, release3, client.close

    if lib == "raw-etcd-txn":
        import httpx

        http = httpx.Client(timeout=5.0)
        lease = http.post(f"{url}/v3/lease/grant", json={"TTL": 60}).json()["ID"]
        k = _b64(f"raw/{key}")
        txn = {
            "compare": [{"key": k, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
            "success": [{"request_put": {"key": k, "value": _b64("owner"), "lease": lease}}],
            "failure": [],
        }

        def acquire_raw() -> None:
            while not http.post(f"{url}/v3/kv/txn", json=txn).json().get("succeeded"):
                pass  # busy retry: the floor of what polling can do

        def release_raw() -> None:
            if http.post(f"{url}/v3/kv/deleterange", json={"key": k}).json().get("deleted") != "1":
                raise RuntimeError("raw release: the key was not there")

        def close_raw() -> None:
            http.post(f"{url}/v3/lease/revoke", json={"ID": lease})
            http.close()

        return acquire_raw, release_raw, close_raw

    import fencepost
    from fencepost.etcd import EtcdBackend

    is_async = lib.endswith("-async")
    backend = EtcdBackend.from_url(url, asyncio=is_async)
    lock = fencepost.Lock(backend, key, ttl=LEASE_S)
    held: List[Any] = []
    if not is_async:
        return (lambda: held.append(lock.acquire_sync())), (lambda: held.pop().release()), backend.close

    async def acquire() -> None:
        held.append(await lock.acquire())

    async def release() -> None:
        await held.pop().release()

    async def close() -> None:
        await backend.aclose()

    return acquire, release, close


def main() -> None:
    ap = backends.arguments(__doc__)
    ap.add_argument("--etcd", required=True, help="the client URL of one etcd member on 127.0.0.1")
    args = ap.parse_args()
    if not args.etcd.startswith("http://127.0.0.1:"):
        ap.error("benchmarks talk to an etcd on 127.0.0.1 only")
    url = args.etcd.rstrip("/")
    cases: List[Tuple[str, str, str]] = list(CASES)
    absent: List[Dict[str, str]] = []
    why = etcd3_absent()
    if why:
        print(f"etcd3 row absent: {why}", flush=True)
        absent.append({"lib": "etcd3", "kind": "peer", "why": why})
        cases = [c for c in cases if c[0] != "etcd3"]
    rows = backends.measure(make, cases, url, args.cycles, args.workers, args.seconds)
    versions = []
    try:
        from importlib.metadata import version

        for d in ["fencepost", "httpx", "etcd3", "grpcio", "protobuf"]:
            try:
                versions.append(f"{d} {version(d)}")
            except Exception:
                pass
    except ImportError:
        pass
    intro = (
        "One etcd 3.4 member on 127.0.0.1 (scripts/services/etcd.sh, started with `--unsafe-no-fsync` like the "
        "test servers: on a real disk every write costs an fsync more), fencepost's Python `EtcdBackend` "
        f"(bench/python/etcd.py): {args.cycles} uncontended cycles after 20 warm-up; {args.workers} spawned "
        f"processes on one lock for {args.seconds:g} s, each holding 1 ms per grant, checked for mutual exclusion "
        "by a shared occupancy counter and by the grants' client-side intervals. fencepost's lease is 10 s "
        "(etcd leases are whole seconds): per acquisition it grants a lease, puts its own key, and on release "
        "deletes the key (compare-and-delete) and revokes the lease; its waiters watch their predecessor's key. "
        "The raw floor is one create-if-absent txn + one delete on a lease granted once: what two gateway round "
        f"trips cost. Versions: {', '.join(versions)}."
    )
    backends.write(args.json, args.md, "etcd", "python", "etcd (Python)", intro, rows, absent, args.workers)


if __name__ == "__main__":
    main()
