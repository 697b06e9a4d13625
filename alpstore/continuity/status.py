"""``context status``: one execution's continuity at a glance, as a JSON-ready report."""

from __future__ import annotations

from typing import Any

from alpstore.continuity.checkpoint import (
    MAX_CHECKPOINT_BYTES,
    MAX_PIN_BYTES,
    SECTIONS,
    UNBOUND_POLICY,
    Checkpoint,
    decode_checkpoint,
    digest_matches,
    parse_checkpoint_document,
    read_checkpoint_bytes,
    verify_checkpoint,
)
from alpstore.continuity.journal import reduce, replay, rotate_if_needed
from alpstore.continuity.paths import ExecutionPaths
from alpstore.continuity.render import MAX_RENDER_BYTES, render
from alpstore.errors import ValidationFinding


def _inspect_checkpoint(paths: ExecutionPaths) -> tuple[Checkpoint | None, str, str | None, int]:
    """The checkpoint (even when its digest is off), its state, the problem and its size."""
    data = read_checkpoint_bytes(paths)
    if data is None:
        return None, "missing", None, 0
    try:
        return verify_checkpoint(data, paths.execution_id), "ok", None, len(data)
    except ValidationFinding as finding:
        problem = finding.message
    where = f"{paths.execution_id}: checkpoint.json"
    try:
        checkpoint = decode_checkpoint(parse_checkpoint_document(data, where), where)
    except ValidationFinding:
        return None, "invalid", problem, len(data)
    doc = parse_checkpoint_document(data, where)
    state = "invalid" if digest_matches(doc) else "mismatch"
    return checkpoint, state, problem, len(data)


def status(paths: ExecutionPaths) -> dict[str, Any]:
    """Objective, pin counts, sizes against each limit, digest state and the journal's figures.

    Rotates the journal first when it has reached 1 MiB (JR-2).

    Raises:
        StorageError: a file exists but cannot be read, or the rotation failed.
    """
    rotated = rotate_if_needed(paths)
    checkpoint, state, problem, size = _inspect_checkpoint(paths)
    report: dict[str, Any] = {"executionId": paths.execution_id, "digest": state}
    if problem is not None:
        report["problem"] = problem
    if checkpoint is not None:
        rendering = render(checkpoint)
        report.update(
            objective=checkpoint.objective,
            policyHash=checkpoint.policy_hash if checkpoint.policy_hash != UNBOUND_POLICY else None,
            pins={name: len(checkpoint.pins(name)) for name in SECTIONS},
            pinIds={name: [p.id for p in checkpoint.pins(name)] for name in SECTIONS},
            sizes={
                "checkpointBytes": size,
                "checkpointLimit": MAX_CHECKPOINT_BYTES,
                "largestPinBytes": max(
                    (len(p.text.encode("utf-8")) for _, p in checkpoint.all_pins()), default=0
                ),
                "pinLimit": MAX_PIN_BYTES,
                "renderBytes": rendering.full_bytes,
                "renderLimit": MAX_RENDER_BYTES,
            },
        )
    journal = replay(paths)
    reduction = reduce(journal.events)
    report["journal"] = {
        "generation": reduction.generation,
        "pending": reduction.pending.to_json() if reduction.pending else None,
        "lastCompleted": reduction.last_completed.to_json() if reduction.last_completed else None,
        "droppedLines": journal.dropped_lines,
        "duplicates": reduction.duplicates,
        "rotated": rotated,
    }
    return report
