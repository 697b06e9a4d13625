"""The scripted LangGraph agent of issue 31, stored by AlpstoreSaver: an agent ⇄ tools loop, an
approval step that interrupts before a destructive command and is resumed, and an
``update_state`` on an older checkpoint (time travel: a branch of the thread).

Used by the end-to-end CLI test and the inspector's browser test.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

from alpstore.integrations.langgraph import AlpstoreSaver

THREAD = "t1"
WAITING = "t2"
"""A second thread, left at its interrupt (its pending writes never consumed)."""


class AgentState(MessagesState):
    """The conversation plus one more channel (shown by the inspector as JSON)."""

    approvals: int


@dataclass(frozen=True)
class Scripted:
    """What the script did: the LangGraph checkpoint_id of the first step holding the
    ``rm -rf`` call, the one ``update_state`` branched from (the step the command's output
    came back in, older than the thread's last), and the one it wrote."""

    rm_checkpoint: str
    branched_from: str
    branch: str


def _agent(state: AgentState) -> dict[str, Any]:
    msgs = state["messages"]
    n = len(msgs)
    if isinstance(msgs[-1], ToolMessage):
        return {"messages": [AIMessage(content=f"done: {msgs[-1].content}", id=f"a{n}")]}
    text = str(msgs[-1].content)
    cmd = "rm -rf build" if "clean" in text else "ls"
    call = {"name": "shell", "args": {"cmd": cmd}, "id": f"c{n}"}
    return {"messages": [AIMessage(content="", tool_calls=[call], id=f"a{n}")]}


def _approve(state: AgentState) -> dict[str, Any]:
    call = state["messages"][-1].tool_calls[0]  # type: ignore[attr-defined]
    if "rm -rf" in call["args"]["cmd"]:
        answer = interrupt({"question": "run this?", "cmd": call["args"]["cmd"]})
        if answer != "yes":
            return {"messages": [ToolMessage(content="refused", tool_call_id=call["id"])]}
    return {"approvals": state.get("approvals", 0) + 1}


def _tools(state: AgentState) -> dict[str, Any]:
    call = state["messages"][-1].tool_calls[0]  # type: ignore[attr-defined]
    out = "a.txt build/" if call["args"]["cmd"] == "ls" else "removed build/"
    return {"messages": [ToolMessage(content=out, tool_call_id=call["id"], id="t" + call["id"])]}


def _route(state: AgentState) -> str:
    return "approve" if getattr(state["messages"][-1], "tool_calls", None) else END


def _after_approval(state: AgentState) -> str:
    return "agent" if isinstance(state["messages"][-1], ToolMessage) else "tools"


def build_agent(run_root: Path, url: str | None = None) -> Scripted:
    """Run the script on the archive at ``run_root`` (``url``: another database)."""
    config: Any = {"configurable": {"thread_id": THREAD}}
    with AlpstoreSaver.open(run_root, url=url) as saver:
        g = StateGraph(AgentState)
        g.add_node("agent", _agent)
        g.add_node("approve", _approve)
        g.add_node("tools", _tools)
        g.add_edge(START, "agent")
        g.add_conditional_edges("agent", _route)
        g.add_conditional_edges("approve", _after_approval)
        g.add_edge("tools", "agent")
        graph = g.compile(checkpointer=saver)
        # durability="sync": each step is stored before the next runs, so the script's
        # order is the archive's (LangGraph's default saves in the background: a step may
        # then be stored after the invoke that made it returned)
        run: Any = {"durability": "sync"}
        graph.invoke({"messages": [HumanMessage(content="list files", id="u1")]}, config, **run)
        graph.invoke({"messages": [HumanMessage(content="clean up", id="u2")]}, config, **run)
        assert graph.get_state(config).interrupts, "the approval step did not interrupt"
        graph.invoke(Command(resume="yes"), config, **run)
        rm = branched = ""
        for snap in graph.get_state_history(config):  # newest first
            msgs = snap.values.get("messages", [])
            if msgs and "rm -rf" in str(getattr(msgs[-1], "tool_calls", "")):
                rm = snap.config["configurable"]["checkpoint_id"]
            if not branched and msgs and isinstance(msgs[-1], ToolMessage):
                # the step the command's output came back in: travel back to it
                branched = snap.config["configurable"]["checkpoint_id"]
        assert rm and branched
        old = {"configurable": {"thread_id": THREAD, "checkpoint_id": branched}}
        new = graph.update_state(
            old, {"messages": [HumanMessage(content="next time keep a backup", id="u3")]}
        )
        waiting: Any = {"configurable": {"thread_id": WAITING}}
        graph.invoke({"messages": [HumanMessage(content="clean up", id="w1")]}, waiting, **run)
        return Scripted(rm, branched, new["configurable"]["checkpoint_id"])
