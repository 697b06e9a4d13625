"""Packed blobs described inside their frame's row: no ``blobs`` row per packed blob (issue 42).

A packed blob (codec 4) held a ``blobs`` row of its own — heap, primary key and digest index
entries, 0.337× of each further raw byte on PostgreSQL — only to say where its bytes lie in a
frame. Its frame's ``pack_frames`` row now describes its members, in content order:

- ``first_id``, ``last_id``: the smallest and largest member id (b-tree on ``first_id``: the
  frame that can hold an id is the one with the greatest ``first_id`` ≤ it; ranges never
  overlap);
- ``offsets``: where each member's bytes start in the frame's content (ascending); a member's
  length is the distance to the next offset, the frame's ``raw_size`` closing the last;
- ``kinds``: a member's kind, PostgreSQL a byte each (``bytea``), SQLite a digit each (text);
- ``ids``: the members' ids when they are not ``first_id``, ``first_id + 1`` … in content
  order, else NULL;
- ``digests``: the members' 32-byte digests concatenated.

PostgreSQL arrays are ``INTEGER[]``; SQLite JSON text. A digest is found through a GIN index
over :data:`KEYS_FUNCTION` of ``digests`` (each digest's first four bytes as an ``int4``) on
PostgreSQL, through the ``WITHOUT ROWID`` table ``pack_digests (prefix, frame_id)`` on SQLite.

The loose blobs' table is renamed ``blob_rows``; ``blobs`` becomes a VIEW of the old shape —
the loose rows ``UNION ALL`` the frames' members (codec 4, the payload their pointer) — so SQL
written against ``blobs`` (the README's examples, ``alpstore sql``) runs unchanged. The foreign
keys to ``blobs.id`` go, as ``segment_entries.blob_id``'s went in 0009 (SQLite's sweep checks
its own deletes, ``alpstore.db.sweep``; PostgreSQL's GC marks under its exclusion of writers).

Converted in place: each frame's packed rows become its description (members in the order of
their offsets), then deleted. The downgrade writes them back as rows.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from typing import Any

from sqlalchemy import Connection

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

CODEC_PACKED = 4

BYTE_TABLE = "x'" + bytes(range(256)).hex() + "'"
"""SQLite: a 256-byte blob whose byte ``v`` is ``v`` (``substr`` of it makes one byte)."""


def _sqlite_byte(expr: str) -> str:
    return f"substr({BYTE_TABLE}, ({expr}) + 1, 1)"


def _sqlite_varint(v: str) -> str:
    """SQLite: an unsigned LEB128 varint of ``v`` (< 2**35) as blob-ish text (``||``)."""
    parts = []
    for n in range(1, 6):
        group = [
            _sqlite_byte(f"({v} >> {7 * i}) % 128 + {128 if i < n - 1 else 0}") for i in range(n)
        ]
        parts.append((1 << (7 * n), " || ".join(group)))
    cases = " ".join(f"WHEN {v} < {limit} THEN {expr}" for limit, expr in parts[:-1])
    return f"CASE {cases} ELSE {parts[-1][1]} END"


PG_FUNCTIONS = [
    # the GIN keys of a frame: each digest's first four bytes as a (signed) int4
    "CREATE FUNCTION alp_digest_keys(d bytea) RETURNS int4[] LANGUAGE sql IMMUTABLE STRICT "
    "PARALLEL SAFE AS $$ SELECT array_agg((get_byte(d, o) << 24) | (get_byte(d, o + 1) << 16) "
    "| (get_byte(d, o + 2) << 8) | get_byte(d, o + 3) ORDER BY o) "
    "FROM generate_series(0, length(d) - 32, 32) o $$",
    # the GIN key of one digest (what alp_digest_keys holds for it)
    "CREATE FUNCTION alp_digest_key(d bytea) RETURNS int4 LANGUAGE sql IMMUTABLE STRICT "
    "PARALLEL SAFE AS $$ SELECT (get_byte(d, 0) << 24) | (get_byte(d, 1) << 16) "
    "| (get_byte(d, 2) << 8) | get_byte(d, 3) $$",
    # where digest d is among a frame's digests ds (1-based), or NULL
    "CREATE FUNCTION alp_member(ds bytea, d bytea) RETURNS int4 LANGUAGE sql IMMUTABLE STRICT "
    "PARALLEL SAFE AS $$ SELECT o / 32 + 1 FROM generate_series(0, length(ds) - 32, 32) o "
    "WHERE substring(ds from o + 1 for 32) = d LIMIT 1 $$",
    # a writer's statement naming a blob by digest that is nowhere: the statement fails (the
    # foreign keys that refused such a row went with this migration)
    "CREATE FUNCTION alp_missing_blob(d bytea) RETURNS int4 LANGUAGE plpgsql AS $$ BEGIN "
    "RAISE EXCEPTION USING MESSAGE = 'no blob ' || encode(d, 'hex') || ' in the archive', "
    "ERRCODE = '23503'; "
    "END $$",
    # a packed blob's pointer (alpstore.archive.frames.pointer): two unsigned LEB128 varints
    "CREATE FUNCTION alp_varint(v bigint) RETURNS bytea LANGUAGE sql IMMUTABLE STRICT "
    "PARALLEL SAFE AS $$ SELECT decode(string_agg(lpad(to_hex(CASE WHEN (v >> (7 * i)) >= 128 "
    "THEN ((v >> (7 * i)) & 127) | 128 ELSE (v >> (7 * i)) & 127 END), 2, '0'), '' ORDER BY i), "
    "'hex') FROM generate_series(0, 4) i WHERE i = 0 OR (v >> (7 * i)) > 0 $$",
]
KEYS_FUNCTION = "alp_digest_keys"

VIEW_SQL = {
    "postgresql": (
        "CREATE VIEW blobs AS\n"
        "SELECT id, digest, kind, raw_size, codec, dict_id, payload, base_id FROM blob_rows\n"
        "UNION ALL\n"
        "SELECT CAST(coalesce(f.ids[u.i], f.first_id + u.i - 1) AS INTEGER) AS id,\n"
        "       substring(f.digests from CAST(32 * u.i - 31 AS INTEGER) for 32) AS digest,\n"
        "       CAST(get_byte(f.kinds, CAST(u.i - 1 AS INTEGER)) AS SMALLINT) AS kind,\n"
        "       coalesce(f.offsets[u.i + 1], f.raw_size) - u.at AS raw_size,\n"
        f"       CAST({CODEC_PACKED} AS SMALLINT) AS codec,\n"
        "       CAST(NULL AS INTEGER) AS dict_id,\n"
        "       alp_varint(f.id) || alp_varint(u.at) AS payload,\n"
        "       CAST(NULL AS INTEGER) AS base_id\n"
        "FROM pack_frames f CROSS JOIN LATERAL unnest(f.offsets) WITH ORDINALITY AS u (at, i)"
    ),
    "sqlite": (
        "CREATE VIEW blobs AS\n"
        "SELECT id, digest, kind, raw_size, codec, dict_id, payload, base_id FROM blob_rows\n"
        "UNION ALL\n"
        "SELECT coalesce(json_extract(f.ids, '$[' || o.key || ']'), f.first_id + o.key) AS id,\n"
        "       substr(f.digests, 32 * o.key + 1, 32) AS digest,\n"
        "       CAST(substr(f.kinds, o.key + 1, 1) AS INTEGER) AS kind,\n"
        "       coalesce(json_extract(f.offsets, '$[' || (o.key + 1) || ']'), f.raw_size)"
        " - o.value AS raw_size,\n"
        f"       {CODEC_PACKED} AS codec,\n"
        "       NULL AS dict_id,\n"
        f"       CAST({_sqlite_varint('f.id')} || {_sqlite_varint('o.value')} AS BLOB)"
        " AS payload,\n"
        "       NULL AS base_id\n"
        "FROM pack_frames f, json_each(f.offsets) o"
    ),
}
"""The ``blobs`` view: loose rows, then every frame's members in the old row shape."""

