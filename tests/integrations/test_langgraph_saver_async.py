"""AlpstoreSaver's async methods: they never block the event loop (the database work runs in the
saver's worker thread), and the conformance suite passes driven through the sync and the async
methods.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.graph", reason="langgraph is not installed (alpstore[langgraph])")
conformance = pytest.importorskip(
    "langgraph.checkpoint.conformance",
    reason="langgraph-checkpoint-conformance is not installed (alpstore[dev])",
)

from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.checkpoint.conformance.capabilities import (  # noqa: E402
    BASE_CAPABILITIES,
    EXTENDED_CAPABILITIES,
)

from alpstore.integrations.langgraph import AlpstoreSaver  # noqa: E402
from alpstore.store import Store  # noqa: E402


class SyncDriven(AlpstoreSaver):
    """The saver with its ``a*`` methods calling the sync ones inline, so the conformance suite
    (which speaks only async) exercises the sync methods.
    """

    async def _off_loop(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_conformance_suite_through_the_sync_and_the_async_methods(
    tmp_path: Path, kind: str
) -> None:
    roots = iter(range(100))
    cls = AlpstoreSaver if kind == "async" else SyncDriven

    @conformance.checkpointer_test(name=f"AlpstoreSaver ({kind})")
    async def factory() -> AsyncIterator[AlpstoreSaver]:
        saver = cls(Store.open(tmp_path / f"run-{next(roots)}"), owns_store=True)
        yield saver
        await saver.__aexit__()

    report = asyncio.run(conformance.validate(factory))
    for cap in BASE_CAPABILITIES | EXTENDED_CAPABILITIES:
        result = report.results[cap.value]
        assert result.detected, f"{cap.value} not detected"
        assert result.passed is True, f"{cap.value}: {result.failures}"


# ---------------------------------------------------------------- the event loop
HOLD_S = 0.6
MAX_STALL_S = 0.05


def config(thread: str, checkpoint_id: str | None = None) -> Any:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def checkpoint_with(messages: Sequence[Any], version: int) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": list(messages)}
    cp["channel_versions"] = {"messages": version}
    return cp


def hold_the_database(root: Path, holding: threading.Event, release_after: float) -> None:
    """Another connection takes the write lock (SQLite) / the tables' locks (PostgreSQL)."""
    with Store.open(root) as other, other.db.atomic() as conn:
        other.db.exclude_writers(conn)
        holding.set()
        time.sleep(release_after)


def test_async_methods_never_block_the_loop_while_the_database_is_slow(run_root: Path) -> None:
    saver = AlpstoreSaver.open(run_root)
    first = [HumanMessage(content="hello", id="u1")]
    stored = saver.put(config("slow"), checkpoint_with(first, 1), {"step": 0}, {"messages": 1})

    async def main() -> tuple[float, float]:
        holding = threading.Event()
        holder = threading.Thread(target=hold_the_database, args=(run_root, holding, HOLD_S))
        holder.start()
        await asyncio.get_running_loop().run_in_executor(None, holding.wait)
        stalls: list[float] = []
        stop = asyncio.Event()

        async def ticker() -> None:
            last = time.perf_counter()
            while not stop.is_set():
                await asyncio.sleep(0.005)
                now = time.perf_counter()
                stalls.append(now - last)
                last = now

        tick = asyncio.create_task(ticker())
        await asyncio.sleep(0.02)
        start = time.perf_counter()
        more = [*first, AIMessage(content="hi there", id="a1")]
        new = await saver.aput(stored, checkpoint_with(more, 2), {"step": 1}, {"messages": 2})
        await saver.aput_writes(new, [("messages", [AIMessage(content="x", id="a2")])], "task-1")
        took = time.perf_counter() - start
        got = await saver.aget_tuple(config("slow"))
        assert got is not None and [m.id for m in got.checkpoint["channel_values"]["messages"]] == [
            "u1",
            "a1",
        ]
        assert [c async for c in saver.alist(config("slow"))]
        stop.set()
        await tick
        await asyncio.get_running_loop().run_in_executor(None, holder.join)
        return took, max(stalls)

    try:
        took, worst = asyncio.run(main())
    finally:
        saver.close()
    assert took >= HOLD_S / 2, f"the database was not slow ({took:.3f} s): the test proves nothing"
    assert worst < MAX_STALL_S, f"the event loop stalled {worst * 1000:.0f} ms"
