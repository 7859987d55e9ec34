"""Replays the election vectors ``tests/scenarios/election/*.json`` through
``fencepost.Election`` on a fresh ``MemoryBackend`` each: on asyncio (every vector), and
on threads (``campaign_sync`` / ``run_sync``) for the vectors that cancel nothing (a
thread cannot be cancelled).

The format, the actions and what a candidate records are in
``tests/scenarios/README.md`` ("Election vectors"); the Rust runner is
``rust/tests/election_vectors.rs``, the JavaScript one
``tests/js/election_vectors.test.js``.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

import fencepost
from fencepost import AcquireTimeout, LockLost

REPO = Path(__file__).resolve().parents[2]
VECTORS = sorted((REPO / "tests" / "scenarios" / "election").glob("*.json"))

#: How long a step waits for what it expects, then how long it watches for more (s).
STEP_BOUND = 5.0
SETTLE = 0.1

#: The vector's options as the Lock's keywords (seconds).
OPTION_NAMES = {
    "ttl_ms": "ttl",
    "renew_every_ms": "renew_every",
    "retry_base_ms": "retry_base",
    "retry_max_ms": "retry_max",
    "acquire_timeout_ms": "acquire_timeout",
}


def lock_options(*layers: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for layer in layers:
        for key, value in (layer or {}).items():
            assert key in OPTION_NAMES, f"unknown option {key} in the vector"
            out[OPTION_NAMES[key]] = None if value is None else value / 1000
    return out


def failure(exc: BaseException) -> str:
    """What a failed campaign or run records."""
    if isinstance(exc, asyncio.CancelledError):
        return "failed cancelled"
    if isinstance(exc, AcquireTimeout):
        return "failed timeout"
    if isinstance(exc, LockLost):
        return f"failed lost {exc.reason}"
    return f"failed {type(exc).__name__}"


class Candidate:
    """One candidate: its Election, what it recorded, and what a step may act on."""

    def __init__(self, backend: fencepost.MemoryBackend, name: str, spec: Dict[str, Any], options: Any) -> None:
        self.log: List[str] = []
        self.task: Optional["asyncio.Task[None]"] = None
        self.leadership: Any = None
        self.finish = threading.Event()
        self.election = fencepost.Election(
            backend,
            name,
            spec["identity"],
            value=spec.get("value"),
            on_started_leading=lambda lead: self.log.append(f"started {lead.token}"),
            on_stopped_leading=lambda lead, reason: self.log.append(f"stopped {lead.token} {reason}"),
            **lock_options(options, spec.get("options")),
        )

    # -- asyncio --

    def campaign(self) -> None:
        async def go() -> None:
            try:
                self.leadership = await self.election.campaign()
            except BaseException as exc:  # noqa: B902 — recorded, cancellation included
                self.log.append(failure(exc))
                return
            self.log.append(f"leading {self.leadership.token}")

        self.task = asyncio.ensure_future(go())

    def run(self) -> None:
        finish = asyncio.Event()
        self.finish_async = finish

        async def work(lead: Any) -> None:
            self.leadership = lead
            self.log.append(f"working {lead.token}")
            await finish.wait()

        async def go() -> None:
            try:
                await self.election.run(work)
            except BaseException as exc:  # noqa: B902
                self.log.append(failure(exc))
                return
            self.log.append("returned")

        self.task = asyncio.ensure_future(go())

    # -- threads --

    def campaign_sync(self) -> None:
        def go() -> None:
            try:
                self.leadership = self.election.campaign_sync()
            except Exception as exc:
                self.log.append(failure(exc))
                return
            self.log.append(f"leading {self.leadership.token}")

        threading.Thread(target=go, daemon=True).start()

    def run_sync(self) -> None:
        self.finish.clear()

        def work(lead: Any) -> None:
            self.leadership = lead
            self.log.append(f"working {lead.token}")
            while not self.finish.is_set() and not lead.ended.is_set():
                self.finish.wait(0.005)

        def go() -> None:
            try:
                self.election.run_sync(work)
            except Exception as exc:
                self.log.append(failure(exc))
                return
            self.log.append("returned")

        threading.Thread(target=go, daemon=True).start()


def load(path: Path) -> Dict[str, Any]:
    vector: Dict[str, Any] = json.loads(path.read_text())
    assert vector["name"] == path.stem
    return vector


def expected_leader(step: Dict[str, Any]) -> Optional[fencepost.Leader]:
    want = step["expect"]["leader"]
    return None if want is None else fencepost.Leader(identity=want["identity"], value=want["value"], token=want["token"])


def recorded(candidates: Dict[str, Candidate], seen: Dict[str, int]) -> Dict[str, List[str]]:
    out = {cid: c.log[seen[cid]:] for cid, c in candidates.items()}
    return {cid: entries for cid, entries in out.items() if entries}


def short_of(candidates: Dict[str, Candidate], seen: Dict[str, int], expect: Dict[str, List[str]]) -> bool:
    return any(len(candidates[cid].log) - seen[cid] < len(want) for cid, want in expect.items())


def test_the_election_vectors_are_there() -> None:
    assert len(VECTORS) >= 8, [p.name for p in VECTORS]


async def replay(path: Path, threads: bool) -> None:
    """Replays one vector; ``threads``: through the blocking API (each blocking call on
    a thread of its own, so the loop here keeps watching), else through asyncio."""
    vector = load(path)
    backend = fencepost.MemoryBackend()
    candidates = {cid: Candidate(backend, vector["name"], spec, vector.get("options")) for cid, spec in vector["candidates"].items()}
    follower = fencepost.Election(backend, vector["name"], "follower", **lock_options(vector.get("options")))
    try:
        for i, step in enumerate(vector["steps"]):
            where = f"{path.name} step {i} ({step['do']} {step.get('candidate', '')})"
            c = candidates.get(step.get("candidate", ""))
            seen = {cid: len(cand.log) for cid, cand in candidates.items()}
            action = step["do"]
            if action == "leader":
                leader = await asyncio.to_thread(follower.leader_sync) if threads else await follower.leader()
                assert leader == expected_leader(step), where
                continue
            if action == "force_release":
                held = await asyncio.to_thread(backend.force_release_sync, vector["name"]) if threads else await backend.force_release(vector["name"])
                assert held, f"{where}: the lock was held"
            else:
                assert c is not None, where
                if action == "campaign":
                    c.campaign_sync() if threads else c.campaign()
                elif action == "run":
                    c.run_sync() if threads else c.run()
                elif action == "finish":
                    c.finish.set() if threads else c.finish_async.set()
                elif action == "resign":
                    await asyncio.to_thread(c.leadership.resign) if threads else await c.leadership.resign()
                elif action == "cancel" and not threads:
                    assert c.task is not None, where
                    c.task.cancel()
                else:
                    pytest.fail(f"{where}: unknown action (or one threads cannot do)")
            deadline = time.monotonic() + STEP_BOUND
            while time.monotonic() < deadline and short_of(candidates, seen, step["expect"]):
                await asyncio.sleep(0.005)
            await asyncio.sleep(SETTLE)
            assert recorded(candidates, seen) == step["expect"], where
    finally:
        for cand in candidates.values():
            cand.finish.set()
            if cand.task is not None:
                cand.task.cancel()
        await asyncio.gather(*(c.task for c in candidates.values() if c.task is not None), return_exceptions=True)
        await backend.aclose()


@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
async def test_election_vector_asyncio(path: Path) -> None:
    await replay(path, threads=False)


SYNC_VECTORS = [p for p in VECTORS if not any(s["do"] == "cancel" for s in load(p)["steps"])]


@pytest.mark.parametrize("path", SYNC_VECTORS, ids=[p.stem for p in SYNC_VECTORS])
async def test_election_vector_threads(path: Path) -> None:
    await replay(path, threads=True)
