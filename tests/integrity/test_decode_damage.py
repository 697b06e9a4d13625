"""The unverified bulk decoder (``archive/batch.decode_batch``) behind both of its callers:
``SqlArchive.decode_rows`` (full rows: hydration, export, the trainer) and ``decode_lean`` (lean
rows without digests: a LangGraph cold read). Both decode every codec alike, name a damaged
blob by its digest, and never expand a frame past its recorded size or past ``MAX_RAW_SIZE``.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
import zstandard

from alpstore.archive.batch import decode_lean
from alpstore.codec import (
    CODEC_RAW,
    CODEC_ZSTD,
    CODEC_ZSTD_BASE,
    CODEC_ZSTD_DICT,
    MAX_RAW_SIZE,
    digest_hex,
)
from alpstore.db import raw as rsql
from alpstore.errors import IntegrityError
from alpstore.store import Store
from tests.conftest import Backend

Reader = Callable[[Store], list[bytes]]

PEAK_LIMIT = 8 << 20
"""Bytes a decode of the test head may allocate at its peak: a few MiB of frames and output,
far below the 32 MiB bomb and the 256 MiB bound."""


def tool_output(seed: int, variant: int = 0, lines: int = 60) -> dict[str, Any]:
    """A large tool output; another variant of the same seed differs in a few lines (a delta)."""
    body = [
        f"{seed:03d}-{i:03d}: def f_{seed}_{i}(v): return v * {i} + {seed}" for i in range(lines)
    ]
    for k in range(variant):
        body[(k * 7) % lines] = f"edited {variant}.{k}"
    return {"role": "tool", "content": "\n".join(body)}


def filled(backend: Backend) -> Store:
    """A session whose head holds every codec: dictionary frames (the small blobs, once the
    dictionary is trained on them), deltas (a tool output read again, edited), plain zstd (a
    large log) and one small blob stored raw (as an archive may store any blob).
    """
    store = backend.open_store()
    session = store.create_session(name="decode")
    for step in range(40):
        log = [f"{step}.{i}: test_{i * step} passed in {i * 7 % 13}.{step}s" for i in range(600)]
        session.commit_turn(
            [
                {"role": "user", "content": f"step {step}: please fix the failing test in m{step}"},
                {"role": "assistant", "content": f"Reading src/m{step % 4}.py to find the bug."},
                tool_output(step % 4, variant=step // 4),
                {"role": "tool", "content": "\n".join(log)} if step % 10 == 5 else {"x": step},
            ]
        )
    store.archive.train_dictionary(samples=400)
    small = next(r for r in head_rows(store) if r[-1] is None and int(r[3]) < 100)
    with store.db.read() as conn:
        raw = store.archive.decode_rows(conn, [small], verify=True)[0]
    damage(store, small, codec=CODEC_RAW, dict_id=None, payload=raw)  # not damage: raw
    return store


def by_rows(store: Store) -> list[bytes]:
    session = store.get_session("decode")
    with store.db.read() as conn:
        return store.archive.decode_rows(
            conn, store.views.read_blob_rows(conn, session.head), verify=False
        )


def by_lean(store: Store) -> list[bytes]:
    session = store.get_session("decode")
    with store.db.read() as conn:
        return decode_lean(store.archive, conn, store.views.read_lean_rows(conn, session.head))


READERS = pytest.mark.parametrize("read", [by_rows, by_lean], ids=["decode_rows", "decode_lean"])


def head_rows(store: Store) -> list[Any]:
    with store.db.read() as conn:
        return list(store.views.read_blob_rows(conn, store.get_session("decode").head))


def damage(store: Store, row: Any, **columns: Any) -> None:
    sets = ", ".join(f"{name} = ?" for name in columns)
    with store.db.atomic() as conn:
        rsql.execute(conn, f"UPDATE blob_rows SET {sets} WHERE id = ?", (*columns.values(), row[0]))


def declaring(frame: bytes, size: int) -> bytes:
    """``frame`` with the content size in its header rewritten to ``size`` (a 4-byte field;
    zstd's frame format, RFC 8878 section 3.1.1.1)."""
    fhd = frame[4]
    single = (fhd >> 5) & 1
    at = 5 + (1 - single) + (0, 1, 2, 4)[fhd & 3]
    old = (single, 2, 4, 8)[fhd >> 6]
    out = frame[:4] + bytes([0x80 | (fhd & 0x3F)]) + frame[5:at] + size.to_bytes(4, "little")
    out += frame[at + old :]
    assert zstandard.frame_content_size(out) == size
    return out


def peak_of(read: Reader, store: Store) -> tuple[int, IntegrityError]:
    """The peak of Python allocations while ``read`` fails, and its error."""
    tracemalloc.start()
    try:
        with pytest.raises(IntegrityError) as err:
            read(store)
        return tracemalloc.get_traced_memory()[1], err.value
    finally:
        tracemalloc.stop()


def test_both_bulk_paths_decode_every_codec_as_a_verified_read_does(backend: Backend) -> None:
    store = filled(backend)
    rows = head_rows(store)
    assert {int(r[4]) for r in rows} == {CODEC_RAW, CODEC_ZSTD, CODEC_ZSTD_DICT, CODEC_ZSTD_BASE}
    with store.db.read() as conn:
        verified = store.archive.decode_rows(conn, rows, verify=True)
    fresh = backend.open_store()  # nothing cached: no dictionary, no delta base
    assert by_rows(fresh) == verified
    assert by_lean(backend.open_store()) == verified
    # deltas whose base is not in the batch take it from the archive
    last = max(i for i, r in enumerate(rows) if int(r[4]) == CODEC_ZSTD_BASE)
    session = fresh.get_session("decode")
    with fresh.db.read() as conn:
        tail = fresh.views.read_blob_rows(conn, session.head, last)
        lean = fresh.views.read_lean_rows(conn, session.head)[last:]
        assert fresh.archive.decode_rows(conn, tail, verify=False) == verified[last:]
        assert decode_lean(fresh.archive, conn, lean) == verified[last:]


@READERS
@pytest.mark.parametrize("codec", [CODEC_ZSTD, CODEC_ZSTD_DICT, CODEC_ZSTD_BASE])
def test_a_damaged_frame_is_named_by_its_digest_on_both_bulk_paths(
    backend: Backend, read: Reader, codec: int
) -> None:
    store = filled(backend)
    victim = next(r for r in head_rows(store) if int(r[4]) == codec)
    payload = bytes(victim[6])  # the frame's last bytes (its checksum) garbled
    damage(store, victim, payload=payload[:-4] + bytes(b ^ 0xFF for b in payload[-4:]))
    with pytest.raises(IntegrityError, match=f"^blob {digest_hex(bytes(victim[1]))}: "):
        read(backend.open_store())


@READERS
def test_a_bomb_declaring_more_than_its_recorded_size_is_never_expanded(
    backend: Backend, read: Reader
) -> None:
    store = filled(backend)
    victim = next(r for r in head_rows(store) if int(r[4]) == CODEC_ZSTD)
    bomb = zstandard.ZstdCompressor().compress(bytes(32 << 20))
    damage(store, victim, payload=bomb)
    peak, err = peak_of(read, backend.open_store())
    assert str(err).startswith(f"blob {digest_hex(bytes(victim[1]))}: frame declares {32 << 20}")
    assert peak < PEAK_LIMIT


@READERS
def test_a_recorded_size_past_the_bound_is_refused_before_decompressing(
    backend: Backend, read: Reader
) -> None:
    """Frame and row both claim ``MAX_RAW_SIZE`` + 1 bytes: refused by the bound, the frame
    never handed to zstd (which would allocate the whole claimed output first)."""
    store = filled(backend)
    victim = next(r for r in head_rows(store) if int(r[4]) == CODEC_ZSTD)
    size = MAX_RAW_SIZE + 1
    damage(store, victim, payload=declaring(bytes(victim[6]), size), raw_size=size)
    peak, err = peak_of(read, backend.open_store())
    assert str(err) == (
        f"blob {digest_hex(bytes(victim[1]))}: recorded size {size} is out of bounds"
    )
    assert peak < PEAK_LIMIT
