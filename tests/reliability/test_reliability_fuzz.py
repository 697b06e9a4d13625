"""Hostile input: every reader ends in success or a clean alpstore error — never another exception,
a hang, a memory blow-up or a partial write. Library functions for volume, then a handful through
the real CLI (stderr must hold no traceback and no "internal error")."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alpstore.codec import decompress_file_bytes, parse_json
from alpstore.continuity.checkpoint import verify_checkpoint
from alpstore.continuity.hooks import session_start_source
from alpstore.continuity.journal import build_line, reduce, replay, source_of
from alpstore.continuity.paths import ExecutionPaths
from alpstore.continuity.pins import add_pin, prepare
from alpstore.errors import AlpstoreError, ValidationFinding
from alpstore.importers import parse_history
from alpstore.policy.model import parse_policy
from alpstore.policy.overlays import load_manifest, load_overlay
from alpstore.portable.checking import plan_import
from alpstore.portable.files import load_checkpoint_file
from alpstore.portable.importing import import_document
from alpstore.store import Store
from tests.conftest import run_cli

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "upstream"
EXAMPLE = FIXTURES / "mas-lab-checkpoint-v2.example.json"

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=25,
)
fuzz = settings(max_examples=120, suppress_health_check=list(HealthCheck))


def clean(fn: Callable[[], Any], *, one_line: bool = True) -> Any:
    """Run ``fn``; an AlpstoreError is a clean refusal (returned), anything else fails the test.

    ``one_line=False`` where the message quotes a key of the input, which may hold a newline.
    """
    try:
        return fn()
    except AlpstoreError as err:
        assert err.message, repr(err)
        assert not one_line or "\n" not in err.message, repr(err.message)
        return err


@st.composite
def mutated(draw: st.DrawFn, base: bytes) -> bytes:
    """``base`` with a few byte flips, cuts, insertions and duplications."""
    data = bytearray(base)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "truncate", "dup"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[at] ^= draw(st.integers(1, 255))
        elif op == "cut":
            del data[at : at + draw(st.integers(1, 40))]
        elif op == "insert":
            data[at:at] = draw(
                st.binary(min_size=1, max_size=8)
                | st.sampled_from([b'"', b"{", b"]", b"\\u", b"\x00", b"\xff"])
            )
        elif op == "truncate":
            del data[at:]
        else:
            data[at:at] = data[at : at + draw(st.integers(1, 60))]
    return bytes(data)


# ------------------------------------------------------------------ archive put
@pytest.fixture(scope="module")
def put_store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with Store.open(tmp_path_factory.mktemp("put")) as store:
        yield store


@given(raw=st.binary(max_size=300) | json_values.map(lambda v: json.dumps(v).encode()))
@fuzz
def test_fuzz_archive_put(put_store: Store, raw: bytes) -> None:
    store = put_store
    before = store.archive.stats().blobs
    value = clean(lambda: parse_json(raw, where="stdin"))
    if isinstance(value, AlpstoreError):
        return
    digest = clean(lambda: store.archive.put(value))
    if isinstance(digest, AlpstoreError):
        assert store.archive.stats().blobs == before  # nothing written
    else:
        assert store.archive.get(digest, verify=True) == value


# ------------------------------------------------------------------ .zst files
@given(
    data=st.binary(max_size=400)
    | st.builds(lambda b: zstandard.ZstdCompressor().compress(b), st.binary(max_size=400))
    | mutated(zstandard.ZstdCompressor().compress(b"x" * 5000))
)
@fuzz
def test_fuzz_zst_decompression_is_bounded(data: bytes) -> None:
    out = clean(lambda: decompress_file_bytes(data, limit=4096, what="file.zst"))
    assert isinstance(out, AlpstoreError) or len(out) <= 4096


def test_a_zst_bomb_is_refused_without_inflating(tmp_path: Path) -> None:
    bomb = zstandard.ZstdCompressor(level=19).compress(b"\0" * (300 * 1024 * 1024))
    assert len(bomb) < 64 * 1024
    out = clean(lambda: decompress_file_bytes(bomb, limit=1024 * 1024, what="bomb.zst"))
    assert isinstance(out, AlpstoreError) and "more than" in out.message
    path = tmp_path / "bomb.json.zst"
    path.write_bytes(bomb)
    assert isinstance(
        clean(lambda: load_checkpoint_file(path, max_bytes=1024 * 1024)), AlpstoreError
    )


# ------------------------------------------------------------------ deep checkpoint files
@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A real deep export (folds, a backtrack) to mutate."""
    from alpstore.portable.deep import export_snapshot, snapshot_of_checkpoint

    root = tmp_path_factory.mktemp("export")
    with Store.open(root) as store:
        s = store.create_session(session_id="fuzz-source")
        for i in range(6):
            s.commit_turn(
                [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]
            )
        s.fold(1, 4, "early turns")
        ck = s.checkpoint(kernel={"q": {}, "run": {"n": 1}})
        doc = export_snapshot(store, snapshot_of_checkpoint(store, ck))
    return json.dumps(doc).encode()


