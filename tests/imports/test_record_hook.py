"""The recording hook (issue 43): Claude Code runs it at Stop / SubagentStop / PreCompact with
its JSON on stdin, Codex's notify with the JSON as the last argument; each turn is recorded
as it happens, one checkpoint per turn, never failing the agent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.backend_pass import database_url_for_roots
from tests.conftest import Backend
from tests.fixtures.transcripts.build import Claude, codex
from tests.imports.test_recorder import stop_recorders

REPO = Path(__file__).parents[2]


def _hook(
    root: Path, payload: Any, *more: str, url: str | None = None, stdin: bool = True
) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "ALPSTORE_RECORDER_IDLE_TIMEOUT": "60"}
    env.pop("ALPSTORE_DATABASE_URL", None)
    if url:
        env["ALPSTORE_DATABASE_URL"] = url
    text = payload if isinstance(payload, str) else json.dumps(payload)
    code = "from alpstore.cli.record_hook import main; main()"  # as `hook install` writes it
    args = [sys.executable, "-c", code, "--root", str(root), *more]
    if not stdin:
        args.append(text)
    return subprocess.run(
        args, input=text.encode() if stdin else b"", capture_output=True, timeout=120, env=env
    )


def _payload(cc: Claude, path: Path, event: str = "Stop") -> dict[str, Any]:
    return {
        "session_id": cc.session,
        "transcript_path": str(path),
        "cwd": str(path.parent),
        "hook_event_name": event,
        "permission_mode": "default",
    }


def _checkpoints(backend: Backend, session: str) -> list[dict[str, Any]]:
    r = backend.cli("session", "log", session, "--json")
    assert r.code == 0, r.err
    return [x for x in json.loads(r.out) if x["type"] == "checkpoint"]


def test_a_transcript_grown_turn_by_turn_gets_one_checkpoint_per_turn(
    backend: Backend, tmp_path: Path
) -> None:
    cc = Claude(seed="grow")
    path = tmp_path / "project" / f"{cc.session}.jsonl"
    for turn in range(1, 6):
        cc.user(f"question {turn}")
        tool = f"toolu_{turn}"
        cc.tool_use("Bash", {"command": f"echo {turn}"}, tool)
        cc.write(path)
        if turn % 2:  # a hook mid-turn (a subagent ended, or a compaction starts)
            mid = _hook(
                backend.root, _payload(cc, path, "SubagentStop"), "--foreground", url=backend.url
            )
            assert mid.returncode == 0 and mid.stderr == b""
            assert len(_checkpoints(backend, cc.session)) == turn - 1
        cc.result(tool, f"{turn}\n")
        cc.text(f"answer {turn}")
        cc.system("stop_hook_summary", "Stop hook ran")
        cc.write(path)
        done = _hook(backend.root, _payload(cc, path), "--foreground", url=backend.url)
        assert done.returncode == 0 and done.stdout == b"" and done.stderr == b""
        cks = _checkpoints(backend, cc.session)
        assert [c["turn"] for c in cks] == list(range(1, turn + 1))
        log = backend.cli("session", "log", cc.session, "--json").out
        again = _hook(backend.root, _payload(cc, path), "--foreground", url=backend.url)
        assert again.returncode == 0
        assert backend.cli("session", "log", cc.session, "--json").out == log
    shown = backend.cli("session", "show", cc.session).out.splitlines()
    assert len(shown) == 20 and shown[-1] == "[19] assistant: answer 5"
    text = (backend.root / "traces" / "hooks" / "record.log").read_text()
    assert text.count("appended") >= 4 and "error" not in text.lower()


def test_with_no_recorder_the_hook_imports_in_a_detached_child(tmp_path: Path) -> None:
    """A recorder that cannot listen (a folder where its socket goes): the turn is not
    dropped, a detached one-shot import records it."""
    cc = Claude(seed="detach")
    cc.turn("q", "a")
    path = cc.write(tmp_path / "s.jsonl")
    root = tmp_path / "run"
    (root / "traces" / "hooks" / "recorder.sock").mkdir(parents=True)
    url_for = database_url_for_roots()  # on the PostgreSQL pass: the root's schema
    try:
        r = _hook(root, _payload(cc, path), url=url_for(root) if url_for else None)
    finally:
        stop_recorders(root)
    assert r.returncode == 0 and r.stdout == b"" and r.stderr == b""
    log = root / "traces" / "hooks" / "record.log"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (log.exists() and "imported" in log.read_text()):
        time.sleep(0.1)
    assert "imported 2 messages, 1 checkpoints" in log.read_text()
    assert "recorder: cannot listen: IsADirectoryError" in log.read_text()
    from alpstore.store import Store

    with Store.open(root) as st:
        assert [len(s.checkpoints()) for s in map(st.get_session, [cc.session])] == [1]


def test_the_hook_never_fails_the_agent(tmp_path: Path) -> None:
    root = tmp_path / "run"
    root.mkdir()
    for payload in ("not json", "[1, 2]", {"transcript_path": str(tmp_path / "missing.jsonl")}):
        r = _hook(root, payload, "--foreground")
        assert r.returncode == 0 and r.stdout == b"" and r.stderr == b""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"role": "user", "content": "an OpenAI file, not a transcript"}\n')
    r = _hook(root, {"transcript_path": str(bad), "hook_event_name": "Stop"}, "--foreground")
    assert r.returncode == 0 and r.stderr == b""
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the run root should be")
    cc = Claude(seed="fail")
    cc.turn("q", "a")
    path = cc.write(tmp_path / "s.jsonl")
    r = _hook(blocked, _payload(cc, path), "--foreground")
    assert r.returncode == 0 and r.stderr == b""
    text = (root / "traces" / "hooks" / "record.log").read_text()
    assert "JSONDecodeError" in text and "not a JSON object" in text
    assert "no transcript to read" in text and "not a Claude Code transcript" in text


def test_codex_notify_records_the_rollout(tmp_path: Path) -> None:
    home = tmp_path / "codex"
    lines = codex()
    thread = lines[0]["payload"]["id"]
    rollout = (
        home / "sessions" / "2025" / "10" / "01" / f"rollout-2025-10-01T11-00-00-{thread}.jsonl"
    )
    rollout.parent.mkdir(parents=True)
    rollout.write_text("".join(json.dumps(x) + "\n" for x in lines))
    root = tmp_path / "run"
    root.mkdir()
    notify = {"type": "agent-turn-complete", "thread-id": thread, "turn-id": "t1", "cwd": "/x"}
    r = _hook(
        root, notify, "--runtime", "codex", "--codex-home", str(home), "--foreground", stdin=False
    )
    assert r.returncode == 0, r.stderr
    text = (root / "traces" / "hooks" / "record.log").read_text()
    assert f"into session {thread} (codex)" in text


def test_install_record_registers_beside_the_continuity_hooks(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    project = tmp_path / "project"
    project.mkdir()
    root = tmp_path / "run"
    r = run_cli("--root", str(root), "hook", "install", "--project", str(project), "--record")
    assert r.code == 0, r.err
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    hooks = settings["hooks"]
    assert "SessionStart" in hooks
    for event in ("Stop", "SubagentStop", "PreCompact"):
        (group,) = hooks[event]
        command = group["hooks"][0]["command"]
        assert "from alpstore.cli.record_hook import main; main()" in command
        assert f"--root {root.resolve()}" in command
    again = run_cli("--root", str(root), "hook", "install", "--project", str(project), "--record")
    assert "already installed" in again.out
    gone = run_cli("hook", "uninstall", "--project", str(project))  # any run root's
    assert gone.code == 0 and "removed 5 hook command(s)" in gone.out
    notify = run_cli("--root", str(root), "hook", "codex-notify")
    assert notify.code == 0 and notify.out.startswith("notify = [") and "--runtime" in notify.out
