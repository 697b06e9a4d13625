"""Round trips per call on PostgreSQL (issue 45), counted by the loopback proxy: a write in two
(the BEGIN with the rows it locks, then everything else with the COMMIT), a statement of the
queue that fails still fails its transaction whole, and a put_writes that finds its task taken
at the COMMIT merges instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from alpstore.db import raw as rsql
from alpstore.errors import DatabaseError, SessionStateError
from alpstore.store import Store
from tests.conftest import postgres_schema
from tests.postgres.netproxy import proxied

pytestmark = pytest.mark.postgres

MAX_COMMIT_TURN_ROUND_TRIPS = 1
"""A native commit_turn of a handle whose last write grew its head, however many messages: ONE
client wait — the BEGIN (its transaction id flushed back at once), the guard that locks the
session's row and its tip segment's row and checks them against what the handle wrote, the
blobs, the segment grown with its entries, the head's move, the checkpoint and the COMMIT, in
one pipeline. It was 9 before issue 45, 6 after its first round, 2 after its second."""

SET_ORIGIN = "UPDATE sessions SET origin = "


def four(i: int, n: int = 4) -> list[dict[str, str]]:
    roles = ["user", "assistant", "tool", "assistant"]
    return [{"role": roles[k % 4], "content": f"turn {i} message {k}"} for k in range(n)]


def test_a_commit_turn_takes_one_round_trip_whatever_its_size(tmp_path: Path) -> None:
    with postgres_schema() as direct, proxied(direct) as (proxy, url):
        store = Store.open(tmp_path, url=url)
        try:
            session = store.create_session(name="rt")
            session.commit_turn(four(0))  # a new segment: the plain way, then known
            session.commit_turn(four(1))
            # a turn of 12 once before counting, as the turns of 4 above: the first turn of a
            # shape sends its statements bound (their SQL text, 9 KB here) and prepares them
            # after its COMMIT; libpq pushes the first 8 KB out at once, the server answers
            # the BEGIN's flush request, and the rest of the same pipeline (no client wait)
            # then counts as a burst after a reply. Counted after that, every size is prepared.
            session.commit_turn(four(2, 12))
            counts = {}
            for size in (4, 12, 4):
                with proxy.counting() as n:
                    session.commit_turn(four(size, size))
                counts[size] = n[0]
            with proxy.counting() as reads:
                history = session.history()
        finally:
            store.close()
    assert counts[4] <= MAX_COMMIT_TURN_ROUND_TRIPS, counts
    assert counts[12] == counts[4], counts  # one multi-row statement a table, however many
    assert [e.value["content"] for e in history][-4:] == [f"turn 4 message {k}" for k in range(4)]
    assert len(history) == 4 + 4 + 12 + 4 + 12 + 4
    # two read transactions (the session's row, then its entries), each BEGIN riding the first
    # statement: 5 (was 7)
    assert reads[0] <= 5, reads


def test_a_turn_after_an_empty_one_is_stored(tmp_path: Path) -> None:
    """An empty turn leaves an empty head (no segment): nothing to grow in place, so the next
    turn is not sent unread (it failed an assertion in the stress test)."""
    with postgres_schema() as url:
        store = Store.open(tmp_path, url=url)
        try:
            session = store.create_session(name="empty")
            session.commit_turn([])
            session.commit_turn(four(1))
            session.commit_turn(four(2))
            got = [e.value["content"] for e in session.history()]
        finally:
            store.close()
    assert got == [f"turn {t} message {k}" for t in (1, 2) for k in range(4)]


def test_a_turn_sent_unread_after_another_writer_moved_the_head_reads_it_first(
    tmp_path: Path,
) -> None:
    """The one-wait turn names the head and tip this handle wrote; another writer of the
    session (a popped entry: the segment's length unchanged, the head one shorter; a pause)
    makes its guard fail, and the turn is re-run the usual way — never grown from the stale
    head (which would bring the popped entry back) nor past a pause.
    """
    with postgres_schema() as direct, proxied(direct) as (proxy, url):
        store = Store.open(tmp_path, url=url)
        other = Store.open(tmp_path / "other", url=direct)
        try:
            session = store.create_session(name="two")
            session.commit_turn(four(0))
            session.commit_turn(four(1))  # now the handle knows its tip
            popped = other.get_session("two").pop_last()
            assert popped is not None and popped.value["content"] == "turn 1 message 3"
            session.commit_turn(four(2))  # the guard fails: re-run, reading the row first
            got = [e.value["content"] for e in other.get_session("two").history()]
            assert got == [
                f"turn {t} message {k}" for t in range(3) for k in range(4) if (t, k) != (1, 3)
            ]
            with proxy.counting() as n:
                session.commit_turn(four(3))  # known again
            assert n[0] <= MAX_COMMIT_TURN_ROUND_TRIPS, n
            other.get_session("two").set_status("paused")
            with pytest.raises(SessionStateError):
                session.commit_turn(four(4))
            assert len(other.get_session("two").history()) == 15
        finally:
            other.close()
            store.close()


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
                    "INSERT INTO segment_runs (segment_id, start, blob_ids) "
                    "VALUES (?, ?, CAST(? AS INTEGER[]))",
                    (987654, 0, "{987654}"),
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
            # a statement too large to bind client-side goes as usual, the queue flushed first
            with store.db.atomic() as conn:
                rsql.execute(conn, f"{SET_ORIGIN}'z' WHERE name = 'whole'", defer=True)
                many = list(range(-400, 0))
                found = rsql.fetchone(
                    conn,
                    "SELECT count(*) FROM sessions WHERE origin = ? AND id NOT IN "
                    f"({rsql.placeholders(len(many))})",
                    ("z", *many),
                )
                assert found[0] == 1
                rsql.execute(conn, f"{SET_ORIGIN}'x' WHERE name = 'whole'", defer=True)
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


SAVER_MAX_ROUND_TRIPS = {"put": 1, "put_writes": 1, "get_tuple": 1}
"""Each AlpstoreSaver call of a steady thread, called directly (every put with a new message):
13, 7 and 7 before issue 45, 9, 5 and 6 after its first round, 2, 2 and 2 after its second,
1, 1 and 2 after its third. put: one pipeline behind a guard (the head as this process left
it); put_writes: one pipeline, nothing read first (a task with writes already or no thread
fails it whole, and the plain path runs); get_tuple: the BEGIN, the checkpoint, its writes
with their blobs, its values' blobs and the COMMIT in one query (raw.fetch_and_end)."""


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_alpstore_saver_round_trips_per_call(tmp_path: Path, kind: str) -> None:
    pytest.importorskip("langgraph.checkpoint.base", reason="langgraph is not installed")
    import asyncio

    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.base import empty_checkpoint

    from alpstore.integrations.langgraph import AlpstoreSaver

    seen: dict[str, list[int]] = {name: [] for name in SAVER_MAX_ROUND_TRIPS}
    with postgres_schema() as direct, proxied(direct) as (proxy, url):
        saver = AlpstoreSaver.open(tmp_path, url=url)

        async def call(name: str, *args: object) -> object:
            with proxy.counting() as n:
                if kind == "async":
                    result = await getattr(saver, f"a{name}")(*args)
                else:
                    result = getattr(saver, name)(*args)
            seen[name].append(n[0])
            return result

        async def turns() -> None:
            config: object = {"configurable": {"thread_id": "rt", "checkpoint_ns": ""}}
            messages: list[object] = []
            for turn in range(6):
                messages = [*messages, HumanMessage(content=f"q{turn}", id=f"u{turn}")]
                ck = empty_checkpoint()
                ck["channel_values"] = {"messages": list(messages)}
                ck["channel_versions"] = {"messages": turn + 1}
                config = await call(
                    "put", config, ck, {"source": "loop", "step": turn}, {"messages": turn + 1}
                )
                reply = AIMessage(content=f"a{turn}", id=f"a{turn}")
                await call("put_writes", config, [("messages", [reply])], f"task{turn}")
                await call("get_tuple", config)
                messages = [*messages, reply]

        try:
            asyncio.run(turns())
        finally:
            saver.close()
    steady = {name: max(counts[2:]) for name, counts in seen.items()}  # the thread exists
    for name, bound in SAVER_MAX_ROUND_TRIPS.items():
        assert steady[name] <= bound, (name, seen[name])


def test_put_writes_racing_another_writer_of_its_task_merges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process stored writes for the task before this put_writes' COMMIT (sent
    unread, or after a look that found the task free): the insert is a duplicate, rolled back
    whole, and the plain path merges (LangGraph's rule: the writes stored first are kept)."""
    pytest.importorskip("langgraph.checkpoint.base", reason="langgraph is not installed")
    from langgraph.checkpoint.base import empty_checkpoint

    from alpstore.integrations import _lgfast as lgfast
    from alpstore.integrations.langgraph import AlpstoreSaver

    with postgres_schema() as url:
        saver = AlpstoreSaver.open(tmp_path, url=url)
        try:
            config: object = {"configurable": {"thread_id": "race", "checkpoint_ns": ""}}
            ck = empty_checkpoint()
            ck["channel_values"] = {"count": 1}
            ck["channel_versions"] = {"count": 1}
            config = saver.put(config, ck, {"source": "loop", "step": 0}, {"count": 1})
            saver.put_writes(config, [("count", 2)], "task")  # the other process's, first
            # this process looks before the other's COMMIT: the task seems free
            free = "SELECT t.id, false FROM lg_threads t WHERE ? IS NOT NULL AND ? IS NOT NULL"
            monkeypatch.setattr(
                lgfast, "_TASK_FREE", free + " AND t.thread_id = ? AND t.checkpoint_ns = ?"
            )
            saver.put_writes(config, [("count", 3), ("other", 4)], "task")
            tup = saver.get_tuple(config)
        finally:
            saver.close()
    assert tup is not None
    assert [(task, channel, value) for task, channel, value in tup.pending_writes] == [
        ("task", "count", 2),
        ("task", "other", 4),
    ]


def test_a_put_that_travels_back_in_time_appends_on_the_plain_path(tmp_path: Path) -> None:
    """A put whose parent is an older checkpoint moves the head back first: the tip locked in
    the first round trip was the old head's, so its messages are appended as a branch, not
    grown in place (the in-place statement would refuse it: a NULL segment)."""
    pytest.importorskip("langgraph.checkpoint.base", reason="langgraph is not installed")
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.base import empty_checkpoint

    from alpstore.integrations.langgraph import AlpstoreSaver

    def checkpoint(texts: list[str], version: int) -> Any:
        ck = empty_checkpoint()
        ck["channel_values"] = {"messages": [HumanMessage(content=t, id=f"id-{t}") for t in texts]}
        ck["channel_versions"] = {"messages": version}
        return ck

    with postgres_schema() as url:
        saver = AlpstoreSaver.open(tmp_path, url=url)
        try:
            base: Any = {"configurable": {"thread_id": "tt", "checkpoint_ns": ""}}
            configs = [base]
            texts: list[str] = []
            for i in range(3):
                texts = [*texts, f"m{i}"]
                md: Any = {"source": "loop", "step": i}
                configs.append(saver.put(configs[-1], checkpoint(texts, i + 1), md, {}))
            # back to the first checkpoint (one message), then a different second message
            md = {"source": "loop", "step": 1}
            back = saver.put(configs[1], checkpoint(["m0", "other"], 9), md, {"messages": 9})
            tup = saver.get_tuple(back)
        finally:
            saver.close()
    assert tup is not None
    assert [m.content for m in tup.checkpoint["channel_values"]["messages"]] == ["m0", "other"]


def test_put_writes_sent_unread_on_a_thread_not_stored_yet_takes_the_plain_path(
    tmp_path: Path,
) -> None:
    """put_writes names its thread by id and namespace; a thread with no row yet is a NULL
    there: rolled back whole, then the plain path creates the thread and stores the writes."""
    pytest.importorskip("langgraph.checkpoint.base", reason="langgraph is not installed")
    from alpstore.integrations.langgraph import AlpstoreSaver

    with postgres_schema() as url:
        saver = AlpstoreSaver.open(tmp_path, url=url)
        try:
            config: Any = {
                "configurable": {"thread_id": "new", "checkpoint_ns": "", "checkpoint_id": "c1"}
            }
            saver.put_writes(config, [("count", 7)], "task")
            with saver.store.db.read() as conn:
                stored = conn.execute(
                    text(
                        "SELECT count(*) FROM lg_writes w JOIN lg_threads t ON t.id = w.thread_ref"
                        " WHERE t.thread_id = 'new'"
                    )
                ).scalar_one()
        finally:
            saver.close()
    assert stored == 1


def test_a_put_sent_unread_after_another_writer_moved_the_thread_reads_it_first(
    tmp_path: Path,
) -> None:
    """A put names the head this process's last put left; another writer of the thread's
    session (a pause, another process's put) makes its guard fail, and the put runs again
    reading and locking first: a paused session refuses it, another put's messages stay."""
    pytest.importorskip("langgraph.checkpoint.base", reason="langgraph is not installed")
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.base import empty_checkpoint

    from alpstore.integrations.langgraph import AlpstoreSaver

    def checkpoint(n: int) -> Any:
        ck = empty_checkpoint()
        ck["channel_values"] = {
            "messages": [HumanMessage(content=f"m{i}", id=f"m{i}") for i in range(n)]
        }
        ck["channel_versions"] = {"messages": n}
        return ck

    with postgres_schema() as url:
        saver = AlpstoreSaver.open(tmp_path, url=url)
        other = AlpstoreSaver.open(tmp_path / "other", url=url)
        try:
            config: Any = {"configurable": {"thread_id": "mv", "checkpoint_ns": ""}}
            for n in range(1, 4):
                config = saver.put(
                    config, checkpoint(n), {"source": "loop", "step": n}, {"messages": n}
                )
            config = saver.put(
                config, checkpoint(4), {"source": "loop", "step": 4}, {"messages": 4}
            )
            config = other.put(
                config, checkpoint(5), {"source": "loop", "step": 5}, {"messages": 5}
            )
            config = saver.put(
                config, checkpoint(6), {"source": "loop", "step": 6}, {"messages": 6}
            )
            latest = other.get_tuple(config)
            assert latest is not None
            got = [m.content for m in latest.checkpoint["channel_values"]["messages"]]
            assert got == [f"m{i}" for i in range(6)]
            with saver.store.db.atomic() as conn:
                conn.execute(text("UPDATE sessions SET status = 'paused'"))
            with pytest.raises(SessionStateError):
                saver.put(config, checkpoint(7), {"source": "loop", "step": 7}, {"messages": 7})
        finally:
            other.close()
            saver.close()


def test_a_read_ended_with_its_reads_refuses_a_later_statement_unsent(tmp_path: Path) -> None:
    """raw.fetch_and_end: BEGIN, the reads and the COMMIT in one round trip; a statement after
    it inside the same block would read another snapshot, so it raises ReadEnded with nothing
    sent, and the connection is clean for the next transaction."""
    with postgres_schema() as direct, proxied(direct) as (proxy, url):
        store = Store.open(tmp_path, url=url)
        try:
            with proxy.counting() as n, store.db.read() as conn:
                found = rsql.fetch_and_end(conn, [("SELECT 1", ()), ("SELECT 2", ())])
            assert found == [[(1,)], [(2,)]]
            assert n[0] == 1
            with proxy.counting() as n, pytest.raises(rsql.ReadEnded), store.db.read() as conn:
                assert rsql.fetch_and_end(conn, [("SELECT 1", ())]) is not None
                rsql.fetchone(conn, "SELECT 2")
            assert n[0] == 1  # the second statement was never sent
            with store.db.read() as conn:  # the connection is usable: a new transaction
                assert rsql.fetchone(conn, "SELECT 3")[0] == 3
            with store.db.atomic() as conn:  # a write transaction never ends so
                assert rsql.fetch_and_end(conn, [("SELECT 1", ())]) is None
        finally:
            store.close()


def test_a_read_ended_with_its_reads_runs_prepared_from_its_second_time(tmp_path: Path) -> None:
    """raw.fetch_and_end goes as the write path's pipeline: a statement this connection saw in
    an earlier read runs prepared (no parse, no plan: most of get_tuple's server time at 400
    turns), with the same rows; a statement that fails fails the read whole and leaves the
    connection clean, and nothing is prepared from it."""
    sql = "SELECT n, n * 2 FROM generate_series(1, ?) AS n WHERE n > ?"
    with postgres_schema() as url:
        store = Store.open(tmp_path, url=url)
        try:
            answers = []
            for _ in range(3):
                with store.db.read() as conn:
                    answers.append(rsql.fetch_and_end(conn, [(sql, (5, 2)), ("SELECT 7", ())]))
                    dbapi: Any = conn.connection.dbapi_connection
                    prepared = dict(dbapi._alp_prepared or {})
            assert answers[0] == answers[1] == answers[2] == [[(3, 6), (4, 8), (5, 10)], [(7,)]]
            assert any(key[0].startswith("SELECT n, n * 2") for key in prepared), prepared
            with pytest.raises(Exception, match="division by zero"), store.db.read() as conn:
                rsql.fetch_and_end(conn, [("SELECT 1 / ?", (0,))])
            with store.db.read() as conn:  # clean: a new transaction reads
                assert rsql.fetch_and_end(conn, [(sql, (5, 4))]) == [[(5, 10)]]
                assert not any(k[0].startswith("SELECT 1 /") for k in dbapi._alp_prepared or {})
        finally:
            store.close()


def test_get_tuple_in_one_wait_reads_again_when_it_needs_more(tmp_path: Path) -> None:
    """get_tuple of a thread this process holds: one wait, a large channel value's blob read
    with it; after another process moved the head (the kept messages no longer describe it)
    the one-wait read needs the archive's messages, so it is read again the usual way — the
    answer is the other process's head, never this process's stale one."""
    pytest.importorskip("langgraph.checkpoint.base", reason="langgraph is not installed")
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.base import empty_checkpoint

    from alpstore.integrations.langgraph import AlpstoreSaver

    big = {"notes": "x" * 4000}

    def checkpoint(n: int) -> Any:
        ck = empty_checkpoint()
        ck["channel_values"] = {
            "messages": [HumanMessage(content=f"m{i}", id=f"m{i}") for i in range(n)],
            "big": {**big, "n": n},
        }
        ck["channel_versions"] = {"messages": n, "big": n}
        return ck

    with postgres_schema() as direct, proxied(direct) as (proxy, url):
        saver = AlpstoreSaver.open(tmp_path, url=url)
        other = AlpstoreSaver.open(tmp_path / "other", url=url)
        try:
            config: Any = {"configurable": {"thread_id": "gt", "checkpoint_ns": ""}}
            versions = {"messages": 0, "big": 0}
            for n in range(1, 4):
                config = saver.put(config, checkpoint(n), {"source": "loop", "step": n}, versions)
            with proxy.counting() as waits:
                tup = saver.get_tuple(config)
            assert tup is not None and waits[0] == 1
            assert tup.checkpoint["channel_values"]["big"] == {**big, "n": 3}
            got = [m.content for m in tup.checkpoint["channel_values"]["messages"]]
            assert got == ["m0", "m1", "m2"]
            config = other.put(config, checkpoint(5), {"source": "loop", "step": 5}, versions)
            with proxy.counting() as waits:
                tup = saver.get_tuple(config)
            assert tup is not None
            assert waits[0] > 2  # the one-wait try, then the usual read and the messages
            got = [m.content for m in tup.checkpoint["channel_values"]["messages"]]
            assert got == [f"m{i}" for i in range(5)]
            assert tup.checkpoint["channel_values"]["big"] == {**big, "n": 5}
            with proxy.counting() as waits:
                assert saver.get_tuple(config) is not None
            assert waits[0] == 1  # held again
        finally:
            other.close()
            saver.close()
