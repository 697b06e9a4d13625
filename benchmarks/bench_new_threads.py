"""A turn written from a new thread against one written from a thread that wrote before, once the
archive's zstd dictionary is trained; and zstd's batch call against one call a blob.

Run: ``python benchmarks/bench_new_threads.py [--turns 150]``, or collected by pytest with
``--benchmark-only``. Writes ``benchmarks/results/new_threads.md``.

Frameworks call in from threads they start and drop: LangGraph runs each ``invoke``'s
checkpoint writes on threads of its own. A zstd context that loads a trained dictionary digests
it on its first frame (10–20 ms at the dictionary level, 12), so a compressor that kept one
context per thread, each loading the dictionary, made every new thread pay that on its first
small blob: several times a LangGraph turn. Contexts now refer to one digest per compressor.

One generated coding-agent conversation (``alpstore.samples.generate``): ``Session.commit_turn``
until the automatic dictionary is trained and in use, then, alternating turn by turn on two
sessions of the same archive, each turn's ``commit_turn`` run on a worker thread that lives for
the whole run (the baseline: an executor that reuses its threads) or on a thread started for
that turn alone. Reported: medians of the calling thread's CPU time (``time.thread_time``: what
the turn's own work costs, whatever else runs on the machine) and wall time, and their ratios,
new ÷ reused. Goal: ≤ 1.25.

Then, on the same archive's compressor, small blobs of the same conversation compressed with
the trained dictionary in batches of 100 (``Compressor.compress_many``: zstd's batch call on
two worker threads, as imports and the trainer's recompression use it) against the same blobs
one call each (``Compressor.compress``), alternating, process CPU time (the workers' too).
Each worker context used to load the dictionary itself on every batch call (3.7× the calls
one by one). The batch still starts its two workers and makes their contexts on each call
(referring to the digest), which costs some CPU for the interpreter lock it frees. Goal: the
batch ≤ 1.5× the calls one by one.
"""

from __future__ import annotations

import argparse
import queue
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._util import conversation_turns, write_results

RESULTS = Path(__file__).parent / "results" / "new_threads.md"
GOAL = 1.25
BATCH_GOAL = 1.5
TRAIN_TURNS = 400
BATCH = 100
BATCHES = 20
"""At most this many turns to reach the automatic dictionary (it is trained near turn 150)."""


