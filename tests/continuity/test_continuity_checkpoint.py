"""checkpoint.json: canonical digest, encoding, fail-closed reading, limits, the two writers."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from alpstore.continuity.checkpoint import (
    MAX_CHECKPOINT_BYTES,
    MAX_PIN_BYTES,
    Checkpoint,
    Pin,
    checkpoint_digest,
    encode_checkpoint,
    read_checkpoint,
    verify_checkpoint,
)
from alpstore.continuity.paths import ExecutionPaths, check_execution_id
from alpstore.continuity.pins import (
    INTERACTIVE_TASK_SENTINEL,
    add_pin,
    collapse_control,
    cut_utf8,
    prepare,
    remove_pin,
)
from alpstore.errors import ContinuityError, ValidationFinding

# Digests computed independently with node: JSON.stringify of a recursively key-sorted object,
# `integrity` deleted, SHA-256 of the UTF-8 bytes.
VECTORS: list[tuple[dict[str, Any], str]] = [
    (
        {
            "version": 1,
            "executionId": "exec_vn",
            "policyHash": "ph",
            "runtime": None,
            "createdAt": "2026-01-01T00:00:00.000Z",
            "updatedAt": "2026-01-01T00:00:00.000Z",
            "objective": "Viết lại bộ nhớ đệm — không mất dữ liệu",
            "decisions": [
                {
                    "id": "a1",
                    "text": "Dùng WAL cho SQLite",
                    "source": "principal",
                    "createdAt": "2026-01-01T00:00:01.000Z",
                }
            ],
            "constraints": [],
            "openItems": [],
            "nextActions": [],
        },
        "00bd24204d86130e8dec5b3b16b60b5c85f796b955631599e604acb74d98d5ba",
    ),
    (
        {
            "version": 1,
            "executionId": "exec_mix",
            "policyHash": "p\u00e9",
            "runtime": "claude",
            "createdAt": "t0",
            "updatedAt": "t1",
            "objective": 'line1\nline2\t"quoted" \\ back \u2028 sep \U0001f680 中文 \u00a0nbsp',
            "decisions": [],
            "constraints": [
                {"createdAt": "t2", "source": "agent", "text": "日本語 ✓ ü", "id": "c1"}
            ],
            "openItems": [
                {
                    "id": "o1",
                    "text": "emoji 👩\u200d💻 zwj",
                    "source": "execution",
                    "createdAt": "t3",
                }
            ],
            "nextActions": [],
        },
        "6c31e46a446b932c555adc8851556a3271d2833680c4131d837d6fcbcc4011d3",
    ),
]

NODE_CANON = r"""
const fs = require('fs'); const crypto = require('crypto');
const sort = v => Array.isArray(v) ? v.map(sort) : (v && typeof v === 'object')
  ? Object.keys(v).sort().reduce((o, k) => (o[k] = sort(v[k]), o), {}) : v;
