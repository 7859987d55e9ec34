"""The ZooKeeper adapter: executes the lock machine's requests with kazoo.

``ZooKeeperBackend(KazooClient(hosts="127.0.0.1:2181", timeout=10.0))`` serves the
blocking API (``with lock``, ``lock.acquire_sync()``) and asyncio (``async with lock``,
``await lock.acquire()``; the event loop never blocks: it hears of kazoo's replies
through kazoo's callbacks). Requires ``kazoo`` (``pip install kazoo``) and ZooKeeper ≥ 3.5
(``create2``, multi-op transactions).

**Why ZooKeeper for correctness locks.** Every write goes through the ensemble's
atomic broadcast (Zab) before it is answered, and zxids rise across the whole ensemble,
through leader changes: the fencing token of a ZooKeeper lock (its holder node's
``czxid``) never goes backwards, so ``purpose="correctness"`` is allowed without any
opt-in.

**The recipe** (ZooKeeper's documented lock recipe, as kazoo's ``Lock`` and Curator's
``InterProcessMutex`` implement it, decided step by step by the core): every contender
creates an ephemeral sequential node under ``{root}/{name}`` whose name carries its
owner id; the lowest sequence holds; a waiter watches only its immediate predecessor;
release deletes the node. After a create whose reply was lost, the contender finds and
adopts its own node by that name. Token: the node's ``czxid``, never the sequence
(a signed 32-bit counter per parent that wraps).

**Sharing a lock with kazoo or Curator.** ``ZooKeeperBackend(client, root="/locks")``
and ``Lock(backend, "report")`` use the path ``/locks/report``, the same as kazoo's
``client.Lock("/locks/report")``: both name their nodes ``{32 hex digits}__lock__`` +
sequence, so each sees the other's nodes as contenders and they exclude each other.
``naming="curator"`` names the nodes as Curator's ``InterProcessMutex`` does
(``_c_{UUID}-lock-`` + sequence) for a lock shared with Curator instead (kazoo and
Curator do not recognise each other's nodes).

**Session = lease.** The node lives as long as the client's session, which kazoo
keeps alive with pings. A lock's ``ttl`` must not exceed the session timeout the server
negotiated (:attr:`ZooKeeperBackend.session_timeout`, which can differ from the one the
client asked for: the server clamps it to ``[minSessionTimeout, maxSessionTimeout]``):
pass ``ttl=backend.session_timeout``. The machine measures validity from the send of
the last request of the lock the server answered and renews every ``ttl / 3`` with an
``exists`` of its node. While kazoo is disconnected (``SUSPENDED``) those renewals
fail and are retried: a reconnect within the session keeps the lock, and otherwise it
is lost at its validity deadline (``send + ttl × (1 − drift) − margin``), before the
server can expire the session. A renewal that finds the session expired (kazoo's
``LOST``) or the node gone is a loss at once.

**Holder metadata, inspection, followers.** ``Lock(backend, name, metadata=...)``
writes the metadata (compact JSON) as the lock node's data, where a lock without it
writes its owner id: kazoo's ``Lock`` writes its ``identifier`` there and
``Lock.contenders()`` shows it, Curator its client's address, so the data is a
free-form label to both and they keep working on a shared path (kazoo's
``contenders()`` shows fencepost's metadata text). :meth:`ZooKeeperBackend.inspect` /
:meth:`~ZooKeeperBackend.list` read holders back (the lowest contender, its ``czxid``,
the contenders behind it, its data when it is a JSON object of strings), and an
election's followers (``Election.leader()``, ``observe()``) read the leader's identity
and value from it.

**Fenced writes**: :meth:`ZooKeeperBackend.fenced_commit` runs a multi-op transaction
that first checks the lease's own node (it exists, at data version 0), ZooKeeper's
counterpart of etcd's ``IsOwner``; :class:`fencepost.StaleToken` when it fails.

**The client** must not be started yet: the backend starts it (``client.start()``) and
learns the negotiated session timeout from its connection handshake (kazoo does not
keep it). :meth:`close` does not stop a client you passed; one made by
:meth:`from_hosts` is stopped and closed.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Generator, List, Optional, Set, Tuple, Union

#: An operator query as the core's calls: yields each call, is resumed with its reply,
#: returns the answer.
_Query = Generator[Any, object, Any]

from . import _core
from ._backend import Backend
from ._holder import Holder
from .errors import BackendError, ConfigError, StaleToken

if TYPE_CHECKING:
    from ._core import BackendSpec
    from .lock import Lease, SyncLease

__all__ = ["ZooKeeperBackend"]

_NAMINGS = ("kazoo", "curator")

#: What a call's generator is resumed with when a result it waited for with a limit
#: did not come in time.
_TIMED_OUT = object()


async def _awaited(loop: asyncio.AbstractEventLoop, result: Any, limit: Optional[float]) -> Any:
    """The value of kazoo async result ``result`` (raises its exception), awaited on
    ``loop``; ``_TIMED_OUT`` after ``limit`` seconds (None: no limit)."""
    future: "asyncio.Future[Any]" = loop.create_future()

    def settle(r: Any) -> None:
        if not future.done():
            if r.successful():
                future.set_result(r.value)
            else:
                future.set_exception(r.exception)

    def ready(r: Any) -> None:  # on kazoo's callback thread
        try:
            loop.call_soon_threadsafe(settle, r)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    result.rawlink(ready)
    try:
        if limit is None:
            return await future
        done, _ = await asyncio.wait({future}, timeout=limit)
    finally:
        result.unlink(ready)
    if not done:
        future.cancel()
        return _TIMED_OUT
    return future.result()


def _import_kazoo() -> Any:
    try:
        import kazoo.client  # type: ignore[import-untyped]
        import kazoo.exceptions  # type: ignore[import-untyped]
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigError("fencepost.zookeeper needs kazoo: pip install kazoo") from exc
    return kazoo


def _error_kind(exc: BaseException) -> Optional[str]:
    """The reply's error kind for a kazoo exception (None: not a server error)."""
    from kazoo import exceptions as e

    kinds = (
        (e.NoNodeError, "no_node"),
        (e.NodeExistsError, "node_exists"),
        (e.BadVersionError, "bad_version"),
        (e.NotEmptyError, "not_empty"),
        (e.SessionExpiredError, "session_expired"),
        (e.SessionMovedError, "session_moved"),
        (e.AuthFailedError, "auth_failed"),
        (e.OperationTimeoutError, "operation_timeout"),
        (e.ConnectionLoss, "connection_loss"),
        (e.ConnectionClosedError, "connection_closed"),
        (e.RolledBackError, "rolled_back"),
        (e.NoAuthError, "no_auth"),
        (e.NoChildrenForEphemeralsError, "no_children_for_ephemerals"),
    )
    for cls, kind in kinds:
        if isinstance(exc, cls):
            return kind
    if isinstance(exc, e.ZookeeperError):
        return type(exc).__name__
    return None


