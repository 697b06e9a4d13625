"""AlpstoreSaver's cold read (issue 16): a head rebuilt from the archive by one lean range scan,
blobs decoded per codec group (``alpstore.archive.batch``) and messages built per document
shape (``doc_messages``) gives exactly what the message-by-message path gives — same classes,
same fields in the same order, same fields-set and extras — with no mutable object shared
between two messages, and damaged blobs are still named by their digest.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("langgraph.graph", reason="langgraph is not installed (alpstore[langgraph])")

from langchain_core.messages import (
    AIMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.checkpoint.base import empty_checkpoint

import alpstore.integrations._lgcodec as lgcodec
import alpstore.integrations._lgdb as lgdb
from alpstore.archive.batch import decode_lean
from alpstore.codec import CODEC_ZSTD_BASE, CODEC_ZSTD_DICT, digest_hex
from alpstore.db import raw as rsql
from alpstore.db.tables import BLOB_MESSAGE, BLOB_SUMMARY
from alpstore.errors import IntegrityError
from alpstore.integrations.langgraph import AlpstoreSaver
from tests.conftest import Backend

text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
ids = st.none() | st.text("abc0123", min_size=1, max_size=4)
calls = st.lists(
    st.builds(
        lambda name, x, cid: {"name": name, "args": {"x": x}, "id": cid},
        st.sampled_from(["read", "grep"]),
        st.lists(st.integers(-5, 5), max_size=3),
        st.text("xyz", min_size=1, max_size=3),
    ),
    max_size=2,
)
messages = st.one_of(
    st.builds(lambda c, i: HumanMessage(content=c, id=i), text, ids),
    st.builds(lambda c, n: HumanMessage(content=c, name=n), text, text),
    st.builds(lambda c: HumanMessage(content=[{"type": "text", "text": c}]), text),
    st.builds(lambda c, v: HumanMessage(content=c, foo={"a": v}), text, st.integers()),
    st.builds(lambda c, i, tc: AIMessage(content=c, id=i, tool_calls=tc), text, ids, calls),
    st.builds(
        lambda c, m: AIMessage(content=c, response_metadata={"model": m}, additional_kwargs={}),
        text,
        text,
    ),
    st.builds(
        lambda c, i, s: ToolMessage(content=c, tool_call_id=i, status=s),
        text,
        st.text("xyz", min_size=1, max_size=3),
        st.sampled_from(["success", "error"]),
    ),
    st.builds(lambda c: SystemMessage(content=c), text),
    st.builds(lambda c, r: ChatMessage(content=c, role=r), text, st.sampled_from(["bob", "x"])),
)
odd_entries = st.one_of(  # entries other tools append, and summaries (folds)
    st.builds(lambda c: (BLOB_MESSAGE, {"role": "user", "content": c}), text),
    st.builds(lambda c: (BLOB_MESSAGE, {"role": "assistant", "content": c}), text),
    st.builds(lambda c: (BLOB_SUMMARY, {"summary": c, "covers": []}), text),
)


def entry_of(message: Any) -> tuple[int, Any]:
    doc = lgcodec.message_doc(message)
    assert doc is not None
    return BLOB_MESSAGE, doc


def parsed(entries: list[tuple[int, Any]]) -> tuple[list[int], list[Any]]:
    """Kinds and freshly parsed documents, as a read makes them (canonical JSON, parsed)."""
    return [k for k, _ in entries], [json.loads(json.dumps(d, sort_keys=True)) for _, d in entries]


def one_by_one(kinds: list[int], docs: list[Any]) -> list[Any]:
    pairs = [lgdb.entry_state(kind, doc) for kind, doc in zip(kinds, docs, strict=True)]
    return lgcodec.assemble([c for c, _ in pairs], [s for _, s in pairs])


def mutable_parts(value: Any) -> Iterator[int]:
    """The ids of every list, dict and set inside a message (its slots included)."""
    if isinstance(value, (list, dict, set)):
        yield id(value)
        for item in value.values() if isinstance(value, dict) else value:
            yield from mutable_parts(item)
    elif hasattr(value, "__pydantic_fields_set__"):
        yield from mutable_parts(value.__dict__)
        yield from mutable_parts(value.__pydantic_fields_set__)
        if value.__pydantic_extra__ is not None:
            yield from mutable_parts(value.__pydantic_extra__)


def assert_same(built: list[Any], reference: list[Any]) -> None:
    assert len(built) == len(reference)
    for b, r in zip(built, reference, strict=True):
        assert type(b) is type(r)
        assert list(b.__dict__.items()) == list(r.__dict__.items())  # the order too
        assert b.__pydantic_fields_set__ == r.__pydantic_fields_set__
        assert b.__pydantic_extra__ == r.__pydantic_extra__
        assert b.__pydantic_private__ is None
        assert b.model_dump_json() == r.model_dump_json()


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.one_of(messages.map(entry_of), odd_entries), max_size=24),
    st.booleans(),
)
def test_messages_built_per_shape_equal_the_ones_built_one_by_one(
    entries: list[tuple[int, Any]], only_messages: bool
) -> None:
    if only_messages:  # the path every message takes when no entry is a summary
        entries = [e for e in entries if e[0] == BLOB_MESSAGE]
    built = lgdb.entry_messages(*parsed(entries))
    assert_same(built, one_by_one(*parsed(entries)))
    seen: set[int] = set()
    for message in built:  # nothing mutable is shared between two messages
        mine = set(mutable_parts(message))
        assert not mine & seen
        seen |= mine


def test_a_document_of_unknown_type_is_refused_by_either_path() -> None:
    kinds, docs = parsed([entry_of(HumanMessage(content="a")), (BLOB_MESSAGE, {"lc": "robot"})])
    with pytest.raises(IntegrityError, match="unknown type 'robot'"):
        lgdb.entry_messages(kinds, docs)
    with pytest.raises(IntegrityError, match="unknown type 'robot'"):
        one_by_one(*parsed([(BLOB_MESSAGE, {"lc": "robot"})]))


def thread_messages(n: int) -> list[Any]:
    """A coding agent's messages: small ones (dictionary frames once trained) and versions of
    a growing file (delta frames against the version before)."""
    out: list[Any] = [SystemMessage(content="You are a careful coding agent.", id="s")]
    body = [f"    line {i}: value = compute({i}, factor={i % 7})" for i in range(60)]
    for i in range(n):
        out.append(HumanMessage(content=f"step {i}: fix the failing test", id=f"h{i}"))
        out.append(
            AIMessage(
                content="",
                id=f"a{i}",
                tool_calls=[{"name": "read", "args": {"path": f"src/m{i % 3}.py"}, "id": f"c{i}"}],
            )
        )
        body.append(f"    line added at step {i}")
        out.append(ToolMessage(content="\n".join(body), tool_call_id=f"c{i}", id=f"t{i}"))
    return out


def saved(backend: Backend, n: int) -> tuple[AlpstoreSaver, list[Any]]:
    """A thread written step by step (three messages a step), as a graph writes it."""
    saver = AlpstoreSaver(backend.open_store())
    messages = thread_messages(n)
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    for step, end in enumerate(range(1, len(messages) + 1, 3), 1):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": messages[:end]}
        checkpoint["channel_versions"] = {"messages": step}
        config = saver.put(config, checkpoint, {"step": step}, {"messages": step})
    return saver, messages


def assert_stored(read: list[Any], messages: list[Any]) -> None:
    """What a read gives equals what was stored, fields in the order pydantic gives them
    (nested dicts come back in canonical key order: equal, as before issue 16)."""
    assert read == messages
    for r, m in zip(read, messages, strict=True):
        assert type(r) is type(m) and list(r.__dict__) == list(m.__dict__)
        assert r.__pydantic_fields_set__ == m.__pydantic_fields_set__


def test_a_cold_read_decodes_every_codec_and_equals_what_was_stored(backend: Backend) -> None:
    saver, messages = saved(backend, 40)
    store = saver.store
    store.archive.train_dictionary(samples=400)  # small blobs now dictionary frames
    session = store.get_session("langgraph:t")
    with store.db.read() as conn:
        full = store.views.read_blob_rows(conn, session.head)
        lean = store.views.read_lean_rows(conn, session.head)
        assert decode_lean(store.archive, conn, lean) == store.archive.decode_rows(
            conn, full, verify=True
        )
    codecs = {int(r[3]) for r in lean}
    assert {CODEC_ZSTD_DICT, CODEC_ZSTD_BASE} <= codecs, codecs
    cold = AlpstoreSaver(backend.open_store())  # a new saver: nothing in memory
    got = cold.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
    assert got is not None
    read = got.checkpoint["channel_values"]["messages"]
    assert_stored(read, messages)
    with store.db.read() as conn:  # and exactly what the message-by-message path builds
        docs = lgdb.fast_parse(store.archive.decode_rows(conn, full, verify=False))
    assert_same(read, one_by_one([int(r[2]) for r in full], docs or []))
    read[-1].content += " changed in place"
    read[-2].tool_calls[0]["args"]["path"] = "elsewhere"
    again = cold.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
    assert again is not None
    assert_stored(again.checkpoint["channel_values"]["messages"], messages)


@pytest.mark.parametrize("codec", [CODEC_ZSTD_DICT, CODEC_ZSTD_BASE])
def test_a_damaged_blob_in_a_cold_read_is_named_by_its_digest(backend: Backend, codec: int) -> None:
    saver, _ = saved(backend, 40)
    store = saver.store
    store.archive.train_dictionary(samples=400)
    session = store.get_session("langgraph:t")
    with store.db.read() as conn:
        rows = store.views.read_blob_rows(conn, session.head)
    victim = next(r for r in rows if int(r[4]) == codec)
    payload = bytes(victim[6])
    with store.db.atomic() as conn:  # the frame's last bytes (its checksum) garbled
        rsql.execute(
            conn,
            "UPDATE blob_rows SET payload = ? WHERE id = ?",
            (payload[:-4] + bytes(b ^ 0xFF for b in payload[-4:]), victim[0]),
        )
    cold = AlpstoreSaver(backend.open_store())
    with pytest.raises(IntegrityError, match=f"blob {digest_hex(bytes(victim[1]))}"):
        cold.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
