"""A view's rows as SQLite reads them for a hydrate (issue 41): a long range's runs as stored,
then each id's row, packed ones from their frames (the frames between the ids in one read)
and loose ones in one query, packed payloads handed to the decoder as ``(frame id, offset)``.

Each is held against the older reading it replaces on the same archive: the ``json_each``
join of the runs with ``blob_rows`` (``RUN_ENTRIES``) and rows by id (loose first, then
frames, probing every id). Damage still fails with an error that names what is wrong.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import text

import alpstore.db.members as members_module
from alpstore.db import raw as rsql
from alpstore.db.members import CODEC_PACKED, Described, frames_by_id, pointer, rows_by_id
from alpstore.errors import IntegrityError
from alpstore.store import Store
from alpstore.views import JOINED, READ_RANGE, RUNS_FROM, View, range_params, range_sql

pytestmark = pytest.mark.sqlite_only("SQLite's in-process reading of a view's runs")


def _archive(tmp_path: Path) -> tuple[Store, Any]:
    """Sessions whose views mix packed and loose blobs: many frames, frames with loose ids
    inside their range (large tool results stay loose), a message repeated in a view, a
    backtrack (a second segment), a tail committed after the packing.
    """
    store = Store.open(tmp_path)
    s = store.create_session(name="mixed")
    big = "r" * (20 * 1024)  # over PACK_BLOB_MAX: loose, its id inside a frame's range
    for i in range(150):
        turn: list[dict[str, Any]] = [{"role": "user", "content": f"q{i} " * 30}]
        if i % 9 == 4:
            turn.append({"role": "tool", "content": big + str(i)})
        if i % 11 == 5:
            turn.append({"role": "user", "content": "q3 " * 30})  # an earlier message again
        s.commit_turn(turn)
        if i % 6 == 5:
            store.archive.pack_cold()  # a frame or more each time
    s.backtrack(3, "the other way")
    for i in range(5):
        s.commit_turn([{"role": "assistant", "content": f"after the packing {i}"}])
    return store, s


def _old_rows(conn: Any, template: str, seg: int, lo: int, hi: int) -> list[tuple[Any, ...]]:
    """The rows before this change: ids by the ``json_each`` join, rows by id (loose first)."""
    ids = [
        r[0]
        for r in rsql.fetchall(conn, range_sql(READ_RANGE, "sqlite"), range_params(seg, lo, hi))
    ]
    by_id = {int(r[0]): r for r in rows_by_id(conn, ids)}
    names = JOINED[template]
    cols = ["id", "digest", "kind", "raw_size", "codec", "dict_id", "payload", "base_id"]
    return [tuple(by_id[i][cols.index(n)] for n in names) for i in ids if i in by_id]


def _as_pointers(rows: list[Any]) -> list[tuple[Any, ...]]:
    """Rows with a located payload written as the pointer it stands for."""
    return [
        tuple(
            bytes(v) if isinstance(v, memoryview) else pointer(*v) if isinstance(v, tuple) else v
            for v in row
        )
        for row in rows
    ]


@pytest.mark.parametrize("at_most", [64, 2])
def test_every_joined_reading_gives_the_rows_of_the_old_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at_most: int
) -> None:
    """Long ranges (from their runs) and short ones (joined), the frames read in one range or
    (more of them than ``at_most`` in between) probed id by id: the old rows."""
    monkeypatch.setattr(members_module, "FRAMES_IN_RANGE_AT_MOST", at_most)
    store, s = _archive(tmp_path)
    try:
        with store.db.read() as conn:
            frames = int(conn.execute(text("SELECT count(*) FROM pack_frames")).scalar_one())
            gapped = conn.execute(text("SELECT count(*) FROM pack_frames WHERE ids IS NOT NULL"))
            assert frames > 8 and int(gapped.scalar_one()) >= 1
            head = s.head
            chain = store.views.chain(conn, head)
            assert len(chain) == 2  # the backtrack's segment
            rng = random.Random(7)
            seg, lo, hi = max(chain, key=lambda c: c[2] - c[1])
            long = [
                (seg, a, rng.randrange(a + RUNS_FROM, hi + 1)) for a in range(lo, hi - RUNS_FROM, 7)
            ]
            ranges = [*chain, *[_sub(rng, chain) for _ in range(30)], *long]
            assert sum(hi - lo >= RUNS_FROM for _, lo, hi in ranges) >= 5
            assert sum(hi - lo < RUNS_FROM for _, lo, hi in ranges) >= 5
            for template in JOINED:
                for seg, lo, hi in ranges:
                    want = _old_rows(conn, template, seg, lo, hi)
                    got = store.views._read_ranges(conn, View(seg, hi), template, lo)
                    assert len(want) == hi - lo
                    assert _as_pointers(got) == _as_pointers(want), template
    finally:
        store.close()


def _sub(rng: random.Random, chain: list[tuple[int, int, int]]) -> tuple[int, int, int]:
    seg, lo, hi = rng.choice(chain)
    a = rng.randrange(lo, hi)
    return seg, a, rng.randrange(a + 1, hi + 1)


@pytest.mark.parametrize("at_most", [0, 1, 3, 10**6])
def test_frames_read_in_one_range_are_the_frames_probed_id_by_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at_most: int
) -> None:
    """Whether the frames between the wanted ids are read in one range or (more than
    ``at_most`` there) each id is probed, the frames holding any ids (packed, loose, unknown,
    repeated, in any order) are the same."""
    store, _ = _archive(tmp_path)
    try:
        with store.db.read() as conn:
            top = int(conn.execute(text("SELECT max(id) FROM blob_rows")).scalar_one())
            rng = random.Random(at_most)
            picks = [rng.sample(range(1, top + 40), rng.randrange(1, 60)) for _ in range(30)]
            picks.append(list(range(1, top + 40)))
            monkeypatch.setattr(members_module, "FRAMES_IN_RANGE_AT_MOST", -1)  # id by id
            expected = [_held(frames_by_id(conn, ids), ids) for ids in picks]
            assert any(expected)
            monkeypatch.setattr(members_module, "FRAMES_IN_RANGE_AT_MOST", at_most)
            assert [_held(frames_by_id(conn, ids), ids) for ids in picks] == expected
    finally:
        store.close()


def _held(frames: list[Described], ids: list[int]) -> list[tuple[int, int]]:
    """``(frame, id)`` of each of ``ids`` some frame holds."""
    wanted = set(ids)
    return sorted((f.frame_id, i) for f in frames for i in f.ids if i in wanted)


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=30),
    gaps=st.booleans(),
    data=st.data(),
)
def test_a_frames_rows_are_each_members_whatever_is_wanted(
    n: int, gaps: bool, data: st.DataObject
) -> None:
    """``Described.rows`` (slices for a run of members, a lookup each otherwise; pointers or
    places) gives each wanted member's id, digest, kind, size and place."""
    sizes = data.draw(st.lists(st.integers(0, 300), min_size=n, max_size=n))
    offsets = [sum(sizes[:i]) for i in range(n)]
    ids = sorted(data.draw(st.sets(st.integers(1, 10**6), min_size=n, max_size=n)))
    kinds = bytes(data.draw(st.lists(st.integers(0, 9), min_size=n, max_size=n)))
    digests = bytes(data.draw(st.binary(min_size=32 * n, max_size=32 * n)))
    frame = Described((9, ids[0], ids if gaps else None, offsets, kinds, digests, sum(sizes)))
    held = frame.ids
    wanted = data.draw(st.one_of(st.none(), st.lists(st.integers(0, n - 1))))
    at = range(n) if wanted is None else sorted(set(wanted))
    expected = [
        (
            held[i],
            digests[32 * i : 32 * i + 32],
            kinds[i],
            sizes[i],
            CODEC_PACKED,
            None,
            (9, offsets[i]),
            None,
        )
        for i in at
    ]
    assert frame.rows(wanted, located=True) == expected
    assert frame.rows(wanted) == [(*r[:6], pointer(*r[6]), None) for r in expected]


