"""Issue 14 (speed): an import compresses one batch of messages on a packing thread while it
reads the next. What it stores is exactly what the batch-by-batch import stores, a refusal or an
interrupt part-way leaves the archive as it was, and no packing thread outlives the import."""

from __future__ import annotations

import json
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

import alpstore.archive.sql
from alpstore.archive.sql import encode
from alpstore.codec import CODEC_ZSTD_BASE
from alpstore.db.tables import BLOB_MESSAGE, blobs, segment_entries
from alpstore.errors import AlpstoreError
from alpstore.portable import importing
from alpstore.portable.importing import import_document, import_file
from alpstore.store import Store
from tests.imports._files import fingerprint, mas_doc


def _stored(st: Store) -> tuple[Any, ...]:
    """Every blob row (ids included) and every entry, in id order."""
    with st.db.read() as conn:
        rows = conn.execute(
            select(
                blobs.c.id,
                blobs.c.digest,
                blobs.c.kind,
                blobs.c.raw_size,
                blobs.c.codec,
                blobs.c.dict_id,
                blobs.c.payload,
                blobs.c.base_id,
            ).order_by(blobs.c.id)
        ).all()
        entries = conn.execute(
            select(segment_entries.c.position, segment_entries.c.blob_id).order_by(
                segment_entries.c.segment_id, segment_entries.c.position
            )
        ).all()
    return tuple((*r[:6], bytes(r[6]), r[7]) for r in rows), tuple(map(tuple, entries))


def _packing_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("alpstore-import")]


def _import_both_ways(
    monkeypatch: pytest.MonkeyPatch, tmp: Path, path: Path
) -> tuple[tuple[Any, ...], tuple[Any, ...], list[Any], list[Any]]:
    """Import ``path`` into two fresh archives: batch by batch (the packing thread unused),
    then pipelined; return what each stored and the messages each session holds."""
    out: list[Any] = []
    for pipelined in (False, True):
        with monkeypatch.context() as mp:
            if not pipelined:
                mp.setattr(importing.Importer, "_rotate", importing.Importer.flush)
            with Store.open(tmp / ("new" if pipelined else "old")) as st:
                result = import_file(st, path)
                out.append((_stored(st), [e.value for e in result.session.history()]))
    (old_rows, old_msgs), (new_rows, new_msgs) = out
    return old_rows, new_rows, old_msgs, new_msgs


def _big_file(tmp: Path, messages: list[Any]) -> Path:
    path = tmp / "f.json"
    path.write_text(json.dumps(mas_doc(messages=messages)), encoding="utf-8")
    return path


def test_pipelined_import_stores_exactly_what_batch_by_batch_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importing, "BATCH_ITEMS", 16)
    # lines of ~300 characters: the large messages (18-30 KB) are past PACK_BLOB_MAX, stored
    # loose (deltas); the short ones are packed (issue 41)
    lines = [f"line {i} of a file that is read again after an edit " * 6 for i in range(100)]
    messages: list[Any] = []
    for i in range(300):
        body = "\n".join(lines[: 60 + i % 40]) + f"\nedit {i}"  # large, similar: deltas
        messages.append({"role": "tool", "content": body if i % 3 == 0 else f"short {i % 50}"})
    path = _big_file(tmp_path, messages)
    old_rows, new_rows, old_msgs, new_msgs = _import_both_ways(monkeypatch, tmp_path, path)
    assert new_rows == old_rows
    assert new_msgs == old_msgs == messages
    assert any(r[4] == CODEC_ZSTD_BASE for r in new_rows[0])  # deltas too
    assert not _packing_threads()


