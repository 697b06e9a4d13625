"""Issue 41: the event lines a write transaction held (an import's checkpoint events) are
appended whole lines at a time when it commits, not one system call group a line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from alpstore.events import EVENTS_FILE, HELD_IN_MEMORY, EventLog


def test_held_lines_are_appended_in_few_writes_and_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = EventLog(tmp_path)
    path = tmp_path / EVENTS_FILE
    path.parent.mkdir()
    path.write_bytes(b'{"event": "torn')  # a writer killed mid-line before this one
    lines = [log.line("checkpoint", session="s", checkpoint=i, turn=i) for i in range(1000)]
    for line in lines:
        log.hold(line)
    writes: list[bytes] = []
    real = EventLog.write

    def counted(self: EventLog, data: bytes) -> None:
        writes.append(data)
        real(self, data)

    monkeypatch.setattr(EventLog, "write", counted)
    log.settle(True)
    log.close()
    held = sum(len(line) for line in lines)
    assert len(writes) <= held // HELD_IN_MEMORY + 1  # (was 1,000)
    assert all(w.endswith(b"\n") for w in writes)
    got = path.read_bytes().split(b"\n")
    assert got[0] == b'{"event": "torn' and got[-1] == b""
    assert [json.loads(x)["checkpoint"] for x in got[1:-1]] == list(range(1000))


def test_lines_of_a_rolled_back_transaction_are_dropped(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    log.hold(log.line("checkpoint", checkpoint=1))
    log.settle(False)
    log.close()
    assert not (tmp_path / EVENTS_FILE).exists()
