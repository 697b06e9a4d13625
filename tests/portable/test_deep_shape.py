"""Issue 41: the checkpoint schema's version 2 checked by hand (``portable.deep_shape``) never
vouches for a document jsonschema refuses, vouches for what alpstore writes, and so a deep
export or import of a valid file does not load jsonschema.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from alpstore.portable.deep_shape import certainly_valid
from alpstore.portable.files import _formats, _is_datetime, _skeleton, checkpoint_schema

HASH = "0123456789abcdef" * 4
GENUINE: dict[str, Any] = {
    "version": 2,
    "label": "latest",
    "turn": 3,
    "backtrack_count": 0,
    "spec_revision": 1,
    "lineage": {
        "session_id": "s-1",
        "parent_session_id": None,
        "forked_from_checkpoint": None,
        "root_session_id": "s-1",
        "created_at": "2026-12-06T07:00:00+00:00",
    },
    "kernel": {"q": {}, "run": {"ledger": []}},
    "working_memory": [
        {
            "agent_id": "main",
            "turn_history": [["user", "hi"], ["assistant", "hello"]],
            "committed_messages": [],
            "conversation_chunks": None,
            "working_messages": [],
            "open_tool_call_id": "call_1",
            "synced_tool_result_cids": [1, 2],
        }
    ],
    "manifest": {"content": {"kind": "Agent"}, "content_hash": HASH},
    "memory_seeds": [{"key": "k", "content": "c"}],
    "runtime_profile": {},
}
EDGES: list[Any] = [
    None,
    True,
    False,
    0,
    2,
    -1,
    2.0,
    1.5,
    "",
    "x",
    "2026-12-06T07:00:00Z",
    "2026-12-06 07:00:00",
    "2026-12-06T07:00:00",
    "not a time",
    HASH,
    HASH + "\n",
    HASH.upper(),
    [],
    [[]],
    [["a", "b"]],
    [["a"]],
    [["a", 1]],
    [1],
    [True],
    [{}],
    ["x"],
    {},
    {"q": 1, "run": 2},
    {"q": 1},
]
PATHS: list[tuple[Any, ...]] = (
    [(k,) for k in (*GENUINE, "extra")]
    + [("lineage", k) for k in (*GENUINE["lineage"], "extra")]
    + [("manifest", k) for k in ("content", "content_hash", "extra")]
    + [("working_memory", 0, k) for k in (*GENUINE["working_memory"][0], "extra")]
    + [("kernel", "q"), ("kernel", "run"), ("working_memory", 1), ("memory_seeds", 0)]
)
VALIDATOR = jsonschema.Draft7Validator(checkpoint_schema(), format_checker=_formats())


def _change(doc: dict[str, Any], path: tuple[Any, ...], value: Any, drop: bool) -> None:
    node: Any = doc
    for key in path[:-1]:
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            return
    last = path[-1]
    if isinstance(node, dict):
        if drop:
            node.pop(last, None)
        else:
            node[last] = value
    elif isinstance(node, list) and isinstance(last, int):
        if drop and last < len(node):
            del node[last]
        elif last < len(node):
            node[last] = value
        else:
            node.append(value)


@st.composite
def changed(draw: st.DrawFn) -> dict[str, Any]:
    doc = copy.deepcopy(GENUINE)
    for _ in range(draw(st.integers(0, 3))):
        _change(
            doc,
            draw(st.sampled_from(PATHS)),
            copy.deepcopy(draw(st.sampled_from(EDGES))),
            draw(st.booleans()),
        )
    return doc


def test_the_genuine_document_is_vouched_for() -> None:
    assert VALIDATOR.is_valid(GENUINE)
    assert certainly_valid(GENUINE, _is_datetime)
    assert not certainly_valid({**GENUINE, "version": 1}, _is_datetime)


@settings(max_examples=4000, deadline=None)
@given(changed())
def test_a_document_vouched_for_passes_the_schema(doc: dict[str, Any]) -> None:
    if certainly_valid(doc, _is_datetime):
        assert VALIDATOR.is_valid(doc), json.dumps(doc)[:300]


def test_an_export_and_its_import_load_no_jsonschema(tmp_path: Path) -> None:
    script = """
import sys
from pathlib import Path
from alpstore.store import Store
from alpstore.portable.deep import snapshot_of_head
from alpstore.portable.exporting import write_export
from alpstore.portable.importing import import_file
root, out = Path(sys.argv[1]), Path(sys.argv[2])
with Store.open(root) as st:
    s = st.create_session(name="a")
    for i in range(5):
        s.commit_turn([{"role": "user", "content": f"t{i}"}, {"role": "assistant", "content": "k"}])
    write_export(st, snapshot_of_head(st, s), out)
with Store.open(Path(sys.argv[3])) as st:
    import_file(st, out)
print("jsonschema" in sys.modules)
"""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            str(tmp_path / "a"),
            str(tmp_path / "x.json"),
            str(tmp_path / "b"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"


def test_the_skeleton_of_a_genuine_document_is_vouched_for() -> None:
    doc = copy.deepcopy(GENUINE)
    doc["working_memory"][0]["committed_messages"] = [{"role": "user", "content": "x"}]
    skeleton, errors = _skeleton(doc)
    assert errors == [] and certainly_valid(skeleton, _is_datetime)
