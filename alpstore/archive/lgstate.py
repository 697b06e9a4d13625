"""The packed documents of ``AlpstoreSaver``'s rows, read and written without LangGraph (issue
42, 0011: below every layer that reads them): the saver's fixed zstd dictionary
(:data:`STATE_DICTIONARY`), packing and unpacking, and the steps a thread's ``lg_turns`` rows
hold as loose rows would give them. ``alpstore.portable.lgrows`` re-exports them.
"""

from __future__ import annotations

import json
from typing import Any, Final

import zstandard

from alpstore.codec import canonical_json, pool_give, pool_take
from alpstore.db import raw as rsql
from alpstore.errors import IntegrityError

CODEC_RAW: Final = 0
CODEC_LG_DICT: Final = 10
"""zstd with :data:`STATE_DICTIONARY` (a fixed raw-content dictionary shipped in the code)."""

STATE_DICTIONARY: Final = (
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

Packed = tuple[int, int | None, int, bytes]
"""``(codec, dict_id, raw_size, payload)``."""


_FREE: list[tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]] = []
"""Context pairs no call is using (python-zstandard's contexts are one thread's at a time)."""


def state_contexts() -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
    """A compressor and decompressor on :data:`STATE_DICTIONARY`."""
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


def pack_doc(doc: Any) -> Packed:
    """Canonical JSON of ``doc``, compressed (or raw when that is smaller), as the saver packs."""
    raw = canonical_json(doc)
    contexts = pool_take(_FREE, state_contexts)
    payload = contexts[0].compress(raw)
    pool_give(_FREE, contexts)
    if len(payload) >= len(raw):
        return CODEC_RAW, None, len(raw), raw
    return CODEC_LG_DICT, None, len(raw), payload


def unpack_doc(packed: Packed, what: str) -> Any:
    """The document of a row the saver packed (codec 0 or 10, the only ones it writes).

    Raises:
        IntegrityError: another codec, or damaged bytes (``what`` names the row).
    """
    codec, dict_id, size, payload = packed
    try:
        if codec == CODEC_RAW and dict_id is None:
            return json.loads(payload)
        if codec == CODEC_LG_DICT:
            contexts = pool_take(_FREE, state_contexts)
            raw = contexts[1].decompress(payload, max_output_size=size)
            pool_give(_FREE, contexts)  # a call that raised drops its pair
            return json.loads(raw)
    except (zstandard.ZstdError, ValueError) as exc:
        raise IntegrityError(f"{what}: its packed state is damaged ({exc})") from exc
    raise IntegrityError(f"{what}: packed with codec {codec}, which this alpstore does not read")


def folded_steps(conn: Any, ref: int) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """A thread namespace's steps and pending writes that its ``lg_turns`` rows hold (0011), as
    loose rows would give them: steps ``(checkpoint id, parent id, run ref, alp checkpoint id,
    packed state)`` and writes ``(checkpoint id, task id, packed doc, item blob ids)``, ids as
    stored (bytes), states packed raw, in checkpoint-id order (writes in their stored order).
    """
    steps: list[tuple[Any, ...]] = []
    writes: list[tuple[Any, ...]] = []
    for turn_id, codec, dict_id, size, payload in rsql.fetchall(
        conn,
        "SELECT id, codec, dict_id, raw_size, doc FROM lg_turns WHERE thread_ref = ? "
        "ORDER BY first_checkpoint_id",
        (ref,),
    ):
        doc = unpack_doc(
            (int(codec), dict_id, int(size), bytes(payload)), f"lg_turns row {turn_id}"
        )
        for cid, parent, alp, run, state in doc["k"]:
            raw = canonical_json(state)
            parent_id = None if parent is None else bytes.fromhex(parent)
            steps.append(
                (bytes.fromhex(cid), parent_id, run, int(alp), (CODEC_RAW, None, len(raw), raw))
            )
        for index, task, wdoc, items in doc["w"]:
            raw = canonical_json(wdoc)
            packed = (CODEC_RAW, None, len(raw), raw)
            writes.append((bytes.fromhex(doc["k"][index][0]), bytes.fromhex(task), packed, items))
    return steps, writes


def folded_alp_of(conn: Any, checkpoint_id: bytes) -> int | None:
    """The alpstore checkpoint of a folded LangGraph step, by its stored id in any thread (the
    newest turn row holding it; a scan of ``lg_turns``' ranges: for a command's lookup).
    """
    for turn_id, codec, dict_id, size, payload in rsql.fetchall(
        conn,
        "SELECT id, codec, dict_id, raw_size, doc FROM lg_turns WHERE first_checkpoint_id <= ? "
        "AND last_checkpoint_id >= ? ORDER BY id DESC",
        (checkpoint_id, checkpoint_id),
    ):
        doc = unpack_doc(
            (int(codec), dict_id, int(size), bytes(payload)), f"lg_turns row {turn_id}"
        )
        for cid, _, alp, _, _ in doc["k"]:
            if bytes.fromhex(cid) == checkpoint_id:
                return int(alp)
    return None
