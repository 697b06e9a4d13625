"""Database layer: engine setup, the tables, and Alembic glue."""

from alpstore.db.engine import Database, open_database, sqlite_path_for_root

__all__ = ["Database", "open_database", "sqlite_path_for_root"]
