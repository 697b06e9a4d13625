"""PostgreSQL across a network (issue 45): per-turn time and round trips through a loopback proxy
that delays each direction by 0, 0.5 and 2 ms (tests/postgres/netproxy.py), as a database in
the same host, the same zone, the next rack would.

Run: python benchmarks/bench_network.py [--native-turns 200] [--saver-turns 40] [--rounds 2]
     [--delays 0,0.5,2]  (or --prepared-ab TURNS / --stream-ab TURNS: native turns alternating
     between two settings)
     (PostgreSQL from $ALPSTORE_BENCH_POSTGRES_URL or $ALPSTORE_TEST_POSTGRES_URL). Also
     collected by pytest with --benchmark-only (skipped without a server).

In one run, for each one-way delay:

- native ``Session.commit_turn`` of 4-message turns (``_util.four_message_turns``), a fresh
  schema per run;
- the bench_langgraph tool loop (agent → tools → agent, every step checkpointed) on
  ``AlpstoreSaver`` and on LangGraph's ``PostgresSaver`` (``langgraph-checkpoint-postgres``,
  the bench extra), interleaved: ``--rounds`` rounds, the order of the two swapped each round.

Time per turn is the median over the turns of a run (after 5 warm-up turns), then the median
over rounds. Round trips per turn are the proxy's count (a client burst after a server reply,
or on a new connection, is one) divided by the turns: they do not depend on the delay, which
multiplies them (a round trip costs twice the one-way delay). The table goes to
benchmarks/results/network.md; the command line also refreshes the section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import bisect
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pytest
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.pool import NullPool

from alpstore.store import Store
from alpstore.testing.postgres import fresh_schema
from benchmarks._util import four_message_turns, write_results
from tests.postgres.delayline import DelayLine, delayed

TITLE = "PostgreSQL across a network: time and round trips per turn (issue 45)"
WARMUP = 5


def base_url() -> str | None:
    return os.environ.get("ALPSTORE_BENCH_POSTGRES_URL") or os.environ.get(
        "ALPSTORE_TEST_POSTGRES_URL"
    )


def timed(
    turns: int, step: Callable[[int], None], line: DelayLine, own: Owned | None = None
) -> tuple[float, float, float]:
    """(median ms per turn, round trips per turn, those of ``own`` — the turn's connections
    while it held them: the turn's waits, without a background thread's) of ``turns`` calls
    of ``step``, after warm-up."""
    for i in range(WARMUP):
        step(i)
    times: list[float] = []
    start_rt = line.round_trips
    began = time.perf_counter()
    for i in range(WARMUP, WARMUP + turns):
        start = time.perf_counter()
        step(i)
        times.append(time.perf_counter() - start)
    total = (line.round_trips - start_rt) / turns
    mine = total if own is None else own.count(line.log(), began) / turns
    return 1000 * statistics.median(times), total, mine


BACKGROUND = ("alpstore-packer", "alpstore-dictionary")
"""The archive's own threads (``SqlArchive._start_packer``, the dictionary trainer): their
round trips are not a turn's waits."""


PORT_KEY = "bench_network_port"
"""Where :class:`Owned` keeps a pooled connection's local port (its pool record's ``info``)."""


