"""``AlpstoreSaver`` on PostgreSQL in fewer round trips (issue 45): statements that name what
the previous one would have answered (a blob by digest, a row by a subquery) so they ride one
round trip together, and the reads a call needs fetched together.

SQLite keeps the plain path (``_lgdb``, ``_lgread``, ``_lgwrite``): each statement there is a
function call, not a round trip.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from alpstore.archive.reading import Encoded, parse_documents
from alpstore.db import raw as rsql
from alpstore.db.members import pg_id_by_digest, rows_by_id
from alpstore.errors import DatabaseError, IntegrityError
from alpstore.integrations import _lgdb as lgdb
from alpstore.integrations._lgpack import id_bytes, id_text
from alpstore.integrations._lgthread import SaverState
from alpstore.integrations._lgturnread import IN_TURN
from alpstore.views import BLOBS_FIRST

WritesFound = list[tuple[int, str, tuple[int, int | None, int, bytes], list[int]]]
"""``_lgdb.find_writes``' answer: ``(write id, task id, packed doc, item blob ids)``."""

Docs = dict[int, tuple[bytes, int, Any]]
"""``{blob id: (digest, kind, document)}``, as ``load_by_ids`` gives them."""

_WRITES_WITH_BLOBS = (
    "SELECT w.id, w.task_id, w.codec, w.dict_id, w.raw_size, w.state, i.blob_id, "
    "b.id, b.digest, b.kind, b.raw_size, b.codec, b.dict_id, b.payload, b.base_id "
    "FROM lg_writes w LEFT JOIN lg_write_items i ON i.write_id = w.id "
    "LEFT JOIN blob_rows b ON b.id = i.blob_id "
    "WHERE w.thread_ref = (SELECT id FROM lg_threads WHERE thread_id = ? AND checkpoint_ns = ?) "
    "AND w.checkpoint_id = {checkpoint} ORDER BY w.id, i.position"
)
"""A checkpoint's pending writes with their item blobs, the checkpoint named by id or as the
thread's newest (:data:`_NEWEST`). The loose rows only (``blob_rows``, by its primary key): the
``blobs`` view would unnest every frame's members to find a packed id (0010), a cost that
grows with the archive; a packed item (NULL here) is read from its frame afterwards."""

_NEWEST = f"(SELECT checkpoint_id FROM lg_checkpoints WHERE id = {lgdb.NEWEST_OF_THREAD})"
"""The newest checkpoint id of a thread namespace, as ``_lgdb.find_latest`` picks it."""


_VALUE_BLOBS = (
    "SELECT cb.blob_id, b.digest, b.kind, b.raw_size, b.codec, b.dict_id, b.payload, b.base_id "
    "FROM lg_checkpoint_blobs cb LEFT JOIN blob_rows b ON b.id = cb.blob_id "
    "WHERE cb.checkpoint_ref = (SELECT lc.id FROM lg_checkpoints lc "
    "JOIN lg_threads t ON t.id = lc.thread_ref "
    "WHERE t.thread_id = ? AND t.checkpoint_ns = ? AND lc.checkpoint_id = {checkpoint})"
)
"""The blobs a checkpoint's channel values refer to (``lg_checkpoint_blobs``), the checkpoint
named as in :data:`_WRITES_WITH_BLOBS`; a packed one's digest NULL (read afterwards)."""


