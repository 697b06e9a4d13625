"""`alpstore sql`: run a read-only query against the archive, with helper functions."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from alpstore.cli._common import echo, print_json, store
from alpstore.sqlhelpers import run_query


def command(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="A SELECT (or WITH …) statement.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print rows as JSON objects.")] = False,
) -> None:
    """Run a read-only SQL query and print a table.

    On SQLite, helper functions are available: blob_text(digest) (the decompressed JSON of a
    blob) and digest_hex(digest); on PostgreSQL, encode(digest, 'hex'). Both have the views
    session_lineage, session_summary and checkpoint_views.
    """
    columns, rows = run_query(store(ctx, create=False), query)
    if as_json:
        print_json([dict(zip(columns, (_jsonable(v) for v in row), strict=True)) for row in rows])
        return
    shown = [[_cell(v) for v in row] for row in rows]
    widths = [min(60, max([len(c), *(len(r[i]) for r in shown)])) for i, c in enumerate(columns)]
    echo("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    echo("  ".join("-" * w for w in widths))
    for row in shown:
        echo("  ".join(v[:w].ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    echo(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    return value


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    if isinstance(value, float):
        return f"{value:.6g}"
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return " ".join(text.split())
