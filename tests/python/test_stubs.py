"""The type stubs of the native module (``fencepost/_core.pyi``) agree with it: mypy's
stubtest finds nothing beyond the documented entries of
``bindings-python/stubtest-allowlist.txt``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import fencepost

REPO = Path(__file__).resolve().parents[2]
ALLOWLIST = REPO / "bindings-python" / "stubtest-allowlist.txt"

pytest.importorskip("mypy.stubtest")


def test_stubtest_finds_nothing_beyond_the_allowlist() -> None:
    # stubtest imports fencepost._core from where this test imports fencepost
    package_root = str(Path(fencepost.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy.stubtest",
            "fencepost._core",
            "--allowlist",
            str(ALLOWLIST),
            "--concise",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
