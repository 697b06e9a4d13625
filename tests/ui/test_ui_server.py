"""The inspector without a browser: refusing to start, the read-only connection, the token
gate and Host check, and the page queries against the debug commands they mirror."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alpstore.archive.reading import encode
from alpstore.debug.diff import diff
from alpstore.errors import AlpstoreError
from alpstore.store import Store
from alpstore.ui import diffs, queries
from alpstore.ui.app import Settings, create_app
from alpstore.ui.readonly import open_read_only
from tests.backend_pass import database_url_for_roots
from tests.conftest import Backend
from tests.ui._ui_demo import build_demo
from tests.ui.conftest import fingerprint


def test_ui_refuses_a_missing_archive_in_one_line_and_creates_nothing(backend: Backend) -> None:
    r = backend.cli("ui", "--port", "0")
    assert r.code == 4, r.err
    assert r.err.splitlines()[0].startswith("alpstore: error: no archive at ")
    assert "Traceback" not in r.err
    assert list(backend.root.iterdir()) == []
    if backend.url:
        from sqlalchemy import create_engine, inspect
        from sqlalchemy.pool import NullPool

        engine = create_engine(backend.url, poolclass=NullPool)
        with engine.connect() as conn:
            assert inspect(conn).get_table_names() == []
        engine.dispose()


def test_ui_refuses_an_archive_at_another_revision_and_leaves_it(backend: Backend) -> None:
    from alembic import command
    from alpstore.db.migrate import alembic_config

    db = backend.open_database()
    command.downgrade(alembic_config(db), "0002")
    db.close()
    before = fingerprint(backend.root, backend.url)
    r = backend.cli("ui", "--port", "0")
    assert r.code == 6, r.err
    assert "schema revision 0002" in r.err.splitlines()[0]
    assert "db upgrade" in r.err
    assert fingerprint(backend.root, backend.url) == before


def test_read_only_store_cannot_write(backend: Backend) -> None:
    store = backend.open_store()
    store.create_session(name="s").commit_turn([{"role": "user", "content": "hi"}])
    store.close()
    before = fingerprint(backend.root, backend.url)
    ro = open_read_only(backend.root, backend.url)
    try:
        assert [s.name for s in ro.list_sessions()] == ["s"]
        with pytest.raises(AlpstoreError), ro.db.read() as conn:
            conn.exec_driver_sql("UPDATE sessions SET name = 'changed'")
        with pytest.raises(AlpstoreError):
            ro.create_session(name="another")
    finally:
        ro.close()
    assert fingerprint(backend.root, backend.url) == before


def read_only(root: Path) -> Store:
    """The inspector's store over ``root``'s archive (its PostgreSQL schema on that pass)."""
    url_for = database_url_for_roots()
    return open_read_only(root, url_for(root) if url_for else None)


# ---------------------------------------------------------------- the token gate
@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, dict[str, Any]]]:
    root = tmp_path_factory.mktemp("ui-demo")
    with Store.open(root) as store:
        ids = build_demo(store)
    ro = read_only(root)
    yield ro, ids
    ro.close()


@pytest.fixture
def client(demo_store: tuple[Store, dict[str, Any]], tmp_path: Path) -> Iterator[Any]:
    from starlette.testclient import TestClient

    settings_ = Settings(demo_store[0], "s3cret-token", 4242, ["127.0.0.1", "localhost"], tmp_path)
    with TestClient(create_app(settings_), base_url="http://127.0.0.1:4242") as c:
        yield c


def test_token_gate(client: Any) -> None:
    assert client.get("/").status_code == 401
    assert client.get("/?token=wrong").status_code == 401
    assert client.get("/static/ui.js").status_code == 401
    r = client.get("/s/demo?token=s3cret-token", follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/s/demo"
    assert "HttpOnly" in r.headers["set-cookie"] and "SameSite=strict" in r.headers["set-cookie"]
    r = client.get("/s/demo")  # the cookie now
    assert r.status_code == 200
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert client.post("/").status_code == 405
    assert client.get("/", headers={"host": "evil.example:4242"}).status_code == 400


def test_bad_parameters_are_one_line_pages(client: Any) -> None:
    client.get("/?token=s3cret-token")
    r = client.get("/s/demo?page=x")
    assert r.status_code == 400 and "page='x'" in r.text.replace("&#39;", "'")
    r = client.get("/s/demo/bisect?grep=(")
    assert r.status_code == 400 and "not a valid regular expression" in r.text
    assert client.get("/c/999999").status_code == 404
    r = client.get("/continuity?execution=../../etc")
    assert r.status_code == 400 and "execution id" in r.text
    assert client.get("/s/no-such-session").status_code == 404
    r = client.get("/s/demo/poll?after=1")
    assert r.status_code == 200 and json.loads(r.text)["rows"][0]["seq"] == 2


# ---------------------------------------------------------------- queries = debug commands
def _all_checkpoints(store: Store) -> list[Any]:
    return [
        ck
        for s in store.list_sessions()
        for ck in store.list_checkpoints(s.id, include_abandoned=True)
    ]


@pytest.fixture(scope="module")
def packed_demo_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """The demo archive with every blob packed (0010: summaries' kinds in their frames' rows)."""
    root = tmp_path_factory.mktemp("ui-demo-packed")
    with Store.open(root) as store:
        build_demo(store)
        assert store.archive.pack_cold(keep_loose=0).blobs > 0
    ro = read_only(root)
    yield ro
    ro.close()


@settings(max_examples=25)
@given(data=st.data(), packed=st.booleans())
def test_diff_page_reports_what_debug_diff_reports(
    demo_store: tuple[Store, dict[str, Any]],
    packed_demo_store: Store,
    data: st.DataObject,
    packed: bool,
) -> None:
    store = packed_demo_store if packed else demo_store[0]
    cks = _all_checkpoints(store)
    a = data.draw(st.sampled_from(cks))
    b = data.draw(st.sampled_from(cks))
    want = diff(store, str(a.id), str(b.id))
    got = diffs.diff_page(store, a, b, 0)
    assert got.common == want.common
    assert got.removed == len(want.removed)
    assert got.added == len(want.added)
    assert [(f.position, f.summary.digest, f.replaced) for f in got.folds] == [
        (f.position, f.summary.digest, len(f.replaced)) for f in want.folds
    ]
    pages = [diffs.diff_page(store, a, b, n) for n in range(got.pages)]
    rows = [r for p in pages for r in p.rows]
    assert sorted((r.position, r.old.digest) for r in rows if r.old) == sorted(
        (p, e.digest) for p, e in want.removed
    )
    assert sorted((r.position, r.new.digest) for r in rows if r.new) == sorted(
        (p, e.digest) for p, e in want.added
    )


@pytest.mark.parametrize("packed", [False, True])
def test_diff_page_folds_what_debug_diff_folds_for_every_pair(
    demo_store: tuple[Store, dict[str, Any]], packed_demo_store: Store, packed: bool
) -> None:
    """Every pair of checkpoints whose diff folds entries into a summary (90 of the demo's
    2,209; the sampled test above meets few), loose and with the summaries packed."""
    store = packed_demo_store if packed else demo_store[0]
    cks = _all_checkpoints(store)
    seen = 0
    for a in cks:
        for b in cks:
            want = diff(store, str(a.id), str(b.id))
            if not want.folds:
                continue
            seen += 1
            got = diffs.diff_page(store, a, b, 0)
            assert [(f.position, f.summary.digest) for f in got.folds] == [
                (f.position, f.summary.digest) for f in want.folds
            ], (a.id, b.id)
    assert seen >= 10


@pytest.mark.parametrize("packed", [False, True])
def test_an_extension_diff_finds_the_summaries_of_its_tail(tmp_path: Path, packed: bool) -> None:
    """B extends A with summaries appended among its turns: the diff lists them as folds,
    whether their kind is in a loose row or in their frame's row (0010)."""
    with Store.open(tmp_path) as store:
        s = store.create_session(name="tail")
        s.commit_turn([{"role": "user", "content": "first"}])
        a = store.list_checkpoints(s.id)[-1]
        summaries = []
        for t in range(3):
            msg = {"role": "user", "content": f"q{t}"}
            s.commit_turn([msg])
            summaries.append(s.append_summary(f"summary {t}", [encode(msg)[0]]))
        s.commit_turn([{"role": "user", "content": "last"}])  # a checkpoint after the last
        if packed:
            assert store.archive.pack_cold(keep_loose=0).blobs > 0
        b = store.list_checkpoints(s.id)[-1]
        want = diff(store, str(a.id), str(b.id))
        got = diffs.diff_page(store, a, b, 0)
        assert [f.summary.digest for f in got.folds] == summaries
        assert [(f.position, f.summary.digest) for f in got.folds] == [
            (f.position, f.summary.digest) for f in want.folds
        ]


