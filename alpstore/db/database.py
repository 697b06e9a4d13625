"""The one transaction helper every write goes through (``Database.atomic``; ``read`` for
reads), on an SQLAlchemy engine set up for SQLite or PostgreSQL, and the translation of the
driver's errors into alpstore's.
"""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import Connection, CursorResult, Engine, create_engine, event, exc

from alpstore.db.failures import WRITE_RETRIES as WRITE_RETRIES
from alpstore.db.failures import driver_error, not_utf8, retry_transient
from alpstore.db.sqlitefile import SQLITE_PAGE_SIZE as SQLITE_PAGE_SIZE
from alpstore.db.sqlitefile import SQLITE_QUEUE_SUFFIX as SQLITE_QUEUE_SUFFIX
from alpstore.db.sqlitefile import SQLITE_SYNCHRONOUS as SQLITE_SYNCHRONOUS
from alpstore.db.sqlitefile import WriterQueue, configure_writer
from alpstore.db.walcheckpoint import WalCheckpointer
from alpstore.errors import DatabaseError

T = TypeVar("T")

COMMIT_READ_BACK_S = 5.0
"""After a COMMIT whose reply was lost: how long to try reading back whether it landed."""


def inserted_id(result: CursorResult[Any]) -> int:
    """The primary key an INSERT produced."""
    key = result.inserted_primary_key
    if key is None or key[0] is None:  # pragma: no cover - every table has an integer key
        raise DatabaseError("the database did not report the inserted row's id")
    return int(key[0])


def _sqlite_on_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
    configure_writer(dbapi_conn)


def _sqlite_on_begin(conn: Connection) -> None:
    # Writers take the write lock up front (BEGIN IMMEDIATE): a deferred transaction that later
    # upgrades to a writer can fail with SQLITE_BUSY regardless of busy_timeout.
    # On the driver connection: through ``exec_driver_sql`` the BEGIN of every transaction
    # paid SQLAlchemy's statement machinery (about a tenth of a turn); errors are wrapped as
    # SQLAlchemy would, so ``translate_errors`` still names them (and retries a busy one).
    mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
    statement = f"BEGIN {mode}"
    try:
        conn.connection.driver_connection.execute(statement)  # type: ignore[union-attr]
    except sqlite3.Error as err:
        raise exc.DBAPIError.instance(statement, None, err, sqlite3.Error) from err


