"""Replays the cross-language scenario vectors ``tests/scenarios/*.json`` through the
Python binding's native API, ``fencepost._core.Machine``.

The format, the reply shorthand and the matching rules are in
``tests/scenarios/README.md``; this file mirrors the Rust runner
``core/tests/scenarios.rs``: read a vector, turn each step into one call of the
binding (``acquire``, ``release``, ``reply``, ``transport_error``, ``timeout``), render
what ``poll()`` returns in the vector's vocabulary, match it against the expectation.

What differs from the Rust runner, because the binding is not the core:

* Options become ``Machine.acquire`` arguments in nanoseconds (``round(ms × 1e6)``,
  exactly as the Rust runner rounds), over the core's defaults (the README's table).
* etcd vectors (``tests/scenarios/etcd/``): requests render the core's ``EtcdRequest``
  form from ``EtcdCall.spec_json``; replies are the gateway JSON as text (``str`` or
  UTF-8 ``bytes``, once per flavour), as ``fencepost.etcd`` passes them.
* Replies become what the redis-py adapter (``fencepost.redis``) passes to
  ``Machine.reply``: ``int``, ``None``, ``list``, bulk and simple strings as ``bytes``
  (redis-py's default) or ``str`` (``decode_responses=True``), and an error reply as a
  ``fencepost._core.RedisErrorReply`` whose ``str()`` is the full message. Every vector
  is replayed once per string flavour.
* A usage error is an exception, rendered as the Rust runner renders the core's
  ``UsageError`` from its ``kind`` and ``option`` attributes: ``{"kind": k}``, plus
  ``"option"`` for ``invalid_option``, compared exactly. ``time_went_backwards`` and
  ``time_out_of_range`` must also be a ``fencepost.errors.ClockError``, the other kinds a
  ``ConfigError`` that is not one.
* ``AcquireFailed``'s ``last_error`` / ``error`` are read from ``Event.message``; for a
  protocol error that is the core's ``ProtocolError`` display
  (``"redis protocol error: <message>"``), so the substring rule still applies.
* Two binding checks the Rust runner has no counterpart for: ``acquire`` returns the
  lock id the README promises (the n-th accepted acquire is lock n), and
  ``Machine.owner(lock)`` is the owner id in the lock's acquire and renew requests.
"""

from __future__ import annotations

import copy
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import pytest

from fencepost import _core
from fencepost.errors import ClockError, ConfigError

REPO = Path(__file__).resolve().parents[2]
SCENARIO_DIR = REPO / "tests" / "scenarios"

#: The suite must not shrink silently (the Rust runner's MIN_VECTORS).
MIN_VECTORS = 25

VECTORS = (
    sorted(SCENARIO_DIR.glob("*.json"))
    + sorted((SCENARIO_DIR / "etcd").glob("*.json"))
    + sorted((SCENARIO_DIR / "zookeeper").glob("*.json"))
    + sorted((SCENARIO_DIR / "kubernetes").glob("*.json"))
    + sorted((SCENARIO_DIR / "redlock").glob("*.json"))
)

#: Vectors stating what the safety rules demand where the machine disagrees today:
#: replayed only on request (``FENCEPOST_PENDING_VECTORS=1``), like the Rust runner's
#: ``--ignored`` test.
PENDING = sorted((SCENARIO_DIR / "pending").glob("*.json"))


class VectorError(Exception):
    """The vector itself is malformed (the Rust runner's serde / shorthand errors)."""


# ---- JSON helpers ------------------------------------------------------------------


