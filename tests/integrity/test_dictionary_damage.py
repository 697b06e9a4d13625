"""Issue 39 case 3: one flipped byte in the newest zstd dictionary is damage like a damaged
frame. The archive opens; sessions that never used the dictionary read; `archive verify` names
the dictionary, the blobs compressed with it and the sessions that need them; `--repair` drops
what nothing needs and keeps (and names) the rest. Before the fix every command failed at open
("zstd dictionary N: zstd frame is corrupt"), `archive verify` among them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import text

import alpstore.archive.training as archive_sql
from alpstore.samples import generate
from alpstore.store import Store
from tests.conftest import Backend


@pytest.fixture(autouse=True)
def _one_dictionary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archive_sql, "AUTO_TRAIN_SAMPLES", 10**9)


def _damage_newest_dictionary(backend: Backend) -> int:
    db = backend.open_database()
    with db.atomic() as conn:
        dict_id, data = conn.execute(
            text("SELECT id, data FROM zstd_dicts ORDER BY id DESC LIMIT 1")
        ).one()
        frame = bytearray(bytes(data))
        frame[len(frame) // 2] ^= 0x40
        conn.execute(
            text("UPDATE zstd_dicts SET data = :d WHERE id = :i"), {"d": bytes(frame), "i": dict_id}
        )
    return int(dict_id)


def _cli(backend: Backend, *args: str) -> Any:
    return backend.cli(*args)


def test_a_damaged_dictionary_is_named_and_the_rest_reads(backend: Backend) -> None:
    store = backend.open_store()
    plain = store.create_session(name="plain")
    plain.commit_turn([{"role": "user", "content": "x" * 9000}])  # large: never a dictionary
    dicted = store.create_session(name="d")
    messages = list(generate(300, seed=5))
    for start in range(0, len(messages), 3):
        dicted.commit_turn(messages[start : start + 3])
    store.archive.train_dictionary(samples=400)
    store.close()
    dict_id = _damage_newest_dictionary(backend)

    with Store.open(backend.root, url=backend.url) as fresh:  # opens (it raised here)
        assert fresh.archive.dictionary_id is None  # new blobs are not written with it
        assert [e.value for e in fresh.get_session("plain").history()] == [
            {"role": "user", "content": "x" * 9000}
        ]
        fresh.get_session("plain").commit_turn([{"role": "user", "content": "more"}])
    r = _cli(backend, "session", "list")
    assert r.code == 0 and "plain" in r.out, r.err
    r = _cli(backend, "archive", "verify", "--json")
    assert r.code != 0 and "Traceback" not in r.err
    report = json.loads(r.out)
    whats = [p["what"] for p in report["problems"]]
    assert any(w.startswith(f"zstd dictionary {dict_id}:") for w in whats), whats
    reachable = [p for p in report["problems"] if p["what"] == "damaged content is reachable"]
    assert reachable and dicted.uuid in reachable[0]["sessions"]
    assert plain.uuid not in reachable[0]["sessions"]
    r = _cli(backend, "archive", "verify", "--repair")
    assert r.code != 0 and "Traceback" not in r.err
    assert "kept damaged blob" in r.out + r.err  # still needed: named, not dropped
    # the session that needs it fails with the damage named, not a crash
    r = _cli(backend, "session", "show", "d")
    assert r.code not in (0, 70) and f"zstd dictionary {dict_id}" in r.err, r.err
    r = _cli(backend, "session", "show", "plain")
    assert r.code == 0 and "more" in r.out
