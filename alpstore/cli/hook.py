"""`alpstore hook`: commands (being built)."""

from __future__ import annotations

import typer

app = typer.Typer(help="hook commands.", no_args_is_help=True)
