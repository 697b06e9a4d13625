"""``raw.executemany`` of an INSERT stores exactly the rows a plain ``executemany`` would, in
order, whether it steps one row at a time or splits them into multi-row statements (PostgreSQL
from two rows, SQLite from ``SQLITE_MULTI_ROW_FROM``, each statement within the backend's
bound-parameter limit), with and without an ``ON CONFLICT`` clause that skips repeats."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from alpstore.db import raw as rsql
from tests.conftest import Backend

SIZES = st.one_of(
    st.integers(1, 3),
    st.sampled_from(
        [
            rsql.SQLITE_MULTI_ROW_FROM - 1,
            rsql.SQLITE_MULTI_ROW_FROM,
            rsql.SQLITE_MULTI_ROW_PARAMS // 3,
            rsql.SQLITE_MULTI_ROW_PARAMS // 3 + 1,
            2 * (rsql.SQLITE_MULTI_ROW_PARAMS // 3) + 5,
        ]
    ),
    st.integers(1, 1200),
)


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(n=SIZES, repeat_every=st.integers(0, 5), seed=st.integers(0, 10**6))
def test_rows_are_those_of_a_plain_executemany(
    backend: Backend, n: int, repeat_every: int, seed: int
) -> None:
    store = backend.open_store()
    keys = [(i * 7919 + seed) % (n + 1) if repeat_every and i % repeat_every == 0 else i + n + 1
            for i in range(n)]  # fmt: skip
    rows = [(k, f"v{i}-{seed}", None if i % 3 else i * 1.5) for i, k in enumerate(keys)]
    with store.db.atomic() as conn:
        conn.execute(text("DROP TABLE IF EXISTS raw_many"))
        conn.execute(text("CREATE TABLE raw_many (k INTEGER PRIMARY KEY, v TEXT, f FLOAT)"))
        rsql.executemany(
            conn, "INSERT INTO raw_many (k, v, f) VALUES (?, ?, ?) ON CONFLICT (k) DO NOTHING", rows
        )
        got = conn.execute(text("SELECT k, v, f FROM raw_many ORDER BY k")).all()
        firsts: dict[int, tuple[int, str, float | None]] = {}
        for row in rows:
            firsts.setdefault(row[0], row)  # a repeat is skipped: the first one stays
        assert [tuple(r) for r in got] == sorted(firsts.values())
        conn.execute(text("DELETE FROM raw_many"))
        unique = list(firsts.values())
        rsql.executemany(conn, "INSERT INTO raw_many (k, v, f) VALUES (?, ?, ?)", unique)
        got = conn.execute(text("SELECT k, v, f FROM raw_many ORDER BY k")).all()
        assert [tuple(r) for r in got] == sorted(unique)
        conn.execute(text("DROP TABLE raw_many"))
