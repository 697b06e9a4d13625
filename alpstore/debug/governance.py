"""Error-recovery governance (BT-2): the ``backtrack_on_error`` binding.

The same engine error (by signature) is first retried. When one signature has occurred
``repeat_threshold`` times in a row, a backtrack boundary fires: the session rewinds ``steps``
checkpoints and a steering message is injected. Automatic backtracks count against
``max_backtracks_per_session`` (the session's persisted ``backtrack_count``); at the cap nothing
is rewound and the ``on_cap_reached`` action (hitl, terminate or stop_backtracking) is reported
for the caller to apply. Every decision is recorded as a ``recovery`` row in ``session_events``
(so it shows in SQL and in ``session log``/``debug log``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

import blake3

from alpstore.errors import PolicyError, SessionStateError

if TYPE_CHECKING:
    from alpstore.sessions import Session

PLUGIN = "backtrack_on_error"
EVENT_KIND = "recovery"
CAP_ACTIONS = ("hitl", "terminate", "stop_backtracking")
DEFAULT_REPEAT_THRESHOLD = 2
DEFAULT_MAX_BACKTRACKS = 3
DEFAULT_STEPS = 1
DEFAULT_ON_CAP: Final = "hitl"
DEFAULT_STEERING = (
    "The last attempts failed {count} times with the same error ({signature}). "
    "Avoid that approach and try a different one."
)
SIGNATURE_MAX = 200

Action = Literal["retry", "backtrack", "hitl", "terminate", "stop_backtracking", "propagate"]
CapAction = Literal["hitl", "terminate", "stop_backtracking"]


def _positive_int(value: Any, key: str) -> int:
    if type(value) is not int or value < 1:
        raise PolicyError(f"governance.backtrack.{key}: {value!r} is not an integer ≥ 1")
    return value


@dataclass(frozen=True)
class BacktrackOnError:
    """The binding's settings (mas-lab names and defaults)."""

    repeat_threshold: int = DEFAULT_REPEAT_THRESHOLD
    max_backtracks_per_session: int = DEFAULT_MAX_BACKTRACKS
    steps: int = DEFAULT_STEPS
    on_cap_reached: CapAction = DEFAULT_ON_CAP
    steering: str = DEFAULT_STEERING
    """Template of the injected steering text; ``{signature}`` and ``{count}`` are filled in."""

    def __post_init__(self) -> None:
        _positive_int(self.repeat_threshold, "repeat_threshold")
        _positive_int(self.max_backtracks_per_session, "max_backtracks_per_session")
        _positive_int(self.steps, "steps")
        if self.on_cap_reached not in CAP_ACTIONS:
            raise PolicyError(
                f"governance.backtrack.on_cap_reached: {self.on_cap_reached!r} is not one of "
                + ", ".join(CAP_ACTIONS)
            )

    @classmethod
    def from_mapping(cls, backtrack: Mapping[str, Any]) -> BacktrackOnError:
        """Parse the ``backtrack:`` block of the binding (unknown keys are errors).

        Raises:
            PolicyError: an unknown key or a bad value, named by its path.
        """
        known = {"repeat_threshold", "max_backtracks_per_session", "steps", "on_cap_reached"}
        for key in backtrack:
            if key not in known:
                raise PolicyError(f"governance.backtrack.{key}: unknown key")
        return cls(**dict(backtrack))

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any] | None) -> BacktrackOnError | None:
        """The binding in an Agent manifest's ``spec.governance`` list, or None.

        Raises:
            PolicyError: the binding is malformed.
        """
        spec = (manifest or {}).get("spec") or {}
        for item in spec.get("governance") or []:
            for binding in item.values() if isinstance(item, Mapping) else []:
                if isinstance(binding, Mapping) and binding.get("error_recovery_plugin") == PLUGIN:
                    block = binding.get("backtrack") or {}
                    if not isinstance(block, Mapping):
                        raise PolicyError("governance.backtrack: expected a mapping")
                    return cls.from_mapping(block)
        return None


_VOLATILE = re.compile(r"0x[0-9a-fA-F]+|\b[0-9a-fA-F]{8,}\b|\d+")


