"""Deep export and import between a checkpoint file and the archive (AR-1…AR-3, DC-4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from alpstore.errors import CheckpointFileError, UsageError
from alpstore.portable.checking import plan_import
from alpstore.portable.deep import (
    export_snapshot,
    snapshot_of_checkpoint,
    snapshot_of_head,
)
from alpstore.portable.files import load_checkpoint_file
from alpstore.portable.importing import import_document
from alpstore.store import Store
from tests.backend_pass import database_env_for, root_of_cli_args
from tests.conftest import run_cli

UPSTREAM_SCHEMA = Path(__file__).parent.parent / "fixtures" / "upstream" / "checkpoint.schema.yaml"


def upstream_valid(doc: dict[str, Any]) -> None:
    schema = yaml.safe_load(UPSTREAM_SCHEMA.read_text())
    jsonschema.Draft7Validator(schema).validate(doc)


def build_session(root: Path, sid: str = "orig", *, odd: bool = True) -> None:
    """A session with a compaction (fold) and a nested one, non-object values, unicode."""
    with Store.open(root) as st:
        s = st.create_session(
            session_id=sid,
            manifest={
                "apiVersion": "mas/v1",
                "kind": "Agent",
                "metadata": {"name": "coder"},
                "spec": {"checkpoint": {"mode": "every_turn"}, "model": {"api_key": "${env:KEY}"}},
            },
        )
        s.append(
            [
                {"role": "user", "content": f"question {i} — é"}
                if i % 2 == 0
                else {"role": "assistant", "content": f"answer {i}"}
                for i in range(12)
            ]
        )
        s.checkpoint(kernel={"q": {"step": 1}, "run": {"id": "r"}}, working_memory={"k": [1]})
        s.fold(0, 4, "first four")
        s.fold(0, 3, "summary of summary")  # covers the first summary
        tail: list[Any] = [
            {"role": "user", "content": "after fold"},
            {"role": "assistant", "content": "x", "_alpstore": "user data"},
        ]
        if odd:  # values that are not message objects
            tail[1:1] = ["a bare string", [1, 2]]
        s.append(tail)
        s.checkpoint(
            kernel={"q": {"step": 2}, "run": {}}, working_memory={"k": [2]}, label="release"
        )


def test_exported_files_validate_and_round_trip(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    build_session(a)
    with Store.open(a) as sa:
        s = sa.get_session("orig")
        cks = s.checkpoints()
        docs = [export_snapshot(sa, snapshot_of_checkpoint(sa, ck)) for ck in cks]
        docs.append(export_snapshot(sa, snapshot_of_head(sa, s)))
        history = [(e.hex, e.kind, e.value) for e in s.history()]
        covered_a = {e.hex for e in sa.expand(s.history()[0])}
    for d in docs:
        upstream_valid(d)
    latest = docs[1]
    assert latest["label"] == "release"
    assert latest["manifest"]["content"]["metadata"]["name"] == "coder"
    assert latest["working_memory"][0]["agent_id"] == "coder"
    with Store.open(b) as sb:
        result = import_document(sb, latest, source_name="orig-release.json")
        got = [(e.hex, e.kind, e.value) for e in result.session.history()]
        assert got == history and result.session.uuid == "orig"
        kernel, wm = sb.checkpoint_state(result.checkpoint)
        assert kernel == {"q": {"step": 2}, "run": {}} and wm == {"k": [2]}
        # rewinding across the compaction works here: the summary expands to its leaves
        top = result.session.history()[0]
        assert top.kind == "summary"
        assert {e.hex for e in sb.expand(top)} == covered_a
        inner = next(e for e in sb.expand(top) if e.kind == "summary")
        assert [e.value["content"] for e in sb.expand(inner)][:2] == ["question 0 — é", "answer 1"]
        # importing the same file again is idempotent; a fork gets a new id and a parent
        assert import_document(sb, latest, source_name="x").existing
        forked = import_document(
            sb, latest, source_name="orig-release.json", fork=True, session_id="child"
        )
        assert forked.new_blobs == 0  # deduplicated against the archive
        again = export_snapshot(sb, snapshot_of_checkpoint(sb, forked.checkpoint))
        assert again["lineage"]["parent_session_id"] == "orig"
        assert again["lineage"]["forked_from_checkpoint"] == "orig-release.json"
        assert again["lineage"]["root_session_id"] == "orig"
        # re-export of the import equals the original (apart from archive-local details)
        re = export_snapshot(sb, snapshot_of_checkpoint(sb, result.checkpoint))

        def strip(d):
            return json.dumps(
                {
                    **d,
                    "working_memory": [
                        {**w, "conversation_chunks": None} for w in d["working_memory"]
                    ],
                },
                sort_keys=True,
            )

        assert strip(re) == strip(latest)


def test_tampered_digest_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    build_session(tmp_path / "a")
    with Store.open(tmp_path / "a") as sa:
        doc = export_snapshot(sa, snapshot_of_head(sa, sa.get_session("orig")))
    msgs = doc["working_memory"][0]["committed_messages"]
    original = msgs[1]["content"]
    msgs[1]["content"] = "edited after export"
    with Store.open(tmp_path / "b") as sb:
        with pytest.raises(CheckpointFileError, match=r"committed_messages\[1\]: carried digest"):
            import_document(sb, doc, source_name="t")
        assert sb.list_sessions() == []
    covered = doc["working_memory"][0]["conversation_chunks"]["alpstore"]["covered"]
    msgs[1]["content"] = original
    del covered[0]
    with pytest.raises(CheckpointFileError, match="does not carry"):
        plan_import(doc, where="t")


def test_existing_session_with_other_history(tmp_path: Path) -> None:
    build_session(tmp_path / "a")
    with Store.open(tmp_path / "a") as sa:
        doc = export_snapshot(sa, snapshot_of_head(sa, sa.get_session("orig")))
    with Store.open(tmp_path / "b") as sb:
        sb.create_session(session_id="orig").append([{"role": "user", "content": "other"}])
        with pytest.raises(UsageError, match="already exists in this archive with a different"):
            import_document(sb, doc, source_name="t")


def test_export_import_in_a_second_process_with_another_root(tmp_path: Path) -> None:
    """The Done-when check: export on root A, import on root B (another process, no manifest
    file anywhere), `session show` prints the same history."""
    a, b = tmp_path / "a", tmp_path / "b"
    build_session(a, odd=False)  # `session show` text mode expects message objects
    out = tmp_path / "transfer" / "orig.json.zst"
    out.parent.mkdir()
    res = run_cli("--root", str(a), "checkpoint", "export", "orig@latest", "-o", str(out))
    assert res.code == 0, res.err
    upstream_valid(load_checkpoint_file(out))
    res = run_cli("--root", str(b), "checkpoint", "import", str(out), cwd=tmp_path / "transfer")
    assert res.code == 0, res.err
    assert "imported session orig: 9 entries" in res.out
    show_a = run_cli("--root", str(a), "session", "show", "orig", "--json")
    show_b = run_cli("--root", str(b), "session", "show", "orig", "--json")
    assert show_a.code == 0 and show_b.code == 0
    assert json.loads(show_a.out) == json.loads(show_b.out)
    text_a = run_cli("--root", str(a), "session", "show", "orig")
    text_b = run_cli("--root", str(b), "session", "show", "orig")
    assert text_a.out == text_b.out and text_a.out.count("\n") == 9


def test_save_writes_a_deep_file_and_a_row(tmp_path: Path) -> None:
    root = tmp_path / "run"
    build_session(root)
    res = run_cli("--root", str(root), "checkpoint", "save", "orig")
    assert res.code == 0, res.err
    path = Path(res.out.strip())
    assert path.parent == (root / "checkpoints").resolve() or path.parent == root / "checkpoints"
    assert path.name.startswith("orig-turn-")
    upstream_valid(load_checkpoint_file(path))
    listed = run_cli("--root", str(root), "checkpoint", "list", "--archive")
    assert listed.out.splitlines()[0] == path.name
    assert "archive:orig@" in listed.out
    d = tmp_path / "elsewhere"
    res = run_cli(
        "--root",
        str(root),
        "checkpoint",
        "save",
        "orig",
        "--checkpoint-dir",
        str(d),
        "--label",
        "mine",
        "--zst",
    )
    assert res.code == 0 and Path(res.out.strip()).name == "orig-mine.json.zst"


def test_archive_refs_show_fork_resume(tmp_path: Path) -> None:
    root = tmp_path / "run"
    build_session(root)
    r = ["--root", str(root)]
    shown = run_cli(*r, "checkpoint", "show", "archive:orig@latest")
    assert shown.code == 0 and json.loads(shown.out)["label"] == "release"
    forked = run_cli(*r, "checkpoint", "fork", "archive:orig@latest", "--session-id", "kid")
    assert forked.code == 0 and forked.out.strip() == "kid"
    resumed = run_cli(*r, "checkpoint", "resume", "archive:orig@latest")
    assert resumed.code == 0 and "resumed session orig" in resumed.out


def run_open(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`alpstore session open …`, registering the command if the session group lacks it."""
    script = (
        "import sys\n"
        "from alpstore.cli import session as s\n"
        "from alpstore.cli.session_open import open_command\n"
        "if not any(c.name == 'open' for c in s.app.registered_commands):\n"
        "    s.app.command('open')(open_command)\n"
        f"sys.argv = ['alpstore', *{list(args)!r}]\n"
        "from alpstore.cli.main import main\n"
        "main()\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=cwd,
        env={**os.environ, **database_env_for(root_of_cli_args(args, cwd))},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_session_open_auto_resume_latest(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "agent.yaml").write_text("kind: Agent\nmetadata: {name: coder}\nspec: {}\n")
    root = str(tmp_path / "run")
    args = [
        "--root",
        root,
        "session",
        "open",
        "--manifest",
        "agent.yaml",
        "--overlay",
        "openclaw",
        "--json",
    ]
    first = run_open(*args, cwd=proj)
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    assert report["resumed_from"] is None
    assert report["checkpoint_dir"] == str(proj / ".mas" / "checkpoints")
    assert report["policy"]["auto_resume_latest"] and report["policy"]["mode"] == "on_event"
    sid = report["session"]
    with Store.open(Path(root)) as st:
        st.get_session(sid).append([{"role": "user", "content": "hi"}])
    saved = run_cli(
        "--root",
        root,
        "checkpoint",
        "save",
        sid,
        "--checkpoint-dir",
        str(proj / ".mas" / "checkpoints"),
    )
    assert saved.code == 0, saved.err
    # a new run root (another machine) resumes from the file
    root2 = str(tmp_path / "run2")
    second = run_open("--root", root2, *args[2:-1], cwd=proj)
    assert second.returncode == 0, second.stderr
    assert second.stdout.startswith(f"resumed session {sid} from ")
    # without the overlay the manifest hash differs, and auto-resume is off anyway
    plain = run_open("--root", root2, "session", "open", "--manifest", "agent.yaml", cwd=proj)
    assert plain.returncode == 0 and plain.stdout.startswith("started session ")
    bad = run_open(
        "--root",
        root2,
        "session",
        "open",
        "--manifest",
        "agent.yaml",
        "--overlay",
        "nope",
        cwd=proj,
    )
    assert bad.returncode == 8 and "overlay 'nope'" in bad.stderr


@given(
    st.lists(
        st.one_of(
            st.dictionaries(st.text(min_size=1, max_size=5), st.text(max_size=10), max_size=3),
            st.text(max_size=10),
            st.integers(),
        ),
        max_size=8,
    )
)
def test_import_of_an_export_is_the_same_history(
    tmp_path_factory: pytest.TempPathFactory, messages: list[Any]
) -> None:
    base = tmp_path_factory.mktemp("prop")
    with Store.open(base / "a") as sa, Store.open(base / "b") as sb:
        s = sa.create_session(session_id="p")
        if messages:
            s.append(messages)
        if len(messages) >= 2:
            s.fold(0, 2, "sum")
        doc = export_snapshot(sa, snapshot_of_head(sa, s))
        upstream_valid(doc)
        r = import_document(sb, doc, source_name="p.json")
        assert [e.digest for e in r.session.history()] == [e.digest for e in s.history()]
