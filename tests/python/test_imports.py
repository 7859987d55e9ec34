"""The package imports in one direction: errors, then leases, units and observations, driver, backend, lock, then the
adapters, then ``__init__``. No module imports one later in that order, not even inside
a function or under ``TYPE_CHECKING`` (an import hidden in a function is a cycle all
the same). The native ``_core`` is below them all."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, Tuple

import fencepost
from fencepost import _core, _lease

PACKAGE = Path(fencepost.__file__).resolve().parent

#: Each module's layer; a module may import only modules of a lower layer.
LAYERS: Dict[str, int] = {
    "_core": 0,
    "errors": 1,
    "_lease": 2,
    "_units": 2,
    "observe": 2,
    "_leader": 2,
    "_holder": 2,
    "_driver": 3,
    "_backend": 4,
    "lock": 5,
    "fence": 5,
    # the adapters, side by side: none imports another
    "redis": 6,
    "postgres": 6,
    "etcd": 6,
    "zookeeper": 6,
    "kubernetes": 6,
    "memory": 6,
    # the election composes the lock API, on any adapter
    "election": 6,
    # Redlock runs the Redis adapter on each master
    "redlock": 7,
    "__init__": 8,
}


def package_imports(source: str) -> Iterator[Tuple[int, str]]:
    """``(line, module)`` of every import of a fencepost module in ``source``, wherever
    it is (module level, a function, an ``if TYPE_CHECKING`` block)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module is None:  # from . import x, y
                for alias in node.names:
                    yield node.lineno, alias.name
            elif node.level == 1 and node.module is not None:  # from .x import y
                yield node.lineno, node.module.split(".")[0]
            elif node.level == 0 and node.module is not None and node.module.split(".")[0] == "fencepost":
                parts = node.module.split(".")
                if len(parts) > 1:
                    yield node.lineno, parts[1]
                else:
                    for alias in node.names:
                        yield node.lineno, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "fencepost":
                    yield node.lineno, parts[1] if len(parts) > 1 else "__init__"


def test_every_module_has_a_layer() -> None:
    modules = {p.stem for p in PACKAGE.glob("*.py")} | {"_core"}
    assert modules == set(LAYERS)


def test_modules_import_only_lower_layers() -> None:
    wrong = []
    for path in sorted(PACKAGE.glob("*.py")):
        layer = LAYERS[path.stem]
        for line, imported in package_imports(path.read_text()):
            if LAYERS[imported] >= layer:
                wrong.append(f"{path.name}:{line} imports {imported}")
    assert wrong == []


def test_the_check_sees_imports_in_functions_and_type_checking_blocks() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .lock import Lease\n"
        "def f():\n    from . import _backend\n    import fencepost.memory\n"
    )
    assert sorted(m for _, m in package_imports(source)) == ["_backend", "lock", "memory"]


def test_every_loss_reason_of_the_core_has_a_message() -> None:
    assert set(_lease._LOST_WHY) == set(_core.LOST_REASONS)
    assert _core.LOST_CLOSED in _core.LOST_REASONS