def find_latest_with_writes(
    saver: SaverState,
    conn: Any,
    thread_id: str,
    ns: str,
    checkpoint_id: str | None,
    *,
    end: bool = False,
) -> tuple[tuple[lgdb.HeadRow, lgdb.CheckpointRow] | None, tuple[WritesFound, Docs]] | None:
    """``_lgdb.find_latest`` and that checkpoint's pending writes with their blobs decoded,
    read in one round trip (one snapshot: the read transaction's first statements).

    ``end``: the blobs its channel values refer to are read too, and the read transaction
    ends in the same round trip (``raw.fetch_and_end``): ONE wait for the whole read, the
    value blobs among the docs. Anything read after it on ``conn`` raises ``raw.ReadEnded``
    (the caller reads again the usual way). None when it cannot be ended so (nothing sent).
    """
    latest_sql, latest_params = lgdb.latest_query(thread_id, ns, checkpoint_id)
    params: list[Any] = [thread_id, ns]
    if checkpoint_id is None:
        params.extend((thread_id, ns))
        checkpoint = _NEWEST
    else:
        params.append(id_bytes(str(checkpoint_id)))
        checkpoint = "?"
    writes_sql = _WRITES_WITH_BLOBS.format(checkpoint=checkpoint)
    statements: list[tuple[str, list[Any]]] = [(latest_sql, latest_params), (writes_sql, params)]
    values: list[Any] = []
    if end:
        statements.append((_VALUE_BLOBS.format(checkpoint=checkpoint), params))
        ended = rsql.fetch_and_end(conn, statements)
        if ended is None:
            return None
        latest, rows, values = ended
    else:
        latest, rows = rsql.fetch_together(conn, statements)
    found = lgdb.latest_row(latest[0] if latest else None)
    writes: dict[int, tuple[int, str, tuple[int, int | None, int, bytes], list[int]]] = {}
    blob_rows: dict[int, Any] = {int(r[0]): r for r in values if r[1] is not None}
    packed = {int(r[0]) for r in values if r[1] is None}
    for r in rows:
        write_id = int(r[0])
        entry = writes.get(write_id)
        if entry is None:
            entry = (write_id, id_text(bytes(r[1])), (int(r[2]), r[3], int(r[4]), bytes(r[5])), [])
            writes[write_id] = entry
        if r[6] is not None:
            entry[3].append(int(r[6]))
            if r[7] is not None:
                blob_rows.setdefault(int(r[7]), r[7:])
            else:
                packed.add(int(r[6]))
    packed.difference_update(blob_rows)
    if packed:  # from their frames (a read transaction ended already: ReadEnded, unsent)
        for row in rows_by_id(conn, sorted(packed), located=True):
            blob_rows.setdefault(int(row[0]), row)
    docs: Docs = {}
    if blob_rows:
        unique = list(blob_rows.values())
        raws = saver.store.archive.decode_rows(conn, unique, verify=False)
        parsed = parse_documents([(bytes(r[1]), raw) for r, raw in zip(unique, raws, strict=True)])
        docs = {
            int(r[0]): (bytes(r[1]), int(r[2]), doc) for r, doc in zip(unique, parsed, strict=True)
        }
    for write in writes.values():
        for blob_id in write[3]:
            if blob_id not in docs:
                raise IntegrityError(
                    f"blob id {blob_id} is referenced but missing from the archive",
                    hint="`alpstore archive verify` names the rows that refer to it",
                )
    return found, (list(writes.values()), docs)


_TASK_FREE = (
    "SELECT t.id, EXISTS (SELECT 1 FROM lg_writes w WHERE w.thread_ref = t.id "
    f"AND w.checkpoint_id = ? AND w.task_id = ?) OR {IN_TURN} FROM lg_threads t "
    "WHERE t.thread_id = ? AND t.checkpoint_ns = ?"
)
"""A thread namespace's row, and whether a task of a checkpoint has writes already (or a turn
row holds the checkpoint: its folded writes are merged with on the plain path, 0011)."""

_INSERT_WRITES = (
    "INSERT INTO lg_writes (thread_ref, checkpoint_id, task_id, codec, dict_id, raw_size, "
    "state) VALUES (?, ?, ?, ?, ?, ?, ?)"
)

_THREAD_REF = (
    "(SELECT t.id FROM lg_threads t WHERE t.thread_id = ? AND t.checkpoint_ns = ? "
    f"AND NOT {IN_TURN})"
)
"""The thread namespace's row id, named in the statement (NULL when there is none: the NOT
NULL ``thread_ref`` then fails the insert, and the plain path creates the thread; NULL too
when a turn row holds the checkpoint, whose folded writes the plain path merges with)."""

_INSERT_WRITES_BY_NAME = _INSERT_WRITES.replace("VALUES (?,", f"VALUES ({_THREAD_REF},", 1)
""":data:`_INSERT_WRITES` naming the thread by its id and namespace."""

