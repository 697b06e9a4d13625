"""`alpstore hook install|uninstall` keep the user's settings file: its mode, its symlink, its
values; what cannot be written back exactly is refused with one line, the file untouched; every
change leaves a backup beside it."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.conftest import run_cli

BEFORE = {"permissions": {"allow": ["Bash(ls)"]}, "hooks": {"Stop": [{"hooks": []}]}}


def _settings(project: Path, text: str, mode: int = 0o644) -> Path:
    path = project / ".claude" / "settings.json"
    path.parent.mkdir(parents=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def test_install_keeps_a_private_mode_and_backs_up(tmp_path: Path) -> None:
    path = _settings(tmp_path, json.dumps(BEFORE), mode=0o600)
    original = path.read_bytes()
    result = run_cli("hook", "install", "--project", str(tmp_path))
    assert result.code == 0, result.err
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    doc = json.loads(path.read_text())
    assert doc["permissions"] == BEFORE["permissions"] and "SessionStart" in doc["hooks"]
    backup = path.with_name("settings.json.alpstore-backup")
    assert backup.read_bytes() == original
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600
    installed = path.read_bytes()
    result = run_cli("hook", "uninstall", "--project", str(tmp_path))
    assert result.code == 0, result.err
    assert backup.read_bytes() == installed  # a backup on every change
    assert json.loads(path.read_text()) == BEFORE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_install_writes_through_a_symlink(tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    real = dotfiles / "claude-settings.json"
    real.write_text(json.dumps(BEFORE))
    link = tmp_path / "proj" / ".claude" / "settings.json"
    link.parent.mkdir(parents=True)
    link.symlink_to(real)
    result = run_cli("hook", "install", "--project", str(tmp_path / "proj"))
    assert result.code == 0, result.err
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert "SessionStart" in json.loads(real.read_text())["hooks"]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('{"x": 1e400, "hooks": {}}', "1e400"),
        ('{"x": -1e999}', "-1e999"),
        ('{"x": "\\ud800"}', "lone surrogate"),
        ('{"\\udfff": 1}', "lone surrogate"),
        ('{"x": NaN}', "NaN"),
        ('{"x": Infinity}', "Infinity"),
        ('{"x": 1, "x": 2}', "appears twice"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ],
)
def test_what_cannot_be_written_back_is_refused(tmp_path: Path, text: str, named: str) -> None:
    path = _settings(tmp_path, text)
    before = path.read_bytes()
    for verb in ("install", "uninstall"):
        result = run_cli("hook", verb, "--project", str(tmp_path))
        assert result.code == 3, result.err
        lines = [line for line in result.err.splitlines() if line.startswith("alpstore: error:")]
        assert len(lines) == 1 and named in lines[0], result.err
        assert "internal error" not in result.err
        assert path.read_bytes() == before
    assert sorted(os.listdir(path.parent)) == ["settings.json"]  # no backup, no temp file


def test_a_byte_order_mark_is_accepted_and_kept(tmp_path: Path) -> None:
    path = _settings(tmp_path, "")
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(BEFORE).encode())
    result = run_cli("hook", "install", "--project", str(tmp_path))
    assert result.code == 0, result.err
    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf")
    assert "SessionStart" in json.loads(data[3:])["hooks"]
