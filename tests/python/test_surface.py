"""What a new user meets first: an unreachable server is logged (at once, then rate
limited, then its recovery), the adapter modules after a plain ``import fencepost``,
token 0 refused before anything is sent, the unsafe-purpose message in Python words, and
backends built from a URL or the environment (real Redis, PostgreSQL and etcd on
127.0.0.1, as ``scripts/test`` starts them)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import time
import uuid
import warnings
from typing import Iterator, List, Tuple

import pytest

import fencepost
from fencepost import _core
from fencepost.errors import AcquireTimeout, ConfigError

REDIS_URL = os.environ.get("FENCEPOST_REDIS_URL")
PG_URL = os.environ.get("FENCEPOST_PG_URL")
ETCD_URL = os.environ.get("FENCEPOST_ETCD_URL")

needs_redis = pytest.mark.skipif(not REDIS_URL, reason="FENCEPOST_REDIS_URL is not set")
needs_pg = pytest.mark.skipif(not PG_URL, reason="FENCEPOST_PG_URL is not set")
needs_etcd = pytest.mark.skipif(not ETCD_URL, reason="FENCEPOST_ETCD_URL is not set")


def dead_port() -> int:
    """A 127.0.0.1 port nothing listens on (bound, then closed: refused on connect)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def reach_messages(caplog: pytest.LogCaptureFixture) -> List[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "fencepost" and r.levelno == logging.WARNING and "reach" in r.getMessage()
    ]


# ---- an unreachable server is visible at once, then rate limited, then recovered ---------


def test_an_unreachable_redis_is_logged_at_once_and_then_at_most_every_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    redis = pytest.importorskip("redis")
    from fencepost.redis import RedisBackend

    client = redis.Redis(host="127.0.0.1", port=dead_port(), socket_timeout=0.5)
    backend = RedisBackend(client)
    backend._reachability.report_every_s = 0.4
    caplog.set_level(logging.WARNING, logger="fencepost")
    lock = fencepost.Lock(backend, "quickstart", ttl=5.0, acquire_timeout=1.0, retry_max=0.05)
    started = time.monotonic()
    with pytest.raises(AcquireTimeout) as info:
        lock.acquire_sync()
    assert 0.9 < time.monotonic() - started < 3.0
    assert "Connection" in str(info.value)  # the last transport error, in the message
    messages = reach_messages(caplog)
    assert messages[0].startswith("RedisBackend cannot reach its server: ")
    assert "acquire_timeout" in messages[0]
    # every failed attempt counts, but only about one report per 0.4 s follows
    later = messages[1:]
    assert 1 <= len(later) <= 4, messages
    assert all("still cannot reach its server" in m and "failed requests in" in m for m in later)
    failures = backend._reachability.failures
    assert failures > len(messages)  # retried every ≤ 50 ms: many more failures than reports
    backend.close()
    client.close()


async def test_an_unreachable_etcd_is_logged_at_once_on_asyncio(
    caplog: pytest.LogCaptureFixture,
) -> None:
    httpx = pytest.importorskip("httpx")
    from fencepost.etcd import EtcdBackend

    caplog.set_level(logging.WARNING, logger="fencepost")
    async with httpx.AsyncClient(timeout=0.5) as client:
        backend = EtcdBackend(client, f"http://127.0.0.1:{dead_port()}")
        lock = fencepost.Lock(backend, "ledger", ttl=5.0, acquire_timeout=0.5, purpose="correctness")
        with pytest.raises(AcquireTimeout):
            await lock.acquire()
        messages = reach_messages(caplog)
        assert messages and messages[0].startswith("EtcdBackend cannot reach its server: ")
        backend.close()


class Forwarder:
    """A TCP forwarder on ``port`` to ``target``, started and stopped by the test: the
    port refuses connections until :meth:`start`."""

    def __init__(self, port: int, target: Tuple[str, int]) -> None:
        self.port = port
        self.target = target
        self.server: "asyncio.AbstractServer | None" = None

    async def start(self) -> None:
        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                writer.close()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

        self.server = await asyncio.start_server(serve, "127.0.0.1", self.port)

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()


