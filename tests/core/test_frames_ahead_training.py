"""An import's first frame trains the archive's dictionary on the frame's thread (issue 41).

``FramesAhead`` behind an import: the first frame's row is written at once (the blobs' rows
point into it), and its thread trains the dictionary from the frame's messages, then
compresses the frame with it, while the import reads on. When the thread is done the
dictionary's row is inserted in the import's transaction and the frame's row gets its data,
codec and dictionary; every later frame uses that dictionary from the start.
"""

from __future__ import annotations

import pytest

from alpstore.archive.ahead import AHEAD_TRAIN_MIN
from alpstore.archive.reading import encode
from alpstore.codec import CODEC_ZSTD, CODEC_ZSTD_DICT
from alpstore.db.names import BLOB_MESSAGE
from alpstore.errors import UsageError
from alpstore.maintenance import verify
from tests.conftest import Backend


def _messages(start: int, count: int) -> list[dict[str, str]]:
    return [
        {
            "role": "assistant" if i % 2 else "user",
            "content": f"step {i}: ran pytest -q tests/unit/test_{i % 7}.py and read the "
            f"traceback of case {i * 31 % 97} before editing module_{i % 5}.py",
        }
        for i in range(start, start + count)
    ]


def _frames(backend: Backend) -> list[tuple[int, int | None, int]]:
    store = backend.open_store()
    with store.db.read() as conn:
        rows = conn.exec_driver_sql(
            "SELECT codec, dict_id, length(data) FROM pack_frames ORDER BY id"
        ).all()
    return [(int(c), None if d is None else int(d), int(n)) for c, d, n in rows]


def test_the_first_frame_trains_on_its_thread_and_every_frame_uses_it(backend: Backend) -> None:
    store = backend.open_store()
    first, second = _messages(0, 3 * AHEAD_TRAIN_MIN), _messages(1000, 2 * AHEAD_TRAIN_MIN)
    with store.db.atomic() as conn:
        ahead = store.archive.frames_ahead(conn, behind=True)
        one = [encode(m, BLOB_MESSAGE) for m in first]
        assert store.archive.store_packed(conn, one, ahead) == len(first)
        assert ahead._training is not None, "the first frame's dictionary not trained behind"
        two = [encode(m, BLOB_MESSAGE) for m in second]
        assert store.archive.store_packed(conn, two, ahead) == len(second)
        ahead.finish()
    frames = _frames(backend)
    with store.db.read() as conn:
        dicts = conn.exec_driver_sql("SELECT id, sample_count FROM zstd_dicts").all()
    assert len(dicts) == 1 and int(dicts[0][1]) == len(first)
    assert frames == [(CODEC_ZSTD_DICT, int(dicts[0][0]), n) for _, _, n in frames]
    assert all(n > 0 for _, _, n in frames)
    digests = [d for d, _, _ in one + two]
    assert store.archive.get_many(digests, verify=True) == first + second
    assert verify(store).ok


def test_messages_too_alike_to_learn_from_give_frames_without_a_dictionary(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    import alpstore.archive.ahead as ahead_module

    def refused(samples: object, size: int, *, f: int = 0) -> bytes:
        raise UsageError("cannot train a dictionary from these samples")  # zstd's refusal

    monkeypatch.setattr(ahead_module, "train_dictionary", refused)
    store = backend.open_store()
    same = _messages(0, 2 * AHEAD_TRAIN_MIN)
    with store.db.atomic() as conn:
        ahead = store.archive.frames_ahead(conn, behind=True)
        items = [encode(m, BLOB_MESSAGE) for m in same]
        store.archive.store_packed(conn, items, ahead)
        ahead.finish()
    with store.db.read() as conn:
        dicts = conn.exec_driver_sql("SELECT count(*) FROM zstd_dicts").scalar_one()
    assert int(dicts) == 0
    assert [(c, d) for c, d, _ in _frames(backend)] == [(CODEC_ZSTD, None)]
    assert store.archive.get_many([d for d, _, _ in items], verify=True) == same


def test_a_failure_on_the_frames_thread_is_raised_by_finish(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    import alpstore.archive.ahead as ahead_module

    def broken(raws: object, size: int) -> None:
        raise MemoryError("trainer out of memory")

    monkeypatch.setattr(ahead_module, "_train", broken)
    store = backend.open_store()
    items = [encode(m, BLOB_MESSAGE) for m in _messages(0, 2 * AHEAD_TRAIN_MIN)]
    with pytest.raises(MemoryError, match="trainer out of memory"), store.db.atomic() as conn:
        ahead = store.archive.frames_ahead(conn, behind=True)
        store.archive.store_packed(conn, items, ahead)
        ahead.finish()
    assert _frames(backend) == [], "the transaction was rolled back"
