"""The child side of the kill -9 torture: a seeded loop of every kind of write, logged as it goes.

A worker opens an existing run root (whatever a killed predecessor left), rebuilds its model of
every session from the archive, then loops: append, commit a turn, checkpoint, fold, backtrack,
resume, fork, create a session, collect garbage, pin and unpin continuity, append compaction journal
lines and rotate the journal. Before each write it logs an *intent* (the state the write must
produce) and after the write returns an *ack* (the write is committed). The parent kills the worker
with SIGKILL at a random moment and checks that everything acknowledged survived exactly, and that
the one write in flight either happened whole or not at all.

Log lines are JSON objects appended with one ``write`` each (``t`` names the kind):

``intent``  ``session``, ``h`` (the head's history digest after the write), ``ck_h`` (the history
            a checkpoint written by it must hydrate to), ``new`` (the write creates the session)
``head``    ``session``, ``h``: the head after a committed write
``ck``      ``id``, ``session``, ``h``, ``kernel`` (hex digest or null): a committed checkpoint
``pin-intent`` / ``pin``      ``exec``, ``text`` (and ``id`` once committed)
``unpin-intent`` / ``unpin``  ``exec``, ``id``
``jl-intent`` / ``jl``        ``exec``, ``key`` (the unique ``session_id`` of the payload)
``rot-intent`` / ``rot``      ``exec``: a journal rotation
``gc``, ``ready``, ``error``  (``error`` carries the traceback of an unexpected failure)
"""

from __future__ import annotations

import json
import os
import random
import time
import traceback
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alpstore.archive.base import summary_document
from alpstore.codec import canonical_json, digest_bytes
from alpstore.continuity.checkpoint import read_checkpoint
from alpstore.continuity.journal import (
    append_line,
    build_line,
    needs_sequence,
    next_sequence,
    rotate_if_needed,
    source_of,
)
from alpstore.continuity.paths import ExecutionPaths
from alpstore.continuity.pins import add_pin, remove_pin
from alpstore.errors import ContinuityError, SessionStateError
from alpstore.maintenance import gc, verify
from alpstore.sessions import Session, steering_message
from alpstore.store import Store

EXECUTIONS = ("exec_torture_a", "exec_torture_b")
"""The continuity executions every worker writes to."""
MAX_SESSIONS = 8
"""Forks and new sessions stop at this many sessions per archive."""
ROTATE_AT = 4096
"""Journal rotation threshold used by the workload (small, so rotations happen under kills)."""
PIN_KINDS = ("decision", "constraint", "open-item", "next-action")
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "índigo", "ß")

OPS: tuple[tuple[str, int], ...] = (
    ("append", 22),
    ("commit_turn", 24),
    ("checkpoint", 10),
    ("fold", 8),
    ("backtrack", 8),
    ("resume", 4),
    ("fork", 4),
    ("new_session", 2),
    ("gc", 1),
    ("pin", 8),
    ("unpin", 2),
    ("journal", 8),
    ("rotate", 2),
)
"""Each operation and its relative weight."""


def history_digest(digests: Sequence[bytes]) -> str:
    """One hex digest naming a whole covering list (BLAKE3 of its entries' digests in order)."""
    return digest_bytes(b"".join(digests)).hex()


def value_digest(value: Any) -> bytes:
    """The digest alpstore gives a document (BLAKE3 of its canonical JSON)."""
    return digest_bytes(canonical_json(value))


@dataclass(frozen=True)
class WorkerSpec:
    """What one worker runs on.

    Attributes:
        root: the run root whose archive it writes (reopened by every worker).
        alp_home: the ALP home holding the continuity executions.
        seed: seeds every random choice the worker makes.
        worker: the worker's number (part of every message and pin it writes).
        log_path: where it appends its intent and ack lines.
        max_seconds: a worker nobody kills stops by itself after this long.
        url: the archive's database URL (None: the SQLite file of ``root``).
        application_name: names the worker's PostgreSQL connections (``PGAPPNAME``).
    """

    root: str
    alp_home: str
    seed: int
    worker: int
    log_path: str
    max_seconds: float = 60.0
    url: str | None = None
    application_name: str | None = None


class AckLog:
    """Append-only log of intents and acks: one ``write`` per line, so only the line being
    written when the kill lands can be torn (the parent drops it).
    """

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, kind: str, **fields: Any) -> None:
        """Append one line."""
        line = json.dumps({"t": kind, **fields}, ensure_ascii=False, sort_keys=True) + "\n"
        os.write(self._fd, line.encode("utf-8"))


