"""Issue 39: a session file from another machine cannot break this one.

Each test edits a genuine export the way a hostile file would (ids are not in the session
digest; where a change is, the file is re-sealed with a correct digest, so only the new checks
can refuse it) and asserts what the import must do instead. Both backends where it matters.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import blake3
import pytest

from alpstore.codec import canonical_json
from alpstore.errors import CheckpointFileError, SessionNameTakenError
from alpstore.portable.travel import check_session_file
from alpstore.portable.travel_export import export_session
from alpstore.portable.travel_format import Digester
from alpstore.portable.travel_import import import_session_file
from alpstore.store import Store
from tests.conftest import Backend


# ---------------------------------------------------------------- files
def source_file(tmp_path: Path, *, turns: int = 5) -> Path:
    """An export of session `src` (its own archive): turns, a backtrack with steering, events."""
    with Store.open(tmp_path / "source") as store:
        s = store.create_session(name="src")
        for i in range(turns):
            s.commit_turn([{"role": "user", "content": f"turn {i}"}])
        s.backtrack(2, "try again")
        s.commit_turn([{"role": "user", "content": "after"}])
        s.record_decision("recovery", {"choice": "retry"})
        path = tmp_path / "src.session.jsonl"
        export_session(store, s.id, path)
    return path


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def blob_line(value: Any, kind: str = "message") -> dict[str, Any]:
    digest = blake3.blake3(canonical_json(value)).hexdigest()
    return {"type": "blob", "digest": digest, "kind": kind, "value": value}


def seal(recs: list[dict[str, Any]], path: Path) -> Path:
    """Write ``recs`` with the end line's count and digest recomputed (a genuine file)."""
    body = [r for r in recs if r.get("type") != "end"]
    digester = Digester()
    for r in body[1:]:
        if r.get("type") in ("checkpoint", "head"):  # the covering digests, recomputed
            keep = r["keep"] if isinstance(r.get("keep"), int) else 0
            try:
                state = digester.apply(keep, r["add"], commit=r["type"] == "checkpoint")
            except (ValueError, TypeError, IndexError):
                continue  # a broken delta: left as it is (the reader refuses it)
            r["covering"] = state.covering
            digester.feed(r, state)
        elif r.get("type") in ("session", "backtrack", "event"):
            try:
                digester.feed(r)
            except (ValueError, TypeError, KeyError, AttributeError):
                continue
    body.append({"type": "end", "lines": len(body) + 1, "digest": digester.hexdigest()})
    path.write_bytes(b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in body))
    return path


def other_session(store: Store, name: str = "mine", turns: int = 3) -> Any:
    s = store.create_session(name=name)
    for i in range(turns):
        s.commit_turn([{"role": "user", "content": f"{name} {i}"}])
    return s


def checkpoint_ids(session: Any) -> set[int]:
    return {c.id for c in session.checkpoints(include_abandoned=True)}


# ---------------------------------------------------------------- case 1: ids vs sequences
def test_ids_near_the_end_of_the_range_do_not_move_the_sequences(
    backend: Backend, tmp_path: Path
) -> None:
    recs = read(source_file(tmp_path))
    top = 2**31 - 1
    cks = [r for r in recs if r.get("type") == "checkpoint"]
    for k, r in enumerate(cks):
        r["id"] = top - len(cks) + k
    for r in recs:
        if r.get("type") == "backtrack":
            r["id"] = top - 1
    bad = seal(recs, tmp_path / "far.jsonl")
    store = backend.open_store()
    mine = other_session(store)
    done = import_session_file(store, bad)
    assert not done.ids_kept
    # this archive goes on numbering as before: a checkpoint, a backtrack, an export that
    # imports elsewhere (before: PostgreSQL "nextval: reached maximum value"; SQLite ids
    # above 2**31 - 1 that every later export carried and every import refused)
    mine.commit_turn([{"role": "user", "content": "more"}])
    mine.backtrack(1, "again")
    assert max(checkpoint_ids(mine)) < 1000
    out = tmp_path / "mine.jsonl"
    export_session(store, mine.id, out)
    check_session_file(out)
    with Store.open(tmp_path / "elsewhere") as other:
        import_session_file(other, out)


