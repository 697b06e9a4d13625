"""Views and sessions behave the same on SQLite and PostgreSQL: the model-based machine of
tests/core (append / fold / checkpoint / backtrack / fork / resume / retention / gc, checked
against plain lists after every step) runs on each backend, plus direct piece-table checks."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

from alpstore.store import Store
from alpstore.views import EMPTY, MAX_CHAIN_DEPTH, View
from tests.conftest import Backend, postgres_base_url, postgres_schema
from tests.core.test_sessions_stateful import SessionMachine


class BackendSessionMachine(SessionMachine):
    """The same machine on a store named by ``url`` (a fresh PostgreSQL schema per run)."""

    url_factory: Any = None

    def __init__(self) -> None:
        RuleBasedStateMachine.__init__(self)
        self._stack = ExitStack()
        url = self._stack.enter_context(self.url_factory()) if self.url_factory else None
        self.dir = Path(tempfile.mkdtemp(prefix="alpstore-contract-"))
        self.store = Store.open(self.dir, url=url)
        self.sessions = []
        self.checkpoints = []
        self.fork_sources = set()
        self._new_session(None)

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        self._stack.close()


@pytest.mark.parametrize("name", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_sessions_match_the_list_model(name: str) -> None:
    if name == "postgresql":
        if postgres_base_url() is None:
            pytest.skip("PostgreSQL backend not tested: ALPSTORE_TEST_POSTGRES_URL is not set")
        BackendSessionMachine.url_factory = staticmethod(postgres_schema)
    else:
        BackendSessionMachine.url_factory = None
    run_state_machine_as_test(
        BackendSessionMachine,
        settings=settings(max_examples=12, stateful_step_count=25, deadline=None),
    )


def _ids(store: Store, view: View) -> list[int]:
    with store.db.read() as conn:
        return store.views.read_ids(conn, view)


def test_piece_table_appends_branches_and_splices(backend: Backend) -> None:
    store = backend.open_store()
    session = store.create_session()
    digests = store.archive.put_many([{"i": i} for i in range(40)])
    with store.db.read() as conn:
        found = store.archive.ids_for(conn, digests)
    ids = [found[d] for d in digests]
    with store.db.atomic() as conn:
        view = store.views.append(conn, EMPTY, session.id, ids[:10])
        grown = store.views.append(conn, view, session.id, ids[10:20])
        assert grown.segment_id == view.segment_id  # the tip grows in place
        branch = store.views.append(conn, View(view.segment_id, 5), session.id, ids[20:25])
        assert branch.segment_id != view.segment_id  # a branch never disturbs the original
        folded = store.views.splice(conn, grown, session.id, 3, 8, ids[30:31])
    model = ids[:20]
    assert _ids(store, grown) == model
    assert _ids(store, View(view.segment_id, 10)) == ids[:10]
    assert _ids(store, branch) == ids[:5] + ids[20:25]
    assert _ids(store, folded) == ids[:3] + ids[30:31] + ids[8:20]


def test_deep_branch_chains_are_flattened(backend: Backend) -> None:
    store = backend.open_store()
    owners = [store.create_session().id, store.create_session().id]
    digests = store.archive.put_many([{"k": i} for i in range(MAX_CHAIN_DEPTH + 5)])
    with store.db.read() as conn:
        found = store.archive.ids_for(conn, digests)
    ids = [found[d] for d in digests]
    view = EMPTY
    with store.db.atomic() as conn:
        for i, blob in enumerate(ids):
            # a view whose segment another session owns always branches
            view = store.views.append(conn, view, owners[i % 2], [blob])
        depth = store.views.depth(conn, view)
    assert depth <= MAX_CHAIN_DEPTH
    assert _ids(store, view) == ids


def test_short_lived_threads_leave_no_connection_or_file_behind(backend: Backend) -> None:
    """A framework calling in from a new thread each turn (LangGraph's executor does) must not
    pin a connection or a lock-file descriptor to every thread it ever used."""
    import threading

    store = backend.open_store()
    session = store.create_session(name="threads")

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    def turn(i: int) -> None:
        session.commit_turn([{"role": "user", "content": f"turn {i}"}])
        assert len(store.hydrate(store.resolve_checkpoint("threads@latest"))) == i + 1

    turn(0)  # the first transaction may open what every later one reuses
    before = open_fds()
    for i in range(1, 61):
        worker = threading.Thread(target=turn, args=(i,))
        worker.start()
        worker.join()
    assert open_fds() <= before + 2
    assert store.db.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    assert len(store.list_checkpoints(session.id)) == 61
