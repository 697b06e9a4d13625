"""Read-only SQL for users, with helper functions registered on SQLite connections.

Read-only is enforced by the database, not by looking at the text: on SQLite an authorizer
allows only reading (no ATTACH, no VACUUM INTO, no PRAGMA but a few introspection ones, no
transaction control, no ``load_extension``) and ``query_only`` is on; on PostgreSQL the
transaction is ``READ ONLY`` and always rolled back, only one statement that starts as a query
is sent, and it may call only allow-listed functions (:mod:`alpstore.sqlhelpers.postgres`).
Both bound the time (a progress handler on SQLite, ``statement_timeout`` on PostgreSQL), the
rows and bytes held, and one row before it is held (SQLite's length limit; a row measured on
the server).

The package is a feature over the store: it imports the kernel (``errors``, ``codec``) and
``db.engine``; ``postgres`` imports only ``errors``. No other feature imports it but the CLI.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from alpstore.codec import DIGEST_SIZE, Digest, parse_digest
from alpstore.errors import AlpstoreError, Interrupted, UsageError

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from alpstore.core.store import CoreStore as Store

DEFAULT_TIMEOUT_S = 10.0
"""A query is stopped after this many seconds unless ``timeout`` says otherwise."""
DEFAULT_MAX_ROWS = 1_000
"""Rows kept by default; more are counted as cut, never silently dropped."""
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
"""Bytes of cell values kept in memory (a handful of megabyte-sized blobs, not a gigabyte)."""
PROGRESS_OPCODES = 10_000
"""SQLite calls the progress handler every this many virtual-machine steps (~1 ms)."""

_READ_PRAGMAS = frozenset(
    {
        "table_info",
        "table_xinfo",
        "table_list",
        "index_list",
        "index_info",
        "index_xinfo",
        "foreign_key_list",
        "collation_list",
        "function_list",
    }
)
"""Introspection pragmas a user may run; every other one is refused (some write or reconfigure)."""
_DENIED_FUNCTIONS = frozenset({"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"})
_QUERY_START = re.compile(r"^\s*(?:--[^\n]*\n\s*|/\*.*?\*/\s*)*(\w+)", re.DOTALL)
_PG_QUERY_WORDS = frozenset({"select", "with", "values", "table", "explain", "show"})


@dataclass(frozen=True)
class QueryResult:
    """What a query returned: its columns, the rows kept, and whether more were cut.

    ``cut`` is None when every row is here, else why rows are missing: ``"rows"`` (more than
    ``max_rows``) or ``"bytes"`` (the cells kept reached ``max_bytes``).
    """

    columns: list[str]
    rows: list[tuple[Any, ...]]
    cut: str | None = None


def _register(store: Store, raw: sqlite3.Connection) -> None:
    archive = store.archive

    def blob_text(digest: Any) -> str | None:
        if digest is None:
            return None
        try:
            d = bytes(digest) if isinstance(digest, bytes | memoryview) else b""
            if len(d) != DIGEST_SIZE:
                d = parse_digest(str(digest))
            return archive.get_raw(Digest(d), verify=False)[1].decode("utf-8")
        except AlpstoreError:
            return None

    def digest_hex(digest: Any) -> str | None:
        return bytes(digest).hex() if isinstance(digest, bytes | memoryview) else None

    raw.create_function("blob_text", 1, blob_text)
    raw.create_function("digest_hex", 1, digest_hex)
    for name in ("printf", "format"):
        raw.create_function(name, -1, _bounded_printf(raw, name))


_PRINTF_SPEC = re.compile(r"%([-+ 0#,!]*)(\*|\d+)?(?:\.(\*|\d+))?([a-zA-Z%])")
_PRECISION_GROWS = frozenset("cdiuxXoeEfgG")
"""Conversions whose output is at least as long as their precision (``%s`` is cut to it)."""


def _printf_grows_past(fmt: str, args: tuple[Any, ...], limit: int) -> bool:
    """Whether a width or precision in ``fmt`` asks for more than ``limit`` characters.

    SQLite's printf writes a long ``%.*c`` one character at a time even after it gave up on
    the result (seconds for 300 million, with no progress handler between): asked for more
    than the limit, it is refused before it starts. Unsure (an argument that is not an int),
    it says no and SQLite decides.
    """
    rest = iter(args)
    for _flags, width, precision, conversion in _PRINTF_SPEC.findall(fmt):
        if conversion == "%":
            continue
        try:
            w = int(next(rest, 0)) if width == "*" else int(width or 0)
            p = int(next(rest, 0)) if precision == "*" else int(precision or 0)
        except (TypeError, ValueError):
            return False
        if abs(w) > limit or (conversion in _PRECISION_GROWS and p > limit):
            return True
        next(rest, None)
    return False


def _bounded_printf(raw: sqlite3.Connection, name: str) -> Callable[..., Any]:
    """SQLite's own ``printf``/``format``, run on a connection of its own with the same length
    limit, that fails on a result over the limit: the built-in quietly returns NULL there
    (``printf('%.*c', 300000000, 'x')`` under ``--max-bytes`` would be a silent NULL).
    """
    aux = sqlite3.connect(":memory:", check_same_thread=False)

    def printf(*args: Any) -> Any:
        if not args or args[0] is None:
            return None
        limit = raw.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)
        if _printf_grows_past(str(args[0]), args[1:], limit):
            raise OverflowError("string or blob too big")
        aux.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limit)
        marks = ", ".join("?" * len(args))
        value = aux.execute(f"SELECT {name}({marks})", args).fetchone()[0]
        if value is None:
            raise OverflowError("string or blob too big")  # sqlite3 reports SQLITE_TOOBIG
        return value

    return printf


def sqlite_authorizer(
    action: int, arg1: str | None, arg2: str | None, _db: str | None, _trigger: str | None
) -> int:
    """Allow reading only: the authorizer of a user's query on SQLite."""
    if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE):
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION:
        return (
            sqlite3.SQLITE_DENY if (arg2 or "").lower() in _DENIED_FUNCTIONS else sqlite3.SQLITE_OK
        )
    if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in _READ_PRAGMAS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def _row_bytes(row: tuple[Any, ...]) -> int:
    return sum(len(v) if isinstance(v, str | bytes | memoryview) else 16 for v in row)


