"""What the archive writes it can read back: a document nested deeper than
``codec.MAX_DEPTH`` is refused when it is written, not stored to fail every later read.

Before, ``commit_turn`` stored a message nested ~990 levels deep that the batch parser of every
read (``parse_documents``) could not parse (RecursionError), and met ~2,000 levels with a bare
RecursionError instead of an alpstore error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alpstore.codec import MAX_DEPTH, canonical_json, canonical_json_parsed
from alpstore.errors import NestedTooDeepError
from tests.conftest import Backend


def nested(depth: int, leaf: Any = "x", *, dicts: bool = False) -> Any:
    """``leaf`` inside ``depth`` lists (or one-key objects)."""
    value = leaf
    for _ in range(depth):
        value = {"k": value} if dicts else [value]
    return value


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 990, 2_000, 50_000])
def test_a_message_nested_too_deep_is_refused_and_nothing_is_stored(
    backend: Backend, depth: int
) -> None:
    store = backend.open_store()
    session = store.create_session(name="deep")
    session.commit_turn([{"role": "user", "content": "fine"}])
    deep = {"role": "tool", "content": "r", "extra": nested(depth - 1)}
    with pytest.raises(NestedTooDeepError, match=f"nested deeper than {MAX_DEPTH} levels"):
        session.commit_turn([{"role": "user", "content": "q"}, deep])
    assert [e.value["content"] for e in session.history()] == ["fine"]
    assert store.get_session("deep").info().turn == 1


def test_the_deepest_message_allowed_is_read_back_by_a_new_process(backend: Backend) -> None:
    store = backend.open_store()
    session = store.create_session(name="deep")
    message = {"role": "tool", "content": "r", "extra": nested(MAX_DEPTH - 1, dicts=True)}
    session.commit_turn([message])
    store.close()
    again = backend.open_store()
    assert [e.value for e in again.get_session("deep").history()] == [message]


def test_the_cli_refuses_a_deep_message_in_one_line(backend: Backend, tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text(json.dumps({"role": "user", "content": "q", "x": nested(600)}))
    assert backend.cli("session", "new", "--name", "d").code == 0
    result = backend.cli("session", "append", "d", str(path))
    assert result.code == 3, result.err
    assert f"nested deeper than {MAX_DEPTH} levels" in result.err
    assert len(result.err.strip().splitlines()) == 1 and "Traceback" not in result.err
    assert json.loads(backend.cli("session", "show", "d", "--json").out) == []


@settings(max_examples=60, deadline=None)
@given(depth=st.integers(1, 3 * MAX_DEPTH), dicts=st.booleans())
def test_canonical_json_refuses_exactly_what_is_too_deep(depth: int, dicts: bool) -> None:
    value = nested(depth, dicts=dicts)
    for encode in (canonical_json, canonical_json_parsed):
        if depth > MAX_DEPTH:
            with pytest.raises(NestedTooDeepError):
                encode(value)
        else:
            assert json.loads(encode(value)) == value
