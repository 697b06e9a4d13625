"""A segment run (migration 0009) whose stored ids are damaged: every command says which run,
in one line, with no traceback, and changes nothing (SQLite: the runs are JSON text a file can
hold anything in)."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import run_cli

SQLITE = {"ALPSTORE_DATABASE_URL": ""}


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs") / "run"
    src = root.parent / "c.jsonl"
    made = run_cli("samples", "conversation", "--turns", "120", env=SQLITE)
    src.write_text(made.out, encoding="utf-8")
    done = run_cli("--root", str(root), "session", "import", str(src), "--name", "c", env=SQLITE)
    assert done.code == 0, done.err
    return root


@pytest.mark.parametrize(
    ("stored", "says"),
    [
        ("[1,2,", "blob ids are not JSON"),
        ('{"a": 1}', "not a list of blob ids"),
        ("[1, true]", "not a list of blob ids"),
        ('["7"]', "not a list of blob ids"),
    ],
)
def test_a_damaged_run_is_named_and_nothing_changes(
    imported: Path, tmp_path: Path, stored: str, says: str
) -> None:
    root = tmp_path / "run"
    shutil.copytree(imported, root)
    archive = root / "traces" / "archive" / "archive.db"
    conn = sqlite3.connect(archive)
    try:
        seg, start = conn.execute(
            "SELECT segment_id, start FROM segment_runs ORDER BY segment_id DESC, start LIMIT 1"
        ).fetchone()
        conn.execute(
            "UPDATE segment_runs SET blob_ids = ? WHERE segment_id = ? AND start = ?",
            (stored, seg, start),
        )
        conn.commit()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    before = hashlib.sha256(archive.read_bytes()).hexdigest()
    seen = []
    for args in (["archive", "gc"], ["archive", "verify"]):
        done = run_cli("--root", str(root), *args, env=SQLITE)
        assert done.code != 0, args
        assert "Traceback" not in done.err and "internal error" not in done.err, done.err
        seen.append(done.err + done.out)
    assert says in seen[0] or says in seen[1], seen
    if "list of blob ids" in says:
        assert f"segment {seg}: the run of entries at position {start}" in seen[0]
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == before
