"""What `alpstore db info` reports: backend, schema revision, sizes and row counts."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Table, func, inspect, select, text

from alpstore.db.engine import Database, translate_errors
from alpstore.db.migrate import SCHEMA_HEAD, current_revision, known_revisions
from alpstore.db.tables import metadata, view_metadata


@dataclass
class TableInfo:
    """One table of the archive."""

    name: str
    rows: int
    bytes: int | None
    """Space the table and its indexes take (None where the backend cannot tell)."""


@dataclass
class DatabaseInfo:
    """A snapshot of an archive database, for `alpstore db info`."""

    backend: str
    """``sqlite`` or ``postgresql``."""
    location: str
    """File path or URL (password hidden)."""
    server_version: str
    revision: str | None
    """The archive's schema revision (None: an empty database)."""
    head: str
    """The newest revision this alpstore knows."""
    status: str
    """``current``, ``behind`` (``db upgrade`` brings it to head), ``newer`` or ``empty``."""
    total_bytes: int | None
    tables: list[TableInfo] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "backend": self.backend,
            "location": self.location,
            "server_version": self.server_version,
            "revision": self.revision,
            "head": self.head,
            "status": self.status,
            "total_bytes": self.total_bytes,
            "tables": {t.name: {"rows": t.rows, "bytes": t.bytes} for t in self.tables},
        }


def revision_status(revision: str | None) -> str:
    """How a revision compares with this alpstore's head."""
    if revision is None:
        return "empty"
    if revision == SCHEMA_HEAD:
        return "current"
    return "behind" if revision in known_revisions() else "newer"


def describe(db: Database) -> DatabaseInfo:
    """Collect backend, revision, sizes and row counts (read-only; nothing is migrated)."""
    revision = current_revision(db)
    with translate_errors(db.location), db.read() as conn:
        found = inspect(conn)
        present = set(found.get_table_names())
        views = set(found.get_view_names())  # ``blobs`` (0010)
        tables = [
            TableInfo(t.name, _count(conn, t), _table_bytes(db, conn, t.name))
            for t in metadata.sorted_tables
            if t.name in present
        ] + [
            TableInfo(t.name, _count(conn, t), None)  # (a view's bytes are its tables')
            for t in view_metadata.sorted_tables
            if t.name in views
        ]
        version = _server_version(db, conn)
        total = _total_bytes(db, conn)
    return DatabaseInfo(
        backend=db.dialect,
        location=db.location,
        server_version=version,
        revision=revision,
        head=SCHEMA_HEAD,
        status=revision_status(revision),
        total_bytes=total,
        tables=tables,
    )


def _count(conn: Connection, table: Table) -> int:
    return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def _server_version(db: Database, conn: Connection) -> str:
    if db.is_sqlite:
        return "SQLite " + str(conn.exec_driver_sql("SELECT sqlite_version()").scalar_one())
    return "PostgreSQL " + str(conn.exec_driver_sql("SHOW server_version").scalar_one())


def _table_bytes(db: Database, conn: Connection, table: str) -> int | None:
    if db.is_postgresql:
        return int(
            conn.execute(
                text("SELECT pg_total_relation_size(to_regclass(:t))"), {"t": table}
            ).scalar_one()
            or 0
        )
    if db.is_sqlite:
        try:  # the dbstat table is compiled into most SQLite builds, not all
            found = conn.execute(
                text(
                    "SELECT COALESCE(SUM(pgsize), 0) FROM dbstat WHERE name = :t OR name IN "
                    "(SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = :t)"
                ),
                {"t": table},
            ).scalar_one()
        except Exception:
            return None
        return int(found)
    return None


def _total_bytes(db: Database, conn: Connection) -> int | None:
    if db.is_sqlite:
        total = 0
        for suffix in ("", "-wal"):
            try:
                total += os.path.getsize(db.location + suffix)
            except OSError:
                continue
        return total
    if db.is_postgresql:
        rows = conn.execute(
            text(
                "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'm')"
            )
        ).scalar_one()
        return int(rows)
    return None
