"""Bytes and time per turn against turns, for alpstore and LangGraph's SqliteSaver, on the same
generated conversation with a checkpoint every turn (issue 3's side-by-side). Writes
``benchmarks/results/curves.json`` for ``benchmarks/report.py`` (table and PNG plot).

alpstore is measured natively (``Session.commit_turn``: the turn's messages appended and a
checkpoint written, one transaction) and through its LangGraph saver; LangGraph with its plain
``SqliteSaver`` (up to ``ALPSTORE_BENCH_PLAIN_MAX`` turns, default 400: it is quadratic) and with
``DeltaChannel``. ``ALPSTORE_BENCH_CURVE_LANGGRAPH=0`` measures alpstore only and keeps the
LangGraph curves of an earlier run.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from alpstore.db import sqlite_path_for_root
from alpstore.samples import generate
from alpstore.store import Store
from benchmarks._util import checkpointed_bytes, turns_of

OUT = Path(__file__).parent / "results" / "curves.json"
MARKS = (100, 400, 1000)
STEP = 50
WINDOW = 10


def _marks() -> list[int]:
    raw = os.environ.get("ALPSTORE_BENCH_CURVE_TURNS", "1000")
    top = int(raw)
    return sorted({m for m in MARKS if m <= top} | {top})


def native_curve(top: int) -> dict[str, Any]:
    turns = turns_of(list(generate(top)))
    raw_total = 0
    points = []
    times: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        store = Store.open(root)
        session = store.create_session(name="curve")
        for n, turn in enumerate(turns, 1):
            raw_total += sum(len(json.dumps(m, ensure_ascii=False).encode()) + 1 for m in turn)
            start = time.perf_counter()
            session.commit_turn(turn)
            times.append(time.perf_counter() - start)
            if n % STEP == 0 or n in MARKS or n == len(turns):
                load_start = time.perf_counter()
                store.hydrate(store.resolve_checkpoint(f"{session.uuid}@latest"))
                load = time.perf_counter() - load_start
                points.append(
                    {
                        "turn": n,
                        "raw": raw_total,
                        "bytes": checkpointed_bytes(sqlite_path_for_root(root)),
                        "ms_per_turn": 1000 * statistics.mean(times[-WINDOW:]),
                        "load_ms": 1000 * load,
                    }
                )
        store.close()
    return {"name": "alpstore (native commit_turn)", "points": points}


def langgraph_curves(top: int) -> list[dict[str, Any]]:
    lg = pytest.importorskip("benchmarks.bench_langgraph")
    from langgraph.graph import MessagesState

    inputs, replies, raw = lg.conversation(top)
    plain_max = int(os.environ.get("ALPSTORE_BENCH_PLAIN_MAX", "400"))
    variants = [("LangGraph SqliteSaver", lg.sqlite_variant, MessagesState, min(top, plain_max))]
    if lg.DeltaChannel is not None:
        variants.append(
            ("LangGraph SqliteSaver + DeltaChannel", lg.sqlite_variant, lg.DeltaState, top)
        )
    variants.append(("alpstore AlpstoreSaver (LangGraph)", lg.alpstore_variant, MessagesState, top))
    curves = []
    for name, make, schema, last in variants:
        points = []
        with tempfile.TemporaryDirectory() as tmp:
            saver, path = make(Path(tmp))
            script: deque[Any] = deque()
            graph = lg.build(saver, schema, script)
            config = {"configurable": {"thread_id": "curve"}}
            times: list[float] = []
            for n in range(1, last + 1):
                script.extend(replies[n - 1])
                start = time.perf_counter()
                graph.invoke({"messages": inputs[n - 1]}, config)
                times.append(time.perf_counter() - start)
                if n % STEP == 0 or n in MARKS or n == last:
                    load_start = time.perf_counter()
                    graph.get_state(config)
                    load = time.perf_counter() - load_start
                    points.append(
                        {
                            "turn": n,
                            "raw": raw[n - 1],
                            "bytes": checkpointed_bytes(path),
                            "ms_per_turn": 1000 * statistics.mean(times[-WINDOW:]),
                            "load_ms": 1000 * load,
                        }
                    )
            if hasattr(saver, "close"):
                saver.close()
        curves.append({"name": name, "points": points})
    return curves


def test_curves(benchmark: Any) -> None:
    top = _marks()[-1]

    def run() -> list[dict[str, Any]]:
        curves = [native_curve(top)]
        if os.environ.get("ALPSTORE_BENCH_CURVE_LANGGRAPH", "1") != "0":
            with contextlib.suppress(pytest.skip.Exception):
                curves.extend(langgraph_curves(top))
        return curves

    curves = benchmark.pedantic(run, rounds=1, iterations=1)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    if OUT.exists():  # keep the curves this run did not measure (e.g. LangGraph skipped)
        fresh = {c["name"] for c in curves}
        old = json.loads(OUT.read_text()).get("curves", [])
        curves = curves + [c for c in old if c["name"] not in fresh]
    OUT.write_text(json.dumps({"marks": _marks(), "curves": curves}, indent=1))
