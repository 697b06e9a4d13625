"""What issue 40's tests share: an explicit SQLite archive for a run root, the real `alpstore`
command on a (root, database) pair, and a session file rewritten with a fresh end line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from alpstore.db.names import sqlite_path_for_root
from alpstore.portable.travel_format import Digester
from tests.conftest import Result, run_cli


def sqlite_url(root: Path) -> str:
    """The run root's own SQLite archive, named explicitly (the PostgreSQL pass of the suite
    would otherwise put every run root's archive on PostgreSQL)."""
    sqlite_path_for_root(root).parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{sqlite_path_for_root(root)}"


def cli(root: Path, url: str, *args: str) -> Result:
    """`alpstore --root ROOT --db URL ARGS…`; never a traceback."""
    got = run_cli("--root", str(root), "--db", url, *args)
    assert "Traceback" not in got.err, got.err
    return got


def ok(root: Path, url: str, *args: str) -> str:
    """:func:`cli` that must succeed: its stdout and stderr."""
    got = cli(root, url, *args)
    assert got.code == 0, f"alpstore {' '.join(args)}: {got.err}"
    return got.out + got.err


def rewrite(path: Path, lines: list[dict[str, Any]]) -> None:
    """Write a session file's parsed ``lines`` (header first, end line last) with the end
    line's count and digest made for them, as an exporter would."""
    digester = Digester()
    for rec in lines[1:-1]:
        if rec["type"] != "blob":
            digester.feed(rec)
    end = {"type": "end", "lines": len(lines), "digest": digester.hexdigest()}
    path.write_text("".join(json.dumps(r) + "\n" for r in [*lines[:-1], end]))
