from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from alpstore.samples import write_jsonl


@pytest.fixture(scope="module")
def thousand_turns(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("conv") / "conv.jsonl"
    write_jsonl(path, 1000, seed=11)
    return path


def test_import_1000_turns_then_log_and_sql_lineage(cli: Any, thousand_turns: Path) -> None:
    result = cli("session", "import", str(thousand_turns), "--name", "big")
    assert result.code == 0, result.err
    assert "in 1000 turns" in result.out and "1000 checkpoints" in result.out
    log = cli("session", "log", "big")
    assert log.code == 0, log.err
    lines = log.out.strip().splitlines()
    assert len(lines) == 1001 and lines[-1].split()[1] == "1000"
    lineage = cli("sql", "select * from session_lineage")
    assert lineage.code == 0, lineage.err
    assert "big" in lineage.out and len(lineage.out.splitlines()) == 2  # header and one row
    summary = json.loads(cli("sql", "select * from session_summary", "--json").out)
    assert summary[0]["checkpoints"] == 1000 and summary[0]["turns"] == 1000


def test_backtrack_fork_resume_show(cli: Any) -> None:
    sid = cli("session", "new", "--name", "s").out.strip()
    for i in range(4):
        r = cli("session", "append", "s", "--role", "user", "--content", f"q{i}", "--checkpoint")
        assert r.code == 0, r.err
    bt = cli("session", "backtrack", "s", "2", "Avoid", "the", "tool")
    assert bt.code == 0, bt.err
    assert "/steer Avoid the tool" in bt.out
    shown = cli("session", "show", "s", "--json")
    contents = [e["value"]["content"] for e in json.loads(shown.out)]
    assert contents == ["q0", "q1", "/steer Avoid the tool"]
    fork = cli("session", "fork", f"{sid}@1", "--name", "child")
    assert fork.code == 0, fork.err
    child = json.loads(cli("session", "show", "child", "--json").out)
    assert [e["value"]["content"] for e in child] == ["q0"]
    cli("session", "append", "child", "--role", "user", "--content", "only in child")
    parent = json.loads(cli("session", "show", "s", "--json").out)
    assert len(parent) == 3
    at = json.loads(cli("session", "show", "s", "--at", f"{sid}@4", "--json").out)
    assert [e["value"]["content"] for e in at] == ["q0", "q1", "q2", "q3"]
    resumed = cli("session", "resume", "s", "--at", f"{sid}@2")
    assert resumed.code == 0 and "turn 2" in resumed.out
    log = cli("session", "log", "s")
    assert "backtrack 2 step(s)" in log.out and "cut by backtrack" in log.out


def test_fold_then_log_shows_it(cli: Any) -> None:
    cli("session", "new", "--name", "f")
    for i in range(6):
        cli("session", "append", "f", "--role", "user", "--content", f"m{i}")
    folded = cli("session", "fold", "f", "0", "4", "--summary", "first four")
    assert folded.code == 0, folded.err
    shown = cli("session", "show", "f")
    assert shown.out.splitlines()[0] == "[0] summary of 4: first four"
    assert "fold" in cli("session", "log", "f").out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("session", "backtrack", "b", "5"), "only 1 checkpoint"),
        (("session", "show", "nope"), "no session"),
        (("session", "fold", "b", "3", "9", "--summary", "x"), "not a non-empty span"),
        (("session", "fold", "b", "2", "2", "--summary", "x"), "not a non-empty span"),
        (("session", "fork", "b@99"), "no checkpoint at turn 99"),
        (("session", "backtrack", "b", "0"), "expected an integer"),
    ],
)
def test_bad_requests_are_clear_and_change_nothing(
    cli: Any, args: tuple[str, ...], needle: str
) -> None:
    cli("session", "new", "--name", "b")
    cli("session", "append", "b", "--role", "user", "--content", "x", "--checkpoint")
    before = cli("session", "show", "b", "--json").out
    result = cli(*args)
    assert result.code != 0
    assert needle in result.err, result.err
    assert "Traceback" not in result.err
    assert cli("session", "show", "b", "--json").out == before


def test_paused_session_refuses_appends(cli: Any) -> None:
    cli("session", "new", "--name", "p")
    assert cli("session", "status", "p", "paused").out.strip() == "paused"
    refused = cli("session", "append", "p", "--role", "user", "--content", "x")
    assert refused.code != 0 and "paused" in refused.err
    cli("session", "status", "p", "active")
    assert cli("session", "append", "p", "--role", "user", "--content", "x").code == 0
    cli("session", "status", "p", "terminated")
    assert cli("session", "status", "p", "active").code != 0


def test_malformed_import_line_imports_nothing(cli: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"role": "user", "content": "hi"}\n{"role": "assistant", "content": "ok"}\n'
        '{"role": "user", "content": \n'
    )
    result = cli("session", "import", str(bad))
    assert result.code != 0
    assert f"{bad}:3" in result.err
    listed = cli("session", "list", "--json")  # no archive, or an empty one
    assert listed.code == 4 or json.loads(listed.out) == [], listed.err
    wrong_role = tmp_path / "role.jsonl"
    wrong_role.write_text('{"role": "wizard", "content": "hi"}\n')
    assert f"{wrong_role}:1" in cli("session", "import", str(wrong_role)).err


