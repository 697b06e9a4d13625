"""Claude Code transcripts and Codex rollouts imported as the trees they are (issue 43): the
line shown is what the model saw; rewinds are backtracks, compactions folds, subagents child
sessions. Fixtures: tests/fixtures/transcripts (build.py writes them)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.conftest import Backend

FIXTURES = Path(__file__).parents[1] / "fixtures" / "transcripts"
SUBAGENT_SESSION = "5a0ddcd0-5487-4794-99ac-143f6bb9e248"


def _session_of(path: Path) -> str:
    for line in path.read_text().splitlines():
        doc = json.loads(line)
        if "sessionId" in doc:
            return str(doc["sessionId"])
        if doc.get("type") == "session_meta":
            return str(doc["payload"]["id"])
    raise AssertionError(path)


def _import(backend: Backend, path: Path, *more: str) -> str:
    r = backend.cli("session", "import", str(path), *more)
    assert r.code == 0, r.err
    return r.out


def _show(backend: Backend, ref: str, *more: str) -> list[str]:
    r = backend.cli("session", "show", ref, "--width", "0", *more)
    assert r.code == 0, r.err
    return r.out.splitlines()


def _log(backend: Backend, ref: str) -> list[dict[str, Any]]:
    r = backend.cli("session", "log", ref, "--json")
    assert r.code == 0, r.err
    return list(json.loads(r.out))


def test_a_rewind_is_a_backtrack_and_the_line_is_what_the_model_saw(backend: Backend) -> None:
    path = FIXTURES / "claude-rewind.jsonl"
    sid = _session_of(path)
    out = _import(backend, path)
    assert "3 rewinds as backtracks, 1 compactions as folds" in out
    shown = _show(backend, sid)
    assert shown[0].startswith("[0] summary of ")
    assert shown[1:] == [
        "[1] user: After compaction",
        "[2] assistant: Compacted answer",
        "[3] user: Rewound after compaction",
        "[4] assistant: Kept answer",
    ]
    log = _log(backend, sid)
    backtracks = [r for r in log if r["type"] == "backtrack"]
    cut = [r for r in log if r["type"] == "checkpoint" and not r["retained"]]
    assert len(backtracks) == 3
    assert [b["steps"] for b in backtracks] == [1, 1, 1]
    # two and three branches from one parent: First and Second attempt are cut, Third kept
    first, second = cut[0]["checkpoint"], cut[1]["checkpoint"]
    assert backtracks[0]["to_checkpoint"] == backtracks[1]["to_checkpoint"]
    abandoned = _show(backend, sid, "--at", str(first))
    assert abandoned[-2:] == ["[2] user: First attempt", "[3] assistant: First answer"]
    assert "Second attempt" in _show(backend, sid, "--at", str(second))[-2]
    kept = [r for r in log if r["type"] == "checkpoint" and r["retained"]]
    third = kept[1]["checkpoint"]
    assert _show(backend, sid, "--at", str(third))[2:] == [
        "[2] user: Third attempt",
        "[3] assistant: Third answer",
    ]
    # the abandoned branch is reachable: diff against it, fork from it
    diff = backend.cli("debug", "diff", str(first), str(third))
    assert diff.code == 0 and "First attempt" in diff.out and "Third attempt" in diff.out
    fork = backend.cli("session", "fork", str(first), "--name", "retry-first")
    assert fork.code == 0, fork.err
    assert _show(backend, "retry-first")[-2] == "[2] user: First attempt"
    # the fold covers the raw line the model saw before the compaction: the third branch
    expand = backend.cli("debug", "expand", f"{sid}@latest", "--width", "0")
    assert expand.code == 0, expand.err
    leaves = [x.split("} ", 1)[1] for x in expand.out.splitlines() if x.startswith("{")]
    assert leaves == [
        "[0] user: Set up the project",
        "[1] assistant: Project set up",
        "[2] user: Third attempt",
        "[3] assistant: Third answer",
        "[4] user: Continue the third",
        "[5] assistant: Continued",
    ]
    # a rewind after the compaction goes back to the compacted line, not the raw one
    rewound = [r for r in cut if r["turn"] == 5]
    assert rewound and "Abandoned after compaction" in "\n".join(
        _show(backend, sid, "--at", str(rewound[0]["checkpoint"]))
    )


def test_compactions_are_folds_expanding_to_the_raw_leaves(backend: Backend) -> None:
    path = FIXTURES / "claude-compactions.jsonl"
    sid = _session_of(path)
    out = _import(backend, path)
    assert "2 compactions as folds" in out and "meta 4" in out and "system 1" in out
    shown = _show(backend, sid)
    assert len(shown) == 3 and shown[0].startswith("[0] summary of 5: ")
    assert "f was fixed and the tests pass." in shown[0]
    log = _log(backend, sid)
    folds = [r for r in log if r["type"] == "fold"]
    assert len(folds) == 2
    before = next(r for r in log if r["type"] == "checkpoint")["checkpoint"]
    raw = _show(backend, sid, "--at", str(before))
    # one model response written as four records (thinking, text, two tool_use) is ONE
    # message; images and tool errors show; isMeta caveats are not conversation
    assert raw == [
        "[0] user: What is in this screenshot? [image]",
        "[1] assistant: (thinking: The user shows a failing test.) A failing test. Let me "
        'look. calls Read({"file_path": "a.py"}) calls Bash({"command": "pytest"})',
        "[2] user: result: 1→def f(): pass",
        "[3] user: result (error): Exit code 1 FAILED test_a.py::test_f",
        "[4] assistant: The test fails because f returns None.",
    ]
    expand = backend.cli("debug", "expand", f"{sid}@latest", "--width", "0")
    assert expand.code == 0, expand.err
    lines = [x for x in expand.out.splitlines() if x.startswith("{") or x.startswith("[")]
    assert len(lines) == 11
    assert "[0] user: What is in this screenshot?" in lines[0]
    assert "[5] user: Fix f" in lines[5] and lines[-1] == "[10] assistant: Committed"
    assert "Caveat" not in expand.out and "/compact" not in expand.out


def _check_subagents(backend: Backend, sid: str) -> None:
    main = _show(backend, sid)
    assert main == [
        "[0] user: Hello",
        "[1] assistant: Hi, what shall we do?",
        "[2] user: Research how caching and logging work",
        '[3] assistant: calls Agent({"prompt": "Research caching"}) '
        'calls Task({"prompt": "Research logging"})',
        "[4] user: result: caching uses an LRU",
        "[5] user: result: logging goes to stderr",
        "[6] assistant: Caching uses an LRU; logging goes to stderr.",
        "[7] user: Thanks",
        "[8] assistant: You're welcome",
    ]
    rows = json.loads(backend.cli("session", "list", "--json").out)
    by_id = {r["session"]: r for r in rows}
    a, b, nested = (f"{sid}.agent-{x}" for x in ("a1b2c3", "0f9e8d", "d4e5f6"))
    assert by_id[a]["parent"] == sid and by_id[b]["parent"] == sid
    assert by_id[nested]["parent"] == a
    assert _show(backend, a)[:2] == [
        "[0] user: Research caching",
        '[1] assistant: I\'ll research how caching works calls Grep({"pattern": "I\'ll res"})',
    ]
    assert _show(backend, nested)[0] == "[0] user: Read the cache module"
    lineage = backend.cli("session", "lineage", sid, "--format", "json")
    assert lineage.code == 0, lineage.err
    tree = json.loads(lineage.out)
    text = json.dumps(tree)
    assert a in text and b in text and nested in text
    # anchored at the checkpoint of the turn that made the two Agent calls
    turn_ck = [r for r in _log(backend, sid) if r["type"] == "checkpoint"][1]["checkpoint"]
    spawned = [r for r in _log(backend, sid) if r["type"] == "subagent"]
    assert {r["checkpoint"] for r in spawned} == {turn_ck}


def test_inline_sidechains_are_child_sessions(backend: Backend) -> None:
    path = FIXTURES / "claude-subagents-inline.jsonl"
    out = _import(backend, path)
    assert "3 subagent sessions" in out
    _check_subagents(backend, _session_of(path))


def test_subagent_files_are_child_sessions(backend: Backend, tmp_path: Path) -> None:
    src = FIXTURES / "claude-subagents"
    copy = tmp_path / "project"
    shutil.copytree(src, copy)
    path = copy / f"{SUBAGENT_SESSION}.jsonl"
    out = _import(backend, path)
    assert "3 subagent sessions" in out
    _check_subagents(backend, SUBAGENT_SESSION)
    again = _import(backend, path)
    assert "nothing new to import" in again


def test_a_codex_rollout_imports_with_tool_calls_and_no_encrypted_reasoning(
    backend: Backend,
) -> None:
    path = FIXTURES / "codex-rollout.jsonl"
    sid = _session_of(path)
    out = _import(backend, path)
    assert "(codex)" in out and "1 compactions as folds" in out
    assert "event_msg 4" in out and "future_kind 1" in out
    shown = _show(backend, sid)
    assert shown[0] == "[0] summary of 9: The user listed files; c.py was added."
    assert shown[1:] == [
        "[1] user: Now run it",
        '[2] assistant: calls shell({"command":["python","c.py"]})',
        "[3] tool: result: 1",
        "[4] assistant: It prints 1.",
    ]
    cks = [r["checkpoint"] for r in _log(backend, sid) if r["type"] == "checkpoint"]
    before = "\n".join(_show(backend, sid, "--at", str(cks[1])))
    assert '[3] assistant: calls shell({"command":["ls","-la"]})' in before
    assert "[2] reasoning: **Listing files** with ls" in before
    assert "calls apply_patch(*** Begin Patch" in before
    assert "[6] tool: result: Success." in before
    for args in (
        ["session", "show", sid, "--at", str(cks[1]), "--json"],
        ["debug", "expand", f"{sid}@latest", "--json"],
    ):
        r = backend.cli(*args)
        assert r.code == 0 and "SECRET" not in r.out and "gAAAA" not in r.out


def test_sidechains_naming_no_agent_are_one_child_per_chain(
    backend: Backend, tmp_path: Path
) -> None:
    """Older Claude Code wrote sidechain records without ``agentId``: each chain (from its
    root record) is one subagent."""
    from tests.fixtures.transcripts.build import Claude

    cc = Claude(seed="old")
    cc.user("Look at two things")
    first = cc.tool_use("Task", {"prompt": "Look at A"}, "toolu_a")
    for prompt, answer in (("Look at A", "A is fine"), ("Look at B", "B is broken")):
        cc.user(prompt, None, isSidechain=True)
        cc.text(answer, isSidechain=True)
    cc.last = first
    cc.result("toolu_a", "A is fine")
    cc.text("A is fine; B is broken.")
    path = cc.write(tmp_path / "old.jsonl")
    out = _import(backend, path)
    assert "2 subagent sessions" in out
    rows = json.loads(backend.cli("session", "list", "--json").out)
    children = [r for r in rows if r["parent"] == cc.session]
    assert len(children) == 2
    texts = sorted(_show(backend, c["session"])[1] for c in children)
    assert texts == ["[1] assistant: A is fine", "[1] assistant: B is broken"]
    assert len(_show(backend, cc.session)) == 4


def test_a_codex_rollback_is_a_backtrack(backend: Backend, tmp_path: Path) -> None:
    """Codex's ``thread_rolled_back`` (the user went back N turns) is a backtrack: the
    discarded turns' checkpoints are cut, the line continues from before them."""
    from tests.fixtures.transcripts.build import codex

    lines = codex()[:3]  # session_meta, the environment message, a turn_context

    def add(kind: str, payload: dict[str, Any]) -> None:
        lines.append({"timestamp": "2025-10-01T12:00:00.000Z", "type": kind, "payload": payload})

    def turn(question: str, answer: str) -> None:
        add("turn_context", {"cwd": "/x", "model": "gpt-5-codex"})
        for role, kind, text in (
            ("user", "input_text", question),
            ("assistant", "output_text", answer),
        ):
            add(
                "response_item",
                {"type": "message", "role": role, "content": [{"type": kind, "text": text}]},
            )

    turn("one", "1")
    turn("two", "2")
    turn("three", "3")
    add("event_msg", {"type": "thread_rolled_back", "num_turns": 2})
    turn("two again", "2 again")
    path = tmp_path / "rollout.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    sid = lines[0]["payload"]["id"]
    out = _import(backend, path)
    assert "1 rewinds as backtracks" in out, out
    shown = _show(backend, sid)
    assert shown[1:] == [
        "[1] user: one",
        "[2] assistant: 1",
        "[3] user: two again",
        "[4] assistant: 2 again",
    ]
    cut = [r for r in _log(backend, sid) if r["type"] == "checkpoint" and not r["retained"]]
    assert len(cut) == 2


