"""Bad database input: a wrong URL, a wrong password, an unreachable server, a server that goes
away mid-write. One clear line, the password never printed, nothing partial left behind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from alpstore.db import open_database
from alpstore.db.tables import blobs, checkpoints
from alpstore.errors import DatabaseError, UsageError
from alpstore.store import Store
from tests.conftest import Backend, _pg_admin, postgres_base_url, postgres_schema, run_cli

SECRET = "s3cr3t-Pa55"


def _assert_one_clean_line(err: str) -> None:
    assert "Traceback" not in err
    assert SECRET not in err
    lines = err.strip().splitlines()
    assert 1 <= len(lines) <= 2 and lines[0].startswith("alpstore: error: ")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (f"postgresql+psycopg://me:{SECRET}@db.example:notaport/x", "not valid"),
        (f"mysql://me:{SECRET}@localhost/x", "unsupported backend"),
        ("not a url at all", "not valid"),
    ],
)
def test_a_wrong_url_is_a_usage_error(tmp_path: Path, url: str, expected: str) -> None:
    with pytest.raises(UsageError, match=expected) as caught:
        open_database(root=tmp_path, url=url)
    assert SECRET not in str(caught.value)
    result = run_cli("--root", str(tmp_path), "--db", url, "session", "list")
    assert result.code == UsageError.exit_code
    _assert_one_clean_line(result.err)
    assert expected in result.err


def test_an_unreachable_server_is_a_clear_error(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://me:{SECRET}@127.0.0.1:1/nothing"
    with pytest.raises(DatabaseError, match=r"127\.0\.0\.1") as caught:
        open_database(root=tmp_path, url=url)
    assert SECRET not in str(caught.value) and "***" in str(caught.value)
    result = run_cli("--root", str(tmp_path), "--db", url, "db", "info")
    assert result.code == DatabaseError.exit_code
    _assert_one_clean_line(result.err)


def _pg_url_with(**changes: Any) -> str:
    base = postgres_base_url()
    if base is None:
        pytest.skip("PostgreSQL backend not tested: ALPSTORE_TEST_POSTGRES_URL is not set")
    _pg_admin()  # fails when the server is unreachable
    return make_url(base).set(**changes).render_as_string(hide_password=False)


@pytest.mark.postgres
def test_a_wrong_password_is_refused_without_printing_it(tmp_path: Path) -> None:
    url = _pg_url_with(password=SECRET)
    with pytest.raises(DatabaseError, match="password authentication failed") as caught:
        open_database(root=tmp_path, url=url)
    assert SECRET not in str(caught.value)
    result = run_cli("--root", str(tmp_path), "--db", url, "session", "list")
    assert result.code == DatabaseError.exit_code
    _assert_one_clean_line(result.err)
    assert "password authentication failed" in result.err


@pytest.mark.postgres
def test_an_unknown_database_is_a_clear_error(tmp_path: Path) -> None:
    url = _pg_url_with(database="alpstore_no_such_db")
    result = run_cli("--root", str(tmp_path), "--db", url, "db", "upgrade")
    assert result.code == DatabaseError.exit_code
    _assert_one_clean_line(result.err)
    assert "alpstore_no_such_db" in result.err


def test_a_server_going_away_mid_write_leaves_no_partial_checkpoint(backend: Backend) -> None:
    store = backend.open_store()
    session = store.create_session()
    session.commit_turn([{"role": "user", "content": "kept"}], kernel={"n": 1})
    before = store.list_checkpoints(session.id)
    # where the turn's entries are written: `append` (SQLite), or on PostgreSQL `grow_later`
    # (queued to ride the COMMIT's round trip, issue 45): the server goes away right after
    name = "grow_later" if backend.is_postgresql else "append"
    real = getattr(store.views, name)
    called: list[str] = []

    def write_then_lose_the_server(conn: Any, *args: Any, **kw: Any) -> Any:
        view = real(conn, *args, **kw)  # blobs and entries written or queued, nothing committed
        called.append(name)
        if backend.is_postgresql:
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
            with _pg_admin().connect() as admin:
                admin.exec_driver_sql(f"SELECT pg_terminate_backend({pid})")
        else:  # the SQLite equivalent: the connection dies under the transaction
            conn.connection.dbapi_connection.close()
        return view

    setattr(store.views, name, write_then_lose_the_server)
    with pytest.raises(DatabaseError) as caught:
        session.commit_turn([{"role": "user", "content": "lost"}], kernel={"n": 2})
    assert called and set(called) == {name}  # each try went through the patched step
    assert "\n" not in caught.value.message
    if backend.url:
        assert f":{make_url(backend.url).password}@" not in caught.value.message
    setattr(store.views, name, real)

    fresh = backend.open_store()
    after = fresh.get_session(session.uuid)
    assert fresh.list_checkpoints(after.id) == before
    assert [e.value for e in after.history()] == [{"role": "user", "content": "kept"}]
    with fresh.db.read() as conn:
        assert conn.execute(select(func.count()).select_from(checkpoints)).scalar_one() == 1
        assert conn.execute(select(func.count()).select_from(blobs)).scalar_one() == 2
    # the first store reconnects on its next write
    session.commit_turn([{"role": "user", "content": "again"}])
    assert [e.value for e in fresh.get_session(session.uuid).history()][-1]["content"] == "again"


def test_sql_helpers_on_each_backend(backend: Backend) -> None:
    """`alpstore sql`: the helpers on SQLite; on PostgreSQL a clear pointer to what to use."""
    with backend.open_store() as store:
        digest = store.archive.put({"role": "user", "content": "hi"})
    query = "select digest_hex(digest) as h, blob_text(digest) as t from blobs"
    result = backend.cli("sql", query, "--json")
    if backend.is_postgresql:
        assert result.code == UsageError.exit_code
        _assert_one_clean_line(result.err)
        assert "SQLite archives only" in result.err and "encode(digest, 'hex')" in result.err
        native = backend.cli("sql", "select encode(digest, 'hex') as h from blobs", "--json")
        assert native.code == 0, native.err
        assert json.loads(native.out) == [{"h": digest.hex()}]
    else:
        assert result.code == 0, result.err
        text = '{"content":"hi","role":"user"}'
        assert json.loads(result.out) == [{"h": digest.hex(), "t": text}]


@pytest.mark.postgres
def test_a_pooled_connection_the_server_dropped_while_idle_is_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent idle for a while (the server restarted, or a proxy closed the connection): its
    next turn goes through on a fresh connection instead of failing."""
    import alpstore.db.engine as engine_module

    with postgres_schema() as url:
        store = Store.open(tmp_path, url=url)
        try:
            session = store.create_session(name="idle")
            session.commit_turn([{"role": "user", "content": "before the drop"}])
            with store.db.read() as conn:
                pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
            with _pg_admin().connect() as admin:
                admin.exec_driver_sql(f"SELECT pg_terminate_backend({pid})")
            monkeypatch.setattr(engine_module, "PG_PING_AFTER_IDLE_S", 0.0)  # "a while" = now
            session.commit_turn([{"role": "user", "content": "after the drop"}])
            history = [e.value["content"] for e in session.history()]
            assert history == ["before the drop", "after the drop"]
        finally:
            store.close()
