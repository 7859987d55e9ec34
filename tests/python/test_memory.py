"""Unit tests of the Python API on the embedded in-memory backend (no server)."""

from __future__ import annotations

import asyncio
import math
import pickle
import sys
import threading
import time
from datetime import timedelta

import pytest

import fencepost
from fencepost import _core
from fencepost.errors import (
    AcquireTimeout,
    BackendError,
    ClockError,
    ConfigError,
    FencepostError,
    LockLost,
    ProtocolError,
    StaleToken,
)

from conftest import wait_until


# ---- acquire / release ------------------------------------------------------------------


async def test_async_acquire_release_gives_increasing_tokens(backend: fencepost.MemoryBackend) -> None:
    tokens = []
    for _ in range(3):
        async with fencepost.Lock(backend, "report", ttl=5.0) as lease:
            tokens.append(lease.token)
            assert lease.name == "report"
            assert len(lease.owner_id) == 32 and int(lease.owner_id, 16) >= 0
            assert backend.server.lock_owner("report") == lease.owner_id
            assert 4.8 < lease.valid_for() <= 5.0 * 0.99
            assert lease.lost_reason is None and not lease.lost.is_set()
        assert backend.server.lock_owner("report") is None  # released on the server
    assert tokens == [1, 2, 3]


async def test_explicit_async_acquire_and_release(backend: fencepost.MemoryBackend) -> None:
    lock = fencepost.Lock(backend, "job", ttl=5.0)
    lease = await lock.acquire()
    assert lock.lease is lease and lease.token == 1
    # a Lock is a shareable description: a second acquire makes a second lease, which
    # waits its turn like any other contender
    with pytest.raises(fencepost.AcquireTimeout):
        await lock.acquire(timeout=0)
    assert await lock.try_acquire() is None
    assert lock.lease is lease
    await lock.release()
    assert lock.lease is None
    assert backend.server.lock_owner("job") is None
    with pytest.raises(ConfigError, match="holds no"):
        await lock.release()
    lease2 = await lock.acquire()  # a Lock object is reusable
    assert lease2.token == 2
    await lock.release()


def test_sync_acquire_release_gives_increasing_tokens(backend: fencepost.MemoryBackend) -> None:
    tokens = []
    for _ in range(3):
        with fencepost.Lock(backend, "report", ttl=5.0) as lease:
            tokens.append(lease.token)
            lease.check()
            assert backend.server.lock_owner("report") == lease.owner_id
            assert isinstance(lease.lost, threading.Event)
        assert backend.server.lock_owner("report") is None
    assert tokens == [1, 2, 3]
    lock = fencepost.Lock(backend, "report", ttl=5.0)
    lease = lock.acquire_sync()
    assert lease.token == 4
    lock.release_sync()
    assert backend.server.lock_owner("report") is None


def test_timedelta_durations_are_accepted(backend: fencepost.MemoryBackend) -> None:
    lock = fencepost.Lock(backend, "td", ttl=timedelta(seconds=2), renew_every=timedelta(milliseconds=500))
    with lock as lease:
        assert 1.9 < lease.valid_for() <= 2.0


async def test_renewal_keeps_a_short_lease_alive(backend: fencepost.MemoryBackend) -> None:
    # ttl 0.3 s, renewed every 0.1 s: held well past the ttl
    async with fencepost.Lock(backend, "renewed", ttl=0.3) as lease:
        first_deadline = lease.valid_until_ns
        await asyncio.sleep(0.75)
        lease.check()
        assert lease.valid_until_ns > first_deadline + 500_000_000
        assert backend.server.lock_owner("renewed") == lease.owner_id


def test_sync_renewal_keeps_a_short_lease_alive(backend: fencepost.MemoryBackend) -> None:
    with fencepost.Lock(backend, "renewed", ttl=0.3) as lease:
        time.sleep(0.75)
        lease.check()
        assert backend.server.lock_owner("renewed") == lease.owner_id


# ---- contention --------------------------------------------------------------------------


async def test_acquire_timeout_zero_under_contention_raises_quickly(backend: fencepost.MemoryBackend) -> None:
    async with fencepost.Lock(backend, "busy", ttl=5.0):
        other = fencepost.Lock(fencepost.MemoryBackend(server=backend.server), "busy", ttl=5.0, acquire_timeout=0)
        started = time.monotonic()
        with pytest.raises(AcquireTimeout) as info:
            await other.acquire()
        assert time.monotonic() - started < 0.1
        assert info.value.name == "busy"
        assert info.value.last_error is None  # simply held by someone else
        assert info.value.code == "ERR_ACQUIRE_TIMEOUT"
        assert other.lease is None


def test_sync_acquire_timeout_under_contention(backend: fencepost.MemoryBackend) -> None:
    with fencepost.Lock(backend, "busy", ttl=5.0):
        other = fencepost.Lock(backend, "busy", ttl=5.0, acquire_timeout=0.05, retry_base=0.005, retry_max=0.01)
        started = time.monotonic()
        with pytest.raises(AcquireTimeout):
            other.acquire_sync()
        assert 0.04 < time.monotonic() - started < 0.5


async def test_waiter_gets_the_lock_after_release(backend: fencepost.MemoryBackend) -> None:
    holder = fencepost.Lock(backend, "queue", ttl=5.0)
    waiter = fencepost.Lock(backend, "queue", ttl=5.0, acquire_timeout=5.0, retry_max=0.02)
    first = await holder.acquire()
    task = asyncio.ensure_future(waiter.acquire())
    await asyncio.sleep(0.05)
    assert not task.done()
    await holder.release()
    second = await asyncio.wait_for(task, 1.0)
    assert second.token == first.token + 1
    await waiter.release()


