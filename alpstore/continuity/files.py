"""Crash-safe file primitives: advisory locks, bounded reads, timestamps; atomic replace and
exclusive publish are ``alpstore.fileio``'s (the one writer), re-exported here.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from alpstore.errors import StorageError
from alpstore.fileio import atomic_write, publish_new

__all__ = ["atomic_write", "iso_now", "locked", "publish_new", "read_bounded"]


def iso_now(now: datetime | None = None) -> str:
    """ISO 8601 in UTC with milliseconds and ``Z``: JavaScript's ``Date.toISOString`` spelling."""
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


@contextlib.contextmanager
def locked(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock (``flock``) on ``lock_path`` for the ``with`` block.

    Raises:
        StorageError: the lock file cannot be created or locked.
    """
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise StorageError(f"{lock_path}: cannot open lock ({exc.strerror or exc})") from exc
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                break
            except OSError as exc:  # pragma: no cover - EINTR on old kernels
                if exc.errno != errno.EINTR:
                    raise StorageError(f"{lock_path}: cannot lock ({exc.strerror})") from exc
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def read_bounded(path: Path, limit: int) -> bytes | None:
    """Read at most ``limit + 1`` bytes of ``path`` (so the caller can tell it is over the limit).

    Returns None when the file does not exist.

    Raises:
        OSError: the file exists but cannot be read.
    """
    try:
        with path.open("rb") as handle:
            return handle.read(limit + 1)
    except FileNotFoundError:
        return None
