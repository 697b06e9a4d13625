"""`alpstore checkpoint`: list, show, fork, resume, save, export, import and validate checkpoints.

Files are mas-lab session checkpoints (version 1 or 2, ``.json`` or ``.json.zst``); the archive's
shallow checkpoints are named ``archive:SESSION@TURN`` or ``archive:ID`` wherever a file is
accepted.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer

from alpstore.cli._common import (
    echo,
    import_store,
    options,
    print_json,
    read_store,
    store,
    warn,
    write_json_text,
)
from alpstore.cli._terminal import term
from alpstore.errors import NotFoundError, UsageError
from alpstore.rules.ids import is_number

app = typer.Typer(
    help="Checkpoint files (mas-lab v1/v2) and the archive's checkpoints: list, show, fork, "
    "resume, save, export, import, validate.",
    no_args_is_help=True,
)

ARCHIVE_PREFIX = "archive:"
_ARCHIVE_REF = re.compile(r"^([0-9]+|[^@/\\]+@(?:latest|[0-9]+))$")

CheckpointDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--checkpoint-dir",
        help="Checkpoint directory (overrides storage.path); bare file names are looked up here.",
    ),
]
RefArg = Annotated[
    str,
    typer.Argument(help="A checkpoint file, or archive:SESSION@TURN / archive:ID."),
]


def _archive_ref(ref: str) -> str | None:
    if ref.startswith(ARCHIVE_PREFIX):
        return ref[len(ARCHIVE_PREFIX) :]
    return None


def _file(ref: str, checkpoint_dir: Path | None) -> Path:
    from alpstore.portable.files import contained_path

    path = Path(ref).expanduser()
    if path.exists() or checkpoint_dir is None or path.is_absolute():
        return path
    candidate = contained_path(checkpoint_dir, ref)
    return candidate if candidate.exists() else path


def _resolve(
    ctx: typer.Context, ref: str, checkpoint_dir: Path | None, *, read: bool = False
) -> tuple[str, Any]:
    """("archive", CheckpointInfo) or ("file", Path) for a reference given on the command line.

    ``read``: the command only reads the archive (it is neither created nor migrated).
    """
    inner = _archive_ref(ref)
    if inner is None and (_file(ref, checkpoint_dir).exists() or not _ARCHIVE_REF.match(ref)):
        return "file", _file(ref, checkpoint_dir)
    st = read_store(ctx) if read else store(ctx, create=False)
    return "archive", st.resolve_checkpoint(inner if inner is not None else ref)


@app.command("list")
def list_(
    ctx: typer.Context,
    directory: Annotated[
        Path | None,
        typer.Argument(
            help="Directory of checkpoint files (default: --checkpoint-dir, else "
            "<root>/checkpoints).",
            show_default=False,
        ),
    ] = None,
    checkpoint_dir: CheckpointDirOpt = None,
    archive: Annotated[
        bool,
        typer.Option(
            "--archive/--no-archive",
            help="Also list the archive's checkpoints, as archive:SESSION@TURN names.",
        ),
    ] = False,
) -> None:
    """Print the checkpoint file names of a directory, one per line (LC-2); with --archive,
    then the archive's checkpoints as archive:SESSION@TURN names (usable wherever a file is).
    """
    from alpstore.portable.cadence import default_store_dir

    opts_root = options(ctx).root
    folder = directory or checkpoint_dir or default_store_dir(opts_root)
    if directory is not None or folder.is_dir():
        from alpstore.portable.files import list_checkpoint_files  # jsonschema: only if needed

        for path in list_checkpoint_files(folder):
            echo(term(path.name))
    if not archive:
        return
    try:
        st = read_store(ctx, read_only=True)
    except NotFoundError:
        return
    for info in st.list_sessions():
        cks = st.list_checkpoints(info.id)
        turns = [c.turn for c in cks]
        for ck in cks:
            name = f"{info.uuid}@{ck.turn}" if turns.count(ck.turn) == 1 else str(ck.id)
            echo(term(f"{ARCHIVE_PREFIX}{name}"))


@app.command("show")
def show(ctx: typer.Context, ref: RefArg, checkpoint_dir: CheckpointDirOpt = None) -> None:
    """Pretty-print a checkpoint's JSON (an archive checkpoint is hydrated first)."""
    from alpstore.portable.deep import build_export, snapshot_of_checkpoint

    kind, target = _resolve(ctx, ref, checkpoint_dir, read=True)
    if kind == "archive":
        st = read_store(ctx)
        print_json(build_export(st, snapshot_of_checkpoint(st, target)))
        return
    from alpstore.portable.reading import write_pretty

    write_pretty(target, write_json_text)  # streamed: one message in memory at a time


