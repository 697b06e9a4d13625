"""Where an import's whole process spends its time, phase by phase (issue 41).

Run: ``python benchmarks/bench_import_phases.py [--runs 5] [--turns 1000]``. Each run is a fresh
interpreter that times, one after the other, what ``alpstore session import`` /
``alpstore checkpoint import`` does into a new SQLite run root: the CLI (Typer and alpstore's
CLI modules) imported, the job's own modules imported, the archive created (``import_store``:
on the ``sqlite3`` driver alone), the one transaction (read, check, encode, compress, write;
a session file read once, as the command reads it into SQLite), the settle (``VACUUM``) and
the close.
The bare loop of ``bench_jobs.py`` and ``python -c pass`` are timed beside them. Medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_jobs import byte_compile, prepare

CHILD = r"""
import json, sys, time
t = [time.perf_counter()]
kind, path, root = sys.argv[1], sys.argv[2], sys.argv[3]
group = "checkpoint" if kind == "deep" else "session"
sys.argv = ["alpstore", "--root", root, group, "import", path]  # registers that group alone
import typer  # noqa: F401
import alpstore.cli.main  # noqa: F401
from alpstore.cli import session_import  # noqa: F401
t.append(time.perf_counter())
from pathlib import Path
from alpstore.store import Store
if kind == "transcript":
    from alpstore.importers import import_history_file
elif kind == "bundle":
    from alpstore.portable.travel_import import import_session_file
else:
    from alpstore.portable.importing import import_file
t.append(time.perf_counter())
st = Store.open(Path(root), lite_write=True)
t.append(time.perf_counter())
if kind == "transcript":
    import_history_file(st, Path(path), name="conv", suffix=True)
elif kind == "bundle":
    import_session_file(st, Path(path))  # one read, as the command does on SQLite
else:
    import_file(st, Path(path))
t.append(time.perf_counter())
st.archive.settle(compact=True)
t.append(time.perf_counter())
st.close()
t.append(time.perf_counter())
print(json.dumps([b - a for a, b in zip(t, t[1:])]))
"""

PHASES = (
    "CLI and Typer imported",
    "the job's own modules imported",
    "archive created (sqlite3 driver, schema snapshot)",
    "the one transaction: read, check, encode, compress, write",
    "settle (VACUUM)",
    "close (WAL folded)",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALPSTORE_")}
    py = sys.executable
    byte_compile()  # as bench_jobs: the commands run as installed
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        prep = prepare(work, args.turns, env)  # (bench_jobs' set-up, its bare loop's script)
        (work / "child.py").write_text(CHILD, encoding="utf-8")
        conv = prep.conv
        files = {"transcript": conv, "bundle": prep.bundle, "deep": prep.deep}
        phases: dict[str, list[list[float]]] = {k: [] for k in files}
        bare: list[float] = []
        python: list[float] = []
        for _ in range(args.runs):
            for kind, path in files.items():
                root = work / "root"
                shutil.rmtree(root, ignore_errors=True)
                root.mkdir()
                began = time.perf_counter()
                done = subprocess.run(
                    [py, str(work / "child.py"), kind, str(path), str(root)],
                    check=True,
                    env=env,
                    capture_output=True,
                )
                whole = time.perf_counter() - began
                phases[kind].append([*json.loads(done.stdout), whole])
            (work / "b.db").unlink(missing_ok=True)
            began = time.perf_counter()
            subprocess.run(
                [py, str(work / "bare_import.py"), str(conv), str(work / "b.db")], check=True
            )
            bare.append(time.perf_counter() - began)
            began = time.perf_counter()
            subprocess.run([py, "-c", "pass"], check=True)
            python.append(time.perf_counter() - began)
    load = os.getloadavg()[0]
    print(
        f"median of {args.runs} runs, 1-minute load average {load:.1f}; `python -c pass` "
        f"{statistics.median(python):.3f} s, the bare loop {statistics.median(bare):.3f} s\n"
    )
    print("| phase | transcript import | bundle import | checkpoint import |")
    print("|---|---:|---:|---:|")
    for i, name in enumerate([*PHASES, "whole process"]):
        cells = []
        for kind in files:
            value = statistics.median(run[i] for run in phases[kind])
            cells.append(f"{value:.3f} s")
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
