"""An SQLite archive opened for writing on the ``sqlite3`` driver alone, without SQLAlchemy
(about 0.2 s to import, twice a bare import loop's whole run): the imports' write path
(issue 41). It writes as ``Database`` does — the same connection pragmas and writers' queue
(``sqlitefile``), ``BEGIN IMMEDIATE``, savepoints for nested transactions, the background WAL
checkpointer, rollback and write-end hooks, bounded retries — and runs the same plain SQL
(``db/raw.py``) on the same file. It creates a new archive from the schema snapshot
(``fresh.py``), as ``ensure_schema`` does; it never migrates: :func:`open_writer` decides,
before anything imports SQLAlchemy, whether an archive can be written this way, and says None
(open it through ``Database``) for anything else — PostgreSQL, a URL with options, an archive
at another schema revision.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from alpstore.db.failures import retry_transient
from alpstore.db.fresh import create_in, head_statements
from alpstore.db.lite import LiteConnection, LiteDatabase, lite_path, refuse_foreign_sqlite
from alpstore.db.names import SCHEMA_HEAD, check_revision, foreign_tables, sqlite_path_for_root
from alpstore.db.sqlitefile import WriterQueue, configure_writer, inside_root, note_created
from alpstore.db.walcheckpoint import WalCheckpointer
from alpstore.errors import StorageError, UsageError

T = TypeVar("T")


class LiteWriteDatabase(LiteDatabase):
    """An SQLite archive file at this alpstore's schema head, written on the ``sqlite3`` driver
    (see the module). ``atomic`` is ``Database.atomic`` for SQLite; ``read``, ``retrying``,
    ``writer_queue``, ``committed_outside``, ``exclude_writers``, ``on_rollback`` and
    ``on_write_end`` behave as ``Database``'s.
    """

    def __init__(self, path: str | os.PathLike[str], *, location: str | None = None) -> None:
        """Open ``path`` for writing (see :func:`open_writer`, which decides it may be).

        Raises:
            SchemaVersionError: the file's schema is not this alpstore's head (checked again
                under the write lock: another process may have changed it meanwhile).
            StorageError, CorruptArchiveError: as ``Database`` reports them.
        """
        import threading

        self.path = os.path.abspath(path)
        self.location = str(path) if location is None else location
        self._local = threading.local()
        self._lock = threading.Lock()
        self._drivers: list[sqlite3.Connection] = []
        self._closed = False
        self._rollback_hooks: list[Callable[[], None]] = []
        self._end_hooks: list[Callable[[bool], None]] = []
        self._queue = WriterQueue(self.path)
        self.lock_timeout_s: float | None = None
        """PostgreSQL's lock wait bound in ``Database``; None here (SQLite's busy timeout)."""
        self.wal: WalCheckpointer | None = WalCheckpointer(self.path, exclusive=self._queue.turn)
        try:
            self._create_or_check()
        except BaseException:
            self.close()
            raise

    def _connect(self) -> sqlite3.Connection:
        """A new read-write connection with ``Database``'s pragmas (``configure_writer``)."""
        driver = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            configure_writer(driver)
            if self.wal is not None:
                self.wal.on_connect(driver, None)
        except BaseException:
            driver.close()
            raise
        return driver

    def _create_or_check(self) -> None:
        """A file without a schema gets the head schema (the snapshot); one with a schema must
        be alpstore's at head.
        """
        with self.read() as conn:  # an archive already there: no write lock taken to open it
            tables = {str(r[0]) for r in conn.execute(_TABLES).fetchall()}
        if not tables:
            statements = head_statements(SCHEMA_HEAD)
            if statements is None:  # pragma: no cover - the snapshot ships with the package
                raise StorageError(f"{self.location}: no schema snapshot at {SCHEMA_HEAD}")
            with self.atomic() as conn:  # (another process may have created it meanwhile)
                tables = {str(r[0]) for r in conn.execute(_TABLES).fetchall()}
                if not tables:
                    create_in(conn.driver, statements)
                    return
        refusal = foreign_tables(self.location, tables)
        if refusal is not None:
            raise refusal
        check_revision(self.location, self._revision(), _known_revisions)

    def on_rollback(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` whenever a write transaction (or savepoint) is rolled back."""
        self._rollback_hooks.append(hook)

    def on_write_end(self, hook: Callable[[bool], None]) -> None:
        """Call ``hook(committed)`` whenever an outermost write transaction ends."""
        self._end_hooks.append(hook)

    def in_write(self) -> bool:
        """True while this thread is inside a write transaction (``atomic``)."""
        return bool(getattr(self._local, "writing", False))

    @contextmanager
    def atomic(
        self, *, snapshot: bool = False, foreign_keys: bool = True
    ) -> Iterator[LiteConnection]:
        """One write transaction (``BEGIN IMMEDIATE``, after this archive's writers' queue);
        nested calls become savepoints. ``snapshot`` changes nothing on SQLite (its
        transactions always see one snapshot); ``foreign_keys`` False runs the outermost
        transaction without foreign-key enforcement (as ``Database.atomic``).

        Raises:
            DatabaseError: the database refused the write or went away.
            UsageError: a write inside a read transaction.
        """
        try:
            if getattr(self._local, "depth", 0):
                if not self.in_write():
                    raise UsageError("a write inside a read transaction")
                with self._savepoint() as conn:
                    yield conn
                return
            driver = self._driver()
            conn = LiteConnection(driver)
            try:
                if not foreign_keys:  # a no-op inside a transaction: set before BEGIN
                    driver.execute("PRAGMA foreign_keys=OFF")
                with self._queue.turn(), self._translated():
                    driver.execute("BEGIN IMMEDIATE")
                    self._local.depth, self._local.conn, self._local.writing = 1, conn, True
                    try:
                        yield conn
                        driver.execute("COMMIT")
                    finally:
                        self._local.depth, self._local.conn, self._local.writing = 0, None, False
                        if driver.in_transaction:
                            driver.execute("ROLLBACK")
            except BaseException:
                self._ended(committed=False)
                raise
            finally:
                if not foreign_keys:
                    with contextlib.suppress(sqlite3.Error):
                        driver.execute("PRAGMA foreign_keys=ON")
            if self.wal is not None:  # committed: checkpoint off this transaction
                self.wal.committed(driver)
            self._ended(committed=True)
        except BaseException:
            for hook in self._rollback_hooks:
                hook()
            raise

    @contextmanager
    def _savepoint(self) -> Iterator[LiteConnection]:
        conn: LiteConnection = self._local.conn
        depth: int = self._local.depth
        name = f"alp_sp{depth}"
        with self._translated():
            conn.driver.execute(f"SAVEPOINT {name}")
            self._local.depth = depth + 1
            try:
                yield conn
            except BaseException:
                if conn.driver.in_transaction:
                    conn.driver.execute(f"ROLLBACK TO {name}")
                    conn.driver.execute(f"RELEASE {name}")
                raise
            else:
                conn.driver.execute(f"RELEASE {name}")
            finally:
                self._local.depth = depth

    def _ended(self, *, committed: bool) -> None:
        for hook in self._end_hooks:
            hook(committed)

    def retrying(self, fn: Callable[[], T], *, what: str) -> T:
        """Run ``fn`` (which opens its own transaction), retrying transient conflicts; inside
        an enclosing transaction once (as ``Database.retrying``).
        """
        if self.in_transaction():
            return fn()
        return retry_transient(fn, what=what, lock_timeout_s=None)

    def writer_queue(self) -> contextlib.AbstractContextManager[None]:
        """Wait for this archive's turn to write, for work outside a transaction (VACUUM)."""
        return self._queue.turn()

    def exclude_writers(self, conn: LiteConnection) -> None:
        """Nothing to do: ``BEGIN IMMEDIATE`` already excludes every other writer."""

    @contextmanager
    def outside(self) -> Iterator[sqlite3.Connection]:
        """A driver connection outside any transaction, for a ``VACUUM`` (as
        ``Database.outside``).
        """
        with self._translated():
            driver = self._connect()
        try:
            yield driver
        finally:
            driver.close()

    def committed_outside(self, dbapi_conn: sqlite3.Connection) -> None:
        """After a write outside ``atomic`` (a VACUUM): let the WAL checkpointer see it."""
        if self.wal is not None:
            self.wal.committed(dbapi_conn)

    def close(self) -> None:
        """Stop the WAL checkpointer (it folds the WAL in), close every connection and the
        queue's descriptors.
        """
        if self.wal is not None:
            self.wal.close()
        super().close()
        self._queue.close()


_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table'"


def _known_revisions() -> set[str]:
    """Every revision the migrations define (imports Alembic: only for a schema not at head)."""
    from alpstore.db.migrate import known_revisions

    return known_revisions()


def writable_path(root: Path | None, url: str | None) -> Path | None:
    """The SQLite file an archive opened for writing with ``root`` / ``url`` is, when it can be
    written on the driver alone (:func:`open_writer`), else None. Cheap: a few ``stat`` calls
    and, for an existing file, one read-only look at its revision.
    """
    if url:
        path = lite_path(url)
    elif root is not None:
        path = sqlite_path_for_root(root)
    else:
        return None
    if path is None or path.is_dir():
        return None
    if not path.exists() or path.stat().st_size == 0:
        return path
    try:
        probe = sqlite3.connect(f"file:{_quote(path)}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        row = probe.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
        ).fetchone()
        if row is None:  # no archive yet (or someone else's file: Database refuses it)
            empty = probe.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
            return path if empty else None
        version = probe.execute("SELECT version_num FROM alembic_version").fetchall()
    except (sqlite3.Error, UnicodeDecodeError):
        return None  # damaged: Database names the problem
    finally:
        probe.close()
    return path if version == [(SCHEMA_HEAD,)] else None


def open_writer(
    *, root: Path | None, url: str | None, create: bool = True
) -> LiteWriteDatabase | None:
    """The archive of ``root`` (or at ``url``) opened for writing on the ``sqlite3`` driver
    alone, or None when it must be opened through ``Database`` (PostgreSQL, a URL with
    options, an archive needing a migration or from a newer alpstore, a damaged file, no
    archive and ``create`` False). A new run-root archive is created from the snapshot.

    Raises:
        StorageError: the run root is not a folder, or the archive's folder cannot be made.
        UsageError: the file holds someone else's tables.
    """
    if root is not None and root.exists() and not root.is_dir():
        raise StorageError(f"run root {root} is not a directory")
    path = writable_path(root, url)
    if path is None:
        return None
    location = url if url else str(path)
    if not url:
        assert root is not None
        inside_root(path, root)  # a symlink out of the run root: refused
    if not path.exists():
        if not create or url:
            return None  # Database says there is none (or creates it, for a URL)
        try:
            note_created(path)
        except OSError as err:
            raise StorageError(f"cannot create {path.parent}: {err.strerror}") from err
    refuse_foreign_sqlite(path, location)
    return LiteWriteDatabase(path, location=location)


def _quote(path: Path) -> str:
    from urllib.parse import quote

    return quote(str(path))
