"""Folding a LangGraph thread's closed turns into ``lg_turns`` rows and back (migration 0011,
issue 42): what the migration does, for the saver's own writer (``_lgfold``) and the writes that
change a folded step (a put of its id again, the maintenance calls), which unfold first.
Reading them: ``_lgturnread``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection

from alpstore.db import raw as rsql
from alpstore.db.runs import pg_array, run_text
from alpstore.integrations import _lgdb as lgdb
from alpstore.integrations._lgpack import id_bytes, id_text
from alpstore.integrations._lgturnread import _TURN_COLUMNS, Turn, _turn
from alpstore.integrations._lgturnread import turn_holding as turn_holding
from alpstore.portable.lgrows import TurnDictionary, pack_doc, pack_turn, unpack_doc

STEP_COLUMNS = (
    "id, checkpoint_id, parent_checkpoint_id, alp_checkpoint_id, run_ref, codec, dict_id, "
    "raw_size, state"
)
"""A loose step as a fold takes it (what :func:`turn_of` and :func:`cuts` read)."""


def _loose_steps(
    conn: Connection, ref: int, below: bytes, start: bytes | None, above: bytes | None
) -> list[Any]:
    """The thread's loose steps below ``below``, from ``start`` / above ``above``, in id order."""
    sql = f"SELECT {STEP_COLUMNS} FROM lg_checkpoints WHERE thread_ref = ? AND checkpoint_id < ?"
    params: list[Any] = [ref, below]
    if start is not None:
        sql += " AND checkpoint_id >= ?"
        params.append(start)
    if above is not None:
        sql += " AND checkpoint_id > ?"
        params.append(above)
    return rsql.fetchall(conn, sql + " ORDER BY checkpoint_id", params)


def fold(
    conn: Connection,
    ref: int,
    start: bytes | None,
    below: bytes,
    *,
    above: bytes | None = None,
) -> int | None:
    """The thread's loose steps with ids from ``start`` (inclusive) or above ``above`` to
    ``below`` (exclusive) and their pending writes as one turn row (their loose rows deleted);
    its id, or None when there is none to fold. The caller keeps the invariant (no turn row's
    range overlaps the new one: ``above`` the thread's newest turn row's last id) and holds the
    thread (its session row locked, or SQLite's write transaction).
    """
    steps = _loose_steps(conn, ref, below, start, above)
    if not steps:
        return None
    return _fold_group(conn, ref, steps)


def _fold_group(
    conn: Connection,
    ref: int,
    steps: Sequence[Any],
    states: dict[int, Any] | None = None,
    dictionary: TurnDictionary | None = None,
) -> int:
    """One turn row of ``steps`` (loose rows in id order, as :data:`STEP_COLUMNS` reads them)
    and their pending writes, their loose rows deleted; its id (``states``: the steps'
    unpacked states, by row id, when the caller has them).
    """
    writes = {
        bytes(r[1]): lgdb.find_writes(conn, ref, id_text(bytes(r[1])), folded=False) for r in steps
    }
    packed, runs, alp_ids, blobs, write_ids = turn_of(steps, writes, states, dictionary)
    listed = sorted(blobs) or None
    if rsql.dialect_of(conn) == "postgresql":
        arrays: tuple[Any, ...] = (pg_array(alp_ids), pg_array(runs))
        mark = "CAST(? AS INTEGER[])"
        named: Any = None if listed is None else pg_array(listed)
    else:
        arrays, mark = (run_text(alp_ids), run_text(runs)), "?"
        named = None if listed is None else run_text(listed)
    turn = rsql.fetchone(
        conn,
        "INSERT INTO lg_turns (thread_ref, first_checkpoint_id, last_checkpoint_id, steps, "
        f"alp_ids, run_refs, codec, dict_id, raw_size, doc, blob_ids) VALUES (?, ?, ?, ?, "
        f"{mark}, {mark}, ?, ?, ?, ?, {mark}) RETURNING id",
        (ref, bytes(steps[0][1]), bytes(steps[-1][1]), len(steps), *arrays, *packed, named),
    )[0]
    for at in range(0, len(write_ids), lgdb.CHUNK):
        part = write_ids[at : at + lgdb.CHUNK]
        marks = rsql.placeholders(len(part))
        rsql.execute(conn, f"DELETE FROM lg_write_items WHERE write_id IN ({marks})", part)
        rsql.execute(conn, f"DELETE FROM lg_writes WHERE id IN ({marks})", part)
    ids = [int(r[0]) for r in steps]
    for at in range(0, len(ids), lgdb.CHUNK):
        part = ids[at : at + lgdb.CHUNK]
        marks = rsql.placeholders(len(part))
        rsql.execute(
            conn, f"DELETE FROM lg_checkpoint_blobs WHERE checkpoint_ref IN ({marks})", part
        )
        rsql.execute(conn, f"DELETE FROM lg_checkpoints WHERE id IN ({marks})", part)
    return int(turn)


