"""How far a transcript was imported into a session: a ``session_events`` row of kind
``import`` per import that wrote something (no schema of its own).

The newest row says where the next import starts: the byte offset and line count read, a
fingerprint of the bytes before the offset (a file that no longer extends them is refused),
the last record's id, and whether a turn is open. Each row also holds the record ids that
reached a checkpoint in that import (``tips``): a later rewind to one of them finds its
checkpoint without reading the file again.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alpstore.canonical import digest_bytes
from alpstore.db import raw as rsql
from alpstore.errors import InputError

if TYPE_CHECKING:
    from alpstore.db.raw import AnyConnection

EVENT_KIND = "import"
HEAD_BYTES = 4096
TAIL_BYTES = 256


@dataclass
class SourceState:
    """One source's import state (the detail of an ``import`` event).

    Fields:
        format: ``claude-code`` or ``codex``.
        file: the file read (for a child session: the file its records came from).
        offset: bytes of ``file`` imported (a torn last line excluded).
        lines: lines of ``file`` imported.
        head: BLAKE3 (hex) of the file's first bytes up to ``offset`` (at most 4 KiB).
        tail: BLAKE3 (hex) of the 256 bytes before ``offset``.
        tip: the id of the last record on the session's line.
        open: the current turn's messages are appended but not yet checkpointed.
        group: ``message.id`` of the line's last message (a later record may extend it).
        tips: record ids that reached a checkpoint in this import, with its id (0: the empty
            start, before the first turn).
        skipped: records of each kind not stored, in this import.
        bad: numbers of malformed lines skipped (``--skip-bad-lines``) in this import.
        written: messages written by this import.
        children_open: child sessions (subagents) whose last turn is open.
    """

    format: str
    file: str
    offset: int = 0
    lines: int = 0
    head: str = ""
    tail: str = ""
    tip: str | None = None
    open: bool = False
    group: str | None = None
    tips: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    bad: list[int] = field(default_factory=list)
    written: int = 0
    children_open: list[str] = field(default_factory=list)

    def detail(self) -> dict[str, Any]:
        """The event's JSON detail."""
        return asdict(self)

    @classmethod
    def of(cls, detail: dict[str, Any]) -> SourceState:
        """Read back an event's detail (unknown keys ignored)."""
        known = {k: v for k, v in detail.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def latest(conn: AnyConnection, session_id: int) -> SourceState | None:
    """The session's newest import state, or None (never imported from a transcript)."""
    row = rsql.fetchone(
        conn,
        "SELECT detail FROM session_events WHERE session_id = ? AND kind = ? "
        "ORDER BY id DESC LIMIT 1",
        (session_id, EVENT_KIND),
    )
    return None if row is None else SourceState.of(json.loads(row[0]))


def all_tips(conn: AnyConnection, session_id: int) -> dict[str, int]:
    """Every record id that reached a checkpoint, over all the session's imports."""
    tips: dict[str, int] = {}
    for (detail,) in rsql.fetchall(
        conn,
        "SELECT detail FROM session_events WHERE session_id = ? AND kind = ? ORDER BY id",
        (session_id, EVENT_KIND),
    ):
        tips.update(json.loads(detail).get("tips") or {})
    return tips


def fingerprint(path: Path, offset: int) -> tuple[str, str]:
    """``(head, tail)`` digests of ``path``'s bytes before ``offset``."""
    with path.open("rb") as handle:
        head = handle.read(min(offset, HEAD_BYTES))
        start = max(0, offset - TAIL_BYTES)
        handle.seek(start)
        tail = handle.read(offset - start)
    return digest_bytes(head).hex(), digest_bytes(tail).hex()


def require_extends(path: Path, state: SourceState, size: int, session: str) -> None:
    """Refuse a file that no longer holds what was imported from it.

    Raises:
        InputError: the file is shorter than what was imported, or its bytes before that
            point changed.
    """
    if state.offset == 0:
        return
    if size < state.offset or fingerprint(path, state.offset) != (state.head, state.tail):
        raise InputError(
            f"{path}: no longer extends what was imported into session {session} "
            f"({state.offset} bytes, {state.lines} lines); nothing imported",
            hint="a rewritten transcript is another session: import it with --id NEW-ID",
        )
