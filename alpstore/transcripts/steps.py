"""What a reader yields for each record: a typed step with its links, format-neutral.

Readers (``claude``, ``codex``) never write; :mod:`~alpstore.transcripts.replay` never parses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

StepKind = Literal["message", "turn", "fold", "rollback", "skip"]


@dataclass
class Step:
    """One record of a transcript, as the replay needs it.

    Fields:
        kind: ``message`` (stored as one entry of the line), ``turn`` (a turn boundary: the
            next message starts a turn), ``fold`` (a compaction: ``summary`` replaces the
            line so far), ``rollback`` (the newest ``turns`` user turns discarded: Codex's
            ``thread_rolled_back``), ``skip`` (not conversation: counted under ``skipped``).
        line: the record's line number in its file.
        uuid: the record's own id (Claude Code), None when the format has none.
        parent: the id of the record it follows (None: the record before it in the file).
        value: the message to store (``message``).
        prompt: a user message that starts a turn (``message``).
        group: records sharing this id are ONE message, their content blocks in order.
        agent: None for the main conversation, else the subagent (sidechain) it belongs to.
        summary: the compaction summary's text (``fold``).
        trigger: how the compaction started (auto, manual) when the record says.
        skipped: the kind counted for a ``skip`` (e.g. ``system``, ``meta``, ``event_msg``).
        spawns: agent ids whose result this record carries (a ``Task``/``Agent`` result).
        calls: prompts of the ``Task``/``Agent`` tool calls this record makes (to anchor a
            subagent whose result names no agent id).
        turns: how many user turns a ``rollback`` discards.
    """

    kind: StepKind
    line: int
    uuid: str | None = None
    parent: str | None = None
    value: dict[str, Any] | None = None
    prompt: bool = False
    group: str | None = None
    agent: str | None = None
    summary: str | None = None
    trigger: str | None = None
    skipped: str | None = None
    spawns: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    turns: int = 0


def text_of(content: Any) -> str:
    """The text of a message's content (a string, or its text blocks joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif isinstance(block, str):
                parts.append(block)
        return "\n".join(parts)
    return ""
