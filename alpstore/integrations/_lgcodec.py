"""How LangGraph values become alpstore blobs: messages as readable JSON documents (one blob
each, role and content first), plain JSON as itself, anything else through LangGraph's serde.

A message document is the message's non-default fields plus ``role`` (OpenAI spelling, so
alpstore's turn counting and ``session show`` read it) and ``lc`` (the LangChain type that
rebuilds it). Only the standard message classes are split; a subclass goes through serde whole.
Also here: a thread head's messages as a process keeps them (``FrozenMessages``). Messages are
made back from documents by ``_lgbuild`` (its names stay importable from here).
"""

from __future__ import annotations

import base64
import copy
import marshal
import math
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from itertools import compress, count
from operator import attrgetter, is_not, itemgetter, ne, or_
from typing import Any

from langchain_core.messages import BaseMessage, ChatMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.serde.base import SerializerProtocol

from alpstore.codec import has_lone_surrogate
from alpstore.errors import IntegrityError
from alpstore.gcpause import no_gc_pause
from alpstore.integrations._lgbuild import (
    MESSAGE_CLASSES,
    State,
    assemble,
    build_message,
    copy_json,
    doc_state,
    message_from_doc,
    message_state,
)

__all__ = [
    "FROZEN_CHUNK",
    "KIND_EMPTY",
    "KIND_JSON",
    "KIND_MESSAGE",
    "KIND_MESSAGES",
    "KIND_SERDE",
    "LIVE_KEPT",
    "MESSAGE_CLASSES",
    "ROLES",
    "ChatMessage",
    "Frozen",
    "FrozenMessages",
    "State",
    "SystemMessage",
    "ToolMessage",
    "assemble",
    "build_message",
    "copy_json",
    "doc_state",
    "freeze",
    "is_message",
    "is_message_list",
    "is_plain_json",
    "message_doc",
    "message_docs",
    "message_from_doc",
    "message_state",
    "unwrap",
    "value_doc",
    "value_from_doc",
    "wrap",
]

KIND_JSON = 0
"""The blob is the value itself (plain JSON that round-trips exactly)."""
KIND_SERDE = 1
"""The blob is ``{"serde": type, "b64": bytes}`` from LangGraph's serializer."""
KIND_MESSAGE = 2
"""The blob is one message document."""
KIND_MESSAGES = 3
"""A list of messages: one message blob per item (pending writes only)."""
KIND_EMPTY = 4
"""The channel had no value at this version (no blob)."""

ROLES = {
    "human": "user",
    "ai": "assistant",
    "system": "system",
    "tool": "tool",
    "function": "function",
}
_SPLITTABLE = {cls: name for name, cls in MESSAGE_CLASSES.items()}


def is_plain_json(value: Any, depth: int = 0) -> bool:
    r"""True when ``value`` survives canonical JSON unchanged (types included): not a string
    holding a lone surrogate (``"\udcff"``: an undecodable file name, a broken ``\u``
    escape), which canonical JSON refuses; such a value goes through LangGraph's serde, as in
    LangGraph's own savers.
    """
    kind = type(value)
    if kind is str:
        return value.isascii() or not has_lone_surrogate(value)
    if value is None or kind is bool or kind is int:
        return True
    if kind is float:
        return not (math.isnan(value) or math.isinf(value))
    if depth > 64:
        return False
    if kind is list:
        return all(is_plain_json(v, depth + 1) for v in value)
    if kind is dict:
        return all(
            type(k) is str
            and (k.isascii() or not has_lone_surrogate(k))
            and is_plain_json(v, depth + 1)
            for k, v in value.items()
        )
    return False


def is_message(value: Any) -> bool:
    """True for an instance of a standard LangChain message class (not a subclass)."""
    return type(value) in _SPLITTABLE


def is_message_list(value: Any) -> bool:
    """True for a list whose every item is a standard LangChain message."""
    return type(value) is list and all(type(v) in _SPLITTABLE for v in value)


