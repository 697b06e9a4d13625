"""The long-lived stress run (issue 13), on both backends: two native writers and an
AlpstoreSaver under a real LangGraph graph, each a process holding one store open, append large
similar tool outputs, drop some, backtrack, fork and time-travel while another process runs
`gc` (in-process and `alpstore archive gc`) in a loop. Afterwards every acknowledged checkpoint
hydrates, digests verified, to what its writer logged: in every writer (still open, through its
caches) and in a fresh process; `archive verify` finds nothing.

``ALPSTORE_STRESS_SECONDS`` sets how long the writers run (default 60; `scripts/torture --long`
runs it for longer).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from alpstore.testing.stress import run_stress
from tests.conftest import Backend

SECONDS = float(os.environ.get("ALPSTORE_STRESS_SECONDS", "60"))


@pytest.mark.slow
def test_long_lived_writers_beside_gc_read_every_checkpoint(
    backend: Backend, tmp_path: Path
) -> None:
    pytest.importorskip("langgraph.graph", reason="langgraph is not installed")
    report = run_stress(backend.root, backend.url, tmp_path / "work", SECONDS)
    print(report.summary())
    assert report.failures == [], "\n".join([report.summary(), *report.failures[:30]])
    assert report.checkpoints >= 20, report.summary()
    assert all(r["checked"] == report.checkpoints for r in report.results), report.summary()
    assert report.gc.get("runs", 0) >= 3 and report.gc.get("cli_runs", 0) >= 1, report.summary()
    assert report.gc.get("blobs_removed", 0) > 0, report.summary()
