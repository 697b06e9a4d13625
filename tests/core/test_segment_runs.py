"""Migration 0009: a segment's entries as runs (``segment_runs``), ``segment_entries`` a view.

An archive brought to every earlier revision (the real downgrades, with the rows the archive
held) and migrated to head again answers ``session log``, ``session show`` at every checkpoint,
``session digest`` and ``archive verify`` as before, and its view's rows equal the old table's;
range reads are bounded by the runs' key; gc trims cut a run.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from alembic import command
from alpstore.db.migrate import SCHEMA_HEAD, alembic_config, current_revision, upgrade
from alpstore.maintenance import gc, verify
from alpstore.sessions import Retention
from alpstore.store import Store
from alpstore.views import READ_RANGE, fetch_range
from tests.conftest import Backend

EARLIER = ["0001", "0002", "0003", "0004", "0005", "0006", "0007", "0008"]


def _build(store: Store) -> list[str]:
    """Sessions with folds, backtracks, a fork and packed frames; their names."""
    main = store.create_session(name="main", retention=Retention())
    for i in range(14):
        main.commit_turn(
            [
                {"role": "user", "content": f"question {i} " + "context " * (i * 5)},
                {"role": "assistant", "content": f"answer {i}"},
            ]
        )
    main.fold(2, 6, "the early turns, summarised")
    main.checkpoint(label="after-fold")
    main.backtrack(1, "the other way")
    main.commit_turn([{"role": "assistant", "content": "taking the other way"}])
    child = main.fork(name="child")
    for i in range(3):
        child.commit_turn([{"role": "user", "content": f"only in the child {i}"}])
    store.archive.pack_cold()
    return ["main", "child"]


def _answers(backend: Backend, names: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in names:
        log = backend.cli("session", "log", name, "--json")
        assert log.code == 0, log.err
        out[f"log {name}"] = log.out
        out[f"digest {name}"] = backend.cli("session", "digest", name).out
        out[f"show {name}"] = backend.cli("session", "show", name, "--json").out
    store = backend.open_store()
    for name in names:
        for ck in store.get_session(name).checkpoints(include_abandoned=True):
            shown = backend.cli("session", "show", name, "--at", str(ck.id), "--json")
            assert shown.code == 0, shown.err
            out[f"show {name} at {ck.id}"] = shown.out
    verified = backend.cli("archive", "verify")
    out["verify"] = (verified.code, verified.out)
    return out


def _entries(backend: Backend) -> list[tuple[int, int, int]]:
    db = backend.open_database()
    with db.read() as conn:
        rows = conn.execute(
            text(
                "SELECT segment_id, position, blob_id FROM segment_entries "
                "ORDER BY segment_id, position"
            )
        ).all()
    return [(int(s), int(p), int(b)) for s, p, b in rows]


@pytest.mark.parametrize("revision", EARLIER)
def test_an_archive_at_every_earlier_revision_migrates_to_the_same_answers(
    backend: Backend, revision: str
) -> None:
    names = _build(backend.open_store())
    backend.close_all()
    before = _answers(backend, names)
    assert before["verify"][0] == 0, before["verify"]
    entries = _entries(backend)
    backend.close_all()
    db = backend.open_database()
    command.downgrade(alembic_config(db), revision)
    assert current_revision(db) == revision
    with db.read() as conn:  # the old table, one row per entry
        old = conn.execute(
            text("SELECT segment_id, position, blob_id FROM segment_entries ORDER BY 1, 2")
        ).all()
    assert [(int(s), int(p), int(b)) for s, p, b in old] == entries
    upgrade(db)
    assert current_revision(db) == SCHEMA_HEAD
    backend.close_all()
    assert _entries(backend) == entries
    backend.close_all()
    assert _answers(backend, names) == before


def test_one_append_is_one_run_and_a_range_read_is_bounded(backend: Backend) -> None:
    store = backend.open_store()
    s = store.create_session(name="runs")
    for i in range(5):
        s.commit_turn([{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}])
    with store.db.read() as conn:
        runs = conn.execute(text("SELECT start FROM segment_runs ORDER BY start")).scalars().all()
    assert list(runs) == [0, 2, 4, 6, 8]
    with store.db.read() as conn:
        seg = conn.execute(text("SELECT MAX(segment_id) FROM segment_runs")).scalar_one()
        every = [r[0] for r in fetch_range(conn, READ_RANGE, int(seg), 0, 10)]
        for lo in range(10):
            for hi in range(lo, 11):
                got = [r[0] for r in fetch_range(conn, READ_RANGE, int(seg), lo, hi)]
                assert got == every[lo:hi]


def test_gc_trim_cuts_a_run(backend: Backend) -> None:
    store = backend.open_store()
    s = store.create_session(name="trim", retention=Retention(mode="single"))
    first = [{"role": "user", "content": f"m{i}"} for i in range(6)]
    s.commit_turn(first)
    s.pop_last()
    s.pop_last()
    s.commit_turn([{"role": "user", "content": "instead"}])
    with store.db.read() as conn:
        before = conn.execute(text("SELECT blob_ids FROM segment_runs ORDER BY 1")).scalars()
        lengths = sorted(len(json_or_list(b)) for b in before)
    assert lengths == [1, 6]
    report = gc(store)
    assert report.entries_removed == 2
    with store.db.read() as conn:
        after = conn.execute(text("SELECT blob_ids FROM segment_runs")).scalars()
        lengths = sorted(len(json_or_list(b)) for b in after)
    assert lengths == [1, 4]
    assert verify(store).ok
    want = [*first[:4], {"role": "user", "content": "instead"}]
    assert [e.value for e in s.history()] == want


def json_or_list(stored: Any) -> list[int]:
    from alpstore.db.runs import run_ids

    return run_ids(stored, 0, 0)
