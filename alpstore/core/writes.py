"""A store's writes under a session: checkpoints, retention, forks, events, policy binding.

Each runs inside the caller's transaction (or opens one); SQLAlchemy is imported inside the
writing functions only, so a store opened for reading never loads it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from alpstore.core.naming import StoreNaming, acceptable_id
from alpstore.db import raw as rsql
from alpstore.db.members import pg_id_by_digest
from alpstore.errors import IntegrityError, NotFoundError, UsageError
from alpstore.rules.ids import text_problem
from alpstore.rules.limits import check_event_kind
from alpstore.rules.names import normal_name
from alpstore.sessions import (
    CheckpointInfo,
    Retention,
    Session,
    SessionInfo,
    default_label,
    event_detail,
)
from alpstore.views import View, cover_bytes, cover_int

if TYPE_CHECKING:
    from sqlalchemy import Connection

INSERT_CHECKPOINT = (
    "INSERT INTO checkpoints (session_id, seq, turn, segment_id, length, kernel_blob_id, "
    "wm_blob_id, label, trigger, abandoned, created_at, covering_digest) VALUES (?, "
    "(SELECT COALESCE(MAX(seq), 0) + 1 FROM checkpoints WHERE session_id = ?), "
    "?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id, seq"
)


INSERT_CHECKPOINT_STATE = (
    "INSERT INTO checkpoints (session_id, seq, turn, segment_id, length, kernel_blob_id, "
    "wm_blob_id, label, trigger, abandoned, created_at, covering_digest) VALUES (?, "
    "(SELECT COALESCE(MAX(seq), 0) + 1 FROM checkpoints WHERE session_id = ?), "
    "?, ?, ?, {kernel}, {wm}, ?, ?, ?, ?, ?) RETURNING id, seq"
)
""":data:`INSERT_CHECKPOINT` with the state blobs as ``NULL`` or :data:`STATE_BY_DIGEST`."""

CHECKPOINT_READ_BACK = (
    "SELECT id, seq FROM checkpoints WHERE session_id = ? AND created_at = ? "
    "AND covering_digest = ? ORDER BY id DESC"
)
"""A checkpoint whose row's reply was lost with its COMMIT's, found by what it was written
with."""

STATE_BY_DIGEST = (
    f"(SELECT coalesce({pg_id_by_digest('x.d')}, alp_missing_blob(x.d)) "
    "FROM (SELECT CAST(? AS BYTEA) AS d) x)"
)
"""PostgreSQL: a checkpoint's kernel or working-memory blob named by digest, stored earlier in
the same transaction: its id (loose or packed, 0010), or the statement fails (a foreign key
violation, the turn rolled back) should it somehow be missing."""


CHECKPOINT_ROWS = 100
"""Rows per multi-row checkpoint insert of :meth:`StoreWrites.insert_turn_checkpoints`
(12 parameters a row: well within either driver's limit)."""

INSERT_CHECKPOINTS = (
    "INSERT INTO checkpoints (session_id, seq, turn, segment_id, length, kernel_blob_id, "
    "wm_blob_id, label, trigger, abandoned, created_at, covering_digest) VALUES"
)


class StoreWrites(StoreNaming):
    """Checkpoints inserted, abandoned and pruned; forks; session events; a bound policy."""

    def bind_policy(self, session_id: int, record: dict[str, Any], retention: Retention) -> None:
        """Record a session's checkpoint policy (in ``origin``) and apply its retention."""
        from sqlalchemy import select, update

        from alpstore.db.tables import sessions

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
        stored_label = _stored_label(label, turn)
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

    def insert_checkpoint_later(
        self,
        conn: Connection,
        info: SessionInfo,
        view: View,
        *,
        turn: int,
        label: str | None,
        trigger: str | None,
        kernel_digest: bytes | None,
        wm_digest: bytes | None,
        cover: int,
        wrap: Callable[[str, list[Any]], tuple[str, list[Any]]] | None = None,
    ) -> Callable[[], CheckpointInfo]:
        """:meth:`insert_checkpoint` whose row rides the transaction's next round trip on
        PostgreSQL (its COMMIT's, for a turn), the state blobs named by digest (stored earlier
        in the transaction); returns what gives the checkpoint once the transaction (or its
        savepoint) ended — its id and sequence number come back with that round trip.

        ``wrap``: makes the statement (and its parameters) one that does more with the new
        row — ``WITH ck AS (insert) …`` — and still returns its id and sequence number first.
        """
        stored_label = _stored_label(label, turn)
        now = time.time()
        digest = cover_bytes(cover)
        params: list[Any] = [info.id, info.id, turn, view.segment_id, view.length]
        state = []
        for blob in (kernel_digest, wm_digest):
            state.append("NULL" if blob is None else STATE_BY_DIGEST)
            if blob is not None:
                params.append(blob)
        sql = INSERT_CHECKPOINT_STATE.format(kernel=state[0], wm=state[1])
        params.extend((stored_label, trigger, False, now, digest))
        if wrap is not None:
            sql, params = wrap(sql, params)
        box: list[tuple[Any, ...]] = []
        rsql.execute(conn, sql, params, defer=True, then=box.extend)

        def checkpoint() -> CheckpointInfo:
            if not box:  # the COMMIT's reply was lost and its transaction read back: stored
                with self.db.read() as again:
                    found = rsql.fetchone(again, CHECKPOINT_READ_BACK, (info.id, now, digest))
                if found is None:
                    raise IntegrityError(f"checkpoint of session {info.uuid}: no row came back")
                box.append(tuple(found))
            ck_id, seq = box[0][:2]
            return CheckpointInfo(
                int(ck_id),
                info.uuid,
                int(seq),
                turn,
                label or default_label(turn),
                trigger,
                view,
                False,
                now,
                covering_digest=digest,
            )

        return checkpoint

    def insert_turn_checkpoints(
        self,
        conn: Connection,
        info: SessionInfo,
        turns: Sequence[tuple[View, int, int]],
        *,
        trigger: str | None,
    ) -> list[CheckpointInfo]:
        """Insert one default-labelled checkpoint per ``(view, turn, covering digest)``, in
        order, inside the caller's transaction, which holds the session alone (an import
        writing many turns at once: ``Session.write_turns``): one ``seq`` lookup, then
        multi-row inserts of :data:`CHECKPOINT_ROWS`, instead of a statement per turn.
        """
        if not turns:
            return []
        (last,) = rsql.fetchone(
            conn, "SELECT COALESCE(MAX(seq), 0) FROM checkpoints WHERE session_id = ?", (info.id,)
        )
        now = time.time()
        out: list[CheckpointInfo] = []
        seq = int(last)
        for start in range(0, len(turns), CHECKPOINT_ROWS):
            part = turns[start : start + CHECKPOINT_ROWS]
            params: list[Any] = []
            for view, turn, cover in part:
                seq += 1
                params += (info.id, seq, turn, view.segment_id, view.length, None, None, None)
                params += (trigger, False, now, cover_bytes(cover))
            values = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"] * len(part))
            sql = f"{INSERT_CHECKPOINTS} {values} RETURNING id, seq"
            ids = {int(s): int(i) for i, s in rsql.fetchall(conn, sql, params)}
            first = seq - len(part) + 1
            for k, (view, turn, cover) in enumerate(part):
                out.append(
                    CheckpointInfo(
                        ids[first + k],
                        info.uuid,
                        first + k,
                        turn,
                        default_label(turn),
                        trigger,
                        view,
                        False,
                        now,
                        covering_digest=cover_bytes(cover),
                    )
                )
        return out

    def abandon_after(self, conn: Connection, session_id: int, seq: int) -> int:
        """Mark a session's checkpoints after ``seq`` as no longer retained (kept for debug)."""
        cur = rsql.execute(  # plain SQL, as every write an import may make
            conn,
            "UPDATE checkpoints SET abandoned = ? WHERE session_id = ? AND seq > ? "
            "AND abandoned = ?",
            (True, session_id, seq, False),
        )
        return int(cur.rowcount)

    def apply_retention(self, conn: Connection, info: SessionInfo) -> list[int]:
        """Prune this session's oldest retained checkpoints beyond its retention (never a fork
        source, never another session's). Returns the pruned ids.
        """
        keep = {"all": None, "single": 1, "last_n": info.retention.n}[info.retention.mode]
        if keep is None:
            return []
        rows = [  # plain SQL: an import into a session that prunes writes on the driver alone
            int(r[0])
            for r in rsql.fetchall(
                conn,
                "SELECT id FROM checkpoints WHERE session_id = ? AND abandoned = ? "
                "ORDER BY seq DESC LIMIT -1 OFFSET ?"
                if rsql.dialect_of(conn) == "sqlite"
                else "SELECT id FROM checkpoints WHERE session_id = ? AND abandoned = ? "
                "ORDER BY seq DESC OFFSET ?",
                (info.id, False, keep),
            )
        ]
        if not rows:
            return []
        sources = {
            r[0]
            for r in rsql.fetchall(
                conn,
                "SELECT source_checkpoint_id FROM sessions WHERE source_checkpoint_id IN "
                f"({rsql.placeholders(len(rows))})",
                rows,
            )
        }
        doomed = [r for r in rows if r not in sources]
        if doomed:
            rsql.execute(
                conn,
                f"DELETE FROM checkpoints WHERE id IN ({rsql.placeholders(len(doomed))}) "
                "AND session_id = ?",
                [*doomed, info.id],
            )
        return doomed

    def fork_checkpoint(
        self, checkpoint: CheckpointInfo, *, session_id: str | None = None, name: str | None = None
    ) -> Session:
        """Create a session from ``checkpoint``: same history, parent and source recorded, and a
        first checkpoint (trigger ``fork``) at the fork point.
        """
        from sqlalchemy import select

        from alpstore.db.tables import checkpoints, sessions

        uuid = acceptable_id(session_id)
        name = normal_name(name)  # one spelling of each name (NFC)
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
                {
                    "uuid": uuid,
                    "name": name,
                    "parent_id": parent.id,
                    "source_checkpoint_id": checkpoint.id,
                    "root_id": parent.root_id or parent.id,
                    "origin": None,
                    "manifest_blob_id": parent.manifest_blob_id,
                    "status": "active",
                    "head_segment_id": src.segment_id,
                    "head_length": src.length,
                    "turn": src.turn,
                    "backtrack_count": 0,
                    "retention_mode": parent.retention_mode,
                    "retention_n": parent.retention_n,
                    "created_at": now,
                    "updated_at": now,
                    "head_digest": cover_bytes(cover),
                },
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

    def record_event(
        self,
        conn: Connection,
        session_id: int,
        kind: str,
        checkpoint_id: int | None,
        detail: dict[str, Any],
    ) -> None:
        """Insert a row into ``session_events`` inside the caller's transaction.

        Raises:
            UsageError: ``kind`` longer than the column
                (:func:`alpstore.rules.limits.check_event_kind`).
        """
        check_event_kind(kind)
        rsql.execute(  # plain SQL: a transcript's import writes on the sqlite3 driver alone
            conn,
            "INSERT INTO session_events (session_id, checkpoint_id, kind, detail, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (session_id, checkpoint_id, kind, event_detail(detail), time.time()),
        )


def _stored_label(label: str | None, turn: int) -> str | None:
    """The label a checkpoint row keeps (None for the default one).

    Raises:
        UsageError: a label an export would refuse.
    """
    stored = None if label in (None, default_label(turn)) else label
    if stored is not None:
        problem = text_problem(stored)
        if problem is not None:  # what an export of it would refuse: refused now
            raise UsageError(
                f"checkpoint label {problem}",
                hint="labels are printable text, at most 200 characters",
            )
    return stored