_INSERT_WRITES_WITH_ITEMS = (
    "WITH w AS ({writes} RETURNING id) "
    "INSERT INTO lg_write_items (write_id, position, blob_id) "
    f"SELECT (SELECT id FROM w), v.p, {pg_id_by_digest('v.d')} "
    "FROM (VALUES {rows}) AS v (p, d)"
)
"""A task's writes and their item blobs (named by digest, stored earlier in the transaction)
in one statement; a blob missing would be a NULL in a NOT NULL column: the transaction fails
whole."""


_UNSENT_READ = ("23505", "23502")
"""What makes a ``put_writes`` sent unread fall back to the plain path (rolled back whole): a
unique violation (the task has writes at that checkpoint: LangGraph's rule merges them) or a
NULL thread (no such thread namespace yet)."""


@dataclass(frozen=True)
class WriteRequest:
    """One ``put_writes`` call, as the saver's write paths take it (``_lgwrite.put_writes``,
    ``_lgwrite.store_writes``, :func:`put_writes_later`): where the writes go and what each
    stores.
    """

    thread_id: str
    ns: str
    checkpoint_id: str
    task_id: str
    task_path: str
    planned: Planned
    """Per write index: its channel, its ref template and the encoded items it stores."""
    replace_all: bool
    """Every write is a special one (error, interrupt): they replace what the task has."""


def put_writes_later(saver: SaverState, req: WriteRequest) -> bool:
    """``put_writes`` in ONE client wait when the thread exists and the task has no writes at
    that checkpoint yet (the common case): the blobs, the writes (the thread named by its id
    and namespace) and their items sent with the ``BEGIN`` and the COMMIT, nothing read first
    (``raw.begin_later``). A task with writes already (a merge, or another process storing
    the same task meanwhile) makes the insert a duplicate, a thread not there yet a NULL:
    rolled back whole, and False — the caller takes the plain path, which creates and
    merges. Where the transaction cannot be sent unread, two round trips: whether so, then
    the rest riding the COMMIT.
    """
    store = saver.store
    cid, tid = id_bytes(req.checkpoint_id), id_bytes(req.task_id)
    with store.db.atomic() as conn:
        if rsql.begin_later(conn, []):
            thread: list[Any] = [req.thread_id, req.ns, cid, cid]
            writes = _INSERT_WRITES_BY_NAME
        else:
            found = rsql.fetchone(conn, _TASK_FREE, (cid, tid, cid, cid, req.thread_id, req.ns))
            if found is None or found[1]:
                return False
            thread, writes = [int(found[0])], _INSERT_WRITES
        every = [item for _, _, items in req.planned.values() for item in items]
        store.archive.store_encoded_later(conn, every)
        digests = iter([digest for digest, _, _ in every])
        entries = {
            widx: (channel, ref, [next(digests) for _ in items])
            for widx, (channel, ref, items) in req.planned.items()
        }
        packed, items = pack_writes(saver, req.task_path, entries)
        params: list[Any] = [*thread, cid, tid, *packed]
        if not items:
            rsql.execute(conn, writes, params, defer=True)
            return True
        for position, digest in enumerate(items):
            params.extend((position, digest))
        rows = ", ".join(["(CAST(? AS INTEGER), CAST(? AS BYTEA))"] * len(items))
        statement = _INSERT_WRITES_WITH_ITEMS.format(writes=writes, rows=rows)
        rsql.execute(conn, statement, params, defer=True)
    return True


def writes_refused(err: BaseException) -> bool:
    """``err`` is a ``put_writes_later`` the plain path must redo (:data:`_UNSENT_READ`)."""
    return _duplicate(err, _UNSENT_READ)


T = TypeVar("T")


def fast_or_plain(
    fast: Callable[[], T | None],
    plain: Callable[[], T],
    *,
    refused: Callable[[BaseException], bool],
    forget: Callable[[], None] | None = None,
) -> T:
    """A write's fast way (sent unread, or with fewer round trips) first, its plain way when
    the fast one does not apply (``fast`` answers None, nothing written) or is refused at the
    COMMIT (``refused(err)``: the head moved, the task has writes, the thread is new — rolled
    back whole; ``forget`` then drops what this process assumed). Any other failure is raised.
    """
    try:
        done = fast()
    except DatabaseError as err:
        if not refused(err):
            raise
        if forget is not None:
            forget()
        done = None
    return plain() if done is None else done


