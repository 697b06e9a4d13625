"""The delta-base search (issue 14): `DeltaCandidates` against the set intersections it replaced.

Run: ``python benchmarks/bench_delta_search.py [--turns 1000] [--rounds 15]``, or collected by
pytest with ``--benchmark-only``. Writes ``benchmarks/results/delta_search.md``.

Two workloads: the native one (``commit_turn`` of bench_curves.py's 1,000-turn conversation) and
the import of its export (a deep file of 6,001 messages). Each is run once through the real
archive with its searches recorded (the lines of each document searched, each base added); the
record is then replayed, alternating, through ``PreviousSearch`` (the code of 0816eab, kept
below) and ``DeltaCandidates`` in this process: each document's lines split afresh just before
its search, as ``store_encoded`` does, only the searches and the bases' upkeep timed (CPU time;
wall beside it). Every replayed choice of both is compared with the recorded one. Then the same
workloads through the real archive, alternating the two classes, with only their calls timed:
there the search competes for the caches with json, zstd and SQLite.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import alpstore.archive.writing as writing
from alpstore.archive.candidates import DeltaCandidates
from alpstore.codec import line_hashes
from alpstore.portable.exporting import write_export
from alpstore.portable.importing import import_file
from alpstore.store import Store
from benchmarks._util import conversation_turns, write_results
from benchmarks.bench_portable import snapshot_of_head
from tests.core.test_delta_search import TodaysSearch as PreviousSearch  # the 0816eab search

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "delta_search.md"


Op = tuple[str, bytes, Any]
"""("search", raw, chosen digest or None) or ("add", digest, index of its search)."""


def _timed(cls: type[Any], acc: list[float]) -> type[Any]:
    class Timed(cls):  # type: ignore[misc, valid-type]
        def best(self, lines: frozenset[bytes]) -> Any:
            t, c = time.perf_counter(), time.process_time()
            found = super().best(lines)
            acc[0] += time.process_time() - c
            acc[1] += time.perf_counter() - t
            return found

        def add(self, digest: bytes, raw: bytes, lines: frozenset[bytes]) -> None:
            t, c = time.perf_counter(), time.process_time()
            super().add(digest, raw, lines)
            acc[2] += time.process_time() - c
            acc[3] += time.perf_counter() - t

    return Timed


def _workload(name: str, root: Path, turns: list[Any], deep: Path) -> None:
    with Store.open(root) as store:
        if name == "native":
            session = store.create_session(session_id="turns", name="turns")
            for turn in turns:
                session.commit_turn(turn)
        else:
            import_file(store, deep)


def record(name: str, turns: list[Any], deep: Path) -> list[Op]:
    """One run of the workload through the archive, its searches and bases recorded."""
    ops: list[Op] = []
    searched: dict[int, int] = {}

    class Recording(DeltaCandidates):
        def best(self, lines: frozenset[bytes]) -> tuple[bytes, bytes] | None:
            found = super().best(lines)
            searched[id(lines)] = len(ops)
            ops.append(("search", b"\\n".join(lines), found[0] if found else None))
            return found

        def add(self, digest: bytes, raw: bytes, lines: frozenset[bytes]) -> None:
            ops.append(("add", digest, searched[id(lines)]))
            super().add(digest, raw, lines)

    writing.DeltaCandidates = Recording  # type: ignore[misc]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            _workload(name, Path(tmp) / "r", turns, deep)
    finally:
        writing.DeltaCandidates = DeltaCandidates  # type: ignore[misc]
    return ops


def replay(cls: type[Any], ops: list[Op]) -> tuple[list[bytes | None], list[float]]:
    """Choices, and [search CPU, search wall, upkeep CPU, upkeep wall] in seconds."""
    acc = [0.0, 0.0, 0.0, 0.0]
    found = _timed(cls, acc)(writing.DELTA_CANDIDATES, writing.DELTA_MIN_SHARED)
    fresh: dict[int, frozenset[bytes]] = {}
    chosen: list[bytes | None] = []
    for i, (op, data, extra) in enumerate(ops):
        if op == "search":
            fresh[i] = line_hashes(data)
            hit = found.best(fresh[i])
            chosen.append(hit[0] if hit else None)
        else:
            found.add(data, ops[extra][1], fresh[extra])
    return chosen, acc


def in_archive(cls: type[Any], name: str, turns: list[Any], deep: Path) -> list[float]:
    acc = [0.0, 0.0, 0.0, 0.0]
    writing.DeltaCandidates = _timed(cls, acc)  # type: ignore[misc]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            _workload(name, Path(tmp) / "r", turns, deep)
    finally:
        writing.DeltaCandidates = DeltaCandidates  # type: ignore[misc]
    return acc


def _alternate(rounds: int, run: Any) -> dict[str, list[list[float]]]:
    out: dict[str, list[list[float]]] = {"previous": [], "new": []}
    pair = [("previous", PreviousSearch), ("new", DeltaCandidates)]
    for r in range(rounds):
        for label, cls in pair if r % 2 == 0 else pair[::-1]:
            out[label].append(run(cls))
    return out


def _least(runs: list[list[float]], *cols: int) -> float:
    return min(sum(run[c] for c in cols) for run in runs) * 1e3


def run_all(n_turns: int, rounds: int) -> str:
    turns = conversation_turns(n_turns)
    rows: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        deep = Path(tmp) / "turns.json"
        with Store.open(Path(tmp) / "src") as store:
            session = store.create_session(session_id="turns", name="turns")
            for turn in turns:
                session.commit_turn(turn)
            write_export(store, snapshot_of_head(store, session), deep)
        for name in ("native", "import"):
            ops = record(name, turns, deep)
            recorded = [extra for op, _, extra in ops if op == "search"]
            for cls in (PreviousSearch, DeltaCandidates):
                assert replay(cls, ops)[0] == recorded, f"{cls.__name__} chose otherwise"
            searches = len(recorded)
            adds = sum(1 for op, _, _ in ops if op == "add")
            rep = _alternate(rounds, lambda cls, ops=ops: replay(cls, ops)[1])
            real = _alternate(
                max(3, rounds // 3), lambda cls, name=name: in_archive(cls, name, turns, deep)
            )
            for where, res in (("replayed", rep), ("in the archive", real)):
                old_s, new_s = _least(res["previous"], 0), _least(res["new"], 0)
                old_all, new_all = _least(res["previous"], 0, 2), _least(res["new"], 0, 2)
                wall_old, wall_new = _least(res["previous"], 1, 3), _least(res["new"], 1, 3)
                if not (new_s and new_all and wall_new):
                    # since issue 41 an import writes its small blobs packed: no delta search
                    rows.append(f"| {name}, {where} | {searches} / {adds} | no searches ran |")
                    continue
                rows.append(
                    f"| {name}, {where} | {searches} / {adds} | {old_s:.1f} | {new_s:.1f} | "
                    f"**{old_s / new_s:.2f}×** | {old_all:.1f} | {new_all:.1f} | "
                    f"**{old_all / new_all:.2f}×** | {wall_old / wall_new:.2f}× |"
                )
    return "\n".join(
        [
            "# Delta-base search (issue 14)",
            "",
            f"Command: `python benchmarks/bench_delta_search.py --turns {n_turns} "
            f"--rounds {rounds}`. The {n_turns:,}-turn conversation of bench_curves.py, natively "
            "(`commit_turn`) and as the import of its export; `DeltaCandidates` against the "
            "previous search (32 set intersections per document, kept in the benchmark), "
            "alternating in one process; least CPU time (ms) of the searches, and of the "
            "searches with the upkeep of the bases (adding, evicting, compacting). Replayed: the "
            "recorded searches alone, each document's lines split just before. In the archive: "
            "the whole workload run, only the two classes' calls timed. Both make the same "
            "choice at every search (checked on the replay).",
            "",
            "| workload | searches / bases added | search before | after | speed-up | "
            "with upkeep before | after | speed-up | wall speed-up (with upkeep) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
            *rows,
            "",
        ]
    )


def test_delta_search(benchmark: Any) -> None:
    text = benchmark.pedantic(run_all, args=(1000, 9), rounds=1, iterations=1)
    write_results(RESULTS, text)
    print("\n" + text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args(argv)
    text = run_all(args.turns, args.rounds)
    write_results(RESULTS, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
