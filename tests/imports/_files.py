"""Deep files a test can write (plain mas-lab ones, as another machine would send), and a
fingerprint of an archive to prove a refused import changed nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from alpstore.db.tables import blobs, checkpoints, segment_entries, sessions
from alpstore.portable.files import manifest_hash
from alpstore.store import Store

MANIFEST: dict[str, Any] = {
    "apiVersion": "mas/v1",
    "kind": "Agent",
    "metadata": {"name": "coder"},
    "spec": {},
}


def mas_doc(
    session_id: str = "4f1c9a3e-8d2b-4c6e-9f00-1a2b3c4d5e6f",
    messages: list[Any] | None = None,
    *,
    label: str = "turn-0001",
    turn: int = 1,
    manifest: dict[str, Any] | None = None,
    kernel: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A version 2 file as mas-lab writes it (no alpstore markers)."""
    man = manifest if manifest is not None else MANIFEST
    doc: dict[str, Any] = {
        "version": 2,
        "label": label,
        "turn": turn,
        "lineage": {
            "session_id": session_id,
            "parent_session_id": None,
            "forked_from_checkpoint": None,
            "root_session_id": session_id,
            "created_at": "2026-09-30T12:00:00+00:00",
        },
        "kernel": kernel if kernel is not None else {"q": {}, "run": {}},
        "working_memory": [
            {
                "agent_id": "coder",
                "turn_history": [],
                "committed_messages": messages
                if messages is not None
                else [
                    {"role": "user", "content": "Summarise README.md"},
                    {"role": "assistant", "content": "It describes alpstore."},
                ],
                "conversation_chunks": None,
            }
        ],
        "manifest": {"content": man, "content_hash": manifest_hash(man)},
    }
    doc.update(extra)
    return doc


def write(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return path


def fingerprint(store: Store) -> tuple[Any, ...]:
    """Everything an import could add or change, comparable before and after."""
    with store.db.read() as conn:
        rows = conn.execute(
            select(
                sessions.c.uuid,
                sessions.c.name,
                sessions.c.status,
                sessions.c.turn,
                sessions.c.head_length,
            ).order_by(sessions.c.uuid)
        ).all()
        digests = sorted(bytes(d) for (d,) in conn.execute(select(blobs.c.digest)))
        cks = conn.execute(select(func.count()).select_from(checkpoints)).scalar_one()
        entries = conn.execute(select(func.count()).select_from(segment_entries)).scalar_one()
    return tuple(tuple(r) for r in rows), tuple(digests), cks, entries
