"""`session import` of several files or a folder (issue 41): each file its own session and
transaction, a refused file named and the others imported, a progress bar on a terminal, one
summary line when piped."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

from alpstore.store import Store
from tests.backend_pass import database_env_for
from tests.conftest import ALPSTORE, run_cli


def _folder(root: Path, files: int) -> Path:
    """``files`` small transcripts in two project folders (as Claude Code keeps them)."""
    folder = root / "projects"
    for i in range(files):
        sub = folder / ("a" if i % 2 else "b")
        sub.mkdir(parents=True, exist_ok=True)
        lines = []
        for t in range(2):
            lines.append(json.dumps({"role": "user", "content": f"question {t} of file {i}"}))
            lines.append(json.dumps({"role": "assistant", "content": f"answer {t} of {i}"}))
        (sub / f"s{i:03d}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "notes.txt").write_text("not a transcript", encoding="utf-8")
    return folder


def test_a_folder_of_200_transcripts_piped_prints_one_summary_line(
    run_root: Path, tmp_path: Path
) -> None:
    folder = _folder(tmp_path, 200)
    res = run_cli("--root", str(run_root), "session", "import", str(folder))
    assert res.code == 0, res
    assert res.out.splitlines() == [res.out.strip()], res.out  # one line
    assert res.out.startswith("imported 200 of 200 files ("), res.out
    assert "800 messages" in res.out
    assert "\r" not in res.err and "━" not in res.err  # no bar when not on a terminal
    with Store.open(run_root) as st:
        names = sorted(i.name or "" for i in st.list_sessions())
    assert names == sorted(f"s{i:03d}" for i in range(200))


def test_a_refused_file_is_named_and_leaves_nothing_the_others_are_imported(
    run_root: Path, tmp_path: Path
) -> None:
    folder = _folder(tmp_path, 4)
    bad = folder / "a" / "s999.jsonl"
    bad.write_text('{"role": "user", "content": "fine"}\n{"role": \n', encoding="utf-8")
    res = run_cli("--root", str(run_root), "session", "import", str(folder), str(bad))
    assert res.code == 3, res
    assert "s999.jsonl:2: not valid JSON" in res.err and "(not imported)" in res.err, res.err
    assert "imported 4 of 6 files" in res.out and "2 refused" in res.out, res.out
    assert "Traceback" not in res.err
    with Store.open(run_root) as st:
        assert sorted(i.name or "" for i in st.list_sessions()) == [
            "s000",
            "s001",
            "s002",
            "s003",
        ]


def test_many_files_refuse_name_and_id_and_a_missing_source(run_root: Path, tmp_path: Path) -> None:
    folder = _folder(tmp_path, 2)
    res = run_cli("--root", str(run_root), "session", "import", str(folder), "--name", "x")
    assert res.code == 2 and "--name and --id" in res.err, res
    res = run_cli("--root", str(run_root), "session", "import", str(folder), str(tmp_path / "no"))
    assert res.code == 2 and "no such file or folder" in res.err, res
    empty = tmp_path / "empty"
    empty.mkdir()
    res = run_cli("--root", str(run_root), "session", "import", str(empty))
    assert res.code == 2 and "no .jsonl file" in res.err, res


def test_on_a_terminal_a_progress_bar_shows_files_bytes_and_rate(
    run_root: Path, tmp_path: Path
) -> None:
    folder = _folder(tmp_path, 200)
    leader, follower = os.openpty()
    seen: list[bytes] = []

    def drain() -> None:  # the terminal's reader: a full pty would block the writer
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                return
            if not chunk:
                return
            seen.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALPSTORE_")}
    env.update(COLUMNS="120", TERM="xterm", **database_env_for(run_root))
    done = subprocess.run(
        [ALPSTORE, "--root", str(run_root), "session", "import", str(folder)],
        stdout=subprocess.PIPE,
        stderr=follower,
        stdin=subprocess.DEVNULL,
        env=env,
        timeout=300,
        check=False,
    )
    os.close(follower)
    reader.join(timeout=10)
    os.close(leader)
    shown = b"".join(seen).decode("utf-8", "replace")
    assert done.returncode == 0, shown
    assert "importing 200/200 files" in shown, shown[-2000:]
    assert "━" in shown  # the bar
    assert "/s" in shown  # the rate
    assert "kB" in shown or "bytes" in shown  # the bytes
    assert done.stdout.decode().startswith("imported 200 of 200 files")


def test_kill_9_during_a_many_file_import_leaves_each_file_wholly_in_or_out(
    run_root: Path, tmp_path: Path
) -> None:
    """SIGKILL at a few moments of a 200-file import: every session the archive then holds is
    a whole file (all its turns and checkpoints); a second run imports the rest."""
    import signal
    import time

    folder = _folder(tmp_path, 200)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALPSTORE_")}
    env.update(database_env_for(run_root))  # the PostgreSQL pass: the run root's schema
    for delay in (0.8, 1.6, 2.4):
        proc = subprocess.Popen(
            [ALPSTORE, "--root", str(run_root), "session", "import", str(folder)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        with Store.open(run_root) as st:
            for info in st.list_sessions():
                cks = st.list_checkpoints(info.id)
                assert (info.turn, info.head.length, len(cks)) == (2, 4, 2), info.name
                first = st.get_session(info.uuid).history()[0].value["content"]
                assert first == f"question 0 of file {int((info.name or '')[1:4])}"
    with Store.open(run_root) as st:
        assert st.list_sessions()  # the kills landed after some files were in
