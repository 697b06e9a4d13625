"""Pack frames (issue 33): bytes of the native `commit_turn` path before and after
`archive pack`, PostgreSQL at 400 turns after an import (beside its schema alone, one turn
imported, and the growth to 2,000 turns) and the same growth written turn by turn with
`commit_turn` (its background packer's work included), one message read from a pack, and a
10,000-message head hydrated packed vs loose — each beside its baseline in the same run.

Run: ``python benchmarks/bench_packs.py [--postgres]`` (PostgreSQL from
$ALPSTORE_BENCH_POSTGRES_URL or $ALPSTORE_TEST_POSTGRES_URL, a fresh schema dropped after), or
collected by pytest with ``--benchmark-only`` (SQLite; the read of one packed message is the
timed function). Writes ``benchmarks/results/packs.md``.

Conversations from ``alpstore.samples.generate`` (seed 7), raw = the messages as JSON lines.
SQLite sizes: the file with its WAL folded in after the store closed. PostgreSQL:
``pg_total_relation_size`` summed over the schema's tables (heap, TOAST, indexes, maps), and
what each table's heap, TOAST and indexes add from 400 to 2,000 turns.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import zstandard

from alpstore.db import sqlite_path_for_root
from alpstore.importers import import_history, parse_history
from alpstore.samples import write_jsonl
from alpstore.store import Store
from benchmarks._util import checkpointed_bytes, conversation_turns, write_results

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "packs.md"


def _raw(turns: list[list[dict[str, Any]]]) -> bytes:
    import json

    return b"".join(json.dumps(m, ensure_ascii=False).encode() + b"\n" for t in turns for m in t)


def native(turns: list[list[dict[str, Any]]], root: Path) -> dict[str, Any]:
    """Commit every turn, close, measure; open, pack, compact, close, measure."""
    root.mkdir()
    store = Store.open(root)
    try:
        session = store.create_session(name="bench")
        for turn in turns:
            session.commit_turn(turn)
        store.archive.wait_for_training()
    finally:
        store.close()
    db = sqlite_path_for_root(root)
    before = checkpointed_bytes(db)
    store = Store.open(root)
    try:
        began = time.perf_counter()
        report = store.archive.pack_cold()
        store.archive.compact()
        took = time.perf_counter() - began
    finally:
        store.close()
    return {"before": before, "after": checkpointed_bytes(db), "pack_s": took, "report": report}


def reads(root: Path, *, packed: bool, n: int = 400) -> dict[str, float]:
    """Median µs of ``archive.get`` of one random message: cold (the frame cache emptied
    first, so one frame is read and decompressed) and warm."""
    store = Store.open(root)
    try:
        if packed:
            store.archive.pack_cold()
        with store.db.read() as conn:
            digests = [bytes(d) for (d,) in conn.exec_driver_sql("SELECT digest FROM blobs")]
        rng = random.Random(3)
        picks = [rng.choice(digests) for _ in range(n)]
        cold, warm = [], []
        for d in picks:
            store.archive._frames.clear()
            t = time.perf_counter()
            store.archive.get(d)  # type: ignore[arg-type]
            cold.append(time.perf_counter() - t)
            t = time.perf_counter()
            store.archive.get(d)  # type: ignore[arg-type]
            warm.append(time.perf_counter() - t)
        return {"cold": 1e6 * statistics.median(cold), "warm": 1e6 * statistics.median(warm)}
    finally:
        store.close()


def hydrate(root: Path, *, packed: bool, rounds: int = 5) -> float:
    """Best seconds of hydrating the session's head (every message), a fresh reader each."""
    store = Store.open(root)
    try:
        if packed:
            store.archive.pack_cold()
        ck = store.get_session("bench").checkpoints()[-1]
    finally:
        store.close()
    best = float("inf")
    for _ in range(rounds):
        reader = Store.open(root)
        try:
            t = time.perf_counter()
            reader.hydrate(reader.get_checkpoint(ck.id))
            best = min(best, time.perf_counter() - t)
        finally:
            reader.close()
    return best


