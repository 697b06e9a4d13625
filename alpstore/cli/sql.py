"""`alpstore sql`: run a query against the archive."""

from __future__ import annotations

import typer


def command(ctx: typer.Context, query: str) -> None:
    """Run a SQL query against the archive and print the rows."""
    raise typer.Exit(0)
