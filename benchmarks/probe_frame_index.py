"""Design probe for issue 42's second step (PostgreSQL): packed blobs described inside their
frame's row instead of a ``blobs`` row each — what each candidate layout costs per raw byte,
and what its deduplication lookup costs, before any of it is built.

Not a benchmark of shipped code: it builds the candidate layouts in scratch tables from what
the real import wrote, so the choices the migration must make (store the full digests or not,
how wide the indexed digest key is) are made on measured figures.

Part 1, the real path: a 400-turn and a 2,000-turn conversation imported (``import_history`` +
``settle``, as ``bench_packs.py --postgres``), each on a fresh schema, ``VACUUM``-ed; then,
in the same schema, every packed blob's row folded into a copy of its frame's row: ``first_id``
(ids are contiguous per frame on the import path: the probe checks), ``offsets`` (int4[] in
id order; a blob's length is the distance to the next offset in content order, the frame's
``raw_size`` closing the last), ``kinds`` (bytea, one byte a blob), ``prefixes`` (int4[] of the
first four digest bytes, in id order) with a GIN index on the key array, and, in the variants
that keep them, ``digests`` (bytea, 32 bytes a blob, ``STORAGE EXTERNAL``). Growth per raw
byte 400 → 2,000 turns = the tables' bytes with ``blobs`` and ``pack_frames`` replaced by the
variant's frame table.

Part 2, scale: 3,000 frames of 400 blobs (1.2 M blobs, random digests) in scratch tables: the
GIN's bytes per blob for keys of 32, 24, 20 and 16 bits of the digest, and the median time
of one deduplication lookup of six digests (five new, one stored: a turn's) — GIN ``&&``
then the candidates' positions rechecked against the full four-byte prefixes, in one
statement — beside today's unique b-tree on the 32-byte digest over the same 1.2 M digests,
alternating, in one connection.

Run: ``python benchmarks/probe_frame_index.py`` (PostgreSQL from $ALPSTORE_BENCH_POSTGRES_URL
or $ALPSTORE_TEST_POSTGRES_URL; fresh schemas, dropped after). Writes
``benchmarks/results/frame_index.md``.
"""

from __future__ import annotations

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

from benchmarks._util import write_results

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "frame_index.md"

WIDTHS = (32, 24, 20, 16)
"""Bits of the digest the GIN indexes (the rest of the first four bytes rechecked)."""

SIZES = (
    "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c WHERE c.relnamespace = "
    "current_schema()::regnamespace AND c.relkind IN ('r', 'p')"
)

OFFSET = (
    "CASE length(payload) WHEN 2 THEN get_byte(payload, 1) "
    "WHEN 3 THEN (get_byte(payload, 1) & 127) | (get_byte(payload, 2) << 7) "
    "ELSE (get_byte(payload, 1) & 127) | ((get_byte(payload, 2) & 127) << 7) "
    "| (get_byte(payload, 3) << 14) END"
)
"""A packed blob's offset in its frame (the pointer's second varint; frame ids below 128)."""

PREFIX = "('x' || encode(substring(digest from 1 for 4), 'hex'))::bit(32)::int4"


def _key(bits: int, expr: str) -> str:
    """The GIN key of a four-byte prefix ``expr`` (int4): its top ``bits`` bits."""
    return expr if bits == 32 else f"({expr} >> {32 - bits})"


def _frame_table(name: str, bits: int, digests: bool) -> list[str]:
    """Statements building the variant's frame table from ``pack_frames`` and ``blobs``."""
    keys = "" if bits == 32 else f", array_agg({_key(bits, PREFIX)} ORDER BY id) AS keys"
    dcol = ", string_agg(digest, ''::bytea ORDER BY id) AS digests" if digests else ""
    return [
        f"CREATE TABLE {name} AS SELECT f.*, m.first_id, m.n, m.offsets, m.kinds, m.prefixes"
        + (", m.keys" if bits != 32 else "")
        + (", m.digests" if digests else "")
        + " FROM pack_frames f JOIN (SELECT get_byte(payload, 0) AS fid, min(id) AS first_id, "
        f"count(*) AS n, array_agg({OFFSET} ORDER BY id) AS offsets, "
        "string_agg(set_byte('\\x00'::bytea, 0, kind), ''::bytea ORDER BY id) AS kinds, "
        f"array_agg({PREFIX} ORDER BY id) AS prefixes{keys}{dcol} "
        "FROM blobs WHERE codec = 4 GROUP BY 1) m ON m.fid = f.id",
        f"ALTER TABLE {name} ADD PRIMARY KEY (id)",
        f"ALTER TABLE {name} ALTER data SET STORAGE EXTERNAL",
        *([f"ALTER TABLE {name} ALTER digests SET STORAGE EXTERNAL"] if digests else []),
        f"CREATE INDEX {name}_first ON {name} (first_id)",
        f"CREATE INDEX {name}_key ON {name} USING gin ({'prefixes' if bits == 32 else 'keys'})",
    ]


