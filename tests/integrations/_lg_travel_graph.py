"""The LangGraph agent of issue 40's tests: an agent ⇄ tools loop, an approval step that
interrupts before a destructive command (resumed with ``Command(resume=…)``), a subgraph
node (``summarize``: its own checkpoint namespace) and ``update_state`` on an older
checkpoint. Deterministic: every message carries its id, no model is called.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

THREAD = "t1"
RUN: Any = {"durability": "sync"}
"""Each step stored before the next runs (the script's order is the archive's)."""


def config(thread: str = THREAD) -> Any:
    return {"configurable": {"thread_id": thread}}


def _agent(state: MessagesState) -> dict[str, Any]:
    msgs = state["messages"]
    n = len(msgs)
    if isinstance(msgs[-1], ToolMessage):
        return {"messages": [AIMessage(content=f"done: {msgs[-1].content}", id=f"a{n}")]}
    cmd = "rm -rf build" if "clean" in str(msgs[-1].content) else "ls"
    call = {"name": "shell", "args": {"cmd": cmd}, "id": f"c{n}"}
    return {"messages": [AIMessage(content="", tool_calls=[call], id=f"a{n}")]}


def _approve(state: MessagesState) -> dict[str, Any]:
    call = state["messages"][-1].tool_calls[0]  # type: ignore[attr-defined]
    if "rm -rf" in call["args"]["cmd"]:
        answer = interrupt({"question": "run this?", "cmd": call["args"]["cmd"]})
        if answer != "yes":
            out = ToolMessage(content="refused", tool_call_id=call["id"], id="r" + call["id"])
            return {"messages": [out]}
    return {}


def _tools(state: MessagesState) -> dict[str, Any]:
    call = state["messages"][-1].tool_calls[0]  # type: ignore[attr-defined]
    out = "a.txt build/" if call["args"]["cmd"] == "ls" else "removed build/"
    return {"messages": [ToolMessage(content=out, tool_call_id=call["id"], id="t" + call["id"])]}


def _route(state: MessagesState) -> str:
    return "approve" if getattr(state["messages"][-1], "tool_calls", None) else "summarize"


def _after_approval(state: MessagesState) -> str:
    return "agent" if isinstance(state["messages"][-1], ToolMessage) else "tools"


def _summary(state: MessagesState) -> dict[str, Any]:
    n = len(state["messages"])
    return {"messages": [AIMessage(content=f"summary of {n} messages", id=f"s{n}")]}


def build_graph(saver: Any) -> Any:
    """The graph, compiled with ``saver``."""
    sub = StateGraph(MessagesState)
    sub.add_node("sum", _summary)
    sub.add_edge(START, "sum")
    g = StateGraph(MessagesState)
    g.add_node("agent", _agent)
    g.add_node("approve", _approve)
    g.add_node("tools", _tools)
    g.add_node("summarize", sub.compile())
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", _route)
    g.add_conditional_edges("approve", _after_approval)
    g.add_edge("tools", "agent")
    return g.compile(checkpointer=saver)


def run_script(graph: Any, thread: str = THREAD) -> None:
    """Two turns through the loop and the subgraph, an interrupt resumed with "yes", an
    ``update_state`` on an older step, and a last turn left waiting at its interrupt.
    """
    cfg = config(thread)
    graph.invoke({"messages": [HumanMessage("list files", id="u1")]}, cfg, **RUN)
    graph.invoke({"messages": [HumanMessage("clean up", id="u2")]}, cfg, **RUN)
    assert graph.get_state(cfg).interrupts, "the approval step did not interrupt"
    graph.invoke(Command(resume="yes"), cfg, **RUN)
    older = next(
        s
        for s in graph.get_state_history(cfg)
        if s.values.get("messages") and isinstance(s.values["messages"][-1], ToolMessage)
    )
    graph.update_state(older.config, {"messages": [HumanMessage("keep a backup", id="u3")]})
    graph.invoke({"messages": [HumanMessage("clean again", id="u4")]}, cfg, **RUN)
    assert graph.get_state(cfg).next == ("approve",)


def history(saver: Any, thread: str = THREAD) -> list[tuple[Any, ...]]:
    """Everything ``list`` gives for the thread, every namespace: ids, checkpoints (channel
    values and versions), metadata, parents, pending writes."""
    return [
        (t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes)
        for t in saver.list(config(thread))
    ]


def states(graph: Any, thread: str = THREAD) -> list[tuple[Any, ...]]:
    """``get_state_history`` of the thread (values, next, config, metadata, interrupts)."""
    return [
        (s.values, s.next, s.config, s.metadata, s.parent_config, s.interrupts)
        for s in graph.get_state_history(config(thread))
    ]


def messages(values: Any) -> list[tuple[str, str]]:
    """A state's messages as ``(type, content)``."""
    return [
        (m.type, str(m.content)) for m in values.get("messages", []) if isinstance(m, BaseMessage)
    ]