def _value_bytes(row: tuple[Any, ...]) -> int:
    """The bytes of a row's text and binary values (what ``--max-bytes`` bounds one row by)."""
    return sum(len(v) if isinstance(v, str | bytes | memoryview) else 0 for v in row)


@contextmanager
def _sqlite_guard(
    raw: sqlite3.Connection,
    conn: Connection,
    deadline: float,
    cancelled: Callable[[], bool],
    max_bytes: int,
) -> Iterator[list[str]]:
    """Authorizer, ``query_only``, a progress handler and a length limit for one query (no
    string or blob over ``max_bytes`` is built: ``printf('%.*c', 300000000, 'x')`` fails at
    once instead of allocating); all undone after it.

    Yields a list that names why the query was stopped (``timeout`` or ``cancelled``), if it was.
    """
    stopped: list[str] = []

    def progress() -> int:
        if cancelled():
            stopped.append("cancelled")
            return 1
        if time.monotonic() > deadline:
            stopped.append("timeout")
            return 1
        return 0

    conn.exec_driver_sql("PRAGMA query_only = ON")
    # the schema is read (its CREATE statements may be longer than the limit) before the
    # limit is set; the read transaction's snapshot keeps it from being read again
    conn.exec_driver_sql("SELECT count(*) FROM sqlite_master").all()
    length = raw.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, min(max_bytes, 2**31 - 1))
    raw.set_authorizer(sqlite_authorizer)
    raw.set_progress_handler(progress, PROGRESS_OPCODES)
    try:
        yield stopped
    finally:
        raw.set_progress_handler(None, 0)
        raw.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, length)
        raw.set_authorizer(None)
        conn.exec_driver_sql("PRAGMA query_only = OFF")


def _first_word(query: str) -> str:
    match = _QUERY_START.match(query)
    return match[1].lower() if match else ""


def run_query(
    store: Store,
    query: str,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
    cancelled: Callable[[], bool] = lambda: False,
) -> QueryResult:
    """Run ``query`` read-only and return its columns and at most ``max_rows`` rows.

    ``timeout`` (seconds, 0 for none) bounds the time; ``cancelled`` is polled while the query
    runs on SQLite, and stops it when it returns True.

    Raises:
        UsageError: the statement is not a query, tries to write or reach the file system, is
            not valid SQL, or was stopped by the timeout or ``cancelled``.
    """
    if not query.strip():
        raise UsageError("empty query")
    if max_rows < 0 or max_bytes < 1 or timeout < 0:
        raise UsageError("max_rows, max_bytes and timeout must be positive")
    db = store.db
    deadline = time.monotonic() + (timeout or float("inf"))
    from alpstore.db.engine import translate_errors

    with db.read() as conn, translate_errors(db.location):
        dbapi = conn.connection.dbapi_connection
        if isinstance(dbapi, sqlite3.Connection):
            _register(store, dbapi)
            with _sqlite_guard(dbapi, conn, deadline, cancelled, max_bytes) as stopped:
                try:
                    return _fetch_sqlite(dbapi, query, max_rows, max_bytes)
                except AlpstoreError:
                    raise
                except Exception as err:
                    raise _query_error(err, stopped, timeout, on_sqlite=True) from err
        try:
            return _run_postgresql(conn, query, timeout, max_rows, max_bytes)
        except AlpstoreError:
            raise
        except Exception as err:
            raise _query_error(err, [], timeout, on_sqlite=False) from err
        finally:  # never committed: whatever the query did is undone
            trans = conn.get_transaction()
            if trans is not None and trans.is_active:
                trans.rollback()


