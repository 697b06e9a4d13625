"""Crash-safe file primitives: atomic replace, exclusive publish, advisory locks, timestamps."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from alpstore.errors import StorageError


def iso_now(now: datetime | None = None) -> str:
    """ISO 8601 in UTC with milliseconds and ``Z``: JavaScript's ``Date.toISOString`` spelling."""
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _write_temp(path: Path, data: bytes, mode: int) -> Path:
    """Write ``data`` to a fresh temporary file beside ``path``, fsynced; return its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise
    os.close(fd)
    return Path(name)


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (best effort where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some file systems refuse fsync on directories
        pass
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data``: temporary file in the same folder, fsync, rename.

    A reader sees the old bytes or the new ones, never a mix; a failure leaves ``path`` untouched.

    Raises:
        StorageError: the file system refused the write.
    """
    try:
        temp = _write_temp(path, data, mode)
        try:
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        _fsync_dir(path.parent)
    except OSError as exc:
        raise StorageError(f"{path}: cannot write ({exc.strerror or exc})") from exc


def publish_new(path: Path, data: bytes, *, mode: int = 0o644) -> bool:
    """Create ``path`` with ``data`` only if it does not exist yet (atomic, never overwrites).

    Returns False when another writer already holds that name; nothing is written then.

    Raises:
        StorageError: the file system refused the write.
    """
    try:
        temp = _write_temp(path, data, mode)
        try:
            os.link(temp, path)
        except FileExistsError:
            return False
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temp)
        _fsync_dir(path.parent)
        return True
    except OSError as exc:
        raise StorageError(f"{path}: cannot write ({exc.strerror or exc})") from exc


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
