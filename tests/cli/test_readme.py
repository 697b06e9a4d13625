"""README.md stays true: every ```sh block runs, in order, in one fresh run root, in the
environment `scripts/demo` leaves (alpstore on PATH), and exits 0 — the README shows no failing
command. A block fenced ```sh norun is shown but not run; only the setup lines may be."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.backend_pass import database_env_for

README = Path(__file__).resolve().parents[2] / "README.md"
NORUN_ALLOWED = (
    "scripts/",
    "source .venv/bin/activate",
    "alpstore --root run ui",
    "alpstore --db ",
)
"""What a block left out of the run may hold: the setup that made this environment, and the
inspector's server (it runs until stopped; tests/ui drives it in a real browser)."""


def shell_blocks(text: str) -> list[tuple[int, str, bool]]:
    """``(line, body, run)`` of every ```sh block."""
    blocks: list[tuple[int, str, bool]] = []
    fence: tuple[int, list[str], bool] | None = None
    for n, line in enumerate(text.splitlines(), 1):
        if fence is None and line.startswith("```"):
            info = line[3:].split()
            if info and info[0] in ("sh", "bash", "shell"):
                fence = (n, [], "norun" not in info[1:])
        elif fence is not None and line.startswith("```"):
            blocks.append((fence[0], "\n".join(fence[1]), fence[2]))
            fence = None
        elif fence is not None:
            fence[1].append(line)
    assert fence is None, f"README.md:{fence[0]}: unterminated block"
    return blocks


def test_the_parser_sees_fences_and_norun() -> None:
    text = "```sh\na\n```\n```python\nb\n```\n```sh norun\nscripts/demo\n```\n"
    assert shell_blocks(text) == [(1, "a", True), (7, "scripts/demo", False)]


@pytest.mark.slow
def test_every_readme_shell_block_runs(tmp_path: Path) -> None:
    blocks = shell_blocks(README.read_text(encoding="utf-8"))
    assert sum(run for *_, run in blocks) >= 3
    for line, body, run in blocks:
        if not run:
            for command in filter(None, (c.split("#")[0].strip() for c in body.splitlines())):
                assert command.startswith(NORUN_ALLOWED), f"README.md:{line}: not run: {command}"
    root = tmp_path / "run"
    root.mkdir()
    (tmp_path / "home").mkdir()
    env = {
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
        "HOME": str(tmp_path / "home"),  # nothing the README runs writes into the real home
        "ALP_HOME": str(tmp_path / "home" / ".alp"),
        "COLUMNS": "120",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }
    env.update(database_env_for(root))
    state = tmp_path / "shell-state.sh"
    state.write_text("")
    for line, body, run in blocks:
        if not run:
            continue
        script = (
            f"set -eo pipefail\nsource {shlex.quote(str(state))}\n{body}\n"
            f"export -p > {shlex.quote(str(state))}\n"
        )
        proc = subprocess.run(
            ["bash", "-c", script],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert proc.returncode == 0, (
            f"README.md:{line}: the block exits {proc.returncode}\n--- stdout (end)\n"
            f"{proc.stdout[-2000:]}\n--- stderr\n{proc.stderr[-3000:]}"
        )
