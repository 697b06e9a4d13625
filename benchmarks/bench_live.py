"""Live backtrack (issue 15, AR-5): from ``backtrack(1)`` to the next model call's context in
hand, against ``copy.deepcopy`` of the same message list and a cold ``hydrate``, in one run.

Run: python -m pytest benchmarks/bench_live.py --benchmark-only -p no:randomly
     (``scripts/bench`` runs it with the others). The table goes to benchmarks/results/live.md.

What is timed, at 100 / 1,000 / 10,000 messages (four-message turns, one in-process checkpoint
per turn: a ``LiveSession`` opened with ``mode: in_memory``):

- live: ``live.backtrack(1)`` — the alpstore call: finds the target checkpoint, retargets the
  head copy-on-write, queues the persistence — then ``.context``, its length and its last
  message: the message list for the next model call, in hand. (A steering message adds one
  O(1) append.)
  Each round's setup (untimed) commits one more turn, which also persists the previous round's
  backtrack in the archive (the next write carries it).
- ``to_list``: the same context materialised as a plain ``list`` (what a client that insists on a
  ``list`` pays: a pointer copy, O(n)).
- deepcopy: ``copy.deepcopy`` of the message list (what a runtime without copy-on-write does).
- cold hydrate: ``store.hydrate_view`` of the target's archive view, as model messages (what a
  backtrack costs when the context is not held in process).
"""

from __future__ import annotations

import copy
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from alpstore.live import LiveSession, model_message
from alpstore.store import Store
from benchmarks._util import four_message_turns

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "live.md"
LENGTHS = (100, 1_000, 10_000)
ROUNDS = 200
AGENT = {
    "kind": "Agent",
    "metadata": {"name": "bench"},
    "spec": {"checkpoint": {"mode": "in_memory"}},
}

_medians: dict[tuple[str, int], float] = {}


class Bench:
    """A store, a live session at ``length`` messages, and the turns to continue with."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.dir = Path(tempfile.mkdtemp(prefix="alpstore-live-"))
        self.store = Store.open(self.dir / "run")
        self.live: LiveSession = self.store.open_session(manifest=AGENT, cwd=self.dir)
        self.work = four_message_turns(length // 4 + 10 * ROUNDS)
        for _ in range(length // 4):
            self.live.commit_turn(next(self.work))
        assert len(self.live.context) == length
        self.messages = self.live.context.to_list()  # the list the baselines copy and read
        self.target = self.live.marks[-2].view  # what backtrack(1) returns to

    def close(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module", params=LENGTHS, ids=str)
def bench(request: pytest.FixtureRequest) -> Iterator[Bench]:
    b = Bench(request.param)
    yield b
    b.close()


def _record(benchmark: Any, what: str, length: int) -> None:
    benchmark.extra_info.update(history_messages=length)
    _medians[(what, length)] = float(benchmark.stats.stats.median)


@pytest.mark.benchmark(group="live-backtrack")
def test_live_backtrack(benchmark: Any, bench: Bench) -> None:
    live = bench.live

    def setup() -> None:
        live.commit_turn(next(bench.work))  # persists the previous backtrack, adds a checkpoint

    def backtrack() -> Any:
        context = live.backtrack(1).context
        return len(context), context[-1]

    length, last = benchmark.pedantic(backtrack, setup=setup, rounds=ROUNDS, iterations=1)
    assert length == bench.length and last == bench.messages[-1]
    live.flush()
    history = live.session.history()
    assert [model_message(e) for e in history] == live.context.to_list()
    _record(benchmark, "live", bench.length)


@pytest.mark.benchmark(group="live-backtrack")
def test_live_context_to_list(benchmark: Any, bench: Bench) -> None:
    context = bench.live.context
    assert len(context) == bench.length
    benchmark.pedantic(context.to_list, rounds=50, iterations=1)
    _record(benchmark, "to_list", bench.length)


@pytest.mark.benchmark(group="live-backtrack")
def test_live_deepcopy_baseline(benchmark: Any, bench: Bench) -> None:
    messages = bench.messages
    rounds = 5 if len(messages) > 1000 else 30
    benchmark.pedantic(lambda: copy.deepcopy(messages), rounds=rounds, iterations=1)
    _record(benchmark, "deepcopy", bench.length)


@pytest.mark.benchmark(group="live-backtrack")
def test_live_cold_hydrate_baseline(benchmark: Any, bench: Bench) -> None:
    view = bench.target

    def hydrate() -> list[Any]:
        return [model_message(e) for e in bench.store.hydrate_view(view)]

    rounds = 5 if view.length > 1000 else 30
    messages = benchmark.pedantic(hydrate, rounds=rounds, iterations=1)
    assert len(messages) == view.length
    _record(benchmark, "hydrate", bench.length)
    if len(_medians) == 4 * len(LENGTHS):
        write_table()


def write_table() -> None:
    """results/live.md: the four measurements per history length, and the goals."""
    lines = [
        "# Live backtrack: `backtrack(1)` to the next context in hand (issue 15)",
        "",
        "A `LiveSession` (`Store.open_session`, `mode: in_memory`) at each history length; "
        "medians in µs. The backtrack is persisted by the next write (untimed here). "
        "Command: `python -m pytest benchmarks/bench_live.py --benchmark-only -p no:randomly`.",
        "",
        "| messages | live `backtrack(1)` + context (µs) | `to_list()` (µs) | `copy.deepcopy` "
        "(µs) | cold `hydrate` (µs) | deepcopy ÷ live | hydrate ÷ live |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in LENGTHS:
        live, lst = _medians[("live", n)] * 1e6, _medians[("to_list", n)] * 1e6
        deep, cold = _medians[("deepcopy", n)] * 1e6, _medians[("hydrate", n)] * 1e6
        lines.append(
            f"| {n:,} | {live:.1f} | {lst:.1f} | {deep:,.0f} | {cold:,.0f} | "
            f"{deep / live:,.0f}× | {cold / live:,.0f}× |"
        )
    big, small = _medians[("live", LENGTHS[-1])], _medians[("live", LENGTHS[0])]
    deep = _medians[("deepcopy", LENGTHS[-1])]
    lines += [
        "",
        f"Goals at 10,000 messages: ≥ 1,000× faster than deepcopy — **{deep / big:,.0f}×**; "
        f"≤ 1 ms — **{big * 1e6:.1f} µs**; flat, 10,000 ÷ 100 ≤ 1.5 — **{big / small:.2f}**.",
        "",
    ]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(lines), encoding="utf-8")