message = st.one_of(
    st.builds(lambda n: {"role": "user", "content": f"m{n}"}, st.integers(0, 12)),  # repeats
    st.builds(lambda t: {"role": "assistant", "content": t}, st.text(max_size=40)),
    st.builds(lambda n: {"role": "tool", "content": "x\n" * n}, st.integers(0, 700)),
)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(messages=st.lists(message, max_size=60), batch=st.integers(1, 9))
def test_any_batching_stores_the_same(
    monkeypatch: pytest.MonkeyPatch, messages: list[Any], batch: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp, monkeypatch.context() as mp:
        mp.setattr(importing, "BATCH_ITEMS", batch)
        path = _big_file(Path(tmp), messages)
        old_rows, new_rows, old_msgs, new_msgs = _import_both_ways(mp, Path(tmp), path)
        assert new_rows == old_rows
        assert new_msgs == old_msgs == messages


def test_a_refusal_after_several_batches_leaves_nothing(
    run_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importing, "BATCH_ITEMS", 5)
    messages: list[Any] = [{"role": "user", "content": f"m{i}"} for i in range(40)]
    messages[33] = {"role": "user", "content": "x", "_alpstore": {"value": "hidden"}}
    path = _big_file(tmp_path, messages)
    with Store.open(run_root) as st:
        st.create_session(name="other")
        before = fingerprint(st)
        with pytest.raises(AlpstoreError, match=r"committed_messages\[33\]"):
            import_file(st, path)
        assert fingerprint(st) == before
    assert not _packing_threads()


def test_an_interrupt_while_a_batch_is_packed_leaves_nothing(
    run_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importing, "BATCH_ITEMS", 10)
    real = alpstore.archive.sql.SqlArchive.store_encoded_counted
    calls = {"n": 0}

    def interrupted(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:  # the fourth batch is being packed meanwhile
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    doc = mas_doc(messages=[{"role": "user", "content": f"m{i}"} for i in range(100)])
    with Store.open(run_root) as st:
        before = fingerprint(st)
        monkeypatch.setattr(alpstore.archive.sql.SqlArchive, "store_encoded_counted", interrupted)
        with pytest.raises(KeyboardInterrupt):
            import_document(st, doc, source_name="f.json")
        monkeypatch.undo()
        assert fingerprint(st) == before
    assert calls["n"] == 3
    assert not _packing_threads()


def test_store_encoded_counted_takes_what_was_packed_and_packs_the_rest(tmp_path: Path) -> None:
    items = [encode({"role": "user", "content": f"message {i} " * (i + 1)}) for i in range(40)]
    with Store.open(tmp_path / "a") as a, Store.open(tmp_path / "b") as b:
        packed = a.archive.pack(items[::2])  # half of them ahead
        with a.db.atomic() as conn:
            ids_a, new_a = a.archive.store_encoded_counted(conn, items, packed=packed)
        with b.db.atomic() as conn:
            ids_b, new_b = b.archive.store_encoded_counted(conn, items)
        assert (ids_a, new_a) == (ids_b, new_b) and new_a == 40
        assert _stored(a) == _stored(b)
        assert all(kind == BLOB_MESSAGE for _, kind, _ in items)


_CYCLE: list[Any] = [{"role": "user", "content": f"m{i % 5}"} for i in range(20)]


def _digests(st: Store) -> list[bytes]:
    with st.db.read() as conn:
        return sorted(bytes(d) for d in conn.execute(select(blobs.c.digest)).scalars())


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    before=st.lists(message, max_size=30),
    messages=st.lists(message, min_size=5, max_size=60),
    batch=st.integers(1, 9),
    cap=st.sampled_from([0, 3, 200_000]),
)
@example(before=[], messages=_CYCLE, batch=2, cap=200_000)  # repeats of earlier batches
@example(before=_CYCLE[:3], messages=_CYCLE, batch=3, cap=3)  # some stored before, a cap
def test_an_import_that_skips_lookups_stores_what_one_that_looks_up_does(
    monkeypatch: pytest.MonkeyPatch, before: list[Any], messages: list[Any], batch: int, cap: int
) -> None:
    """Into an archive holding some of the file's messages already: the import's guesses (no
    lookup after an all-new batch, ids of its own earlier batches reused up to ``STORED_MAX``)
    are right or wrong by turns, and it must end with what an import that looks every message
    up ends with — the same blobs, each once, and the file's messages in order."""
    real = alpstore.archive.sql.SqlArchive.store_encoded_counted

    def always_looked_up(self: Any, conn: Any, items: Any, **kwargs: Any) -> Any:
        return real(self, conn, items, packed=kwargs.get("packed"))

    with tempfile.TemporaryDirectory() as tmp, monkeypatch.context() as mp:
        mp.setattr(importing, "BATCH_ITEMS", batch)
        mp.setattr(importing, "STORED_MAX", cap)
        path = _big_file(Path(tmp), messages)
        out = []
        for guessing in (True, False):
            with monkeypatch.context() as mp2:
                if not guessing:
                    mp2.setattr(
                        alpstore.archive.sql.SqlArchive, "store_encoded_counted", always_looked_up
                    )
                with Store.open(Path(tmp) / str(guessing)) as st:
                    if before:
                        st.create_session(name="earlier").commit_turn(before)
                    result = import_file(st, path)
                    history = [e.value for e in result.session.history()]
                    out.append((_digests(st), history, result.new_blobs))
        (guessed, history, new), (looked_up, history_ref, new_ref) = out
        assert guessed == looked_up and len(set(guessed)) == len(guessed)
        assert history == history_ref == messages
        assert new == new_ref
