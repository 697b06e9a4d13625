"""SQLite WAL checkpoints run off the committing transaction (issue 16).

alpstore's connections of a writable archive never checkpoint inside a commit
(``wal_autocheckpoint=0``); a background thread with a connection of its own copies the WAL into
the database once ``CHECKPOINT_FRAMES`` frames wait, lets the log start over once it is long, and
``Store.close`` folds it in. Bounds: the committing connection checkpoints itself when the thread
falls behind, and gets SQLite's own autocheckpoint back when the WAL's state cannot be read.
"""

from __future__ import annotations

import base64
import os
import random
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import alpstore.db.walcheckpoint as walcheckpoint
from alpstore.db.database import SQLITE_PAGE_SIZE
from alpstore.db.engine import sqlite_path_for_root
from alpstore.db.walcheckpoint import CHECKPOINT_FRAMES, WalCheckpointer
from alpstore.sessions import Session
from alpstore.store import Store
from alpstore.ui.readonly import open_read_only

pytestmark = pytest.mark.sqlite_only("checks SQLite's write-ahead log beside the archive file")

THREAD = "alpstore-wal-checkpoint"
FRAME_BYTES = SQLITE_PAGE_SIZE + 24  # a page and its frame header


def _text(rng: random.Random, size: int) -> str:
    """Text that zstd cannot shrink much: each message takes a few pages."""
    return base64.b64encode(rng.randbytes(size)).decode()


def _commit(session: Session, rng: random.Random, turns: int, *, size: int = 9000) -> None:
    for _ in range(turns):
        session.commit_turn([{"role": "user", "content": _text(rng, size)}])


def _wal(store: Store) -> WalCheckpointer:
    assert store.db.wal is not None, "a writable SQLite archive has a WAL checkpointer"
    return store.db.wal


def _waiting(store: Store) -> int:
    state = _wal(store).wal_frames()
    assert state is not None, "the WAL-index header was readable"
    return state[1]


def _checkpoint_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD]


