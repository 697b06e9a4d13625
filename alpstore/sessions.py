"""Sessions: a live covering head, append, fold, checkpoint, backtrack, fork and resume.

The head of a session is an immutable :class:`~alpstore.views.View`; every operation produces a new
view in O(delta) and moves the head to it (a pointer swap), so snapshots share structure and a
backtrack never copies messages (AR-5).
"""

from __future__ import annotations

import json
import time
import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from sqlalchemy import Connection, and_, func, select

from alpstore.archive.sql import encode
from alpstore.codec import Digest, digest_hex
from alpstore.db import raw as rsql
from alpstore.db.engine import inserted_id
from alpstore.db.tables import (
    BLOB_MANIFEST,
    BLOB_MESSAGE,
    BLOB_STATE,
    backtracks,
    checkpoints,
)
from alpstore.errors import IntegrityError, NotFoundError, SessionStateError, UsageError
from alpstore.importers import is_user_turn
from alpstore.views import View, cover_add, cover_bytes, cover_int, cover_sub

if TYPE_CHECKING:
    from alpstore.store import Store

Status = Literal["created", "active", "paused", "checkpointing", "terminated"]
RETENTION_MODES = ("all", "single", "last_n")
DEFAULT_RETENTION_N = 5


@dataclass(frozen=True)
class Retention:
    """How many of a session's checkpoints to keep (CK-8: only this session's are pruned)."""

    mode: str = "all"
    n: int = DEFAULT_RETENTION_N

    def __post_init__(self) -> None:
        if self.mode not in RETENTION_MODES:
            raise UsageError(f"retention mode {self.mode!r}: expected all, single or last_n")
        if type(self.n) is not int or self.n < 1:
            raise UsageError(f"retention n {self.n!r}: expected a positive integer")


class Entry(NamedTuple):
    """One entry of a covering list: a message (leaf) or a summary covering other entries.

    A named tuple rather than a dataclass: hydration builds one per entry, and tuples are
    several times cheaper to make.
    """

    digest: Digest
    kind: Literal["message", "summary"]
    value: Any
    covers: tuple[Digest, ...] = ()

    @property
    def hex(self) -> str:
        """The digest in hex."""
        return digest_hex(self.digest)


@dataclass(frozen=True)
class CheckpointInfo:
    """A shallow checkpoint: a pointer to a view plus kernel and working-memory blobs."""

    id: int
    session: str
    seq: int
    turn: int
    label: str
    trigger: str | None
    view: View
    abandoned: bool
    created_at: float
    kernel_digest: Digest | None = None
    wm_digest: Digest | None = None
    covering_digest: bytes | None = None
    """The digest of the covering list (None: not recorded); see ``alpstore.views.cover_term``."""

    @property
    def length(self) -> int:
        """How many entries the covering list holds."""
        return self.view.length

    @property
    def archive_view_id(self) -> str:
        """The view this checkpoint points at."""
        return self.view.archive_view_id


@dataclass(frozen=True)
class SessionInfo:
    """A session row, as the CLI and users see it."""

    id: int
    uuid: str
    name: str | None
    status: Status
    turn: int
    head: View
    parent: str | None
    root: str
    source_checkpoint: int | None
    backtrack_count: int
    retention: Retention
    created_at: float
    updated_at: float
    origin: dict[str, Any] | None

    @property
    def head_length(self) -> int:
        """Entries in the live covering list."""
        return self.head.length


@dataclass(frozen=True)
class BacktrackInfo:
    """What a backtrack did."""

    id: int
    session: str
    steps: int
    from_checkpoint: int | None
    to_checkpoint: CheckpointInfo
    steering_digest: Digest | None
    automatic: bool


def _evolve(info: SessionInfo, **changes: Any) -> SessionInfo:
    """A copy of ``info`` with ``changes`` (the hot-path twin of ``dataclasses.replace``)."""
    new = object.__new__(SessionInfo)
    new.__dict__.update(info.__dict__)
    new.__dict__.update(changes)
    return new


def default_label(turn: int) -> str:
    """mas-lab's default checkpoint label: ``turn-NNNN``."""
    return f"turn-{turn:04d}"


def steering_message(text: str) -> dict[str, Any]:
    """The steering text injected as the next user turn (``/steer <text>``)."""
    return {"role": "user", "content": f"/steer {text}"}


def count_user_turns(messages: Sequence[Any]) -> int:
    """How many user turns a batch of messages starts (tool results fed back do not count)."""
    return sum(1 for m in messages if is_user_turn(m))


