"""Corruption: damage blobs, view rows, checkpoints and the SQLite file itself; `verify` must name
the damage (blob, checkpoints, sessions) and nothing may return wrong content when asked to verify.
"""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alpstore.errors import AlpstoreError, CorruptArchiveError, IntegrityError
from alpstore.maintenance import verify
from alpstore.repairing import repair
from alpstore.store import Store
from tests.backend_pass import sqlite_only
from tests.conftest import run_cli
from tests.entries import drop_entry_sql, move_run_sql, set_entry_sql


def _build(root: Path) -> dict[str, Any]:
    """A small archive: two sessions (one a fork), a fold, state blobs, a backtrack."""
    with Store.open(root) as store:
        main = store.create_session(name="main")
        for i in range(12):
            main.commit_turn(
                [
                    {"role": "user", "content": f"question {i} " + "context " * (i * 9)},
                    {"role": "assistant", "content": f"answer {i}"},
                ],
                kernel={"q": {"turn": i}, "run": {}},
            )
        main.fold(2, 6, "the early turns, summarised")
        main.checkpoint(kernel={"q": {}, "run": {"folded": True}}, label="after-fold")
        main.backtrack(1, "try the other way")
        main.commit_turn([{"role": "assistant", "content": "taking the other way"}])
        child = main.fork(name="child")
        child.commit_turn([{"role": "user", "content": "only in the child"}])
        expected: dict[int, list[Any]] = {}
        for info in store.list_sessions():
            for ck in store.list_checkpoints(info.id, include_abandoned=True):
                expected[ck.id] = [e.value for e in store.hydrate(ck, verify=True)]
        sessions = {info.uuid: info.name for info in store.list_sessions()}
    return {"expected": expected, "sessions": sessions}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("pristine")
    return root, _build(root)


@pytest.fixture
def damaged(tmp_path: Path, pristine: tuple[Path, dict[str, Any]]) -> Iterator[Path]:
    """A copy of the pristine run root to damage."""
    sqlite_only("damages a copy of the run root's SQLite file with sqlite3")
    root = tmp_path / "copy"
    shutil.copytree(pristine[0], root)
    yield root


def _db(root: Path) -> sqlite3.Connection:
    return sqlite3.connect(root / "traces" / "archive" / "archive.db")


def _flip(data: bytes, index: int, bit: int = 1) -> bytes:
    out = bytearray(data)
    out[index % len(out)] ^= bit
    return bytes(out)


def _checkpoints_using(conn: sqlite3.Connection, blob_id: int) -> set[int]:
    """Checkpoint ids whose view includes ``blob_id`` (computed independently, in SQL)."""
    found = set()
    shapes = {
        s: (p, b) for s, p, b in conn.execute("SELECT id, parent_id, base_length FROM segments")
    }
    entries = {
        (s, pos)
        for s, pos in conn.execute(
            "SELECT segment_id, position FROM segment_entries WHERE blob_id = ?", (blob_id,)
        )
    }
    for ck, seg, length in conn.execute("SELECT id, segment_id, length FROM checkpoints"):
        hi = length
        while seg is not None and hi > 0:
            parent, base = shapes[seg]
            if any(s == seg and min(base, hi) <= p < hi for s, p in entries):
                found.add(ck)
                break
            seg, hi = parent, min(base, hi)
    return found


# ------------------------------------------------------------------ blob payloads
def test_a_flipped_blob_payload_is_named_with_its_sessions_and_checkpoints(damaged: Path) -> None:
    conn = _db(damaged)
    blob_id, digest, payload = conn.execute(
        "SELECT b.id, b.digest, b.payload FROM blobs b JOIN segment_entries e ON e.blob_id = b.id "
        "WHERE b.kind = 0 ORDER BY b.id LIMIT 1 OFFSET 3"
    ).fetchone()
    users = _checkpoints_using(conn, blob_id)
    assert users
    with conn:
        conn.execute("UPDATE blob_rows SET payload = ? WHERE id = ?", (_flip(payload, 7), blob_id))
    conn.close()
    with Store.open(damaged) as store:
        report = verify(store)
        assert not report.ok
        assert any(p.digest == bytes(digest).hex() for p in report.problems)
        affected = [p for p in report.problems if p.checkpoints]
        assert affected and set(affected[-1].checkpoints) >= users
        assert affected[-1].sessions
        for ck_id in users:
            with pytest.raises(IntegrityError, match=bytes(digest).hex()):
                store.hydrate(store.get_checkpoint(ck_id), verify=True)
    result = run_cli("--root", str(damaged), "archive", "verify")
    assert result.code == IntegrityError.exit_code
    assert bytes(digest).hex() in result.out and "sessions affected" in result.out
    assert "Traceback" not in result.err
    got = run_cli("--root", str(damaged), "archive", "get", bytes(digest).hex())
    assert got.code == IntegrityError.exit_code and got.out == ""
    assert "alpstore: error:" in got.err


