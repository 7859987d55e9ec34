"""kazoo's own ``Lock`` on ``/locks/NAME`` (run by tests/js/zookeeper.test.js with the
repository's .venv, beside Node fencepost contenders on the same path).

Arguments: hosts, name, rounds. Prints ``ready``, waits for a line on stdin, then
``rounds`` times holds the lock a moment and prints ``[start_ns, end_ns]``
(``time.monotonic_ns()``: CLOCK_MONOTONIC, the clock of Node's ``process.hrtime``).
"""

import json
import sys
import time

from kazoo.client import KazooClient


def main() -> None:
    hosts, name, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    zk = KazooClient(hosts=hosts, timeout=4.0)
    zk.start(timeout=15)
    lock = zk.Lock(f"/locks/{name}")
    print("ready", flush=True)
    sys.stdin.readline()
    for _ in range(rounds):
        with lock:
            start = time.monotonic_ns()
            time.sleep(0.002)
            end = time.monotonic_ns()
        print(json.dumps([str(start), str(end)]), flush=True)
    zk.stop()
    zk.close()


if __name__ == "__main__":
    main()
