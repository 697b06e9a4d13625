"""Packed blobs as rows (0010): a packed blob has no row of its own; its frame's ``pack_frames``
row describes its members in content order — ``first_id`` (and ``ids`` when they are not
``first_id``, ``first_id + 1`` …), ``offsets``, ``kinds``, ``digests`` — and this module reads
them back as rows of the old ``blobs`` shape (what the ``blobs`` view gives plain SQL):
``(id, digest, kind, raw_size, codec 4, dict_id NULL, payload = pointer, base_id NULL)``.

Found by digest through the digest key (PostgreSQL: the GIN over ``alp_digest_keys(digests)``;
SQLite: ``pack_digests (prefix, frame_id)``), by id through the b-tree on ``first_id`` (the
frame with the greatest ``first_id`` ≤ the id is the one that can hold it). Plain SQL through
:mod:`alpstore.db.raw` (the read path).
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from operator import itemgetter, mul, sub
from typing import TYPE_CHECKING, Any, Final

from alpstore.db import raw as rsql
from alpstore.db.names import DIGEST_PREFIX

if TYPE_CHECKING:
    from alpstore.db.raw import AnyConnection

CODEC_PACKED: Final = 4
"""``blobs.codec`` of a packed blob (its ``payload`` is :func:`pointer`)."""

Located = tuple[int, int]
"""A packed blob's place as rows read for decoding carry it (:meth:`Described.rows`,
``located``): ``(frame id, offset)``, what its :func:`pointer` payload encodes."""

NEW_BLOBS_LOCK: Final = 0x6E657762  # "newb"
"""PostgreSQL advisory lock (two-key form: this key, then the hash of the archive's schema)
that orders the storing of new content (0010): a packed blob has no row under a unique digest
index, so a writer inserting loose rows and an import writing frames could each store a digest
the other had not committed. A loose writer takes it shared, an import (``store_packed``)
exclusive, each until its transaction ends and in a statement of its own *before* it looks the
digests up — under READ COMMITTED the lookup then sees whatever the other committed. Loose
writers never wait for each other (their ``blob_rows.digest`` is unique); two imports, or an
import and the writers, take turns. Advisory locks are the database's, not a schema's: the
second key, ``hashtext(current_schema())``, keeps the archives in other schemas of the same
database (another tenant, a test run beside this one) out of each other's way."""

_ARCHIVE_KEY: Final = f"{NEW_BLOBS_LOCK}, hashtext(current_schema())"

LOCK_NEW_BLOBS_SHARED: Final = f"SELECT pg_advisory_xact_lock_shared({_ARCHIVE_KEY})"
"""A loose writer's :data:`NEW_BLOBS_LOCK` (sent ahead of its lookup or insert)."""

LOCK_NEW_BLOBS: Final = f"SELECT pg_advisory_xact_lock({_ARCHIVE_KEY})"
"""An import's :data:`NEW_BLOBS_LOCK`, before it looks up the members of a frame it writes."""


def varint(value: int) -> bytes:
    """An unsigned LEB128 varint."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def pointer(frame_id: int, offset: int) -> bytes:
    """The ``payload`` of a packed blob: where its bytes are (two unsigned LEB128 varints)."""
    return varint(frame_id) + varint(offset)


def pointers(frame_id: int, offsets: Sequence[int]) -> list[bytes]:
    """:func:`pointer` of each offset into frame ``frame_id`` (the frame's varint made once;
    an offset below 2**21, every offset of a frame of at most 2 MiB, in one expression):
    the same bytes.
    """
    prefix = varint(frame_id)
    out = []
    for at in offsets:
        if at < 0x80:
            out.append(prefix + bytes((at,)))
        elif at < 0x4000:
            out.append(prefix + bytes((at & 0x7F | 0x80, at >> 7)))
        elif at < 0x200000:
            out.append(prefix + bytes((at & 0x7F | 0x80, (at >> 7) & 0x7F | 0x80, at >> 14)))
        else:
            out.append(prefix + varint(at))
    return out


DESCRIPTION: Final = "id, first_id, ids, offsets, kinds, digests, raw_size"
"""The columns of a frame's row that describe its members."""

PACKED_COLUMNS: Final = (
    "id",
    "digest",
    "kind",
    "raw_size",
    "codec",
    "dict_id",
    "payload",
    "base_id",
)


def pg_id_by_digest(digest: str) -> str:
    """PostgreSQL: a scalar SQL expression, the id of the blob whose digest is the SQL
    expression ``digest`` — its loose row's, else its frame member's (found through the GIN
    over the frames' digests, the frame row locked ``FOR KEY SHARE`` as a referencing writer
    must: a repack waits, or its deletion makes this NULL) — or NULL.
    """
    return (
        f"coalesce((SELECT b.id FROM blob_rows b WHERE b.digest = {digest}), "
        "(SELECT coalesce(f.ids[m.i], f.first_id + m.i - 1) FROM pack_frames f, "
        f"LATERAL (SELECT alp_member(f.digests, {digest}) AS i) m "
        f"WHERE alp_digest_keys(f.digests) @> ARRAY[alp_digest_key({digest})] "
        "AND m.i IS NOT NULL LIMIT 1 FOR KEY SHARE OF f))"
    )


def digest_key(digest: bytes) -> int:
    """A digest's key in the frames' digest index: its first four bytes, signed big-endian."""
    return int.from_bytes(digest[:DIGEST_PREFIX], "big", signed=True)


def encode_list(dialect: str, values: Sequence[int]) -> Any:
    """An integer list as the dialect stores it (PostgreSQL an array, SQLite JSON text)."""
    if dialect == "postgresql":
        return list(values)
    return json.dumps(list(values), separators=(",", ":"))


def encode_kinds(dialect: str, kinds: Sequence[int]) -> Any:
    """The members' kinds: PostgreSQL a byte each, SQLite a digit each."""
    if dialect == "postgresql":
        return bytes(kinds)
    return "".join(map(str, kinds))


def _ints(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, str):
        return list(json.loads(value))
    return list(value)


_DIGITS = bytes.maketrans(b"0123456789", bytes(range(10)))
"""SQLite's kinds (a digit each) as their values, one byte each."""


FIND_AT_MOST: Final = 8
"""``Described.index_of_digests``: up to this many wanted digests are found by ``bytes.find``
each; more through a dict of the frame's digests."""


class Described:
    """One frame's members, decoded from its row (:data:`DESCRIPTION`)."""

    __slots__ = ("digests", "frame_id", "ids", "kinds", "offsets", "raw_size")

    def __init__(self, row: Sequence[Any]) -> None:
        frame_id, first, ids, offsets, kinds, digests, raw_size = row
        self.frame_id = int(frame_id)
        self.offsets = _ints(offsets)
        n = len(self.offsets)
        self.ids: Sequence[int] = (
            _ints(ids) if ids is not None else range(int(first), int(first) + n)
        )
        self.kinds: Sequence[int] = (
            bytes(kinds) if not isinstance(kinds, str) else kinds.encode().translate(_DIGITS)
        )
        self.digests = bytes(digests)
        self.raw_size = int(raw_size)

    def sizes(self) -> list[int]:
        """Each member's length: to the next offset, the frame's ``raw_size`` closing."""
        ends = [*self.offsets[1:], self.raw_size]
        return [e - s for s, e in zip(self.offsets, ends, strict=True)]

    def digest(self, i: int) -> bytes:
        """Member ``i``'s digest."""
        return self.digests[32 * i : 32 * i + 32]

    def rows(
        self, wanted: Iterable[int] | None = None, *, located: bool = False
    ) -> list[tuple[Any, ...]]:
        """The members (indexes ``wanted``, else all) as rows of the old ``blobs`` shape.

        ``located``: each payload is ``(frame id, offset)`` (a :data:`Located`) instead of the
        pointer's bytes, for rows that go straight to the decoder (issue 41: encoding 6,000
        pointers and parsing them back was a tenth of a hydrate).
        """
        offsets, d, n = self.offsets, self.digests, len(self.offsets)
        picked: Sequence[int] = range(n) if wanted is None else sorted(set(wanted))
        if not picked:
            return []
        ends = [*offsets[1:], self.raw_size]
        a, b = picked[0], picked[-1] + 1
        ids: Iterable[int]
        kinds: Iterable[int]
        if b - a == len(picked):  # a run of members (a hydrate's): slices, no lookup each
            starts, ends, ids, kinds = offsets[a:b], ends[a:b], self.ids[a:b], self.kinds[a:b]
        else:
            starts = list(map(offsets.__getitem__, picked))
            ends = list(map(ends.__getitem__, picked))
            ids, kinds = map(self.ids.__getitem__, picked), map(self.kinds.__getitem__, picked)
        where: Iterable[Located] | list[bytes] = (
            zip(repeat(self.frame_id), starts) if located else pointers(self.frame_id, starts)
        )
        return list(  # C-level loops: a hydrate builds thousands
            zip(
                ids,
                [d[at : at + 32] for at in map(mul, picked, repeat(32))],
                kinds,
                map(sub, ends, starts),
                repeat(CODEC_PACKED),
                repeat(None),
                where,
                repeat(None),
            )
        )

    def index_of_digests(self, wanted: set[bytes]) -> list[int]:
        """The members whose digest is in ``wanted``: a few each found by ``bytes.find`` (at a
        32-byte boundary); more through a dict of the frame's digests, built once (a find per
        wanted digest scans the whole column: an import probing 400 digests against every
        frame whose keys matched did 36,000 scans, 61 ms of a 1,000-turn import).
        """
        d = self.digests
        if len(wanted) > FIND_AT_MOST:
            index = {d[at : at + 32]: at // 32 for at in range(0, len(d), 32)}
            return [index[w] for w in wanted if w in index]
        out = []
        for digest in wanted:
            at = d.find(digest)
            while at >= 0 and at % 32:
                at = d.find(digest, at + 1)
            if at >= 0:
                out.append(at // 32)
        return out


def frames_by_digest(
    conn: AnyConnection, digests: Sequence[bytes], *, lock: bool = False
) -> list[Described]:
    """The frames that may hold any of ``digests`` (their keys match); ``lock``: PostgreSQL
    locks their rows ``FOR KEY SHARE`` (a repack, which deletes a frame, waits).
    """
    keys = sorted({digest_key(d) for d in digests})
    if not keys:
        return []
    if rsql.dialect_of(conn) == "postgresql":
        sql = (
            f"SELECT {DESCRIPTION} FROM pack_frames "
            "WHERE alp_digest_keys(digests) && CAST(? AS int4[])"
        )
        if lock:
            sql += " FOR KEY SHARE"
        return [Described(r) for r in rsql.fetchall(conn, sql, (keys,))]
    sql = (
        f"SELECT {DESCRIPTION} FROM pack_frames WHERE id IN (SELECT frame_id FROM pack_digests "
        f"WHERE prefix IN ({rsql.placeholders(len(keys))}))"
    )
    return [Described(r) for r in rsql.fetchall(conn, sql, keys)]


def packed_by_digest(
    conn: AnyConnection, digests: Sequence[bytes], *, lock: bool = False
) -> list[tuple[Any, ...]]:
    """Rows of the old ``blobs`` shape of the packed blobs among ``digests`` (one each)."""
    wanted = set(digests)
    out: dict[bytes, tuple[Any, ...]] = {}
    for frame in frames_by_digest(conn, list(wanted), lock=lock):
        for row in frame.rows(frame.index_of_digests(wanted)):
            out.setdefault(row[1], row)
    return list(out.values())


FRAMES_IN_RANGE_AT_MOST: Final = 64
"""SQLite's :func:`frames_by_id` reads the frames whose ids lie between the wanted ones in one
statement when at most this many lie there; more (other sessions' frames between them): one
probe per id instead."""

_IN_RANGE: Final = (
    f"SELECT last_id, {DESCRIPTION} FROM pack_frames WHERE first_id >= (SELECT "
    "COALESCE(MAX(f.first_id), 0) FROM pack_frames f WHERE f.first_id <= ?) AND first_id <= ? "
    "ORDER BY first_id LIMIT ?"
)


def _in_range(conn: AnyConnection, want: list[int]) -> list[Described] | None:
    """The frames holding ids of ``want`` (sorted), read in one statement: from the frame that
    can hold the first (the greatest ``first_id`` ≤ it; frames hold disjoint id ranges) up to
    the last; those that hold none of them dropped before they are decoded. None when more
    than :data:`FRAMES_IN_RANGE_AT_MOST` lie there.
    """
    at_most = FRAMES_IN_RANGE_AT_MOST
    rows = rsql.fetchall(conn, _IN_RANGE, (want[0], want[-1], at_most + 1))
    if len(rows) > at_most:
        return None
    out = []
    for row in rows:
        i = bisect_left(want, int(row[2]))  # the first wanted id from its first_id on
        if i < len(want) and want[i] <= int(row[0]):
            out.append(Described(row[1:]))
    return out


def frames_by_id(conn: AnyConnection, ids: Sequence[int]) -> list[Described]:
    """The frames that can hold ``ids`` (each id's frame: the greatest ``first_id`` ≤ it)."""
    if not ids:
        return []
    want = sorted(set(ids))
    if rsql.dialect_of(conn) == "postgresql":  # one round trip, the probes on the server
        sql = (
            f"SELECT {DESCRIPTION} FROM pack_frames WHERE id IN (SELECT (SELECT f.id FROM "
            "pack_frames f WHERE f.first_id <= v ORDER BY f.first_id DESC LIMIT 1) "
            "FROM unnest(CAST(? AS int4[])) v)"
        )
        return [Described(r) for r in rsql.fetchall(conn, sql, (want,))]
    found = _in_range(conn, want)  # a view's ids run through a few frames: one range read
    if found is not None:
        return found
    sql = (
        f"SELECT {DESCRIPTION} FROM pack_frames WHERE id IN (SELECT (SELECT f.id FROM "
        "pack_frames f WHERE f.first_id <= v.value ORDER BY f.first_id DESC LIMIT 1) "
        "FROM json_each(?) v)"
    )
    return [Described(r) for r in rsql.fetchall(conn, sql, (json.dumps(want),))]


def packed_by_id(
    conn: AnyConnection, ids: Sequence[int], *, located: bool = False
) -> list[tuple[Any, ...]]:
    """Rows of the old ``blobs`` shape of the packed blobs among ``ids`` (``located``: payloads
    as ``(frame id, offset)``, see :meth:`Described.rows`).
    """
    want = sorted(set(ids))
    wanted = set(want)
    out = []
    for frame in frames_by_id(conn, want):
        held = frame.ids
        if isinstance(held, range):  # no gap: an id's place is its distance from first_id
            lo, hi = bisect_left(want, held.start), bisect_left(want, held.stop)
            out += frame.rows([i - held.start for i in want[lo:hi]], located=located)
        else:
            out += frame.rows((i for i, bid in enumerate(held) if bid in wanted), located=located)
    return out


def column_picker(names: Sequence[str]) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """A row of the old ``blobs`` shape -> its columns ``names``, as a tuple (the whole row
    itself, not a copy, when ``names`` are all of them).
    """
    if tuple(names) == PACKED_COLUMNS:
        return _same_row
    if len(names) == 1:
        one = itemgetter(PACKED_COLUMNS.index(names[0]))
        return lambda row: (one(row),)
    return itemgetter(*[PACKED_COLUMNS.index(n) for n in names])


def _same_row(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return row


def rows_of_ids(
    conn: AnyConnection, ids: Sequence[int], names: Sequence[str]
) -> list[tuple[Any, ...]]:
    """SQLite: a row of columns ``names`` (of the old ``blobs`` shape) for each of ``ids``, in
    order (an id repeated, its row repeated; an id that names no blob left out: the caller
    counts them). The packed ones from their frames first (most of a long view: the frames
    between its ids in one read), then the loose ones in one query. Rows for the decoder: a
    packed blob's payload is its place, ``(frame id, offset)`` (see :meth:`Described.rows`),
    not a pointer.
    """
    pick = column_picker(names)
    found = {p[0]: pick(p) for p in packed_by_id(conn, ids, located=True)}
    loose = [i for i in dict.fromkeys(ids) if i not in found]
    if loose:
        sql = (
            f"SELECT id, {', '.join(names)} FROM blob_rows "
            "WHERE id IN (SELECT value FROM json_each(?))"
        )
        for r in rsql.fetchall(conn, sql, (json.dumps(loose),)):
            found[r[0]] = tuple(r[1:])
    get = found.get
    return [row for row in map(get, ids) if row is not None]


def select_columns(rows: list[tuple[Any, ...]], columns: str) -> list[tuple[Any, ...]]:
    """``rows`` (the old ``blobs`` shape) cut to ``columns`` (names, comma-separated)."""
    return list(map(column_picker([c.strip() for c in columns.split(",")]), rows))


LOOSE_SELECT: Final = (
    "SELECT id, digest, kind, raw_size, codec, dict_id, payload, base_id FROM blob_rows"
)


def rows_by_id(
    conn: AnyConnection, ids: Sequence[int], *, located: bool = False
) -> list[tuple[Any, ...]]:
    """Rows of the old ``blobs`` shape of ``ids``: the loose ones from their rows (500 an
    ``IN`` list), the rest from their frames' descriptions (absent: an id that names no
    blob); ``located``: for the decoder, see :meth:`Described.rows`.
    """
    if not ids:
        return []
    want = list(dict.fromkeys(ids))
    rows: list[tuple[Any, ...]] = []
    for at in range(0, len(want), 500):
        part = want[at : at + 500]
        sql = f"{LOOSE_SELECT} WHERE id IN ({rsql.placeholders(len(part))})"
        rows += [tuple(r) for r in rsql.fetchall(conn, sql, part)]
    if len(rows) < len(want):
        have = {int(r[0]) for r in rows}
        rows += packed_by_id(conn, [i for i in want if i not in have], located=located)
    return rows
