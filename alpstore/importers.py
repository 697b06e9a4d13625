"""Bring your own history: OpenAI-format JSON Lines and Claude Code transcripts, split into turns.

A turn starts at each user message (for Claude Code, a ``user`` record that is not only tool
results). Messages before the first user message belong to the first turn. Every line is parsed
and checked before anything is written, so a bad line imports nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from alpstore.codec import canonical_json
from alpstore.errors import AlpstoreError, InputError

if TYPE_CHECKING:
    from alpstore.sessions import Session
    from alpstore.store import Store

Format = Literal["auto", "openai", "claude"]
MAX_IMPORT_BYTES = 1024 * 1024 * 1024
"""A transcript larger than 1 GiB is refused before reading."""
MAX_DEPTH = 256
"""Deepest nesting of one transcript line (the limit deep files use too)."""

OPENAI_ROLES = {"system", "developer", "user", "assistant", "tool", "function"}
CLAUDE_TYPES = {"user", "assistant"}


@dataclass(frozen=True)
class ParsedHistory:
    """A transcript split into turns, ready to import."""

    format: Literal["openai", "claude"]
    turns: list[list[dict[str, Any]]]
    skipped: int

    @property
    def messages(self) -> int:
        """How many messages the turns hold."""
        return sum(len(t) for t in self.turns)


DEEP_FILE_KEYS = frozenset({"version", "kernel", "working_memory"})
"""Top-level keys of a deep checkpoint file (mas-lab versions 1 and 2), never of a message."""

DEEP_FILE_HINT = (
    "a transcript holds one JSON message per line; a deep checkpoint file (one JSON document) "
    "is imported with `alpstore checkpoint import FILE`"
)


def is_user_turn(message: Any) -> bool:
    """True when ``message`` starts a user turn (tool results fed back do not)."""
    if not isinstance(message, dict):
        return False
    if message.get("role") == "user":
        return True
    if message.get("type") == "user":
        inner = message.get("message")
        content = inner.get("content") if isinstance(inner, dict) else None
        only_results = isinstance(content, list) and all(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content
        )
        return not (only_results and bool(content))
    return False


def _lines(path: Path) -> Iterable[tuple[int, str]]:
    try:
        size = path.stat().st_size
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from err
    if size > MAX_IMPORT_BYTES:
        raise InputError(f"{path}: {size} bytes is over the {MAX_IMPORT_BYTES}-byte import limit")
    try:
        with path.open("r", encoding="utf-8") as handle:
            yield from enumerate(handle, 1)
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from err
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from err


def _depth(value: Any) -> int:
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            break
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return deepest


def _check_openai(obj: dict[str, Any], where: str) -> None:
    role = obj.get("role")
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


def parse_history(path: Path, fmt: Format = "auto") -> ParsedHistory:
    """Read and validate a transcript, splitting it into turns.

    Raises:
        InputError: a line is not JSON, not an object, or not a message of the format
            (the message names the file and line number); or no message at all.
    """
    records: list[tuple[int, dict[str, Any]]] = []
    for number, line in _lines(path):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as err:
            reason = getattr(err, "msg", None) or "nested too deeply"
            hint = DEEP_FILE_HINT if not records and line.lstrip().startswith("{") else None
            raise InputError(f"{where}: not valid JSON ({reason})", hint=hint) from err
        if not records and isinstance(obj, dict) and obj.keys() >= DEEP_FILE_KEYS:
            raise InputError(
                f"{path}: this is a deep checkpoint file, not a transcript",
                hint=f"import it with `alpstore checkpoint import {path}`",
            )
        if not isinstance(obj, dict):
            raise InputError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        if line.count("[") + line.count("{") > MAX_DEPTH and _depth(obj) > MAX_DEPTH:
            raise InputError(f"{where}: nested deeper than {MAX_DEPTH} levels; refused")
        try:
            canonical_json(obj)
        except AlpstoreError as err:
            raise InputError(f"{where}: {err.message}") from err
        records.append((number, obj))
    if not records:
        raise InputError(f"{path}: no messages to import")
    if fmt == "auto":
        first = records[0][1]
        fmt = "openai" if "role" in first else "claude" if "type" in first else "openai"
    kept: list[dict[str, Any]] = []
    skipped = 0
    for number, obj in records:
        where = f"{path}:{number}"
        if fmt == "openai":
            _check_openai(obj, where)
            kept.append(obj)
        elif _check_claude(obj, where):
            kept.append(obj)
        else:
            skipped += 1
    if not kept:
        raise InputError(f"{path}: no user or assistant messages to import")
    turns: list[list[dict[str, Any]]] = []
    for message in kept:
        if not turns or (is_user_turn(message) and any(is_user_turn(m) for m in turns[-1])):
            turns.append([message])
        else:
            turns[-1].append(message)
    return ParsedHistory(format=fmt, turns=turns, skipped=skipped)


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
    that looks complete.

    Names are unique: a taken ``name`` is refused, or with ``suffix`` becomes ``name-2`` …
    (:attr:`Session.info` tells which). Dictionary training is not run here (the next ordinary
    write runs it).

    Raises:
        UsageError: the session id or name is taken.
    """
    from alpstore.portable.importing import claim_name

    with store.db.atomic() as conn:
        if name is not None:
            name = claim_name(conn, store, name, suffix=suffix)
        session = store.create_session(session_id=session_id, name=name)
        for turn in parsed.turns:
            session.commit_turn(turn, trigger="every_turn")
    return session
