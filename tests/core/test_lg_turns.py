"""Migration 0011: a LangGraph thread's closed turns in one ``lg_turns`` row each (issue 42).

A saver archive written with every step loose (the saver's layout before 0011, and what it
still writes), brought down to 0010 and up again: each thread's turns before its newest input
step are one ``lg_turns`` row (the steps' states and pending writes in one packed document,
their blobs in ``lg_turn_blobs``), the open turn's rows stay loose, verify passes; brought down
to 0010 again, the loose rows are what they were, byte for byte (ids aside).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("langgraph.graph", reason="langgraph is not installed (alpstore[langgraph])")

from sqlalchemy import inspect, text

from alembic import command
from alpstore.db.database import Database
from alpstore.db.migrate import SCHEMA_HEAD, alembic_config, current_revision, upgrade
from alpstore.integrations import _lgfold as lgfold
from alpstore.integrations.langgraph import AlpstoreSaver
from alpstore.maintenance import verify
from alpstore.portable.lgrows import unpack_doc
from tests.conftest import Backend
from tests.integrations.test_langgraph_saver import build_graph, user

THREADS = {"a": 6, "b": 3}
"""Invokes per thread: a turn each (an input step, then the graph's loop steps)."""


def _write(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lgfold, "FOLD", False)  # every step loose, as before 0011
    with AlpstoreSaver.open(backend.root, url=backend.url) as saver:
        saver.store.archive.auto_pack = False
        graph = build_graph(saver)
        for thread, turns in THREADS.items():
            config: Any = {"configurable": {"thread_id": thread}}
            for n in range(turns):
                graph.invoke({"messages": [user(n)]}, config)


def _b(value: Any) -> Any:
    return bytes(value) if isinstance(value, memoryview) else value


def _loose(db: Database) -> dict[str, Any]:
    """The loose rows by what identifies them (row ids left out: a downgrade makes new ones)."""
    with db.read() as conn:
        steps = conn.execute(
            text(
                "SELECT t.thread_id, lc.checkpoint_id, lc.parent_checkpoint_id, "
                "lc.alp_checkpoint_id, lc.run_ref, lc.codec, lc.dict_id, lc.raw_size, "
                "lc.state FROM lg_checkpoints lc JOIN lg_threads t ON t.id = lc.thread_ref "
                "ORDER BY t.thread_id, lc.checkpoint_id"
            )
        ).all()
        blobs = conn.execute(
            text(
                "SELECT lc.checkpoint_id, cb.blob_id FROM lg_checkpoint_blobs cb "
                "JOIN lg_checkpoints lc ON lc.id = cb.checkpoint_ref "
                "ORDER BY lc.checkpoint_id, cb.blob_id"
            )
        ).all()
        writes = conn.execute(
            text(
                "SELECT t.thread_id, w.checkpoint_id, w.task_id, w.codec, w.dict_id, "
                "w.raw_size, w.state, w.id FROM lg_writes w "
                "JOIN lg_threads t ON t.id = w.thread_ref ORDER BY w.id"
            )
        ).all()
        items = conn.execute(
            text(
                "SELECT write_id, position, blob_id FROM lg_write_items ORDER BY write_id, position"
            )
        ).all()
    by_write: dict[int, list[int]] = {}
    for write_id, _, blob_id in items:
        by_write.setdefault(int(write_id), []).append(int(blob_id))
    per_step: dict[tuple[str, bytes], list[Any]] = {}
    for w in writes:  # a step's writes in their order (the ids differ across a downgrade)
        key = (str(w[0]), _b(w[1]))
        per_step.setdefault(key, []).append((*map(_b, w[2:7]), by_write.get(int(w[7]), [])))
    return {
        "steps": [tuple(map(_b, r)) for r in steps],
        "blobs": [tuple(map(_b, r)) for r in blobs],
        "writes": per_step,
    }


def _count(db: Database, sql: str) -> int:
    with db.read() as conn:
        return int(conn.execute(text(sql)).scalar_one())


def _to(db: Database, revision: str) -> None:
    """``db`` (opened at head: opening an older archive would upgrade it) to ``revision``."""
    if revision == SCHEMA_HEAD:
        upgrade(db)
    elif int(revision) > int(current_revision(db) or 0):
        command.upgrade(alembic_config(db), revision)
    else:
        command.downgrade(alembic_config(db), revision)
    assert current_revision(db) == revision


def test_closed_turns_fold_into_one_row_each_and_unfold_back(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(backend, monkeypatch)
    backend.close_all()
    db = backend.open_database()
    before = _loose(db)
    assert _count(db, "SELECT count(*) FROM lg_turns") == 0  # the writer off
    steps_per_turn = len(before["steps"]) // sum(THREADS.values())
    assert steps_per_turn >= 3 and before["writes"]
    _to(db, "0010")
    assert _loose(db) == before
    _to(db, SCHEMA_HEAD)

    # every turn before each thread's newest input is one row; the open turn stays loose
    assert _count(db, "SELECT count(*) FROM lg_turns") == sum(THREADS.values()) - len(THREADS)
    after = _loose(db)
    assert len(after["steps"]) == steps_per_turn * len(THREADS)
    assert after["steps"] == [
        s for s in before["steps"] if any(s == kept for kept in after["steps"])
    ]
    with db.read() as conn:
        turns = conn.execute(
            text(
                "SELECT thread_ref, first_checkpoint_id, last_checkpoint_id, steps, codec, "
                "dict_id, raw_size, doc, id FROM lg_turns ORDER BY thread_ref, "
                "first_checkpoint_id"
            )
        ).all()
        listed = conn.execute(
            text("SELECT turn_ref, blob_id FROM lg_turn_blobs ORDER BY turn_ref, blob_id")
        ).all()
        loose_ids = conn.execute(text("SELECT thread_ref, checkpoint_id FROM lg_checkpoints")).all()
    folded: list[bytes] = []
    listed_by_turn: dict[int, set[int]] = {}
    for turn_ref, blob_id in listed:
        listed_by_turn.setdefault(int(turn_ref), set()).add(int(blob_id))
    last_by_thread: dict[int, bytes] = {}
    for ref, first, last, n, codec, dict_id, size, doc, turn_id in turns:
        first, last = _b(first), _b(last)
        body = unpack_doc((int(codec), dict_id, int(size), _b(doc)), "lg_turns")
        ids = [bytes.fromhex(k[0]) for k in body["k"]]
        assert len(ids) == n and ids == sorted(ids) and ids[0] == first and ids[-1] == last
        assert int(ref) not in last_by_thread or last_by_thread[int(ref)] < first  # disjoint
        last_by_thread[int(ref)] = last
        for loose_ref, cid in loose_ids:  # no loose step inside a turn's range
            assert not (int(loose_ref) == int(ref) and first <= _b(cid) <= last)
        items = {int(b) for w in body["w"] for b in w[3]}
        assert items <= listed_by_turn.get(int(turn_id), set())
        assert body["w"], "a closed turn of the tool loop has pending writes"
        folded.extend(ids)
    assert len(folded) + len(after["steps"]) == len(before["steps"])
    backend.close_all()
    assert verify(backend.open_store()).ok
    backend.close_all()

    db = backend.open_database()
    _to(db, "0010")  # the real downgrade: every turn row back as loose rows
    assert _loose(db) == before
    _to(db, SCHEMA_HEAD)
    assert _count(db, "SELECT count(*) FROM lg_turns") == sum(THREADS.values()) - len(THREADS)


def _turn_blobs(db: Database) -> list[tuple[bytes, int]]:
    """``lg_turn_blobs`` (a table at 0011, a view over ``lg_turns.blob_ids`` from 0012) by the
    turn's first step id, which a downgrade keeps (row ids aside)."""
    with db.read() as conn:
        rows = conn.execute(
            text(
                "SELECT t.first_checkpoint_id, b.blob_id FROM lg_turn_blobs b "
                "JOIN lg_turns t ON t.id = b.turn_ref ORDER BY 1, 2"
            )
        ).all()
    return [(_b(first), int(blob)) for first, blob in rows]


def test_0012_a_turns_blobs_move_into_its_row_and_back(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0012: the rows ``lg_turn_blobs`` held at 0011 are what its view shows at 0012 (one
    array column, ascending, no per-blob row or index), and they are rows again at 0011."""
    _write(backend, monkeypatch)
    backend.close_all()
    db = backend.open_database()
    _to(db, "0010")
    _to(db, "0011")  # the turns folded by 0011, their blobs as rows
    at_0011 = _turn_blobs(db)
    assert at_0011, "the tool loop's turns name blobs"
    with db.read() as conn:
        assert "blob_ids" not in {c["name"] for c in _columns(conn, "lg_turns")}
    _to(db, SCHEMA_HEAD)
    assert _turn_blobs(db) == at_0011
    with db.read() as conn:
        stored = conn.execute(text("SELECT blob_ids FROM lg_turns ORDER BY id")).scalars().all()
        kind = conn.execute(text(_KIND[db.dialect]), {"name": "lg_turn_blobs"}).scalar_one()
    assert str(kind).lower() == "view"
    for ids in stored:
        listed = json.loads(ids) if isinstance(ids, str) else list(ids)
        assert listed == sorted(set(listed)) and listed
    backend.close_all()
    assert verify(backend.open_store()).ok
    backend.close_all()
    db = backend.open_database()
    _to(db, "0011")
    assert _turn_blobs(db) == at_0011
    _to(db, SCHEMA_HEAD)


_KIND = {
    "sqlite": "SELECT type FROM sqlite_master WHERE name = :name",
    "postgresql": "SELECT table_type FROM information_schema.tables "
    "WHERE table_schema = current_schema() AND table_name = :name",
}


def _columns(conn: Any, table: str) -> list[dict[str, Any]]:
    return list(inspect(conn).get_columns(table))
