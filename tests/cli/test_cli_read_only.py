"""Reading commands stay read-only: they never create an archive, and never upgrade an older one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alpstore.db import open_database
from alpstore.db.migrate import SCHEMA_HEAD, alembic_config, current_revision

READERS = [
    ("session", "show", "demo"),
    ("debug", "bisect", "demo", "--grep", "x"),
    ("checkpoint", "export", "demo", "-o", "out.json"),
    ("sql", "select 1"),
]


def test_readers_in_an_empty_folder_create_nothing(cli: Any, run_root: Path) -> None:
    for args in READERS:
        result = cli(*args, cwd=run_root)
        assert result.code == 4, (args, result.err)
        assert result.err.startswith("alpstore: error: no archive at"), (args, result.err)
        assert "Traceback" not in result.err
    assert list(run_root.iterdir()) == []
    listed = cli("checkpoint", "list", "--archive")
    assert listed.code == 0 and listed.out == "", listed.err
    for args in (("session", "list"), ("session", "list", "--json")):
        sessions = cli(*args)  # a mistyped --root is not an empty archive (issue 40)
        assert sessions.code == 4 and sessions.out == "", sessions.err
        assert sessions.err.startswith("alpstore: error: no archive at"), sessions.err
    assert list(run_root.iterdir()) == []


def test_readers_refuse_an_older_archive_and_leave_it_as_it_was(cli: Any, run_root: Path) -> None:
    assert cli("session", "new", "--name", "demo").code == 0
    assert (
        cli("session", "append", "demo", "--role", "user", "--content", "hi", "--checkpoint").code
        == 0
    )
    db = open_database(root=run_root, migrate=False)
    command.downgrade(alembic_config(db), "0002")
    older = current_revision(db)
    db.close()
    assert older == "0002"
    for args in [("session", "list"), *READERS]:
        result = cli(*args)
        assert result.code == 6, (args, result.err)
        assert "older than this alpstore's" in result.err and "alpstore db upgrade" in result.err
    db = open_database(root=run_root, migrate=False)
    assert current_revision(db) == "0002"  # nothing upgraded behind the user's back
    db.close()
    assert cli("db", "upgrade").code == 0
    shown = cli("session", "show", "demo")
    assert shown.code == 0 and "hi" in shown.out, shown.err
    db = open_database(root=run_root, migrate=False)
    assert current_revision(db) == SCHEMA_HEAD
    db.close()
