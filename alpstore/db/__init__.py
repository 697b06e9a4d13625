"""Database layer: engine setup, the tables, Alembic glue, and the SQLAlchemy-free reader (lite).
May import only the layers below it: alpstore.errors, alpstore.events, alpstore.gcpause.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from alpstore.db.database import Database
    from alpstore.db.names import sqlite_path_for_root
    from alpstore.db.opening import open_database

__all__ = ["Database", "open_database", "sqlite_path_for_root"]


def __getattr__(name: str) -> Any:
    # Imported on first use, so ``alpstore.db.lite`` and ``alpstore.db.raw`` (the readers'
    # modules) load without SQLAlchemy.
    if name == "Database":
        from alpstore.db.database import Database

        return Database
    if name == "open_database":
        from alpstore.db.opening import open_database

        return open_database
    if name == "sqlite_path_for_root":
        from alpstore.db.names import sqlite_path_for_root

        return sqlite_path_for_root
    raise AttributeError(f"module 'alpstore.db' has no attribute {name!r}")
