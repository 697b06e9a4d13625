"""Which checkpoint and backtrack ids a session-file import keeps (see ``travel_import``).

A file's ids are claims, never trusted: they are kept only when every one lies above the highest
id this archive has ever handed out and at most :data:`KEEP_ID_BOUND`. PostgreSQL decides before
the import (:func:`reserve_ids`, :class:`Reserved`); SQLite's one read decides inside the import's
transaction, at the first id of each table (:class:`DecidedHere`, :class:`Renumber`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from alpstore.db import raw as rsql
from alpstore.errors import CheckpointFileError

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from alpstore.core.store import CoreStore as Store
    from alpstore.portable.travel import Checked

KEEP_ID_BOUND: Final = 2**30
"""The highest checkpoint or backtrack id an import keeps (half the 32-bit range: whatever a file
claims, this archive keeps a billion ids of its own)."""


def reserved(value: int, span: tuple[int, int]) -> int:
    """``value`` when it lies in the range reserved for this import (the file was read
    before the reservation; it cannot have changed since without saying so here).
    """
    if not span[0] <= value <= span[1]:
        raise CheckpointFileError(
            f"id {value} was not in the file when it was checked: the file changed while it "
            "was imported; nothing was imported"
        )
    return value


def high_water(store: Store, conn: Connection, table: str) -> int:
    """The highest id ``table`` has ever handed out (or holds)."""
    top = rsql.fetchone(conn, f"SELECT COALESCE(MAX(id), 0) FROM {table}")[0]
    if store.db.is_sqlite:
        row = rsql.fetchone(conn, "SELECT seq FROM sqlite_sequence WHERE name = ?", (table,))
    else:
        row = rsql.fetchone(
            conn,
            "SELECT pg_sequence_last_value(CAST(pg_get_serial_sequence(?, 'id') AS regclass))",
            (table,),
        )
    return max(int(top), int(row[0]) if row and row[0] is not None else 0)


def move_sequence(store: Store, conn: Connection, table: str, upto: int) -> None:
    """The next id ``table`` hands out is above ``upto`` (nothing at or below it is free)."""
    if not store.db.is_sqlite:
        rsql.fetchone(conn, "SELECT setval(pg_get_serial_sequence(?, 'id'), ?)", (table, upto))
        return
    updated = rsql.execute(
        conn, "UPDATE sqlite_sequence SET seq = ? WHERE name = ? AND seq < ?", (upto, table, upto)
    )
    if not updated.rowcount and not rsql.fetchone(
        conn, "SELECT 1 FROM sqlite_sequence WHERE name = ?", (table,)
    ):
        rsql.execute(conn, "INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (table, upto))


def reserve_ids(store: Store, checked: Checked) -> tuple[bool, bool]:
    """Decide whether the file's checkpoint and backtrack ids are kept, and reserve the kept
    ones: ``(checkpoint ids kept, backtrack ids kept)``. One short transaction that holds both
    tables against writers (PostgreSQL: ``LOCK … IN EXCLUSIVE MODE``, which waits for every
    transaction that took an id and has not committed; SQLite: the write lock), reads the high
    water marks and moves the sequences past the kept ranges, so no concurrent writer can be
    handed one of them (before this, PostgreSQL moved its sequence only when the import
    committed: a live writer's checkpoint collided and its turn was lost).
    """
    spans = {"checkpoints": checked.checkpoint_ids, "backtracks": checked.backtrack_ids}
    kept: dict[str, bool] = {}
    with store.db.atomic() as conn:
        if not store.db.is_sqlite:
            rsql.execute(conn, "LOCK TABLE checkpoints, backtracks IN EXCLUSIVE MODE")
        for table, (low, high) in spans.items():
            if (low, high) == (0, 0):
                kept[table] = True  # nothing to keep
                continue
            kept[table] = low > high_water(store, conn, table) and high <= KEEP_ID_BOUND
            if kept[table]:
                move_sequence(store, conn, table, high)
    return kept["checkpoints"], kept["backtracks"]


class Renumber(Exception):
    """SQLite's one read: an id of ``table`` contradicts the decision to keep the file's ids
    (made at its first id): the import rolls back and starts again, renumbering that table.
    """

    def __init__(self, table: str) -> None:
        super().__init__(table)
        self.table = table


class Reserved:
    """Ids kept or not as :func:`reserve_ids` decided before the transaction (PostgreSQL, or a
    file checked first): a kept id must lie in the span reserved for it.
    """

    def __init__(self, keep: bool, span: tuple[int, int]) -> None:
        self.keep = keep
        self.span = span

    def claim(self, value: int, *, ref: bool = False) -> bool:
        """True when ``value`` is kept (it lies in the reserved span)."""
        if self.keep:
            reserved(value, self.span)
        return self.keep

    @property
    def kept(self) -> bool:
        """The file's ids of this table are kept."""
        return self.keep


class DecidedHere:
    """SQLite's one read (see the module): whether the file's ids of ``table`` are kept,
    decided at the first one inside the import's transaction, which holds the write lock, so
    the high water mark read at its start stays the highest id handed out.
    """

    def __init__(self, store: Store, conn: Connection, table: str, *, renumber: bool) -> None:
        self.store = store
        self.conn = conn
        self.table = table
        self.high = high_water(store, conn, table)
        self.keep: bool | None = False if renumber else None

    def claim(self, value: int, *, ref: bool = False) -> bool:
        """True when ``value`` is kept. ``ref``: an id a reference names (no row takes it):
        the sequence is moved past it, so no later row of this archive is handed it.

        Raises:
            Renumber: ``value`` cannot be kept, an id kept before it was.
        """
        free = self.high < value <= KEEP_ID_BOUND
        if self.keep is None:
            self.keep = free
        elif self.keep and not free:
            raise Renumber(self.table)
        if self.keep and ref:
            move_sequence(self.store, self.conn, self.table, value)
        return self.keep

    @property
    def kept(self) -> bool:
        """The file's ids of this table are kept (or it names none)."""
        return self.keep is not False  # (None: the file names no id of this table)


def fresh_id(store: Store, conn: Connection, table: str) -> int:
    """An id of ``table`` no row holds or ever will (taken from its sequence, never used)."""
    if not store.db.is_sqlite:
        return int(
            rsql.fetchone(conn, "SELECT nextval(pg_get_serial_sequence(?, 'id'))", (table,))[0]
        )
    fresh = high_water(store, conn, table) + 1
    move_sequence(store, conn, table, fresh)
    return fresh
