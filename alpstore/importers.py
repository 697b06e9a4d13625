"""Bring your own history: OpenAI-format JSON Lines and Claude Code transcripts, split into turns.

A turn starts at each user message (for Claude Code, a ``user`` record that is not only tool
results). Messages before the first user message belong to the first turn. The file is streamed:
:func:`import_history_file` reads it once, one turn (or piece of a long turn) at a time, checking
every line inside the import's one transaction, so a bad line imports nothing and memory is
bounded by the longest line and a frame, not the transcript. (:func:`parse_history` checks a file
without an archive; :func:`import_history` then reads it again.)
"""

from __future__ import annotations

import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from alpstore.archive.packing import FRAME_TARGET, PACK_BLOB_MAX
from alpstore.archive.reading import Encoded
from alpstore.codec import (
    MAX_DEPTH,
    DuplicateKeyError,
    brackets,
    canonical_json_parsed,
    digest_bytes,
    nesting_depth,
    strict_decoder,
)
from alpstore.db.names import BLOB_MESSAGE
from alpstore.errors import AlpstoreError, InputError
from alpstore.rules.names import claim_name
from alpstore.rules.turns import is_user_turn

if TYPE_CHECKING:
    from alpstore.core.store import CoreStore as Store
    from alpstore.sessions import Session

Format = Literal["auto", "openai", "claude"]
MAX_IMPORT_BYTES = 1024 * 1024 * 1024
"""A transcript larger than 1 GiB is refused before reading."""
MAX_LINE_CHARS = 2 * 256 * 1024 * 1024
"""Longest line: one message, bounded as a deep file bounds one value (twice the 256 MiB
canonical limit of one message, for escapes and blanks)."""
BATCH_MESSAGES = 500
BATCH_CHARS = 16 * 1024 * 1024
"""A turn longer than this is written in pieces (memory holds one piece, not the turn)."""

OPENAI_ROLES = {"system", "developer", "user", "assistant", "tool", "function"}
CLAUDE_TYPES = {"user", "assistant"}


DEEP_FILE_KEYS = frozenset({"version", "kernel", "working_memory"})
"""Top-level keys of a deep checkpoint file (mas-lab versions 1 and 2), never of a message."""

