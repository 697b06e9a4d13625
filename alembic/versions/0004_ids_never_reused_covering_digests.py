"""Integrity beside GC in long-lived processes (issue 13).

1. Ids are never reused. On SQLite every table with an integer surrogate key is rebuilt with
   ``INTEGER PRIMARY KEY AUTOINCREMENT`` (without it SQLite hands the id of a deleted newest row
   to the next insert, and a long-lived process's cache keyed by that id then names another
   row). PostgreSQL's sequences never hand an id out twice: nothing to do there. The rebuild
   copies each table once (O(archive size), on the first open by this alpstore).
2. ``segments.sealed``: GC seals a segment it trims, so positions it once held are never
   written again; a view ``(segment, length)`` then names the same entries for as long as the
   segment exists.
3. Covering digests: ``checkpoints.covering_digest`` (of the checkpoint's covering list) and
   ``sessions.head_digest`` (of the live head, so the next checkpoint's is O(delta)). Computed
   here for every existing checkpoint and head, in one pass over the entries.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from sqlalchemy import Connection

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

ID_TABLES = (
    "zstd_dicts",
    "blobs",
    "sessions",
    "segments",
    "checkpoints",
    "backtracks",
    "session_events",
    "lg_threads",
    "lg_runs",
    "lg_checkpoints",
    "lg_writes",
)
"""The tables whose rows are named by an integer ``id`` (every other table's key is composite)."""

_TABLE_PK = re.compile(r",\s*CONSTRAINT (pk_\w+) PRIMARY KEY \(id\)")
_ID_COLUMN = re.compile(r"\(\s*id INTEGER NOT NULL(?= *,)")
_ID_AUTOINCREMENT = re.compile(
    r"\(\s*id INTEGER NOT NULL CONSTRAINT (pk_\w+) PRIMARY KEY AUTOINCREMENT"
)


def _autoincrement(ddl: str) -> str:
    """A table's DDL with its id declared ``PRIMARY KEY AUTOINCREMENT`` (constraint name kept)."""
    pk = _TABLE_PK.search(ddl)
    if pk is None or not _ID_COLUMN.search(ddl):
        raise RuntimeError(f"unexpected table definition: {ddl[:80]}")
    ddl = _TABLE_PK.sub("", ddl, count=1)
    return _ID_COLUMN.sub(
        f"(\n\tid INTEGER NOT NULL CONSTRAINT {pk.group(1)} PRIMARY KEY AUTOINCREMENT", ddl, count=1
    )


def _plain(ddl: str) -> str:
    """The reverse of ``_autoincrement``."""
    found = _ID_AUTOINCREMENT.search(ddl)
    if found is None:
        raise RuntimeError(f"unexpected table definition: {ddl[:80]}")
    ddl = _ID_AUTOINCREMENT.sub("(\n\tid INTEGER NOT NULL", ddl, count=1)
    cut = ddl.rstrip().rfind(")")
    return ddl[:cut].rstrip() + f", \n\tCONSTRAINT {found.group(1)} PRIMARY KEY (id)\n)"


def _rebuild_sqlite(conn: Connection, transform: object) -> None:
    """Rebuild each id table with ``transform`` applied to its DDL, rows and indexes kept.

    Runs with foreign keys off (alembic/env.py; a dropped table is referenced by others) and
    the SQL views dropped meanwhile (SQLite checks them when a table is renamed).
    """
    master = conn.exec_driver_sql(
        "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE sql IS NOT NULL"
    ).all()
    views = [(name, sql) for kind, name, _, sql in master if kind == "view"]
    for name, _ in views:
        conn.exec_driver_sql(f"DROP VIEW {name}")
    for table in ID_TABLES:
        ddl = next((sql for k, n, _, sql in master if k == "table" and n == table), None)
        if ddl is None:
            continue
        indexes = [sql for k, _, t, sql in master if k == "index" and t == table]
        new_ddl = transform(ddl)  # type: ignore[operator]
        new_ddl = re.sub(
            rf"^CREATE TABLE \"?{table}\"?", f"CREATE TABLE {table}_rebuilt", new_ddl, count=1
        )
        conn.exec_driver_sql(new_ddl)
        conn.exec_driver_sql(f"INSERT INTO {table}_rebuilt SELECT * FROM {table}")
        conn.exec_driver_sql(f"DROP TABLE {table}")
        conn.exec_driver_sql(f"ALTER TABLE {table}_rebuilt RENAME TO {table}")
        for sql in indexes:
            conn.exec_driver_sql(sql)
    for _, sql in views:
        conn.exec_driver_sql(sql)


def _backfill_digests(conn: Connection) -> None:
    """Record the covering digest of every checkpoint and every session head."""
    from alpstore.views import View, cover_bytes, covers_of_views

    heads = conn.exec_driver_sql("SELECT id, head_segment_id, head_length FROM sessions").all()
    cks = conn.exec_driver_sql("SELECT id, segment_id, length FROM checkpoints").all()
    views = [View(seg, int(n)) for _, seg, n in [*heads, *cks]]
    covers = covers_of_views(conn, views, before_0010=True)
    sessions = sa.table("sessions", sa.column("id"), sa.column("head_digest"))
    checkpoints = sa.table("checkpoints", sa.column("id"), sa.column("covering_digest"))
    for table, rows, column in (
        (sessions, heads, "head_digest"),
        (checkpoints, cks, "covering_digest"),
    ):
        for row_id, seg, n in rows:
            conn.execute(
                table.update()
                .where(table.c.id == row_id)
                .values({column: cover_bytes(covers[View(seg, int(n))])})
            )


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "sqlite":
        _rebuild_sqlite(conn, _autoincrement)
    op.add_column(
        "segments",
        sa.Column(
            "sealed",
            sa.Boolean(name="ck_segments_sealed"),
            server_default=sa.false(),
            nullable=False,
        ),
    )
    op.add_column("sessions", sa.Column("head_digest", sa.LargeBinary(length=32), nullable=True))
    op.add_column(
        "checkpoints", sa.Column("covering_digest", sa.LargeBinary(length=32), nullable=True)
    )
    _backfill_digests(conn)


def downgrade() -> None:
    conn = op.get_bind()
    # plain DROP COLUMN (SQLite >= 3.35), as in 0003: no batch rebuild under the SQL views
    op.drop_column("checkpoints", "covering_digest")
    op.drop_column("sessions", "head_digest")
    op.drop_column("segments", "sealed")
    if conn.dialect.name == "sqlite":
        _rebuild_sqlite(conn, _plain)
