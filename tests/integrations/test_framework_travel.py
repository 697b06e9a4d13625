"""Issue 40: what alpstore does to a LangGraph thread or an Agents SDK session, the framework
sees. A thread exported and imported on another run root (SQLite → PostgreSQL → SQLite)
resumes there as in the process that never moved; an import that cannot restore a thread
says so; an Agents SDK session does the same.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

pytest.importorskip("langgraph.graph", reason="langgraph is not installed (alpstore[langgraph])")

from langgraph.types import Command

from alpstore.db.names import sqlite_path_for_root
from alpstore.integrations.langgraph import AlpstoreSaver
from tests.conftest import Result, postgres_schema, run_cli
from tests.integrations._lg_travel_graph import (
    RUN,
    THREAD,
    build_graph,
    config,
    history,
    messages,
    run_script,
    states,
)


def sqlite_url(root: Path) -> str:
    """The run root's own SQLite archive, named explicitly (the PostgreSQL pass of the suite
    would otherwise put every run root's archive on PostgreSQL)."""
    sqlite_path_for_root(root).parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{sqlite_path_for_root(root)}"


def cli(root: Path, url: str, *args: str) -> Result:
    got = run_cli("--root", str(root), "--db", url, *args)
    assert "Traceback" not in got.err, got.err
    return got


def ok(root: Path, url: str, *args: str) -> str:
    got = cli(root, url, *args)
    assert got.code == 0, f"alpstore {' '.join(args)}: {got.err}"
    return got.out + got.err


@contextmanager
def saver_on(root: Path, url: str) -> Iterator[AlpstoreSaver]:
    with AlpstoreSaver.open(root, url=url) as saver:
        yield saver


def move(src: tuple[Path, str], dst: tuple[Path, str], tmp: Path) -> str:
    """``session export`` on ``src``, ``session import`` on ``dst``; the import's output."""
    out = tmp / f"t1-{dst[0].name}.jsonl.zst"
    ok(*src, "session", "export", "langgraph:t1", "-o", str(out))
    said = ok(*dst, "session", "import", str(out))
    digests = [
        json.loads(ok(*r, "session", "digest", THREAD, "--json"))["digest"] for r in (src, dst)
    ]
    assert digests[0] == digests[1]
    return said


HOPS = [
    pytest.param(("sqlite", "sqlite"), id="sqlite-sqlite"),
    pytest.param(
        ("postgresql", "sqlite"), id="sqlite-postgresql-sqlite", marks=pytest.mark.postgres
    ),
]


@pytest.mark.parametrize("hops", HOPS)
def test_a_moved_thread_resumes_as_if_it_never_moved(tmp_path: Path, hops: tuple[str, str]) -> None:
    roots = []
    for i in range(3):
        root = tmp_path / f"run{i}"
        root.mkdir()
        roots.append(root)
    with ExitStack() as stack:
        urls = [sqlite_url(roots[0])]
        for kind, root in zip(hops, roots[1:], strict=True):
            urls.append(
                stack.enter_context(postgres_schema()) if kind == "postgresql" else sqlite_url(root)
            )
        with saver_on(roots[0], urls[0]) as saver:
            graph = build_graph(saver)
            run_script(graph)
            source_history, source_states = history(saver), states(graph)
        assert len(source_history) > len(source_states)  # the subgraph's namespace too
        assert any(t[4] for t in source_history), "no pending writes to carry"
        places = list(zip(roots, urls, strict=True))
        for a, b in itertools.pairwise(places):
            said = move(a, b, tmp_path)
            assert "LangGraph thread t1 restored" in said
            with saver_on(*b) as saver:
                graph = build_graph(saver)
                assert history(saver) == source_history
                assert states(graph) == source_states
                assert graph.get_state(config()).interrupts  # still waiting at its approval
        # the next invoke: the same on the last root as on the first, which never moved
        results = []
        for root, url in (places[0], places[-1]):
            with saver_on(root, url) as saver:
                graph = build_graph(saver)
                graph.invoke(Command(resume="yes"), config(), **RUN)
                state = graph.get_state(config())
                results.append((messages(state.values), state.next, state.metadata["step"]))
            sessions = json.loads(ok(root, url, "session", "list", "--json"))
            assert [s["name"] for s in sessions if s["name"] == "langgraph:t1"] == ["langgraph:t1"]
        assert results[0] == results[1]
        assert results[0][1] == () and results[0][0][-1][0] == "ai"  # ran to the end
