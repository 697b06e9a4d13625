"""The resident recorder (``alpstore watch``, issue 43): the recording hook hands it each turn
and exits once the turn is committed; one recorder per run root, owner-only socket, idle exit,
stale socket replaced, kill -9 mid-import leaves the turn wholly out and the next hook
recovers; Codex rollouts recorded as they grow."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.backend_pass import database_url_for_roots
from tests.conftest import Backend
from tests.fixtures.transcripts.build import Claude, codex, real_turn

REPO = Path(__file__).parents[2]
HOOK = "from alpstore.cli.record_hook import main; main()"  # as `hook install` writes it


def _env(url: str | None, **more: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "ALPSTORE_RECORDER_IDLE_TIMEOUT": "60", **more}
    env.pop("ALPSTORE_DATABASE_URL", None)
    if url:
        env["ALPSTORE_DATABASE_URL"] = url
    return env


def _payload(cc: Claude, path: Path, event: str = "Stop") -> bytes:
    doc = {
        "session_id": cc.session,
        "transcript_path": str(path),
        "cwd": str(path.parent),
        "hook_event_name": event,
    }
    return json.dumps(doc).encode()


def _hook(root: Path, payload: bytes, url: str | None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-c", HOOK, "--root", str(root)],
        input=payload,
        capture_output=True,
        timeout=60,
        env=_env(url),
    )


def _recorder_pid(root: Path) -> int | None:
    lock = root / "traces" / "hooks" / "recorder.lock"
    try:
        text = lock.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (our own child, not yet reaped) is not alive
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().split(") ", 1)[1][0] != "Z"


def stop_recorders(*roots: Path) -> None:
    """Stop the recorders the hooks of a test started (their lock names each one's pid)."""
    for root in roots:
        pid = _recorder_pid(root)
        if pid is not None and _alive(pid):
            with_cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"alpstore.cli.recorder" in with_cmdline or b"watch" in with_cmdline:
                os.kill(pid, signal.SIGTERM)
                deadline = time.monotonic() + 20
                while _alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.05)


@pytest.fixture
def roots() -> Iterator[list[Path]]:
    """Run roots whose recorders are stopped after the test."""
    found: list[Path] = []
    yield found
    stop_recorders(*found)


def _log(root: Path) -> str:
    return (root / "traces" / "hooks" / "record.log").read_text()


def _checkpoints(backend: Backend, session: str) -> int:
    from alpstore.errors import NotFoundError

    with backend.open_store() as st:
        try:
            return len(st.get_session(session).checkpoints())
        except NotFoundError:
            return 0


def test_the_hook_exits_with_the_turn_committed(
    backend: Backend, tmp_path: Path, roots: list[Path]
) -> None:
    """What a checker sees: after each hook process exits, its turn is in the archive."""
    roots.append(backend.root)
    cc = Claude(seed="resident")
    path = tmp_path / "project" / f"{cc.session}.jsonl"
    for turn in range(1, 7):
        real_turn(cc, turn)
        if turn == 3:  # a hook mid-turn (a subagent ended): appended, no checkpoint yet
            cc.write(path)
            mid = _hook(backend.root, _payload(cc, path, "SubagentStop"), backend.url)
            assert mid.returncode == 0 and mid.stdout == b"" and mid.stderr == b""
            assert _checkpoints(backend, cc.session) == 2
            cc.text("and one more thing")
        cc.write(path)
        r = _hook(backend.root, _payload(cc, path), backend.url)
        assert r.returncode == 0 and r.stdout == b"" and r.stderr == b""
        # committed when the hook exited
        assert _checkpoints(backend, cc.session) == turn, (turn, _log(backend.root))
        log = backend.cli("session", "log", cc.session, "--json").out
        again = _hook(backend.root, _payload(cc, path), backend.url)
        assert again.returncode == 0
        assert backend.cli("session", "log", cc.session, "--json").out == log  # nothing written
    shown = backend.cli("session", "show", cc.session).out.splitlines()
    assert len(shown) == 6 * 4 + 1 and shown[-1].startswith("[24] assistant: Fixed module_6.py")
    hooks = backend.root / "traces" / "hooks"
    sock = hooks / "recorder.sock"
    assert stat.S_ISSOCK(sock.stat().st_mode) and stat.S_IMODE(sock.stat().st_mode) == 0o600
    pid = _recorder_pid(backend.root)
    assert pid is not None and _alive(pid)
    text = (hooks / "record.log").read_text()
    assert text.count(f"recorder {pid}: started") == 1  # one recorder served every turn
    assert text.count("record Stop: ") == 6 and "Error" not in text