@needs_redis
async def test_a_server_that_comes_back_is_logged_as_reachable_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    redis = pytest.importorskip("redis")
    import redis.asyncio  # noqa: F401
    from urllib.parse import urlparse

    from fencepost.redis import RedisBackend

    real = urlparse(REDIS_URL)
    port = dead_port()
    forwarder = Forwarder(port, (real.hostname or "127.0.0.1", real.port or 6379))
    client = redis.asyncio.Redis(host="127.0.0.1", port=port, socket_timeout=1.0)
    backend = RedisBackend(client, key_prefix=f"fptest:{uuid.uuid4().hex[:12]}:")
    caplog.set_level(logging.WARNING, logger="fencepost")
    lock = fencepost.Lock(backend, "comeback", ttl=5.0, acquire_timeout=10.0, retry_max=0.05)
    try:
        acquiring = asyncio.ensure_future(lock.acquire())
        for _ in range(200):  # the first refused connection is reported at once
            if reach_messages(caplog):
                break
            await asyncio.sleep(0.01)
        assert reach_messages(caplog)[0].startswith("RedisBackend cannot reach")
        await forwarder.start()
        lease = await asyncio.wait_for(acquiring, 5.0)
        assert lease.token >= 1
        back = [m for m in reach_messages(caplog) if "again" in m]
        assert len(back) == 1 and back[0].startswith(
            "RedisBackend reaches its server again, after "
        ), reach_messages(caplog)
        assert backend._reachability.failures == 0
        await lock.release()
    finally:
        backend.close()
        await client.aclose()
        await forwarder.stop()


def test_reachability_reports_nothing_while_requests_get_replies(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="fencepost")
    backend = fencepost.MemoryBackend()
    with fencepost.Lock(backend, "fine", ttl=1.0):
        pass
    backend.close()
    assert reach_messages(caplog) == []


# ---- the adapter modules after `import fencepost` ----------------------------------------


def test_adapter_modules_are_attributes_of_the_package_without_importing_clients() -> None:
    code = (
        "import sys, fencepost\n"
        "assert 'fencepost.redis' not in sys.modules\n"
        "assert 'redis' not in sys.modules and 'httpx' not in sys.modules and 'psycopg' not in sys.modules\n"
        "assert {'redis', 'postgres', 'etcd'} <= set(dir(fencepost))\n"
        "print(fencepost.redis.RedisBackend.__name__, fencepost.postgres.PostgresBackend.__name__,"
        " fencepost.etcd.EtcdBackend.__name__)\n"
        "assert 'redis' not in sys.modules  # the adapter modules import their clients lazily too\n"
        "try:\n    fencepost.nope\nexcept AttributeError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "RedisBackend PostgresBackend EtcdBackend",
        "module 'fencepost' has no attribute 'nope'",
    ]


# ---- token 0 and the unsafe-purpose message ----------------------------------------------


@needs_redis
def test_fenced_set_with_token_0_is_a_config_error_before_anything_is_sent() -> None:
    redis = pytest.importorskip("redis")
    from fencepost.redis import RedisBackend

    client = redis.Redis.from_url(REDIS_URL, socket_timeout=5)
    backend = RedisBackend(client)
    key = f"fptest:{uuid.uuid4().hex[:12]}"
    with pytest.raises(ConfigError, match=r"token must be a fencing token of a lease \(an int in 1 \.\.= 2\*\*64 - 1\), got 0"):
        backend.fenced_set_sync(f"{key}:data", f"{key}:fence", 0, "v")
    assert client.exists(f"{key}:data", f"{key}:fence") == 0
    backend.fenced_set_sync(f"{key}:data", f"{key}:fence", 1, "v")  # token 1 is a lease's
    assert client.get(f"{key}:data") == b"v"
    client.delete(f"{key}:data", f"{key}:fence")
    backend.close()
    client.close()


def test_the_fenced_helpers_refuse_token_0_and_negative_tokens() -> None:
    with pytest.raises(ConfigError, match="got 0"):
        _core.redis_fenced_set("d", "f", 0, "v")
    # 0 is refused, so the range the message quotes starts at 1
    for bad in (-1, 2**64):
        with pytest.raises(ConfigError, match=r"token must be a fencing token of a lease \(an int in 1 \.\.= 2\*\*64 - 1\), got "):
            _core.redis_fenced_set("d", "f", bad, "v")
    with pytest.raises(ConfigError, match="token must be an int, got 1.0"):
        _core.redis_fenced_set("d", "f", 1.0, "v")
    owner = "0" * 31 + "1"
    with pytest.raises(ConfigError, match="got 0"):
        _core.etcd_fenced_txn("fencepost/", "ledger", owner, 0, [("k", "v")])
    assert _core.etcd_fenced_txn("fencepost/", "ledger", owner, 7, [("k", "v")]) is not None