def is_number(v: object) -> bool:
    """A JSON number (``bool`` is not one, unlike in Python)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_u64(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**64


U64_MAX = 2**64 - 1


def ms_to_ns(ms: float) -> int:
    """Milliseconds to nanoseconds exactly as the Rust runner does:
    ``(ms * 1e6).round() as u64`` (half away from zero, saturating, NaN is 0)."""
    x = float(ms) * 1e6
    if math.isnan(x) or x <= 0.0:
        return 0
    if x >= 2.0**64:
        return U64_MAX
    whole = math.floor(x)
    return whole + 1 if x - whole >= 0.5 else whole


def ns_to_ms(ns: int) -> float:
    """Nanoseconds as a millisecond JSON number (an integer when whole)."""
    if ns % 1_000_000 == 0:
        return ns // 1_000_000
    return ns / 1e6


def json_equal(e: Any, a: Any) -> bool:
    """``serde_json::Value`` equality: ``1`` and ``1.0`` differ, ``True`` is no number."""
    if isinstance(e, bool) or isinstance(a, bool):
        return type(e) is type(a) and e == a
    if isinstance(e, int) and isinstance(a, int):
        return e == a
    if isinstance(e, float) and isinstance(a, float):
        return e == a
    if isinstance(e, list) and isinstance(a, list):
        return len(e) == len(a) and all(json_equal(x, y) for x, y in zip(e, a))
    if isinstance(e, dict) and isinstance(a, dict):
        return e.keys() == a.keys() and all(json_equal(e[k], a[k]) for k in e)
    if isinstance(e, (int, float)) or isinstance(a, (int, float)):
        return False  # int vs float, or a number vs something else
    return type(e) is type(a) and e == a


# ---- vector → binding calls ----------------------------------------------------------

#: Options are core ``LockOptions`` fields; ``x_ms`` stands for the duration ``x``.
OPTION_FIELDS = (
    "ttl_ms",
    "acquire_timeout_ms",
    "retry_count",
    "retry_base_ms",
    "retry_max_ms",
    "renew_every_ms",
    "auto_renew",
    "drift_factor",
    "clock_margin_ms",
    "purpose",
    "accept_failover_risk",
    "token_floor",
    "min_replicas",
    "replica_timeout_ms",
    "metadata",
)

#: The core's ``LockOptions::default()`` (README, "Options"), as ``Machine.acquire``
#: keyword arguments.
DEFAULT_OPTIONS: Dict[str, Any] = {
    "ttl_ns": 30_000_000_000,
    "purpose": "efficiency",
    "accept_failover_risk": False,
    "acquire_timeout_ns": None,
    "retry_count": None,
    "retry_base_ns": 10_000_000,
    "retry_max_ns": 500_000_000,
    "renew_every_ns": None,
    "auto_renew": True,
    "drift_factor": 0.01,
    "clock_margin_ns": 2_000_000,
    "token_floor": None,
    "min_replicas": 0,
    "replica_timeout_ns": 100_000_000,
}

def core_options(options: Dict[str, Any]) -> Any:
    """Options of :func:`lock_options` (durations as ``*_ns``) as the dict
    ``Machine.acquire`` takes: the core's field names, durations in nanoseconds."""
    return {key[: -len("_ns")] if key.endswith("_ns") else key: value for key, value in options.items()}


#: Durations the core's serde accepts as ``null`` (``Option<Duration>``).
NULLABLE = ("acquire_timeout", "renew_every")


def lock_options(*layers: Dict[str, Any]) -> Dict[str, Any]:
    """The scenario's options, then a step's, over the core's defaults, durations as
    ``*_ns`` (:func:`core_options` renames them for ``Machine.acquire``). Raises
    VectorError where the Rust runner's serde would refuse the vector."""
    out = dict(DEFAULT_OPTIONS)
    for layer in layers:
        if not isinstance(layer, dict):
            raise VectorError(f"options must be an object, got {layer!r}")
        for key, value in layer.items():
            if key not in OPTION_FIELDS:
                raise VectorError(f"unknown option {key!r}")
            if key.endswith("_ms"):
                core = key[: -len("_ms")]
                if value is None:
                    if core not in NULLABLE:
                        raise VectorError(f"options: {key} may not be null")
                    out[core + "_ns"] = None
                elif is_number(value):
                    out[core + "_ns"] = ms_to_ns(value)
                else:
                    raise VectorError(f"{key}: not a number")
            elif key in ("auto_renew", "accept_failover_risk"):
                if not isinstance(value, bool):
                    raise VectorError(f"options: {key} must be a boolean, got {value!r}")
                out[key] = value
            elif key == "purpose":
                if value not in ("efficiency", "correctness"):
                    raise VectorError(f"options: unknown purpose {value!r}")
                out[key] = value
            elif key == "retry_count":
                if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                    raise VectorError(f"options: retry_count must be null or a count, got {value!r}")
                out[key] = value
            elif key == "min_replicas":
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise VectorError(f"options: min_replicas must be a count, got {value!r}")
                out[key] = value
            elif key == "token_floor":
                if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                    raise VectorError(f"options: token_floor must be null or a token, got {value!r}")
                out[key] = value
            elif key == "metadata":
                # an object of strings in the vector, its JSON text in the core
                if not isinstance(value, dict):
                    raise VectorError(f"options: metadata must be an object, got {value!r}")
                out[key] = json.dumps(value)
            elif key == "drift_factor":
                if not is_number(value):
                    raise VectorError(f"options: drift_factor must be a number, got {value!r}")
                out[key] = float(value)
    return out


