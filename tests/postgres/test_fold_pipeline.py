"""A closed LangGraph turn folded on PostgreSQL in two round trips (``_lgfoldpg``): read without
a lock, then lock, check and write with the COMMIT. The turn rows it makes are the plain fold's
byte for byte; a change between its read and its write makes it fold the plain way; counted
through the loopback proxy, a fold is at most two client waits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.graph", reason="langgraph is not installed (alpstore[langgraph])")

from alpstore.integrations import _lgdb as lgdb
from alpstore.integrations import _lgfold as lgfold
from alpstore.integrations import _lgfoldpg as lgfoldpg
from alpstore.integrations import _lgturns as lgturns
from alpstore.integrations._lgpack import id_bytes
from alpstore.integrations.langgraph import AlpstoreSaver
from alpstore.maintenance import verify
from tests.conftest import postgres_schema
from tests.integrations.test_langgraph_saver import build_graph, user
from tests.postgres.netproxy import proxied

pytestmark = pytest.mark.postgres

TURNS = 5
MAX_FOLD_ROUND_TRIPS = 2
"""The read (its BEGIN, three statements and COMMIT in one pipeline) and the write (BEGIN, the
lock, the guard, the turn row, its blobs, four deletes and the COMMIT in one pipeline). A fold
under the thread's lock was ~17."""


def _config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _rows(saver: AlpstoreSaver) -> list[Any]:
    with saver.store.db.read() as conn:
        turns = conn.exec_driver_sql(
            "SELECT t.first_checkpoint_id, t.last_checkpoint_id, t.steps, t.alp_ids, t.run_refs, "
            "t.codec, t.dict_id, t.raw_size, t.doc, (SELECT array_agg(blob_id ORDER BY blob_id) "
            "FROM lg_turn_blobs WHERE turn_ref = t.id) FROM lg_turns t "
            "ORDER BY t.first_checkpoint_id"
        ).all()
        loose = conn.exec_driver_sql(
            "SELECT (SELECT count(*) FROM lg_checkpoints), (SELECT count(*) FROM lg_writes), "
            "(SELECT count(*) FROM lg_write_items), (SELECT count(*) FROM lg_checkpoint_blobs)"
        ).one()
    return [[tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in turns], loose]


def _inputs(saver: AlpstoreSaver, thread: str) -> list[str]:
    steps = list(saver.list(_config(thread)))
    return sorted(
        (t.checkpoint["id"] for t in steps if t.metadata.get("source") == "input"), key=id_bytes
    )


def _fold_plain(saver: AlpstoreSaver, thread: str) -> None:
    with saver.store.db.atomic() as conn:
        found = lgdb.find_thread(conn, thread, "")
        assert found is not None
        lgturns.unfold_all(conn, found[0])
    for checkpoint_id in _inputs(saver, thread)[1:]:
        with saver.store.db.atomic() as conn:
            row = lgdb.lock_thread(conn, thread, "")
            assert row is not None
            lgturns.fold_before(conn, row.ref, checkpoint_id)


def test_the_pipelined_fold_makes_the_plain_folds_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lgfold, "FOLD", True)
    monkeypatch.setattr(lgfold, "FOLD_ON_POSTGRESQL", True)
    monkeypatch.setattr(lgfold, "EVERY_ON_POSTGRESQL", 1)
    taken: list[int] = []
    real = lgfoldpg.write

    def counted(*args: Any) -> bool:
        done = real(*args)
        taken.append(done)
        return done

    monkeypatch.setattr(lgfoldpg, "write", counted)
    with postgres_schema() as url, AlpstoreSaver.open(tmp_path, url=url) as saver:
        graph = build_graph(saver)
        for n in range(TURNS):
            graph.invoke({"messages": [user(n)]}, _config("t"))
        saver._folder.wait()
        assert saver._folder.error is None
        assert taken == [True] * (TURNS - 1)  # every fold went the pipelined way
        pipelined = _rows(saver)
        assert len(pipelined[0]) == TURNS - 1
        reads = [(t.config, t.checkpoint, t.metadata) for t in saver.list(_config("t"))]
        _fold_plain(saver, "t")
        assert _rows(saver) == pipelined
        assert [(t.config, t.checkpoint, t.metadata) for t in saver.list(_config("t"))] == reads
        assert verify(saver.store).ok


