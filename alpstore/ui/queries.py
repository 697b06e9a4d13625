"""What each page of the inspector shows, read through the library's read APIs, one window at a
time: a page of a timeline, a window of a conversation, a page of a diff. Nothing here renders
HTML or writes.

Big sessions stay cheap because every page reads ids first (structurally shared prefixes are
skipped), then hydrates only the entries it shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import func, select

from alpstore.codec import parse_json
from alpstore.core.rows import SESSION_COLUMNS, SessionRow
from alpstore.db import raw as rsql
from alpstore.db.tables import checkpoints, zstd_dicts
from alpstore.debug.entries import load_entries
from alpstore.debug.history import view_delta
from alpstore.debug.lineage import CHUNK, Node, backtracks_of, checkpoint_turns, finite_between
from alpstore.errors import IntegrityError, NotFoundError
from alpstore.sessions import CheckpointInfo, Entry, SessionInfo
from alpstore.store import checkpoint_deltas
from alpstore.views import EMPTY, fetch_range

if TYPE_CHECKING:
    from alpstore.store import Store

TIMELINE_PAGE = 100
"""Checkpoints per timeline page."""
CONVERSATION_WINDOW = 200
"""Entries per conversation window."""
EXPAND_LIMIT = 200
"""Leaves shown inline under one summary; the rest are counted."""
EXPAND_DEPTH = 16


_SESSIONS = f"SELECT {SESSION_COLUMNS} FROM sessions"

ENTRY_POSITIONS = (
    "SELECT e.position, e.blob_id FROM {entries} WHERE e.position >= ? AND e.position < ?"
)
"""A ``views.range_sql`` template: the runs holding the range found by their key."""


def ids_at(store: Store, chain: list[tuple[int, int, int]], positions: list[int]) -> dict[int, int]:
    """Blob ids at the given positions of a view (one range read per segment they span)."""
    if not positions:
        return {}
    lo, hi = min(positions), max(positions) + 1
    wanted = set(positions)
    out: dict[int, int] = {}
    with store.db.read() as conn:
        for seg, s_lo, s_hi in chain:
            a, b = max(s_lo, lo), min(s_hi, hi)
            if a < b:
                for pos, blob in fetch_range(conn, ENTRY_POSITIONS, seg, a, b):
                    if int(pos) in wanted:
                        out[int(pos)] = int(blob)
    return out


# ---------------------------------------------------------------- timeline
@dataclass(frozen=True)
class Marker:
    """Something that happened between checkpoints: a backtrack, fold, fork or decision."""

    kind: str
    at: float
    detail: dict[str, Any]


@dataclass(frozen=True)
class TimelineRow:
    """One checkpoint with what it added and what happened right after it."""

    checkpoint: CheckpointInfo
    entries_added: int
    bytes_added: int
    markers: list[Marker] = field(default_factory=list)
    entries_removed: int = 0

    @property
    def change(self) -> str:
        """What it changed, as ``debug log`` says it: ``+3``, ``-4 +1``."""
        removed = f"-{self.entries_removed} " if self.entries_removed else ""
        return f"{removed}+{self.entries_added}"


@dataclass(frozen=True)
class TimelinePage:
    """A page of a session's checkpoints (all of them, cut ones included), in order."""

    session: SessionInfo
    rows: list[TimelineRow]
    before: list[Marker]
    """Markers older than the first checkpoint of the page (first page only)."""
    page: int
    pages: int
    total: int


def _checkpoint_rows(store: Store, info: SessionInfo, offset: int, limit: int) -> list[Any]:
    with store.db.read() as conn:
        return list(
            conn.execute(
                select(checkpoints)
                .where(checkpoints.c.session_id == info.id)
                .order_by(checkpoints.c.seq)
                .offset(offset)
                .limit(limit)
            ).all()
        )


def count_checkpoints(store: Store, info: SessionInfo) -> int:
    """All of a session's checkpoints, cut ones included."""
    with store.db.read() as conn:
        return int(
            conn.execute(
                select(func.count())
                .select_from(checkpoints)
                .where(checkpoints.c.session_id == info.id)
            ).scalar_one()
        )


EVENTS_PER_PAGE: Final = 500
"""Events a timeline page shows at most (issue 39: 100,000 events in one span made a 14 MB
page); the rest are counted in one marker."""


