"""Files a user may really receive, through the real `alpstore` command: whatever they hold,
one clear line, a non-zero exit, no traceback, the run root as it was, and nothing from the
file driving the terminal (stderr included)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.imports._files import mas_doc

PAYLOAD = "\x1b]52;c;ZXZpbA==\x07\x1b[2J\u202e\r\nforged"
"""An OSC 52 clipboard write, a screen clear, a right-to-left override and a forged line."""


def _raw_controls(text: str) -> list[str]:
    return [ch for ch in ("\x1b", "\x07", "\u202e", "\r") if ch in text]


def _one_line_error(err: str) -> None:
    lines = err.strip().splitlines()
    assert lines and lines[0].startswith("alpstore: error: "), err
    assert all(line.startswith("alpstore: ") for line in lines), err
    assert len(lines) <= 2, err  # the error and at most a hint
    assert "Traceback" not in err


# ---------------------------------------------------------------- error messages on stderr
@pytest.mark.parametrize("value", ["\ud800", float("nan")], ids=["lone-surrogate", "nan"])
def test_a_transcript_error_naming_a_key_escapes_it(
    run_root: Path, tmp_path: Path, value: object
) -> None:
    path = tmp_path / "t.jsonl"
    line = json.dumps({"role": "user", "content": {PAYLOAD: value}})  # \u001b … \ud800, NaN
    path.write_text(line + "\n", encoding="utf-8")
    res = run_cli("--root", str(run_root), "session", "import", str(path))
    assert res.code == 3, res
    _one_line_error(res.err)
    assert _raw_controls(res.err) == [], res.err
    assert "\\x1b]52;c;ZXZpbA==\\x07" in res.err  # named, visibly


def test_a_deep_file_error_naming_a_key_escapes_it(run_root: Path, tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    doc = mas_doc(messages=[{"role": "user", "content": {PAYLOAD: "\ud800"}}])
    path.write_text(json.dumps(doc), encoding="utf-8")
    for command in ("import", "validate"):
        res = run_cli("--root", str(run_root), "checkpoint", command, str(path))
        assert res.code == 10, res
        _one_line_error(res.err)
        assert _raw_controls(res.err) == [], res.err


# ---------------------------------------------------------------- lone surrogates (`\ud800`)
def _with_lone_surrogate(where: str) -> dict[str, object]:
    """A mas-lab file with a lone surrogate (valid JSON, no valid text) in one place."""
    lone = "x\ud800"
    seeds = [{"key": "k", "content": "v"}]
    doc = copy.deepcopy(mas_doc(memory_seeds=seeds, runtime_profile={"p": "v"}))  # shared manifest
    wm: list[dict[str, object]] = doc["working_memory"]
    if where == "manifest":  # written after the hash: the hash cannot be computed over it
        doc["manifest"]["content"]["metadata"]["name"] = lone
    elif where == "kernel":
        doc["kernel"]["run"] = {"x": lone}
    elif where == "second-agent":
        agent: dict[str, object] = {
            "agent_id": "b",
            "turn_history": [],
            "conversation_chunks": None,
        }
        wm.append({**agent, "committed_messages": [{"role": "user", "content": lone}]})
    elif where == "memory_seeds":
        doc["memory_seeds"] = [{"key": lone, "content": "v"}]
    elif where == "runtime_profile":
        doc["runtime_profile"] = {"p": lone}
    elif where == "lineage":
        doc["lineage"]["forked_from_checkpoint"] = lone
    return doc


@pytest.mark.parametrize(
    "where",
    ["manifest", "kernel", "second-agent", "memory_seeds", "runtime_profile", "lineage"],
)
def test_a_lone_surrogate_in_a_deep_file_is_refused_by_import_and_validate(
    run_root: Path, tmp_path: Path, where: str
) -> None:
    path = tmp_path / "lone.json"
    path.write_text(json.dumps(_with_lone_surrogate(where)), encoding="utf-8")  # \ud800
    assert run_cli("--root", str(run_root), "session", "new", "--name", "mine").code == 0
    before = _run_root_state(run_root)
    for command in ("validate", "import", "fork"):
        res = run_cli("--root", str(run_root), "checkpoint", command, str(path))
        assert res.code == 10, (command, res)
        _one_line_error(res.err)
        assert "surrogate" in res.err, res.err
    assert _run_root_state(run_root) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["lone.json"]


@pytest.mark.parametrize("where", ["manifest", "kernel", "message"])
def test_checkpoint_show_prints_a_lone_surrogate_as_the_file_spells_it(
    tmp_path: Path, where: str
) -> None:
    doc = (
        mas_doc(messages=[{"role": "user", "content": "x\ud800"}])
        if where == "message"
        else _with_lone_surrogate(where)
    )
    path = tmp_path / "lone.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    res = run_cli("checkpoint", "show", str(path))
    assert res.code == 0, res
    assert json.loads(res.out) == json.loads(path.read_text(encoding="utf-8"))
    assert "\\ud800" in res.out


def _run_root_state(root: Path) -> tuple[str, ...]:
    """What an import may change, through the command line: sessions, checkpoints, blobs, and
    the run root's files beside the archive (the event log)."""
    out = []
    for query in (
        "select uuid, name, status, turn, head_length from sessions order by uuid",
        "select count(*) from checkpoints",
        "select count(*) from blobs",
    ):
        res = run_cli("--root", str(root), "sql", query)
        assert res.code == 0, res
        out.append(res.out)
    events = root / "traces" / "events.jsonl"
    out.append(events.read_text(encoding="utf-8") if events.exists() else "")
    return tuple(out)


