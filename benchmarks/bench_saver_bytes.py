"""AlpstoreSaver's bytes (issue 42): bench_langgraph's tool loop (every step checkpointed)
through ``AlpstoreSaver``, measured while the saver is open, as bench_langgraph measures it.

SQLite: the archive file with its WAL folded in at each mark (a packing under way finished
first: while it writes a frame the WAL cannot be folded in), ÷ the raw conversation so far,
and at the last mark what each table and index holds (``dbstat``, bytes in use) and the rows
of the saver's tables. PostgreSQL (``--postgres``; $ALPSTORE_BENCH_POSTGRES_URL or
$ALPSTORE_TEST_POSTGRES_URL, a fresh schema dropped after): ``pg_total_relation_size`` summed
over the schema's tables (heap, TOAST, indexes, maps) after a plain ``VACUUM`` at each mark,
and the growth per raw byte between the first and the last mark (what each further byte of
conversation costs, the schema's fixed pages left out).

Goals (issue 42): SQLite ≤ 0.5× raw at 1,000 turns; PostgreSQL ≤ 0.7× growth per raw byte.

Run: ``python benchmarks/bench_saver_bytes.py [--turns 100,400,1000] [--postgres]
[--pg-turns 200,1000]``. Writes ``benchmarks/results/saver_bytes.md``.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
from collections import deque
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from langgraph.graph import MessagesState

from alpstore.integrations.langgraph import AlpstoreSaver
from benchmarks._util import checkpointed_bytes, write_results
from benchmarks.bench_langgraph import build, conversation, invoke_turns

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "saver_bytes.md"
SAVER_TABLES = (
    "lg_checkpoints",
    "lg_writes",
    "lg_write_items",
    "lg_turns",
    "lg_turn_blobs",
    "checkpoints",
    "blob_rows",
)


def _marks(text: str) -> list[int]:
    return sorted({int(x) for x in text.split(",") if x.strip()})


def tool_loop(
    saver: AlpstoreSaver, marks: list[int], measure: Any, each: Any = None
) -> dict[int, Any]:
    """Drive bench_langgraph's graph on ``saver`` to the last mark; ``measure(turn)`` at each
    mark (the saver open, as bench_langgraph measures), ``each(turn)`` after every turn when
    given. ``{mark: (raw bytes, measured, ms per turn over the last 50 turns)}``."""
    inputs, replies, raw = conversation(marks[-1])
    script: deque[Any] = deque()
    graph = build(saver, MessagesState, script)
    config = {"configurable": {"thread_id": "bench"}}
    times: list[float] = []
    out: dict[int, Any] = {}
    for turn in invoke_turns(graph, config, script, (inputs, replies), marks, times):
        if each is not None:
            each(turn)
        if turn in marks:
            tail = times[-50:]
            out[turn] = (raw[turn - 1], measure(turn), 1000 * sum(tail) / len(tail))
    return out


def sqlite_run(marks: list[int]) -> tuple[dict[int, Any], list[tuple[str, int]], dict[str, int]]:
    """Sizes at each mark, the last mark's ``dbstat`` by name, and the saver's row counts."""
    with tempfile.TemporaryDirectory() as tmp:
        saver = AlpstoreSaver.open(Path(tmp))
        path = Path(tmp) / "traces" / "archive" / "archive.db"
        parts: list[tuple[str, int]] = []
        rows: dict[str, int] = {}

        def measure(turn: int) -> int:
            # a frame being written holds a read open: the WAL (~8 MB at its autocheckpoint
            # size) would not fold in, and the file's size would count it
            saver.store.archive.wait_for_packing()
            saver._folder.wait()  # the turn folded before (issue 42, 0011), as closing would
            size = checkpointed_bytes(path)
            if turn == marks[-1]:
                con = sqlite3.connect(path)
                try:
                    parts.extend(
                        (str(n), int(b))
                        for n, b in con.execute(
                            "SELECT name, SUM(pgsize - unused) FROM dbstat GROUP BY name "
                            "ORDER BY 2 DESC"
                        )
                    )
                    for table in SAVER_TABLES:
                        rows[table] = int(
                            con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                        )
                finally:
                    con.close()
            return size

        try:
            sizes = tool_loop(saver, marks, measure)
        finally:
            saver.close()
    return sizes, parts, rows


PG_PARTS = (
    "SELECT c.relname, pg_relation_size(c.oid) + CASE WHEN c.reltoastrelid = 0 THEN 0 "
    "ELSE pg_total_relation_size(c.reltoastrelid) END FROM pg_class c "
    "WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'i') "
    "ORDER BY 2 DESC"
)
"""Each table (heap + TOAST) and index of the schema, by its bytes."""


SCHEMA_TABLES = (
    "SELECT c.relname FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace "
    "AND c.relkind = 'r' ORDER BY 1"
)


def postgres_run(
    marks: list[int], parts: list[tuple[str, int]], vacuum_every: int = 0
) -> dict[int, Any]:
    """Schema bytes (``pg_total_relation_size`` after ``VACUUM``) at each mark; the last
    mark's bytes by relation into ``parts``. ``vacuum_every``: a plain ``VACUUM`` of the
    schema's tables every that many turns too, standing in for autovacuum (a server's
    default: it vacuums a table once 50 + 20 % of its rows are dead, checking every minute,
    which at an agent's pace of seconds a turn is every few dozen turns); 0: only at the marks.
    """
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from alpstore.testing.postgres import fresh_schema

    base = os.environ.get("ALPSTORE_BENCH_POSTGRES_URL") or os.environ.get(
        "ALPSTORE_TEST_POSTGRES_URL"
    )
    if not base:
        raise SystemExit("no PostgreSQL: set ALPSTORE_BENCH_POSTGRES_URL")
    admin = create_engine(base, poolclass=NullPool)
    try:
        with tempfile.TemporaryDirectory() as tmp, fresh_schema(admin, base, "bench_sb_") as url:
            probe = create_engine(url, poolclass=NullPool).execution_options(
                isolation_level="AUTOCOMMIT"
            )

            def measure(turn: int) -> int:
                saver._folder.wait()  # the turn folded before (0011), as closing would
                with probe.connect() as conn:
                    conn.exec_driver_sql("VACUUM")
                    if turn == marks[-1]:
                        parts.extend(
                            (str(n), int(b)) for n, b in conn.exec_driver_sql(PG_PARTS).fetchall()
                        )
                    return int(
                        conn.exec_driver_sql(
                            "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) "
                            "FROM pg_class c WHERE c.relnamespace = "
                            "current_schema()::regnamespace AND c.relkind IN ('r', 'p')"
                        ).scalar_one()
                    )

            def autovacuum(turn: int) -> None:
                if vacuum_every and turn % vacuum_every == 0 and turn not in marks:
                    with probe.connect() as conn:
                        names = [r[0] for r in conn.exec_driver_sql(SCHEMA_TABLES).fetchall()]
                        conn.exec_driver_sql("VACUUM " + ", ".join(names))

            saver = AlpstoreSaver.open(Path(tmp), url=url)
            try:
                return tool_loop(saver, marks, measure, autovacuum)
            finally:
                saver.close()
                probe.dispose()
    finally:
        admin.dispose()


def run_all(turns: list[int], pg_turns: list[int] | None, vacuum_every: int = 0) -> str:
    lines = [
        "Command: `python benchmarks/bench_saver_bytes.py --turns "
        + ",".join(map(str, turns))
        + (" --postgres --pg-turns " + ",".join(map(str, pg_turns)) if pg_turns else "")
        + (f" --vacuum-every {vacuum_every}" if pg_turns and vacuum_every else "")
        + f"` (load average {os.getloadavg()[0]:.1f} at the start)",
        "",
        "| AlpstoreSaver, SQLite | raw | archive | × raw | ms / turn (last 50) |",
        "|---|---:|---:|---:|---:|",
    ]
    sizes, parts, rows = sqlite_run(turns)
    for turn, (raw, size, ms) in sizes.items():
        lines.append(
            f"| {turn:,} turns | {raw / 1e6:.2f} MB | {size / 1e6:.2f} MB | "
            f"**{size / raw:.3f}×** | {ms:.1f} |"
        )
    raw = sizes[turns[-1]][0]
    lines += ["", f"At {turns[-1]:,} turns (dbstat, bytes in use ÷ raw):", ""]
    lines += ["| relation | × raw |", "|---|---:|"]
    lines += [f"| {name} | {size / raw:.3f} |" for name, size in parts if size / raw >= 0.001]
    lines += ["", "Rows: " + ", ".join(f"{t} {n:,}" for t, n in rows.items())]
    if pg_turns:
        pg_parts: list[tuple[str, int]] = []
        pg = postgres_run(pg_turns, pg_parts, vacuum_every)
        first, last = pg[pg_turns[0]], pg[pg_turns[-1]]
        grew = (last[1] - first[1]) / (last[0] - first[0])
        lines += [
            "",
            "| AlpstoreSaver, PostgreSQL | raw | schema bytes | × raw | ms / turn (last 50) |",
            "|---|---:|---:|---:|---:|",
        ]
        for turn, (raw, size, ms) in pg.items():
            lines.append(
                f"| {turn:,} turns | {raw / 1e6:.2f} MB | {size / 1e6:.2f} MB | "
                f"{size / raw:.3f}× | {ms:.1f} |"
            )
        lines += [
            "",
            f"PostgreSQL growth per raw byte, {pg_turns[0]:,} → {pg_turns[-1]:,} turns: "
            f"**{grew:.3f}×** ("
            + (
                f"a plain `VACUUM` every {vacuum_every} turns, standing in for autovacuum"
                if vacuum_every
                else "`VACUUM` at the marks only"
            )
            + ")",
            "",
            f"At {pg_turns[-1]:,} turns, by relation (heap + TOAST, or index) ÷ raw:",
            "",
            "| relation | × raw |",
            "|---|---:|",
        ]
        top = last[0]
        lines += [
            f"| {name} | {size / top:.3f} |" for name, size in pg_parts if size / top >= 0.005
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", default="100,400,1000", help="SQLite marks")
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument("--pg-turns", default="200,1000", help="PostgreSQL marks")
    parser.add_argument(
        "--vacuum-every",
        type=int,
        default=0,
        help="PostgreSQL: VACUUM the schema's tables every N turns (autovacuum's stand-in)",
    )
    args = parser.parse_args()
    text = run_all(
        _marks(args.turns),
        _marks(args.pg_turns) if args.postgres else None,
        args.vacuum_every,
    )
    write_results(RESULTS, text)
    print(text)


if __name__ == "__main__":
    main()
