"""A closed LangGraph turn's document compressed against a dictionary trained on the archive's
own closed turns (0013, codec 11, issue 42): what the saver reads back is what it wrote; the
blob store never takes that dictionary for its own; a downgrade re-packs the turns against the
fixed dictionary; a damaged dictionary is named where a read needs it.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from alpstore.archive import lgstate
from alpstore.db.database import Database
from alpstore.errors import IntegrityError
from alpstore.integrations import _lgfold as lgfold
from alpstore.integrations.langgraph import AlpstoreSaver
from alpstore.maintenance import verify
from tests.conftest import Backend
from tests.core.test_lg_turns import _count, _to
from tests.integrations.test_langgraph_saver import build_graph, user

THREADS = {"a": 12, "b": 3}


def _history(saver: AlpstoreSaver) -> list[Any]:
    out = []
    for thread in THREADS:
        config: Any = {"configurable": {"thread_id": thread}}
        out += [
            (t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes)
            for t in saver.list(config)
        ]
    return out


def _write(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The threads written with folding on and a dictionary trained after 8 closed turns;
    their history as the saver reads it while open."""
    monkeypatch.setattr(lgstate, "TURN_DICT_AFTER", 8)  # zstd learns from 8 samples at least
    monkeypatch.setattr(lgfold, "TRAIN_CHECK_EVERY", 1)
    monkeypatch.setattr(lgfold, "EVERY_ON_POSTGRESQL", 1)
    with AlpstoreSaver.open(backend.root, url=backend.url) as saver:
        saver.store.archive.auto_pack = False
        graph = build_graph(saver)
        for thread, turns in THREADS.items():
            config: Any = {"configurable": {"thread_id": thread}}
            for n in range(turns):
                graph.invoke({"messages": [user(n)]}, config)
    with AlpstoreSaver.open(backend.root, url=backend.url) as saver:
        return _history(saver)


def _codecs(db: Database) -> dict[int, int]:
    with db.read() as conn:
        rows = conn.execute(text("SELECT codec, count(*) FROM lg_turns GROUP BY codec")).all()
    return {int(codec): int(n) for codec, n in rows}


def test_closed_turns_compress_against_their_own_dictionary(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = _write(backend, monkeypatch)
    backend.close_all()
    db = backend.open_database()
    codecs = _codecs(db)
    # the first turns went with the fixed dictionary, every one after training with the new
    assert codecs.get(lgstate.CODEC_LG_TRAINED, 0) >= 3, codecs
    assert sum(codecs.values()) == sum(THREADS.values()) - len(THREADS)
    lg_dicts = _count(db, "SELECT count(*) FROM zstd_dicts WHERE purpose = 1")
    assert lg_dicts == 1
    with db.read() as conn:  # every trained turn names that row
        named = conn.execute(
            text(
                "SELECT count(*) FROM lg_turns u JOIN zstd_dicts d ON d.id = u.dict_id "
                "WHERE u.codec = 11 AND d.purpose = 1"
            )
        ).scalar_one()
    assert int(named) == codecs[lgstate.CODEC_LG_TRAINED]
    backend.close_all()

    store = backend.open_store()  # the blob store never takes the turns' dictionary as its own
    assert store.archive.dictionary_id is None
    assert verify(store).ok
    backend.close_all()

    with AlpstoreSaver.open(backend.root, url=backend.url) as saver:  # a new process's reads
        assert _history(saver) == written
    backend.close_all()

    db = backend.open_database()
    _to(db, "0012")  # the turns re-packed against the fixed dictionary, the dictionary gone
    assert lgstate.CODEC_LG_TRAINED not in _codecs(db)
    assert _count(db, "SELECT count(*) FROM zstd_dicts") == 0
    _to(db, "0010")  # and every turn back as loose rows
    _to(db, "0013")
    backend.close_all()
    with AlpstoreSaver.open(backend.root, url=backend.url) as saver:
        assert _history(saver) == written


def test_a_damaged_turn_dictionary_is_named(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(backend, monkeypatch)
    backend.close_all()
    db = backend.open_database()
    with db.atomic() as conn:
        dict_id = conn.execute(text("SELECT id FROM zstd_dicts WHERE purpose = 1")).scalar_one()
        conn.execute(
            text("UPDATE zstd_dicts SET data = :data WHERE id = :id"),
            {"data": b"\x00" * 64, "id": dict_id},
        )
    backend.close_all()
    folded = _count(backend.open_database(), "SELECT count(*) FROM lg_turns")
    backend.close_all()
    with AlpstoreSaver.open(backend.root, url=backend.url) as saver:
        config: Any = {"configurable": {"thread_id": "a"}}
        with pytest.raises(IntegrityError, match=rf"lg_turns row \d+: zstd dictionary {dict_id}"):
            list(saver.list(config))
        graph = build_graph(saver)  # folding goes on, against the fixed dictionary
        fresh: Any = {"configurable": {"thread_id": "c"}}
        for n in range(3):
            graph.invoke({"messages": [user(n)]}, fresh)
        saver._folder.wait()
        assert isinstance(saver._folder.error, IntegrityError)
        assert f"zstd dictionary {dict_id}" in str(saver._folder.error)
        assert len(list(saver.list(fresh))) > 3
    db = backend.open_database()
    assert _count(db, "SELECT count(*) FROM lg_turns") == folded + 2
    fixed = (
        "SELECT count(*) FROM lg_turns u JOIN lg_threads t ON t.id = u.thread_ref "
        f"WHERE t.thread_id = 'c' AND u.codec = {lgstate.CODEC_LG_DICT}"
    )
    assert _count(db, fixed) == 2
