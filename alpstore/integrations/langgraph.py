"""``AlpstoreSaver``: a LangGraph checkpointer (sync and async) backed by an alpstore archive.

Each LangGraph thread + checkpoint namespace is an alpstore session; each LangGraph checkpoint is
an alpstore checkpoint of that session, so ``alpstore session log``, lineage, ``debug`` and deep
export work on LangGraph runs. The ``messages`` channel is not stored as one value: its messages
are appended to the session's covering list (one blob per message, stored once), and a
checkpoint points at it, so every-step checkpoints of a growing conversation cost O(delta). The
checkpoint's own fields, metadata and small channel values are packed (zstd) in its row; larger
values are content-addressed blobs; pending writes keep one blob per message too.

Reads hand out fresh message objects (copies of the ones this process keeps), so a message
taken from ``get_state`` and edited in place changes nothing until it is written back, as with
LangGraph's own savers. A put finds the new tail by identity with the lists it last stored
(O(delta)) or handed out (those objects compared with the kept copies, in C: the caller may
have edited them), else compares with the kept copies or by digest, and encodes only what
differs: a message object the caller passed to ``put`` and then changed in place is not
noticed (LangGraph's reducers never do that; return a new message instead).
"""

from __future__ import annotations

import asyncio
import functools
import random
import threading
import zlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar, cast

