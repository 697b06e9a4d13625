"""What every writer of an SQLite archive file does, on the ``sqlite3`` driver alone (no
SQLAlchemy): the connection's pragmas, the writers' queue, and the run-root archives a
process created (removed again when its command is refused). ``Database`` (SQLAlchemy) and
``litewrite.LiteWriteDatabase`` (the ``sqlite3`` driver alone) both use them, so the two
write paths set up a connection and queue their writers the same way.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: SQLite's busy timeout alone serialises
    fcntl = None  # type: ignore[assignment]

from alpstore.db.names import SQLITE_BUSY_TIMEOUT_MS
from alpstore.errors import StorageError

SQLITE_QUEUE_SUFFIX = "-writers"
"""Beside ``archive.db``: the file SQLite writers queue on (an OS lock, never any content)."""

SQLITE_PAGE_SIZE = 1024
"""1 KiB pages (set when an archive is created; an older archive keeps its own). Rows are small
(a blob's row is about 54 bytes, its message packed or compressed elsewhere), and every table
or index costs at least one page, empty or not. Measured on the 1,000-turn benchmark corpus
(benchmarks/bench_import_bytes.py, issue 33): 0.306x raw against 0.319x with 2 KiB pages, and
512-byte pages are larger again (0.309x: more of each page is its header)."""

SQLITE_SYNCHRONOUS = "NORMAL"
"""In WAL mode NORMAL never corrupts and never loses a committed transaction to a process
crash (kill -9); only an OS crash or power loss may drop the last transactions. FULL would
fsync the WAL on every commit and cost ~10x per checkpoint for that last case only."""


def configure_writer(dbapi_conn: sqlite3.Connection) -> None:
    """A new connection of a writable archive: alpstore issues ``BEGIN`` itself, waits up to
    the busy timeout, 1 KiB pages (a new file), WAL, ``synchronous=NORMAL``, foreign keys on.
    """
    dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cur.execute(f"PRAGMA page_size={SQLITE_PAGE_SIZE}")
    mode = wal_mode(cur)
    if mode and str(mode[0]).lower() not in {"wal", "memory"}:
        cur.execute("PRAGMA journal_mode").fetchone()
    cur.execute(f"PRAGMA synchronous={SQLITE_SYNCHRONOUS}")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def wal_mode(cur: sqlite3.Cursor) -> Any:
    """``PRAGMA journal_mode=WAL``, waiting like ``busy_timeout`` when another connection holds
    a lock: switching a new file to WAL answers "database is locked" at once, without calling
    the busy handler, while other processes open the same new archive (1 in 10 of four
    threads opening one new file, measured).
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    delay = 0.001
    while True:
        try:
            return cur.execute("PRAGMA journal_mode=WAL").fetchone()
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


class WriterQueue:
    """SQLite writers of one archive queue on an OS file lock before ``BEGIN IMMEDIATE``.

    SQLite's own busy handler polls with growing sleeps, so with many writers the write
    lock sits idle while they sleep (measured: 8 writers reached a third of one writer's
    rate, p99 latency 0.6 s). A blocking ``flock`` hands the lock to the next writer the
    moment it is free. ``busy_timeout`` stays as the fallback for writers outside alpstore.
    """

    def __init__(self, path: str | None) -> None:
        """``path``: the archive file (the queue is ``path`` + :data:`SQLITE_QUEUE_SUFFIX`), or
        None for none (an in-memory database: the busy timeout alone serialises).
        """
        self.path = None if path is None else path + SQLITE_QUEUE_SUFFIX
        self._fds: list[int] = []
        self._lock = threading.Lock()

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Wait for this archive's turn to write; the turn ends with the block."""
        fd = self._take_fd()
        if fd is None:
            yield
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            with self._lock:
                self._fds.append(fd)

    def _take_fd(self) -> int | None:
        """A free descriptor of the queue file (opened on demand, reused after).

        Each is its own open file description, so ``flock`` excludes the threads of this
        process from one another as well as other processes.
        """
        with self._lock:
            if self._fds:
                return self._fds.pop()
        if fcntl is None or self.path is None:
            return None
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return None  # e.g. a read-only directory: the busy timeout alone serialises

    def close(self) -> None:
        """Close the queue file's descriptors."""
        with self._lock:
            fds, self._fds = self._fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def inside_root(path: Path, root: Path) -> Path:
    """``path`` when it stays under ``root`` with every symlink followed (as
    ``alpstore.fileio.inside_root``, a module of this layer db may not import).

    Raises:
        StorageError: ``path`` (or a folder on the way) leads out of ``root``.
    """
    real_root, real = os.path.realpath(root), os.path.realpath(path)
    if os.path.commonpath([real_root, real]) != real_root:
        raise StorageError(
            f"{path}: a symlink leads out of the run root (to {real}); refused",
            hint="remove the symlink, or point alpstore at another run root",
        )
    return path


CREATED: list[tuple[Path, list[Path]]] = []
"""The run-root archives this process created, each with the folders it made for it (deepest
first): a refused command removes them again (:func:`discard_new_archives`)."""


def note_created(path: Path) -> None:
    """Make the folders of a run-root archive about to be created at ``path`` (remembered in
    :data:`CREATED`, with the folders made for it).

    Raises:
        OSError: a folder cannot be made.
    """
    missing = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    CREATED.append((path, missing))


def discard_new_archives() -> None:
    """Remove the run-root archives this process created, with the folders made for them, when
    they still hold nothing (no session, no blob): a refused command into an empty folder
    leaves it as it was. An archive that took data (another process may have written to it
    meanwhile) is kept. Call it after the archive is closed.
    """
    from urllib.parse import quote

    created, CREATED[:] = list(CREATED), []
    for path, folders in created:
        try:
            conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
            try:
                held = sum(
                    int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
                    for table in ("sessions", "blobs", "lg_threads")
                )
            finally:
                conn.close()
        except (sqlite3.Error, OSError):
            held = 0 if path.exists() and path.stat().st_size == 0 else 1
        if held:
            continue
        for suffix in ("", "-wal", "-shm", "-journal", SQLITE_QUEUE_SUFFIX):
            with contextlib.suppress(OSError):
                os.unlink(f"{path}{suffix}")
        for folder in folders:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty: anything else written there stays
