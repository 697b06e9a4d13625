"""`alpstore sql`: run a read-only query against the archive, with helper functions."""

from __future__ import annotations

import datetime
import json
import math
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from alpstore.cli._common import read_store, warn, write_json_text
from alpstore.errors import Interrupted
from alpstore.sqlhelpers import DEFAULT_MAX_BYTES, DEFAULT_MAX_ROWS, DEFAULT_TIMEOUT_S, run_query

CELL_WIDTH = 80
"""On a terminal a longer cell is cut and marked … (unless --wide)."""


def command(
    ctx: typer.Context,
    query: Annotated[
        str, typer.Argument(help="One SELECT (or WITH …, VALUES, EXPLAIN) statement.")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print rows as JSON objects.")] = False,
    timeout: Annotated[
        float,
        typer.Option("--timeout", min=0, help="Stop the query after this many seconds (0: never)."),
    ] = DEFAULT_TIMEOUT_S,
    max_rows: Annotated[
        int,
        typer.Option("--max-rows", min=0, max=10**9, help="Print at most this many rows."),
    ] = DEFAULT_MAX_ROWS,
    max_bytes: Annotated[
        int,
        typer.Option(
            "--max-bytes",
            min=1,
            max=2**40,
            help="Hold at most this many bytes of cell values (and of one row).",
        ),
    ] = DEFAULT_MAX_BYTES,
    wide: Annotated[
        bool, typer.Option("--wide", help=f"Wrap long cells instead of cutting at {CELL_WIDTH}.")
    ] = False,
) -> None:
    """Run a read-only SQL query and print a table (tab-separated when not on a terminal).

    The query may only read: ATTACH, VACUUM, writes, transaction control and configuring
    PRAGMAs are refused (SQLite's authorizer; a READ ONLY transaction on PostgreSQL, rolled
    back, where only built-in functions that compute a value may be called: no lo_*,
    pg_terminate_backend, set_config, advisory locks, pg_notify or sequences). Ctrl-C stops it,
    and so does --timeout. When rows are cut (--max-rows, --max-bytes) stderr says so; a first
    row over --max-bytes is refused, before alpstore holds it.

    On SQLite, helper functions are available: blob_text(digest) (the decompressed JSON of a
    blob) and digest_hex(digest); on PostgreSQL, encode(digest, 'hex'). Both have the views
    session_lineage, session_summary and checkpoint_views.
    """
    st = read_store(ctx)
    # SQLite polls a flag from its progress handler; psycopg cancels the server-side query
    # itself when KeyboardInterrupt reaches it while it waits
    with _ctrl_c(poll=st.db.is_sqlite) as cancelled:
        result = run_query(
            st,
            query,
            timeout=timeout,
            max_rows=max_rows,
            max_bytes=max_bytes,
            cancelled=cancelled.is_set,
        )
    if as_json:
        _print_json_rows(result.columns, result.rows)
    else:
        from alpstore.cli._table import Column, Kind, print_table

        kind = Kind.WRAP if wide else Kind.CUT
        shown = ([_cell(v) for v in row] for row in result.rows)
        columns = [Column(name, kind) for name in result.columns]
        print_table(columns, shown, max_cell=None if wide else CELL_WIDTH)
    n = len(result.rows)
    if result.cut == "rows":
        warn(f"showing the first {n} rows; more were cut (--max-rows {max_rows})")
    elif result.cut == "bytes":
        warn(f"showing the first {n} rows; more were cut at {max_bytes} bytes (--max-bytes)")
    elif not as_json and sys.stdout.isatty():
        warn(f"({n} row{'s' if n != 1 else ''})")


@contextmanager
def _ctrl_c(*, poll: bool) -> Iterator[threading.Event]:
    """While the query runs, Ctrl-C stops it and is reported as one line (exit 130).

    With ``poll`` Ctrl-C only sets an event the query polls (SQLite's progress handler runs
    Python code, so it is seen within milliseconds); a second Ctrl-C interrupts at once.
    """
    event = threading.Event()

    def handler(_signum: int, _frame: Any) -> None:
        if event.is_set() or not poll:
            event.set()
            raise KeyboardInterrupt
        event.set()

    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, handler) if main else None
    try:
        yield event
    except KeyboardInterrupt as err:
        raise Interrupted("query interrupted (Ctrl-C); nothing was changed") from err
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)


def _print_json_rows(columns: list[str], rows: list[tuple[Any, ...]]) -> None:
    """A JSON array of row objects, written one row at a time (memory stays one row's worth);
    on a terminal with control and bidi characters as JSON escapes, like every ``--json``.
    """
    write_json_text("[")
    for i, row in enumerate(rows):
        doc = dict(zip(columns, (_jsonable(v) for v in row), strict=True))
        text = json.dumps(doc, ensure_ascii=False, allow_nan=False)
        write_json_text(("," if i else "") + "\n  " + text)
    write_json_text("\n]\n" if rows else "]\n")


NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
"""How ``--json`` spells the numbers JSON has no literal for (as Protobuf's JSON mapping does)."""


def _jsonable(value: Any) -> Any:
    """A cell as JSON can hold it: bytes as hex, a non-finite number as a string
    (:data:`NON_FINITE`), a date or time in ISO 8601, any other value the driver gives that
    JSON has no type for (PostgreSQL's numeric, interval, UUID …) as its text.
    """
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else NON_FINITE[repr(value)]
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return str(value)


def _cell(value: Any) -> str:
    """A cell as text, whole (a pipe gets every value whole): a float in its shortest exact
    spelling, a list or mapping (PostgreSQL arrays, JSON) as JSON, anything else as its text.
    """
    if value is None:
        return "NULL"
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float | int):
        return repr(value)
    if isinstance(value, list | tuple | dict):
        return json.dumps(_jsonable(value), ensure_ascii=False, allow_nan=False)
    return str(value)
