"""Shared CLI plumbing: global options, opening the store, printing errors."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
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
    _read_only: bool = False

    def store(
        self,
        *,
        create: bool = True,
        migrate: bool = True,
        read_only: bool = False,
        lite_write: bool = False,
    ) -> Store:
        """Open (once) the store these options name.

        ``migrate=False`` is how a reading command opens it: nothing is created or upgraded,
        and an archive of an older schema revision is refused with a pointer to
        ``alpstore db upgrade`` (a later writer in the same command finds it at head already).
        ``read_only=True`` (see :func:`read_store`) opens it for reading alone; a later call
        that may write opens it again the usual way. ``lite_write=True`` (see
        :func:`import_store`): an SQLite archive is written on the ``sqlite3`` driver alone.
        """
        if self._store is not None and self._read_only and not read_only:
            self.close()
        if self._store is None:
            from alpstore.store import Store

            if read_only:
                self._store = Store.open(self.root, url=self.db_url, read_only=True)
            else:
                self._store = Store.open(
                    self.root,
                    url=self.db_url,
                    create=create,
                    migrate=migrate,
                    lite_write=lite_write,
                )
            self._read_only = read_only
        return self._store

    def close(self) -> None:
        """Close the store if one was opened."""
        if self._store is not None:
            self._store.close()
            self._store = None


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


def import_store(ctx: typer.Context) -> Store:
    """Open the store for an import (`session import`, `checkpoint import`): as :func:`store`,
    but an SQLite archive at head (or a new one) is written on the ``sqlite3`` driver alone,
    without SQLAlchemy (issue 41: its import is twice the bare loop's whole run); every write
    an import makes is plain SQL (``db/raw.py``). PostgreSQL and an archive to migrate open
    as :func:`store` opens them.
    """
    return options(ctx).store(lite_write=True)


def read_store(ctx: typer.Context, *, read_only: bool = False) -> Store:
    """Open the store for a command that only reads: never created, never migrated.

    ``read_only=True``, for the fast reading commands (`session list|log|show`, `debug
    diff|log|show`, `checkpoint list|show`), whose reads all run on the driver: the one place
    the command line calls ``Store.open(..., read_only=True)`` (on SQLite, the sqlite3 driver
    alone: neither SQLAlchemy nor Alembic is imported).
    """
    return options(ctx).store(create=False, migrate=False, read_only=read_only)


def print_json(value: Any) -> None:
    """Print a JSON document to stdout (pretty, UTF-8; on a terminal, control and bidi
    characters as JSON escapes — the same document, nothing a terminal would act on).
    """
    write_json_text(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False) + "\n")


def write_json_text(text: str) -> None:
    """Write (part of) a JSON document to stdout, escaped as :func:`print_json` says."""
    if stdout_is_terminal():
        from alpstore.cli._terminal import json_text

        text = json_text(text)
    sys.stdout.write(text)


QuietOpt = Annotated[
    bool, typer.Option("--quiet", "-q", help="Print only the bare value (for scripts).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
SessionArg = Annotated[str, typer.Argument(help="Session id, unique id prefix, or name.")]


def echo(text: str = "") -> None:
    """Print plain text to stdout (no markup interpretation). On a terminal every control and
    bidi character is shown as an escape (tabs and newlines kept), whichever command printed
    it: a label, a message or an event from another machine's file cannot drive the terminal.
    Piped output stays exact.
    """
    sys.stdout.write((printable(text) if stdout_is_terminal() else text) + "\n")


def echo_lines(lines: Iterable[str]) -> None:
    """Print each line made safe as :func:`~alpstore.cli._terminal.term` makes a value (a
    control character in a line is shown as an escape, piped or not), written at once (a
    6,000-line history in one write).
    """
    from alpstore.cli._terminal import term_lines

    text = term_lines(list(lines))
    sys.stdout.write(printable(text) if stdout_is_terminal() else text)


def echo_text(text: str) -> None:
    """Print one line that holds text from the archive (a message, a label, a steering text,
    an event): every control character shown as an escape, piped or not, as ``session show``
    prints (:func:`echo_lines`; a message imported from another machine's file must not write
    ESC, OSC 52 or 0x9b to whatever reads the pipe). ``--json`` output stays exact.
    """
    echo_lines([text])


def warn(text: str) -> None:
    """Print a one-line notice to stderr."""
    sys.stderr.write(f"alpstore: {text}\n")


def stdout_is_terminal() -> bool:
    """True when stdout is a terminal: tables and trees are drawn; otherwise plain text."""
    return sys.stdout.isatty()


def printable(text: str) -> str:
    """``text`` with control and bidi characters shown as escapes, never sent to the terminal
    (tabs and newlines kept: a message of several lines stays readable); one rule with
    :func:`_terminal.term`.
    """
    from alpstore.cli._terminal import term

    return term(text, keep="\t\n")
