"""Minimal threaded program: the same lease with ``with`` and a renewal thread.

Usage: python examples/threaded_quickstart.py [redis://127.0.0.1:6379/0]
Without a URL it uses the embedded in-memory backend.
"""

from __future__ import annotations

import sys
import time

import fencepost
from fencepost.errors import LockLost


def main(url: str | None) -> None:
    if url:
        import redis

        from fencepost.redis import RedisBackend

        # a blocking call cannot be cancelled at its deadline: bound it (above retry_max)
        client = redis.Redis.from_url(url, socket_timeout=2.0)
        backend: fencepost.Backend = RedisBackend(client)
    else:
        backend = fencepost.MemoryBackend()

    # acquire_timeout: a server that is down raises AcquireTimeout after 5 s (without it,
    # acquiring waits forever, logging warnings on the "fencepost" logger)
    lock = fencepost.Lock(backend, "nightly-report", ttl=10.0, acquire_timeout=5.0)
    try:
        with lock as lease:
            print(f"holding the lock with fencing token {lease.token}")
            for step in range(3):
                time.sleep(0.1)
                lease.check()  # raises LockLost if the lease is gone
                print(f"step {step}: {lease.valid_for():.2f} s of validity left")
        print("released")
    except LockLost as e:
        print(f"lost the lock mid-work: {e}")
    finally:
        backend.close()  # stops its renewal thread; the client is yours to close
        if url:
            client.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
