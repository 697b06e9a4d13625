"""Issue 39 case 7: every command that prints message text escapes control characters when
piped, as `session show` does (one function: ``echo_text``); ``--json`` stays exact. `debug
replay|show|expand|diff` printed ESC, an OSC 52 clipboard write and 0x9b from imported
messages as they were.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from alpstore.store import Store
from tests.conftest import run_cli

HOSTILE = "hi \x1b]52;c;aGVsbG8=\x07 there \x1b[2J \x9b5m end"
RAW = ("\x1b", "\x07", "\x9b")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("esc")
    with Store.open(root) as store:
        s = store.create_session(name="esc")
        s.commit_turn([{"role": "user", "content": "plain"}])
        s.commit_turn([{"role": "user", "content": HOSTILE}])
        s.backtrack(1, HOSTILE)
        s.commit_turn([{"role": "assistant", "content": HOSTILE}])
    return root


@pytest.mark.parametrize(
    "args",
    [
        ("debug", "replay", "esc"),
        ("debug", "show", "esc@latest"),
        ("debug", "expand", "esc@latest"),
        ("debug", "diff", "esc@1", "esc@latest"),
        ("debug", "log", "esc"),
        ("session", "show", "esc"),
        ("session", "log", "esc"),
    ],
)
def test_piped_output_escapes_control_characters(root: Path, args: tuple[str, ...]) -> None:
    r = run_cli("--root", str(root), *args)
    assert r.code == 0, r.err
    assert not any(c in r.out for c in RAW), (args, r.out)
    assert "\\x1b" in r.out, r.out  # shown, not dropped


def test_json_stays_exact(root: Path) -> None:
    r = run_cli("--root", str(root), "debug", "show", "esc@latest", "--json")
    assert r.code == 0, r.err
    doc = json.dumps(json.loads(r.out), ensure_ascii=False)
    assert json.dumps(HOSTILE, ensure_ascii=False)[1:-1] in doc  # the value, exactly
