"""Secrets never leak: no error message, output line, event or file repeats a value the secret scan
flags — neither when a write is refused for it nor when a hostile file carries one elsewhere."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from alpstore.errors import SecretError
from alpstore.rules.secrets import scan
from alpstore.store import Store
from tests.conftest import run_cli

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "upstream"
SECRETS = {
    "github": "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "pem": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7fake\n-----END RSA PRIVATE KEY-----",
}


def _everything_written(root: Path, *outputs: str) -> str:
    """Every byte the run left behind that a person or a log collector could read."""
    text = "".join(outputs)
    for path in root.rglob("*"):
        if path.is_file() and path.suffix in (".jsonl", ".json", ".md", ".zst", ".log"):
            text += path.read_bytes().decode("utf-8", "replace")
    return text


@pytest.mark.parametrize(
    ("kind", "where"), [("github", "kernel"), ("aws", "working_memory"), ("pem", "message")]
)
def test_a_refused_export_names_the_path_never_the_value(
    tmp_path: Path, kind: str, where: str
) -> None:
    secret = SECRETS[kind]
    assert scan({"v": secret}), "the scan must flag the sample"
    root = tmp_path / "run"
    with Store.open(root) as store:
        s = store.create_session(session_id="leaky")
        s.commit_turn([{"role": "user", "content": "hello"}])
        if where == "kernel":
            s.checkpoint(kernel={"q": {"token": secret}, "run": {}})
        elif where == "working_memory":
            s.checkpoint(working_memory={"scratch": {"note": secret}})
        else:
            s.commit_turn([{"role": "tool", "content": f"export TOKEN={secret}"}])
    out = tmp_path / "out"
    out.mkdir()
    result = run_cli(
        "--root", str(root), "checkpoint", "export", "leaky@latest", "-o", str(out / "x.json")
    )
    assert result.code == SecretError.exit_code, (result.code, result.err)
    assert "$." in result.err  # the JSON path of the offending value is named
    assert secret not in _everything_written(root, result.out, result.err)
    assert secret.splitlines()[0] not in result.err
    assert list(out.iterdir()) == []  # nothing written, not even a temporary file


def _example() -> dict[str, Any]:
    return json.loads((FIXTURES / "mas-lab-checkpoint-v2.example.json").read_text())


def _at(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return doc


@pytest.mark.parametrize(
    "path",
    [
        ("version",),
        ("turn",),
        ("label",),
        ("lineage", "created_at"),
        ("kernel",),
        ("working_memory",),
    ],
)
def test_a_hostile_file_with_a_secret_in_a_bad_field_is_refused_without_echoing_it(
    tmp_path: Path, path: tuple[str, ...]
) -> None:
    """Found by this suite: `checkpoint validate` echoed the value of a bad `version` (a token)."""
    secret = SECRETS["github"]
    file = tmp_path / "hostile.json"
    file.write_text(
        json.dumps(
            _at(
                _example(),
                path,
                {"x": [secret]} if path[0] in ("kernel", "working_memory") else secret,
            )
        )
    )
    for command in ("validate", "import"):
        result = run_cli("--root", str(tmp_path / "run"), "checkpoint", command, str(file))
        # errors and events never carry it (a valid file's label is echoed on stdout by
        # `validate`; that is the file's own content, not an error)
        assert secret not in result.err, (command, result.err)
        assert result.code == 0 or secret not in result.out, (command, result.out)
        if result.code != 0:  # refused: nothing about it reached the event log either
            events = tmp_path / "run" / "traces" / "events.jsonl"
            assert not events.exists() or secret not in events.read_text()
        assert "Traceback" not in result.err and "internal error" not in result.err
