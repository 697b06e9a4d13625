"""The fork tree of an archive as text, JSON, Graphviz DOT or Mermaid, with backtracks marked;
and an SVG through Graphviz ``dot`` when it is installed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alpstore.errors import NotFoundError, StorageError, UsageError
from alpstore.fileio import atomic_write
from alpstore.sessions import SessionInfo

if TYPE_CHECKING:
    from alpstore.core.store import CoreStore as Store

FORMATS = ("tree", "json", "dot", "mermaid")
DOT_TIMEOUT = 60.0


@dataclass
class Node:
    """A session in the fork tree."""

    info: SessionInfo
    forked_at_turn: int | None
    backtracks: list[dict[str, Any]]
    children: list[Node] = field(default_factory=list)

    @property
    def title(self) -> str:
        """``name (id8)`` or the id alone."""
        short = self.info.uuid[:8]
        name = self.info.name
        return f"{name} ({short})" if name and name != self.info.uuid else name or short


def lineage_forest(store: Store, session_ref: str | None = None) -> list[Node]:
    """The fork trees: every root session with its descendants (only the tree that
    ``session_ref`` belongs to when given), children in creation order.

    Raises:
        NotFoundError: unknown session.
    """
    infos = store.list_sessions()
    wanted_root = store.get_session(session_ref).info().root if session_ref else None
    nodes: dict[str, Node] = {}
    for info in infos:
        if wanted_root is not None and info.root != wanted_root:
            continue
        at = None
        if info.source_checkpoint is not None:
            try:
                at = store.get_checkpoint(info.source_checkpoint).turn
            except NotFoundError:
                at = None
        nodes[info.uuid] = Node(info, at, store.session_backtracks(info.id))
    roots: list[Node] = []
    for node in nodes.values():
        parent = nodes.get(node.info.parent or "")
        (parent.children if parent else roots).append(node)
    return roots


def _bt_text(bt: dict[str, Any], to_turn: int | None) -> str:
    where = f" to turn {to_turn}" if to_turn is not None else ""
    auto = " (automatic)" if bt["automatic"] else ""
    steer = f": {bt['steering']}" if bt.get("steering") else ""
    return f"backtrack {bt['steps']}{where}{auto}{steer}"


def _turns(store: Store, roots: list[Node]) -> dict[int, int]:
    """Turns of every backtrack's target checkpoint."""
    out: dict[int, int] = {}
    stack = list(roots)
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        for bt in node.backtracks:
            try:
                out[bt["to_checkpoint"]] = store.get_checkpoint(bt["to_checkpoint"]).turn
            except NotFoundError:
                continue
    return out


def node_text(node: Node) -> str:
    """One session of the tree as a line: title, fork point, status, turn, size, backtracks."""
    i = node.info
    fork = f"forked at turn {node.forked_at_turn}, " if node.forked_at_turn is not None else ""
    return f"{node.title} {fork}{i.status}, turn {i.turn}, {i.head_length} entries" + (
        f", {len(node.backtracks)} backtrack(s)" if node.backtracks else ""
    )


def backtrack_text(bt: dict[str, Any], turns: dict[int, int]) -> str:
    """One backtrack of the tree as a line (``↶ backtrack N to turn T: steering``)."""
    return f"↶ {_bt_text(bt, turns.get(bt['to_checkpoint']))}"


def lineage_roots(store: Store, session_ref: str | None) -> tuple[list[Node], dict[int, int]]:
    """The fork trees and the turns their backtracks went to (for drawing them elsewhere)."""
    roots = lineage_forest(store, session_ref)
    return roots, _turns(store, roots)


@dataclass
class Branch:
    """One line of a drawn tree and the lines under it."""

    text: str
    children: list[Branch] = field(default_factory=list)


def lineage_branches(roots: list[Node], turns: dict[int, int]) -> list[Branch]:
    """The fork tree as lines to draw: each session, its backtracks first, then its forks."""

    def branch(node: Node) -> Branch:
        marks = [Branch(backtrack_text(bt, turns)) for bt in node.backtracks]
        return Branch(node_text(node), [*marks, *(branch(c) for c in node.children)])

    return [branch(r) for r in roots]


def tree_lines(roots: Sequence[Branch], cell: Callable[[str], str] = str) -> list[str]:
    """A forest drawn with plain guides (``├──``, ``└──``, ``│``), one line per branch, each
    text passed through ``cell`` (the command line escapes it there).
    """
    lines: list[str] = []

    def visit(b: Branch, prefix: str, last: bool, top: bool) -> None:
        text = cell(b.text)
        lines.append(text if top else f"{prefix}{'└── ' if last else '├── '}{text}")
        inner = prefix if top else prefix + ("    " if last else "│   ")
        for n, kid in enumerate(b.children):
            visit(kid, inner, n == len(b.children) - 1, False)

    for root in roots:
        visit(root, "", True, True)
    return lines


def _tree(roots: list[Node], turns: dict[int, int]) -> str:
    return "\n".join(tree_lines(lineage_branches(roots, turns))) or "(no sessions)"