def test_one_recorder_per_root_status_stop_and_a_stale_socket(
    tmp_path: Path, roots: list[Path]
) -> None:
    from tests.conftest import run_cli

    root = tmp_path / "run"
    root.mkdir()
    roots.append(root)
    url_for = database_url_for_roots()
    url = url_for(root) if url_for else None
    hooks = root / "traces" / "hooks"
    hooks.mkdir(parents=True)
    stale = socket.socket(socket.AF_UNIX)  # a recorder that died: its socket, no listener
    stale.bind(str(hooks / "recorder.sock"))
    stale.close()
    assert run_cli("--root", str(root), "watch", "--status").code == 4
    cc = Claude(seed="stale")
    cc.turn("q", "a")
    path = cc.write(tmp_path / f"{cc.session}.jsonl")
    r = _hook(root, _payload(cc, path), url)
    assert r.returncode == 0 and r.stderr == b""
    pid = _recorder_pid(root)
    assert pid is not None and _alive(pid)
    status = run_cli("--root", str(root), "watch", "--status")
    assert status.code == 0 and f"recorder {pid} for {root.resolve()}: running" in status.out
    assert "1 imports" in status.out
    second = subprocess.run(
        [sys.executable, "-m", "alpstore.cli.main", "--root", str(root), "watch"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(url),
    )
    assert second.returncode == 2
    assert f"a recorder already runs for run root {root.resolve()} (pid {pid})" in second.stderr
    stopped = run_cli("--root", str(root), "watch", "--stop")
    assert stopped.code == 0 and f"recorder {pid} stopped" in stopped.out
    deadline = time.monotonic() + 20
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid) and not (hooks / "recorder.sock").exists()
    assert run_cli("--root", str(root), "watch", "--stop").code == 4


def test_kill_9_mid_import_leaves_the_turn_out_and_the_next_hook_recovers(
    backend: Backend, tmp_path: Path, roots: list[Path]
) -> None:
    roots.append(backend.root)
    warm = Claude(seed="warm")
    warm.turn("q", "a")
    first = warm.write(tmp_path / f"{warm.session}.jsonl")
    assert _hook(backend.root, _payload(warm, first), backend.url).returncode == 0
    victim = _recorder_pid(backend.root)
    assert victim is not None and _checkpoints(backend, warm.session) == 1
    big = Claude(seed="big")
    # an import of seconds: the hook stops waiting (1.5 s) while it runs
    turns = 1200 if backend.is_postgresql else 4000
    for turn in range(1, turns + 1):
        real_turn(big, turn)
    path = big.write(tmp_path / f"{big.session}.jsonl")
    log = backend.root / "traces" / "hooks" / "record.log"
    r = _hook(backend.root, _payload(big, path), backend.url)
    assert r.returncode == 0 and r.stderr == b""
    text = log.read_text()
    assert f"{path}: reading" in text and "imported" not in text.split(f"{path}: reading")[1]
    os.kill(victim, signal.SIGKILL)  # mid-import: the hook has gone, the recorder is writing
    deadline = time.monotonic() + 10
    while _alive(victim) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "imported" not in log.read_text().split(f"{path}: reading")[1]
    assert _checkpoints(backend, big.session) == 0  # wholly out
    assert (backend.root / "traces" / "hooks" / "recorder.sock").exists()  # stale now
    real_turn(big, turns + 1)
    big.write(path)
    r = _hook(backend.root, _payload(big, path), backend.url)  # starts a new recorder
    assert r.returncode == 0 and r.stderr == b""
    deadline = time.monotonic() + 180
    while _checkpoints(backend, big.session) < turns + 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _checkpoints(backend, big.session) == turns + 1
    assert _checkpoints(backend, warm.session) == 1
    shown = backend.cli("session", "show", big.session).out.splitlines()
    assert len(shown) == (turns + 1) * 4 and f"(turn {turns + 1})" in shown[-1]
    again = _recorder_pid(backend.root)
    assert again is not None and again != victim and _alive(again)


