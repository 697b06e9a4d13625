r"""Tables and trees through the real `alpstore` command: tab-separated and whole in a pipe; on a
terminal (a pty) fitted to its width, a cut cell marked …, a control character shown escaped.

The archive holds what a hostile file could bring: a label with ESC and a bidi override, a
steering message with a newline and a colour sequence.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import update

from alpstore.cli._table import Kind, fit_widths, plain_cell
from alpstore.db.tables import checkpoints
from alpstore.sessions import CheckpointInfo, SessionInfo
from alpstore.store import Store
from tests.backend_pass import database_env_for, suite_backend
from tests.conftest import Result, run_cli, run_on_tty

LABEL = "evil\x1b[2J\u202eX"
STEER = "Ask first.\nreally\x1b[31m"


@dataclass
class Hostile:
    """A run root and what its archive holds, read in-process (to compare output with)."""

    root: Path
    sessions: dict[str, SessionInfo]
    checkpoints: list[CheckpointInfo]
    total_checkpoints: int

    def cli(self, *args: str) -> Result:
        return run_cli("--root", str(self.root), *args)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Hostile:
    """Session "demo": 4 turns, a checkpoint labelled LABEL (trigger after_tool_call), then a
    backtrack of 1 steered by STEER; session "kid" forked from demo@2, with a kernel."""
    root = tmp_path_factory.mktemp("tables") / "run"
    root.mkdir()
    with Store.open(root) as store:
        s = store.create_session(name="demo")
        for i in range(4):
            s.commit_turn(
                [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}]
            )
        ck = s.checkpoint(label="evil", trigger="after_tool_call")
        # alpstore refuses such a label now; an archive written before that, or edited with
        # SQL, can still hold one
        with store.db.atomic() as conn:
            conn.execute(update(checkpoints).where(checkpoints.c.id == ck.id).values(label=LABEL))
        s.backtrack(1, STEER)
        kid = store.fork_checkpoint(store.resolve_checkpoint("demo@2"), name="kid")
        kid.checkpoint(kernel={"q": {"goal": "x" * 200}, "run": {}}, label="with-kernel")
        infos = {i.name or "": i for i in store.list_sessions()}
        cks = s.checkpoints(include_abandoned=True)
        total = len(cks) + len(kid.checkpoints(include_abandoned=True))
    return Hostile(root, infos, cks, total)


def on_terminal(h: Hostile, *args: str, columns: int) -> str:
    """Run `alpstore --root ROOT ARGS…` with stdout on a pty ``columns`` wide; its stdout."""
    root = h.root
    env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1", "TERM": "xterm"}
    env.update(database_env_for(root))
    code, out = run_on_tty("--root", str(root), *args, env=env)
    assert code == 0
    return out


def width(out: str) -> int:
    """The widest line of terminal output, Rich's own styles (bold, dim) left out."""
    return max(len(re.sub(r"\x1b\[[0-9;]*m", "", line).rstrip()) for line in out.splitlines())


def unescape(cell: str) -> str:
    """The inverse of the pipe's escaping (documented in alpstore.cli._table)."""
    simple = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}

    def one(m: re.Match[str]) -> str:
        s = m.group(1)
        return simple[s] if s in simple else chr(int(s[1:], 16))

    return re.sub(r"\\(\\|t|n|r|x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})", one, cell)


# ---------------------------------------------------------------- in a pipe
def test_piped_session_log_is_tab_separated_and_exact(hostile: Hostile) -> None:
    out = hostile.cli("session", "log", "demo")
    assert out.code == 0, out.err
    rows = [line.split("\t") for line in out.out.splitlines()]
    assert rows[0] == ["CKPT", "TURN", "LABEL", "TRIGGER", "HEAD", "+BYTES", "NOTE"]
    assert all(len(r) == 7 for r in rows)
    by_id = {r[0]: r for r in rows[1:] if r[0]}
    assert len(by_id) == len(hostile.checkpoints) == 5
    for ck in hostile.checkpoints:
        row = [unescape(c) for c in by_id[str(ck.id)]]
        assert row[:5] == [str(ck.id), str(ck.turn), ck.label, ck.trigger, str(ck.length)]
        assert row[6] == ("cut by backtrack" if ck.abandoned else "")
    assert by_id[str(hostile.checkpoints[-1].id)][2:4] == [
        "evil\\x1b[2J\\u202eX",
        "after_tool_call",
    ]
    (bt,) = [r for r in rows if r[6].startswith("backtrack")]
    assert bt[:6] == [""] * 6
    assert unescape(bt[6]).endswith(f"; steering: /steer {STEER}")


