"""Driver-level SQL for the few hot paths (append, checkpoint, hydrate).

SQLAlchemy Core builds and caches statements, which costs ~0.3 ms a statement — more than the
whole per-turn budget. These statements are plain SQL understood by SQLite (≥ 3.35) and
PostgreSQL alike, run on the same DBAPI connection and transaction as the Core ones; only the
parameter marker differs (``?`` vs ``%s``), translated once. A trailing row-lock clause
(``FOR NO KEY UPDATE``, ``FOR KEY SHARE``) is for PostgreSQL; SQLite, whose write transactions
hold the whole database (``BEGIN IMMEDIATE``), runs the statement without it.

Every function takes an SQLAlchemy ``Connection`` or a ``lite.LiteConnection``; SQLAlchemy is
imported only for type checking, so a reader on a LiteDatabase never loads it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from alpstore.db.lite import LiteConnection

if TYPE_CHECKING:
    from sqlalchemy import Connection

    AnyConnection = Connection | LiteConnection
    """An SQLAlchemy connection, or a :class:`LiteConnection` (an SQLite file opened for
    reading without SQLAlchemy)."""

ROW_LOCKS = (
    " FOR NO KEY UPDATE OF s",
    " FOR NO KEY UPDATE",
    " FOR UPDATE",
    " FOR KEY SHARE",
    " FOR SHARE",
)
"""Row-lock clauses that only PostgreSQL needs; stripped from the end of SQLite statements."""


@lru_cache(maxsize=256)
def _translate(sql: str, dialect: str) -> str:
    if dialect == "sqlite":
        for clause in ROW_LOCKS:
            sql = sql.removesuffix(clause)
        return sql
    return sql.replace("?", "%s")


def placeholders(n: int) -> str:
    """``?,?,…`` for an IN list of ``n`` values."""
    return ",".join("?" * n)


def dialect_of(conn: AnyConnection) -> str:
    """``"sqlite"`` or ``"postgresql"``."""
    if isinstance(conn, LiteConnection):
        return conn.dialect_name
    return str(conn.dialect.name)


def _cursor(conn: AnyConnection) -> tuple[Any, str]:
    """A DBAPI cursor of ``conn`` and its dialect's name."""
    if isinstance(conn, LiteConnection):
        return conn.cursor(), conn.dialect_name
    return conn.connection.dbapi_connection.cursor(), dialect_of(conn)  # type: ignore[union-attr]


Rows = Callable[[list[tuple[Any, ...]]], None]
"""Handed the rows of a deferred statement (``execute``'s ``then``) once they came."""


def execute(
    conn: AnyConnection,
    sql: str,
    params: Sequence[Any] = (),
    *,
    defer: bool = False,
    then: Rows | None = None,
) -> Any:
    """Run one statement on the connection's DBAPI cursor; returns the cursor.

    ``defer`` (PostgreSQL; ignored elsewhere): the caller needs nothing of the result before
    its next statement, so this one may wait for the next round trip of the transaction
    (``db/pgconn.py``); it then returns None, and ``then``, if given, is handed the rows it
    returned when they came — at the latest when the COMMIT's reply came, before the commit
    returns. A statement that does not wait (SQLite, or too large to bind client-side) hands
    them over at once. On PostgreSQL a statement also carries the deferred ones before it,
    and the first of a write transaction its ``BEGIN``, in one round trip.
    """
    if not isinstance(conn, LiteConnection) and dialect_of(conn) == "postgresql":
        # no cursor made for a statement that only joins the queue (most of a turn's)
        dbapi: Any = conn.connection.dbapi_connection
        translated = _translate(sql, "postgresql")
        batched = _pg_batched(dbapi, translated, tuple(params), defer, then)
        if batched is not _NOT_BATCHED:
            if batched is not None and then is not None:  # sent now (with a BEGIN): its rows
                then(list(batched.fetchall()) if batched.description is not None else [])
            return batched
        cur = dbapi.cursor()
        cur.execute(translated, tuple(params))
        if then is not None:
            then(list(cur.fetchall()) if cur.description is not None else [])
        return cur
    cur, dialect = _cursor(conn)
    cur.execute(_translate(sql, dialect), tuple(params))
    if then is not None:
        then(list(cur.fetchall()) if cur.description is not None else [])
    return cur


