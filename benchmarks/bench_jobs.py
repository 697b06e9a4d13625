"""The jobs that move a whole session, each against the bare loop that moves the same bytes
(issue 41).

Run: ``python benchmarks/bench_jobs.py [--turns 1000] [--runs 5] [--only import,...]``. Writes
``benchmarks/results/jobs.md``.

One generated 1,000-turn coding-agent conversation (``alpstore samples conversation --turns
1000``, OpenAI chat JSON lines). Each row times two WHOLE PROCESSES, alternating A B A B … (the
ratio is taken pair by pair, so a machine whose speed drifts moves both alike), each run's
set-up (a fresh run root, the output removed) outside the timing:

- A: the ``alpstore`` command, as a user runs it;
- B: the bare loop, a plain ``python`` script with nothing but the standard library:

  * ``session import conv.jsonl``; and of the session's bundle (``session export`` file) —
    B: ``json.loads`` each line of the transcript + one ``sqlite3`` ``executemany`` into a fresh
    file + commit;
  * ``session export`` — B: read the bare table's rows + ``json.loads``/``json.dumps`` each +
    write + fsync;
  * ``checkpoint export S@latest`` (a deep file) — B: read the rows + one ``json.dumps`` of the
    document + write + fsync;
  * ``checkpoint import`` of that deep file — B: ``json.loads`` of the file + ``executemany`` of
    its messages into a fresh file + commit.

And in one process, alternating call by call: ``Store.hydrate`` of the session's last
checkpoint against ``SELECT`` of the bare table's rows + ``json.loads`` each (the figure is
bare ÷ alpstore: 1.0 is as fast as the bare loop, the goal ≥ 0.75).

Goals (issue 41): imports ≤ 5×, exports ≤ 3×, checkpoint import ≤ 5×, hydrate ≥ 0.75 of bare,
the imported archive ≤ 0.30× raw on disk.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._util import checkpointed_bytes, write_results

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "jobs.md"
ALPSTORE = str(Path(sys.executable).with_name("alpstore"))

BARE_IMPORT = """
import json, sqlite3, sys
src, db = sys.argv[1], sys.argv[2]
con = sqlite3.connect(db)
con.execute("CREATE TABLE m (id INTEGER PRIMARY KEY, body TEXT)")
rows = []
with open(src, encoding="utf-8") as f:
    for line in f:
        json.loads(line)
        rows.append((line,))
con.executemany("INSERT INTO m (body) VALUES (?)", rows)
con.commit()
con.close()
"""

BARE_EXPORT = """
import json, os, sqlite3, sys
db, out = sys.argv[1], sys.argv[2]
con = sqlite3.connect(db)
with open(out, "w", encoding="utf-8") as f:
    for (body,) in con.execute("SELECT body FROM m ORDER BY id"):
        f.write(json.dumps(json.loads(body)) + "\\n")
    f.flush()
    os.fsync(f.fileno())
"""

BARE_DEEP_EXPORT = """
import json, os, sqlite3, sys
db, out = sys.argv[1], sys.argv[2]
con = sqlite3.connect(db)
messages = [json.loads(body) for (body,) in con.execute("SELECT body FROM m ORDER BY id")]
with open(out, "w", encoding="utf-8") as f:
    f.write(json.dumps({"version": 2, "messages": messages}))
    f.flush()
    os.fsync(f.fileno())
"""

BARE_DEEP_IMPORT = """
import json, sqlite3, sys
src, db = sys.argv[1], sys.argv[2]
with open(src, encoding="utf-8") as f:
    doc = json.load(f)
con = sqlite3.connect(db)
con.execute("CREATE TABLE m (id INTEGER PRIMARY KEY, body TEXT)")
messages = [m for a in doc.get("working_memory", []) for m in a.get("committed_messages", [])]
con.executemany("INSERT INTO m (body) VALUES (?)", [(json.dumps(m),) for m in messages])
con.commit()
con.close()
"""

GOALS = {"import": 5.0, "bundle": 5.0, "export": 3.0, "deep_export": 3.0, "deep_import": 5.0}


@dataclass
class Row:
    key: str
    job: str
    bare: str
    a: list[float]
    b: list[float]
    ratios: list[float]


def timed(argv: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one whole process (it must succeed)."""
    began = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, check=False)
    spent = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"{argv[:4]}… failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return spent


