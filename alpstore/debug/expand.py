"""Rewinding across compaction: the raw leaves behind every summary of a checkpoint's head.

A fold keeps the folded entries in the archive and the summary's digest commits to them, so
the history as it was before compaction can always be rebuilt — and forked from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from alpstore.codec import Digest
from alpstore.debug.entries import blob_ids_for, load_entries
from alpstore.errors import IntegrityError
from alpstore.sessions import CheckpointInfo, Entry

if TYPE_CHECKING:
    from alpstore.core.store import CoreStore as Store
    from alpstore.sessions import Session

MAX_DEPTH = 64
"""Summaries nest at most this deep (a guard against a damaged archive)."""
EXPAND_TRIGGER = "expand"


@dataclass(frozen=True)
class ExpandedRow:
    """One leaf of the expanded history and where it came from."""

    position: int
    """Index of the head entry (a message, or the summary) this leaf belongs to."""
    entry: Entry
    summaries: tuple[Entry, ...] = ()
    """The summaries it was folded into, outermost first (empty for a leaf of the head)."""


Path_ = tuple[Entry, ...]


def _leaves(store: Store, summary: Entry, path: Path_) -> list[tuple[Entry, Path_]]:
    if len(path) > MAX_DEPTH:
        raise IntegrityError(f"summary {summary.hex}: nested deeper than {MAX_DEPTH} levels")
    ids = blob_ids_for(store, [Digest(d) for d in summary.covers])
    missing = [d for d in summary.covers if d not in ids]
    if missing:
        raise IntegrityError(
            f"summary {summary.hex} covers {missing[0].hex()}, which is not in the archive"
        )
    loaded = load_entries(store, ids.values())
    out: list[tuple[Entry, Path_]] = []
    for d in summary.covers:
        e = loaded[ids[d]]
        if e.kind == "summary":
            out.extend(_leaves(store, e, (*path, e)))
        else:
            out.append((e, path))
    return out


def expand_rows(store: Store, checkpoint: CheckpointInfo) -> list[ExpandedRow]:
    """The checkpoint's head with every summary replaced, recursively, by the leaves it covers."""
    rows: list[ExpandedRow] = []
    for i, e in enumerate(store.hydrate(checkpoint)):
        if e.kind != "summary":
            rows.append(ExpandedRow(i, e))
            continue
        rows.extend(ExpandedRow(i, leaf, path) for leaf, path in _leaves(store, e, (e,)))
    return rows


def expanded_history(store: Store, checkpoint: CheckpointInfo) -> list[Entry]:
    """The raw leaves of a checkpoint's head, in order (summaries expanded recursively).

    Raises:
        IntegrityError: a summary covers an entry that is missing from the archive.
    """
    return [r.entry for r in expand_rows(store, checkpoint)]


def fork_expanded(
    store: Store,
    checkpoint: CheckpointInfo,
    *,
    session_id: str | None = None,
    name: str | None = None,
) -> Session:
    """Fork a session from ``checkpoint`` whose history is the expanded one (no summaries).

    One transaction: the fork (parent and source recorded, first checkpoint at the fork point),
    the head rewritten from the first summary on, and a checkpoint ``expand`` at the same turn.

    Raises:
        IntegrityError: a summary covers an entry that is missing from the archive.
        UsageError: the new session id is taken.
    """
    head = store.hydrate(checkpoint)
    first = next((i for i, e in enumerate(head) if e.kind == "summary"), None)
    leaves = expanded_history(store, checkpoint) if first is not None else []
    kernel, wm = store.checkpoint_state(checkpoint)
    with store.db.atomic():
        child = store.fork_checkpoint(checkpoint, session_id=session_id, name=name)
        if first is not None:
            child.truncate_and_append(first, [e.value for e in leaves[first:]])
            ck = child.checkpoint(
                kernel=kernel,
                working_memory=wm,
                trigger=EXPAND_TRIGGER,
                turn=checkpoint.turn,
            )
            child.record_decision(
                EXPAND_TRIGGER,
                {
                    "from_checkpoint": checkpoint.id,
                    "summaries": sum(1 for e in head if e.kind == "summary"),
                    "entries": len(leaves),
                },
                ck.id,
            )
    return child
