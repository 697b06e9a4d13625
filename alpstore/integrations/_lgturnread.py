"""Reading a LangGraph thread's closed turns, one ``lg_turns`` row each (migration 0011, issue 42).

A turn row holds its steps' states and their pending writes as one packed document
``{"k": [[checkpoint id, parent id | null, alp checkpoint id, run ref | null, state], ...],
"w": [[step index, task id, writes doc, [item blob ids]], ...]}`` (ids as the hex of their
stored bytes). A thread's turn rows hold disjoint id ranges and no loose step lies inside one,
so the row that can hold a step is the one with the greatest ``first_checkpoint_id <= id``.

Pending writes put on a folded step later (a run resumed from an old checkpoint) are loose
``lg_writes`` rows: a task's loose row is what it has (merged by LangGraph's rule from the
folded one when it had writes there), a task with none keeps its folded writes.

Here: the readers' fallbacks (a step, its writes, the steps for ``list``), as the plain tuples
``_lgdb`` makes its rows of (``_lgturns`` folds and unfolds).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from sqlalchemy import Connection

from alpstore.codec import canonical_json
from alpstore.db import raw as rsql
from alpstore.integrations._lgpack import id_bytes, id_text
from alpstore.portable.lgrows import CODEC_RAW, Packed, unpack_doc
from alpstore.views import View

CHUNK = 500

StepRow = tuple[str, str | None, View, int, Packed]
"""A folded step as ``_StepRow`` holds it, but its row id: ``(checkpoint id, parent
id, view, alp checkpoint id, packed state)``."""

IN_TURN = (
    "EXISTS (SELECT 1 FROM (SELECT u.last_checkpoint_id FROM lg_turns u "
    "WHERE u.thread_ref = t.id AND u.first_checkpoint_id <= ? "
    "ORDER BY u.first_checkpoint_id DESC LIMIT 1) x WHERE x.last_checkpoint_id >= ?)"
)
"""Whether a turn row of thread ``t`` holds a checkpoint id (given twice): one backward step of
the ``(thread_ref, first_checkpoint_id)`` key, not a scan of the thread's turns."""

WritesFound = list[tuple[int, str, Packed, list[int]]]
"""``_lgdb.find_writes``' answer: ``(write id, task id, packed doc, item blob ids)``."""

_TURN_COLUMNS = "id, first_checkpoint_id, last_checkpoint_id, codec, dict_id, raw_size, doc"

_TURN_OF = (
    f"SELECT {_TURN_COLUMNS} FROM lg_turns WHERE thread_ref = ? AND first_checkpoint_id <= ? "
    "ORDER BY first_checkpoint_id DESC LIMIT 1"
)
"""The one turn row of a thread that can hold a checkpoint id (one step of the unique key)."""


class Turn(NamedTuple):
    """A turn row, its document unpacked."""

    id: int
    first: bytes
    last: bytes
    doc: dict[str, Any]

    def index_of(self, checkpoint_id: str) -> int | None:
        want = id_bytes(checkpoint_id).hex()
        for i, step in enumerate(self.doc["k"]):
            if step[0] == want:
                return i
        return None


def raw_packed(doc: Any) -> Packed:
    """A document as a packed row holding it uncompressed (what ``Packer.unpack`` reads back)."""
    raw = canonical_json(doc)
    return CODEC_RAW, None, len(raw), raw


def _turn(conn: Connection, row: Any) -> Turn:
    doc = unpack_doc(
        (int(row[3]), row[4], int(row[5]), bytes(row[6])), f"lg_turns row {row[0]}", conn
    )
    return Turn(int(row[0]), bytes(row[1]), bytes(row[2]), doc)


def turn_holding(conn: Connection, ref: int, checkpoint_id: str) -> Turn | None:
    """The turn row whose range holds ``checkpoint_id`` (the step may still be absent)."""
    key = id_bytes(checkpoint_id)
    row = rsql.fetchone(conn, _TURN_OF, (ref, key))
    if row is None or bytes(row[2]) < key:
        return None
    return _turn(conn, row)


def _views(conn: Connection, alp_ids: Sequence[int]) -> dict[int, View]:
    out: dict[int, View] = {}
    unique = list(dict.fromkeys(alp_ids))
    for at in range(0, len(unique), CHUNK):
        part = unique[at : at + CHUNK]
        marks = rsql.placeholders(len(part))
        sql = f"SELECT id, segment_id, length FROM checkpoints WHERE id IN ({marks})"
        for alp, seg, length in rsql.fetchall(conn, sql, part):
            out[int(alp)] = View(seg, int(length))
    return out


def _row(step: list[Any], view: View) -> StepRow:
    cid, parent, alp, _, state = step
    return (
        id_text(bytes.fromhex(cid)),
        None if parent is None else id_text(bytes.fromhex(parent)),
        view,
        int(alp),
        raw_packed(state),
    )