@app.command("validate")
def validate(ctx: typer.Context, ref: RefArg, checkpoint_dir: CheckpointDirOpt = None) -> None:
    """Check a file against checkpoint.schema.yaml and its embedded manifest hash."""
    from alpstore.portable.checking import check_file

    path = _file(ref, checkpoint_dir)
    head, entries, _ = check_file(path)
    if head.version == 1:
        echo(f"ok: {term(str(path))}: version 1 (kernel only), turn {head.turn}")
        return
    echo(
        f"ok: {term(str(path))}: version 2, session {term(head.session_id)}, turn {head.turn}, "
        f"label {term(head.label)}, {entries} entries, manifest hash matches"
    )


@app.command("fork")
def fork(
    ctx: typer.Context,
    ref: RefArg,
    output_dir: Annotated[
        Path | None,
        typer.Option("--output-dir", help="Where the fork goes (default: beside the source)."),
    ] = None,
    session_id: Annotated[
        str | None, typer.Option("--session-id", help="The new session id (default: a UUID).")
    ] = None,
    checkpoint_dir: CheckpointDirOpt = None,
) -> None:
    """Fork a version 2 checkpoint into a new session id; print the new file's path (or, for an
    archive checkpoint, the new session's id).
    """
    from alpstore.portable.files import (
        checkpoint_file_name,
        contained_path,
        fork_document,
        is_compressed,
        load_checkpoint_file,
        write_checkpoint_file,
    )
    from alpstore.sessions import new_session_uuid

    kind, target = _resolve(ctx, ref, checkpoint_dir)
    if kind == "archive":
        child = store(ctx, create=False).fork_checkpoint(target, session_id=session_id)
        echo(term(child.uuid))
        return
    doc = load_checkpoint_file(target)
    new_id = session_id or new_session_uuid()
    forked = fork_document(doc, source_name=target.name, session_id=new_id)
    name = checkpoint_file_name(new_id, forked["label"], compress=is_compressed(target))
    out = contained_path(output_dir or target.parent, name)
    write_checkpoint_file(forked, out, overwrite=False)
    echo(term(str(out)))


@app.command("resume")
def resume(
    ctx: typer.Context,
    ref: RefArg,
    manifest: Annotated[
        Path | None,
        typer.Option("--manifest", help="Agent manifest (required for a version 1 file)."),
    ] = None,
    overlay: Annotated[
        list[str] | None,
        typer.Option("--overlay", help="Overlay to apply to --manifest (repeatable)."),
    ] = None,
    checkpoint_dir: CheckpointDirOpt = None,
) -> None:
    """Load a checkpoint into the archive keeping its session id and history; print the session.

    Version 2 uses its embedded manifest; version 1 (kernel only) needs --manifest.
    """
    from alpstore.policy import load_manifest
    from alpstore.policy.overlays import apply_overlays

    kind, target = _resolve(ctx, ref, checkpoint_dir)
    st = store(ctx)
    if kind == "archive":
        session = st.get_session(target.session)
        session.resume(target)
        echo(f"resumed session {term(session.uuid)} at turn {target.turn} ({term(target.label)})")
        return
    from alpstore.portable.importing import import_file

    man = None
    if manifest is not None:
        man = apply_overlays(load_manifest(manifest), list(overlay or []), cwd=Path.cwd())
    elif overlay:
        raise UsageError("--overlay applies to --manifest; pass both")
    result = import_file(st, target, manifest=man)
    if result.existing:
        result.session.resume(result.checkpoint)
    ck = result.checkpoint
    echo(
        f"resumed session {term(result.session.uuid)} at turn {ck.turn} ({term(ck.label)}) "
        f"from {term(str(target))}"
    )


