"""A closed LangGraph turn's blobs as one array in its row: ``lg_turns.blob_ids`` (issue 42).

Since 0011 a closed turn's blobs (what its states' channel refs and its pending writes' items
name, ~6 a turn in a tool loop) were ``lg_turn_blobs`` rows, each with its primary key entry and
a ``blob_id`` index entry: on PostgreSQL 0.175× of the raw conversation at 1,000 turns (a
24-byte tuple header and two 16-byte index entries per blob), on SQLite 0.042×. They are read
only by GC (its mark and its sweep's check) and ``archive verify``, both of which scan. Now the
ids are one column of the turn row (PostgreSQL ``INTEGER[]``, SQLite JSON text ``[1,2,3]``,
ascending, NULL when there are none), and ``lg_turn_blobs`` is a VIEW of the old shape
``(turn_ref, blob_id)`` over it (``unnest`` / ``json_each``), as ``segment_entries`` became one
over ``segment_runs`` in 0009: SQL written against it, GC and verify read it unchanged.

Upgrade: the column added, filled from the table's rows, the table dropped, the view made.
Downgrade: the view dropped, the table and its index made again from the arrays, the column
dropped.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_INTS = sa.Text().with_variant(ARRAY(sa.Integer()), "postgresql")

VIEW_SQL = {
    "postgresql": (
        "CREATE VIEW lg_turn_blobs AS\n"
        "SELECT t.id AS turn_ref,\n"
        "       u.blob_id AS blob_id\n"
        "FROM lg_turns t\n"
        "CROSS JOIN LATERAL unnest(t.blob_ids) AS u (blob_id)"
    ),
    "sqlite": (
        "CREATE VIEW lg_turn_blobs AS\n"
        "SELECT t.id AS turn_ref,\n"
        "       j.value AS blob_id\n"
        "FROM lg_turns t, json_each(t.blob_ids) j"
    ),
}

FILL_SQL = {
    "postgresql": (
        "UPDATE lg_turns t SET blob_ids = b.ids FROM (SELECT turn_ref, "
        "array_agg(blob_id ORDER BY blob_id) AS ids FROM lg_turn_blobs GROUP BY turn_ref) b "
        "WHERE b.turn_ref = t.id"
    ),
    "sqlite": (
        "UPDATE lg_turns SET blob_ids = (SELECT json_group_array(blob_id) FROM (SELECT blob_id "
        "FROM lg_turn_blobs b WHERE b.turn_ref = lg_turns.id ORDER BY blob_id)) "
        "WHERE id IN (SELECT turn_ref FROM lg_turn_blobs)"
    ),
}


def upgrade() -> None:
    conn = op.get_bind()
    dialect = conn.dialect.name
    op.add_column(
        "lg_turns",
        sa.Column("blob_ids", _INTS, nullable=True),
    )
    conn.exec_driver_sql(FILL_SQL[dialect])
    op.drop_index(op.f("ix_lg_turn_blobs_blob_id"), table_name="lg_turn_blobs")
    op.drop_table("lg_turn_blobs")
    conn.exec_driver_sql(VIEW_SQL[dialect])


def downgrade() -> None:
    conn = op.get_bind()
    conn.exec_driver_sql("DROP VIEW lg_turn_blobs")
    op.create_table(
        "lg_turn_blobs",
        sa.Column("turn_ref", sa.Integer(), nullable=False),
        sa.Column("blob_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["turn_ref"], ["lg_turns.id"], name=op.f("fk_lg_turn_blobs_turn_ref_lg_turns")
        ),
        sa.PrimaryKeyConstraint("turn_ref", "blob_id", name=op.f("pk_lg_turn_blobs")),
        comment="The blobs a closed LangGraph turn's states and pending writes refer to (0011).",
        sqlite_with_rowid=False,
    )
    op.create_index(op.f("ix_lg_turn_blobs_blob_id"), "lg_turn_blobs", ["blob_id"], unique=False)
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(
            "INSERT INTO lg_turn_blobs (turn_ref, blob_id) SELECT DISTINCT t.id, u.b "
            "FROM lg_turns t CROSS JOIN LATERAL unnest(t.blob_ids) AS u (b)"
        )
    else:
        conn.exec_driver_sql(
            "INSERT INTO lg_turn_blobs (turn_ref, blob_id) SELECT DISTINCT t.id, j.value "
            "FROM lg_turns t, json_each(t.blob_ids) j"
        )
    # SQLite 3.35+ drops a column in place (no table rebuild; nothing indexes it)
    conn.exec_driver_sql("ALTER TABLE lg_turns DROP COLUMN blob_ids")