class Database:
    """An engine plus the transaction helpers (``atomic`` for writes, ``read`` for reads)."""

    def __init__(
        self, engine: Engine, *, location: str, background_checkpoints: bool = False
    ) -> None:
        self.engine = engine
        self.location = location
        self.dialect = engine.dialect.name
        self._local = threading.local()
        self._rollback_hooks: list[Callable[[], None]] = []
        self._end_hooks: list[Callable[[bool], None]] = []
        database = engine.url.database
        path = (  # absolute now, as SQLAlchemy makes the file's: the process may change directory
            os.path.abspath(database)
            if self.is_sqlite
            and database
            and database != ":memory:"
            and not database.startswith("file:")
            else None
        )
        self._queue = WriterQueue(path)
        bounds: dict[str, float] = getattr(engine, "alpstore_bounds", {})
        self.lock_timeout_s = bounds.get("lock_timeout_s")
        """PostgreSQL: the server's lock wait bound, which lock retries count against too."""
        self.pool_timeout_s = bounds.get("pool_timeout_s", 30.0)
        """PostgreSQL: how long a call waits for a connection at the server's cap."""
        self.wal: WalCheckpointer | None = None
        """SQLite file opened for writing: checkpoints the WAL off the committing transaction
        (``background_checkpoints``; read-only opens leave it None)."""
        if background_checkpoints and path is not None:
            self.wal = WalCheckpointer(path, exclusive=self._writer_queue)
            event.listen(engine, "connect", self.wal.on_connect)

    def on_rollback(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` whenever a write transaction (or savepoint) is rolled back.

        Caches of ids written inside a transaction must forget them when it fails: SQLite
        hands a rolled-back rowid to the next insert, so a cached id could name another row.
        """
        self._rollback_hooks.append(hook)

    def _rolled_back(self) -> None:
        for hook in self._rollback_hooks:
            hook()

    @property
    def is_sqlite(self) -> bool:
        """True for the embedded SQLite backend."""
        return self.dialect == "sqlite"

    @property
    def is_postgresql(self) -> bool:
        """True for the PostgreSQL backend."""
        return self.dialect == "postgresql"

    def _current(self) -> Connection | None:
        """This thread's connection while it is inside a transaction, else None."""
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is not None and not conn.closed and conn.in_transaction():
            return conn
        return None

    @contextmanager
    def _checked_out(self) -> Iterator[Connection]:
        """A pooled connection for one outermost transaction, back in the pool after it.

        Nothing is pinned to a thread between transactions: a framework that calls in from
        short-lived threads (LangGraph's executor) reuses pooled connections instead of
        opening one per thread and leaving it behind.
        """
        conn = self._connect()
        self._local.conn = conn
        try:
            yield conn
        finally:
            self._local.conn = None
            with contextlib.suppress(Exception):  # a connection the server dropped
                conn.close()

    def _connect(self) -> Connection:
        """A connection from the pool. At the server's connection cap (``too many
        connections``, PostgreSQL) it waits, up to ``pool_timeout_s``, for a pooled one to come
        back instead of failing: the pool's own connections are enough, another is only wanted.

        Raises:
            DatabaseError: the server cannot be reached, or is still at its cap after the wait.
        """
        deadline: float | None = None
        delay = 0.005
        while True:
            try:
                with translate_errors(self.location):
                    return self.engine.connect()
            except DatabaseError as err:
                if not getattr(err, "at_cap", False):
                    raise
                now = time.monotonic()
                deadline = deadline if deadline is not None else now + self.pool_timeout_s
                if now >= deadline:
                    raise DatabaseError(
                        f"{err.message} (waited {self.pool_timeout_s:g} s, "
                        "alpstore_pool_timeout, for a connection)",
                        hint=err.hint,
                    ) from err
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 0.1)

    def in_transaction(self) -> bool:
        """True while this thread's connection is inside a transaction."""
        return self._current() is not None

    @contextmanager
    def atomic(self, *, snapshot: bool = False, foreign_keys: bool = True) -> Iterator[Connection]:
        """One write transaction; nested calls become savepoints.

        ``snapshot``: every statement sees the same snapshot (on PostgreSQL REPEATABLE READ,
        taken at the first statement after ``exclude_writers``; SQLite's transactions always
        do). For work that reads the whole archive in several statements and must see it
        whole: GC's mark, repair.

        ``foreign_keys`` False (SQLite; ignored elsewhere and by a nested call): the
        transaction runs without foreign-key enforcement, for a caller that checks its deletes
        itself in one pass (GC's sweep: SQLite checks each deleted parent row by scanning a
        child table that has no index on the key, ``segment_entries.blob_id`` since 0008).
        The connection's enforcement is back on before it returns to the pool.

        Raises:
            DatabaseError: the database refused the write (after bounded retries are exhausted
                by ``retrying``) or went away.
        """
        try:
            current = self._current()
            if current is not None:
                with translate_errors(self.location), current.begin_nested():
                    yield current
                return
            with self._checked_out() as conn:
                self._local.writing = True
                try:
                    if self.is_sqlite:
                        conn.execution_options(sqlite_begin="IMMEDIATE")
                        driver = conn.connection.driver_connection
                        if not foreign_keys:  # a no-op inside a transaction: set before BEGIN
                            driver.execute("PRAGMA foreign_keys=OFF")  # type: ignore[union-attr]
                        try:
                            with (
                                self._writer_queue(),
                                translate_errors(self.location),
                                conn.begin(),
                            ):
                                yield conn
                        finally:
                            if not foreign_keys:
                                driver.execute("PRAGMA foreign_keys=ON")  # type: ignore[union-attr]
                        if self.wal is not None:  # committed: checkpoint off this transaction
                            self.wal.committed(driver)  # type: ignore[arg-type]
                    else:
                        if snapshot:
                            conn.execution_options(isolation_level="REPEATABLE READ")
                        yield from self._pg_transaction(conn, read_back=not snapshot)
                except BaseException:
                    self._ended(committed=False)
                    raise
                finally:
                    self._local.writing = False
            self._ended(committed=True)
        except BaseException:
            self._rolled_back()
            raise

    def _pg_transaction(self, conn: Connection, *, read_back: bool) -> Iterator[Connection]:
        """One PostgreSQL write transaction on ``conn`` (inside ``atomic``), its COMMIT
        checked: a COMMIT whose reply never came (the connection broke, a stall past the call
        bound) is read back by the transaction's id on a fresh connection (``read_back``;
        ``pgconn.BoundedConnection`` learnt it with the BEGIN) — committed: the write stands,
        as if the reply had come; rolled back: a plain failure, safe to retry. When it cannot be
        read back the outcome is reported as unknown, never as "nothing was written".

        Raises:
            DatabaseError: the write failed, or its COMMIT's outcome is unknown.
        """
        dbapi = None
        with translate_errors(self.location):
            trans = conn.begin()
            dbapi = conn.connection.dbapi_connection
        if read_back and dbapi is not None and hasattr(dbapi, "alp_want_xid"):
            dbapi.alp_xid = None
            dbapi.alp_want_xid = True
        try:
            with translate_errors(self.location):
                yield conn
        except BaseException:
            with contextlib.suppress(Exception):
                trans.rollback()
            raise
        finally:
            if dbapi is not None and hasattr(dbapi, "alp_want_xid"):
                dbapi.alp_want_xid = False
        try:
            trans.commit()
        except exc.DBAPIError as err:
            # read after: a transaction begun with its COMMIT (raw.begin_later) learns it there
            xid = getattr(dbapi, "alp_xid", None)
            lost = driver_error(
                self.location,
                str(err.orig) if err.orig is not None else str(err),
                fallback=type(err).__name__,
                state=str(getattr(err.orig, "sqlstate", None) or ""),
                invalidated=err.connection_invalidated,
                operational=isinstance(err, exc.OperationalError),
            )
            if not getattr(lost, "connection_lost", False) and not err.connection_invalidated:
                raise lost from err  # the server refused the COMMIT: it was rolled back
            if getattr(dbapi, "alp_unsent", False):
                raise lost from err  # gone before anything was sent (raw.begin_later): retried
            status = self._read_back(xid)
            if status == "committed":
                return  # it landed: the reply alone was lost
            reason = lost.message.split(": ", 1)[-1]
            if status == "aborted":
                gone = DatabaseError(
                    f"database {self.location}: the connection broke during COMMIT ({reason}); "
                    "read back: the server rolled the transaction back, nothing was written",
                    hint="try again",
                )
                gone.reconnect = True  # type: ignore[attr-defined]
                raise gone from err
            raise DatabaseError(
                f"database {self.location}: the connection broke during COMMIT ({reason}); "
                "outcome unknown: the write may or may not have been stored",
                hint="read it back (e.g. `alpstore session log`) before writing it again: a "
                "retry could store it twice",
            ) from err

    def _read_back(self, xid: int | None) -> str | None:
        """``txid_status`` of ``xid`` on a fresh connection: ``committed``, ``aborted``, or None
        when it cannot be told within ``COMMIT_READ_BACK_S`` (no id, the server unreachable).
        """
        if xid is None:
            return None
        from sqlalchemy import text

        deadline = time.monotonic() + COMMIT_READ_BACK_S
        while time.monotonic() < deadline:
            try:
                with self.engine.connect() as conn:
                    status = conn.execute(
                        text("SELECT txid_status(:xid)"), {"xid": xid}
                    ).scalar_one_or_none()
                    conn.rollback()
            except exc.DBAPIError:
                status = "unreachable"
            if status in ("committed", "aborted"):
                return str(status)
            if status is None:
                return None  # too old to tell (never, this soon)
            time.sleep(0.05)  # "in progress" (the server has not finished it) or no server yet
        return None

    def on_write_end(self, hook: Callable[[bool], None]) -> None:
        """Call ``hook(committed)`` whenever one of this thread's outermost write transactions
        (``atomic``) ends: after its commit, or once it rolled back. For what must not tell of
        a write that never happened (the run root's event log).
        """
        self._end_hooks.append(hook)

    def _ended(self, *, committed: bool) -> None:
        for hook in self._end_hooks:
            hook(committed)

    def in_write(self) -> bool:
        """True while this thread is inside a write transaction (``atomic``)."""
        return bool(getattr(self._local, "writing", False))

    def writer_queue(self) -> contextlib.AbstractContextManager[None]:
        """Wait for this archive's turn to write (SQLite), for work that must not use
        ``atomic`` (a VACUUM runs outside a transaction); nothing on PostgreSQL.
        """
        return self._writer_queue() if self.is_sqlite else contextlib.nullcontext()

    def _writer_queue(self) -> contextlib.AbstractContextManager[None]:
        """SQLite writers of one archive queue on an OS file lock before ``BEGIN IMMEDIATE``
        (``sqlitefile.WriterQueue``).
        """
        return self._queue.turn()

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read transaction: one consistent snapshot for the duration of the block.

        On PostgreSQL that takes REPEATABLE READ: under the default READ COMMITTED each
        statement would see what was committed when it began, so a read in several statements
        (the views, then their segments; every table, for ``verify``) could see a writer's
        commit in some of them and not in others.
        """
        current = self._current()
        if current is not None:
            yield current
            return
        with self._checked_out() as conn, translate_errors(self.location):
            if self.is_postgresql:
                conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn

    def exclude_writers(self, conn: Connection) -> None:
        """Inside a write transaction: make every other writer wait until it ends.

        GC's mark and sweep must see an archive no one adds references to. SQLite's
        ``BEGIN IMMEDIATE`` already excludes other writers; on PostgreSQL, EXCLUSIVE locks on
        ``blobs`` and ``segments`` wait for the writers that touched them and hold off new ones
        (every reference to a blob or a segment locks it), while readers go on.
        """
        if self.is_postgresql:
            conn.exec_driver_sql("LOCK TABLE blob_rows, pack_frames, segments IN EXCLUSIVE MODE")
            # A writer that only set NULL references (a new session, an empty checkpoint)
            # took and released its share lock at once: it may still commit during our
            # transaction. ``atomic(snapshot=True)`` keeps the reads that follow on one
            # snapshot, taken now, with every writer that holds a reference committed.

    def retrying(self, fn: Callable[[], T], *, what: str) -> T:
        """Run ``fn`` (which opens its own transaction), retrying transient conflicts.

        Each attempt re-runs the whole transaction. Inside an enclosing transaction ``fn`` runs
        once: only the outermost transaction can be retried.

        Raises:
            DatabaseError: still conflicting after ``WRITE_RETRIES`` attempts.
        """
        if self._current() is not None:
            return fn()
        return retry_transient(fn, what=what, lock_timeout_s=self.lock_timeout_s)

    @contextmanager
    def outside(self) -> Iterator[sqlite3.Connection]:
        """SQLite: a driver connection (pooled) outside any transaction, for a ``VACUUM``."""
        raw = self.engine.raw_connection()
        try:
            driver = raw.driver_connection
            assert isinstance(driver, sqlite3.Connection)
            yield driver
        finally:
            raw.close()

    def committed_outside(self, dbapi_conn: Any) -> None:
        """After a write that did not go through ``atomic`` (a VACUUM) on ``dbapi_conn``: let
        the WAL checkpointer see what it added.
        """
        if self.wal is not None:
            self.wal.committed(dbapi_conn)

    def close(self) -> None:
        """Stop the WAL checkpointer (it folds the WAL in), then dispose of the engine (every
        pooled connection) and the queue file descriptors.
        """
        if self.wal is not None:
            self.wal.close()
        self._queue.close()
        self.engine.dispose()


@contextmanager
def translate_errors(location: str) -> Iterator[None]:
    """Turn driver errors into one-line alpstore errors that name the archive.

    The location is always rendered without its password, and so are the driver's messages.
    """
    try:
        yield
    except UnicodeDecodeError as err:  # sqlite3 decoding a damaged schema or error text
        raise not_utf8(location, err) from err
    except exc.DBAPIError as err:
        raise driver_error(
            location,
            str(err.orig) if err.orig is not None else str(err),
            fallback=type(err).__name__,
            state=str(getattr(err.orig, "sqlstate", None) or ""),
            invalidated=err.connection_invalidated,
            operational=isinstance(err, exc.OperationalError),
        ) from err
    except sqlite3.Error as err:  # the driver-level read and write paths (db/raw.py)
        raise driver_error(
            location,
            str(err),
            fallback=type(err).__name__,
            operational=isinstance(err, sqlite3.OperationalError),
        ) from err
    except Exception as err:
        psycopg = sys.modules.get("psycopg")
        if psycopg is None or not isinstance(err, psycopg.Error):
            raise
        raise driver_error(
            location,
            str(err),
            fallback=type(err).__name__,
            state=str(getattr(err, "sqlstate", None) or ""),
            operational=isinstance(err, psycopg.OperationalError),
        ) from err


def sqlite_engine(url: str) -> Engine:
    """An SQLite engine with alpstore's pragmas on connect and its own ``BEGIN``."""
    engine = create_engine(url, future=True)
    event.listen(engine, "connect", _sqlite_on_connect)
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine
