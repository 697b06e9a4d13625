"""The ids ``store_encoded_counted`` hands back are the rows it names, however the insert
learns them (SQLite: the consecutive ids of a statement that inserted every row, else a lookup;
PostgreSQL: RETURNING), beside blobs stored before, within one batch twice, and after deletes
that leave gaps in the ids; with the lookup before the insert skipped (``probe=False``, an
import's guess that nothing is stored yet, right or wrong) and with the ids of earlier batches
of the same transaction passed in (``known``)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete, select

from alpstore.archive.sql import encode
from alpstore.db.tables import blob_rows, blobs
from tests.conftest import Backend

ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("store"),
            st.lists(st.lists(st.integers(0, 40), min_size=1, max_size=25), min_size=1, max_size=3),
            st.booleans(),
        ),
        st.tuples(st.just("delete"), st.lists(st.integers(0, 40), max_size=6), st.just(True)),
    ),
    min_size=1,
    max_size=8,
)


def _item(n: int) -> Any:
    return encode({"role": "user", "content": f"message {n} " * (1 + n % 7)})


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=ops)
def test_returned_ids_name_the_rows_of_their_digests(backend: Backend, steps: list[Any]) -> None:
    store = backend.open_store()
    with store.db.atomic() as conn:  # a clean slate for each example
        conn.execute(delete(blob_rows))
    stored: set[bytes] = set()
    for op, numbers, probe in steps:
        if op == "delete":  # unreferenced rows, as `gc` deletes them: gaps in the ids
            gone = [_item(n)[0] for n in numbers]
            with store.db.atomic() as conn:
                conn.execute(delete(blob_rows).where(blob_rows.c.digest.in_(gone)))
            stored -= set(gone)
            continue
        # batches of one transaction: the later ones see the earlier ones' ids in `known`
        known: dict[bytes, int] = {}
        returned: list[tuple[list[bytes], list[int]]] = []
        with store.db.atomic() as conn:
            for batch in numbers:
                items = [_item(n) for n in batch]
                ids, inserted = store.archive.store_encoded_counted(
                    conn, items, probe=probe, known=known
                )
                new = {d for d, _, _ in items} - stored
                assert inserted == len(new)
                stored |= new
                returned.append(([d for d, _, _ in items], ids))
        with store.db.read() as conn:
            rows = dict(conn.execute(select(blobs.c.id, blobs.c.digest)).all())
        for digests, ids in returned:
            assert [bytes(rows[i]) for i in ids] == digests
        assert {bytes(rows[i]): i for i in known.values()} == known
        assert len(rows) == len(stored)
