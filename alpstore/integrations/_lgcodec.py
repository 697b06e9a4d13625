"""How LangGraph values become alpstore blobs: messages as readable JSON documents (one blob
each, role and content first), plain JSON as itself, anything else through LangGraph's serde.

A message document is the message's non-default fields plus ``role`` (OpenAI spelling, so
alpstore's turn counting and ``session show`` read it) and ``lc`` (the LangChain type that
rebuilds it). Only the standard message classes are split; a subclass goes through serde whole.
"""

from __future__ import annotations

import base64
import gc
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from alpstore.errors import IntegrityError

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

MESSAGE_CLASSES: dict[str, type[BaseMessage]] = {
    "human": HumanMessage,
    "ai": AIMessage,
    "system": SystemMessage,
    "tool": ToolMessage,
    "function": FunctionMessage,
    "chat": ChatMessage,
}
ROLES = {
    "human": "user",
    "ai": "assistant",
    "system": "system",
    "tool": "tool",
    "function": "function",
}
_SPLITTABLE = {cls: name for name, cls in MESSAGE_CLASSES.items()}


def is_plain_json(value: Any, depth: int = 0) -> bool:
    """True when ``value`` survives canonical JSON unchanged (types included)."""
    kind = type(value)
    if value is None or kind is str or kind is bool or kind is int:
        return True
    if kind is float:
        return not (math.isnan(value) or math.isinf(value))
    if depth > 64:
        return False
    if kind is list:
        return all(is_plain_json(v, depth + 1) for v in value)
    if kind is dict:
        return all(type(k) is str and is_plain_json(v, depth + 1) for k, v in value.items())
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


def message_from_doc(doc: dict[str, Any]) -> BaseMessage:
    """Rebuild a message from its document.

    Raises:
        IntegrityError: the document names no known message type.
    """
    fields = dict(doc)
    kind = fields.pop("lc", None)
    cls = MESSAGE_CLASSES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise IntegrityError(f"message document of unknown type {kind!r}")
    if kind != "chat":
        fields.pop("role", None)
    return cls(**fields)


_SKIP = {False: frozenset(("lc", "role")), True: frozenset(("lc",))}
"""Document keys that are not fields: ``lc`` always, ``role`` except for chat messages."""
_new = object.__new__
_set = object.__setattr__


class _Shape(NamedTuple):
    template: dict[str, Any]
    """Every field with its default (immutable defaults only: the others are made per call)."""
    factories: tuple[tuple[str, Any], ...]
    """``(name, default factory)`` of the fields whose default is a new list or dict."""
    names: frozenset[str]
    allow_extra: bool


_SHAPES: dict[type[BaseMessage], _Shape] = {}


def _shape(cls: type[BaseMessage]) -> _Shape:
    shape = _SHAPES.get(cls)
    if shape is None:
        template: dict[str, Any] = {}
        factories = []
        for name, info in cls.model_fields.items():
            template[name] = None if info.default_factory is not None else info.default
            if info.default_factory is not None:
                factories.append((name, info.default_factory))
        shape = _Shape(
            template,
            tuple(factories),
            frozenset(cls.model_fields),
            cls.model_config.get("extra") == "allow",
        )
        _SHAPES[cls] = shape
    return shape


def copy_json(value: Any) -> Any:
    """A fresh copy of every list and dict inside ``value`` (strings and numbers are shared:
    they are immutable).
    """
    kind = type(value)
    if kind is dict:
        return {k: copy_json(v) for k, v in value.items()} if value else {}
    if kind is list:
        return [copy_json(v) for v in value] if value else []
    return value


def build_message(doc: dict[str, Any]) -> BaseMessage:
    """Rebuild a message from a document this module wrote, without pydantic validation.

    The document came from a validated message (``message_doc``), so the fields are already in
    their validated form; defaults are filled in as validation would, and the result compares
    equal to :func:`message_from_doc` of the same document (tested). ``doc`` is consumed: its
    lists and dicts become the message's.

    Raises:
        IntegrityError: the document names no known message type.
    """
    kind = doc.get("lc")
    cls = MESSAGE_CLASSES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise IntegrityError(f"message document of unknown type {kind!r}")
    shape = _shape(cls)
    values = shape.template.copy()
    for name, factory in shape.factories:
        if name not in doc:
            values[name] = factory()
    given = doc.keys() - _SKIP[kind == "chat"]
    extra_names = given - shape.names
    if extra_names:
        if not shape.allow_extra:
            return message_from_doc(doc)
        extra = {k: doc[k] for k in extra_names}
        values.update({k: v for k, v in doc.items() if k in shape.names})
    else:
        extra = {}
        values.update(doc)
        for name in _SKIP[kind == "chat"]:
            values.pop(name, None)
    message = _new(cls)
    _set(message, "__dict__", values)
    _set(message, "__pydantic_fields_set__", set(given))
    _set(message, "__pydantic_extra__", extra if shape.allow_extra else None)
    _set(message, "__pydantic_private__", None)
    return message


@contextmanager
def no_gc_pause() -> Iterator[None]:
    """Hold off the cyclic garbage collector while thousands of acyclic objects (messages and
    their dicts) are built: each would otherwise trigger collections that walk the whole heap.
    Re-enabled after, unless it was off before.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def fresh_message(message: BaseMessage) -> BaseMessage:
    """An independent copy of a message built by :func:`build_message`: changing the copy in
    place (even inside its tool calls) never reaches the original. Only lists and dicts are
    copied; strings, numbers and None are immutable and shared.
    """
    source = message.__dict__
    fields = source.copy()
    for name, value in source.items():
        kind = type(value)
        if kind is list or kind is dict:
            fields[name] = copy_json(value) if value else kind()
    copy = _new(type(message))
    _set(copy, "__dict__", fields)
    _set(copy, "__pydantic_fields_set__", set(message.__pydantic_fields_set__))
    extra = message.__pydantic_extra__
    _set(copy, "__pydantic_extra__", None if extra is None else copy_json(extra))
    _set(copy, "__pydantic_private__", None)
    return copy


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
