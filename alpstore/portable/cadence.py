"""When a session writes a checkpoint (CK-4): a pure decision on each runtime event.

Events: ``turn_completed`` (a user turn finished; carries the turn number), the trigger events
``after_llm_call``, ``after_tool_call``, ``before_destructive_tool``, and ``manual``
(``--save-checkpoint``, control persist). The decision is the trigger name to record, or None.

- none: only manual.
- every_turn and in_memory: every completed turn, plus any listed trigger.
- on_event: the listed triggers; ``every_n_turns`` fires on turns divisible by ``every_n_turns``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from alpstore.errors import UsageError
from alpstore.fileio import inside_root
from alpstore.policy.model import CheckpointPolicy

Event = Literal[
    "turn_completed", "after_llm_call", "after_tool_call", "before_destructive_tool", "manual"
]
EVENTS: Final = (
    "turn_completed",
    "after_llm_call",
    "after_tool_call",
    "before_destructive_tool",
    "manual",
)


def decide(
    policy: CheckpointPolicy, event: str, *, turn: int = 0, previous_turn: int | None = None
) -> str | None:
    """The trigger to record for ``event`` under ``policy``, or None for no checkpoint.

    ``every_n_turns`` fires when a completed turn reaches a multiple of N; with
    ``previous_turn`` (the turn before the messages of this event) it fires only when the
    count crossed a new multiple, so a turn completed twice at the same count fires once.

    Raises:
        UsageError: an unknown event name.
    """
    if event not in EVENTS:
        raise UsageError(f"checkpoint event {event!r}: expected one of {', '.join(EVENTS)}")
    if event == "manual":
        return "manual"
    if policy.mode == "none":
        return None
    if event == "turn_completed":
        if policy.mode in ("every_turn", "in_memory"):
            return "every_turn"
        n = policy.every_n_turns
        if "every_n_turns" in policy.triggers and n is not None and turn > 0:
            crossed = turn // n > previous_turn // n if previous_turn is not None else turn % n == 0
            if crossed:
                return "every_n_turns"
        return None
    return event if event in policy.triggers else None


@dataclass(frozen=True)
class Plan:
    """What to do with a checkpoint the cadence asked for.

    Fields:
        trigger: the trigger recorded on the checkpoint.
        write_file: True when a self-contained document goes to the checkpoint store.
    """

    trigger: str
    write_file: bool


def plan(
    policy: CheckpointPolicy,
    event: str,
    *,
    turn: int = 0,
    previous_turn: int | None = None,
    portability: str | None = None,
) -> Plan | None:
    """The cadence decision plus where the checkpoint goes.

    A reference (shallow) checkpoint stays an archive row (AR-1); a self-contained one also
    goes to the policy's store. A manual save is always self-contained (AR-3).
    """
    trigger = decide(policy, event, turn=turn, previous_turn=previous_turn)
    if trigger is None:
        return None
    deep = (portability or policy.portability) == "self_contained" or trigger == "manual"
    return Plan(trigger, write_file=deep and (policy.storage is not None or trigger == "manual"))


TURN_TRIGGERS: Final = ("every_turn", "every_n_turns", "manual")
"""Triggers whose checkpoint file is named by its turn alone (one per turn)."""


def file_label(label: str, trigger: str | None, seq: int) -> str:
    """The label a cadence checkpoint's deep file carries: the checkpoint's own label for a
    turn checkpoint, ``<label>-<trigger>-<seq>`` for an event (several may share a turn).
    """
    if trigger is None or trigger in TURN_TRIGGERS:
        return label
    return f"{label}-{trigger}-{seq}"


def default_store_dir(root: Path) -> Path:
    """AR-4: ``<run_root>/checkpoints`` for explicit saves without a configured directory.

    Raises:
        StorageError: ``checkpoints`` (or the run root's path to it) is a symlink out of it.
    """
    return inside_root(root / "checkpoints", root)
