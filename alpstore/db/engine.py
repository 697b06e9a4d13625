"""Opening an archive: the SQLite file of a run root or any supported URL (SQLite,
PostgreSQL on psycopg 3), brought to the schema head unless told otherwise.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, exc
from sqlalchemy.engine import URL, make_url

from alpstore.db.database import (  # re-exported: the names engine has always offered
    SQLITE_PAGE_SIZE as SQLITE_PAGE_SIZE,
)
from alpstore.db.database import (
    SQLITE_QUEUE_SUFFIX as SQLITE_QUEUE_SUFFIX,
)
from alpstore.db.database import (
    SQLITE_SYNCHRONOUS as SQLITE_SYNCHRONOUS,
)
from alpstore.db.database import (
    WRITE_RETRIES as WRITE_RETRIES,
)
from alpstore.db.database import (
    Database as Database,
)
from alpstore.db.database import (
    inserted_id as inserted_id,
)
from alpstore.db.database import (
    sqlite_engine,
)
from alpstore.db.database import (
    translate_errors as translate_errors,
)
from alpstore.db.failures import (
    DAMAGED_HINT as DAMAGED_HINT,
)
from alpstore.db.failures import (
    redact as redact,
)
from alpstore.db.lite import refuse_foreign_sqlite
from alpstore.db.migrate import current_revision, ensure_schema
from alpstore.db.names import (
    ARCHIVE_DIR as ARCHIVE_DIR,
)
from alpstore.db.names import (
    ARCHIVE_FILE as ARCHIVE_FILE,
)
from alpstore.db.names import (
    NO_ARCHIVE_HINT,
)
from alpstore.db.names import (
    SQLITE_BUSY_TIMEOUT_MS as SQLITE_BUSY_TIMEOUT_MS,
)
from alpstore.db.names import (
    sqlite_path_for_root as sqlite_path_for_root,
)
from alpstore.db.sqlitefile import discard_new_archives as discard_new_archives
from alpstore.db.sqlitefile import inside_root, note_created
from alpstore.errors import NotFoundError, StorageError, UsageError

PG_CONNECT_TIMEOUT_S = 10
"""An unreachable PostgreSQL server is reported after this many seconds, not after TCP's minutes."""

PG_PING_AFTER_IDLE_S = 2.0
"""A pooled PostgreSQL connection idle longer than this is pinged before use (a dead one is
replaced); one used more recently is pinged only when its socket has something to read (a
server that ended the session says so before it closes: restart, ``pg_terminate_backend``)."""

# Bounds on every PostgreSQL call (docs/ARCHITECTURE.md, "PostgreSQL across a network"). Each is
# overridable in the URL: the server's three in ``options`` (``?options=-c lock_timeout=2000``),
# TCP's as libpq parameters (``?keepalives_idle=30``), alpstore's own as ``alpstore_*`` query
# parameters, taken out of the URL before it reaches the driver.
PG_SERVER_TIMEOUTS_MS = {
    "statement_timeout": 20_000,
    "lock_timeout": 10_000,
    "idle_in_transaction_session_timeout": 60_000,
}
"""The server cancels a statement that runs 20 s, one that waited 10 s for a lock (retries of a
lock wait count against the same 10 s: ``Database.retrying``), and ends the session of a
client that went silent for 60 s inside a transaction (its locks are freed)."""

PG_TCP = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,
}
"""A peer that vanished while the connection sat idle is noticed in 10 + 3 × 5 = 25 s (TCP
keepalives), and bytes the other end has not acknowledged for 30 s end the connection
(``tcp_user_timeout``, ms; Linux): without them a partition holds a call for about 2 h 11 min."""

PG_CALL_TIMEOUT_S = 30.0
"""No single wait for the server lasts longer (``alpstore_call_timeout``, seconds; 0 = none):
a connection that stops answering while the network still acknowledges it (a stalled proxy)
fails the call with a one-line error naming the bound. Above ``statement_timeout`` so the
server's own, clearer cancel comes first when it is the server that is slow."""

PG_POOL_SIZE = 8
"""Connections the pool keeps (``alpstore_pool_size``): as many as ``AlpstoreSaver`` has
workers by default, so a saver never opens and closes connections between calls."""

PG_POOL_OVERFLOW = 8
"""Connections opened beyond the pool's when every pooled one is busy (``alpstore_pool_overflow``),
closed again when returned."""

PG_POOL_TIMEOUT_S = 30.0
"""How long a call waits for a connection (``alpstore_pool_timeout``) when the pool is exhausted
or the server refuses new ones (a connection cap: ``too many connections``) before it fails."""

ALPSTORE_URL_PARAMS = (
    "alpstore_call_timeout",
    "alpstore_pool_size",
    "alpstore_pool_overflow",
    "alpstore_pool_timeout",
    "alpstore_prepared",
)
"""alpstore's own URL query parameters (never passed to the driver)."""

PG_PREPARED = 128
"""Statements of a write transaction's one-wait pipeline each connection prepares server-side
(``alpstore_prepared``; 0 = none: every statement parsed and planned each time, as a
connection pooler in transaction mode without prepared-statement support needs)."""

