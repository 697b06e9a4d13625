from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text

from alpstore.db import open_database
from alpstore.db.migrate import SCHEMA_HEAD, alembic_config
from alpstore.db.tables import metadata
from alpstore.errors import SchemaVersionError
from tests.conftest import run_cli


def test_migrated_schema_equals_the_models(tmp_path: Path) -> None:
    db = open_database(root=tmp_path)
    with db.read() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
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
    db = open_database(root=tmp_path)
    db.close()
    path = tmp_path / "traces" / "archive" / "archive.db"
    path.write_bytes(path.read_bytes()[:1000])
    result = run_cli("--root", str(tmp_path), "archive", "stats")
    assert result.code != 0
    assert "Traceback" not in result.err
    assert str(path) in result.err or "archive" in result.err
