"""`alpstore db`: the archive database itself — schema upgrade, current revision, backend info."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from alpstore.cli._common import echo, options, print_json

if TYPE_CHECKING:
    from alpstore.db.engine import Database

app = typer.Typer(
    help="The archive database: schema revision, upgrades, backend, sizes and row counts.",
    no_args_is_help=True,
)


def _open(ctx: typer.Context, *, create: bool) -> Database:
    from alpstore.db.opening import open_database

    opts = options(ctx)
    return open_database(root=opts.root, url=opts.db_url, create=create, migrate=False)


@app.command("upgrade")
def upgrade(ctx: typer.Context) -> None:
    """Bring the archive's schema to this alpstore's newest revision (creating it if empty)."""
    from alpstore.db.migrate import SCHEMA_HEAD, current_revision, ensure_schema

    db = _open(ctx, create=True)
    try:
        before = current_revision(db)
        ensure_schema(db)
    finally:
        db.close()
    if before == SCHEMA_HEAD:
        echo(f"schema already at {SCHEMA_HEAD} (head): {db.location}")
    else:
        echo(f"schema upgraded {before or 'empty'} -> {SCHEMA_HEAD}: {db.location}")


@app.command("current")
def current(ctx: typer.Context) -> None:
    """Print the archive's schema revision and how it compares with this alpstore's head."""
    from alpstore.db.info import revision_status
    from alpstore.db.migrate import SCHEMA_HEAD, current_revision

    db = _open(ctx, create=False)
    try:
        rev = current_revision(db)
    finally:
        db.close()
    status = revision_status(rev)
    notes = {
        "current": "(head)",
        "behind": f"(head is {SCHEMA_HEAD}; `alpstore db upgrade` brings it there)",
        "newer": f"(newer than this alpstore, whose head is {SCHEMA_HEAD}; upgrade alpstore)",
        "empty": f"(no schema yet; `alpstore db upgrade` creates {SCHEMA_HEAD})",
    }
    echo(f"{rev or 'none'} {notes[status]}")


@app.command("info")
def info(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print the backend, server version, schema revision, sizes and row counts per table."""
    from alpstore.db.info import describe

    db = _open(ctx, create=False)
    try:
        found = describe(db)
    finally:
        db.close()
    if as_json:
        print_json(found.as_dict())
        return
    echo(f"backend:   {found.backend} ({found.server_version})")
    echo(f"location:  {found.location}")
    echo(f"schema:    {found.revision or 'none'} ({found.status}; head {found.head})")
    if found.total_bytes is not None:
        echo(f"size:      {_size(found.total_bytes)}")
    if found.tables:
        from alpstore.cli._table import Column, Kind, print_table

        print_table(
            [
                Column("table", Kind.KEY),
                Column("rows", Kind.KEY, True),
                Column("size", Kind.KEY, True),
            ],
            ([t.name, t.rows, "" if t.bytes is None else _size(t.bytes)] for t in found.tables),
        )


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover
