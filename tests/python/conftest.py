"""Shared fixtures of the fencepost Python tests."""

from __future__ import annotations

import time
from typing import Callable

import pytest

import fencepost


@pytest.fixture
def backend() -> fencepost.MemoryBackend:
    """A fresh in-memory backend (its own server and machines)."""
    return fencepost.MemoryBackend()


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0, step: float = 0.005) -> bool:
    """Polls ``predicate`` until it holds or ``timeout`` seconds pass (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()
