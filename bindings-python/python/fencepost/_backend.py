"""The base class of backends: an adapter that executes the core's requests with a
client library, plus the drivers that run lock machines for it."""

from __future__ import annotations

import asyncio
import inspect
import threading
import warnings
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Set, Tuple, Union

from . import _core
from ._driver import AsyncDriver, Reachability, ThreadDriver
from ._holder import Holder
from ._leader import Leader
from .errors import BackendError, ConfigError
from ._units import Seconds, _count, _seconds_to_ns
from .observe import ObserveCallback, Observer

if TYPE_CHECKING:
    from ._core import BackendSpec, LockOptionsSpec

__all__ = ["Backend"]

CommandLike = Union[_core.Request, _core.Command]


class Backend:
    """A lock server as fencepost sees it: executes the core's script calls and runs
    the lock machines (one per event loop for ``async with``, one for the blocking
    ``with`` API, shared by every :class:`fencepost.Lock` on this backend).

    Subclasses implement :meth:`_execute_async` and/or :meth:`_execute_sync`: run the
    command, return the server's reply as the client gives it (int, bytes, str, None,
    lists) and *return* a :class:`fencepost._core.RedisErrorReply` for an error reply;
    raise for a transport failure (the machine treats the outcome as unknown). A
    subclass's ``__init__`` calls this one: it sets up the drivers' state.

    Args:
        key_prefix: prefix of every key fencepost writes (``"fencepost:"``); the keys of
            lock ``name`` are ``{prefix}{{name}}:lock`` and ``{prefix}{{name}}:token``.

    Raises:
        ConfigError: ``key_prefix`` is not a str (or holds lone surrogates, which UTF-8
            cannot encode).

    A server that cannot be reached is reported on the ``fencepost`` logger (see
    :class:`fencepost._driver.Reachability`): a WARNING at the first failed request,
    then at most every 5 s with the count of failures, and one when a request gets a
    reply again. Acquisitions keep retrying meanwhile, until their ``acquire_timeout``,
    and held leases their renewals, until their validity ends.
    """

    #: Whether ``async with`` / ``await lock.acquire()`` work with this backend.
    supports_async: bool = True
    #: Whether ``with`` / ``lock.acquire_sync()`` work with this backend.
    supports_sync: bool = True

    def __init__(self, *, key_prefix: str = "fencepost:") -> None:
        if not isinstance(key_prefix, str):
            raise ConfigError(f"key_prefix must be a str, got {key_prefix!r}")
        _core.lock_key(key_prefix, "")  # ConfigError for a prefix UTF-8 cannot encode
        self.key_prefix = key_prefix
        self._state = threading.Lock()
        self._async_drivers: Dict[int, AsyncDriver] = {}
        #: The driver handed out last (checked against the running loop before reuse).
        self._last_async_driver: Optional[AsyncDriver] = None
        self._thread_driver: Optional[ThreadDriver] = None
        self._closed = False
        #: The leases of ``with`` / ``async with`` blocks running now, by (lock name, the
        #: task or thread in the block): an acquire of that name there would wait for
        #: itself (see ``Lock._refuse_reentry``).
        self._scoped_holds: Dict[Tuple[str, object], List[Any]] = {}
        #: Counts and reports transport failures (shared by this backend's drivers).
        self._reachability = Reachability(self._label())
        #: What this backend's lock machines observe, and who hears it.
        self._observer = Observer()
        #: Closers of clients this backend made itself (``from_url``): run by close().
        self._owned: List[Callable[[], object]] = []
        #: Closes of owned asyncio clients still running (see :meth:`aclose`).
        self._closes_pending: Set["asyncio.Future[Any]"] = set()

    def observe(
        self,
        callback: Optional[ObserveCallback] = None,
        *,
        late_renewal_fraction: float = 1 / 3,
        held_long_ttls: int = 10,
        hot_lock_attempts: int = 10,
        hot_lock_waiters: int = 10,
        unreachable_every: Seconds = 30.0,
    ) -> None:
        """Sets this backend's observation callback and the warnings' thresholds
        (see :mod:`fencepost.observe`). Every event and warning of every lock on this
        backend is then handed to ``callback`` (None: only the ``fencepost`` logger
        hears them); a later call replaces the earlier settings. Takes effect for
        acquisitions started from now on.

        Args:
            callback: called with each :class:`fencepost.observe.Observation`, on the
                thread running the lock machine; exceptions it raises are logged.
            late_renewal_fraction: ``renewal_late`` when a renewal is confirmed with
                less than this fraction of the validity left (0 ..= 1; 0: never).
            held_long_ttls: ``held_long`` once one lease has been held this many TTLs
                (0: never).
            hot_lock_attempts: ``hot_lock`` when one acquisition found the lock held
                this many times before its grant or timeout (0: never). Only a new
                holder counts, so one long hold is never hot, where the server's
                refusal names its holder: every backend, except a Redlock holder that
                is not a fencepost client.
            hot_lock_waiters: ``hot_lock`` when this many acquisitions of one name are
                pending in one lock machine (0: never).
            unreachable_every: seconds between two ``server_unreachable`` warnings
                while an acquisition without ``acquire_timeout`` cannot reach the server
                (at least 0.001).

        Raises:
            ConfigError: a callback that is not callable, or a threshold of the wrong
                type or out of range (naming it).
        """
        options = {
            "late_renewal_fraction": late_renewal_fraction,
            "held_long_ttls": _count("held_long_ttls", held_long_ttls),
            "hot_lock_attempts": _count("hot_lock_attempts", hot_lock_attempts),
            "hot_lock_waiters": _count("hot_lock_waiters", hot_lock_waiters),
            "unreachable_every": _seconds_to_ns("unreachable_every", unreachable_every),
        }
        self._observer.configure(callback, options)

    def _label(self) -> str:
        """How messages name this backend (its class name)."""
        return type(self).__name__

    def _check_lock_options(self, name: str, options: LockOptionsSpec) -> None:
        """Checks a lock's name and options as the core will acquire them on this
        backend. Raises ConfigError (the core's message, naming this backend)."""
        try:
            _core.check_lock_options(name, options, backend=self._machine_spec())
        except ConfigError as exc:
            if exc.kind != "unsafe_purpose":
                raise
            # the core names its protocol ("redis") twice; say which backend the caller
            # used, and "its" tokens after that
            _, sep, rest = str(exc).partition(" is unsafe: ")
            _, _, rest = rest.partition(" fencing tokens ")
            raise ConfigError(
                f"a correctness lock on {self._label()}{sep}its fencing tokens {rest}",
                kind=exc.kind,
                option=exc.option,
            ) from None
        cannot = self._cannot_wait() if options.get("min_replicas") else None
        if cannot is not None:
            raise ConfigError(f"min_replicas: {cannot}; leave it 0", kind="invalid_option", option="min_replicas")

    def _cannot_wait(self) -> Optional[str]:
        """Why this backend cannot confirm grants with ``WAIT`` on the connection that
        ran the script (a sentence), or None when it can."""
        return None

    def _own(self, closer: Callable[[], object]) -> None:
        """Makes :meth:`close` call ``closer`` (the close of a client this backend
        created, which nobody else owns). ``closer`` may return an awaitable."""
        self._owned.append(closer)

    # -- keys --

    def lock_key(self, name: str) -> str:
        """The lease key of lock ``name`` (holds the owner id, with the TTL)."""
        return _core.lock_key(self.key_prefix, name)

    def token_key(self, name: str) -> str:
        """The fencing-token counter key of lock ``name``."""
        return _core.token_key(self.key_prefix, name)

    # -- adapter hooks --

    async def _execute_async(self, command: CommandLike) -> object:
        """Runs ``command`` without blocking the loop; see the class docstring."""
        raise self._mode_error("async")

    def _execute_sync(self, command: CommandLike) -> object:
        """Runs ``command``, blocking; see the class docstring."""
        raise self._mode_error("sync")

    def _mode_error(self, wanted: str) -> ConfigError:
        """The error for using this backend in a mode (``"async"``/``"sync"``) it
        does not support."""
        if wanted == "async":
            return ConfigError(
                f"{type(self).__name__} does not support asyncio: use `with lock` and "
                "lock.acquire_sync()"
            )
        return ConfigError(
            f"{type(self).__name__} does not support blocking use: use `async with lock` "
            "and await lock.acquire()"
        )

    def _machine_spec(self) -> BackendSpec:
        """The settings of this backend's lock machines (``_core.Machine(spec)``)."""
        return {"kind": "redis", "key_prefix": self.key_prefix}

    def _new_machine(self) -> _core.Machine:
        return _core.Machine(self._machine_spec())

    # -- driver hooks: how a driver runs a request of one of its machines --
    #
    # ``driver`` identifies the machine the request came from (lock ids are per
    # machine). Adapters that keep per-lock state (PostgreSQL's dedicated connections)
    # override these; the defaults just run the request.

    async def _run_async(self, driver: Any, request: _core.Request) -> object:
        """Runs ``request`` of ``driver``'s machine on its event loop."""
        return await self._execute_async(request)

    def _run_sync(self, driver: Any, request: _core.Request) -> object:
        """Runs ``request`` of ``driver``'s machine, blocking (on a driver worker)."""
        return self._execute_sync(request)

    def _sync_call_limit_s(self) -> Optional[float]:
        """At most how many seconds one blocking request of this backend can take
        (``_run_sync``: the client's timeouts, retries included), or None when it can
        block indefinitely (the default). When it is known and the request's deadline
        is further away than that, a thread blocked in ``acquire_sync`` /
        ``release_sync`` runs its own lock's request itself instead of handing it to a
        worker thread: it then cannot be held past the request's deadline, which is as
        long as the machine's timers would have made it wait. Asked once per driver."""
        return None

    def _sync_wait_limit_s(self, request: _core.Request) -> Optional[float]:
        """At most how many seconds the blocking wait ``request`` (operation
        ``"wait"``: a fair waiter's ``BLPOP``) can take in ``_run_sync``, its own
        timeout included, or None when unknown (the default: waits then run on the
        driver's wait pool). When known, a thread blocked in ``acquire_sync`` parks on
        the wait itself (one thread switch fewer per hand-off), unless that could hold
        it past its acquire timeout."""
        return None

    def _request_scheduled(self, driver: Any, request: _core.Request) -> None:
        """``request`` was handed to a worker (called before it runs, in order)."""

    def _announces_requests(self) -> bool:
        """Whether this backend overrides :meth:`_request_scheduled` (the thread driver
        skips the call per request otherwise)."""
        return type(self)._request_scheduled is not Backend._request_scheduled

    def _lock_finished(self, driver: Any, lock: int) -> None:
        """The machine reported lock ``lock``'s final event (released, lost, acquire
        failed); requests it still sends for it (cleanup releases) are scheduled as
        usual."""

    # -- drivers --

    def _async_driver(self) -> AsyncDriver:
        """The driver for the running event loop (created on first use)."""
        if not self.supports_async:
            raise self._mode_error("async")
        loop = asyncio.get_running_loop()
        last = self._last_async_driver
        if last is not None and last.loop is loop and not self._closed:
            return last  # the common case: the same loop as last time, no lock taken
        with self._state:
            if self._closed:
                raise BackendError("this backend is closed; create a new one")
            for key, stale in list(self._async_drivers.items()):
                if stale.loop.is_closed():
                    del self._async_drivers[key]
            driver = self._async_drivers.get(id(loop))
            if driver is None or driver.loop is not loop:
                driver = AsyncDriver(self, loop)
                self._async_drivers[id(loop)] = driver
            self._last_async_driver = driver
            return driver

    def _sync_driver(self) -> ThreadDriver:
        """The driver of the blocking API (created on first use)."""
        if not self.supports_sync:
            raise self._mode_error("sync")
        with self._state:
            if self._closed:
                raise BackendError("this backend is closed; create a new one")
            if self._thread_driver is None:
                self._thread_driver = ThreadDriver(self)
            return self._thread_driver

    def close(self) -> None:
        """Stops this backend's drivers. Locks still held or being acquired are released
        (best effort, the requests still run), their leases are marked lost with reason
        ``"closed"`` (``lease.check()`` raises :class:`~fencepost.errors.LockLost`), and
        pending acquisitions fail with :class:`~fencepost.errors.BackendError`. The
        client passed to the backend is not closed: its owner closes it. Idempotent.

        A client the backend made itself (``from_url``, :func:`fencepost.backend_from_url`)
        is closed too; an asyncio one closes on the running loop (:meth:`aclose` waits
        for that). Called with no running loop, an asyncio client's close cannot run:
        it is dropped with a :class:`ResourceWarning` naming ``await backend.aclose()``,
        the call that closes it.
        """
        if self._close_drivers() is not None:
            self._close_owned()

    def _close_drivers(self) -> Optional[List[AsyncDriver]]:
        """Closes every driver (None if this backend was closed already); returns the
        asyncio drivers, whose in-flight requests may still run."""
        with self._state:
            if self._closed:
                return None
            self._closed = True
            drivers = list(self._async_drivers.values())
            self._async_drivers.clear()
            self._last_async_driver = None
            thread_driver, self._thread_driver = self._thread_driver, None
        if thread_driver is not None:
            thread_driver.close()
        for driver in drivers:
            if driver.loop.is_closed():
                continue
            running = _running_loop()
            if running is driver.loop or not driver.loop.is_running():
                driver.close()
            else:
                driver.loop.call_soon_threadsafe(driver.close)
        return drivers

    def _close_owned(self) -> None:
        """Closes the clients this backend made itself."""
        owned, self._owned = self._owned, []
        for closer in owned:
            pending = closer()
            if inspect.isawaitable(pending):
                # an asyncio client closes on its loop: after this call returns, there
                # (awaited by aclose()); without a running loop its sockets are left
                # to the garbage collector, which the caller should hear about
                loop = _running_loop()
                if loop is None:
                    if inspect.iscoroutine(pending):
                        pending.close()
                    warnings.warn(
                        f"{self._label()}.close() ran with no event loop running, so the "
                        "asyncio client it made could not be closed: call `await "
                        "backend.aclose()` on the client's loop instead",
                        ResourceWarning,
                        stacklevel=3,
                    )
                    continue
                future = asyncio.ensure_future(pending)
                self._closes_pending.add(future)
                future.add_done_callback(self._closes_pending.discard)

    async def aclose(self) -> None:
        """:meth:`close`, waiting on the running loop until its work is done: first the
        requests still in flight there (the releases :meth:`close` sends, renewals and
        cleanups under way), each bounded by its request deadline, then the closing of
        the asyncio clients this backend created itself
        (``RedisBackend.from_url(..., asyncio=True)``,
        ``EtcdBackend.from_url(..., asyncio=True)``). When it returns, nothing of this
        backend is left running on the loop, which may then be closed. Idempotent."""
        drivers = self._close_drivers()
        if drivers is not None:
            loop = asyncio.get_running_loop()
            for driver in drivers:
                if driver.loop is loop:
                    await driver.wait_idle()
            self._close_owned()
        if self._closes_pending:
            await asyncio.gather(*self._closes_pending, return_exceptions=True)

    # -- fenced writes --

    async def fenced_set(
        self,
        data_key: str,
        fence_key: str,
        token: int,
        value: Union[str, bytes],
        *,
        owner_id: Optional[str] = None,
    ) -> None:
        """Writes ``value`` to ``data_key`` unless ``token`` is lower than the highest
        token ``fence_key`` has seen (checked and written atomically by the core's
        ``fenced_set`` script); the fence then remembers ``token``.

        With ``owner_id`` (``lease.owner_id``) the owner-bound rule: the fence records
        the owner with its highest token and refuses that token from any other owner,
        so a token the server granted twice (failover, restart without persistence)
        writes once. Without it the token-only rule, which is weaker: two holders of one
        token both write.

        ``value`` is a ``str`` or UTF-8 ``bytes`` (the script's arguments are text:
        arbitrary binary values are refused with ConfigError).

        Raises:
            StaleToken: a newer lock holder has already written, or (``owner_id``)
                another owner wrote with this token (attributes ``resource`` =
                ``data_key``, ``token``, ``highest``, ``reason`` ``"superseded"`` or
                ``"duplicate_grant"``, the latter after a DuplicateGrantWarning).
            BackendError: the server could not be reached (the write may or may not
                have happened).
            ProtocolError: the server answered with an error or a reply of the wrong
                shape.
            ConfigError: an argument of the wrong type (keys that are not str, or one
                key for both, a value that is neither str nor UTF-8 bytes, a token that
                is not an int >= 0, an owner id that is not 32 hex digits),
                named in the message, or a backend without asyncio support. Raised
                before anything is sent.
        """
        command = _core.redis_fenced_set(data_key, fence_key, token, value, owner_id)
        try:
            reply = await self._execute_async(command)
        except ConfigError:
            raise
        except Exception as exc:
            raise BackendError(f"fenced SET of {data_key!r} failed: {exc}") from exc
        _core.read_redis_fenced_set(data_key, token, reply)

    def fenced_set_sync(
        self,
        data_key: str,
        fence_key: str,
        token: int,
        value: Union[str, bytes],
        *,
        owner_id: Optional[str] = None,
    ) -> None:
        """Blocking form of :meth:`fenced_set`; same arguments and errors."""
        command = _core.redis_fenced_set(data_key, fence_key, token, value, owner_id)
        try:
            reply = self._execute_sync(command)
        except ConfigError:
            raise
        except Exception as exc:
            raise BackendError(f"fenced SET of {data_key!r} failed: {exc}") from exc
        _core.read_redis_fenced_set(data_key, token, reply)

    # -- elections: where a leader's record is kept (fencepost.election) --

    async def _proclaim_async(self, lease: Any, record: str) -> None:
        """Writes a new leader's record (identity and value, JSON) beside its lock,
        fenced by ``lease``; backends with no place for it keep nothing."""

    def _proclaim_sync(self, lease: Any, record: str) -> None:
        """Blocking :meth:`_proclaim_async`."""

    def _no_leader(self) -> ConfigError:
        return ConfigError(
            f"{self._label()} cannot say who leads an election: it keeps only the "
            "holder's owner id with the lock (Election.leader() and observe() are "
            "available on EtcdBackend, plain RedisBackend, MemoryBackend, ZooKeeperBackend "
            "and KubernetesLeaseBackend)",
            kind="unsupported",
        )

    def _keeps_leader_metadata(self) -> bool:
        """Whether an election keeps its leader's record as the lease's metadata here
        (plain Redis and memory; ZooKeeper and Kubernetes say so in their classes)."""
        spec = self._machine_spec()
        return spec.get("kind") == "redis" and not spec.get("fair", False)

    @staticmethod
    def _leader_from_holder(holder: Optional[Holder]) -> Any:
        if holder is None:
            return None
        meta = holder.metadata or {}
        # a holder whose metadata is no election record (a plain lock) names no leader
        return Leader(identity=meta.get("identity"), value=meta.get("value"), token=holder.token or 0)

    async def _leader_async(self, name: str) -> Any:
        """The current leader of election ``name`` (a ``fencepost.Leader``) or None."""
        if not self._keeps_leader_metadata():
            raise self._no_leader()
        return self._leader_from_holder(await self.inspect(name))

    def _leader_sync(self, name: str) -> Any:
        """Blocking :meth:`_leader_async`."""
        if not self._keeps_leader_metadata():
            raise self._no_leader()
        return self._leader_from_holder(self.inspect_sync(name))

    # -- operator queries: is it locked? free it --

    def _operator_command(self, name: str, force: bool) -> _core.Command:
        if force:
            return _core.redis_force_release(self.key_prefix, name, bool(getattr(self, "fair", False)))
        return _core.redis_is_locked(self.key_prefix, name)

    def _operator_reply(self, name: str, force: bool, reply: object) -> bool:
        return _core.read_redis_flag(reply)  # ProtocolError

    def _operator_failed(self, name: str, force: bool, exc: Exception) -> BackendError:
        what = "force_release" if force else "is_locked"
        return BackendError(f"{what}({name!r}) failed: {exc}")

    async def _run_operator_async(self, name: str, force: bool) -> bool:
        command = self._operator_command(name, force)
        try:
            reply = await self._execute_async(command)
        except (ConfigError, BackendError):
            raise
        except Exception as exc:
            raise self._operator_failed(name, force, exc) from exc
        return self._operator_reply(name, force, reply)

    def _run_operator_sync(self, name: str, force: bool) -> bool:
        command = self._operator_command(name, force)
        try:
            reply = self._execute_sync(command)
        except (ConfigError, BackendError):
            raise
        except Exception as exc:
            raise self._operator_failed(name, force, exc) from exc
        return self._operator_reply(name, force, reply)

    async def is_locked(self, name: str) -> bool:
        """Whether lock ``name`` is held now, as the server answers: True while any
        holder's lease lives (whoever holds it, this process or another; on a fair
        Redis lock also while the lock is reserved for a woken waiter). One round trip;
        the answer may be stale by the time it arrives, so it is for monitoring and
        operators, never a substitute for acquiring.

        Raises:
            BackendError: the server could not be reached.
            ProtocolError: the server answered with an error or a reply of the wrong
                shape.
            ConfigError: ``name`` is not a str, or a backend without asyncio support.
        """
        return await self._run_operator_async(name, False)

    def is_locked_sync(self, name: str) -> bool:
        """Blocking form of :meth:`is_locked`; same arguments and errors."""
        return self._run_operator_sync(name, False)

    async def force_release(self, name: str) -> bool:
        """Frees lock ``name`` whoever holds it: the operator's reset of a stuck job's
        lock (python-redis-lock's ``reset()``). Returns True if a holder's lease was
        freed, False if nobody held the lock.

        The fencing-token counter is never touched: the next grant's token is higher
        than every earlier one, so a fence refuses the freed holder's writes once the
        new holder has written. On a fair Redis lock the first live waiter is granted
        the lock and woken at once, exactly as a release does. The freed holder finds
        out at its next renewal: its lease ends with
        :class:`~fencepost.errors.LockLost` (reason ``"renew_rejected"``), as when its
        key vanished; until then it still believes it holds the lock, which is what
        fencing tokens are for.

        Raises:
            BackendError: the server could not be reached (the lock may or may not have
                been freed).
            ProtocolError: the server answered with an error or a reply of the wrong
                shape.
            ConfigError: ``name`` is not a str, or a backend without asyncio support.
        """
        return await self._run_operator_async(name, True)

    def force_release_sync(self, name: str) -> bool:
        """Blocking form of :meth:`force_release`; same arguments and errors."""
        return self._run_operator_sync(name, True)


    # -- operator queries: who holds it? which locks are held? --

    def _inspectable(self, what: str) -> bool:
        """Whether this backend's locks can be inspected (fair or not); raises
        ConfigError (kind ``unsupported``) on backends that cannot be."""
        spec = self._machine_spec()
        if spec.get("kind") != "redis":
            raise ConfigError(
                f"{self._label()} does not support {what}(): holder inspection is "
                "implemented on RedisBackend, MemoryBackend, ZooKeeperBackend and "
                "KubernetesLeaseBackend",
                kind="unsupported",
            )
        return bool(spec.get("fair", False))

    def _inspect_failed(self, what: str, name: str, exc: Exception) -> BackendError:
        return BackendError(f"{what}({name!r}) failed: {exc}")

    async def inspect(self, name: str) -> Optional[Holder]:
        """Who holds lock ``name`` now, as the server answers: a :class:`Holder`
        (owner id, token, ``ttl_left`` in seconds, waiters on a fair lock, the
        holder's ``metadata``), or None when nobody holds it. One atomic read (one
        round trip), for monitoring and operators: stale on arrival, never a substitute
        for acquiring.

        Raises:
            BackendError: the server could not be reached.
            ProtocolError: the server answered with an error or a reply of the wrong
                shape.
            ConfigError: ``name`` is not a str, a backend without asyncio support, or
                (kind ``unsupported``) a backend other than Redis, memory, ZooKeeper
                and Kubernetes (which have their own ``inspect``).
        """
        fair = self._inspectable("inspect")
        command = _core.redis_inspect(self.key_prefix, name, fair)
        try:
            reply = await self._execute_async(command)
        except (ConfigError, BackendError):
            raise
        except Exception as exc:
            raise self._inspect_failed("inspect", name, exc) from exc
        found = _core.read_redis_inspect(name, reply)
        return None if found is None else Holder._from_core(found)

    def inspect_sync(self, name: str) -> Optional[Holder]:
        """Blocking form of :meth:`inspect`; same arguments and errors."""
        fair = self._inspectable("inspect")
        command = _core.redis_inspect(self.key_prefix, name, fair)
        try:
            reply = self._execute_sync(command)
        except (ConfigError, BackendError):
            raise
        except Exception as exc:
            raise self._inspect_failed("inspect", name, exc) from exc
        found = _core.read_redis_inspect(name, reply)
        return None if found is None else Holder._from_core(found)

    def _list_start(self, prefix: object, limit: object) -> bool:
        if not isinstance(prefix, str):
            raise ConfigError(f"prefix must be a str, got {prefix!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"limit must be an int >= 1, got {limit!r}")
        return self._inspectable("list")

    @staticmethod
    def _list_done(found: Dict[str, Holder], limit: int) -> List[Holder]:
        return [found[n] for n in sorted(found)][:limit]

    async def list(self, prefix: str = "", *, limit: int = 100) -> List[Holder]:
        """The held locks whose names start with ``prefix``, at most ``limit``, sorted
        by name among those found: :class:`Holder` records as :meth:`inspect` gives.
        Bounded: cursor-based ``SCAN`` steps of 500 keys (never ``KEYS``), at most
        ``fencepost._core.REDIS_LIST_STEPS`` (1000) steps, stopping once ``limit`` locks
        are found; each step is one round trip. A snapshot for operators, like
        :meth:`inspect`.

        Raises:
            BackendError, ProtocolError: as :meth:`inspect`.
            ConfigError: ``prefix`` not a str, ``limit`` not an int >= 1, or (kind
                ``unsupported``) a backend other than Redis, memory, ZooKeeper and
                Kubernetes (which have their own ``list``).
        """
        fair = self._list_start(prefix, limit)
        found: Dict[str, Holder] = {}
        cursor: Optional[str] = "0"
        for _ in range(_core.REDIS_LIST_STEPS):
            command = _core.redis_list_step(self.key_prefix, prefix, cursor or "0", fair)
            try:
                reply = await self._execute_async(command)
            except (ConfigError, BackendError):
                raise
            except Exception as exc:
                raise self._inspect_failed("list", prefix, exc) from exc
            cursor, holders = _core.read_redis_list(self.key_prefix, reply)
            found.update((h["name"], Holder._from_core(h)) for h in holders)
            if cursor is None or len(found) >= limit:
                break
        return self._list_done(found, limit)

    def list_sync(self, prefix: str = "", *, limit: int = 100) -> List[Holder]:
        """Blocking form of :meth:`list`; same arguments and errors."""
        fair = self._list_start(prefix, limit)
        found: Dict[str, Holder] = {}
        cursor: Optional[str] = "0"
        for _ in range(_core.REDIS_LIST_STEPS):
            command = _core.redis_list_step(self.key_prefix, prefix, cursor or "0", fair)
            try:
                reply = self._execute_sync(command)
            except (ConfigError, BackendError):
                raise
            except Exception as exc:
                raise self._inspect_failed("list", prefix, exc) from exc
            cursor, holders = _core.read_redis_list(self.key_prefix, reply)
            found.update((h["name"], Holder._from_core(h)) for h in holders)
            if cursor is None or len(found) >= limit:
                break
        return self._list_done(found, limit)


def _running_loop() -> Optional[asyncio.AbstractEventLoop]:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
