"""The inspector's work per request is bounded by what a page shows: a statement counter on the
database connection counts each page's queries beside 1,500 other sessions and a fork chain
thousands deep (issue 30 items 6 and 7)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from starlette.testclient import TestClient

from alpstore.db import opening
from alpstore.db import raw as rsql
from alpstore.store import Store
from alpstore.ui.app import create_app
from alpstore.ui.queries import SESSIONS_PAGE
from alpstore.ui.readonly import open_read_only
from alpstore.ui.settings import Settings
from tests.ui._deep_chain import fork_chain, many_sessions
from tests.ui._ui_demo import build_demo

OTHERS = 1_500
DEEP = 10_000
BUDGET = 150
"""Statements one page may run (before: 1,514 for a one-message page beside 1,501 sessions);
a timeline page reads what each of its checkpoints added, one statement per row shown."""


def _served(root: Path, others: int, deep: int) -> tuple[TestClient, Store, dict[str, Any]]:
    store = Store.open(root)
    ids = build_demo(store)
    demo = store.get_session("demo")
    if others:
        many_sessions(store, demo, others)
    if deep:
        fork_chain(store, demo, deep)
    store.close()
    ro = open_read_only(root, opening.default_database_url(root))  # on PostgreSQL: its schema
    settings = Settings(ro, "t0ken", 8765, ["testserver"], label="scale")
    client = TestClient(create_app(settings))
    assert client.get("/?token=t0ken").status_code == 200
    return client, ro, ids


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Store, Any]]:
    """The demo beside 1,500 other sessions and a fork chain 10,000 deep."""
    served = _served(tmp_path_factory.mktemp("big"), OTHERS, DEEP)
    yield served
    served[1].db.close()


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Store, Any]]:
    """The demo alone (three sessions)."""
    served = _served(tmp_path_factory.mktemp("small"), 0, 0)
    yield served
    served[1].db.close()


@contextmanager
def counted(store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every statement run in the block: the raw driver path and SQLAlchemy's."""
    seen: list[str] = []
    real = rsql.execute

    def execute(conn: Any, sql: str, params: Any = ()) -> Any:
        seen.append(sql)
        return real(conn, sql, params)

    def core(_conn: Any, _cur: Any, sql: str, *_: Any) -> None:
        seen.append(sql)

    monkeypatch.setattr(rsql, "execute", execute)
    engine = store.db.engine
    event.listen(engine, "before_cursor_execute", core)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", core)
        monkeypatch.setattr(rsql, "execute", real)


def pages(ids: dict[str, Any]) -> list[str]:
    demo = ids["demo"]
    return [
        "/",
        "/?page=3",
        "/?page=50",
        "/?q=experi",
        "/?q=bulk",
        f"/s/{demo}",
        f"/s/{demo}?page=0",
        f"/s/{demo}/poll?after=1",
        f"/s/{ids['child']}",
        "/c/1",
        f"/diff?a={demo}@2&b={demo}@latest",
        f"/s/{demo}/bisect?grep=rm%20-rf",
    ]


def _counts(served: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    client, store, ids = served
    out = {}
    for url in pages(ids):
        with counted(store, monkeypatch) as seen:
            response = client.get(url)
        assert response.status_code == 200, (url, response.text[:300])
        out[url.replace(ids["demo"], "DEMO").replace(ids["child"], "CHILD")] = len(seen)
    return out


def test_statements_per_page_do_not_grow_with_the_archive(
    big: Any, small: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each page runs as many statements beside 11,500 sessions as beside 3 (give or take the
    one that reads the parents of what a search found), and never more than the budget."""
    alone, crowded = _counts(small, monkeypatch), _counts(big, monkeypatch)
    for url, n in crowded.items():
        assert n <= alone[url] + 2, (
            f"{url}: {n} statements beside {OTHERS + DEEP} sessions, {alone[url]} alone"
        )
        assert n <= BUDGET, f"{url}: {n} statements"


def test_sessions_page_is_paged_and_works_on_a_chain_10000_deep(big: Any) -> None:
    client, _, _ = big
    first = client.get("/")
    assert first.status_code == 200
    assert first.text.count('class="session depth-') == SESSIONS_PAGE
    total = 3 + OTHERS + DEEP  # demo, experiment, live + the bulk + the chain
    pages = (total + SESSIONS_PAGE - 1) // SESSIONS_PAGE
    assert f"page 1 of {pages}" in first.text
    # tree order: demo, its fork "experiment", then the chain under demo, then the rest
    deepest = client.get(f"/?page={(2 + DEEP - 1) // SESSIONS_PAGE}")
    assert deepest.status_code == 200
    assert f"[depth {DEEP}]" in deepest.text and f"deep{DEEP - 1} (" in deepest.text
    assert len(first.content) < 400_000


def test_search_is_bounded_and_says_how_many_match(big: Any) -> None:
    client, _, _ = big
    text = client.get("/?q=bulk").text
    assert text.count('<li class="session">') == SESSIONS_PAGE
    assert f"the first {SESSIONS_PAGE} of {OTHERS} matches" in text
