"""How LangGraph values become alpstore blobs: messages as readable JSON documents (one blob
each, role and content first), plain JSON as itself, anything else through LangGraph's serde.

A message document is the message's non-default fields plus ``role`` (OpenAI spelling, so
alpstore's turn counting and ``session show`` read it) and ``lc`` (the LangChain type that
rebuilds it). Only the standard message classes are split; a subclass goes through serde whole.
"""

from __future__ import annotations

import base64
import copy
import marshal
import math
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Sequence
from itertools import compress, count, repeat, starmap
from operator import attrgetter, eq, is_not, itemgetter, ne, or_
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
from pydantic import BaseModel

from alpstore.codec import has_lone_surrogate
from alpstore.errors import IntegrityError
from alpstore.gcpause import no_gc_pause

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


_dumps, _loads = marshal.dumps, marshal.loads


class _Shape(NamedTuple):
    template: dict[str, Any]
    """Every field with its default (immutable defaults only: the others are made per call)."""
    factories: tuple[tuple[str, Any], ...]
    """``(name, default factory)`` of the fields whose default is a new list or dict."""
    names: frozenset[str]
    allow_extra: bool
    skip: frozenset[str]
    """Document keys that are not fields (``_SKIP``)."""
    plain: frozenset[str]
    """Document keys that need no validation: ``names`` and ``skip``."""
    required: frozenset[str]
    """The fields without a default (a document lacking one is validated)."""


_SHAPES: dict[type[BaseMessage], _Shape] = {}