def _run_postgresql(
    conn: Connection, query: str, timeout: float, max_rows: int, max_bytes: int
) -> QueryResult:
    """Check the query (one statement, only allowed functions), then stream its rows, each
    measured on the server (:mod:`alpstore.sqlhelpers.postgres`), in a READ ONLY transaction.
    """
    from alpstore.sqlhelpers import postgres

    word = _first_word(query)
    if word not in _PG_QUERY_WORDS:
        raise UsageError(
            "refused: `alpstore sql` only reads: one query (SELECT, WITH, VALUES, "
            "TABLE, EXPLAIN, SHOW)"
        )
    dbapi: Any = conn.connection.dbapi_connection
    if timeout:
        conn.exec_driver_sql(f"SET LOCAL statement_timeout = {int(timeout * 1000)}")
    described = postgres.describe(dbapi, query)
    body = postgres.query_body(query, word)
    if word != "show":
        postgres.check_functions(dbapi, body)
    conn.exec_driver_sql("SET TRANSACTION READ ONLY")
    measured = word not in ("show", "explain") and bool(described.names)
    statement = postgres.bounded_statement(body, described, max_bytes) if measured else query
    rows: list[tuple[Any, ...]] = []
    held = 0
    cut: str | None = None
    cursor = dbapi.cursor()
    try:
        for r in cursor.stream(statement):
            if len(rows) >= max_rows:
                cut = "rows"
                break
            row = tuple(r[:-1]) if measured else tuple(r)
            size = int(r[-1]) if measured else _value_bytes(row)
            if size > max_bytes:
                if not rows:
                    raise _row_too_big(size, max_bytes)
                cut = "bytes"
                break
            held += _row_bytes(row)
            if held > max_bytes and rows:
                cut = "bytes"
                break
            rows.append(row)
    finally:
        cursor.close()
    return QueryResult(described.names, rows, cut)


def _row_too_big(size: int | None, max_bytes: int) -> UsageError:
    held = f"{size} bytes" if size is not None else "a value"
    return UsageError(
        f"the first row is over --max-bytes ({held} > {max_bytes}); nothing was kept",
        hint="cut long values in the query (substr(x, 1, n)), or raise --max-bytes",
    )


def _fetch_sqlite(
    dbapi: sqlite3.Connection, query: str, max_rows: int, max_bytes: int
) -> QueryResult:
    """Run ``query`` on the connection's own driver cursor, as written, and keep its rows.

    Not through SQLAlchemy's ``text()``, which reads ``:word`` as a bind parameter even inside
    a string literal (``'{"turn":12}'``). SQLite builds no value over ``max_bytes``
    (``SQLITE_LIMIT_LENGTH``, set by the guard): a value that would be longer ends the query,
    and only the rows before it are kept.
    """
    cursor = dbapi.cursor()
    rows: list[tuple[Any, ...]] = []
    cut: str | None = None
    try:
        try:
            cursor.execute(query)
            if cursor.description is None:
                raise UsageError("the statement returns no rows; `alpstore sql` only reads")
            columns = [str(d[0]) for d in cursor.description]
            held = 0
            for r in cursor:  # one row at a time: an error keeps the rows before it
                if len(rows) >= max_rows:
                    cut = "rows"
                    break
                row = tuple(r)
                if _value_bytes(row) > max_bytes:
                    if not rows:
                        raise _row_too_big(_value_bytes(row), max_bytes)
                    cut = "bytes"
                    break
                held += _row_bytes(row)
                if held > max_bytes and rows:
                    cut = "bytes"
                    break
                rows.append(row)
        except sqlite3.DataError as err:  # SQLITE_TOOBIG: a value over the length limit
            if "too big" not in str(err):
                raise
            if not rows:
                raise _row_too_big(None, max_bytes) from err
            cut = "bytes"
            columns = [str(d[0]) for d in cursor.description or ()]
    finally:
        cursor.close()
    return QueryResult(columns, rows, cut)


def _query_error(
    err: Exception, stopped: list[str], timeout: float, on_sqlite: bool
) -> AlpstoreError:
    msg = (str(getattr(err, "orig", None) or err).strip().splitlines() or [""])[0]
    if "cancelled" in stopped:
        return Interrupted("query interrupted (Ctrl-C); nothing was changed")
    if "timeout" in stopped or "statement timeout" in msg:
        return UsageError(
            f"query stopped after {timeout:g} s (--timeout)",
            hint="narrow the query (LIMIT, WHERE), or give it longer with --timeout SECONDS",
        )
    if "not authorized" in msg or "authorization denied" in msg:
        return UsageError(
            f"refused: {msg}; `alpstore sql` only reads the archive (no ATTACH, VACUUM, "
            "writes, transaction control or configuring PRAGMAs)"
        )
    if "read-only transaction" in msg:
        return UsageError(f"refused: {msg}; `alpstore sql` only reads the archive")
    helpers = [n for n in ("blob_text", "digest_hex") if f"{n}(" in msg.replace(" ", "")]
    if helpers and not on_sqlite:
        return UsageError(
            f"query failed: {helpers[0]}() exists on SQLite archives only",
            hint="on PostgreSQL: encode(digest, 'hex') for hex digests, "
            "`alpstore archive get DIGEST` for a blob's text",
        )
    return UsageError(f"query failed: {msg}")
