"""AlpstoreSaver's time per turn ÷ LangGraph's ``InMemorySaver`` (default serializer), issue 32.

Run: ``python benchmarks/bench_saver_ratio.py [--turns 1000] [--pg-turns 400]`` (PostgreSQL from
$ALPSTORE_BENCH_POSTGRES_URL or $ALPSTORE_TEST_POSTGRES_URL; its row is skipped, with the
reason, without one). Also collected by pytest with ``--benchmark-only``
($ALPSTORE_BENCH_SAVER_TURNS, $ALPSTORE_BENCH_SAVER_PG_TURNS). Writes
``benchmarks/results/saver_ratio.md``.

The goal (issue 32): at 1,000 turns of the tool-loop benchmark (bench_langgraph's conversation
and graph: agent ⇄ tools, every step checkpointed), AlpstoreSaver's time per turn ≤ 0.5× that of
LangGraph's ``InMemorySaver`` with its default serializer (JsonPlus: it hands out fresh objects,
as AlpstoreSaver does — unlike the identity-serde floor of bench_saver.py, which shares them), on
SQLite and on PostgreSQL (400 turns there); the archive's bytes ≤ 1.0× the raw conversation's on
SQLite.

The two graphs run in one process, turn by turn in alternating order, so both see the same
machine load; each times the real ``graph.invoke`` (LangGraph's work plus the saver's). The
ratio is given two ways: over every turn (sum of AlpstoreSaver's turn times ÷ sum of
InMemorySaver's: the time per turn over the run) and at the last mark (median, over its last 50
turns, of the per-turn ratio).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

from benchmarks._util import checkpointed_bytes  # noqa: E402
from benchmarks.bench_langgraph import build, conversation  # noqa: E402
from benchmarks.bench_saver import alpstore_saver, postgres_url  # noqa: E402

RESULTS = HERE / "results" / "saver_ratio.md"
WINDOW = 50
GOAL_RATIO = 0.5
GOAL_BYTES = 1.0


def side_by_side(url: str | None, turns: int, data: Any) -> dict[str, Any]:
    """InMemorySaver (default serde) and AlpstoreSaver turn by turn; times, ratio, bytes."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import MessagesState

    inputs, replies, raw = data
    with alpstore_saver(url) as (saver, root):
        scripts: list[deque[Any]] = [deque(), deque()]
        graphs = [
            build(InMemorySaver(), MessagesState, scripts[0]),
            build(saver, MessagesState, scripts[1]),
        ]
        config = {"configurable": {"thread_id": "bench"}}
        took: list[list[float]] = [[], []]
        cpu: list[list[float]] = [[], []]
        for turn in range(1, turns + 1):
            for which in (0, 1) if turn % 2 else (1, 0):
                scripts[which].extend(replies[turn - 1])
                start, start_cpu = time.perf_counter(), time.process_time()
                graphs[which].invoke({"messages": inputs[turn - 1]}, config)
                took[which].append(time.perf_counter() - start)
                cpu[which].append(time.process_time() - start_cpu)
        states = [g.get_state(config).values["messages"] for g in graphs]
        assert len(states[0]) == len(states[1]), "the two graphs diverged"
        assert [m.content for m in states[0]] == [m.content for m in states[1]]
        archive = root / "traces" / "archive" / "archive.db"
        size = checkpointed_bytes(archive) if url is None else None
    lo = turns - WINDOW
    per_turn = [a / m for a, m in zip(took[1][lo:], took[0][lo:], strict=True)]
    return {
        "turns": turns,
        "messages": len(states[1]),
        "mem_ms": 1000 * sum(took[0]) / turns,
        "ours_ms": 1000 * sum(took[1]) / turns,
        "mem_cpu_ms": 1000 * sum(cpu[0]) / turns,
        "ours_cpu_ms": 1000 * sum(cpu[1]) / turns,
        "ratio": sum(took[1]) / sum(took[0]),
        "ratio_cpu": sum(cpu[1]) / sum(cpu[0]),
        "mem_last_ms": 1000 * statistics.median(took[0][lo:]),
        "ours_last_ms": 1000 * statistics.median(took[1][lo:]),
        "ratio_last": statistics.median(per_turn),
        "bytes": size,
        "raw": raw[turns - 1],
    }


