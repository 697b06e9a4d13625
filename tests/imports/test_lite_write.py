"""Imports into an SQLite run root write on the ``sqlite3`` driver alone (issue 41,
``db/litewrite.py``): the archive they leave is the one the SQLAlchemy path leaves, row for row;
the commands import no SQLAlchemy; anything the driver path does not cover opens through
``Database`` as before.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from alpstore.db.litewrite import LiteWriteDatabase, open_writer, writable_path
from alpstore.db.names import sqlite_path_for_root
from alpstore.importers import import_history_file
from alpstore.portable.importing import import_file
from alpstore.portable.travel import check_session_file
from alpstore.portable.travel_import import import_session_file
from alpstore.samples import write_jsonl
from alpstore.store import Store
from tests.conftest import ALPSTORE, run_cli

pytestmark = pytest.mark.sqlite_only("compares the SQLite files the two write paths leave")

SESSION = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 120-turn transcript, and its session's bundle and deep file."""
    work = tmp_path_factory.mktemp("lite")
    conv = work / "conv.jsonl"
    write_jsonl(conv, 120)
    src = work / "src"
    src.mkdir()
    env = {"ALPSTORE_DATABASE_URL": ""}
    for args in (
        ("session", "import", str(conv), "--name", "c"),
        ("session", "export", "c", "-o", str(work / "bundle.jsonl")),
        ("checkpoint", "export", "c@latest", "-o", str(work / "deep.json")),
    ):
        res = run_cli("--root", str(src), *args, env=env)
        assert res.code == 0, res
    return {"transcript": conv, "bundle": work / "bundle.jsonl", "deep": work / "deep.json"}


def _import(kind: str, path: Path) -> Callable[[Store], None]:
    def run(st: Store) -> None:
        if kind == "transcript":
            import_history_file(st, path, name="conv", session_id=SESSION)
        elif kind == "bundle":
            import_session_file(st, path, checked=check_session_file(path))
        else:
            import_file(st, path)
        st.archive.settle(compact=True)

    return run


def _rows(root: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's rows, every column (sorted)."""
    conn = sqlite3.connect(sqlite_path_for_root(root))
    try:
        tables = [
            str(r[0])
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        out: dict[str, list[tuple[Any, ...]]] = {}
        for table in tables:
            columns = [str(r[1]) for r in conn.execute(f'PRAGMA table_info("{table}")')]
            kept = columns
            names = ", ".join(f'"{c}"' for c in kept)
            order = ", ".join(str(i + 1) for i in range(len(kept)))
            out[table] = conn.execute(f'SELECT {names} FROM "{table}" ORDER BY {order}').fetchall()
        return out
    finally:
        conn.close()


def _clock_stopped(root: Path) -> None:
    """Set every wall-clock column (``*_at``: when a row was written, which differs between
    any two imports) to 0, so the digests compare the content alone."""
    conn = sqlite3.connect(sqlite_path_for_root(root))
    try:
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            for column in [str(r[1]) for r in conn.execute(f'PRAGMA table_info("{table}")')]:
                if column.endswith("_at"):
                    conn.execute(f'UPDATE "{table}" SET "{column}" = 0')
        conn.commit()
    finally:
        conn.close()


def _shown(root: Path, *args: str) -> str:
    res = run_cli("--root", str(root), *args, env={"ALPSTORE_DATABASE_URL": ""})
    assert res.code == 0, res
    return res.out


@pytest.mark.parametrize("kind", ["transcript", "bundle", "deep"])
def test_the_driver_path_writes_the_archive_the_sqlalchemy_path_writes(
    kind: str, files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ALPSTORE_DATABASE_URL", raising=False)
    run = _import(kind, files[kind])
    core, lite = tmp_path / "core", tmp_path / "lite"
    with Store.open(core) as st:
        assert not isinstance(st.db, LiteWriteDatabase)
        run(st)
    with Store.open(lite, lite_write=True) as st:
        assert isinstance(st.db, LiteWriteDatabase)
        run(st)
    for root in (core, lite):  # the wall clock apart (below), the two archives are one
        _clock_stopped(root)
    a, b = _rows(core), _rows(lite)
    assert a.keys() == b.keys()
    for table in a:  # ids too: the same inserts in the same order
        assert a[table] == b[table], table
    assert a["pack_frames"] and a["checkpoints"] and a["zstd_dicts"]  # (0010: packed, no rows)
    for args in (("session", "log", SESSION if kind == "transcript" else "c"),):
        assert _shown(core, *args) == _shown(lite, *args)
    ref = SESSION if kind == "transcript" else "c"
    assert _shown(core, "session", "digest", ref) == _shown(lite, "session", "digest", ref)
    verified = _shown(lite, "archive", "verify")
    assert verified == _shown(core, "archive", "verify")
    assert verified.rstrip().endswith(": ok"), verified


def _imported_modules(*args: str, cwd: Path) -> set[str]:
    env = {k: v for k, v in os.environ.items() if k != "ALPSTORE_DATABASE_URL"}
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", ALPSTORE, *args],
        capture_output=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    names = re.findall(rb"^import time:\s+\d+ \|\s+\d+ \|\s+(\S+)$", proc.stderr, re.M)
    return {n.decode() for n in names}


def _small_folder(tmp_path: Path) -> Path:
    """Three small OpenAI transcripts (too few messages for a dictionary: the settle's
    training path) and a Claude Code one."""
    folder = tmp_path / "projects"
    folder.mkdir()
    for i in range(3):
        lines = [
            json.dumps({"role": "user", "content": f"question {i}"}),
            json.dumps({"role": "assistant", "content": f"answer {i}"}),
        ]
        (folder / f"s{i}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    records = [
        {
            "type": "user",
            "uuid": "u1",
            "parentUuid": None,
            "sessionId": "11111111-2222-4333-8444-555555555555",
            "timestamp": "2026-01-01T00:00:00Z",
            "message": {"role": "user", "content": "hello"},
        },
        {
            "type": "assistant",
            "uuid": "a1",
            "parentUuid": "u1",
            "sessionId": "11111111-2222-4333-8444-555555555555",
            "timestamp": "2026-01-01T00:00:01Z",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "hi"}]},
        },
    ]
    (folder / "claude.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in records), encoding="utf-8"
    )
    return folder