def _wait_until(predicate: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    st = Store.open(tmp_path)
    try:
        yield st
    finally:
        st.close()


class Gate:
    """Holds the background pass until released; records which threads checkpoint."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.threads: list[str] = []
        self._real_pass = WalCheckpointer._pass
        self._real_checkpoint = walcheckpoint._checkpoint

    def pass_(self, cp: WalCheckpointer, conn: sqlite3.Connection) -> None:
        self.entered.set()
        assert self.release.wait(60), "the test never released the checkpointer"
        self._real_pass(cp, conn)

    def checkpoint(self, conn: sqlite3.Connection, mode: str) -> tuple[int, int, int]:
        self.threads.append(threading.current_thread().name)
        return self._real_checkpoint(conn, mode)


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    g = Gate()
    monkeypatch.setattr(WalCheckpointer, "_pass", lambda cp, conn: g.pass_(cp, conn))
    monkeypatch.setattr(walcheckpoint, "_checkpoint", g.checkpoint)
    yield g
    g.release.set()  # a failed test must not leave the thread held


def test_commits_never_checkpoint_the_background_thread_does(store: Store, gate: Gate) -> None:
    with store.db.engine.connect() as conn:  # a pooled connection, as every commit uses
        assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar_one() == 0
    session = store.create_session(name="wal")
    rng = random.Random(1)
    _commit(session, rng, 1)
    assert not _checkpoint_threads(), "no thread before the WAL needs a checkpoint"
    # grow the WAL well past SQLite's autocheckpoint limit (1,000 pages) while the background
    # pass is held: had a commit checkpointed, fewer than one commit's frames would wait
    for _ in range(400):  # about 130 turns are enough
        if _waiting(store) >= 2 * CHECKPOINT_FRAMES:
            break
        _commit(session, rng, 1)
    assert _waiting(store) >= 2 * CHECKPOINT_FRAMES, "a commit checkpointed the WAL itself"
    assert gate.entered.wait(10), "the commit past the threshold woke the background thread"
    wal_file = Path(store.db.location + "-wal")
    assert wal_file.stat().st_size >= 2 * CHECKPOINT_FRAMES * FRAME_BYTES
    assert _wal(store).inline_checkpoints == 0
    gate.release.set()
    _wait_until(
        lambda: _wal(store).background_checkpoints >= 1 and _waiting(store) < CHECKPOINT_FRAMES,
        "the background checkpoint",
    )
    assert gate.threads and set(gate.threads) == {THREAD}, gate.threads
    # the turns are all there, read back through the database
    assert session.info().turn == len(session.history())


def test_long_log_starts_over_under_continuous_writes(store: Store) -> None:
    """Turns back to back never leave every frame copied at a writer's start, so SQLite would
    never start the log over by itself: the background pass does it once the log is long."""
    cp = _wal(store)
    cp.checkpoint_frames = 200
    cp.restart_frames = cp._next_restart = 1000
    session = store.create_session(name="wal")
    rng = random.Random(2)
    largest = 0
    wal_file = Path(store.db.location + "-wal")
    for _ in range(100):
        _commit(session, rng, 5)
        largest = max(largest, wal_file.stat().st_size)
    _wait_until(lambda: cp.exclusive_checkpoints >= 1, "a pass holding the writer queue")
    assert cp.inline_checkpoints == 0
    # about 6,000 frames were committed; the log never held much more than the restart size
    assert largest <= 3 * cp.restart_frames * FRAME_BYTES, largest


def test_committing_connection_checkpoints_when_the_thread_falls_behind(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    cp = _wal(store)
    woken: list[int] = []
    monkeypatch.setattr(WalCheckpointer, "_wake", lambda self: woken.append(1))  # never runs
    cp.inline_frames = cp._next_inline = 1500
    session = store.create_session(name="wal")
    rng = random.Random(3)
    worst = 0
    for _ in range(100):
        _commit(session, rng, 1)
        worst = max(worst, _waiting(store))
    assert woken, "the background thread was asked first"
    assert cp.inline_checkpoints >= 1
    assert worst < cp.inline_frames + 200  # one commit's frames past the bound at most
    assert not _checkpoint_threads()


def test_unreadable_wal_state_gives_the_connection_sqlite_autocheckpoint_back(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(WalCheckpointer, "wal_frames", lambda self: None)
    session = store.create_session(name="wal")
    _commit(session, random.Random(4), 1)
    with store.db.engine.connect() as conn:  # the pool's one connection, used by that commit
        assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar_one() == 1000


def test_close_folds_the_log_even_when_another_connection_keeps_the_file_open(
    tmp_path: Path,
) -> None:
    rng = random.Random(5)
    st = Store.open(tmp_path)
    session = st.create_session(name="wal")
    _commit(session, rng, 40)  # below the threshold: no thread started
    assert not _checkpoint_threads()
    path = st.db.location
    other = sqlite3.connect(path)  # another process would hold it the same way
    try:
        assert other.execute("SELECT count(*) FROM checkpoints").fetchone()[0] >= 40
        assert os.path.getsize(path + "-wal") > 0
        st.close()
        assert os.path.getsize(path + "-wal") == 0, "close copied the log and truncated it"
        assert other.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        other.close()
    with Store.open(tmp_path) as again:
        assert again.session_named("wal").info().turn == 40


def test_close_stops_the_thread_and_leaves_no_log(tmp_path: Path) -> None:
    st = Store.open(tmp_path)
    session = st.create_session(name="wal")
    rng = random.Random(6)
    for _ in range(100):
        if _checkpoint_threads():
            break
        _commit(session, rng, 1)
    assert _checkpoint_threads(), "the WAL grew past the threshold: the thread started"
    turns = session.info().turn
    path = Path(st.db.location)
    st.close()
    assert not _checkpoint_threads()
    assert not Path(str(path) + "-wal").exists(), "the last connection deleted the folded log"
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        db.close()
    with Store.open(tmp_path) as again:
        assert again.session_named("wal").info().turn == turns


def test_two_stores_on_one_archive(tmp_path: Path) -> None:
    rng = random.Random(7)
    a, b = Store.open(tmp_path), Store.open(tmp_path)
    try:
        sa, sb = a.create_session(name="a"), b.create_session(name="b")
        for _ in range(60):
            _commit(sa, rng, 2)
            _commit(sb, rng, 2)
        _wait_until(
            lambda: _wal(a).background_checkpoints + _wal(b).background_checkpoints >= 1,
            "a background checkpoint",
        )
    finally:
        a.close()
        b.close()
    with Store.open(tmp_path) as st:
        assert st.session_named("a").info().turn == st.session_named("b").info().turn == 120
    assert not sqlite_path_for_root(tmp_path).with_name("archive.db-wal").exists()


def test_reading_opens_start_no_checkpointer(tmp_path: Path) -> None:
    with Store.open(tmp_path) as st:
        _commit(st.create_session(name="wal"), random.Random(8), 3)
    ro = open_read_only(tmp_path)
    try:
        assert ro.db.wal is None
        assert ro.session_named("wal").info().turn == 3
    finally:
        ro.close()
    reader = Store.open(tmp_path, create=False, migrate=False)  # how `alpstore sql` opens
    try:
        assert reader.session_named("wal").info().turn == 3
        assert not _checkpoint_threads()
    finally:
        reader.close()
    assert not _checkpoint_threads()


def test_relative_run_root_survives_a_change_of_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The thread starts at the first checkpoint, maybe after the process changed directory:
    it must open the archive it was made for, never create one elsewhere."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    st = Store.open(Path("run"))
    try:
        monkeypatch.chdir(tmp_path / "b")
        session = st.create_session(name="wal")
        rng = random.Random(9)
        for _ in range(100):
            if _wal(st).background_checkpoints:
                break
            _commit(session, rng, 5)
        _wait_until(lambda: _wal(st).background_checkpoints >= 1, "a background checkpoint")
        assert _wal(st).error is None
        assert not (tmp_path / "b" / "run" / "traces" / "archive").exists(), "no archive there"
    finally:
        st.close()
    assert not (tmp_path / "a" / "run" / "traces" / "archive" / "archive.db-wal").exists()
