"""The recent large blobs a writer may store a new document as a delta against.

A document is tried against every candidate base: the one sharing the most distinct lines with
it wins (the first one held, on a tie), if it shares at least a given fraction of them. Set
intersections cost one lookup per line *per base* (32 bases of ~80 lines: ~2,500 per document).
Here a table maps each line to one integer holding a byte-wide field per base, 1 where that base
has the line: summed over a document's lines, field ``f`` counts the lines the document shares
with base ``f`` -- the intersection's size, so the choice is exactly the one the intersections
make -- for one lookup and one addition per line. A document of more than 255 lines is summed in
runs of 255, so a field never carries into the next.

Each added base takes the next field. An evicted base takes the lines only it had out of the
table at once; its field stays (it is not read) until the fields in use reach ``FIELDS_PER_BASE``
times the capacity, or the evicted bases' bytes twice the held ones': the table is then compacted
(fields below the oldest held base's shifted out, lines left without a field dropped), so it holds
little beyond the held bases' lines. The table is keyed by line content, never by blob id.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from itertools import compress, repeat
from operator import add, eq, or_, rshift

FIELD_MAX = 255
"""A field is a byte: at most this many lines are summed at once."""

FIELDS_PER_BASE = 3
"""The table is compacted once it has this many fields per base held (measured: 2 compacts
too often, 4 and more gain nothing)..."""

COMPACT_SLACK_BYTES = 1024 * 1024
"""...or once the bases evicted since hold more than twice the held bases' bytes plus this."""


class DeltaCandidates:
    """The last ``capacity`` bases by digest, oldest first, and the search among them.

    Thread-safe: a writer's search and another thread's rollback (:meth:`clear`) never see
    half an update.
    """

    def __init__(
        self, capacity: int, min_shared: float, *, slack_bytes: int = COMPACT_SLACK_BYTES
    ) -> None:
        if capacity < 1:
            raise ValueError(f"delta candidates: capacity must be at least 1, not {capacity}")
        self.capacity = capacity
        self.min_shared = min_shared
        self._slack_bytes = slack_bytes
        self._lock = threading.Lock()
        self._bases: OrderedDict[bytes, tuple[bytes, frozenset[bytes], int]] = OrderedDict()
        """Digest → (raw bytes, distinct lines, field), oldest first."""
        self._table: dict[bytes, int] = {}
        """Line → the low bit of the field of each base having it (held, or evicted since the
        last compaction)."""
        self._fields = 0
        """Fields in use: field ``f`` is bits ``8 * f`` up."""
        self._held_bytes = 0
        self._dead_bytes = 0
        """Raw bytes of the bases evicted since the last compaction (their lines may still be in
        the table)."""
        self._digests: list[bytes] = []
        self._order: list[int] | None = None
        """The held bases' digests and fields, oldest first (None: changed, to list again)."""
        self.compactions = 0
        """How many times the table was compacted (for tests)."""

    def __len__(self) -> int:
        return len(self._bases)

    def __contains__(self, digest: object) -> bool:
        return digest in self._bases

    def best(self, lines: frozenset[bytes]) -> tuple[bytes, bytes] | None:
        """``(digest, raw)`` of the base sharing the most of ``lines`` (the oldest on a tie),
        when it shares at least :attr:`min_shared` of them; else None.
        """
        need = self.min_shared * len(lines)
        with self._lock:
            if len(lines) <= FIELD_MAX:
                total = sum(filter(None, map(self._table.get, lines)))
                if not total:
                    return None
                counts: bytes | list[int] = total.to_bytes(self._fields, "little")
            else:
                known = list(filter(None, map(self._table.get, lines)))
                counts = [0] * self._fields
                for i in range(0, len(known), FIELD_MAX):
                    run = sum(known[i : i + FIELD_MAX]).to_bytes(self._fields, "little")
                    counts = list(map(add, counts, run))
            if self._order is None:
                self._digests = list(self._bases)
                self._order = [base[2] for base in self._bases.values()]
            scores = list(map(counts.__getitem__, self._order))
            score = max(scores, default=0)
            if not score or score < need:
                return None
            best = self._digests[scores.index(score)]  # the first (oldest) on a tie
            return best, self._bases[best][0]

    def add(self, digest: bytes, raw: bytes, lines: frozenset[bytes]) -> None:
        """Hold a new base (one held already keeps its place), evicting the oldest past
        :attr:`capacity`.
        """
        with self._lock:
            if digest in self._bases:
                return
            self._order = None
            while len(self._bases) >= self.capacity:
                self._drop(self._bases.popitem(last=False)[1])
            if (
                self._fields >= FIELDS_PER_BASE * self.capacity
                or self._dead_bytes > 2 * self._held_bytes + self._slack_bytes
            ):
                self._compact()
            self._bases[digest] = (raw, lines, self._mark(lines))
            self._held_bytes += len(raw)

    def discard(self, digest: bytes) -> None:
        """Forget a base (gone from the archive, or stored as a delta itself)."""
        with self._lock:
            base = self._bases.pop(digest, None)
            if base is not None:
                self._order = None
                self._drop(base)

    def clear(self) -> None:
        """Forget every base (a rolled-back write may have stored them)."""
        with self._lock:
            self._order = None
            self._bases.clear()
            self._table = {}
            self._fields = self._held_bytes = self._dead_bytes = 0

    def _drop(self, base: tuple[bytes, frozenset[bytes], int]) -> None:
        """Account for a base no longer held, and drop the lines only it had at once (a
        document's lines can be as large as the document: they must not outlive it long).
        """
        raw, lines, field = base
        self._held_bytes -= len(raw)
        self._dead_bytes += len(raw)
        table = self._table
        own = compress(lines, map(eq, map(table.get, lines), repeat(1 << (8 * field))))
        deque(map(table.__delitem__, own), maxlen=0)

    def _mark(self, lines: frozenset[bytes]) -> int:
        """Give ``lines`` the next field; return it."""
        field = self._fields
        self._fields += 1
        table = self._table
        bit = 1 << (8 * field)
        values = map(or_, map(table.get, lines, repeat(0)), repeat(bit))
        table.update(zip(lines, values, strict=True))
        return field

    def _compact(self) -> None:
        """Drop the fields below the oldest held base's (shifting the others down), and the
        lines left without a field; renumber the held bases from scratch instead when bases
        discarded out of turn left more than that unused.
        """
        self.compactions += 1
        self._dead_bytes = 0
        low = min((field for _, _, field in self._bases.values()), default=self._fields)
        if self._fields - low > self.capacity:
            self._table = {}
            self._fields = 0
            for digest, (raw, lines, _) in list(self._bases.items()):
                self._bases[digest] = (raw, lines, self._mark(lines))
            return
        names = list(self._table)
        values = list(map(rshift, self._table.values(), repeat(8 * low)))
        self._table = dict(compress(zip(names, values, strict=True), values))
        self._fields -= low
        for digest, (raw, lines, field) in list(self._bases.items()):
            self._bases[digest] = (raw, lines, field - low)