def _markers(store: Store, info: SessionInfo, lo: float, hi: float) -> list[Marker]:
    """The backtracks and events of ``info`` made in ``[lo, hi)``: read by time, so a page (or a
    poll) reads only the markers it shows, however many the session has.
    """
    between = (lo, hi)
    bts = backtracks_of(store, [info.id], between=between).get(info.id, [])
    out = [Marker("backtrack", bt["at"], bt) for bt in bts]
    where = "WHERE session_id = ? AND created_at >= ? AND created_at < ?"
    params = (info.id, *finite_between(between))
    omitted = 0
    with store.db.read() as conn:
        rows = rsql.fetchall(
            conn,
            "SELECT kind, checkpoint_id, created_at, detail FROM session_events "
            f"{where} ORDER BY id LIMIT {EVENTS_PER_PAGE + 1}",
            params,
        )
        if len(rows) > EVENTS_PER_PAGE:  # a flood of events: the page shows the first ones
            rows = rows[:EVENTS_PER_PAGE]
            total = rsql.fetchone(conn, f"SELECT COUNT(*) FROM session_events {where}", params)
            omitted = int(total[0]) - EVENTS_PER_PAGE
    if omitted:
        out.append(Marker("omitted", float(rows[-1][2]), {"omitted": omitted}))
    for kind, checkpoint, at, raw in rows:
        value = parse_json(raw, where="event") if raw else {}
        # record_decision stores whatever JSON it is given as the detail
        detail = value if isinstance(value, dict) else {"detail": value}
        if kind == "status" and detail.get("status") == "active":
            continue
        if kind == "import":  # how far a transcript was read: bookkeeping, not a step
            continue
        out.append(Marker(kind, float(at), {"checkpoint": checkpoint, **detail}))
    out.sort(key=lambda m: m.at)
    return out


