"""The one crash-safe file writer: temporary file beside the target, fsync, rename, fsync folder.

Used by every file output (deep checkpoint files, checkpoint.json, continuity.md, the journal's
counters, Claude Code's settings, lineage SVGs). A symlink is written through (its target is
replaced, the link stays), and an existing file keeps its permission bits.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from alpstore.errors import StorageError


def _umask_mode() -> int:
    """The mode ``open()`` gives a new file: 0o666 less the process umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def inside_root(path: Path, root: Path) -> Path:
    """``path`` when it stays under the run root ``root`` once every symlink on the way is
    followed: a run root is often a cloned repository or an unpacked artifact, and a symlink
    planted in it (``traces/``, ``checkpoints/``, ``archive.db``) must not carry a write out.

    Raises:
        StorageError: ``path`` (or a folder on the way) leads out of ``root``.
    """
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if os.path.commonpath([real_root, real]) != real_root:
        raise StorageError(
            f"{path}: a symlink leads out of the run root (to {real}); refused",
            hint="remove the symlink, or point alpstore at another run root",
        )
    return path


def refuse_symlink(path: Path) -> None:
    """Refuse to write through ``path`` when it is a symlink (``O_NOFOLLOW`` for a file that is
    replaced by rename).

    Raises:
        StorageError: ``path`` is a symlink.
    """
    if path.is_symlink():
        raise StorageError(f"{path}: is a symlink; refusing to write through it")


def write_target(path: Path) -> Path:
    """Where a write to ``path`` lands: the file a symlink points to (resolved), else ``path``."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _write_temp(path: Path, data: bytes, mode: int, *, create_parents: bool) -> Path:
    """Write ``data`` to a fresh temporary file beside ``path``, fsynced; return its path."""
    if create_parents:
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


def fsync_dir(directory: Path) -> None:
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


def atomic_write(
    path: Path,
    data: bytes,
    *,
    mode: int | None = None,
    create_parents: bool = True,
) -> None:
    """Replace ``path`` with ``data``: temporary file in the same folder, fsync, rename.

    A reader sees the old bytes or the new ones, never a mix; a failure leaves ``path``
    untouched. ``mode`` defaults to the existing file's permission bits, else to what
    ``open()`` would give; a symlink is written through. ``create_parents=False`` refuses a
    missing folder instead of creating it.

    Raises:
        StorageError: the file system refused the write (or the folder does not exist).
    """
    target = write_target(path)
    try:
        if mode is None:
            try:
                mode = stat.S_IMODE(target.stat().st_mode)
            except FileNotFoundError:
                mode = _umask_mode()
        temp = _write_temp(target, data, mode, create_parents=create_parents)
        try:
            os.replace(temp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        fsync_dir(target.parent)
    except OSError as exc:
        raise StorageError(f"{path}: cannot write ({exc.strerror or exc})") from exc


def publish_new(path: Path, data: bytes, *, mode: int = 0o644) -> bool:
    """Create ``path`` with ``data`` only if it does not exist yet (atomic, never overwrites).

    Returns False when another writer already holds that name; nothing is written then.

    Raises:
        StorageError: the file system refused the write.
    """
    try:
        temp = _write_temp(path, data, mode, create_parents=True)
        try:
            os.link(temp, path)
        except FileExistsError:
            return False
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temp)
        fsync_dir(path.parent)
        return True
    except OSError as exc:
        raise StorageError(f"{path}: cannot write ({exc.strerror or exc})") from exc
