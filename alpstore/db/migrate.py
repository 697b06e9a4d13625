"""Alembic glue: opening an archive brings its schema to head; a newer schema is refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import inspect, text

from alpstore.db.database import Database, sqlite_engine, translate_errors
from alpstore.db.fresh import create_head_schema, dump_statements, render
from alpstore.db.names import SCHEMA_HEAD as SCHEMA_HEAD
from alpstore.db.names import check_revision, foreign_tables
from alpstore.errors import SchemaVersionError

if TYPE_CHECKING:
    from alembic.config import Config

# Alembic (about 0.2 s to import) is imported only where a migration or the revision list is
# needed: opening an archive already at SCHEMA_HEAD reads alembic_version with plain SQL.


def script_location() -> Path:
    """The migrations folder: packaged as ``alpstore/_alembic``, or ``alembic/`` in a checkout."""
    here = Path(__file__).resolve().parent.parent
    packaged = here / "_alembic"
    if packaged.is_dir():
        return packaged
    return here.parent / "alembic"


def alembic_config(db: Database | None = None) -> Config:
    """An Alembic config pointing at our migrations (and at ``db`` when given)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(script_location()))
    if db is not None:
        cfg.attributes["database"] = db
    return cfg


def known_revisions() -> set[str]:
    """Every schema revision this alpstore's migrations define."""
    from alembic.script import ScriptDirectory

    return {s.revision for s in ScriptDirectory.from_config(alembic_config()).walk_revisions()}


def current_revision(db: Database) -> str | None:
    """The archive's schema revision, or None for an empty database."""
    with translate_errors(db.location), db.read() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        row = conn.execute(text("SELECT version_num FROM alembic_version")).first()
    return str(row[0]) if row else None


def ensure_schema(db: Database) -> None:
    """Upgrade the archive to head (a fast no-op when it is there already); a new SQLite
    archive is created at head directly, without Alembic.

    Raises:
        SchemaVersionError: the archive's revision is unknown to this alpstore (newer).
    """
    with translate_errors(db.location):
        rev = current_revision(db)
        if rev is None:
            refuse_foreign(db)
        if rev is None and create_head_schema(db, SCHEMA_HEAD):
            return  # a new SQLite archive: the head schema directly (alpstore/db/fresh.py)
        if rev is None:  # or created by another process meanwhile
            rev = current_revision(db)
    if rev == SCHEMA_HEAD:
        return
    if rev is not None and rev not in known_revisions():
        raise SchemaVersionError(
            f"archive {db.location} has schema revision {rev!r}, which this alpstore does not "
            f"know (newest known: {SCHEMA_HEAD})",
            hint="upgrade alpstore to open it; nothing was changed",
        )
    upgrade(db)


def refuse_foreign(db: Database) -> None:
    """Refuse a database that holds tables but no alpstore archive: it is never migrated.

    Raises:
        UsageError: the database (its default schema) holds other tables.
    """
    with db.read() as conn:
        tables = set(inspect(conn).get_table_names())
    refusal = foreign_tables(db.location, tables)
    if refusal is not None:
        raise refusal


def require_current_schema(db: Database) -> None:
    """Check, without changing anything, that the archive's schema is this alpstore's head.

    A reading command opens an archive this way: it never creates tables, and never upgrades
    an older archive behind the user's back (after which an older alpstore could not open it).

    Raises:
        NotFoundError: the database holds no archive (no schema at all).
        SchemaVersionError: the schema is older (run ``alpstore db upgrade``) or newer.
    """
    check_revision(db.location, current_revision(db), known_revisions)


def upgrade(db: Database, revision: str = "head") -> None:
    """Run the migrations up to ``revision`` in one transaction."""
    from alembic import command

    with translate_errors(db.location):
        command.upgrade(alembic_config(db), revision)


def migrated_snapshot(path: Path) -> str:
    """Build a new SQLite archive at ``path`` by running every migration (Alembic), and return
    the snapshot text of its schema (what ``scripts/schema_snapshot`` writes).
    """
    url = f"sqlite:///{path}"
    db = Database(sqlite_engine(url), location=url, background_checkpoints=True)
    try:
        upgrade(db)
    finally:
        db.close()
    conn = sqlite3.connect(path)
    try:
        return render(dump_statements(conn), SCHEMA_HEAD)
    finally:
        conn.close()
