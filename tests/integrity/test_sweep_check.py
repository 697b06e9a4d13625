"""GC's sweep checks its own deletes against the segment runs (0009): a run's blob ids have no
foreign key on either backend, so a mark that missed one must not delete the blob a
conversation still holds. Here the mark is made to miss one: the sweep refuses, one line,
nothing removed, and the conversation reads as before."""

from __future__ import annotations

from typing import Any

import pytest

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
