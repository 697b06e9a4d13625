"""The parts a store is made of (database, archive, views, event log) and its event emitting."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from alpstore.archive.sql import SqlArchive
from alpstore.events import EventLog
from alpstore.views import ViewStore

if TYPE_CHECKING:
    from alpstore.db.engine import Database
    from alpstore.sessions import CheckpointInfo


class StoreParts:
    """An open archive's parts: ``db``, ``archive`` (blobs), ``views``, ``events``, ``root``."""

    def __init__(self, db: Database, root: Path) -> None:
        self.db = db
        self.root = root.absolute()  # the event log and policy folders stay put on a chdir
        root = self.root
        self.archive = SqlArchive(db)
        self.views = ViewStore()
        db.on_rollback(self.views.forget)  # segment ids of a failed write may be reused
        self.events = EventLog(root)
        db.on_write_end(self.events.settle)

    def close(self) -> None:
        """Close the database and the event log (a background dictionary training of this
        store finishes first).
        """
        self.archive.close()
        self.events.close()
        self.db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def emit(self, kind: str, **fields: Any) -> None:
        """Append an event to ``traces/events.jsonl``; inside a write transaction, once it
        commits (a rolled-back import, Ctrl-C, leaves no event for what never happened).
        """
        line = self.events.line(kind, **fields)
        if self.db.in_write():
            self.events.hold(line)  # written by events.settle when the transaction ends
        else:
            self.events.write(line)

    def emit_checkpoint(self, ck: CheckpointInfo) -> None:
        """Append the ``checkpoint`` event of a committed checkpoint."""
        self.emit(
            "checkpoint",
            session=ck.session,
            checkpoint=ck.id,
            turn=ck.turn,
            label=ck.label,
            trigger=ck.trigger,
            view=ck.archive_view_id,
        )
