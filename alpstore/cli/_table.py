r"""Tables and trees on the command line: drawn with Rich on a terminal, plain text in a pipe.

On a terminal a table is a ``rich.table.Table`` fitted to the terminal's width. Each column has
a kind: a ``KEY`` column (ids, numbers) is never cut or wrapped; a ``CUT`` column (labels,
names) stays one line and, when it must be cut (too long for the terminal, or longer than
``max_cell``), ends in ``…``; a ``WRAP`` column (free text) wraps. When the terminal is too
narrow even then, the table is printed wider than the terminal (which wraps its lines): a value
is never dropped or cut without the mark. Every cell and header goes through
:func:`alpstore.cli._terminal.term`, so a control or bidi character from a file is shown as an
escape, never obeyed.

In a pipe a table is tab-separated: a header line, then one line per row, every value whole. A
value is printed as it is, except that a backslash, tab, newline and carriage return are
written ``\\``, ``\t``, ``\n``, ``\r`` (PostgreSQL's ``COPY`` text convention) and any other
control or bidi character as its ``term`` escape (``\x1b``, ``\u202e``): a row is always one
line, nothing in it can drive a terminal the pipe ends in, and since the backslash is escaped
too the value can be read back exactly.

A tree is a ``rich.tree.Tree`` on a terminal; in a pipe, indented lines with plain guides, each
node's text escaped like a table cell.

Rich is imported only when something is drawn on a terminal (start-up time of ``alpstore``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Final

from alpstore.cli._common import stdout_is_terminal
from alpstore.cli._terminal import term

if TYPE_CHECKING:
    from alpstore.debug.lineage import Branch

GAP: Final = 2
"""Spaces between two columns on a terminal."""

MIN_CUT: Final = 8
"""A CUT column is not narrowed below this many characters (or its header) to fit a terminal."""

MIN_WRAP: Final = 16
"""A WRAP column is not narrowed below this many characters (or its header) to fit a terminal."""


class Kind(Enum):
    """How a column behaves when its values do not fit (see the module's docstring)."""

    KEY = "key"
    CUT = "cut"
    WRAP = "wrap"


@dataclass(frozen=True)
class Column:
    """A table column: its header, how it gives way, and its alignment."""

    header: str
    kind: Kind = Kind.CUT
    right: bool = False
    """Right-aligned on a terminal (numbers)."""


CHECKPOINT_COLUMNS = (
    Column("CKPT", Kind.KEY, right=True),
    Column("TURN", Kind.KEY, right=True),
    Column("LABEL"),
    Column("TRIGGER"),
    Column("HEAD", Kind.KEY, right=True),
)
"""The leading columns of a checkpoint log (`session log`, `debug log`)."""


def plain_cell(text: str) -> str:
    r"""``text`` as one tab-separated value: backslash, tab, newline and CR as ``\\ \t \n \r``,
    any other control or bidi character as its :func:`term` escape. Reversible.

    A printable text without a backslash is its own value (``str.isprintable`` is false for every
    character :func:`term` escapes): the common cell, an id or a number, is not scanned twice.
    """
    if text.isprintable() and "\\" not in text:
        return text
    escaped = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
    return term(escaped.replace("\r", "\\r"))


def print_table(
    columns: Sequence[Column | str],
    rows: Iterable[Sequence[object]],
    *,
    max_cell: int | None = None,
) -> None:
    """Print ``rows`` under ``columns``: a Rich table on a terminal, tab-separated lines in a pipe.

    A plain string column is a CUT column. ``max_cell``: on a terminal, a CUT value longer than
    this is cut and marked ``…`` even when the terminal is wide enough (a pipe gets it whole).
    """
    cols = [c if isinstance(c, Column) else Column(c) for c in columns]
    if not stdout_is_terminal():
        lines = ["\t".join(plain_cell(c.header) for c in cols)]
        lines += ["\t".join([plain_cell(str(v)) for v in row]) for row in rows]
        lines.append("")
        sys.stdout.write("\n".join(lines))  # one write: 30,000 rows in one call
        return
    _draw_table(cols, [[term(v) for v in row] for row in rows], max_cell)


def _draw_table(cols: list[Column], cells: list[list[str]], max_cell: int | None) -> None:
    from rich.cells import cell_len
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(highlight=False)
    headers = [term(c.header) for c in cols]
    natural = []
    floors = []
    for i, (col, head) in enumerate(zip(cols, headers, strict=True)):
        width = max([cell_len(head), *(cell_len(row[i]) for row in cells)])
        if col.kind is Kind.CUT and max_cell is not None:
            width = min(width, max(max_cell, cell_len(head)))
        least = {Kind.KEY: width, Kind.CUT: MIN_CUT, Kind.WRAP: MIN_WRAP}[col.kind]
        natural.append(width)
        floors.append(min(width, max(least, cell_len(head))))
    gaps = GAP * max(len(cols) - 1, 0)
    widths = fit_widths(natural, floors, [c.kind for c in cols], console.width - gaps)
    table = Table(
        box=None,
        padding=(0, GAP // 2),
        pad_edge=False,
        show_edge=False,
        header_style="bold",
        width=sum(widths) + gaps,  # as computed: Rich never narrows it further
    )
    for col, head, width in zip(cols, headers, widths, strict=True):
        wraps = col.kind is Kind.WRAP
        table.add_column(
            Text(head),
            justify="right" if col.right else "left",
            width=width,
            no_wrap=not wraps,
            overflow="fold" if wraps else "ellipsis",
        )
    for row in cells:
        table.add_row(*(Text(c) for c in row))
    console.print(table, crop=False)


def fit_widths(natural: list[int], floors: list[int], kinds: list[Kind], room: int) -> list[int]:
    """Column widths that fit in ``room`` characters: WRAP columns give way first, then CUT
    columns, the widest first, none below its floor; KEY columns never. When even the floors do
    not fit, the floors (the table is then wider than ``room``).
    """
    widths = list(natural)
    excess = sum(widths) - room
    for kind in (Kind.WRAP, Kind.CUT):
        movable = [i for i, k in enumerate(kinds) if k is kind]
        while excess > 0:
            live = [i for i in movable if widths[i] > floors[i]]
            if not live:
                break
            top = max(widths[i] for i in live)
            tops = [i for i in live if widths[i] == top]
            level = max([widths[i] for i in live if widths[i] < top] + [floors[i] for i in tops])
            if (top - level) * len(tops) <= excess:
                for i in tops:
                    widths[i] = level
                excess -= (top - level) * len(tops)
            else:
                each, rest = divmod(excess, len(tops))
                for n, i in enumerate(tops):
                    widths[i] -= each + (1 if n < rest else 0)
                excess = 0
    return widths


def print_tree(roots: Sequence[Branch], *, empty: str) -> None:
    """Print a forest: Rich trees on a terminal (each text escaped, long lines wrapped under
    their guides); in a pipe, plain guides and each text escaped as a table cell. ``empty`` is
    printed when there is nothing.
    """
    if not roots:
        sys.stdout.write(empty + "\n")
        return
    if not stdout_is_terminal():
        from alpstore.debug.lineage import tree_lines

        sys.stdout.write("\n".join(tree_lines(roots, cell=plain_cell)) + "\n")
        return
    from rich.console import Console
    from rich.text import Text
    from rich.tree import Tree

    console = Console(highlight=False)
    for root in roots:
        tree = Tree(Text(term(root.text)), guide_style="dim")
        stack = [(tree, root)]  # iterative: a fork chain may be thousands deep
        while stack:
            into, branch = stack.pop()
            stack.extend((into.add(Text(term(c.text))), c) for c in branch.children)
        console.print(tree)
