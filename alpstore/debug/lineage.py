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

from alpstore.core.content import backtrack_doc
from alpstore.db import raw as rsql
from alpstore.errors import NotFoundError, StorageError, UsageError
from alpstore.fileio import atomic_write
from alpstore.sessions import SessionInfo
from alpstore.sessions.records import steering_text

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

    A few set-based queries, whatever the number of sessions; no recursion, however deep.

    Raises:
        NotFoundError: unknown session.
    """
    wanted_root = store.get_session(session_ref).info().root if session_ref else None
    infos = [i for i in store.list_sessions() if wanted_root is None or i.root == wanted_root]
    return build_forest(store, infos)


def build_forest(store: Store, infos: Sequence[SessionInfo]) -> list[Node]:
    """``infos`` as fork trees (a session whose parent is not among them is a root), with
    their fork turns and backtracks read in a few queries.
    """
    ids = [i.id for i in infos]
    forks = checkpoint_turns(store, [i.source_checkpoint for i in infos if i.source_checkpoint])
    bts = backtracks_of(store, ids, every=len(ids) == store.count_sessions())
    nodes: dict[str, Node] = {}
    for info in infos:
        at = forks.get(info.source_checkpoint) if info.source_checkpoint is not None else None
        nodes[info.uuid] = Node(info, at, bts.get(info.id, []))
    roots: list[Node] = []
    for node in nodes.values():
        parent = nodes.get(node.info.parent or "")
        (parent.children if parent else roots).append(node)
    return roots


CHUNK = 500
"""Ids per ``IN (…)`` list."""


def checkpoint_turns(store: Store, ids: Sequence[int]) -> dict[int, int]:
    """The turn of each checkpoint id that exists (one query per :data:`CHUNK` ids)."""
    out: dict[int, int] = {}
    wanted = sorted(set(ids))
    with store.db.read() as conn:
        for k in range(0, len(wanted), CHUNK):
            chunk = wanted[k : k + CHUNK]
            sql = f"SELECT id, turn FROM checkpoints WHERE id IN ({rsql.placeholders(len(chunk))})"
            out.update((int(i), int(t)) for i, t in rsql.fetchall(conn, sql, chunk))
    return out


_BACKTRACKS = (
    "SELECT id, session_id, steps, from_checkpoint_id, to_checkpoint_id, automatic, "
    "error_signature, created_at, steering_blob_id FROM backtracks"
)


def finite_between(between: tuple[float, float]) -> tuple[float, float]:
    """``[lo, hi)`` with infinities as the largest floats (a database compares those)."""
    big = 1.7e308
    return (max(between[0], -big), min(between[1], big))


def backtracks_of(
    store: Store,
    session_ids: Sequence[int],
    *,
    every: bool = False,
    between: tuple[float, float] | None = None,
) -> dict[int, list[dict[str, Any]]]:
    """The backtracks of the given sessions (``every``: of all of them, in one query; with
    ``between``, of one session, only those made in ``[lo, hi)``), oldest first, as
    :meth:`Store.session_backtracks` gives them; steering texts loaded in batches.
    """
    rows: list[Any] = []
    with store.db.read() as conn:
        if every:
            rows = rsql.fetchall(conn, f"{_BACKTRACKS} ORDER BY id", ())
        elif between is not None:
            (sid,) = session_ids
            where = "WHERE session_id = ? AND created_at >= ? AND created_at < ? ORDER BY id"
            rows = rsql.fetchall(conn, f"{_BACKTRACKS} {where}", (sid, *finite_between(between)))
        else:
            wanted = sorted(set(session_ids))
            for k in range(0, len(wanted), CHUNK):
                chunk = wanted[k : k + CHUNK]
                where = f"WHERE session_id IN ({rsql.placeholders(len(chunk))})"
                rows += rsql.fetchall(conn, f"{_BACKTRACKS} {where}", chunk)
            rows.sort(key=lambda r: int(r[0]))
        steering_ids = sorted({int(r[8]) for r in rows if r[8] is not None})
        steering: dict[int, Any] = {}
        for k in range(0, len(steering_ids), CHUNK):
            loaded = store.archive.load_by_ids(conn, steering_ids[k : k + CHUNK])
            steering.update({i: doc for i, (_, _, doc) in loaded.items()})
    out: dict[int, list[dict[str, Any]]] = {}
    for bt, sid, steps, src, dst, automatic, signature, at, steering_id in rows:
        doc = steering.get(int(steering_id)) if steering_id is not None else None
        text = steering_text(doc)
        out.setdefault(int(sid), []).append(
            backtrack_doc(bt, steps, src, dst, automatic, signature, at, text)
        )
    return out


def _bt_text(bt: dict[str, Any], to_turn: int | None) -> str:
    where = f" to turn {to_turn}" if to_turn is not None else ""
    auto = " (automatic)" if bt["automatic"] else ""
    steer = f": {bt['steering']}" if bt.get("steering") else ""
    return f"backtrack {bt['steps']}{where}{auto}{steer}"


def _turns(store: Store, roots: list[Node]) -> dict[int, int]:
    """Turns of every backtrack's target checkpoint."""
    return checkpoint_turns(
        store, [bt["to_checkpoint"] for n in _walk(roots) for bt in n.backtracks]
    )


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


