"""Ids, names and labels that arrive in a file: validated before they reach the archive.

A file from another machine is hostile until checked. Its session id must be a UUID or match
:data:`SESSION_ID_PATTERN` (letters, digits, ``.``, ``_``, ``-``; at most 64 characters), so it
cannot carry ``:`` (the ``openai-agents:`` name space), ``@`` (checkpoint references), path
separators or control characters. Names and labels may be any printable text of at most 200
characters: no control, format, private-use or unassigned code points, no line separators, no
leading or trailing space. The same rules bound every id and label the file's lineage carries.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

from alpstore.errors import CheckpointFileError

SESSION_ID_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
"""What an imported session id may look like (a UUID matches)."""

MAX_TEXT: Final = 200
"""Longest name or label (the width of the ``sessions.name`` and ``checkpoints.label`` columns)."""

_BAD_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def text_problem(value: object, *, limit: int = MAX_TEXT) -> str | None:
    """Why ``value`` is not an acceptable name or label, or None."""
    if not isinstance(value, str):
        return "expected a string"
    if not value:
        return "is empty"
    if len(value) > limit:
        return f"is {len(value)} characters long (at most {limit})"
    if value != value.strip():
        return "has leading or trailing whitespace"
    if value.isascii() and value.isprintable():
        return None
    for i, ch in enumerate(value):
        if ch == " ":
            continue
        category = unicodedata.category(ch)
        if category in _BAD_CATEGORIES or category == "Zs":
            return f"holds the control, invisible or spacing character U+{ord(ch):04X} at {i}"
    return None


def check_text(value: object, what: str, *, limit: int = MAX_TEXT) -> str:
    """``value`` when it is an acceptable name or label.

    Raises:
        CheckpointFileError: naming ``what`` and the reason (never echoing the raw value).
    """
    problem = text_problem(value, limit=limit)
    if problem is not None:
        raise CheckpointFileError(
            f"{what} {problem}; refused",
            hint="names and labels are printable text, at most 200 characters",
        )
    assert isinstance(value, str)
    return value


def is_number(text: str) -> bool:
    """True when ``text`` is a number written in ASCII digits (``str.isdigit`` also accepts
    ``²``, ``①`` and other digits that ``int()`` refuses, or reads as another number).
    """
    return text.isascii() and text.isdigit()


def session_id_problem(value: object) -> str | None:
    """Why ``value`` is not an acceptable imported session id, or None."""
    if not isinstance(value, str):
        return "expected a string"
    if not SESSION_ID_PATTERN.match(value):
        return (
            "must be a UUID or letters, digits, '.', '_' and '-' (at most 64, starting with a "
            "letter or digit)"
        )
    return None


def check_session_id(value: object, what: str) -> str:
    """``value`` when it is an acceptable session id from a file.

    Raises:
        CheckpointFileError: naming ``what`` (the raw value is shown escaped and cut).
    """
    problem = session_id_problem(value)
    if problem is not None:
        raise CheckpointFileError(
            f"{what} {shown(value)} {problem}; refused",
            hint="an imported session id may not carry ':', '@', '/', spaces or control characters",
        )
    assert isinstance(value, str)
    return value


def shown(value: object, limit: int = 40) -> str:
    """A value for an error message: repr-escaped (no control character survives), cut."""
    text = ascii(value) if isinstance(value, str) else type(value).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"
