"""``AlpstoreSession``: an OpenAI Agents SDK session whose history is an alpstore session.

Each ``add_items`` appends the items (one blob each, stored once) and checkpoints the session in
the same transaction, so every turn of an agent run can be inspected, backtracked or forked with
``alpstore session …``. A session opened with ``Store.open_session(manifest=…,
name="openai-agents:<id>")`` runs under its checkpoint policy instead: each batch raises
``after_llm_call``/``after_tool_call`` for the model and tool outputs it holds, then completes a
turn, and the policy decides what is checkpointed. ``pop_item`` and ``clear_session`` cut the
covering list back (O(1) in history length); earlier checkpoints keep the history they saw.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:  # the framework first: without it, an ImportError naming the pip install line
    from agents.memory.session_settings import (
        SessionSettings,
        coerce_session_settings,
        resolve_session_limit,
    )
except ImportError as err:
    from alpstore.integrations._extras import missing

    raise missing(
        "openai-agents", "alpstore.integrations.openai_agents (AlpstoreSession)", err
    ) from err

from alpstore.canonical import JSON_MARKER, from_markers, to_markers
from alpstore.integrations import _agents_compaction
from alpstore.live import LiveSession, policy_of_session
from alpstore.sessions import Entry, Session
from alpstore.store import Store

__all__ = ["AlpstoreSession"]

SESSION_NAME_PREFIX = "openai-agents:"
TRIGGER = "openai-agents"
COMPACTION_TRIGGER = "openai-agents-compaction"
_PROTOCOL = ("get_items", "add_items", "pop_item", "clear_session")


_MAY_NEED_MARKERS = re.compile(r"NaN|Infinity|\\ud[89a-f]|" + JSON_MARKER)
"""In an item's ``json.dumps`` text: what a value canonical JSON refuses looks like (or a string
that merely spells it: then the walk finds nothing to mark)."""
_MARKED = b'"' + JSON_MARKER.encode() + b'"'


def stored_form(item: Any) -> Any:
    """An item as ``SQLiteSession`` would read it back (``json.loads(json.dumps(item))``: tuples
    become lists, non-string keys strings), with what canonical JSON refuses (NaN, ±Infinity,
    lone surrogates) as markers (``alpstore.canonical.to_markers``).

    Raises:
        TypeError: the item holds a value ``json`` cannot serialise (as ``SQLiteSession``).
        ValueError: it holds a reference cycle (as ``SQLiteSession``).
    """
    text = json.dumps(item)
    value = json.loads(text)
    return to_markers(value) if _MAY_NEED_MARKERS.search(text) else value


def _item(entry: Entry, marked: bool = True) -> Any:
    """A covering-list entry as an input item (a fold's summary becomes a system message);
    ``marked``: the entry may hold markers, decoded (``alpstore.canonical.from_markers``).
    """
    if entry.kind == "summary":
        return {"role": "system", "content": str(entry.value.get("summary", ""))}
    return from_markers(entry.value) if marked else entry.value


def observed_events(items: list[Any]) -> list[str]:
    """The checkpoint events a batch of run items shows: a model output (message or tool
    call) is ``after_llm_call``, a tool's output ``after_tool_call``.
    """
    events: list[str] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind in ("function_call_output", "computer_call_output"):
            name = "after_tool_call"
        elif kind in ("function_call", "computer_call", "reasoning") or (
            item.get("role") == "assistant"
        ):
            name = "after_llm_call"
        else:
            continue
        if name not in events:
            events.append(name)
    return events


def _run_under_policy(live: LiveSession, items: list[Any]) -> None:
    """One ``add_items`` batch is a completed run (a turn): its events, then the turn's end."""
    events = observed_events(items)
    if events:
        live.event(events[0], items)
        for name in events[1:]:
            live.event(name)
        live.commit_turn()
    else:
        live.commit_turn(items)


class AlpstoreSession:
    """Conversation memory for ``Runner.run(..., session=AlpstoreSession("id", store))``.

    Args:
        session_id: the SDK's session id; the alpstore session is named ``openai-agents:<id>``.
        store: an open ``Store`` (``AlpstoreSession.open(id, root)`` opens one for you).
        session_settings: default ``limit`` for ``get_items`` (a ``SessionSettings`` or its dict;
            ``SessionSettings()`` when omitted, as ``SQLiteSession`` does).
        checkpoint: checkpoint after every ``add_items`` (a row: O(1) in history length).
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        store: Store,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        checkpoint: bool = True,
        owns_store: bool = False,
    ) -> None:
        self.session_id = session_id
        self.store = store
        self.session_settings = (
            SessionSettings()
            if session_settings is None
            else coerce_session_settings(session_settings)
        )
        self.checkpoint = checkpoint
        self._owns_store = owns_store
        self._session: Session | None = None
        self._live: LiveSession | None = None
        self._first_use = threading.Lock()
        self._closed = False

    @classmethod
    def open(
        cls, session_id: str, root: Path | str, *, url: str | None = None, **kwargs: Any
    ) -> AlpstoreSession:
        """Open (creating) the archive of run root ``root`` (or ``url``); closed by ``close``."""
        return cls(session_id, Store.open(root, url=url), owns_store=True, **kwargs)

    def close(self) -> None:
        """Close the session (and the store, if this session opened it). Using it afterwards
        raises ``RuntimeError``, as ``SQLiteSession`` does; closing again does nothing.
        """
        if self._closed:
            return
        self._closed = True
        if self._owns_store:
            self.store.close()

    def _open_session(self) -> Session:
        """The alpstore session, or ``RuntimeError`` once closed."""
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")
        return self.alpstore_session()

    @property
    def name(self) -> str:
        """The alpstore session's name."""
        return (SESSION_NAME_PREFIX + self.session_id)[:200]

    def alpstore_session(self) -> Session:
        """The alpstore session holding this conversation (created on first use).

        Found by its exact name, or created atomically (``Store.session_named``): first uses
        racing in threads of this process, or in other processes, share one session.
        """
        if self._session is None:
            with self._first_use:
                if self._session is None:
                    self._session = self.store.session_named(
                        self.name, origin={"openai_agents": {"session_id": self.session_id}}
                    )
        return self._session

    # ---------------------------------------------------------------- the SDK protocol
    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The conversation, oldest first; with ``limit``, only the latest ``limit`` items
        (``0``: none; a negative limit, like ``None``: all, as ``SQLiteSession``'s ``LIMIT``).
        """
        limit = resolve_session_limit(limit, self.session_settings)
        session = self._open_session()
        if limit == 0:
            return []
        store = self.store
        raws = store.hydrate_raw(session.info().head)
        if limit is not None and limit > 0:
            raws = raws[-limit:]
        entries = store.entries_of(raws)
        return [_item(e, _MARKED in raw) for e, (_, _, raw) in zip(entries, raws, strict=True)]

    async def add_items(self, items: list[Any]) -> None:
        """Append items (each stored once) and, by default, checkpoint in the same transaction.

        Raises:
            RuntimeError: the session is closed (checked first, as ``SQLiteSession`` does).
            TypeError: an item is not JSON-serialisable (nothing is stored).
        """
        session = self._open_session()
        if not items:
            return
        items = [stored_form(item) for item in items]
        if self._live is None:
            policy = policy_of_session(session)
            if policy is not None:  # opened under a manifest: its policy decides
                self._live = LiveSession(self.store, session, policy)
        if self._live is not None:
            _run_under_policy(self._live, list(items))
        elif self.checkpoint:
            session.commit_turn(list(items), trigger=TRIGGER)
        else:
            session.append(list(items))

    async def pop_item(self) -> Any | None:
        """Remove and return the latest item (None when the conversation is empty)."""
        last = self._open_session().pop_last()  # read under the row lock
        self._live = None  # its in-process context no longer matches the head
        return None if last is None else _item(last)

    async def clear_session(self) -> None:
        """Forget the conversation (the head becomes empty; checkpoints keep their history)."""
        self._open_session().truncate_and_append(0, [])
        self._live = None

    # ---------------------------------------------------------------- the SDK's private hooks
    async def _get_compaction_snapshot(
        self, limit: int, *, prune_prefix: Callable[[Any], bool] | None = None
    ) -> Any:
        """The bounded snapshot ``OpenAIResponsesCompactionSession`` asks a backend for before it
        compacts automatically (``SQLiteSession``'s private hook, same contract; see
        ``_agents_compaction``). None for a subclass that overrides the session protocol: it may
        transform items, and must supply its own snapshot (as ``SQLiteSession`` requires).
        """
        if any(getattr(type(self), m) is not getattr(AlpstoreSession, m) for m in _PROTOCOL):
            return None
        session = self._open_session()
        self._live = None  # a replacement moves the head past its in-process context
        return _agents_compaction.read_snapshot(
            session,
            limit,
            decode=_item,
            store_items=lambda output: [stored_form(item) for item in output],
            prune_prefix=prune_prefix,
            trigger=COMPACTION_TRIGGER if self.checkpoint else None,
        )
