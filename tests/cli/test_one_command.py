"""`alpstore GROUP COMMAND` builds that command alone (issue 41: Typer built every command of
the group, ~20 ms for `session`), the same command as the whole group's."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import typer
import typer.main

from alpstore.cli.main import GROUPS, _only_command, invoked_subcommand


def _built(sub: typer.Typer, group: str) -> Any:
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """Root."""

    app.add_typer(sub, name=group)
    top: Any = typer.main.get_command(app)
    built = top.commands[group]
    assert hasattr(built, "commands")
    return built


def _shape(command: Any) -> list[tuple[object, ...]]:
    return [
        (p.name, tuple(p.opts), p.required, getattr(p, "help", None), repr(p.default))
        for p in command.params
    ] + [(command.help, command.epilog, command.short_help)]


@pytest.mark.parametrize("group", GROUPS)
def test_each_command_alone_is_the_command_of_the_whole_group(group: str) -> None:
    sub = importlib.import_module(f"alpstore.cli.{group}").app
    whole = _built(sub, group)
    for name, command in whole.commands.items():
        alone = _built(_only_command(sub, name), group)
        if hasattr(command, "commands"):  # a nested group: the group whole
            assert set(alone.commands) == set(whole.commands)
            continue
        assert list(alone.commands) == [name]
        assert _shape(alone.commands[name]) == _shape(command), (group, name)


def test_a_name_that_is_no_command_keeps_the_group_whole() -> None:
    sub = importlib.import_module("alpstore.cli.session").app
    assert _only_command(sub, "exprt") is sub
    assert _only_command(sub, None) is sub


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["session", "export", "c"], "export"),
        (["--root", "r", "session", "export"], "export"),
        (["--root", "session", "checkpoint", "list"], None),
        (["--db", "u", "session", "import", "f"], "import"),
        (["session", "--help"], None),
        (["session"], None),
        (["--root", "r", "checkpoint", "export", "c@latest"], None),
    ],
)
def test_invoked_subcommand(argv: list[str], want: str | None) -> None:
    assert invoked_subcommand(argv, "session") == want
