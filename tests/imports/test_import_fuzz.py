"""Hostile-file fuzzing of the two importers (issue 14): every mutated deep file and transcript
either imports or is refused with one clean line — never another exception (the command's exit
70) — and a refusal leaves the archive exactly as it was. Bounded for CI: a few seconds per
backend."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alpstore.errors import AlpstoreError
from alpstore.importers import import_history, parse_history
from alpstore.portable.deep import snapshot_of_head
from alpstore.portable.exporting import write_export
from alpstore.portable.importing import import_file
from alpstore.store import Store
from tests.conftest import Backend
from tests.imports._files import fingerprint, mas_doc

hostile_text = st.text(
    st.sampled_from(["a", "é", "\x1b", "\n", "\x00", "\u202e", "@", ":", "/", '"', "\\", " "]),
    max_size=12,
)
hostile_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([2**31, 2**63, -1, 0, 1.5, 1e308])
    | hostile_text
)
hostile_values = st.recursive(
    hostile_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(hostile_text, inner, max_size=3),
    max_leaves=8,
) | st.builds(lambda n: json.loads("[" * n + "]" * n), st.sampled_from([255, 257, 600, 900]))

fuzz = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


def _nodes(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_nodes(v, (*path, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_nodes(v, (*path, i)))
    return out


def _replace(doc: Any, path: tuple[Any, ...], new: Any, drop: bool) -> Any:
    if not path:
        return new
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if drop:
        del parent[path[-1]]
    else:
        parent[path[-1]] = new
    return doc


def _base_export(root: Path) -> dict[str, Any]:
    with Store.open(root) as src:
        s = src.create_session(session_id="fz-1", name="fuzz")
        s.append([{"role": "user", "content": f"q{i}"} for i in range(6)] + ["bare", [1, 2]])
        s.checkpoint(kernel={"q": {"a": 1}, "run": {}}, working_memory={"k": [1]})
        s.fold(0, 3, "the first three")
        s.checkpoint(kernel={"q": {"a": 2}, "run": {}}, label="release")
        path = root / "base.json"
        write_export(src, snapshot_of_head(src, s), path)
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


@st.composite
def mutated_files(draw: st.DrawFn, bases: list[dict[str, Any]]) -> tuple[bytes, bool]:
    doc = json.loads(json.dumps(draw(st.sampled_from(bases))))
    for _ in range(draw(st.integers(1, 3))):
        nodes = _nodes(doc)
        path = draw(st.sampled_from(nodes))
        drop = bool(path) and draw(st.booleans())
        doc = _replace(doc, path, draw(hostile_values), drop)
    text = json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogatepass")
    if draw(st.booleans()):  # damage the text itself: the streaming parser's turn
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.binary(max_size=4)) + text[at + draw(st.integers(0, 3)) :]
    return text, draw(st.booleans())


def test_hostile_deep_files_never_crash_and_refusals_change_nothing(
    backend: Backend, tmp_path: Path
) -> None:
    bases = [_base_export(tmp_path / "src"), mas_doc(), mas_doc("other-id", label="x")]
    store = backend.open_store()
    files = tmp_path / "files"
    files.mkdir()

    @fuzz
    @given(mutated_files(bases))
    def check(case: tuple[bytes, bool]) -> None:
        data, compressed = case
        path = files / ("f.json.zst" if compressed else "f.json")
        path.write_bytes(zstandard.ZstdCompressor().compress(data) if compressed else data)
        before = fingerprint(store)
        try:
            import_file(store, path, fork=True)  # --fork: the same base imports many times
        except AlpstoreError as err:
            assert err.message and "\n" not in err.message, repr(err.message)
            assert fingerprint(store) == before
        try:
            import_file(store, path)
        except AlpstoreError as err:
            assert "\n" not in err.message, repr(err.message)

    check()


def _deep_line(n: int) -> str:
    return '{"role": "user", "content": ' + "[" * n + "]" * n + "}"


transcript_lines = st.one_of(
    st.builds(
        lambda role, content: json.dumps({"role": role, "content": content}),
        st.sampled_from(["user", "assistant", "tool", "system", "nobody", 3]),
        hostile_values,
    ),
    st.builds(json.dumps, hostile_values),
    st.builds(_deep_line, st.sampled_from([100, 300, 900, 2000])),
    hostile_text,
    st.just('{"type": "user", "message": {"content": [{"type": "tool_result"}]}, "uuid": 1}'),
)  # fmt: skip


def test_hostile_transcripts_never_crash_and_refusals_change_nothing(
    backend: Backend, tmp_path: Path
) -> None:
    store = backend.open_store()
    path = tmp_path / "t.jsonl"

    @fuzz
    @given(st.lists(transcript_lines, min_size=1, max_size=6))
    def check(lines: list[str]) -> None:
        path.write_bytes("\n".join(lines).encode("utf-8", "surrogatepass"))
        before = fingerprint(store)
        try:
            parsed = parse_history(path)
            import_history(store, parsed, name="t", suffix=True)
        except AlpstoreError as err:
            assert err.message, repr(err)
            assert fingerprint(store) == before

    check()
