"""`alpstore sql` keeps its promise: it only reads, it stops, and it says what it cut."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ALPSTORE, Backend, run_on_tty

RUNAWAY = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c"


def _seed(backend: Backend) -> None:
    store = backend.open_store()
    store.create_session(name="s").commit_turn([{"role": "user", "content": "hi"}])
    backend.close_all()


COUNTS = "select (select count(*) from sessions) as s, (select count(*) from blobs) as b"


def refused_statements(tmp: Path) -> list[str]:
    """Every statement here must be refused on both backends, touching neither archive nor disk."""
    return [
        f"ATTACH DATABASE '{tmp}/attached.db' AS x",
        f"ATTACH 'file:{tmp}/uri.db?mode=rwc' AS y",
        f"VACUUM INTO '{tmp}/vacuum.db'",
        "VACUUM",
        "PRAGMA journal_mode=DELETE",
        "PRAGMA query_only=OFF",
        "PRAGMA writable_schema=ON",
        "BEGIN",
        "COMMIT",
        "SAVEPOINT s",
        "INSERT INTO sessions (uuid) VALUES ('x')",
        "DELETE FROM blobs",
        "UPDATE sessions SET name = 'x'",
        "CREATE TABLE t (x INTEGER)",
        "DROP VIEW session_lineage",
        "SELECT load_extension('x')",
        f"COPY sessions TO '{tmp}/copied.csv'",
        f"SELECT 1; COPY sessions TO '{tmp}/copied2.csv'",
        "WITH d AS (DELETE FROM blobs RETURNING id) SELECT count(*) FROM d",
        "SET default_transaction_read_only = off",
        "ANALYZE",
    ]


def test_refused_statements_touch_nothing(backend: Backend, tmp_path: Path) -> None:
    """The list, through the library (fast); the ATTACH of the report through the command."""
    from alpstore.errors import UsageError
    from alpstore.sqlhelpers import run_query

    _seed(backend)
    outside = tmp_path / "outside"
    outside.mkdir()
    result = backend.cli("sql", f"ATTACH DATABASE '{outside}/index.lock' AS x")
    assert result.code == 2, result.err
    assert result.err.startswith("alpstore: error: "), result.err
    assert "only reads" in result.err
    assert list(outside.iterdir()) == []  # no file created anywhere
    store = backend.open_store()
    before = run_query(store, COUNTS).rows
    for statement in refused_statements(outside):
        with pytest.raises(UsageError):
            run_query(store, statement)
    assert run_query(store, COUNTS).rows == before
    backend.close_all()
    assert list(outside.iterdir()) == []


def test_read_only_introspection_still_works(backend: Backend) -> None:
    _seed(backend)
    result = backend.cli("sql", "select name from sessions", "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out) == [{"name": "s"}]
    if not backend.is_postgresql:
        pragma = backend.cli("sql", "PRAGMA table_info(sessions)")
        assert pragma.code == 0 and "uuid" in pragma.out, pragma.err


def test_timeout_stops_a_runaway_query(backend: Backend) -> None:
    _seed(backend)
    started = time.monotonic()
    result = backend.cli("sql", RUNAWAY, "--timeout", "1", timeout=60)
    assert time.monotonic() - started < 30
    assert result.code == 2, result.err
    assert "stopped after 1 s (--timeout)" in result.err


def test_ctrl_c_interrupts_a_runaway_query(backend: Backend) -> None:
    _seed(backend)
    env = dict(os.environ)
    if backend.url:
        env["ALPSTORE_DATABASE_URL"] = backend.url
    before = _running_queries(backend.url) if backend.url else set()
    proc = subprocess.Popen(
        [ALPSTORE, "--root", str(backend.root), "sql", RUNAWAY, "--timeout", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        _wait_until_running(proc, backend, before)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            pytest.fail("Ctrl-C did not stop the query")
    finally:  # never leave a runaway query behind (it runs without a timeout)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert err.decode().startswith("alpstore: error: query interrupted (Ctrl-C)"), err
    if backend.url:  # and the server stopped it too
        time.sleep(0.5)
        assert not _running_queries(backend.url) - before


def _running_queries(url: str) -> set[int]:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "select pid from pg_stat_activity where state = 'active' "
                    "and pid <> pg_backend_pid() and query like '%WITH RECURSIVE c(x)%' "
                    "and query not like 'CREATE%'"
                )
            ).all()
    finally:
        engine.dispose()
    return {int(r[0]) for r in rows}


def _open_files(pid: int) -> list[str]:
    """What the process's descriptors name now (one closed meanwhile is skipped)."""
    out = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(FileNotFoundError):
            out.append(str(fd.readlink()))
    return out