def _doc(node: Node, turns: dict[int, int]) -> dict[str, Any]:
    i = node.info
    return {
        "session": i.uuid,
        "name": i.name,
        "status": i.status,
        "turn": i.turn,
        "head_length": i.head_length,
        "parent": i.parent,
        "root": i.root,
        "forked_from_checkpoint": i.source_checkpoint,
        "forked_at_turn": node.forked_at_turn,
        "backtrack_count": i.backtrack_count,
        "backtracks": [
            {
                "steps": bt["steps"],
                "to_checkpoint": bt["to_checkpoint"],
                "to_turn": turns.get(bt["to_checkpoint"]),
                "automatic": bt["automatic"],
                "error_signature": bt["error_signature"],
                "steering": bt["steering"],
            }
            for bt in node.backtracks
        ],
        "children": [_doc(c, turns) for c in node.children],
    }


def _walk(roots: list[Node]) -> list[Node]:
    out: list[Node] = []
    stack = list(reversed(roots))
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(node.children))
    return out


def _dot_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _dot(roots: list[Node], turns: dict[int, int]) -> str:
    lines = [
        "digraph lineage {",
        "  rankdir=TB;",
        '  node [shape=box, style=rounded, fontname="Helvetica"];',
        '  edge [fontname="Helvetica", fontsize=10];',
    ]
    ids = {n.info.uuid: f"s{k}" for k, n in enumerate(_walk(roots))}
    for node in _walk(roots):
        i = node.info
        label = f"{node.title}\n{i.status}, turn {i.turn}, {i.head_length} entries"
        lines.append(f"  {ids[i.uuid]} [label={_dot_str(label)}];")
    for node in _walk(roots):
        me = ids[node.info.uuid]
        for child in node.children:
            label = _dot_str(f"fork @ turn {child.forked_at_turn}")
            lines.append(f"  {me} -> {ids[child.info.uuid]} [label={label}];")
        for k, bt in enumerate(node.backtracks):
            bid = f"{me}_bt{k}"
            text = _short(_bt_text(bt, turns.get(bt["to_checkpoint"])))
            lines.append(f"  {bid} [label={_dot_str('↶ ' + text)}, shape=note, color=firebrick];")
            lines.append(f"  {me} -> {bid} [style=dashed, color=firebrick];")
    lines.append("}")
    return "\n".join(lines)


def _short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _mm(text: str) -> str:
    """A Mermaid label: quoted, with quotes and markup-significant characters as entities."""
    for ch, ent in (("&", "#amp;"), ('"', "#quot;"), ("<", "#lt;"), (">", "#gt;")):
        text = text.replace(ch, ent)
    return '"' + text.replace("\n", "<br/>") + '"'


def _mermaid(roots: list[Node], turns: dict[int, int]) -> str:
    lines = ["graph TD"]
    ids = {n.info.uuid: f"s{k}" for k, n in enumerate(_walk(roots))}
    for node in _walk(roots):
        i = node.info
        label = f"{node.title}\n{i.status}, turn {i.turn}, {i.head_length} entries"
        lines.append(f"    {ids[i.uuid]}[{_mm(label)}]")
        for k, bt in enumerate(node.backtracks):
            text = _short(_bt_text(bt, turns.get(bt["to_checkpoint"])))
            lines.append(f"    {ids[i.uuid]}_bt{k}>{_mm('↶ ' + text)}]")
    for node in _walk(roots):
        me = ids[node.info.uuid]
        for child in node.children:
            label = _mm(f"fork @ turn {child.forked_at_turn}")
            lines.append(f"    {me} -->|{label}| {ids[child.info.uuid]}")
        for k, _ in enumerate(node.backtracks):
            lines.append(f"    {me} -.-> {me}_bt{k}")
    return "\n".join(lines)


def render_lineage(store: Store, session_ref: str | None, fmt: str) -> str:
    """The fork tree (of ``session_ref``'s family, or of every session) in ``fmt``:
    ``tree``, ``json``, ``dot`` or ``mermaid``.

    Raises:
        UsageError: an unknown format.
        NotFoundError: an unknown session.
    """
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    roots = lineage_forest(store, session_ref)
    turns = _turns(store, roots)
    if fmt == "json":
        return json.dumps([_doc(r, turns) for r in roots], indent=2, ensure_ascii=False)
    if fmt == "dot":
        return _dot(roots, turns)
    if fmt == "mermaid":
        return _mermaid(roots, turns)
    return _tree(roots, turns)


def dot_available() -> str | None:
    """The path of Graphviz ``dot``, or None when it is not installed."""
    return shutil.which("dot")


def write_svg(store: Store, session_ref: str | None, path: Path | str) -> bool:
    """Render the fork tree to an SVG file with Graphviz ``dot`` (atomic: temp, fsync, rename).
    Returns True once written.

    Raises:
        NotFoundError: Graphviz ``dot`` is not installed (nothing is written).
        StorageError: ``dot`` failed or the file cannot be written.
    """
    exe = dot_available()
    if exe is None:
        raise NotFoundError(
            "--svg needs Graphviz `dot`, which is not installed (not on PATH); no SVG written",
            hint="install Graphviz (e.g. `apt-get install graphviz`), or render "
            "`--format dot` output elsewhere",
        )
    source = render_lineage(store, session_ref, "dot")
    try:
        proc = subprocess.run(
            [exe, "-Tsvg"],
            input=source.encode("utf-8"),
            capture_output=True,
            timeout=DOT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise StorageError(f"Graphviz dot could not render the lineage ({err})") from err
    if proc.returncode != 0:
        first = (proc.stderr.decode("utf-8", "replace").strip().splitlines() or ["?"])[0]
        raise StorageError(f"Graphviz dot failed (exit {proc.returncode}): {first}")
    atomic_write(Path(path), proc.stdout, create_parents=False)
    return True
