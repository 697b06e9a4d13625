"""The delta-base search (`DeltaCandidates`) makes exactly the choice of the set intersections
it replaced (kept here as `TodaysSearch`): same base, same tie-breaking, same threshold."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import delete, select

from alpstore.archive.candidates import FIELD_MAX, FIELDS_PER_BASE, DeltaCandidates
from alpstore.archive.sql import SqlArchive, encode
from alpstore.codec import CODEC_ZSTD_BASE
from alpstore.db import open_database
from alpstore.db.tables import blob_rows, blobs


class TodaysSearch:
    """The search as `SqlArchive._delta` / `_remember_base` did it (0816eab), verbatim."""

    def __init__(self, capacity: int, min_shared: float) -> None:
        self.capacity = capacity
        self.min_shared = min_shared
        self._bases: OrderedDict[bytes, tuple[bytes, frozenset[bytes]]] = OrderedDict()

    def best(self, lines: frozenset[bytes]) -> tuple[bytes, bytes] | None:
        best, score = None, 0
        for base_digest, (_, base_lines) in list(self._bases.items()):
            shared = len(lines & base_lines)
            if shared > score:
                best, score = base_digest, shared
        if best is not None and score >= self.min_shared * len(lines):
            candidate = self._bases.get(best)
            if candidate is None:
                return None
            return best, candidate[0]
        return None

    def add(self, digest: bytes, raw: bytes, lines: frozenset[bytes]) -> None:
        self._bases[digest] = (raw, lines)
        while len(self._bases) > self.capacity:
            self._bases.popitem(last=False)

    def discard(self, digest: bytes) -> None:
        self._bases.pop(digest, None)

    def clear(self) -> None:
        self._bases.clear()


def _raw(lines: frozenset[bytes]) -> bytes:
    return b"\\n".join(sorted(lines))


def _digest(lines: frozenset[bytes]) -> bytes:
    """Content-addressed, like a blob: the same lines are the same base."""
    return hashlib.blake2b(_raw(lines), digest_size=16).digest()


SMALL = [b"line %d" % i for i in range(10)]


def _big(start: int, count: int) -> frozenset[bytes]:
    """A document of more than FIELD_MAX lines: two of them can share more than a field holds."""
    return frozenset(b"big %d" % i for i in range(start, start + count))


docs = st.one_of(
    st.frozensets(st.sampled_from(SMALL), max_size=8),
    st.builds(_big, st.integers(0, 120), st.integers(FIELD_MAX - 10, FIELD_MAX + 150)),
)
ops = st.lists(
    st.tuples(
        st.sampled_from(["add"] * 4 + ["search"] * 4 + ["discard"] * 2 + ["clear"]),
        docs,
        st.integers(0, 1000),  # a discard's pick among the documents added so far
    ),
    min_size=5,
    max_size=80,
)


@settings(max_examples=300)
@given(
    ops=ops,
    capacity=st.integers(1, 5),
    min_shared=st.sampled_from([0.0, 0.25, 0.3, 0.5, 1.0]),
    slack_bytes=st.sampled_from([0, 1 << 20]),
)
def test_the_search_chooses_as_the_set_intersections_did(
    ops: list[tuple[str, frozenset[bytes], int]], capacity: int, min_shared: float, slack_bytes: int
) -> None:
    new = DeltaCandidates(capacity, min_shared, slack_bytes=slack_bytes)
    old = TodaysSearch(capacity, min_shared)
    added: list[frozenset[bytes]] = []
    marked: list[frozenset[bytes]] = []  # added when not held: given a field
    for op, lines, pick in ops:
        if op == "add":
            if _digest(lines) not in old._bases:
                marked.append(lines)
            new.add(_digest(lines), _raw(lines), lines)
            old.add(_digest(lines), _raw(lines), lines)
            added.append(lines)
        elif op == "search":
            assert new.best(lines) == old.best(lines)
        elif op == "discard":
            lines = added[pick % len(added)] if added and pick % 3 else lines
            new.discard(_digest(lines))
            old.discard(_digest(lines))
        else:
            new.clear()
            old.clear()
            added.clear()
            marked.clear()
        assert len(new) == len(old._bases)
        assert all((_digest(d) in new) == (_digest(d) in old._bases) for d in added)
        # bounded: fields and lines of the bases held or added lately, nothing older
        assert new._fields <= FIELDS_PER_BASE * capacity
        recent = frozenset().union(*marked[-FIELDS_PER_BASE * capacity :])
        held = frozenset().union(*(lines for _, lines in old._bases.values()))
        assert new._table.keys() <= recent | held
    for lines in {*added, *SMALL_PROBES}:
        assert new.best(lines) == old.best(lines)


SMALL_PROBES = [frozenset(SMALL[:n]) for n in range(len(SMALL) + 1)]


def _candidates(*bases: frozenset[bytes], min_shared: float = 0.3) -> DeltaCandidates:
    found = DeltaCandidates(32, min_shared)
    for lines in bases:
        found.add(_digest(lines), _raw(lines), lines)
    return found


def test_a_tie_goes_to_the_oldest_base() -> None:
    a, b, c = frozenset(SMALL[:4]), frozenset(SMALL[1:5]), frozenset(SMALL[2:6])
    doc = frozenset(SMALL[2:4])  # two lines shared with each
    assert _candidates(a, b, c).best(doc) == (_digest(a), _raw(a))
    assert _candidates(c, b, a).best(doc) == (_digest(c), _raw(c))


def test_a_base_sharing_exactly_the_minimum_is_taken() -> None:
    base = frozenset(SMALL[:1])
    assert _candidates(base, min_shared=0.25).best(frozenset(SMALL[:4])) == (
        _digest(base),
        _raw(base),
    )
    assert _candidates(base, min_shared=0.25).best(frozenset(SMALL[:5])) is None


def test_more_shared_lines_than_a_field_holds_are_counted() -> None:
    small, large = _big(0, 10), _big(0, 3 * FIELD_MAX)
    doc = _big(0, 3 * FIELD_MAX + 7)
    assert _candidates(large, small).best(doc) == (_digest(large), _raw(large))
    assert _candidates(small, large).best(doc) == (_digest(large), _raw(large))


def test_an_evicted_base_is_not_chosen_and_the_table_stays_small() -> None:
    found = DeltaCandidates(2, 0.3)
    for start in range(0, 100, 10):
        found.add(_digest(_big(start, 10)), b"", _big(start, 10))
    assert found.best(_big(0, 10)) is None
    assert found.best(_big(90, 10)) == (_digest(_big(90, 10)), b"")
    assert found.compactions > 0
    assert len(found._table) <= FIELDS_PER_BASE * 2 * 10


def test_an_evicted_base_takes_the_lines_only_it_had_along() -> None:
    found = DeltaCandidates(2, 0.3)
    for lines in (_big(0, 10), _big(5, 10), _big(100, 10)):  # the first is evicted
        found.add(_digest(lines), b"", lines)
    assert found.compactions == 0
    assert not _big(0, 5) & found._table.keys()  # its own lines: gone at once
    assert _big(5, 10) <= found._table.keys()  # shared with a held base: kept
    found.discard(_digest(_big(100, 10)))
    assert not _big(100, 10) & found._table.keys()


def test_bases_discarded_out_of_turn_leave_no_unbounded_fields() -> None:
    found, oldest = DeltaCandidates(2, 0.3), _big(0, 10)
    found.add(_digest(oldest), b"", oldest)  # held throughout: its field cannot be shifted out
    for start in range(10, 500, 10):
        found.add(_digest(_big(start, 10)), b"", _big(start, 10))
        found.discard(_digest(_big(start, 10)))
        assert found._fields <= FIELDS_PER_BASE * 2
    assert len(found._table) <= FIELDS_PER_BASE * 2 * 10
    assert found.best(oldest) == (_digest(oldest), b"")


def test_a_capacity_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="capacity must be at least 1"):
        DeltaCandidates(0, 0.3)


# ----------------------------------------------------------------- wired into SqlArchive
def _file(version: int) -> dict[str, object]:
    lines = [f"def function_{i}(value, limit):\n    return value + {i} * limit" for i in range(80)]
    lines[40] = f"def changed_{version}():\n    return {version}"
    return {"role": "tool", "tool_call_id": f"c{version}", "content": "\n\n".join(lines)}


def _codecs(archive: SqlArchive) -> dict[bytes, tuple[int, int | None, int]]:
    with archive.db.read() as conn:
        rows = conn.execute(select(blobs.c.digest, blobs.c.codec, blobs.c.base_id, blobs.c.id))
        return {bytes(r[0]): (r[1], r[2], r[3]) for r in rows}


def test_a_rolled_back_base_is_not_used(tmp_path: Path) -> None:
    archive = SqlArchive(open_database(root=tmp_path / "run"), auto_train=False)
    with pytest.raises(RuntimeError), archive.db.atomic() as conn:
        archive.store_encoded(conn, [encode(_file(1))])
        assert len(archive._bases) == 1
        raise RuntimeError("roll back")
    assert len(archive._bases) == 0
    second = archive.put(_file(2))
    assert _codecs(archive)[second][0] != CODEC_ZSTD_BASE
    assert archive.verify().ok


def test_a_base_deleted_meanwhile_is_replaced_by_the_new_document(tmp_path: Path) -> None:
    archive = SqlArchive(open_database(root=tmp_path / "run"), auto_train=False)
    first = archive.put(_file(1))
    with archive.db.atomic() as conn:  # as `gc` would: nothing refers to it
        conn.execute(delete(blob_rows).where(blob_rows.c.digest == first))
    second = archive.put(_file(2))  # its best base is gone: stored whole, a base itself
    third = archive.put(_file(3))
    codecs = _codecs(archive)
    assert first not in codecs and first not in archive._bases
    assert codecs[second][0] != CODEC_ZSTD_BASE
    assert codecs[third][:2] == (CODEC_ZSTD_BASE, codecs[second][2])
    assert archive.get(third, verify=True) == _file(3)
    assert archive.verify().ok


def test_a_packed_delta_is_stored_whole_in_its_frame_and_needs_no_base(tmp_path: Path) -> None:
    """Packing takes deltas too (issue 33): the frame holds the delta's whole content, its row
    no longer names a base, and the base can go (gc) without the delta losing anything."""
    from alpstore.archive.frames import CODEC_PACKED

    archive = SqlArchive(open_database(root=tmp_path / "run"), auto_train=False)
    first = archive.put(_file(1))
    second = archive.put(_file(2))
    assert _codecs(archive)[second][:2] == (CODEC_ZSTD_BASE, _codecs(archive)[first][2])
    report = archive.pack_cold()
    assert report.blobs == 2
    codecs = _codecs(archive)
    assert codecs[first][:2] == (CODEC_PACKED, None)
    assert codecs[second][:2] == (CODEC_PACKED, None)
    with archive.db.atomic() as conn:  # the old base gone: the packed delta reads alone
        conn.execute(delete(blob_rows).where(blob_rows.c.digest == first))
    archive.close()
    fresh = SqlArchive(open_database(root=tmp_path / "run"), auto_train=False)
    try:
        assert fresh.get(second, verify=True) == _file(2)
        assert fresh.verify().ok
    finally:
        fresh.close()
