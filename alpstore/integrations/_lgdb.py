"""The SQL side of the LangGraph saver: thread → session mapping, checkpoint rows (packed
state + the alpstore checkpoint holding the messages view), pending writes, and a head's messages
rebuilt from the archive (``load_head``). Deleting and copying live in ``_lgmaint``.

Everything here runs inside the caller's transaction. Alpstore checkpoints that another session
forked from are never deleted, only marked abandoned (lineage keeps its source).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from operator import itemgetter
from typing import Any, NamedTuple

from langchain_core.messages import BaseMessage, SystemMessage, convert_to_messages
from sqlalchemy import Connection

from alpstore.archive.batch import decode_lean
from alpstore.archive.reading import parse_documents
from alpstore.db import raw as rsql
from alpstore.db.names import BLOB_MESSAGE, BLOB_STATE, BLOB_SUMMARY
from alpstore.integrations import _lgturnread as turnread
from alpstore.integrations._lgbuild import State, assemble, doc_messages, doc_state, message_state
from alpstore.integrations._lgcodec import KIND_MESSAGE, FrozenMessages
from alpstore.integrations._lgpack import id_bytes, id_text
from alpstore.integrations._lgspaces import link_namespace
from alpstore.portable.lgrows import SESSION_NAME_PREFIX as SESSION_NAME_PREFIX
from alpstore.portable.lgrows import session_name as session_name
from alpstore.store import Store
from alpstore.views import View, cover_bytes

try:  # LangChain's own dependency (through langsmith); json is the fallback
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson comes with langchain-core
    _orjson = None  # type: ignore[assignment]

CHUNK = 500


class CheckpointRow(NamedTuple):
    """A LangGraph checkpoint row joined with its alpstore checkpoint."""

    ref: int
    checkpoint_id: str
    parent_checkpoint_id: str | None
    view: View
    alp_id: int
    packed: tuple[int, int | None, int, bytes]


_CK_COLUMNS = (
    "lc.id, lc.checkpoint_id, lc.parent_checkpoint_id, c.segment_id, c.length, c.id, "
    "lc.codec, lc.dict_id, lc.raw_size, lc.state"
)
CK_FROM = "FROM lg_checkpoints lc JOIN checkpoints c ON c.id = lc.alp_checkpoint_id"

NEWEST_OF_REF = (
    "(SELECT n.id FROM lg_checkpoints n WHERE n.thread_ref = ? "
    "ORDER BY n.checkpoint_id DESC LIMIT 1)"
)
"""The ``lg_checkpoints.id`` of a thread namespace's newest checkpoint (its ref the parameter):
one backward step of the ``(thread_ref, checkpoint_id)`` key. A query that joins first and
sorts after (``… JOIN checkpoints … ORDER BY lc.checkpoint_id DESC LIMIT 1``) read every
checkpoint of the thread and its ``checkpoints`` row first: 6.8 ms at 400 tool-loop turns on
PostgreSQL (2,800 steps, 6,961 buffers), three times a ``get_tuple``, growing with the thread."""

NEWEST_OF_THREAD = NEWEST_OF_REF.replace(
    "= ?", "= (SELECT id FROM lg_threads WHERE thread_id = ? AND checkpoint_ns = ?)"
)
""":data:`NEWEST_OF_REF` by thread id and namespace (two parameters)."""


def _ck_row(r: Any) -> CheckpointRow:
    return CheckpointRow(
        int(r[0]),
        id_text(bytes(r[1])),
        None if r[2] is None else id_text(bytes(r[2])),
        View(r[3], int(r[4])),
        int(r[5]),
        (int(r[6]), r[7], int(r[8]), bytes(r[9])),
    )


def blob_kind(kind: int) -> int:
    """The archive blob kind for a stored LangGraph value kind."""
    return BLOB_MESSAGE if kind == KIND_MESSAGE else BLOB_STATE


# ---------------------------------------------------------------- threads
class HeadRow(NamedTuple):
    """A thread namespace's row with its session's head, read in one statement."""

    ref: int
    session_id: int
    uuid: str
    status: str
    view: View
    turn: int
    retention: tuple[str, int]
    cover: bytes | None
    """The session's covering digest of its head (None only in an archive not yet upgraded
    to revision 0004)."""

    @property
    def key(self) -> tuple[int, int, str, View, bytes | None]:
        """What identifies this head: rows, session uuid (never reused), view, covering
        digest (any entry changed, moved or lost changes it).
        """
        return (self.ref, self.session_id, self.uuid, self.view, self.cover)


_HEAD_COLUMNS = (
    "t.id, t.session_id, s.uuid, s.status, s.head_segment_id, s.head_length, s.turn, "
    "s.retention_mode, s.retention_n, s.head_digest"
)


def _head_row(r: Any) -> HeadRow:
    return HeadRow(
        int(r[0]),
        int(r[1]),
        str(r[2]),
        str(r[3]),
        View(r[4], int(r[5])),
        int(r[6]),
        (str(r[7]), int(r[8])),
        None if r[9] is None else bytes(r[9]),
    )


LOCK_THREAD = (
    f"SELECT {_HEAD_COLUMNS} FROM lg_threads t JOIN sessions s ON s.id = t.session_id "
    "WHERE t.thread_id = ? AND t.checkpoint_ns = ? FOR NO KEY UPDATE OF s"
)


def lock_thread(conn: Connection, thread_id: str, ns: str) -> HeadRow | None:
    """A thread namespace and its session head, the session row locked until commit (on
    PostgreSQL; SQLite's write transaction holds the whole database).
    """
    row = rsql.fetchone(conn, LOCK_THREAD, (thread_id, ns))
    return None if row is None else _head_row(row)


def head_row(row: Any) -> HeadRow:
    """A :class:`HeadRow` from a row of :data:`LOCK_THREAD`."""
    return _head_row(row)


def find_latest(
    conn: Connection, thread_id: str, ns: str, checkpoint_id: str | None
) -> tuple[HeadRow, CheckpointRow] | None:
    """A checkpoint (the newest without an id) with its thread's head, in one statement; a
    step a turn row holds (0011), in three.
    """
    found = latest_row(rsql.fetchone(conn, *latest_query(thread_id, ns, checkpoint_id)))
    if found is None and checkpoint_id is not None:
        head = read_head(conn, thread_id, ns)
        step = None if head is None else turnread.folded_step(conn, head.ref, str(checkpoint_id))
        return None if head is None or step is None else (head, CheckpointRow(0, *step))
    return found


def latest_query(thread_id: str, ns: str, checkpoint_id: str | None) -> tuple[str, list[Any]]:
    """:func:`find_latest`'s statement and parameters."""
    sql = (
        f"SELECT {_HEAD_COLUMNS}, {_CK_COLUMNS} {CK_FROM} "
        "JOIN lg_threads t ON t.id = lc.thread_ref JOIN sessions s ON s.id = t.session_id "
    )
    if checkpoint_id is None:  # by the key, not a sort of the thread's steps
        return sql + f"WHERE lc.id = {NEWEST_OF_THREAD}", [thread_id, ns]
    sql += "WHERE t.thread_id = ? AND t.checkpoint_ns = ? AND lc.checkpoint_id = ?"
    return sql, [thread_id, ns, id_bytes(str(checkpoint_id))]


def latest_row(row: Any) -> tuple[HeadRow, CheckpointRow] | None:
    """:func:`find_latest`'s answer from its row."""
    if row is None:
        return None
    return _head_row(row[:10]), _ck_row(row[10:])


def read_head(conn: Connection, thread_id: str, ns: str) -> HeadRow | None:
    """A thread namespace and its session head (no lock)."""
    row = rsql.fetchone(
        conn,
        f"SELECT {_HEAD_COLUMNS} FROM lg_threads t JOIN sessions s ON s.id = t.session_id "
        "WHERE t.thread_id = ? AND t.checkpoint_ns = ?",
        (thread_id, ns),
    )
    return None if row is None else _head_row(row)


_ids = itemgetter(0)
_kinds = itemgetter(1)


def head_digests(store: Store, conn: Connection, view: View) -> tuple[list[int], list[bytes]]:
    """The blob ids and digests of a head (O(n): only when this process does not know it)."""
    if view.length == 0:
        return [], []
    ids = store.views.read_ids(conn, view)
    return ids, list(store.digests_for_ids(conn, ids))


def load_head(
    store: Store, conn: Connection, view: View
) -> tuple[list[BaseMessage], FrozenMessages]:
    """A view's messages rebuilt from the archive (new objects), and the same messages to
    keep: their documents' bytes, made states on first use.

    One range scan without digests, the blobs decoded in batches (``decode_lean``), the
    documents parsed in one call and made messages group by group (``doc_messages``). The
    digests are read only when a document does not parse, to name it.
    """
    if view.length == 0:
        return [], FrozenMessages()
    rows = store.views.read_lean_rows(conn, view)
    raws = decode_lean(store.archive, conn, rows)
    kinds = list(map(_kinds, rows))
    digests: list[bytes] | None = None
    docs = fast_parse(raws)
    if docs is None:  # name the damaged document by its digest
        digests = [bytes(d) for d in store.digests_for_ids(conn, list(map(_ids, rows)))]
        docs = parse_documents(list(zip(digests, raws, strict=True)))

    def states() -> list[tuple[type[BaseMessage], State]]:
        again = fast_parse(raws) if digests is None else None
        if again is None:
            again = parse_documents(list(zip(digests or [], raws, strict=True)))
        return [(type(m), message_state(m)) for m in entry_messages(kinds, again)]

    return entry_messages(kinds, docs), FrozenMessages.deferred(len(rows), states)


def entry_messages(kinds: Sequence[int], docs: Sequence[Any]) -> list[BaseMessage]:
    """New messages for covering-list entries (:func:`entry_state` of each); when every entry
    is a message (the common case), built group by group by :func:`doc_messages`.
    """
    if list(kinds).count(BLOB_MESSAGE) == len(kinds):
        return doc_messages(docs, _message_entry)
    pairs = [entry_state(kind, doc) for kind, doc in zip(kinds, docs, strict=True)]
    return assemble([c for c, _ in pairs], [st for _, st in pairs])


def fast_parse(raws: Sequence[bytes]) -> list[Any] | None:
    """Canonical JSON documents parsed by orjson (a dependency of LangChain's, so present
    wherever this module runs; about twice as fast as ``json``); None when it is missing or
    refuses a document (an integer beyond 64 bits, say): then ``json`` parses them, and
    names a damaged one.
    """
    if _orjson is None:
        return None
    if not raws:
        return []
    parts = list(raws)  # the brackets on the ends: one copy of the documents, not three
    parts[0] = b"[" + parts[0]
    parts[-1] += b"]"
    try:
        docs = _orjson.loads(b",".join(parts))
    except ValueError:
        return None
    return docs if isinstance(docs, list) and len(docs) == len(raws) else None


def entry_state(kind: int, doc: Any) -> tuple[type[BaseMessage], State]:
    """A covering-list entry as a LangChain message's class and state: our documents,
    OpenAI-format messages appended by other tools, and summaries (folds) as system messages.
    ``doc``'s lists and dicts become the state's.
    """
    if kind == BLOB_SUMMARY:
        message: BaseMessage = SystemMessage(content=str(doc.get("summary", "")))
    elif isinstance(doc, dict) and "lc" in doc:
        return doc_state(doc)
    else:
        message = convert_to_messages([doc])[0]
    return type(message), message_state(message)


def _message_entry(doc: Any) -> tuple[type[BaseMessage], State]:
    return entry_state(BLOB_MESSAGE, doc)


def find_thread(conn: Connection, thread_id: str, ns: str) -> tuple[int, int] | None:
    """``(ref, session_id)`` of a thread + namespace, or None."""
    row = rsql.fetchone(
        conn,
        "SELECT id, session_id FROM lg_threads WHERE thread_id = ? AND checkpoint_ns = ?",
        (thread_id, ns),
    )
    return None if row is None else (int(row[0]), int(row[1]))


class _Raced(Exception):
    """Another transaction mapped the thread first (rolls back our savepoint)."""


def create_thread(store: Store, conn: Connection, thread_id: str, ns: str) -> tuple[int, int]:
    """Create the session for a thread + namespace and map it; returns ``(ref, session_id)``.

    Safe against another process doing the same at once: the loser's session is rolled back
    (a savepoint) and the winner's mapping returned.
    """
    try:
        with store.db.atomic():
            session = store.create_session(
                name=store.available_name(conn, session_name(thread_id, ns)),
                origin={"langgraph": {"thread_id": thread_id, "checkpoint_ns": ns}},
            )
            row = rsql.fetchone(
                conn,
                "INSERT INTO lg_threads (thread_id, checkpoint_ns, session_id) VALUES (?, ?, ?) "
                "ON CONFLICT (thread_id, checkpoint_ns) DO NOTHING RETURNING id",
                (thread_id, ns, session.id),
            )
            if row is None:
                raise _Raced
            link_namespace(conn, thread_id, ns, session.id)  # a subgraph's: under its thread
            return int(row[0]), session.id
    except _Raced:
        found = find_thread(conn, thread_id, ns)
        assert found is not None
        return found


# ---------------------------------------------------------------- checkpoints
def find_checkpoint(conn: Connection, ref: int, checkpoint_id: str | None) -> CheckpointRow | None:
    """A checkpoint of a thread by id, or its newest when ``checkpoint_id`` is None."""
    if checkpoint_id is None:
        sql = f"SELECT {_CK_COLUMNS} {CK_FROM} WHERE lc.id = {NEWEST_OF_REF}"
        row = rsql.fetchone(conn, sql, (ref,))
    else:
        sql = f"SELECT {_CK_COLUMNS} {CK_FROM} WHERE lc.thread_ref = ? AND lc.checkpoint_id = ?"
        row = rsql.fetchone(conn, sql, (ref, id_bytes(str(checkpoint_id))))
        if row is None:
            step = turnread.folded_step(conn, ref, str(checkpoint_id))
            return None if step is None else CheckpointRow(0, *step)
    return None if row is None else _ck_row(row)


def run_ref(conn: Connection, run_id: str) -> int:
    """The interned number of a run id (created on first use)."""
    row = rsql.fetchone(conn, "SELECT id FROM lg_runs WHERE run_id = ?", (run_id,))
    if row is None:
        row = rsql.fetchone(conn, "INSERT INTO lg_runs (run_id) VALUES (?) RETURNING id", (run_id,))
    return int(row[0])


def insert_checkpoint(
    conn: Connection,
    ref: int,
    checkpoint_id: str,
    parent: str | None,
    alp_id: int,
    run: int | None,
    packed: tuple[int, int | None, int, bytes],
    blob_ids: Sequence[int],
) -> int:
    """Map a LangGraph checkpoint to its alpstore checkpoint, with its packed state."""
    new = rsql.fetchone(
        conn,
        "INSERT INTO lg_checkpoints (thread_ref, checkpoint_id, parent_checkpoint_id, "
        "alp_checkpoint_id, run_ref, codec, dict_id, raw_size, state) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (
            ref,
            id_bytes(checkpoint_id),
            None if parent is None else id_bytes(parent),
            alp_id,
            run,
            *packed,
        ),
    )[0]
    rsql.executemany(
        conn,
        "INSERT INTO lg_checkpoint_blobs (checkpoint_ref, blob_id) VALUES (?, ?)",
        [(new, b) for b in dict.fromkeys(blob_ids)],
        defer=True,  # nothing read back: on PostgreSQL it rides the next round trip
    )
    return int(new)


