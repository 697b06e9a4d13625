"""docs/tutorial.md stays true (DC-7): every ```console command runs, in order, in one directory,
and prints what the tutorial shows. The convention is documented at the end of the tutorial:
``$ `` starts a command; the lines under it are its expected stdout then stderr; a line ``...``
matches any number of lines and ``...`` inside a line matches any text; a command must exit 0
unless an expected line starts with ``alpstore: error:``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.backend_pass import database_env_for

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial.md"


@dataclass
class Step:
    command: str
    line: int
    expected: list[str] = field(default_factory=list)


def parse_steps(text: str) -> list[Step]:
    steps: list[Step] = []
    in_console = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            in_console = line.strip() == "```console" if not in_console else False
            continue
        if not in_console:
            continue
        if line.startswith("$ "):
            steps.append(Step(line[2:], n))
        elif steps:
            steps[-1].expected.append(line.rstrip())
        else:
            raise AssertionError(f"tutorial.md:{n}: output before any command")
    return steps


def _line_regex(expected: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in expected.split("...")) + r"\Z")


def matches(expected: list[str], actual: list[str]) -> bool:
    """Match output lines against expected lines with ``...`` wildcards."""
    if not expected:
        return not actual
    head, rest = expected[0], expected[1:]
    if head == "...":
        return any(matches(rest, actual[i:]) for i in range(len(actual) + 1))
    return bool(actual) and bool(_line_regex(head).match(actual[0])) and matches(rest, actual[1:])


def test_the_convention_matcher_can_fail() -> None:
    assert matches(["a", "...", "z"], ["a", "b", "c", "z"])
    assert matches(["a ... c"], ["a b c"])
    assert not matches(["a", "z"], ["a", "b", "z"])
    assert not matches(["a ... c"], ["a b d"])
    steps = parse_steps("```console\n$ echo hi\nhi\n```\n```python\n$ no\n```\n")
    assert [(s.command, s.expected) for s in steps] == [("echo hi", ["hi"])]


def test_every_tutorial_command(tmp_path: Path) -> None:
    steps = parse_steps(TUTORIAL.read_text(encoding="utf-8"))
    assert len(steps) >= 15
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    env.update(database_env_for(tmp_path))  # the PostgreSQL pass: the archive of this root
    env["COLUMNS"] = "200"
    for step in steps:
        proc = subprocess.run(
            ["bash", "-c", step.command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        actual = [line.rstrip() for line in (proc.stdout + proc.stderr).splitlines()]
        failing = any(line.startswith("alpstore: error:") for line in step.expected)
        where = f"tutorial.md:{step.line}: $ {step.command}"
        assert (proc.returncode != 0) == failing, f"{where}\nexit {proc.returncode}\n{proc.stderr}"
        if not matches(step.expected, actual):
            pytest.fail(
                f"{where}\n--- expected\n"
                + "\n".join(step.expected)
                + "\n--- actual\n"
                + "\n".join(actual)
            )
