"""An archive written by alpstore before migration 0010 (packed blobs described in their
frame's row, issue 42): upgraded in place, it gives the answers the alpstore that wrote it gave
(``session log``, ``session show`` at every checkpoint, ``session digest``, ``archive
verify``), and the ``blobs`` view holds the rows the table held. The fixture (written by the
tree at a066f87 with its own ``make.py``: see its README) is SQLite; PostgreSQL archives are
checked by ``test_frame_members`` (brought down by the real downgrades, migrated back).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from tests.conftest import run_cli

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "archives" / "before_0010"
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


def _entries(path: Path) -> list[tuple[object, ...]]:
    """Every blob row (the table before, the view after), in id order."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT id, digest, kind, raw_size, codec, dict_id, payload, base_id FROM blobs "
            "ORDER BY id"
        ).fetchall()
    finally:
        conn.close()
    return [tuple(r) for r in rows]


def test_an_archive_written_before_members_upgrades_to_the_same_answers(tmp_path: Path) -> None:
    root = tmp_path / "run"
    shutil.copytree(FIXTURE / "run", root)
    archive = root / "traces" / "archive" / "archive.db"
    answers = json.loads((FIXTURE / "answers.json").read_text(encoding="utf-8"))
    assert len(answers) > 60
    before = _entries(archive)
    assert len(before) > 250 and sum(1 for r in before if r[4] == 4) > 200  # packed

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
    assert kinds.get("blob_rows") == "table" and kinds.get("blobs") == "view"
    conn = sqlite3.connect(archive)
    try:
        packed_rows = conn.execute("SELECT count(*) FROM blob_rows WHERE codec = 4").fetchone()
    finally:
        conn.close()
    assert packed_rows == (0,)
    assert _entries(archive) == before

    for key, (code, out) in sorted(answers.items()):
        now = run_cli("--root", str(root), *_command(key), env=SQLITE)
        assert (now.code, now.out) == (code, out), f"{key}: {now.err}"
