"""The OpenAI Agents adapter raises the events it can observe, and the session's policy decides."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("agents", reason="openai-agents is not installed (alpstore[dev])")

from alpstore.integrations.openai_agents import AlpstoreSession, observed_events
from alpstore.store import Store

RUN = [
    {"role": "user", "content": "What is the weather?"},
    {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
    {"role": "assistant", "content": "Sunny."},
]


def test_events_of_a_run_batch() -> None:
    assert observed_events(RUN) == ["after_llm_call", "after_tool_call"]
    assert observed_events([{"role": "user", "content": "hi"}]) == []


def test_add_items_follows_the_recorded_policy(tmp_path: Path) -> None:
    with Store.open(tmp_path / "run") as store:
        manifest = {
            "kind": "Agent",
            "spec": {
                "checkpoint": {
                    "mode": "on_event",
                    "triggers": ["after_tool_call", "every_n_turns"],
                    "every_n_turns": 2,
                    "storage": "memory",
                }
            },
        }
        live = store.open_session(manifest=manifest, name="openai-agents:conv-1", cwd=tmp_path)
        plain = AlpstoreSession("conv-2", store)
        governed = AlpstoreSession("conv-1", store)
        for _ in range(2):
            asyncio.run(governed.add_items(RUN))
            asyncio.run(plain.add_items(RUN))
        # storage memory: nothing in the archive, the marks live in the adapter's process
        assert live.session.checkpoints() == []
        assert governed._live is not None
        assert [(m.turn, m.trigger) for m in governed._live.marks] == [
            (1, "after_tool_call"),
            (2, "after_tool_call"),
            (2, "every_n_turns"),
        ]
        assert len(live.session.history()) == 8
        # a session without a policy keeps the adapter's own every-add checkpoint
        assert [c.trigger for c in plain.alpstore_session().checkpoints()] == ["openai-agents"] * 2
