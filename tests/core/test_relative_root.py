"""A store opened with a relative run root keeps writing to that run root after the process
changes directory: the archive's new pooled connections, the writer queue and the event log all
name the folder the root named when it was opened."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from alpstore.store import Store

pytestmark = pytest.mark.sqlite_only("opens the run root's SQLite file by a relative path")


def test_a_relative_run_root_survives_a_change_of_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = Store.open("run")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "run" / "traces" / "archive").mkdir(parents=True)  # what a stray path would hit
    monkeypatch.chdir(elsewhere)
    session = store.create_session(name="a")
    session.commit_turn([{"role": "user", "content": "one"}])
    store.db.engine.dispose()  # a long-lived process's pool opens new connections at any time
    session.commit_turn([{"role": "user", "content": "two"}])
    store.close()
    stray = sorted(str(p.relative_to(elsewhere)) for p in elsewhere.rglob("*") if p.is_file())
    assert stray == []  # before: the event log and the writer-queue file went here
    with Store.open(tmp_path / "run") as again:
        assert [e.value["content"] for e in again.get_session("a").history()] == ["one", "two"]
    events = (tmp_path / "run" / "traces" / "events.jsonl").read_text().splitlines()
    assert [json.loads(line)["event"] for line in events].count("checkpoint") == 2
