"""The SQL side of the LangGraph saver: thread → session mapping, checkpoint rows (packed
state + the alpstore checkpoint holding the messages view), pending writes, and the deletions and
copies that keep alpstore's own rows consistent.

Everything here runs inside the caller's transaction. Alpstore checkpoints that another session
forked from are never deleted, only marked abandoned (lineage keeps its source).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, NamedTuple

from langchain_core.messages import BaseMessage, SystemMessage, convert_to_messages
from sqlalchemy import Connection, delete, select, update

from alpstore.db import raw as rsql
from alpstore.db.tables import BLOB_MESSAGE, BLOB_STATE, BLOB_SUMMARY, checkpoints, sessions
from alpstore.errors import UsageError
from alpstore.integrations._lgcodec import KIND_MESSAGE, message_docs, message_from_doc
from alpstore.integrations._lgpack import id_bytes, id_text
from alpstore.sessions import Session
from alpstore.store import Store, encode
from alpstore.views import View, cover_int

SESSION_NAME_PREFIX = "langgraph:"
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
_CK_FROM = "FROM lg_checkpoints lc JOIN checkpoints c ON c.id = lc.alp_checkpoint_id"


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


def session_name(thread_id: str, ns: str) -> str:
    """The name of the session holding a thread's namespace (``langgraph:THREAD[ NS]``)."""
    name = SESSION_NAME_PREFIX + thread_id + (f" {ns}" if ns else "")
    return name[:200]


# ---------------------------------------------------------------- threads
class ThreadState:
    """What this process knows of one thread + namespace: its session, and the message objects
    of the session head (so a put compares by identity and appends only what is new).
    """

    def __init__(self, store: Store, conn: Connection, ref: int, session_id: int) -> None:
        self.store = store
        self.ref = ref
        self.session = Session(store, store.session_info(session_id, conn=conn))
        self.head_view: View | None = None
        self.head_ids: list[int] = []
        self.head_objs: list[Any] = []
        self.head_digests: list[bytes] | None = None
        self.objs: dict[int, BaseMessage] = {}

    def _load_head(self, conn: Connection) -> None:
        row = rsql.fetchone(
            conn, "SELECT head_segment_id, head_length FROM sessions WHERE id = ?", (self.ref_sid,)
        )
        view = View(row[0], int(row[1]))
        if view != self.head_view:
            self.head_ids = self.store.views.read_ids(conn, view) if view.length else []
            self.head_objs = [self.objs.get(i) for i in self.head_ids]
            self.head_digests = None
            self.head_view = view

    @property
    def ref_sid(self) -> int:
        """The session's row id."""
        return self.session.id

    def sync_head(self, conn: Connection, messages: list[BaseMessage]) -> bool:
        """Make the session head equal ``messages``: append the new tail, or cut back to the
        common prefix first (edits, removals). False when a message cannot be split (JSON).
        """
        self._load_head(conn)
        old = self.head_objs
        n = min(len(old), len(messages))
        k = 0
        while k < n and (old[k] is messages[k] or self._unchanged(k, messages[k])):
            k += 1
        if k == len(old) == len(messages):
            return True
        docs = message_docs(messages[k:])
        if docs is None:
            return False
        items = [encode(d, BLOB_MESSAGE) for d in docs]
        if k < len(old):
            if self.head_digests is None:
                self.head_digests = list(self.store.digests_for_ids(conn, self.head_ids))
            digests = self.head_digests
            j = 0
            while k + j < len(old) and j < len(items) and items[j][0] == digests[k + j]:
                j += 1
            k, items, docs = k + j, items[j:], docs[j:]
        if k == len(old):
            if docs:
                self.session.append(docs)
        else:
            self.session.truncate_and_append(k, docs)
        ids = self.store.archive.ids_for(conn, [d for d, _, _ in items])
        tail_ids = [ids[d] for d, _, _ in items]
        self.head_ids = self.head_ids[:k] + tail_ids
        if self.head_digests is not None:
            self.head_digests = self.head_digests[:k] + [d for d, _, _ in items]
        for blob_id, obj in zip(tail_ids, messages[k:], strict=True):
            self.objs[blob_id] = copy.deepcopy(obj)  # kept private: reads hand out copies
        self.head_objs = list(messages)
        self.head_view = self.session.head
        return True

    def _unchanged(self, k: int, message: Any) -> bool:
        """True when ``message`` equals the kept copy of head position ``k`` (a fresh object
        from a read, not edited): cheaper than encoding it.
        """
        kept = self.objs.get(self.head_ids[k])
        return kept is not None and type(kept) is type(message) and kept == message

    def hydrate(self, conn: Connection, view: View) -> list[BaseMessage]:
        """The messages of a view, reusing the objects this process already rebuilt."""
        if view.length == 0:
            return []
        ids = self.store.views.read_ids(conn, view)
        missing = [i for i in dict.fromkeys(ids) if i not in self.objs]
        if missing:
            loaded = self.store.archive.load_by_ids(conn, missing)
            for i in missing:
                _, kind, doc = loaded[i]
                self.objs[i] = entry_message(kind, doc)
        return [self.objs[i] for i in ids]


