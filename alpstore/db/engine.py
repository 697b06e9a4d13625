"""Engine setup for SQLite (embedded, the default) and any SQLAlchemy URL, plus the one
transaction helper every write goes through.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, CursorResult, Engine, create_engine, event, exc
from sqlalchemy.engine import make_url

from alpstore.errors import CorruptArchiveError, DatabaseError, StorageError, UsageError

T = TypeVar("T")

ARCHIVE_DIR = Path("traces") / "archive"
ARCHIVE_FILE = "archive.db"

SQLITE_BUSY_TIMEOUT_MS = 30_000
"""Writers wait up to 30 s for the write lock before we retry (bounded) and report."""

SQLITE_PAGE_SIZE = 4096
"""4 KiB matches the OS page and keeps one small checkpoint write to one or two pages."""

SQLITE_SYNCHRONOUS = "NORMAL"
"""In WAL mode NORMAL never corrupts and never loses a committed transaction to a process
crash (kill -9); only an OS crash or power loss may drop the last transactions. FULL would
fsync the WAL on every commit and cost ~10x per checkpoint for that last case only."""

WRITE_RETRIES = 8
"""Bounded retries with backoff when the database asks for one (busy, serialization, deadlock)."""


def inserted_id(result: CursorResult[Any]) -> int:
    """The primary key an INSERT produced."""
    key = result.inserted_primary_key
    if key is None or key[0] is None:  # pragma: no cover - every table has an integer key
        raise DatabaseError("the database did not report the inserted row's id")
    return int(key[0])


def sqlite_path_for_root(root: Path) -> Path:
    """Where the embedded archive of a run root lives (AR-4)."""
    return root / ARCHIVE_DIR / ARCHIVE_FILE


def _sqlite_on_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # we issue BEGIN ourselves (see _sqlite_on_begin)
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cur.execute(f"PRAGMA page_size={SQLITE_PAGE_SIZE}")
    mode = cur.execute("PRAGMA journal_mode=WAL").fetchone()
    if mode and str(mode[0]).lower() not in {"wal", "memory"}:
        cur.execute("PRAGMA journal_mode").fetchone()
    cur.execute(f"PRAGMA synchronous={SQLITE_SYNCHRONOUS}")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def _sqlite_on_begin(conn: Connection) -> None:
    # Writers take the write lock up front (BEGIN IMMEDIATE): a deferred transaction that later
    # upgrades to a writer can fail with SQLITE_BUSY regardless of busy_timeout.
    mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
    conn.exec_driver_sql(f"BEGIN {mode}")


class Database:
    """An engine plus the transaction helpers (``atomic`` for writes, ``read`` for reads)."""

    def __init__(self, engine: Engine, *, location: str) -> None:
        self.engine = engine
        self.location = location
        self.dialect = engine.dialect.name
        self._local = threading.local()

    @property
    def is_sqlite(self) -> bool:
        """True for the embedded SQLite backend."""
        return self.dialect == "sqlite"

    def _conn(self) -> Connection:
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            conn = self.engine.connect()
            self._local.conn = conn
        return conn

    @contextmanager
    def atomic(self) -> Iterator[Connection]:
        """One write transaction; nested calls become savepoints.

        Raises:
            DatabaseError: the database refused the write (after bounded retries are exhausted
                by ``retrying``) or went away.
        """
        conn = self._conn()
        if conn.in_transaction():
            with conn.begin_nested():
                yield conn
            return
        if self.is_sqlite:
            conn = conn.execution_options(sqlite_begin="IMMEDIATE")
        with translate_errors(self.location), conn.begin():
            yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read transaction: one consistent snapshot for the duration of the block."""
        conn = self._conn()
        if conn.in_transaction():
            yield conn
            return
        with translate_errors(self.location), conn.begin():
            yield conn

    def retrying(self, fn: Callable[[], T], *, what: str) -> T:
        """Run ``fn`` (which opens its own transaction), retrying transient conflicts.

        Raises:
            DatabaseError: still conflicting after ``WRITE_RETRIES`` attempts.
        """
        delay = 0.01
        for attempt in range(WRITE_RETRIES):
            try:
                return fn()
            except DatabaseError as err:
                if not getattr(err, "transient", False) or attempt == WRITE_RETRIES - 1:
                    if getattr(err, "transient", False):
                        raise DatabaseError(
                            f"{what}: gave up after {WRITE_RETRIES} attempts ({err.message})",
                            hint="another writer held the archive too long; try again",
                        ) from err
                    raise
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        """Close this thread's connection and dispose of the engine."""
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
        self.engine.dispose()


