"""One limit on both backends, one spelling of each name (issue 30, item 10 c, d).

An event kind of 40 characters or an error signature of 300 was stored on SQLite and a
``DatabaseError`` on PostgreSQL (``VARCHAR(32)`` / ``VARCHAR(200)``): now both refuse it first,
in one line, and nothing is written. "café" with a precomposed é (NFC) and with e + a combining
accent (NFD) were two sessions that `session list` showed alike: now names are NFC wherever
they are taken in, and a lookup by either spelling finds the one session.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest

from alpstore.errors import SessionNameTakenError, UsageError
from tests.conftest import Backend

NFC = unicodedata.normalize("NFC", "café")
NFD = unicodedata.normalize("NFD", "café")


def test_the_two_spellings_differ() -> None:
    assert NFC != NFD and len(NFD) == len(NFC) + 1


def _counts(backend: Backend) -> tuple[int, int, int]:
    with backend.open_store() as store:
        s = store.get_session("demo")
        events = len(store.session_events(s.id))
        backtracks = len(store.session_backtracks(s.id))
        return events, backtracks, len(s.checkpoints())


def test_an_event_kind_over_32_characters_is_refused_on_every_backend(backend: Backend) -> None:
    with backend.open_store() as store:
        s = store.create_session(session_id="demo")
        s.commit_turn([{"role": "user", "content": "hi"}])
        s.record_decision("k" * 32, {"ok": True})  # the limit itself is stored
        before = _counts(backend)
        with pytest.raises(UsageError, match="at most 32") as err:
            s.record_decision("k" * 40, {"why": "too long"})
        assert "\n" not in err.value.message
    assert _counts(backend) == before


def test_an_error_signature_over_200_characters_is_refused_on_every_backend(
    backend: Backend,
) -> None:
    with backend.open_store() as store:
        s = store.create_session(session_id="demo")
        for t in range(3):
            s.commit_turn([{"role": "user", "content": f"turn {t}"}])
        s.backtrack(1, automatic=True, error_signature="E" * 200)
        s.commit_turn([{"role": "user", "content": "again"}])
        before = _counts(backend)
        head = s.info().head
        with pytest.raises(UsageError, match="at most 200") as err:
            s.backtrack(1, automatic=True, error_signature="E" * 300)
        assert "\n" not in err.value.message
        assert s.info().head == head  # nothing moved
    assert _counts(backend) == before


def test_nfc_and_nfd_spellings_of_a_name_are_one_session(backend: Backend) -> None:
    with backend.open_store() as store:
        made = store.create_session(name=NFD)
        assert made.info().name == NFC  # stored in its one spelling
        for spelling in (NFC, NFD):
            assert store.get_session(spelling).uuid == made.uuid
            found = store.find_session_named(spelling)
            assert found is not None and found.uuid == made.uuid
            assert store.session_named(spelling).uuid == made.uuid
            with pytest.raises(SessionNameTakenError):
                store.create_session(name=spelling)
        assert len(store.list_sessions()) == 1
        fork = store.fork_checkpoint(made.checkpoint(), name=unicodedata.normalize("NFD", "naïve"))
        assert fork.info().name == "naïve"
        assert store.get_session(unicodedata.normalize("NFD", "naïve")).uuid == fork.uuid


def test_imports_claim_one_spelling_of_a_name(backend: Backend, tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(json.dumps({"role": "user", "content": "hello"}) + "\n")
    first = backend.cli("session", "import", str(transcript), "--name", NFD)
    assert first.code == 0, first.err
    again = backend.cli("session", "import", str(transcript), "--name", NFC)
    assert again.code != 0 and "already exists" in again.err  # the same name, refused
    listed = backend.cli("session", "list", "--json")
    assert [s["name"] for s in json.loads(listed.out)] == [NFC]
    for spelling in (NFC, NFD):
        shown = backend.cli("session", "log", spelling)
        assert shown.code == 0, shown.err
    exported = tmp_path / "x.json"
    out = backend.cli("checkpoint", "export", f"{NFD}@latest", "-o", str(exported))
    assert out.code == 0, out.err
    doc = json.loads(exported.read_text())
    doc["working_memory"][0]["conversation_chunks"]["alpstore"]["name"] = NFD
    doc["lineage"]["session_id"] = "other-id"
    renamed = tmp_path / "renamed.json"
    renamed.write_text(json.dumps(doc))
    imported = backend.cli("checkpoint", "import", str(renamed), "--fork")
    # the carried name, spelt NFD, is the local NFC name: suffixed, not a second "café"
    assert imported.code == 0, imported.err
    names = sorted(s["name"] for s in json.loads(backend.cli("session", "list", "--json").out))
    assert names == sorted([NFC, f"{NFC}-2"])
