"""Widths of short texts the archive stores, checked before either backend sees them.

``session_events.kind`` is ``VARCHAR(32)`` and ``backtracks.error_signature`` ``VARCHAR(200)``:
PostgreSQL refuses a longer value (a ``DatabaseError`` deep in a transaction), SQLite stores it.
One check, the same on both, refuses it first with one line naming the limit.
"""

from __future__ import annotations

from typing import Final

from alpstore.errors import UsageError

EVENT_KIND_MAX: Final = 32
"""Longest session event kind (the ``session_events.kind`` column)."""
ERROR_SIGNATURE_MAX: Final = 200
"""Longest backtrack error signature (the ``backtracks.error_signature`` column;
:func:`alpstore.debug.governance.error_signature` makes them at most this long)."""


def _limited(value: object, what: str, limit: int) -> str:
    if not isinstance(value, str):
        raise UsageError(f"{what}: expected a string, got {type(value).__name__}")
    if not value:
        raise UsageError(f"{what} is empty; nothing was written")
    if len(value) > limit:
        raise UsageError(
            f"{what} {value[:20]!r}… is {len(value)} characters long (at most {limit}); "
            "nothing was written"
        )
    return value


def check_event_kind(kind: object) -> str:
    """``kind`` when it fits a session event's kind (1 to :data:`EVENT_KIND_MAX` characters).

    Raises:
        UsageError: one line naming the limit (on every backend alike).
    """
    return _limited(kind, "event kind", EVENT_KIND_MAX)


def check_error_signature(signature: object) -> str | None:
    """``signature`` (None allowed) when it fits a backtrack's error signature.

    Raises:
        UsageError: longer than :data:`ERROR_SIGNATURE_MAX` characters, empty or not a string.
    """
    if signature is None:
        return None
    return _limited(signature, "error signature", ERROR_SIGNATURE_MAX)