def test_timeline_pages_match_session_log(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    with Store.open(tmp_path) as store:
        s = store.create_session(name="long")
        for t in range(230):
            s.commit_turn(
                [{"role": "user", "content": f"q{t}"}, {"role": "assistant", "content": "a" * t}]
            )
    log = run_cli("--root", str(tmp_path), "session", "log", "long", "--json")
    assert log.code == 0, log.err
    want = {
        d["checkpoint"]: (d["entries_added"], d["bytes_added"])
        for d in json.loads(log.out)
        if d["type"] == "checkpoint"
    }
    ro = read_only(tmp_path)
    try:
        info = ro.get_session("long").info()
        last = queries.timeline_page(ro, info, None)
        assert (last.page, last.pages, last.total) == (2, 3, 230)
        got = {}
        for n in range(3):
            page = queries.timeline_page(ro, info, n)
            got.update({r.checkpoint.id: (r.entries_added, r.bytes_added) for r in page.rows})
        assert got == want
        window = queries.conversation(ro, ro.resolve_checkpoint("long@latest"), None)
        assert window.length == 460 and window.start == 260
        assert window.new == frozenset({458, 459})
        assert [p for p, _ in window.entries] == list(range(260, 460))
    finally:
        ro.close()


# ---------------------------------------------------------------- hostile requests and data
HIDDEN = {
    "\u061c": "\\u061c",  # ARABIC LETTER MARK (bidi)
    "\u2028": "\\u2028",  # LINE SEPARATOR
    "\ufeff": "\\ufeff",  # ZERO WIDTH NO-BREAK SPACE
    "\u2060": "\\u2060",  # WORD JOINER
    "\U000e0049": "\\U000e0049",  # TAG LATIN CAPITAL LETTER I (hidden "ASCII smuggling")
    "\u202e": "\\u202e",
    "\x1b": "\\x1b",
}
HIDDEN_TEXT = "look:" + "".join(f"<{c}>" for c in HIDDEN)
DEEP_ARGUMENTS = "[" * 100_000
NEAR_LIMIT_ARGUMENTS = "[" * 950 + "]" * 950


@pytest.fixture(scope="module")
def hostile_store(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Store, dict[str, Any]]]:
    """An archive whose messages, labels and events carry what the demo's XSS transcript does
    not: invisible characters, nesting deeper than a JSON parser recurses, odd event details."""
    from alpstore.db.tables import checkpoints, session_events

    root = tmp_path_factory.mktemp("ui-hostile")
    with Store.open(root) as store:
        s = store.create_session(name="hostile")
        first = s.commit_turn([{"role": "user", "content": HIDDEN_TEXT}], label="lbl")
        calls = [
            {"id": f"c{n}", "type": "function", "function": {"name": "f", "arguments": a}}
            for n, a in enumerate((DEEP_ARGUMENTS, NEAR_LIMIT_ARGUMENTS))
        ]
        s.commit_turn([{"role": "assistant", "content": "calls", "tool_calls": calls}])
        s.record_decision("fold", {"summary": 5, "start": 0, "end": 1, "covered": 1})
        s.record_decision("fork", {"child": ["not", "an", "id"]})
        s.record_decision("fork", {"child": 12345})
        s.record_decision("note" + HIDDEN_TEXT, {"k": HIDDEN_TEXT})
        s.commit_turn([{"role": "user", "content": "after the events"}])
        s.record_decision("late", {"note": "a clock far off"})
        with store.db.atomic() as conn:  # as a damaged or foreign archive may hold it
            conn.execute(  # (alpstore refuses such a label when a checkpoint is taken)
                checkpoints.update()
                .where(checkpoints.c.id == first.id)
                .values(label="lbl" + HIDDEN_TEXT)
            )
            conn.execute(
                session_events.update()
                .where(session_events.c.kind == "late")
                .values(created_at=253402300800.0)  # year 10000
            )
            store.record_event(conn, s.id, "listed", None, ["not", "a", "dict"])  # type: ignore[arg-type]
        other = store.create_session(name="other")
        other.commit_turn([{"role": "user", "content": "plain"}])
        ids = {"session": s.uuid, "first": first.id}
    ro = read_only(root)
    yield ro, ids
    ro.close()


@pytest.fixture
def hostile(hostile_store: tuple[Store, dict[str, Any]], tmp_path: Path) -> Iterator[Any]:
    from starlette.testclient import TestClient

    settings_ = Settings(hostile_store[0], "tok", 4242, ["127.0.0.1"], tmp_path)
    with TestClient(
        create_app(settings_), base_url="http://127.0.0.1:4242", raise_server_exceptions=False
    ) as c:
        c.get("/?token=tok")
        yield c


def test_numbers_beyond_a_sql_integer_are_404_or_400_not_500(
    hostile: Any, hostile_store: tuple[Store, dict[str, Any]]
) -> None:
    first = hostile_store[1]["first"]
    for huge in ("9223372036854775808", "99999999999999999999999"):
        r = hostile.get(f"/c/{huge}")
        assert r.status_code == 404, r.text
        assert 'id="error"' in r.text and "no such checkpoint" in r.text
        r = hostile.get(f"/s/hostile/poll?after={huge}")
        assert r.status_code == 400 and "out of range" in r.json()["error"]
        for page in (
            f"/s/hostile?page={huge}",
            f"/c/{first}?start={huge}",
            f"/s/hostile?page=-{huge}",
        ):
            r = hostile.get(page)
            assert r.status_code == 400 and "out of range" in r.text, page
    assert hostile.get(f"/c/{first}?start=1000000").status_code == 200  # in range: the last


