"""The shared bad-input table (tests/bad_input/table.json): every row is refused with the
same error class, code, kind and option as in the other bindings, before anything is sent
(the backend counts requests) and without leaving a lock behind."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, List

import pytest

import fencepost
from fencepost import _core

TABLE = Path(__file__).resolve().parents[1] / "bad_input" / "table.json"
ROWS: List[Dict[str, Any]] = json.loads(TABLE.read_text(encoding="utf-8"))["rows"]
DURATIONS = {"ttl", "acquire_timeout", "retry_base", "retry_max", "renew_every", "clock_margin"}


def value(v: Any) -> Any:
    """A table value as Python spells it (tags for what JSON cannot say)."""
    if isinstance(v, dict):
        if "$nan" in v:
            return math.nan
        if "$inf" in v:
            return math.inf * v["$inf"]
        if "$bigint" in v:
            return int(v["$bigint"])
        if "$repeat" in v:
            text, times = v["$repeat"]
            return text * times
        if "$lone" in v:
            return v.get("before", "") + chr(int(v["$lone"], 16)) + v.get("after", "")
    if isinstance(v, list):
        return [value(x) for x in v]
    return v


def duration(v: Any) -> Any:
    """Milliseconds in the table, seconds in Python (other types pass through)."""
    v = value(v)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return v / 1000
    return v


class CountingBackend(fencepost.Backend):
    """A Redis-kind backend that counts the requests it is given (none is expected)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    async def _execute_async(self, command: Any) -> object:
        self.calls += 1
        raise AssertionError(f"a request was sent: {command!r}")

    def _execute_sync(self, command: Any) -> object:
        self.calls += 1
        raise AssertionError(f"a request was sent: {command!r}")


def run(row: Dict[str, Any]) -> None:
    call = row["call"]
    if call == "lock":
        options: Dict[str, Any] = {}
        for key, v in row.get("options", {}).items():
            if key == "$unknown":
                options[v] = 1
            else:
                options[key] = duration(v) if key in DURATIONS else value(v)
        backend = CountingBackend()
        try:
            fencepost.Lock(backend, value(row.get("name", "job")), **options)
            raise AssertionError("accepted")  # a lock object is refused when it is built
        finally:
            assert backend.calls == 0, "refused only after a request was sent"
    elif call == "fence_check":
        fence = fencepost.Fence()
        fence.check(value(row["resource"]), value(row["token"]), row.get("owner_id"))
        raise AssertionError("accepted")
    elif call == "sql_fenced_update":
        fencepost.sql_fenced_update(
            value(row.get("table", "jobs")),
            value(row.get("id_column", "id")),
            value(row.get("token_column", "last_token")),
            value(row.get("columns", ["body"])),
        )
        raise AssertionError("accepted")
    elif call == "backend_from_url":
        backend = fencepost.backend_from_url(value(row["url"]))
        backend.close()
        raise AssertionError("accepted")
    else:
        raise AssertionError(f"unknown call {call!r}")


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_bad_input_row(row: Dict[str, Any]) -> None:
    if "python" in row.get("skip", {}):
        pytest.skip(row["skip"]["python"])
    expected = row.get("python", {}).get("error", "ConfigError")
    with pytest.raises(Exception) as info:
        run(row)
    error = info.value
    assert type(error).__name__ == expected, f"{type(error).__name__}: {error}"
    if expected == "ConfigError":
        assert isinstance(error, fencepost.ConfigError)
        assert (error.code, error.kind) == ("ERR_CONFIG", row["expect"]["kind"]), str(error)
        if "option" in row["expect"]:  # compared where the table names one (or null)
            assert error.option == row["expect"]["option"], str(error)


def test_the_table_covers_every_call_and_its_rows_are_unique() -> None:
    assert {r["call"] for r in ROWS} == {"lock", "fence_check", "sql_fenced_update", "backend_from_url"}
    assert len({r["id"] for r in ROWS}) == len(ROWS)
    assert _core is not None