def test_claude_code_transcript_import(cli: Any, tmp_path: Path) -> None:
    lines = [
        {"type": "summary", "summary": "old"},
        {
            "type": "user",
            "uuid": "u1",
            "parentUuid": None,
            "message": {"role": "user", "content": "fix the bug"},
        },
        {
            "type": "assistant",
            "uuid": "a1",
            "parentUuid": "u1",
            "message": {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}],
            },
        },
        {
            "type": "user",
            "uuid": "u2",
            "parentUuid": "a1",
            "message": {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "file"}],
            },
        },
        {
            "type": "assistant",
            "uuid": "a2",
            "parentUuid": "u2",
            "message": {"role": "assistant", "content": "done"},
        },
        {
            "type": "user",
            "uuid": "u3",
            "parentUuid": "a2",
            "message": {"role": "user", "content": "thanks"},
        },
    ]
    path = tmp_path / "0b1c.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    result = cli("session", "import", str(path), "--name", "cc")
    assert result.code == 0, result.err
    assert "imported 5 messages, 2 checkpoints" in result.out and "(claude-code)" in result.out
    assert "1 records not conversation skipped (summary 1)" in result.out


@pytest.mark.parametrize(
    "label", ["\x1b[31mred\x1b[0m", "two\nlines", "bidi\u202eevil", " padded", "x" * 201]
)
def test_a_label_an_export_would_refuse_is_refused_when_taken(
    cli: Any, label: str, tmp_path: Path
) -> None:
    """A checkpoint label must be one `checkpoint export` can write: refused when taken (one
    line, exit 2, nothing stored), not only later by the export."""
    assert cli("session", "new", "--name", "lab").code == 0
    assert cli("session", "append", "lab", "--role", "user", "--content", "q").code == 0
    result = cli("session", "checkpoint", "lab", "--label", label)
    assert result.code == 2, result.err
    assert "checkpoint label" in result.err and "Traceback" not in result.err
    assert "\x1b" not in result.err and "\u202e" not in result.err
    assert json.loads(cli("session", "log", "lab", "--json").out) == []
    fine = cli("session", "checkpoint", "lab", "--label", "before refactor ✓")
    assert fine.code == 0, fine.err
    exported = cli("checkpoint", "export", "lab@latest", "-o", str(tmp_path / "lab.json"))
    assert exported.code == 0, exported.err


def test_an_id_that_is_another_sessions_name_or_not_an_id_is_refused(
    cli: Any, tmp_path: Path
) -> None:
    """Lookups try ids first, so a new session whose id is another session's name would take
    that name over (`session show demo` showed the newcomer); and an id follows the rule an
    imported one does. new, import and fork alike: exit 2, one line, nothing stored."""
    assert cli("session", "new", "--name", "demo").code == 0
    assert cli("session", "append", "demo", "--role", "user", "--content", "mine").code == 0
    assert cli("session", "checkpoint", "demo").code == 0
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(json.dumps({"role": "user", "content": "theirs"}) + "\n")
    before = cli("session", "list", "--json").out
    for args in [
        ("session", "new", "--id", "demo"),
        ("session", "import", str(transcript), "--id", "demo"),
        ("session", "fork", "demo@latest", "--id", "demo"),
        ("session", "new", "--id", "x\x1b[2J"),
        ("session", "new", "--id", "a/b"),
        ("session", "new", "--id", "openai-agents:x"),
    ]:
        result = cli(*args)
        assert result.code == 2, (args, result.err)
        assert "session id" in result.err and "Traceback" not in result.err, result.err
        assert "\x1b" not in result.err and len(result.err.strip().splitlines()) <= 2
    assert cli("session", "list", "--json").out == before
    shown = cli("session", "show", "demo", "--json")
    assert "mine" in shown.out and "theirs" not in shown.out


def test_the_listing_table_says_what_the_json_says(cli: Any) -> None:
    """`session list` reads only the columns it prints (one query); each row agrees with the
    `--json` listing, a fork names its parent, and --limit/--offset cut the same page."""
    sid = cli("session", "new", "--name", "first").out.strip()
    cli("session", "append", "first", "--role", "user", "--content", "q", "--checkpoint")
    assert cli("session", "fork", f"{sid}@1", "--name", "child").code == 0
    cli("session", "new", "--name", "third")
    docs = json.loads(cli("session", "list", "--json").out)
    table = cli("session", "list").out.splitlines()
    assert table[0].split("\t") == ["SESSION", "NAME", "STATUS", "TURN", "HEAD", "PARENT"]
    want = [
        [
            d["session"],
            d["name"],
            d["status"],
            str(d["turn"]),
            str(d["head_length"]),
            d["parent"] or "-",
        ]
        for d in docs
    ]
    assert [line.split("\t") for line in table[1:]] == want
    assert want[1][5] == sid  # the child names its parent
    page = cli("session", "list", "--limit", "1", "--offset", "1").out.splitlines()
    assert page[1:] == table[2:3]
