"""Fixtures for the inspector: a demo archive on each backend, the real `alpstore ui` server
over it (one per module and backend), and one headless Chromium per module.

Without /usr/bin/chromium (or the playwright package) the browser tests skip with the reason,
except under CI (``CI`` or ``ALPSTORE_REQUIRE_BROWSER`` set), where they fail.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ALPSTORE, postgres_schema, run_cli
from tests.ui._ui_demo import build_demo

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
REQUIRE_ENV = ("CI", "ALPSTORE_REQUIRE_BROWSER")
URL_LINE = re.compile(r"(http://\S+/\?token=\S+)")
BACKEND_PARAMS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def browser_required() -> bool:
    """True under CI: a missing browser is a failure there, never a skip."""
    return any(
        os.environ.get(name, "").strip().lower() not in ("", "0", "false") for name in REQUIRE_ENV
    )


def skip_or_fail(reason: str) -> None:
    if browser_required():
        pytest.fail(f"{reason} (CI must run the browser tests: .ci/run installs chromium)")
    pytest.skip(reason)


@dataclass
class UiServer:
    """A running `alpstore ui` and the archive it serves."""

    proc: subprocess.Popen[str]
    url: str
    root: Path
    db_url: str | None
    ids: dict[str, Any]
    alp_home: Path
    stderr: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        return self.url.split("/?", 1)[0]

    def db_args(self) -> list[str]:
        return ["--root", str(self.root), *(["--db", self.db_url] if self.db_url else [])]

    def cli(self, *args: str, **kw: Any) -> Any:
        return run_cli(*self.db_args(), *args, **kw)


def start_ui(
    args: list[str], env: dict[str, str] | None = None, timeout: float = 60
) -> tuple[subprocess.Popen[str], str]:
    """Start `alpstore ARGS… ui --port 0 …` and return it with the URL it printed."""
    proc = subprocess.Popen(
        [ALPSTORE, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            found = URL_LINE.search(line)
            if found:
                return proc, found.group(1)
    finally:
        timer.cancel()
    err = proc.stderr.read() if proc.stderr else ""
    proc.wait()
    raise AssertionError(f"alpstore ui printed no URL (exit {proc.returncode}): {err.strip()}")


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def fingerprint(root: Path, db_url: str | None) -> dict[str, str]:
    """Everything the archive holds, as digests: the SQLite file's bytes (and its WAL), or
    every PostgreSQL table's rows; plus the schema revision."""
    from sqlalchemy import create_engine, inspect
    from sqlalchemy.pool import NullPool

    from alpstore.db.engine import sqlite_path_for_root

    if db_url is None:
        path = sqlite_path_for_root(root)
        out = {}
        for suffix in ("", "-wal"):
            p = Path(str(path) + suffix)
            # a reader may leave an empty WAL behind: no content, as good as none
            out[p.name] = hashlib.sha256(p.read_bytes() if p.exists() else b"").hexdigest()
        db_url = f"sqlite:///file:{path}?mode=ro&uri=true"
    else:
        out = {}
    engine = create_engine(db_url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            out["revision"] = str(
                conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
            )
            if engine.dialect.name == "postgresql":
                for table in sorted(inspect(conn).get_table_names()):
                    out[table] = str(
                        conn.exec_driver_sql(
                            f"SELECT md5(COALESCE(string_agg(t::text, '|' ORDER BY t::text), '')) "
                            f"FROM {table} t"
                        ).scalar()
                    )
    finally:
        engine.dispose()
    return out


@pytest.fixture(scope="module", params=BACKEND_PARAMS)
def ui_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UiServer]:
    """The demo archive on this backend and `alpstore ui` serving it."""
    from alpstore.store import Store

    base = tmp_path_factory.mktemp(f"ui-{request.param}")
    root = base / "run"
    root.mkdir()
    home = base / "alp"
    env = {"ALP_HOME": str(home)}
    run_cli(
        "context",
        "prepare",
        "exec_demo",
        "--policy-hash",
        "p1",
        "--task",
        "Ship the <b>inspector</b>",
        env=env,
    )
    run_cli(
        "context",
        "pin",
        "decision",
        "-x",
        "exec_demo",
        "--",
        "Open archives <script>read-only</script>",
        env=env,
    )

    def serve(db_url: str | None) -> Iterator[UiServer]:
        store = Store.open(root, url=db_url)
        try:
            ids = build_demo(store)
        finally:
            store.close()
        args = ["--root", str(root), *(["--db", db_url] if db_url else [])]
        proc, url = start_ui([*args, "ui", "--port", "0", "--alp-home", str(home)])
        try:
            yield UiServer(proc, url, root, db_url, ids, home)
        finally:
            stop(proc)

    if request.param == "sqlite":
        yield from serve(None)
    else:
        with postgres_schema() as url:
            yield from serve(url)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium (Debian's) for the module."""
    if not CHROMIUM.exists():
        skip_or_fail(f"browser tests need {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        skip_or_fail("browser tests need the playwright package (pip install 'alpstore[dev]')")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any, ui_server: UiServer) -> Iterator[Any]:
    """A fresh browser context that opened the printed URL (so it holds the token cookie).

    Any JavaScript dialog (an injected alert) fails the test.
    """
    context = browser.new_context(viewport={"width": 1100, "height": 720})
    pg = context.new_page()
    pg.set_default_timeout(10_000)
    dialogs: list[str] = []
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(ui_server.url)
    try:
        yield pg
    finally:
        context.close()
    assert not dialogs, f"a dialog opened: {dialogs}"
    assert not errors, f"page errors: {errors}"
