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

This module is the protocol (``BaseCheckpointSaver``'s methods, sync and async); the write and
read paths are in ``_lgwrite`` and ``_lgread``, what the process keeps (``SaverState``, this
class's base, and each thread's ``ThreadState``) in ``_lgthread``, SQL in ``_lgdb`` and
``_lgmaint``.
"""

from __future__ import annotations

import asyncio
import functools
import random
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, Self, TypeVar, cast

try:  # the framework first: without it, an ImportError naming the pip install line
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        DeltaChannelHistory,
        PendingWrite,
        get_checkpoint_metadata,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as err:
    from alpstore.integrations._extras import missing

    raise missing("langgraph", "alpstore.integrations.langgraph (AlpstoreSaver)", err) from err

from alpstore.archive.sql import Encoded
from alpstore.db.engine import pool_per_worker
from alpstore.integrations import _lgdb as lgdb
from alpstore.integrations import _lgmaint as lgmaint
from alpstore.integrations import _lgpolicy as lgpolicy
from alpstore.integrations import _lgread as lgread
from alpstore.integrations import _lgwrite as lgwrite
from alpstore.integrations._lgfast import WriteRequest
from alpstore.integrations._lgpolicy import step_events
from alpstore.integrations._lgthread import SaverState, thread_key
from alpstore.integrations._lgwrite import TRIGGER_PREFIX
from alpstore.store import Store

T = TypeVar("T")

__all__ = ["TRIGGER_PREFIX", "AlpstoreSaver", "AsyncAlpstoreSaver", "step_events"]

MEMORY = (":memory:", "sqlite://", "sqlite:///:memory:")
"""Connection strings that mean "a throw-away archive" (``SqliteSaver``'s in-memory database):
a temporary run root, removed when the context manager exits."""


class AlpstoreSaver(SaverState):
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
        super().__init__(
            store,
            messages_key=messages_key,
            serde=serde,
            policy=lgpolicy.prepare_policy(manifest),
            max_threads=max_threads,
        )
        self._owns_store = owns_store
        self._workers = max(1, workers)
        self._executor: ThreadPoolExecutor | None = None
        self._turns: dict[tuple[int, str], tuple[asyncio.Lock, int]] = {}  # see _off_loop

    @classmethod
    def open(cls, root: Path | str, *, url: str | None = None, **kwargs: Any) -> Self:
        """Open (creating) the archive of run root ``root`` (or at ``url``: on PostgreSQL with a
        pooled connection per worker); closed by ``close``.
        """
        url = pool_per_worker(url, int(kwargs.get("workers", 8)))
        return cls(Store.open(root, url=url), owns_store=True, **kwargs)

    @classmethod
    @contextmanager
    def from_conn_string(
        cls, conn_string: str | Path, *, root: Path | str | None = None, **kwargs: Any
    ) -> Iterator[Self]:
        """A saver on ``conn_string``, closed (with its store) when the ``with`` block ends —
        as LangGraph's ``SqliteSaver.from_conn_string`` / ``PostgresSaver.from_conn_string``.

        ``conn_string`` is a run root (a folder, created if missing: the archive is
        ``traces/archive/archive.db`` in it), a database URL (``sqlite:///PATH``,
        ``postgresql+psycopg://USER:PASSWORD@HOST/DB``; the run root, where the event log
        goes, is then ``root``, default the current directory, as the CLI's ``--root``), or
        ``":memory:"``: a temporary run root, removed on exit. Other keyword arguments go to
        the saver (``messages_key``, ``serde``, ``manifest`` …).

        Raises:
            UsageError: an empty string, a malformed URL or an unsupported backend.
            StorageError: the run root is a file or cannot be created.
            DatabaseError: the server cannot be reached or refuses the login.
        """
        with _target(conn_string, root) as (run_root, url):
            saver = cls.open(run_root, url=url, **kwargs)
            try:
                yield saver
            finally:
                saver.close()

    @classmethod
    @asynccontextmanager
    async def afrom_conn_string(
        cls, conn_string: str | Path, *, root: Path | str | None = None, **kwargs: Any
    ) -> AsyncIterator[Self]:
        """``from_conn_string`` as an async context manager (``async with``), the archive
        opened and closed off the event loop; ``AsyncAlpstoreSaver.from_conn_string`` is this.
        """
        loop = asyncio.get_running_loop()
        with _target(conn_string, root) as (run_root, url):
            saver = await loop.run_in_executor(
                None, functools.partial(cls.open, run_root, url=url, **kwargs)
            )
            try:
                yield saver
            finally:
                await loop.run_in_executor(None, saver.close)

    def close(self) -> None:
        """Stop the ``a*`` methods' threads; close the store if this saver opened it."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        self._folder.close()
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

        ``workers`` threads, shared by every LangGraph thread: the calls of one LangGraph
        thread (named by the first argument, a config or a thread id) queue on a lock of their
        own, so they run in the order they were made (a ``put`` before the ``put_writes`` that
        follows it), one at a time; different threads' calls run side by side on whichever
        worker is free. A thread whose call is stuck (its session row locked elsewhere) holds
        one worker, never another thread's calls; a caller's timeout frees its queue at once.
        ``_turns`` holds each thread's lock and how many calls hold or wait for it.
        """
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self._workers, "alpstore-saver")
            executor = self._executor
        loop = asyncio.get_running_loop()
        key = (id(loop), thread_key(args[0] if args else None))
        with self._lock:  # several event loops (threads) may share the saver
            lock, users = self._turns.get(key) or (asyncio.Lock(), 0)
            self._turns[key] = (lock, users + 1)
        try:
            async with lock:
                return await loop.run_in_executor(executor, functools.partial(fn, *args, **kwargs))
        finally:
            with self._lock:
                lock, users = self._turns.pop(key)
                if users > 1:
                    self._turns[key] = (lock, users - 1)

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
        if parent is not None:  # its pending writes noted first: the step names their nodes
            th.writes_settled(str(parent))
        with th.lock:
            try:
                ck, session_id, split = store.db.retrying(
                    lambda: lgwrite.put_checkpoint(
                        self, th, thread_id, ns, parent, checkpoint, md, new_versions
                    ),
                    what=f"checkpoint of LangGraph thread {thread_id!r}",
                )
            except BaseException:
                th.forget()
                raise
            store.archive.after_commit()
            if md.get("source") == "input":
                # a new invoke's input: the thread's last turn is over, its messages cold
                # (packed on the archive's packer thread, never in this put)
                store.archive.pack_at_turn_end()
                self._folder.after_input(thread_id, ns, str(checkpoint["id"]))  # off this thread
            if self._policy is not None and split:
                messages = checkpoint["channel_values"][self.messages_key]
                lgpolicy.policy_events(self, (thread_id, ns), session_id, messages)
        store.emit_checkpoint(ck)
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
            planned[widx] = lgwrite.plan_write(self, channel, value)
        store = self.store
        th = self._state(thread_id, ns)
        request = WriteRequest(
            thread_id, ns, checkpoint_id, task_id, task_path, planned, replace_all
        )
        # the transaction runs beside the thread's put in flight (it reads nothing of the
        # thread's state; a merge or a new thread takes the lock), and the next step's put
        # waits for it before taking the lock (``writes_settled``), to find its node noted
        th.writes_begin(checkpoint_id)
        try:
            lgwrite.put_writes(self, request, th.lock)
            with th.lock:
                noted = lgwrite.note_writer(th, checkpoint_id, task_path)
        finally:
            th.writes_end(checkpoint_id)
        store.archive.after_commit()
        lgwrite.note_writes(self, thread_id, ns, checkpoint_id, task_path, writes, noted)

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
        checkpoint_id = conf.get("checkpoint_id")
        with th.lock:
            return lgread.get_tuple(self, th, thread_id, ns, checkpoint_id)

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
                limit=None if filter else limit,  # a filter may pass over rows: read them all
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
                    tup = lgread.checkpoint_tuple(
                        self, conn, th, head, thread_id, ns, row, filter=filter
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
                for write in reversed(
                    lgread.pending_writes(self, conn, head.ref, row.checkpoint_id, remaining)
                ):
                    collected[write[1]].append(write)
                state = self._packer.unpack(conn, row.packed)
                for channel, value in lgread.channel_values(
                    self, conn, th, head, row, state, remaining
                ).items():
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
            for ref, session_id in lgmaint.thread_rows(conn, str(thread_id)):
                lgmaint.drop_thread(self.store, conn, ref, session_id)
        self._forget(str(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete every checkpoint (and its writes) whose metadata ``run_id`` is listed."""
        if not run_ids:
            return
        with self.store.db.atomic() as conn:
            for ref, session_id, ids in lgmaint.checkpoints_of_runs(
                conn, [str(r) for r in run_ids]
            ):
                lgmaint.drop_checkpoints(conn, ref, session_id, ids)
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
                for ref, session_id in lgmaint.thread_rows(conn, str(thread_id)):
                    if strategy == "delete":
                        lgmaint.drop_thread(self.store, conn, ref, session_id)
                        continue
                    ids = lgmaint.checkpoint_ids(conn, ref)
                    lgmaint.drop_checkpoints(conn, ref, session_id, ids[:-1])
        for thread_id in thread_ids:
            self._forget(str(thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of a thread to a new thread, as a fork: each namespace
        becomes a child session of the source's (lineage recorded), sharing every blob and view.

        Raises:
            UsageError: the target thread already exists.
        """
        with self.store.db.atomic() as conn:
            lgmaint.copy_thread(self.store, conn, str(source_thread_id), str(target_thread_id))

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


class AsyncAlpstoreSaver(AlpstoreSaver):
    """``AlpstoreSaver`` under the name of LangGraph's async savers.

    Its ``from_conn_string`` is an async context manager, as ``AsyncSqliteSaver``'s and
    ``AsyncPostgresSaver``'s are::

        async with AsyncAlpstoreSaver.from_conn_string("run") as saver:
            graph = builder.compile(checkpointer=saver)
            await graph.ainvoke(...)

    The saver is the same (its sync methods work too, from any thread).
    """

    @classmethod
    def from_conn_string(  # type: ignore[override]  # async, as LangGraph's async savers'
        cls, conn_string: str | Path, *, root: Path | str | None = None, **kwargs: Any
    ) -> AbstractAsyncContextManager[Self]:
        """``AlpstoreSaver.afrom_conn_string``: ``async with`` it."""
        return cls.afrom_conn_string(conn_string, root=root, **kwargs)


@contextmanager
def _target(conn_string: str | Path, root: Path | str | None) -> Iterator[tuple[Path, str | None]]:
    """``(run root, database URL or None)`` named by a ``from_conn_string`` argument; for
    ``":memory:"`` a temporary run root, removed when the block ends.
    """
    from alpstore.errors import UsageError

    text = str(conn_string).strip()
    if not text:
        raise UsageError("AlpstoreSaver.from_conn_string: empty connection string")
    if text in MEMORY:
        with tempfile.TemporaryDirectory(prefix="alpstore-saver-") as tmp:
            yield Path(tmp), None
        return
    if "://" in text:
        yield Path(root if root is not None else Path.cwd()).expanduser(), text
        return
    yield Path(text).expanduser(), None
