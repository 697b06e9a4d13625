"""``auto_resume_latest`` (CK-9): pick the newest version 2 file whose manifest hash matches.

Each file's header is read streamed (its messages are parsed one at a time and dropped), so
choosing among large files holds one message in memory, not a file; the chosen file is then
imported streamed (:func:`alpstore.portable.importing.import_file`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alpstore.errors import CheckpointFileError, NotFoundError
from alpstore.portable.files import list_checkpoint_files


@dataclass(frozen=True)
class Candidate:
    """The file auto-resume chose, with its header (the document without its messages)."""

    path: Path
    header: dict[str, Any]


@dataclass
class Selection:
    """What auto-resume found in a directory.

    Fields:
        chosen: the newest matching version 2 file, or None.
        considered: files examined.
        skipped: ``(file name, reason)`` for files that could not be used (invalid, version 1,
            another manifest).
    """

    chosen: Candidate | None = None
    considered: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)


def select_latest(directory: Path, content_hash: str) -> Selection:
    """The newest (by modification time, then turn, then name) valid version 2 file in
    ``directory`` whose embedded manifest hash equals ``content_hash``.
    """
    out = Selection()
    try:
        files = list_checkpoint_files(directory)
    except NotFoundError:
        return out
    from alpstore.portable.reading import read_header

    best: tuple[int, int, str] | None = None
    for path in files:
        out.considered += 1
        try:
            doc = read_header(path)
        except (CheckpointFileError, NotFoundError) as exc:
            out.skipped.append((path.name, exc.message))
            continue
        if doc["version"] != 2:
            out.skipped.append((path.name, "version 1 (no embedded manifest)"))
            continue
        if doc["manifest"]["content_hash"] != content_hash:
            out.skipped.append((path.name, "another manifest"))
            continue
        key = (path.stat().st_mtime_ns, int(doc["turn"]), path.name)
        if best is None or key > best:
            best = key
            out.chosen = Candidate(path, doc)
    return out
