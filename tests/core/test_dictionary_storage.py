"""A trained dictionary is stored compressed (migration 0006, issue 16's bytes goal), checked
against its digest when it is loaded, and read back the same way from rows written before 0006.
"""

from __future__ import annotations

from typing import Any

import pytest
import zstandard
from sqlalchemy import text

import alpstore.archive.training as archive_sql
from alembic import command
from alpstore.codec import CODEC_RAW, CODEC_ZSTD, CODEC_ZSTD_DICT, digest_bytes, pack_dictionary
from alpstore.db.migrate import SCHEMA_HEAD, alembic_config, current_revision, upgrade
from alpstore.errors import IntegrityError
from alpstore.samples import generate
from alpstore.store import Store
from tests.conftest import Backend


@pytest.fixture(autouse=True)
def _one_dictionary(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the dictionary each test trains: no automatic one beside it."""
    monkeypatch.setattr(archive_sql, "AUTO_TRAIN_SAMPLES", 10**9)


def _filled(backend: Backend) -> tuple[Store, list[Any]]:
    """A session of small messages, then a dictionary trained on them (the small blobs are
    recompressed with it)."""
    store = backend.open_store()
    session = store.create_session(name="d")
    messages = list(generate(300, seed=5))
    for start in range(0, len(messages), 3):
        session.commit_turn(messages[start : start + 3])
    store.archive.train_dictionary(samples=400)
    return store, messages


def _dict_rows(backend: Backend) -> list[Any]:
    db = backend.open_database()
    with db.read() as conn:
        return list(
            conn.execute(text("SELECT id, codec, size, digest, data FROM zstd_dicts ORDER BY id"))
        )


def _set_dict(backend: Backend, dict_id: int, **columns: Any) -> None:
    db = backend.open_database()
    sets = ", ".join(f"{name} = :{name}" for name in columns)
    with db.atomic() as conn:
        conn.execute(
            text(f"UPDATE zstd_dicts SET {sets} WHERE id = :id"), {**columns, "id": dict_id}
        )


def _read_fresh(backend: Backend) -> list[Any]:
    """The session's messages as a new process reads them (nothing loaded yet)."""
    with Store.open(backend.root, url=backend.url) as store:
        return [e.value for e in store.get_session("d").history()]


def _dict_frames(backend: Backend) -> int:
    db = backend.open_database()
    with db.read() as conn:
        return int(
            conn.execute(
                text("SELECT COUNT(*) FROM blobs WHERE codec = :c"), {"c": CODEC_ZSTD_DICT}
            ).scalar_one()
        )


def test_a_trained_dictionary_is_stored_as_a_zstd_frame_of_itself(backend: Backend) -> None:
    _store, messages = _filled(backend)
    [(_dict_id, codec, size, digest, data)] = _dict_rows(backend)
    assert codec == CODEC_ZSTD
    assert len(bytes(data)) * 3 < size  # a trained dictionary compresses several times
    own = zstandard.ZstdDecompressor().decompress(bytes(data), max_output_size=size)
    assert len(own) == size and digest_bytes(own) == bytes(digest)
    assert own[:4] == b"\x37\xa4\x30\xec"  # zstd's dictionary magic: the dictionary itself
    assert _dict_frames(backend) > 100
    assert _read_fresh(backend) == messages


def test_a_dictionary_stored_as_before_0006_reads_as_it_did(backend: Backend) -> None:
    """Rows written before 0006 hold the dictionary's own bytes; the column says codec 0."""
    _store, messages = _filled(backend)
    [(dict_id, _codec, size, _digest, data)] = _dict_rows(backend)
    own = zstandard.ZstdDecompressor().decompress(bytes(data), max_output_size=size)
    _set_dict(backend, dict_id, codec=CODEC_RAW, data=own)
    assert _read_fresh(backend) == messages


@pytest.mark.parametrize(
    "change",
    ["flipped byte", "another dictionary", "wrong codec", "wrong size"],
)
def test_a_damaged_dictionary_is_refused_by_name_and_not_used(
    backend: Backend, change: str
) -> None:
    _filled(backend)
    [(dict_id, _codec, size, _digest, data)] = _dict_rows(backend)
    frame = bytearray(bytes(data))
    if change == "flipped byte":
        frame[len(frame) // 2] ^= 0x40
        _set_dict(backend, dict_id, data=bytes(frame))
    elif change == "another dictionary":  # a valid frame of a valid dictionary, not this one
        other = zstandard.train_dictionary(size, [m.encode() for m in _samples()]).as_bytes()
        _codec, stored = pack_dictionary(other)
        _set_dict(backend, dict_id, data=stored, size=len(other))
    elif change == "wrong codec":
        _set_dict(backend, dict_id, codec=CODEC_ZSTD_DICT)
    else:
        _set_dict(backend, dict_id, size=size - 1)
    with pytest.raises(IntegrityError, match=f"zstd dictionary {dict_id}"):
        _read_fresh(backend)
    result = backend.cli("archive", "verify")
    assert result.code == IntegrityError.exit_code, result.out + result.err
    assert f"zstd dictionary {dict_id}" in result.out + result.err
    assert "Traceback" not in result.err


def _samples() -> list[str]:
    return [f"sample {i}: " + "another corpus entirely, " * (i % 7 + 1) for i in range(2000)]


def test_migration_0006_downgrades_to_the_dictionary_bytes_and_back(backend: Backend) -> None:
    store, messages = _filled(backend)
    [(dict_id, _codec, size, digest, data)] = _dict_rows(backend)
    own = zstandard.ZstdDecompressor().decompress(bytes(data), max_output_size=size)
    store.close()
    db = backend.open_database()
    command.downgrade(alembic_config(db), "0005")
    assert current_revision(db) == "0005"
    with db.read() as conn:
        rows = conn.execute(text("SELECT id, size, digest, data FROM zstd_dicts")).all()
    assert [(int(i), int(s), bytes(d), bytes(b)) for i, s, d, b in rows] == [
        (dict_id, size, bytes(digest), own)
    ]  # what an alpstore from before 0006 reads
    upgrade(db)
    assert current_revision(db) == SCHEMA_HEAD
    [(_i, codec, _s, _d, data_after)] = _dict_rows(backend)
    assert codec == CODEC_RAW and bytes(data_after) == own  # kept as it was, read as it was
    assert _read_fresh(backend) == messages


def test_verify_checks_the_dictionary_row_even_when_this_process_has_it_loaded(
    backend: Backend,
) -> None:
    """A long-lived process decodes from the copy it loaded; `verify` checks the row as it is
    stored now, so damage done to it afterwards is reported."""
    from alpstore.maintenance import verify

    store, messages = _filled(backend)
    assert [e.value for e in store.get_session("d").history()] == messages  # loaded now
    assert verify(store).ok
    [(dict_id, _codec, _size, _digest, data)] = _dict_rows(backend)
    frame = bytearray(bytes(data))
    frame[len(frame) // 2] ^= 0x40
    _set_dict(backend, dict_id, data=bytes(frame))
    report = verify(store)
    assert not report.ok
    [problem] = [p for p in report.problems if p.what.startswith(f"zstd dictionary {dict_id}:")]
    assert "blob(s) are compressed with it" in problem.what
