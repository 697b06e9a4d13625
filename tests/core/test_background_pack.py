"""Packing in the background of a long-lived writer (issue 33): once it has stored
``PACK_EVERY`` + ``PACK_KEEP_LOOSE`` new blobs, a thread of its own packs the cold ones at a
pause in its writes — never inside a turn, one frame per transaction — leaving the newest
``PACK_KEEP_LOOSE`` loose; it stops at the next frame when the archive closes. Both backends.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

import alpstore.archive.packing as packing
import alpstore.archive.sql as archive_sql
import alpstore.archive.training as training
from alpstore.archive.frames import CODEC_PACKED
from alpstore.archive.sql import SqlArchive
from alpstore.maintenance import verify
from alpstore.samples import generate
from tests.conftest import Backend

EVERY, KEEP = 300, 60


def _turns(n: int, seed: int = 3) -> list[list[dict[str, Any]]]:
    messages = list(generate(n, seed=seed))
    return [messages[i : i + 4] for i in range(0, len(messages), 4)]


def _codecs(store: Any) -> list[int]:
    with store.db.read() as conn:
        return [int(c) for (c,) in conn.exec_driver_sql("SELECT codec FROM blobs ORDER BY id")]


@pytest.fixture
def small_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archive_sql, "PACK_EVERY", EVERY)
    monkeypatch.setattr(archive_sql, "PACK_EVERY_POSTGRESQL", EVERY)
    monkeypatch.setattr(archive_sql, "PACK_KEEP_LOOSE", KEEP)
    monkeypatch.setattr(training, "RECLAIM_IDLE", 0.2)


def test_a_long_lived_writer_packs_its_cold_blobs_at_a_pause(
    backend: Backend, small_thresholds: None
) -> None:
    store = backend.open_store()
    session = store.create_session(name="live")
    written = []
    for turn in _turns(600):
        session.commit_turn(turn)
        written.append(turn)
    assert store.archive.wait_for_training(timeout=60)
    assert store.archive.wait_for_packing(timeout=60)
    assert store.archive.packing_error is None
    codecs = _codecs(store)
    assert codecs.count(CODEC_PACKED) > 0, "nothing was packed"
    assert CODEC_PACKED not in codecs[-KEEP:], "the newest blobs stay loose"
    stats = store.archive.stats()
    assert stats.frames > 0 and stats.packed_blobs == codecs.count(CODEC_PACKED)
    assert [e.value for e in session.history()] == [m for t in written for m in t]
    reader = backend.open_store()  # another process's view: the same conversation
    assert [e.value for e in reader.get_session("live").history()] == [
        m for t in written for m in t
    ]
    assert verify(store).ok


def test_the_packer_waits_for_a_pause_and_never_packs_inside_a_turn(
    backend: Backend, small_thresholds: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    frames: list[tuple[float, bool]] = []
    real = SqlArchive._write_frame

    def spy(self: SqlArchive, members: Any, report: Any) -> None:
        frames.append((time.monotonic(), self.db.in_transaction()))
        real(self, members, report)

    monkeypatch.setattr(SqlArchive, "_write_frame", spy)
    monkeypatch.setattr(training, "RECLAIM_IDLE", 0.4)
    store = backend.open_store()
    session = store.create_session(name="busy")
    turns = iter(_turns(1200, seed=4))
    for _ in range(100):  # past the threshold
        session.commit_turn(next(turns))
    busy_until = time.monotonic() + 1.2
    while time.monotonic() < busy_until:  # writes less than the pause apart
        session.commit_turn(next(turns))
        time.sleep(0.05)
    assert frames == [], "a frame was written while this process kept writing"
    last_write = store.archive._last_write
    assert store.archive.wait_for_packing(timeout=60)
    assert frames, "nothing was packed after the writes paused"
    assert frames[0][0] - last_write >= 0.39
    assert not any(inside for _, inside in frames)
    assert verify(store).ok


def test_closing_stops_the_packer_at_the_next_frame(
    backend: Backend, small_thresholds: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(packing, "FRAME_TARGET", 4096)  # many frames: the close lands mid-way
    entered = threading.Event()
    release = threading.Event()
    real = SqlArchive._write_frame

    def slow(self: SqlArchive, members: Any, report: Any) -> None:
        entered.set()
        release.wait(10)
        real(self, members, report)

    monkeypatch.setattr(SqlArchive, "_write_frame", slow)
    store = backend.open_store()
    session = store.create_session(name="closing")
    written = []
    for turn in _turns(600, seed=5):
        session.commit_turn(turn)
        written.append(turn)
    assert entered.wait(30), "the packer did not start"
    closer = threading.Thread(target=store.close)
    closer.start()
    time.sleep(0.2)
    release.set()
    closer.join(30)
    assert not closer.is_alive()
    again = backend.open_store()
    codecs = _codecs(again)
    assert codecs.count(CODEC_PACKED) < len(codecs) - KEEP, "it went on packing after close"
    assert [e.value for e in again.get_session("closing").history()] == [
        m for t in written for m in t
    ]
    assert verify(again).ok


def test_no_background_packing_when_it_is_off(backend: Backend, small_thresholds: None) -> None:
    store = backend.open_store()
    store.archive.auto_pack = False
    session = store.create_session(name="off")
    for turn in _turns(600, seed=6):
        session.commit_turn(turn)
    assert store.archive.wait_for_packing(timeout=5)
    assert CODEC_PACKED not in _codecs(store)


def test_an_import_in_one_transaction_leaves_packing_to_its_settle(
    backend: Backend, small_thresholds: None, tmp_path: Path
) -> None:
    """Each imported turn ends inside the import's one transaction: no packer starts there
    (it would race the settle that follows and split the frames)."""
    from alpstore.importers import import_history, parse_history
    from alpstore.samples import write_jsonl

    source = tmp_path / "c.jsonl"
    write_jsonl(source, 200, seed=8)
    store = backend.open_store()
    import_history(store, parse_history(source, "auto"), name="imported")
    assert store.archive._packer is None, "a packer started inside the import"
    store.archive.settle()
    assert store.archive._packer is None
    if backend.is_postgresql:
        return  # the settle packs on SQLite only (the next writes' packer packs there)
    store.archive.put({"after": "the import"})  # the next write does not count the import's
    assert store.archive._packer is None
    codecs = _codecs(store)
    assert codecs[:-1] == [CODEC_PACKED] * (len(codecs) - 1)