FRAMES_SQLITE = (
    "CREATE TABLE pack_frames_new (\n"
    "\tid INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, \n"
    "\tdigest BLOB NOT NULL, \n"
    "\tcodec SMALLINT NOT NULL, \n"
    "\tdict_id INTEGER, \n"
    "\traw_size INTEGER NOT NULL, \n"
    "\tblob_count INTEGER NOT NULL, \n"
    "\tcreated_at FLOAT NOT NULL, \n"
    "\tdata BLOB NOT NULL, \n"
    "\tfirst_id INTEGER NOT NULL, \n"
    "\tlast_id INTEGER NOT NULL, \n"
    "\toffsets TEXT NOT NULL, \n"
    "\tkinds TEXT NOT NULL, \n"
    "\tids TEXT, \n"
    "\tdigests BLOB NOT NULL, \n"
    "\tCONSTRAINT fk_pack_frames_dict_id_zstd_dicts FOREIGN KEY(dict_id) "
    "REFERENCES zstd_dicts (id)\n)"
)

DIGESTS_SQLITE = (
    "CREATE TABLE pack_digests (\n"
    "\tprefix INTEGER NOT NULL, \n"
    "\tframe_id INTEGER NOT NULL, \n"
    "\tCONSTRAINT pk_pack_digests PRIMARY KEY (prefix, frame_id)\n) WITHOUT ROWID"
)

