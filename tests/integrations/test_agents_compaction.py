"""The SDK's automatic compaction over AlpstoreSession, side by side with SQLiteSession.

``OpenAIResponsesCompactionSession`` compacts automatically only through a backend's
``_get_compaction_snapshot`` hook; each scenario runs the same agent turn over ``SQLiteSession``
and over ``AlpstoreSession`` (on SQLite and on PostgreSQL) and compares what the compaction API
was sent and what history is left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest.mock import AsyncMock, MagicMock

import pytest

agents = pytest.importorskip("agents", reason="openai-agents is not installed (alpstore[dev])")
pytest.importorskip("cryptography", reason="EncryptedSession needs cryptography")

from agents import Agent, RunConfig, Runner, set_tracing_disabled  # noqa: E402
from agents.extensions.memory.encrypt_session import EncryptedSession  # noqa: E402
from agents.memory import OpenAIResponsesCompactionSession, SQLiteSession  # noqa: E402
from agents.run_config import CallModelData, ModelInputData  # noqa: E402
from agents.testing import ScriptedModel  # noqa: E402
from openai.types.responses import ResponseOutputMessage, ResponseOutputText  # noqa: E402

from alpstore.integrations.openai_agents import AlpstoreSession  # noqa: E402

set_tracing_disabled(True)
SUMMARY = {"type": "compaction", "id": "cmp", "encrypted_content": "synthetic"}
Scenario = Callable[[Any, Any], Awaitable[None]]


def reply(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="1",
        type="message",
        role="assistant",
        content=[ResponseOutputText(text=text, type="output_text", annotations=[], logprobs=[])],
        status="completed",
    )


def client(output: list[Any] | None = None, during: Any = None) -> MagicMock:
    async def compact(**kwargs: Any) -> Any:
        if during is not None:
            await during()
        return SimpleNamespace(output=list(output or []))

    c = MagicMock()
    c.responses.compact = AsyncMock(side_effect=compact)
    return c


async def one_turn(session: Any, config: RunConfig | None = None, text: str = "continue") -> None:
    agent = Agent(name="worker", model=ScriptedModel(steps=[[reply("done")]]))
    await Runner.run(agent, text, session=session, run_config=config or RunConfig())


def shape(item: Any) -> Any:
    """An item, its encrypted payload left out (Fernet tokens differ run to run)."""
    return {**item, "payload": "…"} if isinstance(item, dict) and "__enc__" in item else item


def outcome(
    scenario: Callable[[Any], Awaitable[MagicMock]], make_backend: Callable[[], Any]
) -> tuple[int, list[Any], list[Any]]:
    """Run ``scenario`` over a fresh backend: (compact awaits, their inputs, history left)."""

    async def go() -> tuple[int, list[Any], list[Any]]:
        backend = make_backend()
        try:
            c = await scenario(backend)
            calls = [call.kwargs.get("input") for call in c.responses.compact.await_args_list]
            left = [shape(i) for i in await backend.get_items(limit=1000)]
            return c.responses.compact.await_count, calls, left
        finally:
            backend.close()

    return asyncio.run(go())


def side_by_side(
    scenario: Callable[[Any], Awaitable[MagicMock]], tmp_path: Path, backend: Any
) -> tuple[int, list[Any], list[Any]]:
    """The scenario's outcome over SQLiteSession and over AlpstoreSession, asserted equal."""
    theirs = outcome(scenario, lambda: SQLiteSession("s", tmp_path / "theirs.db"))
    store = backend.open_store()
    ours = outcome(scenario, lambda: AlpstoreSession("s", store))
    assert ours == theirs
    return ours


async def limited(backend: Any) -> MagicMock:
    await backend.add_items([{"role": "user", "content": str(i)} for i in range(4)])
    c = client([SUMMARY])
    session = OpenAIResponsesCompactionSession(
        "s", backend, client=c, compaction_mode="input", should_trigger_compaction=lambda _: True
    )
    await one_turn(session, RunConfig(session_settings={"limit": 1}))
    return c


def test_automatic_compaction_under_a_session_limit(tmp_path: Path, backend: Any) -> None:
    awaits, _, left = side_by_side(limited, tmp_path, backend)
    assert awaits == 1
    assert left == [{"role": "user", "content": str(i)} for i in range(3)] + [SUMMARY]


