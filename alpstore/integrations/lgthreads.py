"""alpstore's operations on a LangGraph thread, done so that LangGraph sees them: a backtrack
with a steering message writes a LangGraph checkpoint as ``update_state`` from the target step
would, and a fork makes a new thread id LangGraph can run. ``session backtrack`` and
``session fork`` call these for the session of a thread (docs/langgraph-threads.md).

Through ``AlpstoreSaver`` itself (its ``put`` records the rewind: a ``backtracks`` row from the
thread's newest checkpoint to the target, the later steps no longer retained), so the archive's
view of the thread and LangGraph's cannot disagree.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

try:  # the framework first: without it, an ImportError naming the pip install line
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.base import copy_checkpoint
    from langgraph.checkpoint.base.id import uuid6
except ImportError as err:
    from alpstore.integrations._extras import missing

    raise missing("langgraph", "alpstore.integrations.lgthreads", err) from err

from alpstore.db import raw as rsql
from alpstore.errors import NotFoundError, UsageError
from alpstore.integrations import _lgdb as lgdb
from alpstore.integrations import _lgturnread as turnread
from alpstore.integrations import _lgturns as lgturns
from alpstore.integrations.langgraph import AlpstoreSaver
from alpstore.portable.lgrows import id_bytes, id_text, session_name, unpack_doc
from alpstore.sessions import CheckpointInfo, steering_message
from alpstore.store import Store
from alpstore.views import View, cover_int


@dataclass(frozen=True)
class ThreadStep:
    """A LangGraph checkpoint alpstore wrote or copied: its thread, namespace and id."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    session: str
    """The alpstore session holding it (uuid)."""

    @property
    def config(self) -> dict[str, Any]:
        """The ``RunnableConfig`` that continues the thread from here (``invoke(None, …)``)."""
        return {
            "configurable": {
                "thread_id": self.thread_id,
                "checkpoint_ns": self.checkpoint_ns,
                "checkpoint_id": self.checkpoint_id,
            }
        }


def _step_of(store: Store, checkpoint: CheckpointInfo) -> tuple[str, str, str, str]:
    """``(thread_id, ns, LangGraph checkpoint_id, messages channel)`` of an alpstore checkpoint
    of a thread.

    Raises:
        NotFoundError: no LangGraph checkpoint is that step (one alpstore made itself).
    """
    with store.db.read() as conn:
        row = rsql.fetchone(
            conn,
            "SELECT t.thread_id, t.checkpoint_ns, lc.checkpoint_id, lc.codec, lc.dict_id, "
            "lc.raw_size, lc.state FROM lg_checkpoints lc JOIN lg_threads t "
            "ON t.id = lc.thread_ref WHERE lc.alp_checkpoint_id = ? "
            "ORDER BY lc.checkpoint_id DESC LIMIT 1",
            (checkpoint.id,),
        )
    if row is None:  # a step a turn row holds (0011)
        with store.db.read() as conn:
            folded = turnread.folded_step_of_alp(conn, int(checkpoint.id))
        if folded is not None:
            key = folded[3].get("s") if isinstance(folded[3], dict) else None
            return folded[0], folded[1], id_text(folded[2]), str(key or "messages")
        raise NotFoundError(
            f"checkpoint {checkpoint.id} is no LangGraph checkpoint of its thread "
            "(alpstore made it, not the saver)",
            hint="`alpstore session log` lists the thread's steps; pick one with a node",
        )
    cid = id_text(bytes(row[2]))
    state = unpack_doc((int(row[3]), row[4], int(row[5]), bytes(row[6])), f"checkpoint {cid}")
    key = state.get("s") if isinstance(state, dict) else None
    return str(row[0]), str(row[1]), cid, str(key or "messages")