@pytest.mark.parametrize(
    "make, label",
    [
        (lambda: fencepost.MemoryBackend(), "MemoryBackend (an in-process stand-in for Redis"),
        (lambda: _fake_redis_backend(), "RedisBackend"),
    ],
)
def test_the_unsafe_purpose_error_names_the_backend_and_the_python_option(make, label) -> None:  # type: ignore[no-untyped-def]
    backend = make()
    with pytest.raises(ConfigError) as info:
        fencepost.Lock(backend, "money", purpose="correctness")
    text = str(info.value)
    assert text.startswith(f"a correctness lock on {label}"), text
    assert " is unsafe: its fencing tokens can go backwards" in text
    assert "redis fencing tokens" not in text
    assert "accept_failover_risk=True" in text
    assert "ZooKeeper" not in text and "accept-failover-risk" not in text and " on redis " not in text
    assert info.value.kind == "unsafe_purpose"
    fencepost.Lock(backend, "money", purpose="correctness", accept_failover_risk=True)


def _fake_redis_backend() -> fencepost.Backend:
    pytest.importorskip("redis")
    from fencepost.redis import RedisBackend

    class Client:
        def evalsha(self, *args: object) -> None: ...

    return RedisBackend(Client())


# ---- backends from a URL and from the environment ----------------------------------------


@needs_redis
def test_redis_backend_from_url_owns_its_client() -> None:
    from fencepost.redis import RedisBackend

    backend = RedisBackend.from_url(str(REDIS_URL), key_prefix=f"fptest:{uuid.uuid4().hex[:12]}:")
    assert backend.client.connection_pool.connection_kwargs["socket_timeout"] == 5.0
    with fencepost.Lock(backend, "from-url", ttl=5.0, acquire_timeout=5.0) as lease:
        assert lease.token == 1
        backend.fenced_set_sync("fptest:x:{a}", "fptest:x:{a}:f", lease.token, "v")
    pool = backend.client.connection_pool
    assert pool._created_connections >= 1
    backend.close()
    assert pool._in_use_connections == set()
    assert all(c._sock is None for c in pool._available_connections)  # disconnected
    backend.client.delete("fptest:x:{a}", "fptest:x:{a}:f")  # reconnects: closed, not broken
    with pytest.raises(ConfigError):
        RedisBackend.from_url("http://127.0.0.1:1")


@needs_redis
async def test_redis_backend_from_url_for_asyncio_closes_on_aclose() -> None:
    from fencepost.redis import RedisBackend

    backend = RedisBackend.from_url(
        str(REDIS_URL), asyncio=True, key_prefix=f"fptest:{uuid.uuid4().hex[:12]}:", socket_timeout=2
    )
    async with fencepost.Lock(backend, "from-url", ttl=5.0, acquire_timeout=5.0) as lease:
        assert lease.token == 1
    pool = backend.client.connection_pool
    assert pool._available_connections
    await backend.aclose()
    assert not any(c.is_connected for c in pool._available_connections)  # disconnected


def test_close_with_no_loop_running_warns_that_an_owned_asyncio_client_stays_open() -> None:
    pytest.importorskip("redis")
    from fencepost.redis import RedisBackend

    backend = RedisBackend.from_url(f"redis://127.0.0.1:{dead_port()}/0", asyncio=True)  # connects lazily
    with pytest.warns(ResourceWarning, match=r"could not be closed: call `await backend\.aclose\(\)`"):
        backend.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        backend.close()  # idempotent: nothing left to warn about
        blocking = RedisBackend.from_url(f"redis://127.0.0.1:{dead_port()}/0")
        blocking.close()  # a blocking client closes at once


@needs_etcd
def test_etcd_backend_from_url_takes_comma_separated_members() -> None:
    from fencepost.etcd import EtcdBackend

    backend = EtcdBackend.from_url(f"http://127.0.0.1:{dead_port()}, {ETCD_URL}", key_prefix=f"fptest/{uuid.uuid4().hex[:12]}/")
    assert len(backend.endpoints) == 2
    with fencepost.Lock(backend, "ledger", ttl=5.0, purpose="correctness", acquire_timeout=5.0) as lease:
        backend.fenced_txn_sync(lease, puts=[(f"fptest/{uuid.uuid4().hex}", "v")])
    backend.close()
    assert backend.client.is_closed


