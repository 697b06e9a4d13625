"""Entry point of the ``alpstore`` command: global options, command groups, error handling."""

from __future__ import annotations

import copy
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

COMMANDS = ("sql", "samples", "ui", "watch")
"""Single commands, each a module ``alpstore.cli.<name>`` exposing a function ``command``."""

SUMMARIES: dict[str, str] = {
    "archive": "The content-addressed blob archive: every message and summary stored once.",
    "db": "The archive database: schema revision, upgrades, backend, sizes and row counts.",
    "session": "Agent sessions: covering heads, every-turn checkpoints, backtrack, fork, lineage.",
    "checkpoint": "Checkpoint files (mas-lab v1/v2) and the archive's checkpoints: list, show, "
    "fork, resume, save, export, import, validate.",
    "context": "Execution continuity: the checkpoint an execution must not forget across "
    "compactions (objective and pins), its render for reinjection, the compaction journal, "
    "thread settle.",
    "hook": "Runtime hooks: record compactions in the journal, reinject continuity at "
    "SessionStart, and install or uninstall them in .claude/settings.json.",
    "debug": "Reverse debugging: checkpoint log, show, diff, replay, bisect and expand.",
    "sql": "Run a read-only SQL query and print a table (tab-separated when not on a terminal).",
    "samples": "Print a sample to stdout: conversation is a 300-turn coding-agent conversation "
    "(OpenAI chat format, JSON Lines), also at alpstore/samples/conversation.jsonl in the package.",
    "watch": "Record Claude Code and Codex turns as they happen: the run root's resident "
    "recorder, which the recording hooks hand each turn to (and Codex rollouts as they grow).",
    "ui": "Serve a read-only web inspector of the archive: sessions and their lineage, "
    "timelines, the conversation at any checkpoint, diffs, bisect, archive stats and continuity.",
}
"""What `alpstore --help` lists for each group and command, so that listing them imports none of
their modules (SQLAlchemy, jsonschema...). A test checks the listing against the one built from
the modules themselves."""


EXAMPLES: dict[tuple[str, str], str] = {
    ("", "sql"): 'alpstore sql "select session, name, depth from session_lineage" --max-rows 20',
    ("", "samples"): "alpstore samples conversation > conversation.jsonl",
    ("", "watch"): "alpstore --root ~/runs/project watch --idle-timeout 3600",
    ("", "ui"): "alpstore --root run ui --port 8765   # prints the URL with its access token",
    ("archive", "put"): "alpstore archive put message.json   # prints the blob's digest",
    ("archive", "get"): "alpstore archive get 3f2a…(64 hex digits)",
    ("archive", "stats"): "alpstore archive stats --json",
    ("archive", "pack"): "alpstore archive pack --keep-loose 200",
    ("archive", "verify"): "alpstore archive verify",
    ("archive", "train-dict"): "alpstore archive train-dict --size 65536",
    ("archive", "gc"): "alpstore archive gc --dry-run",
    ("db", "upgrade"): "alpstore db upgrade",
    ("db", "current"): "alpstore db current",
    ("db", "info"): "alpstore --db postgresql+psycopg://me@host/agents db info",
    ("session", "new"): "alpstore session new --name demo --manifest agent.yaml",
    ("session", "open"): "alpstore session open --manifest agent.yaml",
    ("session", "list"): "alpstore session list --json",
    ("session", "append"): 'alpstore session append demo --role user --content "Hi" --checkpoint',
    ("session", "fold"): 'alpstore session fold demo 0 40 --summary "Setup and first fixes"',
    ("session", "checkpoint"): "alpstore session checkpoint demo --label before-tests",
    ("session", "backtrack"): 'alpstore session backtrack demo 2 "Ask before deleting anything."',
    ("session", "fork"): "alpstore session fork demo@150 --name experiment",
    ("session", "resume"): "alpstore session resume demo --at demo@120",
    ("session", "status"): "alpstore session status demo paused",
    ("session", "log"): "alpstore session log demo --no-all",
    ("session", "show"): "alpstore session show demo --at demo@120 --width 100",
    ("session", "lineage"): "alpstore session lineage --format mermaid",
    ("session", "export"): "alpstore session export demo -o demo.session.jsonl.zst",
    ("session", "digest"): "alpstore session digest demo",
    ("session", "import"): "alpstore session import conversation.jsonl --name demo",
    ("checkpoint", "list"): "alpstore checkpoint list --archive | tail -3",
    ("checkpoint", "show"): "alpstore checkpoint show archive:demo@120",
    ("checkpoint", "validate"): "alpstore checkpoint validate checkpoints/demo-turn-0120.json",
    ("checkpoint", "fork"): "alpstore checkpoint fork demo.json --output-dir forks/",
    ("checkpoint", "resume"): "alpstore checkpoint resume demo.json",
    ("checkpoint", "save"): "alpstore checkpoint save demo --zst",
    ("checkpoint", "export"): "alpstore checkpoint export demo@latest -o demo.json",
    ("checkpoint", "import"): "alpstore --root other checkpoint import demo.json",
    (
        "context",
        "prepare",
    ): 'alpstore context prepare exec_demo --policy-hash p1 --task "Fix the bug"',
    ("context", "pin"): 'ALP_EXECUTION_ID=exec_demo alpstore context pin decision -- "Use WAL"',
    ("context", "unpin"): "alpstore context unpin 6f1c… -x exec_demo",
    ("context", "render"): "alpstore context render exec_demo",
    ("context", "status"): "alpstore context status exec_demo --json",
    ("context", "validate"): "alpstore context validate exec_demo",
    ("context", "settle"): "alpstore context settle exec_demo --thread th_main",
    ("hook", "compact-record"): "alpstore hook compact-record pre --runtime claude < payload.json",
    ("hook", "session-start"): "alpstore hook session-start < payload.json",
    ("hook", "install"): "alpstore --root ~/runs/project hook install --project . --record",
    ("hook", "record"): "alpstore --root ~/runs/project hook record < stop-payload.json",
    ("hook", "codex-notify"): "alpstore --root ~/runs/project hook codex-notify",
    ("hook", "uninstall"): "alpstore hook uninstall --project .",
    ("debug", "log"): "alpstore debug log demo",
    ("debug", "show"): "alpstore debug show demo@120 --tail 5",
    ("debug", "diff"): "alpstore debug diff demo@120 experiment@latest",
    ("debug", "replay"): "alpstore debug replay demo --width 80",
    ("debug", "bisect"): "alpstore debug bisect demo --grep 'rm -rf'",
    ("debug", "expand"): "alpstore debug expand demo@latest",
}
"""One example per command, shown at the end of its --help (a test checks every command has one)."""


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