async def filtered(backend: Any) -> MagicMock:
    history = [
        {"type": "reasoning", "id": "rs_stored", "summary": []},
        {"type": "function_call", "call_id": "call", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call", "output": "synthetic"},
    ]
    await backend.add_items(history)
    c = client([SUMMARY])
    session = OpenAIResponsesCompactionSession(
        "s", backend, client=c, compaction_mode="input", should_trigger_compaction=lambda _: True
    )

    def omit_reasoning(data: CallModelData[Any]) -> ModelInputData:
        kept = [i for i in data.model_data.input if i.get("type") != "reasoning"]
        return ModelInputData(input=kept, instructions=data.model_data.instructions)

    await one_turn(session, RunConfig(call_model_input_filter=omit_reasoning))
    return c


def test_automatic_compaction_under_an_input_filter(tmp_path: Path, backend: Any) -> None:
    awaits, calls, left = side_by_side(filtered, tmp_path, backend)
    assert awaits == 1 and calls[0][0] == {"role": "user", "content": "continue"}
    assert left[-1] == SUMMARY and left[0]["type"] == "reasoning"


async def budget(backend: Any) -> MagicMock:
    c = client()
    session = OpenAIResponsesCompactionSession(
        "s", backend, client=c, max_rollback_items=1, should_trigger_compaction=lambda _: True
    )
    await one_turn(session, text="hello")
    return c


def test_max_rollback_items_compacts_through_the_snapshot(tmp_path: Path, backend: Any) -> None:
    awaits, _, left = side_by_side(budget, tmp_path, backend)
    assert awaits == 1 and left == []


def encrypted_scenario(untrusted: bool) -> Callable[[Any], Awaitable[MagicMock]]:
    async def scenario(backend: Any) -> MagicMock:
        clock = [1000]
        patch = pytest.MonkeyPatch()
        patch.setattr("cryptography.fernet.time.time", lambda: clock[0])
        try:
            encrypted = EncryptedSession("s", backend, encryption_key="synthetic-key", ttl=10)
            await encrypted.add_items([{"role": "user", "content": "expired"}] * 5)
            if untrusted:
                other = EncryptedSession("s", backend, encryption_key="other-key", ttl=10)
                await other.add_items([{"role": "user", "content": "unknown key"}])
            clock[0] += 11
            await encrypted.add_items([{"role": "user", "content": "retained live"}] * 2)
            await encrypted.add_items(
                [{"role": "assistant" if i % 2 else "user", "content": f"l{i}"} for i in range(20)]
            )
            c = client()
            session = OpenAIResponsesCompactionSession("s", encrypted, client=c)
            await one_turn(session, text="cross threshold")
            return c
        finally:
            patch.undo()

    return scenario


@pytest.mark.parametrize("untrusted", [False, True], ids=["expired-prefix", "other-key"])
def test_expired_prefix_dropped_and_rows_under_another_key_kept(
    tmp_path: Path, backend: Any, untrusted: bool
) -> None:
    awaits, calls, left = side_by_side(encrypted_scenario(untrusted), tmp_path, backend)
    assert awaits == 1 and "expired" not in str(calls)
    # the expired prefix is gone; the row another key encrypted is kept
    assert len(left) == (1 if untrusted else 0), left
    assert all("__enc__" in item for item in left)


def test_an_item_appended_during_compact_is_kept(tmp_path: Path, backend: Any) -> None:
    newer = {"role": "user", "content": "appended during compact()"}

    async def scenario(b: Any) -> MagicMock:
        await b.add_items([{"role": "user", "content": str(i)} for i in range(4)])

        async def append() -> None:
            await b.add_items([newer])

        c = client([SUMMARY], during=append)
        session = OpenAIResponsesCompactionSession(
            "s", b, client=c, compaction_mode="input", should_trigger_compaction=lambda _: True
        )
        await one_turn(session, RunConfig(session_settings={"limit": 1}))
        return c

    awaits, _, left = side_by_side(scenario, tmp_path, backend)
    assert awaits == 1 and left[-1] == newer and SUMMARY not in left and len(left) == 7


def test_checkpoints_keep_the_history_compaction_replaced(backend: Any) -> None:
    store = backend.open_store()
    session = AlpstoreSession("s", store)
    asyncio.run(limited(session))
    alp = session.alpstore_session()
    last, before = alp.checkpoints()[-1], alp.checkpoints()[-2]
    assert last.trigger == "openai-agents-compaction"
    assert [e.value for e in store.hydrate(last)][-1] == SUMMARY
    assert len(store.hydrate(before)) == 6  # 4 stored, the turn's input and its reply


def test_a_subclass_that_overrides_the_protocol_gets_no_snapshot(backend: Any) -> None:
    class Transforming(AlpstoreSession):
        async def get_items(self, limit: int | None = None) -> list[Any]:
            return await super().get_items(limit)

    session = Transforming("s", backend.open_store())
    assert asyncio.run(session._get_compaction_snapshot(5)) is None
    assert asyncio.run(AlpstoreSession("t", session.store)._get_compaction_snapshot(5)) is not None
