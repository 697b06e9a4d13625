"""Issue 31 on a LangGraph thread: tool calls shown and searched, the thread id and a
LangGraph checkpoint_id as references."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.graph", reason="langgraph is not installed (alpstore[langgraph])")

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph

from alpstore.integrations.langgraph import AlpstoreSaver


def _tool_loop(run_root: Path) -> str:
    """A LangGraph agent ⇄ tools loop stored by AlpstoreSaver; the checkpoint_id of its first
    step that holds the ``rm -rf`` call."""

    def agent(state: MessagesState) -> dict[str, Any]:
        n = len(state["messages"])
        if isinstance(state["messages"][-1], ToolMessage):
            return {"messages": [AIMessage(content="done", id=f"a{n}")]}
        cmd = "rm -rf build" if "clean" in str(state["messages"][-1].content) else "ls"
        call = {"name": "shell", "args": {"cmd": cmd}, "id": f"c{n}"}
        return {"messages": [AIMessage(content="", tool_calls=[call], id=f"a{n}")]}

    def tools(state: MessagesState) -> dict[str, Any]:
        call = state["messages"][-1].tool_calls[0]  # type: ignore[attr-defined]
        return {
            "messages": [ToolMessage(content="ok", tool_call_id=call["id"], id="t" + call["id"])]
        }

    def route(state: MessagesState) -> str:
        return "tools" if getattr(state["messages"][-1], "tool_calls", None) else END

    config = {"configurable": {"thread_id": "t1"}}
    with AlpstoreSaver.open(run_root) as saver:
        g = StateGraph(MessagesState)
        g.add_node("agent", agent)
        g.add_node("tools", tools)
        g.add_edge(START, "agent")
        g.add_conditional_edges("agent", route)
        g.add_edge("tools", "agent")
        graph = g.compile(checkpointer=saver)
        graph.invoke({"messages": [HumanMessage(content="list files", id="u1")]}, config)
        graph.invoke({"messages": [HumanMessage(content="clean up", id="u2")]}, config)
        for snap in graph.get_state_history(config):
            msgs = snap.values.get("messages", [])
            if (
                msgs
                and getattr(msgs[-1], "tool_calls", None)
                and "rm -rf" in str(msgs[-1].tool_calls)
            ):
                first = snap.config["configurable"]["checkpoint_id"]
        return str(first)


def test_langgraph_tool_calls_show_search_and_resolve(cli: Any, run_root: Path) -> None:
    lg_id = _tool_loop(run_root)
    shown = cli("session", "show", "t1")  # the thread id alone finds langgraph:t1
    assert shown.code == 0, shown.err
    assert 'assistant: calls shell({"cmd": "ls"})' in shown.out
    assert 'assistant: calls shell({"cmd": "rm -rf build"})' in shown.out
    assert cli("session", "log", "t1").code == 0
    show = cli("debug", "show", lg_id)  # a LangGraph checkpoint_id is a checkpoint reference
    assert show.code == 0, show.err
    assert "rm -rf build" in show.out
    bisect = cli("debug", "bisect", "t1", "--grep", "rm -rf")
    assert bisect.code == 0, bisect.err
    first = show.out.splitlines()[0].split()[1]  # "checkpoint N = …"
    assert f"checkpoint {first}" in bisect.out or f"({first})" in bisect.out, bisect.out
    assert "calls ?()" not in shown.out + show.out
    bad = cli("debug", "show", "00000000-0000-0000-0000-000000000000")
    assert bad.code != 0 and "no LangGraph checkpoint" in bad.err and "Traceback" not in bad.err
