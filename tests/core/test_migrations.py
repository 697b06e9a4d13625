from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text

from alpstore.db import open_database
from alpstore.db.migrate import SCHEMA_HEAD, alembic_config
from alpstore.db.tables import include_for, metadata
from alpstore.errors import SchemaVersionError
from tests.backend_pass import sqlite_only
from tests.conftest import run_cli


def test_migrated_schema_equals_the_models(tmp_path: Path) -> None:
    db = open_database(root=tmp_path)
    with db.read() as conn:
        diff = compare_metadata(
            MigrationContext.configure(
                conn, opts={"include_object": include_for(conn.dialect.name)}
            ),
            metadata,
        )
    assert diff == []


def test_schema_head_constant_matches_alembic() -> None:
    assert ScriptDirectory.from_config(alembic_config()).get_current_head() == SCHEMA_HEAD


def test_sql_views_exist(tmp_path: Path) -> None:
    db = open_database(root=tmp_path)
    with db.read() as conn:
        for view in ("session_lineage", "session_summary", "checkpoint_views"):
            assert conn.execute(text(f"select count(*) from {view}")).scalar_one() == 0


def test_archive_from_a_newer_alpstore_is_refused(tmp_path: Path) -> None:
    db = open_database(root=tmp_path)
    with db.atomic() as conn:
        conn.execute(text("update alembic_version set version_num = '9999_future'"))
    db.close()
    with pytest.raises(SchemaVersionError, match="9999_future"):
        open_database(root=tmp_path)
    result = run_cli("--root", str(tmp_path), "archive", "stats")
    assert result.code == SchemaVersionError.exit_code
    assert "9999_future" in result.err and "Traceback" not in result.err


def test_truncated_database_is_a_clear_error(tmp_path: Path) -> None:
    sqlite_only("truncates the SQLite file")
    db = open_database(root=tmp_path)
    db.close()
    path = tmp_path / "traces" / "archive" / "archive.db"
    path.write_bytes(path.read_bytes()[:1000])
    result = run_cli("--root", str(tmp_path), "archive", "stats")
    assert result.code != 0
    assert "Traceback" not in result.err
    assert str(path) in result.err or "archive" in result.err


def test_database_url_variable_names_the_archive_for_library_and_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$ALPSTORE_DATABASE_URL: the embedded library and the command open the same archive."""
    from alpstore.store import Store

    elsewhere = tmp_path / "shared" / "fleet.db"
    elsewhere.parent.mkdir()
    root = tmp_path / "run"
    monkeypatch.setenv("ALPSTORE_DATABASE_URL", f"sqlite:///{elsewhere}")
    with Store.open(root) as store:
        store.create_session(name="from-the-library")
    assert elsewhere.exists()
    assert not (root / "traces" / "archive" / "archive.db").exists()
    listed = run_cli("--root", str(root), "session", "list")
    assert listed.code == 0 and "from-the-library" in listed.out
    # an explicit URL wins over the variable
    other = tmp_path / "other.db"
    with Store.open(root, url=f"sqlite:///{other}") as store:
        assert store.list_sessions() == []