def redis_reply(v: Any, text: Callable[[str], object]) -> object:
    """Reply shorthand → what the redis-py adapter hands ``Machine.reply``. ``text``
    turns a bulk or simple string into ``bytes`` or ``str`` (redis-py cannot tell the
    two apart, and neither can the binding)."""
    if v is None:
        return None
    if isinstance(v, bool):
        raise VectorError(f"bad reply shorthand {v!r}")
    if isinstance(v, int):
        if not -(2**63) <= v < 2**63:
            raise VectorError(f"not an i64: {v}")
        return v
    if isinstance(v, str):
        return text(v)
    if isinstance(v, list):
        return [redis_reply(item, text) for item in v]
    if isinstance(v, dict) and len(v) == 1:
        ((key, value),) = v.items()
        if key == "status" and isinstance(value, str):
            return text(value)
        if key == "error" and isinstance(value, str):
            # What fencepost.redis returns (not raises) for a ResponseError.
            return _core.RedisErrorReply(value)
    raise VectorError(f"bad reply shorthand {json.dumps(v)}")


STRING_FLAVOURS: Dict[str, Callable[[str], object]] = {
    "bytes": lambda s: s.encode("utf-8"),  # redis-py's default
    "str": lambda s: s,  # decode_responses=True
}


def etcd_reply(v: Any, text: Callable[[str], object]) -> object:
    """An etcd vector's reply → what the etcd adapter (``fencepost.etcd``) hands
    ``Machine.reply``: the gateway's JSON text, as ``str`` or UTF-8 ``bytes``; a JSON
    string in the vector is passed verbatim (garbage, or an exact text)."""
    return text(v if isinstance(v, str) else json.dumps(v))


@dataclass
class Scenario:
    name: str
    rules: List[str]
    kind: str
    key_prefix: Optional[str]
    #: The backend's settings as the vector gives them (Redlock: its masters).
    backend: Optional[Dict[str, Any]]
    seed: int
    options: Dict[str, Any]
    steps: List[Dict[str, Any]]


SCENARIO_KEYS = {"name", "description", "rules", "backend", "seed", "options", "steps"}
STEP_KEYS = {"at_ms", "note", "input", "expect"}
INPUT_KEYS: Dict[str, Tuple[Set[str], Set[str]]] = {
    "acquire": ({"name"}, {"options"}),
    "release": ({"lock"}, set()),
    "extend": ({"lock"}, set()),
    "reply": ({"request", "reply"}, set()),
    "transport_error": ({"request", "message"}, set()),
    "timeout": (set(), set()),
}


def check_keys(what: str, obj: Any, required: Set[str], optional: Set[str]) -> None:
    if not isinstance(obj, dict):
        raise VectorError(f"{what} must be an object")
    missing = required - obj.keys()
    unknown = obj.keys() - required - optional
    if missing:
        raise VectorError(f"{what}: missing field(s) {sorted(missing)}")
    if unknown:
        raise VectorError(f"{what}: unknown field(s) {sorted(unknown)}")


def load(path: Path) -> Scenario:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise VectorError(f"not a scenario: {e}") from e
    check_keys("scenario", raw, {"name", "description", "rules", "seed", "steps"}, SCENARIO_KEYS)
    if not isinstance(raw["name"], str):
        raise VectorError("name must be a string")
    if not isinstance(raw["rules"], list) or not all(isinstance(r, str) for r in raw["rules"]):
        raise VectorError("rules must be an array of strings")
    if not is_u64(raw["seed"]):
        raise VectorError(f"seed must be a u64, got {raw['seed']!r}")
    backend = raw.get("backend")
    key_prefix: Optional[str] = None
    if backend is not None:
        if not isinstance(backend, dict) or backend.get("kind") not in ("redis", "etcd", "redlock", "zookeeper", "kubernetes"):
            raise VectorError(f"unknown backend {backend!r}")
        key_prefix = backend.get("key_prefix")
        if key_prefix is not None and not isinstance(key_prefix, str):
            raise VectorError(f"backend.key_prefix must be a string, got {key_prefix!r}")
    options = raw.get("options", {})
    if not isinstance(options, dict):
        raise VectorError("options must be an object")
    if not isinstance(raw["steps"], list):
        raise VectorError("steps must be an array")
    for i, step in enumerate(raw["steps"]):
        check_keys(f"step {i}", step, {"at_ms", "input", "expect"}, STEP_KEYS)
        if not is_number(step["at_ms"]):
            raise VectorError(f"step {i}: at_ms must be a number")
        if not isinstance(step["expect"], list):
            raise VectorError(f"step {i}: expect must be an array")
        note = step.get("note")
        if note is not None and not isinstance(note, str):
            raise VectorError(f"step {i}: note must be a string")
        inp = step["input"]
        kind = inp.get("type") if isinstance(inp, dict) else None
        if kind not in INPUT_KEYS:
            raise VectorError(f"step {i}: unknown input {inp!r}")
        required, optional = INPUT_KEYS[kind]
        check_keys(f"step {i} input", inp, required | {"type"}, optional)
        for id_key in ("lock", "request"):
            if id_key in inp and not is_u64(inp[id_key]):
                raise VectorError(f"step {i}: {id_key} must be a u64")
        for str_key in ("name", "message"):
            if str_key in inp and not isinstance(inp[str_key], str):
                raise VectorError(f"step {i}: {str_key} must be a string")
    return Scenario(
        name=raw["name"],
        rules=raw["rules"],
        kind=(backend or {}).get("kind", "redis"),
        backend=backend,
        key_prefix=key_prefix,
        seed=raw["seed"],
        options=options,
        steps=raw["steps"],
    )


