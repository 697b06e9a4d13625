"""The one format-neutral step: a conversation's steps, in file order, written to a session so
that its line is what the model saw (DESIGN invariant 13).

A turn is checkpointed when the next one starts (or the import ends). A prompt whose parent is
not where the line stands is a rewind: the line goes back to the checkpoint the parent reached
(``Session.backtrack``: the abandoned branch's checkpoints are kept, cut), and the new branch
continues from there. A compaction folds the whole line into its summary (``Session.fold``: the
summary covers the raw entries) and checkpoints the result, so a later rewind to a record after
it lands on the compacted line. Records sharing a group id (Claude Code's ``message.id``) are
one message. Memory holds one turn's messages, not the transcript.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from alpstore.transcripts import claude
from alpstore.transcripts.state import SourceState, all_tips
from alpstore.views import View

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from alpstore.core.store import CoreStore as Store
    from alpstore.sessions import CheckpointInfo, Session
    from alpstore.transcripts.steps import Step

BATCH_MESSAGES = 500
"""A turn longer than this is appended in pieces (its checkpoint comes with the last)."""
START = 0
"""The checkpoint id of the empty start, before the first turn."""


class Turn:
    """A turn on the line: the checkpoint it starts from, its messages so far, its own
    checkpoint once closed.
    """

    __slots__ = ("base", "ck", "count")

    def __init__(self, base: int, count: int = 0) -> None:
        self.base = base
        self.ck: int | None = None
        self.count = count


Position = tuple[Any, ...]
"""``("ck", checkpoint id)`` right after a checkpoint, or ``("in", turn, n)`` mid-turn."""


def _position(turn: Turn, n: int) -> Position:
    if n == 0:
        return ("ck", turn.base)
    if turn.ck is not None and n == turn.count:
        return ("ck", turn.ck)
    return ("in", turn, n)


class Conversation:
    """One conversation (the main one or a subagent's) replayed into one session, inside the
    caller's transaction.
    """

    def __init__(
        self, store: Store, session: Session, state: SourceState, conn: Connection
    ) -> None:
        self.store = store
        self.session = session
        self.state = state
        self.conn = conn
        newest = store.recent_checkpoints(conn, session.info(refresh=False), 1)  # O(1)
        self._last = newest[-1].id if newest else None
        self._retained_ids: list[int] | None = None
        """The retained checkpoints, read only when a rewind needs them (O(history))."""
        self.turn = Turn(self._last if self._last is not None else START, int(state.open))
        self._carried = state.open
        self._carry_group = state.group
        self.buffer: list[dict[str, Any]] = []
        self.pending: dict[str, Any] | None = None
        self.pending_group: str | None = None
        self.last_group = state.group
        self.marks: dict[str, tuple[Turn, int]] = {}
        if state.tip is not None:
            self.marks[state.tip] = (self.turn, self.turn.count)
        self.tip = state.tip
        self._end: tuple[Turn, int] | None = None
        self._at_end: list[str] = []
        """The records at the line's end (``_end``): they reach the next checkpoint."""
        if state.tip is not None:
            self._end, self._at_end = (self.turn, self.turn.count), [state.tip]
        self._old_tips: dict[str, int] | None = None
        self.tips: dict[str, int] = {}
        self.skipped: Counter[str] = Counter()
        self.messages = self.checkpoints = self.backtracks = self.folds = 0
        self.spawns: dict[str, Turn] = {}
        """Subagents whose result this conversation holds, with the turn holding it."""
        self.calls: dict[str, Turn] = {}
        """Prompts of the subagent calls this conversation made, with their turn."""

    # ---------------------------------------------------------------- positions
    def _here(self) -> Position:
        return _position(self.turn, self.turn.count)

    def _mark(self, uuid: str | None, at: tuple[Turn, int] | None = None) -> None:
        """Remember where record ``uuid`` stands (``at``: off the line's end, e.g. a record
        hanging from an earlier one); a record at the line's end becomes its tip.
        """
        if uuid is None:
            return
        turn, n = at or (self.turn, self.turn.count)
        self.marks[uuid] = (turn, n)
        if n == 0:
            self.tips[uuid] = turn.base
        if at is None:
            self.tip = uuid
            if self._end != (turn, n):
                self._end, self._at_end = (turn, n), []
            self._at_end.append(uuid)

    def _target(self, parent: str | None) -> Position | None:
        """Where a record with this parent belongs; None when the parent is not known."""
        if parent is None:
            return ("ck", START)
        mark = self.marks.get(parent)
        if mark is not None:
            return _position(*mark)
        if self._old_tips is None:  # an earlier import's record: read once, on a rewind
            mine = {
                ck.id
                for ck in self.store.list_checkpoints(
                    self.session.id, include_abandoned=True, conn=self.conn
                )
            }  # (a session carried to another archive may have had its checkpoints renumbered)
            tips = all_tips(self.conn, self.session.id)
            self._old_tips = {u: ck for u, ck in tips.items() if ck == START or ck in mine}
        ck = self._old_tips.get(parent)
        return None if ck is None else ("ck", ck)

    # ---------------------------------------------------------------- steps
    def feed(self, step: Step) -> None:
        """Apply one step of this conversation."""
        if step.kind == "message":
            self._message(step)
        elif step.kind == "turn":
            self._close()
        elif step.kind == "fold":
            self._fold(step)
        elif step.kind == "rollback":
            self._rollback(step.turns)
        else:
            self.skipped[step.skipped or "record"] += 1
            mark = self.marks.get(step.parent) if step.parent else None
            if mark is not None and _position(*mark) == self._here():
                mark = None
            self._mark(step.uuid, mark)

    def _message(self, step: Step) -> None:
        assert step.value is not None
        if step.prompt:
            self._close()
            target = self._target(step.parent)
            if target is not None and target != self._here():
                self._rewind(target)
        value = step.value
        cut = step.group is not None and step.group == self._carry_group
        if cut and self.pending is None and self.messages == 0 and not self.buffer:
            entry = self.session.pop_last()  # the last import ended inside this response
            if entry is not None:
                value = claude.merge(entry.value, value)
                self.turn.count = max(self.turn.count - 1, 0)
        self._carry_group = None
        if step.group is not None and self.pending is not None and step.group == self.pending_group:
            self.pending = claude.merge(self.pending, value)
        else:
            self._flush_pending()
            self.pending, self.pending_group = value, step.group
            self.turn.count += 1
        for agent in step.spawns:
            self.spawns[agent] = self.turn
        for prompt in step.calls:
            self.calls[prompt] = self.turn
        self._mark(step.uuid)

    def _flush_pending(self) -> None:
        if self.pending is None:
            return
        self.buffer.append(self.pending)
        self.last_group = self.pending_group
        self.pending = None
        self.messages += 1
        if len(self.buffer) >= BATCH_MESSAGES:
            self.session.append(self.buffer)
            self.buffer = []

    @property
    def _retained(self) -> list[int]:
        if self._retained_ids is None:
            cks = self.store.list_checkpoints(self.session.id, conn=self.conn)
            self._retained_ids = [ck.id for ck in cks]
        return self._retained_ids

    @_retained.setter
    def _retained(self, ids: list[int]) -> None:
        self._retained_ids = ids
        self._last = ids[-1] if ids else None

    def _checkpointed(self, ck: CheckpointInfo) -> None:
        if self._retained_ids is not None:
            self._retained_ids.append(ck.id)
        self._last = ck.id
        self.checkpoints += 1

    def _close(self) -> None:
        """Checkpoint the open turn (if it holds anything) and start a new one after it."""
        if self.turn.count == 0:
            return
        self._flush_pending()
        if self.buffer:
            ck = self.session.commit_turn(self.buffer, trigger="every_turn")
        else:
            ck = self.session.checkpoint(trigger="every_turn")
        self.buffer = []
        self._checkpointed(ck)
        self.turn.ck = ck.id
        if self._end == (self.turn, self.turn.count):
            for uuid in self._at_end:
                self.tips[uuid] = ck.id
        self.turn = Turn(ck.id)
        self._carried = False

    def _rewind(self, target: Position) -> None:
        """Move the line back to ``target`` (a rewind in the source): a backtrack to the
        checkpoint there, the abandoned branch kept.
        """
        ck_id = target[1] if target[0] == "ck" else target[1].base  # mid-turn: its start
        if ck_id == START:
            self.session.rewind(View(None, 0), 0, keep_seq=0, detail={"rewind": "to the start"})
            self._retained = []
        elif ck_id in self._retained:
            index = self._retained.index(ck_id)
            steps = len(self._retained) - 1 - index
            if steps == 0:
                return
            self.session.backtrack(steps)
            self._retained = self._retained[: index + 1]
        else:  # a checkpoint an earlier rewind cut: resume there
            self.session.resume(self.store.resolve_checkpoint(str(ck_id)))
            self._retained = [
                ck.id for ck in self.store.list_checkpoints(self.session.id, conn=self.conn)
            ]
        self.backtracks += 1
        self.last_group = None
        self.turn = Turn(ck_id)

    def _rollback(self, turns: int) -> None:
        """The newest ``turns`` user turns discarded (Codex): back to the newest retained
        checkpoint at least that many turns before the line's end.
        """
        self._close()
        cks = self.store.list_checkpoints(self.session.id, conn=self.conn)
        if not cks:
            return
        goal = cks[-1].turn - turns
        target = next((ck.id for ck in reversed(cks) if ck.turn <= goal), START)
        self._rewind(("ck", target))

    def _fold(self, step: Step) -> None:
        """A compaction: the open turn is checkpointed as the model saw it, then the line so
        far becomes one summary covering it, checkpointed too.
        """
        self._close()
        length = self.session.head.length
        if length == 0:
            self.skipped["empty compaction"] += 1
            self._mark(step.uuid)
            return
        self.session.fold(0, length, step.summary or "")
        self.last_group = None  # the line ends in the summary now
        ck = self.session.checkpoint(trigger="compaction")
        self._checkpointed(ck)
        self.folds += 1
        self.turn = Turn(ck.id)
        self._carried = False
        self._mark(step.uuid)

    def finish(self, *, close_turn: bool) -> None:
        """End of what this import read: checkpoint the open turn (``close_turn``: the source
        says it ended, or the file is complete), else append its messages and leave it open.
        """
        if close_turn:
            self._close()
        else:
            self._flush_pending()
            if self.buffer:
                self.session.append(self.buffer)
                self.buffer = []
        state = self.state
        state.tip = self.tip
        state.open = self.turn.count > 0
        state.group = self.last_group
        state.tips = self.tips
        state.skipped = dict(self.skipped)
        state.written = self.messages

    def anchor(self, turn: Turn) -> int | None:
        """The checkpoint a subagent started at ``turn`` hangs from (its turn's, else the one
        before it, else this session's latest).
        """
        if turn.ck is not None:
            return turn.ck
        if turn.base != START:
            return turn.base
        return self._last
