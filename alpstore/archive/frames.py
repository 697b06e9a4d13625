"""Reading packed blobs (issue 33): a blob whose ``codec`` is :data:`CODEC_PACKED` holds no
payload of its own; its ``payload`` column is a pointer — the id of a ``pack_frames`` row and
the offset of the blob's bytes in that frame's content, two unsigned LEB128 varints — and its
bytes are ``raw_size`` bytes of the frame's decompressed content from there.

A frame's content is the canonical bytes of the blobs packed into it, concatenated in the order
they were stored (conversation order); ``data`` is that content as one zstd frame (with the
archive's dictionary, or without), ``digest`` its BLAKE3-256. A frame is checked against its
digest each time it is decoded, and kept decoded in a small cache keyed by that digest — never
by its row id, which `gc` may delete (a repacked frame's content is not the same) — so reading
the messages of one frame costs one decompression.

Plain SQL through :mod:`alpstore.db.raw` only: this is the read path (no SQLAlchemy).
"""

from __future__ import annotations

import sys
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from itertools import repeat
from operator import add, getitem, itemgetter, sub
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from alpstore.codec import MAX_RAW_SIZE, Decompressor, digest_bytes
from alpstore.db import raw as rsql
from alpstore.db.members import CODEC_PACKED as CODEC_PACKED
from alpstore.db.members import pointer as pointer
from alpstore.db.members import pointers as pointers
from alpstore.db.members import varint
from alpstore.errors import IntegrityError

if TYPE_CHECKING:
    from alpstore.db.raw import AnyConnection


FRAME_CACHE = 16
"""Decoded frames a reader keeps (by content digest): 16 × ~192 KB (``FRAME_TARGET``)."""

FRAME_META = "SELECT id, digest, codec, dict_id, raw_size FROM pack_frames"
"""A frame row without its data (enough to find it in the cache)."""


class FrameRow(NamedTuple):
    """One ``pack_frames`` row without ``data``."""

    id: int
    digest: bytes
    codec: int
    dict_id: int | None
    raw_size: int


def frame_prefix(frame_id: int) -> bytes:
    """The first bytes of every pointer into frame ``frame_id`` (a varint ends itself, so a
    pointer starts with these bytes exactly when it points into this frame).
    """
    return varint(frame_id)


def parse_pointer(payload: Any) -> tuple[int, int]:
    """``(frame id, offset)`` of a packed blob's payload.

    Raises:
        IntegrityError: not two varints.
    """
    data = payload if type(payload) is bytes else bytes(payload)
    n = len(data)
    if 2 <= n <= 4 and data[0] < 0x80:  # the common shapes, unrolled: frame id < 128
        b1 = data[1]
        if n == 2:
            if b1 < 0x80:
                return data[0], b1
        elif b1 & 0x80:
            b2 = data[2]
            if n == 3:
                if 0 < b2 < 0x80:
                    return data[0], (b1 & 0x7F) | (b2 << 7)
            elif b2 & 0x80 and 0 < data[3] < 0x80:
                return data[0], (b1 & 0x7F) | ((b2 & 0x7F) << 7) | (data[3] << 14)
    values: list[int] = []
    value = shift = 0
    for byte in data:  # (one pass, no re-encoding: a hydrate parses one pointer per message)
        value |= (byte & 0x7F) << shift
        if byte & 0x80:
            shift += 7
            if shift > 63:
                break
        else:
            if not byte and shift:  # overlong: a varint's last byte is 0 only when it is alone
                break
            values.append(value)
            value = shift = 0
    else:
        if len(values) == 2 and not shift:
            return values[0], values[1]
    raise IntegrityError(f"a packed blob's pointer is damaged ({data.hex() or 'empty'})")


def decode_frame(dec: Decompressor, row: FrameRow, data: Any) -> bytes:
    """A frame's content, checked against its size and digest (its dictionary loaded).

    Raises:
        IntegrityError: the frame is damaged, naming it.
    """
    what = f"pack frame {row.id}"
    if not 0 <= row.raw_size <= MAX_RAW_SIZE:
        raise IntegrityError(f"{what}: recorded size {row.raw_size} is out of bounds")
    content = dec.decompress(row.codec, bytes(data), row.raw_size, row.dict_id, what=what)
    if digest_bytes(content) != bytes(row.digest):
        raise IntegrityError(f"{what}: content does not match its digest")
    return content


_CLASS: Final = bytes.maketrans(
    bytes(range(256)), bytes(0 if b == 0 else 1 if b < 0x80 else 2 for b in range(256))
)
"""A byte -> its class: 0 zero, 1 another without the continuation bit, 2 with it."""


def _lane(mask: bytes, want: bytes) -> bytes:
    return bytes(b for pair in zip(mask, want, strict=True) for b in pair)


_SHAPES: Final = {
    2: _lane(b"\2\2\xff\xff", b"\0\0\0\0"),
    3: _lane(b"\2\xff\xff\xff", b"\0\2\1\0"),
    4: _lane(b"\2\xff\xff\xff", b"\0\2\2\1"),
}
"""By a pointer's length (frame id < 128): which bits of its bytes' classes, padded to 4 bytes,
are checked, and what they must be, interleaved: the frame id and a lone offset byte without
the continuation bit; a longer offset's bytes with it but the last, which is not zero (not an
overlong varint); the padding zero."""
_LANES: Final = sys.byteorder == "little" and array("I").itemsize == 4


