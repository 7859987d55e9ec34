"""Minimal asyncio program: a fenced, auto-renewing lease around some work.

Usage: python examples/asyncio_quickstart.py [redis://127.0.0.1:6379/0]
Without a URL it uses the embedded in-memory backend.
"""

from __future__ import annotations

import asyncio
import sys

import fencepost
from fencepost.errors import LockLost


async def main(url: str | None) -> None:
    if url:
        import redis.asyncio

        from fencepost.redis import RedisBackend

        client = redis.asyncio.Redis.from_url(url, socket_timeout=2.0)
        backend: fencepost.Backend = RedisBackend(client)
    else:
        backend = fencepost.MemoryBackend()

    # acquire_timeout: a server that is down raises AcquireTimeout after 5 s (without it,
    # acquiring waits forever, logging warnings on the "fencepost" logger)
    lock = fencepost.Lock(backend, "nightly-report", ttl=10.0, acquire_timeout=5.0)
    try:
        async with lock as lease:
            # renewed in the background every ttl/3; carry the token on every write
            print(f"holding the lock with fencing token {lease.token}")
            for step in range(3):
                await asyncio.sleep(0.1)
                print(f"step {step}: {lease.valid_for():.2f} s of validity left")
        print("released")
    except LockLost as e:
        # the body was cancelled the moment the lease was lost
        print(f"lost the lock mid-work: {e}")
    finally:
        await backend.aclose()  # waits for its releases in flight; the client is yours to close
        if url:
            await client.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else None))
