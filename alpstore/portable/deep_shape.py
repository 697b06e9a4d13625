"""The checkpoint schema's version 2 (``schemas/checkpoint.schema.yaml``) checked by hand, for the
documents alpstore writes and reads most: :func:`certainly_valid` is True only when the document
certainly passes the schema (every check here is as strict as the schema's or stricter: exact
types, ``fullmatch`` for the manifest hash), so a document it does not vouch for goes through
jsonschema, which names the problem. A deep export or import of a valid file then never loads
jsonschema (about 70 ms of imports; issue 41). tests/portable/test_deep_shape.py holds the two to
each other with hypothesis.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

_TOP: Final = frozenset(
    {
        "version",
        "label",
        "turn",
        "backtrack_count",
        "spec_revision",
        "lineage",
        "kernel",
        "working_memory",
        "manifest",
        "memory_seeds",
        "runtime_profile",
    }
)
_TOP_REQUIRED: Final = frozenset(
    {"version", "label", "turn", "lineage", "kernel", "working_memory", "manifest"}
)
_LINEAGE: Final = frozenset(
    {"session_id", "parent_session_id", "forked_from_checkpoint", "root_session_id", "created_at"}
)
_AGENT: Final = frozenset(
    {
        "agent_id",
        "turn_history",
        "committed_messages",
        "conversation_chunks",
        "working_messages",
        "open_tool_call_id",
        "synced_tool_result_cids",
    }
)
_AGENT_REQUIRED: Final = frozenset(
    {"agent_id", "turn_history", "committed_messages", "conversation_chunks"}
)
_MANIFEST: Final = frozenset({"content", "content_hash"})
_HASH: Final = re.compile(r"[a-f0-9]{64}")


def _count(v: Any) -> bool:
    return type(v) is int and v >= 0


def _opt_text(v: Any) -> bool:
    return v is None or type(v) is str


def _objects(v: Any) -> bool:
    return type(v) is list and all(type(x) is dict for x in v)


def _agent(a: Any) -> bool:
    if type(a) is not dict or not _AGENT_REQUIRED <= a.keys() <= _AGENT:
        return False
    history = a["turn_history"]
    return (
        type(a["agent_id"]) is str
        and len(a["agent_id"]) >= 1
        and type(history) is list
        and all(
            type(pair) is list and len(pair) == 2 and all(type(x) is str for x in pair)
            for pair in history
        )
        and _objects(a["committed_messages"])
        and (a["conversation_chunks"] is None or type(a["conversation_chunks"]) is dict)
        and ("working_messages" not in a or _objects(a["working_messages"]))
        and ("open_tool_call_id" not in a or type(a["open_tool_call_id"]) is str)
        and (
            "synced_tool_result_cids" not in a
            or (
                type(a["synced_tool_result_cids"]) is list
                and all(type(x) is int for x in a["synced_tool_result_cids"])
            )
        )
    )


def certainly_valid(doc: Any, is_datetime: Callable[[str], bool]) -> bool:
    """True when ``doc`` certainly passes the checkpoint schema as version 2 (its date-time
    format checked by ``is_datetime``, the schema's format checker, raising ``ValueError`` for
    a bad one); False means "ask jsonschema".
    """
    if type(doc) is not dict or not _TOP_REQUIRED <= doc.keys() <= _TOP:
        return False
    lineage, kernel, manifest = doc["lineage"], doc["kernel"], doc["manifest"]
    if not (
        type(doc["version"]) is int
        and doc["version"] == 2
        and type(doc["label"]) is str
        and _count(doc["turn"])
        and ("backtrack_count" not in doc or _count(doc["backtrack_count"]))
        and ("spec_revision" not in doc or _count(doc["spec_revision"]))
        and type(lineage) is dict
        and lineage.keys() == _LINEAGE
        and type(lineage["session_id"]) is str
        and len(lineage["session_id"]) >= 1
        and _opt_text(lineage["parent_session_id"])
        and _opt_text(lineage["forked_from_checkpoint"])
        and _opt_text(lineage["root_session_id"])
        and type(lineage["created_at"]) is str
        and type(kernel) is dict
        and "q" in kernel
        and "run" in kernel
        and type(doc["working_memory"]) is list
        and all(_agent(a) for a in doc["working_memory"])
        and type(manifest) is dict
        and manifest.keys() == _MANIFEST
        and type(manifest["content"]) is dict
        and type(manifest["content_hash"]) is str
        and _HASH.fullmatch(manifest["content_hash"]) is not None
        and ("memory_seeds" not in doc or _objects(doc["memory_seeds"]))
        and ("runtime_profile" not in doc or type(doc["runtime_profile"]) is dict)
    ):
        return False
    try:
        return bool(is_datetime(lineage["created_at"]))
    except ValueError:
        return False
