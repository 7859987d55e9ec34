"""Type stubs of ``fencepost._core``, the native module (pyo3) wrapping fencepost-core.

Times are integer nanoseconds on the host's monotonic clock (``time.monotonic_ns()``).
Errors are the classes of :mod:`fencepost.errors`. Users normally need only
:func:`sql_fenced_update`, :class:`Fence` and :func:`redis_scripts` from here (all
re-exported by :mod:`fencepost`); the rest is what the drivers use.
"""

from typing import Dict, List, Literal, Optional, Sequence, Tuple, TypedDict, Union, final

from typing_extensions import disjoint_base

CORE_VERSION: str

Operation = Literal["acquire", "renew", "release", "wait"]
#: Why the lock is taken (the ``purpose`` lock option).
Purpose = Literal["efficiency", "correctness"]
#: Why a held lease ended. The machine reports every one but ``"closed"``, which hosts
#: report when their backend is closed while the lease is held.
LostReason = Literal["expired", "renew_rejected", "not_held_at_release", "closed"]
ScriptName = Literal[
    "acquire", "renew", "release", "fenced_set", "acquire_fair", "release_fair", "is_locked",
    "force_release", "inspect", "list", "renew_many"
]
EventKind = Literal["acquired", "renewed", "lost", "released", "acquire_failed"]
#: What a request carries: a Redis script call, a Redis blocking pop, a SQL statement,
#: an etcd call.
BodyKind = Literal["redis", "redis_blpop", "sql", "etcd", "redlock_part"]
#: Which connection a SQL statement must run on.
ConnectionKind = Literal["any", "dedicated", "listen"]
#: A SQL parameter or cell value as the core knows them.
SqlValue = Union[None, bool, int, str]

class _RedisSpecKind(TypedDict):
    kind: Literal["redis"]

class RedisSpec(_RedisSpecKind, total=False):
    """Settings of a Redis backend; left-out keys take the core's defaults.

    * ``key_prefix`` — prefix of every key (``"fencepost:"``);
    * ``fair`` — fair, instant hand-off (default False): contended acquirers queue on
      the server and park on a blocking pop; a release grants the lock to the first
      live waiter, whose pop returns the grant;
    * ``cluster`` — the client is a Redis Cluster client (default False): a batched
      renewal (``renew_many``) then carries the keys of one hash slot only."""

    key_prefix: str
    fair: bool
    cluster: bool

class _PostgresSpecKind(TypedDict):
    kind: Literal["postgres"]

class PostgresSpec(_PostgresSpecKind, total=False):
    """Settings of a PostgreSQL backend; left-out keys take the core's defaults.

    * ``mode`` — ``"lease"`` (lease rows, default) or ``"session"`` (session-level
      advisory lock on a dedicated connection, with a heartbeat);
    * ``lease_table`` (``"fencepost_leases"``), ``token_table``
      (``"fencepost_tokens"``) — plain SQL identifiers, optionally ``schema.table``;
    * ``namespace`` (``"fencepost"``) — namespace of advisory keys;
    * ``notify`` (``True``) — releases send ``pg_notify`` on the name's channel and
      contenders wait for it (a request on connection ``"listen"``) instead of polling."""

    mode: Literal["lease", "session"]
    lease_table: str
    token_table: str
    namespace: str
    notify: bool

class _EtcdSpecKind(TypedDict):
    kind: Literal["etcd"]

class EtcdSpec(_EtcdSpecKind, total=False):
    """Settings of an etcd v3 backend; left-out keys take the core's defaults.

    * ``key_prefix`` — prefix of every key (``"fencepost/"``); the contenders for lock
      ``name`` put ``{prefix}{name}/{16 hex digits}``.
    * ``shared_lease`` — one lease for the machine's locks with the same TTL (whole
      seconds), kept alive by one keep-alive for all (``False``)."""

    key_prefix: str
    shared_lease: bool

#: The ``backend`` argument of :class:`Machine` and :func:`check_lock_options`.
class _RedlockSpecKind(TypedDict):
    kind: Literal["redlock"]

class RedlockSpec(_RedlockSpecKind, total=False):
    """Settings of a Redlock backend; left-out keys take the core's defaults.

    * ``key_prefix`` — prefix of every key on every master (``"fencepost:"``);
    * ``masters`` — one name per master (``"host:port/db"``), in the order request
      parts name them (``Request.master``); an odd count, at least 3, no name twice
      (checked by the core: ConfigError with option ``"masters"``)."""

    key_prefix: str
    masters: List[str]

class _KubernetesSpecKind(TypedDict):
    kind: Literal["kubernetes"]

class KubernetesSpec(_KubernetesSpecKind, total=False):
    """Settings of a Kubernetes Lease backend; left-out keys take the core's defaults.

    * ``namespace`` — the namespace of every Lease (``"default"``), a DNS-1123 label
      (checked by the core: ConfigError with option ``"namespace"``)."""

    namespace: str

BackendSpec = Union[RedisSpec, PostgresSpec, EtcdSpec, RedlockSpec, KubernetesSpec]

#: Every name of :data:`LostReason`, in the core's order.
LOST_REASONS: Tuple[LostReason, ...]
#: The reason hosts give a lease lost because its backend was closed.
LOST_CLOSED: Literal["closed"]

