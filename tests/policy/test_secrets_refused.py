"""CK-11 at the front door: a manifest or a pin holding a credential is refused whole.

Nothing of the refused input may reach the archive, the event log, a checkpoint file or the
command's output: the tests grep every byte under the run root (database, WAL, events) and the
output for the credential.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from alpstore.errors import SecretError
from alpstore.store import Store
from tests.conftest import run_cli

OPENAI_KEY = "sk-proj-" + "Q7xT2mLp9VvR4kZs8NbW3yHc6"
AWS_KEY = "AKIA" + "QWERTYUIOPASDFGH"


def bytes_under(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


def secret_manifest(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "agent.json"
    doc = {
        "kind": "Agent",
        "metadata": {"name": "leaky"},
        "spec": {
            "model": {"provider": "openai", "api_key": OPENAI_KEY},
            "checkpoint": {"mode": "every_turn"},
        },
    }
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_session_open_refuses_an_inline_credential(
    cli: Any, run_root: Path, tmp_path: Path
) -> None:
    path = secret_manifest(tmp_path / "agent")
    for args in (
        ("session", "open", "--manifest", str(path)),
        ("session", "new", "--manifest", str(path)),
    ):
        refused = cli(*args)
        assert refused.code == 9, refused.err
        assert "$.spec.model.api_key" in refused.err and str(path) in refused.err
        assert len(refused.err.strip().splitlines()) <= 2 and "Traceback" not in refused.err
        assert OPENAI_KEY not in refused.out + refused.err
    # refused before anything was stored: no archive, no events, no checkpoint files
    assert not (run_root / "traces").exists()
    assert not (tmp_path / "agent" / ".mas").exists()
    assert OPENAI_KEY.encode() not in bytes_under(run_root)
    listed = cli("session", "list", "--json")  # a read: finds no archive, creates nothing
    assert listed.code == 4 and "no archive at" in listed.err, listed.err
    assert not (run_root / "traces").exists()
    # a reference passes
    doc = json.loads(path.read_text())
    doc["spec"]["model"]["api_key"] = "${env:OPENAI_API_KEY}"
    path.write_text(json.dumps(doc))
    opened = cli("session", "open", "--manifest", str(path))
    assert opened.code == 0, opened.err


def test_library_open_session_refuses_and_stores_nothing(tmp_path: Path) -> None:
    path = secret_manifest(tmp_path / "agent")
    with Store.open(tmp_path / "run") as store:
        with pytest.raises(SecretError) as caught:
            store.open_session(manifest=path, cwd=tmp_path)
        assert "$.spec.model.api_key" in str(caught.value) and OPENAI_KEY not in str(caught.value)
        with pytest.raises(SecretError):
            store.create_session(manifest=json.loads(path.read_text()))
        assert store.count_sessions() == 0
    assert OPENAI_KEY.encode() not in bytes_under(tmp_path / "run")


def test_context_pin_refuses_secret_looking_text(tmp_path: Path) -> None:
    env = {"ALP_HOME": str(tmp_path / "alp"), "ALP_EXECUTION_ID": "exec_leak"}
    ok = run_cli("context", "pin", "decision", "--", "Use WAL", env=env)
    assert ok.code == 0, ok.err
    checkpoint = next((tmp_path / "alp").rglob("checkpoint.json"))
    before = checkpoint.read_bytes()
    refused = run_cli("context", "pin", "constraint", "--", f"deploy key {AWS_KEY}", env=env)
    assert refused.code == 9, refused.err
    assert "AWS access key id" in refused.err and "--allow-secret-looking" in refused.err
    assert AWS_KEY not in refused.out + refused.err
    assert checkpoint.read_bytes() == before  # nothing written
    assert AWS_KEY.encode() not in bytes_under(tmp_path / "alp")
    helped = run_cli("context", "pin", "--help", env={**env, "COLUMNS": "200"})
    assert "--allow-secret-looking" in helped.out and "false positive" in helped.out
    # a false positive, said so explicitly, is pinned
    allowed = run_cli(
        "context", "pin", "constraint", "--allow-secret-looking", "--", f"{AWS_KEY}", env=env
    )
    assert allowed.code == 0, allowed.err
    assert AWS_KEY.encode() in checkpoint.read_bytes()


def test_secrets_in_keys_and_camel_case_keys_are_refused(
    cli: Any, run_root: Path, tmp_path: Path
) -> None:
    """A credential used as a mapping key was stored (keys were not scanned), and when a
    finding sat under it the error printed it as part of the path; `clientSecret`,
    `accessToken`, `x-api-key` holding literals passed (only snake_case names were checked)."""
    cases = [
        ({"tools": {AWS_KEY: {"api_key": "literal"}}}, "$.spec.tools"),
        ({"tools": {AWS_KEY: 1}}, "$.spec.tools"),
        ({"model": {"clientSecret": "hunter2hunter2"}}, "$.spec.model.clientSecret"),
        ({"model": {"accessToken": "abcdef123456"}}, "$.spec.model.accessToken"),
        ({"model": {"headers": {"x-api-key": "abcdef123456"}}}, '["x-api-key"]'),
    ]
    for i, (spec, where) in enumerate(cases):
        path = tmp_path / f"a{i}" / "agent.json"
        path.parent.mkdir()
        path.write_text(json.dumps({"kind": "Agent", "spec": spec}), encoding="utf-8")
        refused = cli("session", "open", "--manifest", str(path))
        assert refused.code == 9, (spec, refused.out, refused.err)
        assert where in refused.err, refused.err
        assert AWS_KEY not in refused.out + refused.err
        assert len(refused.err.strip().splitlines()) <= 2 and "Traceback" not in refused.err
    assert not (run_root / "traces").exists()
    assert AWS_KEY.encode() not in bytes_under(run_root)
    # ordinary camelCase keys and references still pass
    path = tmp_path / "fine" / "agent.json"
    path.parent.mkdir()
    spec = {"model": {"maxTokens": 4096, "apiKey": "${env:KEY}", "secretName": "prod"}}
    path.write_text(json.dumps({"kind": "Agent", "spec": spec}), encoding="utf-8")
    assert cli("session", "open", "--manifest", str(path)).code == 0