def invoked_subcommand(argv: list[str], group: str) -> str | None:
    """The word after the group ``group`` on the command line (its command, when it names one),
    or None when an option comes first (``--help``) or nothing does.
    """
    args = iter(argv)
    for arg in args:
        if arg in GLOBAL_OPTIONS_WITH_VALUE:
            next(args, None)
        elif arg == group:
            word = next(args, None)
            return None if word is None or word.startswith("-") else word
        elif not arg.startswith("-"):
            return None
    return None


def _only_command(sub: typer.Typer, name: str | None) -> typer.Typer:
    """``sub`` with its command ``name`` alone, when it has one of that name (and no group):
    Typer builds every command of a group it runs (each signature read and its annotations
    evaluated: ~20 ms for `session`'s 16), where one runs. Anything else: ``sub`` whole, so
    `--help`, a typo's suggestion and a nested group read as before.
    """
    if name is None or sub.registered_groups:
        return sub
    infos = [
        info
        for info in sub.registered_commands
        if (info.name or (info.callback.__name__.replace("_", "-") if info.callback else ""))
        == name
    ]
    if len(infos) != 1:
        return sub
    only = copy.copy(sub)
    only.registered_commands = infos
    return only


def _epilog(example: str | None) -> str | None:
    return f"\b\nExample: {example}" if example else None  # \b: click keeps the line whole


def _add_examples(group: str, sub: typer.Typer) -> None:
    """Show each command's example (``EXAMPLES``) as the epilog of its --help."""
    for info in sub.registered_commands:
        name = info.name or (info.callback.__name__.replace("_", "-") if info.callback else "")
        example = EXAMPLES.get((group, name))
        if example and not info.epilog:
            info.epilog = _epilog(example)


def _not_loaded() -> None:  # pragma: no cover - never invoked (see _register_summaries)
    raise AssertionError("a help-only command was invoked")


def _register_summaries() -> None:
    """Register every group and command by its summary alone, for `alpstore --help`.

    Used only when the command line names none of them, so none of these can be invoked: a
    named group or command is registered from its module (``_register``).
    """
    for name in GROUPS:
        app.add_typer(typer.Typer(), name=name, help=SUMMARIES[name])
    for name in COMMANDS:
        app.command(name=name, help=SUMMARIES[name])(_not_loaded)


def _register(only: str | None, command: str | None = None) -> None:
    for name in GROUPS:
        if only is None or name == only:
            module = importlib.import_module(f"alpstore.cli.{name}")
            _add_examples(name, module.app)
            app.add_typer(_only_command(module.app, command), name=name)
    for name in COMMANDS:
        if only is None or name == only:
            module = importlib.import_module(f"alpstore.cli.{name}")
            app.command(name=name, epilog=_epilog(EXAMPLES.get(("", name))))(module.command)


if Path(sys.argv[0]).name != "alpstore":  # imported (tests, python -m): every command
    _register(None)
elif "--version" not in sys.argv[1:]:  # the version alone needs no command module
    _named = invoked_name(sys.argv[1:])
    if _named is None:  # `alpstore --help`, no command, or an unknown one: the list alone
        _register_summaries()
    else:
        _register(_named, invoked_subcommand(sys.argv[1:], _named))


def main() -> None:
    """Run the CLI; alpstore errors become one line on stderr and their exit code."""
    try:
        app()
    except AlpstoreError as err:
        from alpstore.cli._terminal import term

        created = sys.modules.get("alpstore.db.sqlitefile")  # not loaded: none was created
        if created is not None:
            created.discard_new_archives()  # bad input leaves an empty folder as it was

        # messages name keys, paths and values from other people's files: escaped, one line
        sys.stderr.write(f"alpstore: error: {term(err.message)}\n")
        if err.hint:
            sys.stderr.write(f"alpstore: hint: {term(err.hint)}\n")
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("alpstore: interrupted\n")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except OSError as err:
        from alpstore.cli._terminal import term

        where = f" {err.filename}:" if getattr(err, "filename", None) else ""
        sys.stderr.write(f"alpstore: error:{term(where)} {term(err.strerror or err)}\n")
        sys.exit(14)
    except Exception as err:  # a bug: say so in one line, keep the traceback on demand
        if os.environ.get("ALPSTORE_DEBUG"):
            raise
        from alpstore.cli._terminal import term

        first = (str(err).strip().splitlines() or [""])[0]
        sys.stderr.write(f"alpstore: internal error: {type(err).__name__}: {term(first)}\n")
        sys.stderr.write(
            "alpstore: hint: this is a bug; rerun with ALPSTORE_DEBUG=1 for the "
            "traceback and report it\n"
        )
        sys.exit(70)


if __name__ == "__main__":  # pragma: no cover
    main()