class LockOptionsSpec(TypedDict, total=False):
    """The core's lock options, by its field names (the ``fencepost.Lock`` keywords),
    durations in integer nanoseconds; left-out keys take the core's defaults. Ranges
    are the core's to check (:meth:`Machine.acquire`, :func:`check_lock_options`).

    * ``ttl`` — lease length the server enforces (30 s);
    * ``purpose`` — ``"efficiency"`` (default) or ``"correctness"``;
    * ``accept_failover_risk`` — opt-in for a correctness lock on Redis (False);
    * ``acquire_timeout`` — how long to keep trying: None waits forever (default), 0
      tries once;
    * ``retry_count`` — retries after the first attempt: None is no limit (default), 0
      tries once;
    * ``retry_base``, ``retry_max`` — the backoff steps (10 ms, 500 ms);
    * ``renew_every`` — renew interval; None means ttl / 3 (default);
    * ``auto_renew`` — renew automatically (True);
    * ``drift_factor`` — clock-rate bound, a fraction in ``[0, 0.5)`` (0.01);
    * ``clock_margin`` — subtracted from every validity (2 ms);
    * ``token_floor`` — the lowest token a grant may carry, an int in 1 ..= 2**63 - 1,
      or None (default); refused on etcd;
    * ``min_replicas`` — replicas whose ``WAIT`` must confirm each grant and renewal
      (0: none, default; Redis only);
    * ``replica_timeout`` — how long each ``WAIT`` may block (100 ms);
    * ``metadata`` — holder metadata, the JSON text of an object of strings (at most
      4096 bytes), or left out (plain Redis, ZooKeeper and Kubernetes only)."""

    ttl: int
    purpose: str
    accept_failover_risk: bool
    acquire_timeout: Optional[int]
    retry_count: Optional[int]
    retry_base: int
    retry_max: int
    renew_every: Optional[int]
    auto_renew: bool
    drift_factor: float
    clock_margin: int
    token_floor: Optional[int]
    min_replicas: int
    replica_timeout: int
    metadata: str

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
    @property
    def wait(self) -> Optional[Tuple[int, int]]:
        """``(replicas, timeout_ms)`` of a ``WAIT`` to send right after the script on the
        same connection (a pipeline, not ``MULTI``), replying ``[script reply, WAIT
        reply]``; None when the script runs alone."""

@final
class SqlErrorReply:
    """An error reply of PostgreSQL carried as a value: pass one to
    :meth:`Machine.reply` (or :func:`read_xact_lock`) when the server refused a
    statement. ``sqlstate`` is the five-character SQLSTATE (``"40001"``, ``"57P01"``,
    ``"42P01"``…); the core decides from it whether a retry may help."""

    def __new__(cls, sqlstate: str, message: str) -> SqlErrorReply:
        """Raises: ConfigError for arguments that are not str."""
    @property
    def sqlstate(self) -> str: ...
    @property
    def message(self) -> str: ...

@final
class BlockingPop:
    """A blocking pop a parked fair waiter waits on: ``BLPOP key timeout_s`` (fractional
    seconds, Redis >= 6; never 0). It blocks the connection it runs on. Its reply (None
    at the timeout, or ``[key, value]``) goes to :meth:`Machine.reply`."""

    @property
    def key(self) -> str:
        """The list to pop from."""
    @property
    def timeout_ms(self) -> int:
        """How long to block, in milliseconds (at least 1)."""
    @property
    def timeout_s(self) -> float:
        """``timeout_ms / 1000``: the ``BLPOP`` timeout argument."""

@final
class EtcdCall:
    """One etcd v3 call: for the JSON gateway, ``POST {endpoint}{path}`` with ``body``;
    for a gRPC client, ``call`` names the RPC and ``spec_json`` gives the fields (one to
    one with etcd's protobuf messages). Answer with the JSON document the gateway
    returned, error documents included. A ``watch`` is a blocking wait (operation
    ``"wait"``): answer with the first stream line that has ``events`` (or is canceled
    or compacted), or ``"{}"`` after ``timeout_s``, then cancel the watch."""

    @property
    def call(self) -> Literal[
        "lease_grant", "lease_keep_alive", "lease_revoke", "txn", "range", "watch"
    ]:
        """Which RPC."""
    @property
    def path(self) -> str:
        """The JSON gateway path, e.g. ``"/v3/kv/txn"``."""
    @property
    def body(self) -> str:
        """The JSON gateway request body (keys base64, int64 as strings)."""
    @property
    def spec_json(self) -> str:
        """The call's fields as JSON, in the core's protobuf-shaped form."""
    @property
    def is_watch(self) -> bool:
        """Whether this is a blocking watch."""
    @property
    def timeout_s(self) -> Optional[float]:
        """A watch's timeout in seconds; None for other calls."""

@final
class ZooKeeperCall:
    """One ZooKeeper call for the host's client (kazoo): ``spec_json`` is the call as
    JSON (``{"call": ..., fields}``); answer with the JSON reply document the core
    describes for it (``fencepost_core::backends::zookeeper::ZkRequest``), carrying
    ``"session"`` (the client's session id) and ``{"error": kind, ...}`` for a failed
    call. A ``watch`` blocks at most ``timeout_s``."""

    @property
    def call(self) -> Literal[
        "create", "children", "exists", "watch", "get", "delete", "delete_owned", "multi"
    ]:
        """Which call."""
    @property
    def spec_json(self) -> str:
        """The call and its fields as JSON."""
    @property
    def is_watch(self) -> bool:
        """Whether this is a blocking watch."""
    @property
    def timeout_s(self) -> Optional[float]:
        """A watch's timeout in seconds; None for other calls."""

