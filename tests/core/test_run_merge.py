"""The packer merges a session's small runs (issue 42, ``db.runs.merge_small``): an append of a
turn's few messages is a ``segment_runs`` row, ~80 B on PostgreSQL beside 4 B an id. Merged,
every position keeps its id (the ``segment_entries`` view, range reads, history, verify), runs
at or past the segment's length and runs already large stay as they are, `gc` trims a merged
run, and a long-lived writer's background packer merges as it packs. Both backends.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

import alpstore.archive.sql as archive_sql
import alpstore.archive.training as training
from alpstore.db import runmerge, runs
from alpstore.maintenance import gc, verify
from alpstore.samples import generate
from alpstore.sessions import Retention
from alpstore.store import Store
from alpstore.views import READ_RANGE, fetch_range
from tests.conftest import Backend


def _runs(store: Store) -> list[tuple[int, int, list[int]]]:
    with store.db.read() as conn:
        rows = conn.execute(
            text("SELECT segment_id, start, blob_ids FROM segment_runs ORDER BY 1, 2")
        ).all()
    return [(int(s), int(a), runs.run_ids(b, int(s), int(a))) for s, a, b in rows]


def _entries(store: Store) -> list[tuple[int, int, int]]:
    with store.db.read() as conn:
        rows = conn.execute(
            text("SELECT segment_id, position, blob_id FROM segment_entries ORDER BY 1, 2")
        ).all()
    return [(int(s), int(p), int(b)) for s, p, b in rows]


def _merge(store: Store, seg: int, since: int = 0) -> tuple[int, int]:
    with store.db.atomic() as conn:
        return runs.merge_small(conn, seg, since)


def _write(store: Store, name: str, turns: int, size: int = 3) -> tuple[Any, int]:
    session = store.create_session(name=name)
    for i in range(turns):
        session.commit_turn([{"role": "user", "content": f"{name} {i}.{j}"} for j in range(size)])
    seg = _runs(store)[-1][0]
    return session, seg


def test_merged_runs_keep_every_position(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runs, "MERGE_MOST", 10)
    store = backend.open_store()
    session, seg = _write(store, "merged", 12)
    entries, history = _entries(store), [e.value for e in session.history()]
    with store.db.read() as conn:
        every = [r[0] for r in fetch_range(conn, READ_RANGE, seg, 0, 36)]
    removed, since = _merge(store, seg)
    after = _runs(store)
    assert removed == 12 - 4 and [a for _, a, _ in after] == [0, 9, 18, 27]
    assert all(len(ids) <= 10 for _, _, ids in after)
    assert since == 27  # the last group is still small: looked at again next time
    assert _entries(store) == entries
    with store.db.read() as conn:
        for lo in range(0, 36, 5):
            for hi in range(lo, 37, 7):
                got = [r[0] for r in fetch_range(conn, READ_RANGE, seg, lo, hi)]
                assert got == every[lo:hi]
    assert [e.value for e in store.get_session("merged").history()] == history
    assert verify(store).ok
    assert _merge(store, seg, since) == (0, 27)


def test_large_runs_and_runs_past_the_length_stay(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runs, "MERGE_SMALL", 5)
    store = backend.open_store()
    session = store.create_session(name="mixed")
    for size in (2, 2, 6, 2, 1, 2):  # the 6-entry run is not small
        session.commit_turn([{"role": "user", "content": f"m{size}.{j}"} for j in range(size)])
    seg = _runs(store)[-1][0]
    blob = int(_runs(store)[0][2][0])
    with store.db.atomic() as conn:  # a run at the tip the segment's length does not cover
        runs.insert_run(conn, seg, 15, [blob])
    removed, since = _merge(store, seg)
    assert removed == 1 + 2
    assert [(a, len(ids)) for _, a, ids in _runs(store)] == [(0, 4), (4, 6), (10, 5), (15, 1)]
    assert since == 15  # the run at 10 holds 5 ids, not small: the next merge starts after it
    assert [e.value["content"] for e in session.history()][-1] == "m2.1"


def test_a_small_tail_is_merged_again_with_the_runs_after_it(backend: Backend) -> None:
    store = backend.open_store()
    session, seg = _write(store, "tail", 4, size=2)
    removed, since = _merge(store, seg)
    assert (removed, since) == (3, 0)  # 8 ids: still small, looked at again next time
    for i in range(3):
        session.commit_turn([{"role": "user", "content": f"later {i}"}])
    assert _merge(store, seg, since) == (3, 0)
    assert [(a, len(ids)) for _, a, ids in _runs(store)] == [(0, 11)]
    assert verify(store).ok


def test_gc_trims_a_merged_run(backend: Backend) -> None:
    store = backend.open_store()
    s = store.create_session(name="trim", retention=Retention(mode="single"))
    for i in range(4):
        s.commit_turn([{"role": "user", "content": f"m{i}.{j}"} for j in range(2)])
    seg = _runs(store)[-1][0]
    assert _merge(store, seg)[0] == 3
    s.pop_last()
    s.pop_last()
    s.pop_last()
    s.commit_turn([{"role": "user", "content": "instead"}])
    report = gc(store)
    assert report.entries_removed == 3
    assert verify(store).ok
    want = [*[f"m{i}.{j}" for i in range(4) for j in range(2)][:5], "instead"]
    assert [e.value["content"] for e in s.history()] == want


def test_a_long_lived_writer_merges_its_runs_as_it_packs(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(archive_sql, "PACK_EVERY", 300)
    monkeypatch.setattr(archive_sql, "PACK_EVERY_POSTGRESQL", 300)
    monkeypatch.setattr(archive_sql, "PACK_KEEP_LOOSE", 60)
    monkeypatch.setattr(training, "RECLAIM_IDLE", 0.1)
    store = backend.open_store()
    session = store.create_session(name="live")
    messages = list(generate(300, seed=3))
    turns = [messages[i : i + 4] for i in range(0, len(messages), 4)]
    for turn in turns:
        session.commit_turn(turn)
    assert store.archive.wait_for_training(timeout=60)
    assert store.archive.wait_for_packing(timeout=60)
    assert store.archive.packing_error is None
    assert len(_runs(store)) < len(turns) // 2, "the runs were not merged"
    assert [e.value for e in session.history()] == messages
    reader = backend.open_store()
    assert [e.value for e in reader.get_session("live").history()] == messages
    assert verify(store).ok


def test_two_processes_merging_one_segment_merge_it_once(backend: Backend) -> None:
    """PostgreSQL: a second merger of the same runs waits for the first's row locks, then
    finds those runs gone and merges nothing (it never writes a run over the first's)."""
    import threading

    if not backend.is_postgresql:
        pytest.skip("SQLite's write lock admits one merger at a time")
    store = backend.open_store()
    _, seg = _write(store, "twice", 10, size=2)
    entries = _entries(store)
    other = backend.open_store()
    got: list[tuple[int, int]] = []
    with store.db.atomic() as conn:
        assert runs.merge_small(conn, seg) == (9, 0)
        second = threading.Thread(target=lambda: got.append(_merge(other, seg)))
        second.start()
        second.join(0.5)
        assert second.is_alive(), "the second merger did not wait for the first"
    second.join(30)
    assert got == [(0, 0)]
    assert [(a, len(ids)) for _, a, ids in _runs(store)] == [(0, 20)]
    assert _entries(store) == entries
    assert verify(store).ok


def test_archive_pack_merges_the_runs_no_packer_looked_at(backend: Backend) -> None:
    """An archive whose writers closed before their packer merged (or written before it
    did): ``archive pack``'s ``merge_runs`` merges every segment's small runs, positions kept."""
    store = backend.open_store()
    store.archive.auto_pack = False
    _, seg_a = _write(store, "a", 12)
    _, seg_b = _write(store, "b", 5)
    entries = _entries(store)
    assert len([r for r in _runs(store) if r[0] == seg_a]) == 12
    removed = store.archive.merge_runs()
    assert removed == 12 - 1 + 5 - 1  # each segment's runs, 36 and 15 ids, now one run
    assert sorted({s for s, _, _ in _runs(store)}) == sorted({seg_a, seg_b})
    assert len(_runs(store)) == 2
    assert _entries(store) == entries
    assert verify(store).ok
    assert store.archive.merge_runs() == 0


def test_the_packer_remembers_merge_positions_of_a_bounded_number_of_segments(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A merger keeps the newest segments' positions only; one forgotten merges from 0 again,
    which finds its merged runs and changes nothing."""
    monkeypatch.setattr(runmerge, "POSITIONS_KEPT", 2)
    store = backend.open_store()
    store.archive.auto_pack = False
    segs = [_write(store, f"s{i}", 4)[1] for i in range(4)]
    archive = store.archive
    archive.runs.since = 0.0  # every session written since: all four heads
    archive.runs.merge_heads(store.db, lambda: True)
    assert len(archive.runs.positions) == 2 and set(archive.runs.positions) <= set(segs)
    entries = _entries(store)
    assert len(_runs(store)) == 4  # one run a segment
    archive.runs.since = 0.0
    archive.runs.merge_heads(store.db, lambda: True)  # the forgotten two again, from 0
    assert _entries(store) == entries and len(_runs(store)) == 4
    assert verify(store).ok