def backtrack_thread(
    store: Store, checkpoint: CheckpointInfo, steering: str | None
) -> tuple[ThreadStep, int]:
    """Continue a thread from the step ``checkpoint`` with ``steering`` added to its messages
    channel (``/steer <text>``, as every alpstore backtrack injects it), as
    ``graph.update_state(config_at_that_step, {"messages": [HumanMessage(...)]})`` would:
    a new LangGraph checkpoint whose parent is the target step (source ``update``; ``fork``
    without a message), the target's other channels and what runs next unchanged.
    ``graph.invoke(None, config)`` then continues from it.

    Returns the new step and the backtrack row the saver recorded (0: the target was the
    thread's newest step, so nothing was rewound).
    """
    thread_id, ns, cid, key = _step_of(store, checkpoint)
    saver = AlpstoreSaver(store, messages_key=key)
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}}
    found = saver.get_tuple(config)  # type: ignore[arg-type]
    if found is None:
        raise NotFoundError(f"LangGraph checkpoint {cid} of thread {thread_id!r} is gone")
    step = int(found.metadata.get("step", -1))
    new = copy_checkpoint(found.checkpoint)
    new["id"] = str(uuid6(clock_seq=step + 1))
    new["ts"] = datetime.now(UTC).isoformat()
    versions: dict[str, Any] = {}
    if steering is not None:
        if key not in new["channel_versions"]:
            raise UsageError(
                f"LangGraph thread {thread_id!r} has no {key!r} channel at that step: a "
                "steering message has nowhere to go",
                hint="backtrack without a message (the thread then continues from the step)",
            )
        doc = steering_message(steering)
        message = HumanMessage(content=doc["content"], id=str(uuid.uuid4()))
        old = new["channel_values"].get(key)
        new["channel_values"][key] = [*(old if isinstance(old, list) else []), message]
        newest = max(new["channel_versions"].values(), default=None)
        versions[key] = saver.get_next_version(cast(Any, newest), None)
        new["channel_versions"][key] = versions[key]
    # what runs next is what ran next from the target: its updated channels stay updated
    # (LangGraph schedules from them), the messages channel joins them
    before = found.checkpoint.get("updated_channels")
    if before is not None:
        new["updated_channels"] = sorted({*before, *versions})
    metadata: Any = {
        "source": "update" if versions else "fork",
        "step": step + 1,
        "parents": dict(found.metadata.get("parents") or {}),
    }
    with store.db.read() as conn:
        top = rsql.fetchone(conn, "SELECT COALESCE(MAX(id), 0) FROM backtracks")[0]
    saver.put(found.config, new, metadata, versions)
    with store.db.atomic() as conn:
        row = rsql.fetchone(
            conn,
            "SELECT b.id, s.uuid FROM backtracks b JOIN sessions s ON s.id = b.session_id "
            "WHERE b.id > ? AND b.to_checkpoint_id = ? ORDER BY b.id DESC LIMIT 1",
            (int(top), checkpoint.id),
        )
        bt = 0
        if row is not None:
            bt = int(row[0])
            if steering is not None:  # the steering message the rewind injected
                rsql.execute(
                    conn,
                    "UPDATE backtracks SET steering_blob_id = (SELECT e.blob_id FROM sessions s "
                    "JOIN segment_entries e ON e.segment_id = s.head_segment_id "
                    "AND e.position = s.head_length - 1 WHERE s.id = backtracks.session_id) "
                    "WHERE id = ?",
                    (bt,),
                )
        head = lgdb.find_thread(conn, thread_id, ns)
        uuid_row = rsql.fetchone(
            conn, "SELECT uuid FROM sessions WHERE id = ?", (head[1] if head else 0,)
        )
    return ThreadStep(thread_id, ns, str(new["id"]), str(uuid_row[0]) if uuid_row else ""), bt


def free_thread_id(store: Store, thread_id: str) -> str:
    """``THREAD-fork``, ``THREAD-fork-2``…: the first id no thread (or session name) has."""
    with store.db.read() as conn:
        n = 1
        while True:
            candidate = f"{thread_id}-fork" + (f"-{n}" if n > 1 else "")
            taken = rsql.fetchone(
                conn, "SELECT 1 FROM lg_threads WHERE thread_id = ?", (candidate,)
            ) or rsql.fetchone(
                conn, "SELECT 1 FROM sessions WHERE name = ?", (session_name(candidate, ""),)
            )
            if not taken:
                return candidate
            n += 1