def fetch_together(
    conn: AnyConnection, statements: Sequence[tuple[str, Sequence[Any]]]
) -> list[list[Any]]:
    """The rows of each statement, run in order; on PostgreSQL in one round trip (with the
    queue and the transaction's ``BEGIN`` in front), when each is small enough to bind
    client-side. For reads whose next step needs all of them.
    """
    cur, dialect = _cursor(conn)
    found: list[list[Any]] = []
    if dialect == "postgresql" and len(statements) > 1:
        dbapi = cur.connection
        bound = [(_translate(sql, dialect), tuple(params)) for sql, params in statements]
        if _batchable(dbapi) and all(_small(params) for _, params in bound):
            first = [_bound(dbapi, sql, params) for sql, params in bound[:-1]]
            batched = _pg_batched(dbapi, *bound[-1], False, before=first, found=found)
            assert batched is not _NOT_BATCHED
            last = list(batched.fetchall()) if batched.description is not None else []
            return [*found, last]
    for sql, params in statements:
        cur = execute(conn, sql, params)
        found.append(list(cur.fetchall()) if cur.description is not None else [])
    return found


class ReadEnded(Exception):
    """A statement was about to run on a connection whose read transaction
    :func:`fetch_and_end` ended already: it would have read another snapshot. Nothing was
    sent; the caller runs its read again the usual way (one transaction, read then ended).
    """


def fetch_and_end(
    conn: AnyConnection, statements: Sequence[tuple[str, Sequence[Any]]]
) -> list[list[Any]] | None:
    """PostgreSQL, first thing in a read transaction: its ``BEGIN``, ``statements`` and its
    COMMIT in ONE round trip (one pipeline; a statement this connection sent before runs
    prepared); the rows of each. The transaction is over when this returns, so
    any later statement on ``conn`` before the block ends raises :class:`ReadEnded` instead
    of reading a later snapshot (``pgconn.BoundedConnection.alp_ended``): everything the
    caller builds from the rows must come from them. None, with nothing sent, where this
    cannot be (SQLite, a transaction under way, a write transaction, another driver, a
    statement too large to bind client-side).
    """
    if isinstance(conn, LiteConnection) or dialect_of(conn) != "postgresql":
        return None
    dbapi: Any = conn.connection.dbapi_connection
    bound = [(_translate(sql, "postgresql"), tuple(params)) for sql, params in statements]
    if (
        not _batchable(dbapi)
        or dbapi.pgconn.transaction_status != 0
        or dbapi.alp_waiting()
        or dbapi.alp_begun_later
        or dbapi.alp_want_xid
        or not all(_small(params) for _, params in bound)
    ):
        return None
    # the write path's one-wait pipeline (pgconn.BoundedConnection._alp_pipeline): the BEGIN,
    # the statements (prepared once this connection has seen them: a read's planning was
    # most of its server time) and the COMMIT in one client write; an error rolls back
    results: list[Any] = []
    dbapi.alp_head = 0
    pipeline = dbapi._alp_pipeline(
        [dbapi._get_tx_start_command(), *bound], [None, *([results.append] * len(bound))]
    )
    with dbapi.lock:
        dbapi.wait(dbapi._alp_commit_or_roll_back(pipeline))
    dbapi.alp_ended = ReadEnded
    return [_rows_of(dbapi, result) for result in results]


def begin_later(conn: AnyConnection, statements: Sequence[tuple[str, Sequence[Any]]]) -> bool:
    """PostgreSQL, first thing in a transaction: queue its ``BEGIN`` and ``statements`` (each
    small enough to bind client-side) without sending anything, so that they, the statements
    deferred after them and the COMMIT go in one client write and one wait
    (``pgconn.BoundedConnection.alp_begin_later``). A statement whose result is needed before
    the COMMIT sends the queue as usual (one round trip more, nothing lost). False, with
    nothing queued, where this cannot be (SQLite, a transaction already under way, another
    driver): the caller then takes its usual way.
    """
    if isinstance(conn, LiteConnection) or dialect_of(conn) != "postgresql":
        return False
    dbapi: Any = conn.connection.dbapi_connection
    if (
        not _batchable(dbapi)
        or dbapi.pgconn.transaction_status != 0
        or dbapi.alp_waiting()
        or dbapi.alp_begun_later
    ):
        return False
    bound = [(_translate(sql, "postgresql"), tuple(params)) for sql, params in statements]
    if not all(_small(params) for _, params in bound):
        return False
    dbapi.alp_begin_later(bound)
    return True