# ---------------------------------------------------------------- the event log
def _events(root: Path) -> str:
    path = root / "traces" / "events.jsonl"
    return path.read_text(encoding="utf-8") if path.exists() else ""


def test_an_interrupted_transcript_import_leaves_no_event(
    run_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rolled-back session and its checkpoints never existed: traces/events.jsonl must not
    say they did (their ids go to the next ones written)."""
    from typer.testing import CliRunner

    import alpstore.sessions
    from alpstore.cli._common import GlobalOptions
    from alpstore.cli.session import app
    from alpstore.store import Store

    source = tmp_path / "conv.jsonl"
    lines = [{"role": r, "content": f"{r} {i}"} for i in range(30) for r in ("user", "assistant")]
    source.write_text("".join(json.dumps(m) + "\n" for m in lines), encoding="utf-8")
    with Store.open(run_root) as st:
        st.create_session(name="other")
    before = _events(run_root)
    real = alpstore.sessions.Session.write_turns
    calls = {"n": 0}

    def interrupted(self: object, *args: object, **kwargs: object) -> object:
        calls["n"] += 1
        real(self, *args, **kwargs)  # type: ignore[arg-type]
        raise KeyboardInterrupt  # Ctrl-C once the turns are written, before the commit

    monkeypatch.setattr(alpstore.sessions.Session, "write_turns", interrupted)
    opts = GlobalOptions(root=run_root)
    result = CliRunner().invoke(app, ["import", str(source)], obj=opts)
    opts.close()
    monkeypatch.undo()
    assert result.exit_code == 130, result
    assert calls["n"] == 1
    assert _events(run_root) == before
    res = run_cli("--root", str(run_root), "session", "import", str(source))  # then for real
    assert res.code == 0, res
    events = [json.loads(line) for line in _events(run_root).splitlines()]
    checkpoints = [e["checkpoint"] for e in events if e["event"] == "checkpoint"]
    assert len(checkpoints) == len(set(checkpoints)) == 30


def test_a_deep_import_refused_after_its_session_was_made_leaves_no_event(
    run_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import alpstore.store
    from alpstore.errors import CheckpointFileError
    from alpstore.portable.importing import import_file
    from alpstore.store import Store

    path = tmp_path / "d.json"
    path.write_text(json.dumps(mas_doc()), encoding="utf-8")

    def refused(*args: object, **kwargs: object) -> object:
        raise CheckpointFileError("refused late")

    with Store.open(run_root) as st:
        st.create_session(name="other")
        before = _events(run_root)
        monkeypatch.setattr(alpstore.store.Store, "insert_checkpoint", refused)
        with pytest.raises(CheckpointFileError):
            import_file(st, path)
        monkeypatch.undo()
        assert _events(run_root) == before
        import_file(st, path)
    events = [json.loads(line)["event"] for line in _events(run_root).splitlines()]
    assert events == ["session", "session", "checkpoint"]


# ---------------------------------------------------------------- what is not a file
@pytest.mark.parametrize("kind", ["fifo", "device"])
@pytest.mark.parametrize(
    "command",
    [
        ("checkpoint", "import"),
        ("checkpoint", "validate"),
        ("checkpoint", "show"),
        ("session", "import"),
    ],
)
def test_a_pipe_or_a_device_is_refused_at_once(
    run_root: Path, tmp_path: Path, kind: str, command: tuple[str, str]
) -> None:
    """A FIFO (a tar from another machine can hold one) used to block the command forever; a
    link to /dev/zero had `session import` read 512 MiB of it (1 GB of memory) first."""
    import os

    path = tmp_path / ("conv.jsonl" if command[0] == "session" else "demo.json")
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    res = run_cli("--root", str(run_root), *command, str(path), timeout=30)
    assert res.code in (3, 10), res
    _one_line_error(res.err)
    assert "not a regular file" in res.err, res.err


# ---------------------------------------------------------------- a byte order mark
@pytest.mark.parametrize("suffix", [".json", ".json.zst"])
def test_a_deep_file_with_a_byte_order_mark_is_read(
    run_root: Path, tmp_path: Path, suffix: str
) -> None:
    """An editor on another machine may start the file with a UTF-8 BOM; JSON readers accept
    it, and so do validate, show and import (they said "must hold a JSON object")."""
    import zstandard

    body = b"\xef\xbb\xbf" + json.dumps(mas_doc()).encode("utf-8")
    path = tmp_path / f"bom{suffix}"
    path.write_bytes(zstandard.compress(body) if suffix.endswith(".zst") else body)
    for command in ("validate", "show", "import"):
        res = run_cli("--root", str(run_root), "checkpoint", command, str(path))
        assert res.code == 0, (command, res.err)


def test_a_transcript_with_a_byte_order_mark_is_read(run_root: Path, tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"role": "user", "content": "hi"}\n')
    res = run_cli("--root", str(run_root), "session", "import", str(path), "--name", "bom")
    assert res.code == 0, res.err
    shown = run_cli("--root", str(run_root), "session", "show", "bom", "--json")
    assert json.loads(shown.out)[0]["value"]["content"] == "hi"


def test_a_transcript_integer_past_the_digit_limit_is_named_as_such(
    run_root: Path, tmp_path: Path
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"role": "user", "content": "x", "n": ' + "9" * 5_000 + "}\n")
    res = run_cli("--root", str(run_root), "session", "import", str(path))
    assert res.code == 3, res.err
    _one_line_error(res.err)
    assert "digits" in res.err and "nested" not in res.err, res.err
