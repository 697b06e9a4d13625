"""A LangGraph thread's closed turns in one row each: ``lg_turns`` (issue 42, third step).

Until 0011 every LangGraph step was an ``lg_checkpoints`` row (~120 B of packed state, a unique
key and two more index entries) and every ``put_writes`` an ``lg_writes`` row with its key and
an ``lg_write_items`` row per blob: at 1,000 turns of the tool loop 0.795× of the raw
conversation on SQLite in rows and indexes. A closed turn's steps and their pending writes are
now one ``lg_turns`` row: one canonical-JSON document packed as every saver row is
(``STATE_DICTIONARY``, codec 10, or raw when that is smaller), found by the greatest
``first_checkpoint_id <= id`` of its thread (a thread's turn rows hold disjoint id ranges, and
no loose step lies inside one), its blobs listed in ``lg_turn_blobs`` for GC and verify. The
open turn's steps stay loose, in the old tables.

The document: ``{"k": [[checkpoint id, parent id | null, alp checkpoint id, run ref | null,
state], ...], "w": [[step index, task id, writes doc, [item blob ids]], ...]}``, steps in
checkpoint-id order, writes in their ``lg_writes.id`` order, ids as the hex of their stored
bytes, ``state`` and ``writes doc`` the documents the loose rows packed.

Upgrade, per thread: its loose steps in id order, cut at every step whose metadata says
``source == "input"`` (a new invoke's input: the turn before it is over); every group before
the newest input step becomes a turn row with its steps' writes; a thread holding a row of a
codec other than 0 / 10 (none written by any saver) stays loose. Downgrade: every turn row back
as loose rows (states packed again: the same bytes, their documents being canonical JSON;
``lg_checkpoint_blobs`` from the states' ``b`` refs), then the two tables dropped.

The packing is this file's own (zstd with the saver's fixed dictionary, which
``alpstore.portable.lgrows`` defines and which never changes under codec 10).

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import json
from collections import defaultdict
from itertools import pairwise
from typing import Any

import sqlalchemy as sa
import zstandard
from sqlalchemy import Connection
from sqlalchemy.dialects.postgresql import ARRAY

from alembic import op
from alpstore.codec import canonical_json
from alpstore.portable.lgrows import STATE_DICTIONARY

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

CODEC_RAW = 0
CODEC_LG_DICT = 10


def _contexts() -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
    data = zstandard.ZstdCompressionDict(STATE_DICTIONARY, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    return (
        zstandard.ZstdCompressor(
            level=3,
            dict_data=data,
            write_content_size=False,
            write_checksum=False,
            write_dict_id=False,
        ),
        zstandard.ZstdDecompressor(dict_data=data),
    )


class _Codec:
    """Pack and unpack as the saver does (``lgrows.pack_doc`` / ``unpack_doc``)."""

    def __init__(self) -> None:
        self.comp, self.dec = _contexts()

    def pack(self, doc: Any) -> tuple[int, None, int, bytes]:
        raw = canonical_json(doc)
        payload = self.comp.compress(raw)
        if len(payload) >= len(raw):
            return CODEC_RAW, None, len(raw), raw
        return CODEC_LG_DICT, None, len(raw), payload

    def unpack(self, codec: int, dict_id: Any, size: int, payload: bytes) -> Any | None:
        """The document; None for a codec the saver never writes."""
        if codec == CODEC_RAW and dict_id is None:
            return json.loads(payload)
        if codec == CODEC_LG_DICT:
            return json.loads(self.dec.decompress(payload, max_output_size=size))
        return None


def _array(dialect: str, ids: list[int]) -> Any:
    return ids if dialect == "postgresql" else json.dumps(ids, separators=(",", ":"))


def _is_input(state: Any) -> bool:
    meta = state.get("m") if isinstance(state, dict) else None
    inner = meta.get("json") if isinstance(meta, dict) else None
    return isinstance(inner, dict) and inner.get("source") == "input"


def _state_blobs(state: Any) -> list[int]:
    """The blob ids a state's channel refs name (what ``lg_checkpoint_blobs`` lists)."""
    refs = state.get("v", {}) if isinstance(state, dict) else {}
    return list(dict.fromkeys(int(r[2]) for r in refs.values() if r and r[0] == "b"))


def _marks(dialect: str, n: int) -> str:
    return ", ".join(["%s" if dialect == "postgresql" else "?"] * n)


_INTS = sa.Text().with_variant(ARRAY(sa.Integer()), "postgresql")
"""An integer list: PostgreSQL ``INTEGER[]``, SQLite JSON text ``[1,2,3]``."""


