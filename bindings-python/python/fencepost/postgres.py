"""The PostgreSQL adapter: executes the lock machine's SQL with psycopg 3.

Three ways to lock with PostgreSQL, each with its limits (README, "Choosing a
PostgreSQL mode"):

* **Lease rows** — ``PostgresBackend(conn_or_pool)`` (``mode="lease"``, the default):
  a row per lock name in ``fencepost_leases`` with owner, fencing token and expiry.
  Acquire is one statement that takes a free or expired row and bumps the token;
  expiry is decided by the *server's* clock; renew and release are owner-checked
  ``UPDATE``s. Every statement runs on any connection in autocommit, so a pool and a
  transaction-pooling PgBouncer are fine; a single connection the server drops is
  replaced. Tokens are durable rows that never go backwards:
  ``purpose="correctness"`` needs no opt-in.
* **Session advisory locks** — ``PostgresBackend(mode="session", conninfo=…)``:
  ``pg_try_advisory_lock`` on a connection dedicated to the lock, plus a bump of a
  per-name token row in the same statement. The lock lives as long as that
  connection; the ``ttl`` of a :class:`fencepost.Lock` is the *heartbeat deadline*:
  every ``ttl/3`` the connection is asked whether it still holds the lock, and a
  failed or negative answer is ``LockLost``. The server may hand the lock to someone
  else as soon as the connection drops, before the heartbeat notices: keep ``ttl``
  short, and carry the fencing token on writes. Never behind a transaction-pooling
  pooler: a session that holds the lock for another client refuses the grant
  (``ProtocolError``).
* **Transaction advisory locks** — :func:`xact_lock` (``with xact_lock(conn, name) as
  token:``): ``pg_try_advisory_xact_lock`` as the first statement of *your*
  transaction, with the token bump in the same transaction; the lock ends with the
  commit or rollback. The strongest option when the protected data lives in the same
  database. It tries once (see :func:`xact_lock`).

The three modes exclude each other on the same name and count one fencing token per
name (on its lease row).

Statements come from the core with ``$1…$n`` placeholders (one may repeat); psycopg
takes ``%(name)s`` placeholders and binds them server-side, so each ``$n`` becomes
``%(pN)s`` with a dict of parameters (literal ``%`` doubled, quoted text left alone).
Statements run with ``prepare=False``: PgBouncer in transaction mode cannot keep
prepared statements. Error replies (a psycopg error with a SQLSTATE) go to the lock
machine as :class:`fencepost._core.SqlErrorReply`; it decides whether they are
transient (``40001``, ``57P01``, class ``08``…). Errors without a SQLSTATE (a closed
connection, a pool timeout) are transport errors: the outcome is unknown.

Requires psycopg 3 (``pip install "psycopg[binary]"``; pools: ``psycopg-pool``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import sys
import threading
import time
import warnings
from types import TracebackType
from typing import (
    TYPE_CHECKING,
    Any,
    Awaitable,
    Callable,
    Coroutine,
    Dict,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
    Type,
    Union,
)

from . import _core
from ._backend import Backend
from ._holder import Holder
from ._driver import AsyncDriver
from .errors import AcquireTimeout, BackendError, ConfigError, DuplicateGrantWarning, StaleToken
from ._units import Seconds, _seconds_to_ns

if TYPE_CHECKING:
    from ._core import PostgresSpec, SqlValue

__all__ = [
    "PostgresBackend",
    "xact_lock",
    "XactLock",
    "fenced_update",
    "fenced_update_sync",
    "advisory_key",
    "migration",
    "to_pyformat",
]

Mode = Literal["lease", "session"]

#: The stable 64-bit advisory key of a lock name (see :func:`fencepost._core.advisory_key`).
advisory_key = _core.advisory_key

_log = logging.getLogger("fencepost")


def migration(
    *, lease_table: str = "fencepost_leases", token_table: str = "fencepost_tokens"
) -> str:
    """The SQL creating fencepost's tables (idempotent, ``CREATE TABLE IF NOT EXISTS``):
    the lease table (a row per name, which counts the fencing tokens of every mode) and
    the token table (a per-name floor every grant stays above).
    Run it once with any client (or :meth:`PostgresBackend.migrate`). Never truncate
    these tables: tokens must survive.

    Raises:
        ConfigError: a table name that is not a plain SQL identifier (optionally
            ``schema.table``).
    """
    return _core.postgres_migration(lease_table=lease_table, token_table=token_table)


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - the tests have it
        raise ConfigError(
            'fencepost.postgres needs psycopg 3: pip install "psycopg[binary]"'
        ) from exc
    return psycopg


def _pool_types() -> Tuple[Tuple[type, ...], Tuple[type, ...]]:
    """(sync pool classes, async pool classes); empty without psycopg-pool."""
    try:
        import psycopg_pool
    except ImportError:
        return (), ()
    return (psycopg_pool.ConnectionPool,), (psycopg_pool.AsyncConnectionPool,)


# ---- $n -> %(pN)s ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=512)
def _convert(sql: str, count: int) -> str:
    out: List[str] = []
    i, n = 0, len(sql)
    quote: Optional[str] = None
    while i < n:
        c = sql[i]
        if c == "%":
            out.append("%%")  # psycopg reads % as a placeholder, in literals too
            i += 1
            continue
        if quote is not None:
            if c == quote:
                quote = None  # a doubled quote closes and reopens: same result
            out.append(c)
            i += 1
            continue
        if c in "'\"":
            quote = c
            out.append(c)
            i += 1
            continue
        prev = sql[i - 1] if i else " "
        if c == "$" and i + 1 < n and sql[i + 1].isdigit() and not (prev.isalnum() or prev in "_$"):
            j = i + 1
            while j < n and sql[j].isdigit():
                j += 1
            k = int(sql[i + 1 : j])
            if not 1 <= k <= count:
                raise ConfigError(f"statement uses ${k} but has {count} parameters: {sql!r}")
            out.append(f"%(p{k})s")
            i = j
            continue
        out.append(c)
        i += 1
    return "".join(out)


def to_pyformat(
    sql: str, params: Sequence[SqlValue]
) -> Tuple[str, Dict[str, SqlValue]]:
    """Rewrites a statement with ``$1…$n`` placeholders for psycopg: each ``$n``
    (outside quotes; one may appear several times) becomes ``%(pN)s``, a literal ``%``
    becomes ``%%``, and the parameters become ``{"p1": params[0], …}``.

    Raises:
        ConfigError: a placeholder with no parameter.
    """
    query = _convert(sql, len(params))
    return query, {f"p{i}": v for i, v in enumerate(params, start=1)}


# ---- running one statement -----------------------------------------------------------------


def _error_reply(exc: BaseException) -> Optional[_core.SqlErrorReply]:
    """The error reply of a psycopg error that carries a SQLSTATE, else None."""
    sqlstate = getattr(exc, "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate:
        diag = getattr(exc, "diag", None)
        message = getattr(diag, "message_primary", None) or str(exc).strip()
        return _core.SqlErrorReply(sqlstate, message or type(exc).__name__)
    return None


def _rows(cursor: Any) -> List[Any]:
    return list(cursor.fetchall()) if cursor.description is not None else []


def _execute_sync(conn: Any, stmt: _core.SqlStatement) -> object:
    """Runs ``stmt`` on a sync connection: its rows, or a returned SqlErrorReply;
    raises for a transport failure."""
    psycopg = _psycopg()
    query, params = to_pyformat(stmt.sql, stmt.params)
    try:
        if conn.autocommit:
            return _rows(conn.execute(query, params, prepare=False))
        with conn.transaction():
            return _rows(conn.execute(query, params, prepare=False))
    except psycopg.Error as exc:
        reply = _error_reply(exc)
        if reply is None or conn.broken:
            raise  # the connection is gone: the outcome is unknown
        return reply


async def _execute_async(conn: Any, stmt: _core.SqlStatement) -> object:
    """Async :func:`_execute_sync`."""
    psycopg = _psycopg()
    query, params = to_pyformat(stmt.sql, stmt.params)
    try:
        if conn.autocommit:
            return await _rows_async(await conn.execute(query, params, prepare=False))
        async with conn.transaction():
            return await _rows_async(await conn.execute(query, params, prepare=False))
    except psycopg.Error as exc:
        reply = _error_reply(exc)
        if reply is None or conn.broken:
            raise
        return reply


async def _rows_async(cursor: Any) -> List[Any]:
    return list(await cursor.fetchall()) if cursor.description is not None else []


def _remaining_s(deadline_ns: int) -> float:
    return max(0.001, (deadline_ns - time.monotonic_ns()) / 1e9)


# ---- dedicated connections -------------------------------------------------------------------


class _Dedicated:
    """The connection of one lock in session mode."""

    __slots__ = ("conn", "in_flight", "finished", "opening")

    def __init__(self) -> None:
        self.conn: Any = None
        self.in_flight = 0
        self.finished = False
        self.opening: Any = None  # threading.Lock or asyncio.Lock, made on first use


class PostgresBackend(Backend):
    """Locks on PostgreSQL through psycopg 3 (``psycopg.Connection``,
    ``psycopg.AsyncConnection``, ``psycopg_pool.ConnectionPool`` or
    ``AsyncConnectionPool``); the client's kind decides whether the backend serves
    ``with lock`` (sync) or ``async with lock`` (asyncio).

    Args:
        conn_or_pool: where statements of lease mode run, and what :meth:`migrate`
            uses. A pool is best: each request takes a connection of its own (a
            connection terminated under a lease is replaced on the next renewal). A
            single connection must be in autocommit mode (``psycopg.connect(…,
            autocommit=True)``): fencepost's statements commit on their own. When the
            server drops it (a restart, ``pg_terminate_backend``, a network cut), the
            next statement connects again with its parameters and password (a warning
            on the ``fencepost`` logger says so), so a lease survives it as with a
            pool; the new connection is the backend's, closed by :meth:`close`, and
            the one you gave stays yours. Do not open transactions of your own on that
            connection: the backend's statements (renewals, releases) run on it at any
            time, from the driver, and would land inside your transaction. Session
            mode uses it for :meth:`migrate` only (optional there).
        mode: ``"lease"`` (lease rows, default) or ``"session"`` (session-level
            advisory locks).
        conninfo: session mode: the connection string each lock opens its dedicated
            connection with (``psycopg.connect(conninfo, autocommit=True)``; set
            ``connect_timeout`` in it: a blocking connect cannot be cancelled).
        connect: session mode, instead of ``conninfo``: a factory returning a new
            ``psycopg.Connection`` (for ``with lock``) or a new
            ``psycopg.AsyncConnection`` or an awaitable of one (for ``async with
            lock``; e.g. ``lambda: psycopg.AsyncConnection.connect(url)``). It is put
            in autocommit. A factory of the wrong kind raises ConfigError when a lock
            first uses it.
        lease_table: the lease table (``"fencepost_leases"``), a plain SQL identifier,
            optionally ``schema.table``.
        token_table: the per-name token table (``"fencepost_tokens"``): every grant's
            token is above the name's row there, if it has one.
        namespace: namespace of advisory keys (``"fencepost"``), so applications
            sharing a database do not collide (:func:`advisory_key`).
        notify: wake waiters on release with ``LISTEN``/``NOTIFY`` (default ``True``):
            every release sends ``pg_notify`` on the name's channel in its own
            statement (so only once it committed), and a lock that finds the name
            held waits for that notification instead of sleeping through its backoff.
            The wait lasts the backoff it stands in for, so a lost notification, a
            dead listening connection or a pooler that cannot carry ``LISTEN``
            (PgBouncer in transaction mode: notifications never reach the client)
            costs what polling costs. ``False``: waiters poll, releases notify nobody.
        listen_conninfo: the connection string of the listening connection (one per
            backend, opened on the first wait, on a thread of its own, closed 30 s
            after the last waiter left). By default it connects like ``conninfo``,
            the pool (its ``conninfo`` and ``kwargs``) or the single connection (its
            parameters and password). Behind PgBouncer in transaction mode point it at
            the server itself (or at a session-mode pool), or waiters poll. With only
            a ``connect`` factory and no ``listen_conninfo``, waiters poll.

    **Session mode needs dedicated connections, never a pool's.** A session-level
    advisory lock belongs to the server session that took it: it is held exactly as
    long as that session lives, it is re-entrant within it (a second
    ``pg_try_advisory_lock`` on the same session "succeeds" again), and anything run on
    that session can unlock it. So each lock opens a connection of its own for its
    first statement, runs every later statement (heartbeat, release) on it, and closes
    it after its final event (released, lost, acquire failed). A pool connection goes
    back to the pool between statements and serves other users, who would share (or
    free) the lock; a transaction-pooling proxy (PgBouncer ``pool_mode = transaction``)
    may even run each statement on a different server session — take the lock on one,
    check it on another — and the statements of several clients on the same one. Each
    session records the owner of the session lock it holds, so a client whose acquire
    lands on a server session that holds the lock for another client is refused with
    :class:`~fencepost.errors.ProtocolError` (naming lease rows and ``xact_lock``, which
    work there), never granted the same lock with the same token; its release cannot
    unlock the other client's lock either. Each held or waiting session lock costs one
    connection.

    **One lock per name across the modes.** A lease row, a session lock and a
    transaction lock (:func:`xact_lock`) of the same name — with the same
    ``lease_table``, ``token_table`` and ``namespace`` — exclude each other, and every
    grant in any mode takes the name's next fencing token, counted on its lease row
    (and always above the name's row in ``token_table``, if it has one). A lease grant
    takes the name's advisory key for the length of its own statement; an advisory
    grant is undone when the name's lease row is live.

    **Releases that fail.** A release that fails in transport is retried by the lock
    machine; each failed attempt logs a warning on the ``fencepost`` logger, since a
    release no attempt got through leaves the lease on the server until its TTL.

    **The heartbeat.** In session mode the ``ttl`` of :class:`fencepost.Lock` is the
    heartbeat deadline: the lock machine asks the dedicated connection whether it still
    holds the lock every ``ttl/3`` (``renew_every``) and reports
    :class:`~fencepost.errors.LockLost` when it does not, or when no answer comes
    before the deadline. The server frees the lock the moment it sees the connection
    drop (a crash, a network cut, ``pg_terminate_backend``), and may grant it to
    another session before the heartbeat notices: up to ``ttl`` later. When the
    dedicated connection breaks, the next statement of the lock opens a new one, which
    does not hold the lock: the heartbeat reads "not held" and the lease is lost at
    once rather than at its deadline.

    Raises:
        ConfigError: psycopg is missing; a client of another kind; a single
            connection not in autocommit (lease mode); lease mode without
            ``conn_or_pool``; session mode without ``conninfo`` or ``connect``;
            clients of both kinds (sync and async); a bad mode, table name or
            namespace.
    """

    def __init__(
        self,
        conn_or_pool: Any = None,
        *,
        mode: Mode = "lease",
        conninfo: Optional[str] = None,
        connect: Optional[Callable[[], Any]] = None,
        lease_table: str = "fencepost_leases",
        token_table: str = "fencepost_tokens",
        namespace: str = "fencepost",
        notify: bool = True,
        listen_conninfo: Optional[str] = None,
    ) -> None:
        super().__init__()
        psycopg = _psycopg()
        if mode not in ("lease", "session"):
            raise ConfigError(f"mode must be 'lease' or 'session', got {mode!r}")
        migration(lease_table=lease_table, token_table=token_table)  # checks the names
        if not isinstance(namespace, str):
            raise ConfigError(f"namespace must be a str, got {namespace!r}")
        _core.advisory_key(namespace, "")  # ConfigError for text UTF-8 cannot hold
        if not isinstance(notify, bool):
            raise ConfigError(f"notify must be True or False, got {notify!r}")
        if listen_conninfo is not None and not isinstance(listen_conninfo, str):
            raise ConfigError(f"listen_conninfo must be a str, got {listen_conninfo!r}")
        self.mode: Mode = mode
        self.notify = notify
        self._listen_conninfo = listen_conninfo
        self._listener: Optional[_Listener] = None
        self._marks: Dict[Tuple[int, int], int] = {}
        self.lease_table = lease_table
        self.token_table = token_table
        self.namespace = namespace

        sync_pools, async_pools = _pool_types()
        self._conn: Any = None
        self._pool: Any = None
        kinds: Set[str] = set()  # "sync" / "async": what the given clients serve
        if conn_or_pool is None:
            pass
        elif isinstance(conn_or_pool, (psycopg.AsyncConnection, psycopg.Connection)):
            self._conn = conn_or_pool
            kinds.add("async" if isinstance(conn_or_pool, psycopg.AsyncConnection) else "sync")
        elif isinstance(conn_or_pool, async_pools + sync_pools):
            self._pool = conn_or_pool
            kinds.add("async" if isinstance(conn_or_pool, async_pools) else "sync")
        else:
            raise ConfigError(
                "conn_or_pool must be a psycopg 3 Connection, AsyncConnection, "
                f"ConnectionPool or AsyncConnectionPool, got {conn_or_pool!r}"
            )
        if mode == "lease":
            if conn_or_pool is None:
                raise ConfigError(
                    "lease mode needs conn_or_pool: a psycopg connection (autocommit=True) "
                    "or, better, a connection pool"
                )
            if self._conn is not None and not self._conn.autocommit:
                raise ConfigError(
                    "the connection must be in autocommit mode (psycopg.connect(..., "
                    "autocommit=True)): fencepost's statements must commit on their own; "
                    "or pass a connection pool"
                )
        if conninfo is not None and not isinstance(conninfo, str):
            raise ConfigError(f"conninfo must be a str, got {conninfo!r}")
        if connect is not None and not callable(connect):
            raise ConfigError(f"connect must be a callable returning a connection, got {connect!r}")
        if conninfo is not None and connect is not None:
            raise ConfigError("pass conninfo or connect, not both")
        if mode == "session":
            if conninfo is None and connect is None:
                given = (
                    "a pool" if self._pool is not None else "a shared connection" if self._conn is not None else "nothing"
                )
                raise ConfigError(
                    "session mode needs a dedicated connection per lock: pass conninfo= "
                    "(a connection string) or connect= (a connection factory); got "
                    f"{given}. A pool's connections serve other users between statements, "
                    "who would share or free a session-level advisory lock"
                )
            if connect is not None and inspect.iscoroutinefunction(connect):
                kinds.add("async")  # other callables may return either kind: checked when called
        if len(kinds) > 1:
            raise ConfigError(
                "conn_or_pool and connect must both be sync (psycopg.Connection) or both "
                "async (psycopg.AsyncConnection)"
            )
        self._conninfo = conninfo
        self._connect = connect
        self.supports_async = not kinds or "async" in kinds
        self.supports_sync = not kinds or "sync" in kinds
        self._given = self._conn
        self._replacement: Any = None  # the connection opened in place of a dropped one
        self._replacement_loop: Optional[asyncio.AbstractEventLoop] = None
        self._reconnecting: Optional[asyncio.Lock] = None
        self._reconnect_guard = threading.Lock()
        self._dedicated: Dict[Tuple[int, int], _Dedicated] = {}
        self._guard = threading.Lock()
        self._closing: Set[asyncio.Task[None]] = set()

    # -- settings --

    def _machine_spec(self) -> PostgresSpec:
        return {
            "kind": "postgres",
            "mode": self.mode,
            "lease_table": self.lease_table,
            "token_table": self.token_table,
            "namespace": self.namespace,
            "notify": self.notify,
        }

    def advisory_key(self, name: str) -> int:
        """The advisory-lock key of lock ``name`` in this backend's namespace."""
        return _core.advisory_key(self.namespace, name)

    def _mode_error(self, wanted: str) -> ConfigError:
        if wanted == "async":
            return ConfigError(
                "this PostgresBackend has blocking psycopg clients: use `with lock` / "
                "lock.acquire_sync(), or give it a psycopg.AsyncConnection or "
                "AsyncConnectionPool for `async with lock`"
            )
        return ConfigError(
            "this PostgresBackend has asyncio psycopg clients: use `async with lock` / "
            "await lock.acquire(), or give it a psycopg.Connection or ConnectionPool "
            "for `with lock`"
        )

    # -- migration --

    def migrate(self) -> Coroutine[Any, Any, None]:
        """Creates fencepost's tables if missing (:func:`migration`), on
        ``conn_or_pool`` or, without one, a connection opened from ``conninfo`` /
        ``connect`` (closed after). Idempotent. The asyncio form: ``await
        backend.migrate()``; with blocking psycopg clients call :meth:`migrate_sync`.

        Raises:
            ConfigError: at once (before anything is awaited), when this backend has
                blocking clients only: use :meth:`migrate_sync`.
            psycopg.Error: the server refused it.
        """
        if not self.supports_async:
            raise ConfigError(
                "backend.migrate() is the asyncio form (await it) and this PostgresBackend "
                "has blocking psycopg clients: call backend.migrate_sync()"
            )
        return self._migrate_async()

    async def _migrate_async(self) -> None:
        for stmt in self._migration_statements():
            if self._pool is not None:
                async with self._pool.connection() as conn:
                    await _run_ddl_async(conn, stmt)
            elif self._conn is not None:
                await _run_ddl_async(await self._single_async(None), stmt)
            else:
                conn = await self._open_async()
                try:
                    await _run_ddl_async(conn, stmt)
                finally:
                    await conn.close()

    def migrate_sync(self) -> None:
        """Blocking :meth:`migrate`.

        Raises:
            ConfigError: this backend has asyncio clients only: ``await
                backend.migrate()``.
            psycopg.Error: the server refused it.
        """
        if not self.supports_sync:
            raise ConfigError(
                "this PostgresBackend has asyncio psycopg clients: await backend.migrate() "
                "instead of backend.migrate_sync()"
            )
        for stmt in self._migration_statements():
            if self._pool is not None:
                with self._pool.connection() as conn:
                    _run_ddl_sync(conn, stmt)
            elif self._conn is not None:
                _run_ddl_sync(self._single_sync(None), stmt)
            else:
                conn = self._open_sync()
                try:
                    _run_ddl_sync(conn, stmt)
                finally:
                    conn.close()

    def _migration_statements(self) -> List[str]:
        sql = migration(lease_table=self.lease_table, token_table=self.token_table)
        return [s.strip() for s in sql.split(";") if s.strip()]

    # -- transaction-level locks --

    def xact_lock(self, conn: Any, name: str, *, timeout: Optional[Seconds] = 0) -> XactLock:
        """:func:`xact_lock` with this backend's token table and namespace."""
        return xact_lock(
            conn,
            name,
            timeout=timeout,
            lease_table=self.lease_table,
            token_table=self.token_table,
            namespace=self.namespace,
        )

    # -- fenced writes: Redis only --

    async def fenced_set(
        self,
        data_key: str,
        fence_key: str,
        token: int,
        value: Union[str, bytes],
        *,
        owner_id: Optional[str] = None,
    ) -> None:
        """Not on PostgreSQL: use :func:`fenced_update`. Raises ConfigError."""
        raise ConfigError("fenced_set is a Redis helper; on PostgreSQL use fencepost.postgres.fenced_update")

    def fenced_set_sync(
        self,
        data_key: str,
        fence_key: str,
        token: int,
        value: Union[str, bytes],
        *,
        owner_id: Optional[str] = None,
    ) -> None:
        """Not on PostgreSQL: use :func:`fenced_update_sync`. Raises ConfigError."""
        raise ConfigError(
            "fenced_set_sync is a Redis helper; on PostgreSQL use fencepost.postgres.fenced_update_sync"
        )

    # -- operator queries: is it locked? free it --

    def _lock_state_stmt(self, name: str, force: bool) -> _core.SqlStatement:
        return _core.lock_state_statement(
            name,
            force=force,
            lease_table=self.lease_table,
            token_table=self.token_table,
            namespace=self.namespace,
        )

    def _lock_state(self, name: str, force: bool, reply: Any) -> bool:
        lease, pid = _core.read_lock_state(reply)  # ProtocolError
        if force and not lease and pid is not None:
            raise ConfigError(
                f"lock {name!r} is held by a PostgreSQL advisory lock (session mode or "
                f"xact_lock) of server process {pid}: only its own session can free an "
                "advisory lock. End that session with SELECT pg_terminate_backend("
                f"{pid}) (the holder's next heartbeat then reports the loss), or use lease "
                "rows (mode='lease'), which force_release frees",
                kind="unsupported",
            )
        return lease or (not force and pid is not None)

    async def is_locked(self, name: str) -> bool:
        """Whether lock ``name`` is held now, as the server answers: a live lease row
        (expiry on the server's clock), or a session holding the name's advisory lock
        (session mode, :func:`xact_lock`; read from ``pg_locks``). Runs on the pool or
        connection given (session mode without one: a connection opened for the query
        and closed). See :meth:`fencepost.Backend.is_locked` for the errors."""
        stmt = self._lock_state_stmt(name, False)
        return self._lock_state(name, False, await self._operator_async(stmt, name, "is_locked"))

    def is_locked_sync(self, name: str) -> bool:
        """Blocking form of :meth:`is_locked`; same arguments and errors."""
        stmt = self._lock_state_stmt(name, False)
        return self._lock_state(name, False, self._operator_sync(stmt, name, "is_locked"))

    async def force_release(self, name: str) -> bool:
        """Frees lock ``name``'s live lease row whoever holds it (owner and expiry
        cleared; the token kept, so the next grant's token is higher than every earlier
        one). Returns True if a lease was freed. The freed holder learns it at its next
        renewal (``LockLost``, reason ``"renew_rejected"``).

        Raises:
            ConfigError: (``kind="unsupported"``) the name is held by an advisory lock
                (session mode or :func:`xact_lock`): only its session can free it; the
                message names the server process to end with ``pg_terminate_backend``.
            BackendError, ProtocolError: as :meth:`fencepost.Backend.force_release`.
        """
        stmt = self._lock_state_stmt(name, True)
        return self._lock_state(name, True, await self._operator_async(stmt, name, "force_release"))

    def force_release_sync(self, name: str) -> bool:
        """Blocking form of :meth:`force_release`; same arguments and errors."""
        stmt = self._lock_state_stmt(name, True)
        return self._lock_state(name, True, self._operator_sync(stmt, name, "force_release"))

    # -- operator queries: who holds it? which locks are held? (lease rows) --

    def _rows_only(self, what: str) -> None:
        if self.mode != "lease":
            raise ConfigError(
                f"PostgresBackend(mode={self.mode!r}) does not support {what}(): advisory "
                "locks keep no row to read a holder from (inspect, list and election "
                "followers work on lease rows, mode='lease')",
                kind="unsupported",
            )

    def _keeps_leader_metadata(self) -> bool:
        """Lease rows keep an election leader's record in the row's metadata."""
        return self.mode == "lease"

    def _no_leader(self) -> ConfigError:
        return ConfigError(
            f"PostgresBackend(mode={self.mode!r}) cannot say who leads an election: "
            "advisory locks keep no row for the leader's record (Election.leader() and "
            "observe() work on lease rows, mode='lease')",
            kind="unsupported",
        )

    def _inspect_stmt(self, name: str) -> _core.SqlStatement:
        self._rows_only("inspect")
        if not isinstance(name, str):
            raise ConfigError(f"name must be a str, got {name!r}")
        return _core.pg_inspect_statement(name, lease_table=self.lease_table)

    def _list_stmt(self, prefix: object, limit: object) -> _core.SqlStatement:
        self._rows_only("list")
        if not isinstance(prefix, str):
            raise ConfigError(f"prefix must be a str, got {prefix!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= _core.PG_LIST_MAX:
            raise ConfigError(f"limit must be an int from 1 to {_core.PG_LIST_MAX}, got {limit!r}")
        return _core.pg_list_statement(prefix, limit, lease_table=self.lease_table)

    @staticmethod
    def _holders(reply: object) -> List[Holder]:
        return [Holder._from_core(h) for h in _core.read_pg_holders(reply)]  # type: ignore[arg-type]

    async def inspect(self, name: str) -> Optional[Holder]:
        """Who holds lock ``name`` now (lease rows): a :class:`~fencepost.Holder` with
        the row's owner id, token, ``ttl_left`` (seconds, from the row's expiry on the
        *server's* clock, rounded up to the millisecond) and ``metadata``; ``waiters``
        is None (lease-row contenders leave no trace until they win). None when no live
        row holds it. One statement, on the pool or connection given.

        Raises:
            ConfigError: (``kind="unsupported"``) an advisory mode (session locks keep
                no row), or ``name`` not a str.
            BackendError, ProtocolError: as :meth:`fencepost.Backend.inspect` (a table
                without the ``metadata`` column names the migration).
        """
        stmt = self._inspect_stmt(name)
        found = self._holders(await self._operator_async(stmt, name, "inspect"))
        return found[0] if found else None

    def inspect_sync(self, name: str) -> Optional[Holder]:
        """Blocking form of :meth:`inspect`; same arguments and errors."""
        stmt = self._inspect_stmt(name)
        found = self._holders(self._operator_sync(stmt, name, "inspect"))
        return found[0] if found else None

    async def list(self, prefix: str = "", *, limit: int = 100) -> List[Holder]:
        """The held locks (live lease rows) whose names start with ``prefix``, at most
        ``limit`` (1 to ``fencepost._core.PG_LIST_MAX``), in name order, as
        :meth:`inspect` gives them: one bounded statement (``WHERE name LIKE prefix…
        ORDER BY name LIMIT limit``, the prefix's ``%``, ``_`` and ``\\`` escaped).

        Raises:
            ConfigError: an advisory mode (``kind="unsupported"``), ``prefix`` not a
                str, ``limit`` out of range.
            BackendError, ProtocolError: as :meth:`inspect`.
        """
        stmt = self._list_stmt(prefix, limit)
        return self._holders(await self._operator_async(stmt, prefix, "list"))

    def list_sync(self, prefix: str = "", *, limit: int = 100) -> List[Holder]:
        """Blocking form of :meth:`list`; same arguments and errors."""
        stmt = self._list_stmt(prefix, limit)
        return self._holders(self._operator_sync(stmt, prefix, "list"))

    def _operator_sync(self, stmt: _core.SqlStatement, name: str, what: str) -> object:
        if not self.supports_sync:
            raise self._mode_error("sync")
        try:
            if self._pool is not None:
                with self._pool.connection() as conn:
                    return _execute_sync(conn, stmt)
            if self._conn is not None:
                return _execute_sync(self._single_sync(None), stmt)
            conn = self._open_sync()
            try:
                return _execute_sync(conn, stmt)
            finally:
                conn.close()
        except (ConfigError, BackendError):
            raise
        except Exception as exc:
            raise BackendError(f"{what}({name!r}) failed: {exc}") from exc

    async def _operator_async(self, stmt: _core.SqlStatement, name: str, what: str) -> object:
        if not self.supports_async:
            raise self._mode_error("async")
        try:
            if self._pool is not None:
                async with self._pool.connection() as conn:
                    return await _execute_async(conn, stmt)
            if self._conn is not None:
                return await _execute_async(await self._single_async(None), stmt)
            conn = await self._open_async()
            try:
                return await _execute_async(conn, stmt)
            finally:
                await _close_async(conn)
        except (ConfigError, BackendError):
            raise
        except Exception as exc:
            raise BackendError(f"{what}({name!r}) failed: {exc}") from exc

    # -- connections --

    def _open_sync(self) -> Any:
        psycopg = _psycopg()
        if self._connect is not None:
            conn = self._connect()
            if not isinstance(conn, psycopg.Connection):
                if inspect.iscoroutine(conn):
                    conn.close()  # never awaited: an async factory used with `with lock`
                raise ConfigError(
                    f"connect() must return a psycopg.Connection for `with lock`, got {conn!r}"
                )
        else:
            conn = psycopg.connect(self._conninfo or "", autocommit=True)
        if not conn.autocommit:
            conn.autocommit = True
        return conn

    async def _open_async(self) -> Any:
        psycopg = _psycopg()
        if self._connect is not None:
            made = self._connect()
            conn = await made if inspect.isawaitable(made) else made
            if not isinstance(conn, psycopg.AsyncConnection):
                raise ConfigError(
                    f"connect() must return a psycopg.AsyncConnection (or an awaitable of "
                    f"one) for `async with lock`, got {conn!r}"
                )
        else:
            conn = await psycopg.AsyncConnection.connect(self._conninfo or "", autocommit=True)
        if not conn.autocommit:
            await conn.set_autocommit(True)
        return conn

    # -- the single connection of lease mode --

    def _single_sync(self, deadline_ns: Optional[int]) -> Any:
        """The connection for statements of any connection: the one given, or, once
        the server dropped it, a new one with its parameters (a lease survives a
        dropped connection as it does with a pool)."""
        conn = self._conn
        if not (conn.broken or conn.closed):
            return conn
        with self._reconnect_guard:
            if self._conn is conn:  # not replaced by another thread meanwhile
                psycopg = _psycopg()
                dead, self._conn = conn, psycopg.connect(**_reconnect_args(conn, deadline_ns))
                self._replacement = self._conn
                _log.warning(
                    "the PostgreSQL connection was dropped (%s); fencepost "
                    "connected again with its parameters", _describe(dead)
                )
                if dead is not self._given:
                    dead.close()
            return self._conn

    async def _single_async(self, deadline_ns: Optional[int]) -> Any:
        """Async :meth:`_single_sync`."""
        conn = self._conn
        if not (conn.broken or conn.closed):
            return conn
        if self._reconnecting is None:
            self._reconnecting = asyncio.Lock()
        async with self._reconnecting:
            if self._conn is conn:
                psycopg = _psycopg()
                fresh = await psycopg.AsyncConnection.connect(**_reconnect_args(conn, deadline_ns))
                dead, self._conn = conn, fresh
                self._replacement = fresh
                self._replacement_loop = asyncio.get_running_loop()
                _log.warning(
                    "the PostgreSQL connection was dropped (%s); fencepost "
                    "connected again with its parameters", _describe(dead)
                )
                if dead is not self._given:
                    await _close_async(dead)
            return self._conn

    def close(self) -> None:
        """Stops this backend (:meth:`fencepost.Backend.close`) and closes the
        connection it opened in place of a dropped one given as ``conn_or_pool`` (the
        given connection, pool and the dedicated connections' factory stay their
        owner's; :meth:`aclose` waits for that close too)."""
        super().close()

    def _close_owned(self) -> None:
        super()._close_owned()
        if self._listener is not None:
            self._listener.close()
        conn, self._replacement = self._replacement, None
        if conn is None or conn.closed:
            return
        psycopg = _psycopg()
        if isinstance(conn, psycopg.Connection):
            conn.close()
            return
        loop = self._replacement_loop
        if loop is not None and not loop.is_closed():
            if _running_loop_is(loop):
                task = loop.create_task(_close_async(conn))
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)
                self._closes_pending.add(task)
                task.add_done_callback(self._closes_pending.discard)
            else:
                loop.call_soon_threadsafe(lambda: loop.create_task(_close_async(conn)))

    # -- driver hooks --

    def _request_scheduled(self, driver: Any, request: _core.Request) -> None:
        if self.notify and request.operation == "acquire":
            # before the send: a release after it is heard by a wait that follows
            self._marks[(id(driver), request.lock)] = self._listening().mark()
        if not _dedicated(request):
            return
        key = (id(driver), request.lock)
        with self._guard:
            entry = self._dedicated.get(key)
            if entry is None and request.operation == "acquire":
                # a lock's first request is always its acquire: its connection starts here
                entry = self._dedicated[key] = _Dedicated()
            if entry is not None:
                entry.in_flight += 1

    def _lock_finished(self, driver: Any, lock: int) -> None:
        key = (id(driver), lock)
        self._marks.pop(key, None)
        with self._guard:
            entry = self._dedicated.get(key)
            if entry is None:
                return
            entry.finished = True
            conn = self._take_if_done(key, entry)
        self._close(driver, conn)

    def _take_if_done(self, key: Tuple[int, int], entry: _Dedicated) -> Any:
        """With the guard held: forgets a finished lock with nothing in flight and
        returns its connection to close (or None)."""
        if entry.finished and entry.in_flight == 0:
            del self._dedicated[key]
            conn, entry.conn = entry.conn, None
            return conn
        return None

    def _close(self, driver: Any, conn: Any) -> None:
        if conn is None:
            return
        if isinstance(driver, AsyncDriver):
            if driver.loop.is_closed():
                return
            task = driver.loop.create_task(_close_async(conn))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        else:
            conn.close()

    def _entry(self, driver: Any, request: _core.Request) -> Tuple[Tuple[int, int], _Dedicated]:
        key = (id(driver), request.lock)
        with self._guard:
            entry = self._dedicated.get(key)
        if entry is None:
            # Only the lock's cleanup requests come after its connection was closed;
            # closing it ended the session and every advisory lock it held.
            raise BackendError(
                f"the dedicated connection of lock {request.lock} is closed (its session "
                "and any advisory lock it held ended with it)"
            )
        return key, entry

    def _done(self, driver: Any, key: Tuple[int, int], entry: _Dedicated) -> None:
        with self._guard:
            entry.in_flight -= 1
            conn = self._take_if_done(key, entry)
        self._close(driver, conn)

    # -- waiting for a release's notification --

    def _listening(self) -> _Listener:
        with self._guard:
            if self._listener is None:
                self._listener = _Listener(self._listen_connect())
            return self._listener

    def _listen_connect(self) -> Callable[[], Any]:
        """How the listener connects (it raises BackendError when it cannot: its
        waiters then poll)."""
        psycopg = _psycopg()
        args: Optional[Dict[str, Any]] = None
        conninfo = self._listen_conninfo or self._conninfo
        if conninfo is not None:
            args = {"conninfo": conninfo}
        elif self._pool is not None and isinstance(getattr(self._pool, "conninfo", None), str):
            args = dict(getattr(self._pool, "kwargs", None) or {})
            args["conninfo"] = self._pool.conninfo
        elif self._conn is not None:
            args = _reconnect_args(self._conn, None)
        if args is None:
            def refuse() -> Any:
                raise BackendError("no connection string for the listening connection: pass listen_conninfo")
            return refuse
        args["autocommit"] = True
        args.setdefault("connect_timeout", 5)
        return lambda: psycopg.connect(**args)

    def _wait_args(self, driver: Any, request: _core.Request) -> Tuple[str, str, float, int]:
        stmt = request.body
        assert isinstance(stmt, _core.SqlStatement)
        channel, timeout_ms = stmt.params[0], stmt.params[1]
        if not isinstance(channel, str) or not isinstance(timeout_ms, int):
            raise BackendError(f"a listen request names (channel, timeout ms), got {stmt.params!r}")
        mark = self._marks.get((id(driver), request.lock), -1)
        return channel, stmt.sql, max(0, timeout_ms) / 1000, mark

    async def _wait_async(self, driver: Any, request: _core.Request) -> object:
        channel, sql, timeout, mark = self._wait_args(driver, request)
        loop = asyncio.get_running_loop()
        heard: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            def settle() -> None:
                if not heard.done():
                    heard.set_result(None)

            try:
                loop.call_soon_threadsafe(settle)
            except RuntimeError:  # the loop closed meanwhile
                pass

        forget = self._listening().wait(channel, sql, mark, wake)
        try:
            await asyncio.wait_for(heard, timeout)
        except asyncio.TimeoutError:
            pass  # the backoff the wait stands in for has passed: try again
        finally:
            forget()
        return []

    def _wait_sync(self, driver: Any, request: _core.Request) -> object:
        channel, sql, timeout, mark = self._wait_args(driver, request)
        heard = threading.Event()
        forget = self._listening().wait(channel, sql, mark, heard.set)
        try:
            heard.wait(timeout)
        finally:
            forget()
        return []

    async def _run_async(self, driver: Any, request: _core.Request) -> object:
        stmt = request.body
        if not isinstance(stmt, _core.SqlStatement):
            raise ConfigError(f"a PostgreSQL backend cannot run {request!r}")
        if stmt.connection == "listen":
            return await self._wait_async(driver, request)
        if stmt.connection == "any":
            if self._pool is not None:
                try:
                    async with self._pool.connection(timeout=_remaining_s(request.deadline_ns)) as conn:
                        return await _execute_async(conn, stmt)
                except Exception as exc:
                    _warn_release(request, exc)
                    raise
            if self._conn is None:  # pragma: no cover - lease mode always has one
                raise BackendError("no connection to run the statement on")
            try:
                return await _execute_async(await self._single_async(request.deadline_ns), stmt)
            except Exception as exc:
                _warn_release(request, exc)
                raise
        key, entry = self._entry(driver, request)
        try:
            if entry.opening is None:
                entry.opening = asyncio.Lock()
            async with entry.opening:
                if entry.conn is None:
                    entry.conn = await self._open_async()
                conn = entry.conn
            try:
                return await _execute_async(conn, stmt)
            except BaseException:
                if conn.broken or conn.closed:
                    # The session is gone, and the lock with it: the next statement of
                    # this lock opens a new connection, which does not hold it.
                    entry.conn = None if entry.conn is conn else entry.conn
                    await _close_async(conn)
                raise
        finally:
            self._done(driver, key, entry)

    def _run_sync(self, driver: Any, request: _core.Request) -> object:
        stmt = request.body
        if not isinstance(stmt, _core.SqlStatement):
            raise ConfigError(f"a PostgreSQL backend cannot run {request!r}")
        if stmt.connection == "listen":
            return self._wait_sync(driver, request)
        if stmt.connection == "any":
            if self._pool is not None:
                try:
                    with self._pool.connection(timeout=_remaining_s(request.deadline_ns)) as conn:
                        return _execute_sync(conn, stmt)
                except Exception as exc:
                    _warn_release(request, exc)
                    raise
            if self._conn is None:  # pragma: no cover - lease mode always has one
                raise BackendError("no connection to run the statement on")
            try:
                return _execute_sync(self._single_sync(request.deadline_ns), stmt)
            except Exception as exc:
                _warn_release(request, exc)
                raise
        key, entry = self._entry(driver, request)
        try:
            with self._guard:
                if entry.opening is None:
                    entry.opening = threading.Lock()
            with entry.opening:
                if entry.conn is None:
                    entry.conn = self._open_sync()
                conn = entry.conn
            try:
                return _execute_sync(conn, stmt)
            except BaseException:
                if conn.broken or conn.closed:
                    entry.conn = None if entry.conn is conn else entry.conn
                    conn.close()
                raise
        finally:
            self._done(driver, key, entry)

    def _execute_sync(self, command: Any) -> object:
        raise ConfigError(f"a PostgreSQL backend cannot run {command!r}")

    async def _execute_async(self, command: Any) -> object:
        raise ConfigError(f"a PostgreSQL backend cannot run {command!r}")

    def __repr__(self) -> str:
        kind = "asyncio" if not self.supports_sync else "blocking" if not self.supports_async else "any"
        return f"<fencepost.postgres.PostgresBackend {self.mode} {kind}>"


def _reconnect_args(conn: Any, deadline_ns: Optional[int]) -> Dict[str, Any]:
    """Arguments connecting again like ``conn`` (its parameters and password), in
    autocommit, within the request's deadline (libpq's connect_timeout: whole
    seconds, at least 2)."""
    args: Dict[str, Any] = {"conninfo": conn.info.dsn, "autocommit": True}
    if conn.info.password:
        args["password"] = conn.info.password
    if deadline_ns is not None:
        args["connect_timeout"] = max(2, int(_remaining_s(deadline_ns)) + 1)
    return args


def _describe(conn: Any) -> str:
    try:
        return f"host={conn.info.host} port={conn.info.port} dbname={conn.info.dbname}"
    except Exception:  # pragma: no cover - info of a closed connection
        return repr(conn)


def _running_loop_is(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _warn_release(request: _core.Request, exc: BaseException) -> None:
    """A release that fails must not pass unseen: the machine retries it and, when no
    attempt gets through, reports the lock released, and the row stays live on the
    server until its TTL."""
    if request.operation == "release":
        stmt = request.body
        name = stmt.params[0] if isinstance(stmt, _core.SqlStatement) and stmt.params else "?"
        _log.warning(
            "releasing PostgreSQL lock %r failed (%s: %s); it is retried, and "
            "if no attempt gets through the lease stays on the server until its TTL",
            name, type(exc).__name__, exc,
        )


def _dedicated(request: _core.Request) -> bool:
    body = request.body if request.kind == "sql" else None
    return isinstance(body, _core.SqlStatement) and body.connection == "dedicated"


async def _close_async(conn: Any) -> None:
    try:
        await conn.close()
    except Exception:  # pragma: no cover - closing a broken connection
        pass


def _run_ddl_sync(conn: Any, sql: str) -> None:
    if conn.autocommit:
        conn.execute(sql, prepare=False)
    else:
        with conn.transaction():
            conn.execute(sql, prepare=False)


async def _run_ddl_async(conn: Any, sql: str) -> None:
    if conn.autocommit:
        await conn.execute(sql, prepare=False)
    else:
        async with conn.transaction():
            await conn.execute(sql, prepare=False)


# ---- the listening connection of waiters -------------------------------------------------------


class _Listener:
    """The backend's ``LISTEN`` connection: one blocking psycopg connection on a thread
    of its own, serving the waiters of every lock (``with lock`` and ``async with
    lock`` alike) until none has waited for :data:`_LINGER` seconds.

    A wait answers at once when its release may have been missed: the channel was not
    listened to yet when the lock's acquire was sent (the ``LISTEN`` came later, or
    the connection was lost and listened again), or a notification on it came after
    that send. Sequence numbers order these events against the acquire's ``mark``."""

    def __init__(self, connect: Callable[[], Any]) -> None:
        self._connect = connect
        self._guard = threading.Lock()
        self._seq = 0
        self._listened: Dict[str, int] = {}  # channel -> seq of its LISTEN on the connection
        self._notified: Dict[str, int] = {}  # channel -> seq of its last notification
        self._pending: Dict[str, str] = {}  # channel -> its LISTEN statement, not run yet
        self._waiters: Dict[str, List[Callable[[], None]]] = {}
        self._idle_since = time.monotonic()
        self._thread: Optional[threading.Thread] = None
        self._closed = False

    def mark(self) -> int:
        """The sequence number now: taken when an acquire is sent."""
        with self._guard:
            return self._seq

    def wait(self, channel: str, listen_sql: str, mark: int, wake: Callable[[], None]) -> Callable[[], None]:
        """Calls ``wake`` (from the listener's thread, or now) once a release on
        ``channel`` may have come after ``mark``; returns the function that forgets
        the waiter."""
        with self._guard:
            listened = self._listened.get(channel)
            if listened is None:
                # woken once its LISTEN is in place, which is after the mark
                self._pending[channel] = listen_sql
                now = False
            else:
                now = listened > mark or self._notified.get(channel, -1) > mark
            if not now:
                self._waiters.setdefault(channel, []).append(wake)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="fencepost-pg-listen", daemon=True)
                self._thread.start()
        if now:
            wake()

        def forget() -> None:
            with self._guard:
                waiters = self._waiters.get(channel)
                if waiters is not None and wake in waiters:
                    waiters.remove(wake)
                    if not waiters:
                        del self._waiters[channel]
                if not self._waiters:
                    self._idle_since = time.monotonic()

        return forget

    def close(self) -> None:
        with self._guard:
            self._closed = True

    def _wake(self, channel: str) -> List[Callable[[], None]]:
        """With the guard held: the waiters of ``channel``, to call without it."""
        self._seq += 1
        self._notified[channel] = self._seq
        waiters = self._waiters.pop(channel, [])
        if not self._waiters:
            self._idle_since = time.monotonic()
        return waiters

    def _run(self) -> None:
        conn: Any = None
        try:
            while True:
                with self._guard:
                    idle = not self._waiters
                    broken = conn is None or conn.closed or conn.broken
                    # idle too long, or idle without a connection: leave (the next wait
                    # starts again)
                    if self._closed or (idle and (broken or time.monotonic() - self._idle_since > _LINGER)):
                        self._thread = None
                        self._listened.clear()
                        self._pending.clear()
                        return
                if broken:
                    conn = self._reconnect(conn)
                    if conn is None:
                        continue
                with self._guard:
                    pending = dict(self._pending)
                woken: List[Callable[[], None]] = []
                try:
                    for channel, sql in pending.items():
                        conn.execute(sql, prepare=False)
                        with self._guard:
                            self._pending.pop(channel, None)
                            self._seq += 1
                            self._listened[channel] = self._seq
                            woken += self._wake(channel)
                    for wake in woken:
                        wake()
                    for note in conn.notifies(timeout=_LISTEN_POLL):
                        with self._guard:
                            woken = self._wake(note.channel)
                        for wake in woken:
                            wake()
                except Exception as exc:  # the connection broke: listen again on a new one
                    _log.debug("fencepost's PostgreSQL listener lost its connection: %s", exc)
                    conn = self._reconnect(conn)
        finally:
            if conn is not None:
                conn.close()

    def _reconnect(self, dead: Any) -> Any:
        """A new connection, every channel to be listened to again (what was sent
        while none listened is covered: a new LISTEN answers its waiters at once)."""
        if dead is not None:
            dead.close()
        with self._guard:
            for channel in self._listened:
                self._pending.setdefault(channel, f"LISTEN {channel}")
            for channel in self._waiters:
                self._pending.setdefault(channel, f"LISTEN {channel}")
            self._listened.clear()
        try:
            return self._connect()
        except Exception as exc:
            _log.debug("fencepost's PostgreSQL listener cannot connect: %s", exc)
            time.sleep(_RECONNECT_PAUSE)  # waiters meanwhile poll (their wait's timeout)
            return None


#: How long the listener keeps its connection after its last waiter left (seconds).
_LINGER = 30.0
#: How often the listener looks for channels to add while it waits for notifications.
_LISTEN_POLL = 0.02
#: The pause between failed connects of the listener.
_RECONNECT_PAUSE = 0.5


# ---- transaction-level advisory locks -------------------------------------------------------


class XactLock:
    """A transaction-level advisory lock around a block of work: see :func:`xact_lock`.

    Supports ``with`` (``psycopg.Connection``) and ``async with``
    (``psycopg.AsyncConnection``); the value of the block is the fencing token.
    """

    def __init__(
        self,
        conn: Any,
        name: str,
        *,
        timeout: Optional[Seconds],
        lease_table: str,
        token_table: str,
        namespace: str,
    ) -> None:
        self._conn = conn
        self._name = name
        ns = None if timeout is None else _seconds_to_ns("timeout", timeout)
        #: ``lock_timeout`` for the server-side wait ("0": none), or None to try once.
        self._lock_timeout: Optional[str] = (
            "0" if ns is None else None if ns == 0 else f"{max(1, -(-ns // 1_000_000))}ms"
        )
        self._stmt = _core.xact_lock_statement(
            name,
            wait=self._lock_timeout is not None,
            lease_table=lease_table,
            token_table=token_table,
            namespace=namespace,
        )
        self._tx: Any = None
        #: The fencing token once granted.
        self.token: Optional[int] = None

    def _granted(self, reply: Any) -> int:
        token = _core.read_xact_lock(reply)  # ProtocolError
        if token is None:
            why = (
                "another transaction holds it (xact_lock tries exactly once with timeout=0; "
                "retry the transaction)"
                if self._lock_timeout is None
                else "a lease row of the name is live (xact_lock waits on the server for "
                "advisory holders only; retry the transaction)"
            )
            raise AcquireTimeout(
                f"could not acquire lock {self._name!r}: {why}", name=self._name, last_error=None
            )
        self.token = token
        return token

    def _timed_out(self, exc: Exception) -> Optional[AcquireTimeout]:
        if getattr(exc, "sqlstate", None) != "55P03":  # lock_not_available: lock_timeout
            return None
        return AcquireTimeout(
            f"could not acquire lock {self._name!r} within the timeout: another transaction "
            f"or session held it for longer (lock_timeout {self._lock_timeout})",
            name=self._name,
            last_error=str(exc),
        )

    def _error(self, exc: Exception) -> object:
        error = _error_reply(exc)
        if error is None:
            raise BackendError(f"xact_lock({self._name!r}) failed: {exc}") from exc
        return error

    def __enter__(self) -> int:
        psycopg = _psycopg()
        if not isinstance(self._conn, psycopg.Connection):
            raise ConfigError(
                f"`with xact_lock(conn, …)` needs a psycopg.Connection, got {self._conn!r} "
                "(use `async with` for an AsyncConnection)"
            )
        self._tx = self._conn.transaction()
        self._tx.__enter__()
        try:
            previous = None
            if self._lock_timeout is not None:
                previous = self._conn.execute(_SET_LOCK_TIMEOUT, (self._lock_timeout,), prepare=False).fetchone()[0]
            query, params = to_pyformat(self._stmt.sql, self._stmt.params)
            try:
                reply: object = _rows(self._conn.execute(query, params, prepare=False))
            except psycopg.Error as exc:
                timed_out = self._timed_out(exc)
                if timed_out is not None:
                    raise timed_out from None
                reply = self._error(exc)
            token = self._granted(reply)
            if previous is not None:  # the caller's work runs under its own setting
                self._conn.execute(_RESTORE_LOCK_TIMEOUT, (previous,), prepare=False)
            return token
        except BaseException:
            self._tx.__exit__(*sys.exc_info())
            raise

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Optional[bool]:
        """Commits the transaction (the work, the token bump; the lock ends), or rolls it
        back if the block raised."""
        result: Optional[bool] = self._tx.__exit__(exc_type, exc, tb)
        return result

    async def __aenter__(self) -> int:
        psycopg = _psycopg()
        if not isinstance(self._conn, psycopg.AsyncConnection):
            raise ConfigError(
                f"`async with xact_lock(conn, …)` needs a psycopg.AsyncConnection, got "
                f"{self._conn!r} (use `with` for a Connection)"
            )
        self._tx = self._conn.transaction()
        await self._tx.__aenter__()
        try:
            previous = None
            if self._lock_timeout is not None:
                cursor = await self._conn.execute(_SET_LOCK_TIMEOUT, (self._lock_timeout,), prepare=False)
                previous = (await cursor.fetchone())[0]
            query, params = to_pyformat(self._stmt.sql, self._stmt.params)
            try:
                cursor = await self._conn.execute(query, params, prepare=False)
                reply: object = await _rows_async(cursor)
            except psycopg.Error as exc:
                timed_out = self._timed_out(exc)
                if timed_out is not None:
                    raise timed_out from None
                reply = self._error(exc)
            token = self._granted(reply)
            if previous is not None:
                await self._conn.execute(_RESTORE_LOCK_TIMEOUT, (previous,), prepare=False)
            return token
        except BaseException:
            await self._tx.__aexit__(*sys.exc_info())
            raise

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Optional[bool]:
        """As :meth:`__exit__`."""
        result: Optional[bool] = await self._tx.__aexit__(exc_type, exc, tb)
        return result


#: Sets the transaction's lock_timeout for the wait (``SET LOCAL``: it ends with the
#: transaction) and returns the value it had.
_SET_LOCK_TIMEOUT = (
    "SELECT current_setting('lock_timeout'), set_config('lock_timeout', %s, true)"
)
_RESTORE_LOCK_TIMEOUT = "SELECT set_config('lock_timeout', %s, true)"


def xact_lock(
    conn: Any,
    name: str,
    *,
    timeout: Optional[Seconds] = 0,
    lease_table: str = "fencepost_leases",
    token_table: str = "fencepost_tokens",
    namespace: str = "fencepost",
) -> XactLock:
    """Runs a block of work inside one transaction that holds the transaction-level
    advisory lock ``name``::

        with xact_lock(conn, "nightly-report") as token:     # psycopg.Connection
            conn.execute("UPDATE reports SET … WHERE …")       # same transaction
        async with xact_lock(aconn, "nightly-report") as token:  # AsyncConnection
            ...

    Entering opens a transaction on ``conn`` (a savepoint if one is open: the lock then
    lasts until the outer transaction ends), runs the core's statement first —
    ``pg_try_advisory_xact_lock`` on :func:`advisory_key` ``(namespace, name)`` and, if
    granted while no lease of the name is live, ``token + 1`` on the name's row of
    ``lease_table`` in the same transaction — and gives the fencing token. Leaving
    commits (the work and the token bump together; the lock ends) or, if the block
    raised, rolls back. A rolled-back token is handed out again to the next holder, so
    the token fences writes *inside this transaction* only: never use it for writes
    outside it (another table through another connection, Redis, a file), where a
    write made with it would survive the rollback and carry the next holder's token.

    With ``timeout=0`` (the default) it tries **exactly once**: when the lock is held —
    by another transaction, a session lock or a live lease row of the same name — it
    rolls back and raises :class:`~fencepost.errors.AcquireTimeout`. With a timeout
    (seconds, or ``None`` for no limit) it waits **on the server** while another
    transaction or session holds the name's advisory lock: ``pg_advisory_xact_lock``
    under the transaction's ``lock_timeout`` set to the timeout (restored to the
    caller's value once granted, so the block's own statements run under their usual
    setting); the server queues the waiters and grants in its lock manager's order. A
    live *lease row* of the name is not waited for (no server-side wait can see it
    end): it raises AcquireTimeout at once; wait with a lease or session lock
    (:class:`PostgresBackend`) instead.

    **One lock per name across the three PostgreSQL modes.** Lease rows, session locks
    and transaction locks of the same name (same ``lease_table``, ``token_table`` and
    ``namespace``) exclude each other and count one fencing token per name, on the
    name's lease row (never below the name's row in ``token_table``). Correct through
    PgBouncer in transaction mode: the transaction pins one server session; a session
    lock another client holds on that same server session is refused with
    :class:`~fencepost.errors.ProtocolError` rather than shared.

    Raises:
        AcquireTimeout: the lock is held (see above), or was held for longer than
            ``timeout`` (``last_error`` names the server's lock timeout).
        ProtocolError: the server refused the statement (missing tables: run the
            migration); a session lock of this name is held on the same server
            session by another client (a transaction-pooling proxy).
        BackendError: the connection failed.
        ConfigError: a bad name, table or timeout (not a number of seconds, NaN,
            negative); ``with`` on an async connection or ``async with`` on a sync one.
    """
    return XactLock(
        conn,
        name,
        timeout=timeout,
        lease_table=lease_table,
        token_table=token_table,
        namespace=namespace,
    )


# ---- fenced writes -----------------------------------------------------------------------------


def _fenced(
    table: str,
    id_column: str,
    token_column: str,
    values: Mapping[str, Any],
    row_id: Any,
    token: int,
    owner_column: Optional[str],
    owner_id: Optional[str],
) -> Tuple[str, Dict[str, Any], str]:
    # 0 is what a fresh row's token column holds: a write with it would pass with no lease
    if isinstance(token, bool) or not isinstance(token, int) or token < 1:
        raise ConfigError(f"token must be a fencing token of a lease (an int >= 1), got {token!r}")
    if not isinstance(values, Mapping):
        raise ConfigError(f"values must be a mapping of column to value, got {values!r}")
    if (owner_column is None) != (owner_id is None):
        raise ConfigError(
            "owner_column and owner_id go together (the owner-bound rule); give both, or "
            f"neither for the token-only rule; got owner_column={owner_column!r}, owner_id={owner_id!r}"
        )
    if owner_id is not None and not (
        isinstance(owner_id, str) and len(owner_id) == 32 and all(c in "0123456789abcdefABCDEF" for c in owner_id)
    ):
        raise ConfigError(f"owner_id must be 32 hex digits (lease.owner_id), got {owner_id!r}")
    sql = _core.sql_fenced_update(
        table, id_column, token_column, list(values), "pyformat", owner_column
    )
    params: Dict[str, Any] = dict(values)
    params.update(id=row_id, token=token)
    columns = f'"{token_column}"'
    if owner_column is not None:
        params["owner"] = owner_id
        columns += f', "{owner_column}"'
    # names were checked by sql_fenced_update: plain identifiers, quoted the same way
    current = f'SELECT {columns} FROM "{table}" WHERE "{id_column}" = %(id)s'
    return sql, params, current


def _stale(
    table: str, row_id: Any, token: int, owner_id: Optional[str], found: Optional[Sequence[Any]]
) -> Exception:
    resource = f"{table}:{row_id}"
    if found is None:
        return LookupError(f"fenced update of {resource}: no row has that id")
    highest = found[0]
    if not isinstance(highest, int):
        return ConfigError(
            f"fenced update of {resource}: the token column holds {highest!r}; make it "
            "bigint NOT NULL DEFAULT 0"
        )
    if owner_id is not None and highest == token:
        message = (
            f"fencing token {token} for {resource!r} was granted twice: the row carries it "
            f"from owner {found[1]!r} (the lock server handed it out again: a failover, a "
            "transaction pooler or a restart without persistence)"
        )
        warnings.warn(message, DuplicateGrantWarning, stacklevel=3)
        return StaleToken(
            message, resource=resource, token=token, highest=highest, reason="duplicate_grant"
        )
    return StaleToken(
        f"stale fencing token {token} for {resource!r}: the row already carries token {highest}",
        resource=resource,
        token=token,
        highest=highest,
    )


def fenced_update_sync(
    conn: Any,
    table: str,
    *,
    id_column: str,
    token_column: str,
    row_id: Any,
    token: int,
    values: Mapping[str, Any],
    owner_column: Optional[str] = None,
    owner_id: Optional[str] = None,
) -> None:
    """Updates row ``row_id`` of ``table`` with ``values`` only if ``token`` is not lower
    than the row's ``token_column`` (:func:`fencepost.sql_fenced_update`), and stores
    ``token`` there. Runs on ``conn`` (a ``psycopg.Connection``, in your transaction if
    one is open).

    The table is yours; give it a token column that holds every fencing token (64-bit,
    never NULL) and starts below the first one (tokens start at 1), and for the
    owner-bound rule an owner column::

        ALTER TABLE jobs ADD COLUMN last_token bigint NOT NULL DEFAULT 0,
                         ADD COLUMN last_owner text NOT NULL DEFAULT '';

    With ``owner_column`` and ``owner_id`` (``lease.owner_id``) the owner-bound rule:
    the update also stores the owner and passes only if ``last_token < token OR
    (last_token = token AND last_owner = owner)``, so a token the lock server granted
    twice (a failover, a transaction pooler, a restart without persistence) writes for
    one owner only. Without them the token-only rule (``last_token <= token``), which
    is weaker: two holders of one token both write; keep it for tables that cannot
    take the column. Use one rule per table.

    The row must exist: a fenced update never inserts. When the ``UPDATE`` matches no
    row, a second ``SELECT`` tells the two causes apart: a row with a higher token
    (:class:`~fencepost.errors.StaleToken`) or no row with that id (the built-in
    ``LookupError``: insert the row first, with token 0).

    Raises:
        StaleToken: zero rows updated: the row carries a higher token (``reason``
            ``"superseded"``) or, owner-bound, this token from another owner
            (``"duplicate_grant"``, after a DuplicateGrantWarning); attributes
            ``resource`` = ``"table:row_id"``, ``token``, ``highest``, ``reason``.
        LookupError: no row has that id (not a :class:`~fencepost.errors.FencepostError`:
            the caller's data is missing, the lock is not at fault).
        ConfigError: a name that is not a plain identifier, a column named like the id
            or token parameters, ``owner_column`` without ``owner_id`` or the reverse, an
            owner id that is not 32 hex digits, a token that is not an int >= 1 (0 is a fresh row's
            value, not a lease's token), a token column
            holding something other than an integer (NULL: make it ``bigint NOT NULL
            DEFAULT 0``).
        psycopg.Error: the server refused the statement.
    """
    sql, params, current = _fenced(
        table, id_column, token_column, values, row_id, token, owner_column, owner_id
    )
    cursor = conn.execute(sql, params, prepare=False)
    if cursor.rowcount == 0:
        found = conn.execute(current, {"id": row_id}, prepare=False).fetchone()
        raise _stale(table, row_id, token, owner_id, found)


async def fenced_update(
    conn: Any,
    table: str,
    *,
    id_column: str,
    token_column: str,
    row_id: Any,
    token: int,
    values: Mapping[str, Any],
    owner_column: Optional[str] = None,
    owner_id: Optional[str] = None,
) -> None:
    """:func:`fenced_update_sync` on a ``psycopg.AsyncConnection``; same arguments, table
    (a ``bigint NOT NULL DEFAULT 0`` token column on an existing row, a ``text NOT NULL
    DEFAULT ''`` owner column for the owner-bound rule) and errors
    (:class:`~fencepost.errors.StaleToken` for a higher token or a duplicate grant,
    ``LookupError`` for a missing row)."""
    sql, params, current = _fenced(
        table, id_column, token_column, values, row_id, token, owner_column, owner_id
    )
    cursor = await conn.execute(sql, params, prepare=False)
    if cursor.rowcount == 0:
        found = await (await conn.execute(current, {"id": row_id}, prepare=False)).fetchone()
        raise _stale(table, row_id, token, owner_id, found)

