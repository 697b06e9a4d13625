"""Covering digests: every checkpoint records a digest of its covering list, kept O(delta) by
every operation, checked by `archive verify`, `hydrate(verify=True)` and deep import."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import inspect

from alembic import command
from alpstore.db.migrate import SCHEMA_HEAD, alembic_config, current_revision, upgrade
from alpstore.errors import IntegrityError, SessionStateError
from alpstore.maintenance import gc, verify
from alpstore.portable.deep import export_snapshot, snapshot_of_checkpoint
from alpstore.portable.importing import import_document
from alpstore.sessions import Retention, Session
from alpstore.store import Store
from alpstore.views import cover_of
from tests.conftest import Backend, run_cli
from tests.entries import set_entry


def turn(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]


def recomputed(store: Store, ck: Any) -> bytes:
    return cover_of([e.digest for e in store.hydrate(ck)])


def swap_entry(store: Store, segment: int, position: int, other_digest: bytes) -> None:
    """Point one stored entry at another valid blob (what no per-blob check can see)."""
    with store.db.atomic() as conn:
        other = store.archive.ids_for(conn, [other_digest])[other_digest]
        set_entry(conn, segment, position, other)


def test_verify_and_hydrate_name_a_checkpoint_whose_entry_was_swapped(backend: Backend) -> None:
    store = backend.open_store()
    s = store.create_session(session_id="victim")
    cks = [s.commit_turn(turn(i)) for i in range(3)]
    other = store.create_session(session_id="other")
    other.commit_turn([{"role": "user", "content": "someone else's"}])
    assert verify(store).ok
    for ck in cks:
        assert ck.covering_digest == recomputed(store, ck)
    stranger = other.history()[0].digest
    assert cks[-1].view.segment_id is not None
    swap_entry(store, cks[-1].view.segment_id, 3, stranger)  # inside the 2nd and 3rd turn
    report = verify(store)
    lines = "\n".join(p.line() for p in report.problems)
    assert f"checkpoint {cks[1].id}: covering list" in lines
    assert f"checkpoint {cks[2].id}: covering list" in lines
    assert f"checkpoint {cks[0].id}:" not in lines
    assert "head of session victim" in lines
    with pytest.raises(IntegrityError, match=f"checkpoint {cks[2].id}: its covering list"):
        store.hydrate(cks[2], verify=True)
    assert len(store.hydrate(cks[0], verify=True)) == 2  # the untouched prefix still reads
    res = backend.cli("archive", "verify")
    assert res.code != 0
    assert f"checkpoint {cks[2].id}: covering list" in res.out + res.err
    assert "Traceback" not in res.err


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3)),
        st.tuples(st.just("truncate"), st.integers(0, 12), st.integers(0, 2)),
        st.tuples(st.just("fold"), st.integers(0, 12), st.integers(1, 4)),
        st.tuples(st.just("summary"), st.just(0)),
        st.tuples(st.just("checkpoint"), st.just(0)),
        st.tuples(st.just("backtrack"), st.integers(1, 2)),
        st.tuples(st.just("resume"), st.integers(0, 5)),
        st.tuples(st.just("fork"), st.just(0)),
        st.tuples(st.just("gc"), st.just(0)),
    ),
    min_size=1,
    max_size=14,
)


@settings(max_examples=15)
@given(ops=OPS)
def test_every_operation_keeps_the_recorded_digests_true(tmp_path_factory: Any, ops: Any) -> None:
    """Whatever moves a head (append, cut, fold, summary, backtrack, resume, fork, gc), every
    checkpoint's recorded digest equals the one re-derived from its hydrated list."""
    root = tmp_path_factory.mktemp("ops")
    with Store.open(root) as store:
        sessions: list[Session] = [store.create_session(retention=Retention("last_n", 4))]
        for n, op in enumerate(ops, 1):
            s = sessions[-1]
            length = s.info().head_length
            if op[0] == "append":
                s.append([m for i in range(op[1]) for m in turn(n * 10 + i)])
            elif op[0] == "truncate":
                s.truncate_and_append(min(op[1], length), turn(n)[: op[2]])
            elif op[0] == "fold" and length >= 2:
                start = min(op[1], length - 1)
                s.fold(start, min(length, start + op[2]), f"fold {n}")
            elif op[0] == "summary" and length:
                s.append_summary(f"summary {n}", [s.history()[0].digest])
            elif op[0] == "checkpoint":
                s.commit_turn(turn(n))
            elif op[0] == "backtrack":
                with contextlib.suppress(SessionStateError):  # too few checkpoints
                    s.backtrack(op[1], steering=f"steer {n}")
            elif op[0] == "resume" and s.checkpoints():
                s.resume(s.checkpoints()[op[1] % len(s.checkpoints())])
            elif op[0] == "fork" and s.checkpoints():
                sessions.append(s.fork())
            elif op[0] == "gc":
                gc(store)
        for s in sessions:
            s.checkpoint()
            for ck in s.checkpoints(include_abandoned=True):
                assert ck.covering_digest == recomputed(store, ck), ops
        report = verify(store)
        assert report.ok, [p.line() for p in report.problems]


