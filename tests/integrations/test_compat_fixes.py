"""Regressions found by running the frameworks' own suites against our adapters (scripts/compat):
fresh objects from AlpstoreSaver's reads, string channel versions, atomic first use of an
AlpstoreSession, and its SessionSettings default.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph.graph", reason="langgraph is not installed (alpstore[langgraph])")
pytest.importorskip("agents", reason="openai-agents is not installed (alpstore[dev])")

from agents.memory.session_settings import SessionSettings
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from alpstore.integrations.langgraph import AlpstoreSaver
from alpstore.integrations.openai_agents import AlpstoreSession
from alpstore.store import Store


class State(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]


def agent(state: State) -> dict[str, Any]:
    n = len(state["messages"])
    call = {"name": "search", "args": {"query": f"q{n}"}, "id": f"call-{n}"}
    return {"messages": [AIMessage(content=f"answer {n}", id=f"ai-{n}", tool_calls=[call])]}


def graph(saver: AlpstoreSaver) -> Any:
    return StateGraph(State).add_node("agent", agent).add_edge(START, "agent").compile(saver)


def ask(text: str, n: int) -> dict[str, Any]:
    return {"messages": [HumanMessage(content=text, id=f"h-{n}")]}


# ---------------------------------------------------------------- 1. fresh objects
def test_editing_a_read_message_in_place_changes_nothing_until_written(run_root: Path) -> None:
    """The human-in-the-loop edit: what get_state hands out is the caller's own copy."""
    config = {"configurable": {"thread_id": "t"}}
    other = {"configurable": {"thread_id": "u"}}
    with AlpstoreSaver.open(run_root) as saver:
        app = graph(saver)
        app.invoke(ask("weather in sf?", 0), config)
        app.invoke(ask("weather in sf?", 0), other)  # same message ids, another thread
        last = app.get_state(config).values["messages"][-1]
        last.tool_calls[0]["args"]["query"] = "edited in place"
        last.content = "edited in place"
        # nothing written: every later read in this process still sees the stored message
        assert app.get_state(config).values["messages"][-1].content == "answer 1"
        reread = app.get_state(config).values["messages"][-1]
        assert reread.tool_calls[0]["args"]["query"] == "q1"
        for snapshot in app.get_state_history(config):
            for message in snapshot.values.get("messages", []):
                assert message.content != "edited in place"
        assert app.get_state(other).values["messages"][-1].content == "answer 1"
        # written back through update_state: stored, and seen after reopening the archive
        app.update_state(config, {"messages": last})
        assert app.get_state(config).values["messages"][-1].content == "edited in place"
    with AlpstoreSaver.open(run_root) as saver:
        stored = graph(saver).get_state(config).values["messages"][-1]
        assert stored.content == "edited in place"
        assert stored.tool_calls[0]["args"]["query"] == "edited in place"


def test_a_message_changed_after_put_does_not_change_what_reads_see(run_root: Path) -> None:
    config = {"configurable": {"thread_id": "t"}}
    with AlpstoreSaver.open(run_root) as saver:
        result = graph(saver).invoke(ask("hello", 0), config)
        result["messages"][-1].content = "changed by the caller"
        assert graph(saver).get_state(config).values["messages"][-1].content == "answer 1"


# ---------------------------------------------------------------- 2. string channel versions
def test_next_version_follows_string_versions_of_langgraphs_own_savers(run_root: Path) -> None:
    with AlpstoreSaver.open(run_root) as saver:
        assert saver.get_next_version(None, None) == 1
        assert saver.get_next_version(7, None) == 8
        current = "00000000000000000000000000000005.0.7947296418282349"
        following = saver.get_next_version(current, None)
        assert isinstance(following, str) and following > current
        assert following.startswith("00000000000000000000000000000006.")


def test_a_thread_written_with_string_versions_can_be_continued(run_root: Path) -> None:
    """A thread copied from LangGraph's SQLite saver (string versions) runs on and lists."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    with SqliteSaver.from_conn_string(":memory:") as theirs:
        app = StateGraph(State).add_node("agent", agent).add_edge(START, "agent")
        app.compile(theirs).invoke(ask("first", 0), config)
        copied = list(theirs.list(config))[::-1]
    assert isinstance(next(iter(copied[-1].checkpoint["channel_versions"].values())), str)
    with AlpstoreSaver.open(run_root) as saver:
        parent = None
        for tup in copied:
            target = {"configurable": {**config["configurable"], "checkpoint_id": parent}}
            saver.put(target, tup.checkpoint, tup.metadata, tup.checkpoint["channel_versions"])
            parent = tup.checkpoint["id"]
        app = graph(saver)
        app.invoke(ask("second", 2), config)
        messages = app.get_state(config).values["messages"]
        assert [m.content for m in messages] == ["first", "answer 1", "second", "answer 3"]
        assert len(list(app.get_state_history(config))) == len(copied) + 3


# ---------------------------------------------------------------- 3. atomic first use
ITEMS = [{"role": "user", "content": f"Message {i}"} for i in range(10)]


def _add_from_threads(sessions: list[AlpstoreSession]) -> None:
    start = threading.Barrier(len(ITEMS))

    def add(i: int) -> None:
        start.wait()
        asyncio.run(sessions[i % len(sessions)].add_items([ITEMS[i]]))

    workers = [threading.Thread(target=add, args=(i,)) for i in range(len(ITEMS))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def _contents(session: AlpstoreSession) -> set[str]:
    return {item["content"] for item in asyncio.run(session.get_items())}


def test_concurrent_first_add_items_on_one_session_keeps_one_conversation(run_root: Path) -> None:
    expected = {item["content"] for item in ITEMS}
    with Store.open(run_root) as store:
        session = AlpstoreSession("concurrent", store)
        _add_from_threads([session])
        assert _contents(session) == expected
        named = [s for s in store.list_sessions() if s.name == "openai-agents:concurrent"]
        assert len(named) == 1
        assert _contents(AlpstoreSession("concurrent", store)) == expected


def test_concurrent_first_use_from_separate_stores_shares_one_session(run_root: Path) -> None:
    """Separate Store objects on one archive: each its own engine, as separate processes."""
    stores = [Store.open(run_root) for _ in range(3)]
    try:
        _add_from_threads([AlpstoreSession("shared", s) for s in stores])
        names = [s.name for s in stores[0].list_sessions()]
        assert names.count("openai-agents:shared") == 1
        fresh = AlpstoreSession("shared", stores[0])
        assert _contents(fresh) == {item["content"] for item in ITEMS}
    finally:
        for s in stores:
            s.close()


# ---------------------------------------------------------------- 4. session_settings
def test_session_settings_default_matches_sqlite_session(run_root: Path) -> None:
    from agents import SQLiteSession

    with Store.open(run_root) as store:
        assert AlpstoreSession("a", store).session_settings == SessionSettings()
        assert AlpstoreSession("a", store).session_settings == SQLiteSession("a").session_settings
        given = AlpstoreSession("b", store, session_settings={"limit": 3})
        assert given.session_settings == SessionSettings(limit=3)
        asyncio.run(given.add_items([{"role": "user", "content": str(i)} for i in range(5)]))
        assert [i["content"] for i in asyncio.run(given.get_items())] == ["2", "3", "4"]
