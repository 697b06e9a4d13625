"""A LangGraph thread's subgraph namespaces belong to it: the session of a namespace
(``langgraph:THREAD NS``) is a child of the thread's own (``langgraph:THREAD``), forked from
the thread's newest checkpoint when the namespace first checkpointed, so ``session list`` and
``lineage`` show it under its thread, never as a root.
"""

from __future__ import annotations

from typing import Any

from alpstore.db import raw as rsql


def link_namespace(conn: Any, thread_id: str, ns: str, session_id: int) -> None:
    """Make the session of namespace ``ns`` a child of its thread's root-namespace session
    (nothing for the root namespace itself, or before the thread has one).
    """
    if not ns:
        return
    parent = rsql.fetchone(
        conn,
        "SELECT s.id, s.root_id FROM lg_threads t JOIN sessions s ON s.id = t.session_id "
        "WHERE t.thread_id = ? AND t.checkpoint_ns = ''",
        (thread_id,),
    )
    if parent is None or int(parent[0]) == session_id:
        return
    latest = rsql.fetchone(
        conn,
        "SELECT id FROM checkpoints WHERE session_id = ? ORDER BY seq DESC LIMIT 1",
        (int(parent[0]),),
    )
    rsql.execute(
        conn,
        "UPDATE sessions SET parent_id = ?, root_id = ?, source_checkpoint_id = ? WHERE id = ?",
        (
            int(parent[0]),
            int(parent[1] or parent[0]),
            None if latest is None else int(latest[0]),
            session_id,
        ),
    )