async def test_two_backends_on_one_server_exclude_each_other() -> None:
    server = fencepost.MemoryServer()
    inside = 0
    overlaps = 0
    tokens: list[int] = []

    async def worker(backend: fencepost.MemoryBackend) -> None:
        nonlocal inside, overlaps
        for _ in range(5):
            async with fencepost.Lock(backend, "shared", ttl=2.0, acquire_timeout=5.0, retry_max=0.01) as lease:
                inside += 1
                overlaps += inside > 1
                tokens.append(lease.token)
                await asyncio.sleep(0.002)
                inside -= 1

    await asyncio.wait_for(
        asyncio.gather(*(worker(fencepost.MemoryBackend(server=server)) for _ in range(4))), 20
    )
    assert overlaps == 0
    assert tokens == list(range(1, 21))


async def test_cancelling_a_task_blocked_in_acquire_leaves_the_lock_free(backend: fencepost.MemoryBackend) -> None:
    holder = fencepost.Lock(backend, "c", ttl=5.0)
    await holder.acquire()
    blocked = fencepost.Lock(backend, "c", ttl=5.0, retry_max=0.01)  # waits forever
    task = asyncio.ensure_future(blocked.acquire())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert blocked.lease is None
    await holder.release()
    await asyncio.sleep(0.05)  # long enough for a surviving waiter to retry
    started = time.monotonic()
    lease = await fencepost.Lock(backend, "c", ttl=5.0, acquire_timeout=0).acquire()
    assert time.monotonic() - started < 0.1
    assert backend.server.lock_owner("c") == lease.owner_id


