"""The native machine with every backend kind: settings dicts, request bodies (Redis
script, Redis blocking pop, SQL) and replies (Redis values, SQL rows and errors), and the
PostgreSQL helpers (migration, advisory keys, xact statement). No server needed."""

from __future__ import annotations

import hashlib
import struct
from typing import Any, List

import pytest

from fencepost import _core
from fencepost.errors import ConfigError, ProtocolError

NS = 1_000_000  # ns per ms


def acquire(machine: _core.Machine, now_ms: int, name: str = "report", **kw: Any) -> int:
    opts: dict[str, Any] = dict(
        ttl=1_000 * NS,
        purpose="efficiency",
        accept_failover_risk=False,
        acquire_timeout=None,
        retry_base=10 * NS,
        retry_max=500 * NS,
        renew_every=None,
        auto_renew=True,
        drift_factor=0.01,
        clock_margin=2 * NS,
    )
    opts.update(kw)
    return machine.acquire(now_ms * NS, name, opts)  # type: ignore[arg-type]


def requests(outputs: List[Any]) -> List[_core.Request]:
    return [o for o in outputs if isinstance(o, _core.Request)]


def events(outputs: List[Any]) -> List[_core.Event]:
    return [o for o in outputs if isinstance(o, _core.Event)]


# ---- settings ---------------------------------------------------------------------------


def test_backend_settings_dicts_and_the_older_key_prefix_keyword() -> None:
    assert _core.Machine(seed=1).backend_kind == "redis"
    assert _core.Machine({"kind": "redis", "key_prefix": "x:", "fair": True}, seed=1).backend_kind == "redis"
    assert _core.Machine(key_prefix="x:", seed=1).backend_kind == "redis"
    pg = _core.Machine({"kind": "postgres", "mode": "session", "namespace": "app"}, seed=1)
    assert pg.backend_kind == "postgres"
    assert _core.Machine({"kind": "etcd", "key_prefix": "app/"}, seed=1).backend_kind == "etcd"
    zk = _core.Machine({"kind": "zookeeper", "root": "/locks", "naming": "curator"}, seed=1)
    assert zk.backend_kind == "zookeeper"
    bad: List[Any] = [
        ("redis:", "must be a dict"),
        ({}, "must have a 'kind'"),
        ({"kind": "consul"}, "'redis', 'postgres', 'etcd', 'redlock', 'zookeeper' or 'kubernetes'"),
        ({"kind": "etcd", "fair": True}, "unknown etcd backend setting 'fair'"),
        ({"kind": "redis", "mode": "lease"}, "unknown redis backend setting 'mode'"),
        ({"kind": "redis", "fair": 1}, r"backend\['fair'\] must be True or False"),
        ({"kind": "postgres", "mode": "advisory"}, "'lease' or 'session'"),
        ({"kind": "postgres", "lease_table": "x; DROP TABLE y"}, "invalid table name"),
        ({"kind": "postgres", "namespace": 3}, "must be a str"),
    ]
    for spec, message in bad:
        with pytest.raises(ConfigError, match=message):
            _core.Machine(spec, seed=1)
    with pytest.raises(ConfigError, match="not both"):
        _core.Machine({"kind": "redis"}, key_prefix="x:")


def test_correctness_locks_are_allowed_on_postgres_and_etcd_without_the_opt_in() -> None:
    options: _core.LockOptionsSpec = {
        "ttl": 1_000 * NS,
        "purpose": "correctness",
        "accept_failover_risk": False,
        "acquire_timeout": None,
        "retry_base": 10 * NS,
        "retry_max": 500 * NS,
        "renew_every": None,
        "auto_renew": True,
        "drift_factor": 0.01,
        "clock_margin": 2 * NS,
    }
    _core.check_lock_options("job", options, backend={"kind": "postgres"})
    _core.check_lock_options("job", options, backend={"kind": "etcd"})
    with pytest.raises(ConfigError, match="unsafe"):
        _core.check_lock_options("job", options)
    with pytest.raises(ConfigError, match="unsafe"):
        _core.check_lock_options("job", options, backend={"kind": "redis", "fair": True})


# ---- Redis bodies -----------------------------------------------------------------------


