"""A 5,000-turn real-shaped Claude Code transcript imports with peak RSS ≤ 3× its largest
record + 100 MB (issue 43): memory holds one turn and the record ids' positions, never the
transcript. The real ``alpstore session import``, in a process of its own (peak RSS from
``wait4``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ALPSTORE
from tests.fixtures.transcripts.build import Claude, real_turn
from tests.reliability.test_import_memory import _MEASURE

TURNS = 5000
BIG = 8 * 1024 * 1024
"""One tool result this large (a file read whole): the largest record."""


@pytest.mark.slow
def test_a_5000_turn_transcript_imports_in_bounded_memory(tmp_path: Path) -> None:
    cc = Claude(seed="rss")
    for i in range(TURNS):
        real_turn(cc, i, result_bytes=BIG if i == TURNS // 2 else 1500)
    path = cc.write(tmp_path / f"{cc.session}.jsonl")
    largest = max(len(line) for line in path.read_bytes().splitlines())
    assert largest > BIG
    root = tmp_path / "run"
    root.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "ALPSTORE_DATABASE_URL"}
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _MEASURE,
            ALPSTORE,
            "--root",
            str(root),
            "session",
            "import",
            str(path),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    rss_kb, code = (int(x) for x in proc.stdout.split())
    assert code == 0, proc.stderr
    peak = rss_kb * 1024
    bound = 3 * largest + 100 * 1024 * 1024
    print(
        f"peak RSS {peak / 1e6:.1f} MB for {path.stat().st_size / 1e6:.1f} MB, "
        f"largest record {largest / 1e6:.1f} MB, bound {bound / 1e6:.1f} MB"
    )
    assert peak <= bound
