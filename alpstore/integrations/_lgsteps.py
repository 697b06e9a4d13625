"""The steps of a LangGraph thread as the saver records them: the node that wrote each step
(named by the pending writes on its parent, in the trigger ``langgraph:loop:<node>``), an
interrupt or a task's error as a session event, and a put from an older checkpoint (time
travel) as a rewind of the thread, recorded as a backtrack.

Functions of the saver (its first argument) or of its transaction, called from ``_lgwrite``
and from the saver's ``put_writes``.
"""

from __future__ import annotations

import json
import time
from typing import Any, NamedTuple

from alpstore.db import raw as rsql
from alpstore.integrations import _lgdb as lgdb
from alpstore.integrations._lgpack import id_bytes, id_text
from alpstore.integrations._lgthread import SaverState, ThreadState
from alpstore.views import View

TRIGGER_PREFIX = "langgraph:"
"""Checkpoints written by the saver carry the trigger ``langgraph:<source>[:<nodes>]``."""
TRIGGER_MAX = 32
"""The trigger column's width."""
MARKED_WRITES = {"__interrupt__": "interrupt", "__error__": "error", "__resume__": "resume"}
"""Pending writes recorded as a session event too (``session log``, the inspector): an
interrupt, a task's error, and the value a ``Command(resume=…)`` answered an interrupt with."""


def task_node(task_path: str) -> str | None:
    """The node of a LangGraph task path (``~__pregel_pull, agent``), printable and short;
    None for a path that names none (a ``Send`` push, the resume command's null task).
    """
    parts = [p.strip() for p in str(task_path).split(",")]
    if len(parts) < 2 or parts[0] != "~__pregel_pull" or not parts[1]:
        return None
    return "".join(c if c.isprintable() and not c.isspace() else "_" for c in parts[1])[:64]


def step_trigger(source: str, nodes: list[str]) -> str:
    """``langgraph:<source>`` with the step's writing nodes (``langgraph:loop:agent``)."""
    safe = "".join(c if c.isprintable() and not c.isspace() else "_" for c in source)
    trigger = TRIGGER_PREFIX + safe
    if nodes:
        trigger += ":" + ",".join(nodes)
    return trigger[:TRIGGER_MAX]


def step_nodes(
    saver: SaverState, conn: Any, th: ThreadState, ref: int, parent: Any, source: str
) -> list[str]:
    """The nodes that wrote this step: the tasks whose pending writes are on its parent
    (noted by this process's ``put_writes``; read back only for a loop step whose parent's
    writes another process stored).
    """
    if parent is None or source != "loop":  # input, update, fork: LangGraph's own steps
        return []
    noted = th.writers.pop(str(parent), None)
    if noted is not None:
        return noted
    nodes: list[str] = []
    for _, _, packed, _ in lgdb.find_writes(conn, ref, str(parent)):
        node = task_node(saver._packer.unpack(conn, packed).get("p", ""))
        if node is not None and node not in nodes:
            nodes.append(node)
    return nodes


def note_writer(th: ThreadState, checkpoint_id: str, task_path: str) -> tuple[list[str], Any]:
    """Right after ``put_writes`` committed, under the thread's lock it wrote under: remember
    which node wrote on ``checkpoint_id``, so the next step's ``put`` (LangGraph saves both in
    the background, in either order) names it from here instead of reading the writes back;
    the nodes noted there so far and the step put before these writes (``(ck_id, trigger)``
    for :func:`note_writes` to name), if any. A task of no node is noted too: the next
    step's put need not read the writes back for one.
    """
    node = task_node(task_path)
    nodes = th.note_writer(str(checkpoint_id), node)
    late = th.unnamed.get(str(checkpoint_id)) if node is not None else None
    return nodes, late


def note_writes(
    saver: SaverState,
    thread_id: str,
    ns: str,
    checkpoint_id: str,
    task_path: str,
    writes: Any,
    noted: tuple[list[str], Any] | None = None,
) -> None:
    """After ``put_writes`` committed: remember which node wrote on ``checkpoint_id`` (the
    next step's trigger names it; ``noted``: done already by :func:`note_writer` under the
    thread's lock) and record an interrupt or a task's error as a session event
    (``interrupt`` / ``error``: its node, the LangGraph checkpoint_id, the value).
    """
    node = task_node(task_path)
    store = saver.store
    if noted is None:
        th = saver._state(thread_id, ns)
        with th.lock:
            noted = note_writer(th, checkpoint_id, task_path)
    nodes, late = noted
    if late is not None:  # the step was put first: its trigger names the node now
        name_step(store, late[0], late[1], step_trigger("loop", nodes))
    marked = [
        (MARKED_WRITES[c], v)
        for c, v in writes
        # a resume is noted once, from the task it resumed (the resume command's own null
        # task writes the same value with no node)
        if c in MARKED_WRITES and (node is not None or MARKED_WRITES[c] != "resume")
    ]
    if not marked:
        return

    def attempt() -> None:
        with store.db.atomic() as conn:
            found = rsql.fetchone(
                conn,
                "SELECT t.session_id, lc.alp_checkpoint_id, t.id FROM lg_threads t "
                "LEFT JOIN lg_checkpoints lc ON lc.thread_ref = t.id AND lc.checkpoint_id = ? "
                "WHERE t.thread_id = ? AND t.checkpoint_ns = ?",
                (id_bytes(str(checkpoint_id)), thread_id, ns),
            )
            if found is None:
                return
            alp = None if found[1] is None else int(found[1])
            if alp is None:  # a step a turn row holds (0011)
                step = lgdb.find_checkpoint(conn, int(found[2]), str(checkpoint_id))
                alp = None if step is None else step.alp_id
            for kind, value in marked:
                detail = {"node": node, "checkpoint_id": str(checkpoint_id)}
                detail["value"] = marked_value(kind, value)
                store.record_event(conn, int(found[0]), kind, alp, detail)

    store.db.retrying(attempt, what=f"the interrupt of LangGraph thread {thread_id!r}")


