"""Type stubs of ``fencepost._core``, the native module (pyo3) wrapping fencepost-core.

Times are integer nanoseconds on the host's monotonic clock (``time.monotonic_ns()``).
Errors are the classes of :mod:`fencepost.errors`. Users normally need only
:func:`sql_fenced_update`, :class:`Fence` and :func:`redis_scripts` from here (all
re-exported by :mod:`fencepost`); the rest is what the drivers use.
"""

from typing import Dict, List, Literal, Optional, Tuple, Union, final

CORE_VERSION: str

Operation = Literal["acquire", "renew", "release"]
ScriptName = Literal["acquire", "renew", "release", "fenced_set"]
EventKind = Literal["acquired", "renewed", "lost", "released", "acquire_failed"]

class RedisErrorReply(Exception):
    """An error reply of a Redis server (``-ERR …``, ``-LOADING …``) carried as a value:
    adapters return (not raise) one, message starting with the error code, and pass it
    to :meth:`Machine.reply`. :meth:`MemoryRedis.execute` returns one for error replies."""

@final
class Command:
    """One Redis script call: ``EVALSHA script_sha len(keys) *keys *args``, falling back
    to ``EVAL script_source …`` on ``NOSCRIPT``."""

    @property
    def script(self) -> ScriptName:
        """Which script."""
    @property
    def script_sha(self) -> str:
        """SHA-1 of the source: 40 lowercase hex digits."""
    @property
    def script_source(self) -> str:
        """The Lua source."""
    @property
    def keys(self) -> List[str]:
        """``KEYS``, in order."""
    @property
    def args(self) -> List[str]:
        """``ARGV``, in order."""

@final
class Request:
    """A backend request the machine wants executed. Answer it with
    :meth:`Machine.reply` or :meth:`Machine.transport_error` quoting ``id``; after
    ``deadline_ns`` its outcome no longer matters (cancel it, report a transport error).
    """

    @property
    def id(self) -> int:
        """Request id, unique within its machine."""
    @property
    def lock(self) -> int:
        """Lock id the request is for."""
    @property
    def operation(self) -> Operation:
        """What the request does."""
    @property
    def deadline_ns(self) -> int:
        """Monotonic ns after which to give up on it."""
    @property
    def script(self) -> ScriptName:
        """Which script."""
    @property
    def script_sha(self) -> str:
        """SHA-1 of the source: 40 lowercase hex digits."""
    @property
    def script_source(self) -> str:
        """The Lua source."""
    @property
    def keys(self) -> List[str]:
        """``KEYS``, in order."""
    @property
    def args(self) -> List[str]:
        """``ARGV``, in order."""

@final
class Event:
    """Something the host must act on for lock ``lock``.

    ``kind``: ``"acquired"`` (``token``, ``valid_until_ns`` set), ``"renewed"``
    (``valid_until_ns``), ``"lost"`` (``reason``: ``"expired"``, ``"renew_rejected"``,
    ``"not_held_at_release"``), ``"released"``, ``"acquire_failed"`` (``reason``:
    ``"timeout"`` or ``"protocol"``; ``message``: the last error, or the protocol error).
    """

    @property
    def lock(self) -> int: ...
    @property
    def kind(self) -> EventKind: ...
    @property
    def token(self) -> Optional[int]: ...
    @property
    def valid_until_ns(self) -> Optional[int]: ...
    @property
    def reason(self) -> Optional[str]: ...
    @property
    def message(self) -> Optional[str]: ...

Output = Union[Request, Event]

@final
class Machine:
    """The sans-IO lock machine for a Redis backend: many locks, no I/O, no clock.

    Every ``now_ns`` is ``time.monotonic_ns()``; one earlier than a value given before
    raises :class:`~fencepost.errors.ClockError`. Drain :meth:`poll` after every input.
    """

    def __new__(cls, key_prefix: Optional[str] = None, seed: Optional[int] = None) -> Machine:
        """``key_prefix`` (default ``"fencepost:"``) prefixes every key; ``seed`` makes
        owner ids and jitter deterministic (tests only: never in production).

        Raises: ConfigError (bad types), FencepostError (no OS randomness)."""
    def acquire(
        self,
        now_ns: int,
        name: str,
        ttl_ns: int,
        purpose: str,
        accept_failover_risk: bool,
        acquire_timeout_ns: Optional[int],
        retry_base_ns: int,
        retry_max_ns: int,
        renew_every_ns: Optional[int],
        auto_renew: bool,
        drift_factor: float,
        clock_margin_ns: int,
    ) -> int:
        """Starts acquiring ``name``; returns the new lock id.

        Raises: ConfigError naming the bad argument (type, or the core's range rules,
        or an unsafe purpose), ClockError."""
    def release(self, now_ns: int, lock: int) -> None:
        """Releases ``lock`` or cancels its acquisition.

        Raises: ConfigError (unknown lock), ClockError."""
    def reply(self, now_ns: int, request_id: int, value: object) -> None:
        """Feeds the server's reply to request ``request_id``: what the Redis client
        returned (int, bytes, str, None, bool, nested lists) or an exception instance
        whose ``str()`` is the error reply, code word first. Other types read as a
        protocol error. Unknown ids are ignored.

        Raises: ConfigError (non-int id), ClockError."""
    def transport_error(self, now_ns: int, request_id: int, message: str) -> None:
        """Request ``request_id`` failed in transport (it may or may not have reached the
        server).

        Raises: ConfigError, ClockError."""
    def timeout(self, now_ns: int) -> None:
        """Time passed: fires due timers. Early or spurious calls are harmless.

        Raises: ClockError."""
    def poll(self) -> Tuple[List[Output], Optional[int]]:
        """Drains pending outputs: ``(outputs in order, next_timeout_ns or None)``."""
    def owner(self, lock: int) -> Optional[str]:
        """Owner id of ``lock`` (32 lowercase hex digits) while the machine knows it."""
    def valid_until_ns(self, lock: int) -> Optional[int]:
        """Validity deadline of ``lock`` (monotonic ns) while it is held."""
    def lock_count(self) -> int:
        """Locks tracked (pending, held, or finished with requests in flight)."""
    def requests_in_flight(self) -> int:
        """Requests awaiting a reply or transport error."""

