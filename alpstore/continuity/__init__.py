"""Execution continuity: what an execution must not forget when its runtime compacts the transcript.
A feature: may import codec, errors, fileio and the shared rules; no archive, no store.

One checkpoint file per execution (an objective and four kinds of pin), its rendering for
reinjection, the raw compaction journal written by the runtime's hooks, and the deterministic
projection of the checkpoint into a thread's context. File-based by its spec, byte-compatible with
alp-code; it shares only :mod:`alpstore.codec` with the rest of alpstore.
"""

from __future__ import annotations

from alpstore.continuity.checkpoint import Checkpoint, Pin, checkpoint_digest
from alpstore.continuity.paths import ExecutionPaths, check_execution_id, check_thread_id

__all__ = [
    "Checkpoint",
    "ExecutionPaths",
    "Pin",
    "check_execution_id",
    "check_thread_id",
    "checkpoint_digest",
]
