"""Decoding many blobs at once: the unverified fast path of every bulk read.

Two row layouts come here. Full rows ``(id, digest, kind, raw_size, codec, dict_id, payload,
base_id)`` (``FULL``) from ``ArchiveReader.decode_rows`` unverified: hydration, ``pop_last``, the
dictionary trainer (a verified read re-hashes every blob in ``_decode_row``). Lean rows ``(id,
kind, raw_size, codec, dict_id, payload, base_id)`` (``LEAN``, ``Views.read_lean_rows``) from
``decode_lean``, a LangGraph cold read: without the digest, whose 32 bytes cost about a third
of the range scan. A row that does not decode on the fast path takes the caller's slow path,
``ArchiveReader._decode_row``, which names the blob by its digest (a lean row is read again whole
for it: ``ArchiveReader._decode_id``).

Fast path, per group of rows sharing a codec and dictionary: every recorded size must be
within bounds and every frame must declare exactly it (checked before anything is
decompressed, so a frame claiming more is never expanded: the bound on output holds as in
``Decompressor.decompress``), then the frames are decompressed by a C-level loop and every
output's length checked. A delta (a frame made against a base blob) whose base is in the same
batch takes the base's bytes from it instead of a query per base; the delta frame carries a
checksum of its content, so a wrong base cannot pass unnoticed; a base outside the batch is
the slow path's (``ArchiveReader._base``). Nothing is kept between calls.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from itertools import compress, count, repeat
from operator import eq, itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import zstandard

from alpstore.archive.frames import CODEC_PACKED
from alpstore.codec import (
    CODEC_RAW,
    CODEC_ZSTD,
    CODEC_ZSTD_BASE,
    CODEC_ZSTD_DICT,
    MAX_RAW_SIZE,
    Decompressor,
    raw_content_dict,
)
from alpstore.errors import IntegrityError

if TYPE_CHECKING:
    from alpstore.db.raw import AnyConnection


class BlobDecoding(Protocol):
    """What decoding needs of the archive (``reading.ArchiveReader`` offers it): its
    decompressor, dictionaries loaded on demand, and a blob read again whole by id.
    """

    @property
    def _dec(self) -> Decompressor: ...

    def _ensure_dictionary(self, conn: AnyConnection, dict_id: int) -> None: ...

    def _decode_id(self, conn: AnyConnection, blob_id: int) -> bytes: ...

    def unpack(
        self, conn: AnyConnection, sizes: Sequence[int], payloads: Sequence[Any]
    ) -> list[bytes]:
        """Packed blobs' bytes (``frames.FrameReading.unpack``)."""
        ...


class Columns(NamedTuple):
    """Where a row layout keeps what decoding needs: one item getter per column."""

    ids: Callable[[Any], Any]
    sizes: Callable[[Any], Any]
    codecs: Callable[[Any], Any]
    dict_ids: Callable[[Any], Any]
    payloads: Callable[[Any], Any]
    base_ids: Callable[[Any], Any]


FULL = Columns(*map(itemgetter, (0, 3, 4, 5, 6, 7)))
"""``(id, digest, kind, raw_size, codec, dict_id, payload, base_id)``."""

LEAN = Columns(*map(itemgetter, (0, 2, 3, 4, 5, 6)))
"""``(id, kind, raw_size, codec, dict_id, payload, base_id)``: no digest."""

_declared = zstandard.frame_content_size
_consume: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend


def decode_lean(archive: BlobDecoding, conn: AnyConnection, rows: Sequence[Any]) -> list[bytes]:
    """The canonical bytes of lean blob rows, in order (digests not checked: a read, not
    ``verify``).

    Raises:
        IntegrityError: a blob is damaged (named by its digest), or a dictionary or delta base
            it needs is missing.
    """
    return decode_batch(archive, conn, rows, LEAN, lambda row: archive._decode_id(conn, row[0]))


