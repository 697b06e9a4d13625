"""`alpstore session import` of several files or a folder (issue 41).

Each file is imported in a transaction of its own (a refused file leaves nothing of itself and
the others are imported all the same), the archive is settled once at the end (the file
compacted once, not per file), a Rich progress bar (files, bytes, rate) is drawn on stderr when
it is a terminal, and one summary line is printed when the run ends. A folder stands for every
``*.jsonl`` file under it (a Claude Code projects folder), in name order.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import typer

from alpstore.cli._common import echo, import_store, warn
from alpstore.cli._terminal import term
from alpstore.cli.session_travel import import_session, is_session_file
from alpstore.errors import AlpstoreError, InputError, UsageError
from alpstore.rules.ids import text_problem


@dataclass
class Tally:
    """What a run of many files did."""

    files: int = 0
    failed: int = 0
    messages: int = 0
    sessions: int = 0
    bytes: int = 0


def transcript_files(sources: list[Path]) -> list[Path]:
    """The files ``sources`` name: each file as given, each folder's ``*.jsonl`` files (at any
    depth, in name order; links to folders not followed), but a Claude Code subagent's own file
    (``<session>/subagents/agent-*.jsonl`` beside ``<session>.jsonl``): its main transcript's
    import takes it, as a child session.

    Raises:
        UsageError: a source that does not exist, or a folder without a ``.jsonl`` file.
    """
    out: list[Path] = []
    for source in sources:
        if source.is_dir():
            found = sorted(
                p for p in source.rglob("*.jsonl") if p.is_file() and not _subagent_file(p)
            )
            if not found:
                raise UsageError(f"{source}: no .jsonl file in this folder")
            out += found
        elif source.exists():
            out.append(source)
        else:
            raise UsageError(f"{source}: no such file or folder")
    return out


def _subagent_file(path: Path) -> bool:
    folder = path.parent
    return folder.name == "subagents" and folder.parent.with_suffix(".jsonl").is_file()


def stderr_is_terminal() -> bool:
    """True when the progress bar has a terminal to draw on."""
    return sys.stderr.isatty()


@contextmanager
def _progress(files: int, total: int) -> Iterator[Callable[[int, int], None]]:
    """``advance(files, bytes)``: a Rich bar on a terminal (Rich is imported only then)."""
    if not stderr_is_terminal():
        yield lambda n, size: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns = (
        TextColumn("importing {task.fields[files]}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(file=sys.stderr)) as bar:
        task = bar.add_task("import", total=total, files=f"0/{files} files")
        count = 0

        def advance(n: int, size: int) -> None:
            nonlocal count
            count += n
            bar.update(task, advance=size, files=f"{count}/{files} files")

        yield advance


def import_many(ctx: typer.Context, sources: list[Path], fmt: str) -> None:
    """Import every file ``sources`` name, each in its own transaction; settle once.

    Raises:
        UsageError: a source that does not exist, an empty folder, a bad --format.
        InputError: some files were refused (each named on stderr as it was).
    """
    from alpstore.cli.session_travel import is_session_file, read_once
    from alpstore.importers import import_history_file
    from alpstore.portable.travel import check_session_file
    from alpstore.portable.travel_import import import_session_file
    from alpstore.transcripts.importing import TranscriptFormat, detect, import_transcript

    if fmt not in ("auto", "openai", "claude", "codex"):
        raise UsageError(f"--format {fmt!r}: expected auto, openai, claude or codex")
    files = transcript_files(sources)
    sizes = [p.stat().st_size for p in files]
    once = read_once(ctx)  # (before the archive is opened: it may be created)
    st = import_store(ctx)
    tally = Tally()
    began = time.monotonic()
    with _progress(len(files), sum(sizes)) as advance:
        for path, size in zip(files, sizes, strict=True):
            try:
                if fmt == "auto" and is_session_file(path):
                    checked = None if once else check_session_file(path)
                    done = import_session_file(st, path, name=None, checked=checked)
                    tally.messages += done.blobs
                elif fmt in ("claude", "codex") or (
                    fmt == "auto" and detect(path).format is not None
                ):  # a tree, into the session of its own id (issue 43), appended to when known
                    tree: TranscriptFormat | None = (
                        "claude-code" if fmt == "claude" else "codex" if fmt == "codex" else None
                    )
                    result = import_transcript(st, path, fmt=tree)
                    tally.messages += result.messages
                else:
                    stem = path.stem if text_problem(path.stem) is None else "imported"
                    _, parsed = import_history_file(
                        st,
                        path,
                        fmt,  # type: ignore[arg-type]
                        name=stem,
                        suffix=True,
                    )
                    tally.messages += parsed.messages
                tally.sessions += 1
            except AlpstoreError as err:  # this file's transaction rolled back; go on
                tally.failed += 1
                said = err.message if str(path) in err.message else f"{path}: {err.message}"
                warn(f"{term(said)} (not imported)")
            tally.files += 1
            tally.bytes += size
            advance(1, size)
    if tally.sessions:
        st.archive.settle(compact=True)  # one packing and compaction for every file
    spent = max(time.monotonic() - began, 1e-9)
    echo(
        f"imported {tally.sessions} of {tally.files} files ({tally.bytes:,} bytes in "
        f"{spent:.1f} s, {tally.bytes / 1e6 / spent:.2f} MB/s): {tally.messages} messages"
        + (f"; {tally.failed} refused (named above)" if tally.failed else "")
    )
    if tally.failed:
        raise InputError(f"{tally.failed} of {tally.files} files were not imported")


def import_command(
    ctx: typer.Context,
    sources: list[Path],
    name: str | None,
    session_id: str | None,
    fmt: str,
    skip_bad_lines: bool,
) -> None:
    """`session import SOURCE...`: one file (a session file, a Claude Code or Codex transcript,
    OpenAI JSONL) or several / a folder (:func:`import_many`).
    """
    if fmt not in ("auto", "openai", "claude", "codex"):
        raise UsageError(f"--format {fmt!r}: expected auto, openai, claude or codex")
    if len(sources) > 1 or sources[0].is_dir():
        if name is not None or session_id is not None:
            raise UsageError("--name and --id name one session: give one file with them")
        if skip_bad_lines:
            raise UsageError("--skip-bad-lines: one transcript at a time")
        import_many(ctx, sources, fmt)
        return
    (source,) = sources

    if fmt == "auto" and is_session_file(source):
        import_session(ctx, source, name, session_id)
        return
    from alpstore.rules.ids import check_text, text_problem
    from alpstore.transcripts.importing import detect

    if name is not None:
        check_text(name, "--name")
    if fmt in ("claude", "codex") or (fmt == "auto" and detect(source).format is not None):
        from alpstore.cli.session_transcript import import_transcript_command

        import_transcript_command(
            ctx,
            source,
            fmt="claude-code" if fmt == "claude" else "codex" if fmt == "codex" else None,
            name=name,
            session_id=session_id,
            skip_bad_lines=skip_bad_lines,
        )
        return
    from alpstore.importers import import_history_file

    if skip_bad_lines:
        raise UsageError("--skip-bad-lines: for Claude Code and Codex transcripts only")
    default = source.stem if text_problem(source.stem) is None else "imported"
    st = import_store(ctx)
    s, parsed = import_history_file(  # one read: a bad line rolls the transaction back
        st,
        source,
        fmt,  # type: ignore[arg-type]
        name=name or default,
        session_id=session_id,
        suffix=name is None,
    )
    st.archive.settle(compact=True)  # the file compacted (the import wrote packed)
    info = s.info()
    if info.name != (name or default):
        warn(
            f"the name {term(name or default)} is taken here; the session is named "
            f"{term(info.name)}"
        )
    echo(
        f"imported {parsed.messages} messages in {len(parsed.turns)} turns into session "
        f"{term(info.uuid)} ({parsed.format} format, {len(parsed.turns)} checkpoints"
        + (f", {parsed.skipped} non-message records skipped" if parsed.skipped else "")
        + ")"
    )
