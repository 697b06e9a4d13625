"""A running agent's session: the policy it runs under and its in-process context (AR-5).

:class:`LiveSession` is what ``Store.open_session`` returns. It decides every checkpoint by the
session's recorded policy (CK-4: ``none``, ``in_memory``, ``every_turn``, ``on_event`` with
its triggers), writes deep files to the CK-6 directory when storage is disk or hybrid, prunes
by retention (CK-8), and keeps the hydrated context of the covering head in process, so a
:meth:`LiveSession.backtrack` retargets the head without copying a message or reading the
prefix back from the database.

**When a live backtrack reaches the archive.** A backtrack changes the process at once and the
archive at the next write of this live session (``append``, ``commit_turn``, ``event``,
``checkpoint``, ``save``) or at :meth:`LiveSession.flush` — in the same transaction as that
write. A crash in between keeps the archive as it was before the backtrack: the head and every
checkpoint it had, and no steering message. Nothing is half-applied.

Not thread-safe: one live session belongs to one agent loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from alpstore.codec import Digest
from alpstore.errors import SessionStateError, UsageError
from alpstore.live.context import Context, LiveBacktrack, Mark, model_message
from alpstore.policy.model import CheckpointPolicy
from alpstore.policy.recorded import SessionPolicy
from alpstore.portable.cadence import file_label, plan
from alpstore.sessions import (
    CheckpointInfo,
    Session,
    count_user_turns,
    default_label,
    steering_message,
)
from alpstore.views import View

if TYPE_CHECKING:
    from alpstore.core.store import CoreStore as Store

MID_TURN_EVENTS: Final = ("after_llm_call", "after_tool_call", "before_destructive_tool")
"""Events raised inside a turn; ``turn_completed`` ends one."""


@dataclass(frozen=True)
class _Pending:
    steps: int
    target: Mark
    steering: str | None
    archive_steps: int
    keep_seq: int | None


class LiveSession:
    """A session as a running agent holds it: policy, head, context and checkpoints.

    Every write goes to the archive at once (one transaction); checkpoints are decided by the
    policy recorded with the session. See the module docstring for when a backtrack persists.
    """

    def __init__(self, store: Store, session: Session, policy: SessionPolicy | None) -> None:
        self.store = store
        self.session = session
        self.policy = policy
        info = session.info()
        self._view = info.head
        self._turn = info.turn
        self._completed = info.turn  # the turn count at the last completed turn
        self._context: Context | None = None
        self._pending: list[_Pending] = []
        self._marks: list[Mark] = [
            Mark(ck, ck.view, ck.turn, ck.label, ck.trigger, floor_seq=ck.seq)
            for ck in session.checkpoints()
        ]
        self._floor = self._marks[-1].floor_seq if self._marks else None

    # ---------------------------------------------------------------- reading
    @property
    def uuid(self) -> str:
        """The session's id."""
        return self.session.uuid

    @property
    def rules(self) -> CheckpointPolicy:
        """The checkpoint policy in force (defaults — mode none — when none was recorded)."""
        return self.policy.policy if self.policy is not None else CheckpointPolicy()

    @property
    def turn(self) -> int:
        """The session's turn as this process sees it (backtracks included)."""
        return self._turn

    @property
    def context(self) -> Context:
        """The message list for the next model call (hydrated once, then kept in step)."""
        if self._context is None:
            entries = self.store.hydrate_view(self._view)
            self._context = Context.of([model_message(e) for e in entries])
        return self._context

    @property
    def marks(self) -> list[Mark]:
        """The checkpoints a backtrack can reach, oldest first (archive and in-process)."""
        return list(self._marks)

    @property
    def pending_backtracks(self) -> int:
        """Backtracks done in process and not yet in the archive."""
        return len(self._pending)

    # ---------------------------------------------------------------- writing
    def append(self, messages: Sequence[Any], *, event: str | None = None) -> list[Digest]:
        """Append messages (a step inside a turn); ``event`` names what just happened
        (after_llm_call, after_tool_call, before_destructive_tool) and may checkpoint.

        Raises:
            UsageError: an unknown event.
        """
        if event is not None and event not in MID_TURN_EVENTS:
            raise UsageError(
                f"event {event!r}: expected one of {', '.join(MID_TURN_EVENTS)} "
                "(a completed turn is commit_turn)"
            )
        digests, _ = self._step(messages, event)
        return digests

    def commit_turn(
        self,
        messages: Sequence[Any] = (),
        *,
        kernel: Any | None = None,
        working_memory: Any | None = None,
        label: str | None = None,
    ) -> Mark | None:
        """Append a completed user turn's messages; checkpoint when the policy says so
        (every_turn, in_memory, every_n_turns). Returns the checkpoint taken, if any.
        """
        _, mark = self._step(messages, "turn_completed", kernel, working_memory, label)
        return mark

    def event(self, name: str, messages: Sequence[Any] = ()) -> Mark | None:
        """Append ``messages`` (possibly none) and raise a mid-turn event (after_llm_call,
        after_tool_call, before_destructive_tool); returns the checkpoint the policy took.

        Raises:
            UsageError: an unknown event.
        """
        if name not in MID_TURN_EVENTS:
            raise UsageError(f"event {name!r}: expected one of {', '.join(MID_TURN_EVENTS)}")
        _, mark = self._step(messages, name)
        return mark

    def checkpoint(
        self,
        *,
        kernel: Any | None = None,
        working_memory: Any | None = None,
        label: str | None = None,
        trigger: str = "manual",
    ) -> Mark:
        """An explicit checkpoint, in every mode: an archive row, plus a deep file when the
        policy's storage is disk or hybrid (self_contained portability).
        """
        store = self.store
        with store.db.atomic():
            self._flush_in_transaction()
            ck = self.session.checkpoint(
                kernel=kernel, working_memory=working_memory, label=label, trigger=trigger
            )
            path = self._write_file(ck) if self._files_on() else None
        return self._remember(ck, path)

    def save(
        self, *, label: str | None = None, directory: Path | None = None, compress: bool = False
    ) -> Path:
        """``checkpoint save``: a deep file of the head in the CK-6 directory (always, AR-3)
        plus a manual archive checkpoint; returns the file's path.
        """
        from alpstore.portable.deep import export_snapshot, snapshot_of_head
        from alpstore.portable.files import (
            checkpoint_file_name,
            contained_path,
            write_checkpoint_file,
        )

        folder = directory or self.checkpoint_dir()
        store = self.store
        with store.db.atomic():
            self._flush_in_transaction()
            snap = snapshot_of_head(store, self.session)
            # a new checkpoint: its own label, never the one of the checkpoint the head sits on
            snap = replace(snap, label=label or default_label(snap.turn))
            doc = export_snapshot(store, snap, scan=False)  # the write scans
            name = checkpoint_file_name(self.uuid, doc["label"], compress=compress)
            path = contained_path(folder, name)
            write_checkpoint_file(doc, path, compress=compress)
            ck = self.session.checkpoint(
                kernel=snap.kernel, working_memory=snap.working_memory, label=label
            )
        self._remember(ck, path)
        return path

    def checkpoint_dir(self) -> Path:
        """Where deep files of this session go: the recorded CK-6 directory, else
        ``<run_root>/checkpoints`` (AR-4).
        """
        if self.policy is not None and self.policy.checkpoint_dir is not None:
            return self.policy.checkpoint_dir
        from alpstore.portable.cadence import default_store_dir

        return default_store_dir(self.store.root)

    def backtrack(self, steps: int = 1, steering: str | None = None) -> LiveBacktrack:
        """Rewind ``steps`` checkpoints in process: the head is retargeted (copy-on-write, no
        message copied) and ``steering`` is injected as the next user turn (``/steer …``).
        The archive follows at the next write or :meth:`flush`.

        Raises:
            UsageError: ``steps`` < 1.
            SessionStateError: fewer than ``steps`` + 1 checkpoints to rewind through.
        """
        if type(steps) is not int or steps < 1:
            raise UsageError(f"backtrack steps {steps!r}: expected an integer ≥ 1")
        if steps >= len(self._marks):
            held = len(self._marks)
            raise SessionStateError(
                f"session {self.uuid}: cannot backtrack {steps} step(s); only {held} "
                f"checkpoint(s) retained (at most {max(held - 1, 0)})"
            )
        index = len(self._marks) - 1 - steps
        target = self._marks[index]
        base = target.context
        if base is None:
            base = self._context_of(target.view)
        marks = self._marks
        archive_steps = sum(1 for i in range(index + 1, len(marks)) if not marks[i].in_memory)
        keep_seq = target.floor_seq
        ctx = base
        turn = target.turn
        if steering is not None:
            ctx = ctx.extend([steering_message(steering)])
            turn += 1
        self._pending.append(_Pending(steps, target, steering, archive_steps, keep_seq))
        del marks[index + 1 :]  # O(steps): the marks before the target are not copied
        self._floor = keep_seq
        self._context = ctx
        self._turn = turn
        self._completed = target.turn
        return LiveBacktrack(steps, target, ctx, steering)

    def refresh(self) -> int:
        """Catch up with writes made through the session directly (an adapter that appends on
        its own): re-read the head; the in-process context is rebuilt on next use when the head
        moved. Returns the head length this live session saw before.

        Raises:
            SessionStateError: backtracks are pending (flush them first).
        """
        if self._pending:
            raise SessionStateError(f"session {self.uuid}: flush pending backtracks first")
        seen = self._view.length
        info = self.session.info()
        if info.head != self._view:
            self._context = None
        self._view, self._turn = info.head, info.turn
        return seen

    def flush(self) -> None:
        """Persist pending backtracks now (one transaction)."""
        if not self._pending:
            return
        with self.store.db.atomic():
            self._flush_in_transaction()

    # ---------------------------------------------------------------- internals
    def _context_of(self, view: View) -> Context:
        """The context of an archive view: a prefix of the live one when it is one, else read."""
        live = self._context
        same_chain = view == View(self._view.segment_id, view.length) and not self._pending
        if live is not None and same_chain and view.length <= len(live):
            return live.prefix(view.length)
        entries = self.store.hydrate_view(view)
        return Context.of([model_message(e) for e in entries])

    def _flush_in_transaction(self) -> None:
        """Apply pending backtracks inside the caller's transaction, in order."""
        session = self.session
        expect: View | None = self._view
        for bt in self._pending:
            target = bt.target
            if target.checkpoint is not None and bt.archive_steps >= 1:
                head = session.info().head
                if expect is not None and head != expect:
                    raise SessionStateError(
                        f"session {self.uuid}: its head moved to {head.archive_view_id} "
                        f"(expected {expect.archive_view_id}); another writer changed it",
                        hint="reopen the session to continue from its current head",
                    )
                done = session.backtrack(bt.archive_steps, bt.steering)
                if done.to_checkpoint.id != target.checkpoint.id:
                    raise SessionStateError(
                        f"session {self.uuid}: the archive's checkpoints changed under the live "
                        f"session (backtrack reached {done.to_checkpoint.id}, expected "
                        f"{target.checkpoint.id})",
                        hint="reopen the session",
                    )
            else:
                session.rewind(
                    target.view,
                    target.turn,
                    steering=bt.steering,
                    keep_seq=bt.keep_seq,
                    expect_head=expect,
                    cover=target.cover,
                    detail={
                        "steps": bt.steps,
                        "to_turn": target.turn,
                        "to_label": target.label,
                        "in_memory": target.in_memory,
                        "steering": bt.steering,
                    },
                )
            expect = session.head
        self._pending = []
        info = session.info(refresh=False)
        self._view, self._turn = info.head, info.turn

    def _files_on(self) -> bool:
        rules = self.rules
        return rules.persists_to_disk and rules.portability == "self_contained"

    def _write_file(self, ck: CheckpointInfo) -> Path:
        """The deep file of a checkpoint, in the CK-6 directory; retention prunes the oldest
        of this session's files (inside the caller's transaction: a refused write undoes the
        checkpoint row too).
        """
        from alpstore.portable.deep import export_snapshot, snapshot_of_checkpoint
        from alpstore.portable.stores import DiskCheckpointStore

        snap = snapshot_of_checkpoint(self.store, ck)
        snap = replace(snap, label=file_label(ck.label, ck.trigger, ck.seq))
        doc = export_snapshot(self.store, snap, scan=False)  # the store's put scans
        files = DiskCheckpointStore(self.checkpoint_dir())
        name = files.put(doc)
        files.prune(self.uuid, self.rules.retention)
        return files.directory / name

    def _step(
        self,
        messages: Sequence[Any],
        event: str | None,
        kernel: Any | None = None,
        working_memory: Any | None = None,
        label: str | None = None,
    ) -> tuple[list[Digest], Mark | None]:
        rules = self.rules
        before = self._completed if event == "turn_completed" else self._turn
        after = self._turn + count_user_turns(messages)
        decision = (
            plan(rules, event, turn=after, previous_turn=before) if event is not None else None
        )
        store = self.store
        session = self.session
        digests: list[Digest] = []
        ck: CheckpointInfo | None = None
        path: Path | None = None
        memory = decision is not None and rules.storage == "memory"
        with store.db.atomic():
            self._flush_in_transaction()
            if decision is None or memory:
                if messages:
                    digests = session.append(messages)
            else:
                ck = session.commit_turn(
                    messages,
                    kernel=kernel,
                    working_memory=working_memory,
                    label=label,
                    trigger=decision.trigger,
                )
                if self._files_on():
                    path = self._write_file(ck)
        if messages and not digests:
            digests = _digests_of(messages)
        self._after_write(messages)
        if event == "turn_completed":
            self._completed = self._turn
        if ck is not None:
            return digests, self._remember(ck, path)
        if memory and decision is not None:
            mark = Mark(
                None,
                self._view,
                self._turn,
                label or default_label(self._turn),
                decision.trigger,
                self._kept_context(),
                floor_seq=self._floor,
                cover=session.written_cover(self._view) if messages else None,
            )
            self._marks.append(mark)
            self._trim(in_memory=True)
            return digests, mark
        return digests, None

    def _after_write(self, messages: Sequence[Any]) -> None:
        info = self.session.info(refresh=False)
        self._view = info.head
        self._turn = info.turn
        if self._context is not None and messages:
            self._context = self._context.extend(list(messages))

    def _remember(self, ck: CheckpointInfo, path: Path | None) -> Mark:
        self._after_write(())
        mark = Mark(ck, ck.view, ck.turn, ck.label, ck.trigger, self._kept_context(), path, ck.seq)
        self._floor = ck.seq
        self._marks.append(mark)
        self._trim(in_memory=False)
        return mark

    def _kept_context(self) -> Context | None:
        """The in-process copy a checkpoint keeps: every storage but disk (CK-5: disk is the
        files alone; memory and hybrid keep a copy in process for speed).
        """
        storage = self.rules.storage
        if storage in ("memory", "hybrid"):
            return self.context  # hydrated on the first checkpoint, then kept in step
        return None if storage == "disk" else self._context

    def _trim(self, *, in_memory: bool) -> None:
        """Mirror retention on the marks of one kind (the archive prunes its rows itself)."""
        keep = self.rules.retention.keep()
        if keep is None:
            return
        same = [m for m in self._marks if m.in_memory == in_memory]
        if len(same) <= keep:
            return
        doomed = {id(m) for m in same[: len(same) - keep]}
        self._marks = [m for m in self._marks if id(m) not in doomed]


def _digests_of(messages: Sequence[Any]) -> list[Digest]:
    from alpstore.archive.reading import encode
    from alpstore.db.names import BLOB_MESSAGE

    return [encode(m, BLOB_MESSAGE)[0] for m in messages]
