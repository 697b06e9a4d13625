"""The node that wrote a step is known in the process as soon as its writes committed (issue 45).

LangGraph saves a task's writes and the next step's checkpoint in the background, in either
order. The next step's trigger names the node that wrote on its parent; the saver remembers it
from its own ``put_writes`` and reads the writes back only when it does not know (another
process stored them). It used to note the node only after ``put_writes`` had let the thread's
lock go, so a ``put`` that took the lock in between read the writes back: one more round trip
on a remote PostgreSQL (~0.9 a turn of the tool loop before).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

pytest.importorskip("langgraph.graph", reason="langgraph is not installed (alpstore[langgraph])")

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import copy_checkpoint
from langgraph.checkpoint.base.id import uuid6
from sqlalchemy import text

from alpstore.integrations import _lgdb as lgdb
from alpstore.integrations.langgraph import AlpstoreSaver
from tests.conftest import Backend
from tests.integrations.test_langgraph_saver import build_graph


def test_a_put_right_after_the_writes_commit_names_the_node_without_reading_them_back(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    find_writes = lgdb.find_writes

    def counted(conn: Any, ref: int, checkpoint_id: str, *rest: Any) -> Any:
        reads.append(checkpoint_id)
        return find_writes(conn, ref, checkpoint_id, *rest)

    with AlpstoreSaver.open(backend.root, url=backend.url) as saver:
        graph = build_graph(saver)
        config: Any = {"configurable": {"thread_id": "racing"}}
        graph.invoke({"messages": [HumanMessage(content="hello", id="u-1")]}, config)
        head = saver.get_tuple(config)
        assert head is not None
        parent_config = head.config
        parent = parent_config["configurable"]["checkpoint_id"]
        step = copy_checkpoint(head.checkpoint)
        step["id"] = str(uuid6(clock_seq=-2))
        metadata: Any = {"source": "loop", "step": 9, "parents": {}}
        puts: list[str] = []
        after_commit = saver.store.archive.after_commit

        def put_in_between() -> None:  # the next step's put, the moment the lock is free
            after_commit()
            if not puts:  # once (the put's own commit comes here too)
                puts.append(step["id"])
                saver.put(parent_config, step, metadata, {})

        monkeypatch.setattr(lgdb, "find_writes", counted)
        monkeypatch.setattr(saver.store.archive, "after_commit", put_in_between)
        message = AIMessage(content="more", id="ai-more")
        saver.put_writes(
            parent_config, [("messages", [message])], "task-1", "~__pregel_pull, agent"
        )
        monkeypatch.undo()

        assert puts, "the put did not run between the writes' commit and their noting"
        assert reads == [], f"the writes on {parent} were read back for the next step's trigger"
        with saver.store.db.read() as conn:
            trigger = conn.execute(
                text("SELECT trigger FROM checkpoints ORDER BY id DESC LIMIT 1")
            ).scalar_one()
        assert trigger == "langgraph:loop:agent"


def test_the_writes_commit_beside_a_put_in_flight_and_the_next_put_waits_for_them(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: a task's writes (sent unread) need nothing of the thread's state, so their
    transaction runs while a put of the thread holds its lock (they used to queue behind it:
    a turn's 13 commits one after another); the next step's put waits for them to be noted,
    and names their node without reading them back."""
    if not backend.is_postgresql:
        pytest.skip("SQLite: the writes take the thread's lock (one writer at a time anyway)")
    reads: list[str] = []
    find_writes = lgdb.find_writes

    def counted(conn: Any, ref: int, checkpoint_id: str, *rest: Any) -> Any:
        reads.append(checkpoint_id)
        return find_writes(conn, ref, checkpoint_id, *rest)

    with AlpstoreSaver.open(backend.root, url=backend.url) as saver:
        graph = build_graph(saver)
        config: Any = {"configurable": {"thread_id": "beside"}}
        graph.invoke({"messages": [HumanMessage(content="hello", id="u-1")]}, config)
        head = saver.get_tuple(config)
        assert head is not None
        parent_config = head.config
        parent = parent_config["configurable"]["checkpoint_id"]
        step = copy_checkpoint(head.checkpoint)
        step["id"] = str(uuid6(clock_seq=-2))
        metadata: Any = {"source": "loop", "step": 9, "parents": {}}
        count = "SELECT count(*) FROM lg_writes"

        def stored() -> int:
            with saver.store.db.read() as conn:
                return int(conn.execute(text(count)).scalar_one())

        before = stored()
        message = AIMessage(content="more", id="ai-more")
        writer = threading.Thread(
            target=saver.put_writes,
            args=(parent_config, [("messages", [message])], "task-1", "~__pregel_pull, agent"),
        )
        putter = threading.Thread(target=saver.put, args=(parent_config, step, metadata, {}))
        monkeypatch.setattr(lgdb, "find_writes", counted)
        th = saver._state("beside", "")
        with th.lock:  # a put of the thread in flight
            writer.start()
            deadline = time.monotonic() + 20
            while stored() == before:
                assert time.monotonic() < deadline, "the writes waited for the thread's lock"
                time.sleep(0.02)
            assert parent in th.writing  # committed, its node not noted yet (the lock)
            putter.start()
            time.sleep(0.2)
            assert putter.is_alive()
        writer.join(20)
        putter.join(20)
        monkeypatch.undo()
        assert not writer.is_alive() and not putter.is_alive() and not th.writing
        assert reads == [], f"the writes on {parent} were read back for the next step's trigger"
        with saver.store.db.read() as conn:
            trigger = conn.execute(
                text("SELECT trigger FROM checkpoints ORDER BY id DESC LIMIT 1")
            ).scalar_one()
        assert trigger == "langgraph:loop:agent"
