"""Issue 41: a session file's import checks as strictly, faster.

- ``certainly_valid`` (the hot lines' schemas by hand) never vouches for a line jsonschema
  refuses, and vouches for the lines an export writes (hypothesis, from genuine lines with one
  field changed to an edge value, or one key added or dropped);
- the import's read holds each run of lines until it matches the seal the checking read made:
  a file changed between the two reads is refused whole, nothing imported;
- the secret scan of blobs runs on batches and still names the first blob holding one, before
  any later problem of the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import blake3
import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alpstore.codec import canonical_json
from alpstore.errors import CheckpointFileError, SecretError
from alpstore.portable.travel import SCAN_BATCH, SessionReader, check_session_file
from alpstore.portable.travel_export import export_session
from alpstore.portable.travel_format import LINE_SCHEMAS, certainly_valid
from alpstore.portable.travel_import import import_session_file
from alpstore.store import Store

HEX = "0123456789abcdef" * 4
EDGES: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    2**31 - 1,
    2**31,
    1.0,
    0.5,
    -0.5,
    float("nan"),
    float("inf"),
    "",
    "x",
    "active",
    "all",
    "last_n",
    HEX,
    HEX + "\n",
    HEX.upper(),
    HEX[:63],
    [],
    [HEX],
    {},
    {"mode": "all", "n": 1},
    {"mode": "all", "n": 0},
    {"mode": "all", "n": 1, "x": 1},
    {"session": "s", "seq": 1, "covering": None},
    {"session": "s", "seq": 0, "covering": HEX},
    {"session": 1, "seq": 1, "covering": HEX},
]

GENUINE: dict[str, dict[str, Any]] = {
    "checkpoint": {
        "type": "checkpoint",
        "id": 7,
        "seq": 3,
        "turn": 3,
        "label": None,
        "trigger": "every_turn",
        "abandoned": False,
        "created_at": 1764979200.25,
        "kernel": None,
        "wm": HEX,
        "keep": 2,
        "add": [HEX],
        "covering": HEX,
    },
    "head": {"type": "head", "keep": 0, "add": [], "covering": HEX},
    "end": {"type": "end", "lines": 12, "digest": HEX},
    "session": {
        "type": "session",
        "uuid": "s-1",
        "name": "a name",
        "status": "active",
        "turn": 3,
        "backtrack_count": 0,
        "retention": {"mode": "last_n", "n": 4},
        "origin": None,
        "manifest": None,
        "created_at": 1,
        "updated_at": 2.5,
        "parent": {"session": "p", "seq": 2, "covering": HEX},
    },
}
VALIDATORS = {k: jsonschema.Draft7Validator(LINE_SCHEMAS[k]) for k in GENUINE}


@st.composite
def changed_lines(draw: st.DrawFn) -> dict[str, Any]:
    """A genuine line of a hot type with a few fields changed, added or dropped."""
    kind = draw(st.sampled_from(sorted(GENUINE)))
    rec = json.loads(json.dumps(GENUINE[kind]))
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from([k for k in rec if k != "type"] + ["extra"]))
        action = draw(st.sampled_from(["set", "set", "set", "drop"]))
        if action == "drop":
            rec.pop(key, None)
        else:
            rec[key] = draw(st.sampled_from(EDGES))
    return rec


def test_every_genuine_line_is_vouched_for() -> None:
    for kind, rec in GENUINE.items():
        assert VALIDATORS[kind].is_valid(rec), kind
        assert certainly_valid(rec), kind
    assert certainly_valid({**GENUINE["session"], "parent": None})


@settings(max_examples=3000, deadline=None)
@given(changed_lines())
def test_a_line_vouched_for_passes_its_schema(rec: dict[str, Any]) -> None:
    if certainly_valid(rec):
        assert VALIDATORS[rec["type"]].is_valid(rec), rec


def test_lines_of_other_types_go_to_the_schema() -> None:
    assert not certainly_valid({"type": "event", "kind": "x", "checkpoint": None})
    assert not certainly_valid({"type": "blob", "digest": HEX, "kind": "message", "value": 1})


# ---------------------------------------------------------------- files
def exported(tmp_path: Path, turns: int = 40, *, big: bool = False) -> Path:
    with Store.open(tmp_path / "source") as store:
        s = store.create_session(name="src")
        for i in range(turns):
            text = f"turn {i} " + ("x" * 40_000 if big else "")
            s.commit_turn([{"role": "user", "content": text}])
        path = tmp_path / "src.session.jsonl"
        export_session(store, s.id, path)
    return path


def test_the_checking_read_seals_every_line(tmp_path: Path) -> None:
    path = exported(tmp_path, 60, big=True)  # 2.4 MB: three runs
    checked = check_session_file(path)
    assert checked.seals is not None and len(checked.seals) >= 3
    assert checked.seals[-1][0] == checked.lines == len(path.read_bytes().splitlines())
    sealed = SessionReader(path, sealed=checked)
    assert [k for k, _, _ in sealed.records()].count("checkpoint") == 60


@pytest.mark.parametrize("where", ["first", "last", "appended"])
def test_a_file_changed_after_its_check_imports_nothing(
    tmp_path: Path, where: str, run_root: Path
) -> None:
    path = exported(tmp_path, 60, big=True)
    checked = check_session_file(path)
    lines = path.read_bytes().splitlines(keepends=True)
    if where == "first":  # a blob's text changed in the first run: caught before any write
        i = next(i for i, line in enumerate(lines) if b'"turn 0 ' in line)
        lines[i] = lines[i].replace(b"turn 0 ", b"turn 9 ")
    elif where == "last":
        lines[-1] = lines[-1].replace(b'"type":"end"', b'"type": "end"')
    else:
        lines.append(b"\n")
    path.write_bytes(b"".join(lines))
    with Store.open(run_root) as store:
        with pytest.raises(CheckpointFileError, match="changed since it was checked"):
            import_session_file(store, path, checked=checked)
        assert store.list_sessions() == []


def _secret_file(tmp_path: Path, at: int) -> Path:
    """An export whose blob number ``at`` holds a credential (its digest right, so only the
    scan refuses it), the same line again after it (a later problem of the same batch)."""
    path = exported(tmp_path, SCAN_BATCH + 20)
    lines = path.read_bytes().splitlines(keepends=True)
    blobs = [i for i, line in enumerate(lines) if line.startswith(b'{"type":"blob"')]
    value = {"role": "user", "content": "key AKIAIOSFODNN7EXAMPLE here"}
    raw = canonical_json(value)
    rec = {
        "type": "blob",
        "digest": blake3.blake3(raw).hexdigest(),
        "kind": "message",
        "value": value,
    }
    lines[blobs[at]] = json.dumps(rec, separators=(",", ":")).encode() + b"\n"
    lines.insert(blobs[at] + 1, lines[blobs[at]])  # the same blob twice: refused next line
    path.write_bytes(b"".join(lines))
    return path


@pytest.mark.parametrize("at", [0, SCAN_BATCH - 1, SCAN_BATCH + 5])
def test_a_secret_in_a_batch_is_the_first_problem_named(tmp_path: Path, at: int) -> None:
    path = _secret_file(tmp_path, at)
    with pytest.raises(SecretError, match=r"line \d+ \(blob"):
        check_session_file(path)
