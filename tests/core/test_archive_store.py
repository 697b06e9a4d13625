from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select, text

from alpstore.archive import MemoryArchive, SqlArchive
from alpstore.archive.sql import AUTO_TRAIN_SAMPLES
from alpstore.db import open_database
from alpstore.db.tables import blob_rows, blobs
from alpstore.errors import NotFoundError


@pytest.fixture
def archive(tmp_path: Path) -> Iterator[SqlArchive]:
    """An archive closed after the test (its WAL checkpoint thread with it)."""
    db = open_database(root=tmp_path / "run")
    archive = SqlArchive(db)
    yield archive
    archive.close()
    db.close()


def _count(a: SqlArchive) -> int:
    with a.db.read() as conn:
        return int(conn.execute(select(func.count()).select_from(blobs)).scalar_one())


def test_same_content_is_stored_once(archive: SqlArchive) -> None:
    d1 = archive.put({"role": "user", "content": "hi", "n": 1})
    d2 = archive.put({"n": 1, "content": "hi", "role": "user"})
    assert d1 == d2
    assert _count(archive) == 1
    assert archive.get(d1) == {"role": "user", "content": "hi", "n": 1}


def test_put_many_is_idempotent_and_ordered(archive: SqlArchive) -> None:
    docs = [{"i": i % 3} for i in range(9)]
    digests = archive.put_many(docs)
    assert archive.put_many(docs) == digests
    assert _count(archive) == 3
    assert archive.get_many(digests) == docs


def test_unknown_digest(archive: SqlArchive) -> None:
    with pytest.raises(NotFoundError, match="00" * 32):
        archive.get(bytes(32))  # type: ignore[arg-type]
    assert not archive.has(bytes(32))  # type: ignore[arg-type]


def test_summary_commits_to_what_it_covers(archive: SqlArchive) -> None:
    a, b = archive.put_many([{"m": 1}, {"m": 2}])
    s1 = archive.put_summary("two messages", [a, b])
    s2 = archive.put_summary("two messages", [b, a])
    assert s1 != s2
    assert archive.get(s1)["covers"] == [a.hex(), b.hex()]
    with pytest.raises(NotFoundError):
        archive.put_summary("x", [bytes(32)])  # type: ignore[list-item]


