"""AlpstoreSaver against LangGraph's own conformance suite and a real 200-turn StateGraph."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph.graph", reason="langgraph is not installed (alpstore[langgraph])")
conformance = pytest.importorskip(
    "langgraph.checkpoint.conformance",
    reason="langgraph-checkpoint-conformance is not installed (alpstore[dev])",
)

from langchain_core.messages import (  # noqa: E402
    AIMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.checkpoint.conformance.capabilities import (  # noqa: E402
    BASE_CAPABILITIES,
    EXTENDED_CAPABILITIES,
)
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402
from sqlalchemy import text  # noqa: E402

from alpstore.db.tables import BLOB_MESSAGE  # noqa: E402
from alpstore.integrations._lgcodec import message_doc, message_from_doc  # noqa: E402
from alpstore.integrations.langgraph import AlpstoreSaver  # noqa: E402
from alpstore.maintenance import gc  # noqa: E402
from alpstore.store import Store  # noqa: E402
from tests.conftest import run_cli  # noqa: E402

TURNS = 200


# ---------------------------------------------------------------- conformance
def test_langgraph_conformance_suite_passes_every_capability(tmp_path: Path) -> None:
    roots = iter(range(100))

    @conformance.checkpointer_test(name="AlpstoreSaver")
    async def factory() -> AsyncIterator[AlpstoreSaver]:
        saver = AlpstoreSaver.open(tmp_path / f"run-{next(roots)}")
        yield saver
        saver.close()

    report = asyncio.run(conformance.validate(factory))
    report.print_report()
    (tmp_path / "conformance.json").write_text(json.dumps(report.to_dict(), indent=2))
    for cap in BASE_CAPABILITIES | EXTENDED_CAPABILITIES:
        result = report.results[cap.value]
        assert result.detected, f"{cap.value} not detected"
        assert result.passed is True, f"{cap.value}: {result.failures}"
    assert report.conformance_level() == "FULL"


# ---------------------------------------------------------------- a real graph
def build_graph(saver: AlpstoreSaver) -> Any:
    """A deterministic agent: replies, and every third turn reads a file through a tool."""

    def agent(state: MessagesState) -> dict[str, Any]:
        messages = state["messages"]
        last, n = messages[-1], len(messages)
        if isinstance(last, HumanMessage) and "tool" in str(last.content):
            call = {"name": "read_file", "args": {"path": f"src/f{n}.py"}, "id": f"call-{n}"}
            return {"messages": [AIMessage(content="", id=f"ai-{n}", tool_calls=[call])]}
        return {"messages": [AIMessage(content=f"done: {messages[-1].content[:40]}", id=f"ai-{n}")]}

    def tools(state: MessagesState) -> dict[str, Any]:
        call = state["messages"][-1].tool_calls[0]
        body = "".join(f"def f{i}():\n    return {i}\n" for i in range(30))
        message = ToolMessage(
            content=f"# {call['args']['path']}\n{body}",
            tool_call_id=call["id"],
            id=f"t-{call['id']}",
        )
        return {"messages": [message]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


def user(turn: int) -> HumanMessage:
    extra = " with tool" if turn % 3 == 0 else ""
    content = f"turn {turn}: please look at module {turn % 7}{extra}"
    return HumanMessage(content=content, id=f"u-{turn}")


def message_blob_count(store: Store) -> int:
    with store.db.read() as conn:
        return int(
            conn.execute(
                text("SELECT COUNT(*) FROM blobs WHERE kind = :k"), {"k": BLOB_MESSAGE}
            ).scalar_one()
        )


def test_state_graph_with_messages_state_runs_200_turns(run_root: Path) -> None:
    config = {"configurable": {"thread_id": "chat-1"}}
    with AlpstoreSaver.open(run_root) as saver:
        graph = build_graph(saver)
        for turn in range(1, TURNS + 1):
            graph.invoke({"messages": [user(turn)]}, config)
        state = graph.get_state(config)
        messages = state.values["messages"]
        tool_turns = TURNS // 3
        assert len(messages) == 2 * TURNS + 2 * tool_turns
        assert [m.id for m in messages if isinstance(m, HumanMessage)] == [
            f"u-{t}" for t in range(1, TURNS + 1)
        ]
        # every message is stored exactly once, though every step was checkpointed
        assert message_blob_count(saver.store) == len(messages)
        history = list(graph.get_state_history(config))
        assert len(history) > 3 * TURNS
        session = saver.store.get_session("langgraph:chat-1")
        assert session.info().turn == TURNS
        assert len(session.checkpoints()) == len(history)
        assert [e.value["content"] for e in session.history()][-1] == messages[-1].content

    # a new process (a new saver on the same archive) sees the same state and continues it
    with AlpstoreSaver.open(run_root) as saver:
        graph = build_graph(saver)
        again = graph.get_state(config).values["messages"]
        assert again == messages
        graph.invoke({"messages": [user(TURNS + 2)]}, config)
        assert len(graph.get_state(config).values["messages"]) == len(messages) + 2

    log = run_cli("--root", str(run_root), "session", "log", "langgraph:chat-1")
    assert log.code == 0, log.err


def test_removed_and_edited_messages_rewrite_the_head(run_root: Path) -> None:
    config = {"configurable": {"thread_id": "edits"}}
    with AlpstoreSaver.open(run_root) as saver:
        graph = build_graph(saver)
        for turn in range(1, 5):
            graph.invoke({"messages": [user(turn)]}, config)
        before = graph.get_state(config).values["messages"]
        graph.update_state(config, {"messages": [RemoveMessage(id=before[1].id)]})
        graph.update_state(config, {"messages": [HumanMessage(content="edited", id="u-1")]})
        after = graph.get_state(config).values["messages"]
        assert [m.id for m in after] == [m.id for m in before if m.id != before[1].id]
        assert after[0].content == "edited"
        session = saver.store.get_session("langgraph:edits")
        assert [e.value["content"] for e in session.history()] == [m.content for m in after]
        # time travel: the first checkpoint's state is still intact
        first = list(graph.get_state_history(config))[-1]
        assert graph.get_state(first.config).values == first.values


def test_async_graph_and_copy_thread_fork_the_session(run_root: Path) -> None:
    async def main() -> None:
        async with AlpstoreSaver.open(run_root) as saver:
            graph = build_graph(saver)
            config = {"configurable": {"thread_id": "a"}}
            for turn in range(1, 7):
                await graph.ainvoke({"messages": [user(turn)]}, config)
            await saver.acopy_thread("a", "b")
            copied = await graph.aget_state({"configurable": {"thread_id": "b"}})
            original = await graph.aget_state(config)
            assert copied.values == original.values
            child = saver.store.get_session("langgraph:b")
            assert child.info().parent == saver.store.get_session("langgraph:a").uuid
            await graph.ainvoke({"messages": [user(7)]}, {"configurable": {"thread_id": "b"}})
            assert (await graph.aget_state(config)).values == original.values

    asyncio.run(main())


def test_delete_thread_then_gc_frees_the_messages(run_root: Path) -> None:
    with AlpstoreSaver.open(run_root) as saver:
        graph = build_graph(saver)
        for thread in ("keep", "drop"):
            for turn in range(1, 4):
                graph.invoke({"messages": [user(turn)]}, {"configurable": {"thread_id": thread}})
        graph.invoke(
            {"messages": [HumanMessage(content="only in drop", id="x")]},
            {"configurable": {"thread_id": "drop"}},
        )
        before = message_blob_count(saver.store)
        saver.delete_thread("drop")
        assert saver.get_tuple({"configurable": {"thread_id": "drop"}}) is None
        gc(saver.store)
        assert message_blob_count(saver.store) == before - 2
        kept = graph.get_state({"configurable": {"thread_id": "keep"}}).values["messages"]
        assert len(kept) == 8


def test_prune_keep_latest_keeps_the_latest_state_loadable(run_root: Path) -> None:
    config = {"configurable": {"thread_id": "p"}}
    with AlpstoreSaver.open(run_root) as saver:
        graph = build_graph(saver)
        for turn in range(1, 5):
            graph.invoke({"messages": [user(turn)]}, config)
        state = graph.get_state(config).values
        saver.prune(["p"])
        gc(saver.store)
        assert len(list(saver.list(config))) == 1
    with AlpstoreSaver.open(run_root) as saver:
        assert build_graph(saver).get_state(config).values == state


def test_a_task_error_holding_a_lone_surrogate_is_stored_and_listed(run_root: Path) -> None:
    """An ``__error__`` write whose text is not valid Unicode (a file name read with
    surrogateescape) is kept as InMemorySaver keeps it (the serde stores "?"), and the error
    event alpstore records beside it does not fail the write (found by the differential test)."""
    from langgraph.checkpoint.base import empty_checkpoint

    config = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    with AlpstoreSaver.open(run_root) as saver:
        ck = empty_checkpoint()
        stored = saver.put(config, ck, {"source": "loop", "step": 0}, {})
        saver.put_writes(
            stored, [("__error__", "file-\udcff.txt")], "task-1", "~__pregel_pull, agent"
        )
        (tup,) = list(saver.list(config))
        assert tup.pending_writes == [("task-1", "__error__", "file-?.txt")]


try:
    from langgraph.channels.delta import DeltaChannel
    from langgraph.graph.message import _messages_delta_reducer
except ImportError:  # an older LangGraph without delta channels
    DeltaChannel = None


class DeltaState(TypedDict):
    messages: Annotated[
        list[Any],
        DeltaChannel(_messages_delta_reducer, snapshot_frequency=4) if DeltaChannel else list,
    ]


@pytest.mark.skipif(DeltaChannel is None, reason="this LangGraph has no DeltaChannel")
def test_delta_channel_history_through_the_saver(run_root: Path) -> None:
    def agent(state: DeltaState) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(content=f"reply {n}", id=f"ai-{n}")]}

    builder = StateGraph(DeltaState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    config = {"configurable": {"thread_id": "d"}}
    with AlpstoreSaver.open(run_root) as saver:
        graph = builder.compile(checkpointer=saver)
        for turn in range(1, 11):
            graph.invoke({"messages": [user(turn)]}, config)
        messages = graph.get_state(config).values["messages"]
        assert len(messages) == 20
        assert messages[-1].content == "reply 19"


@pytest.mark.parametrize(
    "message",
    [
        HumanMessage(content="hi", id="1"),
        HumanMessage(content=[{"type": "text", "text": "blocks"}], name="ann"),
        AIMessage(content="", tool_calls=[{"name": "f", "args": {"x": [1, 2.5]}, "id": "c"}]),
        AIMessage(content="x", response_metadata={"model": "m"}, usage_metadata=None),
        ToolMessage(content="out", tool_call_id="c", status="error", artifact={"k": 1}),
        SystemMessage(content="be brief"),
    ],
)
def test_message_documents_round_trip(message: Any) -> None:
    doc = message_doc(message)
    assert doc is not None and "role" in doc and doc["content"] == message.content
    assert message_from_doc(json.loads(json.dumps(doc))) == message
