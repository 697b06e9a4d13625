"""Archive-wide maintenance: structural verify (naming what damage affects) and garbage collection.

GC marks from every session head and every checkpoint (retained or kept for debugging), trims
each segment to the longest prefix any view still needs, and sweeps blobs nothing references.
Blob roots are found from the schema itself: every column with a foreign key to ``blobs.id``
(except the summary edges, which are followed), so tables added later are protected too.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Table, delete, func, select

from alpstore.archive.base import Problem, VerifyReport
from alpstore.db import runs
from alpstore.db.members import DESCRIPTION, Described
from alpstore.db.sweep import blob_root_columns, check_unreferenced
from alpstore.db.tables import (
    blob_refs,
    blob_rows,
    blobs,
    checkpoints,
    metadata,
    segment_entries,
    segments,
    sessions,
    view_metadata,
)
from alpstore.views import View, cover_bytes, covers_of_views

if TYPE_CHECKING:
    from alpstore.core.store import CoreStore as Store


@dataclass
class GcReport:
    """What a garbage collection removed (or would remove, on a dry run)."""

    segments_removed: int = 0
    entries_removed: int = 0
    blobs_removed: int = 0
    bytes_freed: int = 0
    dry_run: bool = False
    frames_deleted: int = 0
    """Pack frames no blob pointed into any more."""
    frames_rewritten: int = 0
    """Pack frames rewritten without their dead blobs (past ``REPACK_DEAD``)."""


@dataclass
class _Views:
    """Every view in the archive: session heads and checkpoints, with who owns them."""

    items: list[tuple[View, str, int | None]] = field(default_factory=list)
    digests: list[bytes | None] = field(default_factory=list)
    """The covering digest recorded for each item (None: not recorded)."""


def _all_views(conn: Connection) -> _Views:
    out = _Views()
    for uuid, seg, length, digest in conn.execute(
        select(
            sessions.c.uuid,
            sessions.c.head_segment_id,
            sessions.c.head_length,
            sessions.c.head_digest,
        )
    ):
        out.items.append((View(seg, int(length)), uuid, None))
        out.digests.append(None if digest is None else bytes(digest))
    # each checkpoint with its session's uuid in the same statement (a row without its
    # session, in a damaged file, is still a view to keep and to check)
    for ck_id, sid, uuid, seg, length, digest in conn.execute(
        select(
            checkpoints.c.id,
            checkpoints.c.session_id,
            sessions.c.uuid,
            checkpoints.c.segment_id,
            checkpoints.c.length,
            checkpoints.c.covering_digest,
        ).outerjoin(sessions, sessions.c.id == checkpoints.c.session_id)
    ):
        owner = uuid if uuid is not None else f"<missing session {sid}>"
        out.items.append((View(seg, int(length)), owner, int(ck_id)))
        out.digests.append(None if digest is None else bytes(digest))
    return out


def _shapes(conn: Connection) -> dict[int, tuple[int | None, int, int]]:
    """``{segment: (parent, base_length, length)}`` for every segment."""
    return {
        int(i): (p, int(b), int(n))
        for i, p, b, n in conn.execute(
            select(segments.c.id, segments.c.parent_id, segments.c.base_length, segments.c.length)
        )
    }


def _chain(
    shapes: dict[int, tuple[int | None, int, int]], view: View
) -> list[tuple[int, int, int]]:
    out = []
    seg, hi = view.segment_id, view.length
    while seg is not None and hi > 0 and seg in shapes:
        parent, base, _ = shapes[seg]
        lo = min(base, hi)
        if hi > lo:
            out.append((seg, lo, hi))
        seg, hi = parent, lo
    return out


def gc(store: Store, *, dry_run: bool = False) -> GcReport:
    """Remove what no view and no row references, in one write transaction.

    On PostgreSQL the transaction may be chosen as a deadlock's victim (its table locks meet a
    writer's row locks taken in the other order); it is then run again from the start, as
    every writer's is (``Database.retrying``), instead of failing the collection.
    """
    return store.db.retrying(lambda: _gc_once(store, dry_run), what="archive gc")


def _gc_once(store: Store, dry_run: bool) -> GcReport:
    report = GcReport(dry_run=dry_run)
    # foreign keys unenforced on SQLite, and none on a segment run's blob ids (0009): the sweep
    # checks its blobs itself, in one pass per referring table (db.sweep.check_unreferenced),
    # where SQLite would scan the entries once per deleted blob
    with store.db.atomic(snapshot=True, foreign_keys=False) as conn:
        store.db.exclude_writers(conn)  # no blob may gain a reference between mark and sweep
        shapes = _shapes(conn)
        need: dict[int, int] = {}
        for view, _, _ in _all_views(conn).items:
            if view.segment_id in shapes:  # named even when it adds no entry to the view
                need.setdefault(view.segment_id, 0)  # (a head cut back to its branch point)
            for seg, _lo, hi in _chain(shapes, view):
                if need.get(seg, 0) >= hi:
                    break
                need[seg] = hi
        # a segment is kept while a kept segment descends from it, even with base_length 0
        keep = set(need)
        for seg in list(need):
            parent = shapes[seg][0]
            while parent is not None and parent not in keep:
                keep.add(parent)
                need.setdefault(parent, 0)
                parent = shapes[parent][0]
        # a kept segment's parent keeps at least the prefix it branches from: trimming the
        # parent below a child's base_length would leave a segment that verify (rightly)
        # reports as branching from a short segment (found by the kill -9 test after a GC)
        for seg in keep:
            parent, base = shapes[seg][0], shapes[seg][1]
            if parent is not None:
                need[parent] = max(need[parent], base)
        doomed_segments = [s for s in shapes if s not in keep]
        trims = [(s, need[s]) for s in keep if need[s] < shapes[s][2]]
        live_blobs = _reachable_blobs(conn, keep, need)
        # loose rows only (0010): a packed blob stays a member of its immutable frame, its
        # bytes dead until repack rewrites the frame
        rows = conn.execute(select(blob_rows.c.id)).scalars().all()
        doomed_blobs = [int(b) for b in rows if int(b) not in live_blobs]
        report.segments_removed = len(doomed_segments)
        report.blobs_removed = len(doomed_blobs)
        if doomed_blobs:
            for start in range(0, len(doomed_blobs), 500):
                part = doomed_blobs[start : start + 500]
                report.bytes_freed += int(
                    conn.execute(
                        select(func.coalesce(func.sum(func.length(blob_rows.c.payload)), 0)).where(
                            blob_rows.c.id.in_(part)
                        )
                    ).scalar_one()
                )
        for seg in doomed_segments:
            report.entries_removed += shapes[seg][2] - shapes[seg][1]
        for seg, hi in trims:
            report.entries_removed += shapes[seg][2] - max(hi, shapes[seg][1])
        if dry_run:
            return report
        for seg, hi in trims:
            runs.trim(conn, seg, hi)
            conn.execute(  # sealed: the freed positions are never written again
                segments.update()
                .where(segments.c.id == seg)
                .values(length=max(hi, shapes[seg][1]), sealed=True)
            )
        runs.delete_segments(conn, doomed_segments)
        # children before parents
        order = sorted(doomed_segments, key=lambda s: -_depth(shapes, s))
        for seg in order:
            conn.execute(delete(segments).where(segments.c.id == seg))
        check_unreferenced(conn, doomed_blobs)
        for start in range(0, len(doomed_blobs), 500):
            part = doomed_blobs[start : start + 500]
            conn.execute(delete(blob_refs).where(blob_refs.c.parent_id.in_(part)))
            conn.execute(delete(blob_rows).where(blob_rows.c.id.in_(part)))
        # the frames (0010: immutable rows describing their members): one no live blob is a
        # member of goes, one mostly dead is rewritten with its live members, under this
        # transaction's exclusion of writers and on its mark
        packs = store.archive.repack(conn, live_blobs)
        check_unreferenced(conn, packs.dropped)
        for start in range(0, len(packs.dropped), 500):
            part = packs.dropped[start : start + 500]
            conn.execute(delete(blob_refs).where(blob_refs.c.parent_id.in_(part)))
        report.blobs_removed += packs.blobs
        report.frames_deleted, report.frames_rewritten = (
            packs.frames_deleted,
            packs.frames_rewritten,
        )
    store.views.forget()
    return report


def _depth(shapes: dict[int, tuple[int | None, int, int]], seg: int) -> int:
    depth = 0
    parent = shapes[seg][0]
    while parent is not None and parent in shapes:
        depth += 1
        parent = shapes[parent][0]
    return depth


def _reachable_blobs(conn: Connection, keep: set[int], need: dict[int, int]) -> set[int]:
    live: set[int] = set()
    for seg in keep:
        if need[seg] > 0:
            live.update(runs.ids_below(conn, seg, need[seg]))
    for table_name, column in blob_root_columns():
        table = _table(table_name)
        col = table.c[column]
        live.update(int(b) for b in conn.execute(select(col).where(col.is_not(None))).scalars())
    edges: dict[int, list[int]] = defaultdict(list)
    for parent, child in conn.execute(select(blob_refs.c.parent_id, blob_refs.c.child_id)):
        edges[int(parent)].append(int(child))
    for blob_id, base_id in conn.execute(
        select(blobs.c.id, blobs.c.base_id).where(blobs.c.base_id.is_not(None))
    ):
        edges[int(blob_id)].append(int(base_id))  # a live delta keeps its base
    frontier = [b for b in live if b in edges]
    while frontier:
        nxt = []
        for parent in frontier:
            for child in edges.get(parent, ()):
                if child not in live:
                    live.add(child)
                    nxt.append(child)
        frontier = nxt
    return live


def _owner(ck: int | None, uuid: str) -> str:
    return f"checkpoint {ck}" if ck else f"head of session {uuid}"


def verify(store: Store) -> VerifyReport:
    """Verify every blob, every view and every reference; name what each problem affects.

    On SQLite the database file's own consistency (b-trees, indexes, NOT NULL) is checked first:
    a damaged file can hold rows that break the schema's promises, and the row checks then report
    where they had to stop instead of failing.
    """
    structural = _file_problems(store)
    try:
        report = _verify_rows(store)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        if not structural:
            raise
        report = VerifyReport()
        report.problems.append(
            Problem(what=f"rows could not be checked past the damage ({type(exc).__name__}: {exc})")
        )
    report.problems[:0] = structural
    return report


def _file_problems(store: Store) -> list[Problem]:
    """SQLite's own integrity check of the database file (b-trees, indexes, constraints), and
    every table's columns against the schema's: a damaged byte in the schema's text renames a
    column, which no b-tree check sees and every read of that column then fails on.
    """
    if not store.db.is_sqlite:
        return []
    with store.db.read() as conn:
        lines = [str(r[0]) for r in conn.exec_driver_sql("PRAGMA integrity_check(20)")]
        for table in metadata.sorted_tables:
            have = {str(r[1]) for r in conn.exec_driver_sql(f'PRAGMA table_info("{table.name}")')}
            missing = [c.name for c in table.columns if c.name not in have]
            if missing:
                lines.append(
                    f"table {table.name} has no column {', '.join(missing)} "
                    "(the schema's text is damaged)"
                )
    return [Problem(what=f"database file: {line}") for line in lines if line != "ok"]


def _verify_rows(store: Store) -> VerifyReport:
    """Blobs, views and references, row by row."""
    report = store.archive.verify()
    with store.db.read() as conn:
        shapes = _shapes(conn)
        counts: dict[int, int] = dict(
            conn.execute(
                select(segment_entries.c.segment_id, func.count()).group_by(
                    segment_entries.c.segment_id
                )
            ).all()
        )
        damaged_segments: set[int] = set()
        for seg, (_parent, base, length) in shapes.items():
            report.rows_checked += 1
            have = int(counts.get(seg, 0))
            if have != length - base:
                damaged_segments.add(seg)
                report.problems.append(
                    Problem(
                        what=f"view segment {seg} holds {have} entries, expected {length - base}"
                    )
                )
        damaged_segments |= _structure_problems(conn, shapes, report)
        bad_positions: dict[int, list[int]] = defaultdict(list)
        missing_entries, state_missing = _dangling_references(conn, report)
        for seg, pos in missing_entries:
            bad_positions[seg].append(pos)
        bad = set(report.bad_blob_ids)
        if bad:
            parents: dict[int, list[int]] = defaultdict(list)
            for p, c in conn.execute(select(blob_refs.c.parent_id, blob_refs.c.child_id)):
                parents[int(c)].append(int(p))
            frontier = list(bad)
            while frontier:
                nxt = [p for c in frontier for p in parents.get(c, ()) if p not in bad]
                bad.update(nxt)
                frontier = nxt
            for seg, pos, blob in conn.execute(
                select(
                    segment_entries.c.segment_id,
                    segment_entries.c.position,
                    segment_entries.c.blob_id,
                )
            ):
                if int(blob) in bad:
                    bad_positions[int(seg)].append(int(pos))
        state_bad: dict[int, bool] = dict.fromkeys(state_missing, True)
        if bad:
            for ck_id, k, w in conn.execute(
                select(checkpoints.c.id, checkpoints.c.kernel_blob_id, checkpoints.c.wm_blob_id)
            ):
                if (k is not None and int(k) in bad) or (w is not None and int(w) in bad):
                    state_bad[int(ck_id)] = True
        affected_sessions: set[str] = set()
        affected_cks: list[int] = []
        every = _all_views(conn)
        readable: list[tuple[View, str, int | None, bytes]] = []
        for (view, uuid, ck), recorded in zip(every.items, every.digests, strict=True):
            if view.segment_id is not None and view.segment_id not in shapes:
                report.problems.append(
                    Problem(
                        what=f"{_owner(ck, uuid)} points at missing view segment {view.segment_id}",
                        sessions=(uuid,),
                        checkpoints=(ck,) if ck else (),
                    )
                )
                continue
            broken = _view_problem(shapes, view)
            if broken is not None:
                report.problems.append(
                    Problem(
                        what=f"{_owner(ck, uuid)}: {broken}",
                        sessions=(uuid,),
                        checkpoints=(ck,) if ck else (),
                    )
                )
            chain = _chain(shapes, view)
            hit = (
                broken is not None
                or (ck is not None and state_bad.get(ck, False))
                or any(seg in damaged_segments for seg, _, _ in chain)
                or any(lo <= p < hi for seg, lo, hi in chain for p in bad_positions.get(seg, ()))
            )
            if hit:
                affected_sessions.add(uuid)
                if ck is not None:
                    affected_cks.append(ck)
            elif recorded is not None:
                readable.append((view, uuid, ck, recorded))
        # every readable view against its covering digest: one ordered pass over the entries
        covers = covers_of_views(conn, [v for v, _, _, _ in readable])
        for view, uuid, ck, recorded in readable:
            report.rows_checked += 1
            if cover_bytes(covers[view]) != recorded:
                report.problems.append(
                    Problem(
                        what=f"{_owner(ck, uuid)}: covering list {view.archive_view_id} does "
                        "not match its recorded digest (an entry was swapped, lost or reordered)",
                        sessions=(uuid,),
                        checkpoints=(ck,) if ck else (),
                    )
                )
                affected_sessions.add(uuid)
                if ck is not None:
                    affected_cks.append(ck)
    if report.problems and (affected_sessions or affected_cks):
        report.problems.append(
            Problem(
                what="damaged content is reachable",
                sessions=tuple(sorted(affected_sessions)),
                checkpoints=tuple(sorted(affected_cks)),
            )
        )
    return report


def _structure_problems(
    conn: Connection, shapes: dict[int, tuple[int | None, int, int]], report: VerifyReport
) -> set[int]:
    """Check what the entry counts cannot see; return the segments found damaged.

    Entries outside their segment's own range, and a parent segment that is missing or shorter
    than the base taken from it.
    """
    damaged: set[int] = set()
    for seg, low, high in conn.execute(
        select(
            segment_entries.c.segment_id,
            func.min(segment_entries.c.position),
            func.max(segment_entries.c.position),
        ).group_by(segment_entries.c.segment_id)
    ):
        shape = shapes.get(int(seg))
        if shape is None or int(low) < shape[1] or int(high) >= shape[2]:
            damaged.add(int(seg))
            where = "a missing segment" if shape is None else f"outside {shape[1]}..{shape[2] - 1}"
            report.problems.append(
                Problem(what=f"view segment {seg} has entries at {low}..{high}, {where}")
            )
    for seg, (parent, base, _length) in shapes.items():
        if parent is not None and (parent not in shapes or shapes[parent][2] < base):
            damaged.add(seg)
            report.problems.append(
                Problem(what=f"view segment {seg} branches from missing or short segment {parent}")
            )
    return damaged


def _dangling_references(
    conn: Connection, report: VerifyReport
) -> tuple[list[tuple[int, int]], set[int]]:
    """Name every row that refers to a blob that is not there.

    Returns the view entries ``(segment, position)`` and the checkpoints whose state is missing.
    """
    entries: list[tuple[int, int]] = []
    states: set[int] = set()
    columns = [*blob_root_columns(), ("segment_entries", "blob_id"), ("blob_refs", "child_id")]
    columns += [("blob_refs", "parent_id"), ("blob_rows", "base_id")]
    present = _blob_ids(conn)
    for table_name, column in columns:
        table = _table(table_name)
        if column not in table.c:
            continue
        col = table.c[column]
        key = [c for c in table.primary_key.columns]
        rows = [
            row
            for row in conn.execute(select(col, *key).where(col.is_not(None)))
            if int(row[0]) not in present
        ]
        for row in rows:
            ident = ", ".join(f"{c.name} {v}" for c, v in zip(key, row[1:], strict=True))
            report.problems.append(
                Problem(what=f"{table_name} row ({ident}): {column} {row[0]} is not a stored blob")
            )
            if table_name == "segment_entries":
                entries.append((int(row[1]), int(row[2])))
            elif table_name == "checkpoints":
                states.add(int(row[1]))
    return entries, states


def _blob_ids(conn: Connection) -> set[int]:
    """Every stored blob's id: the loose rows', then the frames' members' (0010: a join with
    the ``blobs`` view would unnest every frame once per referring row on SQLite).
    """
    ids = {int(i) for i in conn.execute(select(blob_rows.c.id)).scalars()}
    for row in conn.exec_driver_sql(f"SELECT {DESCRIPTION} FROM pack_frames"):
        ids.update(Described(tuple(row)).ids)
    return ids


def _table(name: str) -> Table:
    """A table of the archive by name, or one of its views of a table's old shape
    (``segment_entries``, ``blobs``, ``lg_turn_blobs``: read only).
    """
    if name in metadata.tables:
        return metadata.tables[name]
    return view_metadata.tables[name]


def _view_problem(shapes: dict[int, tuple[int | None, int, int]], view: View) -> str | None:
    """Why ``view`` cannot be read whole from the segments as they are, or None."""
    seg, high = view.segment_id, view.length
    if seg is None:
        return None if high == 0 else f"view of {high} entries has no segment"
    while seg is not None and high > 0:
        shape = shapes.get(seg)
        if shape is None:
            return f"view {view.archive_view_id} needs missing segment {seg}"
        parent, base, length = shape
        if high > length:
            return f"view {view.archive_view_id} needs {high} entries of segment {seg}, " + (
                f"which holds {length}"
            )
        seg, high = parent, min(base, high)
    return None


__all__ = ["GcReport", "gc", "verify"]
