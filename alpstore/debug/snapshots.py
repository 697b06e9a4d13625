"""In-process snapshots (SN-1, SN-2): a tree of content-addressed states, a debug cursor that
walks it without touching the live run, branches that vanish on exit unless promoted or
persisted, and a pause that blocks the next append until resume.

A snapshot is a pointer to the live covering head (an immutable, structurally shared view), plus
any messages appended in a branch and not yet archived, plus copies of the kernel and
working-memory documents. Taking one writes nothing to disk. Its id is the BLAKE3 of that state,
so the same state taken twice is the same node. Persisting a snapshot turns it into a shallow
checkpoint of the session (trigger ``snapshot``); promoting it persists it, then resumes the
session there — an O(1) move of the head, as in mas-lab, where a promoted or persisted snapshot
becomes a checkpoint.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

import blake3

from alpstore.archive.reading import encode
from alpstore.codec import canonical_json, parse_json
from alpstore.db.names import BLOB_MESSAGE, BLOB_STATE
from alpstore.debug.entries import to_entry
from alpstore.errors import NotFoundError, SessionStateError, UsageError
from alpstore.sessions import CheckpointInfo, Entry, count_user_turns
from alpstore.views import View

if TYPE_CHECKING:
    from alpstore.sessions import Session

SNAPSHOT_TRIGGER = "snapshot"
_DOMAIN = b"alpstore-snapshot-v1\0"


@dataclass(frozen=True)
class Snapshot:
    """One node of the tree: an archived view, pending branch messages, and state copies."""

    id: str
    """BLAKE3-256 hex of the state (history digests, turn, kernel, working memory)."""
    parent: str | None
    view: View
    pending: tuple[Any, ...]
    """Messages appended in a branch after ``view``; not in the archive until persisted."""
    kernel: Any | None
    working_memory: Any | None
    turn: int
    label: str | None = None

    @property
    def length(self) -> int:
        """Entries in the snapshot's covering list."""
        return self.view.length + len(self.pending)


def _frozen(value: Any) -> Any:
    """A private deep copy of a JSON document (canonical round trip; refuses non-JSON)."""
    return None if value is None else parse_json(canonical_json(value), where="snapshot state")


def spec_revision(manifest: Any | None) -> str | None:
    """SHA-256 of the session's manifest (sorted keys, compact, UTF-8), as mas-lab hashes it."""
    if manifest is None:
        return None
    return hashlib.sha256(canonical_json(manifest)).hexdigest()