TRANSIENT_MARKERS = (
    "database is locked",
    "busy",
    "could not serialize",
    "deadlock detected",
    "serialization failure",
)


@contextmanager
def translate_errors(location: str) -> Iterator[None]:
    """Turn driver errors into one-line alpstore errors that name the archive."""
    try:
        yield
    except exc.DBAPIError as err:
        text = str(err.orig) if err.orig is not None else str(err)
        first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
        low = first.lower()
        if "file is not a database" in low or "malformed" in low or "disk image" in low:
            raise CorruptArchiveError(
                f"archive {location} is damaged: {first}",
                hint="restore it from a copy; `alpstore archive verify` names what it can read",
            ) from err
        if "readonly" in low or "read-only" in low:
            raise StorageError(f"archive {location} is read-only: {first}") from err
        if "disk is full" in low or "no space" in low or "disk i/o" in low:
            raise StorageError(
                f"archive {location}: {first}", hint="free space and try again; nothing was written"
            ) from err
        dberr = DatabaseError(f"archive {location}: {first}")
        dberr.transient = any(m in low for m in TRANSIENT_MARKERS)  # type: ignore[attr-defined]
        raise dberr from err


def open_database(
    *, root: Path | None = None, url: str | None = None, create: bool = True
) -> Database:
    """Open (and migrate to head) the archive of ``root`` or at ``url``.

    Raises:
        UsageError: neither given, or the URL is malformed.
        StorageError: the run root cannot be created or written.
        NotFoundError: ``create`` is False and there is no archive there.
    """
    from alpstore.db.migrate import ensure_schema
    from alpstore.errors import NotFoundError

    if url:
        try:
            parsed = make_url(url)
        except exc.ArgumentError as err:
            raise UsageError(f"database URL {url!r} is not valid: {err}") from err
        location = parsed.render_as_string(hide_password=True)
        if parsed.get_backend_name() == "sqlite":
            engine = _sqlite_engine(url)
        else:
            try:
                engine = create_engine(url, pool_pre_ping=True, future=True)
            except (ImportError, ModuleNotFoundError) as err:
                raise UsageError(
                    f"database URL {location}: driver not installed ({err.name})",
                    hint="pip install 'alpstore[postgres]'",
                ) from err
            except exc.ArgumentError as err:
                raise UsageError(f"database URL {location} is not valid: {err}") from err
    else:
        if root is None:
            raise UsageError("no run root and no database URL given")
        path = sqlite_path_for_root(root)
        if not path.exists():
            if not create:
                raise NotFoundError(
                    f"no archive at {path}",
                    hint="create one with any write, e.g. `alpstore archive put`",
                )
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise StorageError(f"cannot create {path.parent}: {err.strerror}") from err
        elif path.is_dir():
            raise UsageError(f"{path} is a directory, expected an archive file")
        location = str(path)
        engine = _sqlite_engine(f"sqlite:///{path}")
    db = Database(engine, location=location)
    try:
        ensure_schema(db)
    except BaseException:
        db.close()
        raise
    return db


def _sqlite_engine(url: str) -> Engine:
    engine = create_engine(url, future=True)
    event.listen(engine, "connect", _sqlite_on_connect)
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine
