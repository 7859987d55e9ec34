"""The Redis adapter: executes the lock machine's requests with redis-py.

``RedisBackend(redis.Redis(...))`` serves the blocking API (``with lock``,
``lock.acquire_sync()``); ``RedisBackend(redis.asyncio.Redis(...))`` serves asyncio
(``async with lock``, ``await lock.acquire()``). Requires ``redis>=5`` (the ``redis``
extra: ``pip install fencepost[redis]``).

Every request is a Lua script run with ``EVALSHA``; when the server answers
``NOSCRIPT`` (after a restart or ``SCRIPT FLUSH``) the adapter sends ``EVAL`` with the
source, which caches it again. Error replies go to the lock machine, which decides
whether they are transient (``LOADING``, ``READONLY``, ``TRYAGAIN``…) or not;
connection errors and timeouts are reported as transport errors (outcome unknown).

Set ``socket_timeout`` on the client: a blocking call cannot be cancelled at the
request's deadline, so a hung connection occupies a worker thread until it times out
(a lost lease is still reported on time: loss is decided by the machine's timer). With
it set, ``acquire_sync``/``release_sync`` also run their own requests on the calling
thread (no hand-off to a worker) whenever the longest a request can take — two
commands, each ``(retries + 1) × socket_timeout`` plus the client's retry backoffs —
ends before the request's deadline, so the caller is never held longer than before.

With ``fair=True`` contended acquirers queue up on the server and park on a blocking
``BLPOP`` of their own wake-up list until a release hands them the lock (or their
backoff passes). Each parked waiter holds one connection of the client's pool while
it blocks (asyncio: one pooled connection per waiting task; threads: one per waiting
thread, run on a worker pool of their own so renewals never queue behind waits). Keep
``socket_timeout`` above ``retry_max`` (the longest park), or a park ends early as a
transport error and the waiter falls back on its backoff.
"""

from __future__ import annotations

import importlib
import inspect
import math
import urllib.parse
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, Type, Union

from . import _core
from ._backend import Backend
from .errors import ConfigError

if TYPE_CHECKING:
    import redis as _redis_sync
    import redis.asyncio as _redis_async

    from ._core import RedisSpec

__all__ = ["RedisBackend"]

CommandLike = Union[_core.Request, _core.Command]


def _error_codes() -> List[Tuple[Type[BaseException], str]]:
    """redis-py strips the code word of some error replies and encodes it in the
    exception class instead; this maps the classes back (most specific first) so the
    machine sees the reply as the server sent it."""
    import redis.exceptions as e

    names = [
        ("NoScriptError", "NOSCRIPT"),
        ("OutOfMemoryError", "OOM"),
        ("ExecAbortError", "EXECABORT"),
        ("ReadOnlyError", "READONLY"),
        ("NoPermissionError", "NOPERM"),
        ("MovedError", "MOVED"),
        ("AskError", "ASK"),
        ("TryAgainError", "TRYAGAIN"),
        ("MasterDownError", "MASTERDOWN"),
        ("ClusterDownError", "CLUSTERDOWN"),
        ("ClusterCrossSlotError", "CROSSSLOT"),
    ]
    found: List[Tuple[Type[BaseException], str]] = []
    for class_name, code in names:
        cls = getattr(e, class_name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append((cls, code))
    return found


def _error_reply(exc: BaseException, codes: List[Tuple[Type[BaseException], str]]) -> object:
    text = str(exc)
    for cls, code in codes:
        if isinstance(exc, cls):
            if not text.startswith(code):
                text = f"{code} {text}".rstrip()
            break
    return _core.RedisErrorReply(text)


def _is_async_client(client: Any) -> bool:
    try:
        import redis.asyncio as aioredis

        async_types: Tuple[type, ...] = (aioredis.Redis,)
        cluster = getattr(aioredis, "RedisCluster", None)
        if isinstance(cluster, type):
            async_types += (cluster,)
        if isinstance(client, async_types):
            return True
    except ImportError:  # pragma: no cover - redis is what the client comes from
        pass
    return inspect.iscoroutinefunction(getattr(client, "execute_command", None))


def _is_cluster_client(client: Any) -> bool:
    """Whether ``client`` is a redis-py Redis Cluster client (``redis.RedisCluster`` or
    ``redis.asyncio.RedisCluster``): its batched renewals then carry one hash slot's
    keys each."""
    kinds: Tuple[type, ...] = ()
    for module in ("redis.cluster", "redis.asyncio.cluster"):
        try:
            cluster = getattr(importlib.import_module(module), "RedisCluster", None)
        except ImportError:  # pragma: no cover - redis-py before 4.1 has no cluster client
            continue
        if isinstance(cluster, type):
            kinds += (cluster,)
    return isinstance(client, kinds)


def _client_keywords(module: Any) -> "set[str]":
    """The keywords ``module.Redis.from_url`` passes on without error: the client's, the
    connection pool's and every connection class's (their bases' included), as the
    installed redis-py names them."""
    names: "set[str]" = set()
    for cls in (module.Redis, module.ConnectionPool, module.Connection,
                getattr(module, "SSLConnection", None), getattr(module, "UnixDomainSocketConnection", None)):
        for klass in inspect.getmro(cls) if cls is not None else ():
            init = klass.__dict__.get("__init__")
            if init is None:
                continue
            try:
                params = inspect.signature(init).parameters
            except (TypeError, ValueError):  # pragma: no cover - a C-level __init__
                continue
            names.update(n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    names.discard("self")
    return names


def _check_database(url: str, options: Dict[str, Any]) -> None:
    """Refuses a ``redis://`` or ``rediss://`` URL whose path is not a database number
    (``/0``): redis-py ignores such a path and connects to database 0."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in ("redis", "rediss") or "db" in options:
        return
    if "db" in urllib.parse.parse_qs(parts.query):
        return  # redis-py takes ?db= over the path
    path = urllib.parse.unquote(parts.path).strip("/")
    if path and not path.isdigit():
        raise ConfigError(
            f"the database in a Redis URL is a number (redis://host:6379/0), got {path!r}"
        )


class RedisBackend(Backend):
    """Locks on one Redis server (or a Redis-compatible one: Valkey, KeyDB, Dragonfly
    with Lua), through a redis-py client the caller owns.

    Args:
        client: ``redis.Redis`` (or ``RedisCluster``) for the blocking API, or
            ``redis.asyncio.Redis`` (or its ``RedisCluster``) for asyncio. Any
            ``decode_responses`` setting works.
        key_prefix: prefix of every key (``"fencepost:"``); lock ``name`` uses
            ``{prefix}{{name}}:lock`` and ``{prefix}{{name}}:token`` (one hash slot).
        fair: fair, instant hand-off (default False). Contended acquirers join a FIFO
            queue on the server and block on ``BLPOP``; a release does not free the
            lock but grants it to the first live waiter, whose ``BLPOP`` reply is the
            grant (one round trip per hand-off), so the releasing process cannot take
            it straight back. The ``BLPOP`` timeout (fractional seconds) is only the
            fallback when a wake-up is missed: ``retry_max`` with equal jitter, at most
            the holder's remaining TTL and the acquire deadline. Locks with and without ``fair`` may share a name safely (only
            fairness is lost). Extra keys per name: ``…:queue``, ``…:seq``,
            ``…:alive:<owner>``, ``…:wake:<owner>``.

    Raises:
        ConfigError: ``client`` has no ``evalsha``, or ``key_prefix`` is not a str.
            Using an async client with ``with`` (or a sync client with ``async with``)
            raises ConfigError when the lock is entered.

    Redis fencing tokens can go backwards after a failover to a replica that missed
    the last ``INCR``; Redis locks are for ``purpose="efficiency"`` unless you pass
    ``accept_failover_risk=True``.
    """

    def __init__(
        self,
        client: Union[_redis_sync.Redis, _redis_async.Redis, Any],
        *,
        key_prefix: str = "fencepost:",
        fair: bool = False,
    ) -> None:
        super().__init__(key_prefix=key_prefix)
        if not isinstance(fair, bool):
            raise ConfigError(f"fair must be True or False, got {fair!r}")
        #: Whether contended acquirers queue and are woken in order (see the class doc).
        self.fair = fair
        if not callable(getattr(client, "evalsha", None)):
            raise ConfigError(
                f"client must be a redis-py client (redis.Redis or redis.asyncio.Redis), got {client!r}"
            )
        import redis.exceptions

        self._client: Any = client
        self._is_async = _is_async_client(client)
        self._is_cluster = _is_cluster_client(client)
        self.supports_async = self._is_async
        self.supports_sync = not self._is_async
        self._no_script: Type[BaseException] = redis.exceptions.NoScriptError
        # An error reply, and a refused login: redis-py raises the server's WRONGPASS or
        # NOAUTH at connect as a ConnectionError, which the lock would retry as an
        # outage for as long as it tries; as the reply it is, it fails the request.
        self._response_error: Tuple[Type[BaseException], ...] = (
            redis.exceptions.ResponseError,
            redis.exceptions.AuthenticationError,
        )
        self._codes = _error_codes()

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        asyncio: bool = False,
        key_prefix: str = "fencepost:",
        fair: bool = False,
        **options: Any,
    ) -> RedisBackend:
        """A backend on a client made from ``url`` by redis-py's own ``from_url``
        (``redis://``, ``rediss://``, ``unix://``; credentials and database in the URL
        as redis-py reads them).

        Args:
            url: the server's URL, e.g. ``"redis://127.0.0.1:6379/0"``.
            asyncio: make a ``redis.asyncio.Redis`` (for ``async with``) instead of a
                blocking ``redis.Redis`` (for ``with``).
            key_prefix, fair: as for the constructor.
            options: keyword arguments for ``Redis.from_url``. ``socket_timeout``
                defaults to 5 s (a blocking call cannot be cancelled at a request's
                deadline, see the class docstring; it stays above the default
                ``retry_max``, as fair waits need).

        The backend owns that client: :meth:`close` closes it (an asyncio client on
        the running loop; ``await backend.aclose()`` waits for it).

        Raises:
            ConfigError: ``url`` is not a str, or redis-py refuses it (an unknown
                scheme, a bad port); a database path that is not a number (redis-py
                would silently use database 0); a keyword that is neither ``key_prefix``,
                ``fair`` nor one redis-py's client, pool or connections take (redis-py
                would refuse it only when it connects, and every request would fail);
                redis-py is not installed.
        """
        if not isinstance(url, str):
            raise ConfigError(f"url must be a str, got {url!r}")
        try:
            if asyncio:
                import redis.asyncio as client_module
            else:
                import redis as client_module  # type: ignore[no-redef]
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ConfigError("RedisBackend needs redis-py: pip install 'fencepost[redis]'") from exc
        unknown = sorted(set(options) - _client_keywords(client_module))
        if unknown:
            raise ConfigError(
                f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                "for RedisBackend.from_url: neither key_prefix, fair, asyncio nor a keyword "
                "of redis-py's client, connection pool or connections"
            )
        _check_database(url, options)
        options.setdefault("socket_timeout", 5.0)
        try:
            client = client_module.Redis.from_url(url, **options)
        except ValueError as exc:
            raise ConfigError(f"not a Redis URL redis-py accepts: {exc}") from exc
        backend = cls(client, key_prefix=key_prefix, fair=fair)
        backend._own(getattr(client, "aclose", None) or client.close)
        return backend

    @property
    def client(self) -> Any:
        """The redis-py client this backend uses."""
        return self._client

    def _mode_error(self, wanted: str) -> ConfigError:
        if wanted == "async":
            return ConfigError(
                "this RedisBackend wraps a blocking redis.Redis client: use `with lock` / "
                "lock.acquire_sync(), or give it a redis.asyncio.Redis client for "
                "`async with lock` / await lock.acquire()"
            )
        return ConfigError(
            "this RedisBackend wraps a redis.asyncio.Redis client: use `async with lock` / "
            "await lock.acquire(), or give it a blocking redis.Redis client for "
            "`with lock` / lock.acquire_sync()"
        )

    def _machine_spec(self) -> RedisSpec:
        return {"kind": "redis", "key_prefix": self.key_prefix, "fair": self.fair, "cluster": self._is_cluster}

    def _sync_call_limit_s(self) -> Optional[float]:
        """For a blocking ``redis.Redis`` client with ``socket_timeout`` set: how long
        one request can take — two commands (``EVALSHA``, then ``EVAL`` after
        ``NOSCRIPT``), each ``(retries + 1) × max(socket timeout, connect timeout)``
        plus its retry backoffs; None otherwise (no timeout, a cluster client or a
        blocking pool, a backoff whose longest sleep is unknown)."""
        if self._is_async:
            return None
        pool = getattr(self._client, "connection_pool", None)
        kwargs = getattr(pool, "connection_kwargs", None)
        if not isinstance(kwargs, dict) or type(pool).__name__ != "ConnectionPool":
            return None  # a blocking pool can wait for a free connection
        read = kwargs.get("socket_timeout")
        connect = kwargs.get("socket_connect_timeout") or read
        if not isinstance(read, (int, float)) or not isinstance(connect, (int, float)):
            return None
        retry = kwargs.get("retry")
        retries = getattr(retry, "_retries", 0) if retry is not None else 0
        backoff = 0.0
        if retries:
            # Retry and backoff settings are private in redis-py: read them defensively,
            # and give up on a bound for any backoff whose longest sleep is unknown.
            policy = getattr(retry, "_backoff", None)
            if type(policy).__name__ == "NoBackoff":
                longest = 0.0
            elif type(policy).__name__ == "ConstantBackoff":
                longest = getattr(policy, "_backoff", math.inf)
            else:
                longest = getattr(policy, "_cap", math.inf)
            if not isinstance(retries, int) or not isinstance(longest, (int, float)):
                return None
            backoff = float(longest) * retries
        # two commands at most: EVALSHA, then EVAL after NOSCRIPT
        limit = 2 * ((retries + 1) * float(max(read, connect)) + backoff)
        return limit if math.isfinite(limit) else None

    def _sync_wait_limit_s(self, request: _core.Request) -> Optional[float]:
        """A ``BLPOP`` with timeout T ends within T plus the client's bound on one
        request (:meth:`_sync_call_limit_s`); None when that bound is unknown."""
        limit = self._sync_call_limit_s()
        if limit is None or request.kind != "redis_blpop":
            return None
        pop = request.body
        assert isinstance(pop, _core.BlockingPop)
        return limit + pop.timeout_s

    async def _execute_async(self, command: CommandLike) -> object:
        if not self._is_async:
            raise self._mode_error("async")
        if isinstance(command, _core.Request) and command.kind == "redis_blpop":
            pop = command.body
            assert isinstance(pop, _core.BlockingPop)
            try:
                return await self._client.blpop([pop.key], timeout=pop.timeout_s)
            except self._response_error as exc:
                return _error_reply(exc, self._codes)
        keys, args = command.keys, command.args
        wait = command.wait
        if wait is not None:
            reply = await self._confirmed(command, command.script_sha).execute(raise_on_error=False)
            if isinstance(reply[0], self._no_script):
                reply = await self._confirmed(command, None).execute(raise_on_error=False)
            return self._confirmed_reply(reply)
        try:
            try:
                return await self._client.evalsha(
                    command.script_sha, len(keys), *keys, *args
                )
            except self._no_script:
                return await self._client.eval(
                    command.script_source, len(keys), *keys, *args
                )
        except self._response_error as exc:
            return _error_reply(exc, self._codes)

    def _execute_sync(self, command: CommandLike) -> object:
        if self._is_async:
            raise self._mode_error("sync")
        if isinstance(command, _core.Request) and command.kind == "redis_blpop":
            pop = command.body
            assert isinstance(pop, _core.BlockingPop)
            try:
                return self._client.blpop([pop.key], timeout=pop.timeout_s)
            except self._response_error as exc:
                return _error_reply(exc, self._codes)
        keys, args = command.keys, command.args
        if command.wait is not None:
            reply = self._confirmed(command, command.script_sha).execute(raise_on_error=False)
            if isinstance(reply[0], self._no_script):
                reply = self._confirmed(command, None).execute(raise_on_error=False)
            return self._confirmed_reply(reply)
        try:
            try:
                return self._client.evalsha(command.script_sha, len(keys), *keys, *args)
            except self._no_script:
                return self._client.eval(command.script_source, len(keys), *keys, *args)
        except self._response_error as exc:
            return _error_reply(exc, self._codes)

    def _confirmed(self, command: CommandLike, sha: Optional[str]) -> Any:
        """The script (``EVALSHA``, or ``EVAL`` without ``sha``) and ``WAIT`` in one
        pipeline: one connection, in order, not ``MULTI`` (where ``WAIT`` does not
        block)."""
        keys, args, wait = command.keys, command.args, command.wait
        assert wait is not None
        pipe = self._client.pipeline(transaction=False)
        if sha is not None:
            pipe.evalsha(sha, len(keys), *keys, *args)
        else:
            pipe.eval(command.script_source, len(keys), *keys, *args)
        pipe.execute_command("WAIT", wait[0], wait[1])
        return pipe

    def _confirmed_reply(self, reply: List[Any]) -> object:
        # error replies come back as exception values (raise_on_error=False); a
        # transport failure raises from execute()
        return [_error_reply(r, self._codes) if isinstance(r, self._response_error) else r for r in reply]

    def _cannot_wait(self) -> Optional[str]:
        if self._is_cluster:
            return (
                "a RedisCluster client routes WAIT (it has no key) to any node, not to the one that "
                "ran the script: use a client of the slot's primary"
            )
        return None

    def __repr__(self) -> str:
        kind = "asyncio" if self._is_async else "blocking"
        fair = " fair" if self.fair else ""
        return f"<fencepost.redis.RedisBackend {kind}{fair} key_prefix={self.key_prefix!r}>"
