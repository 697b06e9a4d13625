"""The LangGraph tables' maintenance: dropping checkpoints (by id or by run), deleting and
copying threads (a copy is a fork of each namespace's session, sharing every blob and view).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, delete, select, update

from alpstore.db import raw as rsql
from alpstore.db.tables import checkpoints, sessions
from alpstore.errors import UsageError
from alpstore.integrations import _lgturns as lgturns
from alpstore.integrations._lgdb import CHUNK, CK_FROM, session_name
from alpstore.integrations._lgpack import id_bytes, id_text
from alpstore.integrations._lgspaces import link_namespace
from alpstore.sessions import Session
from alpstore.store import Store
from alpstore.views import View, cover_int


def thread_rows(conn: Connection, thread_id: str) -> list[tuple[int, int]]:
    """``(ref, session_id)`` for every namespace of a thread."""
    return [
        (int(r[0]), int(r[1]))
        for r in rsql.fetchall(
            conn, "SELECT id, session_id FROM lg_threads WHERE thread_id = ?", (thread_id,)
        )
    ]


def checkpoint_ids(conn: Connection, ref: int) -> list[str]:
    """A thread namespace's checkpoint ids, oldest first (its turn rows unfolded first: the
    caller drops steps, 0011).
    """
    lgturns.unfold_all(conn, ref)
    sql = "SELECT checkpoint_id FROM lg_checkpoints WHERE thread_ref = ? ORDER BY checkpoint_id"
    return [id_text(bytes(r[0])) for r in rsql.fetchall(conn, sql, (ref,))]


def checkpoints_of_runs(
    conn: Connection, run_ids: Sequence[str]
) -> list[tuple[int, int, list[str]]]:
    """``(ref, session_id, checkpoint ids)`` per thread namespace for the given runs."""
    found: dict[tuple[int, int], list[str]] = {}
    lgturns.unfold_runs(conn, run_ids)  # their folded steps loose first (0011)
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
    lgturns.keep_newest_loose(conn, ref)  # the newest left may be a folded one (0011)


def keep_last(conn: Connection, ref: int, session_id: int, keep: int) -> None:
    """A thread namespace whose session's retention keeps ``keep`` checkpoints: its older steps
    dropped as ``prune`` drops them (their writes and alpstore checkpoints with them), so that
    LangGraph's reads and the session's checkpoints stay one set.
    """
    loose = rsql.fetchone(conn, "SELECT count(*) FROM lg_checkpoints WHERE thread_ref = ?", (ref,))
    folded = rsql.fetchone(
        conn, "SELECT coalesce(sum(steps), 0) FROM lg_turns WHERE thread_ref = ?", (ref,)
    )
    if int(loose[0] if loose else 0) + int(folded[0] if folded else 0) <= keep:
        return
    ids = checkpoint_ids(conn, ref)
    drop_checkpoints(conn, ref, session_id, ids[: len(ids) - keep])


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
    lgturns.drop_all(conn, ref)
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
    for ref, _ in spaces:  # the source's folded steps loose first (0011), copied as rows
        lgturns.unfold_all(conn, int(ref))
    for ref, ns in spaces:
        cks = rsql.fetchall(
            conn,
            "SELECT lc.id, lc.checkpoint_id, lc.parent_checkpoint_id, lc.run_ref, lc.codec, "
            "lc.dict_id, lc.raw_size, lc.state, c.id, c.segment_id, c.length, c.turn, "
            f"c.kernel_blob_id, c.wm_blob_id, c.label, c.trigger, c.covering_digest {CK_FROM} "
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
        link_namespace(conn, target, str(ns), child.id)  # a subgraph's: under the copy
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
