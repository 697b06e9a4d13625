"""`alpstore debug …` end to end on a session imported from a 1,000-turn JSONL with a planted
bad turn; bad input gives one clear line and a non-zero exit."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from alpstore.samples import write_jsonl
from tests.conftest import Result, run_cli
from tests.debug.test_debug_lineage import check_mermaid

BAD_TURN = 421


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Any:
    base = tmp_path_factory.mktemp("debugcli")
    source = base / "agent.jsonl"
    write_jsonl(source, 1000, bad_turn=BAD_TURN)
    root = base / "run"

    def cli(*args: str, **kw: Any) -> Result:
        return run_cli("--root", str(root), *args, **kw)

    r = cli("session", "import", str(source), "--name", "big")
    assert r.code == 0, r.err
    assert "1000 turns" in r.out
    return cli


def test_bisect_names_the_planted_turn(imported: Any) -> None:
    r = imported("debug", "bisect", "big", "--grep", r"rm -rf")
    assert r.code == 0, r.err
    assert r.out.startswith(f"first bad: turn {BAD_TURN} = big@{BAD_TURN} ")
    assert f"last good: turn {BAD_TURN - 1} = big@{BAD_TURN - 1} " in r.out
    m = re.search(r"(\d+) hydrations over 1000 checkpoints", r.out)
    assert m and int(m[1]) <= 11
    assert "rm -rf build/ --no-preserve-root" in r.out
    j = imported("debug", "bisect", "big", "--exec", "! grep -q 'no-preserve-root'", "--json")
    assert j.code == 0, j.err
    doc = json.loads(j.out)
    assert doc["first_bad"]["turn"] == BAD_TURN and doc["hydrations"] <= doc["bound"] == 11


def test_diff_replay_log_show_and_lineage_after_backtrack_and_fork(imported: Any) -> None:
    r = imported("session", "backtrack", "big", "2", "Do not delete the build directory.")
    assert r.code == 0, r.err
    assert (
        imported(
            "session",
            "append",
            "big",
            "--role",
            "assistant",
            "--content",
            "Understood.",
            "--checkpoint",
        ).code
        == 0
    )
    assert imported("session", "fork", f"big@{BAD_TURN - 1}", "--name", "safe").code == 0
    diff = imported("debug", "diff", "big@1000", "big@latest")
    assert diff.code == 0, diff.err
    assert "removed 12 entries:" in diff.out and "added 2 entries:" in diff.out
    assert "+ [5987] user: /steer Do not delete the build directory." in diff.out
    replay = imported("debug", "replay", "big")
    lines = replay.out.splitlines()
    bt = next(i for i, line in enumerate(lines) if line.startswith("↶ backtrack 2 step(s)"))
    assert "steering: /steer Do not delete the build directory." in lines[bt]
    assert lines[bt + 1].startswith("== turn 999 (checkpoint 1001, every_turn, 12 entries cut)")
    assert lines[bt + 2].endswith("user: /steer Do not delete the build directory.")
    assert lines[0] == "== turn 1 (checkpoint 1, every_turn)"
    log = imported("debug", "log", "big")
    cut = [row.split("\t") for row in log.out.splitlines() if row.endswith(" (cut by backtrack)")]
    assert [(r[1], r[3]) for r in cut] == [("999", "every_turn"), ("1000", "every_turn")]
    show = imported("debug", "show", f"big@{BAD_TURN}", "--tail", "3")
    assert show.code == 0 and f"= big@{BAD_TURN} (turn-{BAD_TURN:04d}" in show.out
    assert "tool: removed 1832 files" in show.out
    mermaid = imported("session", "lineage", "big", "--format", "mermaid")
    assert mermaid.code == 0, mermaid.err
    nodes, edges = check_mermaid(mermaid.out)
    assert len(nodes) == 3 and len(edges) == 2


def test_fold_then_expand(imported: Any) -> None:
    assert imported("session", "fold", "safe", "1", "31", "--summary", "early work").code == 0
    assert imported("session", "checkpoint", "safe", "--label", "compacted").code == 0
    show = imported("debug", "show", "safe@latest", "--json")
    entries = json.loads(show.out)["entries"]
    assert entries[1]["kind"] == "summary"
    exp = imported("debug", "expand", "safe@latest")
    assert exp.code == 0, exp.err
    assert "1 summaries expanded to" in exp.out
    assert exp.out.splitlines()[2].startswith("{") and "] user: " in exp.out.splitlines()[2]
    diff = imported("debug", "diff", f"big@{BAD_TURN - 1}", "safe@latest", "--json")
    doc = json.loads(diff.out)
    (fold,) = doc["folded"]
    assert fold["summary"]["value"]["summary"] == "early work" and len(fold["replaced"]) == 30


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("debug", "log", "nobody"), 4, "no session 'nobody'"),
        (("debug", "show", "big@5000"), 4, "no checkpoint at turn 5000"),
        (("debug", "diff", "big@1", "/elsewhere/archive.json"), 2, "same archive"),
        (("debug", "bisect", "big"), 2, "exactly one of --grep"),
        (("debug", "bisect", "big", "--grep", "x", "--exec", "true"), 2, "exactly one"),
        (("debug", "bisect", "big", "--grep", "no such text anywhere"), 2, "good at the last"),
        (
            ("debug", "bisect", "big", "--grep", "careful coding agent"),
            2,
            "already bad at the first",
        ),
        (("debug", "bisect", "big", "--exec", "echo kaput >&2; exit 126"), 2, "exited 126 .*kaput"),
        (("debug", "bisect", "big", "--grep", "(("), 2, "not a valid regular expression"),
        (("debug", "expand", "nobody@1"), 4, "no session"),
        (("session", "lineage", "--format", "png"), 2, "--format 'png'"),
    ],
)
def test_bad_input(imported: Any, args: tuple[str, ...], code: int, message: str) -> None:
    r = imported(*args)
    assert r.code == code, (r.out, r.err)
    assert re.search(message, r.err.splitlines()[0]), r.err
    assert r.err.startswith("alpstore: error: ") and "Traceback" not in r.err