REFERRERS = [
    ("blob_refs", "parent_id"),
    ("blob_refs", "child_id"),
    ("sessions", "manifest_blob_id"),
    ("checkpoints", "kernel_blob_id"),
    ("checkpoints", "wm_blob_id"),
    ("backtracks", "steering_blob_id"),
    ("lg_checkpoint_blobs", "blob_id"),
    ("lg_write_items", "blob_id"),
]
"""The columns that had a foreign key to ``blobs.id`` (0001, 0002)."""

_FK = re.compile(
    r",\s*CONSTRAINT\s+\w+\s+FOREIGN KEY\s*\(\w+\)\s*REFERENCES\s+\"?blobs\"?\s*\(id\)"
)
"""SQLite: one table-level foreign key clause to ``blobs`` in a ``CREATE TABLE`` text."""


SUMMARY_BYTES_IN = (
    "          FROM blobs b\n"
    "         WHERE b.id IN (SELECT e.blob_id FROM segment_entries e\n"
    "                          JOIN segments g ON g.id = e.segment_id\n"
    "                         WHERE g.session_id = s.id)) AS bytes"
)
SUMMARY_BYTES_JOIN = (
    "          FROM blobs b\n"
    "          JOIN (SELECT DISTINCT e.blob_id AS id FROM segment_entries e\n"
    "                  JOIN segments g ON g.id = e.segment_id\n"
    "                 WHERE g.session_id = s.id) u ON u.id = b.id) AS bytes"
)
"""SQLite: ``session_summary``'s bytes, the same sum, by a join with the session's distinct blob
ids: with ``blobs`` a view the ``IN`` form built its correlated list again for every blob (1,000
imported turns: 4.7 s; the join 0.02 s)."""


def _parse_pointer(data: bytes) -> tuple[int, int]:
    values, value, shift = [], 0, 0
    for byte in data:
        value |= (byte & 0x7F) << shift
        if byte & 0x80:
            shift += 7
        else:
            values.append(value)
            value = shift = 0
    if len(values) != 2 or shift:
        raise ValueError(f"packed blob pointer {data.hex()} is not two varints")
    return values[0], values[1]


def _dependent_views(conn: Connection) -> list[tuple[str, str]]:
    """``(name, CREATE VIEW …)`` of every SQL view that reads ``blobs`` (not ``blobs`` itself)."""
    if conn.dialect.name == "sqlite":
        rows = conn.exec_driver_sql(
            "SELECT name, sql FROM sqlite_master WHERE type = 'view' "
            "AND name <> 'blobs' AND sql LIKE '%blobs%' ORDER BY rowid"
        ).all()
        return [(str(n), str(s)) for n, s in rows if re.search(r"\bblobs\b", str(s))]
    names = conn.exec_driver_sql(
        "SELECT c.oid, c.relname FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind = 'v' AND n.nspname = current_schema() "
        "AND c.relname <> 'blobs' ORDER BY c.oid"
    ).all()
    views = []
    for oid, name in names:
        (sql,) = conn.exec_driver_sql("SELECT pg_get_viewdef(%s::oid)", (int(oid),)).one()
        if re.search(r"\bblobs\b", str(sql)):
            views.append((str(name), f"CREATE VIEW {name} AS\n{sql}"))
    return views


