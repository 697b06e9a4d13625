"""zstd compression (plain, with a trained dictionary, or against another blob as a delta),
bounded decompression, dictionary training; with canonical JSON and BLAKE3 digests
(``alpstore.canonical``, re-exported here): the bytes every other layer agrees on.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import zstandard

from alpstore.canonical import (
    DIGEST_SIZE,
    MAX_DEPTH,
    Digest,
    brackets,
    canonical_json,
    canonical_json_parsed,
    digest_bytes,
    digest_hex,
    has_lone_surrogate,
    nesting_depth,
    parse_digest,
)
from alpstore.errors import CanonicalJSONError, IntegrityError, UsageError

__all__ = [
    "CODEC_RAW",
    "CODEC_ZSTD",
    "CODEC_ZSTD_BASE",
    "CODEC_ZSTD_DICT",
    "DEFAULT_LEVEL",
    "DuplicateKeyError",
    "DICT_LEVEL",
    "DICT_STORE_LEVEL",
    "DIGEST_SIZE",
    "MAX_DEPTH",
    "MAX_RAW_SIZE",
    "Compressor",
    "Decompressor",
    "Digest",
    "bounded_decompress",
    "brackets",
    "canonical_json",
    "canonical_json_parsed",
    "decompress_file_bytes",
    "delta_compressor",
    "digest_bytes",
    "digest_dictionary",
    "digest_hex",
    "has_lone_surrogate",
    "line_hashes",
    "nesting_depth",
    "pack_dictionary",
    "parse_digest",
    "parse_json",
    "pool_give",
    "pool_take",
    "ratio",
    "raw_content_dict",
    "strict_decoder",
    "train_dictionary",
    "unique_object",
]


# ---------------------------------------------------------------- the one JSON reader
# Every file alpstore takes in (transcripts, deep files, manifests, hook payloads) is parsed by
# this reader: a repeated key is refused (json keeps the last one silently, so what one reader
# shows and another imports could differ), and so are NaN/Infinity.


class DuplicateKeyError(ValueError):
    """An object repeats a key (the message names it)."""


def unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` that builds the object, refusing a repeated key.

    Raises:
        DuplicateKeyError: a key appears twice (the first one repeated is named).
    """
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(f"found the key {ascii(key)[:60]} more than once")
            seen.add(key)
    return obj


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def strict_decoder(*, constants: bool = False) -> json.JSONDecoder:
    """A decoder refusing repeated keys and NaN/Infinity (``raw_decode`` for streams).

    ``constants=True`` lets NaN/Infinity through, for a caller that refuses them afterwards
    with ``canonical_json`` (which names the key holding one).
    """
    if constants:
        return json.JSONDecoder(object_pairs_hook=unique_object)
    return json.JSONDecoder(parse_constant=_no_constants, object_pairs_hook=unique_object)


_STRICT = strict_decoder()


def parse_json(data: bytes | str, *, where: str) -> Any:
    """Parse JSON, refusing a repeated key and NaN/Infinity; errors name ``where``, the key or
    the position.

    Raises:
        CanonicalJSONError: the text is not strict JSON.
    """
    if isinstance(data, bytes):
        data = data.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte order mark is no part of it
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CanonicalJSONError(f"{where}: not valid JSON ({exc})") from exc
    else:
        text = data.removeprefix("\ufeff")
    try:
        return _STRICT.decode(text)
    except DuplicateKeyError as exc:
        raise CanonicalJSONError(f"{where}: {exc}; refused") from exc
    except RecursionError as exc:
        raise CanonicalJSONError(f"{where}: not valid JSON (nested too deeply)") from exc
    except ValueError as exc:
        raise CanonicalJSONError(f"{where}: not valid JSON ({exc})") from exc


DEFAULT_LEVEL = 3
"""zstd level for blobs: level 3 is zstd's default and within a few % of level 9 on chat text."""

TRAIN_SEGMENT = 2000
TRAIN_DMER = 8
"""fastCover parameters (segment size k, d-mer size d) for dictionary training. zstd's parameter
search picks k≈2000, d=8 on coding-agent conversations; fixing them gives the same dictionary
quality (within 0.3 %) in a third of the time (about 40 ms instead of 130 ms for 1,000 samples),
and the training runs beside the writers' turns."""

