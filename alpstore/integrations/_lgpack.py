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

from langgraph.checkpoint.serde.base import SerializerProtocol
from sqlalchemy import Connection

from alpstore.archive.sql import Encoded, encode
from alpstore.codec import Decompressor, canonical_json
from alpstore.db import raw as rsql
from alpstore.db.tables import BLOB_MESSAGE, BLOB_STATE
from alpstore.errors import IntegrityError
from alpstore.integrations._lgcodec import KIND_MESSAGE, value_doc

INLINE_MAX = 512
"""Channel and write values up to this many canonical bytes live inside the packed state."""

Packed = tuple[int, int | None, int, bytes]
"""``(codec, dict_id, raw_size, payload)``."""


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
    """Compress state documents with the archive's compressor; decompress them back."""

    def __init__(self, compress: Any) -> None:
        self._compress = compress
        self._dec = Decompressor()

    def pack(self, doc: Any) -> Packed:
        """Canonical JSON of ``doc``, compressed."""
        raw = canonical_json(doc)
        codec, dict_id, payload = self._compress(raw)
        return codec, dict_id, len(raw), payload

    def unpack(self, conn: Connection, packed: Packed) -> Any:
        """The document inside a packed state.

        Raises:
            IntegrityError: its dictionary is missing or the bytes are damaged.
        """
        codec, dict_id, size, payload = packed
        if dict_id is not None and not self._dec.has_dictionary(int(dict_id)):
            row = rsql.fetchone(conn, "SELECT data FROM zstd_dicts WHERE id = ?", (dict_id,))
            if row is None:
                raise IntegrityError(f"zstd dictionary {dict_id} is missing from the archive")
            self._dec.add_dictionary(int(dict_id), bytes(row[0]))
        raw = self._dec.decompress(
            codec, payload, size, None if dict_id is None else int(dict_id), what="LangGraph state"
        )
        return json.loads(raw)
