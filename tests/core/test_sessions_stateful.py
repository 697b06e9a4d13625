"""Model-based test: random append / fold / checkpoint / backtrack / fork / resume / prune / gc;
after every step each checkpoint and each head hydrates to what plain Python lists say."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from alpstore.archive.base import summary_document
from alpstore.codec import canonical_json, digest_bytes
from alpstore.errors import SessionStateError
from alpstore.maintenance import gc
from alpstore.sessions import Retention, Session, steering_message
from alpstore.store import Store


def _digest(value: Any) -> bytes:
    return digest_bytes(canonical_json(value))


@dataclass
class ModelCheckpoint:
    id: int
    session: str
    history: list[Any]
    abandoned: bool = False


@dataclass
class ModelSession:
    handle: Session
    head: list[Any] = field(default_factory=list)
    retention: int | None = None


messages = st.lists(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "assistant", "tool"]),
            "content": st.text(alphabet="abcxyz ", max_size=6),
        }
    ),
    min_size=1,
    max_size=3,
)


class SessionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="alpstore-stateful-"))
        self.store = Store.open(self.dir)
        self.sessions: list[ModelSession] = []
        self.checkpoints: list[ModelCheckpoint] = []
        self.fork_sources: set[int] = set()
        self._new_session(None)

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _new_session(self, keep: int | None) -> None:
        retention = Retention("last_n", keep) if keep else Retention()
        handle = self.store.create_session(retention=retention)
        self.sessions.append(ModelSession(handle, [], keep))

    def _retained(self, s: ModelSession) -> list[ModelCheckpoint]:
        return [c for c in self.checkpoints if c.session == s.handle.uuid and not c.abandoned]

    @rule(keep=st.sampled_from([None, 2, 3]))
    @precondition(lambda self: len(self.sessions) < 4)
    def new_session(self, keep: int | None) -> None:
        self._new_session(keep)

    @rule(i=st.integers(0, 9), msgs=messages)
    def append(self, i: int, msgs: list[Any]) -> None:
        s = self.sessions[i % len(self.sessions)]
        s.handle.append(msgs)
        s.head.extend(msgs)

    @rule(
        i=st.integers(0, 9),
        a=st.integers(0, 30),
        b=st.integers(1, 5),
        text=st.text(alphabet="sum", max_size=4),
    )
    def fold(self, i: int, a: int, b: int, text: str) -> None:
        s = self.sessions[i % len(self.sessions)]
        if not s.head:
            return
        start = a % len(s.head)
        end = min(len(s.head), start + b)
        covered = s.head[start:end]
        s.handle.fold(start, end, text)
        s.head[start:end] = [summary_document(text, [_digest(v) for v in covered])]

    @rule(i=st.integers(0, 9), turn_end=st.booleans())
    def checkpoint(self, i: int, turn_end: bool) -> None:
        s = self.sessions[i % len(self.sessions)]
        if turn_end:
            ck = s.handle.commit_turn([{"role": "user", "content": "next"}])
            s.head.append({"role": "user", "content": "next"})
        else:
            ck = s.handle.checkpoint(kernel={"q": {}, "run": {"n": len(s.head)}})
        self.checkpoints.append(ModelCheckpoint(ck.id, s.handle.uuid, list(s.head)))
        self._apply_retention(s)

    def _apply_retention(self, s: ModelSession) -> None:
        if s.retention is None:
            return
        retained = self._retained(s)
        for old in retained[: max(0, len(retained) - s.retention)]:
            if old.id not in self.fork_sources:
                self.checkpoints.remove(old)

    @rule(i=st.integers(0, 9), steps=st.integers(1, 4), steer=st.booleans())
    def backtrack(self, i: int, steps: int, steer: bool) -> None:
        s = self.sessions[i % len(self.sessions)]
        retained = self._retained(s)
        text = "avoid that" if steer else None
        if steps >= len(retained):
            try:
                s.handle.backtrack(steps, text)
            except SessionStateError:
                return
            raise AssertionError("backtrack beyond the retained history was accepted")
        s.handle.backtrack(steps, text)
        target = retained[-1 - steps]
        for c in retained[len(retained) - steps :]:
            c.abandoned = True
        s.head = list(target.history) + ([steering_message(text)] if text else [])

    @rule(j=st.integers(0, 99))
    @precondition(lambda self: self.checkpoints and len(self.sessions) < 6)
    def fork(self, j: int) -> None:
        ck = self.checkpoints[j % len(self.checkpoints)]
        child = self.store.fork_checkpoint(self.store.get_checkpoint(ck.id))
        parent = next(s for s in self.sessions if s.handle.uuid == ck.session)
        self.fork_sources.add(ck.id)
        model = ModelSession(child, list(ck.history), parent.retention)
        self.sessions.append(model)
        first = child.checkpoints()[0]
        self.checkpoints.append(ModelCheckpoint(first.id, child.uuid, list(ck.history)))

    @rule(i=st.integers(0, 9), j=st.integers(0, 99))
    def resume(self, i: int, j: int) -> None:
        s = self.sessions[i % len(self.sessions)]
        retained = self._retained(s)
        if not retained:
            return
        target = retained[j % len(retained)]
        s.handle.resume(self.store.get_checkpoint(target.id))
        for c in retained:
            if c.id != target.id and retained.index(c) > retained.index(target):
                c.abandoned = True
        s.head = list(target.history)

    @rule()
    def collect_garbage(self) -> None:
        gc(self.store)

    @invariant()
    def every_checkpoint_and_head_hydrates_as_the_model_says(self) -> None:
        for c in self.checkpoints:
            got = [e.value for e in self.store.hydrate(self.store.get_checkpoint(c.id))]
            assert got == c.history, f"checkpoint {c.id}"
        for s in self.sessions:
            assert [e.value for e in s.handle.history()] == s.head


SessionMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
TestSessions = SessionMachine.TestCase
