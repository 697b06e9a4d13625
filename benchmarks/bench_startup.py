"""Start-up time of the installed ``alpstore`` command (issue 16; goal ≤ 250 ms).

Run: ``python benchmarks/bench_startup.py [--repeat 15]``, or collected by pytest with
``--benchmark-only``. Writes ``benchmarks/results/startup.md``.

Runs the ``alpstore`` executable on PATH (the installed console script, a fresh process each
time): ``--version``, ``--help``, every group's and command's ``--help``, the hook commands Claude
Code runs (``hook session-start``, ``hook compact-record`` with a payload on stdin), continuity
commands that need no database (``context render``, ``context status``), and, for contrast,
commands that open an archive (``db info``, ``session list`` on an empty archive: those need
SQLAlchemy). Interleaved with two baselines measured the same way: the bare interpreter
(``python -c pass``) and the CLI framework alone (``python -c "import typer"``). Medians of the
repeats, wall time from spawn to exit. Each command is also run once under ``python -X
importtime`` to say whether it imports SQLAlchemy.

The fast reading commands (issue 29: ``session list``, ``session log S``, ``session show S``,
``debug diff A B``; goal ≤ 200 ms) run on a 1,000-turn archive checkpointed every turn, beside a
third baseline on the same file: ``sqlite3 <archive> 'select count(*) from sessions'``. Their
medians are also given as ratios to ``python -c pass`` and to that ``sqlite3`` call.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._util import write_results

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "startup.md"
GOAL_MS = 250
READING_GOAL_MS = 200
TURNS = 1000
EXECUTION = "exec_bench"


class Case:
    """One measured command line: argv, stdin bytes, and whether it is a baseline."""

    def __init__(
        self, label: str, argv: list[str], stdin: bytes = b"", *, baseline: bool = False
    ) -> None:
        self.label = label
        self.argv = argv
        self.stdin = stdin
        self.baseline = baseline
        self.times: list[float] = []
        self.sqlalchemy: bool | None = None


def timed(case: Case, cwd: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        case.argv, cwd=cwd, input=case.stdin, capture_output=True, check=False, env=env
    )
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(case.argv)} exited {done.returncode}: {done.stderr[-300:]!r}"
        )
    return 1000 * took


def imports_sqlalchemy(case: Case, cwd: str, env: dict[str, str]) -> bool:
    """Run the console script under ``-X importtime``: does the command import SQLAlchemy?"""
    argv = [sys.executable, "-X", "importtime", *case.argv]
    done = subprocess.run(argv, cwd=cwd, input=case.stdin, capture_output=True, env=env)
    return re.search(rb"\|\s+sqlalchemy\n", done.stderr) is not None


def reading_cases(exe: str, big: str) -> list[Case]:
    """The fast reading commands on the 1,000-turn archive of run root ``big``, and sqlite3."""
    from alpstore.db import sqlite_path_for_root

    out = []
    sqlite3 = shutil.which("sqlite3")
    if sqlite3 is not None:
        out.append(
            Case(
                "`sqlite3 <archive> 'select count(*) from sessions'` (baseline: the archive "
                "file, the sqlite3 shell)",
                [sqlite3, str(sqlite_path_for_root(Path(big))), "select count(*) from sessions"],
                baseline=True,
            )
        )
    label = f"(reads the {TURNS:,}-turn archive)"
    run = [exe, "--root", big]
    out += [
        Case(f"`alpstore session list` {label}", [*run, "session", "list"]),
        Case(f"`alpstore session log S` {label}", [*run, "session", "log", "turns"]),
        Case(f"`alpstore session show S` {label}", [*run, "session", "show", "turns"]),
        Case(
            f"`alpstore debug diff A B` {label}",
            [*run, "debug", "diff", f"turns@{TURNS // 2}", "turns@latest"],
        ),
    ]
    return out


def build_archive(big: Path) -> None:
    """A run root whose archive holds one session of ``TURNS`` turns, checkpointed every turn."""
    from alpstore.store import Store
    from benchmarks._util import conversation_turns

    with Store.open(big) as st:
        s = st.create_session(session_id="turns", name="turns")
        for turn in conversation_turns(TURNS):
            s.commit_turn(turn)


def cases(exe: str, root: str) -> list[Case]:
    from alpstore.cli.main import COMMANDS, GROUPS

    out = [
        Case(
            "`python -c pass` (baseline: the interpreter)",
            [sys.executable, "-c", "pass"],
            baseline=True,
        ),
        Case(
            '`python -c "import typer"` (baseline: the CLI framework)',
            [sys.executable, "-c", "import typer"],
            baseline=True,
        ),
        Case(
            "Typer + a pydantic `TypeAdapter` (what Typer ≥ 0.29 does for every command that "
            "parses an option value; alpstore holds Typer below 0.29)",
            [sys.executable, "-c", "import typer, pydantic; pydantic.TypeAdapter(str)"],
            baseline=True,
        ),
        Case("`alpstore --version`", [exe, "--version"]),
        Case("`alpstore --help`", [exe, "--help"]),
    ]
    out += [Case(f"`alpstore {name} --help`", [exe, name, "--help"]) for name in GROUPS]
    out += [Case(f"`alpstore {name} --help`", [exe, name, "--help"]) for name in COMMANDS]
    out += [
        Case(
            "`alpstore hook session-start` (payload on stdin)",
            [exe, "hook", "session-start"],
            json.dumps({"source": "compact", "session_id": "s1"}).encode(),
        ),
        Case(
            "`alpstore hook compact-record pre` (payload on stdin)",
            [exe, "hook", "compact-record", "pre", "--runtime", "claude"],
            json.dumps({"trigger": "auto", "session_id": "s1"}).encode(),
        ),
        Case("`alpstore context render`", [exe, "context", "render", EXECUTION]),
        Case("`alpstore context status`", [exe, "context", "status", EXECUTION]),
        Case("`alpstore db info` (opens the archive)", [exe, "--root", root, "db", "info"]),
        Case(
            "`alpstore session list` (opens the archive)", [exe, "--root", root, "session", "list"]
        ),
    ]
    return out


def run_all(repeat: int) -> str:
    exe = shutil.which("alpstore")
    if exe is None:
        raise SystemExit("the alpstore command is not on PATH (pip install -e . first)")
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as root:
        from alpstore.store import Store

        Store.open(Path(root)).close()  # an empty archive for `db info` and `session list`
        env = {
            **os.environ,
            "ALP_HOME": str(Path(root) / "alp"),
            "ALP_EXECUTION_ID": EXECUTION,
            "COLUMNS": "100",
        }
        env.pop("ALPSTORE_DATABASE_URL", None)
        subprocess.run(  # a continuity checkpoint for the hook and context commands to read
            [exe, "context", "pin", "decision", "--", "Use WAL mode"],
            cwd=root,
            env=env,
            check=True,
            capture_output=True,
        )
        big = Path(root) / "big"
        build_archive(big)
        measured = cases(exe, root) + reading_cases(exe, str(big))
        for case in measured:
            if not case.baseline:
                case.sqlalchemy = imports_sqlalchemy(case, root, env)
        for _ in range(repeat):  # interleaved: a busy spell hits every row alike
            for case in measured:
                case.times.append(timed(case, root, env))
    base = statistics.median(measured[0].times)
    lines = [
        "# Start-up of the `alpstore` command (issue 16)",
        "",
        f"Command: `python benchmarks/bench_startup.py --repeat {repeat}` ({os.cpu_count()} "
        f"shared cores, 1-minute load average {load:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end). The installed console script, a new process "
        f"each time, medians of {repeat} interleaved runs; goal ≤ {GOAL_MS} ms for help, "
        "version, hook and continuity commands (commands that open an archive need SQLAlchemy "
        "and are shown for contrast).",
        "",
        "| command | median ms | min ms | × the bare interpreter | ≤ 250 ms (median) | "
        "imports SQLAlchemy |",
        "|---|---:|---:|---:|:---:|:---:|",
    ]
    reading = [c for c in measured if "-turn archive)" in c.label and not c.baseline]
    goal_rows = [
        c
        for c in measured
        if not c.baseline and "opens the archive" not in c.label and c not in reading
    ]
    met = sum(statistics.median(c.times) <= GOAL_MS for c in goal_rows)
    typer_ms = statistics.median(measured[1].times)
    pydantic_ms = statistics.median(measured[2].times)
    for case in measured:
        med = statistics.median(case.times)
        goal = "" if case.baseline or case in reading else ("yes" if med <= GOAL_MS else "**no**")
        sqla = "" if case.sqlalchemy is None else ("yes" if case.sqlalchemy else "no")
        lines.append(
            f"| {case.label} | {med:.0f} | {min(case.times):.0f} | {med / base:.1f}× | {goal} "
            f"| {sqla} |"
        )
    lines += [
        "",
        f"{met} of {len(goal_rows)} help, version, hook and continuity commands start in "
        f"≤ {GOAL_MS} ms (median) in this run; none of them imports SQLAlchemy. The floor under "
        f"every one is the interpreter ({base:.0f} ms) plus Typer ({typer_ms - base:.0f} ms more); "
        f"Typer 0.29 would add pydantic to every command that parses an option value "
        f"({pydantic_ms - typer_ms:.0f} ms more), hence the pin `typer<0.29`.",
    ]
    sqlite_rows = [c for c in measured if c.baseline and c.label.startswith("`sqlite3")]
    if reading:
        lines += [
            "",
            f"The fast reading commands on a {TURNS:,}-turn archive (issue 29; goal ≤ "
            f"{READING_GOAL_MS} ms median, no SQLAlchemy):",
            "",
            "| command | median ms | × `python -c pass` | × `sqlite3` | "
            f"≤ {READING_GOAL_MS} ms | imports SQLAlchemy |",
            "|---|---:|---:|---:|:---:|:---:|",
        ]
        lite = statistics.median(sqlite_rows[0].times) if sqlite_rows else None
        for case in reading:
            med = statistics.median(case.times)
            vs_lite = f"{med / lite:.0f}×" if lite else "-"
            lines.append(
                f"| {case.label} | {med:.0f} | {med / base:.1f}× | {vs_lite} | "
                f"{'yes' if med <= READING_GOAL_MS else '**no**'} | "
                f"{'yes' if case.sqlalchemy else 'no'} |"
            )
    return "\n".join(lines) + "\n"


def test_cli_startup(benchmark: Any) -> None:
    text = benchmark.pedantic(run_all, args=(15,), rounds=1, iterations=1)
    write_results(RESULTS, text)
    print("\n" + text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)
    text = run_all(args.repeat)
    write_results(RESULTS, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
