"""A segment's entries as runs (migration 0009): one ``segment_runs`` row per append, the blob
ids of positions ``start``, ``start + 1``, … in order — PostgreSQL ``INTEGER[]``, SQLite JSON
text ``[1,2,3]``. Writing one, reading one back as ids, and cutting a segment's runs at a
position (`gc`'s trim). Plain SQL on any connection (an import writes on the sqlite3 driver).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from alpstore.db import raw as rsql
from alpstore.errors import IntegrityError

if TYPE_CHECKING:
    from alpstore.db.raw import AnyConnection


def run_text(blob_ids: Sequence[int]) -> str:
    """A run's blob ids as SQLite stores them: JSON text ``[1,2,3]`` (``json_each`` reads it)."""
    return "[" + ",".join(map(str, blob_ids)) + "]"


def pg_array(blob_ids: Sequence[int]) -> str:
    """A run's blob ids as a PostgreSQL array literal ``{1,2,3}`` (cast to ``INTEGER[]``)."""
    return "{" + ",".join(map(str, blob_ids)) + "}"


def run_ids(stored: Any, seg_id: int, start: int) -> list[int]:
    """A stored run's blob ids (a PostgreSQL array arrives as a list, SQLite's as JSON text).

    Raises:
        IntegrityError: the run (of segment ``seg_id`` at ``start``) is not a list of ids.
    """
    ids: Any = stored
    if not isinstance(stored, list):
        try:
            ids = json.loads(stored)
        except (TypeError, ValueError):
            ids = None
    if not isinstance(ids, list) or not all(type(b) is int for b in ids):
        raise IntegrityError(
            f"segment {seg_id}: the run of entries at position {start} is not a list of blob ids"
            " (a damaged row)",
            hint="run `alpstore archive verify` to see what it affects; restore from a copy",
        )
    return ids


def insert_run(conn: AnyConnection, seg_id: int, start: int, blob_ids: Sequence[int]) -> None:
    """Store ``blob_ids`` as the entries of ``seg_id`` from position ``start`` on: one run row,
    nothing read back (on PostgreSQL it rides the transaction's next round trip).
    """
    if not blob_ids:
        return
    if rsql.dialect_of(conn) == "postgresql":
        sql = (
            "INSERT INTO segment_runs (segment_id, start, blob_ids) "
            "VALUES (?, ?, CAST(? AS INTEGER[]))"
        )
        rsql.execute(conn, sql, (seg_id, start, pg_array(blob_ids)), defer=True)
    else:
        sql = "INSERT INTO segment_runs (segment_id, start, blob_ids) VALUES (?, ?, ?)"
        rsql.execute(conn, sql, (seg_id, start, run_text(blob_ids)))


def insert_runs(
    conn: AnyConnection, seg_id: int, runs: Sequence[tuple[int, Sequence[int]]]
) -> None:
    """:func:`insert_run` of each ``(start, blob_ids)`` of ``runs`` (the same rows), in one
    statement (``raw.executemany``: multi-row ``VALUES``): an import's held checkpoints, a
    run each.
    """
    rows = [(seg_id, start, ids) for start, ids in runs if ids]
    if rsql.dialect_of(conn) == "postgresql":
        sql = (
            "INSERT INTO segment_runs (segment_id, start, blob_ids) "
            "VALUES (?, ?, CAST(? AS INTEGER[]))"
        )
        rsql.executemany(conn, sql, [(seg, at, pg_array(ids)) for seg, at, ids in rows])
    else:
        sql = "INSERT INTO segment_runs (segment_id, start, blob_ids) VALUES (?, ?, ?)"
        rsql.executemany(conn, sql, [(seg, at, run_text(ids)) for seg, at, ids in rows])


def ids_below(conn: AnyConnection, seg_id: int, hi: int) -> list[int]:
    """The blob ids of ``seg_id``'s entries at positions below ``hi``."""
    return range_ids(conn, seg_id, 0, hi)


RANGE_RUNS = (
    "SELECT start, blob_ids FROM segment_runs WHERE segment_id = ? AND start < ? AND start >= "
    "(SELECT COALESCE(MAX(s.start), 0) FROM segment_runs s WHERE s.segment_id = ? "
    "AND s.start <= ?) ORDER BY start"
)
"""The runs that may hold positions [lo, hi) of a segment: the one holding ``lo`` (found by the
primary key), then those after it up to ``hi`` (parameters ``seg, hi, seg, lo``)."""


def range_ids(conn: AnyConnection, seg_id: int, lo: int, hi: int) -> list[int]:
    """The blob ids at positions [lo, hi) of ``seg_id``, in order, read from its runs as
    they are stored (no row per entry: a 6,000-entry view's ids in 15 rows); a position no run
    holds is left out (the caller counts them).

    Raises:
        IntegrityError: a run is damaged.
    """
    out: list[int] = []
    for start, stored in rsql.fetchall(conn, RANGE_RUNS, (seg_id, hi, seg_id, lo)):
        at = int(start)
        ids = run_ids(stored, seg_id, at)
        out += ids[max(lo - at, 0) : max(hi - at, 0)]
    return out