DEEP_FILE_HINT = (
    "a transcript holds one JSON message per line; a deep checkpoint file (one JSON document) "
    "is imported with `alpstore checkpoint import FILE`"
)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` read one at a time; a line longer than :data:`MAX_LINE_CHARS`
    is refused before it is held whole.
    """
    try:
        info = path.stat()
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from err
    if not stat.S_ISREG(info.st_mode):  # a FIFO blocks, a device never ends
        raise InputError(f"{path}: not a regular file")
    size = info.st_size
    if size > MAX_IMPORT_BYTES:
        raise InputError(f"{path}: {size} bytes is over the {MAX_IMPORT_BYTES}-byte import limit")
    number = 0
    try:
        with path.open("r", encoding="utf-8-sig") as handle:  # a byte order mark is fine
            while line := handle.readline(MAX_LINE_CHARS + 1):
                number += 1
                if len(line) > MAX_LINE_CHARS:
                    raise InputError(
                        f"{path}:{number}: a line longer than {MAX_LINE_CHARS} characters; refused",
                        hint="one message may take at most the deep-file limit of one message",
                    )
                yield number, line
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from err
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from err


def _check_openai(obj: dict[str, Any], where: str) -> None:
    role = obj.get("role")
    if role is None and isinstance(obj.get("messages"), list):
        raise InputError(
            f"{where}: this is OpenAI fine-tuning JSONL (one conversation a line, "
            '{"messages": [...]}), not a transcript of one session',
            hint="split it: one file a conversation, one message a line "
            "(e.g. `jq -c '.messages[]'` on one line of it)",
        )
    if role not in OPENAI_ROLES:
        raise InputError(f"{where}: 'role' must be one of {', '.join(sorted(OPENAI_ROLES))}")
    if "content" not in obj and "tool_calls" not in obj:
        raise InputError(f"{where}: a message needs 'content' or 'tool_calls'")
    calls = obj.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        raise InputError(f"{where}: 'tool_calls' must be a list")
    if role == "tool" and not isinstance(obj.get("tool_call_id", ""), str):
        raise InputError(f"{where}: 'tool_call_id' must be a string")


def _check_claude(obj: dict[str, Any], where: str) -> bool:
    """True when the record is a conversation message to keep (user/assistant)."""
    kind = obj.get("type")
    if kind not in CLAUDE_TYPES:
        return False
    inner = obj.get("message")
    if not isinstance(inner, dict):
        raise InputError(f"{where}: a {kind} record needs a 'message' object")
    if not isinstance(obj.get("uuid", ""), str):
        raise InputError(f"{where}: 'uuid' must be a string")
    return True


_DECODER = strict_decoder(constants=True)
"""Refuses a repeated key (``alpstore.codec``'s one JSON reader); NaN is refused by
``canonical_json`` after it, naming its key."""


def _records(path: Path) -> Iterator[tuple[str, dict[str, Any], str, bytes]]:
    """Each non-blank line parsed and checked: ``(where, object, line, canonical bytes)``."""
    first = True
    for number, line in _lines(path):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            obj = _DECODER.decode(line)
        except DuplicateKeyError as err:
            raise InputError(f"{where}: {err}; refused") from err
        except (ValueError, RecursionError) as err:
            if isinstance(err, RecursionError):
                reason = "nested too deeply"
            else:  # json's own message, or (an integer past Python's digit limit) the error's
                reason = getattr(err, "msg", None) or str(err).split(";")[0]
            hint = DEEP_FILE_HINT if first and line.lstrip().startswith("{") else None
            raise InputError(f"{where}: not valid JSON ({reason})", hint=hint) from err
        if first and isinstance(obj, dict) and obj.keys() >= DEEP_FILE_KEYS:
            raise InputError(
                f"{path}: this is a deep checkpoint file, not a transcript",
                hint=f"import it with `alpstore checkpoint import {path}`",
            )
        if not isinstance(obj, dict):
            raise InputError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        if brackets(line) > MAX_DEPTH and nesting_depth(obj) > MAX_DEPTH:
            raise InputError(f"{where}: nested deeper than {MAX_DEPTH} levels; refused")
        try:
            raw = canonical_json_parsed(obj)  # (parsed: its keys are strings)
        except AlpstoreError as err:
            raise InputError(f"{where}: {err.message}") from err
        first = False
        yield where, obj, line, raw


class _Reader:
    """One streamed read of a transcript: its pieces, then what it found (format, skipped)."""

    def __init__(self, path: Path, fmt: Format) -> None:
        self.path = path
        self.format: Literal["openai", "claude"] | None = None if fmt == "auto" else fmt
        self.skipped = 0
        self.records = 0

    def _messages(self) -> Iterator[tuple[dict[str, Any], int, bytes]]:
        """The messages, with their line's length and canonical bytes; records of another
        kind are counted.
        """
        for where, obj, line, raw in _records(self.path):
            self.records += 1
            if self.format is None:  # auto: the first record's format
                self.format = "openai" if "role" in obj else "claude" if "type" in obj else "openai"
            if self.format == "openai":
                _check_openai(obj, where)
                yield obj, len(line), raw
            elif _check_claude(obj, where):
                yield obj, len(line), raw
            else:
                self.skipped += 1

    def pieces(self) -> Iterator[tuple[bool, list[dict[str, Any]], list[bytes], bool]]:
        """``(starts_turn, messages, their canonical bytes, ends_turn)``: the turns in order,
        a turn longer than
        :data:`BATCH_MESSAGES` messages or :data:`BATCH_CHARS` characters in several pieces (so
        memory holds one piece, not one turn).

        Raises:
            InputError: a bad line (naming the file and line), or no message at all.
        """
        piece: list[dict[str, Any]] = []
        raws: list[bytes] = []
        chars = 0
        starts = True  # the current piece starts a turn
        has_user = False  # the current turn holds a user message
        for message, size, raw in self._messages():
            user = is_user_turn(message)
            if user and has_user:  # a new turn starts here
                yield starts, piece, raws, True
                piece, raws, chars, starts, has_user = [], [], 0, True, False
            elif len(piece) >= BATCH_MESSAGES or chars >= BATCH_CHARS:
                yield starts, piece, raws, False
                piece, raws, chars, starts = [], [], 0, False
            has_user = has_user or user
            piece.append(message)
            raws.append(raw)
            chars += size
        if not piece:
            if not self.records:
                raise InputError(f"{self.path}: no messages to import")
            raise InputError(f"{self.path}: no user or assistant messages to import")
        yield starts, piece, raws, True


class Turns:
    """A transcript's turns, read from the file again on each iteration (memory holds one turn,
    not the transcript); ``len`` is the count found when it was parsed.
    """

    def __init__(self, path: Path, fmt: Literal["openai", "claude"], count: int) -> None:
        self._path = path
        self._fmt = fmt
        self._count = count

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[list[dict[str, Any]]]:
        turn: list[dict[str, Any]] = []
        for _, piece, _, ends in _Reader(self._path, self._fmt).pieces():
            turn.extend(piece)
            if ends:
                yield turn
                turn = []


@dataclass(frozen=True)
class ParsedHistory:
    """A transcript read and checked (streamed: one line at a time), ready to import.

    Fields:
        path: the file; :func:`import_history` reads it again, streamed, checking every line
            again (inside its transaction: a file changed since is refused, nothing written).
        format: the transcript's format.
        messages: the messages it holds.
        turn_count: the turns they make.
        skipped: records of another kind (Claude Code's summaries, system records …).
    """

    path: Path
    format: Literal["openai", "claude"]
    messages: int
    turn_count: int
    skipped: int

    @property
    def turns(self) -> Turns:
        """The turns, streamed from the file on each iteration."""
        return Turns(self.path, self.format, self.turn_count)


def parse_history(path: Path, fmt: Format = "auto") -> ParsedHistory:
    """Read and validate a transcript, streamed (memory holds one line and one turn), counting
    its messages and turns.

    Raises:
        InputError: a line is not JSON, not an object, longer than :data:`MAX_LINE_CHARS`, or
            not a message of the format (the message names the file and line number); or no
            message at all.
    """
    reader = _Reader(path, fmt)
    messages = turns = 0
    for starts, piece, _, _ in reader.pieces():
        messages += len(piece)
        turns += starts
    assert reader.format is not None
    return ParsedHistory(path, reader.format, messages, turns, reader.skipped)


def import_history(
    store: Store,
    parsed: ParsedHistory,
    *,
    name: str | None,
    session_id: str | None = None,
    suffix: bool = False,
) -> Session:
    """Write a parsed transcript as a new session, one checkpoint per turn, in ONE transaction:
    an interrupted import (Ctrl-C, a full disk) leaves no session at all, never a partial one
    that looks complete. The file is read again, every line checked again (a file changed
    since it was parsed is refused, nothing written). :func:`import_history_file` reads it
    once.

    Names are unique: a taken ``name`` is refused, or with ``suffix`` becomes ``name-2`` …
    (:attr:`Session.info` tells which). Dictionary training is not run inside the transaction:
    `session import` calls ``SqlArchive.settle`` after it commits (issue 33).

    The small messages are written packed from the start, on both backends (issue 41 on
    SQLite): the turns are held until a frame's worth (``FRAME_TARGET``) of new content is
    read, that frame is stored (``SqlArchive.store_packed``, one compressor for the import's
    frames: ``SqlArchive.frames_ahead``), then the held turns are written in a few statements
    (``Session.write_turns``), finding their messages stored. Each message is encoded once
    and compressed once, in its frame. Memory holds one frame and its turns.

    Raises:
        UsageError: the session id or name is taken.
        InputError: the file changed since it was parsed.
    """
    reader = _Reader(parsed.path, parsed.format)
    expect = (parsed.messages, parsed.turn_count)
    return _write(store, reader, name, session_id, suffix, expect)[0]


def import_history_file(
    store: Store,
    path: Path,
    fmt: Format = "auto",
    *,
    name: str | None,
    session_id: str | None = None,
    suffix: bool = False,
) -> tuple[Session, ParsedHistory]:
    """:func:`parse_history` and :func:`import_history` in one read of the file: every line is
    checked as ``parse_history`` checks it, inside the import's one transaction, so a bad line
    (named with its file and number) rolls it back and nothing is written. Returns the session
    and what the read found (format, messages, turns, records skipped).

    Raises:
        InputError: a bad line, or no message at all.
        UsageError: the session id or name is taken.
    """
    reader = _Reader(path, fmt)
    session, messages, turns = _write(store, reader, name, session_id, suffix)
    assert reader.format is not None
    return session, ParsedHistory(path, reader.format, messages, turns, reader.skipped)


def _write(
    store: Store,
    reader: _Reader,
    name: str | None,
    session_id: str | None,
    suffix: bool,
    expect: tuple[int, int] | None = None,
) -> tuple[Session, int, int]:
    """The import's transaction: ``reader``'s turns as a new session (see
    :func:`import_history`); ``(session, messages, turns)``. ``expect``: the counts the file
    must give (else it changed: refused inside the transaction).
    """
    messages = turns = 0
    with store.db.atomic() as conn:
        if name is not None:
            name = claim_name(conn, store, name, suffix=suffix)
        session = store.create_session(session_id=session_id, name=name)
        frame = _Frame(store, conn)
        held: list[tuple[list[dict[str, Any]], list[Encoded], bool]] = []
        try:
            with session.deferring_head(conn):  # the session row written once, not per turn
                for starts, piece, raws, ends in reader.pieces():
                    messages += len(piece)
                    turns += starts
                    items = [(digest_bytes(raw), BLOB_MESSAGE, raw) for raw in raws]
                    held.append((piece, items, ends))
                    if frame.add(items):  # (a frame was written: its turns follow)
                        _commit(session, conn, held, frame.known)
                frame.flush()
                _commit(session, conn, held, frame.known)
            frame.finish()
        except BaseException:
            frame.abandon()
            raise
        if expect is not None and (messages, turns) != expect:
            raise InputError(
                f"{reader.path}: changed while it was imported ({expect[0]} messages "
                f"when read, {messages} now); nothing imported"
            )
    return session, messages, turns


def _commit(
    session: Session,
    conn: Any,
    held: list[tuple[list[dict[str, Any]], list[Encoded], bool]],
    known: dict[bytes, int],
) -> None:
    """Write the held pieces in order, in a few statements for all of them
    (``Session.write_turns``: a turn's last piece checkpoints), and forget them; ``known``:
    the ids the frame just stored found or inserted (not looked up again), forgotten too.
    """
    session.write_turns(conn, held, trigger="every_turn", known=known)
    held.clear()
    known.clear()


class _Frame:
    """The next frame of an import that packs ahead: new small messages, in order."""

    def __init__(self, store: Store, conn: Any) -> None:
        self._store = store
        self._conn = conn
        self._items: dict[bytes, Encoded] = {}
        # one compressor for the import's frames, compressing on a thread as the import reads
        self._ahead = store.archive.frames_ahead(conn, behind=True)
        self._size = 0
        self._held = 0
        """Bytes of the messages held (the turns not written yet)."""
        self.known: dict[bytes, int] = {}
        """The ids of the small messages the frames since the last turns written found or
        stored (valid in the import's transaction; the turns take them from here)."""

    def add(self, items: list[Encoded]) -> bool:
        """Take a piece's messages (encoded); True when the turns held so far are to be
        written now: a frame's worth of new small content (the frame is stored first), or
        :data:`BATCH_CHARS` of messages of any size held (memory stays bounded when most
        messages are too large to pack).
        """
        for item in items:
            self._held += len(item[2])
            # a larger one is stored loose by its turn; one stored by an earlier frame is
            # found by ``store_packed``'s lookup (no set of this import's digests is kept)
            if len(item[2]) <= PACK_BLOB_MAX and item[0] not in self._items:
                self._items[item[0]] = item
                self._size += len(item[2])
        if self._size < FRAME_TARGET and self._held < BATCH_CHARS:
            return False
        self.flush()
        return True

    def flush(self) -> None:
        """Store the frame being gathered (if any)."""
        if self._items:
            self._store.archive.store_packed(
                self._conn, list(self._items.values()), self._ahead, known=self.known
            )
        self._items.clear()
        self._size = self._held = 0

    def finish(self) -> None:
        """Every frame's data in its row (before the import commits); the thread stopped."""
        self._ahead.finish()

    def abandon(self) -> None:
        """The import failed: the thread stopped (its transaction rolls back)."""
        self._ahead.abandon()