def _rollout_turn(lines: list[dict[str, Any]], n: int, *, over: bool = True) -> None:
    def item(payload: dict[str, Any]) -> None:
        lines.append({"timestamp": f"2025-10-01T11:00:{n:02d}.000Z", **payload})

    item({"type": "turn_context", "payload": {"cwd": "/work", "model": "gpt-5-codex"}})
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"q{n}"}]}
    item({"type": "response_item", "payload": user})
    answer = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": f"a{n}"}],
    }
    item({"type": "response_item", "payload": answer})
    if over:
        done = {"type": "task_complete", "turn_id": str(n), "last_agent_message": f"a{n}"}
        item({"type": "event_msg", "payload": done})


def _write(path: Path, lines: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_watch_records_codex_rollouts_as_they_grow(
    backend: Backend, tmp_path: Path, roots: list[Path]
) -> None:
    roots.append(backend.root)
    home = tmp_path / "codex"
    day = home / "sessions" / "2025" / "10" / "01"
    day.mkdir(parents=True)
    meta = codex()[0]
    thread = meta["payload"]["id"]
    old = day / "rollout-2025-09-30T09-00-00-0199a000-0000-7000-8000-000000000000.jsonl"
    old_meta = {**meta, "payload": {**meta["payload"], "id": "0199a000-old"}}
    _write(old, [old_meta])  # there before the watch, never growing: not recorded
    watch = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "alpstore.cli.main",
            *backend.db_args(),
            "watch",
            "--codex-home",
            str(home),
            "--poll",
            "0.1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(None),
    )
    try:
        sock = backend.root / "traces" / "hooks" / "recorder.sock"
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        rollout = day / f"rollout-2025-10-01T11-00-00-{thread}.jsonl"
        lines: list[dict[str, Any]] = [meta]
        for n in range(1, 4):
            _rollout_turn(lines, n)
            _write(rollout, lines)
            deadline = time.monotonic() + 30
            while _checkpoints(backend, thread) < n and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _checkpoints(backend, thread) == n
        _rollout_turn(lines, 4, over=False)  # an older Codex: no task_complete
        _write(rollout, lines)
        time.sleep(1.0)
        assert _checkpoints(backend, thread) == 3  # the turn goes on: not checkpointed yet
    finally:
        watch.send_signal(signal.SIGINT)
        out, err = watch.communicate(timeout=60)
    assert watch.returncode == 0, err
    assert _checkpoints(backend, thread) == 4  # the recorder closed the open turn at exit
    assert f"watching {home / 'sessions'}" in err and "recorder stopped" in err
    assert out.count(f"{rollout}: ") >= 5 and "(codex)" in out  # (a write seen half done: 6)
    shown = backend.cli("session", "show", thread).out
    assert "user: q4" in shown and "assistant: a4" in shown
    assert _checkpoints(backend, "0199a000-old") == 0


def test_codex_notify_goes_through_the_recorder(tmp_path: Path, roots: list[Path]) -> None:
    from alpstore.store import Store

    home = tmp_path / "codex"
    lines = codex()
    thread = lines[0]["payload"]["id"]
    rollout = home / "sessions" / "2025" / "10" / "01" / f"rollout-2025-10-01T11-00-{thread}.jsonl"
    rollout.parent.mkdir(parents=True)
    _write(rollout, lines)
    root = tmp_path / "run"
    root.mkdir()
    roots.append(root)
    url_for = database_url_for_roots()
    notify = {"type": "agent-turn-complete", "thread-id": thread, "turn-id": "t1"}
    args = ["--root", str(root), "--runtime", "codex", "--codex-home", str(home)]
    r = subprocess.run(
        [sys.executable, "-c", HOOK, *args, json.dumps(notify)],
        capture_output=True,
        timeout=60,
        env=_env(url_for(root) if url_for else None),
    )
    assert r.returncode == 0 and r.stdout == b"" and r.stderr == b""
    with Store.open(root) as st:  # committed when the hook exited
        assert len(st.get_session(thread).checkpoints()) >= 1
    assert f"recorder {_recorder_pid(root)}: started" in _log(root)


