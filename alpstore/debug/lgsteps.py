"""The steps of a LangGraph thread as the reading commands show them: each checkpoint's
spelling ``SESSION@TURN.STEP``, the node that wrote it, its LangGraph checkpoint_id, its
interrupts and errors, and the pending writes no later step consumed.

Read with plain SQL (:mod:`alpstore.db.raw`) from what ``AlpstoreSaver`` stored: the trigger
``langgraph:<source>[:<nodes>]`` of each alpstore checkpoint, the ``lg_checkpoints`` /
``lg_writes`` rows (ids and counts only, nothing unpacked; a closed turn's ``lg_turns`` row,
0011, unpacked) and the ``interrupt`` / ``error`` session events. No LangGraph and no
SQLAlchemy import: ``session log`` stays fast.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from alpstore.archive.lgstate import folded_steps
from alpstore.db import raw as rsql
from alpstore.sessions import CheckpointInfo

if TYPE_CHECKING:
    from alpstore.core.store import CoreStore as Store

LANGGRAPH = "langgraph:"
"""The name prefix of a thread's session and of its checkpoints' triggers."""
MARK_KINDS = ("interrupt", "error", "resume")
"""Session events the saver records for a task's special pending writes (a resume: the value
a ``Command(resume=…)`` answered the step's interrupt with)."""


@dataclass(frozen=True)
class Step:
    """One checkpoint of a LangGraph thread, as ``session log`` and the inspector show it."""

    checkpoint: int
    ref: str
    """``SESSION@TURN.STEP``: every command taking a checkpoint reference accepts it."""
    node: str
    """The node(s) that wrote this step, or the source in parentheses: ``(input)``."""
    checkpoint_id: str | None
    """The LangGraph checkpoint_id (None when its row is gone)."""
    pending_writes: int = 0
    """Tasks whose writes sit on this checkpoint with no later step made from them."""
    marks: list[str] = field(default_factory=list)
    """``interrupt at approve: …``, ``resumed with: "yes"``, ``error in tools: …``,
    ``subgraph summarize:…: 3 step(s) …``."""
    values: list[dict[str, Any]] = field(default_factory=list)
    """The marks' values as they are: ``{"kind", "node", "value"}`` (an interrupt's and a
    resume's value as the JSON it is)."""
    subgraphs: list[dict[str, Any]] = field(default_factory=list)
    """The subgraph namespaces that started at this step: ``{"ns", "session", "steps"}``."""

    @property
    def note(self) -> str:
        """The marks and the pending writes, as one line."""
        parts = list(self.marks)
        if self.pending_writes:
            parts.append(f"pending writes of {self.pending_writes} task(s)")
        return "; ".join(parts)


def is_thread(name: str | None) -> bool:
    """True for the session of a LangGraph thread (named ``langgraph:THREAD[ NS]``)."""
    return bool(name) and str(name).startswith(LANGGRAPH)


def node_of(trigger: str | None) -> str:
    """The writing node(s) a saver trigger names (``langgraph:loop:agent`` → ``agent``), or
    its source in parentheses (``langgraph:update`` → ``(update)``); ``-`` for another.
    """
    text = str(trigger or "")
    if not text.startswith(LANGGRAPH):
        return "-"
    source, _, nodes = text[len(LANGGRAPH) :].partition(":")
    return nodes or f"({source})"


def step_numbers(cks: Iterable[CheckpointInfo]) -> dict[int, tuple[int, int]]:
    """Each checkpoint's ``(turn, step)``: its place among the checkpoints recorded at its
    turn, counted from 1 in the order they were recorded, cut ones included (what
    ``SESSION@TURN.STEP`` resolves). ``cks`` must be all of the session's, oldest first.
    """
    seen: dict[int, int] = {}
    out: dict[int, tuple[int, int]] = {}
    for ck in cks:
        seen[ck.turn] = seen.get(ck.turn, 0) + 1
        out[ck.id] = (ck.turn, seen[ck.turn])
    return out


def lg_id_text(data: bytes) -> str:
    """A LangGraph id as the saver stores it: a UUID's 16 bytes, or a NUL + UTF-8."""
    if len(data) == 16:
        return str(uuid.UUID(bytes=data))
    body = data[1:-1] if len(data) == 17 and data.endswith(b"\0") else data[1:]
    return body.decode("utf-8", errors="replace")


def _rows(store: Store, session_id: int) -> tuple[dict[int, str], dict[int, int]]:
    """``alp checkpoint → LangGraph checkpoint_id`` and ``alp checkpoint → pending tasks``."""
    with store.db.read() as conn:
        cks = rsql.fetchall(
            conn,
            "SELECT lc.alp_checkpoint_id, lc.checkpoint_id, lc.parent_checkpoint_id, "
            "lc.thread_ref FROM lg_checkpoints lc JOIN lg_threads t ON t.id = lc.thread_ref "
            "WHERE t.session_id = ?",
            (session_id,),
        )
        writes = rsql.fetchall(
            conn,
            "SELECT w.thread_ref, w.checkpoint_id, COUNT(*) FROM lg_writes w "
            "JOIN lg_threads t ON t.id = w.thread_ref WHERE t.session_id = ? "
            "GROUP BY w.thread_ref, w.checkpoint_id",
            (session_id,),
        )
        for (ref,) in rsql.fetchall(  # the steps turn rows hold (0011), unpacked
            conn,
            "SELECT DISTINCT u.thread_ref FROM lg_turns u JOIN lg_threads t "
            "ON t.id = u.thread_ref WHERE t.session_id = ?",
            (session_id,),
        ):
            steps, folded = folded_steps(conn, int(ref))
            cks += [(alp, cid, parent, ref) for cid, parent, _, alp, _ in steps]
            tasks = Counter(cid for cid, *_ in folded)
            writes += [(ref, cid, n) for cid, n in tasks.items()]
    ids: dict[int, str] = {}
    by_lg: dict[tuple[int, bytes], int] = {}
    parents: set[tuple[int, bytes]] = set()
    for alp, cid, parent, ref in cks:
        ids[int(alp)] = lg_id_text(bytes(cid))
        by_lg[(int(ref), bytes(cid))] = int(alp)
        if parent is not None:
            parents.add((int(ref), bytes(parent)))
    pending: dict[int, int] = {}
    for ref, cid, n in writes:
        key = (int(ref), bytes(cid))
        if key in by_lg and key not in parents:  # no step was made from these writes
            pending[by_lg[key]] = int(n)
    return ids, pending


