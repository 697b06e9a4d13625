"""Incremental, idempotent transcript import (issue 43): the same transcript imported again
appends only what it gained; an unchanged file writes nothing; a file that no longer extends
what was imported is refused; a torn last line waits; ``--skip-bad-lines`` imports around
malformed lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Backend
from tests.fixtures.transcripts.build import Claude

FIXTURES = Path(__file__).parents[1] / "fixtures" / "transcripts"


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def _state(store: Any, uuid: str) -> tuple[list[Any], list[tuple[int, int, bool]], int]:
    """The head's values, each checkpoint's (turn, length, abandoned), the backtracks."""
    s = store.get_session(uuid)
    cks = s.checkpoints(include_abandoned=True)
    head = [e.value for e in s.history()]
    return head, [(c.turn, c.length, c.abandoned) for c in cks], len(store.session_backtracks(s.id))


def _sessions(store: Any) -> dict[str, Any]:
    return {i.uuid: _state(store, i.uuid) for i in store.list_sessions()}


@pytest.mark.parametrize(
    "fixture", ["claude-rewind.jsonl", "claude-compactions.jsonl", "claude-subagents-inline.jsonl"]
)
def test_a_transcript_imported_in_two_parts_equals_one_import(tmp_path: Path, fixture: str) -> None:
    """Every split point: the first part imported with its last turn left open (a hook run
    mid-turn), then the whole: the same sessions, heads, checkpoints and backtracks as one
    import of the whole; imported again, nothing changes.
    """
    from alpstore.errors import InputError
    from alpstore.store import Store
    from alpstore.transcripts.importing import import_transcript

    source = FIXTURES / fixture
    lines = _lines(source)
    with Store.open(tmp_path / "whole") as st:
        import_transcript(st, source)
        expected = _sessions(st)
    for cut in range(1, len(lines)):
        path = tmp_path / f"cut{cut}.jsonl"
        path.write_bytes(b"".join(lines[:cut]))
        with Store.open(tmp_path / f"r{cut}") as store:
            try:
                import_transcript(store, path, close_turn=False)
            except InputError as err:  # a prefix with no message at all is refused
                assert "no user or assistant messages" in err.message
            path.write_bytes(b"".join(lines))
            import_transcript(store, path)
            assert _sessions(store) == expected, f"split after line {cut}"
            again = import_transcript(store, path)
            assert again.unchanged and _sessions(store) == expected


def test_closing_each_part_keeps_the_line(tmp_path: Path) -> None:
    """Parts each closed (a CLI import of a file still being written): the line shown is
    still one import's, a response cut between two imports one message."""
    from alpstore.errors import InputError
    from alpstore.store import Store
    from alpstore.transcripts.importing import import_transcript

    source = FIXTURES / "claude-compactions.jsonl"
    lines = _lines(source)
    with Store.open(tmp_path / "whole") as st:
        import_transcript(st, source)
        (sid,) = [i.uuid for i in st.list_sessions()]
        expected = [e.value for e in st.get_session(sid).history()]
    for cut in range(3, len(lines)):
        path = tmp_path / "t.jsonl"
        path.write_bytes(b"".join(lines[:cut]))
        with Store.open(tmp_path / f"r{cut}") as st:
            try:
                import_transcript(st, path)
            except InputError as err:  # a prefix with no message at all is refused
                assert "no user or assistant messages" in err.message
            path.write_bytes(b"".join(lines))
            import_transcript(st, path)
            assert [e.value for e in st.get_session(sid).history()] == expected, cut


def test_reimport_appends_one_checkpoint_per_new_turn(backend: Backend, tmp_path: Path) -> None:
    cc = Claude(seed="inc")
    path = tmp_path / "s.jsonl"
    for i in range(3):
        cc.turn(f"q{i}", f"a{i}")
    cc.write(path)
    first = backend.cli("session", "import", str(path), "--name", "work")
    assert first.code == 0 and "imported 6 messages, 3 checkpoints" in first.out, first.err
    before = backend.cli("session", "log", "work", "--json").out
    same = backend.cli("session", "import", str(path))
    assert same.code == 0 and "nothing new to import" in same.out
    assert backend.cli("session", "log", "work", "--json").out == before
    for i in range(3, 5):
        cc.turn(f"q{i}", f"a{i}")
    cc.write(path)
    more = backend.cli("session", "import", str(path), "--name", "other-name-ignored")
    assert more.code == 0 and "appended 4 messages, 2 checkpoints" in more.out, more.err
    log = json.loads(backend.cli("session", "log", "work", "--json").out)
    assert [r["turn"] for r in log if r["type"] == "checkpoint"] == [1, 2, 3, 4, 5]
    rows = json.loads(backend.cli("session", "list", "--json").out)
    assert [(r["session"], r["name"]) for r in rows] == [(cc.session, "work")]
    # a rewind to a turn an earlier import wrote is found without reading the file again
    cc.turn("rewound", "from q1", parent=cc.records[3]["uuid"])
    cc.write(path)
    rewound = backend.cli("session", "import", str(path))
    assert "1 rewinds as backtracks" in rewound.out, rewound.out + rewound.err
    shown = backend.cli("session", "show", "work").out.splitlines()
    assert shown[-2:] == ["[4] user: rewound", "[5] assistant: from q1"]
    assert shown[2] == "[2] user: q1"