def test_a_damaged_kernel_blob_names_its_checkpoints(damaged: Path) -> None:
    conn = _db(damaged)
    ck_id, blob_id, payload = conn.execute(
        "SELECT c.id, b.id, b.payload FROM checkpoints c JOIN blobs b ON b.id = c.kernel_blob_id "
        "ORDER BY c.id LIMIT 1"
    ).fetchone()
    with conn:
        conn.execute("UPDATE blob_rows SET payload = ? WHERE id = ?", (_flip(payload, 3), blob_id))
    conn.close()
    with Store.open(damaged) as store:
        report = verify(store)
        assert not report.ok
        assert ck_id in report.problems[-1].checkpoints


@given(data=st.data())
@settings(max_examples=25)
def test_any_payload_damage_fails_verified_reads_and_verify(
    pristine: tuple[Path, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory, data: Any
) -> None:
    sqlite_only("flips bits in a copy of the run root's SQLite file with sqlite3")
    root = tmp_path_factory.mktemp("flip") / "copy"
    shutil.copytree(pristine[0], root)
    conn = _db(root)
    ids = [r[0] for r in conn.execute("SELECT id FROM blobs ORDER BY id")]
    blob_id = data.draw(st.sampled_from(ids))
    (payload,) = conn.execute("SELECT payload FROM blobs WHERE id = ?", (blob_id,)).fetchone()
    index = data.draw(st.integers(0, len(payload) - 1))
    bit = data.draw(st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128]))
    with conn:
        conn.execute(
            "UPDATE blob_rows SET payload = ? WHERE id = ?", (_flip(payload, index, bit), blob_id)
        )
    users = _checkpoints_using(conn, blob_id)
    conn.close()
    with Store.open(root) as store:
        assert not verify(store).ok
        expected = pristine[1]["expected"]
        for ck_id, history in expected.items():
            try:
                got = [e.value for e in store.hydrate(store.get_checkpoint(ck_id), verify=True)]
            except AlpstoreError:
                continue
            assert got == history, f"checkpoint {ck_id} returned wrong content silently"
        assert users <= _named(verify(store))
    shutil.rmtree(root.parent, ignore_errors=True)


# ------------------------------------------------------------------ view rows
@pytest.mark.parametrize(
    "damage",
    [
        set_entry_sql(3, "999999"),
        drop_entry_sql(4),
        move_run_sql(5, 1000),
        "UPDATE segment_runs SET blob_ids = '[]' WHERE start = 0",
        "UPDATE checkpoints SET length = length + 7 WHERE id = (SELECT MAX(id) FROM checkpoints)",
        "UPDATE checkpoints SET segment_id = 424242 WHERE id = (SELECT MIN(id) FROM checkpoints)",
        "UPDATE segments SET parent_id = 31337 WHERE parent_id IS NOT NULL",
        "UPDATE checkpoints SET kernel_blob_id = 777777 WHERE kernel_blob_id IS NOT NULL",
        "UPDATE blob_refs SET child_id = 888888 WHERE position = 0",
    ],
)
def test_damaged_view_rows_are_named_and_never_read_silently(
    damaged: Path, pristine: tuple[Path, dict[str, Any]], damage: str
) -> None:
    conn = _db(damaged)
    with conn:
        conn.execute("PRAGMA foreign_keys = OFF")
        assert conn.execute(damage).rowcount > 0
    conn.close()
    with Store.open(damaged) as store:
        report = verify(store)
        assert not report.ok, damage
        named = _named(report)
        assert named or any(p.sessions for p in report.problems), [
            p.line() for p in report.problems
        ]
        for ck_id, history in pristine[1]["expected"].items():
            try:
                ck = store.get_checkpoint(ck_id)
                got = [e.value for e in store.hydrate(ck, verify=True)]
                store.checkpoint_state(ck)
            except AlpstoreError:
                assert ck_id in named, f"checkpoint {ck_id} unreadable but not named"
                continue
            assert got == history or ck_id in named, f"checkpoint {ck_id} reads wrong silently"
    result = run_cli("--root", str(damaged), "archive", "verify")
    assert result.code == IntegrityError.exit_code, result.out + result.err
    assert "Traceback" not in result.err and "internal error" not in result.err


