"""Every-turn checkpoints on PostgreSQL: alpstore against LangGraph's PostgresSaver (issue 7).

Run: python benchmarks/bench_postgres.py --turns 400 [--alpstore-turns 1000]
     (PostgreSQL from $ALPSTORE_BENCH_POSTGRES_URL or $ALPSTORE_TEST_POSTGRES_URL; without one
     it stops with the reason). Also collected by pytest with --benchmark-only (skipped, with
     the reason, when there is no server); $ALPSTORE_BENCH_PG_TURNS (default 400),
     $ALPSTORE_BENCH_PG_ALPSTORE_TURNS (default 1000), $ALPSTORE_BENCH_PG_REPEAT (default 3)
     and $ALPSTORE_BENCH_PG_ALPSTORE_SAVER=1 shape that run.

One generated coding-agent conversation (``alpstore.samples.generate``, as in bench_curves.py
and bench_langgraph.py), a checkpoint after every turn, in one process run:

- alpstore natively (``Session.commit_turn``: the turn's messages and a checkpoint, one
  transaction) on PostgreSQL, on PostgreSQL with ``synchronous_commit=off`` (a diagnostic: what
  the COMMIT's WAL flush costs; not durable), and on SQLite (the reference);
- LangGraph's ``PostgresSaver`` on PostgreSQL under a ``StateGraph`` (bench_langgraph.build:
  agent ⇄ tools, every step checkpointed), and opt-in alpstore's ``AlpstoreSaver`` under the
  same graph on the same server (``--with-alpstore-saver``).

The native rows are cheap and run ``--repeat`` times (default 3), interleaved; the table shows
medians and the range of the last-10 % time (this machine is shared: runs vary).

Each PostgreSQL run gets a fresh schema (``search_path`` in the URL), dropped afterwards. Size on
PostgreSQL = ``pg_total_relation_size`` (heap, TOAST, indexes, free-space and visibility maps)
summed over the schema's tables; on SQLite = the file with its WAL folded in. Raw = the
conversation's messages as JSON lines, computed as in bench_curves.py. Time per turn = mean over
the first and the last 10 % of the turns up to the mark; client CPU = the process CPU time of
those turns (the rest of the wall time is waiting for the server, the network and the disk).

After the last mark, ``TRACE_TURNS`` more turns run under a libpq protocol trace (not timed):
statements, round trips (client → server → client exchanges) and bytes per turn.
The tables go to benchmarks/results/postgres.md; the command line also refreshes the section of
benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import event

from alpstore.db import sqlite_path_for_root
from alpstore.store import Store
from benchmarks._util import checkpointed_bytes, conversation_turns
from benchmarks.bench_backends import pg_schema, pg_server_version

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "postgres.md"
SUMMARY = HERE / "RESULTS.md"
TITLE = "Every-turn checkpoints on PostgreSQL (alpstore vs LangGraph PostgresSaver)"
SAVER_ENV = "ALPSTORE_BENCH_PG_ALPSTORE_SAVER"
DATABASE_URL_ENV = "ALPSTORE_DATABASE_URL"
"""Names the archive of ``Store.open(root)``; the SQLite reference row must not follow it."""
URL_ENV = ("ALPSTORE_BENCH_POSTGRES_URL", "ALPSTORE_TEST_POSTGRES_URL")
MARK = 100
TRACE_TURNS = 10
FLOOR_COMMITS = 200
GOAL_RATIO = 0.6
GOAL_MS = 3.0
FLAT = 1.5
"""Flat: the last 10 % of turns take at most this many times the first 10 %."""

NATIVE_PG = "alpstore `commit_turn`"
NATIVE_ASYNC = "alpstore `commit_turn`, synchronous_commit=off (diagnostic)"
NATIVE_SQLITE = "alpstore `commit_turn` (reference)"
LG_POSTGRES = "LangGraph `PostgresSaver` (StateGraph)"
LG_ALPSTORE = "alpstore `AlpstoreSaver` (StateGraph)"


def postgres_url() -> str | None:
    """The benchmark server, from the environment."""
    return next((os.environ[k] for k in URL_ENV if os.environ.get(k)), None)


def unavailable(url: str | None) -> str | None:
    """Why the benchmark cannot run (no URL, server unreachable), or None."""
    if not url:
        return f"no PostgreSQL: set {URL_ENV[0]} (or {URL_ENV[1]}) to a server URL"
    try:
        pg_server_version(url)
    except Exception as err:
        first = str(getattr(err, "orig", None) or err).strip().splitlines()[0]
        return f"PostgreSQL at {redacted(url)} is unreachable: {first}"
    return None


def redacted(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def with_options(url: str, extra: str) -> str:
    """``url`` with ``extra`` (e.g. ``-csynchronous_commit=off``) added to its libpq options."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    old = parsed.query.get("options")
    options = " ".join(x for x in (old if isinstance(old, str) else None, extra) if x)
    return parsed.update_query_dict({"options": options}).render_as_string(hide_password=False)


