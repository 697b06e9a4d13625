"""Views over a session's past: the checkpoint log, one checkpoint in full, and a replay.

Every checkpoint is compared with the one recorded just before it (the source checkpoint for the
first checkpoint of a fork), by blob ids over the part of the two views that is not structurally
shared, so a log or replay of a long session reads each entry about once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from alpstore.debug.entries import Delta, delta, load_entries
from alpstore.sessions import CheckpointInfo, Entry
from alpstore.views import EMPTY, READ_RANGE, View, ViewStore, clip, common_prefix, fetch_range

if TYPE_CHECKING:
    from alpstore.core.store import CoreStore as Store
    from alpstore.sessions import Session

Progress = Callable[[int, int], None]
"""A progress callback: ``(done, total)``."""


@dataclass(frozen=True)
class Change:
    """What one checkpoint changed against the one before it."""

    checkpoint: CheckpointInfo
    previous: CheckpointInfo | None
    delta: Delta
    added: list[tuple[int, Entry]]
    folded: list[tuple[int, Entry, int]] = field(default_factory=list)
    """``(position, summary, covered)`` for each summary this checkpoint added."""

    @property
    def summary(self) -> str:
        """A short text: ``+3``, ``-4 +1 (fold 4→1)``, ``fork of S@T``."""
        ck, prev = self.checkpoint, self.previous
        if ck.trigger == "fork" and prev is not None and prev.session != ck.session:
            return f"fork of {prev.session}@{prev.turn} ({ck.length} entries)"
        parts = []
        if self.delta.removed:
            parts.append(f"-{len(self.delta.removed)}")
        parts.append(f"+{len(self.delta.added)}")
        parts.extend(f"fold {n}→1" for _, _, n in self.folded)
        return " ".join(parts)


def _tail_ids(views: ViewStore, conn: Any, view: View, start: int) -> list[int]:
    ids: list[int] = []
    for seg, lo, hi in clip(views.chain(conn, view), start):
        ids.extend(r[0] for r in fetch_range(conn, READ_RANGE, seg, lo, hi))
    return ids


def view_delta(store: Store, old: View, new: View) -> Delta:
    """How ``new`` differs from ``old``, reading only what the two do not share structurally."""
    with store.db.read() as conn:
        shared = common_prefix(store.views.chain(conn, old), store.views.chain(conn, new))
        old_tail = _tail_ids(store.views, conn, old, shared)
        new_tail = _tail_ids(store.views, conn, new, shared)
    d = delta(old_tail, new_tail)
    return Delta(
        shared + d.common,
        [(shared + i, b) for i, b in d.removed],
        [(shared + i, b) for i, b in d.added],
    )


def _previous_map(store: Store, cks: list[CheckpointInfo]) -> dict[int, CheckpointInfo | None]:
    out: dict[int, CheckpointInfo | None] = {}
    prev: CheckpointInfo | None = None
    for ck in cks:
        if prev is None and ck.trigger == "fork":
            source = _fork_source(store, ck)
            out[ck.id] = source
        else:
            out[ck.id] = prev
        prev = ck
    return out


def _fork_source(store: Store, ck: CheckpointInfo) -> CheckpointInfo | None:
    session = store.get_session(ck.session)
    source = session.info(refresh=False).source_checkpoint
    return store.get_checkpoint(source) if source is not None else None


def changes(store: Store, session: Session, *, progress: Progress | None = None) -> list[Change]:
    """Every checkpoint of ``session`` (including those cut by backtracks), oldest first, with
    what it changed (the added entries hydrated).
    """
    cks = session.checkpoints(include_abandoned=True)
    previous = _previous_map(store, cks)
    out: list[Change] = []
    for n, ck in enumerate(cks, 1):
        prev = previous[ck.id]
        if ck.trigger == "fork" and prev is not None and prev.session != ck.session:
            d = Delta(ck.length, [], [])
        else:
            d = view_delta(store, prev.view if prev else EMPTY, ck.view)
        loaded = load_entries(store, [b for _, b in d.added])
        added = [(i, loaded[b]) for i, b in d.added]
        folded = [(i, e, len(e.covers)) for i, e in added if e.kind == "summary"]
        out.append(Change(ck, prev, d, added, folded))
        if progress is not None:
            progress(n, len(cks))
    return out


@dataclass(frozen=True)
class TimelineItem:
    """One line of a session's timeline: a checkpoint's change, a backtrack, or a decision."""

    at: float
    kind: str
    change: Change | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def timeline(
    store: Store, session: Session, *, progress: Progress | None = None
) -> list[TimelineItem]:
    """Checkpoints, backtracks (with their steering text) and recorded decisions, in the order
    they happened.
    """
    items = [
        TimelineItem(c.checkpoint.created_at, "checkpoint", c)
        for c in changes(store, session, progress=progress)
    ]
    for bt in store.session_backtracks(session.id):
        items.append(TimelineItem(bt["at"], "backtrack", None, bt))
    for ev in store.session_events(session.id):
        if ev["kind"] == "status" and ev["detail"].get("status") == "active":
            continue
        detail = {"checkpoint": ev["checkpoint"], **ev["detail"]}
        items.append(TimelineItem(ev["at"], ev["kind"], None, detail))
    order = {"checkpoint": 0, "backtrack": 2}
    items.sort(key=lambda t: (t.at, order.get(t.kind, 1)))
    return items


@dataclass(frozen=True)
class Shown:
    """A checkpoint in full: its row, its hydrated history and its state documents."""

    checkpoint: CheckpointInfo
    entries: list[Entry]
    kernel: Any | None
    working_memory: Any | None


def show(store: Store, ref: str) -> Shown:
    """Resolve ``ref`` (id, SESSION@TURN, SESSION@latest) and hydrate it.

    Raises:
        NotFoundError: unknown session, turn or checkpoint.
    """
    ck = store.resolve_checkpoint(ref)
    kernel, wm = store.checkpoint_state(ck)
    return Shown(ck, store.hydrate(ck), kernel, wm)
