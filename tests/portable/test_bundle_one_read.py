"""Issue 41: a session file imported into SQLite is read once, checked inside the import's one
transaction, and its checkpoint and backtrack ids are decided there as a reading of the whole
file first decides them (PostgreSQL still checks first and reserves the ids before).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import alpstore.portable.travel as travel
from alpstore.cli.session_travel import reads_once
from alpstore.db import sqlite_path_for_root
from alpstore.maintenance import verify
from alpstore.portable.travel import check_session_file
from alpstore.portable.travel_ids import KEEP_ID_BOUND
from alpstore.portable.travel_import import import_session_file
from alpstore.store import Store
from tests.portable.test_hostile_bundles import other_session, read, seal, source_file

pytestmark = pytest.mark.sqlite_only(
    "the one read is SQLite's (PostgreSQL checks first and reserves the ids: "
    "test_hostile_bundles, test_session_travel)"
)


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every read of a session file's lines from now on (its path, once a read)."""
    reads: list[Path] = []
    real = travel.raw_lines

    def counted(path: Path, **kw: Any) -> Iterator[tuple[int, bytes]]:
        reads.append(path)
        return real(path, **kw)

    monkeypatch.setattr(travel, "raw_lines", counted)
    return reads


def test_an_sqlite_import_reads_the_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = source_file(tmp_path)
    want = check_session_file(path)
    reads = _counting(monkeypatch)
    with Store.open(tmp_path / "target") as store:
        done = import_session_file(store, path)
    assert reads == [path]  # (before: a checking read, then the import's)
    assert done.digest == want.digest and done.ids_kept
    assert done.checkpoints == want.checkpoints and done.blobs == want.blobs


def _ids(store: Store, uuid: str) -> tuple[list[int], list[int], list[Any]]:
    """The imported session's checkpoint ids, backtrack ids and what its references name."""
    sid = store.get_session(uuid).id
    cks = sorted(c.id for c in store.get_session(uuid).checkpoints(include_abandoned=True))
    bts = store.session_backtracks(sid)
    events = store.session_events(sid)
    refs = [(b["from_checkpoint"], b["to_checkpoint"]) for b in bts]
    refs += [e["checkpoint"] for e in events]
    return cks, sorted(b["backtrack"] for b in bts), refs


def _two_archives(tmp_path: Path, taken: int) -> tuple[Store, Store]:
    """Two archives alike, each with a session of ``taken`` checkpoints."""
    a, b = Store.open(tmp_path / "one"), Store.open(tmp_path / "two")
    for store in (a, b):
        if taken:
            other_session(store, turns=taken)
    return a, b


def _edit(recs: list[dict[str, Any]], case: str) -> None:
    cks = [r for r in recs if r.get("type") == "checkpoint"]
    bts = [r for r in recs if r.get("type") == "backtrack"]
    if case in ("above", "a reference below", "a reference above", "past the bound"):
        for k, r in enumerate(cks):
            r["id"] = 100 + k
    if case == "a reference below":  # first ids above this archive's, a later one below
        bts[0]["to"] = {"id": 2}
    if case == "a reference above":  # kept: no later row of this archive may take it
        bts[0]["to"] = {"id": 5000}
    if case == "past the bound":
        cks[-1]["id"] = KEEP_ID_BOUND + 1
    if case == "a backtrack past the bound":
        bts[0]["id"] = KEEP_ID_BOUND + 7


@pytest.mark.parametrize(
    "case",
    [
        "as exported",
        "above",
        "a reference below",
        "a reference above",
        "past the bound",
        "a backtrack past the bound",
    ],
)
def test_ids_decided_in_one_read_are_those_the_whole_file_decides(
    tmp_path: Path, case: str
) -> None:
    """One read decides at the first id and starts again when a later one contradicts it: the
    same ids, kept or renumbered, as checking the whole file first and reserving them."""
    recs = read(source_file(tmp_path))
    _edit(recs, case)
    path = seal(recs, tmp_path / "edited.jsonl")
    once, first = _two_archives(tmp_path, taken=4)
    try:
        a = import_session_file(once, path)
        b = import_session_file(first, path, checked=check_session_file(path))
        assert (a.ids_kept, a.digest) == (b.ids_kept, b.digest)
        assert _ids(once, a.session) == _ids(first, b.session)
        kept = {"above": True, "a reference above": True}.get(case, False)
        assert a.ids_kept is kept
        if case == "a reference above":  # the sequence moved past the kept reference
            (ck,) = other_session(once, "later", turns=1).checkpoints()
            assert ck.id > 5000
        for store in (once, first):
            assert verify(store).ok
    finally:
        once.close()
        first.close()


def test_a_refused_file_read_once_leaves_no_sequence_moved(tmp_path: Path) -> None:
    """The ids are decided inside the import's transaction: a file refused after its
    checkpoints (a bad event line) leaves the archive's sequences where they were."""
    recs = read(source_file(tmp_path))
    for k, r in enumerate(r for r in recs if r.get("type") == "checkpoint"):
        r["id"] = 900 + k
    for r in recs:
        if r.get("type") == "event":
            r["kind"] = "bad\x1bkind"
    path = seal(recs, tmp_path / "bad.jsonl")
    root = tmp_path / "target"
    with Store.open(root) as store:
        other_session(store, turns=2)
    db = sqlite_path_for_root(root)

    def sequences() -> list[Any]:
        con = sqlite3.connect(db)
        try:
            return con.execute("SELECT name, seq FROM sqlite_sequence ORDER BY name").fetchall()
        finally:
            con.close()

    before = sequences()
    with Store.open(root) as store, pytest.raises(Exception, match="event kind"):
        import_session_file(store, path)
    assert sequences() == before


def test_the_command_reads_once_where_the_archive_is_sqlite(tmp_path: Path) -> None:
    root = tmp_path / "r"
    assert reads_once(root, None)  # a new run-root archive (removed again if refused)
    with Store.open(root):
        pass
    assert reads_once(root, None)
    db = sqlite_path_for_root(root)
    assert reads_once(tmp_path, f"sqlite:///{db}")
    assert not reads_once(tmp_path, f"sqlite:///{tmp_path / 'new.db'}")  # made by the open
    assert not reads_once(tmp_path, "postgresql+psycopg://u:p@127.0.0.1:5432/x")
