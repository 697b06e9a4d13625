"""Round trips per call on PostgreSQL (issue 45), counted by the loopback proxy: a write
transaction's BEGIN rides its first statement, statements whose results no one reads ride the
next one (or the COMMIT), and a statement of that queue that fails still fails its transaction
whole.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from alpstore.db import raw as rsql
from alpstore.errors import DatabaseError
from alpstore.store import Store
from tests.conftest import postgres_schema
from tests.postgres.netproxy import proxied

pytestmark = pytest.mark.postgres

MAX_COMMIT_TURN_ROUND_TRIPS = 6
"""A native commit_turn, however many messages: BEGIN with the session row, the blobs looked up,
the new ones inserted, the segment grown, the checkpoint (with the entries and the head's move),
COMMIT. It was 9 before the batching (BEGIN, entries and the head's move each one of their own)."""

SET_ORIGIN = "UPDATE sessions SET origin = "


def four(i: int, n: int = 4) -> list[dict[str, str]]:
    roles = ["user", "assistant", "tool", "assistant"]
    return [{"role": roles[k % 4], "content": f"turn {i} message {k}"} for k in range(n)]


def test_a_commit_turn_takes_at_most_six_round_trips_whatever_its_size(tmp_path: Path) -> None:
    with postgres_schema() as direct, proxied(direct) as (proxy, url):
        store = Store.open(tmp_path, url=url)
        try:
            session = store.create_session(name="rt")
            session.commit_turn(four(0))
            counts = {}
            for size in (4, 12):
                with proxy.counting() as n:
                    session.commit_turn(four(size, size))
                counts[size] = n[0]
            with proxy.counting() as reads:
                history = session.history()
        finally:
            store.close()
    assert counts[4] <= MAX_COMMIT_TURN_ROUND_TRIPS, counts
    assert counts[12] == counts[4], counts  # one multi-row statement a table, however many
    assert len(history) == 4 + 4 + 12
    # two read transactions (the session's row, then its entries), each BEGIN riding the first
    # statement: 5 (was 7)
    assert reads[0] <= 5, reads


def test_a_deferred_statement_that_fails_fails_its_transaction_whole(tmp_path: Path) -> None:
    with postgres_schema() as url:
        store = Store.open(tmp_path, url=url)
        try:
            session = store.create_session(name="whole")
            session.commit_turn(four(0))
            with pytest.raises(DatabaseError) as caught, store.db.atomic() as conn:
                rsql.execute(conn, "UPDATE sessions SET turn = 99 WHERE name = 'whole'")
                rsql.execute(  # a foreign key no segment has: refused at COMMIT
                    conn,
                    "INSERT INTO segment_entries (segment_id, position, blob_id) VALUES (?, ?, ?)",
                    (987654, 0, 987654),
                    defer=True,
                )
            said = caught.value.message + (caught.value.hint or "")
            assert "foreign key" in said and "outcome unknown" not in said, said
            with store.db.read() as conn:
                turn = conn.execute(text("SELECT turn FROM sessions WHERE name = 'whole'"))
                assert turn.scalar_one() == 1  # the UPDATE before it was rolled back with it
            # the queue is flushed before a Core statement of the same transaction, in order
            with store.db.atomic() as conn:
                rsql.execute(
                    conn, "UPDATE sessions SET origin = 'x' WHERE name = 'whole'", defer=True
                )
                seen = conn.execute(text("SELECT origin FROM sessions WHERE name = 'whole'"))
                assert seen.scalar_one() == "x"
            # a body that raises drops the queue unsent
            with pytest.raises(RuntimeError), store.db.atomic() as conn:
                rsql.execute(
                    conn, "UPDATE sessions SET origin = 'y' WHERE name = 'whole'", defer=True
                )
                raise RuntimeError("the caller changed its mind")
            with store.db.read() as conn:
                label = conn.execute(text("SELECT origin FROM sessions WHERE name = 'whole'"))
                assert label.scalar_one() == "x"
        finally:
            store.close()
