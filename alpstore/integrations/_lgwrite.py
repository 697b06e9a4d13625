"""The write path of ``AlpstoreSaver``: ``put``'s transaction (new messages appended to the
session head, found in O(delta) against the thread's state; channel values packed or stored as
blobs) and the pending writes of ``put_writes``.

Functions of the saver (its first argument), called straight from its protocol methods.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any, cast

from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata

from alpstore.archive.sql import Encoded
from alpstore.db.names import BLOB_MESSAGE
from alpstore.errors import SessionStateError
from alpstore.integrations import _lgdb as lgdb
from alpstore.integrations import _lgfast as lgfast
from alpstore.integrations import _lgmaint as lgmaint
from alpstore.integrations import _lgturns as lgturns
from alpstore.integrations._lgbuild import doc_state
from alpstore.integrations._lgcodec import (
    FrozenMessages,
    freeze,
    is_message_list,
    message_docs,
    unwrap,
    wrap,
)
from alpstore.integrations._lgfast import WriteRequest, pack_writes
from alpstore.integrations._lgpack import id_bytes, value_ref
from alpstore.integrations._lgsteps import TRIGGER_PREFIX as TRIGGER_PREFIX
from alpstore.integrations._lgsteps import branch_point, record_branch, step_nodes, step_trigger
from alpstore.integrations._lgsteps import note_writer as note_writer
from alpstore.integrations._lgsteps import note_writes as note_writes
from alpstore.integrations._lgthread import SaverState, ThreadState, held_prefix
from alpstore.sessions import CheckpointInfo, Retention, SessionInfo, count_user_turns
from alpstore.store import encode
from alpstore.views import View, cover_add, cover_bytes, cover_int, cover_sub


def put_checkpoint(
    saver: SaverState,
    th: ThreadState,
    thread_id: str,
    ns: str,
    parent: Any,
    checkpoint: Checkpoint,
    md: CheckpointMetadata,
    new_versions: ChannelVersions,
) -> tuple[CheckpointInfo, int, bool]:
    """One transaction of ``put``: ``(checkpoint, session row id, messages split)``.

    PostgreSQL, a thread whose last put this process made at its head's tip: sent unread in
    one wait (``lgfast.begin_at_known_head``); another writer moved the head meanwhile, or
    the checkpoint id is stored already, and it is run again reading and locking first.
    """
    known, th.known = th.known, None
    args = (saver, th, thread_id, ns, parent, checkpoint, md, new_versions)
    last = th.last_put
    if (
        known is None
        or known.key != th.key
        or not saver.store.db.is_postgresql
        or last is None
        or id_bytes(str(checkpoint["id"])) <= id_bytes(last[0])  # not a new id: a turn row may
    ):  # hold it (0011), which the unread put cannot see
        return _put_checkpoint(*args, None)
    return lgfast.fast_or_plain(
        lambda: _put_checkpoint(*args, known),
        lambda: _put_checkpoint(*args, None),
        refused=lgfast.head_moved,
        forget=th.forget,
    )


def put_writes(saver: SaverState, req: WriteRequest, lock: AbstractContextManager[Any]) -> None:
    """``put_writes``' transaction: on PostgreSQL sent unread first
    (``_lgfast.put_writes_later``, which reads nothing of the thread's state: run without
    the thread's ``lock``), else (or refused: a merge, a new thread) the plain
    :func:`store_writes` under ``lock``, retried on transient conflicts.
    """
    db = saver.store.db

    def plain() -> bool:
        what = f"pending writes of LangGraph thread {req.thread_id!r}"
        with lock:
            db.retrying(lambda: store_writes(saver, req), what=what)
        return True

    if not db.is_postgresql:
        plain()
        return
    lgfast.fast_or_plain(
        lambda: True if lgfast.put_writes_later(saver, req) else None,
        plain,
        refused=lgfast.writes_refused,
    )


def _put_checkpoint(
    saver: SaverState,
    th: ThreadState,
    thread_id: str,
    ns: str,
    parent: Any,
    checkpoint: Checkpoint,
    md: CheckpointMetadata,
    new_versions: ChannelVersions,
    known: lgdb.HeadRow | None,
) -> tuple[CheckpointInfo, int, bool]:
    values = checkpoint["channel_values"]
    versions = checkpoint["channel_versions"]
    key = saver.messages_key
    store = saver.store
    cid = str(checkpoint["id"])
    later: Callable[[], CheckpointInfo] | None = None
    row: lgdb.HeadRow | None
    with store.db.atomic() as conn:
        if known is not None and lgfast.begin_at_known_head(conn, thread_id, ns, known):
            row, at_tip, stored = known, True, False  # checked by the guard, in the pipeline
        elif store.db.is_postgresql:  # PostgreSQL: what decides the two-round-trip path, too
            row, at_tip, stored = lgfast.lock_thread_at_tip(conn, thread_id, ns, cid)
        else:
            row, at_tip, stored = lgdb.lock_thread(conn, thread_id, ns), False, True
        if row is None:
            lgdb.create_thread(store, conn, thread_id, ns)
            row = lgdb.lock_thread(conn, thread_id, ns)
            assert row is not None
            at_tip, stored = False, True
        th.validate(row)
        if row.status in ("terminated", "paused"):
            raise SessionStateError(
                f"session {row.uuid} of LangGraph thread {thread_id!r} is {row.status}; "
                "cannot checkpoint"
            )
        branch = None
        if parent is not None and (th.last_put is None or th.last_put[0] != str(parent)):
            branch = branch_point(conn, row, str(parent), str(checkpoint["id"]))
        if branch is not None:  # time travel: the head moves back to the parent first
            th.forget()  # what it kept describes the old head, not the parent's view
            row = row._replace(view=branch.view, turn=branch.turn, cover=branch.cover)
            at_tip = False  # the tip locked was the old head's: the plain path appends
        cover = cover_int(row.cover)
        if cover is None:  # not recorded (an archive not upgraded to revision 0004)
            cover = store.views.cover(conn, row.view)
        head = None
        if key in versions and type(values.get(key)) is list:
            changed = key in new_versions
            head = sync_messages(saver, conn, th, row, cover, values[key], changed, at_tip)
        if head is not None:
            view, turn, cover = head[0], head[1], head[2]
        else:
            view, turn = row.view, row.turn
        refs: dict[str, list[Any]] = {}
        blobs: list[tuple[str, Encoded]] = []
        inherited = inherited_refs(saver, conn, th, row.ref, parent, versions, values, new_versions)
        for channel in versions:
            if head is not None and channel == key:
                continue
            if channel in values:
                ref, item = value_ref(saver.serde, values[channel])
                refs[channel] = ref
                if item is not None:
                    blobs.append((channel, item))
            elif channel in inherited:
                refs[channel] = inherited[channel]
        ids = store.archive.store_encoded(conn, [item for _, item in blobs])
        for (channel, _), blob_id in zip(blobs, ids, strict=True):
            refs[channel].append(blob_id)
        skeleton = {k: v for k, v in checkpoint.items() if k not in ("channel_values", "id")}
        state: dict[str, Any] = {
            "c": wrap(saver.serde, skeleton),
            "m": wrap(saver.serde, md),
            "v": refs,
        }
        if head is not None:
            state["s"] = key
        status = "active" if row.status == "created" and view != row.view else row.status
        if (
            view != row.view
            or turn != row.turn
            or status != row.status
            or row.cover != cover_bytes(cover)
        ):
            lgdb.move_head(conn, row.session_id, view, turn, status, cover)
        source = str(md.get("source", "put"))
        nodes = step_nodes(saver, conn, th, row.ref, parent, source)
        info = session_info(saver, conn, row, view, turn, status)
        if branch is not None:
            record_branch(saver, conn, row, branch)
        run_id = md.get("run_id")
        parent_id = None if parent is None else str(parent)
        run = None if run_id is None else str(run_id)
        blob_ids = [r[2] for r in refs.values() if r[0] == "b"]
        if not stored and branch is None and row.retention[0] == "all":
            # PostgreSQL: the checkpoint's rows ride the COMMIT (their ids come back with it)
            if run is not None and run not in saver._runs:
                lgdb.intern_run(conn, run)
            later = store.insert_checkpoint_later(
                conn,
                info,
                view,
                turn=turn,
                label=None,
                trigger=step_trigger(source, nodes),
                kernel_digest=None,
                wm_digest=None,
                cover=cover,
                wrap=lgfast.checkpoint_pair(
                    row.ref, cid, parent_id, run, saver._packer.pack(state), blob_ids
                ),
            )
        else:
            ck = store.insert_checkpoint(
                conn,
                info,
                view,
                turn=turn,
                label=None,
                trigger=step_trigger(source, nodes),
                kernel_id=None,
                wm_id=None,
                cover=cover,
            )
            if run is not None and run not in saver._runs:
                lgdb.intern_run(conn, run)
            packed = saver._packer.pack(state)
            folded = lgturns.turn_holding(conn, row.ref, cid)
            if folded is not None:  # the id again, inside a turn row: its steps loose first
                lgturns.unfold(conn, row.ref, folded)
            new = lgdb.insert_checkpoint_row(conn, row.ref, cid, parent_id, ck.id, run, packed)
            if new is None:  # the same checkpoint id again: it replaces the stored one
                lgmaint.drop_checkpoints(conn, row.ref, row.session_id, [cid], writes=False)
                new = lgdb.insert_checkpoint_row(conn, row.ref, cid, parent_id, ck.id, run, packed)
                assert new is not None
            lgdb.insert_checkpoint_blobs(conn, new, blob_ids)
            if row.retention[0] != "all":  # the thread pruned as the session's retention says
                keep = 1 if row.retention[0] == "single" else max(1, row.retention[1])
                lgmaint.keep_last(conn, row.ref, row.session_id, keep)
    if later is not None:
        ck = later()  # its ids came back with the COMMIT
    # committed: only now does this process's picture of the thread change
    if source == "loop" and not nodes and parent is not None:
        th.note_unnamed(str(parent), ck.id, str(ck.trigger))
    if run is not None:
        remember_run(saver, run)
    if head is not None:
        if head[3]():
            th.key = (row.ref, row.session_id, row.uuid, view, cover_bytes(cover))
        else:
            th.forget()
    th.last_put = (cid, dict(versions), refs) if th.key is not None else None
    if later is not None and at_tip and th.key is not None:  # the head this put left
        th.known = row._replace(view=view, turn=turn, status=status, cover=cover_bytes(cover))
        if th.known.key != th.key:
            th.known = None
    return ck, row.session_id, head is not None


def sync_messages(
    saver: SaverState,
    conn: Any,
    th: ThreadState,
    row: lgdb.HeadRow,
    cover: int,
    messages: list[Any],
    changed: bool,
    at_tip: bool = False,
) -> tuple[View, int, int, Callable[[], bool]] | None:
    """Append what is new in ``messages`` to the session head (or cut it back to the
    common prefix first: edits, removals). Returns the new view, the new turn count, its
    covering digest (``cover``, that of the old head, updated in O(delta)), and what to run
    once committed (True: this process's picture of the thread is kept); None when the
    list cannot be split (not all standard messages, or not plain JSON).

    The common prefix is found against the lists this saver last stored (``held_prefix``:
    a C loop at pointer speed), so a growing conversation costs O(delta) in Python and a
    few nanoseconds a message in C. Objects a read handed out and the caller has not yet
    passed to a put may have been changed in place, so a prefix found only through the
    lists reads handed out is compared field by field with the kept states (in C, once
    per read that a put follows). Only when that is inconclusive — another process moved
    the head, or the channel changed but no new message is found by identity (a message
    edited in place and written back) — are the messages compared by digest, which costs
    O(n).
    """
    store = saver.store
    n_old = row.view.length
    k = -1
    if th.private is not None and len(th.private) == n_old:
        k = min(held_prefix(th.seen, messages), n_old)
        handed = min(held_prefix(th.handed, messages), n_old)
        if max(k, handed) == n_old == len(messages) and changed:
            # written back without a new object: an edit in place? Compare the fields
            # with this process's own copies (C-speed), encode from the first difference
            k = th.private.first_difference(messages)
            if k == n_old:
                return row.view, row.turn, cover, lambda: True
        else:
            if handed > k:
                # objects a read handed out: the caller may have changed them in place
                # (the human-in-the-loop edit) and written them back with new ones, so
                # they count only as far as they equal this process's copies (in C)
                k = th.private.first_difference(messages[:handed], k)
            if k == n_old and not is_message_list(messages[k:]):
                return None
    if k < 0 or k < n_old:
        if not is_message_list(messages):
            return None
        digests = th.digests
        if digests is None or len(digests) != n_old:
            digests = lgdb.head_digests(store, conn, row.view)[1]
        start = max(k, 0)
        docs = message_docs(messages[start:])
        if docs is None:
            return None
        items = [encode(d, BLOB_MESSAGE) for d in docs]
        j = 0
        while start + j < n_old and j < len(items) and items[j][0] == digests[start + j]:
            j += 1
        k = start + j
        prefix: FrozenMessages | None = None
        if start == 0 and (th.private is None or len(th.private) != n_old):
            # learn the head: copies of our own (marshalled now)
            prefix = FrozenMessages()
            prefix.extend(freeze(doc_state(d) for d in docs[:j]))
        elif th.private is not None:
            prefix = th.private.prefix(k)
        docs, items = docs[j:], items[j:]
        kept_digests: list[bytes] | None = digests[:k]
        if k < n_old:  # O(dropped): the cut entries leave the covering digest
            cover = cover_sub(cover, k, digests[k:n_old])
    else:
        tail = messages[k:]
        docs = message_docs(tail) if tail else []
        if docs is None:
            return None
        items = [encode(d, BLOB_MESSAGE) for d in docs]
        kept_digests = th.digests
        prefix = th.private
    if k == n_old and at_tip:  # PostgreSQL: blobs and entries ride the COMMIT, by digest
        store.archive.store_encoded_later(conn, items)
        view = store.views.grow_later(conn, row.view, [d for d, _, _ in items])
    elif k == n_old:
        ids = store.archive.store_encoded(conn, items)
        view = store.views.append(conn, row.view, row.session_id, ids)
    else:
        ids = store.archive.store_encoded(conn, items)
        base = store.views.cut(conn, row.view, k)
        view = store.views.append(conn, base, row.session_id, ids) if ids else base
    turn = row.turn + count_user_turns(docs)
    # copied now (marshalled): the caller's objects may change once put returns
    fresh = freeze(doc_state(d) for d in docs)
    held = list(messages)
    new_digests = [d for d, _, _ in items]
    cover = cover_add(cover, k, new_digests)
    appended = k == n_old

    def commit() -> bool:
        kept = prefix
        if kept is not None:
            kept.extend(fresh)  # O(delta); in place when nothing was cut (the common case)
            if len(kept) != view.length:
                kept = None
        th.private = kept
        if kept_digests is None:
            th.digests = None
        elif appended and kept_digests is th.digests:
            kept_digests.extend(new_digests)
        else:
            th.digests = kept_digests + new_digests
        if not appended:  # lists held for the old head no longer match it past k
            th.seen.clear()
        # the reads' lists go: what a put took from them is in `held` now, and a list a
        # caller still holds is compared by digest (O(n), still right); kept, each would
        # hold a whole read's fresh objects alive (6,001 at 1,000 turns) for the collector
        # to walk, turn after turn
        th.handed.clear()
        th.seen.append(held)
        return True

    return view, turn, cover, commit


def inherited_refs(
    saver: SaverState,
    conn: Any,
    th: ThreadState,
    ref: int,
    parent: Any,
    versions: Mapping[str, Any],
    values: Mapping[str, Any],
    new_versions: Mapping[str, Any],
) -> dict[str, list[Any]]:
    """Refs of unchanged channels whose values the caller left out, taken from the parent
    checkpoint when it holds the same version. LangGraph leaves out only empty channels, so
    the parent usually has nothing to give: when the parent is the checkpoint this process
    stored last, that is decided without a read.
    """
    missing = [c for c in versions if c not in values and c not in new_versions]
    if not missing or parent is None:
        return {}
    last = th.last_put
    if last is not None and last[0] == str(parent):
        _, before, refs = last
        if not any(c in refs and str(before.get(c)) == str(versions[c]) for c in missing):
            return {}
    row = lgdb.find_checkpoint(conn, ref, str(parent))
    if row is None:
        return {}
    state = saver._packer.unpack(conn, row.packed)
    before = unwrap(saver.serde, state["c"]).get("channel_versions", {})
    return {
        c: state["v"][c]
        for c in missing
        if c in state["v"] and str(before.get(c)) == str(versions[c])
    }


def session_info(
    saver: SaverState, conn: Any, row: lgdb.HeadRow, view: View, turn: int, status: str
) -> SessionInfo:
    info = saver._infos.get(row.uuid)
    if info is None or info.id != row.session_id:
        info = saver.store.session_info(row.session_id, conn=conn)
        with saver._lock:
            saver._infos[row.uuid] = info
    return replace(
        info,
        head=view,
        turn=turn,
        status=cast(Any, status),
        retention=Retention(cast(Any, row.retention[0]), row.retention[1]),
    )


def remember_run(saver: SaverState, run_id: str) -> None:
    with saver._lock:
        saver._runs[run_id] = None
        while len(saver._runs) > 256:
            saver._runs.pop(next(iter(saver._runs)))


def plan_write(saver: SaverState, channel: str, value: Any) -> tuple[str, list[Any], list[Encoded]]:
    docs = message_docs(value) if value and is_message_list(value) else None
    if docs is not None:
        return channel, ["l"], [encode(d, BLOB_MESSAGE) for d in docs]
    ref, item = value_ref(saver.serde, value)
    return channel, ref, [] if item is None else [item]


def store_writes(saver: SaverState, req: WriteRequest) -> None:
    """One transaction of ``put_writes``: the items' blobs, then the task's writes inserted (or
    merged by LangGraph's rule with those it has already).
    """
    store = saver.store
    with store.db.atomic() as conn:
        entries: dict[int, WriteEntry] = {}
        every = [item for _, _, items in req.planned.values() for item in items]
        ids = iter(store.archive.store_encoded(conn, every))
        for widx, (channel, ref, items) in req.planned.items():
            entries[widx] = (channel, ref, [next(ids) for _ in items])
        packed, blob_ids = pack_writes(saver, req.task_path, entries)
        if lgdb.insert_new_writes(
            conn, req.thread_id, req.ns, req.checkpoint_id, req.task_id, packed, blob_ids
        ):
            return
        merge_writes(saver, conn, req, entries)


def merge_writes(
    saver: SaverState, conn: Any, req: WriteRequest, new: dict[int, WriteEntry]
) -> None:
    """The task already has writes here (or the thread is new): merge by LangGraph's rule."""
    found_thread = lgdb.find_thread(conn, req.thread_id, req.ns)
    ref = (
        lgdb.create_thread(saver.store, conn, req.thread_id, req.ns)[0]
        if found_thread is None
        else found_thread[0]
    )
    found = lgdb.find_writes(conn, ref, req.checkpoint_id, req.task_id)
    entries: dict[int, WriteEntry] = {}
    existing = None
    task_path = req.task_path
    if found:
        existing, _, packed, items = found[0]
        doc = saver._packer.unpack(conn, packed)
        task_path = doc["p"]
        for idx, channel, wref in doc["w"]:
            entries[int(idx)] = entry_from_ref(channel, wref, items)
    changed = False
    for widx, entry in new.items():
        if widx in entries and not req.replace_all:
            continue
        entries[widx] = entry
        changed = True
    if not changed:
        return
    packed, blob_ids = pack_writes(saver, task_path, entries)
    lgdb.save_writes(conn, ref, req.checkpoint_id, req.task_id, existing, packed, blob_ids)


WriteEntry = tuple[str, list[Any], list[int]]
"""A write being rebuilt: ``(channel, ref template, blob ids)``."""


def entry_from_ref(channel: str, ref: list[Any], items: list[int]) -> WriteEntry:
    if ref[0] == "b":
        return channel, ref[:2], [items[ref[2]]]
    if ref[0] == "l":
        return channel, ["l"], items[ref[1] : ref[1] + ref[2]]
    return channel, ref, []
