"""The failover story: what a Redis failover does to a lock and its fencing tokens, and
what replica-confirmed grants and etcd do instead.

1. A Redis primary and a replica (asynchronous replication). A is granted the lock and
   writes; the replication link is held back, the primary dies, the replica is promoted
   (``REPLICAOF NO ONE``). B is granted the same lock with a token that is not higher
   than A's: a token-only fence accepts B's write (two holders of one token), an
   owner-bound fence refuses it (``duplicate_grant``). B recovers with ``token_floor``.
2. The same with replica-confirmed grants (``min_replicas=1``): a grant the replica has
   not acknowledged is not a grant, and one it has survives the promotion: B waits for
   A's lease and gets a higher token.
3. A 3-member etcd cluster whose leader is killed while A holds the lock: the token
   (a create revision, Raft-replicated) still rises.

Run it with ``scripts/demo failover`` (it starts the servers on 127.0.0.1 with
``scripts/services/redis-replica.sh`` and ``etcd-cluster.sh``, and stops them).
Arguments: the service scripts' directory.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import List

import fencepost
from fencepost.errors import AcquireTimeout, DuplicateGrantWarning, StaleToken
from fencepost.redis import RedisBackend

LOCK = "report"
T0 = time.monotonic()


def say(who: str, text: str) -> None:
    print(f"[{time.monotonic() - T0:6.3f} s] {who:<8} {text}", flush=True)


class Fences:
    """The protected resource, behind the two fencing rules side by side."""

    def __init__(self) -> None:
        self.token_only = fencepost.Fence()
        self.owner_bound = fencepost.Fence()

    def write(self, who: str, lease: fencepost.SyncLease) -> None:
        for rule, fence, owner in (
            ("token-only fence ", self.token_only, None),
            ("owner-bound fence", self.owner_bound, lease.owner_id),
        ):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DuplicateGrantWarning)
                    fence.check(LOCK, lease.token, owner)
                say(who, f"{rule}: write with token {lease.token} ACCEPTED")
            except StaleToken as e:
                say(who, f"{rule}: write with token {lease.token} REFUSED ({e.reason}, highest {e.highest})")


def service(script: Path, *args: str) -> str:
    return subprocess.run([str(script), *args], check=True, capture_output=True, text=True).stdout.strip()


def redis_pair(services: Path) -> List[str]:
    return service(services / "redis-replica.sh", "start").split()


def story_async(services: Path) -> None:
    print("\n== 1. Redis primary + replica, asynchronous replication ==", flush=True)
    primary_url, replica_url = redis_pair(services)
    script = services / "redis-replica.sh"
    primary = RedisBackend.from_url(primary_url, socket_timeout=0.5, retry_on_timeout=False)
    fences = Fences()
    for _ in range(41):  # earlier grants, replicated: the counter stands at 41 on both
        with fencepost.Lock(primary, LOCK, ttl=5.0, min_replicas=1):
            pass
    service(script, "hold")
    say("ops", "replication link held back: the replica stops receiving writes")
    a = fencepost.Lock(primary, LOCK, ttl=3.0, auto_renew=False, acquire_timeout=5.0).acquire_sync()
    say("A", f"granted by the primary, token {a.token}")
    fences.write("A", a)
    service(script, "kill-primary")
    service(script, "promote")
    say("ops", "primary killed before A's grant replicated; replica promoted (REPLICAOF NO ONE)")
    replica = RedisBackend.from_url(replica_url, socket_timeout=2.0)
    b = fencepost.Lock(replica, LOCK, ttl=3.0, acquire_timeout=0).acquire_sync()
    say("B", f"granted by the promoted replica at once, token {b.token} (A holds {a.token}): "
        f"{'NOT HIGHER' if b.token <= a.token else 'higher'} — two holders, one token")
    fences.write("B", b)
    highest = fences.owner_bound.highest(LOCK)
    assert highest is not None
    b.release()
    b = fencepost.Lock(replica, LOCK, ttl=3.0, acquire_timeout=0, token_floor=highest + 1).acquire_sync()
    say("B", f"recovers: acquires again with token_floor={highest + 1} (the refusal's highest + 1): token {b.token}")
    fences.write("B", b)
    b.release()
    replica.close()
    service(script, "stop")


def story_confirmed(services: Path) -> None:
    print("\n== 2. The same with replica-confirmed grants (min_replicas=1, replica_timeout=0.1) ==", flush=True)
    primary_url, replica_url = redis_pair(services)
    script = services / "redis-replica.sh"
    primary = RedisBackend.from_url(primary_url, socket_timeout=0.5, retry_on_timeout=False)
    fences = Fences()
    for _ in range(41):
        with fencepost.Lock(primary, LOCK, ttl=5.0, min_replicas=1):
            pass
    service(script, "hold")
    say("ops", "replication link held back")
    try:
        fencepost.Lock(primary, LOCK, ttl=3.0, min_replicas=1, acquire_timeout=0.5).acquire_sync()
    except AcquireTimeout as e:
        say("C", f"not granted: WAIT never confirmed it ({e.last_error}); the attempt was released")
    service(script, "resume")
    say("ops", "replication link restored")
    a = fencepost.Lock(primary, LOCK, ttl=2.0, min_replicas=1, auto_renew=False, acquire_timeout=5.0).acquire_sync()
    say("A", f"granted, confirmed by the replica's WAIT acknowledgement, token {a.token}")
    fences.write("A", a)
    service(script, "hold")
    service(script, "kill-primary")
    service(script, "promote")
    say("ops", "link held, primary killed, replica promoted: it has A's lease and counter")
    replica = RedisBackend.from_url(replica_url, socket_timeout=2.0)
    b = fencepost.Lock(replica, LOCK, ttl=3.0, acquire_timeout=5.0).acquire_sync()
    say("B", f"granted only after A's lease ran out on the promoted replica, token {b.token} "
        f"(A held {a.token}): {'higher' if b.token > a.token else 'NOT HIGHER'}")
    fences.write("B", b)
    b.release()
    replica.close()
    service(script, "stop")


def story_etcd(services: Path) -> None:
    print("\n== 3. etcd, 3 members, leader killed while A holds the lock ==", flush=True)
    import httpx

    from fencepost.etcd import EtcdBackend

    script = services / "etcd-cluster.sh"
    urls = service(script, "start").split(",")
    fences = Fences()
    with httpx.Client(timeout=2.0) as client:
        backend = EtcdBackend(client, urls)
        a = fencepost.Lock(backend, LOCK, ttl=3.0, purpose="correctness", acquire_timeout=10.0).acquire_sync()
        say("A", f"granted, token {a.token} (the key's create revision)")
        fences.write("A", a)
        leader = service(script, "kill-leader")
        say("ops", f"leader {leader.split()[0]} killed (SIGKILL); the other two elect a new one")
        a.release()
        say("A", "released (through a surviving member)")
        b = fencepost.Lock(backend, LOCK, ttl=3.0, purpose="correctness", acquire_timeout=10.0).acquire_sync()
        say("B", f"granted, token {b.token} (A held {a.token}): {'higher' if b.token > a.token else 'NOT HIGHER'}")
        fences.write("B", b)
        b.release()
        backend.close()
    service(script, "stop")


def main() -> None:
    # the killed primaries' backends keep retrying their leases' cleanups: expected here
    logging.getLogger("fencepost").setLevel(logging.ERROR)
    services = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "scripts" / "services"
    story_async(services)
    story_confirmed(services)
    story_etcd(services)
    print(
        "\nEfficiency lock (a duplicate costs work, not data): Redis, one primary or primary +"
        " replica, is fine; a failover can grant twice, rarely."
        "\nCorrectness lock (two holders corrupt data): etcd (or PostgreSQL lease rows), whose tokens"
        " never go backwards, with an owner-bound fence at the resource. Replica-confirmed Redis"
        " grants narrow the failover window but WAIT does not make Redis linearizable: it still"
        " needs accept_failover_risk=True.",
        flush=True,
    )


if __name__ == "__main__":
    main()