def list_checkpoints(
    conn: Connection,
    *,
    thread_id: str | None,
    ns: str | None,
    checkpoint_id: str | None,
    before: str | None,
    limit: int | None = None,
) -> list[tuple[str, str, CheckpointRow]]:
    """``(thread_id, ns, row)`` newest first, narrowed by what is given; the first ``limit``
    only, when given (each source read no further than it needs: the loose rows by SQL, the
    turn rows newest first until they hold that many steps).
    """
    where, params = [], []
    for clause, value in (
        ("t.thread_id = ?", thread_id),
        ("t.checkpoint_ns = ?", ns),
        ("lc.checkpoint_id = ?", None if checkpoint_id is None else id_bytes(checkpoint_id)),
        ("lc.checkpoint_id < ?", None if before is None else id_bytes(before)),
    ):
        if value is not None:
            where.append(clause)
            params.append(value)
    sql = (
        f"SELECT t.thread_id, t.checkpoint_ns, {_CK_COLUMNS} {CK_FROM} "
        "JOIN lg_threads t ON t.id = lc.thread_ref"
        + (" WHERE " + " AND ".join(where) if where else "")
        + " ORDER BY lc.checkpoint_id DESC"
        + ("" if limit is None else f" LIMIT {max(0, int(limit))}")
    )
    rows = [(str(r[0]), str(r[1]), _ck_row(r[2:])) for r in rsql.fetchall(conn, sql, params)]
    where = where[: (thread_id is not None) + (ns is not None)]  # the thread's clauses
    sql = "SELECT t.id, t.thread_id, t.checkpoint_ns FROM lg_threads t WHERE EXISTS (SELECT 1 "
    sql += "FROM lg_turns u WHERE u.thread_ref = t.id)" + "".join(f" AND {w}" for w in where)
    folded = [
        (str(tid), str(tns), CheckpointRow(0, *step))
        for ref, tid, tns in rsql.fetchall(conn, sql, params[: len(where)])
        for step in turnread.folded_rows(conn, int(ref), checkpoint_id, before, limit)
    ]
    if not folded:
        return rows
    every = {(r[0], r[1], r[2].checkpoint_id): r for r in folded + rows}  # folded meanwhile: once
    out = sorted(every.values(), key=lambda r: id_bytes(r[2].checkpoint_id), reverse=True)
    return out if limit is None else out[: max(0, limit)]


