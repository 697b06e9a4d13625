"""Checkpoint stores (CK-5): memory, disk and hybrid behind one interface.

- memory: process-local; a new process (``reopen()``) sees nothing.
- disk: ``<session_id>-<label>.json[.zst]`` files in a directory; a new process loads them.
- hybrid: both — reads come from the in-process copy, ``load_for_resume`` reads the disk copy.

Retention (CK-8) prunes only documents whose ``lineage.session_id`` is the given session; a file
whose owner cannot be proved (version 1, unreadable) is never pruned.
"""

from __future__ import annotations

import builtins
import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from alpstore.errors import CheckpointFileError, NotFoundError
from alpstore.policy.model import Retention, StorageKind
from alpstore.portable.files import (
    check_for_secrets,
    checkpoint_file_name,
    contained_path,
    list_checkpoint_files,
    load_checkpoint_file,
    validate_document,
    write_checkpoint_file,
)


@dataclass(frozen=True)
class StoredCheckpoint:
    """One stored document's name, owner and ordering key.

    Fields:
        name: the file name (also the key in memory).
        session_id: ``lineage.session_id``, or None when unknown (version 1).
        turn: the document's turn (0 when absent).
        order: a monotonically increasing write order (memory) or mtime in ns (disk).
    """

    name: str
    session_id: str | None
    turn: int
    order: int


def document_session(doc: dict[str, Any]) -> str | None:
    """The session a document belongs to (version 2 ``lineage.session_id``)."""
    lineage = doc.get("lineage")
    if isinstance(lineage, dict) and isinstance(lineage.get("session_id"), str):
        return str(lineage["session_id"])
    return None


def document_name(doc: dict[str, Any], *, compress: bool = False) -> str:
    """The file name a document is stored under: ``<session_id>-<label>.json``.

    Raises:
        CheckpointFileError: the document has no session id (version 1) or an unsafe name part.
    """
    session = document_session(doc)
    if session is None:
        raise CheckpointFileError("only version 2 documents (with a session id) can be stored")
    label = doc.get("label") or f"turn-{int(doc.get('turn', 0)):04d}"
    return checkpoint_file_name(session, str(label), compress=compress)


def _prune_plan(
    entries: list[StoredCheckpoint], session_id: str, retention: Retention
) -> list[str]:
    keep = retention.keep()
    if keep is None:
        return []
    mine = [e for e in entries if e.session_id == session_id]
    mine.sort(key=lambda e: (e.order, e.turn, e.name))
    return [e.name for e in mine[: max(len(mine) - keep, 0)]]


class CheckpointStore(Protocol):
    """Where checkpoint documents live; every store passes the same contract tests."""

    kind: StorageKind

    def put(self, doc: dict[str, Any]) -> str:
        """Scan, validate and store a version 2 document; return its name (replaces same name).

        Raises:
            SecretError, CheckpointFileError, StorageError: nothing is stored.
        """
        ...

    def get(self, name: str) -> dict[str, Any]:
        """The document stored under ``name``.

        Raises:
            NotFoundError: no such document.
        """
        ...

    def list(self, session_id: str | None = None) -> builtins.list[StoredCheckpoint]:
        """Stored documents (of one session when given), oldest first."""
        ...

    def delete(self, name: str) -> None:
        """Remove one document (NotFoundError when absent)."""
        ...

    def prune(self, session_id: str, retention: Retention) -> builtins.list[str]:
        """Apply retention to ``session_id``'s documents only; return the names removed."""
        ...

    def load_for_resume(self, name: str) -> dict[str, Any]:
        """What a resume loads (the durable copy where there is one)."""
        ...

    def reopen(self) -> CheckpointStore:
        """The same store as a new process would see it."""
        ...


class _PlannedPrune:
    """Retention and resume for a store whose listing and deletes are its own."""

    def prune(self: CheckpointStore, session_id: str, retention: Retention) -> builtins.list[str]:
        """See :class:`CheckpointStore`."""
        doomed = _prune_plan(self.list(), session_id, retention)
        for name in doomed:
            self.delete(name)
        return doomed

    def load_for_resume(self: CheckpointStore, name: str) -> dict[str, Any]:
        """See :class:`CheckpointStore`."""
        return self.get(name)


class MemoryCheckpointStore(_PlannedPrune):
    """Process-local documents: fast, gone with the process."""

    kind: StorageKind = "memory"

    def __init__(self) -> None:
        self._docs: dict[str, tuple[StoredCheckpoint, dict[str, Any]]] = {}
        self._clock = 0

    def put(self, doc: dict[str, Any]) -> str:
        """See :class:`CheckpointStore`."""
        name = document_name(doc)
        check_for_secrets(doc, what=name)
        validate_document(doc, where=name)
        self._clock += 1
        meta = StoredCheckpoint(name, document_session(doc), int(doc.get("turn", 0)), self._clock)
        self._docs[name] = (meta, copy.deepcopy(doc))
        return name

    def get(self, name: str) -> dict[str, Any]:
        """See :class:`CheckpointStore`."""
        if name not in self._docs:
            raise NotFoundError(f"no checkpoint {name!r} in memory")
        return copy.deepcopy(self._docs[name][1])

    def list(self, session_id: str | None = None) -> builtins.list[StoredCheckpoint]:
        """See :class:`CheckpointStore`."""
        metas = [m for m, _ in self._docs.values()]
        if session_id is not None:
            metas = [m for m in metas if m.session_id == session_id]
        return sorted(metas, key=lambda m: (m.order, m.name))

    def delete(self, name: str) -> None:
        """See :class:`CheckpointStore`."""
        if self._docs.pop(name, None) is None:
            raise NotFoundError(f"no checkpoint {name!r} in memory")

    def reopen(self) -> MemoryCheckpointStore:
        """A new process has an empty memory."""
        return MemoryCheckpointStore()


