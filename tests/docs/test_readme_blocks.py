"""README.md runs as printed: every ```bash / ```sh / ```python block, in document order, in one
empty folder, exactly as printed, each exiting 0 — the README shows no failing command.

What a newcomer has is what the blocks get: an empty folder as the working directory (nothing
copied into it, not even the README), the venv's ``alpstore`` and ``python`` first on PATH, a
home of their own, no ``ALPSTORE_DATABASE_URL`` and no API key. Shell blocks run through
``bash -euo pipefail`` and share one shell's state (exported variables, the working directory) as
if typed into one terminal; Python blocks run with the venv's interpreter. Then every block marked
``<!-- rerun -->`` runs a second time, in order, in the same folder.

A block that cannot run offline says why on the line right above its fence::

    <!-- norun: needs an OpenAI API key -->
    ```python

and is listed, with that reason, as a skipped ``test_readme_block_not_run[README.md:N]``: nothing
is left out silently. Every other runnable block must run.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.backend_pass import sqlite_only

README = Path(__file__).resolve().parents[2] / "README.md"
LANGUAGES = {"bash": "bash", "sh": "bash", "shell": "bash", "python": "python", "py": "python"}
"""A fence's language → how it runs; blocks of any other language (text, yaml, none) are shown
only."""
BLOCK_TIMEOUT = 180
"""Seconds one block may take (the whole README takes well under a minute)."""

_OPEN = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_MARKER = re.compile(r"^ {0,3}<!--\s*(?P<word>norun|rerun)\b(?P<rest>.*?)-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block of a Markdown file."""

    line: int
    """The line of its opening fence (1-based)."""
    info: str
    """The fence's info string, e.g. ``python``."""
    body: str
    norun: str | None = None
    """Why it is not run (from ``<!-- norun: … -->`` above it), or None."""
    rerun: bool = False
    """``<!-- rerun -->`` above it: it runs a second time in the same folder."""

    @property
    def runner(self) -> str | None:
        """``bash`` or ``python`` for a block of a language that runs, else None."""
        words = self.info.split()
        return LANGUAGES.get(words[0].lower()) if words else None

    @property
    def runs(self) -> bool:
        return self.runner is not None and self.norun is None

    @property
    def name(self) -> str:
        """``README.md:N ```python (from pathlib import Path)``: where it is and how it starts."""
        first = next((s.strip() for s in self.body.splitlines() if s.strip()), "")
        first = first if len(first) <= 70 else first[:69] + "…"
        return f"README.md:{self.line} ```{self.info.strip()} ({first})"


def parse_blocks(text: str) -> tuple[list[Block], list[str]]:
    """Every fenced block of ``text`` with its markers, and the problems found (each naming its
    line): an unterminated fence, a marker not directly above a fence, a ``norun`` without a
    reason or in the fence's info string, a marker on a block that would not run anyway.
    """
    blocks: list[Block] = []
    problems: list[str] = []
    lines = text.splitlines()
    pending: list[tuple[int, str, str]] = []  # (line, word, rest) of markers right above
    n = 0
    while n < len(lines):
        line = lines[n]
        opened = _OPEN.match(line)
        if opened is None or (opened["fence"][0] == "`" and "`" in opened["info"]):
            marker = _MARKER.match(line)
            if marker is not None:
                pending.append((n + 1, marker["word"], marker["rest"]))
            else:
                problems.extend(_stray(pending))
                pending = []
            n += 1
            continue
        indent, fence, info = len(opened["indent"]), opened["fence"], opened["info"].strip()
        close = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        body: list[str] = []
        end = n + 1
        while end < len(lines) and not close.match(lines[end]):
            body.append(_dedent(lines[end], indent))
            end += 1
        if end == len(lines):
            problems.append(f"README.md:{n + 1}: the block opened here is never closed")
        norun: str | None = None
        rerun = False
        for m_line, word, rest in pending:
            if word == "rerun":
                rerun = True
                continue
            reason = rest.strip().removeprefix(":").strip()
            if not reason:
                problems.append(
                    f"README.md:{m_line}: a norun marker needs its reason: "
                    "<!-- norun: why this block cannot run offline -->"
                )
            norun = reason or "(no reason given)"
        block = Block(n + 1, info, "\n".join(body), norun, rerun)
        if "norun" in info.split()[1:]:
            problems.append(
                f"{block.name}: `norun` in the fence gives no reason; write "
                "<!-- norun: why --> on the line above the fence instead"
            )
            block = Block(block.line, block.info, block.body, block.norun or "(no reason)", rerun)
        if pending and block.runner is None:
            problems.append(f"{block.name}: a {pending[0][1]} marker on a block that never runs")
        if block.rerun and block.norun is not None:
            problems.append(f"{block.name}: marked both norun and rerun")
        blocks.append(block)
        pending = []
        n = end + 1
    problems.extend(_stray(pending))
    return blocks, problems


