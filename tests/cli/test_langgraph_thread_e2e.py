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
    assert "never mind, keep it" in diff and "rm -rf build" in diff


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
