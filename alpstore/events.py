"""The run root's event log: one JSON line per checkpoint, fold, backtrack, fork (AR-4)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

EVENTS_FILE = Path("traces") / "events.jsonl"


class EventLog:
    """Appends events to ``<run_root>/traces/events.jsonl`` (opened lazily, one write a line)."""

    def __init__(self, root: Path) -> None:
        self.path = root / EVENTS_FILE
        self._fd: int | None = None

    def emit(self, kind: str, **fields: Any) -> None:
        """Append one event line. A failure to log never fails the operation it describes."""
        line = (
            json.dumps(
                {"at": time.time(), "event": kind, **fields},
                ensure_ascii=False,
                sort_keys=True,
                default=str,
            )
            + "\n"
        )
        try:
            if self._fd is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.write(self._fd, line.encode("utf-8"))
        except OSError:
            self.close()

    def close(self) -> None:
        """Close the file."""
        if self._fd is not None:
            try:
                os.close(self._fd)
            finally:
                self._fd = None
