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
that keep them, ``digests`` (bytea, 32 bytes a blob, ``STORAGE EXTERNAL``; two of those
variants index an expression over it, :data:`KEY_FUNCTIONS`, and store no prefix array).
Each variant's rows are checked to give back every packed blob's row (:data:`PG_VIEW`).
Growth per raw byte 400 → 2,000 turns = the tables' bytes with ``blobs`` and ``pack_frames``
replaced by the variant's frame table.

Part 2, scale: 3,000 frames of 400 blobs (1.2 M blobs, random digests) in scratch tables: the
GIN's bytes per blob for keys of 32, 24, 20 and 16 bits of the digest, and the median time
of one deduplication lookup of six digests (five new, one stored: a turn's) — GIN ``&&``
then the candidates' positions rechecked against the full four-byte prefixes, in one
statement — beside today's unique b-tree on the 32-byte digest over the same 1.2 M digests,
alternating, in one connection; and the GIN over an expression of a digests column.

Part 3: hydrate's range read of the 2,000-turn head, today's against two frame-described
forms (:func:`range_reads`). Part 4: the same layout on SQLite (:func:`sqlite_path`). Part 5:
whether a frame's ids are contiguous and frames' id ranges disjoint (:func:`id_ranges`).

Run: ``python benchmarks/probe_frame_index.py`` (PostgreSQL from $ALPSTORE_BENCH_POSTGRES_URL
or $ALPSTORE_TEST_POSTGRES_URL; fresh schemas, dropped after). Writes
``benchmarks/results/frame_index.md``.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import tempfile
import time
from itertools import pairwise
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


KEY_FUNCTIONS = [
    f"CREATE FUNCTION digest_keys{bits}(d bytea) RETURNS int4[] LANGUAGE sql IMMUTABLE STRICT "
    f"PARALLEL SAFE AS $$ SELECT array_agg({expr} ORDER BY o) "
    "FROM generate_series(0, length(d) - 32, 32) o $$"
    for bits, expr in (
        (
            32,
            "(get_byte(d, o) << 24) | (get_byte(d, o + 1) << 16) | (get_byte(d, o + 2) << 8) "
            "| get_byte(d, o + 3)",
        ),
        (24, "(get_byte(d, o) << 16) | (get_byte(d, o + 1) << 8) | get_byte(d, o + 2)"),
    )
]
"""The GIN keys of a frame's digests column (its 32-byte digests concatenated): the top 32 or
24 bits of each, for an index on the expression (no array of prefixes stored beside them)."""


def _frame_table(name: str, bits: int, digests: bool, expr: bool = False) -> list[str]:
    """Statements building the variant's frame table from ``pack_frames`` and ``blobs``: the
    GIN over the prefixes array (``keys``, the top ``bits`` bits, when narrower), or with
    ``expr`` over ``digest_keys<bits>(digests)`` and no array beside the digests."""
    keys = "" if bits == 32 or expr else f", array_agg({_key(bits, PREFIX)} ORDER BY id) AS keys"
    dcol = ", string_agg(digest, ''::bytea ORDER BY id) AS digests" if digests else ""
    column = "prefixes" if bits == 32 else "keys"
    index = f"(digest_keys{bits}(digests))" if expr else f"({column})"
    return [
        f"CREATE TABLE {name} AS SELECT f.*, m.first_id, m.n, m.offsets, m.kinds"
        + ("" if expr else ", m.prefixes")
        + (", m.keys" if keys else "")
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
        f"CREATE INDEX {name}_key ON {name} USING gin {index}",
    ]


PG_VIEW = (
    "SELECT f.first_id + u.i - 1 AS id, {digest} AS digest, get_byte(f.kinds, (u.i - 1)::int) "
    "AS kind, coalesce(lead(u.at) OVER (PARTITION BY f.id ORDER BY u.at), f.raw_size) - u.at "
    "AS raw_size FROM {frames} f CROSS JOIN LATERAL unnest(f.offsets) WITH ORDINALITY AS u (at, i)"
)
"""The packed blobs as rows of the old ``blobs`` shape, from a variant's frame table (what a
``blobs`` view would union with the loose rows; ids contiguous here, as the probe checks)."""


def _check_view(run: Any, frames: str, digests: bool) -> None:
    """The variant's frame rows give back every packed blob's row (its digest when kept)."""
    digest = "substring(f.digests from (32 * (u.i - 1) + 1)::int for 32)" if digests else "NULL"
    got = run(f"{PG_VIEW.format(digest=digest, frames=frames)} ORDER BY 1").all()
    want = run("SELECT id, digest, kind, raw_size FROM blobs WHERE codec = 4 ORDER BY id").all()
    assert [tuple(r) for r in got] == [
        (w[0], w[1] if digests else None, w[2], w[3]) for w in want
    ], frames


def real_path(base: str) -> tuple[list[str], dict[str, Any]]:
    """Part 1: growth per raw byte 400 → 2,000 turns, today's layout and each variant."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from alpstore.importers import import_history, parse_history
    from alpstore.samples import write_jsonl
    from alpstore.store import Store
    from alpstore.testing.postgres import fresh_schema

    variants = [(f"nf_{bits}_{int(d)}", bits, d, False) for d in (True, False) for bits in (32, 20)]
    variants += [(f"nf_{bits}_x", bits, True, True) for bits in (32, 24)]
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
                            for stmt in KEY_FUNCTIONS:
                                run(stmt)
                            for name, bits, digests, expr in variants:
                                for stmt in _frame_table(name, bits, digests, expr):
                                    run(stmt)
                            for name, _, digests, _ in variants:
                                _check_view(run, name, digests)
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
    for name, bits, digests, expr in variants:
        frames = (b["after"][name] - a["after"][name]) / dr
        whole = (total(b, name) - total(a, name)) / dr
        what = "with the 32-byte digests" if digests else "without digests (recomputed)"
        key = f"{bits} bits" + (" of `digests` (expression, no array)" if expr else "")
        lines.append(f"| {what} | {key} | {frames:.3f}× | **{whole:.3f}×** |")
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


BUCKETED = (
    "WITH e AS (SELECT r.start + u.o - 1 AS position, u.blob_id FROM segment_runs r "
    "CROSS JOIN LATERAL unnest(r.blob_ids) WITH ORDINALITY AS u (blob_id, o) "
    "WHERE r.segment_id = %(s)s), b AS (SELECT min(blob_id) AS lo, max(blob_id) AS hi FROM e), "
    "fr AS (SELECT array_agg(g.first_id ORDER BY g.first_id) AS firsts, "
    "array_agg(g.id ORDER BY g.first_id) AS ids FROM nf_32_0 g, b WHERE g.first_id <= b.hi "
    "AND g.first_id >= COALESCE((SELECT max(h.first_id) FROM nf_32_0 h "
    "WHERE h.first_id <= b.lo), 0)) "
    "SELECT e.position, e.blob_id, l.digest, l.kind, l.raw_size, l.codec, l.payload, "
    "fr.ids[width_bucket(e.blob_id, fr.firsts)] FROM e CROSS JOIN fr "
    "LEFT JOIN loose l ON l.id = e.blob_id ORDER BY 1"
)
"""The frame-described range read without a probe per entry: the frames whose id ranges can
hold the segment's ids (by the b-tree on ``first_id``) gathered into one sorted array, and each
packed id's frame found in it by ``width_bucket`` (a binary search). Needs frames whose id
ranges do not overlap."""


def range_reads(run: Any, rounds: int = 15) -> list[str]:
    """Part 3: the head's whole range read as hydrate's statement does it, today's join with
    ``blobs`` against the frame-described layout: loose rows ``LEFT JOIN``ed and each packed
    id's frame found through a GiST index on the frame's id range (``int4range``, one entry a
    frame), or by :data:`BUCKETED`. Server time (``EXPLAIN ANALYZE``) and the time the client
    waited (rows fetched), medians, the three alternating."""
    import json

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
    queries = {"today": TODAY, "gist": DESCRIBED, "bucketed": BUCKETED}
    server: dict[str, list[float]] = {k: [] for k in queries}
    client: dict[str, list[float]] = {k: [] for k in queries}
    for r in range(rounds):
        for name in list(queries) if r % 2 else list(queries)[::-1]:
            sql = queries[name]
            plan = run(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", {"s": seg}).scalar_one()
            plan = json.loads(plan) if isinstance(plan, str) else plan
            server[name].append(float(plan[0]["Execution Time"]))
            t = time.perf_counter()
            rows = run(sql, {"s": seg}).all()
            client[name].append(1e3 * (time.perf_counter() - t))
            assert len(rows) == count
    med = {k: (statistics.median(server[k]), statistics.median(client[k])) for k in queries}
    return [
        f"| the head's {count:,} entries in one statement, medians of {rounds} (ms): server "
        "/ client | today: `JOIN blobs` | loose `LEFT JOIN` + frame by GiST id range | "
        "loose `LEFT JOIN` + frame by `width_bucket` |",
        "|---|---:|---:|---:|",
        "| PostgreSQL, 2,000-turn import | "
        + " | ".join(f"{med[k][0]:.1f} / {med[k][1]:.1f}" for k in queries)
        + " |",
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
            cur.execute(
                f"CREATE TABLE f (id serial PRIMARY KEY, first_id int, p int4[], {cols}, d bytea)"
            )
            cur.execute("ALTER TABLE f ALTER d SET STORAGE EXTERNAL")
            names = cols.replace(" int4[]", "")
            with cur.copy(f"COPY f (first_id, p, {names}, d) FROM STDIN") as cp:
                for i in range(frames):
                    ps = [
                        int.from_bytes(d[:4], "big", signed=True) for d in digests[i * per :][:per]
                    ]
                    narrow = [[x >> (32 - w) for x in ps] for w in WIDTHS[1:]]
                    cp.write_row((i * per + 1, ps, *narrow, b"".join(digests[i * per :][:per])))
            for stmt in KEY_FUNCTIONS:
                cur.execute(stmt)
            cur.execute(
                "CREATE INDEX f_x24 ON f USING gin (digest_keys24(d)) WITH (fastupdate = off)"
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
            kinds = [*WIDTHS, -24]  # -24: the expression over the digests column
            times: dict[int, list[float]] = {0: [], **{w: [] for w in kinds}}
            seen: dict[int, list[int]] = {w: [] for w in kinds}
            for r in range(rounds):
                want = [rng.randbytes(32) for _ in range(5)] + [rng.choice(digests)]
                prefixes = [int.from_bytes(d[:4], "big", signed=True) for d in want]
                order = [0, *kinds] if r % 2 else [*kinds, 0]
                short = [int.from_bytes(d[:3], "big") for d in want]
                for w in order:
                    t = time.perf_counter()
                    if w == 0:
                        cur.execute("SELECT id FROM b WHERE digest = ANY(%s)", (want,))
                        assert len(cur.fetchall()) == 1
                    elif w == -24:
                        cur.execute(
                            "SELECT f.id, f.first_id + (position(x IN f.d) - 1) / 32 FROM f, "
                            "unnest(%s::bytea[]) x WHERE digest_keys24(f.d) && %s::int4[] "
                            "AND position(x IN f.d) %% 32 = 1",
                            (want, short),
                        )
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
                    if w == -24:
                        cur.execute(
                            "SELECT count(*) FROM f WHERE digest_keys24(d) && %s::int4[]", (short,)
                        )
                        seen[w].append(cur.fetchone()[0])  # type: ignore[index]
                    elif w:
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
            cur.execute("SELECT pg_relation_size('f_x24')")
            size = cur.fetchone()[0] / len(digests)  # type: ignore[index]
            lines.append(
                "| GIN over 24 bits of each digest, an expression over the frame's digests "
                "column (no prefix array; rechecked by the digest's place in it) | "
                f"{size:.1f} | {1e6 * statistics.median(times[-24]):.0f} | "
                f"{statistics.mean(seen[-24]):.1f} |"
            )
        finally:
            cur.execute(f"DROP SCHEMA {schema} CASCADE")
    return lines


SQLITE_VIEW = (
    "CREATE VIEW packed_rows AS SELECT id, digest, kind, coalesce(lead(at) OVER (PARTITION BY "
    "frame ORDER BY at), size) - at AS raw_size, frame, at FROM (SELECT coalesce(i.value, "
    "f.first_id + o.key) AS id, {digest} AS digest, CAST(substr(f.kinds, o.key + 1, 1) AS "
    "INTEGER) AS kind, o.value AS at, f.id AS frame, f.raw_size AS size FROM nf f "
    "JOIN json_each(f.offsets) o LEFT JOIN json_each(f.ids) i ON i.key = o.key)"
)
"""The packed blobs as rows of the old ``blobs`` shape (what a ``blobs`` view would union with
the loose rows): ids from ``first_id`` or ``ids``, a blob's length the distance to the next
offset in content order."""

SQLITE_DIGEST = {True: "substr(f.digests, 32 * o.key + 1, 32)", False: "NULL"}


def sqlite_path(turns: int = 1000) -> list[str]:
    """Part 4, SQLite: the ``turns``-turn import's file (``import_history`` + ``settle``, as
    ``bench_import_bytes.py``) against copies of it where the packed blobs' rows are folded into
    their frames' rows and found by digest through a ``WITHOUT ROWID`` table ``(prefix,
    frame_id)`` — with and without the 32-byte digests in the frame row — each ``VACUUM``-ed.
    The frame row's description is what a SQL view of the old ``blobs`` shape can unnest
    (``json_each``; :data:`SQLITE_VIEW`, checked here to give back every packed row):
    ``first_id``, ``last_id`` (under a b-tree), ``offsets`` (JSON array, in id order),
    ``kinds`` (one digit a blob), ``ids`` (JSON array; NULL when the ids are ``first_id`` …
    ``last_id`` without a gap)."""
    import shutil
    import sqlite3

    from alpstore.archive.frames import parse_pointer
    from alpstore.db import sqlite_path_for_root
    from alpstore.importers import import_history, parse_history
    from alpstore.samples import write_jsonl
    from alpstore.store import Store

    lines = [
        "",
        f"| SQLite, `session import` of {turns:,} turns + settle, file ÷ raw | today | "
        "frame-described + `(prefix, frame_id)` table, with digests | without digests |",
        "|---|---:|---:|---:|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "c.jsonl"
        write_jsonl(src, turns, seed=7)
        raw = src.stat().st_size
        store = Store.open(Path(tmp) / "r")
        try:
            import_history(store, parse_history(src, "auto"), name="bench")
            store.archive.settle()
        finally:
            store.close()
        db = sqlite_path_for_root(Path(tmp) / "r")
        sizes = [db.stat().st_size]
        for digests in (True, False):
            copy = Path(tmp) / f"v{int(digests)}.db"
            shutil.copyfile(db, copy)
            conn = sqlite3.connect(copy, isolation_level=None)
            try:
                rows = conn.execute(
                    "SELECT id, digest, kind, payload FROM blobs WHERE codec = 4 ORDER BY id"
                ).fetchall()
                frames: dict[int, list[tuple[int, bytes, int, int]]] = {}
                for bid, digest, kind, payload in rows:
                    fid, offset = parse_pointer(payload)
                    frames.setdefault(fid, []).append((bid, digest, kind, offset))
                conn.execute("BEGIN")
                conn.execute(
                    "CREATE TABLE nf AS SELECT *, 0 AS first_id, 0 AS last_id, '' AS offsets, "
                    "'' AS kinds, NULL AS ids"
                    + (", x'' AS digests" if digests else "")
                    + " FROM pack_frames"
                )
                conn.execute(
                    "CREATE TABLE pack_digests (prefix INTEGER NOT NULL, frame_id INTEGER NOT "
                    "NULL, PRIMARY KEY (prefix, frame_id)) WITHOUT ROWID"
                )
                for fid, members in frames.items():
                    first, last = members[0][0], members[-1][0]
                    ids = [m[0] for m in members]
                    conn.execute(
                        "UPDATE nf SET first_id = ?, last_id = ?, offsets = ?, kinds = ?, ids = ?"
                        + (", digests = ?" if digests else "")
                        + " WHERE id = ?",
                        (
                            first,
                            last,
                            json.dumps([m[3] for m in members], separators=(",", ":")),
                            "".join(str(m[2]) for m in members),
                            None if last - first + 1 == len(ids) else json.dumps(ids),
                            *([b"".join(m[1] for m in members)] if digests else []),
                            fid,
                        ),
                    )
                    conn.executemany(
                        "INSERT OR IGNORE INTO pack_digests VALUES (?, ?)",
                        [(int.from_bytes(m[1][:4], "big", signed=True), fid) for m in members],
                    )
                conn.execute("CREATE INDEX nf_first ON nf (first_id)")
                conn.execute(SQLITE_VIEW.format(digest=SQLITE_DIGEST[digests]))
                got = conn.execute(
                    "SELECT id, digest, kind, raw_size FROM packed_rows ORDER BY id"
                ).fetchall()
                want = conn.execute(
                    "SELECT id, digest, kind, raw_size FROM blobs WHERE codec = 4 ORDER BY id"
                ).fetchall()
                assert got == [w if digests else (w[0], None, *w[2:]) for w in want]
                conn.execute("DELETE FROM blobs WHERE codec = 4")
                conn.execute("DROP TABLE pack_frames")
                conn.execute("COMMIT")
                conn.execute("VACUUM")
            finally:
                conn.close()
            sizes.append(copy.stat().st_size)
        today, described = _sqlite_range_reads(db, Path(tmp) / "v0.db")
    lines.append(
        f"| {raw / 1e6:.2f} MB raw | {sizes[0] / raw:.3f}× | {sizes[1] / raw:.3f}× | "
        f"{sizes[2] / raw:.3f}× |"
    )
    lines += [
        "",
        "| SQLite, the head's entries in one statement (median of 15, ms) | today: `JOIN blobs` "
        "| loose `LEFT JOIN` + frame by the b-tree on `first_id` | ratio |",
        "|---|---:|---:|---:|",
        f"| {turns:,}-turn import | {today:.1f} | {described:.1f} | {described / today:.2f} |",
    ]
    return lines


SQLITE_TODAY = (
    "SELECT r.start + j.key, b.id, b.digest, b.kind, b.raw_size, b.codec, b.payload "
    "FROM segment_runs r, json_each(r.blob_ids) j JOIN blobs b ON b.id = j.value "
    "WHERE r.segment_id = ? ORDER BY 1"
)
SQLITE_DESCRIBED = (
    "SELECT r.start + j.key, j.value, l.digest, l.kind, l.raw_size, l.codec, l.payload, "
    "(SELECT f.id FROM nf f WHERE f.first_id <= j.value ORDER BY f.first_id DESC LIMIT 1) "
    "FROM segment_runs r, json_each(r.blob_ids) j LEFT JOIN blobs l ON l.id = j.value "
    "WHERE r.segment_id = ? ORDER BY 1"
)


def _sqlite_range_reads(today_db: Path, described_db: Path, rounds: int = 15) -> tuple[float, ...]:
    """Median ms of the longest segment's range read: today's file, then the described copy."""
    import sqlite3

    conns = [sqlite3.connect(today_db), sqlite3.connect(described_db)]
    try:
        seg, count = (
            conns[0]
            .execute(
                "SELECT r.segment_id, count(*) FROM segment_runs r, json_each(r.blob_ids) "
                "GROUP BY 1 ORDER BY 2 DESC LIMIT 1"
            )
            .fetchone()
        )
        times: list[list[float]] = [[], []]
        for r in range(rounds):
            for k in (0, 1) if r % 2 else (1, 0):
                t = time.perf_counter()
                sql = SQLITE_TODAY if k == 0 else SQLITE_DESCRIBED
                rows = conns[k].execute(sql, (seg,)).fetchall()
                times[k].append(1e3 * (time.perf_counter() - t))
                assert len(rows) == count
        return tuple(statistics.median(t) for t in times)
    finally:
        for conn in conns:
            conn.close()


def _ranges(store: Any) -> str:
    """How the packed blobs' ids lie per frame: gaps, overlapping frames, loose ids inside."""
    from alpstore.archive.frames import parse_pointer

    with store.db.read() as conn:
        rows = conn.exec_driver_sql("SELECT id, payload, codec FROM blobs ORDER BY id").all()
    frames: dict[int, list[int]] = {}
    loose = []
    for bid, payload, codec in rows:
        if codec == 4:
            frames.setdefault(parse_pointer(bytes(payload))[0], []).append(bid)
        else:
            loose.append(bid)
    gaps = sum(1 for v in frames.values() if max(v) - min(v) + 1 != len(v))
    spans = sorted((min(v), max(v)) for v in frames.values())
    over = sum(1 for a, b in pairwise(spans) if b[0] <= a[1])
    inside = sum(1 for i in loose if any(lo < i < hi for lo, hi in spans))
    return f"| {len(frames)} | {gaps} | {over} | {inside} | {len(loose)} |"


