"""Files a user may really receive, through the real `alpstore` command: whatever they hold,
one clear line, a non-zero exit, no traceback, the run root as it was, and nothing from the
file driving the terminal (stderr included)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.imports._files import mas_doc

PAYLOAD = "\x1b]52;c;ZXZpbA==\x07\x1b[2J\u202e\r\nforged"
"""An OSC 52 clipboard write, a screen clear, a right-to-left override and a forged line."""


def _raw_controls(text: str) -> list[str]:
    return [ch for ch in ("\x1b", "\x07", "\u202e", "\r") if ch in text]


def _one_line_error(err: str) -> None:
    lines = err.strip().splitlines()
    assert lines and lines[0].startswith("alpstore: error: "), err
    assert all(line.startswith("alpstore: ") for line in lines), err
    assert len(lines) <= 2, err  # the error and at most a hint
    assert "Traceback" not in err


# ---------------------------------------------------------------- error messages on stderr
@pytest.mark.parametrize("value", ["\ud800", float("nan")], ids=["lone-surrogate", "nan"])
def test_a_transcript_error_naming_a_key_escapes_it(
    run_root: Path, tmp_path: Path, value: object
) -> None:
    path = tmp_path / "t.jsonl"
    line = json.dumps({"role": "user", "content": {PAYLOAD: value}})  # \u001b … \ud800, NaN
    path.write_text(line + "\n", encoding="utf-8")
    res = run_cli("--root", str(run_root), "session", "import", str(path))
    assert res.code == 3, res
    _one_line_error(res.err)
    assert _raw_controls(res.err) == [], res.err
    assert "\\x1b]52;c;ZXZpbA==\\x07" in res.err  # named, visibly


def test_a_deep_file_error_naming_a_key_escapes_it(run_root: Path, tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    doc = mas_doc(messages=[{"role": "user", "content": {PAYLOAD: "\ud800"}}])
    path.write_text(json.dumps(doc), encoding="utf-8")
    for command in ("import", "validate"):
        res = run_cli("--root", str(run_root), "checkpoint", command, str(path))
        assert res.code == 10, res
        _one_line_error(res.err)
        assert _raw_controls(res.err) == [], res.err
