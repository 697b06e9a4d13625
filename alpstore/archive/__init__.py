"""Content-addressed blobs: put / get / has / verify / gc. Knows nothing of sessions.
May import alpstore.db, alpstore.codec and alpstore.canonical, and the layers below them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from alpstore.archive.base import (
    ArchiveStats,
    BlobStore,
    Problem,
    VerifyReport,
    summary_document,
)

if TYPE_CHECKING:
    from alpstore.archive.memory import MemoryArchive
    from alpstore.archive.sql import SqlArchive

__all__ = [
    "ArchiveStats",
    "BlobStore",
    "MemoryArchive",
    "Problem",
    "SqlArchive",
    "VerifyReport",
    "summary_document",
]


def __getattr__(name: str) -> Any:
    # Imported on first use: the read path (``alpstore.archive.reading``) loads without
    # SQLAlchemy, which ``sql`` (writing, training) imports.
    if name == "SqlArchive":
        from alpstore.archive.sql import SqlArchive

        return SqlArchive
    if name == "MemoryArchive":
        from alpstore.archive.memory import MemoryArchive

        return MemoryArchive
    raise AttributeError(f"module 'alpstore.archive' has no attribute {name!r}")