def test_a_nul_character_in_a_reference_is_404_on_every_backend(hostile: Any) -> None:
    # PostgreSQL refuses NUL in any text parameter; SQLite just finds nothing
    for path in (
        "/s/%00",
        "/s/hostile%00",
        "/s/%00/bisect?grep=x",
        "/diff?a=%00@1&b=hostile@latest",
        "/diff?a=hostile@latest&b=hostile%00@1",
    ):
        r = hostile.get(path)
        assert r.status_code == 404, (path, r.text)
        assert 'id="error"' in r.text and "\\x00" in r.text
    r = hostile.get("/s/%00/poll?after=0")
    assert r.status_code == 404 and "no session" in r.json()["error"]


def test_tool_arguments_nested_past_the_json_parser_render_as_text(
    hostile: Any, hostile_store: tuple[Store, dict[str, Any]]
) -> None:
    store, ids = hostile_store
    ck = store.resolve_checkpoint(f"{ids['session']}@2")
    r = hostile.get(f"/c/{ck.id}")
    assert r.status_code == 200, r.text
    assert "[" * 1000 in r.text  # the deep one as it was written
    assert "[\n" in r.text  # the one the parser can still read, pretty-printed
    r = hostile.get(f"/diff?a={ids['first']}&b={ck.id}")
    assert r.status_code == 200 and "[" * 1000 in r.text
    r = hostile.get(f"/s/{ids['session']}/bisect?grep=calls")
    assert r.status_code == 200 and "[" * 1000 in r.text


def test_a_stored_value_nested_past_the_encoder_renders_as_a_note() -> None:
    from alpstore.codec import Digest
    from alpstore.sessions import Entry
    from alpstore.ui.present import TOO_DEEP, message

    deep: list[Any] = []
    inner = deep
    for _ in range(5000):  # deeper than any stack: the store takes what its writer's allowed
        inner.append([])
        inner = inner[0]
    m = message(Entry(Digest(bytes(32)), "message", {"role": "tool", "content": deep}))
    assert m.text == TOO_DEEP


