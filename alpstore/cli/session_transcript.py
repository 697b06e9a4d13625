"""`session import` of a Claude Code transcript or a Codex rollout: incremental, as a tree."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from alpstore.cli._common import echo, store, warn
from alpstore.cli._terminal import term

if TYPE_CHECKING:
    from alpstore.transcripts.importing import ImportResult, TranscriptFormat


def describe(result: ImportResult) -> str:
    """One line telling what an import wrote."""
    return result.describe()


def import_transcript_command(
    ctx: typer.Context,
    source: Path,
    *,
    fmt: TranscriptFormat | None,
    name: str | None,
    session_id: str | None,
    skip_bad_lines: bool,
) -> None:
    """Run one transcript import and tell what it did."""
    from alpstore.transcripts.importing import import_transcript

    st = store(ctx)
    result = import_transcript(
        st, source, fmt=fmt, session_id=session_id, name=name, skip_bad_lines=skip_bad_lines
    )
    if not result.unchanged:
        st.archive.settle()
    if result.bad:
        warn(
            f"skipped {len(result.bad)} malformed line(s) of {term(str(source))}: "
            + ", ".join(str(n) for n in result.bad)
        )
    if result.torn:
        warn(f"{term(str(source))}: its last line is still being written; the next import takes it")
    echo(term(describe(result)))