def _stray(markers: list[tuple[int, str, str]]) -> list[str]:
    return [
        f"README.md:{line}: <!-- {word} --> is not directly above a fence "
        "(put it on the line right above the block's ```)"
        for line, word, _ in markers
    ]


def _dedent(line: str, indent: int) -> str:
    """``line`` without up to ``indent`` leading spaces (an indented fence's content)."""
    stripped = len(line) - len(line.lstrip(" "))
    return line[min(stripped, indent) :]


def readme_blocks() -> list[Block]:
    blocks, problems = parse_blocks(README.read_text(encoding="utf-8"))
    assert not problems, "\n".join(problems)
    return blocks


# -- the parser ---------------------------------------------------------------------------------


def test_the_parser_reads_fences_markers_and_order() -> None:
    text = (
        "# t\n```sh\na\n```\n<!-- rerun -->\n```python\nb\n```\n"
        "<!-- norun: needs a key -->\n```bash\nc\n```\n"
        "  ```PY\n  d\n   e\n  ```\n````sh\n```\n````\n~~~\nf\n~~~\n```\nplain\n```\n"
    )
    blocks, problems = parse_blocks(text)
    assert problems == []
    assert [(b.line, b.runner, b.body, b.norun, b.rerun) for b in blocks] == [
        (2, "bash", "a", None, False),
        (6, "python", "b", None, True),
        (10, "bash", "c", "needs a key", False),
        (13, "python", "d\n e", None, False),
        (17, "bash", "```", None, False),
        (20, None, "f", None, False),
        (23, None, "plain", None, False),
    ]
    assert [b.runs for b in blocks] == [True, True, False, True, True, False, False]
    assert blocks[1].name == "README.md:6 ```python (b)"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("```sh\na\n", "README.md:1: the block opened here is never closed"),
        ("<!-- norun -->\n```sh\na\n```\n", "README.md:1: a norun marker needs its reason"),
        ("<!-- norun: -->\n```sh\na\n```\n", "README.md:1: a norun marker needs its reason"),
        ("```sh norun\na\n```\n", "`norun` in the fence gives no reason"),
        ("<!-- rerun -->\n\n```sh\na\n```\n", "README.md:1: <!-- rerun --> is not directly"),
        ("text\n<!-- rerun -->\n", "README.md:2: <!-- rerun --> is not directly above"),
        ("<!-- rerun -->\n```text\na\n```\n", "a rerun marker on a block that never runs"),
        ("<!-- norun: x -->\n<!-- rerun -->\n```sh\na\n```\n", "marked both norun and rerun"),
    ],
)
def test_the_parser_names_each_problem(text: str, problem: str) -> None:
    _, problems = parse_blocks(text)
    assert len(problems) == 1 and problem in problems[0], problems


def test_the_readme_marks_its_blocks_well() -> None:
    blocks = readme_blocks()  # no problem found by the parser
    runnable = [b for b in blocks if b.runs]
    assert sum(b.runner == "bash" for b in runnable) >= 3
    assert any(b.runner == "python" and b.rerun for b in runnable), "the Python API block reruns"


@pytest.mark.parametrize(
    "block",
    [b for b in parse_blocks(README.read_text(encoding="utf-8"))[0] if b.runner and not b.runs],
    ids=lambda b: f"README.md:{b.line}",
)
def test_readme_block_not_run(block: Block) -> None:
    """One skip per block the README says cannot run, with its reason (``pytest -ra`` lists
    them)."""
    assert block.norun
    pytest.skip(f"{block.name}: {block.norun}")


# -- running the README --------------------------------------------------------------------------


def _newcomer_env(home: Path) -> dict[str, str]:
    """A shell like a newcomer's after ``source .venv/bin/activate``: the venv first on PATH, a
    home of its own (nothing the README runs writes into the real one), no archive URL, no API
    key, no ALP_HOME."""
    return {
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
        "HOME": str(home),
        "COLUMNS": "120",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
    }


class ShellState:
    """One shell's state carried from block to block: exported variables and the directory."""

    def __init__(self, where: Path, cwd: Path) -> None:
        self.variables = where / "shell-variables.sh"
        self.cwd = where / "shell-cwd"
        self.variables.write_text("")
        self.cwd.write_text(str(cwd))

    def script(self, body: str) -> str:
        """``body`` behind ONE line that restores the state, so the body's line k is the script's
        line k + 1; the state is saved however the body exits."""
        variables, cwd = shlex.quote(str(self.variables)), shlex.quote(str(self.cwd))
        return (
            f'source {variables}; cd -- "$(cat {cwd})"; '
            f"trap 'export -p > {variables}; pwd > {cwd}' EXIT\n{body}\n"
        )


