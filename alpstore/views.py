"""Covering lists as a piece table: persistent, structurally shared, O(delta) to extend.

A *segment* holds the entries appended after it branched from its parent segment at
``base_length``; positions are absolute. A *view* ``(segment_id, length)`` is the first
``length`` entries of that chain. Appending at the tip of a segment its session owns extends it in
place; anything else (a backtrack, a fork, a fold) starts a new segment. Moving a head to another
view is O(1); reading a view is one range scan per segment of its chain.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import count
from typing import TYPE_CHECKING, Any

from alpstore.db import raw as rsql
from alpstore.db.members import (
    PACKED_COLUMNS,
    column_picker,
    packed_by_id,
    pg_id_by_digest,
    rows_of_ids,
)
from alpstore.db.runs import insert_run, range_ids
from alpstore.errors import IntegrityError, UsageError

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from alpstore.db.raw import AnyConnection

RUN_ENTRIES = {
    "postgresql": (
        "(SELECT r.start + u.o - 1 AS position, u.blob_id FROM segment_runs r "
        "CROSS JOIN LATERAL unnest(r.blob_ids) WITH ORDINALITY AS u (blob_id, o) "
        "WHERE r.segment_id = ? AND r.start < ? AND r.start >= (SELECT COALESCE(MAX(s.start), 0) "
        "FROM segment_runs s WHERE s.segment_id = ? AND s.start <= ?)) e"
    ),
    "sqlite": (
        "(SELECT r.start + j.key AS position, j.value AS blob_id FROM segment_runs r, "
        "json_each(r.blob_ids) j "
        "WHERE r.segment_id = ? AND r.start < ? AND r.start >= (SELECT COALESCE(MAX(s.start), 0) "
        "FROM segment_runs s WHERE s.segment_id = ? AND s.start <= ?)) e"
    ),
}
"""The entries of one segment's runs that may hold positions [lo, hi): the run holding ``lo``
found by the primary key ``(segment_id, start)``, then the runs after it up to ``hi`` (a bounded
range scan, never the whole segment). Parameters: :func:`range_params`."""

READ_RANGE = (
    "SELECT e.blob_id FROM {entries} WHERE e.position >= ? AND e.position < ? ORDER BY e.position"
)

READ_RANGE_BLOBS = (
    "SELECT e.blob_id, b.id, b.id, b.digest, b.kind, b.raw_size, b.codec, b.dict_id, "
    "b.payload, b.base_id FROM {entries} LEFT JOIN blob_rows b ON b.id = e.blob_id "
    "WHERE e.position >= ? AND e.position < ? ORDER BY e.position"
)

READ_RANGE_LEAN = (
    "SELECT e.blob_id, b.id, b.id, b.kind, b.raw_size, b.codec, b.dict_id, b.payload, b.base_id "
    "FROM {entries} LEFT JOIN blob_rows b ON b.id = e.blob_id "
    "WHERE e.position >= ? AND e.position < ? ORDER BY e.position"
)
"""``READ_RANGE_BLOBS`` without the digest (see ``alpstore.archive.batch``)."""

READ_RANGE_DIGESTS = (
    "SELECT e.blob_id, b.id, b.digest FROM {entries} LEFT JOIN blob_rows b ON b.id = e.blob_id "
    "WHERE e.position >= ? AND e.position < ? ORDER BY e.position"
)

READ_RANGE_ID_DIGESTS = (
    "SELECT e.blob_id, b.id, b.digest, b.id FROM {entries} "
    "LEFT JOIN blob_rows b ON b.id = e.blob_id "
    "WHERE e.position >= ? AND e.position < ? ORDER BY e.position"
)

READ_RANGE_SIZES = (
    "SELECT e.blob_id, b.id, b.raw_size FROM {entries} LEFT JOIN blob_rows b ON b.id = e.blob_id "
    "WHERE e.position >= ? AND e.position < ? ORDER BY e.position"
)

JOINED: dict[str, tuple[str, ...]] = {
    READ_RANGE_SIZES: ("raw_size",),
    READ_RANGE_BLOBS: PACKED_COLUMNS,
    READ_RANGE_LEAN: tuple(c for c in PACKED_COLUMNS if c != "digest"),
    READ_RANGE_DIGESTS: ("digest",),
    READ_RANGE_ID_DIGESTS: ("digest", "id"),
}
"""The templates that join the loose rows (``e.blob_id, b.id``, then these columns): an entry
whose blob is packed (0010: no row of its own) is filled in from its frame's description
(:func:`alpstore.db.members.packed_by_id`), one query for the range."""


def _fill_packed(conn: AnyConnection, template: str, rows: list[Any]) -> list[Any]:
    """Rows of a :data:`JOINED` template without their first two values, the packed entries'
    columns read from their frames (an entry whose blob is nowhere keeps no row: the caller
    counts it missing).
    """
    names = JOINED[template]
    missing = [int(r[0]) for r in rows if r[1] is None]
    if not missing:
        return [r[2:] for r in rows]
    # a hydrate's whole rows go to the decoder as they are: their packed blobs' places
    packed = packed_by_id(conn, missing, located=names == PACKED_COLUMNS)
    pick = column_picker(names)
    found = {p[0]: pick(p) for p in packed}
    out = []
    get = found.get
    for r in rows:
        if r[1] is not None:
            out.append(r[2:])
        else:
            got = get(r[0])
            if got is not None:
                out.append(got)
    return out


def range_sql(template: str, dialect: str) -> str:
    """One of the ``READ_RANGE*`` templates for ``dialect``'s run encoding."""
    return template.format(entries=RUN_ENTRIES[dialect])


