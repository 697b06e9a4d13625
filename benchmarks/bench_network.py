"""PostgreSQL across a network (issue 45): per-turn time and round trips through a loopback proxy
that delays each direction by 0, 0.5 and 2 ms (tests/postgres/netproxy.py), as a database in
the same host, the same zone, the next rack would.

Run: python benchmarks/bench_network.py [--native-turns 200] [--saver-turns 40] [--rounds 2]
     [--delays 0,0.5,2]
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
import os
import statistics
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pytest
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from alpstore.store import Store
from alpstore.testing.postgres import fresh_schema
from benchmarks._util import four_message_turns, write_results
from tests.postgres.netproxy import proxied

TITLE = "PostgreSQL across a network: time and round trips per turn (issue 45)"
WARMUP = 5


def base_url() -> str | None:
    return os.environ.get("ALPSTORE_BENCH_POSTGRES_URL") or os.environ.get(
        "ALPSTORE_TEST_POSTGRES_URL"
    )


def timed(turns: int, step: Callable[[int], None], proxy: Any) -> tuple[float, float]:
    """(median ms per turn, round trips per turn) of ``turns`` calls of ``step``, after warm-up."""
    for i in range(WARMUP):
        step(i)
    times: list[float] = []
    start_rt = proxy.round_trips
    for i in range(WARMUP, WARMUP + turns):
        start = time.perf_counter()
        step(i)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times), (proxy.round_trips - start_rt) / turns


def native(url: str, delay_s: float, turns: int) -> tuple[float, float]:
    msgs = list(four_message_turns(turns + WARMUP))
    with proxied(url, delay_s=delay_s) as (proxy, via), tempfile.TemporaryDirectory() as tmp:
        store = Store.open(Path(tmp), url=via)
        try:
            session = store.create_session(name="bench")
            return timed(turns, lambda i: session.commit_turn(msgs[i]), proxy)
        finally:
            store.close()


def prepared_ab(url: str, delay_s: float, turns: int) -> tuple[float, float, float, float]:
    """Native turns with the pipeline's statements prepared (the default) and without
    (``alpstore_prepared=0``), two archives through one proxy, alternating turn by turn so
    both see the same load: (median ms a turn, median CPU ms a turn) of each."""
    msgs = list(four_message_turns(turns + WARMUP))
    with proxied(url, delay_s=delay_s) as (_proxy, via), ExitStack() as stack:
        sessions = []
        for name, query in (("on", ""), ("off", "alpstore_prepared=0")):
            tmp = stack.enter_context(tempfile.TemporaryDirectory())
            sep = "&" if "?" in via else "?"
            store = Store.open(Path(tmp), url=f"{via}{sep}{query}" if query else via)
            stack.callback(store.close)
            sessions.append(store.create_session(name=f"bench-{name}"))
        took: list[list[float]] = [[], []]
        cpu: list[list[float]] = [[], []]
        for i in range(turns + WARMUP):
            for which in (0, 1) if i % 2 else (1, 0):
                start, start_cpu = time.perf_counter(), time.process_time()
                sessions[which].commit_turn(msgs[i])
                if i >= WARMUP:
                    took[which].append(time.perf_counter() - start)
                    cpu[which].append(time.process_time() - start_cpu)
    on, off = (1000 * statistics.median(t) for t in took)
    on_cpu, off_cpu = (1000 * statistics.median(c) for c in cpu)
    return on, on_cpu, off, off_cpu


def saver(kind: str, url: str, delay_s: float, turns: int) -> tuple[float, float]:
    from langgraph.graph import MessagesState

    from benchmarks import bench_langgraph as lg
    from benchmarks.bench_postgres import conninfo

    inputs, replies, _ = lg.conversation(turns + WARMUP)
    with ExitStack() as stack:
        proxy, via = stack.enter_context(proxied(url, delay_s=delay_s))
        the_saver: Any
        if kind == "postgres":
            from langgraph.checkpoint.postgres import PostgresSaver

            the_saver = stack.enter_context(PostgresSaver.from_conn_string(conninfo(via)))
            the_saver.setup()
        else:
            from alpstore.integrations.langgraph import AlpstoreSaver

            root = stack.enter_context(tempfile.TemporaryDirectory(prefix="alpstore-bench-"))
            the_saver = stack.enter_context(AlpstoreSaver.open(root, url=via))
        script: deque[Any] = deque()
        graph = lg.build(the_saver, MessagesState, script)
        config = {"configurable": {"thread_id": "bench"}}

        def step(i: int) -> None:
            script.extend(replies[i])
            graph.invoke({"messages": inputs[i]}, config)

        return timed(turns, step, proxy)


def run_all(native_turns: int, saver_turns: int, rounds: int, delays: list[float]) -> str:
    base = base_url()
    if base is None:
        raise SystemExit("no PostgreSQL: set ALPSTORE_BENCH_POSTGRES_URL")
    admin = create_engine(base, poolclass=NullPool)
    rows: list[str] = []
    for delay_ms in delays:
        delay_s = delay_ms / 1000
        results: dict[str, list[tuple[float, float]]] = {"native": [], "alp": [], "pg": []}
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
            k: (statistics.median(t for t, _ in v), statistics.median(n for _, n in v))
            for k, v in results.items()
            if v
        }
        row = (
            f"| {delay_ms:g} | {med['native'][0]:.2f} | {med['native'][1]:.1f} |"
            if native_turns
            else f"| {delay_ms:g} | - | - |"  # --native-turns 0: the saver rows only
        )
        if saver_turns:
            ratio = med["alp"][0] / med["pg"][0]
            row += (
                f" {med['alp'][0]:.1f} | {med['alp'][1]:.1f} | {med['pg'][0]:.1f} |"
                f" {med['pg'][1]:.1f} | {ratio:.2f}× |"
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
        f"{rounds} rounds, medians (5 warm-up turns each).\n"
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
    args = parser.parse_args()
    delays = [float(d) for d in args.delays.split(",")]
    if args.prepared_ab:
        base = base_url()
        if base is None:
            raise SystemExit("no PostgreSQL: set ALPSTORE_BENCH_POSTGRES_URL")
        admin = create_engine(base, poolclass=NullPool)
        print("| one-way delay (ms) | prepared ms/turn | CPU | bound ms/turn | CPU | ratio |")
        print("|---:|---:|---:|---:|---:|---:|")
        for delay_ms in delays:
            with fresh_schema(admin, base, "bn_") as url:
                on, on_cpu, off, off_cpu = prepared_ab(url, delay_ms / 1000, args.prepared_ab)
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