# ---- binding → vector vocabulary -----------------------------------------------------


@dataclass
class Raised:
    """An exception the binding raised for an input (the core's ``UsageError``, or
    anything else, which no expectation matches)."""

    error: BaseException

    def render(self) -> Dict[str, Any]:
        rendered = usage_error_of(self.error)
        if rendered is not None:
            return {"usage_error": rendered}
        return {
            "usage_error": {
                "exception": type(self.error).__name__,
                "message": str(self.error),
                "kind": getattr(self.error, "kind", None),
                "option": getattr(self.error, "option", None),
            }
        }


def render_request(r: _core.Request) -> Dict[str, Any]:
    if r.kind == "kubernetes":
        kc = r.body
        assert isinstance(kc, _core.KubernetesCall)
        # the body parsed, as the Rust runner renders it
        call = {"method": kc.method, "path": kc.path,
                "body": None if kc.body is None else json.loads(kc.body),
                "content_type": kc.content_type, "stamp": kc.stamp}
        return {"request": {"id": r.id, "lock": r.lock, "operation": r.operation,
                            "deadline_ms": ns_to_ms(r.deadline_ns), "kubernetes": call}}
    if r.kind == "zookeeper":
        zk = r.body
        assert isinstance(zk, _core.ZooKeeperCall)
        zk_spec = json.loads(zk.spec_json)
        zk_out: Dict[str, Any] = {
            "id": r.id,
            "lock": r.lock,
            "operation": r.operation,
            "deadline_ms": ns_to_ms(r.deadline_ns),
            "zookeeper": zk_spec,
        }
        if zk.is_watch:
            zk_out["wait_timeout_ms"] = zk_spec["timeout_ms"]
        return {"request": zk_out}
    if r.kind == "etcd":
        call = r.body
        assert isinstance(call, _core.EtcdCall)
        spec = json.loads(call.spec_json)
        out: Dict[str, Any] = {
            "id": r.id,
            "lock": r.lock,
            "operation": r.operation,
            "deadline_ms": ns_to_ms(r.deadline_ns),
            "etcd": spec,
        }
        if r.operation == "wait":
            out["wait_timeout_ms"] = spec["timeout_ms"]
        return {"request": out}
    if r.kind == "redlock_part":
        return {
            "request": {
                "id": r.id,
                "lock": r.lock,
                "operation": r.operation,
                "deadline_ms": ns_to_ms(r.deadline_ns),
                "master": r.master,
                "script": r.script,
                "keys": list(r.keys),
                "args": list(r.args),
            }
        }
    request: Dict[str, Any] = {
        "id": r.id,
        "lock": r.lock,
        "operation": r.operation,
        "deadline_ms": ns_to_ms(r.deadline_ns),
        "script": r.script,
        "keys": list(r.keys),
        "args": list(r.args),
    }
    if r.wait is not None:
        request["wait"] = {"replicas": r.wait[0], "timeout_ms": r.wait[1]}
    return {"request": request}


