"""Issue 40 for the OpenAI Agents SDK: an ``AlpstoreSession`` exported and imported on another
run root (SQLite → PostgreSQL → SQLite) has the same items and takes more; a CLI backtrack
truncates the items and adds the steering item; a CLI fork is a session id the SDK opens; the
SDK's session id alone names the session on the command line.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="openai-agents is not installed (alpstore[openai-agents])")

from alpstore.integrations.openai_agents import AlpstoreSession
from tests.conftest import postgres_schema
from tests.integrations._framework_cli import cli, ok, sqlite_url

SID = "conv-42"
TURNS: list[list[dict[str, Any]]] = [
    [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}],
    [
        {"role": "user", "content": "weather?"},
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"role": "assistant", "content": "sunny"},
    ],
    [{"role": "user", "content": "thanks"}, {"role": "assistant", "content": "bye"}],
]


def items(root: Path, url: str, sid: str = SID) -> list[Any]:
    session = AlpstoreSession.open(sid, root, url=url)
    try:
        return asyncio.run(session.get_items())
    finally:
        session.close()


def add(root: Path, url: str, batch: list[Any], sid: str = SID) -> None:
    session = AlpstoreSession.open(sid, root, url=url)
    try:
        asyncio.run(session.add_items(batch))
    finally:
        session.close()


def make_root(tmp_path: Path, name: str) -> Path:
    root = tmp_path / name
    root.mkdir()
    return root


HOPS = [
    pytest.param(("sqlite", "sqlite"), id="sqlite-sqlite"),
    pytest.param(
        ("postgresql", "sqlite"), id="sqlite-postgresql-sqlite", marks=pytest.mark.postgres
    ),
]


@pytest.mark.parametrize("hops", HOPS)
def test_a_moved_agents_session_has_its_items_and_continues(
    tmp_path: Path, hops: tuple[str, str]
) -> None:
    roots = [make_root(tmp_path, f"run{i}") for i in range(3)]
    with ExitStack() as stack:
        urls = [sqlite_url(roots[0])]
        for kind, root in zip(hops, roots[1:], strict=True):
            urls.append(
                stack.enter_context(postgres_schema()) if kind == "postgresql" else sqlite_url(root)
            )
        for batch in TURNS:
            add(roots[0], urls[0], batch)
        source = items(roots[0], urls[0])
        places = list(zip(roots, urls, strict=True))
        for (a, ua), (b, ub) in itertools.pairwise(places):
            out = tmp_path / f"{b.name}.jsonl"
            ok(a, ua, "session", "export", SID, "-o", str(out))  # the SDK's id alone names it
            said = ok(b, ub, "session", "import", str(out))
            assert "alpstore: " not in said  # no warning: restored as it was
            assert items(b, ub) == source
        more = [{"role": "user", "content": "again"}]
        for root, url in (places[0], places[-1]):
            add(root, url, more)
        assert items(roots[0], urls[0]) == items(roots[-1], urls[-1]) == [*source, *more]


def test_an_import_onto_a_taken_agents_session_says_so(tmp_path: Path) -> None:
    a, b = make_root(tmp_path, "a"), make_root(tmp_path, "b")
    ua, ub = sqlite_url(a), sqlite_url(b)
    add(a, ua, TURNS[0])
    add(b, ub, TURNS[1])  # another conversation with the same SDK id is here
    out = tmp_path / "s.jsonl"
    ok(a, ua, "session", "export", SID, "-o", str(out))
    said = ok(b, ub, "session", "import", str(out))
    assert "Agents SDK session 'conv-42'" in said and "keeps using" in said
    assert items(b, ub) == TURNS[1]


def test_cli_backtrack_and_fork_reach_the_agents_sdk(tmp_path: Path) -> None:
    root = make_root(tmp_path, "run")
    url = sqlite_url(root)
    for batch in TURNS:
        add(root, url, batch)
    ok(root, url, "session", "backtrack", SID, "--to", f"{SID}@1", "ask", "about", "rain")
    steered = items(root, url)
    assert steered == [*TURNS[0], {"role": "user", "content": "/steer ask about rain"}]
    doc = json.loads(ok(root, url, "session", "fork", f"{SID}@2", "--json"))
    assert doc["name"] == "openai-agents:conv-42-fork" and doc["framework_id"] == "conv-42-fork"
    assert items(root, url, "conv-42-fork") == [*TURNS[0], *TURNS[1]]
    add(root, url, [{"role": "user", "content": "fork"}], "conv-42-fork")
    assert items(root, url, "conv-42-fork")[-1] == {"role": "user", "content": "fork"}
    assert items(root, url) == steered  # the session it came from is as it was


def test_ids_resolve_alone_and_hints_name_the_prefixes(tmp_path: Path) -> None:
    root = make_root(tmp_path, "run")
    url = sqlite_url(root)
    add(root, url, TURNS[0])
    assert "hello" in ok(root, url, "session", "show", SID)
    missing = cli(root, url, "session", "log", "conv-41")
    assert missing.code == 4
    assert "langgraph:" in missing.err and "openai-agents:" in missing.err
    add(root, url, TURNS[1], "x")
    session_name = AlpstoreSession("x", None).name  # type: ignore[arg-type]
    assert session_name == "openai-agents:x"
    ok(root, url, "session", "new", "--name", "langgraph:x")
    both = cli(root, url, "session", "log", "x")
    assert both.code == 4 and "ambiguous" in both.err
    assert "langgraph:x" in both.err and "openai-agents:x" in both.err