@needs_pg
def test_backend_from_url_builds_a_postgres_pool_backend() -> None:
    pytest.importorskip("psycopg_pool")
    backend = fencepost.backend_from_url(str(PG_URL), namespace=f"t{uuid.uuid4().hex[:8]}")
    assert type(backend).__name__ == "PostgresBackend"
    backend.migrate_sync()  # type: ignore[attr-defined]
    name = f"url-{uuid.uuid4().hex[:8]}"
    with fencepost.Lock(backend, name, ttl=5.0, acquire_timeout=5.0) as lease:
        assert lease.token >= 1
    pool = backend._pool  # type: ignore[attr-defined]
    backend.close()
    assert pool.closed
    with pytest.raises(ConfigError, match="AsyncConnectionPool"):
        fencepost.backend_from_url(str(PG_URL), asyncio=True)


def test_a_postgres_url_without_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in ("psycopg", "psycopg.conninfo", "psycopg_pool"):
        monkeypatch.setitem(sys.modules, module, None)  # `import` raises ImportError
    for mode in ("lease", "session"):
        with pytest.raises(ConfigError, match=r"pip install 'fencepost\[postgres\]'"):
            fencepost.backend_from_url("postgresql://127.0.0.1:1/db", mode=mode)


@needs_pg
@pytest.mark.parametrize("asyncio_", [False, True])
async def test_a_postgres_session_url_gets_a_connect_timeout_unless_it_sets_one(asyncio_: bool) -> None:
    psycopg = pytest.importorskip("psycopg")
    from psycopg.conninfo import conninfo_to_dict

    default = fencepost.backend_from_url(str(PG_URL), mode="session", asyncio=asyncio_)
    sep = "&" if "?" in str(PG_URL) else "?"
    own = fencepost.backend_from_url(f"{PG_URL}{sep}connect_timeout=3", mode="session", asyncio=asyncio_)
    try:
        for backend, want in ((default, "5"), (own, "3")):
            if asyncio_:  # a connection the backend's factory makes
                aconn = await backend._connect()  # type: ignore[attr-defined]
                dsn = aconn.info.dsn
                await aconn.close()
            else:  # a connection of the conninfo each lock connects with
                with psycopg.connect(backend._conninfo) as conn:  # type: ignore[attr-defined]
                    dsn = conn.info.dsn
            assert conninfo_to_dict(dsn)["connect_timeout"] == want
    finally:
        default.close()
        own.close()


@pytest.fixture
def no_backend_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("FENCEPOST_BACKEND_URL", raising=False)
    monkeypatch.delenv("FENCEPOST_KEY_PREFIX", raising=False)
    yield


def test_backend_from_env_reads_the_url_and_the_key_prefix(no_backend_env: None) -> None:
    with pytest.raises(ConfigError, match="FENCEPOST_BACKEND_URL is not set"):
        fencepost.backend_from_env()
    backend = fencepost.backend_from_env(
        environ={"FENCEPOST_BACKEND_URL": "memory://", "FENCEPOST_KEY_PREFIX": "app:"}
    )
    assert isinstance(backend, fencepost.MemoryBackend) and backend.key_prefix == "app:"
    with pytest.raises(ConfigError, match=r"must start with redis://.*got 'db.example:5432'"):
        fencepost.backend_from_url("mysql://user:secret@db.example:5432")


@needs_redis
def test_backend_from_env_on_redis(monkeypatch: pytest.MonkeyPatch, no_backend_env: None) -> None:
    prefix = f"fptest:{uuid.uuid4().hex[:12]}:"
    monkeypatch.setenv("FENCEPOST_BACKEND_URL", str(REDIS_URL))
    monkeypatch.setenv("FENCEPOST_KEY_PREFIX", prefix)
    backend = fencepost.backend_from_env()
    assert type(backend).__name__ == "RedisBackend" and backend.key_prefix == prefix
    with fencepost.Lock(backend, "env", ttl=5.0, acquire_timeout=5.0) as lease:
        assert lease.token == 1
    backend.close()


@needs_etcd
async def test_backend_from_env_on_etcd_for_asyncio(monkeypatch: pytest.MonkeyPatch, no_backend_env: None) -> None:
    monkeypatch.setenv("FENCEPOST_BACKEND_URL", str(ETCD_URL))
    monkeypatch.setenv("FENCEPOST_KEY_PREFIX", f"fptest/{uuid.uuid4().hex[:12]}/")
    backend = fencepost.backend_from_env(asyncio=True)
    assert type(backend).__name__ == "EtcdBackend"
    async with fencepost.Lock(backend, "env", ttl=5.0, acquire_timeout=5.0, purpose="correctness") as lease:
        assert lease.token >= 1
    await backend.aclose()
    assert backend.client.is_closed  # type: ignore[attr-defined]