class SlowMemoryBackend(fencepost.MemoryBackend):
    """Every request takes ``delay`` seconds to reach the server."""

    def __init__(self, delay: float, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.delay = delay

    async def _execute_async(self, command: fencepost._core.Request | fencepost._core.Command) -> object:
        await asyncio.sleep(self.delay)
        return self.server.execute(command)


class SlowReplyMemoryBackend(fencepost.MemoryBackend):
    """Every request reaches the server at once; its reply takes ``delay`` seconds
    (what a client that has written its request and waits for the answer sees)."""

    def __init__(self, delay: float, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.delay = delay

    async def _execute_async(self, command: fencepost._core.Request | fencepost._core.Command) -> object:
        reply = self.server.execute(command)
        await asyncio.sleep(self.delay)
        return reply


async def test_cancelling_an_acquire_in_flight_releases_what_the_server_granted() -> None:
    backend = SlowReplyMemoryBackend(0.05)
    lock = fencepost.Lock(backend, "inflight", ttl=5.0)
    task = asyncio.ensure_future(lock.acquire())
    await asyncio.sleep(0.01)  # the server granted it; the reply is on its way
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The caller ran the acquire itself: cancelling it abandons the reply, the machine
    # reads the outcome as unknown and sends the owner-checked release, freeing the key.
    for _ in range(100):
        if backend.server.lock_owner("inflight") is None and backend.server.get(backend.token_key("inflight")) == "1":
            break
        await asyncio.sleep(0.01)
    assert backend.server.get(backend.token_key("inflight")) == "1"  # it was granted…
    assert backend.server.lock_owner("inflight") is None  # …and released
    other = fencepost.Lock(fencepost.MemoryBackend(server=backend.server), "inflight", ttl=5.0, acquire_timeout=0)
    lease = await other.acquire()
    assert lease.token == 2


async def test_cancelling_an_acquire_before_it_reaches_the_server_leaves_the_lock_free() -> None:
    backend = SlowMemoryBackend(0.05)
    lock = fencepost.Lock(backend, "unsent", ttl=5.0)
    task = asyncio.ensure_future(lock.acquire())
    await asyncio.sleep(0.01)  # the acquire request has not reached the server yet
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert lock.lease is None
    await asyncio.sleep(0.15)  # the machine's owner-checked release (outcome unknown) runs
    assert backend.server.lock_owner("unsent") is None
    other = fencepost.Lock(fencepost.MemoryBackend(server=backend.server), "unsent", ttl=5.0, acquire_timeout=0)
    lease = await other.acquire()
    assert lease.token == 1  # the cancelled request never reached the server


# ---- loss --------------------------------------------------------------------------------


async def test_deleted_key_is_lost_within_a_renew_interval_and_the_body_is_cancelled(
    backend: fencepost.MemoryBackend,
) -> None:
    lock = fencepost.Lock(backend, "doomed", ttl=0.3)  # renews every 0.1 s
    reached_end = False
    cancelled_at = None
    deleted_at = None
    with pytest.raises(LockLost) as info:
        async with lock as lease:
            await asyncio.sleep(0.02)
            assert backend.server.delete_lock("doomed")
            deleted_at = time.monotonic()
            try:
                await asyncio.sleep(5)
                reached_end = True
            except asyncio.CancelledError:
                cancelled_at = time.monotonic()
                raise
    assert not reached_end
    assert cancelled_at is not None and deleted_at is not None
    assert cancelled_at - deleted_at < 0.1 + 0.1  # within about one renew interval
    err = info.value
    assert err.reason == "renew_rejected" and err.name == "doomed" and err.token == lease.token
    assert err.code == "ERR_LOCK_LOST"
    # worded for every backend: a key, a row or a session may be what is gone
    assert str(err).endswith("the server refused the renewal: it no longer held the lock for this owner")
    assert lease.lost.is_set() and lease.lost_reason == "renew_rejected"
    assert lease.valid_for() == 0.0
    assert lock.lease is None
    if sys.version_info >= (3, 11):
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0  # the cancel was undone
    await asyncio.sleep(0)  # and no cancellation is left pending on this task


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="asyncio.wait_for drops no cancellation from 3.12 on")
async def test_a_body_whose_cancellation_was_dropped_is_cancelled_again(
    backend: fencepost.MemoryBackend,
) -> None:
    # Before 3.12, asyncio.wait_for (redis-py's asyncio client awaits every reply through
    # it) drops a cancellation that arrives as the awaited call completes; the body here
    # drops the first one itself, as wait_for would, and goes on awaiting.
    started = time.monotonic()
    dropped = 0
    with pytest.raises(LockLost) as info:
        async with fencepost.Lock(backend, "dropped", ttl=0.2, auto_renew=False):
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                dropped += 1
            await asyncio.sleep(5)  # cancelled again within 0.1 s
    assert dropped == 1
    assert time.monotonic() - started < 0.196 + 0.1 + 0.15
    assert info.value.reason == "expired"
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # both cancels were undone
    await asyncio.sleep(0.3)  # no stray re-cancel reaches this task after the block


def test_sync_deleted_key_is_reported_by_check_and_exit(backend: fencepost.MemoryBackend) -> None:
    lock = fencepost.Lock(backend, "doomed", ttl=0.3)
    with pytest.raises(LockLost) as info:
        with lock as lease:
            backend.server.delete_lock("doomed")
            assert lease.lost.wait(0.1 + 0.1)  # reported within about one renew interval
            with pytest.raises(LockLost) as checked:
                lease.check()
            assert checked.value.reason == "renew_rejected"
    assert info.value.reason == "renew_rejected"
    assert lock.lease is None

    # a body that does not call check() still hears it at the exit
    with pytest.raises(LockLost):
        with fencepost.Lock(backend, "doomed", ttl=0.3) as lease:
            backend.server.delete_lock("doomed")
            lease.lost.wait(1.0)


async def test_lease_without_renewal_expires_and_cancels_the_body(backend: fencepost.MemoryBackend) -> None:
    started = time.monotonic()
    with pytest.raises(LockLost) as info:
        async with fencepost.Lock(backend, "short", ttl=0.2, auto_renew=False):
            await asyncio.sleep(5)
    elapsed = time.monotonic() - started
    # lost at the validity deadline: 0.2 · 0.99 − 0.002 = 0.196 s
    assert 0.19 <= elapsed < 0.35
    assert info.value.reason == "expired"


async def test_check_in_the_body_raises_and_leaves_no_pending_cancel(backend: fencepost.MemoryBackend) -> None:
    with pytest.raises(LockLost):
        async with fencepost.Lock(backend, "busy-body", ttl=0.05, auto_renew=False) as lease:
            time.sleep(0.06)  # blocking work: the loop cannot run the timer
            lease.check()  # the machine is asked now and reports the expiry
    await asyncio.sleep(0.01)  # no stray CancelledError for this task


async def test_lease_lost_event_can_be_awaited(backend: fencepost.MemoryBackend) -> None:
    lock = fencepost.Lock(backend, "watch", ttl=0.3)
    lease = await lock.acquire()  # explicit form: nothing is cancelled on loss
    backend.server.delete_lock("watch")
    await asyncio.wait_for(lease.lost.wait(), 1.0)
    assert lease.lost_reason == "renew_rejected"
    with pytest.raises(LockLost):
        lease.check()
    with pytest.raises(LockLost):
        await lock.release()
    assert lock.lease is None


async def test_external_cancellation_wins_over_loss_and_the_lock_is_released(
    backend: fencepost.MemoryBackend,
) -> None:
    entered = asyncio.Event()

    async def body() -> None:
        async with fencepost.Lock(backend, "ext", ttl=5.0):
            entered.set()
            await asyncio.sleep(5)

    task = asyncio.ensure_future(body())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert backend.server.lock_owner("ext") is None


async def test_release_after_expiry_raises_lock_lost_and_spares_the_next_holder(
    backend: fencepost.MemoryBackend,
) -> None:
    a = fencepost.Lock(backend, "r", ttl=0.1, auto_renew=False)
    await a.acquire()
    await asyncio.sleep(0.15)
    b_backend = fencepost.MemoryBackend(server=backend.server)
    b = await fencepost.Lock(b_backend, "r", ttl=5.0, acquire_timeout=0).acquire()
    with pytest.raises(LockLost) as info:
        await a.release()
    assert info.value.reason == "expired"
    assert backend.server.lock_owner("r") == b.owner_id


async def test_release_of_a_deleted_key_reports_not_held_at_release(backend: fencepost.MemoryBackend) -> None:
    lock = fencepost.Lock(backend, "gone", ttl=5.0)
    await lock.acquire()
    backend.server.delete_lock("gone")
    with pytest.raises(LockLost) as info:
        await lock.release()
    assert info.value.reason == "not_held_at_release"


class HangingRenewBackend(fencepost.MemoryBackend):
    """Acquires and releases work; renewals never get an answer."""

    async def _execute_async(self, command: fencepost._core.Request | fencepost._core.Command) -> object:
        if command.script == "renew":
            await asyncio.Event().wait()
        return self.server.execute(command)


async def test_a_hung_renewal_does_not_delay_loss() -> None:
    backend = HangingRenewBackend()
    started = time.monotonic()
    with pytest.raises(LockLost) as info:
        async with fencepost.Lock(backend, "hung", ttl=0.3):
            await asyncio.sleep(5)
    # valid until 0.3 · 0.99 − 0.002 = 0.295 s after the acquire was sent
    assert time.monotonic() - started < 0.4
    assert info.value.reason == "expired"
    await asyncio.sleep(0.05)  # the hung request is cancelled at its deadline


# ---- server replies the machine must classify --------------------------------------------


class ScriptedBackend(fencepost.Backend):
    """Answers every request with ``reply`` (or raises it)."""

    def __init__(self, reply: object) -> None:
        super().__init__()
        self.reply = reply
        self.calls = 0

    async def _execute_async(self, command: fencepost._core.Request | fencepost._core.Command) -> object:
        self.calls += 1
        if isinstance(self.reply, Exception) and not isinstance(self.reply, _core.RedisErrorReply):
            raise self.reply
        return self.reply

    def _execute_sync(self, command: fencepost._core.Request | fencepost._core.Command) -> object:
        self.calls += 1
        if isinstance(self.reply, Exception) and not isinstance(self.reply, _core.RedisErrorReply):
            raise self.reply
        return self.reply


@pytest.mark.parametrize("reply", [{"not": "redis"}, 3.5, [1], _core.RedisErrorReply("WRONGTYPE bad key")])
async def test_nonsense_replies_raise_protocol_error(reply: object) -> None:
    backend = ScriptedBackend(reply)
    with pytest.raises(ProtocolError) as info:
        await fencepost.Lock(backend, "p", ttl=1.0, acquire_timeout=1.0).acquire()
    assert info.value.code == "ERR_PROTOCOL"
    assert "redis protocol error" in str(info.value)


async def test_transient_error_replies_are_retried_until_the_timeout() -> None:
    backend = ScriptedBackend(_core.RedisErrorReply("LOADING Redis is loading the dataset in memory"))
    with pytest.raises(AcquireTimeout) as info:
        await fencepost.Lock(backend, "t", ttl=1.0, acquire_timeout=0).acquire()
    assert info.value.last_error is not None and "LOADING" in info.value.last_error
    with pytest.raises(AcquireTimeout):
        await fencepost.Lock(backend, "t", ttl=1.0, acquire_timeout=0.1, retry_base=0.005, retry_max=0.01).acquire()
    assert backend.calls >= 4  # 1 + retries


def test_transport_errors_are_retried_until_the_timeout() -> None:
    backend = ScriptedBackend(ConnectionResetError("peer went away"))
    with pytest.raises(AcquireTimeout) as info:
        fencepost.Lock(backend, "t", ttl=1.0, acquire_timeout=0).acquire_sync()
    assert info.value.last_error == "ConnectionResetError: peer went away"
    with pytest.raises(AcquireTimeout):
        fencepost.Lock(backend, "t", ttl=1.0, acquire_timeout=0.1, retry_base=0.005, retry_max=0.01).acquire_sync()
    assert backend.calls >= 4


# ---- configuration errors ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"ttl": 0}, "ttl: must be at least 1 ms, got 0 s"),  # the core's durations in seconds
        ({"ttl": 0.0005}, "ttl: must be at least 1 ms, got 0.0005 s"),
        (
            {"ttl": 0.003},
            "ttl: 0.003 s is too short to renew automatically: the default renew interval ttl/3 (0.001 s) "
            "is not below the validity 0.00097 s (ttl less drift and margin); use a longer ttl, a shorter "
            "renew_every, or auto_renew=False",
        ),
        ({"ttl": -1}, "ttl must not be negative, got -1"),
        ({"ttl": math.nan}, "ttl must be a finite number of seconds, got nan"),
        ({"ttl": math.inf}, "ttl must be a finite number of seconds"),
        ({"ttl": "1"}, "ttl must be a number of seconds (float or datetime.timedelta), got '1'"),
        ({"ttl": True}, "ttl must be a number of seconds (float or datetime.timedelta), got True"),
        ({"ttl": 1e9}, "ttl: must be at most 2^31 ms (~24.8 days), got 1000000000 s"),
        ({"ttl": 1e30}, "ttl is too long: durations must be below 2**64 ns (about 584 years), got 1e+30 s"),
        ({"ttl": 10**12}, "ttl is too long: durations must be below 2**64 ns (about 584 years), got 1000000000000 s"),
        ({"ttl": timedelta.max}, "got datetime.timedelta(days=999999999, seconds=86399, microseconds=999999)"),
        ({"acquire_timeout": 1e30}, "acquire_timeout is too long"),
        ({"clock_margin": timedelta(seconds=-1)}, "clock_margin must not be negative, got datetime.timedelta(days=-1, seconds=86399)"),
        (
            {"ttl": 1.0, "renew_every": 1.0},
            "renew_every: must be above 0 and below the validity 0.988 s (ttl 1 s less drift and margin), got 1 s",
        ),
        ({"ttl": 1.0, "renew_every": 0.99}, "renew_every"),
        ({"acquire_timeout": -0.5}, "acquire_timeout must not be negative"),
        ({"retry_base": 0}, "retry_base: must be above 0"),
        ({"retry_base": 0.5, "retry_max": 0.1}, "retry_max: must be at least retry_base 0.5 s, got 0.1 s"),
        ({"drift_factor": 0.5}, "drift_factor: must be in 0 ..< 0.5"),
        ({"drift_factor": math.nan}, "drift_factor"),
        ({"drift_factor": "0.1"}, "drift_factor must be a number"),
        ({"clock_margin": timedelta(seconds=-1)}, "clock_margin must not be negative"),
        ({"purpose": "speed"}, "purpose must be 'efficiency' or 'correctness'"),
        ({"purpose": "correctness"}, "etcd"),
        ({"auto_renew": 1}, "auto_renew must be True or False"),
    ],
)
def test_bad_options_raise_config_error_naming_the_value(kwargs: dict[str, object], fragment: str) -> None:
    backend = fencepost.MemoryBackend()
    with pytest.raises(ConfigError) as info:
        fencepost.Lock(backend, "cfg", **kwargs)  # type: ignore[arg-type]
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, FencepostError)
    assert info.value.code == "ERR_CONFIG"


