"""The automatic zstd dictionary is trained off the writer's path (issue 16).

The write that crosses ``AUTO_TRAIN_SAMPLES`` returns without training; training, the
dictionary's commit and the recompression run in a background thread with transactions of their
own, beside further turns and `gc`, and a blob never refers to a dictionary that is not committed.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import func, select

import alpstore.archive.sql as archive_sql
from alpstore import codec
from alpstore.codec import CODEC_ZSTD_DICT
from alpstore.db.tables import blobs, zstd_dicts
from alpstore.maintenance import gc
from alpstore.samples import generate
from tests.conftest import Backend

THRESHOLD = 120
"""A lower threshold than the shipped one keeps the test quick; the mechanism is the same."""


def _turns(n: int) -> list[list[dict[str, Any]]]:
    turns: list[list[dict[str, Any]]] = []
    for m in generate(n * 2, seed=11):
        if m.get("role") == "user" or not turns:
            turns.append([m])
        else:
            turns[-1].append(m)
    return turns


class GatedTrainer:
    """Stands in for ``codec.train_dictionary``: records the calling thread, and holds a
    background call until released (a call on the test's own thread is never held)."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self._real = codec.train_dictionary

    def __call__(self, samples: Any, size: int) -> bytes:
        self.threads.append(threading.current_thread())
        self.entered.set()
        if threading.current_thread() is not threading.main_thread():
            assert self.release.wait(60), "the test never released the trainer"
        return self._real(samples, size)


@pytest.fixture
def trainer(monkeypatch: pytest.MonkeyPatch) -> GatedTrainer:
    gate = GatedTrainer()
    monkeypatch.setattr(archive_sql, "train_dictionary", gate)
    monkeypatch.setattr(archive_sql, "AUTO_TRAIN_SAMPLES", THRESHOLD)
    return gate


def _count(store: Any, query: Any) -> int:
    with store.db.read() as conn:
        return int(conn.execute(query).scalar_one())


def test_the_turn_crossing_the_threshold_does_not_train(
    backend: Backend, trainer: GatedTrainer
) -> None:
    store = backend.open_store()
    session = store.create_session(name="t")
    turns = iter(_turns(400))
    committed: list[dict[str, Any]] = []
    while not store.archive.training:  # commit turns until one starts the training
        assert store.archive.dictionary_id is None
        turn = next(turns)
        session.commit_turn(turn)
        committed += turn
    # that commit returned while the trainer is still held: it did not train
    assert trainer.entered.wait(30)
    assert all(t is not threading.main_thread() for t in trainer.threads)
    assert store.archive.dictionary_id is None
    for _ in range(5):  # writers go on beside the held trainer
        turn = next(turns)
        session.commit_turn(turn)
        committed += turn
    assert _count(store, select(func.count()).select_from(zstd_dicts)) == 0
    trainer.release.set()
    assert store.archive.wait_for_training(timeout=60)
    assert store.archive.training_error is None
    assert store.archive.dictionary_id is not None
    recompressed = _count(
        store, select(func.count()).select_from(blobs).where(blobs.c.codec == CODEC_ZSTD_DICT)
    )
    assert recompressed > 0  # the blobs written before it were re-encoded with it
    turn = next(turns)
    session.commit_turn(turn)
    committed += turn
    after = _count(
        store, select(func.count()).select_from(blobs).where(blobs.c.codec == CODEC_ZSTD_DICT)
    )
    assert after > recompressed  # and new small blobs use it
    assert [e.value for e in session.history()] == committed
    assert store.archive.verify().ok
    assert len(trainer.threads) == 1


def test_gc_and_writers_beside_the_recompression(
    backend: Backend, trainer: GatedTrainer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dictionary commits first; blobs `gc` deletes while the recompression is held are
    simply not rewritten; every kept blob reads back and verifies."""
    store = backend.open_store()
    archive = store.archive
    installed = threading.Event()
    resume = threading.Event()
    real_recompress = archive._recompress

    def held(dict_id: int, items: Any) -> int:
        installed.set()
        assert resume.wait(60)
        return real_recompress(dict_id, items)

    monkeypatch.setattr(archive, "_recompress", held)
    trainer.release.set()
    loose = archive.put_many(  # referenced by no session: `gc` takes them
        [{"role": "tool", "content": f"scratch output {i} " * 12} for i in range(THRESHOLD)]
    )
    assert archive.training or archive.dictionary_id is not None
    assert installed.wait(60)
    # the dictionary is committed (another connection sees it) before anything uses it
    assert _count(store, select(func.count()).select_from(zstd_dicts)) == 1
    session = store.create_session(name="kept")
    kept = [m for turn in _turns(20) for m in turn]
    session.append(kept)  # new small blobs refer to the committed dictionary
    report = gc(store)
    assert report.blobs_removed >= len(loose)
    resume.set()
    assert archive.wait_for_training(timeout=60)
    assert archive.training_error is None
    assert not any(archive.has(d) for d in loose)
    assert [e.value for e in session.history()] == kept
    assert archive.verify().ok


def test_a_failed_training_is_reported_and_not_retried_on_every_write(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tiny blobs count towards the threshold but cannot train a dictionary: the failure is
    kept in ``training_error``, writes go on, and no new attempt starts before as many small
    blobs again are stored."""
    monkeypatch.setattr(archive_sql, "AUTO_TRAIN_SAMPLES", THRESHOLD)
    store = backend.open_store()
    archive = store.archive
    archive.put_many([{"i": i} for i in range(THRESHOLD)])  # 7-9 bytes each: no samples
    assert archive.wait_for_training(timeout=60)
    assert "small blobs" in str(archive.training_error)
    starts: list[int] = []
    real = archive._train_in_background

    def counted(samples: int) -> None:
        starts.append(samples)
        real(samples)

    monkeypatch.setattr(archive, "_train_in_background", counted)
    archive.put_many([{"j": i} for i in range(THRESHOLD - 1)])
    assert archive.wait_for_training(timeout=60) and starts == []
    archive.put_many([{"role": "tool", "content": f"output line {i} " * 20} for i in range(40)])
    assert archive.wait_for_training(timeout=60)
    assert len(starts) == 1 and archive.training_error is None
    assert archive.dictionary_id is not None
