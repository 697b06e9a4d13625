"""The LangGraph saver raises the events a step shows; the manifest's policy decides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.graph", reason="langgraph is not installed (alpstore[langgraph])")

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph

from alpstore.integrations.langgraph import AlpstoreSaver, step_events
from alpstore.store import Store


def llm(state: MessagesState) -> dict[str, Any]:
    n = len(state["messages"])
    return {"messages": [AIMessage(content=f"calling tool {n}", id=f"ai-{n}")]}


def tool(state: MessagesState) -> dict[str, Any]:
    n = len(state["messages"])
    return {"messages": [ToolMessage(content="done", tool_call_id=f"t{n}", id=f"tool-{n}")]}


def test_step_events() -> None:
    assert step_events([HumanMessage("hi")]) == []
    assert step_events([AIMessage("a"), ToolMessage("t", tool_call_id="1")]) == [
        "after_llm_call",
        "after_tool_call",
    ]


def test_saver_checkpoints_the_policys_triggers(tmp_path: Path) -> None:
    manifest = {
        "kind": "Agent",
        "spec": {
            "checkpoint": {
                "mode": "on_event",
                "triggers": ["after_tool_call"],
                "storage": {"kind": "disk", "path": str(tmp_path / "cks")},
                "retention": {"mode": "last_n", "n": 2},
            }
        },
    }
    builder = (
        StateGraph(MessagesState)
        .add_node("llm", llm)
        .add_node("tool", tool)
        .add_edge(START, "llm")
        .add_edge("llm", "tool")
        .add_edge("tool", END)
    )
    config = {"configurable": {"thread_id": "t1"}}
    with Store.open(tmp_path / "run") as store:
        saver = AlpstoreSaver(store, manifest=manifest)
        graph = builder.compile(checkpointer=saver)
        for i in range(3):
            graph.invoke({"messages": [HumanMessage(f"q{i}", id=f"h{i}")]}, config)
        session = store.get_session("langgraph:t1")
        triggers = [c.trigger for c in session.checkpoints()]
        # LangGraph's own step checkpoints are all kept; one policy checkpoint per tool step
        assert triggers.count("after_tool_call") == 3
        assert sum(t.startswith("langgraph:") for t in triggers if t) == 3 * 4
        assert len(list((tmp_path / "cks").glob("*.json"))) == 2  # retention: its own files
        state = graph.get_state(config)
        assert [m.content for m in state.values["messages"]][-2:] == ["calling tool 7", "done"]
        assert len(list(graph.get_state_history(config))) == 3 * 4
