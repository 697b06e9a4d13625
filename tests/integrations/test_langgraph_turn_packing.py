"""AlpstoreSaver packs a thread's messages when its turn ends (issue 42, the saver's bytes).

A saver driven in a tight loop never pauses, so the archive's background packer, which waits
for a pause in the writes, left every message loose (0.31x raw of the 1.52x at 1,000 turns).
Now the put of a new invoke's input (metadata source "input": the thread's last turn is over)
asks the archive to pack at once once enough new blobs were stored: on the archive's packer
thread, never inside the put, whole frames only (the newest blobs that do not fill a frame stay
loose). Checked on both backends, with a frame and the threshold made small: frames appear while
the saver runs, the packing ran on the packer thread, and the thread reads back the same
(live, and in a fresh saver) as one written with packing off.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.graph", reason="langgraph is not installed (alpstore[langgraph])")

from alpstore.archive import packing
from alpstore.archive import sql as archive_sql
from alpstore.integrations.langgraph import AlpstoreSaver
from tests.conftest import Backend
from tests.integrations.test_langgraph_saver import build_graph, user

TURNS = 24


def _run(saver: AlpstoreSaver, thread: str) -> list[Any]:
    graph = build_graph(saver)
    config: Any = {"configurable": {"thread_id": thread}}
    for n in range(TURNS):
        graph.invoke({"messages": [user(n)]}, config)
    saver.store.archive.wait_for_packing()
    return list(graph.get_state(config).values["messages"])


def _frames(saver: AlpstoreSaver) -> list[tuple[int, int]]:
    with saver.store.db.read() as conn:
        rows = conn.exec_driver_sql("SELECT raw_size, blob_count FROM pack_frames").fetchall()
    return [(int(a), int(b)) for a, b in rows]


def test_a_thread_in_a_tight_loop_is_packed_at_its_turn_ends(
    backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(packing, "FRAME_TARGET", 2048)
    monkeypatch.setattr(archive_sql, "PACK_TURN_NEW", 8)
    threads: list[str] = []
    pack_cold = archive_sql.SqlArchive.pack_cold

    def noted(self: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        assert kwargs.get("whole") is True
        return pack_cold(self, **kwargs)

    monkeypatch.setattr(archive_sql.SqlArchive, "pack_cold", noted)
    with AlpstoreSaver.open(tmp_path / "reference") as plain:
        plain.store.archive.auto_pack = False
        expected = _run(plain, "t")
        assert _frames(plain) == []
    with AlpstoreSaver.open(backend.root, url=backend.url) as saver:
        got = _run(saver, "t")
        frames = _frames(saver)
        assert len(frames) >= 2, frames
        assert all(raw >= 2048 for raw, _ in frames), "a frame smaller than a whole one"
        assert threads and set(threads) == {"alpstore-packer"}
        with saver.store.db.read() as conn:
            loose = conn.exec_driver_sql(
                "SELECT count(*) FROM blob_rows WHERE raw_size <= 16384"
            ).scalar_one()
        assert int(loose) < sum(n for _, n in frames)  # packed while the loop ran
        assert got == expected
        history = [t.checkpoint["id"] for t in saver.list({"configurable": {"thread_id": "t"}})]
        assert len(history) > TURNS
    with AlpstoreSaver.open(backend.root, url=backend.url) as again:  # nothing in memory
        graph = build_graph(again)
        config: Any = {"configurable": {"thread_id": "t"}}
        assert list(graph.get_state(config).values["messages"]) == expected
        again_history = [t.checkpoint["id"] for t in again.list(config)]
        assert again_history == history
        graph.invoke({"messages": [user(TURNS)]}, config)  # and goes on
        assert len(graph.get_state(config).values["messages"]) > len(expected)


def test_no_packing_before_enough_new_blobs(backend: Backend) -> None:
    with AlpstoreSaver.open(backend.root, url=backend.url) as saver:
        _run(saver, "few")
        assert _frames(saver) == []  # 24 short turns: far fewer than PACK_TURN_NEW blobs
