"""Streamed deep files (issue 14): the incremental JSON reader, the streaming export, and import
in any key order."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import alpstore.portable.exporting as exporting
import alpstore.portable.jsonstream as jsonstream
from alpstore.errors import CheckpointFileError, SecretError
from alpstore.portable.deep import build_export, snapshot_of_head
from alpstore.portable.exporting import write_export
from alpstore.portable.importing import import_file
from alpstore.portable.jsonstream import JsonStream
from alpstore.store import Store

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=30,
)  # fmt: skip


def _read_all(js: JsonStream) -> Any:
    """Walk every container by hand down to the scalars (the reader's hardest path)."""
    first = js.peek()
    if first == "{":
        return {k: _read_all(js) for k in js.members()}
    if first == "[":
        return [_read_all(js) for _ in js.elements()]
    return js.value()


@settings(max_examples=80, deadline=None)
@given(json_values, st.integers(1, 9), st.booleans())
def test_reader_agrees_with_json_at_every_chunk_size(value: Any, chunk: int, pretty: bool) -> None:
    text = json.dumps(value, ensure_ascii=False, indent=1 if pretty else None).encode()
    old = jsonstream.CHUNK
    jsonstream.CHUNK = chunk
    try:
        js = JsonStream(io.BytesIO(text).read, where="t", limit=10**9, value_limit=10**9)
        walked = _read_all(js)
        js.end()
        whole = JsonStream(io.BytesIO(text).read, where="t", limit=10**9, value_limit=10**9)
        assert whole.value() == value
    finally:
        jsonstream.CHUNK = old
    assert walked == value


@pytest.mark.parametrize(
    "text",
    [b'{"a": 1,}', b'{"a": 1} x', b'{"a": 1, "a": 2}', b'{"a": "\xff"}', b'{"a": [1, 2', b""],
)
def test_reader_refuses_bad_text_in_one_line(text: bytes) -> None:
    js = JsonStream(io.BytesIO(text).read, where="f.json", limit=10**9, value_limit=10**9)
    with pytest.raises(CheckpointFileError) as err:
        _read_all(js)
        js.end()
    assert err.value.message.startswith("f.json: ") and "\n" not in err.value.message


def test_reader_stops_at_its_limits() -> None:
    big = json.dumps({"a": "x" * 5000}).encode()
    with pytest.raises(CheckpointFileError, match="more than 1000 bytes"):
        _read_all(JsonStream(io.BytesIO(big).read, where="f", limit=1000, value_limit=10**9))
    with pytest.raises(CheckpointFileError, match="longer than"):
        _read_all(JsonStream(io.BytesIO(big).read, where="f", limit=10**9, value_limit=2000))


def _session(root: Path, n: int = 1200) -> tuple[Store, Any]:
    st = Store.open(root)
    s = st.create_session(session_id="stream", name="streamed")
    s.append([{"role": "user", "content": f"message {i} é"} if i % 5 else [i] for i in range(n)])
    s.checkpoint(kernel={"q": {}, "run": {"r": 1}}, working_memory={"w": 1})
    s.fold(10, 40, "thirty folded")
    s.append([{"role": "assistant", "content": "x", "_alpstore": "user data"}, {}])
    s.checkpoint(label="after fold")
    return st, s


@pytest.mark.parametrize("suffix", [".json", ".json.zst"])
def test_streamed_export_equals_the_in_memory_document(tmp_path: Path, suffix: str) -> None:
    st, s = _session(tmp_path / "a")
    with st:
        out = tmp_path / f"s{suffix}"
        write_export(st, snapshot_of_head(st, s), out)  # 1,200+ entries: streamed
        whole = build_export(st, snapshot_of_head(st, s))
    with import_file(Store.open(tmp_path / "b"), out).session.store as b:
        again = build_export(b, snapshot_of_head(b, b.get_session("streamed")))
    assert (
        again["working_memory"][0]["committed_messages"]
        == (whole["working_memory"][0]["committed_messages"])
    )
    if suffix == ".json":
        assert json.loads(out.read_text()) == whole


def test_streamed_export_refuses_a_secret_in_a_message(tmp_path: Path) -> None:
    st, s = _session(tmp_path / "a")
    with st:
        s.append([{"role": "tool", "content": "key AKIAABCDEFGHIJKLMNOP leaked"}])
        out = tmp_path / "s.json"
        with pytest.raises(SecretError, match="AWS access key id"):
            write_export(st, snapshot_of_head(st, s), out)
        assert not out.exists() and not list(tmp_path.glob(".s.json.*"))


def test_import_reads_any_key_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exporting, "SMALL_EXPORT_BYTES", 0)
    st, s = _session(tmp_path / "a", n=50)
    with st:
        out = tmp_path / "s.json"
        write_export(st, snapshot_of_head(st, s), out)
        history = [e.hex for e in s.history()]
    doc = json.loads(out.read_text())
    first = doc["working_memory"][0]
    reordered_agent = {k: first[k] for k in reversed(list(first))}  # covered before the list
    reordered = {k: doc[k] for k in reversed(list(doc))}  # manifest and kernel first
    reordered["working_memory"] = [reordered_agent]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(reordered), encoding="utf-8")
    with Store.open(tmp_path / "b") as b:
        done = import_file(b, path)
        assert [e.hex for e in done.session.history()] == history