@dataclass
class SessionModel:
    """The worker's model of one session: its handle, head and retained checkpoints."""

    handle: Session
    head: list[bytes]
    retained: list[int] = field(default_factory=list)


class Workload:
    """A seeded random loop of writes against one store and ALP home, logging as it goes."""

    def __init__(self, spec: WorkerSpec, store: Store, log: AckLog) -> None:
        self.spec = spec
        self.store = store
        self.log = log
        self.rng = random.Random(spec.seed)
        self.home = Path(spec.alp_home)
        self.sessions: list[SessionModel] = []
        self.histories: dict[int, tuple[bytes, ...]] = {}
        self.counter = 0
        self.recent: list[dict[str, Any]] = []
        self.large: list[str] = []
        names = [name for name, _ in OPS]
        weights = [weight for _, weight in OPS]
        self._ops = (names, weights)

    # ---------------------------------------------------------------- model
    def load(self) -> None:
        """Rebuild the model from what the archive holds now (the parent has checked it)."""
        for info in self.store.list_sessions():
            head: list[bytes] = [e.digest for e in self.store.hydrate_view(info.head)]
            retained = [c.id for c in self.store.list_checkpoints(info.id)]
            self.sessions.append(SessionModel(Session(self.store, info), head, retained))

    def history_of(self, checkpoint_id: int) -> tuple[bytes, ...]:
        """The covering list of a checkpoint (from the model, else read once from the archive)."""
        known = self.histories.get(checkpoint_id)
        if known is None:
            ck = self.store.get_checkpoint(checkpoint_id)
            known = tuple(e.digest for e in self.store.hydrate(ck))
            self.histories[checkpoint_id] = known
        return known

    def _uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def _text(self, low: int, high: int) -> str:
        words = " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(low, high)))
        return f"w{self.spec.worker}-{self.counter} {words}"

    def message(self) -> dict[str, Any]:
        """A fresh message; sometimes a repeat (dedup), sometimes large (multi-page writes)."""
        self.counter += 1
        if self.recent and self.rng.random() < 0.1:
            return self.rng.choice(self.recent)
        role = self.rng.choice(("user", "assistant", "assistant", "tool"))
        content = self._text(1, 8)
        if self.rng.random() < 0.05:
            content += "\n" + self._large()
        msg: dict[str, Any] = {"role": role, "content": content}
        self.recent = [*self.recent[-20:], msg]
        return msg

    def _large(self) -> str:
        """A large tool output: fresh, or a recent one with a line added (a delta candidate)."""
        if self.large and self.rng.random() < 0.5:
            text = f"{self.rng.choice(self.large)}\nline {self.counter}"
        else:
            text = self.rng.randbytes(self.rng.randint(2000, 15000)).hex()
        self.large = [*self.large[-4:], text]
        return text

    # ---------------------------------------------------------------- logging
    def _intent(
        self, session: str, head: Sequence[bytes], *, ck: bool = False, new: bool = False
    ) -> None:
        self.log.write(
            "intent",
            session=session,
            h=history_digest(head),
            ck_h=history_digest(head) if ck else None,
            new=new,
        )

    def _head(self, s: SessionModel) -> None:
        self.log.write("head", session=s.handle.uuid, h=history_digest(s.head))

    def _ck(self, ck_id: int, session: str, history: Sequence[bytes], kernel: Any) -> None:
        self.histories[ck_id] = tuple(history)
        self.log.write(
            "ck",
            id=ck_id,
            session=session,
            h=history_digest(history),
            n=len(history),
            kernel=None if kernel is None else value_digest(kernel).hex(),
        )

    # ---------------------------------------------------------------- the loop
    def run(self, deadline: float) -> None:
        """Write until killed (or until ``deadline``, a safety net)."""
        if not self.sessions:
            self.op_new_session()
        while time.monotonic() < deadline:
            name = self.rng.choices(*self._ops)[0]
            getattr(self, f"op_{name}")()

    def _pick(self) -> SessionModel:
        return self.rng.choice(self.sessions)

    def _kernel(self) -> dict[str, Any] | None:
        if self.rng.random() < 0.5:
            return None
        return {"q": {"step": self.counter}, "run": {"worker": self.spec.worker}}

    def op_new_session(self) -> None:
        """Create an empty session (below the session cap)."""
        if len(self.sessions) >= MAX_SESSIONS:
            return self.op_append()
        uid = self._uuid()
        self._intent(uid, [], new=True)
        handle = self.store.create_session(
            session_id=uid, name=f"torture-{self.spec.worker}-{uid[:8]}"
        )
        model = SessionModel(handle, [])
        self.sessions.append(model)
        self._head(model)
        return None

    def op_append(self) -> None:
        """Append one to three messages."""
        s = self._pick()
        msgs = [self.message() for _ in range(self.rng.randint(1, 3))]
        post = s.head + [value_digest(m) for m in msgs]
        self._intent(s.handle.uuid, post)
        s.handle.append(msgs)
        s.head = post
        self._head(s)

    def op_commit_turn(self) -> None:
        """Append a turn and checkpoint it in one transaction."""
        s = self._pick()
        msgs = [self.message() for _ in range(self.rng.randint(1, 4))]
        post = s.head + [value_digest(m) for m in msgs]
        kernel = self._kernel()
        self._intent(s.handle.uuid, post, ck=True)
        ck = s.handle.commit_turn(msgs, kernel=kernel)
        s.head = post
        s.retained.append(ck.id)
        self._ck(ck.id, s.handle.uuid, post, kernel)
        self._head(s)

    def op_checkpoint(self) -> None:
        """A manual checkpoint of the head, sometimes with kernel state and a label."""
        s = self._pick()
        kernel = self._kernel()
        label = f"manual-{self.counter}" if self.rng.random() < 0.3 else None
        self._intent(s.handle.uuid, s.head, ck=True)
        ck = s.handle.checkpoint(kernel=kernel, label=label)
        s.retained.append(ck.id)
        self._ck(ck.id, s.handle.uuid, s.head, kernel)
        self._head(s)

    def op_fold(self) -> None:
        """Fold a span of the head into a summary."""
        s = self._pick()
        if len(s.head) < 2:
            return self.op_append()
        start = self.rng.randint(0, len(s.head) - 2)
        end = self.rng.randint(start + 1, min(len(s.head), start + 8))
        text = f"summary {self._text(1, 4)}"
        summary = value_digest(summary_document(text, s.head[start:end]))
        post = [*s.head[:start], summary, *s.head[end:]]
        self._intent(s.handle.uuid, post)
        got = s.handle.fold(start, end, text)
        if got != summary:
            raise AssertionError(f"fold gave summary {got.hex()}, expected {summary.hex()}")
        s.head = post
        self._head(s)
        return None

    def op_backtrack(self) -> None:
        """Backtrack one or two checkpoints, sometimes with a steering message."""
        s = self._pick()
        steps = self.rng.randint(1, 2)
        steer = self._text(1, 3) if self.rng.random() < 0.6 else None
        if steps >= len(s.retained):
            try:
                s.handle.backtrack(steps, steer)
            except SessionStateError:
                return
            raise AssertionError("a backtrack beyond the retained history was accepted")
        target = s.retained[-1 - steps]
        post = list(self.history_of(target))
        if steer is not None:
            post.append(value_digest(steering_message(steer)))
        self._intent(s.handle.uuid, post)
        info = s.handle.backtrack(steps, steer)
        if info.to_checkpoint.id != target:
            raise AssertionError(f"backtrack went to {info.to_checkpoint.id}, expected {target}")
        s.retained = s.retained[: len(s.retained) - steps]
        s.head = post
        self._head(s)

    def op_resume(self) -> None:
        """Resume a session at one of its retained checkpoints."""
        s = self._pick()
        if not s.retained:
            return self.op_commit_turn()
        index = self.rng.randrange(len(s.retained))
        target = s.retained[index]
        post = list(self.history_of(target))
        self._intent(s.handle.uuid, post)
        s.handle.resume(self.store.get_checkpoint(target))
        s.retained = s.retained[: index + 1]
        s.head = post
        self._head(s)
        return None

    def op_fork(self) -> None:
        """Fork a new session from a retained checkpoint."""
        s = self._pick()
        if len(self.sessions) >= MAX_SESSIONS or not s.retained:
            return self.op_commit_turn()
        source = self.rng.choice(s.retained)
        post = list(self.history_of(source))
        uid = self._uuid()
        self._intent(uid, post, ck=True, new=True)
        child = self.store.fork_checkpoint(self.store.get_checkpoint(source), session_id=uid)
        first = child.checkpoints()[0]
        model = SessionModel(child, post, [first.id])
        self.sessions.append(model)
        kernel = self.store.checkpoint_state(first)[0]
        self._ck(first.id, uid, post, kernel)
        self._head(model)
        return None

    def op_gc(self) -> None:
        """Collect garbage (one write transaction over the whole archive)."""
        gc(self.store)
        self.log.write("gc")

    # ---------------------------------------------------------------- continuity
    def _paths(self) -> ExecutionPaths:
        return ExecutionPaths.of(self.home, self.rng.choice(EXECUTIONS))

    def op_pin(self) -> None:
        """Pin a sentence to an execution's checkpoint.json (unpin one when it is full)."""
        paths = self._paths()
        self.counter += 1
        text = self._text(2, 12)
        self.log.write("pin-intent", exec=paths.execution_id, text=text)
        try:
            pin = add_pin(paths, self.rng.choice(PIN_KINDS), text)
        except ContinuityError:
            self._unpin(paths)
            return
        self.log.write("pin", exec=paths.execution_id, id=pin.id, text=pin.text)

    def op_unpin(self) -> None:
        """Unpin a random pin."""
        self._unpin(self._paths())

    def _unpin(self, paths: ExecutionPaths) -> None:
        current = read_checkpoint(paths)
        pins = current.all_pins() if current is not None else []
        if not pins:
            return
        _, pin = self.rng.choice(pins)
        self.log.write("unpin-intent", exec=paths.execution_id, id=pin.id)
        remove_pin(paths, pin.id)
        self.log.write("unpin", exec=paths.execution_id, id=pin.id)

    def op_journal(self) -> None:
        """Append a compaction journal line exactly as ``alpstore hook compact-record`` does."""
        paths = self._paths()
        self.counter += 1
        key = f"w{self.spec.worker}-{self.counter}"
        payload: dict[str, Any] = {
            "session_id": key,
            "trigger": self.rng.choice(("manual", "auto")),
            "transcript_path": "/dev/null",
        }
        if self.rng.random() < 0.5:
            payload["prompt_id"] = f"p{self.counter}"
        phase = self.rng.choice(("pre", "post"))
        try:
            current = read_checkpoint(paths)
            policy = current.policy_hash if current and current.policy_hash else None
        except Exception:  # as the hook: an unverifiable checkpoint only costs the policy hash
            policy = None
        source = source_of("claude", json.dumps(payload).encode("utf-8"))
        seq = next_sequence(paths, phase) if needs_sequence("claude", source) else None
        line = build_line(
            execution_id=paths.execution_id,
            policy_hash=policy,
            runtime="claude",
            phase=phase,
            source=source,
            seq=seq,
        )
        self.log.write("jl-intent", exec=paths.execution_id, key=key)
        append_line(paths, line)
        self.log.write("jl", exec=paths.execution_id, key=key)

    def op_rotate(self) -> None:
        """Rotate a journal once it is over the (small) threshold, as ``context status`` does."""
        paths = self._paths()
        self.log.write("rot-intent", exec=paths.execution_id)
        if rotate_if_needed(paths, at_bytes=ROTATE_AT):
            self.log.write("rot", exec=paths.execution_id)


