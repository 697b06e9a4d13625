"""Pack frames (issue 33): cold blobs rewritten in conversation order into zstd frames; reads,
verify, stats, GC's repacking and the pointer format, on both backends where they touch SQL.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import text

from alpstore.archive.frames import CODEC_PACKED, parse_pointer, parse_pointers, pointer, pointers
from alpstore.archive.packing import FRAME_TARGET
from alpstore.db.engine import sqlite_path_for_root
from alpstore.errors import IntegrityError
from alpstore.maintenance import gc, verify
from alpstore.samples import generate
from alpstore.store import Store
from tests.conftest import Backend, run_cli


def _turns(n: int, seed: int = 5) -> list[list[dict[str, Any]]]:
    turns: list[list[dict[str, Any]]] = []
    for m in generate(n, seed=seed):
        if not turns or m.get("role") == "user":
            turns.append([m])
        else:
            turns[-1].append(m)
    return turns


def _codecs(store: Store) -> dict[int, int]:
    with store.db.read() as conn:
        rows = conn.exec_driver_sql("SELECT codec, count(*) FROM blobs GROUP BY codec").all()
    return {int(c): int(n) for c, n in rows}


@given(st.integers(0, 2**40), st.integers(0, 2**40))
def test_pointer_round_trips(frame: int, offset: int) -> None:
    assert parse_pointer(pointer(frame, offset)) == (frame, offset)


@given(st.integers(0, 2**40), st.lists(st.integers(0, 2**24) | st.integers(0, 2**40), max_size=8))
def test_pointers_of_a_frame_are_its_pointers(frame: int, offsets: list[int]) -> None:
    """The store's batch of pointers into one frame (issue 41): byte for byte ``pointer``'s."""
    edges = [0, 0x7F, 0x80, 0x3FFF, 0x4000, 0x1FFFFF, 0x200000]
    assert pointers(frame, [*offsets, *edges]) == [pointer(frame, o) for o in [*offsets, *edges]]


@given(st.binary(max_size=12))
def test_only_the_canonical_encoding_of_a_pointer_parses(data: bytes) -> None:
    """Any bytes: refused, or exactly what ``pointer`` writes for what they parse to (no
    overlong varint, nothing after the second, nothing cut short)."""
    try:
        frame, offset = parse_pointer(data)
    except IntegrityError:
        return
    assert pointer(frame, offset) == data


@given(st.integers(0, 127), st.integers(0, 2**21 + 5))
def test_the_common_pointers_round_trip(frame: int, offset: int) -> None:
    """Frame ids below 128 and offsets of up to three bytes: ``parse_pointer``'s unrolled
    shapes (issue 41)."""
    assert parse_pointer(pointer(frame, offset)) == (frame, offset)


@given(st.binary(min_size=2, max_size=4))
def test_only_canonical_short_pointers_parse(data: bytes) -> None:
    """The unrolled shapes refuse what the general parse refuses (overlong, cut short)."""
    try:
        frame, offset = parse_pointer(data)
    except IntegrityError:
        return
    assert pointer(frame, offset) == data


_COMMON = st.builds(pointer, st.integers(0, 127), st.integers(0, 2**21 - 1))


@given(st.lists(st.one_of(_COMMON, st.binary(max_size=5)), min_size=1, max_size=30))
def test_pointers_parsed_at_once_as_one_by_one(payloads: list[bytes]) -> None:
    """``parse_pointers`` (issue 41: a hydrate's pointers in C-level operations) gives what
    ``parse_pointer`` gives for each, or None when any is refused or of another shape."""
    got = parse_pointers(payloads)
    if got is None:
        return
    assert list(zip(*got, strict=True)) == [parse_pointer(p) for p in payloads]


@given(st.lists(_COMMON, min_size=1, max_size=300))
def test_common_pointers_are_parsed_at_once(payloads: list[bytes]) -> None:
    got = parse_pointers(payloads)
    assert got is not None
    assert list(zip(*got, strict=True)) == [parse_pointer(p) for p in payloads]


@pytest.mark.parametrize(
    "bad",
    [
        b"\x01\x85\x00",
        b"\x01\x85\x85\x00",
        b"\x80\x01",
        b"\x01\x05\x00",
        b"\x01\x85",
        b"\x01\x05\x00\x00",
    ],
)
def test_pointers_at_once_refuse_what_one_by_one_refuses(bad: bytes) -> None:
    assert parse_pointers([pointer(3, 200), bad]) is None


@pytest.mark.parametrize("bad", [b"", b"\x80", b"\x01", b"\x01\x02\x03", b"\x81\x00\x01"])
def test_a_damaged_pointer_is_refused(bad: bytes) -> None:
    with pytest.raises(IntegrityError):
        parse_pointer(bad)


def test_packed_blobs_read_as_before(backend: Backend) -> None:
    store = backend.open_store()
    session = store.create_session(name="packs")
    for turn in _turns(60):
        session.commit_turn(turn)
    ck = session.checkpoints()[-1]
    before = [e.value for e in store.hydrate(ck)]
    digests = [e.digest for e in store.hydrate(ck)]
    report = store.archive.pack_cold()
    assert report.frames >= 2 and report.blobs > 0
    assert report.stored_after < report.stored_before
    assert _codecs(store).get(CODEC_PACKED) == report.blobs
    # a new reader (nothing cached) and this one: the same documents, by view and by digest
    fresh = backend.open_store()
    for reader in (store, fresh):
        assert [e.value for e in reader.hydrate(reader.get_checkpoint(ck.id))] == before
        assert reader.archive.get_many(digests, verify=True) == before
    assert verify(store).ok
    stats = store.archive.stats()
    assert stats.packed_blobs == report.blobs and stats.frames == report.frames
    assert stats.packed_bytes == report.stored_after and stats.dead_fraction == 0.0
    assert stats.stored_bytes == stats.loose_bytes + stats.packed_bytes
    # writing on after packing: a stored message is found (deduplicated), new ones stored loose
    session.commit_turn([before[1], {"role": "user", "content": "one more"}])
    assert [e.value for e in session.history()][-2:] == [
        before[1],
        {"role": "user", "content": "one more"},
    ]
    again = store.archive.pack_cold()
    assert again.blobs == 1  # only the new message
    assert store.archive.pack_cold().blobs == 0  # nothing left loose and small


def test_frames_hold_tens_of_kb_in_conversation_order(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    try:
        session = store.create_session(name="order")
        for turn in _turns(80):
            session.commit_turn(turn)
        store.archive.pack_cold()
        with store.db.read() as conn:
            frames = conn.exec_driver_sql("SELECT id, raw_size FROM pack_frames ORDER BY id").all()
            rows = conn.exec_driver_sql(
                f"SELECT id, payload FROM blobs WHERE codec = {CODEC_PACKED} ORDER BY id"
            ).all()
        assert all(size >= FRAME_TARGET for _, size in frames[:-1])
        assert all(size < FRAME_TARGET + 16 * 1024 for _, size in frames)
        where = [parse_pointer(p) for _, p in rows]
        assert where == sorted(where)  # ascending ids: ascending (frame, offset)
    finally:
        store.close()


def test_verify_names_a_damaged_frame(backend: Backend) -> None:
    store = backend.open_store()
    session = store.create_session(name="damage")
    for turn in _turns(40):
        session.commit_turn(turn)
    store.archive.pack_cold()
    with store.db.atomic() as conn:
        frame_id, data = conn.exec_driver_sql(
            "SELECT id, data FROM pack_frames ORDER BY id LIMIT 1"
        ).one()
        damaged = bytearray(data)
        damaged[len(damaged) // 2] ^= 0xFF
        conn.execute(
            text("UPDATE pack_frames SET data = :data WHERE id = :id"),
            {"data": bytes(damaged), "id": frame_id},
        )
    store.close()
    res = backend.cli("archive", "verify")
    assert res.code != 0
    assert f"pack frame {frame_id}" in res.out
    assert "blob(s) are packed in it" in res.out
    assert "Traceback" not in res.err
    # a read of a blob in it fails naming the blob, not with a traceback
    res = backend.cli("session", "show", "damage")
    assert res.code != 0 and "Traceback" not in res.err


def test_gc_rewrites_a_mostly_dead_frame_and_deletes_an_empty_one(backend: Backend) -> None:
    store = backend.open_store()
    keep = store.create_session(name="keep")
    keep.commit_turn([{"role": "user", "content": "kept " * 20}])
    # blobs nothing references, stored after the kept one: most of its frame will be dead
    count = FRAME_TARGET // len("orphan " * 300) + 8  # more than one frame of them
    orphans = store.archive.put_many([{"n": i, "text": "orphan " * 300} for i in range(count)])
    store.archive.pack_cold()
    frames_before = store.archive.stats().frames
    assert frames_before >= 2
    report = gc(store)
    assert report.blobs_removed == len(orphans)
    assert report.frames_rewritten + report.frames_deleted == frames_before
    stats = store.archive.stats()
    assert stats.dead_fraction == 0.0 and stats.frames == report.frames_rewritten
    assert [e.value for e in keep.history()] == [{"role": "user", "content": "kept " * 20}]
    fresh = backend.open_store()
    assert [e.value for e in fresh.get_session("keep").history()] == [
        {"role": "user", "content": "kept " * 20}
    ]
    assert verify(store).ok


def test_a_reader_holding_a_frame_gc_rewrote_reads_the_new_one(tmp_path: Path) -> None:
    """DESIGN invariant 9 for frames: the cache is keyed by content, not by the frame's row."""
    store = Store.open(tmp_path)
    try:
        keep = store.create_session(name="keep")
        keep.commit_turn([{"role": "user", "content": "kept " * 20}])
        store.archive.put_many([{"n": i, "text": "orphan " * 300} for i in range(4)])
        store.archive.pack_cold()
        reader = Store.open(tmp_path)
        try:
            first = [e.value for e in reader.get_session("keep").history()]
            gc(store)  # the frame is rewritten: a new row, other content
            assert [e.value for e in reader.get_session("keep").history()] == first
        finally:
            reader.close()
    finally:
        store.close()


@pytest.mark.sqlite_only("the CLI output on a run root")
def test_cli_pack_and_stats(tmp_path: Path) -> None:
    root = str(tmp_path)
    store = Store.open(tmp_path)
    session = store.create_session(name="cli")
    for turn in _turns(30):
        session.commit_turn(turn)
    store.close()
    res = run_cli("--root", root, "archive", "pack")
    assert res.code == 0, res.err
    assert res.out.startswith("packed ") and " frames: " in res.out
    assert re.search(r"; \d+ small runs of entries merged$", res.out.rstrip()), res.out
    res = run_cli("--root", root, "archive", "stats")
    assert res.code == 0, res.err
    lines = dict(line.split(None, 1) for line in res.out.splitlines())
    assert "frames" in lines["packed"] and "dead" in lines["packed"]
    assert lines["loose"].endswith("bytes")
    res = run_cli("--root", root, "archive", "stats", "--json")
    assert '"frames"' in res.out and '"dead_fraction"' in res.out
    assert run_cli("--root", root, "archive", "verify").code == 0
    res = run_cli("--root", root, "archive", "pack", "--keep-loose", "-1")
    assert res.code == 2 and "Traceback" not in res.err


@pytest.mark.sqlite_only("the migration run on a closed SQLite file")
def test_downgrading_0007_stores_every_packed_blob_loose_again(tmp_path: Path) -> None:
    from alembic import command
    from alpstore.db import open_database
    from alpstore.db.migrate import alembic_config

    store = Store.open(tmp_path)
    session = store.create_session(name="down")
    for turn in _turns(30):
        session.commit_turn(turn)
    store.archive.train_dictionary(samples=200)
    store.archive.pack_cold()
    assert store.archive.stats().dict_frames > 0
    with store.db.read() as conn:
        want = {
            bytes(d): raw
            for d, (_, raw) in (
                (bytes(d), store.archive.get_raw(bytes(d)))  # type: ignore[arg-type]
                for (d,) in conn.exec_driver_sql("SELECT digest FROM blobs").all()
            )
        }
    store.close()
    db = open_database(root=tmp_path)
    try:
        command.downgrade(alembic_config(db), "0006")
    finally:
        db.close()
    con = sqlite3.connect(sqlite_path_for_root(tmp_path))
    try:
        assert con.execute("SELECT count(*) FROM blobs WHERE codec = 4").fetchone()[0] == 0
        names = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
        assert "pack_frames" not in names
        rows = con.execute("SELECT digest, codec, raw_size, payload FROM blobs").fetchall()
    finally:
        con.close()
    import zstandard

    for digest, codec, size, payload in rows:
        raw = payload if codec == 0 else None
        if codec == 1:
            raw = zstandard.ZstdDecompressor().decompress(payload, max_output_size=size)
        if raw is not None:
            assert want[bytes(digest)] == raw
    assert sum(1 for r in rows if r[1] == 1) >= 100  # the packed ones, now plain zstd


FRAMES_ON_THREADS = r"""
import sys, threading
from pathlib import Path
import zstandard
from alpstore.samples import generate
from alpstore.store import Store

store = Store.open(Path(sys.argv[1]))
session = store.create_session(name="t")
for turn in [list(generate(8, seed=s)) for s in range(300)]:
    session.commit_turn(turn)
store.archive.wait_for_training(timeout=60)
first = store.archive._codec
store.archive.train_dictionary(samples=500, recompress=False)
second = store.archive._codec
assert first[0] != second[0] and first[0] is not None
done = threading.Event()
bad = []

def switch():
    while not done.is_set():
        store.archive._codec = first
        store.archive._codec = second

def compress(seed):
    for k in range(60):
        content = "".join(f"{seed}-{k}-{i} " for i in range(3000)).encode()
        _, dict_id, data = store.archive._compress_frame(content)
        dd = zstandard.ZstdCompressionDict(store.archive._dec.dictionary(dict_id))
        try:
            out = zstandard.ZstdDecompressor(dict_data=dd).decompress(data)
        except zstandard.ZstdError as exc:
            bad.append(str(exc))
            continue
        if out != content:
            bad.append(f"thread {seed} frame {k}: other content")

switcher = threading.Thread(target=switch)
switcher.start()
workers = [threading.Thread(target=compress, args=(i,)) for i in range(4)]
for w in workers:
    w.start()
for w in workers:
    w.join(120)
done.set()
switcher.join(10)
store.close()
print("ok" if not bad else bad[:3])
"""


def test_frames_compressed_on_several_threads_decode_to_their_content(tmp_path: Path) -> None:
    """`gc`'s repacking may run beside the background packer while a new dictionary comes in:
    every frame must record the dictionary it was compressed with, and no two threads may
    share one compressor (the kill -9 torture found a frame that did not decode to its
    content; without the lock this crashes the interpreter, hence a process of its own)."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", FRAMES_ON_THREADS, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", (out.stdout, out.stderr[-2000:])