class Session:
    """A handle on one session of a store; every method is one transaction."""

    def __init__(self, store: Store, info: SessionInfo) -> None:
        self.store = store
        self._info = info
        self._cover = 0
        """The covering digest of ``_info.head``: meaningful only inside a write transaction,
        after ``_write`` read it from the session row."""
        self._cover_view: View | None = None
        """The view ``_cover`` is the digest of (None until this handle's first write)."""

    # ---------------------------------------------------------------- reading
    @property
    def uuid(self) -> str:
        """The session's public id."""
        return self._info.uuid

    @property
    def id(self) -> int:
        """The session's row id inside this archive."""
        return self._info.id

    @property
    def head(self) -> View:
        """The live covering head (an immutable view)."""
        return self._info.head

    def written_cover(self, view: View) -> int | None:
        """The covering digest of ``view`` if it is the head this handle last wrote or read
        inside a write transaction, else None. Views never change once written (see
        ARCHITECTURE "Caches and GC"), so the digest stays true for that view even after
        another writer moves the head.
        """
        return self._cover if self._cover_view == view else None

    def info(self, *, refresh: bool = True) -> SessionInfo:
        """The session's current row."""
        if refresh:
            self._info = self.store.session_info(self.id)
        return self._info

    def history(self) -> list[Entry]:
        """The live covering list, hydrated."""
        return self.store.hydrate_view(self.info().head)

    def checkpoints(self, *, include_abandoned: bool = False) -> list[CheckpointInfo]:
        """This session's checkpoints, oldest first."""
        return self.store.list_checkpoints(self.id, include_abandoned=include_abandoned)

    def manifest(self) -> dict[str, Any] | None:
        """The embedded Agent manifest, if any."""
        return self.store.session_manifest(self.id)

    # ---------------------------------------------------------------- writing
    def _write(self, conn: Connection) -> SessionInfo:
        """Re-read the mutable part of the session row inside a write transaction.

        On PostgreSQL the row stays locked until commit, so two writers of one session take
        turns instead of both moving the head from the same old value.
        """
        row = rsql.fetchone(
            conn,
            "SELECT status, head_segment_id, head_length, turn, "
            "backtrack_count, head_digest FROM sessions WHERE id = ? FOR NO KEY UPDATE",
            (self.id,),
        )
        if row is None:
            raise NotFoundError(f"session {self.uuid} no longer exists")
        info = _evolve(
            self._info,
            status=row[0],
            head=View(row[1], int(row[2])),
            turn=int(row[3]),
            backtrack_count=int(row[4]),
        )
        self._info = info
        cover = cover_int(row[5])
        self._cover = self.store.views.cover(conn, info.head) if cover is None else cover
        self._cover_view = info.head
        return info

    def _require_writable(self, info: SessionInfo, what: str) -> None:
        if info.status == "terminated":
            raise SessionStateError(f"session {info.uuid} is terminated; cannot {what}")
        if info.status == "paused":
            raise SessionStateError(
                f"session {info.uuid} is paused; cannot {what}",
                hint="`alpstore session status SESSION active` unpauses it",
            )

    def _move_head(
        self,
        conn: Connection,
        info: SessionInfo,
        view: View,
        *,
        turn: int,
        cover: int,
        status: Status | None = None,
        backtrack_count: int | None = None,
    ) -> None:
        rsql.execute(
            conn,
            "UPDATE sessions SET head_segment_id = ?, head_length = ?, turn = ?, "
            "updated_at = ?, status = ?, backtrack_count = ?, head_digest = ? WHERE id = ?",
            (
                view.segment_id,
                view.length,
                turn,
                time.time(),
                status or info.status,
                info.backtrack_count if backtrack_count is None else backtrack_count,
                cover_bytes(cover),
                info.id,
            ),
        )
        self._cover = cover
        self._cover_view = view
        self._info = _evolve(
            info,
            head=view,
            turn=turn,
            status=status or info.status,
            backtrack_count=(info.backtrack_count if backtrack_count is None else backtrack_count),
        )

    def append(self, messages: Sequence[Any]) -> list[Digest]:
        """Append messages to the covering head (stored once each); returns their digests.

        Raises:
            SessionStateError: the session is paused or terminated.
            CanonicalJSONError: a message is not canonical JSON (nothing is stored).
        """
        return self._append(messages, keep=None, checkpoint=None)

    def truncate_and_append(self, keep: int, messages: Sequence[Any]) -> list[Digest]:
        """Cut the head to its first ``keep`` entries, then append ``messages`` (O(delta)).

        For callers whose history is rewritten rather than extended (edits, removals).

        Raises:
            UsageError: ``keep`` is not within the head.
        """
        return self._append(messages, keep=keep, checkpoint=None)

    def pop_last(self) -> Entry | None:
        """Remove the head's last entry and return it (None when the head is empty).

        One transaction that reads the entry after locking the session row, so the entry
        removed is the one returned even while other writers append (O(1) in history length).
        """
        store = self.store

        def attempt() -> Entry | None:
            with store.db.atomic() as conn:
                info = self._write(conn)
                self._require_writable(info, "remove an entry")
                head = info.head
                if head.length == 0:
                    return None
                keep = head.length - 1
                rows = store.views.read_blob_rows(conn, head, keep)
                (raw,) = store.archive.decode_rows(conn, rows, verify=False)
                digest = bytes(rows[0][1])
                self._move_head(
                    conn,
                    info,
                    store.views.cut(conn, head, keep),
                    turn=info.turn,
                    cover=cover_sub(self._cover, keep, [digest]),
                )
                (entry,) = store.entries_of([(Digest(digest), int(rows[0][2]), raw)])
                return entry

        return store.db.retrying(attempt, what=f"remove the last entry of session {self.uuid}")

    def commit_turn(
        self,
        messages: Sequence[Any],
        *,
        kernel: Any | None = None,
        working_memory: Any | None = None,
        label: str | None = None,
        trigger: str | None = "every_turn",
    ) -> CheckpointInfo:
        """Append a turn's messages and checkpoint the result, in one transaction."""
        box: list[CheckpointInfo] = []
        self._append(messages, keep=None, checkpoint=(kernel, working_memory, label, trigger, box))
        return box[0]

    def _append(
        self,
        messages: Sequence[Any],
        *,
        keep: int | None,
        checkpoint: tuple[Any, Any, str | None, str | None, list[CheckpointInfo]] | None,
    ) -> list[Digest]:
        items = [encode(m, BLOB_MESSAGE) for m in messages]
        store = self.store

        def attempt() -> CheckpointInfo | None:
            with store.db.atomic() as conn:
                info = self._write(conn)
                self._require_writable(info, "append")
                head, cover = info.head, self._cover
                if keep is not None:
                    if not 0 <= keep <= head.length:
                        raise UsageError(f"keep {keep}: the head holds {head.length} entries")
                    if keep < head.length:  # O(dropped): the cut entries leave the digest
                        cover = cover_sub(cover, keep, store.views.read_digests(conn, head, keep))
                    head = store.views.cut(conn, head, keep)
                ids = store.archive.store_encoded(conn, items)
                view = store.views.append(conn, head, info.id, ids)
                self._move_head(
                    conn,
                    info,
                    view,
                    turn=info.turn + count_user_turns(messages),
                    cover=cover_add(cover, head.length, [d for d, _, _ in items]),
                    status="active" if info.status == "created" else None,
                )
                if checkpoint is None:
                    return None
                kernel, wm, label, trigger, _ = checkpoint
                return self._checkpoint_in(conn, self._info, kernel, wm, label, trigger, None)

        # a busy, deadlocked or serialization-failed transaction is re-run whole (bounded)
        ck = store.db.retrying(attempt, what=f"append to session {self.uuid}")
        store.archive.after_commit()
        if ck is not None and checkpoint is not None:
            checkpoint[4].append(ck)
            self.store.emit_checkpoint(ck)
        return [d for d, _, _ in items]

    def append_summary(self, text: str, covers: Sequence[Digest]) -> Digest:
        """Append a summary node covering ``covers`` (already in the archive)."""
        store = self.store
        with store.db.atomic() as conn:
            info = self._write(conn)
            self._require_writable(info, "append")
            sid, digest = store.archive.store_summary(conn, text, covers)
            view = store.views.append(conn, info.head, info.id, [sid])
            cover = cover_add(self._cover, info.head.length, [digest])
            self._move_head(conn, info, view, turn=info.turn, cover=cover)
        return digest

    def fold(self, start: int, end: int, summary: str) -> Digest:
        """Replace entries ``[start, end)`` of the head with a summary node covering them.

        The folded entries stay in the archive; the summary's digest commits to them.

        Raises:
            UsageError: an empty or out-of-range span.
        """
        store = self.store
        with store.db.atomic() as conn:
            info = self._write(conn)
            self._require_writable(info, "fold")
            if not 0 <= start < end <= info.head.length:
                raise UsageError(
                    f"fold {start}..{end}: not a non-empty span of the covering list "
                    f"(0..{info.head.length})"
                )
            ids = store.views.read_ids(conn, info.head)
            covered = ids[start:end]
            digests = store.digests_for_ids(conn, covered)
            sid, digest = store.archive.store_summary(conn, summary, digests)
            view = store.views.splice(conn, info.head, info.id, start, end, [sid])
            old = store.views.read_digests(conn, info.head, start)
            cover = cover_sub(self._cover, start, old)
            cover = cover_add(cover, start, [digest, *old[end - start :]])
            self._move_head(conn, info, view, turn=info.turn, cover=cover)
            store.record_event(
                conn,
                info.id,
                "fold",
                None,
                {"start": start, "end": end, "summary": digest_hex(digest), "covered": end - start},
            )
        store.emit("fold", session=info.uuid, start=start, end=end, summary=digest_hex(digest))
        return digest

    def checkpoint(
        self,
        *,
        kernel: Any | None = None,
        working_memory: Any | None = None,
        label: str | None = None,
        trigger: str | None = "manual",
        turn: int | None = None,
    ) -> CheckpointInfo:
        """Record a shallow checkpoint of the head (a row; O(1) in history length).

        Raises:
            SessionStateError: the session is terminated.
        """

        def attempt() -> CheckpointInfo:
            with self.store.db.atomic() as conn:
                info = self._write(conn)
                return self._checkpoint_in(conn, info, kernel, working_memory, label, trigger, turn)

        ck = self.store.db.retrying(attempt, what=f"checkpoint of session {self.uuid}")
        self.store.emit_checkpoint(ck)
        return ck

    def _checkpoint_in(
        self,
        conn: Connection,
        info: SessionInfo,
        kernel: Any | None,
        working_memory: Any | None,
        label: str | None,
        trigger: str | None,
        turn: int | None,
    ) -> CheckpointInfo:
        if info.status == "terminated":
            raise SessionStateError(f"session {info.uuid} is terminated; cannot checkpoint")
        store = self.store
        state = [encode(v, BLOB_STATE) for v in (kernel, working_memory) if v is not None]
        state_ids = store.archive.store_encoded(conn, state)
        k_id = state_ids.pop(0) if kernel is not None else None
        w_id = state_ids.pop(0) if working_memory is not None else None
        ck = store.insert_checkpoint(
            conn,
            info,
            info.head,
            turn=info.turn if turn is None else turn,
            label=label,
            trigger=trigger,
            kernel_id=k_id,
            wm_id=w_id,
            cover=self._cover,
        )
        if turn is not None and turn != info.turn:
            self._move_head(conn, info, info.head, turn=turn, cover=self._cover)
        if info.retention.mode != "all":
            store.apply_retention(conn, info)
        return ck

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
            UsageError: ``steps`` < 1.
            SessionStateError: fewer than ``steps`` + 1 retained checkpoints, or terminated.
        """
        if type(steps) is not int or steps < 1:
            raise UsageError(f"backtrack steps {steps!r}: expected an integer ≥ 1")
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
        return self.store.fork_checkpoint(checkpoint, session_id=session_id, name=name)

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
        """Record a decision (e.g. of error recovery) visible in SQL and in `session log`."""
        with self.store.db.atomic() as conn:
            self.store.record_event(conn, self.id, kind, checkpoint_id, detail)
        self.store.emit(kind, session=self.uuid, **detail)


def new_session_uuid() -> str:
    """A fresh session id (UUID4 text)."""
    return str(uuidlib.uuid4())


def manifest_blob(conn: Connection, store: Store, manifest: Any | None) -> int | None:
    """Store a manifest blob and return its id (None for no manifest)."""
    if manifest is None:
        return None
    (mid,) = store.archive.store_encoded(conn, [encode(manifest, BLOB_MANIFEST)])
    return mid


def next_seq(conn: Connection, session_id: int) -> int:
    """The next checkpoint ordinal of a session."""
    current = conn.execute(
        select(func.max(checkpoints.c.seq)).where(checkpoints.c.session_id == session_id)
    ).scalar()
    return int(current or 0) + 1


def event_detail(detail: dict[str, Any]) -> str:
    """Serialise an event's detail for the ``session_events`` table."""
    return json.dumps(detail, ensure_ascii=False, sort_keys=True)


def active_checkpoint_filter(session_id: int) -> Any:
    """SQL filter: a session's retained (not abandoned) checkpoints."""
    return and_(checkpoints.c.session_id == session_id, checkpoints.c.abandoned.is_(False))