def _descriptions(conn: Connection) -> dict[int, dict[str, Any]]:
    """Each frame's members from the packed ``blobs`` rows, in the order of their offsets."""
    members: dict[int, list[tuple[int, int, bytes, int]]] = defaultdict(list)
    rows = conn.exec_driver_sql(
        f"SELECT id, digest, kind, payload FROM blobs WHERE codec = {CODEC_PACKED}"
    )
    for bid, digest, kind, payload in rows:
        frame, offset = _parse_pointer(bytes(payload))
        members[frame].append((offset, int(bid), bytes(digest), int(kind)))
    out = {}
    for frame, got in members.items():
        got.sort()
        ids = [m[1] for m in got]
        first = min(ids)
        contiguous = ids == list(range(first, first + len(ids)))
        out[frame] = {
            "first_id": first,
            "last_id": max(ids),
            "offsets": [m[0] for m in got],
            "kinds": [m[3] for m in got],
            "ids": None if contiguous else ids,
            "digests": b"".join(m[2] for m in got),
        }
    return out


def _encode(dialect: str, d: dict[str, Any]) -> tuple[Any, Any, Any]:
    """``offsets``, ``kinds``, ``ids`` as the dialect stores them."""
    if dialect == "postgresql":
        return d["offsets"], bytes(d["kinds"]), d["ids"]
    text = json.dumps(d["offsets"], separators=(",", ":"))
    ids = None if d["ids"] is None else json.dumps(d["ids"], separators=(",", ":"))
    return text, "".join(map(str, d["kinds"])), ids


def _sqlite_edit_schema(conn: Connection, edits: dict[str, str]) -> None:
    """Replace the ``CREATE TABLE`` text of the named tables (SQLite's documented way to drop
    or add a constraint that changes nothing stored: ``writable_schema``, then the schema
    version raised so every connection reads it again)."""
    (version,) = conn.exec_driver_sql("PRAGMA schema_version").one()
    conn.exec_driver_sql("PRAGMA writable_schema=ON")
    for name, sql in edits.items():
        conn.exec_driver_sql(
            "UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = ?", (sql, name)
        )
    conn.exec_driver_sql(f"PRAGMA schema_version={int(version) + 1}")
    conn.exec_driver_sql("PRAGMA writable_schema=OFF")


def _table_sql(conn: Connection, name: str) -> str:
    (sql,) = conn.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).one()
    return str(sql)