MAX_DRAWN_DEPTH = 64
"""Fork levels a drawn tree indents; a session deeper than this is drawn under its ancestor at
that level, its text led by ``[depth N]`` (a chain 10,000 deep would otherwise need lines tens
of thousands of characters wide)."""


def lineage_branches(roots: list[Node], turns: dict[int, int]) -> list[Branch]:
    """The fork tree as lines to draw: each session, its backtracks first, then its forks
    (iterative: no recursion however deep the tree; see :data:`MAX_DRAWN_DEPTH`).
    """
    out: list[Branch] = []
    # (node, depth, the list its branch goes in, the list its deep descendants go in)
    stack: list[tuple[Node, int, list[Branch]]] = [(r, 0, out) for r in reversed(roots)]
    while stack:
        node, depth, into = stack.pop()
        text = node_text(node)
        if depth > MAX_DRAWN_DEPTH:
            text = f"[depth {depth}] {text}"
        branch = Branch(text, [Branch(backtrack_text(bt, turns)) for bt in node.backtracks])
        into.append(branch)
        kids_into = branch.children if depth < MAX_DRAWN_DEPTH else into
        stack.extend((c, depth + 1, kids_into) for c in reversed(node.children))
    return out


def tree_lines(roots: Sequence[Branch], cell: Callable[[str], str] = str) -> list[str]:
    """A forest drawn with plain guides (``├──``, ``└──``, ``│``), one line per branch, each
    text passed through ``cell`` (the command line escapes it there). Iterative.
    """
    lines: list[str] = []
    # (branch, prefix, last, top)
    stack: list[tuple[Branch, str, bool, bool]] = [(r, "", True, True) for r in reversed(roots)]
    while stack:
        b, prefix, last, top = stack.pop()
        text = cell(b.text)
        lines.append(text if top else f"{prefix}{'└── ' if last else '├── '}{text}")
        inner = prefix if top else prefix + ("    " if last else "│   ")
        n = len(b.children)
        stack.extend(
            (kid, inner, k == n - 1, False) for k, kid in reversed(list(enumerate(b.children)))
        )
    return lines


def _tree(roots: list[Node], turns: dict[int, int]) -> str:
    return "\n".join(tree_lines(lineage_branches(roots, turns))) or "(no sessions)"


def _fields(node: Node, turns: dict[int, int]) -> dict[str, Any]:
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
    }


MAX_JSON_INDENT = 64
"""Nesting levels the JSON indents; deeper ones are written at that indentation (still the
same JSON, and no line grows with the depth of the tree)."""


def lineage_json(roots: list[Node], turns: dict[int, int]) -> str:
    """The forest as nested JSON (each session with its ``children``), written as
    ``json.dumps(..., indent=2)`` would write it, but without recursion however deep.
    """
    parts: list[str] = []

    def pad(level: int) -> str:
        return "  " * min(level, MAX_JSON_INDENT)

    def value(v: Any, level: int) -> str:
        return json.dumps(v, indent=2, ensure_ascii=False).replace("\n", "\n" + pad(level))

    # work items: a node to open at a level, or literal text to write
    stack: list[tuple[Node, int, bool] | str] = []
    if not roots:
        return "[]"
    parts.append("[\n")
    stack.append("\n]")
    for k in range(len(roots) - 1, -1, -1):
        stack.append((roots[k], 1, k == len(roots) - 1))
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            parts.append(item)
            continue
        node, level, last = item
        inner = pad(level + 1)
        parts.append(pad(level) + "{\n")
        for key, v in _fields(node, turns).items():
            parts.append(f"{inner}{json.dumps(key)}: {value(v, level + 1)},\n")
        tail = "\n" + pad(level) + "}" + ("" if last else ",\n")
        if not node.children:
            parts.append(f'{inner}"children": []')
            parts.append(tail)
            continue
        parts.append(f'{inner}"children": [\n')
        stack.append("\n" + inner + "]" + tail)
        kids = node.children
        for k in range(len(kids) - 1, -1, -1):
            stack.append((kids[k], level + 2, k == len(kids) - 1))
    return "".join(parts)


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
        return lineage_json(roots, turns)
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
