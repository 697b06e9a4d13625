"""The run root's event log: one JSON line per checkpoint, fold, backtrack, fork (AR-4)."""

from __future__ import annotations

import json
import os
import stat
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

EVENTS_FILE = Path("traces") / "events.jsonl"
HELD_IN_MEMORY = 64 * 1024
"""Bytes of event lines a write transaction holds in memory before they go to a temporary file."""


def after_torn_tail(fd: int, line: bytes) -> bytes:
    """``line`` as it must be appended to the file open at ``fd``: with a newline first when
    the file ends in half a line. A writer killed by SIGKILL can leave one even with
    one ``write`` a line (Linux stops a write at a page boundary once the signal is pending);
    without the newline the next line would be glued onto it and lost with it.
    """
    try:
        size = os.fstat(fd).st_size
        last = os.pread(fd, 1, size - 1) if size else b"\n"
    except OSError:  # not readable (a log we may only append to): appended as it is
        return line
    return line if last == b"\n" else b"\n" + line


def _stays_in(path: Path, root: Path) -> bool:
    """True when ``path`` stays under ``root`` with every symlink followed."""
    real_root = os.path.realpath(root)
    return os.path.commonpath([real_root, os.path.realpath(path)]) == real_root


_ENCODER = json.JSONEncoder(ensure_ascii=False, sort_keys=True, default=str)
"""An event line's encoder (``json.dumps`` with these options makes one per call)."""


class EventLog:
    """Appends events to ``<run_root>/traces/events.jsonl`` (opened lazily, one write a line)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / EVENTS_FILE
        self._fd: int | None = None
        self._held = threading.local()

    def emit(self, kind: str, **fields: Any) -> None:
        """Append one event line. A failure to log never fails the operation it describes."""
        self.write(self.line(kind, **fields))

    @staticmethod
    def line(kind: str, **fields: Any) -> bytes:
        """The event's line, stamped now (:meth:`write` appends it, maybe later)."""
        text = _ENCODER.encode({"at": time.time(), "event": kind, **fields})
        return (text + "\n").encode("utf-8")

    def write(self, line: bytes) -> None:
        """Append a line made by :meth:`line` (or whole lines joined); a failure to log is
        ignored (see :meth:`emit`).
        """
        try:
            if self._fd is None:
                folder = self.path.parent
                if not _stays_in(folder, self.root):
                    return  # traces/ is a symlink out of the run root: nothing written there
                folder.mkdir(parents=True, exist_ok=True)
                # a symlinked log is not followed, and a FIFO planted there does not block the
                # open (O_NONBLOCK); read too, for the last byte (``after_torn_tail``)
                flags = os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
                try:
                    fd = os.open(self.path, flags | os.O_RDWR, 0o644)
                except PermissionError:
                    fd = os.open(self.path, flags | os.O_WRONLY, 0o644)
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    os.close(fd)  # a FIFO or a device: a write could hold the operation
                    return
                self._fd = fd
            os.write(self._fd, after_torn_tail(self._fd, line))
        except OSError:
            self.close()

    def hold(self, line: bytes) -> None:
        """Keep a line until this thread's write transaction ends (:meth:`settle`): in memory,
        then in an unnamed temporary file (an import of thousands of turns holds no list).
        """
        try:
            held: IO[bytes] | None = getattr(self._held, "file", None)
            if held is None:  # closed by settle
                held = self._held.file = tempfile.SpooledTemporaryFile(HELD_IN_MEMORY)  # noqa: SIM115
            held.write(line)
        except OSError:  # as in write: never fails the operation it describes
            pass

    def settle(self, committed: bool) -> None:
        """The transaction ended: append the lines it held when it committed, else drop them.
        They are appended whole lines at a time, up to :data:`HELD_IN_MEMORY` bytes a write
        (each write ends at a line's end, as :meth:`emit`'s one line: a torn tail is mended by
        the next write, ``after_torn_tail``); an import's 1,000 checkpoint events took 3,000
        system calls one line a write.
        """
        held: IO[bytes] | None = getattr(self._held, "file", None)
        if held is None:
            return
        self._held.file = None
        try:
            with held:
                if committed:
                    held.seek(0)
                    lines: list[bytes] = []
                    size = 0
                    for line in held:
                        lines.append(line)
                        size += len(line)
                        if size >= HELD_IN_MEMORY:
                            self.write(b"".join(lines))
                            lines, size = [], 0
                    if lines:
                        self.write(b"".join(lines))
        except OSError:
            pass

    def close(self) -> None:
        """Close the file."""
        if self._fd is not None:
            try:
                os.close(self._fd)
            finally:
                self._fd = None