def timeline_page(store: Store, info: SessionInfo, page: int | None) -> TimelinePage:
    """Page ``page`` (0-based; None: the last) of a session's timeline."""
    total = count_checkpoints(store, info)
    pages = max((total + TIMELINE_PAGE - 1) // TIMELINE_PAGE, 1)
    page = pages - 1 if page is None else min(max(page, 0), pages - 1)
    rows = _checkpoint_rows(store, info, page * TIMELINE_PAGE, TIMELINE_PAGE + 1)
    following = rows[TIMELINE_PAGE] if len(rows) > TIMELINE_PAGE else None
    cks = [store._ck(r, info.uuid) for r in rows[:TIMELINE_PAGE]]
    lo = float("-inf") if page == 0 or not cks else cks[0].created_at
    return TimelinePage(
        info, *_rows_with_markers(store, info, cks, lo, following), page, pages, total
    )


def checkpoints_after(store: Store, info: SessionInfo, seq: int) -> list[TimelineRow]:
    """The checkpoints recorded after ``seq`` (what a live timeline polls for)."""
    with store.db.read() as conn:
        rows = conn.execute(
            select(checkpoints)
            .where(checkpoints.c.session_id == info.id, checkpoints.c.seq > seq)
            .order_by(checkpoints.c.seq)
            .limit(TIMELINE_PAGE)
        ).all()
    cks = [store._ck(r, info.uuid) for r in rows]
    lo = cks[0].created_at if cks else 0.0
    return _rows_with_markers(store, info, cks, lo, None)[0]


def _baseline(store: Store, info: SessionInfo, first: CheckpointInfo) -> CheckpointInfo | None:
    """What the first checkpoint of a page is compared with: the one before it, or for the
    first checkpoint of a fork its source checkpoint.
    """
    with store.db.read() as conn:
        row = conn.execute(
            select(checkpoints)
            .where(checkpoints.c.session_id == info.id, checkpoints.c.seq < first.seq)
            .order_by(checkpoints.c.seq.desc())
            .limit(1)
        ).first()
    if row is not None:
        return store._ck(row, info.uuid)
    if info.source_checkpoint is not None:
        try:
            return store.get_checkpoint(info.source_checkpoint)
        except NotFoundError:
            return None
    return None


def _rows_with_markers(
    store: Store,
    info: SessionInfo,
    cks: list[CheckpointInfo],
    lo: float,
    following: Any | None,
) -> tuple[list[TimelineRow], list[Marker]]:
    """The checkpoints with what each added, and the markers between ``lo`` and the next
    page's first checkpoint placed after the checkpoint they followed.
    """
    if not cks:
        return [], []
    base = _baseline(store, info, cks[0])
    deltas = _changes(store, base, cks)
    hi = float(following.created_at) if following is not None else float("inf")
    markers = _markers(store, info, lo, hi)
    rows: list[TimelineRow] = []
    before: list[Marker] = []
    position = 0
    for m in markers:
        while position < len(cks) and cks[position].created_at <= m.at:
            position += 1
        if position == 0:
            before.append(m)
        else:
            rows_index = position - 1
            while len(rows) <= rows_index:
                ck = cks[len(rows)]
                rows.append(_row(ck, deltas[ck.id]))
            rows[rows_index].markers.append(m)
    while len(rows) < len(cks):
        ck = cks[len(rows)]
        rows.append(_row(ck, deltas[ck.id]))
    return rows, before


def _row(ck: CheckpointInfo, change: tuple[int, int, int]) -> TimelineRow:
    added, size, removed = change
    return TimelineRow(ck, added, size, entries_removed=removed)


def _changes(
    store: Store, base: CheckpointInfo | None, cks: list[CheckpointInfo]
) -> dict[int, tuple[int, int, int]]:
    """Per checkpoint ``(entries added, bytes added, entries removed)`` against the one before
    it, counted as ``debug log`` counts them: a checkpoint that extends the one before in
    place (the common case) is counted from the structural delta alone; one that does not (a
    backtrack's or a LangGraph branch's, a fold) is compared entry by entry with it.
    """
    deltas = checkpoint_deltas(store, [base, *cks] if base is not None else cks)
    out: dict[int, tuple[int, int, int]] = {}
    prev = base
    for ck in cks:
        added, size = deltas[ck.id]
        removed = 0
        if prev is not None and (
            ck.view.segment_id != prev.view.segment_id or ck.length < prev.length
        ):
            d = view_delta(store, prev.view, ck.view)
            added, removed = len(d.added), len(d.removed)
        out[ck.id] = (added, size, removed)
        prev = ck
    return out


# ---------------------------------------------------------------- conversation
@dataclass(frozen=True)
class Expanded:
    """The leaves a summary covers, as far as shown."""

    leaves: list[Entry]
    total: int


@dataclass(frozen=True)
class ConversationWindow:
    """Entries ``start`` .. ``start + len(entries)`` of a checkpoint's history."""

    checkpoint: CheckpointInfo
    previous: CheckpointInfo | None
    start: int
    length: int
    entries: list[tuple[int, Entry]]
    new: frozenset[int]
    """Positions added since the previous checkpoint."""
    expanded: dict[int, Expanded]
    """Position of each summary in the window → the leaves it covers."""


def previous_checkpoint(store: Store, ck: CheckpointInfo) -> CheckpointInfo | None:
    """The checkpoint recorded just before ``ck`` in its session (cut ones included), or the
    fork source for a fork's first checkpoint.
    """
    info = store.get_session(ck.session).info(refresh=False)
    return _baseline(store, info, ck)


def expand_summary(store: Store, summary: Entry, limit: int = EXPAND_LIMIT) -> Expanded:
    """The raw leaves behind ``summary`` (nested summaries expanded), at most ``limit`` shown."""
    leaves: list[Entry] = []
    total = 0

    def walk(entry: Entry, depth: int) -> None:
        nonlocal total
        for e in store.expand(entry):
            if e.kind == "summary" and depth < EXPAND_DEPTH:
                walk(e, depth + 1)
                continue
            total += 1
            if len(leaves) < limit:
                leaves.append(e)

    walk(summary, 0)
    return Expanded(leaves, total)


def conversation(store: Store, ck: CheckpointInfo, start: int | None) -> ConversationWindow:
    """A window of the history at ``ck`` (None: the last window), with the entries new since
    the previous checkpoint marked and every summary in it expanded.
    """
    n = ck.view.length
    if start is None:
        start = max(n - CONVERSATION_WINDOW, 0)
    start = min(max(start, 0), max(n - 1, 0))
    positions = list(range(start, min(start + CONVERSATION_WINDOW, n)))
    with store.db.read() as conn:
        chain = store.views.chain(conn, ck.view)
    ids = ids_at(store, chain, positions)
    if len(ids) != len(positions):
        raise IntegrityError(
            f"view {ck.view.archive_view_id}: entries {start}..{start + len(positions) - 1} "
            "are not all in the archive"
        )
    loaded = load_entries(store, ids.values())
    entries = [(p, loaded[ids[p]]) for p in positions]
    prev = previous_checkpoint(store, ck)
    d = view_delta(store, prev.view if prev is not None else EMPTY, ck.view)
    new = frozenset(p for p, _ in d.added)
    expanded = {p: expand_summary(store, e) for p, e in entries if e.kind == "summary"}
    return ConversationWindow(ck, prev, start, n, entries, new, expanded)


# ---------------------------------------------------------------- sessions, archive
SESSIONS_PAGE = 200
"""Sessions per page of the Sessions page (and most matches a search shows)."""
MAX_INDENT = 12
"""Fork levels the Sessions page indents (deeper ones say their depth)."""


@dataclass(frozen=True)
class SessionRowView:
    """One line of the Sessions page: a session, its depth in its fork tree, its backtracks."""

    node: Node
    depth: int

    @property
    def indent(self) -> int:
        """The indentation class (0 .. :data:`MAX_INDENT`)."""
        return min(self.depth, MAX_INDENT)


@dataclass(frozen=True)
class SessionsPage:
    """A page of the fork forest, drawn flat in tree order (no recursion however deep)."""

    rows: list[SessionRowView]
    page: int
    pages: int
    total: int


def _infos(store: Store, ids: list[int]) -> list[SessionInfo]:
    """The sessions with these ids, in that order (a query per :data:`CHUNK` ids, and one for
    the parents and roots).
    """
    rows: dict[int, Any] = {}
    with store.db.read() as conn:
        for k in range(0, len(ids), CHUNK):
            chunk = ids[k : k + CHUNK]
            sql = f"{_SESSIONS} WHERE id IN ({rsql.placeholders(len(chunk))})"
            rows.update((int(r[0]), SessionRow(*r)) for r in rsql.fetchall(conn, sql, chunk))
        return store.infos_of(conn, [rows[i] for i in ids if i in rows])


def sessions_page(store: Store, page: int | None) -> SessionsPage:
    """Page ``page`` (0-based) of every session in fork-tree order: the ids and parents of all
    (one narrow query), the rows, fork turns and backtracks of the page's sessions only.
    """
    with store.db.read() as conn:
        pairs = [
            (int(i), None if p is None else int(p))
            for i, p in rsql.fetchall(conn, "SELECT id, parent_id FROM sessions ORDER BY id", ())
        ]
    known = {i for i, _ in pairs}
    kids: dict[int | None, list[int]] = {}
    for i, p in pairs:
        kids.setdefault(p if p in known else None, []).append(i)
    order: list[tuple[int, int]] = []
    stack = [(i, 0) for i in reversed(kids.get(None, []))]
    while stack:
        i, depth = stack.pop()
        order.append((i, depth))
        stack.extend((c, depth + 1) for c in reversed(kids.get(i, [])))
    total = len(order)
    pages = max((total + SESSIONS_PAGE - 1) // SESSIONS_PAGE, 1)
    page = min(max(page or 0, 0), pages - 1)
    shown = order[page * SESSIONS_PAGE : (page + 1) * SESSIONS_PAGE]
    infos = _infos(store, [i for i, _ in shown])
    forks = checkpoint_turns(store, [i.source_checkpoint for i in infos if i.source_checkpoint])
    bts = backtracks_of(store, [i.id for i in infos])
    depths = dict(shown)
    rows = [
        SessionRowView(
            Node(
                i,
                forks.get(i.source_checkpoint) if i.source_checkpoint else None,
                bts.get(i.id, []),
            ),
            depths[i.id],
        )
        for i in infos
    ]
    return SessionsPage(rows, page, pages, total)


def search_sessions(store: Store, query: str) -> tuple[list[SessionInfo], int]:
    """The first :data:`SESSIONS_PAGE` sessions whose id, name or status contains ``query``
    (case-insensitive), and how many match in all: the matching is done by the database.
    """
    q = query.strip().lower()
    pattern = "%" + q.replace("/", "//").replace("%", "/%").replace("_", "/_") + "%"
    where = (
        "WHERE LOWER(uuid) LIKE ? ESCAPE '/' OR LOWER(COALESCE(name, '')) LIKE ? ESCAPE '/' "
        "OR LOWER(status) LIKE ? ESCAPE '/'"
    )
    params = (pattern, pattern, pattern)
    with store.db.read() as conn:
        total = int(rsql.fetchone(conn, f"SELECT COUNT(*) FROM sessions {where}", params)[0])
        rows = rsql.fetchall(
            conn, f"{_SESSIONS} {where} ORDER BY id LIMIT ?", (*params, SESSIONS_PAGE)
        )
        return store.infos_of(conn, [SessionRow(*r) for r in rows]), total


def session_names(store: Store, uuids: set[str]) -> dict[str, str]:
    """``uuid → name`` (or its first 8 characters) of the sessions a page names: one query."""
    wanted = sorted(u for u in uuids if u and "\x00" not in u)[:CHUNK]
    if not wanted:
        return {}
    with store.db.read() as conn:
        rows = rsql.fetchall(
            conn,
            f"SELECT uuid, name FROM sessions WHERE uuid IN ({rsql.placeholders(len(wanted))})",
            wanted,
        )
    return {u: n or u[:8] for u, n in rows}


def fork_children(store: Store, info: SessionInfo) -> list[tuple[SessionInfo, int | None]]:
    """Sessions forked from ``info`` and the turn each came from (at most
    :data:`SESSIONS_PAGE`; a few queries, not one per child).
    """
    with store.db.read() as conn:
        rows = [
            SessionRow(*r)
            for r in rsql.fetchall(
                conn,
                f"{_SESSIONS} WHERE parent_id = ? ORDER BY id LIMIT ?",
                (info.id, SESSIONS_PAGE),
            )
        ]
        infos = store.infos_of(conn, rows)
    turns = checkpoint_turns(store, [i.source_checkpoint for i in infos if i.source_checkpoint])
    return [(i, turns.get(i.source_checkpoint) if i.source_checkpoint else None) for i in infos]


def dictionaries(store: Store) -> list[dict[str, Any]]:
    """The trained zstd dictionaries (id, size, samples, when)."""
    with store.db.read() as conn:
        rows = conn.execute(
            select(
                zstd_dicts.c.id,
                zstd_dicts.c.size,
                zstd_dicts.c.sample_count,
                zstd_dicts.c.created_at,
            ).order_by(zstd_dicts.c.id)
        ).all()
    return [
        {
            "id": int(r.id),
            "size": int(r.size),
            "samples": int(r.sample_count),
            "at": float(r.created_at),
        }
        for r in rows
    ]


# ---------------------------------------------------------------- LangGraph threads
HIDDEN_CHANNELS = ("__", "branch:")
"""LangGraph's own channels (``__start__``, ``branch:to:agent``): not shown as state."""


def thread_channels(
    store: Store, thread: tuple[str, str], checkpoint_id: str | None, messages_key: str
) -> dict[str, Any] | str:
    """The state's other channels at one step of a thread, as JSON-able values (what the
    saver's own ``get_tuple`` reads: nothing written), or a sentence saying why not.
    """
    import json

    if checkpoint_id is None:
        return "this step's LangGraph checkpoint is no longer stored"
    try:
        from alpstore.integrations.langgraph import AlpstoreSaver
    except ImportError:
        return "reading a thread's channels needs LangGraph (pip install 'alpstore[langgraph]')"
    saver = AlpstoreSaver(store)
    config: Any = {
        "configurable": {
            "thread_id": thread[0],
            "checkpoint_ns": thread[1],
            "checkpoint_id": checkpoint_id,
        }
    }
    found = saver.get_tuple(config)
    if found is None:
        return "this step's LangGraph checkpoint is no longer stored"
    values = found.checkpoint["channel_values"]
    out: dict[str, Any] = {}
    for name in sorted(values):
        if name == messages_key or name.startswith(HIDDEN_CHANNELS):
            continue
        out[name] = json.loads(json.dumps(values[name], default=repr, sort_keys=True))
    return out