@pytest.mark.parametrize(
    ("name", "kwargs", "kind", "option"),
    [
        ("cfg", {"ttl": 0}, "invalid_option", "ttl"),
        ("cfg", {"ttl": 1.0, "renew_every": 1.0}, "invalid_option", "renew_every"),
        ("cfg", {"retry_base": 0.5, "retry_max": 0.1}, "invalid_option", "retry_max"),
        ("cfg", {"drift_factor": 0.5}, "invalid_option", "drift_factor"),
        ("cfg", {"purpose": "correctness"}, "unsafe_purpose", "purpose"),
        ("", {}, "invalid_name", None),
        ("x" * 1025, {}, "invalid_name", None),
        # refused before the core, naming the option as the core's refusals do
        ("cfg", {"ttl": "1"}, "invalid_argument", "ttl"),
        ("cfg", {"purpose": "speed"}, "invalid_argument", "purpose"),
    ],
)
def test_config_errors_carry_the_core_kind_and_option(
    name: str, kwargs: dict[str, object], kind: str, option: str | None
) -> None:
    with pytest.raises(ConfigError) as info:
        fencepost.Lock(fencepost.MemoryBackend(), name, **kwargs)  # type: ignore[arg-type]
    assert (info.value.kind, info.value.option) == (kind, option)
    assert not isinstance(info.value, ClockError)
    copy = pickle.loads(pickle.dumps(info.value))
    assert (type(copy), copy.kind, copy.option, str(copy)) == (ConfigError, kind, option, str(info.value))