def conninfo(url: str) -> str:
    """The libpq connection string of an SQLAlchemy URL (for psycopg-level clients)."""
    from psycopg.conninfo import make_conninfo
    from sqlalchemy.engine import make_url

    u = make_url(url)
    options = u.query.get("options")
    return make_conninfo(
        "",
        host=u.host,
        port=u.port,
        dbname=u.database,
        user=u.username,
        password=u.password,
        options=options if isinstance(options, str) else None,
    )


@contextmanager
def schema_sizer(url: str) -> Iterator[Callable[[], int]]:
    """``size()``: bytes of every table of the URL's schema (TOAST and indexes included)."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    engine = create_engine(url, poolclass=NullPool)

    def size() -> int:
        with engine.connect() as conn:
            return int(
                conn.exec_driver_sql(
                    "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                    "WHERE c.relnamespace = current_schema()::regnamespace "
                    "AND c.relkind IN ('r', 'p', 'm')"
                ).scalar_one()
            )

    try:
        yield size
    finally:
        engine.dispose()


# ------------------------------------------------------------------------ libpq protocol trace
_MSG = re.compile(r"^([FB])\t(\d+)\t(\w+)(?:\t (.*))?$")
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


class Tracer:
    """libpq protocol traces of every connection a run uses during a window (one file each).

    Statements = Execute messages (one per statement, or per row of an executemany) plus
    simple-protocol queries; round trips = the times a client waited for the server (a run of
    messages to the server followed by the server's answer), summed over the connections.
    """

    def __init__(self) -> None:
        self.active = False
        self.traced: list[tuple[Any, Any]] = []
        self.files = ExitStack()

    def add(self, pgconn: Any) -> None:
        """Trace ``pgconn`` too (from now to the end of the window), if a window is open."""
        from psycopg import pq

        if not self.active or any(p is pgconn for p, _ in self.traced):
            return
        f = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        self.files.enter_context(f)  # closed in counts()
        pgconn.trace(os.dup(f.fileno()))  # libpq writes through its own FILE on the duplicate
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        self.traced.append((pgconn, f))

    def hook(self, engine: Any) -> None:
        """Trace the connections ``engine`` hands out while a window is open."""
        event.listen(engine, "checkout", lambda dbapi, _rec, _proxy: self.add(dbapi.pgconn))

    @contextmanager
    def window(self, *pgconns: Any) -> Iterator[None]:
        self.active = True
        for p in pgconns:
            self.add(p)
        try:
            yield
        finally:
            self.active = False
            for p, _ in self.traced:
                with suppress(Exception):  # a connection closed meanwhile has no trace left
                    p.untrace()

    def counts(self, names: dict[str, str] | None = None) -> dict[str, Any]:
        """The window's totals; ``names`` maps prepared-statement names to SQL (one conn)."""
        total: dict[str, Any] = {"statements": Counter(), "connections": len(self.traced)}
        for _, f in self.traced:
            f.seek(0)
            one = parse_trace(f, names or {})
            total["statements"].update(one.pop("statements"))
            for k, v in one.items():
                total[k] = total.get(k, 0) + v
        self.files.close()
        return total


def parse_trace(lines: Any, names: dict[str, str]) -> dict[str, Any]:
    statements: Counter[str] = Counter()
    named: dict[str, str] = dict(names)
    current = ""
    sent = received = round_trips = idle = 0
    last = "B"
    for line in lines:
        m = _MSG.match(line.rstrip("\n"))
        if not m:
            continue
        side, size, kind, rest = m.group(1), int(m.group(2)), m.group(3), m.group(4) or ""
        if side == "F":
            sent += size + 1
        else:
            received += size + 1
            round_trips += last == "F"
            idle += kind == "ReadyForQuery" and rest.strip() == "I"
        last = side
        if side != "F":
            continue
        quoted = _QUOTED.findall(rest)
        if kind == "Parse" and len(quoted) >= 2:
            named[quoted[0]] = quoted[1]
        elif kind == "Bind" and len(quoted) >= 2:
            current = named.get(quoted[1], "")
        elif kind == "Execute":
            statements[shape(current)] += 1
        elif kind == "Query" and quoted:
            word = quoted[0].split()[0].upper() if quoted[0].split() else ""
            statements[word if word in ("BEGIN", "COMMIT") else shape(quoted[0])] += 1
    return {
        "statements": statements,
        "round_trips": round_trips,
        "transactions": idle,
        "sent": sent,
        "received": received,
    }


def shape(sql: str) -> str:
    """A statement in a few words: verb and table (``SELECT blobs``, ``UPDATE sessions``)."""
    text = sql.replace("\\n", " ").split()
    if not text:
        return "?"
    verb = text[0].upper()
    low = [w.lower().strip('"(),') for w in text]
    table = ""
    for key in ("into", "update", "from"):
        if key in low[: 40 if key == "from" else 4]:
            i = low.index(key)
            if i + 1 < len(low):
                table = low[i + 1]
                break
    lock = next(
        (c for c in (" FOR NO KEY UPDATE", " FOR UPDATE", " FOR KEY SHARE") if c in sql), ""
    )
    return f"{verb} {table}{lock}".strip()


def driver_pgconn(store: Store) -> Any:
    """The libpq connection under the store's connection for this thread."""
    with store.db.read() as conn:
        return conn.connection.dbapi_connection.pgconn  # type: ignore[union-attr]


def prepared_statements(store: Store) -> dict[str, str]:
    """This thread's connection's prepared statements (psycopg prepares repeated ones)."""
    with store.db.read() as conn:
        rows = conn.exec_driver_sql("SELECT name, statement FROM pg_prepared_statements")
        return {str(name): str(sql) for name, sql in rows}


# ------------------------------------------------------------------------------- measuring
def run_turns(
    step: Callable[[int], None],
    marks: list[int],
    size: Callable[[], int],
    raw: list[int],
    trace: Callable[[Callable[[], None]], dict[str, Any]] | None = None,
    at_top: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """Run turns 1 … marks[-1] (timed), measuring at each mark; then ``trace`` runs
    TRACE_TURNS more turns (untimed) under the protocol trace and returns the counts."""
    wall: list[float] = []
    cpu: list[float] = []
    out: dict[str, Any] = {"empty": size(), "marks": {}}
    for n in range(1, marks[-1] + 1):
        c0, t0 = time.process_time(), time.perf_counter()
        step(n - 1)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        if n in marks:
            k = max(1, n // 10)
            out["marks"][n] = {
                "raw": raw[n - 1],
                "bytes": size(),
                "first_ms": 1000 * statistics.fmean(wall[:k]),
                "last_ms": 1000 * statistics.fmean(wall[n - k : n]),
                "cpu_last_ms": 1000 * statistics.fmean(cpu[n - k : n]),
                "max_ms": 1000 * max(wall),
            }
    if at_top is not None:
        out["at_top"] = at_top()
    if trace is not None:

        def more() -> None:
            for i in range(marks[-1], marks[-1] + TRACE_TURNS):
                step(i)

        out["trace"] = trace(more)
    return out


def raw_bytes(turns: list[list[dict[str, Any]]]) -> list[int]:
    """Raw conversation bytes after each turn (JSON lines, as bench_curves.py counts them)."""
    out, total = [], 0
    for turn in turns:
        total += sum(len(json.dumps(m, ensure_ascii=False).encode()) + 1 for m in turn)
        out.append(total)
    return out


def native(url: str | None, marks: list[int], turns: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """``Session.commit_turn`` every turn on a fresh archive (PostgreSQL schema or SQLite)."""
    raw = raw_bytes(turns)
    with ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="alpstore-bench-")))
        if url is None:  # the run root's SQLite file, even when $ALPSTORE_DATABASE_URL is set
            saved = os.environ.pop(DATABASE_URL_ENV, None)
            try:
                store = Store.open(root)
            finally:
                if saved is not None:
                    os.environ[DATABASE_URL_ENV] = saved
            path = sqlite_path_for_root(root)

            def size() -> int:
                return checkpointed_bytes(path)

        else:
            store = Store.open(root, url=url)
            size = stack.enter_context(schema_sizer(url))
        stack.callback(store.close)
        session = store.create_session(name="bench")

        def step(i: int) -> None:
            session.commit_turn(turns[i])

        def trace(more: Callable[[], None]) -> dict[str, Any]:
            tracer = Tracer()
            tracer.hook(store.db.engine)
            with tracer.window(driver_pgconn(store)):
                more()
            return tracer.counts(prepared_statements(store))

        if url is None:
            return run_turns(step, marks, size, raw)

        def at_top() -> dict[str, Any]:
            flush_statistics(store)
            time.sleep(0.2)
            return table_sizes(url)

        return run_turns(step, marks, size, raw, trace, at_top)


def graph_run(
    saver_kind: str, url: str, marks: list[int], raw: list[int], lg: Any, data: Any
) -> dict[str, Any]:
    """The bench_langgraph StateGraph on PostgreSQL with ``saver_kind``'s checkpointer."""
    from langgraph.graph import MessagesState

    inputs, replies, _ = data
    saver: Any
    with ExitStack() as stack:
        tracer = Tracer()
        if saver_kind == "postgres":
            from langgraph.checkpoint.postgres import PostgresSaver

            saver = stack.enter_context(PostgresSaver.from_conn_string(conninfo(url)))
            saver.setup()

            def pgconns() -> list[Any]:
                return [saver.conn.pgconn]

        else:
            from alpstore.integrations.langgraph import AlpstoreSaver

            root = stack.enter_context(tempfile.TemporaryDirectory(prefix="alpstore-bench-"))
            saver = stack.enter_context(AlpstoreSaver.open(root, url=url))
            tracer.hook(saver.store.db.engine)
            connects: list[int] = []
            event.listen(saver.store.db.engine, "connect", lambda *_: connects.append(1))

            def pgconns() -> list[Any]:
                return [driver_pgconn(saver.store)]

        size = stack.enter_context(schema_sizer(url))
        script: deque[Any] = deque()
        graph = lg.build(saver, MessagesState, script)
        config = {"configurable": {"thread_id": "bench"}}

        def step(i: int) -> None:
            script.extend(replies[i])
            try:
                graph.invoke({"messages": inputs[i]}, config)
            except Exception as err:
                raise RuntimeError(f"turn {i + 1}: {type(err).__name__}: {err}") from err

        def trace(more: Callable[[], None]) -> dict[str, Any]:
            before = len(connects) if saver_kind != "postgres" else 0
            with tracer.window(*pgconns()):
                more()
            counts = tracer.counts()
            if saver_kind != "postgres":
                counts["connects"] = len(connects) - before
            return counts

        return run_turns(step, marks, size, raw, trace)


def combined(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Repeated runs of one configuration: per mark the median of each figure and the range
    of the last-10 % time; the protocol trace and table sizes of the first run."""
    out = dict(runs[0])
    out["runs"] = len(runs)
    out["empty"] = statistics.median(r["empty"] for r in runs)
    out["marks"] = {}
    for n in runs[0]["marks"]:
        ms = [r["marks"][n] for r in runs]
        m = {k: statistics.median(x[k] for x in ms) for k in ms[0]}
        m["last_range"] = (min(x["last_ms"] for x in ms), max(x["last_ms"] for x in ms))
        out["marks"][n] = m
    return out


def table_sizes(url: str) -> dict[str, Any]:
    """The URL's schema per table: rows, table bytes (heap, TOAST, maps), index bytes, dead row
    versions; the stored bytes of the blob payloads; and the schema's size after
    ``VACUUM FULL`` of each table (what the live rows need; measured last, untimed)."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    engine = create_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            sizes = conn.exec_driver_sql(
                "SELECT c.relname, pg_table_size(c.oid), pg_indexes_size(c.oid), "
                "pg_stat_get_dead_tuples(c.oid) FROM pg_class c "
                "WHERE c.relnamespace = current_schema()::regnamespace "
                "AND c.relkind IN ('r', 'p', 'm') "
                "ORDER BY pg_total_relation_size(c.oid) DESC"
            ).all()
            tables = [
                (
                    str(name),
                    int(conn.exec_driver_sql(f'SELECT count(*) FROM "{name}"').scalar_one()),
                    int(tbl),
                    int(idx),
                    int(dead),
                )
                for name, tbl, idx, dead in sizes
            ]
            payload = conn.exec_driver_sql(
                "SELECT COALESCE(SUM(octet_length(payload)), 0) FROM blobs"
            ).scalar_one()
            for name, *_ in tables:  # one table at a time: never the whole database
                conn.exec_driver_sql(f'VACUUM FULL "{name}"')
            compacted = conn.exec_driver_sql(
                "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "WHERE c.relnamespace = current_schema()::regnamespace "
                "AND c.relkind IN ('r', 'p', 'm')"
            ).scalar_one()
    finally:
        engine.dispose()
    return {"tables": tables, "blob_payload": int(payload), "compacted": int(compacted)}


def flush_statistics(store: Store) -> None:
    """Make the store's server backend publish its table statistics (dead rows) now."""
    with suppress(Exception), store.db.read() as conn:  # pg_stat_force_next_flush: PG ≥ 15
        conn.exec_driver_sql("SELECT pg_stat_force_next_flush()")


def commit_floor(url: str) -> dict[str, float]:
    """ms per one-row INSERT + COMMIT on this server: the WAL flush any durable turn pays."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    out = {}
    for name, target in (("on", url), ("off", with_options(url, "-csynchronous_commit=off"))):
        engine = create_engine(target, poolclass=NullPool)
        with engine.connect() as conn:
            conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS bench_floor (x int)")
            conn.commit()
            times = []
            for i in range(FLOOR_COMMITS):
                t0 = time.perf_counter()
                conn.exec_driver_sql("INSERT INTO bench_floor VALUES (%(x)s)", {"x": i})
                conn.commit()
                times.append(time.perf_counter() - t0)
        engine.dispose()
        out[name] = 1000 * statistics.median(times)
    return out


def run_all(
    base: str,
    turns: int,
    alpstore_turns: int,
    *,
    with_saver: bool = False,
    repeat: int = 3,
    progress: bool = True,
) -> dict[str, Any]:
    """Every configuration on the same conversation, in this process."""
    top = max(turns, alpstore_turns)
    convo = conversation_turns(top + TRACE_TURNS)
    raw = raw_bytes(convo)
    a_marks = sorted({m for m in (MARK, turns, alpstore_turns) if m <= alpstore_turns})
    g_marks = sorted({m for m in (MARK, turns) if m <= turns})
    rows: dict[str, dict[str, Any]] = {}
    load = os.getloadavg()[0]

    def note(name: str, result: dict[str, Any]) -> None:
        rows[name] = result
        if progress:
            last = result["marks"][max(result["marks"])]
            print(
                f"{name}: {last['bytes'] / 1e6:.2f} MB, {last['last_ms']:.2f} ms/turn",
                flush=True,
            )

    natives: dict[str, list[dict[str, Any]]] = {NATIVE_PG: [], NATIVE_ASYNC: [], NATIVE_SQLITE: []}
    for _ in range(repeat):  # interleaved, so a busy spell of the machine hits every row
        with pg_schema(base) as url:
            natives[NATIVE_PG].append(native(url, a_marks, convo))
        with pg_schema(base) as url:
            off = with_options(url, "-csynchronous_commit=off")
            natives[NATIVE_ASYNC].append(native(off, a_marks, convo))
        natives[NATIVE_SQLITE].append(native(None, a_marks, convo))
    for name, runs in natives.items():
        backend = "SQLite" if name == NATIVE_SQLITE else "PostgreSQL"
        note(name, {"backend": backend, **combined(runs)})
    skipped: dict[str, str] = {}
    import pytest

    try:  # bench_langgraph skips itself (pytest.importorskip) without LangGraph
        lg: Any = importlib.import_module("benchmarks.bench_langgraph")
        importlib.import_module("langgraph.checkpoint.postgres")
    except (ImportError, pytest.skip.Exception) as err:
        lg = None
        skipped[LG_POSTGRES] = skipped[LG_ALPSTORE] = str(err).strip() or type(err).__name__
    if lg is not None:
        data = lg.conversation(turns + TRACE_TURNS)
        graphs = [(LG_POSTGRES, "postgres")]
        if with_saver:
            graphs.append((LG_ALPSTORE, "alpstore"))
        else:
            skipped[LG_ALPSTORE] = f"opt-in (`--with-alpstore-saver`, ${SAVER_ENV}=1)"
        for name, kind in graphs:
            try:
                with pg_schema(base) as url:
                    note(
                        name,
                        {"backend": "PostgreSQL", **graph_run(kind, url, g_marks, raw, lg, data)},
                    )
            except Exception as err:  # reported in the table, the other rows still stand
                first = (str(err).strip().splitlines() or [""])[0][:160]
                skipped[name] = f"failed: {type(err).__name__}: {first}"
                if progress:
                    print(f"{name}: {skipped[name]}", flush=True)
    with pg_schema(base) as url:
        floor = commit_floor(url)
    return {
        "turns": turns,
        "alpstore_turns": alpstore_turns,
        "rows": rows,
        "skipped": skipped,
        "floor": floor,
        "server": pg_server_version(base) or "PostgreSQL",
        "load": load,
        "load_end": os.getloadavg()[0],
        "repeat": repeat,
        "with_saver": with_saver,
        "local": any(h in base for h in ("@127.0.0.1", "@localhost", "@[::1]")),
    }


# ------------------------------------------------------------------------------- reporting
def _mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB"


def _last(row: dict[str, Any], m: dict[str, Any]) -> str:
    if row.get("runs", 1) > 1:
        lo, hi = m["last_range"]
        return f"{m['last_ms']:.2f} ({lo:.2f}–{hi:.2f})"
    return f"{m['last_ms']:.2f}"


def report(result: dict[str, Any]) -> str:
    """postgres.md: the tables, the command, the machine and a reading against the goals."""
    rows, floor = result["rows"], result["floor"]
    turns, a_turns = result["turns"], result["alpstore_turns"]
    command = f"python benchmarks/bench_postgres.py --turns {turns}"
    if a_turns != 1000:
        command += f" --alpstore-turns {a_turns}"
    if result["repeat"] != 3:
        command += f" --repeat {result['repeat']}"
    if result["with_saver"]:
        command += " --with-alpstore-saver"
    where = "on the same machine over TCP (127.0.0.1)" if result["local"] else "over the network"
    lines = [
        f"# {TITLE}",
        "",
        f"Command: `{command}` ({os.cpu_count()} shared CPUs, {platform.python_implementation()} "
        f"{platform.python_version()}, {result['server']} {where}, default server settings "
        "(`synchronous_commit=on`); SQLite in WAL mode on the same disk; 1-minute load "
        f"average {result['load']:.1f} when the run started, {result['load_end']:.1f} when it "
        "ended).",
        "",
        "One generated coding-agent conversation (`alpstore.samples.generate`), a checkpoint "
        "after every turn, all rows in one process run, each PostgreSQL row in a fresh schema. "
        "Stored = `pg_total_relation_size` summed over the schema's tables (heap, TOAST, "
        "indexes) — on SQLite the file with its WAL folded in; empty = the same right after "
        "setup. ms / turn = mean wall time of the first and the last 10 % of the turns up to "
        "that row; client CPU = this process's CPU time in the last 10 % (the rest is waiting "
        "for the server and the disk); max = the slowest turn so far. LangGraph rows run "
        "bench_langgraph's `StateGraph` (agent ⇄ tools, every step checkpointed), once; native "
        f"rows call `Session.commit_turn` and ran {result['repeat']} times, interleaved: each "
        "figure is the median of the runs, with the range of the last-10 % time in brackets.",
        "",
        "| store | backend | turns | raw | stored | empty | × raw | ms / turn first 10 % "
        "| ms / turn last 10 % | last ÷ first | client CPU ms (last 10 %) | max ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in rows.items():
        for n, m in sorted(r["marks"].items()):
            lines.append(
                f"| {name} | {r['backend']} | {n:,} | {_mb(m['raw'])} | {_mb(m['bytes'])} "
                f"| {_mb(r['empty'])} | {m['bytes'] / m['raw']:.2f} | {m['first_ms']:.2f} "
                f"| {_last(r, m)} | {m['last_ms'] / m['first_ms']:.2f} "
                f"| {m['cpu_last_ms']:.2f} | {m['max_ms']:.0f} |"
            )
    for name, why in result["skipped"].items():
        lines.append(
            f"| {name} | PostgreSQL | — | — | not run: {why} | — | — | — | — | — | — | — |"
        )
    lines += [
        "",
        f"Floor on this server: a one-row `INSERT` + `COMMIT` takes {floor['on']:.2f} ms "
        f"(median of {FLOOR_COMMITS}; {floor['off']:.2f} ms with `synchronous_commit=off`) — "
        "the WAL flush every durable transaction waits for.",
        "",
    ]
    traced = {n: r["trace"] for n, r in rows.items() if "trace" in r}
    if traced:
        lines += [
            f"Protocol per turn (libpq trace of {TRACE_TURNS} more turns after the last row, "
            "untimed): statements = executions (an executemany counts each row), round trips = "
            "times the client waited for the server, transactions = times the server went back "
            "to idle (a COMMIT, or an autocommitted statement or pipeline sync), connections = "
            "the PostgreSQL connections these turns used (new = opened during them).",
            "",
            "| store | statements / turn | round trips / turn | transactions / turn "
            "| KB sent / turn | KB received / turn | connections (new) |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for name, t in traced.items():
            lines.append(
                f"| {name} | {sum(t['statements'].values()) / TRACE_TURNS:.1f} "
                f"| {t['round_trips'] / TRACE_TURNS:.1f} | {t['transactions'] / TRACE_TURNS:.1f} "
                f"| {t['sent'] / 1e3 / TRACE_TURNS:.1f} | {t['received'] / 1e3 / TRACE_TURNS:.1f} "
                f"| {t['connections']} ({t.get('connects', 0)}) |"
            )
        native_trace = traced.get(NATIVE_PG)
        if native_trace:
            per = ", ".join(
                f"{k} ×{v / TRACE_TURNS:g}" for k, v in native_trace["statements"].most_common()
            )
            lines += ["", f"One alpstore `commit_turn` on PostgreSQL, by statement: {per}.", ""]
    pg = rows.get(NATIVE_PG)
    if pg and pg.get("at_top"):
        top = max(pg["marks"])
        lines += [
            f"Where alpstore's bytes are on PostgreSQL at {top:,} turns (first run; table = "
            "`pg_table_size`: heap, TOAST, free-space and visibility maps; indexes = "
            "`pg_indexes_size`):",
            "",
            "| table | rows | dead row versions | table | indexes | total | bytes / row |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for name, count, tbl, idx, dead in pg["at_top"]["tables"]:
            per = f"{(tbl + idx) / count:,.0f}" if count else "—"
            lines.append(
                f"| {name} | {count:,} | {dead:,} | {tbl / 1e3:,.0f} KB | {idx / 1e3:,.0f} KB "
                f"| {(tbl + idx) / 1e3:,.0f} KB | {per} |"
            )
        lines.append("")
    lines += reading(result)
    return "\n".join(lines).rstrip() + "\n"


def reading(result: dict[str, Any]) -> list[str]:
    """The goals of issue 7 against what was measured (computed, not hand-written)."""
    rows, floor = result["rows"], result["floor"]
    out = ["## Reading it against the goals (≤ 0.6× raw, ≤ 3 ms per turn, flat)", ""]
    pg = rows.get(NATIVE_PG)
    if pg is None:
        return out
    for n, m in sorted(pg["marks"].items()):
        ratio, flat = m["bytes"] / m["raw"], m["last_ms"] / m["first_ms"]
        verdicts = [
            f"{ratio:.2f}× raw ({'meets' if ratio <= GOAL_RATIO else 'misses'} ≤ {GOAL_RATIO}×)",
            f"{m['last_ms']:.2f} ms per turn over the last 10 % "
            f"({'meets' if m['last_ms'] <= GOAL_MS else 'misses'} ≤ {GOAL_MS:g} ms)",
            f"last ÷ first {flat:.2f} ({'flat' if flat <= FLAT else 'not flat'}: goal ≤ {FLAT})",
        ]
        out.append(f"- alpstore on PostgreSQL at {n:,} turns: " + "; ".join(verdicts) + ".")
    top = max(pg["marks"])
    m = pg["marks"][top]
    lg = rows.get(LG_POSTGRES)
    if lg:
        g_top = max(lg["marks"])
        g = lg["marks"][g_top]
        a = pg["marks"].get(g_top)
        if a:
            out.append(
                f"- At {g_top:,} turns LangGraph's PostgresSaver holds {_mb(g['bytes'])} "
                f"({g['bytes'] / g['raw']:.0f}× raw) and spends {g['last_ms']:.0f} ms on each of "
                f"the last turns; alpstore holds {g['bytes'] / a['bytes']:.0f}× fewer bytes and "
                f"spends {g['last_ms'] / a['last_ms']:.0f}× less time per turn. The LangGraph "
                "time includes the graph's own work (several steps, each checkpointed, per "
                "turn); "
                + (
                    "the `AlpstoreSaver` row runs the same graph on the same server."
                    if LG_ALPSTORE in rows
                    else "`--with-alpstore-saver` runs the same graph with alpstore's saver."
                )
            )
    sqlite = rows[NATIVE_SQLITE]["marks"].get(top)
    if m["bytes"] / m["raw"] > GOAL_RATIO:
        empty = pg["empty"]
        text = (
            f"- Bytes: {_mb(empty)} of the {_mb(m['bytes'])} at {top:,} turns is the empty "
            f"archive (every table and index takes at least one 8 KB page); without it "
            f"{(m['bytes'] - empty) / m['raw']:.2f}× raw."
        )
        if sqlite:
            text += f" SQLite stores the same turns in {sqlite['bytes'] / m['raw']:.2f}× raw."
        at_top = pg.get("at_top")
        if at_top:
            text += (
                f" After `VACUUM FULL` of every table the same archive takes "
                f"{_mb(at_top['compacted'])} ({at_top['compacted'] / m['raw']:.2f}× raw)."
            )
        blobs_row = next((t for t in (at_top or {}).get("tables", []) if t[0] == "blobs"), None)
        if at_top and blobs_row and blobs_row[1]:
            _, count, tbl, idx, dead = blobs_row
            text += (
                f" The {count:,} blobs hold {at_top['blob_payload'] / 1e3:,.0f} KB of "
                f"compressed payload in {tbl / 1e3:,.0f} KB of table plus {idx / 1e3:,.0f} KB "
                f"of indexes ({(tbl + idx - at_top['blob_payload']) / count:.0f} bytes per blob "
                "besides its payload)"
                + (
                    f", with {dead:,} dead row versions: the blobs rewritten when the automatic "
                    "dictionary was trained, whose old versions VACUUM makes reusable but does "
                    "not give back (alpstore VACUUMs a small SQLite archive after its first "
                    "dictionary; on PostgreSQL nothing reclaims them)."
                    if dead
                    else "."
                )
            )
        out.append(text)
    trace = pg.get("trace")
    if trace:
        waiting = m["last_ms"] - m["cpu_last_ms"]
        rt = trace["round_trips"] / TRACE_TURNS
        async_m = rows.get(NATIVE_ASYNC, {}).get("marks", {}).get(top)
        text = (
            f"- Time: of {m['last_ms']:.2f} ms per turn at {top:,} turns, "
            f"{m['cpu_last_ms']:.2f} ms is this process's CPU (encoding, compression, "
            f"SQLAlchemy, psycopg) and {waiting:.2f} ms is waiting: {rt:.0f} round trips per "
            f"turn plus the COMMIT's WAL flush (a one-row `INSERT` + `COMMIT` takes "
            f"{floor['on']:.2f} ms here)."
        )
        if sqlite:
            text += (
                f" The same turns on SQLite take {sqlite['last_ms']:.2f} ms "
                f"({sqlite['cpu_last_ms']:.2f} ms CPU)."
            )
        if async_m:
            text += (
                f" With `synchronous_commit=off` they take {async_m['last_ms']:.2f} ms: waiting "
                f"for the WAL flush accounts for about {m['last_ms'] - async_m['last_ms']:.1f} "
                "ms of the turn (runs of this machine vary; see the ranges)."
            )
        out.append(text)
    failed = result["skipped"].get(LG_ALPSTORE, "")
    if failed.startswith("failed"):
        out.append(f"- `AlpstoreSaver` under the same graph on PostgreSQL {failed}.")
    return [*out, ""]


def update_summary(text: str, path: Path = SUMMARY) -> None:
    """Put postgres.md into RESULTS.md as its own section (replacing an earlier one)."""
    section = re.sub(r"^(#+) ", r"#\1 ", text.strip(), flags=re.M) + "\n"
    head = f"## {TITLE}"
    old = path.read_text(encoding="utf-8") if path.exists() else "# Benchmark results\n"
    if head in old:
        start = old.index(head)
        after = re.search(r"^## (?!#)", old[start + len(head) :], flags=re.M)
        rest = "" if after is None else old[start + len(head) + after.start() :]
        new = old[:start] + section + ("\n" + rest if rest else "")
    elif "\n## Other benchmarks" in old:
        i = old.index("\n## Other benchmarks")
        new = old[: i + 1] + section + "\n" + old[i + 1 :]
    else:
        new = old.rstrip() + "\n\n" + section
    path.write_text(new, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=400, help="turns (LangGraph rows)")
    parser.add_argument(
        "--alpstore-turns", type=int, default=1000, help="turns for the alpstore native rows"
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="markdown report to write")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs of each native alpstore row (median)"
    )
    parser.add_argument(
        "--with-alpstore-saver",
        action="store_true",
        help="also run alpstore's AlpstoreSaver under the same StateGraph on PostgreSQL",
    )
    parser.add_argument(
        "--no-summary", action="store_true", help="leave benchmarks/RESULTS.md alone"
    )
    args = parser.parse_args(argv)
    url = postgres_url()
    why = unavailable(url)
    if why or url is None:
        print(f"bench_postgres: skipped: {why}", file=sys.stderr)
        return 2
    with_saver = args.with_alpstore_saver or os.environ.get(SAVER_ENV) == "1"
    result = run_all(url, args.turns, max(args.turns, args.alpstore_turns), with_saver=with_saver)
    text = report(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    if not args.no_summary:
        update_summary(text)
    print(text)
    return 0


def test_postgres_every_turn(benchmark: Any) -> None:
    """pytest --benchmark-only entry: one round of the whole comparison."""
    import pytest

    url = postgres_url()
    why = unavailable(url)
    if why or url is None:
        pytest.skip(why or "no PostgreSQL")
    turns = int(os.environ.get("ALPSTORE_BENCH_PG_TURNS", "400"))
    a_turns = max(turns, int(os.environ.get("ALPSTORE_BENCH_PG_ALPSTORE_TURNS", "1000")))
    opts = {
        "progress": False,
        "with_saver": os.environ.get(SAVER_ENV) == "1",
        "repeat": max(1, int(os.environ.get("ALPSTORE_BENCH_PG_REPEAT", "3"))),
    }
    result = benchmark.pedantic(
        run_all, args=(url, turns, a_turns), kwargs=opts, rounds=1, iterations=1
    )
    text = report(result)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text, encoding="utf-8")
    benchmark.extra_info["rows"] = {
        name: {str(n): m for n, m in r["marks"].items()} for name, r in result["rows"].items()
    }
    print("\n" + text)


if __name__ == "__main__":
    sys.exit(main())
