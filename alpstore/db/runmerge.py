"""Who merges a segment's small runs, and when (``db.runs.merge_small`` does one segment): a
long-lived writer's background packer, after each packing, for the head segments of the
sessions written since it last looked (:meth:`RunMerger.merge_heads`), and ``archive pack``
for every segment holding several runs (:meth:`RunMerger.merge_every`). One segment per
transaction.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from alpstore.db import raw as rsql
from alpstore.db import runs
from alpstore.errors import UsageError

if TYPE_CHECKING:
    from alpstore.db.database import Database

POSITIONS_KEPT = 4096
"""Segments whose next merge position a merger remembers: one forgotten is merged from 0
again, which only reads its merged runs once more."""


class RunMerger:
    """One process's merging of small runs (held by its ``SqlArchive``)."""

    def __init__(self) -> None:
        self.since = time.time()
        """Sessions written since then have small runs to merge."""
        self.positions: dict[int, int] = {}
        """Per segment, the position its next merge starts from (at most
        :data:`POSITIONS_KEPT`, the least recently merged forgotten first)."""

    def merge_heads(self, db: Database, pause: Callable[[], bool]) -> None:
        """The small runs of the sessions written since the last look, each segment at a
        pause (the background packer's other cold rows: a turn's append is a row).
        """
        since, self.since = self.since, time.time()
        with db.read() as conn:
            heads = [int(s) for (s,) in rsql.fetchall(conn, runs.HEADS_SINCE, (since,))]
        for seg in heads:
            if not pause():
                return
            with db.atomic() as conn:
                _, self.positions[seg] = runs.merge_small(conn, seg, self.positions.pop(seg, 0))
            while len(self.positions) > POSITIONS_KEPT:
                del self.positions[next(iter(self.positions))]

    @staticmethod
    def merge_every(db: Database) -> int:
        """The small runs of every segment holding several, from position 0: what ``archive
        pack`` runs, so an archive written before the packer merged runs, or by processes that
        closed before it looked, gets them merged too. How many runs were removed.

        Raises:
            UsageError: called inside a transaction.
        """
        if db.in_transaction():
            raise UsageError("merging runs takes its own transactions: call it outside one")
        with db.read() as conn:
            segs = [int(s) for (s,) in rsql.fetchall(conn, runs.SEVERAL_RUNS, ())]
        removed = 0
        for seg in segs:
            with db.atomic() as conn:
                removed += runs.merge_small(conn, seg, 0)[0]
        return removed
