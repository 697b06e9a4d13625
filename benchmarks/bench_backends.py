"""Many writer processes on one archive: checkpoints/s and per-checkpoint latency, SQLite and
PostgreSQL on the same machine, the same data, in one run.

Run: python benchmarks/bench_backends.py [--turns 200] [--writers 1,4,8]
     (PostgreSQL from $ALPSTORE_BENCH_POSTGRES_URL or $ALPSTORE_TEST_POSTGRES_URL; `bash .ci/run`
     shows how to start a local server). Also collected by pytest with --benchmark-only.

Each writer process opens the archive, warms up on a session of its own, waits at a barrier, then
commits TURNS turns of a generated coding-agent conversation (its own seed; the generator repeats
system prompts and tool outputs, so writers also share blobs), one checkpoint per turn
(``commit_turn``: the turn's messages, the head moved, a checkpoint row with a kernel blob).
Throughput is all checkpoints ÷ wall time from the barrier to the last writer's end; latency is
each ``commit_turn`` call as its writer saw it (waiting for the lock included). The table goes to
benchmarks/results/backends.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "backends.md"
WARMUP_TURNS = 5


# ------------------------------------------------------------------------------- worker process
def worker(root: str, url: str, index: int, turns: int, out: str, barrier: str) -> None:
    sys.path.insert(0, str(HERE))
    from _util import conversation_turns

    from alpstore.store import Store

    convo = conversation_turns(turns, seed=100 + index)[:turns]
    store = Store.open(Path(root), url=None if url == "-" else url)
    warm = store.create_session(name=f"warmup-{index}")
    for t, msgs in enumerate(conversation_turns(WARMUP_TURNS, seed=900 + index)):
        warm.commit_turn(msgs, kernel={"turn": t})
    session = store.create_session(name=f"writer-{index}")
    Path(barrier, f"ready-{index}").touch()
    while not Path(barrier, "go").exists():
        time.sleep(0.002)
    latencies = []
    started = time.perf_counter()
    for t, msgs in enumerate(convo):
        t0 = time.perf_counter()
        session.commit_turn(msgs, kernel={"turn": t, "plan": f"step {t % 9}"})
        latencies.append(time.perf_counter() - t0)
    ended = time.perf_counter()
    store.close()
    Path(out).write_text(
        json.dumps({"latencies": latencies, "started": started, "ended": ended, "n": len(convo)})
    )


# ------------------------------------------------------------------------------- orchestration
@contextmanager
def pg_schema(base: str) -> Iterator[str]:
    """A fresh schema on the benchmark server, dropped afterwards."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from alpstore.testing.postgres import fresh_schema

    engine = create_engine(base, poolclass=NullPool)
    try:
        with fresh_schema(engine, base, "bench_") as url:
            yield url
    finally:
        engine.dispose()


def run_config(root: Path, url: str | None, writers: int, turns: int) -> dict[str, Any]:
    """Run ``writers`` processes against a fresh archive; return throughput and latencies."""
    from alpstore.store import Store

    Store.open(root, url=url).close()  # schema created before the clock starts
    barrier = root / "barrier"
    barrier.mkdir()
    procs = []
    for i in range(writers):
        out = root / f"w{i}.json"
        cmd = [sys.executable, __file__, "--worker", str(root), url or "-", str(i), str(turns)]
        procs.append((subprocess.Popen([*cmd, str(out), str(barrier)]), out))
    while len(list(barrier.glob("ready-*"))) < writers:
        if any(p.poll() not in (None, 0) for p, _ in procs):
            raise SystemExit("a benchmark writer failed while warming up")
        time.sleep(0.01)
    go = time.perf_counter()
    (barrier / "go").touch()
    for proc, _ in procs:
        if proc.wait() != 0:
            raise SystemExit("a benchmark writer failed")
    docs = [json.loads(out.read_text()) for _, out in procs]
    wall = max(d["ended"] for d in docs) - go
    lat = sorted(x for d in docs for x in d["latencies"])
    total = sum(d["n"] for d in docs)

    def pct(p: float) -> float:
        return lat[min(len(lat) - 1, int(p / 100 * len(lat)))] * 1000

    return {
        "writers": writers,
        "checkpoints": total,
        "wall_s": wall,
        "per_s": total / wall,
        "p50_ms": pct(50),
        "p90_ms": pct(90),
        "p99_ms": pct(99),
        "max_ms": lat[-1] * 1000,
        "mean_ms": statistics.fmean(lat) * 1000,
    }


