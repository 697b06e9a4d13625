"""Issue 31: tool calls shown and searched, LangGraph thread and checkpoint ids as references,
``backtrack --to``, ``debug diff A @latest``, transcripts (Claude Code, fine-tuning JSONL)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def test_backtrack_to_and_diff_at_latest(cli: Any) -> None:
    cli("session", "new", "--name", "demo")
    for i in range(1, 6):
        r = cli("session", "append", "demo", "--role", "user", "--content", f"q{i}", "--checkpoint")
        assert r.code == 0, r.err
    diff = cli("debug", "diff", "demo@1", "@latest")
    assert diff.code == 0, diff.err
    assert "+++ demo@5" in diff.out or "checkpoint 5" in diff.out
    bt = cli("session", "backtrack", "demo", "--to", "demo@2", "try", "again")
    assert bt.code == 0, bt.err
    assert "backtracked 3 step(s)" in bt.out and "/steer try again" in bt.out
    contents = [
        e["value"]["content"] for e in json.loads(cli("session", "show", "demo", "--json").out)
    ]
    assert contents == ["q1", "q2", "/steer try again"]
    bt2 = cli("session", "backtrack", "demo", "demo@1")
    assert bt2.code == 0, bt2.err
    assert [
        e["value"]["content"] for e in json.loads(cli("session", "show", "demo", "--json").out)
    ] == ["q1"]
    gone = cli("session", "backtrack", "demo", "--to", "demo@99")
    assert gone.code != 0 and "no checkpoint at turn 99" in gone.err


def test_claude_code_tool_use_shown_and_roles_checked(cli: Any, tmp_path: Path) -> None:
    lines = [
        {"type": "user", "uuid": "u1", "message": {"role": "user", "content": "clean up"}},
        {
            "type": "assistant",
            "uuid": "a1",
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "I'll clean up."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "Bash",
                        "input": {"command": "rm -rf build"},
                    },
                ],
            },
        },
        {
            "type": "user",
            "uuid": "u2",
            "message": {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "removed"}
                ],
            },
        },
    ]
    path = tmp_path / "cc.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    r = cli("session", "import", str(path), "--name", "cc")
    assert r.code == 0, r.err
    shown = cli("session", "show", "cc").out
    assert '[1] assistant: I\'ll clean up. calls Bash({"command": "rm -rf build"})' in shown
    assert "[2] user: result: removed" in shown
    robot = cli("session", "append", "cc", "--role", "robot", "--content", "x")
    assert robot.code != 0 and "--role 'robot'" in robot.err
    ft = tmp_path / "ft.jsonl"
    ft.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    refused = cli("session", "import", str(ft))
    assert refused.code != 0 and "fine-tuning JSONL" in refused.err