def entry_message(kind: int, doc: Any) -> BaseMessage:
    """A covering-list entry as a LangChain message: our documents, OpenAI-format messages
    appended by other tools, and summaries (folds) as system messages.
    """
    if kind == BLOB_SUMMARY:
        return SystemMessage(content=str(doc.get("summary", "")))
    if isinstance(doc, dict) and "lc" in doc:
        return message_from_doc(doc)
    return convert_to_messages([doc])[0]


def find_thread(conn: Connection, thread_id: str, ns: str) -> tuple[int, int] | None:
    """``(ref, session_id)`` of a thread + namespace, or None."""
    row = rsql.fetchone(
        conn,
        "SELECT id, session_id FROM lg_threads WHERE thread_id = ? AND checkpoint_ns = ?",
        (thread_id, ns),
    )
    return None if row is None else (int(row[0]), int(row[1]))


def create_thread(store: Store, conn: Connection, thread_id: str, ns: str) -> tuple[int, int]:
    """Create the session for a thread + namespace and map it; returns ``(ref, session_id)``."""
    session = store.create_session(
        name=store.available_name(conn, session_name(thread_id, ns)),
        origin={"langgraph": {"thread_id": thread_id, "checkpoint_ns": ns}},
    )
    ref = rsql.fetchone(
        conn,
        "INSERT INTO lg_threads (thread_id, checkpoint_ns, session_id) VALUES (?, ?, ?) "
        "RETURNING id",
        (thread_id, ns, session.id),
    )[0]
    return int(ref), session.id


def thread_rows(conn: Connection, thread_id: str) -> list[tuple[int, int]]:
    """``(ref, session_id)`` for every namespace of a thread."""
    return [
        (int(r[0]), int(r[1]))
        for r in rsql.fetchall(
            conn, "SELECT id, session_id FROM lg_threads WHERE thread_id = ?", (thread_id,)
        )
    ]


# ---------------------------------------------------------------- checkpoints
def find_checkpoint(conn: Connection, ref: int, checkpoint_id: str | None) -> CheckpointRow | None:
    """A checkpoint of a thread by id, or its newest when ``checkpoint_id`` is None."""
    if checkpoint_id is None:
        sql = f"SELECT {_CK_COLUMNS} {_CK_FROM} WHERE lc.thread_ref = ? "
        row = rsql.fetchone(conn, sql + "ORDER BY lc.checkpoint_id DESC LIMIT 1", (ref,))
    else:
        sql = f"SELECT {_CK_COLUMNS} {_CK_FROM} WHERE lc.thread_ref = ? AND lc.checkpoint_id = ?"
        row = rsql.fetchone(conn, sql, (ref, id_bytes(str(checkpoint_id))))
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
    )
    return int(new)


def list_checkpoints(
    conn: Connection,
    *,
    thread_id: str | None,
    ns: str | None,
    checkpoint_id: str | None,
    before: str | None,
) -> list[tuple[str, str, CheckpointRow]]:
    """``(thread_id, ns, row)`` newest first, narrowed by what is given."""
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
        f"SELECT t.thread_id, t.checkpoint_ns, {_CK_COLUMNS} {_CK_FROM} "
        "JOIN lg_threads t ON t.id = lc.thread_ref"
        + (" WHERE " + " AND ".join(where) if where else "")
        + " ORDER BY lc.checkpoint_id DESC"
    )
    return [(str(r[0]), str(r[1]), _ck_row(r[2:])) for r in rsql.fetchall(conn, sql, params)]


def checkpoint_ids(conn: Connection, ref: int) -> list[str]:
    """A thread namespace's checkpoint ids, oldest first."""
    sql = "SELECT checkpoint_id FROM lg_checkpoints WHERE thread_ref = ? ORDER BY checkpoint_id"
    return [id_text(bytes(r[0])) for r in rsql.fetchall(conn, sql, (ref,))]


def checkpoints_of_runs(
    conn: Connection, run_ids: Sequence[str]
) -> list[tuple[int, int, list[str]]]:
    """``(ref, session_id, checkpoint ids)`` per thread namespace for the given runs."""
    found: dict[tuple[int, int], list[str]] = {}
    for start in range(0, len(run_ids), CHUNK):
        part = list(run_ids[start : start + CHUNK])
        sql = (
            "SELECT lc.thread_ref, t.session_id, lc.checkpoint_id FROM lg_checkpoints lc "
            "JOIN lg_threads t ON t.id = lc.thread_ref JOIN lg_runs r ON r.id = lc.run_ref "
            f"WHERE r.run_id IN ({rsql.placeholders(len(part))})"
        )
        for ref, sid, cid in rsql.fetchall(conn, sql, part):
            found.setdefault((int(ref), int(sid)), []).append(id_text(bytes(cid)))
    return [(ref, sid, ids) for (ref, sid), ids in found.items()]