def _duplicate(err: BaseException, states: tuple[str, ...] = ("23505",)) -> bool:
    """``err`` (or what caused it) has one of ``states`` (default: a unique violation)."""
    seen: BaseException | None = err
    while seen is not None:
        if getattr(seen, "sqlstate", None) in states:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


_TIP_OF_THREAD = (
    "SELECT g.length, g.sealed FROM lg_threads t JOIN sessions s ON s.id = t.session_id "
    "JOIN segments g ON g.id = s.head_segment_id AND g.session_id = s.id "
    "WHERE t.thread_id = ? AND t.checkpoint_ns = ? FOR NO KEY UPDATE OF g"
)
"""``views.OWN_TIP`` for a thread namespace's session (run after its row is locked)."""

_CHECKPOINT_STORED = (
    "SELECT 1 FROM lg_threads t WHERE t.thread_id = ? AND t.checkpoint_ns = ? AND (EXISTS "
    "(SELECT 1 FROM lg_checkpoints lc WHERE lc.thread_ref = t.id AND lc.checkpoint_id = ?) "
    f"OR {IN_TURN})"
)
"""Whether the thread holds a checkpoint id: loose, or inside a turn row's range (0011)."""


def lock_thread_at_tip(
    conn: Any, thread_id: str, ns: str, checkpoint_id: str
) -> tuple[lgdb.HeadRow | None, bool, bool]:
    """``_lgdb.lock_thread``, whether the head is at the unsealed tip of a segment its session
    owns (that row locked too: the head grows in place by ``ViewStore.grow_later``), and
    whether the thread holds ``checkpoint_id`` already — in the BEGIN's round trip. Under the
    session's lock no other put of the thread can change either before the commit.
    """
    _, locked, tip, stored = rsql.fetch_together(
        conn,
        [
            (BLOBS_FIRST, ()),
            (lgdb.LOCK_THREAD, (thread_id, ns)),
            (_TIP_OF_THREAD, (thread_id, ns)),
            (_CHECKPOINT_STORED, (thread_id, ns, *[id_bytes(checkpoint_id)] * 3)),
        ],
    )
    row = lgdb.head_row(locked[0]) if locked else None
    at_tip = (
        row is not None
        and row.view.segment_id is not None
        and bool(tip)
        and int(tip[0][0]) == row.view.length
        and not tip[0][1]
    )
    return row, at_tip, bool(stored)


HEAD_MOVED = "alpstore: the thread's head moved since this process's last put"

_THREAD_GUARD = (
    "WITH s AS (SELECT 1 FROM lg_threads t JOIN sessions s ON s.id = t.session_id "
    "WHERE t.thread_id = ? AND t.checkpoint_ns = ? AND t.id = ? AND s.id = ? AND s.uuid = ? "
    "AND s.status = ? AND s.head_segment_id = ? AND s.head_length = ? AND s.turn = ? "
    "AND s.retention_mode = ? AND s.retention_n = ? AND s.head_digest = ? "
    "FOR NO KEY UPDATE OF s), g AS (SELECT 1 FROM segments WHERE id = ? AND session_id = ? "
    "AND length = ? AND NOT sealed FOR NO KEY UPDATE) "
    "SELECT CAST(CASE WHEN (SELECT count(*) FROM s) = 1 AND (SELECT count(*) FROM g) = 1 "
    "THEN '1' ELSE ? END AS INTEGER)"
)
"""``lock_thread_at_tip``'s locks (the session's row, then its tip segment's), taken without
reading them back: the transaction fails (a cast of :data:`HEAD_MOVED`) unless the thread's
row and head are as this process's last put left them and the head is that segment's
unsealed tip."""


