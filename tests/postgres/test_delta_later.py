"""A blob stored as a delta in a write sent unread (``ArchiveWriter.store_encoded_later``: a
native turn, an ``AlpstoreSaver`` put or put_writes) finds its base in the insert itself, not
by a lookup first (``ArchiveWriter._base_ids``, one more round trip on a remote PostgreSQL:
0.85 a turn of the tool loop); a base `gc` removed meanwhile leaves the document stored whole,
and a base in its place, as the lookup did (issue 45).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete

from alpstore.archive.sql import SqlArchive, encode
from alpstore.codec import CODEC_ZSTD_BASE
from alpstore.db import open_database
from alpstore.db.tables import blob_rows
from tests.conftest import postgres_schema
from tests.core.test_delta_search import _codecs, _file

pytestmark = pytest.mark.postgres


def _later(archive: SqlArchive, doc: dict[str, object], small: dict[str, object]) -> bytes:
    """``doc`` and a small document stored in one write sent unread; ``doc``'s digest."""
    items = [encode(doc), encode(small)]
    with archive.db.atomic() as conn:
        archive.store_encoded_later(conn, items)
    return items[0][0]


def _no_lookup(*_: Any) -> Any:
    raise AssertionError("a delta base looked up before the insert")


@contextmanager
def _archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SqlArchive]:
    """An archive on PostgreSQL whose writes may not look a delta base up first."""
    with postgres_schema() as url:
        archive = SqlArchive(open_database(root=tmp_path / "run", url=url), auto_train=False)
        try:
            monkeypatch.setattr(archive, "_base_ids", _no_lookup)
            yield archive
        finally:
            archive.close()


def test_a_delta_sent_unread_finds_its_base_in_the_insert(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _archive(tmp_path, monkeypatch) as archive:
        first = _later(archive, _file(1), {"role": "user", "content": "one"})
        second = _later(archive, _file(2), {"role": "user", "content": "two"})
        again = _later(archive, _file(2), {"role": "user", "content": "two"})  # stored
        codecs = _codecs(archive)
        assert again == second
        assert codecs[second][:2] == (CODEC_ZSTD_BASE, codecs[first][2])
        assert codecs[first][0] != CODEC_ZSTD_BASE
        assert archive.get(second, verify=True) == _file(2)
        assert archive.verify().ok


def test_a_base_gone_meanwhile_leaves_the_document_whole_and_a_base_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _archive(tmp_path, monkeypatch) as archive:
        first = _later(archive, _file(1), {"role": "user", "content": "one"})
        with archive.db.atomic() as conn:  # as `gc` would: nothing refers to it
            conn.execute(delete(blob_rows).where(blob_rows.c.digest == first))
        second = _later(archive, _file(2), {"role": "user", "content": "two"})
        third = _later(archive, _file(3), {"role": "user", "content": "three"})
        codecs = _codecs(archive)
        assert first not in codecs and first not in archive._bases
        assert codecs[second][:2] == (codecs[second][0], None)
        assert codecs[second][0] != CODEC_ZSTD_BASE
        assert codecs[third][:2] == (CODEC_ZSTD_BASE, codecs[second][2])
        assert archive.get(second, verify=True) == _file(2)
        assert archive.get(third, verify=True) == _file(3)
        assert archive.verify().ok