def real_path(base: str) -> tuple[list[str], dict[str, Any]]:
    """Part 1: growth per raw byte 400 → 2,000 turns, today's layout and each variant."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from alpstore.importers import import_history, parse_history
    from alpstore.samples import write_jsonl
    from alpstore.store import Store
    from alpstore.testing.postgres import fresh_schema

    variants = [(f"nf_{bits}_{int(d)}", bits, d) for d in (True, False) for bits in (32, 20)]
    out: dict[str, Any] = {}
    admin = create_engine(base, poolclass=NullPool)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for turns in (400, 2000):
                src = Path(tmp) / f"c{turns}.jsonl"
                write_jsonl(src, turns, seed=7)
                with fresh_schema(admin, base, "probe_frames_") as url:
                    store = Store.open(Path(tmp) / f"r{turns}", url=url)
                    try:
                        import_history(store, parse_history(src, "auto"), name="bench")
                        store.archive.settle()
                    finally:
                        store.close()
                    eng = create_engine(url, poolclass=NullPool).execution_options(
                        isolation_level="AUTOCOMMIT"
                    )
                    try:
                        with eng.connect() as conn:
                            run = conn.exec_driver_sql
                            run("VACUUM")
                            before = dict(run(SIZES).all())
                            blobs, packed, gaps = run(
                                "SELECT (SELECT count(*) FROM blobs), (SELECT count(*) FROM "
                                "blobs WHERE codec = 4), (SELECT count(*) FROM (SELECT "
                                "max(id) - min(id) + 1 - count(*) AS g FROM blobs WHERE "
                                "codec = 4 GROUP BY get_byte(payload, 0)) x WHERE g <> 0)"
                            ).one()
                            top = run("SELECT max(id) FROM pack_frames").scalar_one()
                            assert top < 128, "the probe reads pointers of frame ids < 128"
                            for name, bits, digests in variants:
                                for stmt in _frame_table(name, bits, digests):
                                    run(stmt)
                            run("VACUUM")
                            after = dict(run(SIZES).all())
                            if turns == 2000:
                                ranges = range_reads(run)
                    finally:
                        eng.dispose()
                out[turns] = {
                    "raw": src.stat().st_size,
                    "before": before,
                    "after": after,
                    "blobs": blobs,
                    "packed": packed,
                    "gaps": gaps,
                }
    finally:
        admin.dispose()
    a, b = out[400], out[2000]
    dr = b["raw"] - a["raw"]
    kept = [k for k in b["before"] if k not in ("blobs", "pack_frames")]

    def total(run: dict[str, Any], frames: str | None) -> int:
        if frames is None:
            return sum(run["before"].values())
        return sum(run["before"][k] for k in kept) + run["after"][frames]

    lines = [
        "",
        f"Imported: 400 turns {a['raw'] / 1e6:.2f} MB raw, {a['blobs']:,} blobs "
        f"({a['packed']:,} packed); 2,000 turns {b['raw'] / 1e6:.2f} MB, {b['blobs']:,} blobs "
        f"({b['packed']:,} packed); frames whose blob ids are not contiguous: "
        f"{a['gaps']} and {b['gaps']}.",
        "",
        "| relation (today's layout) | growth per raw byte, 400 → 2,000 turns |",
        "|---|---:|",
    ]
    for k in sorted(b["before"], key=lambda k: -(b["before"][k] - a["before"].get(k, 0))):
        g = (b["before"][k] - a["before"].get(k, 0)) / dr
        if abs(g) >= 0.001:
            lines.append(f"| `{k}` | {g:.3f}× |")
    now = (total(b, None) - total(a, None)) / dr
    lines += [
        f"| **all** | **{now:.3f}×** |",
        "",
        "| packed blobs described in their frame's row | GIN key | frame table alone | "
        "all tables |",
        "|---|---:|---:|---:|",
    ]
    for name, bits, digests in variants:
        frames = (b["after"][name] - a["after"][name]) / dr
        whole = (total(b, name) - total(a, name)) / dr
        what = "with the 32-byte digests" if digests else "without digests (recomputed)"
        lines.append(f"| {what} | {bits} bits | {frames:.3f}× | **{whole:.3f}×** |")
    lines += ["", *ranges]
    return lines, out


TODAY = (
    "SELECT r.start + u.o - 1, b.id, b.digest, b.kind, b.raw_size, b.codec, b.payload "
    "FROM segment_runs r CROSS JOIN LATERAL unnest(r.blob_ids) WITH ORDINALITY AS u (blob_id, o) "
    "JOIN blobs b ON b.id = u.blob_id WHERE r.segment_id = %(s)s ORDER BY 1"
)
DESCRIBED = (
    "SELECT r.start + u.o - 1, u.blob_id, l.digest, l.kind, l.raw_size, l.codec, l.payload, "
    "f.id, u.blob_id - f.first_id FROM segment_runs r "
    "CROSS JOIN LATERAL unnest(r.blob_ids) WITH ORDINALITY AS u (blob_id, o) "
    "LEFT JOIN loose l ON l.id = u.blob_id LEFT JOIN nf_32_0 f ON f.ids @> u.blob_id "
    "WHERE r.segment_id = %(s)s ORDER BY 1"
)


def range_reads(run: Any, rounds: int = 30) -> list[str]:
    """Part 3: the head's whole range read as hydrate's statement does it, today's join with
    ``blobs`` against the frame-described layout (loose rows left-joined, each packed id's
    frame found through a GiST index on the frame's id range, ``int4range``: one entry a
    frame; ranges may overlap when another writer's ids interleave with an import's)."""
    run("CREATE TABLE loose AS SELECT * FROM blobs WHERE codec <> 4")
    run("ALTER TABLE loose ADD PRIMARY KEY (id)")
    run("ALTER TABLE nf_32_0 ADD COLUMN ids int4range")
    run("UPDATE nf_32_0 SET ids = int4range(first_id, (first_id + n)::int)")
    run("CREATE INDEX nf_32_0_ids ON nf_32_0 USING gist (ids)")
    run("VACUUM ANALYZE")
    seg, count = run(
        "SELECT segment_id, sum(cardinality(blob_ids)) FROM segment_runs GROUP BY 1 "
        "ORDER BY 2 DESC LIMIT 1"
    ).one()
    times: dict[str, list[float]] = {"today": [], "described": []}
    for r in range(rounds):
        for name in ("today", "described") if r % 2 else ("described", "today"):
            t = time.perf_counter()
            rows = run(TODAY if name == "today" else DESCRIBED, {"s": seg}).all()
            times[name].append(time.perf_counter() - t)
            assert len(rows) == count
    today, described = (1e3 * statistics.median(times[k]) for k in ("today", "described"))
    return [
        f"| the head's {count:,} entries in one statement (median of {rounds}, ms) | today: "
        "`JOIN blobs` | described: loose `LEFT JOIN` + frame by GiST id range | ratio |",
        "|---|---:|---:|---:|",
        f"| PostgreSQL, 2,000-turn import | {today:.1f} | {described:.1f} | "
        f"{described / today:.2f} |",
    ]


def scale(base: str, frames: int = 3000, per: int = 400, rounds: int = 400) -> list[str]:
    """Part 2: GIN bytes per blob and one six-digest lookup at 1.2 M blobs, per key width."""
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(base).set(drivername="postgresql").render_as_string(hide_password=False)
    rng = random.Random(2)
    digests = [rng.randbytes(32) for _ in range(frames * per)]
    lines = [
        "",
        f"| {frames * per:,} blobs in {frames:,} frames | index bytes a blob | "
        "six-digest lookup, median µs | frames read a lookup |",
        "|---|---:|---:|---:|",
    ]
    schema = f"probe_scale_{os.urandom(6).hex()}"
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.cursor()
        cur.execute(f"CREATE SCHEMA {schema}")
        try:
            cur.execute(f"SET search_path = {schema}")
            cur.execute("CREATE TABLE b (id serial PRIMARY KEY, digest bytea NOT NULL UNIQUE)")
            with cur.copy("COPY b (digest) FROM STDIN") as cp:
                for d in digests:
                    cp.write_row((d,))
            cols = ", ".join(f"k{bits} int4[]" for bits in WIDTHS[1:])
            cur.execute(f"CREATE TABLE f (id serial PRIMARY KEY, first_id int, p int4[], {cols})")
            with cur.copy(f"COPY f (first_id, p, {cols.replace(' int4[]', '')}) FROM STDIN") as cp:
                for i in range(frames):
                    ps = [
                        int.from_bytes(d[:4], "big", signed=True) for d in digests[i * per :][:per]
                    ]
                    cp.write_row(
                        (i * per + 1, ps, *[[x >> (32 - w) for x in ps] for w in WIDTHS[1:]])
                    )
            for bits in WIDTHS:
                col = "p" if bits == 32 else f"k{bits}"
                cur.execute(f"CREATE INDEX f_{col} ON f USING gin ({col}) WITH (fastupdate = off)")
            cur.execute("VACUUM ANALYZE")
            cur.execute(
                "SELECT pg_relation_size('b_digest_key') + pg_relation_size('b_pkey') + "
                "pg_relation_size('b')"
            )
            today = cur.fetchone()[0] / len(digests)  # type: ignore[index]
            times: dict[int, list[float]] = {0: [], **{w: [] for w in WIDTHS}}
            seen: dict[int, list[int]] = {w: [] for w in WIDTHS}
            for r in range(rounds):
                want = [rng.randbytes(32) for _ in range(5)] + [rng.choice(digests)]
                prefixes = [int.from_bytes(d[:4], "big", signed=True) for d in want]
                order = [0, *WIDTHS] if r % 2 else [*WIDTHS, 0]
                for w in order:
                    t = time.perf_counter()
                    if w == 0:
                        cur.execute("SELECT id FROM b WHERE digest = ANY(%s)", (want,))
                        assert len(cur.fetchall()) == 1
                    else:
                        col = "p" if w == 32 else f"k{w}"
                        keys = [x >> (32 - w) for x in prefixes] if w != 32 else prefixes
                        cur.execute(
                            f"SELECT f.id, f.first_id + i - 1 FROM f, unnest(f.p) WITH "
                            f"ORDINALITY u(v, i) WHERE f.{col} && %s::int4[] AND "
                            "u.v = ANY(%s::int4[])",
                            (keys, prefixes),
                        )
                        hits = cur.fetchall()
                        assert len(hits) >= 1
                    times[w].append(time.perf_counter() - t)
                    if w:
                        cur.execute(f"SELECT count(*) FROM f WHERE {col} && %s::int4[]", (keys,))
                        seen[w].append(cur.fetchone()[0])  # type: ignore[index]
            lines.append(
                f"| today: a `blobs` row, its primary key and unique digest (heap + 2 b-trees) "
                f"| {today:.0f} | {1e6 * statistics.median(times[0]):.0f} | — |"
            )
            for w in WIDTHS:
                col = "p" if w == 32 else f"k{w}"
                cur.execute(f"SELECT pg_relation_size('f_{col}')")
                size = cur.fetchone()[0] / len(digests)  # type: ignore[index]
                lines.append(
                    f"| GIN over {w}-bit keys (+ 4 B of prefix a blob in the frame row) | "
                    f"{size:.1f} | {1e6 * statistics.median(times[w]):.0f} | "
                    f"{statistics.mean(seen[w]):.1f} |"
                )
        finally:
            cur.execute(f"DROP SCHEMA {schema} CASCADE")
    return lines


def main() -> str:
    base = os.environ.get("ALPSTORE_BENCH_POSTGRES_URL") or os.environ.get(
        "ALPSTORE_TEST_POSTGRES_URL"
    )
    if not base:
        raise SystemExit("no PostgreSQL: set ALPSTORE_BENCH_POSTGRES_URL")
    lines = ["Command: `python benchmarks/probe_frame_index.py`", ""]
    lines.append(f"Load average at start: {os.getloadavg()[0]:.1f}")
    part1, _ = real_path(base)
    lines += part1
    lines += scale(base)
    lines.append(f"\nLoad average at end: {os.getloadavg()[0]:.1f}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    text = main()
    write_results(RESULTS, text)
    print(text)
