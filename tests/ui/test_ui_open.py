"""`ui --open` and `ui --host 0.0.0.0` through the real command (issue 30, item 10 a, b).

``--open`` hands the browser a one-time code, never the token: a command line is readable by
every local user (``ps``). The code is exchanged once for the session cookie and expires.
Bound to every interface, the server prints a URL that answers (not ``0.0.0.0``, which the
Host check refuses) and says which Host header values it accepts.
"""

from __future__ import annotations

import http.client
import json
import os
import shlex
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("starlette")

from alpstore.store import Store
from alpstore.ui.app import allowed_hosts
from alpstore.ui.settings import Settings
from tests.backend_pass import database_env_for
from tests.ui.conftest import start_ui, stop

RECORD = """\
import json, sys
with open(sys.argv[1], "w") as out:
    json.dump(sys.argv[2:], out)
"""
"""A stand-in browser: writes the argv it was started with, then exits (what `ps` shows)."""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    with Store.open(run) as store:
        store.create_session(session_id="demo").commit_turn([{"role": "user", "content": "hi"}])
    return run


def _env(root: Path) -> dict[str, str]:
    """The environment of the `alpstore ui` child: on the PostgreSQL pass, root's schema."""
    env = {k: v for k, v in os.environ.items() if k != "ALPSTORE_DATABASE_URL"}
    return {**env, **database_env_for(root)}


def get(
    url: str, *, host: str | None = None, cookie: str | None = None
) -> http.client.HTTPResponse:
    """One GET, redirects not followed."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    headers = {}
    if host is not None:
        headers["Host"] = host
    if cookie is not None:
        headers["Cookie"] = cookie
    conn.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""), headers=headers)
    response = conn.getresponse()
    response.read()
    conn.close()
    return response


@pytest.fixture
def opened(root: Path, tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """`alpstore ui --open` with a recording browser: (printed URL, the browser's argv)."""
    script = tmp_path / "browser.py"
    script.write_text(RECORD)
    argv_file = tmp_path / "argv.json"
    browser = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} {argv_file} %s"
    env = {**_env(root), "BROWSER": browser}
    proc, url = start_ui(["--root", str(root), "ui", "--port", "0", "--open"], env=env)
    try:
        deadline = time.monotonic() + 30
        while not argv_file.exists() or not argv_file.read_text():
            assert time.monotonic() < deadline, "the browser was never started"
            assert proc.poll() is None, "alpstore ui exited"
            time.sleep(0.05)
        time.sleep(0.05)  # the recording browser writes one small file, then exits
        yield url, json.loads(argv_file.read_text())
    finally:
        stop(proc)


def test_open_hands_the_browser_no_token_and_a_code_that_works_once(
    opened: tuple[str, list[str]],
) -> None:
    url, argv = opened
    token = url.split("token=", 1)[1]
    assert token and all(token not in arg for arg in argv), argv
    (opened_url,) = argv
    assert "token" not in opened_url and "?code=" in opened_url, opened_url
    first = get(opened_url)
    assert first.status == 303, first.status
    cookie = first.getheader("set-cookie") or ""
    assert token in cookie  # exchanged for the session cookie
    assert get(url.split("?", 1)[0], cookie=cookie.split(";", 1)[0]).status == 200
    again = get(opened_url)
    assert again.status == 401, "the one-time code worked twice"
    assert not again.getheader("set-cookie")
    assert get(url).status == 303  # the printed token URL still works


def test_a_one_time_code_expires_and_is_replaced(tmp_path: Path) -> None:
    settings = Settings(None, "tok", 1, ["127.0.0.1"])  # type: ignore[arg-type]
    late = settings.new_open_code(lifetime=0.0)
    assert not settings.take_open_code(late)  # expired
    assert not settings.take_open_code(late)  # and gone
    old = settings.new_open_code()
    new = settings.new_open_code()
    assert not settings.take_open_code(old)
    assert not settings.take_open_code("")
    assert settings.take_open_code(new)
    assert not settings.take_open_code(new)


def test_host_wildcard_prints_a_url_that_answers(root: Path) -> None:
    proc, url = start_ui(
        ["--root", str(root), "ui", "--port", "0", "--host", "0.0.0.0"], env=_env(root)
    )
    try:
        assert "0.0.0.0" not in url, url
        assert get(url).status == 303  # was 400: the Host check refused "0.0.0.0"
        port = urlsplit(url).port
        assert proc.stdout is not None
        said = proc.stdout.readline()
        assert said.startswith("answers to Host: "), said
        accepted = said.removeprefix("answers to Host: ").strip().split(", ")
        assert "127.0.0.1" in accepted and "0.0.0.0" not in accepted
        name = socket.gethostname()
        assert name in accepted
        for host in (name, "127.0.0.1", "localhost"):
            assert get(url, host=f"{host}:{port}").status == 303, host
        assert get(url, host=f"evil.example:{port}").status == 400
        assert get(url, host=f"0.0.0.0:{port}").status == 400
    finally:
        stop(proc)


def test_allowed_hosts_for_every_interface_are_the_machines_names_never_the_wildcard() -> None:
    for wildcard in ("0.0.0.0", "::"):
        hosts = allowed_hosts(wildcard, machine=["box", "box.lan", "10.0.0.5", "fe80::1"])
        assert {"127.0.0.1", "localhost", "box", "box.lan", "10.0.0.5", "[fe80::1]"} <= set(hosts)
        assert wildcard not in hosts and "0.0.0.0" not in hosts
    assert allowed_hosts("192.168.1.9") == [*allowed_hosts("127.0.0.1"), "192.168.1.9"]
