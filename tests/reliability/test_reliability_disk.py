"""Disk full and read-only run roots: the error is clear, nothing half-written, the archive stays
valid. Needs mount(2) (a tiny tmpfs, a read-only bind mount); skipped with the reason otherwise."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from alpstore.continuity.paths import ExecutionPaths
from alpstore.continuity.pins import add_pin
from alpstore.errors import AlpstoreError, StorageError
from alpstore.maintenance import verify
from alpstore.portable.deep import export_snapshot, snapshot_of_checkpoint
from alpstore.portable.files import write_checkpoint_file
from alpstore.store import Store
from tests.backend_pass import sqlite_only
from tests.conftest import run_cli


def _mount(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *args], capture_output=True, text=True, check=False)


def _can_mount(probe: Path) -> str | None:
    """None when mounting works here, else why not."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    probe.mkdir()
    result = _mount("-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe))
    if result.returncode != 0:
        return f"mount is not permitted here: {result.stderr.strip()}"
    subprocess.run(["umount", str(probe)], check=False)
    return None


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MiB tmpfs (grown later by remount to check the archive)."""
    sqlite_only("fills the disk under the run root's SQLite file")
    reason = _can_mount(tmp_path / "probe")
    if reason:
        pytest.skip(reason)
    mnt = tmp_path / "disk"
    mnt.mkdir()
    assert _mount("-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)).returncode == 0
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _incompressible(i: int) -> str:
    return os.urandom(24 * 1024).hex() + f" turn {i}"


def _fill(store: Store) -> tuple[dict[int, list[Any]], AlpstoreError]:
    """Commit turns until the disk refuses one; return what was acknowledged and the error."""
    session = store.create_session(session_id="full")
    acked: dict[int, list[Any]] = {}
    history: list[Any] = []
    for i in range(10_000):
        turn = [
            {"role": "user", "content": f"q{i}"},
            {"role": "tool", "content": _incompressible(i)},
        ]
        try:
            ck = session.commit_turn(turn, kernel={"q": {}, "run": {"i": i}})
        except AlpstoreError as err:
            return acked, err
        history = history + turn
        acked[ck.id] = history
    raise AssertionError("the disk never filled up")


def test_disk_full_during_checkpoints_is_clear_and_the_archive_stays_valid(tiny_disk: Path) -> None:
    root = tiny_disk / "run"
    with Store.open(root) as store:
        acked, err = _fill(store)
        assert isinstance(err, StorageError), f"{type(err).__name__}: {err}"
        assert "full" in err.message or "space" in err.message, err.message
        assert acked
    # the CLI says so too, in one line, with nothing written
    big = json.dumps([{"role": "tool", "content": _incompressible(i)} for i in range(8)])
    result = run_cli("--root", str(root), "session", "append", "full", "-", input=big)
    assert result.code != 0 and "Traceback" not in result.err and "internal error" not in result.err
    assert result.err.startswith("alpstore: error:"), result.err
    # a deep export to the full disk leaves no partial file
    out = tiny_disk / "export.json"
    with Store.open(root) as store:
        doc = export_snapshot(
            store, snapshot_of_checkpoint(store, store.get_checkpoint(max(acked)))
        )
        with pytest.raises(StorageError):
            write_checkpoint_file(doc, out)
    assert not out.exists()
    assert not [p for p in tiny_disk.iterdir() if p.name.startswith(".export")]
    # pins on a full disk: refused, checkpoint.json untouched
    paths = ExecutionPaths.of(tiny_disk / "alp", "exec_full")
    with pytest.raises(StorageError):
        add_pin(paths, "decision", "this cannot be written " * 100)
    # once there is room again, everything acknowledged is there and verifies
    assert _mount("-o", "remount,size=64m", str(tiny_disk)).returncode == 0
    with Store.open(root) as store:
        report = verify(store)
        assert report.ok, [p.line() for p in report.problems]
        for ck_id, history in acked.items():
            got = [e.value for e in store.hydrate(store.get_checkpoint(ck_id), verify=True)]
            assert got == history
        store.get_session("full").commit_turn([{"role": "user", "content": "room again"}])


def test_a_read_only_run_root_is_a_clear_error_and_changes_nothing(tmp_path: Path) -> None:
    sqlite_only("mounts the run root holding the SQLite file read-only")
    reason = _can_mount(tmp_path / "probe")
    if reason:
        pytest.skip(reason)
    root = tmp_path / "run"
    with Store.open(root) as store:
        s = store.create_session(session_id="ro")
        for i in range(5):
            s.commit_turn([{"role": "user", "content": f"q{i}"}])
    view = tmp_path / "ro-view"
    view.mkdir()
    assert _mount("--bind", str(root), str(view)).returncode == 0
    try:
        assert _mount("-o", "remount,ro,bind", str(view)).returncode == 0
        before = (root / "traces" / "archive" / "archive.db").read_bytes()
        result = run_cli(
            "--root", str(view), "session", "append", "ro", "--role", "user", "--content", "refused"
        )
        assert result.code != 0, result
        assert "Traceback" not in result.err and "internal error" not in result.err, result.err
        assert result.err.startswith("alpstore: error:") and "read-only" in result.err.lower(), (
            result.err
        )
        assert (root / "traces" / "archive" / "archive.db").read_bytes() == before
    finally:
        subprocess.run(["umount", "-l", str(view)], check=False)
    with Store.open(root) as store:
        assert verify(store).ok
        assert len(store.get_session("ro").history()) == 5
