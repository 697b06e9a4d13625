"""Lineage pictures: tree, JSON, DOT and a valid Mermaid graph of a fork tree; SVG via dot."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from alpstore.debug import lineage
from alpstore.debug.lineage import render_lineage, write_svg
from alpstore.errors import NotFoundError, UsageError
from tests.debug._debug_helpers import open_store, simple_session

NODE = re.compile(r'^    (?P<id>[A-Za-z][\w]*)(\["[^"]*"\]|>"[^"]*"\])$')
EDGE = re.compile(r'^    (?P<a>[A-Za-z]\w*) (-->\|"[^"]*"\||-\.->) (?P<b>[A-Za-z]\w*)$')


def check_mermaid(text: str) -> tuple[set[str], list[tuple[str, str]]]:
    """A strict reading of the subset of Mermaid flowchart syntax alpstore emits."""
    lines = text.splitlines()
    assert lines[0] == "graph TD"
    nodes: set[str] = set()
    edges: list[tuple[str, str]] = []
    for line in lines[1:]:
        if m := NODE.match(line):
            assert m["id"] not in nodes, f"node {m['id']} declared twice"
            nodes.add(m["id"])
        elif m := EDGE.match(line):
            edges.append((m["a"], m["b"]))
        else:
            raise AssertionError(f"not a Mermaid node or edge line: {line!r}")
    assert all(a in nodes and b in nodes for a, b in edges)
    return nodes, edges


@pytest.fixture
def family(tmp_path: Path) -> Any:
    store = open_store(tmp_path / "run")
    root = simple_session(store, 6, name='root "quoted" <x>')
    a = root.fork(store.resolve_checkpoint(f"{root.uuid}@2"), name="a")
    a.commit_turn([{"role": "user", "content": "more"}])
    a.fork(name="a1")
    root.fork(store.resolve_checkpoint(f"{root.uuid}@4"), name="b")
    root.backtrack(1, 'say "please" & ask first')
    simple_session(store, 1, name="lonely")
    yield store, root
    store.close()


def test_mermaid_is_a_valid_graph_of_the_fork_tree(family: Any) -> None:
    store, root = family
    nodes, edges = check_mermaid(render_lineage(store, root.uuid, "mermaid"))
    assert len(nodes) == 5  # 4 sessions + 1 backtrack
    assert len(edges) == 4  # 3 forks + 1 backtrack
    text = render_lineage(store, root.uuid, "mermaid")
    assert "fork @ turn 2" in text and "fork @ turn 4" in text and "#quot;please#quot;" in text
    assert "lonely" not in text
    all_nodes, _ = check_mermaid(render_lineage(store, None, "mermaid"))
    assert len(all_nodes) == 6


def test_tree_json_and_dot(family: Any) -> None:
    store, root = family
    tree = render_lineage(store, "a", "tree").splitlines()
    assert tree[0].startswith('root "quoted" <x> (') and "1 backtrack(s)" in tree[0]
    assert any("↶ backtrack 1 to turn 5" in line for line in tree)
    assert any(line.startswith("│   └── a1 (") for line in tree)
    doc = json.loads(render_lineage(store, None, "json"))
    assert [d["name"] for d in doc] == ['root "quoted" <x>', "lonely"]
    assert [c["name"] for c in doc[0]["children"]] == ["a", "b"]
    assert doc[0]["children"][0]["forked_at_turn"] == 2
    assert doc[0]["backtracks"][0]["steering"] == '/steer say "please" & ask first'
    dot = render_lineage(store, root.uuid, "dot")
    assert dot.startswith("digraph lineage {") and dot.rstrip().endswith("}")
    assert dot.count(" -> ") == 4 and '\\"please\\"' in dot


def test_bad_format_unknown_session_and_missing_dot(
    family: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, root = family
    with pytest.raises(UsageError, match="--format 'png'"):
        render_lineage(store, None, "png")
    with pytest.raises(NotFoundError):
        render_lineage(store, "nobody", "tree")
    monkeypatch.setattr(lineage, "dot_available", lambda: None)
    target = tmp_path / "l.svg"
    with pytest.raises(NotFoundError, match="Graphviz `dot`"):
        write_svg(store, root.uuid, target)
    assert not target.exists()


@pytest.mark.skipif(lineage.dot_available() is None, reason="Graphviz dot is not installed")
def test_svg_with_graphviz(family: Any, tmp_path: Path) -> None:
    store, root = family
    target = tmp_path / "l.svg"
    assert write_svg(store, root.uuid, target)
    assert "<svg" in target.read_text()


DEEP = 10_000


@pytest.fixture
def deep_chain(tmp_path: Path) -> Any:
    """A fork chain 10,000 deep under a real session (rows inserted in one transaction)."""
    from tests.ui._deep_chain import fork_chain

    store = open_store(tmp_path / "run")
    root = simple_session(store, 2, name="top")
    root.backtrack(1, "again")
    fork_chain(store, root, DEEP)
    yield store, root
    store.close()


@pytest.mark.parametrize("fmt", ["tree", "json", "dot", "mermaid"])
def test_lineage_of_a_fork_chain_10000_deep(deep_chain: Any, fmt: str) -> None:
    store, _root = deep_chain
    text = render_lineage(store, "deep9999", fmt)  # the tree the deepest session belongs to
    assert "deep9999" in text and "top" in text
    if fmt == "tree":
        lines = text.splitlines()
        assert len(lines) == DEEP + 2  # the sessions and the root's backtrack
        assert max(len(line) for line in lines) < 4 * (lineage.MAX_DRAWN_DEPTH + 2) + 200
        assert f"[depth {DEEP}] deep9999" in lines[-1]
    elif fmt == "json":
        assert len(text) < 3000 * DEEP  # the indentation stops growing: linear
        assert text.count('"session":') == DEEP + 1
        assert text.startswith("[\n  {") and text.endswith("}\n]")
    elif fmt == "mermaid":
        nodes, edges = check_mermaid(text)
        assert len(nodes) == DEEP + 2 and len(edges) == DEEP + 1
    else:
        assert text.count(" -> ") == DEEP + 1


def test_deep_lineage_json_is_the_nested_tree(deep_chain: Any) -> None:
    """The JSON is the same nested document json.dumps would write (read back with a deep
    enough stack, level by level)."""
    import sys
    import threading

    store, _ = deep_chain
    text = render_lineage(store, None, "json")
    out: list[Any] = []

    def parse() -> None:
        out.append(json.loads(text))

    # the recursion limit is the process's: restore it, or later tests run with a deeper stack
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * DEEP + 100))
    threading.stack_size(512 * 1024 * 1024)
    try:
        t = threading.Thread(target=parse)
        t.start()
        t.join()
    finally:
        threading.stack_size(0)
        sys.setrecursionlimit(limit)
    node, depth = out[0][0], 0
    while node["children"]:
        assert len(node["children"]) == 1
        node, depth = node["children"][0], depth + 1
    assert depth == DEEP and node["name"] == f"deep{DEEP - 1}"


def test_lineage_json_matches_json_dumps(family: Any) -> None:
    store, _ = family
    roots, turns = lineage.lineage_roots(store, None)

    def doc(n: lineage.Node) -> dict[str, Any]:
        return {**lineage._fields(n, turns), "children": [doc(c) for c in n.children]}

    expected = json.dumps([doc(r) for r in roots], indent=2, ensure_ascii=False)
    assert lineage.lineage_json(roots, turns) == expected
