"""Codex CLI rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``): each line
``{"timestamp", "type", "payload"}`` to a :class:`~alpstore.transcripts.steps.Step`.

``session_meta`` names the session; ``turn_context`` starts a turn; ``response_item`` is what
the model saw or produced (``message``, ``function_call`` / ``function_call_output``,
``custom_tool_call`` / ``custom_tool_call_output``, ``local_shell_call``, ``web_search_call``,
``reasoning``); ``compacted`` (and a ``compaction`` response item) replaces the history with a
summary; ``event_msg`` lines repeat what the UI showed and are counted, not stored, except
``thread_rolled_back`` (the user went back ``num_turns`` turns: a backtrack). Encrypted
reasoning is dropped before anything is stored: it is never shown or searched.
"""

from __future__ import annotations

from typing import Any

from alpstore.transcripts.steps import Step, text_of

ITEM_TYPES = frozenset(
    {
        "message",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "local_shell_call",
        "web_search_call",
        "reasoning",
    }
)
LINE_TYPES = frozenset({"session_meta", "response_item", "turn_context", "event_msg", "compacted"})


def is_record(obj: dict[str, Any]) -> bool:
    """The line looks like a Codex rollout line (for format detection)."""
    return obj.get("type") in LINE_TYPES and isinstance(obj.get("payload"), dict)


def session_id(obj: dict[str, Any]) -> str | None:
    """The rollout's session id, from its ``session_meta`` line."""
    payload = obj.get("payload")
    if obj.get("type") == "session_meta" and isinstance(payload, dict):
        ident = payload.get("id")
        return ident if isinstance(ident, str) and ident else None
    return None


def _without_secret_reasoning(item: dict[str, Any]) -> dict[str, Any]:
    """A reasoning item with its encrypted content replaced by its size."""
    if "encrypted_content" not in item:
        return item
    kept = {k: v for k, v in item.items() if k != "encrypted_content"}
    secret = item.get("encrypted_content")
    kept["encrypted_content_bytes"] = len(secret) if isinstance(secret, str) else 0
    return kept


def step(line: int, record: dict[str, Any]) -> Step:
    """The step a rollout line is."""
    kind = record.get("type")
    payload = record.get("payload")
    if not isinstance(payload, dict):
        return Step("skip", line, skipped=str(kind) if isinstance(kind, str) else "record")
    if kind == "turn_context":
        return Step("turn", line)
    if kind == "compacted":
        message = payload.get("message")
        return Step("fold", line, summary=message if isinstance(message, str) else "")
    if kind == "event_msg" and payload.get("type") == "thread_rolled_back":
        turns = payload.get("num_turns")
        if isinstance(turns, int) and not isinstance(turns, bool) and turns > 0:
            return Step("rollback", line, turns=turns)
    if kind != "response_item":
        return Step("skip", line, skipped=str(kind))
    item_type = payload.get("type")
    if item_type == "compaction":  # a server-side compaction: its summary is encrypted
        return Step("fold", line, summary="(compacted by the server; its summary is encrypted)")
    if item_type not in ITEM_TYPES:
        return Step("skip", line, skipped=f"response_item:{item_type}")
    if item_type == "reasoning":
        payload = _without_secret_reasoning(payload)
    return Step("message", line, value=payload)


def message_text(item: dict[str, Any]) -> str:
    """A message item's text."""
    return text_of(item.get("content"))
