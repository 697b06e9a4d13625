"""Bad input on the command line gets one line and a usage/input exit code, never "internal
error … this is a bug" (exit 70)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from alpstore.store import Store

HUGE = "99999999999999999999999"


@pytest.fixture
def demo(run_root: Path) -> Path:
    """A session "demo" with 3 turns and "experiment" forked from its turn 2."""
    with Store.open(run_root) as store:
        s = store.create_session(name="demo")
        for i in range(3):
            s.commit_turn(
                [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}]
            )
        store.fork_checkpoint(store.resolve_checkpoint("demo@2"), name="experiment")
    return run_root


def _one_line(result: Any, code: int) -> None:
    assert result.code == code, (result.code, result.err)
    assert "internal error" not in result.err and "Traceback" not in result.err
    errors = [line for line in result.err.splitlines() if "rror" in line]
    assert len(errors) == 1, result.err


def test_out_of_range_numbers(cli: Any, demo: Path) -> None:
    for args in [
        ("session", "show", "demo", "--at", HUGE),
        ("session", "show", "demo", "--at", f"demo@{HUGE}"),
        ("checkpoint", "show", f"archive:demo@{HUGE}"),
        ("session", "fork", f"demo@{HUGE}"),
        ("debug", "show", HUGE),
        ("debug", "show", f"demo@{HUGE}" + "9" * 5000),  # beyond Python's int() digit limit
    ]:
        _one_line(cli(*args), 4)
    for args in [
        ("session", "backtrack", "demo", HUGE),
        ("session", "backtrack", "demo", "1e30"),
        ("session", "fold", "demo", "0", HUGE, "--summary", "s"),
        ("session", "show", "demo", "--width", HUGE),
    ]:
        _one_line(cli(*args), 2)


def test_deeply_nested_json(cli: Any, demo: Path, tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    deep_yaml = tmp_path / "deep.yaml"
    deep_yaml.write_text("a:\n" + "".join("  " * i + "- \n" for i in range(1, 3000)))
    _one_line(cli("session", "append", "demo", str(deep)), 3)
    _one_line(cli("session", "new", "--manifest", str(deep)), 3)
    _one_line(cli("session", "new", "--manifest", str(deep_yaml)), 3)


def test_a_byte_order_mark_is_accepted(cli: Any, demo: Path, tmp_path: Path) -> None:
    message = tmp_path / "m.json"
    message.write_bytes(b"\xef\xbb\xbf" + json.dumps({"role": "user", "content": "bom"}).encode())
    manifest = tmp_path / "agent.yaml"
    manifest.write_bytes(b"\xef\xbb\xbfkind: Agent\nspec: {}\n")
    appended = cli("session", "append", "demo", str(message))
    assert appended.code == 0, appended.err
    made = cli("session", "new", "--manifest", str(manifest), "--name", "bom")
    assert made.code == 0, made.err


def test_show_refuses_a_checkpoint_of_another_session(cli: Any, demo: Path) -> None:
    result = cli("session", "show", "experiment", "--at", "demo@1")
    _one_line(result, 2)
    assert "belongs to session" in result.err and "not to experiment" in result.err
    assert "alpstore session show demo --at demo@1" in result.err
    own = cli("session", "show", "demo", "--at", "demo@1")
    assert own.code == 0 and "q0" in own.out


def test_prepare_says_when_the_thread_has_no_context(cli: Any, tmp_path: Path) -> None:
    env = {"ALP_HOME": str(tmp_path / "alp")}
    result = cli(
        "context", "prepare", "exec_t1", "--policy-hash", "p", "--thread", "nosuch", env=env
    )
    assert result.code == 0, result.err
    assert "thread nosuch has no settled context yet" in result.err