def error_signature(error: BaseException | str) -> str:
    """A stable signature of an engine error: its type and message with numbers, addresses and
    ids masked, so the "same" error matches across retries. At most 200 characters.
    """
    is_exc = isinstance(error, BaseException)
    text = f"{type(error).__name__}: {error}" if is_exc else str(error)
    text = " ".join(_VOLATILE.sub("#", text).split())
    if len(text) > SIGNATURE_MAX:
        tag = blake3.blake3(text.encode("utf-8")).hexdigest()[:8]
        text = text[: SIGNATURE_MAX - 10] + "… " + tag
    return text


@dataclass(frozen=True)
class Decision:
    """What the governor decided for one error, as recorded."""

    action: Action
    signature: str
    occurrence: int
    backtrack_count: int
    reason: str
    to_checkpoint: int | None = None
    to_turn: int | None = None
    steering: str | None = None

    @property
    def cap_reached(self) -> bool:
        """True when the caller must apply ``on_cap_reached``."""
        return self.action in CAP_ACTIONS

    def detail(self) -> dict[str, Any]:
        """The ``session_events.detail`` document."""
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class ErrorRecovery:
    """The ``backtrack_on_error`` governor for one session (state across errors in-process;
    the backtrack count and a stop are read back from the archive).
    """

    session: Session
    policy: BacktrackOnError = field(default_factory=BacktrackOnError)
    streak_signature: str | None = None
    streak: int = 0
    stopped: bool = False

    def __post_init__(self) -> None:
        for ev in self.session.store.session_events(self.session.id):
            if ev["kind"] == EVENT_KIND and ev["detail"].get("action") == "stop_backtracking":
                self.stopped = True

    def on_success(self) -> None:
        """A turn went through: the next error starts a new streak."""
        self.streak_signature, self.streak = None, 0

    def on_error(self, error: BaseException | str) -> Decision:
        """Decide (and record) what to do about an engine error.

        Returns ``retry`` below the threshold; ``backtrack`` when one was done; at the cap (or
        when the history is too short to rewind) the ``on_cap_reached`` action for the caller;
        ``propagate`` once backtracking was stopped.
        """
        sig = error_signature(error)
        if sig == self.streak_signature:
            self.streak += 1
        else:
            self.streak_signature, self.streak = sig, 1
        count = self.session.info().backtrack_count
        p = self.policy
        if self.stopped:
            decision = Decision("propagate", sig, self.streak, count, "backtracking was stopped")
        elif self.streak < p.repeat_threshold:
            decision = Decision(
                "retry",
                sig,
                self.streak,
                count,
                f"occurrence {self.streak} of {p.repeat_threshold} before a backtrack",
            )
        elif count >= p.max_backtracks_per_session:
            decision = self._cap(sig, count, f"cap of {p.max_backtracks_per_session} reached")
        else:
            decision = self._backtrack(sig, count)
        self.session.record_decision(EVENT_KIND, decision.detail(), decision.to_checkpoint)
        return decision

    def _cap(self, sig: str, count: int, reason: str) -> Decision:
        action = self.policy.on_cap_reached
        if action == "stop_backtracking":
            self.stopped = True
        return Decision(action, sig, self.streak, count, reason)

    def _backtrack(self, sig: str, count: int) -> Decision:
        p = self.policy
        text = p.steering.format(signature=sig, count=self.streak)
        try:
            bt = self.session.backtrack(p.steps, text, automatic=True, error_signature=sig)
        except SessionStateError as err:
            return self._cap(sig, count, f"cannot backtrack: {err.message}")
        occurrence = self.streak
        self.on_success()
        return Decision(
            "backtrack",
            sig,
            occurrence,
            count + 1,
            f"{sig!r} repeated {occurrence} times",
            bt.to_checkpoint.id,
            bt.to_checkpoint.turn,
            text,
        )


def apply_cap_action(session: Session, decision: Decision) -> None:
    """A default way to apply a cap decision: hitl pauses the session for a person (pause blocks
    the next turn until resume), terminate terminates it, stop_backtracking changes nothing.
    """
    if decision.action == "hitl":
        session.set_status("paused")
    elif decision.action == "terminate":
        session.set_status("terminated")
