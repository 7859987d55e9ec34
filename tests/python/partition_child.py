"""One network partition, run inside a network namespace of its own (test_partition.py
starts this file under ``unshare --net``): its loopback is private, so nothing here can
disturb, or be disturbed by, the machine's other servers, and every address is 127/8.

The server listens on 127.0.0.1 and 127.0.0.2. Holder A reaches it through 127.0.0.2,
contender B through 127.0.0.1. The partition is a blackhole route for 127.0.0.2, looked
up before the local table (``ip rule``): whatever A sends fails at once (the kernel
refuses the route: EINVAL, as an unreachable network does), connections included; B is
untouched. Healing removes the rule, and whatever A's client still sends (late renewals,
cleanup releases) reaches the server.

Checked: A's lease is lost on time (by its validity deadline, the renewals failing), B is
granted only after A stopped believing it held the lock (no overlap), and with a higher
token; after the heal A's late requests change nothing (owner-checked: B still holds),
A's fenced write is refused and B's accepted; once B releases, no key of the lock is left
(no orphan). Prints a JSON line with the measured times; exits non-zero on a failed
check.

usage: python partition_child.py redis|etcd
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict

import fencepost
from fencepost.errors import StaleToken

TTL = 1.0
PARTITIONED = "127.0.0.2"


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, text=True)


def partition() -> None:
    sh("ip", "route", "add", "blackhole", f"{PARTITIONED}/32", "table", "100")
    sh("ip", "rule", "add", "to", f"{PARTITIONED}/32", "table", "100", "pref", "10")
    # the local table is looked up first (pref 0) and would route 127.0.0.2 to lo anyway:
    # it moves behind the blackhole
    sh("ip", "rule", "add", "pref", "20", "table", "local")
    sh("ip", "rule", "del", "pref", "0")


def heal() -> None:
    sh("ip", "rule", "del", "pref", "10")


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:
            pass
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Redis:
    def __init__(self, tmp: str) -> None:
        import redis

        self.proc = subprocess.Popen(
            ["redis-server", "--bind", f"127.0.0.1 {PARTITIONED}", "--port", "6379", "--save", "",
             "--appendonly", "no", "--dir", tmp],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.probe = redis.Redis(host="127.0.0.1", port=6379, socket_timeout=2)
        wait_for(lambda: bool(self.probe.ping()), 10, "redis-server")
        from fencepost.redis import RedisBackend

        self.a = RedisBackend(redis.Redis(host=PARTITIONED, port=6379, socket_timeout=0.25,
                                          socket_connect_timeout=0.25))
        self.b = RedisBackend(redis.Redis(host="127.0.0.1", port=6379, socket_timeout=2))

    def holds(self, name: str, owner_id: str) -> bool:
        return self.probe.get(self.b.lock_key(name)) == owner_id.encode()

    def keys(self, name: str) -> list:
        # the token counter and the record of the last grant are permanent by design;
        # every other key of the lock must go
        token = self.b.token_key(name).encode()
        last = token[: -len(b"token")] + b"last"
        return [k for k in self.probe.scan_iter(match=f"*{{{name}}}*") if k not in (token, last)]

    def fenced_write(self, backend: Any, lease: Any) -> None:
        backend.fenced_set_sync("data", "fence", lease.token, f"by {lease.owner_id}")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


class Etcd:
    def __init__(self, tmp: str) -> None:
        import httpx

        self.proc = subprocess.Popen(
            ["etcd", "--name", "p1", "--data-dir", os.path.join(tmp, "etcd"),
             "--listen-client-urls", f"http://127.0.0.1:2379,http://{PARTITIONED}:2379",
             "--advertise-client-urls", "http://127.0.0.1:2379",
             "--listen-peer-urls", "http://127.0.0.1:2380",
             "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
             "--initial-cluster", "p1=http://127.0.0.1:2380", "--initial-cluster-state", "new",
             "--heartbeat-interval=50", "--election-timeout=500", "--unsafe-no-fsync"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.http = httpx.Client(timeout=2.0)
        wait_for(lambda: self.http.get("http://127.0.0.1:2379/health").json()["health"] == "true", 20, "etcd")
        from fencepost.etcd import EtcdBackend

        self.a = EtcdBackend(httpx.Client(timeout=0.25), f"http://{PARTITIONED}:2379")
        self.b = EtcdBackend(self.http, "http://127.0.0.1:2379")

    def _range(self, prefix: str) -> list:
        import base64

        def b64(s: str) -> str:
            return base64.b64encode(s.encode()).decode()

        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        reply = self.http.post("http://127.0.0.1:2379/v3/kv/range",
                               json={"key": b64(prefix), "range_end": b64(end)}).json()
        return [base64.b64decode(kv["key"]).decode() for kv in reply.get("kvs", [])]

    def holds(self, name: str, owner_id: str) -> bool:
        return self.keys(name) == [self.b.holder_key(name, owner_id)]

    def keys(self, name: str) -> list:
        return self._range(self.b.lock_key(name))

    def fenced_write(self, backend: Any, lease: Any) -> None:
        backend.fenced_txn_sync(lease, puts=[("data", f"by {lease.owner_id}")])

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def run(kind: str) -> Dict[str, Any]:
    sh("ip", "link", "set", "lo", "up")
    tmp = tempfile.mkdtemp(prefix="fp-partition-")
    server = Redis(tmp) if kind == "redis" else Etcd(tmp)
    name = "partitioned"
    try:
        a = fencepost.Lock(server.a, name, ttl=TTL, purpose="correctness" if kind == "etcd" else "efficiency")
        lease_a = a.acquire_sync()
        lost_at: Dict[str, float] = {}
        threading.Thread(target=lambda: (lease_a.lost.wait(), lost_at.setdefault("a", time.monotonic())),
                         daemon=True).start()
        time.sleep(0.4)  # a renewal or two before the cut
        lease_a.check()
        cut = time.monotonic()
        partition()
        b_lock = fencepost.Lock(server.b, name, ttl=TTL, acquire_timeout=10.0,
                                purpose="correctness" if kind == "etcd" else "efficiency")
        lease_b = b_lock.acquire_sync()
        granted_b = time.monotonic()
        wait_for(lambda: "a" in lost_at, 2 * TTL, "A's loss")
        # on time: A stops believing at its validity deadline, at most one TTL after the
        # last renewal it sent before the cut
        assert lost_at["a"] - cut <= TTL + 0.15, f"A lost {lost_at['a'] - cut:.3f} s after the cut"
        assert lease_a.lost_reason == "expired", lease_a.lost_reason
        assert lost_at["a"] <= granted_b, "A still believed it held the lock when B was granted"
        assert lease_b.token > lease_a.token, (lease_b.token, lease_a.token)
        time.sleep(0.5)
        heal()
        healed = time.monotonic()
        time.sleep(1.0)  # A's client sends what it still has: renewals given up, cleanups
        lease_b.check()
        server.fenced_write(server.b, lease_b)
        refused = False
        try:
            server.fenced_write(server.a, lease_a)
        except StaleToken:
            refused = True
        assert refused, "A's fenced write after the heal was accepted"
        assert server.holds(name, lease_b.owner_id), f"B no longer holds the lock after the heal: {server.keys(name)}"
        lease_b.release()
        wait_for(lambda: server.keys(name) == [], 5.0, "no key of the lock left")
        return {
            "backend": kind,
            "a_lost_after_cut_s": round(lost_at["a"] - cut, 3),
            "b_granted_after_cut_s": round(granted_b - cut, 3),
            "tokens": [lease_a.token, lease_b.token],
            "healed_after_cut_s": round(healed - cut, 3),
        }
    finally:
        for backend in (server.a, server.b):
            backend.close()
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1])), flush=True)
