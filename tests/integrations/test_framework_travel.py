"""Issue 40: what alpstore does to a LangGraph thread or an Agents SDK session, the framework
sees. A thread exported and imported on another run root (SQLite → PostgreSQL → SQLite)
resumes there as in the process that never moved; an import that cannot restore a thread
says so; an Agents SDK session does the same.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

pytest.importorskip("langgraph.graph", reason="langgraph is not installed (alpstore[langgraph])")

from langgraph.types import Command

from alpstore.integrations.langgraph import AlpstoreSaver
from tests.conftest import postgres_schema
from tests.integrations._framework_cli import cli, ok, rewrite, sqlite_url
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


# ---------------------------------------------------------------- CLI backtrack and fork
@pytest.fixture
def thread_root(tmp_path: Path) -> tuple[Path, str]:
    """A run root holding the scripted thread (left waiting at its last approval)."""
    root = tmp_path / "run"
    root.mkdir()
    url = sqlite_url(root)
    with saver_on(root, url) as saver:
        run_script(build_graph(saver))
    return root, url


def step_ids(root: Path, url: str, thread: str = THREAD) -> dict[str, str]:
    """``SESSION@TURN.STEP`` → LangGraph checkpoint_id, from `session log --json`."""
    rows = json.loads(ok(root, url, "session", "log", thread, "--json"))
    return {r["step"]: r["checkpoint_id"] for r in rows if r.get("checkpoint_id")}


def test_cli_backtrack_writes_the_checkpoint_langgraph_continues_from(
    thread_root: tuple[Path, str],
) -> None:
    root, url = thread_root
    target = step_ids(root, url)["langgraph:t1@1.4"]  # tools answered `ls`: agent runs next
    with saver_on(root, url) as saver:
        graph = build_graph(saver)
        at = {"configurable": {"thread_id": THREAD, "checkpoint_id": target}}
        before = graph.get_state(at)
        assert messages(before.values)[-1] == ("tool", "a.txt build/")
    said = ok(root, url, "session", "backtrack", "langgraph:t1", "--to", "t1@1.4", "check", "twice")
    assert "injected /steer check twice" in said and "continues from checkpoint_id" in said
    with saver_on(root, url) as saver:
        graph = build_graph(saver)
        now = graph.get_state(config())
        assert messages(now.values) == [*messages(before.values), ("human", "/steer check twice")]
        assert now.parent_config["configurable"]["checkpoint_id"] == target
        assert now.metadata["source"] == "update" and now.next == ("agent",)
        graph.invoke(None, config(), **RUN)  # runs from the steered step: ls, approve, tools…
        done = graph.get_state(config())
        assert done.next == ()
        assert messages(done.values)[: len(before.values["messages"]) + 1] == messages(now.values)
        assert messages(done.values)[-1][1].startswith("summary of")
    # alpstore's view agrees: the head is LangGraph's messages, the rewind is recorded
    shown = json.loads(ok(root, url, "session", "show", THREAD, "--json"))
    assert len(shown) == len(done.values["messages"])
    log = json.loads(ok(root, url, "session", "log", THREAD, "--json"))
    rewinds = [r for r in log if r["type"] == "backtrack" and r.get("steering")]
    assert rewinds and "check twice" in json.dumps(rewinds[-1])


def test_cli_fork_gives_a_thread_id_langgraph_runs(thread_root: tuple[Path, str]) -> None:
    root, url = thread_root
    ids = step_ids(root, url)
    doc = json.loads(ok(root, url, "session", "fork", "t1@1.4", "--json"))
    assert doc["name"] == "langgraph:t1-fork" and doc["framework_id"] == "t1-fork"
    named = json.loads(
        ok(root, url, "session", "fork", "t1@1.4", "--name", "langgraph:x", "--json")
    )
    assert named["framework_id"] == "x"
    given = "0f0f0f0f-0000-4000-8000-000000000040"
    with_id = ok(root, url, "session", "fork", "t1@1.4", "--name", "langgraph:y", "--id", given)
    assert given in with_id and "LangGraph thread id of the fork: y" in with_id
    bad = cli(root, url, "session", "fork", "t1@1.4", "--name", "plain")
    assert bad.code != 0 and "langgraph:" in bad.err
    with saver_on(root, url) as saver:
        graph = build_graph(saver)
        source = graph.get_state(config())
        forked = graph.get_state(config("t1-fork"))
        assert forked.config["configurable"]["checkpoint_id"] == ids["langgraph:t1@1.4"]
        assert len(list(graph.get_state_history(config("t1-fork")))) == 5  # the steps before it
        at = {"configurable": {"thread_id": THREAD, "checkpoint_id": ids["langgraph:t1@1.4"]}}
        fork_at = {
            "configurable": {
                "thread_id": "t1-fork",
                "checkpoint_id": at["configurable"]["checkpoint_id"],
            }
        }
        assert graph.get_state(fork_at).values == graph.get_state(at).values
        # the agent's writes on that step came along (get_state applies a finished task's)
        assert messages(forked.values) == [
            *messages(graph.get_state(at).values),
            ("ai", "done: a.txt build/"),
        ]
        graph.invoke(None, config("t1-fork"), **RUN)
        ran = graph.get_state(config("t1-fork"))
        assert ran.next == () and messages(ran.values)[-1][1].startswith("summary of")
        assert graph.get_state(config()) == source  # the thread it came from is as it was


# ---------------------------------------------------------------- subgraphs, interrupts, resumes
def test_subgraph_namespaces_are_children_of_their_thread(thread_root: tuple[Path, str]) -> None:
    root, url = thread_root
    sessions = json.loads(ok(root, url, "session", "list", "--json"))
    thread = next(s for s in sessions if s["name"] == "langgraph:t1")
    spaces = [s for s in sessions if s["name"].startswith("langgraph:t1 summarize:")]
    assert len(spaces) == 2  # one a subgraph call
    assert all(s["parent"] == thread["session"] for s in spaces)  # none is a root
    lineage = ok(root, url, "session", "lineage", THREAD)
    assert lineage.splitlines()[0].startswith("langgraph:t1 (")
    assert sum("summarize:" in line and line[:1] in "│├└ " for line in lineage.splitlines()) == 2
    rows = json.loads(ok(root, url, "session", "log", THREAD, "--json"))  # the bare thread id
    subs = [sub for r in rows for sub in r.get("subgraphs", [])]
    assert sorted(sub["ns"] for sub in subs) == sorted(s["name"].split(" ", 1)[1] for s in spaces)
    assert all(sub["steps"] >= 2 for sub in subs)
    table = ok(root, url, "session", "log", THREAD)
    assert table.count("subgraph summarize:") == 2


def test_interrupt_and_resume_values_are_shown_as_the_json_they_are(
    thread_root: tuple[Path, str],
) -> None:
    root, url = thread_root
    rows = json.loads(ok(root, url, "session", "log", THREAD, "--json"))
    answered = next(r for r in rows if any(e["kind"] == "resume" for e in r.get("events", [])))
    kinds = {e["kind"]: e for e in answered["events"]}
    assert kinds["interrupt"]["value"] == {"question": "run this?", "cmd": "rm -rf build"}
    assert kinds["resume"] == {"kind": "resume", "node": "approve", "value": "yes"}
    assert "resumed at approve with: yes" in answered["marks"]
    assert (
        'interrupt at approve: {"cmd": "rm -rf build", "question": "run this?"}'
        in (answered["marks"])
    )
    waiting = [r for r in rows if r.get("pending_writes")]
    assert [e["kind"] for e in waiting[-1]["events"]] == ["interrupt"]  # not answered yet


def test_the_inspectors_bisect_page_tells_a_threads_steps_apart(
    thread_root: tuple[Path, str],
) -> None:
    pytest.importorskip("starlette", reason="the inspector needs alpstore[ui]")
    from starlette.testclient import TestClient

    from alpstore.ui.app import create_app
    from alpstore.ui.readonly import open_read_only
    from alpstore.ui.settings import Settings

    root, url = thread_root
    store = open_read_only(root, url)
    try:
        client = TestClient(create_app(Settings(store, "t0ken", 8765, ["testserver"])))
        assert client.get("/?token=t0ken").status_code == 200
        page = client.get("/s/langgraph:t1/bisect?grep=rm%20-rf").text
    finally:
        store.db.close()
    bad = re.search(r'id="first-bad">[^<]*<a [^>]*>([^<]*)</a>', page)
    good = re.search(r'id="last-good">[^<]*<a [^>]*>([^<]*)</a>', page)
    assert bad and good, page[:2000]
    assert re.fullmatch(r"langgraph:t1@\d+\.\d+", bad.group(1)), bad.group(1)
    assert bad.group(1) != good.group(1)  # both were "langgraph:t1@2"


# ---------------------------------------------------------------- imports that cannot restore
def test_an_import_onto_an_existing_thread_is_refused_and_writes_nothing(
    thread_root: tuple[Path, str], tmp_path: Path
) -> None:
    root, url = thread_root
    out = tmp_path / "t1.jsonl"
    ok(root, url, "session", "export", THREAD, "-o", str(out))
    other = tmp_path / "other"
    other.mkdir()
    ourl = sqlite_url(other)
    with saver_on(other, ourl) as saver:  # a thread t1 of its own
        build_graph(saver).invoke({"messages": [("user", "list files")]}, config(), **RUN)
    before = ok(other, ourl, "session", "list", "--json")
    refused = cli(other, ourl, "session", "import", str(out))
    assert refused.code != 0 and refused.err.count("\n") <= 2, refused.err
    assert "LangGraph thread 't1' already exists in this archive" in refused.err
    assert ok(other, ourl, "session", "list", "--json") == before


def test_a_file_without_the_threads_rows_imports_with_a_warning(
    thread_root: tuple[Path, str], tmp_path: Path
) -> None:
    root, url = thread_root
    out = tmp_path / "t1.jsonl"
    ok(root, url, "session", "export", THREAD, "-o", str(out))
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    old = [r for r in lines if not str(r.get("type", "")).startswith("lg_")]
    older = tmp_path / "older.jsonl"
    rewrite(older, old)  # the file an older alpstore wrote: the same lines, no thread rows
    other = tmp_path / "other"
    other.mkdir()
    said = cli(other, sqlite_url(other), "session", "import", str(older))
    assert said.code == 0, said.err
    assert "AlpstoreSaver does not see it here" in said.err  # said, not silent


KEY = "sk-proj-" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9"
"""A made-up key of the OpenAI shape, which the secret scan finds (CK-11)."""


def test_a_secret_in_a_threads_inline_values_is_refused_both_ways(tmp_path: Path) -> None:
    root = tmp_path / "run"
    root.mkdir()
    url = sqlite_url(root)
    with saver_on(root, url) as saver:
        graph = build_graph(saver)
        clean = {**config(), "metadata": {"note": "fine"}}
        graph.invoke({"messages": [("user", "list files")]}, clean, **RUN)
    out = tmp_path / "t1.jsonl"
    ok(root, url, "session", "export", THREAD, "-o", str(out))
    # the file carries the checkpoint metadata inline; a key put there is refused on import
    text = out.read_text().replace('"note":"fine"', f'"note":"{KEY}"', 1)
    assert KEY in text
    tampered = tmp_path / "tampered.jsonl"
    rewrite(tampered, [json.loads(line) for line in text.splitlines()])
    other = tmp_path / "other"
    other.mkdir()
    refused = cli(other, sqlite_url(other), "session", "import", str(tampered))
    assert refused.code != 0 and "secret" in refused.err.lower(), refused.err
    assert "lg_checkpoint" in refused.err
    # and an export of a thread holding one writes nothing
    with saver_on(root, url) as saver:
        graph = build_graph(saver)
        leaky = {**config(), "metadata": {"note": KEY}}
        graph.invoke({"messages": [("user", "list files")]}, leaky, **RUN)
    again = tmp_path / "again.jsonl"
    said = cli(root, url, "session", "export", THREAD, "-o", str(again))
    assert said.code != 0 and "secret" in said.err.lower() and not again.exists(), said.err
