"""Migration 0010: packed blobs described in their frame's row, ``blobs`` a view (issue 42).

A packed blob has no row of its own: its frame's ``pack_frames`` row describes it, and the
``blobs`` view gives every blob's row of the old shape. Brought down to 0009 (the real
downgrade) the archive holds the same rows in its ``blobs`` table; migrated up again, the same
view rows and the same answers. Deduplication finds a packed blob (no second copy), GC never
changes a frame row (a dead member stays until repack drops it), and ranges never overlap.
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import text

import alpstore.db.members as members_module
from alembic import command
from alpstore.db.members import Described
from alpstore.db.migrate import SCHEMA_HEAD, alembic_config, current_revision, upgrade
from alpstore.maintenance import gc, verify
from alpstore.store import Store
from tests.conftest import Backend
from tests.core.test_segment_runs import _answers, _build

ROWS = "SELECT id, digest, kind, raw_size, codec, dict_id, payload, base_id FROM blobs ORDER BY id"


def _rows(backend: Backend) -> list[tuple[Any, ...]]:
    db = backend.open_database()
    with db.read() as conn:
        rows = conn.execute(text(ROWS)).all()
    return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in rows]


def _count(store: Store, sql: str) -> int:
    with store.db.read() as conn:
        return int(conn.execute(text(sql)).scalar_one())


def test_down_to_0009_and_up_again_keeps_every_blob_row_and_answer(backend: Backend) -> None:
    names = _build(backend.open_store())
    backend.close_all()
    before = _answers(backend, names)
    assert before["verify"][0] == 0, before["verify"]
    rows = _rows(backend)
    assert sum(1 for r in rows if r[4] == 4) > 20  # packed members among them
    store = backend.open_store()
    assert _count(store, "SELECT count(*) FROM blob_rows WHERE codec = 4") == 0
    backend.close_all()
    db = backend.open_database()
    command.downgrade(alembic_config(db), "0009")
    assert current_revision(db) == "0009"
    backend.close_all()
    assert _rows(backend) == rows  # the table again: the packed rows with their pointers
    db = backend.open_database()
    upgrade(db)
    assert current_revision(db) == SCHEMA_HEAD
    backend.close_all()
    assert _rows(backend) == rows
    assert _answers(backend, names) == before


def test_a_packed_blob_is_found_by_digest_and_never_stored_twice(backend: Backend) -> None:
    store = backend.open_store()
    docs = [{"role": "user", "content": f"message {i} " * 8} for i in range(40)]
    digests = store.archive.put_many(docs)
    report = store.archive.pack_cold()
    assert report.blobs == 40
    assert _count(store, "SELECT count(*) FROM blob_rows") == 0
    assert all(store.archive.has(d) for d in digests)
    again = store.archive.put_many(docs)  # the same content: the packed members, no new row
    assert again == digests
    assert _count(store, "SELECT count(*) FROM blob_rows") == 0
    s = store.create_session(name="reuse")
    s.commit_turn(docs[:5])  # a turn naming packed blobs by digest
    assert [e.value for e in s.history()] == docs[:5]
    assert _count(store, "SELECT count(*) FROM blob_rows") == 0
    assert store.archive.get_many(digests) == docs
    assert verify(store).ok


def test_gc_leaves_a_mostly_live_frame_as_it_is_and_its_dead_member_reusable(
    backend: Backend,
) -> None:
    store = backend.open_store()
    s = store.create_session(name="keep")
    s.commit_turn([{"role": "user", "content": f"kept {i} " * 30} for i in range(30)])
    orphan = {"role": "tool", "content": "nothing refers to me"}
    (dead,) = store.archive.put_many([orphan])
    store.archive.pack_cold()
    with store.db.read() as conn:
        frames = conn.execute(text("SELECT id, digest FROM pack_frames ORDER BY id")).all()
    report = gc(store)
    assert report.frames_rewritten == report.frames_deleted == 0
    with store.db.read() as conn:
        assert conn.execute(text("SELECT id, digest FROM pack_frames ORDER BY id")).all() == frames
    assert store.archive.has(dead)  # still a member: a later write of it finds it
    assert store.archive.put_many([orphan]) == [dead]
    assert _count(store, "SELECT count(*) FROM blob_rows") == 0
    assert verify(store).ok


def test_frames_id_ranges_never_overlap_with_loose_ids_between(backend: Backend) -> None:
    store = backend.open_store()
    s = store.create_session(name="gaps")
    big = "x" * (20 * 1024)  # over PACK_BLOB_MAX: stays loose, its id inside the packed ones
    for i in range(30):
        turn = [{"role": "user", "content": f"q{i} " * 20}]
        if i % 7 == 3:
            turn.append({"role": "tool", "content": big + str(i)})
        s.commit_turn(turn)
    store.archive.pack_cold()
    for i in range(30, 40):
        s.commit_turn([{"role": "user", "content": f"q{i} " * 20}])
    store.archive.pack_cold()
    with store.db.read() as conn:
        ranges = [
            (int(a), int(b))
            for a, b in conn.execute(
                text("SELECT first_id, last_id FROM pack_frames ORDER BY first_id")
            ).all()
        ]
    assert len(ranges) >= 2
    with store.db.read() as conn:  # the loose tool results' ids lie inside a frame's range
        gapped = conn.execute(text("SELECT count(*) FROM pack_frames WHERE ids IS NOT NULL"))
        assert int(gapped.scalar_one()) >= 1
    for (_, hi), (lo, _) in pairwise(ranges):
        assert hi < lo
    values = [e.value for e in s.history()]
    assert len(values) == 40 + 4
    fresh = backend.open_store()
    assert [e.value for e in fresh.get_session("gaps").history()] == values
    assert verify(fresh).ok


@pytest.mark.sqlite_only("pack_digests is SQLite's digest key")
def test_verify_names_a_member_its_digest_key_lost(tmp_path: Path) -> None:
    """SQLite: a member whose key is gone from ``pack_digests`` would not be found by digest
    (a second copy stored on its next write): verify names its frame."""
    store = Store.open(tmp_path)
    try:
        digests = store.archive.put_many([{"n": i, "text": "member " * 20} for i in range(10)])
        store.archive.pack_cold()
        assert verify(store).ok
        with store.db.atomic() as conn:
            conn.execute(
                text("DELETE FROM pack_digests WHERE prefix = :k"),
                {"k": int.from_bytes(digests[3][:4], "big", signed=True)},
            )
        report = verify(store)
        assert not report.ok
        assert any("missing from pack_digests" in p.what for p in report.problems)
    finally:
        store.close()


@settings(max_examples=200)
@given(
    members=st.lists(st.binary(min_size=32, max_size=32), min_size=1, max_size=40, unique=True),
    others=st.lists(st.binary(min_size=32, max_size=32), max_size=20),
    data=st.data(),
)
def test_a_frames_members_are_found_by_digest_the_same_few_or_many(
    members: list[bytes], others: list[bytes], data: st.DataObject
) -> None:
    """``index_of_digests`` finds a few wanted digests by ``bytes.find`` and many through a
    dict of the frame's digests: the same members either way, never a match that straddles
    two digests (a wanted digest made of one member's tail and the next one's head)."""
    column = b"".join(members)
    straddling = [column[at : at + 32] for at in range(1, len(column) - 32, 7)]
    wanted = set(data.draw(st.lists(st.sampled_from(members)))) | set(others)
    wanted |= set(data.draw(st.lists(st.sampled_from(straddling)))) if straddling else set()
    frame = Described((1, 1, None, list(range(len(members))), bytes(len(members)), column, 0))
    want = sorted(i for i, m in enumerate(members) if m in wanted)
    with_find = members_module.FIND_AT_MOST
    try:
        members_module.FIND_AT_MOST = 10**9  # every wanted digest by find
        by_find = sorted(frame.index_of_digests(wanted))
        members_module.FIND_AT_MOST = 0  # every one through the dict
        by_dict = sorted(frame.index_of_digests(wanted))
    finally:
        members_module.FIND_AT_MOST = with_find
    assert by_find == by_dict == want
