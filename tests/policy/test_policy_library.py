"""The same policy fields through the library: ``Store.open_session(manifest=…)``.

Each test checks what was written in the archive (rows, retention), on disk (deep files in the
CK-6 directory) and in process (in-memory checkpoints), and that a later opening of the session
applies the recorded policy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from alpstore.errors import PolicyError, SessionStateError
from alpstore.live import LiveSession
from alpstore.store import Store


def agent(checkpoint: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "Agent", "metadata": {"name": "lib"}, "spec": {"checkpoint": checkpoint}}


def turn(i: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]


def rows(live: LiveSession) -> list[tuple[int, str | None]]:
    return [(c.turn, c.trigger) for c in live.session.checkpoints()]


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.json")) if folder.is_dir() else []


@pytest.fixture
def store(tmp_path: Path) -> Any:
    with Store.open(tmp_path / "run") as st:
        yield st


def test_modes(store: Store, tmp_path: Path) -> None:
    none = store.open_session(manifest=agent({"mode": "none"}), cwd=tmp_path / "n")
    memory = store.open_session(manifest=agent({"mode": "in_memory"}), cwd=tmp_path / "m")
    every = store.open_session(manifest=agent({"mode": "every_turn"}), cwd=tmp_path / "e")
    for live in (none, memory, every):
        for i in range(3):
            live.commit_turn(turn(i))
    assert rows(none) == [] and none.marks == []
    none.checkpoint(label="by-hand")
    assert rows(none) == [(3, "manual")]
    assert rows(memory) == [] and [m.turn for m in memory.marks] == [1, 2, 3]
    assert all(m.in_memory and m.context is not None for m in memory.marks)
    assert rows(every) == [(1, "every_turn"), (2, "every_turn"), (3, "every_turn")]
    folder = tmp_path / "e" / ".mas" / "checkpoints"
    assert files(folder) == [f"{every.uuid}-turn-000{i}.json" for i in (1, 2, 3)]
    assert not (tmp_path / "n" / ".mas").exists() and not (tmp_path / "m" / ".mas").exists()
    # storage memory is process-local: a new opening sees none of them
    again = store.open_session(memory.uuid)
    assert again.marks == [] and again.rules.mode == "in_memory"


def test_triggers_every_n_turns_and_retention(store: Store, tmp_path: Path) -> None:
    live = store.open_session(
        manifest=agent(
            {
                "mode": "on_event",
                "triggers": ["after_tool_call", "every_n_turns"],
                "every_n_turns": 3,
                "retention": {"mode": "last_n", "n": 3},
                "storage": {"kind": "disk", "path": "cks"},
            }
        ),
        cwd=tmp_path,
    )
    for i in range(1, 7):
        live.commit_turn([{"role": "user", "content": f"q{i}"}])
        assert live.event("after_llm_call", [{"role": "assistant", "content": "x"}]) is None
        if i % 2 == 0:
            mark = live.event("after_tool_call", [{"role": "tool", "content": "r"}])
            assert mark is not None and mark.trigger == "after_tool_call"
    # triggers fired: tool at 2, 4, 6; every_n_turns at 3, 6 — retention keeps the newest 3
    assert rows(live) == [(4, "after_tool_call"), (6, "every_n_turns"), (6, "after_tool_call")]
    assert len(files(tmp_path / "cks")) == 3
    assert [m.turn for m in live.marks] == [4, 6, 6]
    with pytest.raises(SessionStateError):
        live.backtrack(3)


def test_hybrid_keeps_an_in_process_copy_disk_does_not(store: Store, tmp_path: Path) -> None:
    hybrid = store.open_session(
        manifest=agent({"mode": "every_turn", "storage": "hybrid"}), cwd=tmp_path / "h"
    )
    disk = store.open_session(
        manifest=agent({"mode": "every_turn", "storage": "disk"}), cwd=tmp_path / "d"
    )
    for live in (hybrid, disk):
        assert len(live.context) == 0  # hydrated before the turns: kept in step after
        for i in range(2):
            live.commit_turn(turn(i))
        assert len(files(tmp_path / ("h" if live is hybrid else "d") / ".mas" / "checkpoints")) == 2
    assert all(m.context is not None for m in hybrid.marks)
    assert all(m.context is None for m in disk.marks)
    # both backtrack to the same history; disk re-reads it, hybrid has it in hand
    for live in (hybrid, disk):
        bt = live.backtrack(1, "steer")
        assert [m["content"] for m in bt.context] == ["q0", "a0", "/steer steer"]


def test_auto_resume_latest_loads_the_save(tmp_path: Path) -> None:
    manifest = agent({"mode": "none", "storage": "disk", "auto_resume_latest": True})
    with Store.open(tmp_path / "one") as first:
        live = first.open_session(manifest=manifest, cwd=tmp_path)
        for i in range(2):
            live.commit_turn(turn(i))
        saved = live.save()
        assert saved.parent == tmp_path / ".mas" / "checkpoints"
        live.commit_turn(turn(9))
    with Store.open(tmp_path / "two") as second:
        resumed = second.open_session(manifest=manifest, cwd=tmp_path)
        assert resumed.uuid == live.uuid
        assert [m["content"] for m in resumed.context] == ["q0", "a0", "q1", "a1"]
        assert resumed.rules.auto_resume_latest


def test_recorded_policy_is_validated_on_the_way_back(store: Store, tmp_path: Path) -> None:
    live = store.open_session(manifest=agent({"mode": "every_turn"}), cwd=tmp_path)
    record = live.policy.as_record() if live.policy else {}
    store.bind_policy(
        live.session.id, {**record, "mode": "sometimes"}, live.session.info().retention
    )
    with pytest.raises(PolicyError, match=r"policy\.mode"):
        store.open_session(live.uuid)


@pytest.mark.parametrize(
    ("turn", "previous", "fires"),
    [(3, 2, True), (4, 3, False), (3, 3, False), (7, 5, True), (6, 0, True), (2, 0, False)],
)
def test_every_n_turns_fires_when_completed_turns_cross_a_multiple(
    turn: int, previous: int, fires: bool
) -> None:
    from alpstore.policy import parse_policy
    from alpstore.portable.cadence import decide

    policy = parse_policy({"mode": "on_event", "triggers": ["every_n_turns"], "every_n_turns": 3})
    got = decide(policy, "turn_completed", turn=turn, previous_turn=previous)
    assert got == ("every_n_turns" if fires else None)