def test_the_imports_load_no_sqlalchemy(files: dict[str, Path], tmp_path: Path) -> None:
    jobs: list[tuple[str, ...]] = [
        ("session", "import", str(files["transcript"])),
        ("session", "import", str(files["bundle"])),
        ("checkpoint", "import", str(files["deep"])),
        ("session", "import", str(_small_folder(tmp_path))),
    ]
    for n, job in enumerate(jobs):
        root = tmp_path / f"r{n}"
        modules = _imported_modules("--root", str(root), *job, cwd=tmp_path)
        assert "sqlalchemy" not in modules, job
        assert "alpstore.db.litewrite" in modules, job
        # and into the archive it has now (one at head: the driver path again)
        again = ("session", "import", str(files["transcript"]))
        assert "sqlalchemy" not in _imported_modules("--root", str(root), *again, cwd=tmp_path)


def test_what_the_driver_path_does_not_cover_opens_through_sqlalchemy(tmp_path: Path) -> None:
    path = tmp_path / "older.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
    conn.execute("INSERT INTO alembic_version VALUES ('0007')")
    conn.commit()
    conn.close()
    assert writable_path(None, f"sqlite:///{path}") is None  # a migration first
    assert writable_path(None, "postgresql+psycopg://u:p@localhost/db") is None
    assert writable_path(None, f"sqlite:///{path}?mode=ro") is None
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE notes (x)")
    conn.commit()
    conn.close()
    assert writable_path(None, f"sqlite:///{foreign}") is None  # Database refuses it, named
    assert open_writer(root=tmp_path / "none", url=None, create=False) is None
    assert not (tmp_path / "none").exists()
    fresh = writable_path(tmp_path / "new", None)
    assert fresh == sqlite_path_for_root(tmp_path / "new")


def test_a_refused_import_on_the_driver_path_leaves_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    write_jsonl(bad, 200)
    with bad.open("a", encoding="utf-8") as f:
        f.write('{"role": "user", "content": \n')
    root = tmp_path / "root"
    res = run_cli(
        "--root", str(root), "session", "import", str(bad), env={"ALPSTORE_DATABASE_URL": ""}
    )
    assert res.code == 3, res
    assert "not valid JSON" in res.err and "Traceback" not in res.err
    assert not root.joinpath("traces").exists() or not any(
        sqlite_path_for_root(root).parent.iterdir()
    )  # the new archive removed again, as on the SQLAlchemy path
    good = tmp_path / "good.jsonl"
    write_jsonl(good, 30)
    assert (
        run_cli(
            "--root", str(root), "session", "import", str(good), env={"ALPSTORE_DATABASE_URL": ""}
        ).code
        == 0
    )
    res = run_cli(
        "--root", str(root), "session", "import", str(bad), env={"ALPSTORE_DATABASE_URL": ""}
    )
    assert res.code == 3, res
    with Store.open(root, read_only=True) as st:
        assert len(st.list_sessions()) == 1  # the refused one left no session, no turn
    conn = sqlite3.connect(sqlite_path_for_root(root))
    try:
        (cks,) = conn.execute("SELECT count(*) FROM checkpoints").fetchone()
        (dicts,) = conn.execute("SELECT count(*) FROM zstd_dicts").fetchone()
    finally:
        conn.close()
    assert cks == 30 and dicts <= 1


def test_imports_racing_into_one_new_run_root_all_land(tmp_path: Path) -> None:
    """Three processes create the same new archive and import at once: one creates it, every
    import lands whole (the writers' queue and BEGIN IMMEDIATE shared with Database's)."""
    files = []
    for i in range(3):
        path = tmp_path / f"t{i}.jsonl"
        write_jsonl(path, 40, seed=i)
        files.append(path)
    root = tmp_path / "root"
    env = {k: v for k, v in os.environ.items() if k != "ALPSTORE_DATABASE_URL"}
    procs = [
        subprocess.Popen(
            [ALPSTORE, "--root", str(root), "session", "import", str(p)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for p in files
    ]
    for proc in procs:
        _out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    with Store.open(root, read_only=True) as st:
        assert sorted(i.name or "" for i in st.list_sessions()) == ["t0", "t1", "t2"]
    verified = _shown(root, "archive", "verify")
    assert verified.rstrip().endswith(": ok"), verified
