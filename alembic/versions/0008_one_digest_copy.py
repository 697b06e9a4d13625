"""One copy of each blob digest on SQLite (issue 33).

Until 0007 ``blobs.digest`` (32 bytes) was held twice: in the row and in the unique index
``uq_blobs_digest`` (on the 1,000-turn benchmark corpus the index alone was 238 KB of a 1.15 MB
archive, 0.08× the conversation). On SQLite the table is rebuilt without that constraint and
looked up through ``ix_blobs_digest_prefix``, an index on the digest's first
:data:`PREFIX` bytes: a lookup reads the index entries of that prefix and compares the whole
digest in the rows (``alpstore.archive.reading.digest_rows``). Uniqueness holds because a
SQLite writer holds the whole database (``BEGIN IMMEDIATE``) and inserts only the digests its own
transaction looked up and did not find.

PostgreSQL keeps ``uq_blobs_digest``: concurrent writers there insert ``ON CONFLICT (digest)
DO NOTHING`` and need the database to decide which one stored a digest first.

Also on SQLite: ``ix_segment_entries_blob_id`` is dropped (70 KB, 0.023× the conversation, on
the same corpus). It served the foreign key's check when a blob is deleted; GC, which deletes
blobs, now sweeps with enforcement off and checks its own deletes in one pass per referring
table (``alpstore.db.sweep.check_unreferenced``). PostgreSQL keeps it.

The rebuild copies the table once (O(blobs), on the first open by this alpstore), keeps every
id and the table's ``sqlite_sequence`` value (ids are never reused, 0004), and runs with foreign
keys off and the SQL views dropped meanwhile (as 0004 did).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import re

from sqlalchemy import Connection

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

PREFIX = 4
"""Bytes of the digest the SQLite lookup index holds (``alpstore.archive.reading``)."""

INDEX = f"CREATE INDEX ix_blobs_digest_prefix ON blobs (substr(digest, 1, {PREFIX}))"
_UNIQUE = re.compile(r",\s*CONSTRAINT uq_blobs_digest UNIQUE \(digest\)")


def _rebuild_blobs(conn: Connection, transform: object) -> None:
    """Rebuild ``blobs`` with ``transform`` applied to its DDL; rows, ids, the other indexes
    and the ``sqlite_sequence`` value kept."""
    master = conn.exec_driver_sql(
        "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE sql IS NOT NULL"
    ).all()
    views = [(name, sql) for kind, name, _, sql in master if kind == "view"]
    ddl = next(sql for kind, name, _, sql in master if kind == "table" and name == "blobs")
    indexes = [
        sql
        for kind, name, table, sql in master
        if kind == "index" and table == "blobs" and name != "ix_blobs_digest_prefix"
    ]
    seq = conn.exec_driver_sql("SELECT seq FROM sqlite_sequence WHERE name = 'blobs'").scalar()
    for name, _ in views:
        conn.exec_driver_sql(f"DROP VIEW {name}")
    new_ddl = transform(ddl)  # type: ignore[operator]
    new_ddl = re.sub(r'^CREATE TABLE "?blobs"?', "CREATE TABLE blobs_rebuilt", new_ddl, count=1)
    conn.exec_driver_sql(new_ddl)
    conn.exec_driver_sql("INSERT INTO blobs_rebuilt SELECT * FROM blobs")
    conn.exec_driver_sql("DROP TABLE blobs")
    conn.exec_driver_sql("ALTER TABLE blobs_rebuilt RENAME TO blobs")
    if seq is not None:
        conn.exec_driver_sql("UPDATE sqlite_sequence SET seq = ? WHERE name = 'blobs'", (int(seq),))
    for sql in indexes:
        conn.exec_driver_sql(sql)
    for _, sql in views:
        conn.exec_driver_sql(sql)


def _without_unique(ddl: str) -> str:
    if not _UNIQUE.search(ddl):
        raise RuntimeError(f"unexpected blobs table definition: {ddl[:120]}")
    return _UNIQUE.sub("", ddl, count=1)


def _with_unique(ddl: str) -> str:
    cut = ddl.rstrip().rfind(")")
    return ddl[:cut].rstrip() + ", \n\tCONSTRAINT uq_blobs_digest UNIQUE (digest)\n)"


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "sqlite":
        return
    _rebuild_blobs(conn, _without_unique)
    conn.exec_driver_sql(INDEX)
    conn.exec_driver_sql("DROP INDEX IF EXISTS ix_segment_entries_blob_id")


def downgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "sqlite":
        return
    conn.exec_driver_sql("DROP INDEX IF EXISTS ix_blobs_digest_prefix")
    _rebuild_blobs(conn, _with_unique)
    conn.exec_driver_sql(
        "CREATE INDEX IF NOT EXISTS ix_segment_entries_blob_id ON segment_entries (blob_id)"
    )