@final
class KubernetesCall:
    """One call to the Kubernetes API server: send ``method`` to ``{server}{path}``
    with ``body`` (None: no body) as ``content_type``, after setting each ``spec`` field
    named in ``stamp`` to the wall clock as a MicroTime (RFC 3339 UTC with six
    fractional digits); answer with the response body (a Lease, or a ``Status``
    document) whatever the HTTP status. A response without a JSON body is a transport
    failure."""

    @staticmethod
    def get(namespace: str, name: str) -> KubernetesCall:
        """The GET of Lease ``name`` in ``namespace``."""
    @staticmethod
    def list_page(namespace: str, limit: int, continue_token: Optional[str] = None) -> KubernetesCall:
        """One page of the Lease listing of ``namespace``: ``GET …/leases?limit=`` from
        the ``continue`` token of the previous page (None first). Read it with
        :func:`read_kubernetes_list`."""
    @property
    def method(self) -> Literal["GET", "POST", "PUT", "PATCH"]:
        """The HTTP method."""
    @property
    def path(self) -> str:
        """The path under the server URL."""
    @property
    def body(self) -> Optional[str]:
        """The JSON body, or None."""
    @property
    def content_type(self) -> str:
        """``"application/json"``, or ``"application/json-patch+json"`` for a PATCH."""
    @property
    def stamp(self) -> List[str]:
        """The ``spec`` fields to set to the wall clock before sending."""

def zookeeper_node_prefix(root: str, naming: str, name: str, owner_id: str) -> Tuple[str, str]:
    """``(lock path, node prefix)``: ``{root}/{name}`` and the name the node of
    ``owner_id`` starts with under ``naming`` (``"kazoo"``: ``{owner}__lock__``;
    ``"curator"``: ``_c_{UUID}-lock-``). Raises ConfigError for an unknown naming or an
    owner id that is not 32 hex digits."""

def zookeeper_inspect(root: str, naming: str, name: str) -> ZooKeeperCall:
    """The first call of "who holds lock ``name``?" on ZooKeeper: the children of the
    lock path. Read with :func:`read_zookeeper_contenders`. Raises ConfigError for an
    unknown naming."""

def read_zookeeper_contenders(
    root: str, naming: str, name: str, reply: Union[str, bytes]
) -> Optional[Tuple[ZooKeeperCall, str, int]]:
    """Reads the reply of :func:`zookeeper_inspect`: ``(get, node_path, waiters)``, the
    ``getData`` call of the holder node (the lowest contender), its path and the
    contenders behind it; None when nobody holds the lock. Raises ProtocolError for an
    error reply or another shape."""

def read_zookeeper_holder(
    root: str, naming: str, name: str, node_path: str, waiters: int, reply: Union[str, bytes]
) -> Optional[HolderSpec]:
    """Reads the reply of the holder node's ``getData``: the holder (owner id from the
    node name, token = czxid, metadata = the node's data when it is a JSON object of
    strings, ``ttl_left_ns`` None), or None when the node is gone (list again, at most
    :data:`ZK_INSPECT_TRIES` times). Raises ProtocolError for an error reply or another
    shape."""

def zookeeper_list_names(root: str, naming: str) -> ZooKeeperCall:
    """The children of the root: the lock names a listing inspects. Read with
    :func:`read_zookeeper_list`."""

def read_zookeeper_list(prefix: str, reply: Union[str, bytes]) -> List[str]:
    """Reads the reply of :func:`zookeeper_list_names`: the names starting with
    ``prefix``, sorted. Raises ProtocolError for an error reply or another shape."""

def read_kubernetes_inspect(name: str, reply: Union[str, bytes]) -> Optional[HolderSpec]:
    """Reads a Lease GET as an inspection: the holder (owner = ``holderIdentity``,
    token = ``leaseTransitions``, ``ttl_left_ns`` = ``leaseDurationSeconds`` as an upper
    bound, metadata from the ``fencepost.dev/holder-metadata`` annotation while it names
    this holder), or None when there is no Lease or no holder. Raises ProtocolError for
    a Status other than 404 or another shape."""

def read_kubernetes_list(prefix: str, reply: Union[str, bytes]) -> Tuple[Optional[str], List[HolderSpec]]:
    """Reads one page of :meth:`KubernetesCall.list_page`: ``(continue token or None on
    the last page, the held Leases of the page whose names start with ``prefix``)``.
    Raises ProtocolError for a Status or a reply that is no LeaseList."""

ZK_INSPECT_TRIES: int
KUBE_LIST_PAGE: int
KUBE_LIST_PAGES: int

def read_zookeeper_fenced(reply: Union[str, bytes]) -> bool:
    """Reads a fenced multi's reply (``{"results": [...]}``, the check first): True
    when every operation ran, False when the holder node was gone or changed. Raises
    ProtocolError for a reply of another shape."""

@final
class SqlStatement:
    """One SQL statement: ``sql`` with ``$1…$n`` placeholders (one may appear several
    times) and ``params`` in order. ``connection`` is ``"any"`` (any connection in
    autocommit; a pool is fine) or ``"dedicated"`` (the connection this lock alone
    uses: opened for its first statement, every later statement of the lock on it,
    closed after the lock's final event) or ``"listen"`` (a ``wait``: run the ``LISTEN``
    on the listening connection, then answer with no rows once a notification on
    channel ``params[0]`` arrives or ``params[1]`` milliseconds have passed)."""

    @property
    def sql(self) -> str: ...
    @property
    def params(self) -> List[SqlValue]: ...
    @property
    def connection(self) -> ConnectionKind: ...

