"""The delta-candidate index answers exactly what intersecting with every candidate would."""

from __future__ import annotations

import threading
from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from alpstore.archive.deltas import DeltaCandidates

LINES = st.frozensets(st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f", b""]), max_size=6)
KEYS = st.sampled_from([b"k1", b"k2", b"k3", b"k4", b"k5", b"k6"])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), KEYS, LINES),
        st.tuples(st.just("discard"), KEYS, st.just(frozenset())),
        st.tuples(st.just("best"), st.just(b""), LINES),
        st.tuples(st.just("clear"), st.just(b""), st.just(frozenset())),
    ),
    max_size=60,
)


class _Model:
    """The previous implementation: scan every candidate, oldest first; first max wins."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.items: OrderedDict[bytes, frozenset[bytes]] = OrderedDict()

    def add(self, key: bytes, lines: frozenset[bytes]) -> None:
        if key in self.items:
            return
        self.items[key] = lines
        while len(self.items) > self.capacity:
            self.items.popitem(last=False)

    def best(self, lines: frozenset[bytes]) -> tuple[bytes, int] | None:
        best, score = None, 0
        for key, base_lines in self.items.items():
            shared = len(lines & base_lines)
            if shared > score:
                best, score = key, shared
        return None if best is None else (best, score)


@settings(max_examples=300, deadline=None)
@given(OPS, st.integers(1, 4))
def test_index_agrees_with_scanning_every_candidate(
    ops: list[tuple[str, bytes, frozenset[bytes]]], capacity: int
) -> None:
    index, model = DeltaCandidates(capacity), _Model(capacity)
    for op, key, lines in ops:
        if op == "add":
            index.add(key, b"raw " + key, lines)
            model.add(key, lines)
        elif op == "discard":
            index.discard(key)
            model.items.pop(key, None)
        elif op == "clear":
            index.clear()
            model.items.clear()
        else:
            found = index.best(lines)
            expected = model.best(lines)
            assert (None if found is None else (found[0], found[2])) == expected
            if found is not None:
                assert found[1] == b"raw " + found[0]
        assert index.keys() == list(model.items)
        assert len(index) == len(model.items)
    # no line is left indexed for a candidate that is gone
    held = {key for keys in index._by_line.values() for key in keys}
    assert held == {key for key, lines in model.items.items() if lines}


def test_shared_between_threads() -> None:
    index = DeltaCandidates(8)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(2000):
                key = f"{n}-{i % 20}".encode()
                index.add(key, key, frozenset({key, b"common", str(i % 7).encode()}))
                index.best(frozenset({b"common", str(i % 5).encode()}))
                if i % 13 == 0:
                    index.discard(key)
                if i % 501 == 0:
                    index.clear()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(index) <= 8
    held = {key for keys in index._by_line.values() for key in keys}
    assert held == set(index.keys())  # every key here has lines
