"""A segment's entries as runs: one row per append instead of one row per entry (issue 42).

``segment_entries`` held a heap row, a primary-key entry and (PostgreSQL) a ``blob_id`` index
entry per message: ~84 B a message on PostgreSQL, 0.191× of each further raw byte. The table
``segment_runs`` holds the blob ids of one append in order, keyed by ``(segment_id, start)``
(``start``: the absolute position of its first entry): PostgreSQL ``INTEGER[]``, SQLite JSON
text ``[1,2,3]`` (plain ``sqlite3`` unnests it with ``json_each``). ``segment_entries`` becomes a
VIEW of the old shape ``(segment_id, position, blob_id)``, so SQL written against it runs
unchanged; alpstore's own range reads go to the runs through the primary key
(``alpstore.views.RUN_ENTRIES``).

Existing rows are converted in place: each segment's consecutive positions grouped into runs
split at the segment's checkpoint lengths (one run per recorded turn, as the writer now stores
them), at any gap, and at :data:`MAX_RUN` entries. The downgrade rebuilds the table from the
view. Views that read ``segment_entries`` (``session_summary``) are dropped and recreated around
the swap with their own definitions.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator

from sqlalchemy import Connection

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

MAX_RUN = 4096
"""Entries in one converted run at most (a long import without checkpoints)."""

VIEW_SQL = {
    "postgresql": (
        "CREATE VIEW segment_entries AS\n"
        "SELECT r.segment_id AS segment_id,\n"
        "       CAST(r.start + u.o - 1 AS INTEGER) AS position,\n"
        "       u.blob_id AS blob_id\n"
        "FROM segment_runs r\n"
        "CROSS JOIN LATERAL unnest(r.blob_ids) WITH ORDINALITY AS u (blob_id, o)"
    ),
    "sqlite": (
        "CREATE VIEW segment_entries AS\n"
        "SELECT r.segment_id AS segment_id,\n"
        "       r.start + j.key AS position,\n"
        "       j.value AS blob_id\n"
        "FROM segment_runs r, json_each(r.blob_ids) j"
    ),
}

RUNS_SQL = {
    "postgresql": (
        "CREATE TABLE segment_runs (\n"
        "\tsegment_id INTEGER NOT NULL, \n"
        "\tstart INTEGER NOT NULL, \n"
        "\tblob_ids INTEGER[] NOT NULL, \n"
        "\tCONSTRAINT pk_segment_runs PRIMARY KEY (segment_id, start), \n"
        "\tCONSTRAINT fk_segment_runs_segment_id_segments FOREIGN KEY(segment_id) "
        "REFERENCES segments (id)\n)"
    ),
    "sqlite": (
        "CREATE TABLE segment_runs (\n"
        "\tsegment_id INTEGER NOT NULL, \n"
        "\tstart INTEGER NOT NULL, \n"
        "\tblob_ids TEXT NOT NULL, \n"
        "\tCONSTRAINT pk_segment_runs PRIMARY KEY (segment_id, start), \n"
        "\tCONSTRAINT fk_segment_runs_segment_id_segments FOREIGN KEY(segment_id) "
        "REFERENCES segments (id)\n) WITHOUT ROWID"
    ),
}

COMMENT = "One row per append: the blob ids of a segment's entries from position start on."


def _dependent_views(conn: Connection) -> list[tuple[str, str]]:
    """``(name, CREATE VIEW …)`` of every SQL view that reads ``segment_entries``."""
    if conn.dialect.name == "sqlite":
        rows = conn.exec_driver_sql(
            "SELECT name, sql FROM sqlite_master WHERE type = 'view' "
            "AND name <> 'segment_entries' AND sql LIKE '%segment_entries%' ORDER BY rowid"
        ).all()
        return [(str(n), str(s)) for n, s in rows]
    # The names first, each definition after: in one statement the planner may call
    # pg_get_viewdef on every view of the database before the schema filter, and fail on a
    # view another session drops meanwhile ("could not open relation with OID").
    names = conn.exec_driver_sql(
        "SELECT c.oid, c.relname FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind = 'v' AND n.nspname = current_schema() "
        "AND c.relname <> 'segment_entries' ORDER BY c.oid"
    ).all()
    views = []
    for oid, name in names:
        (sql,) = conn.exec_driver_sql("SELECT pg_get_viewdef(%s::oid)", (int(oid),)).one()
        if "segment_entries" in str(sql):
            views.append((str(name), f"CREATE VIEW {name} AS\n{sql}"))
    return views


def _drop_dependent_views(conn: Connection) -> list[tuple[str, str]]:
    """Drop the views that read ``segment_entries``; their definitions, to recreate them."""
    views = _dependent_views(conn)
    for name, _ in reversed(views):
        conn.exec_driver_sql(f"DROP VIEW {name}")
    return views


def _runs(conn: Connection) -> Iterator[tuple[int, int, list[int]]]:
    """Each segment's entries grouped into runs (see the module docstring)."""
    cuts: dict[int, set[int]] = defaultdict(set)
    for seg, length in conn.exec_driver_sql("SELECT segment_id, length FROM checkpoints"):
        if seg is not None:
            cuts[int(seg)].add(int(length))
    current: int | None = None
    start, ids = 0, list[int]()
    rows = conn.exec_driver_sql(
        "SELECT segment_id, position, blob_id FROM segment_entries ORDER BY segment_id, position"
    )
    for seg, pos, blob in rows:
        seg, pos = int(seg), int(pos)
        if ids and (
            seg != current
            or pos != start + len(ids)
            or pos in cuts.get(seg, ())
            or len(ids) >= MAX_RUN
        ):
            yield current, start, ids  # type: ignore[misc]
            ids = []
        if not ids:
            current, start = seg, pos
        ids.append(int(blob))
    if ids:
        yield current, start, ids  # type: ignore[misc]


