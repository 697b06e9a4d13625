"""The blob-store contract: every backend (memory, SQLite, PostgreSQL) behaves the same."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from alpstore.archive import MemoryArchive, SqlArchive
from alpstore.archive.base import BlobStore
from alpstore.codec import canonical_json, digest_bytes
from alpstore.errors import CanonicalJSONError, NotFoundError
from tests.conftest import BACKENDS, Backend, postgres_schema


@pytest.fixture(params=["memory", *BACKENDS])
def archive(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BlobStore]:
    if request.param == "memory":
        yield MemoryArchive()
        return
    if request.param == "sqlite":
        backend = Backend("sqlite", tmp_path)
        yield SqlArchive(backend.open_database())
        backend.close_all()
        return
    with postgres_schema() as url:
        backend = Backend("postgresql", tmp_path, url)
        try:
            yield SqlArchive(backend.open_database())
        finally:
            backend.close_all()


def _digest(value: Any) -> bytes:
    return digest_bytes(canonical_json(value))


def test_put_returns_the_content_digest_and_stores_once(archive: BlobStore) -> None:
    doc = {"role": "user", "content": "héllo ✓", "n": [1, 2.5, None, True]}
    d1 = archive.put(doc)
    d2 = archive.put({"n": [1, 2.5, None, True], "content": "héllo ✓", "role": "user"})
    assert d1 == d2 == _digest(doc)
    assert archive.get(d1) == doc
    assert archive.stats().blobs == 1


def test_put_many_keeps_order_and_duplicates(archive: BlobStore) -> None:
    docs = [{"i": i % 4, "text": "t" * (i % 4)} for i in range(12)]
    digests = archive.put_many(docs)
    assert digests == [_digest(d) for d in docs]
    assert archive.put_many(list(reversed(docs))) == list(reversed(digests))
    assert archive.get_many(digests) == docs
    assert archive.stats().blobs == 4
    assert archive.put_many([]) == []


def test_unknown_digest_is_not_found(archive: BlobStore) -> None:
    archive.put({"x": 1})
    missing = bytes(range(32))
    assert not archive.has(missing)  # type: ignore[arg-type]
    with pytest.raises(NotFoundError, match=missing.hex()):
        archive.get(missing)  # type: ignore[arg-type]
    with pytest.raises(NotFoundError):
        archive.get_many([_digest({"x": 1}), missing])  # type: ignore[list-item]


def test_non_json_is_refused_and_nothing_is_stored(archive: BlobStore) -> None:
    with pytest.raises(CanonicalJSONError):
        archive.put_many([{"ok": 1}, {"bad": float("nan")}])
    assert archive.stats().blobs == 0


def test_summaries_commit_to_what_they_cover(archive: BlobStore) -> None:
    a, b = archive.put_many([{"m": "a"}, {"m": "b"}])
    s1 = archive.put_summary("both", [a, b])
    assert archive.put_summary("both", [a, b]) == s1
    assert archive.put_summary("both", [b, a]) != s1
    assert archive.get(s1) == {"covers": [a.hex(), b.hex()], "summary": "both"}
    with pytest.raises(NotFoundError):
        archive.put_summary("x", [bytes(32)])  # type: ignore[list-item]
    stats = archive.stats()
    assert (stats.messages, stats.summaries) == (2, 2)
    assert archive.verify().ok


def test_large_and_similar_documents_round_trip(archive: BlobStore) -> None:
    base = "\n".join(f"line {i}: " + "lorem ipsum " * 8 for i in range(600))
    docs = [{"role": "tool", "content": base}, {"role": "tool", "content": base + "\nedited"}]
    digests = archive.put_many(docs)
    assert archive.get_many(digests, verify=True) == docs
    stats = archive.stats()
    assert stats.raw_bytes == sum(len(canonical_json(d)) for d in docs)
    assert stats.stored_bytes < stats.raw_bytes
    assert archive.verify().ok


def test_binary_safe_payloads(archive: BlobStore) -> None:
    # bytes that look like escapes, NULs in text, and a payload the codec stores raw
    docs = [{"t": "\x00\\x00\ufffd"}, {"t": "z"}, {"t": "".join(chr(i) for i in range(1, 300))}]
    digests = archive.put_many(docs)
    assert archive.get_many(digests, verify=True) == docs
