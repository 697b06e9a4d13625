"""An SQLite archive opened for reading on the ``sqlite3`` driver alone, without SQLAlchemy
(about 0.2 s to import): what the reading commands need, nothing more. It never creates the
file, never writes, never changes the journal mode, never migrates; it checks the schema is
this alpstore's head with plain SQL.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

from alpstore.db.failures import driver_error, not_utf8
from alpstore.db.names import (
    NO_ARCHIVE_HINT,
    SQLITE_BUSY_TIMEOUT_MS,
    check_revision,
    foreign_tables,
)
from alpstore.errors import NotFoundError, UsageError

if TYPE_CHECKING:
    from sqlalchemy import Connection


class ReadableDatabase(Protocol):
    """What a reader needs of a database: ``Database`` and ``LiteDatabase`` both offer it."""

    location: str

    @property
    def is_sqlite(self) -> bool:
        """True for an SQLite archive."""
        ...

    @property
    def is_postgresql(self) -> bool:
        """True for a PostgreSQL archive."""
        ...

    def read(self) -> AbstractContextManager[Connection | LiteConnection]:
        """A read transaction (one snapshot for the block)."""
        ...

    def in_transaction(self) -> bool:
        """True while this thread is inside a transaction."""
        ...

    def on_rollback(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` when a write transaction rolls back."""
        ...

    def on_write_end(self, hook: Callable[[bool], None]) -> None:
        """Call ``hook(committed)`` when an outermost write transaction ends."""
        ...

    def close(self) -> None:
        """Release the connections."""
        ...


class LiteConnection:
    """One ``sqlite3`` connection, inside a read transaction while :meth:`LiteDatabase.read`
    lends it out. ``alpstore.db.raw`` runs statements on it as on an SQLAlchemy connection.
    """

    dialect_name = "sqlite"

    def __init__(self, driver: sqlite3.Connection) -> None:
        self.driver = driver
        """The ``sqlite3`` connection (opened read-only)."""

    def cursor(self) -> sqlite3.Cursor:
        """A new cursor of the driver connection."""
        return self.driver.cursor()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        """Run one statement (``?`` parameters); returns the cursor."""
        return self.driver.execute(sql, tuple(params))

    def in_transaction(self) -> bool:
        """True inside the read transaction."""
        return self.driver.in_transaction


