"""`alpstore watch`: the run root's recorder in the foreground (:mod:`alpstore.cli.recorder`)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Annotated

import typer

from alpstore.cli._common import ENV_DATABASE_URL, echo, options, warn
from alpstore.errors import NotFoundError, UsageError


def _status(root: str) -> None:
    from alpstore.cli import record_hook as hook

    sock = hook.connect(root, 2.0)
    if sock is None:
        raise NotFoundError(f"no recorder runs for run root {root}")
    with sock:
        answer = hook.ask(sock, {"op": "status"}, 5.0) or {}
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(answer.get("since") or 0)))
    codex = answer.get("codex")
    echo(
        f"recorder {answer.get('pid')} for {answer.get('root')}: running since {since}, "
        f"{answer.get('recorded')} imports" + (f", watching {codex}" if codex else "")
    )


def _stop(root: str) -> None:
    from alpstore.cli import record_hook as hook

    sock = hook.connect(root, 2.0)
    if sock is None:
        raise NotFoundError(f"no recorder runs for run root {root}")
    with sock:
        answer = hook.ask(sock, {"op": "stop"}, 30.0) or {}
    lock = os.path.join(os.path.dirname(hook.socket_path(root)), hook.LOCK_NAME)
    deadline = time.monotonic() + 30
    while os.path.exists(hook.socket_path(root)) and time.monotonic() < deadline:
        time.sleep(0.02)  # it answers what reached it, then removes its socket
    echo(f"recorder {answer.get('pid')} stopped ({lock} released)")


def command(
    ctx: typer.Context,
    codex: Annotated[
        bool,
        typer.Option(
            "--codex/--no-codex",
            help="Also record Codex rollouts as they grow (its sessions folder: --codex-home, "
            "$CODEX_HOME or ~/.codex; skipped when it does not exist).",
        ),
    ] = True,
    codex_home: Annotated[
        Path | None,
        typer.Option("--codex-home", help="Codex's home folder (holding sessions/)."),
    ] = None,
    idle_timeout: Annotated[
        float,
        typer.Option(
            "--idle-timeout",
            min=0,
            help="Exit after this many seconds without a turn to record (0: run until stopped).",
        ),
    ] = 0,
    poll: Annotated[
        float,
        typer.Option("--poll", min=0.05, help="Seconds between two looks at Codex's sessions."),
    ] = 2.0,
    status: Annotated[
        bool, typer.Option("--status", help="Say whether a recorder runs for the run root.")
    ] = False,
    stop: Annotated[
        bool, typer.Option("--stop", help="Stop the run root's recorder (after its current turn).")
    ] = False,
) -> None:
    """Record Claude Code and Codex turns as they happen: the run root's resident recorder,
    which the recording hooks hand each turn to (and Codex rollouts as they grow).

    Runs in the foreground, a line per import, until Ctrl-C (or --idle-timeout). The hooks of
    `hook install --record` and `hook codex-notify` hand it each turn over a socket in the run
    root and it commits the turn in milliseconds, the archive being open already; with --codex
    (the default when Codex's sessions folder exists) it also records every Codex rollout that
    grows there. One recorder per run root: a hook starts one itself when none runs (exiting
    after 30 idle minutes).
    """
    from alpstore.cli import record_hook as hook
    from alpstore.cli import recorder as rec

    opts = options(ctx)
    root = str(opts.root.resolve())
    if status and stop:
        raise UsageError("--status and --stop: give one")
    if status:
        return _status(root)
    if stop:
        return _stop(root)
    if opts.db_url:  # the hooks name the archive through this variable; so does the recorder
        os.environ[ENV_DATABASE_URL] = opts.db_url
    folder = None
    if codex:
        folder = rec.codex_sessions(str(codex_home) if codex_home else None)
        if not os.path.isdir(folder):
            if codex_home is not None:
                raise NotFoundError(f"--codex-home {codex_home}: no sessions folder in it")
            folder = None
    recorder = rec.Recorder(
        root, idle_timeout=idle_timeout, codex_folder=folder, poll=poll, say=echo
    )
    try:
        recorder.acquire()
    except rec.Busy as busy:
        raise UsageError(
            f"a recorder already runs for run root {root} (pid {busy.pid or '?'})",
            hint="alpstore watch --status says what it does; --stop stops it",
        ) from None
    except OSError as exc:
        raise UsageError(f"{root}: cannot listen for the hooks: {exc}") from None
    watching = f"; watching {folder}" if folder else ""
    ends = f"; exits after {idle_timeout:g} s idle" if idle_timeout else "; Ctrl-C stops it"
    warn(
        f"recorder {os.getpid()} for {root}: listening on {hook.socket_path(root)}{watching}{ends}"
    )
    signal.signal(signal.SIGTERM, rec.stop_signal)
    with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C: stopped mid-import
        recorder.run()
    warn("recorder stopped")
