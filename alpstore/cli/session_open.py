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
from alpstore.policy import (
    apply_overlays,
    effective_portability,
    find_workspace_config,
    load_manifest,
    load_workspace_config,
    policy_of_manifest,
    resolve_checkpoint_dir,
)
from alpstore.portable.deep import import_document
from alpstore.portable.files import manifest_hash
from alpstore.portable.resume import select_latest


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
    policy says auto_resume_latest, else start a new session.
    """
    cwd = Path.cwd()
    effective = apply_overlays(load_manifest(manifest), list(overlay or []), cwd=cwd)
    workspace = (
        load_workspace_config(config)
        if config is not None
        else find_workspace_config(manifest, cwd)
    )
    policy = policy_of_manifest(effective, workspace_storage=workspace.checkpoint_store)
    portability, notice = effective_portability(policy, archive_enabled=workspace.archive_enabled)
    if notice:
        warn(notice)
    folder = resolve_checkpoint_dir(
        policy, cli_dir=checkpoint_dir, manifest_path=manifest.absolute(), cwd=cwd
    )
    st = store(ctx)
    content_hash = manifest_hash(effective)
    resumed_from: Path | None = None
    reason = "auto_resume_latest is off"
    session = None
    if policy.auto_resume_latest and folder is not None:
        selection = select_latest(folder, content_hash)
        if selection.chosen is not None:
            path = selection.chosen.path
            result = import_document(st, selection.chosen.doc, source_name=path.name)
            if result.existing:
                result.session.resume(result.checkpoint)
            session, resumed_from = result.session, path
        else:
            reason = (
                f"no version 2 checkpoint in {folder} matches manifest {content_hash[:12]}… "
                f"({selection.considered} file(s) examined)"
            )
    if session is None:
        session = st.create_session(name=name, manifest=effective)
    report = {
        "session": session.uuid,
        "resumed_from": str(resumed_from) if resumed_from else None,
        "checkpoint_dir": str(folder) if folder else None,
        "manifest_hash": content_hash,
        "portability": portability,
        "policy": policy.as_dict(),
        "workspace_config": str(workspace.path) if workspace.path else None,
    }
    if as_json:
        print_json(report)
    elif resumed_from is not None:
        echo(f"resumed session {session.uuid} from {resumed_from}")
    else:
        echo(f"started session {session.uuid} ({reason})")