def test_deep_import_refuses_a_file_whose_messages_were_reordered(tmp_path: Path) -> None:
    """Reordering committed messages keeps every message's own digest valid; only the covering
    digest sees it: `checkpoint import` refuses the file in one line and writes nothing. A file
    without the field (an export from before it existed) still imports."""
    a, b = tmp_path / "a", tmp_path / "b"
    with Store.open(a) as store:
        s = store.create_session(session_id="orig")
        for i in range(3):
            ck = s.commit_turn(turn(i))
        doc = export_snapshot(store, snapshot_of_checkpoint(store, ck))
    block = doc["working_memory"][0]["conversation_chunks"]["alpstore"]
    assert block["covering_digest"] == ck.covering_digest.hex()  # type: ignore[union-attr]
    msgs = doc["working_memory"][0]["committed_messages"]
    msgs[1], msgs[2] = msgs[2], msgs[1]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    res = run_cli("--root", str(b), "checkpoint", "import", str(bad))
    assert res.code != 0
    assert "covering_digest" in res.err and "does not match the committed messages" in res.err
    assert "Traceback" not in res.err
    with Store.open(b) as target:
        assert target.list_sessions() == []
        msgs[1], msgs[2] = msgs[2], msgs[1]
        del block["covering_digest"]  # as an export from before the field was written
        result = import_document(target, doc, source_name="older.json")
        assert result.checkpoint.covering_digest == ck.covering_digest
        assert verify(target).ok


def test_upgrade_records_the_digests_of_an_existing_archive(backend: Backend) -> None:
    """An archive from revision 0003 (no digests, ids reusable) gets every checkpoint's and
    head's digest on upgrade, and its ids are never reused from then on."""
    store = backend.open_store()
    s = store.create_session(session_id="old")
    for i in range(4):
        s.commit_turn(turn(i))
    s.fold(0, 3, "early")
    s.backtrack(1, steering="again")
    kid = s.fork()
    kid.commit_turn(turn(9))
    before = {
        ck.id: ck.covering_digest for x in (s, kid) for ck in x.checkpoints(include_abandoned=True)
    }
    store.close()
    db = backend.open_database()
    command.downgrade(alembic_config(db), "0003")
    with db.read() as conn:
        assert "covering_digest" not in {
            c["name"] for c in inspect(conn).get_columns("checkpoints")
        }
    upgrade(db)
    assert current_revision(db) == SCHEMA_HEAD
    again = backend.open_store()
    for x in ("old", kid.uuid):
        for ck in again.get_session(x).checkpoints(include_abandoned=True):
            assert ck.covering_digest == before[ck.id] == recomputed(again, ck)
    assert verify(again).ok
    if not backend.is_postgresql:
        with again.db.read() as conn:
            sql = conn.exec_driver_sql(
                "SELECT sql FROM sqlite_master WHERE name = 'blob_rows'"  # (0010: renamed)
            ).scalar()
        assert "AUTOINCREMENT" in str(sql)
