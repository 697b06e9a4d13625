"""Whole-archive reads beside writers (issue 13's stress run found the first on PostgreSQL).

GC's mark and ``verify`` read sessions, checkpoints and segments in several statements. Under
PostgreSQL's default READ COMMITTED each statement sees what was committed when it began, and
GC's table locks hold off only writers that keep a reference to a blob or a segment: a writer
that inserted a session (its references NULL: PostgreSQL takes the share lock and releases it
at once) before GC began can commit between two of GC's statements. Both now read one
snapshot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import event

from alpstore.maintenance import gc, verify
from alpstore.store import Store
from tests.conftest import Backend


def _after_first(store: Store, needle: str, action: Callable[[], None]) -> Callable[[], None]:
    """Run ``action`` once, right after ``store`` first runs a statement containing
    ``needle``; return the function that removes the hook."""
    done: list[bool] = []

    def after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not done and needle in statement:
            done.append(True)
            action()

    event.listen(store.db.engine, "after_cursor_execute", after)
    return lambda: event.remove(store.db.engine, "after_cursor_execute", after)


def _contents(store: Store, name: str) -> list[Any]:
    return [e.value["content"] for e in store.get_session(name).history()]


def test_gc_beside_a_session_committed_during_its_mark(backend: Backend) -> None:
    if not backend.is_postgresql:
        pytest.skip("SQLite's GC holds the only write lock: no writer commits during its mark")
    store = backend.open_store()
    store.create_session(name="kept").commit_turn([{"role": "user", "content": "hello"}])
    writer = backend.open_database().engine.connect()
    # a writer inserts a session before GC starts, and commits once GC has read some tables
    writer.exec_driver_sql(
        "INSERT INTO sessions (uuid, name, status, head_length, turn, backtrack_count, "
        "retention_mode, retention_n, created_at, updated_at) "
        "VALUES ('born-during-gc', 'born-during-gc', 'created', 0, 0, 0, 'all', 10, 0, 0)"
    )
    remove = _after_first(store, "FROM sessions", writer.commit)
    try:
        gc(store)  # before: KeyError (the session id), GC refused to run
    finally:
        remove()
        writer.close()
    assert verify(store).ok
    assert _contents(store, "kept") == ["hello"]
    assert _contents(store, "born-during-gc") == []


def test_verify_beside_a_writer_reports_nothing(backend: Backend) -> None:
    store, other = backend.open_store(), backend.open_store()
    store.create_session(name="a").commit_turn([{"role": "user", "content": "one"}])

    def write() -> None:  # a new session, a new segment, a new head
        other.create_session(name="b").commit_turn([{"role": "user", "content": "two"}])

    remove = _after_first(store, "FROM segments", write)
    try:
        report = verify(store)  # before, on PostgreSQL: "points at missing view segment"
    finally:
        remove()
    assert report.ok, [p.line() for p in report.problems]
    assert verify(store).ok
    assert _contents(store, "b") == ["two"]
