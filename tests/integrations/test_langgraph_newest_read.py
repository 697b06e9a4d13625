"""The newest checkpoint of a thread is found by its key, whatever the thread's length.

``get_tuple`` without a checkpoint id (every ``invoke`` starts with one) reads the thread's
newest checkpoint, and on PostgreSQL names it twice more in the same round trip (its pending
writes, its value blobs). Written as a join sorted afterwards (``… JOIN checkpoints … ORDER BY
lc.checkpoint_id DESC LIMIT 1``), PostgreSQL read every checkpoint of the thread with its
``checkpoints`` row first: 6.8 ms and 6,961 buffers at 400 tool-loop turns (2,800 steps), three
times a ``get_tuple``, growing with the thread. Now it is one backward step of the
``(thread_ref, checkpoint_id)`` key (``_lgdb.NEWEST_OF_THREAD``): checked by the plan's work,
which must not grow from a short thread to a long one.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("langgraph.graph", reason="langgraph is not installed (alpstore[langgraph])")

from langgraph.checkpoint.base import empty_checkpoint

from alpstore.db import raw as rsql
from alpstore.integrations import _lgdb as lgdb
from alpstore.integrations import _lgfast as lgfast
from alpstore.integrations.langgraph import AlpstoreSaver
from tests.conftest import Backend


def _put_steps(saver: AlpstoreSaver, thread: str, steps: int) -> str:
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    last = ""
    for step in range(steps):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"count": step}
        checkpoint["channel_versions"] = {"count": step + 1}
        config = saver.put(
            config, checkpoint, {"source": "loop", "step": step}, {"count": step + 1}
        )
        last = checkpoint["id"]
    return last


def _work(saver: AlpstoreSaver, sql: str, params: list[Any]) -> int:
    """PostgreSQL: the buffers the statement touched; SQLite: the plan's full scans and
    sorts (each counted 1,000, a search through a key 1)."""
    with saver.store.db.read() as conn:
        if saver.store.db.is_postgresql:
            plan = rsql.fetchone(conn, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
            assert plan is not None
            doc = plan[0] if isinstance(plan[0], list) else json.loads(plan[0])
            top = doc[0]["Plan"]
            return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])
        rows = rsql.fetchall(conn, "EXPLAIN QUERY PLAN " + sql, params)
        details = [str(r[-1]) for r in rows]
        return sum(1000 if d.startswith("SCAN") or "TEMP B-TREE" in d else 1 for d in details)


@pytest.mark.parametrize("query", ["latest", "writes", "values"])
def test_the_newest_checkpoint_is_read_by_its_key_on_a_long_thread(
    backend: Backend, query: str
) -> None:
    with AlpstoreSaver.open(backend.root, url=backend.url) as saver:
        newest = {}
        for thread, steps in (("short", 3), ("long", 400)):
            newest[thread] = _put_steps(saver, thread, steps)
        work = {}
        for thread in ("short", "long"):
            if query == "latest":
                sql, params = lgdb.latest_query(thread, "", None)
            else:
                template = lgfast._WRITES_WITH_BLOBS if query == "writes" else lgfast._VALUE_BLOBS
                sql = template.format(checkpoint=lgfast._NEWEST)
                params = [thread, "", thread, ""]
            work[thread] = _work(saver, sql, params)
        # and it is the newest one
        with saver.store.db.read() as conn:
            found = lgdb.find_latest(conn, "long", "", None)
        assert found is not None and found[1].checkpoint_id == newest["long"]
    # a few pages more for a deeper key; the sorted join read ~2.5 pages a step (~1,000 here)
    assert work["long"] <= work["short"] + 8, work
