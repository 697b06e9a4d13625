"""Issue 14, bounded memory beyond the deep importer: a transcript (`session import`), `checkpoint
show FILE`, auto-resume and the disk store's listing read their files streamed — memory holds one
line, one turn (or a piece of it) or one message, never the file.

The memory tests trace the Python heap (tracemalloc) while a file several MB large is read, and
require the peak to stay under a quarter of the file: reading it whole, as before, holds more
than the file.
"""

from __future__ import annotations

import io
import json
import random
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import alpstore.importers as importers
import alpstore.portable.jsonstream as jsonstream
import alpstore.portable.reading as reading
from alpstore.errors import CheckpointFileError, InputError
from alpstore.importers import import_history, import_history_file, parse_history
from alpstore.portable.deep import build_export, snapshot_of_head
from alpstore.portable.exporting import write_export
from alpstore.portable.files import load_checkpoint_file, manifest_hash, read_document
from alpstore.portable.importing import import_file
from alpstore.portable.reading import read_header, write_pretty
from alpstore.portable.resume import select_latest
from alpstore.portable.stores import open_checkpoint_store
from alpstore.store import Store
from tests.conftest import run_cli
from tests.imports._files import MANIFEST, fingerprint

TEXT = "def handler(request):\n    return limit(request.user, window=60)\n"


def _peak(fn: Callable[[], Any]) -> tuple[Any, int]:
    """``fn()`` and the peak of the Python heap while it ran (bytes above the start)."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        result = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return result, peak


def _transcript(path: Path, turns: int, size: int = 3000) -> list[dict[str, Any]]:
    """A transcript of ``turns`` user/assistant pairs. Replies have no line breaks: the archive
    keeps its 32 newest large blobs' lines as delta candidates, a fixed cost that would
    otherwise dominate a file this small."""
    rng = random.Random(14)
    messages: list[dict[str, Any]] = []
    for t in range(turns):
        messages.append({"role": "user", "content": f"turn {t}: fix it"})
        body = "".join(rng.choice("abcdefghij ") for _ in range(size))
        messages.append({"role": "assistant", "content": f"{t} {body}"})
    path.write_text("".join(json.dumps(m) + "\n" for m in messages), encoding="utf-8")
    return messages


# ------------------------------------------------------------------ session import (JSONL)
def test_transcript_parse_and_import_hold_one_turn_not_the_file(tmp_path: Path) -> None:
    """An import holds a frame's worth of turns (``FRAME_TARGET`` of new small messages,
    written packed before the turns that refer to them; on both backends since issue 41), so
    the file is 8.7 MB: the bound is the frame, not the file. The peak is flat in the file's
    length: on PostgreSQL with 0010 (a frame's members described in its row) 1.57 MB at
    2,100, 2,800 and 4,200 turns (2,100 turns, 6.5 MB, left it 0.2 % under a quarter of the
    file: no margin for what the frame's description holds)."""
    path = tmp_path / "big.jsonl"
    with Store.open(tmp_path / "root") as st:
        turns = 2800
        messages = _transcript(path, turns)  # ~8.7 MB
        size = path.stat().st_size
        parsed, peak = _peak(lambda: parse_history(path))
        assert (parsed.messages, len(parsed.turns), parsed.format) == (2 * turns, turns, "openai")
        assert peak < size / 4, f"parse_history peaked at {peak} bytes for a {size}-byte file"
        session, peak = _peak(lambda: import_history(st, parsed, name="big"))
        assert peak < size / 4, f"import_history peaked at {peak} bytes for a {size}-byte file"
        assert [e.value for e in session.history()] == messages
        assert len(st.list_checkpoints(session.id)) == turns


def test_one_read_import_holds_a_frame_not_the_file(tmp_path: Path) -> None:
    """``import_history_file`` (what `session import` runs, issue 41): the file read once,
    checked inside the transaction, with the same bound as the two reads."""
    path = tmp_path / "big.jsonl"
    with Store.open(tmp_path / "root") as st:
        turns = 2100
        messages = _transcript(path, turns)
        size = path.stat().st_size
        (session, parsed), peak = _peak(lambda: import_history_file(st, path, name="big"))
        assert peak < size / 4, f"import_history_file peaked at {peak} bytes for {size} bytes"
        assert (parsed.messages, parsed.turn_count, parsed.format) == (2 * turns, turns, "openai")
        assert [e.value for e in session.history()] == messages
        assert len(st.list_checkpoints(session.id)) == turns


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ("{not json", r"bad\.jsonl:4001: not valid JSON"),
        ('{"role": "robot", "content": "x"}', r"bad\.jsonl:4001: 'role' must be one of"),
        ('{"role": "user", "content": NaN}', r"bad\.jsonl:4001: \$\.content: nan is not allowed"),
    ],
)
def test_one_read_import_of_a_bad_line_late_in_the_file_writes_nothing(
    tmp_path: Path, bad: str, error: str
) -> None:
    """The line is found after frames and turns were written in the transaction: it rolls
    back whole (no session, no blob, no frame, no dictionary)."""
    path = tmp_path / "bad.jsonl"
    _transcript(path, 2000, size=200)
    with path.open("r+", encoding="utf-8") as fh:
        lines = fh.readlines()
        lines.insert(4000, bad + "\n")
        fh.seek(0)
        fh.writelines(lines)
    with Store.open(tmp_path / "root") as st:
        st.create_session(name="kept").commit_turn([{"role": "user", "content": "hi"}])
        before = fingerprint(st)
        with pytest.raises(InputError, match=error):
            import_history_file(st, path, name="bad")
        assert fingerprint(st) == before
        assert [s.name for s in st.list_sessions()] == ["kept"]