Written = tuple[int, str, tuple[int, Any, int, bytes], list[int]]
"""A pending write as ``_lgdb.find_writes`` gives it: (write id, task id, packed doc, items)."""


def turn_of(
    steps: Sequence[Any],
    writes: dict[bytes, list[Written]],
    states: dict[int, Any] | None = None,
    dictionary: TurnDictionary | None = None,
) -> tuple[tuple[int, Any, int, bytes], list[int], list[int], dict[int, None], list[int]]:
    """A turn row's parts from its loose steps (``lg_checkpoints`` rows: id, checkpoint id,
    parent, alpstore checkpoint id, run ref, codec, dict id, raw size, state; in id order) and
    each step's writes: the packed document, its runs, its steps' alpstore ids, the blobs it
    names and the write ids it takes (``states``: those :func:`cuts` unpacked already;
    ``dictionary``: the archive's turn dictionary, when it has one).
    """
    k: list[Any] = []
    w: list[Any] = []
    blobs: dict[int, None] = {}
    write_ids: list[int] = []
    for index, r in enumerate(steps):
        cid = bytes(r[1])
        state = step_state(r, states)
        parent = None if r[2] is None else bytes(r[2]).hex()
        k.append([cid.hex(), parent, int(r[3]), None if r[4] is None else int(r[4]), state])
        refs = state.get("v", {})
        blobs.update(dict.fromkeys(int(v[2]) for v in refs.values() if v and v[0] == "b"))
        for write_id, task, wdoc, items in writes.get(cid, ()):
            doc = unpack_doc(wdoc, "lg_writes row")
            w.append([index, id_bytes(task).hex(), doc, items])
            blobs.update(dict.fromkeys(items))
            write_ids.append(write_id)
    packed = pack_turn({"k": k, "w": w}, dictionary)
    runs = sorted({int(r[4]) for r in steps if r[4] is not None})
    return packed, runs, [int(r[3]) for r in steps], blobs, write_ids


def unfold(conn: Connection, ref: int, turn: Turn) -> None:
    """A turn row's steps and writes back as loose rows (new row ids, order kept), the row
    deleted: what a write that changes a folded step runs first.
    """
    for cid, parent, alp, run, state in turn.doc["k"]:
        refs = state.get("v", {})
        lgdb.insert_checkpoint(
            conn,
            ref,
            id_text(bytes.fromhex(cid)),
            None if parent is None else id_text(bytes.fromhex(parent)),
            int(alp),
            run,
            pack_doc(state),
            [int(v[2]) for v in refs.values() if v and v[0] == "b"],
        )
    for index, task, doc, items in turn.doc["w"]:
        cid = id_text(bytes.fromhex(turn.doc["k"][index][0]))
        lgdb.save_writes(conn, ref, cid, id_text(bytes.fromhex(task)), None, pack_doc(doc), items)
    rsql.execute(conn, "DELETE FROM lg_turns WHERE id = ?", (turn.id,))


def is_input(state: Any) -> bool:
    """A step's state document is a new invoke's input (``source == "input"``): a turn starts
    there (what migration 0011 cuts at too).
    """
    meta = state.get("m") if isinstance(state, dict) else None
    inner = meta.get("json") if isinstance(meta, dict) else None
    return isinstance(inner, dict) and inner.get("source") == "input"


def step_state(r: Any, states: dict[int, Any] | None = None) -> Any:
    """A loose step row's state document, unpacked once when ``states`` keeps them by row id."""
    if states is not None and int(r[0]) in states:
        return states[int(r[0])]
    state = unpack_doc((int(r[5]), r[6], int(r[7]), bytes(r[8])), "lg_checkpoints row")
    if states is not None:
        states[int(r[0])] = state
    return state


def cuts(steps: Sequence[Any], states: dict[int, Any] | None = None) -> list[list[Any]]:
    """Loose steps (``lg_checkpoints`` rows in id order, state packed last) cut into turns: a
    new group at every input step (``states``: the unpacked ones kept for :func:`turn_of`).
    """
    groups: list[list[Any]] = []
    for r in steps:
        state = step_state(r, states)
        if not groups or is_input(state):
            groups.append([])
        groups[-1].append(r)
    return groups