@final
class Request:
    """A backend request the machine wants executed. Answer it with
    :meth:`Machine.reply` or :meth:`Machine.transport_error` quoting ``id``; after
    ``deadline_ns`` its outcome no longer matters (cancel it, report a transport error).

    ``kind`` says what ``body`` is. The flat script properties (``script``, ``keys``…)
    exist for Redis script calls only and raise AttributeError for other kinds.
    """

    @property
    def kind(self) -> BodyKind:
        """``"redis"`` (body: :class:`Command`), ``"redis_blpop"``
        (:class:`BlockingPop`, operation ``"wait"``), ``"sql"``
        (:class:`SqlStatement`), ``"etcd"`` (:class:`EtcdCall`) or
        ``"redlock_part"`` (:class:`Command`, run on master :attr:`master`)."""
    @property
    def master(self) -> Optional[int]:
        """Which Redlock master runs it, from 0 (an index into the backend's
        ``masters``); None for any other kind."""
    @property
    def body(self) -> Union[Command, BlockingPop, SqlStatement, EtcdCall, ZooKeeperCall, KubernetesCall]:
        """What to send.

        Raises: ConfigError for a body this build cannot run."""

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
    @property
    def wait(self) -> Optional[Tuple[int, int]]:
        """``(replicas, timeout_ms)`` of a ``WAIT`` to send right after the script on the
        same connection (a pipeline, not ``MULTI``), replying ``[script reply, WAIT
        reply]``; None when the script runs alone."""

@disjoint_base
class Event:
    """Something the host must act on for lock ``lock``: the base class of one class
    per kind, each carrying the fields of its kind only."""

    @property
    def lock(self) -> int:
        """The lock id the event is for."""
    @property
    def kind(self) -> EventKind:
        """The core's name of the event."""

@final
class Acquired(Event):
    """The lock is held."""

    @property
    def kind(self) -> Literal["acquired"]: ...
    @property
    def token(self) -> int:
        """The fencing token of the lease."""
    @property
    def valid_until_ns(self) -> int:
        """The validity deadline (monotonic ns)."""
    @property
    def previous(self) -> Literal["released", "expired", "none", "unknown"]:
        """How the previous holder ended, as the server saw it at this grant."""
    @property
    def owner_id(self) -> str:
        """The acquisition's owner id: 32 lowercase hex digits, the value in the
        server's lock key ("" if the machine had forgotten the lock when polled)."""

@final
class Renewed(Event):
    """A renewal was confirmed."""

    @property
    def kind(self) -> Literal["renewed"]: ...
    @property
    def valid_until_ns(self) -> int:
        """The new validity deadline (monotonic ns)."""

@final
class Lost(Event):
    """The lease was lost."""

    @property
    def kind(self) -> Literal["lost"]: ...
    @property
    def reason(self) -> LostReason:
        """Why: ``"expired"``, ``"renew_rejected"`` or ``"not_held_at_release"`` (the
        machine never reports ``"closed"``)."""

@final
class Released(Event):
    """The lock was released, or its acquisition cancelled."""

    @property
    def kind(self) -> Literal["released"]: ...

@final
class AcquireFailed(Event):
    """Acquiring gave up."""

    @property
    def kind(self) -> Literal["acquire_failed"]: ...
    @property
    def reason(self) -> Literal["timeout", "protocol"]:
        """``"timeout"`` (the acquire timeout passed) or ``"protocol"`` (a reply retrying
        cannot fix)."""
    @property
    def message(self) -> Optional[str]:
        """The last error seen (None when the lock was simply held by another owner),
        or the protocol error."""

Output = Union[Request, Acquired, Renewed, Lost, Released, AcquireFailed]

@final
class PreparedOptions:
    """A :class:`LockOptionsSpec` read once, for :meth:`Machine.acquire` in the dict's
    place: a lock acquired again and again skips reading the dict each time.
    Immutable; checked against a backend only when acquiring, as the dict is.

    Raises: ConfigError naming the bad option (an unknown key, a value of the wrong
    type), as :meth:`Machine.acquire` raises it."""

    def __new__(cls, options: LockOptionsSpec) -> PreparedOptions: ...
    @property
    def acquire_timeout(self) -> Optional[int]:
        """The acquire timeout in nanoseconds, or None (wait until granted)."""