def test_invisible_and_bidi_characters_show_as_escapes_on_every_page(
    hostile: Any, hostile_store: tuple[Store, dict[str, Any]]
) -> None:
    ids = hostile_store[1]
    pages = [f"/c/{ids['first']}", f"/diff?a=other@latest&b={ids['first']}"]
    for path in pages:
        r = hostile.get(path)
        assert r.status_code == 200, (path, r.text)
        for char, escape in HIDDEN.items():
            assert char not in r.text, (path, escape)
            assert escape in r.text, (path, escape)


def test_the_live_timeline_gets_labels_escaped_like_the_page(
    hostile: Any, hostile_store: tuple[Store, dict[str, Any]]
) -> None:
    # ui.js appends polled rows with textContent: what the poll sends is what the reader sees
    r = hostile.get(f"/s/{hostile_store[1]['session']}/poll?after=0")
    assert r.status_code == 200
    rows = r.json()["rows"]
    texts = [rows[0]["label"], *(m for row in rows for m in row["markers"])]
    assert any(t.startswith("note") for t in texts[1:])
    for char, escape in HIDDEN.items():
        assert not any(char in t for t in texts), escape
        assert escape in rows[0]["label"]
        assert any(t.startswith("note") and escape in t for t in texts[1:])


def test_a_timeline_shows_events_whatever_their_details_hold(
    hostile: Any, hostile_store: tuple[Store, dict[str, Any]]
) -> None:
    # record_decision takes any JSON detail; an archive from elsewhere may hold any timestamp
    r = hostile.get(f"/s/{hostile_store[1]['session']}")
    assert r.status_code == 200, r.text
    assert r.text.count('class="marker ') == 6
    assert "fold: entries 0..1 (1) into summary <code>5</code>" in r.text
    assert "session 12345" in r.text and "a clock far off" in r.text
    for char, escape in HIDDEN.items():
        assert char not in r.text and escape in r.text


def test_the_host_is_checked_before_the_token(client: Any) -> None:
    r = client.get(
        "/?token=s3cret-token", headers={"host": "evil.example:4242"}, follow_redirects=False
    )
    assert r.status_code == 400 and "set-cookie" not in r.headers
    assert r.headers["content-security-policy"]  # security headers on the refusal too
    r = client.get(
        "http://127.0.0.1:4242//evil.example/?token=s3cret-token", follow_redirects=False
    )
    assert r.status_code == 303 and r.headers["location"] == "/evil.example/"


def test_a_claude_code_tool_use_is_a_tool_call_on_the_conversation_page(tmp_path: Path) -> None:
    """A Claude Code transcript's ``tool_use`` block shows as a call (name, arguments), its
    ``tool_result`` as the result, not as raw JSON blocks."""
    from starlette.testclient import TestClient

    from tests.conftest import run_cli

    lines = [
        {"type": "user", "uuid": "u1", "message": {"role": "user", "content": "clean up"}},
        {
            "type": "assistant",
            "uuid": "a1",
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "I'll clean up."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "Bash",
                        "input": {"command": "rm -rf build"},
                    },
                ],
            },
        },
        {
            "type": "user",
            "uuid": "u2",
            "message": {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "removed"}
                ],
            },
        },
    ]
    root = tmp_path / "run"
    root.mkdir()
    path = tmp_path / "cc.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    r = run_cli("--root", str(root), "session", "import", str(path), "--name", "cc")
    assert r.code == 0, r.err
    ro = read_only(root)
    try:
        head = ro.resolve_checkpoint("cc@latest")
        settings_ = Settings(ro, "tok", 4242, ["127.0.0.1"], tmp_path)
        with TestClient(create_app(settings_), base_url="http://127.0.0.1:4242") as c:
            c.get("/?token=tok")
            page = c.get(f"/c/{head.id}")
    finally:
        ro.close()
    assert page.status_code == 200, page.text
    assert '<span class="fn">Bash</span> <span class="callid">toolu_1</span>' in page.text
    assert (
        "&#34;command&#34;: &#34;rm -rf build&#34;" in page.text
        or '"command": "rm -rf build"' in page.text
    )
    assert "I&#39;ll clean up." in page.text or "I'll clean up." in page.text
    assert "result: removed" in page.text
    assert '"type": "tool_use"' not in page.text and "&#34;tool_use&#34;" not in page.text
