"""pytest plugin for ``scripts/compat``: LangGraph's and the OpenAI Agents SDK's own tests, run
against alpstore's adapters beside the frameworks' own in-memory and SQLite implementations.

LangGraph: ``scripts/compat`` appends one import of ``sync_checkpointer`` / ``async_checkpointer``
from this module to the downloaded ``tests/conftest.py``; they add the variants ``alpstore`` /
``alpstore_aio`` (an ``AlpstoreSaver`` on a fresh SQLite run root) and, when
``$ALPSTORE_TEST_POSTGRES_URL`` is set, ``alpstore_pg`` / ``alpstore_pg_aio`` (a fresh PostgreSQL
schema) to the framework's ``memory`` and ``sqlite`` ones. OpenAI Agents SDK: every test of a
module that uses ``SQLiteSession`` runs once as written (``sqlite``) and once per alpstore
variant with ``SQLiteSession`` replaced by an ``AlpstoreSession`` built the same way.

Environment: ``ALPSTORE_COMPAT_MODE`` (``all``; ``alpstore``: our variants only; ``twins``: the
framework's own variant of each test named in the JSON list ``ALPSTORE_COMPAT_TWINS`` (base ids,
see ``base_id``) — how ``scripts/compat --ci`` tells a failure of the framework's from ours),
``ALPSTORE_COMPAT_REPORT`` (JSON file written at the end: outcome per test and variant),
``ALPSTORE_COMPAT_UNREVIEWED`` (set: run the reviewed tests without the xfail, to see their
real failures), ``ALPSTORE_COMPAT_REVIEWED`` (the reviewed list: tests expected to fail for our
adapter, each with its reason; they run marked xfail and are reported as ``reviewed``).
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

PG_URL = os.environ.get("ALPSTORE_TEST_POSTGRES_URL") or None
MODE = os.environ.get("ALPSTORE_COMPAT_MODE", "all")
UNREVIEWED = bool(os.environ.get("ALPSTORE_COMPAT_UNREVIEWED"))
TWINS = "twins"
"""The mode that runs the framework's own variant of the failing tests listed in
``ALPSTORE_COMPAT_TWINS``."""
THEIRS = {"sqlite", "sqlite_aio"}
"""The framework variants that twin ours (``OURS`` in scripts/_compat.py maps ours to them)."""
OURS_SYNC = ["alpstore"] + (["alpstore_pg"] if PG_URL else [])
OURS_ASYNC = ["alpstore_aio"] + (["alpstore_pg_aio"] if PG_URL else [])
OURS_SESSION = ["alpstore"] + (["alpstore_pg"] if PG_URL else [])
REPLACED = ("SQLiteSession", "AsyncSQLiteSession")
VARIANT_FIXTURES = ("sync_checkpointer", "async_checkpointer", "alpstore_session_variant")


def _params(theirs: list[str], ours: list[str]) -> list[str]:
    if MODE == "alpstore":
        return ours
    if MODE == TWINS:
        return [name for name in theirs if name in THEIRS]
    return theirs + ours


# ---------------------------------------------------------------- archives
_admin: Any = None


@contextlib.contextmanager
def archive(pg: bool) -> Iterator[tuple[Path, str | None]]:
    """A fresh run root, and with ``pg`` the URL of a fresh PostgreSQL schema for its archive."""
    root = Path(tempfile.mkdtemp(prefix="alpstore-compat-"))
    try:
        if not pg:
            yield root, None
            return
        global _admin
        from sqlalchemy import create_engine

        from alpstore.testing.postgres import fresh_schema

        assert PG_URL is not None
        if _admin is None:
            _admin = create_engine(PG_URL, pool_size=2)
        with fresh_schema(_admin, PG_URL, "compat_") as url:
            yield root, url
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------- LangGraph
@contextlib.contextmanager
def _saver(name: str) -> Iterator[Any]:
    from alpstore.integrations.langgraph import AlpstoreSaver

    with archive("_pg" in name) as (root, url), AlpstoreSaver.open(root, url=url) as saver:
        yield saver


@pytest.fixture(scope="function", params=_params(["memory", "sqlite"], OURS_SYNC))
def sync_checkpointer(request: pytest.FixtureRequest) -> Iterator[Any]:
    """LangGraph's sync checkpointer fixture plus alpstore's variants."""
    name = request.param
    if name.startswith("alpstore"):
        with _saver(name) as saver:
            yield saver
        return
    from tests import conftest_checkpointer as theirs  # type: ignore[import-not-found]

    with getattr(theirs, f"_checkpointer_{name}")() as checkpointer:
        yield checkpointer


@pytest.fixture(scope="function", params=_params(["memory", "sqlite_aio"], OURS_ASYNC))
async def async_checkpointer(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """LangGraph's async checkpointer fixture plus alpstore's variants."""
    name = request.param
    if name.startswith("alpstore"):
        with _saver(name) as saver:
            yield saver
        return
    from tests import conftest_checkpointer as theirs

    if name == "memory":
        with theirs._checkpointer_memory() as checkpointer:
            yield checkpointer
        return
    async with getattr(theirs, f"_checkpointer_{name}")() as checkpointer:
        yield checkpointer


# ---------------------------------------------------------------- OpenAI Agents SDK
class _Archives:
    """Where the sessions of one test live, as ``SQLiteSession`` would put them: ``:memory:`` is
    a fresh archive per session, a file path one archive shared by every session opened on it.
    """

    def __init__(self, pg: bool) -> None:
        self.pg = pg
        self.stack = contextlib.ExitStack()
        self.by_path: dict[str, tuple[Path, str | None]] = {}
        self.opened: list[Any] = []

    def where(self, db_path: str | Path) -> tuple[Path, str | None]:
        key = str(db_path)
        if key in self.by_path:
            return self.by_path[key]
        found = self.stack.enter_context(archive(self.pg))
        if key != ":memory:":
            self.by_path[key] = found
        return found

    def close(self) -> None:
        from alpstore.integrations.openai_agents import AlpstoreSession

        for session in self.opened:
            with contextlib.suppress(Exception):
                AlpstoreSession.close(session)  # the sync close, also for the async-shaped one
        self.stack.close()


def session_class(archives: _Archives) -> type:
    """An ``AlpstoreSession`` subclass built with ``SQLiteSession``'s arguments (a class, so the
    tests can subclass it, patch its methods and check ``isinstance`` as they do with theirs).
    """
    from alpstore.integrations.openai_agents import AlpstoreSession
    from alpstore.store import Store

    class AlpstoreSQLiteSession(AlpstoreSession):
        def __init__(
            self,
            session_id: str,
            db_path: str | Path = ":memory:",
            sessions_table: str = "agent_sessions",
            messages_table: str = "agent_messages",
            session_settings: Any = None,
        ) -> None:
            root, url = archives.where(db_path)
            super().__init__(
                session_id,
                Store.open(root, url=url),
                session_settings=session_settings,
                owns_store=True,
            )
            archives.opened.append(self)

    return AlpstoreSQLiteSession


@pytest.fixture(autouse=True)
def alpstore_session_variant(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str | None]:
    """With an alpstore variant, ``SQLiteSession`` in the test's module is ``AlpstoreSession``."""
    variant = getattr(request, "param", None)
    if variant is None or variant == "sqlite":
        yield variant
        return
    archives = _Archives(pg=variant == "alpstore_pg")
    replacement = session_class(archives)

    class AlpstoreAsyncSQLiteSession(replacement):  # type: ignore[misc,valid-type]
        """``AsyncSQLiteSession``'s shape: the same arguments, an awaitable ``close``."""

        async def close(self) -> None:  # type: ignore[override]
            super().close()

    replacements = {"SQLiteSession": replacement, "AsyncSQLiteSession": AlpstoreAsyncSQLiteSession}
    for name in REPLACED:
        if name in vars(request.module):
            monkeypatch.setattr(request.module, name, replacements[name])
    try:
        yield variant
    finally:
        archives.close()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "alpstore_session_variant" not in metafunc.fixturenames:
        return
    if not any(name in vars(metafunc.module) for name in REPLACED):
        return
    metafunc.parametrize(
        "alpstore_session_variant", _params(["sqlite"], OURS_SESSION), indirect=True
    )