class Owned:
    """The connections an engine hands to the turn's threads (every thread but the archive's
    ``BACKGROUND`` ones: LangGraph's saves run on its executor's threads), while they hold
    them: (local port, checked out, checked in), the delay line's round trips told apart by
    them (a pooled connection serves a background thread too, at other times)."""

    def __init__(self, engine: Engine) -> None:
        self.held: list[tuple[int, float, float]] = []
        self._open: dict[int, tuple[int, float]] = {}
        event.listen(engine, "checkout", self._checkout)
        event.listen(engine, "checkin", self._checkin)

    def _checkout(self, dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        if threading.current_thread().name not in BACKGROUND:
            port = record.info.get(PORT_KEY)
            if port is None:  # once a connection, not in every timed turn (~4 µs)
                with socket.socket(fileno=os.dup(dbapi_conn.pgconn.socket)) as sock:
                    port = record.info[PORT_KEY] = sock.getsockname()[1]
            self._open[id(record)] = (port, time.perf_counter())

    def _checkin(self, _dbapi_conn: Any, record: Any) -> None:
        got = self._open.pop(id(record), None)
        if got is not None:
            self.held.append((*got, time.perf_counter()))

    def count(self, log: list[tuple[int, float]], since: float) -> int:
        """The round trips of ``log`` made on a connection while this thread held it."""
        spans: dict[int, list[tuple[float, float]]] = {}
        for port, a, b in self.held:
            spans.setdefault(port, []).append((a, b))
        for held in spans.values():
            held.sort()
        n = 0
        for port, at in log:
            held = spans.get(port, [])
            k = bisect.bisect_right(held, (at, float("inf"))) - 1
            n += at >= since and k >= 0 and held[k][1] >= at
        return n


def native(url: str, delay_s: float, turns: int) -> tuple[float, float, float]:
    msgs = list(four_message_turns(turns + WARMUP))
    with delayed(url, delay_s=delay_s) as (line, via), tempfile.TemporaryDirectory() as tmp:
        store = Store.open(Path(tmp), url=via)
        try:
            own = Owned(store.db.engine)
            session = store.create_session(name="bench")
            return timed(turns, lambda i: session.commit_turn(msgs[i]), line, own)
        finally:
            store.close()


def probe(url: str, delay_s: float, n: int = 300) -> tuple[float, float, float]:
    """What one round trip costs here, in ms (medians of ``n``): a ``SELECT 1`` through the
    delay line at ``delay_s``; one sent directly after as long an idle wait (an idle machine
    wakes slower: 0.04 ms back to back, ~0.2 after 4 ms idle); a direct durable one-row commit
    (the server's WAL flush, which every turn waits for)."""
    import psycopg

    from benchmarks.bench_postgres import conninfo

    def median_of(conn: Any, sql: str, idle: float) -> float:
        took = []
        for _ in range(n):
            if idle:
                time.sleep(idle)
            start = time.perf_counter()
            conn.execute(sql)
            took.append(time.perf_counter() - start)
        return 1000 * statistics.median(took)

    with (
        delayed(url, delay_s=delay_s) as (_line, via),
        psycopg.connect(conninfo(via), autocommit=True) as conn,
    ):
        through = median_of(conn, "SELECT 1", 0.0)
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        direct = median_of(conn, "SELECT 1", 2 * delay_s)
        conn.execute("CREATE TABLE IF NOT EXISTS probe_commit (x int)")
        commit = median_of(conn, "INSERT INTO probe_commit VALUES (1)", 0.0)
    return through, direct, commit


def prepared_ab(
    url: str, delay_s: float, turns: int, *, stream: bool = False
) -> tuple[float, float, float, float]:
    """Native turns with the pipeline's statements prepared (the default) and without
    (``alpstore_prepared=0``), two archives through one proxy, alternating turn by turn so
    both see the same load: (median ms a turn, median CPU ms a turn) of each. ``stream``:
    instead, both prepared, the one-wait turn's head streamed at its ``BEGIN`` (the default)
    against all of it sent at the COMMIT (``pgconn.BoundedConnection.alp_stream`` off)."""
    from alpstore.db import pgconn

    msgs = list(four_message_turns(turns + WARMUP))
    variants = (("on", ""), ("off", "" if stream else "alpstore_prepared=0"))
    streaming_was = pgconn.BoundedConnection.alp_stream
    with delayed(url, delay_s=delay_s) as (_line, via), ExitStack() as stack:
        stack.callback(setattr, pgconn.BoundedConnection, "alp_stream", streaming_was)
        sessions = []
        for name, query in variants:
            tmp = stack.enter_context(tempfile.TemporaryDirectory())
            sep = "&" if "?" in via else "?"
            store = Store.open(Path(tmp), url=f"{via}{sep}{query}" if query else via)
            stack.callback(store.close)
            sessions.append(store.create_session(name=f"bench-{name}"))
        took: list[list[float]] = [[], []]
        cpu: list[list[float]] = [[], []]
        for i in range(turns + WARMUP):
            for which in (0, 1) if i % 2 else (1, 0):
                if stream:
                    pgconn.BoundedConnection.alp_stream = which == 0
                start, start_cpu = time.perf_counter(), time.process_time()
                sessions[which].commit_turn(msgs[i])
                if i >= WARMUP:
                    took[which].append(time.perf_counter() - start)
                    cpu[which].append(time.process_time() - start_cpu)
    on, off = (1000 * statistics.median(t) for t in took)
    on_cpu, off_cpu = (1000 * statistics.median(c) for c in cpu)
    return on, on_cpu, off, off_cpu


def saver(kind: str, url: str, delay_s: float, turns: int) -> tuple[float, float, float]:
    from langgraph.graph import MessagesState

    from benchmarks import bench_langgraph as lg
    from benchmarks.bench_postgres import conninfo

    inputs, replies, _ = lg.conversation(turns + WARMUP)
    with ExitStack() as stack:
        line, via = stack.enter_context(delayed(url, delay_s=delay_s))
        the_saver: Any
        own: Owned | None = None
        if kind == "postgres":
            from langgraph.checkpoint.postgres import PostgresSaver

            the_saver = stack.enter_context(PostgresSaver.from_conn_string(conninfo(via)))
            the_saver.setup()
        else:
            from alpstore.integrations.langgraph import AlpstoreSaver

            root = stack.enter_context(tempfile.TemporaryDirectory(prefix="alpstore-bench-"))
            the_saver = stack.enter_context(AlpstoreSaver.open(root, url=via))
            own = Owned(the_saver.store.db.engine)
        script: deque[Any] = deque()
        graph = lg.build(the_saver, MessagesState, script)
        config = {"configurable": {"thread_id": "bench"}}

        def step(i: int) -> None:
            script.extend(replies[i])
            graph.invoke({"messages": inputs[i]}, config)

        return timed(turns, step, line, own)


def trips(own: float, total: float) -> str:
    """Round trips a turn: the turn's own, and with a background thread's when those add."""
    return f"{own:.1f}" if round(total, 1) == round(own, 1) else f"{own:.1f} ({total:.1f})"


def run_all(native_turns: int, saver_turns: int, rounds: int, delays: list[float]) -> str:
    base = base_url()
    if base is None:
        raise SystemExit("no PostgreSQL: set ALPSTORE_BENCH_POSTGRES_URL")
    admin = create_engine(base, poolclass=NullPool)
    rows: list[str] = []
    probes: list[str] = []
    for delay_ms in delays:
        delay_s = delay_ms / 1000
        with fresh_schema(admin, base, "bn_") as url:
            through, direct, commit = probe(url, delay_s)
        probes.append(
            f"| {delay_ms:g} | {through:.3f} | {direct:.3f} |"
            f" {through - direct - 2 * delay_ms:+.3f} | {commit:.3f} |"
        )
        print(probes[-1], flush=True)
        results: dict[str, list[tuple[float, float, float]]] = {"native": [], "alp": [], "pg": []}
        for r in range(rounds):
            if native_turns:
                with fresh_schema(admin, base, "bn_") as url:
                    results["native"].append(native(url, delay_s, native_turns))
            order = ["alp", "pg"] if r % 2 == 0 else ["pg", "alp"]
            if saver_turns:
                for kind in order:
                    with fresh_schema(admin, base, "bn_") as url:
                        which = "postgres" if kind == "pg" else "alpstore"
                        results[kind].append(saver(which, url, delay_s, saver_turns))
        med = {
            k: tuple(statistics.median(x[i] for x in v) for i in range(3))
            for k, v in results.items()
            if v
        }
        row = (
            f"| {delay_ms:g} | {med['native'][0]:.2f} |"
            f" {trips(med['native'][2], med['native'][1])} |"
            if native_turns
            else f"| {delay_ms:g} | - | - |"  # --native-turns 0: the saver rows only
        )
        if saver_turns:
            ratio = med["alp"][0] / med["pg"][0]
            row += (
                f" {med['alp'][0]:.1f} | {trips(med['alp'][2], med['alp'][1])} |"
                f" {med['pg'][0]:.1f} | {med['pg'][1]:.1f} | {ratio:.2f}× |"
            )
        rows.append(row)
        print(row, flush=True)
    head = (
        "| one-way delay (ms) | native `commit_turn` ms/turn | its round trips/turn |"
        " `AlpstoreSaver` ms/turn | its round trips/turn | `PostgresSaver` ms/turn |"
        " its round trips/turn | alpstore ÷ PostgresSaver |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    if not saver_turns:
        head = "\n".join(line.rsplit("|", 6)[0] + "|" for line in head.splitlines())
    return (
        f"{head}\n"
        + "\n".join(rows)
        + f"\n\n{native_turns} native 4-message turns, {saver_turns} tool-loop turns, "
        f"{rounds} rounds, medians (5 warm-up turns each). Round trips: the turn's own "
        "connections' (in brackets with a background thread's — the dictionary trainer, the "
        "packer — when those add; PostgresSaver has none).\n\n"
        "| one-way delay (ms) | `SELECT 1` through the delay line | directly, after as long "
        "idle | added beyond 2 × the delay | direct durable one-row commit |\n"
        "|---:|---:|---:|---:|---:|\n" + "\n".join(probes) + "\n\nms, medians of 300.\n"
    )


def test_network_latency(benchmark: Any) -> None:
    if base_url() is None:
        pytest.skip("no PostgreSQL server (ALPSTORE_BENCH_POSTGRES_URL)")
    benchmark.pedantic(lambda: run_all(30, 0, 1, [0.0, 0.5]), rounds=1, iterations=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--native-turns", type=int, default=200)
    parser.add_argument("--saver-turns", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--delays", default="0,0.5,2")
    parser.add_argument(
        "--prepared-ab",
        type=int,
        default=0,
        metavar="TURNS",
        help="only compare native turns with and without prepared statements, alternating",
    )
    parser.add_argument(
        "--stream-ab",
        type=int,
        default=0,
        metavar="TURNS",
        help="only compare native turns with their head streamed at BEGIN and without",
    )
    args = parser.parse_args()
    delays = [float(d) for d in args.delays.split(",")]
    if args.prepared_ab or args.stream_ab:
        base = base_url()
        if base is None:
            raise SystemExit("no PostgreSQL: set ALPSTORE_BENCH_POSTGRES_URL")
        admin = create_engine(base, poolclass=NullPool)
        on_name, off_name = ("streamed", "at COMMIT") if args.stream_ab else ("prepared", "bound")
        print(
            f"| one-way delay (ms) | {on_name} ms/turn | CPU | {off_name} ms/turn | CPU | ratio |"
        )
        print("|---:|---:|---:|---:|---:|---:|")
        for delay_ms in delays:
            with fresh_schema(admin, base, "bn_") as url:
                on, on_cpu, off, off_cpu = prepared_ab(
                    url,
                    delay_ms / 1000,
                    args.stream_ab or args.prepared_ab,
                    stream=bool(args.stream_ab),
                )
            print(
                f"| {delay_ms:g} | {on:.2f} | {on_cpu:.2f} | {off:.2f} | {off_cpu:.2f} |"
                f" {on / off:.2f}× |",
                flush=True,
            )
        return
    table = run_all(args.native_turns, args.saver_turns, args.rounds, delays)
    text = f"## {TITLE}\n\n{table}"
    write_results(Path(__file__).parent / "results" / "network.md", text)
    print(text)


if __name__ == "__main__":
    main()
