"""Claude Code transcripts (``~/.claude/projects/<project>/<sessionId>.jsonl``): each record
to a :class:`~alpstore.transcripts.steps.Step`.

Records link by ``uuid`` / ``parentUuid``; a ``system`` record of subtype
``compact_boundary`` has no parent but a ``logicalParentUuid``, and the ``user`` record after
it with ``isCompactSummary`` holds the summary the model continues from. One model response is
written as several ``assistant`` records sharing ``message.id`` (its thinking, text and each
``tool_use``). ``isSidechain`` records are a subagent's own conversation (``agentId``; newer
versions write them to ``<sessionId>/subagents/agent-<agentId>.jsonl``). ``isMeta`` records
(caveats, command output the harness injects), ``system`` records, ``summary`` titles,
``file-history-snapshot``, ``progress`` and other kinds are not the conversation.
"""

from __future__ import annotations

from typing import Any

from alpstore.transcripts.steps import Step, text_of

MESSAGE_TYPES = frozenset({"user", "assistant"})
AGENT_TOOLS = frozenset({"Task", "Agent"})
NO_AGENT = "\x00sidechain"
"""A sidechain record naming no ``agentId`` (older versions): the import groups them by root."""
"""The tools that start a subagent."""


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


KNOWN_TYPES = frozenset(
    {"user", "assistant", "system", "summary", "file-history-snapshot", "queue-operation"}
)
"""Record types a Claude Code transcript may start with."""


def is_record(obj: dict[str, Any]) -> bool:
    """The record looks like Claude Code's (for format detection): a ``type``, no OpenAI
    ``role`` beside it, and a Claude Code field or type.
    """
    kind = obj.get("type")
    if not isinstance(kind, str) or "role" in obj:
        return False
    return kind in KNOWN_TYPES or "uuid" in obj or "sessionId" in obj


def session_id(obj: dict[str, Any]) -> str | None:
    """The transcript's session id, when this record carries it."""
    return _str(obj.get("sessionId"))


def _only_results(content: Any) -> bool:
    return (
        isinstance(content, list)
        and bool(content)
        and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    )


def _agent_calls(content: Any) -> list[str]:
    calls = []
    for block in content if isinstance(content, list) else []:
        if (
            isinstance(block, dict)
            and block.get("type") == "tool_use"
            and block.get("name") in AGENT_TOOLS
        ):
            args = block.get("input")
            prompt = args.get("prompt") if isinstance(args, dict) else None
            if isinstance(prompt, str):
                calls.append(prompt)
    return calls


def _spawned(record: dict[str, Any]) -> list[str]:
    result = record.get("toolUseResult")
    agent = _str(result.get("agentId")) if isinstance(result, dict) else None
    return [agent] if agent else []


def step(line: int, record: dict[str, Any], *, agent: str | None = None) -> Step:
    """The step a record is. ``agent``: the subagent whose file this is (its records are
    sidechain records even where an older version did not say so).
    """
    kind = record.get("type")
    sidechain = record.get("isSidechain") is True or agent is not None
    out = Step(
        "skip",
        line,
        uuid=_str(record.get("uuid")),
        parent=_str(record.get("parentUuid")),
        agent=(_str(record.get("agentId")) or agent or NO_AGENT) if sidechain else None,
    )
    inner = record.get("message")
    if kind == "system":
        out.skipped = "system"
        if record.get("subtype") == "compact_boundary":
            meta = record.get("compactMetadata")
            out.skipped = "compact_boundary"
            out.trigger = _str(meta.get("trigger")) if isinstance(meta, dict) else None
            out.parent = out.parent or _str(record.get("logicalParentUuid"))
    elif kind not in MESSAGE_TYPES:
        out.skipped = kind if isinstance(kind, str) else "record"
    elif not isinstance(inner, dict):
        out.skipped = "malformed"
    elif record.get("isCompactSummary") is True:
        out.kind, out.summary = "fold", text_of(inner.get("content"))
    elif record.get("isMeta") is True:
        out.skipped = "meta"
    else:
        content = inner.get("content")
        out.kind, out.value = "message", record
        if kind == "assistant":
            out.group, out.calls = _str(inner.get("id")), _agent_calls(content)
        else:
            out.prompt, out.spawns = not _only_results(content), _spawned(record)
    return out


def first_prompt(value: dict[str, Any]) -> str:
    """A sidechain's first message's text: the prompt its ``Task``/``Agent`` call gave."""
    inner = value.get("message")
    return text_of(inner.get("content")) if isinstance(inner, dict) else ""


def merge(first: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """Two records of one model response (same ``message.id``) as one: the first record's
    fields, the content blocks of both in order, ``uuids`` naming every record merged.
    """
    a, b = first.get("message"), more.get("message")
    assert isinstance(a, dict) and isinstance(b, dict)
    blocks = _blocks(a.get("content")) + _blocks(b.get("content"))
    merged = {**first, "message": {**a, "content": blocks}}
    for key in ("stop_reason", "stop_sequence", "usage"):
        if key in b:
            merged["message"][key] = b[key]
    uuids = list(first.get("uuids") or [first.get("uuid")])
    merged["uuids"] = [*uuids, more.get("uuid")]
    return merged


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, list):
        return list(content)
    if isinstance(content, str) and content:
        return [{"type": "text", "text": content}]
    return []
