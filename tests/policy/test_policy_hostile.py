"""Hostile and mistaken manifests through the real `alpstore` command: each refused with one
line naming the file or key path (exit 8 for a policy, 9 for a secret), no traceback, and the
run root as it was (no archive row, no file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Result


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes (empty when it does not exist)."""
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def refused(result: Result, code: int) -> str:
    assert result.code == code, (result.code, result.out, result.err)
    assert result.err.startswith("alpstore: error: "), result.err
    assert len(result.err.strip().splitlines()) <= 2 and "Traceback" not in result.err
    assert "internal error" not in result.err
    return result.err


def agent(folder: Path, text: str, name: str = "agent.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


HUGE = 99999999999999999999999999


@pytest.mark.parametrize(
    ("checkpoint", "where"),
    [
        ({"mode": "every_turn", "retention": {"mode": "last_n", "n": HUGE}}, "retention.n"),
        ({"mode": "every_turn", "retention": {"mode": "last_n", "n": 2**31}}, "retention.n"),
        (
            {"mode": "on_event", "triggers": ["every_n_turns"], "every_n_turns": HUGE},
            "every_n_turns",
        ),
    ],
)
def test_out_of_range_numbers_are_a_policy_error(
    cli: Any, run_root: Path, tmp_path: Path, checkpoint: dict[str, Any], where: str
) -> None:
    """A count beyond 2**31 - 1 was "internal error: OverflowError" (exit 70) for retention.n,
    and recorded as the policy for every_n_turns."""
    doc = {"kind": "Agent", "spec": {"checkpoint": checkpoint}}
    path = agent(tmp_path / "a", json.dumps(doc), "agent.json")
    err = refused(cli("session", "open", "--manifest", str(path)), 8)
    assert f"spec.checkpoint.{where}" in err and "2147483647" in err, err
    assert tree(run_root) == {}
    largest = json.loads(
        json.dumps(doc).replace(str(checkpoint_value(checkpoint, where)), str(2**31 - 1))
    )
    path.write_text(json.dumps(largest))
    assert cli("session", "open", "--manifest", str(path)).code == 0  # the bound itself is fine


def checkpoint_value(checkpoint: dict[str, Any], where: str) -> int:
    value: Any = checkpoint
    for key in where.split("."):
        value = value[key]
    return int(value)
