"""`alpstore session export|digest`, and `session import` of a session file: a session travels
whole (every checkpoint, backtrack, event, the policy and the blobs they need) between archives.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from alpstore.cli._common import (
    JsonOpt,
    SessionArg,
    echo,
    import_store,
    print_json,
    read_store,
    warn,
)
from alpstore.cli._terminal import term
from alpstore.errors import UsageError
from alpstore.rules.ids import check_text


def export_command(
    ctx: typer.Context,
    session: SessionArg,
    output: Annotated[
        Path,
        typer.Option(
            "-o", "--output", help="The session file to write (.jsonl, or .zst: zstd-compressed)."
        ),
    ],
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a whole session — every checkpoint, backtrack, event, its policy and the blobs
    they need — to one self-contained file (`session import FILE` reads it on another run root).
    """
    from alpstore.portable.travel_export import export_session

    st = read_store(ctx, read_only=True)
    s = st.get_session(session)
    done = export_session(st, s.id, output, overwrite=force)
    echo(
        f"exported session {term(done.session)}: {done.checkpoints} checkpoints, "
        f"{done.blobs} blobs, {done.lines} lines to {term(str(output))} (digest {done.digest})"
    )


def digest_command(ctx: typer.Context, session: SessionArg, as_json: JsonOpt = False) -> None:
    """Print the session digest: BLAKE3 over its history and checkpoints, equal on every
    archive that holds the same session (an exported and imported copy included).
    """
    from alpstore.portable.travel_export import export_session

    st = read_store(ctx, read_only=True)
    s = st.get_session(session)
    done = export_session(st, s.id, None)
    if as_json:
        print_json({"session": done.session, "digest": done.digest})
        return
    echo(done.digest)


def read_once(ctx: typer.Context) -> bool:
    """True when a session file is imported in one read, checked inside the import's
    transaction (issue 41): the archive is an SQLite file at head, or a new run-root archive
    (removed again when the file is refused). Otherwise (PostgreSQL, an archive the opening
    would migrate, a new file a URL names) the file is checked before the archive is opened,
    so a refused file leaves it as it was.
    """
    from alpstore.cli._common import options

    opts = options(ctx)
    return reads_once(opts.root, opts.db_url)


def reads_once(root: Path, url: str | None) -> bool:
    """:func:`read_once` for the archive of run root ``root`` or at ``url``."""
    from alpstore.db.litewrite import writable_path

    path = writable_path(root, url)
    return path is not None and (url is None or path.exists())


def is_session_file(source: Path) -> bool:
    """The file starts with a session file's header (any version)."""
    from alpstore.portable.travel_header import header_of  # (not the reader: issue 41)

    return header_of(source) is not None


def import_session(
    ctx: typer.Context, source: Path, name: str | None, session_id: str | None
) -> None:
    """`session import FILE` for a session file: checked before the archive is opened."""
    from alpstore.portable.travel import check_session_file
    from alpstore.portable.travel_import import import_session_file

    if session_id is not None:
        raise UsageError("--id: a session file keeps its session's id")
    if name is not None:
        check_text(name, "--name")  # the rules of `session new`, before anything is opened
    # a refused file leaves the run root as it was: checked first, or (SQLite) read once inside
    # the import's transaction, a run-root archive created for it removed again
    checked = None if read_once(ctx) else check_session_file(source)
    st = import_store(ctx)  # SQLite: written on the sqlite3 driver alone (issue 41)
    done = import_session_file(st, source, name=name, checked=checked)
    st.archive.settle(compact=True)  # the file compacted (the import wrote packed)
    if name is None and done.file_name is not None and done.name != done.file_name:
        warn(
            f"the name {term(done.file_name)} is taken here; the session is named "
            f"{term(done.name or '')}"
        )
    if done.orphaned:
        warn(
            "its parent session is not in this archive, or not at the history the file "
            "claims (the covering digest differs): imported as a root session"
        )
    if done.framework_lost is not None:
        warn(done.framework_lost)
    if not done.ids_kept:
        warn(
            "the file's checkpoint numbers are taken in this archive: renumbered "
            "(`session log` numbers differ; the session digest does not)"
        )
    echo(
        f"imported session {term(done.session)}: {done.checkpoints} checkpoints, {done.blobs} "
        f"blobs ({done.inserted} new here) (digest {done.digest})"
    )
    for thread in done.threads:
        echo(f"LangGraph thread {term(thread)} restored: AlpstoreSaver resumes it here")
