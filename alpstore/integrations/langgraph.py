"""``AlpstoreSaver``: a LangGraph checkpointer (sync and async) backed by an alpstore archive.

Each LangGraph thread + checkpoint namespace is an alpstore session; each LangGraph checkpoint is
an alpstore checkpoint of that session, so ``alpstore session log``, lineage, ``debug`` and deep
export work on LangGraph runs. The ``messages`` channel is not stored as one value: its messages
are appended to the session's covering list (one blob per message, stored once), and a
checkpoint points at it, so every-step checkpoints of a growing conversation cost O(delta). The
other channel values are content-addressed blobs per channel version; pending writes keep one
blob per message too. Metadata and the checkpoint's own fields are the checkpoint's kernel blob.

Messages are compared by identity with the list this saver last stored or returned: a message
object changed in place after it was checkpointed is not noticed (LangGraph's reducers never do
that; return a new message instead).
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from alpstore.archive.sql import Encoded
from alpstore.integrations import _lgdb as lgdb
from alpstore.integrations._lgcodec import (
    KIND_EMPTY,
    KIND_MESSAGES,
    is_message_list,
    message_docs,
    unwrap,
    value_doc,
    value_from_doc,
    wrap,
)
from alpstore.store import Store, encode

__all__ = ["AlpstoreSaver"]

TRIGGER_PREFIX = "langgraph:"
"""Checkpoints written by this saver carry the trigger ``langgraph:<source>``."""


class AlpstoreSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer storing threads as alpstore sessions.

    Args:
        store: an open alpstore ``Store`` (``AlpstoreSaver.open(root)`` opens one for you).
        messages_key: the channel whose list of messages is kept as the session's covering list.
        serde: LangGraph serializer for values that are not plain JSON (default: JsonPlus).
    """

    def __init__(
        self,
        store: Store,
        *,
        messages_key: str = "messages",
        serde: SerializerProtocol | None = None,
        owns_store: bool = False,
    ) -> None:
        super().__init__(serde=serde)
        self.store = store
        self.messages_key = messages_key
        self._owns_store = owns_store
        self._lock = threading.RLock()
        self._threads: dict[tuple[str, str], lgdb.ThreadState] = {}

    @classmethod
    def open(cls, root: Path | str, *, url: str | None = None, **kwargs: Any) -> AlpstoreSaver:
        """Open (creating) the archive of run root ``root`` (or at ``url``); closed by ``close``."""
        return cls(Store.open(root, url=url), owns_store=True, **kwargs)

    def close(self) -> None:
        """Close the store if this saver opened it."""
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> AlpstoreSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> AlpstoreSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- threads
    def _thread(
        self, conn: Any, thread_id: str, ns: str, *, create: bool
    ) -> lgdb.ThreadState | None:
        key = (thread_id, ns)
        row = lgdb.find_thread(conn, thread_id, ns)
        cached = self._threads.get(key)
        if row is None:
            if cached is not None:
                del self._threads[key]
            if not create:
                return None
            row = lgdb.create_thread(self.store, conn, thread_id, ns)
        if cached is None or cached.ref != row[0]:
            cached = lgdb.ThreadState(self.store, conn, int(row[0]), int(row[1]))
            self._threads[key] = cached
        return cached

    def _forget(self, thread_id: str | None = None) -> None:
        for key in list(self._threads):
            if thread_id is None or key[0] == thread_id:
                del self._threads[key]

    # ---------------------------------------------------------------- writing
    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint: messages appended to the session (O(delta)), the other new
        channel versions as blobs, and an alpstore checkpoint pointing at both.
        """
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns") or "")
        parent = conf.get("checkpoint_id")
        values = checkpoint["channel_values"]
        skeleton = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        md = get_checkpoint_metadata(config, metadata)
        key = self.messages_key
        messages = values.get(key)
        store = self.store
        with self._lock, store.db.atomic() as conn:
            th = self._thread(conn, thread_id, ns, create=True)
            assert th is not None
            split = (
                key in checkpoint["channel_versions"]
                and is_message_list(messages)
                and th.sync_head(conn, cast(list[Any], messages))
            )
            kernel: dict[str, Any] = {"checkpoint": wrap(self.serde, skeleton)}
            kernel["metadata"] = wrap(self.serde, md)
            if split:
                kernel["split"] = key
            lgdb.drop_checkpoints(
                store, conn, th.ref, th.session.id, [checkpoint["id"]], writes=False
            )
            source = str(md.get("source", "put"))
            ck = th.session.checkpoint(kernel=kernel, trigger=(TRIGGER_PREFIX + source)[:32])
            run_id = md.get("run_id")
            lgdb.insert_checkpoint(
                conn,
                th.ref,
                checkpoint["id"],
                parent,
                ck.id,
                None if run_id is None else str(run_id),
            )
            rows: list[tuple[str, str, int, Encoded | None]] = []
            for channel, version in new_versions.items():
                if split and channel == key:
                    continue
                if channel in values:
                    kind, doc = value_doc(self.serde, values[channel])
                    rows.append((channel, str(version), kind, encode(doc, lgdb.blob_kind(kind))))
                else:
                    rows.append((channel, str(version), KIND_EMPTY, None))
            lgdb.put_channel_values(store, conn, th.ref, rows)
        store.archive.after_commit()
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes; a list of messages keeps one blob per message."""
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns") or "")
        checkpoint_id = str(conf["checkpoint_id"])
        replace = all(channel in WRITES_IDX_MAP for channel, _ in writes)
        rows = []
        for idx, (channel, value) in enumerate(writes):
            docs = message_docs(value) if is_message_list(value) and value else None
            if docs is not None:
                rows.append((channel, WRITES_IDX_MAP.get(channel, idx), KIND_MESSAGES, docs))
            else:
                kind, doc = value_doc(self.serde, value)
                rows.append((channel, WRITES_IDX_MAP.get(channel, idx), kind, doc))
        store = self.store
        with self._lock, store.db.atomic() as conn:
            th = self._thread(conn, thread_id, ns, create=True)
            assert th is not None
            lgdb.put_writes(store, conn, th.ref, checkpoint_id, task_id, task_path, rows, replace)
        store.archive.after_commit()

    # ---------------------------------------------------------------- reading
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by ``config`` (the thread's latest without a checkpoint id)."""
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns") or "")
        with self._lock, self.store.db.read() as conn:
            th = self._thread(conn, thread_id, ns, create=False)
            if th is None:
                return None
            row = lgdb.find_checkpoint(conn, th.ref, conf.get("checkpoint_id"))
            if row is None:
                return None
            return self._tuple(conn, th, thread_id, ns, row)

    def _tuple(
        self,
        conn: Any,
        th: lgdb.ThreadState,
        thread_id: str,
        ns: str,
        row: lgdb.CheckpointRow,
        *,
        filter: dict[str, Any] | None = None,
    ) -> CheckpointTuple | None:
        kernel = self.store.archive.load_by_ids(conn, [row.kernel_blob_id])[row.kernel_blob_id][2]
        md = unwrap(self.serde, kernel["metadata"])
        if filter and not all(md.get(k) == v for k, v in filter.items()):
            return None
        skeleton = unwrap(self.serde, kernel["checkpoint"])
        values = self._values(conn, th, row, kernel.get("split"), skeleton["channel_versions"])
        writes = self._writes(conn, th.ref, row.checkpoint_id)
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

    def _values(
        self,
        conn: Any,
        th: lgdb.ThreadState,
        row: lgdb.CheckpointRow,
        split: str | None,
        versions: Mapping[str, Any],
    ) -> dict[str, Any]:
        values: dict[str, Any] = {}
        stored = []
        for channel, version in versions.items():
            if channel == split:
                values[channel] = th.hydrate(conn, row.view)
                continue
            found = lgdb.channel_value(conn, th.ref, channel, str(version))
            if found is not None and found[0] != KIND_EMPTY:
                stored.append((channel, found[0], found[1]))
        if stored:
            docs = self.store.archive.load_by_ids(conn, [b for _, _, b in stored])
            for channel, kind, blob_id in stored:
                values[channel] = value_from_doc(self.serde, kind, docs[blob_id][2])
        return values

    def _writes(
        self, conn: Any, thread_ref: int, checkpoint_id: str, channels: Sequence[str] | None = None
    ) -> list[PendingWrite]:
        return lgdb.load_writes(
            self.store, conn, thread_ref, checkpoint_id, channels, self._decode_value
        )

    def _decode_value(self, kind: int, doc: Any) -> Any:
        return value_from_doc(self.serde, kind, doc)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first, by thread / namespace / id, metadata filter and cursor."""
        conf = config["configurable"] if config else {}
        before_id = before["configurable"].get("checkpoint_id") if before else None
        with self._lock, self.store.db.read() as conn:
            rows = lgdb.list_checkpoints(
                conn,
                thread_id=None if not conf else str(conf["thread_id"]),
                ns=conf.get("checkpoint_ns"),
                checkpoint_id=conf.get("checkpoint_id"),
                before=before_id,
            )
        remaining = limit
        for thread_id, ns, row in rows:
            if remaining is not None and remaining <= 0:
                return
            with self._lock, self.store.db.read() as conn:
                th = self._thread(conn, thread_id, ns, create=False)
                tup = (
                    None if th is None else self._tuple(conn, th, thread_id, ns, row, filter=filter)
                )
            if tup is None:
                continue
            if remaining is not None:
                remaining -= 1
            yield tup

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Per channel, the writes on the parent chain back to the nearest stored value (seed).

        Walks the chain in one read, loading only the requested channels' writes and values.
        """
        if not channels:
            return {}
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns") or "")
        collected: dict[str, list[PendingWrite]] = {c: [] for c in channels}
        seeds: dict[str, Any] = {}
        remaining = set(channels)
        with self._lock, self.store.db.read() as conn:
            th = self._thread(conn, thread_id, ns, create=False)
            target = (
                None
                if th is None
                else lgdb.find_checkpoint(conn, th.ref, conf.get("checkpoint_id"))
            )
            cursor = target.parent_checkpoint_id if target is not None else None
            seen: set[str] = set()
            while th is not None and cursor is not None and remaining and cursor not in seen:
                seen.add(cursor)
                row = lgdb.find_checkpoint(conn, th.ref, cursor)
                if row is None:
                    break
                for write in reversed(
                    self._writes(conn, th.ref, row.checkpoint_id, sorted(remaining))
                ):
                    collected[write[1]].append(write)
                kernel = self.store.archive.load_by_ids(conn, [row.kernel_blob_id])
                doc = kernel[row.kernel_blob_id][2]
                versions = unwrap(self.serde, doc["checkpoint"])["channel_versions"]
                wanted = {c: v for c, v in versions.items() if c in remaining}
                found = self._values(conn, th, row, doc.get("split"), wanted)
                for channel, value in found.items():
                    seeds[channel] = value
                    remaining.discard(channel)
                cursor = row.parent_checkpoint_id
        result: dict[str, DeltaChannelHistory] = {}
        for channel in channels:
            entry: DeltaChannelHistory = {"writes": list(reversed(collected[channel]))}
            if channel in seeds:
                entry["seed"] = seeds[channel]
            result[channel] = entry
        return result

    # ---------------------------------------------------------------- maintenance
    def delete_thread(self, thread_id: str) -> None:
        """Delete a thread's checkpoints and writes in every namespace; its sessions are emptied
        and terminated (``alpstore archive gc`` then frees what nothing else references).
        """
        with self._lock, self.store.db.atomic() as conn:
            for ref, session_id in lgdb.thread_rows(conn, str(thread_id)):
                lgdb.drop_thread(self.store, conn, ref, session_id)
            self._forget(str(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete every checkpoint (and its writes) whose metadata ``run_id`` is listed."""
        if not run_ids:
            return
        with self._lock, self.store.db.atomic() as conn:
            for ref, session_id, ids in lgdb.checkpoints_of_runs(conn, [str(r) for r in run_ids]):
                lgdb.drop_checkpoints(self.store, conn, ref, session_id, ids)
                lgdb.sweep_channel_values(self.store, conn, ref, self.serde)
        self._forget()

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep each namespace's newest checkpoint (values it needs stay);
        ``delete``: delete the threads.

        Raises:
            UsageError: an unknown strategy.
        """
        from alpstore.errors import UsageError

        if strategy not in ("keep_latest", "delete"):
            raise UsageError(f"prune strategy {strategy!r}: expected keep_latest or delete")
        with self._lock, self.store.db.atomic() as conn:
            for thread_id in thread_ids:
                for ref, session_id in lgdb.thread_rows(conn, str(thread_id)):
                    if strategy == "delete":
                        lgdb.drop_thread(self.store, conn, ref, session_id)
                        continue
                    ids = lgdb.checkpoint_ids(conn, ref)
                    lgdb.drop_checkpoints(self.store, conn, ref, session_id, ids[:-1])
                    lgdb.sweep_channel_values(self.store, conn, ref, self.serde)
                self._forget(str(thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of a thread to a new thread, as a fork: each namespace
        becomes a child session of the source's (lineage recorded), sharing every blob and view.

        Raises:
            UsageError: the target thread already exists.
        """
        with self._lock, self.store.db.atomic() as conn:
            lgdb.copy_thread(self.store, conn, str(source_thread_id), str(target_thread_id))

    # ---------------------------------------------------------------- async
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async ``get_tuple`` (the SQLite work is sub-millisecond and runs inline)."""
        return self.get_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async ``list``."""
        for item in self.list(config, filter=filter, before=before, limit=limit):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async ``put``."""
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async ``put_writes``."""
        self.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """Async ``delete_thread``."""
        self.delete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async ``delete_for_runs``."""
        self.delete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async ``copy_thread``."""
        self.copy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async ``prune``."""
        self.prune(thread_ids, strategy=strategy)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Async ``get_delta_channel_history``."""
        return self.get_delta_channel_history(config=config, channels=channels)