class LiteDatabase:
    """An SQLite archive file opened read-only with the ``sqlite3`` driver.

    The parts of ``Database`` a reader uses: ``read``, ``is_sqlite``, ``is_postgresql``,
    ``location``, ``in_transaction``, ``on_rollback``, ``on_write_end``, ``close``.
    ``atomic`` refuses: nothing is ever written through it.
    """

    dialect = "sqlite"

    def __init__(self, path: str | os.PathLike[str], *, location: str | None = None) -> None:
        """Open ``path`` and check its schema.

        Raises:
            NotFoundError: no file there, or it holds no archive.
            UsageError: ``path`` is a directory.
            SchemaVersionError: the schema is older (``alpstore db upgrade``) or newer.
            CorruptArchiveError: the file is not a database.
        """
        self.path = os.path.abspath(path)
        self.location = str(path) if location is None else location
        if os.path.isdir(self.path):
            raise UsageError(f"{self.location} is a directory, expected an archive file")
        if not os.path.exists(self.path):
            raise NotFoundError(f"no archive at {self.location}", hint=NO_ARCHIVE_HINT)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._drivers: list[sqlite3.Connection] = []
        self._closed = False
        try:
            with self.read() as conn:
                tables = {str(r[0]) for r in conn.execute(_TABLES).fetchall()}
            refusal = foreign_tables(self.location, tables)
            if refusal is not None:
                raise refusal
            check_revision(self.location, self._revision(), _known_revisions)
        except BaseException:
            self.close()
            raise

    @property
    def is_sqlite(self) -> bool:
        """Always True."""
        return True

    @property
    def is_postgresql(self) -> bool:
        """Always False."""
        return False

    def _driver(self) -> sqlite3.Connection:
        """This thread's connection, opened on first use with the engine's reading pragmas."""
        driver: sqlite3.Connection | None = getattr(self._local, "driver", None)
        if driver is not None:
            return driver
        if self._closed:
            raise UsageError(f"archive {self.location} is closed")
        with self._translated():
            driver = self._connect()
        with self._lock:
            self._drivers.append(driver)
        self._local.driver = driver
        return driver

    def _connect(self) -> sqlite3.Connection:
        """A new connection to the file, read-only, with the engine's reading pragmas."""
        uri = f"file:{quote(self.path)}?mode=ro"
        driver = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        driver.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        driver.execute("PRAGMA foreign_keys=ON")
        return driver

    def _revision(self) -> str | None:
        """The archive's ``alembic_version``, or None when it has none (no archive)."""
        with self.read() as conn:
            found = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
            ).fetchone()
            if found is None:
                return None
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        return None if row is None else str(row[0])

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except UnicodeDecodeError as err:
            raise not_utf8(self.location, err) from err
        except sqlite3.Error as err:
            raise driver_error(
                self.location,
                str(err),
                fallback=type(err).__name__,
                operational=isinstance(err, sqlite3.OperationalError),
            ) from err

    def in_transaction(self) -> bool:
        """True while this thread is inside :meth:`read`."""
        return bool(getattr(self._local, "depth", 0))

    @contextmanager
    def read(self) -> Iterator[LiteConnection]:
        """A read transaction: one consistent snapshot for the duration of the block (nested
        calls share the outer one).

        Raises:
            StorageError: a statement tried to write (the file is opened read-only).
        """
        depth = getattr(self._local, "depth", 0)
        if depth:
            yield self._local.conn
            return
        driver = self._driver()
        conn = LiteConnection(driver)
        with self._translated():
            driver.execute("BEGIN")
            self._local.depth, self._local.conn = 1, conn
            try:
                yield conn
            finally:
                self._local.depth, self._local.conn = 0, None
                if driver.in_transaction:
                    driver.execute("ROLLBACK")

    @contextmanager
    def atomic(self, *, snapshot: bool = False) -> Iterator[LiteConnection]:
        """Refused: a LiteDatabase never writes.

        Raises:
            UsageError: always.
        """
        raise UsageError(
            f"archive {self.location} is opened for reading: it cannot be written",
            hint="open it for writing (without read_only) to change it",
        )
        yield  # pragma: no cover - a generator, for the context manager

    def in_write(self) -> bool:
        """Always False: nothing is written through a LiteDatabase."""
        return False

    def on_rollback(self, hook: Callable[[], None]) -> None:
        """Accepted and never called: no write transaction rolls back here."""

    def on_write_end(self, hook: Callable[[bool], None]) -> None:
        """Accepted and never called: no write transaction ends here."""

    def close(self) -> None:
        """Close every connection this database opened (in any thread)."""
        self._closed = True
        with self._lock:
            drivers, self._drivers = self._drivers, []
        for driver in drivers:
            with contextlib.suppress(sqlite3.Error):
                driver.close()
        self._local = threading.local()


_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table'"


def refuse_foreign_sqlite(path: Path, location: str) -> None:
    """Refuse an SQLite file that holds someone else's tables, before anything opens it for
    writing (a write connection switches the journal mode to WAL and migrates): the file is
    read with a read-only connection, and left byte for byte as it was. A missing or empty
    file, or one that is not a database at all (reported by the opening that follows), passes.

    Raises:
        UsageError: the file holds tables, and not alpstore's.
    """
    try:
        if path.stat().st_size == 0:
            return
    except OSError:
        return
    try:
        driver = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
    except sqlite3.Error:
        return
    try:
        tables = {str(r[0]) for r in driver.execute(_TABLES).fetchall()}
    except (sqlite3.Error, UnicodeDecodeError):  # a damaged file: the opening that follows says so
        return
    finally:
        driver.close()
    refusal = foreign_tables(location, tables)
    if refusal is not None:
        raise refusal


def _known_revisions() -> set[str]:
    """Every revision the migrations define (imports Alembic: only for a schema not at head)."""
    from alpstore.db.migrate import known_revisions

    return known_revisions()


def lite_path(url: str) -> Path | None:
    """The file a plain ``sqlite:///PATH`` URL names, or None for any other URL (those open
    through SQLAlchemy).
    """
    for prefix in ("sqlite:///", "sqlite+pysqlite:///"):
        if url.startswith(prefix):
            rest = url[len(prefix) :]
            if rest and "?" not in rest and rest != ":memory:" and not rest.startswith("file:"):
                return Path(rest)
    return None
