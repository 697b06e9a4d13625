"""SQLAlchemy Core tables: the archive's schema as the models Alembic migrations must equal.

Rows refer to blobs by an integer surrogate key (``blobs.id``); the 32-byte BLAKE3 digest is the
public id. Integer ids are never reused (SQLite: AUTOINCREMENT; PostgreSQL: sequences), so a
process-local cache keyed by one can find its row gone but never another row in its place.
A covering list (view) is a piece table: a segment holds the entries appended after it
branched from its parent at ``base_length``; a view is ``(segment_id, length)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY

from alpstore.db.names import (  # re-exported: readers take them from names (no SQLAlchemy)
    ARCHIVE_TABLES as ARCHIVE_TABLES,
)
from alpstore.db.names import (
    BLOB_KINDS as BLOB_KINDS,
)
from alpstore.db.names import (
    BLOB_MANIFEST as BLOB_MANIFEST,
)
from alpstore.db.names import (
    BLOB_MESSAGE as BLOB_MESSAGE,
)
from alpstore.db.names import (
    BLOB_STATE as BLOB_STATE,
)
from alpstore.db.names import (
    BLOB_SUMMARY as BLOB_SUMMARY,
)
from alpstore.db.names import (
    DIGEST_PREFIX as DIGEST_PREFIX,
)

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING)


zstd_dicts = Table(
    "zstd_dicts",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("digest", LargeBinary(32), nullable=False, unique=True),
    Column("size", Integer, nullable=False),
    Column("sample_count", Integer, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("data", LargeBinary, nullable=False),
    # how ``data`` holds the dictionary (0006): CODEC_RAW, or CODEC_ZSTD (a zstd frame of it);
    # ``size`` and ``digest`` are the dictionary's own
    Column("codec", SmallInteger, nullable=False, server_default=text("0")),
    # what it compresses (0013): 0 the blob store's small blobs, 1 the LangGraph saver's closed
    # turns (``lg_turns.doc``, codec 11); the blob store uses its newest row of purpose 0
    Column("purpose", SmallInteger, nullable=False, server_default=text("0")),
    comment="Trained zstd dictionaries; a row is never changed once written.",
    sqlite_autoincrement=True,
)

blob_rows = Table(
    "blob_rows",
    metadata,
    Column("id", Integer, primary_key=True),
    # one copy of the digest (0008): unique on PostgreSQL; on SQLite looked up through an
    # index on its first DIGEST_PREFIX bytes (see alpstore.archive.reading.digest_rows)
    Column("digest", LargeBinary(32), nullable=False),
    Column("kind", SmallInteger, nullable=False),
    Column("raw_size", Integer, nullable=False),
    Column("codec", SmallInteger, nullable=False),
    Column("dict_id", Integer, ForeignKey("zstd_dicts.id"), nullable=True),
    Column("payload", LargeBinary, nullable=False),
    Column("base_id", Integer, nullable=True),
    UniqueConstraint("digest", name="uq_blob_rows_digest").ddl_if(dialect="postgresql"),
    comment="Loose content-addressed nodes (packed ones are described in their frame's row; "
    "the view blobs shows both).",
    sqlite_autoincrement=True,
)
"""Loose blobs (0010: the table ``blobs`` was; packed blobs live in their frame's row)."""
Index("ix_blob_rows_digest_prefix", func.substr(blob_rows.c.digest, 1, DIGEST_PREFIX)).ddl_if(
    dialect="sqlite"
)

_ARRAY = Text().with_variant(ARRAY(Integer), "postgresql")
"""An integer list: PostgreSQL ``INTEGER[]``, SQLite JSON text ``[1,2,3]``."""

pack_frames = Table(
    "pack_frames",
    metadata,
    Column("id", Integer, primary_key=True),
    # BLAKE3-256 of the frame's content (the packed blobs' canonical bytes, concatenated)
    Column("digest", LargeBinary(32), nullable=False),
    Column("codec", SmallInteger, nullable=False),
    Column("dict_id", Integer, ForeignKey("zstd_dicts.id"), nullable=True),
    Column("raw_size", Integer, nullable=False),
    Column("blob_count", Integer, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("data", LargeBinary, nullable=False),
    # the members (0010), in content order: the smallest and largest id, where each starts
    # (ascending), each kind (PostgreSQL a byte each, SQLite a digit each), the ids when not
    # first_id, first_id + 1, ... (else NULL), the 32-byte digests concatenated
    Column("first_id", Integer, nullable=False, index=True),
    Column("last_id", Integer, nullable=False),
    Column("offsets", _ARRAY, nullable=False),
    Column("kinds", Text().with_variant(LargeBinary, "postgresql"), nullable=False),
    Column("ids", _ARRAY, nullable=True),
    Column("digests", LargeBinary, nullable=False),
    comment="Pack frames (0007): cold blobs rewritten in conversation order into one zstd "
    "frame; since 0010 the row describes its members (the blobs view shows them as rows).",
    sqlite_autoincrement=True,
)
Index(
    "ix_pack_frames_digest_keys",
    func.alp_digest_keys(pack_frames.c.digests),
    postgresql_using="gin",
    # each frame's keys go straight into the tree: a pending list (fastupdate) left 115 B a
    # key at 2,000 imported turns
    postgresql_with={"fastupdate": "off"},
).ddl_if(dialect="postgresql")

pack_digests = Table(
    "pack_digests",
    metadata,
    Column("prefix", Integer, primary_key=True),
    Column("frame_id", Integer, primary_key=True),
    comment="SQLite (0010): the frames holding a digest, by its first four bytes (signed, "
    "big-endian); PostgreSQL finds them through a GIN index over pack_frames.digests.",
    sqlite_with_rowid=False,
)

SQLITE_ONLY = frozenset({"pack_digests"})
"""Tables only SQLite archives have (``include_for`` leaves them out elsewhere)."""


blob_refs = Table(
    "blob_refs",
    metadata,
    Column("parent_id", Integer, primary_key=True),
    Column("position", Integer, primary_key=True),
    Column("child_id", Integer, nullable=False, index=True),
    comment="The ordered digests a summary covers (also inside its content).",
    sqlite_with_rowid=False,
)

sessions = Table(
    "sessions",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("uuid", String(64), nullable=False, unique=True),
    Column("name", String(200), nullable=True),
    Column("parent_id", Integer, ForeignKey("sessions.id"), nullable=True, index=True),
    Column("source_checkpoint_id", Integer, nullable=True),
    Column("root_id", Integer, nullable=True),
    Column("origin", Text, nullable=True),
    Column("manifest_blob_id", Integer, nullable=True),
    Column("status", String(16), nullable=False),
    Column("head_segment_id", Integer, nullable=True),
    Column("head_length", Integer, nullable=False),
    Column("turn", Integer, nullable=False),
    Column("backtrack_count", Integer, nullable=False),
    Column("retention_mode", String(16), nullable=False),
    Column("retention_n", Integer, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("head_digest", LargeBinary(32), nullable=True),
    # names are unique (0005): a unique index, not a constraint, so SQLite needs no table rebuild
    # (which would break the SQL views reading ``sessions``); NULL names may repeat
    Index("uq_sessions_name", "name", unique=True),
    comment="One agent session: its live covering head is (head_segment_id, head_length).",
    sqlite_autoincrement=True,
)

segments = Table(
    "segments",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("session_id", Integer, ForeignKey("sessions.id"), nullable=True, index=True),
    Column("parent_id", Integer, ForeignKey("segments.id"), nullable=True, index=True),
    Column("base_length", Integer, nullable=False),
    Column("length", Integer, nullable=False),
    Column("sealed", Boolean(name="ck_segments_sealed"), nullable=False, server_default=false()),
    comment="Piece-table segment: parent's first base_length entries, then its own entries.",
    sqlite_autoincrement=True,
)

segment_runs = Table(
    "segment_runs",
    metadata,
    Column("segment_id", Integer, ForeignKey("segments.id"), primary_key=True),
    Column("start", Integer, primary_key=True),
    # PostgreSQL INTEGER[]; SQLite JSON text "[1,2,3]" (json_each unnests it)
    Column("blob_ids", Text().with_variant(ARRAY(Integer), "postgresql"), nullable=False),
    comment="One row per append: the blob ids of a segment's entries from position start on.",
    sqlite_with_rowid=False,
)

BLOB_REFERENCES = (
    ("blob_refs", "parent_id"),
    ("blob_refs", "child_id"),
    ("sessions", "manifest_blob_id"),
    ("checkpoints", "kernel_blob_id"),
    ("checkpoints", "wm_blob_id"),
    ("backtracks", "steering_blob_id"),
    ("lg_checkpoint_blobs", "blob_id"),
    ("lg_write_items", "blob_id"),
    ("lg_turn_blobs", "blob_id"),
)
"""The columns holding a blob id (their foreign keys to ``blobs.id`` went in 0010, as
``segment_entries.blob_id``'s did in 0009: ``alpstore.db.sweep`` checks a sweep's deletes)."""

view_metadata = MetaData()
"""SQL views described for Core reads (not created from here: the migrations make them)."""

blobs = Table(
    "blobs",
    view_metadata,
    Column("id", Integer, primary_key=True),
    Column("digest", LargeBinary(32)),
    Column("kind", SmallInteger),
    Column("raw_size", Integer),
    Column("codec", SmallInteger),
    Column("dict_id", Integer),
    Column("payload", LargeBinary),
    Column("base_id", Integer),
    comment="VIEW since 0010: the loose rows (blob_rows) and every frame's members.",
)
"""Every blob one row each, as the table was before 0010 (read only): loose rows UNION ALL the
frames' members (codec 4, payload their pointer)."""

segment_entries = Table(
    "segment_entries",
    view_metadata,
    Column("segment_id", Integer, primary_key=True),
    Column("position", Integer, primary_key=True),
    Column("blob_id", Integer),
    comment="VIEW since 0009: one row per entry of segment_runs (unnest / json_each).",
)
"""The entries one row each, as a view over ``segment_runs`` (read only): what verify, `sql`
and the README's examples read; alpstore's range reads go to the runs through their key."""

lg_turn_blobs = Table(
    "lg_turn_blobs",
    view_metadata,
    Column("turn_ref", Integer, primary_key=True),
    Column("blob_id", Integer, primary_key=True),
    comment="VIEW since 0012: one row per id of lg_turns.blob_ids (unnest / json_each).",
)
"""A closed turn's blobs one row each, as a view over ``lg_turns.blob_ids`` (read only): what
GC's mark, its sweep's check and verify read (``BLOB_REFERENCES``)."""

checkpoints = Table(
    "checkpoints",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("session_id", Integer, ForeignKey("sessions.id"), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("turn", Integer, nullable=False),
    Column("segment_id", Integer, ForeignKey("segments.id"), nullable=True, index=True),
    Column("length", Integer, nullable=False),
    Column("kernel_blob_id", Integer, nullable=True),
    Column("wm_blob_id", Integer, nullable=True),
    Column("label", String(200), nullable=True),
    Column("trigger", String(32), nullable=True),
    Column("abandoned", Boolean(name="ck_checkpoints_abandoned"), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("covering_digest", LargeBinary(32), nullable=True),
    UniqueConstraint("session_id", "seq"),
    comment="Shallow checkpoints: a pointer to a view (segment_id, length) plus state blobs.",
    sqlite_autoincrement=True,
)

backtracks = Table(
    "backtracks",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("session_id", Integer, ForeignKey("sessions.id"), nullable=False, index=True),
    Column("from_checkpoint_id", Integer, nullable=True),
    Column("to_checkpoint_id", Integer, nullable=False),
    Column("steps", Integer, nullable=False),
    Column("steering_blob_id", Integer, nullable=True),
    Column("automatic", Boolean(name="ck_backtracks_automatic"), nullable=False),
    Column("error_signature", String(200), nullable=True),
    Column("created_at", Float, nullable=False),
    comment="Every backtrack: where from, where to, and the steering message injected.",
    sqlite_autoincrement=True,
)

session_events = Table(
    "session_events",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("session_id", Integer, ForeignKey("sessions.id"), nullable=False),
    Column("checkpoint_id", Integer, nullable=True),
    Column("kind", String(32), nullable=False),
    Column("detail", Text, nullable=True),
    Column("created_at", Float, nullable=False),
    Index(None, "session_id", "kind"),
    comment="Decisions and notable events (folds, forks, recovery decisions) as JSON detail.",
    sqlite_autoincrement=True,
)


# ---------------------------------------------------------------- LangGraph checkpointer (0002)
# Ids that are UUIDs (LangGraph's checkpoint and task ids) are stored as their 16 bytes.
lg_threads = Table(
    "lg_threads",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("thread_id", String(255), nullable=False),
    Column("checkpoint_ns", String(255), nullable=False),
    Column("session_id", Integer, ForeignKey("sessions.id"), nullable=False, index=True),
    UniqueConstraint("thread_id", "checkpoint_ns"),
    comment="A LangGraph thread + namespace, mapped to the alpstore session holding it.",
    sqlite_autoincrement=True,
)

lg_runs = Table(
    "lg_runs",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("run_id", String(255), nullable=False, unique=True),
    comment="LangGraph run ids, interned (checkpoints refer to them by number).",
    sqlite_autoincrement=True,
)

lg_checkpoints = Table(
    "lg_checkpoints",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("thread_ref", Integer, ForeignKey("lg_threads.id"), nullable=False),
    Column("checkpoint_id", LargeBinary, nullable=False),
    Column("parent_checkpoint_id", LargeBinary, nullable=True),
    Column("alp_checkpoint_id", Integer, ForeignKey("checkpoints.id"), nullable=False, index=True),
    Column("run_ref", Integer, ForeignKey("lg_runs.id"), nullable=True, index=True),
    Column("codec", SmallInteger, nullable=False),
    Column("dict_id", Integer, ForeignKey("zstd_dicts.id"), nullable=True),
    Column("raw_size", Integer, nullable=False),
    Column("state", LargeBinary, nullable=False),
    UniqueConstraint("thread_ref", "checkpoint_id"),
    comment="A LangGraph checkpoint: its alpstore checkpoint (messages view), packed state.",
    sqlite_autoincrement=True,
)

lg_checkpoint_blobs = Table(
    "lg_checkpoint_blobs",
    metadata,
    Column("checkpoint_ref", Integer, ForeignKey("lg_checkpoints.id"), primary_key=True),
    Column("blob_id", Integer, primary_key=True, index=True),
    comment="The content-addressed channel values a LangGraph checkpoint refers to.",
    sqlite_with_rowid=False,
)

lg_writes = Table(
    "lg_writes",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("thread_ref", Integer, ForeignKey("lg_threads.id"), nullable=False),
    Column("checkpoint_id", LargeBinary, nullable=False),
    Column("task_id", LargeBinary, nullable=False),
    Column("codec", SmallInteger, nullable=False),
    Column("dict_id", Integer, ForeignKey("zstd_dicts.id"), nullable=True),
    Column("raw_size", Integer, nullable=False),
    Column("state", LargeBinary, nullable=False),
    UniqueConstraint("thread_ref", "checkpoint_id", "task_id"),
    comment="One task's pending writes on a LangGraph checkpoint (packed; blobs in items).",
    sqlite_autoincrement=True,
)

lg_write_items = Table(
    "lg_write_items",
    metadata,
    Column("write_id", Integer, ForeignKey("lg_writes.id"), primary_key=True),
    Column("position", Integer, primary_key=True),
    Column("blob_id", Integer, nullable=False, index=True),
    comment="The blobs (messages, large values) of a task's pending writes, in order.",
    sqlite_with_rowid=False,
)


# ---------------------------------------------------------------- a turn's steps in one row (0011)
lg_turns = Table(
    "lg_turns",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("thread_ref", Integer, ForeignKey("lg_threads.id"), nullable=False),
    # the id_bytes of its first and last step: a thread's turn rows hold disjoint ranges, and
    # no loose lg_checkpoints row of the thread has an id inside one
    Column("first_checkpoint_id", LargeBinary, nullable=False),
    Column("last_checkpoint_id", LargeBinary, nullable=False),
    Column("steps", Integer, nullable=False),
    # the steps' alpstore checkpoints in step order, their distinct lg_runs ids (no index)
    Column("alp_ids", _ARRAY, nullable=False),
    Column("run_refs", _ARRAY, nullable=False),
    Column("codec", SmallInteger, nullable=False),
    Column("dict_id", Integer, ForeignKey("zstd_dicts.id"), nullable=True),
    Column("raw_size", Integer, nullable=False),
    Column("doc", LargeBinary, nullable=False),
    # the blobs its states and pending writes name, ascending; NULL: none (0012, was
    # lg_turn_blobs rows: now a view over this column, for GC and verify)
    Column("blob_ids", _ARRAY, nullable=True),
    UniqueConstraint("thread_ref", "first_checkpoint_id"),
    comment="A LangGraph thread's closed turn (0011): its steps' states and their pending "
    "writes as one packed document.",
    sqlite_autoincrement=True,
)


def include_for(dialect: str) -> Callable[..., bool]:
    """An Alembic ``include_object`` hook for comparing the models with a ``dialect``
    database: it leaves out what the models create on another dialect only (``ddl_if``, e.g.
    the digest's unique constraint, PostgreSQL's, and its prefix index, SQLite's: 0008).
    """

    def include(obj: Any, name: str | None, type_: str, reflected: bool, other: Any) -> bool:
        if type_ == "table" and name in SQLITE_ONLY and dialect != "sqlite":
            return False
        cond = getattr(obj, "_ddl_if", None)
        return reflected or cond is None or cond.dialect in (None, dialect)

    return include
