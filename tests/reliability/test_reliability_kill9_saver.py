"""Kill -9 of a LangGraph app whose saver folds closed turns (issue 42, 0011): a worker runs the
tool loop turn after turn on one thread, its folding thread folding each closed turn (on both
backends here), and is SIGKILLed at random moments, mid-step or mid-fold. After every kill each
step it acknowledged reads back with the messages it had, the thread goes on from its newest
step, and ``verify`` finds nothing wrong: a fold is one transaction, killed its steps stay loose.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.graph", reason="langgraph is not installed (alpstore[langgraph])")

from alpstore.integrations.langgraph import AlpstoreSaver
from alpstore.maintenance import verify
from tests.conftest import Backend

KILLS = int(os.environ.get("ALPSTORE_SAVER_TORTURE_KILLS", "6"))

WORKER = r"""
import hashlib, json, os, sys
from pathlib import Path
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from alpstore.integrations import _lgfold
from alpstore.integrations.langgraph import AlpstoreSaver

_lgfold.FOLD = _lgfold.FOLD_ON_POSTGRESQL = True
_lgfold.EVERY_ON_POSTGRESQL = 1  # a fold at every turn, to be killed in
root, url, log, seed = Path(sys.argv[1]), sys.argv[2] or None, sys.argv[3], int(sys.argv[4])


def agent(state):
    last, n = state["messages"][-1], len(state["messages"])
    if isinstance(last, HumanMessage) and "tool" in last.content:
        call = {"name": "read", "args": {"path": f"f{n}.py"}, "id": f"c-{seed}-{n}"}
        return {"messages": [AIMessage(content="", id=f"a-{seed}-{n}", tool_calls=[call])]}
    return {"messages": [AIMessage(content=f"done {n}", id=f"a-{seed}-{n}")]}


def tools(state):
    call = state["messages"][-1].tool_calls[0]
    body = "".join(f"def f{i}(): return {i}\n" for i in range(20))
    return {"messages": [ToolMessage(content=body, tool_call_id=call["id"], id=f"t-{call['id']}")]}


def route(state):
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


b = StateGraph(MessagesState)
b.add_node("agent", agent)
b.add_node("tools", tools)
b.add_edge(START, "agent")
b.add_conditional_edges("agent", route, ["tools", END])
b.add_edge("tools", "agent")
fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
config = {"configurable": {"thread_id": "torture", "checkpoint_ns": ""}}
with AlpstoreSaver.open(root, url=url) as saver:
    graph = b.compile(checkpointer=saver)
    print("ready", flush=True)
    i = 0
    while True:
        text = f"turn {seed}-{i}" + (" tool" if i % 2 else "")
        graph.invoke({"messages": [HumanMessage(content=text, id=f"u-{seed}-{i}")]}, config)
        newest = saver.get_tuple(config)
        docs = [m.model_dump() for m in newest.checkpoint["channel_values"]["messages"]]
        digest = hashlib.sha256(json.dumps(docs, sort_keys=True).encode()).hexdigest()
        ack = {"id": newest.config["configurable"]["checkpoint_id"], "digest": digest}
        os.write(fd, (json.dumps(ack) + "\n").encode())
        os.fsync(fd)
        i += 1
"""


def _config(checkpoint_id: str | None = None) -> Any:
    conf = {"thread_id": "torture", "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _digest(tup: Any) -> str:
    docs = [m.model_dump() for m in tup.checkpoint["channel_values"]["messages"]]
    return hashlib.sha256(json.dumps(docs, sort_keys=True).encode()).hexdigest()


def test_kill9_while_the_saver_folds_loses_no_acknowledged_step(
    backend: Backend, tmp_path: Path
) -> None:
    log = tmp_path / "acks.jsonl"
    rng = random.Random(42)
    expected: dict[str, str] = {}
    repo = Path(__file__).resolve().parents[2]
    for kill in range(KILLS):
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                WORKER,
                str(backend.root),
                backend.url or "",
                str(log),
                str(kill),
            ],
            stdout=subprocess.PIPE,
            cwd=repo,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.5, 2.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        for line in log.read_text().splitlines():
            ack = json.loads(line)
            expected[ack["id"]] = ack["digest"]
        with AlpstoreSaver.open(backend.root, url=backend.url) as saver:
            for checkpoint_id, want in expected.items():
                tup = saver.get_tuple(_config(checkpoint_id))
                assert tup is not None, f"acknowledged step {checkpoint_id} is gone"
                assert _digest(tup) == want, f"step {checkpoint_id} reads other messages"
            steps = [t.config["configurable"]["checkpoint_id"] for t in saver.list(_config())]
            assert set(expected) <= set(steps)
            assert steps == sorted(steps, reverse=True)
        check = backend.open_store()
        try:
            report = verify(check)
            assert report.ok, "\n".join(p.line() for p in report.problems)
        finally:
            check.close()
            backend._opened.remove(check)
    assert len(expected) >= KILLS  # the worker did real work between kills
    final = backend.open_store()
    with final.db.read() as conn:
        folded = conn.exec_driver_sql("SELECT count(*) FROM lg_turns").scalar_one()
    assert int(folded) > 0  # the folds ran (and some were killed)