PG_MIGRATION_LOCK = 0x616C7073  # "alps"
"""Advisory lock key that serialises concurrent schema upgrades of one PostgreSQL database."""


def open_engine(
    *,
    root: Path | None = None,
    url: str | None = None,
    create: bool = True,
    migrate: bool = True,
) -> Database:
    """Open (and, unless ``migrate`` is False, migrate to head) the archive at ``url``, or
    without one the SQLite file of ``root``, on SQLAlchemy (``opening.open_database`` has
    resolved ``$ALPSTORE_DATABASE_URL`` already).

    Raises:
        UsageError: neither given, or the URL is malformed.
        StorageError: the run root cannot be created or written.
        NotFoundError: ``create`` is False and there is no archive there.
        DatabaseError: the server cannot be reached or refuses the login.
        SchemaVersionError: the archive comes from a newer alpstore.
    """
    if root is not None and root.exists() and not root.is_dir():
        raise StorageError(f"run root {root} is not a directory")
    if url:
        parsed, location = parse_database_url(url)
        if parsed.get_backend_name() == "sqlite":
            if parsed.database and parsed.database != ":memory:" and "mode" not in parsed.query:
                refuse_foreign_sqlite(Path(parsed.database), location)
            engine = sqlite_engine(url)
        else:
            engine = postgresql_engine(parsed, location)
    else:
        if root is None:
            raise UsageError("no run root and no database URL given")
        path = inside_root(sqlite_path_for_root(root), root)  # a symlink out of it: refused
        if not path.exists():
            if not create:
                raise NotFoundError(
                    f"no archive at {path}",
                    hint=NO_ARCHIVE_HINT,
                )
            try:
                note_created(path)
            except OSError as err:
                raise StorageError(f"cannot create {path.parent}: {err.strerror}") from err
        elif path.is_dir():
            raise UsageError(f"{path} is a directory, expected an archive file")
        location = str(path)
        refuse_foreign_sqlite(path, location)
        engine = sqlite_engine(f"sqlite:///{path}")
    db = Database(engine, location=location, background_checkpoints=True)
    try:
        if migrate and url and not create and current_revision(db) is None:
            raise NotFoundError(
                f"no archive at {location}",
                hint=NO_ARCHIVE_HINT,
            )
        if migrate:
            ensure_schema(db)
    except BaseException:
        db.close()
        raise
    return db


def parse_database_url(url: str) -> tuple[URL, str]:
    """``url`` parsed, with the location to name it by (password hidden).

    Raises:
        UsageError: malformed, or neither SQLite nor PostgreSQL.
    """
    try:
        parsed = make_url(url)
    except (exc.ArgumentError, ValueError) as err:
        raise UsageError(
            f"database URL {redact(url)!r} is not valid",
            hint="expected e.g. postgresql+psycopg://USER:PASSWORD@HOST/DBNAME or sqlite:///PATH",
        ) from err
    location = parsed.render_as_string(hide_password=True)
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise UsageError(
            f"database URL {location}: unsupported backend {backend!r}",
            hint="alpstore runs on sqlite:///PATH or postgresql+psycopg://…",
        )
    if backend == "sqlite" and not parsed.database:
        raise UsageError(f"database URL {location}: no file named")
    return parsed, location


