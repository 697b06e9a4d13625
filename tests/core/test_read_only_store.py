"""``Store.open(..., read_only=True)``: the reading commands' store answers every read exactly as
a store opened for writing does (plain SQL on both backends), and never creates an archive.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from alpstore.errors import NotFoundError
from alpstore.store import Store, checkpoint_deltas
from tests.conftest import Backend


def _reads(store: Store, uuid: str) -> dict[str, object]:
    session = store.get_session(uuid[:8])
    cks = store.list_checkpoints(session.id, include_abandoned=True)
    latest = store.resolve_checkpoint(f"{uuid}@latest")
    with store.db.read() as conn:
        retained = store.count_retained(conn, session.id)
        recent = store.recent_checkpoints(conn, session.info(), 2)
        again = store.checkpoint_in(conn, latest.id, session.info())
    return {
        "sessions": store.list_sessions(),
        "count": store.count_sessions(),
        "named": store.get_session("a_b%c").uuid,
        "found": store.find_session_named("a_b%c") is not None,
        "info": store.session_info(session.id),
        "manifest": store.session_manifest(session.id),
        "checkpoints": cks,
        "latest": latest,
        "at_turn": store.resolve_checkpoint(f"{uuid}@1"),
        "by_id": store.get_checkpoint(cks[0].id),
        "hydrated": store.hydrate(latest, verify=True),
        "history": session.history(),
        "state": store.checkpoint_state(cks[0]),
        "deltas": checkpoint_deltas(store, cks),
        "backtracks": store.session_backtracks(session.id),
        "events": store.session_events(session.id),
        "retained": retained,
        "recent": recent,
        "again": again,
    }


def test_read_only_reads_match(backend: Backend) -> None:
    with backend.open_store() as store:
        s = store.create_session(name="a_b%c", manifest={"kind": "Agent"})
        s.commit_turn([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"}])
        s.checkpoint(kernel={"k": 1}, working_memory={"w": 2}, label="mine")
        s.commit_turn([{"role": "user", "content": "more"}])
        s.backtrack(1, steering="again")
        s.record_decision("recovery", {"why": "test"})
        uuid = s.uuid
        expected = _reads(store, uuid)
    with Store.open(backend.root, url=backend.url, read_only=True) as store:
        assert _reads(store, uuid) == expected
        with pytest.raises(NotFoundError):
            store.get_session("a_b%")  # LIKE wildcards in a prefix match themselves only


def test_read_only_never_creates(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError):
        Store.open(tmp_path / "none", read_only=True)
    assert not (tmp_path / "none").exists() or not any((tmp_path / "none").iterdir())
