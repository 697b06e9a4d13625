"""The write path of the SQL blob store: documents stored once (idempotent), compressed ahead
where a caller can (``pack``), large ones as a delta against a recent similar blob, summaries
with their ordered references.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from alpstore.archive.base import summary_document
from alpstore.archive.candidates import DeltaCandidates
from alpstore.archive.reading import Encoded, chunks, digest_rows, encode
from alpstore.archive.training import SMALL_BLOB_MAX, DictionaryTraining
from alpstore.codec import (
    CODEC_ZSTD_BASE,
    CODEC_ZSTD_DICT,
    DEFAULT_LEVEL,
    DICT_LEVEL,
    Digest,
    delta_compressor,
    digest_hex,
    line_hashes,
)
from alpstore.db import raw as rsql
from alpstore.db.members import LOCK_NEW_BLOBS_SHARED
from alpstore.db.names import BLOB_MESSAGE, BLOB_SUMMARY
from alpstore.errors import IntegrityError, NotFoundError

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from alpstore.db.database import Database

INSERT_BLOBS = (
    "INSERT INTO blob_rows (digest, kind, raw_size, codec, dict_id, payload, base_id) "
    "VALUES {rows} ON CONFLICT (digest) DO NOTHING RETURNING digest, id"
)
"""One multi-row insert that hands back the ids it assigned (a digest another transaction
stored first is not returned: it is looked up)."""
INSERT_MISSING = (
    "INSERT INTO blob_rows (digest, kind, raw_size, codec, dict_id, payload, base_id) "
    "SELECT v.* FROM (VALUES {rows}) AS v (digest, kind, raw_size, codec, dict_id, payload, "
    "base_id) WHERE NOT EXISTS (SELECT 1 FROM blob_rows b WHERE b.digest = v.digest) "
    "AND NOT EXISTS (SELECT 1 FROM pack_frames f WHERE alp_digest_keys(f.digests) "
    "@> ARRAY[alp_digest_key(v.digest)] AND alp_member(f.digests, v.digest) IS NOT NULL) "
    "ON CONFLICT (digest) DO NOTHING RETURNING digest, id"
)
"""PostgreSQL, no lookup first (:meth:`ArchiveWriter.store_encoded_later`): the rows not stored
yet, in one statement. ``NOT EXISTS`` leaves the stored ones out before they take an id from
the sequence (``ON CONFLICT`` alone would, and the ids would have gaps); ``ON CONFLICT`` covers
a row another writer is inserting at the same time."""

INSERT_MISSING_ROW = (
    "(CAST(? AS BYTEA), CAST(? AS SMALLINT), CAST(? AS INTEGER), CAST(? AS SMALLINT), "
    "CAST(? AS INTEGER), CAST(? AS BYTEA), CAST(? AS INTEGER))"
)

INSERT_MISSING_BASED = (
    "INSERT INTO blob_rows (digest, kind, raw_size, codec, dict_id, payload, base_id) "
    "SELECT v.digest, v.kind, v.raw_size, "
    f"CASE WHEN b.id IS NULL THEN v.codec ELSE {CODEC_ZSTD_BASE} END, "
    "CASE WHEN b.id IS NULL THEN v.dict_id END, "
    "CASE WHEN b.id IS NULL THEN v.payload ELSE v.delta END, b.id "
    "FROM (VALUES {rows}) AS v (digest, kind, raw_size, codec, dict_id, payload, base_digest, "
    "delta) LEFT JOIN LATERAL (SELECT x.id FROM blob_rows x WHERE x.digest = v.base_digest "
    f"AND x.codec <> {CODEC_ZSTD_BASE} FOR KEY SHARE) AS b ON true "
    "WHERE NOT EXISTS (SELECT 1 FROM blob_rows o WHERE o.digest = v.digest) "
    "AND NOT EXISTS (SELECT 1 FROM pack_frames f WHERE alp_digest_keys(f.digests) "
    "@> ARRAY[alp_digest_key(v.digest)] AND alp_member(f.digests, v.digest) IS NOT NULL) "
    "ORDER BY v.digest ON CONFLICT (digest) DO NOTHING RETURNING digest, id, base_id"
)
""":data:`INSERT_MISSING` for rows of which some are deltas against a recent base, the base
found among the loose rows (and locked ``FOR KEY SHARE``, as :meth:`ArchiveWriter._base_ids`
does) by the insert itself instead of a lookup first, a round trip (a base is a large blob,
which stays loose; one found packed is no base here): a delta row carries its base's digest and
the delta beside its plain payload, and is stored plain when the base is gone (`gc` collected
it) or is a delta itself. The row returns its ``base_id``, NULL then."""

INSERT_MISSING_BASED_ROW = (
    "(CAST(? AS BYTEA), CAST(? AS SMALLINT), CAST(? AS INTEGER), CAST(? AS SMALLINT), "
    "CAST(? AS INTEGER), CAST(? AS BYTEA), CAST(? AS BYTEA), CAST(? AS BYTEA))"
)

INSERT_BLOBS_PLAIN = (
    "INSERT INTO blob_rows (digest, kind, raw_size, codec, dict_id, payload, base_id) VALUES {rows}"
)
"""The same on SQLite: rows its transaction looked up and did not find, so none is stored (a
SQLite writer holds the whole database; the digest is not a unique index there, 0008), and no
RETURNING (see :meth:`SqlArchive._insert_blobs`)."""

INSERT_ROWS = 1000
"""Rows per insert: 7,000 parameters, under SQLite's 32,766 and PostgreSQL's 65,535."""

DELTA_MIN_SIZE = 1024
"""Documents from this raw size up are tried as deltas against a recent similar one."""

DELTA_MAX_SIZE = 8 * 1024 * 1024
"""...and up to this size: a larger one is neither split into lines nor kept as a base (32 kept
bases of 70 MB each would hold 2 GB)."""

DELTA_MIN_SHARED = 0.3
"""A candidate base must share at least this fraction of the document's longer lines."""

