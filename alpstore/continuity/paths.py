"""Where continuity lives under ``ALP_HOME``: one folder per execution, one per thread."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from alpstore.errors import ContinuityError

EXECUTION_ID_PATTERN = re.compile(r"exec_[a-zA-Z0-9_-]+")
"""alp-code's ``^exec_[a-zA-Z0-9_-]+$`` (matched whole, so a trailing newline is refused)."""

THREAD_ID_PATTERN = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}")
"""A thread id is one safe path component: no separators, no leading dot."""


def check_execution_id(value: str) -> str:
    """Return ``value`` if it is a valid execution id.

    Raises:
        ContinuityError: it does not match ``^exec_[a-zA-Z0-9_-]+$``.
    """
    if not EXECUTION_ID_PATTERN.fullmatch(value):
        raise ContinuityError(
            f"execution id {value!r} is not valid",
            hint="an execution id matches ^exec_[a-zA-Z0-9_-]+$ (e.g. exec_abc123)",
        )
    return value


def check_thread_id(value: str) -> str:
    """Return ``value`` if it is a usable thread id.

    Raises:
        ContinuityError: it is empty, too long, or not a single safe path component.
    """
    if not THREAD_ID_PATTERN.fullmatch(value):
        raise ContinuityError(
            f"thread id {value!r} is not valid",
            hint="use letters, digits, '_', '-' and '.', starting with a letter or digit",
        )
    return value


@dataclass(frozen=True)
class ExecutionPaths:
    """The files of one execution's ``context/`` folder.

    Attributes:
        home: the ALP home folder (``$ALP_HOME``, by default ``~/.alp``).
        execution_id: the validated execution id.
    """

    home: Path
    execution_id: str

    @classmethod
    def of(cls, home: Path, execution_id: str) -> ExecutionPaths:
        """Paths of ``execution_id`` under ``home``.

        Raises:
            ContinuityError: the execution id is not valid.
        """
        return cls(home, check_execution_id(execution_id))

    @property
    def context_dir(self) -> Path:
        """``$ALP_HOME/executions/<id>/context``."""
        return self.home / "executions" / self.execution_id / "context"

    @property
    def checkpoint(self) -> Path:
        """The continuity checkpoint, ``checkpoint.json``."""
        return self.context_dir / "checkpoint.json"

    @property
    def continuity_md(self) -> Path:
        """The rendered injection, ``continuity.md``."""
        return self.context_dir / "continuity.md"

    @property
    def journal(self) -> Path:
        """The current compaction journal, ``compact-events.jsonl``."""
        return self.context_dir / "compact-events.jsonl"

    @property
    def journal_rotated(self) -> Path:
        """The previous journal generation, ``compact-events.jsonl.1``."""
        return self.context_dir / "compact-events.jsonl.1"

    @property
    def lock(self) -> Path:
        """Advisory lock serialising checkpoint writers and journal rotation."""
        return self.context_dir / ".lock"


def thread_context_dir(home: Path, thread_id: str) -> Path:
    """``$ALP_HOME/threads/<id>/context``, where settled projections are kept as ``<rev>.json``.

    Raises:
        ContinuityError: the thread id is not valid.
    """
    return home / "threads" / check_thread_id(thread_id) / "context"