def pairs(
    runs: int,
    a: tuple[Callable[[], None], list[str]],
    b: tuple[Callable[[], None], list[str]],
    env: dict[str, str],
) -> tuple[list[float], list[float], list[float]]:
    """``runs`` A-B pairs after one warm-up pair; each run's set-up outside its timing."""
    ta: list[float] = []
    tb: list[float] = []
    for i in range(runs + 1):
        a[0]()
        x = timed(a[1], env)
        b[0]()
        y = timed(b[1], env)
        if i:  # the first pair warms the page cache and the interpreter's files
            ta.append(x)
            tb.append(y)
    return ta, tb, [x / y for x, y in zip(ta, tb, strict=True)]


def fresh(path: Path) -> Callable[[], None]:
    """A set-up that removes ``path`` (a file or a folder) and makes it again as a folder
    when it was one (a run root)."""

    def run() -> None:
        folder = path.suffix == ""
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        if folder:
            path.mkdir()

    return run


@dataclass
class Prepared:
    """What every job reads (see :func:`prepare`)."""

    conv: Path
    """The generated conversation (OpenAI chat JSON lines)."""
    src: Path
    """A run root holding it imported as session ``c`` (what the exports read)."""
    bundle: Path
    """``session export c`` of it."""
    deep: Path
    """``checkpoint export c@latest`` of it."""
    bare_db: Path
    """The bare loop's table of it (what the bare exports and hydrate read)."""


def prepare(work: Path, turns: int, env: dict[str, str]) -> Prepared:
    """Write the bare loops' scripts into ``work`` (``bare_import.py`` …), generate the
    ``turns``-turn conversation, import it into a run root, export its bundle and deep file,
    and fill the bare loop's table: the set-up of this benchmark and of
    ``bench_import_phases.py``.
    """
    for name, text in (
        ("bare_import.py", BARE_IMPORT),
        ("bare_export.py", BARE_EXPORT),
        ("bare_deep_export.py", BARE_DEEP_EXPORT),
        ("bare_deep_import.py", BARE_DEEP_IMPORT),
    ):
        (work / name).write_text(text, encoding="utf-8")
    conv = work / "conv.jsonl"
    with conv.open("wb") as out:
        subprocess.run(
            [ALPSTORE, "samples", "conversation", "--turns", str(turns)],
            stdout=out,
            check=True,
            env=env,
        )
    src = work / "src"
    src.mkdir()
    bundle, deep, bare_db = work / "bundle.jsonl", work / "deep.json", work / "bare.db"
    for cmd in (
        ["session", "import", str(conv), "--name", "c"],
        ["session", "export", "c", "-o", str(bundle)],
        ["checkpoint", "export", "c@latest", "-o", str(deep)],
    ):
        subprocess.run(
            [ALPSTORE, "--root", str(src), *cmd], check=True, capture_output=True, env=env
        )
    subprocess.run(
        [sys.executable, str(work / "bare_import.py"), str(conv), str(bare_db)], check=True
    )
    return Prepared(conv, src, bundle, deep, bare_db)


def byte_compile() -> None:
    """Byte-compile the package, as an install does (a source tree run with
    ``PYTHONDONTWRITEBYTECODE=1`` compiles every changed module it imports on every start,
    5-10 ms each, which whole-process timings would count).
    """
    import alpstore

    compileall.compile_dir(Path(alpstore.__file__).parent, quiet=1)