def test_a_long_turn_is_written_in_pieces_and_stays_one_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importers, "BATCH_MESSAGES", 3)
    path = tmp_path / "long.jsonl"
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "go"}]
    messages += [{"role": "assistant", "content": f"step {i}"} for i in range(10)]
    messages += [{"role": "user", "content": "again"}, {"role": "assistant", "content": "ok"}]
    path.write_text("".join(json.dumps(m) + "\n" for m in messages), encoding="utf-8")
    parsed = parse_history(path)
    assert [len(t) for t in parsed.turns] == [12, 2]
    with Store.open(tmp_path / "root") as st:
        session = import_history(st, parsed, name="long")
        assert [e.value for e in session.history()] == messages
        cks = st.list_checkpoints(session.id)
        assert [(c.turn, c.view.length) for c in cks] == [(1, 12), (2, 14)]


def test_a_transcript_changed_after_it_was_checked_imports_nothing(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    _transcript(path, 3, size=10)
    parsed = parse_history(path)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"role": "user", "content": "added later"}) + "\n")
    with Store.open(tmp_path / "root") as st:
        before = fingerprint(st)
        with pytest.raises(InputError, match="changed while it was imported"):
            import_history(st, parsed, name="t")
        assert fingerprint(st) == before


def test_a_line_longer_than_one_message_is_refused_before_it_is_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importers, "MAX_LINE_CHARS", 1000)
    path = tmp_path / "t.jsonl"
    path.write_text(
        json.dumps({"role": "user", "content": "hi"})
        + "\n"
        + json.dumps({"role": "assistant", "content": "x" * 5000})
        + "\n",
        encoding="utf-8",
    )
    with pytest.raises(InputError, match=r"t\.jsonl:2: a line longer than 1000 characters"):
        parse_history(path)


# ------------------------------------------------------------------ deep files
@pytest.fixture
def small_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read and write 64 KB at a time (1 MB in production, a fixed cost several times the size
    of these few-MB files): what is left to measure is whatever grows with the file."""
    monkeypatch.setattr(jsonstream, "CHUNK", 64 * 1024)
    monkeypatch.setattr(reading, "_FLUSH_CHARS", 64 * 1024)


@pytest.fixture(scope="module")
def deep_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A ~4 MB deep file with a fold (a covered block and a summary) and unusual text."""
    folder = tmp_path_factory.mktemp("deep")
    with Store.open(folder / "root") as st:
        s = st.create_session(session_id="deep", name="deep", manifest=MANIFEST)
        s.append(
            [{"role": "user", "content": f"{i} {TEXT * 30} é \u202e\u2028"} for i in range(1500)]
        )
        s.fold(5, 20, "fifteen folded")
        s.checkpoint(kernel={"q": {}, "run": {"r": [1, {}]}}, working_memory={"w": []})
        path = folder / "deep.json"
        write_export(st, snapshot_of_head(st, s), path)
        doc = build_export(st, snapshot_of_head(st, s))
    return path, doc


