"""GC beside writers on PostgreSQL can be a deadlock's victim (its table locks against a
writer's row locks, taken in the other order): it is run again, as a writer's transaction is,
instead of failing the collection. Seen once in CI's stress test: "gc: … deadlock detected"."""

from __future__ import annotations

from typing import Any

import pytest

import alpstore.maintenance as maintenance
from alpstore.errors import DatabaseError
from tests.conftest import Backend


def _transient(message: str) -> DatabaseError:
    err = DatabaseError(message)
    err.transient = True  # type: ignore[attr-defined]  # as translate_errors marks 40P01
    return err


def test_gc_runs_again_when_chosen_as_a_deadlock_victim(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = backend.open_store()
    store.archive.put_many([{"role": "user", "content": "unreferenced"}])
    real = maintenance._gc_once
    attempts: list[int] = []

    def once(*args: Any) -> Any:
        attempts.append(1)
        if len(attempts) == 1:
            raise _transient("archive: deadlock detected")
        return real(*args)

    monkeypatch.setattr(maintenance, "_gc_once", once)
    report = maintenance.gc(store)
    assert len(attempts) == 2
    assert report.blobs_removed == 1


def test_gc_does_not_retry_a_lasting_error(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = backend.open_store()

    def broken(*args: Any) -> Any:
        raise DatabaseError("archive: permission denied")

    monkeypatch.setattr(maintenance, "_gc_once", broken)
    with pytest.raises(DatabaseError, match="permission denied"):
        maintenance.gc(store)