@app.command("save")
def save(
    ctx: typer.Context,
    session: Annotated[str, typer.Argument(help="Session id, unique prefix or name.")],
    checkpoint_dir: CheckpointDirOpt = None,
    label: Annotated[
        str | None, typer.Option("--label", help="Checkpoint label (default: turn-NNNN).")
    ] = None,
    zst: Annotated[bool, typer.Option("--zst", help="Write .json.zst.")] = False,
) -> None:
    """Save the session's head as a deep (self-contained) checkpoint file; print its path.

    The directory is --checkpoint-dir, else the one recorded when the session was opened with
    `session open --manifest` (CK-6: storage.path, else .mas/checkpoints beside the manifest —
    the directory auto_resume_latest reads), else storage.path of an embedded manifest, else
    <root>/checkpoints.
    """
    from alpstore.policy import policy_of_manifest
    from alpstore.portable.exporting import storage_dir

    st = store(ctx, create=False)
    live = st.open_session(session)
    folder = checkpoint_dir
    if folder is None and live.policy is None:
        policy = policy_of_manifest(live.session.manifest())
        if policy.storage_path:  # an imported manifest's path stays inside the run root
            folder = storage_dir(st, live.session, policy.storage_path, options(ctx).root)
    path = live.save(label=label, directory=folder, compress=zst)
    echo(str(path))


@app.command("export")
def export(
    ctx: typer.Context,
    ref: Annotated[
        str,
        typer.Argument(help="Session (its head) or checkpoint (ID, SESSION@TURN, SESSION@latest)."),
    ],
    output: Annotated[
        Path, typer.Option("-o", "--output", help="File to write (.json, or .json.zst).")
    ],
    force: Annotated[bool, typer.Option("--force", help="Replace an existing file.")] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print only the file's path (for scripts).")
    ] = False,
) -> None:
    """Export a deep, self-contained version 2 checkpoint file for another machine.

    The folder of --output must exist (nothing is created but the file).
    """
    from alpstore.portable.deep import snapshot_of_checkpoint, snapshot_of_head
    from alpstore.portable.exporting import write_export

    if not output.parent.is_dir():
        raise UsageError(
            f"{output}: folder {output.parent} does not exist",
            hint="create it first, or choose another --output; nothing was written",
        )
    st = read_store(ctx, read_only=True)  # reads on the driver alone: no SQLAlchemy
    inner = _archive_ref(ref) or ref
    if _ARCHIVE_REF.match(inner) and ("@" in inner or is_number(inner)):
        snap = snapshot_of_checkpoint(st, st.resolve_checkpoint(inner))
    else:
        snap = snapshot_of_head(st, st.get_session(inner))
    write_export(st, snap, output, overwrite=force)
    if quiet:
        echo(term(str(output)))
        return
    echo(
        f"wrote {term(str(output))}: deep checkpoint of session {term(snap.session.uuid)} at turn "
        f"{snap.turn} ({output.stat().st_size} bytes); `alpstore checkpoint import "
        f"{term(output.name)}` loads it on another machine"
    )


@app.command("import")
def import_(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="A version 2 checkpoint file.")],
    fork_: Annotated[
        bool, typer.Option("--fork", help="Load as a new session (parent = the file's session).")
    ] = False,
    session_id: Annotated[
        str | None, typer.Option("--session-id", help="Id of the new session (with --fork).")
    ] = None,
    name: Annotated[
        str | None,
        typer.Option("--name", help="Name of the session (default: the name the file carries)."),
    ] = None,
    checkpoint_dir: CheckpointDirOpt = None,
) -> None:
    """Import a deep checkpoint file into this archive (streamed, one transaction, re-deriving
    every digest, storing each blob once); keeps the session id and name unless --fork.

    A name already taken here is suffixed (demo-2) and said so; --name is refused when taken.
    """
    from alpstore.portable.importing import import_file
    from alpstore.rules.ids import check_text

    path = _file(str(file), checkpoint_dir)
    if name is not None:
        check_text(name, "--name")
    st = import_store(ctx)  # SQLite: written on the sqlite3 driver alone (issue 41)
    result = import_file(st, path, fork=fork_, session_id=session_id, name=name)
    if not result.existing:
        st.archive.settle(compact=True)  # the file compacted (the import wrote packed)
    ck = result.checkpoint
    if result.existing:
        echo(
            f"session {term(result.session.uuid)} already holds this file's history and state "
            f"(checkpoint {ck.id}, turn {ck.turn}, {term(ck.label)}); nothing imported"
        )
        return
    if result.renamed_from is not None:
        warn(
            f"the name {term(result.renamed_from)} is taken in this archive; the session is "
            f"named {term(result.name)}"
        )
    named = f" (name {term(result.name)})" if result.name else ""
    echo(
        f"imported session {term(result.session.uuid)}{named}: {result.entries} entries, "
        f"{result.covered} covered, {result.new_blobs} new blobs, checkpoint {ck.id} "
        f"(turn {ck.turn}, {term(ck.label)})"
    )