def upgrade() -> None:
    conn = op.get_bind()
    dialect = conn.dialect.name
    views = _drop_dependent_views(conn)
    conn.exec_driver_sql(RUNS_SQL[dialect])
    if dialect == "postgresql":
        quoted = COMMENT.replace("'", "''")
        conn.exec_driver_sql(f"COMMENT ON TABLE segment_runs IS '{quoted}'")
    mark = "%s" if dialect == "postgresql" else "?"
    insert = (
        f"INSERT INTO segment_runs (segment_id, start, blob_ids) VALUES ({mark}, {mark}, {mark})"
    )
    batch: list[tuple[int, int, object]] = []
    for seg, start, ids in _runs(conn):  # an array on PostgreSQL, JSON text on SQLite
        value = ids if dialect == "postgresql" else json.dumps(ids, separators=(",", ":"))
        batch.append((seg, start, value))
        if len(batch) >= 1000:
            conn.exec_driver_sql(insert, batch)
            batch = []
    if batch:
        conn.exec_driver_sql(insert, batch)
    conn.exec_driver_sql("DROP TABLE segment_entries")
    conn.exec_driver_sql(VIEW_SQL[dialect])
    for _, sql in views:
        conn.exec_driver_sql(sql)


ENTRIES_SQL = (
    "CREATE TABLE segment_entries (\n"
    "\tsegment_id INTEGER NOT NULL, \n"
    "\tposition INTEGER NOT NULL, \n"
    "\tblob_id INTEGER NOT NULL, \n"
    "\tCONSTRAINT pk_segment_entries PRIMARY KEY (segment_id, position), \n"
    "\tCONSTRAINT fk_segment_entries_blob_id_blobs FOREIGN KEY(blob_id) REFERENCES blobs (id), \n"
    "\tCONSTRAINT fk_segment_entries_segment_id_segments FOREIGN KEY(segment_id) "
    "REFERENCES segments (id)\n)"
)
"""The table as 0001 made it (SQLite: ``WITHOUT ROWID``; PostgreSQL: its ``blob_id`` index)."""


def downgrade() -> None:
    conn = op.get_bind()
    dialect = conn.dialect.name
    views = _drop_dependent_views(conn)
    rows = conn.exec_driver_sql(
        "SELECT segment_id, position, blob_id FROM segment_entries ORDER BY segment_id, position"
    ).all()
    conn.exec_driver_sql("DROP VIEW segment_entries")
    if dialect == "postgresql":
        conn.exec_driver_sql(ENTRIES_SQL)
        conn.exec_driver_sql("CREATE INDEX ix_segment_entries_blob_id ON segment_entries (blob_id)")
        conn.exec_driver_sql(
            "COMMENT ON TABLE segment_entries IS 'One row per appended covering entry; "
            "position is absolute in the covering list.'"
        )
        insert = "INSERT INTO segment_entries (segment_id, position, blob_id) VALUES (%s, %s, %s)"
    else:
        conn.exec_driver_sql(ENTRIES_SQL + "\n WITHOUT ROWID")
        insert = "INSERT INTO segment_entries (segment_id, position, blob_id) VALUES (?, ?, ?)"
    for at in range(0, len(rows), 5000):
        conn.exec_driver_sql(insert, [tuple(r) for r in rows[at : at + 5000]])
    conn.exec_driver_sql("DROP TABLE segment_runs")
    for _, sql in views:
        conn.exec_driver_sql(sql)