# ---------------------------------------------------------------- pending writes
def find_writes(
    conn: Connection,
    ref: int,
    checkpoint_id: str,
    task_id: str | None = None,
    *,
    folded: bool = True,
) -> list[tuple[int, str, tuple[int, int | None, int, bytes], list[int]]]:
    """``(write id, task id, packed doc, item blob ids)`` of a checkpoint (or one task), in one
    statement; ``folded``: with those a turn row holds for tasks with no loose row (one more).
    """
    sql = (
        "SELECT w.id, w.task_id, w.codec, w.dict_id, w.raw_size, w.state, i.blob_id "
        "FROM lg_writes w LEFT JOIN lg_write_items i ON i.write_id = w.id "
        "WHERE w.thread_ref = ? AND w.checkpoint_id = ?"
    )
    params: list[Any] = [ref, id_bytes(checkpoint_id)]
    if task_id is not None:
        sql += " AND w.task_id = ?"
        params.append(id_bytes(task_id))
    found: dict[int, tuple[int, str, tuple[int, int | None, int, bytes], list[int]]] = {}
    for r in rsql.fetchall(conn, sql + " ORDER BY w.id, i.position", params):
        write_id = int(r[0])
        entry = found.get(write_id)
        if entry is None:
            entry = (write_id, id_text(bytes(r[1])), (int(r[2]), r[3], int(r[4]), bytes(r[5])), [])
            found[write_id] = entry
        if r[6] is not None:
            entry[3].append(int(r[6]))
    loose = list(found.values())
    if folded:  # a folded step's tasks with no loose row keep their folded writes (0011)
        but = {w[1] for w in loose}
        loose += turnread.folded_writes(conn, ref, checkpoint_id, task_id, but=but)
    return loose


