"""Kubernetes rows of scripts/bench: fencepost's KubernetesLeaseBackend beside the official
`kubernetes` client's leader election and a raw Lease floor, against the project's Lease
API server (tests/kube/lease_server.py: no kube-apiserver can run here).

usage: kubernetes.py --kube http://127.0.0.1:PORT --token-file FILE [--cycles N]
                     [--workers W] [--seconds S] [--elector-cycles N] [--handoffs N]
                     [--json FILE] [--md FILE]

  fencepost-kube-sync   fencepost.Lock(KubernetesLeaseBackend(httpx.Client), name, ttl=10)
                        .acquire_sync() / lease.release()
  fencepost-kube-async  the same on httpx.AsyncClient: await .acquire() / lease.release()
  k8s-leaderelection    the `kubernetes` client's LeaderElection with a LeaseLock, at the
                        shortest periods its Config takes (lease 2 s, renew deadline 1.5 s,
                        retry 1 s). It is a run-forever elector with no release, so it gets
                        no acquire+release cycle and no contended run; measured instead:
                        uncontended: LeaderElection.run() started (in a thread) on a Lease
                        that does not exist yet → its onstarted_leading called (a GET, 404,
                        then a create), one fresh Lease and candidate per sample, the API
                        client shared (connections reused, as fencepost's rows);
                        hand-off: the leader's process killed (SIGKILL: the elector has no
                        release, stopping is a crash) → the waiting candidate's
                        onstarted_leading, one candidate waiting
  raw-lease-put         the floor, with httpx as fencepost's adapter: take = one PUT of the
                        last Lease read (its resourceVersion: a compare-and-set) naming the
                        holder (POST when there is no Lease yet), release = one PUT clearing
                        holderIdentity; a waiter GETs the Lease again at once while it is
                        held or its PUT conflicted (409) — two round trips uncontended, no
                        token, no timestamps, no renewal

fencepost's recipe (docs/DESIGN.md): acquire GETs the Lease, then creates it or updates it
guarded by its resourceVersion (raising leaseTransitions: the token); release clears the
holder with an owner-checked update; a waiter retries with bounded exponential backoff
(Leases have no notification). The cycles and contended runs are bench/python/backends.py's.

This file is named after the backend like its siblings; it shares a name with the
`kubernetes` package, so its own directory goes to the end of sys.path (below
site-packages), where `import backends` still finds bench/python/backends.py.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE] + [_HERE]

import logging  # noqa: E402
import multiprocessing  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from typing import Any, Dict, List, Optional, Tuple  # noqa: E402

import backends  # noqa: E402

LEASE_S = 10
NAMESPACE = "default"
#: The shortest periods kubernetes.leaderelection's Config accepts (retry_period ≥ 1,
#: renew_deadline > 1.2 × retry_period, lease_duration > renew_deadline, whole seconds).
ELECTOR = {"lease_duration": 2, "renew_deadline": 1.5, "retry_period": 1}
CASES = [
    ("fencepost-kube-sync", "fencepost", "`Lock(KubernetesLeaseBackend(httpx.Client))`: `acquire_sync` / `release`"),
    ("fencepost-kube-async", "fencepost", "the same on `httpx.AsyncClient`: `await acquire()` / `release()`"),
    ("raw-lease-put", "floor", "raw floor: a resourceVersion-checked PUT naming the holder + a PUT clearing it (httpx); waiters GET again at once"),
]
ELECTOR_WHAT = (
    "the `kubernetes` client's `LeaderElection` + `LeaseLock` (lease 2 s, renew deadline 1.5 s, retry 1 s: the "
    "shortest its `Config` takes). No release and no contended run (a run-forever elector): *uncontended* is "
    "`run()` → `onstarted_leading` on a new Lease ({n} samples, no release in it); *hand-off p50* is the leader's "
    "process killed → the waiting candidate's `onstarted_leading` ({h} hand-offs)"
)


def _lease_url(url: str, name: str = "") -> str:
    base = f"{url}/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
    return f"{base}/{name}" if name else base


def make(lib: str, target: str, key: str) -> backends.Case:
    """(acquire, release, close) of `lib` on lock `key`; `target` is "URL TOKEN"."""
    url, token = target.split(" ", 1)
    if lib == "raw-lease-put":
        import httpx

        http = httpx.Client(timeout=5.0, headers={"Authorization": f"Bearer {token}"})
        name, me = f"raw-{key}", uuid.uuid4().hex
        path = _lease_url(url, name)
        seen: List[Optional[Dict[str, Any]]] = [None]  # the last Lease read or written

        def acquire_raw() -> None:
            while True:
                lease = seen[0]
                if lease is None:
                    r = http.get(path)
                    if r.status_code == 404:
                        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name},
                                "spec": {"holderIdentity": me, "leaseDurationSeconds": LEASE_S}}
                        r = http.post(_lease_url(url), json=body)
                        if r.status_code == 201:
                            seen[0] = r.json()
                            return
                        continue  # another created it first: read it
                    if r.status_code != 200:
                        raise RuntimeError(f"raw acquire: GET answered {r.status_code}: {r.text[:200]}")
                    lease = r.json()
                if lease["spec"].get("holderIdentity"):
                    seen[0] = None  # held: read again at once (the floor of polling)
                    continue
                lease["spec"]["holderIdentity"] = me
                r = http.put(path, json=lease)
                if r.status_code == 200:
                    seen[0] = r.json()
                    return
                if r.status_code != 409:
                    raise RuntimeError(f"raw acquire: PUT answered {r.status_code}: {r.text[:200]}")
                seen[0] = None  # another took it first

        def release_raw() -> None:
            lease = seen[0]
            if lease is None or lease["spec"].get("holderIdentity") != me:
                raise RuntimeError("raw release: not the holder")
            lease["spec"]["holderIdentity"] = ""
            r = http.put(path, json=lease)
            if r.status_code != 200:
                raise RuntimeError(f"raw release: PUT answered {r.status_code}: {r.text[:200]}")
            seen[0] = r.json()

        return acquire_raw, release_raw, http.close

    import httpx

    import fencepost
    from fencepost.kubernetes import KubernetesLeaseBackend

    is_async = lib.endswith("-async")
    client = httpx.AsyncClient(timeout=1.0) if is_async else httpx.Client(timeout=1.0)
    backend = KubernetesLeaseBackend(client, url, namespace=NAMESPACE, token=token)
    lock = fencepost.Lock(backend, key, ttl=LEASE_S)
    held: List[Any] = []
    if not is_async:

        def close_sync() -> None:
            backend.close()
            client.close()

        return (lambda: held.append(lock.acquire_sync())), (lambda: held.pop().release()), close_sync

    async def acquire() -> None:
        held.append(await lock.acquire())

    async def release() -> None:
        await held.pop().release()

    async def close() -> None:
        await backend.aclose()
        await client.aclose()

    return acquire, release, close


# ---- kubernetes.leaderelection -----------------------------------------------------------


class _Stop(Exception):
    """Raised from onstarted_leading: the elector then stops renewing (its documented
    way out of the renew loop) and run() returns, so the next sample starts clean."""


def _elector_setup(url: str, token: str) -> Any:
    """Points the kubernetes client's default configuration at the server; quiets the
    elector's logger (it logs every poll at INFO and the _Stop at ERROR)."""
    from kubernetes import client

    cfg = client.Configuration()
    cfg.host = url
    cfg.api_key = {"authorization": token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    client.Configuration.set_default(cfg)
    log = logging.getLogger("leaderelection")
    log.addHandler(logging.NullHandler())
    log.propagate = False
    return client


def _elector(name: str, identity: str, on_started: Any, api: Any = None) -> Any:
    from kubernetes.leaderelection import electionconfig, leaderelection
    from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

    lock = LeaseLock(name, NAMESPACE, identity)
    if api is not None:
        lock.api_instance = api
    config = electionconfig.Config(lock, onstarted_leading=on_started, onstopped_leading=lambda: None, **ELECTOR)
    return leaderelection.LeaderElection(config)


def elector_start(url: str, token: str, samples: int) -> List[float]:
    """µs from LeaderElection.run() to onstarted_leading, each on a new Lease."""
    client = _elector_setup(url, token)
    api = client.CoordinationV1Api()
    run_id = uuid.uuid4().hex[:8]
    times: List[float] = []
    for i in range(samples + 2):  # 2 warm-up samples (imports, the first connection)
        led: List[int] = []

        def started() -> None:
            led.append(time.perf_counter_ns())
            raise _Stop()

        elector = _elector(f"bench-le-{run_id}-{i}", f"candidate-{i}", started, api)
        thread = threading.Thread(target=elector.run, daemon=True)
        t0 = time.perf_counter_ns()
        thread.start()
        thread.join(ELECTOR["retry_period"] * 5 + 5)  # it stops within a retry period of _Stop
        if thread.is_alive() or not led:
            raise RuntimeError(f"elector sample {i}: {'did not lead' if not led else 'did not stop'}")
        if i >= 2:
            times.append((led[0] - t0) / 1e3)
    return times


def _candidate(url: str, token: str, name: str, identity: str, events: Any) -> None:
    """A spawned candidate: reports ("ready", identity, t) then ("led", identity, t),
    t in time.monotonic_ns(), and stays leader until its process is killed."""
    _elector_setup(url, token)

    def started() -> None:
        events.put(("led", identity, time.monotonic_ns()))
        threading.Event().wait()  # lead until killed

    elector = _elector(name, identity, started)
    events.put(("ready", identity, time.monotonic_ns()))
    elector.run()


def elector_handoffs(url: str, token: str, count: int) -> List[float]:
    """µs from killing the leader's process to the next candidate's onstarted_leading,
    `count` times down a chain of candidates on one Lease."""
    ctx = multiprocessing.get_context("spawn")
    events = ctx.Queue()
    name = f"bench-le-h-{uuid.uuid4().hex[:8]}"
    procs: List[Any] = []

    def spawn(i: int) -> None:
        p = ctx.Process(target=_candidate, args=(url, token, name, f"candidate-{i}", events), daemon=True)
        p.start()
        procs.append(p)

    def expect(kind: str, identity: str, timeout: float) -> int:
        while True:
            k, who, t = events.get(timeout=timeout)
            if (k, who) == (kind, identity):
                return int(t)

    out: List[float] = []
    try:
        spawn(0)
        expect("led", "candidate-0", 60)
        for i in range(1, count + 1):
            spawn(i)
            expect("ready", f"candidate-{i}", 60)
            # let it observe the held Lease (it polls every retry period) before the kill
            time.sleep(ELECTOR["retry_period"] * 1.5)
            t_kill = time.monotonic_ns()
            procs[i - 1].kill()  # our own child, by handle
            t_led = expect("led", f"candidate-{i}", ELECTOR["lease_duration"] * 5 + 10)
            out.append((t_led - t_kill) / 1e3)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join()
    return out


def elector_row(url: str, token: str, samples: int, handoffs: int) -> Dict[str, Any]:
    row: Dict[str, Any] = {"lib": "k8s-leaderelection", "kind": "peer",
                           "what": ELECTOR_WHAT.format(n=samples, h=handoffs),
                           "note": "not checked (no release: one leader at a time by lease expiry)"}
    try:
        t = elector_start(url, token, samples)
        row["uncontended_p50_us"], row["uncontended_p99_us"] = backends.percentile(t, 0.5), backends.percentile(t, 0.99)
        h = elector_handoffs(url, token, handoffs)
        row["handoff_p50_us"] = backends.percentile(h, 0.5)
        row["handoffs_us"] = h
    except Exception as exc:  # the other rows stand without it
        row["error"] = f"{type(exc).__name__}: {exc}"[:300]
    print({k: v for k, v in row.items() if k != "what"}, flush=True)
    return row


def main() -> None:
    ap = backends.arguments(__doc__)
    ap.add_argument("--kube", required=True, help="the Lease API server's URL on 127.0.0.1 (scripts/services/kube-lease.sh)")
    ap.add_argument("--token-file", required=True, help="the file holding its bearer token")
    ap.add_argument("--elector-cycles", type=int, default=20, help="leader-election start samples (about 1 s each)")
    ap.add_argument("--handoffs", type=int, default=5, help="leader-election hand-offs (about 4 s each)")
    args = ap.parse_args()
    if not args.kube.startswith(("http://127.0.0.1:", "https://127.0.0.1:")):
        ap.error("benchmarks talk to a Lease API server on 127.0.0.1 only")
    url = args.kube.rstrip("/")
    with open(args.token_file, encoding="utf-8") as f:
        token = f.read().strip()
    target = f"{url} {token}"
    rows = backends.measure(make, CASES[:2], target, args.cycles, args.workers, args.seconds)
    absent: List[Dict[str, str]] = []
    try:
        import kubernetes.leaderelection  # noqa: F401
    except Exception as exc:
        why = f"`import kubernetes.leaderelection` failed: {type(exc).__name__}: {str(exc)[:160]}"
        print(f"k8s-leaderelection row absent: {why}", flush=True)
        absent.append({"lib": "k8s-leaderelection", "kind": "peer", "why": why})
    else:
        rows.append(elector_row(url, token, args.elector_cycles, args.handoffs))
    rows += backends.measure(make, CASES[2:], target, args.cycles, args.workers, args.seconds)
    versions = []
    from importlib.metadata import version

    for d in ["fencepost", "httpx", "kubernetes", "urllib3"]:
        try:
            versions.append(f"{d} {version(d)}")
        except Exception:
            pass
    intro = (
        "**Against the project's own Lease API server, not a real API server**: `tests/kube/lease_server.py` "
        "(scripts/services/kube-lease.sh; one Python process, `ThreadingHTTPServer`, the Leases in memory behind one "
        "lock; no kube-apiserver can run here). A kube-apiserver adds authentication, admission and an etcd write "
        "per update, so these figures rank the clients' round trips and waiting on one server; they say nothing of a "
        "cluster's latency. fencepost's Python `KubernetesLeaseBackend` (bench/python/kubernetes.py): "
        f"{args.cycles} uncontended cycles after 20 warm-up; {args.workers} spawned processes on one Lease for "
        f"{args.seconds:g} s, each holding 1 ms per grant, checked for mutual exclusion by a shared occupancy counter "
        "and by the grants' client-side intervals. fencepost's lease is 10 s; its acquire is a GET then a "
        "resourceVersion-guarded update (a create the first time), its release an owner-checked update, and a waiter "
        "retries with fencepost's default backoff (Leases notify nobody). The raw floor is what two compare-and-set "
        "round trips cost on this server. The leader-election row measures what an elector has (see its row): its "
        "hand-off after a crash waits out the lease (2 s) on a 1 s poll, so it is not comparable with the release "
        f"hand-offs of the other rows. Versions: {', '.join(versions)}."
    )
    backends.write(args.json, args.md, "kubernetes", "python", "Kubernetes Lease (Python)", intro, rows, absent, args.workers)


if __name__ == "__main__":
    main()
