"""Bytes of a native archive at 1,000 turns, and what dictionary recompression leaves on
PostgreSQL (issue 16; goals: ≤ 0.45× raw on SQLite; no dead tuples left by the recompression).

Run: ``python benchmarks/bench_bytes.py [--turns 1000] [--postgres]`` (PostgreSQL from
$ALPSTORE_BENCH_POSTGRES_URL or $ALPSTORE_TEST_POSTGRES_URL, a fresh schema dropped afterwards),
or collected by pytest with ``--benchmark-only`` (SQLite). Writes ``benchmarks/results/bytes.md``.

The conversation and the measure are bench_curves.py's: ``alpstore.samples.generate``, one
``commit_turn`` a turn, raw = the messages as JSON lines; on SQLite the file with its WAL folded
in (checkpointed), with the bytes of each table and index from ``dbstat``. In the same process,
on the same turns, the previous setting (dictionary frames at zstd level 3) as the baseline.
On PostgreSQL: ``pg_total_relation_size`` of the schema's tables after the run (the connections
closed, so every backend has reported its statistics), the dead tuples of ``blobs`` then, and the
size after a plain ``VACUUM`` and after ``VACUUM FULL`` of the schema's tables.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from alpstore.db import sqlite_path_for_root
from alpstore.store import Store
from benchmarks._util import checkpointed_bytes, conversation_turns, write_results

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "bytes.md"
GOAL = 0.45
TABLES = ("blobs", "sqlite_autoindex_blobs_1", "zstd_dicts")


def raw_bytes(turns: list[list[dict[str, Any]]]) -> int:
    return sum(len(json.dumps(m, ensure_ascii=False).encode()) + 1 for t in turns for m in t)


def commit_all(
    store: Store,
    turns: list[list[dict[str, Any]]],
    dict_level: int | None,
    *,
    pause: bool = False,
) -> float:
    """Commit every turn; ``pause``: wait, untimed, for the training and the compaction after
    it as soon as the training starts (a writer that pauses between turns, as an agent waiting
    on its model does, gets the compaction then; one that never pauses, after its last turn)."""
    if dict_level is not None:
        store.archive.dict_level = dict_level
    session = store.create_session(name="bytes")
    times = []
    for turn in turns:
        start = time.perf_counter()
        session.commit_turn(turn)
        times.append(time.perf_counter() - start)
        if pause and store.archive.training:
            store.archive.wait_for_training()
    store.archive.wait_for_training()
    return statistics.median(times)


def sqlite_run(
    turns: list[list[dict[str, Any]]], dict_level: int | None, *, pause: bool = False
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(Path(tmp))
        try:
            took = commit_all(store, turns, dict_level, pause=pause)
        finally:
            store.close()
        path = sqlite_path_for_root(Path(tmp))
        size = checkpointed_bytes(path)
        con = sqlite3.connect(path)
        try:
            parts = dict(con.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"))
            payload = con.execute("SELECT SUM(LENGTH(payload)) FROM blobs").fetchone()[0]
        finally:
            con.close()
    return {"size": size, "parts": parts, "payload": payload, "ms_per_turn": took}


def postgres_url() -> str | None:
    return os.environ.get("ALPSTORE_BENCH_POSTGRES_URL") or os.environ.get(
        "ALPSTORE_TEST_POSTGRES_URL"
    )


VACUUM_TUPLES = re.compile(r"tuples: (\d+) removed, (\d+) remain, (\d+) are dead")


def postgres_run(turns: list[list[dict[str, Any]]], *, reclaim: bool) -> dict[str, Any]:
    """One run on a fresh schema; ``reclaim=False`` skips the trainer's VACUUM (the baseline)."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from alpstore.testing.postgres import fresh_schema

    base = postgres_url()
    if base is None:
        raise SystemExit("no PostgreSQL: set ALPSTORE_BENCH_POSTGRES_URL")
    admin = create_engine(base, poolclass=NullPool)
    try:
        with fresh_schema(admin, base, "bench_bytes_") as url, tempfile.TemporaryDirectory() as tmp:
            store = Store.open(Path(tmp), url=url)
            if not reclaim:
                store.archive._reclaim_space = lambda: None  # type: ignore[method-assign]
            try:
                took = commit_all(store, turns, None)
            finally:
                store.close()
            probe = create_engine(url, poolclass=NullPool).execution_options(
                isolation_level="AUTOCOMMIT"
            )
            try:
                with probe.connect() as conn:
                    notices: list[str] = []
                    conn.connection.driver_connection.add_notice_handler(  # type: ignore[union-attr]
                        lambda diag: notices.append(diag.message_primary or "")
                    )

                    def size(what: str) -> int:
                        return int(conn.exec_driver_sql(what).scalar_one())

                    schema = (
                        "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                        "WHERE c.relnamespace = current_schema()::regnamespace "
                        "AND c.relkind IN ('r', 'p', 'm')"
                    )
                    blobs = "SELECT pg_total_relation_size('blobs')"
                    out: dict[str, float] = {"size": size(schema), "blobs": size(blobs)}
                    conn.exec_driver_sql("VACUUM (VERBOSE) blobs")
                    removed = [VACUUM_TUPLES.search(n) for n in notices]
                    out["removed"] = sum(int(m.group(1)) for m in removed if m)
                    conn.exec_driver_sql("VACUUM")
                    out["vacuum"], out["vacuum_blobs"] = size(schema), size(blobs)
                    conn.exec_driver_sql("VACUUM FULL")
                    out["full"], out["full_blobs"] = size(schema), size(blobs)
            finally:
                probe.dispose()
    finally:
        admin.dispose()
    out["ms_per_turn"] = took
    return out