def fork_thread(
    store: Store,
    checkpoint: CheckpointInfo,
    new_thread_id: str | None = None,
    *,
    session_id: str | None = None,
) -> ThreadStep:
    """A new thread whose history is the step ``checkpoint`` and the steps before it (its
    LangGraph checkpoints with their ids, parents and pending writes, copied; the messages
    shared), in a session forked from that step (``session_id``: its id):
    ``graph.invoke(None, {"configurable": {"thread_id": new}})`` continues it as the old
    thread would have from there.

    Raises:
        UsageError: ``new_thread_id`` is taken.
    """
    thread_id, ns, cid, _ = _step_of(store, checkpoint)
    target = new_thread_id or free_thread_id(store, thread_id)
    name = session_name(target, ns)
    with store.db.atomic() as conn:
        if rsql.fetchone(conn, "SELECT 1 FROM lg_threads WHERE thread_id = ?", (target,)):
            raise UsageError(f"LangGraph thread {target!r} already exists")
        source = lgdb.find_thread(conn, thread_id, ns)
        assert source is not None
        lgturns.unfold_all(conn, source[0])  # its folded steps loose first (0011), copied as rows
        chain = _ancestors(conn, source[0], cid)
        child = store.fork_checkpoint(
            checkpoint, session_id=session_id, name=store.available_name(conn, name)
        )
        info = child.info(refresh=False)
        (ref,) = rsql.fetchone(
            conn,
            "INSERT INTO lg_threads (thread_id, checkpoint_ns, session_id) VALUES (?, ?, ?) "
            "RETURNING id",
            (target, ns, child.id),
        )
        for old_ref, lg_id, alp_id in chain:
            seg, length, turn, label, trigger, cover = rsql.fetchone(
                conn,
                "SELECT segment_id, length, turn, label, trigger, covering_digest "
                "FROM checkpoints WHERE id = ?",
                (alp_id,),
            )
            copy = store.insert_checkpoint(
                conn,
                info,
                View(seg, int(length)),
                turn=int(turn),
                label=label,
                trigger=trigger,
                kernel_id=None,
                wm_id=None,
                cover=cover_int(cover),
            )
            (new_ref,) = rsql.fetchone(
                conn,
                "INSERT INTO lg_checkpoints (thread_ref, checkpoint_id, parent_checkpoint_id, "
                "alp_checkpoint_id, run_ref, codec, dict_id, raw_size, state) SELECT ?, "
                "checkpoint_id, parent_checkpoint_id, ?, run_ref, codec, dict_id, raw_size, "
                "state FROM lg_checkpoints WHERE id = ? RETURNING id",
                (ref, copy.id, old_ref),
            )
            rsql.execute(
                conn,
                "INSERT INTO lg_checkpoint_blobs (checkpoint_ref, blob_id) "
                "SELECT ?, blob_id FROM lg_checkpoint_blobs WHERE checkpoint_ref = ?",
                (new_ref, old_ref),
            )
            for (wid,) in rsql.fetchall(
                conn,
                "SELECT id FROM lg_writes WHERE thread_ref = ? AND checkpoint_id = ? ORDER BY id",
                (source[0], lg_id),
            ):
                (new_wid,) = rsql.fetchone(
                    conn,
                    "INSERT INTO lg_writes (thread_ref, checkpoint_id, task_id, codec, dict_id, "
                    "raw_size, state) SELECT ?, checkpoint_id, task_id, codec, dict_id, "
                    "raw_size, state FROM lg_writes WHERE id = ? RETURNING id",
                    (ref, wid),
                )
                rsql.execute(
                    conn,
                    "INSERT INTO lg_write_items (write_id, position, blob_id) "
                    "SELECT ?, position, blob_id FROM lg_write_items WHERE write_id = ?",
                    (new_wid, wid),
                )
    return ThreadStep(target, ns, cid, child.uuid)


def _ancestors(conn: Any, ref: int, cid: str) -> list[tuple[int, bytes, int]]:
    """``(row id, checkpoint_id bytes, alpstore checkpoint id)`` of ``cid`` and its parents,
    oldest first (a loop over the parent links: no recursion on the thread's length).
    """
    chain: list[tuple[int, bytes, int]] = []
    seen: set[bytes] = set()
    at: bytes | None = id_bytes(cid)
    while at is not None and at not in seen:
        seen.add(at)
        row = rsql.fetchone(
            conn,
            "SELECT id, checkpoint_id, alp_checkpoint_id, parent_checkpoint_id FROM "
            "lg_checkpoints WHERE thread_ref = ? AND checkpoint_id = ?",
            (ref, at),
        )
        if row is None:
            break
        chain.append((int(row[0]), bytes(row[1]), int(row[2])))
        at = None if row[3] is None else bytes(row[3])
    chain.reverse()
    return chain