const doc = JSON.parse(fs.readFileSync(0, 'utf8')); delete doc.integrity;
const text = JSON.stringify(sort(doc));
process.stdout.write(crypto.createHash('sha256').update(text, 'utf8').digest('hex'));
"""


@pytest.fixture
def paths(tmp_path: Path) -> ExecutionPaths:
    return ExecutionPaths.of(tmp_path / "alp", "exec_test")


def make_checkpoint(**sections: list[str]) -> Checkpoint:
    pins = {
        name: tuple(
            Pin(
                id=f"{name}-{i}",
                text=t,
                source="principal",
                created_at=f"2026-01-01T00:00:{i:02d}Z",
            )
            for i, t in enumerate(texts)
        )
        for name, texts in sections.items()
    }
    full = {
        name: pins.get(name, ())
        for name in ("decisions", "constraints", "openItems", "nextActions")
    }
    return Checkpoint("exec_test", "ph", None, "t0", "t1", "Objective", full)


@pytest.mark.parametrize(("doc", "expected"), VECTORS)
def test_digest_vectors(doc: dict[str, Any], expected: str) -> None:
    assert checkpoint_digest(doc) == expected
    assert checkpoint_digest({**doc, "integrity": {"checkpointSha256": "0" * 64}}) == expected


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
@pytest.mark.parametrize(("doc", "expected"), VECTORS)
def test_digest_matches_node_live(doc: dict[str, Any], expected: str) -> None:
    out = subprocess.run(
        ["node", "-e", NODE_CANON], input=json.dumps(doc).encode(), capture_output=True, check=True
    ).stdout.decode()
    assert out == expected == checkpoint_digest(doc)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def _shuffled(value: Any, rnd: Any) -> Any:
    if isinstance(value, dict):
        keys = list(value)
        rnd.shuffle(keys)
        return {k: _shuffled(value[k], rnd) for k in keys}
    if isinstance(value, list):
        return [_shuffled(v, rnd) for v in value]
    return value


@given(st.dictionaries(st.text(max_size=8), json_values, max_size=6), st.randoms())
def test_digest_independent_of_key_order(doc: dict[str, Any], rnd: Any) -> None:
    assert checkpoint_digest(doc) == checkpoint_digest(_shuffled(doc, rnd))


def test_encode_is_pretty_two_space_and_verifies() -> None:
    checkpoint = make_checkpoint(decisions=["Dùng WAL"])
    data = encode_checkpoint(checkpoint)
    assert data.endswith(b"}\n") and b'\n  "version": 1,' in data
    assert "Dùng WAL".encode() in data  # non-ASCII unescaped
    keys = list(json.loads(data))
    assert keys[0] == "version" and keys[-1] == "integrity"
    assert verify_checkpoint(data, "exec_test") == checkpoint


def _write_raw(paths: ExecutionPaths, doc: dict[str, Any], *, reseal: bool = True) -> None:
    if reseal:
        doc["integrity"] = {"checkpointSha256": checkpoint_digest(doc)}
    paths.context_dir.mkdir(parents=True, exist_ok=True)
    paths.checkpoint.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


def _good_doc() -> dict[str, Any]:
    return json.loads(encode_checkpoint(make_checkpoint(decisions=["a"])))


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda d: d.update(version=2), "schema: $.version"),
        (lambda d: d.update(version=True), "schema: $.version"),
        (lambda d: d.update(extra=1), "unknown key 'extra'"),
        (lambda d: d.pop("objective"), "missing key 'objective'"),
        (lambda d: d.update(runtime="gpt"), "schema: $.runtime"),
        (lambda d: d.update(executionId="exec bad"), "schema: $.executionId"),
        (lambda d: d["decisions"][0].update(source="robot"), "$.decisions[0].source"),
        (lambda d: d["decisions"][0].update(text=""), "$.decisions[0].text"),
        (lambda d: d["decisions"][0].update(text="x" * (MAX_PIN_BYTES + 1)), "over the 4 KiB"),
        (lambda d: d["decisions"].append(dict(d["decisions"][0])), "appears twice"),
        (lambda d: d["decisions"][0].update(note="x"), "$.decisions[0]"),
        (lambda d: d.update(openItems={}), "$.openItems: not a list"),
    ],
)
def test_schema_findings(paths: ExecutionPaths, mutate: Any, reason: str) -> None:
    doc = _good_doc()
    mutate(doc)
    _write_raw(paths, doc)
    with pytest.raises(ValidationFinding, match="schema") as info:
        read_checkpoint(paths)
    assert reason in info.value.message


def test_not_json_and_oversize_are_findings(paths: ExecutionPaths) -> None:
    paths.context_dir.mkdir(parents=True)
    paths.checkpoint.write_bytes(b'{"version": 1,')
    with pytest.raises(ValidationFinding, match="not JSON"):
        read_checkpoint(paths)
    paths.checkpoint.write_bytes(b" " * (MAX_CHECKPOINT_BYTES + 1))
    with pytest.raises(ValidationFinding, match="128 KiB"):
        read_checkpoint(paths)


def test_one_changed_character_is_a_digest_mismatch(paths: ExecutionPaths) -> None:
    add_pin(paths, "decision", "Use WAL")
    data = paths.checkpoint.read_bytes()
    paths.checkpoint.write_bytes(data.replace(b"Use WAL", b"Use WAX"))
    with pytest.raises(ValidationFinding, match="digest mismatch"):
        read_checkpoint(paths)


def test_binding_to_execution_and_policy(tmp_path: Path) -> None:
    home = tmp_path / "alp"
    one = ExecutionPaths.of(home, "exec_one")
    prepare(one, "policy-a", task="Do it")
    other = ExecutionPaths.of(home, "exec_two")
    other.context_dir.mkdir(parents=True)
    shutil.copy(one.checkpoint, other.checkpoint)
    with pytest.raises(ValidationFinding, match="bound to execution exec_one"):
        read_checkpoint(other)
    with pytest.raises(ValidationFinding, match="bound to policy policy-a"):
        read_checkpoint(one, policy_hash="policy-b")
    assert read_checkpoint(one, policy_hash="policy-a") is not None


@pytest.mark.parametrize("bad", ["exec_", "abc", "exec_a/b", "exec_a\n", "exec_a b", "../exec_a"])
def test_bad_execution_ids(bad: str) -> None:
    with pytest.raises(ContinuityError):
        check_execution_id(bad)


def test_collapse_control_and_cut() -> None:
    assert collapse_control("  a\n\n  b\tc\x1b[31m d\u2028e  ") == "a b c [31m d e"
    assert collapse_control("\n\t\x00") == ""
    text = "é" * 3000  # 6000 bytes
    cut = cut_utf8(text, MAX_PIN_BYTES)
    assert len(cut.encode()) == MAX_PIN_BYTES and cut == "é" * 2048
    assert len(cut_utf8("a" + "é" * 3000, MAX_PIN_BYTES).encode()) == MAX_PIN_BYTES - 1


def test_pin_creates_unbound_checkpoint_and_unpin_removes(paths: ExecutionPaths) -> None:
    pin = add_pin(paths, "open-item", "Why is CI red?\nsee log", source="agent")
    checkpoint = read_checkpoint(paths)
    assert checkpoint is not None
    assert checkpoint.objective is None and checkpoint.policy_hash == ""
    assert checkpoint.pins("openItems") == (pin,)
    assert pin.text == "Why is CI red? see log" and pin.source == "agent"
    section, removed = remove_pin(paths, pin.id)
    assert (section, removed) == ("openItems", pin)
    after = read_checkpoint(paths)
    assert after is not None and after.all_pins() == []


@pytest.mark.parametrize(
    ("kind", "text", "source", "message"),
    [
        ("idea", "x", "principal", "unknown pin kind"),
        ("decision", " \n\t", "principal", "needs text"),
        ("decision", "x" * (MAX_PIN_BYTES + 1), "principal", "over the 4 KiB"),
        ("decision", "x", "user", "unknown pin source"),
    ],
)
def test_refused_pin_leaves_file_byte_identical(
    paths: ExecutionPaths, kind: str, text: str, source: str, message: str
) -> None:
    add_pin(paths, "decision", "first")
    before = paths.checkpoint.read_bytes()
    with pytest.raises(ContinuityError, match=message):
        add_pin(paths, kind, text, source=source)
    assert paths.checkpoint.read_bytes() == before


def test_checkpoint_over_128_kib_is_refused_untouched(paths: ExecutionPaths) -> None:
    pin_text = "y" * 4000
    count = 0
    with pytest.raises(ContinuityError, match="128 KiB"):
        while count < 100:
            add_pin(paths, "constraint", pin_text)
            count += 1
    before = paths.checkpoint.read_bytes()
    assert 30 <= count < 40
    assert len(before) <= MAX_CHECKPOINT_BYTES
    with pytest.raises(ContinuityError):
        add_pin(paths, "constraint", pin_text)
    assert paths.checkpoint.read_bytes() == before
    assert sorted(p.name for p in paths.context_dir.iterdir()) == [".lock", "checkpoint.json"]


def test_unknown_pin_id(paths: ExecutionPaths) -> None:
    with pytest.raises(ContinuityError, match="no checkpoint"):
        remove_pin(paths, "nope")
    add_pin(paths, "decision", "x")
    with pytest.raises(ContinuityError, match="has no pin nope"):
        remove_pin(paths, "nope")


def test_writers_refuse_a_tampered_checkpoint(paths: ExecutionPaths) -> None:
    add_pin(paths, "decision", "Use WAL")
    tampered = paths.checkpoint.read_bytes().replace(b"Use WAL", b"Use WAX")
    paths.checkpoint.write_bytes(tampered)
    with pytest.raises(ValidationFinding):
        add_pin(paths, "decision", "more")
    assert paths.checkpoint.read_bytes() == tampered


def test_prepare_seeds_objective_and_thread_pins(paths: ExecutionPaths) -> None:
    seed = {"decisions": (Pin("d0", "From the thread", "execution", "t0"),)}
    checkpoint, written = prepare(paths, "ph", task="Ship it", seed=seed)
    assert written and checkpoint.objective == "Ship it"
    assert [p.text for p in checkpoint.pins("decisions")] == ["From the thread"]
    again, written_again = prepare(paths, "ph", task="Other")
    assert not written_again and again == checkpoint
    with pytest.raises(ContinuityError, match="already prepared"):
        prepare(paths, "other-policy")


def test_prepare_skips_the_interactive_sentinel(paths: ExecutionPaths) -> None:
    checkpoint, _ = prepare(paths, "ph", task=INTERACTIVE_TASK_SENTINEL)
    assert checkpoint.objective is None


def test_prepare_binds_a_checkpoint_created_by_pin(paths: ExecutionPaths) -> None:
    pin = add_pin(paths, "next-action", "Run the tests")
    seed = {"nextActions": (Pin("n0", "Seeded", "execution", "t0"),)}
    checkpoint, written = prepare(paths, "ph", task="Goal", seed=seed)
    assert written and checkpoint.policy_hash == "ph" and checkpoint.objective == "Goal"
    assert [p.id for p in checkpoint.pins("nextActions")] == ["n0", pin.id]


CONCURRENT = """
import sys
from pathlib import Path
from alpstore.continuity.paths import ExecutionPaths
from alpstore.continuity.pins import add_pin
paths = ExecutionPaths.of(Path(sys.argv[1]), "exec_race")
for i in range(int(sys.argv[3])):
    add_pin(paths, "decision", f"{sys.argv[2]}-{i}")
"""


def test_concurrent_pinning_loses_nothing(tmp_path: Path) -> None:
    home = tmp_path / "alp"
    procs = [
        subprocess.Popen([sys.executable, "-c", CONCURRENT, str(home), f"w{w}", "25"])
        for w in range(4)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    checkpoint = read_checkpoint(ExecutionPaths.of(home, "exec_race"))
    assert checkpoint is not None
    texts = {p.text for p in checkpoint.pins("decisions")}
    assert texts == {f"w{w}-{i}" for w in range(4) for i in range(25)}
