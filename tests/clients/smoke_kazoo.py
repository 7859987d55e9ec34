"""A short smoke test of fencepost's kazoo adapter on one installed kazoo version.

Run by ``scripts/test-clients`` once per supported kazoo release (each installed into a
directory of its own that goes first on ``PYTHONPATH``), against the real ZooKeeper at
``$FENCEPOST_ZK_HOSTS``:

    python tests/clients/smoke_kazoo.py EXPECTED_VERSION

The adapter reads the session timeout the server negotiated from kazoo's connection
handshake (``ZooKeeperBackend._hook_connect``, a private kazoo method): this checks that
it still works on each version, then acquires, renews past the TTL, commits a fenced
transaction, refuses a stale lease's commit, and hands the lock to a waiting contender.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
import threading
import time
import uuid

import fencepost
from fencepost.errors import StaleToken
from fencepost.zookeeper import ZooKeeperBackend


def check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


def main() -> None:
    expected = sys.argv[1]
    version = importlib.metadata.version("kazoo")
    check(version == expected, f"kazoo {version} imported, {expected} expected (PYTHONPATH)")
    hosts = os.environ["FENCEPOST_ZK_HOSTS"]
    root = f"/fptest-clients-{uuid.uuid4().hex[:8]}"
    backend = ZooKeeperBackend.from_hosts(hosts, session_timeout=4.0, root=root)
    other = ZooKeeperBackend.from_hosts(hosts, session_timeout=4.0, root=root)
    try:
        # the server negotiates within [2, 20] × tickTime; 4 s is inside the default range
        check(abs(backend.session_timeout - 4.0) < 0.01, f"negotiated {backend.session_timeout} s")
        log = f"{root}-log"
        backend.client.ensure_path(log)
        lock = fencepost.Lock(backend, "smoke", ttl=backend.session_timeout, purpose="correctness")
        with lock as lease:
            check(lease.token >= 1, f"token {lease.token}")
            time.sleep(backend.session_timeout * 1.2)  # past one session timeout: heartbeats keep it
            lease.check()
            backend.fenced_commit_sync(lease, lambda t: t.create(f"{log}/w-", b"1", sequence=True))
            got = []
            waiter = threading.Thread(
                target=lambda: got.append(fencepost.Lock(other, "smoke", ttl=other.session_timeout,
                                                         acquire_timeout=10.0).acquire_sync())
            )
            waiter.start()
            time.sleep(0.3)
        waiter.join(10)
        check(len(got) == 1 and got[0].token > lease.token, f"hand-off: {got}")
        try:
            backend.fenced_commit_sync(lease, lambda t: t.create(f"{log}/stale-", b"x", sequence=True))
            raise AssertionError("a released lease's commit was applied")
        except StaleToken:
            pass
        got[0].release()
        check(len(backend.client.get_children(log)) == 1, "one fenced write")
        print(f"kazoo {version}: negotiated {backend.session_timeout} s, tokens {lease.token} -> {got[0].token}: ok")
    finally:
        backend.client.delete(root, recursive=True)
        backend.client.delete(f"{root}-log", recursive=True)
        other.close()
        backend.close()


if __name__ == "__main__":
    main()