def _readme_lines(text: str, block: Block, pattern: str, offset: int, shown: str) -> str:
    """``text`` with each line number ``pattern`` finds (group ``n``, the script's line; the
    block's line is that minus ``offset``) written as ``shown`` of its README.md line."""
    return re.sub(pattern, lambda m: shown.format(block.line + int(m["n"]) - offset), text)


def run_block(block: Block, folder: Path, env: dict[str, str], shell: ShellState, run: str) -> None:
    """Run ``block`` in ``folder``; fail naming it, its exit status and its output."""
    if block.runner == "bash":
        argv = ["bash", "-euo", "pipefail", "-c", shell.script(block.body)]
        stdin = None
    else:
        argv = [sys.executable, "-"]  # the program on stdin: nothing is written into the folder
        stdin = block.body + "\n"
    try:
        proc = subprocess.run(
            argv,
            cwd=folder,
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.name}: still running after {BLOCK_TIMEOUT} s on its {run} run")
    if proc.returncode == 0:
        return
    err = proc.stderr
    if block.runner == "bash":  # "bash: line 3: …": the script's line 3 is the body's line 2
        err = _readme_lines(err, block, r"bash: line (?P<n>\d+)", 1, "README.md:{}")
    else:  # 'File "<stdin>", line 3': the body's line 3
        err = _readme_lines(
            err, block, r'File "<stdin>", line (?P<n>\d+)', 0, 'File "README.md", line {}'
        )
    pytest.fail(
        f"{block.name}: exits {proc.returncode} on its {run} run (in {folder}; a block that "
        "cannot run offline says why on the line above its fence: <!-- norun: why -->)\n"
        f"--- stdout (end)\n{proc.stdout[-2000:]}\n--- stderr (end)\n{err[-4000:]}",
        pytrace=False,
    )


@pytest.mark.slow
def test_every_readme_block_runs_in_an_empty_folder(tmp_path: Path) -> None:
    sqlite_only("the README's blocks use the embedded archive of several run roots")
    blocks = [b for b in readme_blocks() if b.runs]
    folder, home, state = tmp_path / "empty", tmp_path / "home", tmp_path / "state"
    for made in (folder, home, state):
        made.mkdir()
    env = _newcomer_env(home)
    shell = ShellState(state, folder)
    for block in blocks:
        run_block(block, folder, env, shell, "first")
    again = [b for b in blocks if b.rerun]
    assert again, "no block is marked <!-- rerun -->"
    for block in again:
        run_block(block, folder, env, shell, "second")


def test_blocks_share_one_shell_and_a_failure_names_its_readme_line(tmp_path: Path) -> None:
    folder = tmp_path / "empty"
    folder.mkdir()
    env = _newcomer_env(tmp_path)
    shell = ShellState(tmp_path, folder)
    first = Block(10, "sh", "export GREETING=hi\nmkdir sub\ncd sub")
    second = Block(20, "bash", 'test "$GREETING" = hi\ntest "$(basename "$PWD")" = sub\ntouch x')
    run_block(first, folder, env, shell, "first")
    run_block(second, folder, env, shell, "first")
    assert (folder / "sub" / "x").exists()  # the second block ran where the first left it
    unset = Block(30, "sh", "true\necho $NOT_SET")  # -u: an unset variable is an error
    with pytest.raises(pytest.fail.Exception) as failed:
        run_block(unset, folder, env, shell, "second")
    message = str(failed.value)
    assert message.startswith("README.md:30 ```sh (true): exits 1 on its second run"), message
    assert "README.md:32: NOT_SET: unbound variable" in message, message


def test_a_python_failure_names_its_readme_line(tmp_path: Path) -> None:
    block = Block(40, "python", "import sys\n\nsys.exit(print('so far') or 1 / 0)")
    with pytest.raises(pytest.fail.Exception) as failed:
        run_block(block, tmp_path, _newcomer_env(tmp_path), ShellState(tmp_path, tmp_path), "first")
    message = str(failed.value)
    assert message.startswith("README.md:40 ```python (import sys): exits 1 on its first run")
    assert "--- stdout (end)\nso far\n" in message, message
    assert 'File "README.md", line 43, in <module>' in message, message
    assert "ZeroDivisionError" in message, message
