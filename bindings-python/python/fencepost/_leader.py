"""What followers read of an election: :class:`Leader`, and the record a leader
writes where its backend keeps a value with the lock (see :mod:`fencepost.election`).
Below the adapters, which read it, and the election, which writes it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

__all__ = ["Leader", "read_record"]


@dataclass(frozen=True)
class Leader:
    """The current leader as a follower reads it (:meth:`fencepost.Election.leader`).

    Attributes:
        identity: the leader's ``identity``; None when the leader is not a fencepost
            election (etcd: a ``concurrency.Election`` candidate of etcd's own client),
            or has not yet written its record (the instant after it won).
        value: the leader's ``value`` (None if it gave none); for a leader of etcd's own
            ``concurrency.Election``, the value of its key.
        token: the leader's fencing token (its lease's).
    """

    identity: Optional[str]
    value: Optional[str]
    token: int


def _record(identity: str, value: Optional[str]) -> str:
    """What a leader writes where its backend keeps a value with the lock."""
    return json.dumps({"identity": identity, "value": value}, separators=(",", ":"))


def read_record(text: Optional[str], token: int, owner_id: Optional[str] = None) -> Leader:
    """The :class:`Leader` of a holder whose stored value is ``text``: a record
    written by :func:`_record`; the holder's own ``owner_id`` (what the lock recipe
    stores: the record is not written yet), read as neither identity nor value; or
    any other text (a candidate of another client), taken as the value with no
    identity."""
    if text is not None and text == owner_id:
        return Leader(identity=None, value=None, token=token)
    if text is not None:
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        if (
            isinstance(doc, dict)
            and set(doc) == {"identity", "value"}
            and isinstance(doc["identity"], str)
            and (doc["value"] is None or isinstance(doc["value"], str))
        ):
            return Leader(identity=doc["identity"], value=doc["value"], token=token)
    return Leader(identity=None, value=text, token=token)