def test_machine_usage_errors_carry_their_kind() -> None:
    machine = _core.Machine(seed=1)
    machine.timeout(10_000)
    with pytest.raises(ClockError) as clock:
        machine.timeout(5_000)
    assert (clock.value.kind, clock.value.option) == ("time_went_backwards", None)
    for far in (2**62 + 1, 2**64 - 1):  # past the latest instant: no finite deadline is left
        with pytest.raises(ClockError) as late:
            machine.timeout(far)
        assert (late.value.kind, late.value.option) == ("time_out_of_range", None)
        assert "monotonic" in str(late.value)
    assert machine.poll() == ([], None)
    with pytest.raises(ConfigError) as unknown:
        machine.release(20_000, 99)
    assert (unknown.value.kind, unknown.value.option) == ("unknown_lock", None)
    with pytest.raises(ConfigError) as typed:
        machine.release(20_000, "1")  # type: ignore[arg-type]
    assert (typed.value.kind, typed.value.option) == ("invalid_argument", None)
    assert ClockError("c").kind == "time_went_backwards"


def test_shortest_ttl_with_default_options_is_as_documented(backend: fencepost.MemoryBackend) -> None:
    # the default renew interval ttl/3 must be below the validity ttl·0.99 − 2 ms:
    # ttl > 2 ms / (0.99 − 1/3) ≈ 3.046 ms; without auto-renewal ttl > 2 ms / 0.99 ≈ 2.02 ms
    fencepost.Lock(backend, "short", ttl=0.00305)
    with pytest.raises(ConfigError, match="too short to renew automatically"):
        fencepost.Lock(backend, "short", ttl=0.00304)
    fencepost.Lock(backend, "short", ttl=0.00203, auto_renew=False)
    with pytest.raises(ConfigError, match="leaves no validity"):
        fencepost.Lock(backend, "short", ttl=0.00202, auto_renew=False)


async def test_acquire_on_a_closed_backend_raises_backend_error(backend: fencepost.MemoryBackend) -> None:
    held = await fencepost.Lock(backend, "busy", ttl=5.0).acquire()  # kept: a dropped lease is released
    waiting = asyncio.ensure_future(fencepost.Lock(backend, "busy", ttl=5.0).acquire())
    await asyncio.sleep(0.05)  # the second acquisition is waiting between retries
    backend.close()
    with pytest.raises(BackendError, match="closed while acquiring"):
        await asyncio.wait_for(waiting, 2.0)
    with pytest.raises(BackendError, match="closed"):
        await fencepost.Lock(backend, "other", ttl=5.0).acquire()


def test_closing_the_backend_fails_a_blocked_acquire_sync(backend: fencepost.MemoryBackend) -> None:
    held = fencepost.Lock(backend, "busy", ttl=5.0).acquire_sync()  # kept: a dropped lease is released
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            fencepost.Lock(backend, "busy", ttl=5.0).acquire_sync()
        except BaseException as exc:
            outcome.append(exc)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    time.sleep(0.05)  # the waiter is between retries: its acquisition is waiting
    backend.close()
    waiter.join(2.0)
    assert not waiter.is_alive(), "acquire_sync() still blocked after close()"
    assert len(outcome) == 1 and isinstance(outcome[0], BackendError)


def test_correctness_lock_on_redis_needs_the_opt_in(backend: fencepost.MemoryBackend) -> None:
    with pytest.raises(ConfigError, match="etcd"):
        fencepost.Lock(backend, "money", purpose="correctness")
    lock = fencepost.Lock(backend, "money", purpose="correctness", accept_failover_risk=True)
    with lock as lease:
        assert lease.token == 1


@pytest.mark.parametrize("name", ["", 42, None, b"bytes", "x" * 1025])
def test_bad_names_raise_config_error(backend: fencepost.MemoryBackend, name: object) -> None:
    with pytest.raises(ConfigError, match="name"):
        fencepost.Lock(backend, name)  # type: ignore[arg-type]


def test_lone_surrogates_are_config_errors_naming_the_parameter(backend: fencepost.MemoryBackend) -> None:
    with pytest.raises(ConfigError) as info:
        fencepost.Lock(backend, "\udc80")
    assert str(info.value) == "name must be valid UTF-8 (no lone surrogates), got '\\udc80'"
    with pytest.raises(ConfigError, match="^table must be valid UTF-8"):
        fencepost.sql_fenced_update("\ud800x", "id", "t", [])
    with pytest.raises(ConfigError, match="^resource must be valid UTF-8"):
        fencepost.Fence().check("\udc80", 1)
    with pytest.raises(ConfigError, match="^name must be valid UTF-8"):
        backend.lock_key("\udc80")
    with pytest.raises(ConfigError, match="^key_prefix must be valid UTF-8"):
        fencepost.MemoryBackend(key_prefix="p\udc80:")


