"""A session handle: its reads, and the writes that move its head (append, fold, checkpoint).

The head of a session is an immutable :class:`~alpstore.views.View`; every operation produces a new
view in O(delta) and moves the head to it (a pointer swap), so snapshots share structure and a
backtrack never copies messages (AR-5).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from alpstore.archive.reading import Encoded, encode
from alpstore.codec import Digest, digest_hex
from alpstore.db import raw as rsql
from alpstore.db.names import BLOB_MESSAGE, BLOB_STATE
from alpstore.errors import DatabaseError, NotFoundError, SessionStateError, UsageError
from alpstore.sessions.records import (
    CheckpointInfo,
    Entry,
    SessionInfo,
    Status,
    count_user_turns,
    evolve,
)
from alpstore.views import BLOBS_FIRST, OWN_TIP, View, cover_add, cover_bytes, cover_int, cover_sub

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from alpstore.sessions.host import SessionHost


MOVE_HEAD = (
    "UPDATE sessions SET head_segment_id = ?, head_length = ?, turn = ?, "
    "updated_at = ?, status = ?, backtrack_count = ?, head_digest = ? WHERE id = ?"
)


SESSION_ROW = (
    "SELECT status, head_segment_id, head_length, turn, "
    "backtrack_count, head_digest FROM sessions WHERE id = ? FOR NO KEY UPDATE"
)
"""The mutable part of a session's row, locked until the transaction ends."""

TIP_MOVED = "alpstore: the session's head moved since this handle's last write"
TIP_GUARD = (
    "WITH s AS (SELECT 1 FROM sessions WHERE id = ? AND status = ? AND head_segment_id = ? "
    "AND head_length = ? AND turn = ? AND backtrack_count = ? AND head_digest = ? "
    "FOR NO KEY UPDATE), g AS (SELECT 1 FROM segments WHERE id = ? AND session_id = ? "
    "AND length = ? AND NOT sealed FOR NO KEY UPDATE) "
    "SELECT CAST(CASE WHEN (SELECT count(*) FROM s) = 1 AND (SELECT count(*) FROM g) = 1 "
    "THEN '1' ELSE ? END AS INTEGER)"
)
"""PostgreSQL, a turn sent whole without reading first (``_begin_at_known_tip``): locks the
session's row and its tip segment's row (in ``SESSION_ROW`` / ``OWN_TIP``'s order) and fails
the transaction (a cast of :data:`TIP_MOVED`) unless both are as this handle last wrote them."""