def decode_batch(
    archive: BlobDecoding,
    conn: AnyConnection,
    rows: Sequence[Any],
    cols: Columns,
    slow: Callable[[Any], bytes],
) -> list[bytes]:
    """The canonical bytes of blob rows laid out as ``cols`` says, in order, digests not
    checked; a row the fast path does not decode goes to ``slow``, which raises naming it.

    Raises:
        IntegrityError: from ``slow``.
    """
    codecs = set(map(cols.codecs, rows))
    if len(codecs) == 1 and codecs != {CODEC_ZSTD_BASE}:  # (a packed view: one group, as is)
        dict_ids = set(map(cols.dict_ids, rows))
        if len(dict_ids) == 1:
            whole = _decode_group(archive, conn, codecs.pop(), dict_ids.pop(), rows, cols)
            return list(map(slow, rows)) if whole is None else whole
    out: list[bytes | None] = [None] * len(rows)
    keys = list(zip(map(cols.codecs, rows), map(cols.dict_ids, rows), strict=True))
    deltas: list[int] = []
    for key in set(keys):  # a few: the codecs and dictionaries in use
        where = list(compress(count(), map(eq, keys, repeat(key))))
        if key[0] == CODEC_ZSTD_BASE:
            deltas += where
            continue
        part = list(map(rows.__getitem__, where))
        raws = _decode_group(archive, conn, key[0], key[1], part, cols)
        if raws is None:  # anything unusual: one by one, the slow path
            raws = list(map(slow, part))
        if len(where) == len(out):
            out = list(raws)
        else:
            _consume(map(out.__setitem__, where, raws))
    if deltas:
        known = dict(zip(map(cols.ids, rows), out, strict=True))  # the deltas' own are None
        contexts: dict[int, zstandard.ZstdDecompressor] = {}
        deltas.sort()
        part = list(map(rows.__getitem__, deltas))
        for i, row, base_id, payload, size in zip(
            deltas,
            part,
            map(cols.base_ids, part),
            map(cols.payloads, part),
            map(cols.sizes, part),
            strict=True,
        ):
            raw = _decode_delta(known.get(base_id), payload, size, base_id, contexts)
            out[i] = slow(row) if raw is None else raw
    return out  # type: ignore[return-value]  # every position is filled above


def _decode_group(
    archive: BlobDecoding,
    conn: AnyConnection,
    codec: int,
    dict_id: int | None,
    part: Sequence[Any],
    cols: Columns,
) -> list[bytes] | None:
    """Rows of one codec and dictionary decoded in C-level loops, or None when any of them
    needs the slow path (another codec, a size out of bounds, a frame that does not declare
    its recorded size, a damaged frame).
    """
    sizes = list(map(cols.sizes, part))
    # (a negative size can only equal an undeclared one, -1, which zstd refuses unbounded)
    if not sizes or max(sizes) > MAX_RAW_SIZE:
        return None
    payloads = list(map(cols.payloads, part))
    if codec == CODEC_RAW and dict_id is None:
        raws = list(map(bytes, payloads))
        return raws if list(map(len, raws)) == sizes else None
    if codec == CODEC_PACKED and dict_id is None:  # one decompression per frame
        try:
            return archive.unpack(conn, sizes, payloads)
        except IntegrityError:  # the slow path names the blob
            return None
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
    try:
        if list(map(_declared, payloads)) != sizes:
            return None
        raws = list(map(dctx.decompress, payloads))
    except zstandard.ZstdError:
        return None
    return raws if list(map(len, raws)) == sizes else None


def _decode_delta(
    base: bytes | None,
    payload: Any,
    size: int,
    base_id: int,
    contexts: dict[int, zstandard.ZstdDecompressor],
) -> bytes | None:
    """A delta frame against ``base``, its base's bytes from the same batch (one decompression
    context per base, in ``contexts``), or None when the base is not there or anything is
    unusual.
    """
    if base is None or not 0 <= size <= MAX_RAW_SIZE:
        return None
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
    return None