# ---------------------------------------------------------------- did the test run our code
_BUILT = [0]
"""How many AlpstoreSession / AlpstoreSaver objects were constructed so far in this process."""


def _count_builds() -> None:
    """Wrap the adapters' ``__init__`` so each construction is counted (a test counts for an
    alpstore variant only if it built one: many SDK tests never open the session they are given).
    """
    classes: list[Any] = []
    with contextlib.suppress(ImportError):
        from alpstore.integrations.openai_agents import AlpstoreSession

        classes.append(AlpstoreSession)
    with contextlib.suppress(ImportError):
        from alpstore.integrations.langgraph import AlpstoreSaver

        classes.append(AlpstoreSaver)
    for cls in classes:
        original = cls.__init__

        def counted(self: Any, *args: Any, __original: Any = original, **kwargs: Any) -> None:
            _BUILT[0] += 1
            __original(self, *args, **kwargs)

        cls.__init__ = counted


_count_builds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    before = _BUILT[0]
    yield
    if item.nodeid in _REPORT.variants:
        _REPORT.ran[item.nodeid] = _BUILT[0] > before


# ---------------------------------------------------------------- selection and report
def variant_of(item: pytest.Item) -> str | None:
    """The implementation a collected test runs against, or None (it uses neither)."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    for name in VARIANT_FIXTURES:
        if name in callspec.params:
            return str(callspec.params[name])
    return None


def base_id(item: pytest.Item) -> str:
    """What identifies a test across variants: its function and its other parameters."""
    params = item.callspec.params
    others = sorted((k, repr(v)) for k, v in params.items() if k not in VARIANT_FIXTURES)
    return item.nodeid.split("[", 1)[0] + (repr(others) if others else "")


def _reviewed() -> list[dict[str, Any]]:
    path = os.environ.get("ALPSTORE_COMPAT_REVIEWED")
    if not path:
        return []
    entries = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or []
    for entry in entries:
        if not entry.get("reason") or not entry.get("test"):
            raise pytest.UsageError(f"{path}: every entry needs a test and a reason: {entry}")
    return list(entries)


def reviewed_reason(entries: list[dict[str, Any]], nodeid: str, variant: str) -> str | None:
    """The reason a test is on the reviewed list for ``variant``, or None."""
    plain = nodeid.split("[", 1)[0]
    for entry in entries:
        variants = entry.get("variants") or ["alpstore*"]
        if not any(fnmatch.fnmatchcase(variant, v) for v in variants):
            continue
        if fnmatch.fnmatchcase(nodeid, entry["test"]) or fnmatch.fnmatchcase(plain, entry["test"]):
            return str(entry["reason"])
    return None


class _Report:
    def __init__(self) -> None:
        self.variants: dict[str, str] = {}
        self.bases: dict[str, str] = {}
        self.outcomes: dict[str, str] = {}
        self.reasons: dict[str, str] = {}
        self.ran: dict[str, bool] = {}
        self.errors: dict[str, str] = {}

    def record(self, nodeid: str, outcome: str) -> None:
        order = ("passed", "skipped", "reviewed", "failed")
        before = self.outcomes.get(nodeid, "passed")
        self.outcomes[nodeid] = max(before, outcome, key=order.index)


_REPORT = _Report()


@pytest.hookimpl(trylast=True)  # after -k / -m deselection: record only what runs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    entries = [] if MODE == TWINS else _reviewed()
    twins = _twins()
    keep, drop = [], []
    for item in items:
        variant = variant_of(item)
        if (
            variant is None
            or (MODE == "alpstore" and not variant.startswith("alpstore"))
            or (MODE == TWINS and base_id(item) not in twins)
        ):
            drop.append(item)
            continue
        keep.append(item)
        _REPORT.variants[item.nodeid] = variant
        _REPORT.bases[item.nodeid] = base_id(item)
        reason = reviewed_reason(entries, item.nodeid, variant)
        if reason is not None and UNREVIEWED:
            _REPORT.reasons[item.nodeid] = reason  # runs as written: its real failure shows
        elif reason is not None:
            _REPORT.reasons[item.nodeid] = reason
            item.add_marker(pytest.mark.xfail(reason=f"reviewed: {reason}", strict=False))
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _twins() -> set[str]:
    """In ``twins`` mode, the base ids whose framework variant is to run."""
    if MODE != TWINS:
        return set()
    return set(json.loads(os.environ.get("ALPSTORE_COMPAT_TWINS") or "[]"))


def failure_of(report: pytest.TestReport) -> str:
    """The one line a failure is known by: its exception and message (pytest's crash line)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = str(getattr(crash, "message", "") or "").strip()
    if message:
        return message.splitlines()[0]
    text = str(report.longrepr or "").strip()
    return text.splitlines()[-1] if text else ""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.nodeid not in _REPORT.variants:
        return
    if hasattr(report, "wasxfail"):
        _REPORT.record(report.nodeid, "reviewed")
    elif report.failed:
        _REPORT.record(report.nodeid, "failed")
        _REPORT.errors.setdefault(report.nodeid, failure_of(report))
    elif report.skipped:
        _REPORT.record(report.nodeid, "skipped")
    elif report.when == "call":
        _REPORT.record(report.nodeid, "passed")


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get("ALPSTORE_COMPAT_REPORT")
    if not path:
        return
    rows = [
        {
            "nodeid": nodeid,
            "file": nodeid.split("::", 1)[0],
            "variant": variant,
            "base": _REPORT.bases[nodeid],
            "outcome": _REPORT.outcomes.get(nodeid, "failed"),
            "reason": _REPORT.reasons.get(nodeid),
            "ran_alpstore": _REPORT.ran.get(nodeid, False),
            "error": _REPORT.errors.get(nodeid),
        }
        for nodeid, variant in _REPORT.variants.items()
    ]
    Path(path).write_text(json.dumps(rows, indent=1), encoding="utf-8")
