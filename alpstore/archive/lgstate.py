"""The packed documents of ``AlpstoreSaver``'s rows, read and written without LangGraph (issue
42, 0011: below every layer that reads them): the saver's fixed zstd dictionary
(:data:`STATE_DICTIONARY`), packing and unpacking, and the steps a thread's ``lg_turns`` rows
hold as loose rows would give them. ``alpstore.portable.lgrows`` re-exports them.
"""

from __future__ import annotations

import json
import threading
import weakref
from typing import Any, Final

import zstandard

from alpstore.archive.reading import store_dictionary_row
from alpstore.codec import (
    Decompressor,
    canonical_json,
    digest_dictionary,
    pool_give,
    pool_take,
)
from alpstore.db import raw as rsql
from alpstore.errors import IntegrityError

CODEC_RAW: Final = 0
CODEC_LG_DICT: Final = 10
"""zstd with :data:`STATE_DICTIONARY` (a fixed raw-content dictionary shipped in the code)."""
CODEC_LG_TRAINED: Final = 11
"""A closed turn's document (``lg_turns.doc``) in zstd with the archive's dictionary trained on
its own closed turns: the ``zstd_dicts`` row the turn row's ``dict_id`` names (0013)."""

PURPOSE_LG_TURNS: Final = 1
"""``zstd_dicts.purpose`` of a dictionary trained on closed turns (0: the blob store's)."""

TURN_LEVEL: Final = 9
"""zstd level of a closed turn's document against its trained dictionary: at 1,000 turns of
the tool loop 578 B a turn at 9 (0.06 ms), 640 at 3, 505 at 19 (1.3 ms a turn on the folding
thread); with the fixed dictionary 838 at 3, 786 at 9 (scratch measure, 2026-12-07)."""

TURN_DICT_SIZE: Final = 16 * 1024
"""Bytes of a trained turn dictionary (8, 16 and 64 KB were within 2 % of each other)."""

TURN_DICT_AFTER: Final = 64
"""Closed turns an archive holds before the saver trains its turn dictionary, and how many of
the newest it learns from (~300 KB of documents, ~0.5 s of the folding thread, once)."""

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


def unpack_doc(packed: Packed, what: str, conn: Any = None) -> Any:
    """The document of a row the saver packed (codec 0 or 10; 11, a closed turn's, reads its
    trained dictionary through ``conn``).

    Raises:
        IntegrityError: another codec, a trained dictionary missing or damaged, or damaged
            bytes (``what`` names the row).
    """
    raw = _raw(packed, what, conn)
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise IntegrityError(f"{what}: its packed state is damaged ({exc})") from exc


def _raw(packed: Packed, what: str, conn: Any) -> bytes:
    codec, dict_id, size, payload = packed
    try:
        if codec == CODEC_RAW and dict_id is None:
            return bytes(payload)
        if codec == CODEC_LG_DICT:
            contexts = pool_take(_FREE, state_contexts)
            raw = contexts[1].decompress(payload, max_output_size=size)
            pool_give(_FREE, contexts)  # a call that raised drops its pair
            return bytes(raw)
        if codec == CODEC_LG_TRAINED and dict_id is not None and conn is not None:
            return bytes(_trained(conn, int(dict_id), what).decompress(payload, size))
    except zstandard.ZstdError as exc:
        raise IntegrityError(f"{what}: its packed state is damaged ({exc})") from exc
    raise IntegrityError(f"{what}: packed with codec {codec}, which this alpstore does not read")


class TurnDictionary:
    """An archive's dictionary for closed turns (a ``zstd_dicts`` row of purpose 1), digested
    once for :data:`TURN_LEVEL`; its contexts pooled (each is one thread's at a time).
    """

    def __init__(self, dict_id: int, data: bytes) -> None:
        self.id = dict_id
        self._dict = digest_dictionary(data, TURN_LEVEL)
        self._cfree: list[zstandard.ZstdCompressor] = []
        self._dfree: list[zstandard.ZstdDecompressor] = []

    def _compressor(self) -> zstandard.ZstdCompressor:
        return zstandard.ZstdCompressor(
            level=TURN_LEVEL, dict_data=self._dict, write_content_size=False, write_checksum=False
        )

    def _decompressor(self) -> zstandard.ZstdDecompressor:
        return zstandard.ZstdDecompressor(dict_data=self._dict)

    def compress(self, raw: bytes) -> bytes:
        """``raw`` as one zstd frame against this dictionary (the frame names its id)."""
        ctx = pool_take(self._cfree, self._compressor)
        out = ctx.compress(raw)
        pool_give(self._cfree, ctx)
        return out

    def decompress(self, payload: bytes, size: int) -> bytes:
        """A frame of :meth:`compress` back, at most ``size`` bytes."""
        ctx = pool_take(self._dfree, self._decompressor)
        out = ctx.decompress(payload, max_output_size=size)
        pool_give(self._dfree, ctx)
        return out


