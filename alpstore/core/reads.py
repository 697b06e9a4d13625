"""A store's session and checkpoint reads, in plain SQL through :mod:`alpstore.db.raw`.

What the reading commands (``session list|log|show``, ``checkpoint list|show``, ``debug diff``)
call: no SQLAlchemy on this path, so an SQLite archive is read with the ``sqlite3`` driver alone.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import TYPE_CHECKING, Any, cast

from alpstore.archive.lgstate import folded_alp_of
from alpstore.codec import Digest
from alpstore.core.parts import StoreParts
from alpstore.core.rows import CHECKPOINT_COLUMNS, SESSION_COLUMNS, CheckpointRow, SessionRow
from alpstore.db import raw as rsql
from alpstore.db.members import rows_by_id
from alpstore.errors import NotFoundError
from alpstore.gcpause import no_gc_pause
from alpstore.rules.ids import is_number
from alpstore.rules.names import normal_name
from alpstore.sessions import CheckpointInfo, Retention, Session, SessionInfo, default_label
from alpstore.views import View

if TYPE_CHECKING:
    from sqlalchemy import Connection

_LANGGRAPH = "langgraph:"
"""The name prefix of a LangGraph thread's session (``langgraph:THREAD[ NS]``)."""
_AGENTS = "openai-agents:"
"""The name prefix of an OpenAI Agents SDK session's (``openai-agents:SESSION``)."""
_LG_CHECKPOINT_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_CK_REF = re.compile(r"^(?P<session>[^@]+)@(?P<at>latest|[0-9]+)(?:\.(?P<step>[0-9]{1,9}))?$")
r"""A checkpoint reference by session: ASCII digits only (``²`` or ``①`` pass ``isdigit()`` and
``\d``; ``int()`` refuses them)."""
MAX_SQL_INTEGER = 2**63 - 1
"""The largest id or turn a row can hold (SQLite and PostgreSQL BIGINT)."""

_SESSIONS = f"SELECT {SESSION_COLUMNS} FROM sessions"
_CHECKPOINTS = f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints"


def _like_prefix(text: str) -> str:
    """A LIKE pattern matching what starts with ``text`` (``%``, ``_``, ``/`` escaped by ``/``)."""
    return text.replace("/", "//").replace("%", "/%").replace("_", "/_") + "%"