def test_a_projects_folder_imports_each_transcript_as_its_tree(
    backend: Backend, tmp_path: Path
) -> None:
    """`session import FOLDER` (issue 41's many files) takes Claude Code and Codex transcripts
    through the tree importer: the subagent files beside a transcript become its children, not
    sessions of their own; a second import of the folder writes nothing new."""
    folder = tmp_path / "projects"
    shutil.copytree(FIXTURES / "claude-subagents", folder / "p1")
    shutil.copy(FIXTURES / "codex-rollout.jsonl", folder / "codex-rollout.jsonl")
    res = backend.cli("session", "import", str(folder))
    assert res.code == 0, res.err
    assert res.out.startswith("imported 2 of 2 files ("), res.out
    _check_subagents(backend, SUBAGENT_SESSION)
    codex = _session_of(FIXTURES / "codex-rollout.jsonl")
    assert _show(backend, codex)[1] == "[1] user: Now run it"
    before = json.loads(backend.cli("session", "list", "--json").out)
    again = backend.cli("session", "import", str(folder))
    assert again.code == 0, again.err
    assert json.loads(backend.cli("session", "list", "--json").out) == before


def test_a_prefix_shared_with_the_subagent_sessions_names_the_session(tmp_path: Path) -> None:
    """`<session>.agent-<id>` children share the session's prefix: the prefix a user reads in
    `session lineage` names the session (it was ambiguous), a longer one the child."""
    from tests.conftest import run_cli

    root = tmp_path / "run"
    r = run_cli(
        "--root", str(root), "session", "import", str(FIXTURES / "claude-subagents-inline.jsonl")
    )
    assert r.code == 0, r.err
    shown = run_cli("--root", str(root), "session", "show", "fce399cf")
    assert shown.code == 0 and "[8] assistant: You're welcome" in shown.out
    child = run_cli(
        "--root", str(root), "session", "show", "fce399cf-435a-57a2-9c2c-629e20147bab.agent-0f9"
    )
    assert child.code == 0 and "You're welcome" not in child.out
    logged = run_cli("--root", str(root), "debug", "log", "fce399cf")
    assert logged.code == 0, logged.err


def test_session_log_shows_a_subagent_under_the_turn_that_called_it(tmp_path: Path) -> None:
    """One import writes the subagent events after every main turn; the log still puts each
    under the checkpoint it is anchored at."""
    from tests.conftest import run_cli

    root = tmp_path / "run"
    r = run_cli(
        "--root", str(root), "session", "import", str(FIXTURES / "claude-subagents-inline.jsonl")
    )
    assert r.code == 0, r.err
    rows = json.loads(run_cli("--root", str(root), "session", "log", "fce399cf", "--json").out)
    subagents = [i for i, row in enumerate(rows) if row["type"] == "subagent"]
    assert len(subagents) == 2
    for i in subagents:
        before = [row for row in rows[:i] if row["type"] == "checkpoint"]
        assert before[-1]["checkpoint"] == rows[i]["checkpoint"]
    assert rows[-1]["type"] == "checkpoint"  # the last turn comes after them
