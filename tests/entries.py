"""Tampering with one view entry for the damage tests: since 0009 a segment's entries are runs
(``segment_runs``, one row per append) and ``segment_entries`` is a read-only view, so an entry
is changed inside the run that holds it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from alpstore.db import raw as rsql
from alpstore.db.runs import pg_array, run_ids, run_text

if TYPE_CHECKING:
    from alpstore.db.raw import AnyConnection

HOLDING = "start <= {p} AND start + json_array_length(blob_ids) > {p}"
"""SQLite: the run that holds position ``p`` (format it)."""


def set_entry_sql(position: int, blob: str) -> str:
    """SQLite: point every entry at ``position`` at the blob id the SQL expression ``blob``
    gives (the old ``UPDATE segment_entries SET blob_id = … WHERE position = …``)."""
    return (
        f"UPDATE segment_runs SET blob_ids = json_set(blob_ids, '$[' || ({position} - start) "
        f"|| ']', {blob}) WHERE {HOLDING.format(p=position)}"
    )


def drop_entry_sql(position: int) -> str:
    """SQLite: remove the entries at ``position`` from their runs (those after move down)."""
    return (
        f"UPDATE segment_runs SET blob_ids = json_remove(blob_ids, '$[' || ({position} - start) "
        f"|| ']') WHERE {HOLDING.format(p=position)}"
    )


def move_run_sql(position: int, by: int) -> str:
    """SQLite: move the runs holding ``position`` ``by`` positions on."""
    return f"UPDATE segment_runs SET start = start + {by} WHERE {HOLDING.format(p=position)}"


def set_entry(conn: AnyConnection, segment: int, position: int, blob_id: int) -> None:
    """Point entry ``position`` of ``segment`` at ``blob_id`` (either backend)."""
    row = rsql.fetchone(
        conn,
        "SELECT start, blob_ids FROM segment_runs WHERE segment_id = ? AND start <= ? "
        "ORDER BY start DESC LIMIT 1",
        (segment, position),
    )
    assert row is not None, (segment, position)
    start = int(row[0])
    ids = run_ids(row[1], segment, start)
    ids[position - start] = blob_id
    if rsql.dialect_of(conn) == "postgresql":
        sql, value = "UPDATE segment_runs SET blob_ids = CAST(? AS INTEGER[])", pg_array(ids)
    else:
        sql, value = "UPDATE segment_runs SET blob_ids = ?", run_text(ids)
    rsql.execute(conn, sql + " WHERE segment_id = ? AND start = ?", (value, segment, start))