def test_redis_requests_expose_their_script_body() -> None:
    m = _core.Machine(seed=3)
    acquire(m, 0)
    (req,) = requests(m.poll()[0])
    assert req.kind == "redis" and req.operation == "acquire"
    body = req.body
    assert isinstance(body, _core.Command)
    assert (body.script, body.keys, body.args) == (req.script, req.keys, req.args)


def test_fair_redis_parks_a_contended_acquirer_on_a_blocking_pop() -> None:
    m = _core.Machine({"kind": "redis", "key_prefix": "p:", "fair": True}, seed=3)
    lock = acquire(m, 0)
    (req,) = requests(m.poll()[0])
    assert req.script == "acquire_fair"
    m.reply(1 * NS, req.id, [0, 400])  # held by another owner for 400 ms more
    (wait,) = requests(m.poll()[0])
    assert (wait.kind, wait.operation, wait.lock) == ("redis_blpop", "wait", lock)
    pop = wait.body
    assert isinstance(pop, _core.BlockingPop)
    assert pop.key == f"p:{{report}}:wake:{m.owner(lock)}"
    # the wake-up ends it; the timeout is the fallback: half to all of the holder's
    # remaining 400 ms (shorter than retry_max)
    assert 200 <= pop.timeout_ms <= 400 and pop.timeout_s == pop.timeout_ms / 1000
    with pytest.raises(AttributeError, match="redis_blpop"):
        wait.script
    m.reply(2 * NS, wait.id, [pop.key.encode(), b"1"])  # woken: try again at once
    (again,) = requests(m.poll()[0])
    assert (again.operation, again.script) == ("acquire", "acquire_fair")
    m.reply(3 * NS, again.id, [1, 9])
    assert [(e.kind, e.token) for e in events(m.poll()[0])] == [("acquired", 9)]


def test_memory_redis_pops_without_blocking() -> None:
    m = _core.Machine({"kind": "redis", "fair": True}, seed=5)
    server = _core.MemoryRedis()
    holder = _core.Machine({"kind": "redis", "fair": True}, seed=6)
    acquire(holder, 0)
    (h,) = requests(holder.poll()[0])
    holder.reply(0, h.id, server.execute(0, h))
    acquire(m, 0)
    (req,) = requests(m.poll()[0])
    m.reply(0, req.id, server.execute(0, req))
    (wait,) = requests(m.poll()[0])
    assert server.execute(1 * NS, wait) is None  # nothing to pop: None at once
    holder.release(2 * NS, 1)
    (rel,) = requests(holder.poll()[0])
    assert server.execute(2 * NS, rel) == 1  # grants the lock to the waiter, wakes it
    assert server.execute(3 * NS, wait.body) == [wait.body.key, "g:2 released"]  # the grant: token 2
    m.reply(3 * NS, wait.id, [wait.body.key, "g:2"])
    assert [(e.kind, e.token) for e in events(m.poll()[0])] == [("acquired", 2)]


# ---- SQL bodies and replies ---------------------------------------------------------------


def test_postgres_lease_mode_round_trip_with_sql_rows() -> None:
    m = _core.Machine({"kind": "postgres", "lease_table": "locks.leases"}, seed=7)
    lock = acquire(m, 0)
    (req,) = requests(m.poll()[0])
    assert (req.kind, req.operation) == ("sql", "acquire")
    stmt = req.body
    assert isinstance(stmt, _core.SqlStatement)
    assert stmt.connection == "any" and "INSERT INTO locks.leases" in stmt.sql
    # the name's advisory key: lease grants exclude advisory locks of the same name; the
    # holder metadata last (None: this lock has none)
    assert stmt.params == ["report", m.owner(lock), 1_000, _core.advisory_key("fencepost", "report"), None]
    assert stmt.sql.count("$1") >= 2  # a placeholder may repeat
    m.reply(1 * NS, req.id, [(None, 250)])  # held by another, 250 ms left
    out, _ = m.poll()
    # the waiter listens for the release's notification (notify, on by default)
    (wait,) = requests(out)
    assert events(out) == [] and (wait.operation, wait.body.connection) == ("wait", "listen")
    assert wait.body.params[0] == _core.notify_channel("fencepost", "report")
    m.reply(260 * NS, wait.id, [])  # notified, or the wait's time passed: try again
    (req,) = requests(m.poll()[0])
    m.reply(261 * NS, req.id, [[7, 1000]])
    (ev,) = events(m.poll()[0])
    assert (ev.kind, ev.token) == ("acquired", 7)
    m.timeout(261 * NS + 333_333_334)  # renew at ttl/3 after the send
    (renew,) = requests(m.poll()[0])
    assert renew.operation == "renew" and renew.body.sql.startswith("UPDATE locks.leases")
    m.reply(600 * NS, renew.id, [(7,)])
    assert [e.kind for e in events(m.poll()[0])] == ["renewed"]
    m.release(700 * NS, lock)
    (rel,) = requests(m.poll()[0])
    m.reply(701 * NS, rel.id, [])  # zero rows: not held any more
    assert [(e.kind, e.reason) for e in events(m.poll()[0])] == [("lost", "not_held_at_release")]


