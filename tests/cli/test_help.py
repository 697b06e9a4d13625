"""Every command and group says what it does (sqlite-utils' habit)."""

from __future__ import annotations

from typing import Any

import pytest
import typer.main

from alpstore.cli.main import app
from tests.conftest import run_cli


def _walk(cmd: Any, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], Any]]:
    out = [(path, cmd)]
    if hasattr(cmd, "commands"):
        for name, sub in cmd.commands.items():
            out.extend(_walk(sub, (*path, name)))
    return out


COMMANDS = _walk(typer.main.get_command(app), ())


@pytest.mark.parametrize(
    ("path", "cmd"), COMMANDS, ids=[" ".join(p) or "alpstore" for p, _ in COMMANDS]
)
def test_every_command_has_help(path: tuple[str, ...], cmd: Any) -> None:
    text = (cmd.help or "").strip()
    assert text, f"alpstore {' '.join(path)} has no help text"
    assert not text.lower().endswith(" commands."), f"alpstore {' '.join(path)}: placeholder help"


def test_help_runs_for_every_group() -> None:
    groups = [p for p, c in COMMANDS if len(p) == 1]
    assert {"archive", "session", "checkpoint", "context", "hook", "debug", "db", "sql"} <= {
        p[0] for p in groups
    }
    for path in groups:
        result = run_cli(*path, "--help")
        assert result.code == 0, result.err
        assert "Usage" in result.out


def test_version() -> None:
    result = run_cli("--version")
    assert result.code == 0 and result.out.startswith("alpstore ")


LEAVES = [(p, c) for p, c in COMMANDS if not hasattr(c, "commands")]


@pytest.mark.parametrize(("path", "cmd"), LEAVES, ids=[" ".join(p) for p, _ in LEAVES])
def test_every_command_help_has_an_example_and_no_placeholder(
    path: tuple[str, ...], cmd: Any
) -> None:
    """`--help` ends with a line a newcomer can copy, and never promises text that is not there."""
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    text = result.output
    examples = [line.strip() for line in text.splitlines() if line.strip().startswith("Example:")]
    assert examples, f"alpstore {' '.join(path)} --help has no example line"
    assert all("alpstore " in e for e in examples)
    for placeholder in ("see below", "see above", "TODO", "[default: True]", "[default: False]"):
        assert placeholder not in text, f"alpstore {' '.join(path)} --help: {placeholder!r}"
