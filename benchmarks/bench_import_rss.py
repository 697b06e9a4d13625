"""Peak memory of an import ÷ the file's size (issue 30, item 11; goal ≤ 3× at 38 MB).

Run: ``python -m pytest benchmarks/bench_import_rss.py --benchmark-only -s`` (or
``scripts/bench -k import_rss``). Writes ``benchmarks/results/import_rss.md``.

Two imports through the real command, each in a process of its own started from a small wrapper
(peak RSS from ``wait4``, so the benchmark's own pages are not counted), in the same run:

- ``alpstore checkpoint import`` of a 38 MB mas-lab deep file of small messages (about 110
  bytes each, 340,000 of them): the case that peaked at 8.4× (issue 30) and 5.1× (16.7 MB);
- ``alpstore session import`` of an OpenAI JSON Lines transcript of the same size, generated
  by ``alpstore samples`` (the import the issue calls fine), as the baseline.

The figure is peak RSS ÷ file bytes; the interpreter with its imports (about 50 MB) is inside
it, as a user sees it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from alpstore.samples import generate
from benchmarks._util import write_results

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "import_rss.md"
ALPSTORE = str(Path(sys.executable).with_name("alpstore"))
TARGET_BYTES = 38 * 1000 * 1000
GOAL = 3.0
MB = 1e6
FIGURES: dict[str, Any] = {}

_MEASURE = (
    "import os, subprocess, sys\n"
    "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
    "err = p.stderr.read()\n"
    "_, status, usage = os.wait4(p.pid, 0)\n"
    "sys.stderr.buffer.write(err)\n"
    "print(usage.ru_maxrss, os.waitstatus_to_exitcode(status))\n"
)


def _measured(args: list[str]) -> tuple[float, int]:
    """Run ``alpstore *args`` from a small parent: wall seconds, peak RSS in bytes."""
    env = {k: v for k, v in os.environ.items() if k != "ALPSTORE_DATABASE_URL"}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, ALPSTORE, *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    elapsed = time.perf_counter() - t0
    rss_kb, code = (int(x) for x in proc.stdout.split())
    assert proc.returncode == 0 and code == 0, proc.stderr
    return elapsed, rss_kb * 1024


def deep_file(path: Path, target: int) -> int:
    """A mas-lab v2 deep file of small messages of about ``target`` bytes; its message count."""
    messages = []
    size = 0
    i = 0
    while size < target:
        m = {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"message number {i}: a short line of text about the task at hand, step {i}",
        }
        size += len(json.dumps(m)) + 2
        messages.append(m)
        i += 1
    doc = {
        "version": 2,
        "label": "rss",
        "turn": 0,
        "lineage": {
            "session_id": "rss-session",
            "parent_session_id": None,
            "forked_from_checkpoint": None,
            "root_session_id": "rss-session",
            "created_at": "2026-09-30T12:00:00+00:00",
        },
        "kernel": {"q": {}, "run": {}},
        "working_memory": [
            {
                "agent_id": "a",
                "turn_history": [],
                "committed_messages": messages,
                "conversation_chunks": {},
            }
        ],
        "manifest": {
            "content": {
                "kind": "Agent",
                "metadata": {"name": "checkpoint-example"},
                "spec": {"description": "Example manifest"},
            },
            "content_hash": "2850b6ca59fcb62e16e9b88f7cbd240329f58310897faf97e334f639ac1cdea5",
        },
    }
    path.write_text(json.dumps(doc), encoding="utf-8")
    return len(messages)


def transcript_file(path: Path, target: int) -> int:
    """An OpenAI JSON Lines transcript (``alpstore samples``' generator) of about ``target``
    bytes; its message count."""
    size = 0
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for m in generate(1_000_000, seed=11):
            line = json.dumps(m) + "\n"
            if size + len(line) > target and m.get("role") == "user":
                break
            out.write(line)
            size += len(line)
            count += 1
    return count


def _write() -> None:
    f = FIGURES
    lines = [
        "# Import peak memory ÷ file size (issue 30, item 11)",
        "",
        "Each import through the real command in a process of its own (peak RSS from `wait4`, "
        "the interpreter and its imports included); goal for the deep file ≤ "
        f"{GOAL:.0f}× its size.",
        "",
        "| import | file (MB) | messages | wall (s) | peak RSS (MB) | RSS ÷ file |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, what in (
        ("deep", "`alpstore checkpoint import` (deep file)"),
        ("transcript", "`alpstore session import` (transcript)"),
    ):
        if f"{key}_rss" in f:
            lines.append(
                f"| {what} | {f[key + '_bytes'] / MB:.1f} | {f[key + '_messages']:,} | "
                f"{f[key + '_s']:.1f} | {f[key + '_rss'] / MB:.0f} | "
                f"**{f[key + '_rss'] / f[key + '_bytes']:.2f}** |"
            )
    lines += [
        "",
        "Reproduce: `python -m pytest benchmarks/bench_import_rss.py --benchmark-only -s`.",
        "",
    ]
    write_results(RESULTS, "\n".join(lines))


@pytest.fixture(scope="module")
def files() -> Any:
    with tempfile.TemporaryDirectory(prefix="alpstore-rss-") as tmp:
        root = Path(tmp)
        deep = root / "deep.json"
        transcript = root / "transcript.jsonl"
        FIGURES["deep_messages"] = deep_file(deep, TARGET_BYTES)
        FIGURES["transcript_messages"] = transcript_file(transcript, TARGET_BYTES)
        FIGURES["deep_bytes"] = deep.stat().st_size
        FIGURES["transcript_bytes"] = transcript.stat().st_size
        yield root, deep, transcript


def _bench(benchmark: Any, key: str, args: list[str], size: int) -> float:
    out: dict[str, float] = {}

    def run() -> None:
        out["s"], out["rss"] = _measured(args)

    benchmark.pedantic(run, rounds=1, iterations=1)
    FIGURES[f"{key}_s"], FIGURES[f"{key}_rss"] = out["s"], out["rss"]
    ratio = out["rss"] / size
    benchmark.extra_info.update(peak_rss_mb=out["rss"] / MB, file_mb=size / MB, ratio=ratio)
    _write()
    return ratio


def test_import_rss_transcript(benchmark: Any, files: Any) -> None:
    root, _, transcript = files
    args = ["--root", str(root / "t"), "session", "import", str(transcript), "--name", "rss"]
    _bench(benchmark, "transcript", args, FIGURES["transcript_bytes"])


def test_import_rss_deep(benchmark: Any, files: Any) -> None:
    root, deep, _ = files
    args = ["--root", str(root / "d"), "checkpoint", "import", str(deep)]
    ratio = _bench(benchmark, "deep", args, FIGURES["deep_bytes"])
    assert ratio <= GOAL, f"deep import peaked at {ratio:.2f}x the file (goal {GOAL}x)"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "--benchmark-only", "-s", "-q"]))