def _stat(stat: Any) -> Dict[str, int]:
    return {
        "czxid": int(stat.czxid),
        "version": int(stat.version),
        "ephemeral_owner": int(stat.ephemeralOwner),
    }


class ZooKeeperBackend(Backend):
    """Locks on a ZooKeeper ensemble through a kazoo client.

    Args:
        client: a ``kazoo.client.KazooClient`` not started yet (the backend starts it
            and waits up to ``start_timeout`` seconds for its session).
        root: parent of every lock path (``"/fencepost"``); lock ``name`` lives at
            ``{root}/{name}``.
        naming: ``"kazoo"`` (default: nodes named as kazoo's ``Lock`` names them) or
            ``"curator"`` (as Curator's ``InterProcessMutex``).
        start_timeout: seconds to wait for the first session (15 s).

    Raises:
        ConfigError: ``client`` is not a KazooClient or is started already, ``root`` is
            not an absolute path, ``naming`` is unknown, or kazoo is not installed.
        BackendError: no session within ``start_timeout``.
    """

    def __init__(
        self,
        client: Any,
        *,
        root: str = "/fencepost",
        naming: str = "kazoo",
        start_timeout: float = 15.0,
    ) -> None:
        super().__init__()
        kazoo = _import_kazoo()
        if not isinstance(client, kazoo.client.KazooClient):
            raise ConfigError(f"client must be a kazoo.client.KazooClient, got {client!r}")
        if client.connected or getattr(client, "_live", None) is not None and client._live.is_set():
            raise ConfigError(
                "pass a KazooClient that is not started yet: fencepost starts it to learn "
                "the session timeout the server negotiates"
            )
        if not isinstance(root, str) or not root.startswith("/"):
            raise ConfigError(f"root must be an absolute ZooKeeper path, got {root!r}")
        if naming not in _NAMINGS:
            raise ConfigError(f'naming must be "kazoo" or "curator", got {naming!r}')
        self._client = client
        self.root = root
        self.naming = naming
        self._negotiated_ms: Optional[int] = None
        #: The wake-ups of the watches under way (``close`` ends them).
        self._watches: Set[Any] = set()
        self._hook_connect(client)
        try:
            client.start(timeout=start_timeout)
        except Exception as exc:
            raise BackendError(f"ZooKeeper: no session within {start_timeout} s: {exc}") from exc
        if self._negotiated_ms is None:  # pragma: no cover - a kazoo without the hook
            raise ConfigError("this kazoo version does not report the negotiated session timeout")

    def _hook_connect(self, client: Any) -> None:
        """Wraps the connection handler's handshake: it returns the read timeout
        kazoo derives from the negotiated session timeout (two thirds of it)."""
        conn = client._connection
        connect = conn._connect

        def hooked(*args: Any, **kwargs: Any) -> Any:
            read_timeout, connect_timeout = connect(*args, **kwargs)
            self._negotiated_ms = int(round(read_timeout * 3 / 2))
            return read_timeout, connect_timeout

        conn._connect = hooked

    @classmethod
    def from_hosts(
        cls,
        hosts: str,
        *,
        session_timeout: float = 10.0,
        root: str = "/fencepost",
        naming: str = "kazoo",
    ) -> ZooKeeperBackend:
        """A backend on a KazooClient it makes and owns: ``hosts`` is the connect
        string (``"10.0.0.1:2181,10.0.0.2:2181"``), ``session_timeout`` the session
        timeout to ask for, in seconds (the server may negotiate another:
        :attr:`session_timeout`). :meth:`close` stops and closes the client.

        Raises:
            ConfigError, BackendError: as the constructor.
        """
        kazoo = _import_kazoo()
        client = kazoo.client.KazooClient(hosts=hosts, timeout=session_timeout)
        backend = cls(client, root=root, naming=naming)

        def stop() -> None:
            client.stop()
            client.close()

        backend._own(stop)
        return backend

    @property
    def client(self) -> Any:
        """The kazoo client this backend uses."""
        return self._client

    @property
    def session_timeout(self) -> float:
        """The session timeout the server negotiated, in seconds: the largest ``ttl``
        a lock on this backend may have."""
        return (self._negotiated_ms or 0) / 1000.0

    @property
    def session_id(self) -> int:
        """The client's current session id (0 before the first session)."""
        cid = self._client.client_id
        return int(cid[0]) if cid else 0

    def _machine_spec(self) -> BackendSpec:
        return {  # type: ignore[return-value]
            "kind": "zookeeper",
            "root": self.root,
            "naming": self.naming,
            "session_timeout_ms": self._negotiated_ms,
        }

    # -- paths --

    def lock_path(self, name: str) -> str:
        """The path of lock ``name``: ``{root}/{name}``."""
        path, _ = _core.zookeeper_node_prefix(self.root, self.naming, name, "0" * 32)
        return path

    def token_key(self, name: str) -> str:
        """ZooKeeper keeps no token counter: the token is the holder node's czxid.
        Returns :meth:`lock_path`."""
        return self.lock_path(name)

    def node_prefix(self, name: str, owner_id: str) -> str:
        """The name the node of acquisition ``owner_id`` (``lease.owner_id``) starts
        with, before the server's sequence."""
        _, prefix = _core.zookeeper_node_prefix(self.root, self.naming, name, owner_id)
        return prefix

    # -- execution --
    #
    # One generator per call (``_calls``) yields each kazoo async result it waits for;
    # the blocking and the asyncio runner resume it with the outcome. Both wait on
    # kazoo's own results, so neither needs a thread of its own: the blocking caller
    # runs its requests itself and asyncio hears of a reply through a kazoo callback.

    def _sync_call_limit_s(self) -> Optional[float]:
        """0: a blocking call never waits past its request's deadline (each kazoo
        result is awaited until then at most; a reply after it is dropped), so a
        thread blocked in ``acquire_sync`` / ``release_sync`` runs its own requests
        (see :meth:`fencepost.Backend._sync_call_limit_s`)."""
        return 0.0

    def _sync_wait_limit_s(self, request: _core.Request) -> Optional[float]:
        """A watch's own timeout: it answers by then whatever the server does, so the
        waiter blocked in ``acquire_sync`` parks on it itself (see
        :meth:`fencepost.Backend._sync_wait_limit_s`)."""
        body = request.body
        return body.timeout_s if isinstance(body, _core.ZooKeeperCall) else None

    @staticmethod
    def _spec(command: Any) -> Dict[str, Any]:
        call = command.body if isinstance(command, _core.Request) else command
        if not isinstance(call, _core.ZooKeeperCall):
            raise ConfigError(f"ZooKeeperBackend cannot run {command!r}")
        spec: Dict[str, Any] = json.loads(call.spec_json)
        return spec

    def _reply(self, doc: Optional[Dict[str, Any]], exc: Optional[Exception]) -> str:
        """The reply document of a call that returned ``doc`` or raised ``exc``;
        re-raises a transport failure (the outcome is unknown)."""
        if exc is not None:
            kind = _error_kind(exc)
            if kind is None or kind in ("connection_loss", "connection_closed"):
                raise exc
            doc = {"error": kind, "message": str(exc)}
        assert doc is not None
        doc["session"] = self.session_id
        return json.dumps(doc)

    async def _execute_async(self, command: Any) -> object:
        calls = self._calls(self._spec(command))
        loop = asyncio.get_running_loop()
        value: Any = None
        error: Optional[BaseException] = None
        try:
            while True:
                try:
                    result, limit = calls.throw(error) if error is not None else calls.send(value)
                except StopIteration as stop:
                    return self._reply(stop.value, None)
                except Exception as exc:
                    return self._reply(None, exc)
                try:
                    value, error = await _awaited(loop, result, limit), None
                except Exception as exc:
                    value, error = None, exc
        finally:
            calls.close()  # cancelled: its listener goes

    def _execute_sync(self, command: Any) -> object:
        calls = self._calls(self._spec(command))
        deadline_ns = getattr(command, "deadline_ns", None)
        value: Any = None
        error: Optional[BaseException] = None
        try:
            while True:
                try:
                    result, limit = calls.throw(error) if error is not None else calls.send(value)
                except StopIteration as stop:
                    return self._reply(stop.value, None)
                except Exception as exc:
                    return self._reply(None, exc)
                if limit is None and isinstance(deadline_ns, int):
                    wait: Optional[float] = max((deadline_ns - time.monotonic_ns()) / 1e9, 0.001)
                else:
                    wait = limit
                try:
                    value, error = result.get(timeout=wait), None
                except self._client.handler.timeout_exception:
                    if limit is not None:
                        value, error = _TIMED_OUT, None
                    else:
                        value = None
                        error = BackendError("ZooKeeper: no reply before the request deadline")
                except Exception as exc:
                    value, error = None, exc
        finally:
            calls.close()

    def _calls(self, spec: Dict[str, Any]) -> Generator[Tuple[Any, Optional[float]], Any, Dict[str, Any]]:
        """The kazoo calls of one request: yields ``(async result, limit)`` for each
        result it waits for (``limit``: seconds, after which it is resumed with
        ``_TIMED_OUT``; None: until the request's deadline, a transport failure after
        it), is resumed with the result's value or its exception, and returns the
        reply document."""
        from kazoo.exceptions import NoNodeError

        zk = self._client
        call = spec["call"]
        if call == "create":
            # makepath: the parents are made only when the create finds them missing
            created = zk.create_async(
                spec["path"],
                spec["data"].encode(),
                ephemeral=True,
                sequence=True,
                makepath=True,
                include_data=True,
            )
            # sent right behind the create, it sees the new node (a session's requests
            # run in order): both in one round trip
            listed = zk.get_children_async(spec["path"].rsplit("/", 1)[0])
            path, stat = yield created, None
            doc: Dict[str, Any] = {"path": path, "stat": _stat(stat)}
            try:
                doc["children"] = list((yield listed, None))
            except Exception:  # left out: the recipe lists the children itself
                pass
            return doc
        if call == "children":
            children = yield zk.get_children_async(spec["path"]), None
            return {"children": list(children)}
        if call == "exists":
            stat = yield zk.exists_async(spec["path"]), None
            return {"stat": _stat(stat) if stat is not None else None}
        if call == "get":
            data, stat = yield zk.get_async(spec["path"]), None
            try:
                text: Optional[str] = None if data is None else bytes(data).decode()
            except UnicodeDecodeError:  # not fencepost's: no metadata
                text = None
            return {"data": text, "stat": _stat(stat)}
        if call == "watch":
            return {"event": (yield from self._watch(spec["path"], float(spec["timeout_ms"]) / 1000.0))}
        if call == "delete":
            yield zk.delete_async(spec["path"]), None
            return {"deleted": True}
        if call == "delete_owned":
            try:
                children = yield zk.get_children_async(spec["path"]), None
            except NoNodeError:
                return {"deleted": 0}
            mine = [c for c in children if c.startswith(spec["prefix"])]
            # sent together: one round trip (a session's requests run in order)
            deletes = [zk.delete_async(f"{spec['path']}/{c}") for c in mine]
            for deleted in deletes:
                try:
                    yield deleted, None
                except NoNodeError:
                    pass
            return {"deleted": len(mine)}
        if call == "multi":
            txn = zk.transaction()
            txn.check(spec["check_path"], spec["check_version"])
            for op in spec["ops"]:
                self._add_op(txn, op)
            return {"results": self._results((yield txn.commit_async(), None))}
        raise ConfigError(f"ZooKeeperBackend cannot run the call {call!r}")

    @staticmethod
    def _add_op(txn: Any, op: Dict[str, Any]) -> None:
        kind = op["op"]
        if kind == "create":
            txn.create(op["path"], op["data"].encode())
        elif kind == "set_data":
            txn.set_data(op["path"], op["data"].encode(), op["version"])
        elif kind == "delete":
            txn.delete(op["path"], op["version"])
        else:  # pragma: no cover - the core's ops only
            raise ConfigError(f"unknown transaction op {kind!r}")

    @staticmethod
    def _results(results: List[Any]) -> List[Union[bool, str]]:
        out: List[Union[bool, str]] = []
        for r in results:
            if isinstance(r, BaseException):
                out.append(_error_kind(r) or type(r).__name__)
            else:
                out.append(True)
        return out

    def _watch(self, path: str, timeout: float) -> Generator[Tuple[Any, Optional[float]], Any, str]:
        """Waits until ``path``'s watch fires, the session changes state, or
        ``timeout`` seconds pass (the ``exists`` that sets the watch included);
        returns what woke it."""
        zk = self._client
        end = time.monotonic() + timeout
        fired = zk.handler.async_result()

        def on_node(event: Any) -> None:
            if not fired.ready():
                fired.set("deleted" if str(event.type) == "DELETED" else "changed")

        def on_state(state: Any) -> bool:
            if not fired.ready():
                fired.set("session")
            return True  # one state change is enough: remove the listener

        zk.add_listener(on_state)
        self._watches.add(fired)
        try:
            stat = yield zk.exists_async(path, watch=on_node), timeout
            if stat is _TIMED_OUT:
                return "timeout"
            if stat is None:
                return "no_node"
            what = yield fired, max(end - time.monotonic(), 0.0)
            return "timeout" if what is _TIMED_OUT else str(what)
        finally:
            self._watches.discard(fired)
            zk.remove_listener(on_state)

    def _close_drivers(self) -> Any:
        # a caller of acquire_sync parked on a watch wakes at once, to hear BackendError
        drivers = super()._close_drivers()
        for fired in list(self._watches):
            if not fired.ready():
                fired.set("session")
        return drivers

    # -- operator queries: who holds it? which locks are held? elections' leaders --
    #
    # The core phrases every call and reads every reply (``zookeeper_inspect``,
    # ``read_zookeeper_contenders``, ``read_zookeeper_holder``, ``zookeeper_list_names``,
    # ``read_zookeeper_list``): the holder is the lowest contender, as the lock recipe
    # orders them, and its metadata is its node's data.

    def _keeps_leader_metadata(self) -> bool:
        """An election keeps its leader's record as the holder node's data."""
        return True

    def _inspection(self, name: str) -> _Query:
        if not isinstance(name, str):
            raise ConfigError(f"name must be a str, got {name!r}")
        for _ in range(_core.ZK_INSPECT_TRIES):
            reply = yield _core.zookeeper_inspect(self.root, self.naming, name)
            found = _core.read_zookeeper_contenders(self.root, self.naming, name, str(reply))
            if found is None:
                return None
            get, node, waiters = found
            reply = yield get
            holder = _core.read_zookeeper_holder(self.root, self.naming, name, node, waiters, str(reply))
            if holder is not None:
                return Holder._from_core(holder)
        raise BackendError(
            f"inspect({name!r}): the holder left before its node could be read, "
            f"{_core.ZK_INSPECT_TRIES} times in a row"
        )

    def _listing(self, prefix: str, limit: int) -> _Query:
        if not isinstance(prefix, str):
            raise ConfigError(f"prefix must be a str, got {prefix!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"limit must be an int >= 1, got {limit!r}")
        reply = yield _core.zookeeper_list_names(self.root, self.naming)
        found: List[Holder] = []
        for name in _core.read_zookeeper_list(prefix, str(reply)):
            if len(found) >= limit:
                break
            holder = yield from self._inspection(name)
            if holder is not None:
                found.append(holder)
        return found

    async def _query_async(self, what: str, arg: str, query: _Query) -> Any:
        try:
            call = next(query)
            while True:
                try:
                    reply = await self._execute_async(call)
                except (ConfigError, BackendError):
                    raise
                except Exception as exc:
                    raise BackendError(f"{what}({arg!r}) failed: {exc}") from exc
                call = query.send(reply)
        except StopIteration as stop:
            return stop.value

    def _query_sync(self, what: str, arg: str, query: _Query) -> Any:
        try:
            call = next(query)
            while True:
                try:
                    reply = self._execute_sync(call)
                except (ConfigError, BackendError):
                    raise
                except Exception as exc:
                    raise BackendError(f"{what}({arg!r}) failed: {exc}") from exc
                call = query.send(reply)
        except StopIteration as stop:
            return stop.value

    async def inspect(self, name: str) -> Optional[Holder]:
        """Who holds lock ``name`` now: the lowest contender node under its path, as
        the lock recipe (and kazoo's ``Lock``) orders them, or None when there is none.
        The :class:`~fencepost.Holder` has the owner id from the node's name (for a
        kazoo ``Lock``'s node, its uuid), the token (the node's ``czxid``), ``waiters``
        (the contender nodes behind it), ``metadata`` (the node's data, where fencepost
        writes ``Lock(metadata=...)``; a kazoo identifier or Curator's address reads as
        None) and ``ttl_left`` None (the node lives as long as its session, whose
        deadline the server does not tell). Two round trips (the children, then the
        holder node's data); if the holder leaves in between, the listing is read again
        (at most ``fencepost._core.ZK_INSPECT_TRIES`` times). A snapshot for operators:
        stale on arrival, never a substitute for acquiring.

        Raises:
            BackendError: ZooKeeper could not be reached, or the lock changed hands
                during every read.
            ProtocolError: the server answered with an error (an expired session among
                them) or a reply of the wrong shape.
            ConfigError: ``name`` is not a str.
        """
        found: Optional[Holder] = await self._query_async("inspect", name, self._inspection(name))
        return found

    def inspect_sync(self, name: str) -> Optional[Holder]:
        """Blocking form of :meth:`inspect`; same arguments and errors."""
        found: Optional[Holder] = self._query_sync("inspect", name, self._inspection(name))
        return found

    async def list(self, prefix: str = "", *, limit: int = 100) -> List[Holder]:
        """The held locks whose names start with ``prefix``, at most ``limit``, sorted
        by name: one ``getChildren`` of the root (ZooKeeper answers it whole), then
        :meth:`inspect` of each matching name in order until ``limit`` held locks are
        found (two round trips each; free names cost the same). Names with a ``/``
        (nested paths) are not listed.

        Raises:
            BackendError, ProtocolError: as :meth:`inspect`.
            ConfigError: ``prefix`` not a str, ``limit`` not an int >= 1.
        """
        found: List[Holder] = await self._query_async("list", prefix, self._listing(prefix, limit))
        return found

    def list_sync(self, prefix: str = "", *, limit: int = 100) -> List[Holder]:
        """Blocking form of :meth:`list`; same arguments and errors."""
        found: List[Holder] = self._query_sync("list", prefix, self._listing(prefix, limit))
        return found

    # -- fenced writes --

    def _holder_node(self, lease: Union[Lease, SyncLease]) -> Optional[str]:
        from kazoo.exceptions import ConnectionLoss, NoNodeError, SessionExpiredError
        from kazoo.retry import KazooRetry, RetryFailedError  # type: ignore[import-untyped]

        path = self.lock_path(lease.name)
        prefix = self.node_prefix(lease.name, lease.owner_id)
        # A read is safe to retry while the client reconnects (a holder resumed after a
        # pause finds its connection dropped); an expired session is an answer, not a
        # reason to retry: its ephemeral node is gone.
        retry = KazooRetry(
            max_tries=-1, delay=0.05, max_delay=0.5, ignore_expire=False, deadline=self.session_timeout
        )
        try:
            children = retry(self._client.get_children, path)
        except (NoNodeError, SessionExpiredError):  # an ended session's node is gone
            return None
        except (ConnectionLoss, RetryFailedError) as exc:
            raise BackendError(
                f"ZooKeeper unreachable for {self.session_timeout} s while checking the "
                f"holder node of {lease.name!r}: nothing was written"
            ) from exc
        for child in children:
            if child.startswith(prefix):
                return f"{path}/{child}"
        return None

    def fenced_commit_sync(
        self, lease: Union[Lease, SyncLease], build: Callable[[Any], None]
    ) -> List[Any]:
        """Runs a multi-op transaction only while ``lease`` holds its lock: the first
        operation checks the lease's own node (exists, data version 0), then
        ``build(txn)`` adds the writes (kazoo's ``TransactionRequest``: ``create``,
        ``set_data``, ``delete``, ``check``). Returns kazoo's results of the writes.

        Raises:
            StaleToken: the lease's node is gone (the lock was lost or released, or
                its session expired): nothing was written. ``highest`` is 0 (ZooKeeper does not say who holds it now).
            BackendError: ZooKeeper stayed unreachable for :attr:`session_timeout`
                before the transaction was sent (nothing was written); the connection
                was lost while the transaction was in flight (it may or may not have
                been applied: a lost reply is ambiguous; retrying can write twice); or
                the transaction failed otherwise (a write's own error, such as an
                existing node, is in the kazoo exception raised).
        """
        node = self._holder_node(lease)
        resource = self.lock_path(lease.name)
        stale = StaleToken(
            f"fenced transaction refused: lease {lease.token} of {lease.name!r} no longer "
            f"holds the lock (its node is gone)",
            resource=resource,
            token=lease.token,
            highest=0,
        )
        if node is None:
            raise stale
        from kazoo.exceptions import ConnectionLoss, SessionExpiredError

        txn = self._client.transaction()
        txn.check(node, 0)
        build(txn)
        try:
            results = txn.commit()
        except SessionExpiredError:
            raise stale from None
        except ConnectionLoss as exc:
            raise BackendError(
                f"fenced transaction of {lease.name!r}: the connection was lost with the "
                "transaction in flight; it may or may not have been applied"
            ) from exc
        doc = json.dumps({"results": self._results(results)})
        try:
            applied = _core.read_zookeeper_fenced(doc)
        except Exception as exc:
            failed = [r for r in results[1:] if isinstance(r, BaseException)]
            if failed:
                raise failed[0]
            raise BackendError(f"fenced transaction failed: {results!r}") from exc
        if not applied:
            raise stale
        return list(results[1:])

    async def fenced_commit(self, lease: Lease, build: Callable[[Any], None]) -> List[Any]:
        """:meth:`fenced_commit_sync` on a worker thread, for asyncio."""
        return await asyncio.to_thread(self.fenced_commit_sync, lease, build)