from langchain_core.messages import BaseMessage
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
from alpstore.errors import SessionStateError
from alpstore.gcpause import no_gc_pause
from alpstore.integrations import _lgdb as lgdb
from alpstore.integrations._lgcodec import (
    FrozenMessages,
    build_message,
    copy_json,
    doc_state,
    freeze,
    is_message_list,
    message_docs,
    unwrap,
    value_from_doc,
    wrap,
)
from alpstore.integrations._lgpack import Packer, value_ref
from alpstore.live import LiveSession, prepare_manifest
from alpstore.policy.recorded import SessionPolicy
from alpstore.sessions import CheckpointInfo, Retention, Session, SessionInfo, count_user_turns
from alpstore.store import Store, encode
from alpstore.views import View, cover_add, cover_bytes, cover_int, cover_sub

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
        workers: threads the ``a*`` methods run the database work in, so the event loop never
            waits for the database (at most this many calls are in flight at once; one
            LangGraph thread's calls always run in one of them, in order).
        max_threads: thread namespaces whose messages this process keeps ready (a copy of each
            head) for fast reads; others are read from the archive when next used.
    """

    def __init__(
        self,
        store: Store,
        *,
        messages_key: str = "messages",
        serde: SerializerProtocol | None = None,
        owns_store: bool = False,
        manifest: Any | None = None,
        workers: int = 8,
        max_threads: int = 256,
    ) -> None:
        super().__init__(serde=serde)
        self.store = store
        self.messages_key = messages_key
        self._owns_store = owns_store
        self._lock = threading.Lock()  # guards the dictionaries below, never held over I/O
        self._threads: OrderedDict[tuple[str, str], lgdb.ThreadState] = OrderedDict()
        self._max_threads = max_threads
        self._infos: dict[str, SessionInfo] = {}  # by session uuid (never reused)
        self._runs: dict[str, None] = {}  # run ids known to have their lg_runs row
        self._packer = Packer()
        self._workers = max(1, workers)
        self._executors: list[ThreadPoolExecutor] | None = None
        self._policy = _prepare_policy(manifest)
        self._live: dict[tuple[str, str], LiveSession] = {}

    @classmethod
    def open(cls, root: Path | str, *, url: str | None = None, **kwargs: Any) -> AlpstoreSaver:
        """Open (creating) the archive of run root ``root`` (or at ``url``); closed by ``close``."""
        return cls(Store.open(root, url=url), owns_store=True, **kwargs)

    def close(self) -> None:
        """Stop the ``a*`` methods' threads; close the store if this saver opened it."""
        with self._lock:
            executors, self._executors = self._executors, None
        for executor in executors or ():
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

    async def _off_loop(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn`` in one of this saver's worker threads; the event loop goes on meanwhile.

        ``workers`` lanes of one thread each: the calls of one LangGraph thread (named by the
        first argument, a config or a thread id) always take the same lane, so they run in the
        order they were made (a ``put`` before the ``put_writes`` that follows it); different
        threads' calls run side by side.
        """
        with self._lock:
            if self._executors is None:
                self._executors = [
                    ThreadPoolExecutor(1, thread_name_prefix=f"alpstore-saver-{i}")
                    for i in range(self._workers)
                ]
            executors = self._executors
        executor = executors[_lane(args[0] if args else None, len(executors))]
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, functools.partial(fn, *args, **kwargs))

    # ---------------------------------------------------------------- threads
    def _state(self, thread_id: str, ns: str) -> lgdb.ThreadState:
        """This process's state of a thread namespace (the ``max_threads`` most recently used
        are kept; an evicted one is rebuilt from the archive when next used).
        """
        key = (thread_id, ns)
        with self._lock:
            th = self._threads.get(key)
            if th is None:
                th = self._threads[key] = lgdb.ThreadState()
                while len(self._threads) > self._max_threads:
                    self._threads.popitem(last=False)
            else:
                self._threads.move_to_end(key)
            return th

    def _forget(self, thread_id: str | None = None) -> None:
        with self._lock:
            for key in list(self._threads):
                if thread_id is None or key[0] == thread_id:
                    self._threads[key].forget()

    # ---------------------------------------------------------------- writing
    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint in one transaction: new messages appended to the session (the
        tail found by identity, O(delta)), small channel values packed with it, larger ones as
        blobs, and an alpstore checkpoint pointing at the view.
        """
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns") or "")
        parent = conf.get("checkpoint_id")
        md = get_checkpoint_metadata(config, metadata)
        th = self._state(thread_id, ns)
        store = self.store
        with th.lock:
            try:
                ck, session_id, split = store.db.retrying(
                    lambda: self._put(th, thread_id, ns, parent, checkpoint, md, new_versions),
                    what=f"checkpoint of LangGraph thread {thread_id!r}",
                )
            except BaseException:
                th.forget()
                raise
            store.archive.after_commit()
            if self._policy is not None and split:
                messages = checkpoint["channel_values"][self.messages_key]
                self._policy_events((thread_id, ns), session_id, messages)
        store.emit_checkpoint(ck)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def _put(
        self,
        th: lgdb.ThreadState,
        thread_id: str,
        ns: str,
        parent: Any,
        checkpoint: Checkpoint,
        md: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> tuple[CheckpointInfo, int, bool]:
        """One transaction of ``put``: ``(checkpoint, session row id, messages split)``."""
        values = checkpoint["channel_values"]
        versions = checkpoint["channel_versions"]
        key = self.messages_key
        store = self.store
        with store.db.atomic() as conn:
            row = lgdb.lock_thread(conn, thread_id, ns)
            if row is None:
                lgdb.create_thread(store, conn, thread_id, ns)
                row = lgdb.lock_thread(conn, thread_id, ns)
                assert row is not None
            th.validate(row)
            if row.status in ("terminated", "paused"):
                raise SessionStateError(
                    f"session {row.uuid} of LangGraph thread {thread_id!r} is {row.status}; "
                    "cannot checkpoint"
                )
            cover = cover_int(row.cover)
            if cover is None:  # not recorded (an archive not upgraded to revision 0004)
                cover = store.views.cover(conn, row.view)
            head = None
            if key in versions and type(values.get(key)) is list:
                head = self._sync(conn, th, row, cover, values[key], key in new_versions)
            if head is not None:
                view, turn, cover = head[0], head[1], head[2]
            else:
                view, turn = row.view, row.turn
            refs: dict[str, list[Any]] = {}
            blobs: list[tuple[str, Encoded]] = []
            inherited = self._inherited(conn, th, row.ref, parent, versions, values, new_versions)
            for channel in versions:
                if head is not None and channel == key:
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
            skeleton = {k: v for k, v in checkpoint.items() if k not in ("channel_values", "id")}
            state: dict[str, Any] = {
                "c": wrap(self.serde, skeleton),
                "m": wrap(self.serde, md),
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
            info = self._info(conn, row, view, turn, status)
            ck = store.insert_checkpoint(
                conn,
                info,
                view,
                turn=turn,
                label=None,
                trigger=(TRIGGER_PREFIX + source)[:32],
                kernel_id=None,
                wm_id=None,
                cover=cover,
            )
            if row.retention[0] != "all":
                store.apply_retention(conn, info)
            run_id = md.get("run_id")
            if run_id is not None and str(run_id) not in self._runs:
                lgdb.intern_run(conn, str(run_id))
            packed = self._packer.pack(state)
            cid = str(checkpoint["id"])
            parent_id = None if parent is None else str(parent)
            run = None if run_id is None else str(run_id)
            new = lgdb.insert_checkpoint_row(conn, row.ref, cid, parent_id, ck.id, run, packed)
            if new is None:  # the same checkpoint id again: it replaces the stored one
                lgdb.drop_checkpoints(conn, row.ref, row.session_id, [cid], writes=False)
                new = lgdb.insert_checkpoint_row(conn, row.ref, cid, parent_id, ck.id, run, packed)
                assert new is not None
            lgdb.insert_checkpoint_blobs(conn, new, [r[2] for r in refs.values() if r[0] == "b"])
        # committed: only now does this process's picture of the thread change
        if run is not None:
            self._remember_run(run)
        if head is not None:
            if head[3]():
                th.key = (row.ref, row.session_id, row.uuid, view, cover_bytes(cover))
            else:
                th.forget()
        th.last_put = (cid, dict(versions), refs) if th.key is not None else None
        return ck, row.session_id, head is not None

    def _info(
        self, conn: Any, row: lgdb.HeadRow, view: View, turn: int, status: str
    ) -> SessionInfo:
        info = self._infos.get(row.uuid)
        if info is None or info.id != row.session_id:
            info = self.store.session_info(row.session_id, conn=conn)
            with self._lock:
                self._infos[row.uuid] = info
        return replace(
            info,
            head=view,
            turn=turn,
            status=cast(Any, status),
            retention=Retention(cast(Any, row.retention[0]), row.retention[1]),
        )

    def _remember_run(self, run_id: str) -> None:
        with self._lock:
            self._runs[run_id] = None
            while len(self._runs) > 256:
                self._runs.pop(next(iter(self._runs)))

    def _sync(
        self,
        conn: Any,
        th: lgdb.ThreadState,
        row: lgdb.HeadRow,
        cover: int,
        messages: list[Any],
        changed: bool,
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
        store = self.store
        n_old = row.view.length
        k = -1
        if th.private is not None and len(th.private) == n_old:
            k = min(lgdb.held_prefix(th.seen, messages), n_old)
            handed = min(lgdb.held_prefix(th.handed, messages), n_old)
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
        ids = store.archive.store_encoded(conn, items)
        if k == n_old:
            view = store.views.append(conn, row.view, row.session_id, ids)
        else:
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

    def _policy_events(self, key: tuple[str, str], session_id: int, messages: list[Any]) -> None:
        """Raise the events this step shows on the thread's live session (issue 15); called
        with the thread's lock held, after the step's checkpoint committed.
        """
        assert self._policy is not None
        live = self._live.get(key)
        if live is None or live.session.id != session_id:
            session = Session(self.store, self.store.session_info(session_id))
            # LangGraph's checkpoints stay in the archive whatever the retention says
            self.store.bind_policy(session_id, self._policy.as_record(), Retention())
            live = LiveSession(self.store, session, self._policy)
            with self._lock:
                self._live[key] = live
        seen = live.refresh()
        for name in step_events(messages[seen:]):
            live.event(name)

    def _inherited(
        self,
        conn: Any,
        th: lgdb.ThreadState,
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
        """Store a task's pending writes (one transaction; a list of messages keeps one blob
        per message).

        A ``(task, idx)`` already stored is kept, unless every write is a special one (error,
        interrupt), which replaces it — LangGraph's rule.
        """
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns") or "")
        checkpoint_id = str(conf["checkpoint_id"])
        task_id = str(task_id)
        replace_all = all(channel in WRITES_IDX_MAP for channel, _ in writes)
        # what each write stores, before any database work
        planned: dict[int, tuple[str, list[Any], list[Encoded]]] = {}
        for idx, (channel, value) in enumerate(writes):
            widx = WRITES_IDX_MAP.get(channel, idx)
            if widx in planned and not replace_all:
                continue
            planned[widx] = self._plan_write(channel, value)
        store = self.store

        def attempt() -> None:
            with store.db.atomic() as conn:
                entries: dict[int, _WriteEntry] = {}
                every = [item for _, _, items in planned.values() for item in items]
                ids = iter(store.archive.store_encoded(conn, every))
                for widx, (channel, ref, items) in planned.items():
                    entries[widx] = (channel, ref, [next(ids) for _ in items])
                packed, blob_ids = self._pack_writes(task_path, entries)
                if lgdb.insert_new_writes(
                    conn, thread_id, ns, checkpoint_id, task_id, packed, blob_ids
                ):
                    return
                self._merge_writes(
                    conn, thread_id, ns, checkpoint_id, task_id, task_path, entries, replace_all
                )

        with self._state(thread_id, ns).lock:
            store.db.retrying(attempt, what=f"pending writes of LangGraph thread {thread_id!r}")
        store.archive.after_commit()

    def _plan_write(self, channel: str, value: Any) -> tuple[str, list[Any], list[Encoded]]:
        docs = message_docs(value) if value and is_message_list(value) else None
        if docs is not None:
            return channel, ["l"], [encode(d, BLOB_MESSAGE) for d in docs]
        ref, item = value_ref(self.serde, value)
        return channel, ref, [] if item is None else [item]

    def _pack_writes(
        self, task_path: str, entries: Mapping[int, _WriteEntry]
    ) -> tuple[tuple[int, int | None, int, bytes], list[int]]:
        refs: list[list[Any]] = []
        items: list[int] = []
        for idx in sorted(entries):
            channel, ref, blob_ids = entries[idx]
            if ref[0] == "b":
                ref = [*ref[:2], len(items)]
            elif ref[0] == "l":
                ref = ["l", len(items), len(blob_ids)]
            refs.append([idx, channel, ref])
            items.extend(blob_ids)
        return self._packer.pack({"p": task_path, "w": refs}), items

    def _merge_writes(
        self,
        conn: Any,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        task_id: str,
        task_path: str,
        new: dict[int, _WriteEntry],
        replace_all: bool,
    ) -> None:
        """The task already has writes here (or the thread is new): merge by LangGraph's rule."""
        found_thread = lgdb.find_thread(conn, thread_id, ns)
        ref = (
            lgdb.create_thread(self.store, conn, thread_id, ns)[0]
            if found_thread is None
            else found_thread[0]
        )
        found = lgdb.find_writes(conn, ref, checkpoint_id, task_id)
        entries: dict[int, _WriteEntry] = {}
        existing = None
        if found:
            existing, _, packed, items = found[0]
            doc = self._packer.unpack(conn, packed)
            task_path = doc["p"]
            for idx, channel, wref in doc["w"]:
                entries[int(idx)] = _entry_from_ref(channel, wref, items)
        changed = False
        for widx, entry in new.items():
            if widx in entries and not replace_all:
                continue
            entries[widx] = entry
            changed = True
        if not changed:
            return
        packed, blob_ids = self._pack_writes(task_path, entries)
        lgdb.save_writes(conn, ref, checkpoint_id, task_id, existing, packed, blob_ids)

    # ---------------------------------------------------------------- reading
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by ``config`` (the thread's latest without a checkpoint id).

        Every read returns new message objects: changing them in place never changes what
        this saver (or anyone reading after) sees.
        """
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns") or "")
        th = self._state(thread_id, ns)
        with th.lock, self.store.db.read() as conn:
            found = lgdb.find_latest(conn, thread_id, ns, conf.get("checkpoint_id"))
            if found is None:
                return None
            head, row = found
            th.validate(head)
            return self._tuple(conn, th, head, thread_id, ns, row)

    def _tuple(
        self,
        conn: Any,
        th: lgdb.ThreadState,
        head: lgdb.HeadRow,
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
        values = self._values(conn, th, head, row, state, None)
        writes = self._writes(conn, head.ref, row.checkpoint_id)
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

    def _messages(
        self, conn: Any, th: lgdb.ThreadState, head: lgdb.HeadRow, view: View
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
                out, kept = lgdb.load_head(self.store, conn, view)
                if view == head.view and th.key == head.key:
                    th.private = kept  # from the documents' bytes: nothing handed out
                    th.digests = None
        if view == head.view:
            th.handed.append(list(out))  # our own list: the caller may change theirs in place
        return out

    def _values(
        self,
        conn: Any,
        th: lgdb.ThreadState,
        head: lgdb.HeadRow,
        row: lgdb.CheckpointRow,
        state: dict[str, Any],
        channels: set[str] | None,
    ) -> dict[str, Any]:
        values: dict[str, Any] = {}
        split = state.get("s")
        if split is not None and (channels is None or split in channels):
            values[split] = self._messages(conn, th, head, row.view)
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
                values[channel] = value_from_doc(self.serde, kind, copy_json(docs[blob_id][2]))
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
                    value = value_from_doc(self.serde, ref[1], copy_json(docs[items[ref[2]]][2]))
                else:
                    start, n = ref[1], ref[2]
                    value = [build_message(copy_json(docs[b][2])) for b in items[start : start + n]]
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
        with self.store.db.read() as conn:
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
            th = self._state(thread_id, ns)
            with th.lock, self.store.db.read() as conn:
                head = lgdb.read_head(conn, thread_id, ns)
                tup = None
                if head is not None:
                    th.validate(head)
                    tup = self._tuple(conn, th, head, thread_id, ns, row, filter=filter)
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
        th = self._state(thread_id, ns)
        with th.lock, self.store.db.read() as conn:
            found = lgdb.find_latest(conn, thread_id, ns, conf.get("checkpoint_id"))
            head = None if found is None else found[0]
            if head is not None:
                th.validate(head)
            cursor = found[1].parent_checkpoint_id if found is not None else None
            seen: set[str] = set()
            while head is not None and cursor is not None and remaining and cursor not in seen:
                seen.add(cursor)
                row = lgdb.find_checkpoint(conn, head.ref, cursor)
                if row is None:
                    break
                for write in reversed(self._writes(conn, head.ref, row.checkpoint_id, remaining)):
                    collected[write[1]].append(write)
                state = self._packer.unpack(conn, row.packed)
                for channel, value in self._values(conn, th, head, row, state, remaining).items():
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
        with self.store.db.atomic() as conn:
            for ref, session_id in lgdb.thread_rows(conn, str(thread_id)):
                lgdb.drop_thread(self.store, conn, ref, session_id)
        self._forget(str(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete every checkpoint (and its writes) whose metadata ``run_id`` is listed."""
        if not run_ids:
            return
        with self.store.db.atomic() as conn:
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
        with self.store.db.atomic() as conn:
            for thread_id in thread_ids:
                for ref, session_id in lgdb.thread_rows(conn, str(thread_id)):
                    if strategy == "delete":
                        lgdb.drop_thread(self.store, conn, ref, session_id)
                        continue
                    ids = lgdb.checkpoint_ids(conn, ref)
                    lgdb.drop_checkpoints(conn, ref, session_id, ids[:-1])
        for thread_id in thread_ids:
            self._forget(str(thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of a thread to a new thread, as a fork: each namespace
        becomes a child session of the source's (lineage recorded), sharing every blob and view.

        Raises:
            UsageError: the target thread already exists.
        """
        with self.store.db.atomic() as conn:
            lgdb.copy_thread(self.store, conn, str(source_thread_id), str(target_thread_id))

    # ---------------------------------------------------------------- async
    # Every a* method runs its sync twin in the saver's worker threads: the event loop never
    # waits for a transaction, a lock held by another writer or a slow server.
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
        """Async ``list`` (each checkpoint read off the event loop)."""
        items = self.list(config, filter=filter, before=before, limit=limit)
        done = object()
        while True:
            item = await self._off_loop(next, items, done)
            if item is done:
                return
            yield cast(CheckpointTuple, item)

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


def _lane(first: Any, lanes: int) -> int:
    """The worker lane of a call: by its LangGraph thread id (a config's, or the id itself)."""
    if isinstance(first, Mapping):
        first = first.get("configurable", {}).get("thread_id")
    return 0 if first is None else zlib.crc32(str(first).encode()) % lanes


_WriteEntry = tuple[str, list[Any], list[int]]
"""A write being rebuilt: ``(channel, ref template, blob ids)``."""


def _entry_from_ref(channel: str, ref: list[Any], items: list[int]) -> _WriteEntry:
    if ref[0] == "b":
        return channel, ref[:2], [items[ref[2]]]
    if ref[0] == "l":
        return channel, ["l"], items[ref[1] : ref[1] + ref[2]]
    return channel, ref, []
