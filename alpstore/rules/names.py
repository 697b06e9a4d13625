"""Session names: one spelling of each (NFC), and claiming one for an import — the name, or the
first free ``name-2``, ``name-3``.

A name is normalised to Unicode NFC wherever it is taken in (created, forked, renamed, claimed)
and wherever one is looked up, so "café" typed with a precomposed ``é`` and "café" typed as
``e`` + a combining accent are one name, not two sessions that ``session list`` shows alike.

Transcript imports and checkpoint-file imports share the claiming rule (checked against every
session's name and id inside the caller's transaction; on PostgreSQL under one advisory lock).
"""

from __future__ import annotations

import unicodedata
from typing import TYPE_CHECKING, Any, Final, Protocol, overload

from alpstore.db import raw as rsql
from alpstore.errors import UsageError
from alpstore.rules.ids import shown

if TYPE_CHECKING:
    from sqlalchemy import Connection

NAME_LOCK: Final = 0x6E616D65
"""The advisory lock (two-key form: this key, "name", then the hash of the archive's schema)
that serialises name claims on PostgreSQL; an archive in another schema of the same database
claims its names beside this one's."""


@overload
def normal_name(name: str) -> str: ...
@overload
def normal_name(name: None) -> None: ...
def normal_name(name: str | None) -> str | None:
    """``name`` in its one stored spelling (Unicode NFC); None stays None."""
    if name is None or name.isascii():
        return name
    return unicodedata.normalize("NFC", name)


class _HasDatabase(Protocol):
    @property
    def db(self) -> Any: ...


def claim_name(conn: Connection, store: _HasDatabase, name: str, *, suffix: bool) -> str:
    """``name``, or with ``suffix`` the first free ``name-2``, ``name-3`` …, checked against
    every session's name and id inside the caller's transaction.

    Raises:
        UsageError: the name is taken and ``suffix`` is false.
    """
    name = normal_name(name)
    if store.db.is_postgresql:
        rsql.execute(
            conn, "SELECT pg_advisory_xact_lock(?, hashtext(current_schema()))", (NAME_LOCK,)
        )

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
