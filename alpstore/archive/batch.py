"""Decoding many blobs at once, for bulk reads (a whole head at a cold read).

The rows are *lean* (``Views.read_lean_rows``): ``(id, kind, raw_size, codec, dict_id, payload,
base_id)``, without the digest (reading its 32 bytes costs about a third of the range scan). A
row that does not decode on the fast path is read again whole and decoded by
``SqlArchive._decode_row``, which names the blob by its digest.

Fast path, per group of rows sharing a codec and dictionary: every frame must declare exactly the
recorded size (checked before anything is decompressed, so a frame claiming more is never
expanded: the bound on output holds as in ``Decompressor.decompress``), then the frames are
decompressed by a C-level loop and every output's length checked. A delta (a frame made against
a base blob) whose base is in the same batch takes the base's bytes from it instead of a query
per base; the delta frame carries a checksum of its content, so a wrong base cannot pass
unnoticed. Nothing is kept between calls.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from itertools import compress, count, repeat
from operator import eq, itemgetter
from typing import Any

import zstandard
from sqlalchemy import Connection

from alpstore.archive.sql import SqlArchive, _Row
from alpstore.codec import (
    CODEC_RAW,
    CODEC_ZSTD,
    CODEC_ZSTD_BASE,
    CODEC_ZSTD_DICT,
    MAX_RAW_SIZE,
    raw_content_dict,
)
from alpstore.db import raw as rsql
from alpstore.errors import IntegrityError

_ids = itemgetter(0)
_sizes = itemgetter(2)
_codecs = itemgetter(3)
_dict_ids = itemgetter(4)
_payloads = itemgetter(5)
_declared = zstandard.frame_content_size
_consume: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend


def decode_lean(archive: SqlArchive, conn: Connection, rows: Sequence[Any]) -> list[bytes]:
    """The canonical bytes of lean blob rows, in order (digests not checked: a read, not
    ``verify``).

    Raises:
        IntegrityError: a blob is damaged (named by its digest), or a dictionary or delta base
            it needs is missing.
    """
    out: list[bytes | None] = [None] * len(rows)
    keys = list(zip(map(_codecs, rows), map(_dict_ids, rows), strict=True))
    deltas: list[int] = []
    for key in set(keys):  # a few: the codecs and dictionaries in use
        where = list(compress(count(), map(eq, keys, repeat(key))))
        if key[0] == CODEC_ZSTD_BASE:
            deltas += where
            continue
        part = list(map(rows.__getitem__, where))
        raws = _decode_group(archive, conn, key[0], key[1], part)
        if raws is None:  # anything unusual: one by one, the archive's own decoder
            raws = [_decode_one(archive, conn, row) for row in part]
        if len(where) == len(out):
            out = list(raws)
        else:
            _consume(map(out.__setitem__, where, raws))
    if deltas:
        known = dict(zip(map(_ids, rows), out, strict=True))  # the deltas' own are None
        contexts: dict[int, zstandard.ZstdDecompressor] = {}
        for i in sorted(deltas):
            out[i] = _decode_delta(archive, conn, rows[i], known, contexts)
    return out  # type: ignore[return-value]  # every position is filled above


def _decode_group(
    archive: SqlArchive, conn: Connection, codec: int, dict_id: int | None, part: list[Any]
) -> list[bytes] | None:
    """Rows of one codec and dictionary decoded in C-level loops, or None when any of them
    needs the slow path (another codec, a frame that does not declare its recorded size, a
    damaged frame).
    """
    payloads = list(map(_payloads, part))
    sizes = list(map(_sizes, part))
    if codec == CODEC_RAW and dict_id is None:
        raws = list(map(bytes, payloads))
        return raws if list(map(len, raws)) == sizes else None
    if codec == CODEC_ZSTD and dict_id is None:
        dctx = archive._dec.plain
    elif codec == CODEC_ZSTD_DICT and dict_id is not None:
        try:
            archive._ensure_dictionary(conn, int(dict_id))
        except IntegrityError:  # missing: the slow path names the blobs that need it
            return None
        dctx = archive._dec.dicts[int(dict_id)]
    else:
        return None
    if not sizes or max(sizes) > MAX_RAW_SIZE:
        return None
    try:
        if list(map(_declared, payloads)) != sizes:
            return None
        raws = list(map(dctx.decompress, payloads))
    except zstandard.ZstdError:
        return None
    return raws if list(map(len, raws)) == sizes else None


def _decode_delta(
    archive: SqlArchive,
    conn: Connection,
    row: Any,
    known: dict[int, bytes | None],
    contexts: dict[int, zstandard.ZstdDecompressor],
) -> bytes:
    """A delta row: against its base from this batch when there (one decompression context
    per base, in ``contexts``), else through the archive.
    """
    base_id, payload, size = row[6], row[5], row[2]
    base = known.get(base_id)
    if base is None or not 0 <= size <= MAX_RAW_SIZE:
        return _decode_one(archive, conn, row)
    dctx = contexts.get(base_id)
    if dctx is None:
        dctx = contexts[base_id] = zstandard.ZstdDecompressor(dict_data=raw_content_dict(base))
    try:
        if _declared(payload) == size:
            raw = dctx.decompress(payload)
            if len(raw) == size:
                return raw
    except zstandard.ZstdError:
        pass
    return _decode_one(archive, conn, row)  # names what is wrong


def _decode_one(archive: SqlArchive, conn: Connection, row: Any) -> bytes:
    """One row through ``SqlArchive._decode_row`` (read again whole: its errors name the blob's
    digest).

    Raises:
        IntegrityError: the blob is gone or damaged.
    """
    full = rsql.fetchone(
        conn,
        "SELECT id, digest, kind, raw_size, codec, dict_id, payload, base_id FROM blobs "
        "WHERE id = ?",
        (row[0],),
    )
    if full is None:
        raise IntegrityError(f"blob id {row[0]} is referenced but missing from the archive")
    return archive._decode_row(conn, _Row(*full))
