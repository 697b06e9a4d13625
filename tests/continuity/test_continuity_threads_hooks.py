"""Thread settle (deterministic projection, rev + 1) and the Claude Code settings.json merge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from alpstore.continuity.hooks import (
    hook_entries,
    install,
    session_start_output,
    session_start_source,
    settings_path,
    uninstall,
)
from alpstore.continuity.paths import ExecutionPaths
from alpstore.continuity.pins import add_pin, prepare
from alpstore.continuity.threads import latest_pins, revisions, settle
from alpstore.errors import ContinuityError, InputError, ValidationFinding


def test_settle_is_deterministic_and_increments_rev(tmp_path: Path) -> None:
    home = tmp_path / "alp"
    paths = ExecutionPaths.of(home, "exec_a")
    prepare(paths, "ph", task="Build the thing")
    add_pin(paths, "decision", "Use WAL")
    first = settle(home, "exec_a", "t1")
    second = settle(home, "exec_a", "t1")
    assert (first.rev, second.rev) == (1, 2)
    assert first.path == home / "threads" / "t1" / "context" / "1.json"
    assert first.path.read_bytes() == second.path.read_bytes()
    doc = json.loads(first.path.read_text())
    assert doc["objective"] == "Build the thing"
    assert [p["text"] for p in doc["decisions"]] == ["Use WAL"]
    assert revisions(home, "t1") == [1, 2]


def test_next_root_is_seeded_from_the_latest_projection(tmp_path: Path) -> None:
    home = tmp_path / "alp"
    one = ExecutionPaths.of(home, "exec_one")
    prepare(one, "ph", task="Turn one")
    pin = add_pin(one, "open-item", "Blocker: flaky test")
    settle(home, "exec_one", "th")
    two = ExecutionPaths.of(home, "exec_two")
    checkpoint, _ = prepare(two, "ph", task="Turn two", seed=latest_pins(home, "th"))
    assert checkpoint.objective == "Turn two"
    assert checkpoint.pins("openItems") == (pin,)


def test_settle_refuses_tampered_or_missing(tmp_path: Path) -> None:
    home = tmp_path / "alp"
    with pytest.raises(ContinuityError, match="no checkpoint"):
        settle(home, "exec_none", "th")
    paths = ExecutionPaths.of(home, "exec_a")
    add_pin(paths, "decision", "x")
    paths.checkpoint.write_text(paths.checkpoint.read_text().replace('"x"', '"y"'))
    with pytest.raises(ValidationFinding):
        settle(home, "exec_a", "th")
    assert revisions(home, "th") == []
    with pytest.raises(ContinuityError, match="thread id"):
        settle(home, "exec_a", "../etc")


def test_corrupt_projection_refused_for_seeding(tmp_path: Path) -> None:
    home = tmp_path / "alp"
    folder = home / "threads" / "th" / "context"
    folder.mkdir(parents=True)
    (folder / "1.json").write_text("{not json")
    with pytest.raises(ContinuityError, match="unreadable"):
        latest_pins(home, "th")


def test_session_start_payload() -> None:
    assert session_start_source(b'{"source":"compact","session_id":"s"}') == "compact"
    assert session_start_source(b"garbage") is None
    assert session_start_source(b"[]") is None
    assert session_start_output("x") == {
        "hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "x"}
    }


USER_SETTINGS = {
    "model": "opus",
    "hooks": {
        "SessionStart": [
            {"matcher": "startup", "hooks": [{"type": "command", "command": "echo hi"}]}
        ],
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "guard"}]}],
    },
}


@pytest.mark.parametrize("bridge", [False, True])
def test_install_merges_and_uninstall_restores(tmp_path: Path, bridge: bool) -> None:
    path = settings_path(tmp_path)
    path.parent.mkdir()
    original = json.dumps(USER_SETTINGS, indent=2) + "\n"
    path.write_text(original)
    entries = hook_entries("alpstore", bridge=bridge)
    added = install(path, entries)
    assert len(added) == (4 if bridge else 2)
    doc = json.loads(path.read_text())
    assert (
        doc["model"] == "opus"
        and doc["hooks"]["PreToolUse"] == USER_SETTINGS["hooks"]["PreToolUse"]
    )
    starts = doc["hooks"]["SessionStart"]
    assert starts[0] == USER_SETTINGS["hooks"]["SessionStart"][0]
    assert {
        "matcher": "compact",
        "hooks": [{"type": "command", "command": "alpstore hook session-start"}],
    } in starts
    assert ("PreCompact" in doc["hooks"]) is bridge and ("PostCompact" in doc["hooks"]) is bridge
    assert install(path, entries) == []  # idempotent
    assert uninstall(path, hook_entries("alpstore", bridge=True)) == len(added)
    assert path.read_text() == original


def test_install_into_a_missing_file_and_uninstall_leaves_empty_object(tmp_path: Path) -> None:
    path = settings_path(tmp_path)
    install(path, hook_entries("alpstore", bridge=True))
    assert uninstall(path, hook_entries("alpstore", bridge=True)) == 4
    assert json.loads(path.read_text()) == {}


def test_uninstall_keeps_user_commands_in_a_shared_group(tmp_path: Path) -> None:
    path = settings_path(tmp_path)
    path.parent.mkdir()
    mine = {"type": "command", "command": "alpstore hook session-start"}
    theirs = {"type": "command", "command": "notify"}
    path.write_text(
        json.dumps({"hooks": {"SessionStart": [{"matcher": "compact", "hooks": [mine, theirs]}]}})
    )
    assert uninstall(path, hook_entries("alpstore", bridge=False)) == 1
    assert json.loads(path.read_text()) == {
        "hooks": {"SessionStart": [{"matcher": "compact", "hooks": [theirs]}]}
    }


@pytest.mark.parametrize("content", ["{not json", "[]", '{"hooks": []}', '{"hooks": {"X": {}}}'])
def test_malformed_settings_left_untouched(tmp_path: Path, content: str) -> None:
    path = settings_path(tmp_path)
    path.parent.mkdir()
    path.write_text(content)
    with pytest.raises(InputError):
        install(path, hook_entries("alpstore", bridge=True))
    with pytest.raises(InputError):
        uninstall(path, hook_entries("alpstore", bridge=True))
    assert path.read_text() == content