def save_writes(
    conn: Connection,
    ref: int,
    checkpoint_id: str,
    task_id: str,
    existing: int | None,
    packed: tuple[int, int | None, int, bytes],
    blob_ids: Sequence[int],
) -> None:
    """Insert (or replace) one task's packed writes and their item blobs."""
    if existing is not None:
        rsql.execute(conn, "DELETE FROM lg_write_items WHERE write_id = ?", (existing,), defer=True)
        rsql.execute(conn, "DELETE FROM lg_writes WHERE id = ?", (existing,), defer=True)
    write_id = rsql.fetchone(
        conn,
        "INSERT INTO lg_writes (thread_ref, checkpoint_id, task_id, codec, dict_id, raw_size, "
        "state) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (ref, id_bytes(checkpoint_id), id_bytes(task_id), *packed),
    )[0]
    rsql.executemany(
        conn,
        "INSERT INTO lg_write_items (write_id, position, blob_id) VALUES (?, ?, ?)",
        [(write_id, i, b) for i, b in enumerate(blob_ids)],
        defer=True,
    )


# ---------------------------------------------------------------- the hot path
def insert_checkpoint_row(
    conn: Connection,
    ref: int,
    checkpoint_id: str,
    parent: str | None,
    alp_id: int,
    run_id: str | None,
    packed: tuple[int, int | None, int, bytes],
) -> int | None:
    """Insert a LangGraph checkpoint row (its run interned by the caller); None when the
    thread already holds that checkpoint id.
    """
    row = rsql.fetchone(
        conn,
        "INSERT INTO lg_checkpoints (thread_ref, checkpoint_id, parent_checkpoint_id, "
        "alp_checkpoint_id, run_ref, codec, dict_id, raw_size, state) "
        "VALUES (?, ?, ?, ?, (SELECT id FROM lg_runs WHERE run_id = ?), ?, ?, ?, ?) "
        "ON CONFLICT (thread_ref, checkpoint_id) DO NOTHING RETURNING id",
        (
            ref,
            id_bytes(checkpoint_id),
            None if parent is None else id_bytes(parent),
            alp_id,
            run_id,
            *packed,
        ),
    )
    return None if row is None else int(row[0])


