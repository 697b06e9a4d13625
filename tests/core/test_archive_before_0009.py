"""An archive written by alpstore before migration 0009 (a segment's entries as runs, issue 42):
upgraded in place, it gives the answers the alpstore that wrote it gave (``session log``,
``session show`` at every checkpoint, ``session digest``, ``archive verify``), and the
``segment_entries`` view holds the rows the table held. The fixture (written by the tree at
7710a0f with its own ``make.py``: see its README) is SQLite; PostgreSQL archives are checked by
``test_segment_runs`` (brought down by the real downgrades, migrated back).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from tests.conftest import run_cli

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "archives" / "before_0009"
SQLITE = {"ALPSTORE_DATABASE_URL": ""}  # this archive's own file, on either pass


def _command(key: str) -> list[str]:
    """The command line an answer's key names (see the fixture's README)."""
    words = key.split()
    if words == ["verify"]:
        return ["archive", "verify"]
    what, name, *rest = words
    if what == "digest":
        return ["session", "digest", name]
    if what == "log":
        return ["session", "log", name, "--json"]
    at = ["--at", rest[1]] if rest else []
    return ["session", "show", name, *at, "--json"]


def _entries(path: Path) -> list[tuple[int, int, int]]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT segment_id, position, blob_id FROM segment_entries "
            "ORDER BY segment_id, position"
        ).fetchall()
    finally:
        conn.close()
    return [(int(s), int(p), int(b)) for s, p, b in rows]


def test_an_archive_written_before_runs_upgrades_to_the_same_answers(tmp_path: Path) -> None:
    root = tmp_path / "run"
    shutil.copytree(FIXTURE / "run", root)
    archive = root / "traces" / "archive" / "archive.db"
    answers = json.loads((FIXTURE / "answers.json").read_text(encoding="utf-8"))
    assert len(answers) > 60
    before = _entries(archive)
    assert len(before) > 250

    old = run_cli("--root", str(root), "session", "log", "main", env=SQLITE)
    assert old.code != 0 and "alpstore db upgrade" in old.err
    assert "Traceback" not in old.err

    upgraded = run_cli("--root", str(root), "db", "upgrade", env=SQLITE)
    assert upgraded.code == 0, upgraded.err
    conn = sqlite3.connect(archive)
    try:
        kinds = dict(conn.execute("SELECT name, type FROM sqlite_master").fetchall())
    finally:
        conn.close()
    assert kinds.get("segment_runs") == "table" and kinds.get("segment_entries") == "view"
    assert _entries(archive) == before

    for key, (code, out) in sorted(answers.items()):
        now = run_cli("--root", str(root), *_command(key), env=SQLITE)
        assert (now.code, now.out) == (code, out), f"{key}: {now.err}"
