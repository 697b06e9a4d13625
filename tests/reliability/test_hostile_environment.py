"""A hostile environment around the archive (issue 30, items 1, 2, 3 and 9): symlinks planted in
a run root, a foreign database where the archive should be, repeated JSON keys, and refused
commands in an empty folder. Each case checks that nothing outside the run root changed, byte
for byte, and that the refusal is one line.
"""

from __future__ import annotations

import io
import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Backend, Result, run_cli

TRANSCRIPT = '{"role":"user","content":"hello"}\n{"role":"assistant","content":"hi"}\n'


def tree(folder: Path) -> dict[str, bytes | str]:
    """Every file under ``folder`` (symlinks as their target, not followed), by relative path."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            rel = str(path.relative_to(folder))
            if path.is_symlink():
                out[rel] = "-> " + os.readlink(path)
            elif path.is_file():
                out[rel] = path.read_bytes()
    return out


def one_line_refusal(res: Result) -> str:
    assert res.code != 0, res
    lines = res.err.strip().splitlines()
    assert lines and lines[0].startswith("alpstore: error: "), res.err
    assert len(lines) <= 2 and "Traceback" not in res.err, res.err
    return lines[0]


def transcript(folder: Path, text: str = TRANSCRIPT) -> Path:
    path = folder / "t.jsonl"
    path.write_text(text, encoding="utf-8")
    return path


def foreign_sqlite(path: Path) -> bytes:
    """Someone else's SQLite database, with data: its bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO customers (name) VALUES ('ada'), ('grace')")
    conn.commit()
    conn.close()
    return path.read_bytes()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the run root that alpstore must never write into."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "victim.txt").write_bytes(b"precious bytes\n")
    return folder


# ---------------------------------------------------------------- 1. symlinks in a run root
def test_events_log_symlinked_out_of_the_run_root_is_not_appended_to(
    cli: Callable[..., Result], run_root: Path, tmp_path: Path, outside: Path
) -> None:
    (run_root / "traces").mkdir()
    (run_root / "traces" / "events.jsonl").symlink_to(outside / "victim.txt")
    before = tree(outside)
    res = cli("session", "import", str(transcript(tmp_path)), "--name", "a")
    assert res.code == 0, res
    cli("session", "list")
    assert tree(outside) == before


def test_traces_folder_symlinked_out_of_the_run_root_is_not_written(
    cli: Callable[..., Result], run_root: Path, tmp_path: Path, outside: Path
) -> None:
    """The archive (SQLite) and the event log live under traces/: a planted link to another
    folder is refused (SQLite: the archive is there) or not written through (PostgreSQL)."""
    (run_root / "traces").symlink_to(outside)
    before = tree(outside)
    res = cli("session", "import", str(transcript(tmp_path)), "--name", "a")
    if res.code != 0:
        line = one_line_refusal(res)
        assert "symlink" in line and "archive.db" in line, line
    assert tree(outside) == before


@pytest.mark.sqlite_only("the archive file of the run root")
def test_archive_file_symlinked_to_another_database_is_refused(
    cli: Callable[..., Result], run_root: Path, tmp_path: Path
) -> None:
    other = tmp_path / "elsewhere" / "other.db"
    data = foreign_sqlite(other)
    (run_root / "traces" / "archive").mkdir(parents=True)
    (run_root / "traces" / "archive" / "archive.db").symlink_to(other)
    for args in (
        ("session", "import", str(transcript(tmp_path)), "--name", "a"),
        ("session", "new", "--name", "b"),
        ("session", "list"),
    ):
        one_line_refusal(cli(*args))
    assert other.read_bytes() == data
    assert sorted(p.name for p in other.parent.iterdir()) == ["other.db"]  # no -wal, no -shm


def test_checkpoints_folder_symlinked_out_of_the_run_root_is_refused(
    cli: Callable[..., Result], run_root: Path, tmp_path: Path, outside: Path
) -> None:
    assert cli("session", "import", str(transcript(tmp_path)), "--name", "a").code == 0
    (run_root / "checkpoints").symlink_to(outside)
    before = tree(outside)
    line = one_line_refusal(cli("checkpoint", "save", "a"))
    assert "checkpoints" in line and "symlink" in line, line
    assert tree(outside) == before


def test_a_deep_file_is_not_written_through_a_symlink(
    cli: Callable[..., Result], run_root: Path, tmp_path: Path, outside: Path
) -> None:
    assert cli("session", "import", str(transcript(tmp_path)), "--name", "a").code == 0
    first = Path(cli("checkpoint", "save", "a").out.strip())
    assert first.is_file()
    first.unlink()
    first.symlink_to(outside / "victim.txt")  # the next save of this turn goes to that name
    before = tree(outside)
    one_line_refusal(cli("checkpoint", "save", "a"))
    assert tree(outside) == before


