"""``CoreStore``: what a store is made of, opened on an archive (features are typed against it).

Reads (:mod:`alpstore.core.reads`, :mod:`alpstore.core.content`) run plain SQL; writes
(:mod:`alpstore.core.naming`, :mod:`alpstore.core.writes`) import SQLAlchemy when they run.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Self, cast

from alpstore.core.writes import StoreWrites

if TYPE_CHECKING:
    from alpstore.db.database import Database


class CoreStore(StoreWrites):
    """An open archive: blobs, views and sessions, plus the run root's event log."""

    @classmethod
    def open(
        cls,
        root: Path | str,
        *,
        url: str | None = None,
        create: bool = True,
        migrate: bool = True,
        read_only: bool = False,
        lite_write: bool = False,
    ) -> Self:
        """Open the archive of run root ``root`` (or at ``url``), creating and migrating it.

        ``migrate=False`` (with ``create=False``: how a reading command opens it) never changes
        the schema: an archive of an older revision is refused with a pointer to ``db upgrade``.
        ``read_only`` (implies ``create=False, migrate=False``): opened for reading only, on
        SQLite with the ``sqlite3`` driver alone (no SQLAlchemy); a write raises ``UsageError``.
        ``lite_write``: an SQLite archive at head (or a new one) is written on the ``sqlite3``
        driver alone too (``db/litewrite.py``: the imports, whose writes are all plain SQL);
        anything else opens as without it.

        Raises:
            StorageError, NotFoundError, SchemaVersionError, CorruptArchiveError, UsageError.
        """
        from alpstore.db.opening import open_database

        root = Path(root)
        if read_only:  # the schema revision is checked by open_database itself
            db = open_database(root=root, url=url, create=False, migrate=False, read_only=True)
            # a LiteDatabase stands in for a Database on the read path: every read the store
            # makes is plain SQL that runs on either, and its atomic() refuses a write
            return cls(cast("Database", db), root)
        if lite_write and migrate:
            lite = open_database(root=root, url=url, create=create, lite_write=True)
            return cls(cast("Database", lite), root)
        db = open_database(root=root, url=url, create=create, migrate=migrate)
        if not migrate:
            from alpstore.db.migrate import require_current_schema

            try:
                require_current_schema(db)
            except BaseException:
                db.close()
                raise
        return cls(db, root)