@final
class Machine:
    """The sans-IO lock machine for one backend: many locks, no I/O, no clock.

    Every ``now_ns`` is ``time.monotonic_ns()``; one earlier than a value given before
    raises :class:`~fencepost.errors.ClockError`. Drain :meth:`poll` after every input.
    """

    def __new__(
        cls,
        backend: Optional[BackendSpec] = None,
        seed: Optional[int] = None,
        *,
        key_prefix: Optional[str] = None,
    ) -> Machine:
        """``backend`` is a settings dict (:class:`RedisSpec` or :class:`PostgresSpec`;
        default ``{"kind": "redis"}``); ``key_prefix=`` alone is the older spelling of
        ``{"kind": "redis", "key_prefix": …}``. ``seed`` makes owner ids and jitter
        deterministic (tests only: never in production).

        Raises: ConfigError (an unknown kind or setting, a wrong type, a table name that
        is not a plain SQL identifier, both ``backend`` and ``key_prefix``),
        FencepostError (no OS randomness)."""
    @property
    def backend_kind(self) -> Literal["redis", "postgres", "etcd"]:
        """Which server this machine phrases requests for."""
    def acquire(
        self, now_ns: int, name: str, options: Union[LockOptionsSpec, PreparedOptions]
    ) -> int:
        """Starts acquiring ``name`` with ``options`` (:class:`LockOptionsSpec`,
        nanoseconds, or a :class:`PreparedOptions` made from one); returns the new lock
        id.

        Raises: ConfigError naming the bad option (an unknown key, a wrong type, the
        core's range rules, an unsafe purpose), ClockError."""
    def release(self, now_ns: int, lock: int) -> None:
        """Releases ``lock`` or cancels its acquisition.

        Raises: ConfigError (unknown lock), ClockError."""
    def extend(self, now_ns: int, lock: int) -> None:
        """Renews ``lock`` now if it is held (a manual extend); the outcome is its next
        ``Renewed`` or ``Lost`` event. A lock not held ignores it.

        Raises: ConfigError (unknown lock), ClockError."""
    def reply(self, now_ns: int, request_id: int, value: object) -> None:
        """Feeds the server's reply to request ``request_id``.

        Redis machines: what the Redis client returned (int, bytes, str, None, bool,
        nested lists; a blocking pop's None or ``[key, value]``) or an exception
        instance whose ``str()`` is the error reply, code word first. PostgreSQL
        machines: the rows (a list of tuples or lists of None, bool, int, str; empty
        when nothing matched) or a :class:`SqlErrorReply`. Other values read as a
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
    def observe(self, options: Optional[Dict[str, object]]) -> None:
        """Starts observing with ``options`` (the core's observation options: ``events``,
        ``warnings``, ``late_renewal_fraction``, ``held_long_ttls``,
        ``hot_lock_attempts``, ``hot_lock_waiters``, ``unreachable_every`` in integer
        ns; left-out keys take the defaults), or stops with None.

        Raises: ConfigError naming the bad option."""
    def observations(self) -> List[Tuple[int, str, str, str, Dict[str, object], str]]:
        """Drains the observations: ``(lock_id, lock_name, event, level, fields,
        message)``, oldest first; ``level`` is ``"debug"``, ``"info"`` or ``"warning"``;
        durations in ``fields`` are float seconds."""
    def observations_pending(self) -> int:
        """How many observations :meth:`observations` would return now."""
    def owner(self, lock: int) -> Optional[str]:
        """Owner id of ``lock`` (32 lowercase hex digits) while the machine knows it."""
    def valid_until_ns(self, lock: int) -> Optional[int]:
        """Validity deadline of ``lock`` (monotonic ns) while it is held."""
    def lock_count(self) -> int:
        """Locks tracked (pending, held, or finished with requests in flight)."""
    def requests_in_flight(self) -> int:
        """Requests awaiting a reply or transport error."""

def check_observe_options(options: Optional[Dict[str, object]]) -> None:
    """Checks observation options as :meth:`Machine.observe` would.

    Raises: ConfigError naming the bad option."""

def check_lock_options(
    name: str, options: LockOptionsSpec, *, backend: Optional[BackendSpec] = None
) -> None:
    """Checks a name and options exactly as :meth:`Machine.acquire` would on a machine
    for ``backend`` (default Redis: it decides whether a correctness lock is safe),
    with no I/O.

    Raises: ConfigError naming the bad argument."""

@final
@final
class MemoryRedis:
    """The core's in-memory Redis: fencepost's scripts with TTLs on injected time.
    Not thread-safe by itself (``fencepost.MemoryServer`` adds the lock)."""

    def __init__(self) -> None: ...
    def execute(self, now_ns: int, request: Union[Request, Command, BlockingPop]) -> object:
        """Runs the script at ``now_ns``; returns int, str, None, a list, or (returned,
        not raised) a :class:`RedisErrorReply`. A blocking pop does not block: it
        returns ``[key, value]`` or None at once (the caller parks itself until a pop
        would yield or the timeout passes). A SQL request gets an error reply."""
    def get(self, now_ns: int, key: str) -> Optional[str]:
        """``GET key`` at ``now_ns``."""
    def pttl(self, now_ns: int, key: str) -> Optional[int]:
        """``PTTL key`` in ms: None when missing, -1 without expiry."""
    def delete(self, key: str) -> bool:
        """``DEL key``; True if it existed."""
    def flush(self) -> None:
        """Forgets every key."""

@final
@final
class Fence:
    """In-memory fence: the highest token accepted per resource, with the owner id that
    wrote with it; lower tokens are refused. The highest token passes again only from
    its recorded owner (owner-bound, ``check(r, t, owner_id)``) or from anyone
    (token-only, ``check(r, t)``: weaker, a token granted twice passes)."""

    def __init__(self) -> None: ...
    def check(self, resource: str, token: int, owner_id: Optional[str] = None) -> None:
        """Accepts a write to ``resource`` with ``token`` and remembers the token; with
        ``owner_id`` (``lease.owner_id``) records it and refuses the same token from
        another owner.

        Raises: StaleToken (``resource``, ``token``, ``highest``, ``reason``
        ``"superseded"`` or ``"duplicate_grant"``, the latter after a
        DuplicateGrantWarning), ConfigError (a token that is not an int >= 1: 0 is no
        lease's token)."""
    def owner(self, resource: str) -> Optional[str]:
        """Owner id recorded with the highest token of ``resource``, or None (nothing
        accepted, or a token-only write).

        Raises: ConfigError for a resource that is not a str."""
    def highest(self, resource: str) -> Optional[int]:
        """Highest token accepted for ``resource``, or None.

        Raises: ConfigError for a resource that is not a str."""

def sql_fenced_update(
    table: str,
    id_column: str,
    token_column: str,
    columns: List[str],
    style: Literal["pyformat", "dollar"] = "pyformat",
    owner_column: Optional[str] = None,
) -> str:
    """SQL of a fenced conditional update. Token-only (weaker: a token granted twice
    passes): ``UPDATE "table" SET "c" = …, "token_column" = <token> WHERE "id_column" =
    <id> AND "token_column" <= <token>``. Owner-bound (``owner_column``): also sets
    ``"owner_column" = <owner>``, condition ``("token_column" < <token> OR
    ("token_column" = <token> AND "owner_column" = <owner>))``. Parameters: ``%(id)s``,
    ``%(token)s``, ``%(owner)s``, ``%(<column>)s`` (pyformat) or ``$1`` id, ``$2``
    token, ``$3`` owner (owner-bound only), then the columns (dollar). Zero rows updated
    means a refusal, or that no row has that id (it never inserts;
    :func:`fencepost.postgres.fenced_update_sync` tells them apart). The columns:
    ``bigint NOT NULL DEFAULT 0`` and ``text NOT NULL DEFAULT ''``.

    Raises: ConfigError for a name that is not a plain SQL identifier, a column the
    guard sets itself, or a bad style."""

def redis_fenced_set(
    data_key: str,
    fence_key: str,
    token: int,
    value: Union[str, bytes, bytearray],
    owner_id: Optional[str] = None,
) -> Command:
    """The fenced Redis SET: writes ``value`` (str or UTF-8 bytes) to ``data_key`` unless
    ``token`` is lower than the highest token stored at ``fence_key`` or, with
    ``owner_id`` (owner-bound), equal to it and recorded with another owner.

    Raises: ConfigError naming the argument (keys not str, a value neither str nor
    UTF-8 bytes, a token not an int >= 0, an owner id not 32 hex digits)."""

def read_redis_fenced_set(resource: str, token: int, reply: object) -> None:
    """Reads the reply of :func:`redis_fenced_set`; returns when the write was accepted.

    Raises: StaleToken when refused (``reason`` ``"superseded"`` or
    ``"duplicate_grant"``), ProtocolError for a reply of another shape, ConfigError for
    arguments of the wrong type."""

def redis_is_locked(key_prefix: str, name: str) -> Command:
    """The operator query "is lock ``name`` locked?" (script ``"is_locked"``); read its
    reply with :func:`read_redis_flag`. Raises: ConfigError for arguments not str."""

def redis_force_release(key_prefix: str, name: str, fair: bool) -> Command:
    """The operator reset of lock ``name`` (script ``"force_release"``): frees it
    whoever holds it, keeps the token counter, and with ``fair`` grants the lock to the
    first live waiter as a release does. Read with :func:`read_redis_flag` (True: a
    lease was freed). Raises: ConfigError for arguments of the wrong type."""

def read_redis_flag(reply: object) -> bool:
    """Reads the reply of :func:`redis_is_locked` / :func:`redis_force_release`: 1 is
    True, 0 False. Raises: ProtocolError for an error reply or any other reply."""

class HolderSpec(TypedDict):
    """A holder as the core read it: ``ttl_left_ns`` in integer nanoseconds."""

    name: str
    owner: Optional[str]
    token: Optional[int]
    ttl_left_ns: Optional[int]
    waiters: Optional[int]
    metadata: Optional[Dict[str, str]]

#: At most this many ``redis_list_step`` steps per listing.
REDIS_LIST_STEPS: int

def redis_inspect(key_prefix: str, name: str, fair: bool) -> Command:
    """The operator query "who holds lock ``name``?" (script ``"inspect"``): owner,
    ``PTTL``, token and metadata in one atomic read, and with ``fair`` the queue length.
    Read with :func:`read_redis_inspect`. Raises: ConfigError for arguments of the wrong
    type."""

def redis_list_step(key_prefix: str, prefix: str, cursor: str, fair: bool) -> Command:
    """One step of the listing of locks whose names start with ``prefix``, from
    ``cursor`` (``"0"`` first): script ``"list"``, one bounded ``SCAN`` (never
    ``KEYS``). Read with :func:`read_redis_list`. Raises: ConfigError for arguments of
    the wrong type."""

def read_redis_inspect(name: str, reply: object) -> Optional[HolderSpec]:
    """Reads the reply of :func:`redis_inspect`: the holder, or None when nobody
    holds the lock. Raises: ProtocolError for an error reply or another shape."""

def read_redis_list(key_prefix: str, reply: object) -> Tuple[Optional[str], List[HolderSpec]]:
    """Reads the reply of :func:`redis_list_step`: ``(next cursor or None when the
    scan is complete, the holders found in this step)``. Raises: ProtocolError for an
    error reply or another shape."""

def redis_scripts() -> Dict[str, Tuple[str, str]]:
    """Every Redis script: name → (sha1, Lua source). Names: those of
    :data:`ScriptName` (``"acquire"``, ``"renew"``, ``"release"``, ``"fenced_set"``,
    ``"acquire_fair"``, ``"release_fair"``, ``"is_locked"``, ``"force_release"``,
    ``"inspect"``, ``"list"``, ``"renew_many"``)."""

def lock_key(key_prefix: str, name: str) -> str:
    """The lease key of lock ``name``: ``{key_prefix}{{name}}:lock``.

    Raises: ConfigError for arguments that are not str (or hold lone surrogates)."""

def token_key(key_prefix: str, name: str) -> str:
    """The fencing-token counter key of lock ``name``: ``{key_prefix}{{name}}:token``.

    Raises: ConfigError for arguments that are not str (or hold lone surrogates)."""

def postgres_migration(
    *, lease_table: Optional[str] = None, token_table: Optional[str] = None
) -> str:
    """The migration creating fencepost's tables (lease rows, which count every mode's
    tokens; per-name token rows, a floor under them); idempotent (``CREATE TABLE IF NOT
    EXISTS``). Never truncate these tables: tokens must survive.

    Raises: ConfigError for a table name that is not a plain SQL identifier."""

def advisory_key(namespace: str, name: str) -> int:
    """The stable signed 64-bit advisory-lock key of ``name`` in ``namespace``: the
    first 8 bytes, big-endian, of SHA-1 over ``b"fencepost\\0" + namespace + b"\\0" +
    name`` (UTF-8). ``advisory_key("fencepost", "report") == -2364901989615549545``.

    Raises: ConfigError for arguments that are not str."""

def notify_channel(namespace: str, name: str) -> str:
    """The ``LISTEN``/``NOTIFY`` channel of ``name`` in ``namespace`` (a backend with
    ``notify``): ``"fencepost_"`` and the name's advisory key as 16 hex digits
    (unsigned), 26 bytes. Releases notify it; waiters listen on it.

    Raises: ConfigError for arguments that are not str."""

def xact_lock_statement(
    name: str,
    *,
    wait: bool = False,
    lease_table: Optional[str] = None,
    token_table: Optional[str] = None,
    namespace: Optional[str] = None,
) -> SqlStatement:
    """The statement taking a transaction-level advisory lock on ``name``, to run first
    in the caller's transaction: one ``pg_try_advisory_xact_lock`` (it never waits) and,
    if granted while no lease row of the name is live, a bump of the name's token (on
    its row of ``lease_table``) in the same transaction. Read the reply with
    :func:`read_xact_lock`; the lock ends with the transaction. With ``wait=True``,
    ``pg_advisory_xact_lock`` instead: it waits on the server while another transaction
    or session holds the name's advisory lock, up to the transaction's ``lock_timeout``
    (SQLSTATE 55P03 after it); a live lease row is not waited for.

    Raises: ConfigError (a name that is not a str of 1 to 1024 bytes, a bad table
    name)."""

def read_xact_lock(reply: Union[Sequence[Sequence[SqlValue]], SqlErrorReply]) -> Optional[int]:
    """Reads the reply of :func:`xact_lock_statement`: the fencing token when granted,
    None when another transaction holds the lock.

    Raises: ProtocolError for a server error (a missing table says to run the
    migration), a server session another client holds the lock on (a
    transaction-pooling proxy), or rows of another shape."""

def lock_state_statement(
    name: str,
    *,
    force: bool,
    lease_table: Optional[str] = None,
    token_table: Optional[str] = None,
    namespace: Optional[str] = None,
) -> SqlStatement:
    """The operator statement for lock ``name``: ``force=False`` asks whether it is
    locked; ``force=True`` frees a live lease row (owner and expiry cleared, the token
    kept). Both report a session holding the name's advisory lock. Read with
    :func:`read_lock_state`. Raises: ConfigError for a bad name or table name."""

def read_lock_state(reply: Union[Sequence[Sequence[SqlValue]], SqlErrorReply]) -> Tuple[bool, Optional[int]]:
    """Reads the reply of :func:`lock_state_statement`: ``(lease, advisory_pid)``:
    whether a live lease row was found (or freed), and the server pid of a session
    holding the name's advisory lock, or None. Raises: ProtocolError for a server error
    or rows of another shape."""

PG_LIST_MAX: int

def pg_inspect_statement(name: str, *, lease_table: Optional[str] = None) -> SqlStatement:
    """The operator query "who holds lock ``name``?" on lease rows: one statement reading
    the live row's owner, token, milliseconds left (the server's clock) and metadata.
    Read with :func:`read_pg_holders`. Raises: ConfigError for a bad name or table
    name."""

def pg_list_statement(prefix: str, limit: int, *, lease_table: Optional[str] = None) -> SqlStatement:
    """The operator listing on lease rows: the live rows whose names start with
    ``prefix`` (LIKE metacharacters escaped), in name order, at most ``limit`` (clamped
    to 1 ..= :data:`PG_LIST_MAX`). Read with :func:`read_pg_holders`. Raises:
    ConfigError for a bad argument or table name."""

def read_pg_holders(reply: Union[Sequence[Sequence[SqlValue]], SqlErrorReply]) -> List[HolderSpec]:
    """Reads the reply of :func:`pg_inspect_statement` or :func:`pg_list_statement`:
    the holders, in the rows' order. Raises: ProtocolError for a server error (a
    missing table or metadata column names the migration) or rows of another shape."""

ETCD_LIST_PAGE: int
ETCD_LIST_PAGES: int

def read_etcd_inspect(name: str, reply: Union[str, bytes]) -> Optional[Tuple[HolderSpec, int]]:
    """Reads the reply of :func:`etcd_leader_range` as an inspection of lock ``name``:
    ``(holder, lease_id)`` (owner ``lease:<hex>``, waiters the other contender keys,
    metadata the key's value when it is a JSON object of strings, ``ttl_left_ns`` None
    until :func:`read_etcd_time_to_live` says), or None when nobody holds the lock.
    Raises: ProtocolError."""

def etcd_lease_time_to_live(lease_id: int) -> EtcdCall:
    """The ``LeaseTimeToLive`` call of lease ``lease_id``. Read with
    :func:`read_etcd_time_to_live`."""

def read_etcd_time_to_live(reply: Union[str, bytes]) -> Optional[int]:
    """Reads the reply of :func:`etcd_lease_time_to_live`: nanoseconds left on the lease
    (whole seconds, as etcd counts them), or None when it is gone. Raises:
    ProtocolError."""

def etcd_list_page(key_prefix: str, prefix: str, after: Optional[str] = None) -> EtcdCall:
    """One page of the listing of the locks whose names start with ``prefix``: a
    keys-only range of at most :data:`ETCD_LIST_PAGE` keys after key ``after`` (None:
    the first page). Read with :func:`read_etcd_list_page`."""

def read_etcd_list_page(key_prefix: str, prefix: str, reply: Union[str, bytes]) -> Tuple[List[str], Optional[str]]:
    """Reads the reply of :func:`etcd_list_page` for ``prefix``: the names starting with
    ``prefix`` of the locks of the page's contender keys, in key order, and the key to ask the next page after (None: done).
    Raises: ProtocolError."""

def etcd_holder_range(key_prefix: str, name: str) -> EtcdCall:
    """The operator query "who holds lock ``name``?": the key with the lowest create
    revision under the lock's prefix. Read with :func:`read_etcd_holder`."""

def read_etcd_holder(reply: Union[str, bytes]) -> Optional[Tuple[int, int]]:
    """Reads the reply of :func:`etcd_holder_range`: ``(token, lease_id)`` of the
    holder, or None when nobody holds the lock. Raises: ProtocolError."""

def etcd_leader_range(key_prefix: str, name: str) -> EtcdCall:
    """The election query "who leads ``name``?": the key with the lowest create
    revision under the election's prefix, with its value (etcd's ``Election.Leader``).
    Read with :func:`read_etcd_leader`."""

def read_etcd_leader(reply: Union[str, bytes]) -> Optional[Tuple[int, int, str]]:
    """Reads the reply of :func:`etcd_leader_range`: ``(token, lease_id, value)`` of the
    leader (``value`` ``""`` when its key has none), or None when nobody leads.
    Raises: ProtocolError."""

def etcd_proclaim(key_prefix: str, name: str, owner_id: str, token: int, value: str) -> EtcdCall:
    """A leader's publication of ``value`` in its own key, on its lease, while the key's
    create revision is still ``token`` (etcd's ``Election.Proclaim``). Read the reply
    with :func:`read_etcd_fenced_txn`.

    Raises: ConfigError naming an argument of the wrong type."""

def etcd_lease_revoke(lease_id: int) -> EtcdCall:
    """The revoke of lease ``lease_id``: the operator's reset of the lock it holds."""

def read_etcd_revoke(reply: Union[str, bytes]) -> bool:
    """Reads the reply of :func:`etcd_lease_revoke`: True when revoked, False when the
    lease was gone already. Raises: ProtocolError."""

def etcd_holder_key(key_prefix: str, name: str, owner_id: str) -> str:
    """The etcd key the acquisition ``owner_id`` puts for lock ``name``
    (``{key_prefix}{name}/{lease id, 16 hex digits}``); while it holds the lock, the
    key's create revision is its fencing token.

    Raises: ConfigError for arguments that are not str or an owner id that is not 32
    hex digits."""

def etcd_lease_id(owner_id: str) -> int:
    """The etcd lease id fencepost uses for ``owner_id`` (its first 8 bytes, big-endian,
    as a positive int64).

    Raises: ConfigError for an owner id that is not 32 hex digits."""

def etcd_fenced_txn(
    key_prefix: str,
    name: str,
    owner_id: str,
    token: int,
    puts: Sequence[Tuple[str, Union[str, bytes]]],
    deletes: Optional[Sequence[str]] = None,
) -> EtcdCall:
    """A transaction that applies ``puts`` and ``deletes`` only while the key of
    ``owner_id`` for lock ``name`` still has create revision ``token`` (etcd's
    ``IsOwner`` comparison). Read its reply with :func:`read_etcd_fenced_txn`.

    Raises: ConfigError naming an argument of the wrong type."""

def read_etcd_fenced_txn(name: str, token: int, reply: Union[str, bytes]) -> int:
    """Reads the reply of :func:`etcd_fenced_txn`: the transaction's revision when it
    was applied.

    Raises: StaleToken (``highest``: the current holder's token, 0 when nobody holds
    the lock) when refused; ProtocolError for an error reply or another shape."""