def warm_up(directory: Path) -> None:
    """Run every operation a few times on a throwaway run root under ``directory``."""
    (directory / "root").mkdir()
    (directory / "home").mkdir()
    spec = WorkerSpec(
        str(directory / "root"), str(directory / "home"), 0, -1, str(directory / "log")
    )
    with Store.open(spec.root) as store:
        workload = Workload(spec, store, AckLog(spec.log_path))
        workload.load()
        workload.op_new_session()
        for _ in range(3):
            for name, _weight in OPS:
                getattr(workload, f"op_{name}")()
        verify(store)


def worker_main(spec: WorkerSpec, ready: Any = None) -> None:
    """Entry point of a worker process: open, load the model, signal ``ready``, write forever.

    An unexpected failure is logged as an ``error`` line and ends the process with status 3.
    """
    log = AckLog(spec.log_path)
    # libpq names this process's PostgreSQL connections, so that the parent can wait, after the
    # kill, until the server has finished with them (see torture._wait_for_backends).
    if spec.application_name is not None:
        os.environ["PGAPPNAME"] = spec.application_name
    try:
        store = Store.open(spec.root, url=spec.url)
        workload = Workload(spec, store, log)
        workload.load()
        log.write("ready", pid=os.getpid())
        if ready is not None:
            ready.set()
        workload.run(time.monotonic() + spec.max_seconds)
    except BaseException:
        log.write("error", error=traceback.format_exc())
        os._exit(3)
    os._exit(0)


__all__ = [
    "EXECUTIONS",
    "AckLog",
    "WorkerSpec",
    "Workload",
    "history_digest",
    "worker_main",
]
