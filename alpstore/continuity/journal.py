"""``compact-events.jsonl``: the raw compaction journal: append, rotate, replay, reduce (JR-1…6).

The hook appends one line per compaction phase, exactly as alp-code does, and never normalises,
rotates or reads. Everything else happens on read: replay ``.1`` then the current file, dropping
and counting bad lines; normalise; merge duplicates by ``dedupeKey``; reduce to ``generation``,
``pending`` and ``lastCompleted``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from alpstore.continuity.files import atomic_write, iso_now, locked
from alpstore.continuity.paths import ExecutionPaths
from alpstore.errors import ContinuityError, StorageError
from alpstore.events import after_torn_tail

MAX_LINE_BYTES = 16 * 1024
"""A journal line (without its newline) may not be longer (JR-2)."""
ROTATE_AT_BYTES = 1024 * 1024
"""At this size ``status``/``validate`` rename the journal to ``.jsonl.1`` (JR-2)."""
MAX_VALUE_CHARS = 256
"""Each kept payload value is cut to this many characters."""
PHASES = {"pre": "started", "post": "completed"}
"""The hook's phase argument → the normalised event kind."""
TRIGGERS = ("manual", "auto")
WHITELIST: dict[str, tuple[str, ...]] = {
    "claude": ("session_id", "trigger", "model", "prompt_id", "agent_id", "agent_type"),
    "codex": ("session_id", "trigger", "model", "turn_id", "agent_id", "agent_type"),
}
"""Payload keys kept per runtime; everything else (compact_summary, transcript_path…) is dropped."""
EVENT_ID_KEY = {"claude": "prompt_id", "codex": "turn_id"}
SEQUENCE_FILE = "compact-events.seq"
"""Counter of compactions begun, for payloads without an event id (see :func:`next_sequence`)."""


