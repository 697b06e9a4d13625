"""The policy a user writes is the policy that runs, through the real `alpstore` command.

Each test opens sessions with `session open --manifest`, drives them with `session append`
(with and without `--event`) in separate processes, and checks what was written three ways:
`session log`, `alpstore sql`, and the checkpoint files on disk.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import Result, run_cli


def manifest(folder: Path, checkpoint: dict[str, Any], name: str = "agent") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "agent.json"
    doc = {
        "apiVersion": "mas/v1",
        "kind": "Agent",
        "metadata": {"name": name},
        "spec": {"checkpoint": checkpoint},
    }
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def ok(result: Result) -> Result:
    assert result.code == 0, result.err
    return result


def open_session(cli: Any, path: Path, *extra: str) -> dict[str, Any]:
    return json.loads(ok(cli("session", "open", "--manifest", str(path), "--json", *extra)).out)


def triggers(cli: Any, session: str) -> list[str]:
    rows = json.loads(
        ok(
            cli(
                "sql",
                "select c.trigger from checkpoints c join sessions s on s.id = c.session_id "
                f"where s.uuid = '{session}' and not c.abandoned order by c.seq",
                "--json",
            )
        ).out
    )
    return [r["trigger"] for r in rows]


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.json")) if folder.is_dir() else []


def test_mode_none_in_memory_every_turn(cli: Any, tmp_path: Path) -> None:
    sessions = {}
    for mode in ("none", "in_memory", "every_turn"):
        sessions[mode] = open_session(cli, manifest(tmp_path / mode, {"mode": mode}))["session"]
        for i in range(2):
            out = ok(
                cli("session", "append", sessions[mode], "--role", "user", "--content", f"q{i}")
            )
            if mode == "in_memory":
                assert "checkpoint in memory at turn" in out.out
    # none: nothing automatic; an explicit checkpoint still works (and writes no file)
    assert triggers(cli, sessions["none"]) == []
    ok(cli("session", "checkpoint", sessions["none"]))
    assert triggers(cli, sessions["none"]) == ["manual"]
    # in_memory: the checkpoints lived in the processes that took them, none reached the archive
    assert triggers(cli, sessions["in_memory"]) == []
    # every_turn: one per completed turn, each with its deep file beside the manifest (CK-6)
    assert triggers(cli, sessions["every_turn"]) == ["every_turn", "every_turn"]
    log = json.loads(ok(cli("session", "log", sessions["every_turn"], "--json")).out)
    assert [(r["turn"], r["trigger"]) for r in log] == [(1, "every_turn"), (2, "every_turn")]
    sid = sessions["every_turn"]
    assert files(tmp_path / "every_turn" / ".mas" / "checkpoints") == [
        f"{sid}-turn-0001.json",
        f"{sid}-turn-0002.json",
    ]
    for mode in ("none", "in_memory"):
        assert not (tmp_path / mode / ".mas").exists()
    # a later process shows (and applies) the recorded policy
    shown = ok(cli("session", "show", sid)).out.splitlines()
    assert shown[0].startswith("policy: mode every_turn, storage disk")
    assert shown[1:] == ["[0] user: q0", "[1] user: q1"]
    recorded = json.loads(ok(cli("session", "show", sid, "--policy", "--json")).out)
    assert recorded["mode"] == "every_turn" and recorded["checkpoint_dir"] == str(
        (tmp_path / "every_turn" / ".mas" / "checkpoints").absolute()
    )


def test_on_event_triggers_and_every_n_turns(cli: Any, tmp_path: Path) -> None:
    policy = {
        "mode": "on_event",
        "triggers": [
            "after_llm_call",
            "after_tool_call",
            "before_destructive_tool",
            "every_n_turns",
        ],
        "every_n_turns": 2,
    }
    sid = open_session(cli, manifest(tmp_path / "all", policy))["session"]
    steps: list[tuple[str, ...]] = [
        ("--role", "user", "--content", "q1"),  # turn 1 completed: not a multiple of 2
        ("--role", "assistant", "--content", "calling", "--event", "after_llm_call"),
        ("--role", "tool", "--content", "result", "--event", "after_tool_call"),
        ("--event", "before_destructive_tool"),  # no messages: the event alone
        ("--role", "user", "--content", "q2"),  # turn 2: every_n_turns
        ("--role", "user", "--content", "q3"),
        ("--role", "user", "--content", "q4"),  # turn 4: every_n_turns
    ]
    for step in steps:
        ok(cli("session", "append", sid, *step))
    expected = [
        "after_llm_call",
        "after_tool_call",
        "before_destructive_tool",
        "every_n_turns",
        "every_n_turns",
    ]
    assert triggers(cli, sid) == expected
    log = json.loads(ok(cli("session", "log", sid, "--json")).out)
    assert [(r["turn"], r["trigger"], r["head_length"]) for r in log] == [
        (1, "after_llm_call", 2),
        (1, "after_tool_call", 3),
        (1, "before_destructive_tool", 3),
        (2, "every_n_turns", 4),
        (4, "every_n_turns", 6),
    ]
    assert files(tmp_path / "all" / ".mas" / "checkpoints") == [
        f"{sid}-turn-0001-after_llm_call-1.json",
        f"{sid}-turn-0001-after_tool_call-2.json",
        f"{sid}-turn-0001-before_destructive_tool-3.json",
        f"{sid}-turn-0002.json",
        f"{sid}-turn-0004.json",
    ]
    # a trigger the policy does not list checkpoints nothing
    only = open_session(
        cli, manifest(tmp_path / "tool", {"mode": "on_event", "triggers": ["after_tool_call"]})
    )["session"]
    quiet = ok(
        cli(
            "session",
            "append",
            only,
            "--role",
            "assistant",
            "--content",
            "x",
            "--event",
            "after_llm_call",
        )
    )
    assert "checkpoint" not in quiet.out
    ok(
        cli(
            "session",
            "append",
            only,
            "--role",
            "tool",
            "--content",
            "y",
            "--event",
            "after_tool_call",
        )
    )
    assert triggers(cli, only) == ["after_tool_call"]
    bad = cli("session", "append", only, "--event", "after_lunch")
    assert bad.code == 2 and "after_lunch" in bad.err and "Traceback" not in bad.err


def test_retention_and_storage_kinds(cli: Any, tmp_path: Path) -> None:
    hybrid = manifest(
        tmp_path / "hybrid",
        {
            "mode": "every_turn",
            "storage": {"kind": "hybrid", "path": "cks"},
            "retention": {"mode": "last_n", "n": 2},
        },
    )
    memory = manifest(tmp_path / "memory", {"mode": "every_turn", "storage": "memory"})
    disk = manifest(tmp_path / "disk", {"mode": "every_turn", "storage": "disk"})
    override = tmp_path / "elsewhere"
    sids = {
        "hybrid": open_session(cli, hybrid)["session"],
        "memory": open_session(cli, memory)["session"],
        "disk": open_session(cli, disk, "--checkpoint-dir", str(override))["session"],
    }
    for i in range(4):
        ok(cli("session", "append", sids["hybrid"], "--role", "user", "--content", f"h{i}"))
    for kind in ("memory", "disk"):
        ok(cli("session", "append", sids[kind], "--role", "user", "--content", "m"))
    # retention last_n 2: rows and files of this session pruned as they were written
    counts = json.loads(
        ok(
            cli(
                "sql",
                "select s.uuid, count(c.id) as n from sessions s left join checkpoints c "
                "on c.session_id = s.id group by s.uuid",
                "--json",
            )
        ).out
    )
    by_session = {r["uuid"]: r["n"] for r in counts}
    assert by_session[sids["hybrid"]] == 2
    assert by_session[sids["memory"]] == 0
    assert by_session[sids["disk"]] == 1
    log = json.loads(ok(cli("session", "log", sids["hybrid"], "--json")).out)
    assert [r["turn"] for r in log] == [3, 4]
    hid = sids["hybrid"]
    assert files(tmp_path / "hybrid" / "cks") == [f"{hid}-turn-0003.json", f"{hid}-turn-0004.json"]
    assert not (tmp_path / "memory" / ".mas").exists()
    # --checkpoint-dir overrides the default directory (CK-6), and is recorded
    assert files(override) == [f"{sids['disk']}-turn-0001.json"]
    assert not (tmp_path / "disk" / ".mas").exists()


def test_checkpoint_save_is_what_auto_resume_loads(
    cli: Any, tmp_path: Path, run_root: Path
) -> None:
    path = manifest(
        tmp_path / "agent", {"mode": "none", "storage": "disk", "auto_resume_latest": True}
    )
    first = open_session(cli, path)
    sid = first["session"]
    assert first["resumed_from"] is None
    for i in range(3):
        ok(cli("session", "append", sid, "--role", "user", "--content", f"q{i}"))
    assert triggers(cli, sid) == []  # mode none: only what is asked for
    saved = Path(ok(cli("checkpoint", "save", sid)).out.strip())
    folder = tmp_path / "agent" / ".mas" / "checkpoints"
    assert saved == (folder / f"{sid}-turn-0003.json").resolve()
    ok(cli("session", "append", sid, "--role", "user", "--content", "after the save"))
    # a new process with auto_resume_latest resumes that save: same id, history as saved
    again = ok(cli("session", "open", "--manifest", str(path)))
    assert again.out.strip() == f"resumed session {sid} from {saved}"
    shown = ok(cli("session", "show", sid, "--json")).out
    assert [e["value"]["content"] for e in json.loads(shown)] == ["q0", "q1", "q2"]
    # and on another machine (an empty run root) the same file rebuilds the session
    other = tmp_path / "other-root"
    other.mkdir()
    moved = run_cli("--root", str(other), "session", "open", "--manifest", str(path), "--json")
    report = json.loads(ok(moved).out)
    assert report["session"] == sid and report["resumed_from"] == str(saved)


def test_session_new_with_a_manifest_runs_its_policy(cli: Any, tmp_path: Path) -> None:
    """`session new --manifest` (the help's own example) records the manifest's policy as
    `session open` does, and never resumes: the same manifest twice gives two sessions."""
    path = manifest(tmp_path / "new", {"mode": "every_turn", "auto_resume_latest": True})
    first = ok(cli("session", "new", "--manifest", str(path), "--name", "made")).out.strip()
    for i in range(2):
        ok(cli("session", "append", first, "--role", "user", "--content", f"q{i}"))
    assert triggers(cli, first) == ["every_turn", "every_turn"]
    assert "every_turn" in ok(cli("session", "show", first, "--policy")).out
    assert files(tmp_path / "new" / ".mas" / "checkpoints") == [
        f"{first}-turn-0001.json",
        f"{first}-turn-0002.json",
    ]
    second = ok(cli("session", "new", "--manifest", str(path), "--id", "fixed-id")).out.strip()
    assert second == "fixed-id" != first
    assert triggers(cli, second) == []


def test_session_new_refuses_an_invalid_policy_and_a_second_retention(
    cli: Any, tmp_path: Path
) -> None:
    bad = manifest(tmp_path / "bad", {"mode": "every_turn", "every_n_turns": "often"})
    refused = cli("session", "new", "--manifest", str(bad), "--name", "bad")
    assert refused.code == 8 and "every_n_turns" in refused.err, refused.err
    assert len(refused.err.strip().splitlines()) == 1 and "Traceback" not in refused.err
    good = manifest(tmp_path / "good", {"mode": "every_turn"})
    both = cli("session", "new", "--manifest", str(good), "--retention", "single")
    assert both.code == 2 and "--retention" in both.err, both.err
    listed = cli("session", "list", "--json")  # nothing made: no archive, or an empty one
    assert listed.code == 4 or json.loads(listed.out) == [], listed.err
