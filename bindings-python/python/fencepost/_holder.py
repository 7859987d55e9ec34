"""Holder metadata and the record an operator query returns: :class:`Holder`,
:func:`standard_metadata`, and the encoding of ``Lock(metadata=...)``."""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

from .errors import ConfigError

__all__ = ["Holder", "standard_metadata"]

@dataclass(frozen=True)
class Holder:
    """Who holds a lock, as :meth:`fencepost.Backend.inspect` and
    :meth:`~fencepost.Backend.list` found it on the server. A snapshot for operators:
    it may be stale on arrival and decides nothing.

    Attributes:
        name: the lock name.
        owner: the holder's owner id (32 hex digits; on Kubernetes the Lease's
            ``holderIdentity``, which a client-go elector sets to its own identity), or
            None when the server keeps none.
        token: the holder's fencing token (the lock's counter, ZooKeeper's czxid,
            Kubernetes' ``leaseTransitions``), or None when unknown.
        ttl_left: seconds left on the holder's lease as the server counts them
            (``PTTL``); on Kubernetes the record's ``leaseDurationSeconds``, an upper
            bound; None when unknown (ZooKeeper: the session has the deadline).
        waiters: contenders queued behind the holder (fair Redis; ZooKeeper: the
            contender nodes behind it), or None where the server keeps no queue (plain
            Redis and Kubernetes waiters leave no trace until they win).
        metadata: the ``metadata`` the holder acquired with (``Lock(metadata=...)``),
            or None when it gave none.
    """

    name: str
    owner: Optional[str]
    token: Optional[int]
    ttl_left: Optional[float]
    waiters: Optional[int]
    metadata: Optional[Dict[str, str]]

    @classmethod
    def _from_core(cls, d: Mapping[str, Any]) -> "Holder":
        ns = d["ttl_left_ns"]
        return cls(
            name=d["name"],
            owner=d["owner"],
            token=d["token"],
            ttl_left=None if ns is None else ns / 1e9,
            waiters=d["waiters"],
            metadata=None if d["metadata"] is None else dict(d["metadata"]),
        )


def standard_metadata(label: Optional[str] = None) -> Dict[str, str]:
    """The standard holder metadata of this process, for ``Lock(metadata=...)``:
    ``host`` (:func:`socket.gethostname`), ``pid``, ``process`` (the program's file
    name, ``sys.argv[0]``), ``acquired_at`` (this call's wall-clock time in UTC,
    ISO 8601: display only, never used for a decision; call it when you build the
    lock) and, when given, ``label``.

    Raises:
        ConfigError: ``label`` is not a str (or None).
    """
    if label is not None and not isinstance(label, str):
        raise ConfigError(f"label must be a str or None, got {label!r}", kind="invalid_argument")
    out = {
        "host": socket.gethostname(),
        "pid": str(os.getpid()),
        "process": os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else sys.executable,
        "acquired_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds"),
    }
    if label is not None:
        out["label"] = label
    return out


def encode_metadata(metadata: object) -> Optional[str]:
    """``Lock(metadata=...)`` as the core's option: compact JSON text, or None.

    Raises:
        ConfigError (option ``metadata``): not a mapping of str to str (the core
            refuses more than 4096 bytes when the lock is checked).
    """
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise ConfigError(
            f"metadata must be a mapping of str to str (or None), got {metadata!r}", option="metadata"
        )
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ConfigError(
                f"metadata keys and values must be str, got {key!r}: {value!r}", option="metadata"
            )
    # the size limit is the core's to check, like every range
    return json.dumps(dict(metadata), ensure_ascii=False, separators=(",", ":"), sort_keys=True)