DICT_LEVEL = 3
"""zstd level for loose small blobs compressed with the trained dictionary. Level 12 made them
15 % smaller for about 35 µs a blob instead of 8, and that cost was what made a turn grow after
the training (about turn 250): the last 100 turns of 1,000 took 1.3-1.5x the first 100
(benchmarks/bench_turn_growth.py, issue 41). A loose small blob is temporary: the packer
compresses it again into a frame (``archive.packing.PACK_LEVEL``, with the dictionary), so each
byte is compressed hard once, there. The newest ``PACK_KEEP_LOOSE`` stay loose at this level."""

CODEC_RAW = 0
CODEC_ZSTD = 1
CODEC_ZSTD_DICT = 2
CODEC_ZSTD_BASE = 3
"""zstd against another blob's raw bytes (a delta): for large tool outputs that repeat a file."""

DICT_STORE_LEVEL = 19
"""zstd level a trained dictionary is stored at (``zstd_dicts.data``, codec 1). Paid once a
dictionary, in the trainer's thread: about 30 ms for the 41 KB dictionary of the 1,000-turn
benchmark corpus, which it stores in 6.6 KB (level 3: 8.1 KB)."""

MAX_RAW_SIZE = 256 * 1024 * 1024
"""No single blob may claim more than this many raw bytes (bounds every decompression)."""


T = TypeVar("T")

_Contexts = tuple[zstandard.ZstdCompressor, zstandard.ZstdCompressor | None]
"""A compressor's context pair: plain, and with its dictionary (None without one)."""

POOL_KEEP = 8
"""Idle context pairs a compressor keeps for later calls. A pair holds 40 KB to 4 MB (a plain
context that compressed an 8 MB blob keeps its 3.7 MB workspace), so at most about 32 MB wait
idle; more calls at once than this make pairs (a few tenths of a millisecond, the dictionary
being digested already) that are dropped after. SQLite writers mostly compress inside
their transaction, one at a time."""


def pool_take(free: list[T], make: Callable[[], T]) -> T:
    """A pooled item for the calling code alone: one from ``free``, else ``make()``.

    For python-zstandard contexts, which must not be used by two threads at once but may be
    used by one thread after another: a thread started for one call takes what earlier threads
    gave back instead of making its own.
    """
    try:
        return free.pop()  # atomic: no two callers get the same item
    except IndexError:
        return make()


def pool_give(free: list[T], item: T) -> None:
    """Give ``item`` back after a call that completed (one that raised drops its item); at
    most :data:`POOL_KEEP` wait idle.
    """
    if len(free) < POOL_KEEP:
        free.append(item)


def digest_dictionary(dictionary: bytes, level: int) -> zstandard.ZstdCompressionDict:
    """A trained dictionary digested for compression at ``level``: zstd's CDict, made once
    (10–20 ms for a trained dictionary at :data:`DICT_LEVEL`) and shared read-only by every
    context that compresses with it, whatever its thread (zstd documents a CDict as safe to
    share between threads: its use is read-only).
    """
    digested = zstandard.ZstdCompressionDict(dictionary)
    digested.precompute_compress(level=level)
    return digested


