"""SQLite WAL checkpoints off the committing transaction.

SQLite checkpoints its write-ahead log inside the commit that grows it past
``wal_autocheckpoint`` pages (1,000 by default): with ``synchronous=NORMAL`` that commit then
copies about 2 MB into the database file and fsyncs both files, 10–25 ms on a turn whose median
is about a millisecond (benchmarks/bench_turn_latency.py). alpstore's own connections of a
writable archive set ``wal_autocheckpoint=0`` and a :class:`WalCheckpointer` does the work:

- After every commit the committing thread reads how many WAL frames wait to be copied — the
  ``mxFrame`` and ``nBackfill`` fields of the WAL-index header in the ``-shm`` file, whose layout
  is part of SQLite's documented file format (https://www.sqlite.org/walformat.html) and shared by
  every SQLite since 3.7.0 — a ``stat`` and an 8-byte read, a few microseconds.
- Past ``CHECKPOINT_FRAMES`` it wakes a background thread that runs
  ``PRAGMA wal_checkpoint(PASSIVE)`` on a connection of its own. ``sqlite3`` releases the GIL
  while SQLite works, so the copy and the fsyncs run beside the next turns; a passive
  checkpoint never blocks a writer or a reader.
- SQLite starts the log over only when a writer begins while every frame has been copied. With
  turns arriving faster than a checkpoint finishes that moment never comes, so once the log is
  ``RESTART_FRAMES`` long the thread copies the frames the writers added meanwhile (a short
  pass: the long copy is done) while holding alpstore's writer queue, and the next writer starts
  the log over. That short pass is the only time a writer waits for a checkpoint.
- Bounds: when the background thread does not keep up (more than ``INLINE_FRAMES`` waiting) the
  committing connection checkpoints itself, as SQLite would have; when the header cannot be
  read or the thread failed, the committing connection gets SQLite's own
  ``wal_autocheckpoint`` back. Neither happens in normal operation.
- ``close`` stops the thread and folds the log into the database with a
  ``wal_checkpoint(TRUNCATE)`` that waits for no one; the last connection to close deletes the
  log as before.

Durability does not depend on who checkpoints: a commit is durable in the WAL (a process killed
at any moment loses nothing acknowledged), and a checkpoint copies committed frames only.
Another process that did not set the pragma (an older alpstore, the ``sqlite3`` shell) keeps
checkpointing in its own commits, which is harmless. Read-only opens never get a checkpointer,
and nothing starts until the first commit.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import struct
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

CHECKPOINT_FRAMES = 1000
"""Wake the background checkpoint when this many WAL frames wait (SQLite's own default)."""

RESTART_FRAMES = 8000
"""Once the WAL is this many frames long (16 MiB with 2 KiB pages), the background pass ends
holding the writer queue so the next writer can start the log over."""

INLINE_FRAMES = 16000
"""Past this many waiting frames the committing connection checkpoints itself (the background
thread is not keeping up): the WAL cannot grow without limit."""

SQLITE_DEFAULT_AUTOCHECKPOINT = 1000
"""What a connection goes back to when the background checkpoint cannot run."""

_WAL_INDEX_VERSION = 3007000
_HEADER = struct.Struct("=I12xI")  # iVersion at 0, mxFrame at 16 (native byte order)
_BACKFILL = struct.Struct("=I")  # nBackfill at 96 (WalCkptInfo after the two header copies)
_BACKFILL_AT = 96
_READ = 100


class WalCheckpointer:
    """Background WAL checkpoints for one SQLite archive file (see the module docstring)."""

    def __init__(
        self,
        path: str,
        *,
        exclusive: Callable[[], contextlib.AbstractContextManager[None]],
        checkpoint_frames: int = CHECKPOINT_FRAMES,
        restart_frames: int = RESTART_FRAMES,
        inline_frames: int = INLINE_FRAMES,
    ) -> None:
        self.path = os.path.abspath(path)  # the process may change directory meanwhile
        self.shm_path = self.path + "-shm"
        self._exclusive = exclusive
        self.checkpoint_frames = checkpoint_frames
        self.restart_frames = restart_frames
        self.inline_frames = inline_frames
        self.background_checkpoints = 0
        """Checkpoint passes the background thread ran (for tests and benchmarks)."""
        self.exclusive_checkpoints = 0
        """Of those, the short passes that held the writer queue to let the log start over."""
        self.inline_checkpoints = 0
        """Checkpoints a committing connection ran itself (the background thread fell behind)."""
        self.error: BaseException | None = None
        """Why the background thread stopped, if it failed (the connections then autocheckpoint)."""
        self._reset()

    def _reset(self) -> None:
        """Fresh state (at creation, and in a forked child, where the parent's thread, lock and
        connection are not ours: they are dropped, never closed).
        """
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._wanted = False
        self._running = False
        self._stopping = False
        self._closed = False
        self._failed = False
        self._wrote = False
        self._shm_fd: int | None = None
        self._shm_key: tuple[int, int] | None = None
        self._next_inline = self.inline_frames
        self._next_restart = self.restart_frames

    # ------------------------------------------------------------ every connection
    def on_connect(self, dbapi_conn: sqlite3.Connection, _record: Any) -> None:
        """Engine ``connect`` hook: this connection never checkpoints inside its commits."""
        dbapi_conn.execute("PRAGMA wal_autocheckpoint=0").close()

    # ------------------------------------------------------------ the WAL's state
    def wal_frames(self) -> tuple[int, int] | None:
        """``(frames in the WAL, frames not yet copied into the database)`` from the WAL-index
        header, or None when it cannot be read (no ``-shm`` file, another layout).
        """
        if not hasattr(os, "pread"):  # pragma: no cover - Windows: SQLite's autocheckpoint
            return None
        try:
            st = os.stat(self.shm_path)
        except OSError:
            return None
        with self._lock:
            key = (st.st_dev, st.st_ino)
            if self._shm_fd is None or self._shm_key != key:  # first read, or a new file
                if self._shm_fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(self._shm_fd)
                    self._shm_fd = None
                try:
                    self._shm_fd = os.open(self.shm_path, os.O_RDONLY)
                except OSError:
                    return None
                self._shm_key = key
            try:
                buf = os.pread(self._shm_fd, _READ, 0)
            except OSError:
                return None
        if len(buf) < _READ:
            return None
        version, frames = _HEADER.unpack_from(buf, 0)
        if version != _WAL_INDEX_VERSION:
            return None
        (copied,) = _BACKFILL.unpack_from(buf, _BACKFILL_AT)
        return frames, max(0, frames - copied)

    # ------------------------------------------------------------ after a commit
    def committed(self, dbapi_conn: sqlite3.Connection) -> None:
        """Called by the thread that just committed on ``dbapi_conn`` (outside any transaction).

        Never raises: the commit is done, whatever happens here.
        """
        try:
            self._committed(dbapi_conn)
        except Exception:  # the write succeeded; let SQLite checkpoint this connection itself
            with contextlib.suppress(Exception):
                dbapi_conn.execute(f"PRAGMA wal_autocheckpoint={SQLITE_DEFAULT_AUTOCHECKPOINT}")

    def _committed(self, dbapi_conn: sqlite3.Connection) -> None:
        if self._pid != os.getpid():
            self._reset()
        if self._closed:
            return
        self._wrote = True
        state = None if self._failed else self.wal_frames()
        if state is None:
            dbapi_conn.execute(f"PRAGMA wal_autocheckpoint={SQLITE_DEFAULT_AUTOCHECKPOINT}")
            return
        frames, waiting = state
        if waiting >= self._next_inline:
            _busy, log, copied = _checkpoint(dbapi_conn, "PASSIVE")
            self.inline_checkpoints += 1
            self._next_inline = max(self.inline_frames, log - copied + self.checkpoint_frames)
            return
        if waiting >= self.checkpoint_frames or (waiting and frames >= self._next_restart):
            self._wake()

    def _wake(self) -> None:
        with self._cond:
            if self._closed:
                return
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="alpstore-wal-checkpoint", daemon=True
                )
                self._thread.start()
            if not self._running:
                self._wanted = True
                self._cond.notify()

    # ------------------------------------------------------------ the thread
    def _connect(self, timeout: float = 5.0) -> sqlite3.Connection:
        """A connection of the checkpointer's own to the archive (never creates the file)."""
        uri = f"file:{quote(self.path)}?mode=rw"
        return sqlite3.connect(
            uri, uri=True, isolation_level=None, check_same_thread=False, timeout=timeout
        )

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            conn = self._connect()
            conn.execute("PRAGMA wal_autocheckpoint=0").close()
            while True:
                with self._cond:
                    while not self._wanted and not self._stopping:
                        self._cond.wait()
                    if self._stopping:
                        break
                    self._wanted = False
                    self._running = True
                try:
                    self._pass(conn)
                finally:
                    with self._cond:
                        self._running = False
        except BaseException as err:  # the committers fall back to SQLite's autocheckpoint
            self.error = err
            self._failed = True
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):
                    self._fold_at_close(conn)
                with contextlib.suppress(Exception):
                    conn.close()

    def _pass(self, conn: sqlite3.Connection) -> None:
        """One background pass: copy what waits; if the log is long, copy the rest while
        no alpstore writer appends, so that the next one starts the log over.
        """
        _busy, log, copied = _checkpoint(conn, "PASSIVE")
        self.background_checkpoints += 1
        if log < self._next_restart:
            return
        with self._exclusive():
            _busy, log, copied = _checkpoint(conn, "PASSIVE")
        self.exclusive_checkpoints += 1
        # readers may hold frames back: try again only after as many frames again
        self._next_restart = self.restart_frames if copied >= log else log + self.restart_frames

    def _fold_at_close(self, conn: sqlite3.Connection) -> None:
        """Copy the whole log into the database and truncate it, waiting for no one (with a
        busy writer or reader it copies what it can, as PASSIVE does).
        """
        conn.execute("PRAGMA busy_timeout=0").close()
        _checkpoint(conn, "TRUNCATE")

    # ------------------------------------------------------------ closing
    def close(self) -> None:
        """Stop and join the background thread, and fold the WAL into the database (the
        thread does it before it ends; without a thread, after any commit of ours, a
        connection opened for it). Waits for no other connection.
        """
        if self._pid != os.getpid():
            self._reset()
        with self._cond:
            self._closed = True
            self._stopping = True
            thread = self._thread
            self._cond.notify()
        if thread is not None:
            thread.join()
        elif self._wrote and not self._failed:
            with contextlib.suppress(sqlite3.Error, OSError):
                conn = self._connect(timeout=0)
                try:
                    self._fold_at_close(conn)
                finally:
                    conn.close()
        with self._lock:
            if self._shm_fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._shm_fd)
                self._shm_fd = None


def _checkpoint(conn: sqlite3.Connection, mode: str) -> tuple[int, int, int]:
    """``PRAGMA wal_checkpoint(mode)``: (busy, frames in the log, frames copied)."""
    cur = conn.execute(f"PRAGMA wal_checkpoint({mode})")
    try:
        row = cur.fetchone()
    finally:
        cur.close()
    if row is None:  # pragma: no cover - the pragma always returns one row
        return 0, 0, 0
    busy, log, copied = (int(v) for v in row)
    return busy, log, copied