class SnapshotTree:
    """Snapshots of one session's live run, and the cursor, branches and pause gate over it."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.store = session.store
        self.nodes: dict[str, Snapshot] = {}
        self.cursor: str | None = None
        self.live: str | None = None
        """The snapshot the live run last started from or was taken at."""
        self._digests: tuple[View, list[bytes]] = (View(None, 0), [])
        self._gate = threading.Condition()
        self._paused = session.info().status == "paused"

    # ------------------------------------------------------------ taking and walking
    def take_snapshot(
        self,
        *,
        kernel: Any | None = None,
        working_memory: Any | None = None,
        label: str | None = None,
    ) -> Snapshot:
        """Snapshot the live run (no disk write); it becomes a child of the live node."""
        info = self.session.info()
        snap = self._add(self.live, info.head, (), kernel, working_memory, info.turn, label)
        self.live = snap.id
        return snap

    def _head_digests(self, view: View) -> list[bytes]:
        """Digests of a view's entries; reads only what extends the last view seen."""
        last_view, last = self._digests
        from alpstore.debug.history import _tail_ids

        with self.store.db.read() as conn:
            shared = 0
            if last_view.segment_id is not None and view.segment_id is not None:
                from alpstore.views import common_prefix

                shared = common_prefix(
                    self.store.views.chain(conn, last_view), self.store.views.chain(conn, view)
                )
            ids = _tail_ids(self.store.views, conn, view, shared)
            digests = [*last[:shared], *self.store.digests_for_ids(conn, ids)]
        self._digests = (view, digests)
        return digests

    def _add(
        self,
        parent: str | None,
        view: View,
        pending: tuple[Any, ...],
        kernel: Any | None,
        working_memory: Any | None,
        turn: int,
        label: str | None,
    ) -> Snapshot:
        kernel, working_memory = _frozen(kernel), _frozen(working_memory)
        h = blake3.blake3(_DOMAIN)
        for d in self._head_digests(view):
            h.update(d)
        for m in pending:
            h.update(encode(m, BLOB_MESSAGE)[0])
        h.update(canonical_json({"kernel": kernel, "turn": turn, "working_memory": working_memory}))
        sid = h.hexdigest()
        if sid in self.nodes:
            return self.nodes[sid]
        snap = Snapshot(sid, parent, view, pending, kernel, working_memory, turn, label)
        self.nodes[sid] = snap
        return snap

    def get(self, ref: str) -> Snapshot:
        """A snapshot by id or unique id prefix (≥ 4 hex digits).

        Raises:
            NotFoundError: no such snapshot, or the prefix is ambiguous.
        """
        if ref in self.nodes:
            return self.nodes[ref]
        found = [s for k, s in self.nodes.items() if len(ref) >= 4 and k.startswith(ref)]
        if len(found) != 1:
            what = "is ambiguous" if found else "is not in this process's snapshot tree"
            raise NotFoundError(f"snapshot {ref!r} {what}")
        return found[0]

    def children(self, ref: str | None) -> list[Snapshot]:
        """The snapshots taken from ``ref`` (None: the roots), in the order they were taken."""
        return [s for s in self.nodes.values() if s.parent == ref]

    def walk(self, ref: str) -> Snapshot:
        """Move the debug cursor to a snapshot; the live run does not change."""
        snap = self.get(ref)
        self.cursor = snap.id
        return snap

    def up(self) -> Snapshot:
        """Move the cursor to its parent.

        Raises:
            UsageError: the cursor is unset or at a root.
        """
        here = self._at_cursor()
        if here.parent is None:
            raise UsageError(f"snapshot {here.id[:12]} is a root; the cursor cannot go up")
        return self.walk(here.parent)

    def _at_cursor(self) -> Snapshot:
        if self.cursor is None:
            raise UsageError("the debug cursor is not on a snapshot; walk() to one first")
        return self.nodes[self.cursor]

    def history(self, ref: str | None = None) -> list[Entry]:
        """The hydrated covering list of a snapshot (default: the one under the cursor)."""
        snap = self.get(ref) if ref is not None else self._at_cursor()
        out = self.store.hydrate_view(snap.view)
        out.extend(to_entry(*encode(m, BLOB_MESSAGE)[:2], m) for m in snap.pending)
        return out

    # ------------------------------------------------------------ persist and promote
    def persist(self, ref: str, *, label: str | None = None) -> CheckpointInfo:
        """Write a snapshot as a shallow checkpoint of the session (the live run is unchanged).

        Raises:
            SessionStateError: the session is terminated.
        """
        return self._persist(self.get(ref), label, "persist")

    def _persist(self, snap: Snapshot, label: str | None, action: str) -> CheckpointInfo:
        store, session = self.store, self.session
        with store.db.atomic() as conn:
            info = session.info()
            if info.status == "terminated":
                raise SessionStateError(f"session {info.uuid} is terminated; cannot persist")
            view = snap.view
            if snap.pending:
                ids = store.archive.store_encoded(
                    conn, [encode(m, BLOB_MESSAGE) for m in snap.pending]
                )
                view = store.views.append(conn, view, info.id, ids)
            docs = [v for v in (snap.kernel, snap.working_memory) if v is not None]
            state = store.archive.store_encoded(conn, [encode(v, BLOB_STATE) for v in docs])
            kid = state.pop(0) if snap.kernel is not None else None
            wid = state.pop(0) if snap.working_memory is not None else None
            ck = store.insert_checkpoint(
                conn,
                info,
                view,
                turn=snap.turn,
                label=label or snap.label or f"snapshot-{snap.id[:12]}",
                trigger=SNAPSHOT_TRIGGER,
                kernel_id=kid,
                wm_id=wid,
            )
            self._record(conn, action, snap, ck)
        store.archive.after_commit()
        return ck

    def promote(self, ref: str) -> CheckpointInfo:
        """Make a snapshot the live run: persist it, then resume the session there (O(1)).

        Raises:
            SessionStateError: the session is paused or terminated.
        """
        if self.session.info().status == "paused":
            raise SessionStateError(
                f"session {self.session.uuid} is paused; resume it before promoting a snapshot"
            )
        snap = self.get(ref)
        with self.store.db.atomic():
            ck = self._persist(snap, None, "promote")
            self.session.resume(ck)
        self.live = snap.id
        return ck

    def _record(self, conn: Any, action: str, snap: Snapshot, ck: CheckpointInfo) -> None:
        detail = {
            "action": action,
            "snapshot": snap.id,
            "turn": snap.turn,
            "length": ck.length,
            "spec_revision": spec_revision(self.session.manifest()),
        }
        self.store.record_event(conn, self.session.id, "snapshot", ck.id, detail)

    # ------------------------------------------------------------ branches
    def branch(self, ref: str | None = None) -> Branch:
        """A scratch continuation of snapshot ``ref`` (default: a new snapshot of the live run),
        discarded on exit unless promoted or persisted.
        """
        base = self.get(ref) if ref is not None else self.take_snapshot()
        return Branch(self, base)

    def discard(self, ids: Sequence[str]) -> None:
        """Drop snapshots from the tree (a discarded branch's own snapshots)."""
        for sid in ids:
            self.nodes.pop(sid, None)
            if self.cursor == sid:
                self.cursor = None

    # ------------------------------------------------------------ pause
    def pause(self) -> None:
        """Pause the session: the next append blocks (here) or is refused (elsewhere)."""
        with self._gate:
            self.session.set_status("paused")
            self._paused = True

    def resume(self) -> None:
        """Unpause the session and wake appends waiting on it."""
        with self._gate:
            self.session.set_status("active")
            self._paused = False
            self._gate.notify_all()

    @property
    def paused(self) -> bool:
        """True while the session is paused by this tree."""
        return self._paused

    def append(
        self,
        messages: Sequence[Any],
        *,
        checkpoint: bool = False,
        timeout: float | None = None,
    ) -> CheckpointInfo | None:
        """Append a turn to the live run, waiting while it is paused (every-turn checkpoint
        when ``checkpoint``). Returns the checkpoint, if one was taken.

        Raises:
            SessionStateError: still paused after ``timeout`` seconds, or terminated.
        """
        with self._gate:
            if not self._gate.wait_for(lambda: not self._paused, timeout):
                raise SessionStateError(
                    f"session {self.session.uuid} is paused; the append waited {timeout} s",
                    hint="resume the session to let the next turn in",
                )
            if checkpoint:
                return self.session.commit_turn(messages)
            self.session.append(messages)
            return None