def name_step(store: Any, ck_id: int, unnamed: str, trigger: str) -> None:
    """Set the trigger of a step put before its parent's writes (only while it is still
    the unnamed one it was given, and the checkpoint is still there).
    """

    def attempt() -> None:
        with store.db.atomic() as conn:
            rsql.execute(
                conn,
                "UPDATE checkpoints SET trigger = ? WHERE id = ? AND trigger LIKE ?",
                (trigger, ck_id, unnamed.split(":")[0] + ":loop%"),
            )

    store.db.retrying(attempt, what="the trigger of a LangGraph step")


def marked_value(kind: str, value: Any) -> Any:
    """What an event keeps of a marked write: an error as its text; an interrupt's values (a
    list of ``Interrupt``: their ``value``) and a task's resume values as the JSON they are,
    one alone as itself (a value JSON cannot hold: its ``repr``; over 2,000 characters of
    JSON: its text, cut).
    """
    if kind == "error":
        return f"{type(value).__name__}: {value}"[:300]
    items = value if isinstance(value, (list, tuple)) else [value]  # a task's: in order
    inner = [getattr(item, "value", item) for item in items]
    doc: Any = inner[0] if len(inner) == 1 else inner
    try:
        text = json.dumps(doc, ensure_ascii=False, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):
        return repr(doc)[:300]
    return doc if len(text) <= 2000 else text[:300]


class BranchPoint(NamedTuple):
    """A put from an older checkpoint: the alpstore checkpoints it rewinds from and to."""

    session_id: int
    latest_id: int
    latest_seq: int
    target_id: int
    target_seq: int
    view: View
    turn: int
    cover: bytes | None


_NEWEST_LG = (
    "SELECT checkpoint_id FROM lg_checkpoints WHERE thread_ref = ? "
    "ORDER BY checkpoint_id DESC LIMIT 1"
)
_PARENT_CK = (
    "SELECT c.id, c.seq, c.segment_id, c.length, c.turn, c.covering_digest "
    "FROM lg_checkpoints lc JOIN checkpoints c ON c.id = lc.alp_checkpoint_id "
    "WHERE lc.thread_ref = ? AND lc.checkpoint_id = ?"
)
_ALP_CK = "SELECT id, seq, segment_id, length, turn, covering_digest FROM checkpoints WHERE id = ?"
_LATEST_CK = "SELECT id, seq FROM checkpoints WHERE session_id = ? ORDER BY seq DESC LIMIT 1"


def branch_point(conn: Any, row: lgdb.HeadRow, parent: str, cid: str) -> BranchPoint | None:
    """The rewind a put makes when its parent is not the thread's newest checkpoint (an
    ``update_state`` or ``invoke`` from an older checkpoint_id: LangGraph's time travel);
    None for the common put that extends the newest one (decided without a read when this
    process stored that one: ``ThreadState.last_put``).
    """
    newest = rsql.fetchone(conn, _NEWEST_LG, (row.ref,))
    if newest is None or id_text(bytes(newest[0])) in (parent, cid):
        return None
    found = rsql.fetchone(conn, _PARENT_CK, (row.ref, id_bytes(parent)))
    if found is None:  # a step a turn row holds (0011)
        folded = lgdb.find_checkpoint(conn, row.ref, parent)
        if folded is not None:
            found = rsql.fetchone(conn, _ALP_CK, (folded.alp_id,))
    latest = rsql.fetchone(conn, _LATEST_CK, (row.session_id,))
    if found is None or latest is None or int(found[0]) == int(latest[0]):
        return None  # the parent is not stored (deleted), or it is the session's head
    ck_id, seq, segment, length, turn, digest = found
    return BranchPoint(
        row.session_id,
        int(latest[0]),
        int(latest[1]),
        int(ck_id),
        int(seq),
        View(segment, int(length)),
        int(turn),
        None if digest is None else bytes(digest),
    )


def record_branch(saver: SaverState, conn: Any, row: lgdb.HeadRow, branch: BranchPoint) -> None:
    """Record a branch as what it is, a rewind of the thread: the checkpoints after the
    parent stop being retained (kept, as a backtrack keeps them) and a ``backtracks`` row
    goes from the old newest checkpoint to the parent (the checkpoint written next, with
    its ``langgraph:<source>`` trigger, says which node made the branch).
    """
    store = saver.store
    cut = store.abandon_after(conn, branch.session_id, branch.target_seq)
    steps = cut if cut > 0 else branch.latest_seq - branch.target_seq
    rsql.execute(
        conn,
        "INSERT INTO backtracks (session_id, from_checkpoint_id, to_checkpoint_id, steps, "
        "steering_blob_id, automatic, error_signature, created_at) "
        "VALUES (?, ?, ?, ?, NULL, ?, NULL, ?)",
        (branch.session_id, branch.latest_id, branch.target_id, steps, False, time.time()),
    )
    store.emit(
        "backtrack",
        session=row.uuid,
        steps=steps,
        to_checkpoint=branch.target_id,
        to_turn=branch.turn,
        automatic=False,
        steering=None,
    )
