"""A store's sessions by name: creating one, claiming and renaming names, the id rules.

Names are unique in an archive, and an id may not be another session's name (lookups try ids
first). The inserts are plain SQL (``db/raw.py``): an import writes on the ``sqlite3`` driver alone.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from alpstore.core.content import StoreContent
from alpstore.db import raw as rsql
from alpstore.errors import DatabaseError, NotFoundError, SessionNameTakenError, UsageError
from alpstore.rules.ids import session_id_problem, shown
from alpstore.rules.names import normal_name
from alpstore.sessions import Retention, Session, manifest_blob, new_session_uuid
from alpstore.views import EMPTY_COVER

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from alpstore.sessions import CheckpointInfo

NAME_LIMIT = 200
"""Longest session name (the column's width)."""

NAME_RACE_ATTEMPTS = 5
"""How often ``Store.session_named`` re-reads after losing a creation race before giving up."""


def acceptable_id(session_id: str | None) -> str:
    """``session_id``, or a new UUID when None; ``UsageError`` for an id an import would
    refuse (the same rule: letters, digits, ``.``, ``_``, ``-``, at most 64; a UUID).
    """
    if session_id is None:
        return new_session_uuid()
    problem = session_id_problem(session_id)
    if problem is not None:
        raise UsageError(f"session id {shown(session_id)}: {problem}")
    return session_id


def _name_taken(name: str, owner: str | None) -> SessionNameTakenError:
    by = f" by session {owner}" if owner else " by another session"
    return SessionNameTakenError(
        f"session name {name!r} is already taken{by}",
        hint="session names are unique in an archive; choose another name",
    )


class StoreNaming(StoreContent):
    """Sessions created, found or renamed by name."""

    def create_session(
        self,
        *,
        session_id: str | None = None,
        name: str | None = None,
        manifest: Any | None = None,
        retention: Retention | None = None,
        origin: dict[str, Any] | None = None,
        parent: CheckpointInfo | None = None,
    ) -> Session:
        """Create an empty session; with ``parent``, a child session anchored at that
        checkpoint (a subagent's own conversation: its lineage is recorded, it starts empty).

        Raises:
            UsageError: the session id is taken (an id or another session's name) or not an
                acceptable id (letters, digits, ".", "_", "-"; a UUID).
            SessionNameTakenError: another session has this name (names are unique).
        """
        uuid = acceptable_id(session_id)
        name = normal_name(name)  # one spelling of each name (NFC)
        retention = retention or Retention()
        if manifest is not None:  # CK-11: a credential never enters the archive
            from alpstore.rules.secrets import require_no_secrets  # (its patterns: ~5 ms)

            require_no_secrets(manifest, what="manifest")
        now = time.time()
        with self.db.atomic() as conn:
            self._require_free_id(conn, uuid)
            self._require_free_name(conn, name)
            mid = manifest_blob(conn, self.archive, manifest)
            parent_row = None
            if parent is not None:
                parent_row = rsql.fetchone(
                    conn,
                    "SELECT s.id, s.root_id FROM sessions s JOIN checkpoints c "
                    "ON c.session_id = s.id WHERE c.id = ?",
                    (parent.id,),
                )
                if parent_row is None:
                    raise NotFoundError(f"no checkpoint {parent.id} in this archive")
            parent_id = None if parent_row is None else int(parent_row[0])
            root = None if parent_row is None else int(parent_row[1] or parent_row[0])
            sid = self._insert_session(
                conn,
                name,
                {
                    "uuid": uuid,
                    "name": name,
                    "parent_id": parent_id,
                    "source_checkpoint_id": None if parent is None else parent.id,
                    "root_id": root,
                    "origin": json.dumps(origin, sort_keys=True) if origin else None,
                    "manifest_blob_id": mid,
                    "status": "created",
                    "head_segment_id": None,
                    "head_length": 0,
                    "turn": 0,
                    "backtrack_count": 0,
                    "retention_mode": retention.mode,
                    "retention_n": retention.n,
                    "created_at": now,
                    "updated_at": now,
                    "head_digest": EMPTY_COVER,
                },
            )
            if root is None:  # a root session is its own root
                rsql.execute(conn, "UPDATE sessions SET root_id = ? WHERE id = ?", (sid, sid))
            info = self.session_info(sid, conn=conn)
        self.emit("session", session=uuid, name=name)
        return Session(self, info)  # type: ignore[arg-type]

    def session_named(
        self,
        name: str,
        *,
        origin: dict[str, Any] | None = None,
        manifest: Any | None = None,
        retention: Retention | None = None,
    ) -> Session:
        """The session called ``name``, created (empty, with ``origin``) when there is none.

        Atomic across threads and processes: callers racing on a new name all get the one
        session the first of them created (the unique index on names decides; the losers read
        the winner's row).

        Raises:
            DatabaseError: the name kept being created and deleted under us.
        """
        name = normal_name(name)
        for _ in range(NAME_RACE_ATTEMPTS):
            found = self.find_session_named(name)
            if found is not None:
                return found
            try:
                return self.create_session(
                    name=name, origin=origin, manifest=manifest, retention=retention
                )
            except SessionNameTakenError:
                continue  # another thread or process created it first: read theirs
        raise DatabaseError(
            f"session name {name!r}: created and gone {NAME_RACE_ATTEMPTS} times in a row",
            hint="another writer keeps deleting it; try again",
        )

    def available_name(self, conn: Connection, name: str) -> str:
        """``name`` when no session has it, else ``<name> #2``, ``#3``… (cut to fit 200
        characters): for sessions named after something else (a LangGraph thread) whose natural
        name a deleted or truncated one already holds.
        """
        name = normal_name(name)
        candidate, n = name[:NAME_LIMIT], 1
        while rsql.fetchone(conn, "SELECT id FROM sessions WHERE name = ?", (candidate,)):
            n += 1
            suffix = f" #{n}"
            candidate = name[: NAME_LIMIT - len(suffix)] + suffix
        return candidate

    def rename_session(self, conn: Connection, session_id: int, name: str | None) -> None:
        """Give a session a new name (None: no name) inside the caller's transaction.

        Raises:
            SessionNameTakenError: another session has this name.
        """
        name = normal_name(name)
        self._require_free_name(conn, name)
        rsql.execute(conn, "UPDATE sessions SET name = ? WHERE id = ?", (name, session_id))

    def _require_free_id(self, conn: Connection, uuid: str) -> None:
        """Raise ``UsageError`` when ``uuid`` is a session's id, or another session's name
        (lookups try ids first: the new id would hide that session's name).
        """
        if rsql.fetchone(conn, "SELECT id FROM sessions WHERE uuid = ?", (uuid,)):
            raise UsageError(f"session {uuid} already exists in this archive")
        if rsql.fetchone(conn, "SELECT id FROM sessions WHERE name = ?", (uuid,)):
            raise UsageError(
                f"session id {shown(uuid)} is the name of another session here",
                hint="choose another id, or rename that session",
            )

    def _require_free_name(self, conn: Connection, name: str | None) -> None:
        """Raise ``SessionNameTakenError`` when another session has ``name``, ``UsageError``
        when it is another session's id (create, fork and rename share this rule).
        """
        if name is None:
            return
        if rsql.fetchone(conn, "SELECT id FROM sessions WHERE uuid = ?", (name,)):
            # lookups try ids first: the name would find the other session
            raise UsageError(f"the name {name!r} is the id of another session")
        owner = rsql.fetchone(conn, "SELECT uuid FROM sessions WHERE name = ?", (name,))
        if owner is not None:
            raise _name_taken(name, str(owner[0]))

    def _insert_session(self, conn: Connection, name: str | None, values: dict[str, Any]) -> int:
        """Insert a session row (``values``: its columns but ``id``), in plain SQL (the
        imports write on the ``sqlite3`` driver alone); its id. A concurrent writer's row with
        the same name (seen by the unique index only, on PostgreSQL) becomes
        ``SessionNameTakenError``.
        """
        sql = (
            f"INSERT INTO sessions ({', '.join(values)}) "
            f"VALUES ({rsql.placeholders(len(values))}) RETURNING id"
        )
        try:
            return int(rsql.fetchone(conn, sql, list(values.values()))[0])
        except Exception as err:
            if type(err).__name__ not in ("IntegrityError", "UniqueViolation"):
                raise
            text = str(err)
            if name is None or not ("uq_sessions_name" in text or "sessions.name" in text):
                raise
            raise _name_taken(name, None) from err