class DiskCheckpointStore(_PlannedPrune):
    """JSON files in a directory (``.json``, or ``.json.zst`` with ``compress``)."""

    kind: StorageKind = "disk"

    def __init__(self, directory: Path, *, compress: bool = False) -> None:
        self.directory = directory
        self.compress = compress

    def _path(self, name: str) -> Path:
        return contained_path(self.directory, name)

    def put(self, doc: dict[str, Any]) -> str:
        """See :class:`CheckpointStore`."""
        name = document_name(doc, compress=self.compress)
        write_checkpoint_file(doc, self._path(name), compress=self.compress)
        return name

    def get(self, name: str) -> dict[str, Any]:
        """See :class:`CheckpointStore`."""
        return load_checkpoint_file(self._path(name))

    def list(self, session_id: str | None = None) -> builtins.list[StoredCheckpoint]:
        """See :class:`CheckpointStore`."""
        if not self.directory.is_dir():
            return []
        from alpstore.portable.reading import read_header

        out = []
        for path in list_checkpoint_files(self.directory):
            try:
                doc = read_header(path, validate=False)  # streamed: its messages are dropped
            except (CheckpointFileError, NotFoundError):
                owner, turn = None, 0
            else:
                owner = document_session(doc)
                turn = doc.get("turn", 0) if isinstance(doc.get("turn"), int) else 0
            if session_id is not None and owner != session_id:
                continue
            out.append(StoredCheckpoint(path.name, owner, turn, path.stat().st_mtime_ns))
        return sorted(out, key=lambda m: (m.order, m.turn, m.name))

    def delete(self, name: str) -> None:
        """See :class:`CheckpointStore`."""
        path = self._path(name)
        try:
            path.unlink()
        except FileNotFoundError:
            raise NotFoundError(f"{path}: no such checkpoint file") from None

    def reopen(self) -> DiskCheckpointStore:
        """Files survive the process."""
        return DiskCheckpointStore(self.directory, compress=self.compress)


class HybridCheckpointStore:
    """An in-process copy for speed plus the disk copy a resume loads."""

    kind: StorageKind = "hybrid"

    def __init__(self, directory: Path, *, compress: bool = False) -> None:
        self.memory = MemoryCheckpointStore()
        self.disk = DiskCheckpointStore(directory, compress=compress)

    def put(self, doc: dict[str, Any]) -> str:
        """See :class:`CheckpointStore`: the disk write happens first (it is what resumes)."""
        name = self.disk.put(doc)
        self.memory._docs[name] = (
            StoredCheckpoint(name, document_session(doc), int(doc.get("turn", 0)), 0),
            copy.deepcopy(doc),
        )
        self.memory._clock += 1
        return name

    def get(self, name: str) -> dict[str, Any]:
        """See :class:`CheckpointStore`: memory first, then disk."""
        try:
            return self.memory.get(name)
        except NotFoundError:
            return self.disk.get(name)

    def list(self, session_id: str | None = None) -> builtins.list[StoredCheckpoint]:
        """See :class:`CheckpointStore` (the disk listing is authoritative)."""
        return self.disk.list(session_id)

    def delete(self, name: str) -> None:
        """See :class:`CheckpointStore`."""
        self.disk.delete(name)
        self.memory._docs.pop(name, None)

    def prune(self, session_id: str, retention: Retention) -> builtins.list[str]:
        """See :class:`CheckpointStore`."""
        doomed = self.disk.prune(session_id, retention)
        for name in doomed:
            self.memory._docs.pop(name, None)
        return doomed

    def load_for_resume(self, name: str) -> dict[str, Any]:
        """See :class:`CheckpointStore`: always the disk copy."""
        return self.disk.get(name)

    def reopen(self) -> HybridCheckpointStore:
        """A new process starts with an empty memory over the same files."""
        return HybridCheckpointStore(self.disk.directory, compress=self.disk.compress)


def open_checkpoint_store(
    kind: StorageKind, directory: Path | None, *, compress: bool = False
) -> CheckpointStore:
    """A store of ``kind``; disk and hybrid need a directory.

    Raises:
        CheckpointFileError: disk or hybrid without a directory.
    """
    if kind == "memory":
        return MemoryCheckpointStore()
    if directory is None:
        raise CheckpointFileError(f"{kind} checkpoint storage needs a checkpoint directory")
    if kind == "disk":
        return DiskCheckpointStore(directory, compress=compress)
    return HybridCheckpointStore(directory, compress=compress)