DELTA_GAIN = 0.8
"""A delta is kept only when it is at most this fraction of the plain compressed size."""

DELTA_CANDIDATES = 32
"""How many recent large blobs a process keeps as delta bases."""


Packed = dict[bytes, tuple[int, int | None, bytes]]
"""Blobs compressed ahead (:meth:`SqlArchive.pack`): digest → ``(codec, dict_id, payload)``."""


class ArchiveWriter(DictionaryTraining):
    """Storing blobs."""

    def __init__(
        self,
        db: Database,
        *,
        level: int = DEFAULT_LEVEL,
        dict_level: int = DICT_LEVEL,
        auto_train: bool = True,
    ) -> None:
        self._bases = DeltaCandidates(DELTA_CANDIDATES, DELTA_MIN_SHARED)
        """Recent large non-delta blobs of this process, by digest: candidates to delta against
        (see :mod:`alpstore.archive.candidates`).
        A candidate's id is looked up (and on PostgreSQL locked) in the writing transaction:
        `gc` may have deleted it since.
        """
        self._pending_new = 0
        """Blobs inserted by the transaction under way (``after_commit`` hands them on)."""
        super().__init__(db, level=level, dict_level=dict_level, auto_train=auto_train)

    def _forget_uncommitted(self) -> None:
        self._bases.clear()
        self._pending_new = 0
        super()._forget_uncommitted()

    def _delta(self, raw: bytes, lines: frozenset[bytes], plain: int) -> tuple[bytes, bytes] | None:
        """``(base_digest, payload)`` when a recent blob makes a much smaller delta.

        The base must still be stored: the caller looks its id up in its transaction (see
        :meth:`_base_ids`) before it writes the delta.
        """
        found = self._bases.best(lines)
        if found is None:
            return None
        payload = delta_compressor(found[1], self.level).compress(raw)
        return (found[0], payload) if len(payload) < DELTA_GAIN * plain else None

    def _base_ids(self, conn: Connection, digests: Sequence[bytes]) -> dict[bytes, int]:
        """The ids of the delta bases among ``digests`` still stored whole, looked up (and
        locked on PostgreSQL until commit, so `gc` cannot delete one under its delta) in this
        transaction, in one query per :data:`CHUNK`. A base `gc` collected since, or one
        re-stored as a delta itself, is absent and forgotten as a candidate.
        """
        found: dict[bytes, int] = {}
        for part in chunks(digests):
            for digest, blob_id, codec in digest_rows(conn, "id, codec", part, lock=True):
                if codec != CODEC_ZSTD_BASE:
                    found[digest] = int(blob_id)
        for digest in digests:
            if digest not in found:
                self._bases.discard(digest)
        return found

    def _remember_base(self, digest: bytes, raw: bytes, lines: frozenset[bytes]) -> None:
        self._bases.add(digest, raw, lines)

    def store_encoded(self, conn: Connection, items: Sequence[Encoded]) -> list[int]:
        """Insert what is missing (idempotent) and return every item's surrogate id, in order.

        Large documents that mostly repeat a recent one (a file read again after an edit) are
        stored as a zstd delta against it (one level deep, never a chain).
        """
        return self.store_encoded_counted(conn, items)[0]

    def pack(self, items: Sequence[Encoded]) -> Packed:
        """Compress ``items`` ahead of :meth:`store_encoded_counted` (its ``packed``), with the
        codec in use now: the same frames it would make. Touches no database, so it may run on
        another thread while the caller reads on (zstd works without the interpreter lock, and
        each thread compresses with contexts of its own).
        """
        unique = {digest: raw for digest, _, raw in items}
        dict_id_now, comp = self._codec
        coded = comp.compress_many(list(unique.values()), dictionary_max=SMALL_BLOB_MAX)
        return {
            digest: (codec, dict_id_now if codec == CODEC_ZSTD_DICT else None, payload)
            for digest, (codec, payload) in zip(unique, coded, strict=True)
        }

    def store_encoded_counted(
        self,
        conn: Connection,
        items: Sequence[Encoded],
        *,
        packed: Packed | None = None,
        probe: bool = True,
        known: dict[bytes, int] | None = None,
    ) -> tuple[list[int], int]:
        """:meth:`store_encoded`, and how many blobs this call inserted (an import reports it).

        ``packed``: the items compressed ahead by :meth:`pack` (any item it lacks is
        compressed here).

        ``known``: the ids of digests stored or looked up (so locked) earlier *in this same
        transaction* — they cannot be gone before it ends — taken from it instead of looked up
        again; this call adds its own. The caller drops it with the transaction.

        ``probe`` False: skip looking up which of the other items are stored already and
        insert them all, each ``ON CONFLICT DO NOTHING`` — for a caller that expects none to
        be (an import whose last batch was all new). The ids of rows a statement did not
        insert are then looked up (and locked) after it, so the result is the same; a wrong
        guess costs the compression and delta search of the rows already stored. PostgreSQL
        only: SQLite always looks them up (its digests have no unique index to conflict on,
        0008).
        """
        if not items:
            return [], 0
        wanted = list(dict.fromkeys(d for d, _, _ in items))
        ids: dict[bytes, int] = {d: known[d] for d in wanted if d in known} if known else {}
        rest = [d for d in wanted if d not in ids] if ids else wanted
        if rest and not self.db.is_sqlite:  # new content: ordered with imports' frames
            rsql.execute(conn, LOCK_NEW_BLOBS_SHARED, defer=True)
        if (probe or self.db.is_sqlite) and rest:  # SQLite inserts only what it did not find
            ids.update(self.ids_for(conn, rest, lock=True))
        fresh: dict[bytes, Encoded] = {}
        inserted = 0
        for item in items:
            if item[0] not in ids and item[0] not in fresh:
                fresh[item[0]] = item
        if fresh:
            rows, new_bases = self._blob_rows(conn, fresh, packed)
            for part in chunks(rows, INSERT_ROWS):
                inserted += self._insert_blobs(conn, part, ids, looked_up=probe)
            raced = [d for d in fresh if d not in ids]  # stored meanwhile, or before unprobed
            if raced:
                ids.update(self.ids_for(conn, raced, lock=True))
            for base_digest, base_raw, lines in new_bases:
                self._remember_base(base_digest, base_raw, lines)
            # the small ones among those inserted (unprobed, `fresh` may hold some that were not)
            small = sum(1 for _, _, r in fresh.values() if len(r) <= SMALL_BLOB_MAX)
            self._pending_small += min(small, inserted)
            self._pending_new += inserted
        if known is not None:
            known.update(ids)
        return [ids[d] for d, _, _ in items], inserted

    def _blob_rows(
        self,
        conn: Connection,
        fresh: dict[bytes, Encoded],
        packed: Packed | None,
        *,
        based: list[tuple[bytes | None, bytes | None]] | None = None,
    ) -> tuple[list[tuple[Any, ...]], list[tuple[bytes, bytes, frozenset[bytes]]]]:
        """The blob rows to insert for ``fresh`` (compressed, or deltas against a recent base
        whose id is looked up and locked here), sorted by digest, and the new delta bases
        among them.

        ``based`` (PostgreSQL, :meth:`store_encoded_later`): no lookup; each delta row stays
        plain in the rows and its ``(base digest, delta payload)`` is appended here, in the
        rows' order (``None`` for the rest), for :data:`INSERT_MISSING_BASED` to choose.
        """
        rows: list[tuple[Any, ...]] = []
        new_bases: list[tuple[bytes, bytes, frozenset[bytes]]] = []
        deltas: list[tuple[int, bytes, bytes, frozenset[bytes]]] = []
        coded = packed or {}
        todo = [item for digest, item in fresh.items() if digest not in coded]
        if todo:  # all of them, unless an import packed them ahead
            coded = {**coded, **self.pack(todo)} if coded else self.pack(todo)
        for digest, kind, raw_bytes in fresh.values():
            codec, dict_id, payload = coded[digest]
            if DELTA_MIN_SIZE <= len(raw_bytes) <= DELTA_MAX_SIZE:
                lines = line_hashes(raw_bytes)
                delta = self._delta(raw_bytes, lines, len(payload))
                if delta is not None:
                    deltas.append((len(rows), delta[0], delta[1], lines))
                else:
                    new_bases.append((digest, raw_bytes, lines))
            rows.append((digest, kind, len(raw_bytes), codec, dict_id, payload, None))
        if deltas and based is not None:  # the insert looks the bases up itself
            extra: dict[bytes, tuple[bytes | None, bytes | None]] = {
                rows[i][0]: (base_digest, payload) for i, base_digest, payload, _ in deltas
            }
            rows.sort()
            based.extend(extra.get(row[0], (None, None)) for row in rows)
            return rows, new_bases
        if deltas:
            bases = self._base_ids(conn, list(dict.fromkeys(d for _, d, _, _ in deltas)))
            for i, base_digest, payload, lines in deltas:
                row = rows[i]
                if base_digest in bases:
                    rows[i] = (*row[:3], CODEC_ZSTD_BASE, None, payload, bases[base_digest])
                else:  # its base is gone: stored plain, and a base itself from now on
                    new_bases.append((row[0], fresh[row[0]][2], lines))
        # One global insert order (by digest): writers racing on the same digests queue
        # behind each other instead of deadlocking.
        rows.sort()
        return rows, new_bases

    def store_encoded_later(self, conn: Connection, items: Sequence[Encoded]) -> None:
        """PostgreSQL: store ``items`` (idempotent) in statements that ride the transaction's
        next round trip — one ``INSERT … ON CONFLICT DO NOTHING`` per :data:`INSERT_ROWS`,
        no lookup first — for a caller that names the blobs by digest in its later statements
        of the same transaction (:meth:`ViewStore.grow_later`). Every item is compressed,
        stored already or not. The insert takes ``blobs``' row-exclusive lock, which `gc`'s
        exclusive one waits for: a blob found stored stays until the transaction ends.
        """
        fresh: dict[bytes, Encoded] = {}
        for item in items:
            fresh.setdefault(item[0], item)
        if not fresh:
            return
        based: list[tuple[bytes | None, bytes | None]] = []
        rows, new_bases = self._blob_rows(conn, fresh, None, based=based)
        rsql.execute(conn, LOCK_NEW_BLOBS_SHARED, defer=True)  # its own statement, before
        small = {d for d, (_, _, raw) in fresh.items() if len(raw) <= SMALL_BLOB_MAX}
        # based: empty (no delta) or one per row
        bases_of = {row[0]: b[0] for row, b in zip(rows, based, strict=False) if b[0]}

        def landed(returned: list[tuple[Any, ...]]) -> None:  # the rows this insert added
            self._pending_new += len(returned)
            self._pending_small += sum(1 for r in returned if bytes(r[0]) in small)
            for r in returned:  # a delta stored plain (its base gone): a base in its place
                if len(r) > 2 and r[2] is None and bytes(r[0]) in bases_of:
                    digest = bytes(r[0])
                    self._bases.discard(bases_of[digest])
                    raw_bytes = fresh[digest][2]
                    self._remember_base(digest, raw_bytes, line_hashes(raw_bytes))

        for start in range(0, len(rows), INSERT_ROWS):
            part = rows[start : start + INSERT_ROWS]
            if based and any(b[0] for b in based[start : start + INSERT_ROWS]):
                values = [
                    v
                    for r, b in zip(part, based[start : start + INSERT_ROWS], strict=True)
                    for v in (*r[:6], *b)
                ]
                group = ", ".join([INSERT_MISSING_BASED_ROW] * len(part))
                sql = INSERT_MISSING_BASED.format(rows=group)
            else:
                values = [v for r in part for v in r]
                sql = INSERT_MISSING.format(rows=", ".join([INSERT_MISSING_ROW] * len(part)))
            rsql.execute(conn, sql, values, defer=True, then=landed)
        for base_digest, base_raw, lines in new_bases:
            self._remember_base(base_digest, base_raw, lines)

    def _insert_blobs(
        self,
        conn: Connection,
        part: Sequence[tuple[Any, ...]],
        ids: dict[bytes, int],
        *,
        looked_up: bool = True,
    ) -> int:
        """Insert blob rows (those already stored are left as they are), note the new rows'
        ids in ``ids`` and return how many there were.

        ``looked_up`` False (PostgreSQL): the rows were not looked up first, so one packed in
        a frame (no unique index there) is left out by the insert itself (``INSERT_MISSING``).

        SQLite: no RETURNING. The writer holds the whole database and inserts only rows its
        transaction looked up and did not find, so the statement inserts every row and their
        ids are the consecutive ones ending at the last insert rowid (``AUTOINCREMENT``: each
        row takes the largest id so far plus one, in the order of the VALUES). That spares
        building a returned row per blob, and the interpreter lock taken back for each.
        """
        values = [v for r in part for v in r]
        group = ", ".join(["(?, ?, ?, ?, ?, ?, ?)"] * len(part))
        if self.db.is_sqlite:
            cur = rsql.execute(conn, INSERT_BLOBS_PLAIN.format(rows=group), values)
            if cur.rowcount != len(part) or cur.lastrowid is None:
                raise IntegrityError(f"blobs insert stored {cur.rowcount} of {len(part)} rows")
            first = int(cur.lastrowid) - len(part) + 1
            for offset, row in enumerate(part):
                ids[bytes(row[0])] = first + offset
            return int(cur.rowcount)
        inserted = 0
        if not looked_up:
            sql = INSERT_MISSING.format(rows=", ".join([INSERT_MISSING_ROW] * len(part)))
        else:
            sql = INSERT_BLOBS.format(rows=group)
        for digest, blob_id in rsql.fetchall(conn, sql, values):
            ids[bytes(digest)] = int(blob_id)
            inserted += 1
        return inserted

    def after_commit(self) -> None:
        """Housekeeping once a write committed (automatic dictionary training)."""
        self._last_write = time.monotonic()
        pending, new = self._pending_small, self._pending_new
        self._pending_small = self._pending_new = 0
        self._maybe_auto_train(pending)
        self._maybe_auto_pack(new)

    def _maybe_auto_pack(self, new_blobs: int) -> None:
        """Count blobs a committed write stored, for background packing (``SqlArchive``)."""

    def put(self, value: Any, kind: int = BLOB_MESSAGE) -> Digest:
        """Store ``value`` once; return its digest (idempotent)."""
        return self.put_many([value], kind)[0]

    def put_many(self, values: Sequence[Any], kind: int = BLOB_MESSAGE) -> list[Digest]:
        """Store every value in one transaction; return their digests in order."""
        items = [encode(v, kind) for v in values]
        with self.db.atomic() as conn:
            self.store_encoded(conn, items)
        self.after_commit()
        return [d for d, _, _ in items]

    def put_summary(self, text: str, covers: Sequence[Digest]) -> Digest:
        """Store a summary node covering ``covers`` (which must already be stored).

        Raises:
            NotFoundError: a covered digest is not in the archive.
        """
        with self.db.atomic() as conn:
            _, digest = self.store_summary(conn, text, covers)
        return digest

    def store_summary(
        self, conn: Connection, text: str, covers: Sequence[bytes]
    ) -> tuple[int, Digest]:
        """Insert a summary node and its ordered references inside ``conn``'s transaction."""
        child_ids = self.ids_for(conn, list(covers), lock=True)
        missing = [digest_hex(d) for d in covers if d not in child_ids]
        if missing:
            raise NotFoundError(f"summary covers unknown blob {missing[0]}")
        item = encode(summary_document(text, covers), BLOB_SUMMARY)
        before = self.ids_for(conn, [item[0]])
        (sid,) = self.store_encoded(conn, [item])
        if item[0] not in before:
            rsql.executemany(  # plain SQL: an import of a file holding summaries, driver alone
                conn,
                "INSERT INTO blob_refs (parent_id, position, child_id) VALUES (?, ?, ?) "
                "ON CONFLICT (parent_id, position) DO NOTHING",
                [(sid, i, child_ids[d]) for i, d in enumerate(covers)],
            )
        return sid, item[0]
