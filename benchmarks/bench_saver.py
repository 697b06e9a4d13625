"""AlpstoreSaver's own cost per turn over LangGraph's own work, SQLite and PostgreSQL (issue 16).

Run: ``python benchmarks/bench_saver.py [--turns 1000] [--pg-turns 400]`` (PostgreSQL from
$ALPSTORE_BENCH_POSTGRES_URL or $ALPSTORE_TEST_POSTGRES_URL; its rows are skipped, with the
reason, without one). Also collected by pytest with ``--benchmark-only``
($ALPSTORE_BENCH_SAVER_TURNS, $ALPSTORE_BENCH_SAVER_PG_TURNS). Writes
``benchmarks/results/saver.md``.

The conversation and graph are bench_langgraph's (agent ⇄ tools, every step checkpointed: three
checkpoints and two pending-write calls a turn). Two graphs run in lockstep in one process: the
*floor* (LangGraph's ``InMemorySaver`` with an identity serializer: LangGraph's own work, no
storage) and the same graph on ``AlpstoreSaver``; each turn runs on both, in alternating order,
so both see the same machine load. Own cost at turn N = the median, over turns N-49 … N, of
(AlpstoreSaver's turn − the floor's turn).

Part of the own cost is the copy every read hands out (``get_tuple`` returns new message objects,
so changing them never changes what the saver holds — LangGraph's own savers behave so): it is
O(messages), and it is measured on its own at each mark ("copy on read").

Cold ``get_state`` at the last mark: a new saver on the archive (no in-process state) loads the
latest state; against LangGraph's ``SqliteSaver`` holding the same messages in its latest
checkpoint, opened fresh likewise. Medians of 5. ``--cold-only`` runs just that part (the
archive built by AlpstoreSaver alone) and prints one line.
"""

from __future__ import annotations

import argparse
import gc
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

from benchmarks.bench_langgraph import build, conversation  # noqa: E402

RESULTS = HERE / "results" / "saver.md"
WINDOW = 50
COLD_REPEAT = 5
URL_ENV = ("ALPSTORE_BENCH_POSTGRES_URL", "ALPSTORE_TEST_POSTGRES_URL")


class IdentitySerde:
    """A LangGraph serializer that stores the object itself (the floor: no storage work)."""

    def dumps_typed(self, obj: Any) -> tuple[str, Any]:
        return "identity", obj

    def loads_typed(self, data: tuple[str, Any]) -> Any:
        return data[1]


def marks_for(turns: int) -> list[int]:
    return [m for m in (100, 400, 1000, 2000) if m < turns] + [turns]


@contextmanager
def alpstore_saver(url: str | None) -> Iterator[tuple[Any, Path]]:
    from alpstore.integrations.langgraph import AlpstoreSaver

    with tempfile.TemporaryDirectory() as tmp:
        if url is None:
            saver = AlpstoreSaver.open(Path(tmp))
            try:
                yield saver, Path(tmp)
            finally:
                saver.close()
            return
        from sqlalchemy import create_engine

        from alpstore.testing.postgres import fresh_schema

        admin = create_engine(url)
        try:
            with fresh_schema(admin, url, "bench_saver_") as schema_url:
                saver = AlpstoreSaver.open(Path(tmp), url=schema_url)
                try:
                    yield saver, Path(tmp)
                finally:
                    saver.close()
        finally:
            admin.dispose()


def copy_cost_ms(saver: Any) -> tuple[float, float]:
    """What one read's fresh copy of the head's messages costs now, in CPU time: the saver's
    own ``FrozenMessages.thaw`` of the head it keeps, as ``get_tuple`` runs it, and freeing
    those objects once nobody holds them (medians of 3).
    """
    from alpstore.gcpause import no_gc_pause

    kept = next(iter(saver._threads.values())).private
    assert kept is not None, "the saver keeps no head for the thread"
    made, freed = [], []
    for _ in range(3):
        with no_gc_pause():
            start = time.thread_time()
            out = kept.thaw()
            made.append(time.thread_time() - start)
            start = time.thread_time()
            del out
            freed.append(time.thread_time() - start)
    return 1000 * statistics.median(made), 1000 * statistics.median(freed)


