"""Which database an archive is, and opening it: for writing (and migrating) on SQLAlchemy,
or for reading — an SQLite file then opens on the ``sqlite3`` driver alone (``lite``), so a
reading command never imports SQLAlchemy.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Literal, overload

from alpstore.db.lite import LiteDatabase, lite_path
from alpstore.db.names import ENV_DATABASE_URL, sqlite_path_for_root
from alpstore.errors import StorageError, UsageError

if TYPE_CHECKING:
    from alpstore.db.database import Database


def default_database_url(root: Path | None) -> str | None:
    """The database an archive opened without a URL uses: ``$ALPSTORE_DATABASE_URL`` when it is
    set, else None — the SQLite file of the run root.
    """
    return os.environ.get(ENV_DATABASE_URL) or None


@overload
def open_database(
    *,
    root: Path | None = ...,
    url: str | None = ...,
    create: bool = ...,
    migrate: bool = ...,
    read_only: Literal[False] = ...,
    lite_write: Literal[False] = ...,
) -> Database: ...


@overload
def open_database(
    *,
    root: Path | None = ...,
    url: str | None = ...,
    create: bool = ...,
    migrate: bool = ...,
    read_only: bool = ...,
    lite_write: bool = ...,
) -> Database | LiteDatabase: ...


def open_database(
    *,
    root: Path | None = None,
    url: str | None = None,
    create: bool = True,
    migrate: bool = True,
    read_only: bool = False,
    lite_write: bool = False,
) -> Database | LiteDatabase:
    """Open (and, unless ``migrate`` is False, migrate to head) the archive of ``root`` or at
    ``url``.

    Without ``url``, ``$ALPSTORE_DATABASE_URL`` names the database when it is set (so an agent
    embedding the library and the ``alpstore`` command agree on one archive); otherwise the
    archive is the SQLite file of ``root``.

    ``read_only`` (implies ``create`` and ``migrate`` False): the archive must exist at this
    alpstore's schema head; an SQLite file opens as a :class:`LiteDatabase` (no SQLAlchemy),
    PostgreSQL as a ``Database`` the caller only reads from.

    ``lite_write`` (for writing; the imports, issue 41): an SQLite file this alpstore can write
    without a migration opens as a ``litewrite.LiteWriteDatabase`` (no SQLAlchemy; a new one is
    created from the schema snapshot); anything else (PostgreSQL, an archive to migrate) as a
    ``Database``, as without it.

    Raises:
        UsageError: neither given, or the URL is malformed.
        StorageError: the run root cannot be created or written.
        NotFoundError: ``create`` is False and there is no archive there.
        DatabaseError: the server cannot be reached or refuses the login.
        SchemaVersionError: the archive comes from a newer alpstore (``read_only``: or an
            older one).
    """
    if root is not None and root.exists() and not root.is_dir():
        raise StorageError(f"run root {root} is not a directory")
    if url is None:
        url = default_database_url(root)
    if read_only:
        if not url:
            if root is None:
                raise UsageError("no run root and no database URL given")
            return LiteDatabase(sqlite_path_for_root(root))
        path = lite_path(url)
        if path is not None:
            return LiteDatabase(path, location=url)
        create = migrate = False
    elif lite_write and migrate:
        from alpstore.db.litewrite import open_writer

        writer = open_writer(root=root, url=url, create=create)
        if writer is not None:
            return writer
    from alpstore.db.engine import open_engine

    db = open_engine(root=root, url=url, create=create, migrate=migrate)
    if read_only:
        from alpstore.db.migrate import require_current_schema

        try:
            require_current_schema(db)
        except BaseException:
            db.close()
            raise
    return db
