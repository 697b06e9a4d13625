"""An Agent manifest's ``spec.checkpoint`` policy on LangGraph threads (issue 15): the events a
step's new messages show, raised on the thread's live session after its checkpoint committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from alpstore.integrations._lgthread import SaverState
from alpstore.live import LiveSession, prepare_manifest
from alpstore.policy.recorded import SessionPolicy
from alpstore.sessions import Retention, Session


def step_events(new_messages: Sequence[Any]) -> list[str]:
    """The checkpoint events a step's new messages show: an AI message is ``after_llm_call``,
    a tool message ``after_tool_call`` (in the order they first appear).
    """
    events: list[str] = []
    for message in new_messages:
        kind = getattr(message, "type", None)
        name = {"ai": "after_llm_call", "tool": "after_tool_call"}.get(str(kind))
        if name is not None and name not in events:
            events.append(name)
    return events


def prepare_policy(manifest: Any | None) -> SessionPolicy | None:
    """The policy of an Agent manifest (mapping or file), or None without one."""
    if manifest is None:
        return None
    return prepare_manifest(manifest, cwd=Path.cwd()).policy


def policy_events(
    saver: SaverState, key: tuple[str, str], session_id: int, messages: list[Any]
) -> None:
    """Raise the events this step shows on the thread's live session (issue 15); called
    with the thread's lock held, after the step's checkpoint committed.
    """
    assert saver._policy is not None
    live = saver._live.get(key)
    if live is None or live.session.id != session_id:
        session = Session(saver.store, saver.store.session_info(session_id))
        # LangGraph's checkpoints stay in the archive whatever the retention says
        saver.store.bind_policy(session_id, saver._policy.as_record(), Retention())
        live = LiveSession(saver.store, session, saver._policy)
        with saver._lock:
            saver._live[key] = live
    seen = live.refresh()
    for name in step_events(messages[seen:]):
        live.event(name)