def range_params(seg: int, lo: int, hi: int) -> tuple[int, ...]:
    """The parameters of a :func:`range_sql` statement for positions [lo, hi) of ``seg``."""
    return (seg, hi, seg, lo, lo, hi)


RUNS_FROM = 128
"""SQLite reads a range of this many positions or more from its runs (``fetch_range``): below
it the join's cost per entry is less than the runs' few more statements."""


def fetch_range(conn: AnyConnection, template: str, seg: int, lo: int, hi: int) -> list[Any]:
    """The rows ``template`` gives for positions [lo, hi) of segment ``seg``, in order.

    SQLite, a :data:`JOINED` template, :data:`RUNS_FROM` positions or more: no join (the runs
    as stored, then the rows of their ids: ``members.rows_of_ids``, three or four statements).
    Else the one joined statement (on PostgreSQL a round trip), then the packed entries from
    their frames.
    """
    dialect = rsql.dialect_of(conn)
    if template in JOINED and dialect == "sqlite" and hi - lo >= RUNS_FROM:
        names = JOINED[template]
        ids = range_ids(conn, seg, lo, hi)
        return rows_of_ids(conn, ids, names)
    rows = rsql.fetchall(conn, range_sql(template, dialect), range_params(seg, lo, hi))
    return _fill_packed(conn, template, rows) if template in JOINED else rows


GROW = "UPDATE segments SET length = ? WHERE id = ? AND length = ? AND NOT sealed"
"""Extend a segment in place: only at its tip, and never one `gc` trimmed (sealed), so a
position once written is never written again and ``(segment, length)`` names fixed entries."""

GROW_WITH_ENTRIES = (
    "WITH g AS (UPDATE segments SET length = ? WHERE id = ? AND length = ? AND NOT sealed "
    f"RETURNING id), a AS (SELECT ARRAY(SELECT {pg_id_by_digest('v.d')} "
    "FROM (VALUES {rows}) AS v (p, d) ORDER BY v.p) AS ids) "
    "INSERT INTO segment_runs (segment_id, start, blob_ids) "
    "SELECT (SELECT id FROM g), ?, CASE WHEN array_position(a.ids, NULL) IS NULL THEN a.ids END "
    "FROM a"
)
"""PostgreSQL: :data:`GROW` and the entries (one run) in one statement, the blobs named by
digest (so the statement that stores them need not answer first). Not grown, or a blob missing:
a NULL in a NOT NULL column, and the transaction fails whole instead of writing a short view."""

OWN_TIP = (
    "SELECT length, sealed FROM segments WHERE id = "
    "(SELECT head_segment_id FROM sessions WHERE id = ?) AND session_id = ? FOR NO KEY UPDATE"
)
"""PostgreSQL: the length and seal of the segment a session's head names when the session owns
it, its row locked until commit (so neither another writer nor `gc` changes it before the
transaction grows it: :meth:`ViewStore.grow_later`). Run after the session's row is locked."""