def test_bad_backend_raises_config_error() -> None:
    with pytest.raises(ConfigError, match="backend must be"):
        fencepost.Lock(object(), "x")  # type: ignore[arg-type]


def test_config_error_is_raised_before_any_request() -> None:
    backend = ScriptedBackend([1, 1])
    with pytest.raises(ConfigError):
        fencepost.Lock(backend, "x", ttl=0)
    assert backend.calls == 0


def test_error_classes_have_codes_and_pickle() -> None:
    assert issubclass(ClockError, ConfigError)
    cases: list[FencepostError] = [
        LockLost("lost", name="n", token=3, reason="expired"),
        AcquireTimeout("timeout", name="n", last_error="boom"),
        StaleToken("stale", resource="r", token=1, highest=2),
        ProtocolError("p"),
        BackendError("b"),
        ConfigError("c"),
    ]
    codes = {type(e).__name__: e.code for e in cases}
    assert codes == {
        "LockLost": "ERR_LOCK_LOST",
        "AcquireTimeout": "ERR_ACQUIRE_TIMEOUT",
        "StaleToken": "ERR_STALE_TOKEN",
        "ProtocolError": "ERR_PROTOCOL",
        "BackendError": "ERR_BACKEND",
        "ConfigError": "ERR_CONFIG",
    }
    for error in cases:
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error)
        assert copy.__dict__ == error.__dict__


# ---- fences ------------------------------------------------------------------------------


def test_fence_rejects_lower_tokens() -> None:
    fence = fencepost.Fence()
    fence.check("row:1", 33)
    fence.check("row:1", 34)
    fence.check("row:1", 34)  # the same lease writes again
    with pytest.raises(StaleToken) as info:
        fence.check("row:1", 33)
    assert (info.value.resource, info.value.token, info.value.highest) == ("row:1", 33, 34)
    assert "stale fencing token 33" in str(info.value)
    fence.check("row:2", 1)  # per resource
    assert fence.highest("row:1") == 34 and fence.highest("nope") is None
    with pytest.raises(ConfigError, match="token must be an int"):
        fence.check("row:1", 35.0)  # type: ignore[arg-type]
    for bad in (-1, 0):  # 0 is no lease's token: a fresh fence would take it from anyone
        with pytest.raises(ConfigError, match=r"token must be a fencing token of a lease \(an int in 1 "):
            fence.check("row:1", bad)


def test_sql_fenced_update() -> None:
    assert fencepost.sql_fenced_update("accounts", "id", "last_token", ["balance", "note"]) == (
        'UPDATE "accounts" SET "balance" = %(balance)s, "note" = %(note)s, "last_token" = %(token)s '
        'WHERE "id" = %(id)s AND "last_token" <= %(token)s'
    )
    assert fencepost.sql_fenced_update("accounts", "id", "last_token", ["balance"], style="dollar") == (
        'UPDATE "accounts" SET "balance" = $3, "last_token" = $2 WHERE "id" = $1 AND "last_token" <= $2'
    )
    with pytest.raises(ConfigError, match="invalid SQL identifier"):
        fencepost.sql_fenced_update("a; DROP TABLE x", "id", "t", [])
    with pytest.raises(ConfigError, match="style must be"):
        fencepost.sql_fenced_update("a", "id", "t", [], style="qmark")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="columns must be a list of str"):
        fencepost.sql_fenced_update("a", "id", "t", "balance")  # type: ignore[arg-type]


def test_sql_fenced_update_refuses_columns_confused_with_its_parameters() -> None:
    # pyformat: a column named "token" would be bound as %(token)s, the fence's token
    with pytest.raises(ConfigError, match='column "token"') as info:
        fencepost.sql_fenced_update("inv", "id", "t", ["token", "body"])
    assert "token" in str(info.value) and info.value.code == "ERR_CONFIG"
    with pytest.raises(ConfigError, match='column "id"'):
        fencepost.sql_fenced_update("inv", "id", "t", ["id"])  # the id column itself
    with pytest.raises(ConfigError, match='column "t"'):
        fencepost.sql_fenced_update("inv", "id", "t", ["t"])  # the token column itself
    with pytest.raises(ConfigError, match='column "body".*twice'):
        fencepost.sql_fenced_update("inv", "id", "t", ["body", "body"])
    # dollar parameters are positional: a "token" column is just a column
    assert fencepost.sql_fenced_update("inv", "id", "t", ["token", "body"], style="dollar") == (
        'UPDATE "inv" SET "token" = $3, "body" = $4, "t" = $2 WHERE "id" = $1 AND "t" <= $2'
    )


async def test_memory_fenced_set_accepts_current_and_rejects_stale_tokens(backend: fencepost.MemoryBackend) -> None:
    async with fencepost.Lock(backend, "doc", ttl=5.0) as first:
        await backend.fenced_set("doc:data", "doc:fence", first.token, "v1")
    async with fencepost.Lock(backend, "doc", ttl=5.0) as second:
        await backend.fenced_set("doc:data", "doc:fence", second.token, "v2")
    with pytest.raises(StaleToken) as info:
        backend.fenced_set_sync("doc:data", "doc:fence", first.token, "stale")
    assert (info.value.token, info.value.highest) == (first.token, second.token)
    assert backend.server.get("doc:data") == "v2"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ((b"doc:data", "doc:fence", 1, "v"), "data_key must be a str, got b'doc:data' (bytes)"),
        (("doc:data", 7, 1, "v"), "fence_key must be a str, got 7 (int)"),
        (("doc:data", "doc:fence", 1, 5), "value must be a str or bytes, got 5 (int)"),
        (("doc:data", "doc:fence", 1, None), "value must be a str or bytes, got None"),
        (("doc:data", "doc:fence", 1, b"\xff"), "value must be str or UTF-8 bytes"),
        (("doc:data", "doc:fence", 1, "\udc80"), "value must be valid UTF-8 (no lone surrogates)"),
        (("doc:data", "doc:fence", "1", "v"), "token must be an int"),
    ],
)
async def test_fenced_set_bad_arguments_are_config_errors(
    backend: fencepost.MemoryBackend, args: tuple[object, object, object, object], fragment: str
) -> None:
    with pytest.raises(ConfigError) as info:
        backend.fenced_set_sync(*args)  # type: ignore[arg-type]
    assert fragment in str(info.value)
    with pytest.raises(ConfigError) as info:
        await backend.fenced_set(*args)  # type: ignore[arg-type]
    assert fragment in str(info.value)
    assert backend.server.get("doc:data") is None