def test_a_file_that_no_longer_extends_the_import_is_refused(
    backend: Backend, tmp_path: Path
) -> None:
    cc = Claude(seed="ext")
    path = tmp_path / "s.jsonl"
    cc.turn("original question", "answer")
    cc.write(path)
    assert backend.cli("session", "import", str(path)).code == 0
    before = backend.cli("session", "log", cc.session, "--json").out
    path.write_text(path.read_text().replace("original question", "rewritten question"))
    cc.turn("more", "more")
    refused = backend.cli("session", "import", str(path))
    assert refused.code != 0 and "no longer extends what was imported" in refused.err
    assert "Traceback" not in refused.err and len(refused.err.strip().splitlines()) <= 2
    assert backend.cli("session", "log", cc.session, "--json").out == before
    path.write_text(path.read_text().splitlines(keepends=True)[0])
    shorter = backend.cli("session", "import", str(path))
    assert shorter.code != 0 and "no longer extends" in shorter.err


def test_a_session_not_imported_from_a_transcript_is_not_appended_to(
    backend: Backend, tmp_path: Path
) -> None:
    cc = Claude(seed="own")
    cc.turn("q", "a")
    path = cc.write(tmp_path / "s.jsonl")
    assert backend.cli("session", "new", "--id", cc.session).code == 0
    refused = backend.cli("session", "import", str(path))
    assert refused.code != 0 and "was not imported from a transcript" in refused.err


def test_a_torn_last_line_waits_for_the_next_import(backend: Backend, tmp_path: Path) -> None:
    cc = Claude(seed="torn")
    cc.turn("q0", "a0")
    cc.turn("q1", "a1")
    path = cc.write(tmp_path / "s.jsonl")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])  # the writer is mid-line
    r = backend.cli("session", "import", str(path))
    assert r.code == 0, r.err
    assert "still being written" in r.err and "imported 3 messages" in r.out
    path.write_bytes(data)
    r = backend.cli("session", "import", str(path))
    assert r.code == 0 and "appended 1 messages" in r.out, r.out + r.err
    shown = backend.cli("session", "show", cc.session).out.splitlines()
    assert shown == ["[0] user: q0", "[1] assistant: a0", "[2] user: q1", "[3] assistant: a1"]


def test_skip_bad_lines_imports_around_them_and_names_them(
    backend: Backend, tmp_path: Path
) -> None:
    source = FIXTURES / "claude-rewind.jsonl"
    lines = _lines(source)
    bad = [*lines[:4], b'{"type": "user", "message": \n', *lines[4:9], b"not json\n", *lines[9:]]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"".join(bad))
    refused = backend.cli("session", "import", str(path))
    assert refused.code != 0 and f"{path}:5: not valid JSON" in refused.err
    assert "--skip-bad-lines" in refused.err
    listed = backend.cli("session", "list", "--json")  # no archive (exit 4), or an empty one
    assert (listed.code == 4 and "no archive at" in listed.err) or json.loads(listed.out) == []
    r = backend.cli("session", "import", str(path), "--skip-bad-lines")
    assert r.code == 0, r.err
    assert "skipped 2 malformed line(s)" in r.err and "5, 11" in r.err
    sid = json.loads(lines[1])["sessionId"]
    shown = backend.cli("session", "show", sid).out
    assert "Rewound after compaction" in shown


@pytest.mark.parametrize(
    ("value", "says"),
    [('"\\ud800"', "lone surrogate"), ("1e400", "is not allowed"), ("NaN", "is not allowed")],
)
def test_a_record_json_holds_but_the_archive_cannot_is_named(
    tmp_path: Path, value: str, says: str
) -> None:
    """Each record is checked as the archive will hold it (walked, not encoded: no copy of a
    long record): a lone surrogate or a non-finite number names its line."""
    from tests.conftest import run_cli

    lines = _lines(FIXTURES / "claude-rewind.jsonl")
    odd = (
        b'{"type": "user", "uuid": "u-odd", "message": {"content": [1, ' + value.encode() + b"]}}\n"
    )
    path = tmp_path / "odd.jsonl"
    path.write_bytes(b"".join([*lines[:6], odd, *lines[6:]]))
    root = tmp_path / "run"
    refused = run_cli("--root", str(root), "session", "import", str(path))
    assert refused.code == 3 and f"{path}:7: " in refused.err and says in refused.err
    r = run_cli("--root", str(root), "session", "import", str(path), "--skip-bad-lines")
    assert r.code == 0 and "skipped 1 malformed line(s)" in r.err and ": 7" in r.err