class Compressor:
    """zstd compression of blobs, optionally with a trained dictionary; keeps what shrinks.

    Safe to share between threads. python-zstandard contexts are not, so each call takes a
    pair of contexts (plain, dictionary) from a pool for itself and gives it back after: a
    thread the caller just started (LangGraph runs each ``invoke``'s checkpoint writes on new
    threads) reuses contexts made by earlier ones instead of making its own. The dictionary
    is digested once per compressor and the contexts refer to that digest: each context that
    loaded the dictionary itself used to digest it on its first frame, 10–20 ms.
    """

    def __init__(
        self,
        level: int = DEFAULT_LEVEL,
        dictionary: bytes | None = None,
        *,
        dict_level: int = DICT_LEVEL,
    ) -> None:
        self.level = level
        self.dict_level = dict_level
        self._dictionary = dictionary
        self._free: list[_Contexts] = []
        """Context pairs no call is using (at most :data:`POOL_KEEP`)."""
        self._digested: zstandard.ZstdCompressionDict | None = None
        """The dictionary digested for ``dict_level`` (made on first use, or by ``warm``)."""
        self._digest_lock = threading.Lock()

    def _digested_dictionary(self, dictionary: bytes) -> zstandard.ZstdCompressionDict:
        digested = self._digested
        if digested is None:
            with self._digest_lock:  # one digest, whichever thread needs it first
                digested = self._digested
                if digested is None:
                    digested = self._digested = digest_dictionary(dictionary, self.dict_level)
        return digested

    def warm(self) -> None:
        """Digest the dictionary now (10–20 ms for a trained one at ``DICT_LEVEL``; zstd does
        it without holding the interpreter lock). The dictionary trainer calls this before
        new blobs use this compressor, so no writer's turn pays for the digest.
        """
        if self._dictionary is not None:
            self._digested_dictionary(self._dictionary)

    def _new_contexts(self) -> _Contexts:
        plain = zstandard.ZstdCompressor(
            level=self.level, write_content_size=True, write_checksum=True
        )
        if self._dictionary is None:
            return plain, None
        with_dict = zstandard.ZstdCompressor(
            level=self.dict_level,
            dict_data=self._digested_dictionary(self._dictionary),
            write_content_size=True,
            write_dict_id=False,
            write_checksum=True,
        )
        return plain, with_dict

    @property
    def has_dictionary(self) -> bool:
        """True when a trained dictionary is loaded."""
        return self._dictionary is not None

    def compress(self, raw: bytes, *, use_dictionary: bool = True) -> tuple[int, bytes]:
        """Return ``(codec, payload)``; the raw bytes are kept when zstd does not shrink them."""
        contexts = pool_take(self._free, self._new_contexts)
        plain, with_dict = contexts
        out: tuple[int, bytes] | None = None
        if with_dict is not None and use_dictionary:
            packed = with_dict.compress(raw)
            if len(packed) < len(raw):
                out = CODEC_ZSTD_DICT, packed
        if out is None:
            packed = plain.compress(raw)
            out = (CODEC_ZSTD, packed) if len(packed) < len(raw) else (CODEC_RAW, raw)
        pool_give(self._free, contexts)
        return out

    def compress_many(
        self, raws: Sequence[bytes], *, dictionary_max: int
    ) -> list[tuple[int, bytes]]:
        """:meth:`compress` of each of ``raws`` (the dictionary for those of at most
        ``dictionary_max`` bytes), the same frames made by one call per context: zstd works
        through the whole batch without the interpreter lock (on :data:`MANY_THREADS`
        threads), where one call per blob would take the lock back thousands of times.
        """
        contexts = pool_take(self._free, self._new_contexts)
        plain, with_dict = contexts
        out: list[tuple[int, bytes] | None] = [None] * len(raws)
        if with_dict is not None:
            small = [i for i, raw in enumerate(raws) if len(raw) <= dictionary_max]
            for i, packed in zip(small, _many(with_dict, [raws[i] for i in small]), strict=True):
                if len(packed) < len(raws[i]):
                    out[i] = (CODEC_ZSTD_DICT, packed)
        rest = [i for i, done in enumerate(out) if done is None]
        for i, packed in zip(rest, _many(plain, [raws[i] for i in rest]), strict=True):
            raw = raws[i]
            out[i] = (CODEC_ZSTD, packed) if len(packed) < len(raw) else (CODEC_RAW, raw)
        pool_give(self._free, contexts)
        return [o for o in out if o is not None]


MANY_THREADS = 2
"""Threads zstd uses for a batch (:meth:`Compressor.compress_many`); its frames are the same
whatever the count."""
MANY_MIN = 16
"""Smaller batches are compressed one call a blob (starting threads costs more)."""