@pytest.mark.postgres
def test_postgresql_reserves_kept_ids_before_the_first_row(tmp_path: Path) -> None:
    """Case 2: a live writer checkpointing while an import that keeps the file's ids runs gets
    an id above them (before: the sequence moved only at the import's commit; the writer hit
    `duplicate key … pk_checkpoints` and lost its turn)."""
    import alpstore.portable.travel_import as ti
    from tests.conftest import postgres_backend

    path = source_file(tmp_path)
    root = tmp_path / "pg"
    root.mkdir()
    with postgres_backend(root) as backend:
        store = backend.open_store()
        live = other_session(store, "live", turns=1)
        (hw,) = checkpoint_ids(live)
        recs = read(path)
        for k, r in enumerate(r for r in recs if r.get("type") == "checkpoint"):
            r["id"] = hw + 1 + k  # the very ids the live writer would be handed next
        path = seal(recs, tmp_path / "next.jsonl")
        writer_store = backend.open_store()
        errors: list[BaseException] = []
        done_write = threading.Event()

        def write() -> None:
            try:
                writer_store.get_session("live").commit_turn([{"role": "user", "content": "w"}])
            except BaseException as exc:
                errors.append(exc)
            finally:
                done_write.set()

        real = ti._Writer.checkpoint
        started: list[threading.Thread] = []

        def checkpoint(self: Any, rec: dict[str, Any]) -> None:
            real(self, rec)
            if not started:  # a live writer checkpoints while the import is under way
                t = threading.Thread(target=write)
                started.append(t)
                t.start()
                done_write.wait(2)

        ti._Writer.checkpoint = checkpoint  # type: ignore[method-assign]
        try:
            done = import_session_file(store, path)
        finally:
            ti._Writer.checkpoint = real  # type: ignore[method-assign]
        started[0].join(30)
        assert not errors, errors
        assert done.ids_kept
        assert len(store.get_session("live").checkpoints()) == 2  # the writer's turn is there


# ---------------------------------------------------------------- case 5: steering values
@pytest.mark.parametrize(
    "steering", [42, [1, 2], {"role": "user", "content": 42}, {"role": "tool", "content": "x"}]
)
def test_a_steering_message_that_is_not_a_user_text_turn_is_refused(
    tmp_path: Path, steering: Any
) -> None:
    recs = read(source_file(tmp_path))
    blob = blob_line(steering)
    recs.insert(1, blob)
    for r in recs:
        if r.get("type") == "backtrack":
            r["steering"] = blob["digest"]
    bad = seal(recs, tmp_path / "steer.jsonl")
    with pytest.raises(CheckpointFileError, match="steering message"):
        check_session_file(bad)
    with Store.open(tmp_path / "t") as store:
        with pytest.raises(CheckpointFileError, match="steering message"):
            import_session_file(store, bad)
        assert store.list_sessions() == []


# ---------------------------------------------------------------- case 6: claims
def test_a_parent_claim_without_its_covering_digest_imports_as_a_root(
    backend: Backend, tmp_path: Path
) -> None:
    store = backend.open_store()
    victim = other_session(store, "victim")
    victim_cks = checkpoint_ids(victim)
    recs = read(source_file(tmp_path))
    recs[next(i for i, r in enumerate(recs) if r.get("type") == "session")]["parent"] = {
        "session": victim.uuid,
        "seq": 1,
        "covering": None,
    }
    done = import_session_file(store, seal(recs, tmp_path / "parent.jsonl"))
    assert done.orphaned and done.parent is None
    child = store.get_session(done.session).info()
    assert child.parent is None and child.source_checkpoint is None
    assert checkpoint_ids(victim) == victim_cks


def test_a_parent_claim_with_a_wrong_covering_digest_imports_as_a_root(
    backend: Backend, tmp_path: Path
) -> None:
    store = backend.open_store()
    victim = other_session(store, "victim")
    recs = read(source_file(tmp_path))
    recs[next(i for i, r in enumerate(recs) if r.get("type") == "session")]["parent"] = {
        "session": victim.uuid,
        "seq": 1,
        "covering": "ab" * 32,
    }
    done = import_session_file(store, seal(recs, tmp_path / "parent.jsonl"))
    assert done.orphaned and done.parent is None


@pytest.mark.parametrize("kept", [True, False])
def test_a_reference_by_id_stays_inside_the_imported_session(
    backend: Backend, tmp_path: Path, kept: bool
) -> None:
    """Backtrack and event references given by id only (a checkpoint the session no longer
    holds) never name another session's checkpoint after the import."""
    store = backend.open_store()
    victim = other_session(store, "victim")
    theirs = sorted(checkpoint_ids(victim))
    recs = read(source_file(tmp_path))
    cks = [r for r in recs if r.get("type") == "checkpoint"]
    if kept:  # the file's own ids above this archive's: kept; the reference below them
        for k, r in enumerate(cks):
            r["id"] = 100 + k
    for r in recs:
        if r.get("type") == "backtrack":
            r["to"] = {"id": theirs[0]}
        if r.get("type") == "event":
            r["checkpoint"] = {"id": theirs[1]}
    done = import_session_file(store, seal(recs, tmp_path / "byid.jsonl"))
    sid = store.get_session(done.session).id
    (bt,) = store.session_backtracks(sid)
    assert bt["to_checkpoint"] not in theirs
    events = store.session_events(sid)
    assert all(e.get("checkpoint_id") not in theirs for e in events)
    # and the session exports and imports again
    out = tmp_path / "again.jsonl"
    export_session(store, sid, out)
    check_session_file(out)


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("a\x1bb", "control"),
        ("bell\x07", "control"),
        ("two\nlines", "control"),
        ("x" * 500, "500 characters"),
        (" padded", "whitespace"),
    ],
)
def test_import_name_follows_the_rules_of_session_new(
    backend: Backend, tmp_path: Path, name: str, needle: str
) -> None:
    path = source_file(tmp_path)
    store = backend.open_store()
    with pytest.raises(CheckpointFileError, match=needle):
        import_session_file(store, path, name=name)
    assert store.list_sessions() == []
    r = backend.cli("session", "import", str(path), "--name", name)
    assert r.code not in (0, 70) and "Traceback" not in r.err and needle in r.err, r.err