def _rows_of(dbapi: Any, result: Any) -> list[tuple[Any, ...]]:
    """The rows of a ``pq.PGresult`` (a deferred statement's), loaded as the driver would."""
    from psycopg.adapt import Transformer

    if not result.ntuples:
        return []
    tx = Transformer(dbapi)
    tx.set_pgresult(result)
    return list(tx.load_rows(0, result.ntuples, tuple))


_NOT_BATCHED = object()

BATCH_MAX_PARAMS = 256
BATCH_MAX_BYTES = 16_384
"""A statement is bound client-side (deferred, or batched with what waits before it) only up to
these many parameters and bytes of them: binding is text, so an import's large multi-row
INSERT or a big blob goes as usual (prepared, binary), the queue flushed before it."""


def _small(params: tuple[Any, ...]) -> bool:
    if len(params) > BATCH_MAX_PARAMS:
        return False
    size = 0
    for value in params:
        if isinstance(value, (bytes, bytearray, memoryview, str)):
            size += len(value)
    return size <= BATCH_MAX_BYTES


def _batchable(dbapi: Any) -> bool:
    """A ``pgconn.BoundedConnection`` inside (or about to begin) a transaction."""
    return hasattr(dbapi, "alp_defer") and not dbapi.autocommit and not dbapi._pipeline


def _pg_batched(
    dbapi: Any,
    sql: str,
    params: tuple[Any, ...],
    defer: bool,
    then: Rows | None = None,
    *,
    before: Sequence[bytes] = (),
    found: list[list[Any]] | None = None,
    cur: Any = None,
) -> Any:
    """``execute`` on PostgreSQL through ``pgconn.BoundedConnection``'s round-trip saving:
    deferred (``defer``, inside a begun transaction), or sent with what waits before it (the
    transaction's ``BEGIN``, deferred statements) in one simple-protocol query. Returns the
    cursor on the statement's result, None when deferred, ``_NOT_BATCHED`` when nothing waits
    (the caller runs the statement as usual: prepared, extended protocol). ``cur``: the
    cursor to run it on (a new one of ``dbapi`` when None and it is sent now).
    """
    if not _batchable(dbapi):
        return _NOT_BATCHED
    if not _small(params):
        return _NOT_BATCHED  # the driver flushes the queue before it (pgconn._start_query)
    # pq.TransactionStatus.IDLE, and no BEGIN waiting in the queue (``begin_later``)
    idle = dbapi.pgconn.transaction_status == 0 and not dbapi.alp_begun_later
    if defer and not idle:
        sink = None if then is None else (lambda result: then(_rows_of(dbapi, result)))
        dbapi.alp_defer((sql, params), sink)
        return None
    waiting = 0 if idle else dbapi.alp_waiting()
    if not idle and not waiting and not before:
        return _NOT_BATCHED
    parts: list[bytes] = []
    skip = waiting
    if idle:  # the transaction's BEGIN (and its id, for a write) rides with the statement
        parts.append(dbapi._get_tx_start_command())
        if dbapi.alp_want_xid:
            parts.append(b"SELECT txid_current()")
        skip = len(parts)
    elif waiting:
        parts.append(dbapi.alp_take())
    parts.extend(before)
    parts.append(_bound(dbapi, sql, params))
    want_xid = idle and dbapi.alp_want_xid
    if idle:
        dbapi.alp_want_xid = False
    if cur is None:
        cur = dbapi.cursor()
    dbapi._autocommit = True  # the BEGIN (if any) is in the batch: the driver adds none
    try:
        cur.execute(b"; ".join(parts))
    finally:
        dbapi._autocommit = False
    results = []
    for i in range(skip):
        if want_xid and i == 1:
            row = cur.fetchone()
            dbapi.alp_xid = int(row[0]) if row and row[0] is not None else None
        results.append(cur.pgresult)
        cur.nextset()
    if not idle and waiting:
        dbapi.alp_deliver(results)
    for _ in before:
        assert found is not None
        found.append(list(cur.fetchall()) if cur.description is not None else [])
        cur.nextset()
    return cur