def _wait_until_running(proc: subprocess.Popen[bytes], backend: Backend, before: set[int]) -> None:
    """Until the query runs (a Ctrl-C during start-up is plain Python's, before ours)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if backend.url:
            running = bool(_running_queries(backend.url) - before)
        else:
            running = any(link.endswith("archive.db") for link in _open_files(proc.pid))
        if running:
            time.sleep(0.5)
            return
        time.sleep(0.1)
    pytest.fail("the query never started")


def test_cut_rows_are_announced(backend: Backend) -> None:
    _seed(backend)
    query = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 50) SELECT x FROM c"
    )
    result = backend.cli("sql", query, "--max-rows", "10")
    assert result.code == 0, result.err
    assert result.out.splitlines() == ["x", *map(str, range(1, 11))]
    assert "showing the first 10 rows; more were cut (--max-rows 10)" in result.err
    whole = backend.cli("sql", query)
    assert len(whole.out.splitlines()) == 51 and "cut" not in whole.err


def test_memory_is_bounded_by_bytes(backend: Backend) -> None:
    """200 rows of 1 MiB: held up to --max-bytes, and stderr says where it stopped."""
    _seed(backend)
    query = (
        "WITH RECURSIVE s(t, n) AS (SELECT CAST('xxxxxxxx' AS TEXT), 1 UNION ALL "
        "SELECT t || t, n + 1 FROM s WHERE n < 18), "
        "c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200) "
        "SELECT x, t FROM c, s WHERE n = 18"
    )
    limit = 5 * 1024 * 1024 + 512 * 1024
    result = backend.cli("sql", query, "--json", "--max-bytes", str(limit))
    assert result.code == 0, result.err
    rows = json.loads(result.out)
    assert len(rows) == 5 and len(rows[0]["t"]) == 1024 * 1024
    assert f"more were cut at {limit} bytes (--max-bytes)" in result.err


def test_long_cells_are_marked_on_a_terminal(backend: Backend) -> None:
    """On a terminal a cut cell ends in …; --wide shows it whole; a pipe gets it whole too."""
    _seed(backend)
    hexed = "encode(digest, 'hex')" if backend.is_postgresql else "digest_hex(digest)"
    query = f"select {hexed} || {hexed} as d from blobs"  # 128 characters
    env = {**os.environ, "COLUMNS": "200"}
    if backend.url:
        env["ALPSTORE_DATABASE_URL"] = backend.url

    def on_tty(*extra: str) -> str:
        return run_on_tty("--root", str(backend.root), "sql", query, *extra, env=env)[1]

    cut = on_tty()
    assert "…" in cut
    whole = on_tty("--wide")
    assert "…" not in whole
    piped = backend.cli("sql", query)
    cells = piped.out.splitlines()[1:]
    assert cells and all(len(c) == 128 for c in cells)


def test_several_statements_are_refused_and_nothing_is_written(backend: Backend) -> None:
    """A query may not end the read-only transaction and write after it: `select 1; commit;
    update …` ran the update on PostgreSQL (psycopg's simple protocol runs several statements)."""
    _seed(backend)
    for attack in (
        "select 1; commit; update sessions set name = 'pwned'",
        "select 1; commit; create table evil (x integer)",
        "select 1; rollback; begin read write; delete from backtracks; commit",
    ):
        result = backend.cli("sql", attack)
        assert result.code == 2, (attack, result.out, result.err)
        assert result.err.startswith("alpstore: error: ") and "Traceback" not in result.err
    names = backend.cli("sql", "select name from sessions", "--json")
    assert json.loads(names.out) == [{"name": "s"}], names.err
    evil = (
        "select count(*) as n from pg_tables where tablename = 'evil'"
        if backend.is_postgresql
        else "select count(*) as n from sqlite_master where name = 'evil'"
    )
    listed = backend.cli("sql", evil, "--json")
    assert json.loads(listed.out) == [{"n": 0}], listed.err


def test_a_colon_inside_a_literal_is_text(backend: Backend) -> None:
    """The query reaches the database as written: `"turn":12` in a string literal is not a
    bind parameter (it was: "A value is required for bind parameter '12'")."""
    _seed(backend)
    result = backend.cli("sql", """select '{"turn":12}' as j, 'at :noon' as k""", "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out) == [{"j": '{"turn":12}', "k": "at :noon"}]
    piped = backend.cli("sql", "select 'x' as a where '{\"a\":1}' like '%\"a\":1%'")
    assert piped.code == 0 and piped.out.splitlines() == ["a", "x"], piped.err


def _strict_json(text: str) -> object:
    def refuse(name: str) -> object:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_json_output_is_valid_json_for_every_value(backend: Backend) -> None:
    """Non-finite numbers and PostgreSQL's dates, numerics, intervals and UUIDs: valid JSON
    (they gave `Infinity`/`NaN`, which JSON does not have, or exit 70 on PostgreSQL)."""
    _seed(backend)
    if backend.is_postgresql:
        query = (
            "select 'Infinity'::float8 as inf, '-Infinity'::float8 as ninf, 'NaN'::float8 as nan,"
            " timestamptz '2026-01-02 03:04:05+00' as t, date '2026-01-02' as d,"
            " 1.50::numeric as n, interval '1 day' as i,"
            " '12345678-1234-5678-1234-567812345678'::uuid as u,"
            " array['NaN'::float8, 1.5] as a"
        )
    else:
        query = "select 1e999 as inf, -1e999 as ninf, 0.5 as half"
    result = backend.cli("sql", query, "--json")
    assert result.code == 0, result.err
    (row,) = _strict_json(result.out)  # type: ignore[misc]
    assert row["inf"] == "Infinity" and row["ninf"] == "-Infinity"
    if backend.is_postgresql:
        assert row["nan"] == "NaN" and row["a"] == ["NaN", 1.5]
        assert row["t"] == "2026-01-02T03:04:05+00:00" and row["d"] == "2026-01-02"
        assert row["n"] == "1.50" and row["u"] == "12345678-1234-5678-1234-567812345678"
        assert row["i"] == "1 day, 0:00:00"
        table = backend.cli("sql", query)
        assert table.code == 0, table.err
        assert table.out.splitlines()[1].split("\t")[3:6] == [
            "2026-01-02 03:04:05+00:00",
            "2026-01-02",
            "1.50",
        ]
    else:
        assert row["half"] == 0.5


def test_piped_numbers_are_whole(backend: Backend) -> None:
    """A pipe gets every value whole (README): a float is not cut to six digits."""
    _seed(backend)
    result = backend.cli("sql", "select 0.1234567891 as f, 1796207045.5693252 as t")
    assert result.code == 0, result.err
    assert result.out.splitlines() == ["f\tt", "0.1234567891\t1796207045.5693252"]


def test_json_on_a_terminal_escapes_bidi_and_c1(backend: Backend) -> None:
    """`sql --json` on a terminal: a bidi override or C1 control from the archive reaches the
    screen as a JSON escape (it was written raw), and the text is the piped document."""
    _seed(backend)
    text = "left \u202eevil\u202c \x9b31m done"
    literal = "'" + text + "'"
    env = {**os.environ, "COLUMNS": "200"}
    if backend.url:
        env["ALPSTORE_DATABASE_URL"] = backend.url
    query = f"select {literal} as c"
    code, shown = run_on_tty("--root", str(backend.root), "sql", query, "--json", env=env)
    assert code == 0, shown
    for raw in ("\u202e", "\u202c", "\x9b"):
        assert raw not in shown, shown
    piped = backend.cli("sql", query, "--json")
    assert text in piped.out
    assert json.loads(shown) == json.loads(piped.out) == [{"c": text}]


@pytest.mark.postgres
def test_postgresql_query_is_rolled_back_not_committed(tmp_path: Path) -> None:
    """A large object made by a query (lo_from_bytea) does not outlive it: never committed."""
    from tests.conftest import postgres_schema

    root = tmp_path / "run"
    root.mkdir()
    with postgres_schema() as url:
        b = Backend("postgresql", root, url)
        try:
            _seed(b)
            b.cli("sql", "select lo_from_bytea(0, 'x'::bytea) is not null as made")
            left = b.cli("sql", "select count(*) as n from pg_largeobject_metadata", "--json")
            assert left.code == 0, left.err
            assert json.loads(left.out) == [{"n": 0}]
        finally:
            b.close_all()
