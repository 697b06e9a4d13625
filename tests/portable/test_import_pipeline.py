"""An import stores each batch on a thread of its own while it reads the next one (issue 14's
speed): the connection is never used by two threads at once, a failure on either side rolls
everything back, and nothing is committed or rolled back while a batch is still being stored.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

import alpstore.portable.importing as importing
from alpstore.archive.sql import SqlArchive
from alpstore.db.tables import blobs, sessions
from alpstore.errors import CheckpointFileError
from alpstore.portable.deep import snapshot_of_head
from alpstore.portable.exporting import write_export
from alpstore.portable.importing import import_file
from alpstore.store import Store
from tests.conftest import Backend


def _messages(n: int) -> list[dict[str, Any]]:
    return [
        {"role": "user" if i % 2 else "assistant", "content": f"message {i} " + "x" * (i % 97)}
        for i in range(n)
    ]


@pytest.fixture
def deep_file(tmp_path: Path) -> Path:
    """An export of a 1,300-message session: three batches of 500 at import."""
    with Store.open(tmp_path / "src") as st:
        s = st.create_session(session_id="pipe", name="pipe")
        s.append(_messages(1300))
        s.checkpoint(label="all")
        path = tmp_path / "pipe.json"
        write_export(st, snapshot_of_head(st, s), path)
    return path


def _counts(store: Store) -> tuple[int, int]:
    with store.db.read() as conn:
        n_blobs = conn.execute(select(func.count()).select_from(blobs)).scalar_one()
        n_sessions = conn.execute(select(func.count()).select_from(sessions)).scalar_one()
    return int(n_blobs), int(n_sessions)


class _Watch:
    """Wraps the archive's batch store: slow, records which thread ran it and whether a
    transaction ended while it ran (it never may)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, fail_on: int | None = None) -> None:
        self.threads: set[int] = set()
        self.running = threading.Event()
        self.overlaps: list[str] = []
        self.calls = 0
        original = SqlArchive.store_encoded_counted

        def slow(archive: SqlArchive, conn: Any, items: Any) -> Any:
            self.calls += 1
            self.threads.add(threading.get_ident())
            self.running.set()
            try:
                time.sleep(0.05)  # the reading thread goes on meanwhile
                if fail_on is not None and self.calls == fail_on:
                    raise CheckpointFileError("batch store failed on purpose")
                return original(archive, conn, items)
            finally:
                self.running.clear()

        monkeypatch.setattr(SqlArchive, "store_encoded_counted", slow)


def _watch_transactions(monkeypatch: pytest.MonkeyPatch, store: Store, watch: _Watch) -> None:
    """Record a commit or rollback that happens while a batch is being stored."""
    original = store.db.atomic

    from contextlib import contextmanager

    @contextmanager
    def atomic(*args: Any, **kw: Any) -> Any:
        try:
            with original(*args, **kw) as conn:
                yield conn
                if watch.running.is_set():
                    watch.overlaps.append("commit")
        except BaseException:
            if watch.running.is_set():
                watch.overlaps.append("rollback")
            raise

    monkeypatch.setattr(store.db, "atomic", atomic)


def test_batches_are_stored_off_the_reading_thread(
    backend: Backend, deep_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch = _Watch(monkeypatch)
    store = backend.open_store()
    _watch_transactions(monkeypatch, store, watch)
    result = import_file(store, deep_file)
    assert result.entries == 1300
    assert watch.calls >= 3
    assert threading.get_ident() not in watch.threads  # stored on the storing thread
    assert watch.overlaps == []
    assert [e.value for e in store.get_session("pipe").history()] == _messages(1300)
    assert not any(t.name.startswith("alpstore-import") for t in threading.enumerate())


def test_a_file_error_read_while_a_batch_is_stored_rolls_back_after_it(
    backend: Backend, tmp_path: Path, deep_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = json.loads(deep_file.read_text())
    committed = doc["working_memory"][0]["committed_messages"]
    committed[1200]["_alpstore"]["digest"] = "0" * 64  # found after two batches went off
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    watch = _Watch(monkeypatch)
    store = backend.open_store()
    before = _counts(store)
    _watch_transactions(monkeypatch, store, watch)
    with pytest.raises(CheckpointFileError, match=r"committed_messages\[1200\].*does not match"):
        import_file(store, bad)
    assert watch.calls >= 2
    assert watch.overlaps == []  # the rollback waited for the batch in flight
    assert _counts(store) == before
    assert not any(t.name.startswith("alpstore-import") for t in threading.enumerate())


def test_a_failing_batch_store_fails_the_import_and_rolls_back(
    backend: Backend, deep_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch = _Watch(monkeypatch, fail_on=2)
    store = backend.open_store()
    before = _counts(store)
    with pytest.raises(CheckpointFileError, match="batch store failed on purpose"):
        import_file(store, deep_file)
    assert _counts(store) == before
    # the archive takes the next import as if nothing happened
    monkeypatch.setattr(importing, "BATCH_ITEMS", 200)
    watch.calls = -100  # no more failures
    assert import_file(store, deep_file).entries == 1300
    assert [e.value for e in store.get_session("pipe").history()] == _messages(1300)