_TRAINED: weakref.WeakKeyDictionary[Any, dict[int, TurnDictionary]] = weakref.WeakKeyDictionary()
"""Turn dictionaries loaded, by the engine of the archive they were read from (a dictionary
row is never changed once written, and its id never reused)."""
_TRAINED_LOCK = threading.Lock()
_DICT_ROW = "SELECT id, codec, size, digest, data FROM zstd_dicts WHERE id = ? AND purpose = 1"


def _trained(conn: Any, dict_id: int, what: str) -> TurnDictionary:
    engine = getattr(conn, "engine", None)
    with _TRAINED_LOCK:
        found = None if engine is None else _TRAINED.get(engine, {}).get(dict_id)
    if found is not None:
        return found
    row = rsql.fetchone(conn, _DICT_ROW, (dict_id,))
    if row is None:
        raise IntegrityError(f"{what}: its turn dictionary {dict_id} is missing from the archive")
    try:
        data = Decompressor().load_dictionary(
            int(row[0]), int(row[1]), bytes(row[4]), int(row[2]), bytes(row[3])
        )
    except IntegrityError as exc:
        raise IntegrityError(f"{what}: {exc}") from exc
    found = TurnDictionary(dict_id, data)
    if engine is not None:
        with _TRAINED_LOCK:
            _TRAINED.setdefault(engine, {})[dict_id] = found
    return found


def pack_turn(doc: Any, dictionary: TurnDictionary | None) -> Packed:
    """A closed turn's document packed: against the archive's turn dictionary when it has one
    (codec 11), else as :func:`pack_doc` packs (raw when that is smaller).
    """
    if dictionary is None:
        return pack_doc(doc)
    raw = canonical_json(doc)
    payload = dictionary.compress(raw)
    if len(payload) >= len(raw):
        return CODEC_RAW, None, len(raw), raw
    return CODEC_LG_TRAINED, dictionary.id, len(raw), payload


def turn_dictionary(conn: Any) -> TurnDictionary | None:
    """The archive's turn dictionary (its first row of purpose 1: every process that trained
    one at the same time uses the first), or None before one is trained.
    """
    row = rsql.fetchone(
        conn,
        f"SELECT id FROM zstd_dicts WHERE purpose = {PURPOSE_LG_TURNS} ORDER BY id LIMIT 1",
    )
    return None if row is None else _trained(conn, int(row[0]), "the LangGraph turn dictionary")


def turn_samples(conn: Any) -> list[bytes]:
    """The documents of the archive's :data:`TURN_DICT_AFTER` newest closed turns, raw; fewer
    (none) while it holds fewer.
    """
    rows = rsql.fetchall(
        conn,
        "SELECT id, codec, dict_id, raw_size, doc FROM lg_turns ORDER BY id DESC LIMIT ?",
        (TURN_DICT_AFTER,),
    )
    if len(rows) < TURN_DICT_AFTER:
        return []
    return [
        _raw((int(r[1]), r[2], int(r[3]), bytes(r[4])), f"lg_turns row {r[0]}", conn) for r in rows
    ]


def train_turn_dictionary(samples: list[bytes]) -> bytes | None:
    """A dictionary learnt from closed turns' documents, or None when zstd cannot learn one."""
    try:
        chosen: list[bytes | bytearray | memoryview[int]] = list(samples)
        return bytes(zstandard.train_dictionary(TURN_DICT_SIZE, chosen).as_bytes())
    except zstandard.ZstdError:
        return None


def store_turn_dictionary(conn: Any, data: bytes, samples: int) -> None:
    """Insert a trained turn dictionary in the caller's transaction (stored as the blob
    store's are; the same bytes stored before: nothing).
    """
    store_dictionary_row(conn, data, samples, purpose=PURPOSE_LG_TURNS)


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
            (int(codec), dict_id, int(size), bytes(payload)), f"lg_turns row {turn_id}", conn
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
            (int(codec), dict_id, int(size), bytes(payload)), f"lg_turns row {turn_id}", conn
        )
        for cid, _, alp, _, _ in doc["k"]:
            if bytes.fromhex(cid) == checkpoint_id:
                return int(alp)
    return None