def _as_string(value: Any) -> str | None:
    """A scalar payload value as alp-code's ``String(value)``; None for objects, arrays, null."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int):
        text = str(value)
    elif isinstance(value, float):
        text = str(int(value)) if value.is_integer() and abs(value) < 1e21 else repr(value)
    elif isinstance(value, str):
        text = value
    else:
        return None
    # A lone surrogate (legal in JSON's \u escapes) cannot be written as UTF-8.
    return text[:MAX_VALUE_CHARS].encode("utf-8", "replace").decode("utf-8")


def source_of(runtime: str, payload: bytes) -> dict[str, str]:
    """The whitelisted, stringified, cut scalars of a hook payload; ``{parseError}`` if not JSON.

    Raises:
        ContinuityError: unknown runtime.
    """
    if runtime not in WHITELIST:
        raise ContinuityError(f"unknown runtime {runtime!r}", hint="use claude or codex")
    try:
        doc = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return {"parseError": str(exc)[:MAX_VALUE_CHARS]}
    if not isinstance(doc, dict):
        return {"parseError": f"payload is a JSON {type(doc).__name__}, not an object"}
    source: dict[str, str] = {}
    for key in WHITELIST[runtime]:
        value = _as_string(doc.get(key))
        if value is not None:
            source[key] = value
    return source


def build_line(
    *,
    execution_id: str,
    policy_hash: str | None,
    runtime: str,
    phase: str,
    source: dict[str, str],
    seq: int | None = None,
    now: datetime | None = None,
) -> bytes:
    """One journal line (with its newline) in alp-code's envelope.

    The phase is the hook's own argument, never the payload's ``hook_event_name``; ``source``
    comes from :func:`source_of`; ``seq`` is added only when given (see :func:`next_sequence`).

    Raises:
        ContinuityError: unknown runtime or phase, or a line over 16 KiB.
    """
    if runtime not in WHITELIST:
        raise ContinuityError(f"unknown runtime {runtime!r}", hint="use claude or codex")
    if phase not in PHASES:
        raise ContinuityError(f"unknown phase {phase!r}", hint="use pre or post")
    doc: dict[str, Any] = {
        "v": 1,
        "at": iso_now(now),
        "executionId": execution_id,
        "policyHash": policy_hash,
        "runtime": runtime,
        "phase": phase,
    }
    if seq is not None:
        doc["seq"] = seq
    doc["source"] = source
    line = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    if len(line) > MAX_LINE_BYTES:
        raise ContinuityError(
            f"journal line of {len(line)} bytes is over the {MAX_LINE_BYTES // 1024} KiB limit; "
            "not recorded"
        )
    return line + b"\n"


def needs_sequence(runtime: str, source: dict[str, str]) -> bool:
    """True when the payload carries no event id to pair a pre with its post.

    Claude Code's PreCompact/PostCompact payloads usually have no ``prompt_id``; without a
    sequence number their identity would be the line's ``at``, and no post would ever match its
    pre.
    """
    return EVENT_ID_KEY.get(runtime, "") not in source


def next_sequence(paths: ExecutionPaths, phase: str) -> int:
    """The compaction sequence number for an append: a pre opens number n + 1, a post takes n.

    The counter lives in ``compact-events.seq`` beside the journal, updated under the lock, so it
    costs the hook O(1) whatever the journal's size and keeps increasing across rotations.

    Raises:
        StorageError: the counter cannot be written.
    """
    counter = paths.context_dir / SEQUENCE_FILE
    with locked(paths.lock):
        try:
            current = int(counter.read_text(encoding="ascii").strip() or "0")
        except (FileNotFoundError, ValueError, UnicodeDecodeError):
            current = 0
        if phase == "pre":
            current += 1
            atomic_write(counter, f"{current}\n".encode("ascii"), mode=0o600)
    return current


def append_line(paths: ExecutionPaths, line: bytes) -> None:
    """Append ``line`` in one ``O_APPEND`` write (file mode 0600).

    If a killed writer left a half line at the end, a newline goes first so that only the torn
    line is lost on replay, never this one.

    Raises:
        ContinuityError: the line is over 16 KiB or not newline-terminated.
        StorageError: the file system refused the write.
    """
    if not line.endswith(b"\n") or len(line) - 1 > MAX_LINE_BYTES:
        raise ContinuityError("a journal line is one line of at most 16 KiB; not recorded")
    try:
        paths.context_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(paths.journal, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            line = after_torn_tail(fd, line)
            if os.write(fd, line) != len(line):
                raise StorageError(f"{paths.journal}: short write while appending")
        finally:
            os.close(fd)
    except OSError as exc:
        raise StorageError(f"{paths.journal}: cannot append ({exc.strerror or exc})") from exc


def rotate_if_needed(paths: ExecutionPaths, *, at_bytes: int = ROTATE_AT_BYTES) -> bool:
    """Rename the journal to ``.jsonl.1`` (replacing an older one) once it reaches ``at_bytes``.

    Raises:
        StorageError: the rename failed.
    """
    with locked(paths.lock):
        try:
            if paths.journal.stat().st_size < at_bytes:
                return False
            os.replace(paths.journal, paths.journal_rotated)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StorageError(f"{paths.journal}: cannot rotate ({exc.strerror or exc})") from exc
    return True


@dataclass(frozen=True)
class Event:
    """One normalised journal line.

    Attributes:
        at: when the hook ran (the line's ``at``).
        runtime: ``claude`` or ``codex``.
        kind: ``started`` (pre) or ``completed`` (post).
        trigger: ``manual``, ``auto`` or ``unknown`` (malformed or future payloads).
        session_id: the runtime's session id, if the payload had one.
        event_id: ``prompt_id`` (claude) or ``turn_id`` (codex), if present.
        dedupe_key: ``runtime|session|identity|phase``: a re-run hook gives the same key.
        pair_key: the dedupe key without its phase: a started and its completed share it.
    """

    at: str
    runtime: str
    kind: str
    trigger: str
    session_id: str | None
    event_id: str | None
    dedupe_key: str
    pair_key: str

    def to_json(self) -> dict[str, Any]:
        """A JSON summary for ``context status --json``."""
        return {
            "at": self.at,
            "runtime": self.runtime,
            "kind": self.kind,
            "trigger": self.trigger,
            "sessionId": self.session_id,
            "eventId": self.event_id,
            "dedupeKey": self.dedupe_key,
        }


def normalise(doc: Any) -> Event | None:
    """The event a parsed line describes, or None when the line is off-schema."""
    if not isinstance(doc, dict) or type(doc.get("v")) is not int or doc["v"] != 1:
        return None
    at, runtime, phase, source = (
        doc.get("at"),
        doc.get("runtime"),
        doc.get("phase"),
        doc.get("source"),
    )
    if not isinstance(at, str) or runtime not in WHITELIST or phase not in PHASES:
        return None
    if not isinstance(doc.get("executionId"), str) or not isinstance(source, dict):
        return None
    if doc.get("policyHash") is not None and not isinstance(doc.get("policyHash"), str):
        return None
    session = source.get("session_id")
    session_id = session if isinstance(session, str) and session else None
    event = source.get(EVENT_ID_KEY[runtime])
    event_id = event if isinstance(event, str) and event else None
    trigger = source.get("trigger")
    seq = doc.get("seq")
    # The identity: an append-time sequence number where a writer gave one, else the event id.
    identity = str(seq) if type(seq) is int else (event_id if event_id is not None else at)
    pair_key = f"{runtime}|{session_id or '-'}|{identity}"
    return Event(
        at=at,
        runtime=runtime,
        kind=PHASES[phase],
        trigger=trigger if trigger in TRIGGERS else "unknown",
        session_id=session_id,
        event_id=event_id,
        dedupe_key=f"{pair_key}|{phase}",
        pair_key=pair_key,
    )


def _raw_lines(path: Path) -> Iterator[bytes | None]:
    """The lines of ``path`` without newlines, streamed; None for a line over the cap."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return
    with handle:
        buffer = bytearray()
        overlong = False
        while chunk := handle.read(64 * 1024):
            start = 0
            while True:
                end = chunk.find(b"\n", start)
                piece = chunk[start:] if end < 0 else chunk[start:end]
                if not overlong:
                    buffer += piece
                    overlong = len(buffer) > MAX_LINE_BYTES
                    if overlong:
                        buffer.clear()
                if end < 0:
                    break
                yield None if overlong else bytes(buffer)
                buffer.clear()
                overlong = False
                start = end + 1
        if buffer or overlong:
            yield None if overlong else bytes(buffer)


@dataclass(frozen=True)
class Replay:
    """Every readable event of the journal, oldest first, and how many lines were dropped."""

    events: tuple[Event, ...]
    dropped_lines: int


def replay(paths: ExecutionPaths) -> Replay:
    """Read ``.jsonl.1`` then ``.jsonl``; a bad, torn, oversize or off-schema line is counted.

    Never raises on content; only an unreadable file (permissions) surfaces.

    Raises:
        StorageError: a journal file exists but cannot be read.
    """
    events: list[Event] = []
    dropped = 0
    for path in (paths.journal_rotated, paths.journal):
        try:
            for raw in _raw_lines(path):
                if raw is not None and not raw.strip():
                    continue
                event = None if raw is None else _parse_line(raw)
                if event is None:
                    dropped += 1
                else:
                    events.append(event)
        except OSError as exc:
            raise StorageError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    return Replay(tuple(events), dropped)


def _parse_line(raw: bytes) -> Event | None:
    try:
        return normalise(json.loads(raw.decode("utf-8")))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None


@dataclass(frozen=True)
class Reduction:
    """What the journal says about compactions (JR-5).

    Attributes:
        generation: completed compactions.
        pending: a started with no matching completed yet (a normal state, not an error).
        last_completed: the most recent completed compaction.
        duplicates: events merged because their dedupe key was already seen.
    """

    generation: int
    pending: Event | None
    last_completed: Event | None
    duplicates: int


def reduce(events: tuple[Event, ...] | list[Event]) -> Reduction:
    """Merge duplicates first, then fold: a started becomes pending (replacing an unmatched one);
    a completed counts, becomes ``lastCompleted`` and clears pending only when the pair keys match.
    """
    seen: set[str] = set()
    unique: list[Event] = []
    for event in events:
        if event.dedupe_key not in seen:
            seen.add(event.dedupe_key)
            unique.append(event)
    generation = 0
    pending: Event | None = None
    last: Event | None = None
    for event in unique:
        if event.kind == "started":
            pending = event
            continue
        generation += 1
        last = event
        if pending is not None and pending.pair_key == event.pair_key:
            pending = None
    return Reduction(generation, pending, last, len(events) - len(unique))
