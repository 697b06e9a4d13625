"""The read path of the SQL blob store: blobs by digest or id, decoded (in bulk through
``batch``), with the dictionaries and delta bases they need. Plain SQL through
``alpstore.db.raw`` only, so it runs on a ``LiteDatabase`` (an SQLite file opened for reading
without SQLAlchemy) as on a ``Database``; SQLAlchemy is imported for type checking only.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from alpstore.archive.batch import FULL, decode_batch
from alpstore.archive.frames import CODEC_PACKED, FrameReading
from alpstore.codec import (
    CODEC_ZSTD_BASE,
    CODEC_ZSTD_DICT,
    DEFAULT_LEVEL,
    DICT_LEVEL,
    DICT_STORE_LEVEL,
    Compressor,
    Decompressor,
    Digest,
    canonical_json,
    digest_bytes,
    digest_hex,
    pack_dictionary,
    parse_json,
)
from alpstore.db import raw as rsql
from alpstore.db.members import packed_by_digest, rows_by_id, select_columns
from alpstore.db.names import BLOB_MESSAGE, DIGEST_PREFIX
from alpstore.errors import IntegrityError, NotFoundError

if TYPE_CHECKING:
    from alpstore.db.lite import ReadableDatabase
    from alpstore.db.raw import AnyConnection

CHUNK = 500
"""Digests per IN (...) query: well under every backend's bound-parameter limit."""

BASE_CACHE = 64
"""How many decoded delta bases a reader keeps."""

BLOB_COLUMNS = "id, digest, kind, raw_size, codec, dict_id, payload, base_id"
BLOB_SELECT = f"SELECT {BLOB_COLUMNS} FROM blobs"
"""A blob row whole, as :class:`BlobRow` holds it."""

DICT_SELECT = "SELECT id, codec, size, digest, data FROM zstd_dicts"
"""A dictionary row, as :class:`DictRow` holds it (what :func:`load_dictionary_row` decodes)."""

Encoded = tuple[Digest, int, bytes]
"""A document ready to store: (digest, kind, canonical bytes)."""


class BlobRow(NamedTuple):
    """One ``blobs`` row whole (the columns of :data:`BLOB_SELECT`)."""

    id: int
    digest: bytes
    kind: int
    raw_size: int
    codec: int
    dict_id: int | None
    payload: bytes
    base_id: int | None = None


class DictRow(NamedTuple):
    """One ``zstd_dicts`` row (the columns of :data:`DICT_SELECT`)."""

    id: int
    codec: int
    size: int
    digest: bytes
    data: bytes


def load_dictionary_row(dec: Decompressor, row: Any) -> bytes:
    """Decode and check a dictionary row (``id, codec, size, digest, data`` by name) and make
    it available to ``dec``; returns it.

    Raises:
        IntegrityError: the row is damaged or not the dictionary its digest names.
    """
    return dec.load_dictionary(
        int(row.id), int(row.codec), bytes(row.data), int(row.size), bytes(row.digest)
    )


def store_dictionary_row(
    conn: Any,
    data: bytes,
    sample_count: int,
    *,
    packed: tuple[int, bytes] | None = None,
    purpose: int = 0,
) -> int:
    """Insert dictionary ``data`` in the caller's transaction (the same bytes stored before:
    that row), itself compressed at ``DICT_STORE_LEVEL`` unless ``packed`` gives its stored
    form (``(codec, bytes)`` of :func:`pack_dictionary`); its id. ``purpose`` (0013): 0 the
    blob store's, 1 the LangGraph saver's closed turns.
    """
    digest = digest_bytes(data)
    codec, stored = packed or pack_dictionary(data, DICT_STORE_LEVEL)
    rsql.execute(  # plain SQL: an import writes it on the sqlite3 driver alone
        conn,
        "INSERT INTO zstd_dicts (digest, size, sample_count, created_at, data, codec, purpose) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (digest) DO NOTHING",
        (digest, len(data), sample_count, time.time(), stored, codec, purpose),
    )
    row = rsql.fetchone(conn, "SELECT id FROM zstd_dicts WHERE digest = ?", (digest,))
    return int(row[0])


