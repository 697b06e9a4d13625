"""Big archives built fast for the scale tests: a fork chain thousands deep and thousands of
sessions, inserted as rows in one transaction (copies of a real session's row), not forked one
by one.
"""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

from alpstore.core.rows import SESSION_COLUMNS, SessionRow
from alpstore.db import raw as rsql
from alpstore.sessions import Session
from alpstore.store import Store


def _copies(store: Store, template: Session, n: int, *, chain: bool, prefix: str) -> list[int]:
    """``n`` copies of ``template``'s row; ``chain``: each the fork of the one before (the
    first of ``template``), else each a root of its own. Returns their ids.
    """
    cols = SessionRow._fields
    with store.db.atomic() as conn:
        row = SessionRow(
            *rsql.fetchone(
                conn, f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?", (template.id,)
            )
        )
        top = int(rsql.fetchone(conn, "SELECT MAX(id) FROM sessions")[0])
        ck = rsql.fetchone(
            conn, "SELECT MAX(id) FROM checkpoints WHERE session_id = ?", (template.id,)
        )[0]
        rows: list[tuple[Any, ...]] = []
        ids = list(range(top + 1, top + 1 + n))
        for k, sid in enumerate(ids):
            parent = (ids[k - 1] if k else template.id) if chain else None
            values = row._replace(
                id=sid,
                uuid=str(uuidlib.uuid4()),
                name=f"{prefix}{k}",
                parent_id=parent,
                root_id=template.id if chain else None,
                source_checkpoint_id=ck if chain else None,
            )
            rows.append(tuple(values))
        marks = ", ".join("?" * len(cols))
        rsql.executemany(conn, f"INSERT INTO sessions ({SESSION_COLUMNS}) VALUES ({marks})", rows)
        if store.db.is_postgresql:
            rsql.execute(
                conn, "SELECT setval(pg_get_serial_sequence('sessions', 'id'), ?)", (ids[-1],)
            )
    return ids


def fork_chain(store: Store, root: Session, depth: int) -> list[int]:
    """``depth`` sessions under ``root``, each forked from the one before."""
    return _copies(store, root, depth, chain=True, prefix="deep")


def many_sessions(store: Store, template: Session, n: int) -> list[int]:
    """``n`` more root sessions like ``template``."""
    return _copies(store, template, n, chain=False, prefix="bulk")
