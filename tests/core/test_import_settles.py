"""An import ends with a dictionary, its cold blobs packed and a compacted file (issue 33).

`session import` and `checkpoint import` write in one transaction, so the automatic dictionary
training (deferred inside a caller's transaction) never ran for them; the archive then held its
small blobs without a dictionary and, once one was trained by hand, the free pages the
recompression left. After the import's transaction commits, the import now trains the
dictionary (the automatic rule: enough small blobs, none yet), recompresses every small blob
with it (or packs them into frames compressed with it) and compacts the SQLite file.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from alpstore.archive.training import AUTO_TRAIN_SAMPLES
from alpstore.db.engine import sqlite_path_for_root
from alpstore.importers import parse_history
from alpstore.samples import sample_path, write_jsonl
from alpstore.store import Store
from tests.conftest import Backend, run_cli


def _pages(db: Path) -> tuple[int, int, int]:
    """``(page_count, freelist_count, small blobs without a dictionary)`` of a closed file."""
    con = sqlite3.connect(db)
    try:
        pages = int(con.execute("PRAGMA page_count").fetchone()[0])
        free = int(con.execute("PRAGMA freelist_count").fetchone()[0])
        plain = int(
            con.execute(
                "SELECT count(*) FROM blobs WHERE raw_size BETWEEN 16 AND 16384 "
                "AND dict_id IS NULL "
                "AND codec != 4"  # loose (a packed blob's frame has the dictionary)
            ).fetchone()[0]
        )
    finally:
        con.close()
    return pages, free, plain


def _stats(root: Path) -> dict[str, str]:
    res = run_cli("--root", str(root), "archive", "stats")
    assert res.code == 0, res.err
    return dict(line.split(None, 1) for line in res.out.splitlines() if line.strip())


@pytest.mark.sqlite_only("the SQLite file's pages after the command")
def test_session_import_ends_with_a_dictionary_and_a_compacted_file(tmp_path: Path) -> None:
    root = tmp_path / "run"
    root.mkdir()
    res = run_cli("--root", str(root), "session", "import", str(sample_path()))
    assert res.code == 0, res.err
    db = sqlite_path_for_root(root)
    _, free, plain = _pages(db)
    assert free == 0, "the file keeps free pages after the import"
    stats = _stats(root)
    assert stats["dictionaries"].startswith("1 ")
    assert "0.0% dead" in stats["packed"] and not stats["packed"].startswith("0 ")
    total = int(stats["blobs"].split()[0])
    # every small blob the dictionary shrinks uses it (a few tiny ones stay plain)
    assert plain < total // 10, f"{plain} of {total} small blobs were left without it"
    raw = sample_path().stat().st_size
    assert db.stat().st_size < 0.6 * raw  # 0.83x before (no dictionary, free pages kept)


@pytest.mark.sqlite_only("the SQLite file's pages after the command")
def test_checkpoint_import_ends_with_a_dictionary_and_a_compacted_file(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    assert run_cli("--root", str(src), "session", "import", str(sample_path())).code == 0
    deep = tmp_path / "deep.json"
    res = run_cli("--root", str(src), "checkpoint", "export", "conversation", "-o", str(deep))
    assert res.code == 0, res.err
    res = run_cli("--root", str(dst), "checkpoint", "import", str(deep))
    assert res.code == 0, res.err
    _, free, plain = _pages(sqlite_path_for_root(dst))
    assert free == 0
    stats = _stats(dst)
    assert stats["dictionaries"].startswith("1 ")
    assert plain < int(stats["blobs"].split()[0]) // 10


def _loose_bulk_write(store: Store, path: Path, name: str) -> None:
    """A transcript's turns written loose in one transaction, as a SQLite import and a
    `checkpoint import` write them (an import on PostgreSQL packs its messages ahead)."""
    session = store.create_session(name=name)
    with store.db.atomic():
        for turn in parse_history(path, "auto").turns:
            session.commit_turn(turn)


def test_settle_trains_once_enough_small_blobs_are_stored(backend: Backend, tmp_path: Path) -> None:
    """Both backends: the settle after a bulk write trains and recompresses; a second one (or
    one after too small a write) does nothing."""
    small = tmp_path / "small.jsonl"
    write_jsonl(small, 20)
    store = backend.open_store()
    _loose_bulk_write(store, small, "small")
    done = store.archive.settle(pack=False)
    assert done.dictionary is None and done.recompressed == 0  # too few small blobs
    assert store.archive.stats().dictionaries == 0

    big = tmp_path / "big.jsonl"
    write_jsonl(big, 300, seed=11)
    _loose_bulk_write(store, big, "big")
    assert store.archive.stats().blobs >= AUTO_TRAIN_SAMPLES
    before = store.archive.stats()
    done = store.archive.settle(pack=False)
    assert done.dictionary is not None
    after = store.archive.stats()
    assert after.dictionaries == 1
    assert done.recompressed == after.dict_compressed > 0.9 * before.messages
    assert after.stored_bytes < 0.6 * before.stored_bytes
    assert after.raw_bytes == before.raw_bytes
    # the content is unchanged: every blob still verifies
    assert store.archive.verify().ok
    again = store.archive.settle(pack=False)
    assert again.dictionary is None and again.recompressed == 0


def test_settle_packs_with_the_dictionary_it_trains(backend: Backend, tmp_path: Path) -> None:
    """What the import commands call: the dictionary trained, then every cold blob packed with
    it (nothing recompressed loose first)."""
    big = tmp_path / "big.jsonl"
    write_jsonl(big, 300, seed=11)
    store = backend.open_store()
    _loose_bulk_write(store, big, "big")
    before = store.archive.stats()
    done = store.archive.settle()
    after = store.archive.stats()
    assert done.dictionary is not None and done.recompressed == 0
    if backend.is_postgresql:  # trained for the blobs to come; nothing rewritten (see settle)
        assert done.packed is None and after.frames == 0 and after.dictionaries == 1
        assert after.stored_bytes == before.stored_bytes
        return
    assert done.packed.frames == after.frames == after.dict_frames > 0
    assert after.packed_blobs == done.packed.blobs > 0.9 * before.blobs
    assert after.stored_bytes < 0.3 * before.stored_bytes
    assert store.archive.verify().ok