def test_flipped_byte_is_named_by_verify(archive: SqlArchive) -> None:
    digests = archive.put_many([{"content": "x" * 300, "i": i} for i in range(5)])
    assert archive.verify().ok
    with archive.db.atomic() as conn:
        payload = conn.execute(select(blobs.c.payload).where(blobs.c.digest == digests[2])).scalar()
        damaged = bytearray(payload)
        damaged[len(damaged) // 2] ^= 0xFF
        conn.execute(
            blob_rows.update()
            .where(blob_rows.c.digest == digests[2])
            .values(payload=bytes(damaged))
        )
    report = archive.verify()
    assert not report.ok
    assert [p.digest for p in report.problems] == [digests[2].hex()]


def test_dictionary_is_trained_automatically_and_used(archive: SqlArchive) -> None:
    docs = [
        {"role": "tool", "content": f"ok {i} " + "log line " * (i % 7)}
        for i in range(AUTO_TRAIN_SAMPLES + 10)
    ]
    digests = archive.put_many(docs[:AUTO_TRAIN_SAMPLES])
    assert archive.wait_for_training(timeout=60) and archive.training_error is None
    stats = archive.stats()
    assert stats.dictionaries == 1 and stats.dict_compressed > 0
    more = archive.put_many(docs[AUTO_TRAIN_SAMPLES:])
    assert archive.get_many(digests + more) == docs
    assert archive.verify().ok
    with archive.db.read() as conn:
        assert conn.execute(text("select count(*) from blobs where codec = 2")).scalar_one() > 0


contract_docs = st.lists(
    st.dictionaries(
        st.sampled_from(["role", "content", "n"]), st.text(max_size=40) | st.integers(), max_size=3
    ),
    max_size=12,
)


@settings(max_examples=25)
@given(contract_docs)
def test_memory_and_sql_archives_agree(
    tmp_path_factory: pytest.TempPathFactory, docs: list[dict[str, object]]
) -> None:
    sql = SqlArchive(open_database(root=tmp_path_factory.mktemp("a")), auto_train=False)
    mem = MemoryArchive()
    assert sql.put_many(docs) == mem.put_many(docs)
    assert sql.stats().blobs == mem.stats().blobs == len({str(sorted(d.items())) for d in docs})
    assert sql.get_many(mem.put_many(docs)) == docs


def _file(version: int) -> dict[str, object]:
    lines = [f"def function_{i}(value, limit):\n    return value + {i} * limit" for i in range(80)]
    lines[40] = f"def changed_{version}():\n    return {version}"
    return {"role": "tool", "tool_call_id": f"c{version}", "content": "\n\n".join(lines)}


def test_a_file_read_again_is_stored_as_a_delta(archive: SqlArchive) -> None:
    first = archive.put(_file(1))
    second = archive.put(_file(2))
    with archive.db.read() as conn:
        rows = dict(conn.execute(text("select digest, codec from blobs")).all())
        sizes = dict(conn.execute(text("select codec, length(payload) from blobs")).all())
    assert rows[first] != 3 and rows[second] == 3
    assert sizes[3] < sizes[rows[first]] / 3
    fresh = SqlArchive(archive.db)  # another reader: no cached bases
    assert fresh.get(second, verify=True) == _file(2)
    assert archive.verify().ok


def test_gc_keeps_the_base_of_a_live_delta(tmp_path: Path) -> None:
    from alpstore.maintenance import gc
    from alpstore.store import Store

    store = Store.open(tmp_path)
    keep = store.create_session()
    store.archive.put(_file(1))  # the base: referenced by no session
    keep.append([_file(2)])  # stored as a delta against it
    keep.checkpoint()
    report = gc(store)
    assert report.blobs_removed == 0
    assert [e.value for e in keep.history()] == [_file(2)]


def test_threads_share_one_archive(archive: SqlArchive) -> None:
    """LangGraph calls a saver from many threads: reads and writes through one archive at once
    must neither crash (python-zstandard contexts are not thread-safe) nor mix up content."""
    import threading

    small = [
        {"role": "tool", "content": f"result {i} " + "build output line " * (i % 13)}
        for i in range(AUTO_TRAIN_SAMPLES)
    ]
    large = [  # long zstd work, during which the C code runs without the GIL
        {"role": "tool", "content": " ".join(f"line {i}-{k} of a long log" for k in range(4000))}
        for i in range(60)
    ]
    docs = [d for pair in zip(small, large * 20, strict=False) for d in pair] + small[60:]
    digests = archive.put_many(docs)
    archive.wait_for_training(timeout=60)
    assert archive.stats().dictionaries == 1  # dictionary and plain frames both in play
    failures: list[BaseException] = []
    start = threading.Barrier(6)

    def reader(offset: int) -> None:
        try:
            start.wait()
            for round_ in range(15):
                lo = (offset * 97 + round_ * 61) % (len(docs) - 300)
                assert archive.get_many(digests[lo : lo + 300]) == docs[lo : lo + 300]
        except BaseException as err:
            failures.append(err)

    def writer(offset: int) -> None:
        try:
            start.wait()
            for round_ in range(15):
                new = [
                    {"role": "tool", "content": f"w{offset} {round_} {k} " * 900} for k in range(8)
                ]
                assert archive.get_many(archive.put_many(new)) == new
        except BaseException as err:
            failures.append(err)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
    threads += [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[0]
    assert archive.verify().ok


def test_dictionary_samples_stop_at_their_memory_bound(
    archive: SqlArchive, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trainer holds at most TRAIN_SAMPLE_BYTES of samples (plus the last slice): a 100 MB
    import of 11 KB messages held 88 MB of them, twice, and peaked at 308 MB."""
    import alpstore.archive.training as training

    archive.auto_train = False
    docs = [{"role": "tool", "content": f"{i} " + "x y z " * 300} for i in range(400)]
    archive.put_many(docs)
    _, unbounded = archive._training_samples(400)
    assert len(unbounded) == 400
    per = sum(len(raw) for _, raw in unbounded) // 400
    monkeypatch.setattr(training, "TRAIN_SAMPLE_BYTES", 100 * per)
    _, bounded = archive._training_samples(400)
    assert 100 <= len(bounded) <= 100 + training.TRAIN_SLICE
    dict_id, used, _ = archive.train_dictionary(samples=400, recompress=False)
    assert dict_id and used == len(bounded)
