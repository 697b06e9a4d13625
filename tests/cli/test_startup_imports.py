"""Start-up guards (issue 16): help, version, hooks and continuity commands import no database
layer. Structural, not timed: `python -X importtime` lists what the real command imported.

The time itself is measured by benchmarks/bench_startup.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from alpstore.cli.main import COMMANDS, GROUPS, SUMMARIES
from tests.conftest import ALPSTORE

HEAVY = ("sqlalchemy", "alembic", "jsonschema", "alpstore.store", "alpstore.live")
"""Modules a command that opens no archive must not import."""


def imported(*args: str, stdin: bytes = b"", env: dict[str, str] | None = None) -> set[str]:
    """Top-level names of every module the installed `alpstore ARGS` imported."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", ALPSTORE, *args],
        input=stdin,
        capture_output=True,
        env={**os.environ, **(env or {})},
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    names = re.findall(rb"^import time:\s+\d+ \|\s+\d+ \|\s+(\S+)$", proc.stderr, re.M)
    assert names, "no -X importtime output"
    return {n.decode() for n in names}


def heavy_in(modules: set[str]) -> list[str]:
    return sorted(m for m in HEAVY if m in modules)


def test_top_level_help_imports_no_command_module_and_no_sqlalchemy() -> None:
    modules = imported("--help")
    assert heavy_in(modules) == []
    cli = {m for m in modules if m.startswith("alpstore.cli.")}
    assert cli <= {"alpstore.cli.main", "alpstore.cli._common"}, cli


@pytest.mark.parametrize("name", [*GROUPS, *COMMANDS])
def test_each_help_imports_no_database_layer(name: str) -> None:
    assert heavy_in(imported(name, "--help")) == []


def test_hook_and_context_commands_import_no_database_layer(tmp_path: Path) -> None:
    env = {"ALP_HOME": str(tmp_path / "alp"), "ALP_EXECUTION_ID": "exec_t"}
    subprocess.run(
        [ALPSTORE, "context", "pin", "decision", "--", "Use WAL"],
        env={**os.environ, **env},
        check=True,
        capture_output=True,
    )
    payload = json.dumps({"source": "compact"}).encode()
    assert heavy_in(imported("hook", "session-start", stdin=payload, env=env)) == []
    assert heavy_in(imported("hook", "compact-record", "pre", stdin=payload, env=env)) == []
    assert heavy_in(imported("context", "render", "exec_t", env=env)) == []
    assert heavy_in(imported("context", "status", "exec_t", env=env)) == []


def _commands_section(text: str) -> str:
    return text[text.index("Commands:") :]


def test_the_help_only_listing_matches_the_modules_own_help() -> None:
    """`alpstore --help` lists each group by ``SUMMARIES`` (no module imported); the listing
    must be the one the modules themselves give (every module registered, as when imported)."""
    env = {**os.environ, "COLUMNS": "100"}
    summaries = subprocess.run(
        [ALPSTORE, "--help"], capture_output=True, env=env, timeout=60, check=True
    )
    modules = subprocess.run(
        [sys.executable, "-c", "from alpstore.cli.main import main; main()", "--help"],
        capture_output=True,
        env=env,
        timeout=60,
        check=True,
    )
    assert _commands_section(summaries.stdout.decode()) == _commands_section(
        modules.stdout.decode()
    )
    assert set(SUMMARIES) == {*GROUPS, *COMMANDS}


def test_commands_on_an_archive_at_head_do_not_import_alembic(tmp_path: Path) -> None:
    """Alembic is for migrating: a command on an archive already at this alpstore's schema
    revision reads the revision with plain SQL and never imports it (about 0.2 s)."""
    from tests.backend_pass import database_env_for

    root = tmp_path / "run"
    env = database_env_for(root)
    subprocess.run(
        [ALPSTORE, "--root", str(root), "db", "upgrade"],
        env={**os.environ, **env},
        check=True,
        capture_output=True,
    )
    modules = imported("--root", str(root), "session", "new", "--name", "n", env=env)
    assert "sqlalchemy" in modules  # it did open the archive, for writing
    assert "alembic" not in modules
    assert "alembic" not in imported("--root", str(root), "session", "list", env=env)


READING_COMMANDS = (
    ("session", "list"),
    ("session", "log", "demo"),
    ("session", "show", "demo"),
    ("debug", "diff", "demo@1", "demo@latest"),
    ("debug", "log", "demo"),
    ("debug", "show", "demo@1"),
    ("checkpoint", "list", "--archive"),
)
"""The fast reading commands (issue 29): they open the archive with `Store.open(...,
read_only=True)` through `read_store`."""


@pytest.mark.parametrize("args", READING_COMMANDS, ids=" ".join)
def test_reading_commands_on_an_sqlite_archive_import_neither_sqlalchemy_nor_alembic(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """On SQLite a reading command reads with the sqlite3 driver alone (about 0.25 s less);
    on the PostgreSQL pass SQLAlchemy is the driver's way in, so the test is SQLite only."""
    from tests.backend_pass import sqlite_only

    sqlite_only("on PostgreSQL, SQLAlchemy is how the archive is reached")
    root = tmp_path / "run"
    run = [ALPSTORE, "--root", str(root), "session"]
    subprocess.run([*run, "new", "--name", "demo"], check=True, capture_output=True)
    for turn in ("first", "second"):
        subprocess.run(
            [*run, "append", "demo", "--role", "user", "--content", turn, "--checkpoint"],
            check=True,
            capture_output=True,
        )
    modules = imported("--root", str(root), *args)
    assert "alpstore.store" in modules  # it did open the archive
    assert sorted(m for m in ("sqlalchemy", "alembic") if m in modules) == [], args
