"""PostgreSQL through its faults (issue 45), each provoked for real: a stalled connection, a held
lock, a COMMIT whose reply is cut, a server-side disconnect, a connection cap — through the
loopback proxy of ``netproxy.py`` and ``pg_terminate_backend`` — and one LangGraph thread stuck
while another goes on.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

import alpstore.db.database as database_module
from alpstore.db import engine as engine_module
from alpstore.errors import DatabaseError
from alpstore.store import Store
from tests.conftest import postgres_schema
from tests.postgres.netproxy import COMMIT_QUERY, NetProxy, proxied

pytestmark = pytest.mark.postgres


def turn(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"turn {i}"}, {"role": "assistant", "content": f"a{i}"}]


def contents(store: Store, name: str) -> list[str]:
    return [str(e.value["content"]) for e in store.get_session(name).history()]


def with_query(url: str, **params: str) -> str:
    u = make_url(url)
    query = dict(u.query)
    if "options" in params and "options" in query:
        params["options"] = f"{query['options']} {params['options']}"
    return u.update_query_dict(params).render_as_string(hide_password=False)


@contextmanager
def archive(tmp_path: Path, *, delay_s: float = 0.0, **params: str) -> Iterator[Any]:
    """(proxy, store, direct URL): an archive in a fresh schema, reached through the proxy."""
    with postgres_schema() as direct, proxied(direct, delay_s=delay_s) as (proxy, url):
        store = Store.open(tmp_path, url=with_query(url, **params) if params else url)
        try:
            yield proxy, store, direct
        finally:
            proxy.resume()
            proxy.refuse_new = False
            proxy.cap = None
            store.close()


@contextmanager
def admin_on(direct: str) -> Iterator[Any]:
    engine = create_engine(direct, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


# ------------------------------------------------------------------ 1. every call is bounded
def test_the_documented_bounds_are_set_on_every_connection(tmp_path: Path) -> None:
    assert engine_module.PG_CALL_TIMEOUT_S <= 30
    assert engine_module.PG_TCP["tcp_user_timeout"] <= 30_000
    with archive(tmp_path) as (_proxy, store, _direct), store.db.read() as conn:
        shown = {
            name: conn.exec_driver_sql(f"SHOW {name}").scalar_one()
            for name in engine_module.PG_SERVER_TIMEOUTS_MS
        }
        params = conn.connection.dbapi_connection.info.get_parameters()  # type: ignore[union-attr]
    assert shown == {
        "statement_timeout": "20s",
        "lock_timeout": "10s",
        "idle_in_transaction_session_timeout": "1min",
    }
    assert params["keepalives"] == "1" and params["tcp_user_timeout"] == "30000", params
    assert "search_path" in params["options"]  # the URL's own options are kept beside ours


def test_a_stalled_connection_fails_within_its_bound_naming_it(tmp_path: Path) -> None:
    with archive(tmp_path, alpstore_call_timeout="2") as (proxy, store, _direct):
        session = store.create_session(name="stall")
        session.commit_turn(turn(1))
        proxy.stall()  # the network still acknowledges every byte; nothing comes back
        start = time.monotonic()
        with pytest.raises(DatabaseError) as caught:
            session.commit_turn(turn(2))
        took = time.monotonic() - start
        proxy.resume()
        message = caught.value.message
        assert took < 2 * 2 + 1, took  # the call's wait, then the COMMIT's read-back attempt
        assert "alpstore_call_timeout" in message and "\n" not in message, message
        said = message + " " + (caught.value.hint or "")
        assert "outcome unknown" in said and "nothing was written" not in said, said
        session.commit_turn(turn(3))  # the next call goes through on a fresh connection
        # the turn went whole (one wait, COMMIT included) into a network that held it: the
        # server may have run it once the network let it through — never twice
        assert contents(store, "stall") in (
            ["turn 1", "a1", "turn 3", "a3"],
            ["turn 1", "a1", "turn 2", "a2", "turn 3", "a3"],
        )


def test_a_held_lock_fails_at_lock_timeout_its_retries_counted_against_it(
    tmp_path: Path,
) -> None:
    params = {"options": "-c lock_timeout=1000"}
    with archive(tmp_path, **params) as (_proxy, store, direct):
        store.create_session(name="locked").commit_turn(turn(1))
        with admin_on(direct) as admin:
            admin.execute(text("SELECT 1 FROM sessions WHERE name = 'locked' FOR UPDATE"))
            start = time.monotonic()
            with pytest.raises(DatabaseError) as caught:
                store.get_session("locked").commit_turn(turn(2))
            took = time.monotonic() - start
            admin.rollback()
        assert took < 2.5, f"{took:.1f} s for a lock_timeout of 1 s (8 retries took 9.9 s)"
        assert "lock_timeout" in caught.value.message, caught.value.message
        assert "\n" not in caught.value.message
        assert contents(store, "locked") == ["turn 1", "a1"]


def test_a_slow_statement_fails_at_statement_timeout_naming_it(tmp_path: Path) -> None:
    with archive(tmp_path, options="-c statement_timeout=300") as (_proxy, store, _direct):
        start = time.monotonic()
        with pytest.raises(DatabaseError) as caught, store.db.read() as conn:
            conn.exec_driver_sql("SELECT pg_sleep(5)")
        assert time.monotonic() - start < 3
        assert "statement_timeout" in caught.value.message, caught.value.message


# ------------------------------------------------------------------ 3. a COMMIT's reply cut
def test_a_commit_whose_reply_is_cut_is_read_back_and_stored_once(tmp_path: Path) -> None:
    with archive(tmp_path) as (proxy, store, _direct):
        session = store.create_session(name="cut")
        session.commit_turn(turn(1))
        for _ in range(3):
            proxy.cut_reply_after(COMMIT_QUERY)
            connections = proxy.connections
            ck = session.commit_turn(turn(2))  # committed: the read-back says so, no error
            assert proxy.connections > connections  # the reply was cut: a fresh connection
            # its id and number came with the reply that was cut: read back, the stored ones
            assert session.checkpoints()[-1] == ck
        assert contents(store, "cut") == ["turn 1", "a1", "turn 2", "a2"] + ["turn 2", "a2"] * 2


def test_a_saver_put_whose_commit_reply_is_cut_is_read_back_and_stored_once(
    tmp_path: Path,
) -> None:
    pytest.importorskip("langgraph.checkpoint.base", reason="langgraph is not installed")
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.base import empty_checkpoint

    from alpstore.integrations.langgraph import AlpstoreSaver

    with postgres_schema() as direct, proxied(direct) as (proxy, url):
        saver = AlpstoreSaver.open(tmp_path, url=url)
        try:
            config: Any = {"configurable": {"thread_id": "cut", "checkpoint_ns": ""}}
            messages: list[Any] = []
            for i in range(4):
                messages = [*messages, HumanMessage(content=f"q{i}", id=f"u{i}")]
                ck = empty_checkpoint()
                ck["channel_values"] = {"messages": list(messages)}
                ck["channel_versions"] = {"messages": i + 1}
                if i >= 2:  # a steady thread: the put's rows ride its COMMIT
                    proxy.cut_reply_after(COMMIT_QUERY)
                connections = proxy.connections
                config = saver.put(config, ck, {"source": "loop", "step": i}, {"messages": i + 1})
                if i >= 2:
                    assert proxy.connections > connections
            stored = list(saver.list({"configurable": {"thread_id": "cut"}}))
            assert len(stored) == 4  # each once
            latest = saver.get_tuple(config)
            assert latest is not None
            assert [m.content for m in latest.checkpoint["channel_values"]["messages"]] == [
                "q0",
                "q1",
                "q2",
                "q3",
            ]
        finally:
            saver.close()


def test_a_cut_commit_that_cannot_be_read_back_is_outcome_unknown_never_nothing_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(database_module, "COMMIT_READ_BACK_S", 1.0)
    with archive(tmp_path) as (proxy, store, direct):
        session = store.create_session(name="unknown")
        session.commit_turn(turn(1))
        proxy.cut_reply_after(COMMIT_QUERY)
        proxy.refuse_new = True  # the server cannot be asked afterwards
        with pytest.raises(DatabaseError) as caught:
            session.commit_turn(turn(2))
        proxy.refuse_new = False
        said = caught.value.message + " " + (caught.value.hint or "")
        assert "outcome unknown" in said and "nothing was written" not in said, said
        assert "\n" not in caught.value.message
        # it was committed, and stored once: no retry re-ran it
        with Store.open(tmp_path / "other", url=direct) as other:
            assert contents(other, "unknown") == ["turn 1", "a1", "turn 2", "a2"]


def test_a_commit_stalled_past_the_call_bound_is_read_back_once_the_server_answers(
    tmp_path: Path,
) -> None:
    with archive(tmp_path, alpstore_call_timeout="1") as (proxy, store, _direct):
        session = store.create_session(name="stalled-commit")
        session.commit_turn(turn(1))
        proxy.stall_after(COMMIT_QUERY)  # the COMMIT reaches the server; no reply comes back

        def heal() -> None:  # the stalled connections die, the network heals
            proxy.reset_all()
            proxy.resume()

        timer = threading.Timer(2.5, heal)
        timer.start()
        try:
            start = time.monotonic()
            session.commit_turn(turn(2))  # committed: read back, reported stored
            took = time.monotonic() - start
        finally:
            timer.cancel()
        assert 1 <= took < 10, took
        assert contents(store, "stalled-commit") == ["turn 1", "a1", "turn 2", "a2"]


# ------------------------------------------------------------------ 4. server-side disconnects
def test_a_server_side_disconnect_fails_no_call(tmp_path: Path) -> None:
    name = f"h45_{uuid.uuid4().hex[:8]}"
    with archive(tmp_path, application_name=name) as (proxy, store, direct):
        session = store.create_session(name="dropped")
        session.commit_turn(turn(1))
        with admin_on(direct) as admin:  # every connection of the store, just used
            admin.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = :name"
                ),
                {"name": name},
            )
        time.sleep(0.2)  # well under the 2 s after which an idle connection is pinged anyway
        session.commit_turn(turn(2))
        proxy.reset_all()  # a middlebox dropping the connections: RST
        session.commit_turn(turn(3))
        assert [e.value["content"] for e in session.history()] == [
            "turn 1",
            "a1",
            "turn 2",
            "a2",
            "turn 3",
            "a3",
        ]


def test_a_connection_lost_before_commit_is_retried_once_on_a_fresh_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with archive(tmp_path) as (proxy, store, _direct):
        session = store.create_session(name="retried")
        session.commit_turn(turn(1))
        store.db.engine.pool.dispose()
        real = store.db.engine.pool.connect
        cut = []

        def reset_once() -> Any:
            conn = real()
            if not cut:  # a connection that breaks after checkout, before anything answers
                cut.append(1)
                proxy.reset_all()
            return conn

        monkeypatch.setattr(store.db.engine.pool, "connect", reset_once)
        session.commit_turn(turn(2))
        assert cut and contents(store, "retried") == ["turn 1", "a1", "turn 2", "a2"]


# ------------------------------------------------------------------ 5. a connection cap
def test_a_connection_cap_equal_to_the_connections_held_fails_no_turn(tmp_path: Path) -> None:
    params = {"alpstore_pool_size": "3", "alpstore_pool_overflow": "5"}
    # a network's latency (1 ms each way) keeps the 8 writers' transactions overlapping
    with archive(tmp_path, delay_s=0.001, **params) as (proxy, store, _direct):
        for i in range(8):
            store.create_session(name=f"w{i}").commit_turn(turn(0))
        proxy.cap = 3  # the role's CONNECTION LIMIT: what the pool holds
        errors: list[str] = []

        def writer(i: int) -> None:
            session = store.get_session(f"w{i}")
            for t in range(1, 16):
                try:
                    session.commit_turn(turn(t))
                except DatabaseError as err:
                    errors.append(err.message)

        held = [store.db.engine.connect() for _ in range(3)]  # the pool's 3, busy elsewhere
        threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        time.sleep(0.5)  # every writer asks for a 4th connection meanwhile: refused at the cap
        for conn in held:
            conn.close()
        for t in threads:
            t.join(120)
        proxy.cap = None
        assert not errors, errors[:3]
        assert proxy.refused > 0  # the cap was reached: the test proves something
        for i in range(8):
            assert len(contents(store, f"w{i}")) == 2 * 16


# ------------------------------------------------------------------ 2. one stuck thread
def test_an_unrelated_async_thread_finishes_while_another_is_blocked(tmp_path: Path) -> None:
    pytest.importorskip("langgraph.graph", reason="langgraph is not installed")
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    from alpstore.integrations.langgraph import AlpstoreSaver

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(content=f"reply {len(state['messages'])}")]}

    # two thread ids the fixed lanes of 2 workers put on one lane (crc32 % 2): B waited for A
    stuck = "thread-a"
    other = next(
        f"thread-{i}"
        for i in range(100)
        if zlib.crc32(f"thread-{i}".encode()) % 2 == zlib.crc32(stuck.encode()) % 2
        and f"thread-{i}" != stuck
    )
    with archive(tmp_path, options="-c lock_timeout=20000") as (_proxy, store, direct):
        saver = AlpstoreSaver(store, workers=2)
        builder = StateGraph(MessagesState)
        builder.add_node("agent", agent)
        builder.add_edge(START, "agent")
        builder.add_edge("agent", END)
        graph = builder.compile(checkpointer=saver)

        def cfg(thread: str) -> Any:
            return {"configurable": {"thread_id": thread}}

        async def main() -> tuple[float, bool]:
            for thread in (stuck, other):
                await graph.ainvoke({"messages": [HumanMessage(content="hi")]}, cfg(thread))
            with admin_on(direct) as admin:
                admin.execute(
                    text(
                        "SELECT 1 FROM sessions WHERE id = (SELECT session_id FROM lg_threads "
                        "WHERE thread_id = :t) FOR UPDATE"
                    ),
                    {"t": stuck},
                )
                blocked = asyncio.ensure_future(
                    graph.ainvoke({"messages": [HumanMessage(content="again")]}, cfg(stuck))
                )
                await asyncio.sleep(0.5)
                start = time.monotonic()
                await asyncio.wait_for(
                    graph.ainvoke({"messages": [HumanMessage(content="go")]}, cfg(other)), 10
                )
                took = time.monotonic() - start
                still_blocked = not blocked.done()
                admin.rollback()
            await blocked
            return took, still_blocked

        try:
            took, still_blocked = asyncio.run(main())
        finally:
            saver.close()
        assert still_blocked  # A really was held while B ran
        assert took < 3, f"thread B took {took:.1f} s while A was blocked"


def test_the_proxy_counts_round_trips_and_delays_them(tmp_path: Path) -> None:
    with postgres_schema() as direct, NetProxy("127.0.0.1", make_url(direct).port or 5432) as p:
        engine = create_engine(p.url(direct), poolclass=NullPool)
        try:
            with engine.connect() as conn:
                with p.counting() as n:
                    conn.exec_driver_sql("SELECT 1").scalar_one()
                p.delay_s = 0.01
                start = time.monotonic()
                with p.counting() as m:
                    conn.exec_driver_sql("SELECT 2").scalar_one()
                took = time.monotonic() - start
        finally:
            engine.dispose()
    assert n[0] == 2 and m[0] == 1  # BEGIN, then the statement; then the statement alone
    assert 0.02 <= took < 0.2, took


def test_the_pool_keeps_a_connection_per_saver_worker(tmp_path: Path) -> None:
    pytest.importorskip("langgraph.checkpoint.base", reason="langgraph is not installed")
    from alpstore.integrations.langgraph import AlpstoreSaver

    with postgres_schema() as url:
        for workers, size in ((4, engine_module.PG_POOL_SIZE), (12, 12)):
            saver = AlpstoreSaver.open(tmp_path / str(workers), url=url, workers=workers)
            try:
                assert saver.store.db.engine.pool.size() == size  # type: ignore[attr-defined]
            finally:
                saver.close()
