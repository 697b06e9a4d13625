"""GC's sweep checks its own deletes against the segment runs (0009): a run's blob ids have no
foreign key on either backend, so a mark that missed one must not delete the blob a
conversation still holds. Here the mark is made to miss one: the sweep refuses, one line,
nothing removed, and the conversation reads as before."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

import alpstore.maintenance as maintenance
from alpstore.errors import IntegrityError
from tests.conftest import Backend


def test_a_sweep_refuses_to_delete_a_blob_a_run_still_holds(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = backend.open_store()
    s = store.create_session(name="held")
    s.commit_turn([{"role": "user", "content": "held by a run"}])
    s.commit_turn([{"role": "assistant", "content": "also held"}])
    store.archive.put_many([{"role": "user", "content": "unreferenced"}])
    held = store.db.engine.connect()
    try:
        run_ids = [
            int(b)
            for (b,) in held.exec_driver_sql(
                "SELECT blob_id FROM segment_entries ORDER BY segment_id, position"
            )
        ]
        blobs_before = held.exec_driver_sql("SELECT count(*) FROM blobs").scalar()
    finally:
        held.close()
    real = maintenance._reachable_blobs

    def missing_one(*args: Any) -> set[int]:
        return real(*args) - {run_ids[0]}  # a mark that missed a run's first blob

    monkeypatch.setattr(maintenance, "_reachable_blobs", missing_one)
    with pytest.raises(
        IntegrityError, match=f"segment_entries.blob_id still refers to blob id {run_ids[0]}"
    ):
        maintenance.gc(store)
    monkeypatch.undo()
    check = store.db.engine.connect()
    try:
        assert check.exec_driver_sql("SELECT count(*) FROM blobs").scalar() == blobs_before
    finally:
        check.close()
    assert [e.value["content"] for e in store.get_session("held").history()] == [
        "held by a run",
        "also held",
    ]
    assert maintenance.gc(store).blobs_removed == 1  # the real mark: only the loose one goes


@pytest.mark.parametrize(
    ("table", "column", "where"),
    [
        ("sessions", "manifest_blob_id", "name = 'held'"),
        ("checkpoints", "kernel_blob_id", "id = (SELECT max(id) FROM checkpoints)"),
    ],
)
def test_a_sweep_refuses_to_delete_a_blob_any_referring_column_holds(
    backend: Backend, monkeypatch: pytest.MonkeyPatch, table: str, column: str, where: str
) -> None:
    """Every column of ``BLOB_REFERENCES`` is checked on both backends: no foreign key names a
    blob since 0010 (PostgreSQL's sweep checked the segment runs only)."""
    store = backend.open_store()
    s = store.create_session(name="held")
    s.commit_turn([{"role": "user", "content": "a turn"}])
    (loose,) = store.archive.put_many([{"role": "user", "content": "held by a column"}])
    with store.db.atomic() as conn:
        blob = conn.execute(
            text("SELECT id FROM blobs WHERE digest = :d"), {"d": bytes(loose)}
        ).scalar_one()
        conn.exec_driver_sql(f"UPDATE {table} SET {column} = {int(blob)} WHERE {where}")
    real = maintenance._reachable_blobs

    def missing_it(*args: Any) -> set[int]:
        return real(*args) - {int(blob)}

    monkeypatch.setattr(maintenance, "_reachable_blobs", missing_it)
    with pytest.raises(IntegrityError, match=f"{table}.{column} still refers to blob id {blob}"):
        maintenance.gc(store)
    monkeypatch.undo()
    assert store.archive.get(loose)["content"] == "held by a column"
    assert maintenance.gc(store).blobs_removed == 0
