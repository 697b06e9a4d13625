"""Foundation and sessions benchmarks (issues 2 and 3). Every figure is paired with a baseline
measured in the same run; `scripts/bench` turns the pairs into ratios in RESULTS.md."""

from __future__ import annotations

import copy
import json
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import blake3
import pytest
import zstandard

from alpstore.archive import SqlArchive
from alpstore.db import open_database, sqlite_path_for_root
from alpstore.sessions import Session
from alpstore.store import Store
from benchmarks._util import four_message_turns, realistic_messages, structure_bytes

INGEST_MESSAGES = 50_000
BATCH = 1000


@pytest.fixture(scope="module")
def corpus() -> list[dict[str, Any]]:
    return realistic_messages(INGEST_MESSAGES)


@pytest.fixture
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="alpstore-bench-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _bare_loop(messages: list[dict[str, Any]], db_path: Path) -> int:
    con = sqlite3.connect(db_path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=NORMAL")
    con.execute(
        "CREATE TABLE IF NOT EXISTS b (id INTEGER PRIMARY KEY, digest BLOB UNIQUE, "
        "raw_size INT, payload BLOB)"
    )
    zc = zstandard.ZstdCompressor(level=3)
    stored = 0
    for start in range(0, len(messages), BATCH):
        rows = []
        for m in messages[start : start + BATCH]:
            raw = json.dumps(m, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
            payload = zc.compress(raw)
            stored += len(payload)
            rows.append((blake3.blake3(raw).digest(), len(raw), payload))
        con.execute("BEGIN")
        con.executemany(
            "INSERT OR IGNORE INTO b (digest, raw_size, payload) VALUES (?, ?, ?)", rows
        )
        con.execute("COMMIT")
    con.close()
    return stored


def _alpstore_ingest(messages: list[dict[str, Any]], root: Path, *, auto_train: bool) -> int:
    archive = SqlArchive(open_database(root=root), auto_train=auto_train)
    for start in range(0, len(messages), BATCH):
        archive.put_many(messages[start : start + BATCH])
    archive.close()  # the dictionary is trained in the background: count what it leaves
    stored = archive.stats().stored_bytes
    archive.db.close()
    return stored


def _fresh(scratch: Path) -> Iterator[Path]:
    n = 0
    while True:
        n += 1
        yield scratch / f"r{n}"


@pytest.mark.benchmark(group="ingest")
def test_ingest_bare_loop(benchmark: Any, corpus: list[dict[str, Any]], scratch: Path) -> None:
    paths = _fresh(scratch)

    def run() -> int:
        path = next(paths)
        path.mkdir(parents=True)
        return _bare_loop(corpus, path / "b.db")

    stored = benchmark.pedantic(run, rounds=3, iterations=1)
    benchmark.extra_info.update(
        messages=len(corpus),
        stored_bytes=stored,
        raw_bytes=sum(len(json.dumps(m)) for m in corpus),
    )


@pytest.mark.benchmark(group="ingest")
def test_ingest_alpstore(benchmark: Any, corpus: list[dict[str, Any]], scratch: Path) -> None:
    paths = _fresh(scratch)
    stored = benchmark.pedantic(
        lambda: _alpstore_ingest(corpus, next(paths), auto_train=True), rounds=3, iterations=1
    )
    plain = _alpstore_ingest(corpus, scratch / "plain", auto_train=False)
    benchmark.extra_info.update(
        messages=len(corpus),
        stored_bytes_with_dictionary=stored,
        stored_bytes_without_dictionary=plain,
        raw_bytes=sum(len(json.dumps(m)) for m in corpus),
    )


# ------------------------------------------------------------------ per-checkpoint cost


def _session_at(root: Path, turns: int) -> tuple[Store, Session, Iterator[list[dict[str, Any]]]]:
    store = Store.open(root)
    session = store.create_session(name="bench")
    work = four_message_turns(turns + 100_000)
    for _ in range(turns):
        session.commit_turn(next(work))
    return store, session, work


@pytest.mark.benchmark(group="checkpoint")
@pytest.mark.parametrize("turns", [100, 1000, 10_000])
def test_checkpoint_every_turn(benchmark: Any, turns: int, scratch: Path) -> None:
    """Append 4 messages and checkpoint, at history length ``turns``."""
    store, session, work = _session_at(scratch, turns)
    db_path = sqlite_path_for_root(scratch)
    before = structure_bytes(db_path)
    benchmark.pedantic(
        lambda: session.commit_turn(next(work)), rounds=200, iterations=1, warmup_rounds=5
    )
    store.close()
    after = structure_bytes(db_path)
    n = 205

    def grown(*names: str) -> float:
        return sum(after.get(x, 0) - before.get(x, 0) for x in names) / n

    benchmark.extra_info.update(
        turns=turns,
        checkpoint_row_bytes=grown(
            "checkpoints", "sqlite_autoindex_checkpoints_1", "ix_checkpoints_segment_id"
        ),
        entry_bytes_per_turn=grown("segment_entries", "ix_segment_entries_blob_id", "segments"),
        blob_bytes_per_turn=grown("blobs", "sqlite_autoindex_blobs_1"),
    )


# ------------------------------------------------------------------ backtrack retarget


def _history(turns: int) -> list[dict[str, Any]]:
    return [m for turn in four_message_turns(turns // 4) for m in turn]


@pytest.mark.benchmark(group="backtrack")
@pytest.mark.parametrize("length", [100, 10_000])
def test_backtrack_persisted(benchmark: Any, length: int, scratch: Path) -> None:
    """`session.backtrack(1)`: the head moves to the previous checkpoint's view (one row)."""
    store, session, work = _session_at(scratch, length // 4)

    def setup() -> None:
        session.commit_turn(next(work))

    benchmark.pedantic(lambda: session.backtrack(1), setup=setup, rounds=100, iterations=1)
    benchmark.extra_info.update(history_entries=length)
    store.close()


@pytest.mark.benchmark(group="backtrack")
@pytest.mark.parametrize("length", [100, 10_000])
def test_backtrack_deepcopy_baseline(benchmark: Any, length: int) -> None:
    """What a runtime without an archive does: deep-copy the message history."""
    history = _history(length)
    benchmark.pedantic(
        lambda: copy.deepcopy(history), rounds=5 if length > 1000 else 50, iterations=1
    )
    benchmark.extra_info.update(history_entries=length)


# ------------------------------------------------------------------ hydrate


@pytest.fixture(scope="module")
def big_head(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, Session]:
    root = tmp_path_factory.mktemp("hydrate")
    store = Store.open(root)
    session = store.create_session()
    for turn in four_message_turns(2500):
        session.commit_turn(turn)
    return store, session


@pytest.mark.benchmark(group="hydrate")
def test_hydrate_alpstore(benchmark: Any, big_head: tuple[Store, Session]) -> None:
    _store, session = big_head
    entries = benchmark.pedantic(session.history, rounds=10, iterations=1)
    assert len(entries) == 10_000


@pytest.mark.benchmark(group="hydrate")
def test_hydrate_raw_alpstore(benchmark: Any, big_head: tuple[Store, Session]) -> None:
    """Hydration to canonical bytes (what a deep export streams), against fetch+decompress."""
    store, session = big_head
    entries = benchmark.pedantic(lambda: store.hydrate_raw(session.head), rounds=10, iterations=1)
    assert len(entries) == 10_000


def _bare_fetch(store: Store, ids: list[int], parse: bool) -> int:
    """The messages' bytes by id with the driver alone: a loose blob decompressed on its own, a
    packed one (codec 4: two LEB128 varints, frame id and offset) cut from its frame, each
    frame decompressed once (no digest checks: what alpstore adds is measured against this).
    """
    con = sqlite3.connect(sqlite_path_for_root(store.root))
    plain = zstandard.ZstdDecompressor()
    dicts = {  # a dictionary's row holds it as a zstd frame (codec 1) or as is (codec 0)
        i: zstandard.ZstdDecompressor(
            dict_data=zstandard.ZstdCompressionDict(plain.decompress(d) if c == 1 else d)
        )
        for i, c, d in con.execute("SELECT id, codec, data FROM zstd_dicts")
    }

    def unzstd(codec: int, dict_id: int | None, payload: bytes, size: int) -> bytes:
        if codec == 0:
            return payload
        dec = dicts[dict_id] if codec == 2 and dict_id is not None else plain
        return dec.decompress(payload, max_output_size=size)

    frames: dict[int, bytes] = {}

    def frame(frame_id: int) -> bytes:
        if frame_id not in frames:
            codec, dict_id, data, size = con.execute(
                "SELECT codec, dict_id, data, raw_size FROM pack_frames WHERE id = ?", (frame_id,)
            ).fetchone()
            frames[frame_id] = unzstd(codec, dict_id, data, size)
        return frames[frame_id]

    n = 0
    for start in range(0, len(ids), 500):
        part = ids[start : start + 500]
        for codec, dict_id, payload, size in con.execute(
            "SELECT codec, dict_id, payload, raw_size FROM blobs "
            f"WHERE id IN ({','.join('?' * len(part))})",
            part,
        ):
            if codec == 4:
                values, value, shift = [], 0, 0
                for byte in payload:
                    value |= (byte & 0x7F) << shift
                    shift += 7
                    if not byte & 0x80:
                        values.append(value)
                        value = shift = 0
                at = values[1]
                raw = frame(values[0])[at : at + size]
            else:
                raw = unzstd(codec, dict_id, payload, size)
            if parse:
                json.loads(raw)
            n += 1
    con.close()
    return n


@pytest.mark.benchmark(group="hydrate")
@pytest.mark.parametrize("parse", [False, True], ids=["fetch+decompress", "fetch+decompress+parse"])
def test_hydrate_bare_loop(benchmark: Any, big_head: tuple[Store, Session], parse: bool) -> None:
    store, session = big_head
    with store.db.read() as conn:
        ids = store.views.read_ids(conn, session.head)
    assert (
        benchmark.pedantic(lambda: _bare_fetch(store, ids, parse), rounds=10, iterations=1)
        == 10_000
    )


def test_wall_clock_sanity() -> None:
    """The benchmark machine's clock works (keeps this module importable as tests)."""
    assert time.perf_counter() > 0