def run_all(n_turns: int, postgres: bool) -> str:
    turns = conversation_turns(n_turns)[:n_turns]
    raw = raw_bytes(turns)
    mb = 1e6
    lines = [
        "# Bytes at 1,000 turns (issue 16)",
        "",
        f"Command: `python benchmarks/bench_bytes.py --turns {n_turns}"
        f"{' --postgres' if postgres else ''}`. {len(turns):,} turns of the generated coding-agent "
        f"conversation (raw {raw / mb:.2f} MB as JSON lines), `commit_turn` each, as in "
        "bench_curves.py; SQLite = the file with its WAL folded in. Baseline in the same process: "
        f"dictionary frames at zstd level 3 (the previous setting). Goal: ≤ {GOAL}× raw.",
        "",
        "| SQLite | database | × raw | blobs table | digest index | blob payloads | "
        "ms / turn (median) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    shipped = None
    for label, level, pause in (
        ("dictionary frames at level 12 (as shipped), written without a pause", None, False),
        ("the same, written with a pause once the training starts", None, True),
        ("baseline: level 3, written without a pause", 3, False),
    ):
        r = sqlite_run(turns, level, pause=pause)
        shipped = shipped or r
        lines.append(
            f"| {label} | {r['size'] / mb:.3f} MB | **{r['size'] / raw:.3f}** | "
            f"{r['parts'].get('blobs', 0) / mb:.3f} MB | "
            f"{r['parts'].get('sqlite_autoindex_blobs_1', 0) / mb:.3f} MB | "
            f"{r['payload'] / mb:.3f} MB | {1000 * r['ms_per_turn']:.2f} |"
        )
    assert shipped is not None
    ratio = shipped["size"] / raw
    lines += [
        "",
        f"SQLite at {len(turns):,} turns: **{ratio:.3f}× raw** "
        f"({'meets' if ratio <= GOAL else 'misses'} the goal of ≤ {GOAL}×).",
    ]
    if postgres:
        lines += [
            "",
            "| PostgreSQL | schema after the run | dead row versions in `blobs` (a `VACUUM` "
            "then removes) | after `VACUUM` | after `VACUUM FULL` | `blobs` after the run / "
            "`VACUUM FULL` | ms / turn (median) |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for label, reclaim in (
            ("as shipped (the trainer VACUUMs `blobs` after recompressing)", True),
            ("baseline: recompression without that VACUUM (as before)", False),
        ):
            r = postgres_run(turns, reclaim=reclaim)
            lines.append(
                f"| {label} | {r['size'] / mb:.3f} MB ({r['size'] / raw:.2f}× raw) | "
                f"{r['removed']:,} | {r['vacuum'] / mb:.3f} MB | {r['full'] / mb:.3f} MB "
                f"({r['full'] / raw:.2f}× raw) | {r['blobs'] / mb:.3f} / "
                f"{r['full_blobs'] / mb:.3f} MB | {1000 * r['ms_per_turn']:.2f} |"
            )
        lines += [
            "",
            "Dead row versions: the `tuples: N removed` of `VACUUM (VERBOSE) blobs` run after "
            "the archive closed (heap and TOAST). Sizes are `pg_total_relation_size` summed over "
            "the schema's tables (heap, TOAST, indexes, free-space and visibility maps: a plain "
            "`VACUUM` adds the maps, so it can grow the total; `VACUUM FULL` rewrites compactly).",
        ]
    return "\n".join(lines) + "\n"


def test_bytes(benchmark: Any) -> None:
    text = benchmark.pedantic(run_all, args=(1000, False), rounds=1, iterations=1)
    write_results(RESULTS, text)
    print("\n" + text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--postgres", action="store_true", help="also measure on PostgreSQL")
    args = parser.parse_args(argv)
    text = run_all(args.turns, args.postgres)
    write_results(RESULTS, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