class StoreReads(StoreParts):
    """Sessions and checkpoints read by id, reference or list."""

    def _sessions(self, conn: Connection, where: str, params: tuple[Any, ...]) -> list[SessionRow]:
        return [SessionRow(*r) for r in rsql.fetchall(conn, f"{_SESSIONS} {where}", params)]

    def session_info(self, session_id: int, *, conn: Connection | None = None) -> SessionInfo:
        """Read a session row by its internal id.

        Raises:
            NotFoundError: no such session.
        """
        if conn is None:
            with self.db.read() as c:
                return self.session_info(session_id, conn=c)
        rows = self._sessions(conn, "WHERE id = ?", (session_id,))
        if not rows:
            raise NotFoundError(f"no session with id {session_id}")
        return self._info(conn, rows[0])

    def _info(self, conn: Connection, row: Any, names: dict[Any, Any] | None = None) -> SessionInfo:
        """``row`` as a SessionInfo; ``names`` (id → uuid) when the caller read them already."""
        if names is None:
            wanted = sorted({i for i in (row.parent_id, row.root_id) if i is not None})
            names = {}
            if wanted:
                names = dict(
                    rsql.fetchall(
                        conn,
                        "SELECT id, uuid FROM sessions "
                        f"WHERE id IN ({rsql.placeholders(len(wanted))})",
                        wanted,
                    )
                )
        return SessionInfo(
            id=int(row.id),
            uuid=row.uuid,
            name=row.name,
            status=row.status,
            turn=int(row.turn),
            head=View(row.head_segment_id, int(row.head_length)),
            parent=names.get(row.parent_id),
            root=names.get(row.root_id, row.uuid),
            source_checkpoint=row.source_checkpoint_id,
            backtrack_count=int(row.backtrack_count),
            retention=Retention(row.retention_mode, int(row.retention_n)),
            created_at=float(row.created_at),
            updated_at=float(row.updated_at),
            origin=json.loads(row.origin) if row.origin else None,
        )

    def get_session(self, ref: str) -> Session:
        """Find a session by uuid, unique uuid prefix (≥ 4 characters) or name.

        Raises:
            NotFoundError: no session matches, or the prefix is ambiguous.
        """
        with self.db.read() as conn:
            found = self._sessions(conn, "WHERE uuid = ?", (ref,))
            row = found[0] if found else None
            if row is None:
                rows = self._named(conn, ref)
                if not rows and len(ref) >= 4:
                    rows = self._sessions(
                        conn, "WHERE uuid LIKE ? ESCAPE '/'", (_like_prefix(ref),)
                    )
                if len(rows) > 1:  # a session and the children named after it: the session
                    rows = [r for r in rows if _names_the_rest(str(r.uuid), rows)] or rows
                if len(rows) > 1:
                    raise NotFoundError(
                        f"session {ref!r} is ambiguous ({len(rows)} match)",
                        hint="give more of the id",
                    )
                row = rows[0] if rows else None
            if row is None:
                row = self._framework_session(conn, ref)
            if row is None:
                raise NotFoundError(
                    f"no session {ref!r} in this archive",
                    hint="`alpstore session list` shows them (a framework's thread goes by its "
                    f"own id too: {_LANGGRAPH}THREAD, {_AGENTS}SESSION)",
                )
            return Session(self, self._info(conn, row))  # type: ignore[arg-type]

    def _framework_session(self, conn: Connection, ref: str) -> SessionRow | None:
        """The session of the framework thread ``ref`` names by its own id: a LangGraph thread
        (its root namespace ``langgraph:REF``, else its only namespace) or an Agents SDK
        session (``openai-agents:REF``).

        Raises:
            NotFoundError: the id names several (the hint names the prefixes).
        """
        if ref.startswith((_LANGGRAPH, _AGENTS)):
            return None
        found = self._named(conn, _LANGGRAPH + ref) + self._named(conn, _AGENTS + ref)
        if not found:
            found = self._sessions(
                conn, "WHERE name LIKE ? ESCAPE '/'", (_like_prefix(f"{_LANGGRAPH}{ref} "),)
            )
        if len(found) > 1:
            names = ", ".join(str(r.name) for r in found[:3])
            raise NotFoundError(
                f"session {ref!r} is ambiguous: {len(found)} framework sessions go by it "
                f"({names}{', …' if len(found) > 3 else ''})",
                hint=f"name one with its prefix ({_LANGGRAPH}{ref}, {_AGENTS}{ref}) or its id",
            )
        return found[0] if found else None

    def _named(self, conn: Connection, name: str) -> list[SessionRow]:
        """The session rows called ``name`` in its stored spelling (NFC), else (a name stored
        before names were normalised) exactly as given.
        """
        normal = normal_name(name)
        rows = self._sessions(conn, "WHERE name = ?", (normal,))
        if not rows and normal != name:
            rows = self._sessions(conn, "WHERE name = ?", (name,))
        return rows

    def find_session_named(self, name: str) -> Session | None:
        """The session called exactly ``name`` (names are unique), or None."""
        with self.db.read() as conn:
            rows = self._named(conn, name)
            return None if not rows else Session(self, self._info(conn, rows[0]))  # type: ignore[arg-type]

    def list_sessions(self, *, limit: int | None = None, offset: int = 0) -> list[SessionInfo]:
        """Every session, oldest first (``limit`` of them after ``offset`` when given): one
        query for the rows, one for the parents and roots outside them.
        """
        with self.db.read() as conn:
            where, params = "ORDER BY id", cast(tuple[int, ...], ())
            if limit is not None or offset:
                where, params = (
                    "ORDER BY id LIMIT ? OFFSET ?",
                    (
                        MAX_SQL_INTEGER if limit is None else limit,
                        offset,
                    ),
                )
            with no_gc_pause():  # 30,000 rows and infos: acyclic, freed by reference counts
                rows = self._sessions(conn, where, params)
                return self.infos_of(conn, rows)

    def session_listing(
        self, *, limit: int | None = None, offset: int = 0
    ) -> list[tuple[str, str | None, str, int, int, str | None]]:
        """What ``session list`` shows of each session, oldest first: ``(uuid, name, status,
        turn, head length, parent uuid)`` — one query, those columns only (the table of 30,000
        sessions needs no :class:`SessionInfo` each).
        """
        sql = (
            "SELECT s.uuid, s.name, s.status, s.turn, s.head_length, p.uuid FROM sessions s "
            "LEFT JOIN sessions p ON p.id = s.parent_id ORDER BY s.id LIMIT ? OFFSET ?"
        )
        params = (MAX_SQL_INTEGER if limit is None else limit, offset)
        with self.db.read() as conn, no_gc_pause():
            rows = rsql.fetchall(conn, sql, params)
            return [(u, n, st, int(t), int(h), p) for u, n, st, t, h, p in rows]

    def infos_of(self, conn: Connection, rows: list[SessionRow]) -> list[SessionInfo]:
        """Session rows as SessionInfos, their parents' and roots' uuids read in one query."""
        names: dict[Any, Any] = {int(r.id): r.uuid for r in rows}
        wanted = sorted(
            {i for r in rows for i in (r.parent_id, r.root_id) if i is not None} - set(names)
        )
        for k in range(0, len(wanted), 500):
            chunk = wanted[k : k + 500]
            names.update(
                rsql.fetchall(
                    conn,
                    f"SELECT id, uuid FROM sessions WHERE id IN ({rsql.placeholders(len(chunk))})",
                    chunk,
                )
            )
        return [self._info(conn, r, names) for r in rows]

    def count_sessions(self) -> int:
        """How many sessions the archive holds."""
        with self.db.read() as conn:
            return int(rsql.fetchone(conn, "SELECT COUNT(*) FROM sessions")[0])

    def session_manifest(self, session_id: int) -> Any | None:
        """The manifest embedded in a session, or None."""
        with self.db.read() as conn:
            row = rsql.fetchone(
                conn, "SELECT manifest_blob_id FROM sessions WHERE id = ?", (session_id,)
            )
            mid = None if row is None else row[0]
            if mid is None:
                return None
            return self.archive.load_by_ids(conn, [int(mid)])[int(mid)][2]

    # ---------------------------------------------------------------- checkpoints
    def _ck(self, row: Any, uuid: str, digests: dict[int, Digest] | None = None) -> CheckpointInfo:
        digests = digests or {}
        return CheckpointInfo(
            id=int(row.id),
            session=uuid,
            seq=int(row.seq),
            turn=int(row.turn),
            label=row.label or default_label(int(row.turn)),
            trigger=row.trigger,
            view=View(row.segment_id, int(row.length)),
            abandoned=bool(row.abandoned),
            created_at=float(row.created_at),
            kernel_digest=digests.get(row.kernel_blob_id) if row.kernel_blob_id else None,
            wm_digest=digests.get(row.wm_blob_id) if row.wm_blob_id else None,
            covering_digest=None if row.covering_digest is None else bytes(row.covering_digest),
        )

    def _checkpoints(
        self, conn: Connection, where: str, params: tuple[Any, ...]
    ) -> list[CheckpointRow]:
        return [CheckpointRow(*r) for r in rsql.fetchall(conn, f"{_CHECKPOINTS} {where}", params)]

    def checkpoint_in(
        self, conn: Connection, checkpoint_id: int, info: SessionInfo
    ) -> CheckpointInfo:
        """A checkpoint of ``info``'s session re-read inside the caller's transaction.

        Raises:
            NotFoundError: the row is gone (retention or another process cut it).
        """
        rows = self._checkpoints(conn, "WHERE id = ? AND session_id = ?", (checkpoint_id, info.id))
        if not rows:
            raise NotFoundError(
                f"checkpoint {checkpoint_id} of session {info.uuid} no longer exists",
                hint="retention or another process removed it; `alpstore checkpoint list` "
                "shows the ones kept",
            )
        return self._ck(rows[0], info.uuid)

    def list_checkpoints(
        self, session_id: int, *, include_abandoned: bool = False, conn: Connection | None = None
    ) -> list[CheckpointInfo]:
        """A session's checkpoints by sequence (retained ones only unless asked)."""
        if conn is None:
            with self.db.read() as c:
                return self.list_checkpoints(
                    session_id, include_abandoned=include_abandoned, conn=c
                )
        found = rsql.fetchone(conn, "SELECT uuid FROM sessions WHERE id = ?", (session_id,))
        uuid = None if found is None else found[0]
        where: str
        params: tuple[Any, ...]
        where, params = "WHERE session_id = ?", (session_id,)
        if not include_abandoned:
            where, params = "WHERE session_id = ? AND abandoned = ?", (session_id, False)
        rows = self._checkpoints(conn, f"{where} ORDER BY seq", params)
        return [self._ck(r, str(uuid)) for r in rows]

    def recent_checkpoints(
        self, conn: Connection, info: SessionInfo, limit: int
    ) -> list[CheckpointInfo]:
        """A session's newest ``limit`` retained checkpoints, oldest first (O(limit))."""
        rows = self._checkpoints(
            conn,
            "WHERE session_id = ? AND abandoned = ? ORDER BY seq DESC LIMIT ?",
            (info.id, False, limit),
        )
        return [self._ck(r, info.uuid) for r in reversed(rows)]

    def count_retained(self, conn: Connection, session_id: int) -> int:
        """How many retained checkpoints a session has."""
        row = rsql.fetchone(
            conn,
            "SELECT COUNT(*) FROM checkpoints WHERE session_id = ? AND abandoned = ?",
            (session_id, False),
        )
        return int(row[0])

    def get_checkpoint(self, checkpoint_id: int) -> CheckpointInfo:
        """A checkpoint by its id.

        Raises:
            NotFoundError: no such checkpoint.
        """
        with self.db.read() as conn:
            found = rsql.fetchone(
                conn,
                f"SELECT s.uuid, c.{CHECKPOINT_COLUMNS.replace(', ', ', c.')} FROM checkpoints c "
                "JOIN sessions s ON s.id = c.session_id WHERE c.id = ?",
                (checkpoint_id,),
            )
            if found is None:
                raise NotFoundError(f"no checkpoint {checkpoint_id} in this archive")
            row = CheckpointRow(*found[1:])
            ids = [i for i in (row.kernel_blob_id, row.wm_blob_id) if i is not None]
            digests = {}
            if ids:
                digests = {int(r[0]): Digest(bytes(r[1])) for r in rows_by_id(conn, ids)}
            return self._ck(row, found[0], digests)

    def resolve_checkpoint(self, ref: str) -> CheckpointInfo:
        """Resolve ``ID``, ``SESSION@TURN`` (the latest checkpoint at that turn),
        ``SESSION@TURN.STEP`` (the STEP-th checkpoint recorded at that turn, cut ones
        counted: a LangGraph step), ``SESSION@latest`` or a LangGraph ``checkpoint_id``.

        Raises:
            NotFoundError: nothing matches.
        """
        ref = ref.strip()
        match = _CK_REF.match(ref)
        number = ref if is_number(ref) else match["at"] if match else ""
        if is_number(number) and (len(number) > 19 or int(number) > MAX_SQL_INTEGER):
            raise NotFoundError(f"checkpoint {ref[:60]}: no such checkpoint (number out of range)")
        if is_number(ref):
            return self.get_checkpoint(int(ref))
        if not match and _LG_CHECKPOINT_ID.match(ref.lower()):
            with self.db.read() as conn:
                found = rsql.fetchone(
                    conn,
                    "SELECT alp_checkpoint_id FROM lg_checkpoints WHERE checkpoint_id = ? "
                    "ORDER BY id DESC LIMIT 1",
                    (uuid.UUID(ref).bytes,),  # stored as a UUID's 16 bytes
                )
                if found is None:  # a step a turn row holds (0011)
                    alp = folded_alp_of(conn, uuid.UUID(ref).bytes)
                    found = None if alp is None else (alp,)
            if found is None:
                raise NotFoundError(f"checkpoint {ref!r}: no LangGraph checkpoint with that id")
            return self.get_checkpoint(int(found[0]))
        if not match:
            if ref.startswith("@"):
                raise NotFoundError(
                    f"checkpoint {ref!r}: name the session (SESSION{ref})",
                    hint="`debug diff` takes a bare @TURN or @latest as B, in A's session",
                )
            raise NotFoundError(
                f"checkpoint {ref!r}: expected an id, SESSION@TURN, SESSION@TURN.STEP, "
                "SESSION@latest or a LangGraph checkpoint_id"
            )
        session = self.get_session(match["session"])
        params: tuple[Any, ...]
        if match["step"] is not None:
            if match["at"] == "latest" or int(match["step"]) < 1:
                raise NotFoundError(
                    f"checkpoint {ref!r}: a step is SESSION@TURN.STEP, STEP counted from 1"
                )
            turn, step = int(match["at"]), int(match["step"])
            with self.db.read() as conn:
                found = rsql.fetchone(
                    conn,
                    "SELECT id FROM checkpoints WHERE session_id = ? AND turn = ? "
                    "ORDER BY seq LIMIT 1 OFFSET ?",
                    (session.id, turn, step - 1),
                )
            if found is None:
                raise NotFoundError(
                    f"session {session.uuid} has no step {step} at turn {turn}",
                    hint=f"`alpstore session log {match['session']}` lists the steps",
                )
            return self.get_checkpoint(int(found[0]))
        if match["at"] == "latest":
            where, params = "abandoned = ?", (False,)
            missing = f"session {session.uuid} has no checkpoint"
        else:  # the retained one at that turn, else the newest cut one
            where, params = "turn = ?", (int(match["at"]),)
            missing = f"session {session.uuid} has no checkpoint at turn {match['at']}"
        with self.db.read() as conn:
            found = rsql.fetchone(
                conn,
                f"SELECT id FROM checkpoints WHERE session_id = ? AND {where} "
                "ORDER BY abandoned, seq DESC LIMIT 1",
                (session.id, *params),
            )
        if found is None:
            raise NotFoundError(missing)
        return self.get_checkpoint(int(found[0]))


def _names_the_rest(uuid: str, rows: list[Any]) -> bool:
    """Every other row's id is ``uuid`` and a dotted suffix (a transcript's subagent sessions
    are ``<session>.agent-<id>``): a prefix of ``uuid`` means the session, not its children.
    """
    return all(str(r.uuid) == uuid or str(r.uuid).startswith(uuid + ".") for r in rows)