class Worker:
    """One long-lived thread that runs what it is given (an executor that reuses its thread)."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            job()

    def run(self, job: Callable[[], None]) -> None:
        done = threading.Event()

        def wrapped() -> None:
            try:
                job()
            finally:
                done.set()

        self._jobs.put(wrapped)
        done.wait()

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join()


def on_new_thread(job: Callable[[], None]) -> None:
    thread = threading.Thread(target=job)
    thread.start()
    thread.join()


def run(turns: int) -> dict[str, Any]:
    """Both ways of calling ``commit_turn``, ``turns`` turns each, on one trained archive."""
    from alpstore.store import Store

    conversation = conversation_turns(TRAIN_TURNS + 2 * turns)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(Path(tmp))
        try:
            warm = store.create_session(name="warm-up")
            trained_at = None
            for n, messages in enumerate(conversation[:TRAIN_TURNS], 1):
                warm.commit_turn(messages)
                if store.archive.dictionary_id is not None:
                    trained_at = n
                    break
            if trained_at is None:
                raise SystemExit(f"no dictionary trained in {TRAIN_TURNS} turns")
            store.archive.wait_for_training(timeout=120)
            rest = conversation[trained_at:]
            sessions = {
                "reused": store.create_session(name="reused"),
                "new": store.create_session(name="new"),
            }
            cpu: dict[str, list[float]] = {"reused": [], "new": []}
            wall: dict[str, list[float]] = {"reused": [], "new": []}
            worker = Worker()
            try:
                for i in range(2 * turns):
                    kind = ("reused", "new")[(i + i // 2) % 2]  # alternate, either one first
                    session, messages = sessions[kind], rest[i]

                    def job(
                        session: Any = session, messages: Any = messages, kind: str = kind
                    ) -> None:
                        start_wall, start_cpu = time.perf_counter(), time.thread_time()
                        session.commit_turn(messages)
                        cpu[kind].append(time.thread_time() - start_cpu)
                        wall[kind].append(time.perf_counter() - start_wall)

                    if kind == "reused":
                        worker.run(job)
                    else:
                        on_new_thread(job)
            finally:
                worker.close()
            batch = batch_against_one_by_one(store, conversation)
        finally:
            store.close()
    out: dict[str, Any] = {"turns": turns, "trained_at": trained_at, **batch}
    for kind in ("reused", "new"):
        out[f"{kind}_cpu_ms"] = 1000 * statistics.median(cpu[kind])
        out[f"{kind}_wall_ms"] = 1000 * statistics.median(wall[kind])
    out["cpu_ratio"] = out["new_cpu_ms"] / out["reused_cpu_ms"]
    out["wall_ratio"] = out["new_wall_ms"] / out["reused_wall_ms"]
    return out


def batch_against_one_by_one(store: Any, conversation: list[Any]) -> dict[str, float]:
    """Process CPU ms of ``BATCH`` small blobs compressed by one ``compress_many`` call and by
    one ``compress`` call each (medians over ``BATCHES`` batches, alternating)."""
    from alpstore.archive.sql import SMALL_BLOB_MAX
    from alpstore.codec import canonical_json

    compressor = store.archive._codec[1]
    small = [
        raw
        for messages in conversation
        for raw in map(canonical_json, messages)
        if len(raw) <= SMALL_BLOB_MAX
    ]
    need = BATCH * BATCHES
    if len(small) < need:
        raise SystemExit(f"{len(small)} small blobs, {need} needed")
    times: dict[str, list[float]] = {"batch": [], "one": []}
    for b in range(BATCHES):
        part = small[b * BATCH : (b + 1) * BATCH]
        for kind in ("batch", "one") if b % 2 else ("one", "batch"):
            start = time.process_time()
            if kind == "batch":
                compressor.compress_many(part, dictionary_max=SMALL_BLOB_MAX)
            else:
                for raw in part:
                    compressor.compress(raw)
            times[kind].append(time.process_time() - start)
    batch_ms = 1000 * statistics.median(times["batch"])
    one_ms = 1000 * statistics.median(times["one"])
    return {"batch_ms": batch_ms, "one_ms": one_ms, "batch_ratio": batch_ms / one_ms}


def report(r: dict[str, Any]) -> str:
    met = "met" if r["cpu_ratio"] <= GOAL else "**not met**"
    batch_met = "met" if r["batch_ratio"] <= BATCH_GOAL else "**not met**"
    return "\n".join(
        [
            "# A turn from a new thread (issue 16)",
            "",
            f"Command: `python benchmarks/bench_new_threads.py --turns {r['turns']}`. "
            f"The automatic dictionary was in use from turn {r['trained_at']}; then "
            f"{r['turns']} turns each way, alternating: `commit_turn` on one long-lived worker "
            "thread (baseline) or on a thread started for the turn. Medians.",
            "",
            "| calling thread | CPU ms / turn | wall ms / turn |",
            "|---|---:|---:|",
            f"| reused (baseline) | {r['reused_cpu_ms']:.3f} | {r['reused_wall_ms']:.3f} |",
            f"| new for each turn | {r['new_cpu_ms']:.3f} | {r['new_wall_ms']:.3f} |",
            f"| new ÷ reused | **{r['cpu_ratio']:.2f}** | {r['wall_ratio']:.2f} |",
            "",
            f"Goal: CPU new ÷ reused ≤ {GOAL} — {met}.",
            "",
            f"{BATCH} small blobs of the same conversation with the trained dictionary, process "
            f"CPU, medians over {BATCHES} batches, each compressed both ways (alternating which "
            "first):",
            "",
            "| `compress_many` (one batch call) | `compress` one by one | batch ÷ one by one |",
            "|---:|---:|---:|",
            f"| {r['batch_ms']:.2f} ms | {r['one_ms']:.2f} ms | **{r['batch_ratio']:.2f}** |",
            "",
            f"Goal: batch ÷ one by one ≤ {BATCH_GOAL} — {batch_met}.",
            "",
        ]
    )


def test_new_threads(benchmark: Any) -> None:
    result = benchmark.pedantic(run, args=(150,), rounds=1, iterations=1)
    text = report(result)
    write_results(RESULTS, text)
    print("\n" + text)
    benchmark.extra_info.update(result)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=150)
    args = parser.parse_args(argv)
    text = report(run(args.turns))
    write_results(RESULTS, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