BLOBS_FIRST = "LOCK TABLE blob_rows IN ROW EXCLUSIVE MODE"
"""PostgreSQL, before :data:`OWN_TIP` in a write that stores blobs later: the lock its blob
insert would take, taken first. `gc` locks ``blobs`` then ``segments`` (``exclude_writers``);
a writer holding a segment's row (``segments`` share-locked) and then inserting blobs would
take them the other way round, and the two would deadlock."""

MAX_CHAIN_DEPTH = 48
"""A new segment whose chain would be deeper than this is flattened (one O(length) copy),
so reading a view never needs more than this many range scans."""


@dataclass(frozen=True)
class View:
    """An immutable covering list: the first ``length`` entries of segment ``segment_id``."""

    segment_id: int | None
    length: int

    @property
    def archive_view_id(self) -> str:
        """The public id of this view (``segment:length``)."""
        return f"{self.segment_id or 0}:{self.length}"


EMPTY = View(None, 0)

# ---------------------------------------------------------------- covering digests
COVER_BITS = 256
COVER_MOD = 1 << COVER_BITS
EMPTY_COVER = bytes(COVER_BITS // 8)
"""The covering digest of an empty list."""


def cover_term(position: int, digest: bytes) -> int:
    """One entry's share of a covering digest: its BLAKE3 digest (a 256-bit number) times the
    odd number ``2 x position + 1``, so that an entry changed, moved, lost or added changes the
    sum. Odd factors are invertible modulo 2**256: one changed entry always changes it; several
    cancel only if their digests satisfy a linear relation, which digests of real content do
    not by accident. No hash per entry: the hot path pays one multiplication.
    """
    return int.from_bytes(digest, "big") * (2 * position + 1)


def cover_add(cover: int, start: int, digests: Iterable[bytes]) -> int:
    """``cover`` with the entries ``digests`` added from position ``start`` on."""
    from_bytes = int.from_bytes
    for odd, digest in zip(count(2 * start + 1, 2), digests):
        cover += from_bytes(digest, "big") * odd
    return cover % COVER_MOD


def cover_sub(cover: int, start: int, digests: Iterable[bytes]) -> int:
    """``cover`` without the entries ``digests`` from position ``start`` on."""
    from_bytes = int.from_bytes
    for odd, digest in zip(count(2 * start + 1, 2), digests):
        cover -= from_bytes(digest, "big") * odd
    return cover % COVER_MOD


def cover_of(digests: Sequence[bytes]) -> bytes:
    """The covering digest of a whole list of entry digests (what an importer re-derives)."""
    return cover_bytes(cover_add(0, 0, digests))


def cover_bytes(cover: int) -> bytes:
    """A covering digest as stored (32 bytes, big-endian)."""
    return cover.to_bytes(COVER_BITS // 8, "big")


def cover_int(stored: bytes | None) -> int | None:
    """A stored covering digest as a number (None: not recorded)."""
    return None if stored is None else int.from_bytes(bytes(stored), "big")


@dataclass(frozen=True)
class SegmentRow:
    """A segment's immutable shape (its length may only grow)."""

    id: int
    session_id: int | None
    parent_id: int | None
    base_length: int


def covers_of_views(
    conn: Connection, views: Sequence[View], *, before_0010: bool = False
) -> dict[View, int]:
    """The covering digest of each view, computed in one ordered pass over every entry.

    What ``archive verify`` checks the recorded digests against, and how the upgrade to
    revision 0004 recorded them: O(entries + views x chain depth), whatever the views share.
    Entries that are missing (or name a missing blob) count as absent: the digest then differs.
    """
    shapes: dict[int, tuple[int | None, int]] = {
        int(i): (p, int(b))
        for i, p, b in conn.exec_driver_sql("SELECT id, parent_id, base_length FROM segments")
    }
    chains: dict[View, list[tuple[int, int, int]]] = {}
    marks: dict[int, set[int]] = {}
    for view in views:
        chain: list[tuple[int, int, int]] = []
        seg, hi = view.segment_id, view.length
        while seg is not None and hi > 0 and seg in shapes:
            parent, base = shapes[seg]
            lo = min(base, hi)
            if hi > lo:
                chain.append((seg, lo, hi))
                marks.setdefault(seg, set()).update((lo, hi))
            seg, hi = parent, lo
        chains[view] = chain
    sums: dict[tuple[int, int], int] = {}
    current, running, pending = None, 0, list[int]()
    loose = "blobs" if before_0010 else "blob_rows"  # (0004 computes them: every blob a row)
    rows = _with_packed_digests(
        conn,
        conn.exec_driver_sql(
            "SELECT e.segment_id, e.position, e.blob_id, b.digest FROM segment_entries e "
            f"LEFT JOIN {loose} b ON b.id = e.blob_id ORDER BY e.segment_id, e.position"
        ),
        packed=not before_0010,
    )

    def settle(upto: int | None) -> None:
        # record the running sum at every wanted position up to ``upto`` (all when None)
        while pending and (upto is None or pending[0] <= upto):
            sums[(current, pending.pop(0))] = running  # type: ignore[index]

    for seg, pos, digest in rows:
        seg, pos = int(seg), int(pos)
        if seg != current:
            settle(None)
            current, running = seg, 0
            pending = sorted(marks.get(seg, ()))
        if seg not in marks:
            continue
        settle(pos)
        running += cover_term(pos, bytes(digest))
    settle(None)
    out: dict[View, int] = {}
    for view, chain in chains.items():
        total = 0
        for seg, lo, hi in chain:
            total += sums.get((seg, hi), 0) - sums.get((seg, lo), 0)
        out[view] = total % COVER_MOD
    return out


def _with_packed_digests(
    conn: Any, rows: Iterable[Any], *, packed: bool = True
) -> Iterator[tuple[int, int, bytes]]:
    """``(segment, position, digest)`` of ``(segment, position, blob id, loose digest)`` rows,
    a packed blob's digest read from its frame (0010), a segment at a time; an entry whose
    blob is nowhere is left out (as the join with ``blobs`` left it).
    """
    held: list[Any] = []

    def flush() -> Iterator[tuple[int, int, bytes]]:
        missing = [int(r[2]) for r in held if r[3] is None] if packed else []
        found = {int(p[0]): bytes(p[1]) for p in packed_by_id(conn, missing)} if missing else {}
        for seg, pos, blob, digest in held:
            got = bytes(digest) if digest is not None else found.get(int(blob))
            if got is not None:
                yield int(seg), int(pos), got
        held.clear()

    for row in rows:
        if held and row[0] != held[-1][0]:
            yield from flush()
        held.append(tuple(row))
    yield from flush()


class ViewStore:
    """Piece-table operations inside a caller's transaction."""

    def __init__(self) -> None:
        self._shape: dict[int, SegmentRow] = {}
        """Segment shapes by id. Safe across `gc` and other writers: ids are never reused
        and a shape never changes; a collected segment is simply never asked for again by a
        live view (a stale view finds its entries missing)."""

    def segment(self, conn: AnyConnection, segment_id: int) -> SegmentRow:
        """The (cached) shape of a segment.

        Raises:
            IntegrityError: the segment row is missing.
        """
        row = self._shape.get(segment_id)
        if row is None:
            found = rsql.fetchone(
                conn,
                "SELECT id, session_id, parent_id, base_length FROM segments WHERE id = ?",
                (segment_id,),
            )
            if found is None:
                raise IntegrityError(f"view segment {segment_id} is missing from the archive")
            row = SegmentRow(int(found[0]), found[1], found[2], int(found[3]))
            self._shape[segment_id] = row
        return row

    def chain(self, conn: AnyConnection, view: View) -> list[tuple[int, int, int]]:
        """The ranges ``(segment_id, lo, hi)`` that make up ``view``, oldest first."""
        out: list[tuple[int, int, int]] = []
        seg_id, hi = view.segment_id, view.length
        while seg_id is not None and hi > 0:
            seg = self.segment(conn, seg_id)
            lo = min(seg.base_length, hi)
            if hi > lo:
                out.append((seg_id, lo, hi))
            seg_id, hi = seg.parent_id, lo
        out.reverse()
        return out

    def _read_ranges(
        self, conn: AnyConnection, view: View, sql: str, start: int = 0, verb: str = "resolves"
    ) -> list[Any]:
        """The rows ``sql`` gives for each segment range of ``view`` from position ``start``,
        in order: one range scan per segment of the chain.

        Raises:
            IntegrityError: a range yields fewer rows than it spans (missing entries or blobs).
        """
        rows: list[Any] = []
        for seg_id, lo, hi in clip(self.chain(conn, view), start):
            part = fetch_range(conn, sql, seg_id, lo, hi)
            if len(part) != hi - lo:
                raise IntegrityError(
                    f"view {view.archive_view_id}: segment {seg_id} {verb} {len(part)} of the "
                    f"{hi - lo} entries in positions {lo}..{hi - 1}"
                )
            rows.extend(part)
        return rows

    def read_ids(self, conn: AnyConnection, view: View) -> list[int]:
        """The blob ids of ``view`` in order.

        Raises:
            IntegrityError: entries are missing (a damaged or wrongly pruned view).
        """
        return [r[0] for r in self._read_ranges(conn, view, READ_RANGE, verb="holds")]

    def read_blob_rows(self, conn: AnyConnection, view: View, start: int = 0) -> list[Any]:
        """The blob rows of ``view`` at positions ``start`` and after, in order, joined in the
        range scans (no id round trip): ``(id, digest, kind, raw_size, codec, dict_id, payload,
        base_id)``.

        Raises:
            IntegrityError: entries or blobs are missing.
        """
        return self._read_ranges(conn, view, READ_RANGE_BLOBS, start)

    def read_lean_rows(self, conn: AnyConnection, view: View) -> list[Any]:
        """The blob rows of ``view`` in order without their digests: ``(id, kind, raw_size,
        codec, dict_id, payload, base_id)``, for ``alpstore.archive.batch.decode_lean``.

        Raises:
            IntegrityError: entries or blobs are missing.
        """
        return self._read_ranges(conn, view, READ_RANGE_LEAN)

    def cut(self, conn: AnyConnection, view: View, keep: int) -> View:
        """The first ``keep`` entries of ``view``, named by the segment that holds the last of
        them (a view never names a segment it takes no entry from: GC marks through chains
        and would not keep that segment).
        """
        seg = view.segment_id if keep else None
        while seg is not None:
            shape = self.segment(conn, seg)
            if keep > shape.base_length:
                break
            seg = shape.parent_id
        return View(seg, keep)

    def read_digests(self, conn: AnyConnection, view: View, start: int = 0) -> list[bytes]:
        """The blob digests of ``view`` at positions ``start`` and after (O(length - start)).

        Raises:
            IntegrityError: entries or blobs are missing.
        """
        return [bytes(r[0]) for r in self._read_ranges(conn, view, READ_RANGE_DIGESTS, start)]

    def read_digest_ids(
        self, conn: AnyConnection, view: View, start: int = 0
    ) -> list[tuple[bytes, int]]:
        """``(digest, blob id)`` of the entries of ``view`` at positions ``start`` and after: what
        an export writes and then loads (no lookup of the ids by digest).

        Raises:
            IntegrityError: entries or blobs are missing.
        """
        return self._read_ranges(conn, view, READ_RANGE_ID_DIGESTS, start)

    def cover(self, conn: AnyConnection, view: View) -> int:
        """The covering digest of ``view`` computed from its entries (O(length))."""
        return cover_add(0, 0, self.read_digests(conn, view)) if view.length else 0

    def depth(self, conn: AnyConnection, view: View) -> int:
        """How many segments the view's chain spans."""
        return len(self.chain(conn, view))

    def append(
        self, conn: Connection, view: View, session_id: int, blob_ids: Sequence[int]
    ) -> View:
        """The view with ``blob_ids`` appended: extends the segment in place when the view is
        at the tip of a segment this session owns, else branches a new segment.
        """
        if not blob_ids:
            return view
        new_length = view.length + len(blob_ids)
        if view.segment_id is not None:
            seg = self.segment(conn, view.segment_id)
            if seg.session_id == session_id:
                grown = rsql.execute(conn, GROW, (new_length, seg.id, view.length))
                if grown.rowcount == 1:
                    self._insert_entries(conn, seg.id, view.length, blob_ids)
                    return View(seg.id, new_length)
        return self._branch(conn, view, session_id, blob_ids)

    def grow_later(self, conn: Connection, view: View, digests: Sequence[bytes]) -> View:
        """PostgreSQL: the view with the blobs ``digests`` (stored earlier in the same
        transaction) appended in place, in one statement that rides the transaction's next
        round trip. The caller holds the segment's row (:data:`OWN_TIP`) and saw that the view
        is at its unsealed tip, so it grows.
        """
        if not digests:
            return view
        assert view.segment_id is not None
        new_length = view.length + len(digests)
        params: list[Any] = [new_length, view.segment_id, view.length]
        for i, digest in enumerate(digests):
            params.extend((i, digest))
        params.append(view.length)
        rows = ", ".join(["(CAST(? AS INTEGER), CAST(? AS BYTEA))"] * len(digests))
        rsql.execute(conn, GROW_WITH_ENTRIES.format(rows=rows), params, defer=True)
        return View(view.segment_id, new_length)

    def _branch(
        self, conn: Connection, view: View, session_id: int, blob_ids: Sequence[int]
    ) -> View:
        parent, base, prefix = view.segment_id, view.length, list[int]()
        if parent is not None and self.depth(conn, view) >= MAX_CHAIN_DEPTH:
            prefix = self.read_ids(conn, view)
            parent, base = None, 0
        seg_id = self._new_segment(
            conn, session_id, parent, base, base + len(prefix) + len(blob_ids)
        )
        self._insert_entries(conn, seg_id, base, [*prefix, *blob_ids])
        return View(seg_id, base + len(prefix) + len(blob_ids))

    def splice(
        self,
        conn: Connection,
        view: View,
        session_id: int,
        start: int,
        end: int,
        blob_ids: Sequence[int],
    ) -> View:
        """The view with entries ``[start, end)`` replaced by ``blob_ids`` (a fold).

        Costs O(len(blob_ids) + length - end): the prefix is shared, the tail re-appended.

        Raises:
            UsageError: the range is empty or out of bounds.
        """
        if not 0 <= start < end <= view.length:
            raise UsageError(
                f"range {start}..{end} is not a non-empty span of a covering list of "
                f"{view.length} entries"
            )
        tail = self.read_ids(conn, view)[end:] if end < view.length else []
        prefix = View(view.segment_id, start) if start else EMPTY
        return (
            self._branch(conn, prefix, session_id, [*blob_ids, *tail])
            if (prefix.segment_id is not None)
            else self._fresh(conn, session_id, [*blob_ids, *tail])
        )

    def _fresh(self, conn: Connection, session_id: int, blob_ids: Sequence[int]) -> View:
        seg_id = self._new_segment(conn, session_id, None, 0, len(blob_ids))
        self._insert_entries(conn, seg_id, 0, blob_ids)
        return View(seg_id, len(blob_ids))

    def _new_segment(
        self, conn: Connection, session_id: int, parent: int | None, base: int, length: int
    ) -> int:
        row = rsql.fetchone(  # plain SQL: an import writes on the sqlite3 driver alone
            conn,
            "INSERT INTO segments (session_id, parent_id, base_length, length) "
            "VALUES (?, ?, ?, ?) RETURNING id",
            (session_id, parent, base, length),
        )
        seg_id = int(row[0])
        self._shape[seg_id] = SegmentRow(seg_id, session_id, parent, base)
        return seg_id

    @staticmethod
    def _insert_entries(conn: Connection, seg_id: int, start: int, blob_ids: Sequence[int]) -> None:
        insert_run(conn, seg_id, start, blob_ids)

    def forget(self) -> None:
        """Drop cached segment shapes (after GC removed segments)."""
        self._shape.clear()


def common_prefix(a: list[tuple[int, int, int]], b: list[tuple[int, int, int]]) -> int:
    """How many leading entries two views share structurally (from their chains)."""
    common = 0
    for (sa, la, ha), (sb, lb, hb) in zip(a, b, strict=False):
        if sa != sb or la != lb:
            return common
        if ha != hb:
            return min(ha, hb)
        common = ha
    return common


def clip(chain: list[tuple[int, int, int]], start: int) -> list[tuple[int, int, int]]:
    """The ranges of a chain at positions ``start`` and after."""
    return [(s, max(lo, start), hi) for s, lo, hi in chain if hi > start]
