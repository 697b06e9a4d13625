"""Shared CLI plumbing: global options, opening the store, printing errors."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

if TYPE_CHECKING:
    from alpstore.store import Store

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

ENV_DATABASE_URL = "ALPSTORE_DATABASE_URL"  # the same name alpstore.db.engine reads


@dataclass
class GlobalOptions:
    """What the top-level callback parsed: the run root and an optional database URL."""

    root: Path = field(default_factory=Path.cwd)
    db_url: str | None = None
    _store: Store | None = None

    def store(self, *, create: bool = True) -> Store:
        """Open (once) the store these options name."""
        if self._store is None:
            from alpstore.store import Store

            self._store = Store.open(self.root, url=self.db_url, create=create)
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
    """Open the store named by the global options of this invocation."""
    return options(ctx).store(create=create)


def print_json(value: Any) -> None:
    """Print a JSON document to stdout (pretty, UTF-8)."""
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False) + "\n")


def echo(text: str = "") -> None:
    """Print plain text to stdout (no markup interpretation)."""
    sys.stdout.write(text + "\n")


def warn(text: str) -> None:
    """Print a one-line notice to stderr."""
    sys.stderr.write(f"alpstore: {text}\n")