def drop_checkpoints(
    conn: Connection,
    ref: int,
    session_id: int,
    ids: Sequence[str],
    *,
    writes: bool = True,
) -> None:
    """Delete LangGraph checkpoints (and, unless told not to, their writes) and the alpstore
    checkpoints holding them.
    """
    for start in range(0, len(ids), CHUNK):
        part = [id_bytes(str(i)) for i in ids[start : start + CHUNK]]
        marks = rsql.placeholders(len(part))
        rows = rsql.fetchall(
            conn,
            "SELECT id, alp_checkpoint_id FROM lg_checkpoints WHERE thread_ref = ? "
            f"AND checkpoint_id IN ({marks})",
            (ref, *part),
        )
        if writes:
            rsql.execute(
                conn,
                "DELETE FROM lg_write_items WHERE write_id IN (SELECT id FROM lg_writes "
                f"WHERE thread_ref = ? AND checkpoint_id IN ({marks}))",
                (ref, *part),
            )
            rsql.execute(
                conn,
                f"DELETE FROM lg_writes WHERE thread_ref = ? AND checkpoint_id IN ({marks})",
                (ref, *part),
            )
        if rows:
            refs = [int(r[0]) for r in rows]
            rmarks = rsql.placeholders(len(refs))
            rsql.execute(
                conn, f"DELETE FROM lg_checkpoint_blobs WHERE checkpoint_ref IN ({rmarks})", refs
            )
            rsql.execute(conn, f"DELETE FROM lg_checkpoints WHERE id IN ({rmarks})", refs)
            delete_alp_checkpoints(conn, session_id, [int(r[1]) for r in rows])


def delete_alp_checkpoints(conn: Connection, session_id: int, ids: Sequence[int]) -> None:
    """Delete a session's alpstore checkpoints; fork sources are kept, marked abandoned."""
    sources = set(
        conn.execute(
            select(sessions.c.source_checkpoint_id).where(
                sessions.c.source_checkpoint_id.in_(list(ids))
            )
        ).scalars()
    )
    doomed = [i for i in ids if i not in sources]
    for start in range(0, len(doomed), CHUNK):
        conn.execute(
            delete(checkpoints).where(
                checkpoints.c.session_id == session_id,
                checkpoints.c.id.in_(doomed[start : start + CHUNK]),
            )
        )
    if sources:
        conn.execute(
            update(checkpoints).where(checkpoints.c.id.in_(sources)).values(abandoned=True)
        )


def drop_thread(store: Store, conn: Connection, ref: int, session_id: int) -> None:
    """Delete a thread namespace's rows; empty and terminate its session and delete its
    checkpoints (fork sources stay), so ``alpstore archive gc`` can free its blobs.
    """
    rsql.execute(
        conn,
        "DELETE FROM lg_write_items WHERE write_id IN "
        "(SELECT id FROM lg_writes WHERE thread_ref = ?)",
        (ref,),
    )
    rsql.execute(
        conn,
        "DELETE FROM lg_checkpoint_blobs WHERE checkpoint_ref IN "
        "(SELECT id FROM lg_checkpoints WHERE thread_ref = ?)",
        (ref,),
    )
    for table in ("lg_writes", "lg_checkpoints"):
        rsql.execute(conn, f"DELETE FROM {table} WHERE thread_ref = ?", (ref,))
    rsql.execute(conn, "DELETE FROM lg_threads WHERE id = ?", (ref,))
    session = Session(store, store.session_info(session_id, conn=conn))
    info = session.info(refresh=False)
    status = info.status
    if info.name is not None:  # free the thread's name for a new thread with the same id
        store.rename_session(conn, session_id, store.available_name(conn, info.name + " (deleted)"))
    if status != "terminated":
        if status == "paused":
            session.set_status("active")
        session.truncate_and_append(0, [])
        session.set_status("terminated")
    every = conn.execute(
        select(checkpoints.c.id).where(checkpoints.c.session_id == session_id)
    ).scalars()
    delete_alp_checkpoints(conn, session_id, sorted(int(i) for i in every))


