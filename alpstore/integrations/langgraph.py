"""``AlpstoreSaver``: a LangGraph checkpointer (sync and async) backed by an alpstore archive.

Each LangGraph thread + checkpoint namespace is an alpstore session; each LangGraph checkpoint is
an alpstore checkpoint of that session, so ``alpstore session log``, lineage, ``debug`` and deep
export work on LangGraph runs. The ``messages`` channel is not stored as one value: its messages
are appended to the session's covering list (one blob per message, stored once), and a
checkpoint points at it, so every-step checkpoints of a growing conversation cost O(delta). The
checkpoint's own fields, metadata and small channel values are packed (zstd) in its row; larger
values are content-addressed blobs; pending writes keep one blob per message too.

Reads hand out fresh message objects (deep copies of the ones this process keeps), so a message
taken from ``get_state`` and edited in place changes nothing until it is written back, as with
LangGraph's own savers. A put compares messages with the stored head by identity with the list
it last stored, else by equality with the kept copies, and encodes only what differs: a message
object the caller passed to ``put`` and then changed in place is not noticed (LangGraph's
reducers never do that; return a new message instead).
"""

from __future__ import annotations

import asyncio
import copy
import functools
import random
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar, cast

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
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from alpstore.archive.sql import Encoded
from alpstore.db.tables import BLOB_MESSAGE
from alpstore.integrations import _lgdb as lgdb
from alpstore.integrations._lgcodec import (
    is_message_list,
    message_docs,
    message_from_doc,
    unwrap,
    value_from_doc,
    wrap,
)
from alpstore.integrations._lgpack import Packer, value_ref
from alpstore.live import LiveSession, prepare_manifest
from alpstore.policy.recorded import SessionPolicy
from alpstore.sessions import Retention
from alpstore.store import Store, encode

T = TypeVar("T")

__all__ = ["AlpstoreSaver", "step_events"]

TRIGGER_PREFIX = "langgraph:"
"""Checkpoints written by this saver carry the trigger ``langgraph:<source>``."""


def step_events(new_messages: Sequence[Any]) -> list[str]:
    """The checkpoint events a step's new messages show: an AI message is ``after_llm_call``,
    a tool message ``after_tool_call`` (in the order they first appear).
    """
    events: list[str] = []
    for message in new_messages:
        kind = getattr(message, "type", None)
        name = {"ai": "after_llm_call", "tool": "after_tool_call"}.get(str(kind))
        if name is not None and name not in events:
            events.append(name)
    return events


def _prepare_policy(manifest: Any | None) -> SessionPolicy | None:
    if manifest is None:
        return None
    return prepare_manifest(manifest, cwd=Path.cwd()).policy


class AlpstoreSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer storing threads as alpstore sessions.

    Args:
        store: an open alpstore ``Store`` (``AlpstoreSaver.open(root)`` opens one for you).
        messages_key: the channel whose list of messages is kept as the session's covering list.
        serde: LangGraph serializer for values that are not plain JSON (default: JsonPlus).
        manifest: an Agent manifest (mapping or file) whose ``spec.checkpoint`` policy each
            thread runs under, on top of LangGraph's own step checkpoints: a step that adds an
            AI message raises ``after_llm_call``, one that adds tool messages
            ``after_tool_call``; the policy decides (and its retention prunes its own files,
            never LangGraph's checkpoints).
    """

    def __init__(
        self,
        store: Store,
        *,
        messages_key: str = "messages",
        serde: SerializerProtocol | None = None,
        owns_store: bool = False,
        manifest: Any | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self.store = store
        self.messages_key = messages_key
        self._owns_store = owns_store
        self._lock = threading.RLock()
        self._threads: dict[tuple[str, str], lgdb.ThreadState] = {}
        self._packer = Packer()
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()
        self._policy = _prepare_policy(manifest)
        self._live: dict[tuple[str, str], LiveSession] = {}

    @classmethod
    def open(cls, root: Path | str, *, url: str | None = None, **kwargs: Any) -> AlpstoreSaver:
        """Open (creating) the archive of run root ``root`` (or at ``url``); closed by ``close``."""
        return cls(Store.open(root, url=url), owns_store=True, **kwargs)

    def close(self) -> None:
        """Stop the async worker thread; close the store if this saver opened it."""
        with self._executor_lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> AlpstoreSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> AlpstoreSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    # ---------------------------------------------------------------- versions
    def get_next_version(self, current: int | str | None, channel: None = None) -> Any:
        """The version after ``current``: integers for threads this saver started; for a thread
        carrying the string versions LangGraph's own savers write (copied or migrated from
        one), the next string in their format (``<32-digit counter>.<random>``), so the two
        kinds never meet in one thread (LangGraph compares and takes ``max`` of versions).
        """
        if isinstance(current, str):
            counter = int(current.split(".")[0]) + 1
            return f"{counter:032}.{random.random():016}"
        return 1 if current is None else int(current) + 1

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
        if cached is None or cached.ref != row[0] or cached.session.id != row[1]:
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
        """Store a checkpoint: messages appended to the session (O(delta)), small channel values
        packed with it, larger ones as blobs, and an alpstore checkpoint pointing at the view.
        """
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns") or "")
        parent = conf.get("checkpoint_id")
        values = checkpoint["channel_values"]
        versions = checkpoint["channel_versions"]
        skeleton = {k: v for k, v in checkpoint.items() if k not in ("channel_values", "id")}
        md = get_checkpoint_metadata(config, metadata)
        key = self.messages_key
        messages = values.get(key)
        store = self.store
        with self._lock, store.db.atomic() as conn:
            th = self._thread(conn, thread_id, ns, create=True)
            assert th is not None
            split = (
                key in versions
                and is_message_list(messages)
                and th.sync_head(conn, cast(list[Any], messages))
            )
            refs: dict[str, list[Any]] = {}
            blobs: list[tuple[str, Encoded]] = []
            inherited = self._inherited(conn, th, parent, versions, values, new_versions)
            for channel in versions:
                if split and channel == key:
                    continue
                if channel in values:
                    ref, item = value_ref(self.serde, values[channel])
                    refs[channel] = ref
                    if item is not None:
                        blobs.append((channel, item))
                elif channel in inherited:
                    refs[channel] = inherited[channel]
            ids = store.archive.store_encoded(conn, [item for _, item in blobs])
            for (channel, _), blob_id in zip(blobs, ids, strict=True):
                refs[channel].append(blob_id)
            state: dict[str, Any] = {
                "c": wrap(self.serde, skeleton),
                "m": wrap(self.serde, md),
                "v": refs,
            }
            if split:
                state["s"] = key
            lgdb.drop_checkpoints(conn, th.ref, th.session.id, [checkpoint["id"]], writes=False)
            source = str(md.get("source", "put"))
            ck = th.session.checkpoint(trigger=(TRIGGER_PREFIX + source)[:32])
            run_id = md.get("run_id")
            lgdb.insert_checkpoint(
                conn,
                th.ref,
                checkpoint["id"],
                None if parent is None else str(parent),
                ck.id,
                None if run_id is None else lgdb.run_ref(conn, str(run_id)),
                self._packer.pack(state),
                [r[2] for r in refs.values() if r[0] == "b"],
            )
        store.archive.after_commit()
        if self._policy is not None and split:
            self._policy_events((thread_id, ns), th, cast(list[Any], messages))
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def _policy_events(
        self, key: tuple[str, str], th: lgdb.ThreadState, messages: list[Any]
    ) -> None:
        """Raise the events this step shows on the thread's live session (issue 15)."""
        assert self._policy is not None
        with self._lock:
            live = self._live.get(key)
            if live is None or live.session is not th.session:
                # LangGraph's checkpoints stay in the archive whatever the retention says
                self.store.bind_policy(th.session.id, self._policy.as_record(), Retention())
                live = self._live[key] = LiveSession(self.store, th.session, self._policy)
            seen = live.refresh()
            for name in step_events(messages[seen:]):
                live.event(name)

    def _inherited(
        self,
        conn: Any,
        th: lgdb.ThreadState,
        parent: Any,
        versions: Mapping[str, Any],
        values: Mapping[str, Any],
        new_versions: Mapping[str, Any],
    ) -> dict[str, list[Any]]:
        """Refs of unchanged channels whose values the caller left out, taken from the parent
        checkpoint when it holds the same version (LangGraph itself always passes them).
        """
        missing = [c for c in versions if c not in values and c not in new_versions]
        if not missing or parent is None:
            return {}
        row = lgdb.find_checkpoint(conn, th.ref, str(parent))
        if row is None:
            return {}
        state = self._packer.unpack(conn, row.packed)
        before = unwrap(self.serde, state["c"]).get("channel_versions", {})
        return {
            c: state["v"][c]
            for c in missing
            if c in state["v"] and str(before.get(c)) == str(versions[c])
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes; a list of messages keeps one blob per message.

        A ``(task, idx)`` already stored is kept, unless every write is a special one (error,
        interrupt), which replaces it — LangGraph's rule.
        """
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns") or "")
        checkpoint_id = str(conf["checkpoint_id"])
        task_id = str(task_id)
        replace = all(channel in WRITES_IDX_MAP for channel, _ in writes)
        store = self.store
        with self._lock, store.db.atomic() as conn:
            th = self._thread(conn, thread_id, ns, create=True)
            assert th is not None
            found = lgdb.find_writes(conn, th.ref, checkpoint_id, task_id)
            entries: dict[int, _WriteEntry] = {}
            existing = None
            if found:
                existing, _, packed, items = found[0]
                doc = self._packer.unpack(conn, packed)
                task_path = doc["p"]
                for idx, channel, ref in doc["w"]:
                    entries[int(idx)] = _entry_from_ref(channel, ref, items)
            changed = False
            for idx, (channel, value) in enumerate(writes):
                widx = WRITES_IDX_MAP.get(channel, idx)
                if widx in entries and not replace:
                    continue
                entries[widx] = self._new_entry(conn, channel, value)
                changed = True
            if not changed:
                return
            refs, items = [], []
            for idx in sorted(entries):
                channel, ref, blob_ids = entries[idx]
                if ref[0] == "b":
                    ref = [*ref[:2], len(items)]
                elif ref[0] == "l":
                    ref = ["l", len(items), len(blob_ids)]
                refs.append([idx, channel, ref])
                items.extend(blob_ids)
            packed = self._packer.pack({"p": task_path, "w": refs})
            lgdb.save_writes(conn, th.ref, checkpoint_id, task_id, existing, packed, items)
        store.archive.after_commit()

    def _new_entry(self, conn: Any, channel: str, value: Any) -> _WriteEntry:
        docs = message_docs(value) if is_message_list(value) and value else None
        if docs is not None:
            ids = self.store.archive.store_encoded(conn, [encode(d, BLOB_MESSAGE) for d in docs])
            return channel, ["l"], ids
        ref, item = value_ref(self.serde, value)
        if item is None:
            return channel, ref, []
        (blob_id,) = self.store.archive.store_encoded(conn, [item])
        return channel, ref, [blob_id]

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
        state = self._packer.unpack(conn, row.packed)
        md = unwrap(self.serde, state["m"])
        if filter and not all(md.get(k) == v for k, v in filter.items()):
            return None
        skeleton = {"id": row.checkpoint_id, **unwrap(self.serde, state["c"])}
        values = self._values(conn, th, row, state, None)
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
        state: dict[str, Any],
        channels: set[str] | None,
    ) -> dict[str, Any]:
        values: dict[str, Any] = {}
        split = state.get("s")
        if split is not None and (channels is None or split in channels):
            # fresh objects: the process's kept copies are never handed out (an edit in place
            # must not change what later reads, or other threads, see)
            values[split] = [copy.deepcopy(m) for m in th.hydrate(conn, row.view)]
        stored = []
        for channel, ref in state["v"].items():
            if channels is not None and channel not in channels:
                continue
            if ref[0] == "i":
                values[channel] = value_from_doc(self.serde, ref[1], ref[2])
            else:
                stored.append((channel, ref[1], ref[2]))
        if stored:
            docs = self.store.archive.load_by_ids(conn, [b for _, _, b in stored])
            for channel, kind, blob_id in stored:
                values[channel] = value_from_doc(self.serde, kind, docs[blob_id][2])
        return values

    def _writes(
        self, conn: Any, thread_ref: int, checkpoint_id: str, channels: set[str] | None = None
    ) -> list[PendingWrite]:
        found = lgdb.find_writes(conn, thread_ref, checkpoint_id)
        if not found:
            return []
        docs = self.store.archive.load_by_ids(conn, [b for *_, items in found for b in items])
        out = []
        for _, task_id, packed, items in found:
            doc = self._packer.unpack(conn, packed)
            for idx, channel, ref in doc["w"]:
                if channels is not None and channel not in channels:
                    continue
                if ref[0] == "i":
                    value = value_from_doc(self.serde, ref[1], ref[2])
                elif ref[0] == "b":
                    value = value_from_doc(self.serde, ref[1], docs[items[ref[2]]][2])
                else:
                    start, n = ref[1], ref[2]
                    value = [message_from_doc(docs[b][2]) for b in items[start : start + n]]
                out.append((writes_sort_key(doc["p"], task_id, idx), (task_id, channel, value)))
        out.sort(key=lambda pair: pair[0])
        return [w for _, w in out]

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
                for write in reversed(self._writes(conn, th.ref, row.checkpoint_id, remaining)):
                    collected[write[1]].append(write)
                state = self._packer.unpack(conn, row.packed)
                for channel, value in self._values(conn, th, row, state, remaining).items():
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
                lgdb.drop_checkpoints(conn, ref, session_id, ids)
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
                    lgdb.drop_checkpoints(conn, ref, session_id, ids[:-1])
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
    async def _off_loop(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn`` in this saver's worker thread, so the event loop goes on while the
        database works or waits (a lock held by another process, a slow PostgreSQL round trip).

        One worker: calls run in the order they were made (a ``put`` before the ``put_writes``
        that follows it), as the sync methods, which hold the saver's lock, would anyway.
        """
        with self._executor_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="alpstore-saver")
            executor = self._executor
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, functools.partial(fn, *args, **kwargs))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async ``get_tuple`` (off the event loop)."""
        return await self._off_loop(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async ``list`` (read off the event loop, then yielded)."""
        items = await self._off_loop(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for item in items:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async ``put`` (off the event loop)."""
        return await self._off_loop(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async ``put_writes`` (off the event loop)."""
        await self._off_loop(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """Async ``delete_thread`` (off the event loop)."""
        await self._off_loop(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async ``delete_for_runs`` (off the event loop)."""
        await self._off_loop(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async ``copy_thread`` (off the event loop)."""
        await self._off_loop(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async ``prune`` (off the event loop)."""
        await self._off_loop(self.prune, thread_ids, strategy=strategy)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Async ``get_delta_channel_history`` (off the event loop)."""
        return await self._off_loop(
            self.get_delta_channel_history, config=config, channels=channels
        )


_WriteEntry = tuple[str, list[Any], list[int]]
"""A write being rebuilt: ``(channel, ref template, blob ids)``."""


def _entry_from_ref(channel: str, ref: list[Any], items: list[int]) -> _WriteEntry:
    if ref[0] == "b":
        return channel, ref[:2], [items[ref[2]]]
    if ref[0] == "l":
        return channel, ["l"], items[ref[1] : ref[1] + ref[2]]
    return channel, ref, []
