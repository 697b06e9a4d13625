"""Long-lived processes beside GC (issue 13): the stress run of tests/integrity/test_stress.py
and ``scripts/torture --long``. ``run_stress`` starts a native writer pair, a LangGraph writer
and a GC loop on one archive, each a process of its own
(``python -m alpstore.testing.stress ROLE ROOT URL|- NAME SECONDS WORKDIR SEED WRITERS``).

Writers keep one ``Store`` open for the whole run (the long-lived server). They append large,
similar tool outputs, drop some again (``truncate_and_append``, OpenAI Agents' ``pop_item``),
backtrack, fork and time-travel, and log every checkpoint the archive acknowledged, with the
digests of the covering list it must hydrate to, to ``WORKDIR/log-NAME.jsonl`` (one line after
each commit). Every few operations a writer re-reads a sample of every writer's log through its
own store. After SECONDS it writes ``done-NAME``, waits until every writer is done and the GC
loop has stopped, then reads *every* logged checkpoint of every writer through the same,
still-open store and writes what it found to ``result-NAME.json``.

The GC role runs ``maintenance.gc`` in-process and ``alpstore archive gc`` in a subprocess in
turn, until every writer is done; it writes ``gc.json`` (runs, blobs and segments removed).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alpstore.archive.reading import encode
from alpstore.codec import digest_hex
from alpstore.errors import AlpstoreError, NotFoundError, SessionStateError
from alpstore.maintenance import gc, verify
from alpstore.sessions import Session
from alpstore.store import Store

FINAL_SAMPLE = 150
"""Older checkpoints each long-lived writer re-reads at the end, besides every session's newest."""

NATIVE_STEP_S = 0.05
"""A native writer takes at least this long a step (unpaced it made ~25 a second)."""

MAX_ENTRIES = 40
"""A session longer than this is left for a new one (keeps the final check bounded)."""


def tool_output(seed: int, variant: int, lines: int = 60) -> str:
    """A large tool output (a file read); the same seed with another variant differs in a few
    lines, so the archive stores it as a delta against an earlier one.
    """
    body = [
        f"{seed:03d}.{i:03d} def step_{i}(x): return x * {i} + {seed}  # module {seed}"
        for i in range(lines)
    ]
    for k in range(variant % 7):
        body[(k * 31 + variant) % lines] = f"# edited in revision {variant}.{k}"
    return "\n".join(body)


def digests(messages: list[Any]) -> list[str]:
    """The digests of messages, as the archive stores them."""
    return [digest_hex(encode(m)[0]) for m in messages]


