"""mas-lab checkpoint files: the upstream example, bad input, secrets (LC-1…LC-6, CK-11)."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import zstandard

from alpstore.errors import CheckpointFileError, SecretError
from alpstore.portable.files import (
    build_v1,
    checkpoint_file_name,
    contained_path,
    load_checkpoint_file,
    manifest_hash,
    validate_document,
    write_checkpoint_file,
)
from alpstore.rules.secrets import scan
from tests.conftest import run_cli

FIXTURES = Path(__file__).parent.parent / "fixtures" / "upstream"
EXAMPLE = FIXTURES / "mas-lab-checkpoint-v2.example.json"


def snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def example(tmp_path: Path) -> Path:
    d = tmp_path / "cks"
    d.mkdir()
    target = d / EXAMPLE.name
    shutil.copy(EXAMPLE, target)
    return target


def test_upstream_hash_reproduces() -> None:
    doc = json.loads(EXAMPLE.read_text())
    assert manifest_hash(doc["manifest"]["content"]) == doc["manifest"]["content_hash"]
    # non-ASCII stays unescaped: differs from the ASCII-escaped spelling
    assert manifest_hash({"n": "é"}) != manifest_hash({"n": "\\u00e9"})


def test_upstream_example_loads_shows_forks_and_resumes(example: Path, tmp_path: Path) -> None:
    assert load_checkpoint_file(example)["label"] == "example"
    listed = run_cli("checkpoint", "list", str(example.parent), "--no-archive")
    assert listed.code == 0 and listed.out == f"{example.name}\n"
    shown = run_cli("checkpoint", "show", str(example))
    assert shown.code == 0 and json.loads(shown.out) == json.loads(EXAMPLE.read_text())
    assert '\n  "version": 2' in shown.out  # pretty-printed
    out_dir = tmp_path / "X"
    forked = run_cli(
        "checkpoint", "fork", str(example), "--output-dir", str(out_dir), "--session-id", "child-1"
    )
    assert forked.code == 0, forked.err
    path = Path(forked.out.strip())
    assert path == (out_dir / "child-1-example.json").resolve()
    child = load_checkpoint_file(path)
    assert child["lineage"] == {
        **child["lineage"],
        "session_id": "child-1",
        "parent_session_id": "checkpoint-example-session",
        "forked_from_checkpoint": example.name,
        "root_session_id": "checkpoint-example-session",
    }
    assert child["manifest"] == json.loads(EXAMPLE.read_text())["manifest"]
    # default output: next to the source
    beside = run_cli("checkpoint", "fork", str(example))
    assert Path(beside.out.strip()).parent == example.parent.resolve()
    root = tmp_path / "run"
    resumed = run_cli("--root", str(root), "checkpoint", "resume", str(example))
    assert resumed.code == 0, resumed.err
    assert "resumed session checkpoint-example-session at turn 0 (example)" in resumed.out
    again = run_cli("--root", str(root), "checkpoint", "resume", str(path))
    assert "resumed session child-1" in again.out
    valid = run_cli("checkpoint", "validate", str(path))
    assert valid.code == 0 and "matches" in valid.out


def _mutated(example: Path, change: Any) -> Path:
    doc = json.loads(example.read_text())
    change(doc)
    example.write_text(json.dumps(doc))
    return example


BAD_DOCS = [
    (
        "wrong manifest hash",
        lambda d: d["manifest"].__setitem__("content_hash", "0" * 64),
        "content_hash does not match",
    ),
    (
        "edited manifest",
        lambda d: d["manifest"]["content"].__setitem__("spec", {}),
        "content_hash does not match",
    ),
    ("unknown top-level key", lambda d: d.__setitem__("extra", 1), "$: Additional properties"),
    ("missing lineage", lambda d: d.pop("lineage"), "'lineage' is a required property"),
    ("negative turn", lambda d: d.__setitem__("turn", -1), "$.turn: minimum"),
    ("bad date", lambda d: d["lineage"].__setitem__("created_at", "noon"), "$.lineage.created_at"),
    ("kernel without q", lambda d: d["kernel"].pop("q"), "$.kernel: 'q' is a required"),
    ("version 3", lambda d: d.__setitem__("version", 3), "$.version: expected 1 or 2"),
]


@pytest.mark.parametrize(("why", "change", "message"), BAD_DOCS, ids=[b[0] for b in BAD_DOCS])
def test_bad_files_are_refused_with_nothing_written(
    example: Path, tmp_path: Path, why: str, change: Any, message: str
) -> None:
    bad = _mutated(example, change)
    before = snapshot(tmp_path)
    for cmd in (
        ["checkpoint", "validate", str(bad)],
        ["checkpoint", "fork", str(bad), "--output-dir", str(tmp_path / "out")],
        ["--root", str(tmp_path / "run"), "checkpoint", "import", str(bad)],
    ):
        res = run_cli(*cmd)
        assert res.code == 10, (cmd, res.err)
        assert message in res.err and res.err.startswith("alpstore: error:")
        assert "Traceback" not in res.err
    after = snapshot(tmp_path)
    assert {k for k in after if not k.startswith("run/")} == set(before)
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_version_1_cannot_be_forked_but_resumes_with_a_manifest(tmp_path: Path) -> None:
    v1 = tmp_path / "k.json"
    v1.write_text(json.dumps(build_v1({"q": {"x": 1}, "run": {}}, label="k", turn=2)))
    res = run_cli("checkpoint", "fork", str(v1), "--output-dir", str(tmp_path / "o"))
    assert res.code == 10 and "fork needs a version 2 checkpoint" in res.err
    assert not (tmp_path / "o").exists()
    root = str(tmp_path / "run")
    res = run_cli("--root", root, "checkpoint", "resume", str(v1))
    assert res.code == 2 and "pass --manifest" in res.err
    manifest = tmp_path / "agent.yaml"
    manifest.write_text("kind: Agent\nmetadata: {name: a}\nspec: {}\n")
    res = run_cli("--root", root, "checkpoint", "resume", str(v1), "--manifest", str(manifest))
    assert res.code == 0 and "at turn 2 (k)" in res.out, res.err


def test_compressed_files_and_hostile_zstd(example: Path, tmp_path: Path) -> None:
    doc = json.loads(example.read_text())
    good = tmp_path / "s-example.json.zst"
    write_checkpoint_file(doc, good)
    assert load_checkpoint_file(good) == doc
    truncated = tmp_path / "t.json.zst"
    truncated.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2])
    bomb = tmp_path / "bomb.json.zst"
    bomb.write_bytes(zstandard.ZstdCompressor(level=19).compress(b" " * (200 * 1024 * 1024)))
    assert bomb.stat().st_size < 100_000
    # the reader streams (bounded memory; 4 GiB is the limit on both sides): 200 MB of blanks
    # is read in bounded memory and refused for what it is, not held whole
    for path, message in ((truncated, ""), (bomb, "must hold a JSON object")):
        res = run_cli("checkpoint", "validate", str(path))
        assert res.code == 10 and message in res.err, res.err


def test_a_200_mb_file_is_refused_before_parsing(tmp_path: Path) -> None:
    huge = tmp_path / "huge.json"
    with huge.open("wb") as fh:
        fh.truncate(200 * 1024 * 1024)  # sparse: no 200 MB written
    for command in ("show", "validate"):  # both stream: they stop at byte 0
        res = run_cli("checkpoint", command, str(huge))
        assert res.code == 10 and "must hold a JSON object" in res.err, (command, res)
        assert res.out == ""


def test_paths_cannot_escape_the_output_directory(example: Path, tmp_path: Path) -> None:
    for sid in ("../escape", "a/b", ".hidden", "x/../../y"):
        res = run_cli(
            "checkpoint",
            "fork",
            str(example),
            "--output-dir",
            str(tmp_path / "o"),
            "--session-id",
            sid,
        )
        assert res.code == 10 and "cannot be used in a file name" in res.err, (sid, res.err)
    assert not (tmp_path / "o").exists() and not (tmp_path / "escape-example.json").exists()
    with pytest.raises(CheckpointFileError, match="escapes the output directory"):
        contained_path(tmp_path / "o", "../x.json")
    with pytest.raises(CheckpointFileError):
        checkpoint_file_name("s", "../../etc")


def test_fork_never_overwrites(example: Path, tmp_path: Path) -> None:
    args = (
        "checkpoint",
        "fork",
        str(example),
        "--output-dir",
        str(tmp_path / "o"),
        "--session-id",
        "same",
    )
    assert run_cli(*args).code == 0
    first = (tmp_path / "o" / "same-example.json").read_bytes()
    res = run_cli(*args)
    assert res.code == 10 and "already exists" in res.err
    assert (tmp_path / "o" / "same-example.json").read_bytes() == first


# ------------------------------------------------------------------ secrets (CK-11)
SECRETS = [
    ("$.working_memory[0].turn_history[0][1]", "my key is AKIAIOSFODNN7EXAMPLE ok"),
    ("$.kernel.q.note", "-----BEGIN RSA PRIVATE KEY-----\nMIIE...\n-----END RSA PRIVATE KEY-----"),
    ("$.kernel.run.github", "ghp_" + "a" * 36),
    ("$.kernel.run.openai", "sk-" + "A1b2" * 8),
    ("$.kernel.run.anthropic", "sk-ant-api03-" + "x" * 30),
    ("$.kernel.run.slack", "xoxb-1234567890-abcdef"),
    ("$.kernel.run.jwt", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N"),
]


def _doc_with(path: str, value: str) -> dict[str, Any]:
    doc = json.loads(EXAMPLE.read_text())
    doc["working_memory"] = [
        {
            "agent_id": "a",
            "turn_history": [["hi", "hello"]],
            "committed_messages": [],
            "conversation_chunks": None,
        }
    ]
    node: Any = doc
    parts = path[2:].replace("[", ".").replace("]", "").split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    last = parts[-1]
    if last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return doc


@pytest.mark.parametrize(("path", "value"), SECRETS)
def test_secret_blocks_the_write(tmp_path: Path, path: str, value: str) -> None:
    doc = _doc_with(path, value)
    validate_document(doc, where="t")
    out = tmp_path / "out"
    out.mkdir()
    (out / "other.json").write_text("{}")
    before = snapshot(out)
    with pytest.raises(SecretError) as info:
        write_checkpoint_file(doc, out / "s-example.json")
    message = str(info.value)
    assert path in message and "nothing was written" in message
    assert value not in message and value[:12] not in message
    assert snapshot(out) == before


def test_secret_looking_keys_and_references() -> None:
    wm = {
        "api_key": "abc123",
        "password": "hunter2",
        "db": {"client_secret": "x"},
        "token": "${env:TOKEN}",
        "access_token": "secret://vault/agent/token",
        "max_tokens": "4096",
        "token_type": "bearer",
        "password_hint": "",
        "secret": "",
    }
    paths = sorted(f.path for f in scan(wm, "$.working_memory"))
    assert paths == [
        "$.working_memory.api_key",
        "$.working_memory.db.client_secret",
        "$.working_memory.password",
    ]


def test_secret_in_working_memory_blocks_export_cli(tmp_path: Path) -> None:
    from alpstore.store import Store

    root = tmp_path / "run"
    with Store.open(root) as st:
        s = st.create_session(session_id="sec")
        s.append([{"role": "user", "content": "hello"}])
        s.checkpoint(working_memory={"credentials": {"password": "pa55word!"}})
    before = snapshot(tmp_path)
    res = run_cli("--root", str(root), "checkpoint", "save", "sec")
    assert res.code == 9
    assert (
        "$.working_memory[0].conversation_chunks.alpstore.working_memory.credentials.password"
        in res.err
    )
    assert "pa55word" not in res.err + res.out
    res = run_cli(
        "--root", str(root), "checkpoint", "export", "sec", "-o", str(tmp_path / "e.json")
    )
    assert res.code == 9 and not (tmp_path / "e.json").exists()
    after = snapshot(tmp_path)
    assert {k for k in after if "traces" not in k} == {k for k in before if "traces" not in k}
    assert not (root / "checkpoints").exists()
    with Store.open(root) as st:  # no new checkpoint row either
        assert len(st.get_session("sec").checkpoints()) == 1


def test_manifest_secret_blocks_write(tmp_path: Path) -> None:
    doc = json.loads(EXAMPLE.read_text())
    doc["manifest"]["content"]["spec"]["model"] = {"api_key": "live-literal-key"}
    doc["manifest"]["content_hash"] = manifest_hash(doc["manifest"]["content"])
    with pytest.raises(SecretError, match=r"\$\.manifest\.content\.spec\.model\.api_key"):
        write_checkpoint_file(copy.deepcopy(doc), tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize(
    "key",
    [
        "api_key",
        "API_KEY",
        "Password",
        "ClientSecret_Token",
        "aPi_KeY",
        "apiKey",
        "x-api-key",
        "clientSecret",
        "accessToken",
    ],
)
def test_fast_precheck_never_hides_a_finding(key: str) -> None:
    from alpstore.rules.secrets import require_no_secrets

    doc = {"kernel": {"run": {key: "literal-value"}}}
    for text in (json.dumps(doc), json.dumps(doc, indent=2)):
        with pytest.raises(SecretError, match=key):
            require_no_secrets(doc, what="t", json_text=text)
