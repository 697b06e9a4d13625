"""The diff page: what ``debug diff`` reports for two checkpoints, one page of rows at a time.

Only the page's entries are hydrated. When one view extends the other (the usual case within a
session) not even the ids of the whole tail are read: the tail's summaries come from one joined
scan and the page's ids from its own positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from alpstore.db import raw as rsql
from alpstore.db.members import packed_by_id, rows_by_id
from alpstore.db.names import BLOB_SUMMARY
from alpstore.debug.diff import _covered, json_diff
from alpstore.debug.entries import load_entries
from alpstore.debug.history import view_delta
from alpstore.sessions import CheckpointInfo, Entry
from alpstore.ui.queries import ids_at
from alpstore.views import clip, common_prefix

if TYPE_CHECKING:
    from alpstore.debug.diff import JsonChange
    from alpstore.store import Store

DIFF_PAGE = 200
"""Rows (changed, removed or added entries) per diff page."""
SUMMARY_POSITIONS = (
    "SELECT e.position, e.blob_id, b.id IS NULL FROM segment_entries e LEFT JOIN blob_rows b "
    "ON b.id = e.blob_id WHERE e.segment_id = ? AND e.position >= ? AND e.position < ? "
    "AND (b.kind = ? OR b.id IS NULL)"
)
"""A range's loose summaries, and its packed entries (kind in their frame's row: 0010) by id.
Not the ``blobs`` view: its packed half is every frame's members, unnested for each row."""


@dataclass(frozen=True)
class DiffRow:
    """One row of a diff: an entry removed (position in A), added (position in B), or changed
    (removed and added at the same position).
    """

    op: str
    position: int
    old: Entry | None
    new: Entry | None


@dataclass(frozen=True)
class FoldRow:
    """A summary in B that replaced entries of A."""

    position: int
    summary: Entry
    replaced: int
    shown: list[tuple[int, Entry]]


@dataclass(frozen=True)
class DiffPage:
    """``debug diff A B``, one page of its entry rows at a time."""

    a: CheckpointInfo
    b: CheckpointInfo
    common: int
    removed: int
    added: int
    changed: int
    folds: list[FoldRow]
    rows: list[DiffRow]
    page: int
    pages: int
    kernel: list[JsonChange]
    working_memory: list[JsonChange]


def _summary_ids(store: Store, ids: list[int]) -> set[int]:
    with store.db.read() as conn:
        return {int(r[0]) for r in rows_by_id(conn, ids) if r[2] == BLOB_SUMMARY}


