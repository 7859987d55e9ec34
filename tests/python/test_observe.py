"""Observability: the core's events and warnings on the ``fencepost`` logger
(structured ``extra`` fields) and to the backend's and the lock's callbacks, on the
memory backend and on a real Redis ($FENCEPOST_REDIS_URL)."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import uuid
from typing import Any, List

import pytest

import fencepost
from fencepost.errors import AcquireTimeout, ConfigError, LockLost
from fencepost.observe import Observation

from conftest import wait_until


class Recorder:
    """A callback that keeps every observation (thread-safe)."""

    def __init__(self) -> None:
        self.seen: List[Observation] = []
        self._mutex = threading.Lock()

    def __call__(self, o: Observation) -> None:
        with self._mutex:
            self.seen.append(o)

    def named(self, event: str) -> List[Observation]:
        with self._mutex:
            return [o for o in self.seen if o.event == event]

    def events(self) -> List[str]:
        with self._mutex:
            return [o.event for o in self.seen]


class FlakyBackend(fencepost.MemoryBackend):
    """A memory backend whose requests of the operations in ``failing`` raise
    ConnectionError (the transport failed)."""

    def __init__(self) -> None:
        super().__init__()
        self.failing: set[str] = set()

    def _fails(self, command: Any) -> bool:
        return getattr(command, "operation", None) in self.failing

    async def _execute_async(self, command: Any) -> object:
        if self._fails(command):
            raise ConnectionError("connection refused")
        return await super()._execute_async(command)

    def _execute_sync(self, command: Any) -> object:
        if self._fails(command):
            raise ConnectionError("connection refused")
        return super()._execute_sync(command)


async def test_a_cycle_reports_each_event_with_its_fields_to_the_backend_callback(
    backend: fencepost.MemoryBackend,
) -> None:
    seen = Recorder()
    backend.observe(seen)
    async with fencepost.Lock(backend, "report", ttl=0.3) as lease:
        await asyncio.sleep(0.25)  # renewed at 0.1 and 0.2
        token = lease.token
    assert seen.events()[:2] == ["acquiring", "acquired"]
    assert seen.events()[-1] == "released"
    acquired = seen.named("acquired")[0]
    assert acquired.lock == "report" and acquired.level == logging.INFO and not acquired.warning
    assert acquired.fields["token"] == token and acquired.fields["attempts"] == 1
    assert 0 <= acquired.fields["waited"] < 0.1  # type: ignore[operator]
    renewed = seen.named("renewed")
    assert len(renewed) >= 2
    # confirmed at once: about the whole validity (0.3 · 0.99 − 0.002 = 0.295 s) left
    assert all(0.2 < o.fields["validity_left"] <= 0.295 for o in renewed)  # type: ignore[operator]
    held_for = seen.named("released")[0].fields["held_for"]
    assert 0.24 < held_for < 0.5  # type: ignore[operator]
    assert "released after being held for" in seen.named("released")[0].message


async def test_events_go_to_the_fencepost_logger_with_structured_extra_fields(
    backend: fencepost.MemoryBackend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="fencepost")
    async with fencepost.Lock(backend, "logged", ttl=0.3):
        pass
    records = [r for r in caplog.records if r.name == "fencepost" and hasattr(r, "event")]
    assert [r.event for r in records] == ["acquiring", "acquired", "released"]  # type: ignore[attr-defined]
    acquired = records[1]
    assert acquired.levelno == logging.INFO
    assert acquired.lock_name == "logged"  # type: ignore[attr-defined]
    assert acquired.token >= 1 and acquired.attempts == 1  # type: ignore[attr-defined]
    assert isinstance(acquired.waited, float)  # type: ignore[attr-defined]
    assert acquired.getMessage().startswith('lock "logged": acquired with token')
    assert records[0].levelno == logging.DEBUG


def test_the_blocking_api_reports_to_the_locks_own_callback_and_a_loss_with_its_reason(
    backend: fencepost.MemoryBackend,
) -> None:
    seen = Recorder()
    other = Recorder()
    lock = fencepost.Lock(backend, "sync", ttl=0.3, on_event=seen)
    fencepost.Lock(backend, "quiet", ttl=0.3, on_event=other)
    with pytest.raises(LockLost):
        with lock as lease:
            backend.server.delete_lock("sync")  # an operator deletes the key
            assert lease.lost.wait(1.0)
            lease.check()
    lost = seen.named("lost")
    assert len(lost) == 1 and lost[0].level == logging.WARNING
    assert lost[0].fields["reason"] == "renew_rejected"
    assert 0.05 < lost[0].fields["held_for"] < 0.5  # type: ignore[operator]
    assert other.seen == []  # a lock's callback hears only its own lock


def test_an_acquire_timeout_reports_the_wait_and_the_attempts(backend: fencepost.MemoryBackend) -> None:
    seen = Recorder()
    backend.observe(seen)
    with fencepost.Lock(backend, "busy", ttl=1.0):
        with pytest.raises(AcquireTimeout):
            fencepost.Lock(backend, "busy", ttl=1.0, acquire_timeout=0.1, retry_max=0.02).acquire_sync()
    timed_out = seen.named("acquire_timed_out")
    assert len(timed_out) == 1
    assert timed_out[0].fields["attempts"] >= 2  # type: ignore[operator]
    assert 0.09 < timed_out[0].fields["waited"] < 0.5  # type: ignore[operator]


async def test_a_failing_renewal_reports_the_error_the_retry_and_the_deadline() -> None:
    backend = FlakyBackend()
    seen = Recorder()
    backend.observe(seen)
    lease = await fencepost.Lock(backend, "flaky", ttl=0.4).acquire()
    backend.failing.add("renew")
    assert await asyncio.to_thread(wait_until, lambda: bool(seen.named("renewal_failing")), 2.0)
    backend.failing.clear()
    await lease.release()
    failing = seen.named("renewal_failing")[0]
    assert "ConnectionError" in failing.fields["error"] and "connection refused" in failing.fields["error"]  # type: ignore[operator]
    # a quarter of the renew interval (0.4 / 3 / 4); the deadline 0.396 − 0.133 s away at most
    assert failing.fields["retry_in"] == pytest.approx(0.4 / 12, abs=1e-6)
    assert 0 < failing.fields["deadline_in"] < 0.27  # type: ignore[operator]
    errors = seen.named("backend_error")
    assert errors and errors[0].fields["operation"] == "renew"


# ---- warnings ------------------------------------------------------------------------------


def test_a_late_renewal_is_a_warning_on_the_default_logger_naming_what_to_change(
    backend: fencepost.MemoryBackend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="fencepost")
    # renewed 0.25 s after each send: 0.295 − 0.25 = 0.045 s left, under a third of 0.295
    with fencepost.Lock(backend, "late", ttl=0.3, renew_every=0.25):
        time.sleep(0.35)
    late = [r for r in caplog.records if getattr(r, "event", None) == "renewal_late"]
    assert late, [r.getMessage() for r in caplog.records]
    assert late[0].levelno == logging.WARNING
    assert late[0].validity == pytest.approx(0.295)  # type: ignore[attr-defined]
    assert late[0].validity_left < 0.295 / 3  # type: ignore[attr-defined]
    assert "raise ttl" in late[0].getMessage() and "renew_every" in late[0].getMessage()
    # no event was logged: INFO is off
    assert not [r for r in caplog.records if getattr(r, "event", None) == "acquired"]


async def test_a_lease_held_many_ttls_is_a_warning_once(backend: fencepost.MemoryBackend) -> None:
    seen = Recorder()
    backend.observe(seen, held_long_ttls=3)
    async with fencepost.Lock(backend, "long", ttl=0.1):
        await asyncio.sleep(0.5)
    held = seen.named("held_long")
    assert len(held) == 1 and held[0].warning
    assert held[0].fields["ttl"] == pytest.approx(0.1)
    assert held[0].fields["held_for"] >= 0.3  # type: ignore[operator]
    assert "keep only the short protected step" in held[0].message


async def test_a_hot_lock_is_a_warning_for_many_waiters_never_for_one_long_hold(
    backend: fencepost.MemoryBackend,
) -> None:
    seen = Recorder()
    backend.observe(seen, hot_lock_waiters=3, hot_lock_attempts=4)
    async with fencepost.Lock(backend, "hot", ttl=1.0):
        waiters = [
            asyncio.ensure_future(
                fencepost.Lock(backend, "hot", ttl=1.0, acquire_timeout=0.2, retry_max=0.02).acquire()
            )
            for _ in range(3)
        ]
        results = await asyncio.gather(*waiters, return_exceptions=True)
    assert all(isinstance(r, AcquireTimeout) for r in results)
    hot = seen.named("hot_lock")
    assert [o.fields for o in hot if "waiters" in o.fields] == [{"waiters": 3}]
    # each waiter tried about ten times and found one holder: a long hold, not a hot
    # lock (the core's tests count holders passing the lock along)
    assert [o for o in hot if "found_held" in o.fields] == []
    timed_out = seen.named("acquire_timed_out")
    assert len(timed_out) == 3 and all(o.fields["attempts"] >= 4 for o in timed_out)  # type: ignore[operator]
    assert "SKIP LOCKED" in hot[0].message


async def test_an_unreachable_server_without_acquire_timeout_warns_periodically() -> None:
    backend = FlakyBackend()
    backend.failing.add("acquire")
    seen = Recorder()
    backend.observe(seen, unreachable_every=0.1)
    attempt = asyncio.ensure_future(fencepost.Lock(backend, "down", ttl=1.0, retry_max=0.02).acquire())
    await asyncio.sleep(0.45)
    attempt.cancel()
    with pytest.raises(asyncio.CancelledError):
        await attempt
    warned = seen.named("server_unreachable")
    assert 2 <= len(warned) <= 5, [o.fields for o in warned]
    assert warned[0].fields["unreachable_for"] >= 0.1  # type: ignore[operator]
    assert "connection refused" in warned[0].fields["last_error"]  # type: ignore[operator]
    assert "set acquire_timeout" in warned[0].message
    # with an acquire_timeout the same outage ends in AcquireTimeout, without the warning
    seen.seen.clear()
    with pytest.raises(AcquireTimeout):
        await fencepost.Lock(backend, "down", ttl=1.0, acquire_timeout=0.3, retry_max=0.02).acquire()
    assert seen.named("server_unreachable") == []


def test_nothing_is_observed_while_nobody_listens(backend: fencepost.MemoryBackend) -> None:
    logger = logging.getLogger("fencepost")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with fencepost.Lock(backend, "silent", ttl=0.3):
            pass
        driver = backend._sync_driver()
        assert driver._observing is not None and driver._observing[:2] == (False, False)
        assert driver._machine.observations() == []
    finally:
        logger.setLevel(level)


def test_a_lost_lease_is_a_warning_log_record_with_no_setup(
    backend: fencepost.MemoryBackend, caplog: pytest.LogCaptureFixture
) -> None:
    # the fencepost logger at WARNING (Python's default), no callback: the events logged at
    # WARNING are observed with the warnings, the others are not built at all
    caplog.set_level(logging.WARNING, logger="fencepost")
    with pytest.raises(LockLost):
        with fencepost.Lock(backend, "dropped", ttl=0.2) as lease:
            assert backend.server.delete_lock("dropped")
            assert lease.lost.wait(1.0)
    records = [r for r in caplog.records if r.name == "fencepost"]
    lost = [r for r in records if getattr(r, "event", None) == "lost"]
    assert len(lost) == 1 and lost[0].levelno == logging.WARNING, [r.getMessage() for r in records]
    assert getattr(lost[0], "lock_name", None) == "dropped"
    assert all(r.levelno >= logging.WARNING for r in records)


def test_a_raising_callback_is_logged_and_the_lock_works_on(
    backend: fencepost.MemoryBackend, caplog: pytest.LogCaptureFixture
) -> None:
    def boom(o: Observation) -> None:
        raise RuntimeError("observer bug")

    backend.observe(boom)
    with fencepost.Lock(backend, "robust", ttl=0.3) as lease:
        assert lease.token >= 1
    assert any("observation callback raised" in r.getMessage() for r in caplog.records)


def test_bad_observe_arguments_are_config_errors(backend: fencepost.MemoryBackend) -> None:
    with pytest.raises(ConfigError, match="late_renewal_fraction"):
        backend.observe(late_renewal_fraction=1.5)
    with pytest.raises(ConfigError, match=r"^unreachable_every: must be at least 1 ms, got 0\.0005 s$"):
        backend.observe(unreachable_every=0.0005)
    with pytest.raises(ConfigError, match="unreachable_every"):
        backend.observe(unreachable_every="1")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="held_long_ttls"):
        backend.observe(held_long_ttls=-1)
    with pytest.raises(ConfigError, match="callable"):
        backend.observe(3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="on_event"):
        fencepost.Lock(backend, "x", on_event=3)  # type: ignore[arg-type]


# ---- a real server ---------------------------------------------------------------------------

URL = os.environ.get("FENCEPOST_REDIS_URL")


@pytest.mark.skipif(not URL, reason="FENCEPOST_REDIS_URL is not set (scripts/test starts Redis)")
async def test_events_and_a_loss_on_a_real_redis(caplog: pytest.LogCaptureFixture) -> None:
    redis = pytest.importorskip("redis")
    import redis.asyncio  # noqa: F811

    from fencepost.redis import RedisBackend

    prefix = f"fptest:{uuid.uuid4().hex[:12]}:"
    client = redis.asyncio.Redis.from_url(URL, socket_timeout=5)
    caplog.set_level(logging.INFO, logger="fencepost")
    try:
        backend = RedisBackend(client, key_prefix=prefix)
        seen = Recorder()
        lock = fencepost.Lock(backend, "real", ttl=0.3, on_event=seen)
        async with lock as lease:
            await asyncio.sleep(0.15)  # one renewal at 0.1
            first = lease.token
        with pytest.raises(LockLost):
            async with lock:
                await client.delete(backend.lock_key("real"))
                await asyncio.sleep(1.0)  # cancelled at the next renewal
        assert seen.events()[:2] == ["acquiring", "acquired"]
        assert "renewed" in seen.events() and "released" in seen.events()
        assert seen.named("acquired")[0].fields["token"] == first
        assert seen.named("acquired")[1].fields["token"] == first + 1
        lost = seen.named("lost")
        assert [o.fields["reason"] for o in lost] == ["renew_rejected"]
        records = [r for r in caplog.records if getattr(r, "event", None) == "lost"]
        assert records and records[0].reason == "renew_rejected"  # type: ignore[attr-defined]
        assert records[0].lock_name == "real"  # type: ignore[attr-defined]
        assert not [r for r in caplog.records if getattr(r, "event", None) == "renewed"]  # DEBUG is off
    finally:
        await client.delete(prefix + "{real}:lock", prefix + "{real}:token")
        await client.aclose()
