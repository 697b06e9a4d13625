"""`alpstore debug`: commands (being built)."""

from __future__ import annotations

import typer

app = typer.Typer(help="debug commands.", no_args_is_help=True)
