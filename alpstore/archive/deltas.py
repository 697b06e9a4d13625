"""The recent large blobs a new one may be stored as a delta against, found by shared lines.

A new document (a file read again after an edit) is compared with every candidate by the
number of distinct lines they share. Intersecting its line set with each of the candidates
costs a set walk per candidate (32 of them); an inverted index from line to the candidates
holding it finds the same counts by looking each line up once, and counting at C speed.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from itertools import chain

CandidateKey = bytes
"""A candidate's digest."""


class DeltaCandidates:
    """At most ``capacity`` candidates (oldest dropped first), each its raw bytes and distinct
    lines, indexed by line. Safe to share between threads.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[CandidateKey, tuple[bytes, frozenset[bytes], int]] = OrderedDict()
        self._by_line: dict[bytes, set[CandidateKey]] = {}
        self._seq = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def keys(self) -> list[CandidateKey]:
        """The candidates, oldest first."""
        with self._lock:
            return list(self._items)

    def best(self, lines: frozenset[bytes]) -> tuple[CandidateKey, bytes, int] | None:
        """The candidate sharing the most lines with ``lines`` (the oldest among equals):
        ``(key, raw, shared)``; None when none shares a line.
        """
        with self._lock:
            by_line = self._by_line
            counts = Counter(chain.from_iterable(filter(None, map(by_line.get, lines))))
            if not counts:
                return None
            items = self._items
            key, shared = max(counts.items(), key=lambda kv: (kv[1], -items[kv[0]][2]))
            return key, items[key][0], shared

    def add(self, key: CandidateKey, raw: bytes, lines: frozenset[bytes]) -> None:
        """Remember a candidate (one already held keeps its place and its age)."""
        with self._lock:
            if key in self._items:
                return
            self._seq += 1
            self._items[key] = (raw, lines, self._seq)
            by_line = self._by_line
            for line in lines:
                holders = by_line.get(line)
                if holders is None:
                    by_line[line] = {key}
                else:
                    holders.add(key)
            while len(self._items) > self.capacity:
                old, _ = next(iter(self._items.items()))
                self._drop(old)

    def discard(self, key: CandidateKey) -> None:
        """Forget a candidate (gone from the archive, or stored as a delta itself)."""
        with self._lock:
            if key in self._items:
                self._drop(key)

    def clear(self) -> None:
        """Forget every candidate (a rollback: what it wrote may not exist)."""
        with self._lock:
            self._items.clear()
            self._by_line.clear()

    def _drop(self, key: CandidateKey) -> None:
        _, lines, _ = self._items.pop(key)
        by_line = self._by_line
        for line in lines:
            holders = by_line[line]
            holders.discard(key)
            if not holders:
                del by_line[line]
