"""Where an export may not write: over the archive it reads, or over any SQLite database (issue
39: `session export S -o traces/archive/archive.db --force` replaced the live archive).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from alpstore.errors import CheckpointFileError

_DATABASE_MAGIC: Final = (
    b"SQLite format 3\x00",  # a database file
    b"\x37\x7f\x06\x82",  # its write-ahead log (either byte order)
    b"\x37\x7f\x06\x83",
    b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7",  # its rollback journal
)


def refuse_database_target(path: Path, *, archive: Path | None = None) -> None:
    """Refuse to write an export over a database: any file of the archive being read (the
    SQLite file, its ``-wal``, ``-shm``, ``-journal`` and lock files), or any file
    that is a SQLite database or one's log or journal, whatever ``--force`` says (an export over
    the archive it reads replaced the live archive: every session was gone).

    Raises:
        CheckpointFileError: ``path`` is one of those.
    """
    target = Path(os.path.realpath(path))
    if archive is not None:
        own = Path(os.path.realpath(archive))
        # the file, its -wal, -shm, -journal and -writers lock
        if target.parent == own.parent and target.name.startswith(own.name):
            raise CheckpointFileError(
                f"{path}: a file of the archive this export reads; refusing to write over it "
                "(even with --force)",
                hint="export to a file outside the archive",
            )
    try:
        with open(target, "rb") as fh:
            head = fh.read(16)
    except OSError:
        return  # absent (or unreadable: the write reports that)
    if any(head.startswith(magic) for magic in _DATABASE_MAGIC):
        raise CheckpointFileError(
            f"{path}: is a SQLite database (or its log); refusing to write an export over it",
            hint="export to a new file",
        )
