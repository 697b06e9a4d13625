"""One copy of each blob digest on SQLite (issue 33, migration 0008): the row holds the digest,
the lookup index ``ix_blobs_digest_prefix`` its first ``DIGEST_PREFIX`` bytes. Lookups compare
the whole digest, so blobs whose digests share a prefix are told apart; the migration keeps
every id and the id sequence; PostgreSQL keeps its unique constraint.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alembic import command
from alpstore.archive.reading import digest_rows
from alpstore.codec import CODEC_RAW
from alpstore.db import open_database, sqlite_path_for_root
from alpstore.db.migrate import SCHEMA_HEAD, alembic_config, current_revision, upgrade
from alpstore.db.names import DIGEST_PREFIX
from alpstore.errors import IntegrityError
from alpstore.maintenance import gc, verify
from alpstore.store import Store
from tests.conftest import Backend

sqlite_only = pytest.mark.sqlite_only("the prefix index is SQLite's layout")


def _insert_raw(store: Store, digest: bytes, payload: bytes) -> int:
    """A row stored by hand (the digest chosen, not derived): what a prefix collision is."""
    with store.db.atomic() as conn:
        cur = conn.exec_driver_sql(
            "INSERT INTO blob_rows (digest, kind, raw_size, codec, dict_id, payload, base_id) "
            "VALUES (?, 0, ?, ?, NULL, ?, NULL)",
            (digest, len(payload), CODEC_RAW, payload),
        )
        return int(cur.lastrowid or 0)


@sqlite_only
def test_the_digest_is_held_once_and_looked_up_through_its_prefix(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    try:
        store.create_session(name="s").commit_turn([{"role": "user", "content": "hello"}])
        with store.db.read() as conn:
            indexes = {
                str(name): str(sql)
                for name, sql in conn.exec_driver_sql(
                    "SELECT name, sql FROM sqlite_master WHERE type = 'index' "
                    "AND tbl_name = 'blob_rows'"
                )
            }
            plan = " ".join(
                str(r[-1])
                for r in conn.exec_driver_sql(
                    "EXPLAIN QUERY PLAN SELECT digest, id FROM blob_rows "
                    f"WHERE substr(digest, 1, {DIGEST_PREFIX}) IN (?, ?)",
                    (b"ab", b"cd"),
                )
            )
        # no unique index on the whole digest (an autoindex would be named sqlite_autoindex_*)
        assert set(indexes) == {"ix_blob_rows_digest_prefix"}, indexes  # (0010: renamed)
        assert f"substr(digest, 1, {DIGEST_PREFIX})" in indexes["ix_blob_rows_digest_prefix"]
        assert "ix_blob_rows_digest_prefix" in plan, plan
    finally:
        store.close()


@sqlite_only
@settings(max_examples=25, deadline=None)
@given(
    prefix=st.binary(min_size=DIGEST_PREFIX, max_size=DIGEST_PREFIX),
    tails=st.lists(
        st.binary(min_size=32 - DIGEST_PREFIX, max_size=32 - DIGEST_PREFIX),
        min_size=2,
        max_size=8,
        unique=True,
    ),
    stored=st.data(),
)
def test_digests_sharing_a_prefix_are_told_apart(
    tmp_path_factory: pytest.TempPathFactory,
    prefix: bytes,
    tails: list[bytes],
    stored: st.DataObject,
) -> None:
    digests = [prefix + t for t in tails]
    keep = stored.draw(st.lists(st.sampled_from(digests), unique=True, min_size=1))
    store = Store.open(tmp_path_factory.mktemp("prefix"))
    try:
        ids = {d: _insert_raw(store, d, d.hex().encode()) for d in keep}
        with store.db.read() as conn:
            assert store.archive.ids_for(conn, digests) == ids
            rows = digest_rows(conn, "id, payload", digests)
        assert {d: (i, bytes(p)) for d, i, p in rows} == {
            d: (ids[d], d.hex().encode()) for d in keep
        }
        for d in digests:
            assert store.archive.has(d) == (d in ids)
            if d in ids:
                assert store.archive.get_raw(d, verify=False)[1] == d.hex().encode()
    finally:
        store.close()


def test_a_stored_digest_is_stored_once_however_it_comes(backend: Backend) -> None:
    """Writes that repeat content, in one call, across calls and after packing, keep one row
    per digest (the database no longer enforces it on SQLite: the writer does)."""
    store = backend.open_store()
    docs = [{"n": i % 7, "text": "same " * (i % 7)} for i in range(40)]
    first = store.archive.put_many(docs)
    store.archive.pack_cold()
    again = store.archive.put_many(list(reversed(docs)))
    assert again == list(reversed(first))
    with store.db.read() as conn:
        rows = conn.exec_driver_sql("SELECT count(*), count(DISTINCT digest) FROM blobs").one()
    assert rows[0] == rows[1] == 7
    assert store.archive.get_many(first) == docs


@sqlite_only
def test_the_migration_keeps_ids_and_the_id_sequence(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    s = store.create_session(name="kept")
    for i in range(5):
        s.commit_turn([{"role": "user", "content": f"turn {i}"}])
    # the newest blob deleted by gc: its id must not be handed out again after the rebuild
    orphan = store.archive.put({"role": "tool", "content": "nothing refers to me"})
    gc(store)
    assert not store.archive.has(orphan)
    with store.db.read() as conn:
        before = dict(conn.exec_driver_sql("SELECT digest, id FROM blobs").all())
        seq = conn.exec_driver_sql(
            "SELECT seq FROM sqlite_sequence WHERE name = 'blob_rows'"
        ).scalar_one()
    store.close()
    assert seq > max(before.values())
    db = open_database(root=tmp_path)
    try:
        command.downgrade(alembic_config(db), "0007")
        with db.read() as conn:
            sql = conn.exec_driver_sql(
                "SELECT sql FROM sqlite_master WHERE name = 'blobs'"
            ).scalar_one()
        assert "uq_blobs_digest UNIQUE" in str(sql)
        upgrade(db)
        assert current_revision(db) == SCHEMA_HEAD
    finally:
        db.close()
    con = sqlite3.connect(sqlite_path_for_root(tmp_path))
    try:
        assert dict(con.execute("SELECT digest, id FROM blobs").fetchall()) == before
        assert con.execute(
            "SELECT seq FROM sqlite_sequence WHERE name = 'blob_rows'"
        ).fetchone() == (seq,)
        assert con.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        con.close()
    again = Store.open(tmp_path)
    try:
        new = again.archive.put({"role": "user", "content": os.urandom(8).hex()})
        with again.db.read() as conn:
            (new_id,) = conn.exec_driver_sql(
                f"SELECT id FROM blobs WHERE substr(digest, 1, {DIGEST_PREFIX}) = ?",
                (bytes(new[:DIGEST_PREFIX]),),
            ).one()
        assert new_id > seq
        assert [e.value["content"] for e in again.get_session("kept").history()] == [
            f"turn {i}" for i in range(5)
        ]
        assert verify(again).ok
    finally:
        again.close()


def test_postgresql_keeps_the_unique_digest(backend: Backend) -> None:
    if not backend.is_postgresql:
        pytest.skip("PostgreSQL's layout")
    store = backend.open_store()
    with store.db.read() as conn:
        names = {
            str(r[0])
            for r in conn.exec_driver_sql(
                "SELECT conname FROM pg_constraint WHERE conrelid = 'blob_rows'::regclass"
            )
        }
    assert "uq_blob_rows_digest" in names  # (0010: the loose rows' table)


def _foreign_keys_on(store: Store) -> bool:
    with store.db.atomic() as conn:
        return bool(conn.exec_driver_sql("PRAGMA foreign_keys").scalar_one())


@sqlite_only
def test_gc_checks_its_own_sweep_when_foreign_keys_are_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite has no index on ``segment_entries.blob_id`` (0008), so GC sweeps with foreign keys
    off and checks itself that nothing refers to what it deletes: a mark that missed a live
    blob (a GC bug, simulated) deletes nothing, and every connection enforces foreign keys
    again afterwards."""
    import alpstore.maintenance as maintenance

    store = Store.open(tmp_path)
    try:
        s = store.create_session(name="kept")
        s.commit_turn([{"role": "user", "content": "keep me"}])
        orphan = store.archive.put({"role": "tool", "content": "nothing refers to me"})
        with store.db.read() as conn:
            names = {
                str(r[0])
                for r in conn.exec_driver_sql(
                    "SELECT name FROM sqlite_master WHERE tbl_name = 'segment_entries'"
                )
            }
        assert "ix_segment_entries_blob_id" not in names
        monkeypatch.setattr(maintenance, "_reachable_blobs", lambda *a, **k: set())
        with pytest.raises(IntegrityError, match=r"segment_entries\.blob_id still refers"):
            gc(store)
        assert store.archive.has(orphan)  # nothing removed
        assert _foreign_keys_on(store)
        monkeypatch.undo()
        report = gc(store)
        assert report.blobs_removed == 1 and not store.archive.has(orphan)
        assert _foreign_keys_on(store)
        assert [e.value for e in s.history()] == [{"role": "user", "content": "keep me"}]
        assert verify(store).ok
    finally:
        store.close()