def _many(ctx: zstandard.ZstdCompressor, raws: list[bytes]) -> list[bytes]:
    if len(raws) < MANY_MIN or not all(raws):  # zstd's batch call refuses an empty input
        return [ctx.compress(raw) for raw in raws]
    batch: list[bytes | bytearray | memoryview[int]] = list(raws)
    packed = ctx.multi_compress_to_buffer(batch, threads=MANY_THREADS)
    return [packed[i].tobytes() for i in range(len(packed))]


def pack_dictionary(data: bytes, level: int = DICT_STORE_LEVEL) -> tuple[int, bytes]:
    """How a trained dictionary is stored: ``(codec, data)`` for a ``zstd_dicts`` row, a zstd
    frame of it (:data:`CODEC_ZSTD`, at ``level``) unless that is no smaller
    (:data:`CODEC_RAW`). A trained dictionary is mostly fragments of its samples, so it
    compresses about 6×.
    """
    frame = zstandard.ZstdCompressor(level=level).compress(data)
    return (CODEC_ZSTD, frame) if len(frame) < len(data) else (CODEC_RAW, data)


class Decompressor:
    """Bounded zstd decompression: output may never exceed the recorded raw size.

    Safe to share between threads: ``plain`` and ``dicts`` are the calling thread's own
    python-zstandard contexts (which must not be used by two threads at once).
    """

    def __init__(self) -> None:
        self._dictionaries: dict[int, bytes] = {}
        self._local = threading.local()

    @property
    def plain(self) -> zstandard.ZstdDecompressor:
        """This thread's context for frames without a dictionary."""
        dctx: zstandard.ZstdDecompressor | None = getattr(self._local, "plain", None)
        if dctx is None:
            dctx = self._local.plain = zstandard.ZstdDecompressor()
        return dctx

    @property
    def dicts(self) -> dict[int, zstandard.ZstdDecompressor]:
        """This thread's contexts for every loaded dictionary, by dictionary id."""
        mine: dict[int, zstandard.ZstdDecompressor] | None = getattr(self._local, "dicts", None)
        if mine is None:
            mine = self._local.dicts = {}
        if len(mine) != len(self._dictionaries):
            for dict_id, data in list(self._dictionaries.items()):
                if dict_id not in mine:
                    mine[dict_id] = zstandard.ZstdDecompressor(
                        dict_data=zstandard.ZstdCompressionDict(data)
                    )
        return mine

    def add_dictionary(self, dict_id: int, data: bytes) -> None:
        """Make dictionary ``dict_id`` available to ``decompress``."""
        self._dictionaries[dict_id] = data

    def load_dictionary(
        self, dict_id: int, codec: int, data: bytes, size: int, digest: bytes
    ) -> bytes:
        """Decode a ``zstd_dicts`` row (``data`` as :func:`pack_dictionary` stored it), check
        it against the row's digest, make it available to ``decompress`` and return it.

        Raises:
            IntegrityError: the row's codec is not one a dictionary is stored with, its bytes
                are damaged, or they are not the dictionary its digest names.
        """
        what = f"zstd dictionary {dict_id}"
        if codec not in (CODEC_RAW, CODEC_ZSTD):
            raise IntegrityError(f"{what}: stored with codec {codec}, which no dictionary uses")
        raw = self.decompress(codec, data, size, what=what)
        if digest_bytes(raw) != digest:
            raise IntegrityError(f"{what}: its bytes do not match its digest")
        self.add_dictionary(dict_id, raw)
        return raw

    def has_dictionary(self, dict_id: int) -> bool:
        """True when ``dict_id`` is loaded."""
        return dict_id in self._dictionaries

    def dictionary(self, dict_id: int) -> bytes:
        """The bytes of loaded dictionary ``dict_id``."""
        return self._dictionaries[dict_id]

    def decompress(
        self,
        codec: int,
        payload: bytes,
        raw_size: int,
        dict_id: int | None = None,
        *,
        what: str,
        base: bytes | None = None,
    ) -> bytes:
        """Decompress ``payload`` into exactly ``raw_size`` bytes.

        Raises:
            IntegrityError: unknown codec, missing dictionary, corrupt frame, or a size that does
                not match the record (a bomb is stopped at ``raw_size`` + 1 bytes).
        """
        if raw_size < 0 or raw_size > MAX_RAW_SIZE:
            raise IntegrityError(f"{what}: recorded size {raw_size} is out of bounds")
        if codec == CODEC_RAW:
            out = payload
        else:
            if codec == CODEC_ZSTD:
                dctx = self.plain
            elif codec == CODEC_ZSTD_DICT and dict_id is not None and self.has_dictionary(dict_id):
                dctx = self.dicts[dict_id]
            elif codec == CODEC_ZSTD_BASE and base is not None:
                dctx = zstandard.ZstdDecompressor(dict_data=raw_content_dict(base))
            else:
                raise IntegrityError(f"{what}: codec {codec} (dictionary {dict_id}) unavailable")
            try:
                declared = zstandard.frame_content_size(payload)
                if declared == raw_size:
                    out = dctx.decompress(payload)
                elif declared == -1:
                    out = dctx.decompress(payload, max_output_size=raw_size)
                else:
                    raise IntegrityError(
                        f"{what}: frame declares {declared} bytes, recorded size is {raw_size}"
                    )
            except zstandard.ZstdError as exc:
                raise IntegrityError(f"{what}: zstd frame is corrupt ({exc})") from exc
        if len(out) != raw_size:
            raise IntegrityError(
                f"{what}: decompressed to {len(out)} bytes, recorded size is {raw_size}"
            )
        return out