def _create_tables() -> None:
    op.create_table(
        "lg_turns",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("thread_ref", sa.Integer(), nullable=False),
        sa.Column("first_checkpoint_id", sa.LargeBinary(), nullable=False),
        sa.Column("last_checkpoint_id", sa.LargeBinary(), nullable=False),
        sa.Column("steps", sa.Integer(), nullable=False),
        sa.Column("alp_ids", _INTS, nullable=False),
        sa.Column("run_refs", _INTS, nullable=False),
        sa.Column("codec", sa.SmallInteger(), nullable=False),
        sa.Column("dict_id", sa.Integer(), nullable=True),
        sa.Column("raw_size", sa.Integer(), nullable=False),
        sa.Column("doc", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["dict_id"], ["zstd_dicts.id"], name=op.f("fk_lg_turns_dict_id_zstd_dicts")
        ),
        sa.ForeignKeyConstraint(
            ["thread_ref"], ["lg_threads.id"], name=op.f("fk_lg_turns_thread_ref_lg_threads")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lg_turns")),
        sa.UniqueConstraint(
            "thread_ref",
            "first_checkpoint_id",
            name=op.f("uq_lg_turns_thread_ref_first_checkpoint_id"),
        ),
        comment="A LangGraph thread's closed turn (0011): its steps' states and their pending "
        "writes as one packed document.",
        sqlite_autoincrement=True,
    )
    op.create_table(
        "lg_turn_blobs",
        sa.Column("turn_ref", sa.Integer(), nullable=False),
        sa.Column("blob_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["turn_ref"], ["lg_turns.id"], name=op.f("fk_lg_turn_blobs_turn_ref_lg_turns")
        ),
        sa.PrimaryKeyConstraint("turn_ref", "blob_id", name=op.f("pk_lg_turn_blobs")),
        comment="The blobs a closed LangGraph turn's states and pending writes refer to (0011).",
        sqlite_with_rowid=False,
    )
    op.create_index(op.f("ix_lg_turn_blobs_blob_id"), "lg_turn_blobs", ["blob_id"], unique=False)


# ---------------------------------------------------------------- upgrade
def _fold_thread(conn: Connection, codec: _Codec, ref: int) -> None:
    """Fold a thread namespace's closed turns (see the module docstring)."""
    dialect = conn.dialect.name
    m = "%s" if dialect == "postgresql" else "?"
    steps = conn.exec_driver_sql(
        "SELECT id, checkpoint_id, parent_checkpoint_id, alp_checkpoint_id, run_ref, codec, "
        f"dict_id, raw_size, state FROM lg_checkpoints WHERE thread_ref = {m} "
        "ORDER BY checkpoint_id",
        (ref,),
    ).all()
    states = []
    for r in steps:
        state = codec.unpack(int(r[5]), r[6], int(r[7]), bytes(r[8]))
        if state is None:
            return  # a codec no saver writes: the thread stays loose
        states.append(state)
    cuts = [i for i, st in enumerate(states) if _is_input(st)]
    if not cuts or cuts[-1] == 0:
        return
    bounds = [0, *[c for c in cuts if c > 0]]  # groups [bounds[j], bounds[j + 1])
    items: dict[int, list[int]] = defaultdict(list)
    for write_id, blob_id in conn.exec_driver_sql(
        "SELECT i.write_id, i.blob_id FROM lg_write_items i JOIN lg_writes w ON w.id = i.write_id "
        f"WHERE w.thread_ref = {m} ORDER BY i.write_id, i.position",
        (ref,),
    ):
        items[int(write_id)].append(int(blob_id))
    writes: dict[bytes, list[Any]] = defaultdict(list)
    for w in conn.exec_driver_sql(
        "SELECT id, checkpoint_id, task_id, codec, dict_id, raw_size, state FROM lg_writes "
        f"WHERE thread_ref = {m} ORDER BY id",
        (ref,),
    ):
        writes[bytes(w[1])].append(w)
    for lo, hi in pairwise(bounds):
        if not _fold_group(conn, codec, ref, steps[lo:hi], states[lo:hi], writes, items):
            return


def _fold_group(
    conn: Connection,
    codec: _Codec,
    ref: int,
    steps: list[Any],
    states: list[Any],
    writes: dict[bytes, list[Any]],
    items: dict[int, list[int]],
) -> bool:
    """One group of steps as a turn row, its loose rows deleted (False, nothing written: a
    write of a codec no saver writes)."""
    dialect = conn.dialect.name
    m = "%s" if dialect == "postgresql" else "?"
    k: list[Any] = []
    w: list[Any] = []
    blobs: dict[int, None] = {}
    write_ids: list[int] = []
    for index, (r, state) in enumerate(zip(steps, states, strict=True)):
        cid = bytes(r[1])
        k.append(
            [
                cid.hex(),
                None if r[2] is None else bytes(r[2]).hex(),
                int(r[3]),
                None if r[4] is None else int(r[4]),
                state,
            ]
        )
        blobs.update(dict.fromkeys(_state_blobs(state)))
        for wr in writes.get(cid, []):
            doc = codec.unpack(int(wr[3]), wr[4], int(wr[5]), bytes(wr[6]))
            if doc is None:
                return False
            listed = items.get(int(wr[0]), [])
            w.append([index, bytes(wr[2]).hex(), doc, listed])
            blobs.update(dict.fromkeys(listed))
            write_ids.append(int(wr[0]))
    packed = codec.pack({"k": k, "w": w})
    alp_ids = [int(r[3]) for r in steps]
    runs = sorted({int(r[4]) for r in steps if r[4] is not None})
    turn = conn.exec_driver_sql(
        "INSERT INTO lg_turns (thread_ref, first_checkpoint_id, last_checkpoint_id, steps, "
        f"alp_ids, run_refs, codec, dict_id, raw_size, doc) VALUES ({_marks(dialect, 10)}) "
        "RETURNING id",
        (
            ref,
            bytes(steps[0][1]),
            bytes(steps[-1][1]),
            len(steps),
            _array(dialect, alp_ids),
            _array(dialect, runs),
            *packed,
        ),
    ).scalar_one()
    if blobs:
        conn.exec_driver_sql(
            f"INSERT INTO lg_turn_blobs (turn_ref, blob_id) VALUES ({m}, {m})",
            [(int(turn), b) for b in blobs],
        )
    for at in range(0, len(write_ids), 500):
        part = write_ids[at : at + 500]
        marks = _marks(dialect, len(part))
        conn.exec_driver_sql(f"DELETE FROM lg_write_items WHERE write_id IN ({marks})", tuple(part))
        conn.exec_driver_sql(f"DELETE FROM lg_writes WHERE id IN ({marks})", tuple(part))
    ids = [int(r[0]) for r in steps]
    for at in range(0, len(ids), 500):
        part = ids[at : at + 500]
        marks = _marks(dialect, len(part))
        conn.exec_driver_sql(
            f"DELETE FROM lg_checkpoint_blobs WHERE checkpoint_ref IN ({marks})", tuple(part)
        )
        conn.exec_driver_sql(f"DELETE FROM lg_checkpoints WHERE id IN ({marks})", tuple(part))
    return True


def upgrade() -> None:
    _create_tables()
    conn = op.get_bind()
    codec = _Codec()
    for (ref,) in conn.exec_driver_sql("SELECT id FROM lg_threads ORDER BY id").all():
        _fold_thread(conn, codec, int(ref))


# ---------------------------------------------------------------- downgrade
def _unfold(conn: Connection, codec: _Codec, turn: Any) -> None:
    """A turn row's steps and writes back as loose rows (ids new, order kept)."""
    dialect = conn.dialect.name
    m = "%s" if dialect == "postgresql" else "?"
    turn_id, ref, c, dict_id, size, payload = turn
    doc = codec.unpack(int(c), dict_id, int(size), bytes(payload))
    if doc is None:  # pragma: no cover - 0011 writes codecs 0 and 10 only
        raise RuntimeError(f"lg_turns row {turn_id}: codec {c} cannot be unfolded")
    for cid, parent, alp_id, run, state in doc["k"]:
        new = conn.exec_driver_sql(
            "INSERT INTO lg_checkpoints (thread_ref, checkpoint_id, parent_checkpoint_id, "
            "alp_checkpoint_id, run_ref, codec, dict_id, raw_size, state) "
            f"VALUES ({_marks(dialect, 9)}) RETURNING id",
            (
                int(ref),
                bytes.fromhex(cid),
                None if parent is None else bytes.fromhex(parent),
                int(alp_id),
                run,
                *codec.pack(state),
            ),
        ).scalar_one()
        blobs = _state_blobs(state)
        if blobs:
            conn.exec_driver_sql(
                f"INSERT INTO lg_checkpoint_blobs (checkpoint_ref, blob_id) VALUES ({m}, {m})",
                [(int(new), b) for b in blobs],
            )
    for index, task, wdoc, items in doc["w"]:
        write = conn.exec_driver_sql(
            "INSERT INTO lg_writes (thread_ref, checkpoint_id, task_id, codec, dict_id, "
            f"raw_size, state) VALUES ({_marks(dialect, 7)}) RETURNING id",
            (int(ref), bytes.fromhex(doc["k"][index][0]), bytes.fromhex(task), *codec.pack(wdoc)),
        ).scalar_one()
        if items:
            conn.exec_driver_sql(
                f"INSERT INTO lg_write_items (write_id, position, blob_id) VALUES ({m}, {m}, {m})",
                [(int(write), i, int(b)) for i, b in enumerate(items)],
            )


def downgrade() -> None:
    conn = op.get_bind()
    codec = _Codec()
    turns = conn.exec_driver_sql(
        "SELECT id, thread_ref, codec, dict_id, raw_size, doc FROM lg_turns "
        "ORDER BY thread_ref, first_checkpoint_id"
    ).all()
    for turn in turns:
        _unfold(conn, codec, turn)
    op.drop_index(op.f("ix_lg_turn_blobs_blob_id"), table_name="lg_turn_blobs")
    op.drop_table("lg_turn_blobs")
    op.drop_table("lg_turns")
