"""Every ``pip install`` line of README.md works as printed (issue 40): each one, in a code block
or inline, runs with ``--dry-run`` added — from the clone for ``-e .[…]``, against a wheel
built by the README's own ``pip wheel`` line for ``dist/…whl[…]``, in this environment (where
alpstore is installed) for ``alpstore[…]`` — and must resolve, every extra it names provided.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
_SPAN = re.compile(r"`([^`\n]*\bpip (?:install|wheel) [^`\n]*)`")


def pip_lines() -> list[str]:
    """Every ``pip install`` / ``pip wheel`` command the README prints, in order, once each."""
    found: list[str] = []
    fenced = False
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            command = line.split("  #", 1)[0].strip()
            if re.search(r"\bpip (install|wheel) ", command):
                found.append(command)
        else:
            found.extend(m.group(1) for m in _SPAN.finditer(line))
    commands = []
    for text in found:
        start = text.index("pip ")
        commands.append("python -m " + text[start:])  # one interpreter: this one
    return list(dict.fromkeys(commands))


def _pip(args: list[str], cwd: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", *args, "--disable-pip-version-check"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"pip {' '.join(args)}: {out[-2000:]}"
    assert "does not provide the extra" not in out, out[-2000:]
    return out


def test_every_pip_line_of_the_readme_installs(tmp_path: Path) -> None:
    lines = pip_lines()
    assert any("-e ." in c for c in lines) and any("pip wheel" in c for c in lines)
    assert any(".whl[" in c for c in lines) and any("'alpstore[" in c for c in lines)
    wheel_dir = tmp_path / "dist"
    ran = []
    for command in sorted(lines, key=lambda c: "pip wheel" not in c):  # the wheel first
        args = shlex.split(command)[3:]  # after `python -m pip`
        if shlex.split(command)[3] == "wheel":
            args = [a if a != "dist" else str(wheel_dir) for a in args]
            _pip(args, REPO)
            assert list(wheel_dir.glob("alpstore-*.whl")), "no wheel built"
        elif any(a.startswith("dist/") for a in args):
            _pip([*args, "--dry-run"], tmp_path)  # the README's wheel name, as built
        elif "-e" in args:
            _pip([*args, "--dry-run"], REPO)
        else:  # alpstore[extra]: adds the extra where alpstore is installed
            _pip([*args, "--dry-run"], tmp_path)
        ran.append(command)
    assert ran == sorted(lines, key=lambda c: "pip wheel" not in c)


def test_the_readme_lines_name_only_extras_alpstore_has() -> None:
    import tomllib

    extras = set(
        tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    named = {
        e.strip()
        for c in pip_lines()
        for group in re.findall(r"\[([^\]]+)\]", c)
        for e in group.split(",")
    }
    assert named and named <= extras, named - extras


@pytest.mark.parametrize(
    ("module", "blocked", "extra"),
    [
        ("alpstore.integrations.langgraph", "langchain_core", "langgraph"),
        ("alpstore.integrations.langgraph", "langgraph", "langgraph"),
        ("alpstore.integrations.openai_agents", "agents", "openai-agents"),
        ("alpstore.integrations.lgthreads", "langchain_core", "langgraph"),
    ],
)
def test_a_missing_extra_names_its_pip_line(module: str, blocked: str, extra: str) -> None:
    script = (
        f"import sys; sys.modules[{blocked!r}] = None\n"
        "try:\n"
        f"    import {module}\n"
        "except ImportError as err:\n"
        "    print(type(err).__name__, err)\n"
        "else:\n"
        "    print('imported')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.strip()
    assert out.startswith("ImportError "), out
    assert f"pip install 'alpstore[{extra}]'" in out and module.split(".")[-1] in out
