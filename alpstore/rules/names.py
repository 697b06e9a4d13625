"""Claiming a session name for an import: the name, or the first free ``name-2``, ``name-3``.

Transcript imports and checkpoint-file imports share this rule (checked against every session's
name and id inside the caller's transaction; on PostgreSQL under one advisory lock).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Protocol

from alpstore.db import raw as rsql
from alpstore.errors import UsageError
from alpstore.rules.ids import shown

if TYPE_CHECKING:
    from sqlalchemy import Connection

NAME_LOCK: Final = 0x616C7073_6E616D65
"""The advisory lock key that serialises name claims on PostgreSQL ("alpsname")."""


class _HasDatabase(Protocol):
    @property
    def db(self) -> Any: ...


def claim_name(conn: Connection, store: _HasDatabase, name: str, *, suffix: bool) -> str:
    """``name``, or with ``suffix`` the first free ``name-2``, ``name-3`` …, checked against
    every session's name and id inside the caller's transaction.

    Raises:
        UsageError: the name is taken and ``suffix`` is false.
    """
    if store.db.is_postgresql:
        rsql.execute(conn, "SELECT pg_advisory_xact_lock(?)", (NAME_LOCK,))

    def taken(candidate: str) -> bool:
        row = rsql.fetchone(
            conn,
            "SELECT id FROM sessions WHERE name = ? OR uuid = ? LIMIT 1",
            (candidate, candidate),
        )
        return row is not None

    if not taken(name):
        return name
    if not suffix:
        raise UsageError(
            f"a session named {shown(name)} already exists in this archive",
            hint="choose another --name (names are unique within an archive)",
        )
    for n in range(2, 10_000):
        candidate = f"{name[: 200 - len(str(n)) - 1]}-{n}"
        if not taken(candidate):
            return candidate
    raise UsageError(f"no free name like {shown(name)}", hint="pass --name")
