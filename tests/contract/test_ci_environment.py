"""What CI stands on (issue 44): the environment holds exactly the versions requirements/ci.lock
pins, and `scripts/compat --ci` tells a failure of the framework's own from a failure of ours.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "requirements" / "ci.lock"
NOT_LOCKED = {"alpstore", "pip", "setuptools", "wheel"}
"""Installed beside the locked packages: the project itself and the venv's own installers."""


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep, f"{LOCK}: not an exact pin: {line!r}"
        pins[_norm(name.split("[", 1)[0])] = version.split(";", 1)[0].strip()
    return pins


def test_environment_is_the_lock() -> None:
    """`pip freeze` against requirements/ci.lock: every installed package is pinned there, at its
    pinned version (scripts/_env.sh installs with the lock as constraints; scripts/lock refreshes
    it when pyproject.toml's dependencies change)."""
    pins = locked()
    assert pins, f"{LOCK} pins nothing"
    moved, unlocked = [], []
    for dist in importlib.metadata.distributions():
        name = _norm(dist.metadata["Name"] or "")
        if not name or name in NOT_LOCKED:
            continue
        if name not in pins:
            unlocked.append(f"{name}=={dist.version}")
        elif dist.version != pins[name]:
            moved.append(f"{name}: installed {dist.version}, locked {pins[name]}")
    assert not moved, f"not the locked versions (re-run scripts/_env.sh): {moved}"
    assert not unlocked, f"installed but not in {LOCK.name} (run scripts/lock): {unlocked}"


def test_lock_keeps_the_reviewed_pins() -> None:
    """requirements/pins.in's bounds hold in the lock (cryptography < 51: the Agents SDK's own
    tests patch cryptography.fernet.time)."""
    version = locked()["cryptography"]
    assert int(version.split(".")[0]) < 51


# ---------------------------------------------------------------- scripts/compat's verdicts
FAKE_SUITE = """
from agents import SQLiteSession


def test_passes():
    SQLiteSession("s-pass")


def test_fails_for_both():
    SQLiteSession("s-both")
    # the shape of issue 44: the framework's own test breaks on an upstream release
    raise ImportError("import error in cryptography.fernet.time: No module named 'x' at 0x7f00aa")
{extra}
"""

OURS_ONLY = """

def test_fails_for_alpstore_only():
    session = SQLiteSession("s-ours")
    assert type(session).__name__ == "SQLiteSession", "not the framework's own class"
"""


def run_compat(tmp_path: Path, extra: str) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("agents", reason="openai-agents is not installed (alpstore[dev])")
    source = tmp_path / "sdk"
    (source / "tests").mkdir(parents=True)
    (source / "tests" / "test_fake_suite.py").write_text(
        textwrap.dedent(FAKE_SUITE.format(extra=extra)), encoding="utf-8"
    )
    env = {k: v for k, v in os.environ.items() if k != "ALPSTORE_TEST_POSTGRES_URL"}
    args = [sys.executable, str(REPO / "scripts" / "_compat.py"), "--ci"]
    args += ["--suite", "openai-agents", "--source", str(source)]
    args += ["--files", "tests/test_fake_suite.py"]
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_a_failure_of_the_framework_twin_too_is_the_frameworks(tmp_path: Path) -> None:
    done = run_compat(tmp_path, extra="")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 failure(s) are the framework's own" in done.stdout
    assert "test_fails_for_both[alpstore]" in done.stdout
    assert "cryptography.fernet.time" in done.stdout  # listed with its error


def test_a_failure_of_alpstore_only_fails(tmp_path: Path) -> None:
    done = run_compat(tmp_path, extra=OURS_ONLY)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "test_fails_for_alpstore_only[alpstore]" in done.stderr
    assert "test_fails_for_both" not in done.stderr  # still the framework's
    assert "1 failure(s) are the framework's own" in done.stdout