@given(data=st.data())
@settings(max_examples=150, suppress_health_check=list(HealthCheck))
def test_fuzz_deep_checkpoint_import(
    tmp_path_factory: pytest.TempPathFactory, exported: bytes, data: Any
) -> None:
    base = data.draw(st.sampled_from([exported, EXAMPLE.read_bytes()]))
    raw = data.draw(mutated(base))
    folder = tmp_path_factory.mktemp("deep")
    path = folder / "in.json"
    path.write_bytes(raw)
    doc = clean(lambda: load_checkpoint_file(path))
    if isinstance(doc, AlpstoreError):
        return
    with Store.open(folder / "root") as store:
        before = (store.count_sessions(), store.archive.stats().blobs)
        result = clean(lambda: import_document(store, doc, source_name=str(path), fork=True))
        if isinstance(result, AlpstoreError):
            assert (store.count_sessions(), store.archive.stats().blobs) == before, "partial write"
        else:
            # what was imported reads back whole and verifies
            store.hydrate(result.checkpoint, verify=True)
    shutil.rmtree(folder, ignore_errors=True)


@given(doc=json_values)
@fuzz
def test_fuzz_deep_plan_on_any_json(doc: Any) -> None:
    clean(lambda: plan_import(doc, where="x.json"))


# ------------------------------------------------------------------ policies and overlays
@given(value=json_values)
@fuzz
def test_fuzz_policy(value: Any) -> None:
    clean(lambda: parse_policy(value), one_line=False)
    clean(lambda: parse_policy({"storage": value, "trigger": value}), one_line=False)


@given(data=st.data())
@fuzz
def test_fuzz_overlay_and_manifest_files(
    tmp_path_factory: pytest.TempPathFactory, data: Any
) -> None:
    base = (FIXTURES / "openclaw.overlay.yaml").read_bytes()
    raw = data.draw(mutated(base) | st.binary(max_size=200))
    folder = tmp_path_factory.mktemp("yaml")
    for name in ("x.yaml", "x.json"):
        (folder / name).write_bytes(raw)
        clean(lambda n=name: load_overlay(str(folder / n)))
        clean(lambda n=name: load_manifest(folder / n))


def _billion_laughs(levels: int = 9) -> str:
    lines = ["apiVersion: mas/v1", "kind: Agent", "metadata: {name: lol}"]
    lines.append('l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]')
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]")
    lines.append(f"spec: {{checkpoint: {{storage: disk}}, x: *l{levels - 1}}}")
    return "\n".join(lines) + "\n"


def test_a_yaml_alias_bomb_is_refused(tmp_path: Path) -> None:
    """Found by this suite: 1.5 KB of nested aliases made `session open --manifest` hang."""
    path = tmp_path / "agent.yaml"
    path.write_text(_billion_laughs())
    err = clean(lambda: load_manifest(path))
    assert isinstance(err, AlpstoreError) and "aliases" in err.message
    overlay = tmp_path / "o.yaml"
    overlay.write_text(_billion_laughs().replace("kind: Agent", "kind: Overlay"))
    assert isinstance(clean(lambda: load_overlay(str(overlay))), AlpstoreError)
    result = run_cli(
        "--root", str(tmp_path / "run"), "session", "open", "--manifest", str(path), timeout=60
    )
    assert result.code != 0 and "aliases" in result.err, result.err
    assert not (tmp_path / "run" / "traces" / "archive").exists() or "Traceback" not in result.err