def test_piped_debug_log_session_list_db_info_and_sql(hostile: Hostile) -> None:
    log = hostile.cli("debug", "log", "demo").out.splitlines()
    assert log[0].split("\t") == ["CKPT", "TURN", "LABEL", "TRIGGER", "HEAD", "CHANGE"]
    assert all(len(line.split("\t")) == 6 for line in log)
    assert any("\tevil\\x1b[2J\\u202eX\tafter_tool_call\t" in line for line in log)
    listing = [line.split("\t") for line in hostile.cli("session", "list").out.splitlines()]
    assert listing[0] == ["SESSION", "NAME", "STATUS", "TURN", "HEAD", "PARENT"]
    kid, demo = hostile.sessions["kid"], hostile.sessions["demo"]
    assert [kid.uuid, "kid", "active", str(kid.turn), str(kid.head_length), demo.uuid] in listing
    info = hostile.cli("db", "info").out.splitlines()
    header = info.index("table\trows\tsize")
    counts = dict(line.split("\t")[:2] for line in info[header + 1 :])
    assert counts["checkpoints"] == str(hostile.total_checkpoints)
    # sql (tab-separated before this helper too): a tab or newline inside a value is escaped
    char = "chr" if suite_backend() == "postgresql" else "char"
    sql = hostile.cli(
        "sql", f"select 'a' || {char}(9) || 'b' as v, 'c' || {char}(10) || '\\d' as w"
    )
    assert sql.code == 0, sql.err
    assert sql.out.splitlines() == ["v\tw", "a\\tb\tc\\n\\\\d"]


def test_piped_lineage_is_one_line_per_node(hostile: Hostile) -> None:
    lines = hostile.cli("session", "lineage", "demo").out.splitlines()
    assert len(lines) == 3, lines
    assert lines[1] == "├── ↶ backtrack 1 to turn 4: /steer Ask first.\\nreally\\x1b[31m"
    assert lines[2].startswith("└── kid (") and "forked at turn 2" in lines[2]


@given(st.text())
def test_plain_cell_is_one_field_and_reversible(text: str) -> None:
    cell = plain_cell(text)
    assert not any(c in cell for c in "\t\n\r\x1b\u202e")
    assert unescape(cell) == text


# ---------------------------------------------------------------- on a terminal
def test_narrow_terminal_marks_every_cut_cell(hostile: Hostile) -> None:
    out = on_terminal(hostile, "session", "log", "demo", columns=40)
    for header in ("CKPT", "TURN", "LABEL", "TRIGGER", "HEAD", "+BYTES", "NOTE"):
        assert header in out, (header, out)
    # the trigger is whole or ends in …: never "after_tool_cal" with no mark
    shown = re.findall(r"after_[a-z_]*…?", out)
    assert shown and all(s == "after_tool_call" or s.endswith("…") for s in shown), shown
    assert "…" in out


def test_session_list_keeps_every_column_on_an_80_column_terminal(hostile: Hostile) -> None:
    out = on_terminal(hostile, "session", "list", columns=80)
    for header in ("SESSION", "NAME", "STATUS", "TURN", "HEAD", "PARENT"):
        assert header in out, out
    for info in hostile.sessions.values():
        assert info.uuid in out  # the key column is never cut
    assert width(out) <= 80
    assert "…" in out  # the parent id gave way, marked


def test_terminal_shows_controls_escaped(hostile: Hostile) -> None:
    for args in (("debug", "log", "demo"), ("session", "log", "demo"), ("session", "lineage")):
        out = on_terminal(hostile, *args, columns=200)
        for raw in ("\x1b[2J", "\x1b[31m", "\u202e"):
            assert raw not in out, (args, out)
        assert not any(line.strip().startswith("really") for line in out.splitlines()), out
        assert "\\x1b[31m" in out and "first.\\x0areally" in out, (args, out)
        if args[1] == "log":
            assert "evil\\x1b[2J\\u202eX" in out, out


def test_lineage_formats_and_archive_get_escape_controls_on_a_terminal(tmp_path: Path) -> None:
    """`session lineage --format json|dot|mermaid` and `archive get [--pretty]` wrote a
    steering message's ESC sequence, bidi override and C1 control raw to the terminal; a pipe
    still gets the exact bytes, and JSON stays the same document."""
    import json

    root = tmp_path / "run"
    root.mkdir()
    steer = "Ask \u202eevil\u202c \x9b31m \x1b]0;title\x07 first"
    with Store.open(root) as store:
        s = store.create_session(name="demo")
        for i in range(2):
            s.commit_turn([{"role": "user", "content": f"q{i}"}])
        s.backtrack(1, steer)
        (entry,) = [e for e in store.hydrate_view(s.head) if "evil" in json.dumps(e.value)]
    h = Hostile(root, {}, [], 0)
    raws = ("\u202e", "\u202c", "\x9b", "\x1b", "\x07")
    for fmt in ("json", "dot", "mermaid"):
        out = on_terminal(h, "session", "lineage", "--format", fmt, columns=200)
        assert not [r for r in raws if r in out], (fmt, out)
        piped = h.cli("session", "lineage", "--format", fmt)
        assert piped.code == 0 and "evil" in piped.out, (fmt, piped.err)
        if fmt == "json":
            assert json.loads(out) == json.loads(piped.out)
        else:
            assert "\u202eevil\u202c \x9b31m \x1b]0;title\x07" in piped.out
    for extra in ((), ("--pretty",)):
        piped = h.cli("archive", "get", entry.hex, *extra)
        assert piped.code == 0 and "\u202e" in piped.out, piped.err
        out = on_terminal(h, "archive", "get", entry.hex, *extra, columns=200)
        assert not [r for r in raws if r in out], out
        assert json.loads(out) == json.loads(piped.out) == entry.value