class Log:
    """This writer's acknowledged checkpoints, one JSON line each, flushed at once."""

    def __init__(self, workdir: Path, name: str) -> None:
        self.file = (workdir / f"log-{name}.jsonl").open("a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        """Append one record (flushed: it is acknowledged)."""
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()


def read_logs(workdir: Path) -> tuple[list[dict[str, Any]], set[int], list[dict[str, Any]]]:
    """Every complete log line of every writer: acknowledged checkpoints, the checkpoints
    deleted on purpose since, and the final heads of native sessions.
    """
    records: list[dict[str, Any]] = []
    deleted: set[int] = set()
    heads: list[dict[str, Any]] = []
    for path in sorted(workdir.glob("log-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.endswith("}"):
                continue  # a line being written
            record = json.loads(line)
            if "deleted" in record:
                deleted.update(record["deleted"])
            elif "head" in record:
                heads.append(record)
            else:
                records.append(record)
    return records, deleted, heads


def check_heads(store: Store, heads: list[dict[str, Any]]) -> list[str]:
    """Every native session's live head, read and re-hashed, against its writer's model."""
    errors = []
    for record in heads:
        try:
            got = [
                digest_hex(encode(e.value)[0]) for e in store.get_session(record["head"]).history()
            ]
        except AlpstoreError as err:
            errors.append(f"head of {record['head']} ({record['by']}): {err.message}")
            continue
        if got != record["digests"]:
            errors.append(f"head of {record['head']} ({record['by']}): other entries")
    return errors


def spread(records: list[dict[str, Any]], rng: random.Random, extra: int) -> list[dict[str, Any]]:
    """The newest record of every session or thread, plus ``extra`` others at random."""
    newest = {r["group"]: r for r in records}
    rest = [r for r in records if newest[r["group"]] is not r]
    return [*newest.values(), *rng.sample(rest, min(extra, len(rest)))]


def check(
    store: Store,
    records: list[dict[str, Any]],
    deleted: set[int],
    *,
    final: bool,
    verify_all: bool = True,
) -> list[str]:
    """Hydrate each logged checkpoint through the store's caches and re-hash what came back
    (the content, not the digests the rows claim); with ``verify_all`` also read it again with
    ``verify=True`` (every blob and the covering digest checked). Compare with what its writer
    logged. Mid-run, a checkpoint a writer deleted since (a LangGraph thread) may be gone; at
    the end it must be logged as deleted.
    """
    errors: list[str] = []
    for record in records:
        ck_id = record["ck"]
        if ck_id in deleted:
            continue
        try:
            ck = store.get_checkpoint(ck_id)
            cached = [digest_hex(encode(e.value)[0]) for e in store.hydrate(ck)]
            reads = [("cached", cached)]
            if verify_all:
                reads.append(("verified", [e.hex for e in store.hydrate(ck, verify=True)]))
        except NotFoundError as err:
            if final:
                errors.append(f"checkpoint {ck_id} of {record['by']}: {err.message}")
            continue
        except AlpstoreError as err:
            errors.append(
                f"checkpoint {ck_id} of {record['by']}: {type(err).__name__}: {err.message}"
            )
            continue
        for how, got in reads:
            if got != record["digests"]:
                want = record["digests"]
                at = next(
                    (i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None
                )
                errors.append(
                    f"checkpoint {ck_id} of {record['by']} ({how} read): {len(got)} entries, "
                    f"expected {len(want)}; first difference at {at}"
                )
                break
    return errors


def wait_for_end(workdir: Path, writers: int, deadline: float) -> None:
    """Wait until every writer is done and the GC loop has stopped."""
    while len(list(workdir.glob("done-*"))) < writers or not (workdir / "gc-stopped").exists():
        if time.monotonic() > deadline:
            raise SystemExit("stress worker: the others did not finish in time")
        time.sleep(0.05)


# ---------------------------------------------------------------- native writer
class Native:
    """Native sessions: turns with large tool outputs, drops, backtracks, forks."""

    def __init__(self, store: Store, name: str, rng: random.Random, log: Log) -> None:
        self.store, self.name, self.rng, self.log = store, name, rng, log
        self.sessions: list[tuple[Session, list[Any], list[tuple[int, list[Any]]]]] = []
        self.every: list[tuple[Session, list[Any]]] = []
        self.n = 0
        self.new_session()

    def new_session(
        self, source: tuple[int, list[Any]] | None = None, parent: Session | None = None
    ) -> None:
        """A new session, or (``source``) a fork of ``parent`` at that checkpoint."""
        if source is not None and parent is not None:
            ck = self.store.get_checkpoint(source[0])
            s = parent.fork(ck)
            model = list(source[1])
            retained = [(s.checkpoints()[-1].id, list(model))]
            self.log.write(
                {"by": self.name, "group": s.uuid, "ck": retained[0][0], "digests": digests(model)}
            )
        else:
            s, model, retained = self.store.create_session(), [], []
        self.sessions.append((s, model, retained))
        self.every.append((s, model))
        if len(self.sessions) > 4:
            self.sessions.pop(0)

    def ack(
        self, s: Session, ck_id: int, model: list[Any], retained: list[tuple[int, list[Any]]]
    ) -> None:
        """Log a checkpoint the archive acknowledged, with the list it must hydrate to."""
        retained.append((ck_id, list(model)))
        self.log.write({"by": self.name, "group": s.uuid, "ck": ck_id, "digests": digests(model)})

    def log_heads(self) -> None:
        """What every session's live head must read as, once this writer stopped."""
        for s, model in self.every:
            self.log.write({"by": self.name, "head": s.uuid, "digests": digests(model)})

    def step(self) -> None:
        """One random operation on one of this writer's sessions."""
        self.n += 1
        n, rng = self.n, self.rng
        s, model, retained = self.rng.choice(self.sessions)
        big = {"role": "tool", "content": tool_output(rng.randrange(12), n)}
        roll = rng.random()
        if len(model) > MAX_ENTRIES or roll < 0.04:
            self.new_session()
        elif roll < 0.50:  # a turn: a question and a large tool output
            msgs = [{"role": "user", "content": f"{self.name} turn {n}"}, big]
            ck = s.commit_turn(msgs)
            model.extend(msgs)
            self.ack(s, ck.id, model, retained)
        elif roll < 0.70:  # a tool output appended, then dropped before any checkpoint
            s.append([big])
            s.truncate_and_append(len(model), [])
        elif roll < 0.82 and model:  # the last entries replaced (an edit), then a checkpoint
            keep = max(0, len(model) - rng.randint(1, 2))
            msgs = [big, {"role": "assistant", "content": f"{self.name} redo {n}"}]
            s.truncate_and_append(keep, msgs)
            del model[keep:]
            model.extend(msgs)
            self.ack(s, s.checkpoint().id, model, retained)
        elif roll < 0.94 and len(retained) >= 2:
            try:
                s.backtrack(1, steering=f"{self.name} steer {n}")
            except SessionStateError:
                return
            del retained[-1]
            model[:] = [
                *retained[-1][1],
                {"role": "user", "content": f"/steer {self.name} steer {n}"},
            ]
        elif retained:
            self.new_session(source=retained[-1], parent=s)


# ---------------------------------------------------------------- LangGraph writer
class Graph:
    """An AlpstoreSaver under a real LangGraph graph: tool outputs, removals, time travel,
    new and deleted threads.
    """

    def __init__(self, store: Store, name: str, rng: random.Random, log: Log) -> None:
        from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage
        from langgraph.graph import END, START, MessagesState, StateGraph

        from alpstore.integrations.langgraph import AlpstoreSaver

        self.store, self.name, self.rng, self.log = store, name, rng, log
        self.saver = AlpstoreSaver(store)
        self.Human = HumanMessage

        def agent(state: MessagesState) -> dict[str, Any]:
            last = state["messages"][-1]
            words = str(last.content).split()
            if words[-1] == "drop":
                tools = [m for m in state["messages"] if isinstance(m, ToolMessage)]
                if tools:
                    return {
                        "messages": [
                            RemoveMessage(id=str(tools[-1].id)),
                            AIMessage(content="dropped it", id=f"{last.id}-a"),
                        ]
                    }
            seed, variant = (0, 0) if words[-1] == "drop" else (int(words[-2]), int(words[-1]))
            return {
                "messages": [
                    AIMessage(content=f"reading module {seed}", id=f"{last.id}-a"),
                    ToolMessage(
                        content=tool_output(seed, variant),
                        tool_call_id=f"{last.id}-c",
                        id=f"{last.id}-t",
                    ),
                ]
            }

        builder = StateGraph(MessagesState)
        builder.add_node("agent", agent)
        builder.add_edge(START, "agent")
        builder.add_edge("agent", END)
        self.graph: Any = builder.compile(checkpointer=self.saver)
        self.threads: dict[str, list[tuple[str, int]]] = {}
        self.lg: list[dict[str, Any]] = []
        self.n = 0
        self.thread = self.new_thread()

    def new_thread(self) -> str:
        """Start a thread of its own (a session in the archive)."""
        self.n += 1
        thread = f"{self.name}-thread-{self.n}"
        self.threads[thread] = []
        return thread

    def invoke(self, thread: str, checkpoint_id: str | None) -> None:
        """Run the graph once on ``thread`` (from ``checkpoint_id``: time travel); log it."""
        from alpstore.integrations._lgcodec import message_docs

        self.n += 1
        words = "drop" if self.rng.random() < 0.25 else f"{self.rng.randrange(12)} {self.n}"
        message = self.Human(content=f"{self.name} {self.n}: {words}", id=f"{self.name}-h{self.n}")
        config: dict[str, Any] = {"configurable": {"thread_id": thread}}
        if checkpoint_id is not None:
            config["configurable"]["checkpoint_id"] = checkpoint_id
        self.graph.invoke({"messages": [message]}, config)
        snap = self.graph.get_state({"configurable": {"thread_id": thread}})
        messages = snap.values["messages"]
        cid = str(snap.config["configurable"]["checkpoint_id"])
        alp = self.alp_checkpoint(thread, cid)
        docs = message_docs(messages)
        assert docs is not None
        self.threads[thread].append((cid, alp))
        self.lg.append(
            {"thread": thread, "cid": cid, "contents": [m.content for m in messages], "alp": alp}
        )
        self.log.write({"by": self.name, "group": thread, "ck": alp, "digests": digests(docs)})

    def alp_checkpoint(self, thread: str, cid: str) -> int:
        """The alpstore checkpoint holding a LangGraph checkpoint's messages."""
        from alpstore.integrations import _lgdb as lgdb

        with self.store.db.read() as conn:
            found = lgdb.find_thread(conn, thread, "")
            step = None if found is None else lgdb.find_checkpoint(conn, found[0], cid)
        assert step is not None, f"no LangGraph checkpoint {cid} of thread {thread!r}"
        return step.alp_id

    def step(self) -> None:
        """One random operation: a run, a time-travel run, a new or a deleted thread."""
        roll = self.rng.random()
        if roll < 0.65:
            self.invoke(self.thread, None)
        elif roll < 0.85 and self.threads[self.thread]:  # time travel: a branch from the past
            cid, _ = self.rng.choice(self.threads[self.thread])
            self.invoke(self.thread, cid)
        elif roll < 0.95 or len(self.threads) < 3:
            self.thread = self.new_thread()
        else:  # delete an older thread: its checkpoints go, `gc` frees its blobs
            victim = self.rng.choice([t for t in self.threads if t != self.thread])
            self.saver.delete_thread(victim)
            gone = [alp for _, alp in self.threads.pop(victim)]
            self.log.write({"by": self.name, "deleted": gone})
            self.lg = [r for r in self.lg if r["thread"] != victim]

    def check_saver(self, rng: random.Random) -> list[str]:
        """Logged LangGraph checkpoints through the saver, as LangGraph reads them: the newest
        of every thread and a sample of the others.
        """
        errors = []
        for r in spread([{**r, "group": r["thread"]} for r in self.lg], rng, FINAL_SAMPLE):
            config = {
                "configurable": {
                    "thread_id": r["thread"],
                    "checkpoint_ns": "",
                    "checkpoint_id": r["cid"],
                }
            }
            found = self.saver.get_tuple(config)  # type: ignore[arg-type]
            if found is None:
                errors.append(f"LangGraph checkpoint {r['cid']} of {r['thread']} is missing")
                continue
            got = [m.content for m in found.checkpoint["channel_values"].get("messages", [])]
            if got != r["contents"]:
                errors.append(f"LangGraph checkpoint {r['cid']} of {r['thread']}: other messages")
        return errors


# ---------------------------------------------------------------- roles
def writer(
    role: str, store: Store, name: str, seconds: float, workdir: Path, seed: int, writers: int
) -> int:
    """A writer role: SECONDS of work, then every session read back through this store."""
    rng = random.Random(f"{seed}-{name}")
    log = Log(workdir, name)
    actor: Native | Graph = (
        Native(store, name, rng, log) if role == "native" else Graph(store, name, rng, log)
    )
    errors: list[str] = []
    steps = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        began = time.monotonic()
        actor.step()
        steps += 1
        if isinstance(actor, Native):  # paced: the final reads grow with every checkpoint
            time.sleep(max(0.0, NATIVE_STEP_S - (time.monotonic() - began)))
        if steps % 15 == 0:  # read the others (and ourselves) through this process's caches
            records, deleted, _ = read_logs(workdir)
            sample = rng.sample(records, min(6, len(records)))
            errors += check(store, sample, deleted, final=False)
    if isinstance(actor, Native):
        actor.log_heads()
    (workdir / f"done-{name}").touch()
    waited = time.monotonic()
    wait_for_end(workdir, writers, waited + 600)
    started = time.monotonic()
    records, deleted, heads = read_logs(workdir)
    live = [r for r in records if r["ck"] not in deleted]
    # still open, through its caches: every session (its newest checkpoint and its head) of
    # every writer, and a sample of the older checkpoints (the fresh reader checks them all)
    errors += check(store, spread(live, rng, FINAL_SAMPLE), deleted, final=True, verify_all=False)
    errors += check_heads(store, heads)
    if isinstance(actor, Graph):
        errors += actor.check_saver(rng)
    result = {
        "name": name,
        "steps": steps,
        "checked": len(records),
        "errors": errors[:50],
        "error_count": len(errors),
        "waited_s": round(started - waited, 1),
        "final_check_s": round(time.monotonic() - started, 1),
    }
    (workdir / f"result-{name}.json").write_text(json.dumps(result))
    return 0


def gc_loop(store: Store, root: str, url: str | None, workdir: Path, writers: int) -> int:
    """Collect garbage until every writer is done: in-process, and every fifth run as the
    `alpstore archive gc` command.
    """
    alpstore = str(Path(sys.executable).with_name("alpstore"))
    cli = [alpstore, "--root", root, *(["--db", url] if url else []), "archive", "gc"]
    runs = cli_runs = blobs = segments = 0
    while len(list(workdir.glob("done-*"))) < writers:
        if runs % 5 == 4:  # the command, as an operator runs it
            done = subprocess.run(cli, capture_output=True, text=True, timeout=300, check=False)
            if done.returncode != 0:
                raise SystemExit(f"alpstore archive gc failed: {done.stderr.strip()}")
            cli_runs += 1
        else:
            report = gc(store)
            blobs += report.blobs_removed
            segments += report.segments_removed
        runs += 1
        time.sleep(0.2)
    (workdir / "gc.json").write_text(
        json.dumps(
            {
                "runs": runs,
                "cli_runs": cli_runs,
                "blobs_removed": blobs,
                "segments_removed": segments,
            }
        )
    )
    (workdir / "gc-stopped").touch()
    return 0


def main(argv: list[str]) -> int:
    """Run one role (see the module docstring for the arguments)."""
    role, root, url, name, seconds, workdir, seed, writers = argv
    store = Store.open(root, url=None if url == "-" else url)
    work = Path(workdir)
    try:
        if role == "gc":
            return gc_loop(store, root, None if url == "-" else url, work, int(writers))
        return writer(role, store, name, float(seconds), work, int(seed), int(writers))
    except BaseException:
        (work / f"crash-{name}.txt").write_text(traceback.format_exc())
        (work / f"done-{name}").touch()
        if role == "gc":
            (work / "gc-stopped").touch()
        raise
    finally:
        store.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


# ---------------------------------------------------------------- the run
@dataclass
class StressReport:
    """What a stress run found: per writer its steps and errors, and what GC removed."""

    results: list[dict[str, Any]] = field(default_factory=list)
    gc: dict[str, Any] = field(default_factory=dict)
    final_errors: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    checkpoints: int = 0
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def failures(self) -> list[str]:
        """Every error, prefixed by who saw it (empty when the run passed)."""
        out = [f"crash: {c}" for c in self.crashes]
        for r in self.results:
            out += [f"{r['name']}: {e}" for e in r["errors"]]
        return out + [f"fresh reader: {e}" for e in self.final_errors]

    def summary(self) -> str:
        """One line for the terminal."""
        steps = ", ".join(f"{r['name']} {r['steps']} steps" for r in self.results)
        return (
            f"stress: {self.checkpoints} acknowledged checkpoints ({steps}); gc ran "
            f"{self.gc.get('runs', 0)} times ({self.gc.get('cli_runs', 0)} as `alpstore archive "
            f"gc`), removed {self.gc.get('blobs_removed', 0)} blobs and "
            f"{self.gc.get('segments_removed', 0)} segments; {len(self.failures)} failures; "
            + ", ".join(f"{k} {v:.1f} s" for k, v in self.timings.items())
        )


WRITERS = (("native", "native-a"), ("native", "native-b"), ("langgraph", "langgraph"))


def run_stress(
    root: Path, url: str | None, workdir: Path, seconds: float, *, seed: int = 0
) -> StressReport:
    """Run two native writers, a LangGraph writer and the GC loop for ``seconds``, each in a
    process of its own, then check every acknowledged checkpoint in a fresh process too.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    Store.open(root, url=url).close()  # create and migrate once, before the crowd arrives
    roles = [*WRITERS, ("gc", "gc")]
    procs: list[tuple[str, subprocess.Popen[str]]] = []
    for role, name in roles:
        cmd = [sys.executable, "-m", "alpstore.testing.stress", role, str(root), url or "-"]
        cmd += [name, str(seconds), str(workdir), str(seed), str(len(WRITERS))]
        procs.append((name, subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)))
    report = StressReport()
    for name, proc in procs:
        try:
            _, err = proc.communicate(timeout=seconds + 900)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            report.crashes.append(f"{name} did not finish")
        if proc.returncode != 0:
            lines = (err or "").strip().splitlines()
            report.crashes.append(f"{name}: {lines[-1] if lines else proc.returncode}")
            crash = workdir / f"crash-{name}.txt"
            if crash.exists():  # where it happened: the pytest folder is gone by the next run
                report.crashes.append("\n".join(crash.read_text().splitlines()[-16:]))
    for _, name in WRITERS:
        path = workdir / f"result-{name}.json"
        if path.exists():
            report.results.append(json.loads(path.read_text()))
        else:
            report.crashes.append(f"{name} left no result")
    if (workdir / "gc.json").exists():
        report.gc = json.loads((workdir / "gc.json").read_text())
    report.timings["processes"] = time.monotonic() - t0
    t1 = time.monotonic()
    records, deleted, heads = read_logs(workdir)
    report.checkpoints = len(records)
    with Store.open(root, url=url) as fresh:
        report.final_errors = check(fresh, records, deleted, final=True)
        report.final_errors += check_heads(fresh, heads)
        found = verify(fresh)
        report.final_errors += [f"archive verify: {p.line()}" for p in found.problems][:20]
    report.timings["fresh check"] = time.monotonic() - t1
    for r in report.results:
        report.timings[f"{r['name']} final check"] = r["final_check_s"]
    return report
