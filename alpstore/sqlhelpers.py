"""Read-only SQL for users, with helper functions registered on SQLite connections."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

from sqlalchemy import text

from alpstore.codec import DIGEST_SIZE, Digest, parse_digest
from alpstore.db.engine import translate_errors
from alpstore.errors import AlpstoreError, UsageError

if TYPE_CHECKING:
    from alpstore.store import Store

MAX_ROWS = 100_000


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


def run_query(store: Store, query: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run ``query`` read-only and return ``(columns, rows)``.

    Raises:
        UsageError: the statement is not a query, tries to write, or is not valid SQL.
    """
    if not query.strip():
        raise UsageError("empty query")
    db = store.db
    with db.read() as conn, translate_errors(db.location):
        dbapi = conn.connection.dbapi_connection
        if isinstance(dbapi, sqlite3.Connection):
            _register(store, dbapi)
            conn.exec_driver_sql("PRAGMA query_only = ON")
        else:
            conn.exec_driver_sql("SET TRANSACTION READ ONLY")
        try:
            result = conn.execute(text(query))
            if not result.returns_rows:
                raise UsageError("the statement returns no rows; `alpstore sql` only reads")
            columns = list(result.keys())
            rows = [tuple(r) for r in result.fetchmany(MAX_ROWS)]
        except AlpstoreError:
            raise
        except Exception as err:
            msg = str(getattr(err, "orig", None) or err).strip().splitlines()[0]
            helpers = [n for n in ("blob_text", "digest_hex") if f"{n}(" in msg.replace(" ", "")]
            if helpers and not isinstance(dbapi, sqlite3.Connection):
                raise UsageError(
                    f"query failed: {helpers[0]}() exists on SQLite archives only",
                    hint="on PostgreSQL: encode(digest, 'hex') for hex digests, "
                    "`alpstore archive get DIGEST` for a blob's text",
                ) from err
            raise UsageError(f"query failed: {msg}") from err
        finally:
            if isinstance(dbapi, sqlite3.Connection):
                conn.exec_driver_sql("PRAGMA query_only = OFF")
    return columns, rows
