"""The Redis adapter against scripted fake clients (no server): how redis-py's
exceptions reach the lock machine, and the NOSCRIPT fallback."""

from __future__ import annotations

from typing import Any, List, Tuple

import pytest

import fencepost
from fencepost.errors import AcquireTimeout, ProtocolError
from fencepost.redis import RedisBackend

redis = pytest.importorskip("redis")
from redis import exceptions as rex  # noqa: E402


class FakeRedis:
    """A blocking client whose EVALSHA/EVAL answers come from ``script`` in order (the
    last one repeats); exceptions in it are raised."""

    def __init__(self, *script: object) -> None:
        self.script = list(script)
        self.calls: List[Tuple[str, str, Tuple[Any, ...]]] = []

    def _answer(self) -> object:
        answer = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: str) -> object:
        self.calls.append(("evalsha", sha, keys_and_args))
        return self._answer()

    def eval(self, source: str, numkeys: int, *keys_and_args: str) -> object:
        self.calls.append(("eval", source, keys_and_args))
        return self._answer()


class FakeAsyncRedis(FakeRedis):
    async def execute_command(self, *args: Any) -> object:  # marks it as an asyncio client
        raise NotImplementedError

    async def evalsha(self, sha: str, numkeys: int, *keys_and_args: str) -> object:  # type: ignore[override]
        return FakeRedis.evalsha(self, sha, numkeys, *keys_and_args)

    async def eval(self, source: str, numkeys: int, *keys_and_args: str) -> object:  # type: ignore[override]
        return FakeRedis.eval(self, source, numkeys, *keys_and_args)


def quick_lock(backend: fencepost.Backend) -> fencepost.Lock:
    return fencepost.Lock(backend, "x", ttl=1.0, acquire_timeout=0.05, retry_base=0.002, retry_max=0.005)


def test_noscript_is_answered_with_eval_of_the_source() -> None:
    client = FakeRedis(rex.NoScriptError("No matching script."), [1, 9], 1)
    backend = RedisBackend(client, key_prefix="p:")
    with fencepost.Lock(backend, "x", ttl=1.0) as lease:
        assert lease.token == 9
    acquire_sha, acquire_source = fencepost.redis_scripts()["acquire"]
    kinds = [(kind, what) for kind, what, _ in client.calls[:2]]
    assert kinds == [("evalsha", acquire_sha), ("eval", acquire_source)]
    assert client.calls[0][2][:2] == ("p:{x}:lock", "p:{x}:token")


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (rex.ReadOnlyError("You can't write against a read only replica."), "READONLY"),
        (rex.TryAgainError(), "TRYAGAIN"),
        (rex.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."), "OOM"),
        (rex.ResponseError("BUSY Redis is busy running a script."), "BUSY"),
        (rex.BusyLoadingError("Redis is loading the dataset in memory"), "BusyLoadingError"),
        (rex.ConnectionError("Connection reset by peer"), "ConnectionError"),
        (rex.TimeoutError("Timeout reading from socket"), "TimeoutError"),
    ],
)
def test_retryable_failures_are_retried_with_the_error_code_restored(error: Exception, code: str) -> None:
    # one try (timeout 0): the error the machine saw is reported as the last error
    with pytest.raises(AcquireTimeout) as info:
        fencepost.Lock(RedisBackend(FakeRedis(error)), "x", ttl=1.0, acquire_timeout=0).acquire_sync()
    assert info.value.last_error is not None and code in info.value.last_error
    # with time left, the machine retries instead of giving up
    client = FakeRedis(error)
    with pytest.raises(AcquireTimeout):
        quick_lock(RedisBackend(client)).acquire_sync()
    assert len(client.calls) >= 2


@pytest.mark.parametrize(
    "error",
    [
        rex.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
        rex.NoPermissionError("this user has no permissions to run the 'evalsha' command"),
        rex.ResponseError("Error running script: @user_script:1: Script attempted to access a non local key"),
    ],
)
def test_permanent_error_replies_are_protocol_errors(error: Exception) -> None:
    client = FakeRedis(error)
    # at once, whatever time is left: a long timeout keeps a loaded machine's thread
    # hand-offs from turning the test into a timeout
    lock = fencepost.Lock(RedisBackend(client), "x", ttl=1.0, acquire_timeout=5.0)
    with pytest.raises(ProtocolError):
        lock.acquire_sync()
    assert client.calls[0][0] == "evalsha"


async def test_async_fake_client_is_driven_on_the_loop() -> None:
    client = FakeAsyncRedis(rex.NoScriptError("No matching script."), [1, 4], 1)
    backend = RedisBackend(client)
    assert backend.supports_async and not backend.supports_sync
    async with fencepost.Lock(backend, "x", ttl=1.0) as lease:
        assert lease.token == 4
    assert [kind for kind, _, _ in client.calls] == ["evalsha", "eval", "evalsha"]


def test_from_url_refuses_a_database_that_is_not_a_number() -> None:
    # redis-py would ignore the path and use database 0
    from fencepost.errors import ConfigError

    with pytest.raises(ConfigError, match="the database in a Redis URL is a number .* got 'notanumber'"):
        fencepost.backend_from_url("redis://127.0.0.1:1/notanumber")
    for url in ("redis://127.0.0.1:1", "redis://127.0.0.1:1/", "redis://127.0.0.1:1/3"):
        fencepost.backend_from_url(url).close()
    # a db keyword decides, as redis-py lets it
    fencepost.backend_from_url("redis://127.0.0.1:1/x", db=2).close()
    fencepost.backend_from_url("redis://127.0.0.1:1/x?db=2").close()


@pytest.mark.parametrize("use_asyncio", [False, True])
def test_from_url_refuses_a_keyword_no_redis_py_class_takes(use_asyncio: bool) -> None:
    # redis-py itself would take it and fail each connect with a TypeError: every request
    # a transport error, retried as an outage
    from fencepost.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown option 'fiar'"):
        fencepost.backend_from_url("redis://127.0.0.1:1/0", asyncio=use_asyncio, fiar=True)
    # the client's, the pool's and the connections' own keywords pass (nothing connects yet)
    backend = RedisBackend.from_url(
        "redis://127.0.0.1:1/0",
        asyncio=use_asyncio,
        fair=True,
        socket_timeout=1.0,
        max_connections=4,
        health_check_interval=5,
        client_name="worker",
    )
    assert backend.fair
    if not use_asyncio:
        backend.close()


def test_fenced_set_refuses_one_key_for_data_and_fence() -> None:
    from fencepost.errors import ConfigError

    # the write would replace the fence's token with the data: every later write fails
    said = 'data_key and fence_key must differ (both "doc"): the write would overwrite the fence'
    with pytest.raises(ConfigError) as info:
        fencepost._core.redis_fenced_set("doc", "doc", 1, "x")
    assert (str(info.value), info.value.kind, info.value.option) == (said, "invalid_argument", None)
    backend = fencepost.MemoryBackend()
    with pytest.raises(ConfigError) as info:
        backend.fenced_set_sync("doc", "doc", 1, "x")
    assert str(info.value) == said
    backend.close()
