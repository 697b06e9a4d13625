"""What a driver's error means for the user, without SQLAlchemy: one-line alpstore errors that
name the archive (its password hidden), with a hint. ``database.translate_errors`` feeds it
SQLAlchemy's errors, ``lite`` the sqlite3 driver's.
"""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from alpstore.errors import AlpstoreError, CorruptArchiveError, DatabaseError, StorageError

T = TypeVar("T")

WRITE_RETRIES = 8
"""Bounded retries with backoff when the database asks for one (busy, serialization, deadlock);
on PostgreSQL also bounded in time by ``lock_timeout`` (engine.PG_SERVER_TIMEOUTS_MS)."""

DAMAGED_HINT = (
    "the database file itself is damaged, so `alpstore archive verify` (which checks the blobs "
    "of an archive that opens) cannot help: restore it from a copy, or salvage what SQLite can "
    "read with `sqlite3 BROKEN.db .recover | sqlite3 NEW.db`"
)
"""What to do when the archive cannot be opened or read as a database at all."""

TRANSIENT_SQLSTATES = frozenset({"40001", "40P01", "55P03"})
"""PostgreSQL asks for a retry: serialization failure, deadlock detected, lock not available
(a ``lock_timeout`` that ran out is not: its wait was the whole bound, see ``timeout_error``)."""

AT_CAP_SQLSTATE = "53300"
"""too_many_connections: the role's or the server's connection cap is reached."""

AT_CAP_MARKERS = (
    "too many connections",
    "too many clients",
    "remaining connection slots are reserved",
)
"""A refused connection's words when the cap is reached (libpq reports no SQLSTATE then)."""

TIMEOUTS = (
    ("canceling statement due to lock timeout", "lock_timeout"),
    ("canceling statement due to statement timeout", "statement_timeout"),
    ("idle-in-transaction timeout", "idle_in_transaction_session_timeout"),
    ("no reply from the server within", "alpstore_call_timeout"),
)
"""A driver message's words → the bound that ended the call (engine.py's defaults)."""

TIMEOUT_HINTS = {
    "lock_timeout": "another transaction held a lock this call needed; raise the bound with "
    "?options=-c lock_timeout=MS in the database URL",
    "statement_timeout": "the server cancelled a statement that ran too long; raise the bound "
    "with ?options=-c statement_timeout=MS in the database URL",
    "idle_in_transaction_session_timeout": "the server ended a session that sat silent inside "
    "a transaction; raise the bound with ?options=-c idle_in_transaction_session_timeout=MS",
    "alpstore_call_timeout": "the server (or the network on the way) stopped answering; raise "
    "the bound with ?alpstore_call_timeout=SECONDS in the database URL",
}

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
    "connection is lost",
    "connection reset",
    "broken pipe",
    "consuming input failed",
    "sending query failed",
    "no connection to the server",
    "connection timeout",
    "timeout expired",
    "does not exist",
    "no such host",
    "could not translate host name",
    "name or service not known",
    "failed to resolve host",
)

NOT_A_LOST_CONNECTION = (
    "password",
    "does not exist",
    "host name",
    "no such host",
    "name or service",
    "resolve host",
)
"""Connection failures a retry on a fresh connection cannot mend (the login, the name)."""


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
    bound = next((name for words, name in TIMEOUTS if words in low), None)
    if bound is not None:
        err = DatabaseError(
            f"database {location}: {bound} reached ({first})", hint=TIMEOUT_HINTS[bound]
        )
        # a session the server ended for idling ran nothing of the call: once more on a fresh
        # connection; a stall (alpstore_call_timeout) is not retried: its bound is spent
        err.reconnect = bound == "idle_in_transaction_session_timeout"  # type: ignore[attr-defined]
        err.connection_lost = bound != "statement_timeout" and bound != "lock_timeout"  # type: ignore[attr-defined]
        return err
    if state == AT_CAP_SQLSTATE or any(m in text.lower() for m in AT_CAP_MARKERS):
        err = DatabaseError(
            f"database {location}: {first}",
            hint="the server's connection cap is reached; lower alpstore_pool_overflow or "
            "raise the role's CONNECTION LIMIT",
        )
        err.at_cap = True  # type: ignore[attr-defined]
        return err
    if (
        invalidated
        or state.startswith(CONNECTION_SQLSTATE_PREFIXES)
        or (operational and is_connection_failure(low))
    ):
        err = DatabaseError(
            f"database {location}: {first}",
            hint="check that the server is running and reachable, and the URL's user and "
            "password; the transaction was rolled back, nothing was written",
        )
        err.reconnect = not any(m in low for m in NOT_A_LOST_CONNECTION)  # type: ignore[attr-defined]
        err.connection_lost = True  # type: ignore[attr-defined]
        return err
    if "malformed json" in low:  # SQLite's json_each over a run (0009) that is not JSON
        return CorruptArchiveError(
            f"archive {location} is damaged: a segment run's blob ids are not JSON ({first})",
            hint='find it with `sqlite3 ARCHIVE.db "SELECT segment_id, start FROM segment_runs '
            'WHERE NOT json_valid(blob_ids)"`; restore the archive from a copy',
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


def retry_transient(fn: Callable[[], T], *, what: str, lock_timeout_s: float | None) -> T:
    """Run ``fn`` (which opens its own outermost transaction), retrying transient conflicts
    (``Database.retrying``, ``LiteWriteDatabase.retrying``): each attempt re-runs the whole
    transaction; a lost connection once more on a fresh one; lock waits and their retries
    share ``lock_timeout_s`` when given.

    Raises:
        DatabaseError: still conflicting after ``WRITE_RETRIES`` attempts.
    """
    delay = 0.01
    start = time.monotonic()
    reconnected = False
    for attempt in range(WRITE_RETRIES):
        try:
            return fn()
        except DatabaseError as err:
            if getattr(err, "reconnect", False) and not reconnected:
                # the connection was lost before the COMMIT (or the COMMIT was read back
                # as rolled back): nothing was written, so once more on a fresh connection
                reconnected = True
                time.sleep(0.05)
                continue
            if not getattr(err, "transient", False) or attempt == WRITE_RETRIES - 1:
                if getattr(err, "transient", False):
                    raise DatabaseError(
                        f"{what}: gave up after {WRITE_RETRIES} attempts ({err.message})",
                        hint="another writer held the archive too long; try again",
                    ) from err
                raise
            pause = delay * (1 + random.random())
            if lock_timeout_s is not None and time.monotonic() - start + pause > lock_timeout_s:
                raise DatabaseError(  # lock waits and their retries share one bound
                    f"{what}: lock_timeout reached: gave up after {attempt + 1} attempts "
                    f"in {time.monotonic() - start:.1f} s ({err.message})",
                    hint="another writer held the archive too long; raise the bound with "
                    "?options=-c lock_timeout=MS in the database URL",
                ) from err
            time.sleep(pause)
            delay = min(delay * 2, 1.0)
    raise AssertionError("unreachable")  # pragma: no cover
