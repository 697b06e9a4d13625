"""The SQL side of the LangGraph saver: thread → session mapping, checkpoint rows, channel values,
pending writes, and the deletions and copies that keep alpstore's own rows consistent.

Everything here runs inside the caller's transaction. Alpstore checkpoints that another session
forked from are never deleted, only marked abandoned (lineage keeps its source).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from langchain_core.messages import BaseMessage, SystemMessage, convert_to_messages
from langgraph.checkpoint.base import PendingWrite, writes_sort_key
from langgraph.checkpoint.serde.base import SerializerProtocol
from sqlalchemy import Connection, delete, select, update

from alpstore.db import raw as rsql
from alpstore.db.tables import BLOB_MESSAGE, BLOB_STATE, BLOB_SUMMARY, checkpoints, sessions
from alpstore.errors import UsageError
from alpstore.integrations._lgcodec import (
    KIND_MESSAGE,
    KIND_MESSAGES,
    message_docs,
    message_from_doc,
    unwrap,
)
from alpstore.sessions import Session
from alpstore.store import Store, encode
from alpstore.views import View

SESSION_NAME_PREFIX = "langgraph:"
CHUNK = 500


class CheckpointRow(NamedTuple):
    """A LangGraph checkpoint row joined with its alpstore checkpoint."""

    checkpoint_id: str
    parent_checkpoint_id: str | None
    view: View
    kernel_blob_id: int
    alp_id: int


_CK_COLUMNS = (
    "lc.checkpoint_id, lc.parent_checkpoint_id, c.segment_id, c.length, c.kernel_blob_id, c.id"
)
_CK_FROM = "FROM lg_checkpoints lc JOIN checkpoints c ON c.id = lc.alp_checkpoint_id"


def _ck_row(row: Any) -> CheckpointRow:
    return CheckpointRow(str(row[0]), row[1], View(row[2], int(row[3])), int(row[4]), int(row[5]))


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
        while k < n and old[k] is messages[k]:
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
            self.objs[blob_id] = obj
        self.head_objs = list(messages)
        self.head_view = self.session.head
        return True

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
        name=session_name(thread_id, ns),
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
        row = rsql.fetchone(conn, sql, (ref, str(checkpoint_id)))
    return None if row is None else _ck_row(row)


def insert_checkpoint(
    conn: Connection,
    ref: int,
    checkpoint_id: str,
    parent: str | None,
    alp_id: int,
    run_id: str | None,
) -> None:
    """Map a LangGraph checkpoint to the alpstore checkpoint holding it."""
    rsql.execute(
        conn,
        "INSERT INTO lg_checkpoints (thread_ref, checkpoint_id, parent_checkpoint_id, "
        "alp_checkpoint_id, run_id) VALUES (?, ?, ?, ?, ?)",
        (ref, checkpoint_id, parent, alp_id, run_id),
    )


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
        ("lc.checkpoint_id = ?", checkpoint_id),
        ("lc.checkpoint_id < ?", before),
    ):
        if value is not None:
            where.append(clause)
            params.append(str(value))
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
    return [str(r[0]) for r in rsql.fetchall(conn, sql, (ref,))]


def checkpoints_of_runs(
    conn: Connection, run_ids: Sequence[str]
) -> list[tuple[int, int, list[str]]]:
    """``(ref, session_id, checkpoint ids)`` per thread namespace for the given runs."""
    found: dict[tuple[int, int], list[str]] = {}
    for start in range(0, len(run_ids), CHUNK):
        part = list(run_ids[start : start + CHUNK])
        sql = (
            "SELECT lc.thread_ref, t.session_id, lc.checkpoint_id FROM lg_checkpoints lc "
            "JOIN lg_threads t ON t.id = lc.thread_ref "
            f"WHERE lc.run_id IN ({rsql.placeholders(len(part))})"
        )
        for ref, sid, cid in rsql.fetchall(conn, sql, part):
            found.setdefault((int(ref), int(sid)), []).append(str(cid))
    return [(ref, sid, ids) for (ref, sid), ids in found.items()]


def drop_checkpoints(
    store: Store,
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
        part = [str(i) for i in ids[start : start + CHUNK]]
        marks = rsql.placeholders(len(part))
        alp = [
            int(r[0])
            for r in rsql.fetchall(
                conn,
                "SELECT alp_checkpoint_id FROM lg_checkpoints WHERE thread_ref = ? "
                f"AND checkpoint_id IN ({marks})",
                (ref, *part),
            )
        ]
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
        if alp:
            rsql.execute(
                conn,
                f"DELETE FROM lg_checkpoints WHERE thread_ref = ? AND checkpoint_id IN ({marks})",
                (ref, *part),
            )
            delete_alp_checkpoints(conn, session_id, alp)


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
    if doomed:
        conn.execute(
            delete(checkpoints).where(
                checkpoints.c.session_id == session_id, checkpoints.c.id.in_(doomed)
            )
        )
    if sources:
        conn.execute(
            update(checkpoints).where(checkpoints.c.id.in_(sources)).values(abandoned=True)
        )


def drop_thread(store: Store, conn: Connection, ref: int, session_id: int) -> None:
    """Delete a thread namespace's rows; empty and terminate its session, delete its
    checkpoints (fork sources stay), so ``alpstore archive gc`` can free its blobs.
    """
    alp = [
        int(r[0])
        for r in rsql.fetchall(
            conn, "SELECT alp_checkpoint_id FROM lg_checkpoints WHERE thread_ref = ?", (ref,)
        )
    ]
    rsql.execute(
        conn,
        "DELETE FROM lg_write_items WHERE write_id IN "
        "(SELECT id FROM lg_writes WHERE thread_ref = ?)",
        (ref,),
    )
    for table in ("lg_writes", "lg_channel_values", "lg_checkpoints"):
        rsql.execute(conn, f"DELETE FROM {table} WHERE thread_ref = ?", (ref,))
    rsql.execute(conn, "DELETE FROM lg_threads WHERE id = ?", (ref,))
    session = Session(store, store.session_info(session_id, conn=conn))
    status = session.info(refresh=False).status
    if status != "terminated":
        if status == "paused":
            session.set_status("active")
        session.truncate_and_append(0, [])
        session.set_status("terminated")
    every = conn.execute(
        select(checkpoints.c.id).where(checkpoints.c.session_id == session_id)
    ).scalars()
    delete_alp_checkpoints(conn, session_id, sorted({*alp, *(int(i) for i in every)}))


# ---------------------------------------------------------------- channel values
def put_channel_values(
    store: Store,
    conn: Connection,
    ref: int,
    rows: Sequence[tuple[str, str, int, Any]],
) -> None:
    """Store ``(channel, version, kind, encoded blob | None)`` rows (a re-put replaces)."""
    if not rows:
        return
    encoded = [e for _, _, _, e in rows if e is not None]
    ids = iter(store.archive.store_encoded(conn, encoded))
    rsql.executemany(
        conn,
        "INSERT INTO lg_channel_values (thread_ref, channel, version, kind, blob_id) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (thread_ref, channel, version) "
        "DO UPDATE SET kind = excluded.kind, blob_id = excluded.blob_id",
        [(ref, ch, ver, kind, next(ids) if e is not None else None) for ch, ver, kind, e in rows],
    )


def channel_value(conn: Connection, ref: int, channel: str, version: str) -> tuple[int, int] | None:
    """``(kind, blob_id)`` of a channel at a version, or None."""
    row = rsql.fetchone(
        conn,
        "SELECT kind, blob_id FROM lg_channel_values WHERE thread_ref = ? AND channel = ? "
        "AND version = ?",
        (ref, channel, version),
    )
    return None if row is None else (int(row[0]), row[1])


def sweep_channel_values(
    store: Store, conn: Connection, ref: int, serde: SerializerProtocol
) -> None:
    """Delete the channel values no remaining checkpoint of the thread namespace refers to."""
    kernels = [
        int(r[0])
        for r in rsql.fetchall(
            conn, f"SELECT c.kernel_blob_id {_CK_FROM} WHERE lc.thread_ref = ?", (ref,)
        )
    ]
    used: set[tuple[str, str]] = set()
    for _, _, doc in store.archive.load_by_ids(conn, kernels).values():
        versions = unwrap(serde, doc["checkpoint"]).get("channel_versions", {})
        used.update((str(c), str(v)) for c, v in versions.items())
    stored = rsql.fetchall(
        conn, "SELECT channel, version FROM lg_channel_values WHERE thread_ref = ?", (ref,)
    )
    doomed = [(ref, c, v) for c, v in stored if (str(c), str(v)) not in used]
    rsql.executemany(
        conn,
        "DELETE FROM lg_channel_values WHERE thread_ref = ? AND channel = ? AND version = ?",
        doomed,
    )


# ---------------------------------------------------------------- pending writes
def put_writes(
    store: Store,
    conn: Connection,
    ref: int,
    checkpoint_id: str,
    task_id: str,
    task_path: str,
    rows: Sequence[tuple[str, int, int, Any]],
    replace: bool,
) -> None:
    """Store ``(channel, idx, kind, document or message documents)`` writes of one task.

    An existing ``(task, idx)`` is kept unless every write is a special one (errors,
    interrupts), which replace — LangGraph's rule.
    """
    for channel, idx, kind, doc in rows:
        key = (ref, checkpoint_id, str(task_id), idx)
        existing = rsql.fetchone(
            conn,
            "SELECT id FROM lg_writes WHERE thread_ref = ? AND checkpoint_id = ? AND task_id = ? "
            "AND idx = ?",
            key,
        )
        if existing is not None:
            if not replace:
                continue
            rsql.execute(conn, "DELETE FROM lg_write_items WHERE write_id = ?", (existing[0],))
            rsql.execute(conn, "DELETE FROM lg_writes WHERE id = ?", (existing[0],))
        item_ids: list[int] = []
        blob_id: int | None = None
        if kind == KIND_MESSAGES:
            item_ids = store.archive.store_encoded(conn, [encode(d, BLOB_MESSAGE) for d in doc])
        else:
            (blob_id,) = store.archive.store_encoded(conn, [encode(doc, blob_kind(kind))])
        write_id = rsql.fetchone(
            conn,
            "INSERT INTO lg_writes (thread_ref, checkpoint_id, task_id, idx, channel, task_path, "
            "kind, blob_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (*key, channel, task_path, kind, blob_id),
        )[0]
        rsql.executemany(
            conn,
            "INSERT INTO lg_write_items (write_id, position, blob_id) VALUES (?, ?, ?)",
            [(write_id, i, b) for i, b in enumerate(item_ids)],
        )


def load_writes(
    store: Store,
    conn: Connection,
    ref: int,
    checkpoint_id: str,
    channels: Sequence[str] | None,
    decode: Callable[[int, Any], Any],
) -> list[PendingWrite]:
    """A checkpoint's pending writes in ``writes_sort_key`` order (optionally some channels)."""
    sql = (
        "SELECT id, task_id, idx, channel, task_path, kind, blob_id FROM lg_writes "
        "WHERE thread_ref = ? AND checkpoint_id = ?"
    )
    params: list[Any] = [ref, checkpoint_id]
    if channels is not None:
        sql += f" AND channel IN ({rsql.placeholders(len(channels))})"
        params.extend(channels)
    rows = rsql.fetchall(conn, sql, params)
    if not rows:
        return []
    lists = [int(r[0]) for r in rows if r[5] == KIND_MESSAGES]
    items: dict[int, list[int]] = {w: [] for w in lists}
    for start in range(0, len(lists), CHUNK):
        part = lists[start : start + CHUNK]
        for write_id, blob_id in rsql.fetchall(
            conn,
            "SELECT write_id, blob_id FROM lg_write_items "
            f"WHERE write_id IN ({rsql.placeholders(len(part))}) ORDER BY write_id, position",
            part,
        ):
            items[int(write_id)].append(int(blob_id))
    wanted = [int(r[6]) for r in rows if r[6] is not None]
    wanted += [b for ids in items.values() for b in ids]
    docs = store.archive.load_by_ids(conn, wanted)
    out = []
    for wid, task_id, idx, channel, task_path, kind, blob_id in rows:
        if kind == KIND_MESSAGES:
            value: Any = [message_from_doc(docs[b][2]) for b in items[int(wid)]]
        else:
            value = decode(int(kind), docs[int(blob_id)][2])
        out.append(
            (writes_sort_key(str(task_path), str(task_id), int(idx)), (task_id, channel, value))
        )
    out.sort(key=lambda pair: pair[0])
    return [w for _, w in out]


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
        conn, "SELECT id, session_id, checkpoint_ns FROM lg_threads WHERE thread_id = ?", (source,)
    )
    for ref, _sid, ns in spaces:
        cks = rsql.fetchall(
            conn,
            "SELECT lc.checkpoint_id, lc.parent_checkpoint_id, lc.run_id, c.segment_id, c.length, "
            f"c.turn, c.kernel_blob_id, c.wm_blob_id, c.label, c.trigger {_CK_FROM} "
            "WHERE lc.thread_ref = ? ORDER BY lc.checkpoint_id",
            (ref,),
        )
        if not cks:
            continue
        latest = find_checkpoint(conn, int(ref), str(cks[-1][0]))
        assert latest is not None
        child = store.fork_checkpoint(
            store.get_checkpoint(latest.alp_id), name=session_name(target, str(ns))
        )
        new_ref = rsql.fetchone(
            conn,
            "INSERT INTO lg_threads (thread_id, checkpoint_ns, session_id) VALUES (?, ?, ?) "
            "RETURNING id",
            (target, ns, child.id),
        )[0]
        info = child.info(refresh=False)
        for cid, parent, run_id, seg, length, turn, kernel, wm, label, trigger in cks:
            ck = store.insert_checkpoint(
                conn,
                info,
                View(seg, int(length)),
                turn=int(turn),
                label=label,
                trigger=trigger,
                kernel_id=kernel,
                wm_id=wm,
            )
            insert_checkpoint(conn, int(new_ref), str(cid), parent, ck.id, run_id)
        rsql.execute(
            conn,
            "INSERT INTO lg_channel_values (thread_ref, channel, version, kind, blob_id) "
            "SELECT ?, channel, version, kind, blob_id FROM lg_channel_values WHERE thread_ref = ?",
            (new_ref, ref),
        )
        for wid, *fields in rsql.fetchall(
            conn,
            "SELECT id, checkpoint_id, task_id, idx, channel, task_path, kind, blob_id "
            "FROM lg_writes WHERE thread_ref = ?",
            (ref,),
        ):
            new_wid = rsql.fetchone(
                conn,
                "INSERT INTO lg_writes (thread_ref, checkpoint_id, task_id, idx, channel, "
                "task_path, kind, blob_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (new_ref, *fields),
            )[0]
            rsql.execute(
                conn,
                "INSERT INTO lg_write_items (write_id, position, blob_id) "
                "SELECT ?, position, blob_id FROM lg_write_items WHERE write_id = ?",
                (new_wid, wid),
            )
