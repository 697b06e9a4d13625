"""Shared CLI plumbing: global options, opening the store, printing errors."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from alpstore.store import Store

ENV_DATABASE_URL = "ALPSTORE_DATABASE_URL"  # the same name alpstore.db.engine reads

MAX_COUNT = 2**31 - 1
"""Upper bound of every count, position or width typed on the command line: a larger number is
refused as a usage error instead of overflowing a database integer."""


@dataclass
class GlobalOptions:
    """What the top-level callback parsed: the run root and an optional database URL."""

    root: Path = field(default_factory=Path.cwd)
    db_url: str | None = None
    _store: Store | None = None

    def store(self, *, create: bool = True, migrate: bool = True) -> Store:
        """Open (once) the store these options name.

        ``migrate=False`` is how a reading command opens it: nothing is created or upgraded,
        and an archive of an older schema revision is refused with a pointer to
        ``alpstore db upgrade`` (a later writer in the same command finds it at head already).
        """
        if self._store is None:
            from alpstore.store import Store

            self._store = Store.open(self.root, url=self.db_url, create=create, migrate=migrate)
        return self._store

    def close(self) -> None:
        """Close the store if one was opened."""
        if self._store is not None:
            self._store.close()
            self._store = None


@functools.cache
def console() -> Console:
    """The Rich console for tables and trees on a terminal (made on first use: Rich is not
    imported by commands that print plain text).
    """
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def options(ctx: typer.Context) -> GlobalOptions:
    """The global options of this invocation (set by the root callback)."""
    root = ctx.find_root()
    obj = root.obj
    if not isinstance(obj, GlobalOptions):
        obj = GlobalOptions(db_url=os.environ.get(ENV_DATABASE_URL) or None)
        root.obj = obj
    return obj


def store(ctx: typer.Context, *, create: bool = True) -> Store:
    """Open the store named by the global options of this invocation, migrating it to head."""
    return options(ctx).store(create=create)


def read_store(ctx: typer.Context) -> Store:
    """Open the store for a command that only reads: never created, never migrated."""
    return options(ctx).store(create=False, migrate=False)


def print_json(value: Any) -> None:
    """Print a JSON document to stdout (pretty, UTF-8)."""
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False) + "\n")


QuietOpt = Annotated[
    bool, typer.Option("--quiet", "-q", help="Print only the bare value (for scripts).")
]


def echo(text: str = "") -> None:
    """Print plain text to stdout (no markup interpretation). On a terminal every control and
    bidi character is shown as an escape (tabs and newlines kept), whichever command printed
    it: a label, a message or an event from another machine's file cannot drive the terminal.
    Piped output stays exact.
    """
    sys.stdout.write((printable(text) if stdout_is_terminal() else text) + "\n")


def warn(text: str) -> None:
    """Print a one-line notice to stderr."""
    sys.stderr.write(f"alpstore: {text}\n")


def stdout_is_terminal() -> bool:
    """True when stdout is a terminal: tables and trees are drawn; otherwise plain text."""
    return sys.stdout.isatty()


def printable(text: str) -> str:
    """``text`` with control and bidi characters shown as escapes, never sent to the terminal
    (tabs and newlines kept: a table cell may wrap); one rule with :func:`_terminal.term`.
    """
    from alpstore.cli._terminal import term

    return term(text, keep="\t\n")


def tsv_cell(text: str) -> str:
    """One tab-separated cell: backslash, tab, newline and carriage return escaped."""
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def print_table(
    columns: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    wide: bool = False,
    max_cell: int = 80,
    right: Iterable[int] = (),
) -> None:
    """Print rows under a header: a Rich table on a terminal (a cell longer than ``max_cell``
    is cut and marked …, unless ``wide``, which wraps it instead), tab-separated lines otherwise.
    """
    if not stdout_is_terminal():
        echo("\t".join(printable(tsv_cell(c)) for c in columns))
        for row in rows:
            echo("\t".join(printable(tsv_cell(c)) for c in row))
        return
    from rich.table import Table
    from rich.text import Text

    aligned = set(right)
    cells = [[printable(c) for c in row] for row in rows]
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for i, name in enumerate(columns):
        longest = max([len(name), *(len(row[i]) for row in cells)])
        table.add_column(
            name,
            justify="right" if i in aligned else "left",
            overflow="fold" if wide else "ellipsis",
            no_wrap=not wide,
            min_width=None if wide else min(longest, max_cell),  # a narrow terminal wraps lines
            max_width=None if wide else max_cell,
        )
    for row in cells:
        table.add_row(*(Text(c) for c in row))
    console().print(table)
