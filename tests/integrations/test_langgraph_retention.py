"""A LangGraph thread whose session keeps fewer checkpoints than ``all`` (its retention set in
the archive, as ``psql`` or a bundle from another machine can set it): each put prunes the
thread's oldest steps the way ``prune`` does, their writes and alpstore checkpoints with them,
so LangGraph's reads and the session's checkpoints stay one set. Before, the next put
failed with a foreign key error (the session's checkpoints deleted under ``lg_checkpoints``).
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

pytest.importorskip("langgraph.graph", reason="langgraph is not installed (alpstore[langgraph])")

from alpstore.integrations import _lgfold as lgfold
from alpstore.integrations.langgraph import AlpstoreSaver
from alpstore.maintenance import verify
from tests.conftest import Backend
from tests.integrations.test_langgraph_saver import build_graph, user

KEEP = 4


def _config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _retain(saver: AlpstoreSaver, mode: str, n: int) -> None:
    with saver.store.db.atomic() as conn:
        conn.execute(
            text("UPDATE sessions SET retention_mode = :m, retention_n = :n"), {"m": mode, "n": n}
        )


def _alp_checkpoints(saver: AlpstoreSaver) -> int:
    with saver.store.db.read() as conn:
        return int(conn.exec_driver_sql("SELECT count(*) FROM checkpoints").scalar_one())


@pytest.mark.parametrize("fold", [False, True], ids=["loose", "folded"])
@pytest.mark.parametrize("mode", ["last_n", "single"])
def test_a_thread_keeps_what_its_sessions_retention_keeps(
    backend: Backend, monkeypatch: pytest.MonkeyPatch, mode: str, fold: bool
) -> None:
    monkeypatch.setattr(lgfold, "FOLD", fold)
    monkeypatch.setattr(lgfold, "FOLD_ON_POSTGRESQL", fold)
    monkeypatch.setattr(lgfold, "EVERY_ON_POSTGRESQL", 1)
    keep = KEEP if mode == "last_n" else 1
    with AlpstoreSaver.open(backend.root, url=backend.url) as saver:
        graph = build_graph(saver)
        for n in range(3):
            graph.invoke({"messages": [user(n)]}, _config("t"))
        saver._folder.wait()
        assert len(list(saver.list(_config("t")))) > keep
        _retain(saver, mode, KEEP)
        for n in range(3, 7):  # each put prunes; the thread goes on
            graph.invoke({"messages": [user(n)]}, _config("t"))
        assert _alp_checkpoints(saver) == keep
        saver._folder.wait()
        assert saver._folder.error is None
        steps = list(saver.list(_config("t")))
        assert len(steps) == keep
        for n in range(7):  # a twin thread, made after the update: its session keeps all
            graph.invoke({"messages": [user(n)]}, _config("twin"))
        assert len(list(saver.list(_config("twin")))) > 7 * 3
        state = graph.get_state(_config("t")).values["messages"]
        assert state == graph.get_state(_config("twin")).values["messages"]  # the history whole
        newest = saver.get_tuple(_config("t"))
        assert newest is not None and newest.config == steps[0].config
    with AlpstoreSaver.open(backend.root, url=backend.url) as again:  # nothing in memory
        assert len(list(again.list(_config("t")))) == keep
        build_graph(again).invoke({"messages": [user(7)]}, _config("t"))
        assert len(list(again.list(_config("t")))) == keep
    assert verify(backend.open_store()).ok
    backend.close_all()