def run_all(turns: int, writer_counts: list[int], pg_url: str | None) -> list[dict[str, Any]]:
    """Every backend × writer count, each on a fresh archive, in one run."""
    rows = []
    backends: list[tuple[str, str | None]] = [("SQLite", None)]
    if pg_url:
        backends.append(("PostgreSQL", pg_url))
    for name, base in backends:
        for n in writer_counts:
            with tempfile.TemporaryDirectory(prefix="alpstore-bench-") as tmp:
                if base is None:
                    row = run_config(Path(tmp), None, n, turns)
                else:
                    with pg_schema(base) as url:
                        row = run_config(Path(tmp), url, n, turns)
            row["backend"] = name
            rows.append(row)
            print(
                f"{name:10} {n} writers: {row['per_s']:7.1f} checkpoints/s  "
                f"p50 {row['p50_ms']:.2f} ms  p99 {row['p99_ms']:.2f} ms",
                flush=True,
            )
    return rows


def table(rows: list[dict[str, Any]], turns: int, pg_version: str | None) -> str:
    """The markdown report: throughput, latency percentiles and the 8÷1 scaling per backend."""
    lines = [
        "# Concurrent writers: SQLite vs PostgreSQL",
        "",
        f"Command: `python benchmarks/bench_backends.py --turns {turns}` "
        f"({os.cpu_count()} CPUs, {platform.python_implementation()} "
        f"{platform.python_version()}, {pg_version or 'no PostgreSQL'}; SQLite in WAL mode on "
        "the same disk; the server on the same machine over TCP 127.0.0.1).",
        "",
        f"Each writer process commits {turns} turns of its own generated coding-agent "
        "conversation with a checkpoint every turn (`commit_turn`); distinct sessions, shared "
        "blobs. Throughput counts every checkpoint of every writer over the wall time from a "
        "common start barrier to the last writer's end; latency is each `commit_turn` call as "
        "its writer saw it, waiting for locks included.",
        "",
        "| backend | writers | checkpoints | wall s | checkpoints/s | p50 ms | p90 ms | p99 ms "
        "| max ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['backend']} | {r['writers']} | {r['checkpoints']} | {r['wall_s']:.2f} "
            f"| {r['per_s']:.1f} | {r['p50_ms']:.2f} | {r['p90_ms']:.2f} | {r['p99_ms']:.2f} "
            f"| {r['max_ms']:.1f} |"
        )
    lines += ["", "| backend | scaling 4 ÷ 1 writers | scaling 8 ÷ 1 writers |", "|---|---:|---:|"]
    for name in dict.fromkeys(r["backend"] for r in rows):
        by = {r["writers"]: r["per_s"] for r in rows if r["backend"] == name}
        four = f"{by[4] / by[1]:.2f}×" if 1 in by and 4 in by else "–"
        eight = f"{by[8] / by[1]:.2f}×" if 1 in by and 8 in by else "–"
        lines.append(f"| {name} | {four} | {eight} |")
    return "\n".join(lines) + "\n"


def pg_server_version(url: str | None) -> str | None:
    if not url:
        return None
    from sqlalchemy import create_engine

    engine = create_engine(url)
    with engine.connect() as conn:
        version = str(conn.exec_driver_sql("SHOW server_version").scalar_one()).split()[0]
    engine.dispose()
    return f"PostgreSQL {version}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200, help="turns per writer")
    parser.add_argument("--writers", default="1,4,8", help="writer counts, comma-separated")
    parser.add_argument("--out", type=Path, default=RESULTS, help="markdown table to write")
    parser.add_argument("--worker", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        root, url, index, turns, out, barrier = args.worker
        worker(root, url, int(index), int(turns), out, barrier)
        return 0
    pg_url = os.environ.get("ALPSTORE_BENCH_POSTGRES_URL") or os.environ.get(
        "ALPSTORE_TEST_POSTGRES_URL"
    )
    counts = [int(x) for x in args.writers.split(",")]
    rows = run_all(args.turns, counts, pg_url)
    report = table(rows, args.turns, pg_server_version(pg_url))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    print(report)
    return 0


def test_backends_throughput(benchmark: Any) -> None:
    """pytest --benchmark-only entry: one round of the whole comparison (short run)."""
    pg_url = os.environ.get("ALPSTORE_BENCH_POSTGRES_URL") or os.environ.get(
        "ALPSTORE_TEST_POSTGRES_URL"
    )
    rows = benchmark.pedantic(run_all, args=(100, [1, 4, 8], pg_url), rounds=1, iterations=1)
    benchmark.extra_info["rows"] = rows
    print(table(rows, 100, pg_server_version(pg_url)))


if __name__ == "__main__":
    sys.exit(main())