class GCTimer:
    """Wall time the cyclic garbage collector runs, per graph (whichever is running)."""

    def __init__(self) -> None:
        self.which = 0
        self.spent = [0.0, 0.0]
        self._start = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.spent[self.which] += time.perf_counter() - self._start

    def take(self) -> list[float]:
        spent, self.spent = self.spent, [0.0, 0.0]
        return spent

    def close(self) -> None:
        gc.callbacks.remove(self._callback)


class CallTimer:
    """CPU time spent inside the saver's methods (put, put_writes, get_tuple), per turn: the
    calling thread's CPU clock, so LangGraph's background threads add up and time spent
    waiting (a lock, the disk) counts nowhere.
    """

    def __init__(self, saver: Any) -> None:
        self.spent = 0.0
        self.lock = threading.Lock()
        for name in ("put", "put_writes", "get_tuple"):
            setattr(saver, name, self._timed(getattr(saver, name)))

    def _timed(self, fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            start = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.thread_time() - start
                with self.lock:
                    self.spent += spent

        return call

    def take(self) -> float:
        spent, self.spent = self.spent, 0.0
        return spent


def lockstep(url: str | None, turns: int, data: Any) -> dict[str, Any]:
    """Floor and AlpstoreSaver turn by turn; own cost and copy cost at each mark."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import MessagesState

    inputs, replies, _raw = data
    marks = marks_for(turns)
    out: dict[str, Any] = {"marks": {}}
    with alpstore_saver(url) as (saver, root):
        scripts: list[deque[Any]] = [deque(), deque()]
        graphs = [
            build(InMemorySaver(serde=IdentitySerde()), MessagesState, scripts[0]),
            build(saver, MessagesState, scripts[1]),
        ]
        config = {"configurable": {"thread_id": "bench"}}
        timer = CallTimer(saver)
        collector = GCTimer()
        collected: list[list[float]] = []
        inside: list[float] = []
        floor: list[float] = []
        ours: list[float] = []
        floor_cpu: list[float] = []
        ours_cpu: list[float] = []
        for turn in range(1, turns + 1):
            took = [0.0, 0.0]
            cpu = [0.0, 0.0]
            for which in (0, 1) if turn % 2 else (1, 0):
                scripts[which].extend(replies[turn - 1])
                collector.which = which
                start, start_cpu = time.perf_counter(), time.process_time()
                graphs[which].invoke({"messages": inputs[turn - 1]}, config)
                took[which] = time.perf_counter() - start
                cpu[which] = time.process_time() - start_cpu
            inside.append(timer.take())
            collected.append(collector.take())
            floor.append(took[0])
            ours.append(took[1])
            floor_cpu.append(cpu[0])
            ours_cpu.append(cpu[1])
            if turn in marks:
                lo = max(0, turn - WINDOW)
                own = [a - f for a, f in zip(ours[lo:turn], floor[lo:turn], strict=True)]
                own_cpu = [
                    a - f for a, f in zip(ours_cpu[lo:turn], floor_cpu[lo:turn], strict=True)
                ]
                copy_ms, free_ms = copy_cost_ms(saver)
                inside_ms = 1000 * statistics.median(inside[lo:turn])
                out["marks"][turn] = {
                    "gc_floor_ms": 1000 * statistics.median(c[0] for c in collected[lo:turn]),
                    "gc_ours_ms": 1000 * statistics.median(c[1] for c in collected[lo:turn]),
                    "gc_floor_mean_ms": 1000 * statistics.fmean(c[0] for c in collected[lo:turn]),
                    "gc_ours_mean_ms": 1000 * statistics.fmean(c[1] for c in collected[lo:turn]),
                    "free_ms": free_ms,
                    "inside_ms": inside_ms,
                    "storage_ms": inside_ms - copy_ms,
                    "floor_ms": 1000 * statistics.median(floor[lo:turn]),
                    "ours_ms": 1000 * statistics.median(ours[lo:turn]),
                    "own_ms": 1000 * statistics.median(own),
                    "own_cpu_ms": 1000 * statistics.median(own_cpu),
                    "copy_ms": copy_ms,
                    "messages": len(graphs[1].get_state(config).values["messages"]),
                }
                timer.take()
        collector.close()
        if url is None:
            out.update(cold_reads(root, inputs, replies, turns))
    return out


def cold_reads(root: Path, inputs: Any, replies: Any, turns: int) -> dict[str, Any]:
    """Cold ``get_state``: a new AlpstoreSaver on the archive, against LangGraph's SqliteSaver
    holding the same messages in its latest checkpoint (written by ``update_state``, read on a
    new connection); the two alternate, so both see the same machine load. Wall and process
    CPU time, medians of ``COLD_REPEAT``.
    """
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import MessagesState

    from alpstore.integrations.langgraph import AlpstoreSaver

    messages = [m for i, r in zip(inputs[:turns], replies[:turns], strict=True) for m in (*i, *r)]
    config = {"configurable": {"thread_id": "bench"}}
    timings: dict[str, list[tuple[float, float]]] = {"alpstore": [], "sqlite": []}
    counts: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lg.sqlite"
        conn = sqlite3.connect(path, check_same_thread=False)
        saver = SqliteSaver(conn)
        saver.setup()
        build(saver, MessagesState, deque()).update_state(config, {"messages": messages})
        conn.close()
        for _ in range(COLD_REPEAT):
            for name in ("alpstore", "sqlite"):
                if name == "alpstore":
                    fresh: Any = AlpstoreSaver.open(root)
                    closer = fresh.close
                else:
                    conn = sqlite3.connect(path, check_same_thread=False)
                    fresh, closer = SqliteSaver(conn), conn.close
                try:
                    graph = build(fresh, MessagesState, deque())
                    start, start_cpu = time.perf_counter(), time.process_time()
                    state = graph.get_state(config)
                    timings[name].append(
                        (time.perf_counter() - start, time.process_time() - start_cpu)
                    )
                    counts[name] = len(state.values["messages"])
                finally:
                    closer()
    assert counts["alpstore"] == counts["sqlite"] == len(messages), counts

    def median(name: str, which: int) -> float:
        return 1000 * statistics.median(t[which] for t in timings[name])

    return {
        "cold_ms": median("alpstore", 0),
        "cold_cpu_ms": median("alpstore", 1),
        "sqlite_cold_ms": median("sqlite", 0),
        "sqlite_cold_cpu_ms": median("sqlite", 1),
        "cold_messages": counts["alpstore"],
    }


def write_thread(saver: Any, inputs: Any, replies: Any, turns: int) -> None:
    """The first ``turns`` turns of ``conversation`` run through a graph on ``saver`` alone
    (no floor), thread ``bench``.
    """
    from langgraph.graph import MessagesState

    script: deque[Any] = deque()
    graph = build(saver, MessagesState, script)
    config = {"configurable": {"thread_id": "bench"}}
    for turn in range(turns):
        script.extend(replies[turn])
        graph.invoke({"messages": inputs[turn]}, config)


def cold_only(turns: int) -> str:
    """Only the cold ``get_state`` comparison (``--cold-only``): the archive built by
    AlpstoreSaver alone (``write_thread``), then ``cold_reads``; one line, nothing written.
    """
    load = os.getloadavg()[0]
    inputs, replies, _raw = conversation(turns)
    with alpstore_saver(None) as (saver, root):
        write_thread(saver, inputs, replies, turns)
        r = cold_reads(root, inputs, replies, turns)
    return (
        f"cold get_state at {turns:,} turns ({r['cold_messages']:,} messages), median of "
        f"{COLD_REPEAT}: AlpstoreSaver {r['cold_ms']:.1f} ms wall, {r['cold_cpu_ms']:.1f} ms CPU; "
        f"SqliteSaver {r['sqlite_cold_ms']:.1f} ms wall, {r['sqlite_cold_cpu_ms']:.1f} ms CPU; "
        f"ratio {r['cold_ms'] / r['sqlite_cold_ms']:.2f} wall, "
        f"{r['cold_cpu_ms'] / r['sqlite_cold_cpu_ms']:.2f} CPU (goal ≤ 0.5); 1-minute load "
        f"average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    )


def goals(results: dict[str, Any]) -> str:
    """One line: the issue's goals against this run (met / not met)."""

    def verdict(ok: bool) -> str:
        return "met" if ok else "**not met**"

    sq = results["SQLite"]["marks"]
    last, first = sq[max(sq)], sq[min(sq)]
    flat = last["own_ms"] / first["own_ms"]
    out = (
        f"Goals (issue 16): own cost at {max(sq):,} turns on SQLite ≤ 3 ms — "
        f"{last['own_ms']:.1f} ms wall, {last['own_cpu_ms']:.1f} ms CPU "
        f"(inside the saver: storage work {last['storage_ms']:.1f} ms, the read's fresh copy "
        f"{last['copy_ms']:.1f} ms), {verdict(last['own_cpu_ms'] <= 3)}; last ÷ first ≤ 1.15 — "
        f"{flat:.2f}, "
        f"{verdict(flat <= 1.15)}"
    )
    pg = results.get("PostgreSQL", {}).get("marks")
    if pg:
        top = pg[max(pg)]
        out += (
            f"; PostgreSQL at {max(pg):,} turns ≤ 6 ms — {top['own_ms']:.1f} ms wall, "
            f"{top['own_cpu_ms']:.1f} ms CPU, {verdict(top['own_cpu_ms'] <= 6)}"
        )
    r = results["SQLite"]
    cold = r["cold_ms"] / r["sqlite_cold_ms"]
    cold_cpu = r["cold_cpu_ms"] / r["sqlite_cold_cpu_ms"]
    return out + (
        f"; cold `get_state` ≤ 0.5 of SqliteSaver's — {cold:.2f} wall ({cold_cpu:.2f} CPU), "
        f"{verdict(cold <= 0.5)}."
    )


NOTES = [
    "Reading it:",
    "",
    "- The write path is O(delta): a turn encodes and stores only its new messages, in one "
    "transaction per LangGraph call; `put` finds the new tail by comparing the checkpoint's "
    "list with the lists it last stored or handed out (list equality, a C loop at pointer "
    "speed), not by walking the messages in Python (tests/integrations/"
    "test_langgraph_saver_async.py checks both). What the storage work still costs is per "
    "call, about thirteen calls a turn here: SQLAlchemy's connection checkout, BEGIN, COMMIT "
    "and check-in, encoding and packing the checkpoint, the event-log line. It also grows "
    "with the thread, because the collections and the freeing of earlier reads' copies that "
    "the copies cause land partly inside the saver's calls.",
    "- Every `get_tuple` hands out new message objects (a message changed in place by the "
    "caller never changes what the saver or a later read sees — LangGraph's own savers behave "
    "so): O(messages), thawed from marshalled states at C speed. LangGraph then works on "
    "objects that are new, frees them, and the garbage collector runs because of them (the "
    "collector column; the floor shares its objects through its identity serializer and "
    "allocates almost nothing). That is why the own cost is not flat, and why 3 ms a turn at "
    "1,000 turns (6,001 messages) is out of reach while reads hand out fresh objects: making "
    "one read's copy alone takes longer.",
    "- Wall time on a shared 2-core machine includes waiting for the CPU; the CPU columns are "
    "the steadier figures.",
    "- Cold `get_state`: the new saver rebuilds the head in bulk — one range scan without the "
    "digests, the blobs decoded per codec and dictionary in C-level loops "
    "(`alpstore/archive/batch.py`; a delta's base taken from the same read), one orjson parse, "
    "messages made per document shape (`_lgbuild.doc_messages`) — with the cyclic collector "
    "held off meanwhile. SqliteSaver rebuilds its messages through pydantic validation with the "
    "collector on, so a full collection (about 130–160 ms in this process) lands in some of its "
    "reads and not others: its median moves with where they fall, and so does the ratio "
    "(`--cold-only` repeats just this part).",
]


def postgres_url() -> str | None:
    return next((os.environ[k] for k in URL_ENV if os.environ.get(k)), None)


def table(name: str, result: dict[str, Any]) -> list[str]:
    marks = sorted(result["marks"])
    first = result["marks"][marks[0]]["own_ms"]
    lines = []
    for m in marks:
        r = result["marks"][m]
        lines.append(
            f"| {name} | {m:,} | {r['messages']:,} | {r['floor_ms']:.1f} | {r['ours_ms']:.1f} | "
            f"**{r['own_ms']:.2f}** | {r['own_cpu_ms']:.2f} | {r['inside_ms']:.2f} | "
            f"{r['storage_ms']:.2f} | {r['copy_ms']:.2f} | {r['free_ms']:.2f} | "
            f"{r['gc_ours_mean_ms']:.1f} / {r['gc_floor_mean_ms']:.1f} | "
            f"{r['own_ms'] / first:.2f} |"
        )
    return lines


def run_all(turns: int, pg_turns: int) -> str:
    load = os.getloadavg()[0]
    data = conversation(max(turns, pg_turns))
    results = {"SQLite": lockstep(None, turns, data)}
    url = postgres_url()
    skipped = None
    if url and pg_turns:
        try:
            results["PostgreSQL"] = lockstep(url, pg_turns, data)
        except Exception as err:  # no server: say so in the table
            skipped = f"PostgreSQL rows not run: {str(err).splitlines()[0]}"
    elif not url:
        skipped = f"PostgreSQL rows not run: set {URL_ENV[0]} (or {URL_ENV[1]})"
    lines = [
        "# AlpstoreSaver's own cost per turn (issue 16)",
        "",
        "Command: `python benchmarks/bench_saver.py --turns "
        f"{turns} --pg-turns {pg_turns}` (1-minute load average {load:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end, on {os.cpu_count()} shared cores: absolute "
        "times are noisy, the in-process differences less so).",
        "",
        "bench_langgraph's conversation and graph (every step checkpointed: about seven "
        "checkpoints and six pending-write calls a turn with its tool calls), run turn by turn in "
        "lockstep with the floor: LangGraph's `InMemorySaver` with an identity serializer "
        f"(LangGraph's own work, no storage). Per mark, medians over the last {WINDOW} turns: "
        "floor and AlpstoreSaver turn times; own cost = AlpstoreSaver − floor (median of the "
        "per-turn differences), in wall time and in this process's CPU time (all threads; less "
        "sensitive to other jobs on the machine); CPU inside the saver's calls = the CPU time "
        "of every put, put_writes and get_tuple of the turn (each thread's own clock), split "
        "into the read's fresh copy (the saver's own `FrozenMessages.thaw` of the head, what "
        "`get_tuple` runs to hand out new objects, timed on its own) and the rest, the storage "
        "work; freeing one read's copy (CPU, timed on its own: it happens wherever the last "
        "reference goes, often inside a later put, when the saver retires a list it held); the "
        "cyclic garbage collector's time per turn while each graph runs (mean: collections are "
        "sporadic). What the own cost holds beyond the saver's calls is LangGraph working on "
        "new objects (the floor reuses its own), freeing them, and the collections they cause.",
        "",
        "| backend | turns | messages | floor ms / turn | AlpstoreSaver ms / turn | own cost ms | "
        "own cost, process CPU ms | CPU inside the saver's calls ms | of which storage work ms | "
        "of which the read's fresh copy ms | freeing one read's copy ms | garbage collector ms "
        "/ turn, AlpstoreSaver / floor | own ÷ at first mark |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, result in results.items():
        lines += table(name, result)
    sq = results["SQLite"]
    lines += [
        "",
        f"Cold `get_state` at {turns:,} turns ({sq['cold_messages']:,} messages), a new saver "
        f"each time, alternating with SqliteSaver, median of {COLD_REPEAT}: AlpstoreSaver "
        f"**{sq['cold_ms']:.1f} ms** wall, {sq['cold_cpu_ms']:.1f} ms CPU; LangGraph "
        f"SqliteSaver {sq['sqlite_cold_ms']:.1f} ms wall, {sq['sqlite_cold_cpu_ms']:.1f} ms CPU "
        f"(ratio {sq['cold_ms'] / sq['sqlite_cold_ms']:.2f} wall, "
        f"{sq['cold_cpu_ms'] / sq['sqlite_cold_cpu_ms']:.2f} CPU; goal ≤ 0.5).",
    ]
    lines += ["", goals(results)]
    if skipped:
        lines += ["", skipped]
    lines += ["", *NOTES]
    text = "\n".join(lines) + "\n"
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text, encoding="utf-8")
    return text


def test_saver_own_cost(benchmark: Any) -> None:
    import pytest

    pytest.importorskip("langgraph.checkpoint.sqlite")
    turns = int(os.environ.get("ALPSTORE_BENCH_SAVER_TURNS", "1000"))
    pg_turns = int(os.environ.get("ALPSTORE_BENCH_SAVER_PG_TURNS", "400"))
    text = benchmark.pedantic(run_all, args=(turns, pg_turns), rounds=1, iterations=1)
    print("\n" + text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--pg-turns", type=int, default=400)
    parser.add_argument(
        "--cold-only",
        action="store_true",
        help="only the cold get_state comparison on SQLite (prints one line, writes nothing)",
    )
    args = parser.parse_args(argv)
    print(cold_only(args.turns) if args.cold_only else run_all(args.turns, args.pg_turns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
