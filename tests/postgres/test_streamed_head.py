"""A transaction begun later (``raw.begin_later``, the one-wait turn) streams its head: the
``BEGIN``, its id's read and the guard reach the server at once and run while the client still
prepares the rest, which leaves with the COMMIT — still one client wait
(``pgconn.BoundedConnection._alp_stream_start``). Rolled back, interrupted by a statement that
needs its reply, or failed, it ends as the unstreamed pipeline does.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
from psycopg import pq

from alpstore.db import pgconn
from tests.conftest import postgres_schema
from tests.postgres.netproxy import proxied
from tests.postgres.test_prepared import driver

pytestmark = pytest.mark.postgres

LOCK_KEY = 4545


def _held_by_another(other: Any) -> bool:
    """Whether some session other than ``other`` holds the advisory lock ``LOCK_KEY``."""
    row = other.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %s "
        "AND granted AND pid <> pg_backend_pid()",
        (LOCK_KEY,),
    ).fetchone()
    return bool(row and row[0])


def _table(conn: Any) -> None:
    conn.execute("CREATE TABLE t (v text, n int)")
    conn.commit()


def test_the_head_runs_on_the_server_before_the_commit_in_one_wait() -> None:
    with (
        postgres_schema() as direct,
        proxied(direct) as (proxy, url),
        driver(url) as conn,
        driver(direct) as other,
    ):
        other.autocommit = True
        _table(conn)
        with proxy.counting() as waits:
            conn.alp_want_xid = True
            conn.alp_begin_later([("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))])
            deadline = time.monotonic() + 5
            while not _held_by_another(other) and time.monotonic() < deadline:
                time.sleep(0.01)
            held_before_commit = _held_by_another(other)
            conn.alp_defer(("INSERT INTO t VALUES (%s, %s)", ("a", 1)))
            seen_before_commit = other.execute("SELECT count(*) FROM t").fetchone()
            xid_before_commit = conn.alp_xid
            conn.commit()
        assert held_before_commit, "the streamed head did not run before the COMMIT"
        assert seen_before_commit == (0,)
        assert xid_before_commit is None  # the server answers nothing before the COMMIT
        assert isinstance(conn.alp_xid, int)
        assert waits[0] == 1, waits
        assert other.execute("SELECT v, n FROM t").fetchall() == [("a", 1)]
        assert not _held_by_another(other)


@pytest.mark.parametrize("stream", [True, False])
def test_a_rollback_leaves_nothing_and_the_connection_clean(
    stream: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pgconn.BoundedConnection, "alp_stream", stream)
    with postgres_schema() as url, driver(url) as conn:
        _table(conn)
        conn.alp_begin_later([("INSERT INTO t VALUES (%s, %s)", ("a", 1))])
        conn.alp_defer(("INSERT INTO t VALUES (%s, %s)", ("b", 2)))
        conn.rollback()
        assert conn.pgconn.transaction_status == pq.TransactionStatus.IDLE
        assert conn.pgconn.pipeline_status == pq.PipelineStatus.OFF
        conn.alp_begin_later([("INSERT INTO t VALUES (%s, %s)", ("c", 3))])
        conn.commit()
        rows = conn.execute("SELECT v FROM t").fetchall()
        conn.commit()
    assert rows == [("c",)]


@pytest.mark.parametrize("stream", [True, False])
def test_a_statement_that_needs_its_reply_comes_after_what_was_sent(
    stream: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pgconn.BoundedConnection, "alp_stream", stream)
    got: list[Any] = []
    with postgres_schema() as url, driver(url) as conn:
        _table(conn)
        conn.alp_begin_later([("INSERT INTO t VALUES (%s, %s)", ("a", 1))])
        conn.alp_defer(("INSERT INTO t VALUES (%s, %s) RETURNING n", ("b", 2)), got.append)
        inside = conn.execute("SELECT count(*) FROM t").fetchone()  # the same transaction
        conn.alp_defer(("INSERT INTO t VALUES (%s, %s)", ("c", 3)))
        conn.commit()
        rows = conn.execute("SELECT v FROM t ORDER BY v").fetchall()
        conn.commit()
    assert inside == (2,)
    assert [r.get_value(0, 0) for r in got] == [b"2"]
    assert rows == [("a",), ("b",), ("c",)]


@pytest.mark.parametrize("stream", [True, False])
def test_a_failed_statement_fails_the_transaction_whole(
    stream: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pgconn.BoundedConnection, "alp_stream", stream)
    with postgres_schema() as url, driver(url) as conn:
        _table(conn)
        conn.alp_begin_later([("INSERT INTO t VALUES (%s, %s)", ("a", 1))])
        conn.alp_defer(("INSERT INTO t VALUES (%s, CAST(%s AS INTEGER))", ("b", "two")))
        conn.alp_defer(("INSERT INTO t VALUES (%s, %s)", ("c", 3)))
        with pytest.raises(psycopg.errors.InvalidTextRepresentation):
            conn.commit()
        assert conn.pgconn.transaction_status == pq.TransactionStatus.IDLE
        rows = conn.execute("SELECT count(*) FROM t").fetchone()
        conn.commit()
    assert rows == (0,)