def test_show_prints_what_json_would_and_holds_one_message(
    deep_file: tuple[Path, dict[str, Any]], tmp_path: Path, small_buffers: None
) -> None:
    path, _ = deep_file
    out = io.StringIO()
    write_pretty(path, out.write)
    assert out.getvalue() == json.dumps(read_document(path), indent=2, ensure_ascii=False) + "\n"
    written: list[int] = []
    _, peak = _peak(lambda: write_pretty(path, lambda text: written.append(len(text))))
    assert sum(written) == len(out.getvalue())
    size = path.stat().st_size
    assert peak < size / 4, f"write_pretty peaked at {peak} bytes for a {size}-byte file"
    zst = tmp_path / "deep.json.zst"
    with Store.open(tmp_path / "r") as st:
        s = import_file(st, path).session
        write_export(st, snapshot_of_head(st, s), zst)
    res = run_cli("checkpoint", "show", str(zst))
    assert res.code == 0, res.err
    assert res.out == json.dumps(read_document(zst), indent=2, ensure_ascii=False) + "\n"


def test_show_prints_nothing_for_a_file_bad_past_its_start(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    text = json.dumps({"version": 2, "working_memory": [{"committed_messages": [{}] * 50}]})
    bad.write_text(text[:-10] + "}}", encoding="utf-8")
    res = run_cli("checkpoint", "show", str(bad))
    assert res.code == 10 and res.out == "", res
    assert "not valid JSON" in res.err and "Traceback" not in res.err
    with pytest.raises(CheckpointFileError, match="duplicate key"):
        dup = tmp_path / "dup.json"
        dup.write_text('{"version": 2, "version": 1}', encoding="utf-8")
        write_pretty(dup, io.StringIO().write)


def test_auto_resume_chooses_by_header_streamed(
    deep_file: tuple[Path, dict[str, Any]], tmp_path: Path, small_buffers: None
) -> None:
    path, doc = deep_file
    folder = tmp_path / "cks"
    folder.mkdir()
    (folder / path.name).write_bytes(path.read_bytes())
    (folder / "bad.json").write_text("{", encoding="utf-8")
    sel, peak = _peak(lambda: select_latest(folder, manifest_hash(MANIFEST)))
    assert sel.chosen is not None and sel.chosen.path.name == path.name
    assert sel.considered == 2 and len(sel.skipped) == 1
    size = path.stat().st_size
    assert peak < size / 4, f"select_latest peaked at {peak} bytes for a {size}-byte file"
    header = sel.chosen.header
    assert header["turn"] == doc["turn"] and header["lineage"] == doc["lineage"]
    assert header["working_memory"][0]["committed_messages"] == []
    assert read_header(path) == header
    whole = load_checkpoint_file(path)
    assert {k: v for k, v in whole.items() if k != "working_memory"} == {
        k: v for k, v in header.items() if k != "working_memory"
    }


def test_the_disk_store_lists_files_by_header_streamed(
    deep_file: tuple[Path, dict[str, Any]], tmp_path: Path, small_buffers: None
) -> None:
    path, doc = deep_file
    (tmp_path / path.name).write_bytes(path.read_bytes())
    listed, peak = _peak(lambda: open_checkpoint_store("disk", tmp_path).list())
    assert [(m.name, m.session_id, m.turn) for m in listed] == [(path.name, "deep", doc["turn"])]
    assert peak < path.stat().st_size / 4


@pytest.mark.parametrize("number", ["12.5", "-3e+7", "1E-2", "42", "true", "null"])
@pytest.mark.parametrize("cut", [1, 2, 3])
def test_a_number_across_a_read_boundary_is_read_whole(number: str, cut: int) -> None:
    """A value the reader parses itself (a header field, an array element) that straddles the
    end of a 1 MB read was cut there ("12." then "5"): a valid file refused."""
    head = '{"pad": "'
    tail = f'", "n": {number}, "m": [{number}]}}'
    at = head + "x" * (jsonstream.CHUNK - len(head) - len('", "n": ') - cut)
    text = (at + tail).encode()
    js = jsonstream.JsonStream(io.BytesIO(text).read, where="t", limit=10**9, value_limit=10**9)
    doc: dict[str, Any] = {}
    for key in js.members():
        doc[key] = [js.value() for _ in js.elements()] if js.peek() == "[" else js.value()
    js.end()
    assert doc == json.loads(text)


def test_auto_resume_imports_only_the_manifest_it_chose(
    deep_file: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """Auto-resume chooses by a streamed header, then imports the file streamed: a file swapped
    in between for one with another manifest is refused, nothing written."""
    path, _ = deep_file
    with Store.open(tmp_path / "root") as st:
        before = fingerprint(st)
        with pytest.raises(CheckpointFileError, match="manifest it was chosen for"):
            import_file(st, path, manifest_hash="0" * 64)
        assert fingerprint(st) == before
        done = import_file(st, path, manifest_hash=manifest_hash(MANIFEST))
        assert done.session.uuid == "deep"
