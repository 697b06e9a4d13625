"""``AlpstoreSaver.from_conn_string`` / ``AsyncAlpstoreSaver.from_conn_string`` (issue 32).

LangGraph's savers open as context managers on a connection string; ours take a run root, a
database URL or ``":memory:"``. A real graph runs through each, on SQLite and on PostgreSQL; the
block closes the saver and its store; bad strings fail with one line and change nothing; the
README's LangGraph blocks run as printed in an empty folder.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.graph", reason="langgraph is not installed (alpstore[langgraph])")

from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, MessagesState, StateGraph

from alpstore.errors import AlpstoreError, StorageError, UsageError
from alpstore.integrations.langgraph import AlpstoreSaver, AsyncAlpstoreSaver
from tests.backend_pass import database_env_for
from tests.conftest import Backend

README = Path(__file__).resolve().parents[2] / "README.md"


def chatbot(state: MessagesState) -> dict[str, Any]:
    return {"messages": [("assistant", f"you said: {state['messages'][-1].content}")]}


def graph_on(saver: AlpstoreSaver) -> Any:
    builder = StateGraph(MessagesState).add_node("chatbot", chatbot).add_edge(START, "chatbot")
    return builder.compile(checkpointer=saver)


def config(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


def contents(state: Any) -> list[str]:
    return [m.content for m in state.values["messages"]]


@pytest.fixture(params=["root", "url"])
def target(request: pytest.FixtureRequest, backend: Backend) -> tuple[str, dict[str, Any]]:
    """``(conn_string, keyword arguments)`` naming ``backend``'s archive: its run root, or a
    database URL (SQLite: a ``sqlite:///`` file; PostgreSQL: the schema's URL, with the root).
    """
    if request.param == "root":
        if backend.is_postgresql:
            pytest.skip("a run root alone names its SQLite archive (the 'url' case is PostgreSQL)")
        return str(backend.root), {}
    if backend.is_postgresql:
        return backend.url or "", {"root": backend.root}
    return f"sqlite:///{backend.root / 'lg.db'}", {"root": backend.root}


class CloseSpy:
    """Records that a saver's store was closed (wraps the instance's ``close``)."""

    def __init__(self, saver: AlpstoreSaver) -> None:
        self.closed = 0
        inner = saver.store.close

        def close() -> None:
            self.closed += 1
            inner()

        saver.store.close = close  # type: ignore[method-assign]


# ---------------------------------------------------------------- sync
def test_a_graph_runs_through_from_conn_string_and_the_block_closes_it(
    target: tuple[str, dict[str, Any]],
) -> None:
    conn_string, kwargs = target
    with AlpstoreSaver.from_conn_string(conn_string, **kwargs) as saver:
        assert isinstance(saver, AlpstoreSaver)
        spy = CloseSpy(saver)
        graph = graph_on(saver)
        graph.invoke({"messages": [("user", "hi")]}, config("t1"))
        graph.invoke({"messages": [("user", "again")]}, config("t1"))
        assert spy.closed == 0
    assert spy.closed == 1
    # stored, not kept in the process: a new saver on the same string reads it back
    with AlpstoreSaver.from_conn_string(conn_string, **kwargs) as again:
        state = graph_on(again).get_state(config("t1"))
        assert contents(state) == ["hi", "you said: hi", "again", "you said: again"]
        tuples = list(again.list(config("t1")))
        assert len(tuples) >= 4


def test_the_block_closes_the_saver_when_the_body_raises(
    target: tuple[str, dict[str, Any]],
) -> None:
    conn_string, kwargs = target
    spies: list[CloseSpy] = []
    with (
        pytest.raises(RuntimeError, match="boom"),
        AlpstoreSaver.from_conn_string(conn_string, **kwargs) as saver,
    ):
        spies.append(CloseSpy(saver))
        graph_on(saver).invoke({"messages": [("user", "hi")]}, config("t2"))
        raise RuntimeError("boom")
    spy = spies[0]
    assert spy.closed == 1


def test_memory_is_a_temporary_run_root_removed_on_exit() -> None:
    with AlpstoreSaver.from_conn_string(":memory:") as saver:
        root = saver.store.root
        graph = graph_on(saver)
        graph.invoke({"messages": [("user", "hi")]}, config("m"))
        assert contents(graph.get_state(config("m"))) == ["hi", "you said: hi"]
        assert root.is_dir()
    assert not root.exists()
    with AlpstoreSaver.from_conn_string(":memory:") as fresh:  # a new one each time
        assert graph_on(fresh).get_state(config("m")).values == {}


# ---------------------------------------------------------------- async
@pytest.mark.parametrize("entry", ["AsyncAlpstoreSaver.from_conn_string", "afrom_conn_string"])
def test_a_graph_runs_through_the_async_entry_point(
    target: tuple[str, dict[str, Any]], entry: str
) -> None:
    conn_string, kwargs = target
    opener = (
        AsyncAlpstoreSaver.from_conn_string
        if entry.startswith("Async")
        else AlpstoreSaver.afrom_conn_string
    )
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with opener(conn_string, **kwargs) as saver:
            assert isinstance(saver, AlpstoreSaver)
            seen["saver"], seen["spy"] = saver, CloseSpy(saver)
            graph = graph_on(saver)
            await graph.ainvoke({"messages": [("user", "hi")]}, config("a1"))
            state = await graph.aget_state(config("a1"))
            seen["contents"] = contents(state)
            assert seen["spy"].closed == 0

    asyncio.run(main())
    assert seen["contents"] == ["hi", "you said: hi"]
    assert seen["spy"].closed == 1
    assert seen["saver"]._executor is None  # the worker threads stopped
    with AlpstoreSaver.from_conn_string(conn_string, **kwargs) as again:
        assert contents(graph_on(again).get_state(config("a1"))) == ["hi", "you said: hi"]


def test_async_memory_is_removed_on_exit() -> None:
    async def main() -> Path:
        async with AsyncAlpstoreSaver.from_conn_string(":memory:") as saver:
            await graph_on(saver).ainvoke({"messages": [("user", "hi")]}, config("m"))
            return saver.store.root

    root = asyncio.run(main())
    assert not root.exists()


# ---------------------------------------------------------------- bad strings
def one_line(err: pytest.ExceptionInfo[AlpstoreError]) -> str:
    message = str(err.value)
    assert message and "\n" not in message, message
    assert "Traceback" not in message
    return message


@pytest.mark.parametrize(
    ("conn_string", "error", "words"),
    [
        ("mysql://me@host/db", UsageError, "unsupported backend 'mysql'"),
        ("postgresql+psycopg://me@host:notaport/db", UsageError, "not valid"),
        ("sqlite://", None, None),  # the in-memory spelling: fine
        ("", UsageError, "empty connection string"),
        ("   ", UsageError, "empty connection string"),
    ],
)
def test_a_bad_url_fails_with_one_line(
    conn_string: str,
    error: type[AlpstoreError] | None,
    words: str | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # a URL's run root defaults to the working directory
    if error is None or words is None:
        with AlpstoreSaver.from_conn_string(conn_string) as saver:
            assert saver.store.root != tmp_path
        return
    with pytest.raises(error) as err, AlpstoreSaver.from_conn_string(conn_string):
        pass
    assert words in one_line(err)
    assert list(tmp_path.iterdir()) == []  # nothing made in the run root

    async def main() -> None:
        async with AsyncAlpstoreSaver.from_conn_string(conn_string):
            pass

    with pytest.raises(error) as aerr:
        asyncio.run(main())
    assert words in one_line(aerr)


def test_a_run_root_that_is_a_file_fails_with_one_line_and_the_file_is_kept(
    tmp_path: Path,
) -> None:
    path = tmp_path / "checkpoints.sqlite"  # what a SqliteSaver user would pass
    path.write_bytes(b"not a folder")
    with pytest.raises(StorageError) as err, AlpstoreSaver.from_conn_string(str(path)):
        pass
    assert "is not a directory" in one_line(err)
    assert path.read_bytes() == b"not a folder"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints.sqlite"]


def test_a_sqlite_url_on_a_foreign_database_is_refused_and_kept(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "other.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE checkpoints (id TEXT)")
    con.commit()
    con.close()
    before = path.read_bytes()
    url = f"sqlite:///{path}"
    with pytest.raises(AlpstoreError) as err, AlpstoreSaver.from_conn_string(url, root=tmp_path):
        pass
    one_line(err)
    assert path.read_bytes() == before


# ---------------------------------------------------------------- the README
def langgraph_blocks() -> list[str]:
    """The ```python blocks of the README's LangGraph section, in order."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Use it from LangGraph", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return [b for b in blocks if "alpstore.integrations.langgraph" in b]


@pytest.fixture
def empty_folder(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "empty"
    folder.mkdir()
    yield folder


def test_the_readme_langgraph_blocks_run_as_printed_in_an_empty_folder(
    empty_folder: Path,
) -> None:
    blocks = langgraph_blocks()
    assert len(blocks) == 2
    assert "AlpstoreSaver.from_conn_string" in blocks[0]
    assert "AsyncAlpstoreSaver.from_conn_string" in blocks[1]
    env = {**os.environ, **database_env_for(empty_folder / "run")}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [sys.executable, "-c", "\n".join(blocks)],
        cwd=empty_folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "you said: hello"
    assert (empty_folder / "run").is_dir()