# ---------------------------------------------------------------- 2. a foreign database
@pytest.mark.sqlite_only("a foreign SQLite file in the run root")
@pytest.mark.parametrize(
    "args",
    [
        ("session", "list"),
        ("session", "log", "x"),
        ("db", "info"),
        ("sql", "select 1"),
        ("archive", "verify"),
        ("session", "new", "--name", "x"),
        ("session", "import", "TRANSCRIPT", "--name", "x"),
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_a_foreign_sqlite_database_is_never_modified(
    cli: Callable[..., Result], run_root: Path, tmp_path: Path, args: tuple[str, ...]
) -> None:
    path = run_root / "traces" / "archive" / "archive.db"
    data = foreign_sqlite(path)
    args = tuple(str(transcript(tmp_path)) if a == "TRANSCRIPT" else a for a in args)
    res = cli(*args)
    assert res.code != 0, res
    assert path.read_bytes() == data
    assert sorted(p.name for p in path.parent.iterdir()) == ["archive.db"]


def test_a_foreign_database_url_is_refused_on_both_backends(
    backend: Backend, tmp_path: Path
) -> None:
    """`session new` on a non-empty database without alpstore's schema adds no table to it."""
    if backend.is_postgresql:
        from sqlalchemy import create_engine, inspect, text

        assert backend.url is not None
        engine = create_engine(backend.url)
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE customers (id serial primary key, name text)"))
            conn.execute(text("INSERT INTO customers (name) VALUES ('ada')"))

        def tables() -> object:
            return sorted(inspect(engine).get_table_names())

        url = backend.url
    else:
        path = tmp_path / "foreign.db"
        data = foreign_sqlite(path)

        def tables() -> object:
            return path.read_bytes() == data, sorted(os.listdir(tmp_path))

        url = f"sqlite:///{path}"
    before = tables()
    line = one_line_refusal(run_cli("--root", str(backend.root), "--db", url, "session", "new"))
    assert "not an alpstore archive" in line, line
    assert tables() == before
    if backend.is_postgresql:
        engine.dispose()


# ---------------------------------------------------------------- 3. repeated JSON keys
def test_a_repeated_key_in_a_transcript_line_is_refused(
    cli: Callable[..., Result], run_root: Path, tmp_path: Path
) -> None:
    path = transcript(
        tmp_path, '{"role":"user","content":"hi"}\n{"role":"user","role":"system","content":"x"}\n'
    )
    line = one_line_refusal(cli("session", "import", str(path)))
    assert f"{path}:2" in line and "'role'" in line, line
    assert tree(run_root) == {}


def _deep_file_with_a_repeated_key(cli: Callable[..., Result], tmp_path: Path) -> Path:
    """A real deep file whose first message says ``"role": "user"`` twice (same value: the
    last-wins reader imports it as it was, so only a refusal tells the two readers apart)."""
    assert cli("session", "import", str(transcript(tmp_path)), "--name", "a").code == 0
    saved = Path(cli("checkpoint", "save", "a").out.strip())
    text = saved.read_text(encoding="utf-8")
    assert '"role": "user"' in text
    bad = tmp_path / "dup.json"
    bad.write_text(text.replace('"role": "user"', '"role": "user", "role": "user"', 1))
    return bad


def test_a_repeated_key_in_a_deep_file_is_refused(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    bad = _deep_file_with_a_repeated_key(cli, tmp_path)
    empty = tmp_path / "fresh"
    empty.mkdir()
    line = one_line_refusal(run_cli("--root", str(empty), "checkpoint", "import", str(bad)))
    assert str(bad) in line and "'role'" in line, line
    line = one_line_refusal(run_cli("checkpoint", "validate", str(bad)))
    assert "'role'" in line, line
    assert tree(empty) == {}


def test_a_repeated_key_in_a_json_manifest_is_refused(
    cli: Callable[..., Result], run_root: Path, tmp_path: Path
) -> None:
    manifest = tmp_path / "agent.json"
    manifest.write_text('{"kind": "Agent", "kind": "Agent", "spec": {}}')
    line = one_line_refusal(cli("session", "open", "--manifest", str(manifest)))
    assert "agent.json" in line and "'kind'" in line, line
    one_line_refusal(cli("session", "new", "--name", "a", "--manifest", str(manifest)))
    assert tree(run_root) == {}


# ---------------------------------------------------------------- 9. a refused command
@pytest.mark.parametrize(
    "make",
    [
        lambda d: ("checkpoint", "import", _write(d / "bad.json", '{"version": 2}')),
        lambda d: ("checkpoint", "import", _write(d / "bad.json", "not json")),
        lambda d: ("session", "import", _write(d / "bad.jsonl", '{"role": 1}\n')),
        lambda d: ("session", "import", _write(d / "bad.jsonl", "[1, 2]\n")),
    ],
    ids=["deep-schema", "deep-not-json", "transcript-role", "transcript-array"],
)
def test_a_refused_command_leaves_an_empty_folder_empty(
    cli: Callable[..., Result], run_root: Path, tmp_path: Path, make: Any
) -> None:
    args = make(tmp_path)
    one_line_refusal(cli(*args))
    assert tree(run_root) == {}


def _write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_the_deep_file_reader_refuses_a_repeated_key_in_process(tmp_path: Path) -> None:
    """The streamed reader (``portable.jsonstream``) and the whole-file one agree."""
    from alpstore.codec import parse_json
    from alpstore.errors import CanonicalJSONError
    from alpstore.portable.jsonstream import JsonStream

    text = json.dumps({"a": [{"role": "user"}]}).replace('"role"', '"role": "x", "role"')
    data = text.encode()
    js = JsonStream(io.BytesIO(data).read, where="f.json", limit=10**6, value_limit=10**6)
    with pytest.raises(Exception, match="'role' more than once"):
        for _key in js.members():
            js.value()
    with pytest.raises(CanonicalJSONError, match=r"f\.json: found the key 'role' more than once"):
        parse_json(data, where="f.json")