def test_a_change_between_the_read_and_the_write_folds_the_plain_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lgfold, "FOLD", False)  # folded by hand below
    with postgres_schema() as url, AlpstoreSaver.open(tmp_path, url=url) as saver:
        graph = build_graph(saver)
        for n in range(3):
            graph.invoke({"messages": [user(n)]}, _config("t"))
        steps = list(saver.list(_config("t")))
        last_input = _inputs(saver, "t")[-1]
        closed = [t for t in steps if id_bytes(t.checkpoint["id"]) < id_bytes(last_input)]
        real = lgfoldpg.read
        other = AlpstoreSaver.open(tmp_path, url=url)  # another process's saver

        def then_a_write(*args: Any) -> Any:
            found = real(*args)
            # a resumed run writes to a step of the turn after the read: the guard sees it
            other.put_writes(closed[0].config, [("late", 1)], "late-task")
            return found

        monkeypatch.setattr(lgfoldpg, "read", then_a_write)
        folder = lgfold.Folder(saver.store)
        assert folder._pipelined("t", "", last_input) is False  # guard failed: nothing written
        monkeypatch.setattr(lgfoldpg, "read", real)
        other.close()
        folder._fold("t", "", last_input)  # the plain way (or pipelined again, now unchanged)
        assert folder.folded == 2  # the two closed turns, a row each
        tup = saver.get_tuple(closed[0].config)
        assert tup is not None and ("late-task", "late", 1) in tup.pending_writes
        assert verify(saver.store).ok


def test_a_fold_takes_at_most_two_round_trips(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lgfold, "FOLD", False)
    with postgres_schema() as direct, proxied(direct) as (proxy, url):
        saver = AlpstoreSaver.open(tmp_path, url=url)
        try:
            graph = build_graph(saver)
            for n in range(4):
                graph.invoke({"messages": [user(n)]}, _config("t"))
            inputs = _inputs(saver, "t")
            folder = lgfold.Folder(saver.store)
            assert folder._pipelined("t", "", inputs[1]) is True  # once: its statements known
            with proxy.counting() as n:
                assert folder._pipelined("t", "", inputs[2]) is True
            assert folder.folded == 2
        finally:
            saver.close()
    assert n[0] <= MAX_FOLD_ROUND_TRIPS, n


def test_a_fold_every_few_turns_makes_a_row_per_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lgfold, "FOLD", True)
    monkeypatch.setattr(lgfold, "FOLD_ON_POSTGRESQL", True)
    monkeypatch.setattr(lgfold, "EVERY_ON_POSTGRESQL", 3)
    with postgres_schema() as url, AlpstoreSaver.open(tmp_path, url=url) as saver:
        graph = build_graph(saver)
        made = []
        for n in range(7):
            graph.invoke({"messages": [user(n)]}, _config("t"))
            saver._folder.wait()
            made.append(len(_rows(saver)[0]))
        # folds at the 3rd and 6th input: turns 0-1, then 2-4, one row each
        assert made == [0, 0, 2, 2, 2, 5, 5]
        assert saver._folder.error is None
        pipelined = _rows(saver)
        reads = [(t.config, t.checkpoint, t.metadata) for t in saver.list(_config("t"))]
        with saver.store.db.atomic() as conn:  # the plain way cuts the same turns
            found = lgdb.find_thread(conn, "t", "")
            assert found is not None
            lgturns.unfold_all(conn, found[0])
            lgturns.fold_before(conn, found[0], _inputs(saver, "t")[5])
        assert _rows(saver) == pipelined
        assert [(t.config, t.checkpoint, t.metadata) for t in saver.list(_config("t"))] == reads
