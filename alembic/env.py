"""Alembic environment: runs on alpstore's own connection, or on ``-x url=…`` from the shell."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from alembic import context
from alpstore.db.engine import PG_MIGRATION_LOCK
from alpstore.db.tables import metadata

config = context.config
target_metadata = metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        transaction_per_migration=False,
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_sqlite(database: Any) -> None:
    """SQLite: migrate with foreign keys off, checked before commit.

    A migration that rebuilds a table (SQLite cannot alter a primary key in place) drops a table
    other tables refer to; with enforcement on, that drop fails or leaves the transaction unable
    to commit. The pragma only changes outside a transaction, hence a connection of its own,
    queued like any writer; ``PRAGMA foreign_key_check`` then proves nothing was left dangling.
    """
    with database.engine.connect() as connection:
        driver = connection.connection.driver_connection  # outside any transaction
        driver.execute("PRAGMA foreign_keys=OFF")
        try:
            connection.execution_options(sqlite_begin="IMMEDIATE")
            with database._writer_queue(), connection.begin():
                _run(connection)
                broken = connection.exec_driver_sql("PRAGMA foreign_key_check").first()
                if broken is not None:
                    raise RuntimeError(f"migration left a dangling reference: {tuple(broken)}")
        finally:
            driver.execute("PRAGMA foreign_keys=ON")


def run_migrations_online() -> None:
    database = config.attributes.get("database")
    if database is not None and database.is_sqlite:
        _run_sqlite(database)
        return
    if database is not None:
        with database.atomic() as connection:
            if connection.dialect.name == "postgresql":
                # Processes opening a fresh database at once upgrade it one after the other;
                # the later ones then find it at head (SQLite: BEGIN IMMEDIATE does the same).
                connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({PG_MIGRATION_LOCK})")
            _run(connection)
        return
    from sqlalchemy import create_engine

    from alpstore.db.database import sqlite_engine as _sqlite_engine

    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url"
    )
    if not url:
        raise SystemExit("alembic: pass -x url=DATABASE_URL")
    if url.startswith("sqlite"):
        from alpstore.db.engine import Database

        _run_sqlite(Database(_sqlite_engine(url), location=url))  # foreign keys off, checked
        return
    with create_engine(url).begin() as connection:
        _run(connection)


if context.is_offline_mode():
    raise SystemExit("alpstore migrations run online only")
run_migrations_online()