def folded_step(conn: Connection, ref: int, checkpoint_id: str) -> StepRow | None:
    """A step held by a turn row (None when no turn row holds it)."""
    turn = turn_holding(conn, ref, checkpoint_id)
    index = None if turn is None else turn.index_of(checkpoint_id)
    if turn is None or index is None:
        return None
    step = turn.doc["k"][index]
    view = _views(conn, [int(step[2])]).get(int(step[2]))
    return None if view is None else _row(step, view)


def folded_writes(
    conn: Connection,
    ref: int,
    checkpoint_id: str,
    task_id: str | None = None,
    *,
    but: set[str] | frozenset[str] = frozenset(),
) -> WritesFound:
    """A folded step's pending writes, as ``_lgdb.find_writes`` gives them (write id 0: no
    row), leaving out the tasks in ``but`` (they have loose rows).
    """
    turn = turn_holding(conn, ref, checkpoint_id)
    index = None if turn is None else turn.index_of(checkpoint_id)
    if turn is None or index is None:
        return []
    out: WritesFound = []
    for at, task, doc, items in turn.doc["w"]:
        if at != index:
            continue
        task_text = id_text(bytes.fromhex(task))
        if task_text in but or (task_id is not None and task_text != task_id):
            continue
        out.append((0, task_text, raw_packed(doc), [int(b) for b in items]))
    return out


_LIST_BATCH = 8
"""Turn rows read at a time by a ``list`` with a limit (newest first)."""


def folded_rows(
    conn: Connection,
    ref: int,
    checkpoint_id: str | None,
    before: str | None,
    limit: int | None = None,
) -> list[StepRow]:
    """A thread's folded steps for ``list``: the one step ``checkpoint_id`` (when given), those
    below ``before`` (when given), newest first; with ``limit``, at least the newest ``limit``
    of them (turn rows read newest first, no further than they need).
    """
    if checkpoint_id is not None:
        one = folded_step(conn, ref, checkpoint_id)
        return [] if one is None or (before is not None and not _below(one, before)) else [one]
    where = "thread_ref = ?"
    params: list[Any] = [ref]
    bound = None if before is None else id_bytes(before)
    if bound is not None:
        where += " AND first_checkpoint_id < ?"
        params.append(bound)
    sql = f"SELECT id FROM lg_turns WHERE {where} ORDER BY first_checkpoint_id DESC"
    ids = [int(r[0]) for r in rsql.fetchall(conn, sql, params)]
    batch = len(ids) if limit is None else _LIST_BATCH
    steps: list[Any] = []
    for at in range(0, len(ids), max(1, batch)):
        part = ids[at : at + batch]
        sql = f"SELECT {_TURN_COLUMNS} FROM lg_turns WHERE id IN ({rsql.placeholders(len(part))})"
        for row in rsql.fetchall(conn, sql, part):
            held = _turn(conn, row).doc["k"]
            steps += [s for s in held if bound is None or bytes.fromhex(s[0]) < bound]
        if limit is not None and len(steps) >= limit:
            break
    views = _views(conn, [int(s[2]) for s in steps])
    rows = [_row(s, views[int(s[2])]) for s in steps if int(s[2]) in views]
    rows.sort(key=lambda r: id_bytes(r[0]), reverse=True)
    return rows


def _below(row: StepRow, before: str) -> bool:
    return id_bytes(row[0]) < id_bytes(before)


def folded_step_of_alp(conn: Connection, alp_id: int) -> tuple[str, str, bytes, Any] | None:
    """``(thread_id, ns, checkpoint id bytes, state)`` of the newest folded step whose alpstore
    checkpoint is ``alp_id`` (the threads of its session, their turn rows' ``alp_ids``).
    """
    rows = rsql.fetchall(
        conn,
        "SELECT t.thread_id, t.checkpoint_ns, u.id, u.alp_ids FROM lg_turns u "
        "JOIN lg_threads t ON t.id = u.thread_ref JOIN checkpoints c ON c.session_id = "
        "t.session_id WHERE c.id = ? ORDER BY u.first_checkpoint_id DESC",
        (alp_id,),
    )
    for thread_id, ns, turn_id, alp_ids in rows:
        stored = json.loads(alp_ids) if isinstance(alp_ids, str) else list(alp_ids)
        if alp_id not in [int(a) for a in stored]:
            continue
        row = rsql.fetchone(conn, f"SELECT {_TURN_COLUMNS} FROM lg_turns WHERE id = ?", (turn_id,))
        for step in reversed(_turn(conn, row).doc["k"]):
            if int(step[2]) == alp_id:
                return str(thread_id), str(ns), bytes.fromhex(step[0]), step[4]
    return None