def encode(value: Any, kind: int = BLOB_MESSAGE) -> Encoded:
    """Canonicalise and hash a document."""
    raw = canonical_json(value)
    return digest_bytes(raw), kind, raw


def parse_documents(items: Sequence[tuple[bytes, bytes]]) -> list[Any]:
    """Parse ``(digest, canonical bytes)`` pairs: one ``json.loads`` for the whole batch (canonical
    documents join into a valid array), per document only to name a damaged one.

    Raises:
        IntegrityError: a document is not one JSON value.
    """
    return parse_raws([data for _, data in items], [d for d, _ in items])


def parse_raws(raws: Sequence[bytes], digests: Sequence[bytes] | None = None) -> list[Any]:
    """Parse canonical documents: one ``json.loads`` for the whole batch (canonical documents
    join into a valid array), per document only to name a damaged one, by its digest when
    ``digests`` are given, else by its place.

    Raises:
        IntegrityError: a document is not one JSON value.
    """
    if not raws:
        return []
    try:
        parts = list(raws)  # the brackets on the first and last: one copy of the batch, not two
        parts[0] = b"[" + parts[0]
        parts[-1] = parts[-1] + b"]"
        docs = json.loads(b",".join(parts))
    except ValueError:
        names = [f"blob {bytes(d).hex()}" for d in digests] if digests is not None else None
        docs = [
            parse_json(data, where=names[i] if names else f"entry {i}")
            for i, data in enumerate(raws)
        ]
    if not isinstance(docs, list) or len(docs) != len(raws):
        raise IntegrityError("a stored blob holds more than one JSON document")
    return docs


def digest_rows(
    conn: AnyConnection, columns: str, digests: Sequence[bytes], *, lock: bool = False
) -> list[Any]:
    """``SELECT digest, <columns> FROM blobs`` for the stored ones among ``digests`` (at most
    :data:`CHUNK` of them), each row's first value the digest as bytes.

    PostgreSQL looks them up in the unique index on the whole digest (``lock``: the rows are
    locked ``FOR KEY SHARE`` until commit). SQLite keeps one copy of each digest (0008): its
    index holds the first :data:`~alpstore.db.names.DIGEST_PREFIX` bytes, so the query finds
    the rows of those prefixes and the whole digests are compared here.
    """
    if not digests:
        return []

    if rsql.dialect_of(conn) != "sqlite":
        marks = rsql.placeholders(len(digests))
        sql = f"SELECT digest, {columns} FROM blob_rows WHERE digest IN ({marks})"
        if lock:
            sql += " FOR KEY SHARE"
        rows = [(bytes(r[0]), *r[1:]) for r in rsql.fetchall(conn, sql, digests)]
    else:
        wanted = set(digests)
        prefixes = list({bytes(d[:DIGEST_PREFIX]) for d in wanted})
        sql = (
            f"SELECT digest, {columns} FROM blob_rows "
            f"WHERE substr(digest, 1, {DIGEST_PREFIX}) IN ({rsql.placeholders(len(prefixes))})"
        )
        rows = [(bytes(r[0]), *r[1:]) for r in rsql.fetchall(conn, sql, prefixes)]
        rows = [r for r in rows if r[0] in wanted]
    missing = set(digests).difference(r[0] for r in rows)
    if missing:  # packed: described in their frame's row (0010)
        packed = packed_by_digest(conn, list(missing), lock=lock)
        rows += select_columns(packed, f"digest, {columns}")
    return rows


