"""What a sweep that deletes blobs checks itself (GC on SQLite runs with foreign keys off,
migration 0008; a segment run's blob ids have no foreign key, 0009): which columns refer to
blobs, and that none of them names a doomed one.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, text

from alpstore.db.tables import BLOB_REFERENCES
from alpstore.errors import IntegrityError


def blob_root_columns() -> list[tuple[str, str]]:
    """``(table, column)`` pairs that reference ``blobs.id`` and keep a blob alive (their
    foreign keys went in 0010: a packed blob has no row they could name).
    """
    return [(t, c) for t, c in BLOB_REFERENCES if t != "blob_refs"]


def check_unreferenced(conn: Connection, doomed: list[int]) -> None:
    """What foreign keys would check for the blobs a sweep deletes, in one pass over each
    table that refers to blobs: no row left after the sweep names one of them (a summary's
    references go with it). Runs after the entries and segments are deleted, before the blobs.

    Both backends check every column: no foreign key names a blob since 0010 (a segment run's
    blob ids, 0009, never had one), and SQLite's GC runs with its foreign keys off.

    Raises:
        IntegrityError: a row still refers to a blob about to be deleted (nothing is deleted:
            the transaction rolls back).
    """
    if not doomed:
        return
    checks = [(t, c, "") for t, c in blob_root_columns()]
    checks.append(("segment_entries", "blob_id", ""))
    if conn.dialect.name != "sqlite":  # no foreign key names a blob since 0010: every column,
        # in one statement (one round trip to a remote server), the first row found refused
        doomed_ids = "CAST(:ids AS INTEGER[])"
        parts = [
            f"(SELECT '{table}', '{column}', {column} FROM {table} "
            f"WHERE {column} = ANY({doomed_ids}) LIMIT 1)"
            for table, column, _ in checks
        ]
        parts.append(
            f"(SELECT 'blob_refs', 'child_id', child_id FROM blob_refs WHERE child_id = "
            f"ANY({doomed_ids}) AND NOT parent_id = ANY({doomed_ids}) LIMIT 1)"
        )
        found = conn.execute(text(" UNION ALL ".join(parts)), {"ids": doomed}).first()
        if found is not None:
            _refuse((found[2],), str(found[0]), str(found[1]))
        return
    conn.exec_driver_sql("CREATE TEMP TABLE IF NOT EXISTS gc_doomed (id INTEGER PRIMARY KEY)")
    try:
        conn.exec_driver_sql("DELETE FROM temp.gc_doomed")
        conn.exec_driver_sql("INSERT INTO temp.gc_doomed (id) VALUES (?)", [(i,) for i in doomed])
        checks.append(
            ("blob_refs", "child_id", " AND parent_id NOT IN (SELECT id FROM temp.gc_doomed)")
        )
        for table, column, extra in checks:
            found = conn.exec_driver_sql(
                f"SELECT {column} FROM {table} WHERE {column} IN "
                f"(SELECT id FROM temp.gc_doomed){extra} LIMIT 1"
            ).first()
            _refuse(found, table, column)
    finally:
        conn.exec_driver_sql("DROP TABLE IF EXISTS temp.gc_doomed")


def _refuse(found: Row[Any] | tuple[Any, ...] | None, table: str, column: str) -> None:
    if found is not None:
        raise IntegrityError(
            f"archive gc: {table}.{column} still refers to blob id {found[0]}, which the "
            "sweep would delete; nothing was removed"
        )