async def test_fenced_set_accepts_utf8_bytes_values(backend: fencepost.MemoryBackend) -> None:
    backend.fenced_set_sync("doc:data", "doc:fence", 1, b"caf\xc3\xa9")
    assert backend.server.get("doc:data") == "café"
    await backend.fenced_set("doc:data", "doc:fence", 2, bytearray(b"v2"))
    assert backend.server.get("doc:data") == "v2"


def test_redis_scripts_lists_every_script() -> None:
    scripts = fencepost.redis_scripts()
    assert set(scripts) == {"acquire", "renew", "release", "fenced_set", "acquire_fair", "release_fair", "is_locked", "force_release", "inspect", "list", "renew_many"}
    for sha, source in scripts.values():
        assert len(sha) == 40 and "redis.call" in source


# ---- drivers -----------------------------------------------------------------------------


def test_thread_driver_stops_after_its_idle_time_without_locks(backend: fencepost.MemoryBackend) -> None:
    with fencepost.Lock(backend, "t", ttl=1.0):
        driver = backend._sync_driver()
        thread = driver.thread
        assert thread is not None and thread.daemon and thread.is_alive()
    with fencepost.Lock(backend, "t", ttl=1.0):  # kept across acquisitions
        assert driver.thread is thread
    driver.idle_s = 0.1
    assert wait_until(lambda: not thread.is_alive(), timeout=2.0)
    assert driver.thread is None
    with fencepost.Lock(backend, "t", ttl=1.0):  # and starts again on demand
        assert driver.thread is not None and driver.thread.is_alive()


def test_close_marks_held_leases_lost_and_frees_the_server(backend: fencepost.MemoryBackend) -> None:
    lock = fencepost.Lock(backend, "closing", ttl=5.0)
    lease = lock.acquire_sync()
    backend.close()
    assert lease.lost.is_set() and lease.lost_reason == "closed"
    with pytest.raises(LockLost):
        lease.check()
    assert wait_until(lambda: backend.server.lock_owner("closing") is None, timeout=2.0)
    with pytest.raises(BackendError, match="closed"):
        fencepost.Lock(backend, "closing").acquire_sync()


def test_fifty_threads_renew_and_release_every_lease(backend: fencepost.MemoryBackend) -> None:
    """50 threads each hold their own lock for 0.5 s with ttl=0.3 (renewed every 0.1 s):
    one poll() often yields several renewals or releases at once, and every one of them
    must run exactly once (a lost renewal is a spurious LockLost, a lost release an
    orphaned lock)."""
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            with fencepost.Lock(backend, f"t{i}", ttl=0.3):
                time.sleep(0.5)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not [t for t in threads if t.is_alive()]
    assert errors == []
    machine = backend._sync_driver()._machine
    assert wait_until(lambda: machine.lock_count() == 0, timeout=0.2), machine.lock_count()
    assert all(backend.server.lock_owner(f"t{i}") is None for i in range(50))


def test_close_releases_every_held_lock_on_the_server(backend: fencepost.MemoryBackend) -> None:
    """close() emits one release per held lock in a single poll(): all must run."""
    leases = [fencepost.Lock(backend, f"c{i}", ttl=5.0).acquire_sync() for i in range(5)]
    assert all(backend.server.lock_owner(f"c{i}") == lease.owner_id for i, lease in enumerate(leases))
    backend.close()
    assert wait_until(
        lambda: all(backend.server.lock_owner(f"c{i}") is None for i in range(5)), timeout=1.0
    ), [backend.server.lock_owner(f"c{i}") for i in range(5)]
    assert all(lease.lost_reason == "closed" for lease in leases)


async def test_sync_and_async_leases_on_one_backend_contend(backend: fencepost.MemoryBackend) -> None:
    held = await fencepost.Lock(backend, "mixed", ttl=5.0).acquire()
    result: list[BaseException] = []

    def blocking() -> None:
        try:
            fencepost.Lock(backend, "mixed", ttl=5.0, acquire_timeout=0).acquire_sync()
        except BaseException as exc:
            result.append(exc)

    await asyncio.get_running_loop().run_in_executor(None, blocking)
    assert len(result) == 1 and isinstance(result[0], AcquireTimeout)
    assert held.token == 1


def test_async_lease_check_from_a_worker_thread_is_thread_safe() -> None:
    """lease.check() / valid_for() inside asyncio.to_thread never touch the loop from the
    worker thread (debug mode raises for call_later / call_soon off the loop thread):
    the poke is handed to the loop, the lease stays renewed, its state is readable."""
    problems: list[BaseException] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(
            lambda _loop, ctx: problems.append(ctx.get("exception") or RuntimeError(ctx["message"]))
        )
        backend = fencepost.MemoryBackend()
        # ttl 300 ms: a renewal every 100 ms, so the worker's pokes often find a timer
        # due; 200 ms of slack for a busy machine
        async with fencepost.Lock(backend, "threaded", ttl=0.3) as lease:

            def work() -> int:
                checks = 0
                deadline = time.monotonic() + 0.7
                while time.monotonic() < deadline:
                    lease.check()
                    assert lease.valid_for() > 0
                    checks += 1
                return checks

            assert await asyncio.to_thread(work) > 100
            lease.check()
        assert backend.server.lock_owner("threaded") is None

    asyncio.run(main(), debug=True)
    assert problems == []