def postgresql_engine(parsed: URL, location: str) -> Engine:
    """A PostgreSQL engine on psycopg 3 (``postgresql://`` means psycopg here, not psycopg2),
    every call bounded (the ``PG_*`` settings above, each overridable in the URL), on a pool
    of ``PG_POOL_SIZE`` connections.

    Raises:
        UsageError: the driver is missing, or an ``alpstore_*`` parameter is not a number.
    """
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    ours = {k: parsed.query[k] for k in ALPSTORE_URL_PARAMS if k in parsed.query}
    parsed = parsed.difference_update_query(ALPSTORE_URL_PARAMS)
    call_timeout = _number(ours, "alpstore_call_timeout", PG_CALL_TIMEOUT_S, location)
    pool_size = int(_number(ours, "alpstore_pool_size", PG_POOL_SIZE, location))
    overflow = int(_number(ours, "alpstore_pool_overflow", PG_POOL_OVERFLOW, location))
    pool_timeout = _number(ours, "alpstore_pool_timeout", PG_POOL_TIMEOUT_S, location)
    prepared = int(_number(ours, "alpstore_prepared", PG_PREPARED, location))
    connect_args: dict[str, Any] = {}
    if "connect_timeout" not in parsed.query:
        connect_args["connect_timeout"] = PG_CONNECT_TIMEOUT_S
    for key, value in PG_TCP.items():
        if key not in parsed.query and (key != "tcp_user_timeout" or _libpq_at_least(120000)):
            connect_args[key] = value
    options = _text_param(parsed.query.get("options"))
    extra = [f"-c {name}={ms}" for name, ms in PG_SERVER_TIMEOUTS_MS.items() if name not in options]
    if extra:
        parsed = parsed.update_query_dict({"options": " ".join([options, *extra]).strip()})
    try:
        engine = create_engine(
            parsed,
            future=True,
            connect_args=connect_args,
            pool_size=max(1, pool_size),
            max_overflow=max(0, overflow),
            pool_timeout=pool_timeout,
        )
    except (ImportError, ModuleNotFoundError) as err:
        raise UsageError(
            f"database URL {location}: driver not installed ({err.name})",
            hint="pip install 'alpstore[postgres]'",
        ) from err
    except exc.ArgumentError as err:
        raise UsageError(f"database URL {location} is not valid: {redact(str(err))}") from err
    from alpstore.db import pgconn

    def connect(_dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
        conn = pgconn.BoundedConnection.connect(*cargs, **cparams)
        conn.call_timeout = call_timeout or None
        conn.alp_prepared_max = max(0, prepared)
        return conn

    event.listen(engine, "do_connect", connect)
    event.listen(engine, "checkout", _ping_if_idle)
    event.listen(engine, "checkin", _note_last_use)
    engine.alpstore_bounds = {  # type: ignore[attr-defined]
        "pool_timeout_s": pool_timeout,
        "lock_timeout_s": _server_ms(options, "lock_timeout") / 1000,
        "statement_timeout_s": _server_ms(options, "statement_timeout") / 1000,
        "call_timeout_s": call_timeout,
    }
    return engine


def _libpq_at_least(version: int) -> bool:
    """True when the libpq psycopg runs on is at least ``version`` (``tcp_user_timeout``: 12)."""
    try:
        import psycopg

        return int(psycopg.pq.version()) >= version
    except Exception:  # pragma: no cover - psycopg missing: create_engine reports it
        return False


def pool_per_worker(url: str | None, workers: int) -> str | None:
    """``url`` with ``alpstore_pool_size=workers`` when it is a PostgreSQL URL that sets none
    and ``workers`` (a saver's threads) exceeds :data:`PG_POOL_SIZE`; else ``url`` as it is.
    """
    if not url or workers <= PG_POOL_SIZE or "alpstore_pool_size" in url:
        return url
    try:
        parsed = make_url(url)
    except (exc.ArgumentError, ValueError):
        return url  # opening it names what is wrong with it
    if parsed.get_backend_name() != "postgresql":
        return url
    sized = parsed.update_query_dict({"alpstore_pool_size": str(workers)})
    return sized.render_as_string(hide_password=False)


def _number(params: dict[str, Any], name: str, default: float, location: str) -> float:
    """The URL's ``name`` as a non-negative number, else ``default``.

    Raises:
        UsageError: present but not a non-negative number.
    """
    if name not in params:
        return default
    text = _text_param(params[name])
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise UsageError(f"database URL {location}: {name}={text!r} is not a non-negative number")
    return value


def _text_param(value: Any) -> str:
    """A URL query value as text (the last one when repeated)."""
    if value is None:
        return ""
    if isinstance(value, tuple):
        return str(value[-1]) if value else ""
    return str(value)


def _server_ms(options: str, name: str) -> float:
    """The milliseconds ``-c name=…`` sets in ``options`` (a bare number, or with ms/s/min),
    else alpstore's default.
    """
    at = options.find(name + "=")
    if at < 0:
        return float(PG_SERVER_TIMEOUTS_MS[name])
    value = options[at + len(name) + 1 :].split()[0] if options[at + len(name) + 1 :] else ""
    value = value.strip("'\"")
    for unit, scale in (("ms", 1.0), ("min", 60_000.0), ("s", 1000.0)):
        if value.endswith(unit):
            value, factor = value[: -len(unit)], scale
            break
    else:
        factor = 1.0
    try:
        return float(value) * factor
    except ValueError:
        return float(PG_SERVER_TIMEOUTS_MS[name])


def _ping_if_idle(dbapi_conn: Any, record: Any, proxy: Any) -> None:
    """``pool_pre_ping``, but only for a connection that sat idle (see PG_PING_AFTER_IDLE_S)
    or whose socket has something to read: an idle session hears from the server only when
    it is being ended (restart, ``pg_terminate_backend``, an idle timeout), so checking for
    that costs no round trip and the next call never fails on a connection already gone.
    """
    last = record.info.get("last_use")
    if last is not None and time.monotonic() - last <= PG_PING_AFTER_IDLE_S:
        if not _has_input(dbapi_conn):
            return
    elif last is None:
        return
    try:
        cur = dbapi_conn.cursor()
        try:
            cur.execute("SELECT 1")
        finally:
            cur.close()
        dbapi_conn.rollback()
    except Exception as err:
        raise exc.DisconnectionError(str(err)) from err  # the pool connects afresh


def _has_input(dbapi_conn: Any) -> bool:
    """True when an idle connection's socket is readable (or gone): the server spoke."""
    import select

    try:
        fd = dbapi_conn.pgconn.socket
        readable, _, _ = select.select([fd], [], [], 0)
    except Exception:
        return True
    return bool(readable)


def _note_last_use(dbapi_conn: Any, record: Any) -> None:
    record.info["last_use"] = time.monotonic()
