"""The resource side of fencing: refuse writes that carry an old fencing token.

* :class:`Fence` — an in-memory fence (highest token per resource), for resources your
  process guards itself.
* :func:`sql_fenced_update` — the SQL of an ``UPDATE`` that checks the token in its
  ``WHERE`` clause, so check and write are one atomic step in the database.
* :meth:`fencepost.Backend.fenced_set` — the same for a Redis key (a Lua script).
* :func:`redis_scripts` — every Lua script fencepost runs, for ``SCRIPT LOAD``.

A write carrying the *same* token as the highest seen is accepted (one lease may write
many times); only a lower token is stale.
"""

from __future__ import annotations

from ._core import Fence, redis_scripts, sql_fenced_update

__all__ = ["Fence", "sql_fenced_update", "redis_scripts"]
