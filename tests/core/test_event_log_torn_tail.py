"""traces/events.jsonl after a writer was killed in the middle of a line: the next event is
appended on a line of its own, whole, and only the torn line is lost."""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from alpstore.events import EventLog, after_torn_tail
from alpstore.store import Store


def test_an_event_after_a_torn_tail_is_whole(tmp_path: Path) -> None:
    events = tmp_path / "traces" / "events.jsonl"
    events.parent.mkdir()
    events.write_bytes(b'{"at": 1.0, "event": "checkpoint"}\n{"at": 2.0, "ev')
    log = EventLog(tmp_path)
    try:
        log.emit("fork", session="s")
        log.emit("fold", session="s")
    finally:
        log.close()
    lines = events.read_bytes().split(b"\n")
    assert lines[1] == b'{"at": 2.0, "ev'  # the torn line, alone
    assert [json.loads(line)["event"] for line in lines[2:] if line] == ["fork", "fold"]


def test_a_store_appends_after_a_torn_tail(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        store.create_session(name="a").commit_turn([{"role": "user", "content": "hi"}])
    events = tmp_path / "traces" / "events.jsonl"
    with events.open("ab") as handle:
        handle.write(b'{"at": 2.0, "event": "checkp')
    with Store.open(tmp_path) as store:
        store.get_session("a").commit_turn([{"role": "user", "content": "again"}])
    lines = events.read_bytes().split(b"\n")
    torn = [line for line in lines if line.startswith(b'{"at": 2.0')]
    assert torn == [b'{"at": 2.0, "event": "checkp']
    parsed = [json.loads(line) for line in lines if line and line not in torn]
    assert parsed and parsed[-1]["event"] == "checkpoint"


@given(st.binary(max_size=64), st.binary(max_size=32).filter(lambda b: b"\n" not in b))
def test_the_appended_line_is_whole_whatever_the_file_ends_in(before: bytes, text: bytes) -> None:
    line = text + b"\n"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.jsonl"
        path.write_bytes(before)
        fd = os.open(path, os.O_RDWR | os.O_APPEND)
        try:
            os.write(fd, after_torn_tail(fd, line))
        finally:
            os.close(fd)
        data = path.read_bytes()
    whole = not before or before.endswith(b"\n")
    assert data == before + (line if whole else b"\n" + line)
    assert data.split(b"\n")[-2] == text  # its own line, unchanged


def test_a_log_it_may_only_append_to_is_appended_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"half")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        assert after_torn_tail(fd, b"{}\n") == b"{}\n"
    finally:
        os.close(fd)


def test_a_fifo_planted_as_the_event_log_holds_no_writer(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    os.mkfifo(tmp_path / "traces" / "events.jsonl")
    done = threading.Event()

    def write() -> None:
        with Store.open(tmp_path) as store:
            session = store.create_session(name="a")
            for n in range(400):  # far more than a pipe holds (64 KiB)
                session.commit_turn([{"role": "user", "content": f"turn {n} " + "x" * 200}])
        done.set()

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    assert done.wait(60), "a writer blocked on a FIFO planted as traces/events.jsonl"
    with Store.open(tmp_path) as store:
        assert store.get_session("a").info().turn == 400
