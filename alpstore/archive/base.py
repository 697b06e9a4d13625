"""The blob-store contract shared by every backend, and the report types it returns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from alpstore.codec import Digest, digest_hex
from alpstore.db.names import BLOB_MESSAGE


def summary_document(text: str, covers: Sequence[bytes]) -> dict[str, Any]:
    """The content of a summary node: its text and the ordered digests it covers.

    The covered digests are part of the content, so the summary's digest commits to them.
    """
    return {"covers": [digest_hex(d) for d in covers], "summary": text}


@dataclass(frozen=True)
class ArchiveStats:
    """Counts and sizes of an archive's blobs."""

    blobs: int
    messages: int
    summaries: int
    other: int
    raw_bytes: int
    stored_bytes: int
    dictionaries: int
    dict_compressed: int
    loose_bytes: int = 0
    """Payload bytes of the blobs stored loose (one row, one frame each)."""
    packed_blobs: int = 0
    """Blobs stored in pack frames (issue 33)."""
    frames: int = 0
    """Pack frames."""
    packed_bytes: int = 0
    """The frames' stored bytes."""
    dead_fraction: float = 0.0
    """Of the frames' content, the fraction no blob points at any more (`gc` rewrites a frame
    past ``REPACK_DEAD``)."""
    dict_frames: int = 0
    """Frames compressed with a dictionary."""

    @property
    def ratio(self) -> float:
        """Raw bytes ÷ stored bytes (1.0 when empty)."""
        return self.raw_bytes / self.stored_bytes if self.stored_bytes else 1.0


@dataclass(frozen=True)
class Problem:
    """One thing `verify` found wrong, naming the blob and what depends on it."""

    what: str
    digest: str | None = None
    sessions: tuple[str, ...] = ()
    checkpoints: tuple[int, ...] = ()

    def line(self) -> str:
        """A one-line description for the CLI."""
        parts = [self.what]
        if self.sessions:
            parts.append("sessions affected: " + ", ".join(self.sessions))
        if self.checkpoints:
            shown = ", ".join(str(c) for c in self.checkpoints[:10])
            more = f" (+{len(self.checkpoints) - 10} more)" if len(self.checkpoints) > 10 else ""
            parts.append(f"checkpoints affected: {shown}{more}")
        return "; ".join(parts)


@dataclass
class VerifyReport:
    """What `verify` checked and everything it found."""

    blobs_checked: int = 0
    rows_checked: int = 0
    problems: list[Problem] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    bad_blob_ids: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing is wrong."""
        return not self.problems


class BlobStore(Protocol):
    """Content-addressed storage of JSON documents keyed by BLAKE3-256 of canonical bytes."""

    def put(self, value: Any, kind: int = BLOB_MESSAGE) -> Digest:
        """Store ``value`` once; return its digest (idempotent)."""
        ...

    def put_many(self, values: Sequence[Any], kind: int = BLOB_MESSAGE) -> list[Digest]:
        """Store every value in one transaction; return their digests in order."""
        ...

    def put_summary(self, text: str, covers: Sequence[Digest]) -> Digest:
        """Store a summary node covering ``covers`` (which must already be stored)."""
        ...

    def get(self, digest: Digest, *, verify: bool = False) -> Any:
        """Return the document stored under ``digest``."""
        ...

    def get_many(self, digests: Sequence[Digest], *, verify: bool = False) -> list[Any]:
        """Return the documents stored under ``digests``, in order."""
        ...

    def has(self, digest: Digest) -> bool:
        """True when ``digest`` is stored."""
        ...

    def stats(self) -> ArchiveStats:
        """Counts and sizes."""
        ...

    def verify(self) -> VerifyReport:
        """Re-hash every blob and check sizes and references."""
        ...
