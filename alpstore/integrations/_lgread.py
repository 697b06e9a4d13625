"""The read path of ``AlpstoreSaver``: a checkpoint tuple from its row, its channel values
(messages from the thread's kept state or the archive) and its pending writes.

Functions of the saver (its first argument), called straight from its protocol methods.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from langchain_core.messages import BaseMessage
from langgraph.checkpoint.base import Checkpoint, CheckpointTuple, PendingWrite, writes_sort_key

from alpstore.db import raw as rsql
from alpstore.gcpause import no_gc_pause
from alpstore.integrations import _lgdb as lgdb
from alpstore.integrations import _lgfast as lgfast
from alpstore.integrations._lgbuild import build_message, copy_json
from alpstore.integrations._lgcodec import unwrap, value_from_doc
from alpstore.integrations._lgthread import SaverState, ThreadState
from alpstore.views import View

_NOT_ENDED = object()
""":func:`_read_tuple`: the read could not end with its reads (nothing sent)."""


def get_tuple(
    saver: SaverState, th: ThreadState, thread_id: str, ns: str, checkpoint_id: Any
) -> CheckpointTuple | None:
    """``AlpstoreSaver.get_tuple`` (``th``'s lock held): the checkpoint and its thread's head.

    PostgreSQL, a thread this process holds: ONE wait, the read transaction ended with its
    reads (``_lgfast.find_latest_with_writes(end=True)``); anything more to read (the head
    moved, a blob packed since, a dictionary not loaded) raises ``raw.ReadEnded`` unsent, and
    it is read again the usual way, in two.
    """
    db = saver.store.db
    if db.is_postgresql and th.private is not None and th.key is not None:
        try:
            with db.read() as conn:
                done = _read_tuple(saver, conn, th, thread_id, ns, checkpoint_id, True)
            if done is not _NOT_ENDED:
                return cast("CheckpointTuple | None", done)
        except rsql.ReadEnded:
            pass
    with db.read() as conn:
        return cast(
            "CheckpointTuple | None",
            _read_tuple(saver, conn, th, thread_id, ns, checkpoint_id, False),
        )


def _read_tuple(
    saver: SaverState,
    conn: Any,
    th: ThreadState,
    thread_id: str,
    ns: str,
    checkpoint_id: Any,
    end: bool,
) -> object:
    """:func:`get_tuple` inside its read transaction: the tuple or None. ``end``
    (PostgreSQL): the transaction ends with the reads; ``_NOT_ENDED`` when it cannot
    (nothing sent).
    """
    writes = None
    if saver.store.db.is_postgresql:  # one round trip for all, not three
        read = lgfast.find_latest_with_writes(saver, conn, thread_id, ns, checkpoint_id, end=end)
        if read is None:
            return _NOT_ENDED
        found, writes = read
        if found is None and checkpoint_id is not None:  # a step a turn row holds (0011)
            found, writes = lgdb.find_latest(conn, thread_id, ns, checkpoint_id), None
    else:
        found = lgdb.find_latest(conn, thread_id, ns, checkpoint_id)
    if found is None:
        return None
    head, row = found
    th.validate(head)
    return checkpoint_tuple(saver, conn, th, head, thread_id, ns, row, writes_read=writes)


def checkpoint_tuple(
    saver: SaverState,
    conn: Any,
    th: ThreadState,
    head: lgdb.HeadRow,
    thread_id: str,
    ns: str,
    row: lgdb.CheckpointRow,
    *,
    filter: dict[str, Any] | None = None,
    writes_read: tuple[Any, Any] | None = None,
) -> CheckpointTuple | None:
    """The tuple of checkpoint ``row``; ``writes_read``: its pending writes and their blobs
    (and the blobs its values refer to, when read too), read already
    (``_lgfast.find_latest_with_writes``).
    """
    state = saver._packer.unpack(conn, row.packed)
    md = unwrap(saver.serde, state["m"])
    if filter and not all(md.get(k) == v for k, v in filter.items()):
        return None
    skeleton = {"id": row.checkpoint_id, **unwrap(saver.serde, state["c"])}
    read = None if writes_read is None else writes_read[1]
    values = channel_values(saver, conn, th, head, row, state, None, read=read)
    writes = pending_writes(saver, conn, head.ref, row.checkpoint_id, read=writes_read)
    base = {"thread_id": thread_id, "checkpoint_ns": ns}
    return CheckpointTuple(
        config={"configurable": {**base, "checkpoint_id": row.checkpoint_id}},
        checkpoint=cast(Checkpoint, {**skeleton, "channel_values": values}),
        metadata=md,
        parent_config=(
            {"configurable": {**base, "checkpoint_id": row.parent_checkpoint_id}}
            if row.parent_checkpoint_id
            else None
        ),
        pending_writes=writes,
    )


def thread_messages(
    saver: SaverState, conn: Any, th: ThreadState, head: lgdb.HeadRow, view: View
) -> list[BaseMessage]:
    """New message objects for ``view``: built from this process's kept states when the
    view is (a prefix of) the head it knows, else rebuilt from the archive (and kept, when
    it is the head).
    """
    private = th.private
    with no_gc_pause():
        if (
            private is not None
            and th.key == head.key
            and view.segment_id == head.view.segment_id
            and view.length <= len(private)
        ):
            out = private.thaw(view.length)
        else:
            out, kept = lgdb.load_head(saver.store, conn, view)
            if view == head.view and th.key == head.key:
                th.private = kept  # from the documents' bytes: nothing handed out
                th.digests = None
    if view == head.view:
        th.handed.append(list(out))  # our own list: the caller may change theirs in place
    return out


def channel_values(
    saver: SaverState,
    conn: Any,
    th: ThreadState,
    head: lgdb.HeadRow,
    row: lgdb.CheckpointRow,
    state: dict[str, Any],
    channels: set[str] | None,
    *,
    read: Mapping[int, tuple[bytes, int, Any]] | None = None,
) -> dict[str, Any]:
    """The checkpoint's channel values (``channels`` only, when given); ``read``: blobs by id
    read already (used when it holds every one the values refer to).
    """
    values: dict[str, Any] = {}
    split = state.get("s")
    if split is not None and (channels is None or split in channels):
        values[split] = thread_messages(saver, conn, th, head, row.view)
    stored = []
    for channel, ref in state["v"].items():
        if channels is not None and channel not in channels:
            continue
        if ref[0] == "i":
            values[channel] = value_from_doc(saver.serde, ref[1], ref[2])
        else:
            stored.append((channel, ref[1], ref[2]))
    if stored:
        docs: Mapping[int, tuple[bytes, int, Any]]
        if read is not None and all(b in read for _, _, b in stored):
            docs = read
        else:
            docs = saver.store.archive.load_by_ids(conn, [b for _, _, b in stored])
        for channel, kind, blob_id in stored:
            values[channel] = value_from_doc(saver.serde, kind, copy_json(docs[blob_id][2]))
    return values


def pending_writes(
    saver: SaverState,
    conn: Any,
    thread_ref: int,
    checkpoint_id: str,
    channels: set[str] | None = None,
    *,
    read: tuple[Any, Any] | None = None,
) -> list[PendingWrite]:
    if read is not None:
        found, docs = read
    else:
        found = lgdb.find_writes(conn, thread_ref, checkpoint_id)
    if not found:
        return []
    if read is None:
        docs = saver.store.archive.load_by_ids(conn, [b for *_, items in found for b in items])
    out = []
    for _, task_id, packed, items in found:
        doc = saver._packer.unpack(conn, packed)
        for idx, channel, ref in doc["w"]:
            if channels is not None and channel not in channels:
                continue
            if ref[0] == "i":
                value = value_from_doc(saver.serde, ref[1], ref[2])
            elif ref[0] == "b":
                value = value_from_doc(saver.serde, ref[1], copy_json(docs[items[ref[2]]][2]))
            else:
                start, n = ref[1], ref[2]
                value = [build_message(copy_json(docs[b][2])) for b in items[start : start + n]]
            out.append((writes_sort_key(doc["p"], task_id, idx), (task_id, channel, value)))
    out.sort(key=lambda pair: pair[0])
    return [w for _, w in out]