@pytest.mark.sqlite_only("the second archive is a SQLite file named by its URL")
def test_a_hook_naming_another_database_is_not_recorded_by_this_root_s_recorder(
    tmp_path: Path, roots: list[Path]
) -> None:
    from alpstore.store import Store

    root = tmp_path / "run"
    root.mkdir()
    roots.append(root)
    first = Claude(seed="here")
    first.turn("q", "a")
    here = first.write(tmp_path / f"{first.session}.jsonl")
    assert _hook(root, _payload(first, here), None).returncode == 0  # starts the recorder
    other = f"sqlite:///{tmp_path / 'other.db'}"
    second = Claude(seed="there")
    second.turn("q", "a")
    there = second.write(tmp_path / f"{second.session}.jsonl")
    r = _hook(root, _payload(second, there), other)
    assert r.returncode == 0 and r.stderr == b""
    deadline = time.monotonic() + 60  # recorded by a one-shot import, into the other archive
    while "into session " + second.session not in _log(root) and time.monotonic() < deadline:
        time.sleep(0.1)
    with Store.open(root, url=other) as st:
        assert len(st.get_session(second.session).checkpoints()) == 1
    with Store.open(root) as st:
        assert len(st.get_session(first.session).checkpoints()) == 1
        assert [s.uuid for s in st.list_sessions()] == [first.session]


def test_a_stopping_recorder_packs_what_its_turns_left_loose(
    tmp_path: Path, roots: list[Path]
) -> None:
    """A recorder rarely lives to the background packer's threshold: at its exit it settles
    the archive as `session import` does (SQLite: its turns' blobs end packed in frames)."""
    import sqlite3

    from alpstore.db.names import sqlite_path_for_root
    from tests.conftest import run_cli

    root = tmp_path / "run"
    root.mkdir()
    roots.append(root)
    url_for = database_url_for_roots()
    if url_for is not None:
        pytest.skip("SQLite: on PostgreSQL a settle trains the dictionary and packs nothing")
    cc = Claude(seed="settle")
    path = tmp_path / "project" / f"{cc.session}.jsonl"
    for turn in range(1, 31):
        real_turn(cc, turn)
        cc.write(path)
        assert _hook(root, _payload(cc, path), None).returncode == 0

    def codecs() -> dict[int, int]:
        with sqlite3.connect(sqlite_path_for_root(root)) as con:
            return dict(con.execute("SELECT codec, count(*) FROM blobs GROUP BY codec"))

    assert 4 not in codecs()  # loose while the recorder runs
    assert run_cli("--root", str(root), "watch", "--stop").code == 0
    pid = _recorder_pid(root)
    deadline = time.monotonic() + 30
    while pid is not None and _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    after = codecs()
    assert after.get(4, 0) >= 100 and sum(after.values()) == after[4], after
    assert run_cli("--root", str(root), "archive", "verify").code == 0
    shown = run_cli("--root", str(root), "session", "show", cc.session).out.splitlines()
    assert len(shown) == 30 * 4


def test_ctrl_c_mid_import_finishes_the_turn_then_stops(
    backend: Backend, tmp_path: Path, roots: list[Path]
) -> None:
    """Ctrl-C (SIGINT) while `watch` imports a rollout lets that import finish, then stops:
    an exception raised mid-import dropped the whole import (0 checkpoints)."""
    roots.append(backend.root)
    home = tmp_path / "codex"
    day = home / "sessions" / "2025" / "10" / "01"
    day.mkdir(parents=True)
    meta = codex()[0]
    thread = meta["payload"]["id"]
    cmd = [sys.executable, "-m", "alpstore.cli.main", *backend.db_args(), "watch"]
    watch = subprocess.Popen(
        [*cmd, "--codex-home", str(home), "--poll", "0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(None),
    )
    try:
        sock = backend.root / "traces" / "hooks" / "recorder.sock"
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        lines: list[dict[str, Any]] = [meta]
        for n in range(1, 2001):
            _rollout_turn(lines, n)
        _write(day / f"rollout-2025-10-01T11-00-00-{thread}.jsonl", lines)  # ~1.3 MB
        deadline = time.monotonic() + 30
        while "reading" not in _log(backend.root) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "reading" in _log(backend.root)  # the import has started
    finally:
        watch.send_signal(signal.SIGINT)
        _, err = watch.communicate(timeout=60)
    assert watch.returncode == 0, err
    assert _checkpoints(backend, thread) == 2000
    log = _log(backend.root)
    assert "KeyboardInterrupt" not in log and "stopped (1 imports)" in log