RELATIONS = (
    "SELECT c.relname, pg_relation_size(c.oid, 'main') + pg_relation_size(c.oid, 'fsm') "
    "+ pg_relation_size(c.oid, 'vm'), "
    "COALESCE(pg_total_relation_size(NULLIF(c.reltoastrelid, 0)), 0), pg_indexes_size(c.oid) "
    "FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace "
    "AND c.relkind IN ('r', 'p')"
)
"""PostgreSQL: each table's heap (with its maps), TOAST (with its index) and indexes; their sum
is ``pg_total_relation_size``."""


def growth_by_relation(pg: dict[str, Any], path: str = "") -> list[str]:
    """Table rows: where each further raw byte from 400 to 2,000 turns goes, per relation."""
    after, long = pg["relations"]["after"], pg["relations"]["long"]
    raw = pg["raw"]["long"] - pg["raw"]["after"]
    lines = [
        "",
        f"| {path}each further raw byte, 400 → 2,000 turns | heap + maps | TOAST | indexes | all |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in sorted(long):
        grew = [b - a for a, b in zip(after.get(name, (0, 0, 0)), long[name], strict=True)]
        if any(grew):
            cells = " | ".join(f"{g / raw:.4f}×" for g in grew)
            lines.append(f"| `{name}` | {cells} | {sum(grew) / raw:.4f}× |")
    return lines


def postgres_import(turns: int, long: int = 2000) -> dict[str, Any]:
    """Import a ``turns``-turn conversation on PostgreSQL, with and without the settle the
    import command runs after its transaction (on PostgreSQL the import packs its messages as
    it writes them, ``SqlArchive.store_packed``; the settle trains a dictionary only for what
    it left loose); beside it, each on a fresh schema: the schema alone, an archive of one
    turn (what the tables cost before a conversation's content: every relation holding a row
    has at least one 8 KB page per index and its maps) and a ``long``-turn import (what
    each further byte of conversation costs). ``{label: bytes}`` and ``{label: raw bytes}``
    under ``"raw"``."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from alpstore.testing.postgres import fresh_schema

    base = _postgres_base()
    runs = (("empty", 0, False), ("one", 1, True), ("before", turns, False))
    runs += (("after", turns, True), ("long", long, True))
    out: dict[str, Any] = {"raw": {}}
    admin = create_engine(base, poolclass=NullPool)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for label, count, settle in runs:
                src = Path(tmp) / f"c{count}.jsonl"
                if count and not src.exists():
                    write_jsonl(src, count, seed=7)
                out["raw"][label] = src.stat().st_size if count else 0
                with fresh_schema(admin, base, "bench_packs_") as url:
                    store = Store.open(Path(tmp) / label, url=url)
                    try:
                        if count:
                            import_history(store, parse_history(src, "auto"), name="bench")
                        if settle:
                            store.archive.settle()
                    finally:
                        store.close()
                    parts = _vacuumed_sizes(url)
                    out[label] = sum(map(sum, parts.values()))
                    out.setdefault("relations", {})[label] = parts
    finally:
        admin.dispose()
    return out


def _postgres_base() -> str:
    base = os.environ.get("ALPSTORE_BENCH_POSTGRES_URL") or os.environ.get(
        "ALPSTORE_TEST_POSTGRES_URL"
    )
    if not base:
        raise SystemExit("no PostgreSQL: set ALPSTORE_BENCH_POSTGRES_URL")
    return base


def _vacuumed_sizes(url: str, table: str = "") -> dict[str, tuple[int, int, int]]:
    """``VACUUM`` (``table``, else every table: the maps, as autovacuum leaves them), then
    each table's heap, TOAST and indexes (:data:`RELATIONS`)."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    probe = create_engine(url, poolclass=NullPool).execution_options(isolation_level="AUTOCOMMIT")
    try:
        with probe.connect() as conn:
            conn.exec_driver_sql(f"VACUUM {table}")
            return {
                str(name): (int(heap), int(toast), int(indexes))
                for name, heap, toast, indexes in conn.exec_driver_sql(RELATIONS)
            }
    finally:
        probe.dispose()


def postgres_native(turns: int, long: int = 2000) -> dict[str, Any]:
    """The same conversation as :func:`postgres_import`, written turn by turn with
    ``Session.commit_turn`` on PostgreSQL by one long-lived writer, ``turns`` and ``long``
    turns, each on a fresh schema; the same ``{label: bytes}``, ``"raw"`` and
    ``"relations"`` (labels ``"after"`` and ``"long"``).

    The writer's own background threads run as they do for an agent whose turns come
    seconds apart: when a turn starts the dictionary trainer (``AUTO_TRAIN_SAMPLES`` small
    blobs) or the packer (on PostgreSQL ``PACK_EVERY_POSTGRESQL`` new blobs beyond
    ``PACK_KEEP_LOOSE``; it also merges the sessions' small runs), the pause before the next
    turn lets it finish (waited for here), and autovacuum then makes the rows it deleted
    reusable (the loose blobs it packed, the runs it merged: ``VACUUM`` here, as autovacuum
    would in the minutes between). At the mark the archive is as the packer leaves it: every
    blob packed but the newest ``PACK_KEEP_LOOSE`` (``pack_cold(keep_loose=PACK_KEEP_LOOSE)``,
    its call), so both marks keep as many loose.
    """
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from alpstore.archive.sql import PACK_KEEP_LOOSE, SqlArchive
    from alpstore.testing.postgres import fresh_schema

    base = _postgres_base()
    conversation = conversation_turns(long)
    out: dict[str, Any] = {"raw": {}, "relations": {}, "packings": {}}
    admin = create_engine(base, poolclass=NullPool)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for label, count in (("after", turns), ("long", long)):
                written = conversation[:count]
                out["raw"][label] = len(_raw(written))
                with fresh_schema(admin, base, "bench_packs_") as url:
                    store = Store.open(Path(tmp) / label, url=url)
                    packings = 0
                    try:
                        archive = store.archive
                        assert isinstance(archive, SqlArchive)
                        session = store.create_session(name="bench")
                        for turn in written:
                            session.commit_turn(turn)
                            if archive.training:  # the pause before the next turn
                                archive.wait_for_training()
                            if archive._packer is not None:  # (the same)
                                archive.wait_for_packing()
                                _vacuumed_sizes(url)  # autovacuum, meanwhile
                                packings += 1
                        archive.wait_for_training()
                        archive.pack_cold(keep_loose=PACK_KEEP_LOOSE)
                    finally:
                        store.close()
                    parts = _vacuumed_sizes(url)
                    out[label] = sum(map(sum, parts.values()))
                    out["relations"][label] = parts
                    out["packings"][label] = packings
    finally:
        admin.dispose()
    return out


def run_all(postgres: bool) -> str:
    lines = ["Command: `python benchmarks/bench_packs.py" + (" --postgres`" if postgres else "`")]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        turns = conversation_turns(1000)[:1000]
        raw = _raw(turns)
        n = native(turns, work / "native")
        z3 = len(zstandard.ZstdCompressor(level=3).compress(raw))
        z19 = len(zstandard.ZstdCompressor(level=19).compress(raw))
        lines += [
            "",
            "| native `commit_turn`, 1,000 turns | raw | before `archive pack` | after | "
            "pack + compact took | zstd-3 stream | zstd-19 stream |",
            "|---|---:|---:|---:|---:|---:|---:|",
            f"| SQLite | {len(raw) / 1e6:.2f} MB | {n['before'] / len(raw):.3f}× | "
            f"**{n['after'] / len(raw):.3f}×** | {n['pack_s'] * 1000:.0f} ms | "
            f"{z3 / len(raw):.3f}× | {z19 / len(raw):.3f}× |",
        ]
        # one message, and a 10,000-message head: the same archive loose, then packed
        big = conversation_turns(1700)[:1700]
        for name in ("loose", "packed"):
            root = work / f"h-{name}"
            root.mkdir()
            store = Store.open(
                root,
            )
            try:
                session = store.create_session(name="bench")
                for turn in big:
                    session.commit_turn(turn)
                store.archive.wait_for_training()
            finally:
                store.close()
        r_loose = reads(work / "h-loose", packed=False)
        r_packed = reads(work / "h-packed", packed=True)
        h_loose = hydrate(work / "h-loose", packed=False)
        h_packed = hydrate(work / "h-packed", packed=True)
        count = sum(len(t) for t in big)
        lines += [
            "",
            f"| {count:,}-message archive | loose (as before) | packed | packed ÷ loose |",
            "|---|---:|---:|---:|",
            f"| one message, `archive.get`, frame cache empty (median µs) | "
            f"{r_loose['cold']:.0f} | **{r_packed['cold']:.0f}** | "
            f"{r_packed['cold'] / r_loose['cold']:.2f} |",
            f"| one message, frame cached (median µs) | {r_loose['warm']:.0f} | "
            f"{r_packed['warm']:.0f} | {r_packed['warm'] / r_loose['warm']:.2f} |",
            f"| hydrate the head, {count:,} messages (best of 5, ms) | {h_loose * 1000:.1f} | "
            f"**{h_packed * 1000:.1f}** | {h_packed / h_loose:.2f} |",
        ]
    if postgres:
        pg = postgres_import(400)
        raw = pg["raw"]["after"]
        grew = (pg["long"] - pg["after"]) / (pg["raw"]["long"] - raw)
        lines += [
            "",
            "| PostgreSQL, `session import` of 400 turns | raw | empty schema | one turn "
            "imported (the floor) | import alone (messages packed as they are written) | "
            "import + settle | each further raw byte, 400 → 2,000 turns |",
            "|---|---:|---:|---:|---:|---:|---:|",
            f"| tables + indexes + TOAST + maps, ÷ the 400-turn raw | {raw / 1e6:.2f} MB | "
            f"{pg['empty'] / raw:.3f}× ({pg['empty'] / 1024:.0f} KB) | "
            f"{pg['one'] / raw:.3f}× ({pg['one'] / 1024:.0f} KB) | "
            f"{pg['before'] / raw:.3f}× | **{pg['after'] / raw:.3f}×** | {grew:.3f}× |",
        ]
        lines += growth_by_relation(pg, "`session import`: ")
        nat = postgres_native(400)
        raw = nat["raw"]["after"]
        grew_native = (nat["long"] - nat["after"]) / (nat["raw"]["long"] - raw)
        lines += [
            "",
            "| PostgreSQL, native `commit_turn` (the writer's packer as between an agent's "
            "turns) | raw | 400 turns | 2,000 turns | each further raw byte, 400 → 2,000 turns |",
            "|---|---:|---:|---:|---:|",
            f"| tables + indexes + TOAST + maps, ÷ its raw ({nat['packings']['long']} "
            f"packings at 2,000 turns, {nat['packings']['after']} at 400) | "
            f"{raw / 1e6:.2f} MB | {nat['after'] / raw:.3f}× | "
            f"{nat['long'] / nat['raw']['long']:.3f}× | **{grew_native:.3f}×** |",
        ]
        lines += growth_by_relation(nat, "`commit_turn`: ")
        lines += [
            "",
            f"PostgreSQL growth per raw byte, 400 → 2,000 turns (goal ≤ 0.35×): "
            f"`session import` **{grew:.3f}×**, `commit_turn` **{grew_native:.3f}×**.",
        ]
    return "\n".join(lines) + "\n"


def test_pack_read(benchmark: Any, tmp_path: Path) -> None:
    """The timed function: one message read from a pack, its frame not cached."""
    store = Store.open(tmp_path)
    try:
        session = store.create_session(name="bench")
        for turn in conversation_turns(200)[:200]:
            session.commit_turn(turn)
        store.archive.pack_cold()
        with store.db.read() as conn:
            digests = [bytes(d) for (d,) in conn.exec_driver_sql("SELECT digest FROM blobs")]
        rng = random.Random(5)

        def one() -> None:
            store.archive._frames.clear()
            store.archive.get(rng.choice(digests))  # type: ignore[arg-type]

        benchmark(one)
    finally:
        store.close()
    text = run_all(False)
    write_results(RESULTS, text)
    print("\n" + text)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--postgres", action="store_true")
    args = parser.parse_args()
    out = run_all(args.postgres)
    write_results(RESULTS, out)
    print(out)
