"""Packing LangGraph rows: UUID ids as 16 bytes, state documents as zstd (with the archive's
trained dictionary), values inline when small and as content-addressed blobs otherwise.

A checkpoint's state is ``{"c": checkpoint fields, "m": metadata, "v": {channel: ref},
"s": split channel}``; a task's writes are ``{"p": task path, "w": [[idx, channel, ref]]}``.
A ref is ``["i", kind, doc]`` (inline), ``["b", kind, blob]`` (a blob: its id for checkpoints,
its position among the write's items for writes) or ``["l", position, n]`` (n message blobs).
"""

from __future__ import annotations

import json
from typing import Any

import zstandard
from langgraph.checkpoint.serde.base import SerializerProtocol
from sqlalchemy import Connection, select

from alpstore.archive.columns import DICT_ROW
from alpstore.archive.sql import Encoded, encode, load_dictionary_row
from alpstore.codec import Decompressor, canonical_json, pool_give, pool_take
from alpstore.db.names import BLOB_MESSAGE, BLOB_STATE
from alpstore.db.tables import zstd_dicts
from alpstore.errors import IntegrityError
from alpstore.integrations._lgcodec import KIND_MESSAGE, value_doc
from alpstore.portable.lgrows import (
    CODEC_LG_DICT,
    CODEC_RAW,
    STATE_DICTIONARY,
    Packed,
    id_bytes,
    id_text,
    state_contexts,
)

INLINE_MAX = 512
"""Channel and write values up to this many canonical bytes live inside the packed state."""

__all__ = [
    "CODEC_LG_DICT",
    "CODEC_RAW",
    "INLINE_MAX",
    "STATE_DICTIONARY",
    "Packed",
    "Packer",
    "id_bytes",
    "id_text",
    "value_ref",
]


def value_ref(serde: SerializerProtocol, value: Any) -> tuple[list[Any], Encoded | None]:
    """An inline ref, or a blob ref template plus the blob to store (messages always blobs)."""
    kind, doc = value_doc(serde, value)
    item = encode(doc, BLOB_MESSAGE if kind == KIND_MESSAGE else BLOB_STATE)
    if kind != KIND_MESSAGE and len(item[2]) <= INLINE_MAX:
        return ["i", kind, doc], None
    return ["b", kind], item


class Packer:
    """Compress state documents against :data:`STATE_DICTIONARY`; decompress them back (also
    states packed by the archive's own compressor and trained dictionaries).
    """

    def __init__(self) -> None:
        self._dec = Decompressor()
        self._free: list[tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]] = []
        """Context pairs no call is using: each call takes one for itself (python-zstandard's
        contexts must not be used by two threads at once) and gives it back, so the threads
        LangGraph starts for each ``invoke`` reuse them instead of making their own."""

    _new_contexts = staticmethod(state_contexts)

    def pack(self, doc: Any) -> Packed:
        """Canonical JSON of ``doc``, compressed (or raw when that is smaller)."""
        raw = canonical_json(doc)
        contexts = pool_take(self._free, self._new_contexts)
        payload = contexts[0].compress(raw)
        pool_give(self._free, contexts)
        if len(payload) >= len(raw):
            return CODEC_RAW, None, len(raw), raw
        return CODEC_LG_DICT, None, len(raw), payload

    def unpack(self, conn: Connection, packed: Packed) -> Any:
        """The document inside a packed state.

        Raises:
            IntegrityError: its dictionary is missing or the bytes are damaged.
        """
        codec, dict_id, size, payload = packed
        if codec == CODEC_LG_DICT:
            contexts = pool_take(self._free, self._new_contexts)
            raw = contexts[1].decompress(payload, max_output_size=size)
            pool_give(self._free, contexts)
            return json.loads(raw)
        if dict_id is not None and not self._dec.has_dictionary(int(dict_id)):
            row = conn.execute(select(*DICT_ROW).where(zstd_dicts.c.id == int(dict_id))).first()
            if row is None:
                raise IntegrityError(f"zstd dictionary {dict_id} is missing from the archive")
            load_dictionary_row(self._dec, row)
        raw = self._dec.decompress(
            codec, payload, size, None if dict_id is None else int(dict_id), what="LangGraph state"
        )
        return json.loads(raw)
