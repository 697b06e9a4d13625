"""What a session handle needs of its store (``SessionHost``): a protocol the store
(``alpstore.core``) satisfies, so the session handles stay a layer below it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from alpstore.codec import Digest
from alpstore.sessions.records import CheckpointInfo, Entry, SessionInfo

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from alpstore.archive.sql import SqlArchive
    from alpstore.db.database import Database
    from alpstore.views import View, ViewStore


class SessionHost(Protocol):
    """What a session handle needs of the store it belongs to: a structural type that the
    store (``alpstore.core``) satisfies without this package importing it, so the session
    handles stay a layer below the store.
    """

    db: Database
    root: Path
    archive: SqlArchive
    views: ViewStore

    def emit(self, kind: str, **fields: Any) -> None:
        """Append an event to the run root's event log (held until a write commits)."""

    def emit_checkpoint(self, ck: CheckpointInfo) -> None:
        """Append the ``checkpoint`` event of a committed checkpoint."""

    def session_info(self, session_id: int, *, conn: Connection | None = None) -> SessionInfo:
        """The session's row as a :class:`SessionInfo` (``conn``: in that transaction)."""

    def session_manifest(self, session_id: int) -> Any | None:
        """The manifest embedded in a session, or None."""

    def session_events(self, session_id: int) -> list[dict[str, Any]]:
        """The session's events, oldest first."""

    def list_checkpoints(
        self, session_id: int, *, include_abandoned: bool = False, conn: Connection | None = None
    ) -> list[CheckpointInfo]:
        """The session's checkpoints in ``seq`` order."""

    def recent_checkpoints(
        self, conn: Connection, info: SessionInfo, limit: int
    ) -> list[CheckpointInfo]:
        """The session's newest ``limit`` retained checkpoints, newest first."""

    def count_retained(self, conn: Connection, session_id: int) -> int:
        """How many checkpoints of the session are retained (not abandoned)."""

    def checkpoint_in(
        self, conn: Connection, checkpoint_id: int, info: SessionInfo
    ) -> CheckpointInfo:
        """One checkpoint of ``info``'s session, re-read in ``conn``."""

    def hydrate_view(self, view: View, *, verify: bool = False) -> list[Entry]:
        """The entries of a view, in order."""

    def entries_of(self, raws: list[tuple[Digest, int, bytes]]) -> list[Entry]:
        """Entries from ``(digest, kind, canonical JSON bytes)`` triples."""

    def digests_for_ids(self, conn: Connection, ids: Sequence[int]) -> list[Digest]:
        """The digests of blob ids, in the order given."""

    def insert_checkpoint(
        self,
        conn: Connection,
        info: SessionInfo,
        view: View,
        *,
        turn: int,
        label: str | None,
        trigger: str | None,
        kernel_id: int | None,
        wm_id: int | None,
        cover: int | None = None,
    ) -> CheckpointInfo:
        """Insert a checkpoint row for ``info`` inside the caller's transaction."""

    def insert_checkpoint_later(
        self,
        conn: Connection,
        info: SessionInfo,
        view: View,
        *,
        turn: int,
        label: str | None,
        trigger: str | None,
        kernel_digest: bytes | None,
        wm_digest: bytes | None,
        cover: int,
        wrap: Callable[[str, list[Any]], tuple[str, list[Any]]] | None = None,
    ) -> Callable[[], CheckpointInfo]:
        """PostgreSQL: the checkpoint row rides the transaction's next round trip; what is
        returned gives the checkpoint once the transaction ended.
        """

    def insert_turn_checkpoints(
        self,
        conn: Connection,
        info: SessionInfo,
        turns: Sequence[tuple[View, int, int]],
        *,
        trigger: str | None,
    ) -> list[CheckpointInfo]:
        """Insert a default-labelled checkpoint per ``(view, turn, cover)``, in order."""

    def abandon_after(self, conn: Connection, session_id: int, seq: int) -> int:
        """Mark the session's checkpoints after ``seq`` abandoned; how many were."""

    def apply_retention(self, conn: Connection, info: SessionInfo) -> list[int]:
        """Prune the session's checkpoints past its retention; the pruned ids."""

    def fork_checkpoint(
        self, checkpoint: CheckpointInfo, *, session_id: str | None = None, name: str | None = None
    ) -> object:
        """A new session whose head is ``checkpoint``'s list: the store's ``Session`` handle
        (typed ``object`` here, so this protocol imports no handle: the caller checks it).
        """

    def record_event(
        self,
        conn: Connection,
        session_id: int,
        kind: str,
        checkpoint_id: int | None,
        detail: dict[str, Any],
    ) -> None:
        """Insert a row into ``session_events`` inside the caller's transaction."""
