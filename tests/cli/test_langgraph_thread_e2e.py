"""Issue 31's done-when line, end to end through the real `alpstore` command: a scripted
LangGraph agent (a tool loop, an interrupt and its resume, ``update_state`` on an older
checkpoint) stored by AlpstoreSaver, then read back as a user would."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.graph", reason="langgraph is not installed (alpstore[langgraph])")

from tests.cli._lg_agent import Scripted, build_agent
from tests.conftest import Result, run_cli


@dataclass(frozen=True)
class Thread:
    root: Path
    script: Scripted

    def cli(self, *args: str) -> Result:
        return run_cli("--root", str(self.root), *args)

    def ok(self, *args: str) -> str:
        got = self.cli(*args)
        assert got.code == 0, f"alpstore {' '.join(args)}: {got.err}"
        assert "Traceback" not in got.err
        return got.out


@pytest.fixture(scope="module")
def thread(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Thread]:
    root = tmp_path_factory.mktemp("lgthread") / "run"
    root.mkdir()
    yield Thread(root, build_agent(root))


def _log(thread: Thread) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(thread.ok("session", "log", "t1", "--json"))
    return rows


def _ck_of(thread: Thread, lg_id: str) -> int:
    first = thread.ok("debug", "show", lg_id).splitlines()[0]  # "checkpoint N = …"
    return int(first.split()[1])


def test_update_state_on_an_older_checkpoint_is_a_rewind(thread: Thread) -> None:
    rows = _log(thread)
    branches = [r for r in rows if r["type"] == "backtrack"]
    assert len(branches) == 1, rows
    bt = branches[0]
    target = _ck_of(thread, thread.script.branched_from)
    new = _ck_of(thread, thread.script.branch)
    assert bt["to_checkpoint"] == target
    assert bt["by"] == "langgraph:update"
    cks = [r for r in rows if r["type"] == "checkpoint"]
    assert bt["from_checkpoint"] == max(c["checkpoint"] for c in cks if c["checkpoint"] != new)
    # the old branch is kept but no longer retained; the branch itself is the head's line
    after = [c for c in cks if target < c["checkpoint"] < new]
    assert after and not any(c["retained"] for c in after)
    assert bt["steps"] == len(after)
    assert next(c for c in cks if c["checkpoint"] == new)["retained"]
    # printed: the same mark a backtrack shows, naming the step that branched
    text = thread.ok("session", "log", "t1")
    assert (
        f"backtrack {len(after)} step(s) to checkpoint {target} (branch by langgraph:update)"
        in text
    )
    assert "cut by backtrack" in text
    # the branch's turn is counted from the checkpoint it branched from, not the old head
    at_target = next(c for c in cks if c["checkpoint"] == target)
    assert next(c for c in cks if c["checkpoint"] == new)["turn"] == at_target["turn"] + 1
    # lineage and debug log show it
    assert f"backtrack {len(after)} to turn {at_target['turn']}" in thread.ok(
        "session", "lineage", "t1"
    )
    debug_log = thread.ok("debug", "log", "t1")
    assert f"↶ backtrack {len(after)} step(s) to checkpoint {target}" in debug_log
    # debug diff across the branch: the old line's tail removed, the new message added
    diff = thread.ok("debug", "diff", str(new - 1), str(new))
    assert "- [7] assistant: done: removed build/" in diff
    assert "+ [7] user: next time keep a backup" in diff


def test_session_log_lists_every_step_with_its_node_spelling_and_marks(thread: Thread) -> None:
    rows = _log(thread)
    steps = [r for r in rows if r["type"] == "checkpoint"]
    assert len(steps) == 13
    nodes = [r["node"] for r in steps]
    assert nodes == [
        "(input)", "__start__", "agent", "approve", "tools", "agent",
        "(input)", "__start__", "agent", "approve", "tools", "agent",
        "(update)",
    ]  # fmt: skip
    refs = [r["step"] for r in steps]
    assert len(set(refs)) == len(refs)
    assert refs[:3] == ["langgraph:t1@0.1", "langgraph:t1@1.1", "langgraph:t1@1.2"]
    # the step whose task interrupted (the approval of rm -rf) is marked; nothing is pending
    rm = _ck_of(thread, thread.script.rm_checkpoint)
    marked = [r for r in steps if r["marks"]]
    assert [r["checkpoint"] for r in marked] == [rm]
    assert marked[0]["marks"][0].startswith('interrupt at approve: {"cmd": "rm -rf build"')
    assert not any(r["pending_writes"] for r in steps)
    assert {r["checkpoint_id"] for r in steps} >= {thread.script.rm_checkpoint}
    # the table prints the spelling, the node and the mark on the step's own row
    text = thread.ok("session", "log", "t1")
    assert "STEP" in text.splitlines()[0] and "NODE" in text.splitlines()[0]
    row = next(line for line in text.splitlines() if line.startswith(f"{rm}\t"))
    assert "\tagent\t" in row and "interrupt at approve" in row
    # every command taking a checkpoint accepts the spelling it printed
    for r in (steps[3], steps[9], steps[-1]):
        shown = thread.ok("debug", "show", r["step"]).splitlines()[0]
        assert shown.startswith(f"checkpoint {r['checkpoint']} = {r['step']} ")
    short = refs[9].removeprefix("langgraph:")  # the thread id alone: t1@2.3
    assert thread.ok("debug", "show", short).startswith(f"checkpoint {steps[9]['checkpoint']} ")
    at = thread.ok("session", "show", "t1", "--at", refs[4])
    assert at.splitlines()[-1] == "[2] tool: a.txt build/"
    diff = thread.ok("debug", "diff", refs[4], "@2.4")  # a bare @TURN.STEP: A's session
    assert "rm -rf build" in diff and "removed build/" in diff
    for bad in ("t1@2.99", "t1@2.0", "t1@latest.1"):
        got = thread.cli("debug", "show", bad)
        assert got.code != 0 and "Traceback" not in got.err
        assert len(got.err.strip().splitlines()) <= 2, got.err


def test_a_thread_left_at_its_interrupt_shows_its_pending_writes(thread: Thread) -> None:
    steps = [r for r in json.loads(thread.ok("session", "log", "t2", "--json"))]
    assert [r["type"] for r in steps] == ["checkpoint"] * 3  # the interrupt is on its step
    last = steps[-1]
    assert last["node"] == "agent" and last["pending_writes"] == 1
    assert last["marks"] and last["marks"][0].startswith("interrupt at approve:")
    text = thread.ok("session", "log", "t2")
    assert "pending writes of 1 task(s)" in text


def test_tool_calls_bisect_and_langgraph_ids(thread: Thread) -> None:
    shown = thread.ok("session", "show", "t1")
    assert '[1] assistant: calls shell({"cmd": "ls"})' in shown
    assert '[5] assistant: calls shell({"cmd": "rm -rf build"})' in shown
    assert "[7] user: next time keep a backup" in shown
    rm = _ck_of(thread, thread.script.rm_checkpoint)
    bisect = thread.ok("debug", "bisect", "t1", "--grep", "rm -rf")
    assert bisect.splitlines()[0].startswith(
        f"first bad: turn 2 = langgraph:t1@2.2 (checkpoint {rm},"
    ), bisect
    assert 'calls shell({"cmd": "rm -rf build"})' in bisect
    show = thread.ok("debug", "show", thread.script.rm_checkpoint)
    assert show.splitlines()[0].startswith(f"checkpoint {rm} = langgraph:t1@2.2 ")
    assert "rm -rf build" in show


def test_inspector_timeline_counts_agree_with_debug_log(thread: Thread) -> None:
    from alpstore.store import Store
    from alpstore.ui import queries

    want = {
        r["checkpoint"]: r["change"]
        for r in json.loads(thread.ok("debug", "log", "t1", "--json"))
        if r["type"] == "checkpoint"
    }
    store = Store.open(thread.root)
    try:
        info = store.get_session("langgraph:t1").info(refresh=False)
        page = queries.timeline_page(store, info, 0)
    finally:
        store.close()
    got = {r.checkpoint.id: r.change for r in page.rows}
    assert got == want
    assert any(c.startswith("-") for c in got.values())  # the branch: "-4 +1", not "+1"
    assert [m.kind for r in page.rows for m in r.markers].count("backtrack") == 1
