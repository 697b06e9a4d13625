"""Imports and live writers storing the same new content at once (issue 42): packed blobs
have no row under a unique digest index (0010), so on PostgreSQL two imports, or an import and
a live ``commit_turn``, could each store a digest the other had not committed yet. Every digest
must end stored once, whatever the interleaving; SQLite's writers take turns.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from alpstore.portable.travel_export import export_session
from alpstore.store import Store
from tests.concurrency.import_racer import turn_messages
from tests.conftest import Backend

HERE = Path(__file__).parent
TURNS = 300


def _session_files(tmp: Path, n: int) -> list[Path]:
    """``n`` session files (sessions of their own) holding the same ``TURNS`` turns."""
    root = tmp / "source"
    root.mkdir()
    store = Store.open(root)
    files = []
    for i in range(n):
        session = store.create_session(name=f"source-{i}")
        for t in range(TURNS):
            session.commit_turn(turn_messages(t), kernel={"turn": t})
        path = tmp / f"session-{i}.jsonl"
        export_session(store, session.id, path)
        files.append(path)
    store.close()
    return files


def _race(backend: Backend, tmp: Path, whats: list[str]) -> list[dict[str, Any]]:
    """One process per entry of ``whats``, released together; their results."""
    Store.open(backend.root, url=backend.url).close()  # the schema exists before the race
    barrier = tmp / "barrier"
    barrier.mkdir()
    procs = []
    for i, what in enumerate(whats):
        out = tmp / f"out-{i}.json"
        cmd = [sys.executable, str(HERE / "import_racer.py"), str(backend.root)]
        cmd += [backend.url or "-", str(i), what, str(out), str(barrier)]
        procs.append((subprocess.Popen(cmd, cwd=HERE, stderr=subprocess.PIPE), out))
    deadline = time.monotonic() + 120
    while len(list(barrier.glob("ready-*"))) < len(whats):
        if any(p.poll() is not None for p, _ in procs) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    (barrier / "go").touch()
    results = []
    for proc, out in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err.decode(errors="replace") + out.read_text()
        results.append(json.loads(out.read_text()))
    return results


def _each_digest_once(backend: Backend) -> None:
    store = backend.open_store()
    with store.db.read() as conn:
        twice = conn.exec_driver_sql(
            "SELECT count(*) FROM (SELECT digest FROM blobs GROUP BY digest "
            "HAVING count(*) > 1) AS d"
        ).scalar_one()
        messages = conn.exec_driver_sql(
            "SELECT count(DISTINCT digest) FROM blobs WHERE kind = 0"
        ).scalar_one()
    assert (twice, messages) == (0, 2 * TURNS)
    result = backend.cli("archive", "verify")
    assert result.code == 0, result.out + result.err


def test_two_imports_of_the_same_content_store_each_digest_once(
    backend: Backend, tmp_path: Path
) -> None:
    files = _session_files(tmp_path, 2)
    _race(backend, tmp_path, [str(f) for f in files])
    _each_digest_once(backend)


def test_an_import_beside_a_live_writer_stores_each_digest_once(
    backend: Backend, tmp_path: Path
) -> None:
    (file,) = _session_files(tmp_path, 1)
    _race(backend, tmp_path, [str(file), f"write:{TURNS}"])
    _each_digest_once(backend)