def test_import_name_has_one_spelling(backend: Backend, tmp_path: Path) -> None:
    path = source_file(tmp_path)
    store = backend.open_store()
    store.create_session(name="caf\u00e9")
    with pytest.raises(SessionNameTakenError):
        import_session_file(store, path, name="cafe\u0301")
    done = import_session_file(store, path, name="ole\u0301")
    assert done.name == "ol\u00e9" == store.get_session(done.session).info().name


def test_an_event_flood_is_refused_quickly(tmp_path: Path) -> None:
    recs = read(source_file(tmp_path))
    event = next(r for r in recs if r.get("type") == "event")
    at = recs.index(event)
    recs[at:at] = [dict(event) for _ in range(100_000)]
    bad = seal(recs, tmp_path / "flood.jsonl")
    start = time.perf_counter()
    with pytest.raises(CheckpointFileError, match="events"):
        check_session_file(bad)
    assert time.perf_counter() - start < 5


# ---------------------------------------------------------------- case 8: export over archive
def test_an_export_never_writes_over_the_archive_it_reads(backend: Backend) -> None:
    store = backend.open_store()
    other_session(store, "s")
    store.close()
    victims = [Path("traces/archive/archive.db"), Path("traces/archive/archive.db-wal")]
    sqlite_file = backend.root / "another.db"
    if not backend.is_postgresql:
        import shutil

        shutil.copy(backend.root / victims[0], sqlite_file)
    else:
        import sqlite3

        sqlite3.connect(sqlite_file).execute("CREATE TABLE t (x)").connection.commit()
    targets = [sqlite_file] + ([] if backend.is_postgresql else [backend.root / v for v in victims])
    for target in targets:
        if not target.exists():
            continue
        before = target.read_bytes() if target.exists() else None
        for command in (("session", "export", "s"), ("checkpoint", "export", "s")):
            r = backend.cli(*command, "-o", str(target), "--force")
            assert r.code not in (0, 70) and "refusing to write" in r.err, (command, r.err)
            assert (target.read_bytes() if target.exists() else None) == before
    r = backend.cli("session", "list")
    assert r.code == 0 and "s" in r.out


@pytest.mark.parametrize("steering", [42, [1, 2], {"role": "user", "content": 42}])
def test_a_stored_steering_message_of_any_shape_reads(
    backend: Backend, tmp_path: Path, steering: Any
) -> None:
    """An archive that took such a file before this fix: `session log`, `debug log` and `debug
    replay` of that session exited 70."""
    from alpstore.archive.reading import encode
    from alpstore.db import raw as rsql
    from alpstore.db.names import BLOB_MESSAGE

    store = backend.open_store()
    s = other_session(store, "steered")
    s.backtrack(1, "go")
    with store.db.atomic() as conn:
        (blob_id,) = store.archive.store_encoded(conn, [encode(steering, BLOB_MESSAGE)])
        rsql.execute(conn, "UPDATE backtracks SET steering_blob_id = ?", (blob_id,))
    for args in (("session", "log", "steered"), ("debug", "log", "steered")):
        r = backend.cli(*args)
        assert r.code == 0, (args, r.err)
    r = backend.cli("debug", "replay", "steered")
    assert r.code == 0, r.err
    assert store.session_backtracks(s.id)[0]["steering"] is None


def test_the_timeline_pages_event_markers(tmp_path: Path) -> None:
    """Events within one page's span (a flood recorded locally, or accepted before the bound):
    the page shows at most EVENTS_PER_PAGE and counts the rest (a 14 MB page before)."""
    from starlette.testclient import TestClient

    from alpstore.db import opening
    from alpstore.ui.app import create_app
    from alpstore.ui.queries import EVENTS_PER_PAGE
    from alpstore.ui.readonly import open_read_only
    from alpstore.ui.settings import Settings

    root = tmp_path / "ui"
    with Store.open(root) as store:
        s = other_session(store, "flood", turns=2)
        with store.db.atomic() as conn:
            for i in range(5_000):
                store.record_event(conn, s.id, "note", None, {"i": i})
    ro = open_read_only(root, opening.default_database_url(root))
    try:
        client = TestClient(create_app(Settings(ro, "t0ken", 8765, ["testserver"], label="f")))
        assert client.get("/?token=t0ken").status_code == 200
        r = client.get(f"/s/{s.uuid}")
        assert r.status_code == 200
        assert r.text.count("• note") == EVENTS_PER_PAGE
        assert f"{5_000 - EVENTS_PER_PAGE} more event(s)" in r.text
    finally:
        ro.db.close()
