"""Shared fixtures: a fresh run root, a store on it, and the real `alpstore` command."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile("dev", deadline=None, max_examples=60)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

ALPSTORE = str(Path(sys.executable).with_name("alpstore"))


@dataclass
class Result:
    """What a finished `alpstore` subprocess left behind."""

    code: int
    out: str
    err: str


def run_cli(
    *args: str,
    cwd: Path | None = None,
    input: str | bytes | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> Result:
    """Run the real `alpstore` command in a subprocess."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop(
        "ALPSTORE_DATABASE_URL", None
    ) if env is None or "ALPSTORE_DATABASE_URL" not in env else None
    data = input.encode() if isinstance(input, str) else input
    proc = subprocess.run(
        [ALPSTORE, *args],
        cwd=cwd,
        input=data,
        capture_output=True,
        env=full_env,
        timeout=timeout,
        check=False,
    )
    return Result(
        proc.returncode,
        proc.stdout.decode("utf-8", "replace"),
        proc.stderr.decode("utf-8", "replace"),
    )


@pytest.fixture
def run_root(tmp_path: Path) -> Path:
    """An empty run root."""
    root = tmp_path / "run"
    root.mkdir()
    return root


@pytest.fixture
def cli(run_root: Path) -> Iterator[object]:
    """Run `alpstore --root <run_root> …` in a subprocess."""

    def _run(*args: str, **kw: object) -> Result:
        return run_cli("--root", str(run_root), *args, **kw)  # type: ignore[arg-type]

    yield _run
