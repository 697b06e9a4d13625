"""A session's records: what a store's reads return (sessions, checkpoints, entries, retention).

Plain values, no database: the rules of a default label, a steering message, a user-turn count.
"""

from __future__ import annotations

import json
import os
import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from alpstore.codec import Digest, digest_hex
from alpstore.errors import UsageError
from alpstore.rules.turns import is_user_turn
from alpstore.views import View

Status = Literal["created", "active", "paused", "checkpointing", "terminated"]
RETENTION_MODES = ("all", "single", "last_n")
DEFAULT_RETENTION_N = 5


@dataclass(frozen=True)
class Retention:
    """How many of a session's checkpoints to keep (CK-8: only this session's are pruned)."""

    mode: str = "all"
    n: int = DEFAULT_RETENTION_N

    def __post_init__(self) -> None:
        if self.mode not in RETENTION_MODES:
            raise UsageError(f"retention mode {self.mode!r}: expected all, single or last_n")
        if type(self.n) is not int or self.n < 1:
            raise UsageError(f"retention n {self.n!r}: expected a positive integer")


class Entry(NamedTuple):
    """One entry of a covering list: a message (leaf) or a summary covering other entries.

    A named tuple rather than a dataclass: hydration builds one per entry, and tuples are
    several times cheaper to make.
    """

    digest: Digest
    kind: Literal["message", "summary"]
    value: Any
    covers: tuple[Digest, ...] = ()

    @property
    def hex(self) -> str:
        """The digest in hex."""
        return digest_hex(self.digest)


@dataclass(frozen=True)
class CheckpointInfo:
    """A shallow checkpoint: a pointer to a view plus kernel and working-memory blobs."""

    id: int
    session: str
    seq: int
    turn: int
    label: str
    trigger: str | None
    view: View
    abandoned: bool
    created_at: float
    kernel_digest: Digest | None = None
    wm_digest: Digest | None = None
    covering_digest: bytes | None = None
    """The digest of the covering list (None: not recorded); see ``alpstore.views.cover_term``."""

    @property
    def length(self) -> int:
        """How many entries the covering list holds."""
        return self.view.length

    @property
    def archive_view_id(self) -> str:
        """The view this checkpoint points at."""
        return self.view.archive_view_id


@dataclass(frozen=True)
class SessionInfo:
    """A session row, as the CLI and users see it."""

    id: int
    uuid: str
    name: str | None
    status: Status
    turn: int
    head: View
    parent: str | None
    root: str
    source_checkpoint: int | None
    backtrack_count: int
    retention: Retention
    created_at: float
    updated_at: float
    origin: dict[str, Any] | None

    @property
    def head_length(self) -> int:
        """Entries in the live covering list."""
        return self.head.length


@dataclass(frozen=True)
class BacktrackInfo:
    """What a backtrack did."""

    id: int
    session: str
    steps: int
    from_checkpoint: int | None
    to_checkpoint: CheckpointInfo
    steering_digest: Digest | None
    automatic: bool


def evolve(info: SessionInfo, **changes: Any) -> SessionInfo:
    """A copy of ``info`` with ``changes`` (the hot-path twin of ``dataclasses.replace``)."""
    new = object.__new__(SessionInfo)
    new.__dict__.update(info.__dict__)
    new.__dict__.update(changes)
    return new


def default_label(turn: int) -> str:
    """mas-lab's default checkpoint label: ``turn-NNNN``."""
    return f"turn-{turn:04d}"


def steering_message(text: str) -> dict[str, Any]:
    """The steering text injected as the next user turn (``/steer <text>``)."""
    return {"role": "user", "content": f"/steer {text}"}


def steering_text(doc: Any) -> str | None:
    """The text of a stored steering message, or None when it is not one (a file from another
    machine may have named any message: ``42``, a list, a non-text content).
    """
    content = doc.get("content") if isinstance(doc, dict) else None
    return content if isinstance(content, str) else None


def count_user_turns(messages: Sequence[Any]) -> int:
    """How many user turns a batch of messages starts (tool results fed back do not count)."""
    return sum(1 for m in messages if is_user_turn(m))


def new_session_uuid() -> str:
    """A fresh session id (UUID4 text).

    Made as :func:`uuid.uuid4` makes one (16 random bytes from ``os.urandom``, version 4), but
    not through it: a test suite that patches ``uuid.uuid4`` for its own ids (LangGraph's
    ``deterministic_uuids``) would otherwise see alpstore draw from its sequence.
    """
    return str(uuidlib.UUID(bytes=os.urandom(16), version=4))


def event_detail(detail: dict[str, Any]) -> str:
    """Serialise an event's detail for the ``session_events`` table.

    A string that is not valid Unicode (a lone surrogate, e.g. from a LangGraph task's error
    text) cannot be stored as UTF-8 text: the whole detail is then written ASCII-only, every
    other character as a JSON escape (``ensure_ascii``), which reads back as the same strings.
    """
    text = json.dumps(detail, ensure_ascii=False, sort_keys=True)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(detail, ensure_ascii=True, sort_keys=True)
    return text