def chunks(items: Sequence[Any], size: int = CHUNK) -> Iterator[Sequence[Any]]:
    """Consecutive slices of at most ``size`` items."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


class ArchiveReader(FrameReading):
    """Reading blobs from the ``blobs`` table (packed ones through their frames:
    :mod:`alpstore.archive.frames`); ``SqlArchive`` adds writing, dictionary
    training and verification. Opened on its own (on a database opened for reading), it
    never writes.
    """

    def __init__(
        self,
        db: ReadableDatabase,
        *,
        level: int = DEFAULT_LEVEL,
        dict_level: int = DICT_LEVEL,
    ) -> None:
        self.db = db
        self.level = level
        self.dict_level = dict_level
        """zstd level of the frames made with the dictionary (small blobs)."""
        self._dec = Decompressor()
        self._codec: tuple[int | None, Compressor] = (None, Compressor(level))
        """(dictionary id, compressor) for new blobs: one attribute, swapped whole, so a writer
        never pairs one dictionary's frames with another's id."""
        self._base_raw: OrderedDict[int, bytes] = OrderedDict()
        """Decoded bases by blob id, for reading delta blobs. Safe across `gc`: ids are never
        reused, and a blob's content never changes (only its encoding may)."""
        self._damaged_dictionary: int | None = None
        """The newest dictionary, when its row does not decode (new blobs are written without
        it, no new one is trained over it; `archive verify` names it and the blobs needing it)."""
        self._init_frames()
        self._load_newest_dictionary()
        db.on_rollback(self._forget_uncommitted)

    def _forget_uncommitted(self) -> None:
        """A write rolled back: forget what it wrote (SQLite hands a rolled-back id out again,
        AUTOINCREMENT or not).
        """
        self._base_raw.clear()

    # ----------------------------------------------------------------- dictionaries
    @property
    def dictionary_id(self) -> int | None:
        """The dictionary new small blobs are compressed with (None before one is trained)."""
        return self._codec[0]

    def _load_newest_dictionary(self) -> None:
        with self.db.read() as conn:
            found = rsql.fetchone(conn, f"{DICT_SELECT} WHERE purpose = 0 ORDER BY id DESC LIMIT 1")
        row = None if found is None else DictRow(*found)
        if row is not None and int(row.id) not in (self._codec[0], self._damaged_dictionary):
            try:
                data = load_dictionary_row(self._dec, row)
            except IntegrityError:
                # damage like a damaged frame: the archive opens and every read that does not
                # need this dictionary works; the blobs that do are named where they are read
                self._damaged_dictionary = int(row.id)
                return
            self._codec = (int(row.id), self._compressor(data))

    def _compressor(self, dictionary: bytes) -> Compressor:
        return Compressor(self.level, dictionary, dict_level=self.dict_level)

    def _ensure_dictionary(self, conn: AnyConnection, dict_id: int) -> None:
        if self._dec.has_dictionary(dict_id):
            return
        found = rsql.fetchone(conn, f"{DICT_SELECT} WHERE id = ?", (dict_id,))
        if found is None:
            raise IntegrityError(f"zstd dictionary {dict_id} is missing from the archive")
        load_dictionary_row(self._dec, DictRow(*found))

    def ids_for(
        self, conn: AnyConnection, digests: Sequence[bytes], *, lock: bool = False
    ) -> dict[bytes, int]:
        """Surrogate ids of the stored digests among ``digests`` (unknown ones are absent).

        ``lock`` (for a writer about to reference them): on PostgreSQL the rows are locked
        ``FOR KEY SHARE`` until commit, so a concurrent GC cannot delete a blob between this
        lookup and the row that references it (SQLite writers exclude GC as a whole). Every id
        a write refers to comes from a lookup like this in its own transaction, never from a
        process-local cache.
        """
        found: dict[bytes, int] = {}
        for part in chunks(digests):
            for digest, blob_id in digest_rows(conn, "id", part, lock=lock):
                found[digest] = int(blob_id)
        return found

    # ----------------------------------------------------------------- reading
    def _base(self, conn: AnyConnection, base_id: int, what: str) -> bytes:
        """The raw bytes of a delta's base blob (cached; a base is never itself a delta)."""
        raw = self._base_raw.get(base_id)
        if raw is not None:
            self._base_raw.move_to_end(base_id)
            return raw
        base = self._row_by_id(conn, base_id)
        if base is None:
            raise IntegrityError(f"{what}: its delta base (blob id {base_id}) is missing")
        if base.codec == CODEC_ZSTD_BASE:
            raise IntegrityError(f"{what}: its delta base is itself a delta")
        raw = self._decode_row(conn, base, verify=True)
        self._base_raw[base_id] = raw
        while len(self._base_raw) > BASE_CACHE:
            self._base_raw.popitem(last=False)
        return raw

    def _decode_row(self, conn: AnyConnection, row: Any, *, verify: bool = False) -> bytes:
        codec = row.codec
        base = None
        try:
            if codec == CODEC_ZSTD_DICT and row.dict_id is not None:
                self._ensure_dictionary(conn, int(row.dict_id))
            elif codec == CODEC_ZSTD_BASE:
                if row.base_id is None:
                    raise IntegrityError("a delta without a base")
                base = self._base(conn, int(row.base_id), "its base")
            if codec == CODEC_PACKED:
                raw = self.unpack(conn, [int(row.raw_size)], [row.payload])[0]
            else:
                raw = self._dec.decompress(
                    codec, bytes(row.payload), row.raw_size, row.dict_id, what="", base=base
                )
        except IntegrityError as err:
            name = f"blob {digest_hex(bytes(row.digest))}"
            raise IntegrityError(
                f"{name}{err.message}" if err.message.startswith(":") else f"{name}: {err.message}"
            ) from err
        if verify and digest_bytes(raw) != bytes(row.digest):
            raise IntegrityError(
                f"blob {digest_hex(bytes(row.digest))}: content does not match its digest"
            )
        return raw

    def _row_by_id(self, conn: AnyConnection, blob_id: int) -> BlobRow | None:
        """Blob row ``blob_id`` whole, or None when there is none."""
        rows = rows_by_id(conn, [blob_id], located=True)
        return BlobRow(*rows[0]) if rows else None

    def _decode_id(self, conn: AnyConnection, blob_id: int) -> bytes:
        """Blob ``blob_id`` read whole and decoded by ``_decode_row`` (errors name its digest).

        Raises:
            IntegrityError: the blob is gone or damaged.
        """
        row = self._row_by_id(conn, blob_id)
        if row is None:
            raise IntegrityError(f"blob id {blob_id} is referenced but missing from the archive")
        return self._decode_row(conn, row)

    def decode_rows(self, conn: AnyConnection, rows: list[Any], *, verify: bool) -> list[bytes]:
        """Decode ``(id, digest, kind, raw_size, codec, dict_id, payload, base_id)`` rows.

        Unverified, in bulk (``batch.decode_batch``: grouped by codec and dictionary, every
        frame's declared size checked against the recorded one before anything is
        decompressed); anything unusual through ``_decode_row``, which names the blob by its
        digest. ``verify``: the same bulk decoding (a frame decompressed once for all the
        blobs it holds), then every blob re-hashed (BLAKE3, one pass over the bytes); one that
        does not match its digest goes through ``_decode_row``, which names it (issue 41: a
        deep export decoded each packed blob's frame lookup and slice one by one).
        """
        if not verify:
            return decode_batch(
                self, conn, rows, FULL, lambda row: self._decode_row(conn, BlobRow(*row))
            )
        raws = decode_batch(
            self, conn, rows, FULL, lambda row: self._decode_row(conn, BlobRow(*row), verify=True)
        )
        for i, (row, raw) in enumerate(zip(rows, raws, strict=True)):
            if digest_bytes(raw) != bytes(row[1]):
                raws[i] = self._decode_row(conn, BlobRow(*row), verify=True)  # raises, naming it
        return raws

    def load_raw_by_ids(
        self, conn: AnyConnection, ids: Iterable[int], *, verify: bool = False
    ) -> dict[int, tuple[Digest, int, bytes]]:
        """Load ``{id: (digest, kind, canonical bytes)}``: hydration without parsing.

        Raises:
            IntegrityError: a blob is damaged, or an id names no blob.
        """
        out: dict[int, tuple[Digest, int, bytes]] = {}
        unique = list(dict.fromkeys(ids))
        for part in chunks(unique):
            rows = rows_by_id(conn, part, located=True)
            raws = self.decode_rows(conn, rows, verify=verify)
            digests: Iterable[Digest] = map(bytes, map(itemgetter(1), rows))  # type: ignore[arg-type]
            kinds = map(itemgetter(2), rows)
            out.update(
                zip(map(itemgetter(0), rows), zip(digests, kinds, raws, strict=True), strict=True)
            )
        if len(out) != len(unique):
            missing = next(i for i in unique if i not in out)
            raise IntegrityError(
                f"blob id {missing} is referenced but missing from the archive",
                hint="`alpstore archive verify` names the rows that refer to it",
            )
        return out

    def load_by_ids(
        self, conn: AnyConnection, ids: Iterable[int], *, verify: bool = False
    ) -> dict[int, tuple[Digest, int, Any]]:
        """Load ``{id: (digest, kind, document)}`` for the given surrogate ids."""
        raw = self.load_raw_by_ids(conn, ids, verify=verify)
        docs = parse_documents([(d, data) for d, _, data in raw.values()])
        return {i: (d, kind, doc) for (i, (d, kind, _)), doc in zip(raw.items(), docs, strict=True)}

    def get(self, digest: Digest, *, verify: bool = False) -> Any:
        """Return the document stored under ``digest``.

        Raises:
            NotFoundError: no such blob.
            IntegrityError: the stored bytes are damaged.
        """
        return self.get_many([digest], verify=verify)[0]

    def get_many(self, digests: Sequence[Digest], *, verify: bool = False) -> list[Any]:
        """Return the documents stored under ``digests``, in order.

        Raises:
            NotFoundError: a digest is not stored (the first one is named).
        """
        unique = list(dict.fromkeys(bytes(d) for d in digests))
        by_digest: dict[bytes, Any] = {}
        with self.db.read() as conn:
            for part in chunks(unique):  # the rows whole, found by digest: no second lookup by id
                rows = [r[1:] for r in digest_rows(conn, BLOB_COLUMNS, part)]
                found = {bytes(r[1]) for r in rows}
                for d in part:
                    if d not in found:
                        raise NotFoundError(f"no blob {digest_hex(d)} in the archive")
                raws = self.decode_rows(conn, rows, verify=verify)
                docs = parse_documents(
                    [(bytes(r[1]), raw) for r, raw in zip(rows, raws, strict=True)]
                )
                by_digest.update(zip((bytes(r[1]) for r in rows), docs, strict=True))
        return [by_digest[bytes(d)] for d in digests]

    def get_raw(self, digest: Digest, *, verify: bool = True) -> tuple[int, bytes]:
        """Return ``(kind, canonical bytes)`` of a blob.

        Raises:
            NotFoundError: no such blob.
        """
        with self.db.read() as conn:
            rows = digest_rows(conn, BLOB_COLUMNS, [bytes(digest)])
            if not rows:
                raise NotFoundError(f"no blob {digest_hex(digest)} in the archive")
            blob = BlobRow(*rows[0][1:])
            return int(blob.kind), self._decode_row(conn, blob, verify=verify)

    def has(self, digest: Digest) -> bool:
        """True when ``digest`` is stored."""
        with self.db.read() as conn:
            return bool(self.ids_for(conn, [digest]))