def _bound(dbapi: Any, sql: str, params: tuple[Any, ...]) -> bytes:
    """``sql`` with ``params`` bound client-side (psycopg's own quoting), as bytes."""
    import psycopg

    text = psycopg.ClientCursor(dbapi).mogrify(sql, params) if params else sql
    return text.encode(dbapi.pgconn._encoding or "utf-8")


_ONE_ROW = re.compile(r"\bVALUES (\(\?(?:, \?)*\))")
MULTI_ROW_PARAMS = 30_000
"""Bound parameters in one multi-row INSERT (PostgreSQL allows 65,535)."""
SQLITE_MULTI_ROW_PARAMS = 999
"""The same on SQLite: the bound every build allows (999 before 3.32, 32,766 since)."""
SQLITE_MULTI_ROW_FROM = 64
"""Rows from which an SQLite ``executemany`` of an INSERT becomes multi-row statements."""


def executemany(
    conn: AnyConnection, sql: str, rows: Sequence[Sequence[Any]], *, defer: bool = False
) -> None:
    """Run one statement for many parameter rows.

    On PostgreSQL an ``INSERT … VALUES (?, …)`` becomes one multi-row ``VALUES (…), (…)``
    statement: one execution instead of one per row (for a turn's rows this took the
    PostgreSQL turn in benchmarks/bench_postgres.py from 19.5 statements to 10). On SQLite
    too from :data:`SQLITE_MULTI_ROW_FROM` rows (an import's 6,001 entries: 13–23 ms where a
    step per row took 17–29 ms); fewer keep ``executemany``, whose one prepared statement the driver
    caches, where a multi-row statement per row count would not be.

    ``defer``: as :func:`execute`'s (PostgreSQL: sent with the transaction's next round trip).
    """
    if not rows:
        return
    cur, dialect = _cursor(conn)
    if defer and dialect == "postgresql" and len(rows) == 1:
        execute(conn, sql, rows[0], defer=True)
        return
    many = len(rows) > 1 if dialect == "postgresql" else len(rows) >= SQLITE_MULTI_ROW_FROM
    split = _values_split(sql, dialect) if many else None
    if split is None:
        cur.executemany(_translate(sql, dialect), [tuple(r) for r in rows])
        return
    head, group, tail, params = split
    limit = MULTI_ROW_PARAMS if dialect == "postgresql" else SQLITE_MULTI_ROW_PARAMS
    per = max(1, limit // params)
    for start in range(0, len(rows), per):
        part = rows[start : start + per]
        statement = f"{head}{', '.join([group] * len(part))}{tail}"
        values = tuple(v for r in part for v in r)
        if dialect == "postgresql":
            batched = _pg_batched(cur.connection, statement, values, defer, cur=cur)
            if batched is not _NOT_BATCHED:
                continue
        cur.execute(statement, values)


@lru_cache(maxsize=64)
def _values_split(sql: str, dialect: str) -> tuple[str, str, str, int] | None:
    """An ``INSERT … VALUES (?, …) …`` as (before, one row's group, after), in the dialect's
    parameter style, and the parameters of one row; None for any other statement.
    """
    match = _ONE_ROW.search(sql)
    if match is None or not sql.lstrip().upper().startswith("INSERT"):
        return None
    start, end = match.span(1)
    parts = (sql[:start], sql[start:end], sql[end:])
    head, group, tail = (_translate(part, dialect) for part in parts)
    return head, group, tail, match.group(1).count("?")


def fetchall(conn: AnyConnection, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """All rows of a query."""
    return list(execute(conn, sql, params).fetchall())


def fetchone(conn: AnyConnection, sql: str, params: Sequence[Any] = ()) -> Any:
    """The first row of a query (or None)."""
    return execute(conn, sql, params).fetchone()
