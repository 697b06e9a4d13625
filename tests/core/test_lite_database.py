"""LiteDatabase: an SQLite archive read on the sqlite3 driver alone (no SQLAlchemy) sees what
``Database`` sees, never writes, never creates a file, and refuses a schema it does not read
with the errors a reading command gives today.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from alpstore.archive.reading import ArchiveReader
from alpstore.archive.sql import SqlArchive
from alpstore.db import raw as rsql
from alpstore.db.lite import LiteDatabase
from alpstore.db.migrate import require_current_schema
from alpstore.db.names import SCHEMA_HEAD, sqlite_path_for_root
from alpstore.db.opening import open_database
from alpstore.errors import NotFoundError, SchemaVersionError, StorageError, UsageError

pytestmark = pytest.mark.sqlite_only("LiteDatabase opens the SQLite file of a run root")

DOCS = [{"role": "user", "content": f"turn {i} " + "x" * (i * 300)} for i in range(12)]


def archive_with_blobs(root: Path) -> list[bytes]:
    """A run root whose archive holds ``DOCS`` (some stored as deltas); their digests."""
    db = open_database(root=root)
    try:
        archive = SqlArchive(db, auto_train=False)
        digests = archive.put_many(DOCS)
        archive.close()
    finally:
        db.close()
    return digests


def set_revision(path: Path, revision: str) -> None:
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE alembic_version SET version_num = ?", (revision,))
    conn.close()


def test_reads_the_same_rows_and_documents_as_database(tmp_path: Path) -> None:
    digests = archive_with_blobs(tmp_path)
    db = open_database(root=tmp_path, create=False, migrate=False)
    lite = open_database(root=tmp_path, read_only=True)
    assert isinstance(lite, LiteDatabase)
    try:
        query = "SELECT id, digest, kind, raw_size, codec, payload FROM blobs ORDER BY id"
        with db.read() as conn:
            expected = rsql.fetchall(conn, query)
        with lite.read() as conn:
            assert rsql.fetchall(conn, query) == expected
            assert rsql.fetchone(conn, "SELECT count(*) FROM blobs WHERE id > ?", [0]) == (
                len(expected),
            )
        reader = ArchiveReader(lite)
        assert reader.get_many(digests, verify=True) == DOCS
        assert reader.get_raw(digests[3]) == SqlArchive(db).get_raw(digests[3])
        assert lite.is_sqlite and not lite.is_postgresql and not lite.in_transaction()
        assert lite.location == str(sqlite_path_for_root(tmp_path))
    finally:
        lite.close()
        db.close()


def test_refuses_writes_with_a_clear_error(tmp_path: Path) -> None:
    archive_with_blobs(tmp_path)
    lite = LiteDatabase(sqlite_path_for_root(tmp_path))
    try:
        with pytest.raises(UsageError, match="opened for reading"), lite.atomic():
            pass
        with pytest.raises(StorageError, match="read-only"), lite.read() as conn:
            rsql.execute(conn, "DELETE FROM blob_rows")
        with lite.read() as conn:
            assert rsql.fetchone(conn, "SELECT count(*) FROM blobs")[0] == len(DOCS)
    finally:
        lite.close()


@pytest.mark.parametrize("revision", ["0005", "9999_future"], ids=["older", "newer"])
def test_refuses_another_schema_with_todays_errors(tmp_path: Path, revision: str) -> None:
    archive_with_blobs(tmp_path)
    path = sqlite_path_for_root(tmp_path)
    set_revision(path, revision)
    db = open_database(root=tmp_path, create=False, migrate=False)
    try:
        with pytest.raises(SchemaVersionError) as today:
            require_current_schema(db)
    finally:
        db.close()
    with pytest.raises(SchemaVersionError) as lite:
        open_database(root=tmp_path, read_only=True)
    assert str(lite.value) == str(today.value)
    assert lite.value.hint == today.value.hint
    hint = "db upgrade" if revision == "0005" else "upgrade alpstore"
    assert hint in str(lite.value.hint)
    with sqlite3.connect(path) as conn:  # left as it was
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == (revision,)


def test_an_empty_database_is_no_archive(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()
    with pytest.raises(NotFoundError, match="no archive at"):
        LiteDatabase(path)


def test_does_not_create_a_missing_file(tmp_path: Path) -> None:
    path = sqlite_path_for_root(tmp_path)
    with pytest.raises(NotFoundError, match="no archive at") as err:
        open_database(root=tmp_path, read_only=True)
    assert "alpstore session import" in str(err.value.hint)
    missing = tmp_path / "missing.db"
    with pytest.raises(NotFoundError, match="no archive at sqlite:///"):
        open_database(url=f"sqlite:///{missing}", read_only=True)
    assert not path.exists() and not path.parent.exists() and not missing.exists()
    assert list(tmp_path.iterdir()) == []


def test_leaves_the_journal_mode_of_a_non_wal_archive_untouched(tmp_path: Path) -> None:
    archive_with_blobs(tmp_path)
    path = sqlite_path_for_root(tmp_path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode=DELETE").fetchone() == ("delete",)
    lite = LiteDatabase(path)
    try:
        with lite.read() as conn:
            assert rsql.fetchone(conn, "SELECT version_num FROM alembic_version") == (SCHEMA_HEAD,)
    finally:
        lite.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    assert not Path(f"{path}-wal").exists()


def test_the_read_path_imports_no_sqlalchemy() -> None:
    code = (
        "import sys, alpstore.db.lite, alpstore.db.opening, alpstore.db.raw, "
        "alpstore.archive.reading; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'alembic')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
