"""An in-process blob store: the same contract as the SQL one, for tests and snapshots."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from alpstore.archive.base import ArchiveStats, Problem, VerifyReport, summary_document
from alpstore.codec import (
    CODEC_ZSTD_DICT,
    DEFAULT_LEVEL,
    Compressor,
    Decompressor,
    Digest,
    canonical_json,
    digest_bytes,
    digest_hex,
    parse_json,
)
from alpstore.db.names import BLOB_MESSAGE, BLOB_SUMMARY
from alpstore.errors import IntegrityError, NotFoundError


class MemoryArchive:
    """Blobs in a dict: ``digest -> (kind, raw_size, codec, payload)``; process-local."""

    def __init__(self, level: int = DEFAULT_LEVEL) -> None:
        self._comp = Compressor(level)
        self._dec = Decompressor()
        self._blobs: dict[bytes, tuple[int, int, int, bytes]] = {}
        self._refs: dict[bytes, tuple[bytes, ...]] = {}

    def put(self, value: Any, kind: int = BLOB_MESSAGE) -> Digest:
        """Store ``value`` once; return its digest (idempotent)."""
        raw = canonical_json(value)
        digest = digest_bytes(raw)
        if digest not in self._blobs:
            codec, payload = self._comp.compress(raw)
            self._blobs[digest] = (kind, len(raw), codec, payload)
        return digest

    def put_many(self, values: Sequence[Any], kind: int = BLOB_MESSAGE) -> list[Digest]:
        """Store every value (all or nothing); return their digests in order."""
        raws = [canonical_json(v) for v in values]  # validate all before storing any
        out = []
        for raw in raws:
            digest = digest_bytes(raw)
            if digest not in self._blobs:
                codec, payload = self._comp.compress(raw)
                self._blobs[digest] = (kind, len(raw), codec, payload)
            out.append(digest)
        return out

    def put_summary(self, text: str, covers: Sequence[Digest]) -> Digest:
        """Store a summary node covering ``covers`` (which must already be stored).

        Raises:
            NotFoundError: a covered digest is not stored.
        """
        for d in covers:
            if d not in self._blobs:
                raise NotFoundError(f"summary covers unknown blob {digest_hex(d)}")
        digest = self.put(summary_document(text, covers), BLOB_SUMMARY)
        self._refs[digest] = tuple(covers)
        return digest

    def _raw(self, digest: bytes, verify: bool) -> bytes:
        try:
            _, size, codec, payload = self._blobs[digest]
        except KeyError:
            raise NotFoundError(f"no blob {digest_hex(digest)} in the archive") from None
        raw = self._dec.decompress(codec, payload, size, what=f"blob {digest_hex(digest)}")
        if verify and digest_bytes(raw) != digest:
            raise IntegrityError(f"blob {digest_hex(digest)}: content does not match its digest")
        return raw

    def get(self, digest: Digest, *, verify: bool = False) -> Any:
        """Return the document stored under ``digest``."""
        return parse_json(self._raw(digest, verify), where=f"blob {digest_hex(digest)}")

    def get_many(self, digests: Sequence[Digest], *, verify: bool = False) -> list[Any]:
        """Return the documents stored under ``digests``, in order."""
        return [self.get(d, verify=verify) for d in digests]

    def has(self, digest: Digest) -> bool:
        """True when ``digest`` is stored."""
        return digest in self._blobs

    def corrupt(self, digest: Digest, payload: bytes) -> None:
        """Replace a blob's stored bytes (for tests of ``verify``)."""
        kind, size, codec, _ = self._blobs[digest]
        self._blobs[digest] = (kind, size, codec, payload)

    def stats(self) -> ArchiveStats:
        """Counts and sizes."""
        kinds = [k for k, _, _, _ in self._blobs.values()]
        msgs = kinds.count(BLOB_MESSAGE)
        sums = kinds.count(BLOB_SUMMARY)
        return ArchiveStats(
            blobs=len(kinds),
            messages=msgs,
            summaries=sums,
            other=len(kinds) - msgs - sums,
            raw_bytes=sum(s for _, s, _, _ in self._blobs.values()),
            stored_bytes=sum(len(p) for _, _, _, p in self._blobs.values()),
            dictionaries=0,
            dict_compressed=sum(1 for _, _, c, _ in self._blobs.values() if c == CODEC_ZSTD_DICT),
        )

    def verify(self) -> VerifyReport:
        """Re-hash every blob and check summary references."""
        report = VerifyReport()
        for digest in list(self._blobs):
            report.blobs_checked += 1
            try:
                self._raw(digest, True)
            except IntegrityError as exc:
                report.problems.append(Problem(what=str(exc), digest=digest.hex()))
        for parent, children in self._refs.items():
            for child in children:
                if child not in self._blobs:
                    report.problems.append(
                        Problem(
                            what=f"summary {parent.hex()} covers missing blob {child.hex()}",
                            digest=parent.hex(),
                        )
                    )
        return report