def test_sql_error_replies_transient_and_not() -> None:
    m = _core.Machine({"kind": "postgres"}, seed=7)
    acquire(m, 0, acquire_timeout=50 * NS)
    (req,) = requests(m.poll()[0])
    m.reply(1 * NS, req.id, _core.SqlErrorReply("40001", "could not serialize access"))
    assert requests(m.poll()[0]) == []  # transient: retried after a backoff
    m.timeout(60 * NS)
    (req,) = requests(m.poll()[0])
    m.reply(61 * NS, req.id, _core.SqlErrorReply("42P01", 'relation "fencepost_leases" does not exist'))
    evs = [e for e in events(m.poll()[0])]
    assert [(e.kind, e.reason) for e in evs] == [("acquire_failed", "protocol")]
    assert "migration" in (evs[0].message or "")
    e = _core.SqlErrorReply("57P01", "terminating connection")
    assert (e.sqlstate, e.message) == ("57P01", "terminating connection")
    assert e == _core.SqlErrorReply("57P01", "terminating connection")


@pytest.mark.parametrize(
    "garbage",
    [42, "rows", [(1.5, None)], [(b"7", None)], [(2**70, None)], [7], None],
)
def test_sql_replies_of_the_wrong_shape_are_protocol_errors(garbage: object) -> None:
    m = _core.Machine({"kind": "postgres"}, seed=7)
    acquire(m, 0)
    (req,) = requests(m.poll()[0])
    m.reply(1 * NS, req.id, garbage)
    assert [(e.kind, e.reason) for e in events(m.poll()[0])] == [("acquire_failed", "protocol")]


def test_session_mode_runs_every_statement_on_the_dedicated_connection() -> None:
    m = _core.Machine({"kind": "postgres", "mode": "session"}, seed=7)
    lock = acquire(m, 0)
    (req,) = requests(m.poll()[0])
    stmt = req.body
    assert isinstance(stmt, _core.SqlStatement) and stmt.connection == "dedicated"
    # the owner: the server session records it, so a shared session is refused
    assert stmt.params == [_core.advisory_key("fencepost", "report"), "report", m.owner(lock)]
    m.reply(1 * NS, req.id, [(3, None)])
    assert [(e.kind, e.token) for e in events(m.poll()[0])] == [("acquired", 3)]
    m.timeout(400 * NS)
    (beat,) = requests(m.poll()[0])
    assert beat.operation == "renew" and beat.body.connection == "dedicated"
    m.reply(401 * NS, beat.id, [])  # the session no longer holds it
    assert [(e.kind, e.reason) for e in events(m.poll()[0])] == [("lost", "renew_rejected")]
    assert m.owner(lock) is not None or m.lock_count() == 0


# ---- PostgreSQL helpers -----------------------------------------------------------------


def reference_key(namespace: str, name: str) -> int:
    digest = hashlib.sha1(b"fencepost\0" + namespace.encode() + b"\0" + name.encode()).digest()
    return int(struct.unpack(">q", digest[:8])[0])


