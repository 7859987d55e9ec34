"""etcd: a correctness lock across machines, FIFO waiters and a fenced write.

Usage: python examples/etcd_quickstart.py [http://127.0.0.1:2379 ...]
Needs a running etcd (``scripts/services/etcd.sh start`` prints a URL) and httpx
(``pip install fencepost[etcd]``).
"""

from __future__ import annotations

import asyncio
import sys
from typing import List

import httpx

import fencepost
from fencepost.etcd import EtcdBackend


async def worker(backend: EtcdBackend, who: str, log: List[str]) -> None:
    lock = fencepost.Lock(backend, "ledger", ttl=5.0, purpose="correctness", acquire_timeout=30.0)
    async with lock as lease:
        # the token is the create revision of this holder's key: it only ever grows
        print(f"{who}: holding 'ledger' with fencing token {lease.token}")
        # written only if this lease still holds the lock (one etcd transaction)
        revision = await backend.fenced_txn(lease, puts=[("ledger/last-writer", who)])
        log.append(f"{who} wrote at revision {revision}")
        await asyncio.sleep(0.2)


async def main(endpoints: List[str]) -> None:
    async with httpx.AsyncClient(timeout=5.0) as client:
        backend = EtcdBackend(client, endpoints)
        log: List[str] = []
        # three contenders: granted one at a time, in the order they queued (FIFO)
        await asyncio.gather(*(worker(backend, f"worker-{i}", log) for i in range(3)))
        print("\n".join(log))
        backend.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:] or ["http://127.0.0.1:2379"]))
