"""Entry point of the ``alpstore`` command: global options, command groups, error handling."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from alpstore import __version__
from alpstore.cli._common import ENV_DATABASE_URL, options
from alpstore.errors import AlpstoreError

app = typer.Typer(
    name="alpstore",
    help="alpstore: content-addressed storage for AI-agent sessions. Every message is stored "
    "once; a checkpoint is a pointer; a deep export for another machine is made on demand.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

GROUPS = (
    "archive",
    "db",
    "session",
    "checkpoint",
    "context",
    "hook",
    "debug",
)
"""Command groups, each a module ``alpstore.cli.<name>`` exposing a Typer ``app``."""

COMMANDS = ("sql", "ui")
"""Single commands, each a module ``alpstore.cli.<name>`` exposing a function ``command``."""


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"alpstore {__version__}\n")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    root_dir: Annotated[
        Path | None,
        typer.Option("--root", help="Run root holding traces/ and checkpoints/ (default: .)."),
    ] = None,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help=f"SQLAlchemy database URL (default: ${ENV_DATABASE_URL}, "
            "else SQLite in the run root).",
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Global options shared by every command."""
    opts = options(ctx)
    opts.root = (root_dir or Path.cwd()).expanduser()
    opts.db_url = db or os.environ.get(ENV_DATABASE_URL) or None
    ctx.call_on_close(opts.close)


GLOBAL_OPTIONS_WITH_VALUE = ("--root", "--db")


def invoked_name(argv: list[str]) -> str | None:
    """The command group or command named on the command line, if it is one of ours.

    Only that module is imported, so a hook run by Claude Code does not pay for SQLAlchemy.
    """
    args = iter(argv)
    for arg in args:
        if arg in GLOBAL_OPTIONS_WITH_VALUE:
            next(args, None)
        elif arg.startswith("-"):
            continue
        else:
            return arg if arg in GROUPS or arg in COMMANDS else None
    return None


def _register(only: str | None) -> None:
    for name in GROUPS:
        if only is None or name == only:
            module = importlib.import_module(f"alpstore.cli.{name}")
            app.add_typer(module.app, name=name)
    for name in COMMANDS:
        if only is None or name == only:
            module = importlib.import_module(f"alpstore.cli.{name}")
            app.command(name=name)(module.command)


if "--version" not in sys.argv[1:]:  # the version alone needs no command module
    _register(invoked_name(sys.argv[1:]) if Path(sys.argv[0]).name == "alpstore" else None)


def main() -> None:
    """Run the CLI; alpstore errors become one line on stderr and their exit code."""
    try:
        app()
    except AlpstoreError as err:
        sys.stderr.write(f"alpstore: error: {err.message}\n")
        if err.hint:
            sys.stderr.write(f"alpstore: hint: {err.hint}\n")
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("alpstore: interrupted\n")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except OSError as err:
        where = f" {err.filename}:" if getattr(err, "filename", None) else ""
        sys.stderr.write(f"alpstore: error:{where} {err.strerror or err}\n")
        sys.exit(14)
    except Exception as err:  # a bug: say so in one line, keep the traceback on demand
        if os.environ.get("ALPSTORE_DEBUG"):
            raise
        first = (str(err).strip().splitlines() or [""])[0]
        sys.stderr.write(f"alpstore: internal error: {type(err).__name__}: {first}\n")
        sys.stderr.write(
            "alpstore: hint: this is a bug; rerun with ALPSTORE_DEBUG=1 for the "
            "traceback and report it\n"
        )
        sys.exit(70)


if __name__ == "__main__":  # pragma: no cover
    main()
