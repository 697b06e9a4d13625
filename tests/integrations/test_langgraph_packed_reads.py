"""A LangGraph thread whose blobs were packed reads back the same (schema 0010).

Since 0010 a packed blob has no row of its own: the ``blobs`` view finds a packed id by
unnesting every frame's members, a cost that grows with the whole archive. The saver's one-wait
read (``_lgfast.find_latest_with_writes``) therefore joins the loose rows (``blob_rows``) and
reads the packed ones from their frames by id afterwards (on PostgreSQL its read transaction has
ended then: the read runs again the usual way). Checked here on both backends: the channel
values and the pending writes of a thread, packed after they were written, read back whole by a
saver that holds nothing of the thread in memory.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langgraph.graph", reason="langgraph is not installed (alpstore[langgraph])")

from langchain_core.messages import HumanMessage

from alpstore.integrations import _lgfast as lgfast
from alpstore.integrations.langgraph import AlpstoreSaver
from tests.conftest import Backend
from tests.integrations.test_langgraph_saver import build_graph


def _packed_count(saver: AlpstoreSaver) -> tuple[int, int]:
    with saver.store.db.read() as conn:
        loose = conn.exec_driver_sql("SELECT count(*) FROM blob_rows").scalar_one()
        frames = conn.exec_driver_sql("SELECT count(*) FROM pack_frames").scalar_one()
    return int(loose), int(frames)


def test_a_thread_packed_after_it_was_written_reads_back_whole(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    from_frames: list[int] = []
    rows_by_id = lgfast.rows_by_id

    def counted(conn: Any, ids: Any, **kwargs: Any) -> Any:
        from_frames.extend(ids)
        return rows_by_id(conn, ids, **kwargs)

    monkeypatch.setattr(lgfast, "rows_by_id", counted)
    config: Any = {"configurable": {"thread_id": "packed"}}
    with AlpstoreSaver.open(backend.root, url=backend.url) as saver:
        graph = build_graph(saver)
        for n in range(6):
            text = f"turn {n}: use the tool" if n % 2 else f"turn {n}"
            graph.invoke({"messages": [HumanMessage(content=text, id=f"u-{n}")]}, config)
        head = saver.get_tuple(config)
        assert head is not None
        note = HumanMessage(content="a pending write's message, stored as a blob", id="w-1")
        saver.put_writes(head.config, [("messages", [note])], task_id="task-1")
        before = saver.get_tuple(config)
        assert before is not None and before.pending_writes
        state = graph.get_state(config).values["messages"]
        report = saver.store.archive.pack_cold(keep_loose=0)
        assert report.blobs > 0
        same = saver.get_tuple(config)  # the thread this process holds: the one-wait read
        assert same is not None
        assert same.pending_writes == before.pending_writes
        assert same.checkpoint["channel_values"] == before.checkpoint["channel_values"]
    assert _packed_count(saver)[1] > 0
    with AlpstoreSaver.open(backend.root, url=backend.url) as again:  # nothing in memory
        after = again.get_tuple(config)
        assert after is not None
        assert after.pending_writes == before.pending_writes
        assert after.checkpoint["channel_values"] == before.checkpoint["channel_values"]
        assert build_graph(again).get_state(config).values["messages"] == state
        latest = again.get_tuple(config)
        assert latest is not None and latest.pending_writes == before.pending_writes
    if backend.name == "postgresql":  # (SQLite reads a tuple in statements of its own)
        assert from_frames, "the packed blobs were not read from their frames"


def test_the_one_wait_read_joins_the_loose_rows_not_the_view() -> None:
    for sql in (lgfast._WRITES_WITH_BLOBS, lgfast._VALUE_BLOBS):
        assert "JOIN blob_rows b" in sql and "JOIN blobs " not in sql
