"""``Session``: a handle on one session of a store; every method is one transaction.

Beyond the head's writes (:mod:`alpstore.sessions.base`): backtrack, rewind, resume, fork and
the session's status and decisions.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from alpstore.archive.reading import encode
from alpstore.codec import Digest, digest_hex
from alpstore.db import raw as rsql
from alpstore.db.names import BLOB_MANIFEST, BLOB_MESSAGE
from alpstore.errors import IntegrityError, NotFoundError, SessionStateError, UsageError
from alpstore.rules.limits import check_error_signature, check_event_kind
from alpstore.sessions.base import SessionBase
from alpstore.sessions.records import (
    BacktrackInfo,
    CheckpointInfo,
    SessionInfo,
    Status,
    steering_message,
)
from alpstore.views import View, cover_add, cover_int

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from alpstore.archive.sql import SqlArchive


class Session(SessionBase):
    """A handle on one session of a store; every method is one transaction."""

    def backtrack(
        self,
        steps: int = 1,
        steering: str | None = None,
        *,
        automatic: bool = False,
        error_signature: str | None = None,
    ) -> BacktrackInfo:
        """Rewind ``steps`` checkpoints back from the latest retained one, cut the retained
        history back to it, and inject ``steering`` as the next user turn (``/steer …``).

        Raises:
            UsageError: ``steps`` < 1, or ``error_signature`` longer than 200 characters.
            SessionStateError: fewer than ``steps`` + 1 retained checkpoints, or terminated.
        """
        if type(steps) is not int or steps < 1:
            raise UsageError(f"backtrack steps {steps!r}: expected an integer ≥ 1")
        check_error_signature(error_signature)  # the column's width, on every backend
        store = self.store
        with store.db.atomic() as conn:
            info = self._write(conn)
            if info.status == "terminated":
                raise SessionStateError(f"session {info.uuid} is terminated; cannot backtrack")
            retained = store.recent_checkpoints(conn, info, steps + 1)
            if steps >= len(retained):
                total = store.count_retained(conn, info.id)
                raise SessionStateError(
                    f"session {info.uuid}: cannot backtrack {steps} step(s); only "
                    f"{total} checkpoint(s) retained (at most {max(total - 1, 0)})"
                )
            target = retained[-1 - steps]
            latest = retained[-1]
            store.abandon_after(conn, info.id, target.seq)
            view, turn = target.view, target.turn
            cover = cover_int(target.covering_digest)
            if cover is None:  # not recorded (cannot happen after revision 0004's upgrade)
                cover = store.views.cover(conn, view)
            steer_digest: Digest | None = None
            steer_id: int | None = None
            if steering is not None:
                view, cover, steer_id, steer_digest = self._steer(conn, info, view, cover, steering)
                turn += 1
            count = info.backtrack_count + (1 if automatic else 0)
            self._move_head(
                conn,
                info,
                view,
                turn=turn,
                cover=cover,
                backtrack_count=count,
                status="active" if info.status in ("created", "checkpointing") else None,
            )
            from alpstore.db.engine import inserted_id
            from alpstore.db.tables import backtracks

            bt_id = inserted_id(
                conn.execute(
                    backtracks.insert().values(
                        session_id=info.id,
                        from_checkpoint_id=latest.id,
                        to_checkpoint_id=target.id,
                        steps=steps,
                        steering_blob_id=steer_id,
                        automatic=automatic,
                        error_signature=error_signature,
                        created_at=time.time(),
                    )
                )
            )
        store.emit(
            "backtrack",
            session=info.uuid,
            steps=steps,
            to_checkpoint=target.id,
            to_turn=target.turn,
            automatic=automatic,
            steering=digest_hex(steer_digest) if steer_digest else None,
        )
        return BacktrackInfo(bt_id, info.uuid, steps, latest.id, target, steer_digest, automatic)

    def _steer(
        self, conn: Connection, info: SessionInfo, view: View, cover: int, steering: str
    ) -> tuple[View, int, int, Digest]:
        """Append the ``/steer`` message after a backtrack: ``(view, cover, blob id, digest)``."""
        store = self.store
        item = encode(steering_message(steering), BLOB_MESSAGE)
        (steer_id,) = store.archive.store_encoded(conn, [item])
        cover = cover_add(cover, view.length, [item[0]])
        return store.views.append(conn, view, info.id, [steer_id]), cover, steer_id, item[0]

    def rewind(
        self,
        view: View,
        turn: int,
        *,
        steering: str | None = None,
        keep_seq: int | None = None,
        expect_head: View | None = None,
        detail: dict[str, Any] | None = None,
        cover: int | None = None,
    ) -> View:
        """Move the head to ``view`` (a prefix this session wrote, e.g. the view of an
        in-process checkpoint that has no archive row) and inject ``steering``; one transaction.

        Checkpoints after ``keep_seq`` stop being retained. ``expect_head`` refuses the move when
        another writer moved the head since the caller last saw it. The move is recorded as a
        ``backtrack`` event (detail given by the caller). ``cover`` is the view's covering
        digest when the caller kept it (from :meth:`written_cover`); otherwise it is computed
        from the view's entries (O(length)).

        Raises:
            SessionStateError: terminated, or the head is not ``expect_head``.
            IntegrityError: ``view`` is no longer in the archive.
        """
        store = self.store
        with store.db.atomic() as conn:
            info = self._write(conn)
            if info.status == "terminated":
                raise SessionStateError(f"session {info.uuid} is terminated; cannot backtrack")
            if expect_head is not None and info.head != expect_head:
                raise SessionStateError(
                    f"session {info.uuid}: its head moved to {info.head.archive_view_id} "
                    f"(expected {expect_head.archive_view_id}); another writer changed it",
                    hint="reopen the session to continue from its current head",
                )
            if view.segment_id is not None:
                row = rsql.fetchone(
                    conn, "SELECT length FROM segments WHERE id = ?", (view.segment_id,)
                )
                if row is None or int(row[0]) < view.length:
                    raise IntegrityError(
                        f"session {info.uuid}: view {view.archive_view_id} is no longer in the "
                        "archive"
                    )
            if keep_seq is not None:
                store.abandon_after(conn, info.id, keep_seq)
            # The view has no checkpoint row to carry its digest: the caller's, or computed.
            if cover is None:
                cover = store.views.cover(conn, view)
            if steering is not None:
                view, cover, _, _ = self._steer(conn, info, view, cover, steering)
                turn += 1
            self._move_head(
                conn,
                info,
                view,
                turn=turn,
                cover=cover,
                status="active" if info.status in ("created", "checkpointing") else None,
            )
            store.record_event(conn, info.id, "backtrack", None, detail or {})
        store.emit("backtrack", session=info.uuid, view=view.archive_view_id, **(detail or {}))
        return view

    def resume(self, checkpoint: CheckpointInfo | None = None) -> CheckpointInfo:
        """Move the head back to ``checkpoint`` (default: the latest retained one) and make the
        session active; later checkpoints are kept but no longer retained.

        Raises:
            NotFoundError: the checkpoint is not this session's or there is none.
            SessionStateError: the session is terminated.
        """
        store = self.store
        with store.db.atomic() as conn:
            info = self._write(conn)
            if info.status == "terminated":
                raise SessionStateError(f"session {info.uuid} is terminated; cannot resume")
            if checkpoint is None:
                retained = store.recent_checkpoints(conn, info, 1)
                if not retained:
                    raise NotFoundError(f"session {info.uuid} has no checkpoint to resume")
                checkpoint = retained[-1]
            elif checkpoint.session != info.uuid:
                raise NotFoundError(
                    f"checkpoint {checkpoint.id} belongs to session {checkpoint.session}, "
                    f"not {info.uuid}",
                    hint="use fork to continue another session's history",
                )
            else:  # the row as it is now (retention may have cut it, `gc` its entries since)
                checkpoint = store.checkpoint_in(conn, checkpoint.id, info)
            cover = cover_int(checkpoint.covering_digest)
            if cover is None:  # not recorded (cannot happen after revision 0004's upgrade)
                cover = store.views.cover(conn, checkpoint.view)
            store.abandon_after(conn, info.id, checkpoint.seq)
            self._move_head(
                conn, info, checkpoint.view, turn=checkpoint.turn, cover=cover, status="active"
            )
            store.record_event(conn, info.id, "resume", checkpoint.id, {"turn": checkpoint.turn})
        store.emit("resume", session=info.uuid, checkpoint=checkpoint.id, turn=checkpoint.turn)
        return checkpoint

    def fork(
        self,
        checkpoint: CheckpointInfo | None = None,
        *,
        session_id: str | None = None,
        name: str | None = None,
    ) -> Session:
        """A new session whose history is this one's up to ``checkpoint`` (default: latest).

        The child shares structure with the parent but no mutable state: its appends branch a
        segment of its own.

        Raises:
            NotFoundError: no checkpoint to fork from.
        """
        if checkpoint is None:
            retained = self.checkpoints()
            if not retained:
                raise NotFoundError(f"session {self.uuid} has no checkpoint to fork from")
            checkpoint = retained[-1]
        child = self.store.fork_checkpoint(checkpoint, session_id=session_id, name=name)
        assert isinstance(child, Session)  # the store makes Session handles
        return child

    def set_status(self, status: Status) -> None:
        """Pause, reactivate or terminate the session.

        Raises:
            SessionStateError: a terminated session cannot change status.
        """
        with self.store.db.atomic() as conn:
            info = self._write(conn)
            if info.status == "terminated" and status != "terminated":
                raise SessionStateError(f"session {info.uuid} is terminated; cannot be resumed")
            self._move_head(conn, info, info.head, turn=info.turn, cover=self._cover, status=status)
            self.store.record_event(conn, info.id, "status", None, {"status": status})

    def record_decision(
        self, kind: str, detail: dict[str, Any], checkpoint_id: int | None = None
    ) -> None:
        """Record a decision (e.g. of error recovery) visible in SQL and in `session log`.

        Raises:
            UsageError: ``kind`` longer than 32 characters
                (:func:`~alpstore.rules.limits.check_event_kind`).
        """
        check_event_kind(kind)
        with self.store.db.atomic() as conn:
            self.store.record_event(conn, self.id, kind, checkpoint_id, detail)
        self.store.emit(kind, session=self.uuid, **detail)


def manifest_blob(conn: Connection, archive: SqlArchive, manifest: Any | None) -> int | None:
    """Store a manifest blob in ``archive`` and return its id (None for no manifest)."""
    if manifest is None:
        return None
    (mid,) = archive.store_encoded(conn, [encode(manifest, BLOB_MANIFEST)])
    return mid
