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


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("deep.json", "[" * 100_000 + "]" * 100_000),
        ("deep.yaml", "kind: Agent\nspec: " + "[" * 100_000 + "]" * 100_000),
    ],
)
def test_deeply_nested_manifest_is_one_line(
    cli: Any, run_root: Path, tmp_path: Path, name: str, text: str
) -> None:
    """`session open --manifest` of a deeply nested file was "internal error: RecursionError"
    (exit 70); `session new --manifest` already said it in one line."""
    path = agent(tmp_path / "a", text, name)
    err = refused(cli("session", "open", "--manifest", str(path)), 8)
    assert name in err and "nested too deeply" in err, err
    assert tree(run_root) == {}


def test_byte_order_mark_is_accepted(cli: Any, tmp_path: Path) -> None:
    """A JSON manifest starting with a UTF-8 BOM was refused in Python's words ("decode using
    utf-8-sig") by `session open`; `session new` accepts it (issue 17)."""
    path = tmp_path / "a" / "agent.json"
    path.parent.mkdir()
    doc = {"kind": "Agent", "spec": {"checkpoint": {"mode": "every_turn"}}}
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(doc).encode())
    opened = cli("session", "open", "--manifest", str(path), "--json")
    assert opened.code == 0, opened.err
    assert json.loads(opened.out)["policy"]["mode"] == "every_turn"


@pytest.mark.parametrize(
    ("name", "text", "key"),
    [
        (
            "agent.yaml",
            "kind: Agent\nspec:\n  checkpoint:\n    mode: every_turn\n    mode: none\n",
            "mode",
        ),
        ("agent.yaml", "kind: Agent\nspec: {checkpoint: {mode: every_turn}}\nspec: {}\n", "spec"),
        (
            "agent.json",
            '{"kind": "Agent", "spec": {"checkpoint": {"mode": "every_turn", "mode": "none"}}}',
            "mode",
        ),
    ],
)
def test_a_key_written_twice_is_refused(
    cli: Any, run_root: Path, tmp_path: Path, name: str, text: str, key: str
) -> None:
    """Which of two `mode:` lines runs? The last was taken silently: the policy that ran was
    not the one the user may have meant. Refused, naming the key and the line."""
    path = agent(tmp_path / "a", text, name)
    err = refused(cli("session", "open", "--manifest", str(path)), 8)
    assert name in err and f"{key!r}" in err and "more than once" in err, err
    assert tree(run_root) == {}
    merged = agent(
        tmp_path / "b",
        "kind: Agent\nbase: &base {mode: every_turn}\n"
        "spec:\n  checkpoint:\n    <<: *base\n    mode: none\n",
    )  # a merge key's value overridden by the mapping's own key is YAML, not a repeat
    opened = cli("session", "open", "--manifest", str(merged), "--json")
    assert opened.code == 0 and json.loads(opened.out)["policy"]["mode"] == "none", opened.err
