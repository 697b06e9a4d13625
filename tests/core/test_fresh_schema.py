"""A new SQLite archive is created at head from the checked-in snapshot (alpstore/db/fresh.py):
it must be the very archive the migrations build, and the snapshot must be what they build today.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from alpstore.db import open_database
from alpstore.db.database import Database, sqlite_engine
from alpstore.db.fresh import SNAPSHOT, create_head_schema, parse
from alpstore.db.migrate import SCHEMA_HEAD, current_revision, migrated_snapshot
from alpstore.db.tables import include_for, metadata
from alpstore.errors import UsageError

PRAGMAS = ("user_version", "application_id", "auto_vacuum", "page_size", "encoding", "journal_mode")


def _url(path: Path) -> str:
    return f"sqlite:///{path}"


def _fingerprint(path: Path) -> dict[str, Any]:
    """Everything a schema is: sqlite_master in order, every table's rows, the pragmas."""
    conn = sqlite3.connect(path)
    try:
        master = conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY rowid"
        ).fetchall()
        rows = {
            name: sorted(conn.execute(f'SELECT * FROM "{name}"').fetchall(), key=repr)
            for (kind, name, _, _) in master
            if kind == "table"
        }
        pragmas = {p: conn.execute(f"PRAGMA {p}").fetchone() for p in PRAGMAS}
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        return {"master": master, "rows": rows, "pragmas": pragmas}
    finally:
        conn.close()


def _by_migrations(path: Path) -> None:
    migrated_snapshot(path)


def test_the_snapshot_is_what_the_migrations_build(tmp_path: Path) -> None:
    """Fails when a migration is added (or changed) without `scripts/schema_snapshot`."""
    assert SNAPSHOT.read_text(encoding="utf-8") == migrated_snapshot(tmp_path / "m.db")
    revision, statements = parse(SNAPSHOT.read_text(encoding="utf-8"))
    assert revision == SCHEMA_HEAD and statements


def test_a_new_archive_is_identical_to_a_migrated_one(tmp_path: Path) -> None:
    _by_migrations(tmp_path / "migrated.db")
    open_database(url=_url(tmp_path / "new.db")).close()
    migrated, new = _fingerprint(tmp_path / "migrated.db"), _fingerprint(tmp_path / "new.db")
    assert new["master"] == migrated["master"]
    assert new["rows"] == migrated["rows"]
    assert new["pragmas"] == migrated["pragmas"]
    assert new["rows"]["alembic_version"] == [(SCHEMA_HEAD,)]
    assert len(new["rows"]["sqlite_sequence"]) > 0  # what migration 0004 seeds


@pytest.mark.parametrize("how", ["migrations", "snapshot"])
def test_both_ways_equal_the_models(tmp_path: Path, how: str) -> None:
    path = tmp_path / "a.db"
    if how == "migrations":
        _by_migrations(path)
    db = open_database(url=_url(path))
    try:
        with db.read() as conn:
            assert (
                compare_metadata(
                    MigrationContext.configure(
                        conn, opts={"include_object": include_for(conn.dialect.name)}
                    ),
                    metadata,
                )
                == []
            )
        assert current_revision(db) == SCHEMA_HEAD
    finally:
        db.close()


def test_a_new_archive_does_not_run_alembic(tmp_path: Path) -> None:
    """The point of the snapshot: neither Alembic's import nor the migrations run."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from alpstore.store import Store\n"
        f"Store.open(Path({str(tmp_path)!r}), url={_url(tmp_path / 'a.db')!r}).close()\n"
        "print('alembic' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "False", out.stderr
    assert _fingerprint(tmp_path / "a.db")["master"]


def test_an_older_archive_still_upgrades_through_alembic(tmp_path: Path) -> None:
    from alpstore.db.migrate import upgrade

    path = tmp_path / "old.db"
    db = open_database(url=_url(path), migrate=False)
    upgrade(db, "0003")
    db.close()
    open_database(url=_url(path)).close()
    _by_migrations(tmp_path / "migrated.db")
    assert _fingerprint(path)["master"] == _fingerprint(tmp_path / "migrated.db")["master"]


def test_not_used_on_a_database_that_is_not_empty_or_a_stale_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE someone_elses (x)")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(UsageError, match="not an alpstore archive"):  # never opened for writing
        open_database(url=_url(path), migrate=False)
    assert path.read_bytes() == before
    db = Database(sqlite_engine(_url(path)), location=str(path))  # below the opening's check
    try:
        assert not create_head_schema(db, SCHEMA_HEAD)
    finally:
        db.close()
    db = open_database(url=_url(tmp_path / "b.db"), migrate=False)
    try:
        assert not create_head_schema(db, "9999_newer")  # the snapshot is not at that head
        assert current_revision(db) is None
    finally:
        db.close()


def test_many_openers_of_one_new_archive(tmp_path: Path) -> None:
    """Threads opening one new archive at once: one creates it, the others find it at head.

    Fifty rounds: switching a new file to WAL answered "database is locked" without waiting
    in about one round in ten (before ``_wal_mode``).
    """
    _by_migrations(tmp_path / "migrated.db")
    for round_ in range(50):
        path = tmp_path / f"a{round_}.db"
        errors: list[BaseException] = []
        barrier = threading.Barrier(4)

        def opener(
            path: Path = path,
            errors: list[BaseException] = errors,
            barrier: threading.Barrier = barrier,
        ) -> None:
            try:
                barrier.wait()
                open_database(url=_url(path)).close()
            except BaseException as err:
                errors.append(err)

        threads = [threading.Thread(target=opener) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [], f"round {round_}"
        if round_ % 10 == 0:
            assert _fingerprint(path) == _fingerprint(tmp_path / "migrated.db")
