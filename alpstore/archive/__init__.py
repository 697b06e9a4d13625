"""Content-addressed blobs: put / get / has / verify / gc. Knows nothing of sessions."""

from alpstore.archive.base import (
    ArchiveStats,
    BlobStore,
    Problem,
    VerifyReport,
    summary_document,
)
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
