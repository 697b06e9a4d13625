"""A closed turn folded on PostgreSQL in two round trips (issue 42 on issue 45's budget): the
turn's loose steps and their writes read in one (``raw.fetch_and_end``, no lock held), its row
built here, then the thread's session row locked, what was read checked unchanged, the turn row
inserted and the loose rows deleted in one pipeline with the COMMIT (``raw.begin_later``). The
thread's session row is held only while the server runs those statements, not across the
client's waits: the thread's next put no longer queues behind a fold of ~17 round trips.

When anything changed between the read and the write (a step put again, a write added, another
fold), the guard fails the transaction whole and the caller folds the plain way
(``_lgturns.fold_before`` under the thread's lock).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from alpstore.db import raw as rsql
from alpstore.db.runs import pg_array
from alpstore.integrations._lgpack import id_text
from alpstore.integrations._lgturns import STEP_COLUMNS, Written, cuts, turn_of
from alpstore.portable.lgrows import TurnDictionary

FOLD_MOVED = "alpstore: the thread's loose steps changed since the fold read them"

_REF = "(SELECT id FROM lg_threads WHERE thread_id = ? AND checkpoint_ns = ?)"
_ABOVE = (
    "coalesce((SELECT last_checkpoint_id FROM lg_turns WHERE thread_ref = {ref} "
    "ORDER BY first_checkpoint_id DESC LIMIT 1), CAST(? AS bytea))"
)
_READ_THREAD = (
    "SELECT t.id, t.session_id, (SELECT last_checkpoint_id FROM lg_turns WHERE thread_ref = t.id "
    "ORDER BY first_checkpoint_id DESC LIMIT 1) FROM lg_threads t "
    "WHERE t.thread_id = ? AND t.checkpoint_ns = ? AND EXISTS (SELECT 1 FROM lg_checkpoints c "
    "WHERE c.thread_ref = t.id AND c.checkpoint_id = ?)"
)
"""The thread, if the input the fold was asked for is still one of its loose steps (else the
fold is stale: nothing to do, ``_lgturns._LOOSE_STEP``)."""
_READ_STEPS = (
    f"SELECT {STEP_COLUMNS} FROM lg_checkpoints WHERE thread_ref = {_REF} AND checkpoint_id < ? "
    f"AND checkpoint_id > {_ABOVE.format(ref=_REF)} ORDER BY checkpoint_id"
)
_READ_WRITES = (
    "SELECT w.id, w.checkpoint_id, w.task_id, w.codec, w.dict_id, w.raw_size, w.state, i.blob_id "
    "FROM lg_writes w LEFT JOIN lg_write_items i ON i.write_id = w.id "
    f"WHERE w.thread_ref = {_REF} AND w.checkpoint_id < ? "
    f"AND w.checkpoint_id > {_ABOVE.format(ref=_REF)} ORDER BY w.id, i.position"
)
_LOCK = "SELECT 1 FROM sessions WHERE id = ? FOR NO KEY UPDATE"
_GUARD = (
    "SELECT CAST(CASE WHEN coalesce((SELECT array_agg(id ORDER BY id) FROM lg_checkpoints "
    "WHERE thread_ref = ? AND checkpoint_id > ? AND checkpoint_id < ?), '{}') "
    "= CAST(? AS INTEGER[]) AND coalesce((SELECT array_agg(id ORDER BY id) FROM lg_writes "
    "WHERE thread_ref = ? AND checkpoint_id > ? AND checkpoint_id < ?), '{}') "
    "= CAST(? AS INTEGER[]) AND (SELECT last_checkpoint_id FROM lg_turns WHERE thread_ref = ? "
    "ORDER BY first_checkpoint_id DESC LIMIT 1) IS NOT DISTINCT FROM CAST(? AS bytea) "
    "AND EXISTS (SELECT 1 FROM lg_checkpoints WHERE thread_ref = ? AND checkpoint_id = ?) "
    "THEN '1' ELSE ? END AS INTEGER)"
)
"""Taken after ``_LOCK`` (a statement of its own, so that its snapshot is taken once the lock is
held): the loose steps and writes in the turn's range are the ones read, and no turn row came
after the one read, and the input is still a loose step; else the transaction fails (a cast
of :data:`FOLD_MOVED`)."""

Read = tuple[int, int, bytes | None, list[Any], dict[bytes, list[Written]], list[int]]
"""What the fold read: thread ref, session id, the newest turn row's last id, the steps, their
writes by checkpoint id, every write id in the range."""


def read(conn: Connection, thread_id: str, ns: str, below: bytes) -> Read | bool | None:
    """The turn before ``below``, read in one round trip with the transaction ended (``conn``
    is a fresh read connection); None when this cannot be done so (the caller folds the plain
    way), False when there is nothing to fold.
    """
    ref_args = (thread_id, ns)
    found = rsql.fetch_and_end(
        conn,
        [
            (_READ_THREAD, (*ref_args, below)),
            (_READ_STEPS, (*ref_args, below, *ref_args, b"")),
            (_READ_WRITES, (*ref_args, below, *ref_args, b"")),
        ],
    )
    if found is None:
        return None
    thread, steps, write_rows = found
    if not thread or not steps:
        return False
    ref, session_id, above = int(thread[0][0]), int(thread[0][1]), thread[0][2]
    writes: dict[bytes, list[Written]] = {}
    by_id: dict[int, Written] = {}
    all_ids: list[int] = []
    for r in write_rows:
        write_id = int(r[0])
        entry = by_id.get(write_id)
        if entry is None:
            packed = (int(r[3]), r[4], int(r[5]), bytes(r[6]))
            entry = (write_id, id_text(bytes(r[2])), packed, [])
            by_id[write_id] = entry
            all_ids.append(write_id)
            writes.setdefault(bytes(r[1]), []).append(entry)
        if r[7] is not None:
            entry[3].append(int(r[7]))
    return ref, session_id, None if above is None else bytes(above), steps, writes, all_ids


def write(
    conn: Connection, below: bytes, turn: Read, dictionary: TurnDictionary | None = None
) -> int | None:
    """Fold what :func:`read` found, one turn row per turn, in one round trip with the COMMIT
    (``conn`` a fresh write transaction, nothing sent yet); how many rows it makes. None, with
    nothing queued, when this cannot be done so. The COMMIT raises :data:`FOLD_MOVED` when the
    loose rows changed since the read.
    """
    ref, session_id, above, steps, writes, all_write_ids = turn
    step_ids = [int(r[0]) for r in steps]
    low = b"" if above is None else above
    guard = (
        ref,
        low,
        below,
        pg_array(step_ids),
        ref,
        low,
        below,
        pg_array(all_write_ids),
        ref,
        above,
        ref,
        below,
        FOLD_MOVED,
    )
    states: dict[int, Any] = {}  # each step unpacked once, for the cut and for its row
    groups = [(group, turn_of(group, writes, states, dictionary)) for group in cuts(steps, states)]
    # built before the transaction begins: its head (the lock) may go to the server at once
    if not rsql.begin_later(conn, [(_LOCK, (session_id,)), (_GUARD, guard)]):
        return None
    write_ids: list[int] = []
    for group, (packed, runs, alp_ids, blobs, taken) in groups:
        write_ids += taken
        listed = sorted(blobs)
        rsql.execute(
            conn,
            "INSERT INTO lg_turns (thread_ref, first_checkpoint_id, last_checkpoint_id, steps, "
            "alp_ids, run_refs, codec, dict_id, raw_size, doc, blob_ids) VALUES (?, ?, ?, ?, "
            "CAST(? AS INTEGER[]), CAST(? AS INTEGER[]), ?, ?, ?, ?, CAST(? AS INTEGER[]))",
            (
                ref,
                bytes(group[0][1]),
                bytes(group[-1][1]),
                len(group),
                pg_array(alp_ids),
                pg_array(runs),
                *packed,
                pg_array(listed) if listed else None,
            ),
            defer=True,
        )
    for sql, ids in (
        ("DELETE FROM lg_write_items WHERE write_id = ANY(CAST(? AS INTEGER[]))", write_ids),
        ("DELETE FROM lg_writes WHERE id = ANY(CAST(? AS INTEGER[]))", write_ids),
        (
            "DELETE FROM lg_checkpoint_blobs WHERE checkpoint_ref = ANY(CAST(? AS INTEGER[]))",
            step_ids,
        ),
        ("DELETE FROM lg_checkpoints WHERE id = ANY(CAST(? AS INTEGER[]))", step_ids),
    ):
        if ids:
            rsql.execute(conn, sql, (pg_array(ids),), defer=True)
    return len(groups)


def moved(err: BaseException) -> bool:
    """``err`` is a fold whose guard found the loose rows changed since its read."""
    return FOLD_MOVED in str(err)