def _shape(cls: type[BaseMessage]) -> _Shape:
    shape = _SHAPES.get(cls)
    if shape is None:
        template: dict[str, Any] = {}
        factories: list[tuple[str, Any]] = []
        for name, info in cls.model_fields.items():
            template[name] = None if info.default_factory is not None else info.default
            if info.default_factory is not None:
                factories.append((name, info.default_factory))
        skip = _SKIP[cls is ChatMessage]
        required = frozenset(n for n, info in cls.model_fields.items() if info.is_required())
        shape = _Shape(
            template,
            tuple(factories),
            frozenset(cls.model_fields),
            cls.model_config.get("extra") == "allow",
            skip,
            frozenset(cls.model_fields) | skip,
            required,
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


State = tuple[dict[str, Any], set[str], dict[str, Any] | None]
"""A message's state: its fields (``__dict__``), the fields set, the extra fields."""


def doc_state(doc: dict[str, Any]) -> tuple[type[BaseMessage], State]:
    """The class and state of the message a document rebuilds, without pydantic validation.

    The document came from a validated message (``message_doc``), so the fields are already in
    their validated form; defaults are filled in as validation would, and the message compares
    equal to :func:`message_from_doc` of the same document (tested). ``doc``'s lists and dicts
    become the state's. A document with fields its class does not allow is validated.

    Raises:
        IntegrityError: the document names no known message type.
    """
    kind = doc.get("lc")
    cls = MESSAGE_CLASSES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise IntegrityError(f"message document of unknown type {kind!r}")
    shape = _SHAPES.get(cls) or _shape(cls)
    if not shape.required <= doc.keys():
        return cls, message_state(message_from_doc(doc))  # pydantic names what is missing
    values = shape.template.copy()
    for name, factory in shape.factories:
        if name not in doc:
            values[name] = factory()
    skip = shape.skip
    if doc.keys() <= shape.plain:  # the common case: only fields (set operations in C)
        values.update(doc)
        fields_set = set(doc)
        for name in skip:
            values.pop(name, None)
            fields_set.discard(name)
        return cls, (values, fields_set, {} if shape.allow_extra else None)
    given = doc.keys() - skip
    extra_names = given - shape.names
    if extra_names:
        if not shape.allow_extra:
            return cls, message_state(message_from_doc(doc))
        extra = {k: doc[k] for k in extra_names}
        values.update({k: v for k, v in doc.items() if k in shape.names})
    else:
        extra = {}
        values.update(doc)
        for name in skip:
            values.pop(name, None)
    return cls, (values, set(given), extra if shape.allow_extra else None)


def message_state(message: BaseMessage) -> State:
    """A message's state (shared with it, not copied)."""
    return (message.__dict__, message.__pydantic_fields_set__, message.__pydantic_extra__)


_consume: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend


_model_slots = BaseModel.__dict__
_set_dict = _model_slots["__dict__"].__set__
_set_fields_set = _model_slots["__pydantic_fields_set__"].__set__
_set_extra = _model_slots["__pydantic_extra__"].__set__
_set_private = _model_slots["__pydantic_private__"].__set__
"""pydantic's own slots of a model, set through their descriptors (no attribute lookup)."""


def assemble(classes: Sequence[type[BaseMessage]], states: Sequence[State]) -> list[BaseMessage]:
    """Messages of the given classes whose slots are the given states (taken, not copied):
    what pydantic's own copy and unpickling do, as C-level loops.
    """
    out: list[BaseMessage] = list(map(_new, classes))
    if out:
        fields, fields_set, extra = zip(*states, strict=True)
        _consume(map(_set_dict, out, fields))
        _consume(map(_set_fields_set, out, fields_set))
        _consume(map(_set_extra, out, extra))
        _consume(map(_set_private, out, repeat(None)))
    return out


class _Plan(NamedTuple):
    """How documents of one type and one list of keys become messages (``doc_messages``)."""

    cls: type[BaseMessage]
    template: dict[str, Any]
    drop: tuple[str, ...]
    """Document keys that are not fields (``lc``, and ``role`` but for chat messages)."""
    factories: tuple[tuple[str, Any], ...]
    """The fields the documents lack whose default is a new list or dict."""
    fields_set: frozenset[str]
    extra: bool
    """The class allows extra fields (its state holds an empty dict of them)."""


_SLOW = "slow"
"""A plan's place for documents ``doc_state`` handles one by one (validation, extra fields)."""
_PLANS: dict[tuple[str, tuple[str, ...]], _Plan | str] = {}
_PLANS_MAX = 4096
"""Plans are kept per message type and key list (no ids, no content): a bounded few."""


def _plan(kind: str, keys: tuple[str, ...]) -> _Plan | str:
    cls = MESSAGE_CLASSES.get(kind)
    plan: _Plan | str = _SLOW
    if cls is not None:
        shape = _SHAPES.get(cls) or _shape(cls)
        given = frozenset(keys)
        if given <= shape.plain and shape.required <= given:
            plan = _Plan(
                cls,
                shape.template,
                tuple(k for k in keys if k in shape.skip),
                tuple((n, f) for n, f in shape.factories if n not in given),
                given - shape.skip,
                shape.allow_extra,
            )
    if len(_PLANS) < _PLANS_MAX:
        _PLANS[kind, keys] = plan
    return plan


def doc_messages(
    docs: Sequence[Any], slow: Callable[[Any], tuple[type[BaseMessage], State]] = doc_state
) -> list[BaseMessage]:
    """Messages rebuilt from many documents, as :func:`doc_state` and :func:`assemble` would,
    in C-level loops: the documents are grouped by type and keys (a handful of groups in a
    conversation), each group shares a plan made once, and every step (copy the defaults,
    take the document's fields, drop ``lc`` and ``role``, make the missing lists and dicts,
    give the objects their slots) is one ``map`` over the group. Anything else (validation,
    extra fields, not a message document) goes through ``slow``, one by one. The documents'
    lists and dicts become the messages'.

    Raises:
        IntegrityError: a document names no known message type (``doc_state``).
    """
    n = len(docs)
    if not n:
        return []
    shapes: defaultdict[tuple[Any, tuple[str, ...]], int] = defaultdict(count().__next__)
    ids: list[int] | None = None
    if set(map(type, docs)) == {dict}:
        try:  # a small number per (type, keys): zip's pairs are hashed, not kept
            ids = list(
                map(
                    shapes.__getitem__,
                    zip(map(dict.get, docs, repeat("lc")), map(tuple, docs), strict=True),
                )
            )
        except TypeError:  # an unhashable "lc": one by one
            ids = None
    if ids is None:
        return [_one(*slow(doc)) for doc in docs]
    out: list[BaseMessage] = [None] * n  # type: ignore[list-item]  # every slot is filled
    for key, shape in shapes.items():
        kind, names = key
        plan = (_PLANS.get(key) or _plan(kind, names)) if type(kind) is str else _SLOW
        if len(shapes) == 1:
            where: Sequence[int] = range(n)
            group = docs
        else:
            where = list(compress(count(), map(eq, ids, repeat(shape))))
            group = list(map(docs.__getitem__, where))
        if isinstance(plan, str):
            made = [_one(*slow(doc)) for doc in group]
        else:
            made = _planned(plan, group)
        _consume(map(out.__setitem__, where, made))
    return out


def _one(cls: type[BaseMessage], state: State) -> BaseMessage:
    return assemble((cls,), (state,))[0]


def _planned(plan: _Plan, docs: Sequence[dict[str, Any]]) -> list[BaseMessage]:
    """Messages of one plan's documents (see :func:`doc_messages`); the documents lose the
    keys that are not fields.
    """
    m = len(docs)
    for name in plan.drop:  # from the documents first: the copies then never grow
        _consume(map(dict.__delitem__, docs, repeat(name, m)))
    values = list(map(dict.copy, repeat(plan.template, m)))
    _consume(map(dict.update, values, docs))
    for name, factory in plan.factories:
        _consume(map(dict.__setitem__, values, repeat(name), starmap(factory, repeat((), m))))
    out: list[BaseMessage] = list(map(_new, repeat(plan.cls, m)))
    _consume(map(_set_dict, out, values))
    _consume(map(_set_fields_set, out, map(set, repeat(plan.fields_set, m))))
    if plan.extra:
        _consume(map(_set_extra, out, starmap(dict, repeat((), m))))
    else:
        _consume(map(_set_extra, out, repeat(None, m)))
    _consume(map(_set_private, out, repeat(None, m)))
    return out


def build_message(doc: dict[str, Any]) -> BaseMessage:
    """Rebuild a message from a document this module wrote, without pydantic validation
    (:func:`doc_state`). ``doc`` is consumed: its lists and dicts become the message's.

    Raises:
        IntegrityError: the document names no known message type.
    """
    return _one(*doc_state(doc))


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
    """

    __slots__ = ("chunks", "classes", "deferred_length", "deferred_load", "odd", "tail")

    def __init__(self) -> None:
        self.classes: list[type[BaseMessage]] = []
        self.chunks: list[bytes] = []
        self.tail: list[bytes] = []
        self.odd: dict[int, BaseMessage] = {}
        self.deferred_load: Callable[[], Sequence[tuple[type[BaseMessage], State]]] | None = None
        self.deferred_length = 0

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
        for cls, blob, odd in items:
            if odd is not None:
                self.odd[len(self.classes)] = odd
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
        none does. The kept states are made for the comparison and freed before it returns,
        with the collector held off meanwhile (thousands of short-lived objects would
        otherwise trigger collections that walk the whole heap).
        """
        self._ready()
        n = len(messages)
        if n > len(self.classes):
            raise ValueError(f"{n} messages compared with {len(self.classes)} kept ones")
        with no_gc_pause():
            states = self._states(n)[start:]
            found = self._first_difference(states, messages[start:n], start, n)
            del states  # freed now, while the collector is off
        return found

    def _first_difference(
        self, states: list[Any], theirs: Sequence[Any], start: int, n: int
    ) -> int:
        classes = self.classes[start:n]
        if not _SPLITTABLE.keys() >= set(map(type, theirs)):  # not all messages: slow path
            pairs = zip(classes, states, theirs, strict=True)
            for i, (cls, state, their) in enumerate(pairs, start):
                if cls is not type(their) or state[0] != their.__dict__:
                    return i
            return n
        differs = map(
            or_,
            map(is_not, classes, map(type, theirs)),
            map(ne, map(_fields_of, states), map(_dict_of, theirs)),
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
