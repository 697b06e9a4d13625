"""Unique session names (migration 0005) and the atomic get-or-create the adapters use."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest
from sqlalchemy import text

from alpstore.db.migrate import SCHEMA_HEAD, current_revision, upgrade
from alpstore.errors import SessionNameTakenError
from alpstore.store import Store
from tests.conftest import Backend


def test_a_taken_name_is_refused_on_create_and_fork(backend: Backend) -> None:
    store = backend.open_store()
    first = store.create_session(name="review")
    with pytest.raises(SessionNameTakenError, match="'review' is already taken"):
        store.create_session(name="review")
    first.append([{"role": "user", "content": "hi"}])
    ck = first.checkpoint()
    with pytest.raises(SessionNameTakenError):
        first.fork(ck, name="review")
    assert [s.name for s in store.list_sessions()] == ["review"]
    store.create_session()  # unnamed sessions may be many
    store.create_session()
    assert len(store.list_sessions()) == 3


def test_the_cli_says_a_name_is_taken_in_one_line(backend: Backend) -> None:
    assert backend.cli("session", "new", "--name", "twice").code == 0
    result = backend.cli("session", "new", "--name", "twice")
    assert result.code == SessionNameTakenError.exit_code
    assert "already taken" in result.err and "Traceback" not in result.err


def test_session_named_returns_the_existing_session_or_creates_it(backend: Backend) -> None:
    store = backend.open_store()
    made = store.session_named("x", origin={"by": "test"})
    again = store.session_named("x")
    assert made.uuid == again.uuid
    assert store.find_session_named("x") is not None and store.find_session_named("y") is None


def _race(args: tuple[str, str | None]) -> str:
    root, url = args
    with Store.open(root, url=url) as store:
        return store.session_named("raced").uuid


def test_session_named_is_atomic_across_processes(backend: Backend) -> None:
    backend.open_store().close()  # migrate once, before the race
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(4) as pool:
        uuids = pool.map(_race, [(str(backend.root), backend.url)] * 8)
    assert len(set(uuids)) == 1
    names = [s.name for s in backend.open_store().list_sessions()]
    assert names == ["raced"]


def test_migration_0005_renames_old_duplicates_and_records_it(backend: Backend) -> None:
    """An archive from before 0005 with three sessions named alike upgrades without failing."""
    from alpstore.db.opening import open_database

    db = open_database(root=backend.root, url=backend.url, migrate=False)
    upgrade(db, "0003")
    long = "n" * 200
    with db.atomic() as conn:
        for i, name in enumerate(["dup", "dup", "other", "dup", long, long]):
            conn.execute(
                text(
                    "INSERT INTO sessions (uuid, name, status, head_length, turn, "
                    "backtrack_count, retention_mode, retention_n, created_at, updated_at) "
                    "VALUES (:u, :n, 'created', 0, 0, 0, 'all', 0, 0, 0)"
                ),
                {"u": f"s{i}", "n": name},
            )
    upgrade(db)
    assert current_revision(db) == SCHEMA_HEAD
    with db.read() as conn:
        names = dict(conn.execute(text("SELECT uuid, name FROM sessions")).all())
        events = conn.execute(
            text(
                "SELECT s.uuid, e.detail FROM session_events e JOIN sessions s "
                "ON s.id = e.session_id WHERE e.kind = 'renamed' ORDER BY s.uuid"
            )
        ).all()
    db.close()
    assert names["s0"] == "dup" and names["s2"] == "other" and names["s4"] == long
    assert names["s1"].startswith("dup [dup ") and names["s3"].startswith("dup [dup ")
    assert len(set(names.values())) == 6 and len(names["s5"]) == 200
    assert [u for u, _ in events] == ["s1", "s3", "s5"]
    detail = json.loads(events[0][1])
    assert detail["from"] == "dup" and detail["to"] == names["s1"] and detail["by"] == "0005"
    # and the index holds from now on
    store = backend.open_store()
    with pytest.raises(SessionNameTakenError):
        store.create_session(name="dup")


def test_migration_0005_downgrades(tmp_path: Path) -> None:
    from alembic import command
    from alpstore.db.migrate import alembic_config
    from alpstore.db.opening import open_database

    db = open_database(root=tmp_path)
    command.downgrade(alembic_config(db), "0003")
    assert current_revision(db) == "0003"
    with db.atomic() as conn:  # duplicates are allowed again
        for u in ("a", "b"):
            conn.execute(
                text(
                    "INSERT INTO sessions (uuid, name, status, head_length, turn, "
                    "backtrack_count, retention_mode, retention_n, created_at, updated_at) "
                    "VALUES (:u, 'same', 'created', 0, 0, 0, 'all', 0, 0, 0)"
                ),
                {"u": u},
            )
    upgrade(db)
    assert current_revision(db) == SCHEMA_HEAD
    db.close()


def test_a_deleted_langgraph_thread_frees_its_name(run_root: Path) -> None:
    pytest.importorskip("langgraph.graph")
    from langgraph.checkpoint.base import empty_checkpoint

    from alpstore.integrations.langgraph import AlpstoreSaver

    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    with AlpstoreSaver.open(run_root) as saver:
        saver.put(config, empty_checkpoint(), {}, {})
        saver.delete_thread("t")
        saver.put(config, empty_checkpoint(), {}, {})  # the same thread id, again
        assert saver.get_tuple(config) is not None
        names = sorted(s.name or "" for s in saver.store.list_sessions())
    assert names == ["langgraph:t", "langgraph:t (deleted)"]


def test_a_patched_uuid4_is_not_drawn_by_alpstore(tmp_path: Path) -> None:
    """LangGraph's own suite patches ``uuid.uuid4`` with a fixed sequence for its message ids
    (``deterministic_uuids``): a session alpstore creates must not take one of them."""
    import uuid
    from unittest import mock

    drawn = mock.Mock(side_effect=AssertionError("alpstore called uuid.uuid4"))
    with Store.open(tmp_path) as store, mock.patch("uuid.uuid4", drawn):
        info = store.create_session(name="patched").info()
    assert drawn.call_count == 0
    assert uuid.UUID(info.uuid).version == 4