_LOOSE_STEP = "SELECT 1 FROM lg_checkpoints WHERE thread_ref = ? AND checkpoint_id = ?"
"""The input a fold was asked for is still a loose step of the thread: everything the fold
takes lies below it, so the thread's newest step is never taken, whatever happened to the
thread between the input's put and the fold (a delete, a copy over it, a prune)."""


def fold_before(
    conn: Connection, ref: int, checkpoint_id: str, dictionary: TurnDictionary | None = None
) -> int:
    """Fold the turns that ended before ``checkpoint_id`` (a new invoke's input step): the
    thread's loose steps above its newest turn row and below that id, one turn row per turn
    (cut at input steps); how many rows were made. The caller holds the thread.
    """
    newest = rsql.fetchone(
        conn,
        "SELECT last_checkpoint_id FROM lg_turns WHERE thread_ref = ? "
        "ORDER BY first_checkpoint_id DESC LIMIT 1",
        (ref,),
    )
    above = None if newest is None else bytes(newest[0])
    below = id_bytes(checkpoint_id)
    if above is not None and above >= below:
        return 0  # the input lies below a turn row (an id out of order): nothing to fold
    if not rsql.fetchone(conn, _LOOSE_STEP, (ref, below)):
        return 0  # the input is gone (the thread deleted, copied over since): a stale fold
    states: dict[int, Any] = {}  # each step read and unpacked once, to cut and to fold
    groups = cuts(_loose_steps(conn, ref, below, None, above), states)
    for group in groups:
        _fold_group(conn, ref, group, states, dictionary)
    return len(groups)


def unfold_all(conn: Connection, ref: int) -> int:
    """Every turn row of a thread namespace back as loose rows (what the maintenance calls that
    rewrite a thread's steps run first); how many there were.
    """
    rows = rsql.fetchall(
        conn, f"SELECT {_TURN_COLUMNS} FROM lg_turns WHERE thread_ref = ? ORDER BY id", (ref,)
    )
    for row in rows:
        unfold(conn, ref, _turn(conn, row))
    return len(rows)


def unfold_runs(conn: Connection, run_ids: Sequence[str]) -> None:
    """Every turn row holding a step of one of these runs back as loose rows."""
    wanted: set[int] = set()
    for at in range(0, len(run_ids), lgdb.CHUNK):
        part = list(run_ids[at : at + lgdb.CHUNK])
        sql = f"SELECT id FROM lg_runs WHERE run_id IN ({rsql.placeholders(len(part))})"
        wanted.update(int(r[0]) for r in rsql.fetchall(conn, sql, part))
    if not wanted:
        return
    for turn_id, ref, runs in rsql.fetchall(conn, "SELECT id, thread_ref, run_refs FROM lg_turns"):
        stored = json.loads(runs) if isinstance(runs, str) else list(runs)
        if wanted.intersection(int(r) for r in stored):
            row = rsql.fetchone(
                conn, f"SELECT {_TURN_COLUMNS} FROM lg_turns WHERE id = ?", (turn_id,)
            )
            unfold(conn, int(ref), _turn(conn, row))


def drop_all(conn: Connection, ref: int) -> None:
    """Delete a thread namespace's turn rows (``delete_thread``)."""
    rsql.execute(conn, "DELETE FROM lg_turns WHERE thread_ref = ?", (ref,))


def keep_newest_loose(conn: Connection, ref: int) -> None:
    """Keep a thread's newest step loose (what the newest-step reads, ``NEWEST_OF_THREAD``,
    rely on): after steps were deleted, the turn row ending above every loose step is unfolded.
    """
    row = rsql.fetchone(
        conn,
        f"SELECT {_TURN_COLUMNS} FROM lg_turns WHERE thread_ref = ? "
        "ORDER BY first_checkpoint_id DESC LIMIT 1",
        (ref,),
    )
    if row is None:
        return
    newest = rsql.fetchone(
        conn,
        "SELECT checkpoint_id FROM lg_checkpoints WHERE thread_ref = ? "
        "ORDER BY checkpoint_id DESC LIMIT 1",
        (ref,),
    )
    if newest is None or bytes(newest[0]) < bytes(row[2]):
        unfold(conn, ref, _turn(conn, row))