def test_a_swapped_view_entry_is_named_by_its_covering_digest(damaged: Path) -> None:
    """A view entry rewritten to another *valid* blob (with its index updated too) reads as
    valid content, and SQLite's integrity check sees nothing; the covering digest each
    checkpoint records names every view the swap changed (issue 13 closed this blind spot)."""
    conn = _db(damaged)
    with conn:
        conn.execute(set_entry_sql(3, "(SELECT MIN(id) FROM blobs)"))
    conn.close()
    with Store.open(damaged) as store:
        report = verify(store)
    assert not report.ok
    named = [p for p in report.problems if "does not match its recorded digest" in p.what]
    assert named and all(p.sessions for p in named)


# ------------------------------------------------------------------ the SQLite file
FILE_SEEDS = range(120)
"""Seeds of the database-file flips (seeds 25, 56, 59, 88 and 110 found two bugs: a
UnicodeDecodeError while connecting, and verify failing with TypeError on NULLs)."""


def test_flipped_bytes_in_the_database_file_never_give_wrong_content(
    pristine: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    sqlite_only("flips bytes of the SQLite file itself")
    expected = pristine[1]["expected"]
    source = (pristine[0] / "traces" / "archive" / "archive.db").read_bytes()
    outcomes: dict[str, int] = {}
    for seed in FILE_SEEDS:
        root = tmp_path / f"flip-{seed}"
        shutil.copytree(pristine[0], root)
        data = bytearray(source)
        rng = random.Random(seed)
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(100, len(data))] ^= 1 << rng.randrange(8)
        (root / "traces" / "archive" / "archive.db").write_bytes(bytes(data))
        outcome = _read_everything(root, expected, seed)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        shutil.rmtree(root)
    assert outcomes.get("refused", 0) + outcomes.get("named", 0) > 0, outcomes


def _read_everything(root: Path, expected: dict[int, list[Any]], seed: int) -> str:
    """Verify and hydrate every checkpoint: right content, or damage named, or a clean refusal."""
    try:
        with Store.open(root) as store:
            report = verify(store)
            named = _named(report)
            for ck_id, history in expected.items():
                try:
                    ck = store.get_checkpoint(ck_id)
                    got = [e.value for e in store.hydrate(ck, verify=True)]
                except AlpstoreError:
                    assert not report.ok, f"seed {seed}: checkpoint {ck_id} unreadable, verify ok"
                    continue
                file_damage = any(p.what.startswith("database file:") for p in report.problems)
                assert got == history or ck_id in named or file_damage, (
                    f"seed {seed}: checkpoint {ck_id} reads wrong and verify did not name it"
                )
            return "ok" if report.ok else "named"
    except AlpstoreError:
        return "refused"  # refused whole, with a clean error (e.g. "archive … is damaged")


def _named(report: Any) -> set[int]:
    return {c for p in report.problems for c in p.checkpoints}


def test_a_truncated_database_is_refused_cleanly(damaged: Path) -> None:
    path = damaged / "traces" / "archive" / "archive.db"
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 3])
    result = run_cli("--root", str(damaged), "archive", "verify")
    assert result.code != 0
    assert result.err.startswith("alpstore: error:"), result.err
    assert "Traceback" not in result.err and "internal error" not in result.err


def test_garbage_instead_of_a_database_is_refused_cleanly(damaged: Path) -> None:
    path = damaged / "traces" / "archive" / "archive.db"
    path.write_bytes(b"this is not a database, just text" * 100)
    result = run_cli("--root", str(damaged), "session", "list")
    assert result.code == CorruptArchiveError.exit_code
    assert "alpstore: error:" in result.err and "damaged" in result.err, result.err
    for action in (verify, lambda s: s.list_sessions(), lambda s: s.archive.stats()):
        with pytest.raises(CorruptArchiveError, match="damaged"), Store.open(damaged) as store:
            action(store)
    assert path.read_bytes().startswith(b"this is not a database")


