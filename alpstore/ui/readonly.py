"""Open an archive for reading only: no creation, no migration, no write can reach the database.

``Store.open`` creates and migrates; the inspector must do neither. On SQLite the file is opened
through a ``mode=ro`` URI and every connection is ``query_only``; on PostgreSQL every transaction
of the session is ``READ ONLY``. An archive that is missing or not at this alpstore's schema
revision is refused with one line.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine

from alpstore.db.engine import (
    SQLITE_BUSY_TIMEOUT_MS,
    Database,
    parse_database_url,
    postgresql_engine,
    sqlite_path_for_root,
)
from alpstore.db.migrate import SCHEMA_HEAD, current_revision
from alpstore.db.opening import default_database_url
from alpstore.errors import NotFoundError, SchemaVersionError
from alpstore.store import Store


def _sqlite_ro_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # BEGIN is issued on the "begin" event
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA query_only=ON")
    cur.close()


def _sqlite_ro_begin(conn: Any) -> None:
    conn.exec_driver_sql("BEGIN")


def _pg_ro_connect(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    try:
        cur.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
    finally:
        cur.close()
    dbapi_conn.commit()


def _sqlite_engine(path: Path) -> Engine:
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    engine = create_engine(
        "sqlite://",
        creator=lambda: sqlite3.connect(uri, uri=True, check_same_thread=False),
        future=True,
    )
    event.listen(engine, "connect", _sqlite_ro_connect)
    event.listen(engine, "begin", _sqlite_ro_begin)
    return engine


def _url_engine(url: str) -> tuple[Engine, str]:
    parsed, location = parse_database_url(url)
    if parsed.get_backend_name() == "sqlite":
        assert parsed.database  # parse_database_url refuses a SQLite URL without a file
        return _sqlite_engine(Path(parsed.database)), location
    engine = postgresql_engine(parsed, location)
    event.listen(engine, "connect", _pg_ro_connect)
    return engine, location


def open_read_only(root: Path, url: str | None = None) -> Store:
    """A :class:`Store` over the archive of ``root`` (or at ``url``) that cannot write.

    Raises:
        NotFoundError: there is no archive there.
        SchemaVersionError: the archive is not at this alpstore's schema revision.
        UsageError: a malformed or unsupported URL.
        DatabaseError: the server cannot be reached.
    """
    url = url or default_database_url(root)
    if url:
        engine, location = _url_engine(url)
    else:
        path = sqlite_path_for_root(root)
        if not path.is_file():
            raise NotFoundError(
                f"no archive at {path}", hint="give --root RUN_ROOT or --db URL of an archive"
            )
        engine, location = _sqlite_engine(path), str(path)
    db = Database(engine, location=location)
    try:
        revision = current_revision(db)
        if revision is None:
            raise NotFoundError(
                f"no archive at {location}", hint="give --root RUN_ROOT or --db URL of an archive"
            )
        if revision != SCHEMA_HEAD:
            raise SchemaVersionError(
                f"archive {location} has schema revision {revision}, this alpstore reads "
                f"{SCHEMA_HEAD}; the inspector never migrates",
                hint="run `alpstore db upgrade` (or upgrade alpstore) first",
            )
        return Store(db, root)
    except BaseException:
        db.close()
        raise
