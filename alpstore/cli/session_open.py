"""`alpstore session open --manifest agent.yaml`: start a session under its checkpoint policy.

Applies overlays (CK-10) and the workspace config (CK-7), resolves the checkpoint directory
(CK-6), and with ``auto_resume_latest`` (CK-9) resumes the newest version 2 file in that directory
whose embedded manifest hash matches the effective manifest — or starts fresh, and says which.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from alpstore.cli._common import echo, print_json, store, warn


def open_command(
    ctx: typer.Context,
    manifest: Annotated[
        Path, typer.Option("--manifest", help="Agent manifest (YAML or JSON) with spec.checkpoint.")
    ],
    overlay: Annotated[
        list[str] | None,
        typer.Option(
            "--overlay",
            help="Overlay to apply: a bundled name (openclaw), a file, or pkg://package/path "
            "(repeatable, applied in order).",
        ),
    ] = None,
    checkpoint_dir: Annotated[
        Path | None,
        typer.Option("--checkpoint-dir", help="Checkpoint directory (overrides storage.path)."),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="Workspace config.yaml (default: beside the manifest, else in .).",
        ),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="Name of a new session.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Open a session for an Agent manifest: resume the newest matching checkpoint when the
    policy says auto_resume_latest, else start a new session. The resolved policy is recorded
    with the session: every later command on it (append, checkpoint, save) applies it.

    A manifest holding an inline credential is refused (naming its JSON path) before anything
    is stored.
    """
    cwd = Path.cwd()
    from alpstore.live import open_prepared, prepare_manifest

    prepared = prepare_manifest(
        manifest,
        overlays=list(overlay or []),
        checkpoint_dir=checkpoint_dir,
        workspace_config=config,
        cwd=cwd,
    )
    if prepared.notice:
        warn(prepared.notice)
    opened = open_prepared(store(ctx), prepared, name=name)
    bound = prepared.policy
    session = opened.live.session
    folder = bound.checkpoint_dir
    report = {
        "session": session.uuid,
        "resumed_from": str(opened.resumed_from) if opened.resumed_from else None,
        "checkpoint_dir": str(folder) if folder else None,
        "manifest_hash": bound.manifest_hash,
        "portability": bound.policy.portability,
        "policy": bound.policy.as_dict(),
        "workspace_config": str(prepared.workspace.path) if prepared.workspace.path else None,
    }
    if as_json:
        print_json(report)
    elif opened.resumed_from is not None:
        echo(f"resumed session {session.uuid} from {opened.resumed_from}")
    else:
        echo(f"started session {session.uuid} ({opened.reason})")