def id_ranges(base: str) -> list[str]:
    """Part 5: are a frame's ids contiguous, and do frames' id ranges overlap? SQLite: 600
    native turns with a 20 KB tool result every seventh (over ``PACK_BLOB_MAX``: stays loose),
    packed twice as the background packer does (``keep_loose=1000``). PostgreSQL: a 1,500-turn
    import while a live writer commits turns beside it on another thread, then ``archive
    pack``."""
    import threading

    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from alpstore.importers import import_history, parse_history
    from alpstore.samples import write_jsonl
    from alpstore.store import Store
    from alpstore.testing.postgres import fresh_schema
    from benchmarks._util import conversation_turns

    lines = [
        "",
        "| packed ids per frame | frames | frames with gaps | overlapping neighbours | loose "
        "ids inside a frame's range | loose blobs |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    turns = conversation_turns(600)[:600]
    for t, turn in enumerate(turns):
        if t % 7 == 3:
            turn.append({"role": "tool", "content": "x" * 20000 + str(t)})
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(Path(tmp))
        try:
            session = store.create_session(name="bench")
            for turn in turns[:400]:
                session.commit_turn(turn)
            store.archive.wait_for_training()
            store.archive.pack_cold(keep_loose=1000)
            for turn in turns[400:]:
                session.commit_turn(turn)
            store.archive.pack_cold(keep_loose=1000)
            lines.append("| SQLite, native, large blobs, packed twice " + _ranges(store))
        finally:
            store.close()
    admin = create_engine(base, poolclass=NullPool)
    try:
        with tempfile.TemporaryDirectory() as tmp, fresh_schema(admin, base, "probe_ids_") as url:
            src = Path(tmp) / "c.jsonl"
            write_jsonl(src, 1500, seed=9)
            store = Store.open(Path(tmp) / "r", url=url)
            try:
                live = store.create_session(name="live")
                stop = threading.Event()

                def writer() -> None:
                    for turn in conversation_turns(3000, seed=11):
                        if stop.is_set():
                            break
                        live.commit_turn(turn)

                thread = threading.Thread(target=writer)
                thread.start()
                try:
                    import_history(store, parse_history(src, "auto"), name="imp")
                finally:
                    stop.set()
                    thread.join()
                lines.append("| PostgreSQL, an import beside a live writer " + _ranges(store))
                store.archive.pack_cold()
                lines.append("| the same, then `archive pack` " + _ranges(store))
            finally:
                store.close()
    finally:
        admin.dispose()
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
    lines += sqlite_path()
    lines += id_ranges(base)
    lines.append(f"\nLoad average at end: {os.getloadavg()[0]:.1f}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    text = main()
    write_results(RESULTS, text)
    print(text)