def parse_pointers(payloads: Sequence[Any]) -> tuple[list[int], list[int]] | None:
    """``(frame ids, offsets)`` of many packed blobs' payloads at once, by C-level operations on
    their bytes padded to 4 each (issue 41: one :func:`parse_pointer` call a blob was a fifth
    of a hydrate), or None when any is not of the common shape (a frame id < 128, 2 to 4
    bytes) or the machine has no 32-bit little-endian lanes: the caller then parses them one
    by one, which names a damaged one. Exactly the pointers :func:`parse_pointer` accepts in
    those shapes, with the same values (a property test holds them together).
    """
    if not _LANES or not payloads:
        return None
    n = len(payloads)
    try:
        shapes = b"".join(map(_SHAPES.__getitem__, map(len, payloads)))
        lanes = b"".join(map(bytes.ljust, payloads, repeat(4), repeat(b"\0")))
    except (KeyError, TypeError):  # another length; not bytes (a driver's memoryview)
        return None
    classes = int.from_bytes(lanes.translate(_CLASS), "little")
    if classes & int.from_bytes(shapes[0::2], "little") != int.from_bytes(shapes[1::2], "little"):
        return None
    x = int.from_bytes(lanes, "little")
    low = int.from_bytes(b"\0\x7f\0\0" * n, "little")
    offsets = ((x & low) >> 8) | ((x & (low << 8)) >> 9) | ((x & (low << 16)) >> 10)
    return list(lanes[0::4]), memoryview(offsets.to_bytes(4 * n, "little")).cast("I").tolist()


class FrameReading:
    """Packed blobs read through their frames (mixed into ``ArchiveReader``)."""

    _dec: Decompressor

    def _ensure_dictionary(self, conn: AnyConnection, dict_id: int) -> None: ...

    def _init_frames(self) -> None:
        self._frames: OrderedDict[bytes, bytes] = OrderedDict()
        """Decoded frame contents by content digest (see the module docstring)."""

    def _frame_contents(self, conn: AnyConnection, frame_ids: Sequence[int]) -> dict[int, bytes]:
        """``{frame id: content}`` of the frames named (those missing are absent): one query
        for the rows, one for the data of those not cached.

        Raises:
            IntegrityError: a frame is damaged, naming it.
        """
        unique = list(dict.fromkeys(frame_ids))
        metas: dict[int, FrameRow] = {}
        for start in range(0, len(unique), 500):
            part = unique[start : start + 500]
            sql = f"{FRAME_META} WHERE id IN ({rsql.placeholders(len(part))})"
            for r in rsql.fetchall(conn, sql, part):
                metas[int(r[0])] = FrameRow(int(r[0]), bytes(r[1]), int(r[2]), r[3], int(r[4]))
        out: dict[int, bytes] = {}
        missing: list[int] = []
        for frame_id, meta in metas.items():
            hit = self._frames.get(meta.digest)
            if hit is None:
                missing.append(frame_id)
            else:
                self._frames.move_to_end(meta.digest)
                out[frame_id] = hit
        for start in range(0, len(missing), 50):
            part = missing[start : start + 50]
            sql = f"SELECT id, data FROM pack_frames WHERE id IN ({rsql.placeholders(len(part))})"
            for frame_id, data in rsql.fetchall(conn, sql, part):
                meta = metas[int(frame_id)]
                if meta.codec == 2 and meta.dict_id is not None:  # CODEC_ZSTD_DICT
                    try:
                        self._ensure_dictionary(conn, int(meta.dict_id))
                    except IntegrityError as err:
                        raise IntegrityError(f"pack frame {meta.id}: {err.message}") from err
                content = decode_frame(self._dec, meta, data)
                out[int(frame_id)] = content
                self._frames[meta.digest] = content
                while len(self._frames) > FRAME_CACHE:
                    self._frames.popitem(last=False)
        return out

    def unpack(
        self, conn: AnyConnection, sizes: Sequence[int], payloads: Sequence[Any]
    ) -> list[bytes]:
        """The bytes of packed blobs (their ``raw_size`` and ``payload``: the pointer's bytes, or
        ``(frame id, offset)`` as ``Described.rows(located=True)`` gives), in order.

        Raises:
            IntegrityError: a pointer, a frame or a blob's place in it is wrong.
        """
        if not payloads:
            return []
        both = None if type(payloads[0]) is tuple else parse_pointers(payloads)
        if both is None:  # located (nothing to parse), or pointers parsed one by one
            where = [p if type(p) is tuple else parse_pointer(p) for p in payloads]
            both = list(map(itemgetter(0), where)), list(map(itemgetter(1), where))
        frame_ids, offsets = both
        contents = self._frame_contents(conn, frame_ids)
        ends = list(map(add, offsets, sizes))
        if (
            len(sizes) == len(frame_ids)
            and min(sizes) >= 0
            and contents.keys() >= set(frame_ids)
            and max(map(sub, ends, map(len, map(contents.__getitem__, frame_ids)))) <= 0
        ):  # every place inside its frame: sliced in C-level loops
            frames = map(contents.__getitem__, frame_ids)
            return list(map(getitem, frames, map(slice, offsets, ends)))  # type: ignore[arg-type]
        out = []  # one by one, naming what is wrong
        for frame_id, offset, size in zip(frame_ids, offsets, sizes, strict=True):
            content = contents.get(frame_id)
            if content is None:
                raise IntegrityError(f"its pack frame {frame_id} is missing from the archive")
            if size < 0 or offset + size > len(content):
                raise IntegrityError(
                    f"bytes {offset}..{offset + size} are outside pack frame {frame_id} "
                    f"({len(content)} bytes)"
                )
            out.append(content[offset : offset + size])
        return out
