"""``Store``: the facade the CLI and users call — an archive, its views and its sessions.

What a store is made of lives in :mod:`alpstore.core`; this class adds what needs the features
above it (a running agent's :class:`~alpstore.live.LiveSession`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alpstore.archive.reading import encode
from alpstore.core.content import checkpoint_deltas
from alpstore.core.reads import MAX_SQL_INTEGER
from alpstore.core.store import CoreStore

if TYPE_CHECKING:
    from alpstore.live import LiveSession


class Store(CoreStore):
    """An open archive: blobs, views and sessions, plus the run root's event log."""

    def open_session(
        self,
        session: str | None = None,
        *,
        manifest: Any | None = None,
        overlays: Sequence[str] = (),
        checkpoint_dir: Path | str | None = None,
        workspace_config: Path | str | None = None,
        name: str | None = None,
        cwd: Path | str | None = None,
    ) -> LiveSession:
        """A running agent's session: the policy it runs under plus its in-process context.

        With ``manifest`` (a mapping, or the path of a YAML/JSON file) a session is opened
        under that manifest's ``spec.checkpoint`` (overlays, workspace config and the CK-6
        directory applied; ``auto_resume_latest`` resumes the newest matching file) and the
        resolved policy is recorded with it. With ``session`` alone, an existing session is
        opened under the policy recorded with it (none: manual checkpoints only).

        Raises:
            PolicyError, SecretError, NotFoundError, UsageError: nothing is stored.
        """
        from alpstore.live import open_live_session

        return open_live_session(
            self,
            session,
            manifest=manifest,
            overlays=overlays,
            checkpoint_dir=Path(checkpoint_dir) if checkpoint_dir is not None else None,
            workspace_config=Path(workspace_config) if workspace_config is not None else None,
            name=name,
            cwd=Path(cwd) if cwd is not None else None,
        )


__all__ = ["MAX_SQL_INTEGER", "Store", "checkpoint_deltas", "encode"]
