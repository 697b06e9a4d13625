"""AlpstoreSession driven through the OpenAI Agents SDK's own Runner with a scripted model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

agents = pytest.importorskip("agents", reason="openai-agents is not installed (alpstore[dev])")

from agents import (  # noqa: E402
    Agent,
    Model,
    ModelResponse,
    RunConfig,
    Runner,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from agents.memory import Session as SessionProtocol  # noqa: E402
from openai.types.responses import (  # noqa: E402
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from alpstore.integrations.openai_agents import AlpstoreSession  # noqa: E402
from alpstore.store import Store  # noqa: E402
from tests.conftest import run_cli  # noqa: E402

set_tracing_disabled(True)
NO_TRACING = RunConfig(tracing_disabled=True)


class ScriptedModel(Model):
    """Replies ``echo: <text>``; asked about the weather, calls the tool first, then reports."""

    def __init__(self) -> None:
        self.inputs: list[list[dict[str, Any]]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any | None = None,
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        self.inputs.append(json.loads(json.dumps(items, default=str)))
        n = len(self.inputs)
        last = items[-1]
        if last.get("type") == "function_call_output":
            return self._say(n, f"The weather: {last['output']}")
        text = str(last.get("content", ""))
        if "weather" in text:
            call = ResponseFunctionToolCall(
                type="function_call",
                id=f"fc_{n}",
                call_id=f"call_{n}",
                name="get_weather",
                arguments=json.dumps({"city": "Paris"}),
                status="completed",
            )
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        return self._say(n, f"echo: {text}")

    def _say(self, n: int, text: str) -> ModelResponse:
        message = ResponseOutputMessage(
            id=f"msg_{n}",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise AssertionError("these tests do not stream")


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def make_agent(model: ScriptedModel) -> Agent:
    return Agent(name="helper", instructions="Be brief.", model=model, tools=[get_weather])


def run(agent: Agent, text: str, session: AlpstoreSession) -> Any:
    return asyncio.run(Runner.run(agent, text, session=session, run_config=NO_TRACING))


def test_runner_keeps_the_conversation_in_an_alpstore_session(run_root: Path) -> None:
    model = ScriptedModel()
    agent = make_agent(model)
    session = AlpstoreSession.open("conv-1", run_root)
    assert isinstance(session, SessionProtocol)
    assert run(agent, "hello", session).final_output == "echo: hello"
    assert run(agent, "again", session).final_output == "echo: again"
    # the model saw the earlier turn, read back from the archive
    contents = [i.get("content") for i in model.inputs[-1]]
    assert "hello" in contents and "again" in contents
    items = asyncio.run(session.get_items())
    assert [i.get("role") for i in items] == ["user", "assistant", "user", "assistant"]
    alp = session.alpstore_session()
    assert alp.info().turn == 2
    assert len(alp.checkpoints()) == 4  # the SDK adds the input, then the output, per run
    session.close()

    log = run_cli("--root", str(run_root), "session", "log", "openai-agents:conv-1")
    assert log.code == 0, log.err


def test_tool_calls_and_outputs_are_session_items(run_root: Path) -> None:
    model = ScriptedModel()
    session = AlpstoreSession.open("tools", run_root)
    result = run(make_agent(model), "what is the weather?", session)
    assert result.final_output == "The weather: sunny in Paris"
    kinds = [i.get("type", i.get("role")) for i in asyncio.run(session.get_items())]
    assert kinds == ["user", "function_call", "function_call_output", "message"]
    # a second run starts from the stored tool exchange
    run(make_agent(model), "thanks", session)
    assert any(i.get("type") == "function_call_output" for i in model.inputs[-1])
    session.close()


def test_pop_clear_limit_and_reopen(run_root: Path) -> None:
    model = ScriptedModel()
    session = AlpstoreSession.open("ops", run_root)
    for text in ("one", "two", "three"):
        run(make_agent(model), text, session)
    assert asyncio.run(session.get_items(limit=2))[0]["content"] == "three"
    popped = asyncio.run(session.pop_item())
    assert popped is not None and popped["role"] == "assistant"
    assert len(asyncio.run(session.get_items())) == 5
    session.close()

    reopened = AlpstoreSession.open("ops", run_root)
    assert len(asyncio.run(reopened.get_items())) == 5
    asyncio.run(reopened.clear_session())
    assert asyncio.run(reopened.get_items()) == []
    assert asyncio.run(reopened.pop_item()) is None
    # checkpoints still hold the history they saw
    alp = reopened.alpstore_session()
    store: Store = reopened.store
    assert len(store.hydrate(alp.checkpoints()[-1])) == 6
    reopened.close()


def test_items_are_stored_once_across_sessions(run_root: Path) -> None:
    store = Store.open(run_root)
    for name in ("a", "b"):
        run(make_agent(ScriptedModel()), "same words", AlpstoreSession(name, store))
    stats = store.archive.stats()
    assert stats.messages == 2  # the user item and the reply, shared by both sessions
    store.close()


def test_pop_item_removes_the_item_it_returns_while_another_writer_appends(
    backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer appends after pop_item's transaction began but before it locked the
    session row (possible on PostgreSQL, where the lock comes with the first locking
    statement): the item popped is the newest one — the other writer's — and nothing else is
    cut.
    """
    if backend.name == "sqlite":
        pytest.skip("SQLite writers hold the write lock from BEGIN IMMEDIATE: none can interleave")
    from alpstore.sessions import Session

    session = AlpstoreSession("race", backend.open_store())
    asyncio.run(session.add_items([{"role": "user", "content": f"m{i}"} for i in range(3)]))
    other = backend.open_store()
    real_write = Session._write
    fired: list[bool] = []

    def write_after_another_writer(self: Session, conn: Any) -> Any:
        if not fired:
            fired.append(True)
            other.session_named(session.name).append(
                [{"role": "user", "content": "from the other writer"}]
            )
        return real_write(self, conn)

    monkeypatch.setattr(Session, "_write", write_after_another_writer)
    popped = asyncio.run(session.pop_item())
    monkeypatch.undo()
    assert fired
    assert popped == {"role": "user", "content": "from the other writer"}
    assert [i["content"] for i in asyncio.run(session.get_items())] == ["m0", "m1", "m2"]
