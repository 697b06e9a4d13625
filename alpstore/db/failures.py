"""What a driver's error means for the user, without SQLAlchemy: one-line alpstore errors that
name the archive (its password hidden), with a hint. ``database.translate_errors`` feeds it
SQLAlchemy's errors, ``lite`` the sqlite3 driver's.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from alpstore.errors import AlpstoreError, CorruptArchiveError, DatabaseError, StorageError

DAMAGED_HINT = (
    "the database file itself is damaged, so `alpstore archive verify` (which checks the blobs "
    "of an archive that opens) cannot help: restore it from a copy, or salvage what SQLite can "
    "read with `sqlite3 BROKEN.db .recover | sqlite3 NEW.db`"
)
"""What to do when the archive cannot be opened or read as a database at all."""

TRANSIENT_SQLSTATES = frozenset({"40001", "40P01", "55P03"})
"""PostgreSQL asks for a retry: serialization failure, deadlock detected, lock not available."""

CONNECTION_SQLSTATE_PREFIXES = ("08", "57P")
"""Connection exceptions and operator intervention (server shut down, connection terminated)."""

TRANSIENT_MARKERS = (
    "database is locked",
    "busy",
    "could not serialize",
    "deadlock detected",
    "serialization failure",
)

CONNECTION_MARKERS = (
    "connection failed",
    "could not connect",
    "connection refused",
    "password authentication failed",
    "server closed the connection",
    "terminating connection",
    "connection is closed",
    "connection timeout",
    "timeout expired",
    "does not exist",
    "no such host",
    "could not translate host name",
    "name or service not known",
    "failed to resolve host",
)


def is_connection_failure(low: str) -> bool:
    """True when a (lower-cased) driver message says the connection failed or was lost."""
    return any(m in low for m in CONNECTION_MARKERS)


def unwritable_folder(location: str) -> bool:
    """True when ``location`` is a file path whose folder exists but cannot be written."""
    folder = Path(location).parent
    return folder.is_dir() and not os.access(folder, os.W_OK)


def not_utf8(location: str, err: UnicodeDecodeError) -> CorruptArchiveError:
    """sqlite3 decoding a damaged schema or error text."""
    return CorruptArchiveError(
        f"archive {location} is damaged: it holds text that is not UTF-8 ({err.reason})",
        hint=DAMAGED_HINT,
    )


def driver_error(
    location: str,
    message: str,
    *,
    fallback: str,
    state: str = "",
    invalidated: bool = False,
    operational: bool = False,
) -> AlpstoreError:
    """The alpstore error for a driver error whose text is ``message`` (``fallback`` names it
    when the text is empty).

    ``state``: the SQLSTATE (PostgreSQL); ``invalidated``: the driver says the connection is
    gone; ``operational``: an operational error (one that reads like a connection failure is
    reported as one).
    """
    text = redact(message)
    first = text.strip().splitlines()[0] if text.strip() else fallback
    low = first.lower()
    if (
        invalidated
        or state.startswith(CONNECTION_SQLSTATE_PREFIXES)
        or (operational and is_connection_failure(low))
    ):
        return DatabaseError(
            f"database {location}: {first}",
            hint="check that the server is running and reachable, and the URL's user and "
            "password; the transaction was rolled back, nothing was written",
        )
    if (
        "file is not a database" in low
        or "malformed" in low
        or "disk image" in low
        or "could not decode to utf-8" in low
    ):
        return CorruptArchiveError(f"archive {location} is damaged: {first}", hint=DAMAGED_HINT)
    if "readonly" in low or "read-only" in low:
        return StorageError(f"archive {location} is read-only: {first}")
    if "unable to open database file" in low and unwritable_folder(location):
        return StorageError(
            f"archive {location}: its folder is read-only ({first})",
            hint="SQLite writes its -wal and -shm files beside the archive; make the run root "
            "writable",
        )
    if "disk is full" in low or "no space" in low or "disk i/o" in low:
        return StorageError(
            f"archive {location}: {first}", hint="free space and try again; nothing was written"
        )
    dberr = DatabaseError(f"archive {location}: {first}")
    dberr.transient = state in TRANSIENT_SQLSTATES or any(  # type: ignore[attr-defined]
        m in low for m in TRANSIENT_MARKERS
    )
    return dberr


_PASSWORD_IN_URL = re.compile(r"(\w[\w+.-]*://[^:/@\s]*:)([^@\s]*)(@)")
_PASSWORD_KV = re.compile(r"(password\s*=\s*)('[^']*'|\S+)", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with any password of a URL or ``password=…`` setting replaced by ``***``."""
    return _PASSWORD_KV.sub(r"\1***", _PASSWORD_IN_URL.sub(r"\1***\3", text))