def render_event(e: _core.Event) -> Dict[str, Any]:
    out: Dict[str, Any] = {"lock": e.lock, "type": e.kind}
    if e.kind == "acquired":
        out["token"] = e.token
        out["valid_until_ms"] = None if e.valid_until_ns is None else ns_to_ms(e.valid_until_ns)
        out["previous"] = e.previous
    elif e.kind == "renewed":
        out["valid_until_ms"] = None if e.valid_until_ns is None else ns_to_ms(e.valid_until_ns)
    elif e.kind == "lost":
        out["reason"] = e.reason
    elif e.kind == "released":
        pass
    elif e.kind == "acquire_failed":
        out["reason"] = e.reason
        if e.reason == "timeout":
            out["last_error"] = e.message
        elif e.reason == "protocol":
            out["error"] = e.message
    else:  # unknown to the vocabulary: show everything so the mismatch explains itself
        out.update(
            token=e.token,
            valid_until_ns=e.valid_until_ns,
            reason=e.reason,
            message=e.message,
        )
    return {"event": out}


def render(output: object) -> Dict[str, Any]:
    if isinstance(output, _core.Request):
        return render_request(output)
    if isinstance(output, _core.Event):
        return render_event(output)
    return {"unexpected_output": repr(output)}


# ---- matching (README "Matching rules", as core/tests/scenarios.rs) ---------------------

#: Keys an expectation may leave out (then they are not checked).
#: Keys a vector may leave out (then they are not checked).
OPTIONAL_KEYS = ("last_error", "error", "previous")

#: Usage-error kinds → the exception the binding raises for them.
USAGE_ERROR_KINDS = {
    "time_went_backwards",
    "time_out_of_range",
    "invalid_option",
    "unsafe_purpose",
    "invalid_name",
    "unknown_lock",
}


def is_owner_id(s: str) -> bool:
    return len(s) == 32 and all(c in "0123456789abcdef" for c in s)


@dataclass
class Owners:
    """Owner-id placeholders: ``"$name"`` binds to the first value it meets; a name
    always means the same value and two names never mean the same value."""

    by_name: Dict[str, str] = field(default_factory=dict)

    def check(self, name: str, actual: str) -> bool:
        if not is_owner_id(actual):
            return False
        if name in self.by_name:
            return self.by_name[name] == actual
        if actual in self.by_name.values():
            return False  # that owner id already has another name
        self.by_name[name] = actual
        return True

    def disguise(self, v: Any) -> Any:
        """For messages: show bound owner ids by their names."""
        if isinstance(v, str):
            for name, hex_id in self.by_name.items():
                if hex_id == v:
                    return name
            return v
        if isinstance(v, list):
            return [self.disguise(x) for x in v]
        if isinstance(v, dict):
            return {k: self.disguise(x) for k, x in v.items()}
        return v


def usage_error_of(error: BaseException) -> Optional[Dict[str, Any]]:
    """The Rust runner's rendering of the core's ``UsageError`` (``{"kind": k}``, plus
    ``"option"`` for ``invalid_option``) from the exception the binding raised, or
    None when it is not one: not a ConfigError, a kind the core does not have, a
    ClockError for another kind (or the reverse), an option on another kind (but
    ``unsafe_purpose``, which names ``purpose`` as JavaScript does)."""
    if not isinstance(error, ConfigError):
        return None
    kind, option = error.kind, error.option
    if kind not in USAGE_ERROR_KINDS:
        return None
    if isinstance(error, ClockError) != (kind in ("time_went_backwards", "time_out_of_range")):
        return None
    if kind == "invalid_option":
        return {"kind": kind, "option": option}
    if kind == "unsafe_purpose":
        return {"kind": kind} if option == "purpose" else None
    return {"kind": kind} if option is None else None


def match_usage_error(expected: Any, raised: Raised) -> bool:
    """``{"kind": k, "option"?: o}`` against the exception the binding raised, exactly
    (JSON equality, as the Rust runner compares its rendering)."""
    actual = usage_error_of(raised.error)
    return actual is not None and json_equal(expected, actual)


