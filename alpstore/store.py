"""``Store``: the facade the CLI and users call — an archive, its views and its sessions."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, delete, func, select, update
from sqlalchemy import exc as sa_exc

from alpstore.archive.sql import SqlArchive, encode, parse_documents
from alpstore.codec import Digest, parse_json
from alpstore.db import raw as rsql
from alpstore.db.engine import Database, inserted_id
from alpstore.db.migrate import require_current_schema
from alpstore.db.opening import open_database
from alpstore.db.tables import (
    BLOB_STATE,
    BLOB_SUMMARY,
    backtracks,
    blobs,
    checkpoints,
    session_events,
    sessions,
)
from alpstore.errors import (
    DatabaseError,
    IntegrityError,
    NotFoundError,
    SessionNameTakenError,
    UsageError,
)
from alpstore.events import EventLog
from alpstore.portable.ids import session_id_problem, shown, text_problem
from alpstore.portable.secrets import require_no_secrets
from alpstore.sessions import (
    CheckpointInfo,
    Entry,
    Retention,
    Session,
    SessionInfo,
    default_label,
    event_detail,
    manifest_blob,
    new_session_uuid,
)
from alpstore.views import EMPTY_COVER, View, ViewStore, cover_bytes, cover_int, cover_of

if TYPE_CHECKING:
    from alpstore.live import LiveSession

INSERT_CHECKPOINT = (
    "INSERT INTO checkpoints (session_id, seq, turn, segment_id, length, kernel_blob_id, "
    "wm_blob_id, label, trigger, abandoned, created_at, covering_digest) VALUES (?, "
    "(SELECT COALESCE(MAX(seq), 0) + 1 FROM checkpoints WHERE session_id = ?), "
    "?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id, seq"
)

NAME_LIMIT = 200
"""Longest session name (the column's width)."""

NAME_RACE_ATTEMPTS = 5
"""How often ``Store.session_named`` re-reads after losing a creation race before giving up."""


def _acceptable_id(session_id: str | None) -> str:
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


_CK_REF = re.compile(r"^(?P<session>[^@]+)@(?P<at>latest|\d+)$")
MAX_SQL_INTEGER = 2**63 - 1
"""The largest id or turn a row can hold (SQLite and PostgreSQL BIGINT)."""


class Store:
    """An open archive: blobs, views and sessions, plus the run root's event log."""

    def __init__(self, db: Database, root: Path) -> None:
        self.db = db
        self.root = root.absolute()  # the event log and policy folders stay put on a chdir
        root = self.root
        self.archive = SqlArchive(db)
        self.views = ViewStore()
        db.on_rollback(self.views.forget)  # segment ids of a failed write may be reused
        self.events = EventLog(root)
        db.on_write_end(self.events.settle)

    @classmethod
    def open(
        cls, root: Path | str, *, url: str | None = None, create: bool = True, migrate: bool = True
    ) -> Store:
        """Open the archive of run root ``root`` (or at ``url``), creating and migrating it.

        ``migrate=False`` (with ``create=False``: how a reading command opens it) never changes
        the schema: an archive of an older revision is refused with a pointer to ``db upgrade``.

        Raises:
            StorageError, NotFoundError, SchemaVersionError, CorruptArchiveError, UsageError.
        """
        root = Path(root)
        db = open_database(root=root, url=url, create=create, migrate=migrate)
        if not migrate:
            try:
                require_current_schema(db)
            except BaseException:
                db.close()
                raise
        return cls(db, root)

    def close(self) -> None:
        """Close the database and the event log (a background dictionary training of this
        store finishes first).
        """
        self.archive.close()
        self.events.close()
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def emit(self, kind: str, **fields: Any) -> None:
        """Append an event to ``traces/events.jsonl``; inside a write transaction, once it
        commits (a rolled-back import, Ctrl-C, leaves no event for what never happened).
        """
        line = self.events.line(kind, **fields)
        if self.db.in_write():
            self.events.hold(line)  # written by events.settle when the transaction ends
        else:
            self.events.write(line)

    def emit_checkpoint(self, ck: CheckpointInfo) -> None:
        """Append the ``checkpoint`` event of a committed checkpoint."""
        self.emit(
            "checkpoint",
            session=ck.session,
            checkpoint=ck.id,
            turn=ck.turn,
            label=ck.label,
            trigger=ck.trigger,
            view=ck.archive_view_id,
        )

    # ---------------------------------------------------------------- sessions
    def create_session(
        self,
        *,
        session_id: str | None = None,
        name: str | None = None,
        manifest: Any | None = None,
        retention: Retention | None = None,
        origin: dict[str, Any] | None = None,
    ) -> Session:
        """Create an empty session.

        Raises:
            UsageError: the session id is taken (an id or another session's name) or not an
                acceptable id (letters, digits, ".", "_", "-"; a UUID).
            SessionNameTakenError: another session has this name (names are unique).
        """
        uuid = _acceptable_id(session_id)
        retention = retention or Retention()
        if manifest is not None:  # CK-11: a credential never enters the archive
            require_no_secrets(manifest, what="manifest")
        now = time.time()
        with self.db.atomic() as conn:
            self._require_free_id(conn, uuid)
            self._require_free_name(conn, name)
            mid = manifest_blob(conn, self, manifest)
            sid = self._insert_session(
                conn,
                name,
                sessions.insert().values(
                    uuid=uuid,
                    name=name,
                    parent_id=None,
                    source_checkpoint_id=None,
                    root_id=None,
                    origin=json.dumps(origin, sort_keys=True) if origin else None,
                    manifest_blob_id=mid,
                    status="created",
                    head_segment_id=None,
                    head_length=0,
                    turn=0,
                    backtrack_count=0,
                    retention_mode=retention.mode,
                    retention_n=retention.n,
                    created_at=now,
                    updated_at=now,
                    head_digest=EMPTY_COVER,
                ),
            )
            conn.execute(update(sessions).where(sessions.c.id == sid).values(root_id=sid))
            info = self.session_info(sid, conn=conn)
        self.emit("session", session=uuid, name=name)
        return Session(self, info)

    def open_session(
        self,
        session: str | None = None,
        *,
        manifest: Any | None = None,
        overlays: Sequence[str] = (),
        checkpoint_dir: Path | str | None = None,
        workspace_config: Path | str | None = None,
        name: str | None = None,
        cwd: Path | str | None = None,
    ) -> LiveSession:
        """A running agent's session: the policy it runs under plus its in-process context.

        With ``manifest`` (a mapping, or the path of a YAML/JSON file) a session is opened
        under that manifest's ``spec.checkpoint`` (overlays, workspace config and the CK-6
        directory applied; ``auto_resume_latest`` resumes the newest matching file) and the
        resolved policy is recorded with it. With ``session`` alone, an existing session is
        opened under the policy recorded with it (none: manual checkpoints only).

        Raises:
            PolicyError, SecretError, NotFoundError, UsageError: nothing is stored.
        """
        from alpstore.live import open_live_session

        return open_live_session(
            self,
            session,
            manifest=manifest,
            overlays=overlays,
            checkpoint_dir=Path(checkpoint_dir) if checkpoint_dir is not None else None,
            workspace_config=Path(workspace_config) if workspace_config is not None else None,
            name=name,
            cwd=Path(cwd) if cwd is not None else None,
        )

    def bind_policy(self, session_id: int, record: dict[str, Any], retention: Retention) -> None:
        """Record a session's checkpoint policy (in ``origin``) and apply its retention."""
        with self.db.atomic() as conn:
            current = conn.execute(
                select(sessions.c.origin).where(sessions.c.id == session_id)
            ).scalar()
            origin = json.loads(current) if current else {}
            origin["policy"] = record
            conn.execute(
                update(sessions)
                .where(sessions.c.id == session_id)
                .values(
                    origin=json.dumps(origin, sort_keys=True),
                    retention_mode=retention.mode,
                    retention_n=retention.n,
                )
            )

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

    def find_session_named(self, name: str) -> Session | None:
        """The session called exactly ``name`` (names are unique), or None."""
        with self.db.read() as conn:
            row = conn.execute(select(sessions).where(sessions.c.name == name)).first()
            return None if row is None else Session(self, self._info(conn, row))

    def available_name(self, conn: Connection, name: str) -> str:
        """``name`` when no session has it, else ``<name> #2``, ``#3``… (cut to fit 200
        characters): for sessions named after something else (a LangGraph thread) whose natural
        name a deleted or truncated one already holds.
        """
        candidate, n = name[:NAME_LIMIT], 1
        while conn.execute(select(sessions.c.id).where(sessions.c.name == candidate)).first():
            n += 1
            suffix = f" #{n}"
            candidate = name[: NAME_LIMIT - len(suffix)] + suffix
        return candidate

    def rename_session(self, conn: Connection, session_id: int, name: str | None) -> None:
        """Give a session a new name (None: no name) inside the caller's transaction.

        Raises:
            SessionNameTakenError: another session has this name.
        """
        self._require_free_name(conn, name)
        conn.execute(update(sessions).where(sessions.c.id == session_id).values(name=name))

    def _require_free_id(self, conn: Connection, uuid: str) -> None:
        """Raise ``UsageError`` when ``uuid`` is a session's id, or another session's name
        (lookups try ids first: the new id would hide that session's name).
        """
        if conn.execute(select(sessions.c.id).where(sessions.c.uuid == uuid)).first():
            raise UsageError(f"session {uuid} already exists in this archive")
        if conn.execute(select(sessions.c.id).where(sessions.c.name == uuid)).first():
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
        if conn.execute(select(sessions.c.id).where(sessions.c.uuid == name)).first():
            # lookups try ids first: the name would find the other session
            raise UsageError(f"the name {name!r} is the id of another session")
        owner = conn.execute(select(sessions.c.uuid).where(sessions.c.name == name)).scalar()
        if owner is not None:
            raise _name_taken(name, str(owner))

    def _insert_session(self, conn: Connection, name: str | None, insert: Any) -> int:
        """Run a sessions INSERT; a concurrent writer's row with the same name (seen by the
        unique index only, on PostgreSQL) becomes ``SessionNameTakenError``.
        """
        try:
            return inserted_id(conn.execute(insert))
        except sa_exc.IntegrityError as err:
            text = str(err.orig)
            if name is None or not ("uq_sessions_name" in text or "sessions.name" in text):
                raise
            raise _name_taken(name, None) from err

    def session_info(self, session_id: int, *, conn: Connection | None = None) -> SessionInfo:
        """Read a session row by its internal id.

        Raises:
            NotFoundError: no such session.
        """
        if conn is None:
            with self.db.read() as c:
                return self.session_info(session_id, conn=c)
        row = conn.execute(select(sessions).where(sessions.c.id == session_id)).first()
        if row is None:
            raise NotFoundError(f"no session with id {session_id}")
        return self._info(conn, row)

    def _info(self, conn: Connection, row: Any) -> SessionInfo:
        names = {}
        wanted = {i for i in (row.parent_id, row.root_id) if i is not None}
        if wanted:
            names = dict(
                conn.execute(
                    select(sessions.c.id, sessions.c.uuid).where(sessions.c.id.in_(wanted))
                ).all()
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
            row = conn.execute(select(sessions).where(sessions.c.uuid == ref)).first()
            if row is None:
                rows = conn.execute(select(sessions).where(sessions.c.name == ref)).all()
                if not rows and len(ref) >= 4:
                    rows = conn.execute(
                        select(sessions).where(sessions.c.uuid.startswith(ref, autoescape=True))
                    ).all()
                if len(rows) > 1:
                    raise NotFoundError(
                        f"session {ref!r} is ambiguous ({len(rows)} match)",
                        hint="give more of the id",
                    )
                row = rows[0] if rows else None
            if row is None:
                raise NotFoundError(
                    f"no session {ref!r} in this archive", hint="`alpstore session list` shows them"
                )
            return Session(self, self._info(conn, row))

    def list_sessions(self) -> list[SessionInfo]:
        """Every session, oldest first."""
        with self.db.read() as conn:
            rows = conn.execute(select(sessions).order_by(sessions.c.id)).all()
            return [self._info(conn, r) for r in rows]

    def session_manifest(self, session_id: int) -> Any | None:
        """The manifest embedded in a session, or None."""
        with self.db.read() as conn:
            mid = conn.execute(
                select(sessions.c.manifest_blob_id).where(sessions.c.id == session_id)
            ).scalar()
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

    def checkpoint_in(
        self, conn: Connection, checkpoint_id: int, info: SessionInfo
    ) -> CheckpointInfo:
        """A checkpoint of ``info``'s session re-read inside the caller's transaction.

        Raises:
            NotFoundError: the row is gone (retention or another process cut it).
        """
        row = conn.execute(
            select(checkpoints).where(
                checkpoints.c.id == checkpoint_id, checkpoints.c.session_id == info.id
            )
        ).first()
        if row is None:
            raise NotFoundError(
                f"checkpoint {checkpoint_id} of session {info.uuid} no longer exists",
                hint="retention or another process removed it; `alpstore checkpoint list` "
                "shows the ones kept",
            )
        return self._ck(row, info.uuid)

    def list_checkpoints(
        self, session_id: int, *, include_abandoned: bool = False, conn: Connection | None = None
    ) -> list[CheckpointInfo]:
        """A session's checkpoints by sequence (retained ones only unless asked)."""
        if conn is None:
            with self.db.read() as c:
                return self.list_checkpoints(
                    session_id, include_abandoned=include_abandoned, conn=c
                )
        uuid = conn.execute(select(sessions.c.uuid).where(sessions.c.id == session_id)).scalar()
        query = select(checkpoints).where(checkpoints.c.session_id == session_id)
        if not include_abandoned:
            query = query.where(checkpoints.c.abandoned.is_(False))
        rows = conn.execute(query.order_by(checkpoints.c.seq)).all()
        return [self._ck(r, str(uuid)) for r in rows]

    def recent_checkpoints(
        self, conn: Connection, info: SessionInfo, limit: int
    ) -> list[CheckpointInfo]:
        """A session's newest ``limit`` retained checkpoints, oldest first (O(limit))."""
        rows = conn.execute(
            select(checkpoints)
            .where(checkpoints.c.session_id == info.id, checkpoints.c.abandoned.is_(False))
            .order_by(checkpoints.c.seq.desc())
            .limit(limit)
        ).all()
        return [self._ck(r, info.uuid) for r in reversed(rows)]

    def count_retained(self, conn: Connection, session_id: int) -> int:
        """How many retained checkpoints a session has."""
        return int(
            conn.execute(
                select(func.count())
                .select_from(checkpoints)
                .where(checkpoints.c.session_id == session_id, checkpoints.c.abandoned.is_(False))
            ).scalar_one()
        )

    def get_checkpoint(self, checkpoint_id: int) -> CheckpointInfo:
        """A checkpoint by its id.

        Raises:
            NotFoundError: no such checkpoint.
        """
        with self.db.read() as conn:
            row = conn.execute(
                select(checkpoints, sessions.c.uuid.label("session_uuid"))
                .join(sessions, sessions.c.id == checkpoints.c.session_id)
                .where(checkpoints.c.id == checkpoint_id)
            ).first()
            if row is None:
                raise NotFoundError(f"no checkpoint {checkpoint_id} in this archive")
            ids = [i for i in (row.kernel_blob_id, row.wm_blob_id) if i is not None]
            digests = {}
            if ids:
                digests = {
                    int(i): Digest(bytes(d))
                    for i, d in conn.execute(
                        select(blobs.c.id, blobs.c.digest).where(blobs.c.id.in_(ids))
                    )
                }
            return self._ck(row, row.session_uuid, digests)

    def resolve_checkpoint(self, ref: str) -> CheckpointInfo:
        """Resolve ``ID``, ``SESSION@TURN`` (the latest checkpoint at that turn) or
        ``SESSION@latest``.

        Raises:
            NotFoundError: nothing matches.
        """
        ref = ref.strip()
        match = _CK_REF.match(ref)
        number = ref if ref.isdigit() else match["at"] if match else ""
        if number.isdigit() and (len(number) > 19 or int(number) > MAX_SQL_INTEGER):
            raise NotFoundError(f"checkpoint {ref[:60]}: no such checkpoint (number out of range)")
        if ref.isdigit():
            return self.get_checkpoint(int(ref))
        if not match:
            raise NotFoundError(
                f"checkpoint {ref!r}: expected an id, SESSION@TURN or SESSION@latest"
            )
        session = self.get_session(match["session"])
        query = select(checkpoints.c.id).where(checkpoints.c.session_id == session.id)
        if match["at"] == "latest":
            query = query.where(checkpoints.c.abandoned.is_(False))
            missing = f"session {session.uuid} has no checkpoint"
        else:  # the retained one at that turn, else the newest cut one
            query = query.where(checkpoints.c.turn == int(match["at"]))
            missing = f"session {session.uuid} has no checkpoint at turn {match['at']}"
        with self.db.read() as conn:
            found = conn.execute(
                query.order_by(checkpoints.c.abandoned, checkpoints.c.seq.desc()).limit(1)
            ).scalar()
        if found is None:
            raise NotFoundError(missing)
        return self.get_checkpoint(int(found))

    def insert_checkpoint(
        self,
        conn: Connection,
        info: SessionInfo,
        view: View,
        *,
        turn: int,
        label: str | None,
        trigger: str | None,
        kernel_id: int | None,
        wm_id: int | None,
        cover: int | None = None,
    ) -> CheckpointInfo:
        """Insert a checkpoint row for ``info`` inside the caller's transaction.

        ``cover``: the view's covering digest when the caller keeps it (a session's head);
        otherwise it is computed from the view's entries (O(length)).
        """
        stored_label = None if label in (None, default_label(turn)) else label
        if stored_label is not None:
            problem = text_problem(stored_label)
            if problem is not None:  # what an export of it would refuse: refused now
                raise UsageError(
                    f"checkpoint label {problem}",
                    hint="labels are printable text, at most 200 characters",
                )
        now = time.time()
        if cover is None:
            cover = self.views.cover(conn, view)
        digest = cover_bytes(cover)
        ck_id, seq = rsql.fetchone(
            conn,
            INSERT_CHECKPOINT,
            (
                info.id,
                info.id,
                turn,
                view.segment_id,
                view.length,
                kernel_id,
                wm_id,
                stored_label,
                trigger,
                False,
                now,
                digest,
            ),
        )
        return CheckpointInfo(
            ck_id,
            info.uuid,
            seq,
            turn,
            label or default_label(turn),
            trigger,
            view,
            False,
            now,
            covering_digest=digest,
        )

    def abandon_after(self, conn: Connection, session_id: int, seq: int) -> int:
        """Mark a session's checkpoints after ``seq`` as no longer retained (kept for debug)."""
        result = conn.execute(
            update(checkpoints)
            .where(
                checkpoints.c.session_id == session_id,
                checkpoints.c.seq > seq,
                checkpoints.c.abandoned.is_(False),
            )
            .values(abandoned=True)
        )
        return int(result.rowcount)

    def apply_retention(self, conn: Connection, info: SessionInfo) -> list[int]:
        """Prune this session's oldest retained checkpoints beyond its retention (never a fork
        source, never another session's). Returns the pruned ids.
        """
        keep = {"all": None, "single": 1, "last_n": info.retention.n}[info.retention.mode]
        if keep is None:
            return []
        rows = (
            conn.execute(
                select(checkpoints.c.id)
                .where(checkpoints.c.session_id == info.id, checkpoints.c.abandoned.is_(False))
                .order_by(checkpoints.c.seq.desc())
                .offset(keep)
            )
            .scalars()
            .all()
        )
        if not rows:
            return []
        sources = set(
            conn.execute(
                select(sessions.c.source_checkpoint_id).where(
                    sessions.c.source_checkpoint_id.in_(rows)
                )
            )
            .scalars()
            .all()
        )
        doomed = [int(r) for r in rows if r not in sources]
        if doomed:
            conn.execute(
                delete(checkpoints).where(
                    checkpoints.c.id.in_(doomed), checkpoints.c.session_id == info.id
                )
            )
        return doomed

    def fork_checkpoint(
        self, checkpoint: CheckpointInfo, *, session_id: str | None = None, name: str | None = None
    ) -> Session:
        """Create a session from ``checkpoint``: same history, parent and source recorded, and a
        first checkpoint (trigger ``fork``) at the fork point.
        """
        uuid = _acceptable_id(session_id)
        now = time.time()
        with self.db.atomic() as conn:
            self._require_free_id(conn, uuid)
            parent = conn.execute(
                select(sessions)
                .join(checkpoints, checkpoints.c.session_id == sessions.c.id)
                .where(checkpoints.c.id == checkpoint.id)
            ).first()
            src = conn.execute(select(checkpoints).where(checkpoints.c.id == checkpoint.id)).first()
            if parent is None or src is None:
                raise NotFoundError(f"no checkpoint {checkpoint.id} in this archive")
            cover = cover_int(src.covering_digest)
            if cover is None:  # not recorded (cannot happen after revision 0004's upgrade)
                cover = self.views.cover(conn, View(src.segment_id, int(src.length)))
            self._require_free_name(conn, name)
            sid = self._insert_session(
                conn,
                name,
                sessions.insert().values(
                    uuid=uuid,
                    name=name,
                    parent_id=parent.id,
                    source_checkpoint_id=checkpoint.id,
                    root_id=parent.root_id or parent.id,
                    origin=None,
                    manifest_blob_id=parent.manifest_blob_id,
                    status="active",
                    head_segment_id=src.segment_id,
                    head_length=src.length,
                    turn=src.turn,
                    backtrack_count=0,
                    retention_mode=parent.retention_mode,
                    retention_n=parent.retention_n,
                    created_at=now,
                    updated_at=now,
                    head_digest=cover_bytes(cover),
                ),
            )
            info = self.session_info(sid, conn=conn)
            self.insert_checkpoint(
                conn,
                info,
                info.head,
                turn=int(src.turn),
                label=None,
                trigger="fork",
                kernel_id=src.kernel_blob_id,
                wm_id=src.wm_blob_id,
                cover=cover,
            )
            self.record_event(conn, int(parent.id), "fork", checkpoint.id, {"child": uuid})
        self.emit(
            "fork", session=uuid, parent=parent.uuid, checkpoint=checkpoint.id, turn=checkpoint.turn
        )
        return Session(self, info)

    # ---------------------------------------------------------------- hydration
    def hydrate_view(self, view: View, *, verify: bool = False) -> list[Entry]:
        """The entries of a view, in order: one joined range scan per segment, one JSON parse
        per batch.
        """
        return self.entries_of(self.hydrate_raw(view, verify=verify))

    @staticmethod
    def entries_of(raws: list[tuple[Digest, int, bytes]]) -> list[Entry]:
        """Entries from ``(digest, kind, canonical JSON bytes)`` triples (one JSON parse per
        batch).
        """
        values = parse_documents([(d, raw) for d, _, raw in raws])
        out: list[Entry] = []
        for (digest, kind, _), value in zip(raws, values, strict=True):
            if kind == BLOB_SUMMARY:
                covers = tuple(Digest(bytes.fromhex(h)) for h in value.get("covers", []))
                out.append(Entry(digest, "summary", value, covers))
            else:
                out.append(Entry(digest, "message", value))
        return out

    def hydrate_raw(self, view: View, *, verify: bool = False) -> list[tuple[Digest, int, bytes]]:
        """The entries of a view as ``(digest, kind, canonical JSON bytes)``, unparsed.

        What a deep export or a streaming reader needs: no JSON parse, no objects per entry.
        """
        if view.length == 0:
            return []
        with self.db.read() as conn:
            return self._hydrate_raw(conn, view, verify=verify)

    def _hydrate_raw(
        self, conn: Connection, view: View, *, verify: bool
    ) -> list[tuple[Digest, int, bytes]]:
        rows = self.views.read_blob_rows(conn, view) if view.length else []
        raws = self.archive.decode_rows(conn, rows, verify=verify)
        return [(Digest(bytes(r[1])), r[2], raw) for r, raw in zip(rows, raws, strict=True)]

    def hydrate(self, checkpoint: CheckpointInfo, *, verify: bool = False) -> list[Entry]:
        """The covering list a checkpoint points at, hydrated.

        The checkpoint row is re-read in the same snapshot: a checkpoint retention or another
        process removed is reported, never read through a view whose entries may be gone.
        ``verify``: every blob re-hashed, and the list checked against the checkpoint's
        covering digest (a swapped or reordered entry is named).

        Raises:
            NotFoundError: the checkpoint no longer exists.
            IntegrityError: damaged content, or (``verify``) a list that does not match.
        """
        with self.db.read() as conn:
            row = rsql.fetchone(
                conn,
                "SELECT segment_id, length, covering_digest FROM checkpoints WHERE id = ?",
                (checkpoint.id,),
            )
            if row is None:
                raise NotFoundError(f"no checkpoint {checkpoint.id} in this archive")
            view = View(row[0], int(row[1]))
            raws = self._hydrate_raw(conn, view, verify=verify)
        recorded = None if row[2] is None else bytes(row[2])
        if verify and recorded is not None and cover_of([d for d, _, _ in raws]) != recorded:
            raise IntegrityError(
                f"checkpoint {checkpoint.id}: its covering list does not match its recorded "
                "digest (an entry was swapped, lost or reordered)",
                hint="`alpstore archive verify` names every checkpoint affected",
            )
        return self.entries_of(raws)

    def expand(self, entry: Entry) -> list[Entry]:
        """The entries a summary covers (one level), hydrated."""
        if entry.kind != "summary":
            return [entry]
        with self.db.read() as conn:
            ids = self.archive.ids_for(conn, list(entry.covers))
            loaded = self.archive.load_by_ids(conn, ids.values())
        out = []
        for d in entry.covers:
            digest, kind, value = loaded[ids[d]]
            covers = (
                tuple(Digest(bytes.fromhex(h)) for h in value.get("covers", []))
                if (kind == BLOB_SUMMARY)
                else ()
            )
            out.append(
                Entry(digest, "summary" if kind == BLOB_SUMMARY else "message", value, covers)
            )
        return out

    def checkpoint_state(self, checkpoint: CheckpointInfo) -> tuple[Any | None, Any | None]:
        """The kernel and working-memory documents stored with a checkpoint."""
        with self.db.read() as conn:
            row = conn.execute(
                select(checkpoints.c.kernel_blob_id, checkpoints.c.wm_blob_id).where(
                    checkpoints.c.id == checkpoint.id
                )
            ).first()
            if row is None:
                raise NotFoundError(f"no checkpoint {checkpoint.id} in this archive")
            ids = [int(i) for i in row if i is not None]
            loaded = self.archive.load_by_ids(conn, ids)
        kernel = loaded[row[0]][2] if row[0] is not None else None
        wm = loaded[row[1]][2] if row[1] is not None else None
        return kernel, wm

    def digests_for_ids(self, conn: Connection, ids: Sequence[int]) -> list[Digest]:
        """The digests of blob ids, in order."""
        found: dict[int, Digest] = {}
        unique = list(dict.fromkeys(ids))
        for start in range(0, len(unique), 500):
            part = unique[start : start + 500]
            for i, d in conn.execute(
                select(blobs.c.id, blobs.c.digest).where(blobs.c.id.in_(part))
            ):
                found[int(i)] = Digest(bytes(d))
        return [found[i] for i in ids]

    def session_backtracks(self, session_id: int) -> list[dict[str, Any]]:
        """A session's backtracks, oldest first, with their steering text."""
        store = self
        with store.db.read() as conn:
            rows = conn.execute(
                select(backtracks, blobs.c.digest)
                .outerjoin(blobs, blobs.c.id == backtracks.c.steering_blob_id)
                .where(backtracks.c.session_id == session_id)
                .order_by(backtracks.c.id)
            ).all()
            out = []
            for r in rows:
                steering = None
                if r.steering_blob_id is not None:
                    msg = store.archive.load_by_ids(conn, [int(r.steering_blob_id)])
                    steering = msg[int(r.steering_blob_id)][2].get("content")
                out.append(
                    {
                        "backtrack": int(r.id),
                        "steps": int(r.steps),
                        "from_checkpoint": r.from_checkpoint_id,
                        "to_checkpoint": r.to_checkpoint_id,
                        "automatic": bool(r.automatic),
                        "error_signature": r.error_signature,
                        "steering": steering,
                        "at": float(r.created_at),
                    }
                )
        return out

    # ---------------------------------------------------------------- events
    def record_event(
        self,
        conn: Connection,
        session_id: int,
        kind: str,
        checkpoint_id: int | None,
        detail: dict[str, Any],
    ) -> None:
        """Insert a row into ``session_events`` inside the caller's transaction."""
        conn.execute(
            session_events.insert().values(
                session_id=session_id,
                checkpoint_id=checkpoint_id,
                kind=kind,
                detail=event_detail(detail),
                created_at=time.time(),
            )
        )

    def session_events(self, session_id: int) -> list[dict[str, Any]]:
        """A session's recorded events, oldest first."""
        with self.db.read() as conn:
            rows = conn.execute(
                select(session_events)
                .where(session_events.c.session_id == session_id)
                .order_by(session_events.c.id)
            ).all()
        return [
            {
                "kind": r.kind,
                "checkpoint": r.checkpoint_id,
                "at": r.created_at,
                "detail": parse_json(r.detail, where="event") if r.detail else {},
            }
            for r in rows
        ]

    def put_state(self, value: Any) -> Digest:
        """Store a kernel/working-memory document; return its digest."""
        return self.archive.put(value, BLOB_STATE)

    def count_sessions(self) -> int:
        """How many sessions the archive holds."""
        with self.db.read() as conn:
            return int(conn.execute(select(func.count()).select_from(sessions)).scalar_one())


__all__ = ["Store", "encode"]


def checkpoint_deltas(store: Store, cks: list[CheckpointInfo]) -> dict[int, tuple[int, int]]:
    """For each checkpoint, ``(entries, stored bytes)`` its view adds over the previous one."""
    from alpstore.views import clip, common_prefix

    out: dict[int, tuple[int, int]] = {}
    sql = (
        "SELECT COUNT(*), COALESCE(SUM(LENGTH(b.payload)), 0) FROM segment_entries e "
        "JOIN blobs b ON b.id = e.blob_id WHERE e.segment_id = ? AND e.position >= ? "
        "AND e.position < ?"
    )
    with store.db.read() as conn:
        previous: list[tuple[int, int, int]] = []
        for ck in cks:
            chain = store.views.chain(conn, ck.view)
            start = common_prefix(previous, chain)
            entries = total = 0
            for seg, lo, hi in clip(chain, start):
                n, size = rsql.fetchone(conn, sql, (seg, lo, hi))
                entries += int(n)
                total += int(size)
            out[ck.id] = (entries, total)
            previous = chain
    return out
