"""What the commands print, as a newcomer reads it: sentences, honest flags and hints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from alpstore.store import Store
from tests.backend_pass import sqlite_only


@pytest.fixture
def demo(run_root: Path) -> Path:
    """A session "demo" with 4 turns of two messages each."""
    with Store.open(run_root) as store:
        s = store.create_session(name="demo")
        for i in range(4):
            s.commit_turn(
                [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}]
            )
    return run_root


def test_fold_fork_export_say_what_they_did(cli: Any, demo: Path, tmp_path: Path) -> None:
    fold = cli("session", "fold", "demo", "0", "2", "--summary", "first turn")
    assert fold.code == 0, fold.err
    assert fold.out.startswith("folded entries 0..1 of demo into summary ")
    assert "the head now holds 7 entries" in fold.out
    quiet = cli("session", "fold", "demo", "1", "3", "--summary", "more", "--quiet")
    assert len(quiet.out.strip()) == 64
    fork = cli("session", "fork", "demo@2", "--name", "exp")
    assert fork.code == 0, fork.err
    assert fork.out.startswith("forked session ") and "(exp) from checkpoint" in fork.out
    assert "turn 2, 4 entries" in fork.out
    bare = cli("session", "fork", "demo@2", "-q", "--id", "kid")
    assert bare.out == "kid\n"
    as_json = json.loads(cli("session", "fork", "demo@1", "--json").out)
    assert as_json["turn"] == 1 and as_json["head_length"] == 2
    out = tmp_path / "demo.json"
    export = cli("checkpoint", "export", "demo@latest", "-o", str(out))
    assert export.code == 0, export.err
    assert export.out.startswith(f"wrote {out}: deep checkpoint of session ")
    again = cli("checkpoint", "export", "demo@latest", "-o", str(out), "--force", "--quiet")
    assert again.out == f"{out}\n"


def test_export_refuses_a_missing_folder(cli: Any, demo: Path, tmp_path: Path) -> None:
    target = tmp_path / "nonexistent" / "dir" / "x.json"
    result = cli("checkpoint", "export", "demo", "-o", str(target))
    assert result.code == 2, result.err
    assert "does not exist" in result.err
    assert not (tmp_path / "nonexistent").exists()


def test_log_all_and_no_all(cli: Any, demo: Path) -> None:
    assert cli("session", "backtrack", "demo", "1").code == 0
    every = cli("session", "log", "demo")
    retained = cli("session", "log", "demo", "--no-all")
    assert retained.code == 0, retained.err
    assert "cut by backtrack" in every.out and "cut by backtrack" not in retained.out
    assert "[default: True]" not in cli("session", "log", "--help").out


def test_checkpoint_list_lists_files_unless_asked_for_the_archive(
    cli: Any, demo: Path, tmp_path: Path
) -> None:
    folder = demo / "checkpoints"
    folder.mkdir()
    assert cli("checkpoint", "export", "demo", "-o", str(folder / "a.json"), "-q").code == 0
    listed = cli("checkpoint", "list")
    assert listed.out == "a.json\n", listed.out
    both = cli("checkpoint", "list", "--archive").out.splitlines()
    assert both[0] == "a.json" and len(both) == 5 and both[1].startswith("archive:")
    assert "see below" not in cli("checkpoint", "list", "--help").out


def test_resume_after_backtrack_names_the_dropped_steer(cli: Any, demo: Path) -> None:
    assert cli("session", "backtrack", "demo", "1", "Ask first.").code == 0
    resumed = cli("session", "resume", "demo")
    assert resumed.code == 0, resumed.err
    assert "/steer Ask first." in resumed.err and "`session append` it again" in resumed.err


def test_damaged_archive_hint_does_not_send_to_verify(cli: Any, run_root: Path) -> None:
    sqlite_only("damages the SQLite file")
    path = run_root / "traces" / "archive" / "archive.db"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a database at all " * 300)
    for args in (("session", "list"), ("archive", "verify")):
        result = cli(*args)
        assert result.code == 5, result.err
        hint = [line for line in result.err.splitlines() if line.startswith("alpstore: hint:")]
        assert hint and "cannot help" in hint[0] and ".recover" in hint[0]


def test_samples_prints_the_shipped_conversation(cli: Any, tmp_path: Path) -> None:
    from alpstore.samples import sample_path

    result = cli("samples", "conversation")
    assert result.code == 0, result.err
    assert result.out.encode() == sample_path().read_bytes()
    generated = cli("samples", "conversation", "--turns", "3")
    assert sum(1 for line in generated.out.splitlines() if '"user"' in line) == 3


def test_session_import_of_a_deep_file_points_to_checkpoint_import(
    cli: Any, demo: Path, tmp_path: Path
) -> None:
    out = tmp_path / "demo.json"
    assert cli("checkpoint", "export", "demo@latest", "-o", str(out)).code == 0
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps(json.loads(out.read_text()), indent=1))
    for path in (out, pretty):
        result = cli("session", "import", str(path), "--name", "other")
        assert result.code == 3, result.err
        assert "alpstore checkpoint import" in result.err and "Traceback" not in result.err
    assert "other" not in cli("session", "list").out
