"""What a user's query may do on PostgreSQL: the functions it calls, and the size of one row.

A ``READ ONLY`` transaction stops writes to tables, not what a function does outside them: a
large object (``lo_from_bytea``, ``lo_unlink``), another backend (``pg_terminate_backend``), a
setting (``set_config``), a lock (``pg_advisory_lock``), a sequence (``nextval``), a
notification (``pg_notify``). So a query may call only what an **allow-list** lets through:
the functions of ``pg_catalog`` and ``information_schema`` that PostgreSQL marks immutable or
stable (they only compute a value), less :data:`DENIED`, plus the volatile ones named in
:data:`VOLATILE_ALLOWED`. What a query calls is read from PostgreSQL's own parse of it, never
from its text: the query is made into a temporary view (parsed, never planned nor run) inside a
savepoint that is rolled back, and the view's stored tree names every function, operator,
aggregate and window function it calls by oid.

A row is bounded on the server: the query runs wrapped in one that measures each row
(``octet_length``) and sends a row over ``--max-bytes`` with its values left out, so the
client never receives it (:func:`bounded_statement`); rows are streamed one at a time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from alpstore.errors import UsageError

PLAIN_SCHEMAS = frozenset({"pg_catalog", "information_schema"})
"""The schemas whose functions a query may call (extensions and user functions: none)."""

VOLATILE_ALLOWED = frozenset(
    {
        "random",
        "random_normal",
        "clock_timestamp",
        "timeofday",
        "gen_random_uuid",
        "uuidv4",
        "uuidv7",
        "pg_sleep",  # bounded by --timeout (statement_timeout)
        "pg_sleep_for",
        "pg_sleep_until",
        "pg_relation_size",
        "pg_total_relation_size",
        "pg_table_size",
        "pg_indexes_size",
        "pg_database_size",
        "bernoulli",  # TABLESAMPLE methods
        "system",
    }
)
"""Volatile functions a query may call: they change nothing and reach nothing outside."""

DENIED = frozenset(
    {
        # stable, yet they allocate a transaction id (a write to the cluster's state)
        "txid_current",
        "pg_current_xact_id",
        # run SQL of their own, out of reach of this check
        "database_to_xml",
        "database_to_xml_and_xmlschema",
        "database_to_xmlschema",
        "schema_to_xml",
        "schema_to_xml_and_xmlschema",
        "schema_to_xmlschema",
        "table_to_xml",
        "table_to_xml_and_xmlschema",
        "table_to_xmlschema",
        # validate (compile) a function by oid
        "fmgr_c_validator",
        "fmgr_internal_validator",
        "fmgr_sql_validator",
    }
)
"""Immutable or stable functions of ``pg_catalog`` a query may still not call."""

CHECK_VIEW = "alpstore_sql_check"
_FUNCTION_FIELDS = re.compile(
    r":(?:funcid|opfuncid|hashfuncid|negfuncid|aggfnoid|winfnoid|tsmhandler) (\d+)"
)
"""Fields of a stored query tree (``nodeToString``) that hold a function's oid."""
_OPERATOR_FIELDS = re.compile(r":(?:opno|eqop|sortop) (\d+)")
_OPERATOR_LISTS = re.compile(r":opnos \(o((?: \d+)*)\)")
_EXPLAIN_PREFIX = re.compile(
    r"^\s*explain\s*(?:\(\s*\w+(?:\s+[\w']+)?(?:\s*,\s*\w+(?:\s+[\w']+)?)*\s*\)\s*)?"
    r"(?:(?:analyze|analyse|verbose)\s+)*",
    re.IGNORECASE,
)
_TRAILING_SEMICOLONS = re.compile(r"(?:\s*;)+\s*$")

TEXT_LIKE = frozenset({17, 25, 1042, 1043})
"""bytea, text, bpchar, varchar: measured as they are; any other type by its text form."""


class QueryFailed(Exception):
    """The server refused to parse or check the query; the message is its first line."""


@dataclass(frozen=True)
class Described:
    """A statement as the server parsed it: its result columns' names and type oids."""

    names: list[str]
    types: list[int]


def _first_line(message: bytes | str | None) -> str:
    text = message.decode("utf-8", "replace") if isinstance(message, bytes) else message or ""
    text = text.strip()
    if text.startswith("ERROR:"):
        text = text[len("ERROR:") :].strip()
    return (text.splitlines() or [""])[0]


def describe(dbapi: Any, query: str) -> Described:
    """Parse ``query`` on the server as one statement (never run it): its result columns.

    Raises:
        UsageError: more than one statement, or the server cannot parse it.
    """
    pgconn = dbapi.pgconn
    parsed = pgconn.prepare(b"", query.encode("utf-8"))
    if parsed.status != 1:  # COMMAND_OK
        msg = _first_line(parsed.error_message)
        if "multiple commands" in msg:
            raise UsageError("refused: `alpstore sql` runs one statement, and it only reads")
        raise QueryFailed(msg)
    result = pgconn.describe_prepared(b"")
    if result.status != 1:
        raise QueryFailed(_first_line(result.error_message))
    fields = range(result.nfields)
    names = [bytes(result.fname(i) or b"").decode("utf-8", "replace") for i in fields]
    return Described(names, [int(result.ftype(i)) for i in fields])