def raw_content_dict(base: bytes) -> zstandard.ZstdCompressionDict:
    """Another blob's bytes used as a zstd dictionary (no training: plain content)."""
    return zstandard.ZstdCompressionDict(base, dict_type=zstandard.DICT_TYPE_RAWCONTENT)


def delta_compressor(base: bytes, level: int = DEFAULT_LEVEL) -> zstandard.ZstdCompressor:
    """A compressor that encodes new content as references into ``base``."""
    return zstandard.ZstdCompressor(
        level=level,
        dict_data=raw_content_dict(base),
        write_content_size=True,
        write_dict_id=False,
        write_checksum=True,
    )


def line_hashes(raw: bytes) -> frozenset[bytes]:
    """The distinct lines of a document (JSON text escapes each newline), for similarity."""
    return frozenset(raw.split(b"\\n"))


def bounded_decompress(dctx: zstandard.ZstdDecompressor, payload: bytes, limit: int) -> bytes:
    """Decompress a zstd frame, never producing more than ``limit`` bytes (bomb-proof)."""
    with dctx.stream_reader(payload, read_across_frames=True) as reader:
        return bytes(reader.read(limit))


def decompress_file_bytes(data: bytes, *, limit: int, what: str) -> bytes:
    """Decompress a whole ``.zst`` file held in memory, refusing output over ``limit`` bytes.

    Raises:
        IntegrityError: corrupt frame or more than ``limit`` bytes of output (a bomb).
    """
    try:
        out = bounded_decompress(zstandard.ZstdDecompressor(), data, limit + 1)
    except zstandard.ZstdError as exc:
        raise IntegrityError(f"{what}: not a valid zstd file ({exc})") from exc
    if len(out) > limit:
        raise IntegrityError(f"{what}: decompresses to more than {limit} bytes; refused")
    return bytes(out)


def train_dictionary(samples: Sequence[bytes], size: int, *, f: int = 0) -> bytes:
    """Train a zstd dictionary of at most ``size`` bytes from ``samples``; ``f``: fastCover's
    log2 of its frequency table (0: zstd's default, 20).

    Raises:
        UsageError: too few or too uniform samples to learn from.
    """
    try:
        trained = zstandard.train_dictionary(
            size, list(samples), k=min(TRAIN_SEGMENT, size), d=TRAIN_DMER, f=f
        )
        return bytes(trained.as_bytes())
    except zstandard.ZstdError as exc:
        raise UsageError(f"cannot train a dictionary from {len(samples)} samples: {exc}") from exc


def ratio(raw_sizes: Iterable[int], stored_sizes: Iterable[int]) -> float:
    """Compression ratio raw ÷ stored (1.0 for empty input)."""
    raw = sum(raw_sizes)
    stored = sum(stored_sizes)
    return raw / stored if stored else 1.0
