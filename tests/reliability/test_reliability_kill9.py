"""Kill -9 torture: ≥ 200 workers SIGKILLed at random moments, everything checked after each."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from sqlalchemy import select, update

from alpstore.db import open_database
from alpstore.db.tables import blob_rows, blobs
from alpstore.testing.torture import (
    Torture,
    TortureConfig,
    TortureFailure,
    TortureReport,
    check_log,
    run,
)
from tests.backend_pass import database_url_for_roots

KILLS = int(os.environ.get("ALPSTORE_TORTURE_KILLS", "200"))
SEED = int(os.environ.get("ALPSTORE_TORTURE_SEED", "20261130"))


def test_kill9_torture_keeps_every_acknowledged_write(tmp_path: Path) -> None:
    # on the PostgreSQL pass each run root's archive is a schema of its own on the server
    urls = database_url_for_roots()
    report = run(TortureConfig(workdir=tmp_path, kills=KILLS, seed=SEED, database_url=urls))
    print(report.summary())
    assert not report.failures, report.summary() + "\n" + "\n".join(report.failures)
    assert report.kills == KILLS >= 200 or "ALPSTORE_TORTURE_KILLS" in os.environ
    # the workers did real work between kills, and some kills landed inside a write
    assert report.acks.get("ck", 0) >= KILLS // 4
    assert report.acks.get("pin", 0) > 0 and report.acks.get("jl", 0) > 0
    assert sum(report.in_flight_resolved.values()) > 0
    assert report.checkpoints_verified >= report.acks["ck"]


@pytest.fixture
def short_run(tmp_path: Path) -> Torture:
    """Three workers killed on one run root, every check passed."""
    t = Torture(
        TortureConfig(
            workdir=tmp_path, kills=3, seed=7, early_every=0, database_url=database_url_for_roots()
        )
    )
    for _ in range(3):
        t.kill_once()
    return t


def _forge(t: Torture, *lines: dict[str, object]) -> Path:
    path = t.logs / "forged.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_a_checkpoint_that_hydrates_wrong_is_caught(short_run: Torture) -> None:
    model = short_run.model
    assert model is not None and model.checkpoints
    ck_id = max(model.checkpoints)
    session = model.checkpoints[ck_id][0]
    forged = _forge(
        short_run, {"t": "ck", "id": ck_id, "session": session, "h": "0" * 64, "kernel": None}
    )
    with pytest.raises(TortureFailure, match=f"checkpoint {ck_id}"):
        check_log(model, forged, TortureReport())


def test_a_lost_pin_is_caught(short_run: Torture) -> None:
    assert short_run.model is not None
    forged = _forge(
        short_run, {"t": "pin", "exec": "exec_torture_a", "id": "nope", "text": "never written"}
    )
    with pytest.raises(TortureFailure, match="lost acknowledged pin"):
        check_log(short_run.model, forged, TortureReport())


def test_a_head_that_moved_without_a_write_is_caught(short_run: Torture) -> None:
    model = short_run.model
    assert model is not None and model.heads
    session = next(iter(model.heads))
    forged = _forge(short_run, {"t": "head", "session": session, "h": "1" * 64})
    with pytest.raises(TortureFailure, match=f"session {session} head"):
        check_log(model, forged, TortureReport())


def test_a_damaged_blob_is_caught(short_run: Torture) -> None:
    model = short_run.model
    assert model is not None
    db = open_database(root=model.root)  # the SQLite file, or this root's PostgreSQL schema
    with db.atomic() as conn:
        raw = conn.execute(select(blobs.c.id, blobs.c.payload).where(blobs.c.codec == 0)).all()
        for blob_id, payload in raw:
            if b"w" in payload:
                damaged = bytes(payload).replace(b"w", b"W")
                conn.execute(
                    update(blob_rows).where(blob_rows.c.id == blob_id).values(payload=damaged)
                )
    db.close()
    with pytest.raises(TortureFailure, match="archive verify failed"):
        check_log(model, _forge(short_run), TortureReport())


@pytest.mark.postgres
def test_the_check_waits_for_a_killed_workers_server_backends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On PostgreSQL the parent checks only once the server has ended the worker's backends:
    a COMMIT sent just before the SIGKILL may still be carried out after the kill."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from alpstore.testing import torture
    from tests.conftest import _pg_admin, postgres_base_url

    _pg_admin()  # skips without a server, fails when it cannot be reached
    url = postgres_base_url()
    assert url is not None
    name = f"alpstore-torture-test-{os.getpid()}"
    held = create_engine(url, poolclass=NullPool, connect_args={"application_name": name})
    monkeypatch.setattr(torture, "BACKEND_TIMEOUT", 0.3)
    with held.connect() as conn:
        conn.exec_driver_sql("SELECT 1")
        with pytest.raises(TortureFailure, match="1 server backends still running"):
            torture._wait_for_backends(url, name)
    held.dispose()
    monkeypatch.setattr(torture, "BACKEND_TIMEOUT", 30.0)
    torture._wait_for_backends(url, name)  # returns once the server has ended the backend


def test_a_line_cut_by_the_kill_is_dropped_and_damage_elsewhere_is_caught(tmp_path: Path) -> None:
    # Linux ends a write cut by SIGKILL at a page boundary (seen in CI: a worker log of
    # exactly 45,056 bytes ending in half an ack). The worker died in that write: its log
    # reads as if the kill came just before it, and so does an events line cut that way.
    from alpstore.testing.torture import PAGE_SIZE, _check_events, _cut_lines, _read_log

    log = tmp_path / "worker.jsonl"
    log.write_bytes(b'{"t": "intent", "n": 1}\n{"t": "ack", "n"')
    assert _read_log(log) == [{"t": "intent", "n": 1}]

    events = tmp_path / "traces" / "events.jsonl"
    events.parent.mkdir()
    whole = b'{"at": 1.0, "event": "checkpoint"}\n'
    cut = b'{"at": 2.0, "ev'
    pad = b" " * (PAGE_SIZE - len(whole) - len(cut))
    events.write_bytes(whole[:-2] + pad + b"}\n" + cut + b"\n" + whole)
    _check_events(tmp_path, "here")  # the cut line ends at the page boundary
    assert _cut_lines(events, "here") == 1  # (the journal's replay may drop that many)
    events.write_bytes(whole + cut + b"\n" + whole)
    with pytest.raises(TortureFailure, match=r"events\.jsonl line 2 is torn"):
        _check_events(tmp_path, "here")