def matches(key: str, expected: Any, actual: Any, owners: Owners) -> bool:
    if isinstance(actual, Raised):
        return (
            isinstance(expected, dict)
            and expected.keys() == {"usage_error"}
            and match_usage_error(expected["usage_error"], actual)
        )
    # times: at nanosecond precision, or within an inclusive range
    if key.endswith("_ms") and isinstance(expected, dict) and is_number(actual):
        a = ms_to_ns(actual)

        def bound(k: str) -> Optional[int]:
            v = expected.get(k)
            return ms_to_ns(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

        lo, hi = bound("at_least"), bound("at_most")
        return (
            all(k in ("at_least", "at_most") for k in expected)
            and (lo is None or lo <= a)
            and (hi is None or a <= hi)
        )
    if key.endswith("_ms") and is_number(expected) and is_number(actual):
        return ms_to_ns(expected) == ms_to_ns(actual)
    if isinstance(expected, str) and isinstance(actual, str):
        if expected.startswith("$"):
            return owners.check(expected, actual)
        if key in OPTIONAL_KEYS:
            return expected in actual
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(
            matches(key, e, a, owners) for e, a in zip(expected, actual)
        )
    if isinstance(expected, dict) and isinstance(actual, dict):
        return (
            all(k in actual or k in OPTIONAL_KEYS for k in expected)
            and all(k in expected or k in OPTIONAL_KEYS for k in actual)
            # serde_json's Map is sorted by key: bind placeholders in the same order
            and all(
                k in actual and matches(k, expected[k], actual[k], owners) for k in sorted(expected)
            )
        )
    return json_equal(expected, actual)


# ---- messages ------------------------------------------------------------------------

SHOW_ORDER = (
    "type",
    "request",
    "event",
    "id",
    "lock",
    "name",
    "operation",
    "deadline_ms",
    "master",
    "script",
    "keys",
    "args",
    "wait",
    "replicas",
    "timeout_ms",
    "token",
    "valid_until_ms",
    "previous",
    "reason",
    "kind",
    "option",
)


def show(v: Any) -> str:
    """Compact JSON with keys in the README's order, for messages."""
    if isinstance(v, Raised):
        v = v.render()
    if isinstance(v, dict):
        rank = {k: i for i, k in enumerate(SHOW_ORDER)}
        keys = sorted(v, key=lambda k: (rank.get(k, len(SHOW_ORDER)), k))
        return "{" + ",".join(f"{json.dumps(k)}:{show(v[k])}" for k in keys) + "}"
    if isinstance(v, list):
        return "[" + ",".join(show(x) for x in v) + "]"
    return json.dumps(v)


def mismatch(
    title: str,
    index: int,
    step: Dict[str, Any],
    expected: List[Any],
    actual: List[Any],
    owners: Owners,
) -> str:
    out = [f"{title}\n  step {index} at {step['at_ms']} ms, input {show(step['input'])}"]
    trial = copy.deepcopy(owners)

    def shown(v: Any) -> str:
        if v is None:
            return "(nothing)"
        return show(owners.disguise(v.render() if isinstance(v, Raised) else v))

    for i in range(max(len(expected), len(actual))):
        e = expected[i] if i < len(expected) else None
        a = actual[i] if i < len(actual) else None
        same = e is not None and a is not None and matches("", e, a, trial)
        if same:
            out.append(f"      [{i}] {shown(e)}")
        else:
            out.append(f"  >>> [{i}] expected {shown(e)}")
            out.append(f"  >>> [{i}] actual   {shown(a)}")
    out.append(f"  owner ids so far: {sorted(owners.by_name.items())}")
    return "\n".join(out)


# ---- replay --------------------------------------------------------------------------


def apply_input(
    machine: _core.Machine,
    now: int,
    inp: Dict[str, Any],
    scenario_options: Dict[str, Any],
    text: Callable[[str], object],
    backend: str = "redis",
) -> Optional[int]:
    """One step's input as one binding call; returns the lock id of an acquire."""
    kind = inp["type"]
    if kind == "acquire":
        options = lock_options(scenario_options, inp.get("options", {}))
        return int(machine.acquire(now, inp["name"], core_options(options)))
    if kind == "release":
        machine.release(now, inp["lock"])
    elif kind == "extend":
        machine.extend(now, inp["lock"])
    elif kind == "reply":
        # ZooKeeper replies are the adapter's JSON documents, passed as etcd's are
        json_reply = backend in ("etcd", "zookeeper", "kubernetes")
        reply = etcd_reply(inp["reply"], text) if json_reply else redis_reply(inp["reply"], text)
        machine.reply(now, inp["request"], reply)
    elif kind == "transport_error":
        machine.transport_error(now, inp["request"], inp["message"])
    elif kind == "timeout":
        machine.timeout(now)
    return None


def replay(path: Path, flavour: str) -> int:
    """Replays one vector; fails the test with a readable account of the first failing
    step. Returns the number of steps."""
    text = STRING_FLAVOURS[flavour]
    file = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    try:
        scenario = load(path)
    except VectorError as e:
        pytest.fail(f"{file}: {e}", pytrace=False)
    if scenario.name != path.stem:
        pytest.fail(f"{file}: name {scenario.name!r} differs from the file name", pytrace=False)
    if not scenario.rules:
        pytest.fail(f'{file}: say which rules it covers in "rules"', pytrace=False)

    title = f"{file} ({scenario.name}), replies as {flavour}"
    if scenario.kind == "zookeeper":
        machine = _core.Machine({"kind": "zookeeper"}, seed=scenario.seed)
    elif scenario.kind == "kubernetes":
        machine = _core.Machine(scenario.backend, seed=scenario.seed)
    elif scenario.kind == "etcd":
        spec: Any = {"kind": "etcd"}
        if scenario.key_prefix is not None:
            spec["key_prefix"] = scenario.key_prefix
        if scenario.backend and "shared_lease" in scenario.backend:
            spec["shared_lease"] = scenario.backend["shared_lease"]
        machine = _core.Machine(spec, seed=scenario.seed)
    elif scenario.kind == "redlock":
        machine = _core.Machine(scenario.backend, seed=scenario.seed)
    elif scenario.backend is not None:
        machine = _core.Machine(scenario.backend, seed=scenario.seed)
    else:
        machine = _core.Machine(key_prefix=scenario.key_prefix, seed=scenario.seed)
    owners = Owners()
    accepted = 0
    for index, step in enumerate(scenario.steps):
        now = ms_to_ns(step["at_ms"])
        inp = step["input"]
        actual: List[Any] = []
        binding_problems: List[str] = []
        try:
            lock = apply_input(machine, now, inp, scenario.options, text, scenario.kind)
        except VectorError as e:
            pytest.fail(f"{file}: step {index}: {e}", pytrace=False)
        except Exception as e:  # rendered, then matched against a usage_error
            actual.append(Raised(e))
        else:
            if lock is not None:
                accepted += 1
                if lock != accepted:
                    binding_problems.append(
                        f"acquire returned lock id {lock}, but it is accepted acquire "
                        f"number {accepted}"
                    )
        outputs, next_timeout = machine.poll()
        actual.extend(render(o) for o in outputs)
        if next_timeout is None:
            actual.append({"idle": True})
        else:
            actual.append({"next_timeout_ms": ns_to_ms(next_timeout)})

        expected = list(step["expect"])
        if not matches("", expected, actual, owners):
            pytest.fail(mismatch(title, index, step, expected, actual, owners), pytrace=False)

        # The binding's owner accessor agrees with the owner ids it sends.
        for o in outputs:
            if scenario.kind == "redis" and isinstance(o, _core.Request) and o.operation in ("acquire", "renew"):
                owner = machine.owner(o.lock)
                if owner != o.args[0]:
                    binding_problems.append(
                        f"Machine.owner({o.lock}) is {owners.disguise(owner)!r}, but request "
                        f"{o.id} ({o.operation}) carries {owners.disguise(o.args[0])!r}"
                    )
        if binding_problems:
            pytest.fail(
                f"{title}\n  step {index} at {step['at_ms']} ms, input {show(inp)}\n"
                + "\n".join(f"  >>> {p}" for p in binding_problems),
                pytrace=False,
            )
    return len(scenario.steps)


@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
def test_scenario_vector_replays_exactly(path: Path) -> None:
    for flavour in STRING_FLAVOURS:
        replay(path, flavour)


@pytest.mark.skipif(
    os.environ.get("FENCEPOST_PENDING_VECTORS") != "1",
    reason="pending vectors document known disagreements; set FENCEPOST_PENDING_VECTORS=1",
)
def test_pending_vectors() -> None:
    failures = []
    for path in PENDING:
        for flavour in STRING_FLAVOURS:
            try:
                replay(path, flavour)
            except pytest.fail.Exception as e:
                failures.append(str(e))
    assert not failures, f"{len(failures)} pending replays still fail:\n\n" + "\n\n".join(failures)


def test_at_least_25_vectors() -> None:
    assert len(VECTORS) >= MIN_VECTORS, (
        f"only {len(VECTORS)} scenario vectors in {SCENARIO_DIR}; "
        f"expected at least {MIN_VECTORS}"
    )


# ---- the runner's own rules ----------------------------------------------------------


def test_reply_shorthand_covers_every_redis_value() -> None:
    v: List[Any] = [None, 1, "x", {"status": "OK"}, {"error": "LOADING"}, [[]]]
    got = redis_reply(v, STRING_FLAVOURS["bytes"])
    assert isinstance(got, list)
    assert got[:4] == [None, 1, b"x", b"OK"] and got[5] == [[]]
    assert isinstance(got[4], _core.RedisErrorReply) and str(got[4]) == "LOADING"
    for bad in ({"oops": 1}, True, 1.5, 2**63):
        with pytest.raises(VectorError):
            redis_reply(bad, STRING_FLAVOURS["str"])


def test_fractional_milliseconds_round_to_the_nanosecond() -> None:
    assert ms_to_ns(333.333333) == 333_333_333
    assert ms_to_ns(1321.333333) == 1_321_333_333
    assert ms_to_ns(2126008809.52) == 2_126_008_809_520_000
    assert ms_to_ns(0.0000005) == 1  # half away from zero, like Rust's f64::round
    assert ms_to_ns(-1) == 0
    assert ns_to_ms(988_000_000) == 988 and isinstance(ns_to_ms(988_000_000), int)
    owners = Owners()
    assert matches("deadline_ms", 666.666666, ns_to_ms(666_666_666), owners)
    assert matches("next_timeout_ms", {"at_least": 5, "at_most": 15}, 15, owners)
    assert not matches("next_timeout_ms", {"at_least": 5, "at_most": 15}, 15.000001, owners)
    assert not matches("token", 1.0, 1, owners)  # JSON equality, as serde_json's


def test_owner_placeholders_bind_once_and_stay_distinct() -> None:
    owners = Owners()
    x, y = "0" * 32, "f" * 32
    assert matches("args", ["$a", "$a"], [x, x], owners)
    assert not matches("args", ["$a"], [y], owners)
    assert not matches("args", ["$b"], [x], owners)
    assert matches("args", ["$b"], [y], owners)
    assert not matches("args", ["$c"], ["1000"], owners)


def test_usage_errors_map_to_the_binding_exceptions() -> None:
    clock = Raised(ClockError("time went backwards"))
    option = Raised(ConfigError("ttl: must be at least 1 ms, got 0 s", kind="invalid_option", option="ttl"))
    assert match_usage_error({"kind": "time_went_backwards"}, clock)
    assert not match_usage_error({"kind": "unknown_lock"}, clock)  # ClockError is a ConfigError
    assert match_usage_error({"kind": "invalid_option", "option": "ttl"}, option)
    assert not match_usage_error({"kind": "invalid_option", "option": "drift_factor"}, option)
    assert not match_usage_error({"kind": "invalid_option"}, option)
    assert not match_usage_error({"kind": "invalid_option", "option": "ttl", "x": 1}, option)
    assert not match_usage_error({"kind": "time_went_backwards"}, option)
    assert not match_usage_error({"kind": "invalid_name"}, Raised(ValueError("x")))
    # the kind decides, not the message
    name = Raised(ConfigError("ttl: mentioned in passing", kind="invalid_name"))
    assert match_usage_error({"kind": "invalid_name"}, name)
    assert not match_usage_error({"kind": "invalid_option", "option": "ttl"}, name)
    assert not match_usage_error({"kind": "unknown_lock"}, Raised(ConfigError("unknown lock 9")))
    assert not match_usage_error({"kind": "time_went_backwards"}, Raised(ConfigError("x", kind="time_went_backwards")))
    # unsafe_purpose names the option it is about, and only that one
    assert match_usage_error({"kind": "unsafe_purpose"}, Raised(ConfigError("x", kind="unsafe_purpose", option="purpose")))
    assert not match_usage_error({"kind": "unsafe_purpose"}, Raised(ConfigError("x", kind="unsafe_purpose", option="ttl")))


def test_the_binding_raises_each_usage_error_kind() -> None:
    """Every kind the vectors use comes out of the binding with its kind and option."""
    machine = _core.Machine(seed=7)
    seen = {}
    cases = [
        lambda: machine.acquire(0, "n", core_options({**DEFAULT_OPTIONS, "ttl_ns": 0})),
        lambda: machine.acquire(0, "", core_options(DEFAULT_OPTIONS)),
        lambda: machine.acquire(0, "n", core_options({**DEFAULT_OPTIONS, "purpose": "correctness"})),
        lambda: machine.release(0, 5),
        lambda: (machine.timeout(10), machine.timeout(5)),
    ]
    for call in cases:
        with pytest.raises(ConfigError) as info:
            call()
        rendered = usage_error_of(info.value)
        assert rendered is not None, info.value
        seen[rendered["kind"]] = rendered
    assert seen == {
        "invalid_option": {"kind": "invalid_option", "option": "ttl"},
        "invalid_name": {"kind": "invalid_name"},
        "unsafe_purpose": {"kind": "unsafe_purpose"},
        "unknown_lock": {"kind": "unknown_lock"},
        "time_went_backwards": {"kind": "time_went_backwards"},
    }