def thread_steps(
    store: Store,
    session_id: int,
    name: str,
    cks: list[CheckpointInfo],
    events: Iterable[Mapping[str, Any]],
) -> dict[int, Step]:
    """The steps of a thread's session (``cks``: all its checkpoints, oldest first;
    ``events``: its session events), by alpstore checkpoint id.
    """
    ids, pending = _rows(store, session_id)
    by_lg = {v: k for k, v in ids.items()}
    marks: dict[int, list[str]] = {}
    values: dict[int, list[dict[str, Any]]] = {}
    for ev in events:
        detail = ev.get("detail") or {}
        if ev.get("kind") not in MARK_KINDS or not isinstance(detail, dict):
            continue
        target = by_lg.get(str(detail.get("checkpoint_id")), ev.get("checkpoint"))
        if target is None:
            continue
        value = detail.get("value", "")
        node = detail.get("node")
        if ev["kind"] == "resume":
            text = f"resumed{f' at {node}' if node else ''} with: {shown(value)}"
        else:
            where = "at" if ev["kind"] == "interrupt" else "in"
            text = f"{ev['kind']} {where} {node or '?'}: {shown(value)}"
        marks.setdefault(int(target), []).append(text)
        values.setdefault(int(target), []).append(
            {"kind": ev["kind"], "node": node, "value": value}
        )
    subs = _subgraphs(store, session_id)
    for ck_id, docs in subs.items():
        for doc in docs:
            marks.setdefault(ck_id, []).append(
                f"subgraph {doc['ns']}: {doc['steps']} step(s) (session {doc['session'][:8]})"
            )
    numbers = step_numbers(cks)
    out: dict[int, Step] = {}
    for ck in cks:
        turn, step = numbers[ck.id]
        out[ck.id] = Step(
            ck.id,
            f"{name}@{turn}.{step}",
            node_of(ck.trigger),
            ids.get(ck.id),
            pending.get(ck.id, 0),
            marks.get(ck.id, []),
            values.get(ck.id, []),
            subs.get(ck.id, []),
        )
    return out


def shown(value: Any) -> str:
    """A mark's value as ``session log`` prints it: text as it is, anything else as JSON."""
    if isinstance(value, str):
        return value[:300]
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 300 else text[:299] + "…"


def _subgraphs(store: Store, session_id: int) -> dict[int, list[dict[str, Any]]]:
    """The subgraph namespaces under a thread's session, by the step they started at."""
    with store.db.read() as conn:
        rows = rsql.fetchall(
            conn,
            "SELECT s.source_checkpoint_id, t.checkpoint_ns, s.uuid, "
            "(SELECT COUNT(*) FROM checkpoints c WHERE c.session_id = s.id) "
            "FROM sessions s JOIN lg_threads t ON t.session_id = s.id "
            "WHERE s.parent_id = ? AND t.checkpoint_ns <> '' ORDER BY s.id",
            (session_id,),
        )
    out: dict[int, list[dict[str, Any]]] = {}
    for source, ns, uuid_, n in rows:
        if source is not None:
            out.setdefault(int(source), []).append(
                {"ns": str(ns), "session": str(uuid_), "steps": int(n)}
            )
    return out


def is_mark(event: Mapping[str, Any]) -> bool:
    """True for an event :func:`thread_steps` shows on its step instead of as a row."""
    return event.get("kind") in MARK_KINDS and isinstance(event.get("detail"), dict)


def step_of(store: Store, ck: CheckpointInfo) -> int:
    """``ck``'s STEP in ``SESSION@TURN.STEP`` (one count, for a reference printed alone)."""
    with store.db.read() as conn:
        found = rsql.fetchone(
            conn,
            "SELECT COUNT(*) FROM checkpoints WHERE turn = ? AND seq <= ? AND session_id = "
            "(SELECT session_id FROM checkpoints WHERE id = ?)",
            (ck.turn, ck.seq, ck.id),
        )
    return int(found[0]) if found is not None else 1


def thread_of(store: Store, session_id: int) -> tuple[str, str] | None:
    """``(thread_id, checkpoint_ns)`` of the LangGraph thread a session holds, if any."""
    with store.db.read() as conn:
        found = rsql.fetchone(
            conn,
            "SELECT thread_id, checkpoint_ns FROM lg_threads WHERE session_id = ?",
            (session_id,),
        )
    return None if found is None else (str(found[0]), str(found[1]))