def hydrate_ratio(root: Path, bare_db: Path, runs: int) -> tuple[float, float, float]:
    """``(alpstore ms, bare ms, bare ÷ alpstore)``, medians of ``runs`` alternating calls."""
    import sqlite3

    from alpstore.store import Store

    store = Store.open(root)
    try:
        (info,) = store.list_sessions()
        checkpoint = store.list_checkpoints(info.id)[-1]

        def bare() -> int:
            con = sqlite3.connect(bare_db)
            try:
                return len([json.loads(b) for (b,) in con.execute("SELECT body FROM m")])
            finally:
                con.close()

        ta, tb = [], []
        for i in range(runs + 2):
            began = time.perf_counter()
            n = len(store.hydrate(checkpoint))
            x = time.perf_counter() - began
            began = time.perf_counter()
            m = bare()
            y = time.perf_counter() - began
            assert n == m, (n, m)
            if i > 1:
                ta.append(x)
                tb.append(y)
    finally:
        store.close()
    a, b = statistics.median(ta), statistics.median(tb)
    return a * 1e3, b * 1e3, statistics.median(y / x for x, y in zip(ta, tb, strict=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", default="import,bundle,export,deep_export,deep_import,hydrate")
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALPSTORE_")}
    py = sys.executable
    byte_compile()  # the commands run as installed: byte-compiled
    load = os.getloadavg()[0]
    rows: list[Row] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        prep = prepare(work, args.turns, env)
        conv, src, bundle, deep, bare_db = prep.conv, prep.src, prep.bundle, prep.deep, prep.bare_db
        raw = conv.stat().st_size
        from alpstore.db import sqlite_path_for_root

        on_disk = checkpointed_bytes(sqlite_path_for_root(src))
        notes.append(
            f"- The imported archive: {on_disk:,} bytes on disk, **{on_disk / raw:.3f}×** the "
            f"{raw:,}-byte transcript (goal ≤ 0.30×)."
        )
        root, db, out = work / "root", work / "b.db", work / "out.jsonl"
        deep_export = [ALPSTORE, "--root", str(src), "checkpoint", "export", "c@latest", "-q"]
        out2, outd = work / "out2.jsonl", work / "outd.json"
        jobs: list[tuple[str, str, str, Any, Any]] = [
            (
                "import",
                "`session import conv.jsonl`",
                "json.loads each line + executemany + commit",
                (fresh(root), [ALPSTORE, "--root", str(root), "session", "import", str(conv)]),
                (fresh(db), [py, str(work / "bare_import.py"), str(conv), str(db)]),
            ),
            (
                "bundle",
                "`session import` of its bundle",
                "the same",
                (fresh(root), [ALPSTORE, "--root", str(root), "session", "import", str(bundle)]),
                (fresh(db), [py, str(work / "bare_import.py"), str(conv), str(db)]),
            ),
            (
                "export",
                "`session export`",
                "read the rows + json.dumps + write + fsync",
                (
                    fresh(out),
                    [ALPSTORE, "--root", str(src), "session", "export", "c", "-o", str(out)],
                ),
                (fresh(out2), [py, str(work / "bare_export.py"), str(bare_db), str(out2)]),
            ),
            (
                "deep_export",
                "`checkpoint export c@latest` (deep file)",
                "read the rows + json.dumps + write + fsync",
                (
                    fresh(outd),
                    [*deep_export, "-o", str(outd)],
                ),
                (fresh(out2), [py, str(work / "bare_deep_export.py"), str(bare_db), str(out2)]),
            ),
            (
                "deep_import",
                "`checkpoint import` of that file",
                "json.load + executemany + commit",
                (fresh(root), [ALPSTORE, "--root", str(root), "checkpoint", "import", str(deep)]),
                (fresh(db), [py, str(work / "bare_deep_import.py"), str(deep), str(db)]),
            ),
        ]
        for key, job, bare, a, b in jobs:
            if key not in only:
                continue
            ta, tb, ratios = pairs(args.runs, a, b, env)
            rows.append(Row(key, job, bare, ta, tb, ratios))
            print(f"{key}: {statistics.median(ratios):.2f}x", flush=True)
        hydrate = hydrate_ratio(src, bare_db, max(10, args.runs * 3)) if "hydrate" in only else None
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = [
        "# The jobs that move a whole session, against their bare loops (issue 41)",
        "",
        f"Command: `python benchmarks/bench_jobs.py --turns {args.turns} --runs {args.runs}` "
        f"({os.cpu_count()} shared cores, 1-minute load average {load:.1f} at the start; "
        f"children's CPU {usage.ru_utime + usage.ru_stime:.1f} s). {args.turns:,}-turn "
        f"conversation, {raw:,} bytes of JSON lines. Whole processes, A and B alternating, "
        "median of the pairs' ratios (min–max).",
        "",
        "| job | alpstore median s | bare loop (same bytes, one process) | bare median s | "
        "× (min–max) | goal |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        ratio = statistics.median(r.ratios)
        goal = GOALS[r.key]
        lines.append(
            f"| {r.job} | {statistics.median(r.a):.3f} | {r.bare} | {statistics.median(r.b):.3f} "
            f"| **{ratio:.1f}×** ({min(r.ratios):.1f}–{max(r.ratios):.1f}) | ≤ {goal:g}× "
            f"{'met' if ratio <= goal else 'not met'} |"
        )
    if hydrate is not None:
        a_ms, b_ms, of = hydrate
        met = "met" if of >= 0.75 else "not met"
        lines.append(
            f"| hydrate the latest checkpoint, in process | {a_ms / 1e3:.4f} | SELECT + json.loads "
            f"| {b_ms / 1e3:.4f} | **{of:.2f} of bare** | ≥ 0.75 {met} |"
        )
    lines += ["", *notes, ""]
    text = "\n".join(lines)
    print(text)
    write_results(RESULTS, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
