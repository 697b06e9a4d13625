"""Start-up time of the installed ``alpstore`` command (issue 16; goal ≤ 250 ms).

Run: ``python benchmarks/bench_startup.py [--repeat 15]``, or collected by pytest with
``--benchmark-only``. Writes ``benchmarks/results/startup.md``.

Runs the ``alpstore`` executable on PATH (the installed console script, in a fresh process each
time) for ``--help``, ``--version`` and ``db info`` on an empty archive, interleaved with the
baseline of the same interpreter starting and exiting (``python -c pass``); medians of the
repeats, wall time from spawn to exit.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "startup.md"
GOAL_MS = 250


def timed(argv: list[str], cwd: str) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, check=False)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-300:]!r}")
    return 1000 * took


def run_all(repeat: int) -> str:
    exe = shutil.which("alpstore")
    if exe is None:
        raise SystemExit("the alpstore command is not on PATH (pip install -e . first)")
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as root:
        from alpstore.store import Store

        Store.open(Path(root)).close()  # an empty archive for `db info`
        cases = {
            "`python -c pass` (baseline: the interpreter alone)": [sys.executable, "-c", "pass"],
            "`alpstore --version`": [exe, "--version"],
            "`alpstore --help`": [exe, "--help"],
            "`alpstore db info` (empty archive)": [exe, "--root", root, "db", "info"],
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(repeat):  # interleaved: a busy spell hits every row alike
            for name, argv in cases.items():
                times[name].append(timed(argv, root))
    base = statistics.median(next(iter(times.values())))
    lines = [
        "# Start-up of the `alpstore` command (issue 16)",
        "",
        f"Command: `python benchmarks/bench_startup.py --repeat {repeat}` ({os.cpu_count()} "
        f"shared cores, 1-minute load average {load:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end). The installed console script, a new process "
        f"each time, medians of {repeat} interleaved runs; goal ≤ {GOAL_MS} ms.",
        "",
        "| command | median ms | min ms | over the bare interpreter |",
        "|---|---:|---:|---:|",
    ]
    for name, values in times.items():
        med = statistics.median(values)
        lines.append(f"| {name} | {med:.0f} | {min(values):.0f} | {med / base:.1f}× |")
    text = "\n".join(lines) + "\n"
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text, encoding="utf-8")
    return text


def test_cli_startup(benchmark: Any) -> None:
    text = benchmark.pedantic(run_all, args=(15,), rounds=1, iterations=1)
    print("\n" + text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)
    print(run_all(args.repeat))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
