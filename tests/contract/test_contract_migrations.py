"""Alembic owns the schema on both backends: migrations equal the models, down and up again,
and a schema written by a newer alpstore is refused with a clear error and left untouched."""

from __future__ import annotations

import json

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

from alembic import command
from alpstore.db.migrate import SCHEMA_HEAD, alembic_config, current_revision, upgrade
from alpstore.errors import SchemaVersionError
from alpstore.sessions import Retention
from tests.conftest import Backend


def test_all_migrations_on_an_empty_database_equal_the_models(backend: Backend) -> None:
    from alpstore.db.tables import include_for, metadata

    db = backend.open_database()
    assert current_revision(db) == SCHEMA_HEAD
    with db.read() as conn:
        diff = compare_metadata(
            MigrationContext.configure(
                conn, opts={"include_object": include_for(conn.dialect.name)}
            ),
            metadata,
        )
    assert diff == []


def test_downgrade_to_base_and_upgrade_again(backend: Backend) -> None:
    db = backend.open_database()
    command.downgrade(alembic_config(db), "base")
    with db.read() as conn:
        left = set(inspect(conn).get_table_names()) - {"alembic_version"}
    assert left == set()
    upgrade(db)
    assert current_revision(db) == SCHEMA_HEAD


def test_sql_views_work_on_real_data(backend: Backend) -> None:
    store = backend.open_store()
    root = store.create_session(name="root", retention=Retention())
    for t in range(3):
        root.commit_turn(
            [{"role": "user", "content": f"q{t}"}, {"role": "assistant", "content": "a"}]
        )
    child = root.fork(name="child")
    child.commit_turn([{"role": "user", "content": "more"}])
    grandchild = child.fork(name="grandchild")
    with store.db.read() as conn:
        lineage = {
            r.name: (r.parent, r.depth, r.forked_at_turn)
            for r in conn.execute(text("SELECT * FROM session_lineage"))
        }
        summary = {
            r.name: (r.checkpoints, r.turns)
            for r in conn.execute(text("SELECT * FROM session_summary"))
        }
        views = conn.execute(text("SELECT COUNT(*) FROM checkpoint_views")).scalar_one()
    assert lineage == {
        "root": (None, 0, None),
        "child": (root.uuid, 1, 3),
        "grandchild": (child.uuid, 2, 4),
    }
    assert summary["root"] == (3, 3) and summary["child"] == (2, 4)
    assert views == 3 + 2 + 1
    assert grandchild.history()[-1].value == {"role": "user", "content": "more"}


def test_a_schema_from_a_newer_alpstore_is_refused(backend: Backend) -> None:
    db = backend.open_database()
    with db.atomic() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999_future'"))
    db.close()
    with pytest.raises(SchemaVersionError, match="9999_future"):
        backend.open_database()
    for args in (["session", "list"], ["db", "upgrade"]):
        result = backend.cli(*args)
        assert result.code == SchemaVersionError.exit_code, result.err
        assert "9999_future" in result.err and "Traceback" not in result.err
        assert len(result.err.strip().splitlines()) <= 2  # the error line and its hint
    current = backend.cli("db", "current")
    assert current.code == 0 and current.out.startswith("9999_future (newer")
    info = backend.cli("db", "info", "--json")
    assert info.code == 0, info.err
    assert json.loads(info.out)["status"] == "newer"


def test_db_commands_on_both_backends(backend: Backend) -> None:
    first = backend.cli("db", "upgrade")
    assert first.code == 0, first.err
    assert f"-> {SCHEMA_HEAD}" in first.out
    again = backend.cli("db", "upgrade")
    assert again.code == 0 and "already at" in again.out
    assert backend.cli("db", "current").out.strip() == f"{SCHEMA_HEAD} (head)"
    store = backend.open_store()
    store.create_session().commit_turn([{"role": "user", "content": "hi"}])
    store.close()
    info = backend.cli("db", "info", "--json")
    assert info.code == 0, info.err
    doc = json.loads(info.out)
    assert doc["backend"] == backend.name
    assert doc["revision"] == SCHEMA_HEAD and doc["status"] == "current"
    assert doc["tables"]["checkpoints"]["rows"] == 1
    assert doc["tables"]["blobs"]["rows"] == 1
    assert doc["total_bytes"] > 0
    text_info = backend.cli("db", "info")
    assert text_info.code == 0 and f"backend:   {backend.name}" in text_info.out
    if backend.url:
        password = backend.url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
        assert "***" in text_info.out and f":{password}@" not in text_info.out
