"""Rows of the ``sessions`` and ``checkpoints`` tables as plain SQL reads them.

Named tuples with the columns' names, so a raw row reads like an SQLAlchemy one (``row.turn``).
"""

from __future__ import annotations

from typing import Any, NamedTuple


class SessionRow(NamedTuple):
    """A ``sessions`` row (:data:`SESSION_COLUMNS` order)."""

    id: int
    uuid: str
    name: str | None
    parent_id: int | None
    source_checkpoint_id: int | None
    root_id: int | None
    origin: str | None
    manifest_blob_id: int | None
    status: str
    head_segment_id: int | None
    head_length: int
    turn: int
    backtrack_count: int
    retention_mode: str
    retention_n: int
    created_at: float
    updated_at: float


class CheckpointRow(NamedTuple):
    """A ``checkpoints`` row (:data:`CHECKPOINT_COLUMNS` order)."""

    id: int
    session_id: int
    seq: int
    turn: int
    segment_id: int | None
    length: int
    kernel_blob_id: int | None
    wm_blob_id: int | None
    label: str | None
    trigger: str | None
    abandoned: Any
    created_at: float
    covering_digest: Any


SESSION_COLUMNS = ", ".join(SessionRow._fields)
CHECKPOINT_COLUMNS = ", ".join(CheckpointRow._fields)
