"""Does a turn cost the same at turn 10 and turn 10,000? (issue 41; goal last ÷ first ≤ 1.25)

Run: ``python benchmarks/bench_turn_growth.py [--turns 1000 10000] [--rounds 3]``. Writes
``benchmarks/results/turn_growth.md``.

One generated coding-agent conversation (``benchmarks._util.conversation_turns``, seed 7) of
each length, ``Session.commit_turn`` every turn on an empty SQLite archive as shipped: the
dictionary trainer and the background packer on (``auto_train``, ``auto_pack``). Each call is
timed as the caller sees it (wall) and by the calling thread's CPU clock; the figure is the
median of the last 100 turns over the median of the first 100. In the same process, alternating
round by round, the archive as it was before issue 41: small blobs written loose with the
trained dictionary at zstd level 12 (``dict_level=12``), the level that made the turns after
the training (about turn 250) cost more than the ones before it. Both runs take the same
turns; the messages of a later turn of the conversation are somewhat larger, which a run with
training and packing off (the third row) shows.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from alpstore.store import Store
from benchmarks._util import conversation_turns, write_results

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "turn_growth.md"
GOAL = 1.25
WINDOW = 100

RUNS: dict[str, str] = {
    "shipped": "as shipped (trainer and packer on)",
    "level12": "before issue 41: loose small blobs at dictionary level 12",
    "quiet": "trainer and packer off (the workload's own growth)",
}


def one_run(turns: list[list[dict[str, Any]]], key: str, work: Path) -> dict[str, Any]:
    """Commit every turn into a fresh archive; the wall and thread-CPU time of each."""
    root = Path(tempfile.mkdtemp(dir=work))
    store = Store.open(root)
    archive: Any = store.archive
    if key == "level12":
        archive.dict_level = 12
    elif key == "quiet":
        archive.auto_train = False
        archive.auto_pack = False
    wall: list[float] = []
    cpu: list[float] = []
    try:
        session = store.create_session(name="growth")
        gc.collect()
        for turn in turns:
            began, began_cpu = time.perf_counter(), time.thread_time()
            session.commit_turn(turn, trigger="every_turn")
            cpu.append(time.thread_time() - began_cpu)
            wall.append(time.perf_counter() - began)
        packed = archive.wait_for_packing(0) is False
    finally:
        store.close()
    return {"wall": wall, "cpu": cpu, "packer_running": packed}


def ratio(times: list[float]) -> tuple[float, float, float]:
    """``(first-100 median ms, last-100 median ms, last ÷ first)``."""
    first = statistics.median(times[:WINDOW])
    last = statistics.median(times[-WINDOW:])
    return first * 1e3, last * 1e3, last / first


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    lines = [
        "# A turn's cost over a session (issue 41)",
        "",
        f"Command: `python benchmarks/bench_turn_growth.py --turns "
        f"{' '.join(map(str, args.turns))} --rounds {args.rounds}` ({os.cpu_count()} shared "
        f"cores, 1-minute load average {load:.1f} at the start). Native `commit_turn` of one "
        "generated conversation on an empty SQLite archive; median of the last "
        f"{WINDOW} turns over the median of the first {WINDOW}, wall and the calling thread's "
        f"CPU, each round's runs alternating. Goal: ≤ {GOAL} with the trainer and packer on.",
        "",
        "| turns | run | round | first 100 ms | last 100 ms | last ÷ first (wall) | "
        "last ÷ first (CPU) |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    verdicts = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for n in args.turns:
            turns = conversation_turns(n)
            found: dict[str, list[tuple[float, float]]] = {k: [] for k in RUNS}
            for r in range(args.rounds):
                keys = list(RUNS)
                keys = keys[r % len(keys) :] + keys[: r % len(keys)]  # who goes first rotates
                for key in keys:
                    result = one_run(turns, key, work)
                    f, la, w = ratio(result["wall"])
                    c = ratio(result["cpu"])[2]
                    found[key].append((w, c))
                    lines.append(
                        f"| {n:,} | {RUNS[key]} | {r + 1} | {f:.3f} | {la:.3f} | {w:.2f} | "
                        f"{c:.2f} |"
                    )
                    print(lines[-1], flush=True)
            for key in RUNS:
                w = statistics.median(x[0] for x in found[key])
                c = statistics.median(x[1] for x in found[key])
                verdict = ""
                if key == "shipped":
                    verdict = " (meets)" if w <= GOAL else " (misses)"
                verdicts.append(
                    f"- {n:,} turns, {RUNS[key]}: last ÷ first median of the rounds "
                    f"**{w:.2f}** wall, {c:.2f} CPU{verdict}."
                )
    lines += ["", *verdicts, ""]
    text = "\n".join(lines)
    print("\n".join(verdicts))
    write_results(RESULTS, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
