"""Advisory locks are one archive's, not the database's (issue 42): PostgreSQL keys an advisory
lock by database, so a lock keyed by a constant alone made every archive in the database wait
for one import in another schema (the stress run's writers all ran out of ``lock_timeout``
while an import ran in a test beside it). ``db.members.NEW_BLOBS_LOCK`` and
``rules.names.NAME_LOCK`` carry the archive's schema as their second key.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from alpstore.db.members import LOCK_NEW_BLOBS
from alpstore.rules.names import NAME_LOCK, claim_name
from alpstore.store import Store
from tests.conftest import postgres_schema

pytestmark = pytest.mark.postgres


def _holding(url: str, statement: str) -> psycopg.Connection:
    """A connection to ``url``'s schema inside a transaction that ran ``statement``."""
    conn = psycopg.connect(make_url(url).set(drivername="postgresql").render_as_string(False))
    conn.execute(statement)  # psycopg opens the transaction: the lock is held until rollback
    return conn


def _in_thread(fn: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    done: list[object] = []
    thread = threading.Thread(target=lambda: done.append(fn()), daemon=True)
    thread.start()
    return thread, done


@pytest.mark.parametrize(
    ("statement", "write"),
    [
        (LOCK_NEW_BLOBS, "turn"),  # an import storing frames in the other schema
        (f"SELECT pg_advisory_xact_lock({NAME_LOCK}, hashtext(current_schema()))", "name"),
    ],
)
def test_a_lock_held_in_one_archive_holds_up_only_that_archive(
    tmp_path: Path, statement: str, write: str
) -> None:
    with postgres_schema() as url_a, postgres_schema() as url_b:
        a = Store.open(tmp_path / "a", url=url_a)
        b = Store.open(tmp_path / "b", url=url_b)
        try:

            def writer(store: Store, n: int) -> Callable[[], object]:
                if write == "name":  # as an import names the session it brings

                    def claim() -> str:
                        with store.db.atomic() as conn:
                            return claim_name(conn, store, f"imported-{n}", suffix=True)

                    return claim
                session = store.create_session(name=f"s-{n}")
                msg = {"role": "user", "content": f"new content {n} in {store!r}"}
                return lambda: session.commit_turn([msg])

            own = writer(a, 1)
            other = writer(b, 2)
            held = _holding(url_a, statement)
            try:
                # the other archive goes on at once
                thread, done = _in_thread(other)
                thread.join(timeout=8)
                assert done, "a write in another schema waited for this schema's lock"
                # this archive's own writer waits for it (the lock is real)
                thread, done = _in_thread(own)
                thread.join(timeout=1.5)
                assert thread.is_alive() and not done
            finally:
                held.rollback()
                held.close()
            thread.join(timeout=15)
            assert done, "the archive's own writer did not go on once the lock was released"
        finally:
            a.close()
            b.close()
