"""Bytes of an archive right after `session import` (issue 33), beside the zstd-stream limit.

Run: ``python benchmarks/bench_import_bytes.py``, or collected by pytest with
``--benchmark-only``. Writes ``benchmarks/results/import_bytes.md``.

Two conversations: the shipped 300-turn sample (``alpstore samples conversation``) and a
1,000-turn one from ``alpstore.samples.generate`` (seed 7); raw = the file as JSON lines. Each is
imported into a fresh SQLite archive by the product code the command runs
(``alpstore.importers.import_history`` in one transaction), then, as the command does after its
transaction, ``SqlArchive.settle()``: the deferred dictionary, the cold blobs packed into
frames with it, the file compacted. The size is the archive file with its WAL folded
in once the store is closed (what is on disk when the command has returned). In the same
process, on the same file: the import as it was before (no settle: the one transaction defers
the dictionary and nothing trains it), and the zstd stream of the whole file at levels 3 and 19
(the limit of per-file compression, with no random access).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import zstandard

from alpstore.db import sqlite_path_for_root
from alpstore.importers import import_history, parse_history
from alpstore.samples import sample_path, write_jsonl
from alpstore.store import Store
from benchmarks._util import checkpointed_bytes, write_results

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "import_bytes.md"
GOAL = 0.30


def import_size(source: Path, root: Path, *, settle: bool) -> tuple[int, float, Any]:
    """Import ``source`` into a fresh archive at ``root``; ``(bytes on disk, seconds of the
    steps after the transaction, what they did)``."""
    root.mkdir()
    store = Store.open(root)
    try:
        import_history(store, parse_history(source, "auto"), name="bench")
        began = time.perf_counter()
        done: Any = None
        if settle:
            done = store.archive.settle()
        spent = time.perf_counter() - began
    finally:
        store.close()
    return checkpointed_bytes(sqlite_path_for_root(root)), spent, done


def measure(name: str, source: Path, work: Path) -> dict[str, Any]:
    raw = source.read_bytes()
    before, _, _ = import_size(source, work / f"{name}-before", settle=False)
    after, spent, done = import_size(source, work / f"{name}-after", settle=True)
    return {
        "name": name,
        "raw": len(raw),
        "before": before,
        "after": after,
        "seconds": spent,
        "done": done,
        "z3": len(zstandard.ZstdCompressor(level=3).compress(raw)),
        "z19": len(zstandard.ZstdCompressor(level=19).compress(raw)),
    }


def run_all() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        big = work / "conversation-1000.jsonl"
        write_jsonl(big, 1000, seed=7)
        rows = [
            measure("shipped sample, 300 turns", sample_path(), work),
            measure("generated, 1,000 turns", big, work),
        ]
    lines = [
        "| conversation | raw | before: import alone | "
        "after: import + settle (dictionary, packs) | "
        "settle took | zstd-3 stream | zstd-19 stream |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        raw = r["raw"]
        lines.append(
            f"| {r['name']} | {raw / 1e6:.2f} MB | {r['before'] / raw:.3f}× | "
            f"**{r['after'] / raw:.3f}×** | {r['seconds'] * 1000:.0f} ms | "
            f"{r['z3'] / raw:.3f}× | {r['z19'] / raw:.3f}× |"
        )
    return (
        "Command: `python benchmarks/bench_import_bytes.py`. File size on disk (WAL folded in) "
        "÷ the JSON-lines file, right after the import; the stream columns compress the same "
        f"file whole. Goal (issue 33, with packs): ≤ {GOAL:.2f}× at 1,000 turns.\n\n"
        + "\n".join(lines)
        + "\n"
    )


def test_import_bytes(benchmark: Any) -> None:
    text = benchmark.pedantic(run_all, rounds=1, iterations=1)
    write_results(RESULTS, text)
    print("\n" + text)


if __name__ == "__main__":
    out = run_all()
    write_results(RESULTS, out)
    print(out)