def trim(conn: AnyConnection, seg_id: int, hi: int) -> None:
    """Drop ``seg_id``'s entries at positions ``hi`` and after: the runs from there deleted,
    the run holding ``hi`` cut to the positions before it.
    """
    rsql.execute(conn, "DELETE FROM segment_runs WHERE segment_id = ? AND start >= ?", (seg_id, hi))
    row = rsql.fetchone(
        conn,
        "SELECT start, blob_ids FROM segment_runs WHERE segment_id = ? AND start < ? "
        "ORDER BY start DESC LIMIT 1",
        (seg_id, hi),
    )
    if row is None:
        return
    start = int(row[0])
    ids = run_ids(row[1], seg_id, start)
    if start + len(ids) <= hi:
        return
    kept = ids[: hi - start]
    if rsql.dialect_of(conn) == "postgresql":
        sql = (
            "UPDATE segment_runs SET blob_ids = CAST(? AS INTEGER[]) "
            "WHERE segment_id = ? AND start = ?"
        )
        value = pg_array(kept)
    else:
        sql = "UPDATE segment_runs SET blob_ids = ? WHERE segment_id = ? AND start = ?"
        value = run_text(kept)
    rsql.execute(conn, sql, (value, seg_id, start))


def delete_segments(conn: AnyConnection, seg_ids: Sequence[int]) -> None:
    """Delete every run of the segments ``seg_ids``."""
    for at in range(0, len(seg_ids), 500):
        part = list(seg_ids[at : at + 500])
        marks = ", ".join("?" * len(part))
        rsql.execute(conn, f"DELETE FROM segment_runs WHERE segment_id IN ({marks})", part)


MERGE_SMALL = 256
"""A run of fewer ids than this is merged with its neighbours (:func:`merge_small`): an append
of a turn's few messages is a row with its header, array header and primary-key entry, ~80 B
on PostgreSQL beside 4 B an id (0.03x of each further raw byte of a native conversation)."""

MERGE_MOST = 480
"""The most ids a merged run holds: its PostgreSQL row (56 B + 4 B an id) stays under TOAST's
2,032-byte threshold, four to a page. Above it the array goes out of line uncompressed (pglz
saves too little on ascending ids): a 550-id run took 2.2 KB of TOAST in two chunks."""

HEADS_SINCE = (
    "SELECT DISTINCT head_segment_id FROM sessions WHERE updated_at >= ? "
    "AND head_segment_id IS NOT NULL"
)
"""The head segments of the sessions written at or after a time: where new small runs are."""


SEVERAL_RUNS = (
    "SELECT segment_id FROM segment_runs GROUP BY segment_id HAVING count(*) > 1 "
    "ORDER BY segment_id"
)
"""The segments holding more than one run (where :func:`merge_small` may find neighbours)."""


def merge_small(conn: AnyConnection, seg_id: int, since: int = 0) -> tuple[int, int]:
    """Merge ``seg_id``'s small runs (fewer than :data:`MERGE_SMALL` ids) from position
    ``since`` on, neighbours that together hold at most :data:`MERGE_MOST`, each group into
    one run: the same ids at the same positions, fewer rows. Only runs wholly below the
    segment's length (fixed entries: a writer appends at the tip). On PostgreSQL the segment's
    row is locked ``FOR KEY SHARE`` first: `gc` (``exclude_writers``) cannot trim it meanwhile,
    and a writer growing it is not held up; the runs are read ``FOR UPDATE``, so another
    process merging the same runs makes this one skip them (gone, a gap between groups).
    ``(runs removed, where the next merge may start)``.

    Raises:
        IntegrityError: a run is damaged.
    """
    pg = rsql.dialect_of(conn) == "postgresql"
    lock = " FOR KEY SHARE" if pg else ""
    row = rsql.fetchone(conn, f"SELECT length FROM segments WHERE id = ?{lock}", (seg_id,))
    if row is None:
        return 0, since
    length = int(row[0])
    rows = rsql.fetchall(  # (another process merging them: their rows are gone when it ends)
        conn,
        "SELECT start, blob_ids FROM segment_runs WHERE segment_id = ? AND start >= ? "
        f"AND start < ? ORDER BY start{' FOR UPDATE' if pg else ''}",
        (seg_id, since, length),
    )
    groups: list[list[tuple[int, list[int]]]] = [[]]
    end = since
    held = 0  # ids in the last group
    for start, stored in rows:
        at = int(start)
        ids = run_ids(stored, seg_id, at)
        if at + len(ids) > length:
            break
        if groups[-1] and (at != end or held + len(ids) > MERGE_MOST or len(ids) >= MERGE_SMALL):
            groups.append([])
            held = 0
        if len(ids) < MERGE_SMALL:
            groups[-1].append((at, ids))
            held += len(ids)
        end = at + len(ids)
    removed = 0
    for group in groups:
        if len(group) < 2:
            continue
        starts = [at for at, _ in group]
        rsql.execute(
            conn,
            "DELETE FROM segment_runs WHERE segment_id = ? "
            f"AND start IN ({rsql.placeholders(len(starts))})",
            (seg_id, *starts),
        )
        insert_run(conn, seg_id, starts[0], [b for _, ids in group for b in ids])
        removed += len(group) - 1
    tail = groups[-1]
    if tail and held < MERGE_SMALL:
        end = tail[0][0]  # still small: merged again with the runs that follow
    return removed, end
