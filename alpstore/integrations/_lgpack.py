"""Packing LangGraph rows: UUID ids as 16 bytes, state documents as zstd (with the archive's
trained dictionary), values inline when small and as content-addressed blobs otherwise.

A checkpoint's state is ``{"c": checkpoint fields, "m": metadata, "v": {channel: ref},
"s": split channel}``; a task's writes are ``{"p": task path, "w": [[idx, channel, ref]]}``.
A ref is ``["i", kind, doc]`` (inline), ``["b", kind, blob]`` (a blob: its id for checkpoints,
its position among the write's items for writes) or ``["l", position, n]`` (n message blobs).
"""

from __future__ import annotations

import json
import uuid
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

INLINE_MAX = 512
"""Channel and write values up to this many canonical bytes live inside the packed state."""

Packed = tuple[int, int | None, int, bytes]
"""``(codec, dict_id, raw_size, payload)``."""

CODEC_RAW = 0
CODEC_LG_DICT = 10
"""zstd with :data:`STATE_DICTIONARY` (a fixed raw-content dictionary shipped in the code)."""

STATE_DICTIONARY = (
    b'{"c":{"json":{"channel_versions":{"__start__":1,"branch:to:agent":2,"branch:to:tools":3,'
    b'"messages":4},"ts":"2026-01-01T00:00:00.000000+00:00","updated_channels":["messages"],'
    b'"v":4,"versions_seen":{"__input__":{},"__start__":{"__start__":1},"agent":{"branch:to:'
    b'agent":2},"tools":{"branch:to:tools":3}}}},"m":{"json":{"parents":{},"source":"loop",'
    b'"step":1}},"s":"messages","v":{"branch:to:agent":["i",0,null],"branch:to:tools":["i",0,'
    b'null],"__start__":["i",1,{"b64":"gahtZXNzYWdlc5HHtQWUvWxhbmdjaGFpbl9jb3JlLm1lc3NhZ2VzLm'
    b'h1bWFurEh1bWFuTWVzc2FnZYanY29udGVudA","serde":"msgpack"}]}}'
    b'{"p":"~__pregel_pull, agent","w":[[0,"messages",["l",0,1]],[1,"branch:to:tools",'
    b'["i",0,null]]]}{"p":"~__pregel_pull, tools","w":[[0,"messages",["l",0,1]],[1,'
    b'"branch:to:agent",["i",0,null]]]}{"p":"~__pregel_pull, __start__","w":[[0,"messages",'
    b'["l",0,1]],[1,"branch:to:agent",["i",0,null]]]}"source":"input","step":-1'
)
"""What LangGraph checkpoint states and task writes look like: small packed rows compress
against it to a fraction of what zstd alone reaches (changing it needs a new codec number)."""


def id_bytes(text: str) -> bytes:
    r"""A LangGraph id as stored: a UUID's 16 bytes, anything else ``\\0`` + UTF-8 (never 16)."""
    try:
        parsed = uuid.UUID(text)
    except ValueError:
        parsed = None
    if parsed is not None and str(parsed) == text:
        return parsed.bytes
    data = b"\0" + text.encode("utf-8")
    return data + b"\0" if len(data) == 16 else data


def id_text(data: bytes) -> str:
    """The id stored by :func:`id_bytes`."""
    if len(data) == 16:
        return str(uuid.UUID(bytes=data))
    body = data[1:-1] if len(data) == 17 and data.endswith(b"\0") else data[1:]
    return body.decode("utf-8")


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

    @staticmethod
    def _new_contexts() -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
        state_dict = zstandard.ZstdCompressionDict(
            STATE_DICTIONARY, dict_type=zstandard.DICT_TYPE_RAWCONTENT
        )
        return (
            zstandard.ZstdCompressor(
                level=3,
                dict_data=state_dict,
                write_content_size=False,
                write_checksum=False,
                write_dict_id=False,
            ),
            zstandard.ZstdDecompressor(dict_data=state_dict),
        )

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