class SessionBase:
    """A session handle's reads and its head's writes (append, fold, checkpoint)."""

    def __init__(self, store: SessionHost, info: SessionInfo) -> None:
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
    _deferring = False
    """:meth:`deferring_head` is running."""
    _unwritten: tuple[Any, ...] | None = None
    """...and the head's newest move since it began, not written yet."""

    @contextmanager
    def deferring_head(self, conn: Connection) -> Iterator[None]:
        """Inside ``conn``'s transaction, which created this session and so holds it alone (an
        import): the session row is written once, when the block ends, instead of at every
        move of the head. PostgreSQL keeps a version of a row per update until the transaction
        ends (no pruning of its own versions): a 400-turn import left 400 of them, 180 KB for
        one row. An error leaves the row unwritten; the transaction is then rolled back.
        """
        self._deferring, self._unwritten = True, None
        try:
            yield
            if self._unwritten is not None:
                rsql.execute(conn, MOVE_HEAD, self._unwritten)
        finally:
            self._deferring, self._unwritten = False, None

    def _write(self, conn: Connection) -> SessionInfo:
        """Re-read the mutable part of the session row inside a write transaction.

        On PostgreSQL the row stays locked until commit, so two writers of one session take
        turns instead of both moving the head from the same old value. While the head's
        moves are deferred (:meth:`deferring_head`) the row is older than this handle.
        """
        self._tip_known = False  # a write other than a turn's: the next turn reads the row
        if self._unwritten is not None:
            return self._info
        return self._take_row(conn, rsql.fetchone(conn, SESSION_ROW, (self.id,)))

    _tip_known = False
    """PostgreSQL: this handle's last write grew its head at the unsealed tip of the session's
    own segment, and ``_info`` / ``_cover`` are what it wrote: the next turn may name them
    instead of reading them (:meth:`_begin_at_known_tip`)."""

    def _begin_at_known_tip(self, conn: Connection, info: SessionInfo, cover: int) -> bool:
        """Open ``conn``'s transaction with ``TIP_GUARD`` queued (``raw.begin_later``): the
        turn's statements and its COMMIT then go in one wait. False when it cannot be.
        """
        head = info.head
        if head.segment_id is None:
            return False
        guard = (
            info.id,
            info.status,
            head.segment_id,
            head.length,
            info.turn,
            info.backtrack_count,
            cover_bytes(cover),
            head.segment_id,
            info.id,
            head.length,
            TIP_MOVED,
        )
        if not rsql.begin_later(conn, [(BLOBS_FIRST, ()), (TIP_GUARD, guard)]):
            return False
        self._info, self._cover, self._cover_view = info, cover, head
        return True

    def _write_at_tip(self, conn: Connection) -> tuple[SessionInfo, bool]:
        """PostgreSQL: :meth:`_write`, and whether the head is at the unsealed tip of a
        segment this session owns, that segment's row locked too (``OWN_TIP``): the head
        then grows in place by :meth:`ViewStore.grow_later`. Both in one round trip.
        """
        if self._unwritten is not None:
            return self._info, False
        _, rows, tip = rsql.fetch_together(
            conn, [(BLOBS_FIRST, ()), (SESSION_ROW, (self.id,)), (OWN_TIP, (self.id, self.id))]
        )
        info = self._take_row(conn, rows[0] if rows else None)
        at_tip = bool(tip) and int(tip[0][0]) == info.head.length and not tip[0][1]
        return info, at_tip and info.head.segment_id is not None

    def _take_row(self, conn: Connection, row: Any) -> SessionInfo:
        """The handle brought up to the session row ``row`` (:data:`SESSION_ROW`'s)."""
        if row is None:
            raise NotFoundError(f"session {self.uuid} no longer exists")
        info = evolve(
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
        row = (
            view.segment_id,
            view.length,
            turn,
            time.time(),
            status or info.status,
            info.backtrack_count if backtrack_count is None else backtrack_count,
            cover_bytes(cover),
            info.id,
        )
        if self._deferring:
            self._unwritten = row
        else:
            rsql.execute(conn, MOVE_HEAD, row, defer=True)  # PostgreSQL: rides the next trip
        self._cover = cover
        self._cover_view = view
        self._info = evolve(
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
        # PostgreSQL: the head as this handle left it at its own tip, sent unread (and checked)
        known = (self._info, self._cover) if self._tip_known and self._unwritten is None else None
        self._tip_known = False
        grown = [False]

        def attempt() -> CheckpointInfo | None:
            later: Callable[[], CheckpointInfo] | None = None
            grown[0] = False
            with store.db.atomic() as conn:
                if store.db.is_postgresql and keep is None and items:
                    if known is not None and self._begin_at_known_tip(conn, *known):
                        info, at_tip = known[0], True
                    else:
                        info, at_tip = self._write_at_tip(conn)
                else:
                    info, at_tip = self._write(conn), False
                self._require_writable(info, "append")
                head, cover = info.head, self._cover
                if keep is not None:
                    if not 0 <= keep <= head.length:
                        raise UsageError(f"keep {keep}: the head holds {head.length} entries")
                    if keep < head.length:  # O(dropped): the cut entries leave the digest
                        cover = cover_sub(cover, keep, store.views.read_digests(conn, head, keep))
                    head = store.views.cut(conn, head, keep)
                if at_tip:  # PostgreSQL: all of it rides the COMMIT's round trip
                    store.archive.store_encoded_later(conn, items)
                    view = store.views.grow_later(conn, head, [d for d, _, _ in items])
                else:
                    ids = store.archive.store_encoded(conn, items)
                    view = store.views.append(conn, head, info.id, ids)
                # a non-empty new head is the tip of a segment of this session's own
                grown[0] = bool(items) and view.segment_id is not None
                grown[0] = grown[0] and info.retention.mode == "all"
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
                if not at_tip or info.retention.mode != "all":
                    return self._checkpoint_in(conn, self._info, kernel, wm, label, trigger, None)
                later = self._checkpoint_later(conn, self._info, kernel, wm, label, trigger)
            return later()  # its row came back with the COMMIT (or the savepoint's release)

        def attempt_or_read() -> CheckpointInfo | None:
            nonlocal known
            try:
                return attempt()
            except DatabaseError as err:
                if known is None or TIP_MOVED not in str(err):
                    raise
                known = None  # another writer moved the head: read it, lock, then write
                return attempt()

        # a busy, deadlocked or serialization-failed transaction is re-run whole (bounded)
        ck = store.db.retrying(attempt_or_read, what=f"append to session {self.uuid}")
        self._tip_known = grown[0]
        store.archive.after_commit()
        if ck is not None and checkpoint is not None:
            checkpoint[4].append(ck)
            self.store.emit_checkpoint(ck)
        return [d for d, _, _ in items]

    def write_turns(
        self,
        conn: Connection,
        pieces: Sequence[tuple[Sequence[Any], Sequence[Encoded], bool]],
        *,
        trigger: str | None = "every_turn",
        known: dict[bytes, int] | None = None,
    ) -> None:
        """Inside ``conn``'s transaction, which holds this session alone (an import, under
        :meth:`deferring_head`): append each piece's messages (``(messages, their encoded
        items, ends_turn)``) and checkpoint after each piece that ends a turn, as
        :meth:`commit_turn` and :meth:`append` would one by one, but in a few statements for
        all of them: one lookup and insert of the blobs, one extension of the segment, one
        entries insert, multi-row checkpoint inserts. A session with a retention other than
        ``all`` takes the one-by-one path (its pruning runs per checkpoint). ``known``: ids of
        digests stored or looked up earlier in this transaction (``store_encoded_counted``'s).
        """
        store = self.store
        info = self._write(conn)
        self._require_writable(info, "append")
        if not pieces:
            return
        if info.retention.mode != "all":
            for messages, _, ends in pieces:
                if ends:
                    self.commit_turn(messages, trigger=trigger)
                else:
                    self.append(messages)
            return
        items = [item for _, encoded, _ in pieces for item in encoded]
        ids, _ = store.archive.store_encoded_counted(conn, items, known=known)
        head, cover, turn = info.head, self._cover, info.turn
        view = store.views.append(conn, head, info.id, ids)
        length, ends_at = head.length, []
        for messages, encoded, ends in pieces:
            cover = cover_add(cover, length, [d for d, _, _ in encoded])
            length += len(encoded)
            turn += count_user_turns(messages)
            if ends:
                ends_at.append((View(view.segment_id, length), turn, cover))
        status: Status | None = "active" if info.status == "created" else None
        self._move_head(conn, info, view, turn=turn, cover=cover, status=status)
        cks = store.insert_turn_checkpoints(conn, self._info, ends_at, trigger=trigger)
        store.archive.after_commit()
        for ck in cks:
            store.emit_checkpoint(ck)

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

    def _checkpoint_later(
        self,
        conn: Connection,
        info: SessionInfo,
        kernel: Any | None,
        working_memory: Any | None,
        label: str | None,
        trigger: str | None,
    ) -> Callable[[], CheckpointInfo]:
        """PostgreSQL, a session whose retention keeps every checkpoint: :meth:`_checkpoint_in`
        as statements that ride the transaction's next round trip (the state blobs stored
        and named by digest); returns what gives the checkpoint once it ended.
        """
        store = self.store
        state = [encode(v, BLOB_STATE) if v is not None else None for v in (kernel, working_memory)]
        store.archive.store_encoded_later(conn, [item for item in state if item is not None])
        return store.insert_checkpoint_later(
            conn,
            info,
            info.head,
            turn=info.turn,
            label=label,
            trigger=trigger,
            kernel_digest=None if state[0] is None else state[0][0],
            wm_digest=None if state[1] is None else state[1][0],
            cover=self._cover,
        )

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