class Branch:
    """An in-memory continuation of a snapshot; nothing is written unless promoted/persisted."""

    def __init__(self, tree: SnapshotTree, base: Snapshot) -> None:
        self.tree = tree
        self.base = base
        self.tip = base
        self.pending: list[Any] = list(base.pending)
        self.kernel = base.kernel
        self.working_memory = base.working_memory
        self.turn = base.turn
        self.own: list[str] = []
        self.kept = False
        self.closed = False

    def __enter__(self) -> Branch:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """End the branch: unless promoted or persisted, its snapshots leave the tree."""
        if not self.kept:
            self.tree.discard(self.own)
        self.closed = True

    def _open(self) -> None:
        if self.closed:
            raise UsageError("this branch was closed; start another with SnapshotTree.branch()")

    def append(self, messages: Sequence[Any]) -> None:
        """Append messages to the branch only (validated now, archived only if kept).

        Raises:
            CanonicalJSONError: a message is not canonical JSON.
        """
        self._open()
        checked = [_frozen(m) for m in messages]
        self.pending.extend(checked)
        self.turn += count_user_turns(checked)

    def set_state(self, *, kernel: Any | None = None, working_memory: Any | None = None) -> None:
        """Replace the branch's kernel and/or working-memory documents."""
        self._open()
        if kernel is not None:
            self.kernel = _frozen(kernel)
        if working_memory is not None:
            self.working_memory = _frozen(working_memory)

    def snapshot(self, *, label: str | None = None) -> Snapshot:
        """Snapshot the branch's current state as a child of its last snapshot."""
        self._open()
        existed = set(self.tree.nodes)
        snap = self.tree._add(
            self.tip.id,
            self.base.view,
            tuple(self.pending),
            self.kernel,
            self.working_memory,
            self.turn,
            label,
        )
        # a branch owns only what it created: reaching a state the tree already holds (same
        # content, same id) must not remove that node when the branch is discarded
        if snap.id not in existed and snap.id not in self.own:
            self.own.append(snap.id)
        self.tip = snap
        return snap

    def history(self) -> list[Entry]:
        """The branch's covering list, hydrated (archived prefix plus pending messages)."""
        self._open()
        out = self.tree.store.hydrate_view(self.base.view)
        out.extend(to_entry(*encode(m, BLOB_MESSAGE)[:2], m) for m in self.pending)
        return out

    def persist(self, *, label: str | None = None) -> CheckpointInfo:
        """Write the branch's state as a checkpoint; the live run is unchanged."""
        snap = self.snapshot(label=label)
        self.kept = True
        return self.tree.persist(snap.id, label=label)

    def promote(self) -> CheckpointInfo:
        """Make the branch the live run (persisted as a checkpoint, then resumed)."""
        snap = self.snapshot()
        ck = self.tree.promote(snap.id)
        self.kept = True
        return ck
