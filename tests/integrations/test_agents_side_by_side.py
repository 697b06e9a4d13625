"""AlpstoreSession beside SQLiteSession: a generated sequence of the Session protocol's operations
gives equal results, with items SQLiteSession stores and canonical JSON refuses (NaN, ±Infinity,
non-string keys, lone surrogates), on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

agents = pytest.importorskip("agents", reason="openai-agents is not installed (alpstore[dev])")

from agents.memory import SQLiteSession  # noqa: E402

from alpstore.canonical import JSON_MARKER, canonical_json, from_markers, to_markers  # noqa: E402
from alpstore.integrations.openai_agents import AlpstoreSession  # noqa: E402

SURROGATES = st.sampled_from(["\ud800", "\udc80", "a\udfffb", "\ud83d\ude00"])
TEXT = st.one_of(st.text(max_size=5), SURROGATES)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
)
KEYS = st.one_of(
    TEXT, st.integers(-3, 3), st.booleans(), st.none(), st.floats(-2, 2), st.just(JSON_MARKER)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(KEYS, inner, max_size=3),
    ),
    max_leaves=8,
)
ITEMS = st.dictionaries(KEYS, VALUES, max_size=4)
ADD = st.tuples(st.just("add"), st.lists(ITEMS, min_size=1, max_size=3))
GET = st.tuples(st.just("get"), st.one_of(st.none(), st.integers(-3, 4)))
STEPS: st.SearchStrategy[list[tuple[str, Any]]] = st.lists(
    st.one_of(
        ADD,
        GET,
        st.tuples(st.just("pop"), st.none()),
        st.tuples(st.just("clear"), st.none()),
        st.tuples(st.just("add"), st.just([])),
    ),
    max_size=10,
)
"""Mostly adds and reads: a close (inserted at a drawn place, or not at all) ends the rest."""


@st.composite
def operations(draw: st.DrawFn) -> list[tuple[str, Any]]:
    steps = draw(st.lists(ADD, min_size=1, max_size=2)) + draw(STEPS) + [draw(GET)]
    where = draw(st.integers(0, 2 * len(steps)))
    if where <= len(steps):
        steps.insert(where, ("close", None))
    return steps


OPS = operations()


def same(value: Any) -> str:
    """A spelling equal values share (NaN is not == NaN; key order is not content)."""
    return json.dumps(value, sort_keys=True)


async def play(session: Any, ops: list[tuple[str, Any]]) -> list[str]:
    """Each operation's result, or the type of the error it raised."""
    out: list[str] = []
    for op, arg in ops:
        try:
            if op == "add":
                result: Any = await session.add_items(arg)
            elif op == "get":
                result = await session.get_items(arg)
            elif op == "pop":
                result = await session.pop_item()
            elif op == "clear":
                result = await session.clear_session()
            else:
                result = session.close()
            out.append(same(result))
        except (RuntimeError, TypeError, ValueError) as exc:
            out.append(f"raised {type(exc).__name__}")
    session.close()
    return out


def test_operations_give_what_sqlite_session_gives(tmp_path: Path, backend: Any) -> None:
    store = backend.open_store()
    ids = itertools.count()

    @settings(max_examples=60, deadline=None)
    @example(ops=[("add", [{"a": 1}, {"b": 2}, {1: float("nan")}]), ("get", -1), ("get", -3)])
    @given(ops=OPS)
    def check(ops: list[tuple[str, Any]]) -> None:
        sid = f"conv-{next(ids)}"
        theirs = asyncio.run(play(SQLiteSession(sid, tmp_path / "sqlite.db"), ops))
        ours = asyncio.run(play(AlpstoreSession(sid, store), ops))
        assert ours == theirs

    check()


def reordered(value: Any) -> Any:
    """``value`` with every object's keys inserted in reverse order."""
    if isinstance(value, dict):
        return {k: reordered(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [reordered(v) for v in value]
    return value


@given(value=VALUES)
def test_markers_round_trip_and_are_canonical(value: Any) -> None:
    plain = json.loads(json.dumps(value))  # what SQLiteSession reads back
    marked = to_markers(plain)
    # canonical JSON, and digest-stable: the same content in another key order, the same bytes
    assert canonical_json(marked) == canonical_json(to_markers(reordered(plain)))
    assert same(from_markers(marked)) == same(plain)


def test_a_marker_beside_other_keys_is_plain_data() -> None:
    beside = {JSON_MARKER: "NaN", "role": "user"}
    assert from_markers(beside) == beside
    assert to_markers(beside) == beside
    assert math.isnan(from_markers({JSON_MARKER: "NaN"}))
    assert from_markers({JSON_MARKER: "[[[not json"}) == {JSON_MARKER: "[[[not json"}
    # an object that is itself marker-shaped is escaped, so it reads back as written
    shaped = {JSON_MARKER: "NaN"}
    assert from_markers(to_markers(shaped)) == shaped


def test_an_unserialisable_item_raises_type_error_and_stores_nothing(run_root: Path) -> None:
    session = AlpstoreSession.open("bad", run_root)
    asyncio.run(session.add_items([{"role": "user", "content": "kept"}]))
    with pytest.raises(TypeError):
        asyncio.run(session.add_items([{"role": "user", "content": "x"}, {"x": object()}]))
    assert asyncio.run(session.get_items()) == [{"role": "user", "content": "kept"}]
    session.close()
    session.close()  # closing again does nothing
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(session.add_items([]))