def _damage(store: Store, sql: str) -> None:
    with store.db.atomic() as conn:
        conn.execute(text(sql))


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        ("UPDATE pack_frames SET raw_size = raw_size - 1 WHERE id = {frame}", "pack frame"),
        (  # a member of negative size
            "UPDATE pack_frames SET offsets = json_set(offsets, '$[2]', 0) WHERE id = {frame}",
            "outside pack frame",
        ),
        (
            "UPDATE segment_runs SET blob_ids = '[1, \"x\"]' WHERE start = 0",
            "not a list of blob ids",
        ),
        ("DELETE FROM segment_runs WHERE start > 0 AND start < 40", "of the"),
    ],
)
def test_a_damaged_view_fails_naming_what(tmp_path: Path, damage: str, named: str) -> None:
    store, _ = _archive(tmp_path)
    try:
        with store.db.read() as conn:
            frame = int(conn.execute(text("SELECT max(id) FROM pack_frames")).scalar_one())
        _damage(store, damage.format(frame=frame))
        fresh = Store.open(tmp_path)
        try:
            with pytest.raises(IntegrityError, match=named):
                fresh.hydrate(fresh.list_checkpoints(fresh.get_session("mixed").id)[-1])
        finally:
            fresh.close()
    finally:
        store.close()


def test_a_member_running_past_its_frames_end_is_named(tmp_path: Path) -> None:
    """Member 0 of a frame read alone (its neighbours' sizes not in play), its end moved past
    the frame's: an error naming the frame, never a short slice of it."""
    store, _ = _archive(tmp_path)
    try:
        with store.db.read() as conn:
            frame, first, digests = conn.execute(
                text("SELECT id, first_id, digests FROM pack_frames WHERE ids IS NULL LIMIT 1")
            ).one()
        _damage(
            store,
            "UPDATE pack_frames SET offsets = json_set(offsets, '$[1]', raw_size + 9) "
            f"WHERE id = {frame}",
        )
        fresh = Store.open(tmp_path)
        try:
            with pytest.raises(IntegrityError, match=f"outside pack frame {frame}"):
                fresh.archive.get(bytes(digests[:32]))
            with fresh.db.read() as conn, pytest.raises(IntegrityError, match="outside pack"):
                fresh.archive.load_raw_by_ids(conn, [int(first)])
        finally:
            fresh.close()
    finally:
        store.close()