def check_lock_options(
    name: str,
    ttl_ns: int,
    purpose: str,
    accept_failover_risk: bool,
    acquire_timeout_ns: Optional[int],
    retry_base_ns: int,
    retry_max_ns: int,
    renew_every_ns: Optional[int],
    auto_renew: bool,
    drift_factor: float,
    clock_margin_ns: int,
) -> None:
    """Checks a name and options exactly as :meth:`Machine.acquire` would, with no I/O.

    Raises: ConfigError naming the bad argument."""

@final
class MemoryRedis:
    """The core's in-memory Redis: fencepost's scripts with TTLs on injected time.
    Not thread-safe by itself (``fencepost.MemoryServer`` adds the lock)."""

    def __init__(self) -> None: ...
    def execute(self, now_ns: int, request: Union[Request, Command]) -> object:
        """Runs the script at ``now_ns``; returns int, str, None, a list, or (returned,
        not raised) a :class:`RedisErrorReply`."""
    def get(self, now_ns: int, key: str) -> Optional[str]:
        """``GET key`` at ``now_ns``."""
    def pttl(self, now_ns: int, key: str) -> Optional[int]:
        """``PTTL key`` in ms: None when missing, -1 without expiry."""
    def delete(self, key: str) -> bool:
        """``DEL key``; True if it existed."""
    def flush(self) -> None:
        """Forgets every key."""

@final
class Fence:
    """In-memory fence: the highest token accepted per resource; lower tokens are
    refused, equal ones pass (one lease may write many times)."""

    def __init__(self) -> None: ...
    def check(self, resource: str, token: int) -> None:
        """Accepts a write to ``resource`` with ``token`` and remembers the token.

        Raises: StaleToken (``resource``, ``token``, ``highest``), ConfigError."""
    def highest(self, resource: str) -> Optional[int]:
        """Highest token accepted for ``resource``, or None.

        Raises: ConfigError for a resource that is not a str."""

def sql_fenced_update(
    table: str,
    id_column: str,
    token_column: str,
    columns: List[str],
    style: Literal["pyformat", "dollar"] = "pyformat",
) -> str:
    """SQL of a fenced conditional update: ``UPDATE "table" SET "c" = …, "token_column" =
    <token> WHERE "id_column" = <id> AND "token_column" <= <token>``. Parameters:
    ``%(id)s``, ``%(token)s``, ``%(<column>)s`` (pyformat) or ``$1`` id, ``$2`` token,
    ``$3…`` columns (dollar). Zero rows updated means the token is stale.

    Raises: ConfigError for a name that is not a plain SQL identifier, or a bad style."""

def redis_fenced_set(
    data_key: str, fence_key: str, token: int, value: Union[str, bytes, bytearray]
) -> Command:
    """The fenced Redis SET: writes ``value`` (str or UTF-8 bytes) to ``data_key`` unless
    ``token`` is lower than the highest token stored at ``fence_key``.

    Raises: ConfigError naming the argument (keys not str, a value neither str nor
    UTF-8 bytes, a token not an int >= 0)."""

def read_redis_fenced_set(resource: str, token: int, reply: object) -> None:
    """Reads the reply of :func:`redis_fenced_set`; returns when the write was accepted.

    Raises: StaleToken when refused, ProtocolError for a reply of another shape,
    ConfigError for arguments of the wrong type."""

def redis_scripts() -> Dict[str, Tuple[str, str]]:
    """Every Redis script: name → (sha1, Lua source). Names: ``"acquire"``,
    ``"renew"``, ``"release"``, ``"fenced_set"``."""

def lock_key(key_prefix: str, name: str) -> str:
    """The lease key of lock ``name``: ``{key_prefix}{{name}}:lock``.

    Raises: ConfigError for arguments that are not str (or hold lone surrogates)."""

def token_key(key_prefix: str, name: str) -> str:
    """The fencing-token counter key of lock ``name``: ``{key_prefix}{{name}}:token``.

    Raises: ConfigError for arguments that are not str (or hold lone surrogates)."""