def test_wide_text_wraps_on_a_terminal(hostile: Hostile) -> None:
    out = on_terminal(hostile, "session", "log", "demo", columns=90)
    assert width(out) <= 90
    note = "".join(line.strip() for line in out.splitlines()).replace(" ", "")
    assert "backtrack1step(s)tocheckpoint" in note and "steering:/steerAsk" in note


def test_debug_show_marks_a_cut_kernel_line(hostile: Hostile) -> None:
    out = hostile.cli("debug", "show", "kid@latest", "--width", "60")
    assert out.code == 0, out.err
    (kernel,) = [line for line in out.out.splitlines() if line.startswith("kernel: ")]
    assert len(kernel) == 60 and kernel.endswith("…")


# ---------------------------------------------------------------- the width rule
@given(
    st.lists(
        st.tuples(st.integers(1, 300), st.integers(1, 20), st.sampled_from(list(Kind))),
        min_size=1,
        max_size=8,
    ),
    st.integers(0, 400),
)
def test_fit_widths(cols: list[tuple[int, int, Kind]], room: int) -> None:
    natural = [n for n, _, _ in cols]
    floors = [n if k is Kind.KEY else min(n, f) for n, f, k in cols]
    kinds = [k for _, _, k in cols]
    widths = fit_widths(natural, floors, kinds, room)
    assert all(f <= w <= n for f, w, n in zip(floors, widths, natural, strict=True))
    assert sum(widths) <= max(room, sum(floors))
    if sum(natural) <= room:
        assert widths == natural
    # WRAP columns give way before CUT ones
    if any(w < n for w, n, k in zip(widths, natural, kinds, strict=True) if k is Kind.CUT):
        assert all(w == f for w, f, k in zip(widths, floors, kinds, strict=True) if k is Kind.WRAP)


def test_json_on_a_terminal_escapes_bidi_and_c1_and_stays_the_same_document(
    tmp_path: Path,
) -> None:
    """`--json` and `checkpoint show FILE` on a terminal: a bidi override or C1 control from a
    message reaches the screen as a JSON escape, and the text parses to the piped document."""
    import json

    root = tmp_path / "run"
    root.mkdir()
    text = "left \u202eevil\u202c \x85 \x9b31m \U000e0041 done"
    with Store.open(root) as store:
        store.create_session(name="bidi").commit_turn([{"role": "user", "content": text}])
    h = Hostile(root, {}, [], 0)
    exported = tmp_path / "bidi.json"
    assert h.cli("checkpoint", "export", "bidi", "-o", str(exported)).code == 0
    for args in (("session", "show", "bidi", "--json"), ("checkpoint", "show", str(exported))):
        piped = h.cli(*args)
        assert piped.code == 0 and text in piped.out  # a pipe gets the exact bytes
        shown = on_terminal(h, *args, columns=120)
        for raw in ("\u202e", "\u202c", "\x85", "\x9b", "\U000e0041"):
            assert raw not in shown, (args, shown)
        assert "\\u202e" in shown and "\\udb40\\udc41" in shown
        assert json.loads(shown) == json.loads(piped.out)


@given(st.lists(st.text(alphabet=st.sampled_from("ab \n\r\t\x1b\x85\u202e\u2028é"), max_size=8)))
def test_lines_made_safe_at_once_are_each_line_made_safe(lines: list[str]) -> None:
    """``term_lines`` (one scan for a whole history) gives each line as ``term`` gives it."""
    from alpstore.cli._terminal import term, term_lines

    assert term_lines(lines) == "".join(f"{term(line)}\n" for line in lines)


@settings(max_examples=500)
@given(
    st.text(
        alphabet=st.characters(codec=None)
        | st.sampled_from("\\\t\n\r\x1b\x7f\x85\u202e\u2028\ufeff\U000e0041é中 ")
    )
)
def test_a_printable_cell_takes_the_short_way_to_the_same_value(text: str) -> None:
    """``plain_cell`` returns a printable text without a backslash as it is: the same value the
    escaping gives it (nothing :func:`term` escapes is printable)."""
    from alpstore.cli._terminal import term

    escaped = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
    assert plain_cell(text) == term(escaped.replace("\r", "\\r"))
