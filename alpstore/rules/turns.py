"""What a user turn is: the rule transcripts, sessions and debug views count turns by."""

from __future__ import annotations

from typing import Any


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