def test_advisory_keys_are_pinned() -> None:
    # the core's test vectors: these values must never change
    assert _core.advisory_key("fencepost", "report") == -2364901989615549545
    assert _core.advisory_key("fencepost", "") == -4722990151070816524
    assert _core.advisory_key("app", "report") == -6065654635645092017
    assert _core.advisory_key("fencepost", "ünïcødé/🔒") == -2301606991453087764
    for ns, name in [("a", "bc"), ("ab", "c"), ("x", "y" * 2000)]:
        assert _core.advisory_key(ns, name) == reference_key(ns, name)
    assert _core.advisory_key("a", "bc") != _core.advisory_key("ab", "c")
    with pytest.raises(ConfigError, match="name must be a str"):
        _core.advisory_key("fencepost", b"report")  # type: ignore[arg-type]


def test_migration_and_xact_statement() -> None:
    sql = _core.postgres_migration(lease_table="locks.leases", token_table="tokens")
    assert "CREATE TABLE IF NOT EXISTS locks.leases" in sql and "CREATE TABLE IF NOT EXISTS tokens" in sql
    with pytest.raises(ConfigError, match="invalid table name"):
        _core.postgres_migration(token_table="t; DROP")
    stmt = _core.xact_lock_statement("report", namespace="app", token_table="tokens")
    assert stmt.params == [-6065654635645092017, "report", ""]  # no owner: nothing on the session
    assert "pg_try_advisory_xact_lock($1::bigint)" in stmt.sql and "tokens" in stmt.sql
    # the token is counted on the name's lease row (one counter for every mode)
    assert "fencepost_leases" in _core.xact_lock_statement("report").sql
    assert "INSERT INTO locks.leases" in _core.xact_lock_statement("report", lease_table="locks.leases").sql
    with pytest.raises(ProtocolError, match="transaction-pooling"):
        _core.read_xact_lock([(None, None, True)])  # the session holds it for a session lock
    with pytest.raises(ConfigError, match="1 to 1024 bytes"):
        _core.xact_lock_statement("")
    assert _core.read_xact_lock([(12, None)]) == 12
    assert _core.read_xact_lock([(None, None)]) is None
    with pytest.raises(ProtocolError, match="migration"):
        _core.read_xact_lock(_core.SqlErrorReply("42P01", 'relation "tokens" does not exist'))
    with pytest.raises(ProtocolError):
        _core.read_xact_lock([])


def test_options_are_one_dict_of_the_core_fields_and_unknown_keys_are_named() -> None:
    m = _core.Machine(seed=1)
    assert m.acquire(0, "report", {}) == 1  # every option at the core's default
    bad: List[Any] = [
        ({"tll": 5}, "unknown lock option 'tll': use ttl, purpose"),
        ({"ttl_ns": 5}, "unknown lock option 'ttl_ns'"),
        ({"ttl": "1"}, "ttl must be an int"),
        ({"acquire_timeout": 1.5}, "acquire_timeout must be an int"),
        ({1: 5}, "keys must be str"),
        ([("ttl", 5)], "options must be a dict"),
    ]
    for options, message in bad:
        with pytest.raises(ConfigError, match=message) as info:
            m.acquire(0, "report", options)
        assert info.value.kind == "invalid_argument"
    with pytest.raises(ConfigError, match="unknown lock option 'tll'"):
        _core.check_lock_options("report", {"tll": 5})  # type: ignore[typeddict-unknown-key]


def test_each_event_kind_is_its_own_class_with_its_own_fields() -> None:
    m = _core.Machine(seed=3)
    lock = acquire(m, 0)
    (req,) = requests(m.poll()[0])
    m.reply(1 * NS, req.id, [1, 9])
    (acquired,) = events(m.poll()[0])
    assert isinstance(acquired, _core.Acquired) and isinstance(acquired, _core.Event)
    assert (acquired.lock, acquired.kind, acquired.token) == (lock, "acquired", 9)
    m.timeout(2_000 * NS)  # no renewal confirmed: the lease expires
    lost = [e for e in events(m.poll()[0]) if isinstance(e, _core.Lost)]
    assert [(e.kind, e.reason) for e in lost] == [("lost", "expired")]
    assert not hasattr(lost[0], "token")
    assert repr(acquired).startswith(f"Acquired(lock={lock}, token=9, ")
    assert set(_core.LOST_REASONS) == {"expired", "renew_rejected", "not_held_at_release", "closed"}
    assert _core.LOST_CLOSED == "closed"
