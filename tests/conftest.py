"""Shared fixtures: a fresh run root, a store on it, and the real `alpstore` command."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from sqlalchemy.pool import NullPool

from tests.backend_pass import (
    ROOT_SCHEMAS,
    RootSchemas,
    database_env_for,
    root_of_cli_args,
    suite_backend,
)

if TYPE_CHECKING:
    from alpstore.db import Database
    from alpstore.store import Store

settings.register_profile(
    "ci",
    derandomize=True,
    # no "explain" phase: its line tracer makes a failing stateful test take many minutes to
    # report; the shrunk example is printed all the same
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
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
    if "ALPSTORE_DATABASE_URL" not in full_env:
        full_env.update(database_env_for(root_of_cli_args(args, cwd)))
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


def run_on_tty(*args: str, env: dict[str, str], timeout: float = 60) -> tuple[int, str]:
    """Run the real `alpstore ARGS…` with its stdout on a pseudo-terminal (stderr dropped):
    its exit code and what it printed (CR LF read as LF).
    """
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen([ALPSTORE, *args], stdout=follower, stderr=subprocess.DEVNULL, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the pty closes when the process ends
            break
        if not chunk:
            break
        chunks.append(chunk)
    code = proc.wait(timeout=timeout)
    os.close(leader)
    return code, b"".join(chunks).decode().replace("\r\n", "\n")


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


# ---------------------------------------------------------------- storage backends
POSTGRES_URL_ENV = "ALPSTORE_TEST_POSTGRES_URL"
"""A PostgreSQL URL (psycopg 3) the suite may create and drop schemas in; `.ci/run` sets it."""

POSTGRES_SKIP_REASON = (
    f"PostgreSQL backend not tested: {POSTGRES_URL_ENV} is not set "
    "(`bash .ci/run` starts a server and sets it)"
)


@dataclass
class Backend:
    """One storage backend under test: a run root, plus a database URL for PostgreSQL."""

    name: str
    root: Path
    url: str | None = None
    _opened: list[object] = field(default_factory=list)

    @property
    def is_postgresql(self) -> bool:
        return self.name == "postgresql"

    def open_database(self) -> Database:
        from alpstore.db import open_database

        db = open_database(root=self.root, url=self.url)
        self._opened.append(db)
        return db

    def open_store(self) -> Store:
        from alpstore.store import Store

        store = Store.open(self.root, url=self.url)
        self._opened.append(store)
        return store

    def db_args(self) -> list[str]:
        """Global CLI options naming this backend's archive."""
        return ["--root", str(self.root), *(["--db", self.url] if self.url else [])]

    def cli(self, *args: str, **kw: Any) -> Result:
        """Run `alpstore <global options> ARGS…` against this backend."""
        return run_cli(*self.db_args(), *args, **kw)

    def close_all(self) -> None:
        for thing in reversed(self._opened):
            thing.close()  # type: ignore[attr-defined]
        self._opened.clear()


def postgres_base_url() -> str | None:
    """The test server's URL, or None when PostgreSQL tests are to be skipped."""
    return os.environ.get(POSTGRES_URL_ENV) or None


_PG_ADMIN: dict[str, Any] = {}


def _pg_admin() -> Any:
    """One engine on the test server for creating and dropping per-test schemas.

    Fails the test (never skips) when the variable is set but the server cannot be reached.
    """
    url = postgres_base_url()
    if url is None:
        pytest.skip(POSTGRES_SKIP_REASON)
    if "engine" not in _PG_ADMIN:
        from sqlalchemy import create_engine

        engine = create_engine(url, connect_args={"connect_timeout": 5}, poolclass=NullPool)
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
        except Exception as err:
            _PG_ADMIN["error"] = str(err).splitlines()[0]
        _PG_ADMIN["engine"] = engine
    if "error" in _PG_ADMIN:
        reason = _PG_ADMIN["error"]
        pytest.fail(f"{POSTGRES_URL_ENV} is set but PostgreSQL is unreachable: {reason}")
    return _PG_ADMIN["engine"]


@contextmanager
def postgres_schema() -> Iterator[str]:
    """A fresh, empty schema on the test server; yields a URL whose search_path is it."""
    from alpstore.testing.postgres import fresh_schema

    with fresh_schema(_pg_admin(), postgres_base_url() or "", "t_") as url:
        yield url


@contextmanager
def postgres_backend(root: Path) -> Iterator[Backend]:
    """An archive for run root ``root`` on PostgreSQL, in a fresh schema of its own (the test
    skips without a server); its stores closed after."""
    with postgres_schema() as url:
        b = Backend("postgresql", root, url)
        try:
            yield b
        finally:
            b.close_all()


BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A fresh archive on SQLite (in a run root) and on PostgreSQL (a schema of its own)."""
    root = tmp_path / "run"
    root.mkdir()
    if request.param == "sqlite":
        b = Backend("sqlite", root)
        yield b
        b.close_all()
        return
    with postgres_backend(root) as b:
        yield b


# ---------------------------------------------------------------- the two passes of the suite
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "sqlite_only(reason): the test reads or damages the SQLite file itself; skipped on the "
        "PostgreSQL pass",
    )
    # never write into a database the developer's shell points at
    os.environ.pop("ALPSTORE_DATABASE_URL", None)
    suite_backend()  # a bad ALPSTORE_TEST_BACKEND fails here, before any test


def pytest_report_header(config: pytest.Config) -> str:
    if suite_backend() == "postgresql":
        return "alpstore pass: PostgreSQL (every run root's archive in a schema of its own)"
    return "alpstore pass: SQLite (backend-parametrised tests also run on PostgreSQL)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On the PostgreSQL pass, leave out the tests that are parametrised over both backends:
    the SQLite pass ran them on each already."""
    if suite_backend() != "postgresql":
        return

    def key(item: pytest.Item) -> tuple[str, str]:
        return (item.nodeid.split("::")[0], getattr(item, "originalname", item.name))

    twins = {key(item) for item in items if item.get_closest_marker("postgres")}
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        both = key(item) in twins or "backend" in getattr(item, "fixturenames", ())
        (drop if both else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session", autouse=True)
def _postgresql_pass() -> Iterator[None]:
    """On the PostgreSQL pass, give every run root an archive in a PostgreSQL schema."""
    if suite_backend() != "postgresql":
        yield
        return
    base = postgres_base_url()
    if base is None:
        pytest.fail(f"ALPSTORE_TEST_BACKEND=postgresql needs {POSTGRES_URL_ENV}")
    import alpstore.db.opening

    schemas = RootSchemas(_pg_admin(), base)

    def default_database_url(root: Path | None) -> str | None:
        if os.environ.get("ALPSTORE_DATABASE_URL") or root is None:
            return os.environ.get("ALPSTORE_DATABASE_URL") or None
        return schemas.url_for(root)

    ROOT_SCHEMAS.append(schemas)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(alpstore.db.opening, "default_database_url", default_database_url)
        try:
            yield
        finally:
            ROOT_SCHEMAS.clear()
            schemas.drop_except(set())


@pytest.fixture(autouse=True)
def _own_archives(request: pytest.FixtureRequest, _postgresql_pass: None) -> Iterator[None]:
    """Drop the PostgreSQL schemas of the run roots a test made; skip SQLite-only tests there."""
    if not ROOT_SCHEMAS:
        yield
        return
    marker = request.node.get_closest_marker("sqlite_only")
    if marker is not None:
        pytest.skip(f"SQLite only: {marker.args[0] if marker.args else 'reads the SQLite file'}")
    schemas = ROOT_SCHEMAS[0]
    before = schemas.existing()
    yield
    schemas.drop_except(before)