def intern_run(conn: Connection, run_id: str) -> None:
    """Make sure a run id has its row (rows of ``lg_runs`` are never deleted)."""
    rsql.execute(
        conn,
        "INSERT INTO lg_runs (run_id) VALUES (?) ON CONFLICT (run_id) DO NOTHING",
        (run_id,),
        defer=True,  # sent before the statement that reads it back, in the same round trip
    )


def insert_checkpoint_blobs(conn: Connection, new: int, blob_ids: Sequence[int]) -> None:
    """Record the blobs a checkpoint's channel values refer to."""
    rsql.executemany(
        conn,
        "INSERT INTO lg_checkpoint_blobs (checkpoint_ref, blob_id) VALUES (?, ?)",
        [(new, b) for b in dict.fromkeys(blob_ids)],
        defer=True,  # nothing read back: on PostgreSQL it rides the next round trip
    )


def insert_new_writes(
    conn: Connection,
    thread_id: str,
    ns: str,
    checkpoint_id: str,
    task_id: str,
    packed: tuple[int, int | None, int, bytes],
    blob_ids: Sequence[int],
) -> bool:
    """Insert a task's writes in one statement when the thread exists and the task has none
    yet (the common case); False otherwise (nothing written: the caller merges), also when a
    turn row holds the checkpoint (0011: its tasks' folded writes are merged with).
    """
    cid = id_bytes(checkpoint_id)
    row = rsql.fetchone(
        conn,
        "INSERT INTO lg_writes (thread_ref, checkpoint_id, task_id, codec, dict_id, raw_size, "
        "state) SELECT t.id, ?, ?, ?, ?, ?, ? FROM lg_threads t "
        f"WHERE t.thread_id = ? AND t.checkpoint_ns = ? AND NOT {turnread.IN_TURN} "
        "ON CONFLICT (thread_ref, checkpoint_id, task_id) DO NOTHING RETURNING id",
        (id_bytes(checkpoint_id), id_bytes(task_id), *packed, thread_id, ns, *[cid] * 2),
    )
    if row is None:
        return False
    rsql.executemany(
        conn,
        "INSERT INTO lg_write_items (write_id, position, blob_id) VALUES (?, ?, ?)",
        [(int(row[0]), i, b) for i, b in enumerate(blob_ids)],
        defer=True,
    )
    return True


def move_head(
    conn: Connection, session_id: int, view: View, turn: int, status: str, cover: int
) -> None:
    """Point a session's head at ``view`` with its covering digest ``cover`` (the row is locked
    by :func:`lock_thread`).
    """
    rsql.execute(
        conn,
        "UPDATE sessions SET head_segment_id = ?, head_length = ?, turn = ?, updated_at = ?, "
        "status = ?, head_digest = ? WHERE id = ?",
        (view.segment_id, view.length, turn, time.time(), status, cover_bytes(cover), session_id),
        defer=True,
    )
