"""Sessions built through the Python API for the debug tests (fast: no subprocess)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alpstore.rules.turns import is_user_turn
from alpstore.samples import generate
from alpstore.sessions import Session
from alpstore.store import Store


def turns_of(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Split messages into turns at each user message (the importer's rule)."""
    turns: list[list[dict[str, Any]]] = []
    for m in messages:
        if is_user_turn(m) and turns and any(is_user_turn(x) for x in turns[-1]):
            turns.append([])
        if not turns:
            turns.append([])
        turns[-1].append(m)
    return turns


def agent_session(store: Store, turns: int, *, bad_turn: int | None, name: str) -> Session:
    """A generated coding-agent session with an every-turn checkpoint."""
    s = store.create_session(name=name)
    for turn in turns_of(list(generate(turns, bad_turn=bad_turn))):
        s.commit_turn(turn)
    return s


def simple_session(store: Store, turns: int, *, name: str = "s", bad: int | None = None) -> Session:
    """``turns`` user/assistant turns; turn ``bad`` has the assistant say BAD."""
    s = store.create_session(name=name)
    for t in range(1, turns + 1):
        reply = "BAD idea" if t == bad else f"answer {t}"
        s.commit_turn(
            [{"role": "user", "content": f"q{t}"}, {"role": "assistant", "content": reply}]
        )
    return s


def values(entries: list[Any]) -> list[Any]:
    """The documents of hydrated entries."""
    return [e.value for e in entries]


def open_store(root: Path) -> Store:
    """A store on a fresh run root."""
    root.mkdir(parents=True, exist_ok=True)
    return Store.open(root)
