"""A write transaction's one-wait pipeline runs the statements its connection prepared in an
earlier transaction (pgconn.BoundedConnection._alp_pipeline): no parse or plan on the server
for a turn's statements; one the server cannot prepare goes on bound, failing nothing;
``alpstore_prepared=0`` prepares none.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from alpstore.db import pgconn
from alpstore.db.engine import parse_database_url, postgresql_engine
from alpstore.store import Store
from tests.conftest import postgres_schema
from tests.postgres.netproxy import proxied

pytestmark = pytest.mark.postgres


def turn(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"q{i} é"}, {"role": "assistant", "content": f"a{i}"}]


@contextmanager
def driver(url: str) -> Iterator[Any]:
    """A ``pgconn.BoundedConnection`` of alpstore's engine for ``url``, outside SQLAlchemy's
    transaction handling."""
    parsed, location = parse_database_url(url)
    engine = postgresql_engine(parsed, location)
    raw = engine.raw_connection()
    try:
        yield raw.driver_connection
    finally:
        raw.close()
        engine.dispose()


def prepared_on_server(conn: Any) -> list[str]:
    rows = conn.execute("SELECT name FROM pg_prepared_statements ORDER BY name").fetchall()
    conn.commit()
    return [r[0] for r in rows if r[0].startswith("_alp_")]


@pytest.mark.parametrize("prepared", ["default", "off", "no hook"])
def test_turns_run_prepared_in_one_round_trip_and_read_back_alike(
    tmp_path: Path, prepared: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if prepared == "no hook":  # a psycopg without ``_deallocate``: nothing is prepared
        monkeypatch.setattr(pgconn, "CAN_PREPARE", False)
    with postgres_schema() as direct, proxied(direct) as (proxy, url):
        if prepared == "off":
            url += ("&" if "?" in url else "?") + "alpstore_prepared=0"
        store = Store.open(tmp_path, url=url)
        try:
            session = store.create_session(name="p")
            waits = []
            for i in range(8):
                with proxy.counting() as n:
                    session.commit_turn(turn(i))
                waits.append(n[0])
            with store.db.engine.connect() as conn:  # type: ignore[attr-defined]
                dbapi = conn.connection.driver_connection
                names = prepared_on_server(dbapi)
                known = dict(dbapi._alp_prepared or {})
            history = [e.value["content"] for e in store.get_session("p").history()]
        finally:
            store.close()
    assert max(waits[2:]) == 1, waits
    assert history == [m["content"] for i in range(8) for m in turn(i)]
    if prepared != "default":
        assert names == [] and known == {}
    else:  # the guard, the entries' INSERT, the head's move, the checkpoint …
        assert len(names) >= 4 and sorted(known.values()) == sorted(n.encode() for n in names)


def test_a_statement_the_server_cannot_prepare_goes_on_bound_failing_nothing() -> None:
    with postgres_schema() as url, driver(url) as conn:
        conn.execute("CREATE TABLE t (v text, n int)")
        conn.commit()
        unpreparable = ("INSERT INTO t SELECT 'x', 1 WHERE %s IS NOT NULL", ("y",))
        preparable = ("INSERT INTO t VALUES (%s, %s)", ("z", 2))
        for _ in range(3):
            conn.alp_begin_later([unpreparable, preparable])
            conn.commit()
        rows = conn.execute("SELECT v, n FROM t ORDER BY v").fetchall()
        conn.commit()
        names = prepared_on_server(conn)
        known = dict(conn._alp_prepared or {})
    assert rows == [("x", 1)] * 3 + [("z", 2)] * 3
    # "could not determine data type of parameter $1": never prepared, every turn committed;
    # the other one's PREPARE, skipped after it the first time, made the next
    assert list(known) == [(preparable[0], (0, 23))] and names == ["_alp_3"]


def test_the_statements_prepared_again_after_psycopg_deallocates_all() -> None:
    """psycopg sends DEALLOCATE ALL after a ROLLBACK once it prepared statements of its own
    (``prepare=True``, or a query run five times): the pipeline's prepared statements go with
    them, and the next transaction prepares them again instead of failing ("prepared statement
    \"_alp_1\" does not exist": the stateful sessions test on PostgreSQL, before)."""
    with postgres_schema() as url, driver(url) as conn:
        conn.execute("CREATE TABLE t (v text, n int)")
        conn.commit()
        statement = ("INSERT INTO t VALUES (%s, %s)", ("z", 2))
        for _ in range(2):
            conn.alp_begin_later([statement])
            conn.commit()
        assert prepared_on_server(conn) == ["_alp_1"]
        conn.execute("SELECT %s::int", (1,), prepare=True)
        conn.rollback()  # psycopg: DEALLOCATE ALL
        assert prepared_on_server(conn) == []
        for _ in range(2):
            conn.alp_begin_later([statement])
            conn.commit()
        rows = conn.execute("SELECT count(*) FROM t").fetchone()
        conn.commit()
        names = prepared_on_server(conn)
    assert rows == (4,) and names == ["_alp_2"]
