"""Many processes writing one archive at once, on SQLite and on PostgreSQL: no lock errors, no
deadlock, no lost or duplicated checkpoint, idempotent blob inserts racing on the same digest,
and GC running beside the writers without breaking anything they acknowledged."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from alpstore.codec import canonical_json, digest_bytes
from alpstore.db.tables import blobs, checkpoints
from alpstore.maintenance import gc, verify
from alpstore.store import Store
from tests.concurrency.blob_racer import DOCS, documents
from tests.concurrency.writer import SHARED, kernel, own_message, shared_message
from tests.conftest import Backend

HERE = Path(__file__).parent
WRITERS = 8
TURNS = 500


def _launch(
    script: str, backend: Backend, n: int, arg: int, tmp: Path, during: Any = None
) -> list[dict[str, Any]]:
    """Start ``n`` processes of ``script``, release them together, wait for all of them."""
    barrier = tmp / "barrier"
    barrier.mkdir()
    procs = []
    for i in range(n):
        out = tmp / f"out-{i}.json"
        cmd = [sys.executable, str(HERE / script), str(backend.root), backend.url or "-"]
        cmd += [str(i), str(arg), str(out), str(barrier)]
        procs.append((subprocess.Popen(cmd, cwd=HERE, stderr=subprocess.PIPE), out))
    deadline = time.monotonic() + 120
    while len(list(barrier.glob("ready-*"))) < n:
        if any(p.poll() is not None for p, _ in procs) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    (barrier / "go").touch()
    if during is not None:
        while any(p.poll() is None for p, _ in procs):
            during()
    results = []
    for proc, out in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err.decode(errors="replace") + out.read_text()
        doc = json.loads(out.read_text())
        assert doc["error"] is None, doc["error"]
        results.append(doc)
    return results


def _prepare(backend: Backend) -> None:
    Store.open(backend.root, url=backend.url).close()  # the schema exists before the race


def _check_every_acknowledged_checkpoint(
    store: Store, results: list[dict[str, Any]], turns: int
) -> None:
    for index, result in enumerate(results):
        session = store.get_session(result["session"])
        stored = session.checkpoints()
        assert [c.id for c in stored] == [a["id"] for a in result["acked"]]
        assert [c.seq for c in stored] == list(range(1, turns + 1))
        expected: list[Any] = []
        for t in range(turns):
            expected += [shared_message(t), own_message(index, t)]
        last = stored[-1]
        assert [e.value for e in store.hydrate(last)] == expected
        assert store.checkpoint_state(last)[0] == kernel(turns - 1)
        middle = stored[turns // 2]
        assert [e.value for e in store.hydrate(middle)] == expected[: 2 * (turns // 2 + 1)]


@pytest.mark.slow
def test_eight_writers_five_hundred_checkpoints_each(backend: Backend, tmp_path: Path) -> None:
    _prepare(backend)
    results = _launch("writer.py", backend, WRITERS, TURNS, tmp_path)
    assert all(len(r["acked"]) == TURNS for r in results)
    store = backend.open_store()
    _check_every_acknowledged_checkpoint(store, results, TURNS)
    with store.db.read() as conn:
        total = conn.execute(select(func.count()).select_from(checkpoints)).scalar_one()
        stored_blobs = conn.execute(select(func.count()).select_from(blobs)).scalar_one()
    assert total == WRITERS * TURNS
    # every distinct document exactly once: shared questions, own answers, kernel states
    assert stored_blobs == SHARED + WRITERS * TURNS + 7
    report = verify(store)
    assert report.ok, [p.line() for p in report.problems]
    result = backend.cli("archive", "verify")
    assert result.code == 0, result.err


def test_blob_inserts_racing_on_the_same_digests(backend: Backend, tmp_path: Path) -> None:
    _prepare(backend)
    results = _launch("blob_racer.py", backend, 6, 5, tmp_path)
    expected = [digest_bytes(canonical_json(d)).hex() for d in documents()]
    assert all(r["digests"] == expected for r in results)
    store = backend.open_store()
    with store.db.read() as conn:
        assert conn.execute(select(func.count()).select_from(blobs)).scalar_one() == DOCS
    assert store.archive.verify().ok


@pytest.mark.slow
def test_gc_beside_writers_keeps_everything_they_acknowledged(
    backend: Backend, tmp_path: Path
) -> None:
    _prepare(backend)
    collector = backend.open_store()
    runs: list[int] = []

    def collect() -> None:
        report = gc(collector)
        runs.append(report.blobs_removed)
        time.sleep(0.01)

    turns = 120
    results = _launch("writer.py", backend, 4, turns, tmp_path, during=collect)
    assert len(runs) >= 2
    assert sum(runs) > 0  # GC did sweep the blobs stored ahead of use, while writers ran
    store = backend.open_store()
    _check_every_acknowledged_checkpoint(store, results, turns)
    report = verify(store)
    assert report.ok, [p.line() for p in report.problems]