# ------------------------------------------------------------------ verify --repair
def test_repair_drops_only_unreachable_damaged_blobs_and_says_so(damaged: Path) -> None:
    with Store.open(damaged) as store:
        orphan = store.archive.put({"role": "user", "content": "nobody refers to me " * 20})
        healthy_orphan = store.archive.put({"role": "user", "content": "unreferenced but fine"})
    conn = _db(damaged)
    (orphan_id, payload) = conn.execute(
        "SELECT id, payload FROM blobs WHERE digest = ?", (orphan,)
    ).fetchone()
    (used_id, used_payload, used_digest) = conn.execute(
        "SELECT b.id, b.payload, b.digest FROM blobs b JOIN segment_entries e ON e.blob_id = b.id "
        "ORDER BY b.id LIMIT 1"
    ).fetchone()
    with conn:
        conn.execute(
            "UPDATE blob_rows SET payload = ? WHERE id = ?", (_flip(payload, 9), orphan_id)
        )
        conn.execute(
            "UPDATE blob_rows SET payload = ? WHERE id = ?", (_flip(used_payload, 5), used_id)
        )
    blobs_before = conn.execute("SELECT COUNT(*) FROM blobs").fetchone()[0]
    conn.close()
    # without the flag nothing changes
    plain = run_cli("--root", str(damaged), "archive", "verify")
    assert plain.code == IntegrityError.exit_code
    conn = _db(damaged)
    assert conn.execute("SELECT COUNT(*) FROM blobs").fetchone()[0] == blobs_before
    conn.close()
    result = run_cli("--root", str(damaged), "archive", "verify", "--repair")
    assert f"REPAIR dropped damaged blob {orphan.hex()}" in result.out, result.out
    assert f"REPAIR kept damaged blob {bytes(used_digest).hex()}" in result.out
    assert result.code == IntegrityError.exit_code  # reachable damage remains
    conn = _db(damaged)
    assert conn.execute("SELECT COUNT(*) FROM blobs").fetchone()[0] == blobs_before - 1
    assert conn.execute("SELECT 1 FROM blobs WHERE digest = ?", (healthy_orphan,)).fetchone()
    conn.close()


def test_repair_of_a_healthy_archive_changes_nothing(damaged: Path) -> None:
    with Store.open(damaged) as store:
        blobs = store.archive.stats().blobs
        report = repair(store)
        assert report.dropped == [] and report.kept == [] and report.after.ok
        assert store.archive.stats().blobs == blobs


# ------------------------------------------------------------------ deep export files
def test_export_refuses_a_damaged_blob_and_writes_nothing(damaged: Path) -> None:
    """Found by this suite: the export hydrated without verifying and wrote the damaged bytes
    (exit 0); only the importer on the other machine noticed."""
    from alpstore.portable.deep import export_snapshot, snapshot_of_checkpoint

    conn = _db(damaged)
    blob_id, payload = conn.execute(
        "SELECT b.id, b.payload FROM blobs b JOIN segment_entries e ON e.blob_id = b.id "
        "WHERE b.codec = 0 ORDER BY b.id LIMIT 1"
    ).fetchone()
    users = _checkpoints_using(conn, blob_id)
    with conn:
        conn.execute("UPDATE blob_rows SET payload = ? WHERE id = ?", (_flip(payload, 4), blob_id))
    conn.close()
    with Store.open(damaged) as store:
        ck = store.get_checkpoint(max(users))
        with pytest.raises(IntegrityError, match="digest"):
            export_snapshot(store, snapshot_of_checkpoint(store, ck))


@given(data=st.data())
@settings(max_examples=40)
def test_a_flipped_byte_in_an_export_file_is_named_or_harmless(
    pristine: tuple[Path, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory, data: Any
) -> None:
    from alpstore.portable.deep import export_snapshot, snapshot_of_checkpoint
    from alpstore.portable.importing import import_document

    with Store.open(pristine[0]) as store:
        ck_id = max(pristine[1]["expected"])
        doc = export_snapshot(store, snapshot_of_checkpoint(store, store.get_checkpoint(ck_id)))
    raw = bytearray(json.dumps(doc, ensure_ascii=False).encode())
    at = data.draw(st.integers(0, len(raw) - 1))
    raw[at] ^= data.draw(st.sampled_from([1, 2, 4, 8, 16, 32]))
    folder = tmp_path_factory.mktemp("export")
    try:
        flipped = json.loads(bytes(raw))
    except ValueError:
        return  # not JSON any more: refused by every reader
    with Store.open(folder) as store:
        try:
            result = import_document(store, flipped, source_name="x.json", fork=True)
        except AlpstoreError as err:
            assert err.message  # named and refused, nothing written
            assert store.count_sessions() == 0
            return
        got = [e.value for e in store.hydrate(result.checkpoint, verify=True)]
    # accepted: then the flip did not touch the history (a label, a timestamp, whitespace…)
    assert got == pristine[1]["expected"][ck_id]
    shutil.rmtree(folder, ignore_errors=True)