def message_doc(message: BaseMessage) -> dict[str, Any] | None:
    """The JSON document of a message, or None when it holds something JSON cannot."""
    kind = _SPLITTABLE[type(message)]
    fields = message.model_dump(exclude_defaults=True)
    fields.pop("type", None)
    fields["content"] = message.content
    doc = {**fields, "lc": kind}
    if kind != "chat":
        doc["role"] = ROLES[kind]
    return doc if is_plain_json(doc) else None


_dumps, _loads = marshal.dumps, marshal.loads


# ---------------------------------------------------------------- the kept head
FROZEN_CHUNK = 256
"""Message states per marshalled chunk of a kept head."""
_NO_STATE = _dumps(None)
_fields_of = itemgetter(0)
_dict_of = attrgetter("__dict__")

Frozen = tuple[type[BaseMessage], bytes, BaseMessage | None]
"""A message ready to keep: its class, its state marshalled (or, when marshal cannot hold it,
``_NO_STATE`` and a private copy of the message)."""


def freeze(items: Iterable[tuple[type[BaseMessage], State]]) -> list[Frozen]:
    """Messages ready to keep: their states are copied now (marshalled), so nothing the caller
    does to the objects afterwards reaches them.
    """
    out: list[Frozen] = []
    for cls, state in items:
        try:
            out.append((cls, _dumps(state), None))
        except ValueError:  # not plain data (cannot happen for states built from documents)
            out.append((cls, _NO_STATE, copy.deepcopy(assemble((cls,), (state,))[0])))
    return out


LIVE_KEPT = 16
"""How many kept heads (the most recently compared) also hold their states as live objects
for :meth:`FrozenMessages.first_difference`; the others make them anew for each compare."""
_live_lock = threading.Lock()
_live_heads: OrderedDict[int, weakref.ref[FrozenMessages]] = OrderedDict()


def _hold_live(head: FrozenMessages) -> None:
    """``head`` was just compared: it keeps its live states; the least recently compared
    beyond :data:`LIVE_KEPT` let theirs go (made anew from the blobs when next compared).
    """
    with _live_lock:
        _live_heads.pop(id(head), None)
        _live_heads[id(head)] = weakref.ref(head)
        while len(_live_heads) > LIVE_KEPT:
            old = _live_heads.popitem(last=False)[1]()
            if old is not None:
                old.live = None