def _extension_diff(
    store: Store,
    a: CheckpointInfo,
    b: CheckpointInfo,
    chains: tuple[Any, Any],
    shared: int,
    page: int,
) -> tuple[int, int, list[FoldRow], list[DiffRow], int, int]:
    """The diff when one view extends the other (the usual case within a session): the
    longer one's tail is all added (or removed), so only the page's ids are read, and the
    tail's summaries come from one joined scan instead of an id list.
    """
    grew = b.length > shared
    chain, length = (chains[1], b.length) if grew else (chains[0], a.length)
    summary_pos: list[int] = []
    if grew:
        packed: dict[int, list[int]] = {}
        with store.db.read() as conn:
            for seg, lo, hi in clip(chain, shared):
                for pos, blob_id, is_packed in rsql.fetchall(
                    conn, SUMMARY_POSITIONS, (seg, lo, hi, BLOB_SUMMARY)
                ):
                    if is_packed:
                        packed.setdefault(int(blob_id), []).append(int(pos))
                    else:
                        summary_pos.append(int(pos))
            for row in packed_by_id(conn, list(packed)):
                if row[2] == BLOB_SUMMARY:
                    summary_pos.extend(packed[int(row[0])])
        summary_pos.sort()
    folds: list[FoldRow] = []
    if summary_pos:
        ids = ids_at(store, chain, summary_pos)
        loaded = load_entries(store, ids.values())
        folds = [FoldRow(p, loaded[ids[p]], 0, []) for p in summary_pos]
    skip = set(summary_pos)
    keys = [p for p in range(shared, length) if p not in skip]
    pages = max((len(keys) + DIFF_PAGE - 1) // DIFF_PAGE, 1)
    page = min(max(page, 0), pages - 1)
    window = keys[page * DIFF_PAGE : (page + 1) * DIFF_PAGE]
    ids = ids_at(store, chain, window)
    hydrated = load_entries(store, ids.values())
    rows = [
        DiffRow("added", p, None, hydrated[ids[p]])
        if grew
        else DiffRow("removed", p, hydrated[ids[p]], None)
        for p in window
    ]
    removed, added = (0, len(keys)) if grew else (len(keys), 0)
    return removed, added, folds, rows, page, pages


def diff_page(store: Store, a: CheckpointInfo, b: CheckpointInfo, page: int) -> DiffPage:
    """What ``debug diff`` reports for A → B (same removed, added and folded entries), with
    a removed and an added entry at the same position paired as "changed"; only the rows of
    page ``page`` are hydrated.
    """
    ka, wa = store.checkpoint_state(a)
    kb, wb = store.checkpoint_state(b)
    kernel, wm = json_diff(ka, kb, "$"), json_diff(wa, wb, "$")
    with store.db.read() as conn:
        chains = (store.views.chain(conn, a.view), store.views.chain(conn, b.view))
    shared = common_prefix(*chains)
    if shared in (a.length, b.length):
        removed_n, added_n, folds_, rows_, page, pages_ = _extension_diff(
            store, a, b, chains, shared, page
        )
        return DiffPage(
            a, b, shared, removed_n, added_n, 0, folds_, rows_, page, pages_, kernel, wm
        )
    d = view_delta(store, a.view, b.view)
    summaries = _summary_ids(store, [i for _, i in d.added])
    folds: list[FoldRow] = []
    taken: set[int] = set()
    removed = list(d.removed)
    if summaries:
        loaded = load_entries(store, summaries)
        with store.db.read() as conn:
            digests = store.digests_for_ids(conn, [i for _, i in removed])
        by_pos = {p: dg for (p, _), dg in zip(removed, digests, strict=True)}
        for pos, i in d.added:
            if i not in summaries:
                continue
            covered = _covered(store, loaded[i])
            replaced = [(p, bid) for p, bid in removed if p not in taken and by_pos[p] in covered]
            taken.update(p for p, _ in replaced)
            shown_ids = [bid for _, bid in replaced[:20]]
            shown = load_entries(store, shown_ids)
            folds.append(
                FoldRow(
                    pos, loaded[i], len(replaced), [(p, shown[bid]) for p, bid in replaced[:20]]
                )
            )
    fold_positions = {f.position for f in folds}
    rem = {p: bid for p, bid in removed if p not in taken}
    add = {p: bid for p, bid in d.added if p not in fold_positions}
    keys = sorted(set(rem) | set(add))
    pages = max((len(keys) + DIFF_PAGE - 1) // DIFF_PAGE, 1)
    page = min(max(page, 0), pages - 1)
    window = keys[page * DIFF_PAGE : (page + 1) * DIFF_PAGE]
    hydrated = load_entries(
        store, [rem[p] for p in window if p in rem] + [add[p] for p in window if p in add]
    )
    rows = []
    for p in window:
        old = hydrated[rem[p]] if p in rem else None
        new = hydrated[add[p]] if p in add else None
        op = (
            "changed"
            if old is not None and new is not None
            else "removed"
            if new is None
            else "added"
        )
        rows.append(DiffRow(op, p, old, new))
    return DiffPage(
        a,
        b,
        d.common,
        len(rem),
        len(add),
        len(set(rem) & set(add)),
        folds,
        rows,
        page,
        pages,
        kernel,
        wm,
    )