# ---------------------------------------------------------------- pending writes
def find_writes(
    conn: Connection, ref: int, checkpoint_id: str, task_id: str | None = None
) -> list[tuple[int, str, tuple[int, int | None, int, bytes], list[int]]]:
    """``(write id, task id, packed doc, item blob ids)`` of a checkpoint (or one task)."""
    sql = (
        "SELECT id, task_id, codec, dict_id, raw_size, state FROM lg_writes "
        "WHERE thread_ref = ? AND checkpoint_id = ?"
    )
    params: list[Any] = [ref, id_bytes(checkpoint_id)]
    if task_id is not None:
        sql += " AND task_id = ?"
        params.append(id_bytes(task_id))
    rows = rsql.fetchall(conn, sql, params)
    items: dict[int, list[int]] = {int(r[0]): [] for r in rows}
    ids = list(items)
    for start in range(0, len(ids), CHUNK):
        part = ids[start : start + CHUNK]
        for write_id, blob_id in rsql.fetchall(
            conn,
            "SELECT write_id, blob_id FROM lg_write_items "
            f"WHERE write_id IN ({rsql.placeholders(len(part))}) ORDER BY write_id, position",
            part,
        ):
            items[int(write_id)].append(int(blob_id))
    return [
        (
            int(r[0]),
            id_text(bytes(r[1])),
            (int(r[2]), r[3], int(r[4]), bytes(r[5])),
            items[int(r[0])],
        )
        for r in rows
    ]


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
        rsql.execute(conn, "DELETE FROM lg_write_items WHERE write_id = ?", (existing,))
        rsql.execute(conn, "DELETE FROM lg_writes WHERE id = ?", (existing,))
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
    )


# ---------------------------------------------------------------- copy
def copy_thread(store: Store, conn: Connection, source: str, target: str) -> None:
    """Copy a thread as forks of its sessions: new rows point at the same views and blobs.

    Raises:
        UsageError: the target thread already exists.
    """
    if thread_rows(conn, target):
        raise UsageError(
            f"thread {target!r} already exists",
            hint="copy_thread needs a new target thread id (delete_thread first to replace it)",
        )
    spaces = rsql.fetchall(
        conn, "SELECT id, checkpoint_ns FROM lg_threads WHERE thread_id = ?", (source,)
    )
    for ref, ns in spaces:
        cks = rsql.fetchall(
            conn,
            "SELECT lc.id, lc.checkpoint_id, lc.parent_checkpoint_id, lc.run_ref, lc.codec, "
            "lc.dict_id, lc.raw_size, lc.state, c.id, c.segment_id, c.length, c.turn, "
            f"c.kernel_blob_id, c.wm_blob_id, c.label, c.trigger, c.covering_digest {_CK_FROM} "
            "WHERE lc.thread_ref = ? ORDER BY lc.checkpoint_id",
            (ref,),
        )
        if not cks:
            continue
        child = store.fork_checkpoint(
            store.get_checkpoint(int(cks[-1][8])),
            name=store.available_name(conn, session_name(target, str(ns))),
        )
        new_ref = rsql.fetchone(
            conn,
            "INSERT INTO lg_threads (thread_id, checkpoint_ns, session_id) VALUES (?, ?, ?) "
            "RETURNING id",
            (target, ns, child.id),
        )[0]
        info = child.info(refresh=False)
        for (
            old,
            cid,
            parent,
            run,
            codec,
            dict_id,
            size,
            state,
            _a,
            seg,
            n,
            turn,
            k,
            w,
            lab,
            trig,
            cover,
        ) in cks:
            ck = store.insert_checkpoint(
                conn,
                info,
                View(seg, int(n)),
                turn=int(turn),
                label=lab,
                trigger=trig,
                kernel_id=k,
                wm_id=w,
                cover=cover_int(cover),  # the source's (None: computed)
            )
            new = rsql.fetchone(
                conn,
                "INSERT INTO lg_checkpoints (thread_ref, checkpoint_id, parent_checkpoint_id, "
                "alp_checkpoint_id, run_ref, codec, dict_id, raw_size, state) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (new_ref, cid, parent, ck.id, run, codec, dict_id, size, state),
            )[0]
            rsql.execute(
                conn,
                "INSERT INTO lg_checkpoint_blobs (checkpoint_ref, blob_id) "
                "SELECT ?, blob_id FROM lg_checkpoint_blobs WHERE checkpoint_ref = ?",
                (new, old),
            )
        for wid, *fields in rsql.fetchall(
            conn,
            "SELECT id, checkpoint_id, task_id, codec, dict_id, raw_size, state "
            "FROM lg_writes WHERE thread_ref = ?",
            (ref,),
        ):
            new_wid = rsql.fetchone(
                conn,
                "INSERT INTO lg_writes (thread_ref, checkpoint_id, task_id, codec, dict_id, "
                "raw_size, state) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (new_ref, *fields),
            )[0]
            rsql.execute(
                conn,
                "INSERT INTO lg_write_items (write_id, position, blob_id) "
                "SELECT ?, position, blob_id FROM lg_write_items WHERE write_id = ?",
                (new_wid, wid),
            )
