"""`alpstore hook`: the commands Claude Code (or Codex) runs, and their registration.

A hook must never break the runtime that runs it: every problem goes to stderr and the exit code
stays 0.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from alpstore.cli._common import echo, print_json, warn
from alpstore.cli.context import ENV_EXECUTION, alp_home
from alpstore.continuity import hooks
from alpstore.continuity.checkpoint import read_checkpoint
from alpstore.continuity.journal import (
    PHASES,
    append_line,
    build_line,
    needs_sequence,
    next_sequence,
    source_of,
)
from alpstore.continuity.paths import ExecutionPaths
from alpstore.continuity.render import render

app = typer.Typer(
    help="Runtime hooks: record compactions in the journal, reinject continuity at "
    "SessionStart, and install or uninstall them in .claude/settings.json.",
    no_args_is_help=True,
)

ENV_BRIDGE = "ALP_COMPACT_BRIDGE"

ProjectOpt = Annotated[
    Path,
    typer.Option("--project", help="Project folder holding .claude/settings.json (default: .)."),
]
ExecutableOpt = Annotated[
    str,
    typer.Option("--executable", help="How the hook commands invoke alpstore."),
]


def _read_stdin() -> bytes:
    return sys.stdin.buffer.read(hooks.MAX_PAYLOAD_BYTES)


def _inside_execution() -> ExecutionPaths | None:
    execution_id = os.environ.get(ENV_EXECUTION)
    if not execution_id:
        warn(f"hook: {ENV_EXECUTION} is not set (not inside an execution); nothing done")
        return None
    return ExecutionPaths.of(alp_home(), execution_id)


@app.command("codex-notify")
def codex_notify(ctx: typer.Context) -> None:
    """Print the `notify` line that makes Codex record every turn (add it to
    ~/.codex/config.toml): Codex runs it after each turn with the turn's JSON.
    """
    import shlex

    from alpstore.cli._common import options

    line = record_command_line(options(ctx).root, "codex")
    echo("notify = [" + ", ".join(json.dumps(p) for p in shlex.split(line)) + "]")


@app.command("compact-record")
def compact_record(
    phase: Annotated[str, typer.Argument(metavar="pre|post", help="Which side of the compaction.")],
    runtime: Annotated[
        str, typer.Option("--runtime", help="The runtime running the hook: claude or codex.")
    ] = "claude",
) -> None:
    """Append one line to the compaction journal from the hook payload on stdin (exit 0 always)."""
    try:
        payload = _read_stdin()
        paths = _inside_execution()
        if paths is None:
            return
        try:
            checkpoint = read_checkpoint(paths)
            policy_hash = checkpoint.policy_hash if checkpoint and checkpoint.policy_hash else None
        except Exception:  # an unverifiable checkpoint only costs the journal its policyHash
            policy_hash = None
        source = source_of(runtime, payload)
        seq = None
        if phase in PHASES and needs_sequence(runtime, source):
            seq = next_sequence(paths, phase)
        line = build_line(
            execution_id=paths.execution_id,
            policy_hash=policy_hash,
            runtime=runtime,
            phase=phase,
            source=source,
            seq=seq,
        )
        append_line(paths, line)
    except Exception as exc:  # the hook never fails the runtime
        warn(f"hook compact-record: {exc}; nothing recorded")


@app.command("session-start")
def session_start() -> None:
    """Print the continuity as SessionStart additionalContext after a compaction or resume."""
    try:
        source = hooks.session_start_source(_read_stdin())
        if source not in hooks.REINJECT_SOURCES:
            return
        paths = _inside_execution()
        if paths is None:
            return
        checkpoint = read_checkpoint(paths)
        if checkpoint is None:
            return
        rendering = render(checkpoint)
        if not rendering.is_empty:
            print_json(hooks.session_start_output(rendering.text))
    except Exception as exc:  # the hook never fails the runtime
        warn(f"hook session-start: {exc}; nothing injected")


RecordOpt = Annotated[
    bool,
    typer.Option(
        "--record",
        help="Also register the recording hook (Stop, SubagentStop, PreCompact): every turn "
        "imported into the archive of --root as it happens.",
    ),
]


def record_command_line(root: Path, runtime: str = "claude") -> str:
    """The command a runtime runs to record: this Python, the light hook module, the run root
    (absolute: the agent runs it from its own folder). A database URL is never written into a
    settings file (it may hold a password): the hook reads ``ALPSTORE_DATABASE_URL``.
    """
    import shlex

    code = "from alpstore.cli.record_hook import main; main()"
    parts = [sys.executable, "-c", code, "--root", str(root.resolve())]
    if runtime != "claude":
        parts += ["--runtime", runtime]
    return " ".join(shlex.quote(p) for p in parts)


@app.command("record")
def record(
    ctx: typer.Context,
    runtime: Annotated[
        str, typer.Option("--runtime", help="claude (payload on stdin) or codex (notify).")
    ] = "claude",
    payload: Annotated[
        str | None, typer.Argument(help="Codex notify's JSON (Claude Code's comes on stdin).")
    ] = None,
) -> None:
    """Import what the hook's transcript gained since the last run, now (the installed hook
    runs `alpstore.cli.record_hook` directly, which does the same in a detached process).
    Never fails: problems go to traces/hooks/record.log, the exit code is 0.
    """
    from alpstore.cli._common import options
    from alpstore.cli.record_hook import main

    if runtime not in ("claude", "codex"):
        warn(f"hook record: --runtime {runtime!r}: expected claude or codex; nothing done")
        return
    root = options(ctx).root
    argv = ["--root", str(root), "--runtime", runtime, "--foreground"]
    main(argv + ([payload] if payload is not None else []))


@app.command("install")
def install_command(
    ctx: typer.Context,
    project: ProjectOpt = Path("."),
    executable: ExecutableOpt = "alpstore",
    record: RecordOpt = False,
) -> None:
    """Register the hooks in .claude/settings.json (compaction ones with ALP_COMPACT_BRIDGE=1;
    the recording hook with --record).
    """
    from alpstore.cli._common import options

    bridge = os.environ.get(ENV_BRIDGE) == "1"
    path = hooks.settings_path(project)
    entries = hooks.hook_entries(executable, bridge=bridge)
    if record:
        entries += hooks.record_entries(record_command_line(options(ctx).root))
    added = hooks.install(path, entries)
    for entry in added:
        matcher = f" [{entry.matcher}]" if entry.matcher else ""
        echo(f"added {entry.event}{matcher}: {entry.command}")
    if not added:
        echo(f"{path}: already installed; unchanged")
    if not bridge:
        warn(f"compaction journal hooks not registered ({ENV_BRIDGE}=1 enables them)")


@app.command("uninstall")
def uninstall_command(
    project: ProjectOpt = Path("."),
    executable: ExecutableOpt = "alpstore",
) -> None:
    """Remove exactly the hook commands `hook install` adds (the recording hook too, whatever
    run root it names), leaving every other hook alone.
    """
    path = hooks.settings_path(project)
    entries = hooks.hook_entries(executable, bridge=True)
    entries += hooks.installed_record_entries(path)
    removed = hooks.uninstall(path, entries)
    echo(f"{path}: removed {removed} hook command(s)")
