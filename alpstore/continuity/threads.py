"""Thread context: the deterministic projection of a checkpoint when the root settles (TH-1, CT-5).

``settle`` writes ``$ALP_HOME/threads/<id>/context/<rev>.json``, ``rev`` one more than the last.
The projection reads only the verified checkpoint — never a transcript — so the same checkpoint
always gives the same bytes. The next root of the thread is seeded from the latest projection.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alpstore.continuity.checkpoint import (
    SECTIONS,
    Checkpoint,
    Pin,
    checkpoint_digest,
    decode_pin,
    read_checkpoint,
)
from alpstore.continuity.files import publish_new
from alpstore.continuity.paths import ExecutionPaths, check_thread_id, thread_context_dir
from alpstore.continuity.pins import clean_objective
from alpstore.errors import ContinuityError

PROJECTION_VERSION = 1
MAX_PROJECTION_BYTES = 256 * 1024
"""A projection is a checkpoint's pins plus a few fields; anything larger is not one of ours."""
_REV_NAME = re.compile(r"([1-9][0-9]*)\.json")


def project(checkpoint: Checkpoint, thread_id: str) -> bytes:
    """The projection's bytes: a pure function of the checkpoint and the thread id."""
    body = checkpoint.body()
    doc: dict[str, Any] = {
        "version": PROJECTION_VERSION,
        "threadId": thread_id,
        "executionId": checkpoint.execution_id,
        "checkpointSha256": checkpoint_digest(body),
        "objective": clean_objective(checkpoint.objective),
    }
    for name in SECTIONS:
        doc[name] = body[name]
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def revisions(home: Path, thread_id: str) -> list[int]:
    """The settled revisions of a thread, ascending."""
    folder = thread_context_dir(home, thread_id)
    try:
        names = [entry.name for entry in folder.iterdir()]
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for name in names if (m := _REV_NAME.fullmatch(name)))


@dataclass(frozen=True)
class Settled:
    """Where a settle wrote the projection."""

    thread_id: str
    rev: int
    path: Path


def settle(home: Path, execution_id: str, thread_id: str) -> Settled:
    """Project the execution's verified checkpoint into the thread's next revision.

    Two settles racing on one thread never overwrite each other: each takes the next free rev.

    Raises:
        ContinuityError: bad ids, or the execution has no checkpoint.
        ValidationFinding: the checkpoint does not verify (nothing is written).
    """
    thread_id = check_thread_id(thread_id)
    paths = ExecutionPaths.of(home, execution_id)
    checkpoint = read_checkpoint(paths)
    if checkpoint is None:
        raise ContinuityError(f"{execution_id} has no checkpoint to settle")
    data = project(checkpoint, thread_id)
    folder = thread_context_dir(home, thread_id)
    rev = (revisions(home, thread_id) or [0])[-1] + 1
    while not publish_new(folder / f"{rev}.json", data):
        rev += 1
    return Settled(thread_id, rev, folder / f"{rev}.json")


def latest_pins(home: Path, thread_id: str) -> dict[str, tuple[Pin, ...]]:
    """The pins of the thread's latest projection (empty when it has none), for seeding.

    Raises:
        ContinuityError: the latest projection is unreadable or not a projection.
    """
    revs = revisions(home, thread_id)
    if not revs:
        return {name: () for name in SECTIONS}
    path = thread_context_dir(home, thread_id) / f"{revs[-1]}.json"
    where = f"thread {thread_id} rev {revs[-1]}"

    def fail(at: str, what: str) -> ContinuityError:
        return ContinuityError(f"{where}: {at}: {what}", hint=f"inspect {path}")

    try:
        data = path.read_bytes()
        if len(data) > MAX_PROJECTION_BYTES:
            raise fail("$", "too large to be a projection")
        doc = json.loads(data.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise fail("$", f"unreadable ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("version") != PROJECTION_VERSION:
        raise fail("$.version", f"expected a version {PROJECTION_VERSION} projection")
    sections: dict[str, tuple[Pin, ...]] = {}
    for name in SECTIONS:
        items = doc.get(name)
        if not isinstance(items, list):
            raise fail(f"$.{name}", "not a list")
        sections[name] = tuple(
            decode_pin(item, f"$.{name}[{i}]", fail) for i, item in enumerate(items)
        )
    return sections
