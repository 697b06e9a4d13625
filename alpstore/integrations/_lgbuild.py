"""Message objects made from their documents fast: without pydantic validation (the
documents came from validated messages), one class's fields laid out once (its shape), and for
many documents at once one plan per document shape (``doc_messages``, the cold read's path).

A document is what ``_lgcodec.message_doc`` wrote: the message's non-default fields, ``role``
and ``lc`` (the LangChain type that rebuilds it).
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Sequence
from itertools import compress, count, repeat, starmap
from operator import eq
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
from pydantic import BaseModel

from alpstore.errors import IntegrityError

MESSAGE_CLASSES: dict[str, type[BaseMessage]] = {
    "human": HumanMessage,
    "ai": AIMessage,
    "system": SystemMessage,
    "tool": ToolMessage,
    "function": FunctionMessage,
    "chat": ChatMessage,
}


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
