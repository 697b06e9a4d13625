"""A deep import's memory does not grow with the number of messages (issue 30, item 11).

The real ``alpstore checkpoint import`` of a deep file of small messages, in a process of its
own (peak RSS from ``wait4``), at two sizes: the larger file may cost at most as many more
bytes of peak RSS as it has more bytes of JSON. Before the fix the import kept a digest, a
slot and an id entry per message (about 300 bytes for a 110-byte message): 60,000 more messages
cost 17 MB for 5.8 MB more file. The benchmark (benchmarks/bench_import_rss.py) holds the 3x
goal at 38 MB.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ALPSTORE

_MEASURE = (
    "import os, subprocess, sys\n"
    "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
    "err = p.stderr.read()\n"
    "_, status, usage = os.wait4(p.pid, 0)\n"
    "sys.stderr.buffer.write(err)\n"
    "print(usage.ru_maxrss, os.waitstatus_to_exitcode(status))\n"
)
"""Runs the command from a small parent, so the test process's pages are not counted."""


def small_messages_file(path: Path, n: int) -> int:
    """A mas-lab version 2 deep file of ``n`` small messages (about 110 bytes each); its size."""
    doc: dict[str, Any] = {
        "version": 2,
        "label": "memory",
        "turn": 0,
        "lineage": {
            "session_id": "memory-session",
            "parent_session_id": None,
            "forked_from_checkpoint": None,
            "root_session_id": "memory-session",
            "created_at": "2026-09-30T12:00:00+00:00",
        },
        "kernel": {"q": {}, "run": {}},
        "working_memory": [
            {
                "agent_id": "a",
                "turn_history": [],
                "committed_messages": [
                    {
                        "role": "user" if i % 2 == 0 else "assistant",
                        "content": f"message number {i}: a short line about the task, step {i}",
                    }
                    for i in range(n)
                ],
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
    return path.stat().st_size


def peak_rss(args: list[str]) -> int:
    """Peak RSS in bytes of ``alpstore *args`` (it must succeed)."""
    env = {k: v for k, v in os.environ.items() if k != "ALPSTORE_DATABASE_URL"}
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, ALPSTORE, *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    rss_kb, code = (int(x) for x in proc.stdout.split())
    assert proc.returncode == 0 and code == 0, proc.stderr
    return rss_kb * 1024


@pytest.mark.slow
def test_a_deep_import_of_more_small_messages_costs_less_memory_than_its_bytes(
    tmp_path: Path,
) -> None:
    files = {name: tmp_path / f"{name}.json" for name in ("small", "large")}
    small = small_messages_file(files["small"], 60_000)
    large = small_messages_file(files["large"], 150_000)
    rss_small = peak_rss(
        ["--root", str(tmp_path / "a"), "checkpoint", "import", str(files["small"])]
    )
    rss_large = peak_rss(
        ["--root", str(tmp_path / "b"), "checkpoint", "import", str(files["large"])]
    )
    grown = rss_large - rss_small
    assert grown <= large - small, (
        f"peak RSS grew by {grown / 1e6:.1f} MB for {(large - small) / 1e6:.1f} MB more file "
        f"({rss_small / 1e6:.0f} MB -> {rss_large / 1e6:.0f} MB)"
    )
