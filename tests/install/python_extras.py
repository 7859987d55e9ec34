"""Run by scripts/test-install in a fresh venv: the installed fencepost is the artifact
under test (not the checkout), and the extra it was installed with brought exactly the
client libraries it names, which the adapter then uses.

Usage: python python_extras.py none|redis|postgres|etcd|zookeeper|kubernetes CHECKOUT_DIR
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import fencepost

extra, checkout = sys.argv[1], pathlib.Path(sys.argv[2]).resolve()
where = pathlib.Path(fencepost.__file__).resolve()
if checkout in where.parents or pathlib.Path(sys.prefix).resolve() not in where.parents:
    sys.exit(f"fencepost was imported from {where}, not from this venv ({sys.prefix})")

EXTRAS = {
    "redis": {"redis"},
    "postgres": {"psycopg", "psycopg_pool"},
    "etcd": {"httpx"},
    "zookeeper": {"kazoo"},
    "kubernetes": {"httpx", "yaml"},
}
expected = EXTRAS.get(extra, set())
for module in sorted(set().union(*EXTRAS.values())):
    present = importlib.util.find_spec(module) is not None
    if present != (module in expected):
        sys.exit(f"pip install 'fencepost[{extra}]': {module} is {'present' if present else 'missing'}")

if extra == "redis":
    import redis

    from fencepost.redis import RedisBackend

    RedisBackend(redis.Redis.from_url("redis://127.0.0.1:1/0")).close()
elif extra == "postgres":
    import psycopg

    from fencepost.postgres import migration

    print(f"libpq {psycopg.pq.version()} ({psycopg.pq.__impl__})")
    assert "fencepost_leases" in migration(), migration()
elif extra == "etcd":
    import httpx

    from fencepost.etcd import EtcdBackend

    with httpx.Client() as client:
        EtcdBackend(client, ["http://127.0.0.1:1"]).close()
elif extra == "zookeeper":
    import kazoo.client

    from fencepost.errors import BackendError
    from fencepost.zookeeper import ZooKeeperBackend

    client = kazoo.client.KazooClient(hosts="127.0.0.1:1", timeout=1.0)
    try:  # nothing listens there: the adapter loads, starts the client and reports it
        ZooKeeperBackend(client, start_timeout=0.5)
        sys.exit("a ZooKeeperBackend on a closed port started")
    except BackendError:
        pass
    finally:
        client.stop()
elif extra == "kubernetes":
    import pathlib as _p
    import tempfile

    from fencepost.kubernetes import KubernetesLeaseBackend

    with tempfile.TemporaryDirectory() as tmp:  # a kubeconfig read with PyYAML
        config = _p.Path(tmp, "config")
        config.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
            "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:1'}}]\n"
            "users: [{name: u, user: {token: t}}]\n"
            "contexts: [{name: c, context: {cluster: k, user: u, namespace: locks}}]\n"
        )
        KubernetesLeaseBackend.from_kubeconfig(str(config)).close()
print(f"fencepost {fencepost.__version__} (core {fencepost.core_version}) from {where.parent}, extra {extra}: ok")