def query_body(query: str, first_word: str) -> str:
    """The query a view can be made of: without a trailing ``;`` and, for EXPLAIN, its options."""
    body = _TRAILING_SEMICOLONS.sub("", query)
    if first_word == "explain":
        match = _EXPLAIN_PREFIX.match(body)
        body = body[match.end() :] if match else body
    return body


def called_functions(tree: str) -> tuple[set[int], set[int]]:
    """The function and operator oids a stored query tree (``pg_rewrite.ev_action``) calls."""
    functions = {int(m) for m in _FUNCTION_FIELDS.findall(tree)} - {0}
    operators = {int(m) for m in _OPERATOR_FIELDS.findall(tree)}
    for listed in _OPERATOR_LISTS.findall(tree):
        operators.update(int(x) for x in listed.split())
    return functions, operators - {0}


def allowed(name: str, schema: str, volatility: str) -> bool:
    """Whether a query may call ``schema.name`` of this volatility (``i``, ``s`` or ``v``)."""
    if schema not in PLAIN_SCHEMAS:
        return False
    if volatility in ("i", "s"):
        return name not in DENIED
    return name in VOLATILE_ALLOWED


def check_functions(dbapi: Any, body: str) -> None:
    """Refuse ``body`` if it calls a function outside the allow-list (see the module's doc).

    Runs in the transaction's read-write start, inside a savepoint that is always rolled back;
    the statements go through the extended protocol (one statement each, never a second one
    smuggled in the query's text).

    Raises:
        UsageError: the query calls a function it may not (naming it), or cannot be checked.
    """
    cursor = dbapi.cursor()
    try:
        cursor.execute("SAVEPOINT alpstore_sql_check", binary=True)
        try:
            tree = _view_tree(cursor, body)
            functions, operators = called_functions(tree)
            if not functions and not operators:
                return
            cursor.execute(
                "SELECT p.oid, p.proname, n.nspname, p.provolatile FROM pg_catalog.pg_proc p "
                "JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace "
                "WHERE p.oid = ANY(%s::oid[]) OR p.oid IN (SELECT o.oprcode "
                "FROM pg_catalog.pg_operator o WHERE o.oid = ANY(%s::oid[]))",
                (_oid_array(functions), _oid_array(operators)),
            )
            found = cursor.fetchall()
        finally:
            cursor.execute("ROLLBACK TO SAVEPOINT alpstore_sql_check", binary=True)
            cursor.execute("RELEASE SAVEPOINT alpstore_sql_check", binary=True)
    finally:
        cursor.close()
    if functions - {int(r[0]) for r in found}:
        raise UsageError("refused: the query calls a function PostgreSQL does not list")
    for _oid, name, schema, volatility in sorted(found, key=lambda r: str(r[1])):
        if not allowed(str(name), str(schema), str(volatility)):
            shown = name if schema == "pg_catalog" else f"{schema}.{name}"
            raise UsageError(
                f"refused: {shown}() may change the database or reach outside it; "
                "`alpstore sql` calls only PostgreSQL's built-in functions that compute a value"
            )


def _view_tree(cursor: Any, body: str) -> str:
    try:
        cursor.execute(
            f"CREATE TEMPORARY VIEW {CHECK_VIEW} AS SELECT FROM (\n{body}\n) AS alpstore_query",
            binary=True,
        )
    except Exception as err:
        diag = getattr(err, "diag", None)
        msg = _first_line(str((diag and diag.message_primary) or err))
        if "temporary" in msg or "read-only" in msg:
            raise UsageError(
                f"cannot check which functions the query calls: {msg}",
                hint="`alpstore sql` on PostgreSQL needs the TEMPORARY privilege on the database",
            ) from err
        if "data-modifying" in msg:
            raise UsageError(f"refused: {msg}; `alpstore sql` only reads") from err
        raise QueryFailed(msg) from err
    cursor.execute(
        "SELECT ev_action::text FROM pg_catalog.pg_rewrite "
        f"WHERE ev_class = 'pg_temp.{CHECK_VIEW}'::regclass",
        binary=False,
    )
    row = cursor.fetchone()
    return str(row[0]) if row else ""


def _oid_array(oids: set[int]) -> str:
    return "{" + ",".join(str(o) for o in sorted(oids)) + "}"


def bounded_statement(body: str, described: Described, max_bytes: int) -> str:
    """``body`` wrapped so that the server measures each row and leaves out the values of one
    over ``max_bytes``: its columns, then the row's size in bytes (values as the client gets
    them: bytea and text as they are, any other type as its text form).

    ``OFFSET 0`` keeps the planner from copying the query's expressions into the measure (they
    run once a row).
    """
    n = len(described.types)
    aliases = ", ".join(f"c{i}" for i in range(n))
    sizes = " + ".join(
        f"coalesce(octet_length(q.c{i}{'' if t in TEXT_LIKE else '::text'}), 0)"
        for i, t in enumerate(described.types)
    )
    kept = ", ".join(f"CASE WHEN s.n <= {int(max_bytes)} THEN q.c{i} END" for i in range(n))
    return (
        f"SELECT {kept}, s.n FROM (SELECT * FROM (\n{body}\n) AS u OFFSET 0) AS q({aliases}), "
        f"LATERAL (SELECT ({sizes})::bigint AS n OFFSET 0) AS s"
    )