# ------------------------------------------------------------------ checkpoint.json
@pytest.fixture(scope="module")
def continuity_file(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    home = tmp_path_factory.mktemp("alp")
    paths = ExecutionPaths.of(home, "exec_fuzz")
    prepare(paths, "policy-1", task="ship the release — ünïcode")
    for i, kind in enumerate(["decision", "constraint", "open-item", "next-action"]):
        add_pin(paths, kind, f"pin number {i} with text")
    return paths.checkpoint.read_bytes()


@given(data=st.data())
@settings(max_examples=200, suppress_health_check=list(HealthCheck))
def test_fuzz_checkpoint_json(continuity_file: bytes, data: Any) -> None:
    original = verify_checkpoint(continuity_file, "exec_fuzz")
    raw = data.draw(mutated(continuity_file))
    got = clean(lambda: verify_checkpoint(raw, "exec_fuzz"))
    if not isinstance(got, AlpstoreError):
        assert got == original, "a changed checkpoint.json verified with different content"
    else:
        assert isinstance(got, ValidationFinding)


def test_a_tampered_checkpoint_json_is_never_resealed(
    tmp_path: Path, continuity_file: bytes
) -> None:
    paths = ExecutionPaths.of(tmp_path, "exec_fuzz")
    paths.context_dir.mkdir(parents=True)
    tampered = continuity_file.replace(b"pin number 0", b"pin number 9")
    paths.checkpoint.write_bytes(tampered)
    assert isinstance(clean(lambda: add_pin(paths, "decision", "more")), ValidationFinding)
    assert paths.checkpoint.read_bytes() == tampered


# ------------------------------------------------------------------ journal lines and hooks
@given(
    lines=st.lists(
        st.binary(max_size=120) | json_values.map(lambda v: json.dumps(v).encode()), max_size=12
    )
)
@fuzz
def test_fuzz_journal_replay(tmp_path_factory: pytest.TempPathFactory, lines: list[bytes]) -> None:
    paths = ExecutionPaths.of(tmp_path_factory.mktemp("j"), "exec_fuzz")
    paths.context_dir.mkdir(parents=True)
    good = build_line(
        execution_id="exec_fuzz",
        policy_hash=None,
        runtime="claude",
        phase="pre",
        source={"session_id": "s"},
        seq=1,
    )
    paths.journal.write_bytes(good + b"\n".join(lines) + (b"\n" if lines else b""))
    result = replay(paths)
    assert result.events and result.events[0].session_id == "s"
    reduce(result.events)


@given(payload=st.binary(max_size=300) | json_values.map(lambda v: json.dumps(v).encode()))
@fuzz
def test_fuzz_hook_payloads(payload: bytes) -> None:
    for runtime in ("claude", "codex"):
        source = source_of(runtime, payload)
        assert all(isinstance(v, str) and len(v) <= 256 for v in source.values())
        line = build_line(
            execution_id="exec_fuzz", policy_hash=None, runtime=runtime, phase="post", source=source
        )
        assert json.loads(line)["source"] == source
    assert session_start_source(payload) is None or isinstance(session_start_source(payload), str)


# ------------------------------------------------------------------ transcript imports
@given(
    lines=st.lists(
        json_values.map(lambda v: json.dumps(v))
        | st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "assistant", "tool", "x"]), "content": json_values}
        ).map(json.dumps)
        | st.fixed_dictionaries(
            {"type": st.sampled_from(["user", "assistant", "summary"]), "message": json_values}
        ).map(json.dumps)
        | st.text(max_size=30),
        min_size=1,
        max_size=8,
    )
)
@fuzz
def test_fuzz_transcript_import(tmp_path_factory: pytest.TempPathFactory, lines: list[str]) -> None:
    folder = tmp_path_factory.mktemp("imp")
    path = folder / "t.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
    parsed = clean(lambda: parse_history(path))
    if isinstance(parsed, AlpstoreError):
        return
    with Store.open(folder / "root") as store:
        session = store.create_session()
        for turn in parsed.turns:
            session.commit_turn(turn)  # a parsed transcript always imports
        assert [e.value for e in session.history()] == [m for t in parsed.turns for m in t]


# ------------------------------------------------------------------ through the real CLI
HOSTILE = {
    "deep": b"[" * 100000 + b"]" * 100000,
    "nan": b'{"x": NaN}',
    "latin1": b'{"x": "\xe9t\xe9"}',
    "surrogate": b'{"x": "\\ud800"}',
    "empty": b"",
    "nul": b"\x00\x00\x00",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_cli_archive_put_refuses_cleanly(tmp_path: Path, name: str) -> None:
    result = run_cli("--root", str(tmp_path), "archive", "put", "-", input=HOSTILE[name])
    assert "Traceback" not in result.err and "internal error" not in result.err, result.err
    assert result.code != 0 and result.err.startswith("alpstore: error:"), (result.code, result.err)
    db = tmp_path / "traces" / "archive" / "archive.db"
    if db.exists():
        with Store.open(tmp_path) as store:
            assert store.archive.stats().blobs == 0


def test_cli_hostile_files_end_in_clean_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"role":"user","content":"ok"}\n' + b"[" * 50000 + b"\n")
    zst = tmp_path / "bomb.json.zst"
    zst.write_bytes(zstandard.ZstdCompressor(level=19).compress(b" " * (200 * 1024 * 1024)))
    home = tmp_path / "alp"
    ctx = home / "executions" / "exec_x" / "context"
    ctx.mkdir(parents=True)
    (ctx / "checkpoint.json").write_bytes(b"\xff\xfe garbage {")
    runs = [
        run_cli("--root", str(tmp_path), "session", "import", str(bad)),
        run_cli("--root", str(tmp_path), "checkpoint", "import", str(zst)),
        run_cli("context", "validate", "exec_x", env={"ALP_HOME": str(home)}),
    ]
    for result in runs:
        assert result.code != 0, result
        assert "Traceback" not in result.err and "internal error" not in result.err, result.err
        assert result.err.startswith("alpstore: error:"), result.err
    with Store.open(tmp_path) as store:
        assert store.count_sessions() == 0
    hook = run_cli(
        "hook",
        "compact-record",
        "pre",
        input=b"\xff not json",
        env={"ALP_HOME": str(home), "ALP_EXECUTION_ID": "exec_y"},
    )
    assert hook.code == 0 and "Traceback" not in hook.err
    journal = home / "executions" / "exec_y" / "context" / "compact-events.jsonl"
    assert "parseError" in json.loads(journal.read_bytes().splitlines()[-1])["source"]