class FrozenMessages:
    """A thread head's messages as this process keeps them: never handed out, so nothing a
    caller does to what it read can change them.

    Per message its class and its state in marshal's format: full chunks of
    :data:`FROZEN_CHUNK` states as one blob each, the rest one blob per message (appending is
    O(delta); a chunk is formed once per ``FROZEN_CHUNK`` messages). A read builds new objects
    at C speed: ``marshal.loads`` makes every string, list and dict of a chunk anew, then
    :func:`assemble` gives each object its slots. A state marshal cannot hold is kept as a
    private object and deep-copied on read.

    A head read from the archive may be kept as its documents' canonical bytes (immutable)
    and turned into states on first use (:meth:`deferred`): a process that reads a thread
    once pays for one rebuild, not two.

    ``live``: once compared (:meth:`first_difference`), the states' field dicts as objects
    too (all a compare reads: the sets and tuples of the states are not held), made from the
    blobs (never handed out, never the caller's), extended with each append, so the next
    compare reads no blob; kept by the :data:`LIVE_KEPT` most recently compared heads.
    """

    __slots__ = (
        "__weakref__",
        "chunks",
        "classes",
        "deferred_length",
        "deferred_load",
        "live",
        "odd",
        "tail",
    )

    def __init__(self) -> None:
        self.classes: list[type[BaseMessage]] = []
        self.chunks: list[bytes] = []
        self.tail: list[bytes] = []
        self.odd: dict[int, BaseMessage] = {}
        self.deferred_load: Callable[[], Sequence[tuple[type[BaseMessage], State]]] | None = None
        self.deferred_length = 0
        self.live: list[dict[str, Any]] | None = None

    @classmethod
    def deferred(
        cls, length: int, load: Callable[[], Sequence[tuple[type[BaseMessage], State]]]
    ) -> FrozenMessages:
        """``length`` messages whose states ``load`` makes (new objects each call, from
        immutable sources), on first use.
        """
        out = cls()
        out.deferred_load, out.deferred_length = load, length
        return out

    def _ready(self) -> None:
        load = self.deferred_load
        if load is not None:
            self.deferred_load = None
            items = load()
            if len(items) != self.deferred_length:
                raise IntegrityError(
                    f"a kept head of {self.deferred_length} messages rebuilt {len(items)}"
                )
            self.extend_states(items)

    def __len__(self) -> int:
        return self.deferred_length if self.deferred_load is not None else len(self.classes)

    def extend(self, items: Iterable[Frozen]) -> None:
        """Append messages made ready by :func:`freeze`."""
        self._ready()
        live = self.live
        for cls, blob, odd in items:
            if odd is not None:
                self.odd[len(self.classes)] = odd
            if live is not None:  # a copy of its own, from the blob
                live.append(_loads(blob)[0] if odd is None else odd.__dict__)
            self.classes.append(cls)
            self.tail.append(blob)
            if len(self.tail) == FROZEN_CHUNK:
                self.chunks.append(_dumps(list(map(_loads, self.tail))))
                self.tail = []

    def extend_states(self, items: Sequence[tuple[type[BaseMessage], State]]) -> None:
        """Append many messages at once (a head read from the archive): whole chunks are
        marshalled in one call each. The states are copied now, as by :func:`freeze`.
        """
        self._ready()
        chunk = FROZEN_CHUNK
        for start in range(0, len(items), chunk):
            part = items[start : start + chunk]
            if self.tail or len(part) < chunk:
                self.extend(freeze(part))
                continue
            try:
                blob = _dumps([state for _, state in part])
            except ValueError:  # a state marshal cannot hold: one by one
                self.extend(freeze(part))
                continue
            self.classes += [cls for cls, _ in part]
            self.chunks.append(blob)
            if self.live is not None:
                self.live += map(_fields_of, _loads(blob))

    def prefix(self, n: int) -> FrozenMessages:
        """The first ``n`` messages (a new object; the blobs, immutable, are shared)."""
        self._ready()
        out = FrozenMessages()
        full = min(n // FROZEN_CHUNK, len(self.chunks))
        out.classes = self.classes[:n]
        out.chunks = self.chunks[:full]
        rest = n - full * FROZEN_CHUNK
        if full < len(self.chunks):
            out.tail = [_dumps(s) for s in _loads(self.chunks[full])[:rest]]
        else:
            out.tail = self.tail[:rest]
        out.odd = {p: m for p, m in self.odd.items() if p < n}
        live = self.live
        if live is not None and len(live) == len(self.classes):
            out.live = live[:n]  # the states are never changed: shared
            _hold_live(out)
        return out

    def _states(self, n: int) -> list[Any]:
        """New copies of the first ``n`` states (placeholders where ``odd`` holds the object)."""
        self._ready()
        full = min(n // FROZEN_CHUNK, len(self.chunks))
        out: list[Any] = []
        for chunk in self.chunks[:full]:
            out += _loads(chunk)
        rest = n - full * FROZEN_CHUNK
        if rest:
            if full < len(self.chunks):
                out += _loads(self.chunks[full])[:rest]
            else:
                out += map(_loads, self.tail[:rest])
        for p, m in self.odd.items():
            if p < n:
                out[p] = message_state(m)
        return out

    def thaw(self, n: int | None = None) -> list[BaseMessage]:
        """New objects for the first ``n`` messages (all by default), equal to the kept ones
        and sharing nothing mutable with them or with any earlier read.
        """
        self._ready()
        n = len(self.classes) if n is None else min(n, len(self.classes))
        out = assemble(self.classes[:n], self._states(n))
        for p, m in self.odd.items():
            if p < n:
                out[p] = copy.deepcopy(m)
        return out

    def first_difference(self, messages: Sequence[Any], start: int = 0) -> int:
        """The first position from ``start`` on where ``messages`` (at most as long as this)
        differs from the kept ones in class or fields (compared in C), or their length when
        none does. Compared with the live states (made from the blobs on the first compare,
        with the collector held off, then kept and extended by appends): the compare makes
        no objects, where making the states for each one cost twice the compare. When all
        are equal (the common case) that is two list compares in C, no position sought.
        """
        self._ready()
        n = len(messages)
        if n > len(self.classes):
            raise ValueError(f"{n} messages compared with {len(self.classes)} kept ones")
        live = self.live
        if live is None or len(live) != len(self.classes):
            with no_gc_pause():
                live = list(map(_fields_of, self._states(len(self.classes))))
            self.live = live
        _hold_live(self)
        return self._first_difference(live[start:n], messages[start:n], start, n)

    def _first_difference(
        self, fields: list[dict[str, Any]], theirs: Sequence[Any], start: int, n: int
    ) -> int:
        classes = self.classes[start:n]
        if classes == list(map(type, theirs)) and fields == list(map(_dict_of, theirs)):
            return n  # the common case, all equal: two list compares in C, no position sought
        if not _SPLITTABLE.keys() >= set(map(type, theirs)):  # not all messages: slow path
            pairs = zip(classes, fields, theirs, strict=True)
            for i, (cls, mine, their) in enumerate(pairs, start):
                if cls is not type(their) or mine != their.__dict__:
                    return i
            return n
        differs = map(
            or_,
            map(is_not, classes, map(type, theirs)),
            map(ne, fields, map(_dict_of, theirs)),
        )
        return next(compress(count(start), differs), n)


def message_docs(messages: Sequence[BaseMessage]) -> list[dict[str, Any]] | None:
    """Documents for every message, or None when any one cannot be split."""
    docs = []
    for m in messages:
        doc = message_doc(m)
        if doc is None:
            return None
        docs.append(doc)
    return docs


def wrap(serde: SerializerProtocol, value: Any) -> dict[str, Any]:
    """A JSON envelope for any value: ``{"json": v}`` or ``{"serde": type, "b64": …}``."""
    if is_plain_json(value):
        return {"json": value}
    kind, data = serde.dumps_typed(value)
    return {"serde": kind, "b64": base64.b64encode(data).decode("ascii")}


def unwrap(serde: SerializerProtocol, doc: dict[str, Any]) -> Any:
    """The value inside an envelope made by :func:`wrap`."""
    if "json" in doc:
        return doc["json"]
    return serde.loads_typed((doc["serde"], base64.b64decode(doc["b64"])))


def value_doc(serde: SerializerProtocol, value: Any) -> tuple[int, Any]:
    """``(kind, document)`` for a channel value or a pending write's value."""
    if is_message(value):
        doc = message_doc(value)
        if doc is not None:
            return KIND_MESSAGE, doc
    if is_plain_json(value):
        return KIND_JSON, value
    kind, data = serde.dumps_typed(value)
    return KIND_SERDE, {"serde": kind, "b64": base64.b64encode(data).decode("ascii")}


def value_from_doc(serde: SerializerProtocol, kind: int, doc: Any) -> Any:
    """Rebuild a value stored by :func:`value_doc`.

    Raises:
        IntegrityError: an unknown kind.
    """
    if kind == KIND_JSON:
        return doc
    if kind == KIND_SERDE:
        return serde.loads_typed((doc["serde"], base64.b64decode(doc["b64"])))
    if kind == KIND_MESSAGE:
        return message_from_doc(doc)
    raise IntegrityError(f"stored LangGraph value of unknown kind {kind}")