def _drop_foreign_keys(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        for table, column in REFERRERS:
            conn.exec_driver_sql(
                f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS fk_{table}_{column}_blobs"
            )
        return
    edits = {}
    for table in dict.fromkeys(t for t, _ in REFERRERS):
        sql = _table_sql(conn, table)
        new = _FK.sub("", sql)
        if new != sql:
            edits[table] = new
    if edits:
        _sqlite_edit_schema(conn, edits)


def _add_foreign_keys(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        for table, column in REFERRERS:
            conn.exec_driver_sql(
                f"ALTER TABLE {table} ADD CONSTRAINT fk_{table}_{column}_blobs "
                f"FOREIGN KEY ({column}) REFERENCES blobs (id)"
            )
        return
    clauses: dict[str, list[str]] = defaultdict(list)
    for table, column in REFERRERS:
        clauses[table].append(
            f", \n\tCONSTRAINT fk_{table}_{column}_blobs FOREIGN KEY({column}) "
            "REFERENCES blobs (id)"
        )
    edits = {}
    for table, added in clauses.items():
        sql = _table_sql(conn, table)
        end = sql.rindex(")")
        edits[table] = sql[:end].rstrip() + "".join(added) + "\n" + sql[end:]
    _sqlite_edit_schema(conn, edits)


def upgrade() -> None:
    conn = op.get_bind()
    dialect = conn.dialect.name
    views = _dependent_views(conn)
    for name, _ in reversed(views):
        conn.exec_driver_sql(f"DROP VIEW {name}")
    found = _descriptions(conn)
    _drop_foreign_keys(conn)
    if dialect == "postgresql":
        for stmt in PG_FUNCTIONS:
            conn.exec_driver_sql(stmt)
        for column, kind in (
            ("first_id", "INTEGER"),
            ("last_id", "INTEGER"),
            ("offsets", "INTEGER[]"),
            ("kinds", "BYTEA"),
            ("ids", "INTEGER[]"),
            ("digests", "BYTEA"),
        ):
            conn.exec_driver_sql(f"ALTER TABLE pack_frames ADD COLUMN {column} {kind}")
        conn.exec_driver_sql("ALTER TABLE pack_frames ALTER digests SET STORAGE EXTERNAL")
        for frame, d in found.items():
            offsets, kinds, ids = _encode(dialect, d)
            conn.exec_driver_sql(
                "UPDATE pack_frames SET first_id = %s, last_id = %s, offsets = %s, kinds = %s, "
                "ids = %s, digests = %s WHERE id = %s",
                (d["first_id"], d["last_id"], offsets, kinds, ids, d["digests"], frame),
            )
        # a frame no packed blob points at any more (every member collected): no members
        conn.exec_driver_sql(
            "UPDATE pack_frames SET first_id = 0, last_id = -1, offsets = '{}', kinds = '', "
            "digests = '' WHERE first_id IS NULL"
        )
        for column in ("first_id", "last_id", "offsets", "kinds", "digests"):
            conn.exec_driver_sql(f"ALTER TABLE pack_frames ALTER {column} SET NOT NULL")
        conn.exec_driver_sql("CREATE INDEX ix_pack_frames_first_id ON pack_frames (first_id)")
        conn.exec_driver_sql(
            f"CREATE INDEX ix_pack_frames_digest_keys ON pack_frames USING gin "
            f"({KEYS_FUNCTION}(digests)) WITH (fastupdate = off)"
        )
        conn.exec_driver_sql(f"DELETE FROM blobs WHERE codec = {CODEC_PACKED}")
        conn.exec_driver_sql("ALTER TABLE blobs RENAME TO blob_rows")
        conn.exec_driver_sql("ALTER SEQUENCE blobs_id_seq RENAME TO blob_rows_id_seq")
        conn.exec_driver_sql("ALTER TABLE blob_rows RENAME CONSTRAINT pk_blobs TO pk_blob_rows")
        conn.exec_driver_sql(
            "ALTER TABLE blob_rows RENAME CONSTRAINT uq_blobs_digest TO uq_blob_rows_digest"
        )
        conn.exec_driver_sql(
            "ALTER TABLE blob_rows RENAME CONSTRAINT fk_blobs_dict_id_zstd_dicts "
            "TO fk_blob_rows_dict_id_zstd_dicts"
        )
        conn.exec_driver_sql(
            "COMMENT ON TABLE pack_frames IS 'Pack frames (0007): cold blobs rewritten in "
            "conversation order into one zstd frame; since 0010 the row describes its members "
            "(the blobs view shows them as rows).'"
        )
        conn.exec_driver_sql(
            "COMMENT ON TABLE blob_rows IS 'Loose content-addressed nodes (packed ones are "
            "described in their frame''s row; the view blobs shows both).'"
        )
    else:
        (seq,) = conn.exec_driver_sql(
            "SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = 'pack_frames'"
        ).one()
        conn.exec_driver_sql(FRAMES_SQLITE)
        conn.exec_driver_sql(DIGESTS_SQLITE)
        rows = conn.exec_driver_sql("SELECT id FROM pack_frames").all()
        for (frame,) in rows:
            d = found.get(int(frame)) or {
                "first_id": 0,
                "last_id": -1,
                "offsets": [],
                "kinds": [],
                "ids": None,
                "digests": b"",
            }
            offsets, kinds, ids = _encode(dialect, d)
            conn.exec_driver_sql(
                "INSERT INTO pack_frames_new (id, digest, codec, dict_id, raw_size, blob_count, "
                "created_at, data, first_id, last_id, offsets, kinds, ids, digests) "
                "SELECT id, digest, codec, dict_id, raw_size, blob_count, created_at, data, "
                "?, ?, ?, ?, ?, ? FROM pack_frames WHERE id = ?",
                (d["first_id"], d["last_id"], offsets, kinds, ids, d["digests"], int(frame)),
            )
            digests = d["digests"]
            keys = {
                int.from_bytes(digests[i : i + 4], "big", signed=True)
                for i in range(0, len(digests), 32)
            }
            if keys:
                conn.exec_driver_sql(
                    "INSERT INTO pack_digests (prefix, frame_id) VALUES (?, ?)",
                    [(k, int(frame)) for k in sorted(keys)],
                )
        conn.exec_driver_sql("DROP TABLE pack_frames")
        conn.exec_driver_sql("ALTER TABLE pack_frames_new RENAME TO pack_frames")
        conn.exec_driver_sql(
            "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'pack_frames'", (seq,)
        )
        conn.exec_driver_sql("CREATE INDEX ix_pack_frames_first_id ON pack_frames (first_id)")
        conn.exec_driver_sql(f"DELETE FROM blobs WHERE codec = {CODEC_PACKED}")
        conn.exec_driver_sql("DROP INDEX ix_blobs_digest_prefix")
        conn.exec_driver_sql("ALTER TABLE blobs RENAME TO blob_rows")
        conn.exec_driver_sql(
            "CREATE INDEX ix_blob_rows_digest_prefix ON blob_rows (substr(digest, 1, 4))"
        )
    conn.exec_driver_sql(VIEW_SQL[dialect])
    for _, sql in views:
        conn.exec_driver_sql(sql.replace(SUMMARY_BYTES_IN, SUMMARY_BYTES_JOIN))


def downgrade() -> None:
    conn = op.get_bind()
    dialect = conn.dialect.name
    views = _dependent_views(conn)
    for name, _ in reversed(views):
        conn.exec_driver_sql(f"DROP VIEW {name}")
    conn.exec_driver_sql(
        "INSERT INTO blob_rows (id, digest, kind, raw_size, codec, dict_id, payload, base_id) "
        f"SELECT id, digest, kind, raw_size, codec, dict_id, payload, base_id FROM blobs "
        f"WHERE codec = {CODEC_PACKED}"
    )
    conn.exec_driver_sql("DROP VIEW blobs")
    if dialect == "postgresql":
        conn.exec_driver_sql("ALTER TABLE blob_rows RENAME TO blobs")
        conn.exec_driver_sql("ALTER SEQUENCE blob_rows_id_seq RENAME TO blobs_id_seq")
        conn.exec_driver_sql("ALTER TABLE blobs RENAME CONSTRAINT pk_blob_rows TO pk_blobs")
        conn.exec_driver_sql(
            "ALTER TABLE blobs RENAME CONSTRAINT uq_blob_rows_digest TO uq_blobs_digest"
        )
        conn.exec_driver_sql(
            "ALTER TABLE blobs RENAME CONSTRAINT fk_blob_rows_dict_id_zstd_dicts "
            "TO fk_blobs_dict_id_zstd_dicts"
        )
        conn.exec_driver_sql(
            "COMMENT ON TABLE blobs IS 'Content-addressed nodes: digest = BLAKE3-256 of the "
            "canonical JSON bytes.'"
        )
        conn.exec_driver_sql(
            "COMMENT ON TABLE pack_frames IS 'Pack frames (0007): cold blobs rewritten in "
            "conversation order into one zstd frame; a packed blob (codec 4) points at (frame, "
            "offset) and holds raw_size bytes of it.'"
        )
        conn.exec_driver_sql("DROP INDEX ix_pack_frames_digest_keys")
        conn.exec_driver_sql("DROP INDEX ix_pack_frames_first_id")
        for column in ("first_id", "last_id", "offsets", "kinds", "ids", "digests"):
            conn.exec_driver_sql(f"ALTER TABLE pack_frames DROP COLUMN {column}")
        conn.exec_driver_sql("DROP FUNCTION alp_digest_keys(bytea)")
        conn.exec_driver_sql("DROP FUNCTION alp_varint(bigint)")
        conn.exec_driver_sql("DROP FUNCTION alp_digest_key(bytea)")
        conn.exec_driver_sql("DROP FUNCTION alp_member(bytea, bytea)")
        conn.exec_driver_sql("DROP FUNCTION alp_missing_blob(bytea)")
    else:
        conn.exec_driver_sql("DROP INDEX ix_blob_rows_digest_prefix")
        conn.exec_driver_sql("ALTER TABLE blob_rows RENAME TO blobs")
        conn.exec_driver_sql("CREATE INDEX ix_blobs_digest_prefix ON blobs (substr(digest, 1, 4))")
        conn.exec_driver_sql("DROP TABLE pack_digests")
        conn.exec_driver_sql("DROP INDEX ix_pack_frames_first_id")
        for column in ("first_id", "last_id", "offsets", "kinds", "ids", "digests"):
            conn.exec_driver_sql(f"ALTER TABLE pack_frames DROP COLUMN {column}")
    _add_foreign_keys(conn)
    for _, sql in views:
        conn.exec_driver_sql(sql.replace(SUMMARY_BYTES_JOIN, SUMMARY_BYTES_IN))