def begin_at_known_head(conn: Any, thread_id: str, ns: str, row: lgdb.HeadRow) -> bool:
    """Open ``conn``'s transaction for a put at the head ``row`` this process left, nothing
    read first (``raw.begin_later``): the put's statements and its COMMIT then go in one
    wait, :data:`_THREAD_GUARD` in front. A checkpoint id stored already fails it too (the
    LangGraph row's unique key). False when it cannot be (the caller reads and locks).
    """
    if row.cover is None or row.view.segment_id is None:
        return False
    view = row.view
    guard = (
        thread_id,
        ns,
        row.ref,
        row.session_id,
        row.uuid,
        row.status,
        view.segment_id,
        view.length,
        row.turn,
        row.retention[0],
        row.retention[1],
        row.cover,
        view.segment_id,
        row.session_id,
        view.length,
        HEAD_MOVED,
    )
    return rsql.begin_later(conn, [(BLOBS_FIRST, ()), (_THREAD_GUARD, guard)])


def head_moved(err: BaseException) -> bool:
    """``err`` is a put sent unread that found the head moved or its checkpoint id stored."""
    return HEAD_MOVED in str(err) or _duplicate(err)


_CHECKPOINT_PAIR = (
    "WITH ck AS ({insert}), lc AS (INSERT INTO lg_checkpoints (thread_ref, checkpoint_id, "
    "parent_checkpoint_id, alp_checkpoint_id, run_ref, codec, dict_id, raw_size, state) "
    "SELECT ?, ?, ?, ck.id, (SELECT id FROM lg_runs WHERE run_id = ?), ?, ?, ?, ? FROM ck "
    "RETURNING id){blobs} SELECT ck.id, ck.seq FROM ck"
)
"""An alpstore checkpoint row, its LangGraph row and the blobs its values refer to, in one
statement (no ``ON CONFLICT``: the caller saw the id is new; a duplicate fails the
transaction whole)."""

_CHECKPOINT_BLOBS = (
    ", cb AS (INSERT INTO lg_checkpoint_blobs (checkpoint_ref, blob_id) "
    "SELECT lc.id, v.b FROM lc, (VALUES {rows}) AS v (b))"
)


def checkpoint_pair(
    ref: int,
    checkpoint_id: str,
    parent: str | None,
    run_id: str | None,
    packed: tuple[int, int | None, int, bytes],
    blob_ids: list[int],
) -> Any:
    """The ``wrap`` of ``insert_checkpoint_later`` that inserts the LangGraph checkpoint row
    (and its blobs) with the alpstore one (``_lgdb.insert_checkpoint_row`` and
    ``insert_checkpoint_blobs`` in the same statement).
    """
    unique = list(dict.fromkeys(blob_ids))

    def wrap(sql: str, params: list[Any]) -> tuple[str, list[Any]]:
        blobs = ""
        if unique:
            rows = ", ".join(["(CAST(? AS INTEGER))"] * len(unique))
            blobs = _CHECKPOINT_BLOBS.format(rows=rows)
        parent_id = None if parent is None else id_bytes(parent)
        more = [ref, id_bytes(checkpoint_id), parent_id, run_id, *packed, *unique]
        return _CHECKPOINT_PAIR.format(insert=sql, blobs=blobs), [*params, *more]

    return wrap


def pack_writes(
    saver: SaverState, task_path: str, entries: Mapping[int, tuple[str, list[Any], list[Any]]]
) -> tuple[tuple[int, int | None, int, bytes], list[Any]]:
    """A task's writes as one packed document, and the blobs its refs point into, in order
    (ids, or digests for ``_lgfast``).
    """
    refs: list[list[Any]] = []
    items: list[Any] = []
    for idx in sorted(entries):
        channel, ref, blob_ids = entries[idx]
        if ref[0] == "b":
            ref = [*ref[:2], len(items)]
        elif ref[0] == "l":
            ref = ["l", len(items), len(blob_ids)]
        refs.append([idx, channel, ref])
        items.extend(blob_ids)
    return saver._packer.pack({"p": task_path, "w": refs}), items


Planned = dict[int, tuple[str, list[Any], list[Encoded]]]
"""What each write of a ``put_writes`` stores, by index: ``(channel, ref, items)``."""