@pytest.mark.parametrize("how", ["deleted", "expired"])
def test_async_lease_loss_is_reported_by_check_in_a_worker_thread(how: str) -> None:
    async def main() -> LockLost:
        backend = fencepost.MemoryBackend()
        lock = fencepost.Lock(backend, "threaded", ttl=0.2, auto_renew=how != "expired")
        lease = await lock.acquire()

        def work() -> LockLost:
            if how == "deleted":
                backend.server.delete_lock("threaded")
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                try:
                    lease.check()
                except LockLost as lost:
                    assert lease.valid_for() == 0.0
                    return lost
                time.sleep(0.002)
            raise AssertionError("check() never reported the loss")

        lost = await asyncio.to_thread(work)
        assert lease.lost.is_set()
        with pytest.raises(LockLost):
            await lock.release()
        return lost

    lost = asyncio.run(main(), debug=True)
    assert lost.reason == ("renew_rejected" if how == "deleted" else "expired")


def test_async_lease_check_after_its_loop_closed_reports_expiry() -> None:
    """Once its loop is closed nothing renews the lease; check() past the deadline says
    so (instead of failing on the closed loop)."""
    backend = fencepost.MemoryBackend()

    async def main() -> fencepost.Lease:
        return await fencepost.Lock(backend, "orphan", ttl=0.1).acquire()

    lease = asyncio.run(main())
    lease.check()  # still within its validity
    time.sleep(0.12)
    with pytest.raises(LockLost) as info:
        lease.check()
    assert info.value.reason == "expired" and lease.valid_for() == 0.0


# ---- the native module's conversions -----------------------------------------------------


def machine_acquire(machine: _core.Machine, now: int, name: str = "m", ttl_ns: int = 1_000_000_000) -> int:
    options: _core.LockOptionsSpec = {
        "ttl": ttl_ns,
        "purpose": "efficiency",
        "accept_failover_risk": False,
        "acquire_timeout": None,
        "retry_base": 10_000_000,
        "retry_max": 500_000_000,
        "renew_every": None,
        "auto_renew": True,
        "drift_factor": 0.01,
        "clock_margin": 2_000_000,
    }
    return machine.acquire(now, name, options)


def test_machine_emits_requests_and_events_as_data() -> None:
    machine = _core.Machine(seed=7)
    server = _core.MemoryRedis()
    lock = machine_acquire(machine, 1_000)
    outputs, next_ns = machine.poll()
    assert len(outputs) == 1 and isinstance(outputs[0], _core.Request)
    request = outputs[0]
    assert (request.lock, request.operation, request.script) == (lock, "acquire", "acquire")
    assert request.keys == ["fencepost:{m}:lock", "fencepost:{m}:token"]
    assert request.args == [machine.owner(lock), "1000"]
    assert next_ns is not None and request.deadline_ns == 1_000 + 988_000_000
    machine.reply(2_000, request.id, server.execute(2_000, request))
    outputs, next_ns = machine.poll()
    (event,) = outputs
    assert isinstance(event, _core.Event)
    assert (event.kind, event.token, event.valid_until_ns) == ("acquired", 1, 1_000 + 988_000_000)
    assert machine.valid_until_ns(lock) == 1_000 + 988_000_000
    assert next_ns == 1_000 + 333_333_333  # renew at ttl / 3 after sending


def test_machine_rejects_wrong_types_and_backwards_time() -> None:
    machine = _core.Machine(seed=1)
    with pytest.raises(ConfigError, match="now_ns must be an int"):
        machine.timeout(1.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="now_ns must be an int"):
        machine.timeout(True)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="now_ns must be an integer in 0"):
        machine.timeout(-1)
    machine.timeout(10_000)
    with pytest.raises(ClockError, match="time went backwards"):
        machine.timeout(5_000)
    with pytest.raises(ConfigError, match="unknown lock"):
        machine.release(20_000, 99)
    with pytest.raises(ConfigError, match="request_id must be an int"):
        machine.reply(20_000, "1", 1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "outcome"),
    [
        ([1, 7], ("acquired", 7)),
        ((b"1", b"7"), ("acquired", 7)),
        (["1", "7"], ("acquired", 7)),
        ([True, 7], ("acquired", 7)),
        ([1, 2**70], ("acquire_failed", "protocol")),
        ([[[[]]]], ("acquire_failed", "protocol")),
        (object(), ("acquire_failed", "protocol")),
        (ValueError("WRONGTYPE Operation against a key"), ("acquire_failed", "protocol")),
    ],
)
def test_reply_values_are_converted_without_panicking(value: object, outcome: tuple[str, object]) -> None:
    machine = _core.Machine(seed=3)
    machine_acquire(machine, 0)
    (request,), _ = machine.poll()
    assert isinstance(request, _core.Request)
    machine.reply(1, request.id, value)
    events = [o for o in machine.poll()[0] if isinstance(o, _core.Event)]
    assert len(events) == 1
    kind, detail = outcome
    assert events[0].kind == kind
    assert (events[0].token if kind == "acquired" else events[0].reason) == detail


def test_deeply_nested_reply_is_an_error_not_a_crash() -> None:
    value: list[object] = []
    for _ in range(10_000):
        value = [value]
    machine = _core.Machine(seed=3)
    machine_acquire(machine, 0)
    (request,), _ = machine.poll()
    assert isinstance(request, _core.Request)
    machine.reply(1, request.id, value)
    events = [o for o in machine.poll()[0] if isinstance(o, _core.Event)]
    assert [(e.kind, e.reason) for e in events] == [("acquire_failed", "protocol")]
    assert events[0].message is not None and "nested deeper than 32" in events[0].message