def run_all(turns: int, pg_turns: int) -> str:
    load = os.getloadavg()[0]
    data = conversation(max(turns, pg_turns))
    results = {"SQLite": side_by_side(None, turns, data)} if turns else {}
    url = postgres_url()
    skipped = None
    if url and pg_turns:
        try:
            results["PostgreSQL"] = side_by_side(url, pg_turns, data)
        except Exception as err:  # no server: say so in the table
            skipped = f"PostgreSQL row not run: {str(err).splitlines()[0]}"
    elif not url:
        skipped = "PostgreSQL row not run: set ALPSTORE_BENCH_POSTGRES_URL"

    def verdict(ok: bool) -> str:
        return "met" if ok else "**not met**"

    lines = [
        "# AlpstoreSaver ÷ InMemorySaver (default serializer), time per turn (issue 32)",
        "",
        f"Command: `python benchmarks/bench_saver_ratio.py --turns {turns} --pg-turns "
        f"{pg_turns}` (1-minute load average {load:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end, {os.cpu_count()} shared cores). Both graphs in "
        "one process, turn by turn in alternating order; a turn is one `graph.invoke` of the "
        f"tool loop. Over the run: mean ms per turn (wall; process CPU). Last {WINDOW} turns: "
        "medians.",
        "",
        "| backend | turns | messages | InMemorySaver ms / turn | AlpstoreSaver ms / turn | "
        "ratio (wall) | ratio (CPU) | last 50: InMemorySaver / AlpstoreSaver ms | last 50 ratio "
        "| archive ÷ raw |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        size = "-" if r["bytes"] is None else f"{r['bytes'] / r['raw']:.2f} ({r['bytes']:,} B)"
        lines.append(
            f"| {name} | {r['turns']:,} | {r['messages']:,} | {r['mem_ms']:.1f} "
            f"({r['mem_cpu_ms']:.1f}) | {r['ours_ms']:.1f} ({r['ours_cpu_ms']:.1f}) | "
            f"**{r['ratio']:.2f}** | {r['ratio_cpu']:.2f} | {r['mem_last_ms']:.1f} / "
            f"{r['ours_last_ms']:.1f} | {r['ratio_last']:.2f} | {size} |"
        )
    goals = []
    for name, r in results.items():
        goals.append(
            f"{name} at {r['turns']:,} turns ratio ≤ {GOAL_RATIO} — {r['ratio']:.2f}, "
            f"{verdict(r['ratio'] <= GOAL_RATIO)}"
        )
    sq = results.get("SQLite")  # --turns 0: the PostgreSQL row alone
    if sq is not None:
        goals.append(
            f"SQLite bytes ≤ {GOAL_BYTES}× raw — {sq['bytes'] / sq['raw']:.2f}× "
            f"({sq['bytes'] / 1e6:.2f} MB for {sq['raw'] / 1e6:.2f} MB), "
            f"{verdict(sq['bytes'] <= GOAL_BYTES * sq['raw'])}"
        )
    lines += ["", "Goals (issue 32): " + "; ".join(goals) + "."]
    if skipped:
        lines += ["", skipped]
    text = "\n".join(lines) + "\n"
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text, encoding="utf-8")
    return text


def test_saver_vs_inmemory(benchmark: Any) -> None:
    turns = int(os.environ.get("ALPSTORE_BENCH_SAVER_TURNS", "1000"))
    pg_turns = int(os.environ.get("ALPSTORE_BENCH_SAVER_PG_TURNS", "400"))
    text = benchmark.pedantic(run_all, args=(turns, pg_turns), rounds=1, iterations=1)
    print("\n" + text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--pg-turns", type=int, default=400)
    args = parser.parse_args(argv)
    print(run_all(args.turns, args.pg_turns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
