"""The archive's names and numbers every reader needs, without SQLAlchemy: where the SQLite
file of a run root lives, the schema head, the blob kinds, the table names, and the check
that an archive's schema revision is the one this alpstore reads.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from alpstore.errors import NotFoundError, SchemaVersionError, UsageError

ARCHIVE_DIR = Path("traces") / "archive"
ARCHIVE_FILE = "archive.db"

SCHEMA_HEAD = "0013"
"""The newest migration this alpstore knows; a test checks it equals Alembic's head."""

DIGEST_PREFIX = 4
"""Bytes of a blob digest in the SQLite lookup index ``ix_blobs_digest_prefix`` (0008): the
digest's one stored copy is in the row; the index holds this prefix and the row id."""

SQLITE_BUSY_TIMEOUT_MS = 30_000
"""Writers wait up to 30 s for the write lock before we retry (bounded) and report."""

PG_PREPARED = 128
"""Statements of a write transaction's one-wait pipeline each PostgreSQL connection prepares
server-side (``alpstore_prepared`` in the URL; 0 = none: every statement parsed and planned
each time, as a connection pooler in transaction mode without prepared-statement support
needs). Here, not in ``engine`` or ``pgconn``, because both read it and ``engine`` imports
``pgconn`` (psycopg is optional) only when a PostgreSQL archive is opened."""

ENV_DATABASE_URL = "ALPSTORE_DATABASE_URL"
"""Names the archive's database when no URL is passed (CLI and library alike)."""

BLOB_MESSAGE = 0
BLOB_SUMMARY = 1
BLOB_STATE = 2
BLOB_MANIFEST = 3
BLOB_KINDS = {
    BLOB_MESSAGE: "message",
    BLOB_SUMMARY: "summary",
    BLOB_STATE: "state",
    BLOB_MANIFEST: "manifest",
}

ARCHIVE_TABLES = (
    "zstd_dicts",
    "blob_rows",
    "blob_refs",
    "sessions",
    "segments",
    "segment_runs",
    "checkpoints",
    "backtracks",
    "session_events",
)

ALPSTORE_MARKS = frozenset({"alembic_version", "sessions", "zstd_dicts"})
"""Tables every alpstore archive has (at any revision): a database holding tables but not these
is someone else's, and is never touched (no journal mode, no migration)."""


def foreign_tables(location: str, tables: set[str]) -> UsageError | None:
    """The refusal for a database holding ``tables`` (its table names) when it is not an
    alpstore archive; None when it is alpstore's (``ALPSTORE_MARKS``) or empty.
    """
    if not tables or tables >= ALPSTORE_MARKS:
        return None
    shown = ", ".join(sorted(ascii(t)[1:-1] for t in tables)[:5])
    more = ", …" if len(tables) > 5 else ""
    return UsageError(
        f"{location} is not an alpstore archive (it holds other tables: {shown}{more}); "
        "nothing was changed",
        hint="point alpstore at an empty database or at an alpstore archive",
    )


NO_ARCHIVE_HINT = "a writing command creates it, e.g. `alpstore session import FILE`"
"""What to do when there is no archive where one was looked for."""


def sqlite_path_for_root(root: Path) -> Path:
    """Where the embedded archive of a run root lives (AR-4)."""
    return root / ARCHIVE_DIR / ARCHIVE_FILE


def check_revision(location: str, rev: str | None, known: Callable[[], set[str]]) -> None:
    """Raise unless ``rev`` (the archive's ``alembic_version``) is :data:`SCHEMA_HEAD`.

    ``known`` lists every revision this alpstore's migrations define (called only when
    ``rev`` is not the head: it imports Alembic).

    Raises:
        NotFoundError: the database holds no archive (no schema at all).
        SchemaVersionError: the schema is older (run ``alpstore db upgrade``) or newer.
    """
    if rev == SCHEMA_HEAD:
        return
    if rev is None:
        raise NotFoundError(f"no archive at {location}", hint=NO_ARCHIVE_HINT)
    if rev not in known():
        raise SchemaVersionError(
            f"archive {location} has schema revision {rev!r}, which this alpstore does not "
            f"know (newest known: {SCHEMA_HEAD})",
            hint="upgrade alpstore to open it; nothing was changed",
        )
    raise SchemaVersionError(
        f"archive {location} has schema revision {rev}, older than this alpstore's "
        f"{SCHEMA_HEAD}; a reading command does not upgrade it",
        hint="run `alpstore db upgrade` (older alpstore versions cannot open it after that), "
        "or use the alpstore that wrote it; nothing was changed",
    )
